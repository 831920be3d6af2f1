"""Figure 2 (left): standard attention vs FlashAttention, forward + backward, GPT-2 medium.

Attention of GPT-2 medium (N = 1024, d = 64, 16 heads, batch 64): GFLOPs, HBM read + write and
runtime.  On the GPU we measure fp32 and fp16, the paper's precision (DRAM and SM<->L2 bytes
from ncu, runtime from CUDA events; standard attention in fp16 stores S, P, dP, dS in fp16, as
the paper's baseline, and FlashAttention runs the fp16 tensor-core kernels), and predict both
for that GPU (``model.card``; its Hardware in the ``gpu`` column) with our kernels' tilings;
fp16 on the paper's A100 (the paper's tiling) is predicted beside the paper's A100 numbers.  On
the CPU the full size is model-only (the H200's), and a scaled-down copy (N = 32, d = 8, one
head) is counted under the CUDA simulator -- or, where the results folder holds a GPU run's
``fig2_left.csv``, that run's measurements beside this model's predictions for the GPU that
measured them (``experiments.common.repredict``; no scaled-down copy).
"""
from __future__ import annotations

from experiments.common import model, plotting
from experiments.common.cases import Case
from experiments.common.context import NO_GPU, RunContext
from experiments.common.measure import timing_or_note
from experiments.common.repredict import gpu_run, repredict
from experiments.common.traffic import MeasuredTraffic, measure_traffic

NAME = "fig2_left"
#: The paper's Figure 2 (left), A100, fp16: (method, quantity) -> value.
PAPER_A100 = {("standard", "gflops"): 66.6, ("flash", "gflops"): 75.2,
              ("standard", "hbm_gb"): 40.3, ("flash", "hbm_gb"): 4.4,
              ("standard", "runtime_ms"): 41.7, ("flash", "runtime_ms"): 7.3}
SHAPE = dict(B=64, H=16, N=1024, d=64)
SMALL_SHAPE = dict(B=1, H=1, N=32, d=8)
SMALL_TILING = (16, 16)   # the smallest the tensor-core forward and backward (fa2) take
METHODS = {"standard": "standard", "flash": "fa2"}
GB, MS = 1e9, 1e3
PAPER_NOTE = "the paper's GPU: predicted only, with the paper's tiling"
#: dtype label -> our kernels' format
FORMAT = {"fp32": "float32", "fp16": "float16"}


def _case(method: str, shape: dict, tiling=None, dtype: str = "float32") -> Case:
    return Case(METHODS[method], "fwd_bwd", tiling=tiling, dtype=dtype, **shape)


def _cases(method: str, shape: dict) -> dict:
    """The method's case at ``shape`` in each format: dtype label -> case."""
    return {label: _case(method, shape, dtype=fmt) for label, fmt in FORMAT.items()}


def _predicted_rows(method: str, cases: dict, card: str) -> list[dict]:
    """Predictions at fp32 and fp16 on Hardware ``card`` (our kernels' tilings; ``cases``: dtype
    label -> the method's case), and fp16 on the paper's A100 (the paper's tiling for its shared
    memory)."""
    rows = []
    for dtype, gpu, tiling in (("fp32", card, "kernels"), ("fp16", card, "kernels"),
                               ("fp16", model.PAPER_GPU, "paper")):
        p = model.predict_case(cases[dtype], gpu=gpu, tiling=tiling)
        dram = p.dram_bytes
        note = PAPER_NOTE if gpu == model.PAPER_GPU else ""
        for quantity, unit, value, paper_key in (
            ("GFLOPs", "GFLOP", p.flops / 1e9, "gflops"),
            ("HBM read+write (DRAM)", "GB", dram / GB, "hbm_gb"),
            ("HBM read+write (SM<->L2)", "GB", p.total_bytes / GB, "hbm_gb"),
            ("runtime", "ms", p.time_s * MS, "runtime_ms"),
        ):
            rows.append({"method": method, "quantity": quantity, "unit": unit, "dtype": dtype, "gpu": gpu,
                         **SHAPE, "predicted": value, "paper_a100_fp16": PAPER_A100[(method, paper_key)],
                         "note": note})
    return rows


