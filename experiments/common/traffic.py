"""Measured global-memory traffic of a list of cases, whichever way this run can measure it:
ncu's counters on a GPU, ``count_traffic`` under the CUDA simulator in cpu mode."""
from __future__ import annotations

from dataclasses import dataclass

from .cases import Case
from .context import RunContext
from .instrumented import count_case
from .kernels import build_kernels
from .measure import failure_note
from .ncu import Counters, profile_cases

BY_NCU = "ncu: SM-side crossbar sectors x 32 (L1 fetches and sends)"
BY_SIMULATOR = "count_traffic (CUDA simulator)"


@dataclass(frozen=True)
class MeasuredTraffic:
    """Bytes between the SMs and global memory (``read_bytes``/``write_bytes``: what the
    tiled algorithm's count predicts), plus DRAM bytes and kernel time where ncu gives them, and
    the reads of K and V where count_traffic gives them."""

    read_bytes: float
    write_bytes: float
    measured_by: str
    dram_bytes: float | None = None
    gpu_time_ms: float | None = None
    kernels: int | None = None
    kv_read_bytes: float | None = None

    @property
    def total_bytes(self) -> float:
        return self.read_bytes + self.write_bytes

    @classmethod
    def from_counters(cls, c: Counters) -> "MeasuredTraffic":
        return cls(c.l2_read_bytes, c.l2_write_bytes, BY_NCU, c.dram_bytes, c.gpu_time_ms, c.kernels)


def measured_columns(got: MeasuredTraffic | str) -> dict:
    """The CSV's measured columns of one case (None where it was not measured: ``got`` is the
    note saying why)."""
    ok = isinstance(got, MeasuredTraffic)
    return {"measured": got.total_bytes if ok else None, "measured_by": got.measured_by if ok else None,
            "measured_read": got.read_bytes if ok else None, "measured_write": got.write_bytes if ok else None,
            "measured_kv_read": got.kv_read_bytes if ok else None,
            "dram_measured": got.dram_bytes if ok else None}


def compared_columns(got: MeasuredTraffic | str, predicted) -> dict:
    """``measured_columns``, then the prediction's (``model.Predicted.columns``; ``predicted``
    a ``model.predicted_or_note`` answer), and the ``note`` naming what is missing."""
    row = measured_columns(got)
    notes = [] if isinstance(got, MeasuredTraffic) else [got]
    if isinstance(predicted, str):
        notes.append(predicted)
    else:
        row.update(predicted.columns())
    row["note"] = "; ".join(n for n in notes if n)
    return row


def measure_traffic(ctx: RunContext, name: str, cases: list[Case]) -> dict[Case, MeasuredTraffic | str]:
    """Traffic of each case, or the note saying why it could not be measured."""
    if ctx.gpu:
        build_kernels(ctx, name, cases)
        bar = ctx.progress(cases, f"{name}: ncu")
        with bar:
            counters = profile_cases(cases, ctx.folder(name) / "ncu", progress=bar)
        return {case: MeasuredTraffic.from_counters(c) if isinstance(c, Counters) else c
                for case, c in counters.items()}
    measured: dict[Case, MeasuredTraffic | str] = {}
    for case in ctx.progress(cases, f"{name}: count_traffic"):
        try:
            counted = count_case(case)
        except Exception as exc:  # recorded in the CSV's note; the other points still run
            measured[case] = failure_note(exc)
            continue
        measured[case] = MeasuredTraffic(counted.read_bytes, counted.write_bytes, BY_SIMULATOR,
                                         kv_read_bytes=counted.kv_read_bytes)
    return measured
