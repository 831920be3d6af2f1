"""Input factories, hypothesis strategies and error measures shared by the tests."""
import numpy as np
from hypothesis import strategies as st

from simulator.tiling import MMA_KERNELS, Tiling


def mma_tiling(tiling, kernel="flash_forward_tc"):
    """``tiling`` rounded up to what the tensor-core ``kernel`` takes: the forward Br a multiple
    of 16, Bc of 8; the backward (``flash_backward_tc``) both multiples of 16."""
    br, bc, _ = MMA_KERNELS[kernel]
    return Tiling(-(-tiling.Br // br) * br, -(-tiling.Bc // bc) * bc)


def for_algorithm(algorithm, tiling):
    """``tiling`` for ``flash_attention(algorithm=...)``: small test tilings rounded up for the
    tensor-core kernel ("fa2")."""
    return mma_tiling(tiling) if algorithm == "fa2" and tiling is not None else tiling


def for_backward(algorithm, tiling):
    """``tiling`` for ``flash_attention_backward(algorithm=...)``, likewise."""
    if algorithm == "fa2" and tiling is not None:
        return mma_tiling(tiling, "flash_backward_tc")
    return tiling


def causal_masks(reach):
    """Strategy for (causal, diagonal): no mask, the default bottom-right mask (diagonal None), or
    a diagonal in [-reach, reach] (beyond the sequence lengths: masks that hide all or nothing)."""
    return st.one_of(st.just((False, None)), st.just((True, None)),
                     st.tuples(st.just(True), st.integers(-reach, reach)))


def qkv(rng, B, H, n_q, n_k, d, scale=1.0):
    """Fresh float32 standard-normal q (B,H,n_q,d), k, v (B,H,n_k,d) and dO, times ``scale``."""
    def draw(n):
        return (scale * rng.standard_normal((B, H, n, d))).astype(np.float32)

    return draw(n_q), draw(n_k), draw(n_k), draw(n_q)


def rel_err(x, ref):
    """||x - ref|| / ||ref|| in float64 (NaN anywhere in x gives NaN, which fails any bound)."""
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(x - ref) / (denom if denom > 0 else 1.0))


def assert_close(x, ref, rtol, atol=1e-6):
    """||x - ref|| <= rtol ||ref|| + atol sqrt(n): relative, with a floor for gradients that are
    exactly zero in real arithmetic (e.g. dq with a single key). NaN in x always fails."""
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    err = float(np.linalg.norm(x - ref))
    bound = rtol * float(np.linalg.norm(ref)) + atol * np.sqrt(ref.size)
    assert err <= bound, f"error {err:.3e} > bound {bound:.3e} (relative {rel_err(x, ref):.3e})"


def assert_lse_close(lse, ref, rtol):
    """Same -inf pattern, finite entries within rtol (relative to max |ref|, at least 1)."""
    lse = np.asarray(lse, dtype=np.float64)
    inf_ref = np.isneginf(ref)
    np.testing.assert_array_equal(np.isneginf(lse), inf_ref)
    finite = ~inf_ref
    if finite.any():
        scale = max(1.0, float(np.abs(ref[finite]).max()))
        assert np.abs(lse[finite] - ref[finite]).max() <= rtol * scale
