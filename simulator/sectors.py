"""Global memory as the L1 sees it: 32-byte sectors requested, found in L1, and sent to L2.

A warp's load or store touches whole sectors (a partly filled sector costs a whole one). Our
kernels move tiles row by row, each row's segment by whole warps, so a tensor of rows of ``n``
elements costs, per row, the sectors its byte range [r n b, (r + 1) n b) overlaps (``b`` bytes an
element): ``row_sectors``. One-dimensional tensors (L, D, l, m) are read as contiguous runs.

Per kernel (``Phase.kernel``), from its code:
- ``LOAD_REQUESTS``: times each distinct sector of a tensor is requested. The tensor-core kernels
  move column pairs (2u, 2u + 1) of some tiles with two 4-byte loads (even columns, then odd):
  both instructions touch the same sectors, the second finds them in L1 (``l1_hits``);
- ``STORE_REQUESTS``: the same for stores: the tensor-core kernels store an mma C fragment's
  column pairs (2t, 2t + 1) with two 4-byte stores; L1 writes through, so L2 receives each
  sector twice, half-filled each time;
- ``ATOMIC``: tensors updated by ``atomic.add`` (dQ in the backward with atomics): the
  traffic contract counts an atomic as a read and a write, but the SM only sends the update (a
  reduction, done in L2): no load;
- ``RED_SECTORS``: sectors one warp-wide atomic add touches per sector of data it updates. The
  tensor-core backward adds an mma C fragment (rows g, columns 2t + e of an 8-column tile) one
  element a lane: 8 rows x 4 of every other column, so each touched sector gets 4 of its 8
  floats: 2 sectors per sector of dQ (the fp16 / bf16 backward's fp32 dQ_accum the same).
- The fp16 / bf16 kernels copy Q, K, V, dO (``CP_ASYNC``) by 16-byte ``cp.async`` chunks, row
  by row, into tiles whose rows are padded to ``Tiling.half_stride(d)`` (an odd number of 16-byte
  chunks): a chunk costs the sector pair (global sector, shared sector) it falls in, and the
  chunks of one row that share both are fetched once (``cp_async_row_sectors``). A row whose
  shared copy sits 16 bytes off its global row's 32-byte alignment -- every other row, with the
  padding -- costs a sector per chunk, twice its sectors: 1.5x in all at d = 64. The ``calibrate``
  microbenchmark ``copy_sectors`` measures the rule on the H200 (2026-12-02): 128-byte rows
  copied at a 144-byte shared stride cost 1.50 sectors per 32 bytes, at a 128-byte stride 1.00
  (every cp.async / ld mode, 18 KiB to 227 KB of shared memory a block). Where d % 8 != 0 they
  copy element by element through registers (the rows' sectors, as the fp32 kernels).
  Their 16-byte copies are ``cp.async.cg``: cached in L2 only, so L1 allocates no line for
  them (``SectorTraffic.bypassed``; the lines a spill refill competes with, ``simulator.local``,
  are the other loads').
  fa2_fp16x3's forward (``sector_kernel``) copies its fp16 parts of q, k, v so, rows of
  ``Workload.D_parts`` elements, and stores its fp32 O as the tensor-core forward does.
  They store O, dK, dV from C fragments one 2-byte element a lane (columns
  2t + e of each 8-column tile, e = 0 then 1): a 32-byte sector (16 elements, two tiles) is sent
  in four pieces of 8 bytes (``STORE_REQUESTS`` 4).
Elements are ``Workload.dtype_bytes`` each, but for the tensors kept in fp32 in every format
(``simulator.report.FP32_TENSORS``: L, D, l, m, dQ_accum, the deterministic backward's
recomputed O and L): 4.
A tensor a kernel writes one element a block (``SINGLE_STORES``: head_amax's partial maxima)
costs a sector an element.
Tensors every thread of a block reads whole (``Phase.broadcast``: fa2_fp16x3's head maxima,
each an address a warp): a sector a warp-wide load requested, each distinct sector of a block
fetched once.
The FFMA kernels move some head tiles through their thread grid (``GRID_ACCESSES``;
``numba_flash/kernels/tiles.py``: thread (ty, tx) owns head columns tx + TX b of its rows): a
warp instruction takes TX consecutive elements of each of its rows, so where TX elements do not
fill whole sectors (TX = Bc / 4: Bc = 16 in fp32, Bc < 64 in 2-byte storage) a sector is touched
by several instructions, and each touch is a request (a load's later ones hit L1) or a store or
reduction sent to L2 (``grid_row_sectors``). H100, 2026-12-07, io_scaling's 16 x 16 tiling (16
bytes a row an instruction), where whole sectors count 1.11 GB: Algorithm 1 stored 2.18 GB (O
twice, l and m once) and its L1 found 33.3 M of 101.7 M requested load sectors (O's second
halves; the count below: 33.4 M of 101.9 M); the FFMA forward stored 17.0 MB for 8.5.
No reuse between thread blocks is counted: on the H200, co-resident blocks of one head showed no
L1 hits (ncu, results/h200/levels); reads of one sector by several SMs at once are merged
further on, by the L2's request coalescer, which the SM-side counts do not see.
Pure Python: no numba.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import gcd

from .phases import Phase
from .report import element_bytes
from .tiling import Tiling
from .workload import Workload

SECTOR_BYTES = 32
WARP_THREADS = 32

LOAD_REQUESTS = {
    "flash_forward_tc": {"K": 2},
    "flash_backward_tc": {"K": 2, "V": 2, "Q": 2, "dO": 2},
}
STORE_REQUESTS = {"flash_forward_tc": {"O": 2}, "flash_backward_tc": {"dK": 2, "dV": 2},
                  "flash_forward_half": {"O": 4}, "flash_backward_half": {"dK": 4, "dV": 4},
                  "flash_forward_fp16x3": {"O": 2}, "flash_backward_fp16x3": {"dK": 2, "dV": 2}}
ATOMIC = {"flash_backward_tc": ("dQ",), "flash_backward": ("dQ",),
          "flash_backward_half": ("dQ_accum",), "flash_backward_fp16x3": ("dQ",)}
RED_SECTORS = {"flash_backward_tc": 2, "flash_backward_half": 2, "flash_backward_fp16x3": 2}
#: Tensors a kernel stores one element a block (its one result, by one thread): each store is
#: its own request, a sector sent to L2 for 4 bytes. fa2_fp16x3's head_amax: 1536 sectors for 1536 partial maxima at
#: (2, 16, 2048, 64) (ncu, H200 and H100, 2026-12-06).
SINGLE_STORES = {"head_amax": ("head maxima",)}
#: Tensors a kernel loads, stores or adds to through its thread grid, TX consecutive elements of
#: a row a warp instruction (module docstring): Algorithm 1's O (read back and written every outer
#: step), the FFMA forward's O, the FFMA backward's dK, dV and dQ (atomic adds), the deterministic
#: backward's dQ.
GRID_ACCESSES = {"flash_forward_v1": ("O",), "flash_forward_v2": ("O",),
                 "flash_backward": ("dK", "dV", "dQ"), "flash_backward_dq": ("dQ",)}
#: Tensors a kernel copies by 16-byte cp.async chunks into padded tiles (where d % 8 == 0).
CP_ASYNC = {"flash_forward_half": ("Q", "K", "V"), "flash_backward_half": ("Q", "K", "V", "dO"),
            "flash_forward_fp16x3": ("Q parts", "K parts", "V parts"),
            "flash_backward_fp16x3": ("Q parts", "K parts", "V parts", "dO parts")}
#: 16-byte chunks: what one cp.async moves.
CHUNK_BYTES = 16

#: The row length (a Workload dimension) of every two-dimensional tensor of the contract.
_ROW = {**{t: "d" for t in ("Q", "K", "V", "O", "O (recomputed)", "dO", "dQ", "dQ_accum", "dK", "dV")},
        **{t: "N_k" for t in ("S", "P", "dP", "dS")},
        **{t: "D_parts" for t in ("Q parts", "K parts", "V parts", "dO parts")}}
#: Tensors of N_q rows a head (the others copied by cp.async are of N_k).
_QUERY_ROWS = ("Q", "dO", "Q parts", "dO parts")


def row_sectors(n: int, element_bytes: int) -> float:
    """Mean sectors one row of ``n`` elements overlaps, rows laid end to end from an aligned
    start (exact over the rows' period): ``grid_row_sectors`` with the row one column group."""
    return grid_row_sectors(n, element_bytes, n)


@lru_cache(maxsize=None)
def grid_row_sectors(n: int, element_bytes: int, tx: int) -> float:
    """Mean sector touches of one row of ``n`` elements moved through a thread grid of ``tx``
    columns: the sectors each group of columns [tx b, tx b + tx) overlaps, summed over the
    groups (a warp instruction each), rows laid end to end from an aligned start (exact over the
    rows' period). Equal to ``row_sectors`` (tx = n) where tx elements fill whole, aligned
    sectors."""
    row = n * element_bytes
    period = SECTOR_BYTES // gcd(row, SECTOR_BYTES)
    total = 0
    for r in range(period):
        for first in range(0, n, tx):
            start = r * row + first * element_bytes
            end = r * row + min(first + tx, n) * element_bytes
            total += -(-end // SECTOR_BYTES) - start // SECTOR_BYTES
    return total / period


@lru_cache(maxsize=None)
def cp_async_row_sectors(d: int, head_rows: int, element_bytes: int) -> float:
    """Mean sectors one row of d elements costs when copied by 16-byte cp.async chunks into a
    tile row of ``Tiling.half_stride(d)`` elements (module docstring), over the rows of a
    16-row-aligned tile and the heads of a (heads, ``head_rows``, d) tensor laid end to end from
    an aligned start (the pattern repeats within 16 rows and 32 heads). The stride depends on d
    alone (any Br, Bc); tiles start 32-byte aligned in shared memory."""
    row = d * element_bytes
    stride = Tiling(16, 16).half_stride(d) * element_bytes

    def pairs(g: int, s: int) -> int:      # a row at global byte g, shared byte s
        return len({((g + c) // SECTOR_BYTES, (s + c) // SECTOR_BYTES)
                    for c in range(0, row, CHUNK_BYTES)})

    counts = [pairs((head * head_rows + r) * row, r * stride)
              for head in range(SECTOR_BYTES) for r in range(16)]
    return sum(counts) / len(counts)


def tensor_sectors(name: str, elements: int, w: Workload) -> float:
    """Sectors of ``elements`` elements of tensor ``name`` moved as whole rows."""
    size = element_bytes(name, w.dtype_bytes)
    if name not in _ROW:
        return elements * size / SECTOR_BYTES
    n = getattr(w, _ROW[name])
    return elements / n * row_sectors(n, size)


@dataclass(frozen=True)
class SectorTraffic:
    """One launch's global accesses at the L1, in sectors.

    requested: load sectors the warps ask L1 for; missed: those L1 fetches from L2 (distinct
    sectors, ``requested - missed`` hit); stored: sectors of stores sent on to L2; reduced:
    sectors of atomic adds sent to L2; bypassed: those of ``missed`` fetched by 16-byte
    ``cp.async.cg`` copies, which L1 passes on without keeping a line."""

    requested: float
    missed: float
    stored: float
    reduced: float
    bypassed: float = 0.0


def sector_kernel(p: Phase) -> str | None:
    """The key of launch ``p``'s code in the tables above: its kernel (a row kernel, which has
    no Tiling kernel, by its compiled function's name, ``Phase.code``), but
    "flash_forward_fp16x3" for the fp16 forward compiled in its fp32 mode
    (``simulator.fp16x3.VARIANT``: fp32 O, stored as the tensor-core kernel's, and the parts
    of q, k, v copied by cp.async), and "flash_backward_fp16x3" for the fp16 backward so
    compiled (fp32 dK, dV stored as the tensor-core backward's, dQ's atomics into dQ itself)."""
    from .fp16x3 import VARIANT

    if VARIANT in p.code[1].split("+"):
        return "flash_backward_fp16x3" if p.code[0] == "flash_backward_half" else "flash_forward_fp16x3"
    return p.kernel or p.code[0]


def sector_traffic(p: Phase, w: Workload, tiling: Tiling | None = None) -> SectorTraffic:
    """The sector model (module docstring) of launch ``p``; with the ``tiling`` its kernel runs
    at, the touches of the tensors it moves through its thread grid (``GRID_ACCESSES``), else
    whole rows for those too."""
    kernel = sector_kernel(p)
    atomic = ATOMIC.get(kernel, ())
    factors = LOAD_REQUESTS.get(kernel, {})
    chunked = CP_ASYNC.get(kernel, ())
    grid = GRID_ACCESSES.get(kernel, ()) if tiling is not None else ()

    def touches(name: str, n: int) -> float:
        """Sectors a grid-moved tensor's ``n`` elements are requested or sent as."""
        row = getattr(w, _ROW[name])
        return n / row * grid_row_sectors(row, element_bytes(name, w.dtype_bytes), tiling.threads_x)

    requested = missed = stored = reduced = bypassed = 0.0
    for name, n in p.hbm_reads.items():
        if name in atomic:
            continue
        if name in p.broadcast:           # a sector a warp-wide load; L1 fetches it once a block
            requested += n / WARP_THREADS
            missed += n / p.broadcast[name] * element_bytes(name, w.dtype_bytes) / SECTOR_BYTES
            continue
        row, size = getattr(w, _ROW.get(name, "d")), element_bytes(name, w.dtype_bytes)
        if name in chunked and row * size % CHUNK_BYTES == 0:
            head_rows = w.N_q if name in _QUERY_ROWS else w.N_k
            s = n / row * cp_async_row_sectors(row, head_rows, size)
            bypassed += s
        else:
            s = tensor_sectors(name, n, w)
        missed += s
        requested += touches(name, n) if name in grid else s * factors.get(name, 1)
    for name, n in p.hbm_writes.items():
        if name in grid:
            s = touches(name, n)
        else:
            s = n if name in SINGLE_STORES.get(kernel, ()) else tensor_sectors(name, n, w)
        if name in atomic:
            reduced += s * RED_SECTORS.get(kernel, 1)
        else:
            stored += s * STORE_REQUESTS.get(kernel, {}).get(name, 1)
    return SectorTraffic(requested, missed, stored, reduced, bypassed)
