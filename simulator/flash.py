"""FlashAttention forward (Algorithm 1 order and FA2 order) and backward, as numba_flash runs them.

HBM counts follow docs/traffic-contract.md literally, summed over active block pairs with
``BlockGrid``.  SRAM counts (a model, not validated against hardware) follow the kernels'
shared-memory use: every tile load stores the full, zero-padded tile (Br x d or Bc x d; Br for
L and D); every score tile written to shared memory stores Br x Bc (P in the forward; P and dS
in the backward); in every tile product each thread reads its operands once per inner step
(S = Q K^T, dP = dO V^T: d steps of rows_per_thread + cols_per_thread reads; P V, dS K: cols_j
steps of rows_per_thread + head_cols_per_thread(d); P^T dO, dS^T Q: rows_i steps of
kv_rows_per_thread + head_cols_per_thread(d)).  Softmax row statistics and elementwise passes
over shared tiles are not counted.

FLOPs count valid elements of active tiles (the kernels skip inactive tiles, not the masked
entries of the diagonal ones): matmul 2 per multiply-add; other, per score: forward 5 (scale,
max, subtract, exp, sum), backward 5 (scale, subtract L, exp, subtract D, multiply by P); per
output element: see each function.  Row statistics (m, l, alpha) are not counted.  Counts are
per (batch, head) pair.

Band masks and GQA (``Workload.window``, ``kv_heads``; run by the tensor-core and half kernels
only, ``predict`` refuses them elsewhere): ``BlockGrid`` gives each row block its range of K/V
blocks (the kernels' ``key_block_range``), each K/V block its range of row blocks
(``row_block_range``), so the sums over active pairs above stay as they are. Under GQA the
forward is per query head as without (every query head reads its K/V blocks, from K/V head
h // group); the backward's main kernel runs a block per (K/V head, block j), which loads
K_j, V_j and stores dK_j, dV_j once (counts x B*H_kv) and loops over the group's query heads
(the per-pair counts x B*H).

Block-sparse (``Workload.block_mask``; the same four kernels): ``BlockGrid`` gets the tile
mask (``blocks.sparse_tiles``) and its active pairs are the band's pairs whose tile the block
mask keeps -- lists per row block and per K/V block (``row_lists``, ``column_lists``), no
longer ranges. Every count above is a sum over active pairs (``nb``, ``na``, ``pair_sum``,
``key_rows``) or per block (Q_i, O_i, L_i per row block; K_j, V_j, dK_j, dV_j per K/V block,
also for an empty list), so it follows unchanged; block order as without (heaviest-first for
an upper edge alone: row blocks from the last, K/V blocks from the first, by index). The
kernels' lists themselves (CSR int arrays shared by every head) are not contract tensors and
are not counted. Their compiled code is its own variant, ``SPARSE_VARIANT`` of
``Phase.code``, for the recorded tables (resources, SASS, loops).
"""
from __future__ import annotations

import dataclasses

from . import tile_patterns as tp
from .blocks import BlockGrid, sparse_tiles
from .phases import Phase, Plan, phase
from .spec import Mask
from .tiling import H200_SMEM_PER_BLOCK, WARP_PAIRS_VARIANT, Tiling
from .workload import Workload

FORWARD_SCORE_FLOPS = 5
BACKWARD_SCORE_FLOPS = 5
#: The forward ``deterministic=True`` runs again before its FFMA kernels, at its default tiling
#: (``recompute_tiling``): their P = exp(S - L) needs the L of the same fp32 S
#: (numba_flash.api._recomputed_forward); its O and L are the workspaces of ``RECOMPUTED``.
RECOMPUTE_KERNEL = "flash_forward_v2"
RECOMPUTED = {"O": "O (recomputed)", "L": "L (recomputed)"}
#: ``Phase.code``'s variant of the kernels compiled for a block mask (``spec.Mask.sparse``).
SPARSE_VARIANT = "sparse"
#: ... for a window's left side (``spec.Mask.lower``; the offsets are run-time arguments, so one
#: kernel serves every window), and for grouped K/V heads, ``GROUP_VARIANT`` + the group
#: (``spec.Mask.group``: "group4" for 4 query heads a K/V head).
WINDOW_VARIANT = "window"
GROUP_VARIANT = "group"


def _mixed(w: Workload, per_query_head: dict, per_kv_head: dict | None = None) -> dict:
    """Counts over all heads: ``per_kv_head`` x B*H_kv plus ``per_query_head`` x B*H (in that
    order of names: the L2 model sums them in float)."""
    out = {name: n * w.BH_kv for name, n in (per_kv_head or {}).items()}
    for name, n in per_query_head.items():
        out[name] = out.get(name, 0) + n * w.BH
    return {name: int(n) for name, n in out.items() if n}


