"""The model of fa2_fp16x3 (simulator/fp16x3.py): its launches, bytes, sectors and block masks.

Its HBM counts against the kernels' own: tests/test_traffic_exact.py, tests/test_traffic_band.py;
against a literal walk of its grids: tests/test_simulator_band.py (``BandWalk``)."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from numba_flash.kernels import split_half
from simulator import Tiling, Workload, predict
from simulator.flash import flash_forward_v2, mask_variant
from simulator.fp16x3 import (GX, VARIANT, amax_wavefronts, cuda_simulated, default_tiling,
                              prep_launch)
from simulator.hardware import H200
from simulator.l2 import l2_traffic
from simulator.runtime import mma_format
from simulator.sectors import SECTOR_BYTES, sector_traffic

from .test_simulator_sparse import FAST, assert_dense_counts, brute_pairs, dense, reads, sparse_cases

FP16X3 = "flash_forward_fp16x3"


def test_the_kernels_write_as_many_maxima_a_head_as_the_model_counts():
    assert split_half.GX == GX


def test_head_amax_reduces_a_block_through_a_tree_in_shared_memory():
    """At 256 threads: 8 warps store, the 8 steps keep 4, 2, 1, 1, 1, 1, 1, 1 warps, each loading
    two words and storing one, and thread 0 loads the result: 45 wavefronts a block."""
    assert amax_wavefronts(256) == 8 + 3 * (4 + 2 + 1 + 1 + 1 + 1 + 1 + 1) + 1
    w = Workload(2, 4, 64, 64, 40)
    amax = predict(FP16X3, w).phases[0]
    threads = prep_launch(cuda_simulated())[0]
    assert amax.lsu_wavefronts == (w.BH + 2 * w.BH_kv) * GX * amax_wavefronts(threads)
    with pytest.raises(ValueError, match="power of two"):
        split_half.make_head_amax(96)


@pytest.mark.parametrize("d", [8, 40, 64, 111, 128])
def test_three_launches_read_q_k_v_twice_and_the_parts_as_the_fp16_kernel(d):
    """The preparing kernels read q, k, v once each; the forward reads the parts (rows of
    2 D16 fp16 elements) as the fp16 forward reads its inputs at d = 2 D16, and writes fp32 O
    of d columns."""
    w = Workload(2, 4, 300, 257, d, causal=True, kv_heads=2)
    t = default_tiling(d, 300, 257)
    r = predict(FP16X3, w, t)
    wide = dataclasses.replace(w, d=w.D_parts, dtype_bytes=2)
    half = predict("flash_forward_half", wide, t)
    assert [p.name for p in r.phases] == ["head maxima", "split into fp16 parts",
                                          "forward (FA2 order, three fp16 products)"]
    for name, heads, n in (("Q", w.BH, w.N_q), ("K", w.BH_kv, w.N_k), ("V", w.BH_kv, w.N_k)):
        assert r.hbm[name].reads == 2 * heads * n * d
        assert r.hbm[f"{name} parts"].writes == heads * n * w.D_parts == w.tensor_elements(f"{name} parts")
        assert r.hbm[f"{name} parts"].reads == half.hbm[name].reads
        assert r.sram[f"{name} parts"] == half.sram[name]
    assert r.hbm["O"].writes == w.BH * w.N_q * d and r.hbm["L"] == half.hbm["L"]
    assert r.phases[2].block_trips == half.phases[0].block_trips
    # FLOPs: the attention's nominal ones (as the 3xTF32 forward's), plus 3 an input element
    nominal = flash_forward_v2(w, t).phases[0]       # (GQA changes no FLOP)
    inputs = (w.BH * w.N_q + 2 * w.BH_kv * w.N_k) * d
    assert r.matmul_flops == nominal.matmul_flops
    assert r.other_flops == nominal.other_flops + 3 * inputs


def test_parts_are_two_byte_elements_and_as_large_as_q_k_v_at_multiples_of_16():
    w = Workload(1, 8, 512, 512, 64)
    r = predict(FP16X3, w)
    qkv_bytes = 4 * 3 * w.BH * 512 * 64
    parts = sum(r.workspace[f"{n} parts"] for n in "QKV")
    assert parts * 2 == qkv_bytes
    maxima = (w.BH + 2 * w.BH_kv) * GX
    assert r.workspace["head maxima"] == maxima
    assert r.extra_memory_bytes == qkv_bytes + 4 * maxima + 4 * w.BH * 512      # parts, maxima, L
    assert r.sram_read_bytes == 2 * sum(t.reads for t in r.sram.values())
    with pytest.raises(ValueError, match="dtype_bytes must be 4"):
        predict(FP16X3, dataclasses.replace(w, dtype_bytes=2))


def test_maxima_reads_are_a_sector_a_warp_and_fetched_once_a_block():
    """Every thread reads its heads' GX maxima at one address a warp: a sector requested a
    warp-wide load; L1 fetches each distinct sector of a block once (2 a head: 16 floats)."""
    w = Workload(4, 16, 4096, 4096, 64, causal=True)
    t = default_tiling(64, 4096, 4096)
    r = predict(FP16X3, w, t)
    split, forward = r.phases[1], r.phases[2]
    blocks = -(-4096 // t.Br) * w.BH
    threads = t.threads_for("flash_forward_half")
    only = lambda p: dataclasses.replace(p, hbm_reads={"head maxima": p.hbm_reads["head maxima"]},  # noqa: E731
                                         hbm_writes={})
    s = sector_traffic(only(forward), w)
    assert s.requested == blocks * threads // 32 * 3 * GX
    assert s.missed == blocks * 3 * GX * 4 / SECTOR_BYTES
    split_blocks = prep_launch(cuda_simulated())[1]
    heads = w.BH + 2 * w.BH_kv
    assert sector_traffic(only(split), w).missed == heads * split_blocks * GX * 4 / SECTOR_BYTES


def test_the_parts_are_copied_by_cp_async_and_o_stored_as_the_tc_forward():
    """Rows of 2 D16 fp16 parts at the fp16 kernel's padded stride: the cp.async rule's 1.5x
    sectors at D16 = 64 (256-byte rows, 272-byte shared rows); fp32 O stored in two halves a
    sector, as the 3xTF32 forward's."""
    w = Workload(1, 2, 512, 512, 64)
    r = predict(FP16X3, w)
    forward = r.phases[2]
    kv = dataclasses.replace(forward, hbm_reads={"K parts": forward.hbm_reads["K parts"]},
                             hbm_writes={"O": forward.hbm_writes["O"]})
    s = sector_traffic(kv, w)
    assert s.missed == pytest.approx(1.5 * forward.hbm_reads["K parts"] * 2 / SECTOR_BYTES)
    assert s.stored == 2 * w.BH * 512 * 64 * 4 / SECTOR_BYTES
    assert mma_format("flash_forward_half", w, VARIANT) == "float16"
    assert mma_format("flash_forward_half", w, "") == "tf32"


