"""tools/ncu_time_vs_model.py: a committed ncu folder's kernel times per case, beside the model."""
import gzip
import json
import sys
from pathlib import Path

import pytest

from experiments.common.cases import Case

from .test_experiments import NCU_LONG

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import ncu_time_vs_model  # noqa: E402


def _folder(tmp_path: Path, outcomes: list[dict], packed: bool) -> Path:
    cases = [Case("fa2", "fwd", 1, 2, 256, 64, causal=True, window=(64, 0)),
             Case("fa2", "fwd", 1, 2, 256, 64, causal=True),
             Case("standard", "fwd", 1, 2, 256, 64)]
    (tmp_path / "ncu_cases.json").write_text(json.dumps([c.to_json() for c in cases]))
    (tmp_path / "ncu_result.json").write_text(json.dumps(outcomes))
    if packed:
        with gzip.open(tmp_path / "ncu.csv.gz", "wt") as f:
            f.write(NCU_LONG)
    else:
        (tmp_path / "ncu.csv").write_text(NCU_LONG)
    return tmp_path


@pytest.mark.parametrize("packed", [False, True])
def test_each_marked_case_gets_its_kernels_time(tmp_path, packed):
    """NCU_LONG has two marked segments (2.5 us over two kernels, then one kernel of no time):
    they go to the marked cases in launch order; an unmarked case gets none."""
    outcomes = [{"index": 0, "marked": True, "error": None}, {"index": 1, "marked": False, "error": None},
                {"index": 2, "marked": True, "error": None}]
    got = ncu_time_vs_model.kernel_times(_folder(tmp_path, outcomes, packed))
    assert [c.window for c, _ in got] == [(64, 0), None] and [c.method for c, _ in got] == ["fa2", "standard"]
    assert got[0][1] == pytest.approx(2.5e-3) and got[1][1] == 0.0


def test_a_case_that_failed_is_left_out_and_a_short_log_refused(tmp_path):
    outcomes = [{"index": 0, "marked": True, "error": "boom"}, {"index": 2, "marked": True, "error": None}]
    got = ncu_time_vs_model.kernel_times(_folder(tmp_path, outcomes, False))
    assert [c.method for c, _ in got] == ["standard"]
    three = outcomes + [{"index": 1, "marked": True, "error": None}]
    with pytest.raises(SystemExit, match="ncu reported 2 marked cases, the child ran 3"):
        ncu_time_vs_model.kernel_times(_folder(tmp_path, three, False))


def test_main_prints_each_case_against_the_model(tmp_path, capsys):
    outcomes = [{"index": 0, "marked": True, "error": None}]
    folder = _folder(tmp_path, outcomes, False)
    (folder / "ncu.csv").write_text(NCU_LONG.split('"3","7"')[0])       # the first case's kernels only
    ncu_time_vs_model.main([str(folder)])
    out = capsys.readouterr().out
    assert "window64_0" in out and "ncu    0.0025 ms" in out and "1 cases: MAPE" in out
