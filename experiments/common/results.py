"""CSV files of results: one row per point, the experiment's columns then the metadata columns.

Measured-against-predicted rows use the shared columns ``quantity``, ``unit``, ``measured``,
``predicted`` (and ``measured_by``), which is how :mod:`experiments.validation` finds them.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

from .metadata import METADATA_COLUMNS


def write_rows(path: Path, rows: list[dict], metadata: dict[str, str]) -> None:
    """Write ``rows`` to ``path``; each row gets the metadata (its own ``note`` wins if set)."""
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns and key not in METADATA_COLUMNS]
    columns += list(METADATA_COLUMNS)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            merged = {**metadata, **{k: v for k, v in row.items() if v is not None}}
            writer.writerow({key: _cell(merged.get(key, "")) for key in columns})


def _cell(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def number(cell) -> float | None:
    """A CSV cell as a float, or None when it is empty or not a number."""
    try:
        value = float(cell)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value
