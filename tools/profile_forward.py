"""Run one FA2 forward launch (after a warm-up) for a profiler to capture, e.g.

    ncu --clock-control none -k regex:flash_forward --launch-skip 1 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats python tools/profile_forward.py --d 64

or, per SASS instruction (sectors each global access requests, and the excess over the ideal):

    ncu --clock-control none -k regex:flash_forward_half --launch-skip 1 --launch-count 1 \
        --section SourceCounters --page source --print-source sass --csv \
        python tools/profile_forward.py --dtype float16
"""
import argparse

import torch

import numba_flash as nf
from tiling_arg import tiling_of


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--b", type=int, default=4)
    ap.add_argument("--h", type=int, default=16)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--algorithm", default="fa2")
    ap.add_argument("--tiling", default=None, help="Br x Bc, e.g. 128x64 (default: the API's)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    args = ap.parse_args()
    tiling = tiling_of(args.tiling) if args.tiling else None
    q, k, v = (torch.randn(args.b, args.h, args.n, args.d, device="cuda", dtype=getattr(torch, args.dtype))
               for _ in range(3))
    for _ in range(2):
        nf.flash_attention(q, k, v, causal=args.causal, algorithm=args.algorithm, tiling=tiling)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
