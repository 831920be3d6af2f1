"""``predict``: the traffic, FLOPs, memory and roofline time of one algorithm on one workload.

Counting conventions (all exact integers; HBM counts are docs/traffic-contract.md):
- HBM: elements each kernel loads from / stores to global memory, per tensor; an atomic add is
  one read and one write.
- SRAM (a model of the kernels' shared-memory use, not validated against hardware): every tile
  load stores its full zero-padded tile; every score tile written to shared memory stores
  Br x Bc; in every tile product each thread reads its operands once per inner (k) step -- see
  ``simulator.flash`` and ``simulator.standard.matmul_phase``.
- FLOPs: matmul = 2 per multiply-add of the products the kernels compute (standard: all of
  every matrix; flash: valid elements of active tiles); other = elementwise work, 1 FLOP per
  add, multiply, max, exp or division (constants in ``simulator.flash`` and
  ``simulator.standard``).
- Extra device memory: workspace beyond inputs and outputs.  Standard forward: S (P is an
  output); standard backward: dP, dS, D; FA2 forward: L (kept for the backward, also when not
  returned); Algorithm 1: l, m, L; flash backward: D.
- Roofline: ``Hardware.roofline_seconds(hbm bytes, all FLOPs, workload.precision)``.
- L2: ``simulator.l2`` applied to the algorithm's kernel launches.
- Every memory level as the GPU's counters see it, and the time: ``simulator.levels``
  (``report.levels``; ``report.sm_l2_read_bytes``, ``dram_read_bytes``, ..., ``time_s``;
  each launch's in ``report.launch_levels``).
"""
from __future__ import annotations

import dataclasses

from .flash import (flash_backward, flash_backward_deterministic, flash_backward_half,
                    flash_backward_tc, flash_forward_half, flash_forward_tc, flash_forward_v1, flash_forward_v2)
from .flash import _grid, _heaviest_first
from .fp16x3 import default_tiling as fp16x3_tiling
from .fp16x3 import backward_default_tiling as fp16x3_backward_tiling
from .fp16x3 import flash_backward_fp16x3, flash_forward_fp16x3
from .hardware import H200, Hardware
from .kv_split import auto_kv_split, backward_blocks_per_sm, checked_kv_split
from .l2 import L2Traffic, l2_traffic
from .levels import launch_levels, total
from .report import TensorTraffic, TrafficReport, ordered_tensors
from .standard import standard_backward, standard_forward
from .tiling import ModelTiling, Tiling
from .workload import Workload

#: algorithm name -> function (workload, tiling) -> Plan.
ALGORITHMS = {
    "standard_forward": standard_forward,
    "standard_backward": standard_backward,
    "flash_forward_v1": flash_forward_v1,
    "flash_forward_v2": flash_forward_v2,
    "flash_forward_tc": flash_forward_tc,
    "flash_forward_half": flash_forward_half,
    "flash_forward_fp16x3": flash_forward_fp16x3,
    "flash_backward": flash_backward,
    "flash_backward_deterministic": flash_backward_deterministic,
    "flash_backward_tc": flash_backward_tc,
    "flash_backward_half": flash_backward_half,
    "flash_backward_fp16x3": flash_backward_fp16x3,
}


#: The algorithms whose kernels take a band mask (a sliding window), grouped K/V heads and a
#: block mask (``Workload.window``, ``kv_heads``, ``block_mask``); ``predict`` refuses such
#: workloads elsewhere.
BAND_ALGORITHMS = ("flash_forward_tc", "flash_forward_half", "flash_backward_tc",
                   "flash_backward_half", "flash_forward_fp16x3", "flash_backward_fp16x3")


def paper_tiling(sram_elements: int, d: int) -> Tiling:
    """The paper's block sizes for an SRAM of ``sram_elements``: Bc = ceil(M/4d), Br = min(Bc, d)
    (``Tiling.paper_default``), as a ``ModelTiling`` when the kernels could not launch it."""
    paper = ModelTiling.paper_default(sram_elements, d)
    return ModelTiling.of(paper.Br, paper.Bc)


