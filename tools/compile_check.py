"""Compile every kernel for sm_90 on a machine without a GPU, as a launch compiles it, to catch
Numba typing errors before spending device time and to read each kernel's resources.

    CUDA_HOME=/usr/local/cuda-13.0 python tools/compile_check.py [d [kind]]   # registers, spills

(kinds: the keys of SIGS; "*_half" are the half-storage kernels, fp16 then bf16)

A launch's code: numba-cuda 0.30 compiles a kernel with link-time optimisation wherever
nvJitLink is installed (``cuda.jit``'s ``lto`` defaults to it, as on the GPU machines): NVVM
emits LTO-IR for the device's architecture, sm_90a on Hopper, which nvJitLink links with
``-lto -arch=sm_90a`` and the kernel's register cap (``max_registers``,
launch.REGISTER_CAPS). ``launch_ltoir`` and ``link`` do that here (needs libnvvm, e.g. from a
CUDA toolkit, and nvJitLink: ``pip install nvidia-nvjitlink==13.0.88``, the version whose code
was checked against the GPU's, results/h100/compile/). PTX assembled by a standalone ptxas is
other code for kernels with a register cap (other spills), the same for the others.
"""
import re
import sys
import types
import warnings

from numba import cuda
from numba.cuda import dispatcher

import numba_flash as nf
from numba_flash.kernels.flash_backward import make_flash_backward_dq, make_flash_backward_kv, make_row_dot
from numba_flash.kernels.flash_backward_tc import make_flash_backward_tc
from numba_flash.kernels.flash_forward_alg1 import make_flash_forward_alg1
from numba_flash.kernels.flash_forward_fa2 import make_flash_forward_fa2
from numba_flash.kernels.flash_forward_fa2_tc import make_flash_forward_fa2_tc
from numba_flash.kernels.standard import make_ds, make_matmul, make_softmax

# device functions are compiled for "the current device": pretend it is an sm_90 part
dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
#: The architecture a launch compiles for on Hopper (numba-cuda adds the "a" features).
ARCH = (9, 0, "a")

