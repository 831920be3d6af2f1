"""README's fp32 performance table from a bench CSV (``python -m experiments bench --dtype
float32``'s ``bench.csv``): one line per shape, ours against SDPA EFFICIENT_ATTENTION of the
same run, so the table is the CSV's and nothing is typed by hand.

    python tools/bench_table.py results/h200/bench/bench.csv

Columns: the 3xTF32 forward (fa2) and fa2 + its backward (atomic dQ): ms, TFLOP/s and the
ratio to EFFICIENT_ATTENTION; fa2_fp16x3 (three fp16 products a product) forward and forward +
its backward: TFLOP/s and ratio; the FFMA forward (fa2_fma) and the deterministic forward +
backward: ratio; the largest error of the fa2 and fa2_fp16x3 rows (relative to max |x| of each
output, against float64)."""
from __future__ import annotations

import csv
import sys

EFF = "vs_EFFICIENT_ATTENTION"


def _shape(r: dict) -> tuple:
    return int(r["B"]), int(r["H"]), int(r["N"]), int(r["d"]), r["causal"] == "True"


def _label(shape: tuple) -> str:
    B, H, N, d, causal = shape
    return f"{B},{H},{N},{d}" + (" causal" if causal else "")


def _num(r: dict | None, key: str, fmt: str) -> str:
    if r is None or r.get(key) in (None, "", "unsupported"):
        return "–" if r is None else (r.get("note") or "–")[:20]
    return format(float(r[key]), fmt)


def table(rows: list[dict]) -> str:
    """The markdown table of every float32 shape in ``rows`` (bench.csv's rows), in their order."""
    rows = [r for r in rows if r["dtype"] == "float32"]
    by = {(r["kernel"], r["passes"], _shape(r)): r for r in rows}
    shapes = list(dict.fromkeys(_shape(r) for r in rows))
    head = ("| shape B,H,N,d | fwd ms | fwd TFLOP/s | fwd × EFF | fwd+bwd ms | fwd+bwd TFLOP/s "
            "| fwd+bwd × EFF | fp16x3 fwd TFLOP/s | fp16x3 fwd × EFF | fp16x3 fwd+bwd TFLOP/s "
            "| fp16x3 fwd+bwd × EFF | FFMA fwd × EFF | deterministic fwd+bwd × EFF "
            "| max error fwd / fwd+bwd | fp16x3 max error fwd / fwd+bwd |")
    lines = [head, "|---|" + "---:|" * (head.count("|") - 2)]
    for s in shapes:
        fwd = by.get(("fa2", "fwd", s))
        both = by.get(("fa2 + backward (atomic dQ)", "fwd_bwd", s))
        x3 = by.get(("fa2_fp16x3", "fwd", s))
        x3b = by.get(("fa2_fp16x3 + backward", "fwd_bwd", s))
        fma = by.get(("fa2_fma", "fwd", s))
        det = by.get(("fa2 + backward (deterministic)", "fwd_bwd", s))
        cells = [_label(s), _num(fwd, "ms", ".2f"), _num(fwd, "tflops", ".1f"),
                 _num(fwd, EFF, ".2f"), _num(both, "ms", ".2f"), _num(both, "tflops", ".1f"),
                 _num(both, EFF, ".2f"), _num(x3, "tflops", ".1f"), _num(x3, EFF, ".2f"),
                 _num(x3b, "tflops", ".1f"), _num(x3b, EFF, ".2f"),
                 _num(fma, EFF, ".2f"), _num(det, EFF, ".2f"),
                 f"{_num(fwd, 'max_rel_error', '.1e')} / {_num(both, 'max_rel_error', '.1e')}",
                 f"{_num(x3, 'max_rel_error', '.1e')} / {_num(x3b, 'max_rel_error', '.1e')}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1], newline="") as f:
        print(table(list(csv.DictReader(f))))
