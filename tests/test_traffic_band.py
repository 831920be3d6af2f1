"""The model against the band kernels: simulator.predict equals count_traffic, element for
element, with sliding windows (flash-attention's window_size around a diagonal) and grouped
K/V heads (GQA / MQA: k, v with H_kv heads).

count_traffic runs the real kernels under Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1),
counting each element load and store per tensor (numba_flash.instrument); sizes are tiny.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import numba_flash as nf
import simulator
from numba_flash import reference as ref
from numba_flash.instrument import count_traffic

from .helpers import mma_tiling

#: simulator algorithm -> (forward?, input format)
KERNELS = {"flash_forward_tc": (True, np.float32), "flash_forward_half": (True, np.float16),
           "flash_backward_tc": (False, np.float32), "flash_backward_half": (False, np.float16)}
#: flash_attention's algorithm of each forward's simulator algorithm ("fa2" for the others),
#: and flash_attention_backward's of each backward's
FORWARD_ALGORITHM = {"flash_forward_fp16x3": "fa2_fp16x3"}
BACKWARD_ALGORITHM = {"flash_backward_fp16x3": "fa2_fp16x3"}


def measured_and_predicted(kernel, B, H, h_kv, n_q, n_k, d, causal, window, diagonal, tiling,
                           seed=0, kv_split=None):
    """count_traffic of the "fa2" call that runs ``kernel`` (k, v with ``h_kv`` heads; the
    backward split ``kv_split`` ways) and predict on the Workload of the same arguments."""
    forward, fmt = KERNELS.get(kernel, (kernel not in BACKWARD_ALGORITHM, np.float32))
    rng = np.random.default_rng(seed)
    q, do = (rng.standard_normal((B, H, n_q, d)).astype(fmt) for _ in range(2))
    k, v = (rng.standard_normal((B, h_kv, n_k, d)).astype(fmt) for _ in range(2))
    mask = dict(causal=causal, window=window, diagonal=diagonal)
    if forward:
        report = count_traffic(nf.flash_attention, q, k, v, **mask, tiling=tiling,
                               algorithm=FORWARD_ALGORITHM.get(kernel, "fa2"))
    else:
        o, lse = ref.attention_forward(q, k, v, **mask)
        o, lse = o.astype(fmt), lse.astype(np.float32)
        report = count_traffic(nf.flash_attention_backward, do, q, k, v, o, lse, **mask,
                               tiling=tiling, kv_split=kv_split,
                               algorithm=BACKWARD_ALGORITHM.get(kernel, "fa2"))
    workload = simulator.Workload(B, H, n_q, n_k, d, 2 if fmt is np.float16 else 4, causal,
                                  diagonal, window, h_kv)
    return report, simulator.predict(kernel, workload, tiling, kv_split=kv_split)


def assert_equal_traffic(report, predicted):
    assert report.hbm_counts() == predicted.hbm_counts()
    assert report.hbm_read_bytes == predicted.hbm_read_bytes
    assert report.hbm_write_bytes == predicted.hbm_write_bytes


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("H,h_kv,n_q,n_k,d,causal,window,diagonal", [
    (2, 2, 37, 29, 5, False, (6, 3), None),    # both sides, ragged; rows past N_k see nothing
    (2, 1, 29, 37, 12, False, (9, -1), None),  # MQA, left side alone
    (4, 2, 23, 40, 8, False, (-1, 4), 0),      # GQA, right side alone, top-left diagonal
    (2, 2, 40, 40, 16, True, (10, 0), None),   # causal window: skipped blocks on both sides
    (3, 1, 33, 17, 5, True, (2, -1), -20),     # row blocks that see nothing: O = 0, L = -inf
])
def test_predict_equals_counted_traffic_with_windows(kernel, H, h_kv, n_q, n_k, d, causal,
                                                     window, diagonal):
    tiling = mma_tiling(nf.Tiling(16, 16), kernel)
    report, predicted = measured_and_predicted(kernel, 1, H, h_kv, n_q, n_k, d, causal, window,
                                               diagonal, tiling)
    assert_equal_traffic(report, predicted)


@pytest.mark.parametrize("H,h_kv,n_q,n_k,d,causal,window,diagonal,tiling", [
    (2, 1, 29, 37, 12, False, (9, -1), None, nf.Tiling(16, 16)),   # MQA, left side alone
    (4, 2, 23, 40, 8, False, (-1, 4), 0, nf.Tiling(32, 16)),       # GQA, right side, two warps
    (3, 1, 33, 17, 5, True, (2, -1), -20, nf.Tiling(16, 16)),      # rows that see nothing
])
def test_predict_equals_counted_traffic_of_fp16x3(H, h_kv, n_q, n_k, d, causal, window,
                                                  diagonal, tiling):
    """fa2_fp16x3: the maxima of every head of q, k and v, their fp16 parts, the fp16 forward
    on them (simulator.fp16x3), the same with windows and grouped K/V heads."""
    report, predicted = measured_and_predicted("flash_forward_fp16x3", 1, H, h_kv, n_q, n_k, d,
                                               causal, window, diagonal, tiling)
    assert_equal_traffic(report, predicted)
    assert report.hbm["K parts"].writes == h_kv * n_k * 2 * 16 * -(-d // 16)


@pytest.mark.parametrize("H,h_kv,n_q,n_k,d,causal,window,diagonal,tiling", [
    (2, 1, 29, 37, 12, False, (9, -1), None, nf.Tiling(16, 16)),   # MQA, left side alone
    (4, 2, 23, 40, 8, False, (-1, 4), 0, nf.Tiling(32, 32)),       # GQA, right side, two warps
    (3, 1, 33, 17, 5, True, (2, -1), -20, nf.Tiling(16, 16)),      # key blocks no row sees
])
def test_predict_equals_counted_traffic_of_the_fp16x3_backward(H, h_kv, n_q, n_k, d, causal,
                                                              window, diagonal, tiling):
    """fa2_fp16x3's backward: the maxima and parts of q, k, v and of dO, D, and the fp16
    backward on the parts in fp32 (simulator.fp16x3.flash_backward_fp16x3): each thread of a
    block that visits a row block reads the maxima of its heads once a query head."""
    report, predicted = measured_and_predicted("flash_backward_fp16x3", 1, H, h_kv, n_q, n_k, d,
                                               causal, window, diagonal, tiling, kv_split=1)
    assert_equal_traffic(report, predicted)
    assert report.hbm["dO parts"].writes == H * n_q * 2 * 16 * -(-d // 16)
    dq = report.hbm["dQ"]                       # zeroed by the preprocess, then atomic adds
    assert dq.writes - dq.reads == H * n_q * d and dq.reads > 0


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_gqa_reads_kv_once_per_kv_head_in_the_backward(kernel):
    """The forward reads K/V per query head as without GQA; the unsplit backward loads K_j, V_j
    and stores dK_j, dV_j once per K/V head."""
    tiling = mma_tiling(nf.Tiling(16, 16), kernel)
    report, predicted = measured_and_predicted(kernel, 1, 4, 1, 20, 24, 8, True, None, None, tiling,
                                               kv_split=1)
    assert_equal_traffic(report, predicted)
    counts = report.hbm_counts()
    if KERNELS[kernel][0]:
        assert counts["K"][0] == 4 * simulator.predict(
            kernel, simulator.Workload(1, 1, 20, 24, 8, predicted.dtype_bytes, True),
            tiling).hbm_counts()["K"][0]
    else:
        assert counts["K"] == (24 * 8, 0) and counts["dK"] == (0, 24 * 8)


@pytest.mark.parametrize("kernel", ["flash_backward_half", "flash_backward_tc"])
@pytest.mark.parametrize("kv_split", [None, 2])
def test_split_backward_reads_kv_once_per_split(kernel, kv_split):
    """Split s ways (None: the model's choice, which at 2 K/V blocks on 132 SMs is the whole
    group, s = 4), the kernel loads K_j, V_j and stores dK_j, dV_j once per copy, as predicted;
    the repeat and the sums are not our kernels' traffic."""
    tiling = mma_tiling(nf.Tiling(16, 16), kernel)
    report, predicted = measured_and_predicted(kernel, 1, 4, 1, 20, 24, 8, True, None, None, tiling,
                                               kv_split=kv_split)
    assert_equal_traffic(report, predicted)
    s = kv_split or 4
    counts = report.hbm_counts()
    assert counts["K"] == (s * 24 * 8, 0) and counts["dK"] == (0, s * 24 * 8)
    assert predicted.workspace["K_split"] == s * 24 * 8


@settings(max_examples=6, deadline=None)
@given(kernel=st.sampled_from(sorted(KERNELS)), n_q=st.integers(1, 24), n_k=st.integers(1, 24),
       d=st.integers(1, 10), left=st.integers(-1, 12), right=st.integers(-1, 12),
       causal=st.booleans(), diagonal=st.one_of(st.none(), st.integers(-12, 12)),
       h_kv=st.integers(1, 2), group=st.integers(1, 3))
def test_predict_equals_counted_traffic_on_drawn_bands(kernel, n_q, n_k, d, left, right, causal,
                                                       diagonal, h_kv, group):
    if causal:
        right = min(right, 0)
    if not causal and (left, right) == (-1, -1):
        diagonal = None                       # a diagonal needs causal or a window
    tiling = mma_tiling(nf.Tiling(16, 16), kernel)
    report, predicted = measured_and_predicted(kernel, 1, h_kv * group, h_kv, n_q, n_k, d, causal,
                                               (left, right), diagonal, tiling)
    assert_equal_traffic(report, predicted)
