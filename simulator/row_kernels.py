"""How long a row kernel runs: the launches without tiles (D = rowsum(dO O), the dQ conversion,
the standard softmax and dS, fp16x3's head maxima and split), whose threads each stream a few
bytes, round after round.

ncu measured them 17-87 % longer than their DRAM bytes at the measured bandwidths (README, the
per-launch errors). Three costs, each measured by calibrate's microbenchmarks
(experiments/common/launch_cost.py), none fitted to a row kernel:

1. the launch's floor (``MachineRates.launch_floor_s``: an empty launch of one block);
2. starting and retiring its blocks: an empty launch of as many blocks an SM, beyond the floor
   (``MachineRates.block_dispatch_s``) -- thousands of short blocks an SM cost microseconds;
3. the bytes: each thread issues one round of loads (``RowGrid.round_bytes``, in flight
   together) and waits for them before the next, so an SM has at most its resident threads x
   that in flight, and the reads reach the bandwidth the stream microbenchmark reached with as
   many bytes in flight (``MachineRates.stream_read_at``: Little's law under load); the writes
   take DRAM's write bandwidth beside them (the bus serves one or the other: on the H100,
   2026-12-07, this sum put a first version of that stream, which wrote a word for every k
   read, within 2-10 % of its measured read bandwidth at every k); never faster than the DRAM
   bandwidths.

The launch takes the floor plus the longer of 2 and 3 (the SMs start blocks while others wait
for their loads). Without those measurements (rates from before 2026-12-07), 3's bandwidth bound
alone, as before. The standard softmax is issue-bound (README): its instructions are not
modelled, so it stays predicted fast. Pure Python: no numba.
"""
from __future__ import annotations

from dataclasses import dataclass

from .hardware import Hardware
from .phases import Phase
from .rates import MachineRates
from .workload import Workload

#: D = rowsum(dO O): a warp a row, blocks of ``ROW_DOT_THREADS`` (numba_flash.api._row_dot).
ROW_DOT_THREADS = 128
#: The dQ conversion's grid-stride launch: threads a block, and blocks an SM at most
#: (numba_flash.api._convert_grid).
CONVERT_THREADS, CONVERT_BLOCKS_PER_SM = 256, 16
#: The conversion's grid is cut at this many SMs' worth of blocks (the H200's and H100's 132).
CONVERT_SMS = 132
#: Loads in flight a thread of fp16x3's head maxima and split (numba_flash/kernels/split_half.LOADS).
PREP_LOADS = 4


@dataclass(frozen=True)
class RowGrid:
    """A row kernel's launch: ``blocks`` of ``threads``; each thread loads ``round_bytes`` a
    round, all in flight together, before it waits for them."""

    blocks: int
    threads: int
    round_bytes: int


def row_grid(p: Phase, w: Workload) -> RowGrid | None:
    """The launch of row kernel ``p`` (its ``code``) on ``w``, as numba_flash launches it; None
    for a code this module does not know."""
    from .fp16x3 import cuda_simulated, prep_launch, split_threads
    from .standard import ROW_THREADS

    kernel, _ = p.code
    elem = w.dtype_bytes
    if kernel == "row_dot":                 # a warp a row; a lane's dO, O elements of a round
        rows = ROW_DOT_THREADS // 32
        return RowGrid(w.BH * -(-w.N_q // rows), ROW_DOT_THREADS, 2 * elem)
    if kernel == "convert":                 # grid-stride over dQ_accum (fp32), an element a round
        n = w.BH * w.N_q * w.d
        return RowGrid(min(-(-n // CONVERT_THREADS), CONVERT_SMS * CONVERT_BLOCKS_PER_SM), CONVERT_THREADS, 4)
    if kernel == "softmax":                 # a block a row, a score a round
        return RowGrid(w.BH * w.N_q, ROW_THREADS, elem)
    if kernel == "ds":                      # a block a row, P and dP a round
        return RowGrid(w.BH * w.N_q, ROW_THREADS, 2 * elem)
    if kernel in ("head_amax", "split_half"):   # grid-stride over a head, PREP_LOADS fp32 a round
        threads, _ = prep_launch(cuda_simulated())
        if kernel == "split_half":
            threads = split_threads(w.d, threads)
        return RowGrid(p.units * p.blocks_per_unit, threads, 4 * PREP_LOADS)
    return None


def seconds(p: Phase, w: Workload, hw: Hardware, r: MachineRates, dram_bytes) -> float:
    """The model's time of row launch ``p`` (module docstring); ``dram_bytes``: its (read,
    write) DRAM bytes."""
    read, write = dram_bytes or (0.0, 0.0)
    streamed = read / r.dram_read_bytes_per_s + write / r.dram_write_bytes_per_s
    grid = row_grid(p, w)
    if grid is None or not grid.blocks or r.launch_floor_s is None or not r.stream_read_bytes_per_s:
        return streamed
    per_sm = grid.blocks / hw.sm_count
    resident = min(hw.max_threads_per_sm // grid.threads, hw.max_blocks_per_sm, -(-grid.blocks // hw.sm_count))
    in_flight = resident * grid.threads * grid.round_bytes
    # the stream's bandwidth is every SM's: a grid of fewer blocks than SMs draws on its own
    busy = min(grid.blocks, hw.sm_count) / hw.sm_count
    waited = read / (busy * r.stream_read_at(in_flight)) + write / r.dram_write_bytes_per_s
    return r.launch_floor_s + max(r.block_dispatch_s(per_sm), waited, streamed)
