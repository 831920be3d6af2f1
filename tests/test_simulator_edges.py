"""Edge tiles: the trips that run a kernel's masking code. The kernels mask a tile's scores
only where ``tiles.needs_mask`` says it holds one to mask (a ragged key block, or one the
band's edge crosses); where ptxas compiles that ``if`` as a branch, interior tiles jump over
the code (the half kernels: ~28 % of the half forward's main loop at d = 64). The model counts
that code on edge trips only: ``BlockGrid.edge_pairs`` (which trips), ``sass.skipped_by_branches``
and tools/kernel_loops.py's ``mask_lines`` (which code: ``issue.Op.edge``), ``trips.skipped``
and the runtime's weighted trips (what it costs)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simulator.blocks import BlockGrid
from simulator.issue import decode_loop, encode_loop
from simulator.phases import phase
from simulator.runtime import _launch_order
from simulator.sass import MAIN_LOOP, parse, regions, skipped_by_branches
from simulator.spec import band

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from kernel_loops import mask_lines  # noqa: E402

KERNELS = ROOT / "numba_flash" / "kernels"


def _brute_edges(n_q, n_k, br, bc, causal, window):
    """(Tr, Tc) booleans by enumeration: active pairs (some score of the tile's rows < n_q,
    keys < n_k is in the band) whose full br x bc tile holds a score to mask -- a key past n_k,
    or, for any of its br rows (past n_q too: the kernels test the full tile), a key outside
    the band."""
    mask, hi, lo = band(n_q, n_k, causal, window, None)
    tr, tc = -(-n_q // br), -(-n_k // bc)
    out = np.zeros((tr, tc), bool)
    for i in range(tr):
        r = np.arange(i * br, i * br + br)[:, None]
        for j in range(tc):
            c = np.arange(j * bc, j * bc + bc)[None, :]
            seen = np.ones((br, bc), bool)
            if mask.upper:
                seen &= c <= r + hi
            if mask.lower:
                seen &= c >= r + lo
            real = (r < n_q) & (c < n_k)
            if not (seen & real).any():
                continue                       # not active: no row of the block sees a key
            out[i, j] = bool((~seen | (c >= n_k)).any())
    return out


@settings(max_examples=60, deadline=None)
@given(n_q=st.integers(1, 300), n_k=st.integers(1, 300), br=st.sampled_from([16, 32, 64]),
       bc=st.sampled_from([16, 32, 64]), causal=st.booleans(),
       window=st.one_of(st.none(), st.tuples(st.integers(-1, 90), st.integers(-1, 90))))
def test_edge_pairs_are_the_active_tiles_holding_a_score_to_mask(n_q, n_k, br, bc, causal, window):
    g = BlockGrid(n_q, n_k, br, bc, causal, None, window)
    want = _brute_edges(n_q, n_k, br, bc, causal, window)
    got = g.edge_pairs(np.arange(g.tr))
    # the kernels' block ranges can hold a block no row sees (a window's corner): such pairs
    # are active to the kernels, and hold only masked scores
    extra = got & ~want
    assert not (want & ~got).any()
    assert g.active()[extra].all()
    assert np.array_equal(g.edge_nb, got.sum(axis=1)) and np.array_equal(g.edge_na, got.sum(axis=0))
    assert (g.edge_nb <= g.nb).all() and (g.edge_na <= g.na).all()


def test_edge_tiles_of_familiar_grids():
    # no mask, N a multiple of the tiles: no edge tile; a ragged last key block: one a row block
    assert BlockGrid(4096, 4096, 128, 64).edge_nb.sum() == 0
    assert list(BlockGrid(1000, 1000, 128, 64).edge_nb) == [1] * 8
    # causal, square tiles on the diagonal: the diagonal tile of each row block
    g = BlockGrid(1024, 1024, 64, 64, causal=True)
    assert list(g.edge_nb) == [1] * 16 and list(g.nb) == list(range(1, 17))
    # causal, Br = 128 over Bc = 64: both K/V blocks under a row block's diagonal are edges
    g = BlockGrid(1024, 1024, 128, 64, causal=True)
    assert list(g.edge_nb) == [2] * 8


def test_edge_counts_scan_large_grids_in_pieces():
    g = BlockGrid(1 << 17, 1 << 17, 16, 16, causal=True)      # 8192 x 8192 tiles
    assert g.edge_nb.sum() == g.tr and g.edge_na.sum() == g.tc


#: A main loop with a mask branch (lines 10-12 of a kernel: ``if edge:`` and its body), a
#: predicated select on line 12 too, and a branch over code of another line (20).
LOOP = """
.L_x_0:
	//## File "k.py", line 9
        /*0000*/                   HMMA.1688.F32.TF32 R12, R16, R20, R12 ;
        /*0010*/                   ISETP.GT.AND P0, PT, R2, 0x1, PT ;
	//## File "k.py", line 10
        /*0020*/              @!P0 BRA `(.L_x_1) ;
	//## File "k.py", line 12
        /*0030*/                   ISETP.GE.AND P1, PT, R3, R4, PT ;
	//## File "k.py", line 5
        /*0040*/                   IADD3 R5, R3, 0x8, RZ ;
	//## File "k.py", line 12
        /*0050*/                   FSEL R12, R12, -INF , !P1 ;
.L_x_1:
	//## File "k.py", line 12
        /*0060*/              @P0 FSEL R13, R13, -INF , !P1 ;
	//## File "k.py", line 20
        /*0070*/              @!P2 BRA `(.L_x_2) ;
        /*0080*/                   FADD R14, R14, R15 ;
