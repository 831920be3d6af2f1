"""predict == docs/traffic-contract.md, walked literally block by block (and element by element)."""
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import ALGORITHMS, ModelTiling, Tiling, Workload, predict
from simulator.flash import RECOMPUTED, recompute_tiling
from simulator.tiling import MATMUL_BK

from .helpers import causal_masks, mma_tiling


def _ceil(a, b):
    return -(-a // b)


class Walk:
    """Counts of one algorithm on one workload, by walking the contract's loops."""

    def __init__(self, w: Workload, t: Tiling):
        self.w, self.t = w, t
        self.reads, self.writes = Counter(), Counter()
        self.sram_reads, self.sram_writes = Counter(), Counter()
        self.tr, self.tc = _ceil(w.N_q, t.Br), _ceil(w.N_k, t.Bc)
        self.off = w.N_k - w.N_q if w.diagonal is None else w.diagonal   # as given, unclamped

    def rows(self, i):
        return min(self.t.Br, self.w.N_q - i * self.t.Br)

    def cols(self, j):
        return min(self.t.Bc, self.w.N_k - j * self.t.Bc)

    def active(self, i, j):
        last_i = i * self.t.Br + self.rows(i) - 1
        return not self.w.causal or j * self.t.Bc <= last_i + self.off

    def nb(self, i):
        return sum(self.active(i, j) for j in range(self.tc))

    def visible(self, r, c):
        return not self.w.causal or c <= r + self.off

    def kv_outer(self, kv_sram):
        """The KV-outer loop of the backwards: K/V block j (K and V read once, ``kv_sram``
        elements of each stored) and the rows of each active row block, in order."""
        for j in range(self.tc):
            for name in ("K", "V"):
                self.reads[name] += self.cols(j) * self.w.d
                self.sram_writes[name] += kv_sram
            yield j, [self.rows(i) for i in range(self.tr) if self.active(i, j)]

    # -- generic pieces ---------------------------------------------------------------------
    def matmul(self, a, b, c, m, n, k):
        t = self.t
        for rt in range(_ceil(m, t.Br)):
            for ct in range(_ceil(n, t.Bc)):
                self.reads[a] += min(t.Br, m - rt * t.Br) * k
                self.reads[b] += k * min(t.Bc, n - ct * t.Bc)
                for _ in range(0, k, MATMUL_BK):
                    self.sram_writes[a] += t.Br * MATMUL_BK
                    self.sram_writes[b] += MATMUL_BK * t.Bc
                    for _thread in range(t.threads):
                        self.sram_reads[a] += MATMUL_BK * t.rows_per_thread
                        self.sram_reads[b] += MATMUL_BK * t.cols_per_thread
        self.writes[c] += m * n

    def load(self, name, valid_rows, tile_rows, width):
        """HBM -> SRAM tile load: valid rows from HBM, the whole padded tile stored."""
        self.reads[name] += valid_rows * width
        self.sram_writes[name] += tile_rows * width

    def product(self, a, b, steps, a_per_thread, b_per_thread):
        for _thread in range(self.t.threads):
            self.sram_reads[a] += steps * a_per_thread
            self.sram_reads[b] += steps * b_per_thread

    # -- algorithms ------------------------------------------------------------------------
    def standard_forward(self):
        w = self.w
        self.matmul("Q", "K", "S", w.N_q, w.N_k, w.d)
        for r in range(w.N_q):
            for c in range(w.N_k):
                self.reads["S"] += 2 * self.visible(r, c)
                self.writes["P"] += 1
        self.matmul("P", "V", "O", w.N_q, w.d, w.N_k)

    def standard_backward(self):
        w = self.w
        nq, nk, d = w.N_q, w.N_k, w.d
        self.matmul("P", "dO", "dV", nk, d, nq)
        self.matmul("dO", "V", "dP", nq, nk, d)
        self.reads["dO"] += nq * d
        self.reads["O"] += nq * d
        self.writes["D"] += nq
        for _r in range(nq):
            self.reads["D"] += 1
            for _c in range(nk):
                self.reads["P"] += 1
                self.reads["dP"] += 1
                self.writes["dS"] += 1
        self.matmul("dS", "K", "dQ", nq, d, nk)
        self.matmul("dS", "Q", "dK", nk, d, nq)

    def _forward_products(self, i, j):
        t, d = self.t, self.w.d
        self.product("Q", "K", d, t.rows_per_thread, t.cols_per_thread)      # S = Qi Kj^T
        self.sram_writes["P"] += t.Br * t.Bc
        self.product("P", "V", self.cols(j), t.rows_per_thread, t.head_cols_per_thread(d))

    def flash_forward_v2(self):
        t, d = self.t, self.w.d
        for i in range(self.tr):
            self.load("Q", self.rows(i), t.Br, d)
            for j in range(self.tc):
                if self.active(i, j):
                    self.load("K", self.cols(j), t.Bc, d)
                    self.load("V", self.cols(j), t.Bc, d)
                    self._forward_products(i, j)
            self.writes["O"] += self.rows(i) * d
            self.writes["L"] += self.rows(i)

    def flash_forward_v1(self):
        t, d = self.t, self.w.d
        for j in range(self.tc):
            self.load("K", self.cols(j), t.Bc, d)
            self.load("V", self.cols(j), t.Bc, d)
            for i in range(self.tr):
                if not self.active(i, j):
                    continue
                rows = self.rows(i)
                self.load("Q", rows, t.Br, d)
                if j > 0:
                    self.reads["O"] += rows * d
                    self.reads["l"] += rows
                    self.reads["m"] += rows
                self._forward_products(i, j)
                self.writes["O"] += rows * d
                if j < self.nb(i) - 1:
                    self.writes["l"] += rows
                    self.writes["m"] += rows
                else:
                    self.writes["L"] += rows
        for i in range(self.tr):
            if self.nb(i) == 0:
                self.writes["O"] += self.rows(i) * d
                self.writes["L"] += self.rows(i)

    def _backward_kv(self, atomic):
        t, d = self.t, self.w.d
        ra, ca, ka, ob = t.rows_per_thread, t.cols_per_thread, t.kv_rows_per_thread(), t.head_cols_per_thread(d)
        for j in range(self.tc):
            self.load("K", self.cols(j), t.Bc, d)
            self.load("V", self.cols(j), t.Bc, d)
            for i in range(self.tr):
                if not self.active(i, j):
                    continue
                rows = self.rows(i)
                self.load("Q", rows, t.Br, d)
                self.load("dO", rows, t.Br, d)
                self.load("L", rows, t.Br, 1)
                self.load("D", rows, t.Br, 1)
                self.product("Q", "K", d, ra, ca)
                self.product("dO", "V", d, ra, ca)
                self.sram_writes["P"] += t.Br * t.Bc
                self.sram_writes["dS"] += t.Br * t.Bc
                self.product("P", "dO", rows, ka, ob)
                self.product("dS", "Q", rows, ka, ob)
                if atomic:
                    self.product("dS", "K", self.cols(j), ra, ob)
                    self.reads["dQ"] += rows * d
                    self.writes["dQ"] += rows * d
            self.writes["dK"] += self.cols(j) * d
            self.writes["dV"] += self.cols(j) * d

    def _preprocess(self, zero_dq):
        w = self.w
        self.reads["dO"] += w.N_q * w.d
        self.reads["O"] += w.N_q * w.d
        self.writes["D"] += w.N_q
        if zero_dq:
            self.writes["dQ"] += w.N_q * w.d

    def flash_backward(self):
        self._preprocess(zero_dq=True)
        self._backward_kv(atomic=True)

    def flash_backward_deterministic(self):
        """The FFMA forward again at its own default tiling, its O and L under their
        recomputed names, read in place of the caller's; then the two FFMA kernels."""
        t, d = self.t, self.w.d
        forward = Walk(self.w, recompute_tiling(self.w.d))
        forward.flash_forward_v2()
        for mine, theirs in ((self.reads, forward.reads), (self.sram_reads, forward.sram_reads),
                             (self.sram_writes, forward.sram_writes)):
            mine.update(theirs)
        self.writes.update({RECOMPUTED.get(k, k): v for k, v in forward.writes.items()})
        before = Counter(self.reads)
        self._preprocess(zero_dq=False)
        self._backward_kv(atomic=False)
        for name in ("O", "L"):        # the caller's O and L are never read
            self.reads[RECOMPUTED[name]] += self.reads[name] - before[name]
            self.reads[name] = before[name]
        for i in range(self.tr):
            rows = self.rows(i)
            self.load("Q", rows, t.Br, d)
            self.load("dO", rows, t.Br, d)
            self.load("L", rows, t.Br, 1)
            self.reads["L"] -= rows                 # (from HBM: the recomputed L)
            self.reads[RECOMPUTED["L"]] += rows
            self.load("D", rows, t.Br, 1)
            for j in range(self.tc):
                if self.active(i, j):
                    self.load("K", self.cols(j), t.Bc, d)
                    self.load("V", self.cols(j), t.Bc, d)
                    self.product("Q", "K", d, t.rows_per_thread, t.cols_per_thread)
                    self.product("dO", "V", d, t.rows_per_thread, t.cols_per_thread)
                    self.sram_writes["dS"] += t.Br * t.Bc
                    self.product("dS", "K", self.cols(j), t.rows_per_thread, t.head_cols_per_thread(d))
            self.writes["dQ"] += rows * d


    def flash_forward_tc(self):
        """The tensor-core forward: FA2-order HBM; SRAM tiles hold hi and lo parts of d rounded
        up to 8 columns; each warp (16 rows) reads its Q rows and all of K and V per step."""
        t, d = self.t, self.w.d
        d8 = _ceil(d, 8) * 8
        for i in range(self.tr):
            self.reads["Q"] += self.rows(i) * d
            self.sram_writes["Q"] += t.Br * d8 * 2
            for j in range(self.tc):
                if self.active(i, j):
                    for name in ("K", "V"):
                        self.reads[name] += self.cols(j) * d
                        self.sram_writes[name] += t.Bc * d8 * 2
                    for _warp in range(t.Br // 16):
                        self.sram_reads["Q"] += 16 * d8 * 2
                        self.sram_reads["K"] += t.Bc * d8 * 2
                        self.sram_reads["V"] += t.Bc * d8 * 2
            self.writes["O"] += self.rows(i) * d
            self.writes["L"] += self.rows(i)

    def flash_forward_half(self):
        """The fp16 / bf16 forward: FA2-order HBM; SRAM tiles of d rounded up to 16 columns (one
        16-bit element each); each warp reads its Q rows and all of K and V per step."""
        t, d = self.t, self.w.d
        d16 = _ceil(d, 16) * 16
        for i in range(self.tr):
            self.reads["Q"] += self.rows(i) * d
            self.sram_writes["Q"] += t.Br * d16
            for j in range(self.tc):
                if self.active(i, j):
                    for name in ("K", "V"):
                        self.reads[name] += self.cols(j) * d
                        self.sram_writes[name] += t.Bc * d16
                    for _warp in range(t.Br // t.rows_per_warp("flash_forward_half")):
                        self.sram_reads["Q"] += t.rows_per_warp("flash_forward_half") * d16
                        self.sram_reads["K"] += t.Bc * d16
                        self.sram_reads["V"] += t.Bc * d16
            self.writes["O"] += self.rows(i) * d
            self.writes["L"] += self.rows(i)

    def flash_backward_tc(self):
        """The tensor-core backward: v3's HBM; SRAM tiles of hi and lo parts of d rounded up to
        8 columns; per active pair each warp (16 keys) reads its K and V rows, all of Q and dO
        twice, and runs its share of the 16 x 8 tiles of dQ (16 rows of dS, read once where its
        tiles share their rows; 8 columns of K); Q and dO are stored twice (row-major and
        transposed)."""
        t, d = self.t, self.w.d
        d8 = _ceil(d, 8) * 8
        warps = t.Bc // 16
        dq_tiles = (t.Br // 16) * (d8 // 8)
        self._preprocess(zero_dq=True)
        for j, pairs in self.kv_outer(t.Bc * d8 * 2):
            for rows in pairs:
                for name in ("Q", "dO"):
                    self.reads[name] += rows * d
                    self.sram_writes[name] += 2 * t.Br * d8 * 2
                for name in ("L", "D"):
                    self.reads[name] += rows
                    self.sram_writes[name] += t.Br
                self.sram_writes["dS"] += t.Br * t.Bc * 2
                for _warp in range(warps):
                    self.sram_reads["K"] += 16 * d8 * 2         # S^T
                    self.sram_reads["V"] += 16 * d8 * 2         # dP^T
                    self.sram_reads["Q"] += 2 * t.Br * d8 * 2   # S^T, dK
                    self.sram_reads["dO"] += 2 * t.Br * d8 * 2  # dP^T, dV
                    per_warp = _ceil(dq_tiles, warps)
                    for tile in range(per_warp):
                        if tile == 0 or (d8 // 8) % per_warp:
                            self.sram_reads["dS"] += 16 * t.Bc * 2
                        self.sram_reads["K"] += t.Bc * 8 * 2
                self.reads["dQ"] += rows * d
                self.writes["dQ"] += rows * d
            self.writes["dK"] += self.cols(j) * d
            self.writes["dV"] += self.cols(j) * d

    def flash_backward_half(self):
        """The fp16 / bf16 backward: the tensor-core backward's HBM, but dQ accumulated in the fp32
        "dQ_accum" (zeroed, one atomic a pair) and then rounded into dQ; SRAM tiles of 16-bit
        elements, d rounded up to 16 columns (L and D: two elements a value); per active pair
        each warp (16 keys) reads its K and V rows once, all of Q and dO twice, and runs its share
        of the 16 x 16 pieces of dQ (16 rows of dS^T, read once where its pieces share their
        rows; 16 columns of K)."""
        t, d = self.t, self.w.d
        d16 = _ceil(d, 16) * 16
        warps = t.Bc // 16
        pieces = (t.Br // 16) * (d16 // 16)
        per_warp = _ceil(pieces, warps)
        w = self.w
        self.reads["dO"] += w.N_q * d
        self.reads["O"] += w.N_q * d
        self.writes["D"] += w.N_q
        self.writes["dQ_accum"] += w.N_q * d
        for j, pairs in self.kv_outer(t.Bc * d16):
            for rows in pairs:
                for name in ("Q", "dO"):
                    self.reads[name] += rows * d
                    self.sram_writes[name] += t.Br * d16
                for name in ("L", "D"):
                    self.reads[name] += rows
                    self.sram_writes[name] += 2 * t.Br
                self.sram_writes["dS"] += t.Bc * t.Br
                for _warp in range(warps):
                    self.sram_reads["K"] += 16 * d16           # S^T
                    self.sram_reads["V"] += 16 * d16           # dP^T
                    self.sram_reads["Q"] += 2 * t.Br * d16     # S^T, dK
                    self.sram_reads["dO"] += 2 * t.Br * d16    # dP^T, dV
                    for piece in range(per_warp):
                        if piece == 0 or (d16 // 16) % per_warp:
                            self.sram_reads["dS"] += 16 * t.Bc
                        self.sram_reads["K"] += t.Bc * 16
                self.reads["dQ_accum"] += rows * d
                self.writes["dQ_accum"] += rows * d
            self.writes["dK"] += self.cols(j) * d
            self.writes["dV"] += self.cols(j) * d
        self.reads["dQ_accum"] += w.N_q * d
        self.writes["dQ"] += w.N_q * d


def for_algorithm(algorithm, t):
    if algorithm in ("flash_forward_tc", "flash_forward_half", "flash_backward_tc", "flash_backward_half"):
        return mma_tiling(t, algorithm)
    return t


def walked(algorithm, w, t):
    walk = Walk(w, t)
    getattr(walk, algorithm)()
    scale = lambda c: {k: v * w.BH for k, v in c.items() if v}
    return scale(walk.reads), scale(walk.writes), scale(walk.sram_reads), scale(walk.sram_writes)


def assert_matches(algorithm, w, t):
    reads, writes, sram_reads, sram_writes = walked(algorithm, w, t)
    r = predict(algorithm, w, t)
    assert {k: v.reads for k, v in r.hbm.items() if v.reads} == reads
    assert {k: v.writes for k, v in r.hbm.items() if v.writes} == writes
    assert {k: v.reads for k, v in r.sram.items() if v.reads} == sram_reads
    assert {k: v.writes for k, v in r.sram.items() if v.writes} == sram_writes
    assert r.hbm_read_bytes == sum(reads.values()) * w.dtype_bytes
    assert r.hbm_write_bytes == sum(writes.values()) * w.dtype_bytes


#: The algorithms ``Walk`` walks (fa2_fp16x3's forward and backward, over heads of q, k and v
#: (and dO), are walked by tests/test_simulator_band.py's ``BandWalk``).
WALKED = sorted(set(ALGORITHMS) - {"flash_forward_fp16x3", "flash_backward_fp16x3"})


@pytest.mark.parametrize("algorithm", WALKED)
@pytest.mark.parametrize("causal,diagonal", [(False, None), (True, None), (True, 0), (True, -3),
                                             (True, 9)])
def test_tiny_case_matches_the_contract(algorithm, causal, diagonal):
    assert_matches(algorithm, Workload(1, 2, 5, 7, 3, causal=causal, diagonal=diagonal),
                   for_algorithm(algorithm, Tiling(2, 3)))


def test_hand_counted_flash_v2_causal():
    # Nq=5, Nk=7, Br=2, Bc=3, off=2: row blocks of 2, 2, 1 rows see 2, 2, 3 column blocks,
    # i.e. 6, 6, 7 keys; K and V are read (6 + 6 + 7) * d = 57 elements per head each.
    r = predict("flash_forward_v2", Workload(1, 1, 5, 7, 3, causal=True), Tiling(2, 3))
    assert r.hbm_counts() == {"Q": (15, 0), "K": (57, 0), "V": (57, 0), "O": (0, 15), "L": (0, 5)}


def test_hand_counted_flash_v2_top_left():
    # Nq=5, Nk=7, Br=2, Bc=3, diagonal 0: last rows 1, 3, 4 reach keys 1, 3, 4, so the row blocks
    # see 1, 2, 2 column blocks, 3, 6, 6 keys: K and V reads (3 + 6 + 6) * d = 45 each.
    w = Workload(1, 1, 5, 7, 3, causal=True, diagonal=0)
    assert w.causal_diagonal == 0
    r = predict("flash_forward_v2", w, Tiling(2, 3))
    assert r.hbm_counts() == {"Q": (15, 0), "K": (45, 0), "V": (45, 0), "O": (0, 15), "L": (0, 5)}


def test_hand_counted_flash_v1_causal_nq_above_nk():
    # Nq=7, Nk=3, Br=Bc=2, off=-4: last rows 1, 3, 5, 6 reach -3, -1, 1, 2 -> nb = 0, 0, 1, 2.
    # Blocks 0, 1 write zeros; block 2 (2 rows) is visited once; block 3 (1 row) twice.
    r = predict("flash_forward_v1", Workload(1, 1, 7, 3, 1, causal=True), Tiling(2, 2))
    assert r.hbm_counts() == {
        "Q": (2 + 1 + 1, 0), "K": (3, 0), "V": (3, 0),
        "O": (1, 4 + 2 + 2), "L": (0, 7), "m": (1, 1), "l": (1, 1)}


shapes = st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 11), st.integers(1, 11),
                   st.integers(1, 5), causal_masks(14))


@settings(max_examples=300, deadline=None)
@given(algorithm=st.sampled_from(WALKED), shape=shapes,
       br=st.integers(1, 9), bc=st.integers(1, 9))
def test_random_shapes_match_the_contract(algorithm, shape, br, bc):
    b, h, nq, nk, d, (causal, diagonal) = shape
    assert_matches(algorithm, Workload(b, h, nq, nk, d, causal=causal, diagonal=diagonal),
                   for_algorithm(algorithm, Tiling(br, bc)))


def test_model_tiling_counts_like_a_tiling():
    w = Workload(1, 1, 9, 10, 2, causal=True)
    assert predict("flash_backward", w, ModelTiling(3, 4)).hbm == predict("flash_backward", w, Tiling(3, 4)).hbm
    assert_matches("flash_forward_v2", Workload(1, 1, 40, 1100, 2), ModelTiling(2, 1040))


def test_large_workload_is_fast_and_integral():
    import time
    start = time.perf_counter()
    r = predict("flash_backward", Workload(2, 4, 65536, 65536, 64, causal=True), Tiling(8, 8))
    assert time.perf_counter() - start < 2.0
    assert all(isinstance(v.reads, int) for v in r.hbm.values())
    assert r.hbm["dQ"].reads == r.hbm["dQ"].writes - 8 * 65536 * 64
