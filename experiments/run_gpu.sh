#!/usr/bin/env bash
# All GPU results in one go. Each experiment first builds its kernels in parallel processes into
# numba_flash's disk cache ($NUMBA_FLASH_CACHE_DIR; keep it between machines to skip compiling).
# H200, 2026-12-01, a cache filled by the GPU tests: `SKIP_BENCH=1 bash experiments/run_gpu.sh OUT`
# (without train_gpt) took 157 s, the bench (--quick) 207 s and train_gpt (200 steps) 93 s, in
# three calls: ~460 s together, inside one 10-minute device call (not yet run as one command):
#   source .whl/prefix.sh; bash experiments/run_gpu.sh "$OUT"          (--quick point sets)
#   source .whl/prefix.sh; bash experiments/run_gpu.sh "$OUT" --full   (every point; > 9 min)
# Each experiment runs in its own process under its own time limit, so one that overruns or
# crashes costs only its own CSV; validation runs last over whatever the others wrote.  The
# results folder and the log are packed into DEST/results.tar.gz (plus the log beside it), the
# kernel cache (unless SKIP_PACK=1) into DEST/kc.tar.xz.000, ... (carry them back in as .kc/).
set -u
dest=${1:?usage: run_gpu.sh DEST [--full]}
mode=--quick
[ "${2:-}" = "--full" ] && mode=
results=/tmp/numba-flash-results
rm -rf "$results"; mkdir -p "$results" "$dest"
log=$results/run_gpu.log
export PYTHONUNBUFFERED=1
run() {  # run LIMIT_S ARGS...: one CLI call, limited to LIMIT_S seconds, logged
  local limit=$1; shift
  echo "### $(date -u +%FT%TZ) python -m experiments $* (limit ${limit}s)" | tee -a "$log"
  timeout -k 10 "$limit" python3 -m experiments "$@" --device gpu $mode --out "$results" >>"$log" 2>&1
  echo "### exit $?" | tee -a "$log"
}
# a kernel cache carried in (KERNEL_ARCHIVE, default .kc/kc.tar.xz: the pieces of an earlier
# run's `precompile --pack`) fills the disk cache first; the run ends by packing it into DEST
archive=${KERNEL_ARCHIVE:-.kc/kc.tar.xz}
if [ -e "$archive" ] || [ -e "$archive.000" ]; then
  python3 -m numba_flash.precompile --unpack "$archive" 2>&1 | tee -a "$log"
fi
# then every kernel the experiments below launch, in one warm-up on all the cores (H200,
# 2026-12-02, an empty cache: the --quick sets' and the GPU tests' 101 configs, 213 kernels, in
# 344 s; each experiment's own warm-up then only loads them, 4-9 s)
echo "### $(date -u +%FT%TZ) python -m experiments kernels $mode" | tee -a "$log"
timeout -k 10 560 python3 -m experiments kernels $mode >>"$log" 2>&1
echo "### exit $?" | tee -a "$log"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >>"$log" 2>&1
which ncu >>"$log" 2>&1; ncu --version >>"$log" 2>&1
# the machine rates (the model's time predictions below use them), then ncu on the copy and
# L2-residue microbenchmarks (copy_sectors, the residue sweep: not timed on a GPU yet, ~40 s?)
run 150 run calibrate
[ -s "$results/calibrate/calibrate.csv" ] && export NUMBA_FLASH_RATES_CSV=$results/calibrate/calibrate.csv
run 200 run levels       # every level of every shipped kernel: development and held-out configurations
# fp32 rows only (quick shapes: 207 s on 2026-12-01, 89 s of it building 14 kernels); the fp16 /
# bf16 rows are their own command (README: `bench --dtype float16 bfloat16`, 194 s)
[ -n "${SKIP_BENCH:-}" ] || run 400 bench --dtype float32
run 75 run fig2_left
run 75 run io_scaling
run 60 run l2_effect
run 60 run fig2_middle
# runtime: --quick 70 s on the H200 on 2026-12-03 (kernels in the cache); every point (N to
# 64K, 56 of ours + 168 SDPA) did not finish in 424 s (ours took ~290 s, SDPA 108 of 168 by
# then): give it a call of its own
if [ -n "$mode" ]; then run 75 run runtime; else run 560 run runtime; fi
run 50 run memory
# sliding window and GQA against dense causal, 24 cases (quick); not yet run on a GPU (the
# time limit is a guess): its windowed / grouped kernels build first, in parallel (warmup)
run 300 run window
# block-sparse against dense FlashAttention, 16 cases (quick): 241 s on the H200 on 2026-12-02
# (inputs as numba device arrays), 107 s of it building its 8 configs' kernels into a cache
# that held none of them; the full sweep (32 cases) needs ~400 s
run 360 run block_sparse
# Fig. 3, dropout 0.1 + padding vs N, 8 cases (quick): 113 s on the H200 on 2026-12-03 with its
# kernels built (124 s more to build them into an empty cache); the full sweep (16) 213 s
run 300 run fig3
# ring attention: P = 1 on a one-GPU machine (P > GPUs skipped and said so); not yet run on a GPU
run 200 run ring
[ -n "${SKIP_TRAIN:-}" ] || run 200 run train_gpt
run 20 run validation
tar -C "$(dirname "$results")" -czf "$dest/results.tar.gz" "$(basename "$results")"
# (on 2026-12-02 the 192 kernels above took 839 MB on disk; --pack, then one-thread lzma at
# preset 9, did not finish in the ~100 s left of that call: it now runs xz on every core)
[ -n "${SKIP_PACK:-}" ] || python3 -m numba_flash.precompile --pack "$dest/kc.tar.xz" --part-mib 15 2>&1 | tee -a "$log"
cp "$log" "$dest/run_gpu.log"
grep -E "^### |FAILED|FAILURE|MISMATCH|Traceback" "$log" | tail -40
