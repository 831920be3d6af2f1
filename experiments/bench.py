"""Benchmark: our kernels (each version) against PyTorch SDPA's backends, fp32 and fp16 / bf16, validated first.

Shapes (B, H, N, d): (4, 16, 4096, 64), (1, 16, 16384, 64), the same with d = 128, and causal
with d = 64; and the fp32 issue's other rows: (16, 16, 1024, 64), causal (2, 32, 4096, 128),
(8, 32, 2048, 128), (32, 12, 512, 64); forward, and forward + backward.  Ours: standard attention, fa1 (the paper's loop
order, one block per head: small shapes only), fa2 (tensor cores, 3xTF32), fa2_fma (the same
loop order on FFMA), fa2_fp16x3 (fp32 from three fp16 products, forward and forward +
its backward on the same parts), and the fa2 backward: on tensor cores with atomics, and the
deterministic one (FFMA kernels).  In float16 and bfloat16 (HALF_SHAPES, the half-precision issue's shapes):
fa2 forward and forward + backward (tensor cores in that format).  Before any
timing each kernel's outputs are checked against float64 on the same inputs (fp32: relative
error > 1e-4 fails the run loudly; half: more than 2x / 3x the error of a plain same-format
implementation, flash-attention's rule).  Timing: CUDA events, warm-up, median.
Printed as a table -- kernel, shape, ms, TFLOP/s, speed-up over each SDPA backend
(backend ms / our ms) -- and written as a CSV.
"""
from __future__ import annotations

import importlib

from experiments.common import plotting
from experiments.common.cases import BACKWARD_ALGORITHM, Case
from experiments.common.context import NO_GPU, RunContext
from experiments.common.kernels import build_kernels
from experiments.common.measure import failure_note, timing_or_note
from experiments.common.timing import tflops
from experiments.common.torch_sdpa import BACKENDS, time_sdpa, torch_available, unsupported_reason

NAME = "bench"
SHAPES = [  # (B, H, N, d, causal); from (16, 16, 1024, 64) on: the fp32 issue's rows
    (4, 16, 4096, 64, False), (1, 16, 16384, 64, False),
    (4, 16, 4096, 128, False), (1, 16, 16384, 128, False),
    (4, 16, 4096, 64, True), (1, 16, 16384, 64, True),
    (16, 16, 1024, 64, False), (2, 32, 4096, 128, True),
    (8, 32, 2048, 128, False), (32, 12, 512, 64, False),
]
#: --quick: every shape issue 5 sets a target for (the causal one at N = 4096 only)
QUICK_SHAPES = [(4, 16, 4096, 64, False), (1, 16, 16384, 64, False), (4, 16, 4096, 64, True),
                (4, 16, 4096, 128, False), (1, 16, 16384, 128, False)]
#: float16 / bfloat16 shapes (B, H, N, d, causal): the half-precision issue's targets.
HALF_SHAPES = [(4, 16, 4096, 64, False), (4, 16, 4096, 128, False), (1, 16, 16384, 64, False),
               (2, 32, 4096, 128, True)]
HALF = ("float16", "bfloat16")
#: fa1 runs one thread block per (batch, head): slow by design, so only at N <= this.
FA1_MAX_N = 4096
KERNEL_MODULES = {"standard": "standard", "fa1": "flash_forward_alg1", "fa2": "flash_forward_fa2_tc",
                  "fa2_fma": "flash_forward_fa2", "backward": "flash_backward_tc",
                  "backward_fma": "flash_backward", "fa2_half": "flash_forward_half",
                  "backward_half": "flash_backward_half", "fa2_fp16x3": "flash_forward_half"}


def kernel_version(name: str) -> str:
    """``VERSION`` of a numba_flash kernel module ("?" when it declares none)."""
    module = importlib.import_module(f"numba_flash.kernels.{KERNEL_MODULES[name]}")
    return str(getattr(module, "VERSION", "?"))


def our_cases(B, H, N, d, causal) -> list[tuple[str, Case]]:
    """(kernel label, case) pairs for one shape."""
    cases = [("standard", Case("standard", "fwd", B, H, N, d, causal)),
             ("standard", Case("standard", "fwd_bwd", B, H, N, d, causal))]
    if N <= FA1_MAX_N:
        cases.append(("fa1", Case("fa1", "fwd", B, H, N, d, causal)))
    cases += [("fa2", Case("fa2", "fwd", B, H, N, d, causal)),
              ("fa2_fma", Case("fa2_fma", "fwd", B, H, N, d, causal)),
              ("fa2 + backward (atomic dQ)", Case("fa2", "fwd_bwd", B, H, N, d, causal)),
              ("fa2 + backward (deterministic)", Case("fa2", "fwd_bwd", B, H, N, d, causal, deterministic=True)),
              ("fa2_fp16x3", Case("fa2_fp16x3", "fwd", B, H, N, d, causal)),
              ("fa2_fp16x3 + backward", Case("fa2_fp16x3", "fwd_bwd", B, H, N, d, causal))]
    return cases


def half_cases(B, H, N, d, causal, dtype) -> list[tuple[str, Case]]:
    """(kernel label, case) pairs for one half-precision shape."""
    return [("fa2", Case("fa2", "fwd", B, H, N, d, causal, dtype=dtype)),
            ("fa2 + backward (atomic dQ)", Case("fa2", "fwd_bwd", B, H, N, d, causal, dtype=dtype))]


def _version(case: Case) -> str:
    forward = kernel_version("fa2_half" if case.dtype in HALF else case.method)
    if case.passes == "fwd" or case.method == "standard":
        return f"v{forward}"
    fma = case.deterministic or BACKWARD_ALGORITHM[case.method] == "fa2_fma"
    half = case.dtype in HALF or case.method == "fa2_fp16x3"   # (fp16x3: the half kernel's fp32 mode)
    backward = "backward_fma" if fma else "backward_half" if half else "backward"
    return f"v{forward} + backward v{kernel_version(backward)}"


