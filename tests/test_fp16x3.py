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
from numba_flash.kernels.split_half import GX, MAX_SHIFT, TOP_EXPONENT

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
])
def test_forward_awkward_shapes(B, H, n_q, n_k, d, causal, tiling):
    check(*inputs(0, B, H, n_q, n_k, d), causal=causal, tiling=tiling)


def test_large_logits_and_scales_far_from_one():
    """Logits x30; heads of very different magnitudes (each head's own power of two)."""
    q, k, v = inputs(1, 1, 2, 24, 37, 16, logit_scale=30.0)
    check(q, k, v)
    q[0, 1] *= 1e-6
    k[0, 0] *= 3e4
    v[0, 1] *= 1e-20
    v[0, 0] *= 1e20
    check(q, k, v)


def test_window_gqa_and_block_mask():
    q, k, v = inputs(2, 1, 2, 24, 24, 16, H_kv=1)
    check(q, k, v, window=(5, 3))
    mask = np.array([[True, False], [True, True]])
    check(q, k, v, causal=True, block_mask=mask, block_size=(16, 16))


def test_dropout_matches_the_reference_with_its_mask():
    q, k, v = inputs(3, 1, 2, 32, 32, 16)
    with nf.poison_outputs():
        o, keep = nf.flash_attention(q, k, v, algorithm="fa2_fp16x3", causal=True, dropout_p=0.2,
                                     dropout_seed=7, return_dropout_mask=True, tiling=nf.Tiling(16, 16))
        o2, keep2 = nf.flash_attention(q, k, v, causal=True, dropout_p=0.2, dropout_seed=7,
                                       return_dropout_mask=True, tiling=nf.Tiling(16, 16))
    assert np.array_equal(keep, keep2)
    o_ref, _ = ref.attention_forward(*(x.astype(np.float64) for x in (q, k, v)), causal=True,
                                     dropout=keep / 0.8)
    assert_close(o, o_ref, OUT_TOL)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_q=st.integers(1, 33), n_k=st.integers(1, 33), d=st.sampled_from([8, 24, 33, 40]),
       causal=st.booleans(), seed=st.integers(0, 2**16))
def test_forward_random_shapes(n_q, n_k, d, causal, seed):
    check(*inputs(seed, 1, 1, n_q, n_k, d), causal=causal)


def test_parts_and_scales():
    """split_half's rows: hi + lo within 2^-22 of s x (s = 2^(15 - e) for a head whose largest
    |x| is in [2^(e-1), 2^e)), zero padding, the partial maxima of each head."""
    from numba import cuda
    from numba_flash.kernels.split_half import make_head_amax, make_split_half
    rng = np.random.default_rng(4)
    n, d = 5, 24
    heads = [rng.standard_normal((n, d)).astype(np.float32) * f for f in (1.0, 3e-20, 7e25)]
    q, k, v = (cuda.to_device(h.reshape(-1)) for h in heads)
    partial = cuda.to_device(np.full(3 * GX, np.nan, np.float32))
    parts = [cuda.to_device(np.full(n * 64, 0xFFFF, np.uint16)) for _ in range(3)]
    make_head_amax(32)[(GX, 3), 32](q, k, v, partial, n, n, d, 1, 1)
    make_split_half(d)[(2, 3), 32](q, k, v, partial, *parts, n, n, 1, 1)
    partial = partial.copy_to_host().reshape(3, GX)
    for y, (x, part) in enumerate(zip(heads, parts)):
        amax = np.abs(x).max()
        assert partial[y].max() == amax
        e = math.frexp(float(amax))[1]
        s = np.float32(2.0 ** min(max(TOP_EXPONENT + 1 - e, -MAX_SHIFT), MAX_SHIFT))
        rows = part.copy_to_host().view(np.float16).astype(np.float64).reshape(n, 2, 32)
        assert (rows[:, :, d:] == 0).all()
        assert 2**14 <= amax * s < 2**15
        np.testing.assert_allclose(rows[:, 0, :d] + rows[:, 1, :d], x * np.float64(s),
                                   rtol=0, atol=2**-21 * 2**15)


def test_half_inputs_are_refused():
    q = np.zeros((1, 1, 4, 8), np.float16)
    with pytest.raises(ValueError, match="fa2_fp16x3.*float32"):
        nf.flash_attention(q, q, q, algorithm="fa2_fp16x3")
