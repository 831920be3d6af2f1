"""A kernel launch, counted: the unit the algorithms are built from and the L2 model works on."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from .tiling import Tiling


@dataclass(frozen=True)
class Phase:
    """One kernel launch of an algorithm, counted over all B*H (batch, head) pairs.

    hbm_reads / hbm_writes / sram_reads / sram_writes: elements per tensor name.
    matmul_flops: 2 per multiply-add of the tile products; other_flops: everything else counted
    (conventions in ``simulator.predict``).
    kernel: the ``Tiling.smem_terms`` kernel name whose shared memory limits how many blocks
    run at once, or None for row-wise kernels without shared-memory tiles.
    units, blocks_per_unit, unit_reread_elements: the launch's grid is ``units`` groups of
    ``blocks_per_unit`` blocks; the blocks of one group re-read the same
    ``unit_reread_elements`` elements (e.g. a head's K and V for the FA2 forward).  Used only by
    the L2 model.
    code: (kernel, variant) of the compiled kernel this launch runs, as
    ``simulator.occupancy.resources`` and ``simulator.sass.sass`` name it (row kernels too:
    "row_dot", "softmax", "ds").
    block_trips: for the tiled kernels, the trips of the main loop (``simulator.sass``'s
    ``main_loop``) of each block of ONE (batch, head) pair, in the order the blocks start;
    ``tile_major``: blocks start tile by tile over all heads (``tile_major_block``: the causal
    tensor-core kernels), else head by head. inner_trips: trips of the loop nested in the main
    loop, per block of one head (Algorithm 1's i loop), else empty. Used by the runtime model.
    heads: the grid's heads, the blocks of ``block_trips`` repeated for each: B*H, or B*H_kv
    for the band backwards' main kernel (a block per K/V head and block j; GQA); 0 (a Phase
    not made by ``phase``): B*H.
    unit_share: consecutive units that re-read the same data (the forward's query heads of one
    K/V head under GQA: ``Workload.group``); the L2 model's working set counts
    ceil(units in flight / unit_share) of them.
    written_first: tensors the launch writes before it reads them back (Algorithm 1's O, l, m:
    written at the first K/V step, read at the later ones); the L2 model gives their reads no
    compulsory DRAM floor (``simulator.l2``, assumption 5).
    lsu_wavefronts: the launch's shared-memory wavefronts through the LSU (ncu's
    ``l1tex__data_pipe_lsu_wavefronts_mem_shared``, loads and stores) where the plan derives
    them from its access patterns (``simulator.banks``: bank conflicts, broadcasts, cp.async
    copies, which the LSU does not carry); None: the conflict-free count of its SRAM elements
    (``smem_wavefronts``).
    tiling: the tiling this launch's kernel runs at where it is not the plan's (the
    deterministic backward's recomputed forward, at the FFMA forward's default); None: the
    plan's.
    edge_trips: of each block's ``block_trips`` (same order), the trips on an edge tile
    (``BlockGrid.edge_pairs``: a ragged key block or one the band's edge crosses), the only
    trips that run the code under the kernels' ``needs_mask`` branch (``issue.Op.edge``);
    empty: every trip runs it.
    broadcast: tensors that every thread of a block reads whole, element by element at one
    address a warp (fa2_fp16x3's head maxima), and the block's threads: a sector a warp-wide
    load, and the L1 fetches each sector once a block (``simulator.sectors``).
    """

    name: str
    kernel: str | None
    hbm_reads: Mapping[str, int]
    hbm_writes: Mapping[str, int]
    sram_reads: Mapping[str, int]
    sram_writes: Mapping[str, int]
    matmul_flops: int
    other_flops: int
    units: int
    blocks_per_unit: int
    unit_reread_elements: int
    code: tuple[str, str] = ("", "")
    block_trips: tuple[int, ...] = ()
    tile_major: bool = False
    inner_trips: tuple[int, ...] = ()
    heads: int = 0
    unit_share: int = 1
    lsu_wavefronts: float | None = None
    written_first: frozenset = frozenset()
    tiling: Tiling | None = None
    edge_trips: tuple[int, ...] = ()
    broadcast: Mapping[str, int] = field(default_factory=dict)

    @property
    def blocks_per_head(self) -> int:
        return len(self.block_trips)

    def __post_init__(self):
        if self.edge_trips and len(self.edge_trips) != len(self.block_trips):
            raise ValueError(f"{self.name}: edge_trips has {len(self.edge_trips)} blocks, "
                             f"block_trips {len(self.block_trips)}: one count a block, or none")

    @property
    def edge_share(self) -> float:
        """The share of the main loop's trips on edge tiles (``edge_trips``; 1 where not
        given)."""
        trips = sum(self.block_trips)
        return sum(self.edge_trips) / trips if self.edge_trips and trips else 1.0

    def head_share(self, bh: int) -> float:
        """The share of the main loop's trips that are a block's first of a query head (the
        only ones that run the code under a branch on a head's start, ``issue.Op.head``): each
        block with trips visits bh / ``grid_heads(bh)`` query heads (its K/V head's group
        under GQA; one head where the grid has a block per query head)."""
        trips = sum(self.block_trips)
        starts = sum(1 for n in self.block_trips if n) * bh / self.grid_heads(bh)
        return starts / trips if trips else 1.0

    def grid_heads(self, bh: int) -> int:
        """``heads``, or ``bh`` (the workload's B*H) where it was not set."""
        return self.heads or bh


def phase(name: str, kernel: str | None, *, bh: int, hbm_reads: dict, hbm_writes: dict,
          sram_reads: dict | None = None, sram_writes: dict | None = None,
          matmul_flops: int = 0, other_flops: int = 0, units_per_head: int = 1,
          blocks_per_unit: int = 1, unit_reread_elements: int = 0,
          code: tuple[str, str] | None = None, block_trips=(), tile_major: bool = False,
          inner_trips=(), heads: int | None = None, unit_share: int = 1,
          lsu_wavefronts: float | None = None, written_first=frozenset(), edge_trips=(),
          broadcast: dict | None = None) -> Phase:
    """A Phase from counts of ONE (batch, head) pair, scaled by ``bh``; zero entries dropped.
    ``code`` defaults to (kernel, ""); ``heads`` (the grid's) to ``bh``."""
    def scaled(counts):
        return {t: int(n) * bh for t, n in (counts or {}).items() if n}
    return Phase(name, kernel, scaled(hbm_reads), scaled(hbm_writes), scaled(sram_reads),
                 scaled(sram_writes), int(matmul_flops) * bh, int(other_flops) * bh,
                 units_per_head * bh, blocks_per_unit, unit_reread_elements,
                 code or (kernel or "", ""), tuple(int(n) for n in block_trips), tile_major,
                 tuple(int(n) for n in inner_trips), bh if heads is None else heads, unit_share,
                 None if lsu_wavefronts is None else lsu_wavefronts * bh, frozenset(written_first),
                 None, tuple(int(n) for n in edge_trips), dict(broadcast or {}))


def smem_wavefronts(p: Phase, element_bytes: int) -> float:
    """Shared-memory wavefronts of launch ``p`` as ncu counts them: ``Phase.lsu_wavefronts``
    where the plan derived them, else its SRAM reads and writes of ``element_bytes``-byte
    elements in conflict-free 128-byte wavefronts."""
    if p.lsu_wavefronts is not None:
        return p.lsu_wavefronts
    return (sum(p.sram_reads.values()) + sum(p.sram_writes.values())) * element_bytes / 128


@dataclass(frozen=True)
class Plan:
    """An algorithm's kernel launches in order, and its workspace: elements (over all B*H) of
    device memory it allocates beyond its inputs and outputs, per tensor."""

    phases: tuple[Phase, ...]
    workspace: Mapping[str, int]
