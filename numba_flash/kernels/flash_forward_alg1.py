"""FlashAttention forward in the paper's Algorithm 1 loop order (the order its IO proof counts).

One thread block per batch-head walks the whole attention matrix: the outer loop streams K/V
blocks, the inner loop visits every Q block, and O, l, m travel through HBM on every inner step::

    for j < Tc:                                      (outer: Kj, Vj HBM -> SRAM once)
        for i with (i, j) active:                    (inner; causal: fully masked blocks skipped)
            load Qi -> SRAM; load O_i, l_i, m_i from HBM (not on the first visit, j = 0)
            S = scale Qi Kj^T, masked
            m_new = max(m_i, rowmax S); P = exp(S - m_new)
            l_new = exp(m_i - m_new) l_i + rowsum P
            O_i = diag(1/l_new) (diag(l_i exp(m_i - m_new)) O_i + P Vj)   -> HBM (line 12)
            l_i, m_i -> HBM; on the last visit of row block i, L_i = m_new + log l_new instead

The paper's line 9-12 use the block's own max m~_ij for P~_ij = exp(S - m~_ij); exponentiating
against m_new directly is the same arithmetic with one rescale fewer.  The paper initialises O, l,
m in HBM (line 2); here the first visit simply starts from O = 0, l = 0, m = -inf.
This kernel is for the IO analysis, not for speed: B*H blocks only.

Storage: the HBM format ``dtype`` ("float32", "float16", "bfloat16") is a compile-time parameter
of the one body (``storage.storage_ops``). In half, Q, K, V and O hold the format's 16-bit
patterns, converted to fp32 as the tiles load and rounded to nearest even as O is stored -- on
every inner step, as Algorithm 1 writes O_i back to HBM (line 12), so O is rounded once per
visit of its row block; l, m and L stay fp32. Arithmetic and the SRAM tiles are fp32 in every
format: the element counts are the same, their bytes halve.

Versions (H200, fp32, B=4 H=16 N=4096 d=64, `python -m experiments bench`, 2026-11-29):
    v1  Algorithm 1 as written, tiles and thread layout shared with the FA2-order kernel, row-wise
        softmax one thread per row: 3.2 TFLOP/s (85.9 ms; B*H = 64 blocks on 132 SMs).
    v2  half storage: Q, K, V, O in the HBM format ``dtype`` (fp16 / bf16 patterns converted on
        load and store, fp32 arithmetic, SRAM and l, m, L); in fp32 the O update is now fp32
        FMAs (v1's ``else 0.0`` for the first visit made it fp64); rows past N_q get P = 0
        (v1 left masked -inf there, NaN in discarded products) (not timed yet).
"""
from __future__ import annotations

import math

from numba import cuda, float32

from simulator.tiling import Tiling

from ..kernel_cache import kernel_factory
from ..launch import jit_options, smem_alignment
from .storage import storage_ops
from .tiles import NEG_INF, ONE, ZERO, key_block_range, masked, sticky_max, tile_ops

VERSION = 2


