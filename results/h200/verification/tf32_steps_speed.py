"""Device timing (issue 16): per-call CUDA events, median of 10, our fa2 (tc) forward and
forward + backward against SDPA EFFICIENT_ATTENTION, same process. argv: label."""
import sys
sys.path.insert(0, ".")
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import numba_flash as nf
from experiments.common.timing import tflops, time_cuda
SHAPES = [(4, 16, 4096, 64, False), (4, 16, 4096, 128, False), (4, 16, 4096, 64, True), (1, 16, 16384, 64, False)]


def timed(f):
    """Median ms of 10 calls of f after 3 warm-up calls (one input set: the log's method)."""
    return time_cuda(lambda _: f(), [None], repeats=10, warmup=3).median_ms


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
        print(f"{label} {B},{H},{N},{d},{'causal' if c else 'full'}: fwd {t1:.3f} ms {tflops(fl, t1):.1f} TFLOP/s ({s1 / t1:.2f}x SDPA-eff {s1:.3f}); "
              f"fwd+bwd {t2:.3f} ms {tflops(3.5 * fl, t2):.1f} TFLOP/s ({s2 / t2:.2f}x SDPA-eff {s2:.3f})", flush=True)
