"""Where a kernel's warps stall, by SASS opcode: ncu's per-instruction warp-state samples summed
over every instruction of an opcode (predicates dropped), with the top stall reasons of each.

    ncu --section WarpStateStats --section SourceCounters -o REPORT python ...   # on the GPU
    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > SOURCE.csv
    python tools/stall_ledger.py SOURCE.csv [--top 12]

Each kernel of the export: its samples, the stall reasons' shares of all samples, then the
opcodes by share of samples with their instructions executed (warp level) and top reasons.
results/h200/stalls/stall_reasons.sh records such exports.
"""
import argparse
import collections
import csv
import re


def kernels(path):
    """(kernel name, [row dicts]) for each kernel of an ncu source-page CSV export."""
    name, header, rows = None, None, []
    for row in csv.reader(open(path)):
        if row and row[0] == "Kernel Name":
            if name is not None:
                yield name, rows
            name, header, rows = row[1], None, []
        elif row and row[0] == "Address":
            header = row
        elif header and len(row) == len(header):
            rows.append(dict(zip(header, row)))
    if name is not None:
        yield name, rows


def opcode(source: str) -> str:
    text = re.sub(r"^@!?U?P\w+\s+", "", source.strip())
    return text.split()[0] if text else "?"


def ledger(rows, top: int) -> list[str]:
    reasons = [k for k in rows[0] if k.startswith("stall_") and "Not Issued" not in k]
    total = sum(int(r["# Samples"]) for r in rows) or 1
    by_reason = collections.Counter()
    by_op = collections.defaultdict(collections.Counter)
    for r in rows:
        c = by_op[opcode(r["Source"])]
        c["samples"] += int(r["# Samples"])
        c["executed"] += int(r["Instructions Executed"] or 0)
        for k in reasons:
            by_reason[k] += int(r[k])
            c[k] += int(r[k])

    def shares(counter, keys, n):
        best = sorted(keys, key=lambda k: -counter[k])[:n]
        return " ".join(f"{k[6:]} {100 * counter[k] / total:.1f}%" for k in best if counter[k])
    lines = [f"  samples {total}; stalls: {shares(by_reason, reasons, 10)}",
             f"  {'opcode':<34} {'executed':>12} {'samples':>8}  top reasons"]
    for op, c in sorted(by_op.items(), key=lambda kv: -kv[1]["samples"])[:top]:
        lines.append(f"  {op:<34} {c['executed']:>12} {100 * c['samples'] / total:>7.1f}%  "
                     f"{shares(c, reasons, 3)}")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source_csv")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    for name, rows in kernels(args.source_csv):
        print(name.split("(")[0][:100])
        print("\n".join(ledger(rows, args.top)) if rows else "  no instructions")


if __name__ == "__main__":
    main()
