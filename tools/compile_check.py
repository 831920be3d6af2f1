"""Compile every kernel to PTX for sm_90 on a machine without a GPU (needs libnvvm, e.g. from a
CUDA toolkit), to catch Numba typing errors before spending device time.

    python tools/compile_check.py [d [kind]]   # each kernel's registers and spills (ptxas -v)

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
SIGS = {
    "fa2": f"({A3}, {A3}, {A3}, {A3}, {A2}, float32, int64, int64, int64)",
    "fa2_tc": "(float32[::1], float32[::1], float32[::1], float32[::1], float32[::1], float32, int64, int64, int64)",
    "alg1": f"({A3}, {A3}, {A3}, {A3}, {A2}, {A2}, {A2}, float32, int64, int64, int64)",
    "bwd_tc": "(" + ", ".join(["float32[::1]"] * 9) + ", float32, float32, int64, int64, int64)",
    "bwd_kv": f"({A3}, {A3}, {A3}, {A3}, {A2}, {A2}, {A3}, {A3}, {A3}, float32, float32, int64, int64, int64)",
    "bwd_dq": f"({A3}, {A3}, {A3}, {A3}, {A2}, {A2}, {A3}, float32, float32, int64, int64, int64)",
    "row_dot": f"({A3}, {A3}, {A2}, {A3}, int64)",
    "matmul": f"({A3}, {A3}, {A3}, float32, int64, int64, int64)",
    "softmax": f"({A3}, {A3}, int64, int64, int64)",
    "ds": f"({A3}, {A3}, {A2}, {A3}, int64)",
}


def kernels(d):
    t = nf.Tiling(64, 64)
    yield "fa2_tc", make_flash_forward_fa2_tc(nf.Tiling(256, 32), d, False)   # the d <= 64 default
    yield "fa2_tc", make_flash_forward_fa2_tc(nf.Tiling.kernel_default("flash_forward_tc", d), d, True)  # causal, the default at d
    yield "fa2", make_flash_forward_fa2(t, d, True)
    yield "fa2", make_flash_forward_fa2(t, d, False)
    yield "alg1", make_flash_forward_alg1(t, d, True)
    yield "bwd_tc", make_flash_backward_tc(nf.Tiling.kernel_default("flash_backward_tc", d), d, True)
    yield "bwd_kv", make_flash_backward_kv(t, d, True, True)
    yield "bwd_dq", make_flash_backward_dq(t, d, False)
    yield "row_dot", make_row_dot(128, d, True)
    yield "matmul", make_matmul(t, True, False)
    yield "softmax", make_softmax(128, True)
    yield "ds", make_ds(128)


def main(argv):
    d = int(argv[1]) if len(argv) > 1 else 64
    only = argv[2] if len(argv) > 2 else None
    for kind, kernel in kernels(d):
        if only and kind != only:
            continue
        ptx, _ = compile_ptx(kernel.py_func, SIGS[kind], cc=(9, 0), fastmath=False)
        cap = kernel.targetoptions.get("max_registers")
        print(f"{kernel.py_func.__name__:22s} d={d:<4d} cap={cap or '-':<4} {ptxas_report(ptx, cap)}")


def ptxas_report(ptx: str, max_registers: int | None = None) -> str:
    """Registers, spills and stack frame from ``ptxas -v`` (when a CUDA toolkit is installed)."""
    if shutil.which("ptxas") is None:
        return f"ptx {len(ptx)} B (no ptxas for a register report)"
    cap = [f"-maxrregcount={max_registers}"] if max_registers else []
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        out = subprocess.run(["ptxas", "-arch=sm_90", "-v", *cap, "-o", "/dev/null", f.name],
                             capture_output=True, text=True).stderr
    regs = re.search(r"Used (\d+) registers", out)
    frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", out)
    return (f"registers {regs.group(1) if regs else '?'}, stack frame {frame.group(1)} B, "
            f"spill stores {frame.group(2)} B, spill loads {frame.group(3)} B") if frame else out


if __name__ == "__main__":
    main(sys.argv)
