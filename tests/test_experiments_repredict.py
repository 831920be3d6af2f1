"""CPU mode over a GPU run's CSV (runtime, fig2_middle, fig2_left, io_scaling, l2_effect;
experiments.common.repredict): the measurements kept as they were, the predictions made again by
the model as it is now for the GPU that measured them, the measurement's device, date and commit
in measured_* columns -- and a CSV without GPU measurements left to the normal CPU run."""
import pytest

from experiments.cli import run_module
from experiments.common import model
from experiments.common.cases import Case
from experiments.common.context import RunContext
from experiments.common.results import read_rows, write_rows
from experiments.common.timing import tflops

GPU = {"device": "NVIDIA H200", "date": "2026-12-01T00:00:00+00:00", "commit": "abc1234"}
STALE = 1234.5                          # the old model's prediction
SMALL = dict(B=1, H=2, N=128, d=64)


def _run(out, name: str, rows: list[dict], metadata: dict = GPU) -> list[dict]:
    """Write ``rows`` as ``name``'s CSV of a run on ``metadata``'s device, run the experiment in
    CPU mode as the CLI does (CSV and PNG) and read its CSV back."""
    write_rows(out / name / f"{name}.csv", rows, metadata)
    csv = run_module(f"experiments.{name}", name, RunContext(device="cpu", quick=True, out=out, command="test"))
    assert (out / name / f"{name}.png").stat().st_size > 10_000
    return read_rows(csv)


def _assert_measured_on_the_gpu(rows: list[dict]) -> None:
    for row in rows:
        assert (row["measured_device"], row["measured_date"], row["measured_commit"]) == tuple(GPU.values())
        assert "no GPU" in row["device"] and row["command"] == "test" and row["commit"] != GPU["commit"]


def test_runtime_predicts_a_gpu_runs_timings_again(tmp_path):
    ours = Case("fa2", "fwd", causal=True, **SMALL)
    half_backward = Case("fa2", "fwd_bwd", dtype="float16", **SMALL)
    common = {"H": 2, "N": 128, "d": 64, "B": 1, "unit": "ms", "measured_by": "CUDA events, median of 10"}
    rows = [{"implementation": "ours fa2", "passes": "fwd", "causal": True, "dtype": "float32", "flops": ours.flops,
             "quantity": "runtime fwd", "predicted": STALE, "predicted_tflops": 1.0, "measured": 0.0123456789,
             "tflops": 3.21, "max_rel_error": 1e-6, **common},
            {"implementation": "ours fa2", "passes": "fwd_bwd", "causal": False, "dtype": "float16",
             "flops": half_backward.flops, "quantity": "runtime fwd_bwd", "measured": 0.05, "model": "",
             **common},
            {"implementation": "torch SDPA MATH", "passes": "fwd", "causal": False, "dtype": "float32",
             "flops": ours.flops, "ms": 0.02, "tflops": 4.0, **SMALL, "unit": "ms"}]
    got = _run(tmp_path, "runtime", rows)
    now = model.predict_case(ours).time_s * 1e3
    assert float(got[0]["predicted"]) == now != STALE
    assert float(got[0]["predicted_tflops"]) == tflops(ours.flops, now)
    assert [r["measured"] for r in got] == ["0.0123456789", "0.05", ""]
    assert (got[0]["tflops"], got[0]["max_rel_error"], got[2]["ms"]) == ("3.21", "1e-06", "0.02")
    assert float(got[1]["predicted"]) == model.predict_case(half_backward).time_s * 1e3   # the half kernels too
    assert got[2]["predicted"] == got[2]["model"] == ""                      # SDPA: never predicted
    _assert_measured_on_the_gpu(got)
    again = _run(tmp_path, "runtime", got, {})    # the rewritten CSV is the GPU run still
    assert [r["predicted"] for r in again] == [r["predicted"] for r in got]
    _assert_measured_on_the_gpu(again)


def test_fig2_middle_predicts_a_gpu_runs_bytes_and_runtime_again(tmp_path):
    case = Case("fa1", "fwd", tiling=(64, 64), **SMALL)
    base = {"method": "fa1", "dtype": "float32", **SMALL, "Br": 64, "Bc": 64, "smem_bytes": 70144}
    rows = [{**base, "quantity": "forward runtime", "unit": "ms", "predicted": STALE, "measured": 0.0432,
             "measured_by": "CUDA events, median of 10", "max_rel_error": 1e-6},
            {**base, "quantity": "HBM read+write (DRAM)", "unit": "bytes", "predicted": STALE,
             "measured": 13343380992.0, "measured_by": "ncu: dram__bytes_read+write"},
            {**base, "Bc": 512, "smem_bytes": None, "quantity": "HBM read+write (SM<->L2)", "unit": "bytes",
             "note": "skipped: Tiling(Br=64, Bc=512) does not fit"}]
    got = _run(tmp_path, "fig2_middle", rows)
    now = model.predict_case(case)
    assert float(got[0]["predicted"]) == now.time_s * 1e3
    assert float(got[1]["predicted"]) == now.dram_bytes
    assert got[2]["predicted"] == "" and got[2]["note"].startswith("skipped: Tiling")
    assert [r["measured"] for r in got] == ["0.0432", "13343380992.0", ""]
    assert not any(r["quantity"].endswith("(tiny, simulator)") for r in got)
    _assert_measured_on_the_gpu(got)


