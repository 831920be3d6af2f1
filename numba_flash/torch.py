"""PyTorch front end: ``scaled_dot_product_attention``, a drop-in for torch's, on our kernels.

    import numba_flash.torch as nft
    o = nft.scaled_dot_product_attention(q, k, v, is_causal=True)   # q (B, H, N_q, d), float32
    o.sum().backward()                                               # our backward kernels

Semantics are torch's (``torch.nn.functional.scaled_dot_product_attention``):

- shapes (..., N_q, d) for the query and (..., N_k, d) for key and value, any leading dims
  (batch, heads); the output is shaped like the query;
- ``is_causal`` is **top-left aligned**, as torch's: query r sees key c iff c <= r (the
  kernels' ``causal`` default is bottom-right, c <= r + N_k - N_q; here they are launched
  with ``diagonal=0``). Every row then sees key 0, so no row is fully masked but by an
  ``attn_mask`` (below);
- ``scale`` defaults to 1/sqrt(d); with ``enable_gqa`` key and value may have fewer heads
  (dim -3) than the query, as in torch: the kernels read each key/value head for its group of
  query heads (no repeated copy), and the backward sums its gradients over the group (key and
  value with different head counts, which torch also allows, are repeated to the query's);
- ``attn_mask``: a boolean **key padding** mask, True where a key takes part (torch's
  convention), the same for every query: shape (..., 1, N_k), its leading dims broadcasting to
  the query's, e.g. (B, 1, 1, N_k) for (B, H, N, d) inputs. Each batch entry runs on the keys
  it keeps (``api.flash_attention``'s ``key_padding_mask``: padding neither loaded nor
  computed, a launch per entry, or per entry and head where the mask differs between heads);
  with ``is_causal`` the kept keys must be a prefix. Rows that keep no key give 0 (torch's
  math backend: NaN) and zero gradients;
- what the kernels cannot do yet raises ``NotImplementedError``, never a silent fallback to
  torch: any other ``attn_mask`` (float biases, masks that vary along the queries, masks that
  vary along the heads with ``enable_gqa``), a value head dim other than the query's, dtypes
  other than float32, float16 and bfloat16, leading dims that only broadcast, empty inputs, a
  scale that is not finite and positive, and a second derivative (the backward op has no
  autograd formula of its own);
- float16 and bfloat16 run forward and backward on tensor cores in that format
  (``api.flash_attention_backward``), gradients in the inputs' dtype;
- ``algorithm`` (keyword-only, ours): float32's kernels, ``"fa2"`` (3xTF32, the default) or
  ``"fa2_fp16x3"`` (fp32 from three fp16 products, forward and backward: about twice the speed
  of "fa2", o within 2x and the gradients within 3x a plain fp32 implementation's error;
  ``api.flash_attention``'s and ``api.flash_attention_backward``'s). Its backward recomputes
  S from the same fp16 parts the forward took it from (the 3xTF32 backward's S differs from
  it by a few ulps, and at large logits the gradients then exceed the rule:
  ``tools/fp16x3_gradients.py``);
- ``dropout_p`` > 0 drops probabilities as torch does (kept ones scaled by 1 / (1 - p)), with
  the kernels' own mask (``api.flash_attention``'s ``dropout_p``: p applied rounded to 2^-16):
  each call draws a seed from torch's default CPU generator (``dropout_seed``; repeatable
  under ``torch.manual_seed``), which autograd saves so the backward regenerates the mask. The
  masks differ from torch's own (another generator), as any two backends' do.

Both passes are ``torch.library`` custom operators, ``numba_flash::attention_forward`` (o, lse)
and ``numba_flash::attention_backward`` (dq, dk, dv), with fake (meta) implementations and an
autograd formula: the forward saves o and lse, the backward recomputes P from lse. So
``torch.compile(model, fullgraph=True)`` traces through them without a graph break.

The operators also take a sliding window and the backward's ``deterministic``, for
``numba_flash.flash_attn`` (flash-attention's own functions on these kernels).

CUDA tensors: kernels launch on torch's current stream of the tensors' device, outputs come
from torch's caching allocator on that stream, results are torch tensors (no copies). CPU
tensors run on Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` set before numba is
imported): slow, for tests and teaching.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
from numba import cuda

from . import api, memory, precision
from .fp16x3 import FP16X3
from .launch import on_stream

__all__ = ["scaled_dot_product_attention", "block_sparse_attention", "dropout_seed"]

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: ``scaled_dot_product_attention``'s forward algorithms (``api.flash_attention``'s names).
ALGORITHMS = ("fa2", FP16X3)
_streams: dict = {}


class TorchMemory(memory.Memory):
    """Placement for one call on CUDA tensors: inputs used in place, outputs from torch's
    caching allocator on ``device`` (on its current stream, which the kernels launch on),
    returned as the torch tensors themselves. Arrays are imported without numba's host
    synchronisation of the producing stream (``sync=False``): that stream is the one the
    kernels launch on, so it orders them already."""

    def __init__(self, device, poison: bool):
        self.device, self.poison = device, poison

    def input(self, x, name):
        return cuda.as_cuda_array(x, sync=False)

    def output(self, shape, dtype, name, like=None):
        return memory.torch_output(shape, dtype, like, self.device, self.poison, sync=False)


def _stream_of(device, index: int):
    """The numba stream for torch's current stream on ``device`` (GPU ``index``, whose numba
    context is current): one object per (GPU, handle), since handle 0 means each GPU's own
    default stream."""
    handle = torch.cuda.current_stream(device).cuda_stream
    if (index, handle) not in _streams:
        _streams[index, handle] = cuda.external_stream(handle) if handle else cuda.default_stream()
    return _streams[index, handle]


def _run(fn, tensors, **kwargs):
    """``fn(*tensors, **kwargs)`` (an ``api`` entry point) on torch tensors: on the GPU on
    torch's current stream, on CPU tensors through the CUDA simulator; a tuple of tensors."""
    first = tensors[0]
    if first.is_cuda:
        if memory.simulator_enabled():
            raise RuntimeError("CUDA tensors, but NUMBA_ENABLE_CUDASIM=1 runs the kernels on the "
                               "CPU simulator: unset it, or pass CPU tensors")
        index = first.device.index if first.device.index is not None else torch.cuda.current_device()
        with cuda.gpus[index], on_stream(_stream_of(first.device, index)), \
                memory.using(TorchMemory(first.device, memory.active().poison)):
            return tuple(fn(*(t.detach().contiguous() for t in tensors), **kwargs))
    if not memory.simulator_enabled():
        raise RuntimeError("CPU tensors run on Numba's CUDA simulator: set NUMBA_ENABLE_CUDASIM=1 "
                           "before numba is imported (slow; for tests), or move the tensors to a GPU")
    out = fn(*(_to_numpy(t.detach().contiguous()) for t in tensors), **kwargs)
    return tuple(_from_numpy(x) for x in out)


