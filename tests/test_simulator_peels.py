"""The copies ptxas peels before a strided copy's loop (simulator.sass.peeled_copies): found in
SASS, recorded with the loop, and run by a warp only as far as its trips need
(simulator.trips.peel_runs, issue.decode_loop) -- checked against a hand-written loop and
against ncu's executed instructions of backward v13 on the H200."""
from __future__ import annotations

import csv
import gzip
import re
from pathlib import Path

import pytest

from simulator.issue import decode_loop, encode_loop, kernel_loops, LOOPS_JSON
from simulator.sass import INNER_LOOP, MAIN_LOOP, Instruction, guarded, parse, peeled_copies, regions
from simulator.tiling import Tiling
from simulator.trips import COPY_LOADS, inner_trips, peel_runs, skipped, warp_stream

ROOT = Path(__file__).resolve().parent.parent

#: A main loop holding a 4-fold strided copy: set-up, three peeled copies behind exits to
#: .L_x_1, the loop's entry guard, the loop, then the main loop's own work.
LOOP = """
.L_x_0:
        /*0000*/                   ISETP.GE.AND P0, PT, R2, 0x1, PT ;
        /*0010*/              @!P0 BRA `(.L_x_1) ;
        /*0020*/                   LDG.E R4, desc[UR4][R6.64] ;
        /*0030*/                   STS [R8], R4 ;
        /*0040*/              @!P1 BRA `(.L_x_1) ;
        /*0050*/                   LDG.E R4, desc[UR4][R6.64+0x100] ;
        /*0060*/                   STS [R8+0x100], R4 ;
        /*0070*/              @!P2 BRA `(.L_x_1) ;
        /*0080*/                   LDG.E R4, desc[UR4][R6.64+0x200] ;
        /*0090*/                   STS [R8+0x200], R4 ;
.L_x_1:
        /*00a0*/                   ISETP.GE.AND P3, PT, R2, 0x4, PT ;
        /*00b0*/              @!P3 BRA `(.L_x_3) ;
.L_x_2:
        /*00c0*/                   LDG.E R4, desc[UR4][R6.64] ;
        /*00d0*/                   LDG.E R5, desc[UR4][R6.64+0x100] ;
        /*00e0*/                   LDG.E R9, desc[UR4][R6.64+0x200] ;
        /*00f0*/                   LDG.E R11, desc[UR4][R6.64+0x300] ;
        /*0100*/                   STS [R8], R4 ;
        /*0110*/                   STS [R8+0x100], R5 ;
        /*0120*/                   STS [R8+0x200], R9 ;
        /*0130*/                   STS [R8+0x300], R11 ;
        /*0140*/                   IADD3 R2, R2, -0x4, RZ ;
        /*0150*/                   ISETP.GT.AND P3, PT, R2, RZ, PT ;
        /*0160*/               @P3 BRA `(.L_x_2) ;
.L_x_3:
        /*0170*/                   HMMA.1688.F32.TF32 R12, R16, R20, R12 ;
        /*0180*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0190*/               @P4 BRA `(.L_x_0) ;
        /*01a0*/                   EXIT ;
"""


def _main_and_nested(text: str):
    found = regions(parse(text))
    main = next(r for r in found if r.name == MAIN_LOOP)
    return main, [r for r in found if r.name.startswith(INNER_LOOP)]


def test_peeled_copies_of_a_hand_written_loop():
    main, (loop,) = _main_and_nested(LOOP)
    assert peeled_copies(main.instructions, loop, [loop]) == ((0x20, 0x40), (0x50, 0x70), (0x80, 0x90))


def test_copies_that_do_not_match_the_loop_are_no_peel():
    # a copy without its load: the peel's copies differ, so nothing is recognised
    main, (loop,) = _main_and_nested(LOOP.replace("LDG.E R4, desc[UR4][R6.64+0x100] ;", "IADD3 R4, R4, 0x1, RZ ;"))
    assert peeled_copies(main.instructions, loop, [loop]) == ()
    # three copies of one load but a loop of 6 (a peel of 3 goes with a loop of 4)
    doubled = LOOP.replace("        /*0100*/                   STS [R8], R4 ;",
                           "        /*00f8*/                   LDG.E R13, desc[UR4][R6.64+0x400] ;\n"
                           "        /*00fc*/                   LDG.E R14, desc[UR4][R6.64+0x500] ;\n"
                           "        /*0100*/                   STS [R8], R4 ;")
    main, (loop,) = _main_and_nested(doubled)
    assert peeled_copies(main.instructions, loop, [loop]) == ()


