"""Ring attention across processes: bytes per link, work per rank and time against P, measured vs predicted.

``numba_flash.distributed`` on P processes, one per device, each holding N / P tokens.

CPU: P = 1 ... 4 gloo processes (quick: 3), the kernels under the CUDA simulator at tiny sizes (B = 1, H = 2,
d = 8, chunks of 3 tokens), both layouts, causal and not: per rank and direction, the bytes the
ring sent and the scores it computed, as it counted them (``stats``), beside
``simulator.ring.ring_cost``; the causal work's imbalance between ranks (zigzag: 1). No time.

GPU (P up to ``torch.cuda.device_count()``; rows for more GPUs than the machine has are skipped
and said so): NCCL; fp16, B = 1, H = 32, d = 128, causal, zigzag; per P and N:

* the link bandwidth (each rank sends 256 MiB to the next and receives from the previous, five
  times, CUDA events around the exchange);
* the ring's forward and forward + backward time (median of 3 after a warm-up; events on rank 0
  between barriers);
* predicted time = ``simulator.ring.ring_time`` of the predicted bytes at the measured bandwidth,
  each step's compute taken as rank 0's calls of that step timed alone (no communication);
* scaling efficiency = T(1) / (P T(P)) at the same N where T(1) was measured.

The issue's targets (when lent): N = 1M forward + backward on 8 GPUs; efficiency >= 90 % from 1
to 8 GPUs at N = 256K; time within 10 % of the prediction.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import tempfile

from experiments.common import plotting
from experiments.common.context import NO_GPU, RunContext

NAME = "ring"
CPU = dict(worlds=((1, 2, 3, 4), (3,)), B=1, H=2, d=8, chunk=3)
GPU = dict(worlds=((1, 2, 4, 8), (1, 2)), Ns=((16384, 65536, 262144, 1048576), (16384, 65536)),
           B=1, H=32, d=128, dtype="float16", layout="zigzag", causal=True)
EXCHANGE_BYTES = 256 * 2 ** 20
#: One GPU runs the whole sequence only up to here (at 1M: ~8 GiB a tensor, ~15 minutes)
ONE_GPU_MAX_N = 262144


def run(ctx: RunContext) -> list[dict]:
    return _run_gpu(ctx) if ctx.gpu else _run_cpu(ctx)


# ---- CPU: what the ring sends and computes, counted, against the model ----------------------------
def _run_cpu(ctx) -> list[dict]:
    from simulator.ring import LAYOUTS, ring_cost

    ctx.skip(f"{NAME}: time and link bandwidth ({NO_GPU}); bytes and scores counted under the CUDA simulator")
    c = CPU
    rows = []
    for world in c["worlds"][1 if ctx.quick else 0]:
        for layout in LAYOUTS:
            for causal in (False, True):
                n = c["chunk"] * (world if layout == "contiguous" else 2 * world)
                counted = _spawn(world, _count_worker, (c["B"], c["H"], n, c["d"], layout, causal))
                cost = ring_cost(c["B"], c["H"], c["H"], n, c["d"], 4, world, layout, causal)
                base = dict(world=world, layout=layout, causal=causal, B=c["B"], H=c["H"], N=n, d=c["d"],
                            dtype="float32", measured_by="counted by numba_flash.distributed (stats)")
                for rank, got in enumerate(counted):
                    for quantity, predicted, measured in (
                            ("forward bytes sent", sum(cost.forward_bytes), sum(got["fwd_bytes"])),
                            ("backward bytes sent", sum(cost.backward_bytes) + cost.backward_tail_bytes,
                             sum(got["bwd_bytes"])),
                            ("scores computed", sum(cost.scores[rank]), sum(got["scores"]))):
                        rows.append({**base, "rank": rank, "quantity": quantity, "predicted": predicted,
                                     "measured": measured})
                totals = [sum(got["scores"]) for got in counted]
                rows.append({**base, "rank": "all", "quantity": "causal work imbalance (max / mean)",
                             "predicted": cost.imbalance(), "measured": max(totals) / (sum(totals) / world)})
    return rows


def _count_worker(rank, world, path, out, B, H, n, d, layout, causal):
    import torch

    from numba_flash import distributed as nd

    _init(rank, world, path, "gloo")
    g = torch.Generator().manual_seed(0)
    q, k, v, do = (nd.shard(torch.randn(B, H, n, d, generator=g), rank, world, layout) for _ in range(4))
    fwd, bwd = [], []
    o, lse = nd.ring_attention_forward(q, k, v, causal=causal, layout=layout, stats=fwd)
    nd.ring_attention_backward(do, q, k, v, o, lse, causal=causal, layout=layout, stats=bwd)
    _write(out, rank, {"fwd_bytes": [s["bytes_sent"] for s in fwd], "bwd_bytes": [s["bytes_sent"] for s in bwd],
                       "scores": [s["scores"] for s in fwd]})


# ---- GPU: bandwidth, time, prediction ------------------------------------------------------------
def _run_gpu(ctx) -> list[dict]:
    import torch

    from simulator.ring import ring_cost, ring_time

    g = GPU
    gpus = torch.cuda.device_count()
    rows, single = [], {}
    for world in g["worlds"][1 if ctx.quick else 0]:
        for n in g["Ns"][1 if ctx.quick else 0]:
            base = dict(world=world, layout=g["layout"], causal=g["causal"], B=g["B"], H=g["H"], N=n,
                        d=g["d"], dtype=g["dtype"], rank=0)
            if world > gpus or (world == 1 and n > ONE_GPU_MAX_N):
                note = ctx.skip(f"{NAME}: P = {world} needs {world} GPUs, this machine has {gpus}"
                                if world > gpus else f"{NAME}: P = 1 above N = {ONE_GPU_MAX_N} (memory, "
                                "time; the efficiency target is at 256K)")
                rows.append({**base, "quantity": "fwd_bwd time", "note": note})
                continue
            got = _spawn(world, _time_worker, (g["B"], g["H"], n, g["d"], g["dtype"], g["layout"],
                                               g["causal"]))[0]
            cost = ring_cost(g["B"], g["H"], g["H"], n, g["d"], 2, world, g["layout"], g["causal"])
            bw = got["link_bytes_per_s"] or math.inf      # (P = 1: nothing sent)
            for passes, steps, sent, tail in (
                    ("fwd", got["fwd_step_s"], cost.forward_bytes, 0),
                    ("fwd_bwd", [a + b for a, b in zip(got["fwd_step_s"], got["bwd_step_s"])],
                     [a + b for a, b in zip(cost.forward_bytes, cost.backward_bytes)], cost.backward_tail_bytes)):
                predicted = ring_time(steps, sent, bw, tail)
                measured = got[f"{passes}_s"]
                if world == 1:
                    single[(passes, n)] = measured
                t1 = single.get((passes, n))
                rows.append({**base, "quantity": f"{passes} time", "unit": "s", "predicted": predicted,
                             "measured": measured, "measured_by": "CUDA events on rank 0, median of 3",
                             "link_bytes_per_s": got["link_bytes_per_s"],
                             "efficiency": t1 / (world * measured) if t1 else None,
                             "error": measured / predicted - 1})
    return rows


def _time_worker(rank, world, path, out, B, H, n, d, dtype, layout, causal):
    import torch

    import numba_flash as nf
    from numba_flash import distributed as nd
    from simulator.ring import calls, chunks_of, step_source

    torch.cuda.set_device(rank)
    _init(rank, world, path, "nccl")
    import torch.distributed as dist

    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(rank)
    q, k, v, do = (torch.randn(B, H, n // world, d, device="cuda", generator=g, dtype=dt) for _ in range(4))

    def timed(fn, reps=3):
        fn()
        times = []
        for _ in range(reps):
            dist.barrier()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            dist.barrier()
            times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)

    def ring_fwd():
        return nd.ring_attention_forward(q, k, v, causal=causal, layout=layout)

    o, lse = ring_fwd()
    fwd_s = timed(ring_fwd)
    fwd_bwd_s = timed(lambda: nd.ring_attention_backward(do, q, k, v, *ring_fwd(), causal=causal, layout=layout))
    bw = None
    if world > 1:
        buf = torch.empty(EXCHANGE_BYTES, dtype=torch.uint8, device="cuda")
        nxt, prv = (rank + 1) % world, (rank - 1) % world

        def exchange():
            recv = torch.empty_like(buf)
            for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, buf, nxt), dist.P2POp(dist.irecv, recv, prv)]):
                req.wait()
        bw = EXCHANGE_BYTES / timed(exchange, reps=5)
    steps_f, steps_b = [], []
    chunk = (n // world) // len(chunks_of(0, world, layout))
    for step in range(world):       # each step's calls alone, no communication
        cs = calls(rank, step_source(rank, step, world), world, layout, causal, chunk)

        def step_fwd():
            return [nf.flash_attention(q[:, :, c.q0:c.q1].contiguous(), k[:, :, c.k0:c.k1].contiguous(),
                                       v[:, :, c.k0:c.k1].contiguous(), return_lse=True,
                                       **nd._mask(c)) for c in cs]

        def step_bwd():
            for c in cs:
                r = slice(c.q0, c.q1)
                nf.flash_attention_backward(do[:, :, r].contiguous(), q[:, :, r].contiguous(),
                                            k[:, :, c.k0:c.k1].contiguous(), v[:, :, c.k0:c.k1].contiguous(),
                                            o[:, :, r].contiguous(), lse[:, :, r].contiguous(),
                                            **nd._mask(c))
        steps_f.append(timed(step_fwd))     # (every rank times every step: the barriers pair up)
        steps_b.append(timed(step_bwd))
    _write(out, rank, {"fwd_s": fwd_s, "fwd_bwd_s": fwd_bwd_s, "link_bytes_per_s": bw,
                       "fwd_step_s": steps_f, "bwd_step_s": steps_b})


# ---- processes ---------------------------------------------------------------------------------
def _spawn(world: int, worker, args) -> list[dict]:
    """worker(rank, world, rendezvous, out_dir, *args) on ``world`` spawned processes; each rank's
    dict, in rank order."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(world, os.path.join(tmp, "rendezvous"), tmp, *args), nprocs=world)
        return [json.load(open(os.path.join(tmp, f"rank{r}.json"))) for r in range(world)]