def _to_numpy(t):
    """A CPU tensor as a NumPy array (bfloat16: an ``ml_dtypes.bfloat16`` view of its bits)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(precision.host_type("bfloat16"))
    return t.numpy()


def _from_numpy(x):
    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def _sparse(block_mask: Optional[torch.Tensor], block_q: int, block_k: int) -> dict:
    """The API's block-sparse arguments from an op's ``block_mask`` and block sides."""
    return {} if block_mask is None else dict(block_mask=block_mask, block_size=(block_q, block_k))


def _padding(key_padding_mask: Optional[torch.Tensor]) -> dict:
    """The API's ``key_padding_mask`` argument from an op's (B, N_k) bool tensor, on the host."""
    return {} if key_padding_mask is None else dict(key_padding_mask=key_padding_mask.cpu().numpy())


def _dropout(dropout_p: float, seed: Optional[torch.Tensor]) -> dict:
    """The API's dropout arguments from an op's ``dropout_p`` and its int64 ``seed`` tensor."""
    if not dropout_p:
        return {}
    if seed is None:
        raise ValueError("dropout_p > 0 needs a seed tensor (an int64 scalar)")
    return dict(dropout_p=dropout_p, dropout_seed=int(seed.item()))


@torch.library.custom_op("numba_flash::attention_forward", mutates_args=())
def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                      causal: bool, diagonal: int, dropout_p: float = 0.0,
                      seed: Optional[torch.Tensor] = None, block_mask: Optional[torch.Tensor] = None,
                      block_q: int = 128, block_k: int = 128, algorithm: str = "fa2",
                      key_padding_mask: Optional[torch.Tensor] = None, window_left: int = -1,
                      window_right: int = -1, deterministic: bool = False
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of FlashAttention: q (B, H, N_q, d), k and v (B, H, N_k, d) float32, float16 or
    bfloat16; o (B, H, N_q, d) in their dtype, lse (B, H, N_q) float32; row r sees key c iff
    ``not causal or c <= r + diagonal``; with ``dropout_p`` > 0, the mask of ``seed`` (an int64
    scalar tensor: ``api.flash_attention``'s ``dropout_seed``); with ``block_mask`` (bool,
    (ceil(N_q / block_q), ceil(N_k / block_k))), block-sparse (``api.flash_attention``'s);
    ``algorithm``: ``api.flash_attention``'s ("fa2", or "fa2_fp16x3" for float32);
    ``key_padding_mask`` (B, N_k) bool, True for a padding key (``api.flash_attention``'s);
    a sliding window's sides as flash-attention's ``window_size`` (-1: unbounded; about
    ``diagonal``); ``deterministic`` is the backward's (read by autograd only)."""
    window = _window(window_left, window_right)
    return _run(api.flash_attention, (q, k, v), causal=causal, softmax_scale=scale,
                return_lse=True, diagonal=diagonal if causal or window else None, window=window,
                **_dropout(dropout_p, seed), **_sparse(block_mask, block_q, block_k),
                **_padding(key_padding_mask), algorithm=algorithm)


