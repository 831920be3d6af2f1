"""Device call: backward v12 (warp pairs, the default for 64 < d <= 128) on the H200 at awkward
shapes against float64, with flash-attention's rule: error <= 2x (o) / 3x (gradients) that of a
plain fp32 implementation (torch, TF32 off). Error: max |x - ref| / max |ref|."""
import sys

sys.path.insert(0, ".")

# (B, H, N_q, N_k, d, causal, logit scale)
SHAPES = [(1, 3, 255, 97, 80, True, 1), (1, 2, 513, 511, 128, True, 1), (1, 2, 513, 511, 128, False, 1),
          (1, 1, 333, 4099, 128, True, 1), (2, 2, 300, 301, 111, False, 30), (1, 2, 97, 255, 72, True, 1),
          (1, 2, 1000, 1000, 96, False, 30), (1, 2, 17, 1, 128, False, 1), (2, 4, 2048, 2048, 128, True, 1)]

if __name__ == "__main__":
    import torch
    import numba_flash as nf
    from check_helpers import baseline, error, inputs, references, warm

    configs = list(dict.fromkeys(nf.KernelConfig(d=d, n_q=nq, n_k=nk, causal=c, forward="fa2", backward="fa2")
                                 for _, _, nq, nk, d, c, _ in SHAPES))
    warm(configs, "")
    torch.backends.cuda.matmul.allow_tf32 = False
    failed = 0
    for B, H, nq, nk, d, causal, scale in SHAPES:
        x, t = inputs(B, H, nq, nk, d, scale)
        with nf.poison_outputs():
            o, lse = nf.flash_attention(t["q"], t["k"], t["v"], causal=causal, return_lse=True)
            dq, dk, dv = nf.flash_attention_backward(t["do"], t["q"], t["k"], t["v"], o, lse, causal=causal)
        o64, g64 = references(x, causal)
        # a plain fp32 implementation (torch, TF32 off), the rule's baseline
        ob, gb = baseline(t, nq, nk, d, causal)

        line = []
        ok = True
        for name, ours, base, r, limit in [("o", o, ob, o64, 2), ("dq", dq, gb[0], g64[0], 3),
                                            ("dk", dk, gb[1], g64[1], 3), ("dv", dv, gb[2], g64[2], 3)]:
            e, eb = error(ours, r), error(base, r)
            ok &= e <= limit * eb or e < 1e-6
            line.append(f"{name} {e:.2e} (plain fp32 {eb:.2e})")
        failed += not ok
        print(f"{'ok' if ok else 'FAIL'} {B},{H},{nq},{nk},{d},{'causal' if causal else 'full'},x{scale}: " + "; ".join(line), flush=True)
    print(f"{failed} failed", flush=True)
