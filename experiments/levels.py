"""Every memory level and the runtime of each kernel we ship, measured by ncu beside the model.

For each configuration (a case: method, passes, shape, causal) and each algorithm its calls run
(the forward, and the backward for fwd_bwd), the levels of ``simulator.levels`` -- SM<->L2 bytes
by direction, DRAM bytes by direction, the L1 hit rate of global loads, local-memory (spill)
bytes, shared-memory wavefronts and kernel time -- are read from ncu's counters
(``experiments.common.ncu``) and predicted by ``simulator.predict``.  ``measure(algorithm,
workload, tiling)`` does the same for one configuration of anyone's choosing.

Configurations: DEVELOPMENT, on which the model's structure was worked out; VALIDATION, held
out (measured once before the model's last change, the nested loops' trip counts of
``simulator.trips``, and once after); VALIDATION_2, held out until the model was final. No
model constant is fitted to any of them: the machine rates come from the ``calibrate``
microbenchmarks.  Every kernel's raw counters go to ``levels_kernels.csv``.
CPU mode: the predictions alone (ncu needs the GPU) -- or, where the results folder holds a GPU
run's ``levels_kernels.csv``, that run's counters beside this model's predictions (``repredict``).
"""
from __future__ import annotations

import dataclasses
import functools
import statistics
import tempfile
from pathlib import Path

from experiments.common import model, plotting
from experiments.common.cases import Case
from experiments.common.context import NO_GPU, RunContext
from experiments.common.kernels import build_kernels
from experiments.common.ncu import Counters, profile_cases
from experiments.common.results import write_rows
from simulator.levels import LEVEL_NAMES, UNITS, Levels

NAME = "levels"
MEASURED_BY = "ncu (--clock-control none, caches flushed before each kernel)"

#: simulator algorithm -> (method, passes, deterministic) of the case whose calls run it.
CASE_OF_ALGORITHM = {
    "standard_forward": ("standard", "fwd", False),
    "standard_backward": ("standard", "fwd_bwd", False),
    "flash_forward_v1": ("fa1", "fwd", False),
    "flash_forward_v2": ("fa2_fma", "fwd", False),
    "flash_forward_tc": ("fa2", "fwd", False),
    "flash_backward": ("fa2_fma", "fwd_bwd", False),
    "flash_backward_tc": ("fa2", "fwd_bwd", False),
    "flash_backward_deterministic": ("fa2_fma", "fwd_bwd", True),
    "flash_forward_fp16x3": ("fa2_fp16x3", "fwd", False),
    "flash_backward_fp16x3": ("fa2_fp16x3", "fwd_bwd", False),
}