def _grid(w: Workload, t: Tiling) -> BlockGrid:
    """The workload's blocks under tiling ``t``; with a block mask, its tiles (ValueError where
    the tiles do not nest in the blocks)."""
    tiles = None
    if w.block_mask is not None:
        tiles = sparse_tiles(w.block_mask_array(), w.block_size, w.N_q, w.N_k, t.Br, t.Bc)
    return BlockGrid(w.N_q, w.N_k, t.Br, t.Bc, w.causal, w.diagonal, w.window, tiles)


def _variant(w: Workload, t: Tiling | None = None) -> str:
    """The fa2 kernels' ``Phase.code`` variant: the parts of the workload's compile-time mask
    (``mask_variant``), joined by "+" to ``WARP_PAIRS_VARIANT`` for a tiling ``t`` with
    ``warp_pairs`` (the tc backward)."""
    parts = [mask_variant(w.mask()[0])]
    if t is not None and t.warp_pairs:
        parts.append(WARP_PAIRS_VARIANT)
    return "+".join(p for p in parts if p)


def mask_variant(mask: Mask) -> str:
    """The variant parts a compile-time ``mask`` adds to the fa2 kernels' ``Phase.code``, in
    this order: ``SPARSE_VARIANT`` (a block mask), ``WINDOW_VARIANT`` (a window's left side),
    ``GROUP_VARIANT`` + the group (grouped K/V heads); "" for a plain or causal mask, whose
    upper edge the tables key as ``causal``, and for dropout, which no recorded kernel has."""
    parts = [SPARSE_VARIANT] if mask.sparse else []
    if mask.lower:
        parts.append(WINDOW_VARIANT)
    if mask.group > 1:
        parts.append(f"{GROUP_VARIANT}{mask.group}")
    return "+".join(parts)


def _group_of(part: str) -> int | None:
    """The group a variant part ``GROUP_VARIANT`` + digits names, else None."""
    digits = part[len(GROUP_VARIANT):]
    return int(digits) if part.startswith(GROUP_VARIANT) and digits.isdigit() else None


def variant_mask(variant: str, causal: bool) -> tuple[str, Mask]:
    """``mask_variant``'s inverse for a kernel recorded with ``variant`` and ``causal``: (the
    variant without its window and group parts, the compile-time Mask it was built with:
    upper edge ``causal``, ``sparse`` where the variant names it)."""
    parts = [p for p in variant.split("+") if p]
    groups = [g for g in map(_group_of, parts) if g]
    rest = [p for p in parts if p != WINDOW_VARIANT and _group_of(p) is None]
    mask = Mask(upper=causal, lower=WINDOW_VARIANT in parts, group=groups[0] if groups else 1,
                sparse=SPARSE_VARIANT in parts)
    return "+".join(rest), mask


def _heaviest_first(w: Workload) -> bool:
    """Whether the tensor-core kernels start their blocks tile by tile over all heads, in order
    of work (``tile_major_block``): masks with an upper edge alone (causal, or a window's right
    side), where a tile's work grows with its row (falls with its key) block; a window's blocks
    have about the same work each and start head by head."""
    mask, _, _ = w.mask()
    return mask.upper and not mask.lower


def _forward_tile_sram(g: BlockGrid, t: Tiling, d: int) -> tuple[dict, dict]:
    """SRAM of S = Q K^T, P -> SRAM, O += P V over all active pairs (reads, writes); tile loads
    of Q, K, V are added by the caller."""
    pairs, kv_rows = g.active_pairs, g.active_cols()
    reads = {"Q": pairs * t.threads * d * t.rows_per_thread,
             "K": pairs * t.threads * d * t.cols_per_thread,
             "P": kv_rows * t.threads * t.rows_per_thread,
             "V": kv_rows * t.threads * t.head_cols_per_thread(d)}
    return reads, {"P": pairs * t.Br * t.Bc}


