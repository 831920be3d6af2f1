"""The attention problem a cost is predicted for: shapes, element size and masking."""
from __future__ import annotations

from dataclasses import dataclass

#: Element size in bytes -> the precision whose peak rate the roofline uses.
PRECISION_OF_BYTES = {4: "fp32", 2: "fp16"}

#: The dimensions of every tensor name of docs/traffic-contract.md, per (batch, head) pair.
_TENSOR_SHAPE = {
    **{name: ("N_q", "d") for name in ("Q", "O", "dO", "dQ")},
    **{name: ("N_k", "d") for name in ("K", "V", "dK", "dV")},
    **{name: ("N_q", "N_k") for name in ("S", "P", "dP", "dS")},
    **{name: ("N_q",) for name in ("L", "D", "l", "m")},
}


@dataclass(frozen=True)
class Workload:
    """Attention over ``B`` batches x ``H`` heads, ``N_q`` queries, ``N_k`` keys, head dim ``d``.

    dtype_bytes: bytes per element (4: fp32, 2: fp16).  causal: bottom-right aligned mask
    (query r sees key c iff c <= r + N_k - N_q), as in docs/traffic-contract.md.
    """

    B: int
    H: int
    N_q: int
    N_k: int
    d: int
    dtype_bytes: int = 4
    causal: bool = False

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

    @property
    def BH(self) -> int:
        """Independent (batch, head) pairs."""
        return self.B * self.H

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
