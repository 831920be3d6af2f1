"""Instruction mix of every kernel the API launches by default (and the experiments at other
tilings), from its SASS as a launch links it, per pipe, in the main loop and outside: writes
``simulator/kernel_sass.csv``, which the runtime model reads (``simulator.sass.sass``).

    CUDA_HOME=/usr/local/cuda-13.0 python tools/kernel_sass.py [--d 32 ...] [--jobs 2] [--keep DIR]
        [--experiments [NAME ...]] [--add]
    python tools/kernel_sass.py --from-sass DIR      # again from the SASS kept in DIR: seconds

Needs libnvvm (a CUDA toolkit), nvJitLink (``pip install nvidia-nvjitlink==13.0.88``) and
nvdisasm (the toolkit's, or pip install nvidia-cuda-nvdisasm). The configurations are
tools/kernel_resources.py's (``configurations``, ``--experiments`` and ``--add`` as there),
each compiled as a launch compiles it (tools/compile_check.py: LTO-IR for sm_90a linked by
nvJitLink with the kernel's register cap), then ``nvdisasm -c``; once more with line
information (``lineinfo=True``, nvJitLink ``-lineinfo``, ``nvdisasm -g``), whose SASS must be
the same, instruction for instruction, to name each region's source lines (a warning and no
lines if not). The regions (kernel, main loop, nested and other loops), the opcode classes and
the loop finder are simulator/sass.py's (its docstring says how each opcode is counted). A
kernel source edited meanwhile fails the run (the digest of all of them is taken before and
after). Each row names its kernel's source digest (``kernel_cache.function_digest``), as
tools/kernel_resources.py's rows.

``--keep DIR``: also write each kernel's disassembly there (with its source lines where they
could be had) and its kernel-source digest, linker version, date and resources (the linker's
registers, stack frame and spills, which ``tools/kernel_resources.py --from-sass DIR`` reads
instead of compiling again) in ``DIR/STAMP`` (JSON, by file name); ``--from-sass DIR``
recounts from those files without compiling (after a change to
simulator/sass.py's classes) where a file's digest is still its kernel's sources', and compiles
the others (with ``--keep DIR`` too: a run cut short goes on where it stopped). A folder of
tools/device_sass.py (the kernels as a launch on the GPU compiles them) reads the same way;
with ``--add``, the kernels a folder holds replace the table's rows of them.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # simulator, numba_flash

from compile_check import launch_ltoir, link, link_resources, linker_version, register_cap
from kernel_resources import (add_selection_arguments, configurations, device_held, kept_rows, missing,
                              row_key, sass_file_name, selection, write_table)
from simulator.tiling import table_variant

from numba_flash import kernel_cache
from simulator.sass import (COUNTS, format_lines, format_opcodes, parse, regions, source_lines,
                            tally)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "simulator" / "kernel_sass.csv"
STAMP = "STAMP"
KEY = ("kernel", "function", "variant", "Br", "Bc", "d", "causal")
COLUMNS = (*KEY, "region", "start", "end", "depth", *COUNTS, "opcodes", "lines", "ptxas",
           "date", "kernel_source")


def nvdisasm() -> str:
    """The nvdisasm of $CUDA_HOME, of PATH, or of the nvidia-cuda-nvdisasm wheel."""
    home = os.environ.get("CUDA_HOME")
    for found in (home and os.path.join(home, "bin", "nvdisasm"), shutil.which("nvdisasm")):
        if found and os.path.exists(found):
            return found
    import nvidia
    return os.path.join(nvidia.__path__[0], "cu13", "bin", "nvdisasm")


def disassemble(cubin: bytes, lineinfo: bool = False) -> str:
    """``nvdisasm -c -hex`` of ``cubin`` (``-g`` with ``lineinfo``, for a cubin linked with
    line information). The encodings (``-hex``) carry the compiler's stall counts
    (``simulator.sass.stall_counts``), which tools/kernel_loops.py records."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([nvdisasm(), "-c", "-hex", *(["-g"] if lineinfo else []), f.name],
                              capture_output=True, text=True, check=True).stdout


def launch_sass(kind: str, kernel, lineinfo: bool = False) -> tuple[str, str]:
    """(the disassembly of ``kernel`` (its SIGS ``kind``) as a launch compiles it:
    ``compile_check.launch_ltoir`` and ``link``, with the kernel's register cap; the linker's
    info log)."""
    cubin, log = link(launch_ltoir(kind, kernel, lineinfo), register_cap(kernel), lineinfo)
    return disassemble(cubin, lineinfo), log


def annotated(kind: str, kernel, instructions) -> str | None:
    """The disassembly of the kernel compiled again with line information, if that compile
    gives the same instructions at the same addresses (None if not: the counts are always those
    of the plain compile, the one the API launches)."""
    text, _ = launch_sass(kind, kernel, lineinfo=True)
    return text if parse(text) == instructions else None


def _blank(value) -> str:
    return "" if value is None else str(value)


def _key(config, kernel) -> dict[str, str]:
    tiling = config.tiling
    return {"kernel": config.kernel, "function": kernel.py_func.__name__,
            "variant": table_variant(config.variant, tiling),
            "Br": _blank(tiling and tiling.Br), "Bc": _blank(tiling and tiling.Bc),
            "d": _blank(config.d), "causal": _blank(config.causal)}


