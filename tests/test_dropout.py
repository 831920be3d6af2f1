"""Dropout in the kernels (the paper's Algorithms 2 and 4; "fa2" in fp32, fp16 and bf16), under the
CUDA simulator: the mask the kernels apply is ``reference.dropout_keep``'s (returned by
``return_dropout_mask`` from the kernels' own device function); o and the gradients equal a
float64 reference that applies that mask, within flash-attention's rule against a plain fp32
implementation with the same mask (fp16 / bf16: a plain same-format one); the backward regenerates the forward's mask from the seed;
one seed gives bitwise-equal results, another a different mask; the kept fraction is 1 - p
within its binomial error; dropout adds no HBM traffic; bad input is refused before any launch;
the default tiling of a tiny input suits dropout (Br, Bc multiples of 16)."""
import math

import numpy as np
import pytest

import numba_flash as nf
from numba_flash import api, checks
from numba_flash import reference as ref
from numba_flash.instrument import count_traffic

from .helpers import FLOOR, TYPES, rel

# (B, H, H_kv, N_q, N_k, d, causal, window, p)
CASES = [
    (1, 2, 2, 37, 29, 24, True, None, 0.3),       # causal with N_q > N_k: rows that see nothing
    (1, 4, 2, 33, 40, 8, False, None, 0.1),       # GQA
    (2, 2, 1, 17, 17, 40, True, None, 0.5),       # MQA
    (1, 2, 2, 1, 19, 59, False, (4, 3), 0.2),     # N = 1, odd d, a window
]


def _inputs(B, H, H_kv, n_q, n_k, d, seed=0):
    rng = np.random.default_rng(seed)
    q, do = (rng.standard_normal((B, H, n_q, d)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((B, H_kv, n_k, d)).astype(np.float32) for _ in range(2))
    return q, k, v, do


@pytest.mark.parametrize("case", CASES)
def test_forward_and_backward_equal_the_reference_with_the_kernels_mask(case):
    B, H, H_kv, n_q, n_k, d, causal, window, p = case
    q, k, v, do = _inputs(B, H, H_kv, n_q, n_k, d)
    seed = 2 ** 40 + 77
    mask = dict(causal=causal, window=window)
    with nf.poison_outputs():
        o, lse, keep = nf.flash_attention(q, k, v, **mask, return_lse=True, dropout_p=p,
                                          dropout_seed=seed, return_dropout_mask=True)
    expected = np.stack([ref.dropout_keep(seed, bh, n_q, n_k, p) for bh in range(B * H)])
    np.testing.assert_array_equal(keep, expected.reshape(B, H, n_q, n_k))
    z = ref.dropout_factors(keep, p)
    f64 = [x.astype(np.float64) for x in (do, q, k, v)]
    o_ref, lse_ref = ref.attention_forward(*f64[1:], **mask, dropout=z)
    plain, _ = ref.attention_forward(q, k, v, **mask, dropout=z, dtype=np.float32)
    assert rel(o, o_ref) <= 2 * rel(plain, o_ref) + FLOOR, (rel(o, o_ref), rel(plain, o_ref))
    seen = np.isfinite(lse_ref)      # lse is of the undropped scores
    np.testing.assert_allclose(lse[seen], lse_ref[seen], rtol=1e-5, atol=1e-5)
    with nf.poison_outputs():
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, **mask, dropout_p=p, dropout_seed=seed)
    refs = ref.attention_backward(*f64, **mask, dropout=z)
    plains = ref.attention_backward(do, q, k, v, **mask, dropout=z, dtype=np.float32)
    for name, g, r, pl in zip(("dq", "dk", "dv"), grads, refs, plains):
        assert rel(g, r) <= 3 * rel(pl, r) + FLOOR, (name, rel(g, r), rel(pl, r))


@pytest.mark.parametrize("fmt,case", [("float16", CASES[0]), ("bfloat16", CASES[1]), ("float16", CASES[3])])
def test_half_precision_within_the_rule_of_a_plain_implementation_with_the_mask(fmt, case):
    B, H, H_kv, n_q, n_k, d, causal, window, p = case
    t = TYPES[fmt]
    q, k, v, do = (x.astype(t) for x in _inputs(B, H, H_kv, n_q, n_k, d))
    mask = dict(causal=causal, window=window)
    with nf.poison_outputs():
        o, lse, keep = nf.flash_attention(q, k, v, **mask, return_lse=True, dropout_p=p,
                                          dropout_seed=11, return_dropout_mask=True)
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, **mask, dropout_p=p, dropout_seed=11)
    assert o.dtype == t and all(g.dtype == t for g in grads)
    z = ref.dropout_factors(keep, p)
    f64 = [x.astype(np.float64) for x in (do, q, k, v)]
    o_ref, _ = ref.attention_forward(*f64[1:], **mask, dropout=z)
    plain = ref.plain_attention_forward(q, k, v, fmt, **mask, dropout=z)
    assert rel(o, o_ref) <= 2 * rel(plain, o_ref) + FLOOR, (rel(o, o_ref), rel(plain, o_ref))
    refs = ref.attention_backward(*f64, **mask, dropout=z)
    plains = ref.plain_attention_backward(do, q, k, v, fmt, **mask, dropout=z)
    for name, g, r, pl in zip(("dq", "dk", "dv"), grads, refs, plains):
        assert rel(g, r) <= 3 * rel(pl, r) + FLOOR, (name, rel(g, r), rel(pl, r))


