"""Default tilings cut to short sequences (Tiling.kernel_default with n_q, n_k), and the API
at such a size end to end with its defaults."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import numba_flash as nf
from numba_flash import checks
from numba_flash import reference as ref
from simulator.tiling import H200_SMEM_PER_BLOCK, MMA_KERNELS, SMALL_N_SIDES, Tiling, fit_side

from .helpers import assert_close, assert_lse_close, qkv


def test_fit_side_is_the_power_of_two_at_or_above_n_and_the_grain():
    assert [fit_side(n, 16) for n in (1, 15, 16, 17, 37, 64, 65)] == [16, 16, 16, 32, 64, 64, 128]
    assert [fit_side(n, 8) for n in (1, 8, 9)] == [8, 8, 16]


@pytest.mark.parametrize("kernel,d,n_q,n_k,expected", [
    ("flash_forward_tc", 24, 37, 37, Tiling(64, 32)),
    ("flash_forward_tc", 24, 1, 1, Tiling(16, 8)),
    ("flash_forward_tc", 64, 4096, 4096, Tiling(256, 32)),     # long sequences: the tuned default
    ("flash_forward_tc", 64, 100, 4096, Tiling(128, 32)),
    ("flash_backward_tc", 24, 37, 37, Tiling(32, 64)),
    ("flash_backward_tc", 64, 4099, 4099, Tiling(32, 128)),
    ("flash_backward_tc", 64, 17, 4099, Tiling(32, 128)),
    ("flash_forward_v2", 64, 17, 9, Tiling(32, 16)),
    ("standard_matmul", 64, 5, 5, Tiling(64, 64)),              # never cut (see SMALL_N_SIDES)
])
def test_defaults_for_short_sequences(kernel, d, n_q, n_k, expected):
    assert Tiling.kernel_default(kernel, d, n_q=n_q, n_k=n_k) == expected


@given(kernel=st.sampled_from(sorted(SMALL_N_SIDES)), d=st.integers(1, 256),
       n_q=st.integers(1, 5000), n_k=st.integers(1, 5000))
def test_cut_defaults_stay_launchable(kernel, d, n_q, n_k):
    """No larger than the long-sequence default, the mma multiples kept, the tiles still fit."""
    full = Tiling.kernel_default(kernel, d)
    cut = Tiling.kernel_default(kernel, d, n_q=n_q, n_k=n_k)
    assert cut.Br <= full.Br and cut.Bc <= full.Bc
    assert cut.Br >= min(full.Br, n_q) and cut.Bc >= min(full.Bc, n_k)    # one block covers N
    if kernel in MMA_KERNELS:
        assert cut.suits_mma(kernel)
    assert cut.smem_bytes(kernel, d) <= H200_SMEM_PER_BLOCK


@given(kernel=st.sampled_from(sorted(MMA_KERNELS)), d=st.integers(1, 256),
       n_q=st.integers(1, 300), n_k=st.integers(1, 300))
def test_dropout_defaults_suit_dropout(kernel, d, n_q, n_k):
    """With dropout, the (cut) default's sides are multiples of 16 (``Tiling.suits_dropout``),
    and no other than without dropout where that one already suits."""
    plain = Tiling.kernel_default(kernel, d, n_q=n_q, n_k=n_k)
    dropped = Tiling.kernel_default(kernel, d, n_q=n_q, n_k=n_k, dropout=True)
    assert dropped.suits_dropout() and dropped.suits_mma(kernel)
    assert dropped == plain or not plain.suits_dropout()
    assert dropped.smem_bytes(kernel, d) <= H200_SMEM_PER_BLOCK


def test_api_defaults_follow_the_sequence():
    assert checks.tiling_for(None, ("flash_forward_tc",), 24, 37, 37) == Tiling(64, 32)
    assert checks.tiling_for(None, ("flash_backward", "flash_backward_dq"), 24, 37, 37) == Tiling(64, 64)


def test_small_input_with_default_tilings_is_exact(rng):
    """The README's CPU example size, (1, 2, 37, 24), forward and backward with every default."""
    q, k, v, do = qkv(rng, 1, 2, 37, 37, 24)
    o_ref, lse_ref = ref.attention_forward(q, k, v, causal=True)
    with nf.poison_outputs():
        o, lse = nf.flash_attention(q, k, v, causal=True, return_lse=True)
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=True)
    assert_close(o, o_ref, 1e-5)
    assert_lse_close(lse, lse_ref, 1e-5)
    for g, g_ref in zip(grads, ref.attention_backward(do, q, k, v, causal=True)):
        assert_close(g, g_ref, 1e-4)
    assert np.isfinite(o).all()


def test_warp_rows_gives_the_fp16_forward_a_warp_a_16_row_tile():
    from simulator.tiling import table_variant, tiling_of_table

    one, two = Tiling(128, 32, warp_rows=16), Tiling(128, 32)
    assert one.rows_per_warp("flash_forward_half") == 16 and two.rows_per_warp("flash_forward_half") == 32
    assert one.threads_for("flash_forward_half") == 256 and two.threads_for("flash_forward_half") == 128
    assert one.threads_for("flash_forward_tc") == two.threads_for("flash_forward_tc")   # its kernel only
    assert one != two and repr(one) == "Tiling(Br=128, Bc=32, warp_rows=16)"
    assert table_variant("fp16x3", one) == "fp16x3+warp_rows16" and table_variant("fp16x3", two) == "fp16x3"
    assert tiling_of_table(128, 32, "fp16x3+warp_rows16") == one
    # cut for a short sequence: kept where Br is still a multiple of 32, else implied
    assert one.fitted("flash_forward_half", 40, 40) == Tiling(64, 32, warp_rows=16)
    assert one.fitted("flash_forward_half", 9, 40) == Tiling(16, 32)
    for bad in (8, 32, True):
        with pytest.raises(ValueError, match="warp_rows"):
            Tiling(128, 32, warp_rows=bad)
    with pytest.raises(ValueError, match="leave warp_rows at 0"):
        Tiling(80, 32, warp_rows=16)