def sass_of(config, kernel, source: Path | None, stamps: dict) -> tuple[str, dict[str, str]]:
    """(the disassembly of ``kernel``, built by ``config``, with line information where it
    could be had; its stamp: kernel_source, ptxas, date and, where compiled here, resources):
    read from folder ``source`` where its file is there and stamped with its kernel's sources
    as they are now (``stamps``, the folder's STAMP), else compiled."""
    name = sass_file_name(_key(config, kernel))
    digest = kernel_cache.function_digest(kernel.py_func.__name__)
    stamp = stamps.get(name)
    if source and stamp and stamp["kernel_source"] == digest and (source / name).exists():
        return (source / name).read_text(), stamp
    text, log = launch_sass(config.kind, kernel)
    with_lines = annotated(config.kind, kernel, parse(text))
    if with_lines is None:
        print(f"warning: {name} compiles to other SASS with line information: its regions "
              "get no source lines", file=sys.stderr)
    return with_lines or text, {"kernel_source": digest, "ptxas": linker_version(),
                                "date": datetime.date.today().isoformat(),
                                "resources": link_resources(log)}


def measure(chosen, index: int, source: Path | None, stamps: dict) -> tuple[str, dict, str, list]:
    """Compile configuration ``index`` of ``configurations(*chosen)`` (or read its SASS from
    ``source``: ``sass_of``); (its SASS file name, stamp and text, its CSV rows, one per
    region)."""
    config = configurations(*chosen)[index]
    kernel = config.make(config.tiling)
    key = _key(config, kernel)
    text, stamp = sass_of(config, kernel, source, stamps)
    instructions = parse(text)
    lines = source_lines(text) if "//## File" in text else None
    rows = []
    for region in regions(instructions):
        counts, opcodes = tally(region.instructions)
        rows.append({**key, "region": region.name, "start": f"{region.start:x}",
                     "end": f"{region.end:x}", "depth": str(region.depth),
                     **{name: str(n) for name, n in counts.items()},
                     "opcodes": format_opcodes(opcodes),
                     "lines": format_lines(lines[i.address] for i in region.instructions
                                           if i.address in lines) if lines is not None else "",
                     "kernel_source": stamp["kernel_source"], "ptxas": stamp["ptxas"],
                     "date": stamp["date"]})
    main = next((r for r in rows if r["region"] == "main_loop"), rows[0])
    print(f"{key['kernel']:18s} {key['variant']:13s} d={key['d']:4s} causal={key['causal']:5s} "
          f"{key['Br']:>3s}x{key['Bc']:<3s} {len(rows) - 1} loops; {main['region']}: "
          f"{main['total']} instructions, {main['hmma']} HMMA, {main['fp32']} FP32, "
          f"LDL/STL {main['ldl_bytes']}/{main['stl_bytes']} B", flush=True)
    return sass_file_name(key), stamp, text, rows


def arguments(argv, description: str, out: Path) -> argparse.Namespace:
    """The command line shared with tools/kernel_loops.py."""
    parser = argparse.ArgumentParser(description=description)
    add_selection_arguments(parser)
    parser.add_argument("--jobs", type=int, default=2, help="parallel compiles")
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--keep", type=Path, help="write each kernel's SASS to this folder")
    parser.add_argument("--from-sass", type=Path, help="read each kernel's SASS from this folder "
                        "(written by --keep, or by tools/device_sass.py on a GPU) instead of "
                        "compiling it, where it is there; with --add the folder's kernels "
                        "replace the rows the table holds of them")
    return parser.parse_args(argv)


def stamps_of(args) -> tuple[str, dict]:
    """(digest of all kernel sources, taken to see them unchanged at the end; the STAMP of the
    ``--from-sass`` folder, or of the ``--keep`` one (created if need be), else empty)."""
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    folder = args.from_sass or args.keep
    path = folder / STAMP if folder else None
    stamps = json.loads(path.read_text()) if path and path.exists() else {}
    if not isinstance(stamps, dict):
        sys.exit(f"{path} is not a STAMP of this tool (a JSON object by file name): compile again")
    return kernel_cache.digest_of(ROOT), stamps


def keep_sass(args, stamps: dict, name: str, stamp: dict, text: str) -> None:
    """With ``--keep``: write a kernel's SASS and its stamp (the STAMP rewritten each time, so
    that a run cut short keeps what it did)."""
    if args.keep:
        (args.keep / name).write_text(text)
        stamps[name] = stamp
        (args.keep / STAMP).write_text(json.dumps(stamps, indent=0, sort_keys=True))


def finish(digest: str) -> None:
    """Exit if a kernel source changed during the run."""
    if kernel_cache.digest_of(ROOT) != digest:
        sys.exit("the kernel sources changed during the run: run it again")


def main(argv) -> None:
    args = arguments(argv, __doc__.splitlines()[0], OUT)
    chosen = selection(args)
    digest, stamps = stamps_of(args)
    kept = kept_rows(args.out) if args.add else []
    if args.from_sass:      # what the folder holds replaces the table's rows of it
        kept = [r for r in kept if not device_held(stamps, r)]
    indices = missing(chosen, {row_key(r) for r in kept})
    rows = []
    with ProcessPoolExecutor(args.jobs) as pool:
        for name, stamp, text, found in pool.map(measure, [chosen] * len(indices), indices,
                                                 [args.from_sass] * len(indices),
                                                 [stamps] * len(indices)):
            keep_sass(args, stamps, name, stamp, text)
            rows += found
    finish(digest)
    write_table(args.out, COLUMNS, kept + rows, linker_version(), datetime.date.today().isoformat())
    print(f"{len(indices)} kernels, {len(rows)} regions added to {len(kept)} kept -> {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
