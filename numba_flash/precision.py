"""The element formats the API takes -- float32, float16, bfloat16 -- read off any array, turned
into what the kernels take, and turned back into what the caller gets.

The half-precision kernels move 16-bit patterns (``uint16``; only their conversions and their
mma know which format the bits are), so a float16 or bfloat16 input reaches them as a uint16
view of the same memory, never a copy. Outputs come back in the input's format: NumPy float16
or ``ml_dtypes.bfloat16`` arrays for NumPy inputs, torch tensors of the input's dtype for
torch inputs, and for other device inputs numba device arrays of float16 -- or, for bfloat16,
of uint16 holding the bfloat16 bits (numba has no bfloat16 type; ``.view`` them in your
framework). torch is never imported here.
"""
from __future__ import annotations

import sys

import numpy as np

FORMATS = ("float32", "float16", "bfloat16")
HALF = ("float16", "bfloat16")
#: Bits of a NaN in both half formats (exponent all ones, mantissa all ones): the poison fill.
HALF_NAN_BITS = 0x7FFF
#: Bytes an element of each format.
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
_TYPESTR = {"<f4": "float32", "<f2": "float16"}


def is_torch_tensor(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def format_of(x) -> str | None:
    """x's element format, one of FORMATS, or None when it is none of them."""
    if is_torch_tensor(x):
        name = str(x.dtype).removeprefix("torch.")
        return name if name in FORMATS else None
    dtype = getattr(x, "dtype", None)
    if isinstance(dtype, np.dtype):
        return dtype.name if dtype.name in FORMATS else None
    cai = getattr(x, "__cuda_array_interface__", None)
    return None if cai is None else _TYPESTR.get(cai["typestr"])


def host_type(fmt: str):
    """The NumPy scalar type of ``fmt`` (bfloat16: ml_dtypes', which must be installed)."""
    if fmt == "bfloat16":
        try:
            import ml_dtypes
        except ImportError as error:   # pragma: no cover - ml_dtypes ships with the test extra
            raise ImportError("bfloat16 NumPy arrays need ml_dtypes: pip install ml_dtypes") from error
        return ml_dtypes.bfloat16
    return np.dtype(fmt).type


def kernel_source(x, fmt: str):
    """What to hand ``Memory.input`` for x: x itself (float32), or its 16-bit patterns -- a
    uint16 view (NumPy, numba), an int16 view (torch, whose bfloat16 has no array interface)."""
    if fmt not in HALF:
        return x
    if is_torch_tensor(x):
        return x.view(sys.modules["torch"].int16)
    if isinstance(x, np.ndarray) or hasattr(x, "view") and hasattr(x, "copy_to_host"):
        return x.view(np.uint16)
    from numba import cuda

    return cuda.as_cuda_array(x).view(np.uint16)


def bits(array):
    """A device (or simulator) array of 16-bit patterns as uint16, the kernels' type."""
    return array if array.dtype == np.uint16 else array.view(np.uint16)


def as_format(x, fmt: str):
    """A result of the kernels in the caller's format: uint16 patterns viewed as ``fmt``
    (NumPy; numba float16), anything else as it is (torch tensors, numba bfloat16 bits)."""
    if fmt not in HALF or getattr(x, "dtype", None) != np.uint16:
        return x
    if isinstance(x, np.ndarray):
        return x.view(host_type(fmt))
    return x.view(np.float16) if fmt == "float16" else x


def half_bits(x, dtype: str) -> np.ndarray:
    """float32 array x rounded to nearest even in the half format, as uint16 bits (host code,
    and the simulator's conversions)."""
    x = np.asarray(x, np.float32)
    if dtype == "float16":
        with np.errstate(over="ignore"):   # past 65504: inf, as the GPU's cvt.rn
            return x.astype(np.float16).view(np.uint16)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded).astype(np.uint16)


def half_values(bits, dtype: str) -> np.ndarray:
    """uint16 bits of the half format -> their values, exactly, as float32."""
    bits = np.asarray(bits, np.uint16)
    if dtype == "float16":
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def round_to(x, fmt: str) -> np.ndarray:
    """float32 copy of x rounded to nearest even in ``fmt`` (host code)."""
    return half_values(half_bits(x, fmt), fmt).reshape(np.shape(x))
