"""Provenance columns written into every CSV row: device, date, versions, command."""
from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path
from importlib import metadata as importlib_metadata

#: Columns every row of every CSV carries, in this order, after the experiment's own columns.
METADATA_COLUMNS = ("experiment", "device", "date", "python", "numpy", "numba", "numba_cuda",
                    "torch", "commit", "command", "note")
#: Set on machines whose copy of the tree has no .git (the GPU machine): the commit it holds.
COMMIT_ENV = "NUMBA_FLASH_COMMIT"


def _version(distribution: str) -> str:
    try:
        return importlib_metadata.version(distribution)
    except importlib_metadata.PackageNotFoundError:
        return "not installed"


def device_name(device: str) -> str:
    """The GPU's name in gpu mode; in cpu mode, the host CPU and the fact that no GPU ran."""
    if device == "gpu":
        from numba import cuda

        name = cuda.get_current_device().name
        return name.decode() if isinstance(name, bytes) else str(name)
    cpu = platform.processor() or platform.machine()
    return f"cpu {cpu} (no GPU: model + CUDA simulator)"


def commit() -> str:
    """The measured code's commit: $NUMBA_FLASH_COMMIT, else git's HEAD (with "+changes" when
    the tree differs from it), else "unknown"."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def run_metadata(experiment: str, device: str, command: str) -> dict[str, str]:
    """The metadata of one experiment's run (``note`` is filled per row)."""
    return {
        "experiment": experiment,
        "device": device_name(device),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "numba": _version("numba"),
        "numba_cuda": _version("numba-cuda"),
        "torch": _version("torch"),
        "commit": commit(),
        "command": command,
        "note": "",
    }
