"""Device timing (issue 16): per-call CUDA events, median of 10, our fa2 (tc) forward and
forward + backward against SDPA EFFICIENT_ATTENTION, same process. argv: label [shape set]
[warm] (sets: SHAPES' keys; default "issue16")."""
import sys
sys.path.insert(0, ".")
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import numba_flash as nf
from experiments.common.timing import tflops
sys.path.insert(0, "results/h200/verification")
from check_helpers import timed
SHAPES = {"issue16": [(4, 16, 4096, 64, False), (4, 16, 4096, 128, False), (4, 16, 4096, 64, True),
                      (1, 16, 16384, 64, False)],
          "d256": [(2, 16, 4096, 256, False), (2, 16, 4096, 256, True), (8, 16, 1024, 256, False)]}


if __name__ == "__main__":
    label, rest = sys.argv[1], sys.argv[2:]
    shapes = SHAPES[rest.pop(0)] if rest and rest[0] in SHAPES else SHAPES["issue16"]
    if rest == ["warm"]:
        nf.warmup([nf.KernelConfig(d=d, n_q=n, causal=c) for _, _, n, d, c in shapes]); sys.exit()
    for B, H, N, d, c in shapes:
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