def test_fig2_left_predicts_a_gpu_runs_measurements_again(tmp_path):
    from experiments.fig2_left import PAPER_NOTE

    base = {"quantity": "runtime", "unit": "ms", **SMALL, "predicted": STALE}
    rows = [{"method": "standard", "dtype": "fp32", "gpu": model.MEASURED_GPU, **base, "paper_a100_fp16": 41.7,
             "measured": 1.5, "measured_by": "CUDA events, median of 10"},
            {"method": "flash", "dtype": "fp16", "gpu": model.PAPER_GPU, **base, "paper_a100_fp16": 7.3,
             "note": PAPER_NOTE}]
    got = _run(tmp_path, "fig2_left", rows)
    standard = model.predict_case(Case("standard", "fwd_bwd", **SMALL), gpu=model.MEASURED_GPU, tiling="kernels")
    flash = model.predict_case(Case("fa2", "fwd_bwd", dtype="float16", **SMALL), gpu=model.PAPER_GPU, tiling="paper")
    assert [float(r["predicted"]) for r in got] == [standard.time_s * 1e3, flash.time_s * 1e3]
    assert [r["measured"] for r in got] == ["1.5", ""]
    assert [r["paper_a100_fp16"] for r in got] == ["41.7", "7.3"] and got[1]["note"] == PAPER_NOTE
    _assert_measured_on_the_gpu(got)


def test_io_scaling_predicts_a_gpu_runs_bytes_again(tmp_path):
    flash = Case("fa1", "fwd", tiling=(32, 64), **SMALL)
    standard = Case("standard", "fwd", **SMALL)
    common = {"passes": "fwd", **SMALL, "quantity": "HBM read+write", "unit": "bytes", "predicted": STALE,
              "dram_predicted": STALE, "measured_by": "ncu: SM<->L2 sectors x 32"}
    rows = [{"sweep": "N", "method": "fa1", "Br": 32, "Bc": 64, "M_elements": 16384, "measured": 1e7,
             "dram_measured": 2e6, **common},
            {"sweep": "N", "method": "standard", "Br": 64, "Bc": 64, "M_elements": 32768, "measured": 3e7, **common}]
    got = _run(tmp_path, "io_scaling", rows)
    for row, case in zip(got, (flash, standard)):
        now = model.predict_case(case)
        assert (float(row["predicted"]), float(row["dram_predicted"])) == (now.total_bytes, now.dram_bytes)
        assert float(row["predicted_read"]) + float(row["predicted_write"]) == now.total_bytes
        assert float(row["theorem2_bytes"]) == model.theorem2_bytes(case, int(row["M_elements"]))
        assert row["predicted_for"] == model.MEASURED_GPU
    assert float(got[0]["prop3_lower_bound_bytes"]) == model.proposition3_bytes(flash, 16384)
    assert got[1]["prop3_lower_bound_bytes"] == ""                  # not a bound on standard attention
    assert [r["measured"] for r in got] == ["10000000.0", "30000000.0"] and got[0]["dram_measured"] == "2000000.0"
    _assert_measured_on_the_gpu(got)


def test_l2_effect_predicts_a_gpu_runs_bytes_again(tmp_path):
    case = Case("fa2", "fwd", **SMALL)
    base = {"method": "fa2", **SMALL, "working_set_bytes": 1, "l2_bytes": 1.0, "unit": "bytes", "predicted": STALE}
    rows = [{**base, "quantity": "DRAM bytes", "measured": 5e6, "measured_by": "ncu: dram__bytes_read+write"},
            {**base, "quantity": "SM<->L2 bytes", "measured": 6e6, "measured_by": "ncu: SM<->L2 sectors x 32"}]
    got = _run(tmp_path, "l2_effect", rows)
    now = model.predict_case(case)
    assert [float(r["predicted"]) for r in got] == [now.dram_bytes, now.total_bytes]
    assert {float(r["l2_bytes"]) for r in got} == {model.l2_bytes(model.MEASURED_GPU)}
    assert [r["measured"] for r in got] == ["5000000.0", "6000000.0"]
    _assert_measured_on_the_gpu(got)


