"""A *case*: one call pattern of our kernels (method, passes, shape, tiling) that can be run on
the GPU, counted under the CUDA simulator, profiled by ncu in a child process, and predicted by
the simulator -- the same description for all four, so they cannot drift apart.

FLOPs (written beside every timing): ``4 B H N_q N_k d`` for the forward pass, 2.5x that for the
backward pass, half of it when causal (the paper's and flash-attention's benchmark convention).
A sliding window or a block mask is not discounted there; ``Case.band_flops`` counts the work
the mask really leaves: 4 d per unmasked score forward, 2.5x that backward (``visible_scores``).

Sliding windows (``window=(left, right)``, flash-attention's ``window_size``: row r sees keys
r - left <= c <= r + right, -1 = unbounded side, causal ends it at r), grouped K/V heads
(``kv_heads``: GQA / MQA, H a multiple of it) and block masks (``block_mask``: block-sparse
FlashAttention, the paper's Algorithm 5; (ceil(N / bq), ceil(N / bk)) booleans for blocks of
``block_size`` = (bq, bk) scores, default 128 x 128; ``band_flops`` counts the kept blocks'
scores) run on method "fa2" only.

Dropout (``dropout_p``, seed ``DROPOUT_SEED``) and key padding (``padding`` = P: batch entry b
keeps its first ``key_lengths()[b]`` keys, drawn uniformly from [N - P, N] by a generator seeded
with ``PADDING_SEED``, the paper's Fig. 3 setting with P = 20; the rest are padding, passed as
``key_padding_mask``) run on method "fa2" too; padding without a causal mask, window or block
mask (the paper's setting), and ``band_flops`` counts only the kept keys' scores.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import cached_property

import numpy as np

from simulator.blocks import band_scores, ceil_div
from simulator.spec import band
from simulator.tiling import (BACKWARD_KERNELS, FORWARD_KERNELS, HALF_BACKWARD_KERNELS,
                              HALF_FORWARD_KERNELS)

#: Our kernels: standard attention and FlashAttention in the paper's (fa1) or FA2 loop order,
#: on tensor cores (fa2, 3xTF32) or FFMA (fa2_fma), and the fp32 forward from three fp16
#: products (fa2_fp16x3, float32 only); the names are flash_attention's algorithms.
METHODS = ("standard", "fa1", "fa2", "fa2_fma", "fa2_fp16x3")
#: flash_attention_backward's algorithm after each flash method's forward: tensor cores after the
#: tensor-core forwards (fa2_fp16x3: its own, on the same fp16 parts), FFMA after the others.
#: simulator.predict's algorithms for each method are ``FORWARD_ALGORITHMS`` and
#: ``BACKWARD_ALGORITHMS`` (dQ by atomics; ``deterministic`` cases run the FFMA kernels,
#: "flash_backward_deterministic").
BACKWARD_ALGORITHM = {"fa1": "fa2_fma", "fa2": "fa2", "fa2_fma": "fa2_fma", "fa2_fp16x3": "fa2_fp16x3"}
#: simulator.predict's algorithm of each flash method's forward in float32.
FORWARD_ALGORITHMS = {**FORWARD_KERNELS, "fa2_fp16x3": "flash_forward_fp16x3"}
#: ... and of each flash_attention_backward algorithm in float32.
BACKWARD_ALGORITHMS = {**BACKWARD_KERNELS, "fa2_fp16x3": "flash_backward_fp16x3"}
#: "fwd": the forward call; "fwd_bwd": forward then backward, as in training.
PASSES = ("fwd", "fwd_bwd")
BACKWARD_FLOPS_FACTOR = 2.5
#: Input formats (numba_flash.precision.FORMATS); half precision runs the methods of
#: HALF_METHODS (fa1: its forward only; its backward would widen the inputs to fp32).
DTYPES = ("float32", "float16", "bfloat16")
HALF_METHODS = ("standard", "fa1", "fa2")
#: Bytes an element of each.
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
#: A block mask's default block (queries x keys): FlexAttention's, the API's default.
BLOCK_SIZE = (128, 128)
#: Dropout's seed in every call of a case with ``dropout_p`` (one seed: timing needs no fresh
#: masks), and the seed of the generator that draws a padded case's key lengths.
DROPOUT_SEED = 0
PADDING_SEED = 0


def with_backward(forward: float, passes: str) -> float:
    """The FLOPs of ``passes`` from the forward's: x (1 + 2.5) with the backward."""
    return forward * (1.0 + BACKWARD_FLOPS_FACTOR) if passes == "fwd_bwd" else forward


