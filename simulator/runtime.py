"""How long a kernel launch runs: per-block work on each pipe, occupancy, waves and the tail,
barriers and the launch, at machine rates the ``calibrate`` microbenchmarks measured.

Tiled kernels (a ``Phase`` with ``block_trips``), from the compiled kernel (``simulator.sass``:
warp instructions per pipe class in the main loop and outside it; ``simulator.occupancy``:
blocks an SM from ptxas's registers and the shared memory):

1. A trip of the main loop. Where the loop's instruction stream is recorded and the trips of
   the loops nested in it are known (``simulator.trips``), the
   issue simulator (``simulator.issue.loop_cycles``) gives the cycles the SM's schedulers need
   for one trip of each resident block: the resident warps interleaved on the scheduler that
   holds the most of them (warp slots go to the 4 schedulers in turn: a block of 5 warps puts
   two on one, and a trip, ending at a barrier, waits for that pair),
   dependency latencies (global loads at the L2 latency, plus DRAM's beyond it for the share
   of their bytes the L2 model sends to DRAM -- of the streamed tensor with the largest share,
   as a trip waits for its slowest load, ``trip_dram_share``; spill refills at L1's or, where any of the
   launch's spill loads miss L1 (``simulator.local``: in practice where the frames do not fit
   beside the tiles), all at L2's -- the nested loops' refills too, which that model lets
   hit), pipe rates and
   barriers, all at measured rates, and the SM's drain of its global reductions (dQ's atomic
   adds) that the next global loads wait behind (``MachineRates.red_sectors_per_cycle``), a
   reduction the sectors the sector model gives the launch's reductions over the reduction
   warp instructions its blocks run (all in the main loop); where the loop's warps split by
   role (v12's warp pairs: ``issue.Op.role``, warps w, w + 4, ... of a scheduler share one),
   each role's stream on its own scheduler, the slower one. Otherwise a
   throughput bound, one trip of one block costing the SM
   ``t_trip = max(t_smem, t_rest) + overlap x min(t_smem, t_rest) + barriers``, where
   - ``t_smem``: the block's shared-memory wavefronts of one trip (the SRAM model's bytes / 128,
     as ``simulator.levels``) at the measured LDS rate (wavefronts a cycle an SM);
   - ``t_rest = max(t_mma, t_issue, t_fma, t_alu, t_xu, t_shfl)``: the block's warp
     instructions on each pipe at its measured rate; mma at the rate measured for the SM's
     resident warps (``MachineRates.mma_at`` of the kernel's format: TF32, or fp16 for the half
     kernels; 4 independent chains: our kernels keep at
     least Bc/8 or d/8 accumulators in flight), issue at one instruction a cycle per scheduler;
   - ``overlap``: how much shared-memory loads and the tensor pipe serialise, measured
     (``mma_lds_overlap``: 0 = hidden under each other, 1 = one after the other), taken for
     every pipe;
   - barriers: the main loop's ``BAR.SYNC`` count x the measured cycles of a barrier of the
     block's warps.
   nested loops' instructions counted as often as they run (once where that is unknown: a
   lower bound).
   Outside the main loop (prologue, epilogue) the throughput bound, once a block, with the
   strided tile copies before the loop as often as they run (``simulator.trips.outer_trips``:
   Qi of the forwards, Kj, Vj of the backwards), or where longer the latency of those copies:
   each of their trips waits for its loads from DRAM (the block's own tile, read once a
   launch), one after another; plus the part beyond that chain of the wait for a block's
   first tiles (``prologue_cycles``: DRAM's latency, then its own tiles and a trip's share of
   the streamed ones for each block its SM starts together, at one SM's share of DRAM's read
   bandwidth) (H200, 2026-12-02, ncu: the tensor-core forward executed 2-22 %
   more instructions than the static count, most at the fewest steps a block; its 256 x 32
   Qi copy at d = 64 runs 32 trips of one scalar load each).
2. k co-resident blocks share an SM: with the issue simulator, a trip of each takes the cycles
   simulated for k blocks' warps side by side (k = 1 .. blocks_per_sm: fewer warps hide less
   latency but share the pipes with fewer); with the throughput bound, each runs at 1/k of the
   SM's throughput (k x t_trip). The work outside the main loop counts as trips of a full SM.
3. Blocks start in launch order (``Phase.block_trips``, ``tile_major``): the first wave round
   the SMs, then each freed slot takes the next block (``shared_makespan``); each SM's blocks
   progress at the rate of the number resident there, so a block alone in the tail runs
   faster than one of a full SM. The launch lasts until the last block is done -- waves, and
   for causal grids the tail, follow from the block sizes. A block's trips on edge tiles
   (``Phase.edge_trips``: ragged, or crossed by the band's edge) run the masking code that
   interior tiles jump over (``issue.Op.edge``, where ptxas compiles the mask as a branch: the
   half kernels, the causal tensor-core backward's per-score test); where a launch has trips
   of both kinds each kind is simulated, and an edge
   trip weighs the ratio of their cycles in interior ones. Likewise a block's first trip of
   each query head, where the loop holds code only those run (``issue.Op.head``: fa2_fp16x3's
   backward works out the head's scale factors there): simulated with that code (as a trip of
   the launch's first kind, interior where it has them: a causal head's first step, on the
   diagonal, then counts its edge code and its head code apart), it weighs the ratio to a plain
   trip.
4. Cycles at the clock measured under the kernel's kind of load (the mma benchmark's clock for
   tensor-core kernels, the FFMA one's for the others), plus the launch's floor (an empty
   launch's ncu time, where calibrate measured it): the kernel's time, as ncu's
   ``gpu__time_duration`` counts it (the gap between launches, ``MachineRates.launch_gap_s``,
   and host work are not in it).
Row kernels (no tiles): ``simulator.row_kernels`` -- the launch's floor, its blocks' dispatch,
and its reads at the bandwidth its loads in flight reach (calibrate's launch-cost
microbenchmarks; without them, DRAM bytes at the measured read and write bandwidths). A tiled
launch's time adds the same floor (``MachineRates.launch_floor_s``: ncu's time of an empty
one-block launch) to its blocks' makespan.
Pure Python: no numba.
"""
from __future__ import annotations

