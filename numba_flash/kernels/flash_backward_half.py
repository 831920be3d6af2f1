"""FlashAttention backward on tensor cores in fp16 or bf16 (one body; the format is a
compile-time parameter): mma.sync m16n8k16 with fp32 accumulators, KV-outer as FA2.

Algorithm (per K/V head and K/V block j; grid Tc x B*H_kv, Bc/16 warps a block, warp w
owning keys 16w .. 16w + 15 of the block)::

    D = rowsum(dO * O), dQacc = 0 (fp32)  (flash_backward.make_row_dot, before this kernel)
    Kj, Vj (once), and Qi, dOi, L_i, D_i of the first step: HBM -> SRAM by cp.async
    dKj = dVj = 0                         (registers: C fragments of the warp's 16 keys)
    for each query head of the K/V head's group (GQA / MQA: GROUP of them; 1 without):
      for each row block i that sees Kj:  (row_block_range: rows outside the band neither
                                           loaded nor computed; the same range each head;
                                           block-sparse: the i of block j's list only)
        wait for Qi, dOi, L_i, D_i; barrier
        the next step's Qi, dOi, L_i, D_i (the next row block of the head, else the first of
        the next head): HBM -> the other SRAM stage by cp.async (in flight)
        S^T = Kj Qi^T                     (registers: fp32 C fragments, rows keys, cols queries)
        P^T = exp2(scale S^T - L_i log2 e), masked   (in place, fp32)
        dP^T = Vj dOi^T;  dS^T = P^T * (dP^T - D_i)  (fp32)
        P^T, dS^T rounded to the format: their C fragments are the A fragments of
        dVj += P^T dOi;  dKj += dS^T Qi   (dOi, Qi fragments by ldmatrix.trans)
        dS^T -> SRAM (format); barrier
        dQacc_i += softmax_scale dS Kj    (warps split Br x d; fp32 atomics into HBM)
    dKj times softmax_scale, both rounded to the format -> HBM, once (GQA: sums over the
    group's query heads);  dQ = dQacc rounded (api)

The mask is a band (simulator.spec.Mask: causal, a sliding window, or both sides), fixed at
compile time as ``upper`` / ``lower``, its offsets ``hi``, ``lo`` at run time; tiles inside
the band (``needs_mask`` false) skip the per-element comparisons.

fp32 from three fp16 products (``dtype="float32"``, numba_flash/fp16x3.py: "fa2_fp16x3"'s
backward): q, k, v and dO arrive as kernels/split_half's rows (each head scaled by a power of
two s, fp16 hi and lo parts side by side: every SRAM layout and fragment address above holds
with the row twice as wide, the lo fragment D16 columns on). Each product is hi hi + hi lo +
lo hi (the two cross terms first), three mma where the fp16 kernel has one:
    S'^T = (s_k Kj)(s_q Qi)^T   the forward's S' = (s_q Qi)(s_k Kj)^T products in its order,
                                operands swapped, at its qscale / (s_q s_k): P normalised as the
                                forward's lse was taken
    P' = 2^15 P                 (with dropout 2^(15 - ceil(log2 rp)) P, as the forward's P')
    dP'^T = (s_v Vj)(s_do dOi)^T
    dS'' = sigma dS = P' (Z dP' A - D B): A = 2^-(31 + ceil(log2 d)), B = s_v s_do A; sigma =
                                B 2^15 = s_v s_do 2^-(16 + ceil(log2 d)) (dropout: one more
                                halving per doubling of rp) keeps |dS''| < 2^15, as |dP| and
                                |D| are at most d max|v| max|dO|: a bound known beforehand
    P', dS'' split into fp16 hi + lo parts (the A fragments of both parts)
    dVj += (P' dOi') / (2^15 s_do), dKj += (dS''^T Qi') / (sigma s_q): each step's products
                                summed from zero on the tensor cores, column pair by column
                                pair, then added in fp32 (the tensor cores' adds, not rounded
                                to nearest, never span more than one step: as the forward's P V)
    dQacc_i += scale (dS'' Kj') / (sigma s_k)   dS''^T's two parts in SRAM, lo after hi
dK, dV (fp32) and dQacc (fp32, the API's dq itself) are in the inputs' units; the factors of
each query head (GQA: the group's heads each their own) in float64 (a product of two scales may
overflow fp32).

Precision as FlashAttention-2: products of format values with fp32 sums; P and dS rounded to
the format once for their products; statistics, dP, D and all accumulators in fp32. dKj, dVj
accumulate on the tensor cores across row blocks and heads (the fp32 kernel sums each row
block from zero because TF32 mma's truncating adds cost it accuracy at fp32 level; here they
are ~2^-23 against the format's 2^-9..2^-12 roundings of P and dS, so no extra adds or
registers are spent).

SRAM (uint16 elements, row stride LD = half_stride(d) = D16 + 8, D16 = d rounded up to the mma's
k = 16; an odd number of 16-byte chunks, so ldmatrix's 8 row addresses meet no bank conflict):
    Kj, Vj     Bc x LD, row-major as in HBM, the whole kernel
    Qi, dOi    two stages of Br x LD each (stage = the step's parity, steps counted over heads
               and row blocks)
    dS^T       Bc x LS (LS = Br + 8, keys x queries): one i step
    L, D       two stages of Br fp32 each (read through an fp32 view of the same memory): L_i
               as saved, taken to base 2 when read (+inf where a row saw no key: P = 0); rows
               past N_q zero-filled (with dO = 0 and D = 0 there, their dS and P^T dO are 0)
Fragments (lane = 8 mi + ml gives the address of row ml of matrix mi of an ldmatrix.x4):
    A of S^T, dP^T (Kj, Vj), k step ks: rows wkey + 8 (mi % 2) + ml, cols 16 ks + 8 (mi // 2)
    B of S^T, dP^T (Qi, dOi), query tiles 2p, 2p + 1, k step ks:
                                        rows 16 p + 8 (mi // 2) + ml, cols 16 ks + 8 (mi % 2)
    B of dV, dK (dOi, Qi .trans), query step kk, column tiles 2p, 2p + 1:
                                        rows 16 kk + 8 (mi % 2) + ml, cols 16 p + 8 (mi // 2)
    A of dQ (dS^T .trans), query tile mt, key step kk:
                                        rows 16 kk + 8 (mi // 2) + ml, cols 16 mt + 8 (mi % 2)
    B of dQ (Kj .trans), key step kk, column tiles 2p, 2p + 1: as B of dV on Kj
A lane's C fragment of S^T holds keys g, g + 8 and queries 2t, 2t + 1 of each 8: packed in
pairs, two query tiles make one A fragment of a 16-query k step (as P in the forward), and the
same pairs are the 4-byte stores of dS^T (word t of rows g: no bank conflict).

Barriers per step: (1) after waiting for the step's copies: Qi, dOi, L_i, D_i (first step: and
Kj, Vj) complete for every warp; every warp done with the previous step, so its stage of Qi,
dOi, L, D (last read before barrier 2 of that step) and dS (read by its dQ product) are free;
(2) after writing dS^T: complete before the dQ product reads other warps' keys.

Versions (H200, fp16, per-call CUDA events; tools/tune_half.py --backward,
results/h200/tuning/tune_half_bwd_v1_d*.csv; bench: results/h200/bench/bench_half.csv):
    v1  first cut: the above. (4,16,4096,64): backward alone 149 TFLOP/s at 64 x 128 (254
        registers, no spills), 136 at 32 x 128, 133 at 64 x 64, 87 at 128 x 64 (spills); d = 128:
        160 at 32 x 128 (255 registers, 12 B of spill stores), 136 at 32 x 64, 123 at 16 x 64,
        77 at 64 x 64. Bench, forward v3 + this: forward + backward 0.60-0.66x SDPA
        FLASH_ATTENTION on the four shapes, fp16 and bf16 (171 / 180 / 188 / 159 TFLOP/s fp16 at
        (4,16,4096,64), (4,16,4096,128), (1,16,16384,64), causal (2,32,4096,128)).
    v2  band mask (sliding window, combinable with causal) and GQA / MQA: grid over K/V heads,
        the group's query heads looped in the block (Kj, Vj loaded once, dKj, dVj summed over
        them; the cp.async prefetch runs on across heads), row blocks from row_block_range;
        heaviest-first order kept for upper-only masks. Checked against float64 under the CUDA
        simulator only; no speed change intended, not measured on the GPU yet.
    v3  dropout (Mask.dropout, compile-time): the forward's mask regenerated (one Philox call
        per query pair of a key), P Z rounded for dVj += (P Z)^T dOi, dS = P (Z dP - D), as
        flash_backward_tc v9. H200, 2026-12-02 (tools/dropout_timing.py, p = 0.1): fp16 d = 64
        4.17 -> 9.63 ms (+131 %), d = 128 +78 %, causal d = 128 +71 %.
    v4  dropout: two Philox calls per 8 scores of a lane (was 4), 16-bit randoms, as
        flash_backward_tc v10. H200, 2026-12-02 (tools/dropout_timing.py, p = 0.1): fp16
        d = 64 4.17 -> 6.01 ms (+44 %), d = 128 +28 %, causal d = 128 +25 %.
    v5  block-sparse (Mask.sparse): K/V block j visits the row blocks of its list, the
        prefetch the list's next one, as flash_backward_tc v11.
    v6  fp32 from three fp16 products (dtype "float32": "fa2_fp16x3"'s backward; the fp16 and
        bf16 code the same but for a k step's fragments held in local arrays). H100, 2026-12-06
        (tools/fp16x3_backward.py; results/h100/tuning/fp16x3_backward_2026-12-06.log): backward
        alone at (4,16,4096,64) 91.1 TFLOP/s at 64 x 128, 88.2 at 32 x 64, 83.8 at 32 x 128,
        64.1 at 16 x 128 (3xTF32, flash_backward_tc v14: 46.1); d = 128 89.0 at 32 x 128, 82.5
        at 16 x 128, 48.5 at 32 x 64 (3xTF32 35.4); gradients 0.3-3.0x plain fp32's error.
    v7  dropout: Philox on 32-bit words (tiles.dropout_words, as flash_forward_half v10); its
        code unchanged. H100, 2026-12-07 (tools/dropout_timing.py, p = 0.1, v6 timed in the same
        call): fp16 d = 64 backward with dropout +53 -> +31 % over the same call without, d = 128
        +27 -> +13 %.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, float64, uint16, uint32, uint64

from simulator.fp16x3 import backward_smem_terms
from simulator.spec import Mask
from simulator.tiling import Tiling

from ..kernel_cache import kernel_factory
from ..launch import jit_options, smem_alignment
from .half import half_ops
from .half_tiles import make_tile_copy
from .head_scale import scale_of
from .mma import FP32_TINY, warp_ops
from .tiles import (ONE, ZERO, dropout_kept, dropout_words, identity, lse_base2,
                    make_key_rows_store, masked, needs_mask, row_block_range, tile_major_block)
from .unroll import static_range, unrolled

VERSION = 7


@kernel_factory
def make_flash_backward_half(tiling: Tiling, d: int, mask: Mask | bool, dtype: str,
                             vector: bool):
    """Kernel ``(q, k, v, do, lse, dvec, dq, dk, dv, scale, qscale, n_q, n_k, hi, lo, seed_lo,
    seed_hi, keep_from, rp, blk_ptr, blk_idx, partial, partial_do)`` on flat
    (1-D) views: q, do: (B*H, N_q, d) and k, v, dk, dv: (B*H_kv, N_k, d) uint16 patterns of
    ``dtype`` ("float16" or "bfloat16"), H_kv = H / mask.group (query head bh reads K/V head
    bh // group); lse, dvec (D): (B*H, N_q) float32; dq: (B*H, N_q, d) float32, zeros (the
    kernel adds scale dS K into it). ``mask``: a ``simulator.spec.Mask``, or a bool (causal or
    not); ``hi``, ``lo`` (int64, read only with ``mask.upper`` / ``mask.lower``, else pass 0):
    row r sees key c iff c <= r + hi and r + lo <= c; dropout's four and block-sparse's two
    arguments as ``make_flash_backward_tc``'s. ``scale`` the softmax scale and
    ``qscale`` = scale * log2(e), float32. ``vector``: d % 8 == 0 and q, k, v, do 16-byte
    aligned (tiles copied by cp.async). ``partial``, ``partial_do`` read only with
    ``dtype="float32"`` (else pass any array): q, k, v, do are then split_half's rows (2 D16
    fp16 parts; q, k, v's heads scaled by scale_of(partial, .) as the forward took them, do's
    by scale_of(partial_do, .)), dk, dv float32, dq summed in the inputs' units. Launch with
    grid (Tc, B*H_kv), ``tiling.threads_for("flash_backward_half")`` threads and
    ``2 * sum(simulator.fp16x3.backward_smem_terms(tiling, d, dtype == "float32").values())``
    bytes of dynamic shared memory."""
    mask = Mask.of(mask)
    UPPER, LOWER, GROUP, DROPOUT = mask.upper, mask.lower, mask.group, mask.dropout
    SPARSE = mask.sparse
    BR, BC = tiling.Br, tiling.Bc
    if DROPOUT:   # Philox blocks of 16 x 16 scores inside a tile (simulator.tiling.DROPOUT_SIDE)
        tiling.check_dropout()
    SPLIT = dtype == "float32"         # three fp16 products a product, of hi and lo parts
    T = tiling.threads_for("flash_backward_half")
    WARPS = T // 32
    D16, LS = tiling.half_depth(d), tiling.half_score_stride
    W = 2 * D16 if SPLIT else d        # columns of a row in HBM (split: hi parts, then lo)
    LD = tiling.half_stride(W)         # split: a tile row holds both parts, lo at D16 on
    PARTS = 2 if SPLIT else 1          # fragments a product's operands come in (hi, lo)
    # (A part, B part) of each mma a product takes: split, the two cross terms first, as the
    # forward; S^T = Kj Qi^T takes the forward's S = Qi Kj^T products in its order, transposed
    PRODUCTS = ((0, 1), (1, 0), (0, 0)) if SPLIT else ((0, 0),)
    T_PRODUCTS = tuple((b, a) for a, b in PRODUCTS)
    # split: P' = 2^15 P, with dropout 2^(15 - ceil(log2 rp)) P (P' rp below 2^15, as the
    # forward); dS'' = sigma dS, sigma = s_v s_do 2^-(16 + CD + ceil(log2 rp)): |dP| and |D| are at
    # most d max|v| max|dO| (D = sum_c P_c Z_c dP_c), so |dS''| < 2^15; dS'' = P' (Z dP' A - D B)
    # with A = 2^-(31 + CD) (the s_v s_do of dP' = s_v s_do dP cancel) and B = s_v s_do A
    P_SHIFT = 15
    DS_A = np.float32(2.0 ** -(31 + math.ceil(math.log2(d))) if SPLIT else 1.0)
    KS, NT, QK, OT = D16 // 16, BR // 8, BR // 16, D16 // 8   # k steps over d; query tiles; query
    JS, CP = BC // 16, D16 // 16       # steps; column tiles; key steps of dS Kj; column pairs
    UNITS = (BR // 16) * CP            # 16 x 16 pieces of dQ_i
    PER_WARP = -(-UNITS // WARPS)
    SHARED_ROWS = CP % PER_WARP == 0   # a warp's pieces of dQ_i share their 16 rows
    KO, VO, QO, OO, SO, LO, DO = (np.uint64(x) for x in np.cumsum(
        [0, *backward_smem_terms(tiling, d, SPLIT).values()])[:-1])
    QSTAGE = np.uint64(BR * LD)
    LF, DF, FSTAGE = LO // np.uint64(2), DO // np.uint64(2), np.uint64(BR)   # in fp32 words
    SW = SO // np.uint64(2)                                                  # dS^T in 4-byte words
    SPART = np.uint64(BC * LS)         # split: dS^T's lo part after its hi part (16-bit elements)
    # (kk, p) order of the products of dVj, dKj: query step by query step (fp16); split, column
    # pair by column pair, each from zero over the step's queries, then added in fp32
    PAIRS = (tuple((kk, p) for p in range(OT // 2) for kk in range(QK)) if SPLIT
             else tuple((kk, p) for kk in range(QK) for p in range(OT // 2)))

    h = half_ops("float16" if SPLIT else dtype)
    mma, pack2, to_half = h.mma, h.pack2, h.to_half
    ldmatrix, ldmatrix_trans = h.ldmatrix, h.ldmatrix_trans
    cp_async4, commit, wait_all = h.cp_async4, h.commit, h.wait_all
    w = warp_ops()
    exp2, split_finite = w.exp2_ftz, w.split_finite
    copy_q, copy_kv = (make_tile_copy(rows, T, W, tiling.half_depth(W), LD, vector or SPLIT,
                                      "float16" if SPLIT else dtype) for rows in (BR, BC))
    store_key_rows = make_key_rows_store(d, OT, identity if SPLIT else to_half)
    ALIGN = smem_alignment()
    FP32_MAX = np.float64(np.finfo(np.float32).max)

    @cuda.jit(device=True)
    def load_row_block(smem, stats, stage, q, do, lse, dvec, row0, rows, tid):
        """HBM -> SRAM stage ``stage`` (0 or 1), by cp.async: Qi, dOi (rows past ``rows`` zero)
        and L_i, D_i (zero past ``rows``); row0 is the block's first row in the flat tensors."""
        copy_q(smem, QO + stage * QSTAGE, q, row0, rows, tid)
        copy_q(smem, OO + stage * QSTAGE, do, row0, rows, tid)
        for r in range(tid, BR, T):
            at = uint64(row0 + r) if r < rows else uint64(row0)
            n = 4 if r < rows else 0
            cp_async4(stats, LF + stage * FSTAGE + uint64(r), lse, at, n)
            cp_async4(stats, DF + stage * FSTAGE + uint64(r), dvec, at, n)

    def rows_times_tile_t(c, a, b, smem, a_at, b_at):
        """c = A B^T (16 x Br C fragments) for A = this warp's 16 rows of Kj or Vj (this lane's
        ldmatrix address a_at) and B = the stage's Qi or dOi (b_at); a, b: registers for a k
        step's fragments of each part."""
        for n in static_range(NT):
            for e in static_range(4):
                c[n, e] = ZERO
        for ks in static_range(KS):
            for part in static_range(PARTS):
                a[part, 0], a[part, 1], a[part, 2], a[part, 3] = ldmatrix(
                    smem, a_at + uint64(part * D16 + 16 * ks))
            for p in static_range(NT // 2):
                for part in static_range(PARTS):
                    b[part, 0], b[part, 1], b[part, 2], b[part, 3] = ldmatrix(
                        smem, b_at + uint64(part * D16 + 16 * p * LD + 16 * ks))
                for u in static_range(len(T_PRODUCTS)):
                    ia, ib = T_PRODUCTS[u]
                    for hb in static_range(2):
                        n = 2 * p + hb
                        c[n, 0], c[n, 1], c[n, 2], c[n, 3] = mma(
                            a[ia, 0], a[ia, 1], a[ia, 2], a[ia, 3], b[ib, 2 * hb], b[ib, 2 * hb + 1],
                            c[n, 0], c[n, 1], c[n, 2], c[n, 3])

    def add_scores_times_tile(acc, tmp, b, x, smem, b_at, factor):
        """acc += X B (16 x D16 C fragments) for X (16 keys x Br queries) held as A fragments
        ``x`` (one per 16-query step and part) and B = the stage's dOi or Qi (b_at: .trans
        address); split, each column pair's X B summed from zero in ``tmp`` and added to acc
        times ``factor`` (which undoes the parts' scales)."""
        for u in static_range(len(PAIRS)):
            kk, p = PAIRS[u]
            for part in static_range(PARTS):
                b[part, 0], b[part, 1], b[part, 2], b[part, 3] = ldmatrix_trans(
                    smem, b_at + uint64(part * D16 + 16 * kk * LD + 16 * p))
            for v in static_range(len(PRODUCTS)):
                ix, ib = PRODUCTS[v]
                for hb in static_range(2):
                    n = 2 * p + hb
                    if SPLIT:
                        if kk == 0 and v == 0:
                            for e in static_range(4):
                                tmp[hb, e] = ZERO
                        tmp[hb, 0], tmp[hb, 1], tmp[hb, 2], tmp[hb, 3] = mma(
                            x[kk, ix, 0], x[kk, ix, 1], x[kk, ix, 2], x[kk, ix, 3],
                            b[ib, 2 * hb], b[ib, 2 * hb + 1], tmp[hb, 0], tmp[hb, 1], tmp[hb, 2], tmp[hb, 3])
                        if kk == QK - 1 and v == len(PRODUCTS) - 1:
                            for e in static_range(4):
                                acc[n, e] += tmp[hb, e] * factor
                    else:
                        acc[n, 0], acc[n, 1], acc[n, 2], acc[n, 3] = mma(
                            x[kk, ix, 0], x[kk, ix, 1], x[kk, ix, 2], x[kk, ix, 3],
                            b[ib, 2 * hb], b[ib, 2 * hb + 1], acc[n, 0], acc[n, 1], acc[n, 2], acc[n, 3])

    def pack_fragments(x, c):
        """x = the C fragments c (16 keys x Br queries, fp32) rounded to the format (split: as
        fp16 hi and lo parts), as A fragments of the 16-query steps: keys g, g + 8 of queries
        16 kk + 2t (+1), then + 8."""
        for kk in static_range(QK):
            for q4 in static_range(4):   # register q4: queries 2t, 2t + 1 (+ 8 for q4 >= 2)
                n, e0 = 2 * kk + q4 // 2, 2 * (q4 % 2)   # of key g (+ 8 for odd q4)
                if SPLIT:
                    h0, l0 = split_finite(c[n, e0])
                    h1, l1 = split_finite(c[n, e0 + 1])
                    x[kk, 0, q4] = pack2(h0, h1)
                    x[kk, 1, q4] = pack2(l0, l1)
                else:
                    x[kk, 0, q4] = pack2(c[n, e0], c[n, e0 + 1])

    rows_times_tile_t, add_scores_times_tile, pack_fragments = (
        cuda.jit(device=True)(unrolled(f)) for f in (rows_times_tile_t, add_scores_times_tile,
                                                    pack_fragments))

    @cuda.jit(device=True)
    def head_factors(partial, partial_do, bh, kvh, qscale, scale, p_scale):
        """split: (qs, B, dQ's, dK's, dV's factor) of query head bh (K/V head kvh) from the
        heads' power-of-two scales (kernels/head_scale; ``partial``: q heads, then k heads, then
        v heads; ``partial_do``: dO's): qs = qscale / (s_q s_k) as the forward takes it; with
        sigma = B p_scale (dS'' = sigma dS), dQ = scale dQ'' / (sigma s_k), and each step's
        dK'' / (sigma s_q), dV'' / (p_scale s_do) summed into dKj, dVj (in float64: a product of
        two scales may overflow fp32)."""
        heads_kv = cuda.gridDim.y
        heads = heads_kv * GROUP
        s_q, s_k = scale_of(partial, bh), scale_of(partial, heads + kvh)
        qs = qscale / s_q / s_k
        if -FP32_TINY < qs < FP32_TINY:   # (0 would turn a masked -inf into NaN)
            qs = FP32_TINY if qscale > ZERO else -FP32_TINY
        s_do = float64(scale_of(partial_do, bh))
        b = float64(DS_A) * float64(scale_of(partial, heads + heads_kv + kvh)) * s_do
        sigma = b * float64(p_scale)
        return (qs, float32(min(b, FP32_MAX)), float32(float64(scale) / (sigma * float64(s_k))),
                float32(1.0 / (sigma * float64(s_q))), float32(1.0 / (float64(p_scale) * s_do)))

    def flash_backward_half(q, k, v, do, lse, dvec, dq, dk, dv, scale, qscale, n_q, n_k, hi, lo,
                            seed_lo, seed_hi, keep_from, rp, blk_ptr, blk_idx, partial, partial_do):
        # one block of dynamic shared memory, three views: 16-bit tiles, fp32 L and D, and
        # 4-byte words for the stores of dS^T
        smem = cuda.shared.array(0, uint16, alignment=ALIGN)
        stats = cuda.shared.array(0, float32, alignment=ALIGN)
        words = cuda.shared.array(0, uint32, alignment=ALIGN)
        j, kvh = cuda.blockIdx.x, cuda.blockIdx.y     # K/V block, K/V head
        if UPPER and not LOWER:
            # low j see the most row blocks: start them first over all heads, so that the final
            # wave holds the lightest blocks (a window's blocks see about as many each: plain
            # order)
            j, kvh = tile_major_block()
        col0 = j * BC
        cols = min(BC, n_k - col0)
        tid = cuda.threadIdx.x
        lane = tid % 32
        warp = tid // 32
        g = lane // 4                 # fragment row group: this lane's keys are g and g + 8 (of 16)
        t = lane % 4                  # thread in group: its queries are 2t, 2t + 1 of each 8
        mi, ml = lane // 8, lane % 8  # the ldmatrix matrix and row this lane addresses
        wkey = warp * 16              # this warp's first key of the Bc tile
        # the row blocks that see Kj, the same for each query head (the band does not depend
        # on the head)
        if SPARSE:                    # row blocks blk_idx[first..end - 1]
            first, end = blk_ptr[j], blk_ptr[j + 1]
        else:                         # row blocks first..end - 1
            first, end = row_block_range(col0, col0 + cols - 1, hi, lo, BR, n_q, UPPER, LOWER)

        # split: P' = 2^shift P (p_scale), and each query head's factors (head_factors, at the
        # head's first step); fp16: P itself, scale for dQ
        p_scale = ONE
        qs, ds_b, dq_f, dk_f, dv_f = qscale, ONE, scale, ONE, ONE
        if SPLIT:
            p_scale = math.ldexp(ONE, int(P_SHIFT) - (math.ceil(math.log2(rp)) if DROPOUT else 0))
        copy_kv(smem, KO, k, kvh * n_k + col0, cols, tid)
        copy_kv(smem, VO, v, kvh * n_k + col0, cols, tid)
        if first < end:
            row_first = (blk_idx[first] if SPARSE else first) * BR
            load_row_block(smem, stats, uint64(0), q, do, lse, dvec,
                           kvh * GROUP * n_q + row_first, min(BR, n_q - row_first), tid)
        commit()

        s = cuda.local.array((NT, 4), float32)    # registers: S^T, then P^T (C fragments)
        ds = cuda.local.array((NT, 4), float32)   # registers: dP^T, then dS^T
        p16 = cuda.local.array((QK, PARTS, 4), uint32)    # registers: P^T as A fragments
        ds16 = cuda.local.array((QK, PARTS, 4), uint32)   # registers: dS^T as A fragments
        wd = cuda.local.array((2, 4), uint64)     # registers: two Philox calls' words (dropout)
        dk_acc = cuda.local.array((OT, 4), float32)   # registers: C fragments of dKj
        dv_acc = cuda.local.array((OT, 4), float32)   # registers: C fragments of dVj
        a = cuda.local.array((PARTS, 4), uint32)      # registers: a k step's A fragments
        b = cuda.local.array((PARTS, 4), uint32)      # ... and B fragments of two n tiles
        tmp = cuda.local.array((2, 4), float32)       # split: a step's dKj, dVj column pair
        cq = cuda.local.array((PER_WARP, 2, 4), float32)   # registers: this warp's pieces of dQ_i
        qa = cuda.local.array(PER_WARP, uint64)   # their ldmatrix addresses in dS^T (query tile)
        qb = cuda.local.array(PER_WARP, uint64)   # ... and in Kj (column pair)
        for n in static_range(OT):
            for e in static_range(4):
                dk_acc[n, e] = ZERO
                dv_acc[n, e] = ZERO
        # this lane's ldmatrix row addresses (see the module docstring)
        ka = KO + uint64((wkey + 8 * (mi % 2) + ml) * LD + 8 * (mi // 2))
        va = ka + (VO - KO)
        qrow = uint64((8 * (mi // 2) + ml) * LD + 8 * (mi % 2))     # Qi, dOi as B of S^T, dP^T
        qcol = uint64((8 * (mi % 2) + ml) * LD + 8 * (mi // 2))     # ... .trans as B of dV, dK
        sa = SO + uint64((8 * (mi // 2) + ml) * LS + 8 * (mi % 2))  # dS^T .trans as A of dQ
        kb = KO + qcol                                              # Kj .trans as B of dQ
        for f in static_range(PER_WARP):
            u = min(warp * PER_WARP + f, UNITS - 1)
            ua = min(warp * PER_WARP + (0 if SHARED_ROWS else f), UNITS - 1)
            qa[f] = sa + uint64(16 * (ua // CP))
            qb[f] = kb + uint64(16 * (u - u // CP * CP))

        # steps: the row blocks first <= i < end of each query head of the group in turn (one
        # loop, not a loop over heads around one over row blocks: at GROUP = 1 the nested form
        # cost ptxas 32 B of spills at 64 x 128, d = 64)
        nb = max(0, end - first)      # row blocks a head
        for step in range(GROUP * nb):
            qh = step // nb if GROUP > 1 else 0
            ii = first + step - qh * nb   # the step's place in the head's row blocks
            i = blk_idx[ii] if SPARSE else ii
            bh = kvh * GROUP + qh     # query head (GQA: the group's heads in turn)
            if SPLIT and ii == first:   # the head's factors (each thread reads 4 GX maxima)
                qs, ds_b, dq_f, dk_f, dv_f = head_factors(partial, partial_do, bh, kvh, qscale,
                                                          scale, p_scale)
            row0 = i * BR
            rows = min(BR, n_q - row0)
            stage = uint64(step % 2)
            wait_all()
            # barrier: this step's Qi, dOi, L_i, D_i (first step: and Kj, Vj) complete in SRAM;
            # every warp done with the previous step (its stage and dS are free)
            cuda.syncthreads()
            if step + 1 < GROUP * nb:
                nbh, nii = bh, ii + 1            # the head's next row block,
                if GROUP > 1 and ii + 1 == end:
                    nbh, nii = bh + 1, first     # else the next head's first
                nrow0 = (blk_idx[nii] if SPARSE else nii) * BR
                load_row_block(smem, stats, uint64(1) - stage, q, do, lse, dvec,
                               nbh * n_q + nrow0, min(BR, n_q - nrow0), tid)
                commit()
            qst = QO + stage * QSTAGE
            os = OO + stage * QSTAGE
            ls = LF + stage * FSTAGE
            dd = DF + stage * FSTAGE

            rows_times_tile_t(s, a, b, smem, ka, qst + qrow)   # S^T
            rows_times_tile_t(ds, a, b, smem, va, os + qrow)   # dP^T
            for n in static_range(NT):
                if DROPOUT:   # the forward's mask, regenerated: P Z for dV, dS = P (Z dP - D);
                    # two Philox calls a pair of query tiles, one a query parity e, as
                    # flash_backward_tc (word 2 (n % 2) + hk, half g % 2)
                    if n % 2 == 0:
                        for e in static_range(2):
                            wd[e, 0], wd[e, 1], wd[e, 2], wd[e, 3] = dropout_words(
                                seed_lo, seed_hi, bh, row0 + 8 * n + 2 * t + e, col0 + wkey + g)
                    for hk in static_range(2):            # slot 2hk + e: key wkey + g + 8hk
                        for e in static_range(2):
                            r = 8 * n + 2 * t + e
                            l2 = lse_base2(stats[ls + uint64(r)])
                            z = rp if dropout_kept(wd[e, 2 * (n % 2) + hk], g, keep_from) else ZERO
                            x = exp2(s[n, 2 * hk + e] * qs - l2) * p_scale
                            s[n, 2 * hk + e] = x * z
                            ds[n, 2 * hk + e] = x * (ds[n, 2 * hk + e] * z * DS_A
                                                     - stats[dd + uint64(r)] * ds_b)
                else:
                    for e in static_range(2):
                        r = 8 * n + 2 * t + e                 # query of slots e, 2 + e
                        l2 = lse_base2(stats[ls + uint64(r)])  # +inf where a row saw no key: P = 0
                        dr = stats[dd + uint64(r)]
                        for hk in static_range(2):            # slot 2hk + e: key wkey + g + 8hk
                            x = exp2(s[n, 2 * hk + e] * qs - l2) * p_scale
                            s[n, 2 * hk + e] = x
                            ds[n, 2 * hk + e] = x * (ds[n, 2 * hk + e] * DS_A - dr * ds_b)
            # interior tiles (full, and inside the band) need no mask; rows past N_q have
            # dO = 0 and D = 0, so dS = 0 and P^T dO = 0 there
            if needs_mask(row0, BR, col0, cols, BC, hi, lo, UPPER, LOWER):
                for hk in static_range(2):
                    key = wkey + g + 8 * hk
                    for n in static_range(NT):
                        for e in static_range(2):
                            if masked(8 * n + 2 * t + e, key, row0, col0, cols, hi, lo, UPPER,
                                      LOWER):
                                s[n, 2 * hk + e] = ZERO
                                ds[n, 2 * hk + e] = ZERO
            pack_fragments(p16, s)
            add_scores_times_tile(dv_acc, tmp, b, p16, smem, os + qcol, dv_f)   # dVj += P^T dOi
            pack_fragments(ds16, ds)
            add_scores_times_tile(dk_acc, tmp, b, ds16, smem, qst + qcol, dk_f)  # dKj += dS^T Qi
            # dS^T -> SRAM: ds16[kk, 2hq + hk] holds keys wkey + g + 8hk, queries 16kk + 8hq +
            # 2t (+1): one 4-byte word
            for kk in static_range(QK):
                for hq in static_range(2):
                    for hk in static_range(2):
                        for part in static_range(PARTS):   # (split: the lo part SPART on)
                            words[SW + uint64((part * SPART + (wkey + g + 8 * hk) * LS + 16 * kk
                                               + 8 * hq + 2 * t) // 2)] = ds16[kk, part, 2 * hq + hk]
            # barrier: dS^T complete before the dQ product reads other warps' keys
            cuda.syncthreads()

            # dQacc_i += scale dS Kj: the (Br/16) x (D16/16) pieces of 16 x 16 dealt to the warps
            # in runs of PER_WARP; a warp past the last piece recomputes it (every warp must run
            # the same mma) and does not add it. Where a run lies in one query tile
            # (SHARED_ROWS) its pieces share the A fragment of each key step.
            for f in static_range(PER_WARP):
                for h2 in static_range(2):
                    for e in static_range(4):
                        cq[f, h2, e] = ZERO
            for kk in static_range(JS):
                for f in static_range(PER_WARP):
                    if f == 0 or not SHARED_ROWS:
                        for part in static_range(PARTS):
                            a[part, 0], a[part, 1], a[part, 2], a[part, 3] = ldmatrix_trans(
                                smem, qa[f] + uint64(part * SPART + 16 * kk * LS))
                    for part in static_range(PARTS):
                        b[part, 0], b[part, 1], b[part, 2], b[part, 3] = ldmatrix_trans(
                            smem, qb[f] + uint64(part * D16 + 16 * kk * LD))
                    for u in static_range(len(PRODUCTS)):
                        ia, ib = PRODUCTS[u]
                        for h2 in static_range(2):
                            cq[f, h2, 0], cq[f, h2, 1], cq[f, h2, 2], cq[f, h2, 3] = mma(
                                a[ia, 0], a[ia, 1], a[ia, 2], a[ia, 3], b[ib, 2 * h2], b[ib, 2 * h2 + 1],
                                cq[f, h2, 0], cq[f, h2, 1], cq[f, h2, 2], cq[f, h2, 3])
            for f in static_range(PER_WARP):
                unit = warp * PER_WARP + f
                if unit < UNITS:
                    mt = unit // CP
                    c0 = 16 * (unit - mt * CP)
                    for hr in static_range(2):
                        r = 16 * mt + g + 8 * hr
                        if r < rows:
                            at = uint64((bh * n_q + row0 + r) * d)
                            for h2 in static_range(2):
                                for e in static_range(2):
                                    c = c0 + 8 * h2 + 2 * t + e
                                    if c < d:
                                        cuda.atomic.add(dq, at + uint64(c), dq_f * cq[f, h2, 2 * hr + e])
        wait_all()   # (no active row block: the copies of Kj, Vj may still be in flight)

        store_key_rows(dk, dv, dk_acc, dv_acc, scale, kvh * n_k + col0, wkey + g, cols, t)

    return cuda.jit(**jit_options("flash_backward_half", tiling, d))(unrolled(flash_backward_half))
