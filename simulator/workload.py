"""The attention problem a cost is predicted for: shapes, element size, masking and K/V heads."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from .blocks import causal_diagonal, ceil_div
from .spec import Mask, band

#: FlexAttention's block of a block mask: 128 queries x 128 keys.
DEFAULT_BLOCK_SIZE = (128, 128)

#: Element size in bytes -> the precision whose peak rate the roofline uses.
PRECISION_OF_BYTES = {4: "fp32", 2: "fp16"}

#: The dimensions of every tensor name of docs/traffic-contract.md, per (batch, head) pair.
#: K, V, dK and dV are per K/V head (``Workload.H_kv`` of them a batch), the others per query head.
_KV_TENSORS = frozenset({"K", "V", "dK", "dV", "K parts", "V parts"})
_TENSOR_SHAPE = {
    **{name: ("N_q", "d") for name in ("Q", "O", "dO", "dQ", "dQ_accum")},
    **{name: ("N_k", "d") for name in ("K", "V", "dK", "dV")},
    **{name: ("N_q", "N_k") for name in ("S", "P", "dP", "dS")},
    **{name: ("N_q",) for name in ("L", "D", "l", "m")},
    "O (recomputed)": ("N_q", "d"), "L (recomputed)": ("N_q",),    # the deterministic backward's
    # fa2_fp16x3's fp16 parts of q, k, v, and its partial maxima (``simulator.fp16x3``)
    "Q parts": ("N_q", "D_parts"), "K parts": ("N_k", "D_parts"), "V parts": ("N_k", "D_parts"),
    "head maxima": (),                # GX a head of q, k and v each (``tensor_elements``)
    "dO parts": ("N_q", "D_parts"),   # ... and of dO in its backward, GX a head of dO
    "dO maxima": (),
}


def needs_band_kernels(mask: Mask, causal: bool) -> bool:
    """Whether ``mask`` (with its group) is more than ``causal`` alone or none: a lower edge, an
    upper edge that is not causal's (a window's right side), or grouped K/V heads -- what only
    the "fa2" kernels (``simulator.predict.BAND_ALGORITHMS``) run; a block mask (``sparse``) too."""
    return mask.lower or mask.upper != causal or mask.group > 1 or mask.sparse


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
    block_mask: None, or block-sparse attention (the paper's Algorithm 5): (ceil(N_q / bq),
    ceil(N_k / bk)) booleans, block (a, b) of bq x bk scores kept or dropped (with the band:
    a score is kept iff its block is and the band shows it); any 2-D array of bools, stored
    as a tuple of tuples (``block_mask_array()`` gives it back in NumPy; left out of the repr,
    ``block_fraction`` sums it up). An all-True mask is still block-sparse: the kernels run
    their sparse variant, at the dense traffic.
    block_size: (bq, bk), positive ints, default (128, 128) (FlexAttention's); given only
    with a block mask. The kernels' tiles must nest in the blocks (Br | bq, Bc | bk).
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
    block_mask: tuple[tuple[bool, ...], ...] | None = field(default=None, repr=False)
    block_size: tuple[int, int] = DEFAULT_BLOCK_SIZE

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
        self._check_blocks()

    def _check_blocks(self) -> None:
        """Validates ``block_size`` and ``block_mask``; stores them as tuples."""
        size = self.block_size
        if (not isinstance(size, (tuple, list)) or len(size) != 2
                or not all(_is_int(x) and x >= 1 for x in size)):
            raise ValueError("Workload.block_size must be a pair (bq, bk) of positive ints "
                             f"(queries x keys of a block), got {size!r}")
        size = (int(size[0]), int(size[1]))
        object.__setattr__(self, "block_size", size)
        if self.block_mask is None:
            if size != DEFAULT_BLOCK_SIZE:
                raise ValueError("Workload.block_size sizes the blocks of block_mask: give it "
                                 "with a block_mask")
            return
        want = (ceil_div(self.N_q, size[0]), ceil_div(self.N_k, size[1]))
        try:
            on = np.asarray(self.block_mask)
        except ValueError:                    # rows of different lengths
            on = np.empty(0, dtype=object)
        if on.dtype != np.bool_ or on.ndim != 2:
            raise ValueError(f"Workload.block_mask must be a 2-D array of bools of shape {want} "
                             f"(ceil(N_q / bq), ceil(N_k / bk)), got a "
                             f"{type(self.block_mask).__name__} of dtype {on.dtype} with "
                             f"{on.ndim} dimensions")
        if on.shape != want:
            raise ValueError(f"Workload.block_mask must have shape {want} (ceil(N_q / {size[0]}), "
                             f"ceil(N_k / {size[1]}) for block_size={size}), got {on.shape}")
        object.__setattr__(self, "block_mask", tuple(tuple(bool(x) for x in row) for row in on))

    def block_mask_array(self) -> np.ndarray | None:
        """``block_mask`` as a fresh (ceil(N_q / bq), ceil(N_k / bk)) bool array, or None."""
        return None if self.block_mask is None else np.array(self.block_mask, dtype=bool)

    @property
    def block_fraction(self) -> float | None:
        """s, the fraction of blocks the block mask keeps (Proposition 4's s); None without."""
        on = self.block_mask_array()
        return None if on is None else float(on.mean())

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
        diagonal)`` with ``group``, and ``sparse`` with a block mask: row r sees key c iff
        c <= r + hi (``upper``) and r + lo <= c (``lower``) (and its block is kept)."""
        mask, hi, lo = band(self.N_q, self.N_k, self.causal, self.window, self.diagonal)
        return dataclasses.replace(mask, group=self.group,
                                   sparse=self.block_mask is not None), hi, lo

    @property
    def band_or_gqa(self) -> bool:
        """Whether this workload needs the band kernels: a window's lower edge, an upper edge
        that is not causal's (a window's right side alone), grouped K/V heads, or a block mask.
        (A causal window (-1, 0) is plain causal.)"""
        return needs_band_kernels(self.mask()[0], self.causal)

    @property
    def causal_diagonal(self) -> int:
        """The effective diagonal of the causal mask (row r sees key c iff c <= r + it):
        ``diagonal``, or N_k - N_q when None; clamped to [-N_q, N_k] (the same mask, see
        ``blocks.causal_diagonal``).  Meaningful only with ``causal``."""
        return causal_diagonal(self.N_q, self.N_k, self.diagonal)

    @property
    def kernel_causal(self) -> bool:
        """The ``causal`` key of the compiled kernels' recorded tables (``simulator.occupancy``'s
        kernel_resources.csv, ``simulator.sass``'s kernel_sass.csv, the issue model's loops) for
        this workload: the mask's upper edge (a window's right side alone compiles as causal:
        hi is a run-time argument). The band kernels' other compile-time parts -- a block mask,
        a window's left side, grouped K/V heads -- are their variant of ``Phase.code``
        (``simulator.flash.mask_variant``), keyed by this upper edge like the others."""
        return self.mask()[0].upper

    @property
    def precision(self) -> str:
        """"fp32" or "fp16": the peak rate the roofline divides FLOPs by."""
        return PRECISION_OF_BYTES[self.dtype_bytes]

    @property
    def D_parts(self) -> int:
        """Columns of a row of fa2_fp16x3's fp16 parts of q, k, v: d rounded up to the fp16
        mma's k = 16, twice (hi parts, then lo parts): ``simulator.fp16x3.parts_width``."""
        from .fp16x3 import parts_width
        return parts_width(self.d)

    def tensor_elements(self, name: str) -> int:
        """Elements of tensor ``name`` (a contract name: Q, K, ..., S, P, L, D, l, m, the
        fp16x3 parts and maxima) over all heads: B*H query heads, B*H_kv for K, V, dK, dV
        (and their parts), B*H + 2 B*H_kv for the maxima (a head of q, k and v each)."""
        if name not in _TENSOR_SHAPE:
            raise ValueError(f"unknown tensor {name!r}; known: {sorted(_TENSOR_SHAPE)}")
        if name in ("head maxima", "dO maxima"):
            from .fp16x3 import GX
            return (self.BH + (2 * self.BH_kv if name == "head maxima" else 0)) * GX
        size = self.BH_kv if name in _KV_TENSORS else self.BH
        for dim in _TENSOR_SHAPE[name]:
            size *= getattr(self, dim)
        return size


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
