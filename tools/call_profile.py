"""Where a forward call's time goes: host work per call against the kernel's own time.

    python tools/host_overhead.py [--shape 4,16,4096,64] [--dtype float16] [--calls 50] [--profile]

Prints, for torch CUDA inputs: the kernel time (torch.profiler's CUDA activity, mean over the
calls), the per-call time as the bench measures it (CUDA events around each call, synchronised),
the host time of a call when the GPU is not waited for (perf_counter over back-to-back calls,
then one synchronise), and with ``--profile`` cProfile's top functions of those calls.
"""
import argparse
import cProfile
import pstats
import statistics
import time

import torch

import numba_flash as nf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4,16,4096,64")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    B, H, N, d = (int(x) for x in args.shape.split(","))
    dtype = getattr(torch, args.dtype)
    q, k, v = (torch.randn(B, H, N, d, device="cuda").to(dtype) for _ in range(3))

    def call():
        return nf.flash_attention(q, k, v, causal=args.causal)

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(args.calls):
            call()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    per_name = {}
    for e in kernels:
        per_name.setdefault(e.name, []).append(e.device_time if hasattr(e, "device_time") else e.cuda_time)
    for name, times in per_name.items():
        print(f"kernel {name[:60]}: {len(times)} launches, mean {statistics.mean(times) / 1e3:.3f} ms")
    events = []
    for _ in range(args.calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        events.append(start.elapsed_time(end))
    print(f"per call, CUDA events, synchronised: median {statistics.median(events):.3f} ms")
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(args.calls):
        call()
    host = (time.perf_counter() - started) / args.calls
    torch.cuda.synchronize()
    print(f"host time a call, GPU not waited for: {host * 1e3:.3f} ms")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.calls):
            call()
        profiler.disable()
        torch.cuda.synchronize()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
