"""ncu counters (the levels experiment's) of its VALIDATION_6 split alone, measured once after
the dirty-residue model it holds out was committed (bf703cf). argv: out folder; writes
levels_kernels_v6.csv there (the rows levels_kernels.csv takes) and prints measured beside
predicted."""
import sys
from pathlib import Path
sys.path.insert(0, ".")


def main():
    import numba_flash
    from experiments.common.kernels import kernel_config
    from experiments.common.metadata import run_metadata
    from experiments.common.ncu import profile_cases
    from experiments.common.results import write_rows
    from experiments.levels import VALIDATION_6, rows_for
    out = Path(sys.argv[1])
    cases = list(VALIDATION_6)
    print(numba_flash.warmup([kernel_config(c) for c in cases]), flush=True)
    counters = profile_cases(cases, out / "ncu")
    kernel_rows = []
    for c in cases:
        rows, kernels = rows_for(c, "validation_6", counters[c])
        kernel_rows += kernels
        for r in rows:
            if r["measured"] is not None:
                print(c.label, r["kernel"], r["quantity"], r["measured"], r["predicted"], flush=True)
            elif r["note"]:
                print(c.label, r["kernel"], r["quantity"], "NOTE", r["note"], flush=True)
    write_rows(out / "levels_kernels_v6.csv", kernel_rows, run_metadata(
        "levels", "gpu", "python results/h200/levels/validation_6.py OUT (the levels experiment's "
        "VALIDATION_6 split alone: experiments.levels.rows_for on experiments.common.ncu.profile_cases)"))


if __name__ == "__main__":
    main()
