"""How much written data L2 still holds, dirty, when a kernel ends: ncu on a streaming kernel.

ncu counts the DRAM bytes written while the kernel runs; L2 is write-back and evicts lazily, so
the last lines a kernel writes are still in L2 when it ends and leave later. A kernel that reads
``size`` bytes and writes ``size`` (``torch.mul(a, 2, out=b)``, sizes far above the L2)
therefore shows ``size - residue`` bytes of DRAM writes. Caches are flushed before the kernel
(ncu's default), so its reads come from DRAM. Three measurements: torch's copy (``measure``)
and three torch kernels at sizes about L2's (``measure_sweep``), for the record; and the
hot-set sweep (``measure_hot``), a numba kernel written as ours are, whose residue over its
write share is the capacity the cost model uses (``MachineRates.l2_dirty_capacity_bytes``,
``simulator.local.dirty_residue``). H200, 2026-12-02 to 12-04: torch's kernels leave more (mul,
half of its bytes written: 26.5 MB; addcmul, a quarter: 15.2 MB) than the numba kernel with
the same shares (19.3 and 10.5 MB) and than our streaming kernels (softmax, a half: 19.3-20.0
MB; D = rowsum(dO O), a third: 11-12 MB).
"""
from __future__ import annotations

import json

import numpy as np
from numba import cuda, float32

from .microbench import Measurement
from .ncu import profile_child

SIZES = (256 * 2**20, 1024 * 2**20)
METRICS = "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum"
CHILD = ("import sys, torch; n = int(sys.argv[1]) // 4; a = torch.ones(n, device='cuda'); "
         "b = torch.empty_like(a); torch.cuda.synchronize(); torch.mul(a, 2.0, out=b); "
         "torch.cuda.synchronize()")
MEASURED_BY = ("ncu --launch-skip 1 --launch-count 1: dram__bytes_write.sum of torch.mul(a, 2, out=b), "
               "size bytes read and written; residue = size - DRAM writes")


def measure(gpu: bool) -> list[Measurement]:
    """One row per size (``l2_dirty_residue_bytes``), or one row saying why nothing was measured."""
    if not gpu:
        return [Measurement("l2_dirty_residue_bytes", None, "bytes", MEASURED_BY,
                            note="simulator: not a measurement")]
    rows = []
    for size in SIZES:
        kernels, stderr = profile_child(METRICS, CHILD, [str(size)], ("--launch-skip", "1", "--launch-count", "1"))
        if kernels is None:
            return [Measurement("l2_dirty_residue_bytes", None, "bytes", MEASURED_BY, note=stderr)]
        if not kernels or "dram_write_bytes" not in kernels[0]:
            rows.append(Measurement("l2_dirty_residue_bytes", None, "bytes", MEASURED_BY,
                                    detail=f"size {size}",
                                    note=f"ncu gave no reading: {stderr.strip()[-200:]}"))
            continue
        k = kernels[0]
        rows.append(Measurement("l2_dirty_residue_bytes", size - k["dram_write_bytes"], "bytes",
                                MEASURED_BY, detail=f"size {size}: DRAM read {k['dram_read_bytes']:.0f}, "
                                f"write {k['dram_write_bytes']:.0f} bytes, {k['gpu_time_ns']:.0f} ns"))
    return rows


# ---- the sweep: what the residue depends on -------------------------------------------------
#: (kind, bytes read per byte written): a write-only stream, the copy above, and three reads per
#: write -- the forward's Q, K, V -> O share of compulsory bytes
SWEEP_KINDS = (("fill", 0), ("mul", 1), ("addcmul", 3))
#: bytes written: below, about and above the 60 MB L2 (the attention kernels write 4-135 MB)
SWEEP_SIZES = tuple(m * 2**20 for m in (4, 16, 64, 256))
SWEEP_CHILD = """
import sys, torch
sizes = [int(s) for s in sys.argv[1].split(",")]
runs = []
for n in (s // 4 for s in sizes):
    a, b, c = (torch.full((n,), 1.5, device="cuda") for _ in range(3))
    out = torch.empty_like(a)
    runs += [lambda out=out: out.fill_(2.0), lambda a=a, out=out: torch.mul(a, 2.0, out=out),
             lambda a=a, b=b, c=c, out=out: torch.addcmul(a, b, c, out=out)]
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for run in runs:
    run()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
"""
SWEEP_MEASURED_BY = ("ncu --profile-from-start off: bytes written - dram__bytes_write.sum of torch "
                     "fill_ / mul / addcmul (0, 1, 3 bytes read a byte written), caches flushed before each")


