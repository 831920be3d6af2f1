"""The recorded kernel tables (simulator/kernel_resources.csv, kernel_sass.csv, kernel_loops.json.gz)
hold the kernels the IO experiments launch at their own tilings on the GPU -- fig2_middle's Bc
sweep, io_scaling's M sweep -- so that the model times them from their compiled code and spills
(``tools/kernel_resources.py --experiments``), not from a roofline. Model lookups only: fast."""
from types import SimpleNamespace

import pytest

from experiments import fig2_middle, io_scaling
from experiments.common.cases import Case
from simulator.issue import loop_record
from simulator.occupancy import resources
from simulator.sass import sass


def _fig2_middle_cases():
    shape = fig2_middle.SHAPE
    return [Case(method, "fwd", tiling=(fig2_middle.BR, bc), dtype=dtype, **shape)
            for method, dtype in fig2_middle.VARIANTS for bc in fig2_middle.BCS
            if not fig2_middle.tiling_fits(method, fig2_middle.BR, bc, shape["d"])]


def _io_scaling_cases():
    sweeps = io_scaling._sweeps(SimpleNamespace(gpu=True, quick=False))
    return [case for _, _, case in sweeps if case.method != "standard"]


CASES = list(dict.fromkeys(_fig2_middle_cases() + _io_scaling_cases()))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.method}-{c.dtype}-d{c.d}-{c.tiling}")
def test_every_tiling_the_experiments_run_is_recorded(case):
    kernel = case.simulator_algorithms()[0]
    tiling = case.tiling_object()
    assert resources(kernel, tiling, case.d, case.causal).registers > 0
    assert sass(kernel, tiling, case.d, case.causal).total > 0
    assert loop_record(kernel, tiling, case.d, case.causal)["instructions"]


def test_the_sweeps_include_non_default_tilings():
    """The check above is not vacuous: the sweeps leave the default tilings."""
    from simulator.tiling import Tiling

    assert any(c.tiling_object() != Tiling.kernel_default(c.simulator_algorithms()[0], c.d)
               for c in CASES)
    assert len(CASES) >= 10
