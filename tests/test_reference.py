"""The float64 reference against first principles, and the online-softmax recurrence."""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from numba_flash import reference as ref

from .helpers import causal_masks, qkv


def brute_force(q, k, v, causal, scale, diagonal=None, window=None):
    """Attention row by row with Python floats: the definition, nothing vectorised. ``window``:
    (left, right), keys r + diagonal - left .. r + diagonal + right (-1: unbounded); k, v may
    have fewer heads (query head h reads K/V head h // (H / H_kv))."""
    B, H, n_q, d = q.shape
    n_k, group = k.shape[2], H // k.shape[1]
    diagonal = n_k - n_q if diagonal is None else diagonal
    left, right = (-1, -1) if window is None else window
    o = np.zeros((B, H, n_q, d))
    lse = np.full((B, H, n_q), -np.inf)
    for b in range(B):
        for h in range(H):
            kh = h // group
            for r in range(n_q):
                cols = [c for c in range(n_k) if (not causal or c <= r + diagonal)
                        and (right < 0 or c <= r + diagonal + right)
                        and (left < 0 or c >= r + diagonal - left)]
                if not cols:
                    continue
                s = [scale * float(np.dot(q[b, h, r].astype(float), k[b, kh, c].astype(float)))
                     for c in cols]
                m = max(s)
                w = [math.exp(x - m) for x in s]
                total = sum(w)
                lse[b, h, r] = m + math.log(total)
                o[b, h, r] = sum(wi * v[b, kh, c].astype(float) for wi, c in zip(w, cols)) / total
    return o, lse


def test_online_softmax_worked_example():
    # scores 1, 2, 3, 0 in two blocks of two
    m, l, steps = ref.online_softmax([1.0, 2.0, 3.0, 0.0], block_size=2)
    assert steps[0][0] == 2.0 and steps[0][1] == pytest.approx(1 + math.exp(-1))
    assert m == 3.0
    assert l == pytest.approx(math.exp(-2) + math.exp(-1) + 1 + math.exp(-3))
    assert l == pytest.approx(1.553, abs=5e-4)
    scores = np.array([1.0, 2.0, 3.0, 0.0])
    one_shot = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
    np.testing.assert_allclose(np.exp(scores - m) / l, one_shot, rtol=1e-15)


@given(st.lists(st.floats(-50, 50), min_size=1, max_size=40), st.integers(1, 9))
def test_online_softmax_equals_one_shot(scores, block):
    m, l, _ = ref.online_softmax(scores, block)
    s = np.asarray(scores)
    assert m == s.max()
    assert l == pytest.approx(np.exp(s - s.max()).sum(), rel=1e-12)


@pytest.mark.parametrize("n_q,n_k,causal,diagonal", [
    (1, 1, False, None), (5, 7, True, None), (7, 5, True, None), (6, 6, True, None),
    (4, 9, False, None), (5, 7, True, 0), (7, 5, True, 0), (6, 6, True, -2), (6, 4, True, 7),
])
def test_forward_matches_definition(rng, n_q, n_k, causal, diagonal):
    q, k, v, _ = qkv(rng, 2, 1, n_q, n_k, 3)
    o, lse = ref.attention_forward(q, k, v, causal=causal, softmax_scale=0.7, diagonal=diagonal)
    o_bf, lse_bf = brute_force(q, k, v, causal, 0.7, diagonal)
    np.testing.assert_allclose(o, o_bf, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_bf))
    np.testing.assert_allclose(lse[np.isfinite(lse)], lse_bf[np.isfinite(lse_bf)], rtol=1e-12)


def test_causal_mask_is_bottom_right():
    assert ref.causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]
    assert ref.causal_mask(4, 2).tolist() == [[False, False], [False, False], [True, False], [True, True]]


def test_causal_mask_diagonal_is_torch_trils():
    ones = np.ones((3, 5), bool)
    for diagonal in (-4, -1, 0, 2, 6):
        assert (ref.causal_mask(3, 5, diagonal) == np.tril(ones, diagonal)).all()
    assert ref.causal_mask(2, 4, 0).tolist() == [[True, False, False, False], [True, True, False, False]]


