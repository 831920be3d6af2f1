"""Dropout 0.1 and a padding mask: forward + backward time and memory against N (the paper's Fig. 3).

The paper's Fig. 3 and Tables 9-21 (Appendix E.5) run attention with dropout 0.1 and a padding
mask whose lengths are uniform in [N - 20, N], 8 heads of dimension 64, batch 16, forward +
backward, and plot runtime (left) and memory (right) against the sequence length. Here:

* ``flash``: our ``flash_attention(..., key_padding_mask=M, dropout_p=0.1)`` and its backward
  (method "fa2"; ``Case(dropout_p=0.1, padding=20)``): each batch entry runs on its kept keys
  (``numba_flash.padding``: padding neither loaded nor computed, at two calls per entry),
  each timed call checked against float64 first (the reference applies the mask the forward
  draws: ``experiments.common.correctness``);
* ``flash_dense``: the same shape without dropout or padding, one call each way: what the two
  features cost (``features_overhead`` = flash time / flash_dense time);
* ``sdpa_<BACKEND>``: PyTorch SDPA with the same padding as a boolean ``attn_mask`` (B, 1, 1, N)
  and ``dropout_p=0.1``, on MATH (PyTorch's standard attention, the paper's baseline) and
  EFFICIENT_ATTENTION (FLASH_ATTENTION and CUDNN_ATTENTION take no mask with dropout: noted
  as unsupported when SDPA refuses them); ``speedup`` = their time / flash's.

Time: CUDA events, median (``experiments.common.timing``). Memory: the bytes torch's allocator
holds at its peak during one forward + backward above what it held before (the inputs q, k, v,
dO excluded: the paper's "attention memory"), ``torch.cuda.max_memory_allocated`` (our API
allocates its outputs through torch for torch inputs); without torch, our time only. Predicted (flash rows): time by the
runtime model, summed over the entries' calls (``model.call_workloads``; dropout's Philox
arithmetic and the gathers are not modelled: a lower bound), and memory (``predicted_memory``):
the whole call's outputs (o, lse, dq, dk, dv) plus the largest entry's transients (its gathered
K, V, its outputs and its kernels' workspace).

FLOPs: ``flops`` by the benchmark convention (4 B H N^2 d x 3.5, padding not discounted, as
the paper counts them), ``kept_flops`` those of the kept keys' scores; ``tflops`` = flops / time.

GPU: B = 16, H = 8, d = 64, N = 128 ... 16384 in powers of 2 (quick: 256, 1024, 4096, 16384),
fp16 (the paper's) and fp32. CPU: predicted only, at the same shapes.
"""
from __future__ import annotations

from experiments.common import model, plotting
from experiments.common.cases import Case, device_inputs
from experiments.common.context import NO_GPU, RunContext
from experiments.common.kernels import build_kernels
from experiments.common.measure import add_note, failure_note, is_out_of_memory, timing_or_note
from experiments.common.timing import tflops
from experiments.common.torch_sdpa import (sdpa_call, sdpa_inputs, time_sdpa, torch_available,
                                            unsupported_reason)

NAME = "fig3"
B, H, D = 16, 8, 64
DROPOUT_P = 0.1
PADDING = 20
NS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
QUICK_NS = (256, 1024, 4096, 16384)
DTYPES = ("float16", "float32")
#: SDPA backends timed with the same mask and dropout (torch.nn.attention.SDPBackend names).
SDPA_BACKENDS = ("MATH", "EFFICIENT_ATTENTION", "FLASH_ATTENTION", "CUDNN_ATTENTION")
METHODS = ("flash", "flash_dense", *(f"sdpa_{b}" for b in SDPA_BACKENDS))


def cases(N: int, dtype: str) -> tuple[Case, Case]:
    """(the paper's setting, the same shape dense) at sequence length N."""
    featured = Case("fa2", "fwd_bwd", B, H, N, D, dtype=dtype, dropout_p=DROPOUT_P, padding=PADDING)
    return featured, Case("fa2", "fwd_bwd", B, H, N, D, dtype=dtype)


def predicted_memory(case: Case, reports: list | None = None) -> int:
    """Bytes our forward + backward allocates at its peak beyond the inputs (module docstring):
    the whole call's o, lse, dq, dk, dv, plus the largest call's own tensors -- with padding
    an entry's gathered K, V and outputs; every call's workspace (``TrafficReport.workspace``:
    the backward's D, the half backward's fp32 dQ). ``reports``: the case's ``model.reports``
    where already made."""
    whole = model.workload(case)
    kept = sum(whole.tensor_elements(n) * whole.dtype_bytes for n in ("O", "dQ", "dK", "dV"))
    kept += whole.tensor_elements("L") * 4
    entry = 0
    for report in reports if reports is not None else model.reports(case):
        w = report.workload
        own = sum(n * report.element_bytes(name) for name, n in report.workspace.items())
        if case.padding:   # the entry's K, V copies and the outputs of its call
            names = ("K", "V", "O") if report.algorithm.startswith("flash_forward") else (
                "K", "V", "dQ", "dK", "dV")
            own += sum(w.tensor_elements(n) * report.element_bytes(n) for n in names)
        entry = max(entry, own)
    return int(kept + entry)


def _peak_bytes(call, inputs) -> int:
    """Bytes torch's allocator holds at its peak during ``call(inputs)`` above what it held
    before."""
    import torch

    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = call(inputs)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del out
    return int(peak)


