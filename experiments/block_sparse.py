"""Block-sparse FlashAttention: time and traffic against the fraction of blocks kept (Fig. 2 right, Proposition 4).

The paper's Algorithm 5 as ``flash_attention(..., block_mask=M, block_size=(128, 128))`` and its
backward (method "fa2", the only one with block masks; no causal mask, so that the closed forms
are exact): for s, the fraction of 128 x 128 blocks kept, over 1/64 ... 1, and beside it dense
FlashAttention (no block mask) of the same shape; forward, and forward + backward; fp16 and fp32.

Masks (``random_block_mask``): exactly k = max(1, round(s T^2)) of the T x T blocks, every row
and every column keeping floor(k / T) or ceil(k / T) of them -- k cells along consecutive
wrapped diagonals of the T x T grid, its rows and its columns then permuted at random (seed
``SEED``, the same for every s, so a sparser mask's blocks are a subset of a denser one's). The
balance is a choice: the forward runs a thread block per row block over its row's kept blocks,
the backward one per K/V block over its column's, so a row (column) holding more than its
share would set the time of the whole launch. Below s = 1 / T some rows (and columns) keep
nothing: their o is 0 (``empty_row_blocks`` counts them).

Per row: SM<->L2 bytes measured (GPU: ncu, as the other experiments; CPU: count_traffic under
the CUDA simulator) beside ``simulator.predict`` on the Workload with ``block_mask``
(``predicted_bytes_by`` / ``predicted_time_by``: the level model's, or where it has no number --
the block-sparse kernels, until tools/kernel_*.py record them -- the tiled count and the
roofline), and

* ``form_elements``: the closed forms' exact count (``block_sparse_forward_accesses``, +
  ``block_sparse_backward_accesses``), beside ``predicted_elements``, the tiled count's
  elements (equal for fp32; the half backward adds its fp32 dQ accumulator's pass),
* ``prop4_bytes`` (forward rows): Proposition 4's Theta(N d + s N^2 d^2 / M) with our loop's
  constants, ``closed_forms.proposition4_flash_forward``, at M = ``M_elements`` = 4 d Br (the
  SRAM whose paper block Bc = M / 4d is our Br): 2 N d + N + s 2 N^2 d / min(Br, d) per head,
  the exact count's intercept and, for Br > d (here), twice its slope;

on the GPU the time of the call (CUDA events, each case checked against float64 first), the
ncu kernel time (``kernel_time_ms``: summed over the call's kernels, L2 flushed before each;
no host work), and

* ``time_vs_fraction`` = time / (s x dense time), ``kernel_time_vs_fraction`` the same of the
  kernel times.  The issue's target, "block-sparse at fraction s runs in <= s x dense + 10 %",
  read as 10 % on top of s x dense: time <= 1.1 s x dense, i.e. ``time_vs_fraction <= 1.1``
  (``meets_target``; window's reading of its own target).  ``excess_vs_dense`` = time / dense
  - s is the other reading's measure, (s + 0.1) x dense: <= 0.1; ``kernel_excess_vs_dense``
  the same of the kernel times (``measure.times_against_dense``).

FLOPs: ``flops`` by the benchmark convention (4 B H N^2 d forward, x (1 + 2.5) with the
backward; a block mask not discounted), ``sparse_flops`` the kept blocks' own (x s: 4 d per
kept score); ``sparse_tflops`` = sparse_flops / time.

GPU: B = 4, H = 16, N = 4096, d = 64 (T = 32), the kernels' default tilings cut to nest in the
blocks, s = 1/64 ... 1 in powers of 2 (quick: 1/16, 1/4, 1).  CPU: B = 1, H = 2, N = 64, d = 8,
16 x 16 tiles and 16 x 16 blocks (T = 4), s = 1/16 ... 1, fp16 and fp32 (quick: H = 1, N = 32,
T = 2, s = 1/4, 1/2, 1, fp32 only); no time.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from experiments.common import model, plotting
from experiments.common.cases import Case
from experiments.common.context import NO_GPU, RunContext
from experiments.common.measure import add_note, times_against_dense, timing_or_note
from experiments.common.model import Predicted
from experiments.common.traffic import compared_columns, measure_traffic

NAME = "block_sparse"
METHOD = "fa2"
PASSES = ("fwd", "fwd_bwd")
#: The issue's target: block-sparse at fraction s takes at most s x the dense call's time, plus 10 %.
TARGET = 1.10
#: The masks' seed (one for every s: the masks nest).
SEED = 0

#: Per mode, (full, quick) of each setting; ``tiling`` and ``block_size`` are one for both.
#: CPU: 16 x 16 tiles, the smallest both tensor-core passes take, in 16 x 16 blocks.
GPU = dict(shape=(dict(B=4, H=16, N=4096, d=64),) * 2, tiling=None, block_size=(128, 128),
           fractions=(tuple(2.0 ** -e for e in range(6, -1, -1)), (1 / 16, 1 / 4, 1.0)),
           dtypes=(("float16", "float32"),) * 2)
CPU = dict(shape=(dict(B=1, H=2, N=64, d=8), dict(B=1, H=1, N=32, d=8)), tiling=(16, 16),
           block_size=(16, 16), fractions=((1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0), (1 / 4, 1 / 2, 1.0)),
           dtypes=(("float16", "float32"), ("float32",)))


def random_block_mask(blocks: int, fraction: float, seed: int = SEED) -> np.ndarray:
    """(blocks, blocks) booleans keeping exactly k = max(1, round(fraction blocks^2)) blocks,
    each row and each column floor(k / blocks) or ceil(k / blocks): cell t < k of the wrapped
    diagonals (row t mod T, column (t mod T + t div T) mod T: distinct for t < T^2), rows and
    columns then permuted by ``seed``'s generator."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    kept = max(1, round(fraction * blocks * blocks))
    t = np.arange(kept)
    rng = np.random.default_rng(seed)
    rows, cols = rng.permutation(blocks), rng.permutation(blocks)
    on = np.zeros((blocks, blocks), bool)
    on[rows[t % blocks], cols[(t % blocks + t // blocks) % blocks]] = True
    return on


def plan(ctx: RunContext) -> list[tuple[float | None, Case]]:
    """(requested s, case) pairs: the block-sparse cases, then the dense one (s None), per
    dtype and passes."""
    mode = {key: value if key in ("tiling", "block_size") else value[ctx.quick]
            for key, value in (GPU if ctx.gpu else CPU).items()}
    blocks = -(-mode["shape"]["N"] // mode["block_size"][0])
    pairs = []
    for dtype in mode["dtypes"]:
        for passes in PASSES:
            dense = Case(METHOD, passes, tiling=mode["tiling"], dtype=dtype, **mode["shape"])
            pairs += [(s, replace(dense, block_mask=random_block_mask(blocks, s), block_size=mode["block_size"]))
                      for s in mode["fractions"]]
            pairs.append((None, dense))
    return pairs


def dense_of(case: Case) -> Case:
    """The dense case (no block mask) a block-sparse case is held against."""
    return replace(case, block_mask=None, block_size=None)


def _row(requested: float | None, case: Case, got, predicted: Predicted | str) -> dict:
    tiling = model.effective_tiling(case)
    on = case.block_mask_array
    M = 4 * case.d * tiling.Br
    row = {
        "sweep": "dense" if on is None else "sparse", "method": case.method, "passes": case.passes,
        "dtype": case.dtype, "B": case.B, "H": case.H, "N": case.N, "d": case.d, "causal": case.causal,
        "Br": tiling.Br, "Bc": tiling.Bc,
        "block_q": case.block_size[0] if on is not None else None,
        "block_k": case.block_size[1] if on is not None else None,
        "blocks": on.size if on is not None else None, "kept_blocks": int(on.sum()) if on is not None else None,
        "empty_row_blocks": int((~on.any(axis=1)).sum()) if on is not None else None,
        "s_requested": requested, "s": case.block_fraction or 1.0,
        "flops": case.flops, "sparse_flops": case.band_flops,
        "quantity": "HBM read+write (SM<->L2)", "unit": "bytes", "label": case.label,
        **compared_columns(got, predicted),
        "M_elements": M,
        "prop4_bytes": model.proposition4_bytes(case, M) if case.passes == "fwd" else None,
    }
    if not isinstance(predicted, str):
        row["predicted_elements"] = predicted.tiled_elements
        if on is not None:
            row["form_elements"] = model.block_sparse_form_elements(case)
    return row


def _add_times(ctx: RunContext, rows: list[dict], cases: list[Case], measured: dict) -> None:
    """Time every case on the GPU (checked first; measure_traffic built the kernels), then
    each row against its dense case, by the call's time and by ncu's kernel time."""
    times_against_dense(ctx, NAME, cases, rows, measured, dense_of, "s", "time_vs_fraction",
                        "sparse_tflops", TARGET, timing_of=timing_or_note)


def run(ctx: RunContext) -> list[dict]:
    pairs = plan(ctx)
    cases = [case for _, case in pairs]
    measured = measure_traffic(ctx, NAME, cases)
    rows = [_row(s, case, measured[case], model.predicted_or_note(case, model.card(ctx.device)))
            for s, case in pairs]
    if ctx.gpu:
        _add_times(ctx, rows, cases, measured)
    else:
        note = ctx.skip(f"{NAME}: time and time_vs_fraction ({NO_GPU}); bytes counted at a tiny size")
        for row in rows:
            add_note(row, note)
    return rows


def plot(rows: list[dict], path) -> None:
    """Linear axes, as the paper's Figure 2 (right): bytes (top) and time (bottom) against s,
    forward (left) and forward + backward (right); the dense case at s = 1 (squares)."""
    fig, axes = plotting.figure(2, 2)
    shape = next((f"B={r['B']}, H={r['H']}, N={r['N']}, d={r['d']}" for r in rows), "")
    block = next((f"{r['block_q']} x {r['block_k']}" for r in rows if r["sweep"] == "sparse"), "")
    fig.suptitle(f"Block-sparse FlashAttention (fa2, {block} blocks): bytes and time vs the fraction s "
                 f"of blocks kept ({shape})", fontsize=11)
    timed = any(r.get("time_ms") is not None for r in rows)
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    for col, passes in enumerate(PASSES):
        bytes_ax, time_ax = axes[col], axes[2 + col]
        for i, dtype in enumerate(dtypes):
            color, name = f"C{i}", dtype.replace("float", "fp")
            mine = [r for r in rows if r["passes"] == passes and r["dtype"] == dtype]
            pts = sorted((r for r in mine if r["sweep"] == "sparse"), key=lambda r: r["s"])
            if not pts:
                continue
            x = [r["s"] for r in pts]
            plotting.measured_and_predicted(bytes_ax, x, pts, "predicted", "measured", color, name)
            prop4 = [(xi, r["prop4_bytes"]) for xi, r in zip(x, pts) if r.get("prop4_bytes") is not None]
            if prop4:
                bytes_ax.plot(*zip(*prop4), alpha=0.6, label=f"{name} Prop. 4: Θ(Nd + N²d²s/M)",
                              **(plotting.BOUND | {"color": color}))
            dense = next((r for r in mine if r["sweep"] == "dense"), None)
            _dense_point(bytes_ax, dense, "measured", color, name)
            if timed:
                plotting.measured_and_predicted(time_ax, x, pts, "predicted_time_ms", "time_ms", color, name)
                kernel = [(xi, r["kernel_time_ms"]) for xi, r in zip(x, pts) if r.get("kernel_time_ms") is not None]
                if kernel:
                    time_ax.plot(*zip(*kernel), color=color, label=f"{name} kernels (ncu)",
                                 **(plotting.MEASURED | {"marker": "^"}))
                _dense_point(time_ax, dense, "time_ms", color, name)
                _fraction_lines(time_ax, dense, color, name)
        title = "forward" if passes == "fwd" else "forward + backward"
        for ax, ylabel in ((bytes_ax, "SM<->L2 read + write (bytes)"), (time_ax, "time (ms)")):
            plotting.finish(ax, "fraction of blocks kept s", ylabel, title=title)
            ax.set_xlim(0, 1.05)
            ax.set_ylim(bottom=0)     # the intercept at s = 0: Proposition 4's N d term
        if not timed:
            plotting.annotate_empty(time_ax, "time: GPU only (see the CSV's note)")
    plotting.save(fig, path, footnote="measured: circles (GPU: ncu / CUDA events of the call; triangles: "
                  "ncu's kernel time, L2 flushed; CPU: count_traffic); "
                  "predicted: lines (simulator.predict with block_mask; for the sparse kernels the tiled "
                  "count and the roofline, see predicted_*_by); squares: dense FlashAttention (no mask); "
                  "target: time <= 1.1 s x dense")


def _dense_point(ax, dense: dict | None, key: str, color, name: str) -> None:
    if dense is not None and dense.get(key) is not None:
        ax.plot([1.0], [dense[key]], color=color, label=f"{name} dense",
                **(plotting.MEASURED | {"marker": "s", "markersize": 8}))


def _fraction_lines(ax, dense: dict | None, color, name: str) -> None:
    """s x dense time (solid, thin) and the target 1.1 s x dense (dashed) from s = 0 to 1."""
    if dense is None or dense.get("time_ms") is None:
        return
    ax.plot([0.0, 1.0], [0.0, dense["time_ms"]], color=color, alpha=0.4, linewidth=1.0,
            label=f"{name} s x dense")
    ax.plot([0.0, 1.0], [0.0, TARGET * dense["time_ms"]], alpha=0.6, label=f"{name} target: 1.1 s x dense",
            **(plotting.BOUND | {"color": color}))
