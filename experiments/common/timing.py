"""GPU timing with CUDA events: warm-up, then the median of at least ten timed runs, each run on
the next of several input sets (so no run finds its inputs hot in L2 from the run before)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass

#: Timed runs per measurement (the median is reported); --quick keeps the floor of ten.
REPEATS = 20
QUICK_REPEATS = 10
WARMUP = 2
#: Input sets rotated through: fresh inputs per run without allocating inside the timed region.
INPUT_SETS = 3


@dataclass(frozen=True)
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    runs: int


def time_cuda(fn, input_sets: list, *, repeats: int = REPEATS, warmup: int = WARMUP) -> Timing:
    """Time ``fn(inputs)`` with CUDA events on the default stream (where our kernels and torch's
    both launch); every run is bracketed by its own pair of events and synchronised."""
    from numba import cuda

    if repeats < 10:
        raise ValueError("take the median of at least ten runs")
    for i in range(warmup):
        fn(input_sets[i % len(input_sets)])
    cuda.synchronize()
    times = []
    for i in range(repeats):
        inputs = input_sets[i % len(input_sets)]
        start, end = cuda.event(timing=True), cuda.event(timing=True)
        start.record()
        fn(inputs)
        end.record()
        end.synchronize()
        times.append(cuda.event_elapsed_time(start, end))
    return Timing(statistics.median(times), min(times), max(times), len(times))


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12
