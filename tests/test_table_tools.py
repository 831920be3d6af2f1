"""tools/kernel_resources.py's choice of configurations (shared by kernel_sass.py and
kernel_loops.py): the committed table holds exactly what it chooses, ``--add`` compiles nothing
more for it and refuses a table of other kernel sources, and ``--experiments`` finds the tilings
an experiment runs beyond the defaults. No compiling: the tools' pure-Python parts."""
import csv
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"
sys.path.append(str(TOOLS))     # after the packages: a tool never shadows one

import kernel_resources as kr  # noqa: E402

from numba_flash.kernel_cache import function_digest  # noqa: E402
from simulator.occupancy import RESOURCES_CSV  # noqa: E402


def _table():
    with open(RESOURCES_CSV, newline="") as f:
        return list(csv.DictReader(f))


def _extras(rows):
    """The committed rows that are not default configurations, as ``configurations``' extras."""
    defaults = {kr.config_key(c) for c in kr.configurations(kr.HEAD_DIMS)}
    return tuple((r["kernel"], r["variant"], int(r["Br"]), int(r["Bc"]), int(r["d"]), r["causal"] == "True")
                 for r in rows if kr.row_key(r) not in defaults)


def test_the_table_holds_exactly_the_chosen_configurations():
    rows = _table()
    chosen = (kr.HEAD_DIMS, _extras(rows))
    keys = [kr.config_key(c) for c in kr.configurations(*chosen)]
    assert len(keys) == len(set(keys)) == len(rows)
    assert set(keys) == {kr.row_key(r) for r in rows}
    assert kr.missing(chosen, {kr.row_key(r) for r in rows}) == []          # --add: nothing to do
    assert len(kr.missing(chosen, set())) == len(rows)
    assert len(kr.configurations(kr.HEAD_DIMS)) == 157


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
