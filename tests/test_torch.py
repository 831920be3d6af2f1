"""numba_flash.torch: the drop-in scaled_dot_product_attention against torch's own (math
backend, float64), its autograd, torch.compile and torch.library checks -- on CPU tensors,
which run on the CUDA simulator (tests/test_torch_gpu.py: the same on the GPU)."""
import math
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import numba_flash.flash_attn as fa  # noqa: E402
import numba_flash.torch as nft  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from .helpers import assert_close  # noqa: E402

OUT_TOL, GRAD_TOL = 1e-5, 1e-4


def make(shape, generator, scale=1.0):
    return (scale * torch.randn(shape, generator=generator, dtype=torch.float32)).requires_grad_()


@pytest.fixture
def gen(request):
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def sdpa_float64(q, k, v, **kwargs):
    """torch's math backend on float64 copies: the reference."""
    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        o = torch.nn.functional.scaled_dot_product_attention(*leaves, **kwargs)
    return o, leaves


def check_against_torch(q, k, v, gen, reference=None, **kwargs):
    """Ours with ``kwargs`` against torch's math backend in float64 with ``reference`` (default:
    the same kwargs): output and q, k, v gradients."""
    o = nft.scaled_dot_product_attention(q, k, v, **kwargs)
    o_ref, leaves = sdpa_float64(q, k, v, **(kwargs if reference is None else reference))
    assert_like_reference(o, o_ref, (q, k, v), leaves, gen)


def assert_like_reference(o, o_ref, inputs, leaves, gen):
    """o (float32) within OUT_TOL of the float64 reference o_ref, and after a backward of one
    random upstream gradient through both, the inputs' gradients within GRAD_TOL of the
    reference's leaves'."""
    assert o.shape == o_ref.shape and o.dtype == torch.float32
    assert_close(o.detach().numpy(), o_ref.detach().numpy(), OUT_TOL)
    do = torch.randn(o.shape, generator=gen)
    o.backward(do)
    o_ref.backward(do.double())
    for x, x_ref in zip(inputs, leaves):     # (a leaf may hold its input reshaped)
        assert_close(x.grad.numpy().reshape(x_ref.shape), x_ref.grad.numpy(), GRAD_TOL)


@pytest.mark.parametrize("B,H,n_q,n_k,d,causal", [
    (1, 2, 17, 17, 24, False),
    (1, 2, 17, 33, 24, True),      # N_q < N_k: torch's top-left diagonal, keys past N_q unseen
    (1, 1, 33, 17, 8, True),       # N_q > N_k: later rows see every key, none sees nothing
    (2, 1, 1, 5, 40, True),
])
def test_matches_torch_sdpa(gen, B, H, n_q, n_k, d, causal):
    q, k, v = make((B, H, n_q, d), gen), make((B, H, n_k, d), gen), make((B, H, n_k, d), gen)
    check_against_torch(q, k, v, gen, is_causal=causal)


@settings(max_examples=4)      # each example is a simulated forward and backward (~5 s)
@given(B=st.integers(1, 2), H=st.integers(1, 2), n_q=st.integers(1, 33), n_k=st.integers(1, 33),
       d=st.sampled_from([8, 24, 40]), causal=st.booleans(), scale=st.sampled_from([None, 0.05, 2.0]),
       seed=st.integers(0, 2**16))
