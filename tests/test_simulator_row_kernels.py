"""The row kernels' time (``simulator.row_kernels``) and what it is built from: calibrate's
launch-cost microbenchmarks (experiments/common/launch_cost.py) run under the CUDA simulator,
their rows read back into ``MachineRates``, and the model on hand-derived cases."""
import dataclasses
import json
import math

import numpy as np
import pytest
from numba import config

from experiments import calibrate
from experiments.common import launch_cost as lc
from experiments.common.metadata import METADATA_COLUMNS
from experiments.common.results import write_rows
from simulator import rates, row_kernels, runtime
from simulator.flash import flash_backward_half, flash_backward_tc, flash_forward_half, flash_forward_tc
from simulator.hardware import H200
from simulator.standard import standard_backward, standard_forward
from simulator.tiling import Tiling
from simulator.workload import Workload

SIM_ONLY = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="runs the kernels under NUMBA_ENABLE_CUDASIM=1")
METADATA = {column: "" for column in METADATA_COLUMNS} | {"experiment": "calibrate", "device": "test GPU",
                                                           "date": "2026-12-07"}
SMS = 132


@SIM_ONLY
def test_the_microbenchmark_kernels_compute_what_they_say():
    """The stream's threads sum every word of theirs (each round's k words), the empty kernel
    launches at every grid; a size too small for one round is refused. (That a round's loads
    wait for the last round's is the compiled code's doing, which the simulator cannot show.)"""
    size = 16384
    out = lc.run_launches(2, size=size, threads=(8, 16))
    assert len(out) == len(lc.STREAM_CONFIGS)
    for (k, blocks_per_sm), (src, dst) in zip(lc.STREAM_CONFIGS, out):
        threads = 2 * blocks_per_sm * 16
        rounds = lc.stream_rounds(k, threads, size)
        words = src[:rounds * k * threads].reshape(rounds * k, threads)
        np.testing.assert_allclose(dst, words.sum(axis=0), rtol=1e-6)
    with pytest.raises(ValueError, match="holds no round"):
        lc.stream_rounds(8, 1024, 1024)


def _launch_cost_rows():
    """The rows launch_cost writes for made-up ncu readings: empty launches of 2, 2.1, 2.2, 3,
    6, 18 us; streams of 1, 1.3, 2, 2.5, 2.75 TB/s."""
    empty = [{"gpu_time_ns": t} for t in (2000.0, 2100.0, 2200.0, 3000.0, 6000.0, 18000.0)]
    reads = [lc.stream_rounds(k, b * SMS * lc.STREAM_THREADS) * 4 * k * b * SMS * lc.STREAM_THREADS
             for k, b in lc.STREAM_CONFIGS]
    stream = [{"gpu_time_ns": n / bw * 1e9} for n, bw in zip(reads, (1.0e12, 1.3e12, 2.0e12, 2.5e12, 2.75e12))]
    return lc.empty_rows(empty, SMS) + lc.stream_rows(stream, SMS)


@pytest.fixture()
def measured(tmp_path):
    """The committed H200 rates with the made-up launch-cost rows added."""
    path = tmp_path / "calibrate.csv"
    write_rows(path, rates._read(rates.RATES_CSV) + [calibrate.row(m) for m in _launch_cost_rows()], METADATA)
    return rates.load_rates(path)


def test_launch_cost_rows_round_trip_into_the_rates(measured):
    assert measured.empty_kernel_s == pytest.approx(
        {1 / SMS: 2e-6, 1.0: 2.1e-6, 4.0: 2.2e-6, 16.0: 3e-6, 64.0: 6e-6, 256.0: 18e-6})
    assert measured.launch_floor_s == pytest.approx(2e-6)
    assert measured.block_dispatch_s(16) == pytest.approx(1e-6)
    assert measured.block_dispatch_s(160) == pytest.approx(10e-6)          # (6 + 12 x 96 / 192) - 2
    assert measured.block_dispatch_s(512) == pytest.approx(16e-6 + 12e-6 * 256 / 192)   # the last slope on
    in_flight = sorted(measured.stream_read_bytes_per_s)
    assert in_flight == [4096, 8192, 16384, 32768, 65536]
    assert measured.stream_read_at(2048) == pytest.approx(0.5e12)           # Little's law below
    assert measured.stream_read_at(12288) == pytest.approx(1.65e12)
    assert measured.stream_read_at(1e6) == pytest.approx(2.75e12)           # flat above
    row = next(r for r in _launch_cost_rows() if r.quantity == "stream_read_bytes_per_s" and r.ilp == 2)
    assert json.loads(row.detail)["in_flight_bytes_per_sm"] == 8 * lc.STREAM_THREADS * 4 * 2


