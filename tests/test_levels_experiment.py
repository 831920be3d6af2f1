"""The levels experiment's bookkeeping: ncu readings to Levels, kernels to algorithms, and the
configurations ``measure`` accepts."""
import pytest

from experiments.common.cases import Case
from experiments.levels import (CASE_OF_ALGORITHM, case_for, measured_levels, split_by_algorithm,
                               split_of)
from simulator import Workload


def _kernel(name, **values):
    return {"name": name, **values}


def test_measured_levels_reads_the_sms_side_and_sums_kernels():
    a = _kernel("a", xbar_ld_sectors=10, xbar_st_sectors=2, xbar_red_sectors=3, dram_read_bytes=100,
                dram_write_bytes=50, l1_ld_sectors=20, l1_ld_hit_sectors=5, local_ld_sectors=1,
                local_st_sectors=1, smem_ld_wavefronts=7, smem_st_wavefronts=1, gpu_time_ns=2000,
                l2_read_sectors=8)                      # the L2 slices' count is not SM<->L2
    b = _kernel("b", xbar_ld_sectors=1, l1_ld_sectors=20, gpu_time_ns=1000)
    levels = measured_levels([a, b])
    assert levels.sm_l2_read_bytes == 32 * 11 and levels.sm_l2_write_bytes == 32 * 5
    assert levels.l1_hit_rate == pytest.approx(5 / 40)
    assert levels.local_bytes == 64 and levels.smem_wavefronts == 8
    assert levels.time_s == pytest.approx(3e-6) and levels.dram_read_bytes == 100


def test_kernels_are_split_by_the_plans_launches():
    case = Case("fa2", "fwd_bwd", 1, 2, 256, 64)
    kernels = [_kernel(n) for n in ("forward", "row_dot", "backward")]  # 1 + (preprocess, main)
    split = split_by_algorithm(case, kernels)
    assert [k["name"] for k in split["flash_forward_tc"]] == ["forward"]
    assert [k["name"] for k in split["flash_backward_tc"]] == ["row_dot", "backward"]
    with pytest.raises(ValueError, match="ncu saw 2 kernels"):
        split_by_algorithm(case, kernels[:2])


def test_measure_says_which_configurations_it_takes():
    w = Workload(1, 2, 256, 256, 64, causal=True)
    for algorithm, (method, passes, deterministic) in CASE_OF_ALGORITHM.items():
        case = case_for(algorithm, w)
        assert (case.method, case.passes, case.deterministic, case.causal) == (method, passes, deterministic, True)
        assert algorithm in case.simulator_algorithms()
    with pytest.raises(ValueError, match="N_q"):
        case_for("flash_forward_tc", Workload(1, 1, 128, 256, 64))
    with pytest.raises(ValueError, match="dtype_bytes=4"):
        case_for("flash_forward_tc", Workload(1, 1, 128, 128, 64, dtype_bytes=2))
    with pytest.raises(ValueError, match="unknown algorithm"):
        case_for("flash_forward_v9", w)


def test_cpu_mode_predicts_a_gpu_runs_counters_again(tmp_path):
    from experiments import levels
    from experiments.common.context import RunContext
    from experiments.common.results import write_rows

    case = levels.DEVELOPMENT[0]                                  # fa2 fwd_bwd: 1 + 2 launches
    kernels = [{"case": case.label, "algorithm": a, "launch": i, "name": f"k{i}",
                "xbar_ld_sectors": 1000.0 * (i + 1), "gpu_time_ns": 1e6}
               for i, a in enumerate(("flash_forward_tc", "flash_backward_tc", "flash_backward_tc"))]
    write_rows(tmp_path / "levels" / "levels_kernels.csv", kernels,
               {"device": "NVIDIA H200", "date": "2026-12-01", "commit": "abc1234"})
    ctx = RunContext(device="cpu", quick=True, out=tmp_path, command="test")
    rows = levels.run(ctx)
    read = {r["kernel"]: r for r in rows if r["quantity"] == "sm_l2_read_bytes"}
    assert read["flash_forward_tc"]["measured"] == 32 * 1000
    assert read["flash_backward_tc"]["measured"] == 32 * (2000 + 3000)
    assert read["flash_forward_tc"]["predicted"] > 0
    assert {r["split"] for r in rows} == {"development"}
    assert {r["measured_commit"] for r in rows} == {"abc1234"}


