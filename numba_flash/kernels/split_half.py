"""fp32 tensors as pairs of fp16 parts, for fp32 attention on the fp16 tensor cores (three fp16
products a product; Ootomo & Yokota 2022 split fp32 the same way for matrix products).

An fp32 x of a head is scaled by a power of two s (exact), so that the head's largest |x| lands
in [2^14, 2^15); then s x = hi + lo with hi = s x rounded to 11 significant bits (fp16's) and
lo = s x - hi (exact in fp32), rounded to fp16. hi + lo is within 2^-22 |s x| of s x wherever
lo is a normal fp16 (|s x| >= 2^-3, i.e. down to 2^-17 of the head's largest), and within
2^-25 of it (absolute, below 2^-39 of the largest) elsewhere. A product a b is then
hi_a hi_b + hi_a lo_b + lo_a hi_b (the dropped lo_a lo_b is 2^-22 of it) -- three m16n8k16 mma
on fp16 operands with fp32 sums, which issue at the rate of one TF32 m16n8k8 each, so the
three cover twice the depth of 3xTF32's three.

Two kernels prepare q (B*H, N_q, d), k and v (B*H_kv, N_k, d), each launched once for all three
(grid y: the H q heads, then the H_kv k heads, then the H_kv v heads; 3 heads "y" in all):
    head_amax   partial[y, x] = max |value| over block x's share of head y (GX blocks a head;
                no atomics, nothing to zero first)
    split_half  out[y, n] = (hi(s_y x[n, :]), zeros to D16, lo(s_y x[n, :]), zeros to D16):
                rows of 2 D16 fp16 bits (D16 = d rounded up to 16), the two parts where the
                fp16 kernel's tiles take them (kernels/flash_forward_half, ``dtype="float32"``)

``head_scale.scale_of(partial, y)`` is s_y, shared with the attention kernel that undoes it.
NaN values stay NaN (and are left out of the maxima); infinite values have no fp16 part: a head
holding one is not usable here (the caller must not take this path for non-finite inputs).
"""
from __future__ import annotations

from numba import cuda, float32

from ..kernel_cache import kernel_factory
from .half import half_ops
from .head_scale import GX, scale_of
from .mma import warp_ops
from .unroll import static_range, unrolled

VERSION = 5
# Versions (ncu's kernel time at (B, H, N, d) = (2, 16, 2048, 64), q, k, v: 50.3 MB; the model's
# bandwidth bound there, H200: head_amax 12.0 us, split_half 19.4 us):
#     v1  split_half a thread a column pair (four 2-byte stores: L2 received 2.00x its sectors),
#         a load at a time: H100 (2026-12-06) head_amax 35.7 us, split_half 49.2 us.
#     v2  split_half a thread a column (whole-sector stores: L2 received the modelled 50.33 MB);
#         head_amax's loop unrolled by 4: H200 (2026-12-06) head_amax 47.4 us, split_half 60.4 us:
#         latency-bound, a DRAM latency a load.
#     v3  LOADS loads a thread in flight before any is used, both kernels: not timed alone.
#     v4  head_amax's block maximum by a tree in shared memory, 8 steps at 256 threads (LOADS 8; v1-v3:
#         thread 0 read the 255 other threads' maxima one after another): H100 (2026-12-06)
#         head_amax 25.5 us (v1 35.7), smem wavefronts 71.5 k (model 69.1 k); but split_half
#         (v3's) 73.6 us: 70 registers, 3 blocks an SM, 1.94 waves, 1.4x v1's instructions
#         (a division and two index products an element).
#     v5  split_half a thread a column down the rows (no division; the row offsets of a step
#         one stride apart), threads a block a multiple of D16; LOADS 4 (30-31 registers, both
#         kernels; 8 took 47-70; chosen for registers, other LOADS not timed by ncu): H100
#         (2026-12-06) head_amax 23.2 us, split_half 45.4 us (v1 35.7 / 49.2 on the same card;
#         faster than v1 at all 8 held-out shapes of experiments.levels.FP16X3, head_amax by
#         14-50 %, split_half by 7-25 %); still 1.5-1.8x the H100's bandwidth bound.

#: Elements a thread loads before it uses any (the kernels' ``loads``): the loads of a step are
#: in flight together. One at a time (v1, v2), a thread waited a DRAM latency per element:
#: head_amax at (2, 16, 2048, 64) took 47 us for 50 MB, 64 x 0.74 us (H200, 2026-12-06, ncu).
#: 4: 31 registers a thread, every split_half block of that shape resident at once (8 took 54).
LOADS = 4


