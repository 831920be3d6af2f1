"""How many blocks of a kernel share a multiprocessor, which resource stops more, and how a grid
falls into waves; the resources of each compiled kernel, as its linker reported them.

``occupancy(hardware, threads, registers, smem_bytes)`` follows the CUDA occupancy calculator
(``cuda_occupancy.h`` of CUDA 13.0, ``cudaOccMaxActiveBlocksPerMultiprocessor``), for the limits
that apply to our kernels:

- warps: ``max_threads_per_sm / 32`` warp slots, a block taking ``ceil(threads / 32)``;
- blocks: ``max_blocks_per_sm`` (32 on sm_80 and sm_90);
- registers: a warp is allocated ``registers x 32`` rounded up to ``register_granularity``
  (256), from one of the ``register_subpartitions`` (4) files of ``registers_per_sm / 4``
  (16384) registers; the SM holds ``floor(16384 / per-warp) x 4`` warps. A block launches only
  if its warps, rounded up to a multiple of 4, fit ``registers_per_sm`` (the hardware's check);
- shared memory: a block is allocated its static + dynamic bytes plus the driver's
  ``smem_reserved_per_block`` (1 KB), rounded up to ``smem_granularity`` (128 B), from
  ``smem_per_sm`` (228 KB on sm_90); at most ``smem_per_block`` (227 KB) of its own.

Not modelled: partitioned global caching (sm_5x/6x only), block barriers (sm_90 has two per
block slot; our kernels use one a block, so they never bind), clusters. The shared-memory
carveout the driver configures is taken as the smallest of ``Hardware.smem_carveouts`` that
holds the blocks the other limits allow: an assumption, which ncu's
``launch__occupancy_limit_shared_mem`` readings on the H200 agree with
(tests/test_simulator_occupancy.py). Pure Python: no numba.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from .hardware import H200, Hardware
from .tiling import TILING_VARIANTS, Tiling, table_variant, tiling_of_table

WARP = 32
#: Kernel resources as the linker reports them (ptxas -v's lines): written by
#: tools/kernel_resources.py, read by ``resources``.
RESOURCES_CSV = Path(__file__).with_name("kernel_resources.csv")
#: The resources the occupancy is limited by, in the order ``Occupancy.limits`` lists them.
LIMITS = ("registers", "shared memory", "warps", "blocks")


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class Occupancy:
    """Residency of one kernel's blocks on one multiprocessor.

    blocks_per_sm: blocks resident at once.  limits: blocks each resource (``LIMITS``) allows.
    warps_per_block, max_warps_per_sm: warps.  registers_per_warp: registers allocated a warp.
    smem_per_block: shared memory allocated a block (bytes: static + dynamic + the driver's
    reservation, rounded to the allocation granularity).  carveout: the shared memory (bytes)
    the SM is configured with for this kernel (see the module docstring).
    """

    blocks_per_sm: int
    limits: Mapping[str, int]
    warps_per_block: int
    max_warps_per_sm: int
    registers_per_warp: int
    smem_per_block: int
    carveout: int

    @property
    def binding(self) -> tuple[str, ...]:
        """The resources that allow no more than ``blocks_per_sm`` blocks (ties: all of them)."""
        return tuple(name for name in LIMITS if self.limits[name] == self.blocks_per_sm)

    @property
    def warps_per_sm(self) -> int:
        """Warps resident on a full multiprocessor."""
        return self.blocks_per_sm * self.warps_per_block

    @property
    def warp_fraction(self) -> float:
        """Resident warps / warp slots: the theoretical occupancy (ncu's ``sm__warps_active``
        as a fraction of peak, on a multiprocessor that holds ``blocks_per_sm`` blocks)."""
        return self.warps_per_sm / self.max_warps_per_sm

    @property
    def smem_limit_at_carveout(self) -> int:
        """Blocks the configured carveout holds (ncu's ``launch__occupancy_limit_shared_mem``)."""
        return self.carveout // self.smem_per_block


def occupancy(hardware: Hardware, threads: int, registers: int, smem_bytes: int) -> Occupancy:
    """Blocks per SM of a kernel with ``threads`` threads a block, ``registers`` registers a
    thread (ptxas's count) and ``smem_bytes`` bytes of shared memory a block (static +
    dynamic, without the driver's reservation). ValueError, naming the resource, when one block
    cannot launch."""
    hw = hardware
    _check_int("threads", threads, 1)
    _check_int("registers", registers, 0)
    _check_int("smem_bytes", smem_bytes, 0)
    if threads > hw.max_threads_per_block:
        raise ValueError(f"{threads} threads a block exceed {hw.name}'s {hw.max_threads_per_block}")
    if registers > hw.max_registers_per_thread:
        raise ValueError(f"{registers} registers a thread exceed {hw.name}'s {hw.max_registers_per_thread}")
    if smem_bytes > hw.smem_per_block:
        raise ValueError(f"{smem_bytes} bytes of shared memory a block exceed {hw.name}'s "
                         f"{hw.smem_per_block}")
    warps = -(-threads // WARP)
    per_warp = _round_up(registers * WARP, hw.register_granularity)
    if per_warp * _round_up(warps, hw.register_subpartitions) > hw.registers_per_sm:
        raise ValueError(f"{warps} warps of {registers} registers a thread do not fit {hw.name}'s "
                         f"{hw.register_subpartitions} register files of "
                         f"{hw.registers_per_sm // hw.register_subpartitions}")
    max_warps = hw.max_threads_per_sm // WARP
    if per_warp:
        warps_by_registers = (hw.registers_per_sm // hw.register_subpartitions // per_warp
                              * hw.register_subpartitions)
        by_registers = warps_by_registers // warps
    else:
        by_registers = hw.max_blocks_per_sm
    smem = _round_up(smem_bytes + hw.smem_reserved_per_block, hw.smem_granularity)
    limits = {"registers": by_registers, "shared memory": hw.smem_per_sm // smem,
              "warps": max_warps // warps, "blocks": hw.max_blocks_per_sm}
    blocks = min(limits.values())
    carveout = min((c for c in hw.smem_carveouts if c >= blocks * smem), default=hw.smem_per_sm)
    return Occupancy(blocks, limits, warps, max_warps, per_warp, smem, carveout)


@dataclass(frozen=True)
class Waves:
    """A grid of ``grid_blocks`` blocks dealt to ``slots`` = blocks_per_sm x sm_count places."""

    grid_blocks: int
    slots: int

    @property
    def waves(self) -> float:
        """grid_blocks / slots (ncu's ``launch__waves_per_multiprocessor``)."""
        return self.grid_blocks / self.slots

    @property
    def full_waves(self) -> int:
        """Waves in which every slot runs a block."""
        return self.grid_blocks // self.slots

    @property
    def tail_blocks(self) -> int:
        """Blocks of the last, partial wave (0 if the grid fills whole waves)."""
        return self.grid_blocks % self.slots

    @property
    def rounds(self) -> int:
        """Waves started, the partial one included: the time in block-lengths if every block
        takes as long."""
        return math.ceil(self.grid_blocks / self.slots)


def waves(grid_blocks: int, occ: Occupancy, hardware: Hardware) -> Waves:
    """How a grid of ``grid_blocks`` blocks of a kernel with occupancy ``occ`` fills the
    ``hardware.sm_count`` multiprocessors."""
    _check_int("grid_blocks", grid_blocks, 1)
    return Waves(grid_blocks, occ.blocks_per_sm * hardware.sm_count)


@dataclass(frozen=True)
class KernelResources:
    """One row of ``kernel_resources.csv``: a compiled kernel as its linker reported it
    (nvJitLink ``-lto -arch=sm_90a``, as a launch links it; ``ptxas``: that compiler's name).

    kernel: a Tiling kernel name, or the function name of a row kernel (softmax, ds, row_dot).
    function: the compiled Python function (the name ncu shows).  variant: "" or a label of a
    code variant (``trans_a``, ``no_atomic_dq``, ...).  tiling: None for the row kernels.
    d, causal: None where the kernel's code depends on neither.  Bytes for every size.
    kernel_source: the digest (16 hex digits) of the kernel's sources compiled
    (``numba_flash.kernel_cache.function_digest``; a test holds it to the current sources).
    """

    kernel: str
    function: str
    variant: str
    tiling: Tiling | None
    d: int | None
    causal: bool | None
    threads: int
    dynamic_smem_bytes: int
    static_smem_bytes: int
    registers: int
    register_cap: int | None
    spill_store_bytes: int
    spill_load_bytes: int
    stack_frame_bytes: int
    ptxas: str
    date: str
    kernel_source: str

    def occupancy(self, hardware: Hardware = H200) -> Occupancy:
        """``occupancy`` of this kernel's blocks on ``hardware``."""
        return occupancy(hardware, self.threads, self.registers,
                         self.static_smem_bytes + self.dynamic_smem_bytes)


def _optional(text: str, kind):
    return None if text == "" else kind(text)


def asked_variant(variant: str) -> str:
    """The variant a kernel is asked for, from a table row's variant: ``tiling.table_variant``'s
    inverse (``TILING_VARIANTS`` left out, which the row's tiling implies)."""
    return "+".join(p for p in variant.split("+") if p and p not in TILING_VARIANTS)


def key_fields(r: Mapping[str, str]) -> dict:
    """The columns that name a compiled kernel (kernel, function, variant, tiling, d, causal)
    of a row of kernel_resources.csv or kernel_sass.csv, parsed."""
    return dict(kernel=r["kernel"], function=r["function"], variant=r["variant"],
                tiling=tiling_of_table(int(r["Br"]), int(r["Bc"]), r["variant"]) if r["Br"] else None,
                d=_optional(r["d"], int), causal=_optional(r["causal"], lambda s: s == "True"))


@lru_cache(maxsize=None)
def kernel_resources(path: Path = RESOURCES_CSV) -> tuple[KernelResources, ...]:
    """Every row of the resources CSV (read once per path)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return tuple(KernelResources(
        **key_fields(r),
        threads=int(r["threads"]), dynamic_smem_bytes=int(r["dynamic_smem_bytes"]),
        static_smem_bytes=int(r["static_smem_bytes"]), registers=int(r["registers"]),
        register_cap=_optional(r["register_cap"], int),
        spill_store_bytes=int(r["spill_store_bytes"]), spill_load_bytes=int(r["spill_load_bytes"]),
        stack_frame_bytes=int(r["stack_frame_bytes"]), ptxas=r["ptxas"], date=r["date"],
        kernel_source=r["kernel_source"],
    ) for r in rows)


def resources(kernel: str, tiling: Tiling | None, d: int, causal: bool, variant: str = "",
              path: Path = RESOURCES_CSV) -> KernelResources:
    """The recorded resources of ``kernel`` (its ``variant``) compiled for ``tiling`` (None for
    the row kernels), head dim ``d`` and ``causal``. LookupError, listing what was compiled,
    if this configuration never was: resources are measured, never guessed."""
    variant = table_variant(variant, tiling)
    rows = compiled_rows(kernel_resources(path), kernel, variant)
    found = matching(rows, tiling, d, causal)
    if found:
        return found[0]
    raise never_compiled(rows, kernel, variant, tiling, d, causal, path.name,
                         "add it to tools/kernel_resources.py and rerun that (it needs a CUDA "
                         "toolkit's libnvvm and nvJitLink)")


def compiled_rows(rows, kernel: str, variant: str) -> list:
    """The recorded rows (of ``kernel_resources`` or ``simulator.sass.kernel_sass``) of
    ``kernel``'s ``variant``."""
    return [r for r in rows if r.kernel == kernel and r.variant == variant]


def matching(rows, tiling: Tiling | None, d: int, causal: bool) -> list:
    """Those of ``rows`` compiled for ``tiling``, ``d`` and ``causal`` (a row's d or causal of
    None: its code depends on neither)."""
    return [r for r in rows if r.tiling == tiling and r.d in (None, d) and r.causal in (None, causal)]


def never_compiled(rows, kernel: str, variant: str, tiling, d: int, causal: bool, file: str,
                   remedy: str) -> LookupError:
    """The LookupError of a configuration ``rows`` (a kernel's) do not hold: what they hold."""
    compiled = sorted({(r.tiling and (r.tiling.Br, r.tiling.Bc), r.d, r.causal) for r in rows},
                      key=str)
    return LookupError(
        f"{kernel}{f' ({variant})' if variant else ''} with tiling={tiling}, d={d}, "
        f"causal={causal} was never compiled; {file} has ((Br, Bc), d, causal) = "
        f"{compiled or 'none of this kernel'}: {remedy}")
