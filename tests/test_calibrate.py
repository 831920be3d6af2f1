"""The calibrate experiment without a GPU: every microbenchmark kernel runs under the CUDA
simulator and no value is reported; the arithmetic that turns timing tables into rates and
placements, on hand-made tables; ``simulator.rates`` reads back what the experiment writes."""
import json
import math
import time

import numpy as np
import pytest
from numba import config

from experiments import calibrate
from experiments.common import copy_sectors
from experiments.common import microbench as mb
from experiments.common.context import RunContext
from experiments.common.metadata import METADATA_COLUMNS
from experiments.common.results import read_rows, write_rows
from simulator import rates

SIM_ONLY = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="runs the kernels under NUMBA_ENABLE_CUDASIM=1")
METADATA = {column: "" for column in METADATA_COLUMNS} | {"experiment": "calibrate", "device": "test GPU",
                                                           "date": "2026-12-01"}


def _table(rows):
    """A timing table from (smid, clock_start, clock_end, ns_start, ns_end) tuples."""
    return np.array(rows, dtype=np.int64)


# ---- the experiment on the CPU ----------------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    ctx = RunContext(device="cpu", quick=True, out=out, command="test")
    return ctx, calibrate.run(ctx)


@SIM_ONLY
def test_cpu_run_executes_every_kernel_and_reports_no_value(cpu_rows):
    ctx, rows = cpu_rows
    assert rows and all(r["value"] is None for r in rows)
    assert {r["note"] for r in rows} == {"simulator: not a measurement"}
    assert any("calibrate" in s for s in ctx.skipped)
    assert not (ctx.out / calibrate.NAME / calibrate.PLACEMENT_CSV).exists()   # no made-up map
    quantities = {r["quantity"] for r in rows}
    needed = set(rates._SCALARS.values()) | {rates.MMA, rates.BARRIER} | {
        f"{op}{bits}_wavefronts_per_cycle_per_sm" for op in ("lds", "sts") for bits in rates.WIDTHS}
    assert needed <= quantities
    mma = {(r["warps_per_sm"], r["ilp"]) for r in rows if r["quantity"] == rates.MMA}
    assert mma == {(w, c) for w in (4, 8, 16) for c in (1, 2, 4)}
    assert {r["warps_per_sm"] for r in rows if r["quantity"] == rates.BARRIER} == {4, 8, 16}
    assert {r["blocks_per_sm"] for r in rows if r["quantity"] == "placement_repeatable"} == {1, 2, 4}
    assert len([r for r in rows if r["quantity"] == "load_after_red_cycles"]) == 8   # 2 modes x k = 0, 8, 32, 64


@SIM_ONLY
def test_cpu_csv_and_plot(cpu_rows, tmp_path):
    _, rows = cpu_rows
    path = tmp_path / "calibrate.csv"
    write_rows(path, rows, METADATA)
    assert list(read_rows(path)[0])[:3] == ["quantity", "value", "unit"]
    with pytest.raises(ValueError, match="simulator: not a measurement"):
        rates.load_rates(path)
    calibrate.plot(rows, tmp_path / "calibrate.png")
    png = tmp_path / "calibrate.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000   # as tests/test_experiments.py asks


@SIM_ONLY
def test_a_gpu_context_under_the_simulator_stays_simulated(monkeypatch, tmp_path):
    """(as tests/test_experiments_gpu_paths.py runs every experiment): no 2 GiB buffers, no values"""
    monkeypatch.setattr(mb, "MEASUREMENTS", (mb.measure_device, mb.measure_global))
    ctx = RunContext(device="gpu", quick=True, out=tmp_path, command="test")
    rows = calibrate.run(ctx)
    assert rows and all(r["value"] is None for r in rows)


class _Event:
    """cuda.event for the simulator (whose events take no arguments and keep no time)."""

    def __init__(self, timing=True):
        self.at = None

    def record(self, stream=0):
        self.at = time.perf_counter()

    def synchronize(self):
        pass

    def query(self):
        return True          # "the spin already ended": the launch-gap row must say so


class _HostPathBench(mb.Bench):
    """The GPU branch's host code (sizing aside) on simulated kernels: 2 SMs, a warp a block, n = 1."""

    def __init__(self, simulated=False, quick=True):
        super().__init__(simulated=True, quick=True)
        self.simulated = False

    def threads(self, warps):
        return mb.WARP

    def size(self, go, n0, target_s):
        return 1


