"""How a 3xTF32 dot product chained through one tensor-core accumulator loses accuracy as the
head dimension grows, and what order of accumulation keeps it at fp32 level (GPU only; issue 16,
d = 256 accuracy).

Each warp computes one 16 x 8 tile S = A B^T over K (A: 16 x K, B: 8 x K, normal entries times
``--scale``) with m16n8k8 TF32 mma (fragments as ``numba_flash.kernels.mma``), in one of these
orders:

- ``chained``: the three products of every k-step (lo hi, hi lo, hi hi) added into one running
  accumulator, K / 8 steps (how the tensor-core forward sums S and the backward S^T, dP^T);
- ``chunk<c>``: the same, but from zero every c k-steps, each chunk added in fp32 (round to
  nearest) to the sum;
- ``split<c>``: the small cross terms chained in their own accumulator over all of K, the large
  term from zero every c k-steps and added in fp32;
- ``ffma``: each lane sums its four outputs in fp32 FFMA, k in order (the FMA kernels);
- ``cublas``: torch.matmul in fp32 with TF32 off.

It prints, per order and K, the mean and max of |S - S64| / rms(S) and the mean signed error
(S - S64) / |S64| (negative: magnitudes shrink, as a truncating add would make them).

    python tools/tf32_accumulation.py [--scale 30] [--tiles 4096]
"""
from __future__ import annotations

import argparse

import numpy as np


def make_kernel(K: int, mode: str, chunk: int):
    from numba import cuda, float32

    from numba_flash.kernels.mma import gpu_instructions, warp_ops

    mma, parts = gpu_instructions().mma_tf32, warp_ops().split_finite   # the kernels' split
    KS = K // 8
    CHAINED, SPLIT = mode == "chained", mode == "split"
    C = chunk

    @cuda.jit
    def kernel(a, b, s):
        w = cuda.blockIdx.x * (cuda.blockDim.x // 32) + cuda.threadIdx.x // 32
        lane = cuda.threadIdx.x % 32
        g, t = lane // 4, lane % 4
        if w >= s.shape[0]:
            return
        z = float32(0.0)
        c0, c1, c2, c3 = z, z, z, z          # running (chained) or chunk accumulator
        q0, q1, q2, q3 = z, z, z, z          # fp32 sum of chunks
        m0, m1, m2, m3 = z, z, z, z          # small cross terms (split)
        for kk in range(KS):
            k0 = 8 * kk + t
            ah0, al0 = parts(a[w, g, k0])
            ah1, al1 = parts(a[w, g + 8, k0])
            ah2, al2 = parts(a[w, g, k0 + 4])
            ah3, al3 = parts(a[w, g + 8, k0 + 4])
            bh0, bl0 = parts(b[w, g, k0])
            bh1, bl1 = parts(b[w, g, k0 + 4])
            if SPLIT:
                m0, m1, m2, m3 = mma(al0, al1, al2, al3, bh0, bh1, m0, m1, m2, m3)
                m0, m1, m2, m3 = mma(ah0, ah1, ah2, ah3, bl0, bl1, m0, m1, m2, m3)
            else:
                c0, c1, c2, c3 = mma(al0, al1, al2, al3, bh0, bh1, c0, c1, c2, c3)
                c0, c1, c2, c3 = mma(ah0, ah1, ah2, ah3, bl0, bl1, c0, c1, c2, c3)
            c0, c1, c2, c3 = mma(ah0, ah1, ah2, ah3, bh0, bh1, c0, c1, c2, c3)
            if not CHAINED and (kk + 1) % C == 0:
                q0 += c0
                q1 += c1
                q2 += c2
                q3 += c3
                c0, c1, c2, c3 = z, z, z, z
        if CHAINED:
            q0, q1, q2, q3 = c0, c1, c2, c3
        s[w, g, 2 * t] = q0 + m0
        s[w, g, 2 * t + 1] = q1 + m1
        s[w, g + 8, 2 * t] = q2 + m2
        s[w, g + 8, 2 * t + 1] = q3 + m3

    return kernel


def make_ffma(K: int):
    from numba import cuda, float32

    @cuda.jit
    def kernel(a, b, s):
        w = cuda.blockIdx.x * (cuda.blockDim.x // 32) + cuda.threadIdx.x // 32
        lane = cuda.threadIdx.x % 32
        if w >= s.shape[0]:
            return
        for o in range(4):
            r, c = lane // 2 % 16, 2 * (lane % 2) + 4 * (o % 2) + o // 2
            acc = float32(0.0)
            for k in range(K):
                acc += a[w, r, k] * b[w, c, k]
            s[w, r, c] = acc

    return kernel


def errors(s, ref):
    rms = np.sqrt(np.mean(ref ** 2))
    rel = np.abs(s - ref) / rms
    big = np.abs(ref) > 0.5 * rms
    signed = np.mean(((s - ref) / np.abs(ref))[big])
    return rel.mean(), rel.max(), signed


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--tiles", type=int, default=4096)
    parser.add_argument("--dims", default="64,128,256")
    args = parser.parse_args(argv)
    import torch
    from numba import cuda

    torch.backends.cuda.matmul.allow_tf32 = False
    rng = np.random.default_rng(0)
    orders = [("chained", 1)] + [("chunk", c) for c in (1, 2, 4, 8)] + [("split", c) for c in (1, 2, 4, 8)]
    print(f"scale {args.scale}, {args.tiles} tiles of 16 x 8; error / rms(S): mean, max; "
          "mean signed relative error")
    for K in (int(x) for x in args.dims.split(",")):
        a = (rng.standard_normal((args.tiles, 16, K)) * args.scale).astype(np.float32)
        b = rng.standard_normal((args.tiles, 8, K)).astype(np.float32)
        ref = np.einsum("wik,wjk->wij", a.astype(np.float64), b.astype(np.float64))
        da, db = cuda.to_device(a), cuda.to_device(b)
        blocks = -(-args.tiles // 4)

        def show(name, kernel=None, s=None):
            """Run ``kernel`` into a NaN-poisoned S (or take ``s``) and print its errors."""
            if kernel is not None:
                out = cuda.to_device(np.full((args.tiles, 16, 8), np.nan, np.float32))
                kernel[blocks, 128](da, db, out)
                s = out.copy_to_host()
            mean, mx, signed = errors(s.astype(np.float64), ref)
            print(f"K {K:4d} {name:8s} mean {mean:.3e} max {mx:.3e} signed {signed:+.3e}")

        for mode, c in orders:
            if mode == "chained" or (K // 8) % c == 0:
                show(mode if mode == "chained" else f"{mode}{c}", make_kernel(K, mode, c))
        show("ffma", make_ffma(K))
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        show("cublas", s=torch.matmul(ta, tb.transpose(1, 2)).cpu().numpy())


if __name__ == "__main__":
    main()
