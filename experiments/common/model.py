"""The one place the experiments touch the simulator's API (so a rename there is a one-line
change here): predictions for a case, hardware specs, and Theorem 2 / Proposition 3.

Tilings: a case with a tiling is predicted with it.  Without one, ``kernels`` (the default)
predicts the tiling our kernels launch with when given none -- per call, the smallest of
``Tiling.kernel_default`` over the kernels the call launches, as ``numba_flash`` chooses it --
so predictions line up with measurements; ``paper`` leaves the choice to the simulator (the
paper's Bc = ceil(M/4d), Br = min(Bc, d) for the GPU's shared memory), for model-only rows
such as fp16.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.tiling import FORWARD_KERNELS

from .cases import DTYPE_BYTES, Case

#: The GPU we measure on (datasheet values with our measured bandwidth and fp32 peak), and the
#: paper's.
MEASURED_GPU = "H200_MEASURED"
PAPER_GPU = "A100_40GB"
#: Kernels each simulator algorithm launches (their shared memory decides the default tiling).
KERNELS_OF = {
    "standard_forward": ("standard_matmul",),
    "standard_backward": ("standard_matmul",),
    "flash_forward_v1": ("flash_forward_v1",),
    "flash_forward_v2": ("flash_forward_v2",),
    "flash_forward_tc": ("flash_forward_tc",),
    "flash_forward_half": ("flash_forward_half",),
    "flash_backward": ("flash_backward",),
    "flash_backward_tc": ("flash_backward_tc",),
    "flash_backward_half": ("flash_backward_half",),
    "flash_backward_deterministic": ("flash_backward", "flash_backward_dq"),
}
#: The Tiling kernel each method's forward launches (a flash method's forward algorithm has its
#: kernel's name).
FORWARD_KERNEL = {"standard": "standard_matmul", **FORWARD_KERNELS}


@dataclass(frozen=True)
class Prediction:
    """The simulator's prediction for all calls of a case (bytes, FLOPs, seconds)."""

    read_bytes: float        # SM <-> L2 bytes (the level model's; else the tiled count)
    write_bytes: float
    dram_bytes: float        # DRAM reads + writes
    flops: float
    time_s: float            # the runtime model's time (else the roofline)

    @property
    def total_bytes(self) -> float:
        return self.read_bytes + self.write_bytes


def hardware(name: str = MEASURED_GPU):
    from simulator.hardware import by_name

    return by_name(name)


def workload(case: Case, dtype_bytes: int | None = None):
    """The case's Workload, of ``dtype_bytes`` elements (None: its dtype's); its ``window`` and
    ``kv_heads`` are passed only when set."""
    from simulator import Workload

    dtype_bytes = dtype_bytes or DTYPE_BYTES[case.dtype]
    band = {name: value for name, value in (("window", case.window), ("kv_heads", case.kv_heads))
            if value is not None}
    return Workload(B=case.B, H=case.H, N_q=case.N, N_k=case.N, d=case.d, dtype_bytes=dtype_bytes,
                    causal=case.causal, **band)


def kernel_tiling(algorithm: str, d: int, n: int):
    """The tiling numba_flash launches ``algorithm``'s kernels with when given none, for
    sequences of ``n`` queries and keys (the defaults are cut to short sequences)."""
    from simulator.tiling import Tiling

    return min((Tiling.kernel_default(k, d, n_q=n, n_k=n) for k in KERNELS_OF[algorithm]),
               key=lambda t: t.Br * t.Bc)


def effective_tiling(case: Case):
    """The tiling the case's forward kernel runs with."""
    return case.tiling_object() or kernel_tiling(case.simulator_algorithms()[0], case.d, case.N)


def reports(case: Case, dtype_bytes: int | None = None, gpu: str = MEASURED_GPU, tiling: str = "kernels") -> list:
    """``simulator.predict``'s report for each of the case's calls."""
    import simulator

    def chosen(algorithm):
        if case.tiling is not None:
            return case.tiling_object()
        return kernel_tiling(algorithm, case.d, case.N) if tiling == "kernels" else None

    return [simulator.predict(a, workload(case, dtype_bytes), tiling=chosen(a), hardware=hardware(gpu))
            for a in case.simulator_algorithms()]


def predict_case(case: Case, dtype_bytes: int | None = None, gpu: str = MEASURED_GPU, tiling: str = "kernels") -> Prediction:
    """Sum of the predictions of the case's calls (forward, and backward for fwd_bwd): the SMs'
    global-memory bytes and DRAM bytes as the level model has them (``simulator.levels``), and
    its time; where the model lacks a kernel's resources or the GPU's rates (NaN), the tiled
    count, the L2 model's DRAM bytes and the roofline."""
    parts = reports(case, dtype_bytes, gpu, tiling)
    total = parts[0]
    for part in parts[1:]:
        total = total + part

    def level(value, fallback):
        return float(value) if value is not None and math.isfinite(value) else float(fallback)

    return Prediction(read_bytes=level(total.sm_l2_read_bytes, total.hbm_read_bytes),
                      write_bytes=level(total.sm_l2_write_bytes, total.hbm_write_bytes),
                      dram_bytes=level(total.dram_read_bytes + total.dram_write_bytes,
                                       total.l2.dram_bytes),
                      flops=float(total.flops),
                      time_s=level(total.time_s, total.roofline_seconds))


def touched_tensors(case: Case) -> list[list[str]]:
    """For each of the case's calls, the HBM tensors it touches (reads or writes)."""
    return [sorted(name for name, t in r.hbm.items() if t.reads or t.writes) for r in reports(case)]


def tensor_bytes(case: Case, name: str, dtype_bytes: int | None = None) -> int:
    w = workload(case, dtype_bytes)
    return w.tensor_elements(name) * w.dtype_bytes


def l2_bytes(gpu: str = MEASURED_GPU) -> float:
    return float(hardware(gpu).l2_bytes)


def paper_tiling(sram_elements: int, d: int) -> tuple[int, int]:
    """Algorithm 1's (Br, Bc) for an SRAM of M elements."""
    import simulator

    t = simulator.paper_tiling(sram_elements, d)
    return (t.Br, t.Bc)


# ---- Theorem 2 and Proposition 3 (bytes over all B*H, with our loops' constants) ------------
def theorem2_bytes(case: Case, M: int) -> float:
    """Theorem 2's leading-order count for the case's forward pass."""
    from simulator import closed_forms

    w = workload(case)
    if case.method == "standard":
        return float(closed_forms.theorem2_standard_forward(w, effective_tiling(case)).bytes)
    return float(closed_forms.theorem2_flash_forward(w, M, case.simulator_algorithms()[0]).bytes)


def proposition3_bytes(case: Case, M: int) -> float:
    """Proposition 3: accesses no exact attention algorithm with M elements of SRAM can beat."""
    from simulator import closed_forms

    return float(closed_forms.proposition3_lower_bound(workload(case), M).bytes)
