"""Kernel launches, including blocks that need more than 48 KB of dynamic shared memory, and
``launch_tensors``: launches on torch tensors that skip numba's per-call typing.

numba-cuda 0.30 has no public switch for the opt-in shared-memory limit (NVIDIA/numba-cuda#94),
so for such a launch a pre-launch callback sets ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``
on the overload numba-cuda is about to launch, through the driver, once per (overload, device).
(Compiling for the arguments ourselves, as before, typed them a second time every call: 31 us.)

A launch through numba's dispatcher on torch tensors costs ~0.6 ms of host time (H200 machine,
2026-12-01, tools/call_profile.py): each tensor becomes a numba device array through its array
interface (context checks, a pointer-attribute query), and every launch types each argument
and converts it again. ``launch_tensors`` does that once per (kernel, argument types): the
first launch goes through ``launch`` as any other; later ones hand the compiled kernel the
arguments numba would have built -- for each 1-D contiguous array (meminfo 0, parent 0,
size, itemsize, data pointer, shape, stride), scalars as ctypes values of the compiled types --
straight to ``cuda.core``'s launch on the current stream.
"""
from __future__ import annotations

import weakref
import ctypes
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from functools import lru_cache

import numpy as np
from numba import cuda

from simulator.tiling import H200_SMEM_PER_BLOCK, Tiling

from .memory import simulator_enabled
from .simulator_fixes import fast_turns

STATIC_SMEM_LIMIT = 48 * 1024
#: A multiprocessor's 64 K registers are four files of 16 K, one per sub-partition; a block's
#: warps are dealt to the four in turn, so the fullest holds ceil(warps / 4) of them.
REGISTERS_PER_SUBPARTITION = 16384
SUBPARTITIONS = 4
#: Per-kernel register caps (``max_registers``) on the GPU; None lets the compiler choose.
#: The CUDA simulator takes no such option, so it never sees them. flash_backward: 238
#: registers uncapped (one 256-thread block per SM), 128 gives two: 16.5 -> 17.9 TFLOP/s
#: (H200, B=4 H=16 N=4096 d=64, tools/tune_forward.py, 2026-11-29).
#: flash_forward_tc: 128 registers let two 256-thread blocks (or one of 512) share a
#: multiprocessor: 31.7 -> 36.7 TFLOP/s at 128 x 32, d = 64; applied for d <= 64 only
#: (CAPPED_UP_TO_HEAD_DIM), where the O fragments leave room; above, the block's size decides
#: (d = 128 at its default 256 x 32: 128 registers, 220 B of spill stores by ptxas, 46.3 TFLOP/s).
#: flash_backward_tc: uncapped (ptxas, sm_90, d = 64: 255 registers and 32-64 B of spills at its
#: default 32 x 128, whose 199 KB (v5: 224 KB) of shared memory allow one block a
#: multiprocessor anyway; a 128 cap spilled ~1 KB at 32 x 64 and 0.7 KB at 16 x 64 (v4));
#: 23.4 (v4), 36.3 (v5) TFLOP/s at 32 x 128, d = 64.
REGISTER_CAPS: dict[str, int | None] = {
    "flash_forward_v1": None,
    "flash_forward_v2": None,
    "flash_forward_tc": 128,
    "flash_backward": 128,
    "flash_backward_dq": None,
    "flash_backward_tc": None,
    "standard_matmul": None,
}
CAPPED_UP_TO_HEAD_DIM = {"flash_forward_tc": 64}
#: overload -> {device id: dynamic shared-memory bytes its launches may use}; an overload's
#: entry goes with it
_raised: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: The stream kernels launch on: 0 (the legacy default stream) unless ``on_stream`` says other.
_stream: ContextVar = ContextVar("numba_flash_stream", default=0)


@contextmanager
def on_stream(stream):
    """Launch every kernel inside the block on ``stream`` (a numba stream, e.g. from
    ``cuda.external_stream``), not on the legacy default stream."""
    token = _stream.set(stream)
    try:
        yield stream
    finally:
        _stream.reset(token)


def smem_alignment() -> int | None:
    """Byte alignment to declare for the kernels' dynamic shared array: 16, so that rows of
    4-float multiples can be read with LDS.128; None under the CUDA simulator, which refuses
    the option."""
    return None if simulator_enabled() else 16


