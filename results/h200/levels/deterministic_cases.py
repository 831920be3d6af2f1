"""ncu counters (the levels experiment's) of its deterministic cases alone, on this code: the
deterministic backward now runs the FFMA forward again. argv: out folder."""
import sys
from pathlib import Path
sys.path.insert(0, ".")


def main():
    import numba_flash
    from experiments.common.kernels import kernel_config
    from experiments.common.metadata import run_metadata
    from experiments.common.ncu import profile_cases
    from experiments.common.results import write_rows
    from experiments.levels import SPLITS, rows_for
    out = Path(sys.argv[1])
    cases = [c for cs in SPLITS.values() for c in cs if c.deterministic]
    print(numba_flash.warmup([kernel_config(c) for c in cases]), flush=True)
    counters = profile_cases(cases, out / "ncu")
    kernel_rows = []
    for c in cases:
        rows, kernels = rows_for(c, "deterministic", counters[c])
        kernel_rows += kernels
        for r in rows:
            if r["measured"] is not None:
                print(c.label, r["kernel"], r["quantity"], r["measured"], r["predicted"], flush=True)
            elif r["note"]:
                print(c.label, r["kernel"], r["quantity"], "NOTE", r["note"], flush=True)
    write_rows(out / "levels_kernels_det.csv", kernel_rows, run_metadata(
        "levels", "gpu", "python results/h200/levels/deterministic_cases.py OUT (the levels experiment's "
        "deterministic cases alone: experiments.levels.rows_for on experiments.common.ncu.profile_cases)"))


if __name__ == "__main__":
    main()
