"""The paper's I/O results (Theorem 2, Propositions 3 and 4, Theorem 5) with the constants of OUR
loops.

All functions take a ``Workload`` (and an SRAM size ``M`` in elements, or a tiling) and return
``HbmAccesses(elements, bytes)`` summed over the B*H pairs.  Derived from
docs/traffic-contract.md for ``causal=False``, where the ``*_accesses`` forms are exact (tests
hold them equal to ``predict``); with causal masking (any diagonal), a window or grouped K/V
heads (which only skip blocks, or load K, V once per K/V head) they are upper bounds.  The
flash forms use the paper's block sizes for M (``Tiling.paper_default``): Bc = ceil(M/4d),
Br = min(Bc, d), Tc = ceil(N_k/Bc), Tr = ceil(N_q/Br).  Per (batch, head) pair, N_q = Nq,
N_k = Nk:

  standard forward   (4 + ceil(d/Bc)) Nq Nk + (ceil(Nk/Bc) Nq + 2 ceil(Nq/Br) Nk + Nq) d
                     [S written, read twice by the softmax; P written, read ceil(d/Bc) times
                      by P V; Q re-read per output column tile, K and V per row tile]
  Algorithm 1 (v1)   2 Nk d + (3 Tc - 1) Nq d + (4 Tc - 3) Nq
  FA2 order (v2)     2 Nq d + 2 Tr Nk d + Nq
  backward, atomics  4 Nk d + 3 Nq d + Nq + Tc (4 Nq d + 2 Nq)
  backward, det.     4 Nk d + 5 Nq d + 3 Nq + Tc (2 Nq d + 2 Nq) + 2 Tr Nk d
  block-sparse FA2   2 Nq d + Nq + 2 s Tr Nk d               (bq | Nq, bk | Nk; tiles Br x Bc)
  block-sparse bwd   4 Nk d + 3 Nq d + Nq + s Tc (4 Nq d + 2 Nq)

With Tc ~ 4 Nk d / M, Algorithm 1 makes ~ 4 Nq Nk d (3d + 4) / M = Theta(N^2 d^2 / M) accesses
(Theorem 2) and the backward ~ 4 Nq Nk d (4d + 2) / M (Theorem 5).  The FA2 order re-reads K and
V once per row block: 2 Nq Nk d / Br, which is Theta(N^2 d^2 / M) only while Br = M/4d, i.e. for
M <= 4 d^2; beyond that the paper's Br = min(Bc, d) stays d and the count stays ~ 2 Nq Nk.

Block-sparse (Proposition 4, the paper's Algorithm 5; ``Workload.block_mask``, s = the fraction
of bq x bk blocks kept, ``Workload.block_fraction``): the kernels visit only the tiles of kept
blocks, so exactly the terms that count visits of block pairs -- K, V re-read per row block;
Q, dO, L, D and dQ per K/V block -- shrink by s, and the per-row and per-key terms stay:
Theta(N d + s N^2 d^2 / M) (``proposition4_flash_forward``). These forms take the kernels'
tiling (Br | bq, Bc | bk), as ``predict`` does; with the paper's Br = M/4d the FA2 form is
2 Nq d + Nq + 8 s Nq Nk d^2 / M.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .blocks import band_extent, band_scores, ceil_div
from .flash import recompute_tiling
from .tiling import Tiling
from .workload import Workload

#: Forward algorithms in the FA2 loop order (one kernel on FFMA, one on tensor cores; same HBM).
FA2_ORDER = ("flash_forward_v2", "flash_forward_tc")


class HbmAccesses(NamedTuple):
    """Global-memory accesses (reads + writes) over all B*H pairs."""

    elements: float
    bytes: float


def _result(w: Workload, per_head: float) -> HbmAccesses:
    elements = per_head * w.BH
    return HbmAccesses(elements, elements * w.dtype_bytes)


def _paper_blocks(w: Workload, M: int) -> tuple[int, int]:
    if M < w.d:
        raise ValueError(f"M={M} elements is below d={w.d}: the paper's analysis needs M >= d")
    bc = ceil_div(M, 4 * w.d)
    return min(bc, w.d), bc


def _standard_tiling(w: Workload, tiling: Tiling | None) -> Tiling:
    return tiling or Tiling.kernel_default("standard_matmul", w.d, w.dtype_bytes)


# ---- exact counts (causal=False) --------------------------------------------------------------
def standard_forward_accesses(w: Workload, tiling: Tiling | None = None) -> HbmAccesses:
    """Standard forward with the matmuls' ``tiling`` (default: the kernels' 64 x 64)."""
    t = _standard_tiling(w, tiling)
    nq, nk, d = w.N_q, w.N_k, w.d
    return _result(w, (4 + ceil_div(d, t.Bc)) * nq * nk
                   + (ceil_div(nk, t.Bc) * nq + 2 * ceil_div(nq, t.Br) * nk + nq) * d)


def standard_backward_accesses(w: Workload, tiling: Tiling | None = None) -> HbmAccesses:
    """Standard backward: dV, dP, D, dS, dQ, dK as in the contract.  N^2 terms: P read by
    dV = P^T dO and by dS, dP written and read, dS written and read by dQ and dK."""
    t = _standard_tiling(w, tiling)
    nq, nk, d = w.N_q, w.N_k, w.d
    per_d = ceil_div(d, t.Bc)
    squares = (4 + 3 * per_d) * nq * nk
    head = (2 * ceil_div(nk, t.Br) * nq      # dO by dV, Q by dK
            + ceil_div(nk, t.Bc) * nq         # dO by dP
            + 2 * ceil_div(nq, t.Br) * nk     # V by dP, K by dQ
            + 3 * nq + 2 * nk) * d            # D reads dO, O; writes dQ, dK, dV
    return _result(w, squares + head + 2 * nq)


def flash_forward_v1_accesses(w: Workload, M: int) -> HbmAccesses:
    """Algorithm 1 order with the paper's block sizes for SRAM M (elements)."""
    _, bc = _paper_blocks(w, M)
    tc = ceil_div(w.N_k, bc)
    return _result(w, 2 * w.N_k * w.d + (3 * tc - 1) * w.N_q * w.d + (4 * tc - 3) * w.N_q)