def jit_options(kernel: str, tiling: Tiling, d: int = 0) -> dict:
    """Options for ``cuda.jit`` of ``kernel`` (a Tiling kernel name) launched with ``tiling`` at
    head dim ``d``: its register cap, lowered where needed so that a block of
    ``tiling.threads_for(kernel)`` threads fits one multiprocessor's registers (a block of 10
    warps puts 3 on one sub-partition: 168 registers each; 65536 / 320 rounded down to 200 fails
    to launch with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)."""
    if simulator_enabled():
        return {}
    warps = -(-tiling.threads_for(kernel) // 32)
    fit = REGISTERS_PER_SUBPARTITION // (32 * -(-warps // SUBPARTITIONS)) // 8 * 8
    cap = REGISTER_CAPS.get(kernel)
    if d > CAPPED_UP_TO_HEAD_DIM.get(kernel, d):
        cap = None
    cap = min(cap or 255, fit)
    return {} if cap >= 255 else {"max_registers": cap}


def smem_limit_bytes() -> int:
    """Largest dynamic shared memory a block may opt into on the current device."""
    if simulator_enabled():
        return H200_SMEM_PER_BLOCK
    return int(cuda.get_current_device().MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)


@lru_cache(maxsize=None)
def _opt_in(nbytes: int):
    """A pre-launch callback (numba-cuda calls it with the overload it is about to launch) that
    raises that overload's dynamic shared-memory limit on the current device to ``nbytes`` when
    it is lower: a dictionary lookup on later launches, not a typing of the arguments. (numba-cuda
    0.30's docs ask callbacks not to call CUDA; this one's driver call runs with no lock held,
    before the launch; setup.cfg keeps numba-cuda below 0.31.)"""
    def callback(compiled, _config):
        cufunc = compiled._codelibrary.get_cufunc()       # this device's function
        raised = _raised.setdefault(compiled, {})         # device id -> bytes allowed
        if raised.get(cufunc.device.id, 0) >= nbytes:
            return
        from cuda.bindings.driver import CUfunction_attribute
        from numba.cuda.cudadrv.driver import driver

        attr = CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        driver.cuKernelSetAttribute(attr, nbytes, cufunc.handle, cufunc.device.id)
        raised[cufunc.device.id] = nbytes
    return callback


def launch(kernel, grid, threads: int, smem_bytes: int, *args) -> None:
    """``kernel[grid, threads, stream, smem_bytes](*args)`` on the ``on_stream`` stream, raising
    the block's shared-memory limit first when ``smem_bytes`` exceeds the 48 KB every kernel
    gets by default (on the simulator: with short thread turns, ``simulator_fixes.fast_turns``)."""
    configured = kernel[grid, threads, _stream.get(), smem_bytes]   # cached by numba-cuda: add the callback once
    if smem_bytes > STATIC_SMEM_LIMIT and not simulator_enabled():
        callback = _opt_in(smem_bytes)
        if callback not in configured.pre_launch_callbacks:
            configured.pre_launch_callbacks.append(callback)
    with fast_turns() if simulator_enabled() else nullcontext():
        configured(*args)


#: (dispatcher, device, argument kinds) -> (the compiled kernel's cuda.core kernel, its
#: argument types), filled by the first launch of each
_plans: dict = {}


def _kind(arg):
    """What decides the compiled kernel of an argument: a tensor's dtype, a scalar's type."""
    dtype = getattr(arg, "dtype", None)
    return (dtype, arg.dim()) if dtype is not None and hasattr(arg, "data_ptr") else type(arg)


def launch_tensors(kernel, grid, threads: int, smem_bytes: int, *args) -> None:
    """``launch`` of ``kernel`` on 1-D contiguous torch CUDA tensors (half-precision ones as
    their 16-bit patterns) and scalars, typed and converted once per (kernel, device, argument
    kinds); see the module docstring. Not for the simulator."""
    from cuda.core import LaunchConfig
    from cuda.core import launch as core_launch
    from numba.cuda import types
    from numba.cuda.cudadrv import driver

    from .memory import cuda_view

    device = next((a.device.index for a in args if hasattr(a, "data_ptr")), None)
    key = (kernel, device, tuple(_kind(a) for a in args))
    plan = _plans.get(key)
    if plan is None:
        numba_args = [cuda_view(a, np.uint16 if a.element_size() == 2 else np.float32)
                      if hasattr(a, "data_ptr") else a for a in args]
        launch(kernel, grid, threads, smem_bytes, *numba_args)
        overload = kernel.overloads[tuple(kernel.typeof_pyval(a) for a in numba_args)]
        _plans[key] = (overload._codelibrary.get_cufunc().kernel, overload.argument_types)
        return
    cukernel, argument_types = plan
    kernelargs = []
    for ty, arg in zip(argument_types, args):
        if isinstance(ty, types.Array):
            n, itemsize = arg.numel(), arg.element_size()
            kernelargs += [0, 0, n, itemsize, arg.data_ptr(), n, itemsize]
        elif ty == types.float32:
            kernelargs.append(ctypes.c_float(arg))
        else:
            kernelargs.append(getattr(ctypes, f"c_{ty}")(arg))
    grid = grid if isinstance(grid, tuple) else (grid,)
    config = LaunchConfig(grid=grid, block=threads, shmem_size=smem_bytes)
    core_launch(driver._to_core_stream(_stream.get()), config, cukernel, *kernelargs)
