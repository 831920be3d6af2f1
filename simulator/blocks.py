"""Block geometry of one (batch, head) pair, exactly as docs/traffic-contract.md defines it.

Row blocks ``i < Tr`` hold ``rows_i`` queries, column blocks ``j < Tc`` hold ``cols_j`` keys;
``nb(i)`` is the number of active column blocks of row block i (a prefix ``j < nb(i)``).  Sums
over active block pairs are vectorised over i: only the last column block can be ragged, so a
sum over ``j < nb(i)`` of any ``f(rows_i, cols_j)`` needs two evaluations of ``f`` per i.
"""
from __future__ import annotations

from typing import Callable

import numpy as np


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


class BlockGrid:
    """Blocks of an ``n_q x n_k`` score matrix cut into ``br x bc`` tiles; with ``causal``, the
    mask of ``causal_diagonal(n_q, n_k, diagonal)``.

    Attributes (numpy int64 arrays): ``rows`` (Tr,), ``cols`` (Tc,), ``nb`` (Tr,) active column
    blocks per row block, ``na`` (Tc,) active row blocks per column block.
    """

    def __init__(self, n_q: int, n_k: int, br: int, bc: int, causal: bool,
                 diagonal: int | None = None):
        self.n_q, self.n_k, self.br, self.bc = n_q, n_k, br, bc
        self.tr, self.tc = ceil_div(n_q, br), ceil_div(n_k, bc)
        starts_i = np.arange(self.tr, dtype=np.int64) * br
        self.rows = np.minimum(br, n_q - starts_i)
        self.cols = np.minimum(bc, n_k - np.arange(self.tc, dtype=np.int64) * bc)
        if causal:
            reach = starts_i + self.rows - 1 + causal_diagonal(n_q, n_k, diagonal)  # last_i + off
            self.nb = np.clip(reach // bc + 1, 0, self.tc)       # numpy // floors, as Python's
        else:
            self.nb = np.full(self.tr, self.tc, dtype=np.int64)
        # nb is non-decreasing in i, so the active i of column block j are those with nb > j
        self.na = self.tr - np.searchsorted(self.nb, np.arange(self.tc), side="right")

    @property
    def active_pairs(self) -> int:
        """Number of active block pairs (i, j)."""
        return int(self.nb.sum())

    def pair_sum(self, f: Callable[[np.ndarray, int], np.ndarray]) -> int:
        """Sum over active pairs (i, j) of ``f(rows_i, cols_j)``; f is vectorised over rows."""
        full = np.minimum(self.nb, self.tc - 1)       # active j that are not the last block
        last = self.nb == self.tc                      # is the last (maybe ragged) block active
        total = f(self.rows, self.bc) * full + f(self.rows, int(self.cols[-1])) * last
        return int(np.sum(total))

    def active_rows(self) -> int:
        """Sum of rows_i over active pairs: query rows visited, counted once per (i, j)."""
        return int(np.sum(self.rows * self.nb))

    def active_cols(self) -> int:
        """Sum of cols_j over active pairs: key rows streamed in, counted once per (i, j)."""
        return int(np.sum(np.minimum(self.nb * self.bc, self.n_k)))

    def active_scores(self) -> int:
        """Valid score elements of active tiles: sum of rows_i * cols_j over active pairs."""
        return int(np.sum(self.rows * np.minimum(self.nb * self.bc, self.n_k)))


def unmasked_scores(n_q: int, n_k: int, causal: bool, diagonal: int | None = None) -> int:
    """#{(r, c): not causal or c <= r + off}, off = ``causal_diagonal(n_q, n_k, diagonal)``.
    Closed form: row r sees clamp(r + off + 1, 0, n_k) keys, the counts x = off + 1 ... off + n_q
    clamped, so the total is G(off + n_q) - G(off) with G(x) = sum over 1 <= y <= x of
    clamp(y, 0, n_k) = T(clamp(x, 0, n_k)) + n_k max(0, x - n_k), T(n) = n(n+1)/2.  Bottom-right
    (off = n_k - n_q): T(n_k) - T(max(0, n_k - n_q))."""
    if not causal:
        return n_q * n_k
    off = causal_diagonal(n_q, n_k, diagonal)

    def prefix(x):
        below = max(0, min(x, n_k))
        return below * (below + 1) // 2 + n_k * max(0, x - n_k)

    return prefix(off + n_q) - prefix(off)
