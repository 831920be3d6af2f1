"""Output allocation (numba_flash.memory): torch's caching allocator for calls on torch tensors,
but only where its stream-ordered reuse is ordered with our kernels' stream. A stand-in torch
module plays the GPU side: no GPU here, and torch is not a test dependency."""
import sys
import types

import numpy as np
import pytest

from numba_flash import memory


class Tensor:
    def __init__(self, shape=(2, 3), is_cuda=True):
        self.shape, self.is_cuda, self.device = shape, is_cuda, "cuda:0" if is_cuda else "cpu"


@pytest.fixture
def torch(monkeypatch):
    """A fake torch whose current stream handle is ``fake.stream`` (0: the legacy default)."""
    fake = types.ModuleType("torch")
    fake.Tensor, fake.float32, fake.stream, fake.allocated = Tensor, "torch.float32", 0, []
    fake.cuda = types.SimpleNamespace(current_stream=lambda device: types.SimpleNamespace(cuda_stream=fake.stream))

    def empty(shape, dtype, device):
        fake.allocated.append((shape, dtype, device))
        return Tensor(shape)

    fake.empty = empty
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(memory, "simulator_enabled", lambda: False)
    monkeypatch.setattr(memory.cuda, "as_cuda_array", lambda t: ("wrapped", t.shape), raising=False)
    monkeypatch.setattr(memory.cuda, "device_array", lambda shape, dtype: ("numba", shape), raising=False)
    return fake


def test_torch_inputs_on_the_default_stream_get_torch_outputs(torch):
    out = memory.Memory().output((4, 5), np.float32, "O", like=Tensor())
    assert out == ("wrapped", (4, 5)) and torch.allocated == [((4, 5), "torch.float32", "cuda:0")]


@pytest.mark.parametrize("like", [None, np.zeros(3), Tensor(is_cuda=False)])
def test_other_inputs_get_numba_outputs(torch, like):
    assert memory.Memory().output((4, 5), np.float32, "O", like=like) == ("numba", (4, 5))
    assert torch.allocated == []


def test_a_torch_side_stream_gets_numba_outputs(torch):
    """Torch would hand a freed output to the next allocation on its side stream without waiting
    for our kernels on the default stream."""
    torch.stream = 0x7F00
    assert memory.Memory().output((4, 5), np.float32, "O", like=Tensor()) == ("numba", (4, 5))
    assert torch.allocated == []


def test_the_simulator_never_allocates_with_torch(torch, monkeypatch):
    monkeypatch.setattr(memory, "simulator_enabled", lambda: True)
    assert memory._torch_allocation_device(Tensor()) is None


def test_numpy_inputs_reach_the_device_with_c_strides():
    """A length-1 axis made by x[None] has stride 0, which np.ascontiguousarray keeps and numba's
    device arrays cannot reshape (the varlen path's NumPy inputs failed so on the H200,
    2026-12-03); c_layout gives C strides on every axis, copying only then."""
    from numba_flash.memory import c_layout

    x = np.ascontiguousarray(np.arange(12, dtype=np.float16).reshape(3, 4).swapaxes(0, 1))[None]
    assert x.strides[0] == 0
    y = c_layout(x)
    assert y.strides == (24, 6, 2) and np.array_equal(y, x)
    z = np.zeros((2, 3), np.float32)
    assert c_layout(z) is z


def test_torch_dtypes_of_outputs(torch):
    """uint16 outputs take their like's half-precision dtype; fa2_fp16x3's workspaces, which
    have no like (numba_flash.torch's memory once failed on them), float16."""
    torch.float16, torch.bfloat16 = "torch.float16", "torch.bfloat16"
    half = Tensor()
    half.dtype = torch.bfloat16
    assert memory.torch_dtype(np.uint16, half) == "torch.bfloat16"
    assert memory.torch_dtype(np.uint16, None) == "torch.float16"
    assert memory.torch_dtype(np.float32, None) == "torch.float32"
