"""Block sizes and the shared memory they cost: one description for kernels, launchers and the model.

A ``Tiling(Br, Bc)`` fixes the paper's block sizes: ``Br`` rows of Q (and O, dO, dQ) per tile,
``Bc`` rows of K and V (columns of S) per tile.  Every kernel in ``numba_flash`` sizes its
shared-memory tiles and its thread block from this object, and the traffic model in
``simulator`` counts loads and stores with the same numbers, so the two cannot drift apart.

Thread layout (all kernels): a block has ``threads_y x threads_x`` threads.  Thread (ty, tx)
owns the S-tile entries ``S[ty + threads_y*a, tx + threads_x*b]`` for ``a < rows_per_thread``,
``b < cols_per_thread`` -- at most a 4 x 4 register tile -- and, in products whose output has
``d`` columns, the columns ``tx + threads_x*b`` for ``b < head_cols_per_thread(d)``.

Shared-memory rows of the attention tiles are padded to a multiple of 4 elements plus 4
(``head_stride``, ``score_stride``): 16-byte aligned for vector loads, and staggered by 4 banks
from row to row. The standard matmul's A chunk keeps an odd stride (``MATMUL_BK | 1``).

This module imports nothing beyond the standard library: the simulator must run without numba.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

#: Largest register tile a thread owns along each side of an S tile.
MICRO_TILE = 4
#: Tensor-core kernels: one warp per MMA_ROWS rows of the Br tile (the forward) or of the Bc
#: tile (the backward); S tiles in steps of MMA_K.
MMA_ROWS, MMA_K, WARP = 16, 8, 32
#: Tensor-core kernel -> (multiple of Br, multiple of Bc) its fragments need, and the tile side
#: that has one warp per MMA_ROWS ("Br" or "Bc"; at most 1024 threads).
MMA_KERNELS = {"flash_forward_tc": (MMA_ROWS, MMA_K, "Br"),
               "flash_forward_half": (MMA_ROWS, MMA_ROWS, "Br"),
               "flash_backward_tc": (MMA_ROWS, MMA_ROWS, "Bc"),
               "flash_backward_half": (MMA_ROWS, MMA_ROWS, "Bc")}
#: ``Tiling.warp_pairs`` (the tensor-core backward: two warps a 16-key tile, one for S^T, P^T, dV
#: and one for dP^T, dS^T, dK) synchronises each pair by a named barrier, ids 1 .. PAIR_BARRIERS
#: (0 is the block's): at most that many pairs, Bc <= 16 * PAIR_BARRIERS.
PAIR_BARRIERS = 15
#: ``Phase.code``'s variant (joined to others by "+") of a kernel compiled for a tiling with
#: ``warp_pairs``: the recorded tables (resources, SASS, loops) key it by this, as their Br, Bc
#: columns do not say.
WARP_PAIRS_VARIANT = "warp_pairs"
#: ... and of one compiled for a tiling with ``warp_rows`` = 16 (the fp16 / bf16 forward's
#: warps of one 16-row tile where Br is a multiple of 32).
WARP_ROWS_VARIANT = "warp_rows16"
#: The variants a tiling's flags add (``table_variant``), which the tables' Br, Bc columns do not say.
TILING_VARIANTS = (WARP_PAIRS_VARIANT, WARP_ROWS_VARIANT)


def table_variant(variant: str, tiling: "Tiling | None") -> str:
    """The recorded tables' variant of a kernel of ``variant`` compiled for ``tiling``:
    ``variant`` with ``WARP_PAIRS_VARIANT`` joined where ``tiling.warp_pairs`` and
    ``WARP_ROWS_VARIANT`` where ``tiling.warp_rows`` (each once)."""
    parts = [p for p in variant.split("+") if p]
    flags = (tiling is not None and tiling.warp_pairs, tiling is not None and bool(tiling.warp_rows))
    for name, on in zip(TILING_VARIANTS, flags):
        if on and name not in parts:
            parts.append(name)
    return "+".join(parts)


def tiling_of_table(br: int, bc: int, variant: str) -> "Tiling":
    """The Tiling of a table row (its Br, Bc and variant): ``table_variant``'s inverse."""
    parts = variant.split("+")
    return Tiling(br, bc, WARP_PAIRS_VARIANT in parts, MMA_ROWS if WARP_ROWS_VARIANT in parts else 0)
