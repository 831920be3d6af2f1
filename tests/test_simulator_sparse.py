"""Block-sparse attention (the paper's Algorithm 5, Proposition 4) in the model: ``BlockGrid``'s
tiles against a brute-force enumeration of block pairs from the masks' definitions,
``Workload.block_mask``, and ``predict``'s counts against the dense ones and exact identities.

The brute force keeps tile (i, j) iff its block is on in the block mask and some score of the
tile is visible under the band (flash-attention's window_size around torch.tril's diagonal).
Model only: NumPy, no numba, no kernels.
"""
import dataclasses
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import ALGORITHMS, BAND_ALGORITHMS, Tiling, Workload, predict
from simulator.blocks import BlockGrid, sparse_tiles
from simulator.closed_forms import (block_sparse_backward_accesses, block_sparse_forward_accesses,
                                    proposition3_lower_bound, proposition4_flash_forward)
from simulator.flash import SPARSE_VARIANT
from simulator.hardware import H200_MEASURED
from simulator.occupancy import resources
from simulator.tiling import MMA_KERNELS

FAST = settings(max_examples=25, deadline=None)
#: The band algorithms that are one kernel each (fa2_fp16x3's forward, the fp16 kernel on fp16
#: parts of fp32 inputs, is held to the same in tests/test_simulator_fp16x3.py).
KERNELS = [a for a in BAND_ALGORITHMS if a in MMA_KERNELS]
FORWARDS = ("flash_forward_tc", "flash_forward_half")
BACKWARDS = ("flash_backward_tc", "flash_backward_half")
#: Levels that need the compiled kernel's recorded resources / SASS (NaN while the tables do not
#: hold the sparse variant); the others follow the counts alone.
COMPILED_LEVELS = ("sm_l2_read_bytes", "sm_l2_write_bytes", "local_bytes", "time_s")


def _ceil(a, b):
    return -(-a // b)


def visible(w: Workload) -> np.ndarray:
    """(N_q, N_k) bools: query r sees key c -- the band's comparisons around the diagonal (None:
    N_k - N_q) and the block of (r, c) kept."""
    r, c = np.arange(w.N_q)[:, None], np.arange(w.N_k)[None, :]
    diag = w.N_k - w.N_q if w.diagonal is None else w.diagonal
    left, right = w.window or (-1, -1)
    bq, bk = w.block_size
    sees = w.block_mask_array()[r // bq, c // bk]
    if w.causal:
        sees = sees & (c <= r + diag)
    if right >= 0:
        sees = sees & (c <= r + diag + right)
    if left >= 0:
        sees = sees & (c >= r + diag - left)
    return sees


def brute_pairs(w: Workload, br: int, bc: int) -> set:
    """The (row block, key block) pairs a kernel with br x bc tiles must visit: those whose tile
    holds a visible score (each tile lies in one block: kept block and a score of the band)."""
    sees = visible(w)
    return {(i, j) for i in range(_ceil(w.N_q, br)) for j in range(_ceil(w.N_k, bc))
            if sees[i * br:(i + 1) * br, j * bc:(j + 1) * bc].any()}


@st.composite
def bands(draw, n_q, n_k):
    """(causal, diagonal, window): none, causal, a window, or a causal window."""
    kind = draw(st.sampled_from(["none", "causal", "window", "causal window"]))
    diagonal = draw(st.one_of(st.none(), st.integers(-n_q - 2, n_k + 2)))
    if kind == "none":
        return False, None, None
    if kind == "causal":
        return True, diagonal, None
    left = draw(st.integers(-1, 12))
    right = draw(st.integers(-1, 0)) if kind == "causal window" else draw(st.integers(-1, 12))
    if (left, right) == (-1, -1):
        left = 3
    return kind == "causal window", diagonal, (left, right)


def draw_mask(draw, shape, fill=None):
    """A (shape) bool array: random, or all ``fill``."""
    if fill is not None:
        return np.full(shape, fill)
    size = shape[0] * shape[1]
    return np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size))).reshape(shape)