DEVELOPMENT = (
    Case("fa2", "fwd_bwd", 4, 16, 4096, 64),
    Case("fa2", "fwd_bwd", 4, 16, 4096, 128),
    Case("fa2", "fwd_bwd", 4, 16, 4096, 64, causal=True),
    Case("fa2_fma", "fwd_bwd", 4, 16, 2048, 64),
    Case("fa2_fma", "fwd_bwd", 2, 16, 1024, 64, deterministic=True),
    Case("fa1", "fwd", 1, 16, 2048, 64),
    Case("standard", "fwd_bwd", 1, 16, 1024, 64),
)
VALIDATION = (
    Case("fa2", "fwd_bwd", 2, 8, 2048, 32),
    Case("fa2", "fwd_bwd", 8, 16, 1024, 64),
    Case("fa2", "fwd_bwd", 1, 32, 8192, 64),
    Case("fa2", "fwd_bwd", 2, 16, 2048, 80),
    Case("fa2", "fwd_bwd", 2, 16, 2048, 128, causal=True),
    Case("fa2", "fwd_bwd", 1, 8, 4096, 32, causal=True),
    Case("fa2", "fwd_bwd", 16, 12, 512, 64),
    Case("fa2_fma", "fwd_bwd", 1, 16, 4096, 32),
    Case("fa2_fma", "fwd_bwd", 2, 8, 1024, 128),
    Case("fa1", "fwd", 1, 16, 1024, 32),
    Case("fa1", "fwd", 1, 8, 4096, 64),
    Case("standard", "fwd_bwd", 1, 8, 2048, 32),
    Case("standard", "fwd_bwd", 2, 16, 512, 128),
)
#: Held out until the model was final (measured once, with the model of its commit): kernels
#: already compiled for VALIDATION, at new shapes.
VALIDATION_2 = (
    Case("fa2", "fwd_bwd", 4, 8, 3072, 64, causal=True),
    Case("fa2", "fwd_bwd", 2, 24, 1536, 128),
    Case("fa2", "fwd_bwd", 6, 10, 2560, 32),
    Case("fa2", "fwd_bwd", 4, 12, 1024, 80),
    Case("fa2_fma", "fwd_bwd", 2, 16, 3072, 64),
    Case("fa1", "fwd", 1, 12, 3072, 64),
    Case("standard", "fwd_bwd", 2, 8, 1536, 64),
)
#: The fp16 / bf16 kernels (flash_forward_half, flash_backward_half), held out: never measured
#: before the half-precision mma rates entered the model (calibrate, 2026-12-02).
HALF = (
    Case("fa2", "fwd_bwd", 4, 16, 4096, 64, dtype="float16"),
    Case("fa2", "fwd_bwd", 2, 16, 2048, 128, causal=True, dtype="float16"),
    Case("fa2", "fwd_bwd", 4, 8, 2048, 32, dtype="bfloat16"),
    Case("fa2", "fwd_bwd", 4, 12, 1024, 80, dtype="float16"),
)
#: Held out from the model of 2026-12-02 (nested copies as compiled, global loads at L2's
#: latency, the shared-SM tail), measured once after it was committed: new shapes, kernels
#: already compiled for the splits above.
VALIDATION_3 = (
    Case("fa2", "fwd_bwd", 3, 12, 2304, 64),
    Case("fa2", "fwd_bwd", 2, 20, 1792, 128, causal=True),
    Case("fa2", "fwd_bwd", 8, 6, 1280, 32, causal=True),
    Case("fa2", "fwd_bwd", 5, 8, 2048, 80),
    Case("fa2_fma", "fwd_bwd", 3, 8, 2560, 32),
    Case("fa1", "fwd", 1, 8, 2048, 32),
    Case("standard", "fwd_bwd", 3, 8, 1024, 64),
    Case("fa2", "fwd_bwd", 3, 12, 1536, 64, dtype="float16"),
    Case("fa2", "fwd_bwd", 2, 16, 2560, 128, causal=True, dtype="bfloat16"),
)
#: Held out from the model of 2026-12-02's end (Algorithm 1's loops, DRAM's share of the load
#: latency): new shapes on kernels already compiled for the splits above.
VALIDATION_4 = (
    Case("fa2", "fwd_bwd", 2, 14, 3584, 64),
    Case("fa2", "fwd_bwd", 6, 16, 768, 128),
    Case("fa2", "fwd_bwd", 3, 10, 2560, 32, causal=True),
    Case("fa2", "fwd_bwd", 1, 24, 5120, 64, causal=True),
    Case("fa2_fma", "fwd_bwd", 2, 12, 2048, 128),
    Case("fa1", "fwd", 1, 20, 1536, 64),
    Case("standard", "fwd_bwd", 2, 12, 768, 128),
    Case("fa2", "fwd_bwd", 2, 16, 3072, 128, causal=True, dtype="float16"),
    Case("fa2", "fwd_bwd", 6, 8, 1024, 32, dtype="bfloat16"),
)
#: Held out from the shared-memory model of 2026-12-03 (wavefronts from the kernels' access
#: patterns, ``simulator.banks``: bank conflicts, the half-warp rule of vector accesses, cp.async
#: copies), measured once after it was committed: new shapes, and head dims (80, 128) the FFMA,
#: Algorithm 1 and standard kernels were not measured at.
VALIDATION_5 = (
    Case("fa2", "fwd_bwd", 2, 12, 2560, 80, causal=True),
    Case("fa2", "fwd_bwd", 3, 16, 1280, 128),
    Case("fa2_fma", "fwd_bwd", 2, 10, 2560, 80),
    Case("fa2_fma", "fwd_bwd", 4, 8, 2048, 32, causal=True),
    Case("fa2_fma", "fwd_bwd", 3, 8, 1536, 128, deterministic=True),
    Case("fa1", "fwd", 1, 10, 2560, 128),
    Case("fa1", "fwd", 2, 8, 1024, 80),
    Case("standard", "fwd_bwd", 1, 12, 1280, 80),
    Case("fa2", "fwd_bwd", 3, 8, 2048, 80, dtype="bfloat16"),
    Case("fa2", "fwd_bwd", 2, 12, 1536, 32, causal=True, dtype="float16"),
)
#: Held out from the dirty-residue model of 2026-12-04 (the write share of the L2 capacity the
#: working set leaves, the capacity from calibrate's hot-set sweep), measured once after it was
#: committed: new shapes, write shares and working sets on kernels already compiled.
VALIDATION_6 = (
    Case("fa2", "fwd_bwd", 2, 16, 3584, 64),
    Case("fa2", "fwd_bwd", 4, 10, 2048, 128),
    Case("fa2", "fwd_bwd", 12, 8, 1536, 32),
    Case("fa2", "fwd_bwd", 3, 16, 2304, 80, causal=True),
    Case("fa2_fma", "fwd_bwd", 2, 14, 2048, 64),
    Case("fa2_fma", "fwd_bwd", 5, 8, 1280, 128),
    Case("fa1", "fwd", 2, 8, 3072, 64),
    Case("standard", "fwd_bwd", 2, 10, 1024, 64),
    Case("fa2", "fwd_bwd", 2, 16, 4096, 64, dtype="bfloat16"),
    Case("fa2", "fwd_bwd", 3, 12, 2048, 128, dtype="float16"),
)
#: fa2_fp16x3 (the fp32 forward from three fp16 products: the heads' maxima, the split into
#: fp16 parts, the fp16 kernel on them), held out: never measured under ncu before its model
#: (simulator.fp16x3, 2026-12-05) was committed; d = 64 and 128, where its kernels' registers
#: and SASS are recorded. Measured on the H200 on 2026-12-06 (results/h200/levels/fp16x3).
FP16X3 = (
    Case("fa2_fp16x3", "fwd", 2, 16, 2048, 64),
    Case("fa2_fp16x3", "fwd", 4, 8, 3072, 64, causal=True),
    Case("fa2_fp16x3", "fwd", 8, 12, 1024, 64),
    Case("fa2_fp16x3", "fwd", 1, 32, 6144, 64),
    Case("fa2_fp16x3", "fwd", 2, 16, 2048, 128),
    Case("fa2_fp16x3", "fwd", 3, 12, 2560, 128, causal=True),
    Case("fa2_fp16x3", "fwd", 6, 8, 1536, 128),
    Case("fa2_fp16x3", "fwd", 1, 16, 8192, 128, causal=True),
)
#: fa2_fp16x3's backward (the maxima and parts of q, k, v and dO, D with dq zeroed, the fp16
#: backward on the parts), held out: never measured under ncu before its model
#: (simulator.fp16x3's flash_backward_fp16x3 with the kernel tables of 2026-12-06) was
#: committed; d = 64 and 128 (the default tilings 64 x 128 and 32 x 128, whose registers and SASS
#: are recorded), causal and not, shapes neither the bench nor the tests time. The first two
#: measured on an H100 on 2026-12-06 (results/h100/levels/fp16x3_backward), and the model
#: changed after them (a head's start code once a head, cp.async.cg copies beside spills); the
#: other four on 2026-12-07, held out until then.
FP16X3_BACKWARD = (
    Case("fa2_fp16x3", "fwd_bwd", 2, 16, 2048, 64),
    Case("fa2_fp16x3", "fwd_bwd", 4, 8, 3072, 64, causal=True),
    Case("fa2_fp16x3", "fwd_bwd", 3, 12, 1536, 64),
    Case("fa2_fp16x3", "fwd_bwd", 2, 16, 2048, 128),
    Case("fa2_fp16x3", "fwd_bwd", 3, 12, 2560, 128, causal=True),
    Case("fa2_fp16x3", "fwd_bwd", 5, 8, 1280, 128),
)
#: Every split measured on the GPU, by name.
SPLITS = {"development": DEVELOPMENT, "validation": VALIDATION, "validation_2": VALIDATION_2,
          "half": HALF, "validation_3": VALIDATION_3, "validation_4": VALIDATION_4,
          "validation_5": VALIDATION_5, "validation_6": VALIDATION_6, "fp16x3": FP16X3,
          "fp16x3_backward": FP16X3_BACKWARD}
