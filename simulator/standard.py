"""Standard attention (the paper's Algorithms 0 and 3) as the numba_flash kernels run it.

S, P (and dP, dS) live in HBM; every matrix product is the generic tiled matmul of
docs/traffic-contract.md: ``Tiling(Br, Bc)`` output tiles, ``MATMUL_BK``-deep k-chunks staged
through shared memory.  Counts per (batch, head) pair, scaled by B*H in ``phase``.
Elements are the workload's (``Workload.dtype_bytes``): the kernels store every tensor, S, P,
dP and dS included, in the inputs' format (fp32, or fp16 / bf16 patterns), D in fp32 (4 bytes
an element: ``report.FP32_TENSORS``); their shared memory is fp32 in every format (``Tiling.smem_bytes``), the
SRAM counts' bytes (``TrafficReport.sram_read_bytes``) assume the workload's element size.
"""
from __future__ import annotations

from functools import lru_cache

from .banks import WARP, strided_loop_wavefronts, warp_wavefronts
from .blocks import ceil_div, unmasked_scores
from .phases import Phase, Plan, phase
from .tiling import MATMUL_BK, Tiling
from .workload import Workload

#: Non-matmul FLOPs per visible score of the softmax: max, subtract, exp, sum, normalise.
SOFTMAX_FLOPS = 5
#: Threads of a block of the row kernels (softmax, dS) on a GPU (``numba_flash.api``).
ROW_THREADS = 128


