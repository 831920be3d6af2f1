"""Float64 NumPy reference: attention forward (with log-sum-exp), its analytic backward, and the
online-softmax recurrence block by block, the way the tiled kernels compute it.

Shapes follow PyTorch SDPA: q (B, H, N_q, d), k and v (B, H, N_k, d), o (B, H, N_q, d),
lse (B, H, N_q). Causal masking follows torch.tril: query row r sees key c iff
``c <= r + diagonal``; the default ``diagonal=None`` is N_k - N_q, bottom-right aligned
(flash-attention >= 2.1), ``diagonal=0`` top-left (torch SDPA's ``is_causal``). For
N_q = N_k = 4 the two agree (left); for N_q = 2, N_k = 4 they differ::

    r\\c 0 1 2 3          bottom-right:   r\\c 0 1 2 3     top-left:   r\\c 0 1 2 3
    0    x . . .                          0    x x x .                0    x . . .
    1    x x . .                          1    x x x x                1    x x . .
    2    x x x .
    3    x x x x

Rows that see no key at all (causal, r + diagonal < 0: with N_q > N_k bottom-right, or a
negative diagonal) give o = 0 and lse = -inf, as flash-attention does.

Dropout's mask (``dropout_keep``) is drawn by Philox4x32-10 (``philox4x32_10``, counter-based as
cuRAND's and flash-attention's) from (seed, batch-head, row, column), for the kernels to
regenerate in the backward instead of storing it.

``window=(left, right)`` (flash-attention's ``window_size``, -1: unbounded side) keeps keys
r + diagonal - left <= c <= r + diagonal + right, with the same default diagonal; k and v may
have fewer heads than q (GQA / MQA: query head h reads K/V head h // (H / H_kv)), and then dk,
dv are the sums over each K/V head's query heads.
"""
from __future__ import annotations

import math

import numpy as np


def causal_mask(n_q: int, n_k: int, diagonal: int | None = None) -> np.ndarray:
    """Boolean (N_q, N_k) mask, True where query row r may see key c: c <= r + diagonal
    (None: N_k - N_q, bottom-right aligned)."""
    rows = np.arange(n_q)[:, None]
    cols = np.arange(n_k)[None, :]
    return cols <= rows + (n_k - n_q if diagonal is None else diagonal)


def visible(n_q: int, n_k: int, *, causal=False, window=None, diagonal=None,
            block_mask=None, block_size=None) -> np.ndarray | None:
    """Boolean (N_q, N_k): True where row r sees key c under ``causal``, ``window`` (see the
    module docstring) and ``block_mask`` ((T_r, T_c) booleans for blocks of ``block_size`` =
    (Br, Bc): score (r, c) is kept iff block (r // Br, c // Bc) is on, Algorithm 5's mask);
    None where every row sees every key."""
    left, right = (-1, -1) if window is None else window
    if block_mask is not None:
        br, bc = block_size
        rows, cols = np.arange(n_q) // br, np.arange(n_k) // bc
        on = np.asarray(block_mask, bool)[rows[:, None], cols[None, :]]
        band = visible(n_q, n_k, causal=causal, window=window, diagonal=diagonal)
        return on if band is None else on & band
    if not causal and left < 0 and right < 0:
        return None
    off = n_k - n_q if diagonal is None else diagonal
    rows = np.arange(n_q)[:, None]
    cols = np.arange(n_k)[None, :]
    ok = np.ones((n_q, n_k), bool)
    if causal:
        ok &= cols <= rows + off
    if right >= 0:
        ok &= cols <= rows + off + right
    if left >= 0:
        ok &= cols >= rows + off - left
    return ok


def _grouped(q, x):
    """x (B, H_kv, N, d) repeated to q's H heads (GQA: query head h reads K/V head h // group)."""
    group = q.shape[-3] // x.shape[-3]
    return x if group == 1 else np.repeat(x, group, axis=-3)