def flash_forward_v2_accesses(w: Workload, M: int) -> HbmAccesses:
    """FA2 loop order with the paper's block sizes for SRAM M (elements)."""
    br, _ = _paper_blocks(w, M)
    return _result(w, 2 * w.N_q * w.d + 2 * ceil_div(w.N_q, br) * w.N_k * w.d + w.N_q)


def flash_backward_accesses(w: Workload, M: int, deterministic: bool = False) -> HbmAccesses:
    """Flash backward (dQ by atomics, or by its own kernel when ``deterministic``, after the
    FFMA forward again at its default tiling: Q once, K and V once a row block of it, O and L
    written, then read in place of the caller's)."""
    br, bc = _paper_blocks(w, M)
    nq, nk, d, tc = w.N_q, w.N_k, w.d, ceil_div(w.N_k, bc)
    if deterministic:
        forward_br = recompute_tiling(w.d).Br
        return _result(w, 4 * nk * d + 5 * nq * d + 3 * nq + tc * (2 * nq * d + 2 * nq)
                       + 2 * ceil_div(nq, br) * nk * d
                       + 2 * nq * d + nq + 2 * ceil_div(nq, forward_br) * nk * d)
    return _result(w, 4 * nk * d + 3 * nq * d + nq + tc * (4 * nq * d + 2 * nq))


def _kept_blocks(w: Workload, tiling: Tiling) -> tuple:
    """(kept (nq_blocks, nk_blocks) bools, q_a (nq_blocks,) queries, k_b (nk_blocks,) keys of
    each block) of the workload's block mask; ValueError without one, or for tiles that do not
    nest in the blocks."""
    if w.block_mask is None:
        raise ValueError("the block-sparse forms need Workload.block_mask")
    if not tiling.suits_blocks(w.block_size):
        raise ValueError(f"tiles {tiling.Br} x {tiling.Bc} do not nest in blocks of "
                         f"{w.block_size}: choose Br | bq and Bc | bk")
    (bq, bk), on = w.block_size, w.block_mask_array()
    q = np.minimum(bq, w.N_q - bq * np.arange(on.shape[0], dtype=np.int64))
    k = np.minimum(bk, w.N_k - bk * np.arange(on.shape[1], dtype=np.int64))
    return on, q, k


