"""Every kernel an experiment's cases launch, compiled before the experiment runs them: in
parallel processes into numba_flash's disk cache (``numba_flash.warmup``), so that the timing
runs and ncu's child processes load them instead of compiling one after another."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from .cases import BACKWARD_ALGORITHM, Case
from .context import RunContext


def kernel_config(case: Case):
    """The ``numba_flash.KernelConfig`` of a case's calls (its window's sides, its group of
    query heads per K/V head, a block mask's block size and dropout decide kernels too; the
    mask, p and the key lengths do not: every padded entry's call takes the kernels of N keys
    while N - padding and N round to the same tile side)."""
    from numba_flash import KernelConfig

    backward = None
    if case.passes == "fwd_bwd":
        backward = "standard" if case.method == "standard" else BACKWARD_ALGORITHM[case.method]
    return KernelConfig(d=case.d, n_q=case.N, causal=case.causal, forward=case.method,
                        backward=backward, deterministic=case.deterministic,
                        tiling=case.tiling_object(), dtype=case.dtype, window=case.window,
                        group=case.H // (case.kv_heads or case.H), block_size=case.block_size,
                        dropout=case.dropout_p > 0)


class KernelsListed(Exception):
    """What ``build_kernels`` raises in a listing run (``ctx.listed`` a list), once it has
    appended the configs there: the experiment stops before it launches anything."""


def build_kernels(ctx: RunContext, name: str, cases: list[Case]) -> None:
    """On the GPU, build the kernels of ``cases`` (each config once); print what it took. In a
    listing run, append the cases to ``ctx.listed`` and raise ``KernelsListed``."""
    if ctx.listed is not None:
        ctx.listed.extend(cases)
        raise KernelsListed(name)
    if not ctx.gpu:
        return
    import numba_flash

    configs = list(dict.fromkeys(kernel_config(case) for case in cases))
    start = time.perf_counter()
    rows = numba_flash.warmup(configs)
    errors = [f"{row['forward']}/{row['backward']} d={row['d']} N={row['n_q']}: {row['error']}"
              for row in rows if row["error"]]
    print(f"  {name}: kernels of {len(configs)} configs built in {time.perf_counter() - start:.0f} s "
          f"({sum(r['compiled'] for r in rows)} compiled, {sum(r['loaded'] for r in rows)} loaded)"
          + "".join(f"\n    warm-up failed: {e}" for e in errors))


#: Experiments whose kernels are built as they run, not through ``build_kernels`` (a listing
#: run would run them whole): the machine rates, the ring's processes, the GPT's model, the
#: validation of other experiments' CSVs.
BUILT_AS_THEY_RUN = ("calibrate", "ring", "train_gpt", "validation")


def listed_configs(jobs: list[tuple[str, str]], quick: bool, dtypes: tuple = ()) -> list:
    """The distinct ``KernelConfig``s that the experiments of ``jobs`` ((module, name) pairs, as
    the CLI runs them) would build in a GPU run, found without a GPU (``listed_cases``)."""
    return list(dict.fromkeys(kernel_config(case) for case in listed_cases(jobs, quick, dtypes)))


def listed_cases(jobs: list[tuple[str, str]], quick: bool, dtypes: tuple = ()) -> list[Case]:
    """The distinct cases whose kernels the experiments of ``jobs`` would build in a GPU run,
    found without a GPU: each experiment runs in a listing context up to its first
    ``build_kernels`` (its only one, but for window and block_sparse, whose timing reuses the
    kernels their traffic built)."""
    import importlib

    listed: list = []
    for module_name, name in jobs:
        if name in BUILT_AS_THEY_RUN:
            continue
        with tempfile.TemporaryDirectory() as out:
            ctx = RunContext(device="gpu", quick=quick, out=Path(out), command="", dtypes=dtypes,
                             listed=listed)
            try:
                importlib.import_module(module_name).run(ctx)
            except KernelsListed:
                continue
        raise RuntimeError(f"{name}: ran without building kernels through build_kernels; "
                           f"add it to BUILT_AS_THEY_RUN")
    return list(dict.fromkeys(listed))