@SIM_ONLY
def test_the_gpu_branch_host_code_on_simulated_kernels(monkeypatch, tmp_path):
    monkeypatch.setattr(mb.cuda, "event", _Event)
    monkeypatch.setattr(mb.cuda, "event_elapsed_time", lambda a, b: (b.at - a.at) * 1e3, raising=False)
    monkeypatch.setattr(calibrate.microbench, "Bench", _HostPathBench)
    monkeypatch.setattr("experiments.common.metadata.device_name", lambda device: "fake GPU")
    for name, value in (("LAUNCHES", 3), ("PLACEMENT_THREADS", 32), ("PLACEMENT_SPIN_NS", 1000),
                        ("GLOBAL_THREADS", 32), ("L2_BYTES_READ", 8192), ("DRAM_BYTES", 8192),
                        ("LAUNCH_BLOCKS", 40)):     # (the simulator's blocks all on SM 0)
        monkeypatch.setattr(mb, name, value)
    ctx = RunContext(device="gpu", quick=True, out=tmp_path, command="test")
    rows = calibrate.run(ctx)
    unmeasured = {r["quantity"]: r["note"] for r in rows if r["value"] is None}
    assert unmeasured == {"placement_coresident_stride": "no co-resident blocks",   # blocks run one by one
                          "l2_dirty_residue_bytes": "simulator: not a measurement",  # ncu: a real GPU
                          "l2_dirty_residue_sweep_bytes": "simulator: not a measurement",
                          "l2_dirty_residue_hot_bytes": "simulator: not a measurement",
                          "l1_local_reuse_hit_rate": "simulator: not a measurement",
                          "l2_reread_hit_rate": "simulator: not a measurement",
                          "empty_kernel_s": "simulator: not a measurement",
                          "stream_read_bytes_per_s": "simulator: not a measurement",
                          **{f"copy_sectors_{mode}": "simulator: not a measurement"
                             for mode in copy_sectors.MODES}}
    gap = next(r for r in rows if r["quantity"] == "launch_gap_s")
    assert gap["note"] == "in 3 of 3 repeats the GPU ran out of queued launches"
    assert next(r for r in rows if r["quantity"] == "sm_count")["value"] == 2
    assert all(r["repeats"] >= 1 and r["spread"] >= 0 for r in rows if r["value"] is not None)
    path = tmp_path / "calibrate.csv"
    write_rows(path, rows, METADATA)
    measured = rates.load_rates(path)
    assert measured.sm_count == 2 and measured.clock_hz > 0 and len(measured.mma_tf32_by_config) == 9
    placement_csv = tmp_path / calibrate.NAME / calibrate.PLACEMENT_CSV
    raw = read_rows(placement_csv)
    assert len(raw) == sum(mb.PLACEMENT_WAVES * k * 2 for k in (1, 2, 4))
    assert raw[0]["device"] == "fake GPU" and raw[0]["experiment"] == "calibrate"
    assert set(rates.load_placement(placement_csv)) == {1, 2, 4}


def test_size_grows_tenfold_then_in_proportion():
    class Timed(mb.Bench):
        def __init__(self):
            super().__init__(simulated=True)

        def seconds(self, go):
            return go()

    # a kernel of 1 us of launch overhead and 1 us an iteration
    assert Timed().size(lambda n: 1e-6 + n * 1e-6, 3, target_s=2e-3) == math.ceil(300 * 2e-3 / 301e-6)
    assert Timed().size(lambda n: n * 1e-6, 5000, target_s=2e-3) == 5000      # never below n0


def test_import_needs_no_gpu():
    assert calibrate.NAME == "calibrate" and callable(calibrate.run) and callable(calibrate.plot)


# ---- analysis -----------------------------------------------------------------------------------
def test_sm_rates_sum_the_blocks_of_an_sm_over_its_span():
    # SM 3 ran two blocks between cycles 100 and 1100; SM 7 one block of 500 cycles
    table = _table([(3, 100, 600, 0, 10), (7, 50, 550, 0, 10), (3, 400, 1100, 0, 10)])
    assert mb.sm_rates(table, 250).tolist() == [2 * 250 / 1000, 250 / 500]
    assert mb.rate_per_sm(table, 250) == pytest.approx((0.5 + 0.5) / 2)
    # latency: one warp, 64 dependent ops in 2048 cycles -> 32 cycles each
    assert 1 / mb.rate_per_sm(_table([(0, 0, 2048, 0, 1)]), 64) == 32


def test_clock_is_ticks_over_nanoseconds():
    table = _table([(0, 0, 1_980_000, 1000, 1_001_000), (1, 5, 1_900_005, 0, 1_000_000),
                    (2, 0, 2_000_000, 0, 1_000_000)])
    assert mb.clock_hz(table) == pytest.approx(1.98e9)


def test_all_resident_and_spread():
    assert mb.all_resident(_table([(0, 0, 1, 0, 100), (1, 0, 1, 99, 200)]))
    assert not mb.all_resident(_table([(0, 0, 1, 0, 100), (1, 0, 1, 100, 200)]))
    assert mb.median_and_spread([1.0, 2.0, 4.0]) == (2.0, 1.5)
    assert mb.median_and_spread([0, 0]) == (0.0, 0.0)


def test_shared_memory_that_forces_blocks_per_sm_on_an_h200():
    per_sm, reserved, optin = 228 * 1024, 1024, 227 * 1024
    got = {k: mb.smem_for_blocks_per_sm(k, per_sm, reserved, optin) for k in (1, 2, 4)}
    assert got == {1: 170 * 1024, 2: 94 * 1024, 4: 50 * 1024}
    for k, nbytes in got.items():
        allocated = nbytes + reserved                     # a multiple of 128 B already
        assert k * allocated <= per_sm < (k + 1) * allocated
    assert mb.ONE_BLOCK_SMEM + reserved > per_sm // 2     # the compute benchmarks: one block an SM


