"""The fp32 tensor-core backward alone (the API's tilings, or others), checked against float64
before it is timed; per-call CUDA events, median of 10 (after 2 warm-ups), with the forward and SDPA
EFFICIENT_ATTENTION's forward + backward in the same run (``--sdpa``). It imports the
numba_flash of the directory it runs in: run it from an older tree's root too (``git archive``)
to time a kernel version against the one before it.

    python tools/backward_timing.py [--label v14] [--sdpa] [--tilings default 16x64p 16x64]
        [--shapes 4,16,4096,128 2,32,4096,128,causal]

One line a shape and backward tiling: backward ms and TFLOP/s (2.5 x 4 B H N^2 d, x 0.5
causal), the forward's ms, forward + backward ms, the largest error of o, dq, dk, dv relative
to its max |x| against float64 (tools/tune_forward.median_ms: 2 warm-ups, median of 10).
v12's warp pairs were timed with ``--tilings 16x64p 16x64`` (then
tools/backward_pairs_timing.py).
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))   # the tree it runs in

from tiling_arg import tiling_of  # noqa: E402 (after the tree is on the path)

SHAPES = ["4,16,4096,128", "2,32,4096,128,causal", "8,32,2048,128", "4,16,4096,64",
          "16,16,1024,64", "4,16,4096,64,causal"]


def parse(shape: str):
    parts = shape.split(",")
    return (*map(int, parts[:4]), len(parts) > 4 and parts[4] == "causal")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="")
    ap.add_argument("--sdpa", action="store_true")
    ap.add_argument("--shapes", nargs="+", default=SHAPES)
    ap.add_argument("--tilings", nargs="+", default=["default"],
                    help="backward tilings, each timed: BRxBC, a trailing p for warp pairs")
    ap.add_argument("--warmup-only", action="store_true", help="build the kernels, time nothing")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import numba_flash as nf
    from experiments.common.cases import Case
    from experiments.common.correctness import relative_errors
    from tune_forward import median_ms
    shapes = [parse(s) for s in args.shapes]
    tilings = {name: tiling_of(name) for name in args.tilings}
    t0 = time.perf_counter()
    # the forward at the API's tiling (the one timed), each backward tiling without a forward
    configs = [nf.KernelConfig(d=d, n_q=n, causal=c, forward="fa2", backward=None)
               for _, _, n, d, c in shapes]
    configs += [nf.KernelConfig(d=d, n_q=n, causal=c, forward=None, backward="fa2", tiling=t)
                for _, _, n, d, c in shapes for t in tilings.values()]
    rows = nf.warmup(list(dict.fromkeys(configs)))
    print(f"{args.label} {nf.__file__}: warm-up {time.perf_counter() - t0:.0f} s, errors: "
          f"{[r['error'] for r in rows if r['error']]}", flush=True)
    if args.warmup_only:
        return
    for B, H, N, d, causal in shapes:
        g = torch.Generator(device="cuda").manual_seed(0)
        x = {n: torch.randn((B, H, N, d), device="cuda", generator=g)
             for n in ("q", "k", "v", "do")}
        o, lse = nf.flash_attention(x["q"], x["k"], x["v"], causal=causal, return_lse=True)
        fwd = median_ms(lambda: nf.flash_attention(x["q"], x["k"], x["v"], causal=causal,
                                                   return_lse=True), [()], reps=10, warmup=2)
        flops = 4 * B * H * N * N * d * (0.5 if causal else 1)
        shape = f"{args.label} {B},{H},{N},{d},{'causal' if causal else 'full'}"
        for name, tiling in tilings.items():
            call = lambda: nf.flash_attention_backward(x["do"], x["q"], x["k"], x["v"], o, lse,
                                                       causal=causal, tiling=tiling)
            dq, dk, dv = call()
            err, _ = relative_errors(Case("fa2", "fwd_bwd", B, H, N, d, causal=causal),
                                     x, {"o": o, "dq": dq, "dk": dk, "dv": dv})
            bwd = median_ms(call, [()], reps=10, warmup=2)
            print(f"{shape} {name}: backward {bwd:.3f} ms ({2.5 * flops / bwd / 1e9:.1f} TFLOP/s), "
                  f"forward {fwd:.3f} ms, fwd+bwd {fwd + bwd:.3f} ms; max rel err "
                  f"{max(err.values()):.2e}", flush=True)
        if args.sdpa:
            qs = {n: t.clone().requires_grad_(n != "do") for n, t in x.items()}

            def sdpa():
                with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                    out = F.scaled_dot_product_attention(qs["q"], qs["k"], qs["v"],
                                                         is_causal=causal)
                return torch.autograd.grad(out, (qs["q"], qs["k"], qs["v"]), qs["do"])
            ref = median_ms(sdpa, [()], reps=10, warmup=2)
            print(f"{shape} SDPA EFFICIENT_ATTENTION fwd+bwd {ref:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
