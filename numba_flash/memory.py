"""Where the API's tensors live: host/device conversion, output allocation, and one hook.

Every array a public entry point hands to a kernel passes through the active ``Memory`` object,
which also names it (Q, K, V, O, L, ...). ``Memory`` puts NumPy inputs on the device and leaves
device arrays where they are (no copy). ``numba_flash.instrument`` swaps in a memory that keeps
everything on the host wrapped in counting arrays, so that under Numba's CUDA simulator each
element a kernel loads or stores is counted per tensor.

``poison_outputs()`` makes every output and workspace start as NaN, so an element a kernel
forgets to write shows up in the tests.
"""
from __future__ import annotations

import contextlib

import numpy as np
from numba import config, cuda


def simulator_enabled() -> bool:
    return bool(config.ENABLE_CUDASIM)


def is_device_array(x) -> bool:
    """True for numba device arrays and any object exposing ``__cuda_array_interface__``."""
    if hasattr(x, "__cuda_array_interface__"):
        return True
    return simulator_enabled() and type(x).__name__ == "FakeCUDAArray"


class Memory:
    """Default placement: NumPy in -> copied to the device; device arrays used in place."""

    poison = False

    def input(self, x, name):
        if is_device_array(x):
            return x if simulator_enabled() else cuda.as_cuda_array(x)
        return cuda.to_device(np.ascontiguousarray(x))

    def output(self, shape, dtype, name):
        if self.poison:
            return cuda.to_device(np.full(shape, np.nan, dtype=dtype))
        return cuda.device_array(shape, dtype=dtype)

    def result(self, x, on_host):
        """What the caller gets back: NumPy when the inputs were NumPy, else the device array."""
        return x.copy_to_host() if on_host else x


_active = [Memory()]


def active() -> Memory:
    return _active[-1]


@contextlib.contextmanager
def using(memory: Memory):
    """Route every tensor of the public API through ``memory`` inside the block."""
    _active.append(memory)
    try:
        yield memory
    finally:
        _active.pop()


@contextlib.contextmanager
def poison_outputs():
    """Fill every output and workspace with NaN before the kernels run (for tests)."""
    memory = active()
    before = memory.poison
    memory.poison = True
    try:
        yield
    finally:
        memory.poison = before
