"""flash-attention's functions on numba-flash's kernels, with autograd, for code written against
``flash_attn``:

    from numba_flash.flash_attn import flash_attn_func, flash_attn_varlen_func
    o = flash_attn_func(q, k, v, causal=True)          # q (B, N_q, H, d), k, v (B, N_k, H_kv, d)
    o = flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)

and their packed-input forms, ``flash_attn_qkvpacked_func`` (qkv (B, N, 3, H, d)),
``flash_attn_kvpacked_func`` (kv (B, N_k, 2, H_kv, d)), ``flash_attn_varlen_qkvpacked_func``
(qkv (total, 3, H, d)) and ``flash_attn_varlen_kvpacked_func`` (kv (total_k, 2, H_kv, d)).

Their semantics are flash-attention's: its (batch, seqlen, heads, head_dim) layout (copied to
ours, (B, H, N, d), and back), packed sequences with ``cu_seqlens`` offsets, ``causal``
bottom-right (row r sees keys c <= r + N_k - N_q), ``window_size`` (left, right) about that
diagonal (-1: unbounded), GQA / MQA (k, v with fewer heads), ``softmax_scale`` default
1/sqrt(d), ``dropout_p`` with a seed drawn from torch's default generator
(``numba_flash.torch.dropout_seed``), ``deterministic`` for the backward. ``softcap``,
``alibi_slopes``, ``return_attn_probs`` and ``block_table`` raise NotImplementedError unless
left at their defaults. ``flash_attn_func`` runs on ``numba_flash.torch``'s operators;
``flash_attn_varlen_func`` on its own pair, ``numba_flash::varlen_forward`` /
``varlen_backward``, on ``numba_flash.varlen`` (a call per sequence). Both operator pairs have
fake kernels and autograd formulas, so ``torch.compile(fullgraph=True)`` traces through them.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from . import varlen
from .torch import _dropout, _run, _window, attention_forward, check_dropout_p, dropout_seed

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func",
           "flash_attn_kvpacked_func", "flash_attn_varlen_qkvpacked_func",
           "flash_attn_varlen_kvpacked_func"]


@torch.library.custom_op("numba_flash::varlen_forward", mutates_args=())
def varlen_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                   cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, scale: float,
                   causal: bool, window_left: int = -1, window_right: int = -1,
                   dropout_p: float = 0.0, seed: Optional[torch.Tensor] = None,
                   deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of ``varlen.flash_attention_varlen``: q (total_q, H, d), k and v (total_k,
    H_kv, d) packed, sequence i's rows ``cu_seqlens_q[i]:cu_seqlens_q[i + 1]`` (int32 or int64
    offsets) on its keys ``cu_seqlens_k[i]:cu_seqlens_k[i + 1]``; o like q, lse (H, total_q)
    float32; ``causal`` bottom-right per sequence, the window's sides as flash-attention's
    ``window_size`` (-1: unbounded), dropout as ``attention_forward``'s; ``deterministic`` is
    the backward's (read by autograd only)."""
    return _run(varlen.flash_attention_varlen, (q, k, v), cu_seqlens_q=cu_seqlens_q,
                cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                causal=causal, softmax_scale=scale, return_lse=True,
                window=_window(window_left, window_right), **_dropout(dropout_p, seed))


@varlen_forward.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal,
      window_left=-1, window_right=-1, dropout_p=0.0, seed=None, deterministic=False):
    return torch.empty_like(q), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


@torch.library.custom_op("numba_flash::varlen_backward", mutates_args=())
def varlen_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    o: torch.Tensor, lse: torch.Tensor, cu_seqlens_q: torch.Tensor,
                    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                    scale: float, causal: bool, window_left: int = -1, window_right: int = -1,
                    dropout_p: float = 0.0, seed: Optional[torch.Tensor] = None,
                    deterministic: bool = False
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of ``varlen_forward``, in the packed layouts, from its o and lse (H,
    total_q); ``deterministic``: ``api.flash_attention_backward``'s."""
    return _run(varlen.flash_attention_varlen_backward, (do, q, k, v, o, lse),
                cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                max_seqlen_k=max_seqlen_k, causal=causal, softmax_scale=scale,
                window=_window(window_left, window_right), deterministic=deterministic,
                **_dropout(dropout_p, seed))


@varlen_backward.register_fake
def _(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal,
      window_left=-1, window_right=-1, dropout_p=0.0, seed=None, deterministic=False):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_varlen(ctx, inputs, output):
    (q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, left, right, dropout_p, seed,
     deterministic) = inputs
    o, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k, seed)
    ctx.args = (max_q, max_k, scale, causal, left, right, dropout_p)
    ctx.deterministic = deterministic


def _differentiate_varlen(ctx, do, _dlse):
    q, k, v, o, lse, cu_q, cu_k, seed = ctx.saved_tensors
    max_q, max_k, scale, causal, left, right, dropout_p = ctx.args
    dq, dk, dv = varlen_backward(do.contiguous(), q, k, v, o, lse, cu_q, cu_k, max_q, max_k, scale,
                                 causal, left, right, dropout_p, seed, ctx.deterministic)
    return dq, dk, dv, *(None,) * 11


varlen_forward.register_autograd(_differentiate_varlen, setup_context=_setup_varlen)


