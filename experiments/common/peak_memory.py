"""Peak device memory of a case, measured in a child process:
``python -m experiments.common.peak_memory CASES.json RESULT.json``.

Numba's allocations (the kernels' outputs and workspaces, and the inputs, which the child
allocates with ``cuda.to_device``) go through an External Memory Management plugin that counts
live bytes: +size on allocation, -size when the allocation is released.  The peak of that count
during a case is its footprint -- the same notion as torch's ``max_memory_allocated`` (numba's
deferred frees do not inflate it).  Out-of-memory is caught and reported per case; after the
first out-of-memory of a method, its larger sizes are not tried.
"""
from __future__ import annotations

import gc
import json
import sys
import weakref
from pathlib import Path

from numba import cuda
from numba.cuda.cudadrv import driver as numba_driver

from .cases import Case, host_inputs, run_case
from .measure import failure_note, is_out_of_memory


class PeakTrackingMemoryManager(numba_driver.NumbaCUDAMemoryManager):
    """Numba's own device allocator, counting live and peak bytes of its allocations."""

    live_bytes = 0
    peak_bytes = 0

    def memalloc(self, size):
        ptr = self._attempt_allocation(lambda: numba_driver.driver.cuMemAlloc(size))
        release = numba_driver._alloc_finalizer(self, ptr, ptr, size)
        cls = type(self)

        def finalizer():
            cls.live_bytes -= size
            release()

        mem = numba_driver.AutoFreePointer(weakref.proxy(self.context), ptr, size, finalizer=finalizer)
        self.allocations[ptr] = mem
        cls.live_bytes += size
        cls.peak_bytes = max(cls.peak_bytes, cls.live_bytes)
        return mem.own()

    @classmethod
    def reset_peak(cls) -> int:
        cls.peak_bytes = cls.live_bytes
        return cls.live_bytes


def measure(case: Case) -> int:
    """Peak bytes live while the case's inputs exist and its calls run (inputs included)."""
    gc.collect()  # drop what an earlier failed case may still hold in reference cycles
    before = PeakTrackingMemoryManager.reset_peak()
    inputs = {name: cuda.to_device(x) for name, x in host_inputs(case, seed=0).items()}
    outputs = run_case(case, inputs)
    cuda.synchronize()
    del outputs, inputs
    return PeakTrackingMemoryManager.peak_bytes - before


def main(spec_path: str, result_path: str) -> None:
    cuda.set_memory_manager(PeakTrackingMemoryManager)
    cases = [Case.from_json(c) for c in json.loads(Path(spec_path).read_text())]
    total = cuda.current_context().get_memory_info().total
    results, out_of_memory = [], set()
    for case in cases:
        entry = {"case": case.to_json(), "peak_bytes": None, "note": "", "device_memory_bytes": total}
        if case.method in out_of_memory:
            entry["note"] = "not run: out of memory at a smaller N"
        else:
            try:
                entry["peak_bytes"] = measure(case)
            except Exception as exc:  # OOM is a result here; anything else is noted per case
                entry["note"] = failure_note(exc)
                if is_out_of_memory(exc):
                    out_of_memory.add(case.method)
        results.append(entry)
        Path(result_path).write_text(json.dumps(results))


if __name__ == "__main__":
    main(*sys.argv[1:3])