def flash_forward_v2(w: Workload, t: Tiling) -> Plan:
    """Grid (Tr, BH): Q_i loaded once, K_j/V_j streamed for active j, O and L written once.
    Other FLOPs: 5 per active score, rows_i*d per active pair (rescale O), Nq*d (divide by l).
    Workspace: L (always written; the backward's input)."""
    g, d = _grid(w, t), w.d
    kv_rows, scores = g.active_cols(), g.active_scores()
    reads, writes = _forward_tile_sram(g, t, d)
    writes.update({"Q": g.tr * t.Br * d, "K": g.active_pairs * t.Bc * d,
                   "V": g.active_pairs * t.Bc * d})
    main = phase("forward (FA2 order)", "flash_forward_v2", bh=w.BH,
                 hbm_reads={"Q": w.N_q * d, "K": kv_rows * d, "V": kv_rows * d},
                 hbm_writes={"O": w.N_q * d, "L": w.N_q},
                 sram_reads=reads, sram_writes=writes,
                 matmul_flops=4 * d * scores,
                 other_flops=FORWARD_SCORE_FLOPS * scores + d * g.active_rows() + d * w.N_q,
                 blocks_per_unit=g.tr, unit_reread_elements=2 * w.N_k * d,
                 block_trips=g.nb, unit_share=w.group, edge_trips=g.edge_nb,
                 lsu_wavefronts=_forward_v2_wavefronts(g, t, d))
    return Plan((main,), workspace={"L": w.tensor_elements("L")})


def _forward_v2_wavefronts(g: BlockGrid, t: Tiling, d: int) -> int:
    """Shared-memory wavefronts of one head of kernels/flash_forward_fa2.py
    (``simulator.tile_patterns``): each block copies Qi and ends with the row sums' exchange;
    each active pair copies Kj and Vj, computes S = Qi Kj^T, exchanges the row maxima, stores P
    and adds P Vj."""
    per_block = tp.head_tile_copy(t, d, t.Br) + sum(tp.row_partials(t))
    per_pair = (2 * tp.head_tile_copy(t, d, t.Bc) + tp.rows_dot_rows(t, d) + sum(tp.row_partials(t))
                + tp.score_tile_store(t) + tp.scores_times_tile(t, d, t.Bc))
    return g.tr * per_block + g.active_pairs * per_pair


def _fa2_on_tensor_cores(w: Workload, t: Tiling, kernel: str, name: str, q_read: int, q_write: int,
                         kv_element: int) -> Plan:
    """``flash_forward_v2``'s plan for a tensor-core kernel: its SRAM per head -- Q written
    ``q_write`` elements per row block, read ``q_read`` per active pair; K and V stored
    ``kv_element`` elements per element of their zero-padded tiles per active pair and read as
    much by each warp -- and its block order: causal launches (an upper edge alone:
    ``_heaviest_first``) start the row blocks heaviest (last) first over all heads, so the
    blocks in flight belong to as many heads as there are blocks (L2 model)."""
    g = _grid(w, t)
    warps, pairs = t.Br // t.rows_per_warp(kernel), g.active_pairs
    plan = flash_forward_v2(w, t)
    heavy = _heaviest_first(w)

    main = dataclasses.replace(
        plan.phases[0], name=name, kernel=kernel, code=(kernel, _variant(w)),
        block_trips=tuple(int(n) for n in g.nb[::-1]) if heavy else plan.phases[0].block_trips,
        edge_trips=plan.phases[0].edge_trips[::-1] if heavy else plan.phases[0].edge_trips,
        tile_major=heavy,
        sram_reads=_mixed(w, {"Q": pairs * q_read, "K": pairs * warps * t.Bc * kv_element,
                              "V": pairs * warps * t.Bc * kv_element}),
        sram_writes=_mixed(w, {"Q": g.tr * q_write, "K": pairs * t.Bc * kv_element,
                               "V": pairs * t.Bc * kv_element}),
        lsu_wavefronts=None, blocks_per_unit=1 if heavy else g.tr)
    return Plan((main,), workspace=plan.workspace)


def flash_forward_tc(w: Workload, t: Tiling) -> Plan:
    """The FA2-order forward on tensor cores (numba_flash's default "fa2"): HBM, FLOPs and
    workspace as ``flash_forward_v2`` (same contract). SRAM, in fp32 elements, counting each
    element's TF32 hi and lo parts (two elements) over the zero-padded D8 = mma_depth(d)
    columns (Q: one element where it stays fp32, ``Tiling.mma_q_raw``): tile stores Q (once per
    row block), K, V (per active pair); fragment reads per active pair: each of the Br/16 warps
    reads its 16 rows of Q and all of K and V once. P stays in registers (no SRAM)."""
    t.check_mma()
    d8 = t.mma_depth(w.d)
    q_tile = t.Br * d8 * (1 if t.mma_q_raw(w.d) else 2)
    return _fa2_on_tensor_cores(w, t, "flash_forward_tc", "forward (FA2 order, tensor cores)",
                                q_tile, q_tile, d8 * 2)


