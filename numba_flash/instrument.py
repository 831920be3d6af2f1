"""Exact global-memory traffic of the real kernels, counted under Numba's CUDA simulator.

``count_traffic(fn, *args, **kwargs)`` calls a public entry point (``flash_attention``,
``standard_attention_backward``, ...) with NumPy inputs, but routes every tensor through a
``CountingMemory``: inputs, outputs and workspaces are NumPy arrays of a subclass whose scalar
``__getitem__``/``__setitem__`` count one element read/written for the tensor they belong to.
The simulator hands such arrays to the kernels as they are, so the counts are the kernels' own
loads and stores, element by element. An atomic add is counted as one read and one write (the
simulator's own implementation reads twice; it is replaced by an equivalent one for the count).

The result is a ``simulator.report.TrafficReport`` of the same shape as ``simulator.predict``'s.
Requires ``NUMBA_ENABLE_CUDASIM=1`` before numba is imported; keep sizes tiny (N <~ 64).
"""
from __future__ import annotations

import contextlib
import threading
from collections import Counter

import numpy as np

from . import api, memory, precision

#: Which algorithm of ``simulator.predict`` each entry point (and its options) runs.
_ALGORITHM_OF = {
    api.standard_attention: lambda kw: "standard_forward",
    api.standard_attention_backward: lambda kw: "standard_backward",
    api.flash_attention: lambda kw: (
        "flash_forward_fp16x3" if kw.get("algorithm") == api.FP16X3
        else api.forward_kernel(kw.get("algorithm", "fa2"), kw["format"])),
    api.flash_attention_backward: lambda kw: (
        "flash_backward_deterministic" if kw.get("deterministic", False)
        else "flash_backward_fp16x3" if kw.get("algorithm") == api.FP16X3
        else api.backward_kernels(kw.get("algorithm", "fa2"), False, kw["format"])[0]),
}


class TensorCounter:
    """Element reads and writes of one named tensor; shared by all views of it."""

    def __init__(self, name: str, counts: Counter, lock: threading.Lock):
        self.name, self._counts, self._lock = name, counts, lock

    def add(self, kind: str) -> None:
        with self._lock:   # the simulator runs each CUDA thread as a Python thread
            self._counts[(self.name, kind)] += 1


class CountingArray(np.ndarray):
    """An ndarray that counts scalar element accesses; slices and reshapes share the counter."""

    counter: TensorCounter | None = None

    def __array_finalize__(self, obj):
        self.counter = getattr(obj, "counter", None)

    def _is_element(self, index) -> bool:
        if not isinstance(index, tuple):
            index = (index,)
        return len(index) == self.ndim and all(isinstance(i, (int, np.integer)) for i in index)

    def __getitem__(self, index):
        if self.counter is not None and self._is_element(index):
            self.counter.add("reads")
        return super().__getitem__(index)

    def __setitem__(self, index, value):
        if self.counter is not None and self._is_element(index):
            self.counter.add("writes")
        super().__setitem__(index, value)


class CountingMemory(memory.Memory):
    """Keeps every tensor on the host as a CountingArray inside the simulator's device array."""

    poison = True   # outputs start as NaN: a missed write shows in the results

    def __init__(self):
        self.counts: Counter = Counter()
        self.lock = threading.Lock()

    def _wrap(self, host: np.ndarray, name: str):
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        counting = host.view(CountingArray)
        counting.counter = TensorCounter(name, self.counts, self.lock)
        return FakeCUDAArray(counting)

    def input(self, x, name):
        return self._wrap(np.array(x, copy=True, order="C"), name)

    def output(self, shape, dtype, name, like=None):
        return self._wrap(np.full(shape, memory.poison_fill(dtype), dtype=dtype), name)

    def result(self, x, on_host):
        return np.array(x._ary, copy=True).view(np.ndarray)


@contextlib.contextmanager
def _atomic_add_as_one_read_one_write():
    from numba.cuda.simulator import kernelapi

    original = kernelapi.FakeCUDAAtomic.add

    def add(self, array, index, val):
        with kernelapi.addlock:
            old = array[index]
            array[index] = old + val
        return old

    kernelapi.FakeCUDAAtomic.add = add
    try:
        yield
    finally:
        kernelapi.FakeCUDAAtomic.add = original


def count_traffic(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` (a public numba_flash entry point, NumPy inputs) under the CUDA
    simulator and return the ``TrafficReport`` of its kernels' global-memory element accesses."""
    from simulator.report import TrafficReport

    if not memory.simulator_enabled():
        raise RuntimeError("count_traffic needs Numba's CUDA simulator: set NUMBA_ENABLE_CUDASIM=1 "
                           "before numba is imported")
    if fn not in _ALGORITHM_OF:
        names = ", ".join(f.__name__ for f in _ALGORITHM_OF)
        raise ValueError(f"fn must be one of the public entry points ({names}), got {fn!r}")
    fmt = precision.format_of(args[0]) if args else "float32"
    algorithm = _ALGORITHM_OF[fn]({**kwargs, "format": fmt})
    if (fmt in precision.HALF and fn is api.flash_attention_backward
            and algorithm != "flash_backward_half"):
        raise ValueError(f"count_traffic of flash_attention_backward on {fmt} inputs with "
                         f"algorithm={kwargs.get('algorithm', 'fa2')!r}, deterministic="
                         f"{kwargs.get('deterministic', False)}: those widen the inputs to float32 "
                         "first (only algorithm='fa2' has half-precision kernels)")
    counting = CountingMemory()
    with memory.using(counting), _atomic_add_as_one_read_one_write():
        fn(*args, **kwargs)
    reads = {name: n for (name, kind), n in counting.counts.items() if kind == "reads"}
    writes = {name: n for (name, kind), n in counting.counts.items() if kind == "writes"}
    return TrafficReport.from_hbm_counts(algorithm, reads, writes,
                                         dtype_bytes=precision.ITEMSIZE.get(fmt, 4))
