"""Time the FA2 forward (and backward) under register caps, beside torch SDPA, on one GPU.

    python tools/tune_forward.py [--n 4096] [--d 64] [--caps none,128] [--tilings 64x64,128x64]
        [--algorithms fa2,fa2_fma] [--causal] [--backward [--bwd-algorithms fa2,fa2_fma]
        [--bwd-tilings default,32x128]]
Records the numbers behind each kernel version's changelog line. Inputs are fresh random
tensors rotated among 4 sets; CUDA events, 5 warm-ups, median of 20. A cap applies at every
head dim here (the library caps some kernels only up to launch.CAPPED_UP_TO_HEAD_DIM); the
backward runs uncapped, at its own tilings (default: the API's), after each forward.
"""
import argparse
import statistics

import torch

import numba_flash as nf
from numba_flash import launch
from numba_flash.kernels import flash_forward_fa2, flash_forward_fa2_tc
from tiling_arg import tiling_of


def median_ms(fn, sets, reps=20, warmup=5):
    for i in range(warmup):
        fn(*sets[i % len(sets)])
    times = []
    for i in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*sets[i % len(sets)])
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--b", type=int, default=4)
    ap.add_argument("--h", type=int, default=16)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--caps", default="none,128,96,80,64")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--tilings", default="64x64", help="Br x Bc pairs, comma separated")
    ap.add_argument("--algorithms", default="fa2", help="flash_attention algorithms, comma separated")
    ap.add_argument("--backward", action="store_true", help="also time the backward")
    ap.add_argument("--bwd-algorithms", default="fa2", help="flash_attention_backward algorithms")
    ap.add_argument("--bwd-tilings", default="default", help="Br x Bc pairs for the backward")
    args = ap.parse_args()
    B, H, N, d = args.b, args.h, args.n, args.d
    flops = 4 * B * H * N * N * d * (0.5 if args.causal else 1.0)
    sets = [tuple(torch.randn(B, H, N, d, device="cuda") for _ in range(4)) for _ in range(4)]
    print(f"B={B} H={H} N={N} d={d} causal={args.causal}; forward {flops / 1e9:.1f} GFLOP")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for backend in (SDPBackend.MATH, SDPBackend.EFFICIENT_ATTENTION):
        with sdpa_kernel(backend):
            ms = median_ms(lambda q, k, v, do: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=args.causal), sets)
        print(f"sdpa {backend.name:22s} fwd {ms:8.3f} ms  {flops / ms / 1e9:6.2f} TFLOP/s")
        if args.backward:
            grad_sets = [tuple(x.detach().clone().requires_grad_() for x in s[:3]) + s[3:] for s in sets]
            with sdpa_kernel(backend):
                ms = median_ms(lambda q, k, v, do: torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=args.causal).backward(do), grad_sets)
            print(f"sdpa {backend.name:22s} fwd+bwd {ms:8.3f} ms  {3.5 * flops / ms / 1e9:6.2f} TFLOP/s")
    ref = [torch.nn.functional.scaled_dot_product_attention(
        *(x.double() for x in sets[0][:3]), is_causal=args.causal)]
    for alg, cap, tiling in ((a, c, t) for a in args.algorithms.split(",")
                             for c in args.caps.split(",") for t in args.tilings.split(",")):
        value = None if cap == "none" else int(cap)
        tiling = tiling_of(tiling)
        launch.REGISTER_CAPS[nf.api.ALGORITHMS[alg]] = value
        launch.CAPPED_UP_TO_HEAD_DIM.pop(nf.api.ALGORITHMS[alg], None)
        for factory in (flash_forward_fa2.make_flash_forward_fa2, flash_forward_fa2_tc.make_flash_forward_fa2_tc):
            factory.cache_clear()
        fwd = lambda q, k, v, do: nf.flash_attention(q, k, v, causal=args.causal, tiling=tiling, algorithm=alg)
        err = (torch.as_tensor(fwd(*sets[0]), device="cuda").double() - ref[0]).abs().max().item()
        ms = median_ms(fwd, sets)
        line = (f"{alg:7s} {tiling.Br}x{tiling.Bc} max_registers={cap:5s} fwd {ms:8.3f} ms  "
                f"{flops / ms / 1e9:6.2f} TFLOP/s  max|o - o_fp64| {err:.1e}")
        print(line, flush=True)
        if args.backward:
            time_backward(args, alg, tiling, sets, flops, ms)


def time_backward(args, alg, tiling, sets, flops, fwd_ms):
    """Time each backward algorithm and tiling on the saved outputs of one forward; print its
    largest gradient error against float64 autograd and the forward + backward rate."""
    saved = [(q, k, v, do, *nf.flash_attention(q, k, v, causal=args.causal, return_lse=True,
                                               tiling=tiling, algorithm=alg))
             for q, k, v, do in sets]
    q64, k64, v64 = (x.double().requires_grad_() for x in sets[0][:3])
    torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, is_causal=args.causal).backward(
        sets[0][3].double())
    for balg, bt in ((a, t) for a in args.bwd_algorithms.split(",") for t in args.bwd_tilings.split(",")):
        btiling = tiling_of(bt)
        bwd = lambda q, k, v, do, o, lse: nf.flash_attention_backward(
            do, q, k, v, o, lse, causal=args.causal, tiling=btiling, algorithm=balg)
        grads = bwd(*saved[0])
        err = max(((torch.as_tensor(g, device="cuda").double() - ref.grad).abs().max()
                   / ref.grad.abs().max()).item() for g, ref in zip(grads, (q64, k64, v64)))
        ms = median_ms(bwd, saved)
        print(f"  bwd {balg:7s} {bt:8s} {ms:8.3f} ms  {2.5 * flops / ms / 1e9:6.2f} TFLOP/s  "
              f"max|dx - dx_fp64|/max|dx_fp64| {err:.1e}   fwd+bwd {3.5 * flops / (fwd_ms + ms) / 1e9:6.2f} "
              "TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
