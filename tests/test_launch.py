"""Register caps that let every block launch: the GPU's register file is four 16 K files, one
per sub-partition, and a block's warps are dealt to them in turn. And the shared-memory opt-in
that launch() leaves to a pre-launch callback."""
from types import SimpleNamespace

import pytest

import numba_flash as nf
from numba_flash import launch

KERNELS = ["flash_forward_tc", "flash_backward_tc", "flash_forward_v2", "flash_backward"]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("d", [64, 128])
def test_register_cap_fits_the_fullest_sub_partition(monkeypatch, kernel, d):
    monkeypatch.setattr(launch, "simulator_enabled", lambda: False)
    for br in range(16, 513, 16):
        for bc in (16, 32, 64, 128):
            if br * bc > 16384:        # the FFMA layout's 1024-thread limit (Tiling refuses)
                continue
            tiling = nf.Tiling(br, bc)
            if kernel.endswith("_tc") and not tiling.suits_mma(kernel):
                continue
            if tiling.threads_for(kernel) > 1024:
                continue
            warps = -(-tiling.threads_for(kernel) // 32)
            cap = launch.jit_options(kernel, tiling, d).get("max_registers", 255)
            per_warp = -(-cap * 32 // 256) * 256        # allocated in units of 256 registers
            assert per_warp * -(-warps // 4) <= 16384, (tiling, cap)


def test_ten_warp_block_gets_168_registers(monkeypatch):
    """Tiling(160, 32) on tensor cores: 10 warps, 3 on one sub-partition. The old fit, 65536 /
    320 rounded down to 200 registers a thread, did not launch (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
    on the H200)."""
    monkeypatch.setattr(launch, "simulator_enabled", lambda: False)
    assert launch.jit_options("flash_forward_tc", nf.Tiling(160, 32), 128) == {"max_registers": 168}
    assert launch.jit_options("flash_forward_tc", nf.Tiling(256, 32), 128) == {"max_registers": 128}
    assert launch.jit_options("flash_forward_tc", nf.Tiling(128, 32), 128) == {}


def test_shared_memory_opt_in_is_set_once_per_overload_and_device(monkeypatch):
    """numba-cuda caches a kernel's launch configuration, so launch() adds one callback per size
    (the same object each time); the callback calls the driver only where the overload's limit
    on that device is still below the size."""
    import weakref

    from numba.cuda.cudadrv import driver as driver_module

    calls = []
    fake = SimpleNamespace(cuKernelSetAttribute=lambda attr, nbytes, handle, device: calls.append((nbytes, handle)))
    monkeypatch.setattr(driver_module, "driver", fake)
    monkeypatch.setattr(launch, "_raised", weakref.WeakKeyDictionary())

    class Overload:   # what numba-cuda hands a pre-launch callback: get_cufunc() is per device
        def __init__(self, handle):
            self.device = 0
            self._codelibrary = SimpleNamespace(get_cufunc=lambda: SimpleNamespace(
                handle=(handle, self.device), device=SimpleNamespace(id=self.device)))

    callback = launch._opt_in(100_000)
    assert launch._opt_in(100_000) is callback
    first, second = Overload(1), Overload(2)
    for compiled in (first, first, second, first):
        callback(compiled, None)
    launch._opt_in(80_000)(first, None)       # already allowed more
    launch._opt_in(120_000)(first, None)      # raised again
    first.device = 1
    callback(first, None)                     # another device's function
    assert calls == [(100_000, (1, 0)), (100_000, (2, 0)), (120_000, (1, 0)), (100_000, (1, 1))]
