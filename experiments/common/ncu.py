"""Hardware counters from Nsight Compute, driven from the script itself.

``profile_cases`` writes the cases to a JSON file and runs ``ncu ... python -m
experiments.common.ncu_target`` on them: the child runs each case once unprofiled (JIT compile,
warm-up), then once more between ``cuProfilerStart``/``Stop`` (ncu runs with
``--profile-from-start off``), launching a tiny marker kernel first.  The kernels between one
marker and the next are that case's kernels; their counters are summed.

ncu's default ``--cache-control all`` flushes the caches before every profiled kernel, so each
kernel starts with a cold L2: DRAM bytes are those of the kernel alone.  ``--clock-control
none`` leaves the clocks as they are.  SM<->L2 bytes are the SMs' side of the crossbar: sectors
their L1s fetch (global and local loads that miss) and send (stores, reductions), x 32. The L2
slices count fewer read sectors (``l2_read_sectors``): the L2's request coalescer merges reads
of one sector by several SMs at once.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .cases import Case

#: The counters every profiled kernel gets (docs/hardware-counters.md): ncu name -> our name.
#: Counts (``.sum``) add up over a case's kernels; the ``pct`` and ``launch`` readings are per
#: kernel (see ``sum_counters``).
METRICS = {
    "dram__bytes_read.sum": "dram_read_bytes",
    "dram__bytes_write.sum": "dram_write_bytes",
    "lts__t_sectors_srcunit_tex_op_read.sum": "l2_read_sectors",
    "lts__t_sectors_srcunit_tex_op_write.sum": "l2_write_sectors",
    "lts__t_sectors_srcunit_tex_op_red.sum": "l2_red_sectors",
    "lts__t_sectors_srcunit_tex_op_atom.sum": "l2_atom_sectors",
    "l1tex__m_xbar2l1tex_read_sectors_mem_lg_op_ld.sum": "xbar_ld_sectors",
    "l1tex__m_l1tex2xbar_write_sectors_mem_lg_op_st.sum": "xbar_st_sectors",
    "l1tex__m_l1tex2xbar_write_sectors_mem_global_op_red.sum": "xbar_red_sectors",
    "l1tex__m_l1tex2xbar_write_sectors_mem_global_op_atom.sum": "xbar_atom_sectors",
    "lrc__lrc2xbar_sectors_op_read.sum": "lrc_read_sectors",
    "lrc__lrc2xbar_sectors_op_read_coalescing_achieved.sum": "lrc_coalesced_sectors",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "l1_ld_requests",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "l1_ld_sectors",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum": "l1_ld_hit_sectors",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "l1_st_requests",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "l1_st_sectors",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_red.sum": "l1_red_sectors",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum": "local_ld_sectors",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_ld_lookup_hit.sum": "local_ld_hit_sectors",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum": "local_st_sectors",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "smem_ld_wavefronts",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": "smem_st_wavefronts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "smem_ld_conflicts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "smem_st_conflicts",
    "smsp__inst_executed_op_shared_ld.sum": "smem_ld_instructions",
    "smsp__inst_executed_op_shared_st.sum": "smem_st_instructions",
    "sm__inst_executed.sum": "instructions",
    "sm__inst_executed_pipe_tensor_op_hmma.sum": "hmma_instructions",
    "sm__inst_executed_pipe_fma.sum": "fma_instructions",
    "sm__inst_executed_pipe_alu.sum": "alu_instructions",
    "sm__inst_executed_pipe_xu.sum": "xu_instructions",
    "sm__inst_executed_pipe_lsu.sum": "lsu_instructions",
    "sm__inst_executed_pipe_uniform.sum": "uniform_instructions",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pipe_pct",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "fma_pipe_pct",
    "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active": "alu_pipe_pct",
    "sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active": "shared_pipe_pct",
    "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active": "lsu_pipe_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "warps_active_pct",
    "sm__cycles_elapsed.avg": "sm_cycles",
    "sm__cycles_elapsed.avg.per_second": "sm_clock_hz",
    "gpu__time_duration.sum": "gpu_time_ns",
    "launch__grid_size": "grid_blocks",
    "launch__block_size": "block_threads",
    "launch__registers_per_thread": "registers",
    "launch__occupancy_limit_registers": "blocks_limit_registers",
    "launch__occupancy_limit_shared_mem": "blocks_limit_shared_mem",
    "launch__occupancy_limit_warps": "blocks_limit_warps",
    "launch__waves_per_multiprocessor": "waves",
}
#: Readings of one kernel that do not add up over kernels (percentages, clocks, launch shape).
PER_KERNEL = {name for ncu_name, name in METRICS.items()
              if ".pct_" in ncu_name or ncu_name.startswith("launch__") or ncu_name.endswith(".avg")
              or ncu_name.endswith(".per_second")}
SECTOR_BYTES = 32
#: Name of the marker kernel launched before each profiled case (see ncu_target).
MARKER = "ncu_case_marker"
TIMEOUT_S = 420

_UNIT_SCALE = {
    "byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
    "kibyte": 2.0**10, "mibyte": 2.0**20, "gibyte": 2.0**30,
    "nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
    "second": 1e9, "s": 1e9, "hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9,
    "cycle/second": 1.0, "cycle/nsecond": 1e9, "cycle/usecond": 1e6,
}
#: Units read as plain counts (``--print-units base`` prints no prefix on them).
_COUNT_UNITS = {"", "sector", "sectors", "request", "inst", "cycle", "warp", "block", "thread",
                "%", "register/thread", "wavefront", "byte/second"}


@dataclass(frozen=True)
class Counters:
    """Counters summed over every kernel a case launched (bytes, and GPU time in ms), and each
    kernel's own readings: ``per_kernel[k]`` maps our metric names (``METRICS`` values) and
    "name" (the kernel's name) to its values, in launch order."""

    dram_read_bytes: float
    dram_write_bytes: float
    l2_read_bytes: float
    l2_write_bytes: float
    gpu_time_ms: float
    kernels: int
    per_kernel: tuple[dict, ...] = ()

    @property
    def dram_bytes(self) -> float:
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def l2_bytes(self) -> float:
        return self.l2_read_bytes + self.l2_write_bytes


def ncu_command(spec: Path, result: Path, log: Path) -> list[str]:
    return ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--print-units", "base",
            "--metrics", ",".join(METRICS), "--csv", "--log-file", str(log),
            sys.executable, "-m", "experiments.common.ncu_target", str(spec), str(result)]


