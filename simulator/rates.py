"""Machine rates of one GPU, measured by microbenchmarks (the ``calibrate`` experiment), for a
runtime model of our kernels: how fast each pipe (tensor core, FMA, MUFU, ALU, shared memory,
shuffles, global memory) goes, what a barrier and a launch cost.

``load_rates(path)`` reads the CSV that ``python -m experiments run calibrate --device gpu``
writes (``<out>/calibrate/calibrate.csv``; the H200's is committed as ``RATES_CSV``, another card's
beside it as ``simulator.runtime.RATES_OF`` names it, e.g. rates_h100.csv): one row a
quantity, its ``value`` and its configuration (``warps_per_sm``, ``ilp``). Units: per-SM rates
are *warp instructions* (or 128-byte shared-memory wavefronts, or bytes) per SM clock cycle;
latencies and barriers in cycles; launch costs in seconds; ``clock_hz`` converts cycles to
seconds (the clock measured under load, not the boost clock on the datasheet).

The placement of blocks on SMs (which blocks of a grid run side by side on one SM in the first
wave) is in a CSV of its own, one row a block: ``load_placement``. Pure Python: no numba.
"""
from __future__ import annotations

import csv
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

#: The H200's rates (a copy of a calibrate run's calibrate.csv) and block placement (its placement.csv).
RATES_CSV = Path(__file__).with_name("rates_h200.csv")
PLACEMENT_CSV = Path(__file__).with_name("placement_h200.csv")
#: Shared-memory access widths (bits a lane) measured.
WIDTHS = (32, 64, 128)

#: MachineRates field -> calibrate quantity, for the fields that are one value.
_SCALARS = {
    "sm_count": "sm_count",
    "clock_hz": "clock_hz",
    "mma_tf32_latency_cycles": "mma_tf32_latency_cycles",
    "ffma_per_cycle": "ffma_per_cycle_per_sm",
    "ffma_latency_cycles": "ffma_latency_cycles",
    "mufu_ex2_per_cycle": "mufu_ex2_per_cycle_per_sm",
    "mufu_ex2_latency_cycles": "mufu_ex2_latency_cycles",
    "alu_per_cycle": "alu_per_cycle_per_sm",
    "alu_latency_cycles": "alu_latency_cycles",
    "shfl_per_cycle": "shfl_per_cycle_per_sm",
    "l2_read_bytes_per_cycle": "l2_read_bytes_per_cycle_per_sm",
    "dram_read_bytes_per_cycle": "dram_read_bytes_per_cycle_per_sm",
    "dram_write_bytes_per_cycle": "dram_write_bytes_per_cycle_per_sm",
    "l2_read_bytes_per_s": "l2_read_bytes_per_s",
    "dram_read_bytes_per_s": "dram_read_bytes_per_s",
    "dram_write_bytes_per_s": "dram_write_bytes_per_s",
    "launch_gap_s": "launch_gap_s",
    "host_launch_s": "host_launch_s",
    "host_launch_per_array_arg_s": "host_launch_per_array_arg_s",
}
MMA = "mma_tf32_per_cycle_per_sm"
#: The half-precision mma.sync m16n8k16 (fp32 accumulators) of each format: its throughput by
#: configuration and its latency, measured by calibrate since 2026-12-02 (older CSVs lack them).
HALF_MMA = {"float16": "mma_f16_per_cycle_per_sm", "bfloat16": "mma_bf16_per_cycle_per_sm"}
HALF_MMA_LATENCY = {"float16": "mma_f16_latency_cycles", "bfloat16": "mma_bf16_latency_cycles"}
#: The mma formats ``MachineRates.mma_at`` knows: TF32 m16n8k8, fp16 / bf16 m16n8k16.
MMA_FORMATS = ("tf32", *HALF_MMA)
BARRIER = "barrier_cycles"
#: experiments/common/launch_cost.py's rows (since 2026-12-07), one a configuration: the detail
#: (JSON) gives the empty kernel's blocks an SM, the stream's bytes in flight an SM.
EMPTY_KERNEL, STREAM_READ = "empty_kernel_s", "stream_read_bytes_per_s"
#: Quantities measured more than once (one row per configuration), summarised by their median.
MEDIANS = {"mma_lds_overlap": "mma_lds_overlap"}
#: ... and those that may be missing (None): measured by ncu, which not every run has.
OPTIONAL_MEDIANS = {"l2_dirty_capacity_bytes": "l2_dirty_capacity_bytes"}
#: A load behind a warp's reductions (experiments/common/atomic_latency.py, in calibrate since
#: 2026-12-05): one row a reduction count k and mode, its ``detail`` naming both ("k=64; each
#: block its own tile; reductions of 8 sectors ..."). ``MachineRates.red_sectors_per_cycle``
#: is derived from the rows of ``RED_OWN_LINES`` (that module's ``MODES[PRIVATE]``).
LOAD_AFTER_RED = "load_after_red_cycles"
RED_OWN_LINES = "each block its own tile"
_RED_DETAIL = re.compile(r"k=(\d+); ([^;]+); reductions of (\d+) sectors")


