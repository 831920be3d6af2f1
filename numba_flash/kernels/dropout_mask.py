"""The dropout mask the attention kernels apply, materialised (for ``return_dropout_mask``, a
debugging option): keep[bh, r, c] = 1 where score (r, c) of batch-head bh is kept, from the same
device functions the kernels call (``tiles.dropout_words``, ``dropout_kept``), so it is their mask, not a copy."""
from __future__ import annotations

from numba import cuda, uint8

from ..kernel_cache import kernel_factory
from .tiles import dropout_kept, dropout_word, dropout_words


@kernel_factory
def make_dropout_mask():
    """Kernel ``(keep, n_q, n_k, seed_lo, seed_hi, keep_from)`` on a flat uint8 view of keep
    (B*H, N_q, N_k); any 1-D grid (grid-stride loop)."""
    def dropout_mask(keep, n_q, n_k, seed_lo, seed_hi, keep_from):
        for at in range(cuda.grid(1), keep.size, cuda.gridsize(1)):
            bh = at // (n_q * n_k)
            r = (at // n_k) % n_q
            c = at % n_k
            words = dropout_words(seed_lo, seed_hi, bh, r, c)
            keep[at] = uint8(1) if dropout_kept(words[dropout_word(r, c)], c, keep_from) else uint8(0)
    return cuda.jit(dropout_mask)
