"""Are the kernel tables the launched code? A tools/device_sass.py folder (each kernel compiled
on the GPU through numba-cuda's dispatcher and linker, as a launch compiles it) against the
tables' own SASS (a ``tools/kernel_sass.py --keep`` folder of the run that recorded them) and
simulator/kernel_resources.csv: per kernel, whether the two disassemblies are the same
instruction for instruction (address, mnemonic, branch target; the SpillRefill marks aside,
which the GPU machine's nvdisasm does not print), and the device's registers and stack frame
(the loaded function's attributes) beside the table's.

    python results/h100/compile/launch_check.py KEPT_DIR OUT.csv DEVICE_DIR ...

Run on 2026-12-06 (launch_check_2026-12-06.csv): KEPT_DIR the ``tools/kernel_sass.py --keep``
folder of the re-record of README (21) (0.5 GB of line-info disassembly, not committed: the
same command writes it again), DEVICE_DIR the two folders of device_sass_all{1,2}_2026-12-06.tar.xz
(an H100 machine, ``tools/device_sass.py --part 1/2`` and ``2/2``): 140 kernels (41 capped),
all the same code, registers and stack frame.
"""
import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT)]
from simulator.sass import parse  # noqa: E402


def code(path: Path) -> list[tuple]:
    return [(i.address, i.mnemonic, i.target) for i in parse(path.read_text())]


def main(kept: Path, out: Path, devices: list[Path]) -> None:
    attrs, device_stamps, folder = {}, {}, {}
    for device in devices:
        for a in json.loads((device / "attrs.json").read_text()):
            attrs[a["name"]], folder[a["name"]] = a, device
        device_stamps.update(json.loads((device / "STAMP").read_text()))
    table = {(r["kernel"], r["variant"], r["Br"], r["Bc"], r["d"], r["causal"]): r
             for r in csv.DictReader(open(ROOT / "simulator" / "kernel_resources.csv"))}
    kept_stamps = json.loads((kept / "STAMP").read_text())
    rows = []
    for name, a in sorted(attrs.items()):
        if not (kept / name).exists():
            continue
        t = table[a["kernel"], a["variant"], a["Br"], a["Bc"], a["d"], a["causal"]]
        here, there = code(kept / name), code(folder[name] / name)
        rows.append({"kernel": a["kernel"], "variant": a["variant"], "Br": a["Br"], "Bc": a["Bc"],
                     "d": a["d"], "causal": a["causal"], "register_cap": a["register_cap"] or "",
                     "same_sources": kept_stamps[name]["kernel_source"] == device_stamps[name]["kernel_source"],
                     "device_instructions": len(there), "table_instructions": len(here),
                     "identical": here == there,
                     "device_registers": a["regs"], "table_registers": int(t["registers"]),
                     "device_stack_bytes": a["local"], "table_stack_bytes": int(t["stack_frame_bytes"]),
                     "device_lto": a["lto"]})
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    same = [r for r in rows if r["identical"] and r["device_registers"] == r["table_registers"]
            and r["device_stack_bytes"] == r["table_stack_bytes"]]
    print(f"{len(rows)} kernels ({sum(bool(r['register_cap']) for r in rows)} capped); the same code, "
          f"registers and stack frame: {len(same)}")
    for r in rows:
        if r not in same:
            print("differs:", {k: v for k, v in r.items()})


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), [Path(a) for a in sys.argv[3:]])
