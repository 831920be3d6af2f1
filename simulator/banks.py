"""Shared-memory wavefronts of a warp's access, bank conflicts included.

Shared memory is 32 banks of 4-byte words (word address mod 32). One warp instruction is served
in wavefronts: each wavefront reads or writes at most one word of every bank, and lanes that
name the same word share it (a broadcast on loads; on stores one write wins). So a warp access
takes as many wavefronts as the busiest bank holds distinct words: 1 for 32 lanes of
consecutive 4-byte words, 4 for 32 lanes of consecutive 16-byte vectors (512 bytes), 16 where
lanes 0-15 and 16-31 each walk a column of a row-major tile whose rows are 64 words long.
That is what ncu counts as ``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld`` / ``_op_st``
(the conflicts as the wavefronts beyond the conflict-free count). A lane's vector access
(``width`` words) touches its ``width`` consecutive words. Pure Python.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterable

BANKS = 32
WARP = 32


def warp_wavefronts(words: Iterable[int], width: int = 1) -> int:
    """Wavefronts of one warp access whose active lanes start at word addresses ``words``
    (4-byte units), each reading or writing ``width`` consecutive words; 0 for no lane."""
    distinct = {w + k for w in words for k in range(width)}
    per_bank = Counter(w % BANKS for w in distinct)
    return max(per_bank.values(), default=0)


def strided_loop_wavefronts(count: int, threads: int, word_of) -> int:
    """Wavefronts of the shared accesses of ``for idx in range(tid, count, threads): ...
    smem[word_of(idx)]`` over a block of ``threads`` threads: each trip, each warp's lanes
    whose idx is below ``count`` make one access (one word each)."""
    total = 0
    for first in range(0, count, threads):
        for warp0 in range(0, threads, WARP):
            lanes = [first + warp0 + lane for lane in range(WARP)]
            total += warp_wavefronts(word_of(idx) for idx in lanes if idx < count)
    return total
