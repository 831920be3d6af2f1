"""GPU measurements of a case: check its outputs against float64, then time it; and the error
text of a failed measurement (out-of-memory is recognised, so callers can mark it)."""
from __future__ import annotations

from .cases import Case, device_inputs, run_case
from .correctness import MismatchError, check_case
from .timing import INPUT_SETS, QUICK_REPEATS, REPEATS, Timing, time_cuda


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
