"""Beyond the paper: how much of the tiled traffic reaches DRAM when re-reads can hit in L2.

``simulator.predict`` counts traffic between the SMs and the memory system (every global load
and store of the kernels).  On a GPU those requests go to L2 first; DRAM sees only misses and
write-backs.  This module estimates DRAM bytes per kernel launch (``Phase``) as follows.

Assumptions (a model, not a cache simulation):
1. Concurrency: ``sm_count x blocks_per_sm`` blocks run at once; blocks_per_sm is the occupancy
   of the launch's compiled kernel where its resources are recorded (``resident_blocks``:
   registers included), else the smallest of smem_per_sm // (the tiling's shared memory for the
   kernel), max_threads_per_sm // threads and max_blocks_per_sm, at least 1 (a tiling too large
   for one SM is still counted as one block a SM).  Kernels without shared-memory tiles
   (softmax, row sums) get max_blocks_per_sm.
2. Blocks are scheduled in grid order, so the blocks in flight cover
   ``ceil(concurrent / blocks_per_unit)`` of the launch's reuse units (a head for the tiled
   kernels, a row for the softmax), capped at the number of units.
3. Working set = units in flight x the elements each unit re-reads (K and V of a head for the FA2
   forward, Q, O, l, m for Algorithm 1, Q, dO, L, D (and dQ) for the backward, A and B of a
   matmul, a row of S for the softmax) x bytes per element.  Streamed, read-once data is not
   counted: it passes through L2 without being reused.  GQA: the forward's query heads of one
   K/V head re-read the same K and V (``Phase.unit_share``), so ceil(units / group) of them
   count; the backward's units are K/V heads, each re-reading its group's Q, dO, L, D (dQ).
   Windows and block masks: a unit still counts its head's whole K and V (forward) or Q, dO,
   ... (backward), though its blocks read only their band's (kept blocks'): an over-estimate,
   which lowers the hit fraction only where the working set exceeds L2.
4. Hit fraction of re-reads = 1 if the working set fits in L2, else l2_bytes / working set
   (a smooth stand-in for LRU thrashing, which real hashed, partitioned L2s show only gradually),
   where the re-reads are by other blocks of the unit, near in time. Where a block re-reads its
   own unit on every main-loop trip (Algorithm 1: ``Phase.inner_trips``, its rows swept in the
   same order each outer step), a line's next use comes after every resident block has
   touched its whole unit, the working set: under LRU none survive once that exceeds L2,
   hit 0. (H200, 2026-12-02, ncu, fig2_middle: Algorithm 1 in fp32 at Bc = 64, 128, 256, a
   70 MB working set on the 60 MiB L2, read 99-105 % of its SM->L2 global bytes from DRAM.)
4b. Tile by tile (``Phase.tile_major``: the causal tensor-core and half kernels start the
   heaviest row / column block of every head first): the blocks in flight span every unit, so
   the working set is every unit's re-read data, and each unit (under GQA the query heads of
   one K/V head, ``Phase.unit_share``) has k = resident blocks / units of them in flight,
   reading the same lines near in time: of its re-reads, those of the wave's other blocks hit
   (1 - 1/k of them); the wave's first reads hit only while the working set fits in half of
   L2 (``reread_hit``). Measured: calibrate's ``l2_reread_hit_rate``
   (experiments/common/l2_reuse.py, H100, 2026-12-06: 32 units read by 16 blocks each, about
   4 of them in flight a wave) hit 1.00 at a working set of 0.31 x L2, 0.83 at 0.63 and 0.80
   from 0.94 to 3.8 x L2: the wave's other readers always hit (12 of a unit's 15 re-reads:
   0.80), the next waves' first readers only in the smallest (the H100's L2 is two
   partitions; a line every SM reads is held in both). This replaced assumption 4's
   min(1, L2 / working set) for these launches, which had counted the units of the first
   blocks head by head: causal forwards at 0.5-1.2 x L2 were then predicted all hits and read
   19-46 % more from DRAM; at 1.5-3.2 x L2 the backwards read 22-73 % less, fa2_fp16x3's
   forward up to 3.4x less (H200 and H100 levels, 2026-12-03..06).
5. Compulsory traffic per tensor and launch = min(count, tensor size): every distinct element
   read once and written back once (K, V, dK, dV of B*H_kv heads under GQA), in the tensor's
   own element size (``simulator.report.element_bytes``: L, D, dQ_accum are fp32 in every
   format; H200, 2026-12-03 levels: the fp16 backward's dQ_accum zeroing wrote 49.9 MB to DRAM
   at 4 x 16 x 4096 x 64, its fp32 size 67.1 MB less L2's residue, and the conversion kernel
   read 67.1 MB, where fp16 sizes gave 33.6); none for the reads
   of a tensor the launch wrote first (``Phase.written_first``: Algorithm 1's O, l, m, whose
   reads are re-reads of its own lines; H200, 2026-12-03 levels: Algorithm 1 at 1 x 16 x 2048 x
   64 read 25.2 MB from DRAM, Q, K and V once, where a floor for O, l, m gave 33.8).  DRAM =
   compulsory + (count - compulsory) x (1 - hit), for reads and writes alike (L2 is
   write-back, so re-written lines leave once when they stay).
6. L2 is cold at every launch: data written by one kernel and read by the next is fetched again.
7. Tensors every thread of a block reads whole (``Phase.broadcast``: fa2_fp16x3's head maxima,
   64 bytes a head) reach L2 once a block (``simulator.sectors``): their reads beyond the
   compulsory ones hit, whatever the working set (a few KB, re-read by every block).
"""
from __future__ import annotations