def flash_forward_half(w: Workload, t: Tiling) -> Plan:
    """The FA2-order forward on tensor cores in fp16 / bf16 (numba_flash's "fa2" for half
    inputs): HBM, FLOPs and workspace as ``flash_forward_v2`` (same contract; elements of the
    input's format, L in fp32). SRAM, in 16-bit elements over the zero-padded D16 =
    half_depth(d) columns: tile stores Q (once per row block), K and V (per active pair);
    fragment reads (ldmatrix) per active pair: each warp (``Tiling.rows_per_warp`` rows) reads
    its rows of Q and all of K and V once. P stays in registers."""
    t.check_mma("flash_forward_half")
    d16 = t.half_depth(w.d)
    plan = _fa2_on_tensor_cores(w, t, "flash_forward_half", "forward (FA2 order, tensor cores, half)",
                                t.Br * d16, t.Br * d16, d16)
    g = _grid(w, t)
    copied = _mixed(w, {"Q": g.tr * t.Br * w.d, "K": g.active_pairs * t.Bc * w.d,
                        "V": g.active_pairs * t.Bc * w.d})
    return Plan((_lsu_less_copies(plan.phases[0], w, copied),), workspace=plan.workspace)


def _lsu_less_copies(p: Phase, w: Workload, copied: dict, extra: float = 0.0) -> Phase:
    """``p`` with its ``Phase.lsu_wavefronts``: its SRAM reads and writes in conflict-free
    wavefronts, less the tile elements ``copied`` by cp.async (the half kernels' HBM -> SRAM
    copies where d % 8 == 0: 16-byte LDGSTS, which the LSU's shared-memory pipe does not carry;
    on the H200 ncu counts no shared-store wavefront for them, 2026-12-03 levels: 0 of the half
    forward's), plus ``extra`` wavefronts the SRAM counts leave out. Padding columns
    (d .. D16 - 1) and the copies of other head dims are plain stores, counted."""
    if w.d % 8:
        copied = {}
    elements = sum(p.sram_reads.values()) + sum(p.sram_writes.values()) - sum(copied.values())
    return dataclasses.replace(p, lsu_wavefronts=elements * w.dtype_bytes / 128 + extra)


def flash_forward_v1(w: Workload, t: Tiling) -> Plan:
    """Grid (BH,), Algorithm 1: outer loop over j, inner over active i; O, l, m round-trip
    through HBM between visits.  Other FLOPs: 5 per active score, 3*rows_i*d per active pair
    (O = keep O + P V / l).  Workspace: l, m and L.  Half inputs (numba_flash's "fa1" on fp16 /
    bf16): the same counts, Q, K, V, O in the input's format, l, m, L fp32 (4 bytes an element:
    ``report.FP32_TENSORS``), SRAM tiles fp32."""
    g, d = _grid(w, t), w.d
    nb, rows = g.nb, g.rows
    visited = g.active_rows()                              # sum over active (i, j) of rows_i
    revisited = int((rows * (nb - 1).clip(min=0)).sum())   # ... over those with j > 0
    unvisited = int(rows[nb == 0].sum())                   # rows of blocks with nb(i) = 0
    reads, writes = _forward_tile_sram(g, t, d)
    writes.update({"K": g.tc * t.Bc * d, "V": g.tc * t.Bc * d, "Q": g.active_pairs * t.Br * d})
    scores = g.active_scores()
    main = phase("forward (Algorithm 1 order)", "flash_forward_v1", bh=w.BH,
                 hbm_reads={"K": w.N_k * d, "V": w.N_k * d, "Q": visited * d,
                            "O": revisited * d, "l": revisited, "m": revisited},
                 hbm_writes={"O": (visited + unvisited) * d, "l": revisited, "m": revisited,
                             "L": w.N_q},
                 sram_reads=reads, sram_writes=writes,
                 matmul_flops=4 * d * scores,
                 other_flops=FORWARD_SCORE_FLOPS * scores + 3 * d * visited,
                 unit_reread_elements=2 * w.N_q * d + 2 * w.N_q,
                 block_trips=(g.tc,), inner_trips=(g.active_pairs,), written_first={"O", "l", "m"},
                 lsu_wavefronts=_forward_v1_wavefronts(g, t, d))
    return Plan((main,), workspace={name: w.tensor_elements(name) for name in ("l", "m", "L")})


