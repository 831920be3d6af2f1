"""Validation: every measured/predicted pair, per memory level x kernel, and Theorem 2's exponents.

Reads the CSVs the other experiments left in the results folder (``<out>/<name>/<name>.csv``),
keeps the rows with both a measured and a predicted number, and reports, the way Accel-Sim
validates a simulator against hardware:

* **Errors** per (experiment, quantity, kernel, measured_by), per (level, kernel) over all
  experiments, and over everything: pairs, MAPE, median and max absolute percentage error
  (relative to the measured value), Pearson correlation, pairs within 10 %.  A *level* is where
  the bytes were counted (``sm_l2_bytes``: SM<->L2 read + write; ``dram_bytes``; the ``levels``
  experiment's own names such as ``sm_l2_read_bytes``) or ``time_s`` / ``peak_memory_bytes``.
  A *kernel* is the ``kernel`` column, else method and passes ("fa2 fwd"), else "all".
  Fractions (``l1_hit_rate``) get the mean absolute error in percentage points (``mae_points``)
  instead: a percentage of a measured 0 means nothing.  Other pairs measured as 0 are counted in
  ``skipped_zero`` and left out of the percentages.  The ``levels`` experiment marks each
  configuration ``split`` = "development" (what the model was tuned on) or "validation" (held
  out); only held-out rows enter the headline summaries, the development rows are summarised
  apart (``split`` = "development" on their rows).
* **Exponents** of traffic in N, d and M from every sweep (``io_scaling``, and ``levels`` when
  it has a ``sweep`` column): log y = a + b log x by least squares, b with its 95 % interval
  (t distribution, points - 2 degrees of freedom), for the measured bytes, the model's exact
  count and, where the CSV has it, Theorem 2's leading-order form -- beside the theorem's own
  exponent.  FlashAttention: Theta(N^2 d^2 / M), so N: 2, d: 2, M: -1 (Theorem 5 for the
  backward, the same).  Standard attention: Theta(N d + N^2), so N: 2; no single power of d.
  The theorem is asymptotic (N >> d, M >> d) and our small sweeps keep lower-order terms, so the
  model's count is the fair reference for the measured slope; where a sweep has 5 or more sizes
  its upper half is fitted too (``fit_range`` = "upper half").

Rows: ``row`` = "summary" (``scope`` "group", "level x kernel" or "overall"), "exponent" or "pair".
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from experiments import EXPERIMENTS
from experiments.common import plotting
from experiments.common.context import RunContext
from experiments.common.results import number, read_rows
from simulator.levels import LEVEL_NAMES  # the levels experiment's quantities, levels themselves

NAME = "validation"
WITHIN = 0.10
CONFIDENCE = 0.95
#: Fewest distinct sizes a power law is fitted through (two leave no degree of freedom).
MIN_POINTS = 3
LEVELS = "levels"
DEVELOPMENT = "development"
#: Quantities that are fractions in [0, 1] (or percent when the unit says so).
FRACTIONS = {"l1_hit_rate"}
#: Sweep name -> the CSV column that is swept.
SWEEP_X = {"N": "N", "d": "d", "M": "M_elements"}
#: Workload columns held fixed within one sweep (besides the swept one's partners).
FIXED = ("B", "H", "causal", "N", "d")
#: Levels whose bytes Theorem 2 (Theorem 5 backward) bounds: the global-memory accesses the
#: kernels issue, i.e. SM<->L2 (reads carry the K/V re-reads; FA2's writes are Theta(N d)).
THEOREM_LEVELS = ("sm_l2_bytes", "sm_l2_read_bytes")
FLASH_EXPONENTS = {"N": 2.0, "d": 2.0, "M": -1.0}
FA2_ORDER_PREFIXES = ("fa2", "flash_forward_v2", "flash_forward_tc")


# ---- pairs ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pair:
    experiment: str
    quantity: str
    unit: str
    level: str
    kernel: str
    measured_by: str
    split: str          # "validation" / "development" for levels rows, "" for the others
    measured: float
    predicted: float

    @property
    def fraction(self) -> bool:
        return self.quantity in FRACTIONS


def kernel_of(row: dict) -> str:
    """The ``kernel`` column; else method (or runtime's implementation) and passes; else "all"."""
    if row.get("kernel"):
        return row["kernel"]
    method = row.get("method") or (row.get("implementation") or "").removeprefix("ours ")
    if not method:
        return "all"
    return f"{method} {row['passes']}" if row.get("passes") else method


def level_of(quantity: str, measured_by: str) -> str:
    """Where a quantity was counted: the levels experiment's names as they are; SM<->L2 and DRAM
    bytes (read + write) of the other experiments; their runtimes and peak memory."""
    if quantity in LEVEL_NAMES:
        return quantity
    q, by = quantity.lower(), measured_by.lower()
    if "dram" in q:
        return "dram_bytes"
    if "sm<->l2" in q:
        return "sm_l2_bytes"
    if "dram" in by:
        return "dram_bytes"
    if "sm<->l2" in by or "crossbar" in by or "count_traffic" in by:
        return "sm_l2_bytes"
    if "runtime" in q or "cuda events" in by:
        return "time_s"
    if "peak" in q and "memory" in q:
        return "peak_memory_bytes"
    return quantity


def result_tables(ctx: RunContext) -> dict[str, list[dict]]:
    """Every ``<out>/<name>/<name>.csv`` but this experiment's: registry order, then the rest."""
    found = sorted(p.name for p in ctx.out.iterdir() if (p / f"{p.name}.csv").is_file()) if ctx.out.is_dir() else []
    names = [n for n in EXPERIMENTS if n in found] + [n for n in found if n not in EXPERIMENTS]
    return {name: read_rows(ctx.out / name / f"{name}.csv") for name in names if name != NAME}


def collect_pairs(tables: dict[str, list[dict]]) -> list[Pair]:
    """The rows with both numbers (a missing, empty or NaN one drops the row)."""
    pairs = []
    for name, rows in tables.items():
        for row in rows:
            measured, predicted = number(row.get("measured")), number(row.get("predicted"))
            if measured is None or predicted is None:
                continue
            quantity, by = row.get("quantity", ""), row.get("measured_by", "")
            pairs.append(Pair(name, quantity, row.get("unit", ""), level_of(quantity, by), kernel_of(row), by,
                              row.get("split", "") if name == LEVELS else "", measured, predicted))
    return pairs


# ---- error metrics ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Summary:
    pairs: int                  # every pair given, zeros and fractions included
    mape_percent: float         # mean |p - m| / |m| over the pairs that are not fractions, m != 0
    correlation: float          # Pearson over all pairs; NaN for fewer than two or constant values
    within_10_percent: int | None  # None when no pair has a percentage error
    median_ape_percent: float = math.nan
    max_ape_percent: float = math.nan
    skipped_zero: int = 0       # measured 0 (not fractions): no percentage error
    mae_points: float = math.nan  # mean |p - m| of the fractions, in percentage points


def summarize(measured: list[float], predicted: list[float], fraction: list[bool] | None = None) -> Summary:
    """Error metrics of predicted against measured (the reference).  ``fraction`` marks pairs
    that are fractions in [0, 1]; they get ``mae_points`` instead of a percentage error."""
    m, p = np.asarray(measured, dtype=float), np.asarray(predicted, dtype=float)
    if m.size == 0:
        return Summary(0, math.nan, math.nan, None)
    frac = np.zeros(m.size, bool) if fraction is None else np.asarray(fraction, dtype=bool)
    zero = ~frac & (m == 0)
    ape = ~frac & ~zero
    relative = np.abs(p[ape] - m[ape]) / np.abs(m[ape])
    correlation = math.nan
    if m.size >= 2 and np.std(m) > 0 and np.std(p) > 0:
        correlation = float(np.corrcoef(m, p)[0, 1])
    return Summary(
        pairs=int(m.size), correlation=correlation,
        mape_percent=float(100 * relative.mean()) if relative.size else math.nan,
        median_ape_percent=float(100 * np.median(relative)) if relative.size else math.nan,
        max_ape_percent=float(100 * relative.max()) if relative.size else math.nan,
        within_10_percent=int((relative <= WITHIN).sum()) if relative.size else None,
        skipped_zero=int(zero.sum()),
        mae_points=float(100 * np.abs(p[frac] - m[frac]).mean()) if frac.any() else math.nan)


def _as_fraction(pair: Pair, value: float) -> float:
    return value / 100 if pair.fraction and pair.unit.strip() in ("%", "percent") else value


def summarize_pairs(pairs: list[Pair]) -> Summary:
    return summarize([_as_fraction(p, p.measured) for p in pairs], [_as_fraction(p, p.predicted) for p in pairs],
                     [p.fraction for p in pairs])


def _grouped(pairs: list[Pair], key) -> dict[tuple, list[Pair]]:
    groups: dict[tuple, list[Pair]] = {}
    for pair in pairs:
        groups.setdefault(key(pair), []).append(pair)
    return groups


def summary_rows(pairs: list[Pair]) -> list[dict]:
    """Per group, per level x kernel and overall for the held-out pairs; then the development
    pairs of ``levels`` per group and overall."""
    headline = [p for p in pairs if p.split != DEVELOPMENT]
    development = [p for p in pairs if p.split == DEVELOPMENT]

    def row(scope, members, **labels):
        units = {m.unit for m in members}
        return {"row": "summary", "scope": scope, **labels, "unit": units.pop() if len(units) == 1 else "",
                **asdict(summarize_pairs(members))}

    def groups(members):
        return [row("group", g, source=e, level=g[0].level, quantity=q, kernel=k, measured_by=by, split=s)
                for (e, q, k, by, s), g in _grouped(
                    members, lambda p: (p.experiment, p.quantity, p.kernel, p.measured_by, p.split)).items()]

    rows = groups(headline)
    rows += [row("level x kernel", g, source="all experiments", level=level, quantity="", kernel=kernel,
                 measured_by="", split="")
             for (level, kernel), g in sorted(_grouped(headline, lambda p: (p.level, p.kernel)).items())]
    rows.append(row("overall", headline, source="all", level="all", quantity="all", kernel="all", measured_by="",
                    split=""))
    if development:
        rows += groups(development)
        rows.append(row("overall", development, source=LEVELS, level="all", quantity="all", kernel="all",
                        measured_by="", split=DEVELOPMENT))
    return rows


# ---- exponents --------------------------------------------------------------------------------
@dataclass(frozen=True)
class PowerFit:
    """y = a x^b fitted as log y = log a + b log x; ``low``/``high``: b's confidence interval."""

    points: int
    exponent: float
    low: float
    high: float

    def contains(self, value: float) -> bool:
        tolerance = 1e-9 * max(1.0, abs(value))
        return self.low - tolerance <= value <= self.high + tolerance


def fit_power_law(x, y, confidence: float = CONFIDENCE) -> PowerFit | None:
    """Least-squares slope of log y on log x with its ``confidence`` interval; None with fewer
    than MIN_POINTS distinct x or any value missing or <= 0."""
    from scipy import stats

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if np.unique(x).size < MIN_POINTS or not (np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)).all():
        return None
    fit = stats.linregress(np.log(x), np.log(y))
    half = float(stats.t.ppf(0.5 + confidence / 2, x.size - 2) * fit.stderr)
    return PowerFit(int(x.size), float(fit.slope), float(fit.slope - half), float(fit.slope + half))


