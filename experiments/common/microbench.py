"""Microbenchmarks of one GPU's machine rates, for a runtime model of our kernels: the kernels,
how they are timed, and the arithmetic that turns their clock readings into rates.

Every timed kernel ends its arguments with a ``timing`` table, one row a block (``TIMING``
columns): after a block barrier, thread 0 writes the SM it runs on (``%smid``), ``%clock64``
(the SM's cycle counter) and ``%globaltimer`` (ns, one clock for the whole GPU) once before the
hot loop and once after it. Hence:

    rate of an SM  = work of the blocks it ran / (last block's end - first block's start), cycles
    rate           = median over SMs, then median over repeats (``spread``: range / median)
    latency        = 1 / rate of one warp running one dependent chain
    SM clock (Hz)  = clock64 ticks / globaltimer ns * 1e9, median over blocks
    bandwidth, B/s = bytes / CUDA-event time of the launch; B/cycle/SM = that / (clock * SMs)

A hot loop issues one kind of instruction, ``OPS_PER_ITERATION`` of them an iteration, fully
unrolled (the loop's own instructions take few issue slots), on ``ilp``
independent chains in registers (a local array indexed only by unrolled constants: the PTX has
no local memory). Counts are per warp ("warp instructions"); shared-memory
traffic is counted in wavefronts (128-byte transfers: a conflict-free warp-wide LDS of 32, 64,
128 bits a thread is 1, 2, 4 of them). Compute and shared-memory benchmarks run one block a
SM, forced with ``ONE_BLOCK_SMEM`` of dynamic shared memory; ``warps_per_sm`` is its size.

The iteration count of each measurement is sized on the device: a probe run, x10 until it
takes a tenth of ``TARGET_S``, then scaled to ``TARGET_S`` (2 ms, so every timing is >= 1 ms).

Under Numba's CUDA simulator there is no inline PTX: the primitives fall back to Python
stand-ins (``_simulator_primitives``) that only let each kernel run, once, at a tiny size;
nothing the simulator runs is a measurement (``Bench.simulated``: values are None).

Instructions the loops compile to (ptxas 13.0, sm_90; checked with nvdisasm, one loop body
each): mma: HMMA.1688.F32.TF32 (half formats: HMMA.16816.F32, .F32.BF16); ffma: FFMA; mufu: MUFU.EX2 (ex2.approx.ftz.f32, its operand
negated for free); alu: LOP3.LUT + VIMNMX.U32 (max(v ^ a, b): two integer instructions of the
ALU pipe a step; (v ^ a) + b became IMAD.IADD, on the FMA pipe, and pure logic chains collapsed);
lds/sts: LDS{,.64,.128} / STS{,.64,.128} with immediate offsets (plus 0.5-2 LOP3 a load, to
consume its words, and up to 1.2 IMAD.MOV a store: at most 2.1 issue slots a wavefront, of
the SM's 4 a cycle); shfl: SHFL.BFLY; global: LDG.E.128.STRONG.GPU (ld.global.cg) /
STG.E.128; barrier: BAR.SYNC.DEFER_BLOCKING. mma chains carry ptxas's NOPs (the dependent
HMMA's wait is longer than an instruction's stall field): part of the latency our kernels see.
"""
from __future__ import annotations

import itertools
import math
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from types import SimpleNamespace

import numpy as np
from numba import cuda, float32, uint32

from numba_flash.launch import launch
from numba_flash.memory import simulator_enabled

WARP = 32
#: Columns of a kernel's per-block timing table.
TIMING = ("smid", "clock_start", "clock_end", "ns_start", "ns_end")
SMID, CLOCK_START, CLOCK_END, NS_START, NS_END = range(len(TIMING))
#: Dynamic shared memory that keeps a second block off an SM (> half of 228 KB on sm_90 and of
#: 164 KB on sm_80, under the 227 KB a block may opt into).
ONE_BLOCK_SMEM = 120 * 1024
#: Seconds each timed launch is sized to; of FFMA on every SM before the clock is measured.
TARGET_S, WARM_UP_S = 2e-3, 50e-3
REPEATS, QUICK_REPEATS = 7, 3
#: Warp instructions of the kind measured that one hot-loop iteration issues, per warp.
PIPE_BLOCK_OPS, PIPE_BLOCKS = 64, 4
OPS_PER_ITERATION = {"mma": 16, "pipe": PIPE_BLOCKS * PIPE_BLOCK_OPS, "shared": 16, "barrier": 16}
#: mma.sync m16n8k8: 2 * 16 * 8 * 8 FLOP a warp instruction; FFMA: 2 FLOP a lane.
MMA_M16N8K8_FLOP = 2 * 16 * 8 * 8
MMA_M16N8K16_FLOP = 2 * 16 * 8 * 16
FFMA_FLOP_PER_WARP_INSTRUCTION = 2 * WARP

#: pipe kernel modes, shared kernel modes, global kernel modes
FFMA, MUFU, ALU = 0, 1, 2
LDS32, LDS64, LDS128, STS32, STS64, STS128, SHFL = range(7)
READ, WRITE = 0, 1
SHARED_MODES = {"lds32": LDS32, "lds64": LDS64, "lds128": LDS128,
                "sts32": STS32, "sts64": STS64, "sts128": STS128}
#: 32-bit words of the shared benchmark's array (32 KB); a warp's 16 accesses an iteration span
#: 16 x 32 x (bits / 32) words, and the next iteration starts that far on, modulo the array.
SHARED_WORDS = 8192
SHFL_ILP = 4
#: Global benchmark: 16-byte vectors a thread has in flight (unrolled), blocks of this size,
#: this many a SM (1024 threads: room for 64 registers a thread).
GLOBAL_UNROLL, GLOBAL_THREADS, GLOBAL_BLOCKS_PER_SM = 4, 512, 2
L2_BYTES_READ = 16 * 2**20
DRAM_BYTES = 2 * 2**30
#: Global pointer chase: one thread's dependent loads, a line (32 words) apart, over 8 KB (L1,
#: ld.global.ca) or 4 MiB (L2, ld.global.cg: L1 bypassed), one pass warming the caches first;
#: and over 1 GiB (DRAM: 4 KiB + 128 B apart, so each load opens another DRAM page while
#: a 2 MiB translation serves 500 of them; the round, 262 143 loads, has left L2 long before
#: a line comes back).
CACHED, UNCACHED = 0, 1
CHASE_STRIDE_WORDS = 32
CHASE_BYTES = {CACHED: 8 * 2**10, UNCACHED: 4 * 2**20}
DRAM_CHASE_BYTES, DRAM_CHASE_STRIDE_WORDS = 2**30, 1024 + 32
#: Placement: threads a block, waves launched, how long each block spins.
PLACEMENT_THREADS, PLACEMENT_WAVES, PLACEMENT_SPIN_NS = 128, 3, 50_000
PLACEMENT_UNITS = {"placement_first_wave_blocks": "blocks", "placement_blocks_per_sm": "blocks",
                   "placement_in_order": "bool", "placement_coresident_stride": "blocks",
                   "placement_repeatable": "bool"}
LAUNCHES = 1000
#: Blocks an SM of the block-launch benchmark's grid: many times what fits at once, so that for
#: most of the launch each SM starts blocks as fast as it can.
LAUNCH_BLOCKS = 64


# ---- primitives: one PTX instruction each on the GPU, stand-ins under the simulator ----------
def _gpu_primitives() -> SimpleNamespace:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    from numba_flash.kernels.mma import gpu_instructions

    i32, i64 = ir.IntType(32), ir.IntType(64)

    def special_register(name: str, bits: int):
        """A read of ``%name`` (volatile: never hoisted, merged or dropped)."""
        ty, nbty = (i64, types.int64) if bits == 64 else (i32, types.int32)
        constraint = "=l" if bits == 64 else "=r"

        @intrinsic
        def read(typingctx):
            def codegen(context, builder, sig, args):
                asm = ir.InlineAsm(ir.FunctionType(ty, []), f"mov.u{bits} $0, %{name};", constraint,
                                   side_effect=True)
                return builder.call(asm, [])
            return nbty(), codegen
        return read

    def address(context, builder, sig, args, space):
        """Address of arr[index] (arr, index = the first two arguments of a uint32 array): 64-bit
        generic for global memory; for shared memory the 32-bit shared-window address, as the
        array's base (converted once: the asm is pure, so LLVM hoists it) plus 4 index."""
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        index = context.cast(builder, args[1], sig.args[1], types.int64)
        if space == "global":
            return builder.ptrtoint(builder.gep(ary.data, [index]), i64), "l"
        to_shared = ir.InlineAsm(ir.FunctionType(i32, [i64]),
                                 "{ .reg .u64 t; cvta.to.shared.u64 t, $1; cvt.u32.u64 $0, t; }", "=r,l")
        base = builder.call(to_shared, [builder.ptrtoint(ary.data, i64)])
        return builder.add(base, builder.shl(builder.trunc(index, i32), ir.Constant(i32, 2))), "r"

    def vector_load(op: str, space: str, n: int):
        """``(u32,) * n`` = the n words at arr[index] by one ``op`` (volatile asm: kept in the loop)."""
        vec = f".v{n}" if n > 1 else ""
        dst = ", ".join(f"${k}" for k in range(n))
        text = f"{op}{vec}.u32 {{{dst}}}, [${n}];" if n > 1 else f"{op}.u32 $0, [$1];"

        @intrinsic
        def load(typingctx, arr, index):
            def codegen(context, builder, sig, args):
                addr, constraint = address(context, builder, sig, args, space)
                out_ty = i32 if n == 1 else ir.LiteralStructType([i32] * n)
                asm = ir.InlineAsm(ir.FunctionType(out_ty, [addr.type]), text,
                                   ",".join(["=r"] * n + [constraint]), side_effect=True)
                out = builder.call(asm, [addr])
                words = [out] if n == 1 else [builder.extract_value(out, k) for k in range(n)]
                return context.make_tuple(builder, sig.return_type, words)
            return types.UniTuple(types.uint32, n)(arr, index), codegen
        return load

    def vector_store(op: str, space: str, n: int):
        """arr[index:index + n] = word, n times over, by one ``op``."""
        vec = f".v{n}" if n > 1 else ""
        src = ", ".join(f"${k + 1}" for k in range(n))
        text = f"{op}{vec}.u32 [$0], {{{src}}};" if n > 1 else f"{op}.u32 [$0], $1;"

        @intrinsic
        def store(typingctx, arr, index, word):
            def codegen(context, builder, sig, args):
                addr, constraint = address(context, builder, sig, args, space)
                value = context.cast(builder, args[2], sig.args[2], types.uint32)
                asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [addr.type] + [i32] * n), text,
                                   ",".join([constraint] + ["r"] * n), side_effect=True)
                builder.call(asm, [addr] + [value] * n)
                return context.get_dummy_value()
            return types.void(arr, index, word), codegen
        return store

    kernels = gpu_instructions()   # the instructions as the kernels issue them
    return SimpleNamespace(
        clock64=special_register("clock64", 64), globaltimer=special_register("globaltimer", 64),
        smid=special_register("smid", 32), mma_tf32=kernels.mma_tf32, exp2_ftz=kernels.exp2_ftz,
        shfl_xor=kernels.shfl_xor,
        lds1=vector_load("ld.volatile.shared", "shared", 1), lds2=vector_load("ld.volatile.shared", "shared", 2),
        lds4=vector_load("ld.volatile.shared", "shared", 4),
        sts1=vector_store("st.volatile.shared", "shared", 1), sts2=vector_store("st.volatile.shared", "shared", 2),
        sts4=vector_store("st.volatile.shared", "shared", 4),
        ldg4=vector_load("ld.global.cg", "global", 4), stg4=vector_store("st.global", "global", 4),
        ldg1_ca=vector_load("ld.global.ca", "global", 1),
        ldg1_cg=vector_load("ld.global.cg", "global", 1))


