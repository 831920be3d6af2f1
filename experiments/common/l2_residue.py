"""How much written data L2 still holds, dirty, when a kernel ends: ncu on a streaming kernel.

ncu counts the DRAM bytes written while the kernel runs; L2 is write-back and evicts lazily, so
the last lines a kernel writes are still in L2 when it ends and leave later. A kernel that reads
``size`` bytes and writes ``size`` (``torch.mul(a, 2, out=b)``, sizes far above the L2)
therefore shows ``size - residue`` bytes of DRAM writes: the residue is what the cost model
subtracts from a launch's writes (``simulator.local.dirty_residue``, in proportion to the share
of the launch's bytes that are writes; this kernel's share is one half). Caches are flushed
before the kernel (ncu's default), so its reads come from DRAM.
"""
from __future__ import annotations

import json

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
    reads only ``l2_dirty_residue_bytes`` (the copy at sizes far above L2), not these."""
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