def _flash_attn_checks(tensors, dropout_p, window_size, softcap, alibi_slopes, return_attn_probs,
                       block_table=None) -> None:
    """What flash-attention's functions take that we do not, and their common arguments'
    types and ranges, checked before any launch."""
    for name, unset in (("softcap", softcap == 0.0), ("alibi_slopes", alibi_slopes is None),
                        ("return_attn_probs", not return_attn_probs),
                        ("block_table", block_table is None)):
        if not unset:
            raise NotImplementedError(f"numba_flash.flash_attn: flash-attention's {name} is not "
                                      "supported; leave it at its default")
    for name, x in tensors.items():
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise ValueError(f"window_size must be a pair (left, right), -1 for an unbounded side; "
                         f"got {window_size!r}")
    check_dropout_p(dropout_p)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash-attention's ``flash_attn_func`` on our kernels, with autograd: q (B, N_q, H, d), k
    and v (B, N_k, H_kv, d) in its layout (H a multiple of H_kv: GQA / MQA), float32, float16
    or bfloat16; ``causal`` bottom-right (row r sees keys c <= r + N_k - N_q), ``window_size``
    (left, right) about that diagonal (-1: unbounded), ``softmax_scale`` default 1/sqrt(d),
    ``dropout_p`` with a seed drawn as ``scaled_dot_product_attention``'s, ``deterministic`` the
    backward's. Returns o (B, N_q, H, d), contiguous. The inputs are copied to our (B, H, N, d)
    layout and o back. ``softcap``, ``alibi_slopes`` and ``return_attn_probs`` raise
    NotImplementedError unless left at their defaults."""
    _flash_attn_checks(dict(q=q, k=k, v=v), dropout_p, window_size, softcap, alibi_slopes,
                       return_attn_probs)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 4:
            raise ValueError(f"{name} must be (batch, seqlen, heads, head_dim), got shape "
                             f"{tuple(x.shape)}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    seed = dropout_seed() if dropout_p > 0 else None
    q4, k4, v4 = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    o, _ = attention_forward(q4, k4, v4, scale, bool(causal), k.shape[1] - q.shape[1],
                             float(dropout_p), seed, window_left=int(window_size[0]),
                             window_right=int(window_size[1]), deterministic=bool(deterministic))
    return o.transpose(1, 2).contiguous()


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None):
    """flash-attention's ``flash_attn_varlen_func`` on our kernels, with autograd: q (total_q,
    H, d), k and v (total_k, H_kv, d), sequences packed end to end, ``cu_seqlens_q`` and
    ``cu_seqlens_k`` (batch + 1,) int32 offsets, ``max_seqlen_*`` the longest; ``causal``
    bottom-right per sequence, ``window_size`` (left, right), ``softmax_scale`` default
    1/sqrt(d), ``dropout_p`` with a seed drawn as ``scaled_dot_product_attention``'s (each
    sequence its own mask: ``varlen``), ``deterministic`` the backward's. Returns o (total_q,
    H, d). ``softcap``, ``alibi_slopes``, ``return_attn_probs`` and ``block_table`` raise
    NotImplementedError unless left at their defaults. (One call per sequence: ``varlen``.)"""
    _flash_attn_checks(dict(q=q, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k),
                       dropout_p, window_size, softcap, alibi_slopes, return_attn_probs,
                       block_table)
    if q.dim() != 3:
        raise ValueError(f"q must be packed (total_q, H, d), got shape {tuple(q.shape)}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    seed = dropout_seed() if dropout_p > 0 else None
    o, _ = varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                          int(max_seqlen_k), scale, bool(causal), int(window_size[0]),
                          int(window_size[1]), float(dropout_p), seed, bool(deterministic))
    return o


def _unpacked(name: str, x, dim: int, parts: int):
    """The ``parts`` tensors packed along ``dim`` of ``x`` (views; their gradients flow back
    into x), after checking that dim has that size."""
    if not isinstance(x, torch.Tensor) or x.dim() <= dim or x.shape[dim] != parts:
        raise ValueError(f"{name} must hold {parts} tensors packed along dim {dim}, got "
                         f"{type(x).__name__} of shape {tuple(getattr(x, 'shape', ()))}")
    return x.unbind(dim)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, **options):
    """``flash_attn_func`` on qkv (B, N, 3, H, d); ``options`` as its."""
    return flash_attn_func(*_unpacked("qkv", qkv, 2, 3), dropout_p, softmax_scale, causal, **options)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, **options):
    """``flash_attn_func`` on q (B, N_q, H, d) and kv (B, N_k, 2, H_kv, d)."""
    return flash_attn_func(q, *_unpacked("kv", kv, 2, 2), dropout_p, softmax_scale, causal,
                           **options)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, **options):
    """``flash_attn_varlen_func`` on qkv (total, 3, H, d), one set of offsets for queries and
    keys."""
    return flash_attn_varlen_func(*_unpacked("qkv", qkv, 1, 3), cu_seqlens, cu_seqlens, max_seqlen,
                                  max_seqlen, dropout_p, softmax_scale, causal, **options)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                    dropout_p=0.0, softmax_scale=None, causal=False, **options):
    """``flash_attn_varlen_func`` on q (total_q, H, d) and kv (total_k, 2, H_kv, d)."""
    return flash_attn_varlen_func(q, *_unpacked("kv", kv, 1, 2), cu_seqlens_q, cu_seqlens_k,
                                  max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                                  **options)
