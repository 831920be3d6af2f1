"""tools/fp16x3_backward_accuracy.py: its arithmetic pieces on hand-checked cases, and the
emulation's two findings at a small size (the mismatch fails at large logits, the fp16 parts
do not)."""
import importlib.util
from pathlib import Path

import numpy as np

spec = importlib.util.spec_from_file_location(
    "fp16x3_backward_accuracy", Path(__file__).parents[1] / "tools/fp16x3_backward_accuracy.py")
emulation = importlib.util.module_from_spec(spec)
spec.loader.exec_module(emulation)


def test_round_toward_zero_and_scales():
    x = np.array([1 + 2.0 ** -30, -(1 + 2.0 ** -30), 1 - 2.0 ** -30, 3.0])
    assert emulation.round_toward_zero(x).tolist() == [1.0, -1.0, 1 - 2.0 ** -24, 3.0]
    assert emulation.pow2_scale(1.0) == 2.0 ** 14 and emulation.pow2_scale(3e4) == 1.0 and emulation.pow2_scale(7e4) == 0.25


def test_parts_hold_22_bits_and_products_are_close():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 32)).astype(np.float32)
    hi, lo = emulation.fp16_parts(x, emulation.pow2_scale(np.abs(x).max()))
    scale = emulation.pow2_scale(np.abs(x).max())
    assert np.abs((hi + lo) / scale - x).max() <= 2.0 ** -21 * np.abs(x).max()
    thi, tlo = emulation.tf32_parts(x)
    assert np.abs(thi + tlo - x).max() <= 2.0 ** -21 * np.abs(x).max()
    exact = x.astype(np.float64) @ x.T.astype(np.float64)
    got = emulation.product(emulation.tf32_parts(x), emulation.transposed(emulation.tf32_parts(x)), 8)
    assert np.abs(got - exact).max() <= 1e-5 * np.abs(exact).max()


def test_the_mismatch_fails_at_large_logits_and_the_fp16_parts_do_not():
    r = emulation.ratios(128, 64, 30.0, 0)
    assert r["mismatch"][2] > 3 * max(r["fp16x3"][2], r["3xtf32"][2])
    assert max(r["fp16x3"]) < 3
