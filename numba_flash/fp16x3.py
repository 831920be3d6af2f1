"""fp32 attention on the fp16 tensor cores: three fp16 products a product (kernels/split_half.py
says how; kernels/flash_forward_half.py and flash_backward_half.py run it with
``dtype="float32"``).

``forward_launches`` lists the forward's launches for the API and the tools: the heads' maxima,
the split of q, k and v into fp16 parts, and the forward on those parts; ``backward_launches``
the backward's: the same parts of q, k and v (the forward's S recomputed from them exactly as it
made it), dO's, D = rowsum(dO * O), and the backward on the parts."""
from __future__ import annotations

import numpy as np

from simulator.fp16x3 import (backward_default_tiling, backward_smem_bytes, default_tiling,
                              parts_width, prep_launch, split_threads)
from simulator.spec import Mask
from simulator.tiling import Tiling

from .kernels.flash_backward_half import make_flash_backward_half
from .kernels.flash_forward_half import make_flash_forward_half
from .kernels.split_half import GX, make_head_amax, make_split_half
from .memory import simulator_enabled

#: ``flash_attention``'s algorithm name for it.
FP16X3 = "fa2_fp16x3"
#: Threads of a block of the two preparing kernels (split_half: whole rows of columns,
#: ``split_threads``), and blocks a head of split_half (grid-stride over the head's rows); under
#: the CUDA simulator, which runs a Python thread per CUDA thread, one warp and one block
#: (``simulator.fp16x3.prep_launch``, which the model counts).
PREP_THREADS, SPLIT_BLOCKS = prep_launch(simulator_enabled())


#: CUDA's largest grid y: the preparing kernels take a block row per head of q, k and v.
MAX_GRID_Y = 65535


def check_heads(bh: int, bh_kv: int) -> None:
    """Raise ValueError, before any launch, where the preparing kernels' grid (one row per
    head of q, k and v) would exceed CUDA's."""
    if bh + 2 * bh_kv > MAX_GRID_Y:
        raise ValueError(f"algorithm='fa2_fp16x3' takes at most {MAX_GRID_Y} heads of q, k and v "
                         f"together (B*H + 2*B*H_kv), got {bh + 2 * bh_kv}: split the batch")


def check_backward_fits(tiling: Tiling, d: int, limit_bytes: int) -> None:
    """Raise ValueError, naming ``tiling``, where the backward's tiles at head dim d (rows of
    fp16 parts, dS^T's two parts) exceed ``limit_bytes`` of shared memory a block."""
    need = backward_smem_bytes(tiling, d)
    if need > limit_bytes:
        raise ValueError(f"tiling={tiling!r} needs {need} bytes of shared memory for "
                         f"algorithm='fa2_fp16x3''s backward at d={d} (rows of fp16 hi and lo "
                         f"parts), more than the device's {limit_bytes} a block: choose smaller Br/Bc")


def smem_bytes(tiling: Tiling, d: int) -> int:
    """Dynamic shared memory of the forward at head dim d: the fp16 kernel's tiles two D16
    wide (hi and lo parts side by side)."""
    return tiling.smem_bytes("flash_forward_half", parts_width(d))


def workspaces(bh: int, bh_kv: int, n_q: int, n_k: int, d: int) -> dict:
    """Name -> (elements, dtype) of the buffers one call needs besides q, k, v, o, lse (in the
    order ``forward_launches`` takes them; the names are the model's, ``simulator.fp16x3``)."""
    W = parts_width(d)
    return {"head maxima": ((bh + 2 * bh_kv) * GX, np.float32),
            "Q parts": (bh * n_q * W, np.uint16), "K parts": (bh_kv * n_k * W, np.uint16),
            "V parts": (bh_kv * n_k * W, np.uint16)}


def _prepare(d: int):
    """``prepare(run, q, k, v, partial, qs, ks, vs, n_q, n_k, heads_q, heads_kv)``: the two
    preparing launches (the heads' maxima, then their fp16 parts) over ``heads_q`` heads of q
    and ``heads_kv`` of k and of v (the backward's dO: q = k = v = do, heads_kv = 0)."""
    split_block = split_threads(d, PREP_THREADS)
    amax, split = make_head_amax(PREP_THREADS), make_split_half(d, split_block)

    def prepare(run, q, k, v, partial, qs, ks, vs, n_q, n_k, heads_q, heads_kv):
        heads = heads_q + 2 * heads_kv
        run(amax, (GX, heads), PREP_THREADS, 0, q, k, v, partial, n_q, n_k, d, heads_q, heads_kv)
        run(split, (SPLIT_BLOCKS, heads), split_block, 0, q, k, v, partial, qs, ks, vs, n_q, n_k,
            heads_q, heads_kv)
    return prepare