def _measure_sdpa(ctx: RunContext, backend: str, case: Case, row: dict) -> None:
    """Time and peak memory of SDPA on ``backend``, or the note of why not."""
    import torch

    try:
        row["peak_memory_bytes"] = _peak_bytes(sdpa_call(backend, case), sdpa_inputs(case, 0))
        timing = time_sdpa(backend, case, ctx.quick)
        row.update(time_ms=timing.median_ms, time_by=f"CUDA events, median of {timing.runs}")
    except Exception as exc:
        add_note(row, unsupported_reason(exc) or failure_note(exc))
        row["out_of_memory"] = is_out_of_memory(exc)
    finally:
        torch.cuda.empty_cache()


def _measure_flash(ctx: RunContext, case: Case, row: dict, with_torch: bool) -> None:
    """Time (checked against float64 first) and, ``with_torch``, peak memory of our call, or
    the note."""
    from experiments.common.cases import run_case

    result = timing_or_note(case, ctx)
    if isinstance(result, str):
        add_note(row, f"time: {result}")
        row["out_of_memory"] = "out of memory" in result
        return
    timing, error = result
    row.update(time_ms=timing.median_ms, time_by=f"CUDA events, median of {timing.runs}",
               max_rel_error=error)
    if not with_torch:
        return
    import torch

    try:
        row["peak_memory_bytes"] = _peak_bytes(lambda x: run_case(case, x), device_inputs(case, 0))
    except Exception as exc:
        add_note(row, f"memory: {failure_note(exc)}")
    torch.cuda.empty_cache()


def _row(method: str, case: Case, gpu: str) -> dict:
    row = {"method": method, "dtype": case.dtype, "B": B, "H": H, "N": case.N, "d": D,
           "dropout_p": DROPOUT_P if method != "flash_dense" else 0.0,
           "padding": PADDING if method != "flash_dense" else 0,
           "min_key_length": int(case.key_lengths().min()) if method != "flash_dense" else case.N,
           "flops": case.flops, "kept_flops": case.band_flops, "time_ms": None,
           "peak_memory_bytes": None, "note": ""}
    if method.startswith("flash"):
        predicted = model.predicted_or_note(case, gpu)
        if isinstance(predicted, str):
            add_note(row, predicted)
        else:
            row.update(predicted_time_ms=predicted.prediction.time_s * 1e3,
                       predicted_time_by=predicted.time_by, predicted_for=gpu,
                       predicted_memory_bytes=predicted_memory(case, predicted.reports))
    return row


def run(ctx: RunContext) -> list[dict]:
    ns = QUICK_NS if ctx.quick else NS
    pairs = [cases(n, dtype) for dtype in DTYPES for n in ns]
    if ctx.gpu:
        build_kernels(ctx, NAME, [c for pair in pairs for c in pair])
    rows, gpu = [], model.card(ctx.device)
    for featured, dense in ctx.progress(pairs, f"{NAME}: cases"):
        group = [_row("flash", featured, gpu), _row("flash_dense", dense, gpu),
                 *(_row(f"sdpa_{b}", featured, gpu) for b in SDPA_BACKENDS)]
        if ctx.gpu:
            with_torch = torch_available()
            _measure_flash(ctx, featured, group[0], with_torch)
            _measure_flash(ctx, dense, group[1], with_torch)
            for backend, row in zip(SDPA_BACKENDS, group[2:]):
                if with_torch:
                    _measure_sdpa(ctx, backend, featured, row)
                else:
                    add_note(row, "not measured: torch with CUDA is not installed")
            flash = group[0]["time_ms"]
            for row in group:
                if row["time_ms"] is not None:
                    row["tflops"] = tflops(row["flops"], row["time_ms"])
                    if flash:
                        row["speedup"] = row["time_ms"] / flash
            if flash and group[1]["time_ms"]:
                group[0]["features_overhead"] = flash / group[1]["time_ms"]
        rows += group
    if not ctx.gpu:
        note = ctx.skip(f"{NAME}: time and memory ({NO_GPU}); predicted only")
        for row in rows:
            add_note(row, note)
    return rows


def plot(rows: list[dict], path) -> None:
    fig, axes = plotting.figure(2, len(DTYPES))
    fig.suptitle(f"Dropout {DROPOUT_P} + padding mask (key lengths uniform in [N - {PADDING}, N]), "
                 f"forward + backward, B={B}, H={H}, d={D}", fontsize=11)
    for i, dtype in enumerate(DTYPES):
        time_ax, memory_ax = axes[2 * i], axes[2 * i + 1]
        for j, method in enumerate(METHODS):
            pts = sorted((r for r in rows if r["dtype"] == dtype and r["method"] == method),
                         key=lambda r: r["N"])
            x = [r["N"] for r in pts]
            plotting.measured_and_predicted(time_ax, x, pts, "predicted_time_ms", "time_ms", f"C{j}", method)
            plotting.measured_and_predicted(memory_ax, x, pts, "predicted_memory_bytes",
                                            "peak_memory_bytes", f"C{j}", method)
        name = dtype.replace("float", "fp")
        plotting.finish(time_ax, "sequence length N", "forward + backward time (ms)", loglog=True,
                        title=f"{name}: runtime")
        plotting.finish(memory_ax, "sequence length N", "peak memory beyond the inputs (bytes)",
                        loglog=True, title=f"{name}: memory")
        for ax, key in ((time_ax, "time_ms"), (memory_ax, "peak_memory_bytes")):
            if not any(r.get(key) is not None for r in rows if r["dtype"] == dtype):
                plotting.annotate_empty(ax, "measured: GPU only (see the CSV's note)")
    plotting.save(fig, path, footnote="measured: markers (CUDA events; torch.cuda.max_memory_allocated); "
                  "predicted: lines (flash: runtime model without dropout's Philox, summed over the "
                  "per-entry calls; memory from the tensors each call allocates)")
