"""ncu counters (the levels experiment's) of every fp32 tensor-core forward + backward case of
the levels splits (28), measured again on backward v14 (commit f372cf8): the committed
levels_kernels.csv measured v13, and the model's tables for v14 were recorded after it, so
these are held out for the runtime and level predictions of v14. argv: out folder, then split
names (default: all); writes levels_kernels_v14_<first split>.csv there (the rows
levels_kernels.csv takes) and prints measured beside predicted."""
import sys
from pathlib import Path
sys.path.insert(0, ".")

if __name__ == "__main__":
    from experiments.levels import SPLITS, measure_alone
    names = sys.argv[2:] or list(SPLITS)
    cases = tuple(c for name in names for c in SPLITS[name]
                  if c.method == "fa2" and c.passes == "fwd_bwd" and c.dtype == "float32"
                  and not c.deterministic)
    measure_alone(cases, "backward_v14", Path(sys.argv[1]), f"levels_kernels_v14_{names[0]}.csv",
                  f"python results/h200/levels/backward_v14.py OUT {' '.join(names)} "
                  "(experiments.levels.measure_alone)")
