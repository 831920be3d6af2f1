"""Launch plans of torch calls (``api._PLANS``) on the GPU (``pytest -m gpu``): a repeated call
takes its plan and returns what the checked path does; a call that differs in anything the
checks read (a shape, a dtype, an option's value or type) is checked again; inputs the plan
cannot take (non-contiguous, requiring grad, another stream) never reach one."""
import numpy as np
import pytest

import numba_flash as nf
from numba_flash import api

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def _inputs(dtype, shape=(2, 4, 300, 64)):
    g = torch.Generator(device="cuda").manual_seed(0)
    return [torch.randn(shape, device="cuda", generator=g).to(dtype) for _ in range(4)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_repeated_calls_take_their_plan(dtype):
    q, k, v, do = _inputs(dtype)
    api._PLANS.clear()
    o1, lse1 = nf.flash_attention(q, k, v, causal=True, return_lse=True)
    assert len(api._PLANS) == 1
    o2, lse2 = nf.flash_attention(q, k, v, causal=True, return_lse=True)
    assert len(api._PLANS) == 1
    torch.testing.assert_close(o1, o2, rtol=0, atol=0)
    torch.testing.assert_close(lse1, lse2, rtol=0, atol=0)
    if dtype == torch.float16:       # (the fp32 backward takes numba arrays: no plan)
        g1 = nf.flash_attention_backward(do, q, k, v, o1, lse1, causal=True)
        g2 = nf.flash_attention_backward(do, q, k, v, o1, lse1, causal=True)
        assert len(api._PLANS) == 2
        for a, b in zip(g1, g2):     # (dq by atomics: equal up to their order)
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


def test_calls_that_differ_are_checked_again():
    q, k, v, _ = _inputs(torch.float16)
    api._PLANS.clear()
    nf.flash_attention(q, k, v, causal=True)
    with pytest.raises(TypeError, match="causal must be True or False"):
        nf.flash_attention(q, k, v, causal=1)
    with pytest.raises(ValueError, match="softmax_scale"):
        nf.flash_attention(q, k, v, causal=True, softmax_scale=-1.0)
    with pytest.raises(TypeError, match="mixed dtypes"):
        nf.flash_attention(q, k.float(), v, causal=True)
    assert len(api._PLANS) == 1


def test_inputs_a_plan_cannot_take_never_reach_one():
    q, k, v, _ = _inputs(torch.float16)
    assert api._plan_key("forward", (q.transpose(2, 3), k, v), ()) is None
    assert api._plan_key("forward", (q.requires_grad_(), k, v), ()) is None
    q = q.detach()
    assert api._plan_key("forward", (q, k, v), ([1, 2],)) is None          # unhashable option
    with torch.cuda.stream(torch.cuda.Stream()):
        assert api._plan_key("forward", (q, k, v), ()) is None
    with nf.poison_outputs():
        assert api._plan_key("forward", (q, k, v), ()) is None
    assert api._plan_key("forward", (q.cpu(), k, v), ()) is None
    assert api._plan_key("forward", (np.zeros(3), k, v), ()) is None
