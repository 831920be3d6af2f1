"""Figure 2 (middle): block size Bc vs HBM accesses and forward runtime of FlashAttention.

N = 1024, d = 64, 16 heads, batch 64, Br = 64, Bc = 64, 128, 256, 512 as far as shared
memory (``Tiling.smem_bytes`` against the H200's 227 KB a block) and the 1024-thread limit
allow; what does not fit is a row with the reason in ``note``.  In the paper's loop order (fa1)
Q and O are re-read once per K/V block, so HBM traffic falls as Bc grows; in the FA2 order K and
V are re-read once per Q block, so traffic depends on Br and stays flat in Bc.  fa1 runs in
fp32 and in fp16 (the paper's precision: Q, K, V, O in HBM in fp16, fp32 arithmetic), fa2_fma
in fp32.

GPU: SM<->L2 and DRAM bytes from ncu, runtime from CUDA events, predicted for that GPU
(``model.card``; ``predicted_for`` names it).  CPU: the full size is
model-only; a tiny copy (N = 32, d = 8, Br = 8, Bc = 8, 16, 32) is counted under the simulator --
or, where the results folder holds a GPU run's ``fig2_middle.csv``, that run's measurements
beside this model's predictions (``experiments.common.repredict``; no tiny copy).
"""
from __future__ import annotations

from experiments.common import model, plotting
from experiments.common.cases import Case
from experiments.common.context import NO_GPU, RunContext
from experiments.common.measure import timing_or_note
from experiments.common.repredict import gpu_run, repredict
from experiments.common.traffic import MeasuredTraffic, measure_traffic

NAME = "fig2_middle"
SHAPE = dict(B=64, H=16, N=1024, d=64)
BR, BCS = 64, (64, 128, 256, 512)
SMALL_SHAPE = dict(B=1, H=1, N=32, d=8)
SMALL_BR, SMALL_BCS = 8, (8, 16, 32)
#: (method, format): FA2 order on FFMA, whose block sizes are free (the tensor-core kernels' Bc
#: is bounded by registers); Algorithm 1 in fp32 and in fp16
METHODS = ("fa1", "fa2_fma")
VARIANTS = (("fa1", "float32"), ("fa2_fma", "float32"), ("fa1", "float16"))


def tiling_fits(method: str, br: int, bc: int, d: int) -> str:
    """"" when Tiling(br, bc) runs on the H200 for ``method`` at head dim d, else why not."""
    from simulator.tiling import H200_SMEM_PER_BLOCK, Tiling

    try:
        tiling = Tiling(br, bc)
    except ValueError as exc:
        return f"skipped: {exc}"
    need = tiling.smem_bytes(model.FORWARD_KERNEL[method], d, 4)
    if need > H200_SMEM_PER_BLOCK:
        return f"skipped: Tiling({br}, {bc}) needs {need} B of shared memory, the H200 allows {H200_SMEM_PER_BLOCK} B a block"
    return ""


#: quantity -> (unit, its value from the model's Prediction), the predicted rows of a case.
PREDICTED = {"HBM read+write (SM<->L2)": ("bytes", lambda p: p.total_bytes),
             "HBM read+write (DRAM)": ("bytes", lambda p: p.dram_bytes),
             "forward runtime": ("ms", lambda p: p.time_s * 1e3)}


def _predicted_again(row: dict) -> dict:
    """A GPU run's row predicted as ``run`` predicts it: none where the tiling does not fit."""
    if row["quantity"] not in PREDICTED or tiling_fits(row["method"], row["Br"], row["Bc"], row["d"]):
        return {}
    case = Case(row["method"], "fwd", row["B"], row["H"], row["N"], row["d"], tiling=(row["Br"], row["Bc"]),
                dtype=row["dtype"])
    gpu = model.card_of(row)
    return {"predicted": PREDICTED[row["quantity"]][1](model.predict_case(case, gpu=gpu)), "predicted_for": gpu}


def run(ctx: RunContext) -> list[dict]:
    measured = None if ctx.gpu else gpu_run(ctx, NAME)
    if measured is not None:     # a GPU run's measurements: predicted again by this model
        return repredict(NAME, measured, _predicted_again, ("predicted", "predicted_for"))
    rows, cases, gpu = [], [], model.card(ctx.device)
    for method, dtype in VARIANTS:
        for bc in BCS:
            reason = tiling_fits(method, BR, bc, SHAPE["d"])
            if reason:
                ctx.skip(f"{NAME}: {method} {dtype} {reason.removeprefix('skipped: ')}")
                rows.append({"method": method, "dtype": dtype, **SHAPE, "Br": BR, "Bc": bc,
                             "quantity": "HBM read+write (SM<->L2)", "unit": "bytes", "note": reason})
                continue
            case = Case(method, "fwd", tiling=(BR, bc), dtype=dtype, **SHAPE)
            cases.append(case)
            p = model.predict_case(case, gpu=gpu)
            base = {"method": method, "dtype": dtype, **SHAPE, "Br": BR, "Bc": bc, "predicted_for": gpu,
                    "smem_bytes": case.tiling_object().smem_bytes(model.FORWARD_KERNEL[method], SHAPE["d"], 4)}
            rows += [{**base, "quantity": quantity, "unit": unit, "predicted": of(p)}
                     for quantity, (unit, of) in PREDICTED.items()]
    if ctx.gpu:
        _measure_gpu(ctx, cases, rows)
    else:
        note = ctx.skip(f"{NAME}: GPU bytes and runtime at N=1024 ({NO_GPU}); tiny copy counted instead")
        for row in rows:
            row["note"] = row.get("note") or note
        rows += _tiny_rows(ctx)
    return rows


