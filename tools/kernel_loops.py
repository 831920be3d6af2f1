"""The main loop of every kernel the API launches by default (and the experiments at other
tilings), instruction by instruction with its registers, from its SASS as a launch links it: writes
``simulator/kernel_loops.json.gz``, which the issue simulator reads (``simulator.issue.stream_for``,
``loop_cycles``).

    CUDA_HOME=/usr/local/cuda-13.0 python tools/kernel_loops.py [--d 32 64 ...] [--jobs 2] [--keep DIR]
        [--experiments [NAME ...]] [--add]
    python tools/kernel_loops.py --from-sass DIR     # again from the SASS kept in DIR: seconds

The configurations are tools/kernel_resources.py's (``configurations``, ``--experiments`` and
``--add`` as there; kernels without a main loop are listed under ``no_loop``), each compiled
exactly as tools/kernel_sass.py compiles it for its counts (that tool's ``sass_of``: LTO-IR
for sm_90a linked by nvJitLink with the kernel's register cap, as a launch links it
(tools/compile_check.py), ``nvdisasm -c``, and again with line information, kept where the
instructions are the same). The main
loop and the loops nested in it are simulator/sass.py's (``regions``); each instruction's
operands are read by ``simulator.issue.decode_instruction`` (destination and source
registers, predicates, uniform registers; see simulator/issue.py).
Nested loops are stored once with their address range; their trip counts are not in the SASS
(runtime, e.g. strided copies), so they are recorded as unknown (``trips: null``) and
``stream_for`` inlines such a body once unless the caller gives its trips. In the warp-pair
kernels (variant ``warp_pairs``) each instruction inside an ``if ... role == k`` branch of the
kernel source carries role k (``warp_roles``; the SASS's ``//## File ..., line N`` markers name
the kernel file's lines, call sites for inlined code), so that the simulator gives each warp
its own role's part of the loop; in every kernel the main-loop instructions of a row copy's
call line outside its loop body (the guard and set-up ptxas places before a
``range(tid, Br, T)`` loop: at Br = 32 and 256 threads, spill refills only warp 0 runs) carry
``rows_only`` (``row_copy_lines``); and the code a branch of an ``if`` on ``needs_mask`` skips
(on that statement's lines, the values it reads, or address arithmetic ptxas sank into it:
``mask_lines``, ``simulator.sass.skipped_by_branches``) carries ``edge``: only trips on edge
tiles run it; the code a branch of an ``if`` that calls a function of ``ONCE_PER_HEAD`` skips
(``head_lines``) carries ``head``: only a block's first trip of each query head runs it.

``--keep DIR`` writes each kernel's disassembly there and its stamp (kernel-source digest,
linker version, date) in ``DIR/STAMP``; ``--from-sass DIR`` rebuilds the file from those (also
from a ``tools/kernel_sass.py --keep`` folder: the file names are the same) where a file's
digest is still its kernel's sources'. Each loop (and each ``no_loop`` key) names its kernel's
source digest (``kernel_cache.function_digest``); ``--add`` keeps those still current. A kernel
source edited during the run fails it (the digest is taken before and after).
"""
from __future__ import annotations

import ast
import gzip
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # simulator, numba_flash
sys.path.insert(0, str(Path(__file__).resolve().parent))          # sibling tools

from kernel_resources import configurations, device_held, missing, row_key, sass_file_name, selection
from kernel_sass import _key, arguments, finish, keep_sass, sass_of, stamps_of

from numba_flash import kernel_cache

from simulator.issue import LINE_MARKER, LOOPS_JSON, FORMAT, encode_loop, has_stall_counts
from simulator.tiling import WARP_PAIRS_VARIANT

ROOT = Path(__file__).resolve().parent.parent


def compile_sass(chosen, index: int, source: Path | None, stamps: dict) -> tuple[dict, str, dict]:
    """(the kernel_sass.csv key of configuration ``index`` of ``configurations(*chosen)``, its
    ``nvdisasm -c`` text, its stamp), compiled or read from ``source`` (``sass_of``)."""
    config = configurations(*chosen)[index]
    kernel = config.make(config.tiling)
    text, stamp = sass_of(config, kernel, source, stamps)
    return _key(config, kernel), text, stamp


