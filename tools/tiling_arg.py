"""Tilings as the tools take them on the command line: ``BRxBC``, then ``w16`` for a warp a
16-row tile (``Tiling.warp_rows``, the fp16 / bf16 / fp16x3 forward) or ``p`` for two warps a
16-key tile (``Tiling.warp_pairs``, the tensor-core backward); ``default`` for the API's own
(None): '112x32' -> Tiling(112, 32), '128x32w16' -> Tiling(128, 32, warp_rows=16), '16x64p' ->
Tiling(16, 64, warp_pairs=True)."""
import argparse
import re

from simulator.tiling import Tiling

PATTERN = re.compile(r"(\d+)x(\d+)(?:w(\d+))?(p?)")


def tiling_of(text: str) -> Tiling | None:
    """The Tiling ``text`` names (module docstring); argparse.ArgumentTypeError naming the form
    where it names none (so ``type=tiling_of`` reports it as a usage error)."""
    if text == "default":
        return None
    match = PATTERN.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"a tiling is BRxBC[w16][p] or 'default' (e.g. 128x32w16), got {text!r}")
    br, bc, rows, pairs = match.groups()
    return Tiling(int(br), int(bc), warp_pairs=bool(pairs), warp_rows=int(rows or 0))
