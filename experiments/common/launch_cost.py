"""What a launch costs beside its work, and what a stream of short, latency-bound loads reaches:
ncu's kernel time (``gpu__time_duration``) of two microbenchmarks, for the cost model's row
kernels (``simulator.row_kernels``).

Why: the model streamed the row kernels (D = rowsum(dO O), the dQ conversion, dS, the softmax,
fp16x3's head maxima and split) at the DRAM bandwidths, and ncu measured them 17-87 % longer
(README, the per-launch errors): the small ones take microseconds more than their bytes, and
the large ones reach 1-3 TB/s, as if each thread waited for its loads one round after another.
Two microbenchmarks measure the two mechanisms, with no attention kernel in them:

- ``launch_empty``: a kernel whose blocks of ``EMPTY_THREADS`` threads do nothing, at grids of
  1 block and ``EMPTY_BLOCKS_PER_SM`` blocks an SM. Its time at one block is the floor of any
  launch (``empty_kernel_s``: from the launch's start to its end, as ncu times our kernels);
  the growth with the blocks an SM is what an SM takes to start and retire a block
  (``MachineRates.block_dispatch_s``);
- ``launch_stream``: every thread of a full SM (``STREAM_THREADS`` threads a block, blocks of a
  wave) reads ``k`` independent 4-byte words of a buffer far larger than L2 and adds them, then
  the next round -- a grid-stride loop, each round waiting for its loads (a branch on their sum
  keeps the next round's loads behind it); a word written a thread, at the end: reads alone
  (2026-12-07, H100: a first version wrote a word a round, whose writes took DRAM bandwidth the
  reads then lacked -- 2.6 TB/s of reads at k = 8). The read bandwidth
  it reaches (``stream_read_bytes_per_s``) against the bytes an SM has in flight (threads an SM
  x 4 k) is Little's law of DRAM under load: a kernel with fewer bytes in flight is latency
  bound below the bandwidth ``simulator.rates`` measured with many.

Under the simulator both kernels run once, tiny (the tests check what they compute); nothing is
measured.
"""
from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from .microbench import Measurement, ncu_rows

EMPTY_THREADS = 128
#: Blocks an SM of the empty kernel's grids (0: one block in all).
EMPTY_BLOCKS_PER_SM = (0, 1, 4, 16, 64, 256)
STREAM_THREADS = 256
#: (words each thread reads a round, blocks an SM of STREAM_THREADS): 8 of 256 threads fill an
#: SM's 2048 thread slots; 4 leave half of them empty.
STREAM_CONFIGS = ((1, 4), (1, 8), (2, 8), (4, 8), (8, 8))
STREAM_BYTES = 512 * 2**20        # read by each stream launch: far above the 60 MB L2
METRICS = "gpu__time_duration.sum,dram__bytes_read.sum"
EMPTY_BY = ("ncu --kernel-name launch_empty: gpu__time_duration.sum of a kernel of blocks of "
            f"{EMPTY_THREADS} threads that do nothing; blocks_per_sm = grid / SMs (a grid of 1: 1 / SMs)")
STREAM_BY = ("ncu --kernel-name launch_stream: bytes read / gpu__time_duration.sum, each thread "
             "reading ilp independent 4-byte words a round, round after round (a word written at the end) "
             f"(a grid-stride loop over {STREAM_BYTES >> 20} MiB); detail: bytes in flight an SM")


@lru_cache(maxsize=None)
def empty_kernel():
    """launch_empty(out): nothing (``out`` is written by no thread)."""
    @cuda.jit
    def launch_empty(out):
        if cuda.threadIdx.x >= 1 << 30:     # never: the launch's cost alone
            out[0] = 1.0
    return launch_empty


@lru_cache(maxsize=None)
def stream_kernel(k: int):
    """launch_stream(src, dst, rounds): thread t of T (the grid) reads src[(r k + j) T + t], j < k,
    in round r of ``rounds`` (src holds rounds k T words, all >= 0), and writes the sum of all
    it read to dst[t] at the end."""
    @cuda.jit
    def launch_stream(src, dst, rounds):
        t = cuda.grid(1)
        threads = cuda.gridsize(1)
        acc = float32(0.0)
        for r in range(rounds):
            got = float32(0.0)
            for j in range(k):              # k is a constant: unrolled, the k loads in flight together
                got += src[(r * k + j) * threads + t]
            if got < 0:                     # never (src >= 0); the next round's loads wait for this
                break                       # round's (no load is issued past an unresolved branch)
            acc += got
        dst[t] = acc
    return launch_stream


