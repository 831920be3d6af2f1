"""Real sizes on a real GPU (``pytest -m gpu``; skipped under the CUDA simulator).

Same bounds as the simulator tests: fp32 outputs and lse within 1e-5 relative of float64,
gradients within 1e-4; outputs poisoned with NaN before each launch.
"""
import numpy as np
import pytest

import numba_flash as nf
from numba_flash import reference as ref

from simulator.tiling import H200_SMEM_PER_BLOCK

from .helpers import assert_close, assert_lse_close, qkv

pytestmark = pytest.mark.gpu

OUT_TOL, GRAD_TOL = 1e-5, 1e-4
#: (algorithm, deterministic) of every backward: tensor cores, FFMA, FFMA without atomics
BACKWARDS = [("fa2", False), ("fa2_fma", False), ("fa2_fma", True)]

# (B, H, N_q, N_k, d, causal)
SHAPES = [
    (2, 4, 1024, 1024, 64, False),
    (2, 4, 1024, 1024, 64, True),
    (1, 3, 255, 97, 80, True),       # N_q > N_k: rows that see no key
    (1, 2, 97, 255, 40, True),
    (1, 2, 17, 300, 24, False),
    (1, 2, 100, 77, 20, True),       # d not a multiple of the mma's k = 8: zero columns
    (1, 2, 513, 511, 128, True),
    (1, 1, 1, 1, 64, False),
]


@pytest.mark.parametrize("B,H,n_q,n_k,d,causal", SHAPES)
def test_flash_against_reference(rng, B, H, n_q, n_k, d, causal):
    q, k, v, do = qkv(rng, B, H, n_q, n_k, d)
    o_ref, lse_ref = ref.attention_forward(q, k, v, causal=causal)
    grads_ref = ref.attention_backward(do, q, k, v, causal=causal)
    with nf.poison_outputs():
        for algorithm in ("fa2", "fa1"):
            o, lse = nf.flash_attention(q, k, v, causal=causal, return_lse=True, algorithm=algorithm)
            assert_close(o, o_ref, OUT_TOL)
            assert_lse_close(lse, lse_ref, OUT_TOL)
        for algorithm, deterministic in BACKWARDS:
            grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal,
                                                algorithm=algorithm, deterministic=deterministic)
            for g, g_ref in zip(grads, grads_ref):
                assert_close(g, g_ref, GRAD_TOL)


@pytest.mark.parametrize("B,H,n_q,n_k,d,causal", SHAPES[1:4])
def test_standard_against_reference(rng, B, H, n_q, n_k, d, causal):
    q, k, v, do = qkv(rng, B, H, n_q, n_k, d)
    with nf.poison_outputs():
        o, p = nf.standard_attention(q, k, v, causal=causal, return_probs=True)
        grads = nf.standard_attention_backward(do, q, k, v, o, p, causal=causal)
    assert_close(o, ref.attention_forward(q, k, v, causal=causal)[0], OUT_TOL)
    for g, g_ref in zip(grads, ref.attention_backward(do, q, k, v, causal=causal)):
        assert_close(g, g_ref, GRAD_TOL)


OTHER_TILINGS = [nf.Tiling(32, 32), nf.Tiling(64, 128), nf.Tiling(128, 64), nf.Tiling(16, 64)]
# (N_q, N_k, d, causal)
MANY_ROW_BLOCKS = [
    (1024, 4096, 64, False),
    (4096, 4096, 64, True),
    (333, 4099, 128, True),      # the wide-head default tiling, ragged tiles
]


@pytest.mark.parametrize("tiling", OTHER_TILINGS)
def test_other_tilings(rng, tiling):
    q, k, v, do = qkv(rng, 1, 2, 333, 301, 64)
    o_ref, lse_ref = ref.attention_forward(q, k, v, causal=True)
    grads_ref = ref.attention_backward(do, q, k, v, causal=True)
    with nf.poison_outputs():
        o, lse = nf.flash_attention(q, k, v, causal=True, return_lse=True, tiling=tiling)
    assert_close(o, o_ref, OUT_TOL)
    assert_lse_close(lse, lse_ref, OUT_TOL)
    # the tensor-core backward where its hi/lo tiles fit the 227 KB (not 64 x 128, 128 x 64)
    fits = tiling.smem_bytes("flash_backward_tc", 64) <= H200_SMEM_PER_BLOCK
    for algorithm in ("fa2", "fa2_fma") if fits else ("fa2_fma",):
        with nf.poison_outputs():
            grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=True, tiling=tiling,
                                                algorithm=algorithm)
        for g, g_ref in zip(grads, grads_ref):
            assert_close(g, g_ref, GRAD_TOL)


