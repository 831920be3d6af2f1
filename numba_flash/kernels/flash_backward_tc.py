"""FlashAttention backward on tensor cores: TF32 mma.sync with the 3xTF32 split, KV-outer.

Algorithm (per K/V head and K/V block j; grid Tc x B*H_kv, Bc/16 warps a block)::

    D = rowsum(dO * O), dQ = 0           (flash_backward.make_row_dot, before this kernel)
    load Kj, Vj (Bc x d) HBM -> SRAM as TF32 hi + lo parts, once; dKj = dVj = 0
                                         (registers: warp w owns keys 16w..16w+15 of dK, dV)
    for each query head of the K/V head's group (GQA / MQA: GROUP of them; 1 without):
      for each row block i that sees Kj: (row_block_range: rows outside the band are neither
                                          loaded nor computed; the range is the same each head;
                                          block-sparse: the i of block j's list only)
        load Qi (times scale*log2(e)), dOi -> SRAM as hi + lo, each twice (row-major and
                                         transposed); L_i (base 2), D_i -> SRAM
        S^T = Kj Qi^T                    (registers: mma C fragments, rows = keys, cols = queries)
        P^T = exp2(S^T - L_i), masked    (in place)
        dVj += P^T dOi                   (P^T's C fragments are the A fragments: no SRAM)
        dP^T = Vj dOi^T;  dS^T = P^T * (dP^T - D_i)
        dKj += dS^T Qi;  dS -> SRAM as hi + lo
        dQ_i += scale dS Kj              (warps split the Br x d product; fp32 atomics, HBM)
    dKj times ln 2 (scale dS^T Q, as Qi holds scale*log2(e) q), dVj -> HBM, once: with GQA
    they are sums over the group's query heads

Warp pairs (``Tiling.warp_pairs``, compile-time; v12, the default for 64 < d <= 128): warps 2p
and 2p + 1 share keys 16p..16p + 15, Bc/8 warps a block. Role 0 computes S^T, P^T (mask,
dropout) and dVj += P^T dOi, passing P^T to role 1 through SRAM; role 1 computes dP^T in the
meantime, then dS^T, dKj += dS^T Qi and the dS store; all warps share the dQ product. Each lane
holds one accumulator (dVj or dKj: 64 registers at d = 128, not 128), so that 8 warps fit a
multiprocessor at d = 128 (16 x 64, 209 KB; v12: 171 registers, no spills) where one warp a
tile had 4 (255 registers, spills). Same instructions a tile as one warp, split in two, plus P^T's
16-byte stores and loads (Br/8 each a lane a step) and its named barrier.

The mask is a band (simulator.spec.Mask: causal, a sliding window, or both sides), fixed at
compile time as ``upper`` / ``lower``, its offsets ``hi``, ``lo`` at run time; tiles inside
the band (``needs_mask`` false) skip the per-element comparisons.

The HBM traffic is the FFMA backward's (flash_backward.py, v3) element for element: the same
tile loads, one atomic add per dQ element per active block pair, dK and dV written once;
simulator.predict("flash_backward_tc") counts it (tests/test_traffic_exact.py; causal or no
mask, GROUP = 1). With GQA, Kj, Vj are read and dKj, dVj written once per K/V head, not per
query head.

Tensor cores: m16n8k8 TF32 products, each operand split into hi + lo and multiplied as
a_hi b_hi + a_hi b_lo + a_lo b_hi (warp_ops().mma_3xtf32), so results are at fp32 level. dKj,
dVj are summed on the tensor cores from zero for each row block and added in fp32 registers
(round to nearest): chaining the mma accumulation over all N_q / Br row blocks would pile up
its truncating adds (the forward's v5 lost 2e-4 that way at N = 16384).

An m16n8k8 product may sum its 8 k indices in any order, as long as A and B agree, so the
C fragments of P^T and dS^T serve as A fragments directly: lane (g, t) holds queries 2t, 2t + 1
of each group of 8 in its C fragment and feeds them as A slots t, t + 4, reading B (dOi, Qi) at
the same two queries. P is split once into hi + lo for dV, then rebuilt as hi + lo (within
2^-21 of P) for dS, so that P's fp32 copy need not stay live beside its two parts. The splits
clear lo's low bits (``warp_ops(lo_truncated=True)``), though the mma ignores them: with lo
exact, ptxas allocated this kernel differently (d = 64: 176 registers, no spills, against 255
and 72 B) and it ran slower: 20.7 ms against 17.9 at (4,16,4096,64) (H200, 2026-11-29; fwd + bwd
minus fwd in the two bench runs, results/h200/tuning/host_overhead.log).

Every fragment part is one shared load that lands in the registers the mma reads it from (the
forward's v7): a lane's A operands are one 16-byte load of 4 hi parts and one of 4 lo parts, its
B operands one 16-byte load [hi, hi, lo, lo] (dQ's: two 8-byte loads). The slot order decides
the layouts; a tile read both along its rows and along its columns (Qi, dOi) is stored twice.
SRAM layouts (floats; an element's hi part named, its lo part in the chunk given):
    Kj, Vj   [key, c] for key = 16 b + 8 h + x (h = 0, 1), c = 2 u + e: row pair p = 8 b + x,
             hi at p LP + 4 ((2u) ^ f(p)) + 2e + h, lo in chunk (2u + 1) ^ f(p); LP = 4 D8,
             f(p) = p % 2 + 4 ((p // 2) % 2) (an XOR of 16-byte chunks): for k = 16 b + x,
             [hi(k, 2u), hi(k + 8, 2u), hi(k, 2u + 1), hi(k + 8, 2u + 1)] is a lane's A of S^T,
             dP^T, and hi(k, c), hi(k + 8, c) its B of dS Kj (keys k, k + 8 in slots t, t + 4).
             Zero columns past d, rows past N_k; whole kernel
    Qi, dOi  [q, c] row-major, c = 2u + e: hi at q LQ + 4 (u ^ 4 (q % 2)) + e, lo 2 on
             (Tiling.mma_swizzled_stride): B of S^T, dP^T
    Qi^T, dOi^T  [q, c] transposed, q = 2p + e: hi at c LT + 4 (p ^ s(c)) + e, lo 2 on; LT = 2 Br,
             s(c) = (c // 2) % 8 ^ 4 (c % 2): B of dK, dV. Both copies zero past N_q; one i step
    dS       [q, key] for q = 16 b + 8 h + x, key = 16 m + 8 h' + y: row pair r = 8 b + x, key
             pair y' = 8 m + y; hi at r LS + 4 ((2 y') ^ (r % 8)) + 2 h' + h, lo in chunk
             (2 y' + 1) ^ (r % 8); LS = 4 Bc: A of dS Kj (keys y, y + 8 of k step 2 m + y // 4
             in slots t, t + 4). One i step
    L, D     Br floats: L_i times log2(e) (+inf for rows past N_q and rows that saw no key, so
             P = 0 there), D_i: one i step
    P^T      (warp pairs only) 16 Br floats a 16-key tile p, at 16 Br p: role 0's C fragments
             of P^T by lane, slots (n, 0..3) of lane l in chunk 32 n + l (conflict-free 16-byte
             stores and loads); with dropout a dropped score's P negated (role 1 reads the kept
             bits from the signs). One i step
Bank conflicts: none on fragment reads (the 8 lanes of a 16-byte access phase, 16 of an 8-byte
one, cover all 32 banks: the XOR masks above); 2-way on the 16-byte stores of dS (Br Bc / 64 of
them a block a step) and of Kj, Vj (once); none on the stores of Qi, dOi where D8 is a multiple
of 16 (2-way at D8 = 8, 24). A thread moves its share of a
tile as 2 x 2 elements (rows r, r + 8 of Kj, Vj; rows 2p, 2p + 1 of Qi, dOi; columns 2u, 2u + 1)
in 16-byte stores. The XORs act on bits of the chunk index that the compile-time loops also set,
so each lane keeps two base offsets where needed (even and odd k step, or k step + column tile).
The product helpers take offsets in chunks (floats / 4), so that their 16-byte alignment is
visible to the compiler after inlining (else it splits the loads).

Barriers per step: (1) after loading Qi, dOi, L, D: the tiles (and, at the first step, Kj, Vj)
are complete before any warp reads fragments of them, and every warp's dQ product has read the
previous dS before it is overwritten; (2) after writing dS: dS is complete before the dQ product
reads other warps' keys. The loads need no barrier before them: every warp last read the
previous Qi, dOi, L, D before barrier (2) of the previous step (racecheck agrees, v7).
Warp pairs add one named barrier a step, 1 + p for tile p (so at most 15 tiles, Bc <= 240):
role 0 arrives (``bar.arrive``, no wait) after storing P^T, role 1 waits there (``bar.sync``)
after its dP^T and before loading P^T. Role 0 overwrites P^T only after barrier (1) of the next
step, which role 1 reaches after its loads of it: no barrier for that.

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
    v5  fragment loads in mma order (the forward's v7): Kj, Vj and dS by row pairs, Qi and dOi
        stored twice (row-major for S^T, dP^T; transposed for dK, dV), [hi, hi, lo, lo] chunks,
        XOR swizzles; 16-byte tile stores; dKj += dS^T Qi before the dS store (else ptxas copies
        the A fragments for every mma); a warp's dQ tiles summed side by side, sharing their A
        fragments of dS. 224 KB of shared memory at 32 x 128, d = 64. SASS of the step loop
        (ptxas, sm_90, 32 x 128, d = 64): 3963 -> 2117 instructions, register moves 1742 -> 171
        beside 480 HMMA, shared loads 146 + 139 + 186 (16-, 8-, 4-byte) -> 192 + 75 + 2; 255
        registers, spill stores 64 -> 32 B. At 16 x 64, d = 128: 4165 -> 2459 instructions,
        spill stores 908 -> 164 B. 36.3 TFLOP/s (v4 23.4), 37.3 at B=1 N=16384, causal 30.3;
        max gradient error 3.9e-6 (5.6e-6 at N=16384) of max |dx|; forward v7 + v5: 37.7 TFLOP/s
        = 1.08x SDPA EFFICIENT_ATTENTION's forward + backward (34.9) in the same run, 40.4 =
        1.17x at N=16384, causal 31.1 = 0.96x (results/h200/tuning/tune_run7_v6_v7.log).
    v6  causal: K/V blocks launched heaviest first over all heads (v5 ordered them within each
        head only, so each head's heaviest block could start in the last wave; the same change
        took the forward from 27.3 to 30.4). Bench (2026-11-29, results/h200/bench/bench.csv):
        forward v7 + v6 38.1 TFLOP/s = 1.09x SDPA EFFICIENT_ATTENTION's forward + backward,
        40.6 = 1.17x at B=1 N=16384, causal 31.5 = 0.97x.
    v7  the barrier before each row block's loads dropped (two a step): its tiles were last
        read before the dS barrier; compute-sanitizer racecheck without it on the H200 (tools/
        sanitize_kernels.py --only bwd_fa2: d = 20, 24, 40, 64, 80, causal, ragged): 0 hazards.
        Not timed.
    v8  band mask (sliding window, combinable with causal) and GQA / MQA: grid over K/V heads,
        the group's query heads looped in the block (Kj, Vj loaded once, dKj, dVj summed over
        them), row blocks from row_block_range (no skipped-block trips); heaviest-first order
        kept for upper-only masks. Checked against float64 under the CUDA simulator only; no
        speed change intended, not measured on the GPU yet.
    v9  dropout (Mask.dropout, compile-time; Algorithm 4): the forward's mask regenerated from
        (seed, bh, row, key), one Philox call per query pair of a key (the transposed tiles),
        kept in a 64-bit mask; dVj += (P Z)^T dOi, dS = P (Z dP - D). Kernels without dropout
        unchanged. H200, 2026-12-02 (tools/dropout_timing.py, p = 0.1): d = 64 16.5 -> 22.9 ms
        (+39 %), d = 128 +15 %, causal d = 128 +14 %.
    v10 dropout: two Philox calls per 8 scores of a lane (was 4), 16-bit randoms
        (tiles.dropout_words). H200, 2026-12-02 (tools/dropout_timing.py, p = 0.1): d = 64
        16.6 -> 18.3 ms (+10 %), d = 128 +4 %, causal d = 128 +4 %.
    v11 block-sparse (Mask.sparse, compile-time; Algorithm 5): K/V block j visits the row
        blocks of its list (simulator.blocks.BlockGrid.column_lists); kernels without it take
        two more (unread) arguments.
    v12 warp pairs (Tiling.warp_pairs; default for 64 < d <= 128, 16 x 64): two warps a 16-key
        tile, S^T + dV on one, dP^T + dK on the other, P^T through SRAM; at d = 128 8 warps an
        SM instead of 4, 171 registers and no spills instead of 255 and 12 B (ptxas 13.0,
        sm_90). H200, 2026-12-03, backward alone against v11's 16 x 64 in the same run (per-call
        CUDA events, median of 10: results/h200/tuning/warp_pairs_2026-12-03.log):
        (4,16,4096,128) 79.1 -> 47.8 ms (17.4 -> 28.7 TFLOP/s), causal (2,32,4096,128) 45.9 ->
        28.0, (8,32,2048,128) 80.0 -> 48.5, d = 80 (4,16,4096) 51.0 -> 41.2; gradient errors
        unchanged (<= 7.0e-6 of max |dx| against float64). The runtime model had predicted 71.5
        ms (51.6 counting each warp's role alone). Kernels without pairs unchanged.
    v13 d > 128 (STEPWISE): S^T and dP^T summed k step by k step, each step's three products
        from zero and added in fp32, as the forward's S in its v14 (so the S recomputed here
        and the forward's, which set L, are summed the same way, though not bitwise the same):
        chained over all d/8 steps, the tensor core's adds made the gradients' error grow with
        d (H200, 2026-12-03, d = 256: 3.2-6.8x plain fp32's, stepwise 0.3-0.7x). d <= 128
        keeps the chain. (Its VERSION read 12 until 2026-12-04, and the forward's 13 for v14.)
    v14 a step's loads of Qi, dOi, L_i, D_i all issued before its first store (fetch_tile,
        store_twice): v13 moved each tile as a loop of 2 x 2 element items (tools/kernel_sass.py:
        inner loops of 4 LDG and 4 STS.128 an iteration), each iteration's stores waiting for its
        loads, so a thread waited out an L2 round trip per item, four a step at d = 128 (ncu source
        sampling of v13 at (4,16,4096,128): 22 % of warp samples "long scoreboard" on the loads'
        consumers; 8 % with these loads). And dP^T, dQ_i each summed in two independent mma
        chains, the even and the odd k steps, added in fp32 at the end (DP_CHAINS; dQ_i keeps
        one chain where a warp has more than 4 of its tiles, DQ_CHAINS: d = 256); S^T keeps one
        chain, as the forward's S that set L. A thread's loads go in batches of 2 items a tile
        (BATCH: all of them at the default tilings of d <= 128; d = 256 has 32 items a thread: all
        at once spilled 7.7 KB, unrolled batches 6.6, so they loop, load_batch). ptxas 13.0: 255
        registers at d = 128 with 8 / 12 B of spill stores / loads (v13: 171, none), d = 64 255
        and 28 / 56 B (v13 40 / 48), d = 256 4856 / 4612 B (v13 4316 / 3612; not timed).
        H200, 2026-12-04, tools/backward_timing.py, backward alone, v13 and v14 in the same run
        (results/h200/tuning/backward_v14_2026-12-04.log, run 5): (4,16,4096,128) 48.04 -> 39.19
        ms (28.6 -> 35.1 TFLOP/s), causal (2,32,4096,128) 28.09 -> 20.76, (8,32,2048,128) 48.93
        -> 38.48, d = 64 (4,16,4096) 16.49 -> 15.53, (16,16,1024,64) 4.65 -> 4.19, causal 9.59 ->
        8.38. Accuracy (flash-attention's rule, results/h200/verification/tf32_steps_checks.py
        v14): every gradient within 3x plain fp32's at logits x 30, d = 64, 80, 128 (<= 2.0x), and
        at (1,2,1000,1000,128) x 1 dq 2.8x, dk 2.5x, where v13's sums (one chain each, on these
        loads) gave 3.7x and 3.1x. Tried: S^T in two chains too (the first v14 timed: 37.4-38.2
        ms at (4,16,4096,128)), failed the rule at logits x 30 (dV up to 12.9x plain fp32's: its
        S^T no longer summed as the forward's, P = exp(S - L) is off by the difference); every
        product in one chain with these loads, 38.25 ms and 3.7x above; the chains on v13's loads
        alone, 48.10 ms (no gain); fetching the next step's tiles a step ahead, 40.43 ms against
        37.44 in the same run (255 registers, 40 B spilled).
    v15 dropout: Philox on 32-bit words (tiles.dropout_words, as flash_forward_half v10); its
        code unchanged. H100, 2026-12-07 (tools/dropout_timing.py, p = 0.1, v14 timed in the
        same call): d = 64 backward with dropout +14 -> +1.5 % over the same call without,
        d = 128 +9.7 -> +7.9 %.
"""
from __future__ import annotations