def _init(rank, world, path, backend):
    import torch.distributed as dist

    dist.init_process_group(backend, init_method=f"file://{path}", rank=rank, world_size=world)


def _write(out, rank, result):
    import torch.distributed as dist

    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


def plot(rows: list[dict], path) -> None:
    timed = [r for r in rows if r.get("unit") == "s" and r.get("measured") is not None]
    fig, (ax,) = plotting.figure(1, title="Ring attention")
    if timed:
        for i, passes in enumerate(("fwd", "fwd_bwd")):
            for world in sorted({r["world"] for r in timed}):
                pts = sorted((r for r in timed if r["quantity"] == f"{passes} time" and r["world"] == world),
                             key=lambda r: r["N"])
                x = [r["N"] for r in pts]
                ax.plot(x, [r["predicted"] for r in pts], color=f"C{world}", **plotting.PREDICTED,
                        label=f"{passes} P={world} predicted")
                ax.plot(x, [r["measured"] for r in pts], color=f"C{world}", **plotting.MEASURED,
                        label=f"{passes} P={world} measured")
        plotting.finish(ax, "N (tokens)", "time (s)", loglog=True)
    else:
        counted = [r for r in rows if r["quantity"].startswith("causal work imbalance") and r["causal"]]
        for i, layout in enumerate(("zigzag", "contiguous")):
            pts = sorted((r["world"], r["predicted"], r["measured"]) for r in counted if r["layout"] == layout)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=f"C{i}", **plotting.PREDICTED,
                        label=f"{layout} predicted")
                ax.plot([p[0] for p in pts], [p[2] for p in pts], color=f"C{i}", **plotting.MEASURED,
                        label=f"{layout} counted")
        plotting.finish(ax, "P (processes)", "causal work: busiest rank / mean")
    plotting.save(fig, path, "CPU: counted under the CUDA simulator; GPU: NCCL, CUDA events")
