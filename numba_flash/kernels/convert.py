"""Elementwise conversion between float32 and a half format (fp16, bf16): how the backward
takes half-precision inputs until it has kernels of its own in those formats (the gradients of
fp32 kernels on the inputs' exact fp32 values, rounded to the format once at the end)."""
from __future__ import annotations

from numba import cuda

from ..kernel_cache import kernel_factory
from .half import half_ops

VERSION = 1


@kernel_factory
def make_convert(dtype: str, widen: bool):
    """Kernel ``(src, dst, n)`` on flat (1-D) arrays of n elements, grid-stride: ``widen``:
    dst[i] (float32) = the ``dtype`` value whose uint16 bits are src[i], exactly; else dst[i]
    (uint16) = the bits of float32 src[i] rounded to ``dtype`` (to nearest even)."""
    h = half_ops(dtype)
    from_half, to_half = h.from_half, h.to_half

    @cuda.jit
    def convert(src, dst, n):
        for i in range(cuda.grid(1), n, cuda.gridsize(1)):
            dst[i] = from_half(src[i]) if widen else to_half(src[i])

    return convert
