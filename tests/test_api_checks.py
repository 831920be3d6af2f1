"""Bad input raises a clear error naming the argument, before any launch (nothing written)."""
import numpy as np
import pytest

import numba_flash as nf
from numba_flash import api

from .helpers import qkv


@pytest.fixture
def tensors(rng):
    return qkv(rng, 1, 2, 6, 5, 8)


@pytest.fixture
def no_launch(monkeypatch):
    """Fail the test if any kernel would be launched."""
    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was launched for bad input")

    monkeypatch.setattr(api, "launch", refuse)


def fwd(q, k, v, **kw):
    return nf.flash_attention(q, k, v, **kw)


def cut(x, index):
    """A contiguous copy of ``x[index]`` (the checks reject non-contiguous views first)."""
    return np.ascontiguousarray(x[index])


@pytest.mark.usefixtures("no_launch")
@pytest.mark.parametrize("fn", [nf.flash_attention, nf.standard_attention])
def test_forward_bad_inputs(tensors, fn):
    q, k, v, _ = tensors
    cases = [
        ((q[0], k, v), {}, ValueError, "q must be 4-D"),
        ((q, cut(k, np.s_[..., :4]), v), {}, ValueError, "head_dim of k"),
        ((q, k, cut(v, np.s_[:, :1])), {}, ValueError, "batch and heads"),
        ((q, k, cut(v, np.s_[:, :, :3])), {}, ValueError, "same seq_len"),
        ((q.astype(np.float64), k, v), {}, TypeError, "q has dtype float64"),
        ((q, k.astype(np.float16), v), {}, TypeError, r"mixed dtypes \(q float32, k float16, v float32\)"),
        ((q, k, v[:, :, ::-1]), {}, ValueError, "v is not C-contiguous"),
        ((cut(q, np.s_[:, :, :0]), k, v), {}, ValueError, "q seq_len is 0"),
        ((q, cut(k, np.s_[:, :, :0]), cut(v, np.s_[:, :, :0])), {}, ValueError, "k seq_len is 0"),
        ((q, k, v), {"softmax_scale": 0.0}, ValueError, "softmax_scale must be finite and positive"),
        ((q, k, v), {"softmax_scale": -1.0}, ValueError, "softmax_scale must be finite and positive"),
        ((q, k, v), {"softmax_scale": float("nan")}, ValueError, "softmax_scale"),
        ((q, k, v), {"softmax_scale": float("inf")}, ValueError, "softmax_scale"),
        ((q, k, v), {"softmax_scale": "0.1"}, TypeError, "softmax_scale must be a real number"),
        ((q, k, v), {"causal": "yes"}, TypeError, "causal must be True or False"),
        ((q, k, v), {"causal": True, "diagonal": "0"}, TypeError, "diagonal must be an int or None"),
        ((q, k, v), {"causal": True, "diagonal": 1.0}, TypeError, "diagonal must be an int or None"),
        ((q, k, v), {"causal": True, "diagonal": True}, TypeError, "diagonal must be an int or None"),
        ((q, k, v), {"diagonal": 0}, ValueError, "diagonal=0 .*: pass causal=True"),
        ((q, k, v), {"tiling": (16, 16)}, TypeError, "tiling must be a numba_flash.Tiling"),
        ((q.tolist(), k, v), {}, TypeError, "q must be a NumPy array or a CUDA device array"),
    ]
    for args, kw, exc, message in cases:
        with pytest.raises(exc, match=message):
            fn(*args, **kw)


@pytest.mark.usefixtures("no_launch")
def test_head_dim_too_large_and_tiling_too_big(rng):
    q, k, v, _ = qkv(rng, 1, 1, 4, 4, 257)
    with pytest.raises(ValueError, match="head_dim d=257 is larger"):
        fwd(q, k, v)
    q, k, v, _ = qkv(rng, 1, 1, 4, 4, 128)
    with pytest.raises(ValueError, match=r"tiling=Tiling\(Br=128, Bc=128\) needs \d+ bytes"):
        fwd(q, k, v, tiling=nf.Tiling(128, 128))
    with pytest.raises(ValueError, match="algorithm must be one of"):
        fwd(q, k, v, algorithm="fa3")


