"""Would a backward from fp16 parts keep fp32 accuracy? A NumPy emulation, before building one
(issue 16: fa2_fp16x3's forward passes the accuracy rule and runs 1.3-1.4x SDPA at d = 128, but
it is forward-only: tools/fp16x3_gradients.py).

Emulated: each product as the tensor cores would make it from parts, each gradient's error
against float64 as a multiple of a plain fp32 implementation's (NumPy float32; flash-attention's
rule allows 3x), for
- ``fp16x3``: every product of the backward (S^T = K Q^T, dP^T = V dO^T, dV = P^T dO, dK =
  dS^T Q, dQ = dS K) from fp16 hi + lo parts, hi hi + hi lo + lo hi, as fa2_fp16x3's forward
  makes S and P V (kernels/split_half.py): q, k, v, dO each scaled by a power of two per head
  (largest |x| into [2^14, 2^15)), P by 2^15, dS by a power of two from a bound known before
  the backward runs, 2 d max|dO| max|v| (|dP| and |D| are at most d max|dO| max|v|); and the
  lse from the forward's own S (the same emulated product), so P is normalised as the forward
  normalised it;
- ``mismatch``: the same, but S^T from 3xTF32 parts (TF32 hi + lo, k steps of 8), as today's
  fa2 backward would compute it from fa2_fp16x3's lse (tools/fp16x3_gradients.py measured
  that pairing in the kernels under the CUDA simulator: dv 11.6-45.7x plain at logits x30);
- ``3xtf32``: every product from TF32 parts, unscaled, k steps of 8, the lse from their own
  S: today's fa2 backward after fa2's forward, which passes the rule on the H200 (0.4-2.0x
  plain at N = 300, README), so that this emulation's pessimism can be read off it.
The tensor cores' fp32 accumulation is taken to truncate (round toward zero) at every add of a
k step's product into the accumulator, a k step's own products summed exactly; dK and dV are
summed from zero each row block of ``BR`` rows and added in fp32 (round to nearest), dQ's
partial sums of each key block of ``BC`` keys likewise (its atomic adds). A model of the
arithmetic, not the kernels: their order within a k step, and their fragments, are not
emulated.

    python tools/fp16x3_backward_accuracy.py [--n 256 1000] [--d 64 128] [--logits 1 30] [--seeds 2]
"""
from __future__ import annotations

import argparse

import numpy as np

#: Rows a block of the backward sums dK, dV over from zero, and keys of a dQ partial sum.
BR, BC = 32, 64
F32, F64 = np.float32, np.float64


def round_toward_zero(x: np.ndarray) -> np.ndarray:
    """float64 x rounded toward zero to float32 (the tensor cores' accumulating adds)."""
    y = x.astype(F32)                                  # round to nearest
    over = np.abs(y.astype(F64)) > np.abs(x)           # rounded away from zero: one ulp back
    return np.where(over, np.nextafter(y, F32(0)), y)


def pow2_scale(amax: float, top: int = 14) -> float:
    """The power of two that takes ``amax`` into [2^top, 2^(top + 1))."""
    return 2.0 ** (top - np.floor(np.log2(amax))) if amax > 0 else 1.0


def fp16_parts(x: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo) fp16 parts of float32 x times ``scale`` (a power of two), as float64."""
    xs = x.astype(F32) * F32(scale)
    hi = xs.astype(np.float16).astype(F32)
    lo = (xs - hi).astype(np.float16)
    return hi.astype(F64), lo.astype(F64)


def tf32_parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo) TF32 parts of float32 x (10 mantissa bits each, round to nearest), as float64."""
    def tf32(y):
        bits = y.astype(F32).view(np.uint32)
        return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(F32)
    hi = tf32(x)
    return hi.astype(F64), tf32(x.astype(F32) - hi).astype(F64)


def product(a_parts, b_parts, k_step: int) -> np.ndarray:
    """A B (A (m, k), B (k, n), float64 parts) as three chained mma per k step would make it:
    lo hi and hi lo, then hi hi, each step's products exact, each add into the fp32
    accumulator truncated."""
    (a_hi, a_lo), (b_hi, b_lo) = a_parts, b_parts
    acc = np.zeros((a_hi.shape[0], b_hi.shape[1]), F32)
    for s in range(0, a_hi.shape[1], k_step):
        k = slice(s, s + k_step)
        for a, b in ((a_lo, b_hi), (a_hi, b_lo), (a_hi, b_hi)):
            acc = round_toward_zero(acc.astype(F64) + a[:, k] @ b[k])
    return acc


def blocked(a_parts, b_parts, k_step: int, block: int) -> np.ndarray:
    """``product`` summed from zero over each ``block`` of the inner dimension, the blocks'
    sums added in fp32 (round to nearest)."""
    total = np.zeros((a_parts[0].shape[0], b_parts[0].shape[1]), F32)
    for s in range(0, a_parts[0].shape[1], block):
        k = slice(s, s + block)
        total += product([p[:, k] for p in a_parts], [p[k] for p in b_parts], k_step)
    return total


