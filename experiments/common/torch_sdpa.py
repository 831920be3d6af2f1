"""PyTorch SDPA's backends, timed the same way as our kernels (same inputs, CUDA events)."""
from __future__ import annotations

from .cases import Case, device_inputs
from .timing import INPUT_SETS, QUICK_REPEATS, REPEATS, Timing, time_cuda

#: The backends compared against, by their ``torch.nn.attention.SDPBackend`` names (FLASH and
#: CUDNN take half precision only).
BACKENDS = ("MATH", "EFFICIENT_ATTENTION", "FLASH_ATTENTION", "CUDNN_ATTENTION")


def torch_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def sdpa_call(backend: str, case: Case):
    """A function of one input set that runs SDPA (and its backward for fwd_bwd) on ``backend``,
    with the case's causal mask, its key padding as a boolean ``attn_mask`` (B, 1, 1, N; True:
    attend) and its dropout."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = getattr(SDPBackend, backend)
    pad = case.key_padding_mask()
    attend = None if pad is None else torch.as_tensor(~pad, device="cuda")[:, None, None, :]

    def forward(x):
        with sdpa_kernel(chosen):
            return F.scaled_dot_product_attention(x["q"], x["k"], x["v"], attn_mask=attend,
                                                  dropout_p=case.dropout_p, is_causal=case.causal)

    def forward_backward(x):
        o = forward(x)
        return torch.autograd.grad(o, (x["q"], x["k"], x["v"]), x["do"])

    return forward if case.passes == "fwd" else forward_backward


def sdpa_inputs(case: Case, seed: int) -> dict:
    """``device_inputs`` for SDPA: q, k, v needing their gradients for fwd_bwd."""
    x = device_inputs(case, seed)
    if case.passes == "fwd_bwd":
        for name in ("q", "k", "v"):
            x[name].requires_grad_(True)
    return x


def time_sdpa(backend: str, case: Case, quick: bool) -> Timing:
    """Median time of SDPA on ``backend`` for the case's shape, passes, causality and dtype.

    Raises RuntimeError when the backend does not support the case (e.g. FLASH with fp32)."""
    sets = [sdpa_inputs(case, seed) for seed in range(INPUT_SETS)]
    call = sdpa_call(backend, case)
    call(sets[0])  # raises "No available kernel" for an unsupported dtype or shape
    return time_cuda(call, sets, repeats=QUICK_REPEATS if quick else REPEATS)


def unsupported_reason(exc: BaseException) -> str | None:
    """"unsupported" when SDPA refused the backend, else None."""
    text = str(exc)
    if isinstance(exc, RuntimeError) and ("No available kernel" in text or "not supported" in text.lower()):
        return "unsupported"
    return None
