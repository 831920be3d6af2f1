"""Compiled kernels kept on disk, so that a new process does not compile them again.

Every kernel factory of ``numba_flash.kernels`` is wrapped by ``kernel_factory``: an in-process
``lru_cache`` as before, plus a disk cache handed to the numba-cuda dispatcher the factory
returns. numba-cuda asks that cache for each signature before it compiles, and gives it each
kernel it compiled (its cubin, PTX and launch metadata, numba-cuda's own serialisation). An
entry's key holds everything that changes the binary:

- the kernel source: a digest of every file the kernels are built from (``numba_flash/kernels/``,
  ``launch.py`` with its register caps, ``simulator/tiling.py`` with the SRAM layouts), so a
  changed line, version or layout never loads an old binary;
- the factory and its arguments (tiling, head dim, causal, dtype, ...), the argument types of
  the signature (dtypes, ranks, layouts);
- the target (compute capability and the features numba-cuda compiles for) and the numba,
  numba-cuda and llvmlite versions.

The directory is ``$NUMBA_FLASH_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/numba-flash``
(``~/.cache/numba-flash``). ``clear()`` (or ``python -m numba_flash.precompile --clear``) empties
it. Under Numba's CUDA simulator nothing is compiled and nothing is cached.
"""
from __future__ import annotations

import functools
import hashlib
import os
import pickle
import uuid
from collections import Counter
from pathlib import Path

from .memory import simulator_enabled

CACHE_ENV = "NUMBA_FLASH_CACHE_DIR"
SUFFIX = ".nfk"
_PACKAGE = Path(__file__).resolve().parent
#: The files a kernel binary is built from (globs under the repository root).
_SOURCES = ("numba_flash/kernels/*.py", "numba_flash/launch.py", "simulator/tiling.py")
#: Kernels this process "loaded" from the cache and "compiled" (and saved) since it started.
STATS: Counter = Counter()


def cache_dir() -> Path:
    """Where compiled kernels are kept (see the module docstring)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "numba-flash"


@functools.lru_cache(maxsize=None)
def source_digest() -> str:
    """``digest_of`` this repository, once a process."""
    return digest_of(_PACKAGE.parent)


def digest_of(root: Path) -> str:
    """sha256 over the kernel source files under ``root`` (a repository), by relative path
    and content."""
    digest = hashlib.sha256()
    for pattern in _SOURCES:
        for path in sorted(root.glob(pattern)):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def _toolchain() -> tuple:
    import llvmlite
    import numba
    import numba_cuda

    return (numba.__version__, numba_cuda.__version__, llvmlite.__version__)


def entries() -> list[Path]:
    """The cached kernels, oldest first."""
    root = cache_dir()
    found = root.glob(f"*{SUFFIX}") if root.is_dir() else []
    return sorted(found, key=lambda p: p.stat().st_mtime)


def clear() -> int:
    """Remove every cached kernel; returns how many there were."""
    found = entries()
    for path in found:
        path.unlink(missing_ok=True)
    return len(found)


def _rebuild(payload: dict):
    """numba-cuda's kernel object from its serialised state, as its own disk cache rebuilds it."""
    from numba.cuda import utils
    from numba.cuda.dispatcher import _Kernel

    with utils.numba_target_override():
        return _Kernel._rebuild(**payload)


class DiskCache:
    """The cache numba-cuda's dispatcher consults (its ``_cache`` interface: ``load_overload``,
    ``save_overload``, ``flush``, ``cache_path``) for the kernels of one factory call."""

    def __init__(self, factory: str, args: tuple):
        self.factory = factory
        self.args = repr(args)

    @property
    def cache_path(self) -> str:
        return str(cache_dir())

    def path(self, sig, target_context) -> Path:
        """The file of this factory call's kernel for signature ``sig`` on the current target."""
        key = (source_digest(), self.factory, self.args, str(sig),
               target_context.codegen().magic_tuple(), _toolchain())
        name = hashlib.sha256(repr(key).encode()).hexdigest()[:40]
        return cache_dir() / f"{self.factory.rsplit('.', 1)[-1]}-{name}{SUFFIX}"

    def load_overload(self, sig, target_context):
        """The kernel cached for ``sig``, or None (numba-cuda then compiles and saves it)."""
        target_context.refresh()
        path = self.path(sig, target_context)
        try:
            payload = pickle.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except Exception:            # a truncated or foreign file: compile again, overwrite it
            return None
        kernel = _rebuild(payload)
        STATS["loaded"] += 1
        return kernel

    def save_overload(self, sig, kernel) -> None:
        """Write ``kernel`` (compiled and bound, so its cubin exists) for ``sig``, atomically:
        a reader sees the whole file or none."""
        if getattr(kernel, "launch_config_sensitive", False):
            return                   # its binary depends on the launch: not keyed here
        from numba.cuda.serialize import dumps

        path = self.path(sig, kernel.target_context)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:12]}.tmp")
        tmp.write_bytes(dumps(kernel._reduce_states()))
        os.replace(tmp, path)
        STATS["compiled"] += 1

    def enable(self) -> None:
        pass

    def disable(self) -> None:
        pass

    def flush(self) -> None:
        pass


def kernel_factory(make):
    """Decorator for a kernel factory ``make(*args) -> numba-cuda dispatcher``: one dispatcher
    per distinct arguments in a process (as ``lru_cache``), whose compiled kernels go to and
    come from the disk cache. Arguments must have stable reprs (Tiling, ints, bools, dtypes)."""
    name = f"{make.__module__}.{make.__qualname__}"

    @functools.lru_cache(maxsize=None)
    @functools.wraps(make)
    def cached(*args):
        kernel = make(*args)
        if not simulator_enabled():
            kernel._cache = DiskCache(name, args)
        return kernel
    return cached
