"""The model of every memory level and the time (simulator.levels, sectors, local, runtime),
against hand-derived cases: sectors of ragged rows, the tensor-core kernels' repeated
requests, atomics, the dirty residue, the block scheduler's makespan."""
import math

import pytest

from simulator import Tiling, Workload, predict
from simulator.hardware import A100_40GB, H200
from simulator.l2 import L2Phase
from simulator.levels import LEVEL_NAMES, Levels, total
from simulator.local import dirty_residue
from simulator.rates import load_rates
from simulator.runtime import shared_makespan
from simulator.sectors import (SECTOR_BYTES, cp_async_row_sectors, grid_row_sectors, row_sectors, sector_traffic,
                               tensor_sectors)


@pytest.mark.parametrize("n", [1, 3, 8, 24, 40, 59, 64, 80, 111, 256])
@pytest.mark.parametrize("element_bytes", [2, 4])
def test_row_sectors_counts_every_sector_a_row_overlaps(n, element_bytes):
    row = n * element_bytes
    rows = 64 * SECTOR_BYTES          # a whole number of periods
    brute = sum((r + 1) * row // SECTOR_BYTES + ((r + 1) * row % SECTOR_BYTES > 0) - r * row // SECTOR_BYTES
                for r in range(rows)) / rows
    assert row_sectors(n, element_bytes) == pytest.approx(brute)
    assert row_sectors(n, element_bytes) >= row / SECTOR_BYTES


def test_aligned_rows_cost_their_bytes_and_ragged_rows_more():
    assert row_sectors(64, 4) == 8
    assert row_sectors(59, 4) > 59 * 4 / 32


def _phase(algorithm, w, t):
    from simulator.predict import ALGORITHMS
    return ALGORITHMS[algorithm](w, t).phases


def test_tensor_core_forward_requests_each_K_sector_twice_and_misses_it_once():
    w, t = Workload(1, 2, 256, 256, 64), Tiling(256, 32)
    (p,) = _phase("flash_forward_tc", w, t)
    s = sector_traffic(p, w)
    k = p.hbm_reads["K"] * 4 / SECTOR_BYTES
    distinct = sum(p.hbm_reads.values()) * 4 / SECTOR_BYTES
    assert s.missed == pytest.approx(distinct)
    assert s.requested == pytest.approx(distinct + k)
    assert s.stored == pytest.approx(2 * p.hbm_writes["O"] * 4 / 32 + p.hbm_writes["L"] * 4 / 32)


def test_atomic_dq_is_sent_as_reductions_not_loaded():
    w, t = Workload(1, 1, 128, 128, 64), Tiling(32, 128)
    pre, main = _phase("flash_backward_tc", w, t)
    s = sector_traffic(main, w)
    loads = sum(n for name, n in main.hbm_reads.items() if name != "dQ") * 4 / 32
    assert s.missed == pytest.approx(loads)
    assert s.reduced == pytest.approx(2 * main.hbm_writes["dQ"] * 4 / 32)   # half-filled sectors
    ffma_main = _phase("flash_backward", w, Tiling(64, 64))[1]
    assert sector_traffic(ffma_main, w).reduced == pytest.approx(ffma_main.hbm_writes["dQ"] * 4 / 32)


