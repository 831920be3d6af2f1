"""Warp primitives of the tensor-core kernel (numba_flash.kernels.mma) and static_range.

Under the CUDA simulator these check the emulation against the PTX ISA's fragment layout; on
the GPU (tests/test_gpu.py calls ``check_mma_tile_product``) the same kernel runs the real
``mma.sync``, so both sides are held to one specification.
"""
import numpy as np
import pytest
from numba import cuda, float32

from numba_flash.kernels.mma import TF32_MASK, TF32_MAX, warp_ops
from numba_flash.kernels.unroll import static_range, unrolled


def _tile_product_kernel():
    w = warp_ops()
    split, mma_3xtf32 = w.split, w.mma_3xtf32   # device functions as globals Numba can type

    @cuda.jit
    def kernel(a, b, c):
        """One warp: C (16 x 8) = A (16 x 8) B (8 x 8), fragments as in the PTX ISA."""
        lane = cuda.threadIdx.x
        g, t = lane // 4, lane % 4
        ah0, al0 = split(a[g, t])
        ah1, al1 = split(a[g + 8, t])
        ah2, al2 = split(a[g, t + 4])
        ah3, al3 = split(a[g + 8, t + 4])
        bh0, bl0 = split(b[t, g])
        bh1, bl1 = split(b[t + 4, g])
        zero = float32(0.0)
        c0, c1, c2, c3 = mma_3xtf32(ah0, ah1, ah2, ah3, al0, al1, al2, al3, bh0, bh1, bl0, bl1,
                                    zero, zero, zero, zero)
        c[g, 2 * t], c[g, 2 * t + 1], c[g + 8, 2 * t], c[g + 8, 2 * t + 1] = c0, c1, c2, c3

    return kernel


def check_mma_tile_product(seed=0):
    """C = A B through split + mma_3xtf32 equals the float64 product to fp32 level."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    c = np.full((16, 8), np.nan, np.float32)
    _tile_product_kernel()[1, 32](a, b, c)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert np.all(np.abs(c - exact) <= 4e-6 * scale)   # plain fp32 FFMA: ~8 * 2^-24 ~ 5e-7


def test_mma_tile_product_matches_the_ptx_fragment_layout():
    check_mma_tile_product()


def _plain_product_kernel():
    mma_3xtf32 = warp_ops().mma_3xtf32

    @cuda.jit
    def kernel(a, b, c):
        """C = A B from A and B fragments as they are (lo parts and C zero): one TF32 product."""
        lane = cuda.threadIdx.x
        g, t = lane // 4, lane % 4
        z = float32(0.0)
        c0, c1, c2, c3 = mma_3xtf32(a[g, t], a[g + 8, t], a[g, t + 4], a[g + 8, t + 4], z, z, z, z,
                                    b[t, g], b[t + 4, g], z, z, z, z, z, z)
        c[g, 2 * t], c[g, 2 * t + 1], c[g + 8, 2 * t], c[g + 8, 2 * t + 1] = c0, c1, c2, c3

    return kernel


def check_mma_reads_operands_truncated(seed=0):
    """The mma of fp32 operands equals, bit for bit, the mma of the same operands with their low
    13 bits cleared: the tensor core reads TF32 operands truncated, so split_finite need not
    clear lo's low bits (on the GPU this is the hardware's behaviour; here, the emulation's)."""
    rng = np.random.default_rng(seed)
    kernel = _plain_product_kernel()
    for scale in (1e-3, 1.0, 1e3):
        a = (rng.standard_normal((16, 8)) * scale).astype(np.float32)
        b = rng.standard_normal((8, 8)).astype(np.float32)
        cut = [(x.view(np.uint32) & np.uint32(TF32_MASK)).view(np.float32) for x in (a, b)]
        assert (a != cut[0]).any() and (b != cut[1]).any()   # the low bits are there to ignore
        c_raw, c_cut = np.full((16, 8), np.nan, np.float32), np.full((16, 8), np.nan, np.float32)
        kernel[1, 32](a, b, c_raw)
        kernel[1, 32](cut[0], cut[1], c_cut)
        assert np.array_equal(c_raw.view(np.uint32), c_cut.view(np.uint32))


def test_mma_reads_operands_truncated():
    check_mma_reads_operands_truncated()


@pytest.mark.parametrize("lo_truncated", [False, True])
def test_split_parts_sum_back_as_the_mma_reads_them(lo_truncated):
    split = warp_ops(lo_truncated).split

    @cuda.jit
    def kernel(x, hi, lo):
        i = cuda.threadIdx.x
        hi[i], lo[i] = split(x[i])

    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(28) * 10.0 ** rng.integers(-30, 30, 28),
                        [np.inf, -np.inf, 1.0, 3.0]]).astype(np.float32)
    hi, lo = np.zeros_like(x), np.zeros_like(x)
    kernel[1, x.size](x, hi, lo)
    assert not (hi.view(np.uint32) & 0x1FFF).any()
    finite = np.isfinite(x)
    lo_read = (lo.view(np.uint32) & np.uint32(TF32_MASK)).view(np.float32)   # what the mma reads
    err = np.abs(hi[finite].astype(np.float64) + lo_read[finite] - x[finite])
    assert np.all(err <= 2.0 ** -21 * np.abs(x[finite]))
    if lo_truncated:   # lo is already what the mma reads
        assert np.array_equal(lo, lo_read)
    else:              # lo is exact
        assert np.array_equal(hi[finite].astype(np.float64) + lo[finite], x[finite])
        assert (lo != lo_read).any()
    assert np.array_equal(hi[~finite], np.sign(x[~finite]) * TF32_MAX) and (lo[~finite] == 0).all()


WIDTH = 4


def _nested():
    total = 0
    for i in static_range(3):
        for j in static_range(WIDTH):
            total = total * 10 + i * j
    return total


def test_static_range_unrolls_to_the_same_program():
    assert unrolled(_nested)() == _nested() == 1230246   # module constants as bounds
    n = 4

    def nested(x):
        for i in static_range(n):                         # closure variables as bounds
            x = x * 2 + i
        return x

    assert unrolled(nested)(1) == nested(1) == 27
    assert "static_range" not in str(unrolled(nested).__code__.co_names)


def test_static_range_keeps_python_semantics_around_the_loop():
    def last_and_inner_break():
        found = -1
        for i in static_range(3):
            for j in range(5):         # an ordinary inner loop may break
                if j == i:
                    found = 10 * found + j
                    break
        return i, found                # the variable keeps its last value

    assert unrolled(last_and_inner_break)() == last_and_inner_break() == (2, -988)


def test_static_range_rejects_what_it_cannot_unroll():
    def breaks():
        for i in static_range(2):
            break

    def assigns():
        for i in static_range(2):
            i = 3

    def two_bounds():
        for i in static_range(2, 5):
            pass

    def shadows():
        for n in static_range(2):
            f = lambda n: n * 10   # noqa: E731
        return f

    with pytest.raises(SyntaxError, match="cannot break"):
        unrolled(breaks)
    with pytest.raises(SyntaxError, match="is assigned in its loop"):
        unrolled(assigns)
    with pytest.raises(SyntaxError, match="one bound"):
        unrolled(two_bounds)
    with pytest.raises(SyntaxError, match="cannot hold functions, lambdas"):
        unrolled(shadows)
