"""numba_flash.torch and the kernel disk cache on a real GPU (``pytest -m gpu``)."""
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import numba_flash as nf  # noqa: E402
import numba_flash.flash_attn as fa  # noqa: E402
import numba_flash.torch as nft  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from .helpers import assert_close  # noqa: E402
from .test_torch import TinyAttention, cu_seqlens, varlen_reference  # noqa: E402

pytestmark = pytest.mark.gpu
OUT_TOL, GRAD_TOL = 1e-5, 1e-4
REPO = Path(__file__).resolve().parents[1]

#: (B, H, N_q, N_k, d, is_causal); tests/test_gpu.py's warm-up builds their kernels first
SHAPES = [
    (2, 4, 1024, 1024, 64, True),
    (1, 3, 255, 97, 80, True),      # N_q > N_k, torch's top-left diagonal
    (1, 2, 97, 1000, 128, True),    # N_q < N_k
    (2, 2, 300, 300, 40, False),
]


#: (B, H, N_q, N_k, d, is_causal) of the fa2_fp16x3 inference test
FP16X3_SHAPES = [(2, 4, 1024, 1024, 64, True), (1, 2, 97, 1000, 128, True)]
#: test_varlen_func_on_gpu's sequences (query and key lengths), 4 query heads on 2 K/V heads
VARLEN_LENS = ([1000, 17, 300], [1000, 40, 255])
#: test_key_padding_attn_mask_on_gpu's entries' kept keys, N = 1000
PADDING_KEPT = (1000, 983)

#: The kernels these tests launch (conftest builds them first; tests/gpu_kernels.py lists them
#: with the rest).
KERNELS = list(dict.fromkeys([
    *(nf.KernelConfig(d=d, n_q=n_q, n_k=n_k, causal=causal) for _, _, n_q, n_k, d, causal in SHAPES),
    *(nf.KernelConfig(d=d, n_q=n_q, n_k=n_k, causal=causal, forward="fa2_fp16x3", backward=None)
      for _, _, n_q, n_k, d, causal in FP16X3_SHAPES),
    nf.KernelConfig(d=64, n_q=300, causal=True),       # test_torch_compile_with_inductor
    nf.KernelConfig(d=64, n_q=256, causal=True),       # test_runs_on_the_current_side_stream
    *(nf.KernelConfig(d=64, n_q=1000, n_k=kept) for kept in PADDING_KEPT),
    *(nf.KernelConfig(d=64, n_q=n_q, n_k=n_k, causal=True, group=2) for n_q, n_k in zip(*VARLEN_LENS)),
]))


def _reference(q, k, v, **kwargs):
    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        return torch.nn.functional.scaled_dot_product_attention(*leaves, **kwargs), leaves


def _check(B, H, n_q, n_k, d, seed, **kwargs):
    """Ours with ``kwargs`` against torch's math backend in float64 on CUDA inputs: output and
    q, k, v gradients."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(B, H, n, d, device="cuda", generator=gen).requires_grad_()
               for n in (n_q, n_k, n_k))
    o = nft.scaled_dot_product_attention(q, k, v, **kwargs)
    _compare(o, *_reference(q, k, v, **kwargs), (q, k, v), gen)


def _compare(o, o_ref, leaves, inputs, gen):
    """o (float32, on the GPU) within OUT_TOL of the float64 reference o_ref, and after a
    backward of one random upstream gradient through both, the inputs' gradients within
    GRAD_TOL of the reference's leaves'."""
    assert o.is_cuda and o.dtype == torch.float32
    assert_close(o.detach().cpu().numpy(), o_ref.detach().cpu().numpy(), OUT_TOL)
    do = torch.randn(o.shape, device="cuda", generator=gen)
    o.backward(do)
    o_ref.backward(do.double())
    for x, x_ref in zip(inputs, leaves):     # (a leaf may hold its input reshaped)
        assert_close(x.grad.cpu().numpy().reshape(x_ref.shape), x_ref.grad.cpu().numpy(), GRAD_TOL)


@pytest.mark.parametrize("B,H,n_q,n_k,d,causal", SHAPES)
def test_matches_torch_sdpa_on_gpu(B, H, n_q, n_k, d, causal):
    _check(B, H, n_q, n_k, d, n_q * 7 + d, is_causal=causal)


def test_key_padding_attn_mask_on_gpu():
    """A (B, 1, 1, N_k) boolean attn_mask, Fig. 3's padding (each entry keeps a prefix of
    length in [N - 20, N]), as torch's: the API's key_padding_mask, an entry a call."""
    lengths = torch.tensor(PADDING_KEPT, device="cuda")
    mask = (torch.arange(1000, device="cuda") < lengths[:, None])[:, None, None]
    _check(2, 4, 1000, 1000, 64, 17, attn_mask=mask)


def test_varlen_func_on_gpu():
    """flash_attn_varlen_func on CUDA tensors, GQA, causal bottom-right, N_q != N_k per
    sequence: output and gradients against torch's math backend sequence by sequence."""
    lens_q, lens_k = VARLEN_LENS
    gen = torch.Generator(device="cuda").manual_seed(29)
    q = torch.randn(sum(lens_q), 4, 64, device="cuda", generator=gen).requires_grad_()
    k, v = (torch.randn(sum(lens_k), 2, 64, device="cuda", generator=gen).requires_grad_()
            for _ in range(2))
    o = fa.flash_attn_varlen_func(q, k, v, cu_seqlens(lens_q, "cuda"), cu_seqlens(lens_k, "cuda"),
                                   1000, 1000, causal=True)
    _compare(o, *varlen_reference(q, k, v, lens_q, lens_k, True), (q, k, v), gen)


