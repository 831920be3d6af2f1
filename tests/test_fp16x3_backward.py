"""The backward of fp32 attention from three fp16 products (``algorithm="fa2_fp16x3"``:
numba_flash/fp16x3.py's ``backward_launches``, kernels/flash_backward_half.py with dtype
"float32") under the CUDA simulator: gradients at fp32 level against float64 at awkward shapes
(the fp32 tests' tolerance), logits x30 and heads far from one, every "fa2" option (causal with
N_q != N_k, windows, GQA, block masks, dropout with the forward's mask), torch autograd, and bad
input refused before any launch."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numba_flash as nf
from numba_flash import fp16x3, reference as ref

from .helpers import assert_close
from .test_fp16x3 import inputs

GRAD_TOL = 1e-4


def check(q, k, v, tiling=None, seed=0, do_scale=(1.0,), **options):
    """dq, dk, dv after fa2_fp16x3's forward, each against float64 (the fp32 tests' tolerance);
    dO's heads scaled by ``do_scale`` (one factor a head, or one for all)."""
    do = np.random.default_rng(seed + 100).standard_normal(q.shape).astype(np.float32)
    do *= np.asarray(do_scale, np.float32).reshape(1, -1, 1, 1)
    o, lse = nf.flash_attention(q, k, v, algorithm="fa2_fp16x3", return_lse=True, **options)
    with nf.poison_outputs():
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, algorithm="fa2_fp16x3",
                                            tiling=tiling, **options)
    refs = ref.attention_backward(do, q, k, v, **options)
    for g, r, x in zip(grads, refs, (q, k, v)):
        assert g.dtype == np.float32 and g.shape == x.shape
        assert_close(g, r, GRAD_TOL)
    return grads


@pytest.mark.parametrize("B,H,n_q,n_k,d,causal,tiling", [
    (1, 2, 1, 17, 8, False, None),                # one query
    (1, 2, 17, 1, 24, True, None),                # one key; bottom-right: rows that see none
    (1, 1, 40, 23, 59, True, nf.Tiling(32, 16)),  # odd d, N_q > N_k causal, two query steps
    (1, 1, 23, 40, 40, True, nf.Tiling(16, 32)),  # N_q < N_k causal, two warps
    (2, 1, 33, 33, 80, False, nf.Tiling(16, 16)), # ragged rows and keys, three row blocks
])
def test_backward_awkward_shapes(B, H, n_q, n_k, d, causal, tiling):
    check(*inputs(0, B, H, n_q, n_k, d), tiling=tiling, causal=causal)


def test_large_logits():
    check(*inputs(1, 1, 2, 24, 37, 16, logit_scale=30.0), causal=True)


def test_heads_far_from_one():
    """Heads of very different magnitudes, each with its own power of two (products of two
    scales overflow fp32: the kernel forms them in float64). The logits stay moderate: where P
    is one-hot to fp32's rounding of the scores (logits of 1e5 and more), dS = P (dP - D)
    cancels to nearly 0 in real arithmetic, and any fp32 implementation's error relative to it
    is unbounded."""
    q, k, v = inputs(1, 1, 2, 24, 37, 16)
    q[0, 1] *= 1e-6
    k[0, 0] *= 8.0
    v[0, 1] *= 1e-20
    v[0, 0] *= 1e20
    check(q, k, v, causal=True, do_scale=(1e15, 1e-15))
    check(q, k, v, do_scale=(1e-25, 1e25))


def test_window_gqa_and_block_mask():
    """Two query heads a K/V head (each with its own scales, dK and dV summed over them), a
    window, a block mask."""
    q, k, v = inputs(2, 1, 2, 24, 24, 16, H_kv=1)
    q[0, 1] *= 1e-3
    check(q, k, v, window=(5, 3))
    mask = np.array([[True, False], [True, True]])
    check(q, k, v, causal=True, block_mask=mask, block_size=(16, 16))


@pytest.mark.parametrize("p", [0.2, 0.6])
def test_dropout_gradients_match_the_reference_with_the_forwards_mask(p):
    q, k, v = inputs(3, 1, 2, 32, 32, 16)
    do = np.random.default_rng(5).standard_normal(q.shape).astype(np.float32)
    options = dict(causal=True, dropout_p=p, dropout_seed=7)
    o, lse, keep = nf.flash_attention(q, k, v, algorithm="fa2_fp16x3", return_lse=True,
                                      return_dropout_mask=True, tiling=nf.Tiling(16, 16), **options)
    with nf.poison_outputs():
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, algorithm="fa2_fp16x3",
                                            tiling=nf.Tiling(16, 16), **options)
    refs = ref.attention_backward(do, q, k, v, causal=True, dropout=ref.dropout_factors(keep, p))
    for g, r in zip(grads, refs):
        assert_close(g, r, GRAD_TOL)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_q=st.integers(1, 33), n_k=st.integers(1, 33), d=st.sampled_from([8, 24, 33, 40]),
       causal=st.booleans(), seed=st.integers(0, 2**16))
def test_backward_random_shapes(n_q, n_k, d, causal, seed):
    check(*inputs(seed, 1, 1, n_q, n_k, d), seed=seed, causal=causal)


def test_torch_autograd_trains_on_it():
    """scaled_dot_product_attention(..., algorithm="fa2_fp16x3") records autograd: its
    gradients are the API's backward on the same parts."""
    torch = pytest.importorskip("torch")
    import numba_flash.torch as nft
    q, k, v = inputs(4, 1, 2, 20, 20, 16)
    do = np.random.default_rng(6).standard_normal(q.shape).astype(np.float32)
    xs = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    o = nft.scaled_dot_product_attention(*xs, is_causal=True, algorithm="fa2_fp16x3")
    o.backward(torch.tensor(do))
    refs = ref.attention_backward(do, q, k, v, causal=True, diagonal=0)
    for x, r in zip(xs, refs):
        assert_close(x.grad.numpy(), r, GRAD_TOL)


def test_bad_input_is_refused_before_any_launch():
    q = np.zeros((1, 1, 4, 8), np.float32)
    lse = np.zeros((1, 1, 4), np.float32)
    h = q.astype(np.float16)
    with pytest.raises(ValueError, match="fa2_fp16x3.*float32"):
        nf.flash_attention_backward(h, h, h, h, h, lse, algorithm="fa2_fp16x3")
    with pytest.raises(ValueError, match="kv_split"):
        nf.flash_attention_backward(q, q, q, q, q, lse, algorithm="fa2_fp16x3", kv_split=2)
    big = np.zeros((1, 1, 4, 256), np.float32)
    with pytest.raises(ValueError, match=r"tiling=Tiling\(Br=64, Bc=256\).*fa2_fp16x3"):
        nf.flash_attention_backward(big, big, big, big, big, lse, algorithm="fa2_fp16x3",
                                    tiling=nf.Tiling(64, 256))


def test_default_tilings_fit():
    """The defaults at every head dim the kernels take fit an H200 block's shared memory
    (227 KB), cut to short sequences."""
    for d in (8, 64, 65, 128, 129, 256):
        t = fp16x3.backward_default_tiling(d, 4096, 4096, False, None)
        assert fp16x3.backward_smem_bytes(t, d) <= 227 * 1024, (d, t)
    assert fp16x3.backward_default_tiling(64, 20, 20, False, None).Br <= 32
    nested = fp16x3.backward_default_tiling(128, 4096, 4096, False, (16, 64))   # a block mask's
    assert (nested.Br, nested.Bc) == (16, 64)
