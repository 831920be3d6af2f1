#!/bin/bash
# Per-instruction-issued stall reasons (ncu smsp__average_warps_issue_stalled_*_per_issue_active)
# and the top stall locations (SourceCounters) of the tensor-core forward and backward, fp32,
# 4 x 16 x 4096 at d = 64 and 128 (issue 16). From the repository root on the GPU machine:
#   source .whl/prefix.sh; bash results/h200/stalls/stall_reasons.sh OUT
out=${1:?out folder}
mkdir -p "$out"
cat > "$out/stall_cases.json" <<'JSON'
[{"method": "fa2", "passes": "fwd_bwd", "B": 4, "H": 16, "N": 4096, "d": 128, "causal": false,
  "tiling": null, "deterministic": false, "dtype": "float32", "window": null, "kv_heads": null},
 {"method": "fa2", "passes": "fwd_bwd", "B": 4, "H": 16, "N": 4096, "d": 64, "causal": false,
  "tiling": null, "deterministic": false, "dtype": "float32", "window": null, "kv_heads": null}]
JSON
python3 -c "
import json, sys, numba_flash
from experiments.common.cases import Case
from experiments.common.kernels import kernel_config
cases = [Case.from_json(c) for c in json.load(open(sys.argv[1]))]
print(numba_flash.warmup([kernel_config(c) for c in cases]))" "$out/stall_cases.json"
ncu --clock-control none --profile-from-start off --kernel-name regex:flash_ \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    --section SourceCounters \
    python3 -m experiments.common.ncu_target "$out/stall_cases.json" "$out/stall_result.json" \
    > "$out/ncu_stall_reasons.txt" 2>&1
echo "ncu rc $?"
