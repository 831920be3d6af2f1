"""ncu counters (the levels experiment's) of its deterministic cases alone, on this code: the
deterministic backward now runs the FFMA forward again. argv: out folder."""
import sys
from pathlib import Path
sys.path.insert(0, ".")

if __name__ == "__main__":
    from experiments.levels import SPLITS, measure_alone
    measure_alone([c for cs in SPLITS.values() for c in cs if c.deterministic], "deterministic",
                  Path(sys.argv[1]), "levels_kernels_det.csv",
                  "python results/h200/levels/deterministic_cases.py OUT (the levels experiment's "
                  "deterministic cases alone: experiments.levels.measure_alone)")