import heapq
import os
from pathlib import Path
from functools import lru_cache

from .hardware import Hardware
from . import row_kernels
from .occupancy import resources
from .phases import Phase, smem_wavefronts
from .rates import RATES_CSV, MachineRates, load_rates
from .report import element_bytes
from .sectors import SECTOR_BYTES, sector_traffic
from .sass import MAIN_LOOP, KernelSass, sass
from .tiling import Tiling
from .issue import global_load_latency, memory_latencies
from .local import local_traffic, nested_runs, recorded_causal, rows_per_trip
from .trips import has_edge_code, has_head_code, inner_trips, outer_trips, skipped, warp_stream
from .workload import Workload

#: Independent mma accumulator chains a warp of our tensor-core kernels keeps (at least).
MMA_CHAINS = 4


#: Environment variable naming a calibrate CSV to use instead of the committed H200 rates (a
#: run that has just measured its GPU: experiments/run_gpu.sh).
RATES_ENV = "NUMBA_FLASH_RATES_CSV"


@lru_cache(maxsize=None)
def h200_rates() -> MachineRates:
    """The H200 rates: ``$NUMBA_FLASH_RATES_CSV`` if set, else the committed
    ``simulator.rates.RATES_CSV``."""
    return load_rates(os.environ.get(RATES_ENV) or RATES_CSV)


#: The committed calibrate CSV of each GPU family (a Hardware name's prefix); a family whose
#: file is absent was never calibrated (no time). The H200's may be overridden (``RATES_ENV``).
RATES_OF = {"H200": RATES_CSV, "H100": RATES_CSV.with_name("rates_h100.csv")}


@lru_cache(maxsize=None)
def committed_rates(path: Path) -> MachineRates | None:
    """The rates in a committed calibrate CSV, None where there is none."""
    return load_rates(path) if path.exists() else None


def rates_for(hardware: Hardware) -> MachineRates | None:
    """The measured rates of ``hardware``'s family (``RATES_OF``), or None where none were
    measured (then no time)."""
    family = next((f for f in RATES_OF if hardware.name.upper().startswith(f)), None)
    if family == "H200":
        return h200_rates()
    return committed_rates(RATES_OF[family]) if family else None


