"""Context parallelism: ring attention over ``torch.distributed``, exact.

Each of the P ranks of a process group holds its part of the sequence -- queries, keys and values
of the chunks ``simulator.ring.chunks_of`` gives it ("zigzag", the default: chunks r and
2P - 1 - r of 2P, which balances a causal mask; "contiguous": chunk r of P). ``shard`` cuts a
rank's part out of a whole sequence; ``gather`` puts the parts back together.

Forward (``ring_attention_forward``): P steps; at step s a rank holds the K/V shard of rank
(r - s) mod P, runs ``flash_attention`` on the blocks its queries see of it
(``simulator.ring.calls``), and merges each partial (o, lse) into its running output exactly,
by their log-sum-exp -- FlashAttention's online softmax one level up:

    lse = log(exp(lse_a) + exp(lse_b)),   o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b.

Meanwhile the shard goes on to the next rank (``torch.distributed.batch_isend_irecv``, started
before the step's kernels, waited for after them), so the transfer overlaps the compute.

Backward (``ring_attention_backward``): the K/V shards go around again; each step's
``flash_attention_backward`` on the merged o and lse gives the exact contribution of that
block to dq (summed in place) and to the shard's dk, dv, which are summed into fp32 accumulators
that travel with their shard and come home after P hops. ``ring_attention`` is the forward
with this backward under torch autograd.

Each step's partial o, dq, dk, dv come from the kernels in the inputs' dtype (rounded once each)
and are summed in fp32, then returned in the inputs' dtype (lse float32): with half-precision
inputs the ring rounds up to P partial results where one device rounds once (the tests hold it
to the single device's error rule). On CPU tensors (gloo) the kernels run on NumPy copies --
under Numba's CUDA simulator, as in the tests; on CUDA tensors (NCCL) on the tensors
themselves, on the legacy default stream (torch's current stream must be the default one).
``simulator.ring.ring_cost`` predicts the scores each rank computes and the bytes each link
carries per step; ``stats`` (a list) receives what a call actually did, step by step.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.distributed as dist

from simulator.ring import ACCUMULATOR_BYTES, calls, check_layout, chunks_of, step_source

from . import api, precision

__all__ = ["shard", "gather", "ring_attention", "ring_attention_forward", "ring_attention_backward"]


def _chunk_rows(n: int, world: int, layout: str) -> int:
    return n // check_layout(layout, world, n)


def shard(x: torch.Tensor, rank: int, world: int, layout: str = "zigzag", dim: int = -2):
    """Rank ``rank``'s part of the whole-sequence tensor ``x`` (sequence along ``dim``), as a new
    contiguous tensor: its chunks in sequence order."""
    rows = _chunk_rows(x.shape[dim], world, layout)
    parts = [x.narrow(dim, c * rows, rows) for c in chunks_of(rank, world, layout)]
    return torch.cat(parts, dim=dim).contiguous()


def gather(x: torch.Tensor, group=None, layout: str = "zigzag", dim: int = -2):
    """The whole-sequence tensor from every rank's part ``x`` (an all-gather; every rank gets it)."""
    world = dist.get_world_size(group)
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return unshard(parts, layout, dim)


def unshard(parts, layout: str = "zigzag", dim: int = -2):
    """The whole-sequence tensor from the list of every rank's part (``shard``'s inverse)."""
    world = len(parts)
    per_rank = len(chunks_of(0, world, layout))
    rows = parts[0].shape[dim] // per_rank
    chunks = {}
    for r, part in enumerate(parts):
        for i, c in enumerate(chunks_of(r, world, layout)):
            chunks[c] = part.narrow(dim, i * rows, rows)
    return torch.cat([chunks[c] for c in sorted(chunks)], dim=dim)


# ---- one rank's kernels ------------------------------------------------------------------------
def _to_numpy(x: torch.Tensor) -> np.ndarray:
    if x.dtype == torch.bfloat16:
        return x.contiguous().view(torch.int16).numpy().view(precision.host_type("bfloat16"))
    return x.contiguous().numpy()