#: CPU mode: the model alone, at a few of the same configurations.
CPU_CASES = DEVELOPMENT[:2] + VALIDATION[:2]


def measured_levels(kernels: list[dict]) -> Levels:
    """``Levels`` of a list of ncu kernel readings (``Counters.per_kernel`` entries). SM<->L2
    bytes are the SMs' side of the crossbar (what their L1s fetch and send): the L2 slices count
    fewer read sectors, as the L2's request coalescer merges reads of one sector from several SMs
    (``lts_read_bytes`` in levels_kernels.csv keeps that count)."""
    def s(key):
        return float(sum(k.get(key, 0.0) for k in kernels))
    return Levels(
        sm_l2_read_bytes=32 * s("xbar_ld_sectors"),
        sm_l2_write_bytes=32 * (s("xbar_st_sectors") + s("xbar_red_sectors") + s("xbar_atom_sectors")),
        dram_read_bytes=s("dram_read_bytes"), dram_write_bytes=s("dram_write_bytes"),
        l1_requested_sectors=s("l1_ld_sectors"), l1_hit_sectors=s("l1_ld_hit_sectors"),
        local_bytes=32 * (s("local_ld_sectors") + s("local_st_sectors")),
        smem_wavefronts=s("smem_ld_wavefronts") + s("smem_st_wavefronts"),
        time_s=1e-9 * s("gpu_time_ns"))