def _pipe_cycles(c: dict[str, float], warps_on_sm: float, r: MachineRates, fmt: str) -> float:
    """t_rest: the slowest pipe (issue included) for warp-instruction counts ``c`` (already x
    warps) of a kernel whose mma is of format ``fmt``."""
    t_mma = c["hmma"] / r.mma_at(fmt, warps_on_sm, MMA_CHAINS) if c["hmma"] else 0.0
    return max(t_mma, c["total"] / 4.0, c["fma"] / r.ffma_per_cycle, c["alu"] / r.alu_per_cycle,
               c["xu"] / r.mufu_ex2_per_cycle, c["shfl"] / r.shfl_per_cycle)


_KEYS = ("hmma", "total", "fma", "alu", "xu", "shfl", "bar", "reductions")


def _counts(s: KernelSass, minus: list[KernelSass], warps: int) -> dict[str, float]:
    """Warp instructions of region ``s`` less the regions ``minus``, x ``warps``."""
    return {k: (getattr(s, k) - sum(getattr(m, k) for m in minus)) * warps for k in _KEYS}


def _cost(c: dict[str, float], smem: float, warps_on_sm: float, warps_b: int, r: MachineRates,
          overlap: float, fmt: str) -> float:
    rest = _pipe_cycles(c, warps_on_sm, r, fmt)
    t_smem = smem / r.lds_wavefronts_per_cycle[128]
    barrier = c["bar"] / warps_b * r.barrier_cycles_at(warps_b)
    return max(t_smem, rest) + overlap * min(t_smem, rest) + barrier


def shared_makespan(work: list[float], sms: int, per_sm: int, trip_cycles) -> float:
    """Cycles until blocks of ``work`` trips each (launch order) are done on ``sms`` SMs of
    ``per_sm`` block slots, where k blocks resident on an SM each finish a trip in
    ``trip_cycles(k)`` cycles (they share its pipes: a block alone in the tail runs faster than
    one of a full SM). The first wave goes round the SMs (block b on SM b mod sms, as calibrate's
    placement found), then each freed slot takes the next block, SMs freed at one instant in
    turn (one block each a round, again as the first wave). Where ``trip_cycles(k)`` does not
    depend on k, the greedy list schedule of the sms x per_sm slots."""
    cycles = (0.0, *(trip_cycles(k) for k in range(1, per_sm + 1)))
    return _makespan(tuple(work), sms, per_sm, cycles)


@lru_cache(maxsize=64)
def _makespan(work: tuple[float, ...], sms: int, per_sm: int, cycles: tuple[float, ...]) -> float:
    """``shared_makespan`` with ``trip_cycles(k)`` as ``cycles[k]`` (a launch predicted again,
    e.g. by several experiments, is simulated once)."""
    queue = iter(enumerate(work))
    remaining: list[dict[int, float]] = [{} for _ in range(sms)]
    updated = [0.0] * sms
    version = [0] * sms
    events: list[tuple[float, int, int]] = []

    def advance(sm: int, now: float) -> None:
        blocks = remaining[sm]
        if blocks:
            done = (now - updated[sm]) / cycles[len(blocks)]
            for b in blocks:
                blocks[b] -= done
        updated[sm] = now

    def schedule(sm: int, now: float) -> None:
        version[sm] += 1
        blocks = remaining[sm]
        if blocks:
            heapq.heappush(events, (now + max(0.0, min(blocks.values())) * cycles[len(blocks)],
                                    sm, version[sm]))

    for _ in range(per_sm):
        for sm in range(sms):
            item = next(queue, None)
            if item is not None:
                remaining[sm][item[0]] = item[1]
    for sm in range(sms):
        schedule(sm, 0.0)
    end = 0.0
    while events:
        now, sm, v = heapq.heappop(events)
        if v != version[sm]:
            continue
        freed = [sm]            # the SMs a block ends on at this instant
        while events and events[0][0] <= now * (1 + 1e-12):
            _, other, v = heapq.heappop(events)
            if v == version[other] and other not in freed:
                freed.append(other)
        slots = {}
        for f in freed:
            advance(f, now)
            blocks = remaining[f]
            for b in [b for b, left in blocks.items() if left <= 1e-9 * max(1.0, work[b])]:
                del blocks[b]
            slots[f] = per_sm - len(blocks)
        end = now
        # the next blocks round the SMs with free slots, one each a round (as the first wave)
        while any(slots.values()):
            for f in freed:
                item = next(queue, None) if slots[f] else None
                if item is not None:
                    remaining[f][item[0]] = item[1]
                slots[f] = slots[f] - 1 if item is not None else 0
        for f in freed:
            schedule(f, now)
    return end