@cuda.jit(device=True)
def _head(y, q, k, v, n_q, n_k, heads_q, heads_kv):
    """Head y's tensor, first row and rows (y: q heads, then k heads, then v heads)."""
    if y < heads_q:
        return q, y * n_q, n_q
    if y < heads_q + heads_kv:
        return k, (y - heads_q) * n_k, n_k
    return v, (y - heads_q - heads_kv) * n_k, n_k


@kernel_factory
def make_head_amax(threads: int, loads: int = LOADS):
    """Kernel ``(q, k, v, partial, n_q, n_k, d, heads_q, heads_kv)``: flat float32 q
    (heads_q, n_q, d), k, v (heads_kv, n_k, d); partial float32 (heads_q + 2 heads_kv, GX)
    (flat). Grid (GX, heads_q + 2 heads_kv), ``threads`` threads; a thread reads its share
    ``loads`` elements a step; the block's maximum by a tree in shared memory (``threads`` a
    power of two)."""
    T = threads
    if T & (T - 1):
        raise ValueError(f"head_amax: threads must be a power of two, got {T}")

    def head_amax(q, k, v, partial, n_q, n_k, d, heads_q, heads_kv):
        best = cuda.shared.array(T, float32)     # SRAM: each thread's max, then pairs' maxima
        got = cuda.local.array(loads, float32)   # registers (unrolled: constant indices)
        y, tid = cuda.blockIdx.y, cuda.threadIdx.x
        x, row0, rows = _head(y, q, k, v, n_q, n_k, heads_q, heads_kv)
        n, step = rows * d, GX * T
        m = float32(0.0)
        for first in range(cuda.blockIdx.x * T + tid, n, loads * step):
            for u in static_range(loads):        # every load issued before any max waits
                e = first + u * step
                got[u] = abs(x[row0 * d + e]) if e < n else float32(0.0)
            for u in static_range(loads):
                if got[u] > m:                   # (a NaN is left out)
                    m = got[u]
        best[tid] = m
        half = T // 2
        while half > 0:
            cuda.syncthreads()                   # barrier: the level above is in SRAM
            if tid < half:                       # (maxima, never NaN: the same count each time)
                best[tid] = max(best[tid], best[tid + half])
            half //= 2
        if tid == 0:
            partial[y * GX + cuda.blockIdx.x] = best[0]

    return cuda.jit(unrolled(head_amax))


@kernel_factory
def make_split_half(d: int, threads: int, loads: int = LOADS):
    """Kernel ``(q, k, v, partial, qs, ks, vs, n_q, n_k, heads_q, heads_kv)``: q, k, v, partial
    as ``make_head_amax``'s; qs (heads_q, n_q, 2 D16), ks, vs (heads_kv, n_k, 2 D16) flat uint16
    (a row: D16 hi parts, then D16 lo parts, as fp16 bits; zero padded). ``threads`` a block,
    a multiple of D16 (``simulator.fp16x3.split_threads``): R = threads / D16 rows a block
    step, a thread a column all the way down its rows (a warp's loads and its two stores each
    fill whole sectors), ``loads`` rows in flight a step; grid-stride over the head's rows:
    any grid (x, heads_q + 2 heads_kv)."""
    D16 = -(-d // 16) * 16
    if threads % D16:
        raise ValueError(f"split_half: threads ({threads}) must be a multiple of D16 ({D16})")
    R = threads // D16
    to_half = half_ops("float16").to_half
    split_finite = warp_ops().split_finite

    def split_half(q, k, v, partial, qs, ks, vs, n_q, n_k, heads_q, heads_kv):
        got = cuda.local.array(loads, float32)   # registers (unrolled: constant indices)
        y, tid = cuda.blockIdx.y, cuda.threadIdx.x
        x, row0, rows = _head(y, q, k, v, n_q, n_k, heads_q, heads_kv)
        out = qs if y < heads_q else (ks if y < heads_q + heads_kv else vs)
        s = scale_of(partial, y)
        c = tid % D16                            # the thread's column, in every row it takes
        stride = cuda.gridDim.x * R              # rows from one of the thread's to the next
        for first in range(cuda.blockIdx.x * R + tid // D16, rows, loads * stride):
            for u in static_range(loads):        # every load issued before any store
                r = first + u * stride
                got[u] = x[(row0 + r) * d + c] * s if r < rows and c < d else float32(0.0)
            for u in static_range(loads):
                r = first + u * stride
                if r < rows:
                    at = (row0 + r) * 2 * D16 + c
                    hi, lo = split_finite(got[u])   # hi: 11 significant bits, lo = got - hi exactly
                    out[at] = to_half(hi)        # exact (|hi| <= 2^15)
                    out[at + D16] = to_half(lo)  # lo rounded to fp16

    return cuda.jit(unrolled(split_half))
