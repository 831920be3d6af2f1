#!/usr/bin/env bash
# All GPU results, in as many 10-minute device calls as they take: each call goes on where the
# last one stopped, and no experiment is cut by a time limit of its own.
#
#   source .whl/prefix.sh; bash experiments/run_gpu.sh DEST [--full]      (--quick point sets by default)
#
# The run's state -- the results folder and a marker per finished step -- is DEST/results.tgz;
# carry that archive into the next call (RESUME=path/to/results.tgz, default DEST/results.tgz
# where it exists) and run the same command: finished steps are skipped. A step starts only
# when the call has its expected time left (STEP_S below) and then runs to the call's deadline
# (DEADLINE seconds after the start, default 560); one the deadline cuts is not marked finished
# and runs again, first, in the next call. The call ends by packing DEST/results.tgz and
# copying the log and progress beside it (three files: the device tool returns only a few);
# `progress.txt` names the steps left ("all steps done" once there are none). In this
# workplace's device sandbox DEST (the call's $OUT) starts empty: keep each call's results.tgz
# here in the git-ignored results-tmp/, carry it (carry ["results-tmp"]) and pass
# RESUME=results-tmp/results.tgz (a few MB).
#
# Steps, in order: calibrate (the model's time predictions below use the rates it measures:
# NUMBA_FLASH_RATES_CSV), levels one split at a time (experiments/levels.py's SPLITS, each its
# own process and CSV), then the levels table gathered and predicted, bench (fp32 rows; not with
# SKIP_BENCH=1), fig2_left, io_scaling, l2_effect, fig2_middle, runtime, memory, window,
# block_sparse, fig3, ring, train_gpt (not with SKIP_TRAIN=1), and validation over whatever the
# others wrote. STEPS="calibrate levels:development fig2_left ..." runs those alone.
#
# Kernels: each step builds what it launches in parallel processes into numba_flash's disk
# cache, NUMBA_FLASH_CACHE_DIR (default the git-ignored .kc/, which a warm device machine keeps
# between calls); KERNEL_ARCHIVE (default .kc/kc.tar.xz, `precompile --pack`'s pieces) fills
# it first where it exists. DEVICE=cpu runs the same steps on the CPU (the model and the CUDA
# simulator; the levels splits, which need ncu, are skipped): how tests/test_run_gpu.py checks
# the resuming.
set -u
dest=${1:?usage: run_gpu.sh DEST [--full]}
mode=--quick
[ "${2:-}" = "--full" ] && mode=
device=${DEVICE:-gpu}
start=$(date +%s); deadline=${DEADLINE:-560}
mkdir -p "$dest"; dest=$(cd "$dest" && pwd)
state=$(mktemp -d); results=$state/results; done_dir=$state/done
resume=${RESUME:-$dest/results.tgz}
[ -e "$resume" ] && tar -C "$state" -xzf "$resume"
mkdir -p "$results" "$done_dir"
log=$results/run_gpu.log
progress=$dest/progress.txt; : > "$progress"
export PYTHONUNBUFFERED=1 NUMBA_FLASH_CACHE_DIR=${NUMBA_FLASH_CACHE_DIR:-$PWD/.kc}
pack() {   # PACK_KERNELS=1: the disk cache too, as DEST/kc.tar.xz.000, ... (carry them in as .kc/)
  tar -C "$state" -czf "$dest/results.tgz" results done
  cp "$log" "$dest/run_gpu.log" 2>/dev/null
  [ -z "${PACK_KERNELS:-}" ] || python3 -m numba_flash.precompile --pack "$dest/kc.tar.xz" --part-mib 15 >> "$dest/run_gpu.log" 2>&1
}
trap pack EXIT