def default_tiling(algorithm: str, workload: Workload, hardware: Hardware) -> Tiling:
    """Flash algorithms: the paper's choice for M = hardware.smem_per_block / dtype_bytes
    elements, except on tensor cores (whose mma layout those sizes do not suit): the kernel's
    default (with a block mask, cut to nest in its blocks: ``Tiling.kernel_default``'s
    ``block_size``; "flash_forward_fp16x3": its own, ``simulator.fp16x3.default_tiling``, where
    no block mask cuts it).  Standard algorithms: what the kernels' matmul uses, Tiling(64, 64)."""
    if algorithm == "flash_backward_fp16x3":     # its own, as numba_flash takes it
        blocks = None if workload.block_mask is None else workload.block_size
        return fp16x3_backward_tiling(workload.d, workload.N_q, workload.N_k, block_size=blocks)
    if algorithm == "flash_forward_fp16x3" and workload.block_mask is None:
        return fp16x3_tiling(workload.d, workload.N_q, workload.N_k)
    if algorithm == "flash_forward_fp16x3":
        return Tiling.kernel_default("flash_forward_half", workload.D_parts, 2,
                                     hardware.smem_per_block, block_size=workload.block_size)
    if algorithm in BAND_ALGORITHMS:
        blocks = None if workload.block_mask is None else workload.block_size
        return Tiling.kernel_default(algorithm, workload.d, workload.dtype_bytes,
                                     hardware.smem_per_block, block_size=blocks)
    if algorithm.startswith("standard"):
        return Tiling.kernel_default("standard_matmul", workload.d, workload.dtype_bytes,
                                     hardware.smem_per_block)
    return paper_tiling(hardware.smem_per_block // workload.dtype_bytes, workload.d)


#: The backward algorithms that run a GQA / MQA workload split (``simulator.kv_split``).
SPLIT_ALGORITHMS = ("flash_backward_tc", "flash_backward_half")


def kv_split_of(algorithm: str, workload: Workload, tiling: Tiling, hardware: Hardware,
                kv_split: int | None = None) -> int:
    """How many ways the API splits each K/V head's query heads for ``algorithm`` on
    ``workload`` (``simulator.kv_split``): ``kv_split`` as given (a divisor of the group), or
    None: ``auto_kv_split`` on ``hardware``'s SMs; 1 for every other algorithm and without
    grouped K/V heads."""
    kv_split = checked_kv_split(kv_split, workload.group)
    if algorithm not in SPLIT_ALGORITHMS or workload.kv_heads is None:
        return 1
    if kv_split is not None:
        return kv_split
    per_sm = backward_blocks_per_sm(algorithm, tiling, workload.d, workload.causal, hardware)
    return auto_kv_split(_grid(workload, tiling), workload.B * workload.kv_heads, workload.group,
                         _heaviest_first(workload), hardware.sm_count, per_sm)


def split_workload(workload: Workload, s: int) -> Workload:
    """The workload the backward's kernels run split ``s`` ways: K/V heads x s."""
    if s == 1:
        return workload
    return dataclasses.replace(workload, kv_heads=workload.kv_heads * s)


def predict(algorithm: str, workload: Workload, tiling: Tiling | None = None,
            hardware: Hardware | None = None, kv_split: int | None = None) -> TrafficReport:
    """Predict ``algorithm`` (a key of ``ALGORITHMS``) on ``workload``.

    tiling: block sizes; None uses ``default_tiling``: for the flash algorithms the paper's
    ``Tiling.paper_default(M, d)`` with M = hardware.smem_per_block / workload.dtype_bytes
    elements, for the standard ones the kernels' Tiling(64, 64).
    hardware: default H200; it affects only the default tiling, the roofline and the L2 model.
    A workload with a window, grouped K/V heads or a block mask (``Workload.band_or_gqa``)
    runs only on ``BAND_ALGORITHMS``; ValueError for the others, and for a tiling whose tiles
    do not nest in the block mask's blocks.
    kv_split: the GQA / MQA backward's split (``kv_split_of``; None: the API's automatic
    choice): the kernels' traffic, FLOPs and time on K/V heads x kv_split; the repeat of K, V
    and the sums of the partial dK, dV (outside our kernels) are not counted, their copies are
    in ``workspace`` (K_split, V_split, dK_split, dV_split; so in ``extra_memory_bytes``).
    Conventions: module docstring.
    """
    hardware, tiling, split, run, plan = _planned(algorithm, workload, tiling, hardware, kv_split)
    workspace = dict(plan.workspace)
    if split > 1:
        for name in ("K_split", "V_split", "dK_split", "dV_split"):
            workspace[name] = run.BH_kv * run.N_k * run.d
    hbm, sram = _sum_levels(plan.phases, "hbm"), _sum_levels(plan.phases, "sram")
    matmul = sum(p.matmul_flops for p in plan.phases)
    other = sum(p.other_flops for p in plan.phases)
    report = TrafficReport(algorithm, workload.dtype_bytes, hbm, sram, matmul, other,
                           workspace, workload=workload, tiling=tiling,
                           hardware=hardware, phases=plan.phases)
    seconds = hardware.roofline_seconds(report.hbm_bytes, matmul + other, workload.precision)
    l2 = l2_traffic(plan.phases, run, tiling, hardware)
    per_launch = tuple(launch_levels(plan.phases, run, tiling, hardware, l2))
    return dataclasses.replace(report, roofline_seconds=seconds, l2=l2, levels=total(per_launch),
                               launch_levels=per_launch)


def predict_dram(algorithm: str, workload: Workload, tiling: Tiling | None = None,
                 hardware: Hardware | None = None) -> L2Traffic:
    """The L2 model's SM<->L2 and DRAM bytes for ``algorithm``: ``predict(...).l2``."""
    return predict(algorithm, workload, tiling, hardware).l2


def hbm_traffic(algorithm: str, workload: Workload, tiling: Tiling | None = None,
                hardware: Hardware | None = None, kv_split: int | None = None) -> dict[str, TensorTraffic]:
    """``predict(...).hbm`` alone (arguments and checks as ``predict``): each tensor's HBM
    reads and writes, without the L2 model, the levels and the time, which cost most of a
    prediction."""
    return _sum_levels(_planned(algorithm, workload, tiling, hardware, kv_split)[-1].phases, "hbm")


def _planned(algorithm: str, workload: Workload, tiling: Tiling | None, hardware: Hardware | None,
             kv_split: int | None):
    """``predict``'s checks, then (hardware, tiling, kv split, the workload its kernels run,
    the algorithm's plan)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: {sorted(ALGORITHMS)}")
    if not isinstance(workload, Workload):
        raise ValueError(f"workload must be a Workload, got {type(workload).__name__}")
    if workload.block_mask is not None and algorithm not in BAND_ALGORITHMS:
        raise ValueError(f"{algorithm} has no block-sparse kernel (workload block_mask of "
                         f"{workload.block_fraction:.0%} blocks kept, block_size="
                         f"{workload.block_size}); block-sparse attention runs on "
                         f"{', '.join(BAND_ALGORITHMS)} only (\"fa2\"): choose one of those or "
                         "block_mask=None")
    if workload.band_or_gqa and algorithm not in BAND_ALGORITHMS:
        raise ValueError(f"{algorithm} has no sliding window nor grouped K/V heads (workload "
                         f"window={workload.window}, kv_heads={workload.kv_heads}, H={workload.H}); "
                         f"those run on {', '.join(BAND_ALGORITHMS)} only")
    hardware = hardware or H200
    tiling = tiling or default_tiling(algorithm, workload, hardware)
    split = kv_split_of(algorithm, workload, tiling, hardware, kv_split)
    run = split_workload(workload, split)
    return hardware, tiling, split, run, ALGORITHMS[algorithm](run, tiling)


def _sum_levels(phases, level: str) -> dict[str, TensorTraffic]:
    reads, writes = {}, {}
    for p in phases:
        for name, n in getattr(p, f"{level}_reads").items():
            reads[name] = reads.get(name, 0) + n
        for name, n in getattr(p, f"{level}_writes").items():
            writes[name] = writes.get(name, 0) + n
    return {name: TensorTraffic(reads.get(name, 0), writes.get(name, 0))
            for name in ordered_tensors(set(reads) | set(writes))}
