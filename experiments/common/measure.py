"""GPU measurements of a case: check its outputs against float64, then time it; and the error
text of a failed measurement (out-of-memory is recognised, so callers can mark it)."""
from __future__ import annotations

from .cases import Case, device_inputs, run_case
from .correctness import MismatchError, check_case
from .timing import INPUT_SETS, QUICK_REPEATS, REPEATS, Timing, tflops, time_cuda


def checked_timing(case: Case, quick: bool) -> tuple[Timing, float]:
    """(timing, max relative error): validates on input set 0, then times over all sets."""
    sets = [device_inputs(case, seed=i) for i in range(INPUT_SETS)]
    outputs = run_case(case, sets[0])
    error = check_case(case, sets[0], outputs)
    del outputs
    timing = time_cuda(lambda inputs: run_case(case, inputs), sets,
                       repeats=QUICK_REPEATS if quick else REPEATS)
    return timing, error


def is_out_of_memory(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".upper()
    return "OUT_OF_MEMORY" in text or "OUT OF MEMORY" in text or "OUTOFMEMORY" in text


def failure_note(exc: BaseException) -> str:
    """A one-line CSV note for a measurement that raised."""
    if is_out_of_memory(exc):
        return "out of memory"
    return f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


def timing_or_note(case: Case, ctx) -> tuple[Timing, float] | str:
    """``checked_timing``, or the failure's note (e.g. out of memory).  A wrong result is loud:
    it is noted as MISMATCH and recorded with ``ctx.fail``, so the run exits non-zero."""
    try:
        return checked_timing(case, ctx.quick)
    except MismatchError as exc:
        ctx.fail(str(exc))
        return f"MISMATCH: {exc}"
    except Exception as exc:
        return failure_note(exc)


def add_note(row: dict, note: str) -> None:
    """Append ``note`` to the row's ``note`` column ("; " between notes)."""
    row["note"] = "; ".join(n for n in (row.get("note", ""), note) if n)


def time_rows(ctx, name: str, cases: list[Case], rows: list[dict], tflops_column: str,
              timing_of=timing_or_note) -> dict[Case, float]:
    """Time every case on the GPU (``timing_of(case, ctx)``: ``timing_or_note``, checked first; a
    parameter, so that an experiment's tests can fake it), one row each: its ``time_ms``,
    ``time_by``, ``max_rel_error`` and, in ``tflops_column``, the TFLOP/s of the scores its mask
    leaves (``Case.band_flops``), or a note; returns the median times by case."""
    times = {}
    for case, row in ctx.progress(list(zip(cases, rows)), f"{name}: timing"):
        result = timing_of(case, ctx)
        if isinstance(result, str):
            add_note(row, f"time: {result}")
            continue
        timing, error = result
        times[case] = timing.median_ms
        row.update({"time_ms": timing.median_ms, "time_by": f"CUDA events, median of {timing.runs}",
                    "max_rel_error": error, tflops_column: tflops(case.band_flops, timing.median_ms)})
    return times


def against_dense(rows: list[dict], cases: list[Case], times: dict, dense_of, share: str,
                  ratio_column: str, dense_column: str, target: float | None = None) -> None:
    """Each row whose case and dense case (``dense_of(case)``) both have a time in ``times``
    gets the dense time (``dense_column``) and ``ratio_column`` = time / (row[share] x dense
    time), the share being the row's fraction of the dense work; with ``target``, also
    ``meets_target`` = ratio <= target."""
    for case, row in zip(cases, rows):
        dense = times.get(dense_of(case))
        if case in times and dense:
            row[dense_column] = dense
            row[ratio_column] = times[case] / (row[share] * dense)
            if target is not None:
                row["meets_target"] = row[ratio_column] <= target


def times_against_dense(ctx, name: str, cases: list[Case], rows: list[dict], measured: dict, dense_of,
                        share: str, ratio: str, tflops_column: str, target: float,
                        timing_of=timing_or_note) -> None:
    """Time every case (``time_rows``), then hold each row against its dense case
    (``dense_of(case)``) by the call's time and by ncu's kernel time (``measured[case]``'s
    ``gpu_time_ms``: the kernels alone, no host work): ``kernel_time_ms``, ``dense_time_ms``,
    ``dense_kernel_time_ms``; ``ratio`` and ``kernel_`` + ``ratio`` = time / (row[share] x dense
    time), ``meets_target`` = ratio <= ``target`` (10 % on top of the share of dense), and for
    the other reading of "share x dense + 10 %", 10 % of dense on top, ``excess_vs_dense`` and
    ``kernel_excess_vs_dense`` = time / dense time - share (<= 0.1)."""
    times = time_rows(ctx, name, cases, rows, tflops_column, timing_of=timing_of)
    kernel_times = {case: got.gpu_time_ms for case, got in measured.items() if getattr(got, "gpu_time_ms", None)}
    for case, row in zip(cases, rows):
        row["kernel_time_ms"] = kernel_times.get(case)
        for prefix, by_case in (("", times), ("kernel_", kernel_times)):
            if case in by_case and by_case.get(dense_of(case)):
                row[f"{prefix}excess_vs_dense"] = by_case[case] / by_case[dense_of(case)] - row[share]
    against_dense(rows, cases, kernel_times, dense_of, share, f"kernel_{ratio}", "dense_kernel_time_ms")
    against_dense(rows, cases, times, dense_of, share, ratio, "dense_time_ms", target)
