"""The attention problem a cost is predicted for: shapes, element size and masking."""
from __future__ import annotations

from dataclasses import dataclass

from .blocks import causal_diagonal

#: Element size in bytes -> the precision whose peak rate the roofline uses.
PRECISION_OF_BYTES = {4: "fp32", 2: "fp16"}

#: The dimensions of every tensor name of docs/traffic-contract.md, per (batch, head) pair.
_TENSOR_SHAPE = {
    **{name: ("N_q", "d") for name in ("Q", "O", "dO", "dQ", "dQ_accum")},
    **{name: ("N_k", "d") for name in ("K", "V", "dK", "dV")},
    **{name: ("N_q", "N_k") for name in ("S", "P", "dP", "dS")},
    **{name: ("N_q",) for name in ("L", "D", "l", "m")},
}


@dataclass(frozen=True)
class Workload:
    """Attention over ``B`` batches x ``H`` heads, ``N_q`` queries, ``N_k`` keys, head dim ``d``.

    dtype_bytes: bytes per element (4: fp32, 2: fp16).  causal: query r sees key c iff
    c <= r + diagonal (torch.tril's convention), as in docs/traffic-contract.md; ``diagonal``
    None is N_k - N_q (bottom-right aligned, flash-attention's), 0 top-left (torch SDPA's
    ``is_causal``); any int, given only with ``causal``.
    """

    B: int
    H: int
    N_q: int
    N_k: int
    d: int
    dtype_bytes: int = 4
    causal: bool = False
    diagonal: int | None = None

    def __post_init__(self):
        for name in ("B", "H", "N_q", "N_k", "d"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Workload.{name} must be a positive int, got {value!r}")
        if self.dtype_bytes not in PRECISION_OF_BYTES or isinstance(self.dtype_bytes, bool):
            raise ValueError(f"Workload.dtype_bytes must be one of {sorted(PRECISION_OF_BYTES)}, "
                             f"got {self.dtype_bytes!r}")
        if not isinstance(self.causal, bool):
            raise ValueError(f"Workload.causal must be a bool, got {self.causal!r}")
        if self.diagonal is not None:
            if not isinstance(self.diagonal, int) or isinstance(self.diagonal, bool):
                raise ValueError(f"Workload.diagonal must be an int or None, got {self.diagonal!r}")
            if not self.causal:
                raise ValueError("Workload.diagonal is the causal mask's: give it with causal=True")

    @property
    def BH(self) -> int:
        """Independent (batch, head) pairs."""
        return self.B * self.H

    @property
    def causal_diagonal(self) -> int:
        """The effective diagonal of the causal mask (row r sees key c iff c <= r + it):
        ``diagonal``, or N_k - N_q when None; clamped to [-N_q, N_k] (the same mask, see
        ``blocks.causal_diagonal``).  Meaningful only with ``causal``."""
        return causal_diagonal(self.N_q, self.N_k, self.diagonal)

    @property
    def precision(self) -> str:
        """"fp32" or "fp16": the peak rate the roofline divides FLOPs by."""
        return PRECISION_OF_BYTES[self.dtype_bytes]

    def tensor_elements(self, name: str) -> int:
        """Elements of tensor ``name`` (a contract name: Q, K, ..., S, P, L, D, l, m) over all B*H."""
        if name not in _TENSOR_SHAPE:
            raise ValueError(f"unknown tensor {name!r}; known: {sorted(_TENSOR_SHAPE)}")
        size = self.BH
        for dim in _TENSOR_SHAPE[name]:
            size *= getattr(self, dim)
        return size
