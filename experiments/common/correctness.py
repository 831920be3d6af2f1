"""Every timed kernel is first checked against a float64 reference on the same inputs.

With torch (on the GPU) the reference is the attention math in float64 torch ops, computed over
blocks of heads and query rows so that it fits in memory at any N: for each block,
S = scale q k^T, P = softmax(S) (full rows: every key is there), o = P v; and for the backward
pass dP = dO v^T, dS = P * (dP - rowsum(dO * o)), dq = scale dS k, with dk += scale dS^T q and
dv += P^T dO summed over the row blocks.  Without torch: ``numba_flash.reference``.  The error
of a tensor is ``max|out - ref| / max|ref|``; a case fails loudly (``MismatchError``) when any
output's error exceeds the tolerance.
"""
from __future__ import annotations

import math

import numpy as np

from .cases import Case

#: Largest allowed relative error of fp32 outputs.
FP32_TOLERANCE = 1e-4
#: float64 elements of one (heads x rows x N) block of the reference (1 GiB each).
BLOCK_ELEMENTS = 2**27


class MismatchError(AssertionError):
    """An output differs from the float64 reference by more than the tolerance."""


def _to_numpy(x) -> np.ndarray:
    return x.copy_to_host() if hasattr(x, "copy_to_host") else np.asarray(x)


def _blocks(heads: int, N: int):
    """(head slice, row slice) blocks of at most BLOCK_ELEMENTS scores each."""
    rows = min(N, max(1, BLOCK_ELEMENTS // N))
    per = max(1, BLOCK_ELEMENTS // (rows * N))
    for h in range(0, heads, per):
        for r in range(0, N, rows):
            yield slice(h, min(h + per, heads)), slice(r, min(r + rows, N))


def _torch_errors(case: Case, inputs: dict, outputs: dict) -> dict[str, float]:
    import torch

    B, H, N, d = case.shape
    scale = 1.0 / math.sqrt(d)
    x = {n: torch.as_tensor(t, device="cuda").reshape(B * H, N, d) for n, t in inputs.items()}
    ours = {n: torch.as_tensor(t, device="cuda").reshape(B * H, N, d) for n, t in outputs.items()}
    grads = "dq" in ours
    diff = dict.fromkeys(ours, 0.0)
    ref_max = dict.fromkeys(ours, 0.0)

    def compare(name, mine, ref):
        diff[name] = max(diff[name], float((mine.double() - ref).abs().max()))
        ref_max[name] = max(ref_max[name], float(ref.abs().max()))

    dk_acc = dv_acc = None
    for hs, rs in _blocks(B * H, N):
        if rs.start == 0 and grads:
            dk_acc = torch.zeros_like(x["k"][hs], dtype=torch.float64)
            dv_acc = torch.zeros_like(x["v"][hs], dtype=torch.float64)
        q, k, v = x["q"][hs, rs].double(), x["k"][hs].double(), x["v"][hs].double()
        s = scale * (q @ k.transpose(-1, -2))
        if case.causal:
            visible = torch.arange(N, device="cuda")[None, :] <= torch.arange(rs.start, rs.stop, device="cuda")[:, None]
            s = s.masked_fill(~visible, float("-inf"))
        p = torch.softmax(s, dim=-1)
        del s
        o = p @ v
        compare("o", ours["o"][hs, rs], o)
        if grads:
            do = x["do"][hs, rs].double()
            ds = p * (do @ v.transpose(-1, -2) - (do * o).sum(-1, keepdim=True))
            compare("dq", ours["dq"][hs, rs], scale * (ds @ k))
            dk_acc += scale * (ds.transpose(-1, -2) @ q)
            dv_acc += p.transpose(-1, -2) @ do
            if rs.stop == N:
                compare("dk", ours["dk"][hs], dk_acc)
                compare("dv", ours["dv"][hs], dv_acc)
    return {name: diff[name] / max(ref_max[name], 1e-30) for name in ours}


def _numpy_reference(chunk: dict, causal: bool, grads: bool) -> dict:
    from numba_flash import reference

    o, _ = reference.attention_forward(chunk["q"], chunk["k"], chunk["v"], causal=causal)
    if not grads:
        return {"o": o}
    dq, dk, dv = reference.attention_backward(chunk["do"], chunk["q"], chunk["k"], chunk["v"], causal=causal)
    return {"o": o, "dq": dq, "dk": dk, "dv": dv}


def _numpy_errors(case: Case, inputs: dict, outputs: dict) -> dict[str, float]:
    x = {n: _to_numpy(t) for n, t in inputs.items()}
    ref = _numpy_reference(x, case.causal, "dq" in outputs)
    return {name: float(np.abs(_to_numpy(out) - ref[name]).max() / max(np.abs(ref[name]).max(), 1e-30))
            for name, out in outputs.items()}


def relative_errors(case: Case, inputs: dict, outputs: dict) -> dict[str, float]:
    """``max|out - ref| / max|ref|`` for every output of the case (float64 reference)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return _numpy_errors(case, inputs, outputs)
    return _torch_errors(case, inputs, outputs)


def check_case(case: Case, inputs: dict, outputs: dict, tolerance: float = FP32_TOLERANCE) -> float:
    """The largest relative error over the case's outputs; raises MismatchError above tolerance."""
    errors = relative_errors(case, inputs, outputs)
    bad = {name: err for name, err in errors.items() if not err <= tolerance}
    if bad:
        detail = ", ".join(f"{name}: {err:.3g}" for name, err in bad.items())
        raise MismatchError(f"{case.label}: relative error above {tolerance:g} against the float64 reference ({detail})")
    return max(errors.values())
