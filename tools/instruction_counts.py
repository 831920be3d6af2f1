"""The model's executed warp instructions of each tiled launch against ncu's, over a GPU run's
raw counters (the levels experiment's ``levels_kernels.csv``): a check of the instruction
counts the runtime model issues (``simulator.sass`` static counts, nested loops as often as
``simulator.trips`` says they run, less what a trip skips: ``trips.skipped``; the code outside
the main loop once a block, its tile copies as often as ``trips.outer_trips`` says).

    python tools/instruction_counts.py [--csv results/h200/levels/levels_kernels.csv] [KERNEL ...]

Prints ncu / model per launch (a kernel of the simulator's name, e.g. flash_backward) and each
kernel's min / median / max. Launches whose tiling was never recorded are left out.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # simulator, experiments

from experiments.common import model
from experiments.common.cases import Case
from experiments.common.results import number, read_rows
from simulator.local import nested_runs, recorded_causal, rows_per_trip
from simulator.occupancy import resources
from simulator.sass import MAIN_LOOP, sass
from simulator.trips import outer_trips, skipped

ROOT = Path(__file__).resolve().parent.parent


def model_instructions(p, w, tiling) -> float | None:
    """Warp instructions launch ``p`` of workload ``w`` executes by the model; None for a
    row kernel (no main loop)."""
    kernel, variant = p.code
    if not p.block_trips:
        return None
    causal = recorded_causal(p, w)
    warps = -(-resources(kernel, tiling, w.d, causal, variant).threads // 32)
    loop = sass(kernel, tiling, w.d, causal, variant, region=MAIN_LOOP)
    whole = sass(kernel, tiling, w.d, causal, variant, region="kernel")
    outside = whole.total - loop.total + sum((n - 1) * r.total
                                             for r, n in outer_trips(kernel, tiling, w.d, causal, variant))
    per_trip = (loop.total + sum(e * r.total for r, e in nested_runs(p, kernel, tiling, w, variant))
                - skipped(kernel, tiling, w.d, causal, variant, rows_per_trip(p)).get("total", 0.0))
    heads = p.grid_heads(w.BH)
    return warps * (outside * len(p.block_trips) + per_trip * sum(p.block_trips)) * heads


def ratios(csv_path: Path, kernels: set[str]) -> dict[str, list[tuple[str, float]]]:
    """kernel -> [(case label, ncu / model)] over the launches of ``csv_path``."""
    by_case = defaultdict(list)
    for r in read_rows(csv_path):
        by_case[r["case"]].append(r)
    out = defaultdict(list)
    for label, launches in by_case.items():
        case = Case.from_label(label)
        phases = [(p, rep) for rep in model.reports(case) for p in rep.phases]
        if len(phases) != len(launches):
            continue
        for (p, rep), measured in zip(phases, launches):
            if kernels and p.code[0] not in kernels:
                continue
            try:
                counted = model_instructions(p, rep.workload, rep.tiling)
            except LookupError:
                continue
            if counted:
                out[p.code[0]].append((label, number(measured["instructions"]) / counted))
    return out


def main(argv) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=ROOT / "results/h200/levels/levels_kernels.csv")
    parser.add_argument("kernels", nargs="*")
    args = parser.parse_args(argv)
    found = ratios(args.csv, set(args.kernels))
    for kernel, rows in sorted(found.items()):
        for label, ratio in rows:
            print(f"{kernel:24s} {label:48s} ncu / model {ratio:.3f}")
    for kernel, rows in sorted(found.items()):
        values = [r for _, r in rows]
        print(f"{kernel:24s} {len(values):3d} launches: min {min(values):.3f} median "
              f"{statistics.median(values):.3f} max {max(values):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