def test_rates_without_launch_costs_keep_the_bandwidth_bound():
    h200 = rates.load_rates()
    plain = dataclasses.replace(h200, empty_kernel_s={}, stream_read_bytes_per_s={})
    assert plain.launch_floor_s is None and plain.block_dispatch_s(100) == 0.0
    assert plain.stream_read_at(8192) is None
    w = Workload(B=2, H=4, N_q=1000, N_k=1000, d=64)
    p = _row_phase(standard_backward(w, Tiling(64, 64)), "row_dot")
    read, write = 3e6, 1e6
    assert row_kernels.seconds(p, w, H200, plain, (read, write)) == pytest.approx(
        read / h200.dram_read_bytes_per_s + write / h200.dram_write_bytes_per_s)


def test_a_grid_of_fewer_blocks_than_sms_streams_on_its_own(measured):
    """D = rowsum(dO O) of 64 rows: 16 blocks, 16 of 132 SMs reading at their share of the
    stream's bandwidth."""
    w = Workload(B=1, H=1, N_q=64, N_k=64, d=64)
    p = _row_phase(flash_backward_tc(w, Tiling(64, 64)), "row_dot")
    assert row_kernels.row_grid(p, w).blocks == 16
    read = 2 * 64 * 64 * 4
    in_flight = 128 * 8
    expected = read / (16 / SMS * measured.stream_read_at(in_flight))
    assert row_kernels.seconds(p, w, H200, measured, (read, 0.0)) == pytest.approx(2e-6 + expected)


def _row_phase(plan, kernel):
    return next(p for p in plan.phases if p.code[0] == kernel)


def test_row_grids_are_the_launches_numba_flash_makes(monkeypatch):
    from numba_flash import api
    from numba_flash.kernels import split_half

    assert row_kernels.PREP_LOADS == split_half.LOADS
    monkeypatch.setattr(api.memory, "simulator_enabled", lambda: False)    # the GPU's launches
    for d, n_q, bh, fmt, elem in ((64, 1001, 6, "float32", 4), (80, 4096, 128, "float16", 2)):
        w = Workload(B=1, H=bh, N_q=n_q, N_k=n_q, d=d, dtype_bytes=elem)
        plan = flash_backward_half(w, Tiling(64, 64)) if elem == 2 else flash_backward_tc(w, Tiling(64, 64))
        _, grid, threads = api._row_dot(d, True, n_q, bh, fmt)
        got = row_kernels.row_grid(_row_phase(plan, "row_dot"), w)
        assert (got.blocks, got.threads) == (grid[0] * grid[1], threads)
        if elem == 2:
            threads, grid = api._convert_grid(bh * n_q * d)
            got = row_kernels.row_grid(_row_phase(plan, "convert"), w)
            assert (got.blocks, got.threads) == (grid[0], threads)
    w = Workload(B=2, H=3, N_q=1001, N_k=1001, d=80, dtype_bytes=2)
    p = _row_phase(flash_backward_half(w, Tiling(64, 64)), "row_dot")
    assert row_kernels.row_grid(p, w) == row_kernels.RowGrid(6 * 251, 128, 4)   # 4 rows a block, dO and O fp16
    convert = _row_phase(flash_backward_half(w, Tiling(64, 64)), "convert")
    assert row_kernels.row_grid(convert, w) == row_kernels.RowGrid(math.ceil(6 * 1001 * 80 / 256), 256, 4)
    big = Workload(B=8, H=16, N_q=4096, N_k=4096, d=128, dtype_bytes=2)
    assert row_kernels.row_grid(_row_phase(flash_backward_half(big, Tiling(64, 64)), "convert"), big).blocks == 132 * 16
    ds = _row_phase(standard_backward(w, Tiling(64, 64)), "ds")
    assert row_kernels.row_grid(ds, w) == row_kernels.RowGrid(6 * 1001, 128, 4)
    from simulator.fp16x3 import GX, cuda_simulated, flash_forward_fp16x3, prep_launch, split_threads

    f32 = Workload(B=2, H=3, N_q=200, N_k=200, d=64)
    amax, split = flash_forward_fp16x3(f32, Tiling(64, 32)).phases[:2]
    threads, split_blocks = prep_launch(cuda_simulated())   # (grid (GX | split_blocks, q, k, v heads))
    assert row_kernels.row_grid(amax, f32) == row_kernels.RowGrid(3 * 6 * GX, threads, 16)
    assert row_kernels.row_grid(split, f32) == row_kernels.RowGrid(
        3 * 6 * split_blocks, split_threads(64, threads), 16)


