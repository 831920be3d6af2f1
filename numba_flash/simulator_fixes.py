"""What Numba's CUDA simulator needs to run our kernels quickly and right. Use only when
``memory.simulator_enabled()``.

The simulator runs every CUDA thread of a block as a Python thread, and it releases a barrier
only after the launching thread, polling every thread's flag in a busy loop, has seen them all
wait: the poller competes for the GIL with the threads it waits for, and most of a launch went
to the poll (py-spy, tensor-core backward at (1, 2, 37, 24): 72 % of the samples in the poll's
``is_alive`` loop). ``install()`` replaces the block's run with one that starts its threads and
joins them, and ``syncthreads`` with a condition-variable barrier that the last thread to arrive
opens (threads that returned no longer count, as in the simulator's own rule); an exception in
one thread opens the barrier for the others, which then stop, and is raised from the launch.
Each device-function call also swapped its module's ``cuda`` global for the launch's fake module
and back, under two locks (30 % of the samples); ``install()`` makes a call inside a launch swap
its module once and keep it swapped until the launch ends. Python's default 5 ms switch
interval still makes every hand-over of the GIL slow; ``fast_turns()`` shortens it for the
length of a launch. Measured on the d = 256 tensor-core backward of tests/test_kernels.py with
the polling simulator (2-core machine, 2026-11-29): 10.7-21 s at 5 ms, 7.5 s at 1 ms, 5.0 s at
0.2 ms, 193 s at 50 ms.

The simulator also makes a static shared array (``cuda.shared.array(shape, dtype)``) when one
of its source lines first asks for it, and it does so without a lock. Two threads can both find
none, each make its own, and then write to different arrays. With short turns this happened in
the mma emulation's fragment exchange (a wrong d = 256 output, 1 run in the suite).
``install()`` replaces the method with one that allocates under a lock. It keys the arrays by
(file, line) of the caller, as the simulator does, but reads the caller's frame instead of
formatting the whole stack on every call; it allocates them NaN-filled (floats) or zeroed
(integers: the mma emulation's turn counters), see ``fresh_shared``.
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


class _Barrier:
    """``__syncthreads()`` for the Python threads of one simulated block: ``wait`` returns when
    every thread still running has called it; ``leave`` takes a returning thread out of the
    count; ``fail`` releases every waiter with an error (another thread raised)."""

    def __init__(self, threads: int):
        self._cond = threading.Condition()
        self._running = threads
        self._waiting = 0
        self._generation = 0
        self.failed = False

    def _open(self):
        self._waiting = 0
        self._generation += 1
        self._cond.notify_all()

    def wait(self):
        with self._cond:
            generation = self._generation
            self._waiting += 1
            if self._waiting == self._running:
                self._open()
            while generation == self._generation and not self.failed:
                self._cond.wait()
            if self.failed:
                raise RuntimeError("another thread of the block raised")

    def leave(self):
        with self._cond:
            self._running -= 1
            if self._waiting and self._waiting == self._running:
                self._open()

    def fail(self):
        with self._cond:
            self.failed = True
            self._cond.notify_all()


def _run_block(self, grid_point, *args):
    """BlockManager.run: one block's threads, started together and joined; the first
    exception (not an abort it caused) is raised, as the simulator does."""
    from numba.cuda.simulator.kernel import BlockThread

    barrier = _Barrier(int(np.prod(self._block_dim)))
    first = []

    def target():
        try:
            self._f(*args)
        except BaseException:
            with _LOCK:
                if not first:
                    first.append(threading.current_thread())
            barrier.fail()
            raise
        finally:
            barrier.leave()

    threads = [BlockThread(target, self, grid_point, point, self._debug)
               for point in np.ndindex(*self._block_dim)]
    for t in threads:
        t.barrier = barrier
        t.start()
    for t in threads:
        t.join()
    if first:
        raise first[0].exception[0].with_traceback(first[0].exception[1])


def _syncthreads(self):
    """BlockThread.syncthreads through the block's barrier."""
    self.barrier.wait()


def fresh_shared(shape, dtype) -> np.ndarray:
    """A new static shared array: NaN for floats (CUDA leaves shared memory undefined, and a
    kernel that reads an element before writing it should show it, as poisoned outputs do),
    0 for integers (the mma emulation's turn counters count from 0)."""
    if np.issubdtype(dtype, np.floating):
        return np.full(shape, np.nan, dtype)
    return np.zeros(shape, dtype)


#: id(module globals) -> the open swap of their ``cuda`` for the running launch's fake module
_pins: dict = {}


def _call(self, *args):
    """FakeCUDAKernel.__call__: a device function called inside a launch runs with its module
    swapped once for the launch (pinned), not swapped and restored on every call."""
    from numba.cuda.simulator import kernel as sim

    context = sim._kernel_context
    if context is None:        # a launch, or a device function called from host code
        try:
            return _call.unpinned(self, *args)
        finally:
            if not self._device:
                for swap in _pins.values():
                    swap.__exit__(None, None, None)
                _pins.clear()
    key = id(self.fn.__globals__)
    if key not in _pins:
        with _LOCK:
            if key not in _pins:
                swap = sim.swapped_cuda_module(self.fn, context)
                swap.__enter__()
                _pins[key] = swap
    return self.fn(*args)


def install() -> None:
    """Make the simulator's static shared arrays race-free and its barriers blocking
    (idempotent)."""
    from numba.cuda import types
    from numba.cuda.np import numpy_support
    from numba.cuda.simulator.kernel import BlockManager, BlockThread, FakeCUDAKernel
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    BlockManager.run, BlockThread.syncthreads = _run_block, _syncthreads
    if FakeCUDAKernel.__call__ is not _call:
        _call.unpinned = FakeCUDAKernel.__call__
        FakeCUDAKernel.__call__ = _call

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
                found = self._allocations[key] = fresh_shared(shape, dtype)
        return found

    array.race_free, array.unlocked = True, unlocked
    FakeCUDAShared.array = array