def test_flash_attn_func_on_gpu():
    """flash_attn_func in flash-attention's (B, N, H, d) layout on CUDA tensors, GQA, causal
    bottom-right, N_q != N_k: against torch's math backend per batch entry."""
    n_q, n_k = VARLEN_LENS[0][0], VARLEN_LENS[1][0]
    gen = torch.Generator(device="cuda").manual_seed(31)
    q = torch.randn(2, n_q, 4, 64, device="cuda", generator=gen).requires_grad_()
    k, v = (torch.randn(2, n_k, 2, 64, device="cuda", generator=gen).requires_grad_()
            for _ in range(2))
    o = fa.flash_attn_func(q, k, v, causal=True)
    packed = [x.reshape(-1, *x.shape[2:]) for x in (q, k, v)]
    o_ref, leaves = varlen_reference(*packed, [n_q] * 2, [n_k] * 2, True)
    _compare(o, o_ref.reshape(o.shape), leaves, (q, k, v), gen)


def test_runs_on_the_current_side_stream():
    """The inputs are written on a side stream after a long sleep there: kernels on any other
    stream (the legacy default one, as before) would read them unwritten."""
    B, H, N, d = 1, 2, 256, 64
    src = [torch.randn(B, H, N, d, device="cuda") for _ in range(3)]
    o_ref, _ = _reference(*src, is_causal=True)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        q, k, v = (torch.empty_like(x) for x in src)
        torch.cuda._sleep(200_000_000)                  # ~0.1 s of GPU time on the side stream
        for dst, x in zip((q, k, v), src):
            dst.copy_(x)
        o = nft.scaled_dot_product_attention(q, k, v, is_causal=True)
    side.synchronize()
    assert_close(o.cpu().numpy(), o_ref.detach().cpu().numpy(), OUT_TOL)


def test_torch_compile_with_inductor():
    torch.manual_seed(0)
    model = TinyAttention(nft.scaled_dot_product_attention, width=128, heads=2).cuda()
    reference = TinyAttention(torch.nn.functional.scaled_dot_product_attention, width=128, heads=2).cuda()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(2, 300, 128, device="cuda")
    compiled = torch.compile(model, fullgraph=True)
    with sdpa_kernel(SDPBackend.MATH):
        y_ref = reference(x)
    y = compiled(x)
    assert_close(y.detach().cpu().numpy(), y_ref.detach().cpu().numpy(), 1e-4)
    y.square().sum().backward()
    with sdpa_kernel(SDPBackend.MATH):
        y_ref.square().sum().backward()
    for p, p_ref in zip(model.parameters(), reference.parameters()):
        assert_close(p.grad.cpu().numpy(), p_ref.grad.cpu().numpy(), 1e-3)


_CHILD = textwrap.dedent("""
    import json, time
    import numpy as np
    import numba_flash as nf
    from numba_flash import kernel_cache
    q = np.random.default_rng(0).standard_normal((1, 2, 100, 24)).astype(np.float32)
    start = time.perf_counter()
    o, lse = nf.flash_attention(q, q, q, causal=True, return_lse=True)
    nf.flash_attention_backward(q, q, q, q, o, lse, causal=True)
    print(json.dumps({"seconds": time.perf_counter() - start, **kernel_cache.STATS}))
""")


def test_second_process_loads_compiled_kernels_from_disk(tmp_path):
    """A fresh cache: the first process compiles the forward, the backward and its D kernel,
    the second loads all three, its first call within 5 s (a compile takes 13-125 s; the
    process's first call also makes its CUDA context: 2.5 s on an H100, 2026-12-06)."""
    env = {**os.environ, "NUMBA_FLASH_CACHE_DIR": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    runs = [json.loads(subprocess.run([sys.executable, "-c", _CHILD], env=env, check=True,
                                      capture_output=True, text=True).stdout.splitlines()[-1])
            for _ in range(2)]
    first, second = runs
    assert first.get("compiled") == 3 and not first.get("loaded"), first
    assert second.get("loaded") == 3 and not second.get("compiled"), second
    assert second["seconds"] <= 5.0, second


@pytest.mark.parametrize("B,H,n_q,n_k,d,causal", FP16X3_SHAPES)
def test_fp16x3_inference_on_gpu(B, H, n_q, n_k, d, causal):
    """Under inference_mode, o is the API's fa2_fp16x3 output bit for bit, within 2x a plain
    fp32 implementation's error against float64 (torch math, TF32 off)."""
    import numba_flash as nf

    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(n_q * 5 + d)
    q, k, v = (torch.randn(B, H, n, d, device="cuda", generator=gen) for n in (n_q, n_k, n_k))
    with torch.inference_mode():
        o = nft.scaled_dot_product_attention(q, k, v, is_causal=causal, algorithm="fa2_fp16x3")
    o_api = nf.flash_attention(q, k, v, causal=causal, diagonal=0 if causal else None,
                               softmax_scale=1 / math.sqrt(d), algorithm="fa2_fp16x3")
    assert torch.equal(o, o_api)
    o_ref, _ = _reference(q, k, v, is_causal=causal)
    with sdpa_kernel(SDPBackend.MATH):
        plain = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    err = ((o.double() - o_ref).abs().max() / o_ref.abs().max()).item()
    err_plain = ((plain.double() - o_ref).abs().max() / o_ref.abs().max()).item()
    assert err <= 2 * err_plain + 1e-7, (err, err_plain)