def block_sparse_forward_accesses(w: Workload, tiling: Tiling) -> HbmAccesses:
    """The FA2-order forward with a block mask (``flash_forward_tc`` / ``_half``) under the
    kernels' ``tiling``: 2 Nq d + Nq + 2 d sum over kept blocks (a, b) of ceil(q_a / Br) k_b,
    q_a = min(bq, Nq - a bq) the block's queries, k_b = min(bk, Nk - b bk) its keys: each of
    block a's ceil(q_a / Br) row blocks reads the k_b rows of K and of V of each kept block b
    of its row (Bc | bk: the block's tiles hold exactly its keys). With bq | Nq and bk | Nk,
    2 Nq d + Nq + 2 s Tr Nk d: ``flash_forward_v2_accesses``' form with its K, V term times s.
    Exact without a band (tests hold it equal to ``predict``); an upper bound with one."""
    on, q, k = _kept_blocks(w, tiling)
    visits = ceil_div(q, tiling.Br) @ on.astype(np.int64) @ k     # sum of ceil(q_a/Br) k_b
    return _result(w, 2 * w.N_q * w.d + w.N_q + 2 * w.d * int(visits))


def block_sparse_backward_accesses(w: Workload, tiling: Tiling) -> HbmAccesses:
    """The backward with a block mask (``flash_backward_tc``; dQ by atomics): 4 Nk d + 3 Nq d +
    Nq + (4 d + 2) sum over kept blocks (a, b) of q_a ceil(k_b / Bc): each of block b's K/V
    blocks reads Q, dO, L, D and adds into dQ (a read and a write) for the q_a rows of each
    kept block a of its column (``block_sparse_forward_accesses``' notation). With bq | Nq and
    bk | Nk, 4 Nk d + 3 Nq d + Nq + s Tc (4 Nq d + 2 Nq): ``flash_backward_accesses``' form
    with its Tc times s. Exact without a band or GQA; an upper bound with them."""
    on, q, k = _kept_blocks(w, tiling)
    visits = q @ on.astype(np.int64) @ ceil_div(k, tiling.Bc)     # sum of q_a ceil(k_b/Bc)
    nq, nk, d = w.N_q, w.N_k, w.d
    return _result(w, 4 * nk * d + 3 * nq * d + nq + (4 * d + 2) * int(visits))


# ---- leading orders -----------------------------------------------------------------------
def theorem2_flash_forward(w: Workload, M: int, algorithm: str = "flash_forward_v1") -> HbmAccesses:
    """Leading term of the flash forward's accesses, ceilings dropped (Bc = M/4d).
    v1 (the paper's Algorithm 1): 4 Nq Nk d (3d + 4) / M = Theta(N^2 d^2 / M).
    v2 and tc (FA2 order): 2 Nq Nk d / min(M/4d, d) -- Theta(N^2 d^2 / M) for M <= 4 d^2 only."""
    _paper_blocks(w, M)
    nq, nk, d = w.N_q, w.N_k, w.d
    if algorithm == "flash_forward_v1":
        return _result(w, 4 * nq * nk * d * (3 * d + 4) / M)
    if algorithm in FA2_ORDER:
        return _result(w, 2 * nq * nk * d / min(M / (4 * d), d))
    raise ValueError(f"algorithm must be 'flash_forward_v1' or one of {FA2_ORDER}, got {algorithm!r}")


def proposition4_flash_forward(w: Workload, M: int) -> HbmAccesses:
    """Proposition 4: block-sparse FlashAttention makes Theta(N d + s N^2 d^2 / M) accesses, s
    the fraction of blocks kept (``Workload.block_fraction``; 1 without a block mask). Our
    FA2-order forward with the paper's Br = min(M/4d, d), ceilings dropped: 2 Nq d + Nq (Q read,
    O and L written once) + s 2 Nq Nk d / min(M/4d, d) (s times Theorem 2's leading term,
    ``theorem2_flash_forward``): Theta(N d + s N^2 d^2 / M) for M <= 4 d^2, as there. (The
    paper's Algorithm 5 is Algorithm 1's loop order, which our kernels do not run sparse.)"""
    s = 1.0 if w.block_mask is None else w.block_fraction
    lead = theorem2_flash_forward(w, M, "flash_forward_tc").elements / w.BH
    return _result(w, 2 * w.N_q * w.d + w.N_q + s * lead)


