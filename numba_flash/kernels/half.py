"""Half-precision primitives for the fp16 / bf16 tensor-core kernels: ``mma.sync`` m16n8k16,
``ldmatrix``, ``cp.async`` and the conversions between fp32 and 16-bit values -- each one PTX
instruction on the GPU, and under Numba's CUDA simulator an emulation of what the warp does.

Values in the kernels: a half element is its 16 bits (``uint16``, the same for fp16 and bf16:
the kernels move bits, and only the conversions and the mma know the format); a pair of them
is one ``uint32`` register, the element with the lower index in the low 16 bits (how the mma
and ``ldmatrix`` read and write register pairs). Shared memory is a ``uint16`` array.

``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}`` (PTX ISA, "Matrix fragments for
mma.m16n8k16" with floating-point types): a warp computes C (16 x 8) += A (16 x 16) B (16 x 8).
Lane = 4 g + t holds, two elements per register (e = 0, 1 the low and high half):

    A: a0 = A[g, 2t + e]      a1 = A[g + 8, 2t + e]   a2 = A[g, 2t + 8 + e]   a3 = A[g + 8, 2t + 8 + e]
    B: b0 = B[2t + e, g]      b1 = B[2t + 8 + e, g]
    C: c0, c1 = C[g, 2t + e]  c2, c3 = C[g + 8, 2t + e]

``ldmatrix.sync.aligned.m8n8.x4.shared.b16``: lanes 8 i .. 8 i + 7 give the shared addresses of
the 8 rows (16 bytes each) of matrix i; lane (g, t) receives row g, elements 2t, 2t + 1 of
matrix i in register i (``.trans``: column g, rows 2t, 2t + 1) -- exactly an A or B fragment
when the rows are chosen as the kernels do.

``cp.async.cg.shared.global`` copies 16 bytes HBM -> SRAM without passing through registers
(``src_bytes`` = 0 writes 16 zero bytes and reads nothing); ``commit`` closes a group of copies
and ``wait_all`` waits for every group this thread committed (a barrier after it makes all
threads' copies visible). The simulator copies at once, so its commit and wait do nothing.

Products of two fp16 (or bf16) values are exact in fp32; the tensor core adds them in an order
and with a rounding of its own, the emulation in fp32 in k order: the two agree to fp32 rounding,
not bits. All functions that exchange data between lanes (mma, ldmatrix) must be reached by
every thread of the block together (uniform control flow), as in ``mma.py``.
"""
from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace

import numpy as np
from numba import cuda, int32, uint32, uint64

from ..memory import simulator_enabled
from ..precision import HALF as HALF_DTYPES
from ..precision import half_bits, half_values
from .mma import MAX_THREADS, _turn

#: PTX type of each.
_PTX_TYPE = {"float16": "f16", "bfloat16": "bf16"}