def test_an_h100_run_is_predicted_for_the_h100(tmp_path):
    """Each experiment predicts a run measured on an H100 with the H100's datasheet and rates
    (``model.card_of``), as the levels do: a time, a DRAM count and an L2 size differ from the
    H200's."""
    h100 = {**GPU, "device": "NVIDIA H100 80GB HBM3"}
    case = Case("fa2", "fwd", causal=True, **SMALL)
    runtime = _run(tmp_path, "runtime", [{"implementation": "ours fa2", "passes": "fwd", "causal": True,
                                          "dtype": "float32", **SMALL, "quantity": "runtime fwd", "unit": "ms",
                                          "predicted": STALE, "measured": 0.01}], h100)[0]
    now = model.predict_case(case, gpu="H100_SXM").time_s * 1e3
    assert runtime["predicted_for"] == "H100_SXM" and float(runtime["predicted"]) == now
    assert now != model.predict_case(case).time_s * 1e3
    fig2_left = _run(tmp_path, "fig2_left", [{"method": "flash", "dtype": "fp32", "gpu": model.MEASURED_GPU,
                                              "quantity": "runtime", "unit": "ms", **SMALL, "predicted": STALE,
                                              "paper_a100_fp16": 7.3, "measured": 1.0}], h100)[0]
    flash = Case("fa2", "fwd_bwd", **SMALL)
    assert fig2_left["gpu"] == "H100_SXM"
    assert float(fig2_left["predicted"]) == model.predict_case(flash, gpu="H100_SXM").time_s * 1e3
    l2 = _run(tmp_path, "l2_effect", [{"method": "fa2", **SMALL, "working_set_bytes": 1, "l2_bytes": 1.0,
                                       "unit": "bytes", "quantity": "DRAM bytes", "predicted": STALE,
                                       "measured": 1.0}], h100)[0]
    assert (l2["predicted_for"], float(l2["l2_bytes"])) == ("H100_SXM", model.l2_bytes("H100_SXM"))
    assert model.l2_bytes("H100_SXM") < model.l2_bytes(model.MEASURED_GPU)


def test_a_run_predicts_for_the_card_it_runs_on(monkeypatch):
    import experiments.common.metadata as metadata

    assert model.card("cpu") == model.MEASURED_GPU
    for name, gpu in (("NVIDIA H100 80GB HBM3", "H100_SXM"), ("NVIDIA H200", "H200_MEASURED"),
                      ("NVIDIA A40", "H200_MEASURED")):          # (no datasheet: the H200's)
        monkeypatch.setattr(metadata, "device_name", lambda device, n=name: n)
        assert model.card("gpu") == gpu
        assert model.card_of({"device": name}) == gpu          # a GPU run's row, predicted again
        assert model.card_of({"measured_device": name, "device": "cpu x86_64 (no GPU)"}) == gpu
    assert [model.card_label(g) for g in ("H200_MEASURED", "H100_SXM", "A100_40GB")] == ["H200", "H100", "A100"]
    # fig3, window, block_sparse: their predicted columns name the card (model.predicted_or_note)
    case = Case("fa2", "fwd", **SMALL)
    h100 = model.predicted_or_note(case, "H100_SXM")
    assert h100.columns()["predicted_for"] == "H100_SXM"
    assert h100.columns()["predicted_time_ms"] == model.predict_case(case, gpu="H100_SXM").time_s * 1e3
    assert model.predicted_or_note(case).columns()["predicted_for"] == model.MEASURED_GPU


@pytest.mark.parametrize("device, measured", [("cpu x86_64 (no GPU: model + CUDA simulator)", 4096.0),
                                              ("NVIDIA H200", None)], ids=["cpu-run", "gpu-unmeasured"])
def test_a_csv_without_gpu_measurements_gets_the_normal_cpu_run(tmp_path, monkeypatch, device, measured):
    from experiments import fig2_middle

    monkeypatch.setattr(fig2_middle, "SHAPE", SMALL)          # the normal run, made small
    monkeypatch.setattr(fig2_middle, "BCS", (64,))
    monkeypatch.setattr(fig2_middle, "SMALL_BCS", (8,))
    row = {"method": "fa1", "dtype": "float32", **SMALL, "Br": 64, "Bc": 64, "quantity": "forward runtime",
           "unit": "ms", "predicted": STALE, "measured": measured}
    got = _run(tmp_path, "fig2_middle", [row], {**GPU, "device": device})
    assert "measured_device" not in got[0] and not any(r["measured"] for r in got if "tiny" not in r["quantity"])
    assert any(r["quantity"].endswith("(tiny, simulator)") for r in got)
    runtime = [r for r in got if r["quantity"] == "forward runtime"]
    assert [r["method"] for r in runtime] == ["fa1", "fa2_fma", "fa1"]
    assert STALE not in [float(r["predicted"]) for r in runtime]
    assert all("no GPU" in r["note"] for r in runtime)
