"""Matplotlib (Agg) helpers: measured points are markers without lines, predictions are lines."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

#: Keyword styles: measured values are open markers, predictions are lines (dashed for bounds).
MEASURED = dict(linestyle="none", marker="o", markersize=6, markerfacecolor="none", markeredgewidth=1.5)
PREDICTED = dict(linestyle="-", marker="", linewidth=1.5)
BOUND = dict(linestyle="--", marker="", linewidth=1.2, color="0.4")


def figure(ncols: int = 1, nrows: int = 1, title: str = ""):
    """A figure with ``nrows x ncols`` axes (always a flat list)."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 4.2 * nrows), squeeze=False)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig, [ax for row in axes for ax in row]


def annotate_empty(ax, message: str) -> None:
    """Say on the axes why they hold no data."""
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, fontsize=9, wrap=True)


def finish(ax, xlabel: str, ylabel: str, *, loglog: bool = False, logx: bool = False, title: str = "") -> None:
    """Label the axes, set log scales, add a grid and (when there are labelled lines) a legend."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if loglog or logx:
        ax.set_xscale("log")
    if loglog:
        ax.set_yscale("log")
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def save(fig, path: Path, footnote: str = "") -> None:
    """Write the PNG (with an optional footnote under the axes) and close the figure."""
    if footnote:
        fig.text(0.01, 0.005, footnote, fontsize=7, va="bottom", ha="left", wrap=True)
    fig.tight_layout(rect=(0, 0.05 if footnote else 0, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def measured_and_predicted(ax, x, pts: list[dict], predicted_key: str, measured_key: str, color,
                           name: str) -> None:
    """One series of rows against ``x``: the prediction as a line, the measurement as markers
    (each only at the points that have it)."""
    pred = [(xi, r[predicted_key]) for xi, r in zip(x, pts) if r.get(predicted_key) is not None]
    if pred:
        ax.plot(*zip(*pred), color=color, label=f"{name} predicted", **PREDICTED)
    meas = [(xi, r[measured_key]) for xi, r in zip(x, pts) if r.get(measured_key) is not None]
    if meas:
        ax.plot(*zip(*meas), color=color, label=f"{name} measured", **MEASURED)
