"""Warp-level primitives for the tensor-core kernels: TF32 ``mma.sync``, the 3xTF32 split, and
lane shuffles -- each on the GPU as one PTX instruction, and under Numba's CUDA simulator as an
exact emulation of what the warp computes (the simulator runs one Python thread per CUDA
thread and has neither tensor cores nor shuffles).

``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`` (PTX ISA, "Matrix fragments for mma.m16n8k8"
.tf32): a warp computes C (16 x 8) += A (16 x 8) B (8 x 8). Lane = 4 g + t (g = lane // 4,
t = lane % 4) holds

    A: a0 = A[g, t]   a1 = A[g + 8, t]   a2 = A[g, t + 4]   a3 = A[g + 8, t + 4]
    B: b0 = B[t, g]   b1 = B[t + 4, g]
    C: c0 = C[g, 2t]  c1 = C[g, 2t + 1]  c2 = C[g + 8, 2t]  c3 = C[g + 8, 2t + 1]

TF32 keeps 10 of fp32's 23 mantissa bits. 3xTF32 (a = a_hi + a_lo, each part read as TF32)
recovers fp32-level products: a b ~ a_hi b_hi + a_hi b_lo + a_lo b_hi. The split is two bit
operations and a subtraction: a_hi = a rounded to nearest TF32 (add half a TF32 ulp to the bits,
clear the low 13; ``cvt.rna.tf32.f32`` is emulated by ptxas in ~5 instructions on sm_90),
a_lo = a - a_hi (exact). a_lo keeps all its bits: the tensor core reads only the top 19 bits of
a TF32 operand register (on the H200, mma of fp32 operands and of the same operands with the low
13 bits cleared agree bit for bit: tests/test_gpu.py), so it multiplies a_lo truncated, and
|a - a_hi - trunc(a_lo)| <= 2^-21 |a|; the dropped a_lo b_lo is smaller still. The emulation
truncates every operand the same way, so both feed the products the same values; the tensor
core's internal summation order differs from the emulation's sequential fp32 sum, so the two
agree to fp32 rounding, not bits.

All functions here must be reached by every thread of the block together (uniform control
flow): on the GPU the shuffles and mma are warp-collective; in the simulator they synchronise
the whole block.
"""
from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace

import numpy as np
from numba import cuda, float32, int32

from ..memory import simulator_enabled
from .tiles import POS_INF, ZERO, sticky_max

FULL_MASK = 0xFFFFFFFF
#: Smallest normal fp32: what ex2.approx.ftz flushes below.
FP32_TINY = np.finfo(np.float32).tiny
#: The largest finite TF32 value (fp32 with the low 13 mantissa bits clear).
TF32_MAX = np.array(0x7F7FE000, np.uint32).view(np.float32)[()]
#: Largest block the simulator's exchange buffers serve (CUDA's limit).
MAX_THREADS = 1024


