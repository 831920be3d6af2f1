"""Input checks for the public API. Each failure names the argument and says what to change;
all of them run before any allocation or launch, so nothing is half-written."""
from __future__ import annotations

import math
import numbers
import sys
from dataclasses import dataclass

import numpy as np

from simulator import spec
from simulator.blocks import BlockGrid, causal_diagonal, sparse_tiles
from simulator.spec import Mask
from simulator.tiling import Tiling

from .reference import dropout_scale, dropout_threshold

from . import precision
from .launch import smem_limit_bytes
from .memory import is_device_array

#: Largest head dimension the kernels accept (its tiles still fit the H200's 227 KB).
MAX_HEAD_DIM = 256
#: The kernels put batch * heads on a grid's y (or z) dimension.
MAX_GRID_Y = 65535
#: Threads a block may have, the bound a Tiling enforces and a ModelTiling does not.
MAX_THREADS = 1024


@dataclass(frozen=True)
class Shapes:
    """Problem size read off q (B, H, N_q, d) and k (B, H_kv, N_k, d); ``on_host``: NumPy inputs;
    ``precision``: their element format (``precision.FORMATS``); ``H_kv``: K/V heads (None: H)."""

    B: int
    H: int
    N_q: int
    N_k: int
    d: int
    on_host: bool
    precision: str = "float32"
    H_kv: int | None = None

    @property
    def half(self) -> bool:
        return self.precision in precision.HALF

    @property
    def group(self) -> int:
        """Query heads per K/V head (GQA / MQA; 1: one K/V head a query head)."""
        return 1 if self.H_kv is None else self.H // self.H_kv


