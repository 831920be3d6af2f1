"""Variable-length batches and key padding on the GPU (``pytest -m gpu``): the checks of
tests/test_varlen.py and tests/test_key_padding.py at real and awkward sizes (N = 4099, a
sequence of 1 query, sequences without keys or queries, N_q != N_k, d = 40, 111), in fp32, fp16
and bf16, on NumPy inputs and (fp32) on torch CUDA tensors, varlen with dropout; the key padding
of the paper's Fig. 3 benchmarks (each entry's length uniform in [N - 20, N], the rest padding
at the end)."""
import numpy as np
import pytest

import numba_flash as nf

from .test_key_padding import check_key_padding
from .test_varlen import check_varlen

pytestmark = pytest.mark.gpu


def _cuda(x):
    """x on the GPU as a torch tensor (the forward's outputs, already there, as they are)."""
    import torch

    if isinstance(x, torch.Tensor):
        return x
    return torch.as_tensor(np.ascontiguousarray(x), device="cuda")


# (format, causal, H, H_kv, lens_q, lens_k, d, torch inputs, dropout_p)
VARLEN = [
    ("float16", True, 8, 2, [4099, 17, 1000], [4099, 30, 1000], 64, False, 0.0),
    ("float32", False, 4, 4, [255, 97, 0, 1], [300, 0, 5, 40], 111, True, 0.0),
    ("bfloat16", True, 4, 4, [1000, 1, 255], [1023, 40, 255], 40, False, 0.1),
]


def _fig3_pad(B, n, seed=3):
    """Fig. 3's padding mask: entry b keeps a length uniform in [n - 20, n], padding after."""
    lengths = np.random.default_rng(seed).integers(n - 20, n + 1, B)
    return np.arange(n)[None, :] >= lengths[:, None]


def _ends(n, kept):
    """Padding at the end: entry b keeps its first kept[b] keys."""
    return np.arange(n)[None, :] >= np.array(kept)[:, None]


# (format, causal, B, H, H_kv, N_q, N_k, d, pad, torch inputs)
PADDING = [
    ("float16", False, 4, 8, 2, 4099, 4099, 64, _fig3_pad(4, 4099), False),
    ("bfloat16", True, 3, 4, 4, 1000, 1023, 40, _ends(1023, [1023, 1003, 0]), False),
    ("float32", False, 2, 2, 2, 255, 97, 80, np.arange(2 * 97).reshape(2, 97) % 3 == 1, True),
]


def _calls():
    """(format, causal, n_q, n_k, d, group, dropout) of every per-sequence / per-entry call
    above."""
    for fmt, causal, H, H_kv, lens_q, lens_k, d, _, dropout_p in VARLEN:
        for n_q, n_k in zip(lens_q, lens_k):
            if n_q and n_k:
                yield fmt, causal, n_q, n_k, d, H // H_kv, dropout_p > 0
    for fmt, causal, B, H, H_kv, n_q, n_k, d, pad, _ in PADDING:
        for kept in (~pad).sum(1):
            if kept:
                yield fmt, causal, n_q, int(kept), d, H // H_kv, False


#: The kernels these tests launch (tests/gpu_kernels.py builds them with the rest).
KERNELS = list(dict.fromkeys(
    nf.KernelConfig(d=d, n_q=n_q, n_k=n_k, causal=causal, dtype=fmt, group=group, dropout=dropout)
    for fmt, causal, n_q, n_k, d, group, dropout in _calls()))


@pytest.mark.parametrize("fmt,causal,H,H_kv,lens_q,lens_k,d,on_torch,dropout_p", VARLEN)
def test_varlen_against_each_sequence_alone(fmt, causal, H, H_kv, lens_q, lens_k, d, on_torch,
                                            dropout_p):
    nf.warmup(KERNELS)
    check_varlen(fmt, causal, H, H_kv, lens_q, lens_k, d, device=_cuda if on_torch else None,
                 dropout_p=dropout_p)


@pytest.mark.parametrize("fmt,causal,B,H,H_kv,n_q,n_k,d,pad,on_torch", PADDING)
def test_key_padding_against_each_entry_alone(fmt, causal, B, H, H_kv, n_q, n_k, d, pad, on_torch):
    nf.warmup(KERNELS)
    check_key_padding(fmt, causal, B, H, H_kv, n_q, n_k, d, pad, device=_cuda if on_torch else None)
