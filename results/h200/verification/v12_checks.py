"""Device call: backward v12 (warp pairs, the default for 64 < d <= 128) on the H200 at awkward
shapes against float64, with flash-attention's rule: error <= 2x (o) / 3x (gradients) that of a
plain fp32 implementation (torch, TF32 off). Error: max |x - ref| / max |ref|."""
import sys
import time

sys.path.insert(0, ".")

# (B, H, N_q, N_k, d, causal, logit scale)
SHAPES = [(1, 3, 255, 97, 80, True, 1), (1, 2, 513, 511, 128, True, 1), (1, 2, 513, 511, 128, False, 1),
          (1, 1, 333, 4099, 128, True, 1), (2, 2, 300, 301, 111, False, 30), (1, 2, 97, 255, 72, True, 1),
          (1, 2, 1000, 1000, 96, False, 30), (1, 2, 17, 1, 128, False, 1), (2, 4, 2048, 2048, 128, True, 1)]

if __name__ == "__main__":
    import numpy as np
    import torch
    import numba_flash as nf
    from numba_flash import reference as ref

    configs = list(dict.fromkeys(nf.KernelConfig(d=d, n_q=nq, n_k=nk, causal=c, forward="fa2", backward="fa2")
                                 for _, _, nq, nk, d, c, _ in SHAPES))
    t0 = time.perf_counter()
    rows = nf.warmup(configs)
    print(f"warm-up {time.perf_counter() - t0:.0f} s, {len(configs)} configs, errors: "
          f"{[r['error'] for r in rows if r['error']]}", flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    failed = 0
    for B, H, nq, nk, d, causal, scale in SHAPES:
        rng = np.random.default_rng(nq * 7919 + nk * 31 + d)
        x = {n: rng.standard_normal((B, H, nq if n in ("q", "do") else nk, d)).astype(np.float32) for n in ("q", "k", "v", "do")}
        x["q"] *= np.float32(scale)
        t = {n: torch.from_numpy(a).cuda() for n, a in x.items()}
        with nf.poison_outputs():
            o, lse = nf.flash_attention(t["q"], t["k"], t["v"], causal=causal, return_lse=True)
            dq, dk, dv = nf.flash_attention_backward(t["do"], t["q"], t["k"], t["v"], o, lse, causal=causal)
        x64 = {n: a.astype(np.float64) for n, a in x.items()}
        o64, _ = ref.attention_forward(x64["q"], x64["k"], x64["v"], causal=causal)
        g64 = ref.attention_backward(x64["do"], x64["q"], x64["k"], x64["v"], causal=causal)
        # a plain fp32 implementation (torch, TF32 off), the rule's baseline
        qs = {n: t[n].clone().requires_grad_(True) for n in ("q", "k", "v")}
        s = qs["q"] @ qs["k"].transpose(-1, -2) / d ** 0.5
        seen = torch.from_numpy(ref.causal_mask(nq, nk) if causal else np.ones((nq, nk), bool)).cuda()
        rows = seen.any(-1, keepdim=True)          # rows that see no key: o = 0, no gradient
        s = torch.where(rows, s.masked_fill(~seen, float("-inf")), 0.0)
        p = torch.softmax(s, -1) * rows
        ob = p @ qs["v"]
        gb = torch.autograd.grad(ob, (qs["q"], qs["k"], qs["v"]), t["do"])

        def err(a, r):
            a = a.detach().cpu().numpy().astype(np.float64) if hasattr(a, "cpu") else a
            return float(np.max(np.abs(a - r)) / max(np.max(np.abs(r)), 1e-30))

        line = []
        ok = True
        for name, ours, base, r, limit in [("o", o, ob, o64, 2), ("dq", dq, gb[0], g64[0], 3),
                                            ("dk", dk, gb[1], g64[1], 3), ("dv", dv, gb[2], g64[2], 3)]:
            e, eb = err(ours, r), err(base, r)
            ok &= e <= limit * eb or e < 1e-6
            line.append(f"{name} {e:.2e} (plain fp32 {eb:.2e})")
        failed += not ok
        print(f"{'ok' if ok else 'FAIL'} {B},{H},{nq},{nk},{d},{'causal' if causal else 'full'},x{scale}: " + "; ".join(line), flush=True)
    print(f"{failed} failed", flush=True)
