"""numba_flash.simulator_fixes: Numba's CUDA simulator with race-free static shared arrays."""
import sys
import threading
import time

import numpy as np
import pytest
from numba import config

import numba_flash  # noqa: F401  (installs the fix under the simulator)
from numba_flash import simulator_fixes
from numba_flash.simulator_fixes import fast_turns

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="the simulator's own classes")


def first_allocations(shared, threads=32):
    """The arrays ``threads`` threads get from one source line of a fresh block, all at once."""
    got, start = [], threading.Barrier(threads)

    def body():
        start.wait()
        got.append(shared.array((64, 12), np.float32))   # one line: one array for the block

    workers = [threading.Thread(target=body) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return got


def test_threads_share_one_static_array_per_line(monkeypatch):
    """A slow allocation widens the window between looking for the line's array and storing
    a new one: the simulator's own method then hands out several arrays; the fix, one."""
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    empty, fresh = np.empty, simulator_fixes.fresh_shared

    def slow(allocate):
        def allocation(*args, **kwargs):
            time.sleep(1e-3)
            return allocate(*args, **kwargs)
        return allocation

    monkeypatch.setattr(np, "empty", slow(empty))                      # the simulator's own
    monkeypatch.setattr(simulator_fixes, "fresh_shared", slow(fresh))  # the fix's
    for _ in range(5):
        got = first_allocations(FakeCUDAShared(0))
        assert len({id(a) for a in got}) == 1
    monkeypatch.setattr(FakeCUDAShared, "array", FakeCUDAShared.array.unlocked)
    got = first_allocations(FakeCUDAShared(0))
    assert len({id(a) for a in got}) > 1      # the race the fix closes


def test_lines_still_get_their_own_arrays_and_dynamic_memory_is_shared():
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    shared, f32 = FakeCUDAShared(64), np.dtype(np.float32)

    def one_line():
        return shared.array(4, f32)

    a = shared.array(4, f32)
    assert one_line() is one_line() and one_line() is not a
    d0, d1 = shared.array(0, f32), shared.array(0, f32)
    d0[3] = 7.0
    assert d1[3] == 7.0 and d0.size == 16


def test_fast_turns_restores_the_switch_interval():
    before = sys.getswitchinterval()
    with fast_turns():
        assert sys.getswitchinterval() < before
    assert sys.getswitchinterval() == before
