"""The SASS instruction mix (simulator/sass.py): the loop finder and opcode classes on hand-written
SASS, and the recorded table (simulator/kernel_sass.csv, tools/kernel_sass.py): its kernel-source
digest, lookups, and counts derived by hand from the kernels' code."""
import csv
import dataclasses

import pytest

from simulator.occupancy import resources
from simulator.sass import (COUNTS, LSU, PIPES, SASS_CSV, KernelSass, access_bytes, find_loops,
                            format_lines, format_opcodes, kernel_sass, opcode_key, parse,
                            parse_opcodes, pipe_class, regions, sass, source_lines, tally)
from simulator.tiling import Tiling

HEAD_DIMS = (32, 64, 80, 128, 256)

# A kernel of two nested loops and one loop before them, as nvdisasm -c prints it (cut down):
#   0x10..0x40  a strided copy (loop, back edge at 0x40)
#   0x60..0x120 the main loop: 0x80..0xc0 a nested loop (back edge at 0xc0), two HMMA
#   0x140       a call to a subroutine, 0x150 EXIT, then the tail padding
SNIPPET = """\
        .text.kernel:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   LDG.E R2, desc[UR4][R4.64] ;
        /*0020*/                   IADD3 R0, R0, 0x80, RZ ;
        /*0030*/                   STS [R3], R2 ;
        /*0040*/               @P0 BRA `(.L_x_0) ;
        /*0050*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
.L_x_1:
        /*0060*/                   LDS.128 R8, [R3+0x10] ;
        /*0070*/                   HMMA.1688.F32.TF32 R12, R8, R16, R12 ;
.L_x_2:
        /*0080*/                   LDL.64 R20, [R1+0x8]          (*"SpillRefill"*);
        /*0090*/                   FFMA R5, R6, R7, R5 ;
        /*00a0*/                   IMAD.MOV.U32 R6, RZ, RZ, R5 ;
        /*00b0*/                   UISETP.NE.AND UP0, UPT, UR4, URZ, UPT ;
        /*00c0*/              @!UP0 BRA `(.L_x_2) ;
        /*00d0*/                   STL [R1+0x4], R6 ;
        /*00e0*/                   MUFU.EX2 R7, R7 ;
        /*00f0*/                   SHFL.BFLY PT, R9, R7, 0x1, 0x1f ;
        /*0100*/                   HMMA.1688.F32.TF32 R12, R8, R18, R12 ;
        /*0110*/                   NOP ;
        /*0120*/               @P1 BRA `(.L_x_1) ;
        /*0130*/                   STG.E.64 desc[UR4][R2.64], R12 ;
        /*0140*/                   CALL.REL.NOINC `($__internal_0_slowpath) ;
        /*0150*/                   EXIT ;
$__internal_0_slowpath:
        /*0160*/                   MUFU.RCP R0, R2 ;
        /*0170*/                   RET.REL.NODEC R10 `(kernel) ;
.L_x_3:
        /*0180*/                   BRA `(.L_x_3);
        /*0190*/                   NOP;
        /*01a0*/                   NOP;
.L_x_4:
"""


# ---- parsing, loops, classes on hand-written SASS ------------------------------------------
def test_parse_drops_the_tail_padding_and_resolves_branches():
    instructions = parse(SNIPPET)
    assert [i.address for i in instructions] == list(range(0, 0x180, 0x10))
    by_address = {i.address: i for i in instructions}
    assert by_address[0x40].target == 0x10 and by_address[0xc0].target == 0x80
    assert by_address[0x120].target == 0x60
    assert by_address[0x140].target is None           # calls and returns are not loop edges
    assert by_address[0xc0].mnemonic == "BRA" and by_address[0x80].mnemonic == "LDL.64"
    assert by_address[0x80].spill and not by_address[0xd0].spill


def test_loop_finder_nests_loops():
    loops = find_loops(parse(SNIPPET))
    assert [(loop.start, loop.end, loop.depth) for loop in loops] == [
        (0x10, 0x40, 1), (0x60, 0x120, 1), (0x80, 0xc0, 2)]
    assert loops[1].holds(loops[2]) and not loops[2].holds(loops[1])


