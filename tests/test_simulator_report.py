"""TrafficReport: measured reports, totals, combining, rendering, records."""
import pytest

import numpy as np

from simulator import ALGORITHMS, TensorTraffic, Tiling, TrafficReport, Workload, hbm_traffic, predict


def test_measured_report_from_counts():
    r = TrafficReport.from_hbm_counts("flash_forward_v2", {"Q": 12, "K": 30}, {"O": 12, "L": 4, "K": 0}, 4)
    assert r.hbm["K"] == TensorTraffic(30, 0) and r.sram == {}
    assert (r.hbm_read_bytes, r.hbm_write_bytes) == (168, 64)
    assert r.hbm_counts() == {"Q": (12, 0), "K": (30, 0), "O": (0, 12), "L": (0, 4)}
    assert list(r.hbm) == ["Q", "K", "O", "L"]          # contract order
    assert r.flops is None and r.l2 is None and r.extra_memory_bytes is None
    text = str(r)
    assert "flash_forward_v2" in text and "SRAM" not in text and "168" in text


def test_hbm_counts_omits_untouched_tensors():
    r = TrafficReport("x", 2, {"Q": TensorTraffic(), "K": TensorTraffic(0, 3)})
    assert r.hbm_counts() == {"K": (0, 3)}


def test_prediction_and_measurement_compare_per_tensor():
    w = Workload(1, 1, 6, 6, 2, causal=True)
    predicted = predict("flash_backward", w, Tiling(2, 2))
    measured = TrafficReport.from_hbm_counts(
        "flash_backward", {k: v[0] for k, v in predicted.hbm_counts().items()},
        {k: v[1] for k, v in predicted.hbm_counts().items()}, 4)
    assert measured.hbm_counts() == predicted.hbm_counts()
    assert measured.hbm_read_bytes == predicted.hbm_read_bytes


def test_table_lists_every_tensor_and_the_totals():
    r = predict("standard_forward", Workload(1, 2, 5, 7, 3, causal=True), Tiling(2, 3))
    text = r.table()
    assert text == str(r)
    for name in ("Q", "K", "V", "O", "S", "P"):
        assert any(line.split()[0] == name for line in text.splitlines()[1:])
    assert f"{r.hbm_read_bytes:,}" in text and f"{r.hbm_write_bytes:,}" in text
    assert "Br=2 Bc=3" in text and "causal" in text and "extra device memory" in text
    top_left = predict("standard_forward", Workload(1, 2, 5, 7, 3, causal=True, diagonal=0))
    assert "causal diagonal=0" in top_left.table() and top_left.record()["diagonal"] == 0


def test_record_is_flat_and_complete():
    r = predict("flash_forward_v1", Workload(2, 3, 9, 9, 4), Tiling(4, 4))
    row = r.record()
    assert all(isinstance(v, (str, int, float, bool, type(None))) for v in row.values())
    assert row["hbm_O_writes"] == r.hbm["O"].writes and row["hbm_read_bytes"] == r.hbm_read_bytes
    assert (row["B"], row["H"], row["N_q"], row["Br"], row["hardware"]) == (2, 3, 9, 4, "H200")
    assert row["extra_memory_bytes"] == 3 * 2 * 3 * 9 * 4          # l, m, L
    assert row["dram_read_bytes"] == r.l2.dram_read_bytes
    measured = TrafficReport.from_hbm_counts("x", {"Q": 1}, {}, 4).record()
    assert measured["matmul_flops"] is None and measured["hbm_Q_reads"] == 1


