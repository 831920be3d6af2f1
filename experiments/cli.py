"""Command line: ``python -m experiments [list | run NAME... | bench]`` (also installed as the
``numba-flash-experiments`` console script).

    python -m experiments [--quick] [--out DIR] # = run all, on the GPU if there is one
    python -m experiments list
    python -m experiments run fig2_left io_scaling [--device gpu|cpu] [--quick] [--out DIR]
    python -m experiments run all              # (or --all) every experiment, validation last
    python -m experiments bench [--quick] [--out DIR]
    python -m experiments kernels NAME... [bench] [--tests] [--quick] [--list]  # build them all first

Each experiment writes ``DIR/<name>/<name>.csv`` and ``.png`` (DIR defaults to ``results``).
A failing experiment is reported and the others still run; the exit status is then 1.
"""
from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
import time
import traceback
from pathlib import Path

from experiments import EXPERIMENTS

BENCH = "experiments.bench"


def _summary(module_name: str) -> str:
    """First docstring line of an experiment module, without importing numba or the simulator."""
    import ast

    path = Path(__file__).parent / (module_name.rsplit(".", 1)[1] + ".py")
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return doc.splitlines()[0] if doc else ""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action")
    sub.add_parser("list", help="name the experiments")

    def common(p):
        p.add_argument("--device", choices=("gpu", "cpu"), default=None,
                       help="default: gpu when numba.cuda.is_available() and NUMBA_ENABLE_CUDASIM is not 1")
        p.add_argument("--quick", action="store_true", help="fewer points and timing repetitions")
        p.add_argument("--out", type=Path, default=Path("results"), help="results folder (default: results)")

    run = sub.add_parser("run", help="run experiments")
    run.add_argument("names", nargs="*", help=f"experiments ({', '.join(EXPERIMENTS)}) or 'all'")
    run.add_argument("--all", action="store_true", help="run every experiment")
    common(run)
    bench = sub.add_parser("bench", help="time our kernels against PyTorch SDPA (GPU)")
    common(bench)
    bench.add_argument("--dtype", nargs="+", choices=("float32", "float16", "bfloat16"), default=None,
                       help="input formats to bench (default: all three)")
    kernels = sub.add_parser("kernels", help="build, in one parallel warm-up, every kernel the named "
                             "experiments (and the bench, the GPU tests) launch, into the disk cache")
    kernels.add_argument("names", nargs="*", help="experiments, 'bench' or 'all' (default: all and bench)")
    kernels.add_argument("--quick", action="store_true", help="the --quick runs' kernels")
    kernels.add_argument("--tests", action="store_true", help="and the GPU tests' (tests/gpu_kernels.py)")
    kernels.add_argument("--dtype", nargs="+", choices=("float32", "float16", "bfloat16"), default=None,
                         help="the bench's input formats (default: all three)")
    kernels.add_argument("--list", action="store_true", help="print the configs; build nothing")
    kernels.add_argument("--processes", type=int, default=None, help="default: one per core")
    return parser


def _kernels(args) -> int:
    """``python -m experiments kernels``: list the configs, then build them in parallel."""
    from experiments.common.kernels import listed_configs

    names = args.names if args.names and "all" not in args.names else [*EXPERIMENTS, "bench"]
    unknown = [n for n in names if n not in EXPERIMENTS and n != "bench"]
    if unknown:
        raise SystemExit(f"unknown experiment(s): {', '.join(unknown)}; see 'python -m experiments list'")
    jobs = [(EXPERIMENTS.get(n, BENCH), n) for n in names]
    configs = listed_configs(jobs, args.quick, tuple(args.dtype or ()))
    if args.tests:
        from tests.gpu_kernels import CONFIGS
        configs = list(dict.fromkeys([*CONFIGS, *configs]))
    import numba_flash
    from numba_flash.precompile import distinct

    every, configs = len(configs), distinct(configs)
    if args.list:
        for config in configs:
            print(config)
        print(f"{len(configs)} configs building the kernels of {every}")
        return 0
    start = time.perf_counter()
    rows = numba_flash.warmup(configs, args.processes)
    errors = [row for row in rows if row["error"]]
    for row in errors:
        print(f"warm-up failed: {row['forward']}/{row['backward']} {row['dtype']} d={row['d']} "
              f"N={row['n_q']}: {row['error']}")
    print(f"{len(configs)} configs built in {time.perf_counter() - start:.0f} s "
          f"({sum(r['compiled'] for r in rows)} kernels compiled, {sum(r['loaded'] for r in rows)} loaded)")
    return 1 if errors else 0


def _command(argv: list[str]) -> str:
    prog = sys.argv[0] if sys.argv else ""
    prefix = "python -m experiments" if prog.endswith("__main__.py") or not prog else os.path.basename(prog)
    return " ".join([prefix, *map(shlex.quote, argv)])


def run_module(module_name: str, name: str, ctx) -> Path:
    """Run one experiment module and write its CSV and PNG; returns the CSV path."""
    from experiments.common.metadata import run_metadata
    from experiments.common.results import write_rows

    module = importlib.import_module(module_name)
    folder = ctx.folder(name)
    rows = module.run(ctx)
    csv_path = folder / f"{name}.csv"
    write_rows(csv_path, rows, run_metadata(name, ctx.device, ctx.command))
    module.plot(rows, folder / f"{name}.png")
    return csv_path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("--") and argv[0] != "--help"):
        argv = ["run", "--all", *argv]  # `python -m experiments [--quick ...]` runs everything
    args = _parser().parse_args(argv)
    if args.action == "list":
        for name, module_name in EXPERIMENTS.items():
            print(f"{name:12s} {_summary(module_name)}")
        print(f"{'bench':12s} (subcommand) {_summary(BENCH)}")
        return 0
    if args.action == "kernels":
        return _kernels(args)
    if args.action == "run":
        names = list(EXPERIMENTS) if args.all or not args.names or "all" in args.names else args.names
        unknown = [n for n in names if n not in EXPERIMENTS]
        if unknown:
            raise SystemExit(f"unknown experiment(s): {', '.join(unknown)}; see 'python -m experiments list'")
        jobs = [(EXPERIMENTS[n], n) for n in EXPERIMENTS if n in names]  # registry order: validation last
    else:
        jobs = [(BENCH, "bench")]

    from experiments.common.context import RunContext, select_device

    device = select_device(args.device)
    ctx = RunContext(device=device, quick=args.quick, out=args.out, command=_command(argv),
                     dtypes=tuple(getattr(args, "dtype", None) or ()))
    print(f"device: {device}{' (quick)' if args.quick else ''}; results in {args.out}/")
    failed = []
    for module_name, name in jobs:
        print(f"== {name}")
        started = time.perf_counter()
        failures_before = len(ctx.failures)
        try:
            csv_path = run_module(module_name, name, ctx)
        except Exception:
            traceback.print_exc()
            failed.append(name)
            print(f"== {name}: FAILED after {time.perf_counter() - started:.1f} s")
            continue
        if len(ctx.failures) > failures_before:
            failed.append(name)
        print(f"== {name}: {csv_path} ({time.perf_counter() - started:.1f} s)"
              + (" -- with FAILURES, see above" if name in failed else ""))
    if ctx.skipped:
        print("skipped in this run:\n  " + "\n  ".join(ctx.skipped))
    if failed:
        print(f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