def _gpu_primitives() -> SimpleNamespace:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    f32, i32 = ir.FloatType(), ir.IntType(32)

    def bit_op(asm_text, doc):
        @intrinsic
        def op(typingctx, x):
            def codegen(context, builder, sig, args):
                asm = ir.InlineAsm(ir.FunctionType(i32, [i32]), asm_text, "=r,r")
                return builder.bitcast(builder.call(asm, [builder.bitcast(args[0], i32)]), f32)
            return types.float32(types.float32), codegen
        op.__doc__ = doc
        return op

    tf32_nearest = bit_op("{ .reg .b32 t; add.u32 t, $1, 4096; and.b32 $0, t, -8192; }",
                          "x rounded to the nearest TF32 (ties away from zero).")
    tf32_truncate = bit_op("and.b32 $0, $1, -8192;", "x with its low 13 mantissa bits cleared.")

    @intrinsic
    def exp2_ftz(typingctx, x):
        """2^x by the SFU (``ex2.approx.ftz.f32``; 2 ulp, subnormal results flushed to 0)."""
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(f32, [f32]), "ex2.approx.ftz.f32 $0, $1;", "=f,f")
            return builder.call(asm, args)
        return types.float32(types.float32), codegen

    @intrinsic
    def mma_tf32(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """(c0, c1, c2, c3) + A B for one m16n8k8 TF32 tile product (fragments as above)."""
        def codegen(context, builder, sig, args):
            fty = ir.FunctionType(ir.LiteralStructType([f32] * 4), [i32] * 6 + [f32] * 4)
            asm = ir.InlineAsm(
                fty,
                "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
                "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f",
            )
            ins = [builder.bitcast(x, i32) for x in args[:6]] + list(args[6:])
            out = builder.call(asm, ins)
            return context.make_tuple(builder, sig.return_type,
                                      [builder.extract_value(out, n) for n in range(4)])
        return types.UniTuple(types.float32, 4)(*([types.float32] * 10)), codegen

    @cuda.jit(device=True)
    def mma_3xtf32(ah0, ah1, ah2, ah3, al0, al1, al2, al3, bh0, bh1, bl0, bl1, c0, c1, c2, c3):
        c0, c1, c2, c3 = mma_tf32(al0, al1, al2, al3, bh0, bh1, c0, c1, c2, c3)
        c0, c1, c2, c3 = mma_tf32(ah0, ah1, ah2, ah3, bl0, bl1, c0, c1, c2, c3)
        return mma_tf32(ah0, ah1, ah2, ah3, bh0, bh1, c0, c1, c2, c3)

    @cuda.jit(device=True)
    def shfl_xor(x, lane_mask):
        return cuda.shfl_xor_sync(FULL_MASK, x, lane_mask)

    def pair_barrier(asm_text, doc):
        @intrinsic
        def op(typingctx, barrier):
            def codegen(context, builder, sig, args):
                # a side effect that LLVM keeps in place, and a memory clobber: no shared load
                # or store moves across it
                asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [i32]), asm_text,
                                   "r,~{memory}", side_effect=True)
                builder.call(asm, [context.cast(builder, args[0], sig.args[0], types.int32)])
                return context.get_dummy_value()
            return types.none(barrier), codegen
        op.__doc__ = doc
        return op

    pair_sync = pair_barrier("bar.sync $0, 64;", "Wait at named barrier ``barrier`` (1-15) "
                             "until the 64 threads of a pair of warps have reached it.")
    pair_arrive = pair_barrier("bar.arrive $0, 64;", "Arrive at named barrier ``barrier`` "
                               "without waiting: the shared stores before it are visible to "
                               "the warp that waits there (``pair_sync``).")

    return SimpleNamespace(tf32_nearest=tf32_nearest, tf32_truncate=tf32_truncate, exp2_ftz=exp2_ftz,
                           mma_tf32=mma_tf32, mma_3xtf32=mma_3xtf32, shfl_xor=shfl_xor,
                           pair_sync=pair_sync, pair_arrive=pair_arrive)


def gpu_instructions() -> SimpleNamespace:
    """The single GPU instructions behind ``warp_ops`` (no simulator versions): ``mma_tf32`` (one
    m16n8k8 TF32 ``mma.sync`` from raw fragments), ``shfl_xor``, ``exp2_ftz``, ``tf32_nearest``,
    ``tf32_truncate``, ``mma_3xtf32`` -- for code that times the instructions themselves (the
    calibration's microbenchmarks)."""
    return _gpu_primitives()


#: The bits of an fp32 that a TF32 keeps (sign, exponent, 10 mantissa bits).
TF32_MASK = 0xFFFFE000


def _bits_op(x, add, mask):
    bits = np.array(np.float32(x)).view(np.uint32)
    return np.array((bits + np.uint32(add)) & np.uint32(mask), np.uint32).view(np.float32)[()]


def _turn(turns, tid):
    """The exchange buffer (0 or 1) of this thread's next exchange, flipped for the one after.

    One barrier an exchange suffices with two buffers: a lane writes buffer b only after the
    barrier of the exchange before, which every lane reaches after it has read buffer b the
    time before that. The counters live for the whole launch (the simulator keeps one set of
    static shared arrays per launch, its blocks run one after another) and start at 0
    (simulator_fixes.fresh_shared); the lanes of a warp agree on b as long as every thread of
    every block makes the same number of exchanges, which the block-wide barriers here demand
    anyway (the kernels keep these calls in uniform control flow)."""
    buf = turns[tid]
    turns[tid] = 1 - buf
    return buf


