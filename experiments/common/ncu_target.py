"""The child process ncu profiles: ``python -m experiments.common.ncu_target CASES.json RESULT.json``.

For each case: make inputs, run once unprofiled (compile, warm-up), then profile exactly one run
preceded by the marker kernel (see :mod:`experiments.common.ncu`).  RESULT.json lists, in launch
order, ``{"index", "marked", "error"}`` for every case; a failing case does not stop the others.
"""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from numba import cuda

from .cases import Case, device_inputs, run_case


@cuda.jit
def ncu_case_marker():
    """Launched (one thread) right before each profiled case; ncu sees it by name."""


def profile_one(case: Case, outcome: dict) -> None:
    """Run ``case`` once unprofiled and once profiled; sets ``outcome["marked"]`` as soon as the
    marker kernel is launched (from then on ncu holds a segment for this case)."""
    inputs = device_inputs(case, seed=0)
    run_case(case, inputs)
    cuda.synchronize()
    cuda.profile_start()
    try:
        ncu_case_marker[1, 1]()
        outcome["marked"] = True
        run_case(case, inputs)
        cuda.synchronize()
    finally:
        cuda.profile_stop()


def main(spec_path: str, result_path: str) -> None:
    cases = [Case.from_json(c) for c in json.loads(Path(spec_path).read_text())]
    outcomes = []
    for index, case in enumerate(cases):
        outcome = {"index": index, "marked": False, "error": None}
        try:
            profile_one(case, outcome)
        except Exception as exc:  # one failing case must not lose the others' counters
            outcome["error"] = f"{type(exc).__name__}: {exc}"[:500]
            traceback.print_exc()
        outcomes.append(outcome)
        Path(result_path).write_text(json.dumps(outcomes))  # after each case: survives a crash


if __name__ == "__main__":
    main(*sys.argv[1:3])
