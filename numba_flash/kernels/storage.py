"""The HBM storage format of the kernels that take it as a compile-time parameter (the standard
attention kernels, the Algorithm-1 forward): one kernel body for float32, float16 and bfloat16.

In float32 a tensor holds its values; in fp16 / bf16 it holds their 16-bit patterns (uint16, as
the tensor-core half forward's), converted to fp32 as they are loaded and rounded back (to
nearest even) as they are stored. Arithmetic and shared memory stay fp32 either way, so only
the bytes of an HBM element change, never how many are moved.
"""
from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace

from ..precision import FORMATS
from .half import half_ops
from .tiles import identity


@lru_cache(maxsize=None)
def storage_ops(dtype: str) -> SimpleNamespace:
    """Device functions for HBM elements stored as ``dtype`` ("float32", "float16",
    "bfloat16"): ``load(element) -> float32`` and ``store(float32) -> element``."""
    if dtype not in FORMATS:
        raise ValueError(f"dtype must be one of {FORMATS}, got {dtype!r}")
    if dtype == "float32":
        return SimpleNamespace(load=identity, store=identity)
    h = half_ops(dtype)
    return SimpleNamespace(load=h.from_half, store=h.to_half)