@st.composite
def grids(draw):
    """(Workload of one head with a block mask and a band, br, bc) for tiles nesting in blocks."""
    n_q, n_k = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    br, bc = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    size = (br * draw(st.integers(1, 3)), bc * draw(st.integers(1, 3)))
    causal, diagonal, window = draw(bands(n_q, n_k))
    mask = draw_mask(draw, (_ceil(n_q, size[0]), _ceil(n_k, size[1])))
    return Workload(1, 1, n_q, n_k, 1, causal=causal, diagonal=diagonal, window=window,
                    block_mask=mask, block_size=size), br, bc


@st.composite
def sparse_cases(draw, algorithm, fill=None, band=True):
    """(Workload, Tiling) for ``algorithm``: ragged sizes, GQA, a band (if ``band``), a block
    mask (random, or all ``fill``) of blocks that are 1-3 tiles of the mma's multiples."""
    t = Tiling(16 * draw(st.integers(1, 2)), 16 * draw(st.integers(1, 2)))
    size = (t.Br * draw(st.integers(1, 3)), t.Bc * draw(st.integers(1, 3)))
    n_q, n_k = draw(st.integers(1, 150)), draw(st.integers(1, 150))
    kv_heads = draw(st.sampled_from([1, 2]))
    causal, diagonal, window = draw(bands(n_q, n_k)) if band else (False, None, None)
    mask = draw_mask(draw, (_ceil(n_q, size[0]), _ceil(n_k, size[1])), fill)
    w = Workload(draw(st.integers(1, 2)), 2, n_q, n_k, draw(st.sampled_from([8, 16, 40])),
                 dtype_bytes=2 if "half" in algorithm else 4, causal=causal, diagonal=diagonal,
                 window=window, kv_heads=kv_heads, block_mask=mask, block_size=size)
    return w, t


def dense(w: Workload) -> Workload:
    return dataclasses.replace(w, block_mask=None, block_size=(128, 128))


def elements(report) -> int:
    return sum(t.reads + t.writes for t in report.hbm.values())


def reads(report, name: str) -> int:
    return report.hbm[name].reads if name in report.hbm else 0


# ---- BlockGrid with tiles ---------------------------------------------------------------------
def tile_grid(w: Workload, br: int, bc: int) -> BlockGrid:
    """The workload's BlockGrid with br x bc tiles and its block mask's tiles."""
    tiles = sparse_tiles(w.block_mask_array(), w.block_size, w.N_q, w.N_k, br, bc)
    return BlockGrid(w.N_q, w.N_k, br, bc, w.causal, w.diagonal, w.window, tiles)


@FAST
@given(grids())
def test_block_grid_with_tiles_is_the_brute_force_pair_set(case):
    w, br, bc = case
    g = tile_grid(w, br, bc)
    pairs = brute_pairs(w, br, bc)
    assert set(zip(*(x.tolist() for x in np.nonzero(g.active())))) == pairs
    assert g.active_pairs == len(pairs)
    assert g.nb.tolist() == [sum(1 for i, _ in pairs if i == a) for a in range(g.tr)]
    assert g.na.tolist() == [sum(1 for _, j in pairs if j == b) for b in range(g.tc)]
    rows = {i: min(br, w.N_q - i * br) for i in range(g.tr)}
    cols = {j: min(bc, w.N_k - j * bc) for j in range(g.tc)}
    assert g.pair_sum(lambda r, c: 7 * r + c * c + 1) == sum(7 * rows[i] + cols[j] ** 2 + 1
                                                             for i, j in pairs)
    assert g.key_rows().tolist() == [sum(cols[j] for i, j in pairs if i == a) for a in range(g.tr)]
    assert g.active_rows() == sum(rows[i] for i, _ in pairs)
    assert g.active_cols() == sum(cols[j] for _, j in pairs)
    assert g.active_scores() == sum(rows[i] * cols[j] for i, j in pairs)


