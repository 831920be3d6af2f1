"""``flash_forward_fp16x3``: numba_flash's ``algorithm="fa2_fp16x3"`` (fp32 attention from three
fp16 products a product; numba_flash/fp16x3.py runs it, kernels/split_half.py says how).

Three launches, counted over all heads (``Workload.BH`` query heads, ``BH_kv`` K/V heads; the
preparing kernels take a block row per head of q, k and v, ``heads = BH + 2 BH_kv`` in all):

1. head maxima (``head_amax``): ``GX`` blocks a head read each of its elements once (Q, K, V)
   and write ``GX`` partial maxima a head ("head maxima", fp32; each block's from a tree in
   shared memory, ``amax_wavefronts``).
2. split (``split_half``): reads Q, K, V once more, each row as ``Workload.D_parts`` = 2 D16
   16-bit elements (hi parts, zeros to D16, lo parts, zeros to D16): "Q parts", "K parts",
   "V parts". Each of its threads first reads its head's ``GX`` maxima (``scale_of``): the reads
   of "head maxima" follow the launch's threads a head, ``prep_launch`` and ``split_threads``.
3. the forward (``flash_forward_half`` compiled in its fp32 mode) on those parts: to HBM and
   SRAM the fp16 kernel on a workload whose rows are ``D_parts`` fp16 elements (its tiles hold
   both parts of a row; ``simulator.flash.flash_forward_half``), but O is fp32 and d wide, and
   every thread of every block reads the ``GX`` maxima of its q, k and v heads (3 GX).

FLOPs: the attention's as ``flash_forward_v2`` counts them (the nominal 4 N_q N_k d, as the
3xTF32 forward is counted: the split's three products are not counted thrice), plus 1 a
element for the maxima and 2 for the split (the scale, lo = x - hi). Workspace: L, the maxima
and the parts (as many bytes as q, k and v, padded to D16).
The compiled kernel of launch 3 is its own variant, ``VARIANT`` (with a block mask
``sparse+fp16x3``), for the recorded tables; the preparing kernels are ``head_amax`` and
``split_half``.
"""
from __future__ import annotations

import dataclasses
import math
import os
from contextlib import contextmanager

from .banks import WARP
from .blocks import ceil_div
from .phases import Plan, phase
from .tiling import HALF_K, Tiling
from .workload import Workload

#: Blocks of head_amax a head, and partial maxima a head (numba_flash/kernels/split_half.GX).
GX = 16
#: ``Phase.code`` variant of the fp16 kernel compiled in its fp32 mode.
VARIANT = "fp16x3"
#: The parts tensors the forward reads, by the tensor they are made of.
PARTS = {"Q": "Q parts", "K": "K parts", "V": "V parts"}
MAXIMA = "head maxima"
#: The backward's maxima and parts of dO (its B*H heads alone).
DO_MAXIMA, DO_PARTS = "dO maxima", "dO parts"
#: The names of the two preparing launches of q, k, v.
PREP_NAMES = ("head maxima", "split into fp16 parts")
#: FLOPs an element of q, k, v: a max (head_amax); a scale and a subtraction (split_half).
AMAX_FLOPS, SPLIT_FLOPS = 1, 2


#: Default tiling by head dim: at d <= 64 128 x 32 (2 row tiles a warp: 242 registers, no
#: spills); above, 16-row warps (Br an odd multiple of 16, or ``Tiling.warp_rows``), since two
#: row tiles of d = 128 spill (ptxas, sm_90: 520 bytes at 128 x 32). At 255 registers a warp, a
#: scheduler's register file holds two warps, and the barrier of every step keeps a block at
#: the pace of its busiest scheduler: d <= 128 takes 112 x 32 (7 warps: three schedulers run
#: two), where 80 x 32 (5 warps) left three schedulers one warp each; 128 x 32 with
#: ``warp_rows=16`` (8 warps, two on every scheduler; nvJitLink 13.0, sm_90a: 255 registers,
#: no spills) evens them out. H200, 2026-12-06 (tools/fp16x3_forward.py, per-call CUDA events,
#: results/h200/tuning/fp16x3_forward_112_2026-12-06.log): 80 x 32 -> 112 x 32 63.8 -> 94.7
#: TFLOP/s at (4,16,4096,128), 57.3 -> 80.9 causal (2,32,4096,128), 61.2 -> 85.2 at
#: (8,32,2048,128), 69.4 -> 102.0 at (1,16,16384,128); H100, 2026-12-07 (same tool, one call,
#: results/h100/tuning/fp16x3_forward_2026-12-07.log): 112 x 32 -> 128 x 32 w16 5.917 -> 5.786
#: ms, 3.575 -> 3.316 causal, 6.554 -> 6.227, 21.412 -> 21.351 at those shapes (0.3-7.2 %
#: faster; the model had predicted 13-18 %). Above 128 the shared memory (rows of 2 D16 parts)
#: holds 80 x 32 at most.
DEFAULT_TILES = {64: Tiling(128, 32), 128: Tiling(128, 32, warp_rows=16), 256: Tiling(80, 32)}


