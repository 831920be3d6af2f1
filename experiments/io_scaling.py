"""Theorem 2: HBM traffic vs sequence length N, head dim d and SRAM size M, measured vs predicted.

Standard attention moves Theta(N d + N^2) elements; FlashAttention (Algorithm 1) Theta(N^2 d^2 / M);
Proposition 3: no exact attention algorithm does better than Omega(N^2 d^2 / M).  Forward pass,
three sweeps: N at fixed d and M; d at fixed N and M; M at fixed N and d.  The flash tilings are
Algorithm 1's choice for M (Bc = ceil(M/4d), Br = min(Bc, d)), run in the paper's loop order
(fa1); fa2_fma (FA2 loop order, which re-reads K and V once per Q block; the FFMA kernel, whose
block sizes are free, where the tensor-core fa2's are not -- both move the same bytes, see
tests/test_traffic_exact.py) is shown beside it for N and M.  Theorem 2's curves are the
simulator's leading-order forms with our loops' constants (``simulator.closed_forms``); Proposition 3's bound is the simulator's, valid for every M >= d.

GPU: measured = ncu's SM<->L2 bytes (the global-memory traffic the kernels issue; DRAM bytes
are in their own column -- the L2 absorbs re-reads), predicted for that GPU (``model.card``;
``predicted_for`` names it).  CPU: measured = count_traffic under the CUDA simulator at tiny
sizes -- or, where the results folder holds a GPU run's ``io_scaling.csv``, that run's
measurements beside this model's predictions for the GPU that measured them
(``experiments.common.repredict``).
"""
from __future__ import annotations

from experiments.common import model, plotting
from experiments.common.cases import Case
from experiments.common.context import RunContext
from experiments.common.repredict import gpu_run, repredict
from experiments.common.traffic import MeasuredTraffic, measure_traffic

NAME = "io_scaling"
#: The columns ``_predicted`` fills.
PREDICTED_COLUMNS = ("predicted", "predicted_read", "predicted_write", "dram_predicted", "theorem2_bytes",
                     "prop3_lower_bound_bytes", "predicted_for")


def _sweeps(ctx: RunContext) -> list[tuple[str, int, Case]]:
    """(sweep, M, case) triples for this run's mode; M is the SRAM size (elements) the flash
    tiling is chosen for (standard attention's M is its matmul tiles' shared memory)."""
    if ctx.gpu:
        B, H, d, n_fixed, bc_fixed, standard_tiling = 1, 16, 64, 2048, 64, None
        ns = [1024, 2048, 4096] if ctx.quick else [512, 1024, 2048, 4096, 8192]
        ds = [32, 64, 128] if ctx.quick else [16, 32, 64, 128]
        bcs = [16, 64, 256] if ctx.quick else [16, 32, 64, 128, 256]
    else:
        B, H, d, n_fixed, bc_fixed, standard_tiling = 1, 1, 8, 32, 8, (8, 8)
        ns = [16, 32, 64] if ctx.quick else [16, 32, 48, 64]
        ds = [4, 8, 16]
        bcs = [4, 8, 16] if ctx.quick else [2, 4, 8, 16]
    m_fixed = 4 * d * bc_fixed

    def flash(method, n, dd, M):
        return Case(method, "fwd", B, H, n, dd, tiling=model.paper_tiling(M, dd))

    def standard(n, dd):  # -> (M, case)
        case = Case("standard", "fwd", B, H, n, dd, tiling=standard_tiling)
        return model.effective_tiling(case).smem_bytes("standard_matmul", dd, 1), case

    triples = []
    for n in ns:
        triples.append(("N", *standard(n, d)))
        triples += [("N", m_fixed, flash(m, n, d, m_fixed)) for m in ("fa1", "fa2_fma")]
    for dd in ds:
        triples += [("d", *standard(n_fixed, dd)), ("d", m_fixed, flash("fa1", n_fixed, dd, m_fixed))]
    for bc in bcs:
        triples += [("M", 4 * d * bc, flash(m, n_fixed, d, 4 * d * bc)) for m in ("fa1", "fa2_fma")]
    return triples


