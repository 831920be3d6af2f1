"""How many ways the GQA / MQA backward splits each K/V head's query heads (``kv_split``).

The backward's main kernel runs a block per (K/V head, K/V block j), which keeps K_j, V_j on chip
and loops over the ``group`` query heads of its K/V head. Under MQA at B H_kv = 1 that is Tc
blocks for the whole chip (32 at N = 4096, Bc = 128, on 132 SMs), each ``group`` times as long
as an MHA block; and in a causal grid the block of j = 0, which visits every row block, sets the
launch's end. H200, 2026-12-02 (ncu, ``experiments run window``, fp16, B = 1, H = 16, N = 4096,
d = 64, causal): the backward kernel took 0.54 ms with H_kv = 16, 1.01 ms with H_kv = 4 and
3.97 ms with H_kv = 1 for the same work.

Split s ways (s a divisor of the group), the API runs the same kernel on K and V repeated s times
per head (``repeat_interleave``: K/V head j becomes heads j s ... j s + s - 1) with a group of
group / s, so each block loops over group / s query heads (query head h then reads repeated
head h // (group / s), a copy of its own K/V head), and dK, dV are the sums of the s partial
gradients (summed in fp32 and rounded to the inputs' format; in fp16 / bf16 each partial was
already rounded by the kernel, as flash-attention's split-KV partials are). The kernel's K/V reads and dK/dV writes grow s-fold, its
other traffic and its FLOPs are unchanged; the repeat (read K, V, write s copies) and the sums
(read s partials, write one) run outside our kernels (torch on the device, NumPy on the host).

``auto_kv_split`` picks the s whose launch the runtime model's list schedule ends first
(``runtime.shared_makespan``: blocks in launch order -- heaviest tiles first over all heads for
a causal-like mask, as the kernels start them -- on sm_count x blocks_per_sm slots, a block's
length its row-block trips x group / s, co-resident blocks sharing their SM), ties to the
smaller s (less copying). Splits are tried while the split grid stays within ``MAX_WAVES``
full waves of the slots: past that a grid has blocks enough to balance and a split only adds
copies. Pure Python: no numba.
"""
from __future__ import annotations

import numbers
from functools import lru_cache

from .blocks import BlockGrid
from .hardware import Hardware
from .occupancy import occupancy, resources
from .runtime import shared_makespan
from .tiling import Tiling

#: Splits are tried while the split grid has at most this many full waves of blocks.
MAX_WAVES = 4


def checked_kv_split(value, group: int) -> int | None:
    """``kv_split`` as an int (or None): ValueError unless it is None or a positive divisor of
    ``group`` (query heads a K/V head; 1 without grouping)."""
    if value is None:
        return None
    if (not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1
            or group % value):
        raise ValueError(f"kv_split must be None or a positive divisor of the group ({group} query "
                         f"heads a K/V head), got {value!r}")
    return int(value)


def divisors(n: int) -> tuple[int, ...]:
    """The positive divisors of n, ascending."""
    return tuple(s for s in range(1, n + 1) if n % s == 0)


@lru_cache(maxsize=1024)
def _best_split(trips: tuple[int, ...], units: int, group: int, heaviest_first: bool,
                sms: int, per_sm: int) -> int:
    slots = sms * per_sm
    best, best_end = 1, None
    for s in divisors(group):
        if s > 1 and units * s * len(trips) > MAX_WAVES * slots:
            break
        share = group // s
        if heaviest_first:
            work = [n * share for n in trips for _ in range(units * s)]
        else:
            work = [n * share for n in trips] * (units * s)
        end = shared_makespan(work, sms, per_sm, lambda k: float(k))
        if best_end is None or end < best_end * (1 - 1e-9):
            best, best_end = s, end
    return best


def auto_kv_split(grid: BlockGrid, units: int, group: int, heaviest_first: bool, sms: int,
                  blocks_per_sm: int) -> int:
    """The split (a divisor of ``group``) of the shortest backward launch (module docstring).

    grid: the K/V blocks' row-block ranges (``BlockGrid``: ``na[j]`` row blocks visited by
    K/V block j); units: B x H_kv, the K/V heads; heaviest_first: whether the kernel starts its
    blocks tile by tile over all heads (causal-like masks); sms, blocks_per_sm: the slots."""
    for name, value in (("units", units), ("group", group), ("sms", sms),
                        ("blocks_per_sm", blocks_per_sm)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if group == 1:
        return 1
    return _best_split(tuple(int(n) for n in grid.na), units, group, bool(heaviest_first), sms,
                       blocks_per_sm)


def backward_blocks_per_sm(kernel: str, tiling: Tiling, d: int, causal: bool,
                           hardware: Hardware) -> int:
    """Blocks of the backward ``kernel`` an SM holds: from its recorded ptxas registers
    (``occupancy.resources``, the MHA kernel of that tiling, d and causal), or where that
    configuration was never recorded from its threads and shared memory with every thread at
    the hardware's register maximum (a lower bound)."""
    try:
        return resources(kernel, tiling, d, causal).occupancy(hardware).blocks_per_sm
    except LookupError:
        return occupancy(hardware, tiling.threads_for(kernel), hardware.max_registers_per_thread,
                         tiling.smem_bytes(kernel, d)).blocks_per_sm


def split_copy_bytes(workload, s: int) -> tuple[int, int]:
    """(read, write) bytes of the copies a split ``s`` adds around the backward's kernels, each
    element read once and written once (a lower bound: how torch's ``repeat_interleave`` and
    ``sum`` move them through L1 and L2 is theirs): K and V repeated s times (read 2 H_kv N_k d
    elements, write s times that), the s partial dK, dV summed in fp32 (read 2 s H_kv N_k d
    elements, write 2 H_kv N_k d fp32 sums) and, for 2-byte formats, the sums rounded (read the
    fp32 sums, write 2 bytes each); x B. (0, 0) at s = 1."""
    if s == 1:
        return 0, 0
    e = workload.dtype_bytes
    kv = 2 * workload.BH_kv * workload.N_k * workload.d     # K and V elements
    read, write = kv * e + s * kv * e, s * kv * e + kv * 4
    if e != 4:
        read, write = read + kv * 4, write + kv * e
    return read, write
