"""Runtime: TFLOP/s vs sequence length for our kernels and PyTorch SDPA's backends, same run.

fp32, fp16 and bf16, d = 64, 16 heads, B = max(1, 16384 / N) (16K tokens a batch, as the paper's
benchmarks), N = 1K ... 64K; forward, and forward + backward.  Ours: standard attention (fp32)
and FlashAttention (fa2; backward with atomics; in fp16 / bf16 the forward and the backward on
tensor cores in that format).  SDPA: MATH, EFFICIENT_ATTENTION, FLASH_ATTENTION
and CUDNN_ATTENTION (the last two have no fp32 kernels: recorded "unsupported").  Every kernel is checked against float64 before it is
timed.  FLOPs: 4 B H N^2 d forward, x3.5 forward + backward (backward = 2.5 x forward).
Predicted: the simulator's time (levels, else the roofline) on the GPU that ran (``model.card``;
``predicted_for`` names it), the H200 in a CPU run.  CPU: predicted only -- or, where the
results folder holds a GPU run's ``runtime.csv``, that run's timings beside this model's
predictions for the GPU that measured them (``experiments.common.repredict``).
"""
from __future__ import annotations

from experiments.common import model, plotting
from experiments.common.cases import Case
from experiments.common.context import NO_GPU, RunContext
from experiments.common.kernels import build_kernels
from experiments.common.measure import failure_note, is_out_of_memory, timing_or_note
from experiments.common.repredict import gpu_run, repredict
from experiments.common.timing import tflops
from experiments.common.torch_sdpa import BACKENDS, time_sdpa, torch_available, unsupported_reason

NAME = "runtime"
H, D, TOKENS = 16, 64, 16384
NS = [1024, 2048, 4096, 8192, 16384, 32768, 65536]
QUICK_NS = [1024, 4096, 16384]
OURS = ("standard", "fa2")
HALF = ("float16", "bfloat16")


def batch(n: int) -> int:
    return max(1, TOKENS // n)


#: The columns ``_predicted`` fills.
PREDICTED_COLUMNS = ("predicted", "predicted_tflops", "predicted_for", "model")


def _predicted(case: Case, gpu: str) -> dict:
    """The model's columns of our kernels' row for ``case`` on Hardware ``gpu``."""
    ms = model.predict_case(case, gpu=gpu).time_s * 1e3
    return {"predicted": ms, "predicted_tflops": tflops(case.flops, ms), "predicted_for": gpu}


def _predicted_again(row: dict) -> dict:
    """``_predicted`` for a row of a GPU run's CSV: ours by its case; SDPA's rows have none."""
    method = row["implementation"].removeprefix("ours ")
    if method == row["implementation"]:
        return {}
    return _predicted(Case(method, row["passes"], row["B"], row["H"], row["N"], row["d"],
                           causal=bool(row["causal"]), dtype=row["dtype"]), model.card_of(row))


def _ours(ctx: RunContext, case: Case, out_of_memory: set) -> dict:
    row = {"implementation": f"ours {case.method}", "passes": case.passes, "B": case.B, "H": case.H,
           "N": case.N, "d": case.d, "causal": case.causal, "dtype": case.dtype, "flops": case.flops,
           "quantity": f"runtime {case.passes}", "unit": "ms", **_predicted(case, model.card(ctx.device))}
    if not ctx.gpu:
        row["note"] = ctx.skip(f"{NAME}: timing ({NO_GPU}); roofline prediction only")
        return row
    if (case.method, case.passes, case.dtype) in out_of_memory:
        row["note"] = "not run: out of memory at a smaller N"
        return row
    result = timing_or_note(case, ctx)
    if isinstance(result, str):
        row["note"] = result
        if result == "out of memory":
            out_of_memory.add((case.method, case.passes, case.dtype))
        return row
    timing, error = result
    row.update(measured=timing.median_ms, measured_by=f"CUDA events, median of {timing.runs}",
               tflops=tflops(case.flops, timing.median_ms), max_rel_error=error)
    return row


def _sdpa(ctx: RunContext, backend: str, case: Case, out_of_memory: set) -> dict:
    row = {"implementation": f"torch SDPA {backend}", "passes": case.passes, "B": case.B, "H": case.H,
           "N": case.N, "d": case.d, "causal": case.causal, "dtype": case.dtype, "flops": case.flops,
           "unit": "ms"}
    if (backend, case.passes, case.dtype) in out_of_memory:
        row["note"] = "not run: out of memory at a smaller N"
        return row
    try:
        timing = time_sdpa(backend, case, ctx.quick)
    except Exception as exc:
        row["note"] = unsupported_reason(exc) or failure_note(exc)
        if is_out_of_memory(exc):
            out_of_memory.add((backend, case.passes, case.dtype))
        return row
    row.update(ms=timing.median_ms, tflops=tflops(case.flops, timing.median_ms))
    return row


def run(ctx: RunContext) -> list[dict]:
    measured = None if ctx.gpu else gpu_run(ctx, NAME)
    if measured is not None:     # a GPU run's timings: predicted again by this model
        return repredict(NAME, measured, _predicted_again, PREDICTED_COLUMNS)
    ns = QUICK_NS if ctx.quick else NS
    cases = [Case(method, passes, batch(n), H, n, D) for n in ns for passes in ("fwd", "fwd_bwd") for method in OURS]
    cases += [Case("fa2", passes, batch(n), H, n, D, dtype=dtype) for dtype in HALF for n in ns
              for passes in ("fwd", "fwd_bwd")]
    build_kernels(ctx, NAME, cases)
    out_of_memory: set = set()
    rows = [_ours(ctx, case, out_of_memory) for case in ctx.progress(cases, f"{NAME}: ours")]
    if not ctx.gpu:
        return rows
    if not torch_available():
        ctx.skip(f"{NAME}: torch SDPA (torch with CUDA is not installed)")
        return rows
    fa2_cases = [c for c in cases if c.method == "fa2"]
    jobs = [(backend, case) for case in fa2_cases for backend in BACKENDS]
    rows += [_sdpa(ctx, backend, case, out_of_memory) for backend, case in ctx.progress(jobs, f"{NAME}: SDPA")]
    return rows


def plot(rows: list[dict], path) -> None:
    fig, axes = plotting.figure(2, title=f"Runtime, d={D}, H={H}, B·N={TOKENS} (FLOPs: 4BHN²d, x3.5 with backward)")
    for r in rows:
        r["curve"] = f"{r['implementation']} {r.get('dtype', 'float32')}"
    implementations = list(dict.fromkeys(r["curve"] for r in rows))
    for ax, passes in zip(axes, ("fwd", "fwd_bwd")):
        for i, impl in enumerate(implementations):
            pts = sorted((r for r in rows if r["curve"] == impl and r["passes"] == passes), key=lambda r: r["N"])
            meas = [(r["N"], r["tflops"]) for r in pts if r.get("tflops")]
            if meas:
                ax.plot(*zip(*meas), color=f"C{i}", label=f"{impl} measured", **{**plotting.MEASURED, "linestyle": "-"})
            pred = [(r["N"], r["predicted_tflops"]) for r in pts if r.get("predicted_tflops")]
            if pred:
                ax.plot(*zip(*pred), alpha=0.6, label=f"{impl} roofline (predicted)", **(plotting.BOUND | {"color": f"C{i}"}))
        plotting.finish(ax, "sequence length N", "TFLOP/s", logx=True,
                        title="forward" if passes == "fwd" else "forward + backward")
        ax.set_xscale("log", base=2)
    plotting.save(fig, path, footnote="missing points: see the CSV's note (out of memory, unsupported, not on GPU)")