def _torch_tensor(name, x) -> None:
    """Refuse what torch tensors cannot give the kernels, saying what to use instead (torch is
    never imported here)."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        return
    if x.requires_grad:
        raise TypeError(f"{name} requires grad, and this entry point records no autograd: use "
                        "numba_flash.torch.scaled_dot_product_attention (differentiable), or pass "
                        f"{name}.detach()")
    if not x.is_cuda:
        raise TypeError(f"{name} is a CPU torch tensor: pass {name}.numpy() or a CUDA tensor, or "
                        "use numba_flash.torch.scaled_dot_product_attention")


def _array_kind(name, x):
    if isinstance(x, np.ndarray):
        return "host"
    _torch_tensor(name, x)
    if is_device_array(x):
        return "device"
    raise TypeError(
        f"{name} must be a NumPy array or a CUDA device array (numba, torch, cupy), "
        f"got {type(x).__name__}"
    )


def _contiguous(x) -> bool:
    if isinstance(x, np.ndarray):
        return x.flags.c_contiguous
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return x.is_contiguous()
    if hasattr(x, "is_c_contiguous"):
        return x.is_c_contiguous()
    cai = x.__cuda_array_interface__
    strides = cai.get("strides")
    if strides is None:
        return True
    expected = np.dtype(cai["typestr"]).itemsize
    for extent, stride in zip(reversed(cai["shape"]), reversed(strides)):
        if extent > 1 and stride != expected:
            return False
        expected *= extent
    return True


def _dtype(x):
    if hasattr(x, "dtype") and isinstance(getattr(x, "dtype"), np.dtype):
        return x.dtype
    return np.dtype(x.__cuda_array_interface__["typestr"])


def dtype_name(x) -> str:
    """x's element type as its users name it: torch's (torch.bfloat16), NumPy's (float16,
    ml_dtypes' bfloat16), or, for a type only ``__cuda_array_interface__`` describes, its size
    (its typestr, '<V2' for a bfloat16, names no type)."""
    dtype = getattr(x, "dtype", None)
    if dtype is not None and not isinstance(dtype, np.dtype):
        return str(dtype)                                # torch.float16, cupy's own, ...
    dtype = _dtype(x)
    if dtype.type is np.void:                            # (ml_dtypes' bfloat16 has a type of its own)
        return f"an unnamed {dtype.itemsize}-byte type ({dtype.str}: bfloat16, if it is 2 bytes)"
    return dtype.name


def tensors(float32=(), **named) -> tuple[bool, str]:
    """Check kind (all host or all device), dtype (float32, float16 or bfloat16, one for all,
    float32 for the names in ``float32``) and contiguity; return (``on_host``, the format)."""
    kinds = {name: _array_kind(name, x) for name, x in named.items()}
    if len(set(kinds.values())) > 1:
        detail = ", ".join(f"{n} on {k}" for n, k in kinds.items())
        raise TypeError(f"inputs must be all NumPy arrays or all device arrays, got {detail}: "
                        "move them to the same side")
    formats = {}
    for name, x in named.items():
        fmt = precision.format_of(x)
        if fmt is None:
            raise TypeError(f"{name} has dtype {dtype_name(x)}; the kernels take float32, float16 "
                            f"or bfloat16: convert {name} to one of them first")
        if name in float32:
            if fmt != "float32":
                raise TypeError(f"{name} has dtype {dtype_name(x)}; it must be float32 (the kernels "
                                f"keep {name} in fp32 whatever the format of the other inputs)")
        else:
            formats[name] = fmt
        if not _contiguous(x):
            raise ValueError(f"{name} is not C-contiguous: pass a contiguous copy of {name} "
                             "(e.g. np.ascontiguousarray or .contiguous())")
    if len(set(formats.values())) > 1:
        detail = ", ".join(f"{n} {dtype_name(named[n])}" for n in formats)
        raise TypeError(f"inputs have mixed dtypes ({detail}): convert them all to one of "
                        "float32, float16 or bfloat16")
    return next(iter(kinds.values())) == "host", next(iter(formats.values()), "float32")


def attention_shapes(q, k, v, grouped: bool = False) -> Shapes:
    """Validate q (B, H, N_q, d), k and v (B, H, N_k, d) and return the sizes; with ``grouped``
    (GQA / MQA), k and v may have H_kv heads, H a multiple of H_kv."""
    on_host, fmt = tensors(q=q, k=k, v=v)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if len(x.shape) != 4:
            raise ValueError(f"{name} must be 4-D (batch, heads, seq_len, head_dim) as in torch "
                             f"SDPA, got shape {tuple(x.shape)}")
    B, H, n_q, d = (int(s) for s in q.shape)
    h_kv = int(k.shape[1])
    if int(k.shape[0]) != B or tuple(v.shape[:2]) != tuple(k.shape[:2]):
        raise ValueError(f"batch and heads of k {tuple(k.shape)} and v {tuple(v.shape)} must "
                         f"match each other and q's batch {tuple(q.shape)}")
    if h_kv != H and not grouped:
        raise ValueError(f"heads of k, v ({h_kv}) must equal q's ({H}) here; grouped K/V heads "
                         "(GQA / MQA) run on flash_attention / flash_attention_backward with "
                         "algorithm='fa2'")
    if h_kv == 0 or H % h_kv:
        raise ValueError(f"q has {H} heads and k, v have {h_kv}: for grouped-query attention q's "
                         "heads must be a multiple of k's and v's (H = group * H_kv)")
    if int(k.shape[3]) != d or int(v.shape[3]) != d:
        raise ValueError(f"head_dim of k ({k.shape[3]}) and v ({v.shape[3]}) must equal q's ({d})")
    if int(v.shape[2]) != int(k.shape[2]):
        raise ValueError(f"k and v must have the same seq_len, got {k.shape[2]} and {v.shape[2]}")
    n_k = int(k.shape[2])
    for label, value in (("batch", B), ("heads", H), ("q seq_len", n_q), ("k seq_len", n_k),
                         ("head_dim", d)):
        if value == 0:
            raise ValueError(f"{label} is 0: empty inputs have nothing to attend; pass at least 1")
    if B * H > MAX_GRID_Y:
        raise ValueError(f"batch * heads = {B * H} exceeds the {MAX_GRID_Y} thread-block rows a "
                         "CUDA grid allows: split the batch into calls of fewer sequences")
    if d > MAX_HEAD_DIM:
        raise ValueError(f"head_dim d={d} is larger than the kernels support ({MAX_HEAD_DIM}): "
                         "split the heads")
    return Shapes(B, H, n_q, n_k, d, on_host, fmt, None if h_kv == H else h_kv)


def backward_shapes(do, q, k, v, o, saved_name, saved, saved_shape, grouped: bool = False) -> Shapes:
    """``attention_shapes`` plus the backward's extra inputs: do and o shaped like q, and the
    saved tensor (lse or p) shaped ``saved_shape(shapes)``; all on one side, contiguous, in q's
    format (lse: float32)."""
    shp = attention_shapes(q, k, v, grouped)
    tensors(("lse",), do=do, q=q, k=k, v=v, o=o, **{saved_name: saved})
    same_shape("do", do, q.shape)
    same_shape("o", o, q.shape)
    same_shape(saved_name, saved, saved_shape(shp))
    return shp


def same_shape(name, x, shape) -> None:
    if tuple(int(s) for s in x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(x.shape)}")


def softmax_scale(value, d: int):
    """1/sqrt(d) when None; else a finite positive real number, returned as float32."""
    if value is None:
        return np.float32(1.0 / math.sqrt(d))
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"softmax_scale must be a real number or None, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"softmax_scale must be finite and positive, got {value}")
    with np.errstate(over="ignore", under="ignore"):
        as_f32 = np.float32(value)
        in_log2_units = np.float32(value * 1.4426950408889634)
    if not (np.isfinite(in_log2_units) and as_f32 > 0):
        raise ValueError(f"softmax_scale={value} is outside float32's range once the kernels "
                         "take it in float32 (and times log2(e)): choose a value in ~[1e-37, 1e38]")
    return as_f32


def flag(name, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def diagonal(value, causal: bool, n_q: int, n_k: int) -> int:
    """The causal mask's diagonal to pass the kernels (row r sees key c iff c <= r + diagonal):
    N_k - N_q (bottom-right) when None, else ``value``, an int given with ``causal=True``;
    clamped to [-N_q, N_k], the same mask (``simulator.blocks.causal_diagonal``)."""
    if value is not None:
        _int("diagonal", value, "an int or None")
        if not causal:
            raise ValueError(f"diagonal={value} is the causal mask's diagonal: pass causal=True "
                             "with it (or leave diagonal=None)")
        value = int(value)
    return causal_diagonal(n_q, n_k, value)


def _int(name, value, expected="an int") -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {expected}, got {value!r}")
    return int(value)


#: What the kernels take for no dropout (their dropout arguments are then not read).
NO_DROPOUT = (0, 0, 0, np.float32(1.0))


def dropout(p, seed) -> tuple:
    """The kernels' dropout arguments (seed_lo, seed_hi, keep_from, rp) for ``dropout_p`` = p, a
    float in [0, 1) (applied rounded to a multiple of 2^-16: ``reference.dropout_threshold``, and
    rp = ``reference.dropout_scale``), and ``dropout_seed``, an int in [0, 2^64) (needed when p > 0: the backward
    must be given the same one); ``NO_DROPOUT`` for p = 0."""
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, numbers.Real) or not 0.0 <= p < 1.0:
        raise ValueError(f"dropout_p must be a float in [0, 1), got {p!r}")
    if p == 0.0:
        if seed is not None:
            _int("dropout_seed", seed, "an int or None")
        return NO_DROPOUT
    if seed is None:
        raise ValueError("dropout_p > 0 needs a dropout_seed (an int in [0, 2**64)): the backward "
                         "regenerates the forward's mask from it, so pass it to both")
    seed = _int("dropout_seed", seed, "an int in [0, 2**64)")
    if not 0 <= seed < 2 ** 64:
        raise ValueError(f"dropout_seed must be in [0, 2**64), got {seed}")
    return (seed & 0xFFFFFFFF, seed >> 32, dropout_threshold(float(p)), np.float32(dropout_scale(float(p))))


def band(causal: bool, window, diagonal_value, n_q: int, n_k: int) -> tuple[Mask, int, int]:
    """(Mask, hi, lo) of ``simulator.spec.band`` for the API's ``causal``, ``window`` (None or
    flash-attention's ``window_size`` pair (left, right), -1 for an unbounded side) and
    ``diagonal`` (an int, with causal or a window; None: N_k - N_q, bottom-right)."""
    if window is not None:
        if not isinstance(window, (tuple, list)) or len(window) != 2:
            raise TypeError(f"window must be None or a pair (left, right) of ints, got {window!r}")
        window = tuple(_int(f"window[{i}]", w) for i, w in enumerate(window))
        if min(window) < -1:
            raise ValueError(f"window={window}: each side is a number of keys >= 0, or -1 for "
                             "no bound on that side (flash-attention's window_size)")
        if causal and window[1] > 0:
            raise ValueError(f"window={window} with causal=True: causal already ends the band at "
                             f"the diagonal; pass window=({window[0]}, 0) or causal=False")
        if window == (-1, -1):
            window = None
    if diagonal_value is not None:
        _int("diagonal", diagonal_value, "an int or None")
        if not causal and window is None:
            raise ValueError(f"diagonal={diagonal_value} places the causal mask or the window: "
                             "pass causal=True or a window with it (or leave diagonal=None)")
        diagonal_value = int(diagonal_value)
    return spec.band(n_q, n_k, causal, window, diagonal_value)


#: FlexAttention's default block of a block mask (queries x keys).
BLOCK_SIZE = (128, 128)


def block_mask_key(value):
    """A hashable stand-in for a block mask's contents, for a launch plan's key (``plans.key``):
    None for None; (shape, packed bits) for a host mask (NumPy, or a CPU torch tensor) of
    booleans; ``UNKEYED`` for anything else (a device tensor, other dtypes: the checked path
    reads and judges those)."""
    if value is None:
        return None
    if hasattr(value, "is_cuda"):
        if value.is_cuda:
            return UNKEYED
        value = value.numpy()
    if not isinstance(value, np.ndarray) or value.dtype != np.bool_:
        return UNKEYED
    return value.shape, np.packbits(value).tobytes()


#: ``block_mask_key`` of a mask no plan can key.
UNKEYED = object()


def block_mask(value, block_size, n_q: int, n_k: int):
    """(mask, (bq, bk)) for the API's ``block_mask`` (None: dense, returns (None, None)) and
    ``block_size``: the mask as (ceil(N_q / bq), ceil(N_k / bk)) NumPy booleans (from NumPy,
    nested lists or a torch tensor on any device), before any launch."""
    if value is None:
        return None, None
    if not isinstance(block_size, (tuple, list)) or len(block_size) != 2:
        raise TypeError(f"block_size must be a pair (queries, keys) of ints, got {block_size!r}")
    bq, bk = (_int(f"block_size[{i}]", x) for i, x in enumerate(block_size))
    if bq < 1 or bk < 1:
        raise ValueError(f"block_size must be two positive ints, got {(bq, bk)}")
    if hasattr(value, "detach"):              # a torch tensor, wherever it lives
        value = value.detach().cpu().numpy()
    on = np.asarray(value)
    if on.dtype != np.bool_:
        raise TypeError(f"block_mask must hold booleans (True: the block is computed), got "
                        f"dtype {on.dtype}")
    want = (-(-n_q // bq), -(-n_k // bk))
    if on.shape != want:
        raise ValueError(f"block_mask must have shape {want} (ceil(N_q / {bq}), ceil(N_k / {bk})) "
                         f"for block_size={(bq, bk)}, got {on.shape}")
    return on, (bq, bk)


def block_lists(on, block_size, tiling: Tiling, n_q: int, n_k: int, causal: bool, window,
                diagonal, by_key: bool) -> tuple[np.ndarray, np.ndarray]:
    """The block-sparse kernels' (ptr, idx) int64 lists for ``tiling``: the band's block pairs
    whose tile the mask ``on`` keeps, per row block (forward) or per K/V block (``by_key``:
    backward); ``simulator.blocks.BlockGrid``'s."""
    grid = BlockGrid(n_q, n_k, tiling.Br, tiling.Bc, causal, diagonal, window,
                     tiles=sparse_tiles(on, block_size, n_q, n_k, tiling.Br, tiling.Bc))
    return grid.column_lists() if by_key else grid.row_lists()