def _forward_v1_wavefronts(g: BlockGrid, t: Tiling, d: int) -> int:
    """Shared-memory wavefronts of one head of kernels/flash_forward_alg1.py
    (``simulator.tile_patterns``): each outer step copies Kj and Vj; each active pair copies Qi,
    computes S = Qi Kj^T into SRAM, runs the softmax a row a thread, adds P Vj and reads each
    row's weights."""
    per_pair = (tp.head_tile_copy(t, d, t.Br) + tp.rows_dot_rows(t, d) + tp.score_tile_store(t)
                + tp.row_softmax(t) + tp.scores_times_tile(t, d, t.Bc) + tp.row_weights_read(t))
    return g.tc * 2 * tp.head_tile_copy(t, d, t.Bc) + g.active_pairs * per_pair


def _preprocess(w: Workload, zero_dq: bool) -> Phase:
    """D = rowsum(dO * O) (2 FLOPs per element); with ``zero_dq`` also dQ = 0."""
    nq, d = w.N_q, w.d
    writes = {"D": nq, "dQ": nq * d if zero_dq else 0}
    return phase("preprocess D = rowsum(dO * O)", None, bh=w.BH,
                 hbm_reads={"dO": nq * d, "O": nq * d}, hbm_writes=writes,
                 other_flops=2 * nq * d, units_per_head=nq,
                 code=("row_dot", "zero_dq" if zero_dq else ""))


def _backward_kv(w: Workload, t: Tiling, g: BlockGrid, atomic_dq: bool) -> Phase:
    """Grid (Tc, B*H_kv): K_j, V_j stay on chip; for each query head of the K/V head's group
    (one without GQA) and each active i recompute P, dS; accumulate dK_j, dV_j in registers;
    with ``atomic_dq`` add dS K_j into dQ_i in HBM. K, V loads and dK, dV stores are per K/V
    head, the rest per query head.
    Other FLOPs: 5 per active score, Nk*d (scale dK) per K/V head, and with atomics
    2*rows_i*d per active pair (scale and add)."""
    d = w.d
    pairs, q_rows, kv_rows = g.active_pairs, g.active_rows(), g.active_cols()
    scores = g.active_scores()
    kv_thread, head = t.kv_rows_per_thread(), t.head_cols_per_thread(d)
    rows_dot = pairs * t.threads * d
    sram_reads = {"Q": rows_dot * t.rows_per_thread + q_rows * t.threads * head,
                  "K": rows_dot * t.cols_per_thread,
                  "dO": rows_dot * t.rows_per_thread + q_rows * t.threads * head,
                  "V": rows_dot * t.cols_per_thread,
                  "P": q_rows * t.threads * kv_thread,
                  "dS": q_rows * t.threads * kv_thread}
    sram_writes = {"Q": pairs * t.Br * d, "dO": pairs * t.Br * d,
                   "L": pairs * t.Br, "D": pairs * t.Br,
                   "P": pairs * t.Br * t.Bc, "dS": pairs * t.Br * t.Bc}
    kv_sram_writes = {"K": g.tc * t.Bc * d, "V": g.tc * t.Bc * d}
    hbm_reads = {"Q": q_rows * d, "dO": q_rows * d, "L": q_rows, "D": q_rows}
    kv_hbm_reads = {"K": w.N_k * d, "V": w.N_k * d}
    hbm_writes = {}
    kv_hbm_writes = {"dK": w.N_k * d, "dV": w.N_k * d}
    matmul = 8 * d * scores                                  # S, dP, dV, dK
    other = BACKWARD_SCORE_FLOPS * scores                    # scores
    kv_other = w.N_k * d                                      # scale dK
    reread = 2 * w.N_q * d + 2 * w.N_q                        # Q, dO, L, D of a query head
    if atomic_dq:
        hbm_reads["dQ"] = hbm_writes["dQ"] = q_rows * d
        sram_reads["dS"] += kv_rows * t.threads * t.rows_per_thread
        sram_reads["K"] += kv_rows * t.threads * head
        matmul += 2 * d * scores                              # dQ_i += dS K_j
        other += 2 * d * q_rows                               # scale and add, per atomic
        reread += w.N_q * d                                   # dQ of a query head
    per_pair = (2 * tp.head_tile_copy(t, d, t.Br) + sum(tp.row_stats(t)) + 2 * tp.rows_dot_rows(t, d)
                + 2 * tp.score_tile_store(t) + 2 * tp.scores_t_times_tile(t, d, t.Br)
                + (tp.scores_times_tile(t, d, t.Bc) if atomic_dq else 0))
    lsu = w.BH_kv * g.tc * 2 * tp.head_tile_copy(t, d, t.Bc) + w.BH * pairs * per_pair
    return phase("main: dK, dV" + (", dQ atomics" if atomic_dq else ""), "flash_backward",
                 bh=1, hbm_reads=_mixed(w, hbm_reads, kv_hbm_reads),
                 hbm_writes=_mixed(w, hbm_writes, kv_hbm_writes),
                 sram_reads=_mixed(w, sram_reads), sram_writes=_mixed(w, sram_writes, kv_sram_writes),
                 matmul_flops=matmul * w.BH, other_flops=other * w.BH + kv_other * w.BH_kv,
                 units_per_head=w.BH_kv, blocks_per_unit=g.tc,
                 unit_reread_elements=w.group * reread,
                 code=("flash_backward", "" if atomic_dq else "no_atomic_dq"),
                 block_trips=g.na * w.group, edge_trips=g.edge_na * w.group, heads=w.BH_kv,
                 lsu_wavefronts=lsu)


