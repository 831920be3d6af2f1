"""The baseline of flash-attention's accuracy rule for the device checks beside this file: a
plain fp32 implementation (torch on the GPU, TF32 off), and the error measure."""
import numpy as np


def baseline(t: dict, n_q: int, n_k: int, d: int, causal: bool):
    """(o, (dq, dk, dv)) of plain fp32 attention on the torch tensors t["q"], t["k"], t["v"],
    t["do"] (rows that see no key: o = 0, no gradient). Call with TF32 off."""
    import torch
    from numba_flash import reference as ref

    qs = {n: t[n].clone().requires_grad_(True) for n in ("q", "k", "v")}
    s = qs["q"] @ qs["k"].transpose(-1, -2) / d ** 0.5
    seen = torch.from_numpy(ref.causal_mask(n_q, n_k) if causal else np.ones((n_q, n_k), bool)).cuda()
    rows = seen.any(-1, keepdim=True)
    s = torch.where(rows, s.masked_fill(~seen, float("-inf")), 0.0)
    p = torch.softmax(s, -1) * rows
    o = p @ qs["v"]
    return o, torch.autograd.grad(o, (qs["q"], qs["k"], qs["v"]), t["do"])


def error(a, r) -> float:
    """max |a - r| / max |r| (a: a torch tensor or an array; r: the float64 reference)."""
    a = a.detach().cpu().numpy().astype(np.float64) if hasattr(a, "cpu") else a
    return float(np.max(np.abs(a - r)) / max(np.max(np.abs(r)), 1e-30))


def timed(f) -> float:
    """Median ms of 10 calls of f after 3 warm-up calls, CUDA events around each (one input
    set: the device timing scripts' method)."""
    from experiments.common.timing import time_cuda

    return time_cuda(lambda _: f(), [None], repeats=10, warmup=3).median_ms


def warm(configs, label: str) -> None:
    """Build the kernels of ``configs`` (numba_flash.warmup, in parallel) and say how long it took."""
    import time

    import numba_flash as nf

    t0 = time.perf_counter()
    rows = nf.warmup(configs)
    print(f"{label}warm-up {time.perf_counter() - t0:.0f} s, {len(configs)} configs, errors: "
          f"{[r['error'] for r in rows if r['error']]}", flush=True)


def inputs(B: int, H: int, n_q: int, n_k: int, d: int, scale: float):
    """(numpy fp32 q, k, v, do; the same as torch tensors on the GPU), seeded by the shape; q
    times ``scale`` (the logits' scale)."""
    import torch

    rng = np.random.default_rng(n_q * 7919 + n_k * 31 + d)
    x = {n: rng.standard_normal((B, H, n_q if n in ("q", "do") else n_k, d)).astype(np.float32)
         for n in ("q", "k", "v", "do")}
    x["q"] *= np.float32(scale)
    return x, {n: torch.from_numpy(a).cuda() for n, a in x.items()}


def references(x: dict, causal: bool):
    """(o, (dq, dk, dv)) in float64 on the CPU (numba_flash.reference)."""
    from numba_flash import reference as ref

    x64 = {n: a.astype(np.float64) for n, a in x.items()}
    o64, _ = ref.attention_forward(x64["q"], x64["k"], x64["v"], causal=causal)
    return o64, ref.attention_backward(x64["do"], x64["q"], x64["k"], x64["v"], causal=causal)
