"""The model's executed warp instructions of each tiled launch against ncu's, over a GPU run's
raw counters (the levels experiment's ``levels_kernels.csv``): a check of the instruction
counts the runtime model issues (``simulator.runtime.block_counts``: the code outside the main
loop once a block, a main-loop trip as often as the block runs one).

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
from simulator.local import recorded_causal
from simulator.occupancy import resources
from simulator.runtime import block_counts

ROOT = Path(__file__).resolve().parent.parent


def model_instructions(p, w, tiling) -> float | None:
    """Warp instructions launch ``p`` of workload ``w`` executes by the model (the runtime
    model's ``block_counts``); None for a row kernel (no main loop)."""
    if not p.block_trips:
        return None
    kernel, variant = p.code
    threads = resources(kernel, tiling, w.d, recorded_causal(p, w), variant).threads
    outside, trip = block_counts(p, w, tiling, -(-threads // 32))
    heads = p.grid_heads(w.BH)
    return (outside["total"] * len(p.block_trips) + trip["total"] * sum(p.block_trips)) * heads


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
                counted = model_instructions(p, rep.workload, p.tiling or rep.tiling)
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
