"""What the entry points that split one call into several (``varlen``: a call per packed
sequence; ``padding``: a call per batch entry; the GQA backward's ``kv_split``: the query heads
of a K/V head over several copies of it) need of their inputs, NumPy arrays or torch tensors
alike: contiguous copies of slices, zeroed outputs like an input, heads repeated and summed
(torch is never imported unless an input is a torch tensor)."""
from __future__ import annotations

import numpy as np

from .precision import is_torch_tensor


def contiguous(x):
    """x itself if it is contiguous, else a contiguous copy (NumPy or torch, as x)."""
    return x.contiguous() if is_torch_tensor(x) else np.ascontiguousarray(x)


def zeros(like, shape, float32: bool = False):
    """Zeros of ``shape`` on ``like``'s device, in its dtype (``float32``: in float32)."""
    if is_torch_tensor(like):
        import torch
        return torch.zeros(shape, dtype=torch.float32 if float32 else like.dtype, device=like.device)
    return np.zeros(shape, np.float32 if float32 else like.dtype)


def falses(like, shape):
    """A bool array of ``shape``, all False, on ``like``'s device (NumPy or torch, as like)."""
    if is_torch_tensor(like):
        import torch
        return torch.zeros(shape, dtype=torch.bool, device=like.device)
    return np.zeros(shape, bool)


def host(x) -> np.ndarray:
    """x as a host NumPy array (torch tensors copied off their device)."""
    return np.asarray(x.cpu() if is_torch_tensor(x) else x)


def splittable(x) -> bool:
    """Whether ``repeat_heads`` and ``sum_heads`` take x: a NumPy array or a torch tensor."""
    return isinstance(x, np.ndarray) or is_torch_tensor(x)


def repeat_heads(x, s: int):
    """(B, H, N, d) -> (B, H s, N, d), head h copied to heads h s ... h s + s - 1 (torch's
    ``repeat_interleave``), contiguous, as x (NumPy or torch)."""
    if is_torch_tensor(x):
        return x.repeat_interleave(s, dim=1)
    return np.repeat(x, s, axis=1)


def sum_heads(x, s: int):
    """(B, H s, N, d) -> (B, H, N, d): the sums of each s consecutive heads, in float32, rounded
    once to x's dtype (the inverse of ``repeat_heads`` for gradients)."""
    B, heads, n, d = x.shape
    if is_torch_tensor(x):
        import torch
        return x.view(B, heads // s, s, n, d).sum(2, dtype=torch.float32).to(x.dtype)
    return x.reshape(B, heads // s, s, n, d).astype(np.float32).sum(2).astype(x.dtype)
