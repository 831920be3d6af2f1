"""FlashAttention forward in the FA2 loop order: one thread block per Q tile, K/V streamed.

Algorithm (per batch-head, row block i; Tr x B*H blocks run in parallel)::

    load Qi (Br x d) HBM -> SRAM, times scale*log2(e); it stays in SRAM for the whole loop
    m = -inf, l = 0, O_acc = 0                     (registers: each thread's rows of m, l, O)
    for j < nb(i):                                 (causal: fully masked blocks skipped)
        load Kj, Vj (Bc x d) HBM -> SRAM
        S = Qi Kj^T, masked                        (registers, a 4 x 4 tile per thread)
        m_new = max(m, rowmax S)                   (partial maxima through SRAM)
        P = exp2(S - m_new)                        (registers -> SRAM for the product)
        alpha = exp2(m - m_new); l = alpha l + rowsum P; m = m_new
        O_acc = diag(alpha) O_acc + P Vj           (registers; rescaling never leaves chip)
    O = diag(1/l) O_acc; L = (m + log2 l) ln 2 -> HBM   (rows that saw no key: O = 0, L = -inf)

Scores are kept in base 2: folding scale*log2(e) into Qi once turns every exp into one exp2.

Versions (llm.c style; H200, fp32, B=4 H=16 N=4096 d=64, CUDA events, median of 20;
tools/tune_forward.py; SDPA in the same run: MATH 17.8, EFFICIENT_ATTENTION 34.7 TFLOP/s):
    v1  4x4 register tile of S and O per thread, S through SRAM, online softmax with one
        thread per row: 3.9 TFLOP/s (5.2 with 128 registers). The serial row pass on 2 of 8
        warps dominated: 2026-11-29.
    v2  softmax on the register tiles: row maxima reduced through SRAM, each thread keeps
        its rows' m and partial l in registers (l reduced once at the end); exp2 with the
        scale folded into Qi: 6.1 TFLOP/s. SASS: the k loops were not unrolled, and each
        shared load paid ~3 integer instructions (Numba's negative-index fix-up, 64-bit math).
    v3  uint64 shared offsets, k loops unrolled 4x by hand (tiles.py): 15.0 TFLOP/s.
    v4  tiles read through one 16-byte-aligned shared array with 4-float-multiple row
        strides, so the S and P operands load as LDS.128: 16.75 TFLOP/s at 64 x 64 (17.2 with
        128 registers) and 18.7 at Br = 128, Bc = 64 (the default; 512 threads). At 64 x 64:
        causal 15.8, d = 128 15.4; at the default 128 x 64, causal 17.0 (bench).
Continued on tensor cores in flash_forward_fa2_tc.py (v5, v6: ``algorithm="fa2"``); this kernel
stays as ``algorithm="fa2_fma"``, plain fp32 arithmetic with free block sizes.
"""
from __future__ import annotations

import math

from numba import cuda, float32

from simulator.tiling import Tiling

from ..kernel_cache import kernel_factory
from ..launch import jit_options, smem_alignment
from .tiles import LN2, NEG_INF, ONE, ZERO, key_block_range, masked, sticky_max, tile_ops

VERSION = 4


