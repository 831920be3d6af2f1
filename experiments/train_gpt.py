"""Training a GPT-2-small-sized model end to end: our attention against PyTorch SDPA, same seed.

Three runs of the same model, same initial weights and same batches, differing only in the
attention function: ``numba_flash.torch.scaled_dot_product_attention`` ("numba_flash"), torch
SDPA on its default backend for fp32 ("sdpa": EFFICIENT_ATTENTION on the GPU), and torch SDPA
forced to the MATH backend ("sdpa_math"). Two correct fp32 attentions differ by rounding, and
training amplifies that; |loss_sdpa_math - loss_sdpa| per step is that fp32 noise floor, and
|loss_numba_flash - loss_sdpa| should sit within it.

The model: 12 layers, 12 heads, width 768, head dim 64, context 1024, pre-LayerNorm, GELU (tanh)
MLP of 4x width, learned position embeddings, input and output embeddings tied -- GPT-2 small,
but on a byte vocabulary (256 tokens), which makes it 86.0M parameters (85.1M of them in the
blocks) instead of GPT-2's 124M (38.6M of which are its 50257-token embedding). The data: a
4 MB corpus from a seeded grammar (``experiments.common.corpus``). fp32 throughout, TF32 off
for matmuls and cuDNN; AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), 40 warm-up steps
then cosine decay to a tenth, gradients clipped to norm 1; batch 8 x 1024 tokens, 200 steps.
Measured per step: each run's loss; per run: tokens/s (steps after the first three, each step
bracketed by ``torch.cuda.synchronize``), peak memory (``torch.cuda.max_memory_allocated``;
our kernels' outputs come from torch's allocator too, so it counts them) and wall time (kernel
compilation in the first steps included).

CPU (no GPU): a tiny configuration (2 layers, width 32, 2 heads, context 16, batch 2, 4 steps),
"numba_flash" on Numba's CUDA simulator (CPU tensors), the other two on torch's CPU SDPA; peak
memory is skipped and tokens/s are CPU wall clock.
"""
from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from experiments.common import plotting
from experiments.common.context import NO_GPU, RunContext
from experiments.common.corpus import generate
from experiments.common.measure import failure_note
from numba_flash.torch import scaled_dot_product_attention as numba_flash_sdpa

NAME = "train_gpt"
SEED = 0
VOCAB = 256
REFERENCE = "sdpa"
#: (run, against): the differences reported per step.
COMPARISONS = (("numba_flash", REFERENCE), ("sdpa_math", REFERENCE))


@dataclass(frozen=True)
class GPTConfig:
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    block_size: int = 1024


@dataclass(frozen=True)
class Setup:
    """One training configuration (every run of an experiment shares it)."""

    model: GPTConfig
    batch: int
    steps: int
    lr: float
    warmup_steps: int
    untimed_steps: int       # first steps left out of tokens/s (compilation, allocator warm-up)
    corpus_bytes: int


#: GPT-2 small's peak learning rate; 10 warm-up steps spiked the loss to 10 nats at step 11 (H200,
#: 2026-12-01), 40 do not.
GPU_SETUP = Setup(GPTConfig(), batch=8, steps=200, lr=6e-4, warmup_steps=40, untimed_steps=3,
                  corpus_bytes=4_000_000)
QUICK_STEPS = 100
CPU_SETUP = Setup(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16), batch=2, steps=4,
                  lr=1e-2, warmup_steps=1, untimed_steps=1, corpus_bytes=100_000)


def sdpa_math(query, key, value, is_causal=False):
    """torch SDPA on its MATH backend (the unfused softmax(QK^T)V in fp32)."""
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(query, key, value, is_causal=is_causal)


#: Run name -> attention(query, key, value, is_causal) on (B, H, T, head_dim) tensors.
ATTENTION = {
    "numba_flash": numba_flash_sdpa,
    "sdpa": F.scaled_dot_product_attention,
    "sdpa_math": sdpa_math,
}


class Block(nn.Module):
    """x + attention(LN(x)), then x + MLP(LN(x)), on x (B, T, n_embd)."""

    def __init__(self, config: GPTConfig, attention):
        super().__init__()
        width = config.n_embd
        self.n_head, self.attention = config.n_head, attention
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.attn_proj = nn.Linear(width, width)
        self.fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        B, T, width = x.shape
        heads = (t.view(B, T, self.n_head, width // self.n_head).transpose(1, 2)
                 for t in self.qkv(self.ln_1(x)).split(width, dim=2))
        y = self.attention(*heads, is_causal=True)                      # (B, H, T, head_dim)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, width))
        return x + self.mlp_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """Decoder-only transformer on bytes: tokens (B, T) int64, T <= block_size -> logits (B, T, 256).

    ``attention(query, key, value, is_causal=True)`` is called on (B, n_head, T, head_dim) and
    returns the same shape. Weights are drawn from ``seed`` alone (GPT-2's scheme: N(0, 0.02),
    residual projections scaled by 1/sqrt(2 n_layer), zero biases, unit LayerNorms), on the CPU,
    so that the same seed gives the same model on every device."""

    def __init__(self, config: GPTConfig, attention, seed: int = SEED):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(VOCAB, config.n_embd)
        self.position_embedding = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config, attention) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        generator = torch.Generator().manual_seed(seed)
        residual_std = 0.02 / math.sqrt(2 * config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln_" in name or name.startswith("ln_"):
                nn.init.ones_(p)
            else:
                std = residual_std if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, std=std, generator=generator)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.token_embedding.weight)     # tied output embedding


