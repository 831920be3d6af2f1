"""The issue simulator (simulator/issue.py): operand decoding of nvdisasm lines, hand-built
streams whose cycles follow from the measured rates by hand, and the recorded main loops
(simulator/kernel_loops.json.gz) held to the kernel sources and to kernel_sass.csv."""
import dataclasses

import pytest

from simulator.issue import (LOOPS_JSON, SCHEDULERS, decode_instruction, decode_loop,
                             kernel_loops, loop_cycles, op, simulate, stream_for)
from simulator.occupancy import key_fields
from simulator.rates import load_rates
from simulator.sass import sass
from simulator.tiling import Tiling

N = 60


@pytest.fixture(scope="module")
def rates():
    return load_rates()


def _hmma(chain: int):
    acc = [f"R{4 * chain + k}" for k in range(4)]
    return op("HMMA.1688.F32.TF32", acc, acc + ["R200", "R201"])


# ---- decoding --------------------------------------------------------------------------
@pytest.mark.parametrize("mnemonic, operands, guard, dests, srcs", [
    ("HMMA.1688.F32.TF32", "R24, R8.reuse, R16, R24", None,
     "R24 R25 R26 R27", "R8 R9 R10 R11 R16 R17 R24 R25 R26 R27"),
    ("LDS.128", "R8, [R2+0x100]", None, "R8 R9 R10 R11", "R2"),
    ("LDS.64", "R8, [R2]", None, "R8 R9", "R2"),
    ("STS.128", "[R3+0x10], R8", None, "", "R3 R8 R9 R10 R11"),
    ("ISETP.GE.AND", "P0, PT, R2, R3, PT", None, "P0", "R2 R3"),
    ("BRA", "`(.L_x_6)", "P0", "", "P0"),
    ("IADD3", "R0, P0, R10, -R3, RZ", None, "R0 P0", "R10 R3"),
    ("IMAD.X", "R7, RZ, RZ, R8, P0", None, "R7", "R8 P0"),
    ("LOP3.LUT", "P1, RZ, R3, 0x1ff, RZ, 0xc0, !PT", None, "P1", "R3"),
    ("LDG.E", "R4, desc[UR20][R16.64+0x100]", "P4", "R4", "UR20 R16 R17 P4"),
    ("SHFL.BFLY", "PT, R3, R2, 0x1, 0x1f", None, "R3", "R2"),
    ("CS2R", "R4, SRZ", None, "R4 R5", ""),
    ("IMAD.WIDE.U32", "R2, R3, 0x4, R4", None, "R2 R3", "R3 R4 R5"),
    ("FSEL", "R5, R2, -3.40116213421465348979e+38, P3", "P1", "R5", "R2 P3 P1"),
    ("PLOP3.LUT", "P2, PT, PT, PT, UP0, 0x80, 0x0", None, "P2", "UP0"),
    ("P2R", "R16, PR, RZ, 0x4", None, "R16", "P0 P1 P2 P3 P4 P5 P6"),
    ("REDG.E.ADD.F32.FTZ.RN.STRONG.GPU", "desc[UR10][R4.64+0x820], R9", None, "", "UR10 R4 R5 R9"),
])
def test_decode_instruction(mnemonic, operands, guard, dests, srcs):
    o = decode_instruction(mnemonic, operands, guard)
    assert (" ".join(o.dests), " ".join(o.srcs)) == (dests, srcs)


def test_decode_flags_barriers_and_wavefronts():
    assert decode_instruction("BAR.SYNC.DEFER_BLOCKING", "0x0").barrier
    assert not decode_instruction("BAR.ARV", "0x0, 0x100").barrier
    assert [decode_instruction(m, "R8, [R2]").wavefronts for m in ("LDS", "LDS.64", "LDS.U.128")] == [1, 2, 4]


def test_nested_loops_are_inlined_their_trips():
    loop = {"opcodes": [["NOP", "nop"], ["FADD", "fma"]],
            "instructions": ["0;;;", "1;R0;R0;", "1;R1;R1;", "0;;;"],
            "inner_loops": [{"first": 1, "last": 2, "depth": 2, "trips": None}]}
    assert [o.key for o in decode_loop(loop)] == ["NOP", "FADD", "FADD", "NOP"]
    assert [o.key for o in decode_loop(loop, [3])] == ["NOP"] + ["FADD"] * 6 + ["NOP"]


# ---- hand-built streams ----------------------------------------------------------------
def test_a_dependent_alu_chain_takes_its_latency_each(rates):
    chain = [op("LOP3", ["R0"], ["R0"])] * N
    assert loop_cycles(chain, 1, rates) == pytest.approx(N * rates.alu_latency_cycles)


def test_four_warps_of_a_chain_overlap(rates):
    """4 warps of an FADD chain: each waits its latency (~4 cycles), the others issue in the
    gaps: about the one warp's time, bounded by the FMA pipe (4 warps x 1/ffma rate share)."""
    chain = [op("FADD", ["R0"], ["R0"])] * N
    one = loop_cycles(chain, 1, rates)
    four = loop_cycles(chain, 4, rates)
    bound = 4 * N * SCHEDULERS / rates.ffma_per_cycle
    assert one == pytest.approx(N * rates.ffma_latency_cycles)
    assert max(one, bound) <= four + 1e-6 and four < 1.1 * max(one, bound)
    # the ALU pipe's half rate binds 4 warps of an ALU chain
    alu = [op("LOP3", ["R0"], ["R0"])] * N
    assert loop_cycles(alu, 4, rates) == pytest.approx(4 * N * SCHEDULERS / rates.alu_per_cycle, rel=0.02)


