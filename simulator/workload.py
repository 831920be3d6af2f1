"""The attention problem a cost is predicted for: shapes, element size, masking and K/V heads."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .blocks import causal_diagonal
from .spec import Mask, band

#: Element size in bytes -> the precision whose peak rate the roofline uses.
PRECISION_OF_BYTES = {4: "fp32", 2: "fp16"}

#: The dimensions of every tensor name of docs/traffic-contract.md, per (batch, head) pair.
#: K, V, dK and dV are per K/V head (``Workload.H_kv`` of them a batch), the others per query head.
_KV_TENSORS = frozenset({"K", "V", "dK", "dV"})
_TENSOR_SHAPE = {
    **{name: ("N_q", "d") for name in ("Q", "O", "dO", "dQ", "dQ_accum")},
    **{name: ("N_k", "d") for name in ("K", "V", "dK", "dV")},
    **{name: ("N_q", "N_k") for name in ("S", "P", "dP", "dS")},
    **{name: ("N_q",) for name in ("L", "D", "l", "m")},
}


def needs_band_kernels(mask: Mask, causal: bool) -> bool:
    """Whether ``mask`` (with its group) is more than ``causal`` alone or none: a lower edge, an
    upper edge that is not causal's (a window's right side), or grouped K/V heads -- what only
    the "fa2" kernels (``simulator.predict.BAND_ALGORITHMS``) run."""
    return mask.lower or mask.upper != causal or mask.group > 1


@dataclass(frozen=True)
class Workload:
    """Attention over ``B`` batches x ``H`` heads, ``N_q`` queries, ``N_k`` keys, head dim ``d``.

    dtype_bytes: bytes per element (4: fp32, 2: fp16).  causal: query r sees key c iff
    c <= r + diagonal (torch.tril's convention), as in docs/traffic-contract.md; ``diagonal``
    None is N_k - N_q (bottom-right aligned, flash-attention's), 0 top-left (torch SDPA's
    ``is_causal``); any int, given only with ``causal`` or a ``window``.
    window: None or (left, right), flash-attention's ``window_size``: row r sees keys c with
    r + diagonal - left <= c <= r + diagonal + right, -1 for a side without a bound ((-1, -1)
    is stored as None); with ``causal`` right must be -1 or 0 (causal ends the band at the
    diagonal). The band as the kernels take it: ``mask()`` (``simulator.spec.band``).
    kv_heads: K/V heads per batch (GQA / MQA), a divisor of H; None is H. Query head h of a
    batch reads K/V head h // group, group = H / kv_heads (kv_heads = H is stored as None).
    """

    B: int
    H: int
    N_q: int
    N_k: int
    d: int
    dtype_bytes: int = 4
    causal: bool = False
    diagonal: int | None = None
    window: tuple[int, int] | None = None
    kv_heads: int | None = None

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
        if self.window is not None:
            window = self.window
            if (not isinstance(window, (tuple, list)) or len(window) != 2
                    or not all(_is_int(x) and x >= -1 for x in window)):
                raise ValueError("Workload.window must be None or a pair (left, right) of ints "
                                 f">= -1 (-1: no bound on that side), got {window!r}")
            window = (int(window[0]), int(window[1]))
            if self.causal and window[1] not in (-1, 0):
                raise ValueError(f"Workload.window={window} with causal=True: causal ends the "
                                 f"band at the diagonal, so right must be -1 or 0, got {window[1]}")
            object.__setattr__(self, "window", None if window == (-1, -1) else window)
        if self.diagonal is not None:
            if not _is_int(self.diagonal):
                raise ValueError(f"Workload.diagonal must be an int or None, got {self.diagonal!r}")
            if not self.causal and self.window is None:
                raise ValueError("Workload.diagonal places the causal mask or the window: give it "
                                 "with causal=True or a window")
        if self.kv_heads is not None:
            if not _is_int(self.kv_heads) or self.kv_heads < 1 or self.H % self.kv_heads:
                raise ValueError(f"Workload.kv_heads must be None or a positive divisor of "
                                 f"H={self.H} (H_kv K/V heads, H / H_kv query heads each), "
                                 f"got {self.kv_heads!r}")
            if self.kv_heads == self.H:
                object.__setattr__(self, "kv_heads", None)     # one K/V head per query head

    @property
    def BH(self) -> int:
        """Independent (batch, query head) pairs."""
        return self.B * self.H

    @property
    def H_kv(self) -> int:
        """K/V heads per batch: ``kv_heads``, or H."""
        return self.H if self.kv_heads is None else self.kv_heads

    @property
    def BH_kv(self) -> int:
        """(batch, K/V head) pairs: the heads of K, V, dK, dV."""
        return self.B * self.H_kv

    @property
    def group(self) -> int:
        """Query heads per K/V head (1 without GQA; H for MQA)."""
        return self.H // self.H_kv

    def mask(self) -> tuple[Mask, int, int]:
        """(Mask, hi, lo) as the kernels take them: ``spec.band(N_q, N_k, causal, window,
        diagonal)`` with ``group``: row r sees key c iff c <= r + hi (``upper``) and
        r + lo <= c (``lower``)."""
        mask, hi, lo = band(self.N_q, self.N_k, self.causal, self.window, self.diagonal)
        return dataclasses.replace(mask, group=self.group), hi, lo

    @property
    def band_or_gqa(self) -> bool:
        """Whether this workload needs the band kernels: a window's lower edge, an upper edge
        that is not causal's (a window's right side alone), or grouped K/V heads. (A causal
        window (-1, 0) is plain causal.)"""
        return needs_band_kernels(self.mask()[0], self.causal)

    @property
    def causal_diagonal(self) -> int:
        """The effective diagonal of the causal mask (row r sees key c iff c <= r + it):
        ``diagonal``, or N_k - N_q when None; clamped to [-N_q, N_k] (the same mask, see
        ``blocks.causal_diagonal``).  Meaningful only with ``causal``."""
        return causal_diagonal(self.N_q, self.N_k, self.diagonal)

    @property
    def kernel_causal(self) -> bool | None:
        """The ``causal`` key of the compiled kernels' recorded tables (``simulator.occupancy``'s
        kernel_resources.csv, ``simulator.sass``'s kernel_sass.csv, the issue model's loops) for
        this workload: the mask's upper edge (a window's right side alone compiles as causal:
        hi is a run-time argument); None where the band kernels are compiled for a shape the
        tables never recorded -- a lower edge (a window's left side) or grouped K/V heads
        (``Mask.group`` is compile-time) -- so that nothing derived from them is guessed."""
        mask, _, _ = self.mask()
        if mask.lower or mask.group > 1:
            return None
        return mask.upper

    @property
    def precision(self) -> str:
        """"fp32" or "fp16": the peak rate the roofline divides FLOPs by."""
        return PRECISION_OF_BYTES[self.dtype_bytes]

    def tensor_elements(self, name: str) -> int:
        """Elements of tensor ``name`` (a contract name: Q, K, ..., S, P, L, D, l, m) over all
        heads: B*H query heads, B*H_kv for K, V, dK, dV."""
        if name not in _TENSOR_SHAPE:
            raise ValueError(f"unknown tensor {name!r}; known: {sorted(_TENSOR_SHAPE)}")
        size = self.BH_kv if name in _KV_TENSORS else self.BH
        for dim in _TENSOR_SHAPE[name]:
            size *= getattr(self, dim)
        return size


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