@FAST
@given(grids())
def test_row_and_column_lists_hold_the_same_pairs_ascending(case):
    w, br, bc = case
    g = tile_grid(w, br, bc)
    (rptr, ridx), (cptr, cidx) = g.row_lists(), g.column_lists()
    assert rptr.shape == (g.tr + 1,) and cptr.shape == (g.tc + 1,)
    assert rptr[-1] == len(ridx) == cptr[-1] == len(cidx) == g.active_pairs
    by_row = [ridx[rptr[i]:rptr[i + 1]].tolist() for i in range(g.tr)]
    by_col = [cidx[cptr[j]:cptr[j + 1]].tolist() for j in range(g.tc)]
    assert all(x == sorted(set(x)) for x in by_row + by_col)
    assert np.diff(rptr).tolist() == g.nb.tolist() and np.diff(cptr).tolist() == g.na.tolist()
    assert ({(i, j) for i, js in enumerate(by_row) for j in js}
            == {(i, j) for j, is_ in enumerate(by_col) for i in is_} == brute_pairs(w, br, bc))


def test_all_true_tiles_give_the_band_grid():
    for causal, window in ((False, None), (True, None), (False, (5, 2)), (True, (7, 0))):
        band = BlockGrid(37, 29, 4, 3, causal, None, window)
        full = BlockGrid(37, 29, 4, 3, causal, None, window, np.ones((band.tr, band.tc), bool))
        assert band.nb.tolist() == full.nb.tolist() and band.na.tolist() == full.na.tolist()
        assert band.key_rows().tolist() == full.key_rows().tolist()
        assert band.pair_sum(lambda r, c: r * c + 5) == full.pair_sum(lambda r, c: r * c + 5)


def test_sparse_tiles_maps_each_tile_to_its_block():
    mask = np.array([[True, False], [False, True]])
    tiles = sparse_tiles(mask, (4, 6), 7, 11, 2, 3)     # tiles 2 x 3 in blocks 4 x 6
    assert tiles.tolist() == [[True, True, False, False]] * 2 + [[False, False, True, True]] * 2


def test_sparse_tiles_refuses_other_shapes_and_straddling_tiles():
    ok = np.ones((3, 2), bool)                           # ceil(9 / 4) x ceil(8 / 4)
    with pytest.raises(ValueError, match=r"block_mask must have shape \(3, 2\)"):
        sparse_tiles(np.ones((2, 2), bool), (4, 4), 9, 8, 2, 2)
    with pytest.raises(ValueError, match="multiples of the kernel's tile 3 x 2"):
        sparse_tiles(ok, (4, 4), 9, 8, 3, 2)             # Br = 3 does not divide bq = 4
    with pytest.raises(ValueError, match="multiples of the kernel's tile 2 x 8"):
        sparse_tiles(ok, (4, 4), 9, 8, 2, 8)             # Bc = 8 does not divide bk = 4
    with pytest.raises(ValueError, match="block_size must be two positive ints"):
        sparse_tiles(ok, (0, 4), 9, 8, 2, 2)
    with pytest.raises(ValueError, match=r"tiles must be \(5, 4\)"):
        BlockGrid(9, 8, 2, 2, tiles=np.ones((4, 4), bool))


# ---- Workload ---------------------------------------------------------------------------------
def test_workload_stores_the_block_mask_hashable_and_gives_the_sparse_mask():
    mask = np.array([[True, False, True], [False, False, True]])
    w = Workload(1, 2, 200, 300, 16, causal=True, block_mask=mask, block_size=(128, 100))
    assert w.block_mask == ((True, False, True), (False, False, True))
    assert all(type(x) is bool for row in w.block_mask for x in row)
    same = Workload(1, 2, 200, 300, 16, causal=True, block_mask=mask.tolist(),
                    block_size=[128, 100])
    assert same == w and hash(same) == hash(w) and same.block_size == (128, 100)
    assert dataclasses.replace(w) == w
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.block_mask = None
    copy = w.block_mask_array()
    copy[0, 1] = True
    assert w.block_mask_array().tolist() == mask.tolist() and w.block_fraction == 0.5
    m, _, _ = w.mask()
    assert m.sparse and m.upper and not m.lower
    assert w.band_or_gqa and w.kernel_causal is True     # its upper edge (variant "sparse")
    plain = Workload(1, 2, 200, 300, 16)
    assert plain.block_mask is None and plain.block_fraction is None and not plain.mask()[0].sparse
    assert Workload(1, 1, 5, 5, 4, block_mask=[[True]]).block_size == (128, 128)


