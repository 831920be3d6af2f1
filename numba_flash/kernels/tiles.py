"""Tile-level device helpers shared by the attention kernels.

Each helper is built for one ``Tiling`` and head dim ``d`` so that its loop bounds are
compile-time constants (the per-thread register tiles then live in registers, not local memory).

Layout conventions (see ``simulator/tiling.py``):
- a *head tile* (Qi, Kj, Vj, dOi) is ``rows x d`` in shared memory, row stride ``LD = d | 1``;
- a *score tile* (S, P, dS) is ``Br x Bc`` in shared memory, row stride ``LS = Bc | 1``;
- thread (ty, tx) owns score rows ``ty + TY*a`` and score columns ``tx + TX*b``, and head
  columns ``tx + TX*b``.
Global tensors are 3-D ``(B*H, N, d)`` (rows ``(B*H, N)``): the launchers flatten batch and heads.
"""
from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace

import numpy as np
from numba import cuda, uint64

from simulator.tiling import Tiling

NEG_INF = np.float32(-np.inf)   # float32 constants keep kernel arithmetic in fp32
POS_INF = np.float32(np.inf)
ZERO = np.float32(0.0)
ONE = np.float32(1.0)
#: Base-2 scores: exp(x) = exp2(x log2 e); ln y = log2(y) ln 2.
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@cuda.jit(device=True)
def active_blocks(last_row, off, bc, tc, causal):
    """Number of K/V blocks row block i must visit: all Tc, or (causal) those with a key
    ``c <= last_row + off`` -- the prefix j < floor((last_row + off)/Bc) + 1, clamped to [0, Tc]."""
    if not causal:
        return tc
    reach = last_row + off
    if reach < 0:
        return 0
    return min(tc, reach // bc + 1)


@lru_cache(maxsize=None)
def tile_ops(tiling: Tiling, d: int) -> SimpleNamespace:
    """Device functions for ``tiling`` at head dim ``d`` (returned as attributes)."""
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
    def load_head_tile(dst, src, bh, row0, nrows, max_rows, tid, factor):
        """HBM -> SRAM: dst[r, :] = factor * src[bh, row0 + r, :] for r < nrows; rows
        nrows..max_rows-1 are zero-filled in SRAM (no HBM access) so ragged tiles add nothing
        to any product."""
        ubh = uint64(bh)
        for idx in range(tid, max_rows * d, T):
            r = idx // d
            c = idx - r * d
            at = uint64(r) * LDU + uint64(c)
            if r < nrows:
                dst[at] = factor * src[ubh, uint64(row0 + r), uint64(c)]
            else:
                dst[at] = 0.0

    # The hot loops index shared memory with uint64 offsets (Numba adds a negative-index fix-up
    # to every signed index) and take four steps per trip by hand: NVVM does not unroll these
    # loops inside the kernels' outer loops, and unrolled, each shared load uses an immediate
    # offset instead of an address computation. Measured in SASS: 64 FFMA + 32 LDS + ~6 other
    # instructions per trip, against 16 FFMA + 8 LDS + ~24 other before.
    @cuda.jit(device=True)
    def rows_dot_rows(acc, a_tile, b_tile, ty, tx):
        """acc[a, b] = sum_k A[ty + TY a, k] * B[tx + TX b, k]   (S = Qi Kj^T, dP = dOi Vj^T)."""
        ia = cuda.local.array(RA, uint64)
        ib = cuda.local.array(CB, uint64)
        for a in range(RA):
            ia[a] = uint64(min(ty + TY * a, BR - 1) * LD)
            for b in range(CB):
                acc[a, b] = 0.0
        for b in range(CB):
            ib[b] = uint64(min(tx + TX * b, BC - 1) * LD)
        for k in range(0, D4, 4):
            uk = uint64(k)
            for a in range(RA):
                pa = ia[a] + uk
                x0, x1, x2, x3 = a_tile[pa], a_tile[pa + U1], a_tile[pa + U2], a_tile[pa + U3]
                for b in range(CB):
                    pb = ib[b] + uk
                    acc[a, b] += x0 * b_tile[pb]
                    acc[a, b] += x1 * b_tile[pb + U1]
                    acc[a, b] += x2 * b_tile[pb + U2]
                    acc[a, b] += x3 * b_tile[pb + U3]
        for k in range(D4, d):
            uk = uint64(k)
            for a in range(RA):
                x = a_tile[ia[a] + uk]
                for b in range(CB):
                    acc[a, b] += x * b_tile[ib[b] + uk]

    @cuda.jit(device=True)
    def scores_times_tile(acc, s_tile, h_tile, n_inner, ty, tx):
        """acc[a, b] += sum_c S[ty + TY a, c] * H[c, tx + TX b] for c < n_inner  (O += P Vj, dQ += dS Kj)."""
        ia = cuda.local.array(RA, uint64)
        ib = cuda.local.array(OB, uint64)
        for a in range(RA):
            ia[a] = uint64(min(ty + TY * a, BR - 1) * LS)
        for b in range(OB):
            ib[b] = uint64(min(tx + TX * b, d - 1))
        n4 = n_inner - n_inner % 4
        for c in range(0, n4, 4):
            uc = uint64(c)
            h_row = uc * LDU
            for a in range(RA):
                pa = ia[a] + uc
                x0, x1, x2, x3 = s_tile[pa], s_tile[pa + U1], s_tile[pa + U2], s_tile[pa + U3]
                for b in range(OB):
                    pb = h_row + ib[b]
                    acc[a, b] += x0 * h_tile[pb]
                    acc[a, b] += x1 * h_tile[pb + LDU]
                    acc[a, b] += x2 * h_tile[pb + LDU2]
                    acc[a, b] += x3 * h_tile[pb + LDU3]
        for c in range(n4, n_inner):
            uc = uint64(c)
            h_row = uc * LDU
            for a in range(RA):
                x = s_tile[ia[a] + uc]
                for b in range(OB):
                    acc[a, b] += x * h_tile[h_row + ib[b]]

    @cuda.jit(device=True)
    def scores_t_times_tile(acc, s_tile, h_tile, n_inner, ty, tx):
        """acc[a, b] += sum_r S[r, ty + TY a] * H[r, tx + TX b] for r < n_inner  (dV += P^T dOi, dK += dS^T Qi)."""
        ia = cuda.local.array(KA, uint64)
        ib = cuda.local.array(OB, uint64)
        for a in range(KA):
            ia[a] = uint64(min(ty + TY * a, BC - 1))
        for b in range(OB):
            ib[b] = uint64(min(tx + TX * b, d - 1))
        n4 = n_inner - n_inner % 4
        for r in range(0, n4, 4):
            ur = uint64(r)
            s_row = ur * LSU
            h_row = ur * LDU
            for a in range(KA):
                pa = s_row + ia[a]
                x0, x1, x2, x3 = s_tile[pa], s_tile[pa + LSU], s_tile[pa + LSU2], s_tile[pa + LSU3]
                for b in range(OB):
                    pb = h_row + ib[b]
                    acc[a, b] += x0 * h_tile[pb]
                    acc[a, b] += x1 * h_tile[pb + LDU]
                    acc[a, b] += x2 * h_tile[pb + LDU2]
                    acc[a, b] += x3 * h_tile[pb + LDU3]
        for r in range(n4, n_inner):
            ur = uint64(r)
            s_row = ur * LSU
            h_row = ur * LDU
            for a in range(KA):
                x = s_tile[s_row + ia[a]]
                for b in range(OB):
                    acc[a, b] += x * h_tile[h_row + ib[b]]

    @cuda.jit(device=True)
    def zero(acc, rows, cols):
        for a in range(rows):
            for b in range(cols):
                acc[a, b] = 0.0

    return SimpleNamespace(
        BR=BR, BC=BC, TY=TY, TX=TX, T=T, RA=RA, CB=CB, KA=KA, OB=OB, LD=LD, LS=LS,
        load_head_tile=load_head_tile, rows_dot_rows=rows_dot_rows,
        scores_times_tile=scores_times_tile, scores_t_times_tile=scores_t_times_tile, zero=zero,
    )
