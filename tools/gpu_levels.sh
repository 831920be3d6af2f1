#!/bin/bash
# One device call that measures what the cost model needs of a GPU, to a deadline: the
# launch-cost microbenchmarks (calibrate's rows the row kernels are timed from; skipped on an
# H100, whose rows are in simulator/rates_h100.csv), then experiments/levels.py's splits one
# after another (each its own process and CSV, so a split cut by the deadline costs only
# itself), their kernels built first in parallel (each config once, as
# experiments.common.kernels.build_kernels builds an experiment's).
# From the repository root, in this workplace's device sandbox (carry .whl):
#   COMMIT=$(git rev-parse --short HEAD) SPLITS="development validation ..." [DEADLINE=560] \
#     bash tools/gpu_levels.sh          # writes $OUT/levels.tgz: launch_cost.csv, <split>/levels_kernels_<split>.csv
# Everything is written under a folder of its own and packed into one archive in $OUT at the
# end: the device tool returns only a few files of $OUT (on 2026-12-07 a run's 40 files came
# back as 8, its CSVs left out for their count). A split whose ncu run finished but whose rows
# the deadline cut (its ncu/ folder complete, no CSV) is finished on any machine:
#   python -m experiments.levels finish SPLIT DIR/SPLIT DIR/OTHER/levels_kernels_OTHER.csv
# The kernels go to the git-ignored .kc/ (NUMBA_FLASH_CACHE_DIR), which a warm machine keeps
# between calls: a second call (SKIP_LC=1, the splits the first did not reach) then builds
# nothing; on a fresh machine it builds only its own splits' kernels.
source .whl/prefix.sh
RETURN=$OUT; OUT=$(mktemp -d); export OUT
trap 'tar -C "$OUT" -czf "$RETURN/levels.tgz" .' EXIT
export NUMBA_FLASH_CACHE_DIR=${NUMBA_FLASH_CACHE_DIR:-$PWD/.kc} NUMBA_FLASH_COMMIT=${COMMIT:?} PYTHONUNBUFFERED=1
start=$(date +%s); deadline=${DEADLINE:-560}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/device.txt 2>&1
grep -q H100 $OUT/device.txt && SKIP_LC=1
if [ -z "${SKIP_LC:-}" ]; then
python3 -c "
from pathlib import Path; import os
from experiments.common import launch_cost as l; from experiments import calibrate
from experiments.common.results import write_rows; from experiments.common.metadata import run_metadata
rows=[calibrate.row(m) for m in l.measure(True)]
write_rows(Path(os.environ['OUT'])/'launch_cost.csv', rows, run_metadata('calibrate','gpu','experiments.common.launch_cost.measure(True) via calibrate.row (tools/gpu_levels.sh)'))
" > $OUT/launch_cost.log 2>&1
echo "launch cost rc $? at $(( $(date +%s)-start )) s" >> $OUT/progress.txt
fi
# the warm-up too ends by the deadline (what it built stays in .kc/; a split builds the rest)
timeout -k 5 $(( deadline - ($(date +%s) - start) )) python3 -c "
import numba_flash
from experiments.levels import SPLITS
from experiments.common.kernels import kernel_config
cfgs = list(dict.fromkeys(kernel_config(c) for s in '${SPLITS:?}'.split() for c in SPLITS[s]))
print(len(cfgs), 'configs'); print(numba_flash.warmup(cfgs))
" > $OUT/warmup.log 2>&1
echo "warmup rc $? at $(( $(date +%s)-start )) s" >> $OUT/progress.txt
for s in $SPLITS; do
  left=$(( deadline - ($(date +%s) - start) ))
  [ $left -lt 40 ] && { echo "skip $s" >> $OUT/progress.txt; continue; }
  timeout -k 5 $left python3 -m experiments.levels $s $OUT/$s > $OUT/$s.log 2>&1
  echo "$s rc $? at $(( $(date +%s)-start )) s" >> $OUT/progress.txt
done
cat $OUT/progress.txt
