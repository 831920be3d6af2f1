"""Registers, spills and shared memory of every kernel the API launches by default, from ptxas:
writes ``simulator/kernel_resources.csv``, which the occupancy model reads
(``simulator.occupancy.resources``).

    CUDA_HOME=/usr/local/cuda-13.0 python tools/kernel_resources.py [--d 32 64 ...] [--jobs 2]

Each kernel is compiled to PTX for sm_90 and assembled by ``ptxas -arch=sm_90 -v`` with its
register cap, as tools/compile_check.py does (and the driver's JIT at launch, which may be a
different ptxas version: the H200's readings are checked in tests/test_simulator_occupancy.py).
Configurations: the tensor-core forward and backward (fp32, and fp16 with 16-byte copies) and
the FFMA forward, backward (dQ by
atomics, and without for ``deterministic=True``), dQ kernel and Algorithm 1 forward at their
default tilings (``Tiling.kernel_default``), causal and not, at each ``--d``; the standard
attention's matmuls (64 x 64; each transpose variant), softmax, dS and D = rowsum(dO * O) kernels
with the API's 128 threads (D at each --d), and the fp32 -> fp16 conversion of the half
backward's dQ. A blank d or causal in the CSV: the kernel's code depends on neither.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from compile_check import ptxas_resources, ptxas_version, register_cap, sm90_ptx

from numba_flash import kernel_cache
from numba_flash.kernels.flash_backward import make_flash_backward_dq, make_flash_backward_kv, make_row_dot
from numba_flash.kernels.convert import make_convert
from numba_flash.kernels.flash_backward_half import make_flash_backward_half
from numba_flash.kernels.flash_backward_tc import make_flash_backward_tc
from numba_flash.kernels.flash_forward_alg1 import make_flash_forward_alg1
from numba_flash.kernels.flash_forward_fa2 import make_flash_forward_fa2
from numba_flash.kernels.flash_forward_fa2_tc import make_flash_forward_fa2_tc
from numba_flash.kernels.flash_forward_half import make_flash_forward_half
from numba_flash.kernels.standard import make_ds, make_matmul, make_softmax
from numba_flash.checks import BLOCK_SIZE
from simulator.flash import SPARSE_VARIANT
from simulator.spec import Mask
from simulator.tiling import Tiling, table_variant

OUT = Path(__file__).resolve().parent.parent / "simulator" / "kernel_resources.csv"
HEAD_DIMS = (32, 64, 80, 128, 256)
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
    the kernel's code does not depend on it."""

    kernel: str
    variant: str
    kind: str
    d: int | None
    causal: bool | None
    make: Callable[[Tiling | None], object]
    tiled: bool = True
    block_size: tuple[int, int] | None = None   # block-sparse: the default tiling nested in these

    @property
    def tiling(self) -> Tiling | None:
        if not self.tiled:
            return None
        return Tiling.kernel_default(self.kernel, self.d or 0, block_size=self.block_size)


