"""Shared-memory wavefronts (simulator.banks) and the plans that derive them from their access
patterns: hand-derived cases."""
from __future__ import annotations

import pytest

from simulator import predict
from simulator.banks import strided_loop_wavefronts, warp_wavefronts
from simulator.phases import smem_wavefronts
from simulator.standard import ROW_THREADS, chunk_wavefronts, row_kernel_wavefronts, standard_forward
from simulator.tiling import MATMUL_BK, Tiling
from simulator.workload import Workload


@pytest.mark.parametrize("words, width, expected", [
    (range(32), 1, 1),                       # a word per bank
    ([0] * 32, 1, 1),                        # one word, broadcast
    ([2 * i for i in range(32)], 1, 2),      # stride 2: two words in each even bank
    ([32 * i for i in range(32)], 1, 32),    # one column of a 32-word-wide tile
    ([4 * i for i in range(32)], 4, 4),      # 32 lanes x 16 bytes = 512 bytes
    ([0] * 32, 4, 2),                        # one 16-byte vector, broadcast: a wavefront a half
    ([4 * (i % 16) for i in range(32)], 4, 4),   # 16 vectors, each read by lanes i and i + 16
    ([2 * i for i in range(32)], 2, 2),      # 32 lanes x 8 bytes: 128 bytes a half
    ([0] * 16 + [None] * 16, 4, 1),          # the second half inactive
    ([], 1, 0),
])
def test_warp_wavefronts(words, width, expected):
    assert warp_wavefronts(words, width) == expected