def test_independent_instructions_issue_one_a_cycle(rates):
    assert loop_cycles([op("NOP")] * N, 1, rates) == pytest.approx(N)
    ffma = [op("FFMA", [f"R{i}"], []) for i in range(N)]     # both FMA halves: ~1 a cycle
    assert loop_cycles(ffma, 1, rates) == pytest.approx(N * SCHEDULERS / rates.ffma_per_cycle, rel=0.02)


def test_hmma_throughput_binds_with_many_warps(rates):
    stream = [_hmma(c) for c in range(4)] * 10
    bound = 8 * len(stream) * SCHEDULERS / rates.mma_tf32_per_cycle
    assert loop_cycles(stream, 8, rates) == pytest.approx(bound, rel=0.01)
    # one warp: 10 dependent steps of 4 chains, latency-bound
    assert loop_cycles(stream, 1, rates) == pytest.approx(10 * rates.mma_tf32_latency_cycles, rel=0.01)


def test_half_hmma_takes_its_own_measured_rate_and_latency(rates):
    import dataclasses
    def with_half(latency):
        return dataclasses.replace(rates, mma_half_by_config={"float16": {(16, 4): 2 * rates.mma_tf32_per_cycle}},
                                   mma_half_latency_cycles={"float16": latency})
    stream = [op("HMMA.16816.F32", acc, acc + ["R200", "R201", "R202", "R203", "R204", "R205"])
              for acc in ([f"R{4 * c + k}" for k in range(4)] for c in range(4))] * 10
    # 8 warps of 4 chains, a short latency: the (doubled) pipe rate binds
    bound = 8 * len(stream) * SCHEDULERS / (2 * rates.mma_tf32_per_cycle)
    fast = with_half(12.0)
    assert loop_cycles(stream, 8, fast, mma_format="float16") == pytest.approx(bound, rel=0.01)
    assert loop_cycles(stream, 8, fast) == pytest.approx(2 * bound, rel=0.01)      # as TF32
    # one warp: 10 dependent steps at the half mma's own latency
    assert loop_cycles(stream, 1, with_half(40.0), mma_format="float16") == pytest.approx(10 * 40.0, rel=0.01)
    with pytest.raises(LookupError, match="bfloat16"):          # never measured in these rates
        loop_cycles(stream, 1, fast, mma_format="bfloat16")


def test_shared_loads_feed_hmma_after_their_latency(rates):
    from simulator.issue import LDS_LATENCY
    latency = rates.lds_latency_cycles or LDS_LATENCY     # measured where the rates have it
    stream = [op("LDS.128", ["R200", "R201", "R202", "R203"], ["R250"]), _hmma(0)]
    sim = simulate(stream, 1, rates, trips=2)
    assert sim.cycles_per_trip == pytest.approx(latency + 3 + 1, abs=1e-6)


def test_a_barrier_costs_its_measured_cycles(rates):
    half = [op("NOP")] * N
    plain = loop_cycles(half + [op("NOP")] + half, 4, rates)
    barrier = loop_cycles(half + [op("BAR.SYNC")] + half, 4, rates)
    assert plain == pytest.approx(4 * (2 * N + 1))
    # released barrier_cycles after the last warp's BAR issued (that cycle its own slot, as in
    # the measurement, a loop of barriers): one cycle less than it on top of the NOPs
    assert barrier - plain == pytest.approx(rates.barrier_cycles_at(4 * SCHEDULERS) - 1)
    # two blocks of 2 warps: each barrier its own block's (8 warps a block on the SM)
    two = loop_cycles(half + [op("BAR.SYNC")] + half, 4, rates, blocks=2)
    assert plain < two <= barrier


def test_a_barrier_costs_what_a_block_of_its_warps_measured(rates):
    """A block of 5 warps puts 2 on the busiest scheduler: its barrier costs a 5-warp block's
    measured cycles, not an 8-warp one's (``block_warps``)."""
    half = [op("NOP")] * N
    plain = loop_cycles(half + [op("NOP")] + half, 2, rates)
    five = loop_cycles(half + [op("BAR.SYNC")] + half, 2, rates, block_warps=5)
    eight = loop_cycles(half + [op("BAR.SYNC")] + half, 2, rates)
    assert five - plain == pytest.approx(rates.barrier_cycles_at(5) - 1)
    assert eight - plain == pytest.approx(rates.barrier_cycles_at(2 * SCHEDULERS) - 1)
    assert rates.barrier_cycles_at(5) < rates.barrier_cycles_at(8)


# ---- the recorded loops ----------------------------------------------------------------
def test_json_was_recorded_from_these_kernel_sources():
    from numba_flash.kernel_cache import stale_functions
    from simulator.issue import FORMAT

    document = kernel_loops(LOOPS_JSON)
    assert document["format"] == FORMAT
    stale = stale_functions(document["loops"] + document["no_loop"])
    assert not stale, (
        f"the sources of {', '.join(stale)} changed since simulator/kernel_loops.json.gz was "
        "recorded: rerun `CUDA_HOME=/usr/local/cuda-13.0 python tools/kernel_loops.py --add`")


