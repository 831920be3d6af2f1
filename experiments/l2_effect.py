"""The L2 cache: DRAM bytes vs SM<->L2 bytes as the working set crosses the L2 (the H200's 60 MB).

Forward pass, B = 1, 16 heads, d = 64, N swept so that the working set (the distinct bytes the
call touches: Q, K, V, O and L; plus S and P for standard attention) runs from well inside to
well outside the L2.  The tiled algorithm's count is the SM<->L2 traffic; while the working set
fits, re-reads hit in L2 and DRAM bytes sit near the working set; the L2-aware model predicts
both, for the GPU that ran (``model.card``; ``predicted_for`` names it, ``l2_bytes`` is its
L2).  Measured (GPU) by ncu, which flushes the caches before each kernel.  CPU: model only, for
the H200 -- or, where the results folder holds a GPU run's ``l2_effect.csv``, that run's
measurements beside this model's predictions for the GPU that measured them
(``experiments.common.repredict``).
"""
from __future__ import annotations

from experiments.common import model, plotting
from experiments.common.cases import Case
from experiments.common.context import NO_GPU, RunContext
from experiments.common.repredict import gpu_run, repredict
from experiments.common.traffic import MeasuredTraffic, measure_traffic

NAME = "l2_effect"
B, H, D = 1, 16, 64
SWEEP = {"fa2": [256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
         "standard": [128, 256, 512, 1024, 2048, 4096]}
QUICK_SWEEP = {"fa2": [512, 2048, 8192, 32768], "standard": [256, 1024, 4096]}
MB = 1e6


def working_set_bytes(case: Case, dtype_bytes: int = 4) -> int:
    """Distinct bytes the forward call touches: Q, K, V, O (N d each) and L (N); standard
    attention adds S and P (N^2 each) and has no L."""
    per_head = 4 * case.N * case.d + (2 * case.N * case.N if case.method == "standard" else case.N)
    return case.B * case.H * per_head * dtype_bytes


#: The quantity of a row -> its prediction (``model.Prediction``).
PREDICTED = {"DRAM bytes": lambda p: p.dram_bytes, "SM<->L2 bytes": lambda p: p.total_bytes}


def _predicted_again(row: dict) -> dict:
    """A GPU run's row predicted again, for the GPU that measured it."""
    gpu = model.card_of(row)
    prediction = model.predict_case(Case(row["method"], "fwd", row["B"], row["H"], row["N"], row["d"]), gpu=gpu)
    return {"predicted": PREDICTED[row["quantity"]](prediction), "l2_bytes": model.l2_bytes(gpu), "predicted_for": gpu}


def run(ctx: RunContext) -> list[dict]:
    again = None if ctx.gpu else gpu_run(ctx, NAME)
    if again is not None:        # a GPU run's measurements: predicted again by this model
        return repredict(NAME, again, _predicted_again, ("predicted", "l2_bytes", "predicted_for"))
    sweep = QUICK_SWEEP if ctx.quick else SWEEP
    cases = [Case(method, "fwd", B, H, n, D) for method, ns in sweep.items() for n in ns]
    if ctx.gpu:
        measured = measure_traffic(ctx, NAME, cases)
    else:
        note = ctx.skip(f"{NAME}: ncu DRAM and SM<->L2 bytes ({NO_GPU}); model only")
        measured = {case: note for case in cases}
    gpu = model.card(ctx.device)
    l2 = model.l2_bytes(gpu)
    rows = []
    for case in cases:
        got = measured[case]
        ok = isinstance(got, MeasuredTraffic)
        base = {"method": case.method, "B": case.B, "H": case.H, "N": case.N, "d": case.d,
                "working_set_bytes": working_set_bytes(case), "l2_bytes": l2, "predicted_for": gpu,
                "unit": "bytes", "note": "" if ok else got}
        prediction = model.predict_case(case, gpu=gpu)
        rows.append({**base, "quantity": "DRAM bytes", "predicted": PREDICTED["DRAM bytes"](prediction),
                     "measured": got.dram_bytes if ok else None,
                     "measured_by": "ncu: dram__bytes_read+write" if ok else None})
        rows.append({**base, "quantity": "SM<->L2 bytes", "predicted": PREDICTED["SM<->L2 bytes"](prediction),
                     "measured": got.total_bytes if ok else None, "measured_by": got.measured_by if ok else None})
    return rows


def plot(rows: list[dict], path) -> None:
    methods = [m for m in SWEEP if any(r["method"] == m for r in rows)]
    fig, axes = plotting.figure(len(methods), title=f"L2 effect: forward pass, B={B}, H={H}, d={D}, fp32")
    for ax, method in zip(axes, methods):
        for i, quantity in enumerate(("SM<->L2 bytes", "DRAM bytes")):
            pts = sorted((r for r in rows if r["method"] == method and r["quantity"] == quantity),
                         key=lambda r: r["working_set_bytes"])
            x = [r["working_set_bytes"] / MB for r in pts]
            ax.plot(x, [r["predicted"] for r in pts], color=f"C{i}", label=f"{quantity} predicted", **plotting.PREDICTED)
            meas = [(xi, r["measured"]) for xi, r in zip(x, pts) if r.get("measured") is not None]
            if meas:
                ax.plot(*zip(*meas), color=f"C{i}", label=f"{quantity} measured", **plotting.MEASURED)
        l2 = next(r["l2_bytes"] for r in rows if r["method"] == method)
        ax.axvline(l2 / MB, color="0.3", linestyle="--", linewidth=1, label=f"L2 = {l2 / MB:.0f} MB")
        plotting.finish(ax, "working set (MB)", "bytes", loglog=True, title=method)
    plotting.save(fig, path, footnote="ncu flushes caches before each kernel (--cache-control all)")