#: Dropout (``spec.Mask.dropout``): each Philox call covers 8 scores of a block of 16 rows x 16
#: keys (``numba_flash.reference.dropout_keep``) that the kernels' lanes must find inside one
#: tile, so with dropout Br and Bc are multiples of DROPOUT_SIDE (``check_dropout``).
DROPOUT_SIDE = 16
#: The half-precision (fp16, bf16) mma's k: the depth of its fragments and of the tiles' columns.
HALF_K = 16
#: Depth of the k-chunks the standard-attention matmul streams through shared memory.
MATMUL_BK = 16
#: Kernels whose shared memory a Tiling describes.
KERNELS = (
    "standard_matmul",
    "flash_forward_v1",
    "flash_forward_v2",
    "flash_forward_tc",
    "flash_forward_half",
    "flash_backward",
    "flash_backward_dq",
    "flash_backward_tc",
    "flash_backward_half",
)
#: numba_flash.flash_attention's algorithm -> its kernel (a name above): FA2 order on tensor
#: cores (3xTF32), FA2 order on FFMA (plain fp32 arithmetic), the paper's Algorithm 1 order.
#: Here, beside the kernel names, so that the cost model's users need not import the kernels.
FORWARD_KERNELS = {"fa2": "flash_forward_tc", "fa2_fma": "flash_forward_v2", "fa1": "flash_forward_v1"}
#: ... and for fp16 / bf16 inputs: the FA2 order on tensor cores in the input's format; the
#: Algorithm 1 order storing Q, K, V, O in the input's format (fp32 arithmetic and SRAM).
HALF_FORWARD_KERNELS = {"fa2": "flash_forward_half", "fa1": "flash_forward_v1"}
#: flash_attention_backward's algorithm -> its kernel: KV-outer on tensor cores (3xTF32), the
#: same loop order on FFMA. Both add dQ atomically; ``deterministic=True`` runs the FFMA kernels.
BACKWARD_KERNELS = {"fa2": "flash_backward_tc", "fa2_fma": "flash_backward"}
#: ... and for fp16 / bf16 inputs: KV-outer on tensor cores in the input's format.
HALF_BACKWARD_KERNELS = {"fa2": "flash_backward_half"}
#: Default (Br, Bc) per kernel where 64 x 64 is not the fastest. H200, fp32, B=4 H=16 N=4096
#: d=64 (tools/tune_forward.py, 2026-11-29): FFMA forward 18.7 TFLOP/s at 128 x 64, 16.75 at
#: 64 x 64; tensor-core forward (128 registers) v5: 40.0 at 256 x 32, 36.7 at 128 x 32, 36.5 at
#: 128 x 16, 35.9 at 256 x 64 (spills); v7: 45.7 at 256 x 32, 41.2 at 128 x 32.
#: Tensor-core backward: 32 x 128 (8 warps; 199 KB of shared memory at d = 64 in v4, 224 KB in
#: v5, so one block a multiprocessor; ptxas: 255 registers, 32-64 B of spills): 23.4 (v4), 36.3 (v5);
#: other tilings not measured.
PREFERRED = {"flash_forward_v2": (128, 64), "flash_forward_tc": (256, 32),
             "flash_backward_tc": (32, 128), "flash_forward_half": (128, 64),
             "flash_backward_half": (64, 128)}
