#!/bin/bash
# ncu's warp-state, scheduler, compute and memory sections of the tensor-core backward
# (flash_backward_tc v13) at d = 128 (16 x 64, warp pairs) and d = 64 (32 x 128), fp32, 4 x 16 x
# 4096, beside each other: where the d = 128 backward's time goes (issue 16: it runs at ~0.6 of
# SDPA EFFICIENT_ATTENTION's backward). Run from the repository root on the GPU machine:
#   source .whl/prefix.sh; bash results/h200/stalls/backward_stalls.sh OUT
out=${1:?out folder}
mkdir -p "$out"
cat > "$out/backward_cases.json" <<'JSON'
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
print(numba_flash.warmup([kernel_config(c) for c in cases]))" "$out/backward_cases.json"
ncu --clock-control none --profile-from-start off --kernel-name regex:flash_backward_tc \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    python3 -m experiments.common.ncu_target "$out/backward_cases.json" "$out/backward_result.json" \
    > "$out/ncu_backward_stalls.txt" 2>&1
echo "ncu rc $?"
