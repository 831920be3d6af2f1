"""Where the API's tensors live: host/device conversion, output allocation, and one hook.

Every array a public entry point hands to a kernel passes through the active ``Memory`` object,
which also names it (Q, K, V, O, L, ...). ``Memory`` puts NumPy inputs on the device and leaves
device arrays where they are (no copy). Outputs of a call on torch tensors come from torch's
caching allocator, handed to the kernels as numba device arrays and to the caller as the
torch tensors themselves: ``cuda.device_array`` calls cuMemAlloc each
time (130-230 us of host time an output on the H200 machine, against ~40 us) and cuMemFree
later. ``numba_flash.instrument`` swaps in a memory that keeps everything on the host wrapped in
counting arrays, so that under Numba's CUDA simulator each element a kernel loads or stores is
counted per tensor.

``poison_outputs()`` makes every output and workspace start as NaN, so an element a kernel
forgets to write shows up in the tests.
"""
from __future__ import annotations

import contextlib
import sys

import numpy as np
from numba import config, cuda

from .precision import HALF_NAN_BITS


def simulator_enabled() -> bool:
    return bool(config.ENABLE_CUDASIM)


def _torch_allocation_device(like):
    """The device to allocate outputs on with torch, or None (then ``cuda.device_array``): when
    ``like`` is a torch tensor on a GPU whose current torch stream is the legacy default stream,
    the one our kernels launch on. Torch hands a freed block to the next allocation on the
    stream it was allocated on; on another stream that reuse would not wait for our kernels.
    (torch is never imported here.)"""
    torch = sys.modules.get("torch")
    if simulator_enabled() or torch is None or not isinstance(like, torch.Tensor) or not like.is_cuda:
        return None
    return like.device if torch.cuda.current_stream(like.device).cuda_stream == 0 else None


def torch_fast_path(memory, *xs) -> bool:
    """Whether a call on ``xs`` may skip numba's arrays (``launch.launch_tensors``): all are
    torch CUDA tensors, on torch's legacy default stream (``_torch_allocation_device``), and
    ``memory`` is the plain, unpoisoned ``Memory``."""
    torch = sys.modules.get("torch")
    return (torch is not None and type(memory) is Memory and not memory.poison
            and all(isinstance(x, torch.Tensor) for x in xs)
            and _torch_allocation_device(xs[0]) is not None)


def poison_fill(dtype):
    """What a poisoned output starts as: NaN; for the uint16 patterns of a half-precision output
    the bits of a NaN (``precision.HALF_NAN_BITS``); for other integers (a dropout mask) their
    largest value, which no kernel writes there."""
    dtype = np.dtype(dtype)
    if dtype == np.uint16:
        return HALF_NAN_BITS
    return np.iinfo(dtype).max if dtype.kind in "ui" else np.nan


def is_device_array(x) -> bool:
    """True for numba device arrays, CUDA torch tensors (whose bfloat16 ones raise on
    ``__cuda_array_interface__``) and any object exposing ``__cuda_array_interface__``."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return x.is_cuda
    if hasattr(x, "__cuda_array_interface__"):
        return True
    return simulator_enabled() and type(x).__name__ == "FakeCUDAArray"


def c_layout(x) -> np.ndarray:
    """x as a C-contiguous array with C strides on every axis: ``np.ascontiguousarray`` keeps
    the stride of a length-1 axis as it is (x[None] has stride 0 there), which numba's device
    arrays then cannot reshape without a copy ("operation requires copying")."""
    x = np.ascontiguousarray(x)
    strides = tuple(int(np.prod(x.shape[i + 1:], dtype=np.int64)) * x.itemsize for i in range(x.ndim))
    return x if x.strides == strides else x.copy()


class Memory:
    """Default placement: NumPy in -> copied to the device; device arrays used in place."""

    poison = False

    def input(self, x, name):
        if is_device_array(x):
            return x if simulator_enabled() else cuda.as_cuda_array(x)
        return cuda.to_device(c_layout(x))

    def output(self, shape, dtype, name, like=None):
        """A new device array of ``dtype`` (float32, or uint16 for the bits of a half-precision
        output); ``like``: the call's first input as the caller passed it, which decides the
        allocator (see ``_torch_allocation_device``) and, for uint16, the torch dtype."""
        if self.poison:
            return cuda.to_device(np.full(shape, poison_fill(dtype), dtype=dtype))
        device = _torch_allocation_device(like)
        if device is not None:
            return torch_output(shape, dtype, like, device, poison=False)
        return cuda.device_array(shape, dtype=dtype)

    def result(self, x, on_host):
        """What the caller gets back: NumPy when the inputs were NumPy; for torch inputs the
        torch tensor under the output (of their dtype: numba has no bfloat16); else the device
        array (uint16 patterns as they are: ``precision.as_format``)."""
        tensor = getattr(x, "torch_tensor", None)
        if tensor is not None:
            return tensor
        return x.copy_to_host() if on_host else x


def torch_dtype(dtype, like):
    """The torch dtype of an output of numpy ``dtype``: for uint16, the half-precision dtype of
    ``like`` (a torch tensor), or float16 where there is none (fa2_fp16x3's workspaces of fp16
    parts, whose bits only the kernels read); else the same-named torch dtype."""
    torch = sys.modules["torch"]
    if np.dtype(dtype) != np.uint16:
        return getattr(torch, np.dtype(dtype).name)
    return torch.float16 if like is None else like.dtype


def torch_output(shape, dtype, like, device, poison: bool, sync=True):
    """An output of ``dtype`` (uint16: ``torch_dtype``'s) in a new torch tensor on ``device``,
    NaN-filled when ``poison``: the numba device array on it (``cuda_view``), which carries the
    tensor for ``Memory.result`` to give back."""
    torch = sys.modules["torch"]
    tdtype = torch_dtype(dtype, like)
    if poison:
        tensor = torch.full(shape, float("nan"), dtype=tdtype, device=device)
    else:
        tensor = torch.empty(shape, dtype=tdtype, device=device)
    array = cuda_view(tensor, dtype, sync)
    try:
        array.torch_tensor = tensor   # what ``result`` gives back
    except AttributeError:            # (an array type that takes no attributes)
        pass
    return array


def cuda_view(tensor, dtype, sync=True):
    """A numba device array on a torch tensor's memory (which it keeps alive), as ``dtype``
    (uint16: the tensor's 16-bit patterns, through an int16 view: torch gives bfloat16 no array
    interface)."""
    options = {} if sync else {"sync": False}
    if np.dtype(dtype) == np.uint16:
        return cuda.as_cuda_array(tensor.view(sys.modules["torch"].int16), **options).view(np.uint16)
    return cuda.as_cuda_array(tensor, **options)


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
