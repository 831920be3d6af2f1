"""How often a reused local-memory (spill) load hits L1, against the footprint reused and the
global lines streamed between two uses: ncu on a spill-like kernel.

Why: our kernels reload their spill slots once a main-loop trip, and between two reloads of a
slot the blocks on an SM touch all their slots (``stack_frame_bytes`` x resident threads) and
stream tiles through L1. ``simulator.local`` needs the hit rate of such a cyclic reuse as a
function of r = footprint / L1 capacity and s = streamed bytes / L1 capacity. LRU would give
all hits for r + s <= 1 and none above; a random replacement gives the fixed point
h = exp(-(r (1 - h) + s)); which one the H200's L1 follows is a property of the hardware, so
it is measured here, on a kernel that does nothing else:

- one block an SM of ``THREADS`` threads, its dynamic shared memory sized so that the driver's
  carveout leaves L1 ``l1_bytes`` (``SMEM_FOR_L1``: 28, 60, 92 or 124 KiB beside it) and so that
  no second block fits;
- each thread stores ``frame_words`` 4-byte words of a local array once, then for ``trips``
  trips loads all of them in the same order (indices from a run-time stride and shift, 1 and
  0, so that they stay in local memory and no trip's loads can be hoisted out of the loop) and
  streams ``stream_words`` 4-byte words of fresh global lines (coalesced: a
  warp reads 128 contiguous bytes a word), as a kernel's main loop reloads its spills and
  streams its tiles.

Each configuration runs twice, ``TRIPS`` and 2 ``TRIPS`` trips, so that the first trip (lines
not yet in L1) cancels: a row per (L1 capacity, footprint, stream), ``l1_local_reuse_hit_rate``
= the difference of ncu's local-load sectors that hit in L1
(``l1tex__t_sectors_pipe_lsu_mem_local_op_ld_lookup_hit``) over the difference of local-load
sectors (the detail has r, s, both models' rates and the raw counts). Under the simulator the
kernel runs (tests check its sums), nothing is measured.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32, int32

from .microbench import Measurement, ncu_rows

THREADS = 256
TRIPS = 16
KIB = 1024
#: dynamic shared memory a block -> the L1 bytes the H200's carveout leaves beside it (the
#: carveout: the smallest of 100, 132, 164, 196, 228 KiB holding it plus the 1 KiB reserved;
#: every size above 114 KiB, so one block an SM)
SMEM_FOR_L1 = {220 * KIB: 28 * KIB, 190 * KIB: 60 * KIB, 160 * KIB: 92 * KIB, 128 * KIB: 124 * KIB}
#: footprint / L1 capacity r of each run, and the streamed bytes / L1 capacity s
RATIOS = (0.5, 0.9, 1.0, 1.1, 1.25, 1.5, 1.75, 2.0, 3.0)
STREAM_SHARES = (0.0, 0.5, 1.0)
MEASURED_BY = ("ncu --kernel-name l1_reuse: l1tex__t_sectors_pipe_lsu_mem_local_op_ld_lookup_hit.sum "
               "over ..._local_op_ld.sum, 2 TRIPS trips less TRIPS trips")
METRICS = ("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum,"
           "l1tex__t_sectors_pipe_lsu_mem_local_op_ld_lookup_hit.sum,"
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,"
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum,"
           "l1tex__m_xbar2l1tex_read_sectors_mem_lg_op_ld.sum")


@lru_cache(maxsize=None)
def reuse_kernel(frame_words: int):
    """l1_reuse(stride, shift, trips, stream_words, src, out): the module docstring's kernel
    with a local array of ``frame_words`` words a thread; out[block THREADS + t] = thread t's
    sum (no load is dead). ``stride`` must be coprime to frame_words (1 in every run), ``shift``
    0 (the sums assume it)."""

    @cuda.jit
    def l1_reuse(stride, shift, trips, stream_words, src, out):
        slots = cuda.local.array(frame_words, float32)
        tid = cuda.threadIdx.x
        for j in range(frame_words):
            slots[(j * stride) % frame_words] = float32(tid + j)
        acc = float32(0)
        base = cuda.blockIdx.x * trips * stream_words * THREADS
        for t in range(trips):
            for j in range(frame_words):
                acc += slots[(j * stride + t * shift) % frame_words]
            for s in range(stream_words):
                acc += src[base + (t * stream_words + s) * THREADS + tid]
        out[cuda.blockIdx.x * THREADS + tid] = acc
    return l1_reuse


def runs(simulated: bool = False) -> list[tuple[int, int, int, int]]:
    """(dynamic shared bytes, frame words a thread, stream words a thread a trip, trips) of each
    launch, in launch order: each configuration at TRIPS, then 2 TRIPS trips; one tiny
    configuration under the simulator."""
    if simulated:
        return [(0, 4, 1, 1), (0, 4, 1, 2)]
    out = []
    for smem, l1 in SMEM_FOR_L1.items():
        for r in RATIOS:
            for s in STREAM_SHARES:
                frame, stream = max(1, round(r * l1 / (4 * THREADS))), round(s * l1 / (4 * THREADS))
                out += [(smem, frame, stream, TRIPS), (smem, frame, stream, 2 * TRIPS)]
    return out


def run_all(simulated: bool = False) -> list[np.ndarray]:
    """Launch each of ``runs(simulated)`` on one block an SM (the child ncu profiles; tiny under
    the simulator); returns each launch's ``out``."""
    from numba_flash.launch import launch

    blocks = 2 if simulated else cuda.get_current_device().MULTIPROCESSOR_COUNT
    plan = runs(simulated)
    longest = max(stream * trips for _, _, stream, trips in plan)
    src = cuda.to_device(np.ones(max(1, blocks * longest * THREADS), np.float32))
    outs = []
    for smem, frame, stream, trips in plan:
        out = cuda.device_array(blocks * THREADS, np.float32)
        launch(reuse_kernel(frame), blocks, THREADS, smem, int32(1), int32(0), int32(trips), int32(stream), src, out)
        outs.append(out.copy_to_host())
    return outs


