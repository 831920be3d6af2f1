"""numba_flash.warmup's pieces without a GPU: configs are checked, resolve the tilings the API
would launch, and ``build`` runs a config's calls (on the simulator, where nothing compiles)."""
import dataclasses
import pytest

import numba_flash as nf
from numba_flash import checks, precompile
from experiments.common.cases import Case
from experiments.common.kernels import kernel_config


@pytest.mark.parametrize("kwargs,match", [
    (dict(forward="fa3"), "KernelConfig.forward"),
    (dict(backward="fa1"), "KernelConfig.backward"),
    (dict(forward="fa2", backward="standard"), "standard backward needs the standard forward"),
])
def test_bad_configs_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        nf.KernelConfig(d=64, n_q=128, **kwargs)


@pytest.mark.parametrize("config,forward,backward", [
    (nf.KernelConfig(d=64, n_q=4096), ("flash_forward_tc",), ("flash_backward_tc",)),
    (nf.KernelConfig(d=24, n_q=37, causal=True), ("flash_forward_tc",), ("flash_backward_tc",)),
    (nf.KernelConfig(d=80, n_q=100, n_k=3000, forward="fa1", backward="fa2_fma", deterministic=True),
     ("flash_forward_v1",), ("flash_backward", "flash_backward_dq")),
    (nf.KernelConfig(d=64, n_q=256, forward="standard", backward="standard"),
     ("standard_matmul",), ("standard_matmul",)),
])
def test_tilings_are_the_apis(config, forward, backward):
    """What the warm-up launches with at its short sequence is what the API picks at the
    config's own N (the default tilings depend on N)."""
    c = config
    assert precompile._tilings(c) == (checks.tiling_for(None, forward, c.d, c.n_q, c.n_k),
                                      checks.tiling_for(None, backward, c.d, c.n_q, c.n_k))


def test_build_runs_the_calls_and_reports():
    report = precompile.build(nf.KernelConfig(d=8, n_q=20, n_k=9, causal=True))
    assert report["error"] == "" and report["forward_s"] > 0 and report["backward_s"] > 0
    assert (report["compiled"], report["loaded"]) == (0, 0)          # the simulator compiles nothing
    assert report["tiling"] is None and report["n_k"] == 9


def test_build_reports_errors_instead_of_raising():
    report = precompile.build(nf.KernelConfig(d=8, n_q=20, tiling=nf.Tiling(20, 8)))   # not for mma
    assert "does not suit the tensor-core kernel" in report["error"]


def test_warmup_under_the_simulator_builds_nothing():
    assert nf.warmup([nf.KernelConfig(d=8, n_q=4)]) == []


def test_experiment_cases_map_to_configs():
    case = Case("fa2", "fwd_bwd", 4, 16, 4096, 64, causal=True, deterministic=True)
    assert kernel_config(case) == nf.KernelConfig(d=64, n_q=4096, causal=True, forward="fa2",
                                                  backward="fa2", deterministic=True)
    assert kernel_config(Case("standard", "fwd", 1, 1, 512, 64)).backward is None


def test_build_runs_windowed_grouped_calls():
    """A window and a group of query heads per K/V head build their own kernels (the warm-up's
    calls take them); a window on an algorithm without one is reported, not raised."""
    report = precompile.build(nf.KernelConfig(d=8, n_q=20, causal=True, window=(5, 0), group=3))
    assert report["error"] == "" and report["window"] == (5, 0) and report["group"] == 3
    report = precompile.build(nf.KernelConfig(d=8, n_q=20, forward="fa2_fma", backward=None,
                                              window=(5, 0)))
    assert "algorithm='fa2'" in report["error"]
    with pytest.raises(ValueError, match="KernelConfig.group"):
        nf.KernelConfig(d=8, n_q=20, group=0)


def test_command_line_names_windows_and_groups():
    args = precompile._parse(["--d", "128", "--window", "1024", "0", "--group", "4"])
    assert args.window == [1024, 0] and args.group == 4


def test_distinct_drops_configs_whose_kernels_another_builds():
    both = nf.KernelConfig(d=64, n_q=4096)
    forward_only = nf.KernelConfig(d=64, n_q=4096, backward=None)
    causal = nf.KernelConfig(d=64, n_q=4096, causal=True, backward=None)
    other_algorithms = nf.KernelConfig(d=64, n_q=4096, forward="fa1", backward="fa2_fma")
    longer = nf.KernelConfig(d=64, n_q=16384)
    shorter = nf.KernelConfig(d=64, n_q=100)
    same_tilings = precompile._tilings(longer) == precompile._tilings(both)
    assert precompile._tilings(shorter) != precompile._tilings(both)
    kept = precompile.distinct([forward_only, causal, both, other_algorithms, longer, shorter])
    assert kept == [causal, both, other_algorithms] + ([] if same_tilings else [longer]) + [shorter]


def test_distinct_keeps_configs_it_cannot_resolve_for_build_to_report():
    too_big = nf.KernelConfig(d=64, n_q=2048, forward="fa2_fma", backward=None, tiling=nf.Tiling(64, 256))
    assert precompile.distinct([too_big, too_big]) == [too_big]


def test_listing_run_stops_each_experiment_at_its_kernels(monkeypatch):
    """``python -m experiments kernels``: the configs an experiment's GPU run would build,
    found on a machine without one (nothing launched); experiments that build as they run are
    passed over, one that ran to its end without building is an error."""
    import sys
    import types

    from experiments.common.kernels import listed_configs

    configs = listed_configs([("experiments.fig2_middle", "fig2_middle"), ("experiments.calibrate", "calibrate")],
                             quick=True)
    assert configs and len(set(configs)) == len(configs)
    assert all(isinstance(c, nf.KernelConfig) and c.forward in ("fa2", "fa1", "standard", "fa2_fma") for c in configs)
    fake = types.ModuleType("fake_experiment")
    fake.run = lambda ctx: []
    monkeypatch.setitem(sys.modules, "fake_experiment", fake)
    with pytest.raises(RuntimeError, match="without building kernels"):
        listed_configs([("fake_experiment", "fake")], quick=True)


def test_kernels_command_lists_and_refuses_unknown_names(capsys):
    from experiments import cli

    assert cli.main(["kernels", "fig2_middle", "--quick", "--list"]) == 0
    out = capsys.readouterr().out
    assert "KernelConfig(" in out and "configs building the kernels of" in out
    with pytest.raises(SystemExit, match="unknown experiment"):
        cli.main(["kernels", "fig9", "--list"])


def test_a_grouped_backward_warms_every_split_group():
    """group 4 with a backward: its own kernels and the backward-only ones of groups 2 and 1
    (kv_split 2 and 4); a forward-only config and MHA are left as they are."""
    grouped = nf.KernelConfig(d=8, n_q=20, causal=True, group=4)
    assert precompile.with_splits([grouped]) == [
        grouped, dataclasses.replace(grouped, forward=None, group=2),
        dataclasses.replace(grouped, forward=None, group=1)]
    forward_only = nf.KernelConfig(d=8, n_q=20, group=4, backward=None)
    plain = nf.KernelConfig(d=8, n_q=20)
    assert precompile.with_splits([forward_only, plain, plain]) == [forward_only, plain]