def split_by_algorithm(case: Case, kernels: tuple[dict, ...], reports=None) -> dict[str, list[dict]]:
    """The case's kernel readings, per simulator algorithm: each algorithm launches one kernel
    per phase of its plan, in order (``reports``: the case's ``model.reports``, if the caller
    has them). ValueError if the counts disagree."""
    reports = reports or model.reports(case)
    launches = [len(r.phases) for r in reports]
    if sum(launches) != len(kernels):
        raise ValueError(f"{case.label}: ncu saw {len(kernels)} kernels "
                         f"({', '.join(k['name'][:40] for k in kernels)}), the model's plans have "
                         f"{launches}")
    out, start = {}, 0
    for algorithm, n in zip(case.simulator_algorithms(), launches):
        out[algorithm] = list(kernels[start:start + n])
        start += n
    return out


def case_for(algorithm: str, workload, tiling=None) -> Case:
    """The case whose calls run ``algorithm`` on ``workload`` (fp32, N_q = N_k, no custom
    diagonal: what ``Case`` describes); ValueError naming what is not supported."""
    if algorithm not in CASE_OF_ALGORITHM:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: {sorted(CASE_OF_ALGORITHM)}")
    if workload.N_q != workload.N_k:
        raise ValueError(f"measure: N_q ({workload.N_q}) != N_k ({workload.N_k}) is not "
                         "supported yet: give a workload with N_q == N_k")
    if workload.dtype_bytes != 4:
        raise ValueError("measure: the kernels run fp32 only: give dtype_bytes=4")
    if workload.diagonal is not None:
        raise ValueError("measure: give diagonal=None (the kernels' default, bottom-right)")
    method, passes, deterministic = CASE_OF_ALGORITHM[algorithm]
    pair = None if tiling is None else (tiling.Br, tiling.Bc)
    return Case(method, passes, workload.B, workload.H, workload.N_q, workload.d,
                causal=workload.causal, tiling=pair, deterministic=deterministic)


def measure(algorithm: str, workload, tiling=None, workdir: Path | None = None) -> Levels:
    """Measure ``algorithm`` on ``workload`` (a ``simulator.Workload``) with ``tiling`` (None:
    the kernels' default) on this machine's GPU under ncu: the same ``Levels`` that
    ``simulator.predict(algorithm, workload, tiling).levels`` predicts. For a backward
    algorithm the forward runs first (outside the count); with a tiling, both calls take it.
    RuntimeError with ncu's reason when nothing could be measured."""
    import numba_flash
    from experiments.common.kernels import kernel_config

    case = case_for(algorithm, workload, tiling)
    numba_flash.warmup([kernel_config(case)])
    with tempfile.TemporaryDirectory() as tmp:
        counters = profile_cases([case], Path(workdir or tmp))[case]
    if not isinstance(counters, Counters):
        raise RuntimeError(f"measure({algorithm!r}, ...): {counters}")
    return measured_levels(split_by_algorithm(case, counters.per_kernel)[algorithm])


def _case_columns(case: Case, report, split: str) -> dict:
    t = report.tiling
    return {"split": split, "method": case.method, "passes": case.passes, "B": case.B, "H": case.H,
            "N": case.N, "d": case.d, "causal": case.causal,
            "deterministic": case.deterministic, "dtype": case.dtype,
            "Br": t.Br if t else None, "Bc": t.Bc if t else None}


