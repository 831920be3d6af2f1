"""Time the fp16 / bf16 forward at several tilings beside torch SDPA's FLASH_ATTENTION, after
checking each kernel against float64 (flash-attention's rule), on one GPU.

    python tools/tune_half.py [--shapes 4,16,4096,64 4,16,4096,128c] [--dtypes float16 bfloat16]
        [--tilings 128x64 128x128 64x64] [--out results.csv]

Shapes are B,H,N,d with a trailing "c" for causal. The kernels of every (tiling, d, causal,
dtype) are compiled first, in parallel processes (numba_flash.warmup). Check: o against float64
on (1, 2, 1000 x 1023, d) inputs, error at most 2x that of torch's math backend in the same
format. Timing: CUDA events, fresh inputs rotated among 3 sets, 3 warm-ups, median of 20.
Records the numbers behind flash_forward_half.py's changelog lines.
"""
import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import numba_flash as nf
from experiments.common.metadata import run_metadata
from experiments.common.results import write_rows


def median_ms(fn, sets, reps=20, warmup=3):
    for i in range(warmup):
        fn(sets[i % len(sets)])
    times = []
    for i in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(sets[i % len(sets)])
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def as_torch(o, dtype):
    """Our result (a torch tensor, or a numba float16 array) as a torch tensor of ``dtype``."""
    if isinstance(o, torch.Tensor):
        return o
    return torch.as_tensor(o.view(np.int16), device="cuda").view(dtype)


def ours(q, k, v, causal, tiling):
    return nf.flash_attention(q, k, v, causal=causal, tiling=tiling)


def check(dtype, d, causal, tiling):
    """(our error, the math backend's error) relative to max |o|, against float64."""
    g = torch.Generator(device="cuda").manual_seed(d)
    q = torch.randn(1, 2, 1000, d, device="cuda", generator=g).to(dtype)
    k, v = (torch.randn(1, 2, 1023, d, device="cuda", generator=g).to(dtype) for _ in range(2))
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    with sdpa_kernel(SDPBackend.MATH):
        plain = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    # torch's is_causal is top-left aligned: diagonal=0
    mine = nf.flash_attention(q, k, v, causal=causal, tiling=tiling, diagonal=0 if causal else None)
    mine = as_torch(mine, dtype)
    scale = ref.abs().max().item()
    return ((mine.double() - ref).abs().max().item() / scale,
            (plain.double() - ref).abs().max().item() / scale)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="+", default=["4,16,4096,64", "4,16,4096,128"])
    ap.add_argument("--dtypes", nargs="+", default=["float16"])
    ap.add_argument("--tilings", nargs="+", default=["128x64"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    shapes = [(tuple(int(x) for x in s.rstrip("c").split(",")), s.endswith("c")) for s in args.shapes]
    tilings = [nf.Tiling(*(int(x) for x in t.split("x"))) for t in args.tilings]
    configs = [nf.KernelConfig(d=shape[3], n_q=shape[2], causal=causal, backward=None, tiling=t, dtype=dt)
               for shape, causal in shapes for t in tilings for dt in args.dtypes]
    for row in nf.warmup(list(dict.fromkeys(configs))):
        if row["error"]:
            print("warm-up failed:", row)
    rows = []
    for (B, H, N, d), causal in shapes:
        flops = 4 * B * H * N * N * d * (0.5 if causal else 1.0)
        for name in args.dtypes:
            dtype = getattr(torch, name)
            sets = [{n: torch.randn(B, H, N, d, device="cuda").to(dtype) for n in "qkv"} for _ in range(3)]
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                flash = median_ms(lambda x: F.scaled_dot_product_attention(x["q"], x["k"], x["v"], is_causal=causal), sets)
            for t in tilings:
                try:
                    err, plain = check(dtype, d, causal, t)
                    ms = median_ms(lambda x: ours(x["q"], x["k"], x["v"], causal, t), sets)
                except Exception as exc:   # reported, the other tilings still run
                    print(f"{name} {(B, H, N, d)} causal={causal} {t}: {type(exc).__name__}: {exc}")
                    continue
                row = dict(dtype=name, B=B, H=H, N=N, d=d, causal=causal, Br=t.Br, Bc=t.Bc, ms=ms,
                           tflops=flops / ms / 1e9, flash_ms=flash, vs_flash=flash / ms,
                           error=err, plain_error=plain, rule_ok=err <= 2 * plain)
                rows.append(row)
                print(f"{name:8s} {B},{H},{N},{d}{' causal' if causal else ''} {t.Br}x{t.Bc}: "
                      f"{ms:.3f} ms {row['tflops']:.1f} TFLOP/s ({row['vs_flash']:.2f}x FLASH "
                      f"{flops / flash / 1e9:.1f}); error {err:.2e} (math {plain:.2e})", flush=True)
    if args.out and rows:
        command = "python tools/tune_half.py " + " ".join(sys.argv[1:])
        write_rows(Path(args.out), rows, run_metadata("tools/tune_half.py", "gpu", command))


if __name__ == "__main__":
    main()
