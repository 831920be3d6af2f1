"""Every kernel against the float64 reference, on awkward shapes, under the CUDA simulator.

fp32 bounds: outputs within 1e-5 relative (norm-wise), lse within 1e-5, gradients within 1e-4.
Outputs are poisoned with NaN before every launch, so an element a kernel misses fails.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import numba_flash as nf
from numba_flash import reference as ref

from .helpers import assert_close, assert_lse_close, for_algorithm, for_backward, qkv, rel_err

OUT_TOL, GRAD_TOL = 1e-5, 1e-4
T8, T16 = nf.Tiling(8, 8), nf.Tiling(16, 16)
FLASH_FORWARDS = ["fa1", "fa2", "fa2_fma"]
#: (algorithm, deterministic) of every backward: tensor cores, FFMA, FFMA without atomics
FLASH_BACKWARDS = [("fa2", False), ("fa2_fma", False), ("fa2_fma", True)]

# (B, H, N_q, N_k, d, causal, tiling): N = 1, 17, 97; d = 24, 40, 80; N_q != N_k; causal both ways
CASES = [
    (1, 1, 1, 1, 24, False, T8),
    (1, 1, 1, 17, 40, True, T8),
    (2, 1, 17, 17, 24, True, nf.Tiling(8, 16)),
    (1, 2, 17, 9, 80, True, nf.Tiling(16, 8)),      # N_q > N_k: 8 rows see no key
    (1, 1, 9, 30, 40, False, nf.Tiling(4, 12)),
    (1, 1, 97, 33, 24, True, T16),
    (1, 1, 20, 97, 8, False, T16),
]


def backward_of(algorithm):
    """The backward algorithm tested beside a forward one: tensor cores with tensor cores."""
    return "fa2" if algorithm == "fa2" else "fa2_fma"


def check_forward(q, k, v, causal, tiling, algorithm, **kw):
    o_ref, lse_ref = ref.attention_forward(q, k, v, causal=causal, **kw)
    with nf.poison_outputs():
        o, lse = nf.flash_attention(q, k, v, causal=causal, return_lse=True, algorithm=algorithm,
                                    tiling=for_algorithm(algorithm, tiling), **kw)
    assert o.dtype == np.float32 and o.shape == q.shape and lse.shape == q.shape[:3]
    assert_close(o, o_ref, OUT_TOL)
    assert_lse_close(lse, lse_ref, OUT_TOL)
    return o, lse


def check_grads(grads, q, k, v, do, causal, **kw):
    for name, g, g_ref in zip(("dq", "dk", "dv"), grads, ref.attention_backward(do, q, k, v, causal=causal, **kw)):
        assert g.dtype == np.float32 and g.shape == g_ref.shape, name
        assert_close(g, g_ref, GRAD_TOL)


@pytest.mark.parametrize("B,H,n_q,n_k,d,causal,tiling", CASES)
def test_flash_forward_and_backward(rng, B, H, n_q, n_k, d, causal, tiling):
    q, k, v, do = qkv(rng, B, H, n_q, n_k, d)
    o, lse = check_forward(q, k, v, causal, tiling, "fa2")
    check_forward(q, k, v, causal, tiling, "fa1")
    check_forward(q, k, v, causal, tiling, "fa2_fma")
    for algorithm, deterministic in FLASH_BACKWARDS:
        with nf.poison_outputs():
            grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal,
                                                tiling=for_backward(algorithm, tiling),
                                                algorithm=algorithm, deterministic=deterministic)
        check_grads(grads, q, k, v, do, causal)


@pytest.mark.parametrize("B,H,n_q,n_k,d,causal,tiling", [c for c in CASES if c[2] * c[3] <= 600])
def test_standard_forward_and_backward(rng, B, H, n_q, n_k, d, causal, tiling):
    q, k, v, do = qkv(rng, B, H, n_q, n_k, d)
    with nf.poison_outputs():
        o, p = nf.standard_attention(q, k, v, causal=causal, return_probs=True, tiling=tiling)
    assert rel_err(o, ref.attention_forward(q, k, v, causal=causal)[0]) <= OUT_TOL
    assert rel_err(p, ref.attention_probs(q, k, causal=causal)) <= OUT_TOL
    with nf.poison_outputs():
        grads = nf.standard_attention_backward(do, q, k, v, o, p, causal=causal, tiling=tiling)
    check_grads(grads, q, k, v, do, causal)


@given(n_q=st.integers(1, 24), n_k=st.integers(1, 24), d=st.integers(1, 20),
       br=st.sampled_from([1, 3, 4, 5, 7, 8, 12]), bc=st.sampled_from([2, 4, 5, 7, 8, 16]),
       causal=st.booleans(), scale=st.sampled_from([None, 0.05, 1.0, 3.0]),
       seed=st.integers(0, 2**16))
def test_flash_matches_reference_on_drawn_shapes(n_q, n_k, d, br, bc, causal, scale, seed):
    rng = np.random.default_rng(seed)
    q, k, v, do = qkv(rng, 1, 2, n_q, n_k, d)
    tiling = nf.Tiling(br, bc)
    o, lse = check_forward(q, k, v, causal, tiling, "fa2", softmax_scale=scale)
    check_forward(q, k, v, causal, tiling, "fa1", softmax_scale=scale)
    check_forward(q, k, v, causal, tiling, "fa2_fma", softmax_scale=scale)
    with nf.poison_outputs():
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal, tiling=tiling,
                                            softmax_scale=scale, algorithm="fa2_fma")
    check_grads(grads, q, k, v, do, causal, softmax_scale=scale)


@settings(max_examples=4)
@given(n_q=st.integers(1, 40), n_k=st.integers(1, 40), d=st.integers(1, 24),
       br=st.sampled_from([16, 32, 48]), bc=st.sampled_from([16, 32]), causal=st.booleans(),
       seed=st.integers(0, 2**16))
def test_tensor_core_backward_on_drawn_shapes(n_q, n_k, d, br, bc, causal, seed):
    """The default backward ("fa2") on drawn shapes, from the float64 forward's o and lse (a few
    examples: each runs the warp emulation for 1-10 s)."""
    rng = np.random.default_rng(seed)
    q, k, v, do = qkv(rng, 1, 1, n_q, n_k, d)
    o, lse = (x.astype(np.float32) for x in ref.attention_forward(q, k, v, causal=causal))
    with nf.poison_outputs():
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal,
                                            tiling=nf.Tiling(br, bc), algorithm="fa2")
    check_grads(grads, q, k, v, do, causal)


@pytest.mark.parametrize("algorithm", FLASH_FORWARDS)
def test_large_logits_stay_finite_and_right(rng, algorithm):
    q, k, v, do = qkv(rng, 1, 1, 19, 23, 16, scale=10.0)   # logits ~ 100x larger
    o, lse = check_forward(q, k, v, True, T8, algorithm)
    assert np.isfinite(o).all() and np.isfinite(lse).all()
    backward = backward_of(algorithm)
    grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=True, algorithm=backward,
                                        tiling=for_backward(backward, T8))
    assert all(np.isfinite(g).all() for g in grads)
    # Peaked softmaxes are ill-conditioned: within the fp32 bar, or, where a plain fp32
    # implementation misses that bar too, within 3x its error (flash-attention's rule)
    exact = ref.attention_backward(do, q, k, v, causal=True)
    plain = ref.attention_backward(do, q, k, v, causal=True, dtype=np.float32)
    for g, g64, g32 in zip(grads, exact, plain):
        assert rel_err(g, g64) <= max(GRAD_TOL, 3 * rel_err(g32, g64))


@pytest.mark.parametrize("algorithm", FLASH_FORWARDS)
def test_rows_that_see_no_key_give_zero_and_minus_inf(rng, algorithm):
    q, k, v, do = qkv(rng, 1, 1, 21, 6, 8)   # bottom-right causal: rows 0..14 see nothing
    with nf.poison_outputs():
        o, lse = nf.flash_attention(q, k, v, causal=True, return_lse=True, algorithm=algorithm,
                                    tiling=for_algorithm(algorithm, T8))
    assert (o[..., :15, :] == 0).all() and np.isneginf(lse[..., :15]).all()
    assert np.isfinite(o).all() and np.isfinite(lse[..., 15:]).all()
    backward = backward_of(algorithm)
    with nf.poison_outputs():
        dq, dk, dv = nf.flash_attention_backward(do, q, k, v, o, lse, causal=True, algorithm=backward,
                                                 tiling=for_backward(backward, T8))
    assert (dq[..., :15, :] == 0).all()
    assert all(np.isfinite(g).all() for g in (dq, dk, dv))
    with nf.poison_outputs():
        o_std = nf.standard_attention(q, k, v, causal=True, tiling=T8)
    assert (o_std[..., :15, :] == 0).all() and np.isfinite(o_std).all()


# (N_q, N_k, diagonal), torch.tril's: row r sees key c iff c <= r + diagonal
DIAGONALS = [
    (5, 21, 0),    # top-left, N_q < N_k: keys 5.. unseen (the tc backward's 2nd 16-key block)
    (11, 5, 0),    # top-left, N_q > N_k: every row sees key 0
    (9, 9, -5),    # negative: rows 0..4 (a whole 4-row block) see no key
    (7, 9, 12),    # beyond N_k: nothing masked
]


@pytest.mark.parametrize("n_q,n_k,diagonal", DIAGONALS)
def test_diagonal_forward_and_backward(rng, n_q, n_k, diagonal):
    q, k, v, do = qkv(rng, 1, 1, n_q, n_k, 6)
    tiling = nf.Tiling(4, 4)
    blind = np.arange(n_q) + diagonal < 0   # rows that see no key
    for algorithm in FLASH_FORWARDS:
        o, lse = check_forward(q, k, v, True, tiling, algorithm, diagonal=diagonal)
        assert (o[..., blind, :] == 0).all() and np.isneginf(lse[..., blind]).all()
    for algorithm, deterministic in FLASH_BACKWARDS:
        with nf.poison_outputs():
            grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=True, diagonal=diagonal,
                                                tiling=for_backward(algorithm, tiling),
                                                algorithm=algorithm, deterministic=deterministic)
        check_grads(grads, q, k, v, do, True, diagonal=diagonal)
    with nf.poison_outputs():
        o, p = nf.standard_attention(q, k, v, causal=True, diagonal=diagonal, return_probs=True,
                                     tiling=tiling)
    assert rel_err(o, ref.attention_forward(q, k, v, causal=True, diagonal=diagonal)[0]) <= OUT_TOL
    assert rel_err(p, ref.attention_probs(q, k, causal=True, diagonal=diagonal)) <= OUT_TOL
    with nf.poison_outputs():
        grads = nf.standard_attention_backward(do, q, k, v, o, p, causal=True, tiling=tiling)
    check_grads(grads, q, k, v, do, True, diagonal=diagonal)


@pytest.mark.parametrize("algorithm", FLASH_FORWARDS)
def test_diagonals_past_the_sequences_hide_nothing_or_everything(rng, algorithm):
    q, k, v, do = qkv(rng, 1, 1, 6, 5, 8)
    tiling, backward = for_algorithm(algorithm, T8), backward_of(algorithm)
    unmasked = nf.flash_attention(q, k, v, return_lse=True, algorithm=algorithm, tiling=tiling)
    for diagonal in (4, 2**70):                  # row 0 sees keys 0..4: all of them
        full = nf.flash_attention(q, k, v, causal=True, diagonal=diagonal, return_lse=True,
                                  algorithm=algorithm, tiling=tiling)
        assert all(a.tobytes() == b.tobytes() for a, b in zip(full, unmasked))
    for diagonal in (np.int64(-6), -2**70):      # row 5 sees keys c <= -1: none
        with nf.poison_outputs():
            o, lse = nf.flash_attention(q, k, v, causal=True, diagonal=diagonal, return_lse=True,
                                        algorithm=algorithm, tiling=tiling)
            grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=True, diagonal=diagonal,
                                                algorithm=backward,
                                                tiling=for_backward(backward, T8))
        assert (o == 0).all() and np.isneginf(lse).all()
        assert all((g == 0).all() for g in grads)


def test_forward_is_bitwise_reproducible(rng):
    q, k, v, _ = qkv(rng, 1, 2, 19, 21, 12)
    for algorithm in FLASH_FORWARDS:
        tiling = for_algorithm(algorithm, T8)
        first = nf.flash_attention(q, k, v, return_lse=True, algorithm=algorithm, tiling=tiling)
        second = nf.flash_attention(q, k, v, return_lse=True, algorithm=algorithm, tiling=tiling)
        for a, b in zip(first, second):
            assert a.tobytes() == b.tobytes()


def test_nan_in_inputs_propagates(rng):
    q, k, v, do = qkv(rng, 1, 1, 9, 9, 8)
    q[0, 0, 3, 1] = np.nan
    for algorithm in FLASH_FORWARDS:
        o, lse = nf.flash_attention(q, k, v, tiling=for_algorithm(algorithm, T8), algorithm=algorithm,
                                    return_lse=True)
        assert np.isnan(o[0, 0, 3]).all() and np.isnan(lse[0, 0, 3])
        assert np.isfinite(np.delete(o[0, 0], 3, axis=0)).all()
    v[0, 0, 2, 0] = np.nan
    for algorithm in FLASH_FORWARDS:
        o = nf.flash_attention(q, k, v, causal=True, tiling=for_algorithm(algorithm, T8), algorithm=algorithm)
        assert np.isnan(o[0, 0, 2:, 0]).all()   # every row that sees key 2


@pytest.mark.parametrize("n_q,n_k,d,causal,tiling", [
    (40, 37, 12, True, nf.Tiling(48, 8)),    # three warps, the last on rows past N_q
    (33, 70, 20, False, nf.Tiling(32, 32)),  # two warps; four key groups per tile (even and odd)
    (35, 29, 72, True, nf.Tiling(32, 16)),   # d > 64: Qi kept in fp32, split at each fragment load
])
def test_tensor_cores_with_several_warps_and_wide_tiles(rng, n_q, n_k, d, causal, tiling):
    q, k, v, _ = qkv(rng, 1, 1, n_q, n_k, d)
    check_forward(q, k, v, causal, tiling, "fa2")


@settings(max_examples=3)
@given(n_q=st.integers(1, 40), n_k=st.integers(1, 40), d=st.integers(65, 96),
       br=st.sampled_from([16, 32]), bc=st.sampled_from([8, 16]), causal=st.booleans(),
       seed=st.integers(0, 2**16))
def test_tensor_core_forward_with_fp32_qi_on_drawn_shapes(n_q, n_k, d, br, bc, causal, seed):
    """d > 64, where Qi stays fp32 in SRAM and each fragment is split as it is loaded (forward
    v8): drawn ragged shapes, d not a multiple of 8 included (a few examples, ~5-10 s each)."""
    rng = np.random.default_rng(seed)
    q, k, v, _ = qkv(rng, 1, 1, n_q, n_k, d)
    check_forward(q, k, v, causal, nf.Tiling(br, bc), "fa2")


@pytest.mark.parametrize("n_q,n_k,d,causal,tiling", [
    (37, 21, 40, True, nf.Tiling(32, 32)),   # N_q > N_k: rows that see no key; two warps
    (19, 40, 24, True, nf.Tiling(16, 64)),   # four warps, ragged keys; 3 dQ tiles for 4 warps
    (33, 17, 12, False, nf.Tiling(48, 16)),  # one warp, three 16-row dQ tiles, ragged queries
])
def test_tensor_core_backward_with_several_warps_and_wide_tiles(rng, n_q, n_k, d, causal, tiling):
    q, k, v, do = qkv(rng, 1, 1, n_q, n_k, d)
    o, lse = ref.attention_forward(q, k, v, causal=causal)
    with nf.poison_outputs():
        grads = nf.flash_attention_backward(do, q, k, v, o.astype(np.float32), lse.astype(np.float32),
                                            causal=causal, tiling=tiling)
    check_grads(grads, q, k, v, do, causal)


def test_nan_payloads_survive_the_tf32_split(rng):
    """A NaN whose payload is in the low mantissa bits rounds to inf on the way to TF32; it must
    still come out NaN, not as a clamped number."""
    q, k, v, _ = qkv(rng, 1, 1, 9, 9, 8)
    v[0, 0, 2, 0] = np.array(0x7F800001, np.uint32).view(np.float32)
    for algorithm in FLASH_FORWARDS:
        o = nf.flash_attention(q, k, v, causal=True, tiling=for_algorithm(algorithm, T8), algorithm=algorithm)
        assert np.isnan(o[0, 0, 2:, 0]).all(), algorithm


def test_device_arrays_in_device_arrays_out(rng):
    from numba import cuda

    q, k, v, _ = qkv(rng, 1, 1, 10, 12, 8)
    dq_, dk_, dv_ = (cuda.to_device(x) for x in (q, k, v))
    o = nf.flash_attention(dq_, dk_, dv_, tiling=for_algorithm("fa2", T8))
    assert not isinstance(o, np.ndarray) and hasattr(o, "copy_to_host")
    assert rel_err(o.copy_to_host(), ref.attention_forward(q, k, v)[0]) <= OUT_TOL


def test_largest_head_dim_with_default_tilings(rng):
    """d = 256: the default tilings shrink until the tiles fit 227 KB of shared memory."""
    q, k, v, do = qkv(rng, 1, 1, 5, 7, 256)
    assert nf.Tiling.kernel_default("flash_forward_v2", 256) == nf.Tiling(64, 64)
    assert nf.Tiling.kernel_default("flash_forward_tc", 256) == nf.Tiling(32, 32)
    assert nf.Tiling.kernel_default("flash_backward", 256) == nf.Tiling(32, 32)
    o, lse = check_forward(q, k, v, True, None, "fa2")
    with nf.poison_outputs():
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=True)
    check_grads(grads, q, k, v, do, True)


@pytest.mark.parametrize("kernel", ["standard", "fa2", "fa2_fma"])
def test_minus_inf_scores_are_masked_not_zeroing_the_row(rng, kernel):
    """A key with a -inf component (scores -inf against a positive q) gets probability 0; the
    other keys keep theirs, whichever thread reads that score first."""
    q, k, v, _ = qkv(rng, 1, 1, 6, 9, 8)
    q = np.abs(q) + 0.1
    k[0, 0, 0, 0] = -np.inf
    o_ref, _ = ref.attention_forward(q, k, v)
    with nf.poison_outputs():
        if kernel == "standard":
            o, p = nf.standard_attention(q, k, v, return_probs=True, tiling=T8)
            assert (p[..., 0] == 0).all()
        else:
            o = nf.flash_attention(q, k, v, tiling=for_algorithm(kernel, T8), algorithm=kernel)
    assert_close(o, o_ref, OUT_TOL)
