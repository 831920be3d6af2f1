"""Every timed kernel is first checked against a float64 reference on the same inputs.

With torch (on the GPU) the reference is the attention math in float64 torch ops, computed over
blocks of heads and query rows so that it fits in memory at any N: for each block,
S = scale q k^T, P = softmax(S) (full rows: every key is there), o = P v; and for the backward
pass dP = dO v^T, dS = P * (dP - rowsum(dO * o)), dq = scale dS k, with dk += scale dS^T q and
dv += P^T dO summed over the row blocks.  A sliding window masks the scores outside the band
as the causal mask does, and so does a block mask the scores of the blocks it drops (rows left
with no key: o = 0 and no gradient, the kernels' convention); grouped K/V heads (GQA / MQA) are
repeated over their query heads for the reference, and dk, dv summed back over each group.
Key padding (``Case.padding``) hides the keys past each entry's length as the masks do.
Dropout (``Case.dropout_p``): the reference applies the mask the forward draws, taken from the
API (``return_dropout_mask=True``, the same seed: the kernels regenerate the same mask on every
call; that it is ``reference.dropout_keep``'s is the tests' job), P Z = P x mask / (1 - p):
o = (P Z) v, dv = (P Z)^T dO, dS = P (Z dP - rowsum(dO * o)).
Without torch: ``numba_flash.reference``.
The error of a tensor is ``max|out - ref| / max|ref|``; a case fails loudly (``MismatchError``)
when any output's error exceeds the tolerance.

float16 / bfloat16 cases follow flash-attention's rule: the error must be at most 2x (outputs)
or 3x (gradients) that of a plain implementation in the same format, measured on the same
inputs against the same float64 reference: the same blocks in torch's own half-precision ops
(S = scale q k^T rounded to the format, P = softmax in fp32 rounded, o = P v; dV = P^T dO,
dP = dO V^T, dS = P (dP - rowsum(dO o)) in the format; dq, dk, dv summed in fp32, rounded once).
"""
from __future__ import annotations

import math

import numpy as np

from .cases import Case

#: Largest allowed relative error of fp32 outputs.
FP32_TOLERANCE = 1e-4
#: flash-attention's rule for half precision: our error / the plain same-format implementation's.
HALF_RULE = {"o": 2.0, "dq": 3.0, "dk": 3.0, "dv": 3.0}
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


def _as_torch(t, dtype):
    """A kernel output (torch tensor, or numba device array) as a torch tensor of ``dtype``
    (numba returns bfloat16 results as their uint16 bits)."""
    import torch

    if isinstance(t, torch.Tensor):
        return t
    if t.dtype.itemsize == 2:     # float16 or the uint16 bits of bfloat16: through int16
        return torch.as_tensor(t.view(np.int16), device="cuda").view(dtype)
    return torch.as_tensor(t, device="cuda")


