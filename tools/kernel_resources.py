"""Registers, spills and shared memory of every kernel the API launches by default, and of the
tiled kernels the experiments launch at other tilings, as a launch links them: writes
``simulator/kernel_resources.csv``, which the occupancy model reads
(``simulator.occupancy.resources``).

    CUDA_HOME=/usr/local/cuda-13.0 python tools/kernel_resources.py [--d 32 64 ...] [--jobs 2]
        [--experiments [NAME ...]] [--add]

Each kernel is compiled as numba-cuda compiles a launch on Hopper (tools/compile_check.py:
NVVM's LTO-IR for sm_90a linked by nvJitLink ``-lto`` with its register cap; needs libnvvm and
``pip install nvidia-nvjitlink==13.0.88``) and its figures read from the linker's ``-verbose``
log, ptxas -v's lines (the H200's readings are checked in tests/test_simulator_occupancy.py).
Configurations: the tensor-core forward and backward (fp32, and fp16 with 16-byte copies; each
also block-sparse) and the FFMA forward, backward (dQ by atomics, and without for
``deterministic=True``), dQ kernel and Algorithm 1 forward at their default tilings
(``Tiling.kernel_default``), causal and not, at each ``--d``; the standard attention's matmuls
(64 x 64; each transpose variant), softmax, dS and D = rowsum(dO * O) kernels with the API's 128
threads (D at each --d), and the fp32 -> fp16 conversion of the half backward's dQ; fa2_fp16x3's
forward and backward (the fp16 kernels in their fp32 mode, variant "fp16x3", at their own default
tilings, d = 64 and 128: ``FP16X3_HEAD_DIMS``) and its two preparing kernels (head_amax; split_half at each --d). A blank d or
causal in the CSV: the kernel's code depends on neither. Then every tiled kernel that the
experiments (``--experiments``: all by default; a few minutes to list) launch in a full GPU run
and those lack -- fig2_middle's Bc sweep, io_scaling's M sweep, short sequences' cut tiles
(``experiment_keys``) -- so that the model times them from their own code, not a roofline.
Each row names the digest of its kernel's sources (``kernel_cache.function_digest``: the
kernel's file and the kernel sources it imports), so an edit to one kernel file stales only its
rows (and those of kernels importing it). ``--add``: compile only what the table lacks or holds
from other sources of a kernel, keep the rest; tools/kernel_sass.py and tools/kernel_loops.py
take the same options. ``--table-extras``: the other tilings the committed table holds, in
place of listing the experiments' (which takes minutes). ``--from-sass DIR``: the resources
that ``tools/kernel_sass.py --keep DIR`` recorded as it linked each kernel (one compile for the
three tables):

    python tools/kernel_sass.py --keep DIR; python tools/kernel_loops.py --from-sass DIR
    python tools/kernel_resources.py --from-sass DIR
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from compile_check import launch_ltoir, link, link_resources, linker_version, register_cap

from numba_flash import kernel_cache
from numba_flash.kernels.flash_backward import make_flash_backward_dq, make_flash_backward_kv, make_row_dot
from numba_flash.kernels.convert import make_convert
from numba_flash.kernels.flash_backward_half import make_flash_backward_half
from numba_flash.kernels.flash_backward_tc import make_flash_backward_tc
from numba_flash.kernels.flash_forward_alg1 import make_flash_forward_alg1
from numba_flash.kernels.flash_forward_fa2 import make_flash_forward_fa2
from numba_flash.kernels.flash_forward_fa2_tc import make_flash_forward_fa2_tc
from numba_flash.kernels.flash_forward_half import make_flash_forward_half
from numba_flash.kernels.split_half import make_head_amax, make_split_half
from numba_flash.kernels.standard import make_ds, make_matmul, make_softmax
from numba_flash.checks import BLOCK_SIZE
from simulator.flash import SPARSE_VARIANT, variant_mask
from simulator.fp16x3 import backward_default_tiling as fp16x3_backward_tiling, backward_smem_bytes
from simulator.fp16x3 import (VARIANT as FP16X3, default_tiling as fp16x3_tiling, parts_width, prep_launch,
                              split_threads)
from simulator.occupancy import asked_variant
from simulator.sass import parse, tally
from simulator.spec import Mask
from simulator.tiling import Tiling, table_variant, tiling_of_table

OUT = Path(__file__).resolve().parent.parent / "simulator" / "kernel_resources.csv"
HEAD_DIMS = (32, 64, 80, 128, 256)
#: fa2_fp16x3's forward and backward at the head dims the bench and the H200 runs time (each compile takes
#: minutes on 2 cores); the model's time is NaN at the others.
FP16X3_HEAD_DIMS = (64, 128)
#: Threads a block of the row-wise kernels (softmax, dS, D) on the GPU (numba_flash.api._row_threads).
ROW_THREADS = 128
COLUMNS = ("kernel", "function", "variant", "Br", "Bc", "d", "causal", "threads",
           "dynamic_smem_bytes", "static_smem_bytes", "registers", "register_cap",
           "spill_store_bytes", "spill_load_bytes", "stack_frame_bytes", "ptxas", "date",
           "kernel_source")


@dataclass(frozen=True)
class Config:
    """One compiled kernel: its Tiling kernel name (or function name for the row kernels), a
    variant label, the compile_check SIGS kind, and how to build it. ``d`` or ``causal`` None:
    the kernel's code does not depend on it. Its tiling: ``at``, else the kernel's default
    (nested in ``block_size`` for the block-sparse variant)."""

    kernel: str
    variant: str
    kind: str
    d: int | None
    causal: bool | None
    make: Callable[[Tiling | None], object]
    tiled: bool = True
    block_size: tuple[int, int] | None = None   # block-sparse: the default tiling nested in these
    at: Tiling | None = None
    threads: int = ROW_THREADS                  # a row kernel's threads a block

    @property
    def tile_d(self) -> int:
        """The columns of the kernel's tiles: d, or for fa2_fp16x3's kernels 2 D16 (a row's
        fp16 hi and lo parts)."""
        if FP16X3 in self.variant.split("+"):
            return parts_width(self.d)
        return self.d or 0

    def smem_bytes(self) -> int:
        """Dynamic shared memory a block (0 for the row kernels): ``Tiling.smem_bytes`` at
        ``tile_d``; fa2_fp16x3's backward also holds dS^T's two parts
        (``simulator.fp16x3.backward_smem_bytes``)."""
        if not self.tiled:
            return 0
        if FP16X3 in self.variant.split("+") and self.kernel == "flash_backward_half":
            return backward_smem_bytes(self.tiling, self.d)
        return self.tiling.smem_bytes(self.kernel, self.tile_d)

    @property
    def tiling(self) -> Tiling | None:
        if not self.tiled:
            return None
        if self.at is not None:
            return self.at
        return Tiling.kernel_default(self.kernel, self.d or 0, block_size=self.block_size)


def _half(factory):
    """A half kernel's factory in fp16 (bf16 compiles to the same code but its conversions),
    16-byte copies."""
    return lambda t, d, mask: factory(t, d, mask, "float16", True)


#: (kernel, variant) of every tiled kernel -> (compile_check SIGS kind, its factory of
#: (tiling, d, causal), causal a bool, or for the sparse variant ``Mask(upper=causal,
#: sparse=True)``).
TILED = {
    ("flash_forward_tc", ""): ("fa2_tc", make_flash_forward_fa2_tc),
    ("flash_backward_tc", ""): ("bwd_tc", make_flash_backward_tc),
    ("flash_forward_half", ""): ("fwd_half", _half(make_flash_forward_half)),
    ("flash_backward_half", ""): ("bwd_half", _half(make_flash_backward_half)),
    ("flash_forward_tc", SPARSE_VARIANT): ("fa2_tc", make_flash_forward_fa2_tc),
    ("flash_backward_tc", SPARSE_VARIANT): ("bwd_tc", make_flash_backward_tc),
    ("flash_forward_half", SPARSE_VARIANT): ("fwd_half", _half(make_flash_forward_half)),
    ("flash_backward_half", SPARSE_VARIANT): ("bwd_half", _half(make_flash_backward_half)),
    ("flash_forward_v2", ""): ("fa2", make_flash_forward_fa2),
    ("flash_forward_v1", ""): ("alg1", lambda t, d, causal: make_flash_forward_alg1(t, d, causal, "float32")),
    ("flash_backward", ""): ("bwd_kv", lambda t, d, causal: make_flash_backward_kv(t, d, causal, True)),
    ("flash_backward", "no_atomic_dq"): ("bwd_kv", lambda t, d, causal: make_flash_backward_kv(t, d, causal, False)),
    ("flash_backward_dq", ""): ("bwd_dq", make_flash_backward_dq),
    ("flash_forward_half", FP16X3): ("fwd_fp16x3",
                                     lambda t, d, mask: make_flash_forward_half(t, d, mask, "float32", True)),
    ("flash_backward_half", FP16X3): ("bwd_fp16x3",
                                      lambda t, d, mask: make_flash_backward_half(t, d, mask, "float32", True)),
}


def tiled(kernel: str, variant: str, d: int, causal: bool, at: Tiling | None = None) -> Config:
    """The Config of tiled kernel ``kernel`` (its ``variant``) at head dim ``d``, ``causal``,
    tiling ``at`` (None: its default; the sparse variant's nested in ``BLOCK_SIZE``). A
    variant's window and group parts (``simulator.flash.variant_mask``) are the band kernels'
    compile-time mask, handed to the factory of its other parts."""
    base, mask = variant_mask(variant, causal)
    kind, factory = TILED[kernel, base]
    if base == FP16X3 and at is None:      # its own defaults (simulator.fp16x3)
        at = (fp16x3_backward_tiling if kernel == "flash_backward_half" else fp16x3_tiling)(d, None, None)
    built = mask if mask != Mask(upper=causal) else causal     # the FFMA factories take a bool
    return Config(kernel, variant, kind, d, causal, lambda t: factory(t, d, built),
                  block_size=BLOCK_SIZE if mask.sparse else None, at=at)


def configurations(head_dims, extra=()) -> list[Config]:
    """Every configuration, the slow tensor-core compiles first (so that parallel jobs balance),
    then ``extra``: (kernel, variant, Br, Bc, d, causal) keys of tiled kernels at other
    tilings (``experiment_keys``)."""
    tc, fma = [], []
    for d in head_dims:
        for causal in (False, True):
            for kernel, variant in TILED:
                if variant == FP16X3 and d not in FP16X3_HEAD_DIMS:
                    continue
                (tc if TILED[kernel, variant][0] in ("fa2_tc", "bwd_tc", "fwd_half", "bwd_half", "fwd_fp16x3",
                                                     "bwd_fp16x3")
                 else fma).append(tiled(kernel, variant, d, causal))
        fma += [Config("row_dot", "zero_dq" if zero else "", "row_dot", d, None,
                       lambda _, d=d, z=zero: make_row_dot(ROW_THREADS, d, z, "float32"), tiled=False)
                for zero in (True, False)]
        fma.append(Config("split_half", "", "split_half", d, None,     # fa2_fp16x3's parts
                          lambda _, d=d: make_split_half(d, split_threads(d, prep_launch(False)[0])),
                          tiled=False, threads=split_threads(d, prep_launch(False)[0])))
    standard = [Config("standard_matmul", variant, "matmul", None, None,
                       lambda t, a=trans_a, b=trans_b: make_matmul(t, a, b, "float32"))
                for variant, trans_a, trans_b in (("", False, False), ("trans_a", True, False),
                                                  ("trans_b", False, True))]
    standard += [Config("softmax", "", "softmax", None, causal,
                        lambda _, c=causal: make_softmax(ROW_THREADS, c, "float32"), tiled=False)
                 for causal in (False, True)]
    standard.append(Config("ds", "", "ds", None, None, lambda _: make_ds(ROW_THREADS, "float32"), tiled=False))
    # fa2_fp16x3's heads' maxima (the GPU's threads a block: simulator.fp16x3.prep_launch)
    standard.append(Config("head_amax", "", "head_amax", None, None,
                           lambda _: make_head_amax(prep_launch(False)[0]), tiled=False,
                           threads=prep_launch(False)[0]))
    # the half backward's dQ_accum -> dQ (fp16)
    standard.append(Config("convert", "narrow", "convert_narrow", None, None,
                           lambda _: make_convert("float16", False), tiled=False))
    others = [tiled(kernel, asked_variant(variant), d, causal, tiling_of_table(br, bc, variant))
              for kernel, variant, br, bc, d, causal in extra]
    return tc + fma + standard + others


def experiment_keys(names, head_dims=HEAD_DIMS) -> list[tuple]:
    """(kernel, variant, Br, Bc, d, causal) of every tiled launch that the experiments
    ``names`` make in a full GPU run (their cases, ``experiments.common.kernels.listed_cases``,
    through the model's launches) and ``configurations(head_dims)`` lacks: non-default
    tilings (fig2_middle's Bc sweep, io_scaling's M sweep), short sequences' cut tiles, and the
    band kernels of a window's left side or grouped K/V heads (the window experiment's: their
    variant, ``simulator.flash.mask_variant``)."""
    from experiments import EXPERIMENTS
    from experiments.common.kernels import listed_cases
    from experiments.common.model import reports

    known = {config_key(c) for c in configurations(head_dims)}
    found = set()
    for case in listed_cases([(EXPERIMENTS[n], n) for n in names], quick=False):
        for report in reports(case):
            w, t = report.workload, report.tiling
            for p in report.phases:
                kernel, variant = p.code
                base = asked_variant(variant)
                if not p.block_trips or (kernel, variant_mask(base, False)[0]) not in TILED:
                    continue
                own = p.tiling or t          # (the deterministic backward's forward: its own)
                if config_key(tiled(kernel, base, w.d, w.kernel_causal, own)) not in known:
                    found.add((kernel, table_variant(base, own), own.Br, own.Bc, w.d, w.kernel_causal))
    return sorted(found)


def table_extras(path: Path = OUT) -> tuple[tuple, ...]:
    """The rows of the table at ``path`` that are not default configurations, as
    ``configurations``' ``extra`` keys: the experiments' tilings without the minutes
    ``experiment_keys`` takes to list them."""
    defaults = {config_key(c) for c in configurations(HEAD_DIMS)}
    with open(path, newline="") as f:
        return tuple((r["kernel"], r["variant"], int(r["Br"]), int(r["Bc"]), int(r["d"]), r["causal"] == "True")
                     for r in csv.DictReader(f) if row_key(r) not in defaults)


def _blank(value) -> str:
    return "" if value is None else str(value)


def device_resources(folder: Path, name: str, digest: str) -> tuple[dict[str, int], dict[str, str]] | None:
    """The resources of the kernel whose SASS file is ``name`` in ``folder``, a folder of
    tools/device_sass.py (compiled on the GPU as a launch compiles it): registers, static
    shared memory and stack frame from the loaded function's attributes (``attrs.json``), spill
    bytes from the SASS's SpillRefill-marked LDL / STL (the linker's figures; the GPU machine's
    nvdisasm marked none on 2026-12-06: 0 there); with its STAMP (the device's compiler and
    date). None where the folder lacks the kernel or holds it from other sources than
    ``digest`` (``kernel_cache.function_digest``)."""
    attrs = {a["name"]: a for a in json.loads((folder / "attrs.json").read_text())}
    stamp = json.loads((folder / "STAMP").read_text()).get(name)
    if name not in attrs or not (folder / name).exists() or not stamp or stamp["kernel_source"] != digest:
        return None
    a = attrs[name]
    counts, _ = tally(parse((folder / name).read_text()))
    return ({"registers": a["regs"], "static_smem_bytes": a["shared"], "stack_frame_bytes": a["local"],
             "spill_store_bytes": counts["spill_store_bytes"], "spill_load_bytes": counts["spill_load_bytes"]},
            {"ptxas": stamp["ptxas"], "date": stamp["date"]})


def kept_resources(stamps: dict, name: str, digest: str) -> tuple[dict[str, int], dict[str, str]] | None:
    """The resources that tools/kernel_sass.py recorded in its ``--keep`` folder's STAMP
    (``stamps``) for the kernel whose SASS file is ``name``, with their linker and date; None
    where it has none of the sources ``digest``."""
    stamp = stamps.get(name)
    if not stamp or stamp["kernel_source"] != digest or "resources" not in stamp:
        return None
    return stamp["resources"], {"ptxas": stamp["ptxas"], "date": stamp["date"]}


def measure(chosen, index: int, device: Path | None = None, kept: dict | None = None) -> dict[str, str]:
    """Compile configuration ``index`` of ``configurations(*chosen)``; its CSV row (ptxas and
    date columns left out). ``device``: a tools/device_sass.py folder; a kernel it holds (of
    the sources as they are now) is read from there instead, ptxas and date columns its
    compiler's and day's; ``kept``: the STAMP of a tools/kernel_sass.py ``--keep`` folder,
    whose resources of a kernel are taken likewise (``kept_resources``)."""
    config = configurations(*chosen)[index]
    tiling = config.tiling
    kernel = config.make(tiling)
    cap = register_cap(kernel)
    stamp = {}
    found = None
    if device is not None or kept:
        from kernel_sass import _key   # noqa: PLC0415 (the SASS tool's key of a kernel)
        name = sass_file_name(_key(config, kernel))
        digest = kernel_cache.function_digest(kernel.py_func.__name__)
        recorded = (device_resources(device, name, digest) if device is not None else None) or (
            kept_resources(kept, name, digest) if kept else None)
        if recorded is not None:
            found, stamp = recorded
    if found is None:
        found = link_resources(link(launch_ltoir(config.kind, kernel), cap)[1])
    row = {"kernel": config.kernel, "function": kernel.py_func.__name__,
           "variant": table_variant(config.variant, tiling),
           "Br": _blank(tiling and tiling.Br), "Bc": _blank(tiling and tiling.Bc),
           "d": _blank(config.d), "causal": _blank(config.causal),
           "threads": str(tiling.threads_for(config.kernel) if tiling else config.threads),
           "dynamic_smem_bytes": str(config.smem_bytes()),
           "register_cap": _blank(cap),
           "kernel_source": kernel_cache.function_digest(kernel.py_func.__name__), **stamp}
    row.update({key: str(value) for key, value in found.items()})
    print(f"{row['kernel']:18s} {row['variant']:13s} d={row['d']:4s} causal={row['causal']:5s} "
          f"{row['Br']:>3s}x{row['Bc']:<3s} {row['threads']:>4s} threads  {row['registers']:>3s} "
          f"registers (cap {row['register_cap'] or '-'}), spills {row['spill_store_bytes']}/"
          f"{row['spill_load_bytes']} B", flush=True)
    return row


def config_key(config: Config) -> tuple[str, ...]:
    """(kernel, variant, Br, Bc, d, causal) of ``config`` as its table rows write them."""
    t = config.tiling
    return (config.kernel, table_variant(config.variant, t), _blank(t and t.Br), _blank(t and t.Bc),
            _blank(config.d), _blank(config.causal))


def row_key(row) -> tuple[str, ...]:
    """``config_key`` of a table row (a dict of its columns)."""
    return tuple(row[name] for name in ("kernel", "variant", "Br", "Bc", "d", "causal"))


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that choose the configurations, shared by the three table tools."""
    parser.add_argument("--d", type=int, nargs="+", default=HEAD_DIMS, help="head dims")
    parser.add_argument("--experiments", nargs="*", default=["all"], metavar="NAME",
                        help="also the tiled kernels these experiments launch at other tilings "
                             "(experiment_keys; default: all; none: --experiments with no name)")
    parser.add_argument("--table-extras", action="store_true",
                        help="instead of listing the experiments' tilings (minutes), take the "
                             "other tilings the committed table holds (table_extras)")
    parser.add_argument("--add", action="store_true",
                        help="compile only the configurations the table lacks or holds from "
                             "other sources of their kernel; keep its other rows")


