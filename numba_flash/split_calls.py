"""What the entry points that split one call into several (``varlen``: a call per packed
sequence; ``padding``: a call per batch entry) need of their inputs, NumPy arrays or torch
tensors alike: contiguous copies of slices, and zeroed outputs like an input (torch is never
imported unless an input is a torch tensor)."""
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


def host(x) -> np.ndarray:
    """x as a host NumPy array (torch tensors copied off their device)."""
    return np.asarray(x.cpu() if is_torch_tensor(x) else x)
