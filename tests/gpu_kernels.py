"""The kernels the gpu tests launch, as ``numba_flash.KernelConfig``s: conftest builds them all
first, in parallel processes (``numba_flash.warmup``), so that each test loads its kernels from
the disk cache instead of compiling them one after another (~13-125 s each)."""
import numba_flash as nf
from simulator.tiling import H200_SMEM_PER_BLOCK

from . import (test_gpu, test_gpu_band, test_gpu_block_sparse, test_gpu_dropout, test_gpu_fp16x3,
               test_gpu_fp16x3_d256, test_gpu_half, test_gpu_varlen, test_torch_gpu)


def _configs():
    for B, H, n_q, n_k, d, causal in test_gpu.SHAPES:
        shape = dict(d=d, n_q=n_q, n_k=n_k, causal=causal)
        yield nf.KernelConfig(**shape, forward="fa2", backward="fa2")
        yield nf.KernelConfig(**shape, forward="fa1", backward="fa2_fma")
        yield nf.KernelConfig(**shape, forward=None, backward="fa2_fma", deterministic=True)
    for B, H, n_q, n_k, d, causal in test_gpu.SHAPES[1:4]:
        yield nf.KernelConfig(d=d, n_q=n_q, n_k=n_k, causal=causal, forward="standard", backward="standard")
    for tiling in test_gpu.OTHER_TILINGS:
        fits = tiling.smem_bytes("flash_backward_tc", 64) <= H200_SMEM_PER_BLOCK
        shape = dict(d=64, n_q=333, n_k=301, causal=True, tiling=tiling)
        yield nf.KernelConfig(**shape, forward="fa2", backward="fa2" if fits else "fa2_fma")
        if fits:
            yield nf.KernelConfig(**shape, forward=None, backward="fa2_fma")
    yield nf.KernelConfig(d=64, n_q=1000, causal=True, backward="fa2_fma", deterministic=True)
    yield nf.KernelConfig(d=64, n_q=300, n_k=200, causal=True, backward=None)
    for forward in ("fa2", "fa2_fma"):
        yield nf.KernelConfig(d=64, n_q=2048, n_k=16384, forward=forward, backward=None)
    for n_q, n_k, d, causal in test_gpu.MANY_ROW_BLOCKS:
        yield nf.KernelConfig(d=d, n_q=n_q, n_k=n_k, causal=causal, forward=None, backward="fa2")
    for module in (test_torch_gpu, test_gpu_half, test_gpu_band, test_gpu_dropout,
                   test_gpu_block_sparse, test_gpu_varlen, test_gpu_fp16x3, test_gpu_fp16x3_d256):
        yield from module.KERNELS


#: Distinct configs, in a stable order.
CONFIGS = list(dict.fromkeys(_configs()))
