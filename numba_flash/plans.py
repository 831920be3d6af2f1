"""Launch plans: a call on torch CUDA tensors that passed the checks once is replayed, on later
calls with the same shapes and options, as raw ``cuLaunchKernel`` calls whose parameters were
packed on the first call; only the data pointers change.

Why (H200, 2026-12-01, scratch profile of ``flash_attention`` on fp16 (4,16,4096,64) torch
tensors, GPU kept busy): host time per call was 256 us through the checks, 121 us with the
checks skipped (``launch.launch_tensors``: ctypes scalars, nine tensor views and cuda.core's
launch on every call), against SDPA's 26 us; at ~1 ms kernels that alone cost 0.1-0.2 of the
ratio to SDPA under per-call timing.

A plan is keyed by what the entry point's checks read (``key``): shapes, dtypes and devices of
the tensors and the options with their types. Where the checks passed for a key they pass for
any call with that key, so a replay skips them. Alignment, the one property of the data
pointers a kernel choice depends on, is read again by each replay (``aligned16``).

Dropout's seed is no part of the key: the launches take it as scalars a plan refills on each
call (``Scalar``: its two 32-bit words), so training, a new seed every step, replays too.

A ``Replay`` is built by running a call's launch sequence once with a recording ``run``
(``run(kernel, grid, threads, smem_bytes, *args)``, the signature of ``launch.launch_tensors``):
each launch goes through ``launch_tensors`` (compiling, raising the shared-memory limit) and is
then packed as numba-cuda passes it -- per 1-D array meminfo 0, parent 0, size, itemsize, data
pointer, shape, stride; scalars as the compiled types -- with each array's data pointer a slot
filled from the replayed call's tensors. Replays launch on the legacy default stream, which is a
plan's condition (as it is ``memory.torch_fast_path``'s).
"""
from __future__ import annotations

import ctypes
import sys
import threading
from collections import OrderedDict

from . import launch as _launch
from . import memory
from .checks import NO_DROPOUT

#: Plans kept, least recently used dropped first: one per distinct shape and option set.
PLANS_KEPT = 256
#: (entry point, what its checks read) -> the call's plan (a callable on the call's tensors).
PLANS: OrderedDict = OrderedDict()


def key(entry: str, tensors, options):
    """What ``entry``'s checks and launches read of a call on ``tensors`` with ``options``, or None
    where the call cannot take a plan: each tensor a contiguous torch CUDA tensor that needs no
    grad, on the current CUDA device (a replay launches in the current context); torch's
    current stream and ours the legacy default stream; the plain, unpoisoned ``Memory`` active;
    every option hashable. Each option is keyed with its type, a tuple's elements each with
    theirs (causal=1 or window=(128.0, 0) must meet the checks, not take the plan of causal=True
    or window=(128, 0), which compare equal)."""
    torch = sys.modules.get("torch")
    mem = memory.active()
    if torch is None or type(mem) is not memory.Memory or mem.poison or _launch._stream.get() != 0:
        return None
    for x in tensors:
        if type(x) is not torch.Tensor or not x.is_cuda or x.requires_grad or not x.is_contiguous():
            return None
    device = tensors[0].device
    if device.index != torch.cuda.current_device() or _current_raw_stream(torch, device) != 0:
        return None
    k = (entry, _typed(tuple(options)), *((x.shape, x.dtype, x.device) for x in tensors))
    try:
        hash(k)
    except TypeError:         # e.g. a window given as a list: the checked path
        return None
    return k


def _typed(x):
    """x with its type, recursively through tuples (equal values of other types key apart)."""
    if type(x) is tuple:
        return (tuple, tuple(map(_typed, x)))
    return (type(x), x)


def _current_raw_stream(torch, device) -> int:
    """torch's current stream on ``device`` as a CUstream integer (0: the legacy default)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)   # (~0.3 us; current_stream ~20 us)
    return raw(device.index) if raw is not None else torch.cuda.current_stream(device).cuda_stream


def get(k):
    """The plan kept for key ``k`` (None for none, or for ``k`` None)."""
    plan = PLANS.get(k) if k is not None else None
    if plan is not None:
        try:
            PLANS.move_to_end(k)
        except KeyError:      # (dropped by another thread meanwhile: the plan still works)
            pass
    return plan


def remember(k, plan):
    """Keep ``plan`` for key ``k`` (None: nothing kept); returns ``plan``."""
    if k is not None:
        PLANS[k] = plan
        if len(PLANS) > PLANS_KEPT:
            PLANS.popitem(last=False)
    return plan


def aligned16(*tensors) -> bool:
    return all(x.data_ptr() % 16 == 0 for x in tensors)


class Scalar:
    """A launch's scalar argument that a plan takes anew on every call: ``Scalar(i)`` stands, in
    the launches a ``Replay`` records, for the i-th of the call's ``scalars``."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


#: The dropout seed's two words (``checks.dropout``'s seed_lo, seed_hi) as a plan's scalars.
SEED = (Scalar(0), Scalar(1))