def empty_grids(sm_count: int) -> list[int]:
    """Grid of each empty launch, in launch order."""
    return [max(1, n * sm_count) for n in EMPTY_BLOCKS_PER_SM]


def run_launches(sm_count: int, size: int = STREAM_BYTES, threads: tuple[int, int] = (EMPTY_THREADS, STREAM_THREADS)):
    """Launch the empty kernel at ``empty_grids``, then the stream kernel at each of
    ``STREAM_CONFIGS`` over (at most) ``size`` bytes read (the child ncu profiles; the tests,
    tiny, under the simulator, with fewer ``threads`` a block); returns each stream launch's
    (src, dst) on the host."""
    from numba_flash.launch import launch

    empty_threads, stream_threads = threads
    out = cuda.device_array(1, np.float32)
    for grid in empty_grids(sm_count):
        launch(empty_kernel(), grid, empty_threads, 0, out)
    cuda.synchronize()
    host = (np.arange(size // 4) % 251).astype(np.float32)
    src = cuda.to_device(host)
    results = []
    for k, blocks_per_sm in STREAM_CONFIGS:
        grid = blocks_per_sm * sm_count
        rounds = stream_rounds(k, grid * stream_threads, size)
        dst = cuda.device_array(grid * stream_threads, np.float32)
        launch(stream_kernel(k), grid, stream_threads, 0, src, dst, rounds)
        results.append((host, dst.copy_to_host()))
    return results


def stream_rounds(k: int, threads: int, size: int = STREAM_BYTES) -> int:
    """Rounds of a stream launch of ``threads`` threads reading ``k`` words each a round, within
    ``size`` bytes; ValueError where not one round fits."""
    if size < 4 * k * threads:
        raise ValueError(f"size {size} bytes holds no round of {threads} threads x {k} words: "
                         f"give at least {4 * k * threads}")
    return size // (4 * k * threads)


CHILD = ("from numba import cuda; from experiments.common.launch_cost import run_launches; "
         "run_launches(cuda.get_current_device().MULTIPROCESSOR_COUNT)")


def empty_rows(kernels: list[dict], sm_count: int) -> list[Measurement]:
    """One ``empty_kernel_s`` row a grid, from ncu's readings (launch order)."""
    return [Measurement("empty_kernel_s", k["gpu_time_ns"] * 1e-9, "s", EMPTY_BY,
                        detail=json.dumps({"grid": grid, "blocks_per_sm": grid / sm_count}))
            for grid, k in zip(empty_grids(sm_count), kernels, strict=True)]


def stream_rows(kernels: list[dict], sm_count: int) -> list[Measurement]:
    """One ``stream_read_bytes_per_s`` row a stream configuration, from ncu's readings."""
    rows = []
    for (k, blocks_per_sm), got in zip(STREAM_CONFIGS, kernels, strict=True):
        total = blocks_per_sm * sm_count * STREAM_THREADS
        read = stream_rounds(k, total) * 4 * k * total
        in_flight = blocks_per_sm * STREAM_THREADS * 4 * k
        rows.append(Measurement("stream_read_bytes_per_s", read / (got["gpu_time_ns"] * 1e-9), "B/s", STREAM_BY,
                                warps_per_sm=blocks_per_sm * STREAM_THREADS // 32, ilp=k,
                                blocks_per_sm=blocks_per_sm,
                                detail=json.dumps({"in_flight_bytes_per_sm": in_flight, "read_bytes": read,
                                                   "dram_read_bytes": got.get("dram_read_bytes"),
                                                   "gpu_time_ns": got["gpu_time_ns"]})))
    return rows


def measure(gpu: bool) -> list[Measurement]:
    """The empty kernel's and the stream's rows, or a row of each saying why none was measured."""
    if not gpu:
        note = "simulator: not a measurement"
        return [Measurement("empty_kernel_s", None, "s", EMPTY_BY, note=note),
                Measurement("stream_read_bytes_per_s", None, "B/s", STREAM_BY, note=note)]
    sm_count = cuda.get_current_device().MULTIPROCESSOR_COUNT
    launches = len(EMPTY_BLOCKS_PER_SM) + len(STREAM_CONFIGS)

    def rows_from(kernels):
        return (empty_rows(kernels[:len(EMPTY_BLOCKS_PER_SM)], sm_count)
                + stream_rows(kernels[len(EMPTY_BLOCKS_PER_SM):], sm_count))

    return ncu_rows(gpu, "empty_kernel_s", "s", EMPTY_BY, METRICS, CHILD, "launch_empty|launch_stream",
                    launches, "gpu_time_ns", rows_from)
