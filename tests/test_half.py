"""float16 / bfloat16 under the CUDA simulator: the tensor-core forward in the input's format
(flash_forward_half) and the backward on widened inputs, held to flash-attention's rule -- the
error against a float64 reference on the same (rounded) inputs at most 2x (outputs) / 3x
(gradients) that of a plain implementation in the same format (reference.plain_attention_*)
-- at awkward shapes; their traffic against the model; what the API says of bad half input."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numba_flash as nf
import simulator
from numba_flash import precision, reference
from numba_flash.instrument import count_traffic

from .helpers import FLOOR, FORMATS, check_half_forward as check_forward, half_inputs as inputs, rel

@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("n_q,n_k,d,causal,diagonal,tiling", [
    (1, 17, 8, False, None, None),                   # one query
    (17, 1, 24, True, None, None),                   # one key; bottom-right: rows that see nothing
    (40, 23, 59, True, 0, nf.Tiling(32, 16)),        # odd d (element copies), top-left causal
    (23, 40, 40, True, None, nf.Tiling(16, 32)),     # N_q < N_k causal, a warp per 16 rows
    (33, 33, 80, False, None, nf.Tiling(64, 16)),    # two 16-row tiles a warp, ragged rows
])
def test_forward_within_the_rule(fmt, n_q, n_k, d, causal, diagonal, tiling):
    check_forward(fmt, 1, 2, n_q, n_k, d, causal, diagonal, tiling)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_forward_large_logits(fmt):
    check_forward(fmt, 1, 1, 24, 37, 16, False, logit_scale=30.0, seed=3)


@pytest.mark.slow
def test_forward_head_dim_256():
    check_forward("float16", 1, 1, 9, 20, 256, True, seed=4)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(sorted(FORMATS)), n_q=st.integers(1, 40), n_k=st.integers(1, 40),
       d=st.sampled_from([8, 16, 24, 33, 40]), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_forward_random_shapes(fmt, n_q, n_k, d, causal, seed):
    check_forward(fmt, 1, 1, n_q, n_k, d, causal, seed=seed)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("n_q,n_k,d,causal", [(19, 26, 24, True), (26, 19, 40, False)])
def test_backward_within_the_rule(fmt, n_q, n_k, d, causal):
    rng = np.random.default_rng(n_q)
    q, k, v, do = inputs(rng, fmt, 1, 2, n_q, n_k, d)
    o, lse = nf.flash_attention(q, k, v, causal=causal, return_lse=True)
    with nf.poison_outputs():
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal)
    f64 = [x.astype(np.float64) for x in (do, q, k, v)]
    refs = reference.attention_backward(*f64, causal=causal)
    plains = reference.plain_attention_backward(do, q, k, v, fmt, causal=causal)
    for name, g, ref, plain in zip(("dq", "dk", "dv"), grads, refs, plains):
        assert g.dtype == FORMATS[fmt] and g.shape == ref.shape
        assert rel(g, ref) <= 3 * rel(plain, ref) + FLOOR, (name, rel(g, ref), rel(plain, ref))


@pytest.mark.parametrize("n_q,n_k,causal,tiling", [
    (37, 20, True, nf.Tiling(32, 16)),    # N_q > N_k: rows and row blocks that see nothing
    (20, 37, True, nf.Tiling(16, 16)),
    (33, 33, False, nf.Tiling(64, 32)),
])
def test_half_forward_traffic_is_the_models(n_q, n_k, causal, tiling):
    rng = np.random.default_rng(0)
    q, k, v, _ = inputs(rng, "float16", 1, 2, n_q, n_k, 24)
    report = count_traffic(nf.flash_attention, q, k, v, causal=causal, tiling=tiling)
    predicted = simulator.predict("flash_forward_half", simulator.Workload(1, 2, n_q, n_k, 24, 2, causal),
                                  tiling)
    assert report.hbm_counts() == predicted.hbm_counts()
    assert report.hbm_read_bytes == predicted.hbm_read_bytes == 2 * sum(
        t.reads for t in predicted.hbm.values())


def test_bad_half_input_is_named():
    q = np.zeros((1, 1, 4, 8), np.float16)
    with pytest.raises(ValueError, match="algorithm='fa1' runs in float32 only; float16 inputs run on algorithm='fa2'"):
        nf.flash_attention(q, q, q, algorithm="fa1")
    with pytest.raises(TypeError, match=r"mixed dtypes \(q float16, k bfloat16, v float16\)"):
        nf.flash_attention(q, q.astype(ml_dtypes.bfloat16), q)
    with pytest.raises(ValueError, match="Tiling.*flash_forward_half.*multiple of 16"):
        nf.flash_attention(q, q, q, tiling=nf.Tiling(16, 8))
    with pytest.raises(ValueError, match="only flash_attention has half-precision kernels"):
        count_traffic(nf.standard_attention, q, q, q)


def test_rounding_matches_numpy_and_ml_dtypes():
    x = (np.random.default_rng(0).standard_normal(4096) * 300).astype(np.float32)
    x[:4] = [np.nan, np.inf, -np.inf, 3.0e38]
    for fmt, t in FORMATS.items():
        with np.errstate(over="ignore"):
            expected = x.astype(t).astype(np.float32)
        np.testing.assert_array_equal(precision.round_to(x, fmt), expected)


def test_torch_front_end_in_half():
    torch = pytest.importorskip("torch")
    import numba_flash.torch as nft

    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16):
        q, k, v = (torch.randn(1, 2, 9, 16, generator=g).to(dtype).requires_grad_() for _ in range(3))
        o = nft.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert o.dtype == dtype
        o.float().sum().backward()
        assert q.grad.dtype == dtype and k.grad.dtype == dtype
        ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
        assert (o.double() - ref).abs().max() < (2e-2 if dtype == torch.bfloat16 else 3e-3)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_standard_attention_takes_half_inputs(fmt):
    rng = np.random.default_rng(5)
    q, k, v, do = inputs(rng, fmt, 1, 2, 13, 9, 8)
    with nf.poison_outputs():
        o, p = nf.standard_attention(q, k, v, causal=True, return_probs=True)
        grads = nf.standard_attention_backward(do, q, k, v, o, p, causal=True)
    f64 = [x.astype(np.float64) for x in (do, q, k, v)]
    ref = reference.attention_forward(*f64[1:], causal=True)[0]
    assert o.dtype == p.dtype == FORMATS[fmt]
    assert rel(o, ref) <= 2 * rel(reference.plain_attention_forward(q, k, v, fmt, causal=True), ref) + FLOOR
    plains = reference.plain_attention_backward(do, q, k, v, fmt, causal=True)
    for g, g_ref, plain in zip(grads, reference.attention_backward(*f64, causal=True), plains):
        assert g.dtype == FORMATS[fmt] and rel(g, g_ref) <= 3 * rel(plain, g_ref) + FLOOR
