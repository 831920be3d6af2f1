"""tools/kernel_resources.py's choice of configurations (shared by kernel_sass.py and
kernel_loops.py): the committed table holds exactly what it chooses, ``--add`` compiles nothing
more for it and refuses a table of other kernel sources, and ``--experiments`` finds the tilings
an experiment runs beyond the defaults; the tables were linked as a launch links the kernels.
No compiling (the tools' pure-Python parts) but for one kernel linked where a CUDA toolkit and
nvJitLink are installed (not in CI)."""
import csv
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"
sys.path.append(str(TOOLS))     # after the packages: a tool never shadows one

import kernel_resources as kr  # noqa: E402

from numba_flash.kernel_cache import function_digest  # noqa: E402
from simulator.occupancy import RESOURCES_CSV  # noqa: E402


def _table():
    with open(RESOURCES_CSV, newline="") as f:
        return list(csv.DictReader(f))


def test_the_table_holds_exactly_the_chosen_configurations():
    rows = _table()
    chosen = (kr.HEAD_DIMS, kr.table_extras(RESOURCES_CSV))
    keys = [kr.config_key(c) for c in kr.configurations(*chosen)]
    assert len(keys) == len(set(keys)) == len(rows)
    assert set(keys) == {kr.row_key(r) for r in rows}
    assert kr.missing(chosen, {kr.row_key(r) for r in rows}) == []          # --add: nothing to do
    assert len(kr.missing(chosen, set())) == len(rows)
    assert len(kr.configurations(kr.HEAD_DIMS)) == 161    # (fa2_fp16x3: forward and backward, d = 64, 128)


def test_add_keeps_the_rows_of_current_kernel_sources_only(tmp_path):
    assert kr.kept_rows(tmp_path / "none.csv") == []   # a new table
    rows = _table()[:3]
    assert all(r["kernel_source"] == function_digest(r["function"]) for r in rows)
    stale = {**rows[1], "kernel_source": "0" * 16}             # a kernel edited since
    path = tmp_path / "t.csv"
    kr.write_table(path, kr.COLUMNS, [rows[0], stale, rows[2]], "ptxas", "2026-12-03")
    assert [kr.row_key(r) for r in kr.kept_rows(path)] == [kr.row_key(r) for r in (rows[0], rows[2])]


def test_experiments_add_their_own_tilings(throughput_trips):
    # (the listing run predicts before it builds; the launches it lists are the same either way)
    # fig2_middle's Bc sweep at Br = 64, d = 64: Algorithm 1 at 64 x 128 and 64 x 256 (its
    # 64 x 64 is the default), FA2 FFMA at 64 x 64 and 64 x 128 (64 x 256 does not fit)
    assert kr.experiment_keys(["fig2_middle"]) == [
        ("flash_forward_v1", "", 64, 128, 64, False), ("flash_forward_v1", "", 64, 256, 64, False),
        ("flash_forward_v2", "", 64, 64, 64, False), ("flash_forward_v2", "", 64, 128, 64, False)]


def test_stall_model_reads_ncus_stall_reasons_by_kernel_name():
    import stall_model

    stalls = ROOT / "results" / "h100" / "stalls"
    backward = stall_model.ncu_reasons(stalls / "ncu_backward_standard_stall_reasons_2026-12-06.txt",
                                       "flash_backward_half")
    assert backward["wait"] == 1.58 and backward["mio_throttle"] == 0.76 and backward["selected"] == 1.0
    # the model's standard_matmul is ncu's matmul; a kernel the file lacks is None
    matmul = stall_model.ncu_reasons(stalls / "ncu_backward_standard_stall_reasons_2026-12-06.txt",
                                     "standard_matmul")
    assert matmul["not_selected"] == 1.39
    assert stall_model.ncu_reasons(stalls / "ncu_half_stall_reasons.txt", "flash_backward_tc") is None
    # a file whose kernel lines carry no module prefix
    forward = stall_model.ncu_reasons(stalls / "ncu_half_stall_reasons.txt", "flash_forward_half")
    assert forward["dispatch_stall"] == 0.36


def test_mma_dispatch_reads_the_mma_beside_rows_with_values():
    import mma_dispatch

    rows = mma_dispatch.beside_rows(ROOT / "simulator" / "rates_h100.csv")
    quantities = {r["quantity"] for r in rows}
    assert quantities == {f"mma_{tag}_{other}_per_cycle_per_sm" for tag in ("f16", "tf32") for other in ("ffma", "alu")}
    assert len(rows) == 28          # 0 / 2 / 4 / 8 FFMA and 2 / 4 / 8 ALU, 8 and 16 warps, 2 formats
    assert {r["quantity"] for r in mma_dispatch.beside_rows(ROOT / "simulator" / "rates_h200.csv")} == {
        "mma_f16_ffma_per_cycle_per_sm"}