def profile_cases(cases: list[Case], workdir: Path, progress=None) -> dict[Case, Counters | str]:
    """Counters for each case, or a string saying why there are none (ncu missing, the case
    failed, ...).  Never raises for a failure of ncu or of one case.  ``progress`` (a tqdm bar)
    is advanced as the child finishes cases."""
    if shutil.which("ncu") is None:
        return {case: "ncu not found on PATH" for case in cases}
    workdir.mkdir(parents=True, exist_ok=True)
    spec, result, log = workdir / "ncu_cases.json", workdir / "ncu_result.json", workdir / "ncu.csv"
    spec.write_text(json.dumps([case.to_json() for case in cases]))
    result.unlink(missing_ok=True)
    returncode = _run_watching(ncu_command(spec, result, log), workdir / "ncu_output.txt", result, progress)
    if returncode is None:
        return {case: f"ncu timed out after {TIMEOUT_S} s" for case in cases}
    if not result.exists():
        tail = (workdir / "ncu_output.txt").read_text()[-300:].strip()
        return {case: f"ncu child failed (rc {returncode}): {tail}" for case in cases}
    return read_profile(workdir, cases)


def read_profile(workdir: Path, cases: list[Case]) -> dict[Case, Counters | str]:
    """``profile_cases``' answer from the folder a run of it left (``ncu_result.json``, and
    ``ncu.csv`` or, as a run is committed, ``ncu.csv.gz``): counters for each case, or a string
    saying why there are none.  Also what reads a committed run again without a GPU."""
    outcomes = json.loads((workdir / "ncu_result.json").read_text())  # [{"index", "marked", "error"}]
    log, packed = workdir / "ncu.csv", workdir / "ncu.csv.gz"
    text = log.read_text() if log.exists() else gzip.open(packed, "rt").read() if packed.exists() else ""
    try:
        segments = split_by_marker(parse_ncu_csv(text))
    except ValueError as exc:               # a cell or unit this parser does not know
        return {case: f"ncu output unreadable: {exc}" for case in cases}
    answers: dict[Case, Counters | str] = {}
    marked = [o for o in outcomes if o["marked"]]
    if len(segments) != len(marked):
        reason = f"ncu reported {len(segments)} marked cases, the child ran {len(marked)}"
        return {case: reason for case in cases}
    for outcome, kernels in zip(marked, segments):
        case = cases[outcome["index"]]
        answers[case] = outcome["error"] or (sum_counters(kernels) if kernels else "no kernels profiled")
    for outcome in outcomes:
        if not outcome["marked"]:
            answers[cases[outcome["index"]]] = outcome["error"] or "not profiled"
    return {case: answers.get(case, "not run by the ncu child") for case in cases}