def test_drawn_shapes_match_torch(B, H, n_q, n_k, d, causal, scale, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = make((B, H, n_q, d), gen), make((B, H, n_k, d), gen), make((B, H, n_k, d), gen)
    check_against_torch(q, k, v, gen, is_causal=causal, scale=scale)


def test_large_logits_and_scale(gen):
    q, k, v = make((1, 1, 9, 16), gen, 30.0), make((1, 1, 12, 16), gen, 1.0), make((1, 1, 12, 16), gen)
    check_against_torch(q, k, v, gen, scale=0.3)


def test_leading_dims_other_than_batch_and_heads(gen):
    q, k, v = (make((3, 11, 8), gen) for _ in range(3))            # (batch, seq, dim)
    check_against_torch(q, k, v, gen, is_causal=True)
    q, k, v = (make((1, 2, 1, 5, 8), gen) for _ in range(3))       # two leading dims
    check_against_torch(q, k, v, gen)


def test_grouped_query_attention(gen):
    q = make((1, 4, 6, 8), gen)
    k, v = make((1, 2, 7, 8), gen), make((1, 2, 7, 8), gen)
    check_against_torch(q, k, v, gen, is_causal=True, enable_gqa=True)
    q, k, v = make((1, 4, 6, 8), gen), make((1, 4, 7, 8), gen), make((1, 1, 7, 8), gen)
    check_against_torch(q, k, v, gen, enable_gqa=True)             # key heads = query heads


def key_mask(shape, gen):
    """A random boolean attn_mask (True: the key takes part) that keeps key 0 everywhere, so
    that no row is fully masked (torch's math backend gives NaN there, the kernels 0)."""
    mask = torch.rand(shape, generator=gen) < 0.6
    mask[..., 0] = True
    return mask


@pytest.mark.parametrize("q_shape,kv_shape,mask_shape,gqa", [
    ((2, 2, 5, 8), (2, 2, 7, 8), (2, 1, 1, 7), False),   # a key padding mask per batch entry
    ((2, 3, 4, 24), (2, 3, 6, 24), (2, 3, 1, 6), False),  # per entry and head
    ((3, 6, 8), (3, 9, 8), (3, 1, 9), False),            # (batch, seq, dim) inputs
    ((2, 5, 8), (2, 9, 8), (9,), False),                 # one mask broadcast to every entry
    ((2, 4, 5, 8), (2, 2, 6, 8), (2, 1, 1, 6), True),     # GQA
])
def test_key_padding_attn_mask_matches_torch(gen, q_shape, kv_shape, mask_shape, gqa):
    """A boolean attn_mask that masks whole keys runs as the API's key_padding_mask (padding
    keys gathered out): output and gradients equal torch's with the same mask."""
    q, k, v = make(q_shape, gen), make(kv_shape, gen), make(kv_shape, gen)
    check_against_torch(q, k, v, gen, attn_mask=key_mask(mask_shape, gen), enable_gqa=gqa)


def test_key_padding_attn_mask_with_is_causal(gen):
    """Padding at the end with torch's top-left causal mask, N_q != N_k (torch takes no
    attn_mask with is_causal: the reference gets the two masks combined)."""
    q, k, v = make((2, 2, 6, 8), gen), make((2, 2, 9, 8), gen), make((2, 2, 9, 8), gen)
    mask = (torch.arange(9) < torch.tensor([9, 4])[:, None])[:, None, None]
    both = mask & torch.ones(6, 9, dtype=torch.bool).tril()
    check_against_torch(q, k, v, gen, reference=dict(attn_mask=both), attn_mask=mask,
                        is_causal=True)


def test_an_entry_of_nothing_but_padding_gives_zeros(gen):
    """Where torch's math backend returns NaN (rows that keep no key), the kernels give o = 0
    and zero gradients; the other entries are torch's."""
    q, k, v = make((2, 1, 3, 8), gen), make((2, 1, 5, 8), gen), make((2, 1, 5, 8), gen)
    mask = torch.tensor([[True, False, True, True, False], [False] * 5])[:, None, None]
    o = nft.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    o.backward(torch.ones_like(o))
    assert torch.all(o[1] == 0) and torch.all(q.grad[1] == 0) and torch.all(k.grad[1] == 0)
    o_ref, _ = sdpa_float64(q[:1], k[:1], v[:1], attn_mask=mask[:1])
    assert_close(o[:1].detach().numpy(), o_ref.detach().numpy(), OUT_TOL)


@pytest.mark.parametrize("mask,gqa,error,match", [
    (torch.zeros(1, 1, 1, 4), False, NotImplementedError, "additive bias"),
    (torch.ones(1, 1, 4, 4, dtype=torch.bool), False, NotImplementedError, "varies along the queries"),
    (torch.ones(1, 2, 1, 4, dtype=torch.bool), True, NotImplementedError, "varies along the heads"),
    (torch.ones(3, 1, 1, 4, dtype=torch.bool), False, ValueError, "does not broadcast"),
    (torch.ones(1, 1, 1, 5, dtype=torch.bool), False, NotImplementedError, "N_k = 4"),
    ([[True] * 4], False, TypeError, "attn_mask must be a torch.Tensor"),
])
def test_other_attn_masks_are_refused(gen, mask, gqa, error, match):
    q = make((1, 2, 4, 8), gen)
    kv = make((1, 1, 4, 8), gen) if gqa else q
    with pytest.raises(error, match=match):
        nft.scaled_dot_product_attention(q, kv, kv, attn_mask=mask, enable_gqa=gqa)


class TinyAttention(torch.nn.Module):
    """One causal self-attention layer, with the attention function as a parameter."""

    def __init__(self, attend, width=16, heads=2):
        super().__init__()
        self.attend, self.heads = attend, heads
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = self.attend(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(B, N, C))


def test_torch_compile_fullgraph(gen):
    """No graph break: dynamo traces the wrapper and the custom ops (their fake kernels), AOT
    autograd the backward; compiled and eager agree with torch's own attention."""
    torch.manual_seed(0)
    model = TinyAttention(nft.scaled_dot_product_attention)
    reference = TinyAttention(torch.nn.functional.scaled_dot_product_attention)
    reference.load_state_dict(model.state_dict())
    x = torch.randn(1, 10, 16, generator=gen)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    y = compiled(x)
    y_ref = reference(x)
    assert_close(y.detach().numpy(), y_ref.detach().numpy(), OUT_TOL)
    y.square().sum().backward()
    y_ref.square().sum().backward()
    for p, p_ref in zip(model.parameters(), reference.parameters()):
        assert_close(p.grad.numpy(), p_ref.grad.numpy(), GRAD_TOL)


def test_torch_compile_fullgraph_with_a_padding_mask(gen):
    """The attn_mask's conversion to a key padding mask traces too (no graph break)."""
    q, k, v = (make((2, 2, 5, 8), gen) for _ in range(3))
    mask = torch.tensor([[1, 1, 0, 1, 0], [1, 0, 1, 1, 1]], dtype=torch.bool)[:, None, None]
    attend = torch.compile(lambda q, k, v, m: nft.scaled_dot_product_attention(q, k, v, attn_mask=m),
                           fullgraph=True, backend="aot_eager")
    o = attend(q, k, v, mask)
    o_ref, leaves = sdpa_float64(q, k, v, attn_mask=mask)
    assert_close(o.detach().numpy(), o_ref.detach().numpy(), OUT_TOL)
    o.sum().backward()
    o_ref.sum().backward()
    for x, x_ref in zip((q, k, v), leaves):
        assert_close(x.grad.numpy(), x_ref.grad.numpy(), GRAD_TOL)


def test_opcheck_of_the_custom_ops(gen):
    """torch.library.opcheck: schema, fake tensors, autograd registration, AOT dispatch."""
    q, k, v = (make((1, 1, 5, 8), gen) for _ in range(3))
    torch.library.opcheck(nft.attention_forward, (q, k, v, 1 / math.sqrt(8), True, 0))
    o, lse = nft.attention_forward(q.detach(), k.detach(), v.detach(), 0.5, False, 0)
    do = torch.randn(o.shape, generator=gen)
    torch.library.opcheck(nft.attention_backward,
                          (do, q.detach(), k.detach(), v.detach(), o, lse, 0.5, False, 0))
    seed = nft.dropout_seed(gen)
    torch.library.opcheck(nft.attention_forward, (q, k, v, 0.5, False, 0, 0.2, seed))
    o, lse = nft.attention_forward(q.detach(), k.detach(), v.detach(), 0.5, False, 0, 0.2, seed)
    torch.library.opcheck(nft.attention_backward,
                          (do, q.detach(), k.detach(), v.detach(), o, lse, 0.5, False, 0, 0.2, seed))
    torch.library.opcheck(nft.attention_forward, (q, k, v, 0.5, True, 0),
                          dict(window_left=2, window_right=0))
    o, lse = nft.attention_forward(q.detach(), k.detach(), v.detach(), 0.5, True, 0,
                                   window_left=2, window_right=0)
    torch.library.opcheck(nft.attention_backward,
                          (do, q.detach(), k.detach(), v.detach(), o, lse, 0.5, True, 0),
                          dict(window_left=2, window_right=0))
    pad = torch.tensor([[False, True, False, False, True]])
    torch.library.opcheck(nft.attention_forward, (q, k, v, 0.5, False, 0),
                          dict(key_padding_mask=pad))
    o, lse = nft.attention_forward(q.detach(), k.detach(), v.detach(), 0.5, False, 0,
                                   key_padding_mask=pad)
    torch.library.opcheck(nft.attention_backward,
                          (do, q.detach(), k.detach(), v.detach(), o, lse, 0.5, False, 0),
                          dict(key_padding_mask=pad))


def test_dropout_is_the_kernels_mask_from_a_seed_torch_draws(gen):
    """dropout_p > 0: the seed comes from torch's default generator (repeatable under
    torch.manual_seed); output and gradients equal the API's with that seed (the backward
    regenerates the forward's mask), and a float64 reference with the mask the kernels return."""
    import numba_flash as nf
    from numba_flash import reference as ref

    q, k, v = (make((1, 2, 20, 8), gen) for _ in range(3))
    do = torch.randn(1, 2, 20, 8, generator=gen)
    torch.manual_seed(7)
    o = nft.scaled_dot_product_attention(q, k, v, dropout_p=0.25, is_causal=True)
    o.backward(do)
    torch.manual_seed(7)
    seed = int(nft.dropout_seed())
    args = [x.detach().numpy() for x in (q, k, v)]
    o_api, lse, keep = nf.flash_attention(*args, causal=True, diagonal=0, dropout_p=0.25, dropout_seed=seed,
                                          return_lse=True, return_dropout_mask=True)
    np.testing.assert_array_equal(o.detach().numpy(), o_api)
    grads = nf.flash_attention_backward(do.numpy(), *args, o_api, lse, causal=True, diagonal=0,
                                        dropout_p=0.25, dropout_seed=seed)
    for x, g in zip((q, k, v), grads):
        np.testing.assert_array_equal(x.grad.numpy(), g)
    assert 0.5 < keep.mean() < 0.95 and not keep.all()
    z = ref.dropout_factors(keep, 0.25)
    o_ref = ref.attention_forward(*(a.astype(np.float64) for a in args), causal=True, diagonal=0, dropout=z)[0]
    assert_close(o.detach().numpy(), o_ref, OUT_TOL)
    torch.manual_seed(8)
    other = nft.scaled_dot_product_attention(q, k, v, dropout_p=0.25, is_causal=True)
    assert not torch.equal(other, o)                                   # another seed, another mask
    torch.manual_seed(7)
    assert torch.equal(nft.scaled_dot_product_attention(q, k, v, dropout_p=0.25, is_causal=True), o)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(attn_mask=torch.ones(4, 4, dtype=torch.bool)), NotImplementedError, "attn_mask"),
    (dict(dropout_p=1.0), ValueError, "dropout_p must be a float in"),
    (dict(dropout_p=-0.1), ValueError, "dropout_p must be a float in"),
])
def test_unsupported_arguments_raise(gen, kwargs, error, match):
    q = make((1, 1, 4, 8), gen)
    with pytest.raises(error, match=match):
        nft.scaled_dot_product_attention(q, q, q, **kwargs)


