"""CPU mode over a GPU run's CSV (runtime, fig2_middle, fig2_left; experiments.common.repredict):
the measurements kept as they were, the predictions made again by the model as it is now, the
measurement's device, date and commit in measured_* columns -- and a CSV without GPU
measurements left to the normal CPU run."""
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
    from experiments.runtime import UNMODELLED

    ours = Case("fa2", "fwd", causal=True, **SMALL)
    half_backward = Case("fa2", "fwd_bwd", dtype="float16", **SMALL)
    common = {"H": 2, "N": 128, "d": 64, "B": 1, "unit": "ms", "measured_by": "CUDA events, median of 10"}
    rows = [{"implementation": "ours fa2", "passes": "fwd", "causal": True, "dtype": "float32", "flops": ours.flops,
             "quantity": "runtime fwd", "predicted": STALE, "predicted_tflops": 1.0, "measured": 0.0123456789,
             "tflops": 3.21, "max_rel_error": 1e-6, **common},
            {"implementation": "ours fa2", "passes": "fwd_bwd", "causal": False, "dtype": "float16",
             "flops": half_backward.flops, "quantity": "runtime fwd_bwd", "measured": 0.05, "model": UNMODELLED,
             **common},
            {"implementation": "torch SDPA MATH", "passes": "fwd", "causal": False, "dtype": "float32",
             "flops": ours.flops, "ms": 0.02, "tflops": 4.0, **SMALL, "unit": "ms"}]
    got = _run(tmp_path, "runtime", rows)
    now = model.predict_case(ours).time_s * 1e3
    assert float(got[0]["predicted"]) == now != STALE
    assert float(got[0]["predicted_tflops"]) == tflops(ours.flops, now)
    assert [r["measured"] for r in got] == ["0.0123456789", "0.05", ""]
    assert (got[0]["tflops"], got[0]["max_rel_error"], got[2]["ms"]) == ("3.21", "1e-06", "0.02")
    assert got[1]["predicted"] == "" and got[1]["model"] == UNMODELLED      # the half backward: no model
    assert got[2]["predicted"] == got[2]["model"] == ""                      # SDPA: never predicted
    _assert_measured_on_the_gpu(got)
    again = _run(tmp_path, "runtime", got, {})    # the rewritten CSV is the GPU run still
    assert [r["predicted"] for r in again] == [r["predicted"] for r in got]
    _assert_measured_on_the_gpu(again)
