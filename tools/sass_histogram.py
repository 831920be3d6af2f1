"""Opcode histograms of every kernel's SASS, without a GPU: to check that a refactor leaves the
machine code alone (compare two checkouts' outputs), before spending device time.

    python tools/sass_histogram.py [ROOT] > hist.json     # ROOT: a checkout (default: this one)
Needs ptxas (a CUDA toolkit) and nvdisasm (pip install nvidia-cuda-nvdisasm, or the toolkit's).
"""
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tools")]

from numba.cuda import compile_ptx  # noqa: E402

import compile_check  # noqa: E402  (this checkout's kernels and signatures; targets sm_90 without a GPU)
INSTRUCTION = re.compile(r"\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def nvdisasm() -> str:
    found = shutil.which("nvdisasm")
    if found:
        return found
    import nvidia
    return os.path.join(os.path.dirname(nvidia.__path__[0]), "nvidia", "cu13", "bin", "nvdisasm")


def histogram(kernel, signature) -> dict[str, int]:
    ptx, _ = compile_ptx(kernel.py_func, signature, cc=(9, 0))
    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        subprocess.run(["ptxas", "-arch=sm_90", "-o", cubin, src], check=True)
        sass = subprocess.run([nvdisasm(), "-c", cubin], capture_output=True, text=True, check=True).stdout
    return dict(sorted(collections.Counter(INSTRUCTION.findall(sass)).items()))


def main():
    out = {}
    for d in (64, 80):
        for index, (kind, kernel) in enumerate(compile_check.kernels(d)):
            out[f"{kernel.py_func.__name__} d={d} #{index}"] = histogram(kernel, compile_check.SIGS[kind])
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