@pytest.mark.parametrize("dtype,name", [(torch.float64, "torch.float64"), (torch.int16, "torch.int16")])
def test_other_dtypes_are_named_and_refused(dtype, name):
    q = torch.zeros(1, 1, 4, 8, dtype=dtype)
    with pytest.raises(NotImplementedError, match=name):
        nft.scaled_dot_product_attention(q, q, q)


def test_shape_errors_name_the_argument(gen):
    q = make((1, 2, 4, 8), gen)
    with pytest.raises(NotImplementedError, match="broadcasting is not supported.*enable_gqa"):
        nft.scaled_dot_product_attention(q, make((1, 1, 4, 8), gen), make((1, 1, 4, 8), gen))
    with pytest.raises(NotImplementedError, match="empty inputs"):
        nft.scaled_dot_product_attention(q, make((1, 2, 0, 8), gen), make((1, 2, 0, 8), gen))
    with pytest.raises(NotImplementedError, match="scale=-1.0"):
        nft.scaled_dot_product_attention(q, q, q, scale=-1.0)
    with pytest.raises(ValueError, match="heads are dim -3"):
        nft.scaled_dot_product_attention(make((4, 8), gen), make((4, 8), gen), make((4, 8), gen),
                                         enable_gqa=True)
    with pytest.raises(NotImplementedError, match="head dims"):
        nft.scaled_dot_product_attention(q, q, make((1, 2, 4, 16), gen))
    with pytest.raises(ValueError, match="multiple"):
        nft.scaled_dot_product_attention(make((1, 3, 4, 8), gen), q, q, enable_gqa=True)



