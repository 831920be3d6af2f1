"""The launched code, reproduced without a GPU: numba-cuda 0.30 compiles a kernel with LTO
wherever nvJitLink is installed (``cuda.jit``'s ``lto`` defaults to ``_have_nvjitlink()``), so
a launch's cubin is NVVM's LTO-IR for sm_90a linked by nvJitLink (``-lto -arch=sm_90a
-maxrregcount=CAP``), not NVVM's PTX assembled by ptxas as tools/kernel_resources.py does. This
compiles the tensor-core forward (256 x 32, not causal) at d = 32, 64, 80 that way and prints
what nvJitLink reports and the main loop's instructions and local-load bytes, to hold against
tools/device_sass.py's folders (device_vs_tables_2026-12-06.csv: 568 / 876 / 1266
instructions, 8 / 16 / 104 B, stack 8 / 24 / 120 B).

    pip download --no-deps nvidia-nvjitlink==13.0.88   # and unzip it: its lib/libnvJitLink.so.13
    CUDA_HOME=/usr/local/cuda-13.0 python results/h100/compile/lto_reproduce.py LIBNVJITLINK
"""
import ctypes
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]

from numba import cuda  # noqa: E402

from compile_check import SIGS, register_cap  # noqa: E402
from kernel_sass import nvdisasm  # noqa: E402
from numba_flash.kernels.flash_forward_fa2_tc import make_flash_forward_fa2_tc  # noqa: E402
from simulator.sass import parse, regions, tally  # noqa: E402
from simulator.tiling import Tiling  # noqa: E402

LTOIR = 3          # NVJITLINK_INPUT_LTOIR


def link(lib, ltoir: bytes, options: list[bytes]) -> tuple[bytes, str]:
    """(cubin, info log) of nvJitLink on one LTO-IR module."""
    symbol = next(s for s in (f"__nvJitLinkCreate_{v}" for v in ("13_0", "12_0")) if hasattr(lib, s))
    handle = ctypes.c_void_p()
    opts = (ctypes.c_char_p * len(options))(*options)
    assert getattr(lib, symbol)(ctypes.byref(handle), len(options), opts) == 0
    lib.nvJitLinkAddData.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                     ctypes.c_char_p]
    assert lib.nvJitLinkAddData(handle, LTOIR, ltoir, len(ltoir), b"kernel") == 0
    lib.nvJitLinkComplete.argtypes = [ctypes.c_void_p]
    assert lib.nvJitLinkComplete(handle) == 0
    size = ctypes.c_size_t()
    for name in ("GetInfoLogSize", "GetInfoLog", "GetLinkedCubinSize", "GetLinkedCubin"):
        getattr(lib, f"nvJitLink{name}").argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.nvJitLinkGetInfoLogSize(handle, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value + 1)
    lib.nvJitLinkGetInfoLog(handle, log)
    lib.nvJitLinkGetLinkedCubinSize(handle, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    lib.nvJitLinkGetLinkedCubin(handle, cubin)
    return cubin.raw, log.value.decode()


def main(libpath: str) -> None:
    lib = ctypes.CDLL(libpath)
    for d in (32, 64, 80):
        kernel = make_flash_forward_fa2_tc(Tiling(256, 32), d, False)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore")
            ltoir, _ = cuda.compile(kernel.py_func, SIGS["fa2_tc"], device=False, abi="numba",
                                    cc=(9, 0, "a"), output="ltoir", fastmath=False)
        cubin, log = link(lib, bytes(ltoir), [b"-arch=sm_90a", b"-lto", b"-verbose",
                                              f"-maxrregcount={register_cap(kernel)}".encode()])
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(cubin)
            f.flush()
            text = subprocess.run([nvdisasm(), "-c", "-hex", f.name], capture_output=True, text=True,
                                  check=True).stdout
        main_loop = next(r for r in regions(parse(text)) if r.name == "main_loop")
        counts, _ = tally(main_loop.instructions)
        report = " | ".join(line.split(":", 1)[-1].strip() for line in log.splitlines()
                            if "spill" in line or "Used" in line)
        print(f"d = {d}: {report}; main loop {counts['total']} instructions, LDL {counts['ldl_bytes']} B")


if __name__ == "__main__":
    os.environ.setdefault("CUDA_HOME", "/usr/local/cuda-13.0")
    main(sys.argv[1])
