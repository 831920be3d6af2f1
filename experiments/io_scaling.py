"""Theorem 2: HBM traffic vs sequence length N, head dim d and SRAM size M, measured vs predicted.

Standard attention moves Theta(N d + N^2) elements; FlashAttention Theta(N^2 d^2 / M), and
Proposition 3 says no exact attention algorithm does better than Omega(N^2 d^2 / M) for
d <= M <= N d.  Three sweeps (forward pass): N at fixed d and tiling; d at fixed N; M through
tilings (Algorithm 1's choice Bc = ceil(M / 4d), Br = min(Bc, d), run in the paper's loop order
fa1).  The Theta curves are scaled through the predicted points (a Theta has no constant);
Proposition 3's bound is drawn with constant 1.

GPU: measured = ncu's SM<->L2 bytes (the global-memory traffic the tiled algorithm issues;
DRAM bytes are in their own column, the L2 absorbs re-reads).  CPU: measured = count_traffic
under the CUDA simulator at tiny sizes.
"""
from __future__ import annotations

import math

import numpy as np

from experiments.common import model, plotting
from experiments.common.cases import Case
from experiments.common.context import RunContext
from experiments.common.traffic import MeasuredTraffic, measure_traffic

NAME = "io_scaling"


def _sweeps(ctx: RunContext) -> list[tuple[str, Case]]:
    """(sweep, case) pairs for this run's mode."""
    if ctx.gpu:
        B, H, d, n_fixed = 1, 16, 64, 2048
        ns = [1024, 2048, 4096] if ctx.quick else [512, 1024, 2048, 4096, 8192]
        ds = [32, 64, 128] if ctx.quick else [16, 32, 64, 128]
        bcs = [16, 64, 256] if ctx.quick else [16, 32, 64, 128, 256]
        tiling = None
    else:
        B, H, d, n_fixed = 1, 2, 8, 32
        ns = [16, 32, 64] if ctx.quick else [16, 32, 48, 64]
        ds = [4, 8, 16]
        bcs = [2, 4, 8] if ctx.quick else [2, 4, 8, 16]
        tiling = (8, 8)
    pairs = []
    for method in ("standard", "fa2"):
        pairs += [("N", Case(method, "fwd", B, H, n, d, tiling=tiling)) for n in ns]
        pairs += [("d", Case(method, "fwd", B, H, n_fixed, dd, tiling=tiling)) for dd in ds]
    n_m = max(ns)
    for bc in bcs:
        t = model.paper_tiling(4 * d * bc, d)
        pairs.append(("M", Case("fa1", "fwd", B, H, n_m, d, tiling=(t.Br, t.Bc))))
    return pairs


def sram_elements(case: Case) -> int:
    """M of a case: the SRAM budget its tiling was chosen for (fa1's M sweep: 4 d Bc), else the
    elements of shared memory its kernel's tiling allocates."""
    tiling = model.effective_tiling(case)
    if case.method == "fa1":
        return 4 * case.d * tiling.Bc
    kernel = "standard_matmul" if case.method == "standard" else "flash_forward_v2"
    return tiling.smem_bytes(kernel, case.d, 1)


def theta(case: Case, M: int) -> float:
    """Theorem 2's asymptotic count (elements, per head) for the case's algorithm."""
    if case.method == "standard":
        return model.theta_standard(case.N, case.d)
    return model.theta_flash(case.N, case.d, M)


def run(ctx: RunContext) -> list[dict]:
    pairs = _sweeps(ctx)
    cases = list(dict.fromkeys(case for _, case in pairs))
    measured = measure_traffic(ctx, NAME, cases)
    rows = []
    for sweep, case in pairs:
        prediction = model.predict_case(case)
        tiling = model.effective_tiling(case)
        M = sram_elements(case)
        got = measured[case]
        row = {
            "sweep": sweep, "method": case.method, "passes": case.passes,
            "B": case.B, "H": case.H, "N": case.N, "d": case.d, "Br": tiling.Br, "Bc": tiling.Bc,
            "M_elements": M, "quantity": "HBM read+write", "unit": "bytes",
            "measured": got.total_bytes if isinstance(got, MeasuredTraffic) else None,
            "measured_by": got.measured_by if isinstance(got, MeasuredTraffic) else None,
            "predicted": prediction.total_bytes,
            "predicted_read": prediction.read_bytes, "predicted_write": prediction.write_bytes,
            "measured_read": got.read_bytes if isinstance(got, MeasuredTraffic) else None,
            "measured_write": got.write_bytes if isinstance(got, MeasuredTraffic) else None,
            "dram_measured": got.dram_bytes if isinstance(got, MeasuredTraffic) else None,
            "theta_elements_per_head": theta(case, M),
            "prop3_lower_bound_bytes": (case.B * case.H * 4 * model.lower_bound(case.N, case.d, M)
                                        if case.method != "standard" else None),
            "note": got if isinstance(got, str) else "",
        }
        rows.append(row)
    _scale_theta(rows)
    return rows


def _scale_theta(rows: list[dict]) -> None:
    """``theta_fit``: the Theta count times the constant (geometric mean of predicted / Theta
    over the sweep) that puts it through the predicted points."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["sweep"], row["method"]), []).append(row)
    for group in groups.values():
        ratios = [r["predicted"] / (r["theta_elements_per_head"] * r["B"] * r["H"]) for r in group]
        constant = math.exp(float(np.mean(np.log(ratios))))
        for r in group:
            r["theta_fit_bytes"] = constant * r["theta_elements_per_head"] * r["B"] * r["H"]


AXES = {"N": ("sequence length N", "N"), "d": ("head dimension d", "d"),
        "M": ("SRAM size M (elements)", "M_elements")}


def plot(rows: list[dict], path) -> None:
    fig, axes = plotting.figure(3, title="Theorem 2: HBM traffic of the forward pass (fp32)")
    colors = {"standard": "C3", "fa2": "C0", "fa1": "C2"}
    for ax, (sweep, (xlabel, key)) in zip(axes, AXES.items()):
        for method in ("standard", "fa2", "fa1"):
            pts = sorted((r for r in rows if r["sweep"] == sweep and r["method"] == method), key=lambda r: r[key])
            if not pts:
                continue
            x = [r[key] for r in pts]
            c = colors[method]
            ax.plot(x, [r["predicted"] for r in pts], color=c, label=f"{method} predicted", **plotting.PREDICTED)
            ax.plot(x, [r["theta_fit_bytes"] for r in pts], color=c, alpha=0.5, linestyle=":",
                    label=f"{method} Θ ({'Nd+N²' if method == 'standard' else 'N²d²/M'})")
            meas = [(xi, r["measured"]) for xi, r in zip(x, pts) if r["measured"] is not None]
            if meas:
                ax.plot(*zip(*meas), color=c, label=f"{method} measured", **plotting.MEASURED)
            bound = [(xi, r["prop3_lower_bound_bytes"]) for xi, r in zip(x, pts) if r["prop3_lower_bound_bytes"]]
            if sweep == "M" and bound:
                ax.plot(*zip(*bound), label="Prop. 3 bound N²d²/M", **plotting.BOUND)
        plotting.finish(ax, xlabel, "HBM read + write (bytes)", loglog=True, title=f"vs {sweep}")
    by = {r["measured_by"] for r in rows if r.get("measured_by")}
    plotting.save(fig, path, footnote="measured: " + (", ".join(sorted(by)) or "none (see CSV note)")
                  + "; Θ curves scaled through the predicted points")