A3, A2 = "float32[:,:,::1]", "float32[:,::1]"
H3 = "uint16[:,:,::1]"   # fp16 / bf16 patterns of the half-storage kernels
SIGS = {
    "fa2": f"({A3}, {A3}, {A3}, {A3}, {A2}, float32, int64, int64, int64)",
    "fa2_tc": "(float32[::1], float32[::1], float32[::1], float32[::1], float32[::1], float32, int64, int64, int64, int64, "
              "int64, int64, int64, float32, int64[::1], int64[::1])",
    "alg1": f"({A3}, {A3}, {A3}, {A3}, {A2}, {A2}, {A2}, float32, int64, int64, int64)",
    "bwd_tc": "(" + ", ".join(["float32[::1]"] * 9) + ", float32, float32, int64, int64, int64, int64, "
              "int64, int64, int64, float32, int64[::1], int64[::1])",
    "bwd_kv": f"({A3}, {A3}, {A3}, {A3}, {A2}, {A2}, {A3}, {A3}, {A3}, float32, float32, int64, int64, int64)",
    "bwd_dq": f"({A3}, {A3}, {A3}, {A3}, {A2}, {A2}, {A3}, float32, float32, int64, int64, int64)",
    "row_dot": "(" + ", ".join(["float32[::1]"] * 4) + ", int64)",
    "matmul": f"({A3}, {A3}, {A3}, float32, int64, int64, int64)",
    "softmax": "(float32[::1], float32[::1], int64, int64)",
    "ds": f"({A3}, {A3}, {A2}, {A3}, int64)",
    "alg1_half": f"({H3}, {H3}, {H3}, {H3}, {A2}, {A2}, {A2}, float32, int64, int64, int64)",
    "matmul_half": f"({H3}, {H3}, {H3}, float32, int64, int64, int64)",
    "softmax_half": "(uint16[::1], uint16[::1], int64, int64)",
    "ds_half": f"({H3}, {H3}, {A2}, {H3}, int64)",
    # the tensor-core fp16 / bf16 kernels (flat views: 16-bit patterns, fp32 statistics)
    "fwd_half": "(" + ", ".join(["uint16[::1]"] * 4) + ", float32[::1], float32, int64, int64, int64, int64, "
                "int64, int64, int64, float32, int64[::1], int64[::1], int64[::1])",
    "bwd_half": "(" + ", ".join(["uint16[::1]"] * 4) + ", float32[::1], float32[::1], float32[::1], "
                "uint16[::1], uint16[::1], float32, float32, int64, int64, int64, int64, int64, int64, "
                "int64, float32, int64[::1], int64[::1], int64[::1], int64[::1])",
    "convert_narrow": "(float32[::1], uint16[::1], int64)",
    # fa2_fp16x3: the fp16 forward in its fp32 mode (fp16 parts in, fp32 O and the maxima), and
    # the two kernels that prepare the parts
    "fwd_fp16x3": "(" + ", ".join(["uint16[::1]"] * 3) + ", float32[::1], float32[::1], float32, int64, "
                  "int64, int64, int64, int64, int64, int64, float32, int64[::1], int64[::1], float32[::1])",
    # ... and the fp16 backward in its fp32 mode (parts of q, k, v, dO in; fp32 lse, D, dQ, dK, dV;
    # the maxima of q, k, v and of dO)
    "bwd_fp16x3": "(" + ", ".join(["uint16[::1]"] * 4) + ", " + ", ".join(["float32[::1]"] * 5)
                  + ", float32, float32, int64, int64, int64, int64, int64, int64, int64, float32, "
                  "int64[::1], int64[::1], float32[::1], float32[::1])",
    "head_amax": "(" + ", ".join(["float32[::1]"] * 4) + ", int64, int64, int64, int64, int64)",
    "split_half": "(" + ", ".join(["float32[::1]"] * 4) + ", " + ", ".join(["uint16[::1]"] * 3)
                  + ", int64, int64, int64, int64)",
}


def kernels(d):
    t = nf.Tiling(64, 64)
    yield "fa2_tc", make_flash_forward_fa2_tc(nf.Tiling(256, 32), d, False)   # the d <= 64 default
    yield "fa2_tc", make_flash_forward_fa2_tc(nf.Tiling.kernel_default("flash_forward_tc", d), d, True)  # causal, the default at d
    yield "fa2", make_flash_forward_fa2(t, d, True)
    yield "fa2", make_flash_forward_fa2(t, d, False)
    yield "alg1", make_flash_forward_alg1(t, d, True, "float32")
    yield "bwd_tc", make_flash_backward_tc(nf.Tiling.kernel_default("flash_backward_tc", d), d, True)
    yield "bwd_kv", make_flash_backward_kv(t, d, True, True)
    yield "bwd_dq", make_flash_backward_dq(t, d, False)
    yield "row_dot", make_row_dot(128, d, True, "float32")
    yield "matmul", make_matmul(t, True, False, "float32")
    yield "softmax", make_softmax(128, True, "float32")
    yield "ds", make_ds(128, "float32")
    for fmt in ("float16", "bfloat16"):   # the half-storage kernels: cvt on load and store
        yield "alg1_half", make_flash_forward_alg1(t, d, True, fmt)
        yield "matmul_half", make_matmul(t, False, True, fmt)
        yield "softmax_half", make_softmax(128, True, fmt)
        yield "ds_half", make_ds(128, fmt)


def main(argv):
    d = int(argv[1]) if len(argv) > 1 else 64
    only = argv[2] if len(argv) > 2 else None
    for kind, kernel in kernels(d):
        if only and kind != only:
            continue
        cap = register_cap(kernel)
        print(f"{kernel.py_func.__name__:22s} {kind:12s} d={d:<4d} cap={cap or '-':<4} "
              f"{resources_report(link(launch_ltoir(kind, kernel), cap)[1])}")


