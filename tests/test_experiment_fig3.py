"""The Fig. 3 experiment's pieces (dropout 0.1 and a padding mask, the paper's benchmark
setting): the Case fields it adds (dropout_p, padding), the per-entry workloads the model sums,
and the memory prediction, by hand; its cpu-mode CSV is checked with the others
(tests/test_experiments.py)."""
from dataclasses import replace

import numpy as np
import pytest

from experiments import fig3
from experiments.common import model
from experiments.common.cases import Case


def _padded(**kw):
    return Case("fa2", "fwd_bwd", 3, 2, 64, 16, dropout_p=0.1, padding=20, **kw)


def test_key_lengths_are_uniform_in_the_last_padding_keys_and_fixed():
    case = replace(_padded(), B=4000)
    lengths = case.key_lengths()
    assert lengths.min() >= 44 and lengths.max() <= 64 and set(np.unique(lengths)) == set(range(44, 65))
    assert np.array_equal(lengths, case.key_lengths())          # the same draw each time
    mask = case.key_padding_mask()
    assert mask.shape == (4000, 64) and np.array_equal((~mask).sum(1), lengths)
    assert np.all(~mask[:, :44])                                  # padding only at the end
    assert Case("fa2", "fwd", 2, 1, 8, 8).key_padding_mask() is None


def test_padded_flops_count_the_kept_keys_only():
    case = _padded()
    kept = case.key_lengths().sum()
    assert case.band_flops == 3.5 * 4 * 16 * 2 * 64 * kept
    assert case.flops == 3.5 * 4 * 3 * 2 * 64 * 64 * 16        # the convention: padding counted


def test_labels_round_trip_dropout_and_padding():
    case = _padded()
    assert case.label.endswith("/dropout0.1/pad20")
    assert Case.from_label(case.label) == case
    assert Case.from_json(case.to_json()) == case
    kwargs = case.mask_kwargs()
    assert kwargs["dropout_p"] == 0.1 and kwargs["key_padding_mask"].shape == (3, 64)


@pytest.mark.parametrize("kwargs, match", [
    (dict(dropout_p=1.0), "dropout_p must be"),
    (dict(dropout_p=True), "dropout_p must be"),
    (dict(padding=64), "padding must be"),
    (dict(padding=-1), "padding must be"),
    (dict(padding=2, causal=True), "padding runs without causal"),
    (dict(padding=2, method="fa1"), "run on method 'fa2'"),
    (dict(dropout_p=0.1, deterministic=True), "run on method 'fa2'"),
])
def test_case_refuses_what_the_padding_path_does_not_run(kwargs, match):
    args = dict(method="fa2", passes="fwd_bwd", B=2, H=1, N=64, d=8) | kwargs
    with pytest.raises(ValueError, match=match):
        Case(**args)


def test_model_sums_one_call_per_entry_on_its_kept_keys():
    case = replace(_padded(), dtype="float16")
    workloads = model.call_workloads(case)
    assert [w.N_k for w in workloads] == list(case.key_lengths())
    assert all(w.B == 1 and w.N_q == 64 and w.H == 2 for w in workloads)
    parts = model.reports(case)
    assert [(r.algorithm, r.workload) for r in parts] == [
        (a, w) for w in workloads for a in case.simulator_algorithms()]
    whole = model.predict_case(case)
    assert whole.flops == pytest.approx(sum(r.flops for r in parts))
    assert whole.time_s > 0


def test_predicted_memory_by_hand():
    """Dense fp32 (3, 2, 64, 16): o, dq, dk, dv (4 x 3*2*64*16 floats) and lse (3*2*64), plus
    the backward's D (3*2*64); padded: the same whole-call outputs plus the largest entry's K, V
    copies and dq, dk, dv (B = 1, its keys) and D."""
    dense = Case("fa2", "fwd_bwd", 3, 2, 64, 16)
    outputs = 4 * 4 * 3 * 2 * 64 * 16 + 4 * 3 * 2 * 64
    assert fig3.predicted_memory(dense) == outputs + 4 * 3 * 2 * 64
    padded = replace(_padded(), dropout_p=0.0)
    n = int(padded.key_lengths().max())
    entry = 4 * (2 * 2 * n * 16 + 2 * 64 * 16 + 2 * 2 * n * 16 + 2 * 64)   # K, V; dQ; dK, dV; D
    assert fig3.predicted_memory(padded) == outputs + entry
