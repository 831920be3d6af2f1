"""The runtime experiment's fp32 FlashAttention forward + backward rows (d = 64, 16 heads, 16K
tokens a batch, N = 1K ... 64K) timed again on backward v14: the committed runtime.csv timed
v13 (0d213d4), and the model's kernel tables now describe v14. argv: out folder; writes
runtime_fa2_fp32_v14.csv there (the rows runtime.csv takes: each checked against float64, then
CUDA events, median of 20, as ``experiments.runtime``)."""
import sys
from pathlib import Path
sys.path.insert(0, ".")

if __name__ == "__main__":
    from experiments.common.cases import Case
    from experiments.common.context import RunContext
    from experiments.common.kernels import build_kernels
    from experiments.common.metadata import run_metadata
    from experiments.common.results import write_rows
    from experiments.runtime import D, H, NAME, NS, _ours, batch

    out = Path(sys.argv[1])
    ctx = RunContext("gpu", False, out, "python results/h200/runtime/fa2_fp32_v14.py OUT "
                     "(experiments.runtime's fa2 fp32 fwd_bwd cases alone)")
    cases = [Case("fa2", "fwd_bwd", batch(n), H, n, D) for n in NS]
    build_kernels(ctx, NAME, cases)
    rows = [_ours(ctx, case, set()) for case in cases]
    for r in rows:
        print(r["N"], r.get("measured"), r.get("max_rel_error"), r.get("note", ""), flush=True)
    write_rows(out / "runtime_fa2_fp32_v14.csv", rows, run_metadata(NAME, "gpu", ctx.command))
    sys.exit(1 if ctx.failures else 0)
