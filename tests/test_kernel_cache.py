"""The disk cache's keys and files, without a GPU: a stand-in kernel goes through
``DiskCache.save_overload`` / ``load_overload`` as numba-cuda's dispatcher would call them.
(tests/test_gpu.py runs real kernels through it in two processes.)"""
import shutil
from pathlib import Path

import pytest

from numba_flash import kernel_cache
from numba_flash.kernels import flash_forward_fa2_tc
from simulator.tiling import Tiling

REPO = Path(__file__).resolve().parents[1]


class FakeCodegen:
    def __init__(self, cc):
        self.cc = cc

    def magic_tuple(self):
        return ("nvptx64-nvidia-cuda", self.cc, "")


class FakeContext:
    def __init__(self, cc=(9, 0)):
        self._codegen = FakeCodegen(cc)

    def codegen(self):
        return self._codegen

    def refresh(self):
        pass


class FakeKernel:
    """What save_overload needs of numba-cuda's _Kernel."""

    launch_config_sensitive = False

    def __init__(self, state, cc=(9, 0)):
        self.state, self.target_context = state, FakeContext(cc)

    def _reduce_states(self):
        return self.state


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(tmp_path / "kernels"))
    monkeypatch.setattr(kernel_cache, "_rebuild", lambda payload: ("rebuilt", payload))
    return tmp_path / "kernels"


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(tmp_path / "x"))
    assert kernel_cache.cache_dir() == tmp_path / "x"
    monkeypatch.delenv(kernel_cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kernel_cache.cache_dir() == tmp_path / "xdg" / "numba-flash"


def test_save_then_load_round_trip_and_clear(cache):
    disk = kernel_cache.DiskCache("pkg.make_kernel", (Tiling(64, 32), 64, True))
    sig = ("array(float32, 1d, C)", "float32", "int64")
    assert disk.load_overload(sig, FakeContext()) is None
    disk.save_overload(sig, FakeKernel({"cubin": b"\x01\x02"}))
    assert disk.load_overload(sig, FakeContext()) == ("rebuilt", {"cubin": b"\x01\x02"})
    assert [p.name for p in kernel_cache.entries()] == [disk.path(sig, FakeContext()).name]
    assert not list(cache.glob("*.tmp"))                         # written atomically
    assert kernel_cache.clear() == 1 and kernel_cache.entries() == []


def test_key_holds_everything_that_changes_the_binary(cache):
    base = kernel_cache.DiskCache("pkg.make_kernel", (Tiling(64, 32), 64, True))
    sig, other_sig = ("array(float32, 1d, C)",), ("array(float16, 1d, C)",)
    here = base.path(sig, FakeContext())
    assert base.path(other_sig, FakeContext()) != here                       # argument types
    assert base.path(sig, FakeContext((8, 0))) != here                       # target
    for other in (kernel_cache.DiskCache("pkg.make_other", (Tiling(64, 32), 64, True)),
                  kernel_cache.DiskCache("pkg.make_kernel", (Tiling(64, 16), 64, True)),
                  kernel_cache.DiskCache("pkg.make_kernel", (Tiling(64, 32), 80, True)),
                  kernel_cache.DiskCache("pkg.make_kernel", (Tiling(64, 32), 64, False))):
        assert other.path(sig, FakeContext()) != here                        # factory, arguments


def _copy_sources(copy: Path) -> Path:
    """The kernel sources of this repository copied under ``copy``."""
    for pattern in kernel_cache._SOURCES:
        for path in REPO.glob(pattern):
            target = copy / path.relative_to(REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
    return copy


def test_entry_of_changed_kernel_source_is_not_used(cache, tmp_path, monkeypatch):
    """A one-byte change in a kernel file gives another digest, so another file name: the old
    entry is never loaded."""
    copy = _copy_sources(tmp_path / "repo")
    assert kernel_cache.digest_of(copy) == kernel_cache.digest_of(REPO)
    disk = kernel_cache.DiskCache("pkg.make_kernel", (64,))
    sig = ("float32",)
    disk.save_overload(sig, FakeKernel({"version": "old"}))
    kernel = copy / "numba_flash" / "kernels" / "flash_forward_fa2_tc.py"
    kernel.write_text(kernel.read_text().replace("VERSION = ", "VERSION = 1 + "))
    changed = kernel_cache.digest_of(copy)
    assert changed != kernel_cache.digest_of(REPO)
    monkeypatch.setattr(kernel_cache, "source_digest", lambda: changed)
    assert disk.load_overload(sig, FakeContext()) is None


def test_a_kernel_digest_covers_its_own_file_and_what_it_imports(tmp_path):
    """Per-kernel digests: an edit to one kernel's file changes its digest and not another
    kernel's; an edit to a file both import (tiles.py) changes both."""
    copy = _copy_sources(tmp_path / "repo")
    tc, fma = "numba_flash.kernels.flash_forward_fa2_tc", "numba_flash.kernels.flash_forward_fa2"
    assert {"numba_flash/kernels/flash_forward_fa2_tc.py", "numba_flash/kernels/mma.py",
            "numba_flash/kernels/tiles.py", "numba_flash/launch.py", "simulator/spec.py",
            "simulator/tiling.py"} <= set(kernel_cache.module_sources(tc, copy))
    assert "numba_flash/kernels/flash_forward_fa2_tc.py" not in kernel_cache.module_sources(fma, copy)
    assert kernel_cache.module_sources("pkg", copy) == ()
    before = {m: kernel_cache.digest_of(copy, m) for m in (tc, fma)}
    assert before[tc] == kernel_cache.kernel_digest(tc)
    assert kernel_cache.function_digest("flash_forward_fa2_tc") == before[tc][:16]
    edit = copy / "numba_flash" / "kernels" / "flash_forward_fa2_tc.py"
    edit.write_text(edit.read_text() + "\n")
    assert kernel_cache.digest_of(copy, tc) != before[tc]
    assert kernel_cache.digest_of(copy, fma) == before[fma]
    shared = copy / "numba_flash" / "kernels" / "tiles.py"
    shared.write_text(shared.read_text() + "\n")
    assert kernel_cache.digest_of(copy, fma) != before[fma]
    with pytest.raises(ValueError, match="defined in 0 kernel modules"):
        kernel_cache.function_digest("no_such_kernel")


def test_corrupt_entry_is_recompiled_not_raised(cache):
    disk = kernel_cache.DiskCache("pkg.make_kernel", (64,))
    sig = ("float32",)
    path = disk.path(sig, FakeContext())
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a pickle")
    assert disk.load_overload(sig, FakeContext()) is None


def test_factories_keep_one_dispatcher_per_arguments():
    a = flash_forward_fa2_tc.make_flash_forward_fa2_tc(Tiling(16, 8), 8, False)
    assert flash_forward_fa2_tc.make_flash_forward_fa2_tc(Tiling(16, 8), 8, False) is a
    assert flash_forward_fa2_tc.make_flash_forward_fa2_tc(Tiling(16, 8), 8, True) is not a


def test_jit_options_are_in_the_key(cache):
    """numba takes opt level and debug info from the environment too (NUMBA_OPT,
    NUMBA_CUDA_DEBUGINFO): a debug or -O0 binary must not load into a normal run."""
    sig = ("float32",)
    normal = kernel_cache.DiskCache("pkg.make_kernel", (64,), {"opt": True, "debug": False})
    debug = kernel_cache.DiskCache("pkg.make_kernel", (64,), {"opt": True, "debug": True})
    unoptimised = kernel_cache.DiskCache("pkg.make_kernel", (64,), {"opt": False, "debug": False})
    paths = {d.path(sig, FakeContext()) for d in (normal, debug, unoptimised)}
    assert len(paths) == 3


def test_unwritable_cache_warns_and_compiling_goes_on(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(blocker / "kernels"))   # below a regular file
    monkeypatch.setattr(kernel_cache, "_unwritable", [])
    disk = kernel_cache.DiskCache("pkg.make_kernel", (64,))
    with pytest.warns(RuntimeWarning, match="cannot be written"):
        disk.save_overload(("float32",), FakeKernel({"cubin": b""}))
    disk.save_overload(("int64",), FakeKernel({"cubin": b""}))                # once: no second warning
    assert kernel_cache._unwritable and list(tmp_path.iterdir()) == [blocker]


def test_entry_of_the_wrong_structure_is_recompiled(cache, monkeypatch):
    """A valid pickle that is no kernel's state (numba-cuda's _rebuild raises on it)."""
    monkeypatch.setattr(kernel_cache, "_rebuild", lambda payload: ("rebuilt", payload["cubin"]))
    disk = kernel_cache.DiskCache("pkg.make_kernel", (64,))
    disk.save_overload(("float32",), FakeKernel({"not": "a kernel's state"}))
    assert disk.load_overload(("float32",), FakeContext()) is None


def test_clear_removes_half_written_files(cache):
    disk = kernel_cache.DiskCache("pkg.make_kernel", (64,))
    disk.save_overload(("float32",), FakeKernel({}))
    (cache / f"x{kernel_cache.SUFFIX}.0123.tmp").write_bytes(b"partial")
    assert kernel_cache.clear() == 1 and list(cache.iterdir()) == []


def test_prune_removes_entries_of_other_sources_only(cache, monkeypatch):
    disk = kernel_cache.DiskCache("pkg.make_kernel", (64,))
    monkeypatch.setattr(kernel_cache, "source_digest", lambda: "a" * 64)
    disk.save_overload(("float32",), FakeKernel({}))                   # built from sources "aaa..."
    monkeypatch.setattr(kernel_cache, "source_digest", lambda: "b" * 64)
    disk.save_overload(("float32",), FakeKernel({}))                   # and from the current ones
    assert len(kernel_cache.entries()) == 2
    assert kernel_cache.prune() == 1
    assert [p.name for p in kernel_cache.entries()] == [disk.path(("float32",), FakeContext()).name]


def test_pack_and_unpack_carry_this_sources_kernels_in_pieces(cache, tmp_path, monkeypatch):
    import os
    cache.mkdir(parents=True)
    tag = kernel_cache._source_tag("pkg.make_a")
    current = {f"make_a-{tag}-{k}{kernel_cache.SUFFIX}": os.urandom(3000 + k) for k in range(3)}
    for name, data in current.items():
        (cache / name).write_bytes(data)
    (cache / f"make_a-{'0' * 12}-old{kernel_cache.SUFFIX}").write_bytes(b"stale")   # other sources
    pieces = kernel_cache.pack(tmp_path / "kc.tar.xz", part_bytes=4000)
    assert [p.name for p in pieces] == [f"kc.tar.xz.{k:03d}" for k in range(len(pieces))] and len(pieces) >= 2
    assert all(p.stat().st_size <= 4000 for p in pieces)
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(tmp_path / "elsewhere"))
    assert kernel_cache.unpack(tmp_path / "kc.tar.xz") == 3
    assert {p.name: p.read_bytes() for p in (tmp_path / "elsewhere").iterdir()} == current
    (whole,) = kernel_cache.pack(tmp_path / "one.tar.xz")              # unsplit, read back whole
    assert kernel_cache.unpack(whole) == 3
    with pytest.raises(FileNotFoundError, match="no cache archive"):
        kernel_cache.unpack(tmp_path / "missing.tar.xz")


@pytest.mark.parametrize("xz_on_path", [True, False])
def test_pack_compresses_with_or_without_the_xz_tool(cache, tmp_path, monkeypatch, xz_on_path):
    import shutil
    import tarfile

    if xz_on_path and not shutil.which("xz"):
        pytest.skip("no xz on this machine's PATH")
    if not xz_on_path:
        monkeypatch.setattr(shutil, "which", lambda name: None)
    cache.mkdir(parents=True)
    names = {f"make_a-{kernel_cache._source_tag('pkg.make_a')}-{k}{kernel_cache.SUFFIX}" for k in range(2)}
    for name in names:
        (cache / name).write_bytes(name.encode() * 50)
    (archive,) = kernel_cache.pack(tmp_path / "kc.tar.xz")
    with tarfile.open(archive, mode="r:xz") as tar:       # a plain .tar.xz either way
        assert set(tar.getnames()) == names


def test_unpack_takes_nothing_but_top_level_kernel_files(cache, tmp_path):
    import io
    import tarfile
    bad = tmp_path / "bad.tar.xz"
    with tarfile.open(bad, "w:xz") as tar:
        info = tarfile.TarInfo("../escape" + kernel_cache.SUFFIX)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(ValueError, match="not a cached kernel"):
        kernel_cache.unpack(bad)
    assert not (tmp_path / ("escape" + kernel_cache.SUFFIX)).exists()


def test_precompile_cli_packs_and_unpacks(cache, tmp_path, monkeypatch, capsys):
    from numba_flash import precompile
    cache.mkdir(parents=True)
    name = f"make_b-{kernel_cache._source_tag('pkg.make_a')}-x{kernel_cache.SUFFIX}"
    (cache / name).write_bytes(b"kernel")
    assert precompile.main(["--pack", str(tmp_path / "c.tar.xz"), "--part-mib", "1"]) == 0
    assert (tmp_path / "c.tar.xz.000").is_file() and "c.tar.xz.000" in capsys.readouterr().out
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(tmp_path / "new"))
    assert precompile.main(["--unpack", str(tmp_path / "c.tar.xz")]) == 0
    assert (tmp_path / "new" / name).read_bytes() == b"kernel" and "added 1 kernels" in capsys.readouterr().out
