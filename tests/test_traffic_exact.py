"""The model against the kernels: simulator.predict equals count_traffic, element for element.

count_traffic runs the real kernels under Numba's CUDA simulator with every global array
wrapped so that each element load and store is counted per tensor (numba_flash.instrument).
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import numba_flash as nf
import simulator
from numba_flash import reference as ref
from numba_flash.instrument import count_traffic

from .helpers import causal_masks, mma_tiling, qkv

FORWARD = {"flash_forward_v1": "fa1", "flash_forward_v2": "fa2_fma", "flash_forward_tc": "fa2",
           "flash_forward_half": "fa2", "flash_forward_fp16x3": "fa2_fp16x3"}
#: simulator algorithms whose kernels take half-precision inputs (2-byte elements)
HALF = {"flash_forward_half", "flash_backward_half"}
#: simulator algorithm -> flash_attention_backward's (algorithm, deterministic)
BACKWARD = {"flash_backward": ("fa2_fma", False), "flash_backward_deterministic": ("fa2_fma", True),
            "flash_backward_tc": ("fa2", False), "flash_backward_half": ("fa2", False),
            "flash_backward_fp16x3": ("fa2_fp16x3", False)}


def measured_and_predicted(algorithm, B, H, n_q, n_k, d, causal, tiling, seed=0, diagonal=None):
    """count_traffic of the call that runs ``algorithm`` and predict on the Workload of the same
    arguments (``diagonal`` passed to both)."""
    rng = np.random.default_rng(seed)
    q, k, v, do = qkv(rng, B, H, n_q, n_k, d)
    fmt = np.float16 if algorithm in HALF else np.float32
    q, k, v, do = (x.astype(fmt) for x in (q, k, v, do))
    mask = dict(causal=causal, diagonal=diagonal)
    if algorithm in FORWARD:
        report = count_traffic(nf.flash_attention, q, k, v, **mask, tiling=tiling,
                               algorithm=FORWARD[algorithm])
    elif algorithm in BACKWARD:
        o, lse = ref.attention_forward(q, k, v, **mask)
        o, lse = o.astype(fmt), lse.astype(np.float32)
        backward, deterministic = BACKWARD[algorithm]
        report = count_traffic(nf.flash_attention_backward, do, q, k, v, o, lse, **mask,
                               tiling=tiling, algorithm=backward, deterministic=deterministic)
    elif algorithm == "standard_forward":
        report = count_traffic(nf.standard_attention, q, k, v, **mask, tiling=tiling)
    else:
        o, p = nf.standard_attention(q, k, v, **mask, tiling=tiling, return_probs=True)
        report = count_traffic(nf.standard_attention_backward, do, q, k, v, o, p, causal=causal,
                               tiling=tiling)
    workload = simulator.Workload(B, H, n_q, n_k, d, 2 if algorithm in HALF else 4, causal, diagonal)
    return report, simulator.predict(algorithm, workload, tiling)


FLASH = ["flash_forward_v1", "flash_forward_v2", "flash_backward", "flash_backward_deterministic"]


@pytest.mark.parametrize("algorithm", FLASH + ["standard_forward", "standard_backward"])
@pytest.mark.parametrize("n_q,n_k,causal,tiling", [
    (13, 7, True, nf.Tiling(4, 3)),     # N_q > N_k: rows and whole row blocks that see nothing
    (7, 13, True, nf.Tiling(3, 4)),
    (9, 9, False, nf.Tiling(4, 4)),
])
def test_predict_equals_counted_traffic(algorithm, n_q, n_k, causal, tiling):
    report, predicted = measured_and_predicted(algorithm, 1, 2, n_q, n_k, 5, causal, tiling)
    assert report.hbm_counts() == predicted.hbm_counts()
    assert report.hbm_read_bytes == predicted.hbm_read_bytes
    assert report.hbm_write_bytes == predicted.hbm_write_bytes


@given(algorithm=st.sampled_from(FLASH), n_q=st.integers(1, 20), n_k=st.integers(1, 20),
       d=st.integers(1, 6), br=st.integers(1, 8), bc=st.integers(1, 8), mask=causal_masks(24),
       heads=st.integers(1, 2))
def test_predict_equals_counted_traffic_on_drawn_shapes(algorithm, n_q, n_k, d, br, bc, mask, heads):
    causal, diagonal = mask
    report, predicted = measured_and_predicted(algorithm, 1, heads, n_q, n_k, d, causal,
                                               nf.Tiling(br, bc), diagonal=diagonal)
    assert report.hbm_counts() == predicted.hbm_counts()


@pytest.mark.parametrize("algorithm", sorted(simulator.ALGORITHMS))
@pytest.mark.parametrize("n_q,n_k,diagonal,tiling", [
    (5, 19, 0, nf.Tiling(2, 4)),     # top-left, N_q < N_k: key blocks that no query sees
    (11, 5, 0, nf.Tiling(4, 2)),     # top-left, N_q > N_k: every row sees key 0
    (9, 7, -5, nf.Tiling(4, 3)),     # a row block that sees nothing, rows that see nothing
    (6, 7, 9, nf.Tiling(4, 3)),      # beyond N_k: nothing masked
])
def test_predict_equals_counted_traffic_with_a_diagonal(algorithm, n_q, n_k, diagonal, tiling):
    if algorithm.endswith(("_tc", "_fp16x3")) or algorithm in HALF:
        tiling = mma_tiling(tiling, algorithm)
    report, predicted = measured_and_predicted(algorithm, 1, 1, n_q, n_k, 3, True, tiling,
                                               diagonal=diagonal)
    assert report.hbm_counts() == predicted.hbm_counts()


@pytest.mark.parametrize("n_q,n_k,d,causal,tiling", [
    (21, 13, 5, True, nf.Tiling(16, 8)),    # N_q > N_k: rows that see nothing; d padded to 8
    (13, 29, 12, True, nf.Tiling(16, 16)),
    (17, 17, 8, False, nf.Tiling(32, 8)),   # two warps, one of them on rows past N_q
])
def test_predict_equals_counted_traffic_tensor_cores(n_q, n_k, d, causal, tiling):
    """The tensor-core forward keeps the FA2-order contract: Q once per row block, K and V once
    per active block pair (fetched a phase ahead), O and L once."""
    report, predicted = measured_and_predicted("flash_forward_tc", 1, 2, n_q, n_k, d, causal, tiling)
    assert report.hbm_counts() == predicted.hbm_counts()
    assert predicted.hbm_counts() == simulator.predict(
        "flash_forward_v2", simulator.Workload(1, 2, n_q, n_k, d, 4, causal), tiling).hbm_counts()


@pytest.mark.parametrize("n_q,n_k,d,causal,tiling", [
    (21, 13, 5, True, nf.Tiling(16, 16)),   # N_q > N_k, ragged; d padded to 8
    (13, 29, 12, True, nf.Tiling(16, 32)),  # two warps, ragged keys
    (40, 13, 5, True, nf.Tiling(16, 16)),   # row blocks that see no key of Kj: skipped, not read
    (40, 40, 12, True, nf.Tiling(16, 16)),  # causal square: the pairs above the diagonal skipped
])
def test_predict_equals_counted_traffic_tensor_core_backward(n_q, n_k, d, causal, tiling):
    """The tensor-core backward keeps the FFMA backward's contract: K and V once per block j;
    Q, dO, L, D and one atomic add per dQ element per active block pair; dK and dV once."""
    report, predicted = measured_and_predicted("flash_backward_tc", 1, 2, n_q, n_k, d, causal, tiling)
    assert report.hbm_counts() == predicted.hbm_counts()
    assert predicted.hbm_counts() == simulator.predict(
        "flash_backward", simulator.Workload(1, 2, n_q, n_k, d, 4, causal), tiling).hbm_counts()


@pytest.mark.parametrize("n_q,n_k,d,causal,tiling", [
    (21, 13, 5, True, nf.Tiling(16, 16)),   # N_q > N_k, ragged; d padded to 16 (element copies)
    (13, 29, 16, True, nf.Tiling(16, 32)),  # two warps, ragged keys, cp.async tiles
    (40, 13, 8, True, nf.Tiling(16, 16)),   # row blocks that see no key of Kj: skipped, not read
    (33, 20, 24, False, nf.Tiling(32, 16)), # two stages of Qi, dOi in turn; dQ pieces shared
])
def test_predict_equals_counted_traffic_half_backward(n_q, n_k, d, causal, tiling):
    """The fp16 backward keeps the same contract but for dQ: accumulated in an fp32 workspace
    (zeroed with D, one atomic add per element per active pair) and rounded once into dQ."""
    report, predicted = measured_and_predicted("flash_backward_half", 1, 2, n_q, n_k, d, causal, tiling)
    assert report.hbm_counts() == predicted.hbm_counts()
    tc = simulator.predict("flash_backward_tc", simulator.Workload(1, 2, n_q, n_k, d, 4, causal),
                           tiling).hbm_counts()
    atomics_and_zeros, narrowed = tc["dQ"], n_q * d * 2
    assert predicted.hbm_counts()["dQ_accum"] == (atomics_and_zeros[0] + narrowed, atomics_and_zeros[1])
    assert predicted.hbm_counts()["dQ"] == (0, narrowed)
    # bytes: 2 an element of the format, 4 of the fp32 ones (L, D, dQ_accum), counted alike
    reads = predicted.hbm_counts()
    assert report.hbm_read_bytes == predicted.hbm_read_bytes == sum(
        n * (4 if name in ("L", "D", "dQ_accum") else 2) for name, (n, _) in reads.items())


def test_count_traffic_sees_every_tensor_and_counts_bytes():
    report, _ = measured_and_predicted("flash_backward", 1, 1, 6, 5, 3, False, nf.Tiling(2, 2))
    counts = report.hbm_counts()
    assert set(counts) == {"Q", "K", "V", "O", "L", "dO", "dQ", "dK", "dV", "D"}
    reads = sum(r for r, _ in counts.values())
    assert report.hbm_read_bytes == 4 * reads
    # 2 x 2 tiles over 6 x 5: every dQ element gets one atomic add per K/V block (3 blocks),
    # each one read and one write, after the preprocessing pass zeroed it
    assert counts["dQ"] == (3 * 6 * 3, 6 * 3 + 3 * 6 * 3)
