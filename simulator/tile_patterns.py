"""Shared-memory wavefronts (``simulator.banks``) of the FFMA kernels' tile helpers
(kernels/tiles.py ``tile_ops``), warp by warp, from the layouts ``Tiling`` gives them: head tiles
(Qi, Kj, Vj, dOi) at row stride ``head_stride(d)``, score tiles (S, P, dS) at ``score_stride``;
thread tid is (ty, tx) = divmod(tid, threads_x) and owns score rows ty + TY a (clamped to the
tile) and columns tx + TX b. The counts are per call of a helper by one block, full tiles. Each
mirrors the helper's index arithmetic; the compiled loops read four elements of a row as one
16-byte vector (LDS.128, ``simulator.sass``'s lds128) and the other operand element by element,
and load a product's head-tile row once for all of a thread's score rows. Pure Python.
"""
from __future__ import annotations

from functools import lru_cache

from .banks import WARP, strided_loop_wavefronts, warp_wavefronts
from .tiling import Tiling


def warp_lanes(t: Tiling) -> list[list[tuple[int, int]]]:
    """(ty, tx) of each lane, warp by warp, of a block of ``t.threads`` threads."""
    return [[divmod(tid, t.threads_x) for tid in range(w0, min(t.threads, w0 + WARP))]
            for w0 in range(0, t.threads, WARP)]


