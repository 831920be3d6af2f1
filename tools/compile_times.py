"""Cold compile time of each kernel, and its load time from the disk cache in a new process.

    python tools/compile_times.py OUT.csv [--processes N]

Builds each configuration below twice through ``numba_flash.warmup`` in an empty cache
directory: the first pass compiles (every config in its own process, side by side), the second
loads what the first saved, in fresh processes. One CSV row per (kernel, pass) with the
device, date, versions and commit (README's compile-time table comes from it).
"""
import argparse
import csv
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numba_flash as nf  # noqa: E402
from experiments.common.metadata import run_metadata  # noqa: E402

#: (label, config): one kernel each where the API allows (the backward's D kernel comes along)
CONFIGS = [
    *((f"tc forward d={d}{' causal' if c else ''}", nf.KernelConfig(d=d, n_q=4096, causal=c, backward=None))
      for d in (64, 128) for c in (False, True)),
    *((f"tc backward d={d}{' causal' if c else ''}", nf.KernelConfig(d=d, n_q=4096, causal=c, forward=None))
      for d in (64, 128) for c in (False, True)),
    ("tc forward d=256", nf.KernelConfig(d=256, n_q=4096, backward=None)),
    ("tc backward d=256", nf.KernelConfig(d=256, n_q=4096, forward=None)),
    ("FFMA forward (fa2_fma) d=64", nf.KernelConfig(d=64, n_q=4096, forward="fa2_fma", backward=None)),
    ("FFMA backward (fa2_fma) d=64", nf.KernelConfig(d=64, n_q=4096, forward=None, backward="fa2_fma")),
    ("FFMA deterministic backward d=64", nf.KernelConfig(d=64, n_q=4096, forward=None, backward="fa2_fma",
                                                          deterministic=True)),
    ("Algorithm 1 forward (fa1) d=64", nf.KernelConfig(d=64, n_q=4096, forward="fa1", backward=None)),
    ("standard forward d=64", nf.KernelConfig(d=64, n_q=4096, forward="standard", backward=None)),
    ("standard forward + backward d=64", nf.KernelConfig(d=64, n_q=4096, forward="standard",
                                                         backward="standard")),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--processes", type=int, default=None)
    args = parser.parse_args()
    meta = run_metadata("compile_times", "gpu", " ".join(["python", *sys.argv]))
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ[nf.kernel_cache.CACHE_ENV] = cache
        labels = [label for label, _ in CONFIGS]
        for pass_name in ("cold compile", "load from disk cache"):
            for label, row in zip(labels, nf.warmup([c for _, c in CONFIGS], args.processes)):
                seconds = row["forward_s"] + row["backward_s"]
                rows.append({"kernel": label, "pass": pass_name, "seconds": round(seconds, 2),
                             "compiled": row["compiled"], "loaded": row["loaded"],
                             "error": row["error"], **meta})
                print(f"{pass_name:22s} {label:36s} {seconds:7.1f} s  "
                      f"({row['compiled']} compiled, {row['loaded']} loaded) {row['error']}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