def _from_numpy(a: np.ndarray) -> torch.Tensor:
    a = np.ascontiguousarray(a)
    if a.dtype.name == "bfloat16":          # (ml_dtypes': torch takes no such NumPy array)
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _local(fn, *xs, **kw):
    """``fn`` (an API entry point) on torch tensors: CUDA ones as they are, CPU ones as NumPy
    copies (the CUDA simulator's inputs); the results as torch tensors on the inputs' device."""
    xs = [x.contiguous() for x in xs]
    if xs[0].is_cuda:
        return fn(*xs, **kw)
    return tuple(map(_from_numpy, fn(*map(_to_numpy, xs), **kw)))


def _mask(call):
    return dict(causal=True, diagonal=0) if call.causal else {}


def _merge(o, lse, o_part, lse_part):
    """o (fp32) and lse (float64), updated in place, merged with a partial (o_part, lse_part)
    over other keys. The weights are sigmoids of the difference of the two lse, in float64: the
    form exp(lse_part - lse_new) would carry lse_new's rounding (an ulp of |lse|, 8e-6 at
    |lse| = 100 with logits x30) into o even where one side dominates; the running lse stays
    float64 so that P steps do not round it P times."""
    diff = lse_part.double() - lse
    both_empty = (lse == -math.inf) & (lse_part == -math.inf)   # (no key on either side: o stays 0)
    w_new = torch.where(both_empty, 0.0, torch.sigmoid(diff))
    w_old = torch.where(both_empty, 0.0, torch.sigmoid(-diff))
    o.mul_(w_old.float().unsqueeze(-1)).add_(o_part.float() * w_new.float().unsqueeze(-1))
    lse.copy_(torch.logaddexp(lse, lse_part.double()))


# ---- the ring ----------------------------------------------------------------------------------
def _peers(group):
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    glob = (lambda r: dist.get_global_rank(group, r)) if group is not None else (lambda r: r)
    return rank, world, glob((rank + 1) % world), glob((rank - 1) % world)


def _exchange(tensors, nxt, prv, group):
    """Start sending ``tensors`` to rank ``nxt`` and receiving as many from ``prv``: (requests,
    the receive buffers)."""
    bufs = [torch.empty_like(t) for t in tensors]
    ops = [dist.P2POp(dist.isend, t, nxt, group) for t in tensors]
    ops += [dist.P2POp(dist.irecv, b, prv, group) for b in bufs]
    return dist.batch_isend_irecv(ops), bufs


def _check(q, k, v, layout, group):
    rank, world, nxt, prv = _peers(group)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise TypeError(f"{name} must be a 4-D torch tensor (B, H, N / P, d), got "
                            f"{type(x).__name__}{tuple(getattr(x, 'shape', ()))}")
    if q.shape[2] != k.shape[2] or k.shape != v.shape:
        raise ValueError(f"q, k, v must hold the same part of the sequence: q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)} (N / P rows each; k, v alike)")
    _chunk_rows(q.shape[2] * world, world, layout)
    if q.is_cuda and torch.cuda.current_stream(q.device).cuda_stream != 0:
        raise ValueError("ring attention launches on the legacy default stream: call it outside "
                         "torch.cuda.stream(...) (torch's current stream must be the default one)")
    return rank, world, nxt, prv, q.shape[2] // len(chunks_of(0, world, layout))


def _record(stats, step, scores, sent):
    if stats is not None:
        stats.append({"step": step, "scores": scores, "bytes_sent": sent})


