"""experiments.validation on hand-made results folders: errors per level x kernel, the l1_hit_rate
and zero rules, the levels experiment's development/validation split, and power-law exponents.

Every CSV here is written by ``write_rows`` into a temporary results folder, so each number the
validation prints can be worked out by hand.
"""
import math

import numpy as np
import pytest

from experiments import validation
from experiments.common.context import RunContext
from experiments.common.results import write_rows

SM_L2 = "ncu: SM<->L2 sectors x 32"


def _write(out, name, rows):
    write_rows(out / name / f"{name}.csv", rows, {"experiment": name, "device": "test"})


def _run(out):
    return validation.run(RunContext(device="cpu", quick=True, out=out, command="test"))


def _summary(rows, **labels):
    found = [r for r in rows if r["row"] == "summary" and all(r[k] == v for k, v in labels.items())]
    assert len(found) == 1, (labels, found)
    return found[0]


def _level_row(quantity, kernel, measured, predicted, split="validation", **workload):
    return {"kernel": kernel, "quantity": quantity, "unit": "bytes", "measured": measured, "measured_by": "ncu",
            "predicted": predicted, "B": 1, "H": 2, "N": 256, "d": 64, "causal": False, "Br": 64, "Bc": 64,
            "split": split, **workload}


def test_errors_of_one_group_by_hand(tmp_path):
    measured, predicted = [100.0, 200.0, 400.0, 50.0], [110.0, 180.0, 400.0, 75.0]  # APE 10, 10, 0, 50 %
    rows = [{"method": "fa2", "passes": "fwd", "quantity": "SM<->L2 bytes", "unit": "bytes", "measured": m,
             "measured_by": SM_L2, "predicted": p} for m, p in zip(measured, predicted)]
    rows += [{"method": "fa2", "passes": "fwd", "quantity": "SM<->L2 bytes", "measured": None, "predicted": 5.0},
             {"method": "fa2", "passes": "fwd", "quantity": "SM<->L2 bytes", "measured": 5.0,
              "predicted": float("nan")}]
    _write(tmp_path, "l2_effect", rows)
    out = _run(tmp_path)
    group = _summary(out, scope="group", source="l2_effect")
    assert (group["level"], group["kernel"], group["pairs"], group["skipped_zero"]) == ("sm_l2_bytes", "fa2 fwd", 4, 0)
    assert group["mape_percent"] == pytest.approx(17.5)
    assert group["median_ape_percent"] == pytest.approx(10.0)
    assert group["max_ape_percent"] == pytest.approx(50.0)
    assert group["within_10_percent"] == 3
    assert group["correlation"] == pytest.approx(np.corrcoef(measured, predicted)[0, 1])
    assert math.isnan(group["mae_points"])
    assert _summary(out, scope="overall", source="all")["pairs"] == 4
    assert len([r for r in out if r["row"] == "pair"]) == 4


def test_kernel_names_and_levels_across_experiments(tmp_path):
    _write(tmp_path, "io_scaling", [
        {"method": "fa1", "passes": "fwd", "quantity": "HBM read+write", "measured": 100.0, "measured_by": SM_L2,
         "predicted": 120.0}])
    _write(tmp_path, "fig2_left", [
        {"method": "fa1", "passes": "fwd", "quantity": "HBM read+write (SM<->L2)", "measured": 100.0,
         "measured_by": SM_L2, "predicted": 80.0},
        {"method": "flash", "quantity": "HBM read+write (DRAM)", "measured": 10.0,
         "measured_by": "ncu: dram__bytes_read+write", "predicted": 11.0}])
    _write(tmp_path, "runtime", [
        {"implementation": "ours fa2", "passes": "fwd_bwd", "quantity": "runtime fwd_bwd", "unit": "ms",
         "measured": 2.0, "measured_by": "CUDA events, median of 10", "predicted": 1.0}])
    _write(tmp_path, "other", [{"quantity": "x", "measured": 1.0, "predicted": 1.0}])
    out = _run(tmp_path)
    kernels = {(r["source"], r["kernel"], r["level"]) for r in out if r["row"] == "summary" and r["scope"] == "group"}
    assert kernels == {("io_scaling", "fa1 fwd", "sm_l2_bytes"), ("fig2_left", "fa1 fwd", "sm_l2_bytes"),
                       ("fig2_left", "flash", "dram_bytes"), ("runtime", "fa2 fwd_bwd", "time_s"),
                       ("other", "all", "x")}
    across = _summary(out, scope="level x kernel", level="sm_l2_bytes", kernel="fa1 fwd")
    assert across["pairs"] == 2 and across["mape_percent"] == pytest.approx(20.0)
    assert validation.kernel_of({"kernel": "flash_backward_tc", "method": "fa2", "passes": "fwd"}) \
        == "flash_backward_tc"