def test_placement_of_a_synthetic_two_wave_grid():
    # 4 SMs, 2 blocks an SM: blocks 0-7 first, block b on SM b % 4; blocks 8-11 start only
    # after block 0 ended at t = 100
    smid = [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]
    start = [0, 1, 1, 2, 3, 3, 4, 5, 100, 101, 130, 140]
    end = [100, 101, 120, 130, 140, 150, 160, 170, 200, 210, 220, 230]
    p = mb.placement(smid, start, end, 2)
    assert p.first_wave == (0, 1, 2, 3, 4, 5, 6, 7)
    assert p.groups == {0: (0, 4), 1: (1, 5), 2: (2, 6), 3: (3, 7)}
    assert p.resident == (2, 2) and p.in_order and p.stride == 4
    assert p.describe().startswith("SM 0: [0, 4]; SM 1: [1, 5]; SM 2: [2, 6]; SM 3: [3, 7]; "
                                   "blocks 0-7 on SMs [0, 1, 2, 3, 0, 1, 2, 3]; strides {4: 4}")
    # ties in start time go by block index
    assert mb.start_ranks([5, 0, 5, 1]).tolist() == [2, 0, 3, 1]


def test_placement_out_of_order_and_uneven():
    p = mb.placement([0, 0, 1, 1], [0, 50, 0, 1], [40, 90, 60, 61], 2)
    assert p.first_wave == (0, 2, 3)                 # block 1 waited for block 0's slot
    assert not p.in_order and p.resident == (1, 2) and p.stride == 1
    assert mb.placement([0, 1], [0, 0], [5, 5], 1).stride is None


# ---- MachineRates -------------------------------------------------------------------------------
def _measured_rows() -> list[dict]:
    """Rows as the experiment writes them, with made-up values (hand-checkable)."""
    m = mb.Measurement
    scalars = {q: float(i + 1) for i, q in enumerate(rates._SCALARS.values())}
    scalars["sm_count"] = 132.0
    out = [m(q, v, "u", "test") for q, v in scalars.items()]
    out += [m(rates.MMA, 0.1 * w * c, "mma/cycle/SM", "test", warps_per_sm=w, ilp=c)
            for w in (4, 8, 16) for c in (1, 2, 4)]
    out += [m(rates.BARRIER, 10.0 + w, "cycles", "test", warps_per_sm=w) for w in (4, 8, 16)]
    out += [m(f"{op}{bits}_wavefronts_per_cycle_per_sm", bits / 128 + (op == "sts"), "wavefronts/cycle/SM", "test")
            for op in ("lds", "sts") for bits in rates.WIDTHS]
    out += [m("placement_coresident_stride", 132.0, "blocks", "test", blocks_per_sm=2),
            m("ffma_flops_per_cycle_per_sm", None, "FLOP/cycle/SM", "test", note="not measured")]
    out += [m("mma_lds_overlap", v, "fraction", "test", detail=f"{n} LDS.128 an mma")
            for n, v in ((1, 0.1), (2, 0.3))]
    out += [m("l2_dirty_capacity_bytes", v, "bytes", "test") for v in (38e6, 40e6, 42e6)]
    out += [m("lds_latency_cycles", 29.5, "cycles", "test"), m("l2_hit_latency_cycles", 260.0, "cycles", "test")]
    return [calibrate.row(x) for x in out]


def test_load_rates_round_trips_the_csv(tmp_path):
    path = tmp_path / "calibrate.csv"
    write_rows(path, _measured_rows(), METADATA)
    r = rates.load_rates(path)
    assert r.device == "test GPU" and str(path) in r.source and "2026-12-01" in r.source
    assert r.sm_count == 132 and isinstance(r.sm_count, int)
    scalars = list(rates._SCALARS)
    for name in scalars[1:]:
        assert getattr(r, name) == scalars.index(name) + 1, name
    assert r.mma_tf32_by_config[(8, 2)] == pytest.approx(1.6)
    assert r.mma_tf32_per_cycle == pytest.approx(0.1 * 16 * 4)
    assert r.barrier_cycles == {4: 14.0, 8: 18.0, 16: 26.0}
    assert r.lds_wavefronts_per_cycle == {32: 0.25, 64: 0.5, 128: 1.0}
    assert r.sts_wavefronts_per_cycle == {32: 1.25, 64: 1.5, 128: 2.0}
    assert r.ffma_flops_per_cycle == 64 * r.ffma_per_cycle
    assert r.seconds(r.clock_hz * 3) == pytest.approx(3)
    assert r.mma_lds_overlap == pytest.approx(0.2) and r.l2_dirty_capacity_bytes == 40e6  # medians
    assert r.lds_latency_cycles == 29.5 and r.shfl_latency_cycles is None           # optional
    assert r.l2_hit_latency_cycles == 260.0 and r.l1_hit_latency_cycles is None


