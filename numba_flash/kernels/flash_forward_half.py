"""FlashAttention forward in the FA2 loop order on tensor cores, in fp16 or bf16 (one body; the
format is a compile-time parameter): mma.sync m16n8k16 with fp32 accumulators.

Algorithm (per query head h, row block i; Tr x B*H blocks, Br/32 warps each, Br/16 where Br
is not a multiple of 32 or Tiling.warp_rows says 16: Tiling.rows_per_warp; K/V head h // group
under GQA / MQA)::

    Qi, Kfirst, Vfirst: HBM -> SRAM by cp.async (one group), wait, barrier
    m = -inf, l = 0, O_acc = 0        (registers: each warp owns its rows of S, P and O)
    for first(i) <= j < end(i):       (tiles.key_block_range: blocks outside the band skipped;
                                       block-sparse: the j of row block i's list only)
        (j > first) wait for Kj, Vj; barrier
        Kj+1, Vj+1: HBM -> the other SRAM stage by cp.async (in flight during this step)
        S = Qi Kj^T, masked           (fp32 C fragments; Qi and Kj fragments by ldmatrix; the
                                       mask only on edge tiles: tiles.needs_mask)
        m_new = max(m, scale rowmax S)    (base-2 units, scale = softmax scale * log2 e)
        P = exp2(scale S - m_new); alpha = exp2(m - m_new); l = alpha l + rowsum P (fp32)
        P rounded to the half format, in registers: the C fragments of S are the A fragments
        of P, two 8-key tiles to one 16-key step
        O_acc = diag(alpha) O_acc + P Vj  (Vj^T fragments by ldmatrix.trans; O_acc, rescaled,
                                           is the mma's fp32 accumulator)
    O = diag(1/l) O_acc rounded to the half format; L = (m + log2 l) ln 2 (fp32) -> HBM

One barrier a step: K and V have two SRAM stages; step jj's block (j = jj, or the list's jj-th
block-sparse) lives in stage jj % 2 (the first step too: stage first % 2); the copies into stage
(jj + 1) % 2 start after the barrier of step jj, which every warp reaches only once it is done
reading that stage in step jj - 1. Products are in
the input's format with fp32 sums, as FlashAttention-2: S exact up to the fp32 sum, P rounded to
the format once for P V, O once at the end; softmax statistics in fp32.

fp32 from three fp16 products (``dtype="float32"``, numba_flash/fp16x3.py): q, k, v arrive as
kernels/split_half's rows, each head scaled by a power of two s and split into fp16 hi and lo
parts side by side (a tile row: D16 hi, then D16 lo columns, so every SRAM layout and fragment
address above holds with the row twice as wide, the lo fragment D16 columns on). Each product is
hi hi + hi lo + lo hi (the two cross terms first), three mma where the fp16 kernel has one:
    S' = (s_q Qi)(s_k Kj)^T        scale * log2(e) / (s_q s_k) applied where the fp16 kernel
                                   applies scale * log2(e)
    P' = exp2(S - m_p)             m_p = m - 15: P' in
                                   [0, 2^15] keeps its lo part a normal fp16 down to P = 2^-17;
                                   split into hi + lo; the running max recurrence (alpha) runs
                                   on m_p
    P' (s_v Vj) summed from zero on the tensor cores each tile, added to O_acc in fp32
    O = O_acc / (l' s_v) (times rp with dropout), l' = sum of P'; L = (m_p + log2 l') ln 2

SRAM (uint16 elements): Qi (Br x LD), then for each of two stages Kj and Vj (Bc x LD each;
Tiling.smem_terms' "Kj" and "Vj" count both stages),
row-major as in HBM, LD = D16 + 8 (D16 = d rounded up to the mma's k = 16; columns d..D16-1
zero): a row is an odd number of 16-byte chunks, so the 8 row addresses of an ldmatrix fall in
8 different 16-byte bank groups (Tiling.half_stride).
Fragments (lane = 8 i + l gives the address of row l of matrix i of an ldmatrix.x4):
    Qi, k step ks:      rows wrow + 8 (i % 2) + l, columns 16 ks + 8 (i // 2)   -> a0..a3
    Kj, key tiles 2p, 2p + 1 (16 keys), k step ks:
                        rows 16 p + 8 (i // 2) + l, columns 16 ks + 8 (i % 2)   -> b0, b1 of each
    (a warp owns MT = Tiling.rows_per_warp / 16 row tiles: Qi fragments for tile mt 16 mt rows on)
    Vj (.trans), key step kk, O tiles 2p, 2p + 1:
                        rows 16 kk + 8 (i % 2) + l, columns 16 p + 8 (i // 2)   -> b0, b1 of each
HBM -> SRAM moves 16-byte chunks (8 elements) with cp.async when d % 8 == 0 and the tensors
are 16-byte aligned (``vector``); otherwise element by element through registers. Padding
rows and columns are written as zeros, never read from HBM.

Versions (H200, fp16, per-call CUDA events against SDPA FLASH_ATTENTION in the same run,
tools/tune_half.py; results/h200/tuning/tune_half_v*.csv):
    v1  first cut: m16n8k16, ldmatrix, two-stage cp.async K/V, one barrier a step, P in
        registers, P V from zero per tile; a warp per 16 rows. (4,16,4096,64) at 128 x 64: 2.29
        ms, 120 TFLOP/s (0.41x), of which the kernel 1.40 ms (torch.profiler) and ~0.8 ms the
        API's host work; (1,16,16384,64): 184 (0.60x); d = 128: 170 at 128 x 128 (0.49x);
        causal (2,32,4096,128): 137 (0.46x). ncu at (1,16,16384,64): 128 registers, 16 warps a
        multiprocessor, 6.6 cycles between a warp's instructions, 2.4 IPC.
    v2  a warp takes two 16-row tiles (each K and V fragment feeds two mma) where Br is a
        multiple of 32; measured with the API's torch fast path (launch.launch_tensors: host
        0.63 -> 0.16 ms a call): 146 TFLOP/s (0.52x) at 128 x 64, kernel 1.47 ms (no faster than
        v1: 254 registers, 8 warps a multiprocessor); d = 128: 200 at 128 x 32 (0.57x), 205 at
        256 x 64; causal d = 128: 174 at 128 x 32 (0.59x); (1,16,16384,64) 183 (0.60x). SASS
        of the step at 128 x 64: 868 instructions for 128 HMMA, 296 of them FSETP/FSEL of the
        NaN-sticky row max.
    v3  row max by max.NaN.f32 (one FMNMX an element instead of two compares and a select);
        rows that have seen no key subtract 0 instead of a branch that zeroed P; the mask
        applied under a branch on edge tiles only. Bench (results/h200/bench/bench_half.csv,
        defaults 128 x 64 for d <= 64, 128 x 32 above): (4,16,4096,64) 180 TFLOP/s (0.70x),
        d = 128 218 (0.64x), (1,16,16384,64) 258 (0.87x), causal (2,32,4096,128) 175 (0.61x);
        bf16 184 / 220 / 239 / 172 (0.67 / 0.67 / 0.79 / 0.64x).
    v4  P Vj accumulated into O_acc by the mma (O_acc rescaled first), no separate P Vj
        fragment: kernel alone (launch_tensors, no API checks; results/h200/tuning/
        half_forward_variants_2026-12-01.log) (4,16,4096,64) 229 -> 234 TFLOP/s (0.82x),
        (1,16,16384,64) 263 -> 270 (0.89x), d = 128 at 128 x 32 242 -> 284 (0.85x; spills 72 ->
        16 B), causal (2,32,4096,128) 228 -> 261 (0.87x); 239 registers at d = 64. Through the
        API (bench) not measured yet.
    v5  band mask (simulator.spec.Mask: causal, sliding window, or a window's left side alone)
        and GQA / MQA (query head h reads K/V head h // group): the K/V loop runs over the
        band's blocks only (the first one prefetched into stage first % 2), edge tiles masked
        by both sides; heaviest-first block order kept for upper-only masks. No speed change
        intended; checked under the simulator and by ptxas only, not measured on the GPU yet.
    v6  dropout (Mask.dropout, compile-time): P kept / (1 - p) or 0 before it is rounded for
        P V, l summed undropped, the mask from tiles.dropout_words (one Philox call per key
        pair of a row), as flash_forward_fa2_tc v11. H200, 2026-12-02 (tools/dropout_timing.py,
        p = 0.1): fp16 d = 64 1.08 -> 3.85 ms (+257 %), d = 128 +158 %, causal d = 128 +143 %.
    v7  dropout: one Philox call per 8 scores of a lane (16-bit randoms), applied after the row
        statistics, as flash_forward_fa2_tc v12. H200, 2026-12-02 (tools/dropout_timing.py,
        p = 0.1): fp16 d = 64 1.05 -> 2.04 ms (+94 %), d = 128 +59 %, causal d = 128 +45 %.
    v8  block-sparse (Mask.sparse): row block i visits the K/V blocks of its list, the SRAM
        stage alternating by step, as flash_forward_fa2_tc v13.
    v9  fp32 from three fp16 products (dtype "float32", numba_flash/fp16x3.py; the fp16 and
        bf16 code unchanged). H200, 2026-12-05 (tools/fp16x3_forward.py, per-call CUDA events;
        results/h200/tuning/fp16x3_forward_2026-12-05a.log), 128 x 32 with P V chained into
        O_acc across tiles: (4,16,4096,64) 97.0 TFLOP/s, against the 3xTF32 forward's 50.9
        (flash_forward_fa2_tc v14) and SDPA EFFICIENT_ATTENTION's 34.8; o's error 0.96-1.62x
        plain fp32's at N <= 301 (logits x30 included), but 9.2x at N = 4099 causal: the
        chained adds. So P V is summed from zero each tile and added in fp32 (242 registers, no
        spills at 128 x 32, d = 64), and d > 64 takes 16-row warps (80 x 32; two row tiles spill
        there): o 1.90x plain at N = 4099 causal, 1.36x at (1,1,1000,1000,128); (4,16,4096,64)
        105.2 TFLOP/s (3xTF32 51.5, EFFICIENT 35.2: 2.99x), (1,16,16384,64) 115.6 (3.28x),
        causal 91.9 (2.83x), (4,16,4096,128) 63.5 (1.37x), (8,32,2048,128) 60.8 (1.31x)
        (results/h200/tuning/fp16x3_forward_2026-12-05b.log).
    v10 dropout: 1 / (1 - p) applied to O once a row instead of to each kept P (the split's
        P shift no longer makes room for it); Philox rounds on 32-bit words (tiles.dropout_words:
        one IMAD.WIDE.U32 a multiply, unsigned counter arithmetic, one 32-bit compare a score).
        Main-loop SASS of a trip (nvJitLink, sm_90a; tools/dropout_sass.py, 2026-12-07): fp16
        d = 64 dropout adds 511 instructions a warp (+45 %; v9: 933, +82 %). H100, 2026-12-07
        (tools/dropout_timing.py, p = 0.1, v9 timed in the same call): fp16 d = 64 with dropout
        2.28 -> 1.82 ms (+116 -> +73 % over the same call without), d = 128 +58 -> +39 %.
        (rp applied after the division by l' s_v since 2026-12-07 ~06:10 UTC, not timed: before,
        O's scale rp / s_v could overflow fp32 for p near 1 and a v head near 2^127.)
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, uint16, uint32, uint64

from simulator.spec import Mask
from simulator.tiling import Tiling

from ..kernel_cache import kernel_factory
from ..launch import jit_options, smem_alignment
from .half import half_ops
from .half_tiles import make_tile_copy
from .head_scale import scale_of
from .mma import FP32_TINY, warp_ops
from .tiles import (LN2, NEG_INF, ONE, ZERO, dropout_kept, dropout_words, key_block_range, masked,
                    needs_mask, tile_major_block)
from .unroll import static_range, unrolled

VERSION = 10


@kernel_factory
def make_flash_forward_half(tiling: Tiling, d: int, mask: Mask | bool, dtype: str, vector: bool):
    """Kernel ``(q, k, v, o, lse, qscale, n_q, n_k, hi, lo, seed_lo, seed_hi, keep_from, rp,
    blk_ptr, blk_idx, partial)`` on flat (1-D) uint16 views of
    q, o: (B*H, N_q, d) and k, v: (B*H_kv, N_k, d), H_kv = H / mask.group, holding ``dtype``
    ("float16" or "bfloat16") values; query head bh reads K/V head bh // mask.group.
    ``dtype="float32"``: fp32 attention from three fp16 products (kernels/split_half): q, k, v
    are split_half's outputs (rows of 2 D16 fp16, hi then lo parts, of the heads scaled by
    scale_of(partial, .)), o is float32; ``partial`` (head_amax's) is read only then. lse:
    (B*H, N_q) float32; ``qscale`` = softmax scale * log2(e), float32; ``hi``, ``lo`` (int64,
    read only with ``mask.upper`` / ``mask.lower``, else 0): row r sees key c iff c <= r + hi
    and r + lo <= c (``simulator.spec``). ``mask``: a ``Mask``, or a bool (causal:
    ``Mask(upper=mask)``); dropout's four and block-sparse's two arguments as
    ``make_flash_forward_fa2_tc``'s. ``vector``: d % 8 == 0 and q, k, v 16-byte aligned (tiles
    copied by cp.async). Launch with grid (Tr, B*H),
    ``tiling.threads_for("flash_forward_half")`` threads and
    ``tiling.smem_bytes("flash_forward_half", d, 2)`` bytes of dynamic shared memory."""
    mask = Mask.of(mask)
    UPPER, LOWER, GROUP, DROPOUT = mask.upper, mask.lower, mask.group, mask.dropout
    SPARSE = mask.sparse
    # upper only (causal): later row blocks visit more K/V blocks, so launch them first; a
    # window's work is about the same for every row block (plain order)
    HEAVY_LAST = UPPER and not LOWER
    BR, BC = tiling.Br, tiling.Bc
    SPLIT = dtype == "float32"         # three fp16 products a product, of hi and lo parts
    if DROPOUT:   # Philox blocks of 16 x 16 scores inside a tile (simulator.tiling.DROPOUT_SIDE)
        tiling.check_dropout()
    T = tiling.threads_for("flash_forward_half")
    RW = tiling.rows_per_warp("flash_forward_half")
    MT = RW // 16                      # 16-row tiles of S and O a warp owns
    D16 = tiling.half_depth(d)
    W = 2 * D16 if SPLIT else d        # columns of a row in HBM (split: hi parts, then lo)
    LD = tiling.half_stride(W)         # split: a tile row holds both parts, lo at D16 on
    PARTS = 2 if SPLIT else 1          # fragments a product's operands come in (hi, lo)
    # (A part, B part) of each mma a product takes: split, the two cross terms first
    PRODUCTS = ((0, 1), (1, 0), (0, 0)) if SPLIT else ((0, 0),)
    # split: P' = 2^15 P (P' as fp16 parts keeps 22 bits down to P = 2^-17), l sums P'; rows
    # whose running max is past 2^22 (where m - 15 would round) take no shift: their P are
    # powers of 2
    P_SHIFT = np.float32(15.0)
    SHIFT_UP_TO = np.float32(2.0**22)
    KS, NT, OT = D16 // 16, BC // 8, D16 // 8   # k steps of Qi Kj^T; n tiles of S; of O
    PK = NT // 2                       # 16-key steps of P Vj (pairs of n tiles of S)
    terms = tiling.smem_terms("flash_forward_half", W)
    QO = np.uint64(0)
    KO = np.uint64(terms["Qi"])        # stage s: Kj at KO + s STAGE, Vj at VO + s STAGE
    VO = np.uint64(terms["Qi"] + BC * LD)
    STAGE = np.uint64(2 * BC * LD)
    U1, LDU = np.uint64(1), np.uint64(LD)
    LN2_F = np.float32(LN2)

    h = half_ops("float16" if SPLIT else dtype)
    mma, max_nan, pack2, to_half = h.mma, h.max_nan, h.pack2, h.to_half
    ldmatrix, ldmatrix_trans = h.ldmatrix, h.ldmatrix_trans
    commit, wait_all = h.commit, h.wait_all
    w = warp_ops()
    exp2, quad_max, quad_sum, split_finite = w.exp2_ftz, w.quad_max, w.quad_sum, w.split_finite
    ALIGN = smem_alignment()


    copy_q, copy_kv = (make_tile_copy(rows, T, W, tiling.half_depth(W), LD, vector or SPLIT,
                                      "float16" if SPLIT else dtype) for rows in (BR, BC))

    def flash_forward_half(q, k, v, o, lse, qscale, n_q, n_k, hi, lo, seed_lo, seed_hi,
                           keep_from, rp, blk_ptr, blk_idx, partial):
        smem = cuda.shared.array(0, uint16, alignment=ALIGN)
        i, bh = cuda.blockIdx.x, cuda.blockIdx.y
        if HEAVY_LAST:
            # the last row blocks visit the most K/V blocks: start them first over all heads,
            # so that the final wave holds the lightest blocks
            i, bh = tile_major_block()
            i = cuda.gridDim.x - 1 - i
        tid = cuda.threadIdx.x
        lane = tid % 32
        g = lane // 4                 # fragment row group: this lane's rows are g and g + 8
        t = lane % 4                  # thread in group: its columns are 2t, 2t + 1 of each 8
        mi, ml = lane // 8, lane % 8  # the ldmatrix matrix and row this lane addresses
        wrow = (tid // 32) * RW       # this warp's first row of the Br tile (MT tiles of 16)
        row0 = i * BR
        rows = min(BR, n_q - row0)
        if SPARSE:                    # steps first <= jj < end: K/V block blk_idx[jj]
            first, end = blk_ptr[i], blk_ptr[i + 1]
        else:                         # steps first <= jj < end: K/V block jj
            first, end = key_block_range(row0, row0 + rows - 1, hi, lo, BC, n_k, UPPER, LOWER)
        kv0 = (bh // GROUP) * n_k     # first row of this query head's K/V head
        qs = qscale                   # split: S = (s_q q)(s_k k)^T / (s_q s_k); O = (P' s_v v) / (l' s_v)
        o_scale = ONE
        shift = ZERO
        if SPLIT:
            heads, heads_kv = cuda.gridDim.y, cuda.gridDim.y // GROUP
            # (two divisions: s_q s_k may overflow fp32 where both heads are tiny; S is then 0)
            qs = qscale / scale_of(partial, bh) / scale_of(partial, heads + bh // GROUP)
            if -FP32_TINY < qs < FP32_TINY:   # (0 would turn a masked -inf into NaN)
                qs = FP32_TINY if qscale > ZERO else -FP32_TINY
            shift = P_SHIFT
            o_scale = ONE / scale_of(partial, heads + heads_kv + bh // GROUP)

        copy_q(smem, QO, q, bh * n_q + row0, rows, tid)
        if first < end:               # step jj's block in stage jj % 2, the first one too
            st0 = uint64(first % 2) * STAGE
            key0 = (blk_idx[first] if SPARSE else first) * BC
            copy_kv(smem, KO + st0, k, kv0 + key0, min(BC, n_k - key0), tid)
            copy_kv(smem, VO + st0, v, kv0 + key0, min(BC, n_k - key0), tid)
        commit()

        # registers (tile mt of this warp's MT row tiles): C fragments of S_ij, then P_ij; A
        # fragments of P_ij (half pairs); C fragments of O_i; running max (base 2) of rows g,
        # g + 8; this lane's share of their sums; their alpha = exp2(m_old - m_new)
        s = cuda.local.array((MT, NT, 4), float32)
        p = cuda.local.array((MT, PK, PARTS, 4), uint32)
        acc = cuda.local.array((MT, OT, 4), float32)
        m = cuda.local.array((MT, 2), float32)
        mp = cuda.local.array((MT, 2), float32)     # (split: the running m_p = m - shift)
        l = cuda.local.array((MT, 2), float32)
        rescale = cuda.local.array((MT, 2), float32)
        a = cuda.local.array((MT, PARTS, 4), uint32)  # registers: A fragments of Qi, one k step
        b = cuda.local.array((PARTS, 4), uint32)      # B fragments of two n tiles (Kj or Vj)
        pv = cuda.local.array((MT, OT, 4), float32)   # (split: C fragments of P Vj, from zero)
        wd = cuda.local.array(4, uint64)            # registers: a Philox call's words (dropout)
        for mt in static_range(MT):
            for e in static_range(2):
                m[mt, e] = NEG_INF
                mp[mt, e] = NEG_INF
                l[mt, e] = ZERO
            for n in static_range(OT):
                for e in static_range(4):
                    acc[mt, n, e] = ZERO
        # this lane's ldmatrix row addresses (see the module docstring)
        qa = QO + uint64((wrow + 8 * (mi % 2) + ml) * LD + 8 * (mi // 2))
        kb = KO + uint64((8 * (mi // 2) + ml) * LD + 8 * (mi % 2))
        vb = VO + uint64((8 * (mi % 2) + ml) * LD + 8 * (mi // 2))

        for jj in range(first, end):
            j = blk_idx[jj] if SPARSE else jj
            col0 = j * BC
            cols = min(BC, n_k - col0)
            stage = uint64(jj % 2) * STAGE
            wait_all()
            # barrier: Kj, Vj (first step: and Qi) complete in SRAM; every warp done with step
            # jj - 1, so the other stage is free
            cuda.syncthreads()
            if jj + 1 < end:
                nxt = STAGE - stage
                next0 = blk_idx[jj + 1] * BC if SPARSE else col0 + BC
                copy_kv(smem, KO + nxt, k, kv0 + next0, min(BC, n_k - next0), tid)
                copy_kv(smem, VO + nxt, v, kv0 + next0, min(BC, n_k - next0), tid)
                commit()
            for mt in static_range(MT):
                for n in static_range(NT):
                    for e in static_range(4):
                        s[mt, n, e] = ZERO
            for ks in static_range(KS):
                for mt in static_range(MT):
                    for part in static_range(PARTS):
                        a[mt, part, 0], a[mt, part, 1], a[mt, part, 2], a[mt, part, 3] = ldmatrix(
                            smem, qa + uint64(part * D16 + 16 * mt * LD + 16 * ks))
                for np2 in static_range(PK):
                    for part in static_range(PARTS):
                        b[part, 0], b[part, 1], b[part, 2], b[part, 3] = ldmatrix(
                            smem, kb + stage + uint64(part * D16 + 16 * np2 * LD + 16 * ks))
                    for u in static_range(len(PRODUCTS)):
                        ia, ib = PRODUCTS[u]
                        for mt in static_range(MT):   # each K fragment feeds MT products
                            for hb in static_range(2):
                                n = 2 * np2 + hb
                                s[mt, n, 0], s[mt, n, 1], s[mt, n, 2], s[mt, n, 3] = mma(
                                    a[mt, ia, 0], a[mt, ia, 1], a[mt, ia, 2], a[mt, ia, 3],
                                    b[ib, 2 * hb], b[ib, 2 * hb + 1],
                                    s[mt, n, 0], s[mt, n, 1], s[mt, n, 2], s[mt, n, 3])
            # interior tiles (full, and inside the band for every row) need no mask
            edge = needs_mask(row0, BR, col0, cols, BC, hi, lo, UPPER, LOWER)
            for mt in static_range(MT):
                for hr in static_range(2):   # fragment slots 2hr, 2hr + 1: row wrow + 16mt + g + 8hr
                    r = wrow + 16 * mt + g + 8 * hr
                    if edge:                 # (a branch: interior tiles skip the mask)
                        for n in static_range(NT):
                            for e in static_range(2):
                                c = 8 * n + 2 * t + e
                                if masked(r, c, row0, col0, cols, hi, lo, UPPER, LOWER):
                                    s[mt, n, 2 * hr + e] = NEG_INF
                    mx = NEG_INF
                    for n in static_range(NT):
                        for e in static_range(2):
                            mx = max_nan(mx, s[mt, n, 2 * hr + e])
                    m_new = max_nan(m[mt, hr], quad_max(mx) * qs)
                    # a row that has seen no key yet (m_new = -inf) subtracts 0: its P is 0
                    m_sub = ZERO if m_new == NEG_INF else m_new
                    if SPLIT:   # P' = exp2(S - m_p); the recurrence runs on m_p
                        m_p = m_sub - shift if abs(m_sub) < SHIFT_UP_TO else m_sub
                        alpha = exp2(mp[mt, hr] - m_p)
                        mp[mt, hr] = m_p
                    else:
                        m_p = m_sub
                        alpha = exp2(m[mt, hr] - m_sub)
                    row_sum = ZERO
                    for n in static_range(NT):
                        for e in static_range(2):
                            x = exp2(s[mt, n, 2 * hr + e] * qs - m_p)
                            s[mt, n, 2 * hr + e] = x
                            row_sum += x
                    l[mt, hr] = alpha * l[mt, hr] + row_sum
                    m[mt, hr] = m_new
                    rescale[mt, hr] = alpha
                if DROPOUT:   # l summed the undropped P; P V takes P kept, or 0 (O's scale has
                    # the 1 / (1 - p)): one Philox call a pair of n tiles, as flash_forward_fa2_tc
                    # (word 2hr + n % 2, half e)
                    for n in static_range(NT):
                        if n % 2 == 0:
                            wd[0], wd[1], wd[2], wd[3] = dropout_words(
                                seed_lo, seed_hi, bh, row0 + wrow + 16 * mt + g, col0 + 8 * n + 2 * t)
                        for hr in static_range(2):
                            for e in static_range(2):
                                kept = dropout_kept(wd[2 * hr + n % 2], e, keep_from)
                                s[mt, n, 2 * hr + e] = s[mt, n, 2 * hr + e] if kept else ZERO
                # P as A fragments of 16-key steps: keys 16kk + 2t (+1) of rows g, g + 8, then + 8
                for kk in static_range(PK):
                    for q4 in static_range(4):   # register q4: keys 2t, 2t + 1 (+ 8 for q4 >= 2)
                        n, e0 = 2 * kk + q4 // 2, 2 * (q4 % 2)   # of row g (+ 8 for odd q4)
                        if SPLIT:   # P' = hi + lo (fp16 parts)
                            h0, l0 = split_finite(s[mt, n, e0])
                            h1, l1 = split_finite(s[mt, n, e0 + 1])
                            p[mt, kk, 0, q4] = pack2(h0, h1)
                            p[mt, kk, 1, q4] = pack2(l0, l1)
                        else:
                            p[mt, kk, 0, q4] = pack2(s[mt, n, e0], s[mt, n, e0 + 1])
            # O_acc = diag(alpha) O_acc + P Vj: O_acc rescaled, then the C operand of the mma
            # that adds P Vj (fp32 accumulation on the tensor cores). split: P Vj summed from zero
            # on the tensor cores, then added to O_acc in fp32 (round to nearest): the tensor
            # core's adds, not rounded to nearest, never span more than one tile (at N = 4099
            # causal, chained: 9x plain fp32's error of o; as flash_forward_fa2_tc v6)
            for mt in static_range(MT):
                for n in static_range(OT):
                    for e in static_range(4):
                        if SPLIT:
                            pv[mt, n, e] = ZERO
                        else:
                            acc[mt, n, e] = acc[mt, n, e] * rescale[mt, e // 2]
            for np2 in static_range(OT // 2):
                for kk in static_range(PK):
                    for part in static_range(PARTS):
                        b[part, 0], b[part, 1], b[part, 2], b[part, 3] = ldmatrix_trans(
                            smem, vb + stage + uint64(part * D16 + 16 * kk * LD + 16 * np2))
                    for u in static_range(len(PRODUCTS)):
                        ip, ib = PRODUCTS[u]
                        for mt in static_range(MT):   # each V fragment feeds MT products
                            for hb in static_range(2):
                                n = 2 * np2 + hb
                                if SPLIT:
                                    pv[mt, n, 0], pv[mt, n, 1], pv[mt, n, 2], pv[mt, n, 3] = mma(
                                        p[mt, kk, ip, 0], p[mt, kk, ip, 1], p[mt, kk, ip, 2], p[mt, kk, ip, 3],
                                        b[ib, 2 * hb], b[ib, 2 * hb + 1],
                                        pv[mt, n, 0], pv[mt, n, 1], pv[mt, n, 2], pv[mt, n, 3])
                                else:
                                    acc[mt, n, 0], acc[mt, n, 1], acc[mt, n, 2], acc[mt, n, 3] = mma(
                                        p[mt, kk, ip, 0], p[mt, kk, ip, 1], p[mt, kk, ip, 2], p[mt, kk, ip, 3],
                                        b[ib, 2 * hb], b[ib, 2 * hb + 1],
                                        acc[mt, n, 0], acc[mt, n, 1], acc[mt, n, 2], acc[mt, n, 3])
            if SPLIT:
                for mt in static_range(MT):
                    for n in static_range(OT):
                        for e in static_range(4):
                            acc[mt, n, e] = acc[mt, n, e] * rescale[mt, e // 2] + pv[mt, n, e]
        wait_all()   # (first >= end: the copy of Qi may still be in flight)

        for mt in static_range(MT):
            for hr in static_range(2):
                r = wrow + 16 * mt + g + 8 * hr
                row_l = quad_sum(l[mt, hr])
                if r < rows:
                    inv = ZERO if row_l == ZERO else o_scale / row_l   # l = 0: the row saw no key
                    if DROPOUT:   # 1 / (1 - p) once a row, not once a score; after the division
                        inv = inv * rp   # (1 / s_v may be 2^113: rp / s_v could overflow)
                    at = uint64((bh * n_q + row0 + r) * d + 2 * t)
                    for n in static_range(OT):
                        for e in static_range(2):
                            if 8 * n + 2 * t + e < d:
                                if SPLIT:
                                    o[at + uint64(8 * n + e)] = acc[mt, n, 2 * hr + e] * inv
                                else:
                                    o[at + uint64(8 * n + e)] = to_half(acc[mt, n, 2 * hr + e] * inv)
                    if t == 0:
                        lse[uint64(bh * n_q + row0 + r)] = (
                            NEG_INF if row_l == ZERO else ((mp[mt, hr] if SPLIT else m[mt, hr]) + math.log2(row_l)) * LN2_F)

    return cuda.jit(**jit_options("flash_forward_half", tiling, d))(unrolled(flash_forward_half))