@pytest.mark.parametrize("d", [32, 64, 80, 128, 256])
def test_default_tiling_suits_the_fp16_kernel(d):
    t = predict(FP16X3, Workload(1, 2, 4096, 4096, d)).tiling
    assert t == default_tiling(d, 4096, 4096) and t.suits_mma("flash_forward_half")
    assert t.Br == (128 if d <= 128 else 80) and t.Bc == 32 and t.warp_rows == (16 if 64 < d <= 128 else 0)
    assert t.rows_per_warp("flash_forward_half") == (32 if d <= 64 else 16)
    short = predict(FP16X3, Workload(1, 2, 40, 40, d)).tiling
    assert short == default_tiling(d, 40, 40) and short.Br < t.Br
    assert d <= 64 or short.rows_per_warp("flash_forward_half") == 16   # 16-row warps above d = 64


@FAST
@given(data=st.data())
def test_an_all_true_block_mask_predicts_the_dense_counts(data):
    w, t = data.draw(sparse_cases(FP16X3, fill=True))
    sparse, full = predict(FP16X3, w, t), predict(FP16X3, dense(w), t)
    assert_dense_counts(sparse, full)
    assert sparse.phases[2].code == ("flash_forward_half", f"{mask_variant(w.mask()[0])}+{VARIANT}")
    assert mask_variant(w.mask()[0]).startswith("sparse")


@FAST
@given(data=st.data())
def test_dropping_blocks_saves_their_parts_tiles_only(data):
    """A dropped pair's K and V parts tiles are not read (cols_j x 2 D16 each a query head);
    the preparing kernels still read and split every key."""
    w, t = data.draw(sparse_cases(FP16X3))
    fewer = dataclasses.replace(w, block_mask=np.zeros_like(w.block_mask_array()))
    gone = brute_pairs(w, t.Br, t.Bc)
    before, after = predict(FP16X3, w, t), predict(FP16X3, fewer, t)
    keys = sum(min(t.Bc, w.N_k - j * t.Bc) for _, j in gone) * w.D_parts * w.BH
    for name in ("K", "V"):
        assert reads(before, f"{name} parts") - reads(after, f"{name} parts") == keys
        assert reads(before, name) == reads(after, name) == 2 * w.BH_kv * w.N_k * w.d
    assert after.matmul_flops == 0