def test_l1_hit_rate_in_points_and_zero_measured_pairs_skipped(tmp_path):
    _write(tmp_path, "levels", [
        {**_level_row("l1_hit_rate", "flash_forward_tc", 0.0, 0.1), "unit": "fraction"},
        {**_level_row("l1_hit_rate", "flash_forward_tc", 0.5, 0.2), "unit": "fraction"},
        _level_row("local_bytes", "flash_forward_tc", 0.0, 64.0),
        _level_row("local_bytes", "flash_forward_tc", 100.0, 110.0)])
    out = _run(tmp_path)
    hit = _summary(out, scope="group", quantity="l1_hit_rate")
    assert hit["pairs"] == 2 and hit["skipped_zero"] == 0
    assert hit["mae_points"] == pytest.approx((10 + 30) / 2)
    assert math.isnan(hit["mape_percent"]) and hit["within_10_percent"] is None
    local = _summary(out, scope="group", quantity="local_bytes")
    assert (local["pairs"], local["skipped_zero"], local["within_10_percent"]) == (2, 1, 1)
    assert local["mape_percent"] == pytest.approx(10.0) and local["max_ape_percent"] == pytest.approx(10.0)
    overall = _summary(out, scope="overall", source="all")
    assert (overall["pairs"], overall["skipped_zero"]) == (4, 1)
    assert overall["mape_percent"] == pytest.approx(10.0) and overall["mae_points"] == pytest.approx(20.0)
    percent = validation.summarize_pairs([validation.Pair("levels", "l1_hit_rate", "%", "l1_hit_rate", "k", "",
                                                          "validation", 50.0, 40.0)])
    assert percent.mae_points == pytest.approx(10.0)


def test_development_rows_are_summarised_apart(tmp_path):
    _write(tmp_path, "levels", [
        _level_row("sm_l2_read_bytes", "flash_forward_tc", 100.0, 110.0, split="validation"),
        _level_row("sm_l2_read_bytes", "flash_forward_tc", 100.0, 130.0, split="validation"),
        _level_row("sm_l2_read_bytes", "flash_forward_tc", 100.0, 101.0, split="development"),
        _level_row("dram_read_bytes", "flash_forward_tc", 100.0, 150.0, split="development")])
    out = _run(tmp_path)
    held_out = _summary(out, scope="group", quantity="sm_l2_read_bytes", split="validation")
    assert held_out["pairs"] == 2 and held_out["mape_percent"] == pytest.approx(20.0)
    assert _summary(out, scope="overall", source="all")["pairs"] == 2
    assert _summary(out, scope="level x kernel", level="sm_l2_read_bytes")["pairs"] == 2
    assert not [r for r in out if r["row"] == "summary" and r["scope"] == "level x kernel"
                and r["level"] == "dram_read_bytes"]
    dev = _summary(out, scope="group", quantity="sm_l2_read_bytes", split="development")
    assert dev["pairs"] == 1 and dev["mape_percent"] == pytest.approx(1.0)
    dev_all = _summary(out, scope="overall", split="development")
    assert dev_all["source"] == "levels" and dev_all["pairs"] == 2 and dev_all["mape_percent"] == pytest.approx(25.5)
    assert {r["split"] for r in out if r["row"] == "pair"} == {"validation", "development"}


def test_exact_power_law_has_a_tiny_interval():
    n = np.array([256, 512, 1024, 2048])
    fit = validation.fit_power_law(n, 3.0 * n**2)
    assert fit.points == 4 and fit.exponent == pytest.approx(2.0, abs=1e-12)
    assert fit.high - fit.low < 1e-9 and fit.contains(2.0) and not fit.contains(2.001)
    assert validation.fit_power_law([1, 2, 2], [1, 4, 4]) is None  # two distinct sizes
    assert validation.fit_power_law([1, 2, 3], [1, 0, 9]) is None
    assert validation.fit_power_law([1, 2, 3], [1, math.nan, 9]) is None


def test_interval_covers_the_true_exponent_about_95_percent_of_the_time():
    rng = np.random.default_rng(7)
    m = np.array([4096, 8192, 16384, 32768, 65536])
    fits = [validation.fit_power_law(m, 5e9 / m * rng.lognormal(0.0, 0.1, m.size)) for _ in range(400)]
    covered = np.mean([f.contains(-1.0) for f in fits])
    assert 0.91 <= covered <= 0.99
    assert all(f.low < f.exponent < f.high for f in fits)


def _io_row(sweep, method, n, d, m, measured, predicted, leading=None, measured_by=SM_L2):
    return {"sweep": sweep, "method": method, "passes": "fwd", "B": 1, "H": 16, "N": n, "d": d, "M_elements": m,
            "quantity": "HBM read+write", "unit": "bytes", "measured": measured, "measured_by": measured_by,
            "predicted": predicted, "theorem2_bytes": leading}