@lru_cache(maxsize=None)
def chunk_wavefronts(tiling: Tiling, variant: str) -> int:
    """Shared-memory wavefronts (``simulator.banks``) one block of the tiled matmul spends on
    one k-chunk, as kernels/standard.py lays it out: the A chunk at row stride BK | 1 and the B
    chunk at row stride Bc (fp32 words), stored by ``range(tid, count, T)`` loops whose
    consecutive threads walk the source's contiguous index (k for A, the column for B; m, and k,
    where the variant transposes them: ``trans_b`` stores each of its 16 k rows down a column,
    16-way conflicts at Bc = 64), then each thread reads its RA A values and CB B values
    (rows ty + TY x, columns tx + TX y) at every k step."""
    t, bk = tiling, MATMUL_BK
    la, T = bk | 1, t.threads
    if variant == "trans_a":
        a_word = lambda i: (i % t.Br) * la + i // t.Br      # noqa: E731
    else:
        a_word = lambda i: (i // bk) * la + i % bk          # noqa: E731
    if variant == "trans_b":
        b_word = lambda i: (i % bk) * t.Bc + i // bk        # noqa: E731
    else:
        b_word = lambda i: i                                # kk * Bc + cc, cc fastest
    stores = strided_loop_wavefronts(t.Br * bk, T, a_word) + strided_loop_wavefronts(bk * t.Bc, T, b_word)
    loads = 0
    for warp0 in range(0, T, WARP):
        lanes = [(tid // t.threads_x, tid % t.threads_x) for tid in range(warp0, min(T, warp0 + WARP))]
        for kk in range(bk):
            loads += sum(warp_wavefronts(min(ty + t.threads_y * x, t.Br - 1) * la + kk for ty, _ in lanes)
                         for x in range(t.rows_per_thread))
            loads += sum(warp_wavefronts(kk * t.Bc + min(tx + t.threads_x * y, t.Bc - 1) for _, tx in lanes)
                         for y in range(t.cols_per_thread))
    return stores + loads


def row_kernel_wavefronts(kernel: str, threads: int = ROW_THREADS) -> int:
    """Shared-memory wavefronts of one row (block) of the softmax or dS kernel
    (kernels/standard.py), one a warp instruction (a word a lane, or one broadcast word):
    softmax -- every thread stores its partial (m, l); at each step h = threads / 2, ..., 1 of
    the tree the threads below h load the pair h above and store the merged one (the warps
    holding them: ceil(h / 32)); every thread reads the row's back; dS -- thread 0 stores D,
    every warp reads it."""
    warps = ceil_div(threads, WARP)
    if kernel == "softmax":
        steps = [threads >> k for k in range(1, threads.bit_length())]
        return 2 * warps + 4 * sum(ceil_div(h, WARP) for h in steps) + 2 * warps
    if kernel == "ds":
        return 1 + warps
    raise ValueError(f"no shared-memory pattern for row kernel {kernel!r}")


def matmul_phase(name: str, a: str, b: str, c: str, m: int, n: int, k: int, tiling: Tiling,
                 bh: int, scaled: bool, variant: str = "") -> Phase:
    """C (m x n) = alpha opA(A) opB(B), inner dim k.

    HBM: each of the ceil(m/Br) x ceil(n/Bc) output tiles reads its rows of A and columns of B
    once.  SRAM: each k-chunk stores a full (zero-padded) Br x BK chunk of A and BK x Bc chunk
    of B; each of the tiling's threads reads its rows_per_thread A values and cols_per_thread B
    values once per k step of every chunk.  FLOPs: 2mnk, plus m*n for alpha when ``scaled``.
    Re-read per (batch, head): A if there is more than one column tile, B if more than one row tile.
    variant: the kernel's transpose variant ("", "trans_a", "trans_b"; ``Phase.code``).
    """
    tiles_r, tiles_c, chunks = ceil_div(m, tiling.Br), ceil_div(n, tiling.Bc), ceil_div(k, MATMUL_BK)
    steps = tiles_r * tiles_c * chunks
    t = tiling
    return phase(
        name, "standard_matmul", bh=bh,
        hbm_reads={a: tiles_c * m * k, b: tiles_r * k * n}, hbm_writes={c: m * n},
        sram_writes={a: steps * t.Br * MATMUL_BK, b: steps * MATMUL_BK * t.Bc},
        sram_reads={a: steps * MATMUL_BK * t.threads * t.rows_per_thread,
                    b: steps * MATMUL_BK * t.threads * t.cols_per_thread},
        matmul_flops=2 * m * n * k, other_flops=m * n if scaled else 0,
        lsu_wavefronts=steps * chunk_wavefronts(tiling, variant),
        blocks_per_unit=tiles_r * tiles_c,
        unit_reread_elements=(m * k if tiles_c > 1 else 0) + (k * n if tiles_r > 1 else 0),
        code=("standard_matmul", variant), block_trips=(chunks,) * (tiles_r * tiles_c))


def standard_forward(w: Workload, tiling: Tiling) -> Plan:
    """S = scale Q K^T -> HBM; P = softmax(S) (two passes over the visible scores) -> HBM; O = P V.
    P is an output (the backward reads it); S is workspace."""
    nq, nk, d, bh = w.N_q, w.N_k, w.d, w.BH
    visible = unmasked_scores(nq, nk, w.causal, w.causal_diagonal)
    softmax = phase("softmax", None, bh=bh, hbm_reads={"S": 2 * visible}, hbm_writes={"P": nq * nk},
                    other_flops=SOFTMAX_FLOPS * visible, units_per_head=nq,
                    unit_reread_elements=nk, code=("softmax", ""),
                    lsu_wavefronts=nq * row_kernel_wavefronts("softmax"))
    return Plan(
        (matmul_phase("S = scale Q K^T", "Q", "K", "S", nq, nk, d, tiling, bh, scaled=True,
                      variant="trans_b"),
         softmax,
         matmul_phase("O = P V", "P", "V", "O", nq, d, nk, tiling, bh, scaled=False)),
        workspace={"S": w.tensor_elements("S")})


def standard_backward(w: Workload, tiling: Tiling) -> Plan:
    """dV = P^T dO; dP = dO V^T; D = rowsum(dO * O); dS = P (dP - D); dQ = scale dS K;
    dK = scale dS^T Q.  Workspace: dP, dS and D (all allocated for the whole backward)."""
    nq, nk, d, bh = w.N_q, w.N_k, w.d, w.BH
    rowsum = phase("D = rowsum(dO * O)", None, bh=bh, hbm_reads={"dO": nq * d, "O": nq * d},
                   hbm_writes={"D": nq}, other_flops=2 * nq * d, units_per_head=nq,
                   code=("row_dot", ""))
    ds = phase("dS = P (dP - D)", None, bh=bh,
               hbm_reads={"P": nq * nk, "dP": nq * nk, "D": nq}, hbm_writes={"dS": nq * nk},
               other_flops=2 * nq * nk, units_per_head=nq, code=("ds", ""),
               lsu_wavefronts=nq * row_kernel_wavefronts("ds"))
    return Plan(
        (matmul_phase("dV = P^T dO", "P", "dO", "dV", nk, d, nq, tiling, bh, scaled=False,
                      variant="trans_a"),
         matmul_phase("dP = dO V^T", "dO", "V", "dP", nq, nk, d, tiling, bh, scaled=False,
                      variant="trans_b"),
         rowsum, ds,
         matmul_phase("dQ = scale dS K", "dS", "K", "dQ", nq, d, nk, tiling, bh, scaled=True),
         matmul_phase("dK = scale dS^T Q", "dS", "Q", "dK", nk, d, nq, tiling, bh, scaled=True,
                      variant="trans_a")),
        workspace={"dP": w.tensor_elements("dP"), "dS": w.tensor_elements("dS"),
                   "D": w.tensor_elements("D")})
