"""Host time of one ``numba_flash.flash_attention`` call, stage by stage, and what it does to
the per-call CUDA-event timing the bench uses (GPU, torch inputs).

    python tools/host_overhead.py [--shapes 4,16,4096,128 4,16,4096,64]

Host times are taken while the GPU is busy (a ``torch.cuda._sleep`` queued first), so no stage
waits for the device. Per call: events around each call, synchronised (the bench's method: the
host work before the launch is inside the events). Back to back: events around 20 calls, so
each call's host work overlaps the previous kernel: the kernel's own time.
"""
import argparse
import statistics
import time

import numpy as np
import torch
from numba import cuda

import numba_flash as nf
from numba_flash import checks
from numba_flash.kernels.flash_forward_fa2_tc import make_flash_forward_fa2_tc
from numba_flash.launch import launch

KERNEL = "flash_forward_tc"


def host_us(fn, reps=20) -> float:
    """Median host time of fn(i) in microseconds, with the GPU kept busy."""
    times = []
    for i in range(reps):
        torch.cuda._sleep(3_000_000)
        start = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def event_ms(fn, calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for i in range(calls):
        fn(i)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def report(B, H, N, d):
    sets = [[torch.randn(B, H, N, d, device="cuda") for _ in range(3)] for _ in range(3)]
    call = lambda i: nf.flash_attention(*sets[i % 3])   # noqa: E731
    for i in range(3):
        call(i)
    print(f"({B},{H},{N},{d})")
    stages = {
        "whole API call": call,
        "checks.attention_shapes": lambda i: checks.attention_shapes(*sets[i % 3]),
        "cuda.as_cuda_array (one input)": lambda i: cuda.as_cuda_array(sets[i % 3][0]),
        "cuda.device_array (o)": lambda i: cuda.device_array((B, H, N, d), np.float32),
        "torch.empty + as_cuda_array (o)": lambda i: cuda.as_cuda_array(torch.empty((B, H, N, d), device="cuda")),
    }
    tiling = checks.tiling_for(None, (KERNEL,), d)
    kernel = make_flash_forward_fa2_tc(tiling, d, False)
    flat = [cuda.as_cuda_array(x).reshape(x.numel()) for x in sets[0]]
    args = (*flat, cuda.device_array(B * H * N * d, np.float32), cuda.device_array(B * H * N, np.float32),
            np.float32(0.1), N, N, 0, 0)
    grid, threads, smem = (tiling.Tr(N), B * H), tiling.threads_for(KERNEL), tiling.smem_bytes(KERNEL, d)
    stages["launch.launch (kernel only)"] = lambda i: launch(kernel, grid, threads, smem, *args)
    for label, fn in stages.items():
        print(f"  host {label:34s} {host_us(fn):8.1f} us")
    flops = 4 * B * H * N * N * d
    per_call = statistics.median(event_ms(call, 1) for _ in range(20))
    back_to_back = event_ms(call, 20)
    print(f"  per call (events around each)    {per_call:8.3f} ms  {flops / per_call / 1e9:6.2f} TFLOP/s")
    print(f"  back to back (mean of 20)        {back_to_back:8.3f} ms  {flops / back_to_back / 1e9:6.2f} TFLOP/s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="+", default=["4,16,4096,128", "4,16,4096,64"], help="B,H,N,d")
    for shape in ap.parse_args().shapes:
        report(*map(int, shape.split(",")))


if __name__ == "__main__":
    main()
