"""NumPy arrays in and out of the C API: dtype conversion, shape checks, pointers.

Inputs:
  - BF16 activations (x): `ml_dtypes.bfloat16` or `uint16` (the raw BF16 bits) are passed as they
    are; `float32` is converted to BF16 with round-to-nearest-even (NaN stays NaN, overflow
    becomes ±Inf), the rounding fp4cl's own float→BF16 conversion uses. Other dtypes are refused
    (float64 would be rounded twice on the way to BF16; convert it yourself).
  - topk_ids: any integer dtype whose values fit int32; topk_weights, router_logits: float32 (or
    float16/float64, converted to float32).
  - Any strides: a non-contiguous input is copied to a C-contiguous one.
Outputs are new C-contiguous arrays (BF16 as `ml_dtypes.bfloat16`, or float32), or, when the
caller passes `out=`, that array, which must be C-contiguous with exactly the right dtype and
shape (it is written in place, so nothing is converted or copied).
"""

import ctypes

import ml_dtypes
import numpy as np

from .errors import InvalidArgumentError

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"bf16": 0, "fp32": 1}  # fp4cl_dtype
OUTPUT_NUMPY = {0: BF16, 1: np.dtype(np.float32)}


def dtype_code(name, what):
    if isinstance(name, str) and name.lower() in DTYPES:
        return DTYPES[name.lower()]
    raise InvalidArgumentError(f"{what}: output dtype {name!r}; expected 'bf16' or 'fp32'")


def float32_to_bf16_bits(a):
    """uint16 BF16 bits of a float32 array: round to nearest, ties to even; NaN stays a quiet NaN."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) | np.uint32(0x40)).astype(np.uint16)
    return rounded


def _shaped(a, name, shape, what):
    """Checks a 2-D array's shape against `shape` (None entries: any). Returns the array."""
    if a.ndim != 2:
        raise InvalidArgumentError(
            f"{what}: {name} has shape {a.shape}; expected a 2-D array [{', '.join(_dim(d) for d in shape)}]")
    for axis, (got, want) in enumerate(zip(a.shape, shape)):
        if want is not None and got != want:
            raise InvalidArgumentError(
                f"{what}: {name} has shape {a.shape}; expected [{', '.join(_dim(d) for d in shape)}] "
                f"(dimension {axis} is {got}, expected {want})")
    return a


def _dim(d):
    return "*" if d is None else str(d)


def bf16_input(x, name, shape, what):
    """x as C-contiguous uint16 BF16 bits of `shape` (a 2-D array; a 1-D one is one row)."""
    a = np.asarray(x)
    if a.dtype == BF16 or a.dtype == np.uint16:
        bits = a.view(np.uint16) if a.flags.c_contiguous else np.ascontiguousarray(a).view(np.uint16)
    elif a.dtype == np.float32:
        bits = float32_to_bf16_bits(a)
    else:
        raise InvalidArgumentError(
            f"{what}: {name} has dtype {a.dtype}; expected bfloat16 (ml_dtypes), uint16 (BF16 bits) or "
            f"float32 (rounded to BF16, nearest-even)")
    if bits.ndim == 1:
        bits = bits.reshape(1, -1)
    return np.ascontiguousarray(_shaped(bits, name, shape, what))


def float32_input(a, name, shape, what):
    a = np.asarray(a)
    if a.dtype not in (np.float32, np.float16, np.float64):
        raise InvalidArgumentError(f"{what}: {name} has dtype {a.dtype}; expected float32 (float16/float64 "
                                   f"are converted to float32)")
    return np.ascontiguousarray(_shaped(a, name, shape, what), dtype=np.float32)


def int32_input(a, name, shape, what):
    a = np.asarray(a)
    if a.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{what}: {name} has dtype {a.dtype}; expected an integer array (int32)")
    _shaped(a, name, shape, what)
    if a.dtype != np.int32 and a.size:
        lo, hi = int(a.min()), int(a.max())
        if lo < -2**31 or hi >= 2**31:
            raise InvalidArgumentError(f"{what}: {name} holds {lo if lo < -2**31 else hi}, which does not fit int32")
    return np.ascontiguousarray(a, dtype=np.int32)


def output(out, dtype, shape, what):
    """The array the call writes: a new one, or the caller's `out` checked exactly."""
    if out is None:
        return np.empty(shape, dtype=dtype)
    if not isinstance(out, np.ndarray):
        raise InvalidArgumentError(f"{what}: out is a {type(out).__name__}; expected a numpy.ndarray")
    if out.dtype != dtype:
        raise InvalidArgumentError(f"{what}: out has dtype {out.dtype}; expected {dtype} (the layer's output dtype)")
    if out.shape != tuple(shape):
        raise InvalidArgumentError(f"{what}: out has shape {out.shape}; expected {tuple(shape)}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise InvalidArgumentError(f"{what}: out must be a writeable C-contiguous array (it is written in place)")
    return out


def pointer(a):
    return ctypes.c_void_p(a.ctypes.data)
