"""How many times the loops nested in a kernel's main loop run, per trip of the main loop: the
strided tile copies and the shared-memory products of our kernels, read off the kernel source
line each loop comes from (``simulator.sass`` records it, ``lines``).

A nested loop's source line is the call it was inlined from (the largest line number of its
instructions: a loop's body can borrow a few instructions from the code before it). By callee
(the loop's k-th occurrence at that line, in address order, takes the k-th count):

- ``load_head_tile(..., max_rows, tid, factor)``: ``range(tid, max_rows * d, T)``: ceil(max_rows d / T)
  (max_rows is ``BR`` or ``BC``);
- ``load_twice`` (tensor-core backward): Br/2 x D8/2 element quads over T threads;
- ``load_row_stats``: ceil(Br / T);
- ``rows_dot_rows``: d // 4 steps of four, then d % 4 single steps (that loop only where d % 4);
  ``recompute_p_ds`` runs it twice (S and dP);
- ``scores_times_tile(..., n_inner, ...)`` / ``scores_t_times_tile``: n // 4, then n % 4 (n: the
  tile's keys, Bc, or rows, Br);
- the standard matmul's k-chunk: its two strided copies ceil(Br BK / T), ceil(BK Bc / T) and the
  BK-step product.
Full tiles are assumed (a ragged last tile runs fewer). None where a loop's line is none of
these (Algorithm 1's nested i loop holds loops of its own): the caller then counts each nested
loop once. Pure Python: reads the kernel sources as text, imports no numba.
"""
from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

from .sass import MAIN_LOOP, regions_of
from .tiling import MATMUL_BK, Tiling

KERNELS_DIR = Path(__file__).resolve().parent.parent / "numba_flash" / "kernels"
_CALL = re.compile(r"\b(load_head_tile|load_twice|load_row_stats|rows_dot_rows|recompute_p_ds|"
                   r"scores_times_tile|scores_t_times_tile)\(([^)]*)\)")
_RANGE = re.compile(r"for \w+ in range\(([^)]*)\)")


@lru_cache(maxsize=None)
def _source(file: str) -> tuple[str, ...]:
    return tuple((KERNELS_DIR / file).read_text().splitlines())


def _counts_at(text: str, kernel: str, t: Tiling, d: int) -> list[int] | None:
    """The trip counts of the loops a source line makes, in order; None if unknown."""
    threads = t.threads_for(kernel)
    rows = {"BR": t.Br, "BC": t.Bc, "rows": t.Br, "cols": t.Bc}
    call = _CALL.search(text)
    if call:
        name, args = call.group(1), [a.strip() for a in call.group(2).split(",")]
        if name == "load_head_tile" and args[6] in rows:
            return [-(-rows[args[6]] * d // threads)]
        if name == "load_twice":
            return [-(-(t.Br // 2) * (t.mma_depth(d) // 2) // threads)]
        if name == "load_row_stats":
            return [-(-t.Br // threads)]
        if name == "rows_dot_rows":
            return [d // 4, d % 4]
        if name == "recompute_p_ds":
            return [d // 4, d % 4, d // 4, d % 4]
        if name in ("scores_times_tile", "scores_t_times_tile"):
            n = rows.get(args[4] if name == "scores_times_tile" else args[4])
            return None if n is None else [n // 4, n % 4]
    loop = _RANGE.search(text)
    if loop:
        bounds = loop.group(1).replace(" ", "")
        if bounds == "tid,BR*BK,T":
            return [-(-t.Br * MATMUL_BK // threads)]
        if bounds == "tid,BK*BC,T":
            return [-(-MATMUL_BK * t.Bc // threads)]
        if bounds == "BK":
            return [MATMUL_BK]
    return None


@lru_cache(maxsize=None)
def inner_trips(kernel: str, tiling: Tiling, d: int, causal: bool, variant: str = "") -> tuple[int, ...] | None:
    """Trips per main-loop trip of each loop nested in ``kernel``'s main loop (address order),
    or None where one is not known (module docstring). () when there are none."""
    rows = regions_of(kernel, tiling, d, causal, variant)
    main = next((r for r in rows if r.region == MAIN_LOOP), None)
    if main is None:
        return None
    nested = sorted((r for r in rows if r.region.startswith("inner_loop_")), key=lambda r: r.start)
    if any(r.depth > main.depth + 1 for r in nested):
        return None                      # loops within nested loops: not modelled
    located = [_line_of(r.lines, kernel, tiling, d) for r in nested]
    if any(where is None for where, _ in located):
        return None
    per_line = Counter(where for where, _ in located)
    taken: dict[tuple[str, int], int] = {}
    out = []
    for where, counts in located:
        k = taken.get(where, 0)
        # a call's remainder loop of 0 trips may be compiled away: then its line has fewer
        # loops than the call makes, and the next count is this loop's
        while k < len(counts) - 1 and counts[k] == 0 and per_line[where] < len(counts):
            k += 1
        if k >= len(counts):
            return None
        out.append(counts[k])
        taken[where] = k + 1
    return tuple(out)


def _line_of(lines: str, kernel: str, t: Tiling, d: int):
    """((file, line), trip counts) of the source a nested loop comes from: its largest line
    (an inlined call), else its first (a loop written in the kernel: the ``for`` statement);
    (None, None) if neither is a loop we know."""
    if not lines:
        return None, None
    file, _, spans = lines.split(" ")[0].partition(":")
    numbers = [int(n) for part in spans.split(",") for n in part.split("-") if n]
    for line in (max(numbers), min(numbers)) if numbers else ():
        counts = _counts_at(_source(file)[line - 1], kernel, t, d)
        if counts is not None:
            return (file, line), counts
    return None, None
