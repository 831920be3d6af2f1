"""Input factories, hypothesis strategies and error measures shared by the tests."""
import os

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

import numba_flash as nf
from numba_flash import reference

from simulator.tiling import MMA_KERNELS, Tiling


def mma_tiling(tiling, kernel="flash_forward_tc"):
    """``tiling`` rounded up to what the tensor-core ``kernel`` takes: the forward Br a multiple
    of 16, Bc of 8; the backward (``flash_backward_tc``) both multiples of 16 (the model's
    "flash_forward_fp16x3" runs the fp16 forward, ``flash_forward_half``, and
    "flash_backward_fp16x3" the fp16 backward)."""
    kernel = {"flash_forward_fp16x3": "flash_forward_half",
              "flash_backward_fp16x3": "flash_backward_half"}.get(kernel, kernel)
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


# ---- half precision --------------------------------------------------------------------------
FORMATS = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
#: An absolute floor (relative to max |reference|) for shapes whose plain error is ~0 (N_k = 1).
FLOOR = 1e-6


def half_inputs(rng, fmt, B, H, n_q, n_k, d, logit_scale=1.0):
    """q (scaled by ``logit_scale``: logits that large), k, v, do in ``fmt``."""
    t = FORMATS[fmt]
    q = (logit_scale * rng.standard_normal((B, H, n_q, d))).astype(np.float32).astype(t)
    k, v = (rng.standard_normal((B, H, n_k, d)).astype(np.float32).astype(t) for _ in range(2))
    do = rng.standard_normal((B, H, n_q, d)).astype(np.float32).astype(t)
    return q, k, v, do


