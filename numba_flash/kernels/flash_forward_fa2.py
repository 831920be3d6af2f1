"""FlashAttention forward in the FA2 loop order: one thread block per Q tile, K/V streamed.

Algorithm (per batch-head, row block i; Tr x B*H blocks run in parallel)::

    load Qi (Br x d) HBM -> SRAM; it stays in SRAM for the whole loop
    m = -inf, l = 0, O_acc = 0                       (m, l in SRAM; O_acc in registers)
    for j < nb(i):                                   (causal: fully masked blocks skipped)
        load Kj, Vj (Bc x d) HBM -> SRAM
        S = scale Qi Kj^T, masked                    (registers -> SRAM)
        m_new = max(m, rowmax S); P = exp(S - m_new) (SRAM, one thread per row)
        alpha = exp(m - m_new); l = alpha l + rowsum P; m = m_new
        O_acc = diag(alpha) O_acc + P Vj             (registers; rescaling never leaves chip)
    O = diag(1/l) O_acc; L = m + log l  -> HBM       (rows that saw no key: O = 0, L = -inf)

Versions (llm.c style; H200, fp32, B=4 H=16 N=4096 d=64, median of CUDA-event timings):
    v1  4x4 register tile of S and O per thread, S/P through shared memory, one thread per row
        for the online softmax; Br = Bc = 64, 256 threads.  Measured: see results/bench.
"""
from __future__ import annotations

import math
from functools import lru_cache

from numba import cuda, float32

from simulator.tiling import Tiling

from ..launch import jit_options
from .tiles import NEG_INF, ZERO, active_blocks, tile_ops

VERSION = 1


@lru_cache(maxsize=None)
def make_flash_forward_fa2(tiling: Tiling, d: int, causal: bool):
    """Kernel ``(q, k, v, o, lse, scale, n_q, n_k)``; q, o: (B*H, N_q, d); k, v: (B*H, N_k, d);
    lse: (B*H, N_q). Launch with grid (Tr, B*H), ``tiling.threads`` threads and
    ``tiling.smem_bytes("flash_forward_v2", d)`` bytes of dynamic shared memory."""
    t = tile_ops(tiling, d)
    BR, BC, TY, TX, T, RA, CB, OB, LD, LS = t.BR, t.BC, t.TY, t.TX, t.T, t.RA, t.CB, t.OB, t.LD, t.LS
    load_head_tile, rows_dot_rows, scores_times_tile = t.load_head_tile, t.rows_dot_rows, t.scores_times_tile
    # shared-memory carve-up, in Tiling.smem_terms("flash_forward_v2") order
    K0 = BR * LD
    V0 = K0 + BC * LD
    S0 = V0 + BC * LD
    M0 = S0 + BR * LS
    L0 = M0 + BR
    A0 = L0 + BR
    END = A0 + BR

    @cuda.jit(**jit_options("flash_forward_v2"))
    def flash_forward_fa2(q, k, v, o, lse, scale, n_q, n_k):
        smem = cuda.shared.array(0, float32)
        Qi = smem[0:K0]        # SRAM, whole kernel
        Kj = smem[K0:V0]       # SRAM, one j step
        Vj = smem[V0:S0]       # SRAM, one j step
        S = smem[S0:M0]        # SRAM: S, then P in place
        m = smem[M0:L0]        # SRAM: running row max
        l = smem[L0:A0]        # SRAM: running row sum
        alpha = smem[A0:END]   # SRAM: per-row rescale factor of this step

        i = cuda.blockIdx.x
        bh = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        ty = tid // TX
        tx = tid - ty * TX
        row0 = i * BR
        rows = min(BR, n_q - row0)
        off = n_k - n_q
        tc = (n_k + BC - 1) // BC

        load_head_tile(Qi, q, bh, row0, rows, BR, tid)
        for r in range(tid, BR, T):
            m[r] = NEG_INF
            l[r] = 0.0
        acc = cuda.local.array((RA, OB), float32)   # registers: this thread's slice of O_i
        for a in range(RA):
            for b in range(OB):
                acc[a, b] = 0.0
        s = cuda.local.array((RA, CB), float32)     # registers: this thread's slice of S_ij

        for j in range(active_blocks(row0 + rows - 1, off, BC, tc, causal)):
            col0 = j * BC
            cols = min(BC, n_k - col0)
            # barrier: every thread is done with the previous Kj, Vj and P (and Qi is loaded)
            cuda.syncthreads()
            load_head_tile(Kj, k, bh, col0, cols, BC, tid)
            load_head_tile(Vj, v, bh, col0, cols, BC, tid)
            # barrier: Kj, Vj complete before anyone multiplies with them
            cuda.syncthreads()
            rows_dot_rows(s, Qi, Kj, ty, tx)
            for a in range(RA):
                r = ty + TY * a
                for b in range(CB):
                    c = tx + TX * b
                    if r < BR and c < BC:
                        if c >= cols or (causal and col0 + c > row0 + r + off):
                            S[r * LS + c] = NEG_INF
                        else:
                            S[r * LS + c] = scale * s[a, b]
            # barrier: the whole S tile is in SRAM before the row-wise softmax reads it
            cuda.syncthreads()
            for r in range(tid, BR, T):
                m_old = m[r]
                m_new = m_old
                for c in range(cols):
                    x = S[r * LS + c]
                    if x > m_new or x != x:   # not max(): a NaN score must stick in m (and reach O)
                        m_new = x
                row_sum = ZERO
                if m_new == NEG_INF:          # nothing visible in this row yet
                    alpha[r] = 1.0
                    for c in range(BC):
                        S[r * LS + c] = 0.0
                else:
                    alpha[r] = math.exp(m_old - m_new)
                    for c in range(BC):
                        p = math.exp(S[r * LS + c] - m_new)
                        S[r * LS + c] = p
                        row_sum += p
                m[r] = m_new
                l[r] = alpha[r] * l[r] + row_sum
            # barrier: P and alpha complete before the P Vj product
            cuda.syncthreads()
            for a in range(RA):
                f = alpha[min(ty + TY * a, BR - 1)]
                for b in range(OB):
                    acc[a, b] *= f
            scores_times_tile(acc, S, Vj, cols, ty, tx)

        # barrier: m and l final (also when no block was visited)
        cuda.syncthreads()
        for a in range(RA):
            r = ty + TY * a
            if r < rows:
                inv = 0.0 if l[r] == 0.0 else 1.0 / l[r]   # l = 0: the row saw no key
                for b in range(OB):
                    x = tx + TX * b
                    if x < d:
                        o[bh, row0 + r, x] = acc[a, b] * inv
        for r in range(tid, rows, T):
            lse[bh, row0 + r] = NEG_INF if l[r] == 0.0 else m[r] + math.log(l[r])

    return flash_forward_fa2
