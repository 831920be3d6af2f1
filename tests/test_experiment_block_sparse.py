"""The block_sparse experiment in cpu mode (count_traffic under the CUDA simulator against
simulator.predict and the closed forms on Workloads with block_mask), its masks, and the Case
fields and helpers it rests on: block masks in labels, JSON, the API's arguments, the kept
scores, the kernels' configs, the float64 check with rows that keep nothing, the
time_vs_fraction arithmetic.

One ``run block_sparse --quick --device cpu`` (about 15 s of CPU, in this process: the tests
run under the CUDA simulator) feeds the CSV tests."""
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from experiments.common.cases import Case, visible_scores
from experiments.common.timing import Timing


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    from experiments import cli
    from experiments.common.context import RunContext
    from experiments.common.results import read_rows

    ctx = RunContext("cpu", True, tmp_path_factory.mktemp("results"), "pytest")
    csv_path = cli.run_module("experiments.block_sparse", "block_sparse", ctx)
    png = csv_path.with_suffix(".png")
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000
    assert not ctx.failures
    return read_rows(csv_path)


def _f(row, key):
    return float(row[key])


def _sweep(rows, passes):
    """The sparse rows of ``passes`` by s, and its dense row."""
    sparse = sorted((r for r in rows if r["passes"] == passes and r["sweep"] == "sparse"), key=lambda r: _f(r, "s"))
    dense = [r for r in rows if r["passes"] == passes and r["sweep"] == "dense"]
    assert len(dense) == 1
    return sparse, dense[0]


def test_the_csv_has_the_columns_and_rows(rows):
    assert len(rows) == 8     # quick: s = 1/4, 1/2, 1 and dense; fwd and fwd_bwd; fp32
    for column in ("s_requested", "s", "kept_blocks", "blocks", "empty_row_blocks", "block_q", "block_k",
                   "flops", "sparse_flops", "measured", "predicted", "predicted_elements", "form_elements",
                   "prop4_bytes", "M_elements", "predicted_time_ms", "predicted_time_by", "label", "note"):
        assert column in rows[0], column
    for passes in ("fwd", "fwd_bwd"):
        sparse, dense = _sweep(rows, passes)
        assert [r["s_requested"] for r in sparse] == ["0.25", "0.5", "1.0"]
        assert [int(r["kept_blocks"]) for r in sparse] == [1, 2, 4] and {r["blocks"] for r in sparse} == {"4"}
        assert [_f(r, "s") for r in sparse] == [0.25, 0.5, 1.0] and _f(dense, "s") == 1.0
        assert dense["s_requested"] == dense["kept_blocks"] == ""
        assert [int(r["empty_row_blocks"]) for r in sparse] == [1, 0, 0]     # 1 block of 2 rows
        for r in sparse:
            assert _f(r, "sparse_flops") == pytest.approx(_f(r, "s") * _f(r, "flops"))
            assert r["label"].split("/")[-1].startswith("blocks16x16_")


def test_counted_bytes_equal_the_prediction_and_the_closed_forms(rows):
    for row in rows:
        assert row["measured_by"].startswith("count_traffic"), row["note"]
        for part in ("", "_read", "_write", "_kv_read"):
            assert _f(row, f"measured{part}") == _f(row, f"predicted{part}") > 0, (part, row["label"])
        if row["sweep"] == "sparse":   # fp32: the closed forms are the tiled count exactly
            assert _f(row, "form_elements") == _f(row, "predicted_elements") == _f(row, "measured") / 4
        assert "no GPU" in row["note"] and not row.get("time_ms")


def test_traffic_rises_linearly_with_s_and_all_blocks_are_dense(rows):
    for passes in ("fwd", "fwd_bwd"):
        sparse, dense = _sweep(rows, passes)
        m = [_f(r, "measured") for r in sparse]
        assert m[0] < m[1] < m[2] == _f(dense, "measured"), m
        assert m[2] - m[1] == 2 * (m[1] - m[0])          # s = 1/4, 1/2, 1: bytes = a + b s
    sparse, dense = _sweep(rows, "fwd")
    for r in sparse:   # the forward reads each kept block's K and V rows once per row block
        assert _f(r, "measured_kv_read") == _f(r, "s") * _f(dense, "measured_kv_read")


def test_proposition4_line_shares_the_intercept_and_doubles_the_slope(rows):
    """Br = 16 > d = 8: Prop. 4's 2 N^2 d / min(M / 4d, d) with M = 4 d Br is twice the exact
    K/V term 2 N^2 d / Br; Q, O and L (2 N d + N) are the same."""
    sparse, dense = _sweep(rows, "fwd")
    for r in sparse + [dense]:
        N, d, br, heads = int(r["N"]), int(r["d"]), int(r["Br"]), int(r["B"]) * int(r["H"])
        assert int(r["M_elements"]) == 4 * d * br
        intercept = 4 * heads * (2 * N * d + N)
        assert _f(r, "prop4_bytes") - intercept == pytest.approx(br / min(br, d) * (_f(r, "predicted") - intercept))
    assert all(r["prop4_bytes"] == "" for r in _sweep(rows, "fwd_bwd")[0])


