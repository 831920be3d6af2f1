"""The issue simulator's stall reasons of a launch's main loop beside ncu's: where the model
puts a warp's cycles between its instructions (``simulator.issue.stall_reasons``: the
compiler's stall counts and fixed latencies, shared-memory and global results, busy pipes, the
mma's dispatch hold, barriers, another warp issuing) against ncu's warp-state sampling of the
same kernel (``smsp__average_warps_issue_stalled_<reason>_per_issue_active``, as
results/h200/stalls/half_stalls.sh and stall_reasons.sh record them).

    python tools/stall_model.py CASE_LABEL [--gpu H100_SXM] [--ncu NCU_OUTPUT.txt]
        [--ncu-name flash_forward_tc=flash_forward_fa2_tc]

CASE_LABEL as the levels experiment writes it (``fa2/fwd_bwd/B2H16N4096d64/float16``). For
each tiled launch of the case: the simulated trip of a full SM (every resident block) on an
interior tile (an edge tile where the launch has only those), cycles per issued instruction
by reason, and ncu's for the first kernel of the file of the launch's name (ncu measures the
whole kernel, prologue and epilogue too, and may be of another shape of the same kernel).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # simulator, experiments

from experiments.common import model  # noqa: E402
from experiments.common.cases import Case  # noqa: E402
from simulator import runtime  # noqa: E402
from simulator.issue import STALL_REASONS, stall_reasons  # noqa: E402


def simulated_calls(case: Case, gpu: str) -> dict[tuple[str, str], tuple]:
    """(kernel, variant) -> the arguments of its launch's full-SM, interior-tile trip simulation, as the
    model's time of ``case`` makes it (``runtime._simulated_trip``, watched while it runs)."""
    real, calls = runtime._simulated_trip, {}

    def watch(kernel, variant, t, w, occ, r, fmt="tf32", spills_miss=False, resident=None, rows=None,
              l2_miss=0.0, edge=True, red_sectors=None, head=False):
        args = (kernel, variant, t, w, occ, r, fmt, spills_miss, resident, rows, l2_miss, edge, red_sectors)
        if head:          # a query head's first trip (issue.Op.head): not the trip reported
            return real(*args, head=True)
        full = lambda a: a[4].blocks_per_sm if a[8] is None else a[8]   # noqa: E731 (None: a full SM)
        best = calls.get((kernel, variant))
        if best is None or (full(args), not edge) >= (full(best), not best[11]):
            calls[kernel, variant] = args
        return real(*args)

    runtime._simulated_trip = watch
    try:
        model.reports(case, gpu=gpu)
    finally:
        runtime._simulated_trip = real
    return calls


def ncu_reasons(path: Path, kernel: str) -> dict[str, float] | None:
    """ncu's stall reasons (cycles per issued instruction) of the first kernel in an ncu text
    output whose name (after its module) is ``kernel`` or ends the model's ``kernel`` name
    (``matmul`` of ``standard_matmul``)."""
    text = path.read_text()
    for block in re.split(r"\n  (?=[A-Za-z_][\w:]*\[)", text)[1:]:
        name = block.split("(")[0].split("[")[0].split("::")[-1]
        if name and (name == kernel or kernel.endswith("_" + name)):
            return {m.group(1): float(m.group(2)) for m in re.finditer(
                r"stalled_(\w+?)_per_issue_active\.ratio\s+inst\s+([\d.]+)", block)}
    return None


def main(argv) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("case")
    parser.add_argument("--gpu", default="H200", help="the model's Hardware name (H200, H100_SXM)")
    parser.add_argument("--ncu", type=Path, help="ncu's text output with the stall-reason metrics")
    parser.add_argument("--ncu-name", action="append", default=[], metavar="MODEL=NCU",
                        help="ncu's name of a model kernel where they differ, e.g. "
                             "flash_forward_tc=flash_forward_fa2_tc")
    args = parser.parse_args(argv)
    names = dict(pair.split("=", 1) for pair in args.ncu_name)
    for (kernel, _), call in simulated_calls(Case.from_label(args.case), args.gpu).items():
        account: dict = {}
        runtime._simulated_trip(*call, account=account)
        model_r = stall_reasons(account)
        measured = ncu_reasons(args.ncu, names.get(kernel, kernel)) if args.ncu else None
        occ = call[4]
        print(f"{kernel} {call[1] or ''} ({call[2]}, {call[8] or occ.blocks_per_sm} blocks of "
              f"{occ.warps_per_block} warps an SM, {'edge' if call[11] else 'interior'} tile): "
              "cycles per issued instruction, model" + (" / ncu" if measured else ""))
        for reason in STALL_REASONS:
            got = f" / {measured.get(reason, float('nan')):5.2f}" if measured else ""
            print(f"  {reason:20s} {model_r[reason]:5.2f}{got}")
        total = sum(model_r.values())
        if measured:
            print(f"  {'sum':20s} {total:5.2f} / {sum(measured.values()):5.2f}  (ncu's other reasons: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in measured.items() if k not in STALL_REASONS and v >= 0.05) + ")")
        else:
            print(f"  {'sum':20s} {total:5.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
