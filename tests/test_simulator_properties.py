"""The paper's scaling claims, checked on our exact counts and closed forms."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import (ALGORITHMS, Tiling, Workload, closed_forms, paper_tiling, predict)
from simulator.report import FP32_TENSORS
from simulator.tiling import MMA_KERNELS

from .helpers import causal_masks

FAST = settings(max_examples=25, deadline=None)
FLASH = ("flash_forward_v1", "flash_forward_v2", "flash_backward", "flash_backward_deterministic")


def hbm_elements(algorithm, w, tiling=None):
    r = predict(algorithm, w, tiling)
    return sum(t.reads + t.writes for t in r.hbm.values())


heads = st.sampled_from([8, 16, 32, 64])


@FAST
@given(d=heads, m_factor=st.integers(1, 8), blocks=st.integers(16, 40))
def test_flash_traffic_grows_as_n_squared_at_fixed_m(d, m_factor, blocks):
    M = 4 * d * m_factor                      # Bc = m_factor; N a multiple of it
    tiling = paper_tiling(M, d)
    n = blocks * tiling.Bc * tiling.Br
    for algorithm in ("flash_forward_v1", "flash_backward"):
        small = hbm_elements(algorithm, Workload(1, 1, n, n, d), tiling)
        large = hbm_elements(algorithm, Workload(1, 1, 2 * n, 2 * n, d), tiling)
        assert 3.5 <= large / small <= 4.0


@FAST
@given(d=heads, m_factor=st.integers(1, 16), n_blocks=st.integers(64, 256))
def test_flash_traffic_falls_as_one_over_m(d, m_factor, n_blocks):
    M = 4 * d * m_factor
    n = n_blocks * 2 * m_factor               # Bc = m_factor and 2 m_factor both divide n
    w = Workload(1, 2, n, n, d)
    ratios = {a: hbm_elements(a, w, paper_tiling(M, d)) / hbm_elements(a, w, paper_tiling(2 * M, d))
              for a in ("flash_forward_v1", "flash_backward")}
    for ratio in ratios.values():
        assert 1.6 <= ratio <= 2.0
    if 2 * M <= 4 * d * d:                    # FA2 order: Br = M/4d grows with M only up to d
        ratio = hbm_elements("flash_forward_v2", w, paper_tiling(M, d)) / hbm_elements(
            "flash_forward_v2", w, paper_tiling(2 * M, d))
        assert 1.6 <= ratio <= 2.0


@FAST
@given(d=st.integers(2, 64), extra=st.integers(0, 3 * 64 * 64), n_over_d=st.integers(1, 12),
       causal=st.booleans())
def test_standard_moves_at_least_as_much_as_flash_once_m_is_4_d_squared(d, extra, n_over_d, causal):
    # Theorem 2 is asymptotic; with our constants (Algorithm 1 ~ 4 N^2 d (3d + 4) / M, standard
    # >= 6 N^2) the crossover lies between M = d^2 and M = 4 d^2, once N >= d (below that the
    # O(N d) terms, larger for flash, dominate).
    M, n = 4 * d * d + extra, n_over_d * d
    w = Workload(1, 1, n, n, d, causal=causal)
    standard = hbm_elements("standard_forward", w) + hbm_elements("standard_backward", w)
    tiling = paper_tiling(M, d)
    assert hbm_elements("standard_forward", w) >= hbm_elements("flash_forward_v1", w, tiling)
    assert hbm_elements("standard_forward", w) >= hbm_elements("flash_forward_v2", w, tiling)
    assert standard >= hbm_elements("flash_forward_v2", w, tiling) + hbm_elements("flash_backward", w, tiling)


@FAST
@given(nq=st.integers(1, 60), nk=st.integers(1, 60), d=st.integers(1, 8),
       br=st.integers(1, 16), bc=st.integers(1, 16))
def test_algorithm_1_writes_o_tc_times_fa2_once(nq, nk, d, br, bc):
    w, t = Workload(2, 1, nq, nk, d), Tiling(br, bc)
    tc = -(-nk // bc)
    assert predict("flash_forward_v1", w, t).hbm["O"].writes == tc * 2 * nq * d
    assert predict("flash_forward_v2", w, t).hbm["O"].writes == 2 * nq * d
    assert predict("flash_forward_v2", w, t).hbm["O"].reads == 0


@settings(max_examples=40, deadline=None)
@given(algorithm=st.sampled_from(sorted(ALGORITHMS)), nq=st.integers(1, 300),
       nk=st.integers(1, 300), d=st.integers(1, 128), m_over_d=st.integers(1, 400),
       mask=causal_masks(320))
def test_lower_bound_never_exceeds_an_exact_count(algorithm, nq, nk, d, m_over_d, mask):
    M = d * m_over_d
    causal, diagonal = mask
    w = Workload(1, 2, nq, nk, d, causal=causal, diagonal=diagonal)
    # the tensor-core kernels take only their mma-shaped tilings (None: their default)
    own_tiling = (algorithm.startswith("standard") or algorithm in MMA_KERNELS
                  or algorithm.endswith("_fp16x3"))
    tiling = None if own_tiling else paper_tiling(M, d)
    assert closed_forms.proposition3_lower_bound(w, M).elements <= hbm_elements(algorithm, w, tiling)


def test_lower_bound_has_the_papers_shape_for_m_above_d_squared():
    n, d = 16384, 32
    w = Workload(1, 1, n, n, d)
    ms = (4 * d * d, 8 * d * d, 16 * d * d)
    bounds = [closed_forms.proposition3_lower_bound(w, M).elements for M in ms]
    assert bounds[-1] > 4 * n * d                        # above the compulsory traffic here
    for M, bound in zip(ms, bounds):                     # c N^2 d^2 / M, c = 1 / (4 + 2 sqrt 3)
        assert bound >= n * n * d * d / ((4 + 2 * 3**0.5) * M) - M
    assert 1.7 < bounds[0] / bounds[1] <= 2 and 1.7 < bounds[1] / bounds[2] <= 2
    with pytest.raises(ValueError, match="M=3"):
        closed_forms.proposition3_lower_bound(w, 3)


def test_compulsory_traffic_counts_only_keys_and_queries_the_mask_lets_meet():
    def bound(**mask):   # M large: the compulsory term d (2 keys + 2 queries) is the bound
        return closed_forms.proposition3_lower_bound(Workload(1, 1, 4, 10, 2, **mask), 2000).elements

    assert bound() == bound(causal=True) == 2 * (2 * 10 + 2 * 4)   # every key reaches a query
    assert bound(causal=True, diagonal=0) == 2 * (2 * 4 + 2 * 4)    # top-left: keys 0..3 only
    assert bound(causal=True, diagonal=-2) == 2 * (2 * 2 + 2 * 2)   # rows 2, 3 see keys 0, 1
    assert bound(causal=True, diagonal=-4) == 0                     # nothing visible


@FAST
@given(algorithm=st.sampled_from(sorted(set(ALGORITHMS) - {"flash_forward_fp16x3",
                                                           "flash_backward_fp16x3"})),
       n=st.integers(1, 200), d=st.integers(1, 64), causal=st.booleans())
def test_bytes_scale_with_bytes_per_element(algorithm, n, d, causal):
    """(fa2_fp16x3 takes fp32 inputs only: ``test_fp16x3_parts_are_two_byte_elements``.)"""
    tiling = Tiling(16, 16)
    fp32 = predict(algorithm, Workload(1, 3, n, n, d, 4, causal), tiling)
    fp16 = predict(algorithm, Workload(1, 3, n, n, d, 2, causal), tiling)
    assert fp32.hbm == fp16.hbm and fp32.sram == fp16.sram
    # 2 bytes an element in fp16, but 4 for the tensors kept in fp32 in every format
    kept = {name: t for name, t in fp32.hbm.items() if name in FP32_TENSORS}
    assert fp32.hbm_read_bytes == 2 * fp16.hbm_read_bytes - 4 * sum(t.reads for t in kept.values()) > 0
    assert fp32.hbm_write_bytes == 2 * fp16.hbm_write_bytes - 4 * sum(t.writes for t in kept.values()) > 0
    assert fp32.sram_read_bytes == 2 * fp16.sram_read_bytes
    kept_ws = sum(n for name, n in fp32.workspace.items() if name in FP32_TENSORS)
    assert fp32.extra_memory_bytes == 2 * fp16.extra_memory_bytes - 4 * kept_ws


CLOSED = {
    "standard_forward": lambda w, M: closed_forms.standard_forward_accesses(w),
    "standard_backward": lambda w, M: closed_forms.standard_backward_accesses(w),
    "flash_forward_v1": closed_forms.flash_forward_v1_accesses,
    "flash_forward_v2": closed_forms.flash_forward_v2_accesses,
    "flash_backward": closed_forms.flash_backward_accesses,
    "flash_backward_deterministic": lambda w, M: closed_forms.flash_backward_accesses(w, M, True),
}


@settings(max_examples=60, deadline=None)
@given(algorithm=st.sampled_from(sorted(CLOSED)), nq=st.integers(1, 400), nk=st.integers(1, 400),
       d=st.integers(1, 96), m_over_d=st.integers(1, 300), mask=causal_masks(420))
def test_closed_forms_are_exact_without_mask_and_bounds_with(algorithm, nq, nk, d, m_over_d, mask):
    M = d * m_over_d
    causal, diagonal = mask
    w = Workload(1, 2, nq, nk, d, causal=causal, diagonal=diagonal)
    tiling = None if algorithm.startswith("standard") else paper_tiling(M, d)
    closed = CLOSED[algorithm](w, M)
    count = hbm_elements(algorithm, w, tiling)
    assert closed.bytes == closed.elements * w.dtype_bytes
    if causal:
        assert closed.elements >= count
    else:
        assert closed.elements == count


@FAST
@given(d=heads, m_factor=st.integers(1, 8), blocks=st.integers(8, 64))
def test_leading_terms_approach_the_exact_counts(d, m_factor, blocks):
    M = 4 * d * m_factor                              # Bc = M / 4d exactly
    n = blocks * m_factor * d
    w = Workload(1, 1, n, n, d)
    tc = blocks * d
    v1 = closed_forms.flash_forward_v1_accesses(w, M).elements
    assert abs(v1 / closed_forms.theorem2_flash_forward(w, M).elements - 1) <= 1 / tc
    bwd = closed_forms.flash_backward_accesses(w, M).elements
    assert abs(bwd / closed_forms.theorem5_flash_backward(w, M).elements - 1) <= 2 / tc
    v2 = closed_forms.flash_forward_v2_accesses(w, M).elements
    lead = closed_forms.theorem2_flash_forward(w, M, "flash_forward_v2").elements
    assert 0 <= v2 / lead - 1 <= 2 * d / n
    std = closed_forms.standard_forward_accesses(w).elements
    assert 1 <= std / closed_forms.theorem2_standard_forward(w).elements <= 1 + 64 / n


def test_theorem2_rejects_unknown_algorithm_and_small_m():
    w = Workload(1, 1, 64, 64, 16)
    with pytest.raises(ValueError, match="algorithm"):
        closed_forms.theorem2_flash_forward(w, 256, "standard_forward")
    with pytest.raises(ValueError, match="M=8"):
        closed_forms.flash_forward_v1_accesses(w, 8)