@kernel_factory
def make_flash_forward_fa2(tiling: Tiling, d: int, causal: bool):
    """Kernel ``(q, k, v, o, lse, qscale, n_q, n_k, diagonal)``; q, o: (B*H, N_q, d);
    k, v: (B*H, N_k, d); lse: (B*H, N_q); ``qscale`` = softmax scale * log2(e), float32;
    ``diagonal`` (int, read only when ``causal``): row r sees key c iff c <= r + diagonal.
    Launch with grid
    (Tr, B*H), ``tiling.threads`` threads and ``tiling.smem_bytes("flash_forward_v2", d)``
    bytes of dynamic shared memory."""
    t = tile_ops(tiling, d)
    BR, BC, TY, TX, RA, CB, OB, LD, LS = t.BR, t.BC, t.TY, t.TX, t.RA, t.CB, t.OB, t.LD, t.LS
    load_head_tile, rows_dot_rows, scores_times_tile = t.load_head_tile, t.rows_dot_rows, t.scores_times_tile
    # shared-memory carve-up, in Tiling.smem_terms("flash_forward_v2") order
    K0 = BR * LD
    V0 = K0 + BC * LD
    S0 = V0 + BC * LD
    R0 = S0 + BR * LS
    END = R0 + BR * TX

    ALIGN = smem_alignment()

    @cuda.jit(**jit_options("flash_forward_v2", tiling))
    def flash_forward_fa2(q, k, v, o, lse, qscale, n_q, n_k, diagonal):
        smem = cuda.shared.array(0, float32, alignment=ALIGN)
        # SRAM tiles, at fixed offsets of smem: Qi [0, K0) for the whole kernel (times qscale);
        # Kj [K0, V0) and Vj [V0, S0) for one j step; P [S0, R0) for the P Vj product
        P = smem[S0:R0]
        part = smem[R0:END]    # SRAM: per-thread partial row maxima (at the end: row sums)

        i = cuda.blockIdx.x
        bh = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        ty = tid // TX
        tx = tid - ty * TX
        row0 = i * BR
        rows = min(BR, n_q - row0)
        tc = (n_k + BC - 1) // BC

        load_head_tile(smem, 0, q, bh, row0, rows, BR, tid, qscale)
        s = cuda.local.array((RA, CB), float32)     # registers: this thread's slice of S_ij, P_ij
        acc = cuda.local.array((RA, OB), float32)   # registers: this thread's slice of O_i
        m = cuda.local.array(RA, float32)           # registers: running max of rows ty + TY a
        l = cuda.local.array(RA, float32)           # registers: this thread's share of their sums
        alpha = cuda.local.array(RA, float32)
        for a in range(RA):
            m[a] = NEG_INF
            l[a] = ZERO
            for b in range(OB):
                acc[a, b] = ZERO

        for j in range(key_block_range(row0, row0 + rows - 1, diagonal, 0, BC, n_k, causal, False)[1]):
            col0 = j * BC
            cols = min(BC, n_k - col0)
            # barrier: every thread is done with the previous Kj, Vj, P, part (and Qi is loaded)
            cuda.syncthreads()
            load_head_tile(smem, K0, k, bh, col0, cols, BC, tid, ONE)
            load_head_tile(smem, V0, v, bh, col0, cols, BC, tid, ONE)
            # barrier: Kj, Vj complete before anyone multiplies with them
            cuda.syncthreads()
            rows_dot_rows(s, smem, 0, K0, ty, tx)
            for a in range(RA):
                r = min(ty + TY * a, BR - 1)
                mx = NEG_INF
                for b in range(CB):
                    c = tx + TX * b
                    if masked(r, c, row0, col0, cols, diagonal, 0, causal, False):
                        s[a, b] = NEG_INF
                    mx = sticky_max(mx, s[a, b])
                if ty + TY * a < BR:
                    part[r * TX + tx] = mx
            # barrier: all partial maxima of the tile are in SRAM
            cuda.syncthreads()
            for a in range(RA):
                r = min(ty + TY * a, BR - 1)
                m_new = m[a]
                for u in range(TX):
                    m_new = sticky_max(m_new, part[r * TX + u])
                if m_new == NEG_INF:          # nothing visible in this row yet
                    alpha[a] = 1.0
                    for b in range(CB):
                        s[a, b] = ZERO
                else:
                    alpha[a] = math.exp2(m[a] - m_new)
                    row_sum = ZERO
                    for b in range(CB):
                        p = math.exp2(s[a, b] - m_new)
                        s[a, b] = p
                        row_sum += p
                    l[a] = alpha[a] * l[a] + row_sum
                m[a] = m_new
                for b in range(CB):
                    c = tx + TX * b
                    if ty + TY * a < BR and c < BC:
                        P[r * LS + c] = s[a, b]
            # barrier: P complete before the P Vj product reads other threads' columns
            cuda.syncthreads()
            for a in range(RA):
                for b in range(OB):
                    acc[a, b] *= alpha[a]
            scores_times_tile(acc, smem, S0, V0, cols, ty, tx)

        # barrier: no thread still reads part's maxima; then the row sums l meet there
        cuda.syncthreads()
        for a in range(RA):
            if ty + TY * a < BR:
                part[(ty + TY * a) * TX + tx] = l[a]
        cuda.syncthreads()
        for a in range(RA):
            r = ty + TY * a
            if r < rows:
                row_l = ZERO
                for u in range(TX):
                    row_l += part[r * TX + u]
                inv = 0.0 if row_l == 0.0 else 1.0 / row_l   # l = 0: the row saw no key
                for b in range(OB):
                    x = tx + TX * b
                    if x < d:
                        o[bh, row0 + r, x] = acc[a, b] * inv
                if tx == 0:
                    lse[bh, row0 + r] = NEG_INF if row_l == 0.0 else (m[a] + math.log2(row_l)) * LN2

    return flash_forward_fa2
