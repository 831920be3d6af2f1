"""Band masks (sliding windows) and GQA in the model: predict == the loops of the band kernels,
walked head by head and block by block from the mask's definition (no BlockGrid, no spec.band).

The walk follows docs/traffic-contract.md for flash_forward_tc / _half (a block per query head
and row block: Q_i once, K_j and V_j of K/V head h // group for every block j that holds a key
some row of the block sees) and flash_backward_tc / _half (a block per K/V head and key block:
K_j, V_j once, then each query head of the group and each row block that sees a key of the
block). No numba: pure Python.
"""
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import BAND_ALGORITHMS, ALGORITHMS, Tiling, Workload, predict
from simulator.blocks import BlockGrid, band_extent, band_scores, causal_diagonal, unmasked_scores
from simulator.closed_forms import proposition3_lower_bound
from simulator.flash import mask_variant, variant_mask
from simulator.fp16x3 import GX, cuda_simulated, prep_launch, split_threads
from simulator.hardware import H200_MEASURED

from .helpers import mma_tiling

FAST = settings(max_examples=40, deadline=None)


def _ceil(a, b):
    return -(-a // b)


def sees(w: Workload, r: int, c: int) -> bool:
    """Whether query row r sees key c: flash-attention's window_size around torch.tril's
    diagonal (None: N_k - N_q), and causal's edge at the diagonal."""
    diag = w.N_k - w.N_q if w.diagonal is None else w.diagonal
    left, right = w.window or (-1, -1)
    return ((not w.causal or c <= r + diag) and (right < 0 or c <= r + diag + right)
            and (left < 0 or c >= r + diag - left))


class BandWalk:
    """Counts of one band kernel on one workload, by walking its grid literally."""

    def __init__(self, w: Workload, t: Tiling):
        self.w, self.t = w, t
        self.tr, self.tc = _ceil(w.N_q, t.Br), _ceil(w.N_k, t.Bc)
        self.group = w.H // (w.kv_heads or w.H)
        self.reads, self.writes = Counter(), Counter()
        self.sram_reads, self.sram_writes = Counter(), Counter()
        self.matmul = self.other = 0
        # active block pairs: those with a score some row sees (the band is one diagonal strip,
        # so a block range of K/V blocks per row block is exactly these)
        self.pairs = {(i, j) for i in range(self.tr) for j in range(self.tc)
                      if any(sees(w, r, c) for r in self.row_range(i) for c in self.col_range(j))}

    def row_range(self, i):
        return range(i * self.t.Br, min((i + 1) * self.t.Br, self.w.N_q))

    def col_range(self, j):
        return range(j * self.t.Bc, min((j + 1) * self.t.Bc, self.w.N_k))

    def rows(self, i):
        return len(self.row_range(i))

    def cols(self, j):
        return len(self.col_range(j))

    # -- forward ---------------------------------------------------------------------------
    def _forward(self, q_tile, kv_element, warp_rows):
        w, t, d = self.w, self.t, self.w.d
        warps = t.Br // warp_rows
        for _head in range(w.B * w.H):
            for i in range(self.tr):
                rows = self.rows(i)
                self.reads["Q"] += rows * d
                self.sram_writes["Q"] += q_tile[0]
                for j in range(self.tc):
                    if (i, j) not in self.pairs:
                        continue
                    cols = self.cols(j)
                    for name in ("K", "V"):          # of K/V head _head // group
                        self.reads[name] += cols * d
                        self.sram_writes[name] += t.Bc * kv_element
                    self.sram_reads["Q"] += q_tile[1]     # each warp its rows of Q_i
                    for _warp in range(warps):            # ... and all of K_j, V_j
                        self.sram_reads["K"] += t.Bc * kv_element
                        self.sram_reads["V"] += t.Bc * kv_element
                    self.matmul += 4 * d * rows * cols            # S = Q K^T, O += P V
                    self.other += 5 * rows * cols + d * rows      # softmax; rescale O
                self.writes["O"] += rows * d
                self.writes["L"] += rows
                self.other += d * rows                            # O / l

    def flash_forward_tc(self):
        t, d = self.t, self.w.d
        d8 = _ceil(d, 8) * 8
        q = t.Br * d8 * (1 if t.mma_q_raw(d) else 2)
        self._forward((q, q), d8 * 2, 16)

    def flash_forward_half(self):
        t, d = self.t, self.w.d
        d16 = _ceil(d, 16) * 16
        self._forward((t.Br * d16, t.Br * d16), d16, t.rows_per_warp("flash_forward_half"))

    def flash_forward_fp16x3(self):
        """The maxima of every head of q, k, v, their fp16 parts (rows of 2 D16), then the fp16
        forward on the parts (SRAM as the fp16 kernel's at d = 2 D16, FLOPs at d), fp32 O."""
        w, t, d = self.w, self.t, self.w.d
        wide = _ceil(d, 16) * 32
        threads, blocks = prep_launch(cuda_simulated())
        threads = split_threads(d, threads)
        heads = [("Q", w.N_q)] * (w.B * w.H) + [("K", w.N_k), ("V", w.N_k)] * (w.B * (w.kv_heads or w.H))
        for name, n in heads:
            self.reads[name] += 2 * n * d                          # maxima, then the split
            self.writes["head maxima"] += GX
            self.reads["head maxima"] += blocks * threads * GX     # each split thread its head's
            self.writes[f"{name} parts"] += n * wide
            self.other += 3 * n * d                                # max; scale, lo = x - hi
        warps = t.Br // t.rows_per_warp("flash_forward_half")
        for _head in range(w.B * w.H):
            for i in range(self.tr):
                rows = self.rows(i)
                self.reads["head maxima"] += t.threads_for("flash_forward_half") * 3 * GX
                self.reads["Q parts"] += rows * wide
                self.sram_writes["Q parts"] += t.Br * wide
                for j in range(self.tc):
                    if (i, j) not in self.pairs:
                        continue
                    cols = self.cols(j)
                    for name in ("K parts", "V parts"):
                        self.reads[name] += cols * wide
                        self.sram_writes[name] += t.Bc * wide
                        self.sram_reads[name] += warps * t.Bc * wide
                    self.sram_reads["Q parts"] += t.Br * wide
                    self.matmul += 4 * d * rows * cols
                    self.other += 5 * rows * cols + d * rows
                self.writes["O"] += rows * d
                self.writes["L"] += rows
                self.other += d * rows

    # -- backward --------------------------------------------------------------------------
    def _backward(self, half, split=False):
        """The backward's walk; ``split`` (fa2_fp16x3's, on the parts: ``half`` too): the head
        tiles are rows of 2 D16 parts read whole from "Q parts", ..., dS^T holds two parts,
        dQ's atomics go to fp32 dQ (no narrowing launch), and every thread of a block that
        visits a row block reads its q, k, v and dO heads' maxima (3 GX + GX) once a query head."""
        w, t, d = self.w, self.t, self.w.d
        depth = _ceil(d, 16) * 16 if half else _ceil(d, 8) * 8
        row = 2 * depth if split else d         # elements of a head tile's row in HBM
        depth = row if split else depth
        name_of = (lambda n: f"{n} parts") if split else (lambda n: n)   # noqa: E731
        part = 1 if half else 2                 # SRAM elements per value (TF32 hi + lo)
        tile_cols = 16 if half else 8           # dQ product tiles: 16 x 16 (half) or 16 x 8
        ds_parts = 2 if split else 1            # dS^T's parts in SRAM
        warps = t.Bc // 16
        units = (t.Br // 16) * ((depth // (2 if split else 1)) // tile_cols)
        per_warp = _ceil(units, warps)
        dq = "dQ_accum" if half and not split else "dQ"
        for _head in range(w.B * w.H):          # preprocess, per query head
            self.reads["dO"] += w.N_q * d
            self.reads["O"] += w.N_q * d
            self.writes["D"] += w.N_q
            self.writes[dq] += w.N_q * d
            self.other += 2 * w.N_q * d
        threads = t.threads_for("flash_backward_half") if split else 0
        for kv_head in range(w.B * (w.kv_heads or w.H)):
            for j in range(self.tc):
                cols = self.cols(j)
                for name in ("K", "V"):
                    self.reads[name_of(name)] += cols * row
                    self.sram_writes[name_of(name)] += t.Bc * depth * part
                busy = any((i, j) in self.pairs for i in range(self.tr))
                for _g in range(self.group):    # query head kv_head * group + _g
                    if split and busy:          # the head's scales, at its first step
                        self.reads["head maxima"] += threads * 3 * GX
                        self.reads["dO maxima"] += threads * GX
                    for i in range(self.tr):
                        if (i, j) not in self.pairs:
                            continue
                        rows = self.rows(i)
                        for name in ("Q", "dO"):
                            self.reads[name_of(name)] += rows * row
                            self.sram_writes[name_of(name)] += t.Br * depth * (1 if half else 4)
                        for name in ("L", "D"):
                            self.reads[name] += rows
                            self.sram_writes[name] += t.Br * (2 if half else 1)
                        self.sram_writes["dS"] += t.Br * t.Bc * part * ds_parts
                        for _warp in range(warps):
                            self.sram_reads[name_of("K")] += 16 * depth * part
                            self.sram_reads[name_of("V")] += 16 * depth * part
                            self.sram_reads[name_of("Q")] += 2 * t.Br * depth * part
                            self.sram_reads[name_of("dO")] += 2 * t.Br * depth * part
                            for tile in range(per_warp):
                                if tile == 0 or ((depth // ds_parts) // tile_cols) % per_warp:
                                    self.sram_reads["dS"] += 16 * t.Bc * part * ds_parts
                                self.sram_reads[name_of("K")] += t.Bc * tile_cols * part * ds_parts
                        self.reads[dq] += rows * d       # the atomic add: a read, a write
                        self.writes[dq] += rows * d
                        self.matmul += 10 * d * rows * cols   # S, dP, dV, dK, dQ
                        self.other += 5 * rows * cols + 2 * d * rows
                self.writes["dK"] += cols * d
                self.writes["dV"] += cols * d
                self.other += cols * d                   # dK scaled once
        if half and not split:
            for _head in range(w.B * w.H):               # narrow dQ_accum into dQ
                self.reads["dQ_accum"] += w.N_q * d
                self.writes["dQ"] += w.N_q * d

    def flash_backward_tc(self):
        self._backward(half=False)

    def flash_backward_half(self):
        self._backward(half=True)

    def flash_backward_fp16x3(self):
        """The maxima and parts of every head of q, k, v (as the forward's) and of dO, then the
        fp16 backward's walk on the parts (``_backward(split=True)``)."""
        w, d = self.w, self.w.d
        wide = _ceil(d, 16) * 32
        threads, blocks = prep_launch(cuda_simulated())
        threads = split_threads(d, threads)
        heads = ([("Q", w.N_q)] * (w.B * w.H) + [("K", w.N_k), ("V", w.N_k)] * (w.B * (w.kv_heads or w.H))
                 + [("dO", w.N_q)] * (w.B * w.H))
        for name, n in heads:
            maxima = "dO maxima" if name == "dO" else "head maxima"
            self.reads[name] += 2 * n * d                          # maxima, then the split
            self.writes[maxima] += GX
            self.reads[maxima] += blocks * threads * GX            # each split thread its head's
            self.writes[f"{name} parts"] += n * wide
            self.other += 3 * n * d                                # max; scale, lo = x - hi
        self._backward(half=True, split=True)


def assert_walk_matches(algorithm, w, t):
    walk = BandWalk(w, t)
    getattr(walk, algorithm)()
    r = predict(algorithm, w, t, kv_split=1)       # the walk is the unsplit kernel's
    nonzero = lambda c: {k: v for k, v in c.items() if v}     # noqa: E731
    assert {k: v.reads for k, v in r.hbm.items() if v.reads} == nonzero(walk.reads)
    assert {k: v.writes for k, v in r.hbm.items() if v.writes} == nonzero(walk.writes)
    assert {k: v.reads for k, v in r.sram.items() if v.reads} == nonzero(walk.sram_reads)
    assert {k: v.writes for k, v in r.sram.items() if v.writes} == nonzero(walk.sram_writes)
    assert (r.matmul_flops, r.other_flops) == (walk.matmul, walk.other)
    fp32 = {"L", "D", "dQ_accum", "head maxima", "dO maxima"}
    fp16 = {"Q parts", "K parts", "V parts", "dO parts"}
    assert r.hbm_read_bytes == sum(n * (4 if k in fp32 else 2 if k in fp16 else w.dtype_bytes)
                                   for k, n in walk.reads.items())
    return r


def windows(reach):
    """(causal, window, diagonal): windows with one side, both, none (-1, -1), causal ones
    (right 0 or -1), and diagonals beyond the sequences (masks that hide all or nothing)."""
    side = st.integers(-1, reach)
    diagonal = st.one_of(st.none(), st.integers(-reach, reach))
    plain = st.tuples(st.just(False), st.tuples(side, side), diagonal)
    causal = st.tuples(st.just(True), st.tuples(side, st.sampled_from([-1, 0])), diagonal)
    return st.one_of(plain, causal)


@st.composite
def band_workloads(draw, kernel):
    causal, window, diagonal = draw(windows(14))
    h_kv = draw(st.integers(1, 2))
    group = draw(st.integers(1, 4))
    half = kernel in ("flash_forward_half", "flash_backward_half")
    return Workload(draw(st.integers(1, 2)), h_kv * group, draw(st.integers(1, 40)),
                    draw(st.integers(1, 40)), draw(st.integers(1, 20)), 2 if half else 4,
                    causal, diagonal, window, h_kv)


@FAST
@given(data=st.data(), kernel=st.sampled_from(BAND_ALGORITHMS), br=st.integers(1, 3),
       bc=st.integers(1, 3))
def test_predict_walks_the_band_kernels_on_drawn_shapes(data, kernel, br, bc):
    w = data.draw(band_workloads(kernel))
    assert_walk_matches(kernel, w, mma_tiling(Tiling(16 * br, 8 * bc), kernel))


@pytest.mark.parametrize("kernel", BAND_ALGORITHMS)
@pytest.mark.parametrize("n_q,n_k,causal,window,diagonal,kv_heads", [
    (37, 29, False, (5, 3), None, 1),       # both sides, ragged, N_q > N_k: rows that see nothing
    (29, 37, False, (4, -1), None, 2),      # left side alone
    (33, 40, False, (-1, 2), 0, 2),         # right side alone (compiles as causal), top-left
    (40, 40, True, (7, 0), None, 1),        # causal window
    (40, 17, True, (3, -1), -30, 4),        # empty rows and whole row blocks that see nothing
    (20, 20, False, (0, 0), 30, 1),         # beyond the keys: nothing visible
    (19, 23, False, (40, 40), -2, 1),       # wider than the sequences: everything visible
])
def test_predict_walks_the_band_kernels(kernel, n_q, n_k, causal, window, diagonal, kv_heads):
    half = kernel in ("flash_forward_half", "flash_backward_half")
    w = Workload(1, 4, n_q, n_k, 12, 2 if half else 4, causal, diagonal, window, kv_heads)
    assert_walk_matches(kernel, w, mma_tiling(Tiling(16, 16), kernel))


@pytest.mark.parametrize("kernel", BAND_ALGORITHMS)
@given(data=st.data())
@settings(max_examples=15, deadline=None)
def test_old_masks_are_the_walk_too(kernel, data):
    """window=None, kv_heads=None: the walk (also the old contract) still holds."""
    causal = data.draw(st.booleans())
    diagonal = data.draw(st.one_of(st.none(), st.integers(-20, 20))) if causal else None
    w = Workload(data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)),
                 data.draw(st.integers(1, 40)), data.draw(st.integers(1, 40)),
                 data.draw(st.integers(1, 20)), 2 if "half" in kernel else 4, causal, diagonal)
    assert_walk_matches(kernel, w, mma_tiling(Tiling(16, 16), kernel))


# Recorded from predict before windows and GQA were added (hbm, matmul FLOPs, other FLOPs,
# SRAM reads, SRAM writes summed):
OLD = [
    ("flash_forward_tc", Workload(1, 2, 13, 7, 3, 4, True), Tiling(16, 8),
     {"Q": (78, 0), "K": (42, 0), "V": (42, 0), "O": (0, 78), "L": (0, 26)}, 2184, 1066, 1024, 1024),
    ("flash_forward_half", Workload(2, 3, 40, 40, 16, 2, True, -3), Tiling(32, 16),
     {"Q": (3840, 0), "K": (6912, 0), "V": (6912, 0), "O": (0, 3840), "L": (0, 240)},
     516096, 52608, 30720, 21504),
    ("flash_backward_tc", Workload(1, 2, 100, 37, 3, 4, True, 0), Tiling(16, 16),
     {"Q": (1512, 0), "K": (222, 0), "V": (222, 0), "O": (600, 0), "L": (504, 0),
      "dO": (2112, 0), "dQ": (1512, 2112), "dK": (0, 222), "dV": (0, 222), "D": (504, 200)},
     197040, 37286, 82944, 59520),
    ("flash_backward_half", Workload(2, 3, 7, 13, 16, 2), Tiling(16, 16),
     {"Q": (672, 0), "K": (1248, 0), "V": (1248, 0), "O": (672, 0), "L": (42, 0),
      "dO": (1344, 0), "dQ": (0, 672), "dQ_accum": (1344, 1344), "dK": (0, 1248),
      "dV": (0, 1248), "D": (42, 42)}, 87360, 6666, 12288, 8064),
    ("flash_backward_tc", Workload(2, 3, 100, 37, 16, 4, True, 9), Tiling(32, 16),
     {"Q": (28800, 0), "K": (3552, 0), "V": (3552, 0), "O": (9600, 0), "L": (1800, 0),
      "dO": (38400, 0), "dQ": (28800, 38400), "dK": (0, 3552), "dV": (0, 3552),
      "D": (1800, 600)}, 3552000, 191352, 589824, 391680),
]


@pytest.mark.parametrize("kernel,w,t,hbm,matmul,other,sram_reads,sram_writes", OLD)
def test_old_cases_are_unchanged(kernel, w, t, hbm, matmul, other, sram_reads, sram_writes):
    r = predict(kernel, w, t)
    assert r.hbm_counts() == hbm
    assert (r.matmul_flops, r.other_flops) == (matmul, other)
    assert sum(x.reads for x in r.sram.values()) == sram_reads
    assert sum(x.writes for x in r.sram.values()) == sram_writes
    # the explicit no-op arguments give the same workload
    assert Workload(w.B, w.H, w.N_q, w.N_k, w.d, w.dtype_bytes, w.causal, w.diagonal,
                    (-1, -1), w.H) == w


# -- the block grid and the closed forms ---------------------------------------------------------
def brute_scores(w):
    return sum(sees(w, r, c) for r in range(w.N_q) for c in range(w.N_k))


@FAST
@given(n_q=st.integers(1, 30), n_k=st.integers(1, 30), mask=windows(35))
def test_band_scores_and_extent_closed_forms(n_q, n_k, mask):
    causal, window, diagonal = mask
    w = Workload(1, 1, n_q, n_k, 1, 4, causal, diagonal, window)
    m, hi, lo = w.mask()
    edges = (n_q, n_k, m.upper, m.lower, hi, lo)
    assert band_scores(*edges) == brute_scores(w)
    rows = sum(any(sees(w, r, c) for c in range(n_k)) for r in range(n_q))
    keys = sum(any(sees(w, r, c) for r in range(n_q)) for c in range(n_k))
    assert band_extent(*edges) == (rows, keys)
    if window is None:
        assert unmasked_scores(n_q, n_k, causal, w.causal_diagonal) == brute_scores(w)


@FAST
@given(n_q=st.integers(1, 30), n_k=st.integers(1, 30), br=st.integers(1, 7),
       bc=st.integers(1, 7), mask=windows(35))
def test_block_ranges_are_the_blocks_that_hold_a_visible_score(n_q, n_k, br, bc, mask):
    causal, window, diagonal = mask
    w = Workload(1, 1, n_q, n_k, 1, 4, causal, diagonal, window)
    g = BlockGrid(n_q, n_k, br, bc, causal, diagonal, window)
    walk = BandWalk(w, Tiling(br, bc))
    by_rows = {(i, j) for i in range(g.tr) for j in range(g.first[i], g.end[i])}
    by_cols = {(i, j) for j in range(g.tc) for i in range(g.row_first[j], g.row_end[j])}
    assert by_rows == by_cols == walk.pairs
    assert list(g.nb) == [sum((i, j) in walk.pairs for j in range(g.tc)) for i in range(g.tr)]
    assert list(g.na) == [sum((i, j) in walk.pairs for i in range(g.tr)) for j in range(g.tc)]
    for edge in (g.first, g.end, g.row_first, g.row_end):
        assert (np.diff(edge) >= 0).all()          # both edges non-decreasing
    pairs = sorted(walk.pairs)
    assert g.active_pairs == len(pairs)
    assert g.active_rows() == sum(walk.rows(i) for i, _ in pairs)
    assert g.active_cols() == sum(walk.cols(j) for _, j in pairs)
    assert g.active_scores() == sum(walk.rows(i) * walk.cols(j) for i, j in pairs)
    assert g.pair_sum(lambda rows, cols: rows * cols + 3 * cols) == sum(
        walk.rows(i) * walk.cols(j) + 3 * walk.cols(j) for i, j in pairs)


@FAST
@given(n_q=st.integers(1, 40), n_k=st.integers(1, 40), br=st.integers(1, 9),
       bc=st.integers(1, 9), causal=st.booleans(), diagonal=st.one_of(st.none(), st.integers(-50, 50)))
def test_block_grid_keeps_the_causal_prefix(n_q, n_k, br, bc, causal, diagonal):
    """Without a window the ranges are the old prefixes j < nb(i), nb = clamp(floor((last_i +
    off) / Bc) + 1, 0, Tc)."""
    g = BlockGrid(n_q, n_k, br, bc, causal, diagonal)
    last = np.minimum(np.arange(g.tr) * br + br, n_q) - 1
    off = causal_diagonal(n_q, n_k, diagonal)
    nb = np.clip((last + off) // bc + 1, 0, g.tc) if causal else np.full(g.tr, g.tc)
    assert (g.first == 0).all() and list(g.nb) == list(nb) == list(g.end)


def test_lower_bound_with_windows_and_gqa():
    # 4 queries, 10 keys, window (1, 0) at the bottom-right diagonal 6: row r sees 5 + r, 6 + r
    w = Workload(1, 4, 4, 10, 2, window=(1, 0), kv_heads=2)
    # compulsory: keys 5..9 (K and V of 2 K/V heads), every query of 4 heads (Q and O)
    assert proposition3_lower_bound(w, 2000).elements == 2 * (2 * 2 * 5 + 2 * 4 * 4)
    big = Workload(1, 4, 300, 200, 16, causal=True, window=(40, 0), kv_heads=1)
    exact = sum(r + wr for r, wr in predict("flash_forward_tc", big, Tiling(16, 16)).hbm_counts().values())
    assert proposition3_lower_bound(big, 256).elements <= exact


# -- levels, L2 and runtime ----------------------------------------------------------------------
def test_levels_that_need_an_unrecorded_kernel_are_nan():
    """A window's left side or grouped heads compile kernels of their own (``Phase.code``'s
    variant "window", "group4"): at a head dim the tables hold none of them (d = 128: the window
    experiment's are at d = 64), local bytes, SM<->L2 bytes and time are NaN, the rest
    modelled; a right side alone compiles as causal, so every level is there."""
    base = dict(B=2, H=8, N_q=4096, N_k=4096, d=128)
    for kernel in ("flash_forward_tc", "flash_backward_tc"):
        for extra, variant in ((dict(window=(256, 256)), "window"), (dict(causal=True, kv_heads=2), "group")):
            report = predict(kernel, Workload(**base, **extra), None, H200_MEASURED)
            tiled = [p.code[1] for p in report.phases if p.block_trips]
            assert tiled and all(v.startswith(variant) for v in tiled), tiled
            v = report.levels
            assert math.isnan(v.time_s) and math.isnan(v.local_bytes)
            assert math.isnan(v.sm_l2_read_bytes) and math.isnan(v.sm_l2_write_bytes)
            assert v.dram_read_bytes > 0 and v.smem_wavefronts > 0 and 0 <= v.l1_hit_rate <= 1
        right = predict(kernel, Workload(**base, window=(-1, 128)), None, H200_MEASURED).levels
        causal = predict(kernel, Workload(**base, causal=True), None, H200_MEASURED).levels
        assert not any(math.isnan(x) for x in right.as_dict().values())
        # a right side past the diagonal visits more blocks than causal
        assert right.time_s > causal.time_s and right.smem_wavefronts > causal.smem_wavefronts


def test_recorded_band_kernels_are_timed_from_their_own_code():
    """The window experiment's band kernels (d = 64, a causal window's left side; 16 query
    heads over 4 and 1 K/V heads) are in the tables: every level is modelled, and the windowed
    forward is timed from its own main loop -- rising with the window, a short one far below
    dense causal's time, a long one no faster than its share of dense causal's tiles allows (nor
    much slower than dense: its edge tiles run the masking code, and its blocks do not start
    heaviest first); grouped heads visit dense causal's blocks."""
    base = dict(B=1, H=16, N_q=4096, N_k=4096, d=64, causal=True)
    dense = predict("flash_forward_tc", Workload(**base), None, H200_MEASURED)
    t = dense.tiling
    times = {}
    for extra in (dict(window=(128, 0)), dict(window=(512, 0)), dict(window=(2048, 0)),
                  dict(kv_heads=4), dict(kv_heads=1)):
        report = predict("flash_forward_tc", Workload(**base, **extra), None, H200_MEASURED)
        assert not any(math.isnan(x) for x in report.levels.as_dict().values()), extra
        times[extra.get("window", (0,))[0] or extra["kv_heads"]] = report.levels.time_s / dense.levels.time_s
    assert times[128] < times[512] < times[2048] and times[128] < 0.5
    tiles = BlockGrid(4096, 4096, t.Br, t.Bc, causal=True, window=(2048, 0)).active_scores()
    share = tiles / BlockGrid(4096, 4096, t.Br, t.Bc, causal=True).active_scores()
    assert 0.9 * share < times[2048] < 1.1
    assert times[4] == pytest.approx(1.0, abs=0.1) and times[1] == pytest.approx(1.0, abs=0.1)


def test_gqa_shrinks_kv_tensors_and_their_l2_floor():
    w, g = Workload(2, 8, 512, 512, 64, causal=True), Workload(2, 8, 512, 512, 64, causal=True, kv_heads=2)
    assert g.tensor_elements("K") * 4 == w.tensor_elements("K") == 2 * 8 * 512 * 64
    assert g.tensor_elements("Q") == w.tensor_elements("Q") and (g.H_kv, g.group, g.BH_kv) == (2, 4, 4)
    fwd_w, fwd_g = (predict("flash_forward_tc", x, Tiling(64, 32)) for x in (w, g))
    assert fwd_w.hbm_counts() == fwd_g.hbm_counts()     # every query head reads its K/V blocks
    # compulsory DRAM: Q, and K, V once per K/V head
    assert fwd_g.l2.compulsory_read_bytes == 4 * (w.tensor_elements("Q") + 2 * g.tensor_elements("K"))
    bwd_w, bwd_g = (predict("flash_backward_tc", x, Tiling(32, 64), kv_split=1) for x in (w, g))
    for name in ("K", "V"):
        assert bwd_g.hbm[name].reads * 4 == bwd_w.hbm[name].reads
    for name in ("dK", "dV"):
        assert bwd_g.hbm[name].writes * 4 == bwd_w.hbm[name].writes
    assert bwd_g.hbm["dQ"] == bwd_w.hbm["dQ"] and bwd_g.hbm["Q"] == bwd_w.hbm["Q"]
    main_w, main_g = bwd_w.phases[1], bwd_g.phases[1]
    assert (main_g.heads, main_g.units, main_w.heads) == (4, 4, 16)
    assert main_g.block_trips == tuple(4 * n for n in main_w.block_trips)
    assert main_g.unit_reread_elements == 4 * main_w.unit_reread_elements


def test_window_block_order_is_plain():
    """The tensor-core kernels start blocks heaviest first (tile by tile over heads) for an
    upper edge alone; a window with a left side starts them head by head, in order."""
    t = Tiling(16, 16)
    causal = predict("flash_forward_tc", Workload(1, 2, 64, 64, 8, causal=True), t).phases[0]
    right = predict("flash_forward_tc", Workload(1, 2, 64, 64, 8, window=(-1, 5)), t).phases[0]
    both = predict("flash_forward_tc", Workload(1, 2, 64, 64, 8, window=(20, 5)), t).phases[0]
    assert causal.tile_major and right.tile_major and not both.tile_major
    assert causal.block_trips == (4, 3, 2, 1) and right.block_trips == (4, 4, 3, 2)
    # lo = -20, hi = 5: row block 3 (rows 48..63) starts at key 28, in block 1
    assert both.block_trips == (2, 3, 4, 3) and both.blocks_per_unit == 4
    back = predict("flash_backward_tc", Workload(1, 2, 64, 64, 8, window=(20, 5)), t).phases[1]
    assert not back.tile_major and back.block_trips == (3, 4, 3, 2)


# -- validation -------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,match", [
    (dict(window=(3,)), "pair"),
    (dict(window=(-2, 3)), ">= -1"),
    (dict(window=(1.0, 3)), "pair"),
    (dict(window=(True, 3)), "pair"),
    (dict(window=5), "pair"),
    (dict(causal=True, window=(4, 2)), "right must be -1 or 0"),
    (dict(diagonal=3), "causal=True or a window"),
    (dict(window=(-1, -1), diagonal=3), "causal=True or a window"),   # (-1, -1) is no window
    (dict(kv_heads=3), "divisor of H=4"),
    (dict(kv_heads=0), "divisor"),
    (dict(kv_heads=2.0), "divisor"),
])
def test_workload_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Workload(1, 4, 8, 8, 4, **kwargs)


def test_workload_normalises_no_op_arguments():
    assert Workload(1, 4, 8, 8, 4, window=[-1, -1], kv_heads=4) == Workload(1, 4, 8, 8, 4)
    assert Workload(1, 4, 8, 8, 4, window=[2, 3]).window == (2, 3)
    w = Workload(1, 4, 8, 8, 4, window=(2, 1), diagonal=-3, kv_heads=1)
    mask, hi, lo = w.mask()
    assert (mask.upper, mask.lower, mask.group, hi, lo) == (True, True, 4, -2, -5)
    assert w.band_or_gqa and w.kernel_causal is True      # its upper edge; the rest in its variant
    assert mask_variant(mask) == "window+group4" and variant_mask("window+group4", True) == ("", mask)
    plain = Workload(1, 4, 8, 8, 4, causal=True, window=(-1, 0))    # causal's own edge
    assert not plain.band_or_gqa and plain.kernel_causal is True
    right = Workload(1, 4, 8, 8, 4, window=(-1, 0))                 # an upper edge alone
    assert right.band_or_gqa and right.kernel_causal is True


@pytest.mark.parametrize("algorithm", sorted(set(ALGORITHMS) - set(BAND_ALGORITHMS)))
@pytest.mark.parametrize("kwargs", [dict(window=(2, 2)), dict(window=(-1, 1)), dict(kv_heads=2),
                                    dict(causal=True, window=(3, 0))])
def test_other_algorithms_refuse_windows_and_gqa(algorithm, kwargs):
    with pytest.raises(ValueError, match="flash_forward_tc, flash_forward_half, flash_backward_tc"):
        predict(algorithm, Workload(1, 4, 8, 8, 4, **kwargs), Tiling(4, 4))
    # but the causal window (-1, 0) and kv_heads = H are the plain masks
    predict(algorithm, Workload(1, 4, 8, 8, 4, causal=True, window=(-1, 0), kv_heads=4), Tiling(4, 4))


def test_report_names_the_window_and_kv_heads():
    r = predict("flash_forward_tc", Workload(1, 4, 20, 20, 8, window=(3, 1), kv_heads=2), Tiling(16, 8))
    assert "window=(3, 1) kv_heads=2" in r.table()
    row = r.record()
    assert (row["window_left"], row["window_right"], row["kv_heads"]) == (3, 1, 2)
    assert predict("flash_forward_tc", Workload(1, 4, 20, 20, 8), Tiling(16, 8)).record()["kv_heads"] == 4
