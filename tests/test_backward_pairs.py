"""The tensor-core backward with warp pairs (``Tiling.warp_pairs``, flash_backward_tc v12: two
warps a 16-key tile, S^T and dV on one, dP^T and dK on the other), under the CUDA simulator:
gradients within the rule at ragged shapes, with causal and band masks, grouped heads, dropout
and block masks; the traffic the kernel counts equals ``simulator.predict``'s; the tiling's
threads, shared memory and defaults (pairs for 64 < d <= 128 only)."""
import numpy as np
import pytest

import numba_flash as nf
from numba_flash import reference as ref

from .helpers import FLOOR, check_band, qkv, rel
from .test_kernels import check_grads
from .test_traffic_exact import measured_and_predicted

import simulator

P16 = nf.Tiling(16, 16, warp_pairs=True)     # one pair
P32 = nf.Tiling(16, 32, warp_pairs=True)     # two pairs


@pytest.mark.parametrize("n_q,n_k,d,causal,tiling", [
    (19, 40, 24, True, nf.Tiling(16, 64, warp_pairs=True)),  # four pairs, ragged keys; 8 warps, 3 dQ tiles
    (37, 21, 40, True, nf.Tiling(32, 32, warp_pairs=True)),  # N_q > N_k: rows that see no key
    (33, 17, 72, False, P16),                                # d > 64 (the default's range), ragged
    (9, 30, 5, False, P32),                                  # d padded to 8
])
def test_paired_backward_within_the_rule(rng, n_q, n_k, d, causal, tiling):
    q, k, v, do = qkv(rng, 1, 1, n_q, n_k, d)
    o, lse = ref.attention_forward(q, k, v, causal=causal)
    with nf.poison_outputs():
        grads = nf.flash_attention_backward(do, q, k, v, o.astype(np.float32),
                                            lse.astype(np.float32), causal=causal, tiling=tiling)
    check_grads(grads, q, k, v, do, causal)


@pytest.mark.parametrize("H,H_kv,n_q,n_k,d,causal,window", [
    (6, 2, 17, 33, 16, True, None),     # GQA, group 3, causal N_q < N_k
    (2, 2, 40, 23, 24, False, (5, 3)),  # a band both sides, blocks skipped
])
def test_paired_backward_with_bands_and_grouped_heads(H, H_kv, n_q, n_k, d, causal, window):
    check_band("float32", 1, H, H_kv, n_q, n_k, d, causal, window, kv_split=1,
               tiling=nf.Tiling(16, 16), bwd_tiling=P32, seed=n_q)


def test_paired_backward_with_a_block_mask():
    on = np.random.default_rng(5).random((3, 2)) < 0.6
    on[0, 0] = on[2, 1] = True
    check_band("float32", 1, 2, 1, 40, 50, 8, True, tiling=nf.Tiling(16, 16), bwd_tiling=P32,
               block_mask=on, block_size=(16, 32), seed=4)


def test_paired_backward_with_dropout_equals_the_reference_with_the_kernels_mask():
    """Role 1 reads the kept bits from the signs of role 0's P^T: the same gradients as the
    reference with the forward's mask (p = 0.3, causal, N_q > N_k)."""
    rng = np.random.default_rng(2)
    n_q, n_k, d, p, seed = 37, 29, 24, 0.3, 2 ** 40 + 77
    q, k, v, do = (rng.standard_normal((1, 2, n, d)).astype(np.float32)
                   for n in (n_q, n_k, n_k, n_q))
    with nf.poison_outputs():
        o, lse, keep = nf.flash_attention(q, k, v, causal=True, return_lse=True, dropout_p=p,
                                          dropout_seed=seed, return_dropout_mask=True)
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=True, dropout_p=p,
                                            dropout_seed=seed, tiling=P32)
    z = ref.dropout_factors(keep, p)
    f64 = [x.astype(np.float64) for x in (do, q, k, v)]
    refs = ref.attention_backward(*f64, causal=True, dropout=z)
    plains = ref.attention_backward(do, q, k, v, causal=True, dropout=z, dtype=np.float32)
    for name, g, r, pl in zip(("dq", "dk", "dv"), grads, refs, plains):
        assert rel(g, r) <= 3 * rel(pl, r) + FLOOR, (name, rel(g, r), rel(pl, r))


@pytest.mark.parametrize("n_q,n_k,d,causal,tiling", [
    (13, 29, 12, True, P32),   # ragged keys
    (40, 40, 12, True, P16),   # causal square: the pairs above the diagonal skipped
])
def test_paired_backward_traffic_equals_predict(n_q, n_k, d, causal, tiling):
    report, predicted = measured_and_predicted("flash_backward_tc", 1, 2, n_q, n_k, d, causal, tiling)
    assert report.hbm_counts() == predicted.hbm_counts()
    assert predicted.hbm_counts() == simulator.predict(
        "flash_backward", simulator.Workload(1, 2, n_q, n_k, d, 4, causal), tiling).hbm_counts()


def test_pairs_double_the_warps_and_add_the_exchange_tile():
    t, plain = nf.Tiling(16, 64, warp_pairs=True), nf.Tiling(16, 64)
    assert t.threads_for("flash_backward_tc") == 2 * plain.threads_for("flash_backward_tc") == 256
    assert t.threads_for("flash_forward_tc") == plain.threads_for("flash_forward_tc")   # ignored
    assert (t.smem_bytes("flash_backward_tc", 128)
            == plain.smem_bytes("flash_backward_tc", 128) + 16 * 64 * 4 == 209024)
    assert t != plain and repr(t) == "Tiling(Br=16, Bc=64, warp_pairs=True)"
    assert repr(plain) == "Tiling(Br=16, Bc=64)"
    assert nf.Tiling(16, 240, warp_pairs=True).suits_mma("flash_backward_tc")
    with pytest.raises(ValueError, match="up to 240"):   # named barriers 1..15
        nf.Tiling(16, 256, warp_pairs=True).check_mma("flash_backward_tc")


def test_default_pairs_for_wide_heads_only():
    default = nf.Tiling.kernel_default
    assert default("flash_backward_tc", 64) == nf.Tiling(32, 128)
    for d in (72, 80, 128):
        assert default("flash_backward_tc", d) == nf.Tiling(16, 64, warp_pairs=True), d
    assert default("flash_backward_tc", 256) == nf.Tiling(16, 16)    # 16 x 64 does not fit
    # short sequences and block masks cut the sides, keeping the pairs
    assert default("flash_backward_tc", 128, n_q=20, n_k=20) == nf.Tiling(16, 32, warp_pairs=True)
    assert (default("flash_backward_tc", 128, block_size=(128, 32))
            == nf.Tiling(16, 32, warp_pairs=True))
    assert default("flash_forward_tc", 128) == nf.Tiling(256, 32)
