#!/bin/bash
# Where fa2_fp16x3's forward spends its time (issue 12: the model predicts it 13-33 % fast):
# fp32 from fp16 parts, 4 x 16 x 4096 at d = 64 and 128, the kernels built first. One ncu run
# of the fp16 kernel's launches (flash_forward_half in its fp32 mode): cycles stalled per
# instruction issued by reason (smsp__average_warps_issue_stalled_*_per_issue_active), warp
# state, scheduler, compute and source counters -> ncu_fp16x3_stalls.txt.
# From the repository root on the GPU machine:
#   source .whl/prefix.sh; bash results/h200/stalls/fp16x3_stalls.sh OUT
out=${1:?out folder}
mkdir -p "$out"
cat > "$out/fp16x3_cases.json" <<'JSON'
[{"method": "fa2_fp16x3", "passes": "fwd", "B": 4, "H": 16, "N": 4096, "d": 64, "causal": false,
  "tiling": null, "deterministic": false, "dtype": "float32", "window": null, "kv_heads": null},
 {"method": "fa2_fp16x3", "passes": "fwd", "B": 4, "H": 16, "N": 4096, "d": 128, "causal": false,
  "tiling": null, "deterministic": false, "dtype": "float32", "window": null, "kv_heads": null}]
JSON
python3 -c "
import json, sys, numba_flash
from experiments.common.cases import Case
from experiments.common.kernels import kernel_config
cases = [Case.from_json(c) for c in json.load(open(sys.argv[1]))]
print(numba_flash.warmup([kernel_config(c) for c in cases]))" "$out/fp16x3_cases.json"
ncu --clock-control none --profile-from-start off --kernel-name "regex:flash_forward_half" \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section Occupancy --section SourceCounters \
    python3 -m experiments.common.ncu_target "$out/fp16x3_cases.json" "$out/fp16x3_result.json" \
    > "$out/ncu_fp16x3_stalls.txt" 2>&1
echo "ncu rc $?"
