"""Device check (issue 16): the deterministic (FFMA) backward at logits x30 after the tensor-core
forward, with the saved (o, lse) as given, with lse recomputed by the FFMA forward, and with both
recomputed; flash-attention's rule against plain fp32 torch (TF32 off). Since the deterministic
backward runs the FFMA forward itself (2026-12-04), the three give the same gradients.
argv "warm": build the kernels only."""
import sys
sys.path.insert(0, "results/h200/verification")
import torch
import numba_flash as nf
from check_helpers import baseline, error, inputs, references, warm
SHAPES = [(2, 2, 300, 301, 40, False, 30), (2, 2, 300, 301, 128, False, 30), (1, 2, 1000, 1000, 96, False, 30),
          (2, 2, 300, 301, 64, True, 30), (1, 2, 255, 97, 64, True, 1)]
def main():
    warm(list(dict.fromkeys(nf.KernelConfig(d=d, n_q=nq, n_k=nk, causal=c, forward=f, backward="fa2", deterministic=True)
                            for _, _, nq, nk, d, c, _ in SHAPES for f in ("fa2", "fa2_fma"))), "det ")
    if sys.argv[1:] == ["warm"]:
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    for B, H, nq, nk, d, causal, scale in SHAPES:
        x, t = inputs(B, H, nq, nk, d, scale)
        o, lse = nf.flash_attention(t["q"], t["k"], t["v"], causal=causal, return_lse=True)
        of, lsef = nf.flash_attention(t["q"], t["k"], t["v"], causal=causal, return_lse=True, algorithm="fa2_fma")
        o64, g64 = references(x, causal)
        ob, gb = baseline(t, nq, nk, d, causal)
        for label, (oo, ll) in (("tc o, tc L", (o, lse)), ("tc o, fma L", (o, lsef)), ("fma o, fma L", (of, lsef))):
            g = nf.flash_attention_backward(t["do"], t["q"], t["k"], t["v"], oo, ll, causal=causal, deterministic=True)
            ratios = [error(a, r) / error(b, r) for a, r, b in zip(g, g64, gb)]
            print(f"{B},{H},{nq},{nk},{d},{'causal' if causal else 'full'},x{scale} {label:13s}: " +
                  " ".join(f"{n} {v:.2f}x" for n, v in zip(("dq", "dk", "dv"), ratios)) +
                  ("" if max(ratios) <= 3 else "  FAIL"), flush=True)


if __name__ == "__main__":
    main()
