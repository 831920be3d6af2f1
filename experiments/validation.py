"""Validation: every measured/predicted pair of the other experiments, on one log-log y = x plot.

Reads the CSVs the other experiments left in the results folder, keeps the rows with both a
measured and a predicted number (``measured``, ``predicted`` columns), and reports per
(experiment, quantity) and over all pairs, the way Accel-Sim validates a simulator against
hardware: mean absolute percentage error (MAPE, relative to the measured value), Pearson
correlation, and how many pairs lie within 10 %.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from experiments import EXPERIMENTS
from experiments.common import plotting
from experiments.common.context import RunContext
from experiments.common.results import number, read_rows

NAME = "validation"
WITHIN = 0.10


@dataclass(frozen=True)
class Summary:
    pairs: int
    mape_percent: float
    correlation: float        # Pearson, NaN for fewer than two pairs or constant values
    within_10_percent: int


def summarize(measured: list[float], predicted: list[float]) -> Summary:
    """Error metrics of predicted against measured (the reference)."""
    m, p = np.asarray(measured, dtype=float), np.asarray(predicted, dtype=float)
    if m.size == 0:
        return Summary(0, math.nan, math.nan, 0)
    relative = np.abs(p - m) / np.abs(m)
    correlation = math.nan
    if m.size >= 2 and np.std(m) > 0 and np.std(p) > 0:
        correlation = float(np.corrcoef(m, p)[0, 1])
    return Summary(int(m.size), float(100 * relative.mean()), correlation, int((relative <= WITHIN).sum()))


def collect_pairs(ctx: RunContext) -> list[dict]:
    """(experiment, quantity, measured_by, measured, predicted) of every usable row found."""
    pairs = []
    for name in EXPERIMENTS:
        path = ctx.out / name / f"{name}.csv"
        if name == NAME or not path.exists():
            continue
        for row in read_rows(path):
            measured, predicted = number(row.get("measured")), number(row.get("predicted"))
            if measured and predicted and measured > 0 and predicted > 0:
                pairs.append({"experiment": name, "quantity": row["quantity"], "unit": row.get("unit", ""),
                              "measured_by": row.get("measured_by", ""), "measured": measured,
                              "predicted": predicted})
    return pairs


def run(ctx: RunContext) -> list[dict]:
    pairs = collect_pairs(ctx)
    groups: dict[tuple, list[dict]] = {}
    for pair in pairs:
        groups.setdefault((pair["experiment"], pair["quantity"], pair["measured_by"]), []).append(pair)
    rows = []
    for (experiment, quantity, measured_by), members in [*groups.items(), (("all", "all", ""), pairs)]:
        s = summarize([m["measured"] for m in members], [m["predicted"] for m in members])
        rows.append({"row": "summary", "source": experiment, "quantity": quantity, "measured_by": measured_by,
                     "pairs": s.pairs, "mape_percent": s.mape_percent, "correlation": s.correlation,
                     "within_10_percent": s.within_10_percent})
    rows += [{"row": "pair", "source": p["experiment"], "quantity": p["quantity"], "measured_by": p["measured_by"],
              "unit": p["unit"], "pair_measured": p["measured"], "pair_predicted": p["predicted"]} for p in pairs]
    if not pairs:
        rows[-1]["note"] = "no measured/predicted pairs found: run the other experiments into the same --out first"
        print(f"  {rows[-1]['note']}")
    for r in rows:
        if r["row"] == "summary":
            print(f"  {r['source']:12s} {r['quantity'][:34]:34s} n={r['pairs']:3d}  MAPE {r['mape_percent']:8.2f} %  "
                  f"r={r['correlation']:.4f}  within 10 %: {r['within_10_percent']}")
    return rows


def plot(rows: list[dict], path) -> None:
    pairs = [r for r in rows if r["row"] == "pair"]
    overall = next(r for r in rows if r["row"] == "summary" and r["source"] == "all")
    fig, (ax,) = plotting.figure(1, title="Predicted vs measured, all experiments")
    if not pairs:
        plotting.annotate_empty(ax, "no measured/predicted pairs in this results folder")
        plotting.save(fig, path)
        return
    keys = list(dict.fromkeys((p["source"], p["quantity"]) for p in pairs))
    markers = "osD^v<>ph*"
    for i, key in enumerate(keys):
        mine = [p for p in pairs if (p["source"], p["quantity"]) == key]
        s = next(r for r in rows if r["row"] == "summary" and (r["source"], r["quantity"]) == key)
        ax.plot([p["pair_predicted"] for p in mine], [p["pair_measured"] for p in mine], linestyle="none",
                marker=markers[i % len(markers)], markerfacecolor="none", color=f"C{i % 10}",
                label=f"{key[0]}: {key[1]} (MAPE {s['mape_percent']:.1f} %)")
    values = [v for p in pairs for v in (p["pair_measured"], p["pair_predicted"])]
    lo, hi = min(values) / 2, max(values) * 2
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=1, label="y = x")
    for f in (1 - WITHIN, 1 + WITHIN):
        ax.plot([lo, hi], [lo * f, hi * f], color="0.5", linewidth=0.8, linestyle=":")
    plotting.finish(ax, "predicted (bytes, ms, ... as the quantity's unit)", "measured (same unit)", loglog=True)
    ax.legend(fontsize=6, loc="upper left")
    corr = overall["correlation"]
    plotting.save(fig, path, footnote=f"all {overall['pairs']} pairs: MAPE {overall['mape_percent']:.2f} %, "
                  f"correlation {corr:.4f}, within 10 %: {overall['within_10_percent']}; dotted: ±10 %")
