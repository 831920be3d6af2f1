"""Host time of a ``flash_attention`` / ``flash_attention_backward`` call on torch CUDA tensors,
checked (first call of a shape) and replayed (``numba_flash.plans``), beside SDPA's, and what it
does to the per-call CUDA-event timing the bench uses (GPU).

    python tools/host_overhead.py [--shapes 4,16,4096,64 2,32,4096,128,causal] [--dtypes float16 float32]
                                  [--profile]

Host times are taken while the GPU is busy (a ``torch.cuda._sleep`` queued first), so no call
waits for the device. Per call: events around each call, synchronised (the bench's method: the
host work before the launch is inside the events). Back to back: events around 20 calls, so
each call's host work overlaps the previous kernel. ``--profile``: cProfile's top functions of
200 replayed forward calls.
"""
import argparse
import cProfile
import io
import pstats
import statistics
import time

import torch

import numba_flash as nf
from numba_flash import plans


def host_us(fn, reps=50) -> float:
    """Median host time of fn(i) in microseconds, with the GPU kept busy."""
    times = []
    for i in range(reps):
        torch.cuda._sleep(2_000_000)
        start = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def event_ms(fn, calls=1) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for i in range(calls):
        fn(i)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def report(B, H, N, d, causal, dtype, profile):
    sets = [[torch.randn(B, H, N, d, device="cuda", dtype=dtype) for _ in range(3)] for _ in range(3)]
    forward = lambda i: nf.flash_attention(*sets[i % 3], causal=causal)   # noqa: E731
    sdpa = lambda i: torch.nn.functional.scaled_dot_product_attention(*sets[i % 3], is_causal=causal)  # noqa: E731
    for i in range(3):
        forward(i), sdpa(i)
    checked = host_us(lambda i: (plans.PLANS.clear(), forward(i)), 20)
    print(f"({B},{H},{N},{d}){' causal' if causal else ''} {dtype}: host us: checked {checked:.1f}, "
          f"replayed {host_us(forward):.1f}, SDPA {host_us(sdpa):.1f}")
    print(f"   per call ms: ours {statistics.median(event_ms(forward) for _ in range(20)):.4f} "
          f"(back to back {event_ms(forward, 20):.4f}); SDPA {statistics.median(event_ms(sdpa) for _ in range(20)):.4f} "
          f"(back to back {event_ms(sdpa, 20):.4f})")
    q, k, v = sets[0]
    do = torch.randn_like(q)
    o, lse = nf.flash_attention(q, k, v, causal=causal, return_lse=True)
    backward = lambda i: nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal)   # noqa: E731
    for i in range(3):
        backward(i)
    print(f"   backward host us (replayed) {host_us(backward):.1f}; per call ms "
          f"{statistics.median(event_ms(backward) for _ in range(10)):.4f} (back to back {event_ms(backward, 10):.4f})")
    if profile:
        pr = cProfile.Profile()
        torch.cuda._sleep(50_000_000)
        pr.enable()
        for i in range(200):
            forward(i)
        pr.disable()
        torch.cuda.synchronize()
        out = io.StringIO()
        pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(12)
        print(out.getvalue())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="+", default=["4,16,4096,64", "2,32,4096,128,causal", "32,12,512,64"],
                    help="B,H,N,d[,causal]")
    ap.add_argument("--dtypes", nargs="+", default=["float16", "float32"])
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    shapes = [(*map(int, s.split(",")[:4]), s.endswith(",causal")) for s in args.shapes]
    nf.warmup([nf.KernelConfig(d=d, n_q=N, causal=c, dtype=t) for t in args.dtypes for _, _, N, d, c in shapes])
    for dtype in args.dtypes:
        for shape in shapes:
            report(*shape, getattr(torch, dtype), args.profile)


if __name__ == "__main__":
    main()
