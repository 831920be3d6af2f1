"""Ring attention (``numba_flash.distributed``) on P = 1..4 CPU processes over gloo, kernels under
the CUDA simulator: the gathered output and gradients equal the single-device kernels' within
flash-attention's rule -- error against a float64 reference at most 2x (outputs) / 3x
(gradients) the single device's -- in fp32, fp16 and bf16, causal and not, both layouts, GQA,
odd sizes and logits x30; what each rank computes and sends equal to
``simulator.ring.ring_cost`` exactly; autograd; bad input. And the ring model itself against
brute force."""
import itertools
import os

import numpy as np
import pytest

from simulator.ring import LAYOUTS, calls, chunks_of, ring_cost, ring_time, step_source

import numba_flash as nf

from .helpers import FLOOR, TYPES, band_inputs, rel

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

# (fmt, B, H, H_kv, chunk, d, causal, layout, logit scale): N = chunk x (P or 2P)
CASES = [
    ("float32", 1, 2, 2, 3, 24, True, "zigzag", 1.0),
    ("float32", 2, 4, 2, 5, 8, False, "zigzag", 30.0),       # GQA, logits x30
    ("float32", 1, 2, 1, 4, 40, True, "contiguous", 1.0),     # MQA
    ("float16", 1, 2, 2, 3, 59, True, "zigzag", 1.0),         # odd d
    ("bfloat16", 1, 4, 2, 2, 16, True, "contiguous", 1.0),
]


def _worker(rank, world, path, cases):
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    try:
        for case in cases:
            _check_case(rank, world, *case)
        _check_autograd(rank, world)
    finally:
        dist.destroy_process_group()


def _to_torch(a):
    from numba_flash.distributed import _from_numpy

    return _from_numpy(a)


def _check_case(rank, world, fmt, B, H, H_kv, chunk, d, causal, layout, logit_scale):
    from numba_flash import distributed as nd
    from numba_flash import reference

    n = chunk * (world if layout == "contiguous" else 2 * world)
    rng = np.random.default_rng(7)                    # the same inputs on every rank
    q, k, v, do = band_inputs(rng, fmt, B, H, H_kv, n, n, d, logit_scale)
    parts = [nd.shard(_to_torch(x), rank, world, layout) for x in (q, k, v, do)]
    fwd_stats, bwd_stats = [], []
    o, lse = nd.ring_attention_forward(*parts[:3], causal=causal, layout=layout, stats=fwd_stats)
    grads = nd.ring_attention_backward(parts[3], *parts[:3], o, lse, causal=causal, layout=layout,
                                       stats=bwd_stats)
    assert o.dtype == parts[0].dtype and lse.dtype == torch.float32
    assert [g.dtype for g in grads] == [parts[0].dtype] * 3
    whole = [nd.gather(x, layout=layout) for x in (o, lse.unsqueeze(-1), *grads)]
    o_all, lse_all, *g_all = [x.float().numpy() if x.dtype == torch.bfloat16 else x.numpy()
                              for x in whole]

    cost = ring_cost(B, H, H_kv, n, d, np.dtype(TYPES[fmt]).itemsize, world, layout, causal)
    assert [s["scores"] for s in fwd_stats] == list(cost.scores[rank])
    assert [s["bytes_sent"] for s in fwd_stats] == list(cost.forward_bytes)
    assert [s["scores"] for s in bwd_stats[:-1]] == list(cost.scores[rank])
    assert [s["bytes_sent"] for s in bwd_stats] == [*cost.backward_bytes, cost.backward_tail_bytes]
    if rank:
        return
    mask = dict(causal=causal, diagonal=0 if causal else None)
    f64 = [x.astype(np.float64) for x in (do, q, k, v)]
    ref, ref_lse = reference.attention_forward(*f64[1:], **mask)
    one, one_lse = nf.flash_attention(q, k, v, **mask, return_lse=True)     # one device
    assert rel(o_all, ref) <= 2 * rel(one, ref) + FLOOR, (fmt, "o", rel(o_all, ref), rel(one, ref))
    np.testing.assert_allclose(lse_all[..., 0], ref_lse, rtol=1e-5, atol=1e-5)
    refs = reference.attention_backward(*f64, **mask)
    ones = nf.flash_attention_backward(do, q, k, v, one, one_lse, **mask)
    for name, g, r, p in zip(("dq", "dk", "dv"), g_all, refs, ones):
        assert g.shape == r.shape, (name, g.shape, r.shape)
        assert rel(g, r) <= 3 * rel(p, r) + FLOOR, (fmt, name, rel(g, r), rel(p, r))


