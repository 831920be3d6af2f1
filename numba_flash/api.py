"""Public entry points, in PyTorch SDPA's layout: q (B, H, N_q, d), k and v (B, H, N_k, d).

NumPy arrays in -> NumPy arrays out (copied to and from the device). torch CUDA tensors in (on
torch's default stream) -> torch tensors out, from torch's allocator. Other device arrays in
(numba device arrays, anything with ``__cuda_array_interface__`` such as cupy arrays, or torch
tensors under another current stream) -> numba device arrays out. No copy of device inputs.

Causal masking follows torch.tril's ``diagonal``: query row r sees key c iff
``c <= r + diagonal``. The default ``diagonal=None`` is N_k - N_q, bottom-right aligned as in
flash-attention >= 2.1; ``diagonal=0`` is top-left aligned, as torch SDPA's ``is_causal``; for
N_q = N_k both are the usual lower triangle. Any int works (a mask with ``diagonal >= N_k - 1``
hides nothing), and it is a runtime argument of the kernels: no compile per diagonal. Rows
that see no key at all (r + diagonal < 0: bottom-right with N_q > N_k, or a negative diagonal)
give o = 0 and lse = -inf.

Sliding windows (``window=(left, right)``, flash-attention's ``window_size``) cut the band
r + diagonal - left <= c <= r + diagonal + right around the same diagonal (``simulator.spec``);
grouped-query attention (GQA / MQA) takes k and v with fewer heads than q. Both run on the
"fa2" kernels, whose K/V loops skip the blocks outside the band.

NaN and Inf are not special-cased, and never replaced by numbers: a NaN in a row of q makes that
row of o (and lse) NaN; a NaN in a row of k reaches every row that sees that key (masked scores
are set to -inf before the exponential); a NaN in a row of v also reaches the other rows of its
Br x Bc tile, masked or seeing no key at all, because their zero probabilities enter the tile
product and 0 * NaN = NaN (flash-attention behaves the same way). A -inf score is a masked key.
"""
from __future__ import annotations

import dataclasses
import math
import sys

import numpy as np
from numba import cuda

from simulator.hardware import H200
from simulator.kv_split import checked_kv_split
from simulator.predict import kv_split_of
from simulator.spec import Mask
from simulator.row_kernels import CONVERT_BLOCKS_PER_SM, CONVERT_SMS, CONVERT_THREADS, ROW_DOT_THREADS
from simulator.standard import ROW_THREADS
from simulator.workload import Workload, needs_band_kernels
from simulator.tiling import (BACKWARD_KERNELS, FORWARD_KERNELS, HALF_BACKWARD_KERNELS,
                              HALF_FORWARD_KERNELS, Tiling)
from simulator.flash import RECOMPUTE_KERNEL, recompute_tiling

from . import checks, fp16x3, memory, plans, precision, split_calls
from .fp16x3 import FP16X3
from .kernels.flash_backward import make_flash_backward_dq, make_flash_backward_kv, make_row_dot
from .kernels.flash_backward_half import make_flash_backward_half
from .kernels.flash_backward_tc import make_flash_backward_tc
from .kernels.flash_forward_alg1 import make_flash_forward_alg1
from .kernels.flash_forward_fa2 import make_flash_forward_fa2
from .kernels.flash_forward_fa2_tc import make_flash_forward_fa2_tc
from .kernels.convert import make_convert
from .kernels.dropout_mask import make_dropout_mask
from .kernels.flash_forward_half import make_flash_forward_half
from .kernels.standard import make_ds, make_matmul, make_softmax
from .kernels.tiles import LOG2E
from .launch import launch

#: algorithm -> kernel (a Tiling kernel name), forward and backward: simulator.tiling's maps, and
#: the forward's fp32 attention from three fp16 products (numba_flash/fp16x3.py: the fp16 kernel
#: on hi and lo parts; the cost model's "flash_forward_fp16x3", simulator/fp16x3.py).
ALGORITHMS = {**FORWARD_KERNELS, FP16X3: "flash_forward_half"}
#: the backward's too (fp16 parts of q, k, v and dO: the fp16 backward in its fp32 mode).
BACKWARD_ALGORITHMS = {**BACKWARD_KERNELS, FP16X3: "flash_backward_half"}
F32 = np.float32
def _row_threads() -> int:
    """Threads per block of the row-wise kernels (softmax, dS, D); fewer under the simulator,
    where each thread is a Python thread. Their traffic does not depend on it (their
    shared-memory wavefronts do: ``simulator.standard.row_kernel_wavefronts``)."""
    return 16 if memory.simulator_enabled() else ROW_THREADS


