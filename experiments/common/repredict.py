"""CPU mode over a GPU run's results: its measurements kept, its predictions made again.

An experiment whose GPU run writes measured beside predicted rows (runtime, fig2_middle,
fig2_left, io_scaling, l2_effect) asks ``gpu_run(ctx, name)`` in CPU mode whether
``<out>/<name>/<name>.csv`` holds such a run (a row with a measured number, measured on a GPU);
if so, ``repredict`` gives that run's rows back with the model's columns recomputed by the
experiment's own prediction code, every other column as the GPU run wrote it, and the
measurement's device, date and commit in
``measured_device`` / ``measured_date`` / ``measured_commit`` (as ``experiments.levels``
does with its ``levels_kernels.csv``).  The rows' metadata columns then describe the CPU run,
so the model can change without a GPU and its errors be read again.  A CSV already rewritten
so is a GPU run still: its ``measured_*`` columns name the measurement.
"""
from __future__ import annotations

from collections.abc import Callable

from .context import RunContext
from .metadata import METADATA_COLUMNS
from .results import number, read_rows

#: The metadata of the measurement that a re-predicted row keeps, as ``measured_<key>``.
MEASUREMENT_KEYS = ("device", "date", "commit")


def measurement(row: dict[str, str]) -> dict[str, str]:
    """``measured_device`` / ``_date`` / ``_commit`` of a CSV row: its own where it was
    re-predicted before, else its run's ``device`` / ``date`` / ``commit``."""
    return {f"measured_{k}": row.get(f"measured_{k}") or row.get(k, "") for k in MEASUREMENT_KEYS}


def is_gpu(device: str) -> bool:
    """Whether a CSV's ``device`` names a GPU (a CPU run's reads ``cpu ... (no GPU: ...)``)."""
    return bool(device) and not device.startswith("cpu") and "no GPU" not in device


def gpu_run(ctx: RunContext, name: str) -> list[dict[str, str]] | None:
    """The rows of ``<out>/<name>/<name>.csv`` when they are a GPU run's (some row has a
    measured value and was measured on a GPU); else None (no file, or a CPU run's)."""
    path = ctx.out / name / f"{name}.csv"
    if not path.is_file():
        return None
    rows = read_rows(path)
    if any(number(r.get("measured")) is not None and is_gpu(measurement(r)["measured_device"]) for r in rows):
        return rows
    return None


def value(cell: str):
    """A CSV cell back as the experiment wrote it: "" None, True / False, an int, a float, or
    the string (``write_rows`` writes floats by repr, so they come back exact)."""
    if cell in ("", None):
        return None
    if cell in ("True", "False"):
        return cell == "True"
    for kind in (int, float):
        try:
            return kind(cell)
        except ValueError:
            pass
    return cell


#: Columns kept as text whatever they hold.
TEXT_COLUMNS = ("note", "measured_by")


def repredict(name: str, rows: list[dict[str, str]], predict: Callable[[dict], dict],
              columns: tuple[str, ...]) -> list[dict]:
    """The GPU run's ``rows`` (as read from its CSV) with ``columns`` made again: each row's
    cells typed back (``value``), its old metadata dropped (its ``note`` kept: it says what
    became of the measurement), ``columns`` emptied then filled by ``predict(row)`` (a dict of
    some of them; {} where the model makes no prediction, as the GPU run would have left them),
    and the measurement's metadata in ``measured_*`` columns, which ``predict`` sees (the card
    to predict for: ``model.card_of``)."""
    out = []
    for raw in rows:
        row = {k: (v if k in TEXT_COLUMNS else value(v)) for k, v in raw.items()
               if k not in METADATA_COLUMNS or k == "note"}
        row.update(dict.fromkeys(columns))
        row.update(measurement(raw))
        row.update(predict(row))
        out.append(row)
    runs = sorted({" ".join(measurement(r).values()) for r in rows})
    print(f"  {name}: {len(out)} rows of the GPU run ({'; '.join(runs)}) predicted again by this model")
    return out
