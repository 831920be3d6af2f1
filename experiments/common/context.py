"""The run context every experiment receives, and the choice between GPU and CPU mode.

CPU mode means: no CUDA device (or ``NUMBA_ENABLE_CUDASIM=1``).  The model runs in full, the
kernels run only under Numba's CUDA simulator at tiny sizes (instrumented counts), and everything
that needs a real GPU -- timing, ncu, device memory -- is skipped and said so.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

#: What CPU mode never measures; experiments name the parts they skip with it.
NO_GPU = "no GPU (cpu mode)"


def gpu_available() -> bool:
    """True when a real CUDA device is usable.

    Asked in a child process, so that this process can still switch Numba to the CUDA
    simulator (which must happen before ``numba`` is first imported)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False
    probe = "from numba import cuda; import sys; sys.exit(0 if cuda.is_available() else 1)"
    try:
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def select_device(requested: str | None) -> str:
    """Resolve ``--device`` to "gpu" or "cpu" and, for cpu, switch Numba to its CUDA simulator."""
    device = requested or ("gpu" if gpu_available() else "cpu")
    if device == "gpu" and os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        raise SystemExit("--device gpu asked for, but NUMBA_ENABLE_CUDASIM=1 is set")
    if device == "cpu":
        if "numba" in sys.modules and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
            raise SystemExit("cpu mode needs NUMBA_ENABLE_CUDASIM=1 before numba is imported")
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    return device


@dataclass
class RunContext:
    """What an experiment needs to know about this run."""

    device: str          # "gpu" or "cpu"
    quick: bool          # fewer points, fewer timing repetitions
    out: Path            # results root; the experiment writes to out/<name>/
    command: str         # the exact command line, recorded in every CSV row
    dtypes: tuple = ()   # bench: the input formats to run (empty: all)
    skipped: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    #: a list: a listing run (``python -m experiments kernels``); the experiment stops where it
    #: would build its kernels and appends their cases here (common.kernels.build_kernels)
    listed: list | None = None

    @property
    def gpu(self) -> bool:
        return self.device == "gpu"

    def folder(self, name: str) -> Path:
        path = self.out / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def progress(self, items, desc: str):
        """A tqdm bar over ``items`` (on stderr, so printed tables stay clean)."""
        items = list(items)
        return tqdm(items, desc=desc, total=len(items), file=sys.stderr, leave=False, dynamic_ncols=True)

    def skip(self, what: str) -> str:
        """Record and print that ``what`` was skipped; returns the note for the CSV."""
        note = f"skipped: {what}"
        if note not in self.skipped:
            self.skipped.append(note)
            print(f"  {note}")
        return note

    def fail(self, message: str) -> None:
        """Record a failure (e.g. a kernel's wrong result): the run goes on, then exits non-zero."""
        print(f"  FAILURE: {message}")
        self.failures.append(message)
