"""Where dropout's time goes, from the code: the main loop's SASS of a forward kernel with and
without dropout (issue 15's target: dropout costs <= 15 % of the forward's time), compiled as a
launch compiles it (tools/kernel_sass.py's ``launch_sass``: LTO-IR for sm_90a, nvJitLink).

    CUDA_HOME=/usr/local/cuda-13.0 python tools/dropout_sass.py [--d 64 128] [--kinds half tc]

For each kernel (``half``: flash_forward_half in fp16; ``tc``: the 3xTF32 flash_forward_tc),
each head dim, its default tiling: warp instructions of one main-loop trip (one K/V tile) per
warp, without and with dropout, by pipe (simulator.sass's classes), the scores a lane holds in the
trip (Br Bc / threads), its Philox4x32-10 calls (8 scores each) and how many of their round
multiplies (``IMAD.WIDE.U32`` by the two Philox constants) the loop holds (the compiler hoists
those of loop-invariant counter words). These forwards are
issue-bound on the H200 (an instruction a cycle a scheduler), so the added instructions are a
floor on the added time where the trip's other pipes have room.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernel_sass import launch_sass   # noqa: E402

from numba_flash.kernels.flash_forward_fa2_tc import make_flash_forward_fa2_tc   # noqa: E402
from numba_flash.kernels.flash_forward_half import make_flash_forward_half   # noqa: E402
from numba_flash.reference import PHILOX_M   # noqa: E402
from simulator.sass import INSTRUCTION_LINE, MAIN_LOOP, parse, regions, tally   # noqa: E402
from simulator.spec import Mask   # noqa: E402
from simulator.tiling import Tiling   # noqa: E402

#: kind -> (kernel name, compile_check SIGS kind, factory of (tiling, d, mask))
KINDS = {"half": ("flash_forward_half", "fwd_half",
                  lambda t, d, mask: make_flash_forward_half(t, d, mask, "float16", True)),
         "tc": ("flash_forward_tc", "fa2_tc", make_flash_forward_fa2_tc)}
#: scores a Philox call decides (``reference.dropout_keep``: 8 16-bit randoms a call)
DROPOUT_SCORES = 8
PIPES = ("hmma", "fma", "alu", "xu", "lds32", "ldsm", "shfl", "branch", "uniform")


def philox_multiplies(text: str, loop) -> int:
    """The IMAD.WIDE.U32 by either Philox multiplier (nvdisasm prints it as signed hex) in the
    address range of region ``loop`` of disassembly ``text``."""
    names = {f"{m - (1 << 32):#x}" for m in PHILOX_M} | {f"{m:#x}" for m in PHILOX_M}
    found = 0
    for line in text.splitlines():
        at = INSTRUCTION_LINE.match(line)        # address, mnemonic, operands
        if (at and at.group(2).startswith("IMAD.WIDE.U32")
                and loop.start <= int(at.group(1), 16) <= loop.end):
            found += any(re.search(rf"{n}\b", at.group(3)) for n in names)
    return found


def main_loop(text: str):
    """The main-loop region of a disassembly."""
    return next(r for r in regions(parse(text)) if r.name == MAIN_LOOP)


def study(kind: str, d: int) -> list[str]:
    kernel, sig, factory = KINDS[kind]
    t = Tiling.kernel_default(kernel, d, dropout=True)
    threads = t.threads_for(kernel)
    lane_scores = t.Br * t.Bc // threads
    calls = lane_scores // DROPOUT_SCORES   # a lane's Philox calls a trip (the mask's contract)
    out, base = [], None
    for dropout in (False, True):
        text, _ = launch_sass(sig, factory(t, d, Mask(dropout=dropout)))
        loop = main_loop(text)
        counts, _ = tally(loop.instructions)
        multiplies = philox_multiplies(text, loop)
        pipes = " ".join(f"{p} {counts[p]}" for p in PIPES)
        out.append(f"{kernel:18s} d={d:<4d} {t.Br}x{t.Bc} {threads // 32} warps, {lane_scores} scores a "
                   f"lane a trip; dropout={dropout!s:5s}: {counts['total']} instructions a warp ({pipes}); "
                   f"Philox multiplies in the loop {multiplies}")
        if base is None:
            base = counts["total"]
        else:
            added = counts["total"] - base
            out.append(f"    added {added} instructions a warp a trip (+{100 * added / base:.0f} %): "
                       f"{added / lane_scores:.1f} a score, {added / calls:.0f} a Philox call "
                       f"({calls} calls of {DROPOUT_SCORES} scores; {multiplies} of their "
                       f"{20 * calls} round multiplies inside the loop, the rest hoisted)")
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--kinds", nargs="+", choices=tuple(KINDS), default=list(KINDS))
    args = parser.parse_args(argv)
    for kind in args.kinds:
        for d in args.d:
            print("\n".join(study(kind, d)), flush=True)


if __name__ == "__main__":
    main()
