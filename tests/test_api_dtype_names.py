"""What the NumPy-level API says of inputs it cannot take: torch tensors that need autograd or
live on the CPU, and element types named as their users know them (not '|V2')."""
import numpy as np
import pytest

import numba_flash as nf


class BfloatDeviceArray:
    """A device array as ``__cuda_array_interface__`` describes a bfloat16 one (cupy, jax)."""

    shape = (1, 1, 4, 8)
    __cuda_array_interface__ = {"shape": shape, "typestr": "<V2", "data": (0, False), "version": 3}


def test_unnamed_two_byte_type_is_called_what_it_likely_is():
    x = BfloatDeviceArray()
    with pytest.raises(TypeError, match="q has dtype an unnamed 2-byte type.*bfloat16"):
        nf.flash_attention(x, x, x)


def test_numpy_names():
    q = np.zeros((1, 1, 4, 8), np.int16)
    with pytest.raises(TypeError, match="q has dtype int16; the kernels take float32, float16 or bfloat16"):
        nf.flash_attention(q, q, q)
    lse = np.zeros((1, 1, 4), np.float16)
    q = q.astype(np.float16)
    with pytest.raises(TypeError, match="lse has dtype float16; it must be float32"):
        nf.flash_attention_backward(q, q, q, q, q, lse)


def test_torch_tensors_the_api_cannot_take():
    torch = pytest.importorskip("torch")
    q = torch.zeros(1, 1, 4, 8, requires_grad=True)
    with pytest.raises(TypeError, match="q requires grad.*numba_flash.torch.scaled_dot_product_attention"):
        nf.flash_attention(q, q, q)
    with pytest.raises(TypeError, match="q is a CPU torch tensor"):
        nf.flash_attention(q.detach(), q.detach(), q.detach())