@pytest.mark.parametrize("q_shape,kv_shape,causal,logits", [
    ((1, 2, 19, 40), (1, 2, 23, 40), True, 30.0),     # N_q != N_k, top-left causal, logits x30
    ((2, 4, 9, 24), (2, 2, 9, 24), False, 1.0),       # GQA
])
def test_fp16x3_is_the_apis_forward_without_autograd(gen, q_shape, kv_shape, causal, logits):
    """algorithm="fa2_fp16x3" under no_grad / inference_mode: o is the API's fa2_fp16x3 output
    bit for bit, and not fa2's."""
    import numba_flash as nf

    q, k, v = (make(s, gen, x).detach() for s, x in ((q_shape, logits), (kv_shape, 1.0), (kv_shape, 1.0)))
    gqa = q_shape[1] != kv_shape[1]
    args = [x.numpy() for x in (q, k, v)]
    kwargs = dict(causal=causal, diagonal=0 if causal else None, softmax_scale=1 / math.sqrt(q_shape[-1]))
    o_api = nf.flash_attention(*args, algorithm="fa2_fp16x3", **kwargs)
    with torch.no_grad():
        o = nft.scaled_dot_product_attention(q.requires_grad_(), k, v, is_causal=causal,
                                             enable_gqa=gqa, algorithm="fa2_fp16x3")
    np.testing.assert_array_equal(o.numpy(), o_api)
    assert not np.array_equal(o_api, nf.flash_attention(*args, **kwargs))
    with torch.inference_mode():
        o = nft.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa,
                                             algorithm="fa2_fp16x3")
    np.testing.assert_array_equal(o.numpy(), o_api)