def default_tiling(d: int, n_q: int, n_k: int, dropout: bool = False) -> Tiling:
    """The tiling "fa2_fp16x3" runs when given none, cut to short sequences (above d = 64 with
    16-row warps: ``warp_rows``, or an odd multiple of 16 rows)."""
    t = next(v for dmax, v in sorted(DEFAULT_TILES.items()) if d <= dmax or dmax == 256)
    t = t.fitted("flash_forward_half", n_q, n_k, 16 if dropout else 1)
    if d > 64 and t.rows_per_warp("flash_forward_half") > 16:
        t = Tiling(t.Br - 16, t.Bc)
    return t


#: The backward's default (Br, Bc) by head dim (a warp per 16 keys of Bc), the fastest timed
#: on an H100 (2026-12-06, tools/fp16x3_backward.py: results/h100/tuning/
#: fp16x3_backward_2026-12-06.log): d = 64 64 x 128 (32 x 64 3 % slower, 32 x 128 8 %), d = 128
#: 32 x 128 (16 x 128 7 % slower); above 128 the shared memory (rows of 2 D16 parts) allows
#: 16 x 64 at most (206 KB at d = 256), not timed.
BACKWARD_TILES = {64: (64, 128), 128: (32, 128), 256: (16, 64)}


def backward_default_tiling(d: int, n_q: int | None, n_k: int | None, dropout: bool = False,
                            block_size: tuple[int, int] | None = None) -> Tiling:
    """The tiling the backward on fp16 parts runs when given none, cut to short sequences, and
    with a block mask's ``block_size`` to sides that divide the blocks'."""
    br, bc = next(v for dmax, v in sorted(BACKWARD_TILES.items()) if d <= dmax or dmax == 256)
    t = Tiling(br, bc).fitted("flash_backward_half", n_q, n_k, 16 if dropout else 1)
    if block_size is not None and not t.suits_blocks(block_size):
        t = Tiling(math.gcd(t.Br, block_size[0]), math.gcd(t.Bc, block_size[1]))
    return t