@lru_cache(maxsize=None)
def head_tile_copy(t: Tiling, d: int, rows: int) -> int:
    """``load_head_tile`` of a ``rows`` x d tile: consecutive threads store consecutive columns,
    row after row (one 4-byte store each)."""
    ld = t.head_stride(d)
    return strided_loop_wavefronts(rows * d, t.threads, lambda i: (i // d) * ld + i % d)


@lru_cache(maxsize=None)
def rows_dot_rows(t: Tiling, d: int) -> int:
    """``rows_dot_rows`` (S = Qi Kj^T, dP = dOi Vj^T): at every 4 columns k, each thread's CB rows
    of B (tx + TX b) and RA rows of A (ty + TY a), 16 bytes each; the d % 4 last columns one
    element a row."""
    ld, d4 = t.head_stride(d), d - d % 4
    total = 0
    for lanes in warp_lanes(t):
        b_rows = [[min(tx + t.threads_x * b, t.Bc - 1) * ld for _, tx in lanes] for b in range(t.cols_per_thread)]
        a_rows = [[min(ty + t.threads_y * a, t.Br - 1) * ld for ty, _ in lanes] for a in range(t.rows_per_thread)]
        for k in range(0, d4, 4):
            total += sum(warp_wavefronts([w + k for w in row], 4) for row in b_rows + a_rows)
        for k in range(d4, d):
            total += sum(warp_wavefronts([w + k for w in row]) for row in b_rows + a_rows)
    return total


@lru_cache(maxsize=None)
def scores_times_tile(t: Tiling, d: int, n_inner: int) -> int:
    """``scores_times_tile`` (O += P Vj, dQ += dS Kj) over ``n_inner`` columns c of the score
    tile: at every four, each thread's RA score rows (16 bytes each), then the four head-tile rows
    c.. at its OB columns tx + TX b (an element each)."""
    ld, ls, ob = t.head_stride(d), t.score_stride, t.head_cols_per_thread(d)
    total = 0
    for lanes in warp_lanes(t):
        s_rows = [[min(ty + t.threads_y * a, t.Br - 1) * ls for ty, _ in lanes] for a in range(t.rows_per_thread)]
        h_cols = [[min(tx + t.threads_x * b, d - 1) for _, tx in lanes] for b in range(ob)]
        n4 = n_inner - n_inner % 4
        for c in range(0, n4, 4):
            total += sum(warp_wavefronts([w + c for w in row], 4) for row in s_rows)
            total += sum(warp_wavefronts([(c + q) * ld + w for w in col]) for col in h_cols for q in range(4))
        for c in range(n4, n_inner):
            total += sum(warp_wavefronts([w + c for w in row]) for row in s_rows)
            total += sum(warp_wavefronts([c * ld + w for w in col]) for col in h_cols)
    return total


@lru_cache(maxsize=None)
def scores_t_times_tile(t: Tiling, d: int, n_inner: int) -> int:
    """``scores_t_times_tile`` (dV += P^T dOi, dK += dS^T Qi) over ``n_inner`` rows r of the
    score tile: each thread's KA score columns ty + TY a of rows r.. (an element each), then the
    head-tile rows r.. at its OB columns."""
    ld, ls, ob = t.head_stride(d), t.score_stride, t.head_cols_per_thread(d)
    total = 0
    for lanes in warp_lanes(t):
        s_cols = [[min(ty + t.threads_y * a, t.Bc - 1) for ty, _ in lanes] for a in range(t.kv_rows_per_thread())]
        h_cols = [[min(tx + t.threads_x * b, d - 1) for _, tx in lanes] for b in range(ob)]
        for r in range(n_inner):
            total += sum(warp_wavefronts([r * ls + w for w in col]) for col in s_cols)
            total += sum(warp_wavefronts([r * ld + w for w in col]) for col in h_cols)
    return total


@lru_cache(maxsize=None)
def row_partials(t: Tiling) -> tuple[int, int]:
    """(stores, loads) of one exchange of per-thread row partials through ``part`` (Br x TX
    words; the FA2 forward's row maxima and sums): each thread stores its RA partials at
    part[r TX + tx] (rows r inside the tile), then reads all TX of each of its rows."""
    stores = loads = 0
    for lanes in warp_lanes(t):
        for a in range(t.rows_per_thread):
            inside = [(ty + t.threads_y * a) * t.threads_x + tx if ty + t.threads_y * a < t.Br else None
                      for ty, tx in lanes]
            stores += warp_wavefronts(inside)
            rows = [min(ty + t.threads_y * a, t.Br - 1) * t.threads_x for ty, _ in lanes]
            loads += sum(warp_wavefronts([w + u for w in rows]) for u in range(t.threads_x))
    return stores, loads


@lru_cache(maxsize=None)
def score_tile_store(t: Tiling) -> int:
    """Each thread's RA x CB scores to the score tile (P of the FA2 forward), at rows ty + TY a
    and columns tx + TX b inside the tile, an element each."""
    total = 0
    for lanes in warp_lanes(t):
        for a in range(t.rows_per_thread):
            for b in range(t.cols_per_thread):
                total += warp_wavefronts(
                    [(ty + t.threads_y * a) * t.score_stride + tx + t.threads_x * b
                     if ty + t.threads_y * a < t.Br and tx + t.threads_x * b < t.Bc else None
                     for ty, tx in lanes])
    return total


@lru_cache(maxsize=None)
def row_stats(t: Tiling) -> tuple[int, int]:
    """(stores, loads) of the backwards' L_i and D_i: ``load_row_stats`` stores them a row a
    thread (``range(tid, Br, T)``); ``recompute_p_ds`` reads both for each of a thread's RA
    rows (once a pair)."""
    stores = 2 * strided_loop_wavefronts(t.Br, t.threads, lambda r: r)
    loads = sum(2 * warp_wavefronts([min(ty + t.threads_y * a, t.Br - 1) for ty, _ in lanes])
                for lanes in warp_lanes(t) for a in range(t.rows_per_thread))
    return stores, loads


@lru_cache(maxsize=None)
def row_softmax(t: Tiling) -> int:
    """Algorithm 1's softmax over the S tile in SRAM, a row a thread (``range(tid, Br, T)``):
    each row's Bc scores read for the max, read and written back as P, then its two weights
    (keep, 1 / l) stored; a warp's lanes are consecutive rows, Ls words apart."""
    ls, total = t.score_stride, 0
    for first in range(0, t.Br, t.threads):
        for w0 in range(0, t.threads, WARP):
            rows = [r if r < t.Br else None for r in range(first + w0, first + w0 + WARP)]
            if rows[0] is None:
                continue
            scores = sum(warp_wavefronts([None if r is None else r * ls + c for r in rows])
                         for c in range(t.Bc))
            total += 3 * scores + 2 * warp_wavefronts(rows)
    return total


@lru_cache(maxsize=None)
def row_weights_read(t: Tiling) -> int:
    """Algorithm 1's O update: each thread reads keep and 1 / l of each of its RA rows."""
    return sum(2 * warp_wavefronts([ty + t.threads_y * a if ty + t.threads_y * a < t.Br else None
                                    for ty, _ in lanes])
               for lanes in warp_lanes(t) for a in range(t.rows_per_thread))
