"""FlashAttention backward, FA2 style: P recomputed from the saved log-sum-exp L.

    D = rowsum(dO * O)                                 (preprocess; also dQ = 0 for the atomics)
    for each K/V block j, in parallel (grid Tc x B*H):
        load Kj, Vj -> SRAM; dKj = dVj = 0              (registers for the whole kernel)
        for each active row block i:
            load Qi, dOi, L_i, D_i -> SRAM
            P   = exp(scale Qi Kj^T - L_i), masked      (registers -> SRAM)
            dP  = dOi Vj^T                              (registers)
            dS  = P * (dP - D_i)                        (registers -> SRAM)
            dVj += P^T dOi;  dKj += scale dS^T Qi
            dQ_i += scale dS Kj                        (atomic adds into HBM)
        dKj, dVj -> HBM

``deterministic=True`` replaces the atomics by a second kernel that owns dQ_i, one block per Q
tile (grid Tr x B*H), recomputing P and dS for its row block: twice the FLOPs of S and dP, and
results that do not depend on the order blocks run in.

Rows that see no key (L = -inf) get P = 0 and so contribute nothing.

Versions (H200, fp32, B=4 H=16 N=4096 d=64, tools/tune_forward.py; FLOPs 2.5x the forward's):
    v1  4x4 register tiles, P and dS through shared memory, dQ by fp32 atomics (or the
        deterministic dQ kernel); Br = Bc = 64 at d <= 64: 5.4 TFLOP/s (7.2 with 128
        registers), 2026-11-29.
    v2  scores in base 2 (Qi held as scale*log2(e) q, L as L*log2(e)): one exp2 per element:
        7.2 TFLOP/s.
    v3  the forward's tile loops (uint64 offsets, 4x unrolled, LDS.128 operands), 128
        registers: 17.9 TFLOP/s (16.5 uncapped). Uncapped: causal 17.0, d = 128 19.9 (the
        capped build was not timed at those).
"""
from __future__ import annotations

import math

from numba import cuda, float32, uint64

from simulator.tiling import Tiling

from ..kernel_cache import kernel_factory
from ..launch import jit_options, smem_alignment
from .mma import warp_ops
from .storage import storage_ops
from .tiles import LN2, ONE, POS_INF, ZERO, key_block_range, lse_base2, masked, tile_ops

VERSION = 3


@kernel_factory
def make_row_dot(threads: int, d: int, zero_dq: bool, dtype: str = "float32"):
    """Kernel ``(do, o, dvec, dq, n_q)`` on flat (1-D) views of do, o, dq: (B*H, N_q, d) and
    dvec: (B*H, N_q): D[bh, r] = sum_x dO[bh, r, x] O[bh, r, x], and, with ``zero_dq``,
    dq[bh, r, :] = 0. One warp per row, its lanes on consecutive columns (so that a
    warp's loads and stores fill whole 32-byte sectors), summed by shuffles: ``threads`` (a
    multiple of 32) make ``threads // 32`` rows a block; grid (ceil(N_q / rows), B*H).
    ``dtype``: the format of do and o ("float16", "bfloat16": their uint16 patterns, each
    product exact in fp32); D and dq are float32 in every format.
    v1 (one thread per row) touched a sector per element: 8x the sectors, 2.5x the DRAM reads."""
    rows = threads // 32
    warp_sum = warp_ops().warp_sum
    value = storage_ops(dtype).load

    @cuda.jit
    def row_dot(do, o, dvec, dq, n_q):
        lane = cuda.threadIdx.x % 32
        r = cuda.blockIdx.x * rows + cuda.threadIdx.x // 32
        bh = cuda.blockIdx.y
        row = uint64(bh * n_q + r)
        acc = ZERO
        if r < n_q:
            for x in range(lane, d, 32):
                at = row * uint64(d) + uint64(x)
                acc += value(do[at]) * value(o[at])
                if zero_dq:
                    dq[at] = 0.0
        acc = warp_sum(acc)            # every lane, also past n_q: the shuffles are warp-wide
        if r < n_q and lane == 0:
            dvec[row] = acc

    return row_dot


def _make_recompute(t, d, causal):
    """Device function: this thread's P and dS register tiles for block pair (i, j)."""
    BR, TY, TX, RA, CB = t.BR, t.TY, t.TX, t.RA, t.CB
    rows_dot_rows = t.rows_dot_rows

    @cuda.jit(device=True)
    def recompute_p_ds(p, ds, smem, q0, do0, k0, v0, Lrow, Drow, row0, col0, cols, off, ty, tx):
        """Tiles Qi, dOi, Kj, Vj at offsets q0, do0, k0, v0 of ``smem``."""
        rows_dot_rows(p, smem, q0, k0, ty, tx)     # S_ij in base 2 (Qi holds scale*log2(e) q)
        rows_dot_rows(ds, smem, do0, v0, ty, tx)   # dP_ij
        for a in range(RA):
            r = min(ty + TY * a, BR - 1)
            for b in range(CB):
                c = tx + TX * b
                if masked(r, c, row0, col0, cols, off, 0, causal, False):
                    p[a, b] = 0.0
                else:
                    p[a, b] = math.exp2(p[a, b] - Lrow[r])
                ds[a, b] = p[a, b] * (ds[a, b] - Drow[r])

    return recompute_p_ds


