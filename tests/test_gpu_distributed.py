"""Ring attention on several GPUs over NCCL (``pytest -m gpu``; skipped on machines with fewer
than two GPUs): the gathered output and gradients within flash-attention's rule of the single
device's (error against float64 at most 2x / 3x the single-GPU kernels'), fp16, bf16 and fp32,
causal zigzag and full contiguous, N = 4099-sized shards rounded to the layout."""

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

# (dtype, B, H, H_kv, tokens per chunk, d, causal, layout)
CASES = [("float16", 1, 8, 2, 513, 128, True, "zigzag"), ("bfloat16", 2, 4, 4, 257, 64, True, "zigzag"),
         ("float32", 1, 4, 1, 300, 64, False, "contiguous")]


def _worker(rank, world, path):
    import torch.distributed as dist

    import numba_flash as nf
    from numba_flash import distributed as nd

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{path}", rank=rank, world_size=world)
    try:
        for dtype, B, H, H_kv, chunk, d, causal, layout in CASES:
            n = chunk * (world if layout == "contiguous" else 2 * world)
            g = torch.Generator(device="cuda").manual_seed(5)     # the same inputs on every rank
            dt = getattr(torch, dtype)
            q, do = (torch.randn(B, H, n, d, device="cuda", generator=g).to(dt) for _ in range(2))
            k, v = (torch.randn(B, H_kv, n, d, device="cuda", generator=g).to(dt) for _ in range(2))
            parts = [nd.shard(x, rank, world, layout) for x in (q, k, v, do)]
            o, lse = nd.ring_attention_forward(*parts[:3], causal=causal, layout=layout)
            grads = nd.ring_attention_backward(parts[3], *parts[:3], o, lse, causal=causal, layout=layout)
            whole = [nd.gather(x, layout=layout) for x in (o, *grads)]
            if rank:
                continue
            mask = dict(causal=True, diagonal=0) if causal else {}
            one, one_lse = nf.flash_attention(q, k, v, **mask, return_lse=True)
            ones = nf.flash_attention_backward(do, q, k, v, one, one_lse, **mask)
            f64 = [x.double().requires_grad_() for x in (q, k, v)]
            group = H // H_kv
            ref = torch.nn.functional.scaled_dot_product_attention(
                f64[0], f64[1].repeat_interleave(group, 1), f64[2].repeat_interleave(group, 1), is_causal=causal)
            ref.backward(do.double())
            refs = [ref.detach(), *(x.grad for x in f64)]

            def rel(x, r):
                return float((x.double() - r).abs().max() / r.abs().max())
            for name, got, single, r, bound in zip(("o", "dq", "dk", "dv"), whole, (one, *ones), refs, (2, 3, 3, 3)):
                assert rel(got, r) <= bound * rel(single, r) + 1e-6, (dtype, name, rel(got, r), rel(single, r))
    finally:
        dist.destroy_process_group()


def test_ring_on_several_gpus_equals_one_gpu_within_the_rule(tmp_path):
    world = min(4, torch.cuda.device_count())
    if world < 2:
        pytest.skip(f"needs two GPUs or more, this machine has {torch.cuda.device_count()}")
    torch.multiprocessing.spawn(_worker, args=(world, str(tmp_path / "rendezvous")), nprocs=world)
