"""Local memory (register spills) and the dirty data L2 still holds when a launch ends.

Local traffic of a launch, from the compiled kernel (never guessed):
- bytes: each thread runs its kernel's local loads and stores (spills and local arrays;
  ``simulator.sass``: ``ldl_bytes``, ``stl_bytes``, the sum of their access widths) once per
  trip of the region they sit in: the main loop's once per trip (``Phase.block_trips``), a
  nested loop's once per its trips (``nested_runs``), the rest once per block. A warp's local access is laid out lane by
  lane in consecutive words, so it fills whole sectors: bytes = per-thread bytes x threads,
  less what a trip does not run of its static code (``simulator.trips.skipped``): the main
  loop's set-up of a row copy (``Op.rows_only``: ``range(tid, Br, T)``'s guard and spill
  refills, run only by the warps that own a row), the copies ptxas peeled before a nested
  loop beyond those a warp needs, and a query head's start code on the trips that start none
  (``Op.head``).
- misses, by reuse distance: a load hits if, since the last use of its slot, the blocks
  resident on an SM touched fewer distinct lines than the L1 left beside shared memory
  (``Hardware.l1_smem_bytes - Occupancy.carveout``; LRU keeps what is reused within its
  capacity), else it misses. Loads outside the nested loops (and each nested loop's first
  pass) reuse their slot once a main-loop trip: in between the blocks touch their whole spill
  frame (``stack_frame_bytes`` x threads x blocks) and stream one trip's K/V (or Q/dO) tiles
  through L1 -- those that L1 keeps: a ``cp.async.cg`` copy allocates no L1 line
  (``SectorTraffic.bypassed``; H100, 2026-12-06: fa2_fp16x3's causal backward at d = 64,
  52 B of spills a thread beside 16-byte cp.async tiles, hit L1 on 99.3 % of its spill
  loads). This also turns the predicted misses of the fp16 / bf16 forward at d = 256 (704 B
  of stack frame a thread) into hits: not measured yet. A nested loop's further passes
  (``nested_runs``' extra, where positive) reuse their slots once an iteration of that loop:
  in between the blocks touch that loop's local accesses and its global loads only (its
  static LDL, STL and LDG bytes a thread, x threads x blocks: an upper bound of the distinct
  lines). Stores go on to L2 (L1 writes through).
Dirty residue: L2 writes back lazily, so a launch's DRAM writes miss what is still dirty in L2
when it ends. The lines a launch streams through L2 (its compulsory reads and writes) share
what the working set of its last blocks (``L2Phase.final_working_set_bytes``: K and V of the
heads in flight, ...; of a causal launch run tile by tile, only the share its lightest blocks,
which start last, re-read: ``simulator.l2.end_working_set``), kept by their re-reads, leaves of
L2; of those, the write share ``written / (read + written)`` is dirty: residue = share x
(capacity - working set), at most what it writes. The capacity is
measured (``calibrate``, experiments/common/l2_residue.py's hot-set sweep:
``MachineRates.l2_dirty_capacity_bytes``, residue / write share of a numba kernel streaming
one or three words read per word written; H200, 2026-12-04: 38.5-42.5 MB of the 60 MB L2).
The same sweep, with a buffer it keeps re-reading, shows the mechanism: 8 and 16 MiB of hot
data took 1.2-1.6 times their size, times the write share, off the residue (19.3 -> 14.2 ->
8.6 MB at share 1/2); the model counts the working set at its size. Idle DRAM does not drain
it: 256 dependent FMAs per element (18 times slower) left the same residue.
Pure Python: no numba.
"""
from __future__ import annotations

from dataclasses import dataclass

from .hardware import Hardware
from .l2 import L2Phase
from .occupancy import resources
from .phases import Phase
from .sass import MAIN_LOOP, sass
from .tiling import Tiling
from .trips import skipped
from .workload import Workload


@dataclass(frozen=True)
class LocalTraffic:
    """Local-memory bytes of one launch at L1 (whole sectors) and those L2 serves."""

    load_bytes: float
    store_bytes: float
    missed_bytes: float


NONE = LocalTraffic(0.0, 0.0, 0.0)


def compiled_tiling(p: Phase, tiling: Tiling) -> Tiling | None:
    """The tiling a launch's kernel was compiled for (None for the row kernels)."""
    return tiling if p.block_trips else None


def recorded_causal(p: Phase, w: Workload) -> bool:
    """The ``causal`` key launch ``p``'s compiled kernel has in the recorded tables: the row
    kernels' code depends on no mask (their rows have none: the workload's is passed, and
    ignored); a tiled kernel's is ``Workload.kernel_causal`` (its band's other compile-time
    parts are in its variant, ``p.code``)."""
    if not p.block_trips:
        return w.causal
    return w.kernel_causal


def launch_occupancy(p: Phase, w: Workload, tiling: Tiling, hw: Hardware):
    """The occupancy on ``hw`` of launch ``p``'s compiled kernel, from its recorded resources
    (``simulator.occupancy.resources``): LookupError where they were never recorded,
    ValueError where the kernel cannot launch on ``hw`` (too much shared memory)."""
    kernel, variant = p.code
    return resources(kernel, compiled_tiling(p, tiling), w.d, recorded_causal(p, w),
                     variant).occupancy(hw)