def test_recorded_loops_match_kernel_sass_counts():
    """Each recorded main loop (no nested loop inlined twice) has kernel_sass.csv's counts."""
    for r in kernel_loops(LOOPS_JSON)["loops"]:
        tiling = key_fields(r)["tiling"]       # with warp_pairs where its variant says so
        d = int(r["d"]) if r["d"] else 0
        causal = r["causal"] == "True"
        stream = stream_for(r["kernel"], tiling, d, causal, r["variant"])
        counts = sass(r["kernel"], tiling, d, causal, r["variant"])
        assert len(stream) == counts.total, r
        assert sum(o.pipe == "hmma" for o in stream) == counts.hmma, r
        assert sum(o.barrier for o in stream) <= counts.bar, r


def test_a_missing_configuration_is_a_lookup_error():
    with pytest.raises(LookupError, match="never compiled|no recorded main loop"):
        stream_for("flash_forward_tc", Tiling(8, 8), 64, False)


def test_global_loads_wait_an_l2_hit_and_spill_refills_an_l1_hit(rates):
    """A dependent chain of LDG takes the L2 latency each (the tile loads stream from L2), one
    of LDL (spill refills) the L1 latency; each is the caller's to override (a spill that
    misses L1)."""
    from simulator.issue import L1_HIT_LATENCY, L2_HIT_LATENCY, memory_latencies

    l2, l1 = memory_latencies(rates)
    assert (l2, l1) == (rates.l2_hit_latency_cycles or L2_HIT_LATENCY,
                        rates.l1_hit_latency_cycles or L1_HIT_LATENCY) and l2 > 3 * l1
    ldg = [op("LDG", ["R0"], ["R0"])] * N
    ldl = [op("LDL", ["R0"], ["R0"])] * N
    assert loop_cycles(ldg, 1, rates) == pytest.approx(N * l2, rel=0.02)
    assert loop_cycles(ldl, 1, rates) == pytest.approx(N * l1, rel=0.05)
    assert loop_cycles(ldl, 1, rates, local_latency=l2) == pytest.approx(N * l2, rel=0.02)
    assert loop_cycles(ldg, 1, rates, global_latency=100.0) == pytest.approx(N * 100.0, rel=0.05)


def test_warps_of_different_streams_run_their_own(rates):
    """Streams: two warps of one block, an ALU chain of N and one of 2N, each ending at the
    block's barrier: a trip takes the longer chain, then the barrier; equal streams give what
    one shared stream does."""
    from simulator.issue import Streams

    chain = (op("LOP3", ["R0"], ["R0"]),)
    bar = (op("BAR.SYNC", [], []),)
    short, long = chain * N + bar, chain * (2 * N) + bar
    two = loop_cycles(Streams((short, long)), 2, rates)
    expected = 2 * N * rates.alu_latency_cycles + rates.barrier_cycles_at(SCHEDULERS * 2)
    assert two == pytest.approx(expected, rel=0.05)
    assert loop_cycles(Streams((short, short)), 2, rates) == pytest.approx(loop_cycles(short, 2, rates))
    with pytest.raises(ValueError, match="2 streams for 3 warps"):
        loop_cycles(Streams((short, short)), 3, rates)


def test_a_global_load_waits_dram_for_the_share_of_bytes_l2_misses(rates):
    from simulator.issue import DRAM_LATENCY, L2_HIT_LATENCY, global_load_latency

    l2 = rates.l2_hit_latency_cycles or L2_HIT_LATENCY
    dram = rates.dram_latency_cycles or DRAM_LATENCY
    assert global_load_latency(rates, 0.0) == l2 and global_load_latency(rates, 1.0) == dram
    assert global_load_latency(rates, 0.25) == pytest.approx(l2 + 0.25 * (dram - l2))
    assert global_load_latency(rates, 3.0) == dram and global_load_latency(rates, -1) == l2


def _red_then_load(k: int):
    """The calibrate microbenchmark's iteration (``load_after_red_cycles``): k reductions whose
    value waits for the load before, then the next load of the chase."""
    return [op("REDG", [], ["R2", "R3", "R0"])] * k + [op("LDG", ["R0"], ["R0", "R2"])]


def test_streams_without_reductions_run_as_without_the_drain(rates):
    """The reduction drain changes nothing where a stream has no global reduction (shared
    stores and loads, LDG, STG, HMMA: every pipe but the drain's)."""
    import dataclasses

    assert rates.red_sectors_per_cycle
    none = dataclasses.replace(rates, red_sectors_per_cycle=None)
    stream = ([op("LDG", ["R0"], ["R0"]), op("STG", [], ["R2", "R3", "R0"]),
               op("LDS.128", ["R8", "R9", "R10", "R11"], ["R1"]), op("STS", [], ["R1", "R0"])]
              + [_hmma(c) for c in range(4)] + [op("LOP3", ["R1"], ["R1"])])
    for warps in (1, 4):
        assert simulate(stream, warps, rates) == simulate(stream, warps, none)


