"""What an attention kernel is compiled for beyond its tiling, head dim and format: the shape of
its mask and how query heads share K/V heads. One object for the kernels' factories, the API
and the cost model.

The mask is a band around a diagonal (flash-attention's ``window_size`` with torch.tril's
offset): query row r sees key c iff

    r + lo <= c    (only with ``lower``: a window's left side, lo = diagonal - left)
    c <= r + hi    (only with ``upper``: causal, or a window's right side, hi = diagonal + right)

``lo`` and ``hi`` are the kernels' runtime arguments (any ints); ``upper`` and ``lower`` decide
at compile time which comparisons exist. ``causal=True`` is ``upper`` with hi = diagonal.

GQA / MQA: ``group`` query heads share one K/V head; query head h of batch b reads K/V head
(b H + h) // group of the (B H_kv) K/V heads, H = group H_kv (MQA: H_kv = 1).

Dropout (``dropout``): each probability P_rc of query head bh is kept with probability 1 - p
and scaled by 1 / (1 - p), or dropped, as ``numba_flash.reference.dropout_keep(seed, bh, N_q,
N_k, p)`` decides from (seed, bh, r, c) alone -- so the backward regenerates the forward's mask.
The row sums (the softmax's l) are of the undropped P: O = dropout(softmax(S)) V.

Block-sparse (``sparse``, the paper's Algorithm 5): the kernels visit only the block pairs of
lists given at run time (``simulator.blocks.BlockGrid.row_lists`` / ``column_lists``: for each
row block the K/V blocks it visits, for each K/V block the row blocks), the band's active pairs
whose tile the block mask keeps; the band's edge tiles are still masked element by element.

This module imports nothing beyond the standard library: the simulator must run without numba.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mask:
    """Compile-time mask shape and head grouping (see the module docstring)."""

    upper: bool = False
    lower: bool = False
    group: int = 1
    dropout: bool = False
    sparse: bool = False

    def __post_init__(self):
        for name in ("upper", "lower", "dropout", "sparse"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Mask.{name} must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.group, int) or isinstance(self.group, bool) or self.group < 1:
            raise ValueError(f"Mask.group must be a positive int, got {self.group!r}")

    @classmethod
    def of(cls, mask: "Mask | bool") -> "Mask":
        """``mask`` itself, or for a bool (a kernel factory's former ``causal``) the causal
        mask (``upper``) or none."""
        if isinstance(mask, cls):
            return mask
        if isinstance(mask, bool):
            return cls(upper=mask)
        raise TypeError(f"expected a Mask or a bool (causal), got {mask!r}")

    @property
    def banded(self) -> bool:
        """Whether any key is masked by position (not only past the sequence's end)."""
        return self.upper or self.lower


def band(n_q: int, n_k: int, causal: bool, window, diagonal: int | None) -> tuple[Mask, int, int]:
    """(Mask without grouping, hi, lo) for the API's ``causal``, ``window`` = (left, right) or
    None and ``diagonal`` (None: N_k - N_q, bottom-right as flash-attention; -1 in window: that
    side unbounded). Both offsets are clamped to [-n_q, n_k], where the mask is already empty or
    full on that side (as ``blocks.causal_diagonal``), so that any ints give the same mask and
    values that fit int64; an unused offset is 0."""
    diag = n_k - n_q if diagonal is None else diagonal
    left, right = (-1, -1) if window is None else window
    upper = causal or right >= 0
    lower = left >= 0
    hi = diag + (0 if causal else right) if upper else 0
    lo = diag - left if lower else 0

    def clamp(x: int) -> int:
        return max(-n_q, min(n_k, x))
    return Mask(upper=upper, lower=lower), clamp(hi), clamp(lo)
