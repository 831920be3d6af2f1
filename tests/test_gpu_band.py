"""Sliding windows and grouped K/V heads on the GPU (``pytest -m gpu``): forward and backward of
the "fa2" kernels in fp32, fp16 and bf16 within flash-attention's rule at real and awkward sizes
(N = 4099, N_q != N_k with causal windows, odd d, MQA), as tests/test_band_gqa.py under the
simulator."""
import pytest

import numba_flash as nf

from .helpers import check_band

pytestmark = pytest.mark.gpu

# (format, B, H, H_kv, N_q, N_k, d, causal, window)
SHAPES = [
    ("float16", 1, 4, 1, 4099, 4099, 64, True, (512, 0)),     # MQA, causal sliding window
    ("bfloat16", 2, 6, 2, 255, 97, 111, True, (40, 0)),       # odd d; N_q > N_k: rows that see nothing
    ("float32", 1, 4, 2, 1000, 1023, 64, False, (100, 37)),   # GQA, a band both sides
    ("float32", 1, 2, 2, 300, 301, 128, False, (-1, 5)),      # right side only
    ("float16", 2, 8, 4, 1024, 1024, 128, False, (64, 64)),
]
#: The kernels this test launches (tests/gpu_kernels.py builds them with the rest)
KERNELS = [nf.KernelConfig(d=d, n_q=n_q, n_k=n_k, causal=causal, dtype=fmt, window=window, group=H // H_kv)
           for fmt, _, H, H_kv, n_q, n_k, d, causal, window in SHAPES]


def test_band_forward_and_backward_against_reference():
    nf.warmup(KERNELS)
    for fmt, B, H, H_kv, n_q, n_k, d, causal, window in SHAPES:
        check_band(fmt, B, H, H_kv, n_q, n_k, d, causal, window)


def test_grouped_backward_unsplit():
    """The grouped shapes' backward unsplit (``kv_split=1``: a block loops over the whole
    group), within the rule as the automatic split above (MQA at N = 4099: split 4 ways)."""
    nf.warmup(KERNELS)
    for fmt, B, H, H_kv, n_q, n_k, d, causal, window in SHAPES:
        if H_kv < H:
            check_band(fmt, B, H, H_kv, n_q, n_k, d, causal, window, kv_split=1)