def test_a_row_launch_by_hand(measured):
    """D = rowsum(dO O), fp32, B*H = 64, N_q = 2048, d = 64: 32768 blocks of 128 threads (248.2
    an SM), 16 resident an SM x 128 threads x 8 bytes = 16 KiB in flight -> 2 TB/s of reads."""
    w = Workload(B=4, H=16, N_q=2048, N_k=2048, d=64)
    p = _row_phase(flash_backward_tc(w, Tiling(64, 64)), "row_dot")
    assert row_kernels.row_grid(p, w) == row_kernels.RowGrid(32768, 128, 8)
    per_sm = 32768 / SMS
    dispatch = 18e-6 + 12e-6 * (per_sm - 256) / 192 - 2e-6
    for read, write in ((64e6, 32e6), (4e6, 0.0), (400e6, 300e6)):
        waited = read / 2.0e12 + write / measured.dram_write_bytes_per_s
        streamed = read / measured.dram_read_bytes_per_s + write / measured.dram_write_bytes_per_s
        assert row_kernels.seconds(p, w, H200, measured, (read, write)) == pytest.approx(
            2e-6 + max(dispatch, waited, streamed))


def test_a_tiled_launch_takes_the_floor_too(measured, monkeypatch):
    w = Workload(B=1, H=16, N_q=2048, N_k=2048, d=64)
    t = Tiling.kernel_default("flash_forward_tc", 64, n_q=2048, n_k=2048)
    p = next(p for p in flash_forward_tc(w, t).phases if p.block_trips)
    plain = dataclasses.replace(measured, empty_kernel_s={})
    monkeypatch.setattr(runtime, "rates_for", lambda hw: plain)
    without = runtime.launch_seconds(p, w, t, H200)
    monkeypatch.setattr(runtime, "rates_for", lambda hw: measured)
    assert runtime.launch_seconds(p, w, t, H200) == pytest.approx(without + 2e-6)


def test_a_blocks_first_tiles_by_hand():
    """The fp16 forward, 128 x 64 at d = 64: a block's own Qi (128 x 64 x 2 bytes) from DRAM,
    and one trip's Kj, Vj (64 x 64 x 2 bytes each) at their DRAM shares; two resident
    blocks draw them at one SM's share of DRAM's bandwidth, after DRAM's latency."""
    from simulator.issue import global_load_latency

    r = rates.load_rates()
    w = Workload(B=1, H=8, N_q=1024, N_k=1024, d=64, dtype_bytes=2)
    p = next(p for p in flash_forward_half(w, Tiling(128, 64)).phases if p.block_trips)
    assert runtime.OWN_TILES["flash_forward_half"][0] == "Q"
    for miss in (0.0, 0.25, 1.0):
        first = 128 * 64 * 2 + miss * 64 * 64 * 2         # V's share counts; K's is 0 here
        shares = {"Q": 0.5, "K": 0.0, "V": miss}             # (an own tile is read whole)
        assert runtime.prologue_cycles(p, w, r, 2, shares) == pytest.approx(
            global_load_latency(r, 1.0) + 2 * first / r.dram_read_bytes_per_cycle)
    standard = next(p for p in standard_backward(w, Tiling(64, 64)).phases if p.block_trips)
    assert standard.code[0] not in runtime.OWN_TILES         # a matmul streams both operands
    trips = sum(standard.block_trips) * standard.grid_heads(w.BH)
    streamed = sum(standard.hbm_reads.values()) / trips * 2
    everything = dict.fromkeys(standard.hbm_reads, 1.0)
    assert runtime.prologue_cycles(standard, w, r, 1, everything) == pytest.approx(
        global_load_latency(r, 1.0) + streamed / r.dram_read_bytes_per_cycle)