def test_the_maxima_hit_in_l2_where_the_parts_overflow_it():
    """At (4,16,4096,64) causal the K and V parts of the heads in flight (134 MB) overflow L2;
    the maxima (3 KB each block reads whole) still reach DRAM once."""
    w = Workload(4, 16, 4096, 4096, 64, causal=True)
    r = predict(FP16X3, w)
    forward = r.phases[2]
    assert r.l2.phases[2].hit_fraction < 1
    without = dataclasses.replace(forward, hbm_reads={k: n for k, n in forward.hbm_reads.items()
                                                      if k != "head maxima"})
    alone = l2_traffic((without,), w, r.tiling, H200)
    assert (r.l2.phases[2].dram_read_bytes - alone.phases[0].dram_read_bytes
            == pytest.approx(4 * w.tensor_elements("head maxima")))


@pytest.mark.parametrize("d", [8, 64, 111, 128])
def test_backward_launches_and_the_fp16_backward_on_parts(d):
    """The backward (flash_backward_fp16x3): the maxima and parts of q, k, v (as the forward's
    launches) and of dO, D, then the fp16 backward on rows of 2 D16 fp16 elements, with dQ, dK,
    dV fp32 and d wide, dS^T's SRAM twice (its two parts), the nominal FLOPs of the backward."""
    from simulator.flash import flash_backward
    from simulator.fp16x3 import backward_default_tiling
    w = Workload(2, 4, 300, 257, d, causal=True, kv_heads=2)
    t = backward_default_tiling(d, 300, 257)
    r = predict("flash_backward_fp16x3", w, t)
    wide = dataclasses.replace(w, d=w.D_parts, dtype_bytes=2)
    half = predict("flash_backward_half", wide, t, kv_split=1)      # (fp16x3 runs unsplit)
    assert [p.name for p in r.phases[:4]] == ["head maxima", "split into fp16 parts", "dO maxima",
                                              "split dO into fp16 parts"]
    assert r.hbm["dO"].reads == 3 * w.BH * w.N_q * d        # maxima, split, D = rowsum(dO * O)
    assert r.hbm["dO parts"].writes == w.BH * w.N_q * w.D_parts
    main, half_main = r.phases[5], half.phases[1]
    for name in ("Q", "K", "V", "dO"):
        assert r.hbm[f"{name} parts"].reads == half_main.hbm_reads[name]
    assert main.sram_reads["dS"] == 2 * half_main.sram_reads["dS"]
    assert main.sram_writes["dS"] == 2 * half_main.sram_writes["dS"]
    for name in ("dK", "dV"):
        assert r.hbm[name].writes == half.hbm[name].writes // w.D_parts * d == w.BH_kv * w.N_k * d
    assert main.hbm_reads["dQ"] == half_main.hbm_reads["dQ_accum"] // w.D_parts * d   # atomics
    assert r.workspace["dO maxima"] == w.BH * GX
    nominal = flash_backward(w, t).phases                  # (the FFMA backward's FLOPs)
    inputs = (2 * w.BH * w.N_q + 2 * w.BH_kv * w.N_k) * d
    assert r.matmul_flops == sum(p.matmul_flops for p in nominal)
    assert r.other_flops == sum(p.other_flops for p in nominal) + 3 * inputs
    with pytest.raises(ValueError, match="dtype_bytes must be 4"):
        predict("flash_backward_fp16x3", dataclasses.replace(w, dtype_bytes=2))


@pytest.mark.parametrize("tiling, warps, busiest", [(Tiling(80, 32), 5, 2), (Tiling(112, 32), 7, 2)])
def test_a_trip_is_simulated_on_the_busiest_scheduler(monkeypatch, tiling, warps, busiest):
    """16-row warps at d = 128 (255 registers: one block an SM): warp slots go to the 4
    schedulers in turn, so 5 warps put two on one scheduler, and the trip, ending at a barrier,
    is that scheduler's (the H200 ran 80 x 32 at about 112 x 32's trip time)."""
    import simulator.issue as issue

    seen = []
    real = issue.loop_cycles
    monkeypatch.setattr(issue, "loop_cycles",
                        lambda stream, per_scheduler, *a, **k: seen.append(per_scheduler)
                        or real(stream, per_scheduler, *a, **k))
    report = predict(FP16X3, Workload(2, 16, 2048, 2048, 128), tiling, hardware=H200)
    assert report.tiling.threads_for("flash_forward_half") == 32 * warps
    assert seen and set(seen) == {busiest}
