"""Tile-level device helpers shared by the attention kernels.

Each helper is built for one ``Tiling`` and head dim ``d`` so that its loop bounds are
compile-time constants (the per-thread register tiles then live in registers, not local memory).

Layout conventions (see ``simulator/tiling.py``):
- a *head tile* (Qi, Kj, Vj, dOi) is ``rows x d`` in shared memory, row stride
  ``LD = Tiling.head_stride(d)``; a *score tile* (S, P, dS) is ``Br x Bc``, row stride
  ``LS = Tiling.score_stride``; both strides are multiples of 4 floats (16-byte rows) and every
  tile starts at a multiple of 4 floats of the kernel's one dynamic shared array;
- thread (ty, tx) owns score rows ``ty + TY*a`` and score columns ``tx + TX*b``, and head
  columns ``tx + TX*b``.
Global tensors are 3-D ``(B*H, N, d)`` (rows ``(B*H, N)``): the launchers flatten batch and heads.
"""
from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace

import numpy as np
from numba import cuda, float32, uint32, uint64

from simulator.tiling import Tiling

from ..memory import simulator_enabled
from ..reference import PHILOX_M, PHILOX_W

from .unroll import static_range, unrolled

NEG_INF = np.float32(-np.inf)   # float32 constants keep kernel arithmetic in fp32
POS_INF = np.float32(np.inf)
ZERO = np.float32(0.0)
ONE = np.float32(1.0)
#: Base-2 scores: exp(x) = exp2(x log2 e); ln y = log2(y) ln 2.
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@cuda.jit(device=True)
def scaled_element(src, row0, r, c, nrows, d, factor):
    """factor * src[(row0 + r) d + c] of a flat row-major (rows, d) tensor, or 0 for r >= nrows
    or c >= d, with no HBM access there: the zero padding of a tile past the sequence's end or
    the head dim."""
    x = ZERO
    if r < nrows and c < d:
        x = factor * src[uint64((row0 + r) * d + c)]
    return x