def _ungrouped(grad, h_kv: int):
    """(B, H, N, d) gradients of the repeated K/V heads summed back to H_kv heads."""
    B, H = grad.shape[:2]
    return grad if H == h_kv else grad.reshape(B, h_kv, H // h_kv, *grad.shape[2:]).sum(axis=2)


def _masked(s, n_q, n_k, causal, window, diagonal, block_mask=None, block_size=None):
    ok = visible(n_q, n_k, causal=causal, window=window, diagonal=diagonal,
                 block_mask=block_mask, block_size=block_size)
    return s if ok is None else np.where(ok, s, -np.inf)


def _scale(d: int, softmax_scale: float | None) -> float:
    return 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)


def attention_forward(q, k, v, *, causal=False, softmax_scale=None, dtype=np.float64,
                      diagonal=None, window=None, block_mask=None, block_size=None, dropout=None):
    """Return (o, lse). o: (B, H, N_q, d); lse: (B, H, N_q), natural log. ``diagonal``: of the
    causal mask (``causal_mask``) or the window (``visible``). ``dropout``: (B, H, N_q, N_k)
    factors applied to P after the softmax (a keep mask / (1 - p), ``dropout_factors``): o =
    (P * dropout) V; lse of the undropped scores.

    ``dtype`` is the arithmetic precision: float64 is the reference; float32 gives the plain
    same-precision baseline whose error bounds ours (flash-attention's rule)."""
    q, k, v = (np.asarray(x, dtype=dtype) for x in (q, k, v))
    k, v = _grouped(q, k), _grouped(q, v)
    s = dtype(_scale(q.shape[-1], softmax_scale)) * (q @ np.swapaxes(k, -1, -2))
    s = _masked(s, q.shape[-2], k.shape[-2], causal, window, diagonal, block_mask, block_size)
    m = s.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)  # rows with no visible key: m = -inf
    p = np.exp(s - m_safe)
    l = p.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = (m_safe + np.log(l))[..., 0]
        p = np.where(l > 0, p / np.where(l > 0, l, 1.0), 0.0)
    if dropout is not None:
        p = p * np.asarray(dropout, dtype=dtype)
    return p @ v, lse


def attention_probs(q, k, *, causal=False, softmax_scale=None, dtype=np.float64, diagonal=None,
                    window=None, block_mask=None, block_size=None):
    """P = softmax(scale * Q K^T), (B, H, N_q, N_k); rows with no visible key are 0."""
    q, k = (np.asarray(x, dtype=dtype) for x in (q, k))
    k = _grouped(q, k)
    s = dtype(_scale(q.shape[-1], softmax_scale)) * (q @ np.swapaxes(k, -1, -2))
    s = _masked(s, q.shape[-2], k.shape[-2], causal, window, diagonal, block_mask, block_size)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    l = p.sum(axis=-1, keepdims=True)
    return np.where(l > 0, p / np.where(l > 0, l, 1.0), 0.0)


def attention_backward(do, q, k, v, *, causal=False, softmax_scale=None, dtype=np.float64,
                       diagonal=None, window=None, block_mask=None, block_size=None, dropout=None):
    """Analytic gradients (dq, dk, dv) of o = (softmax(scale QK^T) * Z) V against dO, in
    ``dtype``; Z = ``dropout`` (``attention_forward``'s factors), or 1.

    dV = (P Z)^T dO, dP = Z dO V^T, dS = P * (dP - rowsum(dO * O)), dQ = scale dS K,
    dK = scale dS^T Q (dk, dv of grouped K/V heads summed over their query heads).
    """
    do, q, k, v = (np.asarray(x, dtype=dtype) for x in (do, q, k, v))
    h_kv = k.shape[-3]
    k, v = _grouped(q, k), _grouped(q, v)
    scale = _scale(q.shape[-1], softmax_scale)
    p = attention_probs(q, k, causal=causal, softmax_scale=scale, dtype=dtype, diagonal=diagonal,
                        window=window, block_mask=block_mask, block_size=block_size)
    z = 1.0 if dropout is None else np.asarray(dropout, dtype=dtype)
    o = (p * z) @ v
    dv = np.swapaxes(p * z, -1, -2) @ do
    dp = z * (do @ np.swapaxes(v, -1, -2))
    ds = p * (dp - (do * o).sum(axis=-1, keepdims=True))
    scale = dtype(scale)
    return (scale * (ds @ k), _ungrouped(scale * (np.swapaxes(ds, -1, -2) @ q), h_kv),
            _ungrouped(dv, h_kv))


