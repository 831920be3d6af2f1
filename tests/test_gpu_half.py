"""float16 / bfloat16 forward and backward on the GPU (``pytest -m gpu``): flash-attention's rule
at real and awkward sizes (N = 4099, odd d, causal with N_q != N_k, logits x30), as
tests/test_half.py under the simulator. (d = 256 in half precision is tested under the simulator
only.)"""
import pytest

import numba_flash as nf

from .helpers import check_half_backward, check_half_forward

pytestmark = pytest.mark.gpu

# (format, B, H, N_q, N_k, d, causal)
SHAPES = [
    ("float16", 1, 2, 4099, 4099, 64, True),
    ("bfloat16", 2, 2, 255, 97, 111, True),      # odd d: element copies; rows that see nothing
    ("float16", 1, 2, 17, 300, 8, False),
    ("float16", 2, 4, 1024, 1024, 128, False),
]
#: The kernels these tests launch (tests/gpu_kernels.py builds them with the rest)
KERNELS = [nf.KernelConfig(d=d, n_q=n_q, n_k=n_k, causal=causal, dtype=fmt)
           for fmt, _, _, n_q, n_k, d, causal in SHAPES + [("float16", 1, 1, 300, 301, 64, False),
                                                           ("bfloat16", 1, 1, 300, 301, 40, True),
                                                           ("float16", 1, 2, 97, 255, 24, True)]]


def test_half_forward_against_reference():
    nf.warmup(KERNELS)
    for fmt, B, H, n_q, n_k, d, causal in SHAPES:
        check_half_forward(fmt, B, H, n_q, n_k, d, causal)
    check_half_forward("float16", 1, 1, 300, 301, 64, False, logit_scale=30.0)


def test_half_backward_against_reference():
    nf.warmup(KERNELS)   # (already built by the forward test)
    for fmt, B, H, n_q, n_k, d, causal in SHAPES:
        check_half_backward(fmt, B, H, n_q, n_k, d, causal)
    check_half_backward("bfloat16", 1, 1, 300, 301, 40, True, logit_scale=30.0)
    check_half_backward("float16", 1, 2, 97, 255, 24, True, diagonal=0)
