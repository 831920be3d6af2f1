"""Variable-length batches, flash-attention's varlen interface: sequences packed end to end.

    o = flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)

q: (total_q, H, d), k and v: (total_k, H_kv, d), sequence i's rows q[cu_seqlens_q[i] :
cu_seqlens_q[i + 1]] attending to k, v[cu_seqlens_k[i] : cu_seqlens_k[i + 1]] only; lse is
(H, total_q), as flash-attention's. Padding is never loaded nor computed: there is none.

How: one ``flash_attention`` (``flash_attention_backward``) call per sequence on its rows, as
(1, H, n_i, d) -- the kernels and their checks unchanged, but one launch (and its host work) per
sequence, and the packed rows transposed to head-major and back around each. A fused kernel
that reads the offsets itself (one launch for the batch) is not built. NumPy arrays or torch
CUDA tensors.

Dropout (``dropout_p``, ``dropout_seed``): sequence i's call draws its mask from its own seed,
``reference.padding_dropout_seed(dropout_seed, i)``, as key padding's batch entries do (the
kernels key the mask by batch-head, which each call restarts), so the sequences' masks are
independent; the backward, given the same seed, regenerates them. ``return_dropout_mask=True``
returns them as flash-attention's varlen functions return theirs, padded: (B, H, max_seqlen_q,
max_seqlen_k) bool, sequence i's (H, n_q_i, n_k_i) mask at ``[i, :, :n_q_i, :n_k_i]``, False
elsewhere.
"""
from __future__ import annotations

import numpy as np

from . import api, checks
from .precision import is_torch_tensor
from .reference import padding_dropout_seed
from .split_calls import contiguous, falses, host, zeros


def _head_major(x, a: int, b: int):
    """Rows a:b of packed x (total, heads, d) as a contiguous (1, heads, b - a, d)."""
    return contiguous(x[a:b].swapaxes(0, 1))[None]


def _offsets(name: str, cu, total: int, max_seqlen, max_name: str) -> list[int]:
    """cu_seqlens as Python ints, checked: 1-D integers, from 0, non-decreasing, ending at
    ``total`` (the packed rows), no sequence longer than ``max_seqlen``."""
    values = host(cu)
    if values.ndim != 1 or values.size < 2 or not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"{name} must be a 1-D integer array of batch + 1 offsets, got "
                         f"shape {values.shape} {values.dtype}")
    lengths = np.diff(values)
    if values[0] != 0 or (lengths < 0).any() or values[-1] != total:
        raise ValueError(f"{name} must start at 0, never decrease and end at the packed length "
                         f"{total}; got {values.tolist()[:8]}{'...' if values.size > 8 else ''}")
    if not isinstance(max_seqlen, (int, np.integer)) or isinstance(max_seqlen, bool) or max_seqlen < lengths.max():
        raise ValueError(f"{max_name} must be an int >= the longest sequence of {name} "
                         f"({int(lengths.max())}), got {max_seqlen!r}")
    return [int(x) for x in values]


