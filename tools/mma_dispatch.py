"""``mma_dispatch_cycles`` of a calibrate CSV: the cycles an mma holds its scheduler's FMA-pipe
and ALU dispatch (``simulator.issue``), fitted through the issue simulator to calibrate's
mma-beside microbenchmarks (``experiments.common.microbench.measure_mma_beside``: 4 mma chains
a warp beside 2, 4 or 8 independent FFMA or LOP3 + VIMNMX an mma, 8 and 16 warps an SM).

Each microbenchmark's main loop is compiled here for sm_90 (numba's PTX, ptxas, nvdisasm: as
tools/kernel_sass.py) and simulated with the CSV's own rates at every hold on a 0.25-cycle grid
from 0 to 8; the hold whose predicted mma rates are nearest the measured ones (the least mean
absolute percentage error over every row with work beside the mma) is the value. Calibrated on
microbenchmarks only: no kernel measurement enters.

    python tools/mma_dispatch.py CALIBRATE_CSV [--add RATES_CSV]

Prints the error of every row at no hold and at the fitted one; ``--add`` appends the row (and
the microbenchmark rows it came from, where RATES_CSV lacks them) to RATES_CSV.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import statistics
import sys
from functools import lru_cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # simulator, experiments
sys.path.insert(0, str(Path(__file__).resolve().parent))          # kernel_sass

from kernel_sass import disassemble  # noqa: E402

from experiments.common import microbench  # noqa: E402
from simulator import issue  # noqa: E402
from simulator.rates import MMA_DISPATCH, load_rates  # noqa: E402

#: The holds tried (cycles).
GRID = [k / 4 for k in range(33)]
#: calibrate's short format names in the rows' quantities.
FORMATS = {tag: fmt for fmt, tag in microbench.FORMAT_TAG.items()}


def beside_rows(path: Path) -> list[dict]:
    """The mma-beside rows of a calibrate CSV that hold a value: mma a cycle an SM."""
    rows = []
    for r in csv.DictReader(open(path)):
        parts = r["quantity"].split("_")
        if (len(parts) == 7 and parts[0] == "mma" and parts[1] in FORMATS and parts[2] in ("ffma", "alu")
                and r["quantity"].endswith("_per_cycle_per_sm") and r["value"]):
            rows.append(r)
    return rows


@lru_cache(maxsize=None)
def stream(fmt: str, others: int, other: str):
    """The main loop of ``mma_kernel(4, fmt, others, other)`` as the issue simulator's ops."""
    from numba import types
    from numba.cuda import compile_ptx

    x = types.float32[::1] if fmt == "tf32" else types.uint32[::1]
    signature = (x, types.int64, types.float32[::1], types.int64[:, ::1])
    ptx, _ = compile_ptx(microbench.mma_kernel(4, fmt, others, other).py_func, signature, cc=(9, 0),
                         fastmath=False)
    return issue.decode_loop(issue.encode_loop(disassemble(ptx, None)))


def predicted(ops, warps_per_sm: int, rates, fmt: str) -> float:
    """mma a cycle an SM the issue simulator gives the loop ``ops`` at ``warps_per_sm``."""
    per_scheduler = warps_per_sm // 4
    cycles = issue.loop_cycles(ops, per_scheduler, rates, trips=4, mma_format=fmt)
    return 4 * per_scheduler * sum(o.pipe == "hmma" for o in ops) / cycles


def fit(path: Path) -> tuple[float, list[tuple[dict, float, float]]]:
    """(the hold, [(row, error at no hold %, error at the hold %)]) for calibrate CSV ``path``."""
    rates = load_rates(path)
    cases = []
    for r in beside_rows(path):
        _, tag, other = r["quantity"].split("_")[:3]
        others = int(r["detail"].split()[0])
        if others:
            fmt = FORMATS[tag]
            cases.append((r, stream(fmt, others, other), int(float(r["warps_per_sm"])), fmt))
    if not cases:
        raise ValueError(f"{path}: no mma-beside rows with a value (calibrate before 2026-12-06, or a CPU run)")

    def errors(hold: float) -> list[float]:
        held = dataclasses.replace(rates, mma_dispatch_cycles=hold)
        return [100 * (predicted(ops, w, held, fmt) - float(r["value"])) / float(r["value"])
                for r, ops, w, fmt in cases]

    best = min(GRID, key=lambda h: statistics.mean(abs(e) for e in errors(h)))
    return best, [(r, e0, e1) for (r, *_), e0, e1 in zip(cases, errors(0.0), errors(best))]


def main(argv) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", type=Path)
    parser.add_argument("--add", type=Path, help="rates CSV to append the row to")
    args = parser.parse_args(argv)
    hold, table = fit(args.csv)
    for r, e0, e1 in table:
        print(f"{r['quantity']:32s} {r['warps_per_sm']:>3s} warps  {r['detail']:28s} "
              f"no hold {e0:+6.1f} %  hold {hold:g}: {e1:+6.1f} %")
    mape0 = statistics.mean(abs(e0) for _, e0, _ in table)
    mape1 = statistics.mean(abs(e1) for _, _, e1 in table)
    print(f"{MMA_DISPATCH} = {hold:g}: MAPE {mape0:.1f} % (no hold) -> {mape1:.1f} % over {len(table)} rows")
    if args.add:
        source = list(csv.DictReader(open(args.csv)))
        with open(args.add) as f:
            fields = next(csv.reader(f))
        have = {(r["quantity"], r["warps_per_sm"], r["detail"]) for r in csv.DictReader(open(args.add))}
        adding = [r for r in beside_rows(args.csv) if (r["quantity"], r["warps_per_sm"], r["detail"]) not in have]
        first = table[0][0]
        adding.append({**{k: first.get(k, "") for k in fields},
                       "quantity": MMA_DISPATCH, "value": f"{hold:g}", "unit": "cycles",
                       "warps_per_sm": "", "ilp": "", "blocks_per_sm": "", "clock_hz": "", "spread": "",
                       "repeats": "",
                       "measured_by": f"issue simulator fit to {len(table)} mma-beside rows of {args.csv.name}",
                       "detail": f"MAPE {mape0:.1f} % without, {mape1:.1f} % with",
                       "command": f"python tools/mma_dispatch.py {args.csv} --add {args.add}", "note": ""})
        with open(args.add, "a", newline="") as f:
            csv.DictWriter(f, fieldnames=fields, extrasaction="ignore").writerows(
                [{k: r.get(k, "") for k in fields} for r in adding])
        print(f"appended {len(adding)} rows to {args.add}")


if __name__ == "__main__":
    main(sys.argv[1:])
