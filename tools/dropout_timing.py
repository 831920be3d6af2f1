"""Dropout's cost on the GPU: forward and backward time with dropout_p = 0.1 against the same
call without dropout (issue 15's targets: <= 15 % forward, <= 20 % backward).

    python tools/dropout_timing.py OUT.csv

Per-call CUDA events around the public API on torch tensors (host work counted), the median of
20 after 3 warm-up calls (``experiments.common.timing.time_cuda``); every output checked finite
first. Kernels built first in parallel."""
import sys
import time
from pathlib import Path

import torch

import numba_flash as nf
from experiments.common.metadata import run_metadata
from experiments.common.results import write_rows
from experiments.common.timing import time_cuda

SHAPES = [(4, 16, 4096, 64, False), (4, 16, 4096, 128, False), (2, 32, 4096, 128, True)]
DTYPES = ["float16", "bfloat16", "float32"]
P = 0.1
TARGET = {"fwd": 0.15, "bwd": 0.20}


def main(path):
    configs = [nf.KernelConfig(d=d, n_q=n, causal=c, dtype=dt, dropout=drop)
               for B, H, n, d, c in SHAPES for dt in DTYPES for drop in (False, True)]
    start = time.perf_counter()
    nf.warmup(configs)
    print(f"built {len(configs)} configs in {time.perf_counter() - start:.0f} s", flush=True)
    rows = []
    for B, H, n, d, causal in SHAPES:
        for dt in DTYPES:
            dtype = getattr(torch, dt)
            q, k, v, do = (torch.randn(B, H, n, d, device="cuda", dtype=dtype) for _ in range(4))
            times = {}
            for p in (0.0, P):
                extra = dict(dropout_p=p, dropout_seed=1234) if p else {}
                o, lse = nf.flash_attention(q, k, v, causal=causal, return_lse=True, **extra)
                grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal, **extra)
                assert all(torch.isfinite(t).all() for t in (o, *grads))
                times[p, "fwd"] = time_cuda(lambda _: nf.flash_attention(
                    q, k, v, causal=causal, return_lse=True, **extra), [None], warmup=3).median_ms
                times[p, "bwd"] = time_cuda(lambda _: nf.flash_attention_backward(
                    do, q, k, v, o, lse, causal=causal, **extra), [None], warmup=3).median_ms
            for passes, target in TARGET.items():
                base, drop = times[0.0, passes], times[P, passes]
                row = dict(B=B, H=H, N=n, d=d, causal=causal, dtype=dt, passes=passes, dropout_p=P,
                           ms_no_dropout=round(base, 4), ms_dropout=round(drop, 4),
                           overhead=round(drop / base - 1, 4), target=target)
                row["meets_target"] = row["overhead"] <= target
                rows.append(row)
                print(row, flush=True)
    write_rows(Path(path), rows, run_metadata("dropout_timing", "gpu", "python tools/dropout_timing.py"))


if __name__ == "__main__":
    main(sys.argv[1])