def theorem_exponent(kernel: str, level: str, sweep: str) -> tuple[float | None, str, str]:
    """(exponent, theorem, caveat) the paper gives for this kernel's traffic in ``sweep``."""
    if level not in THEOREM_LEVELS:
        return None, "", ""
    if kernel.startswith("standard"):
        if sweep == "N":
            return 2.0, "Theorem 2: Theta(Nd + N^2)", ""
        return None, "Theorem 2: Theta(Nd + N^2)", (
            "no single power of d (-> 0 for N >> d); our tiled matmuls add N^2 d / 64 terms" if sweep == "d" else "")
    if not kernel.startswith(("fa", "flash")):
        return None, "", ""
    backward = "bwd" in kernel or "backward" in kernel
    theorem = ("Theorem 5" if backward else "Theorem 2") + ": Theta(N^2 d^2 / M)"
    caveat = ""
    if sweep == "M" and not backward and kernel.startswith(FA2_ORDER_PREFIXES):
        caveat = "FA2 order: N^2 d^2 / M only while M <= 4 d^2, flat beyond (simulator.closed_forms)"
    return FLASH_EXPONENTS[sweep], theorem, caveat


def _sweep_groups(tables: dict[str, list[dict]]) -> dict[tuple, list[dict]]:
    """Rows of every swept table by (source, kernel, quantity, sweep, fixed workload)."""
    groups: dict[tuple, list[dict]] = {}
    for name, rows in tables.items():
        for row in rows:
            sweep = row.get("sweep", "")
            if sweep not in SWEEP_X or row.get("quantity", "") in FRACTIONS or number(row.get(SWEEP_X[sweep])) is None:
                continue
            held = [c for c in FIXED if c != SWEEP_X[sweep] and row.get(c, "") != ""]
            fixed = " ".join(f"{c}={row[c]}" for c in held)
            key = (name, kernel_of(row), row.get("quantity", ""), sweep, fixed)
            groups.setdefault(key, []).append(row)
    return groups