def attention_flops(B: int, H: int, N: int, d: int, passes: str, causal: bool) -> float:
    """FLOPs by the benchmark convention above (N_q = N_k = N)."""
    return with_backward(4.0 * B * H * N * N * d, passes) * (0.5 if causal else 1.0)


def visible_scores(N: int, causal: bool, window: tuple[int, int] | None = None,
                   block_mask=None, block_size: tuple[int, int] = BLOCK_SIZE) -> int:
    """Unmasked scores of one (batch, head) pair, N_q = N_k = N (diagonal 0): row r sees keys
    max(0, r - left) <= c <= min(N - 1, r + right), right = 0 when causal, -1 = no bound; with
    a ``block_mask`` of ``block_size`` = (bq, bk) blocks, only those of the blocks it keeps
    (each block's share of the band: the band of its rows and keys, its diagonal shifted by
    the block's corner, a bq - b bk)."""
    mask, hi, lo = band(N, N, causal, window, None)
    if block_mask is None:
        return band_scores(N, N, mask.upper, mask.lower, hi, lo)
    bq, bk = block_size
    total = 0
    for a, b in zip(*np.nonzero(np.asarray(block_mask, bool))):
        shift = int(a) * bq - int(b) * bk
        total += band_scores(min(bq, N - a * bq), min(bk, N - b * bk), mask.upper, mask.lower,
                             hi + shift, lo + shift)
    return total


def band_flops(B: int, H: int, N: int, d: int, passes: str, causal: bool,
               window: tuple[int, int] | None = None, block_mask=None,
               block_size: tuple[int, int] = BLOCK_SIZE) -> float:
    """FLOPs of the unmasked scores only: 4 d each forward, x (1 + 2.5) with the backward."""
    return with_backward(4.0 * d * B * H * visible_scores(N, causal, window, block_mask, block_size),
                         passes)