def test_decode_runs_only_the_peeled_copies_asked_for():
    record = encode_loop(LOOP)
    assert [len(r["peel"]) for r in record["inner_loops"]] == [3]
    static = decode_loop(record)                       # every copy once, the loop once
    assert len(static) == 26
    for runs in range(4):
        stream = decode_loop(record, [0], [runs])     # the loop skipped, `runs` copies
        # 2 set-up + 3 instructions a copy (2 for the last, which has no exit), then the
        # guard (2) and the main loop's own 3
        assert len(stream) == 2 + sum((3, 3, 2)[:runs]) + 2 + 3
        assert sum(o.key.startswith("LDG") for o in stream) == runs


def _export(path: Path) -> tuple[tuple[Instruction, ...], dict[int, int]]:
    """The instructions of an ncu source-page export (its SASS, branch targets as
    addresses) and each one's executed warp instructions."""
    with gzip.open(path, "rt") as f:
        rows = list(csv.reader(f))
    header, data = rows[1], rows[2:]
    address, source, executed = (header.index(c) for c in ("Address", "Source", "Instructions Executed"))
    text = re.compile(r"^\s*(?:@!?U?P(?:T|\d)\s+)?([A-Z][A-Z0-9_.]*)\s*(.*)$")
    out, counts = [], {}
    for row in data:
        mnemonic, operands = text.match(row[source]).groups()
        target = re.search(r"0x[0-9a-f]+", operands) if mnemonic.split(".")[0] in ("BRA", "JMP") else None
        a = int(row[address], 16)
        out.append(Instruction(a, mnemonic, int(target.group(0), 16) if target else None))
        counts[a] = int(row[executed])
    return tuple(out), counts


