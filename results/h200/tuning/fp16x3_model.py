"""The cost model's time for fa2_fp16x3 (``simulator.predict("flash_forward_fp16x3", ...)``:
its three launches) and for the 3xTF32 forward ("flash_forward_tc") beside what the H200
measured for both in one run (``fp16x3_forward_2026-12-05b.log``: per-call CUDA events through
the API, host work included, median of 10; commit 4275dc2). The model was not tuned on these
points: its rates are calibrate's microbenchmarks, its tables the compiled kernels'.

    python results/h200/tuning/fp16x3_model.py
"""
import re
import sys
from pathlib import Path

sys.path.insert(0, ".")

from simulator import Workload, predict                    # noqa: E402
from simulator.hardware import H200_MEASURED                # noqa: E402
from simulator.levels import launch_levels                  # noqa: E402

LOG = Path(__file__).with_name("fp16x3_forward_2026-12-05b.log")
LINE = re.compile(r"^\s+(\d+),(\d+),(\d+),(\d+)(,causal)? \| fp16x3 default ([\d.]+) .*\| 3xTF32 ([\d.]+) ")


def measured() -> list[tuple]:
    """(B, H, N, d, causal, fp16x3 ms, 3xTF32 ms) of each timed shape of the log."""
    out = []
    for line in LOG.read_text().splitlines():
        m = LINE.match(line)
        if m:
            b, h, n, d = (int(x) for x in m.group(1, 2, 3, 4))
            out.append((b, h, n, d, bool(m.group(5)), float(m.group(6)), float(m.group(7))))
    return out


def main() -> None:
    print("shape B,H,N,d | fa2_fp16x3: measured ms, model ms (head maxima + split + forward), "
          "error | 3xTF32 fa2: measured, model, error")
    errors = {"fp16x3": [], "tc": []}
    for b, h, n, d, causal, ms_x3, ms_tc in measured():
        w = Workload(b, h, n, n, d, causal=causal)
        x3 = predict("flash_forward_fp16x3", w, hardware=H200_MEASURED)
        tc = predict("flash_forward_tc", w, hardware=H200_MEASURED)
        launches = launch_levels(x3.phases, w, x3.tiling, x3.hardware, x3.l2)
        parts = " + ".join(f"{v.time_s * 1e3:.3f}" for v in launches)
        t_x3, t_tc = x3.levels.time_s * 1e3, tc.levels.time_s * 1e3
        errors["fp16x3"].append(t_x3 / ms_x3 - 1)
        errors["tc"].append(t_tc / ms_tc - 1)
        print(f"{b},{h},{n},{d}{' causal' if causal else ''} | {ms_x3:.3f}, {t_x3:.3f} ({parts}, "
              f"{x3.tiling.Br}x{x3.tiling.Bc}), {errors['fp16x3'][-1]:+.1%} | {ms_tc:.3f}, "
              f"{t_tc:.3f}, {errors['tc'][-1]:+.1%}")
    for name, e in errors.items():
        print(f"{name}: MAPE {sum(abs(x) for x in e) / len(e):.1%} over {len(e)} shapes")


if __name__ == "__main__":
    main()
