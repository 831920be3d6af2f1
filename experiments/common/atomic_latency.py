"""The latency of a global load issued right behind a warp's atomic adds: what a backward's
first tile loads of a step wait after the step before added its dQ_i into HBM.

Why: ncu's per-instruction samples of backward v14 (H200, 2026-12-04,
results/h200/stalls/model_v14_diagnosis_2026-12-04.md) put ~530 cycles a warp and trip of
"long scoreboard" on the first consumer of a step's Qi / dOi loads: a round trip of ~800
cycles, where a dependent load that hits L2 takes 278 (``l2_hit_latency_cycles``). Those loads
follow the previous step's 64 ``REDG.E.ADD.F32`` of dQ_i (8 sectors each), which the 64 blocks
of a head issue into the same lines at about the same time. Two suspects: the SM's own queue of
reductions ahead of the load, and the L2 slices serialising adds into one line from many SMs.

The kernel: one block of ``WARPS`` warps an SM (``ONE_BLOCK_SMEM``); each warp follows a chain
of dependent ``ld.global.cg`` (an L2-resident pointer chase, every lane the same word) and
before each load issues ``k`` ``red.global.add.f32`` (``cuda.atomic.add``, its result unused:
``RED.E.ADD.F32``) whose value depends on the load before, so that they issue only once it
has returned and the next load enters the memory pipeline right behind them. A reduction's 32
lanes write an mma C fragment's pattern into a 16 x 128 fp32 tile (dQ_i at Br = 16, d = 128):
8 rows x 4 consecutive words, 8 sectors. ``PRIVATE``: each block adds into its own tile;
``SHARED``: every block of the grid into one tile (the lines a head's blocks share). A row:
``load_after_red_cycles`` = cycles an iteration (k reductions and one load) of one warp, the
median SM's, at k = 0 (the chase alone), 8, 32 and 64, in each mode (``detail``). Under the
simulator the kernel runs, tiny, once; nothing is measured.
"""
from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint32

from numba_flash.kernels.unroll import static_range, unrolled
from numba_flash.launch import launch

from .microbench import (CHASE_BYTES, CHASE_STRIDE_WORDS, ONE_BLOCK_SMEM, UNCACHED, Bench, Measurement,
                         _mark, chase_links, primitives, rate_per_sm)

#: Warps a block (one block an SM, as the backward at d = 128 runs 8 warps an SM).
WARPS = 8
PRIVATE, SHARED = 0, 1
MODES = {PRIVATE: "each block its own tile", SHARED: "every block one tile"}
#: Reductions a warp issues before each load.
REDUCTIONS = (0, 8, 32, 64)
#: The tile the reductions add into: TILE_ROWS x TILE_WORDS fp32 (dQ_i of a 16 x 128 step).
TILE_ROWS, TILE_WORDS = 16, 128
#: A reduction's sectors: lanes l add at row l // 4 (+ 8 every other reduction), word l % 4.
FRAGMENT_ROWS, FRAGMENT_WORDS = 8, 4
MEASURED_BY = "clock64, one block of 8 warps an SM, each warp: k red.global.add.f32, then a dependent ld.global.cg"


@lru_cache(maxsize=None)
def load_after_red_kernel(k: int):
    """load_after_red(mode, data, tiles, iterations, out, timing), ``k`` reductions a load
    (built per k, unrolled: each reduction one RED at a constant offset, back to back as the
    backward's dQ_i adds): every warp follows the chain in ``data`` (each word the index of
    the next, < 2^31; warp w of block b starts at word (b WARPS + w) ``CHASE_STRIDE_WORDS``),
    ``iterations`` times: ``k`` reductions into ``tiles`` (``MODES[mode]``; reduction j at
    rows 8 (j mod 2) + lane // 4, words 4 ((j // 2) mod 32) + lane mod 4), then one load. The
    launches that size and warm up the measurement have left the chain's lines in L2 (4 MiB
    of the 60 MB)."""
    p, mark = primitives(), _mark()
    ldcg = p.ldg1_cg
    tile = TILE_ROWS * TILE_WORDS
    offsets = tuple(FRAGMENT_ROWS * TILE_WORDS * (j % 2) + FRAGMENT_WORDS * ((j // 2) % (TILE_WORDS // FRAGMENT_WORDS))
                    for j in range(k))

    def load_after_red(mode, data, tiles, iterations, out, timing):
        lane = cuda.threadIdx.x % 32
        warp = cuda.threadIdx.x // 32
        at = uint32((cuda.blockIdx.x * (cuda.blockDim.x // 32) + warp) * CHASE_STRIDE_WORDS % data.size)
        own = (0 if mode == SHARED else cuda.blockIdx.x * tile) + (lane // FRAGMENT_WORDS) * TILE_WORDS \
            + lane % FRAGMENT_WORDS
        mark(timing, 0)
        for _ in range(iterations):
            one = float32(1.0) + float32(at >> 31)     # 1, once the load before is back
            for j in static_range(k):
                cuda.atomic.add(tiles, own + offsets[j], one)
            at = ldcg(data, at)[0]
        mark(timing, 1)
        out[cuda.grid(1)] = at
    return cuda.jit(unrolled(load_after_red))


def measure(bench: Bench) -> list[Measurement]:
    """One row a mode and reduction count: cycles an iteration of a warp (k reductions and the
    load behind them), the median SM's."""
    nbytes = CHASE_BYTES[UNCACHED] if not bench.simulated else 4 * 32 * CHASE_STRIDE_WORDS
    data = cuda.to_device(chase_links(nbytes))
    grid, threads = bench.sm_count, bench.threads(WARPS)
    tiles = cuda.to_device(np.zeros(grid * TILE_ROWS * TILE_WORDS, np.float32))
    out, table = cuda.device_array(grid * threads, np.uint32), bench.table(grid)
    rows = []
    for mode, k in itertools.product(MODES, REDUCTIONS):
        def go(n, mode=mode, kernel=load_after_red_kernel(k)):
            launch(kernel, grid, threads, ONE_BLOCK_SMEM, mode, data, tiles, n, out, table)
        runs = bench.runs(go, table, 10)
        cycles = [1 / rate_per_sm(t, runs.n) for t in runs.tables]
        rows.append(bench.measurement(
            "load_after_red_cycles", "cycles", MEASURED_BY, runs, cycles, warps_per_sm=WARPS,
            blocks_per_sm=1, detail=f"k={k}; {MODES[mode]}; reductions of 8 sectors into a "
                                    f"{TILE_ROWS} x {TILE_WORDS} fp32 tile; chase over "
                                    f"{nbytes // 1024} KB (L2 hits)"))
    return rows


if __name__ == "__main__":   # python -m experiments.common.atomic_latency OUT.csv: these rows alone
    import sys
    from pathlib import Path

    from experiments.calibrate import NAME, row
    from experiments.common.metadata import run_metadata
    from experiments.common.results import write_rows
    from numba_flash.memory import simulator_enabled

    bench = Bench(simulated=simulator_enabled())
    write_rows(Path(sys.argv[1]), [row(m) for m in measure(bench)],
               run_metadata(NAME, "cpu" if bench.simulated else "gpu", " ".join(["python -m experiments.common.atomic_latency", *sys.argv[1:]])))