@cuda.jit(device=True)
def key_block_range(row0, last_row, hi, lo, bc, n_k, upper, lower):
    """(first, end): the K/V blocks j, first <= j < end, that rows row0..last_row must visit --
    all Tc = ceil(n_k / bc), or those holding a key of the band (``simulator.spec``): c <=
    last_row + hi (``upper``) and c >= row0 + lo (``lower``); first >= end when no row sees a
    key."""
    tc = (n_k + bc - 1) // bc
    end = tc
    if upper:
        reach = last_row + hi        # a key c is seen by some row iff c <= reach
        end = 0 if reach < 0 else min(tc, reach // bc + 1)
    first = 0
    if lower:
        start = row0 + lo            # ... and c >= start
        first = tc if start > n_k - 1 else (0 if start <= 0 else start // bc)
    return first, end


@cuda.jit(device=True)
def row_block_range(col0, col_last, hi, lo, br, n_q, upper, lower):
    """(first, end): the row blocks i, first <= i < end, whose rows see a key of the K/V block
    of keys col0..col_last: all Tr = ceil(n_q / br), or those with a row r where r + hi >= col0
    (``upper``) and r + lo <= col_last (``lower``); the row blocks between see it too (the band's
    edges grow with the row), so a KV-outer loop runs from first to end."""
    tr = (n_q + br - 1) // br
    first = 0
    if upper:
        x = col0 - hi                # a row sees the block's first key iff r >= x
        first = tr if x > n_q - 1 else (0 if x <= 0 else x // br)
    end = tr
    if lower:
        y = col_last - lo            # a row sees the block's last key iff r <= y
        end = 0 if y < 0 else min(tr, y // br + 1)
    return first, end


@cuda.jit(device=True)
def needs_mask(row0, max_rows, col0, cols, bc, hi, lo, upper, lower):
    """Whether a tile of rows row0..row0 + max_rows - 1 and keys col0..col0 + cols - 1 (cols <=
    bc) holds a score to mask: a ragged key block, or a corner of the band's edges inside it;
    interior tiles skip the comparisons."""
    return (cols < bc or (upper and col0 + bc - 1 > row0 + hi)
            or (lower and col0 < row0 + max_rows - 1 + lo))


#: Philox4x32-10's constants, and the 32-bit mask and shift, as uint64 (all arithmetic below
#: stays unsigned: Numba would widen a mix of uint64 and int64 to float64)
_M0, _M1 = np.uint64(PHILOX_M[0]), np.uint64(PHILOX_M[1])
_W0, _W1 = np.uint64(PHILOX_W[0]), np.uint64(PHILOX_W[1])
_LOW32, _S32 = np.uint64(0xFFFFFFFF), np.uint64(32)


def _gpu_mul_wide():
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    i32, i64 = ir.IntType(32), ir.IntType(64)

    @intrinsic
    def mul_wide(typingctx, x, m):
        """The 64-bit product of the low 32 bits of x and of m (uint64): one ``mul.wide.u32``,
        one ``IMAD.WIDE.U32``. Numba's uint64 product compiles to a 64-bit multiply that ptxas
        completes with a multiply-add for the high word and an add, where it cannot tell that
        the high words are 0 (tools/dropout_sass.py, 2026-12-07: 2 more instructions a round
        multiply of the half forward's Philox)."""
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(i64, [i32, i32]), "mul.wide.u32 $0, $1, $2;", "=l,r,r")
            return builder.call(asm, [builder.trunc(a, i32) for a in args])
        return types.uint64(types.uint64, types.uint64), codegen
    return mul_wide


@cuda.jit(device=True)
def _simulated_mul_wide(x, m):
    """``mul_wide`` under the CUDA simulator (no inline PTX there)."""
    return (x & _LOW32) * (m & _LOW32)


_mul_wide = _simulated_mul_wide if simulator_enabled() else _gpu_mul_wide()


@cuda.jit(device=True)
def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """The four 32-bit words (as uint64) of Philox4x32-10 at counter (c0, c1, c2, c3) under key
    (k0, k1) -- ``reference.philox4x32_10``, whose known-answer tests it shares through
    ``dropout_words``."""
    x0, x1, x2, x3 = c0, c1, c2, c3
    for _ in range(10):
        p0 = _mul_wide(x0, _M0)
        p1 = _mul_wide(x2, _M1)
        x0, x1, x2, x3 = (p1 >> _S32) ^ x1 ^ k0, p1 & _LOW32, (p0 >> _S32) ^ x3 ^ k1, p0 & _LOW32
        k0 = (k0 + _W0) & _LOW32
        k1 = (k1 + _W1) & _LOW32
    return x0, x1, x2, x3


@cuda.jit(device=True)
def dropout_words(seed_lo, seed_hi, bh, r, c):
    """The Philox words of the call holding score (r, c) of batch-head bh
    (``reference.dropout_keep``): counter (4 (c // 16) + c % 8 // 2, 4 (r // 16) + r % 8 // 2,
    bh, r % 2). A call holds 8 scores: rows r, r + 8 (r % 16 < 8, same parity) x keys c, c + 1,
    c + 8, c + 9 (c % 16 < 8, even) -- an mma C fragment's share of two 8-key tiles, which one
    lane holds whole in the forward (half of it in the transposed backward); score (r, c) takes
    half c % 2 of word ``dropout_word(r, c)``. The counter words come from unsigned shifts (r
    and c are never negative; Python's signed // and % cost a correction each) and the key's
    high words are cleared, so that every round multiplies 32-bit words."""
    cu, ru = uint64(c), uint64(r)
    return philox4x32_10((cu >> uint64(4)) * uint64(4) + ((cu >> uint64(1)) & uint64(3)),
                         (ru >> uint64(4)) * uint64(4) + ((ru >> uint64(1)) & uint64(3)),
                         uint64(bh), ru & uint64(1), uint64(seed_lo) & _LOW32, uint64(seed_hi) & _LOW32)


@cuda.jit(device=True)
def dropout_word(r, c):
    """Which of ``dropout_words``' four words holds score (r, c): 2 (r % 16 // 8) + c % 16 // 8."""
    return 2 * (r % 16 // 8) + c % 16 // 8


@cuda.jit(device=True)
def dropout_kept(word, c, keep_from):
    """Whether the score in column c whose Philox word is ``word`` is kept: its 16-bit random,
    half c % 2 of the word, is at least ``keep_from`` (p 2^16, rounded; < 2^16, as dropout_p <
    1). Compared in 32 bits as that half times 2^16 against keep_from 2^16: the high half is the
    word itself, the low one the word shifted up 16 (one compare, and a shift for the low half)."""
    return uint32(word << uint64(16 - 16 * (c % 2))) >= uint32(keep_from * 65536)


@cuda.jit(device=True)
def lse_base2(x):
    """A row's log-sum-exp L (natural log) in base 2, to match base-2 scores: P = exp2(S - L);
    +inf for a row that saw no key (L = -inf), so that P = 0 there exactly (the backward's
    recomputation; rows past the tail take +inf too)."""
    return x * LOG2E if x != NEG_INF else POS_INF


@cuda.jit(device=True)
def tile_major_block():
    """(tile, head) of this block of a (tiles, heads) grid, read with the head index varying
    fastest: blocks start in grid order (x fastest), so they start tile by tile over all heads
    -- for causal grids, where a tile's work depends on its index, in order of work."""
    at = cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x
    return at // cuda.gridDim.y, at % cuda.gridDim.y


def make_key_row_store(d: int, tiles: int, store):
    """Device function ``(out, acc, factor, row0, key0, cols, t)`` of the KV-outer backwards: a
    lane's C fragments ``acc`` of dKj or dVj, times ``factor`` -- ``tiles`` 8-column tiles of
    keys key0 and key0 + 8 (slots 0, 1 and 2, 3), columns 8n + 2t (+1) -- to rows row0 + key of
    the flat (rows, d) ``out``, keys past ``cols`` and columns past d left out, each element
    through ``store`` (the format's rounding, or ``identity``)."""
    def store_key_row(out, acc, factor, row0, key0, cols, t):
        for h in static_range(2):
            key = key0 + 8 * h
            if key < cols:
                at = uint64((row0 + key) * d + 2 * t)
                for n in static_range(tiles):
                    for e in static_range(2):
                        if 8 * n + 2 * t + e < d:
                            out[at + uint64(8 * n + e)] = store(factor * acc[n, 2 * h + e])
    return cuda.jit(device=True)(unrolled(store_key_row))


def make_key_rows_store(d: int, tiles: int, store):
    """Device function ``(dk, dv, dk_acc, dv_acc, k_factor, row0, key0, cols, t)``: dKj (times
    ``k_factor``) and dVj, each as ``make_key_row_store`` stores one."""
    store_key_row = make_key_row_store(d, tiles, store)

    @cuda.jit(device=True)
    def store_key_rows(dk, dv, dk_acc, dv_acc, k_factor, row0, key0, cols, t):
        store_key_row(dk, dk_acc, k_factor, row0, key0, cols, t)
        store_key_row(dv, dv_acc, ONE, row0, key0, cols, t)
    return store_key_rows


@cuda.jit(device=True)
def masked(r, c, row0, col0, cols, hi, lo, upper, lower):
    """True where score (r, c) of tile (row0, col0) is not a key: past the ragged edge (c >= cols)
    or outside the band (``simulator.spec``): a key past row0 + r + hi (``upper``: causal, or a
    window's right side) or before row0 + r + lo (``lower``: a window's left side)."""
    return (c >= cols or (upper and col0 + c > row0 + r + hi)
            or (lower and col0 + c < row0 + r + lo))


@cuda.jit(device=True)
def identity(x):
    """x itself: a float32 element's value (where a half format's would be ``from_half``)."""
    return x


@cuda.jit(device=True)
def sticky_max(m, x):
    """max(m, x), except that a NaN, once seen, stays (max() would drop it, hiding bad input)."""
    return x if (x > m or x != x) else m


@lru_cache(maxsize=None)
def tile_ops(tiling: Tiling, d: int, dtype: str = "float32") -> SimpleNamespace:
    """Device functions for ``tiling`` at head dim ``d`` (returned as attributes); head tiles
    load from HBM tensors stored as ``dtype`` (``storage.storage_ops``), into fp32 SRAM."""
    from .storage import storage_ops   # (storage -> half -> mma -> this module)

    load = storage_ops(dtype).load
    BR, BC = tiling.Br, tiling.Bc
    TY, TX, T = tiling.threads_y, tiling.threads_x, tiling.threads
    RA, CB = tiling.rows_per_thread, tiling.cols_per_thread
    KA = tiling.kv_rows_per_thread()
    OB = tiling.head_cols_per_thread(d)
    LD, LS = tiling.head_stride(d), tiling.score_stride

    D4 = d - d % 4
    U1, U2, U3 = np.uint64(1), np.uint64(2), np.uint64(3)
    LDU, LDU2, LDU3 = np.uint64(LD), np.uint64(2 * LD), np.uint64(3 * LD)
    LSU, LSU2, LSU3 = np.uint64(LS), np.uint64(2 * LS), np.uint64(3 * LS)

    @cuda.jit(device=True)
    def load_head_tile(smem, at0, src, bh, row0, nrows, max_rows, tid, factor):
        """HBM -> SRAM: tile[r, :] = factor * src[bh, row0 + r, :] (fp32) for r < nrows, the
        tile at offset ``at0`` of ``smem``; rows nrows..max_rows-1 are zero-filled in SRAM (no
        HBM access) so ragged tiles add nothing to any product."""
        ubh = uint64(bh)
        for idx in range(tid, max_rows * d, T):
            r = idx // d
            c = idx - r * d
            at = uint64(at0 + r * LD + c)
            if r < nrows:
                smem[at] = factor * load(src[ubh, uint64(row0 + r), uint64(c)])
            else:
                smem[at] = 0.0

    # The hot loops below read the tiles through the one 16-byte-aligned shared array, at
    # uint64 offsets, four steps per trip:
    # - Numba adds a negative-index fix-up to every signed index (more instructions than FFMAs);
    # - NVVM does not unroll these loops inside the kernels' outer loops, so they are unrolled
    #   by hand, which lets the four loads of consecutive elements become one 16-byte LDS.128
    #   (rows are 16-byte aligned: see Tiling.head_stride) and the rest use immediate offsets.
    @cuda.jit(device=True)
    def rows_dot_rows(acc, smem, a0, b0, ty, tx):
        """acc[a, b] = sum_k A[ty + TY a, k] B[tx + TX b, k] for the head tiles A at offset a0
        and B at b0 of ``smem``   (S = Qi Kj^T, dP = dOi Vj^T)."""
        ia = cuda.local.array(RA, uint64)
        ib = cuda.local.array(CB, uint64)
        y = cuda.local.array((CB, 4), float32)
        for a in range(RA):
            ia[a] = uint64(a0 + min(ty + TY * a, BR - 1) * LD)
            for b in range(CB):
                acc[a, b] = 0.0
        for b in range(CB):
            ib[b] = uint64(b0 + min(tx + TX * b, BC - 1) * LD)
        for k in range(0, D4, 4):
            uk = uint64(k)
            for b in range(CB):
                pb = ib[b] + uk
                y[b, 0], y[b, 1], y[b, 2], y[b, 3] = smem[pb], smem[pb + U1], smem[pb + U2], smem[pb + U3]
            for a in range(RA):
                pa = ia[a] + uk
                x0, x1, x2, x3 = smem[pa], smem[pa + U1], smem[pa + U2], smem[pa + U3]
                for b in range(CB):
                    acc[a, b] += x0 * y[b, 0]
                    acc[a, b] += x1 * y[b, 1]
                    acc[a, b] += x2 * y[b, 2]
                    acc[a, b] += x3 * y[b, 3]
        for k in range(D4, d):
            uk = uint64(k)
            for a in range(RA):
                x = smem[ia[a] + uk]
                for b in range(CB):
                    acc[a, b] += x * smem[ib[b] + uk]

    @cuda.jit(device=True)
    def add_times_four_rows(acc, a, x0, x1, x2, x3, smem, h_row, ib):
        """acc[a, b] += x0 H[0, b] + x1 H[1, b] + x2 H[2, b] + x3 H[3, b] over this thread's
        columns ib of the head tile rows that start at offset h_row (four steps of a product)."""
        for b in range(OB):
            pb = h_row + ib[b]
            acc[a, b] += x0 * smem[pb]
            acc[a, b] += x1 * smem[pb + LDU]
            acc[a, b] += x2 * smem[pb + LDU2]
            acc[a, b] += x3 * smem[pb + LDU3]

    @cuda.jit(device=True)
    def scores_times_tile(acc, smem, s0, h0, n_inner, ty, tx):
        """acc[a, b] += sum_c S[ty + TY a, c] H[c, tx + TX b] for c < n_inner, the score tile S at
        offset s0 and the head tile H at h0 of ``smem``   (O += P Vj, dQ += dS Kj)."""
        ia = cuda.local.array(RA, uint64)
        ib = cuda.local.array(OB, uint64)
        for a in range(RA):
            ia[a] = uint64(s0 + min(ty + TY * a, BR - 1) * LS)
        for b in range(OB):
            ib[b] = uint64(h0 + min(tx + TX * b, d - 1))
        n4 = n_inner - n_inner % 4
        for c in range(0, n4, 4):
            uc = uint64(c)
            h_row = uc * LDU
            for a in range(RA):
                pa = ia[a] + uc
                x0, x1, x2, x3 = smem[pa], smem[pa + U1], smem[pa + U2], smem[pa + U3]
                add_times_four_rows(acc, a, x0, x1, x2, x3, smem, h_row, ib)
        for c in range(n4, n_inner):
            uc = uint64(c)
            h_row = uc * LDU
            for a in range(RA):
                x = smem[ia[a] + uc]
                for b in range(OB):
                    acc[a, b] += x * smem[h_row + ib[b]]

    @cuda.jit(device=True)
    def scores_t_times_tile(acc, smem, s0, h0, n_inner, ty, tx):
        """acc[a, b] += sum_r S[r, ty + TY a] H[r, tx + TX b] for r < n_inner, the score tile S at
        offset s0 and the head tile H at h0 of ``smem``   (dV += P^T dOi, dK += dS^T Qi)."""
        ia = cuda.local.array(KA, uint64)
        ib = cuda.local.array(OB, uint64)
        for a in range(KA):
            ia[a] = uint64(s0 + min(ty + TY * a, BC - 1))
        for b in range(OB):
            ib[b] = uint64(h0 + min(tx + TX * b, d - 1))
        n4 = n_inner - n_inner % 4
        for r in range(0, n4, 4):
            ur = uint64(r)
            s_row = ur * LSU
            h_row = ur * LDU
            for a in range(KA):
                pa = s_row + ia[a]
                x0, x1, x2, x3 = smem[pa], smem[pa + LSU], smem[pa + LSU2], smem[pa + LSU3]
                add_times_four_rows(acc, a, x0, x1, x2, x3, smem, h_row, ib)
        for r in range(n4, n_inner):
            ur = uint64(r)
            s_row = ur * LSU
            h_row = ur * LDU
            for a in range(KA):
                x = smem[s_row + ia[a]]
                for b in range(OB):
                    acc[a, b] += x * smem[h_row + ib[b]]

    return SimpleNamespace(
        BR=BR, BC=BC, TY=TY, TX=TX, T=T, RA=RA, CB=CB, KA=KA, OB=OB, LD=LD, LS=LS,
        load_head_tile=load_head_tile, rows_dot_rows=rows_dot_rows,
        scores_times_tile=scores_times_tile, scores_t_times_tile=scores_t_times_tile,
    )