def online_softmax(scores, block_size):
    """The online-softmax recurrence over one row of scores, ``block_size`` scores at a time.

    Returns (m, l, steps): the final running max m, running sum l = sum(exp(s - m)), and a list of
    (m_j, l_j) after each block. Each step rescales the old sum by exp(m_old - m_new), which is
    exactly what the kernels do per tile; softmax(scores) = exp(scores - m) / l.
    """
    scores = np.asarray(scores, dtype=np.float64)
    m, l, steps = -np.inf, 0.0, []
    for start in range(0, scores.size, block_size):
        block = scores[start:start + block_size]
        m_new = max(m, float(block.max()))
        if m_new == -np.inf:  # nothing visible yet: keep m = -inf, l = 0
            steps.append((m, l))
            continue
        l = l * math.exp(m - m_new) + float(np.exp(block - m_new).sum())
        m = m_new
        steps.append((m, l))
    return m, l, steps


def blockwise_attention_forward(q, k, v, *, br, bc, causal=False, softmax_scale=None,
                                diagonal=None):
    """The FA2 loop in NumPy (float64), Br x Bc tiles: mirrors the kernels' arithmetic per tile.

    q (B, H, N_q, d) etc.; returns (o, lse) like ``attention_forward``.
    """
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = _scale(q.shape[-1], softmax_scale)
    visible = causal_mask(n_q, n_k, diagonal) if causal else np.ones((n_q, n_k), bool)
    o = np.zeros_like(q)
    lse = np.full(q.shape[:-1], -np.inf)
    for r0 in range(0, n_q, br):
        qi = q[..., r0:r0 + br, :]
        m = np.full(qi.shape[:-1], -np.inf)
        l = np.zeros(qi.shape[:-1])
        acc = np.zeros_like(qi)
        for c0 in range(0, n_k, bc):
            s = scale * (qi @ np.swapaxes(k[..., c0:c0 + bc, :], -1, -2))
            s = np.where(visible[r0:r0 + br, c0:c0 + bc], s, -np.inf)
            m_new = np.maximum(m, s.max(axis=-1))
            seen = np.isfinite(m_new)
            m_use = np.where(seen, m_new, 0.0)
            alpha = np.where(seen, np.exp(np.where(seen, m, 0.0) - m_use), 1.0)
            alpha = np.where(np.isfinite(m), alpha, 0.0)
            p = np.exp(s - m_use[..., None])
            l = alpha * l + p.sum(axis=-1)
            acc = alpha[..., None] * acc + p @ v[..., c0:c0 + bc, :]
            m = m_new
        with np.errstate(divide="ignore"):
            o[..., r0:r0 + br, :] = np.where(l[..., None] > 0, acc / np.where(l > 0, l, 1.0)[..., None], 0.0)
            lse[..., r0:r0 + br] = np.where(l > 0, m + np.log(np.where(l > 0, l, 1.0)), -np.inf)
    return o, lse


def plain_attention_forward(q, k, v, fmt: str, *, causal=False, softmax_scale=None, diagonal=None,
                            window=None, block_mask=None, block_size=None, dropout=None):
    """The plain same-format implementation whose error bounds the half-precision kernels'
    (flash-attention's rule): what torch's math backend computes in ``fmt`` ("float16" or
    "bfloat16") -- S = scale q k^T, each product summed in fp32 and S rounded to the format;
    P = softmax(S) in fp32, rounded (times ``dropout``'s factors, rounded again); o = P v summed
    in fp32, rounded. Inputs are the half values (any float array holding them); returns o as
    float64."""
    from .precision import round_to

    q, k, v = (np.asarray(x, dtype=np.float32) for x in (q, k, v))
    k, v = _grouped(q, k), _grouped(q, v)
    scale = np.float32(_scale(q.shape[-1], softmax_scale))
    s = round_to((q @ np.swapaxes(k, -1, -2)) * scale, fmt)
    s = _masked(s, q.shape[-2], k.shape[-2], causal, window, diagonal, block_mask, block_size)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    l = p.sum(axis=-1, keepdims=True)
    p = round_to(np.where(l > 0, p / np.where(l > 0, l, 1.0), 0.0), fmt)
    if dropout is not None:
        p = round_to(p * np.asarray(dropout, np.float32), fmt)
    return round_to(p @ v, fmt).astype(np.float64)