def _row_dot(d: int, zero_dq: bool, n_q: int, bh: int, fmt: str = "float32"):
    """The D = rowsum(dO * O) kernel (one warp a row) for dO, O of format ``fmt`` and its grid:
    (kernel, grid, threads)."""
    threads = 32 if memory.simulator_enabled() else ROW_DOT_THREADS
    return make_row_dot(threads, d, zero_dq, fmt), (math.ceil(n_q / (threads // 32)), bh), threads


def _flat(x, rows, cols=None):
    """(B, H, N, d) -> (B*H, N, d) view; (B, H, N) -> (B*H, N)."""
    bh = int(x.shape[0]) * int(x.shape[1])
    return x.reshape(bh, rows) if cols is None else x.reshape(bh, rows, cols)


def _flat_forward(Q, K, V, O, L, n_q, n_k, d):
    """The FFMA forwards' (B*H, N, d) views of Q, K, V, O and (B*H, N_q) of L."""
    return _flat(Q, n_q, d), _flat(K, n_k, d), _flat(V, n_k, d), _flat(O, n_q, d), _flat(L, n_q)


def _inputs(mem, shp, **named):
    """The kernels' arrays for the named inputs (Q=q, ...): ``Memory.input`` of each, as uint16
    patterns for half-precision inputs."""
    if not shp.half:
        return tuple(mem.input(x, name) for name, x in named.items())
    return tuple(precision.bits(mem.input(precision.kernel_source(x, shp.precision), name))
                 for name, x in named.items())


def _aligned16(*arrays) -> bool:
    """Whether every device array starts on a 16-byte boundary (cp.async's 16-byte copies need
    it); the simulator has no alignment to respect."""
    if memory.simulator_enabled():
        return True
    return all(a.__cuda_array_interface__["data"][0] % 16 == 0 for a in arrays)


def forward_kernel(algorithm: str, fmt: str) -> str:
    """The Tiling kernel name ``flash_attention`` runs for ``algorithm`` on inputs of format
    ``fmt``; half-precision inputs run on tensor cores in their format ("fa2") or in the
    Algorithm 1 order storing their format ("fa1"), not on "fa2_fma"."""
    if fmt not in precision.HALF:
        return ALGORITHMS[algorithm]
    if algorithm == FP16X3:
        raise ValueError(f"algorithm={FP16X3!r} takes float32 inputs (it splits each into two fp16 "
                         f"parts), got {fmt}: pass float32 inputs, or algorithm='fa2'")
    if algorithm not in HALF_FORWARD_KERNELS:
        raise ValueError(f"algorithm={algorithm!r} runs in float32 only; {fmt} inputs run on "
                         f"algorithm='fa2' (tensor cores in {fmt}) or 'fa1': pass one, or "
                         "convert the inputs to float32")
    return HALF_FORWARD_KERNELS[algorithm]


def forward_tiling(algorithm: str, fmt: str, tiling, d: int, n_q: int, n_k: int, dropout: bool,
                   block_size) -> Tiling:
    """The tiling ``flash_attention`` runs ``algorithm`` with on inputs of format ``fmt``:
    ``tiling`` checked, or its default cut to the sequences (``checks.tiling_for``). The
    "fa2_fp16x3" tiles hold rows of 2 D16 fp16 parts, and its default is its own
    (``fp16x3.default_tiling``)."""
    kernels = (forward_kernel(algorithm, fmt),)
    if algorithm != FP16X3:
        return checks.tiling_for(tiling, kernels, d, n_q, n_k, dropout, block_size)
    if tiling is None and block_size is None:
        tiling = fp16x3.default_tiling(d, n_q, n_k, dropout)
    return checks.tiling_for(tiling, kernels, fp16x3.parts_width(d), n_q, n_k, dropout, block_size)


def flash_attention(q, k, v, *, causal=False, softmax_scale=None, return_lse=False,
                    algorithm="fa2", tiling=None, diagonal=None, window=None, dropout_p=0.0,
                    dropout_seed=None, return_dropout_mask=False, block_mask=None,
                    block_size=checks.BLOCK_SIZE, key_padding_mask=None):
    """FlashAttention forward. q: (B, H, N_q, d); k, v: (B, H, N_k, d); float32, float16 or
    bfloat16 (all three the same).

    Returns o (B, H, N_q, d) in the inputs' format, or (o, lse) with ``return_lse``; lse
    (B, H, N_q), float32, is the natural-log log-sum-exp of each row of scale * q k^T (-inf for
    rows that see no key). float16 / bfloat16 run on tensor cores in that format (mma m16n8k16,
    fp32 sums and softmax statistics, P rounded to the format for P V, as FlashAttention-2),
    or with ``algorithm="fa1"`` in the Algorithm 1 order with q, k, v, o in HBM in that format
    (fp32 arithmetic; o rounded each time it goes back to HBM); not with "fa2_fma".
    ``causal``: row r sees key c iff c <= r + ``diagonal``, any int (None: N_k - N_q,
    bottom-right; 0: top-left, torch SDPA's ``is_causal``); ``diagonal`` only with ``causal=True``
    or a ``window``.
    ``algorithm="fa2"``: FA2 loop order (a block per Q tile) on tensor cores, TF32 mma with the
    3xTF32 split (errors at fp32 level, not bitwise fp32; infinite inputs become +-3.4e38);
    ``"fa2_fp16x3"`` (float32 inputs; its backward is ``flash_attention_backward``'s
    "fa2_fp16x3"): the same on the fp16 tensor cores, each
    head of q, k, v scaled by a power of two and split into two fp16 parts, three fp16 products
    a product (``numba_flash.fp16x3``; about twice "fa2"'s speed; finite inputs only: a head
    holding an infinite value loses its other values; at most 65535 heads of q, k and v
    together; every "fa2" option runs on it);
    ``"fa2_fma"``: the same loop order in plain fp32 FFMA arithmetic; ``"fa1"``: the paper's
    Algorithm 1 order (outer loop over K/V blocks, O, l, m through HBM; for IO studies).
    ``tiling``: a ``Tiling(Br, Bc)`` ("fa2": Br a multiple of 16, Bc of 8; with dropout both
    multiples of 16); default the fastest measured on the H200 ("fa2": 256 x 32 for d <= 64,
    else 128 x 32; "fa2_fma": 128 x 64; "fa1": 64 x 64), smaller where the head dim needs more
    shared memory or the sequence is short (with dropout, sides never below 16).
    ``window=(left, right)``: sliding-window attention, flash-attention's ``window_size``: row r
    sees keys c with r + diagonal - left <= c <= r + diagonal + right (-1: no bound on that
    side; ``diagonal`` None is N_k - N_q here too); with ``causal``, right must be 0 or -1.
    K/V blocks outside the band are neither loaded nor computed.
    Grouped-query attention (GQA / MQA): k and v may have H_kv heads, H a multiple of H_kv;
    query head h reads K/V head h // (H / H_kv). Windows and grouped heads run on "fa2" (and
    "fa2_fp16x3").
    ``dropout_p`` (the paper's Algorithm 2; "fa2" only): each probability is kept
    with probability 1 - p and scaled by 1 / (1 - p), or dropped, after the softmax (lse is of
    the undropped scores); the mask is a function of (``dropout_seed``, an int in [0, 2^64),
    batch-head, row, column) alone (``reference.dropout_keep``), regenerated by the backward
    from the same seed, never stored. ``return_dropout_mask``: also return it, (B, H, N_q, N_k)
    bool (1 = kept), after o (and lse).
    ``block_mask`` (block-sparse FlashAttention, the paper's Algorithm 5; "fa2" only):
    (ceil(N_q / bq), ceil(N_k / bk)) booleans for blocks of ``block_size`` = (bq, bk) scores
    (default FlexAttention's 128 x 128), the same for every batch and head; the scores of a
    block that is False are masked, and its K/V tiles neither loaded nor computed (rows that
    keep no block: o = 0, lse = -inf). Combines with causal, windows, GQA and dropout. The
    kernels' tiles must lie inside blocks: the default tiling's sides are cut to their gcd with
    the block's; a given ``tiling`` must divide ``block_size``.
    ``key_padding_mask``: (B, N_k) bool, True for a padding key no query sees (PyTorch's
    convention); each batch entry runs as its own call on the keys it keeps (``padding``: with
    ``causal`` or a ``window`` the kept keys must be a prefix; with dropout, entry b's mask is
    drawn from ``reference.padding_dropout_seed(dropout_seed, b)`` over its kept keys, padding
    keys never kept); not with block masks.
    """
    if key_padding_mask is not None:
        from . import padding
        return padding.forward(q, k, v, key_padding_mask, causal=causal, window=window,
                               diagonal=diagonal, return_lse=return_lse, dropout_p=dropout_p,
                               dropout_seed=dropout_seed, block_mask=block_mask,
                               softmax_scale=softmax_scale,
                               algorithm=algorithm, tiling=tiling,
                               return_dropout_mask=return_dropout_mask)
    blocks_key = checks.block_mask_key(block_mask)
    key = None if blocks_key is checks.UNKEYED or return_dropout_mask is not False else plans.key(
        "forward", (q, k, v), (causal, softmax_scale, return_lse, algorithm, tiling, diagonal, window,
                               dropout_p, _seed_key(dropout_p, dropout_seed), return_dropout_mask,
                               blocks_key, block_size))
    plan = plans.get(key)
    if plan is not None:
        return plan(q, k, v, scalars=_seed_words(dropout_p, dropout_seed))
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {sorted(ALGORITHMS)}, got {algorithm!r}")
    shp = checks.attention_shapes(q, k, v, grouped=True)
    causal = checks.flag("causal", causal)
    band, hi, lo = checks.band(causal, window, diagonal, shp.N_q, shp.N_k)
    drop = checks.dropout(dropout_p, dropout_seed)
    checks.flag("return_dropout_mask", return_dropout_mask)
    on, block_size = checks.block_mask(block_mask, block_size, shp.N_q, shp.N_k)
    mask = Mask(band.upper, band.lower, shp.group, dropout=drop != checks.NO_DROPOUT,
                sparse=on is not None)
    if algorithm not in ("fa2", FP16X3) and needs_band_kernels(mask, causal):
        raise ValueError(f"algorithm={algorithm!r} has no sliding window, grouped K/V heads nor "
                         "block mask: pass algorithm='fa2' (or window=None, block_mask=None and "
                         "k, v with q's heads)")
    _dropout_kernels(mask, algorithm, shp)
    checks.flag("return_lse", return_lse)
    scale = checks.softmax_scale(softmax_scale, shp.d)
    kernel_name = forward_kernel(algorithm, shp.precision)
    tiling = forward_tiling(algorithm, shp.precision, tiling, shp.d, shp.N_q, shp.N_k, mask.dropout,
                            block_size)
    tile_d = fp16x3.parts_width(shp.d) if algorithm == FP16X3 else shp.d
    lists = checks.block_lists(on, block_size, tiling, shp.N_q, shp.N_k, causal, window, diagonal,
                               by_key=False) if mask.sparse else None
    diagonal = hi

    mem = memory.active()
    B, H, n_q, n_k, d = shp.B, shp.H, shp.N_q, shp.N_k, shp.d
    bh = B * H
    smem = tiling.smem_bytes(kernel_name, tile_d)
    grid, threads = (tiling.Tr(n_q), bh), tiling.threads_for(kernel_name)
    if algorithm == FP16X3:
        return _fp16x3_forward(mem, q, k, v, shp, tiling, mask, hi, lo, scale, drop, lists,
                               key, return_lse, return_dropout_mask)
    if algorithm == "fa2" and memory.torch_fast_path(mem, q, k, v):
        B, H, n_q, d = shp.B, shp.H, shp.N_q, shp.d
        planned, seed = plans.planned_dropout(drop)
        plan = _OnTensors(_forward_launches(shp, tiling, mask, hi, lo, scale, grid, threads, smem, planned,
                                            _tensor_lists(lists, q)),
                          [((B, H, n_q, d), None), ((B, H, n_q), "float32")], (0, 1) if return_lse else 0,
                          aligned=3, d=d)
        out = plans.remember(key, plan)(q, k, v, scalars=seed)
        return _with_mask(out, return_dropout_mask, mem, shp, drop, q)
    Q, K, V = _inputs(mem, shp, Q=q, K=k, V=v)
    O = mem.output((B, H, n_q, d), np.uint16 if shp.half else F32, "O", like=q)
    L = mem.output((B, H, n_q), F32, "L", like=q)
    if algorithm == "fa2":   # the tensor-core kernels take flat views (see their factories)
        args = tuple(x.reshape(x.size) for x in (Q, K, V, O, L))
        _forward_launches(shp, tiling, mask, hi, lo, scale, grid, threads, smem, drop,
                          _device_lists(lists))(
            launch, d % 8 == 0 and _aligned16(Q, K, V), *args)
    elif algorithm == "fa2_fma":
        launch(make_flash_forward_fa2(tiling, d, causal), grid, threads, smem,
               *_flat_forward(Q, K, V, O, L, n_q, n_k, d), F32(scale * LOG2E), n_q, n_k, diagonal)
    else:
        l_ws = mem.output((bh, n_q), F32, "l", like=q)
        m_ws = mem.output((bh, n_q), F32, "m", like=q)
        kernel = make_flash_forward_alg1(tiling, d, causal, shp.precision)
        launch(kernel, (bh,), tiling.threads, smem, *_flat_forward(Q, K, V, O, L, n_q, n_k, d),
               l_ws, m_ws, scale, n_q, n_k, diagonal)
    o = precision.as_format(mem.result(O, shp.on_host), shp.precision)
    out = (o, mem.result(L, shp.on_host)) if return_lse else o
    return _with_mask(out, return_dropout_mask, mem, shp, drop, q)


def _fp16x3_forward(mem, q, k, v, shp, tiling, mask, hi, lo, scale, drop, lists, key, return_lse,
                    return_dropout_mask):
    """``flash_attention``'s "fa2_fp16x3": the heads' maxima, the fp16 parts of q, k, v
    (workspaces as large as q, k and v), the fp16 kernel on them (``fp16x3.forward_launches``)."""
    B, H, n_q, n_k, d = shp.B, shp.H, shp.N_q, shp.N_k, shp.d
    bh, bh_kv = B * H, B * (H // shp.group)
    fp16x3.check_heads(bh, bh_kv)
    launches = fp16x3.forward_launches(tiling, d, mask, bh, bh_kv, n_q, n_k)
    spaces = fp16x3.workspaces(bh, bh_kv, n_q, n_k, d)
    qscale = F32(scale * LOG2E)
    if memory.torch_fast_path(mem, q, k, v):
        planned, seed = plans.planned_dropout(drop)

        def on_tensors(run, vector, *arrays):
            launches(run, *arrays, qscale, hi, lo, planned, _tensor_lists(lists, q))
        outputs = [((B, H, n_q, d), None), ((B, H, n_q), "float32")] + _plan_workspaces(spaces)
        plan = _OnTensors(on_tensors, outputs, (0, 1) if return_lse else 0, aligned=3, d=d)
        out = plans.remember(key, plan)(q, k, v, scalars=seed)
        return _with_mask(out, return_dropout_mask, mem, shp, drop, q)
    Q, K, V = _inputs(mem, shp, Q=q, K=k, V=v)
    O = mem.output((B, H, n_q, d), F32, "O", like=q)
    L = mem.output((B, H, n_q), F32, "L", like=q)
    work = _workspaces(mem, spaces)
    launches(launch, *(x.reshape(x.size) for x in (Q, K, V, O, L)), *work, qscale, hi, lo, drop,
             _device_lists(lists))
    o = mem.result(O, shp.on_host)
    out = (o, mem.result(L, shp.on_host)) if return_lse else o
    return _with_mask(out, return_dropout_mask, mem, shp, drop, q)


def _seed_key(p, seed):
    """What a launch plan's key takes of ``dropout_seed``: with dropout_p > 0 only its type (the
    seed's words are scalars each call passes: ``plans.planned_dropout``), else the seed."""
    return type(seed) if p else seed


def _seed_words(p, seed) -> tuple:
    """The seed's words a replayed call passes (``checks.dropout``, which checks the seed as a
    checked call does), none without dropout."""
    return checks.dropout(p, seed)[:2] if p else ()


def _plan_workspaces(spaces: dict) -> list:
    """fa2_fp16x3's workspaces (``fp16x3.workspaces`` / ``backward_workspaces``) as outputs of
    a torch plan (``_OnTensors``) that are not returned: fp16 bits as float16."""
    return [((n,), "float32" if t == np.float32 else "float16") for n, t in spaces.values()]


def _workspaces(mem, spaces: dict) -> list:
    """fa2_fp16x3's workspaces as ``mem``'s outputs (numba arrays), in their order."""
    return [mem.output((n,), t, name) for name, (n, t) in spaces.items()]


def _dropout_kernels(mask, algorithm, shp) -> None:
    """Raise where dropout is asked of kernels that have none yet (before any launch)."""
    if mask.dropout and algorithm not in ("fa2", FP16X3):
        raise NotImplementedError(
            f"dropout_p > 0 runs on algorithm='fa2' so far (got algorithm={algorithm!r}): pass "
            "it, or dropout_p=0")


def _with_mask(out, wanted, mem, shp, drop, like):
    """``out`` with the dropout mask appended when ``wanted`` (``make_dropout_mask``: the
    kernels' own mask; all kept without dropout)."""
    if not wanted:
        return out
    keep = mem.output((shp.B * shp.H * shp.N_q * shp.N_k,), np.uint8, "dropout_mask", like=like)
    seed_lo, seed_hi, keep_from, _ = drop
    threads, blocks = _convert_grid(keep.size)
    launch(make_dropout_mask(), blocks, threads, 0, keep, shp.N_q, shp.N_k, seed_lo, seed_hi, keep_from)
    keep = mem.result(keep, shp.on_host)
    keep = keep.reshape(shp.B, shp.H, shp.N_q, shp.N_k)
    keep = keep.astype(bool) if isinstance(keep, np.ndarray) else keep.bool() if hasattr(keep, "bool") else keep
    return (*out, keep) if isinstance(out, tuple) else (out, keep)


def _forward_kernel_fa2(tiling, d, mask, shp, vector):
    """The "fa2" forward kernel for the inputs' format and ``mask`` (a ``simulator.spec.Mask``)."""
    if shp.half:
        return make_flash_forward_half(tiling, d, mask, shp.precision, vector)
    return make_flash_forward_fa2_tc(tiling, d, mask)


def _forward_launches(shp, tiling, mask, hi, lo, scale, grid, threads, smem, drop, blocks):
    """The "fa2" forward's launch as ``launches(run, vector, q, k, v, o, lse)`` on flat arrays
    (``vector``: 16-byte aligned q, k, v of d a multiple of 8, for the half kernels' 16-byte
    loads), through ``run(kernel, grid, threads, smem, *args)``; ``drop``: the kernels' dropout
    arguments (``checks.dropout``), ``blocks`` their block lists (``_device_lists`` or
    ``_tensor_lists``)."""
    def launches(run, vector, q, k, v, o, lse):
        # (the half kernel's last argument, read only in its fp32 mode (fp16x3), is unread)
        run(_forward_kernel_fa2(tiling, shp.d, mask, shp, vector), grid, threads, smem,
            q, k, v, o, lse, F32(scale * LOG2E), shp.N_q, shp.N_k, hi, lo, *drop, *blocks,
            *blocks[:1] if shp.half else ())
    return launches


def _device_lists(lists) -> tuple:
    """The block-sparse kernels' (ptr, idx) (``checks.block_lists``) as numba device arrays, or
    for None (no block mask) their unread stand-ins: one int64 zero on the current device,
    made once a device. Not tensors of the traffic contract: like the scalar arguments, never
    routed through ``memory`` (nor counted)."""
    if lists is not None:
        return tuple(cuda.to_device(x) for x in lists)
    device = 0 if memory.simulator_enabled() else cuda.get_current_device().id
    if ("numba", device) not in _NO_LISTS:
        zero = cuda.to_device(np.zeros(1, np.int64))
        _NO_LISTS["numba", device] = (zero, zero)
    return _NO_LISTS["numba", device]


def _tensor_lists(lists, like) -> tuple:
    """``_device_lists`` as torch int64 tensors on ``like``'s device, for the launches on
    tensors (``_OnTensors``: ``launch.launch_tensors`` and plans take tensors)."""
    torch = sys.modules["torch"]
    if lists is not None:
        return tuple(torch.as_tensor(x, device=like.device) for x in lists)
    if ("torch", like.device) not in _NO_LISTS:
        zero = torch.zeros(1, dtype=torch.int64, device=like.device)
        _NO_LISTS["torch", like.device] = (zero, zero)
    return _NO_LISTS["torch", like.device]


#: The unread block lists of each device, per array kind (``_device_lists``, ``_tensor_lists``).
_NO_LISTS: dict = {}


class _OnTensors:
    """``launches(run, vector, *inputs, *outputs)`` on torch CUDA tensors, outputs from torch's
    allocator (``outputs``: (shape, dtype name, or None for the inputs' dtype) each), returning
    the outputs ``returns`` picks (an index or a tuple of them). The arrays are flat (half
    precision as int16 patterns). The launches are recorded on the first call for each
    alignment of the first ``aligned`` inputs (``vector``) and replayed after (``plans.Replay``):
    a call's host work is then the output allocations and one packed launch per kernel."""

    def __init__(self, launches, outputs, returns, aligned: int, d: int):
        self._launches, self._outputs, self._returns = launches, outputs, returns
        self._aligned, self._vector_d = aligned, d % 8 == 0
        self._replays: dict[bool, plans.Replay] = {}

    def __call__(self, *inputs, scalars: tuple = ()):
        """The outputs of the launches on ``inputs`` and the call's ``scalars`` (dropout's seed
        words: ``plans.planned_dropout``)."""
        torch = sys.modules["torch"]
        like = inputs[0]
        outs = [torch.empty(shape, dtype=getattr(torch, dtype) if dtype else like.dtype,
                            device=like.device) for shape, dtype in self._outputs]
        vector = self._vector_d and plans.aligned16(*inputs[:self._aligned])
        replay = self._replays.get(vector)
        if replay is None:
            flat = [(x.view(torch.int16) if x.element_size() == 2 else x).view(-1)
                    for x in (*inputs, *outs)]
            self._replays[vector] = plans.Replay(
                lambda run, *arrays: self._launches(run, vector, *arrays), *flat, scalars=scalars)
        else:
            replay.replay(*(x.data_ptr() for x in inputs), *(x.data_ptr() for x in outs), scalars=scalars)
        r = self._returns
        return outs[r] if isinstance(r, int) else tuple(outs[i] for i in r)


def backward_kernels(algorithm: str, deterministic: bool, fmt: str = "float32") -> tuple[str, ...]:
    """The kernels (Tiling kernel names) ``flash_attention_backward`` launches on inputs of
    format ``fmt``, whose shared memory its tiling must fit: the algorithm's ("fa2" on
    half-precision inputs: its kernel in their format), or the FFMA pair when ``deterministic``
    (half-precision inputs widened to float32 for "fa2_fma" and ``deterministic``)."""
    if deterministic:
        return ("flash_backward", "flash_backward_dq")
    if fmt in precision.HALF and algorithm in HALF_BACKWARD_KERNELS:
        return (HALF_BACKWARD_KERNELS[algorithm],)
    return (BACKWARD_ALGORITHMS[algorithm],)


def _convert(mem, x, name, fmt, widen, like):
    """x (a device array of ``fmt``'s uint16 patterns, or of float32) converted to float32
    (``widen``) or to the patterns, as a new output ``name``."""
    out = mem.output(tuple(x.shape), F32 if widen else np.uint16, name, like=like)
    threads, blocks = _convert_grid(x.size)
    launch(make_convert(fmt, widen), blocks, threads, 0, x.reshape(x.size), out.reshape(out.size), x.size)
    return out


def _convert_grid(n: int) -> tuple[int, tuple]:
    """(threads, grid) of the grid-stride conversion kernel over n elements."""
    threads = 32 if memory.simulator_enabled() else CONVERT_THREADS
    return threads, (min(math.ceil(n / threads), 4 if memory.simulator_enabled() else CONVERT_SMS * CONVERT_BLOCKS_PER_SM),)


def _widened(mem, shp, like, **named):
    """The kernels' float32 arrays of the named inputs: as they are (float32), or half-precision
    inputs widened on the device, exactly (workspaces "Q (fp32)", ...)."""
    arrays = _inputs(mem, shp, **named)
    if not shp.half:
        return arrays
    return tuple(_convert(mem, x, f"{name} (fp32)", shp.precision, True, like)
                 for name, x in zip(named, arrays))


def _narrowed(mem, shp, like, **named):
    """What the caller gets for the named float32 results: themselves, or for half-precision
    inputs rounded to their format (outputs "dQ (float16)", ...)."""
    if shp.half:
        named = {name: _convert(mem, x, f"{name} ({shp.precision})", shp.precision, False, like)
                 for name, x in named.items()}
    return tuple(precision.as_format(mem.result(x, shp.on_host), shp.precision) for x in named.values())


def flash_attention_backward(do, q, k, v, o, lse, *, causal=False, softmax_scale=None,
                             tiling=None, deterministic=False, algorithm="fa2", diagonal=None,
                             window=None, dropout_p=0.0, dropout_seed=None, block_mask=None,
                             block_size=checks.BLOCK_SIZE, key_padding_mask=None, kv_split=None):
    """Gradients (dq, dk, dv) of ``flash_attention`` from the saved o and lse (but see
    ``deterministic``; ``causal``,
    ``diagonal``, ``window``, ``dropout_p`` and ``dropout_seed`` as the forward's: the dropout
    mask is regenerated from the seed, the paper's Algorithm 4).

    do, q, o: (B, H, N_q, d); k, v: (B, H_kv, N_k, d) (H_kv = H, or a divisor of H for grouped
    K/V heads: dk, dv are then the sums over each K/V head's query heads; "fa2" without
    ``deterministic`` only, as windows); float32, float16 or bfloat16 (all the same);
    lse: (B, H, N_q) float32. P is recomputed from lse,
    never stored; a grid of K/V blocks accumulates dK, dV on chip. dQ is accumulated with fp32
    atomics (run-to-run bit differences possible) unless ``deterministic``, which computes dQ
    in a second kernel that owns each Q tile, and first runs the FFMA forward again (o and lse
    are then not read): P is recomputed in plain fp32 from Q K^T, and a P from the tensor-core
    forward's L (whose S differs in its last bits) no longer sums to 1 -- at logits x30 the
    gradients' error grew to 4-21x a plain fp32 implementation's (H200, 2026-12-04:
    results/h200/verification/deterministic_checks_2026-12-04.log); with its own forward's O and
    L, 0.6-1.5x. It costs that forward's time and an fp32 O and L of workspace.
    ``algorithm="fa2"``: the products on tensor cores, TF32 mma with the 3xTF32 split (errors at
    fp32 level, not bitwise fp32); ``"fa2_fma"``: plain fp32 FFMA arithmetic; ``"fa2_fp16x3"``
    (float32 inputs, after the forward of that name): the fp16 tensor cores on fp16 parts of
    q, k, v (as that forward made them, so S is recomputed exactly as its lse was taken) and of
    dO, three fp16 products a product (``numba_flash.fp16x3``, kernels/flash_backward_half.py;
    about 2.5x "fa2"'s speed; gradients within flash-attention's rule; its own default tiling;
    unsplit: ``kv_split`` None or 1).
    ``deterministic=True`` runs the FFMA kernels whatever the algorithm.
    float16 / bfloat16 inputs, "fa2": tensor cores in that format (mma m16n8k16, fp32 sums; P
    and dS rounded to the format for their products, as FlashAttention-2), dq accumulated in an
    fp32 workspace and rounded once; with "fa2_fma" or ``deterministic`` the inputs are widened
    to float32 on the device (exactly) for the FFMA kernels and the gradients rounded once.
    ``tiling``: a ``Tiling(Br, Bc)`` ("fa2" without ``deterministic``: Br and Bc multiples of
    16, Bc up to 512); default the fastest measured on the H200 for the inputs' format, smaller
    where the head dim needs more shared memory.
    ``block_mask``, ``block_size``: the forward's (block-sparse; "fa2" without
    ``deterministic``): each K/V block visits only the row blocks the mask keeps.
    ``key_padding_mask``: the forward's; dk, dv of padding keys are 0.
    ``kv_split`` (grouped K/V heads): run the kernel on k, v repeated ``kv_split`` times per
    head, each copy's block looping over 1/kv_split of the group's query heads, and sum the
    partial dk, dv (summed in fp32, rounded to the inputs' format: in fp16 / bf16 each partial
    is itself rounded by the kernel): a divisor of the group; None picks the split of the
    shortest launch by the cost model (``simulator.kv_split``; MQA at B = 1 runs a block per K/V
    block otherwise), 1 runs unsplit. NumPy and torch inputs only; other device arrays run
    unsplit (None) or raise (kv_split > 1).
    """
    if key_padding_mask is not None:
        from . import padding
        return padding.backward(do, q, k, v, o, lse, key_padding_mask, causal=causal, window=window,
                                diagonal=diagonal, dropout_p=dropout_p, dropout_seed=dropout_seed,
                                block_mask=block_mask, softmax_scale=softmax_scale, tiling=tiling,
                                deterministic=deterministic, algorithm=algorithm,
                                kv_split=kv_split)
    blocks_key = checks.block_mask_key(block_mask)
    key = None if blocks_key is checks.UNKEYED else plans.key(
        "backward", (do, q, k, v, o, lse), (causal, softmax_scale, tiling, deterministic, algorithm,
                                           diagonal, window, dropout_p, _seed_key(dropout_p, dropout_seed),
                                           blocks_key, block_size, kv_split))
    plan = plans.get(key)
    if plan is not None:
        return plan(do, q, k, v, o, lse, scalars=_seed_words(dropout_p, dropout_seed))
    if not isinstance(algorithm, str) or algorithm not in BACKWARD_ALGORITHMS:
        raise ValueError(f"algorithm must be one of {sorted(BACKWARD_ALGORITHMS)}, got {algorithm!r}")
    shp = checks.backward_shapes(do, q, k, v, o, "lse", lse, lambda s: (s.B, s.H, s.N_q),
                                 grouped=True)
    causal = checks.flag("causal", causal)
    band, hi, lo = checks.band(causal, window, diagonal, shp.N_q, shp.N_k)
    drop = checks.dropout(dropout_p, dropout_seed)
    on, block_size = checks.block_mask(block_mask, block_size, shp.N_q, shp.N_k)
    mask = Mask(band.upper, band.lower, shp.group, dropout=drop != checks.NO_DROPOUT,
                sparse=on is not None)
    deterministic = checks.flag("deterministic", deterministic)
    scale = checks.softmax_scale(softmax_scale, shp.d)
    if algorithm == FP16X3 and not deterministic:
        return _fp16x3_backward(mem_key=key, do=do, q=q, k=k, v=v, o=o, lse=lse, shp=shp,
                                tiling=tiling, mask=mask, hi=hi, lo=lo, scale=scale, drop=drop,
                                on=on, block_size=block_size, causal=causal, window=window,
                                diagonal=diagonal, kv_split=kv_split)
    kernels = backward_kernels(algorithm, deterministic, shp.precision)
    if kernels not in (("flash_backward_tc",), ("flash_backward_half",)) and needs_band_kernels(
            mask, causal):
        raise ValueError(f"algorithm={algorithm!r}, deterministic={deterministic} has no sliding "
                         "window, grouped K/V heads nor block mask: pass algorithm='fa2', "
                         "deterministic=False (or window=None, block_mask=None and k, v with q's "
                         "heads)")
    if mask.dropout and kernels not in (("flash_backward_tc",), ("flash_backward_half",)):
        raise NotImplementedError(
            f"dropout_p > 0 runs on algorithm='fa2', deterministic=False so far (got algorithm="
            f"{algorithm!r}, deterministic={deterministic})")
    tiling = checks.tiling_for(tiling, kernels, shp.d, shp.N_q, shp.N_k, mask.dropout, block_size)
    lists = checks.block_lists(on, block_size, tiling, shp.N_q, shp.N_k, causal, window, diagonal,
                               by_key=True) if mask.sparse else None
    split = _kv_split(kv_split, kernels, shp, tiling, causal, window, diagonal, on, block_size,
                      (do, q, k, v, o, lse))
    if split > 1:
        options = dict(causal=causal, softmax_scale=softmax_scale, tiling=tiling,
                       deterministic=deterministic, algorithm=algorithm, diagonal=diagonal,
                       window=window, dropout_p=dropout_p,
                       dropout_seed=dropout_seed, block_mask=block_mask, block_size=block_size)
        return plans.remember(None if mask.dropout else key, _SplitBackward(split, options))(
            do, q, k, v, o, lse)
    diagonal = hi

    mem = memory.active()
    B, H, n_q, n_k, d = shp.B, shp.H, shp.N_q, shp.N_k, shp.d
    bh, h_kv = B * H, H // mask.group
    tc = kernels in (("flash_backward_tc",), ("flash_backward_half",))
    if tc and memory.torch_fast_path(mem, do, q, k, v, o, lse):
        # (inputs do, q, k, v, o, lse; outputs dq, dk, dv, then the fp32 workspaces)
        workspaces = [((bh * n_q,), "float32")] + ([((bh * n_q * d,), "float32")] if shp.half else [])
        planned, seed = plans.planned_dropout(drop)
        plan = _OnTensors(_backward_tc_launches(shp, tiling, mask, hi, lo, scale, planned,
                                                _tensor_lists(lists, q)),
                          [(tuple(x.shape), None) for x in (q, k, v)] + workspaces, (0, 1, 2),
                          aligned=4, d=d)
        return plans.remember(key, plan)(do, q, k, v, o, lse, scalars=seed)
    if kernels == ("flash_backward_half",):
        return _backward_half(mem, do, q, k, v, o, lse, shp, tiling, mask, hi, lo, scale, drop,
                              _device_lists(lists))
    if deterministic:    # o and lse are not read: see the docstring
        dO, Q, K, V = _widened(mem, shp, q, dO=do, Q=q, K=k, V=v)
        O, L = _recomputed_forward(mem, Q, K, V, shp, causal, scale, diagonal, q)
    else:
        dO, Q, K, V, O = _widened(mem, shp, q, dO=do, Q=q, K=k, V=v, O=o)
        L = mem.input(lse, "L")
    dQ = mem.output((B, H, n_q, d), F32, "dQ", like=q)
    dK = mem.output((B, h_kv, n_k, d), F32, "dK", like=q)
    dV = mem.output((B, h_kv, n_k, d), F32, "dV", like=q)
    D = mem.output((bh, n_q), F32, "D", like=q)
    if kernels == ("flash_backward_tc",):   # takes flat views, as the tensor-core forward
        _backward_tc_launches(shp, tiling, mask, hi, lo, scale, drop, _device_lists(lists))(
            launch, False, *(x.reshape(x.size) for x in (dO, Q, K, V, O, L, dQ, dK, dV, D)))
        return _narrowed(mem, shp, q, dQ=dQ, dK=dK, dV=dV)
    fq, fk, fv = _flat(Q, n_q, d), _flat(K, n_k, d), _flat(V, n_k, d)
    fdo, fl, fdq = _flat(dO, n_q, d), _flat(L, n_q), _flat(dQ, n_q, d)
    qscale = F32(scale * LOG2E)
    row_dot, grid, threads = _row_dot(d, not deterministic, n_q, bh)
    launch(row_dot, grid, threads, 0, *(x.reshape(x.size) for x in (dO, O, D, dQ)), n_q)
    kv = make_flash_backward_kv(tiling, d, causal, not deterministic)
    launch(kv, (tiling.Tc(n_k), bh), tiling.threads, tiling.smem_bytes("flash_backward", d),
           fq, fk, fv, fdo, fl, D, fdq, _flat(dK, n_k, d), _flat(dV, n_k, d), scale, qscale,
           n_q, n_k, diagonal)
    if deterministic:
        dq_kernel = make_flash_backward_dq(tiling, d, causal)
        launch(dq_kernel, (tiling.Tr(n_q), bh), tiling.threads,
               tiling.smem_bytes("flash_backward_dq", d),
               fq, fk, fv, fdo, fl, D, fdq, scale, qscale, n_q, n_k, diagonal)
    return _narrowed(mem, shp, q, dQ=dQ, dK=dK, dV=dV)


def _fp16x3_backward(mem_key, do, q, k, v, o, lse, shp, tiling, mask, hi, lo, scale, drop, on,
                     block_size, causal, window, diagonal, kv_split):
    """``flash_attention_backward``'s "fa2_fp16x3": the fp16 parts of q, k, v (as the forward
    made them: its S is recomputed exactly) and of dO, D = rowsum(dO * O), and the fp16 backward
    in its fp32 mode on them (``fp16x3.backward_launches``; dq summed by fp32 atomics)."""
    if shp.half:
        raise ValueError(f"algorithm={FP16X3!r} takes float32 inputs (it splits each into two fp16 "
                         f"parts), got {shp.precision}: pass algorithm='fa2' for half-precision inputs")
    if kv_split not in (None, 1):
        raise ValueError(f"algorithm={FP16X3!r} runs unsplit: pass kv_split=None or 1, got {kv_split!r}")
    B, H, n_q, n_k, d = shp.B, shp.H, shp.N_q, shp.N_k, shp.d
    bh, bh_kv = B * H, B * (H // shp.group)
    fp16x3.check_heads(bh, bh_kv)
    if tiling is None:
        tiling = fp16x3.backward_default_tiling(d, n_q, n_k, mask.dropout,
                                                block_size if mask.sparse else None)
    if isinstance(tiling, Tiling):   # (its tiles' own sizes first: rows of 2 D16 parts, dS^T twice)
        fp16x3.check_backward_fits(tiling, d, checks.smem_limit_bytes())
    tiling = checks.tiling_for(tiling, ("flash_backward_half",), fp16x3.parts_width(d), n_q, n_k,
                               mask.dropout, block_size if mask.sparse else None)
    lists = checks.block_lists(on, block_size, tiling, n_q, n_k, causal, window, diagonal,
                               by_key=True) if mask.sparse else None
    row_dot = _row_dot(d, True, n_q, bh)
    launches = fp16x3.backward_launches(tiling, d, mask, bh, bh_kv, n_q, n_k, row_dot)
    spaces = fp16x3.backward_workspaces(bh, bh_kv, n_q, n_k, d)
    qscale = F32(scale * LOG2E)
    mem = memory.active()
    if memory.torch_fast_path(mem, do, q, k, v, o, lse):
        planned, seed = plans.planned_dropout(drop)

        def on_tensors(run, vector, *arrays):
            launches(run, *arrays, scale, qscale, hi, lo, planned, _tensor_lists(lists, q))
        outputs = [(tuple(x.shape), None) for x in (q, k, v)] + _plan_workspaces(spaces)
        plan = _OnTensors(on_tensors, outputs, (0, 1, 2), aligned=4, d=d)
        return plans.remember(mem_key, plan)(do, q, k, v, o, lse, scalars=seed)
    dO, Q, K, V, O = _inputs(mem, shp, dO=do, Q=q, K=k, V=v, O=o)
    L = mem.input(lse, "L")
    dQ = mem.output((B, H, n_q, d), F32, "dQ", like=q)
    dK = mem.output((B, H // shp.group, n_k, d), F32, "dK", like=q)
    dV = mem.output((B, H // shp.group, n_k, d), F32, "dV", like=q)
    work = _workspaces(mem, spaces)
    launches(launch, *(x.reshape(x.size) for x in (dO, Q, K, V, O, L, dQ, dK, dV)), *work, scale,
             qscale, hi, lo, drop, _device_lists(lists))
    return tuple(mem.result(x, shp.on_host) for x in (dQ, dK, dV))


def _recomputed_forward(mem, Q, K, V, shp, causal, scale, diagonal, like):
    """(O, L) of the FFMA forward on the float32 Q, K, V, as the workspaces "O (recomputed)" and
    "L (recomputed)": the deterministic backward's S = Q K^T in plain fp32 is then the one its L
    was taken from, bit for bit, so that P = exp(S - L) sums to 1 and D = rowsum(dO * O) is
    that P's."""
    B, H, n_q, n_k, d = shp.B, shp.H, shp.N_q, shp.N_k, shp.d
    tiling = recompute_tiling(d, checks.smem_limit_bytes())      # this device's
    O = mem.output((B, H, n_q, d), F32, "O (recomputed)", like=like)
    L = mem.output((B, H, n_q), F32, "L (recomputed)", like=like)
    launch(make_flash_forward_fa2(tiling, d, causal), (tiling.Tr(n_q), B * H),
           tiling.threads_for(RECOMPUTE_KERNEL), tiling.smem_bytes(RECOMPUTE_KERNEL, d),
           *_flat_forward(Q, K, V, O, L, n_q, n_k, d), F32(scale * LOG2E), n_q, n_k, diagonal)
    return O, L


def _kv_split(value, kernels, shp, tiling, causal, window, diagonal, on, block_size, inputs) -> int:
    """The backward's split of each K/V head's query heads (``kv_split``): checked, or chosen
    (None) by ``simulator.predict.kv_split_of`` on this device's SMs (1 for kernels other than
    its ``SPLIT_ALGORITHMS``); 1 without grouped K/V heads."""
    value = checked_kv_split(value, shp.group)
    if shp.group == 1 or value == 1:
        return 1
    splittable = all(split_calls.splittable(x) for x in inputs)
    if value is not None:
        if not splittable:
            raise ValueError(f"kv_split={value} repeats k and v, which needs NumPy arrays or torch "
                             "tensors; pass kv_split=None or 1 for other device arrays")
        return value
    if not splittable:
        return 1
    blocks = {} if on is None else dict(block_mask=on, block_size=block_size)
    workload = Workload(shp.B, shp.H, shp.N_q, shp.N_k, shp.d, 2 if shp.half else 4, causal,
                        None if diagonal is None else int(diagonal),
                        None if window is None else tuple(int(x) for x in window),
                        shp.H // shp.group, **blocks)
    hardware = H200 if memory.simulator_enabled() else dataclasses.replace(
        H200, sm_count=cuda.get_current_device().MULTIPROCESSOR_COUNT)
    return kv_split_of(kernels[0], workload, tiling, hardware)


class _SplitBackward:
    """``flash_attention_backward`` split ``s`` ways (``kv_split``): k, v repeated s times per
    head, the unsplit call's kernels on them, the partial dk, dv summed per head."""

    def __init__(self, s: int, options: dict):
        self.s, self.options = s, options

    def __call__(self, do, q, k, v, o, lse, scalars: tuple = ()):
        """(``scalars``: always empty: a split call with dropout is kept as no plan, its
        options holding the seed.)"""
        k_split, v_split = (split_calls.repeat_heads(x, self.s) for x in (k, v))
        dq, dk, dv = flash_attention_backward(do, q, k_split, v_split, o, lse, kv_split=1,
                                              **self.options)
        return dq, split_calls.sum_heads(dk, self.s), split_calls.sum_heads(dv, self.s)


def _backward_tc_launches(shp, tiling, mask, hi, lo, scale, drop, lists):
    """The tensor-core backward's launches ("flash_backward_tc" in fp32, "flash_backward_half" in
    the half formats) as ``launches(run, vector, do, q, k, v, o, lse, dq, dk, dv, D[, dQacc])``
    on flat arrays, through ``run(kernel, grid, threads, smem, *args)``: D = rowsum(dO * O) with
    dQ (fp32: dq itself; half: the workspace dQacc) zeroed; the kernel (a block per K/V block
    of a K/V head); in half precision dq = dQacc rounded to the format. ``vector``: 16-byte
    aligned do, q, k, v of d a multiple of 8 (the half kernel's 16-byte loads). ``drop``: the
    kernels' dropout arguments (``checks.dropout``), ``lists`` their block lists (``_device_lists`` or ``_tensor_lists``)."""
    n_q, n_k, d, bh = shp.N_q, shp.N_k, shp.d, shp.B * shp.H
    grid = (tiling.Tc(n_k), bh // mask.group)
    scalars = (F32(scale), F32(scale * LOG2E), n_q, n_k, hi, lo)

    def launches(run, vector, do, q, k, v, o, lse, dq, dk, dv, D, dQacc=None):
        row_dot, rows, threads = _row_dot(d, True, n_q, bh, shp.precision)
        if not shp.half:
            run(row_dot, rows, threads, 0, do, o, D, dq, n_q)
            run(make_flash_backward_tc(tiling, d, mask), grid, tiling.threads_for("flash_backward_tc"),
                tiling.smem_bytes("flash_backward_tc", d), q, k, v, do, lse, D, dq, dk, dv, *scalars,
                *drop, *lists)
            return
        run(row_dot, rows, threads, 0, do, o, D, dQacc, n_q)
        run(make_flash_backward_half(tiling, d, mask, shp.precision, vector), grid,
            tiling.threads_for("flash_backward_half"), tiling.smem_bytes("flash_backward_half", d),
            q, k, v, do, lse, D, dQacc, dk, dv, *scalars, *drop, *lists, *lists[:1] * 2)
        threads, blocks = _convert_grid(bh * n_q * d)
        run(make_convert(shp.precision, False), blocks, threads, 0, dQacc, dq, bh * n_q * d)
    return launches


def _backward_half(mem, do, q, k, v, o, lse, shp, tiling, mask, hi, lo, scale, drop, lists):
    """``flash_attention_backward`` on tensor cores in the inputs' half format: dq accumulated
    in an fp32 workspace ("dQ_accum", as flash-attention's dq_accum) and rounded once."""
    B, H, n_q, n_k, d = shp.B, shp.H, shp.N_q, shp.N_k, shp.d
    dO, Q, K, V, O = _inputs(mem, shp, dO=do, Q=q, K=k, V=v, O=o)
    L = mem.input(lse, "L")
    dQacc = mem.output((B, H, n_q, d), F32, "dQ_accum", like=q)
    D = mem.output((B * H, n_q), F32, "D", like=q)
    dQ = mem.output((B, H, n_q, d), np.uint16, "dQ", like=q)
    dK = mem.output((B, H // mask.group, n_k, d), np.uint16, "dK", like=q)
    dV = mem.output((B, H // mask.group, n_k, d), np.uint16, "dV", like=q)
    vector = d % 8 == 0 and _aligned16(dO, Q, K, V)
    _backward_tc_launches(shp, tiling, mask, hi, lo, scale, drop, lists)(
        launch, vector, *(x.reshape(x.size) for x in (dO, Q, K, V, O, L, dQ, dK, dV, D, dQacc)))
    return tuple(precision.as_format(mem.result(x, shp.on_host), shp.precision) for x in (dQ, dK, dV))


def _matmul(tiling, fmt, a, b, c, alpha, m, n, kdim, bh, trans_a=False, trans_b=False):
    """c = alpha opA(a) opB(b) per batch-head (``make_matmul``), a, b, c stored as ``fmt``."""
    kernel = make_matmul(tiling, trans_a, trans_b, fmt)
    grid = (math.ceil(n / tiling.Bc), math.ceil(m / tiling.Br), bh)
    launch(kernel, grid, tiling.threads, tiling.smem_bytes("standard_matmul", 0),
           a, b, c, F32(alpha), m, n, kdim)


def standard_attention(q, k, v, *, causal=False, softmax_scale=None, return_probs=False,
                       tiling=None, diagonal=None):
    """Standard attention, materialising S and P in HBM (the paper's baseline).

    q: (B, H, N_q, d); k, v: (B, H, N_k, d), float32, float16 or bfloat16. Returns o (B, H, N_q,
    d), or (o, p) with ``return_probs``, p: (B, H, N_q, N_k), in the inputs' format. Every
    tensor in HBM -- q, k, v, S, P, o -- is in the inputs' format, as a plain same-format
    implementation stores them: half-precision kernels sum and take the softmax in fp32 and
    round each result to the format as they store it (S = scale q k^T, P, o = P v). ``tiling``
    sets the matmuls' output tiles; ``causal`` and ``diagonal`` as in ``flash_attention``.
    """
    shp = checks.attention_shapes(q, k, v)
    causal = checks.flag("causal", causal)
    diagonal = checks.diagonal(diagonal, causal, shp.N_q, shp.N_k)
    checks.flag("return_probs", return_probs)
    scale = checks.softmax_scale(softmax_scale, shp.d)
    tiling = checks.tiling_for(tiling, ("standard_matmul",), shp.d)

    mem = memory.active()
    B, H, n_q, n_k, d = shp.B, shp.H, shp.N_q, shp.N_k, shp.d
    bh = B * H
    fmt, stored = shp.precision, np.uint16 if shp.half else F32
    Q, K, V = _inputs(mem, shp, Q=q, K=k, V=v)
    S = mem.output((bh, n_q, n_k), stored, "S", like=q)
    P = mem.output((B, H, n_q, n_k), stored, "P", like=q)
    O = mem.output((B, H, n_q, d), stored, "O", like=q)
    fp = _flat(P, n_q, n_k)
    _matmul(tiling, fmt, _flat(Q, n_q, d), _flat(K, n_k, d), S, scale, n_q, n_k, d, bh, trans_b=True)
    threads = _row_threads()
    launch(make_softmax(threads, causal, fmt), (n_q, bh), threads, 0, S.reshape(S.size), P.reshape(P.size),
           n_k, diagonal)
    _matmul(tiling, fmt, fp, _flat(V, n_k, d), _flat(O, n_q, d), 1.0, n_q, d, n_k, bh)
    results = (O, P) if return_probs else (O,)
    results = tuple(precision.as_format(mem.result(x, shp.on_host), fmt) for x in results)
    return results if return_probs else results[0]


def standard_attention_backward(do, q, k, v, o, p, *, causal=False, softmax_scale=None,
                                tiling=None):
    """Gradients (dq, dk, dv) of standard attention from the saved P (the paper's Algorithm 3).

    do, q, o: (B, H, N_q, d); k, v: (B, H, N_k, d); p: (B, H, N_q, N_k); all in one format,
    float32, float16 or bfloat16. Returns (dq, dk, dv) in that format. Every product and dS is
    stored in HBM in the format (dV = P^T dO, dP = dO V^T, dS = P (dP - D), dQ = scale dS K,
    dK = scale dS^T Q; sums in fp32, each result rounded once); D = rowsum(dO * o) is fp32 in
    HBM, rounded to the format, as dP is, where dS takes dP - D. ``causal`` is accepted for symmetry with the forward: the mask is already in p (masked
    entries are 0).
    """
    shp = checks.backward_shapes(do, q, k, v, o, "p", p, lambda s: (s.B, s.H, s.N_q, s.N_k))
    checks.flag("causal", causal)
    scale = checks.softmax_scale(softmax_scale, shp.d)
    tiling = checks.tiling_for(tiling, ("standard_matmul",), shp.d)

    mem = memory.active()
    B, H, n_q, n_k, d = shp.B, shp.H, shp.N_q, shp.N_k, shp.d
    bh = B * H
    fmt, stored = shp.precision, np.uint16 if shp.half else F32
    dO, Q, K, V, O, P = _inputs(mem, shp, dO=do, Q=q, K=k, V=v, O=o, P=p)
    dQ = mem.output((B, H, n_q, d), stored, "dQ", like=q)
    dK = mem.output((B, H, n_k, d), stored, "dK", like=q)
    dV = mem.output((B, H, n_k, d), stored, "dV", like=q)
    dP = mem.output((bh, n_q, n_k), stored, "dP", like=q)
    dS = mem.output((bh, n_q, n_k), stored, "dS", like=q)
    D = mem.output((bh, n_q), F32, "D", like=q)
    fq, fk, fv, fdo = _flat(Q, n_q, d), _flat(K, n_k, d), _flat(V, n_k, d), _flat(dO, n_q, d)
    fp = _flat(P, n_q, n_k)

    _matmul(tiling, fmt, fp, fdo, _flat(dV, n_k, d), 1.0, n_k, d, n_q, bh, trans_a=True)
    _matmul(tiling, fmt, fdo, fv, dP, 1.0, n_q, n_k, d, bh, trans_b=True)
    row_dot, grid, threads = _row_dot(d, False, n_q, bh, fmt)
    launch(row_dot, grid, threads, 0, *(x.reshape(x.size) for x in (dO, O, D, dQ)), n_q)
    threads = _row_threads()
    launch(make_ds(threads, fmt), (n_q, bh), threads, 0, fp, dP, D, dS, n_k)
    _matmul(tiling, fmt, dS, fk, _flat(dQ, n_q, d), scale, n_q, d, n_k, bh)
    _matmul(tiling, fmt, dS, fq, _flat(dK, n_k, d), scale, n_k, d, n_q, bh, trans_a=True)
    return tuple(precision.as_format(mem.result(x, shp.on_host), fmt) for x in (dQ, dK, dV))