@dataclass(frozen=True)
class MachineRates:
    """Measured rates of one GPU. "A cycle" is a cycle of one SM at ``clock_hz``; "per SM"
    rates are what one SM sustains with enough independent work (the best configuration
    measured, unless the field is a mapping by configuration).

    device, source: the GPU's name and the CSV (and date) the rates came from.
    sm_count: SMs of the device measured.  clock_hz: SM clock under load (clock64 over
    globaltimer, FFMA on every SM).
    mma_tf32_per_cycle: TF32 ``mma.sync.m16n8k8`` (2048 FLOP each) a cycle an SM, the best of
    ``mma_tf32_by_config``: (warps an SM, independent accumulator chains a warp) -> mma a cycle an
    SM, at 4, 8, 16 warps x 1, 2, 4 chains (``mma_tf32_at`` interpolates).
    mma_tf32_latency_cycles: cycles from one mma to the next that depends on it.
    ffma_per_cycle, mufu_ex2_per_cycle, alu_per_cycle: warp instructions a cycle an SM (32 warps,
    8 chains a thread) of FFMA, MUFU.EX2 and integer ALU-pipe instructions (LOP3.LUT and
    VIMNMX, counted alike); FLOP a cycle = 64 ffma_per_cycle. *_latency_cycles: one dependent chain.
    lds_wavefronts_per_cycle, sts_wavefronts_per_cycle: bits a lane (32, 64, 128) -> 128-byte
    wavefronts a cycle an SM of conflict-free warp-wide shared loads / stores (a warp's LDS.32 is
    1 wavefront, LDS.64 2, LDS.128 4).  shfl_per_cycle: shfl.sync warp instructions a cycle an SM.
    l2_read_bytes_per_cycle, dram_read_bytes_per_cycle, dram_write_bytes_per_cycle: bytes a cycle
    an SM with every SM streaming (= the whole GPU's bytes/s / (clock_hz x sm_count)); reads from
    a 16 MiB buffer resident in L2, reads and writes of a 2 GiB one; *_bytes_per_s: whole GPU.
    (The H200's L2 reading, 0.15 TB/s on 2026-12-01, is not credible -- 30x below its DRAM
    reads: the benchmark's 16 MiB wraps every few steps, so all SMs hammer the same lines at
    once; no model uses it until it is measured properly.)
    barrier_cycles: warps a block -> cycles a ``__syncthreads()`` (one block an SM, 4, 8, 16
    warps; ``barrier_cycles_at`` interpolates).
    lds_latency_cycles, shfl_latency_cycles: one warp's dependent chain of LDS.32 (a pointer
    chase) and of shuffles; None in CSVs from before they were measured.
    mma_clock_hz: the SM clock while the mma benchmarks ran (the median of their rows): the
    clock of tensor-pipe-bound kernels, which run below the FFMA-loaded ``clock_hz``.
    mma_lds_overlap: how much conflict-free LDS.128 beside independent mma serialise (0: the
    shorter hides under the longer, 1: they add up; the median over 1 and 2 loads an mma).
    l2_dirty_capacity_bytes: the L2 bytes whose write share a streaming kernel leaves dirty
    when it ends (ncu, experiments/common/l2_residue.py's hot-set sweep without a hot buffer:
    residue / write share, the median; None where the run had no ncu, or predates it).
    mma_half_by_config, mma_half_latency_cycles: format ("float16", "bfloat16") -> the
    ``mma.sync.m16n8k16`` (fp32 accumulators, 4096 FLOP each) rates by (warps an SM, chains a
    warp), as ``mma_tf32_by_config``, and its dependent latency; empty for CSVs from before
    they were measured (then ``mma_at`` of a half format raises LookupError).
    l1_hit_latency_cycles, l2_hit_latency_cycles, dram_latency_cycles: cycles of a dependent
    global load that hits in L1 (ld.global.ca) / in L2 with L1 bypassed (ld.global.cg) / misses
    L2, one thread's pointer chase; None for CSVs from before they were measured (2026-12-02).
    red_sectors_per_cycle: 32-byte sectors of global reductions (RED, fp32 adds) an SM drains a
    cycle, every SM adding into lines of its own, as a load behind them sees it: calibrate's
    ``load_after_red_cycles`` (8 warps an SM, each k reductions of 8 sectors, then a dependent
    L2-hit load) at the largest k measured, warps x k x sectors / (cycles(k) - cycles(0))
    (``red_drain_rate``); None for CSVs without those rows (before 2026-12-05).
    mma_dispatch_cycles: cycles after an mma issues during which its scheduler dispatches no
    FMA-pipe (FFMA, FADD, FMUL, IMAD, ...) or ALU instruction (``MMA_DISPATCH``: calibrate's
    mma-beside-FFMA / -ALU microbenchmarks, fitted through the issue simulator by
    tools/mma_dispatch.py); None for CSVs without that row (before 2026-12-06: no such hold).
    launch_gap_s: GPU seconds from one queued empty kernel to the next (the launch overhead the
    GPU adds between back-to-back kernels).  host_launch_s: host seconds a numba launch of an
    empty kernel of one array argument; host_launch_per_array_arg_s: each further array argument.
    empty_kernel_s: blocks an SM -> ncu's time (``gpu__time_duration``) of a kernel of that many
    blocks of 128 threads that do nothing (experiments/common/launch_cost.py; ``launch_floor_s``,
    ``block_dispatch_s``).  stream_read_bytes_per_s: bytes an SM has in flight -> the read
    bandwidth (whole GPU) of a stream whose threads wait for their loads round after round
    (``stream_read_at``). Both empty for CSVs from before they were measured (2026-12-07).
    """

    device: str
    source: str
    sm_count: int
    clock_hz: float
    mma_tf32_per_cycle: float
    mma_tf32_by_config: Mapping[tuple[int, int], float]
    mma_tf32_latency_cycles: float
    ffma_per_cycle: float
    ffma_latency_cycles: float
    mufu_ex2_per_cycle: float
    mufu_ex2_latency_cycles: float
    alu_per_cycle: float
    alu_latency_cycles: float
    lds_wavefronts_per_cycle: Mapping[int, float]
    sts_wavefronts_per_cycle: Mapping[int, float]
    shfl_per_cycle: float
    l2_read_bytes_per_cycle: float
    dram_read_bytes_per_cycle: float
    dram_write_bytes_per_cycle: float
    l2_read_bytes_per_s: float
    dram_read_bytes_per_s: float
    dram_write_bytes_per_s: float
    barrier_cycles: Mapping[int, float]
    mma_clock_hz: float
    mma_lds_overlap: float
    launch_gap_s: float
    host_launch_s: float
    host_launch_per_array_arg_s: float
    lds_latency_cycles: float | None = None
    shfl_latency_cycles: float | None = None
    l2_dirty_capacity_bytes: float | None = None
    mma_half_by_config: Mapping[str, Mapping[tuple[int, int], float]] = field(default_factory=dict)
    mma_half_latency_cycles: Mapping[str, float] = field(default_factory=dict)
    l1_hit_latency_cycles: float | None = None
    l2_hit_latency_cycles: float | None = None
    dram_latency_cycles: float | None = None
    red_sectors_per_cycle: float | None = None
    mma_dispatch_cycles: float | None = None
    empty_kernel_s: Mapping[float, float] = field(default_factory=dict)
    stream_read_bytes_per_s: Mapping[float, float] = field(default_factory=dict)

    @property
    def ffma_flops_per_cycle(self) -> float:
        """FP32 FLOP a cycle an SM by FFMA (2 a lane, 32 lanes a warp instruction)."""
        return 64 * self.ffma_per_cycle

    def seconds(self, cycles: float) -> float:
        """``cycles`` of an SM at ``clock_hz``, in seconds."""
        return cycles / self.clock_hz

    def mma_tf32_at(self, warps_per_sm: float, ilp: int = 1) -> float:
        """mma a cycle an SM for ``warps_per_sm`` warps of ``ilp`` independent chains each: the
        measured chains count nearest below ``ilp`` (the fewest measured when below all), linear
        in warps between the measured warp counts, proportional to warps below the fewest
        measured (latency-bound: each warp's chain waits for its own results), flat above the most."""
        return _mma_interpolate(self.mma_tf32_by_config, warps_per_sm, ilp)

    def _half(self, fmt: str) -> Mapping[tuple[int, int], float]:
        if fmt not in HALF_MMA:
            raise ValueError(f"mma format must be one of {MMA_FORMATS}, got {fmt!r}")
        by_config = self.mma_half_by_config.get(fmt)
        if not by_config or fmt not in self.mma_half_latency_cycles:
            raise LookupError(f"{self.source} has no measured rate of the {fmt} mma.sync m16n8k16 "
                              f"({HALF_MMA[fmt]}, {HALF_MMA_LATENCY[fmt]}): run "
                              "`python -m experiments run calibrate --device gpu` on this GPU")
        return by_config

    def mma_at(self, fmt: str, warps_per_sm: float, ilp: int = 1) -> float:
        """``mma_tf32_at`` for the mma of ``fmt`` ("tf32", "float16", "bfloat16"); LookupError
        for a half format these rates did not measure."""
        if fmt == "tf32":
            return self.mma_tf32_at(warps_per_sm, ilp)
        return _mma_interpolate(self._half(fmt), warps_per_sm, ilp)

    def mma_per_cycle(self, fmt: str) -> float:
        """The best measured rate of the mma of ``fmt`` (mma a cycle an SM)."""
        return self.mma_tf32_per_cycle if fmt == "tf32" else max(self._half(fmt).values())

    def mma_latency_cycles(self, fmt: str) -> float:
        """Cycles from an mma of ``fmt`` to the next that depends on it."""
        if fmt == "tf32":
            return self.mma_tf32_latency_cycles
        self._half(fmt)
        return self.mma_half_latency_cycles[fmt]

    @property
    def launch_floor_s(self) -> float | None:
        """ncu's time of the smallest empty launch measured (one block): what any launch takes
        beside its blocks' work; None where not measured."""
        return self.empty_kernel_s[min(self.empty_kernel_s)] if self.empty_kernel_s else None

    def block_dispatch_s(self, blocks_per_sm: float) -> float:
        """Seconds an empty launch of ``blocks_per_sm`` blocks an SM takes beyond the floor (the
        SMs starting and retiring its blocks): linear between the measured grids, on the line
        through the two largest beyond them; 0 where not measured."""
        if len(self.empty_kernel_s) < 2:
            return 0.0
        points = sorted(self.empty_kernel_s.items())
        (xa, ya), (xb, yb) = points[-2:]
        if blocks_per_sm >= xb:
            grown = yb + (yb - ya) * (blocks_per_sm - xb) / (xb - xa)
        else:
            grown = _interpolate(points, blocks_per_sm, through_origin=False)
        return max(0.0, grown - points[0][1])

    def stream_read_at(self, in_flight_bytes_per_sm: float) -> float | None:
        """Read bandwidth (B/s, whole GPU) of threads that wait for their loads round after
        round, with ``in_flight_bytes_per_sm`` bytes of loads in flight an SM: linear between the
        measured points, proportional below the fewest (Little's law at their latency), flat
        above the most; None where not measured."""
        if not self.stream_read_bytes_per_s:
            return None
        return _interpolate(sorted(self.stream_read_bytes_per_s.items()), in_flight_bytes_per_sm,
                            through_origin=True)

    def barrier_cycles_at(self, warps: float) -> float:
        """Cycles a ``__syncthreads()`` of a block of ``warps`` warps: linear between the measured
        block sizes, flat beyond them."""
        return _interpolate(sorted(self.barrier_cycles.items()), warps, through_origin=False)