def test_reproducible_forward_and_deterministic_backward(rng):
    q, k, v, do = qkv(rng, 2, 4, 1000, 1000, 64)
    first = nf.flash_attention(q, k, v, causal=True, return_lse=True)
    second = nf.flash_attention(q, k, v, causal=True, return_lse=True)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(first, second))
    o, lse = first
    g1 = nf.flash_attention_backward(do, q, k, v, o, lse, causal=True, deterministic=True)
    g2 = nf.flash_attention_backward(do, q, k, v, o, lse, causal=True, deterministic=True)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(g1, g2))


def test_torch_tensors_in_torch_tensors_out(rng):
    torch = pytest.importorskip("torch")
    q, k, v, do = qkv(rng, 1, 2, 300, 200, 64)
    tq, tk, tv, tdo = (torch.from_numpy(x).cuda() for x in (q, k, v, do))
    for algorithm in ("fa2", "fa2_fma"):    # the fast launch path and numba's dispatcher
        o, lse = nf.flash_attention(tq, tk, tv, causal=True, algorithm=algorithm, return_lse=True)
        assert isinstance(o, torch.Tensor) and isinstance(lse, torch.Tensor) and o.is_cuda
        assert_close(o.cpu().numpy(), ref.attention_forward(q, k, v, causal=True)[0], OUT_TOL)
    grads = nf.flash_attention_backward(tdo, tq, tk, tv, o, lse, causal=True)
    assert all(isinstance(g, torch.Tensor) for g in grads)


def test_long_sequence_stays_at_fp32_accuracy(rng):
    """N = 16384 keys: the tensor-core forward's accumulation must not drift (its v5 summed O on
    the tensor cores over all 512 K/V tiles and landed 2e-4 of max |o| off float64)."""
    q, k, v, _ = qkv(rng, 1, 1, 2048, 16384, 64)
    o_ref, lse_ref = ref.attention_forward(q, k, v)
    for algorithm in ("fa2", "fa2_fma"):
        with nf.poison_outputs():
            o, lse = nf.flash_attention(q, k, v, return_lse=True, algorithm=algorithm)
        assert_close(o, o_ref, OUT_TOL)
        assert_lse_close(lse, lse_ref, OUT_TOL)
        assert np.abs(o - o_ref).max() <= 1e-4 * np.abs(o_ref).max(), algorithm   # the bench's bar


@pytest.mark.parametrize("n_q,n_k,d,causal", MANY_ROW_BLOCKS)
def test_tensor_core_backward_over_many_row_blocks(rng, n_q, n_k, d, causal):
    """The tensor-core backward at fp32 level with up to 4096 queries: dK and dV sum one
    product per row block from zero on the tensor cores and add it in fp32, so no truncating
    mma accumulation runs over all row blocks (the forward's v5 drifted to 2e-4 that way)."""
    q, k, v, do = qkv(rng, 1, 2, n_q, n_k, d)
    o, lse = (x.astype(np.float32) for x in ref.attention_forward(q, k, v, causal=causal))
    with nf.poison_outputs():
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal, algorithm="fa2")
    for g, g_ref in zip(grads, ref.attention_backward(do, q, k, v, causal=causal)):
        assert_close(g, g_ref, GRAD_TOL)
        assert np.abs(g - g_ref).max() <= 1e-4 * np.abs(g_ref).max()


def test_mma_tile_product_on_tensor_cores():
    """The real mma.sync and bit-operation split against the PTX fragment layout (the simulator
    tests check the emulation against the same specification)."""
    from .test_mma import check_mma_tile_product

    for seed in range(3):
        check_mma_tile_product(seed)


def test_tensor_cores_read_operands_truncated():
    """mma.sync ignores the low 13 bits of its TF32 operands (split_finite relies on it)."""
    from .test_mma import check_mma_reads_operands_truncated

    for seed in range(5):
        check_mma_reads_operands_truncated(seed)
