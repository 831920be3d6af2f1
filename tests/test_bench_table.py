"""tools/bench_table.py: README's fp32 table is the bench CSV's numbers, row for row."""
import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("bench_table", Path(__file__).parents[1] / "tools/bench_table.py")
bench_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_table)


def _row(kernel, passes, ms, tflops, eff, causal=False, error="1e-6", dtype="float32"):
    return {"kernel": kernel, "passes": passes, "B": "4", "H": "16", "N": "4096", "d": "64",
            "causal": str(causal), "dtype": dtype, "ms": str(ms), "tflops": str(tflops),
            "vs_EFFICIENT_ATTENTION": str(eff), "max_rel_error": error, "note": ""}


def test_one_line_per_shape_with_its_own_numbers():
    rows = [_row("fa2", "fwd", 5.49, 50.04, 1.466), _row("fa2 + backward (atomic dQ)", "fwd_bwd", 20.5, 46.8, 1.34),
            _row("fa2_fp16x3", "fwd", 2.61, 105.2, 2.99),
            _row("fa2_fp16x3 + backward", "fwd_bwd", 10.08, 95.5, 2.78, error="2e-6"),
            _row("fa2", "fwd", 3.07, 44.8, 1.41, causal=True),
            _row("fa2", "fwd", 1.0, 1.0, 1.0, dtype="float16")]
    lines = bench_table.table(rows).splitlines()
    assert len(lines) == 4                       # header, rule, two float32 shapes
    first = [c.strip() for c in lines[2].strip("|").split("|")]
    assert first[:4] == ["4,16,4096,64", "5.49", "50.0", "1.47"]
    assert first[7:11] == ["105.2", "2.99", "95.5", "2.78"] and first[11] == "–"   # no FFMA row
    assert first[-1] == "1.0e-06 / 2.0e-06"
    assert lines[3].startswith("| 4,16,4096,64 causal | 3.07 |")