def _mma_interpolate(by_config: Mapping[tuple[int, int], float], warps_per_sm: float, ilp: int) -> float:
    chains = sorted({c for _, c in by_config})
    c = max([x for x in chains if x <= ilp] or chains[:1])
    points = sorted((w, r) for (w, k), r in by_config.items() if k == c)
    return _interpolate(points, warps_per_sm, through_origin=True)


def _interpolate(points: list[tuple[float, float]], x: float, through_origin: bool) -> float:
    """Piecewise-linear y(x) through ``points`` (ascending x), flat above the last; below the
    first flat, or on the line through the origin when ``through_origin``."""
    (x0, y0), (xn, yn) = points[0], points[-1]
    if x <= x0:
        return y0 * x / x0 if through_origin else y0
    if x >= xn:
        return yn
    for (xa, ya), (xb, yb) in zip(points, points[1:]):
        if xa <= x <= xb:
            return ya + (yb - ya) * (x - xa) / (xb - xa)
    raise AssertionError("unreachable")


def _number(cell) -> float | None:
    try:
        value = float(cell)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if r.get("experiment", "calibrate") == "calibrate"]


def red_drain_rate(rows: list[dict[str, str]]) -> float | None:
    """Sectors of reductions an SM drains a cycle (``MachineRates.red_sectors_per_cycle``) from
    calibrate's ``load_after_red_cycles`` rows of the own-lines mode (``RED_OWN_LINES``): at the
    largest k measured, the k reductions of each of ``warps_per_sm`` warps (``sectors`` each,
    the detail's) delay each warp's iteration by cycles(k) - cycles(0): the load waits until
    the SM has drained them all. None without a k = 0 row and one of k > 0."""
    cycles, sectors, warps = {}, {}, {}
    for r in rows:
        found = _RED_DETAIL.match(r.get("detail", ""))
        v = _number(r.get("value"))
        if r["quantity"] != LOAD_AFTER_RED or not found or found.group(2) != RED_OWN_LINES or v is None:
            continue
        k = int(found.group(1))
        cycles[k], sectors[k], warps[k] = v, int(found.group(3)), int(float(r["warps_per_sm"]))
    k = max(cycles, default=0)
    if 0 not in cycles or k == 0 or cycles[k] <= cycles[0]:
        return None
    return warps[k] * k * sectors[k] / (cycles[k] - cycles[0])