@pytest.mark.parametrize("k, sectors", [(8, 8), (64, 8), (32, 4)])
def test_a_load_behind_reductions_waits_for_the_drain(rates, k, sectors):
    """A warp's k reductions of ``sectors`` join the scheduler's drain, a quarter of the SM's
    rate: k x sectors x 4 / rate cycles; the load behind them enters L2 only once the drain is
    empty, then takes its L2 latency: a trip of one warp is the two one after the other. Two
    warps each drain their reductions too (2 k x sectors x 4 / rate a trip), and overlap part of
    a load's latency with the other warp's drain."""
    l2 = rates.l2_hit_latency_cycles
    drain = k * sectors * SCHEDULERS / rates.red_sectors_per_cycle
    assert loop_cycles(_red_then_load(k), 1, rates, red_sectors=sectors) == pytest.approx(drain + l2, rel=0.01)
    two = loop_cycles(_red_then_load(k), 2, rates, red_sectors=sectors)
    assert 2 * drain < two < 2 * drain + l2


def test_a_block_list_read_hits_l1_and_skips_the_drain(rates):
    """A block-sparse kernel's list read (``Op.l1_hit``) behind k reductions: at L1's latency
    and not behind the drain (the reductions drain in the background), where a load that
    leaves the SM waits for the drain and then L2's latency; dependent list reads wait L1's
    latency each."""
    k, sectors = 64, 8
    drain = k * sectors * SCHEDULERS / rates.red_sectors_per_cycle
    listed = [op("REDG", [], ["R2", "R3", "R0"])] * k + [
        dataclasses.replace(op("LDG.64", ["R0", "R1"], ["R0", "R2"]), l1_hit=True)]
    plain = listed[:-1] + [dataclasses.replace(listed[-1], l1_hit=False)]
    assert loop_cycles(plain, 1, rates, red_sectors=sectors) == pytest.approx(
        drain + rates.l2_hit_latency_cycles, rel=0.01)
    alone = loop_cycles(listed, 1, rates, red_sectors=sectors)
    assert rates.l1_hit_latency_cycles < alone < drain / 4
    chain = [listed[-1]] * 8                             # dependent list reads: L1 latency each
    assert loop_cycles(chain, 1, rates) == pytest.approx(8 * rates.l1_hit_latency_cycles, rel=0.02)


def test_only_the_sparse_kernels_list_reads_hit_l1():
    """In the recorded main loops the 8-byte global loads (``LIST_LOAD``) are the block-sparse
    variants' list reads, one or two a trip: ``stream_for`` marks those and nothing else."""
    from simulator.issue import LIST_LOAD

    for record in kernel_loops()["loops"]:
        if not (record["Br"] and record["d"]):
            continue
        t = Tiling(int(record["Br"]), int(record["Bc"]))
        ops = stream_for(record["kernel"], t, int(record["d"]), record["causal"] == "True",
                         record["variant"])
        hits = [o for o in ops if o.l1_hit]
        if "sparse" in record["variant"].split("+"):
            assert len(hits) in (1, 2) and all(o.key == LIST_LOAD for o in hits), record["kernel"]
        else:
            assert not hits and not any(o.key == LIST_LOAD for o in ops), record["kernel"]


def test_the_drain_gives_back_the_microbenchmark_it_was_measured_by(rates):
    """8 warps an SM (2 a scheduler), k = 8, 32, 64 reductions of 8 sectors before each load:
    the iteration calibrate measured (H200, 2026-12-05: 2038, 8375, 16735 cycles; the chase
    alone 306). The model's drain is linear in k at the rate of k = 64; the hardware drained
    the fewest reductions faster (0.30 sectors a cycle at k = 8, 0.25 at 32 and 64): 7 % long there."""
    measured = {8: (2037.8, 0.08), 32: (8375.0, 0.02), 64: (16735.4, 0.02)}
    for k, (cycles, within) in measured.items():
        got = loop_cycles(_red_then_load(k), 2, rates, red_sectors=8)
        assert got == pytest.approx(cycles, rel=within), k


def test_without_a_drain_rate_reductions_cost_what_stores_do(rates):
    """Rates without ``red_sectors_per_cycle`` (calibrate CSVs from before 2026-12-05): no drain,
    a reduction costs its MIO service only, as a store of its width; the default sectors of a
    reduction are a coalesced warp's (32 lanes x 4 bytes: 4)."""
    import dataclasses

    none = dataclasses.replace(rates, red_sectors_per_cycle=None)
    stores = [op("STG", [], ["R2", "R3", "R0"])] * 8 + [op("LDG", ["R0"], ["R0", "R2"])]
    assert loop_cycles(_red_then_load(8), 2, none, red_sectors=8) == loop_cycles(stores, 2, none)
    assert loop_cycles(_red_then_load(8), 2, none) < 2 * rates.l2_hit_latency_cycles
    assert loop_cycles(_red_then_load(8), 1, rates) == pytest.approx(
        loop_cycles(_red_then_load(8), 1, rates, red_sectors=4))