def local_traffic(p: Phase, w: Workload, tiling: Tiling, hw: Hardware) -> LocalTraffic:
    """The local traffic (module docstring) of launch ``p``."""
    kernel, variant = p.code
    t = compiled_tiling(p, tiling)
    causal = recorded_causal(p, w)
    res = resources(kernel, t, w.d, causal, variant)
    whole = sass(kernel, t, w.d, causal, variant, region="kernel")
    if not (whole.ldl_bytes or whole.stl_bytes):     # no spills, no local arrays
        return NONE
    heads = p.grid_heads(w.BH)
    blocks = len(p.block_trips) * heads
    trips = sum(p.block_trips) * heads
    occ = res.occupancy(hw)
    l1 = hw.l1_smem_bytes - occ.carveout
    resident = res.threads * occ.blocks_per_sm           # threads whose accesses share one L1
    nested_loads = nested_missed = 0.0
    if p.block_trips:
        loop = sass(kernel, t, w.d, causal, variant, region=MAIN_LOOP)
        per_trip = [loop.ldl_bytes, loop.stl_bytes]
        for region, extra in nested_runs(p, kernel, t, w, variant):
            per_trip[1] += extra * region.stl_bytes
            if extra <= 0:         # a loop run less than its one static copy: fewer loads
                per_trip[0] += extra * region.ldl_bytes
                continue
            repeated = extra * region.ldl_bytes * trips * res.threads
            nested_loads += repeated
            touched = region.ldl_bytes + region.stl_bytes + region.ldg_bytes   # a thread, an iteration
            if touched * resident > l1:
                nested_missed += repeated
        loads = (whole.ldl_bytes - loop.ldl_bytes) * blocks + per_trip[0] * trips
        stores = (whole.stl_bytes - loop.stl_bytes) * blocks + per_trip[1] * trips
        # less what a trip does not run: a row copy's set-up in the warps without a row, the
        # copies peeled before a nested loop beyond those its trips need, the other role's
        # code, the masking code on interior tiles, a head's start code on its later trips
        # (``trips.skipped``)
        left = skipped(kernel, t, w.d, causal, variant, rows_per_trip(p), p.edge_share,
                       p.head_share(w.BH))
        loads = (loads - left.get("ldl_bytes", 0.0) * trips) * res.threads
        stores = (stores - left.get("stl_bytes", 0.0) * trips) * res.threads
    else:
        loads, stores = whole.ldl_bytes * blocks * res.threads, whole.stl_bytes * blocks * res.threads
    footprint = res.stack_frame_bytes * resident
    streamed = _tile_bytes_per_trip(p, w, trips) * occ.blocks_per_sm
    missed = nested_missed + (0.0 if footprint + streamed <= l1 else loads)
    return LocalTraffic(float(loads + nested_loads), float(stores), float(missed))


def rows_per_trip(p: Phase) -> int | None:
    """Trips of Algorithm 1's row loop per main-loop trip (``Phase.inner_trips`` over the
    main trips, rounded), None for a launch without one."""
    return round(sum(p.inner_trips) / sum(p.block_trips)) if p.inner_trips and p.block_trips else None


def nested_runs(p: Phase, kernel: str, t: Tiling, w: Workload, variant: str):
    """(region, extra) for the loops nested in the main loop: a region's static counts hold
    its own nested loops once, and the main loop's hold each region once, so a main-loop trip
    runs main + sum of extra x region, extra = runs - runs of the loop it sits in, runs = the
    product of the trips (``simulator.trips``) down to it. Where a trip count is unknown, the
    directly nested loops only: the largest (Algorithm 1's row loop) ``Phase.inner_trips`` times
    per main trip, the others once (loops nested deeper: in their parent, once)."""
    from .sass import regions_of
    from .trips import inner_trips, parents

    causal = recorded_causal(p, w)
    rows = regions_of(kernel, t, w.d, causal, variant)
    main = next(r for r in rows if r.region == MAIN_LOOP)
    nested = sorted((r for r in rows if r.region.startswith("inner_loop_")), key=lambda r: r.start)
    known = inner_trips(kernel, t, w.d, causal, variant, rows_per_trip(p))
    if known is not None and len(known) == len(nested):
        up = parents(main, nested)
        runs: list[float] = []
        for k, n in enumerate(known):          # parents come first in address order
            runs.append(n * (runs[up[k]] if up[k] is not None else 1))
        return [(r, runs[k] - (runs[up[k]] if up[k] is not None else 1)) for k, r in enumerate(nested)]
    direct = [r for r in nested if r.depth == main.depth + 1]
    if not direct:
        return []
    i_loop = max(direct, key=lambda r: r.total)
    per_main = sum(p.inner_trips) / sum(p.block_trips) if p.inner_trips else 1.0
    return [(r, (per_main if r is i_loop else 1.0) - 1) for r in direct]


def _tile_bytes_per_trip(p: Phase, w: Workload, trips: int) -> float:
    """Global bytes one block loads into L1 lines per main-loop trip: its tile loads, in
    sectors, but for cp.async.cg copies (atomic adds are sent to L2, not loaded:
    ``simulator.sectors``)."""
    from .sectors import SECTOR_BYTES, sector_traffic

    s = sector_traffic(p, w)
    return (s.missed - s.bypassed) * SECTOR_BYTES / trips if trips else 0.0


def dirty_residue(view: L2Phase, capacity_bytes: float) -> float:
    """DRAM write bytes still dirty in L2 when the launch of ``view`` ends (module docstring);
    ``capacity_bytes``: the L2 capacity whose write share a streaming kernel leaves dirty
    (``MachineRates.l2_dirty_capacity_bytes``)."""
    moved = view.compulsory_read_bytes + view.compulsory_write_bytes
    if not moved:
        return 0.0
    share = view.compulsory_write_bytes / moved
    return min(view.dram_write_bytes, share * max(0.0, capacity_bytes - view.final_working_set_bytes))