def test_one_seed_repeats_bitwise_and_another_differs():
    q, k, v, do = _inputs(1, 2, 2, 20, 24, 16)
    run = lambda seed: nf.flash_attention(q, k, v, dropout_p=0.25, dropout_seed=seed,   # noqa: E731
                                          return_lse=True, return_dropout_mask=True)
    (o1, l1, m1), (o2, l2, m2), (o3, _, m3) = run(5), run(5), run(6)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(m1, m2)
    assert (m1 != m3).mean() > 0.1 and not np.array_equal(o1, o3)
    g1 = nf.flash_attention_backward(do, q, k, v, o1, l1, dropout_p=0.25, dropout_seed=5)
    g0 = nf.flash_attention_backward(do, q, k, v, o1, l1)          # (another mask: other grads)
    assert not np.allclose(g1[2], g0[2])


def test_kept_fraction_is_one_minus_p_within_its_binomial_error():
    q, k, v, _ = _inputs(2, 3, 3, 64, 80, 8)
    for p in (0.1, 0.5, 0.9):
        _, keep = nf.flash_attention(q, k, v, dropout_p=p, dropout_seed=99, return_dropout_mask=True)
        n = keep.size
        assert abs(keep.mean() - (1 - p)) <= 5 * math.sqrt(p * (1 - p) / n), (p, keep.mean())


def test_dropout_adds_no_hbm_traffic():
    q, k, v, do = _inputs(1, 2, 2, 40, 40, 16)
    plain = count_traffic(nf.flash_attention, q, k, v, causal=True)
    dropped = count_traffic(nf.flash_attention, q, k, v, causal=True, dropout_p=0.2, dropout_seed=3)
    assert dropped.hbm == plain.hbm and dropped.hbm
    o, lse = nf.flash_attention(q, k, v, causal=True, return_lse=True)
    plain = count_traffic(nf.flash_attention_backward, do, q, k, v, o, lse, causal=True)
    dropped = count_traffic(nf.flash_attention_backward, do, q, k, v, o, lse, causal=True,
                            dropout_p=0.2, dropout_seed=3)
    assert dropped.hbm == plain.hbm and dropped.hbm


def test_bad_dropout_input_is_refused_before_any_launch():
    q, k, v, _ = _inputs(1, 1, 1, 8, 8, 8)
    with pytest.raises(ValueError, match=r"dropout_p must be a float in \[0, 1\)"):
        nf.flash_attention(q, k, v, dropout_p=1.0, dropout_seed=1)
    with pytest.raises(ValueError, match="needs a dropout_seed"):
        nf.flash_attention(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match=r"dropout_seed must be in \[0, 2\*\*64\)"):
        nf.flash_attention(q, k, v, dropout_p=0.1, dropout_seed=-1)
    with pytest.raises(TypeError, match="dropout_seed must be"):
        nf.flash_attention(q, k, v, dropout_p=0.1, dropout_seed=1.5)
    with pytest.raises(NotImplementedError, match="runs on algorithm='fa2' so far"):
        nf.flash_attention(q, k, v, dropout_p=0.1, dropout_seed=1, algorithm="fa2_fma")
    o, lse = nf.flash_attention(q, k, v, return_lse=True)
    with pytest.raises(NotImplementedError, match="deterministic=False"):
        nf.flash_attention_backward(q, q, k, v, o, lse, dropout_p=0.1, dropout_seed=1, deterministic=True)


def test_tiny_input_takes_a_default_tiling_dropout_can_use():
    """N = 5 keys cut the fp32 forward's default to Tiling(16, 8) without dropout; with it, to
    Tiling(16, 16) (a Philox call's scores lie in a 16 x 16 block), and the result is exact."""
    assert checks.tiling_for(None, ("flash_forward_tc",), 8, 5, 5) == nf.Tiling(16, 8)
    assert checks.tiling_for(None, ("flash_forward_tc",), 8, 5, 5, dropout=True) == nf.Tiling(16, 16)
    q, k, v, do = _inputs(1, 1, 1, 5, 5, 8)
    with nf.poison_outputs():
        o, lse, keep = nf.flash_attention(q, k, v, return_lse=True, dropout_p=0.2, dropout_seed=4,
                                          return_dropout_mask=True)
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, dropout_p=0.2, dropout_seed=4)
    np.testing.assert_array_equal(keep[0, 0], ref.dropout_keep(4, 0, 5, 5, 0.2))
    z = ref.dropout_factors(keep, 0.2)
    f64 = [x.astype(np.float64) for x in (do, q, k, v)]
    np.testing.assert_allclose(o, ref.attention_forward(*f64[1:], dropout=z)[0], rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref.attention_backward(*f64, dropout=z)):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def test_an_explicit_tiling_dropout_cannot_use_is_refused_before_any_launch(monkeypatch):
    q, k, v, _ = _inputs(1, 1, 1, 5, 5, 8)
    nf.flash_attention(q, k, v, tiling=nf.Tiling(16, 8))                 # fine without dropout

    def no_launch(*args, **kwargs):
        raise AssertionError("launched")
    monkeypatch.setattr(api, "launch", no_launch)
    with pytest.raises(ValueError, match=r"tiling=Tiling\(Br=16, Bc=8\) cannot apply dropout .*"
                                         r"choose Br and Bc multiples of 16"):
        nf.flash_attention(q, k, v, dropout_p=0.1, dropout_seed=1, tiling=nf.Tiling(16, 8))