from dataclasses import dataclass

from .hardware import Hardware
from .phases import Phase
from .report import element_bytes
from .tiling import Tiling
from .workload import Workload


@dataclass(frozen=True)
class L2Phase:
    """The L2 model's view of one kernel launch (bytes): its DRAM reads and writes and their
    compulsory floors (assumption 5)."""

    name: str
    concurrent_blocks: int
    working_set_bytes: int
    hit_fraction: float
    dram_read_bytes: float = 0.0
    dram_write_bytes: float = 0.0
    compulsory_read_bytes: int = 0
    compulsory_write_bytes: int = 0
    end_working_set_bytes: int | None = None
    #: each tensor the launch reads: the share of its reads (SM side) that DRAM serves
    read_miss: tuple[tuple[str, float], ...] = ()

    @property
    def final_working_set_bytes(self) -> int:
        """The re-read data of the blocks that run last (``end_working_set``; the launch's
        working set where not given): what keeps L2 from holding dirty lines when it ends."""
        return self.working_set_bytes if self.end_working_set_bytes is None else self.end_working_set_bytes


@dataclass(frozen=True)
class L2Traffic:
    """Bytes at both sides of L2.  sm_l2_*: what the SMs request (= the tiled count of
    ``predict``); dram_*: the model's DRAM traffic; compulsory_*: its floor (each distinct byte
    once per launch)."""

    l2_bytes: int
    sm_l2_read_bytes: int
    sm_l2_write_bytes: int
    dram_read_bytes: int
    dram_write_bytes: int
    compulsory_read_bytes: int
    compulsory_write_bytes: int
    phases: tuple[L2Phase, ...]

    @property
    def dram_bytes(self) -> int:
        return self.dram_read_bytes + self.dram_write_bytes

    def __add__(self, other: "L2Traffic") -> "L2Traffic":
        sums = [getattr(self, f) + getattr(other, f) for f in (
            "sm_l2_read_bytes", "sm_l2_write_bytes", "dram_read_bytes", "dram_write_bytes",
            "compulsory_read_bytes", "compulsory_write_bytes")]
        return L2Traffic(max(self.l2_bytes, other.l2_bytes), *sums, self.phases + other.phases)

    def summary(self) -> str:
        """One line: DRAM versus SM<->L2 bytes."""
        return (f"L2 model ({self.l2_bytes / 2**20:.0f} MiB): DRAM {self.dram_read_bytes:,} read + "
                f"{self.dram_write_bytes:,} written bytes (compulsory {self.compulsory_read_bytes:,}"
                f" + {self.compulsory_write_bytes:,}); SM<->L2 {self.sm_l2_read_bytes:,} + "
                f"{self.sm_l2_write_bytes:,}")


