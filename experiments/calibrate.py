"""Calibrate: this GPU's machine rates, from microbenchmarks, for a runtime model of our kernels.

One row a measured quantity (``quantity``, ``value``, ``unit``; how: ``measured_by``, the
configuration: ``warps_per_sm``, ``ilp`` chains a warp, ``blocks_per_sm``; ``clock_hz``: the SM
clock during that kernel; ``spread``: (max - min) / median over ``repeats``), measured by the
kernels of experiments/common/microbench.py (which says how each is timed):

- SM clock under load (Hz); tensor core: TF32 mma.sync m16n8k8, and the half kernels' fp16 and
  bf16 m16n8k16, a cycle an SM at 4, 8, 16 warps an SM x 1, 2, 4 independent chains a warp, and
  each one's dependent latency (cycles);
- the fp16 and TF32 mma beside 0, 2, 4, 8 independent FFMA or ALU instructions an mma, 8 and
  16 warps an SM, and the fraction of the shorter they fail to overlap
  (``mma_<f16|tf32>_<ffma|alu>_overlap``; tools/mma_dispatch.py fits the issue simulator's
  ``mma_dispatch_cycles`` to them), and beside LDS.128 (``mma_lds_overlap``, fp16:
  ``mma_f16_lds_overlap``);
- a warp's burst of 0-12 LDS.128 before independent FFMA (``mio_burst_cycles``: how deep the
  shared-memory queue is; not used by the model);
- FFMA, MUFU.EX2 and ALU (LOP3 + VIMNMX) warp instructions a cycle an SM and their latencies;
- shared memory: wavefronts a cycle an SM of conflict-free LDS / STS of 32, 64, 128 bits a
  lane; shfl.sync a cycle an SM;
- global memory: read bandwidth from L2 (16 MiB) and DRAM (2 GiB), write bandwidth to DRAM,
  whole GPU (B/s) and a cycle an SM;
- the cycles of a dependent L2-hit load issued right behind 0, 8, 32, 64 atomic adds of a warp,
  into lines of the block's own or lines every SM adds into (experiments/common/atomic_latency.py:
  the wait of a backward's first loads of a step, after its dQ_i adds);
- __syncthreads() cycles, blocks of 4, 8, 16 warps; launch overhead: GPU seconds between queued
  empty kernels, host seconds a numba launch (and per extra array argument); how fast an SM
  starts blocks that do nothing (ns between consecutive starts past its first wave) and such a
  block's life (ns), what the row kernels' thousands of short blocks cost beside their bytes;
- the dirty bytes L2 still holds when a streaming kernel ends (ncu; experiments/common/l2_residue.py):
  torch's copy, and torch's writes of 4-256 MiB with 0, 1 or 3 bytes read a byte written, for
  the record; and a numba kernel's with 1 or 3 words read a word written beside a re-read hot
  buffer of 0-48 MiB (the hot-set sweep), whose residue over its write share without the
  buffer is the dirty capacity ``simulator.local.dirty_residue`` uses;
- SM<->L2 read sectors per 32 bytes copied HBM -> SRAM by cp.async (16 and 4 bytes) and by
  register loads (ncu; experiments/common/copy_sectors.py: why the half kernels' loads count 1.5x);
- the L1 hit rate of local (spill) loads reused cyclically, against the footprint and the global
  lines streamed between two uses, over L1's capacity (ncu; experiments/common/l1_reuse.py: how
  ``simulator.local`` counts spill misses);
- the L2 hit fraction of re-reads by the next waves of blocks, each wave's blocks reading every
  one of 32 units (as a causal forward's read every head's K and V), against the working set over
  L2's capacity (ncu; experiments/common/l2_reuse.py: what ``simulator.l2``'s assumption 4b
  takes from it: the wave's other readers hit, the next waves' only within half of L2);
- a launch's floor and what each block an SM adds to it, and the read bandwidth of a stream
  whose threads wait for their loads round after round, against the bytes an SM has in flight
  (ncu; experiments/common/launch_cost.py: what the row kernels' time is made of);
- block placement for grids of 1, 2, 4 blocks an SM: summary rows here, and the block -> SM map
  of every block in ``<out>/calibrate/placement.csv`` (``block``, ``smid``, ``start_rank``,
  ``start_ns``, ``end_ns``, ``first_wave``).

``simulator.rates.load_rates`` reads this CSV (committed per device, e.g.
simulator/rates_h200.csv). CPU: every kernel runs once, tiny, under Numba's CUDA simulator, to
show that it executes; no value is measured (empty, note "simulator: not a measurement").
"""
from __future__ import annotations

from dataclasses import asdict

from experiments.common import (atomic_latency, copy_sectors, l1_reuse, l2_residue, l2_reuse, launch_cost,
                                microbench, plotting)
from experiments.common.context import NO_GPU, RunContext
from experiments.common.metadata import run_metadata
from experiments.common.results import write_rows
from numba_flash.memory import simulator_enabled

NAME = "calibrate"
PLACEMENT_CSV = "placement.csv"
#: CSV column order: the Measurement fields.
COLUMNS = ("quantity", "value", "unit", "warps_per_sm", "ilp", "blocks_per_sm", "clock_hz", "spread",
           "repeats", "measured_by", "detail", "note")


def row(m: microbench.Measurement) -> dict:
    fields = asdict(m)
    return {column: fields[column] for column in COLUMNS}


