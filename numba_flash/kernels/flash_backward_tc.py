"""FlashAttention backward on tensor cores: TF32 mma.sync with the 3xTF32 split, KV-outer.

Algorithm (per batch-head, K/V block j; grid Tc x B*H, Bc/16 warps a block)::

    D = rowsum(dO * O), dQ = 0           (flash_backward.make_row_dot, before this kernel)
    load Kj, Vj (Bc x d) HBM -> SRAM as TF32 hi + lo parts; dKj = dVj = 0
                                         (registers: warp w owns keys 16w..16w+15 of dK, dV)
    for each active row block i:         (causal: row blocks that see no key of Kj skipped)
        load Qi (times scale*log2(e)), dOi -> SRAM as hi + lo; L_i (base 2), D_i -> SRAM
        S^T = Kj Qi^T                    (registers: mma C fragments, rows = keys, cols = queries)
        P^T = exp2(S^T - L_i), masked    (in place)
        dVj += P^T dOi                   (P^T's C fragments are the A fragments: no SRAM)
        dP^T = Vj dOi^T;  dS^T = P^T * (dP^T - D_i)
        dS -> SRAM as hi + lo;  dKj += dS^T Qi
        dQ_i += scale dS Kj              (warps split the Br x d product; fp32 atomics, HBM)
    dKj times ln 2 (scale dS^T Q, as Qi holds scale*log2(e) q), dVj -> HBM

The HBM traffic is the FFMA backward's (flash_backward.py, v3) element for element: the same
tile loads, one atomic add per dQ element per active block pair, dK and dV written once;
simulator.predict("flash_backward_tc") counts it (tests/test_traffic_exact.py).

Tensor cores: m16n8k8 TF32 products, each operand split into hi + lo and multiplied as
a_hi b_hi + a_hi b_lo + a_lo b_hi (warp_ops().mma_3xtf32), so results are at fp32 level. dKj,
dVj are summed on the tensor cores from zero for each row block and added in fp32 registers
(round to nearest): chaining the mma accumulation over all N_q / Br row blocks would pile up
its truncating adds (the forward's v5 lost 2e-4 that way at N = 16384).

An m16n8k8 product may sum its 8 k indices in any order, as long as A and B agree, so the
C fragments of P^T and dS^T serve as A fragments directly: lane (g, t) holds queries 2t, 2t + 1
of each group of 8 in its C fragment and feeds them as A slots t, t + 4, reading B (dOi, Qi) at
the same two queries: two 8-byte loads (hi, lo) of consecutive rows of the row-major tile. P is
split once into hi + lo for dV, then rebuilt as hi + lo (within 2^-21 of P) for dS, so that P's
fp32 copy need not stay live beside its two parts.

SRAM layouts (floats):
    Kj, Vj   [key, c]   hi at key LQ + 4 (c // 2 ^ sw(key)) + 2 (c % 2), lo next to it (Bc x D8,
                        D8 = d rounded up to 8, zero columns past d and rows past N_k): whole
                        kernel. LQ = 0 mod 32 (Tiling.mma_swizzled_stride); sw(r) = 2 ((r // 2)
                        % 4) ^ 4 (r % 2) permutes the 16-byte chunks (column pairs) of a row
    Qi, dOi  [query, c] the same (Br x D8, zero rows past N_q): one i step
    dS       [query, key] hi at query LS + 2 key, lo next to it (Br x Bc; LS = 16 mod 32,
             Tiling.mma_stride): one i step
    L, D     Br floats: L_i times log2(e) (+inf for rows past N_q and rows that saw no key, so
             P = 0 there), D_i: one i step
Fragment reads, all free of bank conflicts:
- k along a row (A of S^T, dP^T from Kj, Vj; B of S^T, dP^T from Qi, dOi; A of dS Kj from dS):
  one 16-byte load (a lane's four operands, columns 2t, 2t + 1, in one chunk); the 8 lanes of an
  access phase read rows g, g + 1, whose swizzles differ in bit 2 (dS: LS = 16 mod 32);
- k along columns (B of P^T dOi, dS^T Qi from dOi, Qi; B of dS Kj from Kj): two 8-byte loads,
  rows 2t and 2t + 1 at column g; the 16 lanes of a phase read rows 0, 2, 4, 6 (or 1, 3, 5, 7),
  whose swizzles 0, 2, 4, 6 (4, 6, 0, 2) spread the chunk pairs g // 2 over all 8 chunks.
(The 8-byte writes of dS from C fragments meet 4-way conflicts: Br Bc / 32 per warp a step.)
The XOR acts on bits of the chunk index that the compile-time loops (k step kk, column tile n)
also set, so each lane keeps two base offsets, for even and odd kk (or n), as the forward's Vj^T.

Barriers per step: (1) before loading Qi, dOi, L, D: every warp is done with the previous
step's (and with dS, read by dQ); (2) after the loads: the tiles are complete before any warp
reads fragments of them; (3) after writing dS: dS is complete before the dQ product reads
other warps' keys.

``deterministic=True`` in the API keeps the FFMA kernels (v3's dK/dV kernel and its dQ kernel
without atomics); this kernel always adds dQ atomically.

Versions continue flash_backward.py's (v1-v3: FFMA on 4 x 4 register tiles, 17.9 TFLOP/s);
same measurement (H200, fp32, B=4 H=16 N=4096 d=64, tools/tune_forward.py --backward):
    v4  mma.sync m16n8k8 TF32, 3xTF32, one warp per 16 keys, S^T / P^T / dP^T / dS^T in
        registers, dK and dV from zero per row block then added in fp32, dQ through dS in SRAM
        and fp32 atomics; swizzled hi/lo tiles (no bank conflicts on fragment reads); Qi, dOi
        loaded between barriers (no prefetch). Default 32 x 128 at d <= 64 (8 warps, 199 KB of
        shared memory at d = 64), 16 x 64 above: 23.4 TFLOP/s (v3 17.8 in the same run), max
        gradient error 2.9e-6 of max |dx| against float64; forward v7 + v4: 27.1 TFLOP/s, 0.78x
        SDPA EFFICIENT_ATTENTION's forward + backward (34.9). SASS of the step loop: 3963
        instructions, 1742 of them register moves beside 480 HMMA (fragments loaded as [hi, lo]
        pairs: the forward's problem before its v7).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint64

from simulator.tiling import Tiling

from ..launch import jit_options, smem_alignment
from .mma import warp_ops
from .tiles import LN2, LOG2E, NEG_INF, ONE, POS_INF, ZERO, active_blocks, masked
from .unroll import static_range, unrolled

VERSION = 4


@lru_cache(maxsize=None)
def make_flash_backward_tc(tiling: Tiling, d: int, causal: bool):
    """Kernel ``(q, k, v, do, lse, dvec, dq, dk, dv, scale, qscale, n_q, n_k)`` on flat (1-D)
    views of q, do, dq: (B*H, N_q, d); k, v, dk, dv: (B*H, N_k, d); lse, dvec: (B*H, N_q);
    ``qscale`` = scale * log2(e), float32. dq must hold zeros (the kernel adds into it). Launch
    with grid (Tc, B*H), ``tiling.threads_for("flash_backward_tc")`` threads and
    ``tiling.smem_bytes("flash_backward_tc", d)`` bytes of dynamic shared memory."""
    BR, BC = tiling.Br, tiling.Bc
    T = tiling.threads_for("flash_backward_tc")
    WARPS = T // 32
    D8 = tiling.mma_depth(d)           # d rounded up to the mma's k = 8 (zero columns)
    LQ, LS = tiling.mma_swizzled_stride(d), tiling.mma_stride(BC)
    KS, NT, OT = D8 // 8, BR // 8, D8 // 8   # k steps over d; 8-query tiles; 8-column tiles
    JS = BC // 8                             # k steps of dS Kj (over keys)
    UNITS = (BR // 16) * OT                  # 16 x 8 tiles of dQ_i
    PER_WARP = -(-UNITS // WARPS)
    # shared-memory carve-up (Tiling.smem_terms order)
    KO, VO, QO, OO, SO, LO, DO = (np.uint64(x) for x in np.cumsum(
        [0, *tiling.smem_terms("flash_backward_tc", d).values()])[:-1])
    # uint64 offsets throughout: Numba would add a negative-index fix-up to every signed one
    U1, U2, U3 = np.uint64(1), np.uint64(2), np.uint64(3)
    U8LQ, U8LS = np.uint64(8 * LQ), np.uint64(8 * LS)
    LN2_F = np.float32(LN2)

    w = warp_ops()
    split, split_finite, exp2, mma_3xtf32 = w.split, w.split_finite, w.exp2_ftz, w.mma_3xtf32
    ALIGN = smem_alignment()

    @cuda.jit(device=True)
    def swizzle(r):
        """The 16-byte chunk permutation of row r of Kj, Vj, Qi, dOi (a 3-bit XOR mask)."""
        return 2 * ((r // 2) % 4) ^ 4 * (r % 2)

    @cuda.jit(device=True)
    def load_tile(smem, at0, src, row0, nrows, max_rows, tid, factor):
        """HBM -> SRAM: tile[r, c] = factor * src[(row0 + r) d + c] as TF32 hi, lo parts in the
        swizzled layout at offset at0; rows nrows..max_rows-1 and columns d..D8-1 are zero (no
        HBM access)."""
        for idx in range(tid, max_rows * D8, T):
            r = idx // D8
            c = idx - r * D8
            x = ZERO
            if r < nrows and c < d:
                x = factor * src[uint64((row0 + r) * d + c)]
            at = at0 + uint64(r * LQ + 4 * ((c // 2) ^ swizzle(r)) + 2 * (c % 2))
            smem[at], smem[at + U1] = split(x)

    @cuda.jit(device=True)
    def load_row_stats(smem, lse, dvec, row0, rows, tid):
        """HBM -> SRAM: L_i times log2(e) (to match base-2 scores) and D_i. Rows past the tail
        and rows that saw no key (L = -inf) get L = +inf, so that P = 0 there exactly."""
        for r in range(tid, BR, T):
            l2 = POS_INF
            dr = ZERO
            if r < rows:
                x = lse[uint64(row0 + r)]
                if x != NEG_INF:
                    l2 = x * LOG2E
                dr = dvec[uint64(row0 + r)]
            smem[LO + uint64(r)] = l2
            smem[DO + uint64(r)] = dr

    def rows_times_tile_t(c, smem, a_even, a_odd, b_even, b_odd):
        """c = A B^T (16 x Br C fragments) for A = this warp's 16 rows of the Kj or Vj tile and
        B = the Qi or dOi tile; a_*, b_*: this lane's fragment offsets (row g, column pair t of
        k step 0 or 1: even and odd k steps)."""
        for n in static_range(NT):
            for e in static_range(4):
                c[n, e] = ZERO
        for kk in static_range(KS):
            pa = (a_odd if kk % 2 else a_even) + uint64(16 * (kk - kk % 2))
            ah0, al0, ah2, al2 = smem[pa], smem[pa + U1], smem[pa + U2], smem[pa + U3]
            pa += U8LQ
            ah1, al1, ah3, al3 = smem[pa], smem[pa + U1], smem[pa + U2], smem[pa + U3]
            for n in static_range(NT):
                pb = (b_odd if kk % 2 else b_even) + uint64(8 * n * LQ + 16 * (kk - kk % 2))
                c[n, 0], c[n, 1], c[n, 2], c[n, 3] = mma_3xtf32(
                    ah0, ah1, ah2, ah3, al0, al1, al2, al3,
                    smem[pb], smem[pb + U2], smem[pb + U1], smem[pb + U3],
                    c[n, 0], c[n, 1], c[n, 2], c[n, 3])

    def add_scores_times_tile(acc, hi, lo, smem, b_even, b_odd):
        """acc += X B for X (16 x Br) held as the split C fragments hi, lo of X^T (P^T or dS^T:
        slots (0, 1, 2, 3) -> A slots (0, 2, 1, 3)) and B = the Qi or dOi tile, read at rows
        2t, 2t + 1 of each 8; b_*: this lane's offsets of row 2t, column g of column tile 0 and
        1 (row 2t + 1 swaps them); each 16 x 8 tile of the product summed on the tensor cores
        from zero, then added in fp32."""
        for n in static_range(OT):
            c0, c1, c2, c3 = ZERO, ZERO, ZERO, ZERO
            for kk in static_range(NT):   # queries 8kk .. 8kk + 7
                pb = (b_odd if n % 2 else b_even) + uint64(8 * kk * LQ + 16 * (n - n % 2))
                pb1 = (b_even if n % 2 else b_odd) + uint64(8 * kk * LQ + LQ + 16 * (n - n % 2))
                c0, c1, c2, c3 = mma_3xtf32(
                    hi[kk, 0], hi[kk, 2], hi[kk, 1], hi[kk, 3],
                    lo[kk, 0], lo[kk, 2], lo[kk, 1], lo[kk, 3],
                    smem[pb], smem[pb1], smem[pb + U1], smem[pb1 + U1], c0, c1, c2, c3)
            acc[n, 0] += c0
            acc[n, 1] += c1
            acc[n, 2] += c2
            acc[n, 3] += c3

    rows_times_tile_t, add_scores_times_tile = (
        cuda.jit(device=True)(unrolled(f)) for f in (rows_times_tile_t, add_scores_times_tile))

    def flash_backward_tc(q, k, v, do, lse, dvec, dq, dk, dv, scale, qscale, n_q, n_k):
        smem = cuda.shared.array(0, float32, alignment=ALIGN)
        # SRAM tiles: Kj at KO and Vj at VO for the whole kernel; Qi at QO, dOi at OO, dS at SO,
        # L at LO, D at DO for one i step
        j = cuda.blockIdx.x     # causal: low j see the most row blocks, and start first
        bh = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        lane = tid % 32
        warp = tid // 32
        g = lane // 4           # fragment row group: this lane's keys are g and g + 8 (of 16)
        t = lane % 4            # thread in group: its queries are 2t, 2t + 1 of each 8
        wkey = warp * 16        # this warp's first key of the Bc tile
        col0 = j * BC
        cols = min(BC, n_k - col0)
        off = n_k - n_q
        tr = (n_q + BR - 1) // BR
        tc = (n_k + BC - 1) // BC

        load_tile(smem, KO, k, bh * n_k + col0, cols, BC, tid, ONE)
        load_tile(smem, VO, v, bh * n_k + col0, cols, BC, tid, ONE)
        s = cuda.local.array((NT, 4), float32)    # registers: S^T, then P^T (its hi part, then P^T)
        ds = cuda.local.array((NT, 4), float32)   # registers: dP^T, then dS^T (then its hi part)
        lo = cuda.local.array((NT, 4), float32)   # registers: lo parts of P^T, then of dS^T
        dk_acc = cuda.local.array((OT, 4), float32)   # registers: C fragments of dKj
        dv_acc = cuda.local.array((OT, 4), float32)   # registers: C fragments of dVj
        cq = cuda.local.array(4, float32)             # registers: one 16 x 8 tile of dQ_i
        for n in static_range(OT):
            for e in static_range(4):
                dk_acc[n, e] = ZERO
                dv_acc[n, e] = ZERO
        # this lane's fragment offsets in the swizzled tiles (see the header):
        # - row g (+ 8x), columns 2t, 2t + 1 of k step 0 (even) and 1 (odd): A of Kj, Vj at
        #   rows wkey + g (+ 8), B of Qi, dOi at rows g (+ 8n);
        sw = swizzle(g)
        row_even = uint64(g * LQ + 4 * (t ^ (sw % 4)) + 16 * (sw // 4))
        row_odd = uint64(g * LQ + 4 * (t ^ (sw % 4)) + 16 * (1 - sw // 4))
        ka_even, ka_odd = KO + uint64(wkey * LQ) + row_even, KO + uint64(wkey * LQ) + row_odd
        va_even, va_odd = VO + uint64(wkey * LQ) + row_even, VO + uint64(wkey * LQ) + row_odd
        # - row 2t, column g of column tile 0 (even) and 1 (odd): B of Qi, dOi, Kj at rows 2t
        #   (+ 8kk) and, swapping even and odd, 2t + 1 (swizzle 2t, then 2t ^ 4)
        col_pair = 2 * t * LQ + 4 * ((g // 2) ^ (2 * (t % 2))) + 2 * (g % 2)
        col_even = uint64(col_pair + 16 * (t // 2))
        col_odd = uint64(col_pair + 16 * (1 - t // 2))

        for i in range(tr):
            row0 = i * BR
            rows = min(BR, n_q - row0)
            if j >= active_blocks(row0 + rows - 1, off, BC, tc, causal):
                continue
            # barrier: Kj, Vj loaded; every warp is done with the previous Qi, dOi, L, D, dS
            cuda.syncthreads()
            load_tile(smem, QO, q, bh * n_q + row0, rows, BR, tid, qscale)
            load_tile(smem, OO, do, bh * n_q + row0, rows, BR, tid, ONE)
            load_row_stats(smem, lse, dvec, bh * n_q + row0, rows, tid)
            # barrier: Qi, dOi, L_i, D_i complete before any warp reads fragments of them
            cuda.syncthreads()

            rows_times_tile_t(s, smem, ka_even, ka_odd, QO + row_even, QO + row_odd)   # S^T, base 2
            # interior tiles (full, and left of the causal diagonal) need no mask; rows past
            # N_q have L = +inf
            edge = cols < BC or (causal and col0 + BC - 1 > row0 + off)
            for h in static_range(2):             # slots 2h, 2h + 1 hold key wkey + g + 8h
                key = wkey + g + 8 * h
                for n in static_range(NT):
                    for e in static_range(2):
                        r = 8 * n + 2 * t + e
                        if edge and masked(r, key, row0, col0, cols, off, causal):
                            s[n, 2 * h + e] = ZERO
                        else:
                            s[n, 2 * h + e] = exp2(s[n, 2 * h + e] - smem[LO + uint64(r)])
            for n in static_range(NT):
                for e in static_range(4):
                    s[n, e], lo[n, e] = split_finite(s[n, e])
            add_scores_times_tile(dv_acc, s, lo, smem, OO + col_even, OO + col_odd)   # dVj += P^T dOi
            for n in static_range(NT):
                for e in static_range(4):
                    s[n, e] += lo[n, e]               # P^T again, within 2^-21 (exact sum)

            rows_times_tile_t(ds, smem, va_even, va_odd, OO + row_even, OO + row_odd)   # dP^T
            for h in static_range(2):
                for n in static_range(NT):
                    for e in static_range(2):
                        r = 8 * n + 2 * t + e
                        ds[n, 2 * h + e] = s[n, 2 * h + e] * (ds[n, 2 * h + e] - smem[DO + uint64(r)])
            # dS -> SRAM as dS[query, key] (for dQ), split once for both products
            for h in static_range(2):
                key = wkey + g + 8 * h
                for n in static_range(NT):
                    for e in static_range(2):
                        at = SO + uint64((8 * n + 2 * t + e) * LS + 2 * key)
                        ds[n, 2 * h + e], lo[n, 2 * h + e] = split(ds[n, 2 * h + e])
                        smem[at], smem[at + U1] = ds[n, 2 * h + e], lo[n, 2 * h + e]
            add_scores_times_tile(dk_acc, ds, lo, smem, QO + col_even, QO + col_odd)   # dKj += dS^T Qi
            # barrier: dS complete before the dQ product reads other warps' keys
            cuda.syncthreads()

            # dQ_i += scale dS Kj: the Br/16 x D8/8 tiles of 16 x 8 dealt to the warps in runs of
            # PER_WARP; a warp past the last tile recomputes it (every warp must run the same mma)
            # and does not add it
            for f in static_range(PER_WARP):
                unit = warp * PER_WARP + f
                u = min(unit, UNITS - 1)
                mt = u // OT            # rows 16 mt.., columns 8 nt.. of dQ_i
                nt = u - mt * OT
                pa0 = SO + uint64((16 * mt + g) * LS + 4 * t)
                pb0 = KO + uint64(col_pair + 16 * (nt ^ (t // 2)))        # Kj row 2t
                pb1 = KO + uint64(col_pair + LQ + 16 * (nt ^ (t // 2) ^ 1))   # row 2t + 1
                for e in static_range(4):
                    cq[e] = ZERO
                for kk in static_range(JS):     # keys 8kk .. 8kk + 7
                    pa = pa0 + uint64(16 * kk)
                    ah0, al0, ah2, al2 = smem[pa], smem[pa + U1], smem[pa + U2], smem[pa + U3]
                    pa += U8LS
                    ah1, al1, ah3, al3 = smem[pa], smem[pa + U1], smem[pa + U2], smem[pa + U3]
                    pb = pb0 + uint64(8 * kk * LQ)
                    pc = pb1 + uint64(8 * kk * LQ)
                    cq[0], cq[1], cq[2], cq[3] = mma_3xtf32(
                        ah0, ah1, ah2, ah3, al0, al1, al2, al3,
                        smem[pb], smem[pc], smem[pb + U1], smem[pc + U1],
                        cq[0], cq[1], cq[2], cq[3])
                if unit < UNITS:
                    for h in static_range(2):
                        r = 16 * mt + g + 8 * h
                        if r < rows:
                            for e in static_range(2):
                                c = 8 * nt + 2 * t + e
                                if c < d:
                                    cuda.atomic.add(dq, uint64((bh * n_q + row0 + r) * d + c),
                                                    scale * cq[2 * h + e])

        for h in static_range(2):
            key = wkey + g + 8 * h
            if key < cols:
                at = uint64((bh * n_k + col0 + key) * d + 2 * t)
                for n in static_range(OT):
                    for e in static_range(2):
                        if 8 * n + 2 * t + e < d:
                            dk[at + uint64(8 * n + e)] = LN2_F * dk_acc[n, 2 * h + e]   # scale dS^T Q
                            dv[at + uint64(8 * n + e)] = dv_acc[n, 2 * h + e]

    return cuda.jit(**jit_options("flash_backward_tc", tiling, d))(unrolled(flash_backward_tc))
