"""key_padding_mask under the simulator: padding keys (True, PyTorch's convention) anywhere
without a causal mask, at the end with one (N_q != N_k, the unpadded diagonal), entries with no
padding and with nothing but padding, GQA, fp32 and fp16, forward and backward, against float64
with flash-attention's error rule; bad masks refused before any launch."""
import numpy as np
import pytest

import numba_flash as nf
from numba_flash import reference as ref, split_calls

from .helpers import FLOOR, TYPES, rel


def _masked_forward(q, k, v, pad, causal, diagonal):
    """float64 attention with padding keys' scores at -inf (GQA by repeating K/V heads)."""
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(q.shape[-1])
    hide = pad[:, None, None, :].repeat(q.shape[2], axis=2)
    if causal:
        rows, cols = np.arange(q.shape[2])[:, None], np.arange(k.shape[2])[None, :]
        hide = hide | (cols > rows + diagonal)
    s = np.where(hide, -np.inf, s)
    m = s.max(-1, keepdims=True)
    p = np.where(np.isfinite(m), np.exp(s - np.where(np.isfinite(m), m, 0)), 0.0)
    l = p.sum(-1, keepdims=True)
    o = np.einsum("bhij,bhjd->bhid", np.divide(p, l, out=np.zeros_like(p), where=l > 0), v)
    return o, np.where(l[..., 0] > 0, np.log(np.where(l[..., 0] > 0, l[..., 0], 1)) + m[..., 0], -np.inf)


CASES = [  # (format, causal, B, H, H_kv, N_q, N_k, pad)
    ("float32", False, 3, 2, 1, 17, 23, lambda rng, n: [rng.random(n) < 0.4, np.zeros(n, bool), np.ones(n, bool)]),
    ("float16", True, 3, 4, 2, 9, 20, lambda rng, n: [np.arange(n) >= 13, np.arange(n) >= n, np.arange(n) >= 2]),
]


def check_key_padding(fmt, causal, B, H, H_kv, n_q, n_k, d, pad, seed=7, device=None,
                      dropout_p=0.0):
    """Forward and backward with ``key_padding_mask=pad`` (B, N_k) within flash-attention's
    rule of float64 on each entry's kept keys; entries of nothing but padding give o = 0,
    lse = -inf and zero gradients; padding keys get dk = dv = 0. ``device``: a function moving
    each input to where the call runs (the mask stays on the host), outputs compared on the
    host. ``dropout_p``: the reference applies the mask the forward returns, which keeps no
    padding key and is, per entry, the B = 1 mask of its own seed; the backward regenerates it."""
    rng = np.random.default_rng(seed)
    t = TYPES[fmt]
    q, do = (rng.standard_normal((B, H, n_q, d)).astype(np.float32).astype(t) for _ in range(2))
    k, v = (rng.standard_normal((B, H_kv, n_k, d)).astype(np.float32).astype(t) for _ in range(2))
    put = device or (lambda x: x)
    drop = dict(dropout_p=dropout_p, dropout_seed=seed) if dropout_p else {}
    o, lse, kept = nf.flash_attention(*map(put, (q, k, v)), causal=causal, key_padding_mask=pad,
                                      return_lse=True, return_dropout_mask=True, **drop)
    grads = nf.flash_attention_backward(*map(put, (do, q, k, v, o, lse)), causal=causal,
                                        key_padding_mask=pad, **drop)
    o, lse, kept, dq, dk, dv = (split_calls.host(x) for x in (o, lse, kept, *grads))
    assert kept.shape == (B, H, n_q, n_k) and not kept[np.broadcast_to(pad[:, None, None], kept.shape)].any()
    f64 = [x.astype(np.float64) for x in (do, q, k, v)]
    o_ref, lse_ref = _masked_forward(*f64[1:], pad, causal, n_k - n_q)
    for b in range(B):
        keep = np.flatnonzero(~pad[b])
        if not len(keep):
            assert np.all(o[b] == 0) and np.all(lse[b] == -np.inf)
            assert np.all(dq[b] == 0) and np.all(dk[b] == 0) and np.all(dv[b] == 0)
            continue
        kb, vb = (x[b:b + 1][:, :, keep] for x in f64[2:])
        band = dict(causal=causal, diagonal=n_k - n_q if causal else None)
        if dropout_p:
            entry = np.stack([ref.dropout_keep(ref.padding_dropout_seed(seed, b), h, n_q, len(keep),
                                               dropout_p) for h in range(H)])[None]
            assert np.array_equal(kept[b:b + 1][..., keep], entry)
            band["dropout"] = ref.dropout_factors(entry, dropout_p)
            o_ref[b:b + 1] = ref.attention_forward(f64[1][b:b + 1], kb, vb, **band)[0]
        else:
            assert kept[b][..., keep].all()
        args = (f64[0][b:b + 1], f64[1][b:b + 1], kb, vb)
        refs = ref.attention_backward(*args, **band)
        if fmt == "float32":
            plain, _ = ref.attention_forward(*args[1:], dtype=np.float32, **band)
            plains = ref.attention_backward(*args, dtype=np.float32, **band)
        else:
            plain = ref.plain_attention_forward(*(x.astype(t) for x in args[1:]), fmt, **band)
            plains = ref.plain_attention_backward(*(x.astype(t) for x in args), fmt, **band)
        assert rel(o[b:b + 1], o_ref[b:b + 1]) <= 2 * rel(plain, o_ref[b:b + 1]) + FLOOR, b
        seen = np.isfinite(lse_ref[b])
        assert np.all(lse[b][~seen] == -np.inf)
        np.testing.assert_allclose(lse[b][seen], lse_ref[b][seen], rtol=1e-5, atol=1e-5)
        got = (dq[b:b + 1], dk[b:b + 1][:, :, keep], dv[b:b + 1][:, :, keep])
        for name, g, r, pl in zip(("dq", "dk", "dv"), got, refs, plains):
            assert rel(g, r) <= 3 * rel(pl, r) + FLOOR, (b, name, rel(g, r), rel(pl, r))
        assert np.all(dk[b][:, pad[b]] == 0) and np.all(dv[b][:, pad[b]] == 0)


