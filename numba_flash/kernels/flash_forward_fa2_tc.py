"""FlashAttention forward in the FA2 loop order on tensor cores: TF32 mma.sync, 3xTF32 split.

Algorithm (per query head h, row block i; Tr x B*H blocks, Br/16 warps each; K/V head
h // group under GQA / MQA)::

    load Qi (Br x d) HBM -> SRAM, times scale*log2(e), split into TF32 hi + lo parts
                                     (d > 64: kept in fp32, split at each fragment load)
    m = -inf, l = 0, O_acc = 0       (registers: warp w owns rows 16w..16w+15 of S, P and O)
    for first(i) <= j < end(i):      (tiles.key_block_range: blocks outside the band skipped;
                                      block-sparse: the j of row block i's list only)
        Kj (fetched into registers during the last P V) -> SRAM as hi + lo; fetch Vj
        S = Qi Kj^T, masked          (registers: mma C fragments, 3 TF32 products per tile
                                      and k step; d > 128: each step's from zero, added in
                                      fp32; the mask only on edge tiles: tiles.needs_mask)
        m_new = max(m, rowmax S)     (within the 4 lanes that share a row: two shuffles)
        P = exp2(S - m_new)          (in place; the C fragments of S are the A fragments of P)
        alpha = exp2(m - m_new); l = alpha l + rowsum P; m = m_new
        Vj (fetched during S) -> SRAM as hi + lo; fetch Kj+1
        O_acc = diag(alpha) O_acc + P Vj   (P Vj on the tensor cores from zero, added in fp32)
    O = diag(1/l) O_acc; L = (m + log2 l) ln 2 -> HBM   (rows that saw no key: O = 0, L = -inf)

Global loads overlap the tensor-core work: each K/V tile is fetched into registers one phase
ahead and written to SRAM (split) after the next barrier, so two barriers per step suffice.
An m16n8k8 product may sum over its 8 k indices in any order, as long as A and B agree. Two uses:
- P never leaves registers: lane (g, t) holds keys 2t, 2t + 1 of each group of 8 in its C
  fragment of S, and feeds them as its A fragment of P (slots t, t + 4), reading the B fragment
  from the same keys of Vj;
- every fragment part is one 16-byte shared load (LDS.128) that lands in the registers in the
  order the mma takes them (a quad for A, a pair for B; anything else costs a register move per
  operand): with slots t, t + 4 mapped to columns 2t, 2t + 1, a lane's A operands of Qi (rows
  g, g + 8) are four adjacent hi parts, then four lo parts; its B operands of Kj (a row) and of
  Vj (stored transposed: d rows of keys) are two hi parts, then two lo parts.
SRAM layouts (floats; Tiling.mma_q_stride, mma_stride, mma_v_stride):
    Qi      [r, c] for r = 16 w + 8 h + g (h = 0, 1), c = 2 u + e (e = 0, 1): hi at
            (8 w + g) LP + 8 u + 2 e + h, lo 4 on; LP = 4 mod 32: the 8 lanes of a 16-byte
            access phase (row pairs g, g + 1; column pairs t, 32 bytes apart) hit 32 banks.
            d > 64 (Tiling.mma_q_raw): fp32 [r, c] at (8 w + g) LP + 4 u + 2 e + h, LP = 16
            mod 32 (column pairs 16 bytes apart), split into hi and lo after each LDS.128
    Kj      [r, c] for c = 2 u + e: hi at r LK + 4 u + e, lo 2 on; LK = 16 mod 32 (rows g, g + 1,
            column pairs t, 16 bytes apart: 32 banks)
    Vj^T    [c, key] for key = 2 u + e: hi at c LV + 4 (u ^ sw(c)) + e, lo 2 on; LV = 0 mod 32
            and the XOR swizzle sw(c) = 4 (c % 2) + (c // 2) % 4 of 16-byte chunks keeps the
            fragment reads (rows g, g + 1) and the tile writes (8 columns c of one key pair)
            free of bank conflicts
Each thread moves its share of Kj (Vj) as pairs of adjacent columns (keys), split into hi and
lo parts and written as one 16-byte store.

Versions continue flash_forward_fa2.py's (v1-v4: FFMA on a 4 x 4 register tile per thread, 18.7
TFLOP/s); same measurement (H200, fp32, B=4 H=16 N=4096 d=64, tools/tune_forward.py):
    v5  mma.sync m16n8k8 TF32, 3xTF32, one warp per 16 rows, P kept in registers, quad
        shuffles for row statistics. First cut (cvt.rna split, hi/lo tiles read by LDS.32, K/V
        loaded between barriers): 25.4 at 128 x 64 (ncu: 8 warps/SM, tensor pipe 37 % busy,
        issue stalled on dependencies). Bit-operation split, ex2.approx.ftz, K/V fetched into
        registers one phase ahead (2 barriers a step), flat indexing: 32.6. hi/lo side by side
        so each fragment is one LDS.128 (V^T swizzled): 31.7 at 128 x 32, 36.7 with 128
        registers (two blocks a multiprocessor), 40.0 at 256 x 32 (the default; 1.15x SDPA
        EFFICIENT_ATTENTION), 43.3 at B=1 N=16384 (1.26x). Causal 27.3 (0.86x); d = 128 30.1 at
        128 x 32 (0.66x). At N=16384 the output was 2.0e-4 (relative to max |o|) off float64
        and failed the bench's 1e-4 check (results/h200/bench/bench.csv; fa2_fma, same loop
        order on FFMA, passed). Likely cause, not yet confirmed: the mma accumulated O across
        all 512 K/V tiles, and tensor cores do not round their fp32 adds to nearest.
    v6  P V summed on the tensor cores from zero for each K/V tile, then added to O in fp32
        (round to nearest), so no truncating mma accumulation spans more than Bc keys; P split
        once per tile: 38.6 (1.11x), 41.1 at B=1 N=16384 (1.18x) with max |o - o_fp64| 2.6e-7
        (v5's 2.0e-4 gone). ptxas: ~50 B of spills at the 128-register cap (v5: 24 B).
    v7  operands land in the registers the mma reads them from: Qi stored by row pairs (g,
        g + 8), so that a lane's A fragment is one LDS.128 of hi parts and one of lo parts; Kj
        and Vj^T chunks ordered [hi, hi, lo, lo]; K/V moved as element pairs, one 16-byte store
        each (V^T stores now free of bank conflicts). SASS of the j loop at 256 x 32: 1475 ->
        852 instructions (register moves 688 -> 32, beside 192 HMMA). 45.7 (1.32x), 49.4 at
        B=1 N=16384 (1.44x). Causal: row blocks launched heaviest first over all heads (v5, v6
        reversed them within each head only): 30.4 (0.94x) on v6, 35.4 (1.10x) on v7. d = 128
        (128 x 32, uncapped): 40.8 (0.89x); there shared memory (195 KB) leaves one 8-warp block
        a multiprocessor. Tried at d = 128, not kept: two independent mma chains for S (40.7),
        caps of 200 / 168 registers (35.0 / 30.1, spills), 64 x 32 (24.5).
        (results/h200/tuning/tune_run7_v6_v7.log)
    v8  d > 64: Qi stays fp32 in SRAM and each A fragment is split as it is loaded (four
        instructions an element, per K/V tile), halving Qi: 256 x 32 at d = 128 now takes 202
        KB, one 16-warp block at 128 registers (ptxas: 220 B of spill stores). ncu on v7 at 128 x 32: 8 warps
        a multiprocessor (12.5 % occupancy; registers and shared memory both), 6.7 cycles
        between a warp's instructions. d = 128, (4,16,4096): 46.3 TFLOP/s (1.01x) at 256 x 32,
        45.1 (0.99x) at 192 x 32 (12 warps, 168 registers), 38.8 at 128 x 32 (the split's cost
        at v7's occupancy; v7 40.1 in the same session); B=1 N=16384: 49.3 (1.11x), 49.9 at
        192 x 32 (1.12x). d <= 64 unchanged: 42.0 (1.20x) at 256 x 32 in the same session.
        (results/h200/tuning/tune_run8_v8.log)
    v9  split lo left untruncated: the tensor core reads only an operand's top 19 bits (mma of
        raw and pre-truncated operands agree bit for bit on the H200, tests/test_gpu.py); ptxas
        had already dropped most of those ANDs, so the SASS loses 9-12 LOP3 (d = 64, 80).
        Measured together with the API's host-side fix (numba_flash/launch.py, memory.py: 1.43
        -> ~0.7 ms a call, which the per-call CUDA events count): bench at (4,16,4096,64) 48.4
        TFLOP/s (1.38x), B=1 N=16384 52.2 (1.52x), causal 35.8 (1.10x); d = 128 47.8 (1.05x),
        50.3 at N=16384 (1.13x). (results/h200/bench/bench_host_fix.csv, whose rows say v8:
        the run preceded the version bump.) v8 with the host fix, (4,16,4096): 46.3 TFLOP/s at
        d = 128 timed call by call, 49.7 as the mean of 20 back-to-back calls, whose host work
        overlaps the kernels; d = 64: 45.2 and 51.7 (results/h200/tuning/host_overhead.log).
    v10 band mask (simulator.spec.Mask: causal, sliding window, or a window's left side alone)
        and GQA / MQA (query head h reads K/V head h // group): the K/V loop runs over the
        band's blocks only, edge tiles masked by both sides; heaviest-first block order kept
        for upper-only masks. No speed change intended; checked under the simulator and by
        ptxas only, not measured on the GPU yet.
    v11 dropout (Mask.dropout, compile-time; Algorithm 2): each P kept with probability 1 - p
        and scaled by 1 / (1 - p) before P V, l summed undropped, the keep decision from
        Philox4x32-10 of (seed, bh, row, key) (tiles.dropout_words: one call per key pair of a
        row); kernels without dropout unchanged. H200, 2026-12-02 (tools/dropout_timing.py,
        p = 0.1): d = 64 5.36 -> 8.27 ms (+54 %), d = 128 +27 %, causal d = 128 +23 %.
    v12 dropout: one Philox call per 8 scores of a lane (was 2 calls per 4, half of each
        thrown away): 16-bit randoms, the call's 8 covering the lane's fragment share of an
        n-tile pair (tiles.dropout_words), applied after the row statistics. H200,
        2026-12-02 (tools/dropout_timing.py, p = 0.1): d = 64 5.32 -> 6.53 ms (+23 %), d = 128
        +4 %, causal d = 128 +9 %.
    v13 block-sparse (Mask.sparse, compile-time; Algorithm 5): row block i visits the K/V
        blocks of its list (simulator.blocks.BlockGrid.row_lists), the prefetch fetches the
        list's next block; kernels without it take two more (unread) arguments.
    v14 d > 128 (STEPWISE): S = Qi Kj^T summed k step by k step, each step's three products
        on the tensor cores from zero and added to S in fp32 (round to nearest), as P V since
        v6. Chained over all d/8 steps, the tensor core's adds (not rounded to nearest) make
        S's error grow with d: on the H200 (tools/tf32_accumulation.py, 2026-12-03) 2.3e-7 of
        rms(S) at d = 40, 7.1e-7 at 128, 1.4e-6 at 256, against 0.8-1.1e-7 stepwise (cuBLAS
        fp32 0.7-0.8e-7); the forward + backward at d = 256 measured 3.2-6.8x plain fp32's
        error (flash-attention's rule: 2x / 3x), stepwise 0.3-1.0x (results/h200/verification/
        tf32_steps_2026-12-03.log). At every d it cost 22 % at d = 64 ((4,16,4096) forward 5.40
        -> 6.88 ms, same run) and 5 % at d = 128 (11.10 -> 11.73), where the chain passes the
        rule (0.3-1.5x at logits x30): d <= 128 keeps v13's chain. (VERSION read 13 until
        2026-12-04.)
    v15 dropout: 1 / (1 - p) applied to O once a row instead of to each kept P; Philox rounds
        on 32-bit words (tiles.dropout_words: one IMAD.WIDE.U32 a multiply, unsigned counter
        arithmetic, one 32-bit compare a score; its SASS counted for the half forward, v10,
        not for this one). H100, 2026-12-07
        (tools/dropout_timing.py, p = 0.1, v14 timed in the same call): d = 64 with dropout
        6.35 -> 5.90 ms (+20 -> +11 % over the same call without), d = 128 +3.4 -> +2.9 %.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, uint64

from simulator.spec import Mask
from simulator.tiling import Tiling

from ..kernel_cache import kernel_factory
from ..launch import jit_options, smem_alignment
from .mma import warp_ops
from .tiles import (LN2, NEG_INF, ONE, ZERO, dropout_kept, dropout_words, key_block_range, masked, needs_mask,
                    scaled_element, sticky_max, tile_major_block)
from .unroll import static_range, unrolled

VERSION = 15


@kernel_factory
def make_flash_forward_fa2_tc(tiling: Tiling, d: int, mask: Mask | bool):
    """Kernel ``(q, k, v, o, lse, qscale, n_q, n_k, hi, lo, seed_lo, seed_hi, keep_from, rp,
    blk_ptr, blk_idx)`` on
    flat (1-D) views of q, o:
    (B*H, N_q, d); k, v: (B*H_kv, N_k, d), H_kv = H / mask.group; lse: (B*H, N_q) -- flat, so
    that element offsets are affine in the compile-time d and the loads take immediate offsets;
    query head bh reads K/V head bh // mask.group. ``qscale`` = softmax scale * log2(e),
    float32; ``hi``, ``lo`` (int64, read only with ``mask.upper`` / ``mask.lower``, else 0): row
    r sees key c iff c <= r + hi and r + lo <= c (``simulator.spec``). With ``mask.dropout``:
    score (r, c) of query head bh is kept iff its 16-bit Philox random (``tiles.dropout_words``
    of the seed's 32-bit halves ``seed_lo``, ``seed_hi``) is at least ``keep_from`` (int64,
    ``reference.dropout_threshold(p)``), its P then times ``rp`` (float32,
    ``reference.dropout_scale(p)``); else these four are not read. ``mask``: a
    ``Mask``, or a bool (causal: ``Mask(upper=mask)``). With ``mask.sparse``: row block i visits
    the K/V blocks blk_idx[blk_ptr[i]:blk_ptr[i + 1]] (int64; ascending, inside the band:
    ``BlockGrid.row_lists``), else those two are not read. Launch with grid (Tr, B*H),
    ``tiling.threads_for("flash_forward_tc")`` threads and
    ``tiling.smem_bytes("flash_forward_tc", d)`` bytes of dynamic shared memory."""
    mask = Mask.of(mask)
    UPPER, LOWER, GROUP, DROPOUT = mask.upper, mask.lower, mask.group, mask.dropout
    SPARSE = mask.sparse
    # upper only (causal): later row blocks visit more K/V blocks, so launch them first; a
    # window's work is about the same for every row block (plain order)
    HEAVY_LAST = UPPER and not LOWER
    BR, BC = tiling.Br, tiling.Bc
    if DROPOUT:   # Philox blocks of 16 x 16 scores inside a tile (simulator.tiling.DROPOUT_SIDE)
        tiling.check_dropout()
    T = tiling.threads_for("flash_forward_tc")
    D8 = tiling.mma_depth(d)           # d rounded up to the mma's k = 8 (zero columns)
    LP, LK, LV = tiling.mma_q_stride(d), tiling.mma_stride(d), tiling.mma_v_stride
    Q_RAW = tiling.mma_q_raw(d)        # Qi kept in fp32, split at each fragment load (d > 64)
    QU = 4 if Q_RAW else 8             # floats per column pair of a Qi row pair
    KS, NT, OT = D8 // 8, BC // 8, D8 // 8  # k steps of Qi Kj^T; n tiles of S; n tiles of O
    KW = D8 // 2                       # column pairs of a Kj row
    PAIRS = -(-BC * KW // T)           # element pairs of a Kj or Vj tile each thread moves
    BUF = 2 * PAIRS
    # shared-memory carve-up: Qi, Kj, Vj^T (Tiling.smem_terms order)
    QO, KO, VO = (np.uint64(x) for x in np.cumsum([0, *tiling.smem_terms("flash_forward_tc", d).values()])[:-1])
    # uint64 offsets throughout: Numba would add a negative-index fix-up to every signed one
    U1, U2, U3, U4 = np.uint64(1), np.uint64(2), np.uint64(3), np.uint64(4)
    LN2_F = np.float32(LN2)

    w = warp_ops()
    split, split_finite, clamp, exp2 = w.split, w.split_finite, w.clamp, w.exp2_ftz
    mma_3xtf32, quad_max, quad_sum = w.mma_3xtf32, w.quad_max, w.quad_sum
    STEPWISE = d > 128      # v14: S summed k step by k step in fp32 (else one mma chain)
    ALIGN = smem_alignment()

    @cuda.jit(device=True)
    def swizzle(c):
        """The 16-byte chunk permutation of row c of Vj^T (a 3-bit XOR mask)."""
        return 4 * (c % 2) + (c // 2) % 4

    @cuda.jit(device=True)
    def q_at(r, c):
        """SRAM offset (within Qi) of element [r, c]: its hi part, lo 4 floats on (Q_RAW: the
        element itself)."""
        return uint64((r // 16 * 8 + r % 8) * LP + QU * (c // 2) + 2 * (c % 2) + (r % 16) // 8)

    @cuda.jit(device=True)
    def k_at(r, c):
        """SRAM offset (within Kj) of element [r, c]: its hi part; lo 2 floats on."""
        return uint64(r * LK + 4 * (c // 2) + c % 2)

    @cuda.jit(device=True)
    def vt_at(key, c):
        """SRAM offset (within Vj^T) of element [key, c] of Vj: its hi part; lo 2 floats on."""
        return uint64(c * LV + 4 * ((key // 2) ^ swizzle(c)) + key % 2)

    @cuda.jit(device=True)
    def load_q_tile(smem, src, row0, nrows, tid, factor):
        """HBM -> SRAM, once: Qi[r, c] = factor * src[(row0 + r) d + c] as TF32 hi, lo parts
        (Q_RAW: clamped to the TF32 range, split later); rows past nrows and columns d..D8-1
        are zero (no HBM access)."""
        for idx in range(tid, BR * D8, T):
            r = idx // D8
            c = idx - r * D8
            x = scaled_element(src, row0, r, c, nrows, d, factor)
            at = QO + q_at(r, c)
            if Q_RAW:
                smem[at] = clamp(x)
            else:
                smem[at], smem[at + U4] = split(x)

    @cuda.jit(device=True)
    def k_pair(tid, f):
        """(row, column) of the f-th element pair a thread moves of Kj: [r, c], [r, c + 1]."""
        if T % KW == 0:               # the common case: fixed columns per thread
            return tid // KW + (T // KW) * f, 2 * (tid % KW)
        return (tid + T * f) // KW, 2 * ((tid + T * f) % KW)

    @cuda.jit(device=True)
    def v_pair(tid, f):
        """(row, column) of the f-th element pair a thread moves of Vj: [r, c], [r + 1, c]."""
        if T % D8 == 0:
            return 2 * (tid // D8 + (T // D8) * f), tid % D8
        return 2 * ((tid + T * f) // D8), (tid + T * f) % D8

    def make_fetch(pair, dr, dc):
        """HBM -> registers: buf[2f + e] = src[(row0 + r + e dr) d + c + e dc] for this thread's
        pairs (r, c) = pair(tid, f) of a Bc x D8 tile; 0 past nrows or d."""
        def fetch(buf, src, row0, nrows, tid):
            r0, c0 = pair(tid, 0)
            base = uint64((row0 + r0) * d + c0)
            for f in static_range(PAIRS):
                r, c = pair(tid, f)
                for e in static_range(2):
                    buf[2 * f + e] = ZERO
                    if r + e * dr < nrows and c + e * dc < d:   # offset constant if T % KW == 0
                        buf[2 * f + e] = src[base + uint64((r + e * dr - r0) * d + c + e * dc - c0)]
        return cuda.jit(device=True)(unrolled(fetch))

    def make_store(pair, offset):
        """registers -> SRAM: the fetched pairs as TF32 parts [hi, hi, lo, lo] at tile offset
        ``offset(r, c)`` of each pair (r, c): one 16-byte store."""
        def store(buf, smem, tid):
            for f in static_range(PAIRS):
                r, c = pair(tid, f)
                if r < BC:
                    at = offset(r, c)
                    h0, l0 = split(buf[2 * f])
                    h1, l1 = split(buf[2 * f + 1])
                    smem[at], smem[at + U1], smem[at + U2], smem[at + U3] = h0, h1, l0, l1
        return cuda.jit(device=True)(unrolled(store))

    @cuda.jit(device=True)
    def kj_at(r, c):
        return KO + k_at(r, c)

    @cuda.jit(device=True)
    def vj_at(r, c):
        return VO + vt_at(r, c)

    fetch_k, fetch_v = make_fetch(k_pair, 0, 1), make_fetch(v_pair, 1, 0)
    store_k, store_vt = make_store(k_pair, kj_at), make_store(v_pair, vj_at)

    def flash_forward_fa2_tc(q, k, v, o, lse, qscale, n_q, n_k, hi, lo, seed_lo, seed_hi,
                             keep_from, rp, blk_ptr, blk_idx):
        smem = cuda.shared.array(0, float32, alignment=ALIGN)
        # SRAM tiles: Qi at QO for the whole kernel; Kj at KO and Vj^T at VO for one j step
        i, bh = cuda.blockIdx.x, cuda.blockIdx.y
        if HEAVY_LAST:
            # the last row blocks have the most K/V blocks to visit: start them first over all
            # heads, so that the final wave holds the lightest blocks and the multiprocessors
            # finish together
            i, bh = tile_major_block()
            i = cuda.gridDim.x - 1 - i
        tid = cuda.threadIdx.x
        lane = tid % 32
        g = lane // 4                 # fragment row group: this lane's rows are g and g + 8
        t = lane % 4                  # thread in group: its columns are 2t, 2t + 1 of each 8
        wrow = (tid // 32) * 16       # this warp's first row of the Br tile
        row0 = i * BR
        rows = min(BR, n_q - row0)
        if SPARSE:                    # steps first <= jj < end: K/V block blk_idx[jj]
            first, end = blk_ptr[i], blk_ptr[i + 1]
        else:                         # steps first <= jj < end: K/V block jj
            first, end = key_block_range(row0, row0 + rows - 1, hi, lo, BC, n_k, UPPER, LOWER)
        kv0 = (bh // GROUP) * n_k     # first row of this query head's K/V head

        load_q_tile(smem, q, bh * n_q + row0, rows, tid, qscale)
        buf = cuda.local.array(BUF, float32)  # registers: the next Kj or Vj, in flight
        s = cuda.local.array((NT, 4), float32)    # registers: C fragments of S_ij, then P_ij
        acc = cuda.local.array((OT, 4), float32)  # registers: C fragments of O_i
        m = cuda.local.array(2, float32)          # registers: running max of rows g, g + 8
        l = cuda.local.array(2, float32)          # registers: this lane's share of their sums
        rescale = cuda.local.array(2, float32)    # registers: their alpha = exp2(m_old - m_new)
        p_lo = cuda.local.array((NT, 4), float32) # registers: lo parts of P's A fragments
        wd = cuda.local.array(4, uint64)          # registers: a Philox call's words (dropout)
        for h in static_range(2):
            m[h] = NEG_INF
            l[h] = ZERO
        for n in static_range(OT):
            for e in static_range(4):
                acc[n, e] = ZERO
        # this lane's fragment offsets (16-byte aligned): Qi row pair wrow + g (+ 8) and Kj rows
        # g (+ 8n) at column pair t of each k step; Vj^T rows g (+ 8n) at the chunk of keys
        # 2t, 2t + 1 of each group of 8 -- for even groups, and (swizzle bit 2 flipped) odd ones
        qa = QO + uint64((wrow // 2 + g) * LP + QU * t)  # q_at(wrow + g, 2t), visibly 16-byte aligned
        kb = KO + uint64(g * LK + 4 * t)                 # k_at(g, 2t)
        sw = swizzle(g)
        vb_even = VO + uint64(g * LV + 4 * (t ^ (sw % 4)) + 16 * (sw // 4))
        vb_odd = VO + uint64(g * LV + 4 * (t ^ (sw % 4)) + 16 * (1 - sw // 4))
        if first < end:               # (no K/V at all: O = 0, L = -inf below)
            j0 = blk_idx[first] if SPARSE else first
            fetch_k(buf, k, kv0 + j0 * BC, min(BC, n_k - j0 * BC), tid)

        for jj in range(first, end):
            j = blk_idx[jj] if SPARSE else jj
            col0 = j * BC
            cols = min(BC, n_k - col0)
            # every warp finished reading the previous Kj before the last barrier (it came
            # after S), so Kj's SRAM is free: write the fetched Kj, start fetching Vj
            store_k(buf, smem, tid)
            fetch_v(buf, v, kv0 + col0, cols, tid)
            # barrier: Kj (and, at j = first, Qi) complete before any warp reads fragments of it
            cuda.syncthreads()
            for n in static_range(NT):
                for e in static_range(4):
                    s[n, e] = ZERO
            for kk in static_range(KS):
                pa = qa + uint64(4 * QU * kk)  # A fragment: hi parts, then lo parts (or fp32)
                if Q_RAW:
                    ah0, al0 = split_finite(smem[pa])
                    ah1, al1 = split_finite(smem[pa + U1])
                    ah2, al2 = split_finite(smem[pa + U2])
                    ah3, al3 = split_finite(smem[pa + U3])
                else:
                    ah0, ah1, ah2, ah3 = smem[pa], smem[pa + U1], smem[pa + U2], smem[pa + U3]
                    pa += U4
                    al0, al1, al2, al3 = smem[pa], smem[pa + U1], smem[pa + U2], smem[pa + U3]
                for n in static_range(NT):
                    pb = kb + uint64(8 * n * LK + 16 * kk)
                    if STEPWISE:   # v14: k step kk from zero, added in fp32
                        c0, c1, c2, c3 = mma_3xtf32(
                            ah0, ah1, ah2, ah3, al0, al1, al2, al3,
                            smem[pb], smem[pb + U1], smem[pb + U2], smem[pb + U3],
                            ZERO, ZERO, ZERO, ZERO)
                        s[n, 0] += c0
                        s[n, 1] += c1
                        s[n, 2] += c2
                        s[n, 3] += c3
                    else:
                        s[n, 0], s[n, 1], s[n, 2], s[n, 3] = mma_3xtf32(
                            ah0, ah1, ah2, ah3, al0, al1, al2, al3,
                            smem[pb], smem[pb + U1], smem[pb + U2], smem[pb + U3],
                            s[n, 0], s[n, 1], s[n, 2], s[n, 3])
            # interior tiles (full, and inside the band for every row) need no mask
            edge = needs_mask(row0, BR, col0, cols, BC, hi, lo, UPPER, LOWER)
            for h in static_range(2):        # fragment slots 2h, 2h + 1 hold row wrow + g + 8h
                r = wrow + g + 8 * h
                mx = NEG_INF
                for n in static_range(NT):
                    for e in static_range(2):
                        c = 8 * n + 2 * t + e
                        if edge and masked(r, c, row0, col0, cols, hi, lo, UPPER, LOWER):
                            s[n, 2 * h + e] = NEG_INF
                        mx = sticky_max(mx, s[n, 2 * h + e])
                m_new = sticky_max(m[h], quad_max(mx))
                if m_new == NEG_INF:  # nothing visible in this row yet
                    alpha = ONE
                    for n in static_range(NT):
                        for e in static_range(2):
                            s[n, 2 * h + e] = ZERO
                else:
                    alpha = exp2(m[h] - m_new)
                    row_sum = ZERO
                    for n in static_range(NT):
                        for e in static_range(2):
                            p = exp2(s[n, 2 * h + e] - m_new)
                            s[n, 2 * h + e] = p
                            row_sum += p
                    l[h] = alpha * l[h] + row_sum
                m[h] = m_new
                rescale[h] = alpha
            if DROPOUT:   # l summed the undropped P; P V takes P kept, or 0 (the 1 / (1 - p) is
                # applied to O once a row, at the end). One Philox
                # call holds this lane's 8 scores of each pair of n tiles (tiles.dropout_words:
                # rows g, g + 8 x keys 2t, 2t + 1 of both): word 2h + n % 2, half e
                for n in static_range(NT):
                    if n % 2 == 0:
                        wd[0], wd[1], wd[2], wd[3] = dropout_words(seed_lo, seed_hi, bh, row0 + wrow + g,
                                                                   col0 + 8 * n + 2 * t)
                    for h in static_range(2):
                        for e in static_range(2):
                            kept = dropout_kept(wd[2 * h + n % 2], e, keep_from)
                            s[n, 2 * h + e] = s[n, 2 * h + e] if kept else ZERO
            # the barrier above came after every warp's previous P V: Vj's SRAM is free
            store_vt(buf, smem, tid)
            if jj + 1 < end:
                next0 = blk_idx[jj + 1] * BC if SPARSE else col0 + BC
                fetch_k(buf, k, kv0 + next0, min(BC, n_k - next0), tid)
            # barrier: Vj complete before any warp reads fragments of it
            cuda.syncthreads()
            # P as A fragments, split once: slots (0, 1, 2, 3) = C slots (0, 2, 1, 3) of S, the
            # hi parts in s, the lo parts in p_lo
            for kk in static_range(NT):
                for e in static_range(4):
                    s[kk, e], p_lo[kk, e] = split_finite(s[kk, e])
            # O_acc = diag(alpha) O_acc + P Vj, the product summed on the tensor cores from zero
            # for this tile only, then added in fp32 (round to nearest): chaining the mma across
            # all K/V tiles would accumulate its truncating adds, a bias growing with N_k
            for n in static_range(OT):
                c0, c1, c2, c3 = ZERO, ZERO, ZERO, ZERO
                for kk in static_range(NT):  # keys 8kk .. 8kk + 7
                    pb = (vb_odd if kk % 2 else vb_even) + uint64(8 * n * LV + 16 * (kk - kk % 2))
                    c0, c1, c2, c3 = mma_3xtf32(
                        s[kk, 0], s[kk, 2], s[kk, 1], s[kk, 3],
                        p_lo[kk, 0], p_lo[kk, 2], p_lo[kk, 1], p_lo[kk, 3],
                        smem[pb], smem[pb + U1], smem[pb + U2], smem[pb + U3], c0, c1, c2, c3)
                acc[n, 0] = acc[n, 0] * rescale[0] + c0
                acc[n, 1] = acc[n, 1] * rescale[0] + c1
                acc[n, 2] = acc[n, 2] * rescale[1] + c2
                acc[n, 3] = acc[n, 3] * rescale[1] + c3

        for h in static_range(2):
            r = wrow + g + 8 * h
            row_l = quad_sum(l[h])
            if r < rows:
                inv = ZERO if row_l == ZERO else (rp if DROPOUT else ONE) / row_l   # l = 0: no key
                at = uint64((bh * n_q + row0 + r) * d + 2 * t)
                for n in static_range(OT):
                    for e in static_range(2):
                        if 8 * n + 2 * t + e < d:
                            o[at + uint64(8 * n + e)] = acc[n, 2 * h + e] * inv
                if t == 0:
                    lse[uint64(bh * n_q + row0 + r)] = (
                        NEG_INF if row_l == ZERO else (m[h] + math.log2(row_l)) * LN2_F)

    return cuda.jit(**jit_options("flash_forward_tc", tiling, d))(unrolled(flash_forward_fa2_tc))
