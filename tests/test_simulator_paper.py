"""Figure 2 (left): our predictions for GPT-2 medium attention on the A100, beside the paper's."""
from simulator import predict
from simulator.hardware import A100_40GB, H200
from simulator.paper import fig2_left, fig2_markdown, fig2_workload


def test_fig2_rows_are_our_predictions():
    rows = {r.method: r for r in fig2_left()}
    w = fig2_workload()
    for row in rows.values():
        total = predict(row.algorithms[0], w, hardware=A100_40GB) + predict(row.algorithms[1], w, hardware=A100_40GB)
        assert row.hbm_gb == total.hbm_bytes / 1e9 and row.gflops == total.flops / 1e9
        assert row.roofline_ms == total.roofline_seconds * 1e3
    # the paper's tiling for 163 KB of SRAM in fp16: M = 83456, Bc = ceil(M / 256) = 326, Br = 64
    assert (rows["flash (FA2 order)"].Br, rows["flash (FA2 order)"].Bc) == (64, 326)
    assert (rows["standard"].Br, rows["standard"].Bc) == (64, 64)


def test_fig2_agrees_with_the_paper_in_shape():
    rows = {r.method: r for r in fig2_left()}
    std, fa1, fa2 = rows["standard"], rows["flash (Algorithm 1)"], rows["flash (FA2 order)"]
    assert std.hbm_gb > 5 * fa2.hbm_gb and fa2.hbm_gb > fa1.hbm_gb
    assert 0.8 < std.hbm_gb / std.paper_hbm_gb < 1.25
    assert 0.8 < fa1.hbm_gb / fa1.paper_hbm_gb < 1.25
    assert fa1.gflops > std.gflops                  # recomputation in the backward
    assert std.roofline_ms < std.paper_runtime_ms and fa1.roofline_ms < fa1.paper_runtime_ms
    assert std.extra_memory_gb > 100 * fa2.extra_memory_gb


def test_fig2_on_other_hardware_and_markdown():
    rows = fig2_left(H200)
    assert rows[0].roofline_ms < fig2_left()[0].roofline_ms
    text = fig2_markdown(rows)
    assert text.count("\n") == len(rows) + 1 and "| standard | 64 x 64 |" in text
