"""Every kernel an experiment's cases launch, compiled before the experiment runs them: in
parallel processes into numba_flash's disk cache (``numba_flash.warmup``), so that the timing
runs and ncu's child processes load them instead of compiling one after another."""
from __future__ import annotations

import time

from .cases import BACKWARD_ALGORITHM, Case
from .context import RunContext


def kernel_config(case: Case):
    """The ``numba_flash.KernelConfig`` of a case's calls (its window's sides, its group of
    query heads per K/V head and a block mask's block size decide kernels too; the mask
    itself does not)."""
    from numba_flash import KernelConfig

    backward = None
    if case.passes == "fwd_bwd":
        backward = "standard" if case.method == "standard" else BACKWARD_ALGORITHM[case.method]
    return KernelConfig(d=case.d, n_q=case.N, causal=case.causal, forward=case.method,
                        backward=backward, deterministic=case.deterministic,
                        tiling=case.tiling_object(), dtype=case.dtype, window=case.window,
                        group=case.H // (case.kv_heads or case.H), block_size=case.block_size)


def build_kernels(ctx: RunContext, name: str, cases: list[Case]) -> None:
    """On the GPU, build the kernels of ``cases`` (each config once); print what it took."""
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