@pytest.mark.parametrize("n", [8, 24, 59, 64, 80, 111])
@pytest.mark.parametrize("element_bytes", [2, 4])
def test_grid_row_sectors_counts_each_column_groups_sectors(n, element_bytes):
    for tx in (2, 4, 6, 8, 16, 32):
        brute = 0
        for r in range(SECTOR_BYTES):          # a whole number of periods
            for first in range(0, n, tx):
                start = (r * n + first) * element_bytes
                end = (r * n + min(first + tx, n)) * element_bytes
                brute += len(range(start // SECTOR_BYTES, (end - 1) // SECTOR_BYTES + 1))
        assert grid_row_sectors(n, element_bytes, tx) == pytest.approx(brute / SECTOR_BYTES)
    # groups of whole, aligned sectors cost the row's sectors; 16-byte groups twice them
    assert grid_row_sectors(64, 4, 8) == grid_row_sectors(64, 4, 16) == row_sectors(64, 4) == 8
    assert grid_row_sectors(64, 4, 4) == 16 and grid_row_sectors(64, 2, 8) == 8 == 2 * row_sectors(64, 2)


def test_grid_moved_tensors_cost_a_sector_per_column_group_at_small_bc():
    """Algorithm 1 at 16 x 16 (TX = 4: 16 bytes of a row an instruction): O is requested and
    stored twice a sector, its second requests hitting L1; l, m, Q, K, V as whole rows; at
    64 x 64 (TX = 16) nothing changes. Without a tiling, whole rows everywhere."""
    w = Workload(1, 2, 256, 256, 64)
    (p,) = _phase("flash_forward_v1", w, Tiling(16, 16))
    rows = sector_traffic(p, w)
    grid = sector_traffic(p, w, Tiling(16, 16))
    o_read, o_written = p.hbm_reads["O"] * 4 / 32, p.hbm_writes["O"] * 4 / 32
    assert grid.missed == pytest.approx(rows.missed)
    assert grid.requested == pytest.approx(rows.requested + o_read)
    assert grid.stored == pytest.approx(rows.stored + o_written)
    (wide,) = _phase("flash_forward_v1", w, Tiling(64, 64))
    assert sector_traffic(wide, w, Tiling(64, 64)) == sector_traffic(wide, w)
    kv = _phase("flash_backward", w, Tiling(16, 16))[1]
    assert sector_traffic(kv, w, Tiling(16, 16)).reduced == pytest.approx(2 * kv.hbm_writes["dQ"] * 4 / 32)


def test_half_kernels_send_fp32_dq_accum_as_reductions_and_quarter_sector_stores():
    w = Workload(1, 2, 128, 128, 64, dtype_bytes=2)
    (fwd,) = _phase("flash_forward_half", w, Tiling(128, 64))
    s = sector_traffic(fwd, w)
    # Q, K, V by 16-byte cp.async into rows padded to 72 elements: 1.5x their sectors at d = 64
    assert s.missed == pytest.approx(1.5 * sum(fwd.hbm_reads.values()) * 2 / 32)
    # O: one 2-byte element a lane, four pieces a sector; L fp32
    assert s.stored == pytest.approx(4 * fwd.hbm_writes["O"] * 2 / 32 + fwd.hbm_writes["L"] * 4 / 32)
    pre, main, narrow = _phase("flash_backward_half", w, Tiling(64, 128))
    s = sector_traffic(main, w)
    loads = sum(n * (4 if name in ("L", "D") else 2 * 1.5) for name, n in main.hbm_reads.items()
                if name != "dQ_accum") / 32
    assert s.missed == pytest.approx(loads)
    assert s.reduced == pytest.approx(2 * main.hbm_writes["dQ_accum"] * 4 / 32)   # fp32, half-filled
    assert sector_traffic(narrow, w).missed == pytest.approx(narrow.hbm_reads["dQ_accum"] * 4 / 32)


def test_cp_async_rows_cost_a_sector_per_chunk_where_the_padding_shifts_them():
    """A chunk costs its (global sector, shared sector) pair: with rows padded by 16 bytes every
    other row's shared copy is 16 bytes off its global alignment and costs a sector a chunk (the
    calibrate microbenchmark: 1.50 sectors per 32 bytes at a 144-byte stride for 128-byte rows)."""
    assert cp_async_row_sectors(64, 4096, 2) == 6.0          # (4 + 8) / 2 against 4
    assert cp_async_row_sectors(128, 4096, 2) == 12.0        # (8 + 16) / 2 against 8
    assert cp_async_row_sectors(8, 4096, 2) == 1.0           # a 16-byte row: one chunk, one sector
    # d = 40: the 112-byte stride keeps each row's 32-byte phase; 80-byte rows span 3 sectors
    assert cp_async_row_sectors(40, 4096, 2) == 3.0
    # ... unless heads of an odd number of rows put every other head 16 bytes off
    assert cp_async_row_sectors(40, 97, 2) == 4.0
    w = Workload(1, 2, 128, 128, 60, dtype_bytes=2)           # d % 8 != 0: element copies
    (fwd,) = _phase("flash_forward_half", w, Tiling(128, 64))
    assert sector_traffic(fwd, w).missed == pytest.approx(
        sum(tensor_sectors(name, n, w) for name, n in fwd.hbm_reads.items()))


def test_dirty_residue_is_the_write_share_of_what_the_working_set_leaves():
    def view(working_set):
        return L2Phase("x", 1, working_set, 1.0, dram_read_bytes=300.0, dram_write_bytes=100.0,
                       compulsory_read_bytes=300, compulsory_write_bytes=100)
    # a quarter of the streamed bytes are writes: a quarter of the capacity left stays dirty
    assert dirty_residue(view(0), 40.0) == pytest.approx(10.0)
    assert dirty_residue(view(24), 40.0) == pytest.approx(4.0)      # a working set kept hot
    assert dirty_residue(view(50), 40.0) == 0.0                      # ... filling it
    assert dirty_residue(view(0), 1e9) == 100.0          # never more than was written
    # what the last blocks re-read (a causal launch's lightest, started last) counts, not the
    # launch's whole working set
    ending = L2Phase("x", 1, 50, 1.0, dram_read_bytes=300.0, dram_write_bytes=100.0,
                     compulsory_read_bytes=300, compulsory_write_bytes=100, end_working_set_bytes=24)
    assert dirty_residue(ending, 40.0) == pytest.approx(4.0)


def test_makespan_fills_slots_in_launch_order():
    def makespan(work, slots):   # blocks whose speed no neighbour changes, a slot an SM
        return shared_makespan(work, slots, 1, lambda k: 1.0)
    assert makespan([1.0] * 8, 4) == 2.0                   # two full waves
    assert makespan([1.0] * 9, 4) == 3.0                   # a tail of one block
    assert makespan([4.0, 1.0, 1.0, 1.0, 1.0], 2) == 4.0   # heavy first: the rest fill beside it
    assert makespan([1.0, 1.0, 1.0, 1.0, 4.0], 2) == 6.0   # heavy last: it runs alone at the end


def test_shared_makespan_runs_a_lone_tail_block_at_its_own_speed():
    constant = lambda k: 1.0        # noqa: E731  (a trip's cycles whatever shares the SM)
    sharing = lambda k: float(k)    # noqa: E731  (k blocks split the SM's throughput)
    # blocks unaffected by sharing: the slots' makespan
    assert shared_makespan([1.0] * 9, 2, 2, constant) == shared_makespan([1.0] * 9, 4, 1, constant) == 3.0
    # a full wave of 2 blocks an SM takes 2; the fifth block then runs alone: 1 more
    assert shared_makespan([1.0] * 5, 2, 2, sharing) == pytest.approx(3.0)
    # two tail blocks go one to each SM freed at that instant, not both to the first
    assert shared_makespan([1.0] * 6, 2, 2, sharing) == pytest.approx(3.0)
    # a long block beside short ones speeds up once they are gone: shared with the first short
    # one (2 cycles a trip) to t = 2, with the second to t = 4, its last trip alone: t = 5
    assert shared_makespan([3.0, 1.0, 1.0], 1, 2, sharing) == pytest.approx(5.0)


def test_levels_add_and_the_hit_rate_comes_from_its_parts():
    a = Levels(1, 2, 3, 4, 10, 5, 6, 7, 8.0)
    b = Levels(1, 2, 3, 4, 30, 5, 6, 7, 1.0)
    s = total([a, b])
    assert s.l1_hit_rate == pytest.approx(10 / 40)
    assert s.time_s == 9.0 and tuple(s.as_dict()) == LEVEL_NAMES


def test_predict_reports_every_level_for_the_shipped_kernels():
    w = Workload(2, 4, 1024, 1024, 64)
    for algorithm in ("flash_forward_tc", "flash_backward_tc"):
        r = predict(algorithm, w, hardware=H200)
        for name in LEVEL_NAMES:
            value = getattr(r, name)
            assert value is not None and math.isfinite(value) and value >= 0, (algorithm, name)
        assert 0 < r.l1_hit_rate < 1
        assert r.time_s > r.roofline_seconds * 0.5
    other = predict("flash_forward_tc", w, hardware=A100_40GB)
    # the H200 kernel's 168 KB of shared memory cannot launch on an A100: no time, no spills
    assert math.isnan(other.time_s) and math.isnan(other.local_bytes)
    assert math.isfinite(other.dram_read_bytes) and math.isfinite(other.smem_wavefronts)


def test_half_kernels_get_every_level_and_a_time_from_the_committed_half_mma_rates():
    """rates_h200.csv (calibrate, 2026-12-02) has the m16n8k16 rows: every level is finite,
    and the time is no faster than the half kernels' mma work at the measured peak rate."""
    w = Workload(2, 4, 1024, 1024, 64, dtype_bytes=2)
    rates = load_rates()
    for algorithm, passes in (("flash_forward_half", 2), ("flash_backward_half", 5)):
        r = predict(algorithm, w, hardware=H200)
        for name in LEVEL_NAMES:
            value = getattr(r, name)
            assert value is not None and math.isfinite(value) and value >= 0, (algorithm, name)
        # passes GEMMs of N x N x d per head: 2 (QK^T, PV) forward, 5 backward
        mmas = passes * w.B * w.H * w.N_q * w.N_k * w.d / (16 * 8 * 16)
        peak = rates.mma_per_cycle("float16") * rates.clock_hz * rates.sm_count
        assert r.time_s > mmas / peak, algorithm


def test_half_kernels_are_timed_at_the_half_mma_rate_once_calibrate_measured_it(tmp_path, monkeypatch):
    """A rates CSV with the m16n8k16 rows (made-up values here: the H200's TF32 rates x 2 for
    fp16, a hand-checkable stand-in, not a measurement) gives the half kernels a time; a faster
    mma does not make them slower (beyond 1 %: the issue simulator's list scheduling is not
    exactly monotone in its rates)."""
    import csv

    from simulator import runtime
    from simulator.rates import HALF_MMA, HALF_MMA_LATENCY, MMA, RATES_CSV

    def rates_with_half_mma(factor):
        with open(RATES_CSV, newline="") as f:
            rows = list(csv.DictReader(f))
        extra = [dict(r, quantity=HALF_MMA["float16"], value=str(factor * float(r["value"])))
                 for r in rows if r["quantity"] == MMA]
        extra.append(dict(next(r for r in rows if r["quantity"] == "mma_tf32_latency_cycles"),
                          quantity=HALF_MMA_LATENCY["float16"]))
        path = tmp_path / f"rates_x{factor}.csv"
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows + extra)
        return path

    w = Workload(2, 4, 1024, 1024, 64, dtype_bytes=2)
    times = {}
    for factor in (2, 4):
        monkeypatch.setenv(runtime.RATES_ENV, str(rates_with_half_mma(factor)))
        runtime.h200_rates.cache_clear()
        try:
            times[factor] = {a: predict(a, w, hardware=H200).time_s for a in ("flash_forward_half", "flash_backward_half")}
        finally:
            runtime.h200_rates.cache_clear()
    for algorithm, t in times[2].items():
        assert math.isfinite(t) and t > 0, algorithm
        assert times[4][algorithm] <= t * 1.01, algorithm
        assert t > predict(algorithm, w, hardware=H200).roofline_seconds * 0.5, algorithm


def test_an_uncompiled_tiling_gets_nan_where_resources_are_needed():
    r = predict("flash_forward_v1", Workload(1, 1, 256, 256, 64), Tiling(32, 16), hardware=H200)
    assert math.isnan(r.time_s) and math.isnan(r.local_bytes)
    assert r.dram_read_bytes > 0 and r.smem_wavefronts > 0


def test_nested_loop_trips_follow_the_code():
    from simulator.trips import inner_trips
    # FFMA forward, 128 x 64 (512 threads), d = 64: K and V copies of 64 x 64 / 512 = 8
    # iterations, compiled 4 to a trip (4 LDG in the loop): 2 trips; the 16 four-step passes of
    # S = Q K^T and of P V, P V's remainder loop (Bc % 4 = 0 passes)
    assert inner_trips("flash_forward_v2", Tiling(128, 64), 64, False) == (2, 2, 16, 16, 0)
    # tensor-core backward, 32 x 128 (256 threads): since v14 its Qi, dOi, L and D loads are
    # unrolled (v13's loops: 2, 2 and, in warp 0 alone, 1 trip); the half backward's row copy,
    # 64 x 128: its 4-fold loop no trip (the one row of warps 0 and 1 is a peeled copy:
    # tests/test_simulator_peels.py)
    assert inner_trips("flash_backward_tc", Tiling(32, 128), 64, False) == ()
    assert inner_trips("flash_backward_half", Tiling(64, 128), 64, False) == (0,)
    assert inner_trips("flash_backward_half", Tiling(64, 128), 64, False, warp=1) == (0,)
    # at d = 256 (16 x 16, one warp) a thread has 32 items of Qi: 16 batches of 2, one trip each
    assert inner_trips("flash_backward_tc", Tiling(16, 16), 256, False) == (16,)
    assert inner_trips("flash_forward_tc", Tiling(256, 32), 64, False) == ()
    # standard matmul, 64 x 64 (256 threads), 16-deep chunks: two copies of 1024 / 256 = 4
    # iterations in one 4-fold trip each, 16 steps
    assert inner_trips("standard_matmul", Tiling(64, 64), 64, False) == (1, 1, 16)
    # Algorithm 1's nested i loop holds loops of its own: not modelled
    assert inner_trips("flash_forward_v1", Tiling(64, 64), 64, False) is None


def test_copy_loops_before_the_main_loop_run_their_trips():
    """The tile copies outside the main loop, per block: (region, trips)."""
    from simulator.trips import outer_trips

    def trips(*args):
        return [(r.region, r.ldg32 + r.ldg64 + r.ldg128, n) for r, n in outer_trips(*args)]

    # tensor-core forward, 256 x 32 (512 threads): Qi as 256 x 64 / 512 = 32 elements a
    # thread, one load a trip; at d = 128, 64 elements two to a trip (2 LDG): 32 trips
    assert trips("flash_forward_tc", Tiling(256, 32), 64, False) == [("loop_1", 1, 32)]
    assert trips("flash_forward_tc", Tiling(256, 32), 128, False) == [("loop_1", 2, 32)]
    # FFMA forward, 128 x 64 (512 threads): Qi, 16 elements a thread, as a remainder loop
    # (16 mod 4 = 0 trips) and a 4-fold one (4 trips)
    assert trips("flash_forward_v2", Tiling(128, 64), 64, False) == [("loop_1", 1, 0), ("loop_2", 4, 4)]
    # tensor-core backward, 32 x 128 (256 threads): Kj, Vj as 64 x 32 element quads, 8 a thread
    assert trips("flash_backward_tc", Tiling(32, 128), 64, False) == [("loop_1", 4, 8), ("loop_2", 4, 8)]


def test_a_block_lasts_at_least_its_tile_copies_latency():
    """One block of the tensor-core forward (256 queries, d = 64) over 256 and 512 keys (8 and
    16 K/V steps): what the shorter spends outside its steps, 2 t(8) - t(16), holds its Qi copy
    of 32 dependent loads from DRAM (the static count gave it one trip's issue)."""
    from simulator.issue import global_load_latency
    from simulator.runtime import rates_for

    r = rates_for(H200)

    def cycles(n_k):
        w = Workload(1, 1, 256, n_k, 64)
        return predict("flash_forward_tc", w, Tiling(256, 32), hardware=H200).time_s * r.mma_clock_hz

    outside = 2 * cycles(256) - cycles(512)
    chain = 32 * global_load_latency(r, 1.0)
    assert chain * (1 - 1e-9) <= outside <= 1.5 * chain     # (equal where the chain is longer)


def test_a_copy_loop_compiled_u_fold_runs_a_u_th_of_its_iterations():
    from types import SimpleNamespace

    from simulator.trips import copy_kind, unrolled

    region = SimpleNamespace(ldg32=8, ldg64=0, ldg128=0, ldgsts=0)
    assert copy_kind("load_row_stats(smem, lse, dvec, row0, rows, tid)") == "load_row_stats"
    assert copy_kind("for idx in range(tid, BR * BK, T):") == "range"
    assert copy_kind("rows_dot_rows(s, smem, 0, K0, ty, tx)") is None
    assert unrolled(9, region, "load_row_stats") == 3      # 2 loads an iteration: 4-fold, ceil
    assert unrolled(9, region, "load_head_tile") == 2      # 1 load an iteration: 8-fold
    assert unrolled(9, region, "load_pair_tile") == 5      # 4 loads an iteration: 2-fold
    # the tensor-core backward's batch loop (d = 256): 16 loads a batch, and L_i, D_i's 2
    assert copy_kind("for bt in range(0 if BATCHES == 1 else BATCHES):") == "load_batch"
    assert unrolled(16, SimpleNamespace(ldg32=18, ldg64=0, ldg128=0, ldgsts=0), "load_batch") == 16
    assert unrolled(16, region, None) == 16                # not a copy: the source's count
    assert unrolled(0, region, "load_head_tile") == 0


def test_the_runtime_simulates_every_main_loop_it_knows_the_trips_of():
    from simulator.occupancy import resources
    from simulator.runtime import _simulated_trip, h200_rates
    w, r = Workload(1, 16, 2048, 2048, 64), h200_rates()

    def simulated(kernel, tiling):
        occ = resources(kernel, tiling, 64, False).occupancy(H200)
        return _simulated_trip(kernel, "", tiling, w, occ, r)

    forward = simulated("flash_forward_tc", Tiling(256, 32))
    # a trip of one block costs at least its tensor-pipe work: 16 warps x 192 mma at the rate
    assert forward >= 16 * 192 / r.mma_tf32_per_cycle
    assert simulated("flash_forward_v2", Tiling(128, 64)) > 0
    assert simulated("flash_forward_v1", Tiling(64, 64)) is None     # nested-loop trips unknown


def test_algorithm_1s_row_loop_and_its_softmax_loops_are_counted_as_compiled():
    from simulator.trips import inner_trips, warp_rows
    # 64 x 64, d = 64, 256 threads: K, V copies (16 iterations, 4 a trip), the row loop
    # (rows_per_trip), in it the Q copy, the 16 four-step passes of S = Q K^T, the softmax's
    # rows (one a thread: warps 0 and 1 of 8, a mean of 0.25), its max (64 loads, 4 a trip) and
    # exp (64, 8 a trip) loops, the 16 passes of P V and their empty remainder
    t = Tiling(64, 64)
    assert inner_trips("flash_forward_v1", t, 64, False) is None          # rows unknown
    assert inner_trips("flash_forward_v1", t, 64, False, "", 32) == (4, 4, 32, 4, 16, 0.25, 16, 8, 16, 0)
    assert inner_trips("flash_forward_v1", t, 64, False, "", 32, 1)[5] == 1
    assert inner_trips("flash_forward_v1", t, 64, False, "", 32, 2)[5] == 0
    assert [warp_rows(64, 256, w) for w in range(8)] == [1, 1, 0, 0, 0, 0, 0, 0]
    assert warp_rows(300, 256, 0) == 2 and warp_rows(300, 256, 2) == 1 and warp_rows(64, 256, None) == 0.25


def test_algorithm_1s_zero_fills_under_branches_never_taken_run_no_trips():
    from simulator.trips import KERNELS_DIR, _guard, inner_trips
    # 64 x 128, 512 threads: ptxas keeps the softmax's zero fills as loops (16 stores a trip),
    # one for rows past N_q (``if r >= rows``), one for rows that saw no key (``if m_new ==
    # NEG_INF``): full tiles and rows that see a key take neither, so 0 trips; the max (128
    # loads, 4 a trip) and exp (8 a trip) loops run as before
    t = Tiling(64, 128)
    assert inner_trips("flash_forward_v1", t, 64, False, "", 16) == (
        4, 4, 16, 2, 16, 0.125, 0, 32, 16, 0, 32, 0)
    source = "flash_forward_alg1.py"
    lines = (KERNELS_DIR / source).read_text().splitlines()
    row_loops = [n + 1 for n, text in enumerate(lines) if "for c in range(BC)" in text]
    assert [_guard(source, n) for n in row_loops] == ["r >= rows", "m_new == NEG_INF", None]


def test_spill_reloads_in_nested_loops_hit_unless_their_own_lines_overflow_l1():
    """The FFMA backward at d = 128, 64 x 64 (256 threads, one block an SM, 170 KB of shared
    memory: 60 KB of L1 beside it) spills 360 B a thread: the frame and a trip's tiles overflow
    L1, so the reloads a main-loop trip makes once miss; its nested loops' further passes reuse
    a few dozen bytes a thread each iteration, and hit. With half a KB of L1 those miss as well."""
    import dataclasses

    from simulator.flash import flash_backward
    from simulator.local import local_traffic, nested_runs

    w, t = Workload(2, 12, 2048, 2048, 128), Tiling(64, 64)
    kv = next(p for p in flash_backward(w, t).phases if p.block_trips)
    spilled = local_traffic(kv, w, t, H200)
    trips = sum(kv.block_trips) * kv.grid_heads(w.BH)
    repeats = sum(extra * region.ldl_bytes for region, extra in nested_runs(kv, "flash_backward", t, w, "")
                  if extra > 0)       # (loops run less than once a trip only take loads away)
    assert repeats > 0
    assert spilled.missed_bytes == pytest.approx(spilled.load_bytes - repeats * trips * 256)
    small = dataclasses.replace(H200, l1_smem_bytes=196 * 1024 + 512)   # 0.5 KB beside the carveout
    assert local_traffic(kv, w, t, small).missed_bytes == local_traffic(kv, w, t, small).load_bytes
    # d = 80: frame (48 KB) and tiles fit the 124 KB left: nothing misses
    w80 = Workload(2, 10, 2560, 2560, 80)
    kv80 = next(p for p in flash_backward(w80, t).phases if p.block_trips)
    assert local_traffic(kv80, w80, t, H200).missed_bytes == 0 < local_traffic(kv80, w80, t, H200).load_bytes


def test_a_card_gets_time_once_its_calibrate_csv_is_committed(monkeypatch, tmp_path):
    """An H100 has no committed rates: no time; with a calibrate CSV in RATES_OF's place (here
    the H200's, copied), its launches are timed from that file."""
    import shutil

    from simulator import runtime
    from simulator.hardware import H100_SXM

    w = Workload(1, 4, 512, 512, 64)
    assert runtime.rates_for(H100_SXM) is None or runtime.RATES_OF["H100"].exists()
    path = tmp_path / "rates_h100.csv"
    monkeypatch.setitem(runtime.RATES_OF, "H100", path)
    assert math.isnan(predict("flash_forward_tc", w, hardware=H100_SXM).time_s)
    shutil.copy(runtime.RATES_CSV, path)
    runtime.committed_rates.cache_clear()
    try:
        t = predict("flash_forward_tc", w, hardware=H100_SXM).time_s
    finally:
        runtime.committed_rates.cache_clear()
    assert math.isfinite(t) and t > 0
