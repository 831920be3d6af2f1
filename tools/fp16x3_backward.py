"""fp32 attention backward from three fp16 products ("fa2_fp16x3": numba_flash/fp16x3.py,
kernels/flash_backward_half.py in its fp32 mode) against the 3xTF32 backward ("fa2") and SDPA
EFFICIENT_ATTENTION, on the GPU: accuracy first, then per-call CUDA events, median of 10
(tools/tune_forward.median_ms), each in the same run.

    python tools/fp16x3_backward.py [--tilings 32x128 16x128] [--shapes 4,16,4096,128 ...]
        [--checks 2,2,300,301,128,x30 ...] [--jobs 12]

Accuracy (``--checks`` B,H,N_q,N_k,d[,causal][,x30]): max |g - g_fp64| / max |g_fp64| of dq, dk,
dv after fa2_fp16x3's forward, beside a plain fp32 implementation's (torch autograd, TF32 off)
and the 3xTF32 backward's after fa2's forward; flash-attention's rule is <= 3x plain. Timing
(``--shapes`` B,H,N,d[,causal]): the backward alone at each tiling (its six launches, host work
included) and the 3xTF32 one, ms and TFLOP/s (10 B H N^2 d, x 0.5 causal); forward + backward
(14 B H N^2 d) of fa2_fp16x3 (its default backward tiling, else the first given), of fa2 and of
SDPA EFFICIENT_ATTENTION (autograd). Every kernel is compiled first, ``--jobs`` processes at a
time (the disk cache), so the timings never include a compile.
"""
import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))   # the tree it runs in
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fp16x3_forward import grad_errors  # noqa: E402 (the tools folder, just added)
from tiling_arg import tiling_of  # noqa: E402

SHAPES = ["4,16,4096,64", "1,16,16384,64", "4,16,4096,64,causal", "16,16,1024,64", "32,12,512,64",
          "4,16,4096,128", "1,16,16384,128", "2,32,4096,128,causal", "8,32,2048,128"]
CHECKS = ["2,2,255,97,64", "1,2,4099,4099,64,causal", "2,2,300,301,40,x30", "2,2,255,97,111",
          "1,1,1000,1000,128", "2,2,300,301,128,x30", "1,2,97,4099,80,causal", "1,2,1,17,8",
          "1,2,2048,2048,128,causal"]


def fits(text, d):
    from numba_flash import fp16x3
    t = tiling_of(text)
    return t is None or fp16x3.backward_smem_bytes(t, d) <= 232448


