"""Dropout on the GPU (``pytest -m gpu``): the "fa2" kernels in fp32, fp16 and bf16 at real and
awkward sizes (N = 4099, N_q != N_k causal, odd d, GQA) against a float64 reference with the
mask the kernels return, within flash-attention's rule, as tests/test_dropout.py under the
simulator; the kept fraction at N = 4099."""
import math

import numpy as np
import pytest

import numba_flash as nf
from numba_flash import reference as ref

from .helpers import FLOOR, TYPES, rel

pytestmark = pytest.mark.gpu

# (format, B, H, H_kv, N_q, N_k, d, causal, p)
SHAPES = [("float32", 1, 4, 4, 4099, 4099, 64, True, 0.1), ("float16", 2, 4, 2, 1000, 1023, 128, True, 0.2),
          ("bfloat16", 1, 2, 1, 255, 97, 111, False, 0.5), ("float32", 1, 2, 2, 300, 301, 40, False, 0.3)]
#: The kernels this test launches (tests/gpu_kernels.py builds them with the rest)
KERNELS = [nf.KernelConfig(d=d, n_q=n_q, n_k=n_k, causal=causal, dtype=fmt, group=H // H_kv, dropout=True)
           for fmt, _, H, H_kv, n_q, n_k, d, causal, _ in SHAPES]


def test_dropout_forward_and_backward_against_reference():
    nf.warmup(KERNELS)
    for fmt, B, H, H_kv, n_q, n_k, d, causal, p in SHAPES:
        rng = np.random.default_rng(3)
        t = TYPES[fmt]
        q, do = (rng.standard_normal((B, H, n_q, d)).astype(np.float32).astype(t) for _ in range(2))
        k, v = (rng.standard_normal((B, H_kv, n_k, d)).astype(np.float32).astype(t) for _ in range(2))
        with nf.poison_outputs():
            o, lse, keep = nf.flash_attention(q, k, v, causal=causal, return_lse=True, dropout_p=p,
                                              dropout_seed=2 ** 63 + 5, return_dropout_mask=True)
            grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal, dropout_p=p,
                                                dropout_seed=2 ** 63 + 5)
        assert abs(keep.mean() - (1 - p)) <= 5 * math.sqrt(p * (1 - p) / keep.size)
        np.testing.assert_array_equal(keep[0, -1], ref.dropout_keep(2 ** 63 + 5, H - 1, n_q, n_k, p))
        z = ref.dropout_factors(keep, p)
        f64 = [x.astype(np.float64) for x in (do, q, k, v)]
        o_ref, _ = ref.attention_forward(*f64[1:], causal=causal, dropout=z)
        refs = ref.attention_backward(*f64, causal=causal, dropout=z)
        if fmt == "float32":
            plain, _ = ref.attention_forward(q, k, v, causal=causal, dropout=z, dtype=np.float32)
            plains = ref.attention_backward(do, q, k, v, causal=causal, dropout=z, dtype=np.float32)
        else:
            plain = ref.plain_attention_forward(q, k, v, fmt, causal=causal, dropout=z)
            plains = ref.plain_attention_backward(do, q, k, v, fmt, causal=causal, dropout=z)
        assert rel(o, o_ref) <= 2 * rel(plain, o_ref) + FLOOR, (fmt, "o", rel(o, o_ref), rel(plain, o_ref))
        for name, g, r, pl in zip(("dq", "dk", "dv"), grads, refs, plains):
            assert rel(g, r) <= 3 * rel(pl, r) + FLOOR, (fmt, name, rel(g, r), rel(pl, r))