import numpy as np
from numba import cuda, float32, uint64

from simulator.spec import Mask
from simulator.tiling import Tiling

from ..kernel_cache import kernel_factory
from ..launch import jit_options, smem_alignment
from .mma import warp_ops
from .tiles import (LN2, NEG_INF, ONE, ZERO, dropout_kept, dropout_words, identity,
                    lse_base2, make_key_row_store, make_key_rows_store, masked, needs_mask,
                    row_block_range, scaled_element, tile_major_block)
from .unroll import static_range, unrolled

VERSION = 15


@kernel_factory
def make_flash_backward_tc(tiling: Tiling, d: int, mask: Mask | bool):
    """Kernel ``(q, k, v, do, lse, dvec, dq, dk, dv, scale, qscale, n_q, n_k, hi, lo, seed_lo,
    seed_hi, keep_from, rp, blk_ptr, blk_idx)`` on flat
    (1-D) views of q, do, dq: (B*H, N_q, d); lse, dvec: (B*H, N_q); k, v, dk, dv: (B*H_kv, N_k,
    d), H_kv = H / mask.group (query head bh reads K/V head bh // group). ``mask``: a
    ``simulator.spec.Mask``, or a bool (causal or not); ``hi``, ``lo`` (int64, read only with
    ``mask.upper`` / ``mask.lower``, else pass 0): row r sees key c iff c <= r + hi and
    r + lo <= c. ``qscale`` = scale * log2(e), float32. With ``mask.dropout``: the forward's
    dropout mask regenerated from ``seed_lo``, ``seed_hi``, ``keep_from`` and ``rp``, as
    ``make_flash_forward_fa2_tc`` takes them (else not read). With ``mask.sparse``: K/V block j
    visits the row blocks blk_idx[blk_ptr[j]:blk_ptr[j + 1]] (int64; ascending, inside the
    band: ``BlockGrid.column_lists``), else those two are not read. dq must hold zeros (the
    kernel adds into it). Launch with grid (Tc, B*H_kv),
    ``tiling.threads_for("flash_backward_tc")`` threads and
    ``tiling.smem_bytes("flash_backward_tc", d)`` bytes of dynamic shared memory."""
    mask = Mask.of(mask)
    UPPER, LOWER, GROUP, DROPOUT = mask.upper, mask.lower, mask.group, mask.dropout
    SPARSE = mask.sparse
    BR, BC = tiling.Br, tiling.Bc
    if DROPOUT:   # Philox blocks of 16 x 16 scores inside a tile (simulator.tiling.DROPOUT_SIDE)
        tiling.check_dropout()
    T = tiling.threads_for("flash_backward_tc")
    WARPS = T // 32
    PAIRS = tiling.warps_per_tile("flash_backward_tc") == 2   # v12: two warps a 16-key tile
    D8 = tiling.mma_depth(d)           # d rounded up to the mma's k = 8 (zero columns)
    LP, LQ, LT, LS = 4 * D8, tiling.mma_swizzled_stride(d), 2 * BR, 4 * BC   # strides (header)
    KS, NT, OT = D8 // 8, BR // 8, D8 // 8   # k steps over d; 8-query tiles; 8-column tiles
    JS = BC // 8                             # k steps of dS Kj (over keys)
    KW = D8 // 2                             # column pairs of a row
    PAIR_ITEMS = BR // 2 * KW                # 2 x 2 element items of Qi (or dOi)
    ITEMS, ROW_ITEMS = -(-PAIR_ITEMS // T), -(-BR // T)   # a thread's items, rows of L and D
    BATCH = min(ITEMS, 2)   # items of each tile loaded before their stores (registers: 16 floats)
    BATCHES = -(-ITEMS // BATCH)
    UNITS = (BR // 16) * OT                  # 16 x 8 tiles of dQ_i
    PER_WARP = -(-UNITS // WARPS)
    SHARED_ROWS = OT % PER_WARP == 0           # a warp's tiles of dQ_i share their 16 rows
    DQ_CHAINS = 2 if PER_WARP <= 4 else 1   # v14: chains a dQ_i tile (d = 256: 32 tiles a warp)
    DP_CHAINS = 2                           # v14: chains of dP^T
    ODD_PARTS = 4 if DQ_CHAINS == 2 else 0   # fragment entries of a tile's odd-step chain
    # shared-memory carve-up (Tiling.smem_terms order; XO: the pairs' P^T, else the end)
    KO, VO, QO, OO, QTO, OTO, SO, LO, DO, XO = (np.uint64(x) for x in np.cumsum(
        [0, *tiling.smem_terms("flash_backward_tc", d).values()])[:10])
    # uint64 offsets throughout: Numba would add a negative-index fix-up to every signed one
    U1, U2, U3, U4 = np.uint64(1), np.uint64(2), np.uint64(3), np.uint64(4)
    QC, OC, QTC, OTC = (x // U4 for x in (QO, OO, QTO, OTO))   # in chunks of 4 floats
    LN2_F = np.float32(LN2)

    w = warp_ops(lo_truncated=True)   # see the module docstring
    split, split_finite, exp2, mma_3xtf32 = w.split, w.split_finite, w.exp2_ftz, w.mma_3xtf32
    # v13: S^T, dP^T summed k step by k step in fp32 (else chained: S^T in one, dP^T in DP_CHAINS)
    STEPWISE = d > 128
    pair_arrive, pair_sync = w.pair_arrive, w.pair_sync
    store_key_rows = make_key_rows_store(d, OT, identity)
    store_key_row = make_key_row_store(d, OT, identity)   # v12: a warp's one of dKj, dVj
    ALIGN = smem_alignment()

    @cuda.jit(device=True)
    def pair_swizzle(p):
        """The 16-byte chunk permutation of row pair p of Kj, Vj (a mask of bits 0 and 2)."""
        return p % 2 + 4 * ((p // 2) % 2)

    @cuda.jit(device=True)
    def load_pair_tile(smem, at0, src, row0, nrows, tid):
        """HBM -> SRAM, once: Kj or Vj (Bc x D8) at offset at0 in the row-pair layout (header),
        rows past nrows and columns past d zero. A thread moves 2 x 2 elements, rows r, r + 8 of
        columns 2u, 2u + 1: one 16-byte store of their hi parts, one of their lo parts."""
        for idx in range(tid, BC // 2 * KW, T):
            p = idx // KW           # row pair: rows r, r + 8
            u = idx - p * KW        # column pair
            r = 16 * (p // 8) + p % 8
            h0, l0 = split(scaled_element(src, row0, r, 2 * u, nrows, d, ONE))
            h1, l1 = split(scaled_element(src, row0, r + 8, 2 * u, nrows, d, ONE))
            h2, l2 = split(scaled_element(src, row0, r, 2 * u + 1, nrows, d, ONE))
            h3, l3 = split(scaled_element(src, row0, r + 8, 2 * u + 1, nrows, d, ONE))
            sw = pair_swizzle(p)
            at = at0 + uint64(p * LP + 4 * ((2 * u) ^ sw))
            smem[at], smem[at + U1], smem[at + U2], smem[at + U3] = h0, h1, h2, h3
            at = at0 + uint64(p * LP + 4 * ((2 * u + 1) ^ sw))
            smem[at], smem[at + U1], smem[at + U2], smem[at + U3] = l0, l1, l2, l3

    def fetch_tile(buf, src, row0, nrows, tid, first):
        """HBM -> registers: items first..first + BATCH - 1 of this thread's share of Qi or dOi
        (Br x D8) as store_twice stores them, unscaled, zero past nrows and d (v14: a batch's
        loads, both tiles', all issued before its first store, which waits for them). Item
        ``first + it`` is rows 2p, 2p + 1 of columns 2u, 2u + 1 for the pair index
        tid + (first + it) T (p = index // KW, u = index % KW), in buf[it, 0..3] as (2p, 2u),
        (2p, 2u + 1), (2p + 1, 2u), (2p + 1, 2u + 1)."""
        for it in static_range(BATCH):
            idx = tid + (first + it) * T
            p = idx // KW           # row pair 2p, 2p + 1
            u = idx - p * KW        # column pair 2u, 2u + 1
            if idx < PAIR_ITEMS:
                buf[it, 0] = scaled_element(src, row0, 2 * p, 2 * u, nrows, d, ONE)
                buf[it, 1] = scaled_element(src, row0, 2 * p, 2 * u + 1, nrows, d, ONE)
                buf[it, 2] = scaled_element(src, row0, 2 * p + 1, 2 * u, nrows, d, ONE)
                buf[it, 3] = scaled_element(src, row0, 2 * p + 1, 2 * u + 1, nrows, d, ONE)

    def store_twice(smem, row_at, col_at, buf, tid, factor, first):
        """Registers -> SRAM: fetch_tile's items first.. of Qi or dOi times factor, split,
        twice: row-major at row_at and transposed at col_at (header); four 16-byte stores an
        item."""
        for it in static_range(BATCH):
            idx = tid + (first + it) * T
            p = idx // KW
            u = idx - p * KW
            if idx < PAIR_ITEMS:
                h00, l00 = split(factor * buf[it, 0])
                h01, l01 = split(factor * buf[it, 1])
                h10, l10 = split(factor * buf[it, 2])
                h11, l11 = split(factor * buf[it, 3])
                at = row_at + uint64(2 * p * LQ + 4 * u)                  # row 2p, chunk u
                smem[at], smem[at + U1], smem[at + U2], smem[at + U3] = h00, h01, l00, l01
                at = row_at + uint64((2 * p + 1) * LQ + 4 * (u ^ 4))      # row 2p + 1, chunk u ^ 4
                smem[at], smem[at + U1], smem[at + U2], smem[at + U3] = h10, h11, l10, l11
                sw = p ^ (u % 8)
                at = col_at + uint64(2 * u * LT + 4 * sw)                 # row 2u, chunk p ^ sw(2u)
                smem[at], smem[at + U1], smem[at + U2], smem[at + U3] = h00, h10, l00, l10
                at = col_at + uint64((2 * u + 1) * LT + 4 * (sw ^ 4))     # row 2u + 1
                smem[at], smem[at + U1], smem[at + U2], smem[at + U3] = h01, h11, l01, l11

    fetch_tile, store_twice = (cuda.jit(device=True)(unrolled(f))
                               for f in (fetch_tile, store_twice))

    def fetch_row_stats(stats, lse, dvec, row0, rows, tid):
        """HBM -> registers: L and D of rows tid + it T < Br in stats[it] (L = -inf past rows:
        P = 0 there, see lse_base2)."""
        for it in static_range(ROW_ITEMS):
            r = tid + it * T
            stats[it, 0], stats[it, 1] = NEG_INF, ZERO
            if r < rows:
                stats[it, 0] = lse[uint64(row0 + r)]
                stats[it, 1] = dvec[uint64(row0 + r)]

    def store_row_stats(smem, stats, tid):
        """Registers -> SRAM: L_i in base 2 (+inf past the tail) and D_i."""
        for it in static_range(ROW_ITEMS):
            r = tid + it * T
            if r < BR:
                smem[LO + uint64(r)] = lse_base2(stats[it, 0])
                smem[DO + uint64(r)] = stats[it, 1]

    fetch_row_stats, store_row_stats = (cuda.jit(device=True)(unrolled(f))
                                        for f in (fetch_row_stats, store_row_stats))

    @cuda.jit(device=True)
    def load_batch(smem, q_buf, do_buf, stats, q, do, lse, dvec, row0, rows, tid, qscale, bt):
        """Batch bt of a step's Qi, dOi HBM -> registers -> SRAM (its loads, and with the first
        batch L_i, D_i's, all issued before its first store)."""
        fetch_tile(q_buf, q, row0, rows, tid, bt * BATCH)
        fetch_tile(do_buf, do, row0, rows, tid, bt * BATCH)
        if bt == 0:
            fetch_row_stats(stats, lse, dvec, row0, rows, tid)
        store_twice(smem, QO, QTO, q_buf, tid, qscale, bt * BATCH)
        store_twice(smem, OO, OTO, do_buf, tid, ONE, bt * BATCH)

    @cuda.jit(device=True)
    def step_rows(step, first, nb, kvh, blk_idx, n_q):
        """(bh, row0, rows) of step ``step``: query head bh = kvh GROUP + step // nb (GQA: the
        group's heads in turn), row block i = first + step % nb (block-sparse: blk_idx[i])."""
        qh = step // nb if GROUP > 1 else 0
        i = first + step - qh * nb
        if SPARSE:
            i = blk_idx[i]
        row0 = i * BR
        return kvh * GROUP + qh, row0, min(BR, n_q - row0)

    def make_rows_times_tile_t(chains):
        """rows_times_tile_t summing its k steps in ``chains`` (1 or 2) mma chains."""
        def rows_times_tile_t(c, c_odd, smem, a_hi, a_lo, b_even, b_odd):
            """c = A B^T (16 x Br C fragments) for A = this warp's 16 rows of Kj or Vj and B =
            the row copy of Qi or dOi; a_*: this lane's chunks (offsets / 4) of its hi and lo
            parts of k step 0; b_*: of row g at k step 0 (even k steps) and 1 (odd). d <= 128:
            one chain on the tensor cores, or (chains = 2) the even k steps summed in c, the odd
            ones in c_odd, added in fp32 at the end (2 NT independent chains of 3 KS / 2 mma,
            not NT of 3 KS). d > 128: each k step's product from zero on the tensor cores, added
            in fp32 (round to nearest), as the forward's S (v13)."""
            for n in static_range(NT):
                for e in static_range(4):
                    c[n, e] = ZERO
                    c_odd[n, e] = ZERO
            for kk in static_range(KS):
                pa = U4 * (a_hi + uint64(8 * kk))
                ah0, ah1, ah2, ah3 = smem[pa], smem[pa + U1], smem[pa + U2], smem[pa + U3]
                pa = U4 * (a_lo + uint64(8 * kk))
                al0, al1, al2, al3 = smem[pa], smem[pa + U1], smem[pa + U2], smem[pa + U3]
                for n in static_range(NT):
                    pb = U4 * ((b_odd if kk % 2 else b_even)
                               + uint64(2 * n * LQ + 4 * (kk - kk % 2)))
                    if STEPWISE:   # v13: k step kk from zero, added in fp32
                        c0, c1, c2, c3 = mma_3xtf32(
                            ah0, ah1, ah2, ah3, al0, al1, al2, al3,
                            smem[pb], smem[pb + U1], smem[pb + U2], smem[pb + U3],
                            ZERO, ZERO, ZERO, ZERO)
                        c[n, 0] += c0
                        c[n, 1] += c1
                        c[n, 2] += c2
                        c[n, 3] += c3
                    elif kk % chains == 0:
                        c[n, 0], c[n, 1], c[n, 2], c[n, 3] = mma_3xtf32(
                            ah0, ah1, ah2, ah3, al0, al1, al2, al3,
                            smem[pb], smem[pb + U1], smem[pb + U2], smem[pb + U3],
                            c[n, 0], c[n, 1], c[n, 2], c[n, 3])
                    else:
                        c_odd[n, 0], c_odd[n, 1], c_odd[n, 2], c_odd[n, 3] = mma_3xtf32(
                            ah0, ah1, ah2, ah3, al0, al1, al2, al3,
                            smem[pb], smem[pb + U1], smem[pb + U2], smem[pb + U3],
                            c_odd[n, 0], c_odd[n, 1], c_odd[n, 2], c_odd[n, 3])
            if chains == 2 and not STEPWISE:
                for n in static_range(NT):
                    for e in static_range(4):
                        c[n, e] += c_odd[n, e]
        return cuda.jit(device=True)(unrolled(rows_times_tile_t))

    # S^T in one chain, as the forward summed the S that set L (v14 as first timed, with two,
    # broke the gradients' bound at logits x 30); dP^T in DP_CHAINS
    scores_t, dp_t = make_rows_times_tile_t(1), make_rows_times_tile_t(DP_CHAINS)

    def add_scores_times_tile(acc, hi, lo, smem, b_even, b_odd):
        """acc += X B for X (16 x Br) held as the split C fragments hi, lo of X^T (P^T or dS^T:
        slots (0, 1, 2, 3) -> A slots (0, 2, 1, 3)) and B = the transposed copy of Qi or dOi;
        b_*: this lane's chunks (offsets / 4) of row g (column g of the tile) at k step 0 of
        column tile 0 (k step + column tile even) and 1 (odd); each 16 x 8 tile of the product
        summed on the tensor cores from zero, then added in fp32."""
        for n in static_range(OT):
            c0, c1, c2, c3 = ZERO, ZERO, ZERO, ZERO
            for kk in static_range(NT):   # queries 8kk .. 8kk + 7
                pb = U4 * ((b_odd if (kk + n) % 2 else b_even)
                           + uint64(2 * n * LT + 4 * (kk - kk % 2)))
                c0, c1, c2, c3 = mma_3xtf32(
                    hi[kk, 0], hi[kk, 2], hi[kk, 1], hi[kk, 3],
                    lo[kk, 0], lo[kk, 2], lo[kk, 1], lo[kk, 3],
                    smem[pb], smem[pb + U1], smem[pb + U2], smem[pb + U3], c0, c1, c2, c3)
            acc[n, 0] += c0
            acc[n, 1] += c1
            acc[n, 2] += c2
            acc[n, 3] += c3

    add_scores_times_tile = cuda.jit(device=True)(unrolled(add_scores_times_tile))

    def flash_backward_tc(q, k, v, do, lse, dvec, dq, dk, dv, scale, qscale, n_q, n_k, hi, lo,
                          seed_lo, seed_hi, keep_from, rp, blk_ptr, blk_idx):
        smem = cuda.shared.array(0, float32, alignment=ALIGN)
        # SRAM tiles: Kj at KO and Vj at VO for the whole kernel; Qi at QO and QTO, dOi at OO
        # and OTO, dS at SO, L at LO, D at DO (and with pairs, P^T at XO) for one i step
        j, kvh = cuda.blockIdx.x, cuda.blockIdx.y     # K/V block, K/V head
        if UPPER and not LOWER:
            # low j see the most row blocks: start them first over all heads, so that the final
            # wave holds the lightest blocks and the multiprocessors finish together (a window's
            # blocks see about as many each: plain order)
            j, kvh = tile_major_block()
        tid = cuda.threadIdx.x
        lane = tid % 32
        warp = tid // 32
        g = lane // 4           # fragment row group: this lane's keys are g and g + 8 (of 16)
        t = lane % 4            # thread in group: its queries are 2t, 2t + 1 of each 8
        if PAIRS:
            # v12: warps 2p and 2p + 1 share keys 16p..16p + 15; the first (role 0) computes
            # S^T, P^T and dV, the second (role 1) dP^T, dS^T and dK
            tile = warp // 2
            role = warp % 2
        else:
            tile = warp
            role = 0
        wkey = tile * 16        # this warp's first key of the Bc tile
        col0 = j * BC
        cols = min(BC, n_k - col0)
        if SPARSE:                    # row blocks blk_idx[first..end - 1]
            first, end = blk_ptr[j], blk_ptr[j + 1]
        else:                         # row blocks first..end - 1
            first, end = row_block_range(col0, col0 + cols - 1, hi, lo, BR, n_q, UPPER, LOWER)

        load_pair_tile(smem, KO, k, kvh * n_k + col0, cols, tid)
        load_pair_tile(smem, VO, v, kvh * n_k + col0, cols, tid)
        s = cuda.local.array((NT, 4), float32)    # registers: S^T, then P^T (its hi part, then P^T)
        ds = cuda.local.array((NT, 4), float32)   # registers: dP^T, then dS^T (then its hi part)
        lo_part = cuda.local.array((NT, 4), float32)   # registers: lo parts of P^T, then of dS^T
        odd = cuda.local.array((NT, 4), float32)       # registers: odd k steps' part of dP^T
        wd = cuda.local.array((2, 4), uint64)          # registers: two Philox calls' words (dropout)
        dk_acc = cuda.local.array((OT, 4), float32)   # registers: C fragments of dKj
        if PAIRS:
            dv_acc = dk_acc    # one accumulator a warp: dVj (role 0) or dKj (role 1)
        else:
            dv_acc = cuda.local.array((OT, 4), float32)   # registers: C fragments of dVj
        q_buf = cuda.local.array((BATCH, 4), float32)    # registers: a batch of this thread's
        do_buf = cuda.local.array((BATCH, 4), float32)   # ... share of Qi and of dOi (fetch_tile)
        stats = cuda.local.array((ROW_ITEMS, 2), float32)   # ... of L_i, D_i (fetch_row_stats)
        cq = cuda.local.array((PER_WARP, 4), float32)  # registers: this warp's tiles of dQ_i
        cq_odd = cuda.local.array((PER_WARP, 4), float32)   # ... their odd k steps' part
        qa = cuda.local.array(PER_WARP, uint64)        # their offsets in dS (row block)
        qb = cuda.local.array(PER_WARP, uint64)        # ... and in Kj (column tile)
        for n in static_range(OT):
            for e in static_range(4):
                dk_acc[n, e] = ZERO
                dv_acc[n, e] = ZERO
        # this lane's fragment offsets (see the header): in chunks (floats / 4) for the product
        # helpers, else in floats, visibly multiples of 4 (2 for the 8-byte loads), so that the
        # loads are vectors:
        # - A of S^T, dP^T: Kj, Vj row pair wkey / 2 + g, hi and lo chunks of column pair t
        fa = pair_swizzle(g)
        ka_hi = (KO + uint64((wkey // 2 + g) * LP + 4 * ((2 * t) ^ fa))) // U4
        ka_lo = (KO + uint64((wkey // 2 + g) * LP + 4 * ((2 * t + 1) ^ fa))) // U4
        va_hi, va_lo = ka_hi + (VO - KO) // U4, ka_lo + (VO - KO) // U4
        # - B of S^T, dP^T: row copies of Qi, dOi, row g, column pair t of k step 0 and 1
        row_even = uint64(g * (LQ // 4) + t + 4 * (g % 2))
        row_odd = uint64(g * (LQ // 4) + t + 4 * (1 - g % 2))
        # - B of dV, dK: transposed copies, row g (column g of Qi, dOi), row pair t of k step 0
        #   in column tile 0 and 1
        col_even = uint64(g * (LT // 4) + (t ^ (g // 2)) + 4 * (g % 2))
        col_odd = uint64(g * (LT // 4) + (t ^ (g // 2)) + 4 * (1 - g % 2))
        # - B of dS Kj: Kj row pair t (keys t, t + 8), column g, hi and lo (8-byte pairs)
        fb = pair_swizzle(t)
        kb_hi = KO + uint64(t * LP + 4 * ((2 * (g // 2)) ^ fb) + 2 * (g % 2))
        kb_lo = KO + uint64(t * LP + 4 * ((2 * (g // 2) + 1) ^ fb) + 2 * (g % 2))
        # - A of dS Kj: dS row pair g (queries g, g + 8), key pair t, hi and lo
        sa_hi = SO + uint64(g * LS + 4 * ((2 * t) ^ g))
        sa_lo = SO + uint64(g * LS + 4 * ((2 * t + 1) ^ g))
        # - dS stores: row pairs 2t + e (queries 2t + e, 2t + e + 8), key pair wkey / 2 + g
        ss_hi0 = SO + uint64(2 * t * LS + 4 * (wkey + ((2 * g) ^ (2 * t))))
        ss_lo0 = SO + uint64(2 * t * LS + 4 * (wkey + ((2 * g + 1) ^ (2 * t))))
        ss_hi1 = SO + uint64((2 * t + 1) * LS + 4 * (wkey + ((2 * g) ^ (2 * t + 1))))
        ss_lo1 = SO + uint64((2 * t + 1) * LS + 4 * (wkey + ((2 * g + 1) ^ (2 * t + 1))))
        # - pairs: P^T of the tile, C fragments by lane (n-th 16-byte chunk of lane at 32n + lane)
        xs = XO + uint64(tile * 16 * BR + 4 * lane)

        # steps: the row blocks first <= i < end of each query head of the group in turn (one
        # loop, as flash_backward_half: a loop over heads around one over row blocks cost ptxas
        # registers there at GROUP = 1)
        nb = max(0, end - first)      # row blocks a head (the same for every head)
        for step in range(GROUP * nb):
            bh, row0, rows = step_rows(step, first, nb, kvh, blk_idx, n_q)
            # HBM -> registers -> SRAM; no barrier before the stores: every warp last read Qi,
            # dOi, L, D before the previous dS barrier
            # (one batch: in line; more: a loop, as unrolled ptxas would hoist all their loads)
            for bt in static_range(1 if BATCHES == 1 else 0):
                load_batch(smem, q_buf, do_buf, stats, q, do, lse, dvec, bh * n_q + row0, rows,
                           tid, qscale, bt)
            for bt in range(0 if BATCHES == 1 else BATCHES):
                load_batch(smem, q_buf, do_buf, stats, q, do, lse, dvec, bh * n_q + row0, rows,
                           tid, qscale, bt)
            store_row_stats(smem, stats, tid)
            # barrier: Qi, dOi, L_i, D_i (first step: Kj, Vj) complete before any warp reads
            # fragments of them; every warp's dQ product done with the previous dS
            cuda.syncthreads()

            if not PAIRS or role == 0:
                # S^T, base 2
                scores_t(s, odd, smem, ka_hi, ka_lo, QC + row_even, QC + row_odd)
                # interior tiles (full, and inside the band) need no mask; rows past N_q have
                # L = +inf
                edge = needs_mask(row0, BR, col0, cols, BC, hi, lo, UPPER, LOWER)
                for h in static_range(2):             # slots 2h, 2h + 1 hold key wkey + g + 8h
                    key = wkey + g + 8 * h
                    for n in static_range(NT):
                        for e in static_range(2):
                            r = 8 * n + 2 * t + e
                            if edge and masked(r, key, row0, col0, cols, hi, lo, UPPER, LOWER):
                                s[n, 2 * h + e] = ZERO
                            else:
                                s[n, 2 * h + e] = exp2(s[n, 2 * h + e] - smem[LO + uint64(r)])
                if DROPOUT:
                    # the forward's mask, regenerated: bit 4n + 2h + e of ``kept`` for slot (n,
                    # 2h + e), query 8n + 2t + e and key wkey + g + 8h; a pair of query tiles
                    # takes two Philox calls, one a query parity e (tiles.dropout_words: word
                    # 2 (n % 2) + h, half g % 2); dVj += (P Z)^T dOi with Z = kept / (1 - p), P
                    # kept in s for dS
                    kept = uint64(0)
                    for n in static_range(NT):
                        if n % 2 == 0:
                            for e in static_range(2):
                                wd[e, 0], wd[e, 1], wd[e, 2], wd[e, 3] = dropout_words(
                                    seed_lo, seed_hi, bh, row0 + 8 * n + 2 * t + e, col0 + wkey + g)
                        for h in static_range(2):
                            for e in static_range(2):
                                if dropout_kept(wd[e, 2 * (n % 2) + h], g, keep_from):
                                    kept |= uint64(1) << uint64(4 * n + 2 * h + e)
                                    ds[n, 2 * h + e], lo_part[n, 2 * h + e] = split_finite(s[n, 2 * h + e] * rp)
                                else:
                                    ds[n, 2 * h + e], lo_part[n, 2 * h + e] = ZERO, ZERO
                    if PAIRS:
                        # P^T -> SRAM for role 1, a dropped score's P negated (P >= 0), then
                        # arrive: the stores are visible to role 1 once it waits there
                        for n in static_range(NT):
                            at = xs + uint64(128 * n)
                            smem[at], smem[at + U1], smem[at + U2], smem[at + U3] = (
                                s[n, 0] if (kept >> uint64(4 * n)) & uint64(1) else -s[n, 0],
                                s[n, 1] if (kept >> uint64(4 * n + 1)) & uint64(1) else -s[n, 1],
                                s[n, 2] if (kept >> uint64(4 * n + 2)) & uint64(1) else -s[n, 2],
                                s[n, 3] if (kept >> uint64(4 * n + 3)) & uint64(1) else -s[n, 3])
                        pair_arrive(1 + tile)
                    add_scores_times_tile(dv_acc, ds, lo_part, smem, OTC + col_even, OTC + col_odd)
                else:
                    if PAIRS:      # P^T -> SRAM for role 1, then arrive (as above)
                        for n in static_range(NT):
                            at = xs + uint64(128 * n)
                            smem[at], smem[at + U1], smem[at + U2], smem[at + U3] = (
                                s[n, 0], s[n, 1], s[n, 2], s[n, 3])
                        pair_arrive(1 + tile)
                    for n in static_range(NT):
                        for e in static_range(4):
                            s[n, e], lo_part[n, e] = split_finite(s[n, e])
                    # dVj += P^T dOi
                    add_scores_times_tile(dv_acc, s, lo_part, smem, OTC + col_even, OTC + col_odd)
                    if not PAIRS:
                        for n in static_range(NT):
                            for e in static_range(4):
                                s[n, e] += lo_part[n, e]      # P^T again, within 2^-21 (exact sum)

            if PAIRS:
                if role == 1:   # dP^T
                    dp_t(ds, odd, smem, va_hi, va_lo, OC + row_even, OC + row_odd)
                    # wait for role 0's P^T (barrier 1 + tile: its stores are visible)
                    pair_sync(1 + tile)
                    kept = uint64(0)
                    for n in static_range(NT):
                        at = xs + uint64(128 * n)
                        s[n, 0], s[n, 1], s[n, 2], s[n, 3] = (
                            smem[at], smem[at + U1], smem[at + U2], smem[at + U3])
                        if DROPOUT:     # the sign: kept (P > 0; P = 0 gives dS = 0 either way)
                            for e in static_range(4):
                                if s[n, e] > ZERO:
                                    kept |= uint64(1) << uint64(4 * n + e)
                                s[n, e] = abs(s[n, e])
            else:
                dp_t(ds, odd, smem, va_hi, va_lo, OC + row_even, OC + row_odd)   # dP^T
            if not PAIRS or role == 1:
                for h in static_range(2):
                    for n in static_range(NT):
                        for e in static_range(2):
                            r = 8 * n + 2 * t + e
                            dp = ds[n, 2 * h + e]
                            if DROPOUT:   # dS = P (Z dP - D): dropped scores keep -P D
                                dp = dp * rp if (kept >> uint64(4 * n + 2 * h + e)) & uint64(1) else ZERO
                            ds[n, 2 * h + e] = s[n, 2 * h + e] * (dp - smem[DO + uint64(r)])
                # dS^T split once for both products
                for n in static_range(NT):
                    for e in static_range(4):
                        ds[n, e], lo_part[n, e] = split(ds[n, e])
                # dKj += dS^T Qi
                add_scores_times_tile(dk_acc, ds, lo_part, smem, QTC + col_even, QTC + col_odd)
                # dS -> SRAM (for dQ): a lane's slots e, 2 + e of query tiles 2m, 2m + 1 are one
                # chunk (queries 16m + 2t + e, + 8; keys wkey + g, + 8)
                for m in static_range(NT // 2):
                    for e in static_range(2):
                        at = (ss_hi1 if e else ss_hi0) + uint64(8 * m * LS)
                        smem[at], smem[at + U1], smem[at + U2], smem[at + U3] = (
                            ds[2 * m, e], ds[2 * m + 1, e], ds[2 * m, 2 + e], ds[2 * m + 1, 2 + e])
                        at = (ss_lo1 if e else ss_lo0) + uint64(8 * m * LS)
                        smem[at], smem[at + U1], smem[at + U2], smem[at + U3] = (
                            lo_part[2 * m, e], lo_part[2 * m + 1, e], lo_part[2 * m, 2 + e],
                            lo_part[2 * m + 1, 2 + e])
            # barrier: dS complete before the dQ product reads other warps' keys
            cuda.syncthreads()

            # dQ_i += scale dS Kj: the Br/16 x D8/8 tiles of 16 x 8 dealt to the warps in runs of
            # PER_WARP, summed side by side over the keys; a warp past the last tile recomputes
            # it (every warp must run the same mma) and does not add it. Where a run lies in one
            # row block (SHARED_ROWS), the run's tiles read the same A fragment of dS at each k
            # step (the same offsets: one load after ptxas merges them, as the SRAM model counts).
            # k step kk: keys 16 (kk // 2) + 4 (kk % 2) + t (+ 8) of lane t
            for f in static_range(PER_WARP):
                u = min(warp * PER_WARP + f, UNITS - 1)
                ua = min(warp * PER_WARP + (0 if SHARED_ROWS else f), UNITS - 1)
                qa[f] = uint64(8 * (ua // OT) * LS)          # rows 16 mt.. of dQ_i
                qb[f] = uint64(32 * (u - u // OT * OT))      # columns 8 nt..
                for e in static_range(4):
                    cq[f, e] = ZERO
                    cq_odd[f, e] = ZERO
            # even k steps summed in cq, odd ones in cq_odd (v14; one chain at DQ_CHAINS = 1)
            for kk in static_range(JS):
                for f in static_range(PER_WARP):
                    pa = sa_hi + qa[f] + uint64(32 * kk)
                    ah0, ah1, ah2, ah3 = smem[pa], smem[pa + U1], smem[pa + U2], smem[pa + U3]
                    pa = sa_lo + qa[f] + uint64(32 * kk)
                    al0, al1, al2, al3 = smem[pa], smem[pa + U1], smem[pa + U2], smem[pa + U3]
                    pb = kb_hi + qb[f] + uint64(4 * kk * LP)
                    pc = kb_lo + qb[f] + uint64(4 * kk * LP)
                    if kk % DQ_CHAINS == 0:
                        cq[f, 0], cq[f, 1], cq[f, 2], cq[f, 3] = mma_3xtf32(
                            ah0, ah1, ah2, ah3, al0, al1, al2, al3,
                            smem[pb], smem[pb + U1], smem[pc], smem[pc + U1],
                            cq[f, 0], cq[f, 1], cq[f, 2], cq[f, 3])
                    else:
                        cq_odd[f, 0], cq_odd[f, 1], cq_odd[f, 2], cq_odd[f, 3] = mma_3xtf32(
                            ah0, ah1, ah2, ah3, al0, al1, al2, al3,
                            smem[pb], smem[pb + U1], smem[pc], smem[pc + U1],
                            cq_odd[f, 0], cq_odd[f, 1], cq_odd[f, 2], cq_odd[f, 3])
            for f in static_range(PER_WARP):
                for e in static_range(ODD_PARTS):
                    cq[f, e] += cq_odd[f, e]
                unit = warp * PER_WARP + f
                if unit < UNITS:
                    mt = unit // OT
                    nt = unit - mt * OT
                    for h in static_range(2):
                        r = 16 * mt + g + 8 * h
                        if r < rows:
                            for e in static_range(2):
                                c = 8 * nt + 2 * t + e
                                if c < d:
                                    cuda.atomic.add(dq, uint64((bh * n_q + row0 + r) * d + c),
                                                    scale * cq[f, 2 * h + e])

        # dKj times ln 2 (scale dS^T Q, as Qi holds scale*log2(e) q)
        if PAIRS:
            if role == 0:
                store_key_row(dv, dv_acc, ONE, kvh * n_k + col0, wkey + g, cols, t)
            else:
                store_key_row(dk, dk_acc, LN2_F, kvh * n_k + col0, wkey + g, cols, t)
        else:
            store_key_rows(dk, dv, dk_acc, dv_acc, LN2_F, kvh * n_k + col0, wkey + g, cols, t)

    return cuda.jit(**jit_options("flash_backward_tc", tiling, d))(unrolled(flash_backward_tc))
