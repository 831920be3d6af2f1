"""The tools' command-line tilings (tools/tiling_arg.py): each suffix sets its Tiling field, and
a malformed one is an argparse usage error naming the form."""
import argparse
import sys
from pathlib import Path

import pytest

from simulator.tiling import Tiling

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from tiling_arg import tiling_of  # noqa: E402 (the tools folder, just added)


@pytest.mark.parametrize("text, tiling", [
    ("112x32", Tiling(112, 32)), ("128x32w16", Tiling(128, 32, warp_rows=16)),
    ("16x64p", Tiling(16, 64, warp_pairs=True)), ("default", None)])
def test_each_suffix_sets_its_field(text, tiling):
    assert tiling_of(text) == tiling


@pytest.mark.parametrize("text", ["", "128", "128x", "x32", "128x32w", "128x32q", "128X32", "default2"])
def test_a_malformed_tiling_is_a_usage_error(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r"BRxBC\[w16\]\[p\]"):
        tiling_of(text)