def test_a_launch_of_fewer_blocks_than_slots_starts_fewer_together(monkeypatch):
    """The first tiles' wait counts the blocks an SM starts together: 2 resident a full grid,
    but 1 where the launch has fewer blocks than SMs."""
    w = Workload(B=1, H=2, N_q=1024, N_k=1024, d=64, dtype_bytes=2)
    t = Tiling(128, 64)
    p = next(p for p in flash_forward_half(w, t).phases if p.block_trips)
    assert len(p.block_trips) * p.grid_heads(w.BH) == 16 < SMS
    seen = []
    real = runtime.prologue_cycles
    monkeypatch.setattr(runtime, "prologue_cycles", lambda *a: seen.append(a[3]) or real(*a))
    runtime.launch_seconds(p, w, t, H200)
    assert seen == [1]


def test_a_trip_waits_for_its_slowest_streamed_tensor():
    """O = P V of standard attention streams P once (every read from DRAM) and re-reads V (from
    L2 after the first row block): the trip's loads wait at P's share, not the byte mean; a
    forward's own Qi and a backward's dQ (atomics, read back) do not count; Algorithm 1, whose
    loop nests loops that load, keeps the launch's mean."""
    from simulator.flash import flash_forward_v1
    from simulator.l2 import l2_traffic

    w = Workload(B=1, H=4, N_q=1024, N_k=1024, d=64)
    t = Tiling(64, 64)
    plan = standard_forward(w, t)
    pv = plan.phases[2]
    view = l2_traffic(plan.phases, w, t, H200).phases[2]
    miss = dict(view.read_miss)
    assert miss["P"] == 1.0 and miss["V"] == pytest.approx(1 / 16)    # V: 16 row tiles, 1 fetch
    mean = view.dram_read_bytes / (4 * sum(pv.hbm_reads.values()))
    assert mean < 0.6 and runtime.trip_dram_share(pv, miss, mean) == 1.0
    forward = next(p for p in flash_forward_half(w, Tiling(128, 64)).phases if p.block_trips)
    assert runtime.trip_dram_share(forward, {"Q": 1.0, "K": 0.2, "V": 0.3}, 0.5) == 0.3
    backward = next(p for p in flash_backward_tc(w, Tiling(64, 64)).phases if p.block_trips)
    shares = {"K": 1.0, "V": 1.0, "Q": 0.1, "dO": 0.1, "L": 0.1, "D": 0.1, "dQ": 0.9}
    assert runtime.trip_dram_share(backward, shares, 0.5) == 0.1
    alg1 = next(p for p in flash_forward_v1(w, t).phases if p.block_trips)
    assert alg1.inner_trips and runtime.trip_dram_share(alg1, {"Q": 1.0}, 0.3) == 0.3


def test_a_gpu_configurations_prediction_takes_the_gpus_launches():
    """Under the CUDA simulator numba_flash launches fp16x3's preparing kernels smaller, and
    ``simulator.predict`` counts them so (count_traffic equals it); a prediction of a GPU
    configuration (``experiments.common.model.reports``: what the CPU mode re-predicts of
    committed counters) takes the GPU's launches in that process too."""
    from experiments.common import model
    from experiments.common.cases import Case
    from simulator import fp16x3

    simulated = config.ENABLE_CUDASIM == 1
    assert fp16x3.cuda_simulated() == simulated
    with fp16x3.gpu_launches():
        assert not fp16x3.cuda_simulated()
    assert fp16x3.cuda_simulated() == simulated
    threads, blocks = fp16x3.prep_launch(False)
    phases = model.reports(Case("fa2_fp16x3", "fwd", 2, 4, 256, 64), gpu="H200_MEASURED")[0].phases
    amax, split = (next(p for p in phases if p.code[0] == k) for k in ("head_amax", "split_half"))
    assert split.blocks_per_unit == blocks
    assert amax.lsu_wavefronts == 2 * 4 * 3 * fp16x3.GX * fp16x3.amax_wavefronts(threads)
