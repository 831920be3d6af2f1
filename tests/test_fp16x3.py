"""fp32 attention from three fp16 products (``algorithm="fa2_fp16x3"``: numba_flash/fp16x3.py,
kernels/split_half.py, kernels/flash_forward_half.py with dtype "float32") under the CUDA
simulator: the parts and scales exactly as documented, o and lse at fp32 level against float64
at awkward shapes (the fp32 tests' tolerances), every "fa2" option, bad input refused."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numba_flash as nf
from numba_flash import fp16x3, reference as ref
from numba_flash.kernels.split_half import GX

from .helpers import assert_close, assert_lse_close

OUT_TOL = 1e-5


def inputs(seed, B, H, n_q, n_k, d, H_kv=None, logit_scale=1.0):
    rng = np.random.default_rng(seed)
    q = (logit_scale * rng.standard_normal((B, H, n_q, d))).astype(np.float32)
    k, v = (rng.standard_normal((B, H_kv or H, n_k, d)).astype(np.float32) for _ in range(2))
    return q, k, v


def check(q, k, v, tiling=None, **options):
    o_ref, lse_ref = ref.attention_forward(*(x.astype(np.float64) for x in (q, k, v)), **options)
    with nf.poison_outputs():
        o, lse = nf.flash_attention(q, k, v, algorithm="fa2_fp16x3", return_lse=True, tiling=tiling,
                                    **options)
    assert o.dtype == np.float32 and o.shape == q.shape and lse.shape == q.shape[:3]
    assert_close(o, o_ref, OUT_TOL)
    assert_lse_close(lse, lse_ref, OUT_TOL)
    return o, lse


@pytest.mark.parametrize("B,H,n_q,n_k,d,causal,tiling", [
    (1, 2, 1, 17, 8, False, None),                # one query
    (1, 2, 17, 1, 24, True, None),                # one key; bottom-right: rows that see none
    (1, 1, 40, 23, 59, True, nf.Tiling(32, 16)),  # odd d, N_q > N_k causal
    (1, 1, 23, 40, 40, True, nf.Tiling(16, 32)),  # N_q < N_k causal, 16-row warps
    (1, 1, 33, 33, 80, False, nf.Tiling(64, 16)), # two row tiles a warp, ragged rows
    (1, 1, 45, 33, 72, True, nf.Tiling(32, 16, warp_rows=16)),  # a warp a 16-row tile, Br = 32
])
def test_forward_awkward_shapes(B, H, n_q, n_k, d, causal, tiling):
    check(*inputs(0, B, H, n_q, n_k, d), causal=causal, tiling=tiling)


def test_large_logits_and_scales_far_from_one():
    """Logits x30; heads of very different magnitudes (each head's own power of two), down to
    q and k both tiny (scores that underflow: masked ones must stay -inf, not NaN) and up to v
    near fp32's largest (the scale's clamps)."""
    q, k, v = inputs(1, 1, 2, 24, 37, 16, logit_scale=30.0)
    check(q, k, v)
    q[0, 1] *= 1e-6
    k[0, 0] *= 3e4
    v[0, 1] *= 1e-20
    v[0, 0] *= 1e20
    check(q, k, v)
    q, k, v = inputs(2, 1, 2, 20, 20, 16)
    q[0, 0] *= 1e-20
    k[0, 0] *= 1e-20
    v[0, 1] *= 2.0**117
    v[0, 0] *= 1e-38
    check(q, k, v, causal=True)
    check(q, k, v)


def test_window_gqa_and_block_mask():
    q, k, v = inputs(2, 1, 2, 24, 24, 16, H_kv=1)
    check(q, k, v, window=(5, 3))
    mask = np.array([[True, False], [True, True]])
    check(q, k, v, causal=True, block_mask=mask, block_size=(16, 16))


@pytest.mark.parametrize("p", [0.2, 0.6])   # (0.6: kept P / (1 - p) past 2 x P)
def test_dropout_matches_the_reference_with_its_mask(p):
    q, k, v = inputs(3, 1, 2, 32, 32, 16)
    with nf.poison_outputs():
        o, keep = nf.flash_attention(q, k, v, algorithm="fa2_fp16x3", causal=True, dropout_p=p,
                                     dropout_seed=7, return_dropout_mask=True, tiling=nf.Tiling(16, 16))
        o2, keep2 = nf.flash_attention(q, k, v, causal=True, dropout_p=p, dropout_seed=7,
                                       return_dropout_mask=True, tiling=nf.Tiling(16, 16))
    assert np.array_equal(keep, keep2)
    o_ref, _ = ref.attention_forward(*(x.astype(np.float64) for x in (q, k, v)), causal=True,
                                     dropout=ref.dropout_factors(keep, p))
    assert_close(o, o_ref, OUT_TOL)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_q=st.integers(1, 33), n_k=st.integers(1, 33), d=st.sampled_from([8, 24, 33, 40]),
       causal=st.booleans(), seed=st.integers(0, 2**16))
def test_forward_random_shapes(n_q, n_k, d, causal, seed):
    check(*inputs(seed, 1, 1, n_q, n_k, d), causal=causal)


def test_parts_and_scales():
    """split_half's rows: hi + lo = s x to 2^-21 |s x| (plus fp16's smallest step, 2^-24, where
    lo is subnormal), s a power of two that puts the head's largest |x| in [2^14, 2^15) (or
    the clamp: 2^126 for a head of zeros), zero padding; head_amax's partial maxima."""
    from numba import cuda
    from numba_flash.kernels.split_half import make_head_amax, make_split_half
    rng = np.random.default_rng(4)
    n, d = 5, 24
    heads = [rng.standard_normal((n, d)).astype(np.float32) * f for f in (1.0, 3e-30, 7e37)]
    heads.append(np.zeros((n, d), np.float32))
    q, k, v = (cuda.to_device(np.concatenate([h.reshape(-1) for h in hs]))
               for hs in (heads[:2], heads[2:3], heads[3:]))
    partial = cuda.to_device(np.full(4 * GX, np.nan, np.float32))
    parts = [cuda.to_device(np.full(m * n * 64, 0xFFFF, np.uint16)) for m in (2, 1, 1)]
    make_head_amax(32)[(GX, 4), 32](q, k, v, partial, n, n, d, 2, 1)
    make_split_half(d, 32)[(2, 4), 32](q, k, v, partial, *parts, n, n, 2, 1)
    partial = partial.copy_to_host().reshape(4, GX)
    rows = np.concatenate([p.copy_to_host() for p in parts]).view(np.float16).astype(np.float64)
    rows = rows.reshape(4, n, 2, 32)
    assert (rows[:, :, :, d:] == 0).all()
    for y, x in enumerate(heads):
        amax = np.abs(x).max()
        assert partial[y].max() == amax
        sx = rows[y, :, 0, :d] + rows[y, :, 1, :d]
        if amax == 0:
            assert (sx == 0).all()
            continue
        estimate = np.abs(sx).max() / amax               # the kernel's own scale, to rounding
        s = 2.0 ** round(math.log2(estimate))
        assert abs(estimate / s - 1) < 2**-20
        assert 2**14 <= amax * s < 2**15
        err = np.abs(sx - x.astype(np.float64) * s)
        assert (err <= 2**-21 * np.abs(x * s) + 2**-24).all(), err.max()


def test_head_amax_over_several_warps_leaves_nan_out():
    """Partial maxima of blocks of 64 and 128 threads (the tree crosses warps), a NaN in the
    head left out, rows that do not fill the last load step."""
    from numba import cuda
    from numba_flash.kernels.split_half import make_head_amax
    rng = np.random.default_rng(7)
    n, d = 33, 8
    heads = [rng.standard_normal(n * d).astype(np.float32) for _ in range(3)]
    heads[1][5] = np.nan
    heads[2][-1] = -40.0                                  # the very last element
    q, k, v = (cuda.to_device(h) for h in heads)
    for threads in (64, 128):
        partial = cuda.to_device(np.full(3 * GX, np.nan, np.float32))
        make_head_amax(threads)[(GX, 3), threads](q, k, v, partial, n, n, d, 1, 1)
        got = partial.copy_to_host().reshape(3, GX).max(axis=1)
        assert got.tolist() == [np.nanmax(np.abs(h)) for h in heads]


def test_half_inputs_are_refused():
    q = np.zeros((1, 1, 4, 8), np.float16)
    with pytest.raises(ValueError, match="fa2_fp16x3.*float32"):
        nf.flash_attention(q, q, q, algorithm="fa2_fp16x3")