@pytest.mark.parametrize("causal,diagonal", [(False, None), (True, None), (True, 0), (True, -1)])
def test_backward_matches_finite_differences(rng, causal, diagonal):
    q, k, v, do = (x.astype(np.float64) for x in qkv(rng, 1, 1, 4, 5, 3))
    mask = dict(causal=causal, diagonal=diagonal)
    dq, dk, dv = ref.attention_backward(do, q, k, v, **mask)
    eps = 1e-6
    for x, grad in ((q, dq), (k, dk), (v, dv)):
        for idx in [(0, 0, 0, 0), (0, 0, x.shape[2] - 1, 2), (0, 0, 1, 1)]:
            old = x[idx]
            x[idx] = old + eps
            up = (ref.attention_forward(q, k, v, **mask)[0] * do).sum()
            x[idx] = old - eps
            down = (ref.attention_forward(q, k, v, **mask)[0] * do).sum()
            x[idx] = old
            assert grad[idx] == pytest.approx((up - down) / (2 * eps), rel=1e-5, abs=1e-8)


@given(n_q=st.integers(1, 12), n_k=st.integers(1, 12), br=st.integers(1, 5), bc=st.integers(1, 5),
       mask=causal_masks(14))
def test_blockwise_equals_one_shot(n_q, n_k, br, bc, mask):
    causal, diagonal = mask
    rng = np.random.default_rng(n_q * 131 + n_k)
    q, k, v, _ = qkv(rng, 1, 2, n_q, n_k, 4)
    o, lse = ref.blockwise_attention_forward(q, k, v, br=br, bc=bc, causal=causal, diagonal=diagonal)
    o_ref, lse_ref = ref.attention_forward(q, k, v, causal=causal, diagonal=diagonal)
    np.testing.assert_allclose(o, o_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_ref))
    np.testing.assert_allclose(lse[np.isfinite(lse)], lse_ref[np.isfinite(lse_ref)], rtol=1e-12)


@pytest.mark.parametrize("n_q,n_k,causal,window,diagonal,heads", [
    (6, 6, False, (1, 1), None, (1, 1)), (5, 8, False, (2, -1), None, (2, 2)),
    (8, 5, True, (2, 0), None, (3, 1)), (6, 7, False, (-1, 0), -2, (4, 2)),
    (7, 7, False, (0, 0), 3, (2, 1)), (4, 9, False, None, None, (6, 3)),
])
def test_window_and_grouped_heads_match_definition(rng, n_q, n_k, causal, window, diagonal, heads):
    H, H_kv = heads
    q = rng.standard_normal((2, H, n_q, 3))
    k, v = rng.standard_normal((2, H_kv, n_k, 3)), rng.standard_normal((2, H_kv, n_k, 3))
    mask = dict(causal=causal, window=window, diagonal=diagonal)
    o, lse = ref.attention_forward(q, k, v, softmax_scale=0.7, **mask)
    o_bf, lse_bf = brute_force(q, k, v, causal, 0.7, diagonal, window)
    np.testing.assert_allclose(o, o_bf, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_bf))
    np.testing.assert_allclose(lse[np.isfinite(lse)], lse_bf[np.isfinite(lse_bf)], rtol=1e-12)


@pytest.mark.parametrize("window,heads", [((1, 2), (1, 1)), ((2, 0), (3, 1)), (None, (4, 2))])
def test_window_and_grouped_backward_match_finite_differences(rng, window, heads):
    H, H_kv = heads
    q, do = rng.standard_normal((1, H, 5, 3)), rng.standard_normal((1, H, 5, 3))
    k, v = rng.standard_normal((1, H_kv, 6, 3)), rng.standard_normal((1, H_kv, 6, 3))
    dq, dk, dv = ref.attention_backward(do, q, k, v, window=window)
    assert dk.shape == k.shape and dv.shape == v.shape
    eps = 1e-6
    for x, grad in ((q, dq), (k, dk), (v, dv)):
        for idx in [(0, 0, 0, 0), (0, x.shape[1] - 1, 4, 2), (0, 0, 2, 1)]:
            old = x[idx]
            x[idx] = old + eps
            up = (ref.attention_forward(q, k, v, window=window)[0] * do).sum()
            x[idx] = old - eps
            down = (ref.attention_forward(q, k, v, window=window)[0] * do).sum()
            x[idx] = old
            assert grad[idx] == pytest.approx((up - down) / (2 * eps), rel=1e-5, abs=1e-8)


