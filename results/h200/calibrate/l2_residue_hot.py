"""The L2 dirty-residue hot-set sweep alone (experiments/common/l2_residue.py ``measure_hot``,
which ``python -m experiments run calibrate --device gpu`` also runs), its rows as JSON:

    source .whl/prefix.sh; python results/h200/calibrate/l2_residue_hot.py OUT.json

Run on the H200 on 2026-12-04 (commit ccd6ff2 plus the sweep; 7 s): l2_residue_hot_2026-12-04.json,
whose rows were added to simulator/rates_h200.csv (``add_to_rates``)."""
import csv
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

RATES = ROOT / "simulator" / "rates_h200.csv"
METADATA = {"experiment": "calibrate", "device": "NVIDIA H200", "date": "2026-12-04T09:05:00+00:00",
            "python": "3.12.3", "numpy": "2.4.6", "numba": "0.68.0", "numba_cuda": "0.30.4",
            "torch": "2.11.0", "commit": "ccd6ff2+changes",
            "command": "python results/h200/calibrate/l2_residue_hot.py OUT.json"}


def add_to_rates(measured: Path) -> None:
    """Append the measured rows to simulator/rates_h200.csv (the run's metadata above)."""
    rows = json.loads(measured.read_text())
    with open(RATES, newline="") as f:
        columns = csv.DictReader(f).fieldnames
    with open(RATES, "a", newline="") as f:
        writer = csv.DictWriter(f, columns, lineterminator="\n")
        for row in rows:
            writer.writerow({**{k: ("" if v is None else v) for k, v in row.items() if k in columns},
                             **METADATA})


if __name__ == "__main__":
    if sys.argv[1:2] == ["--add-to-rates"]:
        add_to_rates(Path(sys.argv[2]))
    else:
        from experiments.common import l2_residue
        rows = [dataclasses.asdict(m) for m in l2_residue.measure_hot(True)]
        Path(sys.argv[1]).write_text(json.dumps(rows, indent=1))
        for m in rows:
            print(m["quantity"], m["value"], m["detail"], m["note"])
