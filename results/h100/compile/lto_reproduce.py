"""The launched code, reproduced without a GPU: numba-cuda 0.30 compiles a kernel with LTO
wherever nvJitLink is installed (``cuda.jit``'s ``lto`` defaults to ``_have_nvjitlink()``), so
a launch's cubin is NVVM's LTO-IR for sm_90a linked by nvJitLink (``-lto -arch=sm_90a
-maxrregcount=CAP``), not NVVM's PTX assembled by ptxas as the kernel tables were until
2026-12-06. This compiles the tensor-core forward (256 x 32, not causal) at d = 32, 64, 80 that
way (tools/compile_check.py's ``launch_ltoir`` and ``link``, which the table tools use since)
and prints what nvJitLink reports and the main loop's instructions and local-load bytes, to
hold against tools/device_sass.py's folders (device_vs_tables_2026-12-06.csv: 568 / 876 /
1266 instructions, 8 / 16 / 104 B, stack 8 / 24 / 120 B).

    pip install nvidia-nvjitlink==13.0.88
    CUDA_HOME=/usr/local/cuda-13.0 python results/h100/compile/lto_reproduce.py
"""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]

from compile_check import launch_ltoir, link, register_cap  # noqa: E402
from kernel_sass import disassemble  # noqa: E402
from numba_flash.kernels.flash_forward_fa2_tc import make_flash_forward_fa2_tc  # noqa: E402
from simulator.sass import parse, regions, tally  # noqa: E402
from simulator.tiling import Tiling  # noqa: E402


def main() -> None:
    for d in (32, 64, 80):
        kernel = make_flash_forward_fa2_tc(Tiling(256, 32), d, False)
        cubin, log = link(launch_ltoir("fa2_tc", kernel), register_cap(kernel))
        main_loop = next(r for r in regions(parse(disassemble(cubin))) if r.name == "main_loop")
        counts, _ = tally(main_loop.instructions)
        report = " | ".join(line.split(":", 1)[-1].strip() for line in log.splitlines()
                            if "spill" in line or "Used" in line)
        print(f"d = {d}: {report}; main loop {counts['total']} instructions, LDL {counts['ldl_bytes']} B")


if __name__ == "__main__":
    os.environ.setdefault("CUDA_HOME", "/usr/local/cuda-13.0")
    main()