def _simulator_primitives() -> SimpleNamespace:
    """Stand-ins with the GPU primitives' signatures, so that each kernel runs under the
    simulator; the mma and the shuffle do not compute what the hardware does (nothing here is
    checked: only that the kernels execute)."""
    @cuda.jit(device=True)
    def now():
        return time.perf_counter_ns()

    @cuda.jit(device=True)
    def smid():
        return 0

    @cuda.jit(device=True)
    def mma_tf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        return c0 + a0 * b0, c1 + a1 * b1, c2 + a2 * b0, c3 + a3 * b1

    @cuda.jit(device=True)
    def exp2_ftz(x):
        return np.exp2(np.float32(x))

    @cuda.jit(device=True)
    def shfl_xor(x, lane_mask):
        return x

    @cuda.jit(device=True)
    def lds1(arr, i):
        return (arr[i],)

    @cuda.jit(device=True)
    def lds2(arr, i):
        return arr[i], arr[i + 1]

    @cuda.jit(device=True)
    def lds4(arr, i):
        return arr[i], arr[i + 1], arr[i + 2], arr[i + 3]

    def store(n):
        @cuda.jit(device=True)
        def sts(arr, i, word):
            for k in range(n):
                arr[i + k] = word
        return sts

    sts4 = store(4)
    return SimpleNamespace(clock64=now, globaltimer=now, smid=smid, mma_tf32=mma_tf32, exp2_ftz=exp2_ftz,
                           shfl_xor=shfl_xor, lds1=lds1, lds2=lds2, lds4=lds4, sts1=store(1), sts2=store(2),
                           sts4=sts4, ldg4=lds4, stg4=sts4, ldg1_ca=lds1, ldg1_cg=lds1)


@lru_cache(maxsize=None)
def primitives() -> SimpleNamespace:
    """clock64(), globaltimer(), smid(), mma_tf32(a0..a3, b0, b1, c0..c3), exp2_ftz(x),
    shfl_xor(x, lane_mask), lds{1,2,4}(arr, i) -> a tuple of 1, 2, 4 words, sts{1,2,4}(arr, i, word)
    (word to each of the 1, 2, 4 words at arr[i]), ldg4(arr, i) -> 4 words (L1 bypassed),
    stg4(arr, i, word), ldg1_ca(arr, i) / ldg1_cg(arr, i) -> 1 word (cached in L1 / not);
    arr: uint32 arrays, shared (lds, sts) or global (ldg, stg)."""
    return _simulator_primitives() if simulator_enabled() else _gpu_primitives()


@lru_cache(maxsize=None)
def _numbered():
    """numbered(smem): smem[i] = i for every word of a ``SHARED_WORDS`` shared array (the
    block's threads striding), then a barrier: loads of known, distinct words."""
    @cuda.jit(device=True)
    def numbered(smem):
        for i in range(cuda.threadIdx.x, SHARED_WORDS, cuda.blockDim.x):
            smem[i] = uint32(i)
        cuda.syncthreads()
    return numbered


@lru_cache(maxsize=None)
def _mark():
    """mark(timing, end): barrier, then thread 0 records smid, clock64 and globaltimer in the
    block's row of ``timing`` (the start columns when end == 0, the end columns when 1)."""
    p = primitives()
    clock64, globaltimer, smid = p.clock64, p.globaltimer, p.smid

    @cuda.jit(device=True)
    def mark(timing, end):
        cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            row = cuda.blockIdx.x
            timing[row, CLOCK_START + end] = clock64()
            timing[row, NS_START + end] = globaltimer()
            timing[row, SMID] = smid()
    return mark


# ---- kernels ----------------------------------------------------------------------------------
def mma_inputs(fmt: str):
    """The ``x`` of ``mma_kernel(ilp, fmt)``: 16 operand words, values near 1 the compiler
    cannot see -- float32 for "tf32", uint32 pairs of halves (1 + a few ulp) for "float16" /
    "bfloat16"."""
    if fmt == "tf32":
        return _x()
    one = {"float16": 0x3C00, "bfloat16": 0x3F80}[fmt]
    halves = one + np.arange(16, dtype=np.uint32) % 4
    return cuda.to_device((halves << np.uint32(16)) | halves)


def _mma_product(fmt: str):
    """The mma.sync device function of ``fmt``: TF32 m16n8k8 ("tf32"), or m16n8k16 of
    "float16" / "bfloat16" operands as the half kernels issue it (``half.half_ops``)."""
    if fmt == "tf32":
        return primitives().mma_tf32
    from numba_flash.kernels.half import half_ops
    return half_ops(fmt).mma


#: The FFMA chains' v <- v a + b beside ``mma_kernel``'s mma.
FFMA_A, FFMA_B = np.float32(0.625), np.float32(0.375)