@attention_forward.register_fake
def _(q, k, v, scale, causal, diagonal, dropout_p=0.0, seed=None, block_mask=None, block_q=128,
      block_k=128, algorithm="fa2", key_padding_mask=None, window_left=-1, window_right=-1,
      deterministic=False):
    return torch.empty_like(q), q.new_empty(q.shape[:-1], dtype=torch.float32)


@torch.library.custom_op("numba_flash::attention_backward", mutates_args=())
def attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       o: torch.Tensor, lse: torch.Tensor, scale: float, causal: bool,
                       diagonal: int, dropout_p: float = 0.0,
                       seed: Optional[torch.Tensor] = None, block_mask: Optional[torch.Tensor] = None,
                       block_q: int = 128, block_k: int = 128,
                       key_padding_mask: Optional[torch.Tensor] = None, window_left: int = -1,
                       window_right: int = -1, deterministic: bool = False,
                       algorithm: str = "fa2") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv), shaped like q, k, v, from the forward's saved o (B, H, N_q, d) and lse
    (B, H, N_q), for the upstream gradient do (B, H, N_q, d); P is recomputed, never stored,
    and so is the dropout mask (from the forward's ``seed``); ``block_mask``,
    ``key_padding_mask`` and the window as the forward's (padding keys get zero gradients);
    ``deterministic`` and ``algorithm`` (the forward's: "fa2", or "fa2_fp16x3" for float32):
    ``api.flash_attention_backward``'s."""
    window = _window(window_left, window_right)
    return _run(api.flash_attention_backward, (do, q, k, v, o, lse), causal=causal,
                softmax_scale=scale, diagonal=diagonal if causal or window else None, window=window,
                deterministic=deterministic, **_dropout(dropout_p, seed),
                **_sparse(block_mask, block_q, block_k), **_padding(key_padding_mask),
                algorithm=algorithm)


@attention_backward.register_fake
def _(do, q, k, v, o, lse, scale, causal, diagonal, dropout_p=0.0, seed=None, block_mask=None,
      block_q=128, block_k=128, key_padding_mask=None, window_left=-1, window_right=-1,
      deterministic=False, algorithm="fa2"):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    (q, k, v, scale, causal, diagonal, dropout_p, seed, block_mask, block_q, block_k, algorithm,
     key_padding_mask, left, right, deterministic) = inputs
    o, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, o, lse, seed, block_mask, key_padding_mask)
    ctx.args = (scale, causal, diagonal, dropout_p)
    ctx.options = (block_q, block_k, left, right, deterministic, algorithm)


def _differentiate(ctx, do, _dlse):
    q, k, v, o, lse, seed, block_mask, key_padding_mask = ctx.saved_tensors
    block_q, block_k, left, right, deterministic, algorithm = ctx.options
    dq, dk, dv = attention_backward(do.contiguous(), q, k, v, o, lse, *ctx.args, seed, block_mask,
                                    block_q, block_k, key_padding_mask, left, right, deterministic,
                                    algorithm)
    return dq, dk, dv, *(None,) * 13


def _window(left: int, right: int) -> Optional[tuple[int, int]]:
    """The API's ``window`` from flash-attention's ``window_size`` sides (-1, -1: none)."""
    return None if (left, right) == (-1, -1) else (left, right)


def check_dropout_p(dropout_p) -> None:
    """ValueError unless ``dropout_p`` is a float (or int) in [0, 1): checked by the wrappers
    before they draw a seed (the API checks it again, with the seed)."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be a float in [0, 1), got {dropout_p!r}")


def dropout_seed(generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """The seed ``scaled_dot_product_attention`` draws for a call with dropout: an int64 scalar
    tensor, uniform in [0, 2^62), from ``generator`` (None: torch's default CPU generator, so
    ``torch.manual_seed`` makes dropout repeatable)."""
    return torch.randint(0, 2 ** 62, (), dtype=torch.int64, generator=generator)


attention_forward.register_autograd(_differentiate, setup_context=_setup_context)


def _unsupported(what: str) -> NotImplementedError:
    return NotImplementedError(f"numba_flash.torch.scaled_dot_product_attention: {what}")


def _repeat_heads(name, x, heads):
    """``x`` (..., H_kv, N, d) with each head repeated over its group of ``heads`` query heads
    (for key and value with different head counts, which torch allows)."""
    if x.dim() < 3 or x.shape[-3] == heads:
        return x
    if heads % x.shape[-3]:
        raise ValueError(f"enable_gqa: query heads ({heads}) must be a multiple of {name} heads "
                         f"({x.shape[-3]})")
    return x.repeat_interleave(heads // x.shape[-3], dim=-3)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *, algorithm="fa2"):
    """``torch.nn.functional.scaled_dot_product_attention`` on numba-flash's kernels.

    query (..., N_q, d), key and value (..., N_k, d), the same leading dims (with
    ``enable_gqa``, heads at dim -3 may divide the query's); float32, float16 or bfloat16 (one
    for all), on one CUDA device or
    (under the CUDA simulator) the CPU. ``algorithm`` (keyword-only, not torch's): the forward,
    "fa2" or, for float32, "fa2_fp16x3" (three fp16 products, about twice as fast, forward and
    backward). Returns the attention output (..., N_q, d). See
    the module docstring for what is supported."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    check_dropout_p(dropout_p)
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype not in SUPPORTED_DTYPES:
            raise _unsupported(f"{name} is {x.dtype}; the kernels take torch.float32, float16 or "
                               f"bfloat16: convert with {name}.float() (or .half(), .bfloat16())")
        if x.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dims (..., seq_len, head_dim), got "
                             f"shape {tuple(x.shape)}")
    if not (query.device == key.device == value.device):
        raise ValueError(f"query, key and value must be on one device, got {query.device}, "
                         f"{key.device} and {value.device}")
    if value.shape[-1] != query.shape[-1] or key.shape[-1] != query.shape[-1]:
        raise _unsupported(f"head dims must be equal (query {query.shape[-1]}, key "
                           f"{key.shape[-1]}, value {value.shape[-1]})")
    heads = kv_heads = 1       # query and key/value heads of one batch entry
    if enable_gqa:
        if query.dim() < 3:
            raise ValueError(f"enable_gqa: heads are dim -3, but query has shape {tuple(query.shape)}")
        if key.shape[-3:-2] != value.shape[-3:-2]:   # (torch groups each on its own: copies)
            key, value = (_repeat_heads(name, x, query.shape[-3])
                          for name, x in (("key", key), ("value", value)))
        if key.shape[-3] != query.shape[-3]:
            heads, kv_heads = query.shape[-3], key.shape[-3]
            if heads % kv_heads:
                raise ValueError(f"enable_gqa: query heads ({heads}) must be a multiple of key "
                                 f"and value heads ({kv_heads})")
    lead = query.shape[:-2] if heads == 1 else query.shape[:-3]
    kv_lead = key.shape[:-2] if heads == 1 else key.shape[:-3]
    if kv_lead != lead or value.shape[:len(kv_lead)] != kv_lead or value.dim() != key.dim():
        raise _unsupported(f"leading dims of key {tuple(key.shape)} and value {tuple(value.shape)} "
                           f"must equal the query's {tuple(query.shape)} (broadcasting is not "
                           "supported: expand them first; enable_gqa=True for fewer heads)")
    if query.numel() == 0 or key.numel() == 0:
        raise _unsupported(f"empty inputs (query {tuple(query.shape)}, key {tuple(key.shape)}): "
                           "every dim must be at least 1")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise _unsupported(f"scale={scale}: the kernels take a finite, positive scale")
    d = query.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    padding = None
    if attn_mask is not None:
        padding, grouped = _key_padding(attn_mask, query, key.shape[-2], heads != 1)
        if grouped and heads == 1 and query.dim() >= 3:   # an entry's heads in one call
            heads = kv_heads = query.shape[-3]
    q4 = query.reshape(-1, heads, query.shape[-2], d).contiguous()
    k4, v4 = (x.reshape(-1, kv_heads, x.shape[-2], d).contiguous() for x in (key, value))
    seed = dropout_seed() if dropout_p > 0 else None
    o, _ = attention_forward(q4, k4, v4, scale, bool(is_causal), 0, float(dropout_p), seed,
                             algorithm=algorithm, key_padding_mask=padding)
    return o.reshape(query.shape)


def _key_padding(attn_mask, query, n_k: int, gqa: bool) -> tuple[torch.Tensor, bool]:
    """(mask, grouped) for a boolean ``attn_mask`` (True: a key that takes part, torch's
    convention) that masks whole keys: shape (..., 1, N_k), its leading dims broadcasting to the
    query's. ``mask`` (B', N_k) bool, True for a padding key; ``grouped``: the mask is the same
    for every head (size 1 at the query's dim -3): B' counts the batch entries (the query's dims
    before -3), else every (batch entry, head). Else NotImplementedError (ValueError for a mask
    that does not broadcast, TypeError for one that is not a tensor)."""
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"attn_mask must be a torch.Tensor or None, got {type(attn_mask).__name__}")
    if attn_mask.dtype != torch.bool:
        raise _unsupported(f"attn_mask of dtype {attn_mask.dtype} (an additive bias) is not "
                           "supported: only boolean key padding masks (..., 1, N_k) are")
    shape = tuple(attn_mask.shape)
    if len(shape) > query.dim() or not shape or shape[-1] != n_k:
        raise _unsupported(f"attn_mask of shape {shape}: only key padding masks (..., 1, N_k), "
                           f"N_k = {n_k}, of at most the query's {query.dim()} dims are supported")
    full = (1,) * (query.dim() - len(shape)) + shape
    if full[-2] != 1:
        raise _unsupported(f"attn_mask of shape {shape} varies along the queries: only key padding "
                           "masks (size 1 at dim -2, e.g. (B, 1, 1, N_k)) are supported; "
                           "is_causal=True gives a causal mask")
    grouped = query.dim() < 3 or full[-3] == 1
    if not grouped and gqa:
        raise _unsupported(f"attn_mask of shape {shape} varies along the heads, with enable_gqa: "
                           "pass a mask of size 1 at dim -3")
    entries = tuple(query.shape[:-3] if grouped else query.shape[:-2])
    if any(m not in (1, b) for m, b in zip(full, entries)):
        raise ValueError(f"attn_mask of shape {shape} does not broadcast to the query's "
                         f"{tuple(query.shape)}")
    mask = attn_mask.reshape(full).expand(entries + full[len(entries):])
    return ~mask.reshape(-1, n_k).cpu(), grouped


