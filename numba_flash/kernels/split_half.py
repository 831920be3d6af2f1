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

``scale_of(partial, y)`` is s_y, shared with the attention kernel that undoes it. NaN values
stay NaN (and are left out of the maxima); infinite values have no fp16 part: a head holding
one is not usable here (the caller must not take this path for non-finite inputs).
"""
from __future__ import annotations

import math

from numba import cuda, float32

from ..kernel_cache import kernel_factory
from .half import half_ops
from .mma import warp_ops

VERSION = 1

#: |s x| < 2^15 for every x of a head: fp16 (largest finite 65504) holds hi with room to spare.
TOP_EXPONENT = 14
#: Scales stay within 2^-113 .. 2^126, so that s and 1 / s are normal fp32: 2^-113 still brings
#: the largest finite fp32 (< 2^128) below 2^15, 2^126 lifts heads down to 2^-111 to 2^15.
MIN_SHIFT, MAX_SHIFT = -113, 126


@cuda.jit(device=True)
def head_scale(amax):
    """The power of two s (float32) with amax s in [2^14, 2^15) for a finite amax >= 2^-111;
    2^126 below (amax = 0 included)."""
    _, e = math.frexp(amax)                      # amax in [2^(e - 1), 2^e)
    shift = min(max(TOP_EXPONENT + 1 - e, MIN_SHIFT), MAX_SHIFT)
    return math.ldexp(float32(1.0), int(shift))


#: Blocks of head_amax a head (the partial maxima each reader takes the max of).
GX = 16


@cuda.jit(device=True)
def scale_of(partial, y):
    """s_y: ``head_scale`` of the largest of head y's GX partial maxima."""
    amax = float32(0.0)
    for x in range(GX):
        a = partial[y * GX + x]
        if a > amax:
            amax = a
    return head_scale(amax)


@cuda.jit(device=True)
def _head(y, q, k, v, n_q, n_k, heads_q, heads_kv):
    """Head y's tensor, first row and rows (y: q heads, then k heads, then v heads)."""
    if y < heads_q:
        return q, y * n_q, n_q
    if y < heads_q + heads_kv:
        return k, (y - heads_q) * n_k, n_k
    return v, (y - heads_q - heads_kv) * n_k, n_k


@kernel_factory
def make_head_amax(threads: int):
    """Kernel ``(q, k, v, partial, n_q, n_k, d, heads_q, heads_kv)``: flat float32 q
    (heads_q, n_q, d), k, v (heads_kv, n_k, d); partial float32 (heads_q + 2 heads_kv, GX)
    (flat). Grid (GX, heads_q + 2 heads_kv), ``threads`` threads."""
    T = threads

    @cuda.jit
    def head_amax(q, k, v, partial, n_q, n_k, d, heads_q, heads_kv):
        best = cuda.shared.array(T, float32)     # SRAM: each thread's max, then the block's
        y, tid = cuda.blockIdx.y, cuda.threadIdx.x
        x, row0, rows = _head(y, q, k, v, n_q, n_k, heads_q, heads_kv)
        m = float32(0.0)
        for e in range(cuda.blockIdx.x * T + tid, rows * d, GX * T):
            a = abs(x[row0 * d + e])
            if a > m:                            # (a NaN is left out)
                m = a
        best[tid] = m
        cuda.syncthreads()                       # barrier: every thread's max is in SRAM
        if tid == 0:
            for t in range(1, T):
                if best[t] > m:
                    m = best[t]
            partial[y * GX + cuda.blockIdx.x] = m

    return head_amax


@kernel_factory
def make_split_half(d: int):
    """Kernel ``(q, k, v, partial, qs, ks, vs, n_q, n_k, heads_q, heads_kv)``: q, k, v, partial
    as ``make_head_amax``'s; qs (heads_q, n_q, 2 D16), ks, vs (heads_kv, n_k, 2 D16) flat uint16
    (a row: D16 hi parts, then D16 lo parts, as fp16 bits; zero padded). Grid-stride over pairs
    of columns: any grid (x, heads_q + 2 heads_kv)."""
    D16 = -(-d // 16) * 16
    PAIRS = D16 // 2
    to_half = half_ops("float16").to_half
    split_finite = warp_ops().split_finite

    @cuda.jit
    def split_half(q, k, v, partial, qs, ks, vs, n_q, n_k, heads_q, heads_kv):
        y = cuda.blockIdx.y
        x, row0, rows = _head(y, q, k, v, n_q, n_k, heads_q, heads_kv)
        out = qs if y < heads_q else (ks if y < heads_q + heads_kv else vs)
        s = scale_of(partial, y)
        for p in range(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, rows * PAIRS,
                       cuda.gridDim.x * cuda.blockDim.x):
            r = p // PAIRS
            c = 2 * (p - r * PAIRS)
            at = (row0 + r) * 2 * D16 + c
            for e in range(2):
                value = x[(row0 + r) * d + c + e] * s if c + e < d else float32(0.0)
                hi, lo = split_finite(value)     # hi: 11 significant bits, lo = value - hi exactly
                out[at + e] = to_half(hi)        # exact (|hi| <= 2^15)
                out[at + D16 + e] = to_half(lo)  # lo rounded to fp16

    return split_half
