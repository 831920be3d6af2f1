"""Launch plans (``numba_flash.plans``) without a GPU: a ``Replay`` packs each launch as numba-cuda
passes its arguments and, replayed, hands the driver the new data pointers in their slots (also
where the recorded call's inputs aliased); calls a plan cannot take have no key. The driver and
``launch.launch_tensors`` are stand-ins here; tests/test_gpu_plans.py runs the real ones."""
import ctypes

import numpy as np
import pytest
from numba.cuda import types

from numba_flash import launch as launch_module
from numba_flash import plans

torch = pytest.importorskip("torch")


class _Kernel:
    handle = 0x1234


class _Driver:
    """Records cuLaunchKernel's arguments, the parameters read back through their pointers."""

    def __init__(self, kinds):
        self.kinds, self.launches = kinds, []

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        values = [ctypes.cast(params[i], ctypes.POINTER(kind)).contents.value
                  for i, kind in enumerate(self.kinds)]
        self.launches.append(((function.value, gx, gy, gz, bx, by, bz, smem, stream), values))
        return 0


ARRAY = types.Array(types.float32, 1, "C")
#: per parameter numba-cuda passes for (array, array, float32, int64): 7 per 1-D array
KINDS = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
         ctypes.c_int64, ctypes.c_int64] * 2 + [ctypes.c_float, ctypes.c_int64]


@pytest.fixture
def stand_ins(monkeypatch):
    recorded = []

    def launch_tensors(kernel, grid, threads, smem, *args):
        key = (kernel, None, tuple(map(launch_module._kind, args)))
        launch_module._plans[key] = (_Kernel(), (ARRAY, ARRAY, types.float32, types.int64))
        recorded.append(args)

    monkeypatch.setattr(launch_module, "launch_tensors", launch_tensors)
    monkeypatch.setattr(launch_module, "_plans", {})
    driver = _Driver(KINDS)
    monkeypatch.setattr(plans, "_driver", lambda: driver)
    return recorded, driver


def test_replay_packs_like_numba_and_fills_each_slot(stand_ins):
    recorded, driver = stand_ins
    x = torch.zeros(6)

    def launches(run, a, b):
        run("kernel", (3, 2), 128, 4096, a, b, np.float32(0.5), 7)

    replay = plans.Replay(launches, x, x)           # recorded with both slots the same tensor
    assert len(recorded) == 1
    a, b = torch.zeros(6), torch.zeros(6)
    replay.replay(a.data_ptr(), b.data_ptr())
    (dims, values), = driver.launches
    assert dims == (0x1234, 3, 2, 1, 128, 1, 1, 4096, None)
    assert values == [None, None, 6, 4, a.data_ptr(), 6, 4, None, None, 6, 4, b.data_ptr(), 6, 4, 0.5, 7]
    replay.replay(b.data_ptr(), a.data_ptr())       # new pointers each call, nothing else
    assert driver.launches[1][1][4] == b.data_ptr() and driver.launches[1][1][11] == a.data_ptr()


def test_failed_launch_raises_with_the_driver_error(stand_ins, monkeypatch):
    _, driver = stand_ins
    monkeypatch.setattr(driver, "cuLaunchKernel", lambda *args: 1, raising=False)
    monkeypatch.setattr(driver, "cuGetErrorName", lambda err, out: 0, raising=False)
    x = torch.zeros(6)
    replay = plans.Replay(lambda run, a, b: run("kernel", 1, 32, 0, a, b, np.float32(1), 1), x, x)
    with pytest.raises(RuntimeError, match="cuLaunchKernel failed"):
        replay.replay(x.data_ptr(), x.data_ptr())


def test_the_recorded_call_is_not_kept_alive(stand_ins):
    x = torch.zeros(6)
    replay = plans.Replay(lambda run, a, b: run("kernel", 1, 32, 0, a, b, np.float32(1), 1), x, x)
    assert replay._slots is None


def test_scalars_are_taken_from_each_call(stand_ins):
    """A ``Scalar`` argument is launched with the recording call's value and refilled, by its
    index, from each replay's ``scalars``; the other arguments stay as recorded."""
    recorded, driver = stand_ins
    x = torch.zeros(6)
    replay = plans.Replay(lambda run, a, b: run("kernel", 1, 32, 0, a, b, np.float32(2), plans.SEED[1]),
                          x, x, scalars=(5, 7))
    assert recorded[0][-1] == 7 and replay._scalars is None
    for word in (11, 2**32 - 1):
        replay.replay(x.data_ptr(), x.data_ptr(), scalars=(0, word))
        assert driver.launches[-1][1][-2:] == [2.0, word]


def test_planned_dropout_takes_the_seed_words_from_each_call():
    from numba_flash import checks

    drop = checks.dropout(0.25, 2**40 + 9)
    planned, words = plans.planned_dropout(drop)
    assert planned == (*plans.SEED, *drop[2:]) and words == (9, 2**8)
    assert plans.planned_dropout(checks.NO_DROPOUT) == (checks.NO_DROPOUT, ())


def test_no_plan_without_torch_cuda_tensors():
    x = torch.zeros(2, 2, 4, 8)
    assert plans.key("forward", (x, x, x), (False,)) is None          # CPU tensors
    assert plans.key("forward", (np.zeros((2, 2, 4, 8)),) * 3, ()) is None


def test_plans_are_kept_least_recently_used_first_out(monkeypatch):
    monkeypatch.setattr(plans, "PLANS", type(plans.PLANS)())
    monkeypatch.setattr(plans, "PLANS_KEPT", 2)
    for k in ("a", "b"):
        plans.remember(k, k.upper())
    assert plans.get("a") == "A"          # a used: b is now the oldest
    plans.remember("c", "C")
    assert list(plans.PLANS) == ["a", "c"] and plans.get("b") is None and plans.get(None) is None


def test_options_key_with_their_types_inside_tuples():
    """window=(128.0, 0) and (True, 0) compare equal to (128, 0): each must meet the checks."""
    keys = {plans._typed(w) for w in ((128, 0), (128.0, 0), (True, 0), (128, False))}
    assert len(keys) == 4
    assert plans._typed((128, 0)) == plans._typed((128, 0))
    assert plans._typed(None) != plans._typed(False)