def test_loop_finder_merges_shared_headers_and_overlaps():
    def bra(at, to):
        return f"        /*{at:04x}*/               @P0 BRA `(.L_{to}) ;\n"

    def op(at):
        return f"        /*{at:04x}*/                   NOP ;\n"

    # two back edges to one header (a continue); two ranges that overlap without nesting
    text = (".L_16:\n" + op(0x10) + bra(0x20, 16) + bra(0x30, 16)
            + ".L_64:\n" + op(0x40) + ".L_80:\n" + op(0x50) + bra(0x60, 64) + bra(0x70, 80)
            + op(0x80))
    loops = find_loops(parse(text))
    assert [(loop.start, loop.end, loop.depth) for loop in loops] == [
        (0x10, 0x30, 1), (0x40, 0x70, 1)]


def test_regions_pick_the_loop_with_the_tensor_work():
    found = {r.name: r for r in regions(parse(SNIPPET))}
    assert list(found) == ["kernel", "main_loop", "inner_loop_1", "loop_1"]
    assert (found["main_loop"].start, found["main_loop"].end) == (0x60, 0x120)
    assert (found["loop_1"].start, found["loop_1"].end) == (0x10, 0x40)
    counts, opcodes = tally(found["main_loop"].instructions)
    assert counts["hmma"] == 2 and counts["total"] == 13
    assert (counts["lds128"], counts["ldl"], counts["stl"], counts["shfl"]) == (1, 1, 1, 1)
    assert (counts["ldl_bytes"], counts["stl_bytes"]) == (8, 4)
    assert (counts["spill_load_bytes"], counts["spill_store_bytes"]) == (8, 0)   # one marked
    assert (counts["fma"], counts["fp32"], counts["uniform"], counts["xu"]) == (2, 1, 1, 1)
    assert (counts["nop"], counts["branch"]) == (1, 2)
    assert sum(counts[name] for name in PIPES) == counts["total"]
    assert opcodes["HMMA.1688.F32.TF32"] == 2 and opcodes["IMAD"] == 1
    kernel, _ = tally(found["kernel"].instructions)
    assert kernel["total"] == 24 and kernel["ldc"] == 1 and kernel["stg64"] == 1
    assert kernel["xu"] == 2                          # the subroutine's MUFU.RCP counts


def test_a_kernel_without_loops_has_one_region():
    text = ("        /*0000*/                   S2R R0, SR_TID.X ;\n"
            "        /*0010*/                   EXIT ;\n")
    (only,) = regions(parse(text))
    assert only.name == "kernel" and tally(only.instructions)[0]["other"] == 1


@pytest.mark.parametrize("mnemonic, key, cls", [
    ("LDS.U.128", "LDS.128", "lds128"), ("LDS", "LDS", "lds32"), ("LDS.U8", "LDS.U8", "lds32"),
    ("LDG.E.64.CONSTANT", "LDG.64", "ldg64"), ("STG.E", "STG", "stg32"),
    ("STS.128", "STS.128", "sts128"), ("LDL.LU", "LDL", "ldl"), ("STL.128", "STL.128", "stl"),
    ("HMMA.1688.F32.TF32", "HMMA.1688.F32.TF32", "hmma"), ("HFMA2.MMA", "HFMA2.MMA", "hmma"),
    ("FFMA.FTZ", "FFMA", "fma"), ("IMAD.WIDE.U32", "IMAD", "fma"), ("VIADD", "VIADD", "fma"),
    ("FMNMX", "FMNMX", "alu"), ("FSETP.GT.AND", "FSETP", "alu"), ("IADD3.X", "IADD3", "alu"),
    ("MUFU.EX2", "MUFU.EX2", "xu"), ("F2F.F64.F32", "F2F", "xu"), ("DFMA", "DFMA", "fp64"),
    ("REDG.E.ADD.F32.FTZ.RN.STRONG.GPU", "REDG", "atom"), ("SHFL.BFLY", "SHFL", "shfl"),
    ("BAR.SYNC.DEFER_BLOCKING", "BAR", "bar"), ("BSSY", "BSSY", "branch"),
    ("ULDC.64", "ULDC", "uniform"), ("S2UR", "S2UR", "uniform"), ("LDC.64", "LDC", "ldc"),
    ("S2R", "S2R", "other"), ("NOP", "NOP", "nop"),
])
def test_opcode_classes(mnemonic, key, cls):
    assert opcode_key(mnemonic) == key and pipe_class(key) == cls