def _check_autograd(rank, world):
    """``ring_attention`` under autograd gives ring_attention_backward's gradients."""
    from numba_flash import distributed as nd

    g = torch.Generator().manual_seed(3)
    q, k, v, do = (torch.randn(1, 2, 4 * world, 8, generator=g) for _ in range(4))
    parts = [nd.shard(x, rank, world) for x in (q, k, v, do)]
    leaves = [x.clone().requires_grad_() for x in parts[:3]]
    o = nd.ring_attention(*leaves, causal=True)
    o.backward(parts[3])
    o2, lse = nd.ring_attention_forward(*parts[:3], causal=True)
    expected = nd.ring_attention_backward(parts[3], *parts[:3], o2, lse, causal=True)
    torch.testing.assert_close(o.detach(), o2, rtol=0, atol=0)
    for leaf, e in zip(leaves, expected):
        torch.testing.assert_close(leaf.grad, e, rtol=0, atol=0)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ring_equals_single_device_within_the_rule(world, tmp_path):
    # every case at P = 2, a few at the others (CI's time: P processes share its 2 cores)
    cases = {1: CASES[:1], 2: CASES, 3: CASES[2:4], 4: CASES[1:2]}[world]
    torch.multiprocessing.spawn(_worker, args=(world, str(tmp_path / "rendezvous"), cases),
                                nprocs=world)


def test_bad_input_is_refused_before_any_transfer(tmp_path):
    from numba_flash import distributed as nd

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'one'}", rank=0, world_size=1)
    try:
        x = torch.zeros(1, 2, 5, 8)
        with pytest.raises(ValueError, match="multiple of 2 for layout='zigzag'"):
            nd.ring_attention_forward(x, x, x)
        with pytest.raises(ValueError, match="layout must be one of"):
            nd.ring_attention_forward(x, x, x, layout="striped")
        with pytest.raises(TypeError, match="q must be a 4-D torch tensor"):
            nd.ring_attention_forward(x[0], x, x)
        with pytest.raises(ValueError, match="the same part of the sequence"):
            nd.ring_attention_forward(torch.zeros(1, 2, 4, 8), x, x, layout="contiguous")
    finally:
        dist.destroy_process_group()