@pytest.mark.parametrize("kwargs, match", [
    ({"block_mask": [[True, True]]}, r"block_mask must have shape \(2, 1\)"),
    ({"block_mask": [[True], [True]], "block_size": (70, 300)}, r"shape \(3, 1\)"),
    ({"block_mask": [[1], [0]]}, "block_mask must be a 2-D array of bools"),
    ({"block_mask": [True, False]}, "block_mask must be a 2-D array of bools"),
    ({"block_mask": [[True], [True, False]]}, "block_mask must be a 2-D array of bools"),
    ({"block_mask": True}, "block_mask must be a 2-D array of bools"),
    ({"block_mask": [[True], [True]], "block_size": (0, 128)}, "block_size must be a pair"),
    ({"block_mask": [[True], [True]], "block_size": (128,)}, "block_size must be a pair"),
    ({"block_mask": [[True], [True]], "block_size": (128.0, 128)}, "block_size must be a pair"),
    ({"block_mask": [[True], [True]], "block_size": (True, 128)}, "block_size must be a pair"),
    ({"block_size": (64, 64)}, "give it with a block_mask"),
])
def test_workload_refuses_bad_block_masks(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Workload(1, 1, 200, 100, 8, **kwargs)


# ---- predict: against dense -------------------------------------------------------------------
def recorded(report) -> bool:
    """Whether the tables hold the compiled kernel of every tiled launch of ``report``."""
    w, t = report.workload, report.tiling
    try:
        for p in report.phases:
            if p.block_trips:
                resources(p.code[0], t, w.d, w.kernel_causal, p.code[1])
    except LookupError:
        return False
    return True


def assert_dense_counts(sparse, dense_report):
    """Every count of ``sparse`` equals ``dense_report``'s; its tiled launches run the sparse
    variant; the levels that need that variant's compiled kernel are NaN while the tables do
    not hold it (the sparse kernels' code differs from the dense ones': no equality then)."""
    assert sparse.hbm == dense_report.hbm and sparse.sram == dense_report.sram
    assert sparse.matmul_flops == dense_report.matmul_flops
    assert sparse.other_flops == dense_report.other_flops
    assert sparse.workspace == dense_report.workspace
    assert sparse.roofline_seconds == dense_report.roofline_seconds
    assert sparse.l2 == dense_report.l2
    for p, q in zip(sparse.phases, dense_report.phases, strict=True):
        dense_variant = [v for v in q.code[1].split("+") if v]    # (fa2_fp16x3's: fp16x3)
        assert p.code == ((q.code[0], "+".join([SPARSE_VARIANT] + dense_variant))
                          if q.block_trips else q.code)
        assert dataclasses.replace(p, code=q.code) == q        # trips, order, units, counts
    got, want = sparse.levels.as_dict(), dense_report.levels.as_dict()
    for name, value in want.items():
        if name in COMPILED_LEVELS:
            assert recorded(sparse) or np.isnan(got[name])
        else:
            assert got[name] == value or (np.isnan(got[name]) and np.isnan(value))


@pytest.mark.parametrize("algorithm", KERNELS)
@FAST
@given(data=st.data())
def test_an_all_true_block_mask_predicts_the_dense_counts(algorithm, data):
    w, t = data.draw(sparse_cases(algorithm, fill=True))
    assert_dense_counts(predict(algorithm, w, t), predict(algorithm, dense(w), t))


@pytest.mark.parametrize("algorithm", KERNELS)
@pytest.mark.parametrize("causal", [False, True])
def test_all_true_at_the_default_tilings_recorded_dense_time(algorithm, causal):
    """Default tilings at d = 64 (recorded in the tables: the dense time is finite); blocks of
    256 x 128 hold every default tile."""
    w = Workload(2, 4, 1000, 1000, 64, dtype_bytes=2 if "half" in algorithm else 4,
                 causal=causal, block_mask=np.ones((4, 8), bool), block_size=(256, 128))
    sparse, full = predict(algorithm, w, hardware=H200_MEASURED), predict(algorithm, dense(w),
                                                                          hardware=H200_MEASURED)
    assert sparse.tiling == full.tiling and np.isfinite(full.levels.time_s)
    assert_dense_counts(sparse, full)


@pytest.mark.parametrize("algorithm", FORWARDS)
def test_an_all_false_block_mask_reads_no_keys(algorithm):
    w = Workload(2, 4, 100, 90, 16, dtype_bytes=2 if "half" in algorithm else 4, causal=True,
                 kv_heads=2, block_mask=np.zeros((4, 3), bool), block_size=(32, 32))
    r = predict(algorithm, w, Tiling(32, 16))
    assert reads(r, "K") == reads(r, "V") == 0 and r.matmul_flops == 0
    assert r.hbm["Q"].reads == r.hbm["O"].writes == w.BH * 100 * 16
    assert r.hbm["L"].writes == w.BH * 100
    assert r.phases[0].block_trips == (0,) * 4


@pytest.mark.parametrize("algorithm", BACKWARDS)
def test_an_all_false_block_mask_backward_loads_each_key_block_once(algorithm):
    """K_j, V_j are loaded and dK_j, dV_j (zeros) stored by every K/V block, as a band kernel's
    block with no row block; no row block is visited."""
    w = Workload(2, 4, 100, 90, 16, dtype_bytes=2 if "half" in algorithm else 4, kv_heads=2,
                 block_mask=np.zeros((4, 3), bool), block_size=(32, 32))
    r = predict(algorithm, w, Tiling(16, 16))
    kv = w.BH_kv * 90 * 16
    assert reads(r, "K") == reads(r, "V") == r.hbm["dK"].writes == r.hbm["dV"].writes == kv
    assert reads(r, "Q") == reads(r, "L") == r.matmul_flops == 0
    main = r.phases[1]
    assert main.block_trips == (0,) * 6 and "dQ" not in main.hbm_reads
    assert "dQ_accum" not in main.hbm_reads


@pytest.mark.parametrize("algorithm", KERNELS)
@FAST
@given(data=st.data())
def test_more_blocks_never_cost_less(algorithm, data):
    w, t = data.draw(sparse_cases(algorithm))
    more = draw_mask(data.draw, (len(w.block_mask), len(w.block_mask[0])))
    bigger = dataclasses.replace(w, block_mask=w.block_mask_array() | more)
    small, big = predict(algorithm, w, t), predict(algorithm, bigger, t)
    for level in ("hbm", "sram"):
        a, b = getattr(small, level), getattr(big, level)
        assert all(a[n].reads <= b[n].reads and a[n].writes <= b[n].writes for n in a)
    assert small.matmul_flops <= big.matmul_flops and small.other_flops <= big.other_flops
    assert small.hbm_bytes <= big.hbm_bytes and small.l2.dram_bytes <= big.l2.dram_bytes
    assert small.roofline_seconds <= big.roofline_seconds


@pytest.mark.parametrize("algorithm", KERNELS)
@FAST
@given(data=st.data())
def test_dropping_blocks_saves_exactly_their_tiles(algorithm, data):
    """Dropping kept blocks removes their active pairs: the forward reads cols_j d fewer
    elements of K and of V per pair and query head (Bc d with N_k a multiple of Bc); the
    backward reads rows_i d fewer of Q and dO per pair and query head, K and V alike."""
    w, t = data.draw(sparse_cases(algorithm))
    drop = draw_mask(data.draw, (len(w.block_mask), len(w.block_mask[0])))
    fewer = dataclasses.replace(w, block_mask=w.block_mask_array() & ~drop)
    gone = brute_pairs(w, t.Br, t.Bc) - brute_pairs(fewer, t.Br, t.Bc)
    assert not brute_pairs(fewer, t.Br, t.Bc) - brute_pairs(w, t.Br, t.Bc)
    # the unsplit backward: the split the model would choose may differ between the two masks
    before, after = predict(algorithm, w, t, kv_split=1), predict(algorithm, fewer, t, kv_split=1)
    b = w.dtype_bytes
    if algorithm in FORWARDS:
        keys = sum(min(t.Bc, w.N_k - j * t.Bc) for _, j in gone) * w.d * w.BH
        if w.N_k % t.Bc == 0:
            assert keys == len(gone) * t.Bc * w.d * w.BH
        for name in ("K", "V"):
            assert (reads(before, name) - reads(after, name)) * b == keys * b
        assert reads(before, "Q") == reads(after, "Q")
    else:
        rows = sum(min(t.Br, w.N_q - i * t.Br) for i, _ in gone) * w.d * w.BH
        assert reads(before, "Q") - reads(after, "Q") == rows
        assert reads(before, "K") == reads(after, "K") == w.BH_kv * w.N_k * w.d


@pytest.mark.parametrize("algorithm", sorted(set(ALGORITHMS) - set(BAND_ALGORITHMS)))
def test_other_algorithms_refuse_a_block_mask(algorithm):
    w = Workload(1, 2, 64, 64, 16, block_mask=np.ones((1, 1), bool))
    with pytest.raises(ValueError, match=r"has no block-sparse kernel.*flash_forward_tc"):
        predict(algorithm, w, Tiling(16, 16))


def test_predict_refuses_tiles_that_straddle_blocks():
    w = Workload(1, 2, 256, 256, 16, block_mask=np.ones((2, 2), bool))
    with pytest.raises(ValueError, match="multiples of the kernel's tile 256 x 32"):
        predict("flash_forward_tc", w, Tiling(256, 32))


@pytest.mark.parametrize("algorithm", KERNELS)
@pytest.mark.parametrize("size", [(128, 128), (64, 64), (48, 80), (256, 128)])
@pytest.mark.parametrize("d", [32, 64, 128])
def test_default_tilings_nest_in_the_blocks(algorithm, size, d):
    w = Workload(1, 2, 512, 512, d, dtype_bytes=2 if "half" in algorithm else 4,
                 block_mask=np.ones((_ceil(512, size[0]), _ceil(512, size[1])), bool),
                 block_size=size)
    t = predict(algorithm, w).tiling
    assert t.suits_blocks(size) and t.suits_mma(algorithm)


def test_default_tiling_cuts_the_preferred_tile_to_the_block():
    cut = Tiling.kernel_default("flash_forward_tc", 64, 4, block_size=(128, 128))
    assert cut == Tiling(128, 32)
    assert Tiling.kernel_default("flash_forward_tc", 64, 4) == Tiling(256, 32)
    with pytest.raises(ValueError, match=r"nests in blocks of \(40, 40\)"):
        Tiling.kernel_default("flash_forward_tc", 64, 4, block_size=(40, 40))   # 8 rows at most


def test_report_names_the_block_mask():
    w = Workload(1, 2, 256, 256, 16, block_mask=[[True, False], [False, False]])
    r = predict("flash_forward_tc", w, Tiling(32, 32))
    assert "block-sparse s=0.25 (128 x 128 blocks)" in r.table()
    assert r.record()["block_fraction"] == 0.25
    assert predict("flash_forward_tc", dense(w), Tiling(32, 32)).record()["block_fraction"] is None


# ---- Proposition 4: exact identities ----------------------------------------------------------
@pytest.mark.parametrize("algorithm", FORWARDS + ("flash_backward_tc",))
@FAST
@given(data=st.data())
def test_block_sparse_closed_forms_are_the_model_without_a_band(algorithm, data):
    """No band: the closed forms equal predict (elements; bytes in fp32, where L and D are 4
    bytes as the rest); K reads = d (Bc x pairs less the last key block's missing keys)."""
    w, t = data.draw(sparse_cases(algorithm, band=False))
    w = dataclasses.replace(w, kv_heads=None)          # K, V once per query head (backward)
    r = predict(algorithm, w, t)
    form = (block_sparse_backward_accesses if "backward" in algorithm
            else block_sparse_forward_accesses)(w, t)
    assert elements(r) == form.elements
    if w.dtype_bytes == 4:
        assert r.hbm_bytes == form.bytes
    if algorithm in FORWARDS:
        pairs = brute_pairs(w, t.Br, t.Bc)
        tc, last = _ceil(w.N_k, t.Bc), w.N_k - (_ceil(w.N_k, t.Bc) - 1) * t.Bc
        in_last = sum(1 for _, j in pairs if j == tc - 1)
        keys = t.Bc * len(pairs) - (t.Bc - last) * in_last
        assert reads(r, "K") == reads(r, "V") == w.BH * w.d * keys


@pytest.mark.parametrize("causal, window", [(True, None), (False, (20, 5)), (True, (30, 0))])
def test_block_sparse_closed_forms_bound_the_banded_model(causal, window):
    rng = np.random.default_rng(7)
    w = Workload(2, 2, 300, 260, 16, causal=causal, window=window,
                 block_mask=rng.random((5, 5)) < 0.6, block_size=(64, 64))
    t = Tiling(32, 32)
    for algorithm, form in (("flash_forward_tc", block_sparse_forward_accesses),
                            ("flash_backward_tc", block_sparse_backward_accesses)):
        assert elements(predict(algorithm, w, t)) <= form(w, t).elements


@FAST
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3),
       st.sampled_from([16, 32]), st.sampled_from([16, 32]), st.data())
