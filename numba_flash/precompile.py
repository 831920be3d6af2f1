"""Compile kernels ahead of time, in parallel processes, into the disk cache.

    import numba_flash as nf
    nf.warmup([nf.KernelConfig(d=64, n_q=4096, causal=True), nf.KernelConfig(d=128, n_q=1024)])

    python -m numba_flash.precompile --d 64 128 --n 4096 --causal both   # the same from a shell
    python -m numba_flash.precompile --d 128 --causal yes --window 1024 0 --group 4   # windowed GQA
    python -m numba_flash.precompile --info | --prune | --clear          # list; drop stale; empty

A ``KernelConfig`` names the calls whose kernels to build: a forward algorithm and a backward
one at head dim d for N_q queries and N_k keys. The kernels depend on d, causal, the tiling
(which, when not given, depends on N_q and N_k: ``Tiling.kernel_default``) and the argument
types, not on the batch, heads or sequence lengths themselves, so a warm-up on one short
sequence with the config's tilings builds what a call of any batch and heads launches. Each
config compiles in its own process (numba compiles under a global lock: threads would queue)
and saves its kernels to ``kernel_cache``; a later process loads them in 1-2.5 s (CUDA context
included; H200, README). Compiling is mostly numba's single-threaded Python front end, so the
processes run side by side on the machine's cores.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from multiprocessing import get_context

import numpy as np

from simulator.kv_split import divisors
from simulator.tiling import Tiling

from . import kernel_cache
from .precision import FORMATS, host_type

FORWARDS = ("fa2", "fa2_fma", "fa1", "standard", "fa2_fp16x3")
BACKWARDS = ("fa2", "fa2_fma", "standard", "fa2_fp16x3")


@dataclass(frozen=True)
class KernelConfig:
    """Kernels of ``forward`` (a ``flash_attention`` algorithm or "standard"; None: none) and
    ``backward`` (a ``flash_attention_backward`` algorithm or "standard"; None: none) at head dim
    ``d`` for ``n_q`` queries and ``n_k`` keys (default n_q), on inputs of ``dtype`` ("float32",
    "float16" or "bfloat16"). ``deterministic``: the backward's deterministic kernels (and the
    FFMA forward they run again, at its default tiling for d, whatever the N);
    ``tiling``: as passed to the API (None: its default); ``window``: a sliding window as passed
    to the API (its sides, not its size, decide the kernels); ``group``: query heads per K/V
    head (GQA / MQA; 1: none); ``dropout``: the kernels with dropout (any p > 0 and seed give
    the same); ``block_size``: the block-sparse kernels for block masks of that block size
    (None: dense; any mask gives the same kernels, the block size their tiling)."""

    d: int
    n_q: int
    n_k: int | None = None
    causal: bool = False
    forward: str | None = "fa2"
    backward: str | None = "fa2"
    deterministic: bool = False
    tiling: Tiling | None = None
    dtype: str = "float32"
    window: tuple[int, int] | None = None
    group: int = 1
    dropout: bool = False
    block_size: tuple[int, int] | None = None

    def __post_init__(self):
        if self.block_size is not None:
            object.__setattr__(self, "block_size", tuple(self.block_size))
        if self.window is not None:
            object.__setattr__(self, "window", tuple(self.window))
        if not isinstance(self.group, int) or isinstance(self.group, bool) or self.group < 1:
            raise ValueError(f"KernelConfig.group must be a positive int, got {self.group!r}")
        if self.dtype not in FORMATS:
            raise ValueError(f"KernelConfig.dtype must be one of {FORMATS}, got {self.dtype!r}")
        if self.n_k is None:
            object.__setattr__(self, "n_k", self.n_q)
        if self.forward not in FORWARDS + (None,):
            raise ValueError(f"KernelConfig.forward must be one of {FORWARDS} or None, got {self.forward!r}")
        if self.backward not in BACKWARDS + (None,):
            raise ValueError(f"KernelConfig.backward must be one of {BACKWARDS} or None, got {self.backward!r}")
        if (self.backward == "standard") != (self.forward == "standard") and self.backward:
            raise ValueError("KernelConfig: the standard backward needs the standard forward (its P), "
                             "and the flash backwards a flash forward or none")


#: Sequence length the warm-up launches at: the binaries do not depend on it, only (through
#: the default tiling, resolved for the config's own N first) the tiling does.
WARMUP_N = 64


def _tilings(c: KernelConfig) -> tuple[Tiling | None, Tiling | None]:
    """The forward's and the backward's tilings, as the API resolves them at the config's N."""
    from . import checks
    from .api import backward_kernels, forward_tiling

    def resolve(kernels):
        return checks.tiling_for(c.tiling, kernels, c.d, c.n_q, c.n_k, c.dropout, c.block_size)

    forward = backward = None
    if c.forward == "standard":
        forward = resolve(("standard_matmul",))
    elif c.forward:
        forward = forward_tiling(c.forward, c.dtype, c.tiling, c.d, c.n_q, c.n_k, c.dropout, c.block_size)
    if c.backward == "standard":
        backward = resolve(("standard_matmul",))
    elif c.backward == "fa2_fp16x3" and not c.deterministic:   # its own default, rows of parts
        from . import fp16x3
        backward = c.tiling or fp16x3.backward_default_tiling(c.d, c.n_q, c.n_k, c.dropout, c.block_size)
    elif c.backward:
        backward = resolve(backward_kernels(c.backward, c.deterministic, c.dtype))
    return forward, backward


