"""The numbers every memory level and the clock give for one algorithm run: what ``predict``
reports and what ``experiments.measure`` reads from the GPU's counters, under the same names.

Definitions (one run of an algorithm, all its kernel launches; docs/hardware-counters.md has the
ncu metric behind each):
- sm_l2_read_bytes: 32-byte sectors the L2 serves to the SMs (global and local loads that miss
  in L1) x 32;
- sm_l2_write_bytes: sectors the SMs send to L2: stores, reductions (atomic adds) and local
  stores, x 32;
- dram_read_bytes, dram_write_bytes: bytes between L2 and DRAM;
- l1_hit_rate: global-load sectors found in L1 / global-load sectors requested (0 when none
  requested);
- local_bytes: local-memory (register spill) sectors loaded and stored at L1, x 32;
- smem_wavefronts: shared-memory wavefronts through the LSU (loads + stores, bank conflicts
  included; cp.async copies are not among them);
- time_s: kernel time, launches summed.
Pure Python: no numba.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

#: The level names, in report order: ``Levels``' fields, ``predict``'s and ``measure``'s.
LEVEL_NAMES = ("sm_l2_read_bytes", "sm_l2_write_bytes", "dram_read_bytes", "dram_write_bytes",
               "l1_hit_rate", "local_bytes", "smem_wavefronts", "time_s")
#: Unit of each level, for tables and CSVs.
UNITS = {"l1_hit_rate": "fraction", "smem_wavefronts": "wavefronts", "time_s": "s"}


@dataclass(frozen=True)
class Levels:
    """One run's numbers at every level (module docstring). l1_requested_sectors and
    l1_hit_sectors carry the hit rate's parts, so that runs add up (``+``)."""

    sm_l2_read_bytes: float
    sm_l2_write_bytes: float
    dram_read_bytes: float
    dram_write_bytes: float
    l1_requested_sectors: float
    l1_hit_sectors: float
    local_bytes: float
    smem_wavefronts: float
    time_s: float

    @property
    def l1_hit_rate(self) -> float:
        return self.l1_hit_sectors / self.l1_requested_sectors if self.l1_requested_sectors else 0.0

    def __add__(self, other: "Levels") -> "Levels":
        return Levels(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def as_dict(self) -> dict[str, float]:
        """{level name: value} in ``LEVEL_NAMES`` order."""
        return {name: getattr(self, name) for name in LEVEL_NAMES}


def total(parts) -> Levels:
    """The sum of an iterable of ``Levels`` (at least one)."""
    parts = list(parts)
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def launch_levels(phases, workload, tiling, hardware, l2) -> list[Levels]:
    """The model of every level for each of an algorithm's launches ``phases``
    (``simulator.phases``) with the L2 model's per-launch view ``l2`` (``simulator.l2.L2Traffic``):

    - global loads, stores and atomic adds in sectors, and L1 hits: ``simulator.sectors``;
    - local memory: ``simulator.local`` (the compiled kernel's spill instructions x how often
      they run; misses where the blocks' spill footprint overflows L1);
    - DRAM: the L2 model's reads; its writes less what L2 still holds dirty when the launch
      ends (``simulator.local.dirty_residue``: the write share of the measured dirty capacity
      its working set leaves);
    - shared memory: ``simulator.phases.smem_wavefronts``: the LSU wavefronts a plan derives
      from its access patterns (bank conflicts, broadcasts and cp.async copies:
      ``simulator.banks``), else the SRAM model's bytes / 128 (conflict-free 128-byte
      wavefronts);
    - time: ``simulator.runtime``.
    A kernel whose resources were never recorded (``simulator.occupancy.resources``: a tiling
    or head dim tools/kernel_resources.py did not compile) gets NaN for what needs them: its
    local bytes, SM<->L2 bytes (spill misses go there) and time; so does one that cannot launch
    on ``hardware`` (``simulator.occupancy`` raises: too much shared memory), and a band kernel
    -- a block mask, a window's left side, grouped K/V heads: its variant,
    ``simulator.flash.mask_variant`` -- while the tables do not hold that variant (its sectors,
    DRAM, L1 hit rate and shared wavefronts are modelled). Without rates for ``hardware``
    (``simulator.runtime.rates_for``), time is NaN and no dirty residue is taken."""
    from .local import dirty_residue, local_traffic
    from .phases import smem_wavefronts
    from .runtime import launch_seconds, rates_for
    from .sectors import SECTOR_BYTES, sector_traffic

    rates = rates_for(hardware)
    nan = float("nan")
    parts = []
    for p, view in zip(phases, l2.phases):
        t = p.tiling or tiling                    # (a launch at its own tiling: Phase.tiling)
        sec = sector_traffic(p, workload, t)
        written = view.dram_write_bytes
        if rates is not None and rates.l2_dirty_capacity_bytes:
            written -= dirty_residue(view, rates.l2_dirty_capacity_bytes)
        loc, seconds = None, nan
        if _launches(p, workload, t, hardware):
            try:
                loc = local_traffic(p, workload, t, hardware)
            except LookupError:              # its SASS was never recorded
                pass
            try:
                seconds = launch_seconds(p, workload, t, hardware,
                                         (view.dram_read_bytes, written), dict(view.read_miss))
            except LookupError:
                pass
        parts.append(Levels(
            sm_l2_read_bytes=sec.missed * SECTOR_BYTES + (loc.missed_bytes if loc else nan),
            sm_l2_write_bytes=(sec.stored + sec.reduced) * SECTOR_BYTES + (loc.store_bytes if loc else nan),
            dram_read_bytes=view.dram_read_bytes, dram_write_bytes=written,
            l1_requested_sectors=sec.requested, l1_hit_sectors=sec.requested - sec.missed,
            local_bytes=loc.load_bytes + loc.store_bytes if loc else nan,
            smem_wavefronts=smem_wavefronts(p, workload.dtype_bytes),
            time_s=seconds))
    return parts


def _launches(p, workload, tiling, hardware) -> bool:
    """Whether launch ``p``'s kernel was compiled for this configuration
    (``simulator.occupancy.resources``) and can run on ``hardware`` (its occupancy)."""
    from .local import launch_occupancy

    try:
        launch_occupancy(p, workload, tiling, hardware)
    except (LookupError, ValueError):        # never compiled (or recorded), or too big for this GPU
        return False
    return True