.L_x_2:
        /*0090*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*00a0*/               @P4 BRA `(.L_x_0) ;
        /*00b0*/                   EXIT ;
"""


def test_skipped_by_branches_marks_masking_code_behind_a_branch_only():
    main = next(r for r in regions(parse(LOOP)) if r.name == MAIN_LOOP)
    lines = {0x30: True, 0x40: False, 0x50: True, 0x60: True}   # line 12 True, line 5 False
    assert skipped_by_branches(main.instructions, lines.get) == {0x30, 0x40, 0x50}
    # the predicated select (0x60) is not jumped over: every trip issues it; a stretch of
    # assignment lines alone is no mask code
    assert skipped_by_branches(main.instructions, {0x30: False, 0x40: False, 0x50: False}.get) == frozenset()
    # a stretch with an instruction of another line is not marked ...
    assert skipped_by_branches(main.instructions, {0x30: True, 0x50: True}.get) == frozenset()
    # ... unless the branch is the ``if``'s own (on its line) and the other line's code is
    # address arithmetic ptxas sank into it (an IADD3 here; a memory access, never)
    own = {0x20: True, 0x30: True, 0x50: True}
    assert skipped_by_branches(main.instructions, own.get) == {0x30, 0x40, 0x50}
    loaded = parse(LOOP.replace("IADD3 R5, R3, 0x8, RZ", "LDS R5, [R3]"))
    body = next(r for r in regions(loaded) if r.name == MAIN_LOOP).instructions
    assert skipped_by_branches(body, own.get) == frozenset()


def test_encode_loop_flags_the_edge_code_and_decode_reads_it_back():
    loop = encode_loop(LOOP, mask_lines={10: True, 11: True, 12: True, 5: False})
    ops = decode_loop(loop)
    assert [o.edge for o in ops] == [False, False, False, True, True, True, False, False, False,
                                     False, False]
    assert not any(o.edge for o in decode_loop(encode_loop(LOOP)))


def test_mask_lines_of_the_kernels():
    half = (KERNELS / "flash_forward_half.py").read_text().splitlines()
    lines = mask_lines(KERNELS / "flash_forward_half.py")
    test = next(n for n, text in enumerate(half, 1) if text.strip().startswith("if edge:"))
    masked_call = next(n for n, text in enumerate(half, 1) if "if masked(" in text)
    assert lines[test] and lines[masked_call]
    cols = next(n for n, text in enumerate(half, 1) if text.strip().startswith("cols = "))
    assert lines[cols] is False
    # the tensor-core backward's ``if edge and masked(...): ... else: exp2``: the test and body
    # only run on edge tiles, the else on every tile
    tc = (KERNELS / "flash_backward_tc.py").read_text().splitlines()
    lines = mask_lines(KERNELS / "flash_backward_tc.py")
    test = next(n for n, text in enumerate(tc, 1) if "if edge and masked(" in text)
    assert lines[test] and lines[test + 1]
    assert tc[test + 1].strip() == "else:" and (test + 3) not in lines   # (the exp2 line)
    assert not any(mask_lines(KERNELS / "flash_forward_fa2.py").values())


def _phase(trips, edges, tile_major=False):
    return phase("p", "k", bh=1, hbm_reads={}, hbm_writes={}, block_trips=trips, edge_trips=edges,
                 tile_major=tile_major)


def test_edge_share_and_weighted_trips():
    p = _phase((4, 2, 1), (1, 1, 0))
    assert p.edge_share == pytest.approx(2 / 7)
    assert _launch_order(p, 2, 1.5) == [4.5, 2.5, 1.0] * 2
    assert _launch_order(_phase((4, 2), (1, 1), True), 2, 2.0) == [5.0, 5.0, 3.0, 3.0]
    assert _phase((4, 2), ()).edge_share == 1.0 and _launch_order(_phase((4, 2), ()), 1, 3.0) == [4, 2]
    assert _phase((4, 2), (0, 0)).edge_share == 0.0