def sweep_rows(kernels: list[dict]) -> list[Measurement]:
    """``l2_dirty_residue_sweep_bytes`` rows from ncu's readings of SWEEP_CHILD's kernels, in
    its order (each size, each kind); the detail names kind, size and the DRAM bytes. The model
    reads none of these (``measure_hot``'s capacity instead)."""
    rows = []
    configs = [(size, kind, reads) for size in SWEEP_SIZES for kind, reads in SWEEP_KINDS]
    for (size, kind, reads), k in zip(configs, kernels):
        detail = {"kind": kind, "write_bytes": size, "read_bytes": reads * size,
                  "write_share": 1 / (1 + reads), "dram_write_bytes": k["dram_write_bytes"],
                  "dram_read_bytes": k["dram_read_bytes"], "gpu_time_ns": k["gpu_time_ns"]}
        rows.append(Measurement("l2_dirty_residue_sweep_bytes", size - k["dram_write_bytes"], "bytes",
                                SWEEP_MEASURED_BY, detail=json.dumps(detail)))
    return rows


def measure_sweep(gpu: bool) -> list[Measurement]:
    """The sweep's rows, or one row saying why nothing was measured."""
    def none(note: str) -> list[Measurement]:
        return [Measurement("l2_dirty_residue_sweep_bytes", None, "bytes", SWEEP_MEASURED_BY, note=note)]

    if not gpu:
        return none("simulator: not a measurement")
    kernels, stderr = profile_child(METRICS, SWEEP_CHILD, [",".join(map(str, SWEEP_SIZES))],
                                    ("--profile-from-start", "off"))
    if kernels is None:
        return none(stderr)
    expected = len(SWEEP_SIZES) * len(SWEEP_KINDS)
    if len(kernels) != expected or any("dram_write_bytes" not in k for k in kernels):
        return none(f"ncu gave {len(kernels)} readings of {expected}: {stderr.strip()[-200:]}")
    return sweep_rows(kernels)


# ---- the hot-set sweep: does data the kernel keeps re-reading shrink the residue? --------------
#: The attention kernels leave far less dirty than a copy with their share of writes (H200,
#: 2026-12-03 levels: the FA2 forwards, a quarter of their compulsory bytes written, 2.6-9 MB;
#: torch's addcmul, the same share, 15.2 MB), and their K/V (Q/dO) tiles are re-read by every
#: row block of a head while its blocks run. This sweep streams ``reads`` words read per word
#: written (the write share 1 / (1 + reads)) beside a hot buffer of HOT_MIB re-read all the
#: while (HOT_PER_ELEMENT sector-strided words per element written, so that the whole buffer is
#: swept again after every few MB streamed), with and without SPIN dependent FMAs per element
#: (a kernel that keeps DRAM busy, and one that leaves it mostly idle).
HOT_WRITE_BYTES = 64 * 2**20
HOT_READS = (1, 3)
HOT_MIB = (0, 8, 16, 32, 48)
HOT_PER_ELEMENT = 2
SPIN = (0, 256)
HOT_MEASURED_BY = ("ncu --profile-from-start off: bytes written - dram__bytes_write.sum of a "
                   "numba kernel streaming reads and writes beside a re-read hot buffer, caches "
                   "flushed before each")


def hot_configs() -> list[tuple[int, int, int]]:
    """(reads per write, hot buffer MiB, spin FMAs per element) of each launch, in order."""
    return [(reads, hot, spin) for spin in SPIN for reads in HOT_READS for hot in HOT_MIB]


def make_hot_kernel():
    """The sweep's kernel: ``out[e] = sum of a[j n + e] (j < reads) + hot words + spin`` over a
    grid-stride loop (n = out.size); hot word h of element e at ``8 (e HOT_PER_ELEMENT + h) mod
    hot_words`` (one 32-byte sector apart)."""
    @cuda.jit
    def stream_hot(out, a, reads, hot, hot_words, spin):
        n = out.size
        e = cuda.grid(1)
        while e < n:
            v = float32(0.0)
            for j in range(reads):
                v += a[j * n + e]
            if hot_words > 0:
                for h in range(HOT_PER_ELEMENT):
                    v += hot[(8 * (e * HOT_PER_ELEMENT + h)) % hot_words]
            for _ in range(spin):
                v = v * float32(0.5) + float32(0.5)
            out[e] = v
            e += cuda.gridsize(1)
    return stream_hot