def learning_rate(step: int, setup: Setup) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine decay from ``lr`` to ``lr / 10``."""
    if step < setup.warmup_steps:
        return setup.lr * (step + 1) / setup.warmup_steps
    progress = (step - setup.warmup_steps) / max(1, setup.steps - setup.warmup_steps)
    return setup.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def batch_offsets(setup: Setup, corpus_bytes: int, seed: int = SEED) -> torch.Tensor:
    """(steps, batch) int64 start offsets of the training windows, the same for every run."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, corpus_bytes - setup.model.block_size, (setup.steps, setup.batch),
                         generator=generator)


@dataclass
class RunResult:
    losses: list[float]            # one per step
    tokens_per_s: float            # over the steps after ``untimed_steps``
    peak_memory_bytes: int | None  # None off the GPU
    wall_s: float


@contextlib.contextmanager
def strict_fp32():
    """TF32 off for matmuls and cuDNN (restored afterwards)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def train(run: str, setup: Setup, device: torch.device) -> RunResult:
    """Train a fresh ``GPT`` (seed ``SEED``) with ``ATTENTION[run]`` for ``setup.steps`` steps on
    the corpus of seed ``SEED``, batches from ``batch_offsets``, fp32 with TF32 off."""
    corpus = generate(setup.corpus_bytes, SEED)
    on_gpu = device.type == "cuda"
    synchronize = torch.cuda.synchronize if on_gpu else (lambda: None)
    if on_gpu:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    data = torch.frombuffer(bytearray(corpus), dtype=torch.uint8).to(device)
    window = torch.arange(setup.model.block_size + 1, device=device)
    offsets = batch_offsets(setup, len(corpus)).to(device)
    model = GPT(setup.model, ATTENTION[run]).to(device)
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    others = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": matrices, "weight_decay": 0.1},
                                   {"params": others, "weight_decay": 0.0}],
                                  lr=setup.lr, betas=(0.9, 0.95))
    losses, step_s = [], []
    with strict_fp32():
        for step in range(setup.steps):
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, setup)
            tokens = data[offsets[step][:, None] + window].long()      # (batch, block_size + 1)
            synchronize()
            step_start = time.perf_counter()
            logits = model(tokens[:, :-1])                             # (batch, block_size, VOCAB)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            synchronize()
            step_s.append(time.perf_counter() - step_start)
            losses.append(loss.item())
    timed = step_s[setup.untimed_steps:]
    return RunResult(losses=losses,
                     tokens_per_s=setup.batch * setup.model.block_size * len(timed) / sum(timed),
                     peak_memory_bytes=torch.cuda.max_memory_allocated(device) if on_gpu else None,
                     wall_s=time.perf_counter() - started)


def parameter_count(config: GPTConfig) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in GPT(config, ATTENTION[REFERENCE]).parameters())


def _setup(ctx: RunContext) -> tuple[Setup, str]:
    """The configuration for this run and the note every row carries."""
    if not ctx.gpu:
        skipped = ctx.skip(f"{NAME}: GPT-2-small training and peak memory ({NO_GPU})")
        c = CPU_SETUP.model
        return CPU_SETUP, (f"tiny CPU configuration ({c.n_layer} layers, width {c.n_embd}, {c.n_head} "
                           f"heads, context {c.block_size}, batch {CPU_SETUP.batch}): numba_flash on "
                           f"the CUDA simulator, sdpa and sdpa_math on torch's CPU SDPA; tokens/s are "
                           f"CPU wall clock; {skipped}")
    setup = replace(GPU_SETUP, steps=QUICK_STEPS) if ctx.quick else GPU_SETUP
    return setup, ("GPT-2-small size on bytes, fp32, TF32 off; same init and batches in every run; "
                   "|loss_sdpa_math - loss_sdpa| is the fp32 noise floor")


def _differences(a: list[float] | None, b: list[float] | None, steps: int) -> list[float | None]:
    """|a - b| per step; None throughout when either run failed."""
    if a is None or b is None:
        return [None] * steps
    return [abs(x - y) for x, y in zip(a, b)]


def _run_line(name: str, result: RunResult) -> str:
    memory = f"{result.peak_memory_bytes / 1e9:.2f} GB" if result.peak_memory_bytes is not None else "n/a"
    return (f"  {name:12s} {result.tokens_per_s:10,.0f} tokens/s  peak memory {memory}  "
            f"wall {result.wall_s:6.1f} s  final loss {result.losses[-1]:.4f}")


def run(ctx: RunContext) -> list[dict]:
    setup, note = _setup(ctx)
    device = torch.device("cuda" if ctx.gpu else "cpu")
    results: dict[str, RunResult | None] = {}
    run_notes = {}
    for name in ctx.progress(ATTENTION, f"{NAME}: runs"):
        try:
            results[name] = train(name, setup, device)
            run_notes[name] = note
        except Exception as exc:
            results[name] = None
            run_notes[name] = f"{failure_note(exc)}; {note}"
            ctx.fail(f"{NAME}: the {name} run {failure_note(exc)}")
    losses = {name: (r.losses if r else None) for name, r in results.items()}
    differences = {a: _differences(losses[a], losses[b], setup.steps) for a, b in COMPARISONS}
    config = {**asdict(setup.model), "parameters": parameter_count(setup.model), "batch": setup.batch,
              "steps": setup.steps}
    for name, result in results.items():
        print(_run_line(name, result) if result else f"  {name:12s} failed")
    rows = []
    for name, result in results.items():
        against = dict(COMPARISONS).get(name)
        diffs = [d for d in differences.get(name, []) if d is not None]
        if diffs:
            print(f"  |loss {name} - loss {against}| over {len(diffs)} steps: max {max(diffs):.3e}, "
                  f"mean {statistics.fmean(diffs):.3e}")
        rows.append({"row": "run", "run": name, **config,
                     "tokens_per_s": result.tokens_per_s if result else None,
                     "peak_memory_bytes": result.peak_memory_bytes if result else None,
                     "wall_s": result.wall_s if result else None,
                     "final_loss": result.losses[-1] if result else None,
                     "vs": against,
                     "max_abs_dloss": max(diffs) if diffs else None,
                     "mean_abs_dloss": statistics.fmean(diffs) if diffs else None,
                     "note": run_notes[name]})
    for step in range(setup.steps):
        row = {"row": "step", "step": step, "lr": learning_rate(step, setup)}
        row |= {f"loss_{name}": (values[step] if values else None) for name, values in losses.items()}
        row |= {f"abs_dloss_{a}_vs_{b}": differences[a][step] for a, b in COMPARISONS}
        rows.append({**row, "note": note})
    return rows


def plot(rows: list[dict], path) -> None:
    runs = [r for r in rows if r["row"] == "run"]
    steps = [r for r in rows if r["row"] == "step"]
    config = runs[0]

    def label(r):
        if r["final_loss"] is None:
            return f"{r['run']} failed"
        memory = (f"{r['peak_memory_bytes'] / 1e9:.1f} GB peak" if r["peak_memory_bytes"] is not None
                  else "peak memory n/a (CPU)")
        return f"{r['run']} {r['tokens_per_s']:,.0f} tok/s, {memory}"

    title = (f"Training: {config['n_layer']} layers, width {config['n_embd']}, {config['parameters']:,} "
             f"parameters, batch {config['batch']} x {config['block_size']} bytes, fp32\n"
             + "; ".join(label(r) for r in runs))
    fig, (losses, differences) = plotting.figure(2, title=title)
    x = [r["step"] for r in steps]
    for i, r in enumerate(runs):
        y = [s[f"loss_{r['run']}"] for s in steps]
        if None not in y:
            losses.plot(x, y, color=f"C{i}", label=r["run"], linestyle=("-", "--", ":")[i % 3],
                        linewidth=2.4 - 0.6 * i)
    losses.set_yscale("log")
    plotting.finish(losses, "step", "training loss (nats/byte)", title="loss, same init and batches")
    for i, (a, b) in enumerate(COMPARISONS):
        column = f"abs_dloss_{a}_vs_{b}"
        known = [(s["step"], s[column]) for s in steps if s[column] is not None]
        pts = [(step, d) for step, d in known if d > 0]
        if pts:
            differences.plot(*zip(*pts), color=f"C{i + 3}",
                             label=f"|loss {a} - loss {b}| ({len(known) - len(pts)} steps exactly 0, not drawn)",
                             **(plotting.MEASURED | {"markersize": 3}))
    if not differences.get_lines():
        plotting.annotate_empty(differences, "no non-zero differences (a run failed, or the losses agree exactly)")
    else:
        differences.set_yscale("log")
    plotting.finish(differences, "step", "|loss difference| (nats/byte)", title="difference to sdpa per step")
    plotting.save(fig, path, footnote="sdpa_math vs sdpa: the fp32 noise floor that numba_flash vs sdpa should sit within")