def configurations(head_dims) -> list[Config]:
    """Every configuration, the slow tensor-core compiles first (so that parallel jobs balance)."""
    tc, fma = [], []
    for d in head_dims:
        for causal in (False, True):
            tc.append(Config("flash_forward_tc", "", "fa2_tc", d, causal,
                             lambda t, d=d, c=causal: make_flash_forward_fa2_tc(t, d, c)))
            tc.append(Config("flash_backward_tc", "", "bwd_tc", d, causal,
                             lambda t, d=d, c=causal: make_flash_backward_tc(t, d, c)))
            # fp16 (bf16 compiles to the same code but its conversions), 16-byte copies
            tc.append(Config("flash_forward_half", "", "fwd_half", d, causal,
                             lambda t, d=d, c=causal: make_flash_forward_half(t, d, c, "float16", True)))
            tc.append(Config("flash_backward_half", "", "bwd_half", d, causal,
                             lambda t, d=d, c=causal: make_flash_backward_half(t, d, c, "float16", True)))
            # block-sparse (Mask.sparse), at the tilings FlexAttention's 128 x 128 blocks leave
            sparse = Mask(upper=causal, sparse=True)
            tc += [Config(kernel, SPARSE_VARIANT, kind, d, causal,
                          lambda t, d=d, m=sparse, f=factory: f(t, d, m), block_size=BLOCK_SIZE)
                   for kernel, kind, factory in (
                       ("flash_forward_tc", "fa2_tc", make_flash_forward_fa2_tc),
                       ("flash_backward_tc", "bwd_tc", make_flash_backward_tc),
                       ("flash_forward_half", "fwd_half",
                        lambda t, d, m: make_flash_forward_half(t, d, m, "float16", True)),
                       ("flash_backward_half", "bwd_half",
                        lambda t, d, m: make_flash_backward_half(t, d, m, "float16", True)))]
            fma.append(Config("flash_forward_v2", "", "fa2", d, causal,
                              lambda t, d=d, c=causal: make_flash_forward_fa2(t, d, c)))
            fma.append(Config("flash_forward_v1", "", "alg1", d, causal,
                              lambda t, d=d, c=causal: make_flash_forward_alg1(t, d, c, "float32")))
            fma.append(Config("flash_backward", "", "bwd_kv", d, causal,
                              lambda t, d=d, c=causal: make_flash_backward_kv(t, d, c, True)))
            fma.append(Config("flash_backward", "no_atomic_dq", "bwd_kv", d, causal,
                              lambda t, d=d, c=causal: make_flash_backward_kv(t, d, c, False)))
            fma.append(Config("flash_backward_dq", "", "bwd_dq", d, causal,
                              lambda t, d=d, c=causal: make_flash_backward_dq(t, d, c)))
        fma += [Config("row_dot", "zero_dq" if zero else "", "row_dot", d, None,
                       lambda _, d=d, z=zero: make_row_dot(ROW_THREADS, d, z, "float32"), tiled=False)
                for zero in (True, False)]
    standard = [Config("standard_matmul", variant, "matmul", None, None,
                       lambda t, a=trans_a, b=trans_b: make_matmul(t, a, b, "float32"))
                for variant, trans_a, trans_b in (("", False, False), ("trans_a", True, False),
                                                  ("trans_b", False, True))]
    standard += [Config("softmax", "", "softmax", None, causal,
                        lambda _, c=causal: make_softmax(ROW_THREADS, c, "float32"), tiled=False)
                 for causal in (False, True)]
    standard.append(Config("ds", "", "ds", None, None, lambda _: make_ds(ROW_THREADS, "float32"), tiled=False))
    # the half backward's dQ_accum -> dQ (fp16)
    standard.append(Config("convert", "narrow", "convert_narrow", None, None,
                           lambda _: make_convert("float16", False), tiled=False))
    return tc + fma + standard


def _blank(value) -> str:
    return "" if value is None else str(value)


def measure(head_dims, index: int) -> dict[str, str]:
    """Compile configuration ``index`` of ``configurations(head_dims)``; its CSV row (ptxas and
    date columns left out)."""
    config = configurations(head_dims)[index]
    tiling = config.tiling
    kernel = config.make(tiling)
    cap = register_cap(kernel)
    found = ptxas_resources(sm90_ptx(config.kind, kernel), cap)
    row = {"kernel": config.kernel, "function": kernel.py_func.__name__,
           "variant": table_variant(config.variant, tiling),
           "Br": _blank(tiling and tiling.Br), "Bc": _blank(tiling and tiling.Bc),
           "d": _blank(config.d), "causal": _blank(config.causal),
           "threads": str(tiling.threads_for(config.kernel) if tiling else ROW_THREADS),
           "dynamic_smem_bytes": str(tiling.smem_bytes(config.kernel, config.d or 0) if tiling else 0),
           "register_cap": _blank(cap)}
    row.update({key: str(value) for key, value in found.items()})
    print(f"{row['kernel']:18s} {row['variant']:13s} d={row['d']:4s} causal={row['causal']:5s} "
          f"{row['Br']:>3s}x{row['Bc']:<3s} {row['threads']:>4s} threads  {row['registers']:>3s} "
          f"registers (cap {row['register_cap'] or '-'}), spills {row['spill_store_bytes']}/"
          f"{row['spill_load_bytes']} B", flush=True)
    return row


def main(argv) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, nargs="+", default=HEAD_DIMS, help="head dims")
    parser.add_argument("--jobs", type=int, default=2, help="parallel compiles")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    head_dims = tuple(args.d)
    count = len(configurations(head_dims))
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(measure, [head_dims] * count, range(count)))
    write_table(args.out, COLUMNS, rows, ptxas_version(), datetime.date.today().isoformat(),
                kernel_cache.source_digest()[:16])
    print(f"{count} kernels -> {args.out}")


def write_table(path: Path, columns, rows, ptxas: str, date: str, digest: str) -> None:
    """The CSV of ``rows`` (dicts of ``columns``), each stamped with the ptxas version, the
    date and the kernel-source digest (tests hold the digest to the sources)."""
    stamp = {"ptxas": ptxas, "date": date, "kernel_source": digest}
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows({**row, **stamp} for row in rows)


if __name__ == "__main__":
    main(sys.argv[1:])