def distinct(configs) -> list[KernelConfig]:
    """``configs`` without those whose every kernel another of them builds, in their order. A
    pass's kernels are keyed by its algorithm, the tiling the API resolves for it at the
    config's N (the binaries depend on that, not on N itself) and the spec's other parameters,
    so that, e.g., a forward-only config is dropped beside the forward + backward one of the
    same kernels, and configs that differ only in N collapse to one."""
    from simulator.flash import recompute_tiling

    from .checks import smem_limit_bytes

    def passes(c: KernelConfig) -> frozenset:
        try:
            forward, backward = _tilings(c)
        except ValueError:        # a tiling that does not fit: kept, for build to report
            return frozenset({("unresolved", c)})
        spec = (c.d, c.causal, c.dtype, c.window, c.group, c.dropout, c.block_size)
        keys = set()
        if c.forward:
            keys.add(("forward", c.forward, forward, spec))
        if c.backward:
            keys.add(("backward", c.backward, c.deterministic, backward, spec))
        if c.backward and c.deterministic:     # the FFMA forward it runs again, in fp32
            keys.add(("forward", "fa2_fma", recompute_tiling(c.d, smem_limit_bytes()), (*spec[:2], "float32", *spec[3:])))
        return frozenset(keys)

    keyed = [(passes(c), i, c) for i, c in enumerate(configs)]
    built, kept = set(), []
    for keys, i, c in sorted(keyed, key=lambda row: (-len(row[0]), row[1])):
        if not keys <= built:
            kept.append((i, c))
            built |= keys
    return [c for _, c in sorted(kept, key=lambda row: row[0])]