def _gpu_primitives(dtype: str) -> SimpleNamespace:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    f32, i16, i32, i64 = ir.FloatType(), ir.IntType(16), ir.IntType(32), ir.IntType(64)
    ty = _PTX_TYPE[dtype]

    def asm(builder, ret, ins, text, constraints, side_effect=False):
        fty = ir.FunctionType(ret, [x.type for x in ins])
        return builder.call(ir.InlineAsm(fty, text, constraints, side_effect=side_effect), ins)

    def shared_address(context, builder, array_type, array, index):
        """The 32-bit shared-window address of array[index] (a generic pointer cast back to
        the shared state space)."""
        data = context.make_array(array_type)(context, builder, array).data
        ptr = builder.gep(data, [index])
        return builder.ptrtoint(builder.addrspacecast(ptr, ir.PointerType(ptr.type.pointee, 3)), i32)

    def global_address(context, builder, array_type, array, index):
        data = context.make_array(array_type)(context, builder, array).data
        return builder.ptrtoint(builder.gep(data, [index]), i64)

    @intrinsic
    def mma(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """(c0, c1, c2, c3) + A B for one m16n8k16 tile product (fragments as above)."""
        def codegen(context, builder, sig, args):
            out = asm(builder, ir.LiteralStructType([f32] * 4), list(args),
                      f"mma.sync.aligned.m16n8k16.row.col.f32.{ty}.{ty}.f32 "
                      "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
                      "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f")
            return context.make_tuple(builder, sig.return_type,
                                      [builder.extract_value(out, n) for n in range(4)])
        return types.UniTuple(types.float32, 4)(*([types.uint32] * 6 + [types.float32] * 4)), codegen

    @intrinsic
    def max_nan(typingctx, a, b):
        """max(a, b), NaN if either is NaN (``max.NaN.f32``: one FMNMX, where a NaN-sticky max
        in plain code takes two compares and a select)."""
        def codegen(context, builder, sig, args):
            return asm(builder, f32, list(args), "max.NaN.f32 $0, $1, $2;", "=f,f,f")
        return types.float32(types.float32, types.float32), codegen

    @intrinsic
    def pack2(typingctx, lo, hi):
        """The pair (lo, hi) rounded to the half format (to nearest even) in one register."""
        def codegen(context, builder, sig, args):
            # cvt.rn.f16x2.f32 d, a, b puts a in the upper half of d
            return asm(builder, i32, [args[1], args[0]], f"cvt.rn.{ty}x2.f32 $0, $1, $2;", "=r,f,f")
        return types.uint32(types.float32, types.float32), codegen

    @intrinsic
    def to_half(typingctx, x):
        """x rounded to the half format (to nearest even), as its 16 bits."""
        def codegen(context, builder, sig, args):
            return asm(builder, i16, list(args), f"cvt.rn.{ty}.f32 $0, $1;", "=h,f")
        return types.uint16(types.float32), codegen

    @intrinsic
    def from_half(typingctx, h):
        """The half value with bits h, exactly, as fp32."""
        def codegen(context, builder, sig, args):
            return asm(builder, f32, list(args), f"cvt.f32.{ty} $0, $1;", "=f,h")
        return types.float32(types.uint16), codegen

    def make_ldmatrix(trans):
        suffix = ".trans" if trans else ""

        @intrinsic
        def ldmatrix(typingctx, smem, index):
            def codegen(context, builder, sig, args):
                address = shared_address(context, builder, sig.args[0], args[0], args[1])
                out = asm(builder, ir.LiteralStructType([i32] * 4), [address],
                          f"ldmatrix.sync.aligned.m8n8.x4{suffix}.shared.b16 {{$0, $1, $2, $3}}, [$4];",
                          "=r,=r,=r,=r,r,~{memory}", side_effect=True)
                return context.make_tuple(builder, sig.return_type,
                                          [builder.extract_value(out, n) for n in range(4)])
            return types.UniTuple(types.uint32, 4)(smem, types.uint64), codegen
        return ldmatrix

    def make_cp_async(nbytes, level):
        """``cp_async(smem, at, src, index, src_bytes)``: SRAM smem[at ..] = HBM src[index ..],
        ``nbytes`` bytes (both addresses aligned to it), asynchronously; the first src_bytes
        bytes are read, the rest zero-filled. ``level``: "cg" (L2 only; 16-byte copies) or "ca"
        (through L1: the only one 4-byte copies allow)."""
        @intrinsic
        def cp_async(typingctx, smem, at, src, index, src_bytes):
            def codegen(context, builder, sig, args):
                dst = shared_address(context, builder, sig.args[0], args[0], args[1])
                src_address = global_address(context, builder, sig.args[2], args[2], args[3])
                asm(builder, ir.VoidType(), [dst, src_address, args[4]],
                    f"cp.async.{level}.shared.global [$0], [$1], {nbytes}, $2;", "r,l,r,~{memory}",
                    side_effect=True)
                return context.get_dummy_value()
            return types.void(smem, types.uint64, src, types.uint64, types.int32), codegen
        return cp_async

    @intrinsic
    def commit(typingctx):
        """Close this thread's group of cp.async copies issued since the last commit."""
        def codegen(context, builder, sig, args):
            asm(builder, ir.VoidType(), [], "cp.async.commit_group;", "~{memory}", side_effect=True)
            return context.get_dummy_value()
        return types.void(), codegen

    @intrinsic
    def wait_all(typingctx):
        """Wait until every cp.async group this thread committed has landed in SRAM."""
        def codegen(context, builder, sig, args):
            asm(builder, ir.VoidType(), [], "cp.async.wait_group 0;", "~{memory}", side_effect=True)
            return context.get_dummy_value()
        return types.void(), codegen

    return SimpleNamespace(mma=mma, max_nan=max_nan, pack2=pack2, to_half=to_half, from_half=from_half,
                           ldmatrix=make_ldmatrix(False), ldmatrix_trans=make_ldmatrix(True),
                           cp_async16=make_cp_async(16, "cg"), cp_async4=make_cp_async(4, "ca"),
                           commit=commit, wait_all=wait_all)


@lru_cache(maxsize=None)
def _mma_index(lane: int):
    """Where lane (g, t)'s four C entries C[r, n] find A[r, k] and B[k, n], k < 16, in a warp's
    (32, 12) table of fragment halves (a0 lo, a0 hi, ..., a3 hi, b0 lo, ..., b1 hi):
    A[r, k] in lane 4 (r % 8) + (k % 8) // 2, half 2 ((r >= 8) + 2 (k >= 8)) + k % 2;
    B[k, n] in lane 4 n + (k % 8) // 2, half 8 + 2 (k >= 8) + k % 2. Four (4, 16) arrays."""
    g, t = lane // 4, lane % 4
    r = np.array([g, g, g + 8, g + 8])[:, None]
    n = np.array([2 * t, 2 * t + 1, 2 * t, 2 * t + 1])[:, None]
    k = np.arange(16)[None, :]
    shape = (4, 16)
    return (np.broadcast_to(4 * (r % 8) + (k % 8) // 2, shape),
            np.broadcast_to(2 * ((r >= 8) + 2 * (k >= 8)) + k % 2, shape),
            np.broadcast_to(4 * n + (k % 8) // 2, shape),
            np.broadcast_to(8 + 2 * (k >= 8) + k % 2, shape))


def _simulator_primitives(dtype: str) -> SimpleNamespace:
    @cuda.jit(device=True)
    def mma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        frag = cuda.shared.array((2, MAX_THREADS, 6), uint32)
        turns = cuda.shared.array(MAX_THREADS, int32)
        tid = cuda.threadIdx.x
        buf = _turn(turns, tid)
        frag[buf, tid] = (a0, a1, a2, a3, b0, b1)
        cuda.syncthreads()       # the whole warp's fragments are visible
        halves = half_values(frag[buf, tid - tid % 32:tid - tid % 32 + 32].copy().view(np.uint16), dtype)
        a_lane, a_half, b_lane, b_half = _mma_index(tid % 32)
        products = halves[a_lane, a_half] * halves[b_lane, b_half]   # exact in fp32
        acc = np.array((c0, c1, c2, c3), np.float32)
        for kk in range(16):     # summed in fp32 in k order
            acc = acc + products[:, kk]
        return acc[0], acc[1], acc[2], acc[3]

    @cuda.jit(device=True)
    def max_nan(a, b):
        return a if a != a else (b if b != b or b > a else a)

    @cuda.jit(device=True)
    def pack2(lo, hi):
        bits = half_bits(np.array((lo, hi), np.float32), dtype)
        return np.uint32(bits[0]) | (np.uint32(bits[1]) << np.uint32(16))

    @cuda.jit(device=True)
    def to_half(x):
        return half_bits(np.array((x,), np.float32), dtype)[0]

    @cuda.jit(device=True)
    def from_half(h):
        return half_values(np.array((h,), np.uint16), dtype)[0]

    def make_ldmatrix(trans):
        @cuda.jit(device=True)
        def ldmatrix(smem, index):
            rows = cuda.shared.array((2, MAX_THREADS), uint64)
            turns = cuda.shared.array(MAX_THREADS, int32)
            tid = cuda.threadIdx.x
            buf = _turn(turns, tid)
            rows[buf, tid] = index
            cuda.syncthreads()   # every lane's row address is visible
            base, lane = tid - tid % 32, tid % 32
            g, t = lane // 4, lane % 4
            out = np.zeros(4, np.uint32)
            for i in range(4):
                if trans:        # column g, rows 2t and 2t + 1 of matrix i
                    lo = smem[rows[buf, base + 8 * i + 2 * t] + g]
                    hi = smem[rows[buf, base + 8 * i + 2 * t + 1] + g]
                else:            # row g, elements 2t and 2t + 1 of matrix i
                    at = rows[buf, base + 8 * i + g] + 2 * t
                    lo, hi = smem[at], smem[at + 1]
                out[i] = np.uint32(lo) | (np.uint32(hi) << np.uint32(16))
            return out[0], out[1], out[2], out[3]
        return ldmatrix

    @cuda.jit(device=True)
    def cp_async16(smem, at, src, index, src_bytes):
        for e in range(8):
            smem[at + e] = src[index + e] if 2 * e < src_bytes else 0

    @cuda.jit(device=True)
    def cp_async4(smem, at, src, index, src_bytes):
        smem[at] = src[index] if src_bytes > 0 else 0

    @cuda.jit(device=True)
    def commit():
        pass

    @cuda.jit(device=True)
    def wait_all():
        pass

    return SimpleNamespace(mma=mma, max_nan=max_nan, pack2=pack2, to_half=to_half, from_half=from_half,
                           ldmatrix=make_ldmatrix(False), ldmatrix_trans=make_ldmatrix(True),
                           cp_async16=cp_async16, cp_async4=cp_async4, commit=commit, wait_all=wait_all)


@lru_cache(maxsize=None)
def half_ops(dtype: str) -> SimpleNamespace:
    """Device functions for the half format ``dtype`` ("float16" or "bfloat16"), for the GPU or
    the simulator:

    - ``mma(a0..a3, b0, b1, c0..c3)`` -> C + A B, an m16n8k16 product with fp32 accumulators;
    - ``max_nan(a, b)`` -> max(a, b), NaN if either is NaN (``tiles.sticky_max`` in one instruction);
    - ``pack2(lo, hi)`` -> one uint32 register holding both, rounded to nearest even;
    - ``to_half(x)`` -> uint16 bits of x rounded to nearest even; ``from_half(h)`` -> float32;
    - ``ldmatrix(smem, index)``, ``ldmatrix_trans(smem, index)`` -> four uint32 fragment
      registers, this lane's row address ``index`` into the uint16 shared array ``smem``;
    - ``cp_async16(smem, at, src, index, src_bytes)`` (16 bytes), ``cp_async4(...)`` (one
      4-byte element), ``commit()``, ``wait_all()``.
    """
    if dtype not in HALF_DTYPES:
        raise ValueError(f"dtype must be one of {HALF_DTYPES}, got {dtype!r}")
    return _simulator_primitives(dtype) if simulator_enabled() else _gpu_primitives(dtype)