def warp_roles(kernel_file: Path) -> dict[int, int]:
    """Source line -> role for the lines of ``kernel_file`` inside an ``if`` whose test asks
    ``role == k`` (the tensor-core backward's warp pairs: ``role = warp % 2``), and of its
    ``else`` (the other role); empty for a kernel without roles."""
    out: dict[int, int] = {}
    for node in ast.walk(ast.parse(kernel_file.read_text())):
        if not isinstance(node, ast.If):
            continue
        asked = [c.comparators[0].value for c in ast.walk(node.test)
                 if isinstance(c, ast.Compare) and isinstance(c.left, ast.Name) and c.left.id == "role"
                 and isinstance(c.ops[0], ast.Eq) and isinstance(c.comparators[0], ast.Constant)]
        if len(asked) == 1:
            out.update(dict.fromkeys(_lines(node.body), asked[0]))
            if node.orelse and not isinstance(node.test, ast.BoolOp):  # (not so an or's else)
                out.update(dict.fromkeys(_lines(node.orelse), 1 - asked[0]))
    return out


def _lines(body: list) -> range:
    return range(body[0].lineno, body[-1].end_lineno + 1)


#: The row copies: ``range(tid, Br, T)`` loops, a row a thread (kernels/flash_backward*.py).
ROW_COPIES = ("load_row_stats", "load_row_block")


def row_copy_lines(kernel_file: Path) -> frozenset[int]:
    """The lines of ``kernel_file`` that call a row copy (``ROW_COPIES``)."""
    return frozenset(node.lineno for node in ast.walk(ast.parse(kernel_file.read_text()))
                     if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                     and node.func.id in ROW_COPIES)


def _asks_for_mask(test) -> bool:
    """Whether an ``if`` test is ``edge`` (a ``needs_mask`` result), a ``needs_mask(...)`` call,
    or an ``and`` led by one of those."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return _asks_for_mask(test.values[0])
    return ((isinstance(test, ast.Name) and test.id == "edge")
            or (isinstance(test, ast.Call) and isinstance(test.func, ast.Name)
                and test.func.id == "needs_mask"))


#: Device functions the kernels call at a query head's first step only (fa2_fp16x3's backward:
#: the head's scales and factors).
ONCE_PER_HEAD = ("head_factors",)


def _calls_once_per_head(node) -> bool:
    """Whether an ``if`` statement's body calls a function of ``ONCE_PER_HEAD``."""
    return any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in ONCE_PER_HEAD
               for part in node.body for c in ast.walk(part))


def head_lines(kernel_file: Path) -> dict[int, bool]:
    """Lines of ``kernel_file`` a head-start branch's code may come from (``issue.Op.head``),
    as ``mask_lines`` for the ``if`` statements that call a ``ONCE_PER_HEAD`` function
    (``_calls_once_per_head``); also False for the lines of the kernel's parameters the branch
    reads (the argument loads ptxas places in it)."""
    out: dict[int, bool] = {}
    for function in ast.walk(ast.parse(kernel_file.read_text())):
        if not isinstance(function, ast.FunctionDef):
            continue
        ifs = [node for node in ast.walk(function) if isinstance(node, ast.If) and _calls_once_per_head(node)]
        read = _names_read(ifs)
        if read & {a.arg for a in function.args.args}:
            out.update(dict.fromkeys(range(function.lineno, function.body[0].lineno), False))
        out.update(_branch_lines(function, ifs, read))
    return out