#: fp16 forward (flash_forward_half v2, H200, per-call events, results/h200/tuning/tune_half_v2.csv):
#: d = 64: 146 TFLOP/s at 128 x 64 and 256 x 64 (4,16,4096), 183 / 176 at (1,16,16384); d = 128:
#: 200 at 128 x 32, 205 at 256 x 64, 197 at 128 x 64; causal (2,32,4096,128): 174 at 128 x 32,
#: 166 at 256 x 64, 138 at 128 x 64.
#: ... and for d > 64 (a third entry True: ``Tiling.warp_pairs``): the tensor-core forward (v8, Qi in fp32) at d = 128 (4,16,4096): 46.3
#: TFLOP/s at 256 x 32 (16 warps, 128 registers, 220 B of spill stores by ptxas), 45.1 at 192 x 32
#: (12 warps, 168 registers), 38.8 at 128 x 32 (v7 with Qi split in SRAM: 40.8 and 40.1 at 128 x
#: 32 in two sessions); from d = 72 on the fp32 Qi is a guess (at d = 72-80 the split Qi would
#: also fit 256 x 32; not measured); the backward's
#: dK and dV fragments (64 registers each at d = 128) spill at 16 x 64 (0.9 KB), less than at
#: 32 x 64 (1.5 KB; not measured either). Backward v4-v11 at 16 x 64 (4 warps, 205 KB, so 4 warps
#: an SM): (4,16,4096,128) ~78 ms on the H200, 4.7x d = 64's time per FLOP; v12 pairs the warps
#: (``warp_pairs``: 8 warps, 64 accumulator registers a lane instead of 128): 79.1 -> 47.8 ms
#: (H200, 2026-12-03, results/h200/tuning/warp_pairs_2026-12-03.log).
#: fp16 backward (flash_backward_half v1, H200, backward alone, results/h200/tuning/
#: tune_half_bwd_v1_d*.csv): (4,16,4096,64): 149 TFLOP/s at 64 x 128, 136 at 32 x 128, 133 at
#: 64 x 64, 87 at 128 x 64; d = 128: 160 at 32 x 128, 136 at 32 x 64, 123 at 16 x 64, 77 at
#: 64 x 64 (causal and N = 16384 not tuned).
PREFERRED_WIDE_HEADS = {"flash_forward_tc": (256, 32), "flash_backward_tc": (16, 64, True),
                        "flash_forward_half": (128, 32), "flash_backward_half": (32, 128)}
#: Bytes of a shared-memory element of the kernels whose tiles are not fp32 (``smem_terms``
#: counts elements): the fp16 / bf16 forward's 16-bit ones.
ELEMENT_BYTES = {"flash_forward_half": 2, "flash_backward_half": 2}
#: Dynamic shared memory a block may opt into on sm_80/sm_90 (A100: 163 KB, H100/H200: 227 KB).
H200_SMEM_PER_BLOCK = 232448


def _odd(n: int) -> int:
    return n | 1