def _predicted(case: Case, M: int, gpu: str) -> dict:
    """The model's columns of a row: ``case`` on Hardware ``gpu``, for SRAM size M (elements)."""
    prediction = model.predict_case(case, gpu=gpu)
    return {"predicted": prediction.total_bytes, "predicted_read": prediction.read_bytes,
            "predicted_write": prediction.write_bytes, "dram_predicted": prediction.dram_bytes,
            "theorem2_bytes": model.theorem2_bytes(case, M),
            "prop3_lower_bound_bytes": model.proposition3_bytes(case, M) if case.method != "standard" else None,
            "predicted_for": gpu}


def _predicted_again(row: dict) -> dict:
    """``_predicted`` for a row of a GPU run's CSV, on the GPU that measured it: the flash
    methods with the row's tiling, standard attention with its kernels' own (as ``_sweeps``)."""
    tiling = None if row["method"] == "standard" else (row["Br"], row["Bc"])
    case = Case(row["method"], row["passes"], row["B"], row["H"], row["N"], row["d"], tiling=tiling)
    return _predicted(case, row["M_elements"], model.card_of(row))


def run(ctx: RunContext) -> list[dict]:
    again = None if ctx.gpu else gpu_run(ctx, NAME)
    if again is not None:        # a GPU run's measurements: predicted again by this model
        return repredict(NAME, again, _predicted_again, PREDICTED_COLUMNS)
    triples = _sweeps(ctx)
    measured = measure_traffic(ctx, NAME, list(dict.fromkeys(case for _, _, case in triples)))
    rows, gpu = [], model.card(ctx.device)
    for sweep, M, case in triples:
        tiling = model.effective_tiling(case)
        got = measured[case]
        ok = isinstance(got, MeasuredTraffic)
        predicted = _predicted(case, M, gpu)
        rows.append({
            "sweep": sweep, "method": case.method, "passes": case.passes,
            "B": case.B, "H": case.H, "N": case.N, "d": case.d, "Br": tiling.Br, "Bc": tiling.Bc,
            "M_elements": M, "quantity": "HBM read+write", "unit": "bytes",
            "measured": got.total_bytes if ok else None, "measured_by": got.measured_by if ok else None,
            "predicted": predicted.pop("predicted"),
            "measured_read": got.read_bytes if ok else None, "measured_write": got.write_bytes if ok else None,
            "dram_measured": got.dram_bytes if ok else None, **predicted,
            "note": "" if ok else got,
        })
    return rows


AXES = {"N": ("sequence length N", "N"), "d": ("head dimension d", "d"),
        "M": ("SRAM size M (elements)", "M_elements")}


def plot(rows: list[dict], path) -> None:
    fig, axes = plotting.figure(3, title="Theorem 2: HBM traffic of the forward pass (fp32)")
    colors = {"standard": "C3", "fa2_fma": "C0", "fa1": "C2"}
    for ax, (sweep, (xlabel, key)) in zip(axes, AXES.items()):
        for method in ("standard", "fa2_fma", "fa1"):
            pts = sorted((r for r in rows if r["sweep"] == sweep and r["method"] == method), key=lambda r: r[key])
            if not pts:
                continue
            x = [r[key] for r in pts]
            c = colors[method]
            ax.plot(x, [r["predicted"] for r in pts], color=c, label=f"{method} predicted", **plotting.PREDICTED)
            ax.plot(x, [r["theorem2_bytes"] for r in pts], color=c, alpha=0.6, linestyle=":",
                    label=f"{method} Theorem 2 ({'Θ(Nd+N²)' if method == 'standard' else 'Θ(N²d²/M)'})")
            meas = [(xi, r["measured"]) for xi, r in zip(x, pts) if r["measured"] is not None]
            if meas:
                ax.plot(*zip(*meas), color=c, label=f"{method} measured", **plotting.MEASURED)
            bound = [(xi, r["prop3_lower_bound_bytes"]) for xi, r in zip(x, pts) if r["prop3_lower_bound_bytes"]]
            if sweep == "M" and bound and method == "fa1":
                ax.plot(*zip(*bound), label="Prop. 3 lower bound", **plotting.BOUND)
        plotting.finish(ax, xlabel, "HBM read + write (bytes)", loglog=True, title=f"vs {sweep}")
    by = {r["measured_by"] for r in rows if r.get("measured_by")}
    plotting.save(fig, path, footnote="measured: " + (", ".join(sorted(by)) or "none (see CSV note)")
                  + "; Theorem 2: leading-order terms with our loops' constants")
