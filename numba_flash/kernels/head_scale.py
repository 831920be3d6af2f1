"""The power-of-two scale of a head that fa2_fp16x3 splits into fp16 parts (kernels/split_half.py
says why), shared by the kernel that splits (split_half) and the attention kernel that undoes it
(flash_forward_half in its fp32 mode). A module of its own, so that the preparing kernels can
change without changing the forward's sources (nor its recorded tables).

``partial`` holds ``GX`` partial maxima of |x| a head (head_amax's); ``scale_of(partial, y)`` is
s_y, a power of two with max |x| s_y in [2^14, 2^15).
"""
from __future__ import annotations

import math

from numba import cuda, float32

#: |s x| < 2^15 for every x of a head: fp16 (largest finite 65504) holds hi with room to spare.
TOP_EXPONENT = 14
#: Scales stay within 2^-113 .. 2^126, so that s and 1 / s are normal fp32: 2^-113 still brings
#: the largest finite fp32 (< 2^128) below 2^15, 2^126 lifts heads down to 2^-111 to 2^15.
MIN_SHIFT, MAX_SHIFT = -113, 126
#: Blocks of head_amax a head (the partial maxima each reader takes the max of).
GX = 16


@cuda.jit(device=True)
def head_scale(amax):
    """The power of two s (float32) with amax s in [2^14, 2^15) for a finite amax >= 2^-111;
    2^126 below (amax = 0 included)."""
    _, e = math.frexp(amax)                      # amax in [2^(e - 1), 2^e)
    shift = min(max(TOP_EXPONENT + 1 - e, MIN_SHIFT), MAX_SHIFT)
    return math.ldexp(float32(1.0), int(shift))


@cuda.jit(device=True)
def scale_of(partial, y):
    """s_y: ``head_scale`` of the largest of head y's GX partial maxima."""
    amax = float32(0.0)
    for x in range(GX):
        a = partial[y * GX + x]
        if a > amax:
            amax = a
    return head_scale(amax)