def test_the_backwards_reductions_carry_their_sectors_into_the_drain(monkeypatch):
    """The runtime gives the simulator the sectors of a reduction from the kernel's own access
    pattern: the sector model's reduced sectors over the reduction warp instructions of the
    launch. The tensor-core backward adds mma C fragments (8 rows x 4 words a warp: 8 sectors),
    the FFMA backward rows of a thread block's tile (2 rows x 16 words: 4 sectors)."""
    import simulator.runtime as runtime
    from simulator.predict import predict
    from simulator.workload import Workload

    seen = {}
    real = runtime._simulated_trip

    def spy(kernel, *args, **kw):
        seen.setdefault(kernel, set()).add(kw.get("red_sectors"))
        return real(kernel, *args, **kw)

    monkeypatch.setattr(runtime, "_simulated_trip", spy)
    predict("flash_backward_tc", Workload(1, 4, 1024, 1024, 128))
    predict("flash_backward", Workload(1, 4, 1024, 1024, 64), Tiling(64, 64))
    assert [pytest.approx(8.0)] == sorted(seen["flash_backward_tc"])
    assert [pytest.approx(4.0)] == sorted(seen["flash_backward"])


# ---- cp.async: LDGSTS, LDGDEPBAR, DEPBAR ----------------------------------------------------
_COPY = op("LDGSTS.128", [], ["R20", "UR4", "R22", "R23"])
_COMMIT = op("LDGDEPBAR")


def test_decode_cp_async_wait_keeps_its_groups_in_flight():
    """``DEPBAR.LE SB0, n``: n from the operands; the recorded loops keep no immediate and
    decode as ``RECORDED_DEPBAR`` (0: ``wait_all``, the kernels' only wait); every other
    instruction has none."""
    from simulator.issue import RECORDED_DEPBAR

    assert decode_instruction("DEPBAR.LE", "SB0, 0x1").depbar == 1
    assert decode_instruction("DEPBAR.LE", "SB0, 0x0").depbar == 0
    assert decode_instruction("LDGDEPBAR", "").depbar is None
    assert op("DEPBAR").depbar == RECORDED_DEPBAR == 0 and op("DEPBAR", depbar=1).depbar == 1
    stream = stream_for("flash_forward_half", Tiling(128, 64), 64, False)
    keys = [o.key for o in stream]
    assert {"DEPBAR", "LDGDEPBAR", "LDGSTS.128"} <= set(keys)
    assert keys.index("DEPBAR") < keys.index("LDGSTS.128") < keys.index("LDGDEPBAR")
    assert [o.depbar for o in stream if o.key == "DEPBAR"] == [RECORDED_DEPBAR]
    assert all(o.depbar is None for o in stream if o.key != "DEPBAR")


def test_copies_nobody_waits_for_cost_what_stores_and_nops_do(rates):
    """Without a DEPBAR, a copy (LDGSTS) costs its MIO service as a store of its width does
    and a commit (LDGDEPBAR) an issue slot; a DEPBAR with no group committed costs an issue
    slot too: such streams simulate as before cp.async completion was modelled."""
    chain = [op("LOP3", ["R0"], ["R0"])] * 8
    store = op("STG.128", [], ["R20", "UR4", "R22", "R23"])
    nop = op("NOP")
    for warps in (1, 4):
        assert simulate(chain + [_COPY, _COMMIT] + chain, warps, rates) == \
            simulate(chain + [store, nop] + chain, warps, rates)
        assert simulate([op("DEPBAR")] + chain, warps, rates) == simulate([nop] + chain, warps, rates)


@pytest.mark.parametrize("latency", [100.0, 300.0, 777.5])
def test_a_wait_for_all_groups_waits_the_copys_latency(rates, latency):
    """DEPBAR.LE SB0, 0 at the top of the trip, the copy and its commit after it (one warp):
    the DEPBAR of trip k + 1 waits for the copy of trip k, issued a cycle after the DEPBAR
    before it and served at once (the MIO queue is empty): a trip is that cycle + the
    global load latency."""
    stream = [op("DEPBAR", depbar=0), _COPY, _COMMIT]
    assert loop_cycles(stream, 1, rates, global_latency=latency) == pytest.approx(latency + 1)
    # the global latency by default: an L2 hit's
    assert loop_cycles(stream, 1, rates) == pytest.approx(rates.l2_hit_latency_cycles + 1)


def test_a_wait_with_one_group_in_flight_waits_for_the_older_only(rates):
    """Group A committed at cycle 1 (its copy served at 0), a dependent ALU chain of 10, group
    B after it, then DEPBAR.LE SB0, n and an independent instruction (one trip, one warp, L =
    200 > the chain): n = 1 waits for A only (lands at L: the trip ends at L + 2), n = 0 for B
    too (issued 3 + 9 a, a the ALU latency: lands L later), n = 2 for neither."""
    latency, a = 200.0, rates.alu_latency_cycles
    chain = [op("LOP3", ["R0"], ["R0"])] * 10
    assert 9 * a + 5 < latency

    def trip(n):
        stream = [_COPY, _COMMIT] + chain + [_COPY, _COMMIT, op("DEPBAR", depbar=n),
                                             op("LOP3", ["R1"], ["R1"])]
        return simulate(stream, 1, rates, trips=1, global_latency=latency).cycles_per_trip

    assert trip(1) == pytest.approx(latency + 2)
    assert trip(0) == pytest.approx(3 + 9 * a + latency + 2)
    assert trip(2) == pytest.approx(5 + 9 * a + 2)


