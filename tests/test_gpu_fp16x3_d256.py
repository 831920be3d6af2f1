"""``algorithm="fa2_fp16x3"`` at d = 256 on the GPU (``pytest -m gpu``): the forward's o and the
backward's dq, dk, dv within flash-attention's rule, as tests/test_gpu_fp16x3.py checks the
smaller head dims. A module of its own because its kernels (the forward at 80 x 32 and the
backward at 16 x 64 on rows of 2 x 256 fp16 parts) take minutes to compile: a 10-minute device
call can run the other module's tests or these, after their kernels are built (2026-12-06, an
H100: the two together did not finish compiling in 460 s of 16 processes)."""
import pytest

import numba_flash as nf

from .test_gpu_fp16x3 import _check_backward, _check_forward, _inputs

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

#: (B, H, N_q, N_k, d, causal, logit scale)
SHAPES = [(2, 2, 255, 97, 256, True, 1.0)]

#: The kernels these tests launch (conftest builds them first, in parallel processes).
KERNELS = [nf.KernelConfig(d=d, n_q=n_q, n_k=n_k, causal=causal, forward="fa2_fp16x3",
                           backward="fa2_fp16x3") for _, _, n_q, n_k, d, causal, _ in SHAPES]


@pytest.mark.parametrize("B,H,n_q,n_k,d,causal,scale", SHAPES)
def test_forward_and_backward_within_the_rule(B, H, n_q, n_k, d, causal, scale):
    q, k, v = _inputs(B, H, n_q, n_k, d, scale)
    _check_forward(q, k, v, causal)
    _check_backward(q, k, v, causal)
