"""``algorithm="fa2_fp16x3"`` on the GPU (``pytest -m gpu``): o within flash-attention's rule
(2x a plain fp32 implementation's error against float64, torch with TF32 off) and its own
backward's dq, dk, dv within 3x (plus 1e-6 absolute, as the fp32 tests) at awkward shapes,
logits x30, windows and GQA included (d = 256: tests/test_gpu_fp16x3_d256.py); a replayed
launch plan (``numba_flash.plans``) returns what the checked path returns, bit for bit."""
import math

import pytest

import numba_flash as nf
from numba_flash import plans

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def _attention(q, k, v, causal):
    n_q, n_k = q.shape[2], k.shape[2]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        r = torch.arange(n_q, device=q.device)[:, None]
        c = torch.arange(n_k, device=q.device)[None, :]
        s = s.masked_fill(c > r + (n_k - n_q), -math.inf)
    return torch.softmax(s, -1).nan_to_num(0) @ v


def _rel(x, ref):
    return ((x.double() - ref).abs().max() / ref.abs().max()).item()


def _inputs(B, H, n_q, n_k, d, scale=1.0, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn((B, H, n, d), device="cuda", generator=g) for n in (n_q, n_k, n_k))
    return q * scale, k, v


SHAPES = [(2, 2, 255, 97, 64, False, 1.0), (1, 2, 4099, 4099, 64, True, 1.0),
          (2, 2, 300, 301, 40, False, 30.0), (2, 2, 255, 97, 111, False, 1.0),
          (1, 1, 1000, 1000, 128, False, 1.0), (1, 2, 97, 4099, 80, True, 1.0),
          (1, 2, 1, 17, 8, False, 1.0)]

#: The backward's shapes (B, H, N_q, N_k, d, causal, logit scale): fewer than the forward's (a
#: backward at each of those shapes took the GPU run past 9 minutes of compiling, 2026-12-06);
#: d = 256 in tests/test_gpu_fp16x3_d256.py, whose kernels alone compile for minutes.
BACKWARD_SHAPES = [(2, 2, 255, 97, 64, False, 1.0), (1, 2, 4099, 4099, 64, True, 1.0),
                   (2, 2, 300, 301, 128, False, 30.0), (1, 2, 97, 4099, 80, True, 1.0)]

#: The kernels these tests launch (conftest builds them first, in parallel processes).
KERNELS = ([nf.KernelConfig(d=d, n_q=n_q, n_k=n_k, causal=causal, forward="fa2_fp16x3", backward=None)
            for _, _, n_q, n_k, d, causal, _ in SHAPES]
           + [nf.KernelConfig(d=d, n_q=n_q, n_k=n_k, causal=causal, forward="fa2_fp16x3",
                              backward="fa2_fp16x3")
              for _, _, n_q, n_k, d, causal, _ in BACKWARD_SHAPES]
           + [nf.KernelConfig(d=64, n_q=300, causal=True, forward="fa2_fp16x3", backward=None),
              nf.KernelConfig(d=64, n_q=300, forward="fa2_fp16x3", backward="fa2_fp16x3",
                              window=(40, 7), group=2)])


def _check_forward(q, k, v, causal):
    torch.backends.cuda.matmul.allow_tf32 = False
    o = nf.flash_attention(q, k, v, causal=causal, algorithm="fa2_fp16x3")
    ref = _attention(q.double(), k.double(), v.double(), causal)
    plain = _attention(q, k, v, causal)
    assert _rel(o, ref) <= 2 * _rel(plain, ref) + 1e-7, (_rel(o, ref), _rel(plain, ref))


@pytest.mark.parametrize("B,H,n_q,n_k,d,causal,scale", SHAPES)
def test_forward_within_the_rule(B, H, n_q, n_k, d, causal, scale):
    _check_forward(*_inputs(B, H, n_q, n_k, d, scale), causal)


def test_replays_equal_the_checked_path():
    plans.PLANS.clear()
    for seed in range(3):     # the first call records; the next two replay on new tensors
        q, k, v = _inputs(2, 4, 300, 300, 64, seed=seed)
        o, lse = nf.flash_attention(q, k, v, causal=True, return_lse=True, algorithm="fa2_fp16x3")
        kept = dict(plans.PLANS)
        plans.PLANS.clear()
        o_ref, lse_ref = nf.flash_attention(q, k, v, causal=True, return_lse=True, algorithm="fa2_fp16x3")
        plans.PLANS.update(kept)
        torch.testing.assert_close(o, o_ref, rtol=0, atol=0)
        torch.testing.assert_close(lse, lse_ref, rtol=0, atol=0)


def _gradients(q, k, v, do, causal, dtype, **mask):
    xs = [x.detach().to(dtype).clone().requires_grad_() for x in (q, k, v)]
    _attention_masked(*xs, causal, **mask).backward(do.to(dtype))
    return [x.grad for x in xs]


def _attention_masked(q, k, v, causal, window=None, group=1):
    """_attention, with k, v's heads repeated over ``group`` query heads and a window (left,
    right) about the bottom-right diagonal."""
    if group > 1:
        k, v = (x.repeat_interleave(group, dim=1) for x in (k, v))
    if window is None:
        return _attention(q, k, v, causal)
    n_q, n_k = q.shape[2], k.shape[2]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    r = torch.arange(n_q, device=q.device)[:, None] + (n_k - n_q)
    c = torch.arange(n_k, device=q.device)[None, :]
    s = s.masked_fill((c > r + window[1]) | (c < r - window[0]), -math.inf)
    return torch.softmax(s, -1).nan_to_num(0) @ v


def _check_backward(q, k, v, causal, **mask):
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(9)
    do = torch.randn(q.shape, device="cuda", generator=g)
    options = dict(causal=causal, algorithm="fa2_fp16x3")
    if "window" in mask:
        options["window"] = mask["window"]
    o, lse = nf.flash_attention(q, k, v, return_lse=True, **options)
    grads = nf.flash_attention_backward(do, q, k, v, o, lse, **options)
    ref = _gradients(q, k, v, do, causal, torch.float64, **mask)
    plain = _gradients(q, k, v, do, causal, torch.float32, **mask)
    for name, x, r, p in zip(("dq", "dk", "dv"), grads, ref, plain):
        assert _rel(x, r) <= 3 * _rel(p, r) + 1e-6, (name, _rel(x, r), _rel(p, r))


@pytest.mark.parametrize("B,H,n_q,n_k,d,causal,scale", BACKWARD_SHAPES)
def test_backward_within_the_rule(B, H, n_q, n_k, d, causal, scale):
    _check_backward(*_inputs(B, H, n_q, n_k, d, scale), causal)


def test_backward_with_a_window_and_grouped_heads():
    q, _, _ = _inputs(1, 4, 300, 300, 64, seed=3)
    _, k, v = _inputs(1, 2, 300, 300, 64, seed=4)
    _check_backward(q, k, v, False, window=(40, 7), group=2)