@pytest.mark.parametrize("warps", [1, 2, 4])
def test_a_prefetch_a_whole_long_trip_ahead_costs_nothing(rates, warps):
    """The kernels' double buffering: the copy of the next step issued early in a trip whose
    dependent chain outlasts the copy's latency; the next trip's DEPBAR finds it landed, and
    the trip takes what it takes with a NOP in the DEPBAR's place. Each warp waits for its own
    groups only (a warp's copies do not hold up another's wait)."""
    chain = [op("LOP3", ["R0"], ["R0"])] * 200
    assert 200 * rates.alu_latency_cycles > 2 * rates.l2_hit_latency_cycles
    body = [_COPY, _COMMIT] + chain
    assert loop_cycles([op("DEPBAR")] + body, warps, rates) == loop_cycles([op("NOP")] + body, warps, rates)


def test_a_copy_behind_reductions_lands_after_the_drain(rates):
    """A copy is a global read: it enters L2 behind the scheduler's reductions (the drain,
    k x sectors x 4 / rate cycles), as a load does; the DEPBAR then waits for drain + latency."""
    k, sectors = 16, 8
    drain = k * sectors * SCHEDULERS / rates.red_sectors_per_cycle
    stream = [op("REDG", [], ["R2", "R3", "R5"])] * k + [_COPY, _COMMIT, op("DEPBAR")]
    got = loop_cycles(stream, 1, rates, red_sectors=sectors)
    assert got == pytest.approx(drain + rates.l2_hit_latency_cycles, rel=0.02)


def test_warp_pairs_loops_carry_each_instructions_role():
    """v12's warp pairs: the recorded main loop tags the instructions of each role's branch
    (tools/kernel_loops.warp_roles from the kernel source's ``role == k`` ifs), the two roles
    run the same tile products (as many HMMA each), and a kernel without pairs has no roles.
    (H200, 2026-12-03, ncu: the d = 128 kernel executed 0.556x the static HMMA count, which
    is what a warp runs of the tagged loop: (common + one role's) / all.)"""
    for r in kernel_loops(LOOPS_JSON)["loops"]:
        if r["kernel"] != "flash_backward_tc":
            continue
        tiling = key_fields(r)["tiling"]
        stream = stream_for(r["kernel"], tiling, int(r["d"]), r["causal"] == "True", r["variant"])
        hmma = {k: sum(o.pipe == "hmma" for o in stream if o.role == k) for k in (None, 0, 1)}
        if tiling.warp_pairs:
            assert hmma[0] == hmma[1] > 0, r
            if r["d"] == "128" and r["variant"] == "warp_pairs" and r["causal"] == "False":
                assert (hmma[None] + hmma[0]) / sum(hmma.values()) == pytest.approx(0.556, abs=0.005)
        else:
            assert all(o.role is None for o in stream), r


def test_warp_roles_of_a_kernel_source(tmp_path):
    """Lines inside ``if role == k`` (or ``if not PAIRS or role == k``) take role k, an else
    of ``role == k`` the other role; other lines none."""
    import sys
    from pathlib import Path

    sys.path.append(str(Path(__file__).resolve().parents[1] / "tools"))
    from kernel_loops import warp_roles

    source = tmp_path / "k.py"
    source.write_text("def k(role, PAIRS):\n"       # 1
                      "    a = 1\n"                 # 2
                      "    if not PAIRS or role == 0:\n"
                      "        b = 2\n"             # 4
                      "    if role == 1:\n"
                      "        c = 3\n"             # 6
                      "    else:\n"
                      "        d = 4\n"             # 8
                      "    if PAIRS:\n"
                      "        e = 5\n")            # 10
    assert warp_roles(source) == {4: 0, 6: 1, 8: 0}


def test_each_role_simulated_on_its_own_scheduler(rates):
    """A loop whose warps split by role: the SM's trip is the slower role's stream (common
    instructions in both), not the whole loop on every warp."""
    from dataclasses import replace

    from simulator.runtime import _of_role

    chain = op("LOP3", ["R0"], ["R0"])
    loop = (chain,) * N + tuple(replace(chain, role=0) for _ in range(N)) + \
        tuple(replace(chain, role=1) for _ in range(2 * N))
    assert len(_of_role(loop, 0)) == 2 * N and len(_of_role(loop, 1)) == 3 * N
    assert _of_role(loop, None) == loop
    assert loop_cycles(_of_role(loop, 1), 1, rates) == pytest.approx(3 * N * rates.alu_latency_cycles, rel=0.05)


def test_row_copy_lines_of_a_kernel_source(tmp_path):
    """The lines that call a row copy (``range(tid, Br, T)``: load_row_stats, load_row_block)."""
    import sys
    from pathlib import Path

    sys.path.append(str(Path(__file__).resolve().parents[1] / "tools"))
    from kernel_loops import row_copy_lines

    source = tmp_path / "k.py"
    source.write_text("def k(smem, tid):\n"                       # 1
                      "    load_row_stats(smem, 0, tid)\n"        # 2
                      "    load_twice(smem, 0, tid)\n"            # 3
                      "    x = load_row_block(smem,\n"            # 4
                      "                       1, tid)\n")         # 5
    assert row_copy_lines(source) == {2, 4}