def _packed(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
            dropout_seed):
    """Checks (before any launch); each sequence's (row start, row end, key start, key end)
    and the dropout arguments of its call (none without dropout)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not (isinstance(x, np.ndarray) or is_torch_tensor(x)):
            raise TypeError(f"{name} must be a NumPy array or a torch CUDA tensor, got {type(x).__name__}")
        if x.ndim != 3:
            raise ValueError(f"{name} must be packed (total, heads, d), got shape {tuple(x.shape)}")
    if tuple(k.shape) != tuple(v.shape) or q.shape[2] != k.shape[2]:
        raise ValueError(f"k and v must be (total_k, H_kv, d) with q's d: got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    checks.dropout(dropout_p, dropout_seed)
    starts_q = _offsets("cu_seqlens_q", cu_seqlens_q, q.shape[0], max_seqlen_q, "max_seqlen_q")
    starts_k = _offsets("cu_seqlens_k", cu_seqlens_k, k.shape[0], max_seqlen_k, "max_seqlen_k")
    if len(starts_q) != len(starts_k):
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k must hold one offset per sequence + 1 each: "
                         f"got {len(starts_q)} and {len(starts_k)}")
    spans = list(zip(starts_q, starts_q[1:], starts_k, starts_k[1:]))
    drops = [dict(dropout_p=dropout_p, dropout_seed=padding_dropout_seed(dropout_seed, i))
             if dropout_p else {} for i in range(len(spans))]
    return spans, drops


def flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                           causal=False, softmax_scale=None, return_lse=False, window=None,
                           dropout_p=0.0, dropout_seed=None, return_dropout_mask=False, **options):
    """FlashAttention over packed sequences (module docstring). q: (total_q, H, d); k, v:
    (total_k, H_kv, d); ``causal`` and ``window`` per sequence as ``flash_attention``'s
    (bottom-right aligned where a sequence's query and key lengths differ); dropout per
    sequence (module docstring); ``options`` go to each call (``algorithm``, ``tiling``, ...).
    Returns o (total_q, H, d); with ``return_lse`` also lse (H, total_q) float32 (-inf for
    rows that see no key), with ``return_dropout_mask`` also the masks (B, H, max_seqlen_q,
    max_seqlen_k) bool, in that order."""
    spans, drops = _packed(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p, dropout_seed)
    checks.flag("return_dropout_mask", return_dropout_mask)
    o = zeros(q, tuple(q.shape))
    lse = zeros(q, (q.shape[1], q.shape[0]), float32=True)
    lse[:] = -np.inf
    keep = (falses(q, (len(spans), q.shape[1], max_seqlen_q, max_seqlen_k))
            if return_dropout_mask else None)
    for i, (a, b, c, e) in enumerate(spans):
        if b == a or e == c:           # no rows, or rows that see no key: o = 0, lse = -inf
            continue
        got = api.flash_attention(_head_major(q, a, b), _head_major(k, c, e), _head_major(v, c, e),
                                  causal=causal, softmax_scale=softmax_scale, return_lse=True,
                                  window=window, return_dropout_mask=return_dropout_mask,
                                  **drops[i], **options)
        o[a:b] = got[0][0].swapaxes(0, 1)
        lse[:, a:b] = got[1][0]
        if return_dropout_mask:
            keep[i, :, :b - a, :e - c] = got[2][0]
    out = (o, lse) if return_lse else (o,)
    if return_dropout_mask:
        out += (keep,)
    return out if len(out) > 1 else o


def flash_attention_varlen_backward(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, *, causal=False, softmax_scale=None, window=None,
                                    dropout_p=0.0, dropout_seed=None, **options):
    """Gradients (dq, dk, dv) of ``flash_attention_varlen`` from its o and lse (H, total_q), in
    the packed layouts; arguments as the forward's (dropout: the forward's seed, each
    sequence's mask regenerated), ``options`` to each ``flash_attention_backward`` call
    (``deterministic``, ``tiling``, ...)."""
    spans, drops = _packed(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p, dropout_seed)
    for name, x in (("do", do), ("o", o)):
        if tuple(x.shape) != tuple(q.shape):
            raise ValueError(f"{name} must have q's packed shape {tuple(q.shape)}, got {tuple(x.shape)}")
    if tuple(lse.shape) != (q.shape[1], q.shape[0]):
        raise ValueError(f"lse must be (H, total_q) = {(q.shape[1], q.shape[0])}, as the forward "
                         f"returns it; got {tuple(lse.shape)}")
    dq, dk, dv = zeros(q, tuple(q.shape)), zeros(k, tuple(k.shape)), zeros(v, tuple(v.shape))
    for i, (a, b, c, e) in enumerate(spans):
        if b == a or e == c:
            continue
        li = contiguous(lse[:, a:b])[None]
        grads = api.flash_attention_backward(
            _head_major(do, a, b), _head_major(q, a, b), _head_major(k, c, e), _head_major(v, c, e),
            _head_major(o, a, b), li, causal=causal, softmax_scale=softmax_scale, window=window,
            **drops[i], **options)
        for out, g, (lo, hi) in zip((dq, dk, dv), grads, ((a, b), (c, e), (c, e))):
            out[lo:hi] = g[0].swapaxes(0, 1)
    return dq, dk, dv
