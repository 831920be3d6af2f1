"""Two things Numba's CUDA simulator needs to run our kernels quickly and right. Use only when
``memory.simulator_enabled()``.

The simulator runs every CUDA thread as a Python thread, and it releases a barrier only after
the launching thread, polling, has seen every thread wait. So a launch mostly waits for turns
at the GIL, and Python's default 5 ms switch interval makes those waits long. ``fast_turns()``
shortens the interval for the length of a launch. Measured on the d = 256 tensor-core backward
of tests/test_kernels.py (2-core machine, 2026-11-29): 10.7-21 s at 5 ms, 7.5 s at 1 ms, 5.0 s
at 0.2 ms, 193 s at 50 ms.

The simulator also makes a static shared array (``cuda.shared.array(shape, dtype)``) when one
of its source lines first asks for it, and it does so without a lock. Two threads can both find
none, each make its own, and then write to different arrays. With short turns this happened in
the mma emulation's fragment exchange (a wrong d = 256 output, 1 run in the suite).
``install()`` replaces the method with one that allocates under a lock. It keys the arrays by
(file, line) of the caller, as the simulator does, but reads the caller's frame instead of
formatting the whole stack on every call.
"""
from __future__ import annotations

import sys
import threading
from contextlib import contextmanager

import numpy as np

#: Python's thread switch interval (s) during a simulated launch.
SWITCH_INTERVAL = 2e-4
_LOCK = threading.Lock()


@contextmanager
def fast_turns():
    """Python's thread switch interval at SWITCH_INTERVAL inside the block, restored after."""
    default = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        yield
    finally:
        sys.setswitchinterval(default)


def install() -> None:
    """Make the simulator's static shared arrays race-free (idempotent)."""
    from numba.cuda import types
    from numba.cuda.np import numpy_support
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    unlocked = FakeCUDAShared.array
    if getattr(unlocked, "race_free", False):
        return

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:   # dynamic shared memory (no allocation), or its error
            return unlocked(self, shape, dtype, alignment)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with _LOCK:
            found = self._allocations.get(key)
            if found is None:
                found = self._allocations[key] = np.empty(shape, dtype)
        return found

    array.race_free, array.unlocked = True, unlocked
    FakeCUDAShared.array = array