def run(ctx: RunContext) -> list[dict]:
    shapes = QUICK_SHAPES if ctx.quick else SHAPES
    if not ctx.gpu:
        note = ctx.skip(f"{NAME}: every timing ({NO_GPU}); the bench needs a GPU")
        return [{"kernel": "all", "note": note}]
    have_torch = torch_available()
    if not have_torch:
        ctx.skip(f"{NAME}: SDPA comparison (torch with CUDA is not installed)")
    rows = []
    dtypes = ctx.dtypes or ("float32",) + HALF
    jobs = [(shape, label, case) for shape in shapes for label, case in our_cases(*shape)
            if "float32" in dtypes]
    jobs += [(shape, label, case) for dtype in HALF if dtype in dtypes for shape in HALF_SHAPES
             for label, case in half_cases(*shape, dtype)]
    build_kernels(ctx, NAME, [case for _, _, case in jobs])
    for shape, label, case in ctx.progress(jobs, f"{NAME}: ours"):
        row = _row(label, case, version=_version(case))
        result = timing_or_note(case, ctx)
        if isinstance(result, str):
            row["note"] = result
        else:
            row.update(ms=result[0].median_ms, tflops=tflops(case.flops, result[0].median_ms),
                       max_rel_error=result[1], runs=result[0].runs)
        rows.append(row)
    if have_torch:
        sdpa_jobs = [(backend, Case("fa2", passes, *shape, dtype=dtype))
                     for dtype in dtypes for shape in (HALF_SHAPES if dtype in HALF else shapes)
                     for passes in ("fwd", "fwd_bwd") for backend in BACKENDS]
        for backend, case in ctx.progress(sdpa_jobs, f"{NAME}: SDPA"):
            row = _row(f"torch SDPA {backend}", case, version="torch")
            try:
                timing = time_sdpa(backend, case, ctx.quick)
            except Exception as exc:
                row["note"] = unsupported_reason(exc) or failure_note(exc)
            else:
                row.update(ms=timing.median_ms, tflops=tflops(case.flops, timing.median_ms), runs=timing.runs)
            rows.append(row)
        _add_ratios(rows)
    print(format_table(rows))
    return rows


def _row(kernel: str, case: Case, version: str) -> dict:
    return {"kernel": kernel, "version": version, "passes": case.passes, "B": case.B, "H": case.H,
            "N": case.N, "d": case.d, "causal": case.causal, "dtype": case.dtype, "flops": case.flops}


def _shape_key(row: dict) -> tuple:
    return (row["passes"], row["B"], row["H"], row["N"], row["d"], row["causal"], row["dtype"])


def _add_ratios(rows: list[dict]) -> None:
    """``vs_<BACKEND>``: that backend's ms / our ms at the same shape and passes (> 1: we are
    faster); the backend's note ("unsupported", ...) where it has no time."""
    sdpa = {(r["kernel"].removeprefix("torch SDPA "), _shape_key(r)): r for r in rows if r["kernel"].startswith("torch")}
    for row in rows:
        if row["kernel"].startswith("torch"):
            continue
        for backend in BACKENDS:
            other = sdpa.get((backend, _shape_key(row)))
            if other is None:
                continue
            if other.get("ms") and row.get("ms"):
                row[f"vs_{backend}"] = other["ms"] / row["ms"]
            else:
                row[f"vs_{backend}"] = other.get("note") or row.get("note") or ""


def format_table(rows: list[dict]) -> str:
    header = ["kernel (version)", "shape B,H,N,d", "pass", "ms", "TFLOP/s"] + [f"x {b}" for b in BACKENDS]
    lines = []
    for r in rows:
        shape = f"{r['B']},{r['H']},{r['N']},{r['d']}{' causal' if r['causal'] else ''} {r['dtype']}"
        ms = f"{r['ms']:.3f}" if r.get("ms") else (r.get("note") or "")[:24]
        tf = f"{r['tflops']:.2f}" if r.get("tflops") else ""
        ratios = [f"{v:.2f}" if isinstance(v, float) else str(v)[:12] for v in (r.get(f"vs_{b}", "") for b in BACKENDS)]
        lines.append([f"{r['kernel']} ({r['version']})", shape, r["passes"], ms, tf, *ratios])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]
    fmt = "  ".join(f"{{:{w}s}}" for w in widths)
    return "\n".join([fmt.format(*header), fmt.format(*("-" * w for w in widths))] + [fmt.format(*map(str, l)) for l in lines])


def plot(rows: list[dict], path) -> None:
    timed = [r for r in rows if r.get("tflops")]
    fig, (ax,) = plotting.figure(1, title="bench: TFLOP/s (FLOPs 4BHN²d, x3.5 with backward, x0.5 causal)")
    if not timed:
        plotting.annotate_empty(ax, "nothing timed in this run (see the CSV's note)")
        plotting.save(fig, path)
        return
    labels = [f"{r['kernel']} {r['passes']} {r['B']},{r['H']},{r['N']},{r['d']}{' c' if r['causal'] else ''} {r['dtype']}"
              for r in timed]
    ax.barh(range(len(timed)), [r["tflops"] for r in timed],
            color=["C1" if r["kernel"].startswith("torch") else "C0" for r in timed])
    ax.set_yticks(range(len(timed)), labels, fontsize=5)
    ax.invert_yaxis()
    plotting.finish(ax, "TFLOP/s", "")
    fig.set_size_inches(9, max(4, 0.14 * len(timed) + 1))
    plotting.save(fig, path, footnote="blue: ours, orange: torch SDPA")
