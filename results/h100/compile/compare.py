"""The device's compiled code (a tools/device_sass.py folder) beside the kernel tables' records
(standalone ptxas): registers and stack frame (attrs.json against simulator/kernel_resources.csv),
and per region (kernel, main loop) the instruction count, HMMA and LDL / STL bytes (the SASS
files against simulator/kernel_sass.csv). Prints the main loops that differ; writes every row
to OUT.csv.

    python results/h100/compile/compare.py DIR OUT.csv
"""
import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT)]
from simulator.sass import parse, regions, tally  # noqa: E402

folder, out = Path(sys.argv[1]), Path(sys.argv[2])
attrs = {a["name"]: a for a in json.loads((folder / "attrs.json").read_text())}
res = {(r["kernel"], r["variant"], r["Br"], r["Bc"], r["d"], r["causal"]): r
       for r in csv.DictReader(open(ROOT / "simulator" / "kernel_resources.csv"))}
sass = {}
for r in csv.DictReader(open(ROOT / "simulator" / "kernel_sass.csv")):
    sass[(r["kernel"], r["variant"], r["Br"], r["Bc"], r["d"], r["causal"], r["region"])] = r
rows = []
for name, a in sorted(attrs.items()):
    key = (a["kernel"], a["variant"], a["Br"], a["Bc"], a["d"], a["causal"])
    table = res.get(key)
    text = (folder / name).read_text()
    regs = {reg.name: tally(reg.instructions)[0] for reg in regions(parse(text))}
    for region in ("kernel", "main_loop"):
        dev = regs.get(region)
        tab = sass.get(key + (region,))
        if dev is None or tab is None:
            continue
        rows.append({"kernel": a["kernel"], "variant": a["variant"], "Br": a["Br"], "Bc": a["Bc"],
                     "d": a["d"], "causal": a["causal"], "region": region,
                     "device_registers": a["regs"], "table_registers": table and table["registers"],
                     "device_stack_bytes": a["local"], "table_stack_bytes": table and table["stack_frame_bytes"],
                     "device_total": dev["total"], "table_total": tab["total"],
                     "device_ldl_bytes": dev["ldl_bytes"], "table_ldl_bytes": tab["ldl_bytes"],
                     "device_stl_bytes": dev["stl_bytes"], "table_stl_bytes": tab["stl_bytes"],
                     "device_hmma": dev["hmma"], "table_hmma": tab["hmma"]})
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, list(rows[0]))
    w.writeheader()
    w.writerows(rows)
same = sum(1 for r in rows if r["region"] == "kernel" and str(r["device_total"]) == r["table_total"]
           and str(r["device_registers"]) == r["table_registers"])
print(f"{len(rows) // 2} kernels; identical instruction count and registers: {same}")
for r in rows:
    if r["region"] == "main_loop" and (str(r["device_ldl_bytes"]) != r["table_ldl_bytes"]
                                       or str(r["device_total"]) != r["table_total"]):
        print(f"{r['kernel']:20s} {r['variant']:8s} {r['Br']:>3s}x{r['Bc']:<3s} d={r['d']:>3s} {r['causal']:5s} "
              f"regs {r['device_registers']}/{r['table_registers']} stack {r['device_stack_bytes']}/{r['table_stack_bytes']} "
              f"loop total {r['device_total']}/{r['table_total']} LDL {r['device_ldl_bytes']}/{r['table_ldl_bytes']} "
              f"STL {r['device_stl_bytes']}/{r['table_stl_bytes']}")