def transposed(parts):
    return tuple(p.T for p in parts)


def reference(q, k, v, do, scale, dtype):
    """(o, lse, dq, dk, dv) of plain attention in ``dtype`` (q (N, d), one head)."""
    q, k, v, do = (x.astype(dtype) for x in (q, k, v, do))
    s = (q @ k.T) * dtype(scale)
    m = s.max(1, keepdims=True)
    p = np.exp(s - m)
    lse = (m + np.log(p.sum(1, keepdims=True)))[:, 0]
    p /= p.sum(1, keepdims=True)
    o = p @ v
    dv = p.T @ do
    dp = do @ v.T
    ds = p * (dp - (do * o).sum(1, keepdims=True))
    return o, lse, (ds @ k) * dtype(scale), (ds.T @ q) * dtype(scale), dv


def emulated_grads(q, k, v, do, o, scale, variant: str):
    """dq, dk, dv of a backward from parts (module docstring): ``variant`` "fp16x3" (fp16
    parts, lse from their S), "mismatch" (the same, S^T from TF32 parts) or "3xtf32" (TF32
    parts throughout, unscaled, k steps of 8, lse from their S: today's fa2 backward after
    fa2's forward, the emulation's own yardstick)."""
    d = q.shape[1]
    if variant == "3xtf32":
        split, k_step = (lambda x, _s: tf32_parts(x)), 8
        sq = sk = sv = sdo = sp = sds = 1.0
    else:
        split, k_step = fp16_parts, 16
        sq, sk, sv, sdo = (pow2_scale(np.abs(x).max()) for x in (q, k, v, do))
        sp = 2.0 ** 15                                 # P <= 1: its lo part stays normal
        sds = pow2_scale(2 * d * np.abs(do).max() * np.abs(v).max())   # |dS| <= that bound
    qp, kp, vp, dop = (split(x, s) for x, s in ((q, sq), (k, sk), (v, sv), (do, sdo)))
    s_own = product(qp, transposed(kp), k_step).astype(F64) / (sq * sk)   # the forward's S
    lse = np.log(np.exp(s_own * scale - (s_own * scale).max(1, keepdims=True)).sum(1)) \
        + (s_own * scale).max(1)
    if variant == "mismatch":
        st = product(tf32_parts(k), transposed(tf32_parts(q)), 8).astype(F64)
    else:
        st = s_own.T
    pt = np.exp(st * scale - lse[None]).astype(F32)                     # P^T (keys x queries)
    dv = blocked(split(pt, sp), dop, k_step, BR).astype(F64) / (sp * sdo)
    dpt = product(vp, transposed(dop), k_step).astype(F64) / (sv * sdo)
    dvec = (do.astype(F32) * o.astype(F32)).sum(1)
    dst = (pt * (dpt.astype(F32) - dvec[None])).astype(F32)             # dS^T
    dsp = split(dst, sds)
    dk = blocked(dsp, qp, k_step, BR).astype(F64) * scale / (sds * sq)
    dq = blocked(transposed(dsp), kp, k_step, BC).astype(F64) * scale / (sds * sk)
    return dq, dk, dv


def ratios(n: int, d: int, logits: float, seed: int) -> dict[str, list[float]]:
    """{variant: [dq, dk, dv error / plain fp32's]} for one head of n x n, head dim d, q scaled
    by ``logits``."""
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((n, d)) * logits).astype(F32)
    k, v, do = (rng.standard_normal((n, d)).astype(F32) for _ in range(3))
    scale = 1.0 / np.sqrt(d)
    o64, _, *ref = reference(q, k, v, do, scale, F64)
    _, _, *plain = reference(q, k, v, do, scale, F32)
    o = o64.astype(F32)              # the forward's o: fp32-accurate (fa2_fp16x3's passes)

    def rel(x, r):
        return float(np.abs(x.astype(F64) - r).max() / np.abs(r).max())
    out = {}
    for variant in ("3xtf32", "fp16x3", "mismatch"):
        grads = emulated_grads(q, k, v, do, o, scale, variant)
        out[variant] = [rel(g, r) / rel(p, r) for g, r, p in zip(grads, ref, plain)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[256, 1000])
    parser.add_argument("--d", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--logits", type=float, nargs="+", default=[1.0, 30.0])
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    print(f"{'n':>5} {'d':>4} {'logits':>6} {'seed':>4}  {'variant':9s} "
          f"{'dq / plain':>10} {'dk / plain':>10} {'dv / plain':>10}")
    for n in args.n:
        for d in args.d:
            for logits in args.logits:
                for seed in range(args.seeds):
                    for variant, r in ratios(n, d, logits, seed).items():
                        print(f"{n:5d} {d:4d} {logits:6g} {seed:4d}  {variant:9s} "
                              + " ".join(f"{x:10.2f}" for x in r), flush=True)


if __name__ == "__main__":
    main()
