"""Block-sparse FlashAttention (the paper's Algorithm 5) on the "fa2" kernels, under the CUDA
simulator: forward and backward against a float64 reference that masks the same blocks, held
to flash-attention's rule in fp32, fp16 and bf16 at awkward shapes, alone and with causal
masks, windows and grouped heads; blocks that are off never loaded; the default tiling nested
in the blocks; what the API says of bad block masks."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numba_flash as nf
from numba_flash.instrument import count_traffic

from .helpers import ALL_FORMATS, band_inputs as inputs, check_band as check


def random_mask(rng, n_q, n_k, block_size, keep=0.5):
    """(ceil(n_q / bq), ceil(n_k / bk)) booleans, each block kept with probability ``keep``."""
    return rng.random((-(-n_q // block_size[0]), -(-n_k // block_size[1]))) < keep


@pytest.mark.parametrize("fmt", ALL_FORMATS)
@pytest.mark.parametrize("H,H_kv,n_q,n_k,d,causal,window,block", [
    (2, 2, 40, 37, 8, False, None, (16, 16)),       # ragged both ways, N_q != N_k
    (2, 1, 33, 50, 24, True, None, (16, 32)),       # causal bottom-right, MQA, wider key blocks
    (4, 2, 48, 48, 16, False, (9, 4), (32, 16)),    # a window and GQA, blocks of two row tiles
    (1, 1, 1, 17, 8, False, None, (16, 16)),        # one query
])
def test_block_sparse_within_the_rule(fmt, H, H_kv, n_q, n_k, d, causal, window, block):
    rng = np.random.default_rng(n_q * n_k + d)
    on = random_mask(rng, n_q, n_k, block)
    on[0] = False                                   # a row of blocks that keeps nothing
    check(fmt, 1, H, H_kv, n_q, n_k, d, causal, window, tiling=nf.Tiling(16, 16),
          bwd_tiling=nf.Tiling(16, 16), block_mask=on, block_size=block, seed=d)


def test_block_sparse_default_tiling_and_large_logits():
    """No tiling given: the defaults cut to nest in the blocks (FlexAttention's 128 x 128 here
    on a short sequence), logits x 30."""
    rng = np.random.default_rng(11)
    on = random_mask(rng, 150, 140, (128, 128), keep=0.7)
    on[0, 0] = True
    check("float32", 1, 1, 1, 150, 140, 16, block_mask=on, block_size=(128, 128),
          logit_scale=30.0, seed=2)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(ALL_FORMATS), n_q=st.integers(1, 48), n_k=st.integers(1, 48),
       causal=st.booleans(), bq=st.sampled_from([16, 32]), bk=st.sampled_from([16, 32]),
       keep=st.floats(0.0, 1.0), seed=st.integers(0, 2**16))
def test_random_block_masks(fmt, n_q, n_k, causal, bq, bk, keep, seed):
    on = random_mask(np.random.default_rng(seed), n_q, n_k, (bq, bk), keep)
    check(fmt, 1, 2, 2, n_q, n_k, 8, causal, tiling=nf.Tiling(16, 16), bwd_tiling=nf.Tiling(16, 16),
          block_mask=on, block_size=(bq, bk), seed=seed, backward=seed % 2 == 0)


def test_all_true_mask_equals_dense():
    """Every block kept: the sparse kernels' results equal the dense kernels' bit for bit."""
    rng = np.random.default_rng(4)
    q, k, v, do = inputs(rng, "float32", 1, 2, 2, 35, 29, 8)
    t = dict(tiling=nf.Tiling(16, 16))
    on = np.ones((3, 2), bool)
    o, lse = nf.flash_attention(q, k, v, causal=True, return_lse=True, **t)
    o_s, lse_s = nf.flash_attention(q, k, v, causal=True, return_lse=True, block_mask=on,
                                    block_size=(16, 16), **t)
    np.testing.assert_array_equal(o, o_s)
    np.testing.assert_array_equal(lse, lse_s)
    dense = nf.flash_attention_backward(do, q, k, v, o, lse, causal=True, **t)
    sparse = nf.flash_attention_backward(do, q, k, v, o, lse, causal=True, block_mask=on,
                                         block_size=(16, 16), **t)
    for a, b in zip(dense, sparse):
        np.testing.assert_array_equal(a, b)


def test_blocks_that_are_off_are_not_loaded():
    """K/V reads fall with the blocks kept, exactly: each row block reads Bc rows of K and V
    per kept tile (64 x 64, 16 x 16 tiles, a checkerboard of 32 x 32 blocks: half the pairs);
    the backward reads Q, dO per kept pair likewise (dO also once in the D = rowsum(dO * O)
    kernel)."""
    rng = np.random.default_rng(6)
    q, k, v, do = inputs(rng, "float32", 1, 1, 1, 64, 64, 8)
    t = dict(tiling=nf.Tiling(16, 16))
    on = np.array([[True, False], [False, True]])
    sparse = dict(block_mask=on, block_size=(32, 32), **t)
    dense_f = count_traffic(nf.flash_attention, q, k, v, **t)
    sparse_f = count_traffic(nf.flash_attention, q, k, v, **sparse)
    for name in ("K", "V"):
        assert 2 * sparse_f.hbm[name].reads == dense_f.hbm[name].reads, name
    assert sparse_f.hbm["Q"].reads == dense_f.hbm["Q"].reads
    o, lse = nf.flash_attention(q, k, v, return_lse=True, **t)
    dense_b = count_traffic(nf.flash_attention_backward, do, q, k, v, o, lse, **t)
    sparse_b = count_traffic(nf.flash_attention_backward, do, q, k, v, o, lse, **sparse)
    assert 2 * sparse_b.hbm["Q"].reads == dense_b.hbm["Q"].reads
    assert (dense_b.hbm["dO"].reads - sparse_b.hbm["dO"].reads
            == dense_b.hbm["Q"].reads - sparse_b.hbm["Q"].reads)
    assert sparse_b.hbm["K"].reads == dense_b.hbm["K"].reads


def test_empty_mask():
    """No block kept: o = 0, lse = -inf, every gradient 0."""
    rng = np.random.default_rng(7)
    q, k, v, do = inputs(rng, "float16", 1, 1, 1, 20, 20, 8)
    off = dict(block_mask=np.zeros((2, 2), bool), block_size=(16, 16), tiling=nf.Tiling(16, 16))
    with nf.poison_outputs():
        o, lse = nf.flash_attention(q, k, v, return_lse=True, **off)
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, **off)
    assert np.all(o.astype(np.float32) == 0) and np.all(lse == -np.inf)
    for g in grads:
        assert np.all(g.astype(np.float32) == 0)


@pytest.mark.parametrize("kwargs,message", [
    (dict(block_mask=np.ones((2, 3), bool), block_size=(16, 16)), "must have shape"),
    (dict(block_mask=np.ones((2, 2), np.int8), block_size=(16, 16)), "booleans"),
    (dict(block_mask=np.ones((2, 2), bool), block_size=16), "pair"),
    (dict(block_mask=np.ones((1, 1), bool), block_size=(24, 32), tiling=nf.Tiling(16, 16)),
     "Br must divide 24"),
    (dict(block_mask=np.ones((1, 2), bool), block_size=(20, 16)), "multiples of 16"),
    (dict(block_mask=np.ones((2, 2), bool), block_size=(16, 16), algorithm="fa2_fma"), "block mask"),
])
def test_bad_block_masks_are_refused_before_any_launch(kwargs, message):
    rng = np.random.default_rng(8)
    q, k, v, _ = inputs(rng, "float32", 1, 1, 1, 20, 20, 8)
    with nf.poison_outputs(), pytest.raises((ValueError, TypeError), match=message):
        nf.flash_attention(q, k, v, **kwargs)


def test_backward_refuses_block_masks_without_tensor_cores():
    rng = np.random.default_rng(9)
    q, k, v, do = inputs(rng, "float32", 1, 1, 1, 20, 20, 8)
    o, lse = nf.flash_attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="block mask"):
        nf.flash_attention_backward(do, q, k, v, o, lse, deterministic=True,
                                    block_mask=np.ones((2, 2), bool), block_size=(16, 16))


def test_torch_block_sparse_attention_with_autograd():
    """numba_flash.torch.block_sparse_attention (CPU tensors: the simulator) against torch's math
    backend in float64 with the same mask as a boolean attn_mask (causal, top-left), forward and
    gradients; and torch.library's opcheck of the ops with a block mask."""
    torch = pytest.importorskip("torch")
    import numba_flash.torch as nft
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from .helpers import assert_close

    gen = torch.Generator().manual_seed(12)
    q, k, v = (torch.randn((1, 2, n, 8), generator=gen).requires_grad_() for n in (40, 40, 40))
    on = torch.rand((3, 3), generator=gen) < 0.6
    on[:, 0] = True                              # every row keeps a block (torch gives NaN else)
    o = nft.block_sparse_attention(q, k, v, on, (16, 16), is_causal=True)
    keep = on.repeat_interleave(16, 0)[:40].repeat_interleave(16, 1)[:, :40]
    keep &= torch.ones(40, 40, dtype=torch.bool).tril()
    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        o_ref = torch.nn.functional.scaled_dot_product_attention(*leaves, attn_mask=keep)
    assert_close(o.detach().numpy(), o_ref.detach().numpy(), 1e-5)
    do = torch.randn(o.shape, generator=gen)
    o.backward(do)
    o_ref.backward(do.double())
    for x, x_ref in zip((q, k, v), leaves):
        assert_close(x.grad.numpy(), x_ref.grad.numpy(), 1e-4)
    a, b, c = (x.detach()[:, :, :20] for x in (q, k, v))
    args = (a, b, c, 0.5, False, 0, 0.0, None, on[:2, :2], 16, 16)
    torch.library.opcheck(nft.attention_forward, args)
    o2, lse2 = nft.attention_forward(*args)
    torch.library.opcheck(nft.attention_backward, (torch.ones_like(o2), a, b, c, o2, lse2, 0.5,
                                                   False, 0, 0.0, None, on[:2, :2], 16, 16))


def test_block_mask_keys_follow_the_contents():
    """A launch plan's key for a mask: equal for equal contents, apart for other contents or
    shapes; unkeyed (the checked path) for masks that are not host booleans."""
    from numba_flash import checks

    a = np.array([[True, False], [False, True]])
    assert checks.block_mask_key(a) == checks.block_mask_key(a.copy())
    assert checks.block_mask_key(a) != checks.block_mask_key(~a)
    assert checks.block_mask_key(a) != checks.block_mask_key(a.reshape(1, 4))
    assert checks.block_mask_key(None) is None
    assert checks.block_mask_key(a.astype(np.int8)) is checks.UNKEYED