def _make_load_row_stats(t):
    BR, T = t.BR, t.T

    @cuda.jit(device=True)
    def load_row_stats(Lrow, Drow, lse, dvec, bh, row0, rows, tid):
        """L_i (base 2), D_i HBM -> SRAM; L = +inf on rows past the tail (see lse_base2)."""
        for r in range(tid, BR, T):
            if r < rows:
                Lrow[r] = lse_base2(lse[bh, row0 + r])
                Drow[r] = dvec[bh, row0 + r]
            else:
                Lrow[r] = POS_INF
                Drow[r] = 0.0

    return load_row_stats


@kernel_factory
def make_flash_backward_kv(tiling: Tiling, d: int, causal: bool, atomic_dq: bool):
    """Kernel ``(q, k, v, do, lse, dvec, dq, dk, dv, scale, qscale, n_q, n_k, diagonal)``
    (``qscale`` = scale * log2(e), float32; Qi is held in SRAM times qscale; ``diagonal``, an
    int read only when ``causal``: row r sees key c iff c <= r + diagonal) computing dK, dV and,
    with ``atomic_dq``, dQ by atomic adds (dq must be zeroed first). Grid (Tc, B*H),
    ``tiling.threads`` threads, ``tiling.smem_bytes("flash_backward", d)`` bytes of shared memory."""
    t = tile_ops(tiling, d)
    BR, BC, TY, TX, RA, CB, KA, OB, LD, LS = (
        t.BR, t.BC, t.TY, t.TX, t.RA, t.CB, t.KA, t.OB, t.LD, t.LS)
    load_head_tile, scores_times_tile, scores_t_times_tile = (
        t.load_head_tile, t.scores_times_tile, t.scores_t_times_tile)
    recompute_p_ds = _make_recompute(t, d, causal)
    load_row_stats = _make_load_row_stats(t)
    V0 = BC * LD
    Q0 = V0 + BC * LD
    O0 = Q0 + BR * LD
    P0 = O0 + BR * LD
    S0 = P0 + BR * LS
    L0 = S0 + BR * LS
    D0 = L0 + BR
    END = D0 + BR

    ALIGN = smem_alignment()

    @cuda.jit(**jit_options("flash_backward", tiling))
    def flash_backward_kv(q, k, v, do, lse, dvec, dq, dk, dv, scale, qscale, n_q, n_k, diagonal):
        smem = cuda.shared.array(0, float32, alignment=ALIGN)
        # SRAM tiles, at fixed offsets of smem: Kj [0, V0) and Vj [V0, Q0) for the whole kernel;
        # Qi [Q0, O0) and dOi [O0, P0) for one i step
        P = smem[P0:S0]        # SRAM, one i step
        dS = smem[S0:L0]       # SRAM, one i step
        Lrow = smem[L0:D0]
        Drow = smem[D0:END]

        j = cuda.blockIdx.x
        bh = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        ty = tid // TX
        tx = tid - ty * TX
        col0 = j * BC
        cols = min(BC, n_k - col0)
        tr = (n_q + BR - 1) // BR
        tc = (n_k + BC - 1) // BC

        load_head_tile(smem, 0, k, bh, col0, cols, BC, tid, ONE)
        load_head_tile(smem, V0, v, bh, col0, cols, BC, tid, ONE)
        dk_acc = cuda.local.array((KA, OB), float32)   # registers: rows ty + TY a of dKj
        dv_acc = cuda.local.array((KA, OB), float32)   # registers: rows ty + TY a of dVj
        for a in range(KA):
            for b in range(OB):
                dk_acc[a, b] = 0.0
                dv_acc[a, b] = 0.0
        p = cuda.local.array((RA, CB), float32)
        ds = cuda.local.array((RA, CB), float32)
        dq_acc = cuda.local.array((RA, OB), float32)

        for i in range(tr):
            row0 = i * BR
            rows = min(BR, n_q - row0)
            if j >= key_block_range(row0, row0 + rows - 1, diagonal, 0, BC, n_k, causal, False)[1]:
                continue
            # barrier: Kj, Vj loaded; the previous step is done with Qi, dOi, P, dS, L, D
            cuda.syncthreads()
            load_head_tile(smem, Q0, q, bh, row0, rows, BR, tid, qscale)
            load_head_tile(smem, O0, do, bh, row0, rows, BR, tid, ONE)
            load_row_stats(Lrow, Drow, lse, dvec, bh, row0, rows, tid)
            # barrier: Qi, dOi, L_i, D_i complete
            cuda.syncthreads()
            recompute_p_ds(p, ds, smem, Q0, O0, 0, V0, Lrow, Drow, row0, col0, cols, diagonal, ty, tx)
            for a in range(RA):
                r = ty + TY * a
                for b in range(CB):
                    c = tx + TX * b
                    if r < BR and c < BC:
                        P[r * LS + c] = p[a, b]
                        dS[r * LS + c] = ds[a, b]
            # barrier: P and dS complete before the products that read them across threads
            cuda.syncthreads()
            scores_t_times_tile(dv_acc, smem, P0, O0, rows, ty, tx)
            scores_t_times_tile(dk_acc, smem, S0, Q0, rows, ty, tx)
            if atomic_dq:
                for a in range(RA):
                    for b in range(OB):
                        dq_acc[a, b] = 0.0
                scores_times_tile(dq_acc, smem, S0, 0, cols, ty, tx)
                for a in range(RA):
                    r = ty + TY * a
                    if r < rows:
                        for b in range(OB):
                            x = tx + TX * b
                            if x < d:
                                cuda.atomic.add(dq, (bh, row0 + r, x), scale * dq_acc[a, b])

        for a in range(KA):
            c = ty + TY * a
            if c < cols:
                for b in range(OB):
                    x = tx + TX * b
                    if x < d:
                        dk[bh, col0 + c, x] = LN2 * dk_acc[a, b]   # scale dS^T Q = ln2 dS^T Qi
                        dv[bh, col0 + c, x] = dv_acc[a, b]

    return flash_backward_kv


