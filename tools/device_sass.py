"""The kernel tables' kernels as the GPU runs them: on a GPU machine, each configuration of
tools/kernel_resources.py compiled the way a launch compiles it (numba-cuda's dispatcher: NVVM
for the device's compute capability, sm_90a on Hopper, as LTO-IR linked by nvJitLink with
``-lto`` where nvJitLink is installed -- numba-cuda's default -- else PTX), disassembled there
(``nvdisasm -c -hex``; ``-g`` of a second, line-info link of the same kind where its
instructions are the same, as tools/kernel_sass.py's ``annotated``),
written in tools/kernel_sass.py's ``--keep`` layout (FILE.sass, STAMP) with each loaded
function's attributes (attrs.json: registers, stack frame, static shared memory) and the
dispatcher's PTX of the kernel (FILE.ptx). Then, here:

    python tools/kernel_resources.py --add --from-device DIR ...
    python tools/kernel_sass.py --add --from-sass DIR ... ; python tools/kernel_loops.py --add --from-sass DIR ...

replace the tables' rows of the kernels DIR holds. Why: the tables were assembled by a
standalone ``ptxas -arch=sm_90 -maxrregcount``, and a launch links a kernel with a register cap
otherwise. Run on an H100 machine on 2026-12-06 (53 kernels at d = 32-128,
results/h100/compile/): the 31 uncapped kernels are the tables' code instruction for
instruction, 21 of the 22 capped ones are not (the tensor-core forward refills 8 / 16 / 104 B
a trip at d = 32 / 64 / 80, ncu's 8 / 16 / 100, where the tables have 0 / 12 / 180): a launch
links LTO-IR (results/h100/compile/lto_reproduce.py gives the same code without a GPU). That
run's line-info link was of PTX and gave other instructions for every kernel, so its files are
the plain disassembly, without source lines (``lines_same`` in attrs.json); it now links
line-info LTO-IR where the launch links LTO-IR.

    python3 tools/device_sass.py DIR [--max-d 128] [--jobs 16] [--only KERNEL ...] [--part K/N]

(the configurations: tools/kernel_resources.py's defaults and the committed table's other
tilings, ``table_extras``; ``--part K/N`` takes every N-th from the K-th, for calls of 10
minutes.)
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

ROOT = os.getcwd()
sys.path[:0] = [ROOT, os.path.join(ROOT, "tools")]


def _bytes(obj) -> bytes:
    """A linker result's bytes (cuda.core ObjectCode, or bytes)."""
    return bytes(obj.code if hasattr(obj, "code") else obj)


def _disasm(cubin: bytes, lines: bool) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run(["nvdisasm", "-c", "-hex", *(["-g"] if lines else []), f.name],
                              capture_output=True, text=True, check=True).stdout


def _configs(max_d):
    """The tables' configurations (tools/kernel_resources.py's defaults and the committed
    table's other tilings) with d <= ``max_d``."""
    import kernel_resources as kr
    return [c for c in kr.configurations(kr.HEAD_DIMS, kr.table_extras()) if (c.d or 0) <= max_d]


def build(i, max_d):
    import warnings
    import kernel_resources as kr
    import kernel_sass as ks
    from compile_check import SIGS
    from numba import cuda
    from numba.cuda import compile_ptx
    from numba.cuda.cudadrv import driver
    from numba_flash import kernel_cache
    from simulator.sass import parse
    c = _configs(max_d)[i]
    t0 = time.time()
    k = c.make(c.tiling)
    k.compile(SIGS[c.kind])
    (sig, ov), = k.overloads.items()
    lib = ov._codelibrary
    cc = lib._ensure_cc(None)
    cubin = _bytes(lib.get_cubin(cc=cc))
    a = lib.get_cufunc().attrs
    plain = _disasm(cubin, False)
    cap = k.targetoptions.get("max_registers")
    lto = bool(getattr(lib, "_lto", False))    # numba-cuda links LTO-IR where nvJitLink is there
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore")
        if lto:
            code, _ = cuda.compile(k.py_func, SIGS[c.kind], device=False, abi="numba", cc=cc,
                                   output="ltoir", fastmath=False, lineinfo=True)
        else:
            code, _ = compile_ptx(k.py_func, SIGS[c.kind], cc=cc, fastmath=False, lineinfo=True)
    linker = driver._Linker(max_registers=cap, lineinfo=True, cc=cc, lto=lto)
    if lto:
        linker.add_ltoir(bytes(code), "k.ltoir")
    else:
        linker.add_ptx(code.encode(), "k.ptx")
    lined = _disasm(_bytes(linker.complete()), True)
    same = parse(lined) == parse(plain)
    key = ks._key(c, k)
    name = kr.sass_file_name(key)
    stamp = {"kernel_source": kernel_cache.function_digest(k.py_func.__name__),
             "ptxas": f"device: numba-cuda link for sm_{cc[0]}{cc[1]}{cc[2]} "
                      f"(nvJitLink {driver._have_nvjitlink()}), driver {driver.driver.get_version()}",
             "date": datetime.date.today().isoformat()}
    return name, (lined if same else plain), lib.get_asm_str(cc=cc), stamp, {
        "name": name, **key, "regs": a.regs, "local": a.local, "shared": a.shared,
        "register_cap": cap, "lines_same": same, "lto": lto,
        "linked_files": [str(f) for f in getattr(lib, "_linking_files", ())],
        "seconds": round(time.time() - t0, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--max-d", type=int, default=128)
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--part", default="1/1", help="K/N: the K-th of N equal parts of the list")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    configs = _configs(a.max_d)
    todo = [i for i, c in enumerate(configs) if not a.only or c.kernel in a.only]
    k, n = map(int, a.part.split("/"))
    todo = todo[k - 1::n]
    print(len(todo), "configurations; nvdisasm", shutil.which("nvdisasm"), flush=True)
    stamps, attrs = {}, []
    with ProcessPoolExecutor(a.jobs) as pool:
        for f in as_completed([pool.submit(build, i, a.max_d) for i in todo]):
            try:
                name, text, ptx, stamp, row = f.result()
            except Exception as exc:
                print("failed:", type(exc).__name__, str(exc)[:300], flush=True)
                continue
            open(os.path.join(a.out, name), "w").write(text)
            open(os.path.join(a.out, name[:-len(".sass")] + ".ptx"), "w").write(ptx)
            stamps[name] = stamp
            attrs.append(row)
            json.dump(stamps, open(os.path.join(a.out, "STAMP"), "w"), indent=0, sort_keys=True)
            json.dump(attrs, open(os.path.join(a.out, "attrs.json"), "w"), indent=0)
            print(name, row["regs"], row["local"], row["lines_same"], row["seconds"], flush=True)


if __name__ == "__main__":
    main()
