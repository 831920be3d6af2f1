"""ncu counters (the levels experiment's) of its VALIDATION_6 split alone, measured once after
the dirty-residue model it holds out was committed (bf703cf). argv: out folder; writes
levels_kernels_v6.csv there (the rows levels_kernels.csv takes) and prints measured beside
predicted."""
import sys
from pathlib import Path
sys.path.insert(0, ".")

if __name__ == "__main__":
    from experiments.levels import VALIDATION_6, measure_alone
    measure_alone(VALIDATION_6, "validation_6", Path(sys.argv[1]), "levels_kernels_v6.csv",
                  "python results/h200/levels/validation_6.py OUT (the levels experiment's "
                  "VALIDATION_6 split alone: experiments.levels.measure_alone)")