def rows_for(case: Case, split: str, counters: Counters | str | None,
             gpu: str = model.MEASURED_GPU) -> tuple[list[dict], list[dict]]:
    """(level rows, kernel rows) of one case: per algorithm and level, measured beside
    predicted (for Hardware ``gpu``, the GPU measured: ``model.gpu_of_device``); per kernel
    launch, every raw counter."""
    reports = model.reports(case, gpu=gpu)
    measured, note = {}, ""
    kernel_rows = []
    if isinstance(counters, Counters):
        try:
            by_algorithm = split_by_algorithm(case, counters.per_kernel, reports)
        except ValueError as exc:
            note = str(exc)
        else:
            for algorithm, kernels in by_algorithm.items():
                measured[algorithm] = measured_levels(kernels)
                kernel_rows += [{"case": case.label, "algorithm": algorithm, "launch": i, **k}
                                for i, k in enumerate(kernels)]
    else:
        note = counters or ""
    rows = []
    for algorithm, report in zip(case.simulator_algorithms(), reports):
        predicted = report.levels.as_dict() if report.levels is not None else {}
        got = measured[algorithm].as_dict() if algorithm in measured else {}
        for level in LEVEL_NAMES:
            rows.append({"kernel": algorithm, "quantity": level, "unit": UNITS.get(level, "bytes"),
                         "measured": got.get(level), "measured_by": MEASURED_BY if got else "",
                         "predicted": predicted.get(level), "predicted_for": gpu,
                         **_case_columns(case, report, split),
                         "note": "" if got else note})
    return rows, kernel_rows


def collect(ctx: RunContext, cases_by_split: dict[str, tuple[Case, ...]]) -> list[dict]:
    """Level rows of every case (measured on the GPU, predicted always); writes the kernels'
    raw counters to ``levels_kernels.csv`` beside."""
    everything = [c for cases in cases_by_split.values() for c in cases]
    counters: dict = {}
    if ctx.gpu:
        build_kernels(ctx, NAME, everything)
        bar = ctx.progress(everything, f"{NAME}: ncu")
        with bar:
            counters = profile_cases(everything, ctx.folder(NAME) / "ncu", progress=bar)
    else:
        ctx.skip(f"{NAME}: hardware counters ({NO_GPU})")
    rows, kernel_rows, gpu = [], [], model.card(ctx.device)
    for split, cases in cases_by_split.items():
        for case in cases:
            got = counters.get(case, NO_GPU if not ctx.gpu else "not profiled")
            case_rows, case_kernels = rows_for(case, split, got, gpu)
            rows += case_rows
            kernel_rows += case_kernels
    if kernel_rows:
        from experiments.common.metadata import run_metadata

        write_rows(ctx.folder(NAME) / "levels_kernels.csv", kernel_rows,
                   run_metadata(NAME, ctx.device, ctx.command))
    _print(rows)
    return rows


@functools.lru_cache(maxsize=None)
def _split_names() -> dict[str, str]:
    """Case label -> the name of its split (``SPLITS``), built once."""
    return {c.label: name for name, cases in SPLITS.items() for c in cases}


def split_of(case: Case) -> str:
    """The name of the split (``SPLITS``) ``case`` was measured in: its label's, or where its
    label names a tiling no split's case does (measured at a default tiling since changed, and
    labelled with it), its label's without the tiling; "other" where neither is a split's."""
    splits = _split_names()
    return splits.get(case.label) or splits.get(dataclasses.replace(case, tiling=None).label, "other")


def repredict(kernels_csv: Path) -> list[dict]:
    """Level rows of a GPU run's raw counters (its ``levels_kernels.csv``) beside this model's
    predictions for the GPU measured (``model.card_of``: an H100's by its datasheet and its
    own calibrate rates, ``simulator.runtime.RATES_OF``; a GPU without a datasheet as the H200,
    as ``model.card`` predicted it on that GPU): the model can change without a
    GPU and its errors be read again. The measurement's device, date and commit go in
    ``measured_*`` columns."""
    from experiments.common.repredict import measurement

    rows = []
    for label, launches in read_kernels(kernels_csv).items():
        case = Case.from_label(label)
        counters = Counters(0, 0, 0, 0, 0, len(launches), tuple(k for _, k in launches))
        gpu = _measured_gpu(launches)
        case_rows, _ = rows_for(case, split_of(case), counters, gpu)
        for row in case_rows:
            row.update(measurement(launches[0][0]))
        rows += case_rows
    _print(rows)
    return rows


