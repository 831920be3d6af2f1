"""Per-launch time errors of the committed H200 counters with the issue simulator's global-load
latency as the model has it (MODE=base) or DRAM's wherever a launch reads more than 2 % of its
bytes from DRAM (MODE=dram): a probe of which latency tile loads wait, not a model (README,
"Tried and not adopted").

    MODE=base python results/h200/levels/latency_probe/latency_probe.py results/h200/levels/levels_kernels.csv
"""
import collections
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

import simulator.runtime as rt  # noqa: E402
from simulator import issue  # noqa: E402

if os.environ.get("MODE", "base") == "dram":
    rt.global_load_latency = lambda r, m: issue.global_load_latency(r, 1.0 if m > 0.02 else m)

from experiments.levels import per_launch  # noqa: E402

errors = collections.defaultdict(list)
for row in per_launch(Path(sys.argv[1])):
    if row["quantity"] == "time_s" and row["measured"]:
        errors[row["kernel"]].append(100 * (row["predicted"] / row["measured"] - 1))
for kernel, e in sorted(errors.items()):
    print(f"{kernel:28s} n={len(e):3d} mean {statistics.mean(e):+6.1f} MAPE "
          f"{statistics.mean(map(abs, e)):5.1f} range {min(e):+.1f}..{max(e):+.1f}")