def _run_watching(command: list[str], output: Path, result: Path, progress) -> int | None:
    """Run ``command`` (stdout and stderr to ``output``), advancing ``progress`` as the child
    appends outcomes to ``result``; the return code, or None after TIMEOUT_S."""
    started = time.monotonic()
    with open(output, "w") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            if time.monotonic() - started > TIMEOUT_S:
                proc.kill()
                proc.wait()
                return None
            time.sleep(1.0)
            if progress is not None and result.exists():
                try:
                    done = len(json.loads(result.read_text()))
                except ValueError:  # caught mid-write
                    continue
                progress.update(done - progress.n)
    return proc.returncode


def parse_ncu_csv(text: str) -> list[dict]:
    """Kernels in launch order: ``{"name": str, <our metric name>: value in base units}``.

    Reads ncu's long format (one row per kernel and metric) and its wide format (one row per
    kernel, a units row under the header); lines before the header (==PROF== ...) are skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    kernels: dict[str, dict] = {}
    if "Metric Name" in header:
        col = {name: header.index(name) for name in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")}
        for r in body:
            metric = METRICS.get(r[col["Metric Name"]])
            kernel = kernels.setdefault(r[col["ID"]], {"name": r[col["Kernel Name"]]})
            if metric:
                kernel[metric] = _value(r[col["Metric Value"]], r[col["Metric Unit"]])
        return [kernels[k] for k in sorted(kernels, key=int)]
    units = body[0] if body and body[0][0] == "" else [""] * len(header)
    id_col, name_col = header.index("ID"), header.index("Kernel Name")
    for r in body:
        if r[id_col] == "":
            continue
        kernel = {"name": r[name_col]}
        for i, metric in enumerate(header):
            if metric in METRICS:
                kernel[METRICS[metric]] = _value(r[i], units[i])
        kernels[r[id_col]] = kernel
    return [kernels[k] for k in sorted(kernels, key=int)]


def _value(cell: str, unit: str) -> float:
    unit = unit.strip().lower()
    if unit in _UNIT_SCALE:
        scale = _UNIT_SCALE[unit]
    elif unit in _COUNT_UNITS:
        scale = 1.0
    else:
        raise ValueError(f"unknown ncu unit {unit!r}")
    return float(cell.replace(",", "")) * scale


def split_by_marker(kernels: list[dict]) -> list[list[dict]]:
    """The kernels after each marker kernel, up to the next marker (kernels before the first
    marker belong to no case and are dropped)."""
    segments: list[list[dict]] = []
    for kernel in kernels:
        if MARKER in kernel["name"]:
            segments.append([])
        elif segments:
            segments[-1].append(kernel)
    return segments


def sum_counters(kernels: list[dict]) -> Counters:
    """A case's counters: the sums of its kernels' counts (a metric a kernel lacks counts 0),
    with every kernel's readings kept in ``per_kernel``."""
    total = {metric: sum(k.get(metric, 0.0) for k in kernels)
             for metric in METRICS.values() if metric not in PER_KERNEL}
    return Counters(
        dram_read_bytes=total["dram_read_bytes"],
        dram_write_bytes=total["dram_write_bytes"],
        l2_read_bytes=total["xbar_ld_sectors"] * SECTOR_BYTES,
        l2_write_bytes=(total["xbar_st_sectors"] + total["xbar_red_sectors"]
                        + total["xbar_atom_sectors"]) * SECTOR_BYTES,
        gpu_time_ms=total["gpu_time_ns"] / 1e6,
        kernels=len(kernels),
        per_kernel=tuple(dict(k) for k in kernels),
    )


def profile_child(metrics: str, code: str, args: list[str], options: tuple = (), timeout: int = 300):
    """``ncu --clock-control none --csv --metrics METRICS [OPTIONS] python -c CODE ARGS``: the
    kernels it profiled (``parse_ncu_csv``, in launch order) and its stderr; None for the
    kernels when ncu is not on the PATH (the microbenchmarks' children: calibrate)."""
    if shutil.which("ncu") is None:
        return None, "ncu not found"
    out = subprocess.run(["ncu", "--clock-control", "none", "--print-units", "base", "--csv", *options,
                          "--metrics", metrics, sys.executable, "-c", code, *args],
                         capture_output=True, text=True, timeout=timeout)
    return parse_ncu_csv(out.stdout), out.stderr


def profile_launches(metrics: str, code: str, expected: int, args=(), timeout: int = 300) -> list[dict]:
    """The readings of the ``expected`` kernels ``python -c CODE ARGS`` launches between its
    profiler start and stop (``profile_child`` with ``--profile-from-start off``), in order;
    SystemExit with ncu's reason otherwise (the microbenchmarks of tools/)."""
    kernels, stderr = profile_child(metrics, code, list(args), ("--profile-from-start", "off"), timeout)
    if not kernels or len(kernels) != expected:
        sys.exit(f"ncu gave {len(kernels or [])} readings of {expected}: {stderr[-2000:]}")
    return kernels