def test_load_rates_names_what_is_missing(tmp_path):
    path = tmp_path / "calibrate.csv"
    dropped = ("clock_hz", "lds64_wavefronts_per_cycle_per_sm")
    write_rows(path, [r for r in _measured_rows() if r["quantity"] not in dropped], METADATA)
    with pytest.raises(ValueError, match="clock_hz, lds64_wavefronts_per_cycle_per_sm"):
        rates.load_rates(path)


def test_interpolation_of_mma_and_barrier(tmp_path):
    path = tmp_path / "calibrate.csv"
    write_rows(path, _measured_rows(), METADATA)
    r = rates.load_rates(path)
    # chains: 2 measured -> exact; 3 -> the 2-chain values; 8 -> the 4-chain values
    assert r.mma_tf32_at(8, 2) == pytest.approx(1.6)
    assert r.mma_tf32_at(12, 3) == pytest.approx((1.6 + 3.2) / 2)
    assert r.mma_tf32_at(32, 8) == pytest.approx(6.4)       # flat above 16 warps
    assert r.mma_tf32_at(2, 1) == pytest.approx(0.4 * 2 / 4)  # proportional below 4 warps
    assert r.barrier_cycles_at(6) == pytest.approx(16.0)
    assert r.barrier_cycles_at(1) == 14.0 and r.barrier_cycles_at(32) == 26.0


def test_the_reduction_drain_rate_is_derived_from_the_load_after_red_rows(tmp_path):
    """red_sectors_per_cycle: warps x k x sectors / (cycles(k) - cycles(0)) of the own-lines
    rows at the largest k (the shared-lines rows are not it); None without them (older CSVs),
    as for the committed H200 rates, from its rows of 2026-12-05: 8 x 64 x 8 / (16735 - 306)."""
    from experiments.common import atomic_latency as al

    assert rates.RED_OWN_LINES == al.MODES[al.PRIVATE]
    path = tmp_path / "calibrate.csv"
    write_rows(path, _measured_rows(), METADATA)
    assert rates.load_rates(path).red_sectors_per_cycle is None
    m = mb.Measurement
    red = [m(rates.LOAD_AFTER_RED, v, "cycles", "test", warps_per_sm=8, blocks_per_sm=1,
             detail=f"k={k}; {al.MODES[mode]}; reductions of 8 sectors into a 16 x 128 fp32 tile")
           for mode, k, v in ((al.PRIVATE, 0, 300.0), (al.PRIVATE, 8, 1324.0), (al.PRIVATE, 64, 8492.0),
                              (al.SHARED, 0, 280.0), (al.SHARED, 64, 80000.0))]
    write_rows(path, _measured_rows() + [calibrate.row(x) for x in red], METADATA)
    assert rates.load_rates(path).red_sectors_per_cycle == pytest.approx(8 * 64 * 8 / 8192)
    h200 = rates.load_rates()
    assert h200.red_sectors_per_cycle == pytest.approx(8 * 64 * 8 / (16735.45 - 306.50), rel=1e-4)


def test_load_placement_groups_the_first_wave(tmp_path):
    raw = [{"blocks_per_sm": k, "block": b, "smid": sm, "start_rank": b, "start_ns": 0, "end_ns": 1,
            "first_wave": int(first), "smem_bytes": 0}
           for k, b, sm, first in [(1, 0, 4, True), (1, 1, 2, True), (1, 2, 4, False),
                                   (2, 0, 2, True), (2, 1, 4, True), (2, 2, 2, True), (2, 3, 4, True),
                                   (2, 4, 2, False)]]
    path = tmp_path / "placement.csv"
    write_rows(path, raw, METADATA)
    assert rates.load_placement(path) == {1: ((1,), (0,)), 2: ((0, 2), (1, 3))}


def test_defaults_point_into_the_simulator_package():
    assert rates.RATES_CSV.name == "rates_h200.csv" and rates.RATES_CSV.parent.name == "simulator"
    assert rates.PLACEMENT_CSV.name == "placement_h200.csv"
    assert math.isclose(rates._interpolate([(1, 1), (3, 5)], 2, through_origin=False), 3)


def _half_rows() -> list[dict]:
    """Half-precision mma rows as calibrate writes them, made-up values: fp16 at twice the
    made-up TF32 rates of ``_measured_rows``, bf16 at three times."""
    m = mb.Measurement
    out = [m(rates.HALF_MMA[fmt], k * 0.1 * w * c, "mma/cycle/SM", "test", warps_per_sm=w, ilp=c)
           for fmt, k in (("float16", 2), ("bfloat16", 3)) for w in (4, 8, 16) for c in (1, 2, 4)]
    out += [m(rates.HALF_MMA_LATENCY[fmt], v, "cycles", "test") for fmt, v in (("float16", 33.0), ("bfloat16", 34.0))]
    return [calibrate.row(x) for x in out]


