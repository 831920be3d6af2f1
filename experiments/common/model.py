"""The one place the experiments touch the simulator's API (so a rename there is a one-line
change here): predictions for a case, hardware specs, Theorem 2 / Proposition 3 closed forms,
the L2 model and the paper's published numbers."""
from __future__ import annotations

from dataclasses import dataclass

from .cases import Case

#: The GPU we measure on, and the one the paper measured on.
MEASURED_GPU = "H200"
PAPER_GPU = "A100_40GB"


@dataclass(frozen=True)
class Prediction:
    """The simulator's prediction for all calls of a case."""

    read_bytes: float
    write_bytes: float
    flops: float
    time_s: float   # roofline time on the chosen hardware

    @property
    def total_bytes(self) -> float:
        return self.read_bytes + self.write_bytes


def hardware(name: str = MEASURED_GPU):
    import simulator.hardware

    return getattr(simulator.hardware, name)


def workload(case: Case, dtype_bytes: int = 4):
    import simulator

    return simulator.Workload(B=case.B, H=case.H, N_q=case.N, N_k=case.N, d=case.d,
                              dtype_bytes=dtype_bytes, causal=case.causal)


def predict_case(case: Case, dtype_bytes: int = 4, gpu: str = MEASURED_GPU) -> Prediction:
    """Sum of ``simulator.predict`` over the case's calls (forward, and backward for fwd_bwd)."""
    import simulator

    reports = [simulator.predict(algorithm, workload(case, dtype_bytes), tiling=case.tiling_object(),
                                 hardware=hardware(gpu))
               for algorithm in case.simulator_algorithms()]
    return Prediction(read_bytes=float(sum(r.hbm_read_bytes for r in reports)),
                      write_bytes=float(sum(r.hbm_write_bytes for r in reports)),
                      flops=float(sum(r.flops for r in reports)),
                      time_s=float(sum(r.time_s for r in reports)))


# ---- tilings ----------------------------------------------------------------------------------
FORWARD_KERNEL = {"standard": "standard_matmul", "fa1": "flash_forward_v1", "fa2": "flash_forward_v2"}


def effective_tiling(case: Case):
    """The tiling the case's forward kernel runs with: its own, or the kernels' default."""
    from simulator.tiling import Tiling

    return case.tiling_object() or Tiling.kernel_default(FORWARD_KERNEL[case.method], case.d)


def paper_tiling(sram_elements: int, d: int):
    """Algorithm 1's block sizes for an SRAM of M elements."""
    from simulator.tiling import Tiling

    return Tiling.paper_default(sram_elements, d)


# ---- Theorem 2 and Proposition 3 (elements per batch-head) -----------------------------------
def theta_standard(N: int, d: int) -> float:
    from simulator import closed_forms

    return float(closed_forms.theta_standard(N, d))


def theta_flash(N: int, d: int, M: int) -> float:
    from simulator import closed_forms

    return float(closed_forms.theta_flash(N, d, M))


def lower_bound(N: int, d: int, M: int) -> float:
    from simulator import closed_forms

    return float(closed_forms.lower_bound(N, d, M))


# ---- L2 model and the paper's numbers ---------------------------------------------------------
def dram_bytes(case: Case, dtype_bytes: int = 4, gpu: str = MEASURED_GPU) -> float:
    """DRAM bytes the L2-aware model predicts for the case's calls (re-reads that hit in L2 are
    not DRAM traffic)."""
    import simulator.l2

    return float(sum(simulator.l2.dram_bytes(algorithm, workload(case, dtype_bytes), case.tiling_object(),
                                             hardware(gpu))
                     for algorithm in case.simulator_algorithms()))


def l2_bytes(gpu: str = MEASURED_GPU) -> float:
    return float(hardware(gpu).l2_bytes)


def paper_fig2_left() -> dict[tuple[str, str], float]:
    """The paper's Figure 2 (left) on the A100 (fp16): {(method, quantity): value} with method
    "standard"/"flash" and quantity "gflops", "hbm_gb", "runtime_ms"."""
    from simulator import paper

    return dict(paper.FIG2_LEFT)


def touched_tensors(case: Case) -> list[list[str]]:
    """For each of the case's calls, the names of the HBM tensors the model says it touches."""
    import simulator

    return [sorted(simulator.predict(algorithm, workload(case), tiling=case.tiling_object()).hbm)
            for algorithm in case.simulator_algorithms()]
