"""fp32 attention forward on the fp16 tensor cores: three fp16 products a product
(kernels/split_half.py says how, kernels/flash_forward_half.py runs it with ``dtype="float32"``).

``forward_launches`` lists the launches for the API and the tools: the heads' maxima, the split
of q, k and v into fp16 parts, and the forward on those parts."""
from __future__ import annotations

import numpy as np

from simulator.fp16x3 import default_tiling, parts_width, prep_launch, split_threads
from simulator.spec import Mask
from simulator.tiling import Tiling

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


def forward_launches(tiling: Tiling, d: int, mask: Mask, bh: int, bh_kv: int, n_q: int, n_k: int):
    """``launches(run, q, k, v, o, lse, partial, qs, ks, vs, qscale, hi, lo, drop, blocks)`` on
    flat arrays (q float32 (bh, n_q, d), k, v (bh_kv, n_k, d); o float32 like q, lse (bh, n_q);
    the workspaces as ``workspaces`` gives them), through ``run(kernel, grid, threads, smem,
    *args)``; ``drop`` the dropout arguments (``checks.dropout``), ``blocks`` the block lists
    (``api._device_lists``)."""
    heads = bh + 2 * bh_kv
    forward = make_flash_forward_half(tiling, d, mask, "float32", True)
    grid = (tiling.Tr(n_q), bh)
    threads = tiling.threads_for("flash_forward_half")
    smem = smem_bytes(tiling, d)
    split_block = split_threads(d, PREP_THREADS)

    def launches(run, q, k, v, o, lse, partial, qs, ks, vs, qscale, hi, lo, drop, blocks):
        run(make_head_amax(PREP_THREADS), (GX, heads), PREP_THREADS, 0,
            q, k, v, partial, n_q, n_k, d, bh, bh_kv)
        run(make_split_half(d, split_block), (SPLIT_BLOCKS, heads), split_block, 0,
            q, k, v, partial, qs, ks, vs, n_q, n_k, bh, bh_kv)
        run(forward, grid, threads, smem, qs, ks, vs, o, lse,
            np.float32(qscale), n_q, n_k, hi, lo, *drop, *blocks, partial)
    return launches