def concurrent_blocks(kernel: str | None, tiling: Tiling, workload: Workload,
                      hardware: Hardware) -> int:
    """Blocks of ``kernel`` resident on the whole GPU at once (assumption 1)."""
    per_sm = hardware.max_blocks_per_sm
    if kernel is not None:
        smem = tiling.smem_bytes(kernel, workload.d, workload.dtype_bytes)
        per_sm = min(per_sm, hardware.smem_per_sm // smem,
                     hardware.max_threads_per_sm // tiling.threads_for(kernel))
    return hardware.sm_count * max(1, per_sm)


def resident_blocks(p: Phase, tiling: Tiling, w: Workload, hw: Hardware) -> int:
    """Blocks of launch ``p`` resident on the whole GPU at once: where its compiled kernel's
    resources are recorded (``simulator.local.launch_occupancy``: ptxas's registers and the kernel's shared
    memory, whose tiles are fp32 in every storage format for the FMA kernels), the occupancy
    they give; else assumption 1's estimate (``concurrent_blocks``). H200, 2026-12-02, ncu:
    Algorithm 1's 64 x 64 kernel at d = 64 holds 168 registers a thread, one 256-thread
    block an SM (launch__occupancy_limit_registers = 1), where the estimate had 3 (fp32) and
    6 (fp16) blocks an SM."""
    from .local import launch_occupancy

    if p.block_trips:
        try:
            return hw.sm_count * launch_occupancy(p, w, tiling, hw).blocks_per_sm
        except (LookupError, ValueError):     # never recorded, or too big for this GPU
            pass
    return concurrent_blocks(p.kernel, tiling, w, hw)


def reread_hit(p: Phase, sharers: float, working_set: int, hw: Hardware) -> float:
    """The fraction of launch ``p``'s re-reads that hit in L2 (assumptions 4 and 4b), where
    ``sharers`` resident blocks re-read each group of units' data (a unit, or under GQA the
    query heads of one K/V head) and the groups in flight re-read ``working_set`` bytes."""
    if p.inner_trips:       # a block re-reading its own unit cyclically keeps none beyond L2
        return 1.0 if working_set <= hw.l2_bytes else 0.0
    if p.tile_major:        # 4b: the wave's blocks of a group share; later waves' re-reads hit
        # only while every group's data fits in half of L2
        later = 1.0 if working_set <= hw.l2_bytes / 2 else 0.0
        return 1.0 - (1.0 - later) / max(1.0, sharers)
    return min(1.0, hw.l2_bytes / working_set) if working_set else 1.0


def end_working_set(p: Phase, blocks: int, units: int, working_set: int) -> int:
    """The data the last wave of launch ``p`` re-reads, of its ``working_set``: tile by tile
    (4b) the last ``blocks`` to start are every unit's lightest, each re-reading its trips'
    share of the unit's data (a causal forward's first row blocks read the first K, V tiles
    only), so the working set at the end is every unit's data x the heaviest of those blocks'
    trips / the unit's most (of the units in flight: all, or ``blocks`` of them where fewer
    blocks than units are resident); else the whole ``working_set`` (the blocks in flight are
    alike)."""
    if not p.tile_major or not p.block_trips or not units:
        return working_set
    trips = sorted(p.block_trips)
    last = min(len(trips), max(1, blocks // units))      # the last wave's blocks of a unit
    in_flight = min(1.0, blocks / units)
    return int(working_set * in_flight * trips[last - 1] / max(trips[-1], 1))


def _phase_l2(p: Phase, tiling: Tiling, w: Workload, hw: Hardware) -> tuple[L2Phase, list[int]]:
    blocks = resident_blocks(p, tiling, w, hw)
    # in flight: the units the first blocks cover, head by head; tile by tile (4b) every unit
    units = p.units if p.tile_major else min(p.units, -(-blocks // p.blocks_per_unit))
    groups = -(-units // p.unit_share)
    working_set = groups * p.unit_reread_elements * w.dtype_bytes
    hit = reread_hit(p, blocks / groups, working_set, hw)
    totals = [0, 0, 0, 0]   # bytes: compulsory reads, compulsory writes, DRAM reads, DRAM writes
    read_miss = []
    for k, counts in enumerate((p.hbm_reads, p.hbm_writes)):
        for name, n in counts.items():
            b = element_bytes(name, w.dtype_bytes)
            floor = 0 if k == 0 and name in p.written_first else min(n, w.tensor_elements(name))
            totals[k] += floor * b
            kept = 1.0 if k == 0 and name in p.broadcast else hit      # (assumption 7)
            dram = floor + (n - floor) * (1.0 - kept)
            totals[2 + k] += dram * b
            if k == 0 and n:
                read_miss.append((name, dram / n))
    return L2Phase(p.name, blocks, working_set, hit, totals[2], totals[3],
                   int(totals[0]), int(totals[1]), end_working_set(p, blocks, units, working_set),
                   tuple(read_miss)), totals


def l2_traffic(phases: tuple[Phase, ...], workload: Workload, tiling: Tiling,
               hardware: Hardware) -> L2Traffic:
    """The L2 model (module docstring) applied to each launch of an algorithm, summed."""
    views, sums = [], [0.0] * 4
    for p in phases:
        view, totals = _phase_l2(p, p.tiling or tiling, workload, hardware)
        views.append(view)
        sums = [a + b for a, b in zip(sums, totals)]
    b = workload.dtype_bytes
    sm_reads = sum(n * element_bytes(t, b) for p in phases for t, n in p.hbm_reads.items())
    sm_writes = sum(n * element_bytes(t, b) for p in phases for t, n in p.hbm_writes.items())
    return L2Traffic(hardware.l2_bytes, sm_reads, sm_writes, round(sums[2]), round(sums[3]),
                     int(sums[0]), int(sums[1]), tuple(views))

