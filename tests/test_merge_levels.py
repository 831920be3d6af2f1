"""tools/merge_levels.py: a device call's per-split counters replace their cases' rows of a
card's levels table; the other cases keep theirs; the table as it was is kept beside it."""
import csv
import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "merge_levels.py"


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _read(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_measured_cases_replace_their_rows_and_the_rest_stay(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("merge_levels", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    table = tmp_path / "results" / "h100" / "levels" / "levels_kernels.csv"
    _write(table, [{"case": "a", "launch": "0", "gpu_time_ns": "1"},
                   {"case": "b", "launch": "0", "gpu_time_ns": "2"},
                   {"case": "b", "launch": "1", "gpu_time_ns": "5"}])
    _write(tmp_path / "run" / "half" / "levels_kernels_half.csv",
           [{"case": "b", "launch": "0", "gpu_time_ns": "3", "sm_cycles": "9"}])
    _write(tmp_path / "run" / "dev" / "levels_kernels_dev.csv",
           [{"case": "c", "launch": "0", "gpu_time_ns": "4", "sm_cycles": "8"}])
    monkeypatch.chdir(tmp_path)
    assert tool.merge(Path("run"), "t", "h100") == (2, 1)
    rows = _read(table)
    assert [(r["case"], r["gpu_time_ns"], r["sm_cycles"]) for r in rows] == [
        ("c", "4", "8"), ("b", "3", "9"), ("a", "1", "")]      # b's old launch 1 is gone too
    assert len(_read(table.with_name("levels_kernels_before_t.csv"))) == 3