def test_half_mma_rates_load_and_interpolate_like_tf32(tmp_path):
    path = tmp_path / "calibrate.csv"
    write_rows(path, _measured_rows() + _half_rows(), METADATA)
    r = rates.load_rates(path)
    assert r.mma_at("tf32", 12, 3) == r.mma_tf32_at(12, 3)
    assert r.mma_at("float16", 12, 3) == pytest.approx(2 * (1.6 + 3.2) / 2)
    assert r.mma_at("bfloat16", 2, 1) == pytest.approx(3 * 0.4 * 2 / 4)     # proportional below 4 warps
    assert r.mma_per_cycle("float16") == pytest.approx(2 * 6.4) and r.mma_per_cycle("tf32") == r.mma_tf32_per_cycle
    assert r.mma_latency_cycles("float16") == 33.0 and r.mma_latency_cycles("bfloat16") == 34.0
    assert r.mma_latency_cycles("tf32") == r.mma_tf32_latency_cycles
    with pytest.raises(ValueError, match="mma format"):
        r.mma_at("fp8", 8)


def test_rates_from_before_the_half_mma_was_measured_refuse_its_time(tmp_path):
    path = tmp_path / "calibrate.csv"
    write_rows(path, _measured_rows(), METADATA)
    r = rates.load_rates(path)              # still loads: the half rows are optional
    assert r.mma_half_by_config == {} and r.mma_at("tf32", 8, 2) == pytest.approx(1.6)
    with pytest.raises(LookupError, match=r"mma_f16_per_cycle_per_sm.*experiments run calibrate"):
        r.mma_at("float16", 8)


def test_the_half_mma_benchmarks_run_under_the_simulator():
    bench = mb.Bench(simulated=True, quick=True)
    rows = mb.measure_mma_half(bench)
    assert [r.quantity for r in rows].count("mma_f16_per_cycle_per_sm") == 9
    assert {r.quantity for r in rows} == {*rates.HALF_MMA.values(), *rates.HALF_MMA_LATENCY.values()}
    assert all(r.value is None for r in rows)


def test_the_mma_kernel_adds_its_ffma_and_alu_chains_beside_the_mma():
    # one warp, one iteration: 16 mma a chain, and with 2 FFMA an mma chains 0 and 1 of each
    # lane take 16 steps v <- v a + b (from k + lane / 8); the mma sums are the same in both, so
    # the outputs differ by the two chains' growth alone (to the rounding of a total near 1e3)
    x, outs = mb.mma_inputs("float16"), {}
    bench = mb.Bench(simulated=True, quick=True)
    for ffmas in (0, 2):
        out = mb.cuda.device_array(32, np.float32)
        mb.mma_kernel(4, "float16", ffmas)[1, 32](x, 1, out, bench.table(1))
        outs[ffmas] = out.copy_to_host()
    grown = np.zeros(32)
    for lane in range(32):
        for k in (0, 1):
            w = start = np.float32(k + lane / 8)
            for _ in range(16):
                w = np.float32(w * mb.FFMA_A + mb.FFMA_B)
            grown[lane] += float(w) - float(start)
    assert np.allclose(outs[2] - outs[0], grown, rtol=0, atol=2e-3)
    assert np.ptp(grown) > 1                                   # the lanes' chains differ
    # 2 ALU an mma: chain 0 of each thread takes 16 steps u <- max(u ^ a, b) from u = tid,
    # a = tid x 40503, b = the iterations (1); the output adds the final u's lowest bit
    out = mb.cuda.device_array(32, np.float32)
    mb.mma_kernel(4, "float16", 2, "alu")[1, 32](x, 1, out, bench.table(1))
    flips = np.zeros(32)
    for tid in range(32):
        u, a = np.uint32(tid), np.uint32(tid * 40503)
        for _ in range(16):
            u = max(np.uint32(u ^ a), np.uint32(1))
        flips[tid] = float(u & 1) - float(tid & 1)
    assert np.allclose(out.copy_to_host() - outs[0], flips, rtol=0, atol=2e-3)
    with pytest.raises(ValueError, match="even count"):
        mb.mma_kernel(4, "float16", 3, "alu")
    rows = mb.measure_mma_beside(bench)
    quantities = [r.quantity for r in rows]
    for tag in ("f16", "tf32"):
        assert quantities.count(f"mma_{tag}_ffma_per_cycle_per_sm") == 8      # 0, 2, 4, 8 x 2 warps
        assert quantities.count(f"mma_{tag}_alu_per_cycle_per_sm") == 6       # 2, 4, 8 x 2 warps
        assert quantities.count(f"mma_{tag}_ffma_overlap") == quantities.count(f"mma_{tag}_alu_overlap") == 6
    assert all(r.value is None for r in rows)