@pytest.mark.parametrize("counter,key,expected", [   # Random123's known-answer vectors
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
])
def test_philox_known_answers(counter, key, expected):
    assert tuple(int(x) for x in ref.philox4x32_10(counter, key)) == expected
    batch = ref.philox4x32_10(np.array([counter, (0, 0, 0, 0)]), key)   # vectorised over counters
    assert tuple(int(x) for x in batch[0]) == expected


def test_dropout_mask_is_a_function_of_seed_head_row_and_column():
    keep = ref.dropout_keep(1234, 3, 200, 301, 0.1)
    assert keep.shape == (200, 301)
    n = keep.size            # kept fraction 1 - p within 5 binomial standard deviations
    assert abs(keep.mean() - 0.9) <= 5 * math.sqrt(0.1 * 0.9 / n)
    np.testing.assert_array_equal(keep, ref.dropout_keep(1234, 3, 200, 301, 0.1))   # regenerated
    for other in (ref.dropout_keep(1235, 3, 200, 301, 0.1), ref.dropout_keep(1234, 4, 200, 301, 0.1),
                  ref.dropout_keep(1234 + 2**32, 3, 200, 301, 0.1)):        # seed's high word too
        assert (other != keep).mean() > 0.1
    np.testing.assert_array_equal(ref.dropout_keep(1234, 3, 50, 30, 0.1),
                                  keep[:50, :30])                           # position-keyed
    assert ref.dropout_keep(7, 0, 5, 9, 0.0).all() and not ref.dropout_keep(7, 0, 5, 9, 1.0).any()
    with pytest.raises(ValueError, match="p must be in"):
        ref.dropout_keep(7, 0, 5, 9, 1.5)
    seed, bh = 1234 + 5 * 2**32, 3                   # scores by hand: (r, c) = (7, 10), (23, 41)
    word = ref.philox4x32_10((4 * 0 + 1, 4 * 0 + 3, bh, 1), (1234, 5))[2 * 0 + 1]
    assert ref.dropout_keep(seed, bh, 8, 11, 0.5)[7, 10] == ((int(word) & 0xFFFF) >= 2**15)
    word = ref.philox4x32_10((4 * 2 + 0, 4 * 1 + 3, bh, 1), (1234, 5))[2 * 0 + 1]
    assert ref.dropout_keep(seed, bh, 24, 42, 0.3)[23, 41] == (int(word) >> 16 >= round(0.3 * 2**16))


def test_dropout_rounds_p_to_sixteen_bits_and_scales_by_the_rounded_keep_probability():
    assert ref.dropout_threshold(0.1) == 6554 and ref.dropout_threshold(0.0) == 0
    assert ref.dropout_threshold(1 - 2**-20) == 2**16 - 1 and ref.dropout_threshold(1.0) == 2**16
    assert ref.dropout_scale(0.1) == 1 / (1 - 6554 / 2**16) and ref.dropout_scale(0.5) == 2.0
    np.testing.assert_array_equal(ref.dropout_factors([True, False], 0.25), [4 / 3, 0.0])
    # one call covers 8 scores: rows r, r + 8 x keys c, c + 1, c + 8, c + 9 share a counter
    keep = [ref.dropout_keep(s, 0, 16, 16, 0.5) for s in range(64)]
    same_call = np.array([[k[r, c] for r in (2, 10) for c in (4, 5, 12, 13)] for k in keep])
    assert 0.2 < same_call.mean() < 0.8 and len({tuple(x) for x in same_call}) > 32   # distinct randoms