def _names_read(ifs) -> set[str]:
    """The names the tests and bodies of ``if`` statements read."""
    return {n.id for node in ifs for part in (node.test, *node.body) for n in ast.walk(part)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _branch_lines(function, ifs, read: set[str]) -> dict[int, bool]:
    """False for the lines of ``function``'s assignments of the names ``read``, then True for
    the lines of the ``if`` statements ``ifs``, test and body."""
    out: dict[int, bool] = {}
    for node in ast.walk(function):
        if isinstance(node, (ast.Assign, ast.AugAssign)) and any(
                isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id in read
                for target in getattr(node, "targets", [getattr(node, "target", None)])
                for n in ast.walk(target)):
            out.update(dict.fromkeys(range(node.lineno, node.end_lineno + 1), False))
    for node in ifs:
        out.update(dict.fromkeys(range(node.lineno, node.body[-1].end_lineno + 1), True))
    return out


def mask_lines(kernel_file: Path) -> dict[int, bool]:
    """Lines of ``kernel_file`` a mask branch's code may come from (``issue.Op.edge``): True for
    the lines of its ``if`` statements on ``needs_mask`` (``_asks_for_mask``), test and body
    (not an ``else``: interior tiles run it), the masking code interior tiles skip where ptxas
    branches over it; False for the assignments, in the same function, of the names those
    statements read (e.g. a K/V block's ``cols``: ptxas marks a compare with the line of the
    value it compares)."""
    out: dict[int, bool] = {}
    for function in ast.walk(ast.parse(kernel_file.read_text())):
        if not isinstance(function, ast.FunctionDef):
            continue
        ifs = [node for node in ast.walk(function)
               if isinstance(node, ast.If) and _asks_for_mask(node.test)]
        out.update(_branch_lines(function, ifs, _names_read(ifs)))
    return out


def kernel_file_of(text: str) -> Path | None:
    """This repository's copy of the kernel file the ``nvdisasm`` text's line markers name."""
    found = LINE_MARKER.search(text)
    return ROOT / "numba_flash" / "kernels" / Path(found.group(1)).name if found else None


def kept(path: Path) -> tuple[list[dict], list[dict]]:
    """``--add``: the loops recorded in ``path`` and the keys of the kernels read that have
    none, those of their kernel's sources as they are now (none if there is no file yet)."""
    if not path.exists():
        return [], []
    with gzip.open(path) as f:
        document = json.load(f)
    if document.get("format") != FORMAT:
        sys.exit(f"--add: {path} is of format {document.get('format')}, not {FORMAT}: "
                 "regenerate it whole")
    return [[entry for entry in document[part] if kernel_cache.is_current(entry)]
            for part in ("loops", "no_loop")]


def main(argv) -> None:
    args = arguments(argv, __doc__.splitlines()[0], LOOPS_JSON)
    chosen = selection(args)
    digest, stamps = stamps_of(args)
    loops, no_loop = kept(args.out) if args.add else ([], [])
    if args.from_sass:      # what the folder holds replaces the recorded loops of it
        loops, no_loop = ([e for e in part if not device_held(stamps, e)] for part in (loops, no_loop))
    indices = missing(chosen, {row_key(key) for key in loops + no_loop})
    with ProcessPoolExecutor(args.jobs) as pool:
        for key, text, stamp in pool.map(compile_sass, [chosen] * len(indices), indices,
                                         [args.from_sass] * len(indices), [stamps] * len(indices)):
            keep_sass(args, stamps, sass_file_name(key), stamp, text)
            key = {**key, "kernel_source": stamp["kernel_source"]}   # tests hold it to the sources
            # roles only where warps split the loop between them (warp pairs)
            paired = WARP_PAIRS_VARIANT in key["variant"].split("+")
            file = kernel_file_of(text)
            loop = encode_loop(text, warp_roles(file) if paired and file else None,
                               row_copy_lines(file) if file else frozenset(),
                               mask_lines(file) if file else None,
                               head_lines(file) if file else None)
            name = (f"{key['kernel']:18s} {key['variant']:13s} d={key['d']:4s} "
                    f"causal={key['causal']:5s} {key['Br']:>3s}x{key['Bc']:<3s}")
            if loop is None:
                print(f"{name} no loop", flush=True)
                no_loop.append(key)
                continue
            print(f"{name} main loop {loop['start']}-{loop['end']}: "
                  f"{len(loop['instructions'])} instructions, {len(loop['inner_loops'])} nested "
                  "loops", flush=True)
            loops.append({**key, **loop, "ptxas": stamp["ptxas"], "date": stamp["date"]})
    finish(digest)
    stalled = sum(has_stall_counts(loop) for loop in loops)
    if 0 < stalled < len(loops):
        print(f"{stalled} of {len(loops)} main loops carry stall counts: the issue simulator "
              "uses them once all do (simulator.issue.all_stall_counts)")
    document = {"format": FORMAT, "loops": loops, "no_loop": no_loop}
    raw = json.dumps(document, separators=(",", ":")).encode()
    with gzip.open(args.out, "wb", compresslevel=9) as f:
        f.write(raw)
    print(f"{len(indices)} kernels read, {len(loops)} main loops -> {args.out} "
          f"({len(raw) / 1e6:.1f} MB uncompressed, {args.out.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main(sys.argv[1:])
