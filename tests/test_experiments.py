"""The experiments CLI in cpu mode (model + CUDA-simulator counts): files, metadata, numbers.

One ``run --quick --device cpu`` of every experiment but those whose own test modules run them
(``OWN_TESTS``: the same run, not repeated here) feeds most tests; the pure helpers (FLOPs,
validation metrics, ncu parsing) are tested on hand-made inputs.
"""
import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import EXPERIMENTS
from experiments.common.cases import Case
from experiments.common.metadata import METADATA_COLUMNS
from experiments.common.ncu import parse_ncu_csv, split_by_marker, sum_counters
from experiments.validation import summarize

from .helpers import once_per_session


ROOT = Path(__file__).resolve().parents[1]
#: Experiments whose cpu-mode run (CSV, PNG, metadata) a module of their own checks.
OWN_TESTS = {"window": "test_experiment_window.py", "block_sparse": "test_experiment_block_sparse.py"}
RUN_HERE = [name for name in EXPERIMENTS if name not in OWN_TESTS]


def _cli(*args, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "experiments", *args, "--out", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """(folder, stdout) of the cpu-mode run, once per session (``once_per_session``)."""
    def run(out):
        proc = _cli("run", *RUN_HERE, "--quick", "--device", "cpu", out=out)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    return once_per_session(tmp_path_factory, "experiments_cpu_run", run)


def _rows(out: Path, name: str) -> list[dict]:
    with open(out / name / f"{name}.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_every_experiment_is_run_here_or_by_its_own_module():
    assert sorted(RUN_HERE + list(OWN_TESTS)) == sorted(EXPERIMENTS)
    for module in OWN_TESTS.values():
        assert (ROOT / "tests" / module).exists()


@pytest.mark.parametrize("name", RUN_HERE)
def test_every_experiment_writes_csv_and_png_with_metadata(results, name):
    out, _ = results
    png = out / name / f"{name}.png"
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    rows = _rows(out, name)
    assert rows
    for column in METADATA_COLUMNS:
        assert column in rows[0], column
    for row in rows:
        assert row["experiment"] == name
        assert "no GPU" in row["device"]
        assert row["command"].startswith("python -m experiments run calibrate ")
        assert row["command"].endswith(f"--quick --device cpu --out {out}")
        assert row["numpy"] and row["numba_cuda"] and row["python"]


def test_instrumented_counts_equal_the_prediction(results):
    out, _ = results
    counted = [r for name in RUN_HERE if name != "validation"
               for r in _rows(out, name) if r.get("measured_by", "").startswith("count_traffic")]
    assert len(counted) >= 15
    for row in counted:
        assert float(row["measured"]) == float(row["predicted"]) > 0, row


def test_ring_counts_equal_the_model(results):
    """What numba_flash.distributed sent and computed on 3 gloo processes equals
    simulator.ring.ring_cost exactly; zigzag balances the causal work, contiguous does not."""
    out, _ = results
    rows = _rows(out, "ring")
    assert len(rows) >= 30
    for row in rows:
        assert float(row["measured"]) == float(row["predicted"]), row
    imbalance = {(r["layout"], r["causal"]): float(r["measured"]) for r in rows
                 if r["quantity"].startswith("causal work imbalance")}
    assert imbalance[("zigzag", "True")] == 1.0 < imbalance[("contiguous", "True")]


def test_theorem2_shapes_in_io_scaling(results):
    out, _ = results
    rows = _rows(out, "io_scaling")
    standard_n = sorted((int(r["N"]), float(r["measured"])) for r in rows if r["sweep"] == "N" and r["method"] == "standard")
    (n0, b0), (n1, b1) = standard_n[0], standard_n[-1]
    assert math.log(b1 / b0) / math.log(n1 / n0) > 1.6  # ~ N^2
    fa1_m = sorted((int(r["M_elements"]), float(r["measured"])) for r in rows if r["sweep"] == "M" and r["method"] == "fa1")
    assert all(b_next < b for (_, b), (_, b_next) in zip(fa1_m, fa1_m[1:]))  # falls as M grows
    for r in rows:
        if r["prop3_lower_bound_bytes"]:
            assert float(r["measured"]) >= float(r["prop3_lower_bound_bytes"])


def test_gpu_parts_are_skipped_and_said_so(results):
    out, stdout = results
    assert "skipped" in stdout
    for name in ("runtime", "memory", "l2_effect"):
        rows = _rows(out, name)
        assert all(not r.get("measured") for r in rows)
        assert all("skipped" in r["note"] and "no GPU" in r["note"] for r in rows)
        assert all(float(r["predicted"]) > 0 for r in rows if not r.get("model"))
    half_backward = [r for r in _rows(out, "runtime")
                     if r["dtype"] != "float32" and r["passes"] == "fwd_bwd" and r["implementation"].startswith("ours")]
    assert half_backward and all(float(r["predicted"]) > 0 for r in half_backward)   # the half kernels are timed
    standard = [r for r in _rows(out, "memory") if r["method"] == "standard"]
    flash = [r for r in _rows(out, "memory") if r["method"] == "flash"]
    assert float(standard[-1]["predicted"]) > 10 * float(flash[-1]["predicted"])


def test_validation_summarises_the_pairs_it_found(results):
    out, _ = results
    rows = _rows(out, "validation")
    overall = next(r for r in rows if r["row"] == "summary" and r["source"] == "all")
    pairs = [r for r in rows if r["row"] == "pair"]
    assert int(overall["pairs"]) == len(pairs) >= 15
    assert float(overall["mape_percent"]) == 0.0
    assert int(overall["within_10_percent"]) == len(pairs)


def test_bench_without_gpu_writes_a_note(tmp_path):
    proc = _cli("bench", "--device", "cpu", out=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = _rows(tmp_path, "bench")
    assert "skipped" in rows[0]["note"] and (tmp_path / "bench" / "bench.png").exists()


def test_list_names_every_experiment():
    proc = subprocess.run([sys.executable, "-m", "experiments", "list"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0
    for name in [*EXPERIMENTS, "bench"]:
        assert name in proc.stdout


def test_summarize_on_a_hand_made_example():
    s = summarize(measured=[100.0, 200.0, 400.0, 50.0], predicted=[110.0, 180.0, 400.0, 75.0])
    assert s.pairs == 4
    assert s.mape_percent == pytest.approx((10 + 10 + 0 + 50) / 4)
    assert s.within_10_percent == 3
    m, p = [100, 200, 400, 50], [110, 180, 400, 75]
    mm, mp = sum(m) / 4, sum(p) / 4
    cov = sum((a - mm) * (b - mp) for a, b in zip(m, p))
    expected = cov / math.sqrt(sum((a - mm) ** 2 for a in m) * sum((b - mp) ** 2 for b in p))
    assert s.correlation == pytest.approx(expected)
    assert math.isnan(summarize([1.0], [2.0]).correlation)
    assert summarize([], []).pairs == 0


def test_flops_convention():
    fwd = Case("fa2", "fwd", 2, 3, 128, 64)
    assert fwd.flops == 4 * 2 * 3 * 128 * 128 * 64
    assert Case("fa2", "fwd_bwd", 2, 3, 128, 64).flops == 3.5 * fwd.flops
    assert Case("fa2", "fwd_bwd", 2, 3, 128, 64, causal=True).flops == 0.5 * 3.5 * fwd.flops


NCU_LONG = '''==PROF== Connected to process 7 (python3)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","7","python3","h","ncu_case_marker","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","64"
"1","7","python3","h","flash_forward_fa2","1","7","(256, 1, 1)","(16, 16, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","1,048,576"
"1","7","python3","h","flash_forward_fa2","1","7","(256, 1, 1)","(16, 16, 1)","0","9.0","Command line profiler metrics","l1tex__m_xbar2l1tex_read_sectors_mem_lg_op_ld.sum","sector","100"
"1","7","python3","h","flash_forward_fa2","1","7","(256, 1, 1)","(16, 16, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","2.5"
"2","7","python3","h","row_dot","1","7","(128, 1, 1)","(8, 16, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","Kbyte","2"
"3","7","python3","h","ncu_case_marker","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","0"
"4","7","python3","h","standard_matmul","1","7","(256, 1, 1)","(4, 4, 1)","0","9.0","Command line profiler metrics","l1tex__m_l1tex2xbar_write_sectors_mem_lg_op_st.sum","sector","3"
'''


def test_ncu_csv_is_split_per_case_and_summed():
    segments = split_by_marker(parse_ncu_csv(NCU_LONG))
    assert [len(s) for s in segments] == [2, 1]
    first, second = sum_counters(segments[0]), sum_counters(segments[1])
    assert first.dram_read_bytes == 1_048_576 and first.dram_write_bytes == 2000
    assert first.l2_read_bytes == 100 * 32 and first.gpu_time_ms == pytest.approx(2.5e-3)
    assert first.kernels == 2
    assert second.l2_write_bytes == 3 * 32 and second.dram_bytes == 0
