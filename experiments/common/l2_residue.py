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

import shutil
import subprocess
import sys

from .microbench import Measurement
from .ncu import parse_ncu_csv

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
    if shutil.which("ncu") is None:
        return [Measurement("l2_dirty_residue_bytes", None, "bytes", MEASURED_BY, note="ncu not found")]
    rows = []
    for size in SIZES:
        out = subprocess.run(["ncu", "--clock-control", "none", "--print-units", "base", "--csv",
                              "--launch-skip", "1", "--launch-count", "1", "--metrics", METRICS,
                              sys.executable, "-c", CHILD, str(size)],
                             capture_output=True, text=True, timeout=300)
        kernels = parse_ncu_csv(out.stdout)
        if not kernels or "dram_write_bytes" not in kernels[0]:
            rows.append(Measurement("l2_dirty_residue_bytes", None, "bytes", MEASURED_BY,
                                    detail=f"size {size}",
                                    note=f"ncu gave no reading: {out.stderr.strip()[-200:]}"))
            continue
        k = kernels[0]
        rows.append(Measurement("l2_dirty_residue_bytes", size - k["dram_write_bytes"], "bytes",
                                MEASURED_BY, detail=f"size {size}: DRAM read {k['dram_read_bytes']:.0f}, "
                                f"write {k['dram_write_bytes']:.0f} bytes, {k['gpu_time_ns']:.0f} ns"))
    return rows
