#!/bin/bash
# Per-instruction warp-state samples (issue 16): ncu's SourceCounters of the fp32 tensor-core
# kernels at (4, 16, 4096): the forward + backward at d = 128, the forward at d = 64, built
# first; the source page exported as CSV (SASS), read by tools/stall_ledger.py.
# From the repository root on the GPU machine:
#   source .whl/prefix.sh; bash results/h200/stalls/source_stalls.sh OUT
# (2026-12-04: v13's backward, then v14's, from scripts of this content run from an ignored
# folder; the ledgers: source_stalls_2026-12-04.txt.)
out=${1:?out folder}
mkdir -p "$out"
cat > "$out/source_cases.json" <<'JSON'
[{"method": "fa2", "passes": "fwd_bwd", "B": 4, "H": 16, "N": 4096, "d": 128, "causal": false,
  "tiling": null, "deterministic": false, "dtype": "float32", "window": null, "kv_heads": null},
 {"method": "fa2", "passes": "fwd", "B": 4, "H": 16, "N": 4096, "d": 64, "causal": false,
  "tiling": null, "deterministic": false, "dtype": "float32", "window": null, "kv_heads": null}]
JSON
python3 -c "
import json, sys, numba_flash
from experiments.common.cases import Case
from experiments.common.kernels import kernel_config
cases = [Case.from_json(c) for c in json.load(open(sys.argv[1]))]
print(numba_flash.warmup([kernel_config(c) for c in cases]))" "$out/source_cases.json"
ncu --clock-control none --profile-from-start off --kernel-name "regex:flash_backward_tc|flash_forward_fa2_tc" \
    --section WarpStateStats --section SourceCounters --section SchedulerStats \
    --section ComputeWorkloadAnalysis --import-source no -o "$out/source_stalls" \
    python3 -m experiments.common.ncu_target "$out/source_cases.json" "$out/source_result.json" \
    > "$out/source_stalls_ncu.log" 2>&1
echo "ncu rc $?"
ncu -i "$out/source_stalls.ncu-rep" --page source --csv --print-source sass > "$out/source_stalls.csv"
ncu -i "$out/source_stalls.ncu-rep" --page details > "$out/source_stalls_details.txt"
python3 tools/stall_ledger.py "$out/source_stalls.csv" > "$out/source_stalls.txt"
gzip -f "$out/source_stalls.csv"