def launch_ltoir(kind: str, kernel, lineinfo: bool = False) -> bytes:
    """NVVM's LTO-IR of ``kernel`` (its SIGS ``kind``) for sm_90a, without fast math, as a
    launch on Hopper compiles it; ``lineinfo``: with line information."""
    with warnings.catch_warnings():   # the def line of an unrolled (rewritten) function
        warnings.filterwarnings("ignore", message="Could not find source for function")
        ltoir, _ = cuda.compile(kernel.py_func, SIGS[kind], device=False, abi="numba", cc=ARCH,
                                output="ltoir", fastmath=False, lineinfo=lineinfo)
    return bytes(ltoir)


def register_cap(kernel) -> int | None:
    """The ``max_registers`` the kernel was jitted with (launch.jit_options), None if uncapped."""
    return kernel.targetoptions.get("max_registers")


def link(ltoir: bytes, max_registers: int | None, lineinfo: bool = False) -> tuple[bytes, str]:
    """(cubin, info log) of nvJitLink linking ``ltoir`` as numba-cuda's linker does at launch
    (cuda.core's options: ``-arch=sm_90a -lto``, ``-maxrregcount`` when capped; ``-lineinfo``
    for LTO-IR with line information); the log (``-verbose``) has ptxas -v's lines."""
    from cuda.bindings import nvjitlink   # noqa: PLC0415 (loads libnvJitLink: not on import)

    options = ["-arch=sm_90a", "-lto", "-verbose",
               *([f"-maxrregcount={max_registers}"] if max_registers else []),
               *(["-lineinfo"] if lineinfo else [])]
    handle = nvjitlink.create(len(options), options)
    try:
        nvjitlink.add_data(handle, nvjitlink.InputType.LTOIR, ltoir, len(ltoir), "kernel")
        try:
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as error:
            log = bytearray(nvjitlink.get_error_log_size(handle))
            nvjitlink.get_error_log(handle, log)
            raise RuntimeError(f"nvJitLink failed: {error}\n{log.decode(errors='replace')}") from None
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        log = bytearray(nvjitlink.get_info_log_size(handle))
        nvjitlink.get_info_log(handle, log)
    finally:
        nvjitlink.destroy(handle)
    return bytes(cubin), log.rstrip(b"\0").decode()


def linker_version() -> str:
    """What linked the tables' code, e.g. 'nvJitLink 13.0.88 -lto -arch=sm_90a'."""
    from importlib.metadata import PackageNotFoundError, version

    from cuda.bindings import nvjitlink   # noqa: PLC0415
    try:
        release = version("nvidia-nvjitlink")
    except PackageNotFoundError:
        release = ".".join(map(str, nvjitlink.version()))
    return f"nvJitLink {release} -lto -arch=sm_90a"


def link_resources(log: str) -> dict[str, int]:
    """Registers per thread, static shared memory, stack frame and spill bytes of a kernel from
    ``link``'s info log; RuntimeError with the log when it reports no register use."""
    regs = re.search(r"Used (\d+) registers", log)
    frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if not (regs and frame):
        raise RuntimeError(f"nvJitLink reported no register use:\n{log}")
    smem = re.search(r"(\d+) bytes smem", log)
    return {"registers": int(regs.group(1)), "static_smem_bytes": int(smem.group(1)) if smem else 0,
            "stack_frame_bytes": int(frame.group(1)), "spill_store_bytes": int(frame.group(2)),
            "spill_load_bytes": int(frame.group(3))}


def resources_report(log: str) -> str:
    """Registers, spills and stack frame of ``link``'s info log, in a line."""
    r = link_resources(log)
    return (f"registers {r['registers']}, stack frame {r['stack_frame_bytes']} B, "
            f"spill stores {r['spill_store_bytes']} B, spill loads {r['spill_load_bytes']} B")


if __name__ == "__main__":
    main(sys.argv)