def test_the_global_chase_visits_every_line_once_a_round():
    links = mb.chase_links(mb.CHASE_BYTES[mb.CACHED])
    at, seen = 0, []
    for _ in range(links.size // mb.CHASE_STRIDE_WORDS):
        seen.append(at)
        at = int(links[at])
    assert at == 0 and len(set(s // mb.CHASE_STRIDE_WORDS for s in seen)) == len(seen) == 64
    far = mb.chase_links(2**20, mb.DRAM_CHASE_STRIDE_WORDS)       # 4 KiB + 128 B apart
    assert far[0] == mb.DRAM_CHASE_STRIDE_WORDS and far[far.size - 1] == mb.DRAM_CHASE_STRIDE_WORDS - 1


def test_the_memory_latency_benchmarks_run_under_the_simulator():
    rows = mb.measure_memory_latency(mb.Bench(simulated=True, quick=True))
    assert [r.quantity for r in rows] == ["l1_hit_latency_cycles", "l2_hit_latency_cycles",
                                          "dram_latency_cycles"]
    assert all(r.value is None and r.unit == "cycles" for r in rows)


@SIM_ONLY
def test_the_copy_kernel_copies_every_word_in_each_mode():
    """copy_sectors' kernel under the simulator: each mode lands the words it should (out is the
    XOR, per thread, of the word it saw at the end of each round of the ring)."""
    size = copy_sectors.BLOCK_BYTES
    smem_sizes = copy_sectors.SMEM_BYTES[0], copy_sectors.SMEM_BYTES[-1]   # the ring alone, the most
    outs = copy_sectors.run_copies(size, smem_sizes)
    launches = copy_sectors.launches(smem_sizes)
    assert len(outs) == len(launches) == 2 * len(copy_sectors.MODES)
    words = np.arange(size // 4, dtype=np.uint32)
    step = 4 * copy_sectors.THREADS
    ring_steps = copy_sectors.RING_WORDS // step
    last = [s for s in range(size // 4 // step) if s % ring_steps == ring_steps - 1]
    for (_, mode), out in zip(launches, outs):
        for t in (0, 5, copy_sectors.THREADS - 1):
            seen = [words[s * step + 4 * t: s * step + 4 * t + 4] for s in last]
            if mode in (copy_sectors.CG16, copy_sectors.CG16_PADDED):
                expect = [w[0] & 0xFFFF for w in seen]                 # the low half of the first word
            elif mode == copy_sectors.LDG_CG4:
                expect = [w[0] ^ w[1] ^ w[2] ^ w[3] for w in seen]     # the load's XOR, stored
            else:
                expect = [w[0] for w in seen]
            assert out[t] == np.bitwise_xor.reduce(np.array(expect, np.uint32)), (copy_sectors.MODES[mode], t)


def test_copy_sector_rows_are_sectors_over_bytes():
    ratios = [1.5, 1.0, 1.0, 1.0, 1.25] * len(copy_sectors.SMEM_BYTES)
    kernels = [{"name": "copy_sectors", "xbar_ld_sectors": f * 2**20 / 32, "l2_read_sectors": 1.0}
               for f in ratios]
    rows = copy_sectors.rows_from(kernels, 2**20)
    assert [r.quantity for r in rows] == [f"copy_sectors_{m}" for m in copy_sectors.MODES] * len(copy_sectors.SMEM_BYTES)
    assert [r.value for r in rows] == ratios and rows[0].unit == "ratio"
    assert '"l2_read_sectors": 1.0' in rows[0].detail
    modes = len(copy_sectors.MODES)
    assert [json.loads(r.detail)["smem_bytes"] for r in rows[::modes]] == list(copy_sectors.SMEM_BYTES)


def test_residue_sweep_rows_follow_the_childs_launch_order():
    from experiments.common import l2_residue

    configs = [(size, reads) for size in l2_residue.SWEEP_SIZES for _, reads in l2_residue.SWEEP_KINDS]
    kernels = [{"dram_write_bytes": size - 1000 * k, "dram_read_bytes": reads * size, "gpu_time_ns": 1.0}
               for k, (size, reads) in enumerate(configs)]
    rows = l2_residue.sweep_rows(kernels)
    assert [r.value for r in rows] == [1000 * k for k in range(len(configs))]
    assert {r.quantity for r in rows} == {"l2_dirty_residue_sweep_bytes"}
    assert '"kind": "addcmul"' in rows[2].detail and '"write_share": 0.25' in rows[2].detail
    assert l2_residue.measure_sweep(False)[0].note == "simulator: not a measurement"


def test_hot_residue_rows_follow_the_childs_launch_order():
    from experiments.common import l2_residue

    configs = l2_residue.hot_configs()
    kernels = [{"dram_write_bytes": l2_residue.HOT_WRITE_BYTES - 1000 * k, "dram_read_bytes": 1.0,
                "gpu_time_ns": 1.0} for k in range(len(configs))]
    rows = l2_residue.hot_rows(kernels)
    residues, capacities = rows[:len(configs)], rows[len(configs):]
    assert [r.value for r in residues] == [1000 * k for k in range(len(configs))]
    assert {r.quantity for r in residues} == {"l2_dirty_residue_hot_bytes"}
    # without a hot buffer: residue / write share
    cold = [(k, reads) for k, (reads, hot, _) in enumerate(configs) if not hot]
    assert [r.value for r in capacities] == [1000 * k * (1 + reads) for k, reads in cold]
    assert {r.quantity for r in capacities} == {"l2_dirty_capacity_bytes"}
    reads, hot, spin = configs[-1]
    last = json.loads(residues[-1].detail)
    assert (last["reads_per_write"], last["hot_bytes"], last["spin"]) == (reads, hot * 2**20, spin)
    assert last["write_share"] == 1 / (1 + reads)
    assert l2_residue.measure_hot(False)[0].note == "simulator: not a measurement"


@SIM_ONLY
def test_the_hot_residue_kernel_sums_its_reads_hot_words_and_spin():
    """Under the simulator, tiny: each element sums its ``reads`` streamed ones and, with a hot
    buffer, HOT_PER_ELEMENT hot ones; ``spin`` steps v -> v / 2 + 1 / 2 then halve v - 1."""
    from experiments.common import l2_residue

    configs = [(1, 0, 0), (3, 1, 0), (3, 1, 2)]
    outs = l2_residue.run_hot(configs, write_bytes=4 * 40, blocks=1, threads=32)
    for (reads, hot, spin), out in zip(configs, outs):
        v = reads + (l2_residue.HOT_PER_ELEMENT if hot else 0)
        expect = 1 + (v - 1) / 2**spin
        np.testing.assert_array_equal(out, np.full(40, expect, np.float32))


def test_ncu_microbenchmarks_say_when_ncu_is_missing(monkeypatch):
    from experiments.common import l2_residue, l2_reuse, ncu

    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    rows = (l2_residue.measure(True) + l2_residue.measure_sweep(True) + l2_residue.measure_hot(True)
            + copy_sectors.measure(True) + l2_reuse.measure(True))
    assert len(rows) == 4 + len(copy_sectors.MODES)
    assert all(r.value is None and r.note == "ncu not found" for r in rows)


@SIM_ONLY
def test_the_l1_reuse_kernel_loads_every_slot_and_streamed_word():
    """l1_reuse's kernel under the simulator: each thread's sum is trips x (its local slots,
    stored as tid + j, plus the streamed words, all ones)."""
    from experiments.common import l1_reuse

    outs = l1_reuse.run_all(simulated=True)
    for (_, frame, stream, trips), out in zip(l1_reuse.runs(simulated=True), outs):
        expect = [l1_reuse.expected_sum(t % l1_reuse.THREADS, frame, stream, trips) for t in range(out.size)]
        np.testing.assert_array_equal(out, np.array(expect, np.float32))


def test_launch_intervals_skip_each_sms_first_wave():
    """Starts past an SM's first ``resident`` blocks, differenced in order, SM by SM."""
    smid = np.array([0, 1, 0, 1, 0, 1, 0])
    start = np.array([0, 5, 0, 5, 100, 300, 400])
    assert mb.launch_intervals(smid, start, 2) == [300.0]          # SM 0: 100, 400; SM 1: 300
    assert sorted(mb.launch_intervals(smid, start, 1)) == [100.0, 295.0, 300.0]


def test_the_l2_reuse_kernel_sums_its_blocks_unit():
    """l2_reuse's kernel under the simulator: block b's threads sum unit b % units between them."""
    from experiments.common import l2_reuse

    (out,) = l2_reuse.run_all(simulated=True)
    (units, readers, words), = l2_reuse.runs(simulated=True)
    blocks = out.reshape(units * readers, l2_reuse.THREADS).sum(axis=1)
    sums = l2_reuse.unit_sums(units, words)
    np.testing.assert_array_equal(blocks, [sums[b % units] for b in range(units * readers)])


def test_l2_reuse_rows_count_the_first_read_of_each_unit_as_compulsory():
    """hit = 1 - (DRAM reads - W) / ((readers - 1) W): W read once from DRAM is 1; every read
    from DRAM is 0; the detail gives the ratio to L2 and what the model and LRU say."""
    from experiments.common import l2_reuse

    plan = l2_reuse.runs()
    kernels = []
    for i, (units, readers, words) in enumerate(plan):
        w = units * words * 4
        kernels.append({"dram_read_bytes": float(w if i % 2 == 0 else readers * w), "xbar_ld_sectors": 1.0})
    kernels[-1] = {}
    rows = l2_reuse.rows_from(kernels)
    assert [r.value for r in rows[:4]] == [1.0, 0.0, 1.0, 0.0]
    assert rows[-1].value is None and rows[-1].note
    detail = json.loads(rows[0].detail)
    assert detail["ratio"] == pytest.approx(l2_reuse.RATIOS[0], rel=1e-3)
    assert detail["model"] == 1.0 and detail["lru"] == 1.0
    assert json.loads(rows[-2].detail)["lru"] == 0.0          # 2 L2 capacities


def test_l1_reuse_rows_take_the_second_runs_extra_trips():
    """A row per configuration: the hit rate of the loads the longer run adds (its first trip,
    cold, cancels), with r and s over the L1 capacity the shared memory leaves."""
    from experiments.common import l1_reuse

    plan = l1_reuse.runs()
    kernels = []
    for i, (_, frame, _, trips) in enumerate(plan):
        loads = trips * frame * 1000.0
        cold = frame * 1000.0                               # the first trip misses
        hit = 0.25 * (loads - cold) if i // 2 % 3 else (loads - cold)
        kernels.append({"local_ld_sectors": loads, "local_ld_hit_sectors": hit})
    rows = l1_reuse.rows_from(kernels)
    assert len(rows) == len(plan) // 2 == len(l1_reuse.SMEM_FOR_L1) * len(l1_reuse.RATIOS) * len(l1_reuse.STREAM_SHARES)
    assert [r.value for r in rows[:3]] == [1.0, 0.25, 0.25]
    detail = json.loads(rows[1].detail)                    # the first ratio, streaming
    smem, frame, stream, _ = plan[2]
    assert detail["l1_bytes"] == l1_reuse.SMEM_FOR_L1[smem] == 28 * 1024
    assert detail["r"] == frame * 4 * l1_reuse.THREADS / detail["l1_bytes"]
    assert detail["s"] == stream * 4 * l1_reuse.THREADS / detail["l1_bytes"] > 0
    assert l1_reuse.measure(False)[0].note == "simulator: not a measurement"


def test_random_replacement_hits_are_the_cold_caches_fixed_point():
    """All hits while the reused lines fit and nothing streams; past one capacity the rate falls
    to the fixed point h = exp(-(r (1 - h) + s)) a cold cache reaches, never the trivial h = 1."""
    from experiments.common.l1_reuse import random_replacement_hits as hits

    assert hits(0.5, 0.0) == 1.0 and hits(1.0, 0.0) > 1 - 1e-6
    for r, s in ((1.1, 0.0), (1.5, 0.0), (3.0, 0.0), (0.5, 0.5), (2.0, 0.2)):
        h = hits(r, s)
        assert 0 < h < 1 and abs(h - np.exp(-(r * (1 - h) + s))) < 1e-9
    assert hits(1.5, 0.0) > hits(2.0, 0.0) > hits(3.0, 0.0) and hits(2.0, 0.2) < hits(2.0, 0.0)


@SIM_ONLY
def test_the_load_after_reductions_kernel_adds_where_it_should():
    """Each warp's k reductions an iteration land in its block's tile (PRIVATE) or in the one
    tile of the grid (SHARED), 8 rows x 4 words each; its chase walks `iterations` links."""
    from numba import cuda

    from experiments.common import atomic_latency as al
    kernel = al.load_after_red_kernel(8)
    data = cuda.to_device(mb.chase_links(4 * 32 * mb.CHASE_STRIDE_WORDS))
    tile = al.TILE_ROWS * al.TILE_WORDS
    for mode in al.MODES:
        tiles = cuda.to_device(np.zeros(2 * tile, np.float32))
        out, table = cuda.device_array(2 * 32, np.uint32), cuda.to_device(np.zeros((2, len(mb.TIMING)), np.int64))
        kernel[2, 32](mode, data, tiles, 3, out, table)
        got = tiles.copy_to_host().reshape(2, al.TILE_ROWS, al.TILE_WORDS)
        expected = np.zeros_like(got)
        for block in range(2):
            for j in range(8):                      # 3 iterations of the same 8 reductions
                rows = np.arange(8) + 8 * (j % 2)
                words = 4 * (j // 2) + np.arange(4)
                expected[0 if mode == al.SHARED else block][np.ix_(rows, words)] += 3
        np.testing.assert_array_equal(got, expected)
        starts = np.arange(2) * mb.CHASE_STRIDE_WORDS                       # one warp a block
        assert list(out.copy_to_host()[::32]) == list(starts + 3 * mb.CHASE_STRIDE_WORDS)


def test_the_mio_burst_benchmark_runs_under_the_simulator():
    bench = mb.Bench(simulated=True, quick=True)
    # one warp, one iteration of 2 loads: the 4 FFMA chains take 64 steps each from
    # k + lane / 8, and the loaded words (smem[i] = i) XOR to the output's lowest bit
    out = mb.cuda.device_array(32, np.float32)
    mb.mio_burst_kernel(2)[1, 32](1, out, bench.table(1))
    expected = np.zeros(32)
    for lane in range(32):
        bits = 0
        for b in range(2):
            for k in range(4):
                bits ^= (lane * 4 + b * 128 + k) & (mb.SHARED_WORDS - 1)
        expected[lane] = bits & 1
        for k in range(4):
            v = np.float32(k + lane / 8)
            for _ in range(mb.MIO_BURST_FFMAS // 4):
                v = np.float32(v * mb.FFMA_A + mb.FFMA_B)
            expected[lane] += float(v)
    assert np.allclose(out.copy_to_host(), expected, rtol=1e-6)
    rows = mb.measure_mio_burst(bench)
    assert [r.ilp for r in rows] == list(mb.MIO_BURSTS)
    assert all(r.quantity == "mio_burst_cycles" and r.value is None for r in rows)