def run(ctx: RunContext) -> list[dict]:
    simulated = not ctx.gpu or simulator_enabled()     # (a "gpu" context under the simulator: tests)
    bench = microbench.Bench(simulated=simulated, quick=ctx.quick)
    if simulated:
        ctx.skip(f"{NAME}: measurements ({NO_GPU}); each kernel runs once, tiny, under the CUDA simulator")
    rows = []
    for measure in ctx.progress(microbench.MEASUREMENTS, f"{NAME}: microbenchmarks"):
        rows += [row(m) for m in measure(bench)]
    rows += [row(m) for m in atomic_latency.measure(bench)]
    placement_rows, raw = microbench.measure_placement(bench)
    rows += [row(m) for m in placement_rows]
    rows += [row(m) for m in l2_residue.measure(not simulated)]
    rows += [row(m) for m in l2_residue.measure_sweep(not simulated)]
    rows += [row(m) for m in l2_residue.measure_hot(not simulated)]
    rows += [row(m) for m in copy_sectors.measure(not simulated)]
    rows += [row(m) for m in l1_reuse.measure(not simulated)]
    rows += [row(m) for m in l2_reuse.measure(not simulated)]
    rows += [row(m) for m in launch_cost.measure(not simulated)]
    if raw:
        write_rows(ctx.folder(NAME) / PLACEMENT_CSV, raw, run_metadata(NAME, ctx.device, ctx.command))
    return rows


# ---- plot -------------------------------------------------------------------------------------
def _value(rows, quantity, **where):
    for r in rows:
        if r["quantity"] == quantity and all(r.get(k) == v for k, v in where.items()) and r["value"] is not None:
            return r["value"]
    return None


def _bars(ax, labelled: list[tuple[str, float | None]], ylabel: str, title: str, fmt: str = "{:.3g}") -> None:
    shown = [(label, v) for label, v in labelled if v is not None]
    if not shown:
        plotting.annotate_empty(ax, "no measurement (simulator: not a measurement)")
    else:
        labels, values = zip(*shown)
        bars = ax.bar(range(len(values)), values, color="C0", alpha=0.8)
        ax.set_xticks(range(len(values)), labels, rotation=35, ha="right", fontsize=8)
        for bar, v in zip(bars, values):
            ax.annotate(fmt.format(v), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)


def plot(rows: list[dict], path) -> None:
    clock = _value(rows, "clock_hz")
    gap, host = _value(rows, "launch_gap_s"), _value(rows, "host_launch_s")
    title = "Calibrate: machine rates from microbenchmarks"
    if clock:
        title += f" (SM clock {clock / 1e6:.0f} MHz"
        title += f", launch gap {gap * 1e6:.2f} us" if gap else ""
        title += f", host launch {host * 1e6:.1f} us)" if host else ")"
    fig, axes = plotting.figure(2, 2, title=title)

    ax = axes[0]
    kinds = (("tf32", "TF32 m16n8k8", "-"), ("f16", "fp16 m16n8k16", "--"), ("bf16", "bf16 m16n8k16", ":"))
    for name, label, style in kinds:
        for i, ilp in enumerate((1, 2, 4)):
            pts = sorted((r["warps_per_sm"], r["value"]) for r in rows if r["quantity"] == f"mma_{name}_per_cycle_per_sm"
                         and r["ilp"] == ilp and r["value"] is not None)
            if pts:
                ax.plot(*zip(*pts), color=f"C{i}", linestyle=style, marker="o", label=f"{label}, {ilp} chain(s) a warp")
    if not ax.lines:
        plotting.annotate_empty(ax, "no measurement (simulator: not a measurement)")
    ax.set_ylim(bottom=0)
    plotting.finish(ax, "warps an SM", "mma.sync / cycle / SM", title="tensor core throughput")

    _bars(axes[1], [(name, _value(rows, f"{name}_per_cycle_per_sm")) for name in ("ffma", "mufu_ex2", "alu", "shfl")]
          + [(f"{op}{bits} (wavefronts)", _value(rows, f"{op}{bits}_wavefronts_per_cycle_per_sm"))
             for op in ("lds", "sts") for bits in (32, 64, 128)],
          "per cycle per SM", "warp instructions (or wavefronts) / cycle / SM, 32 warps")
    _bars(axes[2], [(f"{name} latency", _value(rows, f"{name}_latency_cycles"))
                    for name in ("mma_tf32", "mma_f16", "mma_bf16", "ffma", "mufu_ex2", "alu")]
          + [(f"barrier, {w} warps", _value(rows, "barrier_cycles", warps_per_sm=w)) for w in (4, 8, 16)],
          "cycles", "latencies (one dependent chain) and __syncthreads()")
    tb = [(label, None if v is None else v / 1e12) for label, v in
          (("L2 read (16 MiB)", _value(rows, "l2_read_bytes_per_s")),
           ("DRAM read (2 GiB)", _value(rows, "dram_read_bytes_per_s")),
           ("DRAM write (2 GiB)", _value(rows, "dram_write_bytes_per_s")))]
    _bars(axes[3], tb, "TB/s", "global memory bandwidth, whole GPU", fmt="{:.2f}")
    plotting.save(fig, path, footnote="each bar: median over repeats; block placement: placement.csv and the "
                                      "placement_* rows of the CSV")
