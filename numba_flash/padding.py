"""``key_padding_mask`` for ``flash_attention`` and its backward: keys to ignore, per batch entry.

``key_padding_mask`` (B, N_k) bool, PyTorch's convention (``nn.MultiheadAttention``): True marks
a padding key, which no query sees. Each batch entry runs as its own call on the keys it keeps,
gathered -- so padding is neither loaded nor computed, at a launch (and a gather) per batch
entry; a fused kernel that reads per-entry key lengths is not built. Without a causal mask or a
window any keys may be padding; with one, key positions matter, so the kept keys must be a
prefix (padding at the end, the usual layout), and the call keeps the unpadded diagonal.
Dropout: entry b's call draws its mask from its own seed, ``reference.padding_dropout_seed``
(``dropout_seed``, b), over its kept keys in order (a B = 1 call's mask); the backward, given
the same seed and mask, regenerates it; ``return_dropout_mask`` scatters it to (B, H, N_q, N_k),
padding keys never kept. (So a padded call's mask is not the unpadded call's.)
"""
from __future__ import annotations

import numpy as np

from . import api, checks
from .precision import is_torch_tensor
from .reference import padding_dropout_seed
from .split_calls import contiguous, falses, host, zeros


def _is_prefix(idx: np.ndarray) -> bool:
    """Whether the kept key indices ``idx`` (sorted, not empty) are 0, 1, ..., len - 1."""
    return idx[-1] == len(idx) - 1


def _entries(q, k, key_padding_mask, causal, window, diagonal, dropout_p, dropout_seed, block_mask):
    """Checks (before any launch); per batch entry the indices of the keys it keeps, and the
    mask and dropout arguments each entry's call takes (``dropout_seed`` per entry)."""
    if block_mask is not None:
        raise ValueError("key_padding_mask does not combine with block_mask yet: pass one of them")
    checks.dropout(dropout_p, dropout_seed)
    if q.ndim != 4 or k.ndim != 4:
        raise ValueError(f"q and k must be (B, H, N, d) for key_padding_mask, got shapes "
                         f"{tuple(q.shape)} and {tuple(k.shape)}")
    mask = host(key_padding_mask)
    B, N_k = q.shape[0], k.shape[2]
    if mask.dtype != np.bool_ or mask.shape != (B, N_k):
        raise ValueError(f"key_padding_mask must be a (B, N_k) = {(B, N_k)} bool array (True: a "
                         f"padding key, ignored), got {mask.shape} {mask.dtype}")
    kept = [np.flatnonzero(~row) for row in mask]
    banded = bool(causal) or window is not None
    if banded and any(len(idx) and not _is_prefix(idx) for idx in kept):
        raise ValueError("key_padding_mask with causal=True or a window needs each entry's padding "
                         "at the end (its kept keys a prefix): key positions set the mask's diagonal")
    if banded and diagonal is None:          # the unpadded diagonal, not the kept keys'
        diagonal = N_k - q.shape[2]
    band = dict(causal=causal, window=window, diagonal=diagonal)
    calls = [dict(band, dropout_p=dropout_p, dropout_seed=padding_dropout_seed(dropout_seed, b))
             if dropout_p else band for b in range(B)]
    return kept, calls


def _key_index(x, idx: np.ndarray):
    """What selects the keys ``idx`` along x's key axis: a slice for a prefix, else the indices
    (a tensor on x's device for torch)."""
    if _is_prefix(idx):
        return slice(0, len(idx))
    if is_torch_tensor(x):
        import torch
        return torch.as_tensor(idx, device=x.device)
    return idx


def _keys(x, b: int, idx: np.ndarray):
    """Batch entry b of x (B, H_kv, N_k, d) at keys ``idx``, as a contiguous (1, H_kv, n, d)."""
    return contiguous(x[b:b + 1][:, :, _key_index(x, idx)])


def forward(q, k, v, key_padding_mask, *, causal, window, diagonal, return_lse, dropout_p,
            dropout_seed, block_mask, return_dropout_mask, **options):
    """``flash_attention`` with ``key_padding_mask`` (module docstring)."""
    kept, calls = _entries(q, k, key_padding_mask, causal, window, diagonal, dropout_p,
                           dropout_seed, block_mask)
    checks.flag("return_dropout_mask", return_dropout_mask)
    o = zeros(q, tuple(q.shape))
    lse = zeros(q, tuple(q.shape[:3]), float32=True)
    lse[:] = -np.inf
    keep = falses(q, tuple(q.shape[:3]) + (k.shape[2],)) if return_dropout_mask else None
    for b, idx in enumerate(kept):
        if not len(idx):                 # every key padding: o = 0, lse = -inf
            continue
        got = api.flash_attention(q[b:b + 1], _keys(k, b, idx), _keys(v, b, idx), return_lse=True,
                                  return_dropout_mask=return_dropout_mask, **calls[b], **options)
        o[b], lse[b] = got[0][0], got[1][0]
        if return_dropout_mask:
            keep[b][:, :, _key_index(k, idx)] = got[2][0]
    out = (o, lse) if return_lse else (o,)
    if return_dropout_mask:
        out += (keep,)
    return out if len(out) > 1 else o


def backward(do, q, k, v, o, lse, key_padding_mask, *, causal, window, diagonal, dropout_p,
             dropout_seed, block_mask, **options):
    """``flash_attention_backward`` with ``key_padding_mask``: dk, dv of padding keys are 0;
    dropout's mask regenerated per entry from the forward's seed."""
    kept, calls = _entries(q, k, key_padding_mask, causal, window, diagonal, dropout_p,
                           dropout_seed, block_mask)
    dq, dk, dv = zeros(q, tuple(q.shape)), zeros(k, tuple(k.shape)), zeros(v, tuple(v.shape))
    for b, idx in enumerate(kept):
        if not len(idx):
            continue
        gq, gk, gv = api.flash_attention_backward(do[b:b + 1], q[b:b + 1], _keys(k, b, idx),
                                                  _keys(v, b, idx), o[b:b + 1], lse[b:b + 1],
                                                  **calls[b], **options)
        at = _key_index(k, idx)
        dq[b], dk[b][:, at], dv[b][:, at] = gq[0], gk[0], gv[0]
    return dq, dk, dv