def test_fp16x3_argument_errors(gen):
    q = make((1, 1, 4, 8), gen)
    with pytest.raises(ValueError, match="algorithm must be one of"):
        nft.scaled_dot_product_attention(q, q, q, algorithm="fa1")
    h = q.detach().half()
    with pytest.raises(ValueError, match="algorithm='fa2_fp16x3' takes float32 inputs.*got float16"):
        nft.scaled_dot_product_attention(h, h, h, algorithm="fa2_fp16x3")
    q = q.detach()
    torch.library.opcheck(nft.attention_forward, (q, q, q, 0.5, True, 0), {"algorithm": "fa2_fp16x3"},
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))
    o, lse = nft.attention_forward(q, q, q, 0.5, True, 0, algorithm="fa2_fp16x3")
    torch.library.opcheck(nft.attention_backward, (q, q, q, q, o, lse, 0.5, True, 0),
                          {"algorithm": "fa2_fp16x3"}, test_utils=("test_schema", "test_faketensor"))


# ---- flash_attn_varlen_func: flash-attention's varlen interface with autograd ----------------
def cu_seqlens(lens, device="cpu"):
    return torch.tensor([0, *np.cumsum(lens)], dtype=torch.int32, device=device)


def varlen_reference(q, k, v, lens_q, lens_k, causal, window=(-1, -1)):
    """torch's math backend in float64, sequence by sequence (bottom-right causal and window
    masks, as flash-attention's), packed again: (o, leaves); rows that see no key give 0."""
    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    group = q.shape[1] // k.shape[1]
    outs = []
    for i, (n_q, n_k) in enumerate(zip(lens_q, lens_k)):
        a, c = sum(lens_q[:i]), sum(lens_k[:i])
        qi = leaves[0][a:a + n_q].transpose(0, 1)[None]
        ki, vi = (x[c:c + n_k].transpose(0, 1)[None].repeat_interleave(group, 1) for x in leaves[1:])
        rows = torch.arange(n_q, device=q.device)[:, None] + n_k - n_q
        cols = torch.arange(n_k, device=q.device)[None]
        seen = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device)
        left, right = window
        if causal or right >= 0:
            seen &= cols <= rows + (0 if causal else right)
        if left >= 0:
            seen &= cols >= rows - left
        if n_q and n_k:
            with sdpa_kernel(SDPBackend.MATH):
                oi = torch.nn.functional.scaled_dot_product_attention(qi, ki, vi, attn_mask=seen)
            oi = torch.where(seen.any(1)[:, None], oi, 0.0)     # rows that see no key: 0
        else:
            oi = qi.new_zeros(qi.shape) * qi.sum()
        outs.append(oi[0].transpose(0, 1))
    return torch.cat(outs), leaves