@lru_cache(maxsize=32)
def _fragment_index(lane: int):
    """Where lane (g, t)'s four C entries C[r, n] (c0..c3) find A[r, kk] and B[kk, n], kk < 8,
    in a warp's (32, 12) fragment table (hi parts; lo parts 4 (A) or 2 (B) slots on):
    A[r, kk] is in lane 4 (r % 8) + kk % 4, slot (r >= 8) + 2 (kk >= 4); B[kk, n] in lane
    4 n + kk % 4, slot 8 + (kk >= 4). Four (4, 8) index arrays: a_lane, a_slot, b_lane, b_slot."""
    g, t = lane // 4, lane % 4
    r = np.array([g, g, g + 8, g + 8])[:, None]
    n = np.array([2 * t, 2 * t + 1, 2 * t, 2 * t + 1])[:, None]
    kk = np.arange(8)[None, :]
    shape = (4, 8)
    return (np.broadcast_to(4 * (r % 8) + kk % 4, shape), np.broadcast_to((r >= 8) + 2 * (kk >= 4), shape),
            np.broadcast_to(4 * n + kk % 4, shape), np.broadcast_to(8 + (kk >= 4), shape))


def _simulator_primitives() -> SimpleNamespace:
    @cuda.jit(device=True)
    def tf32_nearest(x):
        return _bits_op(x, 0x1000, TF32_MASK)

    @cuda.jit(device=True)
    def tf32_truncate(x):
        return _bits_op(x, 0, TF32_MASK)

    @cuda.jit(device=True)
    def exp2_ftz(x):
        y = np.exp2(np.float32(x))
        return ZERO if abs(y) < FP32_TINY else y   # NaN stays NaN

    @cuda.jit(device=True)
    def mma_3xtf32(ah0, ah1, ah2, ah3, al0, al1, al2, al3, bh0, bh1, bl0, bl1, c0, c1, c2, c3):
        # every lane's A and B fragments, in one of two buffers taken in turn (see _turn)
        frag = cuda.shared.array((2, MAX_THREADS, 12), float32)
        turns = cuda.shared.array(MAX_THREADS, int32)
        tid = cuda.threadIdx.x
        buf = _turn(turns, tid)
        parts = np.array((ah0, ah1, ah2, ah3, al0, al1, al2, al3, bh0, bh1, bl0, bl1), np.float32)
        frag[buf, tid] = (parts.view(np.uint32) & np.uint32(TF32_MASK)).view(np.float32)
        cuda.syncthreads()       # the whole warp's fragments are visible
        warp = frag[buf, tid - tid % 32:tid - tid % 32 + 32]
        a_lane, a_slot, b_lane, b_slot = _fragment_index(tid % 32)
        acc = np.array((c0, c1, c2, c3), np.float32)
        for pa, pb in ((1, 0), (0, 1), (0, 0)):   # lo hi, hi lo, hi hi: the GPU's three mma
            products = warp[a_lane, a_slot + 4 * pa] * warp[b_lane, b_slot + 2 * pb]
            for kk in range(8):                   # fp32 products, summed in fp32 in k order
                acc = acc + products[:, kk]
        return acc[0], acc[1], acc[2], acc[3]

    @cuda.jit(device=True)
    def shfl_xor(x, lane_mask):
        lanes = cuda.shared.array((2, MAX_THREADS), float32)
        turns = cuda.shared.array(MAX_THREADS, int32)
        tid = cuda.threadIdx.x
        buf = _turn(turns, tid)
        lanes[buf, tid] = x
        cuda.syncthreads()       # every lane's value is visible
        return lanes[buf, tid ^ lane_mask]

    @cuda.jit(device=True)
    def pair_barrier(barrier):
        # the whole block: the pair's two warps reach it at the same count of barriers (the
        # mma above synchronise the block too), so their exchange is ordered as on the GPU
        cuda.syncthreads()

    return SimpleNamespace(tf32_nearest=tf32_nearest, tf32_truncate=tf32_truncate, exp2_ftz=exp2_ftz,
                           mma_3xtf32=mma_3xtf32, shfl_xor=shfl_xor, pair_sync=pair_barrier,
                           pair_arrive=pair_barrier)


