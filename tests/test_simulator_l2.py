"""The L2 model: DRAM bytes between the compulsory minimum and the tiled (SM<->L2) count."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import ALGORITHMS, Tiling, Workload, concurrent_blocks, predict, predict_dram
from simulator.hardware import H200


@settings(max_examples=40, deadline=None)
@given(algorithm=st.sampled_from(sorted(ALGORITHMS)), n=st.integers(1, 3000), d=st.sampled_from([16, 64, 128]),
       bh=st.integers(1, 64), l2_kib=st.integers(1, 80 * 1024), causal=st.booleans())
def test_dram_lies_between_compulsory_and_tiled(algorithm, n, d, bh, l2_kib, causal):
    hw = H200.with_measured(l2_bytes=l2_kib * 1024, source="test")
    w = Workload(1, bh, n, n, d, causal=causal)
    report = predict(algorithm, w, Tiling(16, 16), hw)
    l2 = report.l2
    assert (l2.sm_l2_read_bytes, l2.sm_l2_write_bytes) == (report.hbm_read_bytes, report.hbm_write_bytes)
    assert l2.compulsory_read_bytes <= l2.dram_read_bytes <= l2.sm_l2_read_bytes
    assert l2.compulsory_write_bytes <= l2.dram_write_bytes <= l2.sm_l2_write_bytes
    distinct = sum(w.tensor_elements(name) for name in report.hbm) * w.dtype_bytes
    assert l2.compulsory_read_bytes <= len(l2.phases) * distinct
    assert l2.compulsory_write_bytes <= len(l2.phases) * distinct


def test_h200_flash_dram_sits_at_the_compulsory_minimum():
    w = Workload(4, 16, 4096, 4096, 64)
    for algorithm in ("flash_forward_v2", "flash_backward", "flash_backward_deterministic"):
        l2 = predict_dram(algorithm, w, Tiling(64, 64), H200)
        assert l2.dram_read_bytes == l2.compulsory_read_bytes
        assert l2.dram_write_bytes == l2.compulsory_write_bytes
        assert l2.sm_l2_read_bytes > 5 * l2.dram_read_bytes       # the tiled count re-reads
    v2 = predict_dram("flash_forward_v2", w, Tiling(64, 64), H200)
    inputs, outputs = 3 * w.tensor_elements("Q") * 4, (w.tensor_elements("O") + w.tensor_elements("L")) * 4
    assert (v2.dram_read_bytes, v2.dram_write_bytes) == (inputs, outputs)


def test_algorithm_1_reuses_across_all_heads_at_once():
    # one block per head, each sweeping its Q, O, l, m once per column block: 2.1 MB a head,
    # so 16 heads fit in 60 MiB and 64 do not
    few, many = Workload(1, 16, 4096, 4096, 64), Workload(4, 16, 4096, 4096, 64)
    fits = predict_dram("flash_forward_v1", few, Tiling(64, 64), H200)
    thrashes = predict_dram("flash_forward_v1", many, Tiling(64, 64), H200)
    assert fits.phases[0].working_set_bytes == 16 * (2 * 4096 * 64 + 2 * 4096) * 4
    assert fits.dram_read_bytes == fits.compulsory_read_bytes
    # O, l, m are written at the first column block before they are read back: their reads
    # are L2 hits of the launch's own lines, so DRAM reads Q, K and V once
    assert fits.dram_read_bytes == 3 * few.tensor_elements("Q") * 4
    assert thrashes.phases[0].hit_fraction < 0.5
    assert thrashes.dram_read_bytes > 10 * thrashes.compulsory_read_bytes


def test_dram_falls_toward_the_tiled_count_as_l2_shrinks():
    w = Workload(4, 16, 4096, 4096, 64)
    dram = [predict_dram("flash_forward_v2", w, Tiling(64, 64),
                         H200.with_measured(l2_bytes=2**k, source="test")).dram_bytes
            for k in range(26, 9, -2)]
    assert dram == sorted(dram) and dram[0] < dram[-1]
    tiled = predict("flash_forward_v2", w, Tiling(64, 64)).hbm_bytes
    assert dram[-1] > 0.95 * tiled


def test_concurrent_blocks_by_shared_memory_threads_and_block_limits():
    # FA2 forward, 64 x 64, d=64, fp32: (3 * 64 * 65 + 64 * 65 + 3 * 64) * 4 = 67328 bytes,
    # 3 blocks fit in 228 KiB; 256 threads allow 8; so 3 per SM on 132 SMs.
    assert concurrent_blocks("flash_forward_v2", Tiling(64, 64), Workload(1, 1, 8, 8, 64), H200) == 396
    # the softmax has no tiles: 32 resident blocks per SM
    assert concurrent_blocks(None, Tiling(64, 64), Workload(1, 1, 8, 8, 64), H200) == 132 * 32
    # tiny tiles: the 32-blocks limit binds
    assert concurrent_blocks("flash_forward_v2", Tiling(4, 4), Workload(1, 1, 8, 8, 4), H200) == 132 * 32


def test_resident_blocks_follow_the_recorded_occupancy():
    from simulator.flash import flash_forward_v1
    from simulator.l2 import resident_blocks
    # Algorithm 1, 64 x 64, d = 64: 168 registers x 256 threads, one block an SM; the estimate
    # from shared memory (70144 bytes fp32, half of it for 2-byte elements) has 3 and 6
    t = Tiling(64, 64)
    for dtype_bytes, estimate in ((4, 3), (2, 6)):
        w = Workload(64, 16, 1024, 1024, 64, dtype_bytes=dtype_bytes)
        p = flash_forward_v1(w, t).phases[0]
        assert resident_blocks(p, t, w, H200) == 132
        assert concurrent_blocks("flash_forward_v1", t, w, H200) == 132 * estimate
    # a tiling never compiled: the estimate
    w, t = Workload(1, 1, 256, 256, 64), Tiling(32, 16)
    assert resident_blocks(flash_forward_v1(w, t).phases[0], t, w, H200) == \
        concurrent_blocks("flash_forward_v1", t, w, H200)


def test_algorithm_1_keeps_nothing_once_its_cyclic_re_reads_exceed_l2():
    # 132 resident heads x (Q, O, l, m: 2 x 1024 x 64 + 2 x 1024 elements): 70.3 MB in fp32,
    # over the 60 MiB L2, so every re-read misses; 35.1 MB in fp16 fits
    t = Tiling(64, 128)
    fp32 = predict_dram("flash_forward_v1", Workload(64, 16, 1024, 1024, 64), t, H200)
    fp16 = predict_dram("flash_forward_v1", Workload(64, 16, 1024, 1024, 64, dtype_bytes=2), t, H200)
    assert fp32.phases[0].working_set_bytes == 132 * (2 * 1024 * 64 + 2 * 1024) * 4 > H200.l2_bytes
    assert fp32.phases[0].hit_fraction == 0.0
    assert (fp32.dram_read_bytes, fp32.dram_write_bytes) == (fp32.sm_l2_read_bytes, fp32.sm_l2_write_bytes)
    assert fp16.phases[0].hit_fraction == 1.0
    assert fp16.dram_read_bytes == fp16.compulsory_read_bytes


def test_report_renders_the_l2_line():
    r = predict("standard_forward", Workload(1, 1, 64, 64, 16))
    assert "L2 model (60 MiB)" in str(r)
    # the level model reads what the L2 model reads; it writes less what stays dirty in L2
    assert r.dram_read_bytes == r.l2.dram_read_bytes and r.dram_write_bytes <= r.l2.dram_write_bytes


def test_fp32_tensors_count_four_bytes_in_a_half_precision_run():
    # the fp16 backward keeps L, D and its dQ accumulator in fp32: zeroing dQ_accum writes 4
    # bytes an element, the conversion kernel reads 4 and writes dQ in 2
    w = Workload(1, 2, 256, 256, 64, dtype_bytes=2)
    report = predict("flash_backward_half", w, None, H200)
    l2 = report.l2
    assert (l2.sm_l2_read_bytes, l2.sm_l2_write_bytes) == (report.hbm_read_bytes, report.hbm_write_bytes)
    pre, main, convert = l2.phases
    elements = w.tensor_elements("dQ")
    assert pre.compulsory_write_bytes == 4 * elements + 4 * w.tensor_elements("D")
    assert (convert.compulsory_read_bytes, convert.compulsory_write_bytes) == (4 * elements, 2 * elements)
    assert main.compulsory_write_bytes == 2 * 2 * w.tensor_elements("K") + 4 * elements


def test_tile_by_tile_launches_share_within_a_wave_and_miss_across_past_half_of_l2():
    # the causal tensor-core forward starts the last row block of all 64 heads first: every
    # head in flight, 132 resident blocks (one an SM), k = 132 / 64 of a head's; the K and V of
    # all 64 heads (134 MB) exceed half of L2, so each wave's first reads miss and the rest hit
    w = Workload(4, 16, 4096, 4096, 64, causal=True)
    view = predict("flash_forward_tc", w).l2.phases[0]
    assert (view.concurrent_blocks, view.working_set_bytes) == (132, 64 * 2 * 4096 * 64 * 4)
    assert view.hit_fraction == pytest.approx(1 - 64 / 132)
    # one head: its K and V (2 MiB) fit in half of L2, every re-read hits
    one = predict("flash_forward_tc", Workload(1, 1, 4096, 4096, 64, causal=True)).l2
    assert one.phases[0].hit_fraction == 1.0
    assert one.dram_read_bytes == one.compulsory_read_bytes
    # past half of L2 but more blocks than heads in flight: the same 1 - 1/k, whatever the
    # working set (no min(1, L2 / working set) left for these launches)
    small = H200.with_measured(l2_bytes=view.working_set_bytes // 4, source="test")
    assert predict("flash_forward_tc", w, hardware=small).l2.phases[0].hit_fraction == pytest.approx(1 - 64 / 132)
    # GQA, 4 query heads a K/V head: 16 K/V heads (34 MB, past half of the 60 MiB L2), each
    # read by 132 / 16 blocks a wave
    gqa = predict("flash_forward_tc", Workload(4, 16, 4096, 4096, 64, causal=True, kv_heads=4)).l2
    assert gqa.phases[0].working_set_bytes == 16 * 2 * 4096 * 64 * 4 > H200.l2_bytes / 2
    assert gqa.phases[0].hit_fraction == pytest.approx(1 - 16 / 132)


def test_the_last_wave_of_a_tile_by_tile_launch_re_reads_its_lightest_blocks_share():
    # causal forward at d = 64: 256 x 32 tiles, 16 row blocks a head of 8, 16, ..., 128 trips;
    # 132 resident blocks (one an SM), 2 of each of the 64 heads last, the heavier of them 16
    # trips of the head's 128: K and V's eighth
    w = Workload(4, 16, 4096, 4096, 64, causal=True)
    report = predict("flash_forward_tc", w)
    view = report.l2.phases[0]
    assert sorted(report.phases[0].block_trips) == list(range(8, 129, 8))
    assert view.working_set_bytes == 64 * 2 * 4096 * 64 * 4
    assert view.end_working_set_bytes == view.working_set_bytes // 8 == view.final_working_set_bytes
    # fewer resident blocks than heads: only theirs are in flight at the end
    few = predict("flash_forward_tc", Workload(4, 64, 4096, 4096, 64, causal=True)).l2.phases[0]
    assert few.end_working_set_bytes == int(few.working_set_bytes * (132 / 256) * 8 / 128)
    # head by head (not causal): the blocks in flight are alike, the launch's working set
    full = predict("flash_forward_tc", Workload(4, 16, 4096, 4096, 64)).l2.phases[0]
    assert full.end_working_set_bytes == full.final_working_set_bytes == full.working_set_bytes