def run_hot(configs, write_bytes: int, profile: bool = False, blocks: int = 4 * 132,
            threads: int = 256) -> list:
    """Launch the sweep's kernel once per config (inputs all ones; by default 4 blocks of 256
    threads an H200 SM, grid-stride), under the profiler's start/stop when ``profile`` (after
    one unprofiled launch each: compiling, warming up); the ``out`` arrays copied back, in
    order (none when profiling)."""
    kernel = make_hot_kernel()
    n = write_bytes // 4
    a = cuda.to_device(np.ones(max(r for r, _, _ in configs) * n, np.float32))
    hot = cuda.to_device(np.ones(max(max(h for _, h, _ in configs) * 2**18, 1), np.float32))
    out = cuda.device_array(n, np.float32)
    launches = [(r, h * 2**18, s) for r, h, s in configs]
    for r, words, s in launches:
        kernel[blocks, threads](out, a, r, hot, words, s)
    cuda.synchronize()
    if profile:
        cuda.profile_start()
    results = []
    for r, words, s in launches:
        kernel[blocks, threads](out, a, r, hot, words, s)
        cuda.synchronize()
        if not profile:
            results.append(out.copy_to_host())
    if profile:
        cuda.profile_stop()
    return results


HOT_CHILD = ("import sys; from experiments.common.l2_residue import run_hot, hot_configs; "
             "run_hot(hot_configs(), int(sys.argv[1]), profile=True)")


def hot_rows(kernels: list[dict]) -> list[Measurement]:
    """``l2_dirty_residue_hot_bytes`` rows from ncu's readings of HOT_CHILD's kernels, in
    ``hot_configs`` order (the detail names reads, write share, hot MiB, spin and the DRAM
    bytes and time), then for each launch without a hot buffer an ``l2_dirty_capacity_bytes``
    row: its residue over its write share, the L2 capacity whose write share stays dirty
    (``simulator.local.dirty_residue``; ``MachineRates`` takes the median)."""
    rows, capacity = [], []
    for (reads, hot, spin), k in zip(hot_configs(), kernels):
        detail = {"reads_per_write": reads, "write_share": 1 / (1 + reads), "hot_bytes": hot * 2**20,
                  "spin": spin, "write_bytes": HOT_WRITE_BYTES,
                  "dram_write_bytes": k["dram_write_bytes"], "dram_read_bytes": k["dram_read_bytes"],
                  "gpu_time_ns": k["gpu_time_ns"]}
        residue = HOT_WRITE_BYTES - k["dram_write_bytes"]
        rows.append(Measurement("l2_dirty_residue_hot_bytes", residue, "bytes", HOT_MEASURED_BY,
                                detail=json.dumps(detail)))
        if not hot:
            capacity.append(Measurement("l2_dirty_capacity_bytes", residue * (1 + reads), "bytes",
                                        HOT_MEASURED_BY + "; residue / write share",
                                        detail=json.dumps(detail)))
    return rows + capacity


def measure_hot(gpu: bool) -> list[Measurement]:
    """The hot-set sweep's rows, or one row saying why nothing was measured."""
    def none(note: str) -> list[Measurement]:
        return [Measurement("l2_dirty_residue_hot_bytes", None, "bytes", HOT_MEASURED_BY, note=note)]

    if not gpu:
        return none("simulator: not a measurement")
    kernels, stderr = profile_child(METRICS, HOT_CHILD, [str(HOT_WRITE_BYTES)],
                                    ("--profile-from-start", "off", "--kernel-name", "regex:stream_hot"))
    if kernels is None:
        return none(stderr)
    expected = len(hot_configs())
    if len(kernels) != expected or any("dram_write_bytes" not in k for k in kernels):
        return none(f"ncu gave {len(kernels)} readings of {expected}: {stderr.strip()[-200:]}")
    return hot_rows(kernels)