def selection(args) -> tuple[tuple[int, ...], tuple[tuple, ...]]:
    """(head dims, extra keys) that ``configurations`` takes for these arguments."""
    from experiments import EXPERIMENTS

    head_dims = tuple(args.d)
    if args.table_extras:      # all of them, or those at the --d asked for
        return head_dims, tuple(k for k in table_extras() if head_dims == HEAD_DIMS or k[4] in head_dims)
    names = list(EXPERIMENTS) if "all" in args.experiments else args.experiments
    return head_dims, tuple(experiment_keys(names, head_dims)) if names else ()


def kept_rows(path: Path) -> list[dict]:
    """``--add``: the rows of the table at ``path`` (none if there is no file yet) whose kernel
    sources are as they are now (``kernel_cache.is_current``); the others are compiled again."""
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [row for row in csv.DictReader(f) if kernel_cache.is_current(row)]


def missing(chosen, keys) -> list[int]:
    """Indices of the configurations ``chosen`` (``selection``) whose key is not in ``keys``."""
    return [i for i, c in enumerate(configurations(*chosen)) if config_key(c) not in keys]


def main(argv) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_selection_arguments(parser)
    parser.add_argument("--jobs", type=int, default=2, help="parallel compiles")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--from-device", type=Path, metavar="DIR",
                        help="take the kernels that tools/device_sass.py compiled on the GPU into "
                             "DIR from there (with --add: in place of the rows the table holds)")
    parser.add_argument("--from-sass", type=Path, metavar="DIR",
                        help="take the resources tools/kernel_sass.py --keep DIR recorded with "
                             "each kernel it compiled (its STAMP) instead of compiling again")
    args = parser.parse_args(argv)
    chosen = selection(args)
    kept = kept_rows(args.out) if args.add else []
    if args.from_device:
        stamps = json.loads((args.from_device / "STAMP").read_text())
        kept = [r for r in kept if not device_held(stamps, r)]
    recorded = json.loads((args.from_sass / "STAMP").read_text()) if args.from_sass else None
    if recorded:
        kept = [r for r in kept if not replaced(recorded, r)]
    indices = missing(chosen, {row_key(r) for r in kept})
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(measure, [chosen] * len(indices), indices,
                             [args.from_device] * len(indices), [recorded] * len(indices)))
    write_table(args.out, COLUMNS, kept + rows, linker_version(), datetime.date.today().isoformat())
    print(f"{len(indices)} kernels compiled, {len(kept)} rows kept -> {args.out}")