@pytest.mark.parametrize("H,H_kv,lens_q,lens_k,causal,window", [
    (2, 2, [5, 0, 9, 3], [7, 4, 9, 0], False, (-1, -1)),   # a query-less and a key-less sequence
    (4, 2, [4, 9, 1], [6, 9, 17], True, (-1, -1)),          # GQA, causal bottom-right
    (2, 1, [8, 12], [8, 5], False, (3, 1)),                 # MQA, a window; rows that see no key
])
def test_varlen_func_matches_torch_per_sequence(gen, H, H_kv, lens_q, lens_k, causal, window):
    q = make((sum(lens_q), H, 8), gen)
    k, v = make((sum(lens_k), H_kv, 8), gen), make((sum(lens_k), H_kv, 8), gen)
    o = fa.flash_attn_varlen_func(q, k, v, cu_seqlens(lens_q), cu_seqlens(lens_k), max(lens_q), max(lens_k),
                                   causal=causal, window_size=window)
    o_ref, leaves = varlen_reference(q, k, v, lens_q, lens_k, causal, window)
    assert o.shape == q.shape
    assert_like_reference(o, o_ref, (q, k, v), leaves, gen)


@pytest.mark.parametrize("B,H,H_kv,n_q,n_k,causal,window", [
    (2, 2, 2, 9, 13, True, (-1, -1)),     # bottom-right causal, N_q < N_k
    (1, 4, 1, 12, 12, False, (3, 2)),     # MQA, a window
    (2, 2, 1, 7, 5, True, (2, 0)),        # causal with a window, N_q > N_k: rows that see no key
])
def test_flash_attn_func_matches_torch(gen, B, H, H_kv, n_q, n_k, causal, window):
    """flash-attention's layout (B, N, H, d) and semantics: the packed per-sequence reference
    on the same rows."""
    q = make((B, n_q, H, 8), gen)
    k, v = make((B, n_k, H_kv, 8), gen), make((B, n_k, H_kv, 8), gen)
    o = fa.flash_attn_func(q, k, v, causal=causal, window_size=window)
    assert o.shape == q.shape and o.is_contiguous()
    packed = [x.reshape(-1, *x.shape[2:]) for x in (q, k, v)]
    o_ref, leaves = varlen_reference(*packed, [n_q] * B, [n_k] * B, causal, window)
    assert_like_reference(o, o_ref.reshape(o.shape), (q, k, v), leaves, gen)


