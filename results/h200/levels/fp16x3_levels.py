"""ncu counters (the levels experiment's) of its FP16X3 split alone: fa2_fp16x3's three
launches (head maxima, split into fp16 parts, the fp16 kernel on the parts) measured once,
after its model (simulator.fp16x3) was committed. argv: out folder; writes
levels_kernels_fp16x3.csv there (the rows levels_kernels.csv takes) and prints measured beside
predicted."""
import sys
from pathlib import Path
sys.path.insert(0, ".")

if __name__ == "__main__":
    from experiments.levels import FP16X3, measure_alone
    measure_alone(FP16X3, "fp16x3", Path(sys.argv[1]), "levels_kernels_fp16x3.csv",
                  "python results/h200/levels/fp16x3_levels.py OUT (the levels experiment's "
                  "FP16X3 split alone: experiments.levels.measure_alone)")