def _repredict(measured: list[dict]) -> list[dict]:
    """A GPU run's rows with ``_predicted_rows``' predictions for each row's method and shape,
    on the GPU that measured them (``model.card_of``; the paper's rows on its A100)."""
    from functools import cache

    @cache
    def fresh(method: str, B: int, H: int, N: int, d: int, card: str) -> dict:
        rows = _predicted_rows(method, _cases(method, dict(B=B, H=H, N=N, d=d)), card)
        return {(r["dtype"], r["gpu"], r["quantity"]): r["predicted"] for r in rows}

    def predicted(row: dict) -> dict:
        card = model.card_of(row)
        gpu = model.PAPER_GPU if row["gpu"] == model.PAPER_GPU else card
        got = fresh(row["method"], row["B"], row["H"], row["N"], row["d"], card).get(
            (row["dtype"], gpu, row["quantity"])) if row["method"] in METHODS else None
        return {"gpu": gpu} if got is None else {"gpu": gpu, "predicted": got}

    return repredict(NAME, measured, predicted, ("predicted",))


def run(ctx: RunContext) -> list[dict]:
    measured = None if ctx.gpu else gpu_run(ctx, NAME)
    if measured is not None:     # a GPU run's measurements: predicted again by this model
        return _repredict(measured)
    cases = {method: _cases(method, SHAPE) for method in METHODS}
    rows = {method: _predicted_rows(method, cases[method], model.card(ctx.device)) for method in METHODS}
    if ctx.gpu:
        every = [case for method in METHODS for case in cases[method].values()]
        measured = measure_traffic(ctx, NAME, every)
        for method, label in ctx.progress([(m, x) for m in METHODS for x in FORMAT], f"{NAME}: timing"):
            case = cases[method][label]
            _attach_measurements(rows[method], label, measured[case], timing_or_note(case, ctx))
    else:
        note = ctx.skip(f"{NAME}: GPU measurements of DRAM, SM<->L2 bytes and runtime ({NO_GPU})")
        for method in METHODS:
            for row in rows[method]:
                if row["gpu"] != model.PAPER_GPU:
                    row["note"] = note
    out = [row for method in METHODS for row in rows[method]]
    return out + _scaled_down_rows(ctx)


def _attach_measurements(rows: list[dict], dtype: str, traffic, timing) -> None:
    """Put the GPU's measurements of format ``dtype`` ("fp32", "fp16") into the matching
    predicted rows (those not of the paper's GPU)."""
    for row in rows:
        if row["dtype"] != dtype or row["gpu"] == model.PAPER_GPU:
            continue
        if row["quantity"].startswith("HBM"):
            if isinstance(traffic, MeasuredTraffic):
                dram = row["quantity"].endswith("(DRAM)")
                row["measured"] = (traffic.dram_bytes if dram else traffic.total_bytes) / GB
                row["measured_by"] = "ncu: dram__bytes_read+write" if dram else traffic.measured_by
            else:
                row["note"] = traffic
        elif row["quantity"] == "runtime":
            if isinstance(timing, tuple):
                row["measured"] = timing[0].median_ms
                row["measured_by"] = f"CUDA events, median of {timing[0].runs}"
                row["max_rel_error"] = timing[1]
            else:
                row["note"] = timing