def read_kernels(kernels_csv: Path) -> dict[str, list[tuple[dict, dict]]]:
    """A GPU run's raw counters (its ``levels_kernels*.csv``) by case label, each launch as (its
    CSV row, its ncu reading: the kernel's name and every counter the row has, as numbers)."""
    from experiments.common.metadata import METADATA_COLUMNS
    from experiments.common.results import number, read_rows

    by_case: dict[str, list[tuple[dict, dict]]] = {}
    for r in read_rows(kernels_csv):
        kernel = {k: (v if k == "name" else number(v)) for k, v in r.items()
                  if k not in ("case", "algorithm", "launch") and k not in METADATA_COLUMNS}
        by_case.setdefault(r["case"], []).append((r, {k: v for k, v in kernel.items() if v is not None}))
    return by_case


def _measured_gpu(launches: list) -> str:
    """The Hardware of the GPU a case's launches (``read_kernels``) were measured on
    (``model.card_of`` of the first one)."""
    from experiments.common.repredict import measurement

    return model.card_of(measurement(launches[0][0]))


def per_launch(kernels_csv: Path) -> list[dict]:
    """Each kernel launch of a GPU run's raw counters (its ``levels_kernels*.csv``) beside the
    model's prediction for that launch (``report.launch_levels``) on the GPU measured
    (``_measured_gpu``: an H100 by its datasheet and its own calibrate rates): a
    row per case, algorithm, launch and level, with the launch's phase (the model's name),
    kernel (ncu's, without its signature) and ``predicted_for`` (the Hardware), and the
    measurement's device, date and commit in ``measured_*`` columns."""
    from experiments.common.repredict import measurement

    rows = []
    for label, launches in read_kernels(kernels_csv).items():
        case = Case.from_label(label)
        gpu = _measured_gpu(launches)
        reports = dict(zip(case.simulator_algorithms(), model.reports(case, gpu=gpu)))
        for r, kernel in launches:
            report = reports[r["algorithm"]]
            launch = int(r["launch"])
            if launch >= len(report.launch_levels):
                raise ValueError(f"{kernels_csv}: {label} {r['algorithm']} launch {launch}, but "
                                 f"the model's plan has {len(report.launch_levels)} launches")
            got = measured_levels([kernel]).as_dict()
            predicted = report.launch_levels[launch].as_dict()
            for level in LEVEL_NAMES:
                rows.append({"case": label, "algorithm": r["algorithm"], "launch": launch,
                             "phase": report.phases[launch].name, "kernel": short_name(r["name"]),
                             "quantity": level, "unit": UNITS.get(level, "bytes"),
                             "measured": got[level], "predicted": predicted[level],
                             "predicted_for": gpu, **measurement(r)})
    return rows


def short_name(ncu_name: str) -> str:
    """A kernel's name as ncu reports it, without module, specialisation and signature:
    ``split_half::head_amax[v1,...](Array<...>, ...)`` -> ``head_amax``."""
    return ncu_name.split("(")[0].split("[")[0].split("::")[-1]


def format_per_launch(rows: list[dict]) -> str:
    """``per_launch``'s rows as a table: a line a launch, each level measured / predicted (MB,
    wavefronts in thousands, time in us, the L1 hit rate in %)."""
    scale = {"bytes": (1e-6, "MB"), "wavefronts": (1e-3, "k"), "s": (1e6, "us"),
             "fraction": (100.0, "%")}
    launches: dict[tuple, dict] = {}
    for r in rows:
        launches.setdefault((r["case"], r["algorithm"], r["launch"]), {})[r["quantity"]] = r
    header = f"{'case':36s} {'launch':16s}" + "".join(
        f" {q[:-6] if q.endswith('_bytes') else q:>21s}" for q in LEVEL_NAMES)
    units = f"{'':53s}" + "".join(f" {'measured / predicted ' + scale[UNITS.get(q, 'bytes')][1]:>21s}"
                                  for q in LEVEL_NAMES)
    lines = [header, units]
    for (label, _, _), levels in launches.items():
        first = next(iter(levels.values()))
        cells = []
        for q in LEVEL_NAMES:
            factor = scale[UNITS.get(q, "bytes")][0]
            m, p = levels[q]["measured"], levels[q]["predicted"]
            cells.append(f" {m * factor:>10.4g}/{p * factor:<10.4g}")
        lines.append(f"{label[:36]:36s} {first['kernel'][:16]:16s}" + "".join(cells))
    return "\n".join(lines)