def flash_backward(w: Workload, t: Tiling) -> Plan:
    """Preprocess (D, dQ = 0), then the (Tc, BH) kernel with dQ by atomic adds.  Workspace: D."""
    g = _grid(w, t)
    return Plan((_preprocess(w, zero_dq=True), _backward_kv(w, t, g, atomic_dq=True)),
                workspace={"D": w.tensor_elements("D")})


def flash_backward_tc(w: Workload, t: Tiling) -> Plan:
    """The backward on tensor cores (numba_flash's default "fa2"): HBM, FLOPs and workspace as
    ``flash_backward`` (same contract). SRAM of its (Tc, BH) kernel, in fp32 elements, counting
    each element's TF32 hi and lo parts (two elements) over the zero-padded D8 = mma_depth(d)
    columns: tile stores K, V (once per block j), Q and dO twice (row-major and transposed), dS
    (Br x Bc) and L, D (Br, one element each) per active pair; fragment reads per active pair:
    S^T = K Q^T and dP^T = V dO^T read K and V once and, in each of the Bc/16 warps, all of Q
    and dO; dV += P^T dO and dK += dS^T Q read all of dO and Q again in each warp; dQ += dS K
    runs per_warp = ceil(units / warps) 16 x 8 tile products in every warp (units = Br/16 x
    D8/8; a warp past the last recomputes it), each reading 8 columns of K over the Bc keys and
    16 rows of dS -- read once for all of a warp's products where D8/8 is a multiple of
    per_warp (its products then share their rows). P and dS reach dV and dK in registers; the
    elementwise reads of L and D are not counted. Causal launches (an upper edge alone) start
    the K/V blocks heaviest (first) first over all heads (L2 model: the blocks in flight belong
    to as many heads). Under GQA a block (K/V head, j) stores K_j, V_j once and runs the steps
    above for each query head of its group. With ``warp_pairs`` (v12) each 16-key tile has two
    warps, one for S^T and dV, one for dP^T and dK (the reads above unchanged), P^T passed
    from the first to the second through SRAM (Br x Bc elements written and read per active
    pair), and the dQ product dealt to 2 Bc/16 warps."""
    t.check_mma("flash_backward_tc")
    g, d8 = _grid(w, t), t.mma_depth(w.d)
    warps, pairs = t.threads_for("flash_backward_tc") // 32, g.active_pairs
    tiles = t.Bc // 16                                       # 16-key tiles
    units = (t.Br // 16) * (d8 // 8)
    per_warp = -(-units // warps)
    products = warps * per_warp
    ds_reads = warps * (1 if (d8 // 8) % per_warp == 0 else per_warp)   # 16 x Bc reads of dS
    pre, main = flash_backward(w, t).phases
    head_reads = pairs * 2 * tiles * t.Br * d8 * 2          # Q (or dO): two products a tile
    exchange = {"P": pairs * t.Br * t.Bc} if t.warp_pairs else {}

    heavy = _heaviest_first(w)
    main = dataclasses.replace(
        main, name="main: dK, dV, dQ atomics (tensor cores)", kernel="flash_backward_tc",
        code=("flash_backward_tc", _variant(w, t)), tile_major=heavy, lsu_wavefronts=None,
        sram_reads=_mixed(w, {"Q": head_reads, "dO": head_reads,
                              "K": pairs * (t.Bc * d8 * 2 + products * t.Bc * 8 * 2),
                              "V": pairs * t.Bc * d8 * 2,
                              "dS": pairs * ds_reads * 16 * t.Bc * 2, **exchange}),
        sram_writes=_mixed(w, {"Q": pairs * t.Br * d8 * 4, "dO": pairs * t.Br * d8 * 4,
                               "L": pairs * t.Br, "D": pairs * t.Br,
                               "dS": pairs * t.Br * t.Bc * 2, **exchange},
                           {"K": g.tc * t.Bc * d8 * 2, "V": g.tc * t.Bc * d8 * 2}),
        blocks_per_unit=1 if heavy else g.tc)
    return Plan((pre, main), workspace={"D": w.tensor_elements("D")})


def _renamed(counts: dict, old: str, new: str) -> dict:
    return {new if name == old else name: n for name, n in counts.items()}


def flash_backward_half(w: Workload, t: Tiling) -> Plan:
    """The backward on tensor cores in fp16 / bf16 (numba_flash's "fa2" for half inputs): HBM
    and FLOPs as ``flash_backward`` (same contract; elements of the input's format, L, D and dQ
    accumulated in fp32), except that dQ is accumulated in an fp32 workspace "dQ_accum" (zeroed
    by the preprocess, atomics in the kernel) and a third launch rounds it into dQ (read N_q d,
    write N_q d). SRAM of its (Tc, BH) kernel, in 16-bit elements over the zero-padded D16 =
    half_depth(d) columns (L and D, fp32, two elements a value): tile stores K, V (once per
    block j), Q, dO (Br x D16), L, D (Br) and dS^T (Bc x Br) per active pair; fragment reads
    (ldmatrix) per active pair: S^T = K Q^T and dP^T = V dO^T read K and V once and, in each of
    the Bc/16 warps, all of Q and dO; dV += P^T dO and dK += dS^T Q read all of dO and Q again
    in each warp; dQ += dS K runs per_warp = ceil(units / warps) 16 x 16 products in every warp
    (units = Br/16 x D16/16; a warp past the last recomputes it), each reading 16 columns of K
    over the Bc keys and 16 rows of dS^T -- once for all of a warp's products where D16/16 is a
    multiple of per_warp. P and dS reach dV and dK in registers; the elementwise reads of L and
    D are not counted. Causal launches start the K/V blocks heaviest first over all heads;
    GQA as ``flash_backward_tc``. Workspace: D and dQ_accum."""
    t.check_mma("flash_backward_half")
    g, d16, nq, d = _grid(w, t), t.half_depth(w.d), w.N_q, w.d
    warps, pairs = t.Bc // 16, g.active_pairs
    units = (t.Br // 16) * (d16 // 16)
    per_warp = -(-units // warps)
    ds_reads = warps * (1 if (d16 // 16) % per_warp == 0 else per_warp)   # 16 x Bc reads of dS^T
    pre, main = flash_backward(w, t).phases
    head_reads = pairs * 2 * warps * t.Br * d16     # Q (or dO): two products a warp

    pre = dataclasses.replace(pre, hbm_writes=_renamed(pre.hbm_writes, "dQ", "dQ_accum"),
                              code=("row_dot", "zero_dq"))
    heavy = _heaviest_first(w)
    main = dataclasses.replace(
        main, name="main: dK, dV, dQ atomics (tensor cores, half)", kernel="flash_backward_half",
        code=("flash_backward_half", _variant(w)), tile_major=heavy,
        hbm_reads=_renamed(main.hbm_reads, "dQ", "dQ_accum"),
        hbm_writes=_renamed(main.hbm_writes, "dQ", "dQ_accum"),
        sram_reads=_mixed(w, {"Q": head_reads, "dO": head_reads,
                              "K": pairs * (t.Bc * d16 + per_warp * warps * t.Bc * 16),
                              "V": pairs * t.Bc * d16,
                              "dS": pairs * ds_reads * 16 * t.Bc}),
        sram_writes=_mixed(w, {"Q": pairs * t.Br * d16, "dO": pairs * t.Br * d16,
                               "L": pairs * t.Br * 2, "D": pairs * t.Br * 2,
                               "dS": pairs * t.Br * t.Bc},
                           {"K": g.tc * t.Bc * d16, "V": g.tc * t.Bc * d16}),
        blocks_per_unit=1 if heavy else g.tc)
    narrow = phase("dQ = dQ_accum rounded to the format", None, bh=w.BH,
                   hbm_reads={"dQ_accum": nq * d}, hbm_writes={"dQ": nq * d},
                   units_per_head=nq, code=("convert", "narrow"))
    copied = _mixed(w, {"Q": pairs * t.Br * d, "dO": pairs * t.Br * d, "L": pairs * t.Br * 2,
                        "D": pairs * t.Br * 2}, {"K": g.tc * t.Bc * d, "V": g.tc * t.Bc * d})
    # each warp reads L_i and D_i of its lane's query (a word of 4 banks: one wavefront) for
    # every query 8-tile n and parity e: Br / 2 reads a pair, left out of the SRAM counts
    main = _lsu_less_copies(main, w, copied, extra=pairs * w.BH * warps * t.Br / 2)
    return Plan((pre, main, narrow), workspace={"D": w.tensor_elements("D"),
                                                "dQ_accum": w.tensor_elements("dQ_accum")})


def _dq_kernel_wavefronts(g: BlockGrid, t: Tiling, d: int) -> int:
    """Shared-memory wavefronts of one head of the deterministic dQ kernel
    (``simulator.tile_patterns``): each block copies Qi, dOi, L_i, D_i; each active pair copies
    Kj, Vj, recomputes S and dP (reading L_i, D_i), stores dS and adds dS Kj."""
    stats_stored, stats_read = tp.row_stats(t)
    per_block = 2 * tp.head_tile_copy(t, d, t.Br) + stats_stored
    per_pair = (2 * tp.head_tile_copy(t, d, t.Bc) + 2 * tp.rows_dot_rows(t, d) + stats_read
                + tp.score_tile_store(t) + tp.scores_times_tile(t, d, t.Bc))
    return g.tr * per_block + g.active_pairs * per_pair


def recompute_tiling(d: int, limit_bytes: int = H200_SMEM_PER_BLOCK) -> Tiling:
    """The tiling of the deterministic backward's recomputed forward: the FFMA forward's
    default at head dim d for ``limit_bytes`` of shared memory a block (the API passes its
    device's), not cut for short sequences: one kernel a head dim (on the H200 128 x 64,
    64 x 64 from d = 192)."""
    return Tiling.kernel_default(RECOMPUTE_KERNEL, d, None, limit_bytes)


def _recomputed(counts: dict) -> dict:
    return {RECOMPUTED.get(name, name): n for name, n in counts.items()}


def flash_backward_deterministic(w: Workload, t: Tiling) -> Plan:
    """The FFMA forward again (at ``recompute_tiling``; its O and L as the workspaces
    ``RECOMPUTED``, the caller's o and lse unread), preprocess (D from that O), the (Tc, BH)
    kernel for dK, dV, then a (Tr, BH) kernel that owns dQ_i and streams K_j, V_j (recomputing
    P, dS), both from that L.  dQ kernel other FLOPs: 5 per active score, Nq*d (scale).
    Workspace: D and the recomputed O, L."""
    ft = recompute_tiling(w.d)
    (forward,) = flash_forward_v2(w, ft).phases
    forward = dataclasses.replace(forward, name="forward again (FFMA: the L of fp32 S)",
                                  hbm_writes=_recomputed(forward.hbm_writes), tiling=ft)
    g, d = _grid(w, t), w.d
    pre, kv = _preprocess(w, zero_dq=False), _backward_kv(w, t, g, atomic_dq=False)
    pre = dataclasses.replace(pre, hbm_reads=_recomputed(pre.hbm_reads))
    kv = dataclasses.replace(kv, hbm_reads=_recomputed(kv.hbm_reads))
    pairs, kv_rows, scores = g.active_pairs, g.active_cols(), g.active_scores()
    rows_dot = pairs * t.threads * d
    dq = phase(
        "dQ kernel", "flash_backward_dq", bh=w.BH,
        hbm_reads={"Q": w.N_q * d, "dO": w.N_q * d, RECOMPUTED["L"]: w.N_q, "D": w.N_q,
                   "K": kv_rows * d, "V": kv_rows * d},
        hbm_writes={"dQ": w.N_q * d},
        sram_reads={"Q": rows_dot * t.rows_per_thread, "dO": rows_dot * t.rows_per_thread,
                    "K": rows_dot * t.cols_per_thread + kv_rows * t.threads * t.head_cols_per_thread(d),
                    "V": rows_dot * t.cols_per_thread,
                    "dS": kv_rows * t.threads * t.rows_per_thread},
        sram_writes={"Q": g.tr * t.Br * d, "dO": g.tr * t.Br * d, "L": g.tr * t.Br,
                     "D": g.tr * t.Br, "K": pairs * t.Bc * d, "V": pairs * t.Bc * d,
                     "dS": pairs * t.Br * t.Bc},
        matmul_flops=6 * d * scores, other_flops=BACKWARD_SCORE_FLOPS * scores + w.N_q * d,
        blocks_per_unit=g.tr, unit_reread_elements=2 * w.N_k * d, block_trips=g.nb,
        edge_trips=g.edge_nb,
        lsu_wavefronts=_dq_kernel_wavefronts(g, t, d))
    return Plan((forward, pre, kv, dq),
                workspace={"D": w.tensor_elements("D"), RECOMPUTED["O"]: w.tensor_elements("O"),
                           RECOMPUTED["L"]: w.tensor_elements("L")})
