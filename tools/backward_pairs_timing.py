"""The fp32 tensor-core backward at d = 80 and 128 on the GPU: v12's warp pairs (16 x 64, pairs)
against the same kernel unpaired (v11's 16 x 64), both checked against float64, beside SDPA
EFFICIENT_ATTENTION's forward and forward + backward; per-call CUDA events, median of 10.

    python tools/backward_pairs_timing.py     # from the repository root, on a GPU
"""
import statistics
import sys
import time

sys.path.insert(0, ".")

if __name__ == "__main__":
    import torch
    import numba_flash as nf
    from simulator.tiling import Tiling
    from experiments.common.cases import Case
    from experiments.common.correctness import relative_errors
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    shapes = [(4, 16, 4096, 128, False), (2, 32, 4096, 128, True), (8, 32, 2048, 128, False), (4, 16, 4096, 80, False)]
    tilings = {"v12 pairs": Tiling(16, 64, True), "v11 unpaired": Tiling(16, 64)}
    configs = [nf.KernelConfig(d=d, n_q=n, causal=c, forward="fa2", backward="fa2", tiling=None) for _, _, n, d, c in shapes]
    configs += [nf.KernelConfig(d=d, n_q=n, causal=c, forward=None, backward="fa2", tiling=t) for _, _, n, d, c in shapes for t in tilings.values()]
    t0 = time.perf_counter()
    rows = nf.warmup(list(dict.fromkeys(configs)))
    print(f"warm-up {time.perf_counter()-t0:.0f} s, errors: {[r['error'] for r in rows if r['error']]}", flush=True)

    def timed(fn, reps=10):
        for _ in range(2):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
        return statistics.median(ts)

    for B, H, N, d, causal in shapes:
        g = torch.Generator(device="cuda").manual_seed(0)
        x = {n: torch.randn((B, H, N, d), device="cuda", generator=g) for n in ("q", "k", "v", "do")}
        o, lse = nf.flash_attention(x["q"], x["k"], x["v"], causal=causal, return_lse=True)
        fwd = timed(lambda: nf.flash_attention(x["q"], x["k"], x["v"], causal=causal, return_lse=True))
        flops = 4 * B * H * N * N * d * (0.5 if causal else 1)
        case = Case("fa2", "fwd_bwd", B, H, N, d, causal=causal)
        for name, t in tilings.items():
            call = lambda: nf.flash_attention_backward(x["do"], x["q"], x["k"], x["v"], o, lse, causal=causal, tiling=t)
            dq, dk, dv = call()
            err, _ = relative_errors(case, x, {"o": o, "dq": dq, "dk": dk, "dv": dv})
            bwd = timed(call)
            print(f"{B},{H},{N},{d},{'causal' if causal else 'full'} {name}: backward {bwd:.3f} ms "
                  f"({2.5*flops/bwd/1e9:.1f} TFLOP/s), fwd {fwd:.3f} ms, fwd+bwd {fwd+bwd:.3f} ms "
                  f"({3.5*flops/(fwd+bwd)/1e9:.1f} TFLOP/s); max rel err {max(err.values()):.2e} {err}", flush=True)
        qs = {n: t.clone().requires_grad_(n != "do") for n, t in x.items()}
        def sd():
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                out = F.scaled_dot_product_attention(qs["q"], qs["k"], qs["v"], is_causal=causal)
            return torch.autograd.grad(out, (qs["q"], qs["k"], qs["v"]), qs["do"])
        def sf():
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                return F.scaled_dot_product_attention(qs["q"], qs["k"], qs["v"], is_causal=causal)
        tf, tfb = timed(sf), timed(sd)
        print(f"{B},{H},{N},{d} SDPA EFFICIENT_ATTENTION: fwd {tf:.3f} ms, fwd+bwd {tfb:.3f} ms ({3.5*flops/tfb/1e9:.1f} TFLOP/s)", flush=True)