@dataclass(frozen=True)
class Case:
    """One measured call pattern.  ``tiling`` is (Br, Bc) or None for the kernels' default;
    ``dtype``: the inputs' format (float16 / bfloat16: HALF_METHODS); ``window``: (left, right)
    or None; ``kv_heads``: K/V heads (None: H); ``block_mask``: (ceil(N / bq), ceil(N / bk))
    booleans (any 2-D array; stored as a tuple of tuples, left out of the repr) for blocks of
    ``block_size`` (None: 128 x 128; given only with a mask); all three method "fa2" only,
    not deterministic."""

    method: str
    passes: str
    B: int
    H: int
    N: int
    d: int
    causal: bool = False
    tiling: tuple[int, int] | None = None
    deterministic: bool = False
    dtype: str = "float32"
    window: tuple[int, int] | None = None
    kv_heads: int | None = None
    block_mask: tuple[tuple[bool, ...], ...] | None = field(default=None, repr=False)
    block_size: tuple[int, int] | None = None
    dropout_p: float = 0.0
    padding: int = 0

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.dtype != "float32" and (self.method not in HALF_METHODS
                                        or (self.method == "fa1" and self.passes == "fwd_bwd")):
            raise ValueError(f"{self.dtype} runs on methods {HALF_METHODS} (fa1: passes 'fwd'), "
                             f"got {self.method!r} {self.passes!r}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.passes not in PASSES:
            raise ValueError(f"passes must be one of {PASSES}, got {self.passes!r}")
        if self.tiling is not None:
            object.__setattr__(self, "tiling", tuple(self.tiling))
        self._check_blocks()
        self._check_band_and_heads()
        self._check_dropout_and_padding()

    def _check_blocks(self):
        """Normalise and check ``block_mask`` and ``block_size`` (stored as tuples)."""
        if self.block_mask is None:
            if self.block_size is not None:
                raise ValueError("block_size sizes the blocks of block_mask: give it with a block_mask")
            return
        size = tuple(BLOCK_SIZE if self.block_size is None else self.block_size)
        if len(size) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in size):
            raise ValueError(f"block_size must be (bq, bk), positive ints, got {self.block_size!r}")
        on = np.asarray(self.block_mask)
        want = (ceil_div(self.N, size[0]), ceil_div(self.N, size[1]))
        if on.dtype != np.bool_ or on.shape != want:
            raise ValueError(f"block_mask must be {want} booleans (ceil(N / bq), ceil(N / bk)) for "
                             f"block_size={size}, got {on.shape} of {on.dtype}")
        object.__setattr__(self, "block_size", size)
        object.__setattr__(self, "block_mask", tuple(tuple(bool(x) for x in row) for row in on))

    def _check_band_and_heads(self):
        """Normalise and check ``window`` and ``kv_heads`` ((-1, -1) and H are None: the same call)."""
        window, kv_heads = self.window, self.kv_heads
        if window is not None:
            window = tuple(window)
            if len(window) != 2 or not all(isinstance(w, int) and not isinstance(w, bool) and w >= -1
                                           for w in window):
                raise ValueError(f"window must be None or (left, right), ints >= -1, got {self.window!r}")
            if self.causal and window[1] > 0:
                raise ValueError(f"window={window} with causal: the right side must be 0 or -1")
            window = None if window == (-1, -1) else window
        if kv_heads is not None:
            if not isinstance(kv_heads, int) or isinstance(kv_heads, bool) or kv_heads < 1 or self.H % kv_heads:
                raise ValueError(f"kv_heads must divide H={self.H}, got {kv_heads!r}")
            kv_heads = None if kv_heads == self.H else kv_heads
        if ((window is not None or kv_heads is not None or self.block_mask is not None)
                and (self.method != "fa2" or self.deterministic)):
            raise ValueError(f"window, kv_heads and block_mask run on method 'fa2' (not deterministic), got "
                             f"{self.method!r}{' deterministic' if self.deterministic else ''}")
        object.__setattr__(self, "window", window)
        object.__setattr__(self, "kv_heads", kv_heads)

    def _check_dropout_and_padding(self):
        """Check ``dropout_p`` (a float in [0, 1)) and ``padding`` (an int in [0, N))."""
        if isinstance(self.dropout_p, bool) or not isinstance(self.dropout_p, (int, float)) \
                or not 0.0 <= self.dropout_p < 1.0:
            raise ValueError(f"dropout_p must be a float in [0, 1), got {self.dropout_p!r}")
        object.__setattr__(self, "dropout_p", float(self.dropout_p))
        if isinstance(self.padding, bool) or not isinstance(self.padding, int) or not 0 <= self.padding < self.N:
            raise ValueError(f"padding must be an int in [0, N={self.N}), got {self.padding!r}")
        if (self.dropout_p or self.padding) and (self.method != "fa2" or self.deterministic):
            raise ValueError("dropout_p and padding run on method 'fa2' (not deterministic), got "
                             f"{self.method!r}{' deterministic' if self.deterministic else ''}")
        if self.padding and (self.causal or self.window is not None or self.block_mask is not None):
            raise ValueError("padding runs without causal, window or block_mask (the paper's Fig. 3 "
                             "setting): pass padding=0 or drop the mask")

    @property
    def label(self) -> str:
        parts = [self.method, self.passes, f"B{self.B}H{self.H}N{self.N}d{self.d}"]
        if self.causal:
            parts.append("causal")
        if self.tiling:
            parts.append(f"Br{self.tiling[0]}Bc{self.tiling[1]}")
        if self.deterministic:
            parts.append("deterministic")
        if self.dtype != "float32":
            parts.append(self.dtype)
        if self.window is not None:
            parts.append(f"window{self.window[0]}_{self.window[1]}")
        if self.kv_heads is not None:
            parts.append(f"kv{self.kv_heads}")
        if self.block_mask is not None:   # the mask's bits, row by row, packed as hex
            bits = np.packbits(self.block_mask_array.ravel()).tobytes().hex()
            parts.append(f"blocks{self.block_size[0]}x{self.block_size[1]}_{bits}")
        if self.dropout_p:
            parts.append(f"dropout{self.dropout_p!r}")
        if self.padding:
            parts.append(f"pad{self.padding}")
        return "/".join(parts)

    @classmethod
    def from_label(cls, label: str) -> "Case":
        """The case whose ``label`` this is."""
        import re

        method, passes, shape, *flags = label.split("/")
        B, H, N, d = (int(x) for x in re.fullmatch(r"B(\d+)H(\d+)N(\d+)d(\d+)", shape).groups())
        tiling = next((tuple(int(x) for x in re.fullmatch(r"Br(\d+)Bc(\d+)", f).groups())
                       for f in flags if f.startswith("Br")), None)
        dtype = next((f for f in flags if f in DTYPES), "float32")
        window = next((tuple(int(x) for x in re.fullmatch(r"window(-?\d+)_(-?\d+)", f).groups())
                       for f in flags if f.startswith("window")), None)
        kv_heads = next((int(f[2:]) for f in flags if re.fullmatch(r"kv\d+", f)), None)
        blocks = next((re.fullmatch(r"blocks(\d+)x(\d+)_([0-9a-f]*)", f).groups()
                       for f in flags if f.startswith("blocks")), None)
        sparse = {}
        if blocks is not None:
            bq, bk, bits = int(blocks[0]), int(blocks[1]), blocks[2]
            shape = (ceil_div(N, bq), ceil_div(N, bk))
            on = np.unpackbits(np.frombuffer(bytes.fromhex(bits), np.uint8))[:math.prod(shape)]
            sparse = dict(block_mask=on.astype(bool).reshape(shape), block_size=(bq, bk))
        dropout_p = next((float(f[7:]) for f in flags if f.startswith("dropout")), 0.0)
        padding = next((int(f[3:]) for f in flags if re.fullmatch(r"pad\d+", f)), 0)
        return cls(method, passes, B, H, N, d, causal="causal" in flags, tiling=tiling,
                   deterministic="deterministic" in flags, dtype=dtype, window=window,
                   kv_heads=kv_heads, dropout_p=dropout_p, padding=padding, **sparse)

    @property
    def flops(self) -> float:
        """By the benchmark convention (a window not discounted; see ``band_flops``)."""
        return attention_flops(self.B, self.H, self.N, self.d, self.passes, self.causal)

    @property
    def band_flops(self) -> float:
        """FLOPs of the scores the mask leaves (causal, window and block mask counted exactly;
        with ``padding``, the kept keys' scores: 4 d H N (sum of the key lengths) forward)."""
        if self.padding:
            return with_backward(4.0 * self.d * self.H * self.N * float(self.key_lengths().sum()),
                                 self.passes)
        return band_flops(self.B, self.H, self.N, self.d, self.passes, self.causal, self.window,
                          self.block_mask, self.block_size or BLOCK_SIZE)

    def key_lengths(self) -> np.ndarray:
        """(B,) int64: the keys each batch entry keeps, N - U with U uniform in [0, padding]
        (a generator seeded with ``PADDING_SEED``); N each without padding."""
        return self._padding[0]

    def key_padding_mask(self) -> np.ndarray | None:
        """(B, N) bool, True on padding keys (the API's ``key_padding_mask``); None without."""
        return self._padding[1]

    @cached_property
    def _padding(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(key lengths, key padding mask), drawn once: the API takes the mask on every call."""
        if not self.padding:
            return np.full(self.B, self.N, np.int64), None
        rng = np.random.default_rng(PADDING_SEED)
        lengths = self.N - rng.integers(0, self.padding, size=self.B, endpoint=True)
        return lengths, np.arange(self.N)[None, :] >= lengths[:, None]

    @cached_property
    def block_mask_array(self) -> np.ndarray | None:
        """``block_mask`` as (ceil(N / bq), ceil(N / bk)) NumPy booleans (made once: the API
        takes it on every call), or None."""
        return None if self.block_mask is None else np.array(self.block_mask, dtype=bool)

    @property
    def block_fraction(self) -> float | None:
        """s, the fraction of blocks the block mask keeps (Proposition 4's); None without one."""
        return None if self.block_mask is None else float(self.block_mask_array.mean())

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """q's (and do's, o's) shape."""
        return (self.B, self.H, self.N, self.d)

    @property
    def kv_shape(self) -> tuple[int, int, int, int]:
        """k's and v's shape: ``kv_heads`` heads (GQA / MQA), else H."""
        return (self.B, self.kv_heads or self.H, self.N, self.d)

    def mask_kwargs(self) -> dict:
        """The API's mask arguments: causal, and window, block_mask / block_size, dropout_p /
        dropout_seed and key_padding_mask only when set (the methods without them take none)."""
        kwargs = {"causal": self.causal, **({"window": self.window} if self.window is not None else {})}
        if self.block_mask is not None:
            kwargs.update(block_mask=self.block_mask_array, block_size=self.block_size)
        if self.dropout_p:
            kwargs.update(dropout_p=self.dropout_p, dropout_seed=DROPOUT_SEED)
        if self.padding:
            kwargs.update(key_padding_mask=self.key_padding_mask())
        return kwargs

    def simulator_algorithms(self) -> list[str]:
        """The ``simulator.predict`` algorithms whose traffic this case's calls add up to."""
        if self.method == "standard":
            forward, backward = "standard_forward", "standard_backward"
        else:
            half = self.dtype != "float32"
            forward = (HALF_FORWARD_KERNELS if half else FORWARD_ALGORITHMS)[self.method]
            if self.passes == "fwd":
                return [forward]
            backward = ("flash_backward_deterministic" if self.deterministic
                        else (HALF_BACKWARD_KERNELS if half else BACKWARD_ALGORITHMS)[BACKWARD_ALGORITHM[self.method]])
        return [forward, backward] if self.passes == "fwd_bwd" else [forward]

    def tiling_object(self):
        if self.tiling is None:
            return None
        from simulator.tiling import Tiling

        return Tiling(*self.tiling)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Case":
        return cls(**data)


# ---- inputs ---------------------------------------------------------------------------------
def _input_shape(case: Case, name: str) -> tuple[int, int, int, int]:
    return case.kv_shape if name in ("k", "v") else case.shape


def host_inputs(case: Case, seed: int) -> dict[str, np.ndarray]:
    """q, do (B, H, N, d) and k, v (B, H_kv, N, d) as NumPy arrays, standard normal, in the
    case's dtype."""
    from numba_flash.precision import host_type

    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(_input_shape(case, name), dtype=np.float32).astype(host_type(case.dtype))
            for name in ("q", "k", "v", "do")}


def device_inputs(case: Case, seed: int) -> dict:
    """q, k, v, do on the GPU: torch tensors when torch is installed (fast to fill, and SDPA can
    take them), else Numba device arrays."""
    try:
        import torch
    except ImportError:
        from numba import cuda

        return {name: cuda.to_device(x) for name, x in host_inputs(case, seed).items()}
    generator = torch.Generator(device="cuda").manual_seed(seed)
    dtype = getattr(torch, case.dtype)
    return {name: torch.randn(_input_shape(case, name), device="cuda", dtype=torch.float32,
                              generator=generator).to(dtype)
            for name in ("q", "k", "v", "do")}


# ---- running our kernels ----------------------------------------------------------------------
def run_case(case: Case, inputs: dict) -> dict:
    """Run the case's calls once on ``inputs``; returns the outputs by name (o, and dq, dk, dv
    for fwd_bwd).  Works for NumPy (CUDA simulator) and device inputs alike."""
    import numba_flash

    q, k, v, do = inputs["q"], inputs["k"], inputs["v"], inputs["do"]
    tiling = case.tiling_object()
    if case.method == "standard":
        if case.passes == "fwd":
            return {"o": numba_flash.standard_attention(q, k, v, causal=case.causal, tiling=tiling)}
        o, p = numba_flash.standard_attention(q, k, v, causal=case.causal, return_probs=True, tiling=tiling)
        dq, dk, dv = numba_flash.standard_attention_backward(do, q, k, v, o, p, causal=case.causal, tiling=tiling)
        return {"o": o, "dq": dq, "dk": dk, "dv": dv}
    mask = case.mask_kwargs()
    if case.passes == "fwd":
        return {"o": numba_flash.flash_attention(q, k, v, **mask, algorithm=case.method, tiling=tiling)}
    o, lse = numba_flash.flash_attention(q, k, v, **mask, algorithm=case.method,
                                         tiling=tiling, return_lse=True)
    dq, dk, dv = numba_flash.flash_attention_backward(do, q, k, v, o, lse, **mask, tiling=tiling,
                                                      deterministic=case.deterministic,
                                                      algorithm=BACKWARD_ALGORITHM[case.method])
    return {"o": o, "dq": dq, "dk": dk, "dv": dv}