def test_strided_loop_counts_each_warp_each_trip():
    # 256 threads copy 640 words row by row: 20 warp accesses, the last trip's warps 0-3 only
    assert strided_loop_wavefronts(640, 256, lambda i: i) == 20
    # 64 threads store a 16-row column each: lanes 0-15 walk k down a 64-word-wide tile
    assert strided_loop_wavefronts(16 * 64, 64, lambda i: (i % 16) * 64 + i // 16) == 32 * 16


def test_standard_matmul_chunk_by_hand():
    """Tiling(64, 64), 256 threads, BK = 16: each chunk (64 x 16 words) is stored in 4 trips of
    8 warps. Stores: A (row stride 17) walked along k: lanes 0-15 row r, 16-31 row r + 1, lane
    31's bank (17 + 15) % 32 = 0 meets lane 0's: 2 wavefronts a warp; transposed (walked along
    m) conflict-free; B walked along its columns conflict-free, transposed (trans_b) 16-way:
    each warp's lanes 0-15 a column of k.
    Loads: per k step each warp reads RA = 4 A words (its 2 rows ty, broadcast over tx) and
    CB = 4 B words (16 consecutive columns), one wavefront each."""
    t = Tiling(64, 64)
    assert (t.threads, t.threads_x, t.rows_per_thread, t.cols_per_thread) == (256, 16, 4, 4)
    stores = {"": 32 * 2 + 32, "trans_a": 32 + 32, "trans_b": 32 * 2 + 32 * 16}
    loads = 8 * MATMUL_BK * (4 + 4)
    for variant, st in stores.items():
        assert chunk_wavefronts(t, variant) == st + loads


def test_row_kernels_by_hand():
    # softmax, 4 warps: partial (m, l) stores 2 a warp; the tree's 7 steps, h = 64 (2 warps
    # load 2 and store 2), then 32, 16, ..., 1 (one warp each); the row's (m, l) read back 2
    # a warp
    assert row_kernel_wavefronts("softmax", 128) == 8 + 4 * 2 + 4 * 6 + 8
    assert row_kernel_wavefronts("softmax", 16) == 2 + 4 * 4 + 2     # the CUDA simulator's
    assert row_kernel_wavefronts("ds", 128) == 1 + 4
    with pytest.raises(ValueError, match="row kernel"):
        row_kernel_wavefronts("row_dot")


def test_standard_forward_wavefronts_add_up():
    w, t = Workload(B=1, H=2, N_q=128, N_k=128, d=64), Tiling(64, 64)
    s, softmax, o = standard_forward(w, t).phases
    assert smem_wavefronts(s, 4) == 2 * 2 * 2 * 4 * chunk_wavefronts(t, "trans_b")   # BH x tiles x chunks
    assert smem_wavefronts(o, 4) == 2 * 2 * 1 * 8 * chunk_wavefronts(t, "")
    assert smem_wavefronts(softmax, 4) == 2 * 128 * row_kernel_wavefronts("softmax", ROW_THREADS)


@pytest.mark.parametrize("d, copied", [(64, True), (40, True), (36, False)])
def test_half_kernels_cp_async_tiles_are_not_lsu_wavefronts(d, copied):
    """The half forward's Q, K, V tiles come by cp.async where d % 8 == 0: its LSU wavefronts
    are its fragment reads, plus the zero stores of the padding columns (D16 - d of them);
    otherwise every tile store is counted."""
    w = Workload(B=1, H=2, N_q=256, N_k=256, d=d, dtype_bytes=2)
    t = Tiling(128, 64)
    main = predict("flash_forward_half", w, t).phases[0]
    reads, writes = sum(main.sram_reads.values()), sum(main.sram_writes.values())
    d16 = t.half_depth(d)
    tiles = 2 * (2 * t.Br * d + 2 * 8 * t.Bc * d)     # heads x (Q of 2 row blocks, K and V of 2 x 4 pairs)
    assert writes == tiles * d16 // d
    expected = reads + (writes - tiles if copied else writes)
    assert smem_wavefronts(main, 2) == pytest.approx(expected * 2 / 128)


def test_ffma_forward_patterns_by_hand():
    """Tiling(128, 64) at d = 64: 512 threads (16 warps of 2 rows ty x 16 columns tx), head
    rows 68 words apart (68 = 4 mod 32), score rows 68 too.
    - Kj copy: each warp stores 32 consecutive columns of a row: 64 x 64 / 32 = 128 accesses.
    - S = Qi Kj^T, each of 16 k steps: 4 Kj reads (per half-warp 16 rows x 16 bytes spread over
      all banks twice: 2 wavefronts) = 4 each, 4 Qi reads (a half-warp reads one row: 1) = 2 each.
    - P Vj, each of 16 column quads: 4 P reads (one row a half-warp) = 2 each, 16 Vj reads (16
      consecutive columns, both halves the same): 1 each.
    - row partials: 4 stores and 4 x 16 loads a warp, conflict-free.
    - P stores: rows ty and ty + 1 start 4 banks apart: 2 wavefronts each of 4 x 4."""
    from simulator import tile_patterns as tp

    t = Tiling(128, 64)
    assert (t.threads, t.threads_x, t.head_stride(64), t.score_stride) == (512, 16, 68, 68)
    assert tp.head_tile_copy(t, 64, 64) == 128
    assert tp.rows_dot_rows(t, 64) == 16 * 16 * (4 * 4 + 4 * 2)
    assert tp.scores_times_tile(t, 64, 64) == 16 * 16 * (4 * 2 + 16)
    assert tp.row_partials(t) == (16 * 4, 16 * 4 * 16)
    assert tp.score_tile_store(t) == 16 * 16 * 2


def test_ffma_forward_plan_sums_its_patterns():
    from simulator import tile_patterns as tp

    w, t = Workload(B=1, H=3, N_q=256, N_k=192, d=64), Tiling(128, 64)
    main = predict("flash_forward_v2", w, t).phases[0]
    per_block = tp.head_tile_copy(t, 64, 128) + sum(tp.row_partials(t))
    per_pair = (2 * tp.head_tile_copy(t, 64, 64) + tp.rows_dot_rows(t, 64) + sum(tp.row_partials(t))
                + tp.score_tile_store(t) + tp.scores_times_tile(t, 64, 64))
    assert smem_wavefronts(main, 4) == 3 * (2 * per_block + 2 * 3 * per_pair)
    # the tensor-core forward reuses the FFMA plan's phase, not its access patterns
    tc = predict("flash_forward_tc", w, Tiling(128, 32)).phases[0]
    assert tc.lsu_wavefronts is None