def _padded(n: int) -> int:
    """n rounded up to a multiple of 4, plus 4: rows stay 16-byte aligned (LDS.128) and
    consecutive rows start 4 banks apart, so the 8 rows a quarter-warp reads at once hit 8
    different 16-byte bank groups."""
    return -(-n // 4) * 4 + 4


@dataclass(frozen=True)
class Tiling:
    """Block sizes Br x Bc of the tiled algorithms (the paper's notation).

    ``warp_pairs`` (the tensor-core backward, ``flash_backward_tc``, only; the other kernels
    ignore it): two warps a 16-key tile of Bc instead of one, one computing S^T, P^T and dV,
    the other dP^T, dS^T and dK (P^T passed through shared memory), so a block has Bc/8 warps
    and each lane holds one of the dK, dV accumulators, not both (that kernel's v12: wide
    heads, where one warp's two would take 128 registers at d = 128).

    ``warp_rows`` (the fp16 / bf16 forward, ``flash_forward_half``, only): 16 gives each warp
    one 16-row tile of Br where Br is a multiple of 32, whose warps otherwise take two (0: the
    kernel's choice, ``rows_per_warp``). One tile a warp leaves room in the registers for
    fa2_fp16x3's rows of 2 D16 parts at d = 128 (two tiles spill there), and a block of Br = 128
    then has 8 warps, two on each scheduler."""

    Br: int
    Bc: int
    warp_pairs: bool = False
    warp_rows: int = 0

    def __post_init__(self):
        for name in ("Br", "Bc"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Tiling.{name} must be a positive int, got {value!r}")
        if not isinstance(self.warp_pairs, bool):
            raise ValueError(f"Tiling.warp_pairs must be a bool, got {self.warp_pairs!r}")
        if self.warp_rows not in (0, MMA_ROWS) or isinstance(self.warp_rows, bool):
            raise ValueError(f"Tiling.warp_rows must be 0 (the kernel's choice) or {MMA_ROWS}, "
                             f"got {self.warp_rows!r}")
        if self.warp_rows and self.Br % (2 * MMA_ROWS):
            raise ValueError(f"Tiling(Br={self.Br}, Bc={self.Bc}, warp_rows={self.warp_rows}): Br "
                             f"is not a multiple of {2 * MMA_ROWS}, so its warps own {MMA_ROWS} rows "
                             "already: leave warp_rows at 0")
        if self.threads > 1024:
            raise ValueError(
                f"Tiling(Br={self.Br}, Bc={self.Bc}) needs {self.threads} threads a block; "
                "CUDA allows 1024: choose Br * Bc <= 16384"
            )

    def __repr__(self) -> str:
        pairs = ", warp_pairs=True" if self.warp_pairs else ""
        rows = f", warp_rows={self.warp_rows}" if self.warp_rows else ""
        return f"{type(self).__name__}(Br={self.Br}, Bc={self.Bc}{pairs}{rows})"

    # ---- thread layout -------------------------------------------------------------------
    @property
    def threads_y(self) -> int:
        return math.ceil(self.Br / MICRO_TILE)

    @property
    def threads_x(self) -> int:
        return math.ceil(self.Bc / MICRO_TILE)

    @property
    def threads(self) -> int:
        return self.threads_y * self.threads_x

    @property
    def rows_per_thread(self) -> int:
        return math.ceil(self.Br / self.threads_y)

    @property
    def cols_per_thread(self) -> int:
        return math.ceil(self.Bc / self.threads_x)

    def threads_for(self, kernel: str) -> int:
        """Threads a block of ``kernel`` has: one warp per 16 rows of Br (``flash_forward_tc``)
        or of Bc (``flash_backward_tc``; two with ``warp_pairs``) for the tensor-core kernels,
        the ``threads`` of the 4 x 4 layout for the others."""
        if kernel in MMA_KERNELS:
            self.check_mma(kernel)
            return (WARP * getattr(self, MMA_KERNELS[kernel][2]) // self.rows_per_warp(kernel)
                    * self.warps_per_tile(kernel))
        return self.threads

    def warps_per_tile(self, kernel: str) -> int:
        """Warps that share each 16-row tile of a tensor-core kernel: 2 for ``flash_backward_tc``
        with ``warp_pairs``, else 1."""
        return 2 if self.warp_pairs and kernel == "flash_backward_tc" else 1

    def rows_per_warp(self, kernel: str) -> int:
        """Rows (of the side with one warp per MMA_ROWS, ``MMA_KERNELS``) each warp of a
        tensor-core kernel owns: MMA_ROWS, except in the fp16 / bf16 forward, where a warp
        takes two 16-row tiles when Br allows (each K and V fragment it loads then feeds two
        mma: half the shared-memory reads a product), unless ``warp_rows`` says 16."""
        if kernel == "flash_forward_half" and self.Br % (2 * MMA_ROWS) == 0 and not self.warp_rows:
            return 2 * MMA_ROWS
        return MMA_ROWS

    def suits_mma(self, kernel: str = "flash_forward_tc") -> bool:
        """Whether the tensor-core ``kernel`` can use this tiling (see ``check_mma``)."""
        br, bc, side = MMA_KERNELS[kernel]
        pairs = self.warps_per_tile(kernel)
        return (self.Br % br == 0 and self.Bc % bc == 0
                and getattr(self, side) <= 1024 // WARP * MMA_ROWS // pairs
                and (pairs == 1 or self.Bc <= MMA_ROWS * PAIR_BARRIERS))

    def check_mma(self, kernel: str = "flash_forward_tc") -> None:
        """Raise ValueError unless the tensor-core ``kernel`` can use this tiling."""
        if not self.suits_mma(kernel):
            br, bc, side = MMA_KERNELS[kernel]
            most = (1024 // WARP * MMA_ROWS if self.warps_per_tile(kernel) == 1
                    else MMA_ROWS * PAIR_BARRIERS)
            raise ValueError(
                f"tiling={self!r} does not suit the tensor-core kernel "
                f"({kernel}): choose Br a multiple of {br} and Bc a multiple of {bc}, "
                f"{side} up to {most}"
            )

    def suits_dropout(self) -> bool:
        """Whether the kernels can apply dropout with this tiling (``DROPOUT_SIDE``)."""
        return self.Br % DROPOUT_SIDE == 0 and self.Bc % DROPOUT_SIDE == 0

    def check_dropout(self) -> None:
        """Raise ValueError, naming ``tiling``, unless ``suits_dropout``."""
        if not self.suits_dropout():
            raise ValueError(
                f"tiling=Tiling(Br={self.Br}, Bc={self.Bc}) cannot apply dropout (dropout_p > 0): "
                f"its Philox calls cover blocks of {DROPOUT_SIDE} rows x {DROPOUT_SIDE} keys, so "
                f"choose Br and Bc multiples of {DROPOUT_SIDE} (or tiling=None, whose default "
                "with dropout is one)"
            )

    def suits_blocks(self, block_size: tuple[int, int]) -> bool:
        """Whether every tile lies in one block of a block mask of ``block_size`` = (bq, bk)
        scores: Br | bq and Bc | bk (``simulator.blocks.sparse_tiles``)."""
        return block_size[0] % self.Br == 0 and block_size[1] % self.Bc == 0

    def head_cols_per_thread(self, d: int) -> int:
        """Columns of a (rows x d) output tile (O, dQ) each thread accumulates."""
        return math.ceil(d / self.threads_x)

    def kv_rows_per_thread(self) -> int:
        """Rows of a (Bc x d) output tile (dK, dV) each thread accumulates."""
        return math.ceil(self.Bc / self.threads_y)

    # ---- grid ----------------------------------------------------------------------------
    def Tr(self, n_q: int) -> int:
        """Number of row blocks of Q: ceil(N_q / Br)."""
        return math.ceil(n_q / self.Br)

    def Tc(self, n_k: int) -> int:
        """Number of row blocks of K and V: ceil(N_k / Bc)."""
        return math.ceil(n_k / self.Bc)

    # ---- shared memory -------------------------------------------------------------------
    def head_stride(self, d: int) -> int:
        """Shared-memory row stride (elements) of a tile with d columns (Qi, Kj, Vj, dOi)."""
        return _padded(d)

    def mma_depth(self, d: int) -> int:
        """d rounded up to the mma's k = 8: the columns of the tensor-core kernel's tiles."""
        return -(-d // MMA_K) * MMA_K

    def mma_stride(self, d: int) -> int:
        """Row stride (floats) of the tensor-core kernel's Kj tile, which holds each element's
        TF32 hi and lo parts: 2 mma_depth(d), padded to 16 mod 32, so that the 16-byte fragment
        reads of 8 lanes (2 rows x 4 column pairs) hit all 32 banks."""
        row = 2 * self.mma_depth(d)
        return row + (16 - row) % 32

    def mma_pair_stride(self, d: int) -> int:
        """Stride (floats) between the row pairs (g, g + 8) of the tensor-core forward's Qi
        tile, which keeps both rows' hi and lo parts together: 4 mma_depth(d) + 4, i.e. 4 mod 32,
        so that the 16-byte fragment reads of 8 lanes (2 row pairs x 4 column pairs, 32 bytes
        apart) hit all 32 banks."""
        return 4 * self.mma_depth(d) + 4

    def mma_q_raw(self, d: int) -> bool:
        """Whether the tensor-core forward keeps Qi in SRAM as plain fp32 and splits each A
        fragment into its TF32 parts as it loads it (d > 64), instead of storing both parts
        once: that halves Qi (d = 128, Br = 128: 68 KiB instead of 129 KiB), so that more warps
        fit a multiprocessor, for a split (three instructions; four before forward v9) per
        fragment element per K/V tile."""
        return self.mma_depth(d) > 64

    def mma_q_stride(self, d: int) -> int:
        """Stride (floats) between the row pairs (g, g + 8) of the tensor-core forward's Qi tile:
        ``mma_pair_stride`` (hi and lo parts), or for a plain fp32 Qi (``mma_q_raw``) 2
        mma_depth(d) padded to 16 mod 32, so that the 16-byte fragment reads of 8 lanes (2 row
        pairs x 4 column pairs, 16 bytes apart) hit all 32 banks (as ``mma_stride``)."""
        return self.mma_stride(d) if self.mma_q_raw(d) else self.mma_pair_stride(d)

    def mma_swizzled_stride(self, d: int) -> int:
        """Row stride (floats) of the tensor-core backward's row-major Qi and dOi tiles (hi and
        lo parts of column pairs in 16-byte chunks, XOR-swizzled by row; see that kernel):
        2 mma_depth(d) rounded up to whole 128-byte lines, so that the swizzle, which permutes
        the 8 chunks of a line, stays inside the row."""
        return -(-2 * self.mma_depth(d) // 32) * 32

    def half_depth(self, d: int) -> int:
        """d rounded up to the half-precision mma's k = 16: the columns of the fp16 / bf16
        kernel's tiles (the extra ones zero)."""
        return -(-d // HALF_K) * HALF_K

    def half_stride(self, d: int) -> int:
        """Row stride (16-bit elements) of the fp16 / bf16 kernel's tiles: half_depth(d) + 8, an
        odd number of 16-byte chunks, so that the 8 rows an ldmatrix reads (one 16-byte chunk
        each) fall in 8 different groups of 4 banks."""
        return self.half_depth(d) + 8

    @property
    def half_score_stride(self) -> int:
        """Row stride (16-bit elements) of the fp16 / bf16 backward's dS^T tile (Bc keys x Br
        queries): Br + 8, an odd number of 16-byte chunks (Br a multiple of 16), so that
        ldmatrix's 8 row addresses and a warp's 4-byte stores of its C fragments (rows g, words
        t) meet no bank conflict."""
        return self.Br + 8

    @property
    def mma_v_stride(self) -> int:
        """Row stride (floats) of the tensor-core kernel's transposed Vj tile (d rows of Bc keys,
        hi and lo parts of each key pair together): 2 Bc rounded up to whole 128-byte lines, at least one, so that
        its XOR swizzle of 16-byte chunks (see the kernel) stays inside the row."""
        return -(-2 * self.Bc // 32) * 32

    @property
    def score_stride(self) -> int:
        """Shared-memory row stride (elements) of a Br x Bc tile (S, P, dS)."""
        return _padded(self.Bc)

    def smem_terms(self, kernel: str, d: int) -> dict[str, int]:
        """Elements of each shared-memory buffer ``kernel`` allocates, in allocation order."""
        ld, ls, br, bc = self.head_stride(d), self.score_stride, self.Br, self.Bc
        if kernel == "standard_matmul":
            return {"A": br * _odd(MATMUL_BK), "B": MATMUL_BK * bc}
        if kernel == "flash_forward_v2":
            return {"Qi": br * ld, "Kj": bc * ld, "Vj": bc * ld, "P": br * ls,
                    "row_partials": br * self.threads_x}
        if kernel == "flash_forward_tc":
            self.check_mma()    # its layout exists only for tilings the mma can cover
            return {"Qi": br // 2 * self.mma_q_stride(d), "Kj": bc * self.mma_stride(d),
                    "Vj": self.mma_depth(d) * self.mma_v_stride}
        if kernel == "flash_forward_half":
            self.check_mma(kernel)
            ld = self.half_stride(d)   # 16-bit elements; two stages of Kj and Vj
            return {"Qi": br * ld, "Kj": 2 * bc * ld, "Vj": 2 * bc * ld}
        if kernel == "flash_forward_v1":
            return {"Kj": bc * ld, "Vj": bc * ld, "Qi": br * ld, "S": br * ls,
                    "alpha": br, "beta": br}
        if kernel == "flash_backward":
            return {"Kj": bc * ld, "Vj": bc * ld, "Qi": br * ld, "dOi": br * ld,
                    "P": br * ls, "dS": br * ls, "L": br, "D": br}
        if kernel == "flash_backward_dq":
            return {"Qi": br * ld, "dOi": br * ld, "Kj": bc * ld, "Vj": bc * ld,
                    "dS": br * ls, "L": br, "D": br}
        if kernel == "flash_backward_half":
            self.check_mma(kernel)
            ld = self.half_stride(d)   # 16-bit elements; two stages of Qi, dOi, L, D (fp32: 2 each)
            return {"Kj": bc * ld, "Vj": bc * ld, "Qi": 2 * br * ld, "dOi": 2 * br * ld,
                    "dS": bc * self.half_score_stride, "L": 2 * 2 * br, "D": 2 * 2 * br}
        if kernel == "flash_backward_tc":
            self.check_mma(kernel)
            d8, lq = self.mma_depth(d), self.mma_swizzled_stride(d)
            terms = {"Kj": bc * 2 * d8, "Vj": bc * 2 * d8, "Qi": br * lq, "dOi": br * lq,
                     "Qi^T": d8 * 2 * br, "dOi^T": d8 * 2 * br, "dS": br * 2 * bc,
                     "L": br, "D": br}
            if self.warp_pairs:       # P^T from each pair's first warp to its second
                terms["P^T"] = bc * br
            return terms
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")

    def smem_bytes(self, kernel: str, d: int, dtype_bytes: int | None = None) -> int:
        """Dynamic shared memory (bytes) one block of ``kernel`` needs at head dim ``d``, its
        elements ``dtype_bytes`` each (None: the kernel's own, ``ELEMENT_BYTES``)."""
        return sum(self.smem_terms(kernel, d).values()) * (dtype_bytes or ELEMENT_BYTES.get(kernel, 4))

    def check_fits(self, kernel: str, d: int, dtype_bytes: int | None = None,
                   limit_bytes: int = H200_SMEM_PER_BLOCK) -> None:
        """Raise ValueError, naming ``tiling``, if the kernel's tiles exceed ``limit_bytes``."""
        dtype_bytes = dtype_bytes or ELEMENT_BYTES.get(kernel, 4)
        need = self.smem_bytes(kernel, d, dtype_bytes)
        if need > limit_bytes:
            terms = ", ".join(f"{k}={v * dtype_bytes}" for k, v in self.smem_terms(kernel, d).items())
            raise ValueError(
                f"tiling=Tiling(Br={self.Br}, Bc={self.Bc}) needs {need} bytes of shared memory "
                f"for {kernel} at d={d} ({terms}), more than the device's {limit_bytes} a block: "
                "choose smaller Br/Bc"
            )

    # ---- choices -------------------------------------------------------------------------
    @classmethod
    def paper_default(cls, sram_elements: int, d: int) -> "Tiling":
        """The paper's Algorithm 1 choice for an SRAM of M elements: Bc = ceil(M/4d), Br = min(Bc, d)."""
        bc = math.ceil(sram_elements / (4 * d))
        return cls(Br=min(bc, d), Bc=bc)

    @classmethod
    def kernel_default(cls, kernel: str, d: int, dtype_bytes: int | None = None,
                       limit_bytes: int = H200_SMEM_PER_BLOCK, n_q: int | None = None,
                       n_k: int | None = None, dropout: bool = False,
                       block_size: tuple[int, int] | None = None) -> "Tiling":
        """The tiling the kernels use when none is given: the fastest measured on the H200
        (``PREFERRED``, ``PREFERRED_WIDE_HEADS`` for d > 64; 64 x 64 otherwise), then square
        tiles halved until the tiles fit; for short sequences (``n_q``, ``n_k`` given), each
        side cut to ``fit_side`` of the sequence it tiles (``SMALL_N_SIDES``), so that a block
        computes no more padding than the rounding needs. With ``dropout``, one that
        ``suits_dropout`` (sides never cut below ``DROPOUT_SIDE``). With ``block_size`` (a
        block mask's (bq, bk)), each candidate's sides cut to their gcd with the block's, so
        that the tiles nest in the blocks (``suits_blocks``; 256 x 32 becomes 128 x 32 in
        128 x 128 blocks), the fitted sides only where they still nest."""
        first = cls(*(PREFERRED_WIDE_HEADS if d > 64 else PREFERRED).get(
            kernel, PREFERRED.get(kernel, (64, 64))))
        candidates = [first] + [cls(size, size) for size in (64, 32, 16, 8, 4, 2, 1)]
        if block_size is not None:
            candidates = [replace(t, Br=math.gcd(t.Br, block_size[0]),
                                  Bc=math.gcd(t.Bc, block_size[1])) for t in candidates]
        if kernel in MMA_KERNELS:
            candidates = [t for t in candidates if t.suits_mma(kernel)]
        if dropout:
            candidates = [t for t in candidates if t.suits_dropout()]
        for tiling in candidates:
            if tiling.smem_bytes(kernel, d, dtype_bytes) <= limit_bytes:
                fitted = tiling.fitted(kernel, n_q, n_k, DROPOUT_SIDE if dropout else 1)
                return tiling if block_size and not fitted.suits_blocks(block_size) else fitted
        raise ValueError(f"d={d} is too large for {kernel}: no tiling fits {limit_bytes} bytes"
                         + (f" and nests in blocks of {block_size}" if block_size else ""))

    def fitted(self, kernel: str, n_q: int | None, n_k: int | None, grain: int = 1) -> "Tiling":
        """This tiling with Br cut to ``fit_side(n_q)`` and Bc to ``fit_side(n_k)`` where that is
        smaller (None: that side unchanged). Smaller tiles need no more shared memory and keep
        the mma multiples (``SMALL_N_SIDES`` gives the granularity of each side, at least
        ``grain``: ``DROPOUT_SIDE`` with dropout)."""
        grain_r, grain_c = SMALL_N_SIDES.get(kernel, (None, None))
        br, bc = self.Br, self.Bc
        if grain_r and n_q is not None:
            br = min(br, fit_side(n_q, max(grain_r, grain)))
        if grain_c and n_k is not None:
            bc = min(bc, fit_side(n_k, max(grain_c, grain)))
        return replace(self, Br=br, Bc=bc, warp_rows=self.warp_rows if br % (2 * MMA_ROWS) == 0 else 0)


def fit_side(n: int, grain: int) -> int:
    """The tile side for a sequence of n rows: the smallest power of two >= n, and at least
    ``grain`` (the mma's 16 rows, its 8 keys, the 4 x 4 thread tile). Powers of two, not
    multiples of the grain: each distinct side is a kernel to compile, so short sequences
    share a handful of them."""
    side = grain
    while side < n:
        side *= 2
    return side


#: Kernel -> granularity of (Br, Bc) when cut for short sequences (None: never cut). The
#: tensor-core forward has a warp per 16 rows of Br and S in steps of 8 keys; the backward a
#: warp per 16 keys of Bc and row blocks of 16; the FFMA kernels 4 x 4 thread tiles. The
#: standard matmul's tiles cover outputs whose columns are d as often as N: left as they are.
SMALL_N_SIDES = {
    "flash_forward_tc": (MMA_ROWS, MMA_K),
    "flash_forward_half": (MMA_ROWS, MMA_ROWS),
    "flash_backward_tc": (MMA_ROWS, MMA_ROWS),
    "flash_backward_half": (MMA_ROWS, MMA_ROWS),
    "flash_forward_v1": (MICRO_TILE, MICRO_TILE),
    "flash_forward_v2": (MICRO_TILE, MICRO_TILE),
    "flash_backward": (MICRO_TILE, MICRO_TILE),
    "flash_backward_dq": (MICRO_TILE, MICRO_TILE),
}


@dataclass(frozen=True)
class ModelTiling(Tiling):
    """Block sizes the cost model counts but the kernels cannot launch: a Tiling without the
    1024-threads-a-block limit of numba_flash's thread layout.

    The paper's Algorithm 1 block sizes exceed that limit for large SRAM (A100, fp16, d=64:
    ``paper_default(83456, 64)`` asks for Bc=326, 1312 threads); the simulator still counts
    their traffic.  All Tiling methods apply; never hand one to a kernel.
    """

    def __post_init__(self):
        for name in ("Br", "Bc"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ModelTiling.{name} must be a positive int, got {value!r}")

    @classmethod
    def of(cls, Br: int, Bc: int) -> Tiling:
        """``Tiling(Br, Bc)`` when the kernels can launch it, else ``ModelTiling(Br, Bc)``."""
        model = cls(Br, Bc)
        return Tiling(Br, Bc) if model.threads <= 1024 else model
