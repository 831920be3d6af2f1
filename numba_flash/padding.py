"""``key_padding_mask`` for ``flash_attention`` and its backward: keys to ignore, per batch entry.

``key_padding_mask`` (B, N_k) bool, PyTorch's convention (``nn.MultiheadAttention``): True marks
a padding key, which no query sees. Each batch entry runs as its own call on the keys it keeps,
gathered -- so padding is neither loaded nor computed, at a launch (and a gather) per batch
entry; a fused kernel that reads per-entry key lengths is not built. Without a causal mask or a
window any keys may be padding; with one, key positions matter, so the kept keys must be a
prefix (padding at the end, the usual layout), and the call keeps the unpadded diagonal.
"""
from __future__ import annotations

import numpy as np

from . import api


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def kept_keys(key_padding_mask, q, k, banded: bool) -> list[np.ndarray]:
    """Per batch entry, the indices of the keys it keeps (checked before any launch)."""
    if q.ndim != 4 or k.ndim != 4:
        raise ValueError(f"q and k must be (B, H, N, d) for key_padding_mask, got shapes "
                         f"{tuple(q.shape)} and {tuple(k.shape)}")
    mask = np.asarray(key_padding_mask.cpu() if _is_torch(key_padding_mask) else key_padding_mask)
    B, N_k = q.shape[0], k.shape[2]
    if mask.dtype != np.bool_ or mask.shape != (B, N_k):
        raise ValueError(f"key_padding_mask must be a (B, N_k) = {(B, N_k)} bool array (True: a "
                         f"padding key, ignored), got {mask.shape} {mask.dtype}")
    kept = [np.flatnonzero(~row) for row in mask]
    if banded and any(len(idx) and idx[-1] != len(idx) - 1 for idx in kept):
        raise ValueError("key_padding_mask with causal=True or a window needs each entry's padding "
                         "at the end (its kept keys a prefix): key positions set the mask's diagonal")
    return kept


def _keys(x, b: int, idx: np.ndarray):
    """Batch entry b of x (B, H_kv, N_k, d) at keys ``idx``, as a contiguous (1, H_kv, n, d)."""
    if len(idx) and idx[-1] == len(idx) - 1:          # a prefix: a slice
        part = x[b:b + 1, :, :len(idx)]
    else:
        part = x[b:b + 1][:, :, _index(x, idx)]
    return part.contiguous() if _is_torch(x) else np.ascontiguousarray(part)


def _index(like, idx):
    if _is_torch(like):
        import torch
        return torch.as_tensor(idx, device=like.device)
    return idx


def _zeros(like, shape, float32: bool = False):
    if _is_torch(like):
        import torch
        return torch.zeros(shape, dtype=torch.float32 if float32 else like.dtype, device=like.device)
    return np.zeros(shape, np.float32 if float32 else like.dtype)


def _diagonal(diagonal, q, k):
    return k.shape[2] - q.shape[2] if diagonal is None else diagonal


def forward(q, k, v, key_padding_mask, *, causal, window, diagonal, return_lse, dropout_p,
            block_mask, **options):
    """``flash_attention`` with ``key_padding_mask`` (module docstring)."""
    if dropout_p or block_mask is not None:
        raise ValueError("key_padding_mask does not combine with dropout_p or block_mask yet: pass "
                         "one of them")
    if options.get("return_dropout_mask"):
        raise ValueError("return_dropout_mask needs dropout, which key_padding_mask does not take yet")
    options.pop("return_dropout_mask", None)
    banded = bool(causal) or window is not None
    kept = kept_keys(key_padding_mask, q, k, banded)
    o = _zeros(q, tuple(q.shape))
    lse = _zeros(q, tuple(q.shape[:3]), float32=True)
    lse[:] = -np.inf
    for b, idx in enumerate(kept):
        if not len(idx):                 # every key padding: o = 0, lse = -inf
            continue
        band = dict(causal=causal, window=window,
                    diagonal=_diagonal(diagonal, q, k) if banded else diagonal)
        oi, li = api.flash_attention(q[b:b + 1], _keys(k, b, idx), _keys(v, b, idx), return_lse=True,
                                     **band, **options)
        o[b], lse[b] = oi[0], li[0]
    return (o, lse) if return_lse else o


def backward(do, q, k, v, o, lse, key_padding_mask, *, causal, window, diagonal, dropout_p,
             block_mask, **options):
    """``flash_attention_backward`` with ``key_padding_mask``: dk, dv of padding keys are 0."""
    if dropout_p or block_mask is not None:
        raise ValueError("key_padding_mask does not combine with dropout_p or block_mask yet: pass "
                         "one of them")
    banded = bool(causal) or window is not None
    kept = kept_keys(key_padding_mask, q, k, banded)
    dq, dk, dv = _zeros(q, tuple(q.shape)), _zeros(k, tuple(k.shape)), _zeros(v, tuple(v.shape))
    for b, idx in enumerate(kept):
        if not len(idx):
            continue
        band = dict(causal=causal, window=window,
                    diagonal=_diagonal(diagonal, q, k) if banded else diagonal)
        gq, gk, gv = api.flash_attention_backward(do[b:b + 1], q[b:b + 1], _keys(k, b, idx),
                                                  _keys(v, b, idx), o[b:b + 1], lse[b:b + 1],
                                                  **band, **options)
        dq[b] = gq[0]
        at = slice(0, len(idx)) if idx[-1] == len(idx) - 1 else _index(k, idx)
        dk[b][:, at], dv[b][:, at] = gk[0], gv[0]
    return dq, dk, dv
