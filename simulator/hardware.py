"""The machine a cost is predicted for: bandwidth, on-chip memory and peak arithmetic rates.

``Hardware`` holds datasheet values, each with the source it came from; ``with_measured`` swaps
any of them for a measured value and records where that measurement came from.  Units: bytes,
bytes per second, FLOP per second.  Peak rates are dense (no 2:4 sparsity).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Mapping

#: Precisions a peak rate may be given for.
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


@dataclass(frozen=True)
class Hardware:
    """One GPU model.

    hbm_bandwidth: bytes/s of global memory, reads and writes together.
    sm_count: streaming multiprocessors.  smem_per_sm: shared memory of one SM (bytes).
    smem_per_block: the most dynamic shared memory one block may opt into (bytes).
    l2_bytes: L2 cache capacity.  peak_flops: FLOP/s per precision (``PRECISIONS``).
    max_threads_per_sm, max_blocks_per_sm: residency limits (2048 and 32 on sm_80 and sm_90).
    registers_per_sm: 32-bit registers of one SM, split evenly over ``register_subpartitions``
    files (one per warp scheduler); also the most one block may hold.
    register_granularity: registers a warp is allocated in multiples of.
    max_registers_per_thread, max_threads_per_block: per-thread and per-block limits.
    smem_reserved_per_block: shared memory (bytes) the driver adds to every block (sm_80 on).
    smem_granularity: bytes a block's shared memory is allocated in multiples of.
    smem_carveouts: the shared-memory sizes (bytes) an SM can be configured to, the rest of
    its unified L1/shared array going to L1 (the largest is ``smem_per_sm``).
    l1_smem_bytes: that unified L1 / shared-memory array of one SM (bytes).
    sources: where each value came from, keyed by field name.
    The sm_80 / sm_90 defaults are those of CUDA 13.0's ``cuda_occupancy.h`` (the occupancy
    calculator's code: granularities, sub-partitions, blocks per SM, carveouts) and the CUDA C
    Programming Guide's compute-capability table (registers, threads, the 1 KB reservation).
    """

    name: str
    hbm_bandwidth: float
    sm_count: int
    smem_per_sm: int
    smem_per_block: int
    l2_bytes: int
    peak_flops: Mapping[str, float]
    sources: Mapping[str, str] = field(default_factory=dict)
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    registers_per_sm: int = 65536
    register_subpartitions: int = 4
    register_granularity: int = 256
    max_registers_per_thread: int = 255
    max_threads_per_block: int = 1024
    smem_reserved_per_block: int = 1024
    smem_granularity: int = 128
    smem_carveouts: tuple[int, ...] = ()
    l1_smem_bytes: int = 256 * 1024

    def __post_init__(self):
        for name in ("hbm_bandwidth", "sm_count", "smem_per_sm", "smem_per_block", "l2_bytes",
                     "max_threads_per_sm", "max_blocks_per_sm", "registers_per_sm",
                     "register_subpartitions", "register_granularity",
                     "max_registers_per_thread", "max_threads_per_block",
                     "smem_reserved_per_block", "smem_granularity"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"Hardware.{name} must be a positive number, got {value!r}")
        if self.smem_per_block > self.smem_per_sm:
            raise ValueError(f"Hardware.smem_per_block ({self.smem_per_block}) exceeds "
                             f"smem_per_sm ({self.smem_per_sm})")
        if self.smem_carveouts and max(self.smem_carveouts) != self.smem_per_sm:
            raise ValueError(f"Hardware.smem_carveouts: the largest must be smem_per_sm "
                             f"({self.smem_per_sm}), got {self.smem_carveouts}")
        for precision, rate in self.peak_flops.items():
            if precision not in PRECISIONS:
                raise ValueError(f"Hardware.peak_flops: unknown precision {precision!r}, "
                                 f"expected one of {PRECISIONS}")
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate <= 0:
                raise ValueError(f"Hardware.peak_flops[{precision!r}] must be positive, got {rate!r}")

    def peak(self, precision: str) -> float:
        """Peak FLOP/s at ``precision``; ValueError naming the precisions known for this GPU."""
        if precision not in self.peak_flops:
            raise ValueError(f"{self.name} has no peak rate for {precision!r}; "
                             f"known: {sorted(self.peak_flops)}")
        return self.peak_flops[precision]

    def roofline_seconds(self, hbm_bytes: float, flops: float, precision: str) -> float:
        """max(bytes / bandwidth, FLOPs / peak): the time neither memory nor arithmetic can beat."""
        return max(hbm_bytes / self.hbm_bandwidth, flops / self.peak(precision))

    def with_measured(self, *, source: str, name: str | None = None, **values) -> "Hardware":
        """A copy with ``values`` replaced by measured ones, each noted as coming from ``source``.

        ``peak_flops`` may be given for some precisions only; the others keep their values.
        Example: ``H200.with_measured(hbm_bandwidth=4.19e12, source="device copy, 2026-11-29")``.
        """
        known = {f.name for f in dataclasses.fields(self)} - {"name", "sources"}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"with_measured: unknown field(s) {sorted(unknown)}; known: {sorted(known)}")
        sources = dict(self.sources)
        for key, value in values.items():
            if key == "peak_flops":
                sources.update({f"peak_flops.{p}": source for p in value})
            else:
                sources[key] = source
        if "peak_flops" in values:
            values["peak_flops"] = {**self.peak_flops, **values["peak_flops"]}
        return dataclasses.replace(self, name=name or self.name, sources=sources, **values)


def _datasheet(name: str, sheet: str, *, hbm_bandwidth, sm_count, smem_per_sm, smem_per_block,
               l2_bytes, peak_flops, l2_source: str, smem_carveouts, l1_smem_bytes) -> Hardware:
    sources = {key: sheet for key in ("hbm_bandwidth", "sm_count")}
    sources.update({key: "CUDA C Programming Guide, compute capability table"
                    for key in ("smem_per_sm", "smem_per_block", "max_threads_per_sm",
                                "registers_per_sm", "max_registers_per_thread",
                                "max_threads_per_block", "smem_reserved_per_block")})
    sources.update({key: "cuda_occupancy.h (CUDA 13.0)"
                    for key in ("max_blocks_per_sm", "register_subpartitions",
                                "register_granularity", "smem_granularity", "smem_carveouts")})
    sources["l2_bytes"] = l2_source
    sources["l1_smem_bytes"] = ("NVIDIA A100 / H100 whitepapers: combined L1 cache and shared "
                                "memory per SM")
    sources.update({f"peak_flops.{p}": sheet + " (dense)" for p in peak_flops})
    return Hardware(name, hbm_bandwidth, sm_count, smem_per_sm, smem_per_block, l2_bytes,
                    peak_flops, sources, smem_carveouts=smem_carveouts,
                    l1_smem_bytes=l1_smem_bytes)


_KB, _MIB = 1024, 1024 * 1024
#: Shared-memory sizes an SM can be configured to (cuda_occupancy.h of CUDA 13.0,
#: cudaOccAlignUpShmemSizeVoltaPlus): sm_80 up to 164 KB, sm_90 up to 228 KB.
_AMPERE_CARVEOUTS = tuple(k * _KB for k in (0, 8, 16, 32, 64, 100, 132, 164))
_HOPPER_CARVEOUTS = _AMPERE_CARVEOUTS + (196 * _KB, 228 * _KB)
_AMPERE_FLOPS = {"fp32": 19.5e12, "tf32": 156e12, "fp16": 312e12, "bf16": 312e12}
_HOPPER_FLOPS = {"fp32": 67e12, "tf32": 494.7e12, "fp16": 989.4e12, "bf16": 989.4e12}

A100_40GB = _datasheet(
    "A100_40GB", "NVIDIA A100 Tensor Core GPU datasheet (SXM4 40GB)",
    hbm_bandwidth=1555e9, sm_count=108, smem_per_sm=164 * _KB, smem_per_block=163 * _KB,
    l2_bytes=40 * _MIB, peak_flops=_AMPERE_FLOPS, l2_source="NVIDIA A100 whitepaper: 40 MB L2",
    smem_carveouts=_AMPERE_CARVEOUTS, l1_smem_bytes=192 * _KB)
A100_80GB = _datasheet(
    "A100_80GB", "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB)",
    hbm_bandwidth=2039e9, sm_count=108, smem_per_sm=164 * _KB, smem_per_block=163 * _KB,
    l2_bytes=40 * _MIB, peak_flops=_AMPERE_FLOPS, l2_source="NVIDIA A100 whitepaper: 40 MB L2",
    smem_carveouts=_AMPERE_CARVEOUTS, l1_smem_bytes=192 * _KB)
H100_SXM = _datasheet(
    "H100_SXM", "NVIDIA H100 Tensor Core GPU datasheet (SXM5)",
    hbm_bandwidth=3.35e12, sm_count=132, smem_per_sm=228 * _KB, smem_per_block=227 * _KB,
    l2_bytes=50 * _MIB, peak_flops=_HOPPER_FLOPS, l2_source="NVIDIA H100 whitepaper: 50 MB L2",
    smem_carveouts=_HOPPER_CARVEOUTS, l1_smem_bytes=256 * _KB)
H200 = _datasheet(
    "H200", "NVIDIA H200 Tensor Core GPU datasheet (SXM)",
    hbm_bandwidth=4.8e12, sm_count=132, smem_per_sm=228 * _KB, smem_per_block=227 * _KB,
    l2_bytes=60 * _MIB, peak_flops=_HOPPER_FLOPS,
    l2_source="cudaDeviceProp.l2CacheSize as the device reports it (60 MiB)",
    smem_carveouts=_HOPPER_CARVEOUTS, l1_smem_bytes=256 * _KB)

#: Our H200, 2026-11-29: device-to-device copy bandwidth (read + write bytes / time) and an
#: fp32 SGEMM with TF32 off.
H200_MEASURED = H200.with_measured(
    name="H200_MEASURED", hbm_bandwidth=4.19e12,
    source="measured on our H200, 2026-11-29: device-to-device copy, read+write bytes counted",
).with_measured(
    peak_flops={"fp32": 50.6e12},
    source="measured on our H200, 2026-11-29: fp32 SGEMM, TF32 disabled",
)

#: Every predefined GPU, by name.
KNOWN = {hw.name: hw for hw in (A100_40GB, A100_80GB, H100_SXM, H200, H200_MEASURED)}


def _key(name: str) -> str:
    return re.sub(r"[\s_\-]", "", name).lower()


def by_name(name: str) -> Hardware:
    """The predefined GPU called ``name`` (case, spaces, '-' and '_' ignored: "h100-sxm" works)."""
    for known_name, hardware in KNOWN.items():
        if _key(known_name) == _key(name):
            return hardware
    raise ValueError(f"unknown hardware {name!r}; known: {sorted(KNOWN)}")
