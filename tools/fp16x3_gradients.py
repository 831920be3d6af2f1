"""Why fa2_fp16x3 is forward-only: the 3xTF32 backward ("fa2") from fa2_fp16x3's o and lse,
against the same backward from fa2's, and from the two mixed (fa2_fp16x3's o with fa2's lse,
and the reverse), each gradient's error against float64 as a multiple of a plain fp32
implementation's (torch's math backend; flash-attention's rule allows 3x).

The backward recomputes P = exp(S - lse) with its own S (3xTF32); fa2's forward summed S the
same way, so P there is normalised as the forward normalised it, while fa2_fp16x3's S (three
fp16 products) differs from it by a few ulps: at large logits that mismatch, not the lse's own
error, is what the gradients show (dv, which depends on P alone, most).

    NUMBA_ENABLE_CUDASIM=1 python tools/fp16x3_gradients.py        # CPU, CUDA simulator
    python tools/fp16x3_gradients.py --n 300 1000 --d 64 128     # a GPU
"""
from __future__ import annotations

import argparse

import numpy as np


def _rel(x, ref) -> float:
    return float(np.abs(np.asarray(x, np.float64) - ref).max() / np.abs(ref).max())


def torch_grads(q, k, v, do, dtype, causal):
    """dq, dk, dv of torch's math attention in ``dtype`` (TF32 off)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = getattr(torch, dtype)
    xs = [torch.tensor(x, dtype=dtype, requires_grad=True) for x in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        o = torch.nn.functional.scaled_dot_product_attention(*xs, is_causal=causal)
    o.backward(torch.tensor(do, dtype=dtype))
    return [x.grad.numpy() for x in xs]


def ratios(n: int, d: int, logits: float, causal: bool, seed: int) -> dict[str, list[float]]:
    """{pairing: [dq, dk, dv error / plain fp32's]} at one shape (B = 1, H = 2, N_q = N_k = n;
    causal top-left, as torch's)."""
    import numba_flash as nf

    g = np.random.default_rng(seed)
    q = (logits * g.standard_normal((1, 2, n, d))).astype(np.float32)
    k, v, do = (g.standard_normal((1, 2, n, d)).astype(np.float32) for _ in range(3))
    ref, plain = torch_grads(q, k, v, do, "float64", causal), torch_grads(q, k, v, do, "float32", causal)
    diagonal = 0 if causal else None
    fa2 = nf.flash_attention(q, k, v, causal=causal, diagonal=diagonal, return_lse=True)
    x3 = nf.flash_attention(q, k, v, causal=causal, diagonal=diagonal, return_lse=True,
                            algorithm="fa2_fp16x3")
    pairs = {"fa2 o, fa2 lse": fa2, "fa2_fp16x3 o, fa2_fp16x3 lse": x3,
             "fa2_fp16x3 o, fa2 lse": (x3[0], fa2[1]), "fa2 o, fa2_fp16x3 lse": (fa2[0], x3[1])}
    out = {}
    for name, (o, lse) in pairs.items():
        grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal, diagonal=diagonal)
        out[name] = [_rel(a, r) / _rel(p, r) for a, r, p in zip(grads, ref, plain)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[33, 40])
    parser.add_argument("--d", type=int, nargs="+", default=[40, 64])
    parser.add_argument("--logits", type=float, nargs="+", default=[1.0, 30.0])
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    print("n d logits causal seed | pairing: dq dk dv error / plain fp32's (rule: <= 3)")
    for n in args.n:
        for d in args.d:
            for logits in args.logits:
                for causal in (False, True):
                    for seed in range(args.seeds):
                        got = ratios(n, d, logits, causal, seed)
                        print(f"{n} {d} {logits:g} {causal} {seed} | " + " | ".join(
                            f"{name}: " + " ".join(f"{x:.2f}" for x in r) for name, r in got.items()),
                            flush=True)


if __name__ == "__main__":
    main()
