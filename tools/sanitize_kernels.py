"""Run every kernel once at small awkward sizes: the workload for compute-sanitizer.

    compute-sanitizer --tool memcheck  python tools/sanitize_kernels.py
    compute-sanitizer --tool racecheck python tools/sanitize_kernels.py [--only fa2,bwd_fa2]
``--only`` keeps the named kernels (forward algorithms, ``bwd_`` + backward algorithm, ``bwd_det``
for the deterministic backward, ``standard``): racecheck runs each launch ~100x slower.
``--shape N_Q,N_K,D[,causal] [--tiling BRxBC[p]]`` runs that one shape instead of the five (a
trailing p: warp pairs; e.g. the d = 80 shape with and without them, ``--shape 61,97,80,causal
--tiling 16x64p`` / ``16x64``). Run it once without the sanitizer first: the kernels are then
loaded from the disk cache, not compiled under it.
Exits non-zero if any result is off the float64 reference (so a clean log means clean and right).
"""
import argparse

import numpy as np

import numba_flash as nf
from tiling_arg import tiling_of
from numba_flash import reference as ref


def one_shape(shape: str, tiling: str | None):
    """'61,97,80,causal' and '16x64p' -> (61, 97, 80, True, Tiling(16, 64, warp_pairs=True))."""
    parts = shape.split(",")
    n_q, n_k, d = (int(x) for x in parts[:3])
    return n_q, n_k, d, parts[3:] == ["causal"], tiling_of(tiling) if tiling else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None, help="comma-separated kernel names (default: all)")
    ap.add_argument("--shape", default=None, help="N_Q,N_K,D[,causal]: this shape alone")
    ap.add_argument("--tiling", default=None, help="with --shape: BRxBC, a trailing p for warp pairs")
    args = ap.parse_args()
    keep = (lambda name: True) if args.only is None else (lambda name: name in args.only.split(","))
    rng = np.random.default_rng(7)
    worst = 0.0
    shapes = [(97, 61, 40, True, nf.Tiling(32, 32)),
              (61, 97, 80, True, None), (33, 47, 24, False, nf.Tiling(16, 64)),
              (300, 301, 64, True, None),    # fa2's 256 x 32: 16 warps
              (45, 70, 20, True, None)]      # d not a multiple of 8
    if args.shape:
        shapes = [one_shape(args.shape, args.tiling)]
    elif args.tiling:
        ap.error("--tiling goes with --shape")
    for n_q, n_k, d, causal, tiling in shapes:
        q, k, v, do = (rng.standard_normal((1, 2, n, d)).astype(np.float32) for n in (n_q, n_k, n_k, n_q))
        o_ref, lse_ref = ref.attention_forward(q, k, v, causal=causal)
        g_ref = ref.attention_backward(do, q, k, v, causal=causal)
        o, lse = o_ref.astype(np.float32), lse_ref.astype(np.float32)  # unless a forward runs
        for algorithm in filter(keep, ("fa1", "fa2", "fa2_fma")):
            o, lse = nf.flash_attention(q, k, v, causal=causal, return_lse=True, algorithm=algorithm, tiling=tiling)
            worst = max(worst, np.abs(o - o_ref).max())
        for backward, det in (("fa2", False), ("fa2_fma", False), ("fa2_fma", True)):
            if not keep("bwd_det" if det else "bwd_" + backward):
                continue
            g = nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal, tiling=tiling,
                                            algorithm=backward, deterministic=det)
            worst = max(worst, max(np.abs(a - b).max() for a, b in zip(g, g_ref)))
        if not keep("standard"):
            continue
        o, p = nf.standard_attention(q, k, v, causal=causal, return_probs=True, tiling=tiling)
        g = nf.standard_attention_backward(do, q, k, v, o, p, causal=causal, tiling=tiling)
        worst = max(worst, np.abs(o - o_ref).max(), max(np.abs(a - b).max() for a, b in zip(g, g_ref)))
    print(f"max abs error over all kernels: {worst:.2e}")
    raise SystemExit(0 if worst < 1e-4 else 1)


if __name__ == "__main__":
    main()
