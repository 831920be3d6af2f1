"""Compile every kernel to PTX for sm_90 on a machine without a GPU (needs libnvvm, e.g. from a
CUDA toolkit), to catch Numba typing errors before spending device time.

    python tools/compile_check.py [d [kind]]   # each kernel's registers and spills (ptxas -v)

(kinds: the keys of SIGS; "*_half" are the half-storage kernels, fp16 then bf16)

ptxas runs with the kernel's register cap (``max_registers``, launch.REGISTER_CAPS), as the
driver's JIT compiles it at launch.
"""
import re
import shutil
import subprocess
import sys
import tempfile
import types

from numba.cuda import compile_ptx
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
                "int64, float32, int64[::1], int64[::1])",
    "convert_narrow": "(float32[::1], uint16[::1], int64)",
    # fa2_fp16x3: the fp16 forward in its fp32 mode (fp16 parts in, fp32 O and the maxima), and
    # the two kernels that prepare the parts
    "fwd_fp16x3": "(" + ", ".join(["uint16[::1]"] * 3) + ", float32[::1], float32[::1], float32, int64, "
                  "int64, int64, int64, int64, int64, int64, float32, int64[::1], int64[::1], float32[::1])",
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
              f"{ptxas_report(sm90_ptx(kind, kernel), cap)}")


def sm90_ptx(kind: str, kernel) -> str:
    """PTX of ``kernel`` (its SIGS ``kind``) for sm_90, without fast math, as the API compiles it."""
    ptx, _ = compile_ptx(kernel.py_func, SIGS[kind], cc=(9, 0), fastmath=False)
    return ptx


def register_cap(kernel) -> int | None:
    """The ``max_registers`` the kernel was jitted with (launch.jit_options), None if uncapped."""
    return kernel.targetoptions.get("max_registers")


def ptxas_version() -> str:
    """The release line of ``ptxas --version``, e.g. 'Cuda compilation tools, release 13.0, V13.0.88'."""
    out = subprocess.run(["ptxas", "--version"], capture_output=True, text=True, check=True).stdout
    return next(line for line in out.splitlines() if "release" in line).strip()


def ptxas_resources(ptx: str, max_registers: int | None = None) -> dict[str, int]:
    """Registers per thread, static shared memory, stack frame and spill bytes that
    ``ptxas -arch=sm_90 -v`` reports (``-maxrregcount`` when capped); RuntimeError with
    ptxas's output when it reports no register use."""
    cap = [f"-maxrregcount={max_registers}"] if max_registers else []
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        out = subprocess.run(["ptxas", "-arch=sm_90", "-v", *cap, "-o", "/dev/null", f.name],
                             capture_output=True, text=True).stderr
    regs = re.search(r"Used (\d+) registers", out)
    frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", out)
    if not (regs and frame):
        raise RuntimeError(f"ptxas reported no register use:\n{out}")
    smem = re.search(r"(\d+) bytes smem", out)
    return {"registers": int(regs.group(1)), "static_smem_bytes": int(smem.group(1)) if smem else 0,
            "stack_frame_bytes": int(frame.group(1)), "spill_store_bytes": int(frame.group(2)),
            "spill_load_bytes": int(frame.group(3))}


def ptxas_report(ptx: str, max_registers: int | None = None) -> str:
    """Registers, spills and stack frame from ``ptxas -v`` (when a CUDA toolkit is installed)."""
    if shutil.which("ptxas") is None:
        return f"ptx {len(ptx)} B (no ptxas for a register report)"
    r = ptxas_resources(ptx, max_registers)
    return (f"registers {r['registers']}, stack frame {r['stack_frame_bytes']} B, "
            f"spill stores {r['spill_store_bytes']} B, spill loads {r['spill_load_bytes']} B")


if __name__ == "__main__":
    main(sys.argv)