def test_reductions_are_the_global_ones_of_the_atom_class():
    """A region's ``reductions`` (the reductions the runtime model drains to L2) count RED /
    REDG / ATOM / ATOMG, not the shared ATOMS nor the warp's REDUX, which share their class."""
    text = ("        /*0000*/                   REDG.E.ADD.F32.FTZ.RN.STRONG.GPU [R2.64], R5 ;\n"
            "        /*0010*/                   ATOMS.ADD R3, [R4], R5 ;\n"
            "        /*0020*/                   REDUX.SUM UR4, R6 ;\n"
            "        /*0030*/                   ATOMG.E.ADD.STRONG.GPU PT, R7, [R2.64], R5 ;\n"
            "        /*0040*/                   EXIT ;\n")
    counts, opcodes = tally(parse(text))
    row = next(r for r in kernel_sass() if r.region == "main_loop")
    region = dataclasses.replace(row, **counts, opcodes=opcodes)
    assert region.atom == 4 and region.reductions == 2


def test_access_bytes_and_opcode_strings():
    assert [access_bytes(k) for k in ("LDL", "LDL.64", "STL.128", "LDS.U8")] == [4, 8, 16, 1]
    opcodes = {"FFMA": 3, "LDS.128": 2, "HMMA.1688.F32.TF32": 1}
    assert parse_opcodes(format_opcodes(opcodes)) == opcodes
    assert format_lines([("a.py", 5), ("a.py", 3), ("a.py", 4), ("a.py", 9), ("b.py", 1)]) == \
        "a.py:3-5,9 b.py:1"


def test_source_lines_hold_to_the_next_marker_within_a_function():
    text = ('\t//## File "/x/k.py", line 7\n        /*0000*/                   NOP ;\n'
            '        /*0010*/                   NOP ;\n\t//## File "/x/k.py", line 9\n'
            '        /*0020*/                   EXIT ;\n        .type           f,@function\n'
            '        /*0030*/                   RET.REL.NODEC R10 `(k) ;\n')
    assert source_lines(text) == {0: ("k.py", 7), 0x10: ("k.py", 7), 0x20: ("k.py", 9)}


# ---- the recorded table --------------------------------------------------------------------
def test_csv_was_recorded_from_these_kernel_sources():
    """The instruction mix changes with the kernels' code: each row names the source digest of
    its kernel (numba_flash.kernel_cache.function_digest), as kernel_resources.csv does."""
    from numba_flash.kernel_cache import stale_functions

    with open(SASS_CSV, newline="") as f:
        stale = stale_functions(csv.DictReader(f))
    assert not stale, (
        f"the sources of {', '.join(stale)} changed since simulator/kernel_sass.csv was recorded: "
        "rerun `pip install nvidia-cuda-nvrtc nvidia-cuda-nvdisasm; "
        "CUDA_HOME=/usr/local/cuda-13.0 python tools/kernel_sass.py --add`")


def test_rows_are_consistent():
    rows = kernel_sass()
    assert rows
    for r in rows:
        assert sum(getattr(r, name) for name in PIPES) == r.total, r.region
        assert sum(r.opcodes.values()) == r.total
        counts, _ = _tally_opcodes(r.opcodes)      # all but the spill marks, from the opcodes
        recount = {name: counts[name] for name in COUNTS if not name.startswith("spill_")}
        assert recount == {k: v for k, v in r.counts.items() if not k.startswith("spill_")}
        assert r.spill_load_bytes <= r.ldl_bytes and r.spill_store_bytes <= r.stl_bytes
        assert r.fp32 <= r.fma and r.lsu == sum(getattr(r, name) for name in LSU)
        assert (r.depth == 0) == (r.region == "kernel") and r.start <= r.end


def _tally_opcodes(opcodes):
    """tally's counts from an opcode histogram (the CSV's classes re-derived)."""
    from simulator.sass import Instruction

    return tally([Instruction(0, key) for key, n in opcodes.items() for _ in range(n)])


def test_regions_lie_inside_their_kernel():
    by_kernel = {}
    for r in kernel_sass():
        by_kernel.setdefault((r.kernel, r.variant, r.tiling, r.d, r.causal), []).append(r)
    for key, rows in by_kernel.items():
        names = [r.region for r in rows]
        assert names[0] == "kernel" and len(set(names)) == len(names), key
        kernel = rows[0]
        main = [r for r in rows if r.region == "main_loop"]
        for r in rows[1:]:
            assert kernel.start <= r.start and r.end <= kernel.end
            for name in COUNTS:
                assert getattr(r, name) <= getattr(kernel, name)
            if r.region.startswith("inner_loop_"):
                assert main[0].start <= r.start and r.end <= main[0].end and r.depth >= 2
            if r.region.startswith("loop_") and main:
                assert not (main[0].start <= r.start and r.end <= main[0].end)