#: The row of ``MachineRates.mma_dispatch_cycles`` (written by tools/mma_dispatch.py).
MMA_DISPATCH = "mma_dispatch_cycles"


def load_rates(path: str | Path = RATES_CSV) -> MachineRates:
    """The MachineRates in a calibrate CSV; ValueError naming every quantity it lacks a value
    for (a CPU run's CSV has none: its rows say "simulator: not a measurement")."""
    path = Path(path)
    rows = _read(path)
    values: dict[str, float] = {}
    notes: dict[str, str] = {}
    mma: dict[tuple[int, int], float] = {}
    half: dict[str, dict[tuple[int, int], float]] = {}
    half_of = {q: fmt for fmt, q in HALF_MMA.items()}
    half_latency_of = {q: fmt for fmt, q in HALF_MMA_LATENCY.items()}
    mma_clocks: list[float] = []
    barrier: dict[int, float] = {}
    empty: dict[float, float] = {}
    stream: dict[float, float] = {}
    repeated: dict[str, list[float]] = {q: [] for q in (*MEDIANS.values(), *OPTIONAL_MEDIANS.values())}
    for r in rows:
        q, v = r["quantity"], _number(r.get("value"))
        if v is None:
            notes.setdefault(q, r.get("note", ""))
            continue
        if q in repeated:
            repeated[q].append(v)
        elif q == MMA or q in half_of:
            config = (int(float(r["warps_per_sm"])), int(float(r["ilp"])))
            (mma if q == MMA else half.setdefault(half_of[q], {}))[config] = v
            if _number(r.get("clock_hz")):
                mma_clocks.append(_number(r.get("clock_hz")))
        elif q == BARRIER:
            barrier[int(float(r["warps_per_sm"]))] = v
        elif q == EMPTY_KERNEL:
            empty[float(json.loads(r["detail"])["blocks_per_sm"])] = v
        elif q == STREAM_READ:
            stream[float(json.loads(r["detail"])["in_flight_bytes_per_sm"])] = v
        else:
            values[q] = v
    shared = {op: {bits: values.get(f"{op}{bits}_wavefronts_per_cycle_per_sm") for bits in WIDTHS}
              for op in ("lds", "sts")}
    missing = [q for q in _SCALARS.values() if q not in values]
    missing += [f"{op}{bits}_wavefronts_per_cycle_per_sm" for op, by in shared.items()
                for bits, v in by.items() if v is None]
    missing += [q for q, got in ((MMA, mma), (BARRIER, barrier), *repeated.items())
                if not got and q not in OPTIONAL_MEDIANS.values()]
    if missing:
        why = sorted({notes[q] for q in missing if notes.get(q)})
        raise ValueError(f"{path}: no value for {', '.join(missing)}" + (f" ({'; '.join(why)})" if why else ""))
    first = rows[0]
    return MachineRates(
        device=first.get("device", "unknown"), source=f"{path} ({first.get('date', 'undated')})",
        mma_tf32_per_cycle=max(mma.values()), mma_tf32_by_config=mma, barrier_cycles=barrier,
        mma_clock_hz=statistics.median(mma_clocks) if mma_clocks else values["clock_hz"],
        **{name: statistics.median(repeated[q]) for name, q in MEDIANS.items()},
        **{name: statistics.median(repeated[q]) if repeated[q] else None
           for name, q in OPTIONAL_MEDIANS.items()},
        mma_half_by_config=half,
        mma_half_latency_cycles={fmt: values[q] for q, fmt in half_latency_of.items() if q in values},
        lds_latency_cycles=values.get("lds_latency_cycles"),
        shfl_latency_cycles=values.get("shfl_latency_cycles"),
        l1_hit_latency_cycles=values.get("l1_hit_latency_cycles"),
        l2_hit_latency_cycles=values.get("l2_hit_latency_cycles"),
        dram_latency_cycles=values.get("dram_latency_cycles"),
        red_sectors_per_cycle=red_drain_rate(rows),
        mma_dispatch_cycles=values.get(MMA_DISPATCH),
        empty_kernel_s=empty, stream_read_bytes_per_s=stream,
        lds_wavefronts_per_cycle=shared["lds"], sts_wavefronts_per_cycle=shared["sts"],
        **{name: (int(values[q]) if name == "sm_count" else values[q]) for name, q in _SCALARS.items()})


def load_placement(path: str | Path = PLACEMENT_CSV) -> dict[int, tuple[tuple[int, ...], ...]]:
    """blocks an SM -> the first wave's co-resident groups: one tuple of block indices
    (ascending) for each SM, in ascending SM id, from a calibrate placement.csv."""
    groups: dict[int, dict[int, list[int]]] = {}
    for r in _read(Path(path)):
        if int(r["first_wave"]):
            groups.setdefault(int(r["blocks_per_sm"]), {}).setdefault(int(r["smid"]), []).append(int(r["block"]))
    return {k: tuple(tuple(sorted(by_sm[sm])) for sm in sorted(by_sm)) for k, by_sm in sorted(groups.items())}