def rel(x, ref):
    return float(np.abs(np.asarray(x, np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def check_half_forward(fmt, B, H, n_q, n_k, d, causal, diagonal=None, tiling=None, logit_scale=1.0, seed=0,
                       algorithm="fa2"):
    """flash_attention(``algorithm``) on fresh ``fmt`` inputs, poisoned outputs: o within
    flash-attention's rule (2x the plain same-format implementation's error against float64),
    lse within 1e-5."""
    rng = np.random.default_rng(seed)
    q, k, v, _ = half_inputs(rng, fmt, B, H, n_q, n_k, d, logit_scale)
    with nf.poison_outputs():
        o, lse = nf.flash_attention(q, k, v, causal=causal, diagonal=diagonal, tiling=tiling,
                                    return_lse=True, algorithm=algorithm)
    assert o.dtype == FORMATS[fmt] and o.shape == q.shape and lse.dtype == np.float32
    f64 = [x.astype(np.float64) for x in (q, k, v)]
    ref, ref_lse = reference.attention_forward(*f64, causal=causal, diagonal=diagonal)
    plain = reference.plain_attention_forward(q, k, v, fmt, causal=causal, diagonal=diagonal)
    assert rel(o, ref) <= 2 * rel(plain, ref) + FLOOR, (rel(o, ref), rel(plain, ref))
    seen = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse[seen], ref_lse[seen], rtol=1e-5, atol=1e-5)
    assert np.all(lse[~seen] == -np.inf) and np.all(o.astype(np.float32)[~seen] == 0)


def check_half_backward(fmt, B, H, n_q, n_k, d, causal, diagonal=None, tiling=None, logit_scale=1.0,
                        seed=0, **options):
    """flash_attention_backward on fresh ``fmt`` inputs (o, lse from our forward), poisoned
    outputs: each gradient within flash-attention's rule (3x the plain same-format
    implementation's error against float64)."""
    rng = np.random.default_rng(seed)
    q, k, v, do = half_inputs(rng, fmt, B, H, n_q, n_k, d, logit_scale)
    mask = dict(causal=causal, diagonal=diagonal)
    o, lse = nf.flash_attention(q, k, v, **mask, return_lse=True)
    with nf.poison_outputs():
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, **mask, tiling=tiling, **options)
    f64 = [x.astype(np.float64) for x in (do, q, k, v)]
    refs = reference.attention_backward(*f64, **mask)
    plains = reference.plain_attention_backward(do, q, k, v, fmt, **mask)
    for name, g, ref, plain in zip(("dq", "dk", "dv"), grads, refs, plains):
        assert g.dtype == FORMATS[fmt] and g.shape == ref.shape
        if not np.abs(ref).any():   # (one key: dq = 0 in exact arithmetic) against dv's scale
            assert np.abs(g).max() <= FLOOR * np.abs(refs[2]).max(), (name, np.abs(g).max())
            continue
        assert rel(g, ref) <= 3 * rel(plain, ref) + FLOOR, (name, rel(g, ref), rel(plain, ref))


# ---- sliding windows and grouped K/V heads --------------------------------------------------
ALL_FORMATS = ["float32", *sorted(FORMATS)]
#: Formats of the band tests' inputs and their NumPy types.
TYPES = {"float32": np.float32, **FORMATS}


def band_inputs(rng, fmt, B, H, H_kv, n_q, n_k, d, logit_scale=1.0):
    """q (B, H, n_q, d), k, v (B, H_kv, n_k, d), do in ``fmt``, standard normal."""
    t = TYPES[fmt]
    q = (logit_scale * rng.standard_normal((B, H, n_q, d))).astype(np.float32).astype(t)
    k, v = (rng.standard_normal((B, H_kv, n_k, d)).astype(np.float32).astype(t) for _ in range(2))
    do = rng.standard_normal((B, H, n_q, d)).astype(np.float32).astype(t)
    return q, k, v, do


def plain_forward(q, k, v, fmt, mask):
    if fmt == "float32":
        return reference.attention_forward(q, k, v, dtype=np.float32, **mask)[0]
    return reference.plain_attention_forward(q, k, v, fmt, **mask)


def plain_backward(do, q, k, v, fmt, mask):
    if fmt == "float32":
        return reference.attention_backward(do, q, k, v, dtype=np.float32, **mask)
    return reference.plain_attention_backward(do, q, k, v, fmt, **mask)


def check_band(fmt, B, H, H_kv, n_q, n_k, d, causal=False, window=None, diagonal=None, tiling=None,
          bwd_tiling=None, logit_scale=1.0, seed=0, backward=True, block_mask=None, block_size=None,
          kv_split=None):
    """Forward (o, lse) and backward (dq, dk, dv; grouped heads split ``kv_split`` ways) of
    poisoned launches within the rule; rows that see no key give o = 0 and lse = -inf.
    ``block_mask`` with ``block_size``: block-sparse, the reference masking the same blocks."""
    rng = np.random.default_rng(seed)
    q, k, v, do = band_inputs(rng, fmt, B, H, H_kv, n_q, n_k, d, logit_scale)
    mask = dict(causal=causal, window=window, diagonal=diagonal)
    if block_mask is not None:
        mask.update(block_mask=block_mask, block_size=block_size)
    with nf.poison_outputs():
        o, lse = nf.flash_attention(q, k, v, **mask, tiling=tiling, return_lse=True)
    assert o.dtype == TYPES[fmt] and o.shape == q.shape and lse.dtype == np.float32
    f64 = [x.astype(np.float64) for x in (do, q, k, v)]
    ref, ref_lse = reference.attention_forward(*f64[1:], **mask)
    plain = plain_forward(q, k, v, fmt, mask)
    assert rel(o, ref) <= 2 * rel(plain, ref) + FLOOR, ("o", rel(o, ref), rel(plain, ref))
    seen = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse[seen], ref_lse[seen], rtol=1e-5, atol=1e-5)
    assert np.all(lse[~seen] == -np.inf) and np.all(o.astype(np.float32)[~seen] == 0)
    if not backward:
        return
    with nf.poison_outputs():
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, **mask, tiling=bwd_tiling,
                                            kv_split=kv_split)
    refs = reference.attention_backward(*f64, **mask)
    plains = plain_backward(do, q, k, v, fmt, mask)
    for name, g, r, p in zip(("dq", "dk", "dv"), grads, refs, plains):
        assert g.dtype == TYPES[fmt] and g.shape == r.shape, (name, g.shape, r.shape)
        if not np.abs(r).any():   # nothing reaches it in exact arithmetic: judged on dv's scale
            assert np.abs(g.astype(np.float64)).max() <= FLOOR * np.abs(refs[2]).max(), name
            continue
        assert rel(g, r) <= 3 * rel(p, r) + FLOOR, (name, rel(g, r), rel(p, r))


def once_per_session(tmp_path_factory, name: str, make):
    """What ``make(folder)`` returns (a str), computed once per test session even when
    pytest-xdist spreads a module's tests over several workers (each of which would run a
    module-scoped fixture again): the first worker to ask runs it in a folder shared by all
    of them, under a file lock, and stores the text; the others read it."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent            # the workers' common base folder
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            folder.mkdir(exist_ok=True)
            done.write_text(make(folder))
    return folder, done.read_text()