@pytest.mark.parametrize("blocks", [1, 2, 4, 7, 32])
@pytest.mark.parametrize("fraction", [1 / 64, 1 / 16, 0.3, 0.5, 1.0])
def test_random_block_masks_keep_exactly_their_share_in_balanced_rows_and_columns(blocks, fraction):
    from experiments.block_sparse import random_block_mask

    on = random_block_mask(blocks, fraction)
    kept = max(1, round(fraction * blocks * blocks))
    assert on.shape == (blocks, blocks) and on.dtype == bool and on.sum() == kept
    for counts in (on.sum(axis=0), on.sum(axis=1)):
        assert set(counts) <= {kept // blocks, -(-kept // blocks)}, counts
    assert np.array_equal(on, random_block_mask(blocks, fraction))          # seeded
    denser = random_block_mask(blocks, min(1.0, 2 * fraction))
    assert not (on & ~denser).any()                                          # one seed: nested


def test_random_block_masks_depend_on_the_seed_and_refuse_empty_fractions():
    from experiments.block_sparse import random_block_mask

    assert not np.array_equal(random_block_mask(32, 0.25, seed=0), random_block_mask(32, 0.25, seed=1))
    assert random_block_mask(32, 1.0).all()
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="fraction"):
            random_block_mask(4, bad)


@pytest.mark.parametrize("N, size, causal, window", [(64, (16, 16), False, None), (50, (16, 32), True, None),
                                                     (45, (32, 16), True, (9, 0)), (40, (16, 8), False, (5, 3))])
