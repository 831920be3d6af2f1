"""Launch plans of torch calls (``numba_flash.plans``) on the GPU (``pytest -m gpu``): a repeated
call replays its plan and returns what the checked path returns (with dropout, whatever its
seed); a call that differs in anything
the checks read (a shape, a dtype, an option's value or type) is checked again; inputs a plan
cannot take (non-contiguous, requiring grad, another stream, poisoned outputs) never reach one."""
import numpy as np
import pytest

import numba_flash as nf
from numba_flash import plans

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def _inputs(dtype, shape=(2, 4, 300, 64), seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(shape, device="cuda", generator=g).to(dtype) for _ in range(4)]


def _checked(fn, *args, **kw):
    """fn on the checked path: with no plan kept, the call is checked and records its launches
    (launched through ``launch.launch_tensors``, not replayed); the plans are put back after."""
    kept = dict(plans.PLANS)
    plans.PLANS.clear()
    try:
        return fn(*args, **kw)
    finally:
        plans.PLANS.clear()
        plans.PLANS.update(kept)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_replays_equal_the_checked_path(dtype):
    plans.PLANS.clear()
    for seed in range(3):     # the first call records; the next two replay on new tensors
        q, k, v, do = _inputs(dtype, seed=seed)
        o, lse = nf.flash_attention(q, k, v, causal=True, return_lse=True)
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=True)
        assert len(plans.PLANS) == 2
        o_ref, lse_ref = _checked(nf.flash_attention, q, k, v, causal=True, return_lse=True)
        torch.testing.assert_close(o, o_ref, rtol=0, atol=0)
        torch.testing.assert_close(lse, lse_ref, rtol=0, atol=0)
        refs = _checked(nf.flash_attention_backward, do, q, k, v, o, lse, causal=True)
        for a, b in zip(grads, refs):      # (dq by atomics: equal up to their order)
            torch.testing.assert_close(a, b, rtol=2e-3 if dtype != torch.float32 else 1e-5, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_dropout_replays_take_each_calls_seed(dtype):
    """A call with dropout replays its plan whatever its seed (the seed's words are the plan's
    scalars), forward and backward, and returns what the checked path returns with that seed;
    a bad seed still raises on a replay."""
    plans.PLANS.clear()
    q, k, v, do = _inputs(dtype)
    for seed in (1, 2**33 + 5, 7):         # the first call records; the others replay
        opts = dict(causal=True, dropout_p=0.2, dropout_seed=seed)
        o, lse = nf.flash_attention(q, k, v, return_lse=True, **opts)
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, **opts)
        assert len(plans.PLANS) == 2
        o_ref, lse_ref = _checked(nf.flash_attention, q, k, v, return_lse=True, **opts)
        torch.testing.assert_close(o, o_ref, rtol=0, atol=0)
        torch.testing.assert_close(lse, lse_ref, rtol=0, atol=0)
        refs = _checked(nf.flash_attention_backward, do, q, k, v, o, lse, **opts)
        for a, b in zip(grads, refs):
            torch.testing.assert_close(a, b, rtol=2e-3 if dtype != torch.float32 else 1e-5, atol=1e-3)
    other = nf.flash_attention(q, k, v, causal=True, dropout_p=0.2, dropout_seed=8)
    assert not torch.equal(other, o)
    for _ in range(2):      # (a plan would drop the mask the second time)
        _, mask = nf.flash_attention(q, k, v, causal=True, return_dropout_mask=True)
        assert mask.all()
    with pytest.raises(ValueError, match="dropout_seed"):
        nf.flash_attention(q, k, v, causal=True, dropout_p=0.2, dropout_seed=-1)
    with pytest.raises(ValueError, match="dropout_seed"):
        nf.flash_attention(q, k, v, causal=True, dropout_p=0.2, dropout_seed=None)


def test_aliased_and_unaligned_inputs_replay_correctly():
    """A plan recorded with q = k = v replays with distinct tensors; an input 2 bytes off a
    16-byte boundary records its own replay (the half kernels' scalar loads)."""
    plans.PLANS.clear()
    q, k, v, _ = _inputs(torch.float16)
    nf.flash_attention(q, q, q)
    o = nf.flash_attention(q, k, v)
    torch.testing.assert_close(o, _checked(nf.flash_attention, q, k, v), rtol=0, atol=0)
    storage = torch.empty(q.numel() + 1, device="cuda", dtype=torch.float16)
    shifted = storage[1:].view(q.shape)
    shifted.copy_(q)
    assert shifted.data_ptr() % 16 and shifted.is_contiguous()
    o = nf.flash_attention(shifted, k, v)
    torch.testing.assert_close(o, _checked(nf.flash_attention, q, k, v), rtol=0, atol=0)
    assert len(plans.PLANS) == 1


def test_calls_that_differ_are_checked_again():
    q, k, v, _ = _inputs(torch.float16)
    plans.PLANS.clear()
    nf.flash_attention(q, k, v, causal=True)
    with pytest.raises(TypeError, match="causal must be True or False"):
        nf.flash_attention(q, k, v, causal=1)
    with pytest.raises(ValueError, match="softmax_scale"):
        nf.flash_attention(q, k, v, causal=True, softmax_scale=-1.0)
    with pytest.raises(TypeError, match="mixed dtypes"):
        nf.flash_attention(q, k.float(), v, causal=True)
    assert len(plans.PLANS) == 1


def test_inputs_a_plan_cannot_take_never_reach_one():
    q, k, v, _ = _inputs(torch.float16)
    assert plans.key("forward", (q, k, v), ()) is not None
    assert plans.key("forward", (q.transpose(2, 3), k, v), ()) is None
    assert plans.key("forward", (q.requires_grad_(), k, v), ()) is None
    q = q.detach()
    assert plans.key("forward", (q, k, v), ([1, 2],)) is None          # unhashable option
    with torch.cuda.stream(torch.cuda.Stream()):
        assert plans.key("forward", (q, k, v), ()) is None
    with nf.poison_outputs():
        assert plans.key("forward", (q, k, v), ()) is None
    assert plans.key("forward", (q.cpu(), k, v), ()) is None
    assert plans.key("forward", (np.zeros(3), k, v), ()) is None