def block_sparse_attention(query, key, value, block_mask, block_size=(128, 128), is_causal=False,
                           scale=None):
    """Block-sparse attention (FlashAttention's Algorithm 5) on our kernels, with autograd.

    query (B, H, N_q, d), key and value (B, H_kv, N_k, d), H a multiple of H_kv (GQA / MQA);
    float32, float16 or bfloat16 (one for all). ``block_mask``: booleans (a tensor, or anything
    ``torch.as_tensor`` takes) of shape (ceil(N_q / bq), ceil(N_k / bk)) for blocks of
    ``block_size`` = (bq, bk) scores, shared by every batch entry and head: the scores of a
    block that is False are masked and its tiles never loaded (``api.flash_attention``'s
    ``block_mask``); rows that keep no block give 0. ``is_causal``: top-left, as torch's SDPA.
    Returns the output (B, H, N_q, d)."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError(f"{name} must be a 4-D torch.Tensor (B, H, N, d), got "
                             f"{type(x).__name__} of shape {tuple(getattr(x, 'shape', ()))}")
    if not isinstance(block_size, (tuple, list)) or len(block_size) != 2:
        raise TypeError(f"block_size must be a pair (queries, keys) of ints, got {block_size!r}")
    mask = torch.as_tensor(block_mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"block_mask must hold booleans, got {mask.dtype}")
    d = query.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    o, _ = attention_forward(query.contiguous(), key.contiguous(), value.contiguous(), scale,
                             bool(is_causal), 0, 0.0, None, mask.cpu(), int(block_size[0]),
                             int(block_size[1]))
    return o