def test_shard_and_unshard_are_inverse():
    from numba_flash import distributed as nd

    x = torch.arange(2 * 24 * 3).reshape(2, 24, 3)
    for world, layout in itertools.product((1, 2, 3, 4), LAYOUTS):
        parts = [nd.shard(x, r, world, layout) for r in range(world)]
        assert all(p.shape == (2, 24 // world, 3) for p in parts)
        torch.testing.assert_close(nd.unshard(parts, layout), x, rtol=0, atol=0)
    # zigzag over 2 ranks: rank 0 holds chunks 0 and 3 of 4
    assert nd.shard(x, 0, 2, "zigzag")[0, :, 0].tolist() == [3 * i for i in (0, 1, 2, 3, 4, 5, 18, 19, 20, 21, 22, 23)]


# ---- the model -----------------------------------------------------------------------------------
@pytest.mark.parametrize("world,layout,causal", list(itertools.product((1, 2, 3, 4, 5), LAYOUTS, (False, True))))
def test_calls_cover_each_visible_pair_once(world, layout, causal):
    """Over its P steps, a rank's calls cover every (query, key) pair the mask shows, once, and
    no other (global positions, brute force)."""
    chunk = 3
    n = chunk * (world if layout == "contiguous" else 2 * world)

    def positions(rank):
        return [c * chunk + i for c in chunks_of(rank, world, layout) for i in range(chunk)]

    for rank in range(world):
        rows = positions(rank)
        covered = []
        for step in range(world):
            keys = positions(step_source(rank, step, world))
            for c in calls(rank, step_source(rank, step, world), world, layout, causal, chunk):
                for i in range(c.q0, c.q1):
                    for j in range(c.k0, c.k1):
                        if not c.causal or j - c.k0 <= i - c.q0:
                            covered.append((rows[i], keys[j]))
        expected = [(r, key) for r in rows for key in range(n) if not causal or key <= r]
        assert sorted(covered) == sorted(expected)


def test_zigzag_balances_a_causal_mask_and_contiguous_does_not():
    for world in (2, 3, 4, 8):
        assert ring_cost(1, 1, 1, 16 * world, 8, 2, world, "zigzag", True).imbalance() == 1.0
        # contiguous: rank r computes r full chunks and one triangle (c(c+1)/2 of c^2), so the
        # last rank's share over the mean is (P - 1 + 5/8) / ((P - 1) / 2 + 5/8) at chunk 4
        cost = ring_cost(1, 1, 1, 4 * world, 8, 2, world, "contiguous", True)
        mean = ((world - 1) / 2 * 16 + 10)
        assert cost.imbalance() == pytest.approx((16 * (world - 1) + 10) / mean)
        assert ring_cost(1, 1, 1, 4 * world, 8, 2, world, "contiguous", False).imbalance() == 1.0


def test_link_bytes_and_overlapped_time_hand_derived():
    """P = 4, B = 2, H = 8, H_kv = 2, N = 64, d = 16, fp16, zigzag: a K/V shard is 2 x 2 x 16 x 16
    elements = 2 KiB a tensor; the forward sends K and V (4 KiB) in steps 0-2; the backward also
    the fp32 dK, dV of the step before (8 KiB) in steps 1-3, and 8 KiB after the last step."""
    cost = ring_cost(2, 8, 2, 64, 16, 2, 4, "zigzag", False)
    assert cost.forward_bytes == (4096, 4096, 4096, 0)
    assert cost.backward_bytes == (4096, 4096 + 8192, 4096 + 8192, 8192)
    assert cost.backward_tail_bytes == 8192
    assert cost.scores[0] == (2 * 8 * 16 * 16,) * 4
    assert cost.forward_flops(0, 16, 1) == 4 * 16 * sum(cost.scores[0])
    # 1 ms of compute a step, 4 KiB at 4 MB/s = 1.024 ms: the link is the longer each step
    assert ring_time([1e-3] * 4, cost.forward_bytes, 4e6) == pytest.approx(3 * 1.024e-3 + 1e-3)
    assert ring_time([1e-3] * 4, cost.forward_bytes, 4e6, overlapped=False) == pytest.approx(
        4e-3 + 3 * 1.024e-3)
    assert ring_time([1e-3] * 4, cost.backward_bytes, 4e9, cost.backward_tail_bytes) == pytest.approx(
        4e-3 + 8192 / 4e9)


def test_merge_equals_attention_over_the_union_of_keys():
    """Two partials over disjoint keys merge into attention over all of them (float64 reference);
    a row no key reaches on either side stays o = 0, lse = -inf; a NaN stays NaN."""
    import math

    from numba_flash.distributed import _merge

    g = torch.Generator().manual_seed(1)
    s, v = 30 * torch.randn(4, 6, generator=g, dtype=torch.float64), torch.randn(6, 3, generator=g, dtype=torch.float64)
    s[1] = -math.inf                                       # row 1 sees no key
    o = torch.zeros(1, 1, 4, 3)
    lse = torch.full((1, 1, 4), -math.inf, dtype=torch.float64)
    for keys in (slice(0, 2), slice(2, 6)):
        part_lse = torch.logsumexp(s[:, keys], dim=1)
        part_o = torch.nan_to_num(torch.softmax(s[:, keys], dim=1)) @ v[keys]
        if keys.start == 2:
            part_lse[3] = math.nan
        _merge(o, lse, part_o.float()[None, None], part_lse.float()[None, None])
    ref = torch.softmax(s, dim=1) @ v
    torch.testing.assert_close(o[0, 0, [0, 2]].double(), ref[[0, 2]], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(lse[0, 0, [0, 2]], torch.logsumexp(s, dim=1)[[0, 2]], rtol=1e-7, atol=1e-5)
    assert lse[0, 0, 1] == -math.inf and torch.all(o[0, 0, 1] == 0)
    assert torch.isnan(lse[0, 0, 3]) and torch.isnan(o[0, 0, 3]).all()
