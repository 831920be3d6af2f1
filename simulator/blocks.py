"""Block geometry of one (batch, head) pair, exactly as docs/traffic-contract.md defines it.

Row blocks ``i < Tr`` hold ``rows_i`` queries, column blocks ``j < Tc`` hold ``cols_j`` keys.
The mask is a band (``simulator.spec``): query row r sees key c iff c <= r + hi (``upper``)
and r + lo <= c (``lower``); causal is ``upper`` with hi = the diagonal. Row block i visits the
contiguous column blocks ``first_i <= j < end_i`` (``key_block_ranges``, the kernels'
``key_block_range``), column block j the row blocks ``row_first_j <= i < row_end_j``
(``row_block_ranges``, ``row_block_range``); both give the same block pairs, the *active*
ones. Both edges of either range are non-decreasing (the band's edges grow with the row).
Sums over active block pairs are vectorised over i: only the last column block can be ragged,
so a sum over a range of any ``f(rows_i, cols_j)`` needs two evaluations of ``f`` per i.

Block-sparse attention (the paper's Algorithm 5, ``spec.Mask.sparse``): a block mask of
(ceil(N_q / bq), ceil(N_k / bk)) booleans for blocks of bq x bk scores keeps the tiles inside
its kept blocks (``sparse_tiles``: each Br x Bc tile must lie in one block, Br | bq, Bc | bk);
the active pairs are then the band's pairs whose tile is kept, no longer a range per block.
The kernels get them as lists (``BlockGrid.row_lists``, ``column_lists``).
"""
from __future__ import annotations

from functools import cached_property
from typing import Callable

import numpy as np

from .spec import band


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def causal_diagonal(n_q: int, n_k: int, diagonal: int | None = None) -> int:
    """The diagonal of the causal mask (row r sees key c iff c <= r + diagonal, as torch.tril):
    ``diagonal``, or n_k - n_q (bottom-right aligned) when None; clamped to [-n_q, n_k], where
    the mask is already empty (no row sees a key) or full (every row sees every key), so that
    any int gives the same mask and a value that fits int64."""
    if diagonal is None:
        return n_k - n_q
    return max(-n_q, min(n_k, diagonal))


