"""HBM -> SRAM tile copies of the fp16 / bf16 kernels (flash_forward_half, flash_backward_half).

A tile is ``rows_max`` rows of a flat row-major (rows, d) tensor of 16-bit elements, stored in a
uint16 shared array at row stride ``Tiling.half_stride(d)`` and zero-padded to
``Tiling.half_depth(d)`` columns and ``rows_max`` rows: padding is written as zeros, never read
from HBM. With ``vector`` (d % 8 == 0 and the tensor 16-byte aligned) each thread moves
16-byte chunks by ``cp.async`` (the caller commits and waits); otherwise elements through
registers.
"""
from __future__ import annotations

from numba import cuda, uint16, uint64

from .half import half_ops
from .unroll import static_range, unrolled


def make_tile_copy(rows_max: int, threads: int, d: int, depth: int, stride: int, vector: bool,
                   dtype: str):
    """Device function ``copy(smem, at0, src, row0, nrows, tid)``: tile[r, c] = src[(row0 + r) d
    + c] for r < nrows, c < d, zero for the other rows < ``rows_max`` and columns < ``depth``,
    the tile at element offset ``at0`` of ``smem`` with row stride ``stride``; ``tid`` < ``threads``
    is the calling thread, every thread of the block takes part."""
    chunks = depth // 8                 # 16-byte chunks of a tile row
    per = -(-rows_max * chunks // threads)
    cp_async16 = half_ops(dtype).cp_async16

    def copy(smem, at0, src, row0, nrows, tid):
        for f in static_range(per):
            idx = tid + threads * f
            r = idx // chunks
            c = idx - r * chunks
            if r < rows_max:
                at = at0 + uint64(r * stride + 8 * c)
                inside = r < nrows and 8 * c < d
                if vector:
                    src_at = uint64((row0 + r) * d + 8 * c) if inside else uint64(row0 * d)
                    cp_async16(smem, at, src, src_at, 16 if inside else 0)
                else:
                    for e in static_range(8):
                        x = uint16(0)
                        if inside and 8 * c + e < d:
                            x = src[uint64((row0 + r) * d + 8 * c + e)]
                        smem[at + uint64(e)] = x
    return cuda.jit(device=True)(unrolled(copy))
