"""float16 / bfloat16 under the CUDA simulator: the tensor-core forward and backward in the
input's format (flash_forward_half, flash_backward_half) and the FFMA backward on widened inputs
(standard attention and "fa1", which store the format: tests/test_half_storage.py), held to
flash-attention's rule -- the
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

from .helpers import FLOOR, FORMATS, half_inputs as inputs, rel
from .helpers import check_half_backward as check_backward, check_half_forward as check_forward

@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("n_q,n_k,d,causal,diagonal,tiling", [
    (1, 17, 8, False, None, None),                   # one query
    (17, 1, 24, True, None, None),                   # one key; bottom-right: rows that see nothing
    (40, 23, 59, True, 0, nf.Tiling(32, 16)),        # odd d (element copies), top-left causal
    (23, 40, 40, True, None, nf.Tiling(16, 32)),     # N_q < N_k causal, a warp per 16 rows
    (33, 33, 80, False, None, nf.Tiling(64, 16)),    # two 16-row tiles a warp, ragged rows
    (33, 33, 80, False, None, nf.Tiling(64, 16, warp_rows=16)),  # ... one a warp: 4 warps
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
@pytest.mark.parametrize("n_q,n_k,d,causal,diagonal,tiling", [
    (19, 26, 24, True, None, None),                 # N_q < N_k, bottom-right
    (26, 19, 40, False, None, None),
    (1, 17, 8, False, None, None),                  # one query
    (17, 1, 16, True, None, nf.Tiling(16, 16)),     # one key; rows that see nothing
    (40, 23, 59, True, 0, nf.Tiling(32, 16)),       # odd d (element copies), top-left, ragged
    (33, 40, 80, False, None, nf.Tiling(16, 32)),   # dQ pieces not sharing rows (3 a warp)
])
def test_backward_within_the_rule(fmt, n_q, n_k, d, causal, diagonal, tiling):
    check_backward(fmt, 1, 2, n_q, n_k, d, causal, diagonal, tiling, seed=n_q)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_backward_large_logits(fmt):
    check_backward(fmt, 1, 1, 30, 31, 24, True, logit_scale=30.0, seed=3)


@pytest.mark.parametrize("options", [dict(deterministic=True), dict(algorithm="fa2_fma")])
def test_backward_on_widened_inputs(options):
    """The FFMA kernels take half inputs widened to float32: the gradients are as good."""
    check_backward("bfloat16", 1, 1, 13, 21, 8, True, seed=7, **options)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(sorted(FORMATS)), n_q=st.integers(1, 36), n_k=st.integers(1, 36),
       d=st.sampled_from([8, 16, 24, 33]), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_backward_random_shapes(fmt, n_q, n_k, d, causal, seed):
    check_backward(fmt, 1, 1, n_q, n_k, d, causal, seed=seed)


@pytest.mark.parametrize("n_q,n_k,causal,tiling", [
    (37, 20, True, nf.Tiling(32, 16)),    # N_q > N_k: rows and row blocks that see nothing
    (20, 37, True, nf.Tiling(16, 16)),
    (33, 33, False, nf.Tiling(64, 32)),
    (33, 33, False, nf.Tiling(64, 32, warp_rows=16)),
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
    with pytest.raises(ValueError, match="algorithm='fa2_fma' runs in float32 only; float16 inputs run on algorithm='fa2'"):
        nf.flash_attention(q, q, q, algorithm="fa2_fma")
    with pytest.raises(TypeError, match=r"mixed dtypes \(q float16, k bfloat16, v float16\)"):
        nf.flash_attention(q, q.astype(ml_dtypes.bfloat16), q)
    with pytest.raises(ValueError, match="Tiling.*flash_forward_half.*multiple of 16"):
        nf.flash_attention(q, q, q, tiling=nf.Tiling(16, 8))
    lse = np.zeros((1, 1, 4), np.float32)
    with pytest.raises(ValueError, match="Tiling.*flash_backward_half.*multiple of 16"):
        nf.flash_attention_backward(q, q, q, q, q, lse, tiling=nf.Tiling(16, 8))
    with pytest.raises(TypeError, match="lse has dtype float16; it must be float32"):
        nf.flash_attention_backward(q, q, q, q, q, lse.astype(np.float16))
    with pytest.raises(TypeError, match=r"mixed dtypes \(do float32, q float16"):
        nf.flash_attention_backward(q.astype(np.float32), q, q, q, q, lse)
    with pytest.raises(ValueError, match="flash_attention_backward on float16 inputs with .*deterministic=True: those widen"):
        count_traffic(nf.flash_attention_backward, q, q, q, q, q, np.zeros((1, 1, 4), np.float32),
                      deterministic=True)


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

