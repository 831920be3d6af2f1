"""The one place the experiments touch the simulator's API (so a rename there is a one-line
change here): predictions for a case, hardware specs, and Theorem 2 / Propositions 3 and 4.

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
#: Kernels each simulator algorithm launches (their shared memory decides the default tiling;
#: the deterministic backward's recomputed FFMA forward is left out: it has its own tiling,
#: ``simulator.flash.recompute_tiling``).
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


#: The Hardware each GPU a measurement names (CUDA's device name) is predicted as: our H200 with
#: its measured bandwidth and fp32 peak; an H100 by its datasheet (L2 50 MB, 3.35 TB/s), each
#: timed at its own calibrate rates (simulator/rates_h200.csv, rates_h100.csv:
#: ``simulator.runtime.RATES_OF``).
GPU_OF_DEVICE = {"H200": MEASURED_GPU, "H100": "H100_SXM"}


def gpu_of_device(device: str) -> str:
    """The Hardware name a measurement's ``device`` is predicted as (``GPU_OF_DEVICE``, by the
    model it names); ValueError for a GPU the model has no datasheet of."""
    for model_name, gpu in GPU_OF_DEVICE.items():
        if model_name in device.upper():
            return gpu
    raise ValueError(f"no Hardware for device {device!r}: known {sorted(GPU_OF_DEVICE)}")


def card(device: str) -> str:
    """The Hardware a run on ``device`` ("gpu" or "cpu") predicts for: this GPU's where the
    model has its datasheet (``gpu_of_device``), else (a CPU run, another GPU) the H200's."""
    from .metadata import device_name

    if device != "gpu":
        return MEASURED_GPU
    try:
        name = device_name(device)
    except AttributeError:      # the CUDA simulator's device, which has no name: a listing run
        return MEASURED_GPU     # (``python -m experiments kernels``) on a machine without a GPU
    return card_of({"device": name})


def card_of(row: dict) -> str:
    """The Hardware a GPU run's CSV row is predicted for when predicted again: that of the GPU
    that measured it (its ``measured_device``, else its ``device``), as ``card`` would have
    chosen it on that GPU."""
    device = row.get("measured_device") or row.get("device") or ""
    try:
        return gpu_of_device(device)
    except ValueError:
        return MEASURED_GPU


def card_label(gpu: str) -> str:
    """A Hardware name as a figure's legend says it: "H200", "H100", "A100"."""
    return next((model for model, name in GPU_OF_DEVICE.items() if name == gpu), gpu.split("_")[0])


def hardware(name: str = MEASURED_GPU):
    from simulator.hardware import by_name

    return by_name(name)


def workload(case: Case, dtype_bytes: int | None = None):
    """The case's Workload, of ``dtype_bytes`` elements (None: its dtype's); its ``window``,
    ``kv_heads`` and ``block_mask`` / ``block_size`` are passed only when set."""
    from simulator import Workload

    dtype_bytes = dtype_bytes or DTYPE_BYTES[case.dtype]
    band = {name: value for name, value in (("window", case.window), ("kv_heads", case.kv_heads),
                                            ("block_mask", case.block_mask), ("block_size", case.block_size))
            if value is not None}
    return Workload(B=case.B, H=case.H, N_q=case.N, N_k=case.N, d=case.d, dtype_bytes=dtype_bytes,
                    causal=case.causal, **band)


def call_workloads(case: Case, dtype_bytes: int | None = None) -> list:
    """The Workload of each call the case's API call makes: its own, or with ``padding`` one
    per batch entry (B = 1 on the entry's kept keys: ``numba_flash.padding`` runs them so)."""
    from dataclasses import replace

    whole = workload(case, dtype_bytes)
    if not case.padding:
        return [whole]
    return [replace(whole, B=1, N_k=int(n)) for n in case.key_lengths()]