def tiling_for(value, kernels, d: int, n_q: int | None = None, n_k: int | None = None,
               dropout: bool = False, block_size: tuple[int, int] | None = None) -> Tiling:
    """The tiling to launch ``kernels`` with: ``value`` checked against the device's shared
    memory (with ``dropout``, against dropout's tile sides: ``Tiling.check_dropout``; with a
    block mask's ``block_size``, each tile inside one block: ``Tiling.suits_blocks``), or, when
    None, the smallest of their defaults (``Tiling.kernel_default``, cut to sequences of
    ``n_q`` queries and ``n_k`` keys, with ``dropout`` sides dropout can use, nested in the
    blocks); each kernel's shared-memory elements are its own size
    (``simulator.tiling.ELEMENT_BYTES``)."""
    limit = smem_limit_bytes()
    if value is None:
        try:
            choices = [Tiling.kernel_default(kernel, d, None, limit, n_q, n_k, dropout, block_size)
                       for kernel in kernels]
        except ValueError as err:
            if block_size is None:
                raise
            raise ValueError(f"block_size={tuple(block_size)}: no tiling of the kernels nests in "
                             f"such blocks ({err}); choose block sides that are multiples of 16 "
                             "(FlexAttention's default is 128 x 128)") from None
        return min(choices, key=lambda t: t.Br * t.Bc)
    if not isinstance(value, Tiling):
        raise TypeError(f"tiling must be a numba_flash.Tiling or None, got {type(value).__name__}")
    if value.threads > MAX_THREADS:
        raise ValueError(f"tiling={value!r} needs {value.threads} threads a block (a model-only "
                         f"tiling); the kernels launch at most {MAX_THREADS}: choose Br * Bc <= 16384")
    for kernel in kernels:
        value.check_fits(kernel, d, None, limit)
    if dropout:
        value.check_dropout()
    if block_size is not None and not value.suits_blocks(block_size):
        raise ValueError(f"tiling={value!r} with block_size={tuple(block_size)}: every tile must "
                         f"lie in one block, so Br must divide {block_size[0]} and Bc "
                         f"{block_size[1]}")
    return value
