"""Shared-memory wavefronts of a warp's access, bank conflicts included.

Shared memory is 32 banks of 4-byte words (word address mod 32). One warp instruction is served
in wavefronts: each wavefront reads or writes at most one word of every bank, and lanes that
name the same word share it (a broadcast on loads; on stores one write wins). A 4-byte access
takes as many wavefronts as the busiest bank holds distinct words: 1 for 32 lanes of
consecutive words, 16 where lanes 0-15 and 16-31 each walk a column of a row-major tile whose
rows are 64 words long. A lane's vector access (``width`` words: LDS.64, LDS.128) touches its
``width`` consecutive words, and the warp is served half by half: lanes 0-15, then 16-31, each
as many wavefronts as its own busiest bank -- so 32 lanes of consecutive 16-byte vectors take
4 (2 a half), and 32 lanes reading the same 16 bytes take 2, not 1. (The half-warp rule is
read off the H200's counters: the FFMA forward's 128-bit reads of Qi rows shared by 16 lanes,
and of P rows, measure 2 wavefronts an instruction; counted whole-warp the model gave 0.69x
its loads, 2026-12-03 levels.) That is what ncu counts as
``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld`` / ``_op_st``. Pure Python.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

BANKS = 32
WARP = 32
HALF_WARP = 16


def _busiest_bank(words, width: int) -> int:
    distinct = {w + k for w in words if w is not None for k in range(width)}
    return max(Counter(w % BANKS for w in distinct).values(), default=0)


def warp_wavefronts(words: Sequence[int | None], width: int = 1) -> int:
    """Wavefronts of one warp access whose lanes (in lane order; None: an inactive lane) start
    at word addresses ``words`` (4-byte units), each reading or writing ``width`` consecutive
    words (module docstring); 0 for no active lane."""
    words = list(words)
    if width == 1:
        return _busiest_bank(words, 1)
    return sum(_busiest_bank(words[h:h + HALF_WARP], width) for h in range(0, len(words), HALF_WARP))


def strided_loop_wavefronts(count: int, threads: int, word_of) -> int:
    """Wavefronts of the shared accesses of ``for idx in range(tid, count, threads): ...
    smem[word_of(idx)]`` over a block of ``threads`` threads: each trip, each warp's lanes
    whose idx is below ``count`` make one access (one word each)."""
    total = 0
    for first in range(0, count, threads):
        for warp0 in range(0, threads, WARP):
            lanes = [first + warp0 + lane for lane in range(WARP)]
            total += warp_wavefronts([word_of(idx) if idx < count else None for idx in lanes])
    return total
