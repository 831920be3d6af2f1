"""Sliding windows (band masks, flash-attention's ``window_size``) and grouped K/V heads (GQA /
MQA) on the "fa2" kernels, under the CUDA simulator: forward and backward against a float64
reference that applies the same band and head grouping, held to flash-attention's rule (error
at most 2x (outputs) / 3x (gradients) that of a plain same-precision implementation) in fp32,
fp16 and bf16, at awkward shapes; blocks outside the band never loaded; what the API says of
bad window and head arguments."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numba_flash as nf
from numba_flash.instrument import count_traffic

from .helpers import ALL_FORMATS, band_inputs as inputs, check_band as check

@pytest.mark.parametrize("fmt", ALL_FORMATS)
@pytest.mark.parametrize("n_q,n_k,d,causal,window,diagonal", [
    (40, 40, 24, False, (5, 3), None),       # a band both sides, several blocks skipped
    (17, 40, 8, False, (7, -1), None),       # left side only, bottom-right diagonal
    (40, 23, 40, True, (6, 0), None),        # causal + window, N_q > N_k: rows that see nothing
    (23, 40, 16, False, (-1, 2), -3),        # right side only, moved diagonal
    (1, 17, 8, False, (0, 0), None),         # one query, one key in its band
])
def test_window_within_the_rule(fmt, n_q, n_k, d, causal, window, diagonal):
    check(fmt, 1, 2, 2, n_q, n_k, d, causal, window, diagonal,
          tiling=nf.Tiling(16, 16), bwd_tiling=nf.Tiling(16, 16))


@pytest.mark.parametrize("fmt", ALL_FORMATS)
@pytest.mark.parametrize("H,H_kv,n_q,n_k,d,causal,window,kv_split", [
    (6, 2, 17, 33, 16, True, None, None),    # GQA, group 3, causal N_q < N_k; split 3 ways
    (6, 2, 17, 33, 16, True, None, 1),       # ... unsplit: a block loops over the group
    (4, 1, 20, 9, 24, False, None, None),    # MQA
    (4, 1, 20, 9, 24, False, None, 2),       # MQA split 2 ways: 2 query heads a block
    (4, 2, 33, 33, 8, False, (4, 4), 1),     # GQA with a window, unsplit
])
def test_grouped_heads_within_the_rule(fmt, H, H_kv, n_q, n_k, d, causal, window, kv_split):
    check(fmt, 2, H, H_kv, n_q, n_k, d, causal, window, kv_split=kv_split,
          tiling=nf.Tiling(16, 16), bwd_tiling=nf.Tiling(16, 16), seed=H * n_q)


def test_window_large_logits():
    check("float16", 1, 1, 1, 24, 37, 16, window=(9, 2), logit_scale=30.0, seed=3,
          tiling=nf.Tiling(16, 16), bwd_tiling=nf.Tiling(16, 16))


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(ALL_FORMATS), n_q=st.integers(1, 40), n_k=st.integers(1, 40),
       d=st.sampled_from([8, 16, 24, 40]), group=st.sampled_from([1, 2, 3]),
       left=st.integers(-1, 24), right=st.integers(-1, 24), causal=st.booleans(),
       diagonal=st.one_of(st.none(), st.integers(-45, 45)), seed=st.integers(0, 2**16))
def test_random_bands(fmt, n_q, n_k, d, group, left, right, causal, diagonal, seed):
    right = min(right, 0) if causal else right
    check(fmt, 1, group, 1, n_q, n_k, d, causal, (left, right), diagonal, seed=seed,
          tiling=nf.Tiling(16, 16), bwd_tiling=nf.Tiling(16, 16), backward=seed % 2 == 0)


def test_window_equals_causal_when_it_is_one():
    """window=(-1, 0) is the causal mask: the same kernels' output, bit for bit."""
    rng = np.random.default_rng(5)
    q, k, v, _ = inputs(rng, "float32", 1, 2, 2, 19, 27, 16)
    a = nf.flash_attention(q, k, v, causal=True, tiling=nf.Tiling(16, 16))
    b = nf.flash_attention(q, k, v, window=(-1, 0), tiling=nf.Tiling(16, 16))
    np.testing.assert_array_equal(a, b)