#: Kernels whose mma is the m16n8k16 of their inputs' format (the others': TF32 m16n8k8). Their
#: time needs that mma's measured rate: rates without it make ``launch_seconds`` raise
#: LookupError (``simulator.levels`` gives NaN). A Workload of 2-byte elements is timed at the
#: fp16 mma's rate (``Workload`` does not tell fp16 from bf16; calibrate measures both).
HALF_MMA_KERNELS = frozenset({"flash_forward_half", "flash_backward_half"})


def mma_format(kernel: str, w: Workload, variant: str = "") -> str:
    """The format of ``kernel``'s mma (its ``variant``) on workload ``w``: "tf32", or
    "float16" for the half kernels on 2-byte inputs and for fa2_fp16x3's forward (the fp16
    kernel on fp16 parts of fp32 inputs: ``simulator.fp16x3.VARIANT``)."""
    from .fp16x3 import VARIANT

    if kernel in HALF_MMA_KERNELS and (w.dtype_bytes == 2 or VARIANT in variant.split("+")):
        return "float16"
    return "tf32"


def launch_seconds(p: Phase, w: Workload, tiling: Tiling, hw: Hardware, dram_bytes=None,
                   read_miss: dict[str, float] | None = None) -> float:
    """The model's time of launch ``p`` (module docstring); NaN without measured rates.
    ``dram_bytes``: (read, write) DRAM bytes of the launch, for the row kernels; ``read_miss``:
    each tensor it reads, the share of those reads DRAM serves (``simulator.l2``'s
    ``L2Phase.read_miss``; without it, the launch's mean share for every tensor)."""
    r = rates_for(hw)
    if r is None:
        return float("nan")
    if not p.block_trips:
        return row_kernels.seconds(p, w, hw, r, dram_bytes)
    kernel, variant = p.code
    fmt = mma_format(kernel, w, variant)
    r.mma_at(fmt, 1)                    # LookupError: rates that never timed this mma
    causal = recorded_causal(p, w)
    res = resources(kernel, tiling, w.d, causal, variant)
    occ = res.occupancy(hw)
    warps_b = occ.warps_per_block
    warps_on_sm = occ.warps_per_sm
    loop = sass(kernel, tiling, w.d, causal, variant, region=MAIN_LOOP)
    overlap = r.mma_lds_overlap
    cost = lambda counts, wavefronts: _cost(counts, wavefronts, warps_on_sm, warps_b, r, overlap, fmt)  # noqa: E731
    outside_counts, counts = block_counts(p, w, tiling, warps_b)
    t_out = cost(outside_counts, 0.0)
    # ... and each trip of a copy through registers (LDG; not cp.async, whose LDGSTS a thread
    # does not wait on) waits for its loads: the block's own tile, read once a launch (L2
    # cold), from DRAM
    chain = sum(n for region, n in outer_trips(kernel, tiling, w.d, causal, variant)
                if region.ldg32 + region.ldg64 + region.ldg128) * global_load_latency(r, 1.0)
    heads = p.grid_heads(w.BH)
    trips = sum(p.block_trips) * heads
    t_trip = cost(counts, smem_wavefronts(p, w.dtype_bytes) / trips if trips else 0.0)
    share = occ.blocks_per_sm
    spills_miss = local_traffic(p, w, tiling, hw).missed_bytes > 0
    # the share of the global loads' bytes DRAM serves (the L2 model's DRAM reads over the
    # sector model's SM<->L2 reads): their latency between L2's and DRAM's
    traffic = sector_traffic(p, w, tiling)
    fetched = traffic.missed * SECTOR_BYTES
    l2_miss = (dram_bytes[0] / fetched) if dram_bytes and fetched else 0.0
    shares = {name: l2_miss for name in p.hbm_reads} | (read_miss or {})
    trip_miss = trip_dram_share(p, shares, l2_miss)
    # the sectors a reduction sends to L2: the sector model's over the global reduction warp
    # instructions of the launch's trips (every one of our kernels' is in the main loop)
    reductions = counts["reductions"] * trips
    red_sectors = traffic.reduced / reductions if reductions and traffic.reduced else None
    # trips on interior tiles skip the masking code of edge tiles: simulate each kind the
    # launch has (an edge trip then counts as ``weight`` interior ones)
    edge_share = p.edge_share if has_edge_code(kernel, tiling, w.d, causal, variant) else 1.0
    kinds = [e for e, share_e in ((False, 1.0 - edge_share), (True, edge_share)) if share_e > 0]
    simulated = {e: {k: _simulated_trip(kernel, variant, tiling, w, occ, r, fmt, spills_miss, k,
                                        rows_per_trip(p), trip_miss, e, red_sectors=red_sectors)
                     for k in range(1, share + 1)}
                 for e in kinds}
    weight = 1.0
    simulated_trips = all(c is not None for trip in simulated.values() for c in trip.values())
    if simulated_trips:
        trip_cycles = simulated[kinds[0]].__getitem__  # k resident blocks: a trip of each, side by side
        if len(kinds) == 2:
            weight = simulated[True][share] / simulated[False][share]
    else:
        trip_cycles = lambda k: k * t_trip       # noqa: E731  (each at 1/k of the SM's throughput)
    # the work outside the main loop, in trips: a block's share of a full SM's throughput, or
    # the latency of its tile copies where that is longer (the SM's other blocks go on)
    outside = max(share * t_out, chain) / trip_cycles(share)
    # ... and before its first trip a block waits for its first tiles, which the SM's resident
    # blocks, started together, draw at the SM's share of DRAM's bandwidth: the part of that
    # wait beyond the copies' latency chain (a wait as long as the chain is hidden as the chain is)
    together = min(share, -(-len(p.block_trips) * heads // hw.sm_count))
    outside += max(0.0, prologue_cycles(p, w, r, together, shares) - chain) / trip_cycles(share)
    # a query head's first trip in a block also runs the head's start code, which the
    # simulated trips leave out: simulated with it, it counts as that many plain trips, once
    # for each query head a block with trips visits
    starts = 0.0
    if simulated_trips and has_head_code(kernel, tiling, w.d, causal, variant):
        first = _simulated_trip(kernel, variant, tiling, w, occ, r, fmt, spills_miss, share,
                                rows_per_trip(p), trip_miss, kinds[0], red_sectors=red_sectors, head=True)
        starts = (first / simulated[kinds[0]][share] - 1.0) * w.BH / heads
    work = [n + outside + (starts if n else 0.0) for n in _launch_order(p, heads, weight)]
    cycles = shared_makespan(work, hw.sm_count, share, trip_cycles)
    clock = r.mma_clock_hz if loop.hmma else r.clock_hz
    return cycles / clock + (r.launch_floor_s or 0.0)


#: Tensors a block of each tiled kernel reads once, all before its main loop (its own tiles:
#: the row block of a forward, the key block of a backward); the others it streams, a tile a trip.
OWN_TILES = {
    "flash_forward_v2": ("Q",), "flash_forward_tc": ("Q",), "flash_forward_half": ("Q", "Q parts"),
    "flash_backward": ("K", "V"), "flash_backward_tc": ("K", "V"),
    "flash_backward_half": ("K", "V", "K parts", "V parts"),
    "flash_backward_dq": ("Q", "dO", "L", "L (recomputed)", "D"),
}


def trip_dram_share(p: Phase, shares: dict[str, float], mean: float) -> float:
    """The DRAM share of a main-loop trip's global loads, for their latency: a trip waits at
    its barrier for the slowest of its loads, so where the tensors it streams (all it reads
    but its own tiles, ``OWN_TILES``, and the outputs it reads back) come from DRAM in
    different shares (``shares``: ``simulator.l2``'s ``L2Phase.read_miss``) the largest
    counts: the standard matmul's O = P V reads its chunk of P, streamed once, from DRAM and
    its chunk of V, re-read by every row block, from L2, and waits for P. Where the loop nests
    loops that load (``Phase.inner_trips``: Algorithm 1's K_j, V_j a trip, Q_i, O_i, l_i, m_i
    in the loop within) each load waits on its own: the launch's ``mean`` share."""
    if p.inner_trips:
        return mean
    own = OWN_TILES.get(p.code[0], ())
    streamed = [m for name, m in shares.items()
                if name not in own and not (p.hbm_writes.get(name) and name not in p.written_first)]
    return max(streamed, default=mean)


def prologue_cycles(p: Phase, w: Workload, r: MachineRates, resident: int,
                    shares: dict[str, float]) -> float:
    """Cycles a block of tiled launch ``p`` waits before its first trip: DRAM's latency, then
    the DRAM bytes of its first tiles -- its own tiles (``OWN_TILES``: read once a launch, so
    from DRAM) and one trip's share of the tensors it streams (the share of each that DRAM
    serves, ``shares``: ``trip_dram_share``'s); not the outputs it reads back (dQ's atomic adds, Algorithm 1's O, l,
    m: written before they are read) -- for each of the ``resident`` blocks an SM starts together, at one
    SM's share of DRAM's read bandwidth (every SM starting its blocks at once: a launch's
    first wave, and the next waves of blocks of equal work)."""
    own = OWN_TILES.get(p.code[0], ())
    blocks = len(p.block_trips) * p.grid_heads(w.BH)
    trips = sum(p.block_trips) * p.grid_heads(w.BH)
    if not blocks or not trips:
        return 0.0
    first = sum((n / blocks if name in own else shares.get(name, 0.0) * n / trips)
                * element_bytes(name, w.dtype_bytes)
                for name, n in p.hbm_reads.items() if not p.hbm_writes.get(name))
    return global_load_latency(r, 1.0) + resident * first / r.dram_read_bytes_per_cycle


def block_counts(p: Phase, w: Workload, tiling: Tiling, warps: int) -> tuple[dict, dict]:
    """(outside the main loop, once a block; a main-loop trip) warp instructions of a block of
    ``warps`` warps of tiled launch ``p``, by class (``_KEYS``): the static counts
    (``simulator.sass``), the strided tile copies before the main loop as often as they run
    (``outer_trips``: Qi of the forwards, Kj, Vj of the backwards), each loop nested in it as
    often as it runs (``nested_runs``), less what a trip does not run (``trips.skipped``: the
    trip is the mean over the launch's trips, edge tiles' share ``Phase.edge_share``, a query
    head's first trips' ``Phase.head_share``)."""
    kernel, variant = p.code
    causal = recorded_causal(p, w)
    loop = sass(kernel, tiling, w.d, causal, variant, region=MAIN_LOOP)
    whole = sass(kernel, tiling, w.d, causal, variant, region="kernel")
    outside = _counts(whole, [loop], warps)
    for region, n in outer_trips(kernel, tiling, w.d, causal, variant):
        outside = {k: v + (n - 1) * getattr(region, k) * warps for k, v in outside.items()}
    trip = _counts(loop, [], warps)
    for region, extra in nested_runs(p, kernel, tiling, w, variant):
        trip = {k: v + extra * getattr(region, k) * warps for k, v in trip.items()}
    left = skipped(kernel, tiling, w.d, causal, variant, rows_per_trip(p), p.edge_share,
                   p.head_share(w.BH))
    return outside, {k: v - left.get(k, 0.0) * warps for k, v in trip.items()}


def _simulated_trip(kernel: str, variant: str, t: Tiling, w: Workload, occ, r: MachineRates,
                    fmt: str = "tf32", spills_miss: bool = False, resident: int | None = None,
                    rows: int | None = None, l2_miss: float = 0.0, edge: bool = True,
                    red_sectors: float | None = None, account: dict | None = None,
                    head: bool = False):
    """Cycles of one main-loop trip of every resident block (``resident`` of them: None, as
    many as ``occ`` fits) by the issue simulator, or None where it cannot run (no recorded
    stream, nested loops of unknown trips). Global loads at the L2's latency, spill
    refills at L1's, or L2's where they miss L1 (``spills_miss``: ``simulator.local``); a trip
    on an ``edge`` tile (with the masking code only those run, ``issue.Op.edge``) or not, a
    query head's first (``head``: with its start code, ``issue.Op.head``) or not;
    ``red_sectors``: the sectors a global reduction of the loop sends to L2 (None: a coalesced
    warp's, ``issue.loop_cycles``); ``account``: ``issue.simulate``'s, filled by the
    simulation (``issue.stall_reasons``)."""
    from .issue import Streams, loop_cycles, loop_record

    causal = w.kernel_causal
    trips = inner_trips(kernel, t, w.d, causal, variant, rows)
    try:
        record = loop_record(kernel, t, w.d, causal, variant)
    except LookupError:
        return None
    if trips is None or len(record["inner_loops"]) != len(trips):
        return None
    blocks = occ.blocks_per_sm if resident is None else resident
    # the busiest scheduler's warps: an SM deals its warp slots to the 4 schedulers in turn,
    # so a block of 5 warps puts two on one scheduler and one on each other; with a barrier a
    # trip, every warp of the block waits for that scheduler's pair (H200, 2026-12-06: the
    # fp16x3 forward's 80 x 32 blocks of 5 warps ran a trip in about the time of 112 x 32's 7,
    # results/h200/tuning/fp16x3_forward_112_2026-12-06.log)
    per_scheduler = max(1, -(-blocks * occ.warps_per_block // 4))
    if per_scheduler % blocks:
        return None          # the simulator splits a scheduler's warps evenly over the blocks
    # scheduler 0's warps, 0, 4, 8, ... of each block (simulated warp i belongs to block
    # i mod blocks), each the trip it runs (``trips.warp_stream``: nested loops' and peeled
    # copies' runs, and a row copy's set-up, can differ between warps); one stream where
    # they are all the same
    warps = [4 * (i // blocks) for i in range(per_scheduler)]
    own = {v: warp_stream(kernel, t, w.d, causal, variant, rows, v, edge, head) for v in set(warps)}
    distinct = set(own.values())
    stream = distinct.pop() if len(distinct) == 1 else Streams(tuple(own[v] for v in warps))
    l2, l1 = memory_latencies(r)
    # warp roles (v12's warp pairs, role = warp % 2): a scheduler's warps w, w + 4, ... share
    # one role, so each scheduler runs one role's part of the loop beside the common part:
    # the SM's trip is the slower scheduler's
    bodies = stream.per_warp if isinstance(stream, Streams) else (stream,)
    roles = sorted({o.role for body in bodies for o in body if o.role is not None}) or [None]
    return max(loop_cycles(_of_role(stream, role), per_scheduler, r,
                           global_latency=global_load_latency(r, l2_miss),
                           local_latency=l2 if spills_miss else l1, blocks=blocks, mma_format=fmt,
                           red_sectors=red_sectors, account=account, block_warps=occ.warps_per_block)
               for role in roles)


def _of_role(stream, role: int | None):
    """``stream`` (a tuple of ``Op`` or ``issue.Streams``) as the warps of ``role`` run it: the
    common instructions and that role's (all of it for None)."""
    from .issue import Streams

    if role is None:
        return stream
    keep = lambda body: tuple(o for o in body if o.role in (None, role))  # noqa: E731
    return Streams(tuple(keep(b) for b in stream.per_warp)) if isinstance(stream, Streams) else keep(stream)


def _launch_order(p: Phase, bh: int, edge_weight: float = 1.0) -> list[float]:
    """Main-loop trips of every block of the launch, in the order blocks start, a trip on an
    edge tile (``Phase.edge_trips``) counted as ``edge_weight`` others."""
    edges = p.edge_trips or (0,) * len(p.block_trips)
    trips = [n + (edge_weight - 1.0) * e for n, e in zip(p.block_trips, edges, strict=True)]
    if p.tile_major:
        return [n for n in trips for _ in range(bh)]
    return trips * bh