def test_only_the_copies_a_warp_needs_ran_on_the_h200():
    """Backward v13 at d = 128 (Br = 16, 256 threads): warp 0 alone holds the one row of
    L_i, D_i a thread copies. ncu (H200, 2026-12-04) saw its first peeled copy run once a
    trip in one warp of 8, the other two copies and the 4-fold loop never, and the row copy's
    guard (``guarded``) keep the other warps out of all of it."""
    instructions, executed = _export(ROOT / "results/h200/stalls/source/backward_v13_d128_2026-12-04.csv.gz")
    found = regions(instructions)
    main = next(r for r in found if r.name == MAIN_LOOP)
    nested = [r for r in found if r.name.startswith(INNER_LOOP)]
    # the loop's warp-trips, as its header ran them: (4, 16, 4096, 128) in 16 x 64 blocks
    # of 8 warps, 4096 blocks x 256 trips x 8 warps
    trips = executed[main.instructions[0].address]
    assert trips == 4 * 16 * (4096 // 64) * (4096 // 16) * 8
    peeled = {r.name: peeled_copies(main.instructions, r, nested) for r in nested}
    assert [len(c) for c in peeled.values()] == [0, 0, 3]
    runs = [{executed[i.address] for i in main.instructions if a <= i.address <= b}
            for a, b in peeled["inner_loop_3"]]
    assert runs == [{trips // 8}, {0}, {0}]
    assert {executed[i.address] for i in nested[2].instructions} == {0}
    # the Qi, dOi copies (2 x 2 items a thread, not unrolled): 2 trips a main-loop trip
    assert all(executed[i.address] == 2 * trips for r in nested[:2] for i in r.instructions)
    # what the row copy's guard skips (``Op.rows_only``) ran in warp 0 or in no warp, the
    # instructions either side of it in every warp
    first, last = guarded(main.instructions, nested[2], nested)
    assert {executed[i.address] for i in main.instructions if first <= i.address <= last} == {0, trips // 8}
    order = [i.address for i in main.instructions]
    assert executed[order[order.index(first) - 1]] == trips == executed[order[order.index(last) + 2]]


def test_every_recorded_peel_goes_with_a_copy_loop_of_its_unroll():
    """Each recorded peel is u - 1 copies before a strided copy unrolled u-fold (``peel_runs``
    gives it a count), and the kernels with strided copies in their main loop have one each."""
    from simulator.sass import regions_of

    peeled = set()
    for r in kernel_loops(LOOPS_JSON)["loops"]:
        if not r["Br"]:
            continue
        t, d, causal = Tiling(int(r["Br"]), int(r["Bc"])), int(r["d"] or 64), r["causal"] == "True"
        rows = 1 if r["kernel"] == "flash_forward_v1" else None      # Algorithm 1's row loop
        runs = peel_runs(r["kernel"], t, d, causal, r["variant"], rows)
        recorded = [len(loop.get("peel", [])) for loop in r["inner_loops"]]
        if any(recorded):
            peeled.add(r["kernel"])
        if runs is None:      # a nested loop of unknown trips: the static stream, every copy once
            continue
        assert [n is not None for n in runs] == [k > 0 for k in recorded], r["kernel"]
    assert peeled == {"flash_backward", "flash_backward_dq", "flash_backward_half", "flash_forward_v1",
                      "flash_forward_v2", "standard_matmul"}


def test_the_ffma_backward_runs_one_copy_of_its_row_stats_in_the_warps_with_rows():
    """FFMA backward, 64 x 64 at d = 64 (256 threads): Qi and dOi take 16 loads a thread, the
    4-fold loop 4 trips and no peeled copy; L_i, D_i a row in warps 0 and 1: one peeled copy,
    no loop trip; the other warps neither."""
    t = Tiling(64, 64)
    assert inner_trips("flash_backward", t, 64, False, warp=0)[:3] == (4, 4, 0)
    assert peel_runs("flash_backward", t, 64, False, warp=0)[:3] == (0, 0, 1)
    assert peel_runs("flash_backward", t, 64, False, warp=5)[:3] == (0, 0, 0)
    assert peel_runs("flash_backward", t, 64, False)[2] == 2 / 8
    # skipped a trip, the mean of a warp: Qi's and dOi's 3 peeled copies of a load each in
    # every warp; of L_i, D_i's copies (2 loads each), 2 in warps 0 and 1, all 3 in the other
    # six warps, which skip the whole row copy (``Op.rows_only``)
    left = skipped("flash_backward", t, 64, False)
    assert left["ldg32"] == 3 + 3 + (2 * 2 + 6 * 3) * COPY_LOADS["load_row_stats"] / 8


def test_the_count_path_runs_what_the_warps_run():
    """The throughput bound's warp instructions a trip (``runtime.block_counts``: the static
    counts with each nested loop as often as it runs, less ``trips.skipped``) are the mean of
    the streams the issue simulator gives each warp."""
    from simulator.phases import phase
    from simulator.runtime import block_counts
    from simulator.workload import Workload

    for kernel, t, d in (("flash_backward", Tiling(64, 64), 64), ("flash_backward_half", Tiling(64, 128), 64),
                         ("flash_forward_v2", Tiling(128, 64), 80)):
        w = Workload(B=1, H=1, N_q=1024, N_k=1024, d=d)
        p = phase("test", None, bh=1, hbm_reads={}, hbm_writes={}, code=(kernel, ""), block_trips=(8,))
        warps = t.threads_for(kernel) // 32
        counted = block_counts(p, w, t, warps)[1]["total"] / warps
        ran = sum(len(warp_stream(kernel, t, d, False, warp=v)) for v in range(warps)) / warps
        assert counted == pytest.approx(ran), kernel


def test_the_count_path_runs_a_warps_role_and_the_edge_trips_share():
    """In the warp-pair kernels a warp runs the common code and its role's (role = warp % 2,
    ``issue.Op.role``); the masking code of edge tiles (``issue.Op.edge``) runs on the
    ``Phase.edge_share`` of trips: the count path is the mean over warps and trips."""
    from simulator.phases import phase
    from simulator.runtime import block_counts
    from simulator.workload import Workload

    for kernel, variant, t, d, causal in (
            ("flash_backward_tc", "warp_pairs", Tiling(16, 64, warp_pairs=True), 128, False),
            ("flash_forward_half", "", Tiling(128, 64), 64, True),
            ("flash_backward_half", "", Tiling(64, 128), 64, True)):
        w = Workload(B=1, H=1, N_q=1024, N_k=1024, d=d, causal=causal)
        p = phase("test", None, bh=1, hbm_reads={}, hbm_writes={}, code=(kernel, variant),
                  block_trips=(8, 8), edge_trips=(2, 2))
        warps = t.threads_for(kernel) // 32
        counted = block_counts(p, w, t, warps)[1]["total"] / warps

        def runs(v, edge):
            return sum(o.role in (None, v % 2)
                       for o in warp_stream(kernel, t, d, causal, variant, warp=v, edge=edge))
        ran = sum(0.75 * runs(v, False) + 0.25 * runs(v, True) for v in range(warps)) / warps
        assert counted == pytest.approx(ran), kernel
    roles = {o.role for o in warp_stream("flash_backward_tc", Tiling(16, 64, warp_pairs=True), 128,
                                         False, "warp_pairs")}
    assert roles == {None, 0, 1}