def planned_dropout(drop: tuple) -> tuple[tuple, tuple]:
    """(the dropout arguments a plan records, the call's scalars) for ``checks.dropout``'s
    ``drop``: the seed's words as ``SEED``, taken from each call; none without dropout."""
    if drop == NO_DROPOUT:
        return drop, ()
    return (*SEED, *drop[2:]), tuple(drop[:2])     # (seed_lo, seed_hi, keep_from, rp)


class Replay:
    """``launches(run, *slots)``'s kernel launches, run once now on ``slots`` (flat torch tensors
    or views of them) and replayed by ``replay(*data_pointers)`` with one data pointer per slot,
    in the slots' order. ``launches`` gets a view of each slot and must pass those objects
    themselves as array arguments: slots are told apart by identity, so two that alias (one
    tensor given twice) still get their own pointers. Array arguments that are no slot (the
    block lists of ``api``) keep their pointers, and the replay keeps them alive."""

    def __init__(self, launches, *slots, scalars: tuple = ()):
        # (a view each: one tensor passed as two slots becomes two objects, one per slot)
        slots = tuple(s.view(s.shape) for s in slots)
        self._slots, self._scalars = slots, scalars
        self._launches: list[_Packed] = []
        self._lock = threading.Lock()   # (a replay writes its packed pointers, then launches)
        launches(self._run, *slots)
        self._slots = self._scalars = None   # (the recorded call's tensors are not kept alive)

    def _run(self, kernel, grid, threads, smem_bytes, *args):
        values = tuple(self._scalars[a.index] if isinstance(a, Scalar) else a for a in args)
        _launch.launch_tensors(kernel, grid, threads, smem_bytes, *values)
        self._launches.append(_Packed(kernel, grid, threads, smem_bytes, args, values, self._slots))

    def replay(self, *pointers, scalars: tuple = ()) -> None:
        """The recorded launches on the call's data pointers (one a slot, in the slots' order)
        and ``scalars`` (the values of the ``Scalar`` arguments, by index)."""
        with self._lock:
            for packed in self._launches:
                packed.launch(pointers, scalars)


class _Packed:
    """One launch with its parameters packed as ctypes values (``Replay``): ``args`` as the
    launches passed them (``Scalar`` markers included), ``values`` as launched (each marker's
    value of the recorded call)."""

    def __init__(self, kernel, grid, threads, smem_bytes, args, values, slots):
        from numba.cuda import types

        device = next(a.device.index for a in values if hasattr(a, "data_ptr"))
        cukernel, argument_types = _launch._plans[(kernel, device, tuple(map(_launch._kind, values)))]
        handle = getattr(cukernel, "handle", None) or cukernel._handle
        self._function = ctypes.c_void_p(int(handle))
        self._values, self._pointers = [], []     # ctypes values; (value, slot) of each data pointer
        self._scalars = []        # (value, index) of each Scalar argument
        self._constants = []      # array arguments that are no slot, kept alive with the launch
        for ty, marker, arg in zip(argument_types, args, values):
            if isinstance(ty, types.Array):
                n, itemsize = arg.numel(), arg.element_size()
                data = ctypes.c_void_p(arg.data_ptr())
                slot = next((i for i, s in enumerate(slots) if s is arg), None)
                if slot is None:      # not a call's tensor (a block list): the same every replay
                    self._constants.append(arg)
                else:
                    self._pointers.append((data, slot))
                self._values += [ctypes.c_void_p(0), ctypes.c_void_p(0), ctypes.c_int64(n),
                                 ctypes.c_int64(itemsize), data, ctypes.c_int64(n), ctypes.c_int64(itemsize)]
            else:
                value = ctypes.c_float(arg) if ty == types.float32 else getattr(ctypes, f"c_{ty}")(arg)
                self._values.append(value)
                if isinstance(marker, Scalar):
                    self._scalars.append((value, marker.index))
        self._params = (ctypes.c_void_p * len(self._values))(*map(ctypes.addressof, self._values))
        grid = grid if isinstance(grid, tuple) else (grid,)
        self._dims = (*grid, *(1,) * (3 - len(grid)), threads, 1, 1, smem_bytes)

    def launch(self, pointers, scalars=()) -> None:
        for value, slot in self._pointers:
            value.value = pointers[slot]
        for value, index in self._scalars:
            value.value = scalars[index]
        err = _driver().cuLaunchKernel(self._function, *self._dims, None, self._params, None)
        if err:
            name = ctypes.c_char_p()
            _driver().cuGetErrorName(err, ctypes.byref(name))
            raise RuntimeError(f"cuLaunchKernel failed: {name.value.decode() if name.value else err}")


_DRIVER = []


def _driver():
    """libcuda with cuLaunchKernel's prototype (the context current on this thread: the primary
    one, which torch and numba share)."""
    if not _DRIVER:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuLaunchKernel.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                                       ctypes.c_void_p, ctypes.c_void_p]
        lib.cuLaunchKernel.restype = ctypes.c_int
        lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        _DRIVER.append(lib)
    return _DRIVER[0]
