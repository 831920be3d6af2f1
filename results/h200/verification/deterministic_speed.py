"""Per-call time of the tensor-core forward + the deterministic backward (now with its FFMA
forward again) against SDPA EFFICIENT_ATTENTION forward + backward; median of 10."""
import sys
sys.path.insert(0, ".")
sys.path.insert(0, "results/h200/verification")
SHAPES = [(4, 16, 4096, 64, False), (4, 16, 4096, 128, False), (16, 16, 1024, 64, False)]


def main():
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import numba_flash as nf
    from check_helpers import timed
    nf.warmup([nf.KernelConfig(d=d, n_q=n, causal=c, deterministic=True) for _, _, n, d, c in SHAPES])
    if sys.argv[1:] == ["warm"]:
        return
    for B, H, N, d, c in SHAPES:
        q, k, v, do = (torch.randn(B, H, N, d, device="cuda") for _ in range(4))
        fl = 3.5 * 4 * B * H * N * N * d * (0.5 if c else 1)
        qs, ks, vs = (x.clone().requires_grad_(True) for x in (q, k, v))
        def both():
            o, lse = nf.flash_attention(q, k, v, causal=c, return_lse=True)
            return nf.flash_attention_backward(do, q, k, v, o, lse, causal=c, deterministic=True)
        def recompute():
            return nf.flash_attention(q, k, v, causal=c, return_lse=True, algorithm="fa2_fma")
        def sboth():
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=c)
            return torch.autograd.grad(o, (qs, ks, vs), do)
        t, tr, s = (timed(f) for f in (both, recompute, sboth))
        print(f"{B},{H},{N},{d},{'causal' if c else 'full'}: tc fwd + deterministic bwd {t:.3f} ms "
              f"({fl / t / 1e9:.1f} TFLOP/s, {s / t:.2f}x SDPA-eff {s:.3f} ms); of which the FFMA "
              f"forward again ~{tr:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
