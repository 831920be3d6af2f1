"""SM<->L2 read sectors per 32 bytes copied, for each way our kernels copy HBM tiles to SRAM: ncu
on a copy kernel.

Why: the fp16 / bf16 kernels' tile loads (``cp.async.cg`` of 16 bytes a thread, SASS
``LDGSTS.E.BYPASS.128``, one instruction per 16 bytes of the tiles: checked in their SASS) measure
1.5x the tiled count of SM<->L2 read sectors at every shape on the H200 (README, levels), where the
fp32 kernels' register loads measure 1.00-1.04x. This copy takes the attention kernels out of the
question: each block copies its own contiguous ``BLOCK_BYTES`` of a buffer far larger than L2
into a shared-memory ring, 16 bytes a thread a step, lanes on consecutive 16-byte chunks (a warp:
512 contiguous bytes, as the tile copies), by one of

- ``cp.async.cg.16`` -- the half kernels' tile copy (L1 bypassed);
- ``cp.async.ca.4`` -- four 4-byte copies through L1 (the half backward's lse / D rows);
- ``ld.global.cg.v4`` -- a 16-byte load to registers (L1 bypassed), then a shared store;
- ``ld.global.ca`` -- four 4-byte loads through L1, then shared stores;
- ``cp.async.cg.16.padded`` -- the 16-byte cp.async into rows of ``ROW_BYTES`` (128) bytes
  stored at a stride of ``PADDED_ROW_BYTES`` (144: an odd number of 16-byte chunks, as the half
  kernels' ``Tiling.half_stride`` pads their tiles), so that every other row lands 16 bytes off
  the 32-byte alignment its global row has.

Each is one launch of the same grid; ncu reads the levels experiment's counters of each. The
rows: ``copy_sectors_<mode>`` = the xbar's read sectors into L1 (``l1tex__m_xbar2l1tex_
read_sectors_mem_lg_op_ld``, what the levels' SM<->L2 reads count) over bytes / 32, so 1 means
every byte crossed once; the detail has L2's own count of read sectors from the SMs and the
request coalescer's, and the block's shared memory. Under the simulator the kernel runs (tests
check that it copies), nothing is measured.

Shared memory: the ring lives in dynamic shared memory, and each mode runs once per size of
``SMEM_BYTES``: the 18 KiB ring alone, and the ring inside a block of as much shared memory as
the attention kernels take (100 to 227 KB), which leaves L1 a few KB beside it. H200,
2026-12-02: every contiguous mode 1.00 at every size (cp.async.ca.4 1.03 at 18 KiB), the padded
copy 1.50 at every size -- the half kernels' 1.5x (``simulator.sectors.cp_async_row_sectors``).
"""
from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
from numba import cuda, uint16, uint32, uint64

from .microbench import Measurement, primitives

MODES = ("cp.async.cg.16", "cp.async.ca.4", "ld.global.cg.v4", "ld.global.ca", "cp.async.cg.16.padded")
CG16, CA4, LDG_CG4, LDG_CA, CG16_PADDED = range(len(MODES))
THREADS = 128
BLOCK_BYTES = 64 * 1024                   # each block's contiguous share of the buffer
RING_WORDS = 4 * 1024                     # 16 KiB of shared memory: 8 steps of 128 x 16 bytes
ROW_BYTES, PADDED_ROW_BYTES = 128, 144    # cp.async.cg.16.padded: a row, its stride in the ring
PADDED_RING_WORDS = RING_WORDS * PADDED_ROW_BYTES // ROW_BYTES     # 18 KiB
#: A block's dynamic shared memory in each launch of a mode: the ring alone, then the ring in a
#: block as large as the attention kernels' (one block an SM at the largest).
SMEM_BYTES = (4 * PADDED_RING_WORDS, 100 * 1024, 160 * 1024, 227 * 1024)
SIZE = 1024 * 2**20                       # the buffer: 1 GiB, far above the 60 MB L2
METRICS = {"l1tex__m_xbar2l1tex_read_sectors_mem_lg_op_ld.sum": "xbar_ld_sectors",
           "lts__t_sectors_srcunit_tex_op_read.sum": "l2_read_sectors",
           "lrc__lrc2xbar_sectors_op_read.sum": "lrc_read_sectors",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "l1_ld_sectors",
           "dram__bytes_read.sum": "dram_read_bytes"}
MEASURED_BY = ("ncu --kernel-name copy_sectors: l1tex__m_xbar2l1tex_read_sectors_mem_lg_op_ld.sum "
               "over bytes / 32, each block copying its 64 KiB of a 1 GiB buffer to shared memory "
               "(the detail's smem_bytes a block)")