def test_row_copy_set_up_runs_in_the_warps_with_rows():
    """A row copy's loop (``range(tid, Br, T)``) runs only in the warps that own a row: the half
    backward at Br = 64, 256 threads, d = 64 copies L_i, D_i in warps 0 and 1 (one row each:
    the first of the copies ptxas peeled before its 4-fold loop, which runs no trip), none in
    the other six (mean 2/8), and the recorded loop tags the copy's set-up ``rows_only``.
    (Found on the tensor-core backward v13 at Br = 32, d = 64, where ptxas
    refilled 6 spilled words for ``load_row_stats`` before its row loop, which only warp 0
    entered: the local model counted 3.5-3.7x the local loads ncu measured until it counted
    those refills for 32 threads, not 256 (H200, 2026-12-03). v14 loads its rows unrolled, with
    no loop; no kernel now refills spilled words there: ``trips.skipped`` has no local bytes
    here.)"""
    from simulator.trips import skipped, warp_stream
    from simulator.trips import inner_trips, peel_runs

    t = Tiling(64, 128)
    stream = stream_for("flash_backward_half", t, 64, False)
    assert any(o.rows_only for o in stream)
    assert peel_runs("flash_backward_half", t, 64, False)[-1] == pytest.approx(2 / 8)
    each = [peel_runs("flash_backward_half", t, 64, False, warp=w)[-1] for w in range(8)]
    assert each == [1, 1] + [0] * 6
    assert [inner_trips("flash_backward_half", t, 64, False, warp=w)[-1] for w in range(8)] == [0] * 8
    left = skipped("flash_backward_half", t, 64, False)
    assert "ldl_bytes" not in left and "stl_bytes" not in left
    # warps 0 and 1 skip 2 of the 3 peeled copies (2 cp.async each: L_i and D_i)
    full = stream_for("flash_backward_half", t, 64, False, "", (0,))
    own = warp_stream("flash_backward_half", t, 64, False, warp=0)
    assert sum(o.pipe == "ldgsts" for o in full) - sum(o.pipe == "ldgsts" for o in own) == 2 * 2


# ---- the compiler's stall counts --------------------------------------------------------
#: Two instructions of nvdisasm -c -hex output (ptxas 13.0, sm_90): stall counts 1 and 5.
HEX = """
        /*0030*/                   ULDC.64 UR6, c[0x0][0x3c0] ;                /* 0x0000f00000067ab9 */
                                                                               /* 0x000fe20000000a00 */
        /*0040*/                   FFMA R1, R2, R3, R4 ;                       /* 0x0000000302017223 */
                                                                               /* 0x000fca0000000004 */
"""


def test_stall_counts_are_read_off_the_control_words():
    from simulator.sass import stall_counts

    assert stall_counts(HEX) == {0x30: 1, 0x40: 5}
    assert stall_counts("\n".join(line.split("/* 0x")[0] for line in HEX.splitlines())) == {}


def test_a_warp_waits_its_stall_count_before_its_next_instruction(rates):
    """Independent NOPs issue one a cycle; with stall count 4 each, one warp issues one every
    4 cycles, and 4 warps fill the gaps."""
    from dataclasses import replace

    free = [op("NOP")] * N
    stalled = [replace(o, stall=4) for o in free]
    assert loop_cycles(free, 1, rates) == pytest.approx(N)
    assert loop_cycles(stalled, 1, rates) == pytest.approx(4 * N)
    assert loop_cycles(stalled, 4, rates) == pytest.approx(4 * N)       # 4 warps x N, one a cycle


def test_recorded_stall_counts_decode_into_each_instruction():
    from simulator.issue import has_stall_counts

    loop = {"opcodes": [["NOP", "nop"], ["FADD", "fma"]],
            "instructions": ["0;;;;1", "1;R0;R0;;6", "0;;;;2"], "inner_loops": []}
    assert has_stall_counts(loop) and [o.stall for o in decode_loop(loop)] == [1, 6, 2]
    bare = {**loop, "instructions": [i.rsplit(";", 1)[0] for i in loop["instructions"]]}
    assert not has_stall_counts(bare) and [o.stall for o in decode_loop(bare)] == [1, 1, 1]
    assert [o.stall for o in decode_loop(loop, stalls=False)] == [1, 1, 1]


def test_stall_counts_count_once_every_recorded_loop_has_them(tmp_path):
    """A file of loops with and without stall counts times every kernel without them."""
    import gzip
    import json

    from simulator.issue import all_stall_counts

    loop = {"kernel": "k", "variant": "", "Br": "", "Bc": "", "d": "", "causal": "",
            "opcodes": [["NOP", "nop"]], "instructions": ["0;;;;4"], "inner_loops": []}
    for loops, expected in (([loop], True), ([loop, {**loop, "kernel": "j", "instructions": ["0;;;"]}], False)):
        path = tmp_path / f"{len(loops)}.json.gz"
        with gzip.open(path, "wt") as f:
            json.dump({"format": 2, "loops": loops, "no_loop": []}, f)
        assert all_stall_counts(path) is expected
        assert [o.stall for o in stream_for("k", None, 0, False, path=path)] == [4 if expected else 1]


# ---- the mma's hold on FMA-pipe and ALU dispatch -------------------------------------------
def _beside_mma(kind: str, n: int, groups: int = 12):
    """``groups`` x (an mma of one of 4 chains, then ``n`` independent ``kind`` instructions)."""
    body = []
    for g in range(groups):
        body.append(_hmma(g % 4))
        body += [op(kind, [f"R{100 + (g * n + i) % 40}"], []) for i in range(n)]
    return body