def plain_attention_backward(do, q, k, v, fmt: str, *, causal=False, softmax_scale=None, diagonal=None,
                             window=None, block_mask=None, block_size=None, dropout=None):
    """Gradients (dq, dk, dv) of attention in plain half-precision arithmetic: P = softmax of the
    fp32 scores rounded to ``fmt`` (the scores themselves not rounded, unlike
    ``plain_attention_forward``'s), then every matrix product summed in fp32 and rounded, o and
    dS = P (Z dP - rowsum(dO o)) rounded, P Z rounded (Z: ``dropout``'s factors, or 1); float64
    results."""
    from .precision import round_to

    do, q, k, v = (np.asarray(x, dtype=np.float32) for x in (do, q, k, v))
    h_kv = k.shape[-3]
    k, v = _grouped(q, k), _grouped(q, v)
    scale = np.float32(_scale(q.shape[-1], softmax_scale))
    p = round_to(attention_probs(q, k, causal=causal, softmax_scale=scale, dtype=np.float32,
                                 diagonal=diagonal, window=window, block_mask=block_mask,
                                 block_size=block_size), fmt)
    z = np.float32(1.0) if dropout is None else np.asarray(dropout, np.float32)
    pz = p if dropout is None else round_to(p * z, fmt)
    o = round_to(pz @ v, fmt)
    dv = round_to(_ungrouped(np.swapaxes(pz, -1, -2) @ do, h_kv), fmt)
    dp = round_to(do @ np.swapaxes(v, -1, -2), fmt)
    ds = round_to(p * (z * dp - round_to((do * o).sum(axis=-1, keepdims=True), fmt)), fmt)
    dq = round_to(scale * (ds @ k), fmt)
    dk = round_to(_ungrouped(scale * (np.swapaxes(ds, -1, -2) @ q), h_kv), fmt)
    return tuple(x.astype(np.float64) for x in (dq, dk, dv))


#: Philox4x32-10 (Salmon et al., SC'11, as cuRAND and flash-attention use it): the round
#: multipliers and the Weyl increments of the key.
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)


def philox4x32_10(counter, key) -> np.ndarray:
    """Philox4x32-10 of ``counter`` (..., 4) and ``key`` (..., 2), unsigned 32-bit words
    (broadcast against each other): ten rounds of two 32 x 32 -> 64-bit products, their high
    halves xored with the other words and the round key, the key bumped by the Weyl constants
    between rounds. Returns (..., 4) uint32."""
    c = np.asarray(counter, dtype=np.uint64) & 0xFFFFFFFF
    k = np.asarray(key, dtype=np.uint64) & 0xFFFFFFFF
    lead = np.broadcast_shapes(c.shape[:-1], k.shape[:-1])
    c, k = np.broadcast_to(c, lead + (4,)), np.broadcast_to(k, lead + (2,))
    x0, x1, x2, x3 = (c[..., i] for i in range(4))
    k0, k1 = k[..., 0], k[..., 1]
    mask = np.uint64(0xFFFFFFFF)
    for _ in range(10):
        p0 = np.uint64(PHILOX_M[0]) * x0
        p1 = np.uint64(PHILOX_M[1]) * x2
        x0, x1, x2, x3 = ((p1 >> np.uint64(32)) ^ x1 ^ k0, p1 & mask,
                          (p0 >> np.uint64(32)) ^ x3 ^ k1, p0 & mask)
        k0 = (k0 + np.uint64(PHILOX_W[0])) & mask
        k1 = (k1 + np.uint64(PHILOX_W[1])) & mask
    return np.stack([x0, x1, x2, x3], axis=-1).astype(np.uint32)


#: Dropout's randoms have 16 bits: p is applied as ``dropout_threshold(p)`` / 2^16.
DROPOUT_BITS = 16