def _scaled_down_rows(ctx: RunContext) -> list[dict]:
    """CPU mode: the same comparison at a tiny size, counted under the CUDA simulator."""
    if ctx.gpu:
        return []
    cases = {method: _case(method, SMALL_SHAPE, SMALL_TILING) for method in METHODS}
    measured = measure_traffic(ctx, NAME, list(cases.values()))
    rows = []
    for method, case in cases.items():
        got = measured[case]
        rows.append({"method": method, "quantity": "HBM read+write (scaled down)", "unit": "bytes",
                     "dtype": "fp32", "gpu": "CUDA simulator", **SMALL_SHAPE, "Br": SMALL_TILING[0],
                     "Bc": SMALL_TILING[1], "predicted": model.predict_case(case).total_bytes,
                     "measured": got.total_bytes if isinstance(got, MeasuredTraffic) else None,
                     "measured_by": got.measured_by if isinstance(got, MeasuredTraffic) else None,
                     "note": got if isinstance(got, str) else ""})
    return rows


PANELS = (("GFLOPs", "GFLOPs", "GFLOP"),
          ("HBM read+write", "HBM read + write", "GB"),
          ("runtime", "runtime, forward + backward", "ms"))


def plot(rows: list[dict], path) -> None:
    from matplotlib import colormaps

    colors = colormaps["tab20"]   # a colour per bar series (there are more than ten)
    fig, axes = plotting.figure(3, title="Figure 2 (left): GPT-2 medium attention (N=1024, d=64, 16 heads, batch 64)")
    fig.set_size_inches(15.6, 6.0)
    full = [r for r in rows if r["gpu"] != "CUDA simulator"]
    # the GPU the run measured and predicted for (in a CPU run, the H200, or the GPU that
    # measured the run it predicts again)
    card = next((r["gpu"] for r in full if r["gpu"] != model.PAPER_GPU), model.MEASURED_GPU)
    ours = model.card_label(card)
    series = [  # (label, row filter, value key, hatch)
        ("paper A100 fp16", lambda r: r["gpu"] == model.PAPER_GPU, "paper_a100_fp16", ""),
        ("predicted A100 fp16", lambda r: r["gpu"] == model.PAPER_GPU, "predicted", "//"),
        (f"predicted {ours} fp16", lambda r: r["gpu"] == card and r["dtype"] == "fp16", "predicted", "//"),
        (f"measured {ours} fp16", lambda r: r["gpu"] == card and r["dtype"] == "fp16", "measured", ""),
        (f"predicted {ours} fp32", lambda r: r["gpu"] == card and r["dtype"] == "fp32", "predicted", "//"),
        (f"measured {ours} fp32", lambda r: r["gpu"] == card and r["dtype"] == "fp32", "measured", ""),
    ]
    for ax, (prefix, title, unit) in zip(axes, PANELS):
        bars = []
        for label, keep, key, hatch in series:
            for variant in ("(DRAM)", "(SM<->L2)") if prefix.startswith("HBM") else ("",):
                if prefix.startswith("HBM") and key == "paper_a100_fp16" and variant != "(DRAM)":
                    continue
                quantity = f"{prefix} {variant}".strip()
                values = [next((r.get(key) for r in full if r["method"] == m and r["quantity"] == quantity and keep(r)), None)
                          for m in METHODS]
                name = label if not variant or key == "paper_a100_fp16" else f"{label} {variant}"
                bars.append((name, values, hatch))
        width = 0.8 / max(len(bars), 1)
        for i, (name, values, hatch) in enumerate(bars):
            xs = [m + (i - (len(bars) - 1) / 2) * width for m in range(len(METHODS))]
            heights = [v if v is not None else 0.0 for v in values]
            ax.bar(xs, heights, width, label=name, hatch=hatch, color=colors(i), edgecolor="black", linewidth=0.4)
        ax.set_xticks(range(len(METHODS)), ["standard", "FlashAttention"])
        plotting.finish(ax, "", f"{title} ({unit})")
        ax.set_yscale("log")
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2)
    plotting.save(fig, path, footnote=f"{ours}: fp32 and fp16 measured and predicted (our kernels' tilings); "
                  "A100: predicted with the paper's tiling. Missing bars: not measured in this run (see the CSV's note).")