def ring_attention_forward(q, k, v, *, causal=False, softmax_scale=None, layout="zigzag",
                           group=None, stats=None):
    """(o, lse) of attention over the whole sequence for this rank's queries: q (B, H, N/P, d),
    k, v (B, H_kv, N/P, d), this rank's part (``shard``) of a sequence of N = P N/P tokens;
    ``causal`` over global positions (top-left: N_q = N_k). o in q's dtype, lse (B, H, N/P) fp32.
    ``stats``: a list that gets one dict a step (scores computed, bytes sent)."""
    rank, world, nxt, prv, chunk = _check(q, k, v, layout, group)
    B, H, n, d = q.shape
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    o = torch.zeros((B, H, n, d), dtype=torch.float32, device=q.device)
    lse = torch.full((B, H, n), -math.inf, dtype=torch.float64, device=q.device)
    kv = (k.contiguous(), v.contiguous())
    for step in range(world):
        pending = _exchange(kv, nxt, prv, group) if step < world - 1 else None
        scores = 0
        for c in calls(rank, step_source(rank, step, world), world, layout, causal, chunk):
            o_c, lse_c = _local(api.flash_attention, q[:, :, c.q0:c.q1], kv[0][:, :, c.k0:c.k1],
                                kv[1][:, :, c.k0:c.k1], softmax_scale=scale, return_lse=True,
                                **_mask(c))
            _merge(o[:, :, c.q0:c.q1], lse[:, :, c.q0:c.q1], o_c, lse_c)
            scores += B * H * c.scores
        sent = 0
        if pending is not None:
            for req in pending[0]:
                req.wait()
            sent = sum(x.numel() * x.element_size() for x in kv)
            kv = tuple(pending[1])
        _record(stats, step, scores, sent)
    return o.to(q.dtype), lse.float()


def ring_attention_backward(do, q, k, v, o, lse, *, causal=False, softmax_scale=None,
                            layout="zigzag", group=None, stats=None):
    """(dq, dk, dv) of ``ring_attention_forward`` for this rank's part, from its o and lse
    (shapes as there; do as o); in the inputs' dtype, summed in fp32."""
    rank, world, nxt, prv, chunk = _check(q, k, v, layout, group)
    B, H, n, d = q.shape
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    do, o, lse = do.contiguous(), o.contiguous(), lse.contiguous()
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    kv = (k.contiguous(), v.contiguous())
    grads = None                         # (requests, buffers) of the accumulators in flight
    for step in range(world):
        pending = _exchange(kv, nxt, prv, group) if step < world - 1 else None
        dk = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
        dv = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
        scores = 0
        for c in calls(rank, step_source(rank, step, world), world, layout, causal, chunk):
            rows, keys = slice(c.q0, c.q1), slice(c.k0, c.k1)
            g = _local(api.flash_attention_backward, do[:, :, rows], q[:, :, rows],
                       kv[0][:, :, keys], kv[1][:, :, keys], o[:, :, rows], lse[:, :, rows],
                       softmax_scale=scale, **_mask(c))
            dq[:, :, rows] += g[0].float()
            dk[:, :, keys] += g[1].float()
            dv[:, :, keys] += g[2].float()
            scores += B * H * c.scores
        sent = 0
        if grads is not None:            # the shard's sums so far, from the previous rank
            for req in grads[0]:
                req.wait()
            dk += grads[1][0]
            dv += grads[1][1]
        grads = _exchange((dk, dv), nxt, prv, group) if world > 1 else ((), (dk, dv))
        if pending is not None:
            for req in pending[0]:
                req.wait()
            sent += sum(x.numel() * x.element_size() for x in kv)
            kv = tuple(pending[1])
        if step > 0:
            sent += 2 * dk.numel() * ACCUMULATOR_BYTES
        _record(stats, step, scores, sent)
    for req in grads[0]:                 # the last hop brings this rank's own shard home
        req.wait()
    if stats is not None:
        tail = 2 * k.numel() * ACCUMULATOR_BYTES if world > 1 else 0
        stats.append({"step": "tail", "scores": 0, "bytes_sent": tail})
    return dq.to(q.dtype), grads[1][0].to(k.dtype), grads[1][1].to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, softmax_scale, layout, group):
        o, lse = ring_attention_forward(q, k, v, causal=causal, softmax_scale=softmax_scale,
                                        layout=layout, group=group)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.options = dict(causal=causal, softmax_scale=softmax_scale, layout=layout, group=group)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = ring_attention_backward(do, q, k, v, o, lse, **ctx.options)
        return dq, dk, dv, None, None, None, None


def ring_attention(q, k, v, *, causal=False, softmax_scale=None, layout="zigzag", group=None):
    """``ring_attention_forward``'s o, differentiable under torch autograd (the backward runs
    ``ring_attention_backward``: every rank must call backward, as every rank called forward)."""
    return _RingAttention.apply(q, k, v, causal, softmax_scale, layout, group)
