"""flash_attention_varlen and its backward under the simulator: packed sequences of awkward and
unequal lengths (a query-less and a key-less one, N_q != N_k per sequence, causal bottom-right,
GQA, fp32 and fp16, dropout) against a float64 reference run on each sequence alone, with
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


def check_varlen(fmt, causal, H, H_kv, lens_q, lens_k, d, seed=11, device=None, dropout_p=0.0):
    """Packed sequences of ``lens_q`` queries and ``lens_k`` keys: forward and backward within
    flash-attention's rule of a float64 reference run on each sequence alone; sequences without
    keys give o = 0, lse = -inf, dq = 0; keys without queries dk = dv = 0. ``device``: a
    function moving each input to where the call runs (e.g. torch CUDA tensors), the outputs
    compared on the host. ``dropout_p``: the mask the forward returns is, per sequence, the
    B = 1 mask of its own seed (False past its lengths), the reference applies it, and the
    backward regenerates it."""
    rng = np.random.default_rng(seed)
    t = TYPES[fmt]
    q, do = (_packed(rng, lens_q, H, d, t) for _ in range(2))
    k, v = (_packed(rng, lens_k, H_kv, d, t) for _ in range(2))
    cu_q, cu_k = _cu(lens_q), _cu(lens_k)
    args = (cu_q, cu_k, max(lens_q), max(lens_k))
    put = device or (lambda x: x)
    drop = dict(dropout_p=dropout_p, dropout_seed=seed) if dropout_p else {}
    o, lse, kept = nf.flash_attention_varlen(*map(put, (q, k, v)), *args, causal=causal,
                                             return_lse=True, return_dropout_mask=True, **drop)
    grads = nf.flash_attention_varlen_backward(*map(put, (do, q, k, v, o, lse)), *args,
                                               causal=causal, **drop)
    o, lse, kept, dq, dk, dv = (split_calls.host(x) for x in (o, lse, kept, *grads))
    assert o.shape == q.shape and o.dtype == q.dtype and lse.shape == (H, q.shape[0])
    assert dk.shape == k.shape and dv.dtype == v.dtype
    assert kept.shape == (len(lens_q), H, max(lens_q), max(lens_k)) and kept.dtype == np.bool_
    for i in range(len(lens_q)):
        rows, keys = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
        inside = np.zeros(kept.shape[1:], bool)
        inside[:, :lens_q[i], :lens_k[i]] = True
        assert not kept[i][~inside].any()        # nothing kept past the sequence's lengths
        if lens_q[i] == 0:
            assert np.all(dk[keys] == 0) and np.all(dv[keys] == 0)   # keys no query sees
            continue
        if lens_k[i] == 0:                       # rows that see no key
            assert np.all(o[rows] == 0) and np.all(lse[:, rows] == -np.inf) and np.all(dq[rows] == 0)
            continue
        f64 = [_seq(x, c, i) for x, c in ((do, cu_q), (q, cu_q), (k, cu_k), (v, cu_k))]
        band = dict(causal=causal)
        mask = kept[i][:, :lens_q[i], :lens_k[i]][None]
        if dropout_p:
            own = np.stack([ref.dropout_keep(ref.padding_dropout_seed(seed, i), h, lens_q[i],
                                             lens_k[i], dropout_p) for h in range(H)])[None]
            assert np.array_equal(mask, own), i
            band["dropout"] = ref.dropout_factors(mask, dropout_p)
        else:
            assert mask.all()
        o_ref, lse_ref = ref.attention_forward(*f64[1:], **band)
        refs = ref.attention_backward(*f64, **band)
        plain, _ = ref.attention_forward(*f64[1:], dtype=np.float32, **band)
        plains = ref.attention_backward(*f64, dtype=np.float32, **band)
        if fmt != "float32":
            plain = ref.plain_attention_forward(*(x.astype(t) for x in f64[1:]), fmt, **band)
            plains = ref.plain_attention_backward(*(x.astype(t) for x in f64), fmt, **band)
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


def test_varlen_with_dropout():
    """Dropout per sequence (each its own seed's mask, regenerated by the backward), causal
    N_q != N_k, GQA, a query-less and a key-less sequence, fp16."""
    check_varlen("float16", True, 4, 2, [17, 0, 9, 5], [20, 4, 9, 0], 8, seed=5, dropout_p=0.2)


def test_varlen_sequences_draw_independent_dropout_masks():
    """Two sequences of the same lengths and inputs get different masks (their own seeds); the
    same seed again gives the same masks, another seed other ones."""
    q = np.random.default_rng(1).standard_normal((32, 1, 8)).astype(np.float32)
    cu = np.array([0, 16, 32], np.int32)
    masks = [nf.flash_attention_varlen(q, q, q, cu, cu, 16, 16, dropout_p=0.5, dropout_seed=seed,
                                       return_dropout_mask=True)[1] for seed in (3, 3, 4)]
    assert masks[0].shape == (2, 1, 16, 16)
    assert not np.array_equal(masks[0][0], masks[0][1])
    assert np.array_equal(masks[0], masks[1]) and not np.array_equal(masks[0], masks[2])


@pytest.mark.parametrize("change,match", [
    (dict(cu_seqlens_q=np.array([0, 5, 3, 40], np.int32)), "cu_seqlens_q must start at 0, never decrease"),
    (dict(cu_seqlens_q=np.array([0.0, 4.0])), "cu_seqlens_q must be a 1-D integer array"),
    (dict(cu_seqlens_k=np.array([0, 37], np.int64), max_seqlen_k=37), "one offset per sequence"),
    (dict(max_seqlen_q=16), "max_seqlen_q must be an int >= the longest sequence"),
    (dict(dropout_p=0.1), "dropout_seed"),
    (dict(dropout_p=1.0, dropout_seed=1), "dropout_p must be a float in"),
    (dict(return_dropout_mask=1), "return_dropout_mask"),
])
def test_bad_offsets_are_refused_before_any_launch(change, match, monkeypatch):
    monkeypatch.setattr(nf.api, "flash_attention", lambda *a, **k: pytest.fail("launched"))
    q = np.zeros((32, 2, 8), np.float32)
    k = np.zeros((37, 2, 8), np.float32)
    kwargs = dict(cu_seqlens_q=np.array([0, 17, 32], np.int32), cu_seqlens_k=np.array([0, 20, 37], np.int32),
                  max_seqlen_q=17, max_seqlen_k=20)
    kwargs.update(change)
    with pytest.raises((TypeError, ValueError), match=match):
        nf.flash_attention_varlen(q, k, k, **kwargs)


def test_layouts_other_than_packed_are_refused():
    q = np.zeros((1, 2, 32, 8), np.float32)
    with pytest.raises(ValueError, match="q must be packed"):
        nf.flash_attention_varlen(q, q, q, np.array([0, 32]), np.array([0, 32]), 32, 32)
