"""Every standard-attention case of experiments.levels' splits, measured alone under ncu (run from
the repository root: python3 results/h100/levels/standard_softmax/standard_levels.py OUT)."""
import sys
from pathlib import Path

from experiments import levels

CASES = [c for cases in levels.SPLITS.values() for c in cases if c.method == "standard"]

if __name__ == "__main__":
    out = Path(sys.argv[1])
    levels.measure_alone(CASES, "standard", out, "levels_kernels_standard.csv",
                         f"python3 {__file__} {sys.argv[1]} (experiments.levels.measure_alone "
                         "of every standard case of levels.SPLITS)")