@kernel_factory
def make_flash_forward_alg1(tiling: Tiling, d: int, causal: bool, dtype: str):
    """Kernel ``(q, k, v, o, lse, l_hbm, m_hbm, scale, n_q, n_k, diagonal)``; q, o:
    (B*H, N_q, d); k, v: (B*H, N_k, d), stored as ``dtype`` (uint16 patterns in half); lse,
    l_hbm, m_hbm: (B*H, N_q) float32 (l, m are HBM workspace);
    ``diagonal`` (int, read only when ``causal``): row r sees key c iff c <= r + diagonal.
    Launch with grid (B*H,), ``tiling.threads`` threads and
    ``tiling.smem_bytes("flash_forward_v1", d)`` bytes of dynamic shared memory."""
    t = tile_ops(tiling, d, dtype)
    load, store = storage_ops(dtype).load, storage_ops(dtype).store
    BR, BC, TY, TX, T, RA, CB, OB, LD, LS = t.BR, t.BC, t.TY, t.TX, t.T, t.RA, t.CB, t.OB, t.LD, t.LS
    load_head_tile, rows_dot_rows, scores_times_tile = t.load_head_tile, t.rows_dot_rows, t.scores_times_tile
    V0 = BC * LD
    Q0 = V0 + BC * LD
    S0 = Q0 + BR * LD
    A0 = S0 + BR * LS
    B0 = A0 + BR
    END = B0 + BR

    ALIGN = smem_alignment()

    @cuda.jit(**jit_options("flash_forward_v1", tiling))
    def flash_forward_alg1(q, k, v, o, lse, l_hbm, m_hbm, scale, n_q, n_k, diagonal):
        smem = cuda.shared.array(0, float32, alignment=ALIGN)
        # SRAM tiles (fp32 in every storage format), at fixed offsets of smem: Kj [0, V0) and
        # Vj [V0, Q0) for a whole outer step, Qi [Q0, S0) for one inner step
        S = smem[S0:A0]        # SRAM: S, then P in place
        keep = smem[A0:B0]     # SRAM: l_i exp(m_i - m_new) / l_new, weight of the old O_i
        inv_l = smem[B0:END]   # SRAM: 1 / l_new, weight of P Vj

        bh = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        ty = tid // TX
        tx = tid - ty * TX
        tr = (n_q + BR - 1) // BR
        tc = (n_k + BC - 1) // BC
        s = cuda.local.array((RA, CB), float32)    # registers: this thread's slice of S_ij
        pv = cuda.local.array((RA, OB), float32)   # registers: this thread's slice of P Vj

        for j in range(tc):
            col0 = j * BC
            cols = min(BC, n_k - col0)
            # barrier: the previous outer step is done with Kj, Vj
            cuda.syncthreads()
            load_head_tile(smem, 0, k, bh, col0, cols, BC, tid, ONE)
            load_head_tile(smem, V0, v, bh, col0, cols, BC, tid, ONE)
            for i in range(tr):
                row0 = i * BR
                rows = min(BR, n_q - row0)
                nb = key_block_range(row0, row0 + rows - 1, diagonal, 0, BC, n_k, causal, False)[1]
                if j >= nb:
                    continue
                # barrier: Kj, Vj loaded; the previous inner step is done with Qi, P, keep, inv_l
                cuda.syncthreads()
                load_head_tile(smem, Q0, q, bh, row0, rows, BR, tid, ONE)
                # barrier: Qi complete
                cuda.syncthreads()
                rows_dot_rows(s, smem, Q0, 0, ty, tx)
                for a in range(RA):
                    r = ty + TY * a
                    for b in range(CB):
                        c = tx + TX * b
                        if r < BR and c < BC:
                            if masked(r, c, row0, col0, cols, diagonal, 0, causal, False):
                                S[r * LS + c] = NEG_INF
                            else:
                                S[r * LS + c] = scale * s[a, b]
                # barrier: the whole S tile is in SRAM before the row-wise softmax reads it
                cuda.syncthreads()
                for r in range(tid, BR, T):
                    if r >= rows:         # a row past N_q: P = 0 (its masked -inf would
                        for c in range(BC):   # make -inf * 0 = NaN in the discarded P Vj)
                            S[r * LS + c] = 0.0
                        keep[r] = 0.0
                        inv_l[r] = 0.0
                        continue
                    m_old = NEG_INF
                    l_old = ZERO
                    if j > 0:
                        m_old = m_hbm[bh, row0 + r]
                        l_old = l_hbm[bh, row0 + r]
                    m_new = m_old
                    for c in range(cols):
                        m_new = sticky_max(m_new, S[r * LS + c])
                    l_new = l_old
                    if m_new == NEG_INF:
                        for c in range(BC):
                            S[r * LS + c] = 0.0
                    else:
                        l_new = l_old * math.exp(m_old - m_new)
                        for c in range(BC):
                            p = math.exp(S[r * LS + c] - m_new)
                            S[r * LS + c] = p
                            l_new += p
                    if l_new != 0.0:   # l = 0: the row saw no key yet
                        keep[r] = l_old * math.exp(m_old - m_new) / l_new
                        inv_l[r] = 1.0 / l_new
                    else:
                        keep[r] = 0.0
                        inv_l[r] = 0.0
                    if j == nb - 1:
                        lse[bh, row0 + r] = NEG_INF if l_new == 0.0 else m_new + math.log(l_new)
                    else:
                        m_hbm[bh, row0 + r] = m_new
                        l_hbm[bh, row0 + r] = l_new
                # barrier: P, keep and inv_l complete before the P Vj product
                cuda.syncthreads()
                for a in range(RA):
                    for b in range(OB):
                        pv[a, b] = 0.0
                scores_times_tile(pv, smem, S0, V0, cols, ty, tx)
                for a in range(RA):
                    r = ty + TY * a
                    if r < rows:
                        for b in range(OB):
                            x = tx + TX * b
                            if x < d:
                                o_old = load(o[bh, row0 + r, x]) if j > 0 else ZERO
                                o[bh, row0 + r, x] = store(keep[r] * o_old + inv_l[r] * pv[a, b])

        # row blocks no key reaches (causal, last row + diagonal < 0): O = 0, L = -inf
        for i in range(tr):
            row0 = i * BR
            rows = min(BR, n_q - row0)
            if key_block_range(row0, row0 + rows - 1, diagonal, 0, BC, n_k, causal, False)[1] == 0:
                for idx in range(tid, rows * d, T):
                    r = idx // d
                    o[bh, row0 + r, idx - r * d] = store(ZERO)
                for r in range(tid, rows, T):
                    lse[bh, row0 + r] = NEG_INF

    return flash_forward_alg1