def test_each_launch_is_read_beside_its_own_prediction(tmp_path):
    from experiments import levels
    from experiments.common import model
    from experiments.common.results import write_rows

    case = levels.DEVELOPMENT[0]                                  # fa2 fwd_bwd: 1 + 2 launches
    algorithms = ("flash_forward_tc", "flash_backward_tc", "flash_backward_tc")
    kernels = [{"case": case.label, "algorithm": a, "launch": launch,
                "name": f"mod::k{i}[v1,abc](Array<float>)", "xbar_ld_sectors": 1000.0 * (i + 1),
                "gpu_time_ns": 1e6}
               for i, (a, launch) in enumerate(zip(algorithms, (0, 0, 1)))]
    write_rows(tmp_path / "k.csv", kernels, {"device": "NVIDIA H200", "date": "2026-12-01",
                                             "commit": "abc1234"})
    rows = levels.per_launch(tmp_path / "k.csv")
    read = [r for r in rows if r["quantity"] == "sm_l2_read_bytes"]
    assert [r["measured"] for r in read] == [32000.0, 64000.0, 96000.0]
    assert [r["kernel"] for r in read] == ["k0", "k1", "k2"]
    assert {r["measured_commit"] for r in rows} == {"abc1234"}
    # the launches' predictions add up to the algorithm's, and name the plan's phases
    for report, algorithm in zip(model.reports(case), case.simulator_algorithms()):
        mine = [r for r in read if r["algorithm"] == algorithm]
        assert sum(r["predicted"] for r in mine) == pytest.approx(report.levels.sm_l2_read_bytes)
        assert [r["phase"] for r in mine] == [p.name for p in report.phases]
    assert "k2" in levels.format_per_launch(rows)
    times = {r["kernel"]: r for r in rows if r["quantity"] == "time_s"}
    summary = {e["kernel"]: e for e in levels.per_kernel_errors(rows)}
    for name, r in times.items():                               # one launch a kernel name here
        error = 100 * (r["predicted"] - r["measured"]) / r["measured"]
        assert summary[name]["launches"] == 1
        assert summary[name]["median"] == pytest.approx(error) == summary[name]["min"]
        assert summary[name]["mape"] == pytest.approx(abs(error))
    assert {r["predicted_for"] for r in rows} == {"H200_MEASURED"}
    kernels[2]["launch"] = 2                                      # a launch the plan lacks
    write_rows(tmp_path / "k.csv", kernels, {"device": "NVIDIA H200"})
    with pytest.raises(ValueError, match="launch 2, but the model's plan has 2 launches"):
        levels.per_launch(tmp_path / "k.csv")
    # measured on an H100: predicted for its datasheet (50 MB of L2) and timed by its own
    # calibrate rates (simulator/rates_h100.csv), by repredict as by per_launch
    kernels[2]["launch"] = 1
    write_rows(tmp_path / "k.csv", kernels, {"device": "NVIDIA H100 80GB HBM3"})
    h100 = levels.per_launch(tmp_path / "k.csv")
    assert {r["predicted_for"] for r in h100} == {"H100_SXM"}
    h100_times = [r["predicted"] for r in h100 if r["quantity"] == "time_s"]
    assert all(t > 0 for t in h100_times) and h100_times != [r["predicted"] for r in rows
                                                              if r["quantity"] == "time_s"]
    again = levels.repredict(tmp_path / "k.csv")
    assert {r["predicted_for"] for r in again} == {"H100_SXM"}
    for report, algorithm in zip(model.reports(case, gpu="H100_SXM"), case.simulator_algorithms()):
        time_row = next(r for r in again if r["kernel"] == algorithm and r["quantity"] == "time_s")
        assert time_row["predicted"] == pytest.approx(report.levels.time_s)
    # a GPU without a datasheet: predicted as the H200, as model.card had it on that GPU
    write_rows(tmp_path / "k.csv", kernels, {"device": "NVIDIA A40"})
    assert {r["predicted_for"] for r in levels.per_launch(tmp_path / "k.csv")} == {"H200_MEASURED"}


def test_a_case_labelled_with_a_since_changed_default_tiling_keeps_its_split():
    assert split_of(Case.from_label("fa2_fp16x3/fwd/B2H16N2048d128")) == "fp16x3"
    assert split_of(Case.from_label("fa2_fp16x3/fwd/B2H16N2048d128/Br80Bc32")) == "fp16x3"
    assert split_of(Case.from_label("fa2_fp16x3/fwd/B2H16N2048d96/Br80Bc32")) == "other"


def test_a_split_cut_after_its_ncu_run_is_finished_from_its_folder(tmp_path):
    """``finish_alone`` writes, from a committed ncu folder (the half split's, measured on the
    H200 in the call whose deadline cut validation_5's rows, which were made this way), the
    same per-kernel counters as the split's own CSV, under the metadata it is given."""
    import shutil
    from pathlib import Path

    from experiments.common.metadata import METADATA_COLUMNS
    from experiments.common.results import read_rows
    from experiments.levels import SPLITS, finish_alone

    run = Path(__file__).parents[1] / "results" / "h200" / "levels" / "main_560a1f9" / "half"
    shutil.copytree(run / "ncu", tmp_path / "ncu")
    committed = read_rows(run / "levels_kernels_half.csv")
    metadata = {k: committed[0][k] for k in METADATA_COLUMNS}
    metadata["command"] = "a test"
    finish_alone(SPLITS["half"], "half", tmp_path, "out.csv", metadata)
    written = read_rows(tmp_path / "out.csv")
    assert len(written) == len(committed) == 16
    for new, old in zip(written, committed):
        assert new["command"] == "a test" and new["device"] == "NVIDIA H200"
        assert {k: v for k, v in new.items() if k != "command"} == {k: v for k, v in old.items() if k != "command"}
