"""numba-flash: FlashAttention (Dao et al., 2022) rebuilt from the paper as Numba CUDA kernels.

Public API (PyTorch SDPA layout, q (B, H, N_q, d), k and v (B, H, N_k, d), float32, float16 or
bfloat16):
``flash_attention``, ``flash_attention_backward``, ``standard_attention``,
``standard_attention_backward``; ``flash_attention_varlen`` and its backward (packed
variable-length sequences, flash-attention's interface); ``Tiling`` (block sizes, shared with ``simulator``);
``reference`` (float64 NumPy); ``instrument.count_traffic`` (exact global-memory counts under
Numba's CUDA simulator); ``warmup`` of ``KernelConfig``s (compiled kernels are cached on disk:
``kernel_cache``); ``numba_flash.torch`` (torch's ``scaled_dot_product_attention`` on our
kernels, differentiable; needs torch) and ``numba_flash.flash_attn`` (flash-attention's
``flash_attn_func`` and ``flash_attn_varlen_func``, differentiable; needs torch).
"""
from simulator.tiling import Tiling

from . import reference
from .api import (
    flash_attention,
    flash_attention_backward,
    standard_attention,
    standard_attention_backward,
)
from .memory import poison_outputs, simulator_enabled
from .varlen import flash_attention_varlen, flash_attention_varlen_backward
from .simulator_fixes import install as _race_free_simulator

if simulator_enabled():
    _race_free_simulator()


def __getattr__(name):
    """``warmup`` and ``KernelConfig`` from ``precompile``, imported on first use (so that
    ``python -m numba_flash.precompile`` runs a module the package has not imported yet)."""
    if name in ("KernelConfig", "warmup"):
        from . import precompile

        return getattr(precompile, name)
    raise AttributeError(f"module 'numba_flash' has no attribute {name!r}")

__all__ = [
    "KernelConfig",
    "Tiling",
    "flash_attention",
    "flash_attention_backward",
    "flash_attention_varlen",
    "flash_attention_varlen_backward",
    "poison_outputs",
    "reference",
    "standard_attention",
    "standard_attention_backward",
    "warmup",
]