def test_blocks_outside_the_band_are_not_loaded():
    """A window of 16 keys over 64 x 64 with 16 x 16 tiles: each row block reads at most the 2-3
    key blocks its band touches, not all 4."""
    rng = np.random.default_rng(6)
    q, k, v, _ = inputs(rng, "float32", 1, 1, 1, 64, 64, 8)
    dense = count_traffic(nf.flash_attention, q, k, v, tiling=nf.Tiling(16, 16))
    band = count_traffic(nf.flash_attention, q, k, v, window=(8, 7), tiling=nf.Tiling(16, 16))
    # row block i sees keys [16 i - 8, 16 i + 22]: blocks i-1..i+1, clipped at both ends:
    # 2 + 3 + 3 + 2 block visits against 4 x 4
    for name in ("K", "V"):
        assert band.hbm[name].reads * 16 == dense.hbm[name].reads * 10, name
    assert band.hbm["Q"].reads == dense.hbm["Q"].reads


def test_mqa_backward_sums_over_the_group():
    """With every query head equal, MQA's dk, dv are H times one head's."""
    rng = np.random.default_rng(7)
    q1, k, v, do1 = inputs(rng, "float32", 1, 1, 1, 21, 18, 8)
    q, do = np.repeat(q1, 3, axis=1), np.repeat(do1, 3, axis=1)
    o, lse = nf.flash_attention(q, k, v, return_lse=True, tiling=nf.Tiling(16, 16))
    _, dk, dv = nf.flash_attention_backward(do, q, k, v, o, lse, tiling=nf.Tiling(16, 16))
    o1, lse1 = nf.flash_attention(q1, k, v, return_lse=True, tiling=nf.Tiling(16, 16))
    _, dk1, dv1 = nf.flash_attention_backward(do1, q1, k, v, o1, lse1, tiling=nf.Tiling(16, 16))
    np.testing.assert_allclose(dk, 3 * dk1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dv, 3 * dv1, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(window=(-2, 3)), ValueError, "window"),
    (dict(window=(3, 2, 1)), TypeError, "window"),
    (dict(window=(1.5, 2)), TypeError, r"window\[0\]"),
    (dict(window=(3, 2), causal=True), ValueError, "causal"),
    (dict(window=(3, 2), algorithm="fa1"), ValueError, "algorithm='fa2'"),
    (dict(window=(3, 2), algorithm="fa2_fma"), ValueError, "algorithm='fa2'"),
    (dict(diagonal=2), ValueError, "causal=True or a window"),
])
def test_bad_window_is_refused(kwargs, error, match):
    q = np.zeros((1, 1, 8, 8), np.float32)
    with pytest.raises(error, match=match):
        nf.flash_attention(q, q, q, **kwargs)


def test_bad_grouping_is_refused():
    q = np.zeros((1, 6, 8, 8), np.float32)
    k = np.zeros((1, 4, 8, 8), np.float32)
    with pytest.raises(ValueError, match="multiple"):
        nf.flash_attention(q, k, k)
    k2 = np.zeros((1, 2, 8, 8), np.float32)
    with pytest.raises(ValueError, match="algorithm='fa2'"):
        nf.flash_attention(q, k2, k2, algorithm="fa2_fma")
    with pytest.raises(ValueError, match="equal q's"):
        nf.standard_attention(q, k2, k2)
    o, lse = np.zeros_like(q), np.zeros((1, 6, 8), np.float32)
    with pytest.raises(ValueError, match="deterministic=False"):
        nf.flash_attention_backward(q, q, k2, k2, o, lse, deterministic=True)
    for split in (2, 0, 1.0, True):           # the group is 3
        with pytest.raises(ValueError, match=r"kv_split must be None or a positive divisor .*3 "):
            nf.flash_attention_backward(q, q, k2, k2, o, lse, kv_split=split)


def test_numpy_integer_band_arguments_take_the_automatic_split():
    """MQA (automatic kv_split) with a NumPy-integer diagonal and window: the split's cost model
    takes them as ints, and the gradients equal those of plain ints."""
    rng = np.random.default_rng(3)
    q, do = (rng.standard_normal((1, 2, 12, 8)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((1, 1, 12, 8)).astype(np.float32) for _ in range(2))
    grads = []
    for cast in (int, np.int64):
        band = dict(causal=True, diagonal=cast(0), window=(cast(4), cast(0)))
        o, lse = nf.flash_attention(q, k, v, return_lse=True, **band)
        grads.append(nf.flash_attention_backward(do, q, k, v, o, lse, **band))
    for a, b in zip(*grads):
        np.testing.assert_array_equal(a, b)
