"""Block-sparse FlashAttention on the GPU (``pytest -m gpu``): the "fa2" kernels in fp32, fp16
and bf16 at real and awkward sizes (N = 4099, N_q != N_k causal, odd d, GQA, FlexAttention's
128 x 128 blocks and narrower ones) against a float64 reference that masks the same blocks,
within flash-attention's rule, as tests/test_block_sparse.py under the simulator."""
import numpy as np
import pytest

import numba_flash as nf
from numba_flash import reference as ref

from .helpers import FLOOR, TYPES, rel

pytestmark = pytest.mark.gpu

# (format, B, H, H_kv, N_q, N_k, d, causal, block_size, kept fraction)
SHAPES = [("float32", 1, 4, 4, 4099, 4099, 64, False, (128, 128), 0.3),
          ("float16", 2, 4, 2, 1000, 1023, 128, True, (128, 128), 0.5),
          ("bfloat16", 1, 2, 1, 255, 97, 111, False, (64, 32), 0.6),
          ("float32", 1, 2, 2, 300, 301, 40, True, (32, 64), 0.5)]
#: The kernels this test launches (tests/gpu_kernels.py builds them with the rest)
KERNELS = [nf.KernelConfig(d=d, n_q=n_q, n_k=n_k, causal=causal, dtype=fmt, group=H // H_kv, block_size=bs)
           for fmt, _, H, H_kv, n_q, n_k, d, causal, bs, _ in SHAPES]
KERNELS.append(nf.KernelConfig(d=64, n_q=1000, dtype="float16", backward=None, block_size=(128, 128)))  # plans


def test_block_sparse_forward_and_backward_against_reference():
    nf.warmup(KERNELS)
    for fmt, B, H, H_kv, n_q, n_k, d, causal, bs, keep in SHAPES:
        rng = np.random.default_rng(5)
        t = TYPES[fmt]
        q, do = (rng.standard_normal((B, H, n_q, d)).astype(np.float32).astype(t) for _ in range(2))
        k, v = (rng.standard_normal((B, H_kv, n_k, d)).astype(np.float32).astype(t) for _ in range(2))
        on = rng.random((-(-n_q // bs[0]), -(-n_k // bs[1]))) < keep
        on[0] = False                      # rows that keep nothing: o = 0, lse = -inf
        sparse = dict(causal=causal, block_mask=on, block_size=bs)
        with nf.poison_outputs():
            o, lse = nf.flash_attention(q, k, v, return_lse=True, **sparse)
            grads = nf.flash_attention_backward(do, q, k, v, o, lse, **sparse)
        f64 = [x.astype(np.float64) for x in (do, q, k, v)]
        o_ref, lse_ref = ref.attention_forward(*f64[1:], **sparse)
        refs = ref.attention_backward(*f64, **sparse)
        if fmt == "float32":
            plain, _ = ref.attention_forward(q, k, v, dtype=np.float32, **sparse)
            plains = ref.attention_backward(do, q, k, v, dtype=np.float32, **sparse)
        else:
            plain = ref.plain_attention_forward(q, k, v, fmt, **sparse)
            plains = ref.plain_attention_backward(do, q, k, v, fmt, **sparse)
        assert rel(o, o_ref) <= 2 * rel(plain, o_ref) + FLOOR, (fmt, "o", rel(o, o_ref), rel(plain, o_ref))
        seen = np.isfinite(lse_ref)
        assert np.all(lse[~seen] == -np.inf) and np.all(o.astype(np.float32)[~seen] == 0)
        np.testing.assert_allclose(lse[seen], lse_ref[seen], rtol=1e-5, atol=1e-5)
        for name, g, r, pl in zip(("dq", "dk", "dv"), grads, refs, plains):
            assert rel(g, r) <= 3 * rel(pl, r) + FLOOR, (fmt, name, rel(g, r), rel(pl, r))


def test_block_sparse_launch_plans_follow_the_mask():
    """torch tensors take launch plans keyed by the mask's contents: the same mask replays the
    first call's launches (bit-equal results), another mask gets its own plan, equal to the
    checked path's result (NumPy inputs)."""
    torch = pytest.importorskip("torch")
    from numba_flash import plans

    gen = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (torch.randn((1, 4, 1000, 64), device="cuda", dtype=torch.float16, generator=gen)
               for _ in range(3))
    rng = np.random.default_rng(4)
    one, other = (rng.random((8, 8)) < 0.5 for _ in range(2))
    before = len(plans.PLANS)
    first = nf.flash_attention(q, k, v, block_mask=one)
    again = nf.flash_attention(q, k, v, block_mask=one)
    assert len(plans.PLANS) == before + 1
    assert torch.equal(first, again)
    o_other = nf.flash_attention(q, k, v, block_mask=other)
    assert len(plans.PLANS) == before + 2
    checked = nf.flash_attention(*(x.cpu().numpy() for x in (q, k, v)), block_mask=other)
    np.testing.assert_array_equal(o_other.cpu().numpy(), checked)