def sass_file_name(key) -> str:
    """The SASS file of a kernel in a folder of tools/kernel_sass.py's ``--keep`` or of
    tools/device_sass.py: ``key``'s (a table row's, or kernel_sass's ``_key``) kernel,
    function, variant, Br, Bc, d and causal, the blank ones left out."""
    return "_".join(key[c] for c in ("kernel", "function", "variant", "Br", "Bc", "d", "causal")
                    if key[c]) + ".sass"


def replaced(stamps: dict, row) -> bool:
    """``--add --from-sass``: whether table row ``row`` gives way to the kept folder whose
    STAMP is ``stamps``: the folder recorded the kernel's resources (from its current sources),
    or the folder holds the kernel and the row is of a register-capped kernel from another
    compiler (a standalone ptxas links those to other code: compiled again). A row of an
    uncapped kernel without recorded resources stays (ptxas and a launch's link give it the
    same code: results/h100/compile/launch_check.py)."""
    name = sass_file_name(row)
    if kept_resources(stamps, name, row["kernel_source"]) is not None:
        return True
    stamp = stamps.get(name)
    return (bool(row["register_cap"]) and device_held(stamps, row)
            and stamp["ptxas"] != row["ptxas"])


def device_held(stamps: dict, row) -> bool:
    """Whether a folder whose STAMP is ``stamps`` (by file name) holds the kernel of table row
    ``row`` (a dict with the key columns, ``function`` and ``kernel_source``), compiled from its
    current sources."""
    stamp = stamps.get(sass_file_name(row))
    return stamp is not None and stamp["kernel_source"] == row["kernel_source"]


def write_table(path: Path, columns, rows, ptxas: str, date: str) -> None:
    """The CSV of ``rows`` (dicts of ``columns``, each with its kernel-source digest, which
    tests hold to the sources); a row without a ptxas version and date (a kept row has its
    own) gets these."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows({"ptxas": ptxas, "date": date, **row} for row in rows)


if __name__ == "__main__":
    main(sys.argv[1:])