@pytest.mark.parametrize("options", [dict(dropout_p=0.2, window_size=(3, 0)), dict(deterministic=True)])
def test_flash_attn_func_is_the_apis(gen, options):
    """Output and gradients equal the API's on the (B, H, N, d) copies, causal bottom-right:
    with dropout (and a window), for the seed drawn from torch's generator; deterministic=True
    reaches the backward."""
    import numba_flash as nf

    q, k, v = (make((2, n, 2, 8), gen) for n in (6, 9, 9))
    do = torch.randn(2, 6, 2, 8, generator=gen)
    torch.manual_seed(5)
    o = fa.flash_attn_func(q, k, v, causal=True, **options)
    o.backward(do)
    torch.manual_seed(5)
    api = dict(window=options.get("window_size"))
    if "dropout_p" in options:
        api.update(dropout_p=0.2, dropout_seed=int(nft.dropout_seed()))
    args = [x.detach().transpose(1, 2).contiguous().numpy() for x in (q, k, v)]
    o_api, lse = nf.flash_attention(*args, causal=True, return_lse=True, **api)
    np.testing.assert_array_equal(o.detach().numpy(), o_api.swapaxes(1, 2))
    grads = nf.flash_attention_backward(do.transpose(1, 2).contiguous().numpy(), *args, o_api, lse,
                                        causal=True, deterministic=options.get("deterministic", False),
                                        **api)
    for x, g in zip((q, k, v), grads):
        np.testing.assert_array_equal(x.grad.numpy(), g.swapaxes(1, 2))


@pytest.mark.parametrize("options,api_options", [
    (dict(dropout_p=0.3), dict(dropout_p=0.3)),     # the seed: drawn from torch's generator
    (dict(deterministic=True), dict(deterministic=True)),
])
def test_varlen_func_dropout_and_deterministic_are_the_apis(gen, options, api_options):
    """Output and gradients equal the API's: with dropout, for the seed drawn from torch's
    generator (each sequence's mask regenerated by the backward); deterministic=True reaches
    the backward."""
    import numba_flash as nf

    q, k, v = (make((13, 2, 8), gen) for _ in range(3))
    do = torch.randn(13, 2, 8, generator=gen)
    cu = cu_seqlens([9, 4])
    torch.manual_seed(3)
    o = fa.flash_attn_varlen_func(q, k, v, cu, cu, 9, 9, causal=True, **options)
    o.backward(do)
    torch.manual_seed(3)
    if "dropout_p" in api_options:
        api_options = dict(api_options, dropout_seed=int(nft.dropout_seed()))
    args = [x.detach().numpy() for x in (q, k, v)]
    forward = {k: v for k, v in api_options.items() if k != "deterministic"}
    o_api, lse = nf.flash_attention_varlen(*args, cu.numpy(), cu.numpy(), 9, 9, causal=True,
                                           return_lse=True, **forward)
    np.testing.assert_array_equal(o.detach().numpy(), o_api)
    grads = nf.flash_attention_varlen_backward(do.numpy(), *args, o_api, lse, cu.numpy(), cu.numpy(),
                                               9, 9, causal=True, **api_options)
    for x, g in zip((q, k, v), grads):
        np.testing.assert_array_equal(x.grad.numpy(), g)