def test_local_memory_agrees_with_ptxas():
    """ptxas -v's spill bytes (kernel_resources.csv) are the static sum of the widths of the
    LDL / STL that nvdisasm marks SpillRefill; the other LDL / STL are local arrays, in the
    stack frame beside the spills; a kernel without a stack frame has no LDL / STL."""
    for r in kernel_sass():
        if r.region != "kernel":
            continue
        res = resources(r.kernel, r.tiling, r.d or 0, bool(r.causal), r.variant)
        assert (r.spill_store_bytes, r.spill_load_bytes) == (
            res.spill_store_bytes, res.spill_load_bytes), (r.kernel, r.variant, r.d, r.causal)
        if res.stack_frame_bytes == 0:
            assert r.ldl == r.stl == 0, (r.kernel, r.d)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_every_default_launch_has_a_main_loop(d, causal):
    for kernel in ("flash_forward_tc", "flash_backward_tc", "flash_forward_v2", "flash_forward_v1",
                   "flash_backward", "flash_backward_dq"):
        s = sass(kernel, Tiling.kernel_default(kernel, d), d, causal)
        assert s.region == "main_loop" and s.d == d and s.causal == causal
        assert s.bar >= 1                      # every flash main loop has a block barrier
    assert sass("flash_backward", Tiling.kernel_default("flash_backward", d), d, causal,
                "no_atomic_dq").atom == 0
    assert sass("flash_backward", Tiling.kernel_default("flash_backward", d), d, causal).atom > 0


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_forward_tc_main_loop_hmma(d):
    """flash_forward_fa2_tc: per warp and K/V block, S = Qi Kj^T is Bc/8 n tiles x D8/8 k steps
    of m16n8k8, O += P Vj is D8/8 n tiles x Bc/8 k steps, each product 3 mma (3xTF32)."""
    tiling = Tiling.kernel_default("flash_forward_tc", d)
    nt, ks = tiling.Bc // 8, tiling.mma_depth(d) // 8
    for causal in (False, True):
        s = sass("flash_forward_tc", tiling, d, causal)
        assert s.hmma == 3 * (nt * ks + ks * nt)
        assert s.hmma == sass("flash_forward_tc", tiling, d, causal, region="kernel").hmma
        assert s.bar == 2 and s.shfl == 4      # two barriers a step; quad max: 2 rows x 2 shuffles


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_backward_tc_main_loop_hmma(d):
    """flash_backward_tc, per warp (16 keys) and row block: S^T = Kj Qi^T and dP^T = Vj dOi^T
    (Br/8 n tiles x D8/8 k steps each), dVj += P^T dOi and dKj += dS^T Qi (D8/8 n tiles x Br/8
    k steps each), and dQ_i: the Br/16 x D8/8 tiles of 16 x 8 dealt in runs of ceil(tiles /
    warps), each Bc/8 k steps; 3 mma a product (3xTF32)."""
    tiling = Tiling.kernel_default("flash_backward_tc", d)
    nt, ks = tiling.Br // 8, tiling.mma_depth(d) // 8
    warps = tiling.threads_for("flash_backward_tc") // 32
    per_warp = -(-(tiling.Br // 16) * ks // warps)
    for causal in (False, True):
        s = sass("flash_backward_tc", tiling, d, causal)
        assert s.hmma == 3 * (4 * nt * ks + tiling.Bc // 8 * per_warp)
        assert s.atom > 0                      # dQ by atomic adds


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_ffma_kernels_have_no_tensor_work(d):
    for kernel in ("flash_forward_v2", "flash_forward_v1", "flash_backward", "flash_backward_dq"):
        s = sass(kernel, Tiling.kernel_default(kernel, d), d, False)
        assert s.hmma == 0 and s.fp32 > 0 and s.region == "main_loop"


def test_lookups_fail_clearly():
    with pytest.raises(LookupError, match="never compiled"):
        sass("flash_forward_tc", Tiling(16, 32), 64, False)
    with pytest.raises(LookupError, match="never compiled"):
        sass("flash_forward_v2", Tiling.kernel_default("flash_forward_v2", 96), 96, False)
    with pytest.raises(LookupError, match="no region 'inner_loop_9'"):
        sass("flash_forward_tc", Tiling.kernel_default("flash_forward_tc", 64), 64, False,
             region="inner_loop_9")
    row = sass("softmax", None, 64, True, region="kernel")
    assert isinstance(row, KernelSass) and row.tiling is None and row.d is None
