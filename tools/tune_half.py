"""Time the fp16 / bf16 forward (or, with ``--backward``, the backward) at several tilings
beside torch SDPA's FLASH_ATTENTION, after checking each kernel against float64
(flash-attention's rule), on one GPU.

    python tools/tune_half.py [--shapes 4,16,4096,64 4,16,4096,128c] [--dtypes float16 bfloat16]
        [--tilings 128x64 128x128 64x64] [--backward] [--out results.csv]

Shapes are B,H,N,d with a trailing "c" for causal. The kernels of every (tiling, d, causal,
dtype) are compiled first, in parallel processes (numba_flash.warmup). Check: o (backward: dq,
dk, dv) against float64 on (1, 2, 1000 x 1023, d) inputs, error at most 2x (gradients: 3x) that
of torch's math backend in the same format. Timing: CUDA events, fresh inputs rotated among 3
sets, 3 warm-ups, median of 20. ``--backward``: the tiling is the backward's; ours is timed
alone (o, lse computed beforehand) and as forward + backward, FLASH_ATTENTION as forward +
backward through autograd (``bwd_ms``: its difference from the forward). FLOPs: 4 B H N^2 d
forward, 2.5x that backward, half of each causal.
Records the numbers behind flash_forward_half.py's and flash_backward_half.py's changelog lines.
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
from tiling_arg import tiling_of


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


def _sdpa_grads(q, k, v, do, causal):
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    o.backward(do)
    return q.grad, k.grad, v.grad


def check(dtype, d, causal, tiling, backward=False):
    """(our error, the math backend's error) relative to max |o| against float64: the worst of
    dq, dk, dv relative to the 3x rule with ``backward``, reported as (ours, plain) of it."""
    g = torch.Generator(device="cuda").manual_seed(d)
    q = torch.randn(1, 2, 1000, d, device="cuda", generator=g).to(dtype)
    k, v = (torch.randn(1, 2, 1023, d, device="cuda", generator=g).to(dtype) for _ in range(2))
    do = torch.randn(1, 2, 1000, d, device="cuda", generator=g).to(dtype)
    mask = dict(causal=causal, diagonal=0 if causal else None)   # torch's is_causal: top-left
    if backward:
        refs = _sdpa_grads(q.double(), k.double(), v.double(), do.double(), causal)
        with sdpa_kernel(SDPBackend.MATH):
            plains = _sdpa_grads(q, k, v, do, causal)
        o, lse = nf.flash_attention(q, k, v, **mask, return_lse=True)
        mine = nf.flash_attention_backward(do, q, k, v, o, lse, **mask, tiling=tiling)
    else:
        refs = (F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal),)
        with sdpa_kernel(SDPBackend.MATH):
            plains = (F.scaled_dot_product_attention(q, k, v, is_causal=causal),)
        mine = (nf.flash_attention(q, k, v, **mask, tiling=tiling),)
    errors = []
    for x, plain, ref in zip(mine, plains, refs):
        scale = ref.abs().max().item()
        errors.append(((as_torch(x, dtype).double() - ref).abs().max().item() / scale,
                       (plain.double() - ref).abs().max().item() / scale))
    return max(errors, key=lambda e: e[0] / e[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="+", default=["4,16,4096,64", "4,16,4096,128"])
    ap.add_argument("--dtypes", nargs="+", default=["float16"])
    ap.add_argument("--tilings", nargs="+", default=["128x64"])
    ap.add_argument("--backward", action="store_true", help="tune the backward's tiling")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    shapes = [(tuple(int(x) for x in s.rstrip("c").split(",")), s.endswith("c")) for s in args.shapes]
    tilings = [tiling_of(t) for t in args.tilings]
    configs = [nf.KernelConfig(d=shape[3], n_q=shape[2], causal=causal, dtype=dt,
                               **(dict(forward=None) if args.backward else dict(backward=None)),
                               tiling=t)
               for shape, causal in shapes for t in tilings for dt in args.dtypes]
    if args.backward:   # the forward at its default tiling
        configs += [nf.KernelConfig(d=shape[3], n_q=shape[2], causal=causal, dtype=dt, backward=None)
                    for shape, causal in shapes for dt in args.dtypes]
    for row in nf.warmup(list(dict.fromkeys(configs))):
        if row["error"]:
            print("warm-up failed:", row)
    rows = []
    for (B, H, N, d), causal in shapes:
        flops = 4 * B * H * N * N * d * (0.5 if causal else 1.0)
        for name in args.dtypes:
            dtype = getattr(torch, name)
            sets = [{n: torch.randn(B, H, N, d, device="cuda").to(dtype) for n in ("q", "k", "v", "do")}
                    for _ in range(3)]
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                flash = median_ms(lambda x: F.scaled_dot_product_attention(x["q"], x["k"], x["v"], is_causal=causal), sets)
                if args.backward:
                    flash_total = median_ms(lambda x: _sdpa_grads(x["q"], x["k"], x["v"], x["do"], causal), sets)
            if args.backward:
                for x in sets:
                    x["o"], x["lse"] = nf.flash_attention(x["q"], x["k"], x["v"], causal=causal, return_lse=True)
            for t in tilings:
                try:
                    err, plain = check(dtype, d, causal, t, args.backward)
                    if args.backward:
                        ms = median_ms(lambda x: nf.flash_attention_backward(
                            x["do"], x["q"], x["k"], x["v"], x["o"], x["lse"], causal=causal, tiling=t), sets)
                        total = median_ms(lambda x: nf.flash_attention_backward(
                            x["do"], x["q"], x["k"], x["v"], *nf.flash_attention(
                                x["q"], x["k"], x["v"], causal=causal, return_lse=True),
                            causal=causal, tiling=t), sets)
                    else:
                        ms = median_ms(lambda x: ours(x["q"], x["k"], x["v"], causal, t), sets)
                except Exception as exc:   # reported, the other tilings still run
                    print(f"{name} {(B, H, N, d)} causal={causal} {t}: {type(exc).__name__}: {exc}")
                    continue
                rule = 3 if args.backward else 2
                row = dict(dtype=name, B=B, H=H, N=N, d=d, causal=causal, Br=t.Br, Bc=t.Bc, ms=ms,
                           tflops=flops * (2.5 if args.backward else 1) / ms / 1e9, flash_ms=flash,
                           vs_flash=flash / ms, error=err, plain_error=plain, rule_ok=err <= rule * plain)
                if args.backward:
                    row.update(fwd_bwd_ms=total, fwd_bwd_tflops=3.5 * flops / total / 1e9,
                               flash_fwd_bwd_ms=flash_total, vs_flash=flash_total / total,
                               flash_bwd_ms=flash_total - flash)
                rows.append(row)
                print(f"{name:8s} {B},{H},{N},{d}{' causal' if causal else ''} {t.Br}x{t.Bc}: "
                      f"{ms:.3f} ms {row['tflops']:.1f} TFLOP/s "
                      + (f"(FLASH bwd ~{flash_total - flash:.3f} ms); fwd+bwd {total:.3f} ms "
                         f"{row['fwd_bwd_tflops']:.1f} TFLOP/s ({row['vs_flash']:.2f}x FLASH "
                         f"{3.5 * flops / flash_total / 1e9:.1f})" if args.backward else
                         f"({row['vs_flash']:.2f}x FLASH {flops / flash / 1e9:.1f})")
                      + f"; error {err:.2e} (math {plain:.2e})", flush=True)
    if args.out and rows:
        command = "python tools/tune_half.py " + " ".join(sys.argv[1:])
        write_rows(Path(args.out), rows, run_metadata("tools/tune_half.py", "gpu", command))


if __name__ == "__main__":
    main()
