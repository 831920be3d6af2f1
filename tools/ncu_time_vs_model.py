"""An experiment's committed ncu run held against this checkout's model: per case, ncu's kernel
time (``gpu__time_duration`` summed over the case's kernels, as ``experiments.common.ncu``
reads it) beside ``simulator.predict``'s time for the case's calls, so that a model change can
be read against counters already measured -- without a GPU.

    python tools/ncu_time_vs_model.py results/h200/window/ncu [--passes fwd]

The folder is one that ``experiments.common.ncu.profile_cases`` wrote (``ncu_cases.json``,
``ncu_result.json``, ``ncu.csv`` or its ``.gz``). The measured kernels are those of the commit
that run measured (its CSV's ``commit``), which may not be this checkout's: say so beside any
number taken from here; ``--card`` names the Hardware the run's GPU is predicted as (default
the H200's; ``H100_SXM`` for an H100's run). Prints one line per case, then MAPE and median APE."""
import argparse
import json
import statistics
from pathlib import Path

from experiments.common import model
from experiments.common.cases import Case
from experiments.common.ncu import Counters, read_profile


def kernel_times(folder: Path) -> list[tuple[Case, float]]:
    """(case, ncu kernel time in ms) of every case the run profiled, in the order the run lists
    them (``experiments.common.ncu.read_profile``); SystemExit where none has counters."""
    cases = [Case.from_json(c) for c in json.loads((folder / "ncu_cases.json").read_text())]
    answers = read_profile(folder, cases)
    times = [(case, got.gpu_time_ms) for case, got in answers.items() if isinstance(got, Counters)]
    if not times:
        raise SystemExit(f"{folder}: no case has counters ({next(iter(answers.values()), 'no cases')})")
    return times


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--passes", choices=("fwd", "fwd_bwd"), help="only these cases")
    parser.add_argument("--card", choices=sorted(set(model.GPU_OF_DEVICE.values())), default=model.MEASURED_GPU,
                        help="the Hardware the run's GPU is predicted as")
    args = parser.parse_args(argv)
    errors = []
    for case, measured in kernel_times(args.folder):
        if args.passes and case.passes != args.passes:
            continue
        predicted = model.predicted_or_note(case, args.card)
        if isinstance(predicted, str):
            print(f"{case.label:60s} ncu {measured:9.4f} ms  model: {predicted}")
            continue
        ms = predicted.prediction.time_s * 1e3
        errors.append(ms / measured - 1)
        print(f"{case.label:60s} ncu {measured:9.4f} ms  model {ms:9.4f} ms  {100 * errors[-1]:+6.1f} %  "
              f"({predicted.time_by})")
    if errors:
        ape = [abs(e) for e in errors]
        print(f"{len(errors)} cases: MAPE {100 * statistics.mean(ape):.1f} %, median APE "
              f"{100 * statistics.median(ape):.1f} %, signed mean {100 * statistics.mean(errors):+.1f} %")


if __name__ == "__main__":
    main()
