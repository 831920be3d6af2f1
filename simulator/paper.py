"""The FlashAttention paper's Figure 2 (left) next to our predictions.

GPT-2 medium attention on an A100: N = 1024, d = 64, 16 heads, batch 64, fp16, forward +
backward.  The paper reports GFLOPs, HBM reads + writes (GB) and runtime (ms) for standard
attention and FlashAttention without saying how it counted them.
"""
from __future__ import annotations

from dataclasses import dataclass

from .hardware import A100_40GB, Hardware
from .predict import predict
from .report import TrafficReport
from .workload import Workload

#: Figure 2 (left) of Dao et al. 2022: (GFLOPs, HBM R/W in GB, runtime in ms).
PAPER_FIG2_LEFT = {"standard": (66.6, 40.3, 41.7), "flashattention": (75.2, 4.4, 7.3)}

#: Forward + backward algorithms of each row; FlashAttention twice, in both forward orders
#: (the paper's Algorithm 1, and the FA2 order our default kernels use).
FIG2_METHODS = {
    "standard": ("standard", ("standard_forward", "standard_backward")),
    "flash (FA2 order)": ("flashattention", ("flash_forward_v2", "flash_backward")),
    "flash (Algorithm 1)": ("flashattention", ("flash_forward_v1", "flash_backward")),
}


def fig2_workload() -> Workload:
    """GPT-2 medium attention as in Figure 2: B=64, H=16, N=1024, d=64, fp16."""
    return Workload(B=64, H=16, N_q=1024, N_k=1024, d=64, dtype_bytes=2)


@dataclass(frozen=True)
class Fig2Row:
    """One method: our prediction (forward + backward) and the paper's number for it.
    GB = 1e9 bytes; GFLOPs = 1e9 FLOPs; runtime = our roofline time on the hardware."""

    method: str
    algorithms: tuple[str, str]
    Br: int
    Bc: int
    gflops: float
    matmul_gflops: float
    hbm_gb: float
    dram_gb: float
    roofline_ms: float
    extra_memory_gb: float
    paper_gflops: float
    paper_hbm_gb: float
    paper_runtime_ms: float


def _row(method: str, paper_key: str, algorithms: tuple[str, str], w: Workload,
         hardware: Hardware) -> Fig2Row:
    forward, backward = (predict(a, w, hardware=hardware) for a in algorithms)
    total: TrafficReport = forward + backward
    flops, hbm, ms = PAPER_FIG2_LEFT[paper_key]
    return Fig2Row(method, algorithms, forward.tiling.Br, forward.tiling.Bc,
                   total.flops / 1e9, total.matmul_flops / 1e9, total.hbm_bytes / 1e9,
                   total.l2.dram_bytes / 1e9, total.roofline_seconds * 1e3,
                   total.extra_memory_bytes / 1e9, flops, hbm, ms)


def fig2_left(hardware: Hardware = A100_40GB) -> list[Fig2Row]:
    """Our Figure 2 (left) on ``hardware``, default tilings (standard: the kernels' 64 x 64;
    flash: the paper's Bc = ceil(M/4d), Br = min(Bc, d) for M = smem_per_block / 2 elements)."""
    w = fig2_workload()
    return [_row(method, key, algorithms, w, hardware)
            for method, (key, algorithms) in FIG2_METHODS.items()]


def fig2_markdown(rows: list[Fig2Row]) -> str:
    """The rows as a Markdown table, ours next to the paper's."""
    lines = ["| method | Br x Bc | GFLOPs (matmul) | paper GFLOPs | HBM R/W GB | L2-model DRAM GB "
             "| paper HBM GB | roofline ms | paper ms | extra memory GB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.method} | {r.Br} x {r.Bc} | {r.gflops:.1f} ({r.matmul_gflops:.1f}) | "
                     f"{r.paper_gflops} | {r.hbm_gb:.2f} | {r.dram_gb:.2f} | {r.paper_hbm_gb} | "
                     f"{r.roofline_ms:.2f} | {r.paper_runtime_ms} | {r.extra_memory_gb:.2f} |")
    return "\n".join(lines)