def key_block_ranges(n_q: int, n_k: int, br: int, bc: int, upper: bool, lower: bool,
                     hi: int, lo: int) -> tuple[np.ndarray, np.ndarray]:
    """(first, end), int64 arrays over the Tr row blocks: the K/V blocks j, first_i <= j < end_i,
    row block i visits -- ``numba_flash.kernels.tiles.key_block_range`` line for line (an empty
    range has first >= end)."""
    tc = ceil_div(n_k, bc)
    row0 = np.arange(ceil_div(n_q, br), dtype=np.int64) * br
    last = np.minimum(row0 + br, n_q) - 1
    end = np.full(row0.shape, tc, dtype=np.int64)
    if upper:
        reach = last + hi                     # a key c is seen by some row iff c <= reach
        end = np.where(reach < 0, 0, np.minimum(tc, reach // bc + 1))
    first = np.zeros(row0.shape, dtype=np.int64)
    if lower:
        start = row0 + lo                     # ... and c >= start
        first = np.where(start > n_k - 1, tc, np.where(start <= 0, 0, start // bc))
    return first, end


def row_block_ranges(n_q: int, n_k: int, br: int, bc: int, upper: bool, lower: bool,
                     hi: int, lo: int) -> tuple[np.ndarray, np.ndarray]:
    """(first, end), int64 arrays over the Tc column blocks: the row blocks i, first_j <= i <
    end_j, that see a key of column block j -- ``numba_flash.kernels.tiles.row_block_range``
    line for line."""
    tr = ceil_div(n_q, br)
    col0 = np.arange(ceil_div(n_k, bc), dtype=np.int64) * bc
    col_last = np.minimum(col0 + bc, n_k) - 1
    first = np.zeros(col0.shape, dtype=np.int64)
    if upper:
        x = col0 - hi                         # a row sees the block's first key iff r >= x
        first = np.where(x > n_q - 1, tr, np.where(x <= 0, 0, x // br))
    end = np.full(col0.shape, tr, dtype=np.int64)
    if lower:
        y = col_last - lo                     # a row sees the block's last key iff r <= y
        end = np.where(y < 0, 0, np.minimum(tr, y // br + 1))
    return first, end


def sparse_tiles(block_mask, block_size: tuple[int, int], n_q: int, n_k: int, br: int,
                 bc: int) -> np.ndarray:
    """(Tr, Tc) booleans: whether the Br x Bc tile (i, j) lies in a block that ``block_mask``
    ((ceil(n_q / bq), ceil(n_k / bk)) booleans for blocks of ``block_size`` = (bq, bk) scores)
    keeps. Raises ValueError for a mask of another shape or a tile that straddles two blocks
    (br not dividing bq, or bc not dividing bk)."""
    bq, bk = (int(x) for x in block_size)
    if bq < 1 or bk < 1:
        raise ValueError(f"block_size must be two positive ints, got {block_size!r}")
    if bq % br or bk % bc:
        raise ValueError(f"block_size {(bq, bk)} must be multiples of the kernel's tile "
                         f"{br} x {bc} (each tile inside one block)")
    on = np.asarray(block_mask)
    want = (ceil_div(n_q, bq), ceil_div(n_k, bk))
    if on.shape != want:
        raise ValueError(f"block_mask must have shape {want} (ceil(N_q / {bq}), ceil(N_k / "
                         f"{bk})), got {on.shape}")
    rows = np.arange(ceil_div(n_q, br)) * br // bq
    cols = np.arange(ceil_div(n_k, bc)) * bc // bk
    return on.astype(bool)[rows[:, None], cols[None, :]]


def _lists(active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR of a boolean matrix: (ptr (rows + 1,), idx) int64, row i's true columns ascending
    at idx[ptr[i]:ptr[i + 1]]."""
    ptr = np.concatenate([[0], np.cumsum(active.sum(axis=1))]).astype(np.int64)
    return ptr, np.nonzero(active)[1].astype(np.int64)


class BlockGrid:
    """Blocks of an ``n_q x n_k`` score matrix cut into ``br x bc`` tiles under the band of
    ``spec.band(n_q, n_k, causal, window, diagonal)`` (no mask: every pair active; ``causal``
    alone: the mask of ``causal_diagonal(n_q, n_k, diagonal)``).

    Attributes (numpy int64 arrays): ``rows`` (Tr,), ``cols`` (Tc,); ``first``, ``end`` (Tr,)
    the column-block range of each row block, ``nb`` (Tr,) its length (active column blocks
    per row block, 0 for an empty range); ``row_first``, ``row_end`` (Tc,) the row-block range
    of each column block, ``na`` (Tc,) its length. Also ``upper``, ``lower``, ``hi``, ``lo``.
    ``tiles`` ((Tr, Tc) booleans, ``sparse_tiles``): block-sparse; the active pairs are the
    band's pairs (i, first_i <= j < end_i) whose tile is true, ``nb`` and ``na`` count them.
    ``edge_nb`` (Tr,), ``edge_na`` (Tc,): the active pairs that are *edge tiles*, whose scores
    the kernels mask (``edge_pairs``).
    """

    def __init__(self, n_q: int, n_k: int, br: int, bc: int, causal: bool = False,
                 diagonal: int | None = None, window: tuple[int, int] | None = None,
                 tiles: np.ndarray | None = None):
        self.n_q, self.n_k, self.br, self.bc = n_q, n_k, br, bc
        self.tr, self.tc = ceil_div(n_q, br), ceil_div(n_k, bc)
        mask, self.hi, self.lo = band(n_q, n_k, causal, window, diagonal)
        self.upper, self.lower = mask.upper, mask.lower
        starts_i = np.arange(self.tr, dtype=np.int64) * br
        self.rows = np.minimum(br, n_q - starts_i)
        self.cols = np.minimum(bc, n_k - np.arange(self.tc, dtype=np.int64) * bc)
        edges = (n_q, n_k, br, bc, self.upper, self.lower, self.hi, self.lo)
        self.first, self.end = key_block_ranges(*edges)
        self.row_first, self.row_end = row_block_ranges(*edges)
        self.tiles = None if tiles is None else np.asarray(tiles, bool)
        if self.tiles is None:
            self.nb = np.maximum(self.end - self.first, 0)
            self.na = np.maximum(self.row_end - self.row_first, 0)
        else:
            if self.tiles.shape != (self.tr, self.tc):
                raise ValueError(f"tiles must be ({self.tr}, {self.tc}), got {self.tiles.shape}")
            active = self.active()
            self.nb = active.sum(axis=1).astype(np.int64)
            self.na = active.sum(axis=0).astype(np.int64)

    def active(self) -> np.ndarray:
        """(Tr, Tc) booleans: the active pairs (built on demand: Tr x Tc can be large)."""
        j = np.arange(self.tc)
        pairs = (self.first[:, None] <= j) & (j < self.end[:, None])
        return pairs if self.tiles is None else pairs & self.tiles

    def row_lists(self) -> tuple[np.ndarray, np.ndarray]:
        """The K/V blocks each row block visits, as the sparse kernels take them: (ptr (Tr + 1,),
        idx) int64, row block i's column blocks ascending at idx[ptr[i]:ptr[i + 1]]."""
        return _lists(self.active())

    def column_lists(self) -> tuple[np.ndarray, np.ndarray]:
        """The row blocks each K/V block visits: (ptr (Tc + 1,), idx) int64, as ``row_lists``."""
        return _lists(self.active().T)

    def edge_pairs(self, rows: np.ndarray) -> np.ndarray:
        """For row blocks ``rows`` (int array), (len(rows), Tc) booleans: the active pairs that
        are edge tiles -- ``numba_flash.kernels.tiles.needs_mask`` of (row0 = i br, the full
        br rows, col0 = j bc, cols_j): a ragged key block, or one holding a key past the upper
        edge of some row of the block (col0 + bc - 1 > row0 + hi) or before the lower edge of
        some row (col0 < row0 + br - 1 + lo). The kernels run their masking code on these
        only."""
        col0 = np.arange(self.tc, dtype=np.int64) * self.bc
        row0 = np.asarray(rows, dtype=np.int64)[:, None] * self.br
        edge = np.broadcast_to(self.cols < self.bc, (row0.shape[0], self.tc))
        if self.upper:
            edge = edge | (col0 + self.bc - 1 > row0 + self.hi)
        if self.lower:
            edge = edge | (col0 < row0 + self.br - 1 + self.lo)
        j = np.arange(self.tc)
        rows = np.asarray(rows)
        active = (self.first[rows, None] <= j) & (j < self.end[rows, None])
        if self.tiles is not None:
            active &= self.tiles[rows]
        return edge & active

    @cached_property
    def _edge_counts(self) -> tuple[np.ndarray, np.ndarray]:
        per_row = np.zeros(self.tr, dtype=np.int64)
        per_col = np.zeros(self.tc, dtype=np.int64)
        step = max(1, (1 << 22) // max(1, self.tc))        # a few MB of booleans at a time
        for a in range(0, self.tr, step):
            rows = np.arange(a, min(self.tr, a + step))
            edge = self.edge_pairs(rows)
            per_row[rows] = edge.sum(axis=1)
            per_col += edge.sum(axis=0)
        return per_row, per_col

    @property
    def edge_nb(self) -> np.ndarray:
        """(Tr,) int64: edge tiles among each row block's active pairs (``edge_pairs``)."""
        return self._edge_counts[0]

    @property
    def edge_na(self) -> np.ndarray:
        """(Tc,) int64: edge tiles among each column block's active pairs (``edge_pairs``)."""
        return self._edge_counts[1]

    @property
    def active_pairs(self) -> int:
        """Number of active block pairs (i, j)."""
        return int(self.nb.sum())

    def _last_active(self) -> np.ndarray:
        """Per row block: whether it visits the last (maybe ragged) column block."""
        if self.tiles is None:
            return (self.end == self.tc) & (self.nb > 0)
        return self.tiles[:, -1] & (self.first < self.tc) & (self.end == self.tc)

    def pair_sum(self, f: Callable[[np.ndarray, int], np.ndarray]) -> int:
        """Sum over active pairs (i, j) of ``f(rows_i, cols_j)``; f is vectorised over rows."""
        last = self._last_active()
        full = self.nb - last                          # active j that are not the last block
        total = f(self.rows, self.bc) * full + f(self.rows, int(self.cols[-1])) * last
        return int(np.sum(total))

    def key_rows(self) -> np.ndarray:
        """Per row block: keys of its active column blocks (sum of cols_j over them)."""
        if self.tiles is None:
            return np.where(self.nb > 0, np.minimum(self.end * self.bc, self.n_k) - self.first * self.bc, 0)
        return self.active().astype(np.int64) @ self.cols

    def active_rows(self) -> int:
        """Sum of rows_i over active pairs: query rows visited, counted once per (i, j)."""
        return int(np.sum(self.rows * self.nb))

    def active_cols(self) -> int:
        """Sum of cols_j over active pairs: key rows streamed in, counted once per (i, j)."""
        return int(np.sum(self.key_rows()))

    def active_scores(self) -> int:
        """Valid score elements of active tiles: sum of rows_i * cols_j over active pairs."""
        return int(np.sum(self.rows * self.key_rows()))


def _clamped_prefix(x: int, n_k: int) -> int:
    """sum over 1 <= y <= x of clamp(y, 0, n_k) (0 for x <= 0): T(clamp(x, 0, n_k)) +
    n_k max(0, x - n_k), T(n) = n(n+1)/2."""
    below = max(0, min(x, n_k))
    return below * (below + 1) // 2 + n_k * max(0, x - n_k)


def band_scores(n_q: int, n_k: int, upper: bool, lower: bool, hi: int, lo: int) -> int:
    """#{(r, c): r < n_q, c < n_k, (not upper or c <= r + hi), (not lower or r + lo <= c)}: the
    scores of the band ``simulator.spec`` describes. Closed form: row r sees the keys of
    [clamp(r + lo, 0, n_k), clamp(r + hi + 1, 0, n_k)) (0 and n_k for a side without its
    edge), a difference of two sums of clamped consecutive integers, each
    ``_clamped_prefix(a + n_q - 1) - _clamped_prefix(a - 1)`` for a run a, ..., a + n_q - 1.
    Needs lo <= hi + 1 when both edges are there (so that no row's range is negative), as
    every band of ``spec.band`` has (lo = diagonal - left <= diagonal <= hi)."""
    if upper and lower and lo > hi + 1:
        raise ValueError(f"band_scores needs lo <= hi + 1 with both edges, got hi={hi}, lo={lo}")

    def run(a: int) -> int:          # sum over r < n_q of clamp(r + a, 0, n_k)
        return _clamped_prefix(a + n_q - 1, n_k) - _clamped_prefix(a - 1, n_k)

    ends = run(hi + 1) if upper else n_q * n_k
    starts = run(lo) if lower else 0
    return ends - starts


def band_extent(n_q: int, n_k: int, upper: bool, lower: bool, hi: int, lo: int) -> tuple[int, int]:
    """(queries that see some key, keys that some query sees) of the band: rows r with
    -hi <= r (upper) and r <= n_k - 1 - lo (lower); keys c with lo <= c (lower) and
    c <= n_q - 1 + hi (upper) -- for lo <= hi (``band_scores``)."""
    rows = max(0, min(n_q, n_k - lo if lower else n_q) - max(0, -hi if upper else 0))
    keys = max(0, min(n_k, n_q + hi if upper else n_k) - max(0, lo if lower else 0))
    return rows, keys


def unmasked_scores(n_q: int, n_k: int, causal: bool, diagonal: int | None = None) -> int:
    """#{(r, c): not causal or c <= r + off}, off = ``causal_diagonal(n_q, n_k, diagonal)``:
    ``band_scores`` of the causal band, G(off + n_q) - G(off) with G = ``_clamped_prefix``
    (row r sees clamp(r + off + 1, 0, n_k) keys). Bottom-right (off = n_k - n_q):
    T(n_k) - T(max(0, n_k - n_q))."""
    if not causal:
        return n_q * n_k
    return band_scores(n_q, n_k, True, False, causal_diagonal(n_q, n_k, diagonal), 0)