def theorem2_standard_forward(w: Workload, tiling: Tiling | None = None) -> HbmAccesses:
    """Leading terms of the standard forward, ceilings of N/B dropped:
    (4 + ceil(d/Bc)) Nq Nk + (1/Bc + 2/Br) Nq Nk d.  With the kernels' fixed 64 x 64 tiles and
    d <= 64 this is Theta(N^2) (the paper's Theta(Nd + N^2) assumes Q, K, V are read once; our
    tiled matmuls re-read them once per output tile, ~ N^2 d / 64 each)."""
    t = _standard_tiling(w, tiling)
    squares = w.N_q * w.N_k
    return _result(w, (4 + ceil_div(w.d, t.Bc)) * squares + (1 / t.Bc + 2 / t.Br) * squares * w.d)


def theorem5_flash_backward(w: Workload, M: int) -> HbmAccesses:
    """Leading term of the flash backward (atomics), Tc = 4 Nk d / M: 4 Nq Nk d (4d + 2) / M,
    Theta(N^2 d^2 / M) as the paper's Theorem 5."""
    _paper_blocks(w, M)
    return _result(w, 4 * w.N_q * w.N_k * w.d * (4 * w.d + 2) / M)


# ---- lower bound ------------------------------------------------------------------------------
def proposition3_lower_bound(w: Workload, M: int) -> HbmAccesses:
    """Accesses no exact attention algorithm with M elements of fast memory can go below.

    Proposition 3 (paper): no exact algorithm has o(N^2 d^2 / M) accesses for all M in [d, Nd].
    Its proof only uses M = Theta(Nd), where N^2 d^2 / M = Theta(Nd) is the input size.  The bound
    returned here, valid for every M >= d, is max(compulsory, pebbling):

    compulsory = B d (2 H_kv Nk' + 2 H Nq'): every key row some query sees is read from K and V
      (Nk' = Nk, or with a mask the keys some row sees, ``blocks.band_extent``: when causal the
      keys c <= Nq - 1 + diagonal, the last query's: Nk for the bottom-right diagonal Nk - Nq);
      every query that sees a key is read from Q and its output written (Nq' = Nq, or the rows
      that see a key: when causal the rows r >= -diagonal, min(Nq, Nk) bottom-right); K and V
      once per K/V head (GQA: H_kv of them a batch).
    pebbling = B H U d / (4M/d + 2 sqrt(3) sqrt(M)) - M, U = visible (query, key) pairs of a
      query head (``blocks.band_scores``), for algorithms that form every score q.k by
      multiply-adds (all of ours; Strassen-like ones excluded).  Cut the run into segments of M transfers.  Within one, at most 2M elements
      each of Q and K are available (resident or loaded), so at most (2M/d)^2 pairs get all d
      products there: <= 4M^2/d products.  The other products belong to pairs whose partial sum
      crosses a segment boundary; those partial sums are resident at the start or end or moved
      (<= 3M), so by Loomis-Whitney they are <= sqrt(2M * 2M * 3M) = 2 sqrt(3) M^1.5.  All
      U d products need >= U d / (4M^2/d + 2 sqrt(3) M^1.5) segments, all full but the last.
    For M >= d^2 the pebbling term is >= U d^2 / ((4 + 2 sqrt 3) M) - M: Proposition 3's
    N^2 d^2 / M with constant 1/(4 + 2 sqrt 3) ~ 0.134.  (For M < d^2 it is ~ N^2 d / sqrt(M),
    below N^2 d^2 / M: a pointwise c N^2 d^2 / M bound does not hold for small M.)
    Not for a block mask (ValueError): its kept blocks see fewer keys than the band's U and
    extents count, so this would be no lower bound.
    """
    if M < w.d:
        raise ValueError(f"M={M} elements is below d={w.d}: Proposition 3 is stated for M >= d")
    if w.block_mask is not None:
        raise ValueError("proposition3_lower_bound bounds attention under its band only: the "
                         "workload's block_mask hides more scores (give block_mask=None)")
    d = w.d
    mask, hi, lo = w.mask()
    edges = (w.N_q, w.N_k, mask.upper, mask.lower, hi, lo)
    queries, keys = band_extent(*edges)
    compulsory = d * (2 * w.BH_kv * keys + 2 * w.BH * queries)
    pairs = w.BH * band_scores(*edges)
    pebbling = pairs * d / (4 * M / d + 2 * math.sqrt(3) * math.sqrt(M)) - M
    elements = max(compulsory, pebbling)
    return HbmAccesses(elements, elements * w.dtype_bytes)
