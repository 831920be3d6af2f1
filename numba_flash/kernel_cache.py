"""Compiled kernels kept on disk, so that a new process does not compile them again.

Every kernel factory of ``numba_flash.kernels`` is wrapped by ``kernel_factory``: an in-process
``lru_cache`` as before, plus a disk cache handed to the numba-cuda dispatcher the factory
returns. numba-cuda asks that cache for each signature before it compiles, and gives it each
kernel it compiled (its cubin, PTX and launch metadata, numba-cuda's own serialisation). An
entry's key holds everything that changes the binary:

- the kernel source: a digest of the files the factory's kernel is built from (``kernel_digest``
  of its module: that file and the kernel sources it imports, directly or not, among
  ``numba_flash/kernels/``, ``launch.py`` with its register caps, ``simulator/tiling.py`` with the
  SRAM layouts and ``simulator/spec.py`` with the mask spec), so a changed line, version or
  layout never loads an old binary, and an edit to one kernel leaves the others' entries valid;
- the factory and its arguments (tiling, head dim, causal, dtype, ...), the dispatcher's jit
  options (register cap; opt level and debug info, which numba also reads from the
  environment), the argument types of the signature (dtypes, ranks, layouts);
- the target (numba-cuda's "magic tuple": CUDA runtime version and compute capability), the
  NVVM and driver versions (NVVM makes the PTX, the driver's JIT the cubin), numba's bounds
  checking switch, and the numba, numba-cuda and llvmlite versions.

The directory is ``$NUMBA_FLASH_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/numba-flash``
(``~/.cache/numba-flash``). Entries of older kernel sources are never loaded again: ``prune()``
removes them (their file names carry their module's digest), ``clear()`` everything (also
``python -m numba_flash.precompile --prune | --clear``). Under Numba's CUDA simulator nothing
is compiled and nothing is cached.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import os
import pickle
import uuid
import warnings
from collections import Counter
from pathlib import Path

from .memory import simulator_enabled

CACHE_ENV = "NUMBA_FLASH_CACHE_DIR"
SUFFIX = ".nfk"
_PACKAGE = Path(__file__).resolve().parent
#: The files a kernel binary is built from (globs under the repository root).
_SOURCES = ("numba_flash/kernels/*.py", "numba_flash/launch.py", "simulator/tiling.py",
            "simulator/spec.py")
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


def digest_of(root: Path, module: str | None = None) -> str:
    """sha256 over the kernel source files under ``root`` (a repository), by relative path and
    content: all of them, or those ``module`` is built from (``module_sources``)."""
    names = (module_sources(module, root) if module else
             [path.relative_to(root).as_posix() for path in _source_files(root)])
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode())
        digest.update((root / name).read_bytes())
    return digest.hexdigest()


def _source_files(root: Path) -> list[Path]:
    return [path for pattern in _SOURCES for path in sorted(root.glob(pattern))]


def _module_name(path: Path, root: Path) -> str:
    """The dotted module name of the source file ``path`` under ``root``."""
    return path.relative_to(root).with_suffix("").as_posix().replace("/", ".")


def module_sources(module: str, root: Path | None = None) -> tuple[str, ...]:
    """The kernel source files (paths relative to ``root``, this repository by default, sorted)
    that module ``module`` (dotted: ``numba_flash.kernels.flash_backward_tc``) is built from:
    its own file and those it imports, directly or through each other, among ``_SOURCES``.
    Empty for a module that is not a kernel source."""
    root = _PACKAGE.parent if root is None else root
    known = {_module_name(path, root): path for path in _source_files(root)}
    found, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in found or name not in known:
            continue
        found.add(name)
        package = name.rsplit(".", 1)[0] if known[name].name != "__init__.py" else name
        for node in ast.walk(ast.parse(known[name].read_text())):
            if isinstance(node, ast.Import):
                todo += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:       # relative: from the package, one level up per extra dot
                    parts = package.split(".")
                    parent = ".".join(parts[:len(parts) - node.level + 1])
                    base = f"{parent}.{base}" if base else parent
                todo += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return tuple(sorted(known[name].relative_to(root).as_posix() for name in found))


def kernel_digest(module: str) -> str:
    """sha256 over ``module_sources(module)`` (by relative path and content): what a kernel of
    ``module`` is compiled from. Editing one kernel file changes its own digest (and those of
    the modules that import it), not the others'. A module outside the kernel sources (a test's
    factory) gets ``source_digest()``."""
    return _module_digest(module) or source_digest()


@functools.lru_cache(maxsize=None)
def _module_digest(module: str) -> str | None:
    return digest_of(_PACKAGE.parent, module) if module_sources(module) else None


@functools.lru_cache(maxsize=None)
def function_module(function: str) -> str:
    """The kernel module (dotted) that defines the kernel function named ``function`` (the
    name ptxas and ncu show, a kernel table's ``function`` column); ValueError unless exactly
    one does."""
    root = _PACKAGE.parent
    found = {_module_name(path, root) for path in sorted(root.glob("numba_flash/kernels/*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.FunctionDef) and node.name == function}
    if len(found) != 1:
        raise ValueError(f"kernel function {function!r} is defined in {len(found)} kernel modules "
                         f"({', '.join(sorted(found)) or 'none'}), not one")
    return found.pop()


def function_digest(function: str) -> str:
    """``kernel_digest`` of the module defining kernel function ``function``, 16 hex digits:
    what the kernel tables (simulator/kernel_*.csv, kernel_loops.json.gz) record per row, and
    tests hold each row to."""
    return kernel_digest(function_module(function))[:16]


def is_current(entry) -> bool:
    """Whether a kernel-table entry (a dict with ``function`` and ``kernel_source``) was
    recorded from its kernel's sources as they are now."""
    return entry["kernel_source"] == function_digest(entry["function"])


def stale_functions(entries) -> list[str]:
    """The kernel functions (sorted) of the kernel-table entries not ``is_current``."""
    return sorted({e["function"] for e in entries if not is_current(e)})


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


def _source_tag(factory: str) -> str:
    """The part of an entry's file name that names the kernel sources it was built from: its
    factory's (dotted name) module digest."""
    return kernel_digest(factory.rsplit(".", 1)[0])[:12]


def _current_tags() -> set[str]:
    """The source tags of every kernel module as the sources are now (and of all of them, a
    test factory's)."""
    root = _PACKAGE.parent
    return ({_source_tag(f"{_module_name(p, root)}.factory") for p in root.glob("numba_flash/kernels/*.py")}
            | {source_digest()[:12]})


def _current(path: Path, tags: set[str]) -> bool:
    """Whether cache entry ``path`` (``{factory}-{tag}-{key}.nfk``) is of the sources as they are."""
    parts = path.name.split("-")
    return len(parts) >= 3 and parts[-2] in tags


def prune() -> int:
    """Remove the entries built from other kernel sources than these (never loaded again);
    returns how many."""
    tags = _current_tags()
    stale = [path for path in entries() if not _current(path, tags)]
    for path in stale:
        path.unlink(missing_ok=True)
    return len(stale)


def clear() -> int:
    """Remove every cached kernel (and any half-written file); returns how many kernels."""
    found = entries()
    root = cache_dir()
    for path in found + (sorted(root.glob(f"*{SUFFIX}.*.tmp")) if root.is_dir() else []):
        path.unlink(missing_ok=True)
    return len(found)


def pack(path, part_bytes: int | None = None, stale: bool = False) -> list[Path]:
    """The cache's kernels (those of these kernel sources; ``stale``: every entry) as one
    xz-compressed tar, ``path``, or split into pieces ``path.000``, ``path.001``, ... of at most
    ``part_bytes`` each (to carry a cache between machines whose transfers cap a file's size);
    returns the files written. The cache compresses about 28-fold (numba's serialised kernels).
    Compressed at xz's preset 9 (64 MiB dictionary: 726 MB of kernels took 22 MB, preset 6 35
    MB), by ``xz -T0`` where it is on the PATH -- blocks of 192 MiB on as many cores, each with
    the dictionary a single stream has -- else by Python's one-thread lzma: a GPU session's cache
    is near a gigabyte (192 kernels, 839 MB on 2026-12-02), which one thread did not pack in
    the minutes left of a device call."""
    import io
    import lzma
    import shutil
    import subprocess
    import tarfile

    path = Path(path)
    tags = _current_tags()
    keep = entries() if stale else [e for e in entries() if _current(e, tags)]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for entry in keep:
            tar.add(entry, arcname=entry.name)
    xz = shutil.which("xz")
    if xz:
        data = subprocess.run([xz, "-T0", "-9", "-c"], input=buffer.getvalue(), capture_output=True,
                              check=True).stdout
    else:
        data = lzma.compress(buffer.getvalue(), preset=9)
    if part_bytes is None:
        path.write_bytes(data)
        return [path]
    if part_bytes < 1:
        raise ValueError(f"part_bytes must be positive, got {part_bytes}")
    written = []
    for k, at in enumerate(range(0, max(len(data), 1), part_bytes)):
        piece = path.with_name(f"{path.name}.{k:03d}")
        piece.write_bytes(data[at:at + part_bytes])
        written.append(piece)
    return written


def unpack(path) -> int:
    """Add the kernels of a ``pack`` archive -- ``path`` itself, or its pieces ``path.000``, ...
    in order -- to the cache directory; returns how many. Only plain ``*.nfk`` files at the
    archive's top level are taken (ValueError for anything else)."""
    import io
    import tarfile

    path = Path(path)
    pieces = [path] if path.is_file() else sorted(path.parent.glob(f"{path.name}.[0-9][0-9][0-9]"))
    if not pieces:
        raise FileNotFoundError(f"no cache archive {path} (nor pieces {path.name}.000, ...)")
    data = b"".join(p.read_bytes() for p in pieces)
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    count = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as tar:
        for member in tar.getmembers():
            if not (member.isfile() and member.name.endswith(SUFFIX) and "/" not in member.name):
                raise ValueError(f"{path}: {member.name!r} is not a cached kernel (a top-level *{SUFFIX} file)")
            (root / member.name).write_bytes(tar.extractfile(member).read())
            count += 1
    return count


def _rebuild(payload: dict):
    """numba-cuda's kernel object from its serialised state, as its own disk cache rebuilds it."""
    from numba.cuda import utils
    from numba.cuda.dispatcher import _Kernel

    with utils.numba_target_override():
        return _Kernel._rebuild(**payload)


class DiskCache:
    """The cache numba-cuda's dispatcher consults (its ``_cache`` interface: ``load_overload``,
    ``save_overload``, ``flush``, ``cache_path``) for the kernels of one factory call.
    ``options``: the dispatcher's jit options (register cap, opt level, debug, ...), which
    numba also takes from the environment (``NUMBA_OPT``, ``NUMBA_CUDA_DEBUGINFO``)."""

    def __init__(self, factory: str, args: tuple, options: dict | None = None):
        self.factory = factory
        self.args = repr(args)
        self.options = repr(sorted((k, v) for k, v in (options or {}).items()
                                   if isinstance(v, (bool, int, float, str, type(None)))))

    @property
    def cache_path(self) -> str:
        return str(cache_dir())

    def path(self, sig, target_context) -> Path:
        """The file of this factory call's kernel for signature ``sig`` on the current target."""
        key = (kernel_digest(self.factory.rsplit(".", 1)[0]), self.factory, self.args,
               self.options, str(sig), target_context.codegen().magic_tuple(), _toolchain(),
               _compilers())
        name = hashlib.sha256(repr(key).encode()).hexdigest()[:40]
        return cache_dir() / f"{self.factory.rsplit('.', 1)[-1]}-{_source_tag(self.factory)}-{name}{SUFFIX}"

    def load_overload(self, sig, target_context):
        """The kernel cached for ``sig``, or None (numba-cuda then compiles and saves it)."""
        target_context.refresh()
        try:
            kernel = _rebuild(pickle.loads(self.path(sig, target_context).read_bytes()))
        except Exception:   # none yet, or a truncated or foreign file: compile, overwrite it
            return None
        STATS["loaded"] += 1
        return kernel

    def save_overload(self, sig, kernel) -> None:
        """Write ``kernel`` (compiled and bound, so its cubin exists) for ``sig``, atomically:
        a reader sees the whole file or none. A directory that cannot be written is reported
        once (a warning) and the process goes on compiling without saving."""
        if getattr(kernel, "launch_config_sensitive", False) or _unwritable:
            return                   # (its binary would depend on the launch: not keyed here)
        from numba.cuda.serialize import dumps

        path = self.path(sig, kernel.target_context)
        tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:12]}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(dumps(kernel._reduce_states()))
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            _unwritable.append(str(exc))
            warnings.warn(f"numba_flash: compiled kernels are not saved, the cache directory "
                          f"{cache_dir()} cannot be written ({exc}); set {CACHE_ENV} to a "
                          "writable directory", RuntimeWarning, stacklevel=2)
            return
        STATS["compiled"] += 1

    def flush(self) -> None:
        """(numba-cuda's ``Dispatcher.flush``; entries are cleared with ``clear()``.)"""


#: Set (to the error) once the cache directory failed a write in this process.
_unwritable: list = []


@functools.lru_cache(maxsize=None)
def _compilers() -> tuple:
    """Versions of what turns our IR into the cubin: NVVM (IR -> PTX), the driver (its PTX JIT
    -> cubin), and numba's array bounds checking (a global switch that changes the code)."""
    from numba import config

    def version(get):
        try:
            return get()
        except Exception:           # e.g. no NVVM here: this machine can load, not compile
            return None

    def nvvm_version():
        from numba.cuda.cudadrv import nvvm
        return nvvm.NVVM().get_version()

    def driver_version():
        from numba.cuda.cudadrv.driver import driver
        return driver.get_version()

    return version(nvvm_version), version(driver_version), bool(config.BOUNDSCHECK)


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
            kernel._cache = DiskCache(name, args, kernel.targetoptions)
        return kernel
    return cached
