"""flash_attention_varlen and its backward under the simulator: packed sequences of awkward and
unequal lengths (a query-less and a key-less one, N_q != N_k per sequence, causal bottom-right,
GQA, fp32 and fp16) against a float64 reference run on each sequence alone, with
flash-attention's error rule; bad offsets refused before any launch."""
import numpy as np
import pytest

import numba_flash as nf
from numba_flash import reference as ref, split_calls

from .helpers import FLOOR, TYPES, rel

LENS_Q = [1, 17, 0, 5, 9]
LENS_K = [3, 17, 4, 0, 13]


def _packed(rng, lens, heads, d, t):
    return rng.standard_normal((sum(lens), heads, d)).astype(np.float32).astype(t)


def _cu(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


def _seq(x, cu, i):
    """Sequence i of packed x as (1, heads, n, d) float64."""
    return x[cu[i]:cu[i + 1]].astype(np.float64).swapaxes(0, 1)[None]


def check_varlen(fmt, causal, H, H_kv, lens_q, lens_k, d, seed=11, device=None):
    """Packed sequences of ``lens_q`` queries and ``lens_k`` keys: forward and backward within
    flash-attention's rule of a float64 reference run on each sequence alone; sequences without
    keys give o = 0, lse = -inf, dq = 0; keys without queries dk = dv = 0. ``device``: a
    function moving each input to where the call runs (e.g. torch CUDA tensors), the outputs
    compared on the host."""
    rng = np.random.default_rng(seed)
    t = TYPES[fmt]
    q, do = (_packed(rng, lens_q, H, d, t) for _ in range(2))
    k, v = (_packed(rng, lens_k, H_kv, d, t) for _ in range(2))
    cu_q, cu_k = _cu(lens_q), _cu(lens_k)
    args = (cu_q, cu_k, max(lens_q), max(lens_k))
    put = device or (lambda x: x)
    o, lse = nf.flash_attention_varlen(*map(put, (q, k, v)), *args, causal=causal, return_lse=True)
    grads = nf.flash_attention_varlen_backward(*map(put, (do, q, k, v, o, lse)), *args, causal=causal)
    o, lse, dq, dk, dv = (split_calls.host(x) for x in (o, lse, *grads))
    assert o.shape == q.shape and o.dtype == q.dtype and lse.shape == (H, q.shape[0])
    assert dk.shape == k.shape and dv.dtype == v.dtype
    for i in range(len(lens_q)):
        rows, keys = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
        if lens_q[i] == 0:
            assert np.all(dk[keys] == 0) and np.all(dv[keys] == 0)   # keys no query sees
            continue
        if lens_k[i] == 0:                       # rows that see no key
            assert np.all(o[rows] == 0) and np.all(lse[:, rows] == -np.inf) and np.all(dq[rows] == 0)
            continue
        f64 = [_seq(x, c, i) for x, c in ((do, cu_q), (q, cu_q), (k, cu_k), (v, cu_k))]
        o_ref, lse_ref = ref.attention_forward(*f64[1:], causal=causal)
        refs = ref.attention_backward(*f64, causal=causal)
        plain, _ = ref.attention_forward(*f64[1:], causal=causal, dtype=np.float32)
        plains = ref.attention_backward(*f64, causal=causal, dtype=np.float32)
        if fmt != "float32":
            plain = ref.plain_attention_forward(*(x.astype(t) for x in f64[1:]), fmt, causal=causal)
            plains = ref.plain_attention_backward(*(x.astype(t) for x in f64), fmt, causal=causal)
        got = o[rows].swapaxes(0, 1)[None]
        assert rel(got, o_ref) <= 2 * rel(plain, o_ref) + FLOOR, (i, rel(got, o_ref), rel(plain, o_ref))
        seen = np.isfinite(lse_ref[0])
        np.testing.assert_allclose(lse[:, rows][seen], lse_ref[0][seen], rtol=1e-5, atol=1e-5)
        for name, g, r, pl, part in zip(("dq", "dk", "dv"), (dq, dk, dv), refs, plains, (rows, keys, keys)):
            gi = g[part].swapaxes(0, 1)[None]
            assert rel(gi, r) <= 3 * rel(pl, r) + FLOOR, (i, name, rel(gi, r), rel(pl, r))


@pytest.mark.parametrize("fmt,causal,H,H_kv", [("float32", True, 2, 2), ("float16", False, 4, 2)])
def test_varlen_forward_and_backward_against_each_sequence_alone(fmt, causal, H, H_kv):
    check_varlen(fmt, causal, H, H_kv, LENS_Q, LENS_K, 8)


@pytest.mark.parametrize("change,match", [
    (dict(cu_seqlens_q=np.array([0, 5, 3, 40], np.int32)), "cu_seqlens_q must start at 0, never decrease"),
    (dict(cu_seqlens_q=np.array([0.0, 4.0])), "cu_seqlens_q must be a 1-D integer array"),
    (dict(cu_seqlens_k=np.array([0, 37], np.int64), max_seqlen_k=37), "one offset per sequence"),
    (dict(max_seqlen_q=16), "max_seqlen_q must be an int >= the longest sequence"),
    (dict(dropout_p=0.1), "dropout_p"),
])
def test_bad_offsets_are_refused_before_any_launch(change, match, monkeypatch):
    monkeypatch.setattr(nf.api, "flash_attention", lambda *a, **k: pytest.fail("launched"))
    q = np.zeros((32, 2, 8), np.float32)
    k = np.zeros((37, 2, 8), np.float32)
    kwargs = dict(cu_seqlens_q=np.array([0, 17, 32], np.int32), cu_seqlens_k=np.array([0, 20, 37], np.int32),
                  max_seqlen_q=17, max_seqlen_k=20)
    kwargs.update(change)
    with pytest.raises(ValueError, match=match):
        nf.flash_attention_varlen(q, k, k, **kwargs)


def test_layouts_other_than_packed_are_refused():
    q = np.zeros((1, 2, 32, 8), np.float32)
    with pytest.raises(ValueError, match="q must be packed"):
        nf.flash_attention_varlen(q, q, q, np.array([0, 32]), np.array([0, 32]), 32, 32)