@lru_cache(maxsize=None)
def copy_kernel():
    """copy_sectors(mode, words, halves, out): block b copies words[b W : (b + 1) W] (W =
    BLOCK_BYTES / 4 uint32 words; ``halves`` is the same buffer as uint16, which the 16-byte
    cp.async takes, as in the half kernels) into a shared ring by ``MODES[mode]``, 16 bytes a
    thread a step; out[b THREADS + t] = the XOR of the words thread t saw land (no copy is dead).
    The ring is the first 16 KiB (padded: 18 KiB) of the block's dynamic shared memory
    (launched with at least that much), seen as uint32 and as uint16."""
    from numba_flash.kernels.half import half_ops

    h, p = half_ops("float16"), primitives()
    cp_async16, cp_async4, commit, wait_all = h.cp_async16, h.cp_async4, h.commit, h.wait_all
    ldg4, ldg1_ca, sts4, sts1 = p.ldg4, p.ldg1_ca, p.sts4, p.sts1
    per_block, step_words = BLOCK_BYTES // 4, 4 * THREADS
    steps, ring_steps = per_block // step_words, RING_WORDS // step_words
    row_words, padded_words = ROW_BYTES // 4, PADDED_ROW_BYTES // 4

    @cuda.jit
    def copy_sectors(mode, words, halves, out):
        ring = cuda.shared.array(0, uint32)       # the 4-byte copies' and loads'
        ring16 = cuda.shared.array(0, uint16)     # the 16-byte cp.async's (the same bytes)
        tid = cuda.threadIdx.x
        base = uint64(cuda.blockIdx.x) * uint64(per_block)
        acc = uint32(0)
        for s in range(steps):
            src = base + uint64(s * step_words + 4 * tid)
            w = (s % ring_steps) * step_words + 4 * tid
            chunk16 = mode == CG16 or mode == CG16_PADDED
            if mode == CG16_PADDED:                  # word w of the ring -> its row, padded
                at = uint64((w // row_words) * padded_words + w % row_words)
            else:
                at = uint64(w)
            if chunk16:
                cp_async16(ring16, 2 * at, halves, 2 * src, 16)
            elif mode == CA4:
                for e in range(4):
                    cp_async4(ring, at + uint64(e), words, src + uint64(e), 4)
            elif mode == LDG_CG4:
                w0, w1, w2, w3 = ldg4(words, src)
                sts4(ring, at, uint32(w0 ^ w1 ^ w2 ^ w3))
            else:
                for e in range(4):
                    (w,) = ldg1_ca(words, src + uint64(e))
                    sts1(ring, at + uint64(e), w)
            if s % ring_steps == ring_steps - 1:    # the ring is full: let the copies land
                commit()
                wait_all()
                cuda.syncthreads()
                acc ^= uint32(ring16[2 * at]) if chunk16 else ring[at]
                cuda.syncthreads()                   # (before the next round overwrites it)
        out[cuda.blockIdx.x * THREADS + tid] = acc
    return copy_sectors


def launches(smem_sizes=SMEM_BYTES, modes=range(len(MODES))) -> list[tuple[int, int]]:
    """(shared-memory bytes, mode) of each launch, in launch order."""
    return [(smem, mode) for smem in smem_sizes for mode in modes]


def run_copies(size: int, smem_sizes=SMEM_BYTES, modes=range(len(MODES))) -> np.ndarray:
    """Launch each of ``launches(smem_sizes, modes)`` once over a ``size``-byte buffer of 0, 1,
    2, ... (the child that ncu profiles; the tests, tiny, under the simulator); returns each
    launch's ``out``."""
    from numba_flash.launch import launch

    host = np.arange(size // 4, dtype=np.uint32)
    words = cuda.to_device(host)
    halves = cuda.to_device(host.view(np.uint16))
    blocks = size // BLOCK_BYTES
    kernel = copy_kernel()
    outs = []
    for smem, mode in launches(smem_sizes, modes):
        out = cuda.device_array(blocks * THREADS, np.uint32)
        launch(kernel, blocks, THREADS, smem, mode, words, halves, out)
        outs.append(out.copy_to_host())
    return np.array(outs)


CHILD = "import sys; from experiments.common.copy_sectors import run_copies; run_copies(int(sys.argv[1]))"


def rows_from(kernels: list[dict], size: int) -> list[Measurement]:
    """One row per launch (``launches()``) from ncu's per-kernel readings (in launch order)."""
    rows = []
    for (smem, mode), k in zip(launches(), kernels):
        detail = {"smem_bytes": smem} | {name: k.get(name) for name in METRICS.values()}
        rows.append(Measurement(f"copy_sectors_{MODES[mode]}", k["xbar_ld_sectors"] / (size / 32),
                                "ratio", MEASURED_BY, detail=json.dumps(detail)))
    return rows


def measure(gpu: bool) -> list[Measurement]:
    """One row per mode, or per mode a row saying why nothing was measured."""
    def none(note: str) -> list[Measurement]:
        return [Measurement(f"copy_sectors_{mode}", None, "ratio", MEASURED_BY, note=note) for mode in MODES]

    if not gpu:
        return none("simulator: not a measurement")
    from .ncu import profile_child

    kernels, stderr = profile_child(",".join(METRICS), CHILD, [str(SIZE)],
                                    ("--kernel-name", "regex:copy_sectors"), timeout=600)
    if kernels is None:
        return none(stderr)
    if len(kernels) != len(launches()) or any("xbar_ld_sectors" not in k for k in kernels):
        return none(f"ncu gave {len(kernels)} readings: {stderr.strip()[-200:]}")
    return rows_from(kernels, SIZE)