@kernel_factory
def make_flash_backward_dq(tiling: Tiling, d: int, causal: bool):
    """Deterministic dQ kernel ``(q, k, v, do, lse, dvec, dq, scale, qscale, n_q, n_k, diagonal)``
    (arguments as the K/V kernel's): grid (Tr, B*H), ``tiling.threads`` threads,
    ``tiling.smem_bytes("flash_backward_dq", d)`` bytes."""
    t = tile_ops(tiling, d)
    BR, BC, TY, TX, RA, CB, OB, LD, LS = t.BR, t.BC, t.TY, t.TX, t.RA, t.CB, t.OB, t.LD, t.LS
    load_head_tile, scores_times_tile = t.load_head_tile, t.scores_times_tile
    recompute_p_ds = _make_recompute(t, d, causal)
    load_row_stats = _make_load_row_stats(t)
    O0 = BR * LD
    K0 = O0 + BR * LD
    V0 = K0 + BC * LD
    S0 = V0 + BC * LD
    L0 = S0 + BR * LS
    D0 = L0 + BR
    END = D0 + BR

    ALIGN = smem_alignment()

    @cuda.jit(**jit_options("flash_backward_dq", tiling))
    def flash_backward_dq(q, k, v, do, lse, dvec, dq, scale, qscale, n_q, n_k, diagonal):
        smem = cuda.shared.array(0, float32, alignment=ALIGN)
        # SRAM tiles, at fixed offsets of smem: Qi [0, O0) and dOi [O0, K0) for the whole
        # kernel; Kj [K0, V0) and Vj [V0, S0) for one j step
        dS = smem[S0:L0]       # SRAM, one j step
        Lrow = smem[L0:D0]
        Drow = smem[D0:END]

        i = cuda.blockIdx.x
        bh = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        ty = tid // TX
        tx = tid - ty * TX
        row0 = i * BR
        rows = min(BR, n_q - row0)
        tc = (n_k + BC - 1) // BC

        load_head_tile(smem, 0, q, bh, row0, rows, BR, tid, qscale)
        load_head_tile(smem, O0, do, bh, row0, rows, BR, tid, ONE)
        load_row_stats(Lrow, Drow, lse, dvec, bh, row0, rows, tid)
        p = cuda.local.array((RA, CB), float32)
        ds = cuda.local.array((RA, CB), float32)
        dq_acc = cuda.local.array((RA, OB), float32)   # registers: this thread's slice of dQ_i
        for a in range(RA):
            for b in range(OB):
                dq_acc[a, b] = 0.0

        for j in range(key_block_range(row0, row0 + rows - 1, diagonal, 0, BC, n_k, causal, False)[1]):
            col0 = j * BC
            cols = min(BC, n_k - col0)
            # barrier: the previous step is done with Kj, Vj, dS (and Qi, dOi, L, D are loaded)
            cuda.syncthreads()
            load_head_tile(smem, K0, k, bh, col0, cols, BC, tid, ONE)
            load_head_tile(smem, V0, v, bh, col0, cols, BC, tid, ONE)
            # barrier: Kj, Vj complete
            cuda.syncthreads()
            recompute_p_ds(p, ds, smem, 0, O0, K0, V0, Lrow, Drow, row0, col0, cols, diagonal, ty, tx)
            for a in range(RA):
                r = ty + TY * a
                for b in range(CB):
                    c = tx + TX * b
                    if r < BR and c < BC:
                        dS[r * LS + c] = ds[a, b]
            # barrier: dS complete before dS Kj reads it across threads
            cuda.syncthreads()
            scores_times_tile(dq_acc, smem, S0, K0, cols, ty, tx)

        for a in range(RA):
            r = ty + TY * a
            if r < rows:
                for b in range(OB):
                    x = tx + TX * b
                    if x < d:
                        dq[bh, row0 + r, x] = scale * dq_acc[a, b]

    return flash_backward_dq
