"""fp32 attention forward from three fp16 products (numba_flash/fp16x3.py) against the
3xTF32 forward (the API's "fa2") and SDPA EFFICIENT_ATTENTION, on the GPU: accuracy first, then
per-call CUDA events, median of 10 (tools/tune_forward.median_ms), each in the same run.

    python tools/fp16x3_forward.py [--tilings 112x32 128x32w16] [--shapes 4,16,4096,64 ...]
        [--checks 2,2,255,97,64 ...] [--jobs 12]

Accuracy (``--checks`` B,H,N_q,N_k,d[,causal][,x30]): max |o - o_fp64| / max |o_fp64| and the
same of lse (absolute, nats), beside a plain fp32 implementation's (torch, TF32 off) and the
3xTF32 forward's; flash-attention's rule is <= 2x plain. Timing (``--shapes``
B,H,N,d[,causal]): ms and TFLOP/s (4 B H N^2 d, x 0.5 causal) of the fp16x3 forward at each
tiling (its three launches, host work included), the API's 3xTF32 forward and SDPA
EFFICIENT_ATTENTION. Every kernel is compiled first, ``--jobs`` processes at a time (the disk
cache), so the timings never include a compile.
"""
import argparse
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))   # the tree it runs in
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiling_arg import tiling_of  # noqa: E402 (after the tree is on the path)

SHAPES = ["4,16,4096,64", "1,16,16384,64", "4,16,4096,64,causal", "16,16,1024,64", "32,12,512,64",
          "4,16,4096,128", "2,32,4096,128,causal", "8,32,2048,128"]
CHECKS = ["2,2,255,97,64", "1,2,4099,4099,64,causal", "2,2,300,301,40,x30", "2,2,255,97,111",
          "1,1,1000,1000,128", "2,2,300,301,128,x30", "1,2,97,4099,80,causal", "1,2,1,17,8",
          "2,2,255,97,256"]


def pick(tilings, d):
    """The tilings timed at head dim d: those whose tiles fit the shared memory."""
    from numba_flash import fp16x3
    return [t for t in tilings if t is None or fp16x3.smem_bytes(t, d) <= 232448]


def forward(q, k, v, causal, tiling):
    """The API's "fa2_fp16x3" forward -> o, lse (tiling None: its default)."""
    import numba_flash as nf
    return nf.flash_attention(q, k, v, causal=causal, algorithm="fa2_fp16x3", tiling=tiling,
                              return_lse=True)


def build(job):
    """Compile one kernel set (a tiny call) into the disk cache: ("fp16x3", tiling, d, causal)
    or ("tc", d, causal)."""
    import torch
    import numba_flash as nf
    t0 = time.perf_counter()
    if job[0] == "fp16x3":
        _, text, d, causal = job
        t = tiling_of(text)
        x = torch.randn((1, 1, 300, d), device="cuda")
        forward(x, x, x, causal, t)
    elif job[0] == "tc":
        _, d, causal = job
        x = torch.randn((1, 1, 300, d), device="cuda")
        nf.flash_attention(x, x, x, causal=causal)
    else:
        _, d, causal = job
        x = torch.randn((1, 1, 300, d), device="cuda")
        o, lse = nf.flash_attention(x, x, x, causal=causal, return_lse=True)
        nf.flash_attention_backward(x, x, x, x, o, lse, causal=causal)
    torch.cuda.synchronize()
    return job, time.perf_counter() - t0


def errors(q, k, v, causal, o, lse):
    """max |o - ref| / max |ref| and max |lse - ref| (finite rows), ref in float64."""
    import torch
    n_q, n_k, d = q.shape[2], k.shape[2], q.shape[3]
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(d)
    if causal:
        r = torch.arange(n_q, device=q.device)[:, None]
        c = torch.arange(n_k, device=q.device)[None, :]
        s = s.masked_fill(c > r + (n_k - n_q), -math.inf)
    lse_ref = torch.logsumexp(s, -1)
    o_ref = torch.softmax(s, -1).nan_to_num(0) @ v.double()
    seen = torch.isfinite(lse_ref)
    e_o = ((o.double() - o_ref).abs().max() / o_ref.abs().max()).item()
    e_l = (lse.double() - lse_ref)[seen].abs().max().item() if seen.any() else 0.0
    return e_o, e_l


def plain(q, k, v, causal):
    """fp32 attention in plain fp32 arithmetic (torch, TF32 off): o, lse."""
    import torch
    n_q, n_k, d = q.shape[2], k.shape[2], q.shape[3]
    torch.backends.cuda.matmul.allow_tf32 = False
    s = (q @ k.transpose(-1, -2)) / math.sqrt(d)
    if causal:
        r = torch.arange(n_q, device=q.device)[:, None]
        c = torch.arange(n_k, device=q.device)[None, :]
        s = s.masked_fill(c > r + (n_k - n_q), -math.inf)
    lse = torch.logsumexp(s, -1)
    return torch.softmax(s, -1).nan_to_num(0) @ v, lse