def test_adding_forward_and_backward():
    w = Workload(1, 2, 8, 8, 4)
    fwd, bwd = predict("flash_forward_v2", w, Tiling(4, 4)), predict("flash_backward", w, Tiling(4, 4))
    both = fwd + bwd
    assert both.algorithm == "flash_forward_v2+flash_backward"
    assert both.hbm_read_bytes == fwd.hbm_read_bytes + bwd.hbm_read_bytes
    assert both.hbm["O"] == TensorTraffic(bwd.hbm["O"].reads, fwd.hbm["O"].writes)
    assert both.flops == fwd.flops + bwd.flops
    assert both.roofline_seconds == fwd.roofline_seconds + bwd.roofline_seconds
    assert both.extra_memory_bytes == (2 * 8 + 2 * 8) * 4            # L and D
    assert both.l2.dram_bytes == fwd.l2.dram_bytes + bwd.l2.dram_bytes
    with pytest.raises(ValueError, match="2- and 4-byte"):
        predict("flash_forward_v2", Workload(1, 2, 8, 8, 4, dtype_bytes=2)) + fwd


def test_predict_rejects_unknown_algorithm_and_workload():
    with pytest.raises(ValueError, match="flash_forward_v3"):
        predict("flash_forward_v3", Workload(1, 1, 4, 4, 2))
    with pytest.raises(ValueError, match="Workload"):
        predict("flash_forward_v2", (1, 1, 4, 4, 2))


def test_hbm_traffic_is_the_predictions_hbm_and_checks_as_predict():
    """``hbm_traffic``: the report's per-tensor HBM counts without the rest (every algorithm;
    causal N_q != N_k, a kv split of grouped heads, a block mask), refusing what predict refuses."""
    plain = Workload(2, 4, 40, 56, 24, causal=True)
    grouped = Workload(1, 8, 64, 64, 16, kv_heads=2, window=(16, 0))
    sparse = Workload(1, 2, 64, 64, 16, block_mask=np.eye(4, dtype=bool), block_size=(16, 16))
    cases = [(a, plain, {}) for a in ALGORITHMS]
    cases += [("flash_backward_tc", grouped, {"kv_split": 2}), ("flash_forward_half", sparse,
                                                                {"tiling": Tiling(16, 16)})]
    for algorithm, w, options in cases:
        assert hbm_traffic(algorithm, w, **options) == predict(algorithm, w, **options).hbm, algorithm
    with pytest.raises(ValueError, match="no sliding window"):
        hbm_traffic("flash_forward_v2", grouped)


def test_flops_follow_the_stated_conventions():
    nq, nk, d = 8, 12, 4
    w = Workload(1, 1, nq, nk, d)
    fwd = predict("flash_forward_v2", w, Tiling(4, 4))
    assert fwd.matmul_flops == 2 * (2 * nq * nk * d)                # S = Q K^T and P V
    assert fwd.other_flops == 5 * nq * nk + d * nq * 3 + d * nq     # 3 column blocks rescale O
    std = predict("standard_forward", w, Tiling(4, 4))
    assert std.matmul_flops == fwd.matmul_flops
    assert std.other_flops == nq * nk + 5 * nq * nk                 # scale, softmax
    causal = predict("flash_forward_v2", Workload(1, 1, 8, 8, 4, causal=True), Tiling(4, 4))
    assert causal.matmul_flops == 2 * 2 * (3 * 16) * 4              # 3 of 4 tiles active


def test_default_tilings():
    from simulator import ModelTiling, default_tiling, paper_tiling
    from simulator.hardware import A100_40GB, H200

    w = Workload(1, 1, 128, 128, 64)
    # H200, fp32: M = 232448 / 4 = 58112 elements, Bc = ceil(58112 / 256) = 227, Br = 64
    assert predict("flash_forward_v2", w).tiling == Tiling(64, 227)
    assert predict("standard_backward", w).tiling == Tiling(64, 64)
    assert default_tiling("flash_backward", w, A100_40GB) == Tiling(64, 163)
    # d = 1: Bc = 14528 would need 3632 threads a block: counted, not launchable
    tiny = paper_tiling(58112, 1)
    assert type(tiny) is ModelTiling and (tiny.Br, tiny.Bc) == (1, 14528)
    assert predict("flash_forward_v1", Workload(1, 1, 8, 8, 1), hardware=H200).tiling == tiny
    with pytest.raises(ValueError, match="ModelTiling.Bc"):
        ModelTiling(2, 0)
