"""Provenance columns written into every CSV row: device, date, versions, command."""
from __future__ import annotations

import datetime
import platform
from importlib import metadata as importlib_metadata

#: Columns every row of every CSV carries, in this order, after the experiment's own columns.
METADATA_COLUMNS = ("experiment", "device", "date", "python", "numpy", "numba", "numba_cuda",
                    "torch", "command", "note")


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
        "command": command,
        "note": "",
    }
