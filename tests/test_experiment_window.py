"""The window experiment in cpu mode (count_traffic under the CUDA simulator against
simulator.predict on Workloads with window / kv_heads), and the Case fields and helpers it
rests on: the band's scores and FLOPs, labels, what a Case refuses, the time_vs_band arithmetic.

One ``run window --quick --device cpu`` (about 10 s of CPU) feeds the CSV tests."""
import csv
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from experiments.common.cases import Case, band_flops, visible_scores
from experiments.common.timing import Timing

from .helpers import once_per_session

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """The CSV rows of the cpu-mode run, once per session (``once_per_session``)."""
    def run(out):
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-m", "experiments", "run", "window", "--quick", "--device",
                               "cpu", "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    out, _ = once_per_session(tmp_path_factory, "window_cpu_run", run)
    png = out / "window" / "window.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000
    with open(out / "window" / "window.csv", newline="") as f:
        return list(csv.DictReader(f))


def _f(row, key):
    return float(row[key])


def test_counted_bytes_equal_the_prediction(rows):
    assert len(rows) == 8     # quick: w = 4, 32, dense, MQA; fwd and fwd_bwd; fp32
    for row in rows:
        assert row["measured_by"].startswith("count_traffic"), row["note"]
        for part in ("", "_read", "_write", "_kv_read"):
            assert _f(row, f"measured{part}") == _f(row, f"predicted{part}") > 0, (part, row["label"])
        assert "no GPU" in row["note"] and not row.get("time_ms")


def test_bytes_fall_with_the_window(rows):
    for passes in ("fwd", "fwd_bwd"):
        sweep = sorted((r for r in rows if r["sweep"] == "window" and r["passes"] == passes),
                       key=lambda r: int(r["w"]))
        assert [int(r["w"]) for r in sweep] == [4, 32, 64]                # 64 = N: dense causal
        measured = [_f(r, "measured") for r in sweep]
        assert measured == sorted(measured) and measured[0] < measured[-1], measured
        fractions = [_f(r, "band_fraction") for r in sweep]
        assert fractions[-1] == 1.0 and fractions == sorted(fractions)
        # whole tiles on the band's edges: the tiles visited shrink less than the band
        assert all(_f(r, "forward_tile_fraction") >= _f(r, "band_fraction") for r in sweep)


def test_grouped_heads_read_fewer_kv_bytes_in_the_backward(rows):
    """The forward reads K/V once per query head (a block per Q tile of a query head), so MQA
    changes none of its bytes; the backward reads K, V once per K/V head and split (``kv_split``:
    at 4 K/V blocks on 132 SMs the model splits the whole group of 2), as predicted."""
    def row(sweep, passes):
        return next(r for r in rows if r["sweep"] == sweep and r["passes"] == passes
                    and (sweep == "gqa" or r["window_left"] == "-1"))

    dense, mqa = row("window", "fwd"), row("gqa", "fwd")
    assert mqa["kv_heads"] == "1" and dense["kv_heads"] == dense["H"] == "2"
    assert _f(mqa, "measured") == _f(dense, "measured")
    dense, mqa = row("window", "fwd_bwd"), row("gqa", "fwd_bwd")
    assert mqa["kv_split"] == "2" and not dense["kv_split"]
    assert _f(mqa, "measured_kv_read") == _f(dense, "measured_kv_read") == _f(mqa, "predicted_kv_read")
    assert _f(mqa, "split_copy_bytes") == 2 * 64 * 8 * 4 * (1 + 2 + 2 + 1)   # repeat, sums
    assert "repeat" not in mqa["note"]        # the CPU's repeat and sums run on the host