def test_device_folders_replace_the_rows_they_hold(tmp_path):
    # a tools/device_sass.py folder of one kernel: its SASS (a spill refill of 8 bytes and a
    # spill of 4, a local array's store of 4), STAMP and attributes
    import json
    row = next(r for r in _table() if not r["variant"])      # a blank column is left out
    name = kr.sass_file_name(row)
    assert name == f"{row['kernel']}_{row['function']}_{row['Br']}_{row['Bc']}_{row['d']}_{row['causal']}.sass"
    (tmp_path / name).write_text(
        "        .text.kernel:\n"
        "        /*0000*/                   LDL.64 R20, [R1+0x8]          (*\"SpillRefill\"*);\n"
        "        /*0010*/                   STL [R1+0x4], R6          (*\"SpillRefill\"*);\n"
        "        /*0020*/                   STL [R1+0x10], R7 ;\n"
        "        /*0030*/                   EXIT ;\n")
    (tmp_path / "STAMP").write_text(json.dumps({name: {"kernel_source": row["kernel_source"],
                                                       "ptxas": "device: test", "date": "2026-12-06"}}))
    (tmp_path / "attrs.json").write_text(json.dumps([{"name": name, "regs": 96, "local": 24, "shared": 0}]))
    found, stamp = kr.device_resources(tmp_path, name, row["kernel_source"])
    assert found == {"registers": 96, "static_smem_bytes": 0, "stack_frame_bytes": 24,
                     "spill_store_bytes": 4, "spill_load_bytes": 8}
    assert stamp == {"ptxas": "device: test", "date": "2026-12-06"}
    assert kr.device_resources(tmp_path, "other.sass", row["kernel_source"]) is None
    assert kr.device_resources(tmp_path, name, "0" * 16) is None                # other sources
    stamps = json.loads((tmp_path / "STAMP").read_text())
    assert kr.device_held(stamps, row)
    assert not kr.device_held(stamps, next(r for r in _table() if kr.sass_file_name(r) != name))  # not held
    assert not kr.device_held(stamps, {**row, "kernel_source": "0" * 16})       # other sources


#: The -verbose info log nvJitLink gave for the tensor-core forward (256 x 32, d = 80, capped
#: at 128 registers; tools/compile_check.py's ``link``, nvJitLink 13.0.88, 2026-12-06).
LINK_LOG = """info    : Function properties for _ZN08NumbaEnv4numba_flash7kernels
ptxas         .     120 bytes stack frame, 120 bytes spill stores, 152 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 120 bytes cumulative stack size
ptxas info    : Compile time = 2481.226 ms
"""


def test_link_resources_reads_the_linkers_log():
    from compile_check import link_resources
    assert link_resources(LINK_LOG) == {"registers": 128, "static_smem_bytes": 0, "stack_frame_bytes": 120,
                                        "spill_store_bytes": 120, "spill_load_bytes": 152}
    with pytest.raises(RuntimeError, match="no register use"):
        link_resources("error   : undefined reference")


def test_the_capped_kernels_rows_are_the_launched_code():
    """Every SASS row, and the resource row of every kernel with a register cap, was linked as
    a launch links it (tools/compile_check.py): a standalone ptxas gives the capped kernels
    other code (README (21); an uncapped kernel's code, registers and stack frame are the same
    either way, checked on the GPU, so some of their resource rows are still ptxas's)."""
    from simulator.sass import SASS_CSV

    def launched(linker: str) -> bool:
        return linker.startswith("nvJitLink ") and "-lto -arch=sm_90a" in linker

    for r in _table():
        assert launched(r["ptxas"]) or not r["register_cap"], kr.row_key(r)
    with open(SASS_CSV, newline="") as f:
        assert all(launched(r["ptxas"]) for r in csv.DictReader(f))


def test_resources_kept_by_the_sass_tool_are_read_back():
    row = next(r for r in _table() if r["kernel"] == "flash_forward_tc")
    name = kr.sass_file_name(row)
    found = {"registers": 128, "static_smem_bytes": 0, "stack_frame_bytes": 24,
             "spill_store_bytes": 24, "spill_load_bytes": 28}
    stamps = {name: {"kernel_source": row["kernel_source"], "ptxas": "nvJitLink test",
                     "date": "2026-12-06", "resources": found}}
    assert kr.kept_resources(stamps, name, row["kernel_source"]) == (
        found, {"ptxas": "nvJitLink test", "date": "2026-12-06"})
    assert kr.kept_resources(stamps, name, "0" * 16) is None          # other sources
    del stamps[name]["resources"]                                     # a stamp of before
    assert kr.kept_resources(stamps, name, row["kernel_source"]) is None


def _can_link() -> bool:
    try:
        from cuda.bindings import nvjitlink
        from numba.cuda.cudadrv.nvvm import NVVM
        nvjitlink.version()
        NVVM()
    except Exception:       # noqa: BLE001 (no CUDA toolkit or nvJitLink: CI)
        return False
    return True


@pytest.mark.skipif(not _can_link(), reason="needs numba-cuda (not its simulator), libnvvm and nvidia-nvjitlink")
def test_the_link_here_gives_the_gpus_code(tmp_path):
    """The tensor-core forward (256 x 32, d = 32: capped at 128 registers, one spill) linked
    here is, instruction for instruction, what numba-cuda linked on an H100 on 2026-12-06
    (results/h100/compile/device_sass_a_2026-12-06.tar.xz)."""
    import tarfile
    from kernel_sass import launch_sass
    from numba_flash.kernels.flash_forward_fa2_tc import make_flash_forward_fa2_tc
    from simulator.sass import parse
    from simulator.tiling import Tiling
    name = "flash_forward_tc_flash_forward_fa2_tc_256_32_32_False.sass"
    with tarfile.open(ROOT / "results/h100/compile/device_sass_a_2026-12-06.tar.xz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/" + name))
        device = tar.extractfile(member).read().decode()
    here, _ = launch_sass("fa2_tc", make_flash_forward_fa2_tc(Tiling(256, 32), 32, False))
    # the device's nvdisasm marks no SpillRefill: all but that
    assert [(i.address, i.mnemonic, i.target) for i in parse(here)] == [
        (i.address, i.mnemonic, i.target) for i in parse(device)]
