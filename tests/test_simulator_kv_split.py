"""simulator.kv_split: the GQA / MQA backward's split of each K/V head's query heads, chosen by
the runtime model's list schedule; and predict on the split workload."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator
from simulator.blocks import BlockGrid
from simulator.hardware import H200
from simulator.kv_split import MAX_WAVES, auto_kv_split, divisors
from simulator.predict import default_tiling, kv_split_of
from simulator.runtime import shared_makespan


def _end(grid, units, group, s, sms, per_sm):
    """Makespan of the split launch, blocks head by head (no heaviest-first order)."""
    work = [n * (group // s) for n in grid.na] * (units * s)
    return shared_makespan(work, sms, per_sm, lambda k: float(k))


def test_no_grouping_no_split():
    assert auto_kv_split(BlockGrid(64, 64, 16, 16), 1, 1, False, 132, 1) == 1


def test_mqa_on_few_blocks_splits_and_a_full_grid_does_not():
    """MQA at one K/V head and 4 K/V blocks leaves 128 of 132 SMs idle: split the whole group
    of 16; 64 K/V heads of 32 blocks fill the chip many times over: no split."""
    few = BlockGrid(64, 64, 16, 16)
    assert auto_kv_split(few, 1, 16, False, 132, 1) == 16
    many = BlockGrid(512, 512, 16, 16)
    assert auto_kv_split(many, 64, 4, False, 132, 1) == 1


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 300), units=st.integers(1, 6), group=st.sampled_from([2, 3, 4, 6, 8]),
       sms=st.integers(1, 12), per_sm=st.integers(1, 3), causal=st.booleans())
def test_the_split_ends_first_among_those_tried(n, units, group, sms, per_sm, causal):
    grid = BlockGrid(n, n, 16, 16, causal=causal)
    s = auto_kv_split(grid, units, group, False, sms, per_sm)
    assert group % s == 0
    best = _end(grid, units, group, s, sms, per_sm)
    for other in divisors(group):
        if other == 1 or units * other * grid.tc <= MAX_WAVES * sms * per_sm:
            assert best <= _end(grid, units, group, other, sms, per_sm) * (1 + 1e-9)
            if other < s:     # ties go to the smaller split
                assert best < _end(grid, units, group, other, sms, per_sm)


@pytest.mark.parametrize("kwargs,name", [(dict(units=0), "units"), (dict(group=True), "group"),
                                         (dict(sms=1.5), "sms"), (dict(blocks_per_sm=0), "blocks_per_sm")])
def test_bad_arguments_are_refused(kwargs, name):
    args = dict(grid=BlockGrid(16, 16, 16, 16), units=1, group=2, heaviest_first=False, sms=4,
                blocks_per_sm=1) | kwargs
    with pytest.raises(ValueError, match=name):
        auto_kv_split(**args)


def test_predict_runs_the_split_workload():
    """predict's split equals the MHA prediction on the repeated K/V heads, plus the copies in
    the workspace; forward algorithms and MHA workloads are never split."""
    w = simulator.Workload(1, 8, 256, 256, 64, 2, True, kv_heads=1)
    t = default_tiling("flash_backward_half", w, H200)
    s = kv_split_of("flash_backward_half", w, t, H200)
    assert s == 8          # 2 K/V blocks on 132 SMs
    split = simulator.predict("flash_backward_half", w, t)
    mha = simulator.predict("flash_backward_half", simulator.Workload(1, 8, 256, 256, 64, 2, True), t)
    assert split.hbm_counts() == mha.hbm_counts()
    assert split.workspace["dK_split"] == 8 * 256 * 64
    assert split.workload == w
    unsplit = simulator.predict("flash_backward_half", w, t, kv_split=1)
    assert unsplit.hbm_counts()["K"] == (256 * 64, 0)
    assert kv_split_of("flash_forward_half", w, t, H200) == 1
    with pytest.raises(ValueError, match="kv_split"):
        simulator.predict("flash_backward_half", w, t, kv_split=3)
    # checked for every algorithm and workload, as the API checks it
    with pytest.raises(ValueError, match=r"divisor of the group \(8 "):
        simulator.predict("flash_forward_half", w, t, kv_split=7)
    mha = simulator.Workload(1, 8, 256, 256, 64, 2, True)
    with pytest.raises(ValueError, match=r"divisor of the group \(1 "):
        simulator.predict("flash_backward_half", mha, t, kv_split=2)
    assert kv_split_of("flash_backward_half", w, t, H200, kv_split=np.int64(2)) == 2