def test_visible_scores_and_band_flops_by_hand():
    N = 8
    assert visible_scores(N, True) == N * (N + 1) // 2
    assert visible_scores(N, False) == N * N
    assert visible_scores(N, True, (2, 0)) == 1 + 2 + 3 * 6          # rows 0, 1, then 3 keys each
    assert visible_scores(N, True, (N - 1, 0)) == visible_scores(N, True)
    assert visible_scores(N, False, (1, 1)) == 2 + 3 * 6 + 2
    assert visible_scores(N, False, (-1, 0)) == visible_scores(N, True)
    assert band_flops(2, 3, N, 16, "fwd", True, (2, 0)) == 4 * 16 * 2 * 3 * 21
    assert band_flops(2, 3, N, 16, "fwd_bwd", True, (2, 0)) == 3.5 * 4 * 16 * 2 * 3 * 21
    dense = Case("fa2", "fwd", 1, 2, N, 16, causal=True)
    windowed = replace(dense, window=(2, 0))
    assert windowed.flops == dense.flops                                 # the benchmark convention
    assert windowed.band_flops < dense.band_flops == 4 * 16 * 2 * N * (N + 1) / 2


def test_tile_scores_match_a_brute_force_count():
    from experiments.window import tile_scores

    for N, br, bc, w in ((64, 16, 16, 4), (50, 16, 8, 9), (37, 32, 16, None), (40, 16, 16, 40)):
        total = 0
        for r0 in range(0, N, br):
            rows = range(r0, min(N, r0 + br))
            seen = {c // bc for r in rows for c in range(N) if c <= r and (w is None or c >= r - w)}
            total += len(rows) * sum(min(bc, N - j * bc) for j in range(min(seen), max(seen) + 1))
        assert tile_scores(N, br, bc, None if w is None else (w, 0)) == total, (N, br, bc, w)


def test_case_labels_and_json_round_trip_the_band():
    case = Case("fa2", "fwd_bwd", 1, 16, 4096, 64, causal=True, dtype="float16", window=(128, 0), kv_heads=4)
    assert case.label == "fa2/fwd_bwd/B1H16N4096d64/causal/float16/window128_0/kv4"
    assert Case.from_label(case.label) == case
    assert Case.from_json({**case.to_json(), "window": [128, 0]}) == case
    both = Case("fa2", "fwd", 1, 2, 64, 8, window=(-1, 3))
    assert Case.from_label(both.label) == both
    assert case.kv_shape == (1, 4, 4096, 64) and case.shape == (1, 16, 4096, 64)
    assert case.mask_kwargs() == {"causal": True, "window": (128, 0)}
    assert Case("fa2", "fwd", 1, 2, 64, 8).mask_kwargs() == {"causal": False}
    # the same calls as no window / H_kv = H: the same case
    assert Case("fa2", "fwd", 1, 2, 64, 8, window=(-1, -1), kv_heads=2) == Case("fa2", "fwd", 1, 2, 64, 8)


@pytest.mark.parametrize("kwargs,match", [
    (dict(method="fa2_fma", window=(4, 0)), "method 'fa2'"),
    (dict(method="fa1", kv_heads=1), "method 'fa2'"),
    (dict(deterministic=True, kv_heads=1), "not deterministic"),
    (dict(kv_heads=3), "divide"),
    (dict(window=(4, 2), causal=True), "right side"),
    (dict(window=(-2, 0)), "ints >= -1"),
    (dict(window=(4,)), "left, right"),
])
def test_case_refuses_what_the_kernels_do_not_run(kwargs, match):
    base = dict(method="fa2", passes="fwd_bwd", B=1, H=4, N=64, d=8)
    with pytest.raises(ValueError, match=match):
        Case(**{**base, **kwargs})


def test_grouped_windowed_case_runs_and_checks_against_the_reference():
    """run_case and the NumPy reference check take window and kv_heads through (the torch check
    needs a GPU)."""
    from experiments.common.cases import host_inputs, run_case
    from experiments.common.correctness import _numpy_errors

    case = Case("fa2", "fwd_bwd", 1, 2, 32, 8, causal=True, tiling=(16, 16), window=(5, 0), kv_heads=1)
    x = host_inputs(case, seed=1)
    assert x["k"].shape == (1, 1, 32, 8) and x["q"].shape == (1, 2, 32, 8)
    out = run_case(case, x)
    assert out["dk"].shape == (1, 1, 32, 8)
    assert max(_numpy_errors(case, x, out).values()) < 1e-5
    dense = _numpy_errors(replace(case, window=None, kv_heads=None), x, out)
    assert max(dense.values()) > 1e-2          # the band matters: the dense reference differs


def test_time_vs_band_is_time_over_the_band_share_of_dense(monkeypatch):
    """_add_times on made-up timings and ncu kernel times: each row against the dense causal case
    of its dtype and passes; the target is time <= 1.1 x band fraction x dense, or, read the other
    way, time / dense - band fraction <= 0.1."""
    from experiments import window
    from experiments.common.context import RunContext
    from experiments.common.traffic import MeasuredTraffic

    pairs = [(s, c) for s, c in window.plan(RunContext("cpu", True, Path("."), "")) if c.dtype == "float32"]
    cases = [c for _, c in pairs]
    fraction = {c: visible_scores(c.N, True, c.window) / visible_scores(c.N, True) for c in cases}
    made_up = {c: (10.0 if c.passes == "fwd_bwd" else 4.0) * (fraction[c] * (1.2 if c.window == (4, 0) else 1.0))
               for c in cases}
    monkeypatch.setattr(window, "timing_or_note", lambda case, ctx: (Timing(made_up[case], 0, 0, 10), 0.0))
    kernel = {c: 0.5 * made_up[c] / (1.2 if c.window == (4, 0) else 1.0) for c in cases}
    measured = {c: MeasuredTraffic(1.0, 1.0, "ncu", gpu_time_ms=kernel[c]) for c in cases}
    rows = [{"band_fraction": fraction[c], "note": ""} for c in cases]
    window._add_times(RunContext("gpu", True, Path("."), ""), rows, cases, measured)
    for case, row in zip(cases, rows):
        expected = 1.2 if case.window == (4, 0) else 1.0
        dense = 10.0 if case.passes == "fwd_bwd" else 4.0
        assert row["time_vs_band"] == pytest.approx(expected), case.label
        assert row["meets_target"] == (expected <= window.TARGET)
        assert row["dense_time_ms"] == dense and row["dense_kernel_time_ms"] == 0.5 * dense
        assert row["excess_vs_dense"] == pytest.approx(fraction[case] * (expected - 1))
        assert row["kernel_time_ms"] == kernel[case]
        assert row["kernel_time_vs_band"] == pytest.approx(1.0)
        assert row["kernel_excess_vs_dense"] == pytest.approx(0.0, abs=1e-12)
        assert row["band_tflops"] == pytest.approx(case.band_flops / (made_up[case] * 1e-3) / 1e12)


def test_band_kernels_are_configs_of_their_own():
    """A window's sides and the group are compile-time: the warm-up names them (any w builds
    the same kernels: the band's offsets are runtime arguments)."""
    from experiments.common import kernels
    from experiments.common.context import RunContext
    from experiments.window import plan

    cases = [c for _, c in plan(RunContext("gpu", False, Path("."), ""))]
    configs = {kernels.kernel_config(c) for c in cases}
    for case in cases:
        config = kernels.kernel_config(case)
        assert config.window == case.window
        assert config.group == case.H // (case.kv_heads or case.H)
    assert {c.group for c in configs} >= {1, 4, 16}


def test_rows_carry_the_run_metadata(rows):
    """(tests/test_experiments.py checks the other experiments' metadata the same way.)"""
    from experiments.common.metadata import METADATA_COLUMNS

    for row in rows:
        assert all(column in row for column in METADATA_COLUMNS)
        assert row["experiment"] == "window" and "no GPU" in row["device"]
        assert row["command"].startswith("python -m experiments run window --quick --device cpu")
        assert row["numpy"] and row["numba_cuda"] and row["python"]