def dropout_threshold(p: float) -> int:
    """The 16-bit random a score must reach to be kept: round(p 2^16), at most 2^16 - 1 for p < 1
    (so p < 1 keeps some scores), 2^16 for p >= 1 (none kept). The probability of keeping is
    1 - threshold / 2^16: p rounded to a multiple of 2^-16 (0.1 -> 0.100006)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    full = 1 << DROPOUT_BITS
    return full if p >= 1.0 else min(int(round(p * full)), full - 1)


def dropout_scale(p: float) -> float:
    """What dropout multiplies a kept probability by: 1 / (1 - p') for p' = p rounded as
    ``dropout_threshold`` (the kept fraction's expectation), so E[mask x scale] = 1 exactly."""
    return 1.0 / (1.0 - dropout_threshold(p) / (1 << DROPOUT_BITS))


def dropout_factors(keep, p: float) -> np.ndarray:
    """The factors dropout multiplies P by: ``dropout_scale(p)`` where ``keep``, else 0 (float64)."""
    return np.where(np.asarray(keep, bool), dropout_scale(p), 0.0)


#: SplitMix64's increment (2^64 / the golden ratio) and output multipliers (Steele et al., 2014).
SPLITMIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


def padding_dropout_seed(seed: int, b: int) -> int:
    """The dropout seed of batch entry ``b`` of a call with ``key_padding_mask``, whose entries
    run as calls of their own (B = 1, the kept keys gathered: ``numba_flash.padding``): output
    b + 1 of SplitMix64 seeded with ``seed``, so that the entries draw independent masks, and
    so do calls of nearby seeds. Entry b's mask is ``dropout_keep(padding_dropout_seed(seed,
    b), h, N_q, kept keys, p)``, its columns the kept keys in order. Sequence b of
    ``flash_attention_varlen`` (a call of its own too) takes the same seed: its mask is
    ``dropout_keep(padding_dropout_seed(seed, b), h, n_q_b, n_k_b, p)``."""
    m = (1 << 64) - 1
    z = (int(seed) + (int(b) + 1) * SPLITMIX[0]) & m
    z = ((z ^ (z >> 30)) * SPLITMIX[1]) & m
    z = ((z ^ (z >> 27)) * SPLITMIX[2]) & m
    return z ^ (z >> 31)


def dropout_keep(seed: int, bh: int, n_q: int, n_k: int, p: float) -> np.ndarray:
    """Boolean (N_q, N_k) of the scores dropout keeps in batch-head ``bh`` (b H + h), so that the
    forward and the backward regenerate the same mask from (seed, bh, r, c) without storing it.
    Score (r, c) takes a 16-bit random from Philox4x32-10 under key (the low and high 32 bits of
    ``seed``) at counter (4 (c // 16) + c % 8 // 2, 4 (r // 16) + r % 8 // 2, bh, r % 2): half c %
    2 (low 16 bits first) of word 2 (r % 16 // 8) + c % 16 // 8; it is kept iff that is at least
    ``dropout_threshold(p)``. One call thus covers 8 scores, rows r, r + 8 (r % 16 < 8) x keys c,
    c + 1, c + 8, c + 9 (c % 16 < 8, even): what one lane holds of two 8-key tiles of an mma C
    fragment, so the forward makes one call per 8 scores of a lane and the backward, whose
    fragments hold the transposed tile, two (one per row parity, using half of each)."""
    threshold = dropout_threshold(p)
    rows, cols = np.arange(n_q), np.arange(n_k)
    counter = np.zeros((n_q, n_k, 4), np.uint64)
    counter[..., 0] = (4 * (cols // 16) + cols % 8 // 2)[None, :]
    counter[..., 1] = (4 * (rows // 16) + rows % 8 // 2)[:, None]
    counter[..., 2] = bh
    counter[..., 3] = (rows % 2)[:, None]
    words = philox4x32_10(counter, (seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF))
    word = (2 * (rows % 16 // 8))[:, None] + (cols % 16 // 8)[None, :]
    picked = np.take_along_axis(words, word[..., None], axis=-1)[..., 0].astype(np.uint32)
    random16 = (picked >> (16 * (cols % 2)).astype(np.uint32)[None, :]) & np.uint32(0xFFFF)
    return random16 >= threshold
