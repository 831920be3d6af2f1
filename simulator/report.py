"""What a prediction (or a measurement) says: element traffic per tensor and memory level, FLOPs,
extra device memory, a roofline time and, for predictions, the L2 model's DRAM bytes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from .hardware import Hardware
    from .l2 import L2Traffic
    from .levels import Levels
    from .phases import Phase
    from .tiling import Tiling
    from .workload import Workload

#: Display order of tensors: the names of docs/traffic-contract.md.
TENSOR_ORDER = ("Q", "K", "V", "O", "L", "O (recomputed)", "L (recomputed)", "dO", "dQ", "dQ_accum", "dK",
                "dV", "S", "P", "dP", "dS", "D", "m", "l", "head maxima", "Q parts", "K parts",
                "V parts", "dO maxima", "dO parts")


#: Tensors the kernels keep in fp32 whatever the inputs' format: the softmax statistics (L, l,
#: m), D = rowsum(dO * O), the half backward's dQ accumulator and the deterministic backward's
#: recomputed O and L (its FFMA kernels widen every input). Their bytes are 4 an element in
#: every report; the others' the report's ``dtype_bytes``.
FP32_TENSORS = frozenset({"L", "l", "m", "D", "dQ_accum", "O (recomputed)", "L (recomputed)",
                          "head maxima", "dO maxima"})
#: fa2_fp16x3's fp16 parts of its fp32 q, k, v (and in its backward dO) (``simulator.fp16x3``):
#: 2 bytes an element, in global memory and in SRAM.
FP16_TENSORS = frozenset({"Q parts", "K parts", "V parts", "dO parts"})


def element_bytes(name: str, dtype_bytes: int) -> int:
    """Bytes of one element of tensor ``name`` in global memory: ``dtype_bytes``, but 4 for
    ``FP32_TENSORS``, 2 for ``FP16_TENSORS``."""
    return 4 if name in FP32_TENSORS else 2 if name in FP16_TENSORS else dtype_bytes


def ordered_tensors(names) -> list[str]:
    rank = {name: k for k, name in enumerate(TENSOR_ORDER)}
    return sorted(names, key=lambda n: (rank.get(n, len(rank)), n))


@dataclass(frozen=True)
class TensorTraffic:
    """Elements of one tensor read and written at one memory level."""

    reads: int = 0
    writes: int = 0

    def __add__(self, other: "TensorTraffic") -> "TensorTraffic":
        return TensorTraffic(self.reads + other.reads, self.writes + other.writes)


def _merge(a: Mapping[str, TensorTraffic], b: Mapping[str, TensorTraffic]) -> dict[str, TensorTraffic]:
    return {name: a.get(name, TensorTraffic()) + b.get(name, TensorTraffic())
            for name in ordered_tensors(set(a) | set(b))}


def _add_optional(a, b):
    return None if a is None or b is None else a + b


@dataclass(frozen=True)
class TrafficReport:
    """Traffic of one algorithm run (or of several, added with ``+``).

    hbm, sram: per tensor name, elements read and written at global ("hbm") and shared ("sram")
    memory; sram is empty for measured reports.  matmul_flops, other_flops: see
    ``simulator.predict``.  workspace: elements (over all B*H) of device memory beyond inputs and
    outputs, per tensor.  roofline_seconds: ``Hardware.roofline_seconds`` of the totals.
    l2: the L2 model's estimate (``simulator.l2``).  levels: every memory level and the time
    (``simulator.levels``), launches summed; launch_levels: the same for each launch of
    ``phases``, in order.  Fields a measurement cannot give are None (empty).
    """

    algorithm: str
    dtype_bytes: int
    hbm: Mapping[str, TensorTraffic]
    sram: Mapping[str, TensorTraffic] = field(default_factory=dict)
    matmul_flops: int | None = None
    other_flops: int | None = None
    workspace: Mapping[str, int] | None = None
    roofline_seconds: float | None = None
    l2: "L2Traffic | None" = None
    workload: "Workload | None" = None
    tiling: "Tiling | None" = None
    hardware: "Hardware | None" = None
    phases: "tuple[Phase, ...]" = ()
    levels: "Levels | None" = None
    launch_levels: "tuple[Levels, ...]" = ()

    @classmethod
    def from_hbm_counts(cls, algorithm: str, reads: dict[str, int], writes: dict[str, int],
                        dtype_bytes: int) -> "TrafficReport":
        """A report of measured global-memory element counts per tensor (nothing else known)."""
        hbm = {name: TensorTraffic(int(reads.get(name, 0)), int(writes.get(name, 0)))
               for name in ordered_tensors(set(reads) | set(writes))}
        return cls(algorithm, dtype_bytes, hbm)

    # ---- totals ---------------------------------------------------------------------------
    def element_bytes(self, name: str) -> int:
        """Bytes of one element of tensor ``name`` in global memory (``FP32_TENSORS``: 4)."""
        return element_bytes(name, self.dtype_bytes)

    @property
    def hbm_read_bytes(self) -> int:
        return sum(t.reads * self.element_bytes(name) for name, t in self.hbm.items())

    @property
    def hbm_write_bytes(self) -> int:
        return sum(t.writes * self.element_bytes(name) for name, t in self.hbm.items())

    @property
    def hbm_bytes(self) -> int:
        """Global-memory bytes read and written."""
        return self.hbm_read_bytes + self.hbm_write_bytes

    def sram_element_bytes(self, name: str) -> int:
        """Bytes of one element of tensor ``name`` in SRAM: the workload's, but 2 for
        ``FP16_TENSORS`` (the SRAM model counts L, D in the workload's elements too)."""
        return 2 if name in FP16_TENSORS else self.dtype_bytes

    @property
    def sram_read_bytes(self) -> int:
        return sum(t.reads * self.sram_element_bytes(name) for name, t in self.sram.items())

    @property
    def sram_write_bytes(self) -> int:
        return sum(t.writes * self.sram_element_bytes(name) for name, t in self.sram.items())

    @property
    def flops(self) -> int | None:
        """matmul_flops + other_flops."""
        return _add_optional(self.matmul_flops, self.other_flops)

    @property
    def extra_memory_bytes(self) -> int | None:
        """Peak device memory beyond inputs and outputs (bytes): the whole workspace."""
        if self.workspace is None:
            return None
        return sum(n * self.element_bytes(name) for name, n in self.workspace.items())

    # ---- every memory level and the time (``simulator.levels``; None without a model) -----
    def _level(self, name: str):
        return None if self.levels is None else getattr(self.levels, name)

    @property
    def sm_l2_read_bytes(self) -> float | None:
        """Sectors the L2 serves the SMs (global and local loads that miss L1) x 32."""
        return self._level("sm_l2_read_bytes")

    @property
    def sm_l2_write_bytes(self) -> float | None:
        """Sectors the SMs send L2 (stores, atomic adds, local stores) x 32."""
        return self._level("sm_l2_write_bytes")

    @property
    def dram_read_bytes(self) -> float | None:
        """DRAM bytes read (``simulator.levels``; the L2 model's alone without levels)."""
        if self.levels is not None:
            return self.levels.dram_read_bytes
        return None if self.l2 is None else self.l2.dram_read_bytes

    @property
    def dram_write_bytes(self) -> float | None:
        """DRAM bytes written during the run (dirty data still in L2 at the end not counted)."""
        if self.levels is not None:
            return self.levels.dram_write_bytes
        return None if self.l2 is None else self.l2.dram_write_bytes

    @property
    def l1_hit_rate(self) -> float | None:
        """Global-load sectors found in L1 / requested."""
        return self._level("l1_hit_rate")

    @property
    def local_bytes(self) -> float | None:
        """Local-memory (spill) bytes loaded and stored at L1, in whole sectors."""
        return self._level("local_bytes")

    @property
    def smem_wavefronts(self) -> float | None:
        """Shared-memory wavefronts, loads and stores."""
        return self._level("smem_wavefronts")

    @property
    def time_s(self) -> float | None:
        """The runtime model's kernel time (``simulator.runtime``)."""
        return self._level("time_s")

    def hbm_counts(self) -> dict[str, tuple[int, int]]:
        """{tensor: (read elements, write elements)}, tensors with neither omitted."""
        return {name: (t.reads, t.writes) for name, t in self.hbm.items() if t.reads or t.writes}

    # ---- combining ------------------------------------------------------------------------
    def __add__(self, other: "TrafficReport") -> "TrafficReport":
        """Both runs, one after the other (e.g. forward + backward).  Workspaces are kept side by
        side (the larger of each tensor name): the peak when nothing is freed in between."""
        if self.dtype_bytes != other.dtype_bytes:
            raise ValueError(f"cannot add reports of {self.dtype_bytes}- and "
                             f"{other.dtype_bytes}-byte elements")
        if self.workload is not None and other.workload is not None and self.workload != other.workload:
            raise ValueError("cannot add reports of different workloads")
        workspace = None
        if self.workspace is not None and other.workspace is not None:
            workspace = {name: max(self.workspace.get(name, 0), other.workspace.get(name, 0))
                         for name in ordered_tensors(set(self.workspace) | set(other.workspace))}
        return TrafficReport(
            algorithm=f"{self.algorithm}+{other.algorithm}", dtype_bytes=self.dtype_bytes,
            hbm=_merge(self.hbm, other.hbm), sram=_merge(self.sram, other.sram),
            matmul_flops=_add_optional(self.matmul_flops, other.matmul_flops),
            other_flops=_add_optional(self.other_flops, other.other_flops),
            workspace=workspace,
            roofline_seconds=_add_optional(self.roofline_seconds, other.roofline_seconds),
            l2=_add_optional(self.l2, other.l2),
            workload=self.workload or other.workload,
            tiling=self.tiling if self.tiling == other.tiling else None,
            hardware=self.hardware if self.hardware == other.hardware else None,
            phases=self.phases + other.phases,
            levels=_add_optional(self.levels, other.levels),
            launch_levels=self.launch_levels + other.launch_levels)

    # ---- output ---------------------------------------------------------------------------
    def record(self) -> dict:
        """One flat row (str/int/float/bool/None values) for a CSV or a DataFrame."""
        w = self.workload
        row = {"algorithm": self.algorithm, "dtype_bytes": self.dtype_bytes}
        for key in ("B", "H", "N_q", "N_k", "d", "causal", "diagonal"):
            row[key] = None if w is None else getattr(w, key)
        window = None if w is None else w.window
        row["window_left"], row["window_right"] = window or (None, None)
        row["kv_heads"] = None if w is None else w.H_kv
        row["block_fraction"] = None if w is None else w.block_fraction
        row["Br"] = None if self.tiling is None else self.tiling.Br
        row["Bc"] = None if self.tiling is None else self.tiling.Bc
        row["hardware"] = None if self.hardware is None else self.hardware.name
        row.update(hbm_read_bytes=self.hbm_read_bytes, hbm_write_bytes=self.hbm_write_bytes,
                   sram_read_bytes=self.sram_read_bytes, sram_write_bytes=self.sram_write_bytes,
                   matmul_flops=self.matmul_flops, other_flops=self.other_flops,
                   extra_memory_bytes=self.extra_memory_bytes,
                   roofline_seconds=self.roofline_seconds,
                   dram_read_bytes=self.dram_read_bytes, dram_write_bytes=self.dram_write_bytes)
        if self.levels is not None:
            row.update(self.levels.as_dict())
        for name, t in self.hbm.items():
            row[f"hbm_{name}_reads"] = t.reads
            row[f"hbm_{name}_writes"] = t.writes
        return row

    def table(self) -> str:
        """A readable per-tensor table (elements) with the totals under it."""
        lines = [self._title()]
        names = ordered_tensors(set(self.hbm) | set(self.sram))
        header = f"{'tensor':<8}{'HBM reads':>16}{'HBM writes':>16}"
        if self.sram:
            header += f"{'SRAM reads':>16}{'SRAM writes':>16}"
        lines += [header + "   (elements)", "-" * len(header)]
        for name in names:
            h, s = self.hbm.get(name, TensorTraffic()), self.sram.get(name, TensorTraffic())
            line = f"{name:<8}{h.reads:>16,}{h.writes:>16,}"
            if self.sram:
                line += f"{s.reads:>16,}{s.writes:>16,}"
            lines.append(line)
        lines.append("-" * len(header))
        total = f"{'bytes':<8}{self.hbm_read_bytes:>16,}{self.hbm_write_bytes:>16,}"
        if self.sram:
            total += f"{self.sram_read_bytes:>16,}{self.sram_write_bytes:>16,}"
        lines.append(total)
        if self.matmul_flops is not None:
            lines.append(f"FLOPs: {self.matmul_flops:,} matmul + {self.other_flops:,} other")
        if self.workspace is not None:
            parts = ", ".join(self.workspace) or "none"
            lines.append(f"extra device memory: {self.extra_memory_bytes:,} bytes ({parts})")
        if self.roofline_seconds is not None:
            lines.append(f"roofline time: {self.roofline_seconds * 1e3:.4g} ms"
                         + (f" on {self.hardware.name}" if self.hardware else ""))
        if self.l2 is not None:
            lines.append(self.l2.summary())
        if self.levels is not None:
            v = self.levels
            lines.append(f"levels (as ncu counts them): SM<->L2 {v.sm_l2_read_bytes:,.0f} read + "
                         f"{v.sm_l2_write_bytes:,.0f} written bytes; DRAM {v.dram_read_bytes:,.0f} + "
                         f"{v.dram_write_bytes:,.0f}; L1 hit rate {v.l1_hit_rate:.3f}; local "
                         f"{v.local_bytes:,.0f} bytes; shared {v.smem_wavefronts:,.0f} wavefronts; "
                         f"time {v.time_s * 1e3:.4g} ms")
        return "\n".join(lines)

    def _title(self) -> str:
        title = self.algorithm
        w = self.workload
        if w is not None:
            title += (f"  B={w.B} H={w.H} N_q={w.N_q} N_k={w.N_k} d={w.d} {w.precision}"
                      + (" causal" if w.causal else "")
                      + (f" diagonal={w.diagonal}" if w.diagonal is not None else "")
                      + (f" window=({w.window[0]}, {w.window[1]})" if w.window is not None else "")
                      + (f" kv_heads={w.kv_heads}" if w.kv_heads is not None else "")
                      + (f" block-sparse s={w.block_fraction:.3g} ({w.block_size[0]} x "
                         f"{w.block_size[1]} blocks)" if w.block_mask is not None else ""))
        if self.tiling is not None:
            title += f"  Br={self.tiling.Br} Bc={self.tiling.Bc}"
        return title

    def __str__(self) -> str:
        return self.table()
