"""Code a kernel runs once a query head, not once a trip. fa2_fp16x3's backward reads a query
head's scales and works out its factors (``head_factors``, float64) under ``if SPLIT and ii ==
first`` in its main loop: ~490 of the 2858 instructions a warp's static loop holds at d = 64,
64 x 128. Counted on every trip, they made the model's instructions 23 % more than ncu's
(H100, 2026-12-06: 341 against 277 M warp instructions at (2, 16, 2048, 64)). The model counts
them on a block's first trip of each query head: tools/kernel_loops.py's ``head_lines`` (which
code: ``issue.Op.head``), ``Phase.head_share`` (which trips), ``trips.skipped`` and the
runtime (what they cost). Also here: the 16-byte ``cp.async.cg`` tile copies keep no L1 line
(``SectorTraffic.bypassed``), so a spill refill does not compete with them
(``simulator.local``)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from experiments.common.cases import Case
from experiments.common import model
from simulator.issue import decode_loop, encode_loop, stream_for
from simulator.local import local_traffic
from simulator.phases import phase
from simulator.runtime import block_counts
from simulator.sectors import sector_traffic
from simulator.trips import has_head_code, skipped, warp_stream

from .test_simulator_edges import LOOP

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from kernel_loops import head_lines, mask_lines  # noqa: E402

KERNELS = ROOT / "numba_flash" / "kernels"


def test_encode_loop_flags_head_code_apart_from_edge_code():
    loop = encode_loop(LOOP, head_lines={10: True, 11: True, 12: True, 5: False})
    ops = decode_loop(loop)
    assert [o.head for o in ops] == [False, False, False, True, True, True, False, False, False,
                                     False, False]
    assert not any(o.edge for o in ops)
    both = decode_loop(encode_loop(LOOP, mask_lines={20: True}, head_lines={12: True, 10: True, 5: False}))
    assert [(o.edge, o.head) for o in both][3:9] == [(False, True)] * 3 + [(False, False)] * 2 + [(True, False)]


def test_head_lines_of_the_kernels():
    text = (KERNELS / "flash_backward_half.py").read_text().splitlines()
    lines = head_lines(KERNELS / "flash_backward_half.py")
    test = next(n for n, t in enumerate(text, 1) if t.strip().startswith("if SPLIT and ii == first"))
    assert lines[test] and lines[test + 1]               # the if and its head_factors call
    ii = next(n for n, t in enumerate(text, 1) if t.strip().startswith("ii = first + step"))
    kvh = next(n for n, t in enumerate(text, 1) if t.strip().startswith("j, kvh = cuda.blockIdx"))
    kernel = next(n for n, t in enumerate(text, 1) if t.strip().startswith("def flash_backward_half("))
    assert lines[ii] is False and lines[kvh] is False and lines[kernel] is False
    assert sum(lines.values()) == 3                      # the if's two lines and the call's second
    assert not head_lines(KERNELS / "flash_forward_half.py")
    # the mask's lines are the mask's alone
    assert not set(k for k, v in mask_lines(KERNELS / "flash_backward_half.py").items() if v) & {test}


@pytest.mark.parametrize("trips,heads,bh,share", [((4, 2, 0), 4, 8, 4 / 6),    # GQA: 2 a block
                                                   ((4, 2, 1), None, 3, 3 / 7),  # a head a block
                                                   ((), None, 1, 1.0)])
def test_head_share_is_a_blocks_first_trip_of_each_query_head(trips, heads, bh, share):
    p = phase("p", "k", bh=bh, hbm_reads={}, hbm_writes={}, block_trips=trips, heads=heads)
    assert p.head_share(bh) == pytest.approx(share)


@pytest.mark.parametrize("n,d,causal,kv_heads", [(1000, 64, True, None), (777, 128, False, 4),
                                                  (500, 64, True, 2), (300, 64, False, 1)])
def test_head_starts_are_the_query_heads_each_block_with_row_blocks_visits(n, d, causal, kv_heads):
    """head_share x trips: one start for each query head of a K/V block's group (GQA), for
    every K/V block that sees a row block (the kernel's ``ii == first`` steps)."""
    import simulator
    from simulator.blocks import BlockGrid
    from simulator.fp16x3 import backward_default_tiling

    w = simulator.Workload(B=2, H=8, N_q=n, N_k=n, d=d, causal=causal, kv_heads=kv_heads)
    t = backward_default_tiling(d, n, n)
    p = next(ph for ph in simulator.predict("flash_backward_fp16x3", w, t).phases if ph.block_trips)
    g = BlockGrid(w.N_q, w.N_k, t.Br, t.Bc, w.causal, None, w.window)
    starts = p.head_share(w.BH) * sum(p.block_trips) * p.grid_heads(w.BH)
    assert starts == pytest.approx(w.BH * int((g.na > 0).sum()))


def test_the_stall_tool_follows_the_head_trips():
    """tools/stall_model.py watches the runtime's trip simulations: a query head's first trip
    (simulated with the head code) passes through, and the trip it reports is a plain one."""
    import stall_model

    calls = stall_model.simulated_calls(Case("fa2_fp16x3", "fwd_bwd", 2, 16, 2048, 64), "H100_SXM")
    assert ("flash_backward_half", "fp16x3") in calls


def _backward(case):
    report = model.reports(case, gpu="H100_SXM")[1]
    p = next(ph for ph in report.phases if ph.block_trips)
    return p, report.workload, report.tiling


def test_the_fp16x3_backward_runs_its_head_code_once_a_query_head(monkeypatch):
    p, w, t = _backward(Case("fa2_fp16x3", "fwd_bwd", 2, 16, 2048, 64))
    kernel, variant = p.code
    ops = [o for o in stream_for(kernel, t, w.d, w.kernel_causal, variant) if o.head]
    assert has_head_code(kernel, t, w.d, w.kernel_causal, variant)
    head = {"total": len(ops), "fp64": sum(o.pipe == "fp64" for o in ops)}
    assert 400 < head["total"] < 600 and head.get("fp64", 0) > 20     # float64 scale products
    stream = warp_stream(kernel, t, w.d, w.kernel_causal, variant)
    assert len(stream) - len(warp_stream(kernel, t, w.d, w.kernel_causal, variant, head=False)) == head["total"]
    share = p.head_share(w.BH)
    assert share == pytest.approx(1 / 32)                 # one of the 2048 / 64 row blocks
    every = skipped(kernel, t, w.d, w.kernel_causal, variant, None, p.edge_share, 1.0)
    once = skipped(kernel, t, w.d, w.kernel_causal, variant, None, p.edge_share, share)
    assert once["total"] - every.get("total", 0.0) == pytest.approx(head["total"] * (1 - share))
    # the launch's instructions: what every trip would run less the head code's later trips
    warps = t.threads_for(kernel) // 32
    trips, blocks = sum(p.block_trips) * p.grid_heads(w.BH), len(p.block_trips) * p.grid_heads(w.BH)

    def total():
        outside, trip = block_counts(p, w, t, warps)
        return outside["total"] * blocks + trip["total"] * trips
    counted = total()
    monkeypatch.setattr(type(p), "head_share", lambda self, bh: 1.0)
    assert counted == pytest.approx(total() - head["total"] * warps * (1 - share) * trips, rel=1e-9)


def test_cp_async_tiles_keep_no_l1_line_so_spill_refills_hit():
    p, w, t = _backward(Case("fa2_fp16x3", "fwd_bwd", 4, 8, 3072, 64, causal=True))
    s = sector_traffic(p, w)
    assert 0 < s.bypassed < s.missed            # the parts by cp.async.cg; lse, D by 4-byte .ca copies
    from simulator.hardware import H100_SXM
    local = local_traffic(p, w, t, H100_SXM)
    assert local.load_bytes > 0 and local.missed_bytes == 0
