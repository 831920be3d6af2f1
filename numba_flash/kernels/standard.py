"""Standard attention, the paper's baseline: S and P materialised in HBM by separate kernels.

Forward (the paper's Algorithm 0)::

    S = scale Q K^T      (matmul kernel)           -> HBM, N_q x N_k
    P = softmax(S)       (row kernel, two passes)  -> HBM, N_q x N_k
    O = P V              (matmul kernel)           -> HBM

Backward (its Algorithm 3), reading the saved P::

    dV = P^T dO;  dP = dO V^T;  D = rowsum(dO * O);  dS = P * (dP - D)
    dQ = scale dS K;  dK = scale dS^T Q

One register-tiled matmul kernel serves all six products; its transposes are compile-time flags.

Storage: every kernel takes the HBM format ``dtype`` ("float32", "float16", "bfloat16") as a
compile-time parameter of the one body (``storage.storage_ops``): in half every tensor it reads
or writes (Q, K, V, O, S, P, dO, dP, dS, dQ, dK, dV) holds the format's 16-bit patterns,
converted to fp32 on load and rounded to nearest even on store -- S, P, dP, dS stored in the
format, as a plain same-format implementation stores them; D stays fp32 in HBM (the dS kernel
rounds it to the format, as dP is, before dP - D). Arithmetic and shared memory are fp32 in
every format: the element counts moved are the same, their bytes halve.

Versions (H200, fp32, B=4 H=16 N=4096 d=64, `python -m experiments bench`, 2026-11-29):
    v1  matmul: Br x Bc output tile, 16-deep k-chunks through shared memory, 4x4 register tile
        per thread; softmax: one block per row, online max/sum in pass 1, P in pass 2.
        Forward 3.1 TFLOP/s (87.3 ms), forward + backward 4.3. Not tuned: the signed indexing
        and scalar shared loads that the flash kernels shed (tiles.py) are still here.
    v2  half storage: the HBM format a compile-time parameter (fp16 / bf16 patterns converted
        on load and store, fp32 arithmetic and SRAM; dS rounds D like dP); fp32 PTX: softmax
        and dS the same, the matmul's blocks laid out otherwise (ptxas at sm_90: 122 registers,
        v1 124) (not timed yet).
    v3  softmax: the threads' (m, l) merged by a tree in shared memory (log2(threads) steps)
        instead of thread 0 merging the 127 others one after another (a chain of 127
        dependent shared loads and exponentials a row). H100, ncu, 2026-12-06, the 8 standard
        cases of experiments.levels (results/h100/levels/standard_softmax): 1.63-2.72x
        faster than v2 (228.8 -> 111.3 us at (2, 10, 1024, 64)), warp instructions a row of
        1024 8439 -> 4371; 0.9-1.6 TB/s of DRAM, not yet memory-bound.
    v4  softmax on flat views with unsigned indices (as the flash kernels): warp instructions
        a row of 1024 4371 -> 3499. H100, ncu, 2026-12-06, the same 8 cases: 1.83-3.19x
        faster than v2 (228.8 -> 95.9 us at (2, 10, 1024, 64); 12-15 % faster than v3, on
        another H100 of the same kind), 1.1-1.8 TB/s of DRAM.
"""
from __future__ import annotations

import math

from numba import cuda, float32, uint64

from simulator.tiling import MATMUL_BK, Tiling

from ..kernel_cache import kernel_factory
from ..launch import jit_options
from .storage import storage_ops
from .tiles import NEG_INF, ONE, ZERO

VERSION = 2


