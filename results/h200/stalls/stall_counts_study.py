"""Would the compiler's stall counts make the issue simulator's trips right? A study on the CPU
(issue 12, 2026-12-04): the held-out time errors of the levels experiment (the committed H200
counters, results/h200/levels/levels_kernels.csv, re-predicted) without and with the stall
count of every main-loop instruction (``simulator.sass.stall_counts``: ``Op.stall``), for the
non-causal d = 64 and d = 128 configurations of the recorded kernels, compiled here again with
``nvdisasm -hex`` (the recorded tables have no stall counts yet; the tensor-core backward's warp
pairs at d = 128 and the standard matmul are not compiled by this script, so they keep none).

    CUDA_HOME=/usr/local/cuda-13.0 python results/h200/stalls/stall_counts_study.py DIR
"""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT)]
KERNELS = ("flash_forward_v2", "flash_backward", "flash_forward_v1", "flash_backward_half",
           "flash_forward_half", "flash_forward_tc", "flash_backward_tc")


def _name(key) -> str:
    return "_".join(x for x in key if x) + ".sass"


def compile_one(key, folder: Path) -> str:
    """``nvdisasm -c -hex`` text of one recorded configuration, as tools/kernel_sass.py builds it
    (since 2026-12-06 as a launch links it; the log's run assembled PTX with ptxas)."""
    from kernel_resources import tiled
    from kernel_sass import launch_sass
    from simulator.tiling import Tiling

    kernel, variant, br, bc, d, causal = key
    tiling = Tiling(int(br), int(bc))
    config = tiled(kernel, variant, int(d), causal == "True", tiling)
    built = config.make(tiling)
    (folder / _name(key)).write_text(launch_sass(config.kind, built)[0])
    return _name(key)


def held_out_errors() -> dict[str, list[float]]:
    """Signed time errors (%) of the held-out non-causal d = 64 / 128 levels rows, per kernel."""
    from experiments import levels

    with contextlib.redirect_stdout(io.StringIO()):
        rows = levels.repredict(ROOT / "results/h200/levels/levels_kernels.csv")
    out: dict[str, list[float]] = {}
    for r in rows:
        if (r["quantity"] == "time_s" and r["measured"] and r["predicted"] is not None
                and r["split"] != "development" and not r["causal"] and int(r["d"]) in (64, 128)):
            out.setdefault(r["kernel"], []).append(100 * (r["predicted"] / r["measured"] - 1))
    return out


def with_stall_counts(folder: Path) -> int:
    """Give the loaded records of the configurations compiled in ``folder`` their stall counts."""
    from simulator.issue import LOOPS_JSON, kernel_loops
    from simulator.sass import MAIN_LOOP, parse, regions, stall_counts

    records = {_name((r["kernel"], r["variant"], r["Br"], r["Bc"], r["d"], r["causal"])): r
               for r in kernel_loops(LOOPS_JSON)["loops"]}
    for path in sorted(folder.glob("*.sass")):
        text = path.read_text()
        main = next(r for r in regions(parse(text)) if r.name == MAIN_LOOP)
        record, stalls = records[path.name], stall_counts(text)
        assert len(record["instructions"]) == len(main.instructions), path.name
        record["instructions"] = [f"{item};{stalls[i.address]}"
                                  for item, i in zip(record["instructions"], main.instructions)]
    return len(list(folder.glob("*.sass")))


def _forget_streams() -> None:
    """Drop the model's cached streams and what was derived from them (not the loaded
    records, which now hold the stall counts)."""
    import simulator.issue as issue
    import simulator.trips as trips

    issue.stream_for.cache_clear()
    issue._CACHE.clear()
    issue.all_stall_counts = lambda path=None: True     # the compiled ones have them, the rest 1
    for name in ("skipped", "_nested_counts"):
        getattr(trips, name).cache_clear()


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    doc = json.load(gzip.open(ROOT / "simulator/kernel_loops.json.gz", "rt"))
    keys = [(r["kernel"], r["variant"], r["Br"], r["Bc"], r["d"], r["causal"]) for r in doc["loops"]
            if r["kernel"] in KERNELS and r["variant"] == "" and r["causal"] == "False"
            and r["d"] in ("64", "128") and not (folder / _name((r["kernel"], r["variant"], r["Br"],
                                                                  r["Bc"], r["d"], r["causal"]))).exists()]
    with ProcessPoolExecutor(2) as pool:
        for name in pool.map(compile_one, keys, [folder] * len(keys)):
            print("compiled", name, flush=True)
    before = held_out_errors()
    print(f"{with_stall_counts(folder)} configurations given their stall counts")
    _forget_streams()
    after = held_out_errors()
    print(f"{'kernel':30s} {'n':>3s}  {'MAPE without':>12s}  {'range':>15s}  {'MAPE with':>10s}  {'range':>15s}")
    for kernel in sorted(before):
        b, a = before[kernel], after[kernel]
        print(f"{kernel:30s} {len(b):3d}  {statistics.mean(map(abs, b)):12.1f}  {min(b):+6.1f} .. {max(b):+6.1f}"
              f"  {statistics.mean(map(abs, a)):10.1f}  {min(a):+6.1f} .. {max(a):+6.1f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
