"""Peak device memory vs sequence length: standard attention vs FlashAttention, forward + backward.

B = 1, 16 heads, d = 64, fp32, N doubling up to 64K.  Standard attention keeps N x N matrices
(P for the backward pass, then dP and dS) and runs out of memory; FlashAttention's footprint is
linear in N.  Measured on the GPU in a child process that counts Numba's live allocations (see
``experiments.common.peak_memory``); out-of-memory is caught and marked.  Predicted: every tensor
a call touches is live during that call, plus the case's inputs (q, k, v, dO); the peak is the
largest call.  CPU: predicted only.
"""
from __future__ import annotations

import json
import subprocess
import sys

from experiments.common import model, plotting
from experiments.common.cases import Case
from experiments.common.context import NO_GPU, RunContext
from experiments.common.kernels import build_kernels

NAME = "memory"
B, H, D = 1, 16, 64
NS = [1024, 2048, 4096, 8192, 16384, 32768, 65536]
QUICK_NS = [1024, 4096, 16384, 32768]
METHODS = {"standard": "standard", "flash": "fa2"}
INPUTS = ("Q", "K", "V", "dO")
TIMEOUT_S = 300
GB = 1e9


def predicted_peak_bytes(case: Case, dtype_bytes: int = 4) -> int:
    """max over the case's calls of the bytes of (tensors the call touches + the inputs)."""
    return max(sum(model.tensor_bytes(case, t, dtype_bytes) for t in set(names) | set(INPUTS))
               for names in model.touched_tensors(case))


def _measure(ctx: RunContext, cases: list[Case]) -> list[dict]:
    """Run the peak-memory child on the cases; one result dict per case."""
    build_kernels(ctx, NAME, cases)
    folder = ctx.folder(NAME)
    spec, result = folder / "memory_cases.json", folder / "memory_result.json"
    spec.write_text(json.dumps([c.to_json() for c in cases]))
    result.unlink(missing_ok=True)
    bar = ctx.progress(cases, f"{NAME}: peak memory")
    with bar, open(folder / "memory_child_output.txt", "w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "experiments.common.peak_memory", str(spec), str(result)],
                                stdout=sink, stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        bar.update(len(cases))
    done = json.loads(result.read_text()) if result.exists() else []
    reason = f"peak-memory child ended (rc {proc.returncode}) before this case; see memory_child_output.txt"
    return done + [{"peak_bytes": None, "note": reason, "device_memory_bytes": None}] * (len(cases) - len(done))


def run(ctx: RunContext) -> list[dict]:
    ns = QUICK_NS if ctx.quick else NS
    cases = [Case(method, "fwd_bwd", B, H, n, D) for method in METHODS.values() for n in ns]
    if ctx.gpu:
        measured = _measure(ctx, cases)
    else:
        note = ctx.skip(f"{NAME}: peak device memory ({NO_GPU}); predicted only")
        measured = [{"peak_bytes": None, "note": note, "device_memory_bytes": None}] * len(cases)
    label = {v: k for k, v in METHODS.items()}
    return [{"method": label[case.method], "B": case.B, "H": case.H, "N": case.N, "d": case.d,
             "quantity": "peak device memory", "unit": "bytes",
             "predicted": predicted_peak_bytes(case), "measured": got["peak_bytes"],
             "measured_by": "numba allocation tracking (EMM plugin)" if got["peak_bytes"] is not None else None,
             "out_of_memory": got["note"] == "out of memory",
             "device_memory_bytes": got["device_memory_bytes"], "note": got["note"]}
            for case, got in zip(cases, measured)]


def plot(rows: list[dict], path) -> None:
    fig, (ax,) = plotting.figure(1, title=f"Peak memory, forward + backward (B={B}, H={H}, d={D}, fp32)")
    for i, method in enumerate(METHODS):
        pts = sorted((r for r in rows if r["method"] == method), key=lambda r: r["N"])
        ax.plot([r["N"] for r in pts], [r["predicted"] / GB for r in pts], color=f"C{i}",
                label=f"{method} predicted", **plotting.PREDICTED)
        meas = [(r["N"], r["measured"] / GB) for r in pts if r["measured"] is not None]
        if meas:
            ax.plot(*zip(*meas), color=f"C{i}", label=f"{method} measured", **plotting.MEASURED)
        oom = [(r["N"], r["predicted"] / GB) for r in pts if r["out_of_memory"]]
        if oom:
            ax.plot(*zip(*oom), color=f"C{i}", linestyle="none", marker="x", markersize=10,
                    label=f"{method}: out of memory")
    capacity = next((r["device_memory_bytes"] for r in rows if r["device_memory_bytes"]), None)
    if capacity:
        ax.axhline(capacity / GB, color="0.3", linestyle="--", linewidth=1, label=f"device memory {capacity / GB:.0f} GB")
    plotting.finish(ax, "sequence length N", "peak device memory (GB)", loglog=True)
    ax.set_xscale("log", base=2)
    plotting.save(fig, path)