def grad_errors(q, k, v, do, causal, grads):
    """max |g - ref| / max |ref| of dq, dk, dv (float64 autograd reference), and the same of
    plain fp32 autograd (TF32 off)."""
    import torch

    def attention(q, k, v):
        n_q, n_k, d = q.shape[2], k.shape[2], q.shape[3]
        s = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        if causal:
            r = torch.arange(n_q, device=q.device)[:, None]
            c = torch.arange(n_k, device=q.device)[None, :]
            s = s.masked_fill(c > r + (n_k - n_q), -math.inf)
        return torch.softmax(s, -1).nan_to_num(0) @ v

    def autograd(dtype):
        xs = [x.detach().to(dtype).clone().requires_grad_() for x in (q, k, v)]
        attention(*xs).backward(do.to(dtype))
        return [x.grad for x in xs]

    torch.backends.cuda.matmul.allow_tf32 = False
    ref, plain = autograd(torch.float64), autograd(torch.float32)

    def rel(g, r):
        return ((g.double() - r).abs().max() / r.abs().max()).item()
    return [rel(g, r) for g, r in zip(grads, ref)], [rel(g, r) for g, r in zip(plain, ref)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tilings", nargs="+", default=["default"])
    ap.add_argument("--shapes", nargs="+", default=SHAPES)
    ap.add_argument("--checks", nargs="+", default=CHECKS)
    ap.add_argument("--check-tiling", default="default")
    ap.add_argument("--jobs", type=int, default=12, help="compiling processes (0: compile here)")
    ap.add_argument("--grads", action="store_true",
                    help="also the gradients of the API's backward from each forward's o, lse")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import numba_flash as nf
    from tune_forward import median_ms
    shapes = [(*map(int, s.split(",")[:4]), s.endswith("causal")) for s in args.shapes]
    checks = [(*map(int, s.split(",")[:5]), "causal" in s, 30.0 if "x30" in s else 1.0) for s in args.checks]
    jobs = {("fp16x3", t, d, c) for _, _, _, d, c in shapes for t in args.tilings
            if pick([tiling_of(t)], d)}
    jobs |= {("fp16x3", args.check_tiling, d, c) for _, _, _, _, d, c, _ in checks}
    jobs |= {("tc", d, c) for _, _, _, d, c in shapes} | {("tc", d, c) for _, _, _, _, d, c, _ in checks}
    if args.grads:
        jobs |= {("bwd", d, c) for _, _, _, _, d, c, _ in checks}
    t0 = time.perf_counter()
    if args.jobs == 0:   # in this process, one at a time
        built = []
        for job in sorted(jobs, key=str):
            built.append(build(job))
            print(f"  built {job} in {built[-1][1]:.0f} s", flush=True)
    else:
        with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool:
            built = list(pool.map(build, sorted(jobs, key=str)))
    print(f"compiled {len(built)} kernel sets in {time.perf_counter() - t0:.0f} s "
          f"(longest {max(s for _, s in built):.0f} s)", flush=True)

    print("accuracy: shape | fp16x3 o, lse | 3xTF32 o, lse | plain fp32 o, lse | fp16x3 o / plain", flush=True)
    for B, H, n_q, n_k, d, causal, x in checks:
        g = torch.Generator(device="cuda").manual_seed(1)
        q, k, v = (torch.randn((B, H, n, d), device="cuda", generator=g) for n in (n_q, n_k, n_k))
        q = q * x
        o, lse = forward(q, k, v, causal, tiling_of(args.check_tiling))
        e = errors(q, k, v, causal, o, lse)
        o2, lse2 = nf.flash_attention(q, k, v, causal=causal, return_lse=True)
        e2 = errors(q, k, v, causal, o2, lse2)
        ep = errors(q, k, v, causal, *plain(q, k, v, causal))
        print(f"  {B},{H},{n_q},{n_k},{d}{',causal' if causal else ''}{',x30' if x != 1 else ''} | "
              f"{e[0]:.2e}, {e[1]:.2e} | {e2[0]:.2e}, {e2[1]:.2e} | {ep[0]:.2e}, {ep[1]:.2e} | "
              f"{e[0] / ep[0]:.2f}", flush=True)
        if args.grads:   # the API's backward ("fa2") from each forward's o and lse
            do = torch.randn(o.shape, device="cuda", generator=g)
            for name, (oo, ll) in (("fp16x3", (o, lse)), ("3xTF32", (o2, lse2))):
                grads = nf.flash_attention_backward(do, q, k, v, oo, ll, causal=causal)
                ours, plain_g = grad_errors(q, k, v, do, causal, grads)
                print(f"    gradients after the {name} forward: dq, dk, dv {', '.join(f'{x:.2e}' for x in ours)}"
                      f" | plain fp32 {', '.join(f'{x:.2e}' for x in plain_g)} | ratio "
                      f"{', '.join(f'{a / b:.2f}' for a, b in zip(ours, plain_g))}", flush=True)

    print("timing: shape | ms (TFLOP/s) of each", flush=True)
    for B, H, N, d, causal in shapes:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn((B, H, N, d), device="cuda", generator=g) for _ in range(3))
        flops = 4 * B * H * N * N * d * (0.5 if causal else 1)
        cells = []
        for text in args.tilings:
            t = tiling_of(text)
            if not pick([t], d):
                continue
            o, _ = forward(q, k, v, causal, t)
            o_ref, _ = nf.flash_attention(q, k, v, causal=causal, return_lse=True)
            diff = ((o - o_ref).abs().max() / o_ref.abs().max()).item()
            ms = median_ms(lambda: forward(q, k, v, causal, t), [()], reps=10, warmup=2)
            cells.append(f"fp16x3 {text} {ms:.3f} ({flops / ms / 1e9:.1f}; vs tc {diff:.1e})")
        ms = median_ms(lambda: nf.flash_attention(q, k, v, causal=causal, return_lse=True), [()], reps=10, warmup=2)
        cells.append(f"3xTF32 {ms:.3f} ({flops / ms / 1e9:.1f})")
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), [()], reps=10, warmup=2)
        cells.append(f"EFFICIENT {ms:.3f} ({flops / ms / 1e9:.1f})")
        print(f"  {B},{H},{N},{d}{',causal' if causal else ''} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