@pytest.mark.parametrize("fmt,causal,B,H,H_kv,n_q,n_k,pads", CASES)
def test_key_padding_forward_and_backward(fmt, causal, B, H, H_kv, n_q, n_k, pads):
    check_key_padding(fmt, causal, B, H, H_kv, n_q, n_k, 8, np.array(pads(np.random.default_rng(7), n_k)))


def test_key_padding_with_dropout():
    """Dropout 0.1 with padding (the paper's Fig. 3 setting), causal N_q != N_k, GQA, a fully
    padded entry: the mask keeps no padding key, is per entry its own seed's B = 1 mask, and
    the gradients are the reference's with it (the backward regenerates it)."""
    pad = np.arange(20)[None, :] >= np.array([20, 14, 0])[:, None]
    check_key_padding("float32", True, 3, 4, 2, 16, 20, 8, pad, seed=5, dropout_p=0.1)


def test_padded_entries_draw_independent_dropout_masks():
    """Two entries with the same kept keys, one seed: different masks (their own seeds)."""
    q = np.ones((2, 1, 16, 8), np.float32)
    pad = np.zeros((2, 16), bool)
    _, mask = nf.flash_attention(q, q, q, key_padding_mask=pad, dropout_p=0.5, dropout_seed=3,
                                 return_dropout_mask=True)
    assert mask.shape == (2, 1, 16, 16) and not np.array_equal(mask[0], mask[1])
    seeds = {ref.padding_dropout_seed(s, b) for s in (3, 4) for b in range(3)}
    assert len(seeds) == 6 and ref.padding_dropout_seed(np.int64(3), np.int64(1)) in seeds
    # a NumPy seed through the API: the same masks as the int
    _, again = nf.flash_attention(q, q, q, key_padding_mask=pad, dropout_p=0.5,
                                  dropout_seed=np.int64(3), return_dropout_mask=True)
    assert np.array_equal(mask, again)


@pytest.mark.parametrize("kwargs,match", [
    (dict(key_padding_mask=np.zeros((2, 9), bool)), r"key_padding_mask must be a \(B, N_k\)"),
    (dict(key_padding_mask=np.zeros((2, 10), np.int8)), "bool array"),
    (dict(key_padding_mask=np.arange(20).reshape(2, 10) % 3 == 0, causal=True), "padding at the end"),
    (dict(key_padding_mask=np.zeros((2, 10), bool), block_mask=np.ones((1, 1), bool)), "block_mask"),
    (dict(key_padding_mask=np.zeros((2, 10), bool), dropout_p=0.1), "dropout_seed"),
])
def test_bad_key_padding_is_refused_before_any_launch(kwargs, match, monkeypatch):
    from numba_flash import padding

    monkeypatch.setattr(padding.api, "flash_attention", lambda *a, **k: pytest.fail("launched"))
    q = np.zeros((2, 2, 10, 8), np.float32)
    with pytest.raises(ValueError, match=match):
        nf.flash_attention(q, q, q, **kwargs)