@lru_cache(maxsize=None)
def warp_ops(lo_truncated: bool = False) -> SimpleNamespace:
    """Device functions, for the GPU or the simulator:

    - ``split(x)`` -> (hi, lo), x = hi + lo with hi TF32 (with lo as the mma reads it: to
      2^-21 relative); x = +-inf becomes (+-TF32_MAX, 0), so a -inf key component still gives
      its score ~-1e38 * q (or -inf), probability 0, where an inf operand would give NaN in a
      cross term (infinite inputs are otherwise outside 3xTF32's exactness: +inf in v gives
      ~1e38, not inf);
      ``split_finite(x)``, two instructions fewer, for x known finite or NaN, and
      ``clamp(x)`` (+-inf -> +-TF32_MAX), so that split(x) = split_finite(clamp(x));
    - ``exp2_ftz(x)``: 2^x in one SFU instruction (results below 2^-126 are 0);
    - ``mma_3xtf32(ah0..ah3, al0..al3, bh0, bh1, bl0, bl1, c0..c3)`` -> C + A B at fp32-level
      accuracy from split fragments: three TF32 mma, the two small cross terms first, so that
      they are not lost below the large term's rounding;
    - ``quad_max(x)`` (NaN sticky), ``quad_sum(x)`` over the 4 lanes that share fragment rows;
      ``warp_sum(x)`` over all 32 lanes;
    - ``pair_arrive(barrier)``, ``pair_sync(barrier)``: named barrier ``barrier`` (1-15) of a
      pair of warps (64 threads), one warp arriving after its shared stores, the other waiting
      for them (``bar.arrive`` / ``bar.sync``; in the simulator, a barrier of the whole block,
      which both warps must then reach after as many barriers and mma as each other).

    ``lo_truncated``: the splits return lo with its low 13 bits cleared, as the mma reads it
    (hi + lo then within 2^-21 of x, not exact): one instruction more, for kernels that also add
    lo back to hi (the tc backward, where the exact lo measured slower).
    """
    base = _simulator_primitives() if simulator_enabled() else _gpu_primitives()
    tf32_nearest, tf32_truncate, shfl_xor = base.tf32_nearest, base.tf32_truncate, base.shfl_xor

    @cuda.jit(device=True)
    def split_finite(x):
        """x = hi + lo exactly, hi TF32, for x not infinite; the mma reads lo truncated to TF32,
        within 2^-21 |x| of lo."""
        hi = tf32_nearest(x)
        if lo_truncated:
            return hi, tf32_truncate(x - hi)
        return hi, x - hi

    @cuda.jit(device=True)
    def clamp(x):
        """x, except that x = +-inf (or a finite x that rounds past the largest TF32) becomes
        +-TF32_MAX: an inf operand would meet the partner's lo part in a cross term, where
        inf * (a lo of either sign) can give inf - inf = NaN."""
        if abs(tf32_nearest(x)) == POS_INF and x == x:   # (a NaN with a small payload rounds to inf too)
            return TF32_MAX if x > ZERO else -TF32_MAX
        return x

    @cuda.jit(device=True)
    def split(x):
        """split_finite(clamp(x)): (+-TF32_MAX, 0) for x = +-inf."""
        return split_finite(clamp(x))

    @cuda.jit(device=True)
    def quad_max(x):
        """Max over the 4 lanes of a quad (the lanes that share rows of an mma fragment); a NaN
        in any of them wins."""
        x = sticky_max(x, shfl_xor(x, 1))
        return sticky_max(x, shfl_xor(x, 2))

    @cuda.jit(device=True)
    def quad_sum(x):
        x += shfl_xor(x, 1)
        return x + shfl_xor(x, 2)

    @cuda.jit(device=True)
    def warp_sum(x):
        """Sum over the 32 lanes of a warp (a butterfly: every lane gets the sum)."""
        x += shfl_xor(x, 16)
        x += shfl_xor(x, 8)
        x += shfl_xor(x, 4)
        return quad_sum(x)

    return SimpleNamespace(split=split, split_finite=split_finite, clamp=clamp, exp2_ftz=base.exp2_ftz,
                           mma_3xtf32=base.mma_3xtf32, quad_max=quad_max, quad_sum=quad_sum,
                           warp_sum=warp_sum, pair_sync=base.pair_sync, pair_arrive=base.pair_arrive)
