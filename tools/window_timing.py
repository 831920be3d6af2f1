"""Sliding windows' time on the GPU against dense causal's: forward and backward of the causal
window (w, 0) at several w, beside the dense causal call of the same shape (issue 15's target:
time <= band fraction x dense + 10 %), with the model's kernel time beside each.

    python tools/window_timing.py OUT.csv

Per-call CUDA events around the public API on torch tensors (launch plans: little host work),
the median of 20 after 3 warm-up calls (``experiments.common.timing.time_cuda``); every output
checked finite first. Kernels built first in parallel. Run it on two checkouts in one device
call to compare kernel versions on the same card."""
import sys
import time
from pathlib import Path

import torch

import numba_flash as nf
from experiments.common import model
from experiments.common.cases import Case, visible_scores
from experiments.common.metadata import run_metadata
from experiments.common.results import write_rows
from experiments.common.timing import time_cuda

B, H, N, D = 1, 16, 4096, 64
WINDOWS = (128, 512, 2048, N - 1, None)      # None: dense causal; N - 1: the same mask, band kernels
DTYPES = ("float16", "float32")


def window_of(w: int | None) -> tuple[int, int] | None:
    """The causal window (w, 0) of a sweep point; None for dense causal."""
    return None if w is None else (w, 0)


def main(path):
    configs = [nf.KernelConfig(d=D, n_q=N, causal=True, dtype=dt, window=window_of(w))
               for dt in DTYPES for w in (None, 128)]
    start = time.perf_counter()
    nf.warmup(configs)
    print(f"built {len(configs)} configs in {time.perf_counter() - start:.0f} s", flush=True)
    gpu = model.gpu_of_device(torch.cuda.get_device_name())      # the model's rates of that card
    rows = []
    for dt in DTYPES:
        q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=getattr(torch, dt)) for _ in range(4))
        times = {}
        for w in WINDOWS:
            window = window_of(w)
            o, lse = nf.flash_attention(q, k, v, causal=True, window=window, return_lse=True)
            grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=True, window=window)
            assert all(torch.isfinite(t).all() for t in (o, *grads))
            times[w, "fwd"] = time_cuda(lambda _: nf.flash_attention(
                q, k, v, causal=True, window=window, return_lse=True), [None], warmup=3).median_ms
            times[w, "bwd"] = time_cuda(lambda _: nf.flash_attention_backward(
                do, q, k, v, o, lse, causal=True, window=window), [None], warmup=3).median_ms
        for w in WINDOWS:
            band = visible_scores(N, True, window_of(w)) / visible_scores(N, True)
            calls = model.reports(Case("fa2", "fwd_bwd", B, H, N, D, causal=True, dtype=dt,
                                       window=window_of(w)), gpu=gpu)
            for passes, report in zip(("fwd", "bwd"), calls):      # the forward's, the backward's
                row = dict(B=B, H=H, N=N, d=D, dtype=dt, w=w if w is not None else "dense", passes=passes,
                           band_fraction=round(band, 4), ms=round(times[w, passes], 4),
                           dense_ms=round(times[None, passes], 4),
                           vs_dense=round(times[w, passes] / times[None, passes], 4),
                           excess_vs_dense=round(times[w, passes] / times[None, passes] - band, 4),
                           model_kernel_ms=round(report.levels.time_s * 1e3, 4), model_rates=gpu)
                rows.append(row)
                print(row, flush=True)
    write_rows(Path(path), rows, run_metadata("window_timing", "gpu", "python tools/window_timing.py"))


if __name__ == "__main__":
    main(sys.argv[1])
