"""FP16X3_BACKWARD measured case by case (each case's counters written as soon as it is done).

    python call_levels.py OUT SECONDS [FIRST]   (no case starts after SECONDS; from case FIRST on)"""
import sys, time
from pathlib import Path
from experiments.levels import FP16X3_BACKWARD, measure_alone
if __name__ == "__main__":
    out, deadline = Path(sys.argv[1]), time.time() + float(sys.argv[2])
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    for i, case in enumerate(FP16X3_BACKWARD):
        if i < first:
            continue
        if time.time() > deadline:
            print("out of time before", case.label, flush=True)
            break
        t = time.time()
        measure_alone([case], "fp16x3_backward", out / f"c{i}", f"levels_kernels_fp16x3_backward_{i}.csv",
                      "python -m experiments.levels fp16x3_backward OUT (experiments.levels.measure_alone, a case at a time)")
        print(case.label, round(time.time() - t), "s", flush=True)