def kernel_tiling(algorithm: str, d: int, n: int, block_size: tuple[int, int] | None = None):
    """The tiling numba_flash launches ``algorithm``'s kernels with when given none, for
    sequences of ``n`` queries and keys (the defaults are cut to short sequences, and with a
    block mask's ``block_size`` to nest in its blocks)."""
    from simulator.tiling import Tiling

    if algorithm == "flash_forward_fp16x3":     # its own defaults (numba_flash.api takes them)
        from simulator.fp16x3 import default_tiling

        return default_tiling(d, n, n)
    if algorithm == "flash_backward_fp16x3":
        from simulator.fp16x3 import backward_default_tiling

        return backward_default_tiling(d, n, n, block_size=block_size)
    return min((Tiling.kernel_default(k, d, n_q=n, n_k=n, block_size=block_size)
                for k in KERNELS_OF[algorithm]), key=lambda t: t.Br * t.Bc)


def effective_tiling(case: Case):
    """The tiling the case's forward kernel runs with."""
    return case.tiling_object() or kernel_tiling(case.simulator_algorithms()[0], case.d, case.N,
                                                 case.block_size)


def reports(case: Case, dtype_bytes: int | None = None, gpu: str = MEASURED_GPU, tiling: str = "kernels") -> list:
    """``simulator.predict``'s report for each of the case's calls (with ``padding``, each
    batch entry's: ``call_workloads``), as they run on a GPU (``simulator.fp16x3.gpu_launches``:
    also in a process under the CUDA simulator, the CPU mode's)."""
    import simulator

    return _each_call(case, dtype_bytes, gpu, tiling, simulator.predict)


def _each_call(case: Case, dtype_bytes: int | None, gpu: str, tiling: str, predictor) -> list:
    """``predictor(algorithm, workload, tiling=, hardware=)`` of each of the case's calls, as
    ``reports`` predicts them."""
    from simulator.fp16x3 import gpu_launches

    def chosen(algorithm):
        if case.tiling is not None:
            return case.tiling_object()
        return kernel_tiling(algorithm, case.d, case.N, case.block_size) if tiling == "kernels" else None

    with gpu_launches():
        return [predictor(a, w, tiling=chosen(a), hardware=hardware(gpu))
                for w in call_workloads(case, dtype_bytes) for a in case.simulator_algorithms()]


def predict_case(case: Case, dtype_bytes: int | None = None, gpu: str = MEASURED_GPU, tiling: str = "kernels") -> Prediction:
    """Sum of the predictions of the case's calls (forward, and backward for fwd_bwd; with
    padding, each entry's): the SMs' global-memory bytes and DRAM bytes as the level model has
    them (``simulator.levels``), and its time; where the model lacks a kernel's resources or
    the GPU's rates (NaN), the tiled count, the L2 model's DRAM bytes and the roofline (per
    entry)."""
    return summed(case, reports(case, dtype_bytes, gpu, tiling))


def summed(case: Case, parts: list) -> Prediction:
    """``predict_case`` of the case's call reports ``parts`` (``reports``' list)."""
    per_call = len(case.simulator_algorithms())   # reports of one workload (one entry's calls)
    entries = [parts[i:i + per_call] for i in range(0, len(parts), per_call)]

    def level(value, fallback):
        return float(value) if value is not None and math.isfinite(value) else float(fallback)

    def entry_prediction(calls) -> Prediction:
        total = calls[0]
        for part in calls[1:]:
            total = total + part
        return Prediction(read_bytes=level(total.sm_l2_read_bytes, total.hbm_read_bytes),
                          write_bytes=level(total.sm_l2_write_bytes, total.hbm_write_bytes),
                          dram_bytes=level(total.dram_read_bytes + total.dram_write_bytes,
                                           total.l2.dram_bytes),
                          flops=float(total.flops),
                          time_s=level(total.time_s, total.roofline_seconds))

    each = [entry_prediction(calls) for calls in entries]
    return Prediction(*(sum(getattr(p, f) for p in each)
                        for f in ("read_bytes", "write_bytes", "dram_bytes", "flops", "time_s")))


