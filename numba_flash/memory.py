"""Where the API's tensors live: host/device conversion, output allocation, and one hook.

Every array a public entry point hands to a kernel passes through the active ``Memory`` object,
which also names it (Q, K, V, O, L, ...). ``Memory`` puts NumPy inputs on the device and leaves
device arrays where they are (no copy). Outputs of a call whose inputs are torch tensors come
from torch's caching allocator (wrapped as numba device arrays): ``cuda.device_array`` calls
cuMemAlloc each time, 130-230 us of host time an output on the H200 machine, against ~40 us. ``numba_flash.instrument`` swaps in a memory that keeps
everything on the host wrapped in counting arrays, so that under Numba's CUDA simulator each
element a kernel loads or stores is counted per tensor.

``poison_outputs()`` makes every output and workspace start as NaN, so an element a kernel
forgets to write shows up in the tests.
"""
from __future__ import annotations

import contextlib
import sys

import numpy as np
from numba import config, cuda


def simulator_enabled() -> bool:
    return bool(config.ENABLE_CUDASIM)


def _torch_device(x):
    """x's device when x is a torch tensor on a GPU, else None (torch is never imported here)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor) and x.is_cuda:
        return x.device
    return None


def is_device_array(x) -> bool:
    """True for numba device arrays and any object exposing ``__cuda_array_interface__``."""
    if hasattr(x, "__cuda_array_interface__"):
        return True
    return simulator_enabled() and type(x).__name__ == "FakeCUDAArray"


class Memory:
    """Default placement: NumPy in -> copied to the device; device arrays used in place."""

    poison = False
    #: the latest input's torch device, or None: where outputs are allocated by torch
    torch_device = None

    def input(self, x, name):
        self.torch_device = _torch_device(x)
        if is_device_array(x):
            return x if simulator_enabled() else cuda.as_cuda_array(x)
        return cuda.to_device(np.ascontiguousarray(x))

    def output(self, shape, dtype, name):
        if self.poison:
            return cuda.to_device(np.full(shape, np.nan, dtype=dtype))
        if self.torch_device is not None:
            torch = sys.modules["torch"]
            tensor = torch.empty(shape, dtype=getattr(torch, np.dtype(dtype).name), device=self.torch_device)
            return cuda.as_cuda_array(tensor)   # the array keeps the tensor (its owner) alive
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
