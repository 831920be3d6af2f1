#!/bin/bash
# Where the tensor-core kernels' time goes (issue 16): fp32, 4 x 16 x 4096, d = 128 and 64, the
# kernels built first. Three ncu runs, each launch profiled again:
#  - ncu_backward_stalls.txt: the backward's (flash_backward_tc) warp-state, scheduler, compute,
#    memory, occupancy and launch sections;
#  - ncu_stall_reasons.txt: cycles stalled per instruction issued, by reason
#    (smsp__average_warps_issue_stalled_*_per_issue_active), and the source counters, of the
#    forward and the backward;
#  - source_stalls.csv.gz / source_stalls.txt: the per-instruction warp-state samples of both
#    (ncu's source page as CSV, SASS) and tools/stall_ledger.py's summary of them by opcode.
# From the repository root on the GPU machine (on 2026-12-04 each was its own script, run in
# its own call: results/h200/stalls/*_2026-12-04.txt; the source samples then took the forward
# alone at d = 64, not forward + backward):
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
profile() {   # profile OUTPUT KERNEL-REGEX NCU-OPTIONS...
    local log=$1 kernels=$2
    shift 2
    ncu --clock-control none --profile-from-start off --kernel-name "regex:$kernels" "$@" \
        python3 -m experiments.common.ncu_target "$out/stall_cases.json" "$out/stall_result.json" \
        > "$out/$log" 2>&1
    echo "ncu ($log) rc $?"
}
profile ncu_backward_stalls.txt flash_backward_tc \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
profile ncu_stall_reasons.txt flash_ \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    --section SourceCounters
profile source_stalls_ncu.log "flash_backward_tc|flash_forward_fa2_tc" \
    --section WarpStateStats --section SourceCounters --section SchedulerStats \
    --section ComputeWorkloadAnalysis --import-source no -o "$out/source_stalls"
ncu -i "$out/source_stalls.ncu-rep" --page source --csv --print-source sass \
    > "$out/source_stalls.csv"
python3 tools/stall_ledger.py "$out/source_stalls.csv" > "$out/source_stalls.txt"
gzip -f "$out/source_stalls.csv"