@lru_cache(maxsize=None)
def mma_kernel(ilp: int, fmt: str = "tf32", others: int = 0, other: str = "ffma"):
    """mma(x, iterations, out, timing): every warp runs ``ilp`` independent chains
    C_k <- C_k + A B of mma.sync, ``OPS_PER_ITERATION["mma"]`` mma an iteration: TF32 m16n8k8
    (``fmt`` "tf32"), or m16n8k16 of "float16" / "bfloat16" operands (``half.half_ops``, as the
    half kernels issue it); fp32 accumulators; ``x``: ``mma_inputs(fmt)``. Beside them,
    independent of them, ``others`` instructions an mma in ``ilp`` chains of their own:
    ``other`` "ffma", FFMA v <- v ``FFMA_A`` + ``FFMA_B`` (chain k from k + lane / 8), or "alu",
    LOP3 + VIMNMX u <- max(u ^ a, b) on 32-bit integers (two ALU instructions a step, as
    ``pipe_kernel`` times them; a, b from the thread and the iteration count; ``others`` even);
    0: the mma alone."""
    product = _mma_product(fmt)
    if other not in ("ffma", "alu") or (other == "alu" and others % 2):
        raise ValueError(f"other {other!r} with {others} an mma: 'ffma', or 'alu' with an even count")
    ffmas, steps = (others, 0) if other == "ffma" else (0, others // 2)
    mark = _mark()
    unroll = OPS_PER_ITERATION["mma"] // ilp

    @cuda.jit
    def mma(x, iterations, out, timing):
        lane = cuda.threadIdx.x % WARP
        a0, a1, a2, a3, b0, b1 = x[lane % 4], x[1], x[2], x[3], x[4], x[5]
        acc = cuda.local.array((ilp, 4), float32)
        v = cuda.local.array(ilp, float32)
        u = cuda.local.array(ilp, uint32)
        ua, ub = uint32(cuda.threadIdx.x) * uint32(40503), uint32(iterations)
        for k in range(ilp):          # distinct starts: no two chains are the same computation
            v[k] = float32(k) + float32(lane) * float32(0.125)   # (a lane's: none folds away)
            u[k] = uint32(k) + uint32(cuda.threadIdx.x)
            for r in range(4):
                acc[k, r] = float32(k) + float32(r) * float32(0.25)
        mark(timing, 0)
        for _ in range(iterations):
            for _u in range(unroll):
                for k in range(ilp):
                    acc[k, 0], acc[k, 1], acc[k, 2], acc[k, 3] = product(
                        a0, a1, a2, a3, b0, b1, acc[k, 0], acc[k, 1], acc[k, 2], acc[k, 3])
                    for j in range(ffmas):
                        v[j % ilp] = cuda.fma(v[j % ilp], FFMA_A, FFMA_B)
                    for j in range(steps):
                        u[j % ilp] = max(uint32(u[j % ilp] ^ ua), ub)
        mark(timing, 1)
        total = float32(0)
        for k in range(ilp):
            total += v[k] + float32(u[k] & uint32(1))
            for r in range(4):
                total += acc[k, r]
        out[cuda.grid(1)] = total
    return mma


#: FFMA an iteration of ``mio_burst_kernel``, in 4 chains: more issue cycles than its burst's
#: loads take to serve, so that only a stall at issue can lengthen an iteration.
MIO_BURST_FFMAS = 256


@lru_cache(maxsize=None)
def mio_burst_kernel(burst: int):
    """mio_burst(iterations, out, timing): each iteration a warp issues ``burst`` independent
    conflict-free LDS.128 back to back, then ``MIO_BURST_FFMAS`` FFMA (4 chains) that do not
    depend on them, then XORs the loaded words into an accumulator. While the loads wait in
    the shared-memory (MIO) queue the FFMA can issue -- unless the queue is full, when the warp
    stalls at the load it cannot enqueue: the iteration's cycles against ``burst`` show the
    queue's depth."""
    p, mark, numbered = primitives(), _mark(), _numbered()
    lds4 = p.lds4
    mask, span = SHARED_WORDS - 1, WARP * 4
    chains, steps, held = 4, MIO_BURST_FFMAS // 4, max(burst, 1)

    @cuda.jit
    def mio_burst(iterations, out, timing):
        smem = cuda.shared.array(SHARED_WORDS, uint32)
        numbered(smem)
        lane = cuda.threadIdx.x % WARP
        v = cuda.local.array(chains, float32)
        for k in range(chains):
            v[k] = float32(k) + float32(lane) * float32(0.125)
        words = cuda.local.array((held, 4), uint32)
        bits = uint32(0)
        off = lane * 4
        mark(timing, 0)
        for _ in range(iterations):
            for b in range(burst):
                w = lds4(smem, (off + b * span) & mask)
                words[b, 0], words[b, 1], words[b, 2], words[b, 3] = w[0], w[1], w[2], w[3]
            for _s in range(steps):
                for k in range(chains):
                    v[k] = cuda.fma(v[k], FFMA_A, FFMA_B)
            for b in range(burst):
                bits = uint32(bits ^ words[b, 0] ^ words[b, 1] ^ words[b, 2] ^ words[b, 3])
            off = (off + burst * span) & mask
        mark(timing, 1)
        total = float32(bits & uint32(1))
        for k in range(chains):
            total += v[k]
        out[cuda.grid(1)] = total
    return mio_burst


@lru_cache(maxsize=None)
def mma_lds_kernel(loads: int, fmt: str = "tf32"):
    """mma_lds(x, iterations, out, timing): every warp runs 4 independent mma chains (TF32
    m16n8k8, or fp16 / bf16 m16n8k16 for ``fmt`` "float16" / "bfloat16"; ``x``:
    ``mma_inputs(fmt)``), ``OPS_PER_ITERATION["mma"]`` mma an iteration, and beside them,
    independent of them, ``loads`` conflict-free warp-wide LDS.128 an mma (loads = 0: the mma
    alone); a load's words are XORed into an accumulator, so none is dropped."""
    lds4, mark, numbered, product = primitives().lds4, _mark(), _numbered(), _mma_product(fmt)
    chains, unroll = 4, OPS_PER_ITERATION["mma"] // 4
    mask, span = SHARED_WORDS - 1, WARP * 4

    @cuda.jit
    def mma_lds(x, iterations, out, timing):
        smem = cuda.shared.array(SHARED_WORDS, uint32)
        numbered(smem)
        lane = cuda.threadIdx.x % WARP
        a0, a1, a2, a3, b0, b1 = x[lane % 4], x[1], x[2], x[3], x[4], x[5]
        acc = cuda.local.array((chains, 4), float32)
        for k in range(chains):
            for r in range(4):
                acc[k, r] = float32(k) + float32(r) * float32(0.25)
        bits = uint32(0)
        off = lane * 4
        mark(timing, 0)
        for _ in range(iterations):
            for _u in range(unroll):
                for k in range(chains):
                    acc[k, 0], acc[k, 1], acc[k, 2], acc[k, 3] = product(
                        a0, a1, a2, a3, b0, b1, acc[k, 0], acc[k, 1], acc[k, 2], acc[k, 3])
                    for _l in range(loads):
                        words = lds4(smem, off)
                        bits = uint32(bits ^ words[0] ^ words[1] ^ words[2] ^ words[3])
                        off = (off + span) & mask
        mark(timing, 1)
        total = float32(bits & uint32(1))
        for k in range(chains):
            for r in range(4):
                total += acc[k, r]
        out[cuda.grid(1)] = total
    return mma_lds


@lru_cache(maxsize=None)
def chase_kernel():
    """chase(mode, iterations, out, timing): one dependent chain a lane, 16 steps an iteration:
    mode LDS32, a shared-memory pointer chase (each load's value is the next load's index; the
    words hold i -> i + 32 mod SHARED_WORDS, so a warp's 32 loads hit 32 banks); mode SHFL,
    x <- shfl_xor(x, 1), each shuffle taking the last one's result."""
    p, mark = primitives(), _mark()
    shfl_xor = p.shfl_xor
    unroll = OPS_PER_ITERATION["shared"]

    @cuda.jit
    def chase(mode, iterations, out, timing):
        smem = cuda.shared.array(SHARED_WORDS, uint32)
        tid = cuda.threadIdx.x
        for i in range(tid, SHARED_WORDS, cuda.blockDim.x):
            smem[i] = uint32((i + WARP) % SHARED_WORDS)
        cuda.syncthreads()
        at = uint32(tid % WARP)
        x = float32(tid % WARP)
        mark(timing, 0)
        if mode == LDS32:
            for _ in range(iterations):
                for _u in range(unroll):
                    at = smem[at]
        else:
            for _ in range(iterations):
                for _u in range(unroll):
                    x = shfl_xor(x, 1)
        mark(timing, 1)
        out[cuda.grid(1)] = at + uint32(x)
    return chase


@lru_cache(maxsize=None)
def memory_chase_kernel():
    """chase_memory(mode, data, start, links, iterations, out, timing): thread 0 of the block
    follows the chain in ``data`` (each word the index of the next) from word ``start``, first
    ``links`` loads untimed (a round of the chain: the caches warm), then ``iterations`` x 16
    loads timed: mode CACHED by
    ld.global.ca (L1 hits), UNCACHED by ld.global.cg (L1 bypassed: L2 hits). A load's index
    comes from the one before, so each waits its latency (plus the index-to-address IMAD)."""
    p, mark = primitives(), _mark()
    ldca, ldcg = p.ldg1_ca, p.ldg1_cg
    unroll = OPS_PER_ITERATION["shared"]

    @cuda.jit
    def chase_memory(mode, data, start, links, iterations, out, timing):
        at = uint32(start)
        lead = cuda.threadIdx.x == 0
        if lead:
            for _ in range(links):
                at = ldca(data, at)[0] if mode == CACHED else ldcg(data, at)[0]
        mark(timing, 0)
        if lead:
            if mode == CACHED:
                for _ in range(iterations):
                    for _u in range(unroll):
                        at = ldca(data, at)[0]
            else:
                for _ in range(iterations):
                    for _u in range(unroll):
                        at = ldcg(data, at)[0]
        mark(timing, 1)
        out[cuda.grid(1)] = at
    return chase_memory


@lru_cache(maxsize=None)
def pipe_kernel(ilp: int):
    """pipe(mode, x, iterations, out, timing): ``ilp`` independent chains a thread of one
    instruction kind, ``OPS_PER_ITERATION["pipe"]`` a warp an iteration: mode FFMA
    (v <- v a + b), MUFU (v <- 2^-v, ex2.approx.ftz) or ALU (v <- max(v ^ a, b) on 32-bit
    integers, two instructions a step: counted as two). An iteration is ``PIPE_BLOCKS`` written-out
    calls of a block of ``PIPE_BLOCK_OPS`` (LLVM unrolls a loop nest fully only up to about that
    size), so that the loop's own instructions are ~3 % of the issue slots (FFMA needs them all)."""
    exp2_ftz, mark = primitives().exp2_ftz, _mark()
    unroll = PIPE_BLOCK_OPS // ilp
    alu_steps = unroll // 2

    @cuda.jit(device=True)
    def ffma_block(v, a, b):
        for _u in range(unroll):
            for k in range(ilp):
                v[k] = cuda.fma(v[k], a, b)

    @cuda.jit(device=True)
    def mufu_block(v):
        for _u in range(unroll):
            for k in range(ilp):
                v[k] = exp2_ftz(-v[k])

    @cuda.jit(device=True)
    def alu_block(v, a, b):
        for _u in range(alu_steps):
            for k in range(ilp):
                v[k] = max(uint32(v[k] ^ a), b)

    @cuda.jit(device=True)
    def ffma_chains(x, iterations):
        v = cuda.local.array(ilp, float32)
        a, b = x[0], x[1]
        for k in range(ilp):
            v[k] = x[2] + float32(k)
        for _ in range(iterations):
            ffma_block(v, a, b)
            ffma_block(v, a, b)
            ffma_block(v, a, b)
            ffma_block(v, a, b)
        total = float32(0)
        for k in range(ilp):
            total += v[k]
        return total

    @cuda.jit(device=True)
    def mufu_chains(x, iterations):
        v = cuda.local.array(ilp, float32)
        for k in range(ilp):
            v[k] = x[2] + float32(k)
        for _ in range(iterations):
            mufu_block(v)
            mufu_block(v)
            mufu_block(v)
            mufu_block(v)
        total = float32(0)
        for k in range(ilp):
            total += v[k]
        return total

    @cuda.jit(device=True)
    def alu_chains(x, iterations):
        v = cuda.local.array(ilp, uint32)
        a, b = uint32(cuda.threadIdx.x) | uint32(1), uint32(x[3])
        for k in range(ilp):
            v[k] = uint32(cuda.threadIdx.x + k)
        for _ in range(iterations):
            alu_block(v, a, b)
            alu_block(v, a, b)
            alu_block(v, a, b)
            alu_block(v, a, b)
        total = uint32(0)
        for k in range(ilp):
            total = uint32(total ^ v[k])
        return float32(total)

    @cuda.jit
    def pipe(mode, x, iterations, out, timing):
        mark(timing, 0)
        if mode == FFMA:
            total = ffma_chains(x, iterations)
        elif mode == MUFU:
            total = mufu_chains(x, iterations)
        else:
            total = alu_chains(x, iterations)
        mark(timing, 1)
        out[cuda.grid(1)] = total
    return pipe


@lru_cache(maxsize=None)
def shared_kernel():
    """shared(mode, iterations, out, timing): warp-wide conflict-free shared-memory loads or
    stores of 32, 64, 128 bits a lane (``SHARED_MODES``), 16 an iteration, each warp over
    consecutive 32 x (bits / 32) words; or mode SHFL: ``SHFL_ILP`` chains of shfl.sync.bfly,
    16 shuffles a warp an iteration (lane masks 1, 2, 4, 8, 16 in turn)."""
    p, mark = primitives(), _mark()
    shfl_xor = p.shfl_xor
    unroll = OPS_PER_ITERATION["shared"]
    shfl_steps = unroll // SHFL_ILP
    mask = SHARED_WORDS - 1

    def loads(n, load):
        span = unroll * WARP * n

        @cuda.jit(device=True)
        def loop(smem, lane, iterations):
            acc = uint32(0)
            off = 0
            for _ in range(iterations):
                base = off + lane * n
                for u in range(unroll):
                    words = load(smem, base + u * WARP * n)
                    for k in range(n):
                        acc = uint32(acc ^ words[k])
                off = (off + span) & mask
            return acc
        return loop

    def stores(n, store):
        span = unroll * WARP * n

        @cuda.jit(device=True)
        def loop(smem, lane, iterations):
            off = 0
            word = uint32(lane)
            for _ in range(iterations):
                base = off + lane * n
                for u in range(unroll):
                    store(smem, base + u * WARP * n, word)
                off = (off + span) & mask
            return word
        return loop

    lds32, lds64, lds128 = loads(1, p.lds1), loads(2, p.lds2), loads(4, p.lds4)
    sts32, sts64, sts128 = stores(1, p.sts1), stores(2, p.sts2), stores(4, p.sts4)

    @cuda.jit(device=True)
    def shuffles(lane, iterations):
        v = cuda.local.array(SHFL_ILP, float32)
        for k in range(SHFL_ILP):
            v[k] = float32(lane + k)
        for _ in range(iterations):
            for s in range(shfl_steps):
                for k in range(SHFL_ILP):
                    v[k] = shfl_xor(v[k], 1 << ((s * SHFL_ILP + k) % 5))
        total = float32(0)
        for k in range(SHFL_ILP):
            total += v[k]
        return uint32(total)

    @cuda.jit
    def shared(mode, iterations, out, timing):
        smem = cuda.shared.array(SHARED_WORDS, uint32)
        tid = cuda.threadIdx.x
        for i in range(tid, SHARED_WORDS, cuda.blockDim.x):
            smem[i] = uint32(i)
        lane = tid % WARP
        mark(timing, 0)
        if mode == LDS32:
            acc = lds32(smem, lane, iterations)
        elif mode == LDS64:
            acc = lds64(smem, lane, iterations)
        elif mode == LDS128:
            acc = lds128(smem, lane, iterations)
        elif mode == STS32:
            acc = sts32(smem, lane, iterations)
        elif mode == STS64:
            acc = sts64(smem, lane, iterations)
        elif mode == STS128:
            acc = sts128(smem, lane, iterations)
        else:
            acc = shuffles(lane, iterations)
        mark(timing, 1)
        out[cuda.grid(1)] = acc
    return shared


@lru_cache(maxsize=None)
def global_kernel():
    """global_(mode, data, vectors, steps, out, timing): grid-stride over ``data`` as
    ``vectors`` (a power of two) 16-byte vectors, wrapping around; a step reads (READ, L1
    bypassed: ld.global.cg) or writes (WRITE) ``GLOBAL_UNROLL`` vectors a thread, a grid's
    width apart. Bytes moved: steps x GLOBAL_UNROLL x threads x 16."""
    p, mark = primitives(), _mark()
    ldg4, stg4 = p.ldg4, p.stg4

    @cuda.jit
    def global_(mode, data, vectors, steps, out, timing):
        stride = cuda.gridsize(1)
        wrap = vectors - 1
        pos = cuda.grid(1) & wrap
        acc = uint32(0)
        mark(timing, 0)
        if mode == READ:
            for _ in range(steps):
                for u in range(GLOBAL_UNROLL):
                    w0, w1, w2, w3 = ldg4(data, 4 * ((pos + u * stride) & wrap))
                    acc = uint32(acc ^ w0 ^ w1 ^ w2 ^ w3)
                pos = (pos + GLOBAL_UNROLL * stride) & wrap
        else:
            word = uint32(pos)
            for _ in range(steps):
                for u in range(GLOBAL_UNROLL):
                    stg4(data, 4 * ((pos + u * stride) & wrap), word)
                pos = (pos + GLOBAL_UNROLL * stride) & wrap
        mark(timing, 1)
        out[cuda.grid(1)] = acc
    return global_


@lru_cache(maxsize=None)
def barrier_kernel():
    """barrier(iterations, timing): ``OPS_PER_ITERATION["barrier"]`` __syncthreads() an iteration."""
    mark = _mark()
    unroll = OPS_PER_ITERATION["barrier"]

    @cuda.jit
    def barrier(iterations, timing):
        mark(timing, 0)
        for _ in range(iterations):
            for _u in range(unroll):
                cuda.syncthreads()
        mark(timing, 1)
    return barrier


@lru_cache(maxsize=None)
def placement_kernel():
    """placement(spin_ns, timing): each block records where and when it ran and spins
    ``spin_ns`` in between (thread 0 on globaltimer; the others wait at the barrier). The
    launch's dynamic shared memory, allocated whether or not the kernel touches it, sets how
    many blocks share an SM."""
    globaltimer, mark = primitives().globaltimer, _mark()

    @cuda.jit
    def placement(spin_ns, timing):
        mark(timing, 0)
        if cuda.threadIdx.x == 0:
            start = globaltimer()
            while globaltimer() - start < spin_ns:
                pass
        mark(timing, 1)
    return placement


@lru_cache(maxsize=None)
def empty_kernels():
    """Two kernels that do nothing: of 1 and of 9 device-array arguments."""
    @cuda.jit
    def empty1(a):
        pass

    @cuda.jit
    def empty9(a, b, c, d, e, f, g, h, i):
        pass
    return empty1, empty9


def ptx_targets():
    """(name, python function, signature) of every kernel, for ``numba.cuda.compile_ptx``."""
    table, f32 = "int64[:, ::1]", "float32[::1]"
    for ilp in (1, 2, 4):
        yield f"mma ilp={ilp}", mma_kernel(ilp).py_func, f"({f32}, int64, {f32}, {table})"
    for fmt in ("float16", "bfloat16"):
        for ilp in (1, 2, 4):
            yield f"mma {fmt} ilp={ilp}", mma_kernel(ilp, fmt).py_func, f"(uint32[::1], int64, {f32}, {table})"
    for loads in (0, 1, 2):
        yield f"mma_lds loads={loads}", mma_lds_kernel(loads).py_func, f"({f32}, int64, {f32}, {table})"
        yield f"mma_lds float16 loads={loads}", mma_lds_kernel(loads, "float16").py_func, \
            f"(uint32[::1], int64, {f32}, {table})"
    for burst in MIO_BURSTS:
        yield f"mio_burst burst={burst}", mio_burst_kernel(burst).py_func, f"(int64, {f32}, {table})"
    for fmt, other, n in mma_beside_cases():
        if n:
            x = f32 if fmt == "tf32" else "uint32[::1]"
            yield f"mma {fmt} ilp=4 {n} {other}", mma_kernel(4, fmt, n, other).py_func, \
                f"({x}, int64, {f32}, {table})"
    yield "chase", chase_kernel().py_func, f"(int64, int64, uint32[::1], {table})"
    yield "chase_memory", memory_chase_kernel().py_func, f"(int64, uint32[::1], int64, int64, int64, uint32[::1], {table})"
    for ilp in (1, 8):
        yield f"pipe ilp={ilp}", pipe_kernel(ilp).py_func, f"(int64, {f32}, int64, {f32}, {table})"
    yield "shared", shared_kernel().py_func, f"(int64, int64, uint32[::1], {table})"
    yield "global", global_kernel().py_func, f"(int64, uint32[::1], int64, int64, uint32[::1], {table})"
    yield "barrier", barrier_kernel().py_func, f"(int64, {table})"
    yield "placement", placement_kernel().py_func, f"(int64, {table})"
    empty1, empty9 = empty_kernels()
    yield "empty1", empty1.py_func, f"({f32},)"
    yield "empty9", empty9.py_func, "(" + ", ".join([f32] * 9) + ")"


# ---- analysis (pure: NumPy on timing tables) --------------------------------------------------
def sm_rates(table: np.ndarray, work_per_block: float) -> np.ndarray:
    """Work a cycle of each SM (ascending smid): its blocks' work over the cycles from its first
    block's start to its last block's end (clock64 is one counter an SM)."""
    table = np.asarray(table, dtype=np.int64)
    rates = []
    for sm in np.unique(table[:, SMID]):
        rows = table[table[:, SMID] == sm]
        cycles = rows[:, CLOCK_END].max() - rows[:, CLOCK_START].min()
        rates.append(len(rows) * work_per_block / cycles)
    return np.array(rates)


def rate_per_sm(table: np.ndarray, work_per_block: float) -> float:
    """Median over SMs of ``sm_rates``."""
    return float(np.median(sm_rates(table, work_per_block)))


def clock_hz(table: np.ndarray) -> float:
    """The SM clock: clock64 ticks over globaltimer ns of each block, median over blocks."""
    table = np.asarray(table, dtype=np.int64)
    ns = table[:, NS_END] - table[:, NS_START]
    cycles = table[:, CLOCK_END] - table[:, CLOCK_START]
    return float(np.median(cycles / ns) * 1e9)


def all_resident(table: np.ndarray) -> bool:
    """True when every block started before any block ended (one wave: none waited for a slot)."""
    table = np.asarray(table, dtype=np.int64)
    return bool(table[:, NS_START].max() < table[:, NS_END].min())


def median_and_spread(values) -> tuple[float, float]:
    """(median, (max - min) / median) of repeated measurements."""
    values = [float(v) for v in values]
    middle, width = statistics.median(values), max(values) - min(values)
    return middle, 0.0 if width == 0 else width / abs(middle) if middle else math.inf


def smem_for_blocks_per_sm(blocks: int, smem_per_sm: int, reserved_per_block: int,
                           max_per_block: int) -> int:
    """Dynamic shared memory (bytes, a multiple of 1 KB) that lets exactly ``blocks`` blocks
    share an SM: its allocation (bytes + the driver's reservation) fits ``blocks`` times in
    ``smem_per_sm``, not ``blocks + 1`` times; halfway between the two bounds."""
    high = smem_per_sm // blocks - reserved_per_block
    low = smem_per_sm // (blocks + 1) - reserved_per_block
    nbytes = min(max_per_block, (low + high) // 2 // 1024 * 1024)
    if not low < nbytes <= high:
        raise ValueError(f"no shared-memory size gives {blocks} blocks an SM")
    return nbytes


@dataclass(frozen=True)
class Placement:
    """Where the blocks of one grid ran. ``first_wave``: the blocks that started before any
    block ended, in order of start (ties by block index); ``groups``: smid -> the first-wave
    blocks on that SM, ascending."""

    blocks_per_sm: int
    first_wave: tuple[int, ...]
    groups: dict[int, tuple[int, ...]]

    @property
    def resident(self) -> tuple[int, int]:
        """(fewest, most) first-wave blocks an SM."""
        sizes = [len(g) for g in self.groups.values()]
        return min(sizes), max(sizes)

    @property
    def in_order(self) -> bool:
        """True when the first wave is blocks 0, 1, ..., len - 1."""
        return sorted(self.first_wave) == list(range(len(self.first_wave)))

    @property
    def strides(self) -> Counter:
        """How often each difference of block index occurs between consecutive co-resident blocks."""
        return Counter(b - a for g in self.groups.values() for a, b in zip(g, g[1:]))

    @property
    def stride(self) -> int | None:
        """The most common of ``strides`` (None with one block an SM)."""
        return self.strides.most_common(1)[0][0] if self.strides else None

    def describe(self, sms: int = 4) -> str:
        lowest = sorted(self.groups)[:sms]
        first = sorted(self.first_wave)[:8]
        sm_of = {b: sm for sm, g in self.groups.items() for b in g}
        return ("; ".join(f"SM {sm}: {list(self.groups[sm])}" for sm in lowest)
                + f"; blocks {first[0]}-{first[-1]} on SMs {[sm_of[b] for b in first]}"
                + f"; strides {dict(self.strides.most_common(4))}")


def placement(smid, ns_start, ns_end, blocks_per_sm: int) -> Placement:
    """``Placement`` of a grid from each block's smid and globaltimer start and end."""
    smid, ns_start, ns_end = (np.asarray(a, dtype=np.int64) for a in (smid, ns_start, ns_end))
    order = np.lexsort((np.arange(len(smid)), ns_start))
    first = tuple(int(b) for b in order if ns_start[b] < ns_end.min())
    groups: dict[int, list[int]] = {}
    for b in sorted(first):
        groups.setdefault(int(smid[b]), []).append(b)
    return Placement(blocks_per_sm, first, {sm: tuple(g) for sm, g in sorted(groups.items())})


def start_ranks(ns_start) -> np.ndarray:
    """Each block's place in the order of starts (0 first; ties by block index)."""
    ns_start = np.asarray(ns_start, dtype=np.int64)
    order = np.lexsort((np.arange(len(ns_start)), ns_start))
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[order] = np.arange(len(order))
    return ranks


# ---- running them -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Measurement:
    """One measured quantity (a CSV row of the calibrate experiment). value: None when nothing
    was measured (``note`` says why). clock_hz: the SM clock during the kernel measured.
    spread: (max - min) / median over the repeats."""

    quantity: str
    value: float | None
    unit: str
    measured_by: str
    warps_per_sm: int | None = None
    ilp: int | None = None
    blocks_per_sm: int | None = None
    clock_hz: float | None = None
    spread: float | None = None
    repeats: int | None = None
    detail: str = ""
    note: str = ""


def ncu_rows(gpu: bool, quantity: str, unit: str, measured_by: str, metrics: str, child: str,
             kernel: str, launches: int, required: str, rows_from) -> list[Measurement]:
    """Rows of a microbenchmark that ncu profiles in a child process (``child``: Python code
    launching ``launches`` kernels named ``kernel``, each reading must have ``required``):
    ``rows_from(kernels)``, or one row saying why nothing was measured (no GPU, no ncu, or a
    reading missing)."""
    def none(note: str) -> list[Measurement]:
        return [Measurement(quantity, None, unit, measured_by, note=note)]

    if not gpu:
        return none("simulator: not a measurement")
    from .ncu import profile_child

    kernels, stderr = profile_child(metrics, child, [], ("--kernel-name", f"regex:{kernel}"), timeout=600)
    if kernels is None:
        return none(stderr)
    if len(kernels) != launches or any(required not in k for k in kernels):
        return none(f"ncu gave {len(kernels)} readings of {launches}: {stderr.strip()[-200:]}")
    return rows_from(kernels)


@dataclass
class Runs:
    """Repeated launches of one configuration: iterations (or steps) each, event seconds, timing tables."""

    n: int
    seconds: list[float] = field(default_factory=list)
    tables: list[np.ndarray] = field(default_factory=list)


class Bench:
    """Launches and times the microbenchmarks on the current device, or, ``simulated``, runs
    each once at a tiny size under the CUDA simulator (2 pretend SMs, blocks of one warp)."""

    SIMULATED_NOTE = "simulator: not a measurement"

    def __init__(self, simulated: bool, quick: bool = False):
        self.simulated = simulated
        self.repeats = QUICK_REPEATS if quick else REPEATS
        if simulated:
            self.sm_count, self.smem_per_sm, self.smem_reserved, self.smem_optin = 2, 233472, 1024, 232448
        else:
            dev = cuda.get_current_device()
            self.sm_count = int(dev.MULTIPROCESSOR_COUNT)
            self.smem_per_sm = int(dev.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
            self.smem_reserved = int(dev.RESERVED_SHARED_MEMORY_PER_BLOCK)
            self.smem_optin = int(dev.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)

    def threads(self, warps: int) -> int:
        """Threads of a block of ``warps`` warps (one warp under the simulator)."""
        return WARP * (1 if self.simulated else warps)

    def table(self, grid: int):
        return cuda.to_device(np.zeros((grid, len(TIMING)), np.int64))

    def seconds(self, go) -> float:
        """CUDA-event time of ``go()``'s launches, synchronised."""
        start, end = cuda.event(timing=True), cuda.event(timing=True)
        start.record()
        go()
        end.record()
        end.synchronize()
        return cuda.event_elapsed_time(start, end) * 1e-3

    def size(self, go, n0: int, target_s: float) -> int:
        """An n for which ``go(n)`` takes about ``target_s``: from n0, x10 until a run takes a
        tenth of it, then in proportion (never below n0)."""
        n, t = n0, self.seconds(lambda: go(n0))
        while t < target_s / 10:
            n *= 10
            t = self.seconds(lambda: go(n))
        return max(n, math.ceil(n * target_s / t))

    def runs(self, go, table, n0: int, target_s: float = TARGET_S) -> Runs:
        """Launches ``go(n)``: under the simulator once with n = 1; on the GPU with n sized to
        take ``target_s``, once to warm up, then ``repeats`` times, reading ``table`` after each."""
        if self.simulated:
            go(1)
            return Runs(1, [], [table.copy_to_host()])
        n = self.size(go, n0, target_s)
        go(n)
        runs = Runs(n)
        for _ in range(self.repeats):
            runs.seconds.append(self.seconds(lambda: go(n)))
            runs.tables.append(table.copy_to_host())
        return runs

    def measurement(self, quantity, unit, measured_by, runs: Runs | None, values, **fields) -> Measurement:
        """A Measurement of the median of ``values`` (one a repeat; ignored when simulated)."""
        if self.simulated:
            return Measurement(quantity, None, unit, measured_by, note=self.SIMULATED_NOTE, **fields)
        value, spread = median_and_spread(values)
        notes = []
        if runs is not None and runs.tables:
            fields.setdefault("clock_hz", statistics.median(clock_hz(t) for t in runs.tables))
            if not all(all_resident(t) for t in runs.tables):
                notes.append("not every block was resident at once")
        return Measurement(quantity, value, unit, measured_by, spread=spread, repeats=len(values),
                           note="; ".join(notes), **fields)


def _x(n: int = 16) -> np.ndarray:
    """Kernel inputs: values near 1 that the compiler cannot see (no constant folding)."""
    return cuda.to_device(np.linspace(0.999, 1.0, n, dtype=np.float32))


def _throughput(bench: Bench, kernel, warps: int, grid: int, args, work_per_iteration: float, n0: int,
                out_dtype=np.float32) -> tuple[Runs, list[float]]:
    """Runs of ``kernel(*args(n), out, timing)`` with ``grid`` blocks of ``warps`` warps, one
    block an SM; and, per repeat, the median SM's work a cycle (``work_per_iteration`` a warp)."""
    threads = bench.threads(warps)
    out, table = cuda.device_array(grid * threads, out_dtype), bench.table(grid)

    def go(n):
        launch(kernel, grid, threads, ONE_BLOCK_SMEM, *args(n), out, table)
    runs = bench.runs(go, table, n0)
    work = work_per_iteration * runs.n * (threads // WARP)
    return runs, [rate_per_sm(t, work) for t in runs.tables]


def measure_device(bench: Bench) -> list[Measurement]:
    """The SM count, as the device reports it (the per-SM rates are per one of these)."""
    return [bench.measurement("sm_count", "SMs", "device attribute MULTIPROCESSOR_COUNT", None, [bench.sm_count])]


def measure_clock(bench: Bench) -> list[Measurement]:
    """The SM clock under load: FFMA chains on every SM (32 warps each) for ~10 x TARGET_S."""
    kernel, x = pipe_kernel(8), _x()
    grid, threads = bench.sm_count, bench.threads(32)
    out, table = cuda.device_array(grid * threads, np.float32), bench.table(grid)

    def go(n):
        launch(kernel, grid, threads, ONE_BLOCK_SMEM, FFMA, x, n, out, table)
    if not bench.simulated:
        go(bench.size(go, 100, WARM_UP_S))     # the clock ramps up under load
    runs = bench.runs(go, table, 100, target_s=10 * TARGET_S)
    return [bench.measurement("clock_hz", "Hz", "clock64 ticks / globaltimer ns of each block (median), "
                              "FFMA on every SM", runs, [clock_hz(t) for t in runs.tables],
                              warps_per_sm=32, ilp=8)]


#: The mma.sync of each format calibrate times: (its quantities' infix, the throughput rows'
#: detail, the latency row's detail).
_MMA_KINDS = {
    "tf32": ("tf32", f"m16n8k8 TF32, {MMA_M16N8K8_FLOP} FLOP an mma", ""),
    "float16": ("f16", f"m16n8k16 float16, {MMA_M16N8K16_FLOP} FLOP an mma", "m16n8k16 float16"),
    "bfloat16": ("bf16", f"m16n8k16 bfloat16, {MMA_M16N8K16_FLOP} FLOP an mma", "m16n8k16 bfloat16"),
}


def _mma_rows(bench: Bench, fmt: str) -> list[Measurement]:
    """``fmt``'s mma.sync throughput at 4, 8, 16 warps an SM x 1, 2, 4 chains a warp, and the
    latency of one chain (quantities mma_<infix>_per_cycle_per_sm, mma_<infix>_latency_cycles)."""
    name, detail, latency_detail = _MMA_KINDS[fmt]
    x, rows = mma_inputs(fmt), []
    for ilp in (1, 2, 4):
        kernel = mma_kernel(ilp, fmt)
        for warps in (4, 8, 16):
            runs, rates = _throughput(bench, kernel, warps, bench.sm_count, lambda n: (x, n),
                                      OPS_PER_ITERATION["mma"], 1000)
            rows.append(bench.measurement(
                f"mma_{name}_per_cycle_per_sm", "mma/cycle/SM", "clock64, one block an SM", runs, rates,
                warps_per_sm=warps, ilp=ilp, detail=detail))
    runs, rates = _throughput(bench, mma_kernel(1, fmt), 1, 1, lambda n: (x, n), OPS_PER_ITERATION["mma"], 1000)
    rows.append(bench.measurement(f"mma_{name}_latency_cycles", "cycles", "clock64, one warp, dependent chain",
                                  runs, [1 / r for r in rates], warps_per_sm=1, ilp=1, detail=latency_detail))
    return rows


def measure_mma(bench: Bench) -> list[Measurement]:
    """TF32 mma.sync throughput at 4, 8, 16 warps an SM x 1, 2, 4 chains a warp; latency of one chain."""
    return _mma_rows(bench, "tf32")


def measure_mma_half(bench: Bench) -> list[Measurement]:
    """fp16 and bf16 mma.sync m16n8k16 (fp32 accumulators), as ``measure_mma``: the half
    kernels' tensor-core rates."""
    return _mma_rows(bench, "float16") + _mma_rows(bench, "bfloat16")


def _overlap(bench: Bench, quantity: str, by: str, t_mixed, t_a, t_b, sources: list[Measurement],
             warps: int, detail: str) -> Measurement:
    """How far two kinds of work fail to overlap, from the cycles of both side by side
    (``t_mixed``) and of each alone: (t_mixed - max(t_a, t_b)) / min(t_a, t_b), 0 when one
    hides under the other, 1 when they serialise; None (the simulator's note) where a time is
    missing. Spread and repeats are the worst of ``sources``, the rows it comes from."""
    value = None
    if t_mixed and t_a and t_b:
        value = (t_mixed - max(t_a, t_b)) / min(t_a, t_b)
    return Measurement(quantity, value, "fraction", by, warps_per_sm=warps, ilp=4,
                       spread=None if value is None else max(m.spread for m in sources),
                       repeats=None if value is None else min(m.repeats for m in sources),
                       detail=detail, note="" if value is not None else bench.SIMULATED_NOTE)


def measure_mma_lds(bench: Bench) -> list[Measurement]:
    """Do the tensor pipe and shared-memory loads overlap? 16 warps an SM, 4 mma chains a
    warp (TF32 m16n8k8; fp16 m16n8k16: the ``mma_f16_`` rows), with 0, 1 and 2 independent
    LDS.128 an mma: cycles an mma a warp. ``mma_lds_overlap`` (``mma_f16_lds_overlap``):
    (t(mma + loads) - max(t(mma), t(loads))) / min(t(mma), t(loads)), t(loads) from the
    LDS.128 rate alone: 0 when the loads hide under the mma (or the reverse), 1 when they
    serialise."""
    rows = []
    lds_rate = next((m.value for m in measure_shared_rate(bench)), None)
    for fmt, prefix in (("tf32", "mma_"), ("float16", "mma_f16_")):
        x, own, cycles = mma_inputs(fmt), [], {}
        for loads in (0, 1, 2):
            runs, rates = _throughput(bench, mma_lds_kernel(loads, fmt), 16, bench.sm_count,
                                      lambda n, x=x: (x, n), OPS_PER_ITERATION["mma"], 1000)
            own.append(bench.measurement(
                f"{prefix}lds128_per_cycle_per_sm", "mma/cycle/SM", "clock64, one block an SM", runs,
                rates, warps_per_sm=16, ilp=4, detail=f"{loads} LDS.128 (4 wavefronts) an mma beside it"))
            cycles[loads] = None if own[-1].value is None else 1 / own[-1].value
        for loads in (1, 2):
            t_lds = 4 * loads / lds_rate if lds_rate else None     # cycles of loads an mma (SM-wide)
            own.append(_overlap(bench, f"{prefix}lds_overlap", f"from {prefix}lds128_per_cycle_per_sm "
                                "and lds128_wavefronts_per_cycle_per_sm", cycles[loads], cycles[0], t_lds,
                                [own[0], own[loads]], 16, f"{loads} LDS.128 an mma"))
        rows += own
    return rows


#: Instructions an mma beside ``measure_mma_beside``'s mma chains, and its warps an SM.
MMA_BESIDE, MMA_BESIDE_WARPS = (0, 2, 4, 8), (8, 16)
#: The formats and the other instruction kinds it pairs (``mma_kernel``'s fmt, other).
MMA_BESIDE_KINDS = (("float16", "ffma"), ("float16", "alu"), ("tf32", "ffma"), ("tf32", "alu"))
#: A format's short name in the rows' quantities.
FORMAT_TAG = {"float16": "f16", "tf32": "tf32"}


def mma_beside_cases():
    """(fmt, other, instructions an mma) of every ``measure_mma_beside`` kernel (0: the mma
    alone, once a format)."""
    for fmt, other in MMA_BESIDE_KINDS:
        for n in MMA_BESIDE:
            if n or other == "ffma":
                yield fmt, other, n


def measure_mma_beside(bench: Bench) -> list[Measurement]:
    """Does an mma take issue or dispatch cycles from the FP32 or ALU instructions beside it
    (ncu finds the half forward's FADD / FFMA / FMUL / IMAD / MUFU waiting at dispatch, 8.7 % of
    its samples on the H100: results/h100/stalls)? 8 and 16 warps an SM, 4 mma chains a warp
    (fp16 m16n8k16 and TF32 m16n8k8), with 0, 2, 4, 8 independent FFMA, or ALU instructions
    (LOP3 + VIMNMX), an mma: mma a cycle an SM (``mma_<f16|tf32>_<ffma|alu>_per_cycle_per_sm``;
    the mma alone is the 0 FFMA row); ``mma_<f16|tf32>_<ffma|alu>_overlap``: (t(mma + others)
    - max(t(mma), t(others))) / min(t(mma), t(others)), t(others) from the pipe's rate alone
    (timed here as ``measure_pipes`` times it, 32 warps an SM): 0 when one hides under the
    other, 1 when they serialise. tools/mma_dispatch.py fits the issue simulator's
    ``mma_dispatch_cycles`` to the per-cycle rows."""
    timed = {}                          # (fmt, other, warps, n) -> its row
    for fmt, other, n in mma_beside_cases():
        x = mma_inputs(fmt)
        for warps in MMA_BESIDE_WARPS:
            runs, rates = _throughput(bench, mma_kernel(4, fmt, n, other), warps, bench.sm_count,
                                      lambda k, x=x: (x, k), OPS_PER_ITERATION["mma"], 1000)
            timed[fmt, other, warps, n] = bench.measurement(
                f"mma_{FORMAT_TAG[fmt]}_{other}_per_cycle_per_sm", "mma/cycle/SM",
                "clock64, one block an SM", runs, rates, warps_per_sm=warps, ilp=4,
                detail=f"{n} {other.upper()} an mma beside it")
    cycles = lambda row: None if row.value is None else 1 / row.value   # noqa: E731 (an mma, SM-wide)
    rows, alone = list(timed.values()), {}
    if not bench.simulated:             # each pipe's rate alone, as measure_pipes times it
        x = _x()
        for other, mode in (("ffma", FFMA), ("alu", ALU)):
            _, rates = _throughput(bench, pipe_kernel(8), 32, bench.sm_count, lambda k, m=mode: (m, x, k),
                                   OPS_PER_ITERATION["pipe"], 100)
            alone[other] = float(np.median(rates))
    for fmt, other, n in mma_beside_cases():
        if not n:
            continue
        tag = FORMAT_TAG[fmt]
        for warps in MMA_BESIDE_WARPS:
            t_other = n / alone[other] if other in alone else None   # cycles of them an mma (SM-wide)
            mixed, mma = timed[fmt, other, warps, n], timed[fmt, "ffma", warps, 0]
            rows.append(_overlap(bench, f"mma_{tag}_{other}_overlap",
                                 f"from mma_{tag}_{other}_per_cycle_per_sm and the {other} rate alone",
                                 cycles(mixed), cycles(mma), t_other, [mma, mixed], warps,
                                 f"{n} {other.upper()} an mma"))
    return rows


#: Loads a burst of ``measure_mio_burst``.
MIO_BURSTS = (0, 1, 2, 3, 4, 6, 8, 12)


def measure_mio_burst(bench: Bench) -> list[Measurement]:
    """How many shared-memory loads a warp can have waiting before it stalls at issue (the
    MIO queue's depth; ncu's "MIO throttle")? One warp a scheduler (4 an SM) runs
    ``mio_burst_kernel(burst)``: a burst of independent LDS.128, then ``MIO_BURST_FFMAS`` FFMA
    that do not wait for them. ``mio_burst_cycles``: cycles an iteration takes a warp; a queue
    shallower than the burst would add the loads' service time it cannot hold. (H100,
    2026-12-06: up to 12 loads the issue simulator's unbounded queue gives every row within
    +0.3 ... +7.1 %, slower, not faster: no sign of a queue that short; not used by the model.)"""
    rows = []
    for burst in MIO_BURSTS:
        runs, rates = _throughput(bench, mio_burst_kernel(burst), 4, bench.sm_count, lambda n: (n,),
                                  1, 200)
        rows.append(bench.measurement("mio_burst_cycles", "cycles", "clock64, one block an SM", runs,
                                      [4 / r for r in rates if r], warps_per_sm=4, ilp=burst,
                                      detail=f"{burst} LDS.128 then {MIO_BURST_FFMAS} independent FFMA"))
    return rows


def measure_shared_rate(bench: Bench) -> list[Measurement]:
    """The LDS.128 wavefront rate alone (as measure_shared measures it)."""
    if bench.simulated:
        return []
    runs, rates = _throughput(bench, shared_kernel(), 32, bench.sm_count, lambda n: (LDS128, n),
                              OPS_PER_ITERATION["shared"] * 4, 100, np.uint32)
    return [bench.measurement("lds128_wavefronts_per_cycle_per_sm", "wavefronts/cycle/SM",
                              "clock64", runs, rates)]


def measure_pipes(bench: Bench) -> list[Measurement]:
    """FFMA, MUFU.EX2 and ALU throughput (32 warps an SM, 8 chains) and latency (one warp, one chain)."""
    x, rows = _x(), []
    names = {FFMA: "ffma", MUFU: "mufu_ex2", ALU: "alu"}
    what = {FFMA: "FFMA", MUFU: "MUFU.EX2 (ex2.approx.ftz.f32)", ALU: "LOP3.LUT + VIMNMX.U32 (both counted)"}
    for mode, name in names.items():
        runs, rates = _throughput(bench, pipe_kernel(8), 32, bench.sm_count, lambda n, m=mode: (m, x, n),
                                  OPS_PER_ITERATION["pipe"], 100)
        rows.append(bench.measurement(f"{name}_per_cycle_per_sm", "warp instructions/cycle/SM",
                                      "clock64, one block an SM", runs, rates, warps_per_sm=32, ilp=8,
                                      detail=what[mode]))
        if mode == FFMA:
            rows.append(bench.measurement("ffma_flops_per_cycle_per_sm", "FLOP/cycle/SM", "clock64, one block an SM",
                                          runs, [r * FFMA_FLOP_PER_WARP_INSTRUCTION for r in rates],
                                          warps_per_sm=32, ilp=8, detail="2 FLOP a lane an FFMA"))
        runs, rates = _throughput(bench, pipe_kernel(1), 1, 1, lambda n, m=mode: (m, x, n),
                                  OPS_PER_ITERATION["pipe"], 100)
        rows.append(bench.measurement(f"{name}_latency_cycles", "cycles", "clock64, one warp, dependent chain",
                                      runs, [1 / r for r in rates], warps_per_sm=1, ilp=1, detail=what[mode]))
    return rows


def measure_chase(bench: Bench) -> list[Measurement]:
    """Latency (cycles) of a shared-memory load and of a shuffle: one warp, one dependent chain."""
    kernel, rows = chase_kernel(), []
    for name, mode, what in (("lds_latency_cycles", LDS32, "LDS.32 pointer chase"),
                             ("shfl_latency_cycles", SHFL, "shfl.sync.bfly chain")):
        runs, rates = _throughput(bench, kernel, 1, 1, lambda n, m=mode: (m, n),
                                  OPS_PER_ITERATION["shared"], 100, np.uint32)
        rows.append(bench.measurement(name, "cycles", "clock64, one warp, dependent chain", runs,
                                      [1 / r for r in rates], warps_per_sm=1, ilp=1, detail=what))
    return rows


def chase_links(nbytes: int, stride: int = CHASE_STRIDE_WORDS) -> np.ndarray:
    """The chain of ``memory_chase_kernel``: word i holds i + ``stride`` (mod the buffer), so
    every load touches a new 128-byte line (stride >= 32 words)."""
    words = np.arange(nbytes // 4, dtype=np.uint32)
    return ((words + stride) % words.size).astype(np.uint32)


def measure_memory_latency(bench: Bench) -> list[Measurement]:
    """Latency (cycles) of a dependent global load that hits in L1 (8 KB chain, ld.global.ca),
    in L2 (4 MiB, ld.global.cg) and that misses L2 (1 GiB, no warm round: ld.global.cg), one
    thread of one block."""
    kernel, rows = memory_chase_kernel(), []
    for name, mode, nbytes, stride, warm, what in (
            ("l1_hit_latency_cycles", CACHED, CHASE_BYTES[CACHED], CHASE_STRIDE_WORDS, True, "ld.global.ca"),
            ("l2_hit_latency_cycles", UNCACHED, CHASE_BYTES[UNCACHED], CHASE_STRIDE_WORDS, True,
             "ld.global.cg (L1 bypassed)"),
            ("dram_latency_cycles", UNCACHED, DRAM_CHASE_BYTES, DRAM_CHASE_STRIDE_WORDS, False,
             "ld.global.cg, every load a new DRAM page")):
        if bench.simulated:
            nbytes, stride = 4 * WARP * CHASE_STRIDE_WORDS, CHASE_STRIDE_WORDS
        data = cuda.to_device(chase_links(nbytes, stride))
        links = nbytes // 4 // stride if warm else 0
        # cold: each launch starts a sixteenth of the buffer (64 MiB) past the last one's start,
        # beyond what that one read (a 2 ms launch: < 10 000 loads, < 41 MiB)
        launches, span = itertools.count(), nbytes // 4 // 16

        def args(n, m=mode, warm=warm):
            return m, data, 0 if warm else next(launches) % 16 * span, links, n
        runs, rates = _throughput(bench, kernel, 1, 1, args, OPS_PER_ITERATION["shared"], 10, np.uint32)
        rows.append(bench.measurement(name, "cycles", "clock64, one thread, dependent chain", runs,
                                      [1 / r for r in rates], warps_per_sm=1, ilp=1,
                                      detail=f"{what}: pointer chase over {nbytes // 1024} KB, "
                                             f"{4 * stride} B apart (the index-to-address IMAD included)"))
        del data
    return rows


def measure_shared(bench: Bench) -> list[Measurement]:
    """Conflict-free LDS / STS of 32, 64, 128 bits (wavefronts a cycle) and shfl.sync, 32 warps an SM."""
    kernel, rows = shared_kernel(), []
    for name, mode in SHARED_MODES.items():
        wavefronts = int(name[3:]) // 32
        runs, rates = _throughput(bench, kernel, 32, bench.sm_count, lambda n, m=mode: (m, n),
                                  OPS_PER_ITERATION["shared"] * wavefronts, 100, np.uint32)
        rows.append(bench.measurement(f"{name}_wavefronts_per_cycle_per_sm", "wavefronts/cycle/SM",
                                      "clock64, one block an SM", runs, rates, warps_per_sm=32,
                                      detail=f"{wavefronts} wavefront(s) of 128 B a warp instruction"))
    runs, rates = _throughput(bench, kernel, 32, bench.sm_count, lambda n: (SHFL, n),
                              OPS_PER_ITERATION["shared"], 100, np.uint32)
    rows.append(bench.measurement("shfl_per_cycle_per_sm", "warp instructions/cycle/SM", "clock64, one block an SM",
                                  runs, rates, warps_per_sm=32, ilp=SHFL_ILP, detail="shfl.sync.bfly.b32"))
    return rows


def measure_global(bench: Bench) -> list[Measurement]:
    """Read bandwidth from L2 (16 MiB, read over and over) and from DRAM (2 GiB), write
    bandwidth to DRAM (2 GiB): 16-byte accesses, 2 blocks of 512 threads an SM."""
    rows = []
    for name, mode, nbytes in (("l2_read", READ, L2_BYTES_READ), ("dram_read", READ, DRAM_BYTES),
                               ("dram_write", WRITE, DRAM_BYTES)):
        rows += _bandwidth(bench, name, mode, nbytes)
    return rows


def _bandwidth(bench: Bench, name: str, mode: int, nbytes: int) -> list[Measurement]:
    """B/s and B/cycle/SM of the global kernel in ``mode`` over a buffer of ``nbytes`` (freed on return)."""
    kernel = global_kernel()
    grid = GLOBAL_BLOCKS_PER_SM * bench.sm_count
    threads = GLOBAL_THREADS if not bench.simulated else WARP
    where = f"{nbytes / 2**20:.0f} MiB buffer"
    if bench.simulated:
        nbytes = 16 * grid * threads * GLOBAL_UNROLL
    out, table = cuda.device_array(grid * threads, np.uint32), bench.table(grid)
    data, vectors = cuda.device_array(nbytes // 4, np.uint32), nbytes // 16

    def go(n):
        launch(kernel, grid, threads, 0, mode, data, vectors, n, out, table)
    runs = bench.runs(go, table, max(1, vectors // (grid * threads * GLOBAL_UNROLL)))   # n0: one pass
    moved = runs.n * GLOBAL_UNROLL * grid * threads * 16
    per_s = [moved / s for s in runs.seconds]
    per_cycle = [b / (clock_hz(t) * bench.sm_count) for b, t in zip(per_s, runs.tables)]
    common = dict(blocks_per_sm=GLOBAL_BLOCKS_PER_SM, warps_per_sm=GLOBAL_BLOCKS_PER_SM * threads // WARP, detail=where)
    return [bench.measurement(f"{name}_bytes_per_s", "B/s", "CUDA events, whole GPU", runs, per_s, **common),
            bench.measurement(f"{name}_bytes_per_cycle_per_sm", "B/cycle/SM", "CUDA events; / (SM clock x SMs)",
                              runs, per_cycle, **common)]


def measure_barrier(bench: Bench) -> list[Measurement]:
    """Cycles a __syncthreads() of a block of 4, 8, 16 warps (one block an SM, nothing else to do)."""
    kernel, rows = barrier_kernel(), []
    for warps in (4, 8, 16):
        grid, threads = bench.sm_count, bench.threads(warps)
        table = bench.table(grid)

        def go(n):
            launch(kernel, grid, threads, ONE_BLOCK_SMEM, n, table)
        runs = bench.runs(go, table, 1000)
        rates = [rate_per_sm(t, OPS_PER_ITERATION["barrier"] * runs.n) for t in runs.tables]
        rows.append(bench.measurement("barrier_cycles", "cycles", "clock64, one block an SM", runs,
                                      [1 / r for r in rates], warps_per_sm=warps))
    return rows


def measure_launch(bench: Bench) -> list[Measurement]:
    """Host seconds a launch of an empty numba kernel (1 and 9 array arguments), and the GPU's
    time from one empty kernel to the next when launches are queued ahead of it (behind a
    kernel that spins long enough for the host to queue them all)."""
    empty1, empty9 = empty_kernels()
    arrays = [cuda.device_array(1, np.float32) for _ in range(9)]
    launch1, launch9 = empty1[1, WARP], empty9[1, WARP]
    host_by = f"time.perf_counter over {LAUNCHES} launches"
    gap_by = f"CUDA events around {LAUNCHES} queued empty kernels / {LAUNCHES}"
    if bench.simulated:
        launch1(arrays[0])
        launch9(*arrays)
        return [bench.measurement("host_launch_s", "s", host_by, None, []),
                bench.measurement("host_launch_per_array_arg_s", "s", host_by, None, []),
                bench.measurement("launch_gap_s", "s", gap_by, None, [])]

    def host_seconds(fn, args):
        for _ in range(3):
            fn(*args)
        cuda.synchronize()
        started = time.perf_counter()
        for _ in range(LAUNCHES):
            fn(*args)
        elapsed = time.perf_counter() - started
        cuda.synchronize()
        return elapsed / LAUNCHES
    host1 = [host_seconds(launch1, arrays[:1]) for _ in range(bench.repeats)]
    host9 = [host_seconds(launch9, arrays) for _ in range(bench.repeats)]
    spin, table = placement_kernel(), bench.table(1)
    spin_ns = int(max(20e-3, 3 * LAUNCHES * statistics.median(host1)) * 1e9)
    gaps, starved = [], 0
    for _ in range(bench.repeats):
        spun, start, end = (cuda.event(timing=True) for _ in range(3))
        launch(spin, 1, WARP, 0, spin_ns, table)
        spun.record()
        start.record()
        for _ in range(LAUNCHES):
            launch1(arrays[0])
        end.record()
        starved += bool(spun.query())      # the spin ended before the last launch was queued
        end.synchronize()
        gaps.append(cuda.event_elapsed_time(start, end) * 1e-3 / LAUNCHES)
    gap = bench.measurement("launch_gap_s", "s", gap_by, None, gaps,
                            detail=f"queued behind a {spin_ns / 1e6:.0f} ms spin kernel")
    if starved:
        gap = replace(gap, note=f"in {starved} of {len(gaps)} repeats the GPU ran out of queued launches")
    return [bench.measurement("host_launch_s", "s", host_by, None, host1,
                              detail="empty kernel, 1 device-array argument, kernel[1, 32](a)"),
            bench.measurement("host_launch_per_array_arg_s", "s", f"{host_by}: (9 arrays - 1 array) / 8", None,
                              [(b - a) / 8 for a, b in zip(host1, host9)],
                              detail="empty kernels of 1 and 9 device-array arguments"),
            gap]


def measure_placement(bench: Bench) -> tuple[list[Measurement], list[dict]]:
    """Which SM each block of a ``PLACEMENT_WAVES``-wave grid ran on, for 1, 2, 4 blocks an SM
    (forced with dynamic shared memory): summary Measurements, and the raw mapping of the first
    repeat (one dict a block; none under the simulator)."""
    kernel, rows, raw = placement_kernel(), [], []
    by = f"%smid and %globaltimer of every block, {PLACEMENT_WAVES} waves"
    for k in (1, 2, 4):
        smem = smem_for_blocks_per_sm(k, bench.smem_per_sm, bench.smem_reserved, bench.smem_optin)
        grid = PLACEMENT_WAVES * k * bench.sm_count
        table = bench.table(grid)
        common = dict(blocks_per_sm=k, warps_per_sm=k * PLACEMENT_THREADS // WARP)
        quantities = [q for q in PLACEMENT_UNITS if k > 1 or q != "placement_coresident_stride"]
        if bench.simulated:
            launch(kernel, grid, bench.threads(PLACEMENT_THREADS // WARP), smem, 1000, table)
            rows += [bench.measurement(q, PLACEMENT_UNITS[q], by, None, [], **common) for q in quantities]
            continue
        placements = []
        for _ in range(bench.repeats):
            launch(kernel, grid, PLACEMENT_THREADS, smem, PLACEMENT_SPIN_NS, table)
            t = table.copy_to_host()
            placements.append(placement(t[:, SMID], t[:, NS_START], t[:, NS_END], k))
            if len(placements) == 1:
                first, ranks, t0 = set(placements[0].first_wave), start_ranks(t[:, NS_START]), t[:, NS_START].min()
                raw += [{"blocks_per_sm": k, "block": b, "smid": int(t[b, SMID]), "start_rank": int(ranks[b]),
                         "start_ns": int(t[b, NS_START] - t0), "end_ns": int(t[b, NS_END] - t0),
                         "first_wave": int(b in first), "smem_bytes": smem} for b in range(grid)]
        first = placements[0]
        same = sum(p.groups == first.groups for p in placements)
        values = {
            "placement_first_wave_blocks": (len(first.first_wave),
                                            f"expected {k} x {bench.sm_count} SMs = {k * bench.sm_count}"),
            "placement_blocks_per_sm": (first.resident[1],
                                        f"first-wave blocks an SM: {first.resident[0]} to {first.resident[1]}"),
            "placement_in_order": (int(first.in_order), "1: the first wave is blocks 0 .. k x SMs - 1"),
            "placement_coresident_stride": (first.stride, first.describe()),
            "placement_repeatable": (int(same == len(placements)),
                                     f"the same first-wave groups in {same} of {len(placements)} launches"),
        }
        for q in quantities:
            value, detail = values[q]
            row = bench.measurement(q, PLACEMENT_UNITS[q], f"{by}, {smem // 1024} KB dynamic shared memory", None,
                                    [0 if value is None else value], detail=detail, **common)
            rows.append(row if value is not None else replace(row, value=None, note="no co-resident blocks"))
    return rows, raw


#: The rate measurements, in the order the experiment runs them (placement apart: it has raw rows).
def launch_intervals(smid: np.ndarray, ns_start: np.ndarray, resident: int) -> list[float]:
    """Per SM, the ns between consecutive block starts after its first ``resident`` blocks (the
    blocks that start as others end), all SMs' together."""
    out: list[float] = []
    for sm in np.unique(smid):
        starts = np.sort(np.asarray(ns_start)[np.asarray(smid) == sm])[resident:]
        out += [float(x) for x in np.diff(starts)]
    return out


def measure_block_launch(bench: Bench) -> list[Measurement]:
    """How fast an SM starts blocks that do (almost) nothing: ``LAUNCH_BLOCKS`` blocks an SM of
    ``placement``'s kernel without its spin, ``PLACEMENT_THREADS`` threads (so 2048 / that many
    resident an SM); per repeat, the median interval between consecutive starts of an SM's
    blocks past its first wave (``block_launch_interval_ns``), and the median time from a
    block's first mark to its last (``block_life_ns``). What the row kernels' time, thousands of
    short blocks, is made of beside their bytes (README, the cost model's per-launch errors)."""
    kernel = placement_kernel()
    threads = bench.threads(PLACEMENT_THREADS // WARP)
    grid = LAUNCH_BLOCKS * bench.sm_count
    resident = min(2048 // threads, 32)
    table = bench.table(grid)
    by = (f"%smid and %globaltimer of every block of {LAUNCH_BLOCKS} an SM, {threads} threads, no "
          "work: consecutive starts on an SM past its first wave, median")
    common = dict(blocks_per_sm=resident, warps_per_sm=resident * threads // WARP)
    if bench.simulated:
        launch(kernel, grid, threads, 0, 0, table)
        return [bench.measurement("block_launch_interval_ns", "ns", by, None, [], **common),
                bench.measurement("block_life_ns", "ns", by, None, [], **common)]
    intervals, lives = [], []
    for _ in range(bench.repeats):
        launch(kernel, grid, threads, 0, 0, table)
        t = table.copy_to_host()
        gaps = launch_intervals(t[:, SMID], t[:, NS_START], resident)
        if not gaps:
            return [Measurement(q, None, "ns", by, note="no SM started a block past its first wave", **common)
                    for q in ("block_launch_interval_ns", "block_life_ns")]
        intervals.append(float(np.median(gaps)))
        lives.append(float(np.median(t[:, NS_END] - t[:, NS_START])))
    return [bench.measurement("block_launch_interval_ns", "ns", by, None, intervals, **common),
            bench.measurement("block_life_ns", "ns", by, None, lives, **common)]


MEASUREMENTS = (measure_device, measure_clock, measure_mma, measure_mma_half, measure_mma_lds, measure_mma_beside, measure_mio_burst, measure_pipes, measure_shared,
                measure_chase, measure_memory_latency, measure_global, measure_barrier, measure_launch,
                measure_block_launch)