def test_tiling_rejects_bad_sizes():
    with pytest.raises(ValueError, match="Tiling.Br must be a positive int"):
        nf.Tiling(0, 16)
    with pytest.raises(ValueError, match="1024"):
        nf.Tiling(256, 128)


@pytest.mark.usefixtures("no_launch")
def test_mixed_host_and_device_inputs(tensors):
    from numba import cuda

    q, k, v, _ = tensors
    with pytest.raises(TypeError, match="q on host, k on device"):
        fwd(q, cuda.to_device(k), v)


@pytest.mark.usefixtures("no_launch")
def test_backward_bad_inputs(tensors):
    q, k, v, do = tensors
    o = np.ones_like(q)
    lse = np.zeros(q.shape[:3], np.float32)
    with pytest.raises(ValueError, match=r"lse must have shape \(1, 2, 6\)"):
        nf.flash_attention_backward(do, q, k, v, o, cut(lse, np.s_[..., :5]))
    with pytest.raises(ValueError, match="do must have shape"):
        nf.flash_attention_backward(cut(do, np.s_[:, :, :5]), q, k, v, o, lse)
    with pytest.raises(TypeError, match="lse has dtype float64"):
        nf.flash_attention_backward(do, q, k, v, o, lse.astype(np.float64))
    with pytest.raises(TypeError, match="deterministic must be True or False"):
        nf.flash_attention_backward(do, q, k, v, o, lse, deterministic=None)
    with pytest.raises(TypeError, match="diagonal must be an int or None"):
        nf.flash_attention_backward(do, q, k, v, o, lse, causal=True, diagonal=np.bool_(True))
    with pytest.raises(ValueError, match="diagonal=-1 .*: pass causal=True"):
        nf.flash_attention_backward(do, q, k, v, o, lse, diagonal=-1)
    with pytest.raises(ValueError, match="algorithm must be one of"):
        nf.flash_attention_backward(do, q, k, v, o, lse, algorithm="fa1")
    with pytest.raises(ValueError, match=r"Tiling\(Br=16, Bc=8\) does not suit .*\(flash_backward_tc\)"):
        nf.flash_attention_backward(do, q, k, v, o, lse, tiling=nf.Tiling(16, 8))
    p = np.ones((1, 2, 6, 4), np.float32)
    with pytest.raises(ValueError, match=r"p must have shape \(1, 2, 6, 5\)"):
        nf.standard_attention_backward(do, q, k, v, o, p)


def test_outputs_untouched_when_rejected(tensors):
    """Device outputs are never allocated for rejected input: nothing is half-written."""
    q, k, v, _ = tensors
    calls = []
    from numba_flash import memory

    class Spy(memory.Memory):
        def output(self, shape, dtype, name, like=None):
            calls.append(name)
            return super().output(shape, dtype, name, like)

    with memory.using(Spy()):
        with pytest.raises(ValueError):
            fwd(q, k, v, softmax_scale=-2.0)
        with pytest.raises(ValueError):
            fwd(q, k, v, diagonal=0)
        assert calls == []
        fwd(q, k, v, tiling=nf.Tiling(16, 8))
        assert calls == ["O", "L"]


@pytest.mark.usefixtures("no_launch")
def test_limits_the_kernels_cannot_launch(rng, tensors):
    q, k, v, _ = tensors
    with pytest.raises(ValueError, match="softmax_scale=1e\\+300 is outside float32"):
        fwd(q, k, v, softmax_scale=1e300)
    with pytest.raises(ValueError, match="softmax_scale=1e-50 is outside float32"):
        fwd(q, k, v, softmax_scale=1e-50)
    from simulator.tiling import ModelTiling
    with pytest.raises(ValueError, match="needs 1089 threads a block"):
        fwd(q, k, v, tiling=ModelTiling(132, 132))
    with pytest.raises(ValueError, match="algorithm must be one of"):
        fwd(q, k, v, algorithm=["fa2"])
    with pytest.raises(ValueError, match=r"tiling=Tiling\(Br=8, Bc=8\) does not suit the tensor-core kernel"):
        fwd(q, k, v, tiling=nf.Tiling(8, 8))
    wide = np.ones((1, 65536, 1, 4), np.float32)
    with pytest.raises(ValueError, match="batch \\* heads = 65536 exceeds"):
        fwd(wide, wide, wide)