@pytest.mark.parametrize("kind", ["FFMA", "LOP3"])
@pytest.mark.parametrize("hold", [2.0, 4.0])
def test_an_mma_holds_fma_and_alu_dispatch_for_its_cycles(rates, kind, hold):
    # one warp, 8 instructions an mma: they, not the tensor pipe, set the pace, and each
    # mma's hold pushes the first of them back by up to hold - 1 cycles (the slot after the
    # mma); FFMA issue one a cycle, so exactly that; an ALU instruction every other cycle may
    # find part of the hold spent on its own pipe's interval
    stream = _beside_mma(kind, 8)
    free = loop_cycles(stream, 1, dataclasses.replace(rates, mma_dispatch_cycles=None))
    held = loop_cycles(stream, 1, dataclasses.replace(rates, mma_dispatch_cycles=hold))
    if kind == "FFMA":
        assert held == pytest.approx(free + 12 * (hold - 1), rel=1e-9)
    else:
        assert free + 12 * (hold - 2) < held <= free + 12 * (hold - 1) + 1e-6
    assert loop_cycles(stream, 1, dataclasses.replace(rates, mma_dispatch_cycles=0.0)) == pytest.approx(free)


def test_the_hold_hides_under_the_tensor_pipe_and_spares_shared_loads(rates):
    held = dataclasses.replace(rates, mma_dispatch_cycles=4.0)
    free = dataclasses.replace(rates, mma_dispatch_cycles=None)
    # 2 FFMA an mma: they fit in the gap before the tensor pipe takes the next mma
    assert loop_cycles(_beside_mma("FFMA", 2), 1, held) == pytest.approx(loop_cycles(_beside_mma("FFMA", 2), 1, free))
    loads = [_hmma(g % 4) if i == 0 else op("LDS.128", [f"R{100 + 4 * ((g + i) % 8) + k}" for k in range(4)], ["R3"])
             for g in range(12) for i in range(2)]
    assert loop_cycles(loads, 1, held) == pytest.approx(loop_cycles(loads, 1, free))


def test_committed_rates_carry_the_fitted_hold():
    from simulator.rates import RATES_CSV
    for path in (RATES_CSV, RATES_CSV.with_name("rates_h100.csv")):
        assert load_rates(path).mma_dispatch_cycles == 4.0


# ---- stall reasons (issue.simulate's account) ----------------------------------------------
def test_a_chain_waits_its_latency_and_two_warps_take_turns(rates):
    from simulator.issue import simulate, stall_reasons

    one: dict = {}
    simulate([op("LOP3", ["R0"], ["R0"])] * N, 1, rates, account=one)
    reasons = stall_reasons(one)
    assert reasons["selected"] == 1.0
    # every instruction after the first waits its producer's fixed latency, nothing else
    assert reasons["wait"] == pytest.approx((rates.alu_latency_cycles - 1) * (3 * N - 1) / (3 * N))
    assert sum(reasons.values()) - 1 - reasons["wait"] == pytest.approx(0.0, abs=1e-9)
    # 2 warps of independent NOPs, oldest first: warp 0 issues every cycle to its end while
    # warp 1, ready all along, is not selected; then warp 1 runs alone: of the 3 (warp 0) + 6
    # (warp 1) warp-cycles a pair of instructions, 1 ready and not selected a pair
    two: dict = {}
    simulate([op("NOP")] * N, 2, rates, account=two)
    reasons = stall_reasons(two)
    assert reasons["not_selected"] == pytest.approx(0.5, abs=1e-9)
    assert sum(reasons.values()) == pytest.approx(1.5, abs=1e-9)
    gto: dict = {}
    simulate([op("NOP")] * N, 2, rates, policy="gto", account=gto)
    assert stall_reasons(gto) == stall_reasons(two)


def test_the_mma_hold_is_accounted_as_dispatch_stalls(rates):
    from simulator.issue import simulate, stall_reasons

    held: dict = {}
    simulate(_beside_mma("FFMA", 8), 1, dataclasses.replace(rates, mma_dispatch_cycles=4.0), account=held)
    free: dict = {}
    simulate(_beside_mma("FFMA", 8), 1, dataclasses.replace(rates, mma_dispatch_cycles=None), account=free)
    # each mma's first FFMA waits 3 cycles more: 3 cycles for 1 instruction in 9
    assert stall_reasons(free)["dispatch_stall"] == 0.0
    assert stall_reasons(held)["dispatch_stall"] == pytest.approx(3 * 12 * 3 / (3 * 12 * 9), rel=1e-6)


def test_the_account_blames_only_what_the_issue_waited_for(rates):
    from simulator.issue import simulate, stall_reasons

    # an FFMA writes R5, two MUFU follow, the second writing R5 again: R5's FFMA result is not
    # scoreboarded, so the second MUFU waits for its pipe only, as it would writing R8
    def reasons(dest):
        account: dict = {}
        simulate([op("FFMA", ["R5"], ["R6", "R7"]), op("MUFU.EX2", ["R1"], ["R2"]),
                  op("MUFU.EX2", [dest], ["R3"])], 1, rates, trips=1, account=account)
        return stall_reasons(account)
    assert reasons("R5") == reasons("R8")
    assert reasons("R5")["wait"] == 0.0 and reasons("R5")["math_pipe_throttle"] > 0