def test_visible_scores_of_a_block_mask_match_the_reference_mask(N, size, causal, window):
    from numba_flash.reference import visible

    on = np.random.default_rng(3).random((-(-N // size[0]), -(-N // size[1]))) < 0.5
    brute = visible(N, N, causal=causal, window=window, diagonal=0 if causal or window else None,
                    block_mask=on, block_size=size)
    assert visible_scores(N, causal, window, on, size) == int(brute.sum())
    assert visible_scores(N, causal, window, np.ones_like(on), size) == visible_scores(N, causal, window)


def test_case_labels_json_and_api_arguments_carry_the_block_mask():
    on = np.array([[True, False, True], [False, False, True], [True, True, False]])
    case = Case("fa2", "fwd_bwd", 1, 2, 40, 8, tiling=(16, 16), dtype="float16", block_mask=on, block_size=(16, 16))
    assert case.label == "fa2/fwd_bwd/B1H2N40d8/Br16Bc16/float16/blocks16x16_a700"   # 101 001 110, padded
    assert Case.from_label(case.label) == case
    assert Case.from_json(json.loads(json.dumps(case.to_json()))) == case      # as the ncu child gets it
    assert case == replace(case, block_mask=on.tolist()) and hash(case) == hash(replace(case, block_mask=on.tolist()))
    assert case.block_mask == tuple(map(tuple, on.tolist())) and "block_mask" not in repr(case)
    kwargs = case.mask_kwargs()
    assert np.array_equal(kwargs["block_mask"], on) and kwargs["block_size"] == (16, 16)
    assert case.block_fraction == 5 / 9
    assert case.band_flops == 3.5 * 4 * 8 * 2 * visible_scores(40, False, None, on, (16, 16))
    assert case.flops == Case("fa2", "fwd_bwd", 1, 2, 40, 8).flops          # the benchmark convention
    default = Case("fa2", "fwd", 1, 1, 256, 8, block_mask=np.ones((2, 2), bool))
    assert default.block_size == (128, 128) and "block_mask" not in Case("fa2", "fwd", 1, 1, 256, 8).mask_kwargs()


@pytest.mark.parametrize("kwargs,match", [
    (dict(method="fa2_fma"), "method 'fa2'"),
    (dict(deterministic=True), "not deterministic"),
    (dict(block_mask=np.ones((2, 3), bool)), "must be \\(2, 2\\) booleans"),
    (dict(block_mask=np.ones((2, 2), np.int8)), "booleans"),
    (dict(block_size=(16, 0)), "positive ints"),
    (dict(block_mask=None), "give it with a block_mask"),
])
def test_case_refuses_block_masks_the_kernels_do_not_run(kwargs, match):
    base = dict(method="fa2", passes="fwd_bwd", B=1, H=1, N=64, d=8, block_mask=np.ones((2, 2), bool),
                block_size=(32, 32))
    with pytest.raises(ValueError, match=match):
        Case(**{**base, **kwargs})


def test_block_sparse_case_with_an_empty_row_runs_and_checks_against_the_reference():
    """run_case and the NumPy reference check take the block mask through; the row block that
    keeps nothing gives o = 0 and no gradient (the torch check needs a GPU)."""
    from experiments.common.cases import host_inputs, run_case
    from experiments.common.correctness import _numpy_errors

    on = np.array([[True, False], [False, False]])
    case = Case("fa2", "fwd_bwd", 1, 1, 32, 8, tiling=(16, 16), block_mask=on, block_size=(16, 16))
    x = host_inputs(case, seed=2)
    out = run_case(case, x)
    assert np.all(out["o"][:, :, 16:] == 0) and np.all(out["dq"][:, :, 16:] == 0)
    assert np.all(out["dk"][:, :, 16:] == 0)           # no kept block reads keys 16..31
    assert max(_numpy_errors(case, x, out).values()) < 1e-5
    dense = _numpy_errors(replace(case, block_mask=None, block_size=None), x, out)
    assert max(dense.values()) > 1e-2          # the mask matters: the dense reference differs


def test_time_vs_fraction_is_time_over_s_times_dense(monkeypatch):
    """_add_times on made-up timings and ncu kernel times: each row against the dense case of
    its dtype and passes; the target is time <= 1.1 s x dense."""
    from experiments import block_sparse
    from experiments.common.context import RunContext
    from experiments.common.traffic import MeasuredTraffic

    cases = [c for _, c in block_sparse.plan(RunContext("cpu", True, Path("."), ""))]
    s = {c: c.block_fraction or 1.0 for c in cases}
    slow = {c: 1.5 if s[c] == 0.25 else 1.0 for c in cases}        # s = 1/4 misses the target
    made_up = {c: (10.0 if c.passes == "fwd_bwd" else 4.0) * s[c] * slow[c] for c in cases}
    monkeypatch.setattr(block_sparse, "timing_or_note", lambda case, ctx: (Timing(made_up[case], 0, 0, 10), 0.0))
    measured = {c: MeasuredTraffic(1.0, 1.0, "ncu", gpu_time_ms=0.5 * made_up[c] / slow[c]) for c in cases}
    rows = [{"s": s[c], "note": ""} for c in cases]
    block_sparse._add_times(RunContext("gpu", True, Path("."), ""), rows, cases, measured)
    for case, row in zip(cases, rows):
        dense = 10.0 if case.passes == "fwd_bwd" else 4.0
        assert row["dense_time_ms"] == dense and row["dense_kernel_time_ms"] == 0.5 * dense
        assert row["time_vs_fraction"] == pytest.approx(slow[case]), case.label
        assert row["meets_target"] == (slow[case] <= block_sparse.TARGET)
        assert row["excess_vs_dense"] == pytest.approx(s[case] * (slow[case] - 1))
        assert row["kernel_time_vs_fraction"] == pytest.approx(1.0)
        assert row["kernel_excess_vs_dense"] == pytest.approx(0.0, abs=1e-12)
        assert row["sparse_tflops"] == pytest.approx(case.band_flops / (made_up[case] * 1e-3) / 1e12)


def test_gpu_plan_builds_one_sparse_kernel_config_per_format_and_pass_and_predicts():
    """A block mask's block size is compile-time, its contents not: every s shares its
    (dtype, passes) config; the model takes the default tilings cut to the 128 x 128 blocks."""
    from experiments.block_sparse import plan
    from experiments.common import kernels, model
    from experiments.common.context import RunContext

    pairs = plan(RunContext("gpu", True, Path("."), ""))
    cases = [c for _, c in pairs]
    assert len(cases) == 16 and [s for s, _ in pairs[:4]] == [1 / 16, 1 / 4, 1.0, None]
    configs = {kernels.kernel_config(c) for c in cases}
    assert len(configs) == 8 and {c.block_size for c in configs} == {None, (128, 128)}
    sparse = [c for c in cases if c.block_mask is not None]
    assert {c.block_mask_array.shape for c in sparse} == {(32, 32)}
    for case in sparse[:3]:    # float16 fwd
        tiling = model.effective_tiling(case)
        assert 128 % tiling.Br == 0 and 128 % tiling.Bc == 0
        predicted = model.predicted_or_note(case)
        assert not isinstance(predicted, str), predicted
        assert predicted.tiled_elements == model.block_sparse_form_elements(case)


def test_rows_carry_the_run_metadata(rows):
    """(tests/test_experiments.py checks the other experiments' metadata the same way.)"""
    from experiments.common.metadata import METADATA_COLUMNS

    for row in rows:
        assert all(column in row for column in METADATA_COLUMNS)
        assert row["experiment"] == "block_sparse" and "no GPU" in row["device"]
        assert row["command"] == "pytest" and row["numpy"] and row["numba_cuda"] and row["python"]
