"""How often a block's re-read of data that other blocks read before hits in L2, against the
working set of the blocks in flight over L2's capacity: ncu on a kernel that reads as our
forwards read K and V.

Why: ``simulator.l2`` takes the hit fraction of re-reads as min(1, L2 / working set)
(its assumption 4, a smooth stand-in for a hashed, partitioned L2). The causal forwards at
d >= 64, whose blocks in flight span every head (the heaviest row blocks of all heads first),
read 20-46 % more from DRAM than that model predicts on the H200 (``results/h200/levels``,
validation configurations). LRU would give every re-read a hit while the working set fits and
none beyond; an L2 that keeps a line in the partition near each SM that reads it would hold
about half as many lines that every SM reads. Which the H200 does is a property of the hardware,
measured here on a kernel that does nothing else. On an H100 (2026-12-06,
``results/h100/calibrate``): 1.00 at 0.31 x L2, 0.83 at 0.63, 0.80 from 0.94 to 3.8: a wave's
other readers of a unit always hit, the next waves' first readers only while the units fit in
about half of L2 -- ``simulator.l2``'s assumption 4b since, for the launches that run tile by
tile:

- ``UNITS`` units of ``unit_words`` 4-byte words (the working set W = UNITS x unit bytes, as the
  K and V of as many heads); a grid of ``UNITS x READERS`` blocks of ``THREADS`` threads, one
  block an SM (``SMEM`` bytes of dynamic shared memory each, unused), block b reading unit
  b % UNITS whole, once, in order (a warp 128 contiguous bytes a load), summing it -- so the
  blocks in flight cover every unit, a few blocks each, and the next wave reads them again, as
  a causal forward's waves do;
- W swept over ``RATIOS`` of L2's capacity (the H200's, ``L2_BYTES``); ncu's DRAM read bytes
  (caches flushed before the kernel): each unit's first read is compulsory, the others
  re-reads, so ``l2_reread_hit_rate`` = 1 - (DRAM reads - W) / ((READERS - 1) W) (the detail has
  W, the ratio, the raw counts and what the model and LRU give).

Run with the calibrate experiment, or alone: ``python -m experiments.common.l2_reuse OUT.csv``
(calibrate's columns, with device, date, versions, commit and command). Under the simulator the
kernel runs tiny (tests check its sums); nothing is measured.
"""
from __future__ import annotations

import json

import numpy as np
from numba import cuda, float32, int32

from simulator.hardware import H200

from .microbench import Measurement, ncu_rows

THREADS = 256
#: Units (heads' K and V) and blocks reading each unit.
UNITS, READERS = 32, 16
#: Dynamic shared memory a block: no second block fits an SM (227 KiB usable on the H200).
SMEM = 160 * 1024
#: The L2 capacity the ratios refer to: the H200's (``simulator.hardware``), the model's GPU.
L2_BYTES = H200.l2_bytes
#: Working set / L2 capacity of each launch.
RATIOS = (0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0)
MEASURED_BY = ("ncu --kernel-name l2_reuse: dram__bytes_read.sum of UNITS x READERS blocks, one an SM, "
               "block b reading unit b % UNITS whole; hit = 1 - (DRAM reads - W) / ((READERS - 1) W)")
METRICS = "dram__bytes_read.sum,l1tex__m_xbar2l1tex_read_sectors_mem_lg_op_ld.sum,gpu__time_duration.sum"
CHILD = "from experiments.common.l2_reuse import run_all; run_all()"


@cuda.jit
def l2_reuse(units, unit_words, src, out):
    """Block b sums unit b % units of ``src`` (``unit_words`` words a unit); each thread writes
    its partial sum to out[b THREADS + t] (no load is dead)."""
    tid = cuda.threadIdx.x
    base = (cuda.blockIdx.x % units) * unit_words
    acc = float32(0)
    for i in range(tid, unit_words, THREADS):
        acc += src[base + i]
    out[cuda.blockIdx.x * THREADS + tid] = acc


def unit_words_of(ratio: float) -> int:
    """Words a unit at working set ``ratio`` x L2_BYTES (a whole number of warp loads)."""
    return max(32, round(ratio * L2_BYTES / (4 * UNITS) / 32) * 32)


def runs(simulated: bool = False) -> list[tuple[int, int, int]]:
    """(units, readers, unit words) of each launch, in launch order; one tiny launch under the
    simulator."""
    if simulated:
        return [(2, 3, 40)]
    return [(UNITS, READERS, unit_words_of(r)) for r in RATIOS]


def source(words: int) -> np.ndarray:
    """What the units are made of: word i is i % 7 + 1, so that each unit's sum is known."""
    return (np.arange(words) % 7 + 1).astype(np.float32)


def run_all(simulated: bool = False) -> list[np.ndarray]:
    """Launch each of ``runs(simulated)`` (the child ncu profiles; tiny under the simulator) on
    ``source``'s words; returns each launch's ``out``."""
    from numba_flash.launch import launch

    plan = runs(simulated)
    src = cuda.to_device(source(max(units * words for units, _, words in plan)))
    outs = []
    for units, readers, words in plan:
        out = cuda.device_array(units * readers * THREADS, np.float32)
        launch(l2_reuse, units * readers, THREADS, 0 if simulated else SMEM, int32(units),
               int32(words), src, out)
        outs.append(out.copy_to_host())
    return outs


def unit_sums(units: int, unit_words: int) -> np.ndarray:
    """What the blocks reading each unit sum (``source``'s words), per unit."""
    return source(units * unit_words).astype(np.float64).reshape(units, unit_words).sum(axis=1)


def rows_from(kernels: list[dict]) -> list[Measurement]:
    """One row per launch of ``runs()`` from ncu's per-kernel readings, in launch order."""
    rows = []
    for (units, readers, words), k in zip(runs(), kernels):
        w = units * words * 4
        dram = k.get("dram_read_bytes")
        value = None if dram is None else 1.0 - (dram - w) / ((readers - 1) * w)
        detail = {"working_set_bytes": w, "l2_bytes": L2_BYTES, "ratio": w / L2_BYTES,
                  "units": units, "readers": readers, "threads": THREADS, "smem_bytes": SMEM,
                  "dram_read_bytes": dram, "sm_l2_read_bytes": 32 * k.get("xbar_ld_sectors", 0.0),
                  "gpu_time_ns": k.get("gpu_time_ns"), "model": min(1.0, L2_BYTES / w),
                  "lru": 1.0 if w <= L2_BYTES else 0.0}
        rows.append(Measurement("l2_reread_hit_rate", value, "fraction", MEASURED_BY,
                                detail=json.dumps(detail),
                                note="" if dram is not None else "ncu gave no DRAM reading"))
    return rows


def measure(gpu: bool) -> list[Measurement]:
    """One row per launch, or one row saying why nothing was measured."""
    return ncu_rows(gpu, "l2_reread_hit_rate", "fraction", MEASURED_BY, METRICS, CHILD, "l2_reuse",
                    len(runs()), "dram_read_bytes", rows_from)


if __name__ == "__main__":
    import sys
    from dataclasses import asdict
    from pathlib import Path

    from experiments.common.metadata import run_metadata
    from experiments.common.results import write_rows
    from numba_flash.memory import simulator_enabled

    gpu = not simulator_enabled()
    write_rows(Path(sys.argv[1]), [asdict(m) for m in measure(gpu)],
               run_metadata("calibrate", "gpu" if gpu else "cpu",
                            "python -m experiments.common.l2_reuse " + " ".join(sys.argv[1:])))
