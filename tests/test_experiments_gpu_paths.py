"""The GPU branches of the experiments, run without a GPU: ncu counters, CUDA-event timings and
the peak-memory child are replaced by fakes, so what is checked is everything around them --
which cases are measured, how measurements land in rows and CSV columns, the plots, validation.
"""
import csv

import pytest

from experiments import EXPERIMENTS, cli
from experiments.common import measure, timing, traffic
from experiments.common.context import RunContext
from experiments.common.ncu import Counters


def fake_counters(cases, workdir, progress=None):
    """Counters 10 % above the prediction's bytes (so validation has something to measure)."""
    from experiments.common import model

    out = {}
    for case in cases:
        p = model.predict_case(case)
        out[case] = Counters(dram_read_bytes=p.read_bytes / 2, dram_write_bytes=p.write_bytes,
                             l2_read_bytes=1.1 * p.read_bytes, l2_write_bytes=1.1 * p.write_bytes,
                             gpu_time_ms=1.0, kernels=3)
    return out


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path, throughput_trips):
    monkeypatch.setattr(traffic, "profile_cases", fake_counters)
    monkeypatch.setattr(measure, "checked_timing", lambda case, quick: (timing.Timing(2.0, 1.5, 3.0, 10), 1e-7))
    monkeypatch.setattr("experiments.runtime.torch_available", lambda: False)
    monkeypatch.setattr("experiments.bench.torch_available", lambda: False)
    monkeypatch.setattr("experiments.fig3.torch_available", lambda: False)
    monkeypatch.setattr("experiments.memory._measure", lambda ctx, cases: [
        {"peak_bytes": None, "note": "out of memory", "device_memory_bytes": 150e9} if c.method == "standard" and c.N > 8192
        else {"peak_bytes": 1e9, "note": "", "device_memory_bytes": 150e9} for c in cases])
    monkeypatch.setattr("experiments.common.metadata.device_name", lambda device: "fake GPU")
    return RunContext(device="gpu", quick=True, out=tmp_path, command="test")


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_gpu_branches_fill_measured_columns(fake_gpu):
    for name, module in EXPERIMENTS.items():
        cli.run_module(module, name, fake_gpu)
        assert (fake_gpu.out / name / f"{name}.png").exists()
    left = _rows(fake_gpu.out / "fig2_left" / "fig2_left.csv")
    h200 = [r for r in left if r["gpu"] == "H200_MEASURED" and r["quantity"] != "GFLOPs"]
    assert {r["dtype"] for r in h200} == {"fp32", "fp16"} and all(float(r["measured"]) > 0 for r in h200)
    middle = _rows(fake_gpu.out / "fig2_middle" / "fig2_middle.csv")
    assert any(r["note"].startswith("skipped: Tiling") for r in middle)
    assert all(r["measured"] for r in middle if r["predicted"])
    scaling = _rows(fake_gpu.out / "io_scaling" / "io_scaling.csv")
    for r in scaling:
        assert float(r["measured"]) == pytest.approx(1.1 * float(r["predicted"]))
    memory = _rows(fake_gpu.out / "memory" / "memory.csv")
    assert any(r["out_of_memory"] == "True" for r in memory)
    runtime = _rows(fake_gpu.out / "runtime" / "runtime.csv")
    assert all(float(r["tflops"]) > 0 for r in runtime)
    fig3 = _rows(fake_gpu.out / "fig3" / "fig3.csv")
    flash = [r for r in fig3 if r["method"] == "flash"]
    assert flash and all(float(r["time_ms"]) == 2.0 and float(r["features_overhead"]) == 1.0 for r in flash)
    assert all("torch with CUDA is not installed" in r["note"] for r in fig3 if r["method"].startswith("sdpa"))
    summary = _rows(fake_gpu.out / "validation" / "validation.csv")
    scaling_summary = next(r for r in summary if r["source"] == "io_scaling")
    assert float(scaling_summary["mape_percent"]) == pytest.approx(100 * 0.1 / 1.1)


def test_bench_table_without_torch(fake_gpu, capsys):
    cli.run_module("experiments.bench", "bench", fake_gpu)
    rows = _rows(fake_gpu.out / "bench" / "bench.csv")
    assert {r["kernel"] for r in rows} >= {"standard", "fa1", "fa2", "fa2 + backward (deterministic)"}
    assert all(float(r["ms"]) == 2.0 and r["version"].startswith("v") for r in rows)
    assert "kernel (version)" in capsys.readouterr().out