def per_kernel_errors(rows: list[dict], quantity: str = "time_s") -> list[dict]:
    """``per_launch``'s rows of one level summed up by kernel (ncu's name): launches, MAPE,
    median and range of the signed error (predicted - measured) / measured, in %; launches
    without a measured or predicted value (0, NaN) left out."""
    errors: dict[str, list[float]] = {}
    for r in rows:
        m, p = r["measured"], r["predicted"]
        if r["quantity"] == quantity and m and p == p:
            errors.setdefault(r["kernel"], []).append(100.0 * (p - m) / m)
    return [{"kernel": k, "launches": len(e), "mape": sum(map(abs, e)) / len(e),
             "median": statistics.median(e),
             "min": min(e), "max": max(e)} for k, e in errors.items()]


def split_rows(folder: Path) -> list[dict]:
    """The per-kernel rows of every split measured alone under ``folder`` (its
    ``<split>/levels_kernels_<split>.csv``, ``measure_alone``'s), each with its run's metadata."""
    from experiments.common.results import read_rows

    return [r for path in sorted(folder.glob("**/levels_kernels_*.csv")) for r in read_rows(path)]


def measure_alone(cases, split: str, out: Path, csv_name: str, command: str) -> None:
    """A few cases measured on their own (a split measured after a model change, cases whose
    kernels changed): their kernels built first, then their ncu counters; each level printed
    measured beside predicted (for this GPU: ``card``), and their per-kernel counters written
    to ``out / csv_name`` (the rows ``levels_kernels.csv`` takes; ``command`` for the run's
    metadata)."""
    import numba_flash
    from experiments.common.kernels import kernel_config
    from experiments.common.metadata import run_metadata

    print(numba_flash.warmup([kernel_config(c) for c in cases]), flush=True)
    counters = profile_cases(list(cases), out / "ncu")
    _write_alone(cases, split, counters, model.card("gpu"), out / csv_name, run_metadata("levels", "gpu", command))


def finish_alone(cases, split: str, out: Path, csv_name: str, metadata: dict) -> None:
    """``measure_alone``'s rows, on any machine, from the ncu folder (``out / "ncu"``) of a run
    whose ncu child finished but whose rows were never written (the device call's time ran
    out while the model predicted them): ``metadata``, that run's (its device, date, versions
    and commit: another split's CSV of the same call), names what was measured."""
    from experiments.common.ncu import read_profile

    counters = read_profile(out / "ncu", list(cases))
    _write_alone(cases, split, counters, model.card_of(metadata), out / csv_name, metadata)


def _write_alone(cases, split: str, counters: dict, gpu: str, path: Path, metadata: dict) -> None:
    """Print each case's levels measured beside predicted (for Hardware ``gpu``) and write its
    per-kernel counters to ``path``."""
    kernel_rows = []
    for c in cases:
        rows, kernels = rows_for(c, split, counters[c], gpu)
        kernel_rows += kernels
        for r in rows:
            if r["measured"] is not None:
                print(c.label, r["kernel"], r["quantity"], r["measured"], r["predicted"], flush=True)
            elif r["note"]:
                print(c.label, r["kernel"], r["quantity"], "NOTE", r["note"], flush=True)
    write_rows(path, kernel_rows, metadata)


def run(ctx: RunContext) -> list[dict]:
    if not ctx.gpu:
        measured = ctx.out / NAME / "levels_kernels.csv"
        if measured.exists():     # a GPU run's counters: predicted again by this model
            return repredict(measured)
        return collect(ctx, {"development": CPU_CASES})
    return collect(ctx, dict(SPLITS))


def _print(rows: list[dict]) -> None:
    for r in rows:
        m, p = r["measured"], r["predicted"]
        error = f"{100 * (p - m) / m:+7.1f} %" if m and p is not None else ""
        print(f"  {r['split'][:3]} {r['kernel']:28s} {r['B']}x{r['H']}x{r['N']}x{r['d']}"
              f"{' causal' if r['causal'] else ''}  {r['quantity']:17s} "
              f"measured {m if m is not None else '-':>12.4g}  predicted "
              f"{p if p is not None else '-':>12.4g} {error}"
              if m is not None and p is not None else
              f"  {r['split'][:3]} {r['kernel']:28s} {r['quantity']:17s} measured {m} predicted {p}")