def expected_sum(thread: int, frame_words: int, stream_words: int, trips: int) -> float:
    """What ``l1_reuse`` leaves in out for thread ``thread`` (src all ones)."""
    return trips * (frame_words * thread + frame_words * (frame_words - 1) / 2 + stream_words)


def random_replacement_hits(r: float, s: float) -> float:
    """The hit rate of a cyclic reuse of r L1 capacities of lines, s capacities of fresh lines
    streamed between two uses, under random replacement (a line survives each of the r (1 - h)
    + s capacities of misses in between with probability exp(-1) per capacity): the smallest
    fixed point of h = exp(-(r (1 - h) + s)), which a cold cache reaches (1 when r <= 1 and
    s = 0)."""
    def excess(h: float) -> float:
        return math.exp(-(r * (1 - h) + s)) - h

    grid = [i / 1000 for i in range(1001)]
    hi = next((h for h in grid if excess(h) <= 0), 1.0)
    lo = max(0.0, hi - 1e-3)
    for _ in range(40):                        # bisect the first sign change
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return hi


CHILD = "from experiments.common.l1_reuse import run_all; run_all()"


def rows_from(kernels: list[dict]) -> list[Measurement]:
    """One row per configuration (pairs of ``runs()``) from ncu's per-kernel readings, in
    launch order."""
    rows = []
    plan = runs()
    for (smem, frame, stream, _), short, long in zip(plan[::2], kernels[::2], kernels[1::2]):
        l1 = SMEM_FOR_L1[smem]
        reused = long["local_ld_sectors"] - short["local_ld_sectors"]
        hits = long["local_ld_hit_sectors"] - short["local_ld_hit_sectors"]
        r, s = frame * 4 * THREADS / l1, stream * 4 * THREADS / l1
        detail = {"l1_bytes": l1, "smem_bytes": smem, "frame_bytes_per_thread": 4 * frame,
                  "stream_bytes_per_thread_per_trip": 4 * stream, "threads": THREADS, "trips": TRIPS,
                  "r": r, "s": s, "random_replacement": random_replacement_hits(r, s),
                  "lru": 1.0 if r + s <= 1 else 0.0} | {
                     f"{name} ({trips} trips)": k.get(name) for trips, k in ((TRIPS, short), (2 * TRIPS, long))
                     for name in ("local_ld_sectors", "local_ld_hit_sectors", "l1_ld_sectors",
                                  "l1_ld_hit_sectors", "xbar_ld_sectors")}
        rows.append(Measurement("l1_local_reuse_hit_rate", hits / reused if reused else None,
                                "fraction", MEASURED_BY, detail=json.dumps(detail)))
    return rows


def measure(gpu: bool) -> list[Measurement]:
    """One row per configuration (a pair of launches), or one row saying why nothing was
    measured."""
    return ncu_rows(gpu, "l1_local_reuse_hit_rate", "fraction", MEASURED_BY, METRICS, CHILD,
                    "l1_reuse", len(runs()), "local_ld_hit_sectors", rows_from)
