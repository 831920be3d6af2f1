"""A hardware cost model of attention: exact HBM traffic of the numba_flash kernels, a model of
their shared-memory traffic, FLOPs, workspace, roofline time, an L2 model, an occupancy model
over the kernels' ptxas resources, and the paper's closed forms.  Pure Python and NumPy (no
numba); see docs/simulator.md."""
from . import hardware, occupancy
from .closed_forms import (
    HbmAccesses,
    block_sparse_backward_accesses,
    block_sparse_forward_accesses,
    flash_backward_accesses,
    flash_forward_v1_accesses,
    flash_forward_v2_accesses,
    proposition3_lower_bound,
    proposition4_flash_forward,
    standard_backward_accesses,
    standard_forward_accesses,
    theorem2_flash_forward,
    theorem2_standard_forward,
    theorem5_flash_backward,
)
from .hardware import Hardware
from .l2 import L2Phase, L2Traffic, concurrent_blocks, l2_traffic
from .predict import (ALGORITHMS, BAND_ALGORITHMS, default_tiling, hbm_traffic, paper_tiling, predict,
                      predict_dram)
from .report import TensorTraffic, TrafficReport
from .tiling import ModelTiling, Tiling
from .workload import Workload

__all__ = [
    "ALGORITHMS", "BAND_ALGORITHMS", "Hardware", "HbmAccesses", "L2Phase", "L2Traffic",
    "ModelTiling", "TensorTraffic", "Tiling", "TrafficReport", "Workload",
    "block_sparse_backward_accesses", "block_sparse_forward_accesses", "concurrent_blocks",
    "default_tiling", "flash_backward_accesses", "flash_forward_v1_accesses",
    "flash_forward_v2_accesses", "hardware", "hbm_traffic", "l2_traffic", "occupancy",
    "paper_tiling", "predict", "predict_dram", "proposition3_lower_bound", "proposition4_flash_forward",
    "standard_backward_accesses", "standard_forward_accesses", "theorem2_flash_forward",
    "theorem2_standard_forward", "theorem5_flash_backward",
]