def forward_launches(tiling: Tiling, d: int, mask: Mask, bh: int, bh_kv: int, n_q: int, n_k: int):
    """``launches(run, q, k, v, o, lse, partial, qs, ks, vs, qscale, hi, lo, drop, blocks)`` on
    flat arrays (q float32 (bh, n_q, d), k, v (bh_kv, n_k, d); o float32 like q, lse (bh, n_q);
    the workspaces as ``workspaces`` gives them), through ``run(kernel, grid, threads, smem,
    *args)``; ``drop`` the dropout arguments (``checks.dropout``), ``blocks`` the block lists
    (``api._device_lists``)."""
    forward = make_flash_forward_half(tiling, d, mask, "float32", True)
    grid = (tiling.Tr(n_q), bh)
    threads = tiling.threads_for("flash_forward_half")
    smem = smem_bytes(tiling, d)
    prepare = _prepare(d)

    def launches(run, q, k, v, o, lse, partial, qs, ks, vs, qscale, hi, lo, drop, blocks):
        prepare(run, q, k, v, partial, qs, ks, vs, n_q, n_k, bh, bh_kv)
        run(forward, grid, threads, smem, qs, ks, vs, o, lse,
            np.float32(qscale), n_q, n_k, hi, lo, *drop, *blocks, partial)
    return launches


def backward_workspaces(bh: int, bh_kv: int, n_q: int, n_k: int, d: int) -> dict:
    """Name -> (elements, dtype) of the buffers one backward call needs besides do, q, k, v, o,
    lse, dq, dk, dv (in the order ``backward_launches`` takes them)."""
    W = parts_width(d)
    return {**workspaces(bh, bh_kv, n_q, n_k, d), "dO maxima": (bh * GX, np.float32),
            "dO parts": (bh * n_q * W, np.uint16), "D": (bh * n_q, np.float32)}


def backward_launches(tiling: Tiling, d: int, mask: Mask, bh: int, bh_kv: int, n_q: int,
                      n_k: int, row_dot):
    """``launches(run, do, q, k, v, o, lse, dq, dk, dv, partial, qs, ks, vs, partial_do, dos, D,
    scale, qscale, hi, lo, drop, blocks)`` on flat float32 arrays (do, q, o, dq (bh, n_q, d); k,
    v, dk, dv (bh_kv, n_k, d); lse (bh, n_q)) and the workspaces as ``backward_workspaces``
    gives them, through ``run(kernel, grid, threads, smem, *args)``: the maxima and parts of q,
    k, v (as the forward makes them) and of dO, D = rowsum(dO * O) with dq zeroed
    (``row_dot``: the API's (kernel, grid, threads) of it), and the backward on the parts (a
    block per K/V block of a K/V head; dq summed by fp32 atomics)."""
    backward = make_flash_backward_half(tiling, d, mask, "float32", True)
    grid = (tiling.Tc(n_k), bh_kv)
    threads = tiling.threads_for("flash_backward_half")
    smem = backward_smem_bytes(tiling, d)
    prepare = _prepare(d)
    row_kernel, rows, row_threads = row_dot

    def launches(run, do, q, k, v, o, lse, dq, dk, dv, partial, qs, ks, vs, partial_do, dos, D,
                 scale, qscale, hi, lo, drop, blocks):
        prepare(run, q, k, v, partial, qs, ks, vs, n_q, n_k, bh, bh_kv)
        prepare(run, do, do, do, partial_do, dos, dos, dos, n_q, n_q, bh, 0)   # dO's heads alone
        run(row_kernel, rows, row_threads, 0, do, o, D, dq, n_q)
        run(backward, grid, threads, smem, qs, ks, vs, dos, lse, D, dq, dk, dv,
            np.float32(scale), np.float32(qscale), n_q, n_k, hi, lo, *drop, *blocks, partial,
            partial_do)
    return launches