def _measure_gpu(ctx: RunContext, cases: list[Case], rows: list[dict]) -> None:
    measured = measure_traffic(ctx, NAME, cases)
    timings = {case: timing_or_note(case, ctx) for case in ctx.progress(cases, f"{NAME}: timing")}
    for row in rows:
        if "predicted" not in row:
            continue
        case = Case(row["method"], "fwd", tiling=(row["Br"], row["Bc"]), dtype=row["dtype"], **SHAPE)
        traffic, timing = measured[case], timings[case]
        if row["quantity"] == "forward runtime":
            if isinstance(timing, str):
                row["note"] = timing
            else:
                row.update(measured=timing[0].median_ms, measured_by=f"CUDA events, median of {timing[0].runs}",
                           max_rel_error=timing[1])
        elif isinstance(traffic, str):
            row["note"] = traffic
        elif row["quantity"].endswith("(DRAM)"):
            row.update(measured=traffic.dram_bytes, measured_by="ncu: dram__bytes_read+write")
        else:
            row.update(measured=traffic.total_bytes, measured_by=traffic.measured_by)


def _tiny_rows(ctx: RunContext) -> list[dict]:
    cases = [Case(method, "fwd", tiling=(SMALL_BR, bc), **SMALL_SHAPE) for method in METHODS for bc in SMALL_BCS]
    measured = measure_traffic(ctx, NAME, cases)
    rows = []
    for case in cases:
        got = measured[case]
        ok = isinstance(got, MeasuredTraffic)
        rows.append({"method": case.method, "dtype": case.dtype, **SMALL_SHAPE, "Br": SMALL_BR, "Bc": case.tiling[1],
                     "quantity": "HBM read+write (tiny, simulator)", "unit": "bytes",
                     "predicted": model.predict_case(case).total_bytes,
                     "measured": got.total_bytes if ok else None, "measured_by": got.measured_by if ok else None,
                     "note": "" if ok else got})
    return rows


def plot(rows: list[dict], path) -> None:
    panels = [("HBM read+write (SM<->L2)", "HBM read + write, SM<->L2 (bytes)"),
              ("HBM read+write (DRAM)", "HBM read + write, DRAM (bytes)"),
              ("forward runtime", "forward runtime (ms)")]
    if any(r["quantity"] == "HBM read+write (tiny, simulator)" for r in rows):
        panels.append(("HBM read+write (tiny, simulator)", "tiny copy (N=32, d=8, Br=8): read + write (bytes)"))
    fig, axes = plotting.figure(len(panels), title="Figure 2 (middle): block size Bc, FlashAttention forward "
                                "(N=1024, d=64, 16 heads, batch 64, Br=64)")
    for ax, (quantity, ylabel) in zip(axes, panels):
        for i, (method, dtype) in enumerate(VARIANTS):
            pts = sorted((r for r in rows if r["quantity"] == quantity and r["method"] == method
                          and r.get("dtype", "float32") == dtype and r.get("predicted") is not None),
                         key=lambda r: r["Bc"])
            if not pts:
                continue
            x = [r["Bc"] for r in pts]
            name = f"{method} {dtype.replace('float', 'fp')}"
            ax.plot(x, [r["predicted"] for r in pts], color=f"C{i}", label=f"{name} predicted", **plotting.PREDICTED)
            meas = [(r["Bc"], r["measured"]) for r in pts if r.get("measured") is not None]
            if meas:
                ax.plot(*zip(*meas), color=f"C{i}", label=f"{name} measured", **plotting.MEASURED)
        plotting.finish(ax, "block size Bc", ylabel, loglog=True)
        ax.set_xscale("log", base=2)
    skipped = sorted({f"{r['method']} {r.get('dtype', '')} Bc={r['Bc']}" for r in rows
                      if str(r.get("note", "")).startswith("skipped: Tiling")})
    plotting.save(fig, path, footnote=("does not fit the H200: " + ", ".join(skipped)) if skipped else "")