def _ranges(xs: list[float]) -> list[tuple[str, float]]:
    """("all", smallest x) and, with 5 or more distinct x, ("upper half", the median x)."""
    distinct = sorted(set(xs))
    ranges = [("all", distinct[0])]
    upper = [x for x in distinct if x >= distinct[len(distinct) // 2]]
    if MIN_POINTS <= len(upper) < len(distinct):
        ranges.append(("upper half", upper[0]))
    return ranges


def exponent_rows(tables: dict[str, list[dict]]) -> list[dict]:
    """One row per sweep (and its upper half, see ``_ranges``): the fitted exponents of the
    measured bytes, of the model's count (on the same sizes) and of the leading-order form, and
    the theorem's.  A sweep measured at fewer than MIN_POINTS sizes gets the model's fit alone."""
    rows = []
    for (source, kernel, quantity, sweep, fixed), members in _sweep_groups(tables).items():
        xcol = SWEEP_X[sweep]
        paired = [r for r in members if number(r.get("measured")) and number(r.get("predicted"))]
        measured_sizes = len({number(r[xcol]) for r in paired})
        points = paired if measured_sizes >= MIN_POINTS else [r for r in members if number(r.get("predicted"))]
        if len({number(r[xcol]) for r in points}) < MIN_POINTS:
            continue
        level = level_of(quantity, next((r["measured_by"] for r in members if r.get("measured_by")), ""))
        theorem = theorem_exponent(kernel, level, sweep)
        columns = {"measured": "measured", "predicted": "predicted", "leading_order": "theorem2_bytes"}
        if points is not paired:
            del columns["measured"]
        for fit_range, x_from in _ranges([number(r[xcol]) for r in points]):
            chosen = [r for r in points if number(r[xcol]) >= x_from]
            x = [number(r[xcol]) for r in chosen]
            fits = {series: fit_power_law(x, [number(r.get(column)) or math.nan for r in chosen])
                    for series, column in columns.items()}
            labels = {"source": source, "kernel": kernel, "quantity": quantity, "level": level, "sweep": sweep,
                      "x": xcol, "fit_range": fit_range, "fixed": fixed, "points": len(x), "x_min": min(x),
                      "x_max": max(x)}
            row = _exponent_row(labels, fits, *theorem)
            if "measured" not in columns:
                alone = f"measured at {measured_sizes} sizes, fewer than {MIN_POINTS}: the model fitted alone"
                row["note"] = "; ".join(filter(None, [alone, row["note"]]))
            rows.append(row)
    return rows


def _exponent_row(labels: dict, fits: dict[str, PowerFit | None], theorem_value: float | None, theorem: str,
                  caveat: str) -> dict:
    measured, predicted, leading = (fits.get(k) for k in ("measured", "predicted", "leading_order"))
    notes = []
    if measured and theorem_value is not None and not measured.contains(theorem_value):
        note = f"theorem's {theorem_value:g} outside the measured interval"
        if predicted:
            note += f"; the model's count gives {predicted.exponent:.3f}"
        if leading:
            note += f", the leading-order form {leading.exponent:.3f}"
        notes.append(note)
    if caveat:
        notes.append(caveat)

    def fitted(fit, prefix):
        return {prefix: fit.exponent if fit else None, f"{prefix}_low": fit.low if fit else None,
                f"{prefix}_high": fit.high if fit else None}

    return {
        "row": "exponent", **labels, **fitted(measured, "exponent_measured"), **fitted(predicted, "exponent_predicted"),
        "exponent_leading_order": leading.exponent if leading else None,
        "theorem": theorem, "theorem_exponent": theorem_value,
        "theorem_inside": measured.contains(theorem_value) if measured and theorem_value is not None else None,
        "predicted_inside": measured.contains(predicted.exponent) if measured and predicted else None,
        "note": "; ".join(notes),
    }


# ---- the experiment ---------------------------------------------------------------------------
def run(ctx: RunContext) -> list[dict]:
    tables = result_tables(ctx)
    pairs = collect_pairs(tables)
    rows = summary_rows(pairs) + exponent_rows(tables)
    rows += [{"row": "pair", "source": p.experiment, "quantity": p.quantity, "level": p.level, "kernel": p.kernel,
              "measured_by": p.measured_by, "split": p.split, "unit": p.unit, "pair_measured": p.measured,
              "pair_predicted": p.predicted} for p in pairs]
    if not pairs:
        overall = next(r for r in rows if r["row"] == "summary" and r["scope"] == "overall")
        overall["note"] = "no measured/predicted pairs found: run the other experiments into the same --out first"
        print(f"  {overall['note']}")
    _print_summaries([r for r in rows if r["row"] == "summary"])
    _print_exponents([r for r in rows if r["row"] == "exponent"])
    return rows


def _f(value, spec: str, width: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-".rjust(width)
    return format(value, spec).rjust(width)


def _print_summaries(rows: list[dict]) -> None:
    header = (f"  {'source':15s} {'quantity / level':34s} {'kernel':20s} {'n':>4s} {'zero':>4s} {'MAPE %':>8s} "
              f"{'median %':>8s} {'max %':>8s} {'r':>7s} {'<=10%':>5s} {'MAE pts':>7s}")
    for title, wanted in (("errors per experiment x quantity x kernel (held-out rows)",
                           lambda r: r["scope"] == "group" and r["split"] != DEVELOPMENT),
                          ("errors per level x kernel, all experiments", lambda r: r["scope"] != "group"
                           and r["split"] != DEVELOPMENT),
                          ("levels: DEVELOPMENT configurations (the model was tuned on these; not in the above)",
                           lambda r: r["split"] == DEVELOPMENT)):
        mine = [r for r in rows if wanted(r)]
        if not mine:
            continue
        print(f"  -- {title}\n{header}")
        for r in mine:
            label = r["quantity"] if r["scope"] == "group" else r["level"]
            print(f"  {r['source'][:15]:15s} {label[:34]:34s} {r['kernel'][:20]:20s} {r['pairs']:4d} "
                  f"{r['skipped_zero']:4d} {_f(r['mape_percent'], '.2f', 8)} {_f(r['median_ape_percent'], '.2f', 8)} "
                  f"{_f(r['max_ape_percent'], '.2f', 8)} {_f(r['correlation'], '.4f', 7)} "
                  f"{_f(r['within_10_percent'], 'd', 5)} {_f(r['mae_points'], '.2f', 7)}")


def _print_exponents(rows: list[dict]) -> None:
    if not rows:
        return
    print(f"  -- exponents b of y ~ x^b, measured with its {100 * CONFIDENCE:.0f} % interval; the model's count; the"
          " leading-order form; the theorem's; inside: the theorem's (model in: the model's) within the interval")
    print(f"  {'source':10s} {'kernel':14s} {'quantity':16s} {'x':>3s} {'range':10s} {'n':>2s} "
          f"{'measured [interval]':>27s} {'model':>7s} {'leading':>7s} {'theorem':>7s} {'inside':>6s} {'model in':>8s}")
    for r in rows:
        interval = "-" if r["exponent_measured"] is None else (
            f"{r['exponent_measured']:.3f} [{r['exponent_measured_low']:.3f}, {r['exponent_measured_high']:.3f}]")
        inside, model_in = ({True: "yes", False: "NO", None: "-"}[r[k]] for k in ("theorem_inside", "predicted_inside"))
        print(f"  {r['source'][:10]:10s} {r['kernel'][:14]:14s} {r['quantity'][:16]:16s} {r['sweep']:>3s} "
              f"{r['fit_range']:10s} {r['points']:2d} {interval:>27s} {_f(r['exponent_predicted'], '.3f', 7)} "
              f"{_f(r['exponent_leading_order'], '.3f', 7)} {_f(r['theorem_exponent'], 'g', 7)} "
              f"{inside:>6s} {model_in:>8s}"
              + (f"  ({r['note']})" if r["note"] else ""))


def plot(rows: list[dict], path) -> None:
    fig, (ax, ax_exp) = plotting.figure(2, title="Predicted vs measured per level x kernel; Theorem 2's exponents")
    overall = next(r for r in rows if r["row"] == "summary" and r["scope"] == "overall" and r["split"] != DEVELOPMENT)
    _plot_pairs(ax, rows)
    _plot_exponents(ax_exp, [r for r in rows if r["row"] == "exponent" and r["fit_range"] == "all"])
    footnote = (f"held-out pairs: {overall['pairs']}, MAPE {overall['mape_percent']:.2f} %, correlation "
                f"{overall['correlation']:.4f}, within 10 %: {overall['within_10_percent']}; dotted: ±10 %"
                if overall["pairs"] else "no measured/predicted pairs")
    plotting.save(fig, path, footnote=footnote)


def _plot_pairs(ax, rows: list[dict]) -> None:
    pairs = [r for r in rows if r["row"] == "pair" and r["split"] != DEVELOPMENT
             and r["pair_measured"] > 0 and r["pair_predicted"] > 0]
    if not pairs:
        plotting.annotate_empty(ax, "no positive measured/predicted pairs in this results folder")
        return
    from matplotlib.lines import Line2D

    levels = list(dict.fromkeys(p["level"] for p in pairs))
    kernels = list(dict.fromkeys(p["kernel"] for p in pairs))
    markers = "osD^v<>ph*XP"
    for p in pairs:
        ax.plot(p["pair_predicted"], p["pair_measured"], linestyle="none", markerfacecolor="none",
                marker=markers[kernels.index(p["kernel"]) % len(markers)], color=f"C{levels.index(p['level']) % 10}")
    values = [v for p in pairs for v in (p["pair_measured"], p["pair_predicted"])]
    lo, hi = min(values) / 2, max(values) * 2
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=1)
    for f in (1 - WITHIN, 1 + WITHIN):
        ax.plot([lo, hi], [lo * f, hi * f], color="0.5", linewidth=0.8, linestyle=":")
    plotting.finish(ax, "predicted (the quantity's unit)", "measured (same unit)", loglog=True,
                    title="colour: level, marker: kernel; line: y = x")
    handles = [Line2D([], [], color=f"C{i % 10}", linestyle="none", marker="s", label=level)
               for i, level in enumerate(levels)]
    handles += [Line2D([], [], color="0.3", linestyle="none", marker=markers[i % len(markers)],
                       markerfacecolor="none", label=kernel) for i, kernel in enumerate(kernels)]
    ax.legend(handles=handles, fontsize=6, loc="upper left", ncol=2)


def _plot_exponents(ax, rows: list[dict]) -> None:
    if not rows:
        plotting.annotate_empty(ax, "no sweep with 3 or more sizes in this results folder")
        return
    labels = []
    for i, r in enumerate(rows):
        labels.append(f"{r['kernel']} vs {r['sweep']}\n{r['quantity'][:20]} ({r['source']})")
        if r["exponent_measured"] is not None:
            b = r["exponent_measured"]
            ax.errorbar(i, b, yerr=[[b - r["exponent_measured_low"]], [r["exponent_measured_high"] - b]], fmt="o",
                        color="C0", markerfacecolor="none", capsize=3)
        if r["exponent_predicted"] is not None:
            ax.plot(i + 0.15, r["exponent_predicted"], "x", color="C1")
        if r["theorem_exponent"] is not None:
            ax.plot([i - 0.3, i + 0.3], [r["theorem_exponent"]] * 2, color="black", linewidth=1.5)
    ax.plot([], [], "o", color="C0", markerfacecolor="none", label="measured, 95 % interval")
    ax.plot([], [], "x", color="C1", label="model's count")
    ax.plot([], [], color="black", label="theorem")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, rotation=90, fontsize=6)
    plotting.finish(ax, "", "exponent b (traffic ~ x^b)", title="fitted exponents vs the theorem's")