# expected seconds of each step on the H200 with its kernels to build (measured where a number
# is given in the comments; the rest are the old per-step limits): a step starts only with
# this much of the call left
declare -A STEP_S=(
  [calibrate]=150        # 2026-12-03: 120 s
  [levels:split]=150     # 2026-12-07: 60-95 s a split with its kernels built, ~300 s building all ten splits' first
  [levels]=120           # gathering and predicting, CPU only
  [bench]=400            # fp32 quick shapes, 207 s on 2026-12-01 (89 s of it building 14 kernels)
  [fig2_left]=75 [io_scaling]=75 [l2_effect]=60 [fig2_middle]=60
  [runtime]=75           # --quick 70 s on 2026-12-03; every point > 424 s: 560 with --full
  [memory]=50
  [window]=300           # 24 cases (quick)
  [block_sparse]=360     # 16 cases (quick): 241 s on 2026-12-02, 107 s of it building
  [fig3]=300             # 8 cases (quick): 113 s built, 124 s more to build
  [ring]=200 [train_gpt]=200 [validation]=20
)
[ -z "$mode" ] && STEP_S[runtime]=560

if [ -n "${STEPS:-}" ]; then
  steps=$STEPS
else
  steps="calibrate"
  for s in $(python3 -c "from experiments.levels import SPLITS; print(' '.join(SPLITS))"); do steps="$steps levels:$s"; done
  steps="$steps levels"
  [ -n "${SKIP_BENCH:-}" ] || steps="$steps bench"
  steps="$steps fig2_left io_scaling l2_effect fig2_middle runtime memory window block_sparse fig3 ring"
  [ -n "${SKIP_TRAIN:-}" ] || steps="$steps train_gpt"
  steps="$steps validation"
fi

archive=${KERNEL_ARCHIVE:-.kc/kc.tar.xz}
if [ "$device" = gpu ] && { [ -e "$archive" ] || [ -e "$archive.000" ]; }; then
  python3 -m numba_flash.precompile --unpack "$archive" >> "$log" 2>&1
fi
if [ "$device" = gpu ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> "$log" 2>&1
  ncu --version >> "$log" 2>&1
fi

command_of() {   # the command line of step $1
  case $1 in
    levels:*) echo "python3 -m experiments.levels ${1#levels:} $results/levels/${1#levels:}" ;;
    levels)   if [ "$device" = gpu ]; then
                echo "python3 -m experiments.levels gather $results/levels" \
                     "&& python3 -m experiments run levels --device cpu --out $results"
              else                     # no splits measured: the CPU mode's own cases
                echo "python3 -m experiments run levels --device cpu $mode --out $results"
              fi ;;
    bench)    echo "python3 -m experiments bench --dtype float32 --device $device $mode --out $results" ;;
    *)        echo "python3 -m experiments run $1 --device $device $mode --out $results" ;;
  esac
}

left_steps=""
for step in $steps; do
  marker=$done_dir/${step/:/__}
  [ -e "$marker" ] && continue
  if [ "$device" != gpu ] && [[ $step == levels:* ]]; then
    echo "### $step skipped: ncu needs the GPU" >> "$log"; continue
  fi
  [ -s "$results/calibrate/calibrate.csv" ] && [ "$device" = gpu ] \
    && export NUMBA_FLASH_RATES_CSV=$results/calibrate/calibrate.csv
  key=$step; [[ $step == levels:* ]] && key=levels:split
  left=$(( deadline - ($(date +%s) - start) ))
  if [ -n "$left_steps" ] || [ "$left" -lt "${STEP_S[$key]}" ]; then
    left_steps="$left_steps $step"; continue
  fi
  cmd=$(command_of "$step")
  echo "### $(date -u +%FT%TZ) $cmd (until the deadline: ${left}s)" >> "$log"
  timeout -k 10 "$left" bash -c "$cmd" >> "$log" 2>&1
  rc=$?
  echo "### exit $rc" >> "$log"
  echo "$step rc $rc at $(( $(date +%s) - start )) s" >> "$progress"
  if [ $rc -eq 0 ]; then
    touch "$marker"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    left_steps="$left_steps $step"          # cut by the deadline: first in the next call
  else
    touch "$marker"; echo "$step FAILED (rc $rc): see run_gpu.log" >> "$progress"
  fi
done
if [ -n "$left_steps" ]; then
  echo "steps left:$left_steps" >> "$progress"
else
  echo "all steps done" >> "$progress"
fi
cat "$progress"