def build(config: KernelConfig) -> dict:
    """Run ``config``'s calls once in this process (compiling, or loading from the disk cache,
    every kernel they launch) on (1, 1, WARMUP_N, d) zeros with the tilings of the config's N;
    returns the seconds each pass took, the cache's counts and an error, if one was raised."""
    import numba_flash as nf

    c = config
    n_q, n_k = min(c.n_q, WARMUP_N), min(c.n_k, WARMUP_N)
    q = np.zeros((1, c.group, n_q, c.d), host_type(c.dtype))
    k = np.zeros((1, 1, n_k, c.d), host_type(c.dtype))
    band = {} if c.window is None else {"window": c.window}
    if c.dropout:
        band.update(dropout_p=0.1, dropout_seed=0)
    if c.block_size is not None:
        bq, bk = c.block_size
        band.update(block_mask=np.ones((-(-n_q // bq), -(-n_k // bk)), bool), block_size=c.block_size)
    before = dict(kernel_cache.STATS)
    report = {**asdict(c), "tiling": None if c.tiling is None else (c.tiling.Br, c.tiling.Bc),
              "forward_s": 0.0, "backward_s": 0.0, "error": ""}
    try:
        forward_tiling, backward_tiling = _tilings(c)
        start = time.perf_counter()
        if c.forward == "standard":
            o, p = nf.standard_attention(q, k, k, causal=c.causal, return_probs=True, tiling=forward_tiling)
        elif c.forward:
            nf.flash_attention(q, k, k, causal=c.causal, algorithm=c.forward, tiling=forward_tiling,
                               **band)
        report["forward_s"] = time.perf_counter() - start
        start = time.perf_counter()
        if c.backward == "standard":
            nf.standard_attention_backward(q, q, k, k, o, p, causal=c.causal, tiling=backward_tiling)
        elif c.backward:
            o, lse = q.copy(), np.zeros(q.shape[:-1], np.float32)
            # kv_split=1: this config's group's kernel (the split groups are configs of their own)
            nf.flash_attention_backward(q, q, k, k, o, lse, causal=c.causal, algorithm=c.backward,
                                        deterministic=c.deterministic, tiling=backward_tiling,
                                        kv_split=1, **band)
        report["backward_s"] = time.perf_counter() - start
    except Exception as exc:      # reported, not raised: the other configs still build
        report["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return {**report, **{key: kernel_cache.STATS[key] - before.get(key, 0) for key in ("loaded", "compiled")}}


def with_splits(configs) -> list[KernelConfig]:
    """``configs`` and, after each of grouped K/V heads with a backward, the backward-only
    configs of every split group (group / s for each divisor s > 1): the backward's kernel
    depends on how the call splits the group (``kv_split``), which depends on its batch and
    heads, so a warm-up builds them all, each in its own process."""
    out = []
    for c in configs:
        out.append(c)
        if c.group > 1 and c.backward:
            out += [replace(c, forward=None, group=c.group // s) for s in divisors(c.group)[1:]]
    return list(dict.fromkeys(out))


def warmup(configs, processes: int | None = None) -> list[dict]:
    """Build every config's kernels into the disk cache (``with_splits``' configs), ``processes``
    at a time (default: one per config, at most the machine's cores); returns ``build``'s report
    of each, in order. Under the CUDA simulator nothing is compiled: returns [] at once."""
    from .memory import simulator_enabled

    configs = with_splits(configs)
    if simulator_enabled() or not configs:
        return []
    workers = processes or min(len(configs), os.cpu_count() or 1)
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        return list(pool.map(build, configs))


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m numba_flash.precompile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--d", type=int, nargs="+", default=[64], help="head dims")
    parser.add_argument("--n", type=int, nargs="+", default=[4096], help="sequence lengths (N_q = N_k)")
    parser.add_argument("--causal", choices=("yes", "no", "both"), default="both")
    parser.add_argument("--forward", default="fa2", choices=FORWARDS)
    parser.add_argument("--backward", default="fa2", choices=BACKWARDS + ("none",))
    parser.add_argument("--dtype", nargs="+", default=["float32"], choices=FORMATS)
    parser.add_argument("--window", type=int, nargs=2, default=None, metavar=("LEFT", "RIGHT"),
                        help="a sliding window (flash-attention's window_size; -1: unbounded side)")
    parser.add_argument("--group", type=int, default=1,
                        help="query heads per K/V head (GQA / MQA)")
    parser.add_argument("--dropout", action="store_true", help="the kernels with dropout")
    parser.add_argument("--processes", type=int, default=None)
    parser.add_argument("--info", action="store_true", help="list the cache and exit")
    parser.add_argument("--clear", action="store_true", help="empty the cache and exit")
    parser.add_argument("--prune", action="store_true",
                        help="remove entries of other kernel sources than these, and exit")
    parser.add_argument("--pack", metavar="FILE",
                        help="write this source's kernels as one .tar.xz (with --part-mib: pieces FILE.000, ...) and exit")
    parser.add_argument("--part-mib", type=float, default=None,
                        help="with --pack: the largest piece, in MiB")
    parser.add_argument("--unpack", metavar="FILE",
                        help="add the kernels of a --pack archive (FILE, or its pieces) to the cache and exit")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(argv)
    if args.info:
        found = kernel_cache.entries()
        print(f"{kernel_cache.cache_dir()}: {len(found)} kernels, "
              f"{sum(p.stat().st_size for p in found) / 1e6:.1f} MB")
        for path in found:
            print(f"  {path.name}  {path.stat().st_size / 1e3:.0f} kB")
        return 0
    if args.clear:
        print(f"removed {kernel_cache.clear()} kernels from {kernel_cache.cache_dir()}")
        return 0
    if args.prune:
        print(f"removed {kernel_cache.prune()} kernels of other sources from {kernel_cache.cache_dir()}")
        return 0
    if args.pack:
        part = None if args.part_mib is None else int(args.part_mib * 2**20)
        files = kernel_cache.pack(args.pack, part)
        print(f"{kernel_cache.cache_dir()} -> " + ", ".join(f"{f} ({f.stat().st_size / 2**20:.1f} MiB)" for f in files))
        return 0
    if args.unpack:
        print(f"added {kernel_cache.unpack(args.unpack)} kernels to {kernel_cache.cache_dir()}")
        return 0
    causal = {"yes": (True,), "no": (False,), "both": (False, True)}[args.causal]
    backward = None if args.backward == "none" else args.backward
    configs = [KernelConfig(d=d, n_q=n, causal=c, forward=args.forward, backward=backward, dtype=t,
                            window=args.window, group=args.group, dropout=args.dropout)
               for d in args.d for n in args.n for c in causal for t in args.dtype]
    start = time.perf_counter()
    for row in warmup(configs, args.processes):
        print(f"{row['dtype']} d={row['d']} N={row['n_q']} causal={row['causal']}: forward {row['forward_s']:.1f} s, "
              f"backward {row['backward_s']:.1f} s ({row['compiled']} compiled, {row['loaded']} loaded)"
              + (f" ERROR {row['error']}" if row["error"] else ""))
    print(f"{len(configs)} configs in {time.perf_counter() - start:.1f} s; cache {kernel_cache.cache_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