def test_proposition4_holds_exactly_on_whole_blocks(a, b, per_q, per_k, br, bc, data):
    """bq | N_q, bk | N_k: the exact count is 2 Nq d + Nq + 2 s Tr Nk d (forward) and
    4 Nk d + 3 Nq d + Nq + s Tc (4 Nq d + 2 Nq) (backward) per head, s the kept fraction -- K/V
    (Q, dO, L, D, dQ) traffic linear in s; with Br = M / 4d <= d, Proposition 4's leading form
    is that count."""
    size = (br * per_q, bc * per_k)
    n_q, n_k, d = a * size[0], b * size[1], 32
    mask = draw_mask(data.draw, (a, b))
    w = Workload(2, 3, n_q, n_k, d, block_mask=mask, block_size=size)
    t = Tiling(br, bc)
    s = Fraction(int(mask.sum()), mask.size)
    tr, tc = n_q // br, n_k // bc
    forward = elements(predict("flash_forward_tc", w, t))
    assert forward == w.BH * (2 * n_q * d + n_q + 2 * s * tr * n_k * d)
    backward = elements(predict("flash_backward_tc", w, t))
    assert backward == w.BH * (4 * n_k * d + 3 * n_q * d + n_q + s * tc * (4 * n_q * d + 2 * n_q))
    lead = proposition4_flash_forward(w, 4 * d * br)       # M / 4d = Br <= d
    assert lead.elements == pytest.approx(forward, rel=1e-12)
    assert lead.bytes == pytest.approx(predict("flash_forward_tc", w, t).hbm_bytes, rel=1e-12)


def test_proposition4_without_a_block_mask_is_dense():
    w = Workload(1, 2, 512, 512, 32)
    lead = proposition4_flash_forward(w, 4 * 32 * 16)
    assert lead.elements == w.BH * (2 * 512 * 32 + 512 + 2 * 512 * 512 * 32 / 16)
    with pytest.raises(ValueError, match="need Workload.block_mask"):
        block_sparse_forward_accesses(w, Tiling(16, 16))
    with pytest.raises(ValueError, match="under its band only"):
        proposition3_lower_bound(dataclasses.replace(w, block_mask=np.ones((4, 4), bool)), 4096)
    with pytest.raises(ValueError, match="do not nest in blocks"):
        block_sparse_forward_accesses(dataclasses.replace(w, block_mask=np.ones((4, 4), bool)),
                                      Tiling(256, 32))
