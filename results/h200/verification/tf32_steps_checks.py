"""Device check (issue 16): fp32 accuracy against float64 with flash-attention's rule (error <=
2x (o) / 3x (gradients) that of plain fp32: torch, TF32 off). Error: max |x - ref| / max |ref|.
Each shape: forward `fwd` ("fa2" tensor cores / "fa2_fma"), backward fa2 (tc) or deterministic."""
import sys
sys.path.insert(0, ".")
# (B, H, N_q, N_k, d, causal, logit scale, forward, deterministic)
SETS = {
 "d256": [(2, 2, 255, 97, 256, False, 1, "fa2", False), (1, 2, 513, 511, 256, True, 1, "fa2", False),
          (2, 2, 300, 301, 256, False, 30, "fa2", False), (1, 1, 1000, 1000, 256, False, 1, "fa2", False)],
 "det": [(2, 2, 300, 301, 40, False, 30, "fa2", True), (2, 2, 300, 301, 128, False, 30, "fa2", True),
         (2, 2, 300, 301, 40, False, 30, "fa2_fma", True), (2, 2, 300, 301, 128, False, 30, "fa2_fma", True),
         (2, 2, 300, 301, 128, False, 30, "fa2", False), (1, 2, 1000, 1000, 96, False, 30, "fa2", True),
         (1, 2, 255, 97, 64, True, 1, "fa2", True), (2, 2, 300, 301, 64, False, 30, "fa2", False)],
 "v14": [(2, 2, 300, 301, 128, False, 30, "fa2", False), (1, 2, 1000, 997, 128, True, 30, "fa2", False),
         (2, 2, 300, 301, 64, False, 30, "fa2", False), (1, 2, 997, 1000, 64, True, 30, "fa2", False),
         (2, 2, 300, 301, 80, False, 30, "fa2", False), (1, 2, 1000, 1000, 128, False, 1, "fa2", False)],
}
if __name__ == "__main__":
    import torch
    import numba_flash as nf
    from check_helpers import baseline, error, inputs, references, warm
    shapes = [s for name in sys.argv[1:] for s in SETS[name]]
    configs = list(dict.fromkeys(nf.KernelConfig(d=d, n_q=nq, n_k=nk, causal=c, forward=f, backward="fa2", deterministic=det)
                                 for _, _, nq, nk, d, c, _, f, det in shapes))
    warm(configs, f"{sys.argv[1:]} ")
    torch.backends.cuda.matmul.allow_tf32 = False
    failed = 0
    for B, H, nq, nk, d, causal, scale, fwd, det in shapes:
        x, t = inputs(B, H, nq, nk, d, scale)
        with nf.poison_outputs():
            o, lse = nf.flash_attention(t["q"], t["k"], t["v"], causal=causal, return_lse=True, algorithm=fwd)
            dq, dk, dv = nf.flash_attention_backward(t["do"], t["q"], t["k"], t["v"], o, lse, causal=causal, deterministic=det)
        o64, g64 = references(x, causal)
        ob, gb = baseline(t, nq, nk, d, causal)

        line, ok = [], True
        for name, ours, base, r, limit in [("o", o, ob, o64, 2), ("dq", dq, gb[0], g64[0], 3),
                                            ("dk", dk, gb[1], g64[1], 3), ("dv", dv, gb[2], g64[2], 3)]:
            e, eb = error(ours, r), error(base, r)
            good = e <= limit * eb or e < 1e-6
            ok &= good
            line.append(f"{name} {e:.2e} ({e / eb:.1f}x){'' if good else '!'}")
        failed += not ok
        print(f"{'ok' if ok else 'FAIL'} {B},{H},{nq},{nk},{d},{'causal' if causal else 'full'},x{scale},{fwd},{'det' if det else 'tc-bwd'}: " + "; ".join(line), flush=True)
    print(f"{failed} failed", flush=True)