def plot(rows: list[dict], path) -> None:
    levels = [name for name in LEVEL_NAMES if any(r["quantity"] == name for r in rows)]
    fig, axes = plotting.figure(4, 2, title="Every level, measured (ncu) vs predicted")
    for ax, level in zip(axes, levels):
        pairs = [r for r in rows if r["quantity"] == level and r["measured"] is not None
                 and r["predicted"] is not None]
        if not pairs:
            plotting.annotate_empty(ax, f"{level}: nothing measured in this run")
            continue
        kernels = list(dict.fromkeys(r["kernel"] for r in pairs))
        for i, kernel in enumerate(kernels):
            mine = [r for r in pairs if r["kernel"] == kernel]
            ax.plot([r["predicted"] for r in mine], [r["measured"] for r in mine], "o",
                    markerfacecolor="none", color=f"C{i % 10}", label=kernel)
        values = [v for r in pairs for v in (r["measured"], r["predicted"]) if v > 0]
        if values:
            lo, hi = min(values) / 1.5, max(values) * 1.5
            ax.plot([lo, hi], [lo, hi], color="black", linewidth=1)
        plotting.finish(ax, f"predicted {level}", "measured", loglog=level != "l1_hit_rate")
        ax.legend(fontsize=5)
    plotting.save(fig, path)



if __name__ == "__main__":
    # python -m experiments.levels SPLIT OUT: one split measured alone (a GPU);
    # python -m experiments.levels per-launch KERNELS_CSV OUT_CSV: its launches beside the model;
    # python -m experiments.levels gather DIR, finish SPLIT OUT SIBLING_CSV (below)
    import sys

    if sys.argv[1] == "per-launch":
        from experiments.common.metadata import run_metadata

        launch_rows = per_launch(Path(sys.argv[2]))
        print(format_per_launch(launch_rows))
        print("\ntime per kernel, (predicted - measured) / measured:")
        errors = per_kernel_errors(launch_rows)
        if not errors:
            print("  none predicted (no machine rates for this GPU: simulator.runtime.rates_for)")
        for e in errors:
            print(f"  {e['kernel']:24s} {e['launches']:4d} launches  MAPE {e['mape']:6.1f} %  median "
                  f"{e['median']:+6.1f} %  range {e['min']:+.0f} .. {e['max']:+.0f} %")
        write_rows(Path(sys.argv[3]), launch_rows, run_metadata(
            "levels", "cpu", f"python -m experiments.levels per-launch {sys.argv[2]} {sys.argv[3]}"))
    elif sys.argv[1] == "gather":
        # python -m experiments.levels gather DIR: the splits measured one by one into DIR/<split>/
        # (experiments/run_gpu.sh) as DIR/levels_kernels.csv, which a CPU run predicts again
        folder = Path(sys.argv[2])
        rows = split_rows(folder)
        if not rows:
            raise SystemExit(f"{folder}: no split's levels_kernels_<split>.csv to gather")
        write_rows(folder / "levels_kernels.csv", rows, {})
        print(f"{len(rows)} kernel rows -> {folder / 'levels_kernels.csv'}")
    elif sys.argv[1] == "finish":
        # python -m experiments.levels finish SPLIT OUT SIBLING_CSV: SPLIT's rows from OUT/ncu,
        # with the metadata of SIBLING_CSV (a split of the same device call) and this command
        from experiments.common.metadata import METADATA_COLUMNS
        from experiments.common.results import read_rows

        split, out = sys.argv[2], Path(sys.argv[3])
        first = read_rows(Path(sys.argv[4]))[0]
        metadata = {k: first[k] for k in METADATA_COLUMNS}
        metadata.update(command=f"python -m experiments.levels {split} OUT on the GPU (its ncu run "
                        f"finished, its rows not: the call's time ran out), then python -m "
                        f"experiments.levels finish {split} OUT {Path(sys.argv[4]).name} on a CPU",
                        note="")
        finish_alone(SPLITS[split], split, out, f"levels_kernels_{split}.csv", metadata)
    else:
        split, out = sys.argv[1], Path(sys.argv[2])
        measure_alone(SPLITS[split], split, out, f"levels_kernels_{split}.csv",
                      f"python -m experiments.levels {split} OUT (experiments.levels.measure_alone)")