@dataclass(frozen=True)
class Predicted:
    """A case's prediction (``predict_case``), its calls' reports, and what its numbers are:
    the level model's SM<->L2 bytes and runtime model's time where finite for every call, else
    the tiled count and the roofline (``bytes_by``, ``time_by`` say which), on Hardware ``gpu``."""

    prediction: Prediction
    reports: list
    bytes_by: str
    time_by: str
    gpu: str

    def read_bytes_of(self, names) -> float:
        """Bytes the tiled count reads from the tensors ``names`` (e.g. K and V), over all calls."""
        return float(sum(r.hbm[n].reads * r.element_bytes(n) for r in self.reports for n in names if n in r.hbm))

    @property
    def tiled_elements(self) -> int:
        """Elements read and written by the tiled count (every tensor, every call)."""
        return sum(t.reads + t.writes for r in self.reports for t in r.hbm.values())

    def columns(self) -> dict:
        """The CSV's predicted columns (``predicted_kv_read``: the tiled count's K and V reads)."""
        p = self.prediction
        return dict(predicted=p.total_bytes, predicted_read=p.read_bytes, predicted_write=p.write_bytes,
                    predicted_kv_read=self.read_bytes_of(("K", "V")), dram_predicted=p.dram_bytes,
                    predicted_time_ms=p.time_s * 1e3, predicted_bytes_by=self.bytes_by,
                    predicted_time_by=self.time_by, predicted_for=self.gpu)


def predicted_or_note(case: Case, gpu: str = MEASURED_GPU) -> Predicted | str:
    """``Predicted`` for the case on Hardware ``gpu``, or the note saying why the model has none."""
    from .measure import failure_note

    try:
        parts = reports(case, gpu=gpu)
        prediction = summed(case, parts)
    except Exception as exc:   # e.g. a simulator without windows / kv_heads / block masks yet
        return f"not predicted: {failure_note(exc).removeprefix('failed: ')}"

    def finite(value):
        return value is not None and math.isfinite(value)

    levels = all(finite(r.sm_l2_read_bytes) and finite(r.sm_l2_write_bytes) for r in parts)
    runtime = all(finite(r.time_s) for r in parts)
    time_by = "runtime model" if runtime else "roofline (runtime model NaN)"
    if case.dropout_p:
        time_by += " of the kernels without dropout (its Philox work is not modelled)"
    if case.padding:
        time_by += "; the per-entry gathers and scatters not modelled"
    return Predicted(prediction, parts,
                     "levels (SM<->L2 sectors)" if levels else "tiled count (levels NaN)", time_by, gpu)


def touched_tensors(case: Case) -> list[list[str]]:
    """For each of the case's calls, the HBM tensors it touches (reads or writes)."""
    import simulator

    return [sorted(name for name, t in hbm.items() if t.reads or t.writes)
            for hbm in _each_call(case, None, MEASURED_GPU, "kernels", simulator.hbm_traffic)]


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


def proposition4_bytes(case: Case, M: int) -> float:
    """Proposition 4's Theta(N d + s N^2 d^2 / M) for the case's forward pass (s its block
    mask's kept fraction, 1 without one), with our FA2-order loop's constants."""
    from simulator import closed_forms

    return float(closed_forms.proposition4_flash_forward(workload(case), M).bytes)


def block_sparse_form_elements(case: Case) -> float:
    """The closed forms' exact count (elements) of a block-sparse case's calls, each at the
    tiling it runs with: ``block_sparse_forward_accesses`` (+ ``block_sparse_backward_accesses``
    for fwd_bwd; the tensor-core backward's form, dQ summed in place)."""
    from simulator import closed_forms

    w = workload(case)
    forms = (closed_forms.block_sparse_forward_accesses, closed_forms.block_sparse_backward_accesses)
    tilings = [case.tiling_object() or kernel_tiling(a, case.d, case.N, case.block_size)
               for a in case.simulator_algorithms()]
    return float(sum(form(w, t).elements for form, t in zip(forms, tilings)))


def proposition3_bytes(case: Case, M: int) -> float:
    """Proposition 3: accesses no exact attention algorithm with M elements of SRAM can beat."""
    from simulator import closed_forms

    return float(closed_forms.proposition3_lower_bound(workload(case), M).bytes)