@kernel_factory
def make_matmul(tiling: Tiling, trans_a: bool, trans_b: bool, dtype: str):
    """Kernel ``(a, b, c, alpha, m, n, kdim)``: c[bh] = alpha opA(a[bh]) opB(b[bh]), c (B*H, m, n),
    a, b, c stored as ``dtype`` (uint16 patterns in half), sums in fp32, c rounded once.

    opA(a) is a (m x k) matrix stored as a[bh, m, k], or a[bh, k, m] when ``trans_a``; opB(b) is
    (k x n) stored as b[bh, k, n], or b[bh, n, k] when ``trans_b``. Grid (ceil(n/Bc), ceil(m/Br),
    B*H), ``tiling.threads`` threads, ``tiling.smem_bytes("standard_matmul", 0)`` bytes.
    Each block reads its Br rows of opA and Bc columns of opB once, k-chunk by k-chunk."""
    BR, BC = tiling.Br, tiling.Bc
    TY, TX, T = tiling.threads_y, tiling.threads_x, tiling.threads
    RA, CB = tiling.rows_per_thread, tiling.cols_per_thread
    BK = MATMUL_BK
    LA = BK | 1
    B0 = BR * LA
    END = B0 + BK * BC
    load, store = storage_ops(dtype).load, storage_ops(dtype).store

    @cuda.jit(**jit_options("standard_matmul", tiling))
    def matmul(a, b, c, alpha, m, n, kdim):
        smem = cuda.shared.array(0, float32)
        As = smem[0:B0]     # SRAM (fp32): Br x BK chunk of opA
        Bs = smem[B0:END]   # SRAM (fp32): BK x Bc chunk of opB
        col0 = cuda.blockIdx.x * BC
        row0 = cuda.blockIdx.y * BR
        bh = cuda.blockIdx.z
        tid = cuda.threadIdx.x
        ty = tid // TX
        tx = tid - ty * TX
        acc = cuda.local.array((RA, CB), float32)   # registers: this thread's slice of the c tile
        for x in range(RA):
            for y in range(CB):
                acc[x, y] = 0.0
        for k0 in range(0, kdim, BK):
            # barrier: everyone is done with the previous chunk
            cuda.syncthreads()
            for idx in range(tid, BR * BK, T):
                if trans_a:          # consecutive threads walk m, the contiguous index
                    kk = idx // BR
                    r = idx - kk * BR
                else:                # consecutive threads walk k, the contiguous index
                    r = idx // BK
                    kk = idx - r * BK
                if row0 + r < m and k0 + kk < kdim:
                    As[r * LA + kk] = load(a[bh, k0 + kk, row0 + r] if trans_a else a[bh, row0 + r, k0 + kk])
                else:
                    As[r * LA + kk] = 0.0
            for idx in range(tid, BK * BC, T):
                if trans_b:
                    cc = idx // BK
                    kk = idx - cc * BK
                else:
                    kk = idx // BC
                    cc = idx - kk * BC
                if col0 + cc < n and k0 + kk < kdim:
                    Bs[kk * BC + cc] = load(b[bh, col0 + cc, k0 + kk] if trans_b else b[bh, k0 + kk, col0 + cc])
                else:
                    Bs[kk * BC + cc] = 0.0
            # barrier: the chunk is complete before the products read it
            cuda.syncthreads()
            for kk in range(BK):
                for x in range(RA):
                    av = As[min(ty + TY * x, BR - 1) * LA + kk]
                    for y in range(CB):
                        acc[x, y] += av * Bs[kk * BC + min(tx + TX * y, BC - 1)]
        for x in range(RA):
            r = row0 + ty + TY * x
            if ty + TY * x < BR and r < m:
                for y in range(CB):
                    cc = col0 + tx + TX * y
                    if tx + TX * y < BC and cc < n:
                        c[bh, r, cc] = store(alpha * acc[x, y])

    return matmul