def test_varlen_func_compiles_and_its_ops_pass_opcheck(gen):
    lens = [3, 5]
    q, k, v = (make((8, 2, 8), gen) for _ in range(3))
    cu = cu_seqlens(lens)
    attend = torch.compile(lambda q, k, v: fa.flash_attn_varlen_func(q, k, v, cu, cu, 5, 5, causal=True),
                           fullgraph=True, backend="aot_eager")
    o = attend(q, k, v)
    o_ref, _ = varlen_reference(q, k, v, lens, lens, True)
    assert_close(o.detach().numpy(), o_ref.detach().numpy(), OUT_TOL)
    torch.library.opcheck(fa.varlen_forward, (q, k, v, cu, cu, 5, 5, 0.5, True))
    o, lse = fa.varlen_forward(q.detach(), k.detach(), v.detach(), cu, cu, 5, 5, 0.5, True)
    do = torch.randn(o.shape, generator=gen)
    torch.library.opcheck(fa.varlen_backward,
                          (do, q.detach(), k.detach(), v.detach(), o, lse, cu, cu, 5, 5, 0.5, True))


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(softcap=30.0), NotImplementedError, "softcap"),
    (dict(alibi_slopes=torch.ones(2)), NotImplementedError, "alibi_slopes"),
    (dict(return_attn_probs=True), NotImplementedError, "return_attn_probs"),
    (dict(window_size=4), ValueError, "window_size must be a pair"),
    (dict(dropout_p=1.0), ValueError, "dropout_p must be a float in"),
    (dict(cu_seqlens_q=[0, 8]), TypeError, "cu_seqlens_q must be a torch.Tensor"),
    (dict(max_seqlen_q=4), ValueError, "max_seqlen_q must be an int >= the longest"),
])
def test_varlen_func_bad_arguments_raise(gen, kwargs, error, match):
    q = make((8, 2, 8), gen)
    args = dict(cu_seqlens_q=cu_seqlens([3, 5]), cu_seqlens_k=cu_seqlens([3, 5]), max_seqlen_q=5, max_seqlen_k=5)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        fa.flash_attn_varlen_func(q, q, q, **args)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(softcap=30.0), NotImplementedError, "softcap"),
    (dict(window_size=(2,)), ValueError, "window_size must be a pair"),
    (dict(dropout_p=-0.5), ValueError, "dropout_p must be a float in"),
    (dict(k=torch.zeros(1, 4, 8)), ValueError, "k must be \\(batch, seqlen, heads, head_dim\\)"),
])
def test_flash_attn_func_bad_arguments_raise(gen, kwargs, error, match):
    q = make((1, 4, 2, 8), gen)
    args = dict(q=q, k=q, v=q)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        fa.flash_attn_func(**args)


def test_packed_forms_are_the_unpacked_calls(gen):
    """flash-attention's qkv- and kv-packed functions, fixed-length and varlen: output and the
    packed tensor's gradient equal the unpacked call's on the same values, bit for bit."""
    qkv = make((2, 6, 3, 2, 8), gen)
    q, kv = make((2, 5, 2, 8), gen), make((2, 7, 2, 1, 8), gen)
    cu = cu_seqlens([4, 8])
    packed_qkv, packed_kv = make((12, 3, 2, 8), gen), make((12, 2, 2, 8), gen)
    calls = [
        (lambda t: fa.flash_attn_qkvpacked_func(t, causal=True), qkv,
         lambda t: fa.flash_attn_func(*t.unbind(2), causal=True)),
        (lambda t: fa.flash_attn_kvpacked_func(q, t, window_size=(2, 1)), kv,
         lambda t: fa.flash_attn_func(q, *t.unbind(2), window_size=(2, 1))),
        (lambda t: fa.flash_attn_varlen_qkvpacked_func(t, cu, 8, causal=True), packed_qkv,
         lambda t: fa.flash_attn_varlen_func(*t.unbind(1), cu, cu, 8, 8, causal=True)),
        (lambda t: fa.flash_attn_varlen_kvpacked_func(packed_qkv[:, 0], t, cu, cu, 8, 8), packed_kv,
         lambda t: fa.flash_attn_varlen_func(packed_qkv[:, 0], *t.unbind(1), cu, cu, 8, 8)),
    ]
    for packed_call, x, unpacked_call in calls:
        grads = []
        for call in (packed_call, unpacked_call):
            leaf = x.detach().clone().requires_grad_()
            o = call(leaf)
            o.backward(torch.ones_like(o))
            grads.append((o.detach(), leaf.grad))
        assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])
    with pytest.raises(ValueError, match="qkv must hold 3 tensors packed along dim 2"):
        fa.flash_attn_qkvpacked_func(make((2, 6, 2, 2, 8), gen))
