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
from numba import cuda

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

    @cuda.jit(device=True)
    def load_head_tile(dst, src, bh, row0, nrows, max_rows, tid, factor):
        """HBM -> SRAM: dst[r, :] = factor * src[bh, row0 + r, :] for r < nrows; rows
        nrows..max_rows-1 are zero-filled in SRAM (no HBM access) so ragged tiles add nothing
        to any product."""
        for idx in range(tid, max_rows * d, T):
            r = idx // d
            c = idx - r * d
            if r < nrows:
                dst[r * LD + c] = factor * src[bh, row0 + r, c]
            else:
                dst[r * LD + c] = 0.0

    @cuda.jit(device=True)
    def rows_dot_rows(acc, a_tile, b_tile, ty, tx):
        """acc[a, b] = sum_k A[ty + TY a, k] * B[tx + TX b, k]   (S = Qi Kj^T, dP = dOi Vj^T)."""
        for a in range(RA):
            for b in range(CB):
                acc[a, b] = 0.0
        for k in range(d):
            for a in range(RA):
                x = a_tile[min(ty + TY * a, BR - 1) * LD + k]
                for b in range(CB):
                    acc[a, b] += x * b_tile[min(tx + TX * b, BC - 1) * LD + k]

    @cuda.jit(device=True)
    def scores_times_tile(acc, s_tile, h_tile, n_inner, ty, tx):
        """acc[a, b] += sum_c S[ty + TY a, c] * H[c, tx + TX b] for c < n_inner  (O += P Vj, dQ += dS Kj)."""
        for c in range(n_inner):
            for a in range(RA):
                x = s_tile[min(ty + TY * a, BR - 1) * LS + c]
                for b in range(OB):
                    acc[a, b] += x * h_tile[c * LD + min(tx + TX * b, d - 1)]

    @cuda.jit(device=True)
    def scores_t_times_tile(acc, s_tile, h_tile, n_inner, ty, tx):
        """acc[a, b] += sum_r S[r, ty + TY a] * H[r, tx + TX b] for r < n_inner  (dV += P^T dOi, dK += dS^T Qi)."""
        for r in range(n_inner):
            for a in range(KA):
                x = s_tile[r * LS + min(ty + TY * a, BC - 1)]
                for b in range(OB):
                    acc[a, b] += x * h_tile[r * LD + min(tx + TX * b, d - 1)]

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