@kernel_factory
def make_softmax(threads: int, causal: bool, dtype: str):
    """Kernel ``(s, p, n_k, diagonal)`` on flat (1-D) views of s, p: (B*H, N_q, N_k):
    p[bh, r, :] = softmax(s[bh, r, :]), with ``causal`` over the keys c <= r + ``diagonal``
    only; s and p stored as ``dtype``, the softmax in fp32; one block of ``threads`` threads
    (a power of two) per row, grid (N_q, B*H), no dynamic smem. Pass 1 reads each visible
    score once (online max and sum per thread); the threads' (m, l) are combined by a tree in
    shared memory; pass 2 reads each score again and writes P. Masked entries are written 0
    and never read."""
    if threads < 1 or threads & (threads - 1):
        raise ValueError(f"make_softmax: threads must be a power of two, got {threads}")
    load, store = storage_ops(dtype).load, storage_ops(dtype).store

    @cuda.jit(device=True)
    def merged(m, l, mt, lt):
        """(m, l) of two parts of a row: (m, l) and (mt, lt), each a running max and its sum of
        exp(x - max)."""
        if mt > m:
            return mt, l * math.exp(m - mt) + lt
        if lt != 0.0:                 # includes a NaN partial sum, whatever its max
            return m, l + lt * math.exp(mt - m)
        return m, l

    @cuda.jit
    def softmax(s, p, n_k, diagonal):
        part_m = cuda.shared.array(threads, float32)   # SRAM: each thread's running max ...
        part_l = cuda.shared.array(threads, float32)   # ... and sum, then merged pairwise
        row = cuda.blockIdx.x
        bh = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        # the row's first score, unsigned (v3 indexed s[bh, row, c]: signed index arithmetic
        # and wrap-around checks on every access)
        base = (uint64(bh) * uint64(cuda.gridDim.x) + uint64(row)) * uint64(n_k)
        visible = n_k
        if causal:
            visible = max(0, min(n_k, row + diagonal + 1))
        m = NEG_INF
        l = ZERO
        for c in range(tid, visible, threads):
            x = load(s[base + uint64(c)])
            if x > m:
                l = l * math.exp(m - x) + ONE
                m = x
            elif x != NEG_INF:        # a -inf score adds nothing; a NaN one makes l NaN
                l += math.exp(x - m)
        part_m[tid] = m
        part_l[tid] = l
        # the tree: at stride h, thread t < h merges thread t + h's (m, l) into its own, so
        # that thread 0 holds the row's after log2(threads) steps (v2: thread 0 merged the
        # others' one after another)
        h = threads // 2
        while h > 0:
            # barrier: every (m, l) of the previous step written before it is read
            cuda.syncthreads()
            if tid < h:
                m, l = merged(m, l, part_m[tid + h], part_l[tid + h])
                part_m[tid] = m
                part_l[tid] = l
            h //= 2
        # barrier: the row's (m, l) is ready in slot 0
        cuda.syncthreads()
        m = part_m[0]
        l = part_l[0]
        inv = ZERO if l == 0.0 else ONE / l   # l = 0: the row sees no key (or only -inf scores)
        for c in range(tid, n_k, threads):
            at = base + uint64(c)
            if c < visible and l != 0.0:
                p[at] = store(math.exp(load(s[at]) - m) * inv)
            else:
                p[at] = store(ZERO)

    return softmax


@kernel_factory
def make_ds(threads: int, dtype: str):
    """Kernel ``(p, dp, dvec, ds, n_k)``: dS[bh, r, c] = P (dP - D[bh, r]); D read once per row.
    p, dp, ds stored as ``dtype``, dvec float32 (rounded to ``dtype`` as it is read, like dP),
    arithmetic in fp32. One block of ``threads`` threads per row, grid (N_q, B*H)."""
    load, store = storage_ops(dtype).load, storage_ops(dtype).store

    @cuda.jit
    def ds_kernel(p, dp, dvec, ds, n_k):
        d_row = cuda.shared.array(1, float32)   # SRAM: D[row]
        row = cuda.blockIdx.x
        bh = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        if tid == 0:
            # D rounded to the format, as dP was: where the exact dP and D agree (one key, a
            # peaked row) the difference is then exactly 0, as in a same-format implementation
            d_row[0] = load(store(dvec[bh, row]))
        # barrier: D[row] is in SRAM
        cuda.syncthreads()
        dr = d_row[0]
        for c in range(tid, n_k, threads):
            ds[bh, row, c] = store(load(p[bh, row, c]) * (load(dp[bh, row, c]) - dr))

    return ds_kernel