def parts_width(d: int) -> int:
    """Columns of a row of the fp16 parts at head dim d: 2 D16 (D16 = d rounded up to the
    fp16 mma's k; hi parts, zeros to D16, lo parts, zeros to D16)."""
    return 2 * (-(-d // HALF_K) * HALF_K)


def backward_smem_terms(tiling: Tiling, d: int, split: bool = True) -> dict[str, int]:
    """16-bit elements of each shared-memory buffer of ``flash_backward_half`` at head dim d, in
    allocation order: in its fp32 mode (``split``) the tiles' rows are ``parts_width(d)`` wide
    (hi and lo parts) and dS^T holds both parts (lo after hi); else the fp16 kernel's."""
    if not split:
        return tiling.smem_terms("flash_backward_half", d)
    terms = dict(tiling.smem_terms("flash_backward_half", parts_width(d)))
    terms["dS"] *= 2
    return terms


def backward_smem_bytes(tiling: Tiling, d: int) -> int:
    """Dynamic shared memory (bytes) of the backward on fp16 parts at head dim d."""
    return 2 * sum(backward_smem_terms(tiling, d).values())


def prep_launch(simulated: bool) -> tuple[int, int]:
    """(threads a block, blocks a head of split_half) of the preparing kernels: 256 and 8 on a
    GPU; one warp and one block under Numba's CUDA simulator (a Python thread a CUDA thread)."""
    return (32, 1) if simulated else (256, 8)


def split_threads(d: int, threads: int) -> int:
    """Threads a block of split_half at head dim d, where ``prep_launch`` gives ``threads``:
    whole rows of D16 columns (a thread a column), as many as fit (at least one)."""
    d16 = parts_width(d) // 2
    return d16 * max(1, threads // d16)


def amax_wavefronts(threads: int) -> int:
    """Shared-memory wavefronts of one head_amax block of ``threads`` threads (a power of two;
    kernels/split_half.py, v4): every warp stores its threads' maxima, then each step of the
    tree halves the active threads, whose warps load two words and store one each, and thread 0
    loads the block's maximum (a wavefront a warp instruction: consecutive words)."""
    steps, half = 0, threads // 2
    while half:
        steps += 3 * ceil_div(half, WARP)
        half //= 2
    return ceil_div(threads, WARP) + steps + 1


#: Depth of ``gpu_launches`` contexts open (0: the launches follow the process, ``cuda_simulated``).
_AS_ON_GPU = [0]


def cuda_simulated() -> bool:
    """Whether this process runs kernels under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM``,
    read as numba reads it), whose launches numba_flash makes smaller (``prep_launch``) -- and
    the model counts them so, but inside ``gpu_launches``."""
    if _AS_ON_GPU[0]:
        return False
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0").strip() not in ("", "0")


@contextmanager
def gpu_launches():
    """Within: plans take a GPU's launches of the preparing kernels (``prep_launch(False)``)
    even in a process that runs the CUDA simulator -- for predictions of what a GPU measures
    (a CPU re-prediction of committed counters), where the simulator's smaller launches
    (``count_traffic`` against ``predict`` under the simulator) do not apply."""
    _AS_ON_GPU[0] += 1
    try:
        yield
    finally:
        _AS_ON_GPU[0] -= 1


def _renamed(counts, names: dict) -> dict:
    return {names.get(t, t): n for t, n in counts.items()}


def _prep_phases(w: Workload, heads: dict, maxima: str, names: tuple[str, str]) -> tuple:
    """(head maxima launch, split launch, parts written) over the heads of ``heads`` ({tensor:
    elements}, in the launches' order of heads: q's (or dO's), then k's and v's), their maxima
    tensor ``maxima``, the parts tensors ``PARTS`` names (or "dO parts"); ``names``: the two
    launches' names."""
    threads, split_blocks = prep_launch(cuda_simulated())
    split_block = split_threads(w.d, threads)
    count = sum(w.BH if name in ("Q", "dO") else w.BH_kv for name in heads)
    elements = sum(heads.values())
    parts = {PARTS.get(name, f"{name} parts"): n // w.d * w.D_parts for name, n in heads.items()}
    amax = phase(names[0], None, bh=1, hbm_reads=dict(heads),
                 hbm_writes={maxima: count * GX}, other_flops=AMAX_FLOPS * elements,
                 units_per_head=count, blocks_per_unit=GX, code=("head_amax", ""),
                 lsu_wavefronts=count * GX * amax_wavefronts(threads))
    split = phase(names[1], None, bh=1,
                  hbm_reads={**heads, maxima: count * split_blocks * split_block * GX},
                  hbm_writes=parts, other_flops=SPLIT_FLOPS * elements, units_per_head=count,
                  blocks_per_unit=split_blocks, code=("split_half", ""),
                  broadcast={maxima: split_block})
    return amax, split, parts


def flash_forward_fp16x3(w: Workload, t: Tiling) -> Plan:
    """The three launches of the module docstring; the forward's tiling ``t`` is of rows of
    ``D_parts`` fp16 elements (``default_tiling`` when predict is given none)."""
    from .flash import _variant, flash_forward_half, flash_forward_v2

    if w.dtype_bytes != 4:
        raise ValueError(f"flash_forward_fp16x3 splits fp32 inputs: dtype_bytes must be 4, got "
                         f"{w.dtype_bytes} (fp16 / bf16 inputs run on flash_forward_half)")
    amax, split, parts = _prep_phases(w, _inputs(w), MAXIMA, PREP_NAMES)

    wide = dataclasses.replace(w, d=w.D_parts, dtype_bytes=2)
    half = flash_forward_half(wide, t).phases[0]
    nominal = flash_forward_v2(w, t).phases[0]
    reads = _renamed(half.hbm_reads, PARTS)
    block_threads = t.threads_for("flash_forward_half")
    reads[MAXIMA] = t.Tr(w.N_q) * w.BH * block_threads * 3 * GX
    writes = dict(half.hbm_writes)
    writes["O"] = writes["O"] // w.D_parts * w.d         # fp32 O, d wide
    variant = "+".join(v for v in (_variant(w), VARIANT) if v)
    # (unit_reread_elements in 4-byte elements, which the L2 model charges: the K and V parts
    # of a head are 2 N_k D_parts 2-byte elements)
    forward = dataclasses.replace(
        half, name="forward (FA2 order, three fp16 products)", code=(half.kernel, variant),
        unit_reread_elements=half.unit_reread_elements // 2,
        hbm_reads=reads, hbm_writes=writes, sram_reads=_renamed(half.sram_reads, PARTS),
        sram_writes=_renamed(half.sram_writes, PARTS), matmul_flops=nominal.matmul_flops,
        other_flops=nominal.other_flops, broadcast={MAXIMA: block_threads})
    workspace = {"L": w.tensor_elements("L"), MAXIMA: w.tensor_elements(MAXIMA), **parts}
    return Plan((amax, split, forward), workspace=workspace)


def _inputs(w: Workload) -> dict:
    return {"Q": w.BH * w.N_q * w.d, "K": w.BH_kv * w.N_k * w.d, "V": w.BH_kv * w.N_k * w.d}


def flash_backward_fp16x3(w: Workload, t: Tiling) -> Plan:
    """numba_flash's "fa2_fp16x3" backward (``numba_flash.fp16x3.backward_launches``), on fp32
    inputs and tiling ``t`` of its own (``backward_default_tiling`` when predict is given none):

    1-2. the heads' maxima and fp16 parts of q, k, v, as the forward's launches 1 and 2;
    3-4. the same of dO (its B*H heads alone): "dO maxima", "dO parts";
    5. D = rowsum(dO * O) with dQ zeroed (fp32, as ``flash_backward``'s preprocess);
    6. the backward (``flash_backward_half`` compiled in its fp32 mode) on the parts: to HBM and
       SRAM the fp16 kernel on a workload of rows of ``D_parts`` fp16 elements
       (``simulator.flash.flash_backward_half``'s main launch), but dQ summed by fp32 atomics
       into dQ itself and dK, dV stored in fp32, each d wide; dS^T's SRAM holds both parts (its
       stores and reads counted twice); every thread of a block reads the 3 GX maxima of its
       q, k and v heads and the GX of its dO head once for each query head of its group, in
       blocks that visit a row block.
    FLOPs: the attention backward's as ``flash_backward`` counts them (the nominal ones), plus
    the preparing kernels' 1 and 2 an element. Workspace: the maxima, the parts and D."""
    from .flash import _grid, _variant, flash_backward, flash_backward_half

    if w.dtype_bytes != 4:
        raise ValueError(f"flash_backward_fp16x3 splits fp32 inputs: dtype_bytes must be 4, got "
                         f"{w.dtype_bytes} (fp16 / bf16 inputs run on flash_backward_half)")
    amax, split, parts = _prep_phases(w, _inputs(w), MAXIMA, PREP_NAMES)
    do_amax, do_split, do_parts = _prep_phases(w, {"dO": w.BH * w.N_q * w.d}, DO_MAXIMA,
                                               ("dO maxima", "split dO into fp16 parts"))
    pre, nominal = flash_backward(w, t).phases

    wide = dataclasses.replace(w, d=w.D_parts, dtype_bytes=2)
    half = flash_backward_half(wide, t).phases[1]
    names = {**PARTS, "dO": DO_PARTS, "dQ_accum": "dQ"}

    def narrow(counts: dict) -> dict:      # fp32 dQ, dK, dV: d wide, not D_parts
        return {name: n // w.D_parts * w.d if name in ("dQ", "dK", "dV") else n
                for name, n in _renamed(counts, names).items()}

    g = _grid(w, t)
    calls = w.BH * int((g.na > 0).sum())          # head_factors: a query head, a busy block
    block_threads = t.threads_for("flash_backward_half")
    reads = narrow(half.hbm_reads)
    reads[MAXIMA] = calls * block_threads * 3 * GX
    reads[DO_MAXIMA] = calls * block_threads * GX
    sram_reads, sram_writes = (_renamed(x, names) for x in (half.sram_reads, half.sram_writes))
    for counts in (sram_reads, sram_writes):      # dS^T's two parts (none where nothing is seen)
        counts["dS"] = 2 * counts.get("dS", 0)
    variant = "+".join(v for v in (_variant(w), VARIANT) if v)
    backward = dataclasses.replace(
        half, name="main: dK, dV, dQ atomics (three fp16 products)", code=(half.kernel, variant),
        unit_reread_elements=half.unit_reread_elements // 2, hbm_reads=reads,
        hbm_writes=narrow(half.hbm_writes), sram_reads=sram_reads, sram_writes=sram_writes,
        matmul_flops=nominal.matmul_flops, other_flops=nominal.other_flops,
        broadcast={MAXIMA: block_threads, DO_MAXIMA: block_threads})
    workspace = {MAXIMA: w.tensor_elements(MAXIMA), **parts, DO_MAXIMA: w.BH * GX, **do_parts,
                 "D": w.tensor_elements("D")}
    return Plan((amax, split, do_amax, do_split, pre, backward), workspace=workspace)
