"""Merge a device call's per-split raw counters into a card's committed levels table.

    python tools/merge_levels.py RUN_DIR TAG [CARD]

RUN_DIR: the files a call of ``tools/gpu_levels.sh`` brought back, its ``levels.tgz`` unpacked
(``<split>/levels_kernels_<split>.csv``, ``experiments.levels.measure_alone``'s rows); CARD: ``h200`` (default) or
``h100``. The cases RUN_DIR measured replace their rows in ``results/CARD/levels/
levels_kernels.csv``; the cases it did not measure keep theirs (each row names the device,
date and commit it was measured on); the table as it was is kept beside it as
``levels_kernels_before_TAG.csv``. Re-predict afterwards:
``python -m experiments run levels validation --device cpu --out OUT`` on a copy of
``results/CARD``.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from experiments.common.results import read_rows, write_rows
from experiments.levels import split_rows


def merge(run_dir: Path, tag: str, card: str = "h200") -> tuple[int, int]:
    """(cases measured in ``run_dir``, cases kept from the table) after merging (module doc)."""
    dest = Path("results") / card / "levels" / "levels_kernels.csv"
    old = read_rows(dest)
    new = split_rows(run_dir)
    measured = {r["case"] for r in new}
    kept = [r for r in old if r["case"] not in measured]
    shutil.copy(dest, dest.with_name(f"levels_kernels_before_{tag}.csv"))
    write_rows(dest, new + kept, {})       # every row carries its own measurement's metadata
    return len(measured), len({r["case"] for r in kept})


if __name__ == "__main__":
    measured, kept = merge(Path(sys.argv[1]), sys.argv[2], *(sys.argv[3:4] or ["h200"]))
    print(f"{measured} cases measured, {kept} kept from the table")