def test_exponents_from_io_scaling_sweeps(tmp_path):
    rng = np.random.default_rng(3)
    ns = [256, 512, 1024, 2048, 4096, 8192]
    rows = [_io_row("N", "fa1", n, 64, 16384, 3.0 * n**2, 3.0 * n**2 + 1e3 * n, 2.9 * n**2) for n in ns]
    rows += [_io_row("M", "fa1", 2048, 64, m, 1e12 / m * rng.lognormal(0, 0.05), 1e12 / m, 1e12 / m)
             for m in (4096, 8192, 16384, 32768)]
    rows += [_io_row("d", "standard", 2048, d, 2112, 1e6 * (5 + d / 20), 1e6 * (5 + d / 20)) for d in (16, 32, 64)]
    rows += [_io_row("M", "fa2_fma", 2048, 64, m, v, 1e12 / m, measured_by=SM_L2 if v else "")
             for m, v in ((4096, 2e8), (16384, 5e7), (65536, None))]
    rows += [_io_row("d", "fa1", 2048, d, 16384, 1.0 * d**2, 1.0 * d**2) for d in (32, 64)]  # two sizes: no fit
    _write(tmp_path, "io_scaling", rows)
    out = [r for r in _run(tmp_path) if r["row"] == "exponent"]
    by = {(r["kernel"], r["sweep"], r["fit_range"]): r for r in out}
    assert set(by) == {("fa1 fwd", "N", "all"), ("fa1 fwd", "N", "upper half"), ("fa1 fwd", "M", "all"),
                       ("standard fwd", "d", "all"), ("fa2_fma fwd", "M", "all")}
    n_all = by["fa1 fwd", "N", "all"]
    assert n_all["exponent_measured"] == pytest.approx(2.0) and n_all["theorem_exponent"] == 2.0
    assert n_all["theorem_inside"] is True and n_all["exponent_leading_order"] == pytest.approx(2.0)
    assert n_all["exponent_predicted"] < 2.0 and n_all["predicted_inside"] is False  # the 1e3 N term
    assert (n_all["points"], n_all["x_min"], n_all["x_max"], n_all["fixed"]) == (6, 256, 8192, "B=1 H=16 d=64")
    upper = by["fa1 fwd", "N", "upper half"]
    assert (upper["points"], upper["x_min"]) == (3, 2048)
    assert abs(upper["exponent_predicted"] - 2) < abs(n_all["exponent_predicted"] - 2)
    m_fit = by["fa1 fwd", "M", "all"]
    assert m_fit["theorem_exponent"] == -1.0 and m_fit["theorem_inside"] is True
    assert m_fit["exponent_measured_low"] < -1.0 < m_fit["exponent_measured_high"]
    standard_d = by["standard fwd", "d", "all"]
    assert standard_d["theorem_exponent"] is None and "no single power of d" in standard_d["note"]
    fa2_m = by["fa2_fma fwd", "M", "all"]
    assert fa2_m["exponent_measured"] is None and fa2_m["exponent_predicted"] == pytest.approx(-1.0)
    assert "measured at 2 sizes, fewer than 3" in fa2_m["note"] and "M <= 4 d^2" in fa2_m["note"]


def test_theorem_outside_the_interval_is_said(tmp_path):
    ns = [512, 1024, 2048, 4096]
    _write(tmp_path, "io_scaling", [_io_row("N", "fa1", n, 64, 16384, 1.0 * n**1.5, 1.0 * n**1.5) for n in ns])
    (row,) = [r for r in _run(tmp_path) if r["row"] == "exponent"]
    assert row["theorem_inside"] is False and row["predicted_inside"] is True
    assert row["note"].startswith("theorem's 2 outside the measured interval; the model's count gives 1.500")


def test_exponents_from_a_levels_sweep(tmp_path):
    rows = []
    for n in (256, 512, 1024):
        rows += [_level_row("sm_l2_read_bytes", "flash_backward_tc", 7.0 * n**2, 7.0 * n**2, sweep="N", N=n),
                 _level_row("dram_read_bytes", "flash_backward_tc", 5.0 * n, 5.0 * n, sweep="N", N=n),
                 {**_level_row("l1_hit_rate", "flash_backward_tc", 0.3, 0.3, sweep="N", N=n), "unit": "fraction"}]
    rows.append(_level_row("sm_l2_read_bytes", "flash_backward_tc", 1.0, 1.0))  # no sweep: not fitted
    _write(tmp_path, "levels", rows)
    out = {r["quantity"]: r for r in _run(tmp_path) if r["row"] == "exponent"}
    assert set(out) == {"sm_l2_read_bytes", "dram_read_bytes"}
    assert out["sm_l2_read_bytes"]["theorem"].startswith("Theorem 5") and out["sm_l2_read_bytes"]["theorem_inside"]
    assert out["dram_read_bytes"]["exponent_measured"] == pytest.approx(1.0)
    assert out["dram_read_bytes"]["theorem_exponent"] is None


def test_empty_folder_and_plot(tmp_path):
    rows = _run(tmp_path)
    overall = _summary(rows, scope="overall")
    assert overall["pairs"] == 0 and "no measured/predicted pairs" in overall["note"]
    validation.plot(rows, tmp_path / "empty.png")
    _write(tmp_path, "io_scaling", [_io_row("N", "fa1", n, 64, 16384, 2.0 * n**2, 2.1 * n**2)
                                    for n in (256, 512, 1024)])
    rows = _run(tmp_path)
    validation.plot(rows, tmp_path / "full.png")
    assert (tmp_path / "full.png").read_bytes()[:4] == b"\x89PNG"
