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


class BlockGrid:
    """Blocks of an ``n_q x n_k`` score matrix cut into ``br x bc`` tiles.

    Attributes (numpy int64 arrays): ``rows`` (Tr,), ``cols`` (Tc,), ``nb`` (Tr,) active column
    blocks per row block, ``na`` (Tc,) active row blocks per column block.
    """

    def __init__(self, n_q: int, n_k: int, br: int, bc: int, causal: bool):
        self.n_q, self.n_k, self.br, self.bc = n_q, n_k, br, bc
        self.tr, self.tc = ceil_div(n_q, br), ceil_div(n_k, bc)
        starts_i = np.arange(self.tr, dtype=np.int64) * br
        self.rows = np.minimum(br, n_q - starts_i)
        self.cols = np.minimum(bc, n_k - np.arange(self.tc, dtype=np.int64) * bc)
        if causal:
            reach = starts_i + self.rows - 1 + (n_k - n_q)      # last_i + off
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


def unmasked_scores(n_q: int, n_k: int, causal: bool) -> int:
    """#{(r, c): not causal or c <= r + n_k - n_q}.  Closed form: row r sees
    clamp(r + n_k - n_q + 1, 0, n_k) keys, i.e. the counts n_k - n_q + 1 ... n_k with the
    non-positive ones dropped, so the total is T(n_k) - T(max(0, n_k - n_q)), T(n) = n(n+1)/2."""
    if not causal:
        return n_q * n_k
    low = max(0, n_k - n_q)
    return (n_k * (n_k + 1) - low * (low + 1)) // 2