def build(job):
    """Compile one kernel set (a tiny call) into the disk cache: ("fp16x3", tiling, d, causal)
    (forward and backward) or ("tc", d, causal)."""
    import torch
    import numba_flash as nf
    t0 = time.perf_counter()
    x = torch.randn((1, 1, 300, job[-2]), device="cuda")
    algorithm = "fa2_fp16x3" if job[0] == "fp16x3" else "fa2"
    o, lse = nf.flash_attention(x, x, x, causal=job[-1], return_lse=True, algorithm=algorithm)
    nf.flash_attention_backward(x, x, x, x, o, lse, causal=job[-1], algorithm=algorithm,
                                tiling=tiling_of(job[1]) if job[0] == "fp16x3" else None)
    torch.cuda.synchronize()
    return job, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tilings", nargs="+", default=["default"])
    ap.add_argument("--shapes", nargs="+", default=SHAPES)
    ap.add_argument("--checks", nargs="+", default=CHECKS)
    ap.add_argument("--jobs", type=int, default=12, help="compiling processes (0: compile here)")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import numba_flash as nf
    from tune_forward import median_ms
    shapes = [(*map(int, s.split(",")[:4]), s.endswith("causal")) for s in args.shapes]
    checks = [(*map(int, s.split(",")[:5]), "causal" in s, 30.0 if "x30" in s else 1.0) for s in args.checks]
    jobs = {("fp16x3", t, d, c) for _, _, _, d, c in shapes for t in args.tilings if fits(t, d)}
    jobs |= {("fp16x3", "default", d, c) for _, _, _, _, d, c, _ in checks}
    jobs |= {("fp16x3", "default", d, c) for _, _, _, d, c in shapes}
    jobs |= {("tc", d, c) for _, _, _, d, c in shapes} | {("tc", d, c) for _, _, _, _, d, c, _ in checks}
    t0 = time.perf_counter()
    if args.jobs == 0:
        built = [build(job) for job in sorted(jobs, key=str)]
    else:
        with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool:
            built = list(pool.map(build, sorted(jobs, key=str)))
    print(f"compiled {len(built)} kernel sets in {time.perf_counter() - t0:.0f} s "
          f"(longest {max(s for _, s in built):.0f} s)", flush=True)

    print("accuracy: shape | fp16x3 dq, dk, dv | 3xTF32 dq, dk, dv | plain fp32 dq, dk, dv | "
          "fp16x3 / plain", flush=True)
    for B, H, n_q, n_k, d, causal, x in checks:
        g = torch.Generator(device="cuda").manual_seed(1)
        q, k, v = (torch.randn((B, H, n, d), device="cuda", generator=g) for n in (n_q, n_k, n_k))
        q = q * x
        do = torch.randn(q.shape, device="cuda", generator=g)
        cells = []
        for algorithm in ("fa2_fp16x3", "fa2"):
            o, lse = nf.flash_attention(q, k, v, causal=causal, return_lse=True, algorithm=algorithm)
            grads = nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal, algorithm=algorithm)
            ours, plain = grad_errors(q, k, v, do, causal, grads)
            cells.append(ours)
        print(f"  {B},{H},{n_q},{n_k},{d}{',causal' if causal else ''}{',x30' if x != 1 else ''} | "
              + " | ".join(", ".join(f"{e:.2e}" for e in c) for c in (*cells, plain)) + " | "
              + ", ".join(f"{a / b:.2f}" for a, b in zip(cells[0], plain)), flush=True)

    print("timing: shape | backward ms (TFLOP/s) of each | forward + backward ms (TFLOP/s), x EFFICIENT", flush=True)
    for B, H, N, d, causal in shapes:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn((B, H, N, d), device="cuda", generator=g) for _ in range(4))
        flops = 4 * B * H * N * N * d * (0.5 if causal else 1)
        cells = []
        o, lse = nf.flash_attention(q, k, v, causal=causal, return_lse=True, algorithm="fa2_fp16x3")
        ref = nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal, algorithm="fa2")
        for text in args.tilings:
            if not fits(text, d):
                continue
            t = tiling_of(text)
            got = nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal, algorithm="fa2_fp16x3", tiling=t)
            diff = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(got, ref))
            ms = median_ms(lambda: nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal,
                                                               algorithm="fa2_fp16x3", tiling=t),
                           [()], reps=10, warmup=2)
            cells.append(f"fp16x3 {text} {ms:.3f} ({2.5 * flops / ms / 1e9:.1f}; vs tc {diff:.1e})")
        o2, lse2 = nf.flash_attention(q, k, v, causal=causal, return_lse=True)
        ms = median_ms(lambda: nf.flash_attention_backward(do, q, k, v, o2, lse2, causal=causal), [()], reps=10, warmup=2)
        cells.append(f"3xTF32 {ms:.3f} ({2.5 * flops / ms / 1e9:.1f})")

        def ours(algorithm):
            o, lse = nf.flash_attention(q, k, v, causal=causal, return_lse=True, algorithm=algorithm)
            return nf.flash_attention_backward(do, q, k, v, o, lse, causal=causal, algorithm=algorithm)

        qs, ks, vs = (x.detach().clone().requires_grad_() for x in (q, k, v))

        def efficient():
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal).backward(do)

        both = {name: median_ms(fn, [()], reps=10, warmup=2) for name, fn in (
            ("fp16x3", lambda: ours("fa2_fp16x3")), ("3xTF32", lambda: ours("fa2")), ("EFFICIENT", efficient))}
        cells.append(" ".join(f"{n} {ms:.3f} ({3.5 * flops / ms / 1e9:.1f}, {both['EFFICIENT'] / ms:.2f}x)"
                              for n, ms in both.items()))
        print(f"  {B},{H},{N},{d}{',causal' if causal else ''} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
