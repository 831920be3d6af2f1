"""Device timing (issue 16, d = 256): per-call CUDA events, median of 10, our fa2 (tc) forward and
forward + backward against SDPA EFFICIENT_ATTENTION, same process. argv: label."""
import sys, statistics
sys.path.insert(0, ".")
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import numba_flash as nf
SHAPES = [(2, 16, 4096, 256, False), (2, 16, 4096, 256, True), (8, 16, 1024, 256, False)]
def timed(f, reps=10):
    for _ in range(3): f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); f(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)
if __name__ == "__main__":
    label = sys.argv[1]
    if sys.argv[2:] == ["warm"]:
        nf.warmup([nf.KernelConfig(d=d, n_q=n, causal=c) for _, _, n, d, c in SHAPES]); sys.exit()
    for B, H, N, d, c in SHAPES:
        q, k, v, do = (torch.randn(B, H, N, d, device="cuda") for _ in range(4))
        fl = 4 * B * H * N * N * d * (0.5 if c else 1)
        def fwd(): return nf.flash_attention(q, k, v, causal=c)
        def both():
            o, lse = nf.flash_attention(q, k, v, causal=c, return_lse=True)
            return nf.flash_attention_backward(do, q, k, v, o, lse, causal=c)
        qs, ks, vs = (x.clone().requires_grad_(True) for x in (q, k, v))
        def sfwd():
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=c)
        def sboth():
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=c)
            return torch.autograd.grad(o, (qs, ks, vs), do)
        t1, t2, s1, s2 = timed(fwd), timed(both), timed(sfwd), timed(sboth)
        print(f"{label} {B},{H},{N},{d},{'causal' if c else 'full'}: fwd {t1:.3f} ms {fl / t1 / 1e9:.1f} TFLOP/s ({s1 / t1:.2f}x SDPA-eff {s1:.3f}); "
              f"fwd+bwd {t2:.3f} ms {3.5 * fl / t2 / 1e9:.1f} TFLOP/s ({s2 / t2:.2f}x SDPA-eff {s2:.3f})", flush=True)