def _visible(hs, rs, N, causal, window, blocks=None, lengths=None):
    """(rows, N) booleans: row r sees key c (causal: c <= r; window (left, right): r - left <= c
    <= r + right, -1 unbounded; ``blocks`` = (mask, bq, bk): block (r // bq, c // bk) kept);
    and with ``lengths`` ((B H,) keys kept per batch-head) also c < the length of each of the
    heads ``hs``: (heads, rows, N); None when every row sees every key."""
    import torch

    left, right = (-1, -1) if window is None else window
    if not causal and left < 0 and right < 0 and blocks is None and lengths is None:
        return None
    rows = torch.arange(rs.start, rs.stop, device="cuda")[:, None]
    cols = torch.arange(N, device="cuda")[None, :]
    ok = torch.ones((rs.stop - rs.start, N), dtype=torch.bool, device="cuda")
    if blocks is not None:
        on, bq, bk = blocks
        ok &= on[rows // bq, cols // bk]
    if causal:
        ok &= cols <= rows
    if right >= 0:
        ok &= cols <= rows + right
    if left >= 0:
        ok &= cols >= rows - left
    if lengths is not None:
        ok = ok & (cols < lengths[hs][:, None, None])
    return ok


def _block_attention(x, hs, rs, scale, mask, N, grads, dtype, dropout=None):
    """The block's o (and ds, P Z, do) in ``dtype`` arithmetic, as described in the module
    docstring (float64: the reference); ``mask``: (causal, window, blocks, lengths)
    (``_visible``); ``dropout``: (keep (B H, N, N) bool, 1 / (1 - p)) or None."""
    import torch

    q, k, v = (x[n][hs, rs].to(dtype) if n == "q" else x[n][hs].to(dtype) for n in ("q", "k", "v"))
    s = (q @ k.transpose(-1, -2)) * scale
    visible = _visible(hs, rs, N, *mask)
    if visible is not None:
        s = s.masked_fill(~visible, float("-inf"))
    p = torch.softmax(s.float() if dtype != torch.float64 else s, dim=-1)
    del s
    if visible is not None:   # a row that sees no key: softmax's NaN -> 0, so o = 0
        p = p.masked_fill(~visible.any(-1, keepdim=True), 0.0)
    p = p.to(dtype)
    z = None
    if dropout is not None:   # P Z, computed in fp32 (float64 for the reference), rounded once
        keep, factor = dropout
        z = keep[hs, rs].to(torch.float64 if dtype == torch.float64 else torch.float32) * factor
    pz = p if z is None else (p.to(z.dtype) * z).to(dtype)
    o = pz @ v
    if not grads:
        return o, None
    do = x["do"][hs, rs].to(dtype)
    dp = do @ v.transpose(-1, -2)
    if z is not None:
        dp = (dp.to(z.dtype) * z).to(dtype)
    ds = p * (dp - (do * o).sum(-1, keepdim=True))
    return o, (ds, pz, do, q, k)


def _gradients(back, scale):
    """dq, dk and dv of one block from ``_block_attention``'s (ds, P Z, do, q, k), in their
    arithmetic (dk and dv: this block's share, summed over row blocks by the caller)."""
    ds, pz, do, q, k = back
    return {"dq": scale * (ds @ k), "dk": scale * (ds.transpose(-1, -2) @ q),
            "dv": pz.transpose(-1, -2) @ do}


def _torch_errors(case: Case, inputs: dict, outputs: dict) -> tuple[dict[str, float], dict[str, float]]:
    """(our errors, the plain same-format implementation's errors -- {} for float32)."""
    import torch

    B, H, N, d = case.shape
    h_kv = case.kv_shape[1]
    group = H // h_kv
    scale = 1.0 / math.sqrt(d)
    fmt = getattr(torch, case.dtype)
    half = case.dtype != "float32"
    blocks = None if case.block_mask is None else (
        torch.as_tensor(case.block_mask_array, device="cuda"), *case.block_size)
    lengths = None if not case.padding else torch.as_tensor(
        case.key_lengths(), device="cuda").repeat_interleave(H)
    mask = (case.causal, case.window, blocks, lengths)
    dropout = _dropout_mask(case, inputs)

    def heads_of_q(name, t):   # K/V heads repeated over their query heads
        t = torch.as_tensor(t, device="cuda")
        if name in ("k", "v") and group > 1:
            t = t.repeat_interleave(group, dim=1)
        return t.reshape(B * H, N, d)

    x = {n: heads_of_q(n, t) for n, t in inputs.items()}
    ours = {n: _as_torch(t, fmt).reshape(B * (h_kv if n in ("dk", "dv") else H), N, d)
            for n, t in outputs.items()}
    whos = ("ours", "plain") if half else ("ours",)
    grads = "dq" in ours
    diff = {who: dict.fromkeys(ours, 0.0) for who in whos}
    ref_max = dict.fromkeys(ours, 0.0)

    def compare(who, name, mine, ref):
        diff[who][name] = max(diff[who][name], float((mine.double() - ref).abs().max()))
        if who == "ours":
            ref_max[name] = max(ref_max[name], float(ref.abs().max()))

    acc = {}
    grouped = {}   # GQA: (who, name) -> dk or dv summed over each group, (B H_kv, N, d)
    for hs, rs in _blocks(B * H, N):
        o, back = _block_attention(x, hs, rs, scale, mask, N, grads, torch.float64, dropout)
        mine = {"ours": {n: t[hs, rs] for n, t in ours.items() if n not in ("dk", "dv")}}
        if half:
            po, pback = _block_attention(x, hs, rs, scale, mask, N, grads, fmt, dropout)
            mine["plain"] = {"o": po}
            if grads:
                mine["plain"].update((n, g.float()) for n, g in _gradients(pback, scale).items())
        for who in whos:
            compare(who, "o", mine[who]["o"], o)
        if not grads:
            continue
        ref = _gradients(back, scale)
        for who in whos:
            compare(who, "dq", mine[who]["dq"], ref["dq"])
        sources = {"ref": ref, **({"plain": mine["plain"]} if half else {})}
        for who, blocks in sources.items():
            for n in ("dk", "dv"):   # summed over the row blocks of these heads
                acc[who, n] = blocks[n] if rs.start == 0 else acc[who, n] + blocks[n]
        if rs.stop == N and group > 1:
            kv = torch.arange(hs.start, hs.stop, device="cuda") // group
            for (who, n), block in acc.items():
                if (who, n) not in grouped:
                    grouped[who, n] = torch.zeros((B * h_kv, N, d), dtype=block.dtype, device="cuda")
                grouped[who, n].index_add_(0, kv, block)
        elif rs.stop == N:
            for n in ("dk", "dv"):
                compare("ours", n, ours[n][hs], acc["ref", n])
                if half:
                    compare("plain", n, acc["plain", n].to(fmt), acc["ref", n])
    for n in ("dk", "dv") if grads and group > 1 else ():
        compare("ours", n, ours[n], grouped["ref", n])
        if half:
            compare("plain", n, grouped["plain", n].to(fmt), grouped["ref", n])
    errors = {who: {n: diff[who][n] / max(ref_max[n], 1e-30) for n in ours} for who in whos}
    return errors["ours"], errors.get("plain", {})


def _dropout_mask(case: Case, inputs: dict):
    """(keep (B H, N, N) bool on the GPU, 1 / (1 - p)) of a case with dropout: the mask its
    forward draws, from the API on the same inputs and seed; None without dropout."""
    if not case.dropout_p:
        return None
    import torch

    import numba_flash
    from numba_flash.reference import dropout_scale

    _, keep = numba_flash.flash_attention(inputs["q"], inputs["k"], inputs["v"], **case.mask_kwargs(),
                                          algorithm=case.method, tiling=case.tiling_object(),
                                          return_dropout_mask=True)
    keep = torch.as_tensor(keep, device="cuda")
    return keep.reshape(case.B * case.H, case.N, case.N), dropout_scale(case.dropout_p)


def _numpy_reference(chunk: dict, mask: dict, grads: bool) -> dict:
    from numba_flash import reference

    o, _ = reference.attention_forward(chunk["q"], chunk["k"], chunk["v"], **mask)
    if not grads:
        return {"o": o}
    dq, dk, dv = reference.attention_backward(chunk["do"], chunk["q"], chunk["k"], chunk["v"], **mask)
    return {"o": o, "dq": dq, "dk": dk, "dv": dv}


def _numpy_errors(case: Case, inputs: dict, outputs: dict) -> dict[str, float]:
    x = {n: _to_numpy(t) for n, t in inputs.items()}
    ref = _numpy_reference(x, case.mask_kwargs(), "dq" in outputs)
    return {name: float(np.abs(_to_numpy(out) - ref[name]).max() / max(np.abs(ref[name]).max(), 1e-30))
            for name, out in outputs.items()}


def relative_errors(case: Case, inputs: dict, outputs: dict) -> tuple[dict[str, float], dict[str, float]]:
    """``max|out - ref| / max|ref|`` for every output of the case (float64 reference), and for
    half-precision cases the same of the plain same-format implementation (else {})."""
    try:
        import torch  # noqa: F401
    except ImportError:
        if case.dtype != "float32" or case.dropout_p or case.padding:
            raise RuntimeError("half-precision, dropout and padded cases are checked with torch (not installed)")
        return _numpy_errors(case, inputs, outputs), {}
    return _torch_errors(case, inputs, outputs)


def check_case(case: Case, inputs: dict, outputs: dict, tolerance: float = FP32_TOLERANCE) -> float:
    """The largest relative error over the case's outputs; raises MismatchError above tolerance
    (half precision: above HALF_RULE times the plain implementation's error)."""
    errors, plain = relative_errors(case, inputs, outputs)
    limits = ({name: HALF_RULE[name] * plain[name] for name in errors} if plain
              else dict.fromkeys(errors, tolerance))
    bad = {name: err for name, err in errors.items() if not err <= limits[name]}
    if bad:
        detail = ", ".join(f"{name}: {err:.3g} > {limits[name]:.3g}" for name, err in bad.items())
        against = "the plain same-format implementation's error times 2 (o) / 3 (gradients)" if plain else f"{tolerance:g}"
        raise MismatchError(f"{case.label}: relative error against the float64 reference above {against} ({detail})")
    return max(errors.values())
