"""Small numpy helpers shared by the cpu_mlas kernel modules (elementwise, shape, reduce, misc)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import ml_dtypes
import numpy as np

from onnxplex import NodeView

__all__ = [
    "LOW_PRECISION_FLOATS",
    "as_array",
    "const_input",
    "decode_strings",
    "int_list",
    "norm_axes",
    "norm_axis",
    "select",
    "str_guard",
    "trunc_divide",
    "upcast_float",
]

LOW_PRECISION_FLOATS: frozenset[np.dtype] = frozenset(
    np.dtype(t) for t in (
        ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
        ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e8m0fnu,
        ml_dtypes.float4_e2m1fn,
    )
)
"""Float types numpy has no native arithmetic for: kernels compute them in float32."""

_F16_LIKE = LOW_PRECISION_FLOATS | {np.dtype(np.float16)}


def as_array(value: Any) -> np.ndarray:
    """``value`` as an ndarray (numpy ufuncs return scalars for 0-d operands)."""
    return value if type(value) is np.ndarray else np.asarray(value)


def upcast_float(dtype: np.dtype) -> np.dtype | None:
    """float32 for float16 and the ml_dtypes floats (accumulation type), else ``None``."""
    return np.dtype(np.float32) if dtype in _F16_LIKE else None


def const_input(node: NodeView, i: int) -> np.ndarray | None:
    """The constant value of input ``i`` (``None`` when omitted or computed at run time)."""
    v = node.input(i)
    if v is None or v.const is None:
        return None
    c = v.const
    if c.dtype.kind in "SU":
        return decode_strings(c)
    return c


def input_omitted(node: NodeView, i: int) -> bool:
    """Whether optional input ``i`` is absent (so the kernel receives ``None``)."""
    return node.input(i) is None


def decode_strings(a: np.ndarray) -> np.ndarray:
    """An ONNX string tensor as an object array of Python ``str`` (bytes are UTF-8 decoded)."""
    if a.dtype == object:
        if a.size and isinstance(a.flat[0], bytes):
            return np.char.decode(a.astype(np.bytes_), "utf-8").astype(object)
        return a
    if a.dtype.kind == "S":
        return np.char.decode(a, "utf-8").astype(object)
    return a.astype(object)


def str_guard(a: np.ndarray) -> np.ndarray:
    """Strings as object arrays of ``str``: constant string initializers reach kernels as numpy
    bytes (``|S``) arrays, which would neither compare equal to nor concatenate with ``str``."""
    return decode_strings(a) if a.dtype.kind in "SU" else a


def int_list(value: Iterable[Any] | np.ndarray | None) -> list[int] | None:
    """A 1-D int tensor or attribute as a list of Python ints (``None`` stays ``None``)."""
    if value is None:
        return None
    return [int(v) for v in np.asarray(value).reshape(-1).tolist()]


def norm_axis(axis: int, rank: int) -> int:
    """Normalise a possibly negative axis against ``rank``; raise on out-of-range."""
    a = int(axis)
    if not -rank <= a < max(rank, 1):
        raise ValueError(f"axis {axis} is out of range for a tensor of rank {rank}")
    return a + rank if a < 0 else a


def norm_axes(axes: Iterable[int], rank: int) -> tuple[int, ...]:
    """Normalise axes; duplicates are an error, as in ONNX."""
    out = tuple(norm_axis(a, rank) for a in axes)
    if len(set(out)) != len(out):
        raise ValueError(f"axes {list(axes)} contain duplicates")
    return out


def trunc_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division rounding toward zero (C semantics), in ``a``'s dtype."""
    if a.dtype.kind != "i":
        return np.floor_divide(a, b)
    # a - fmod(a, b) (fmod: C's remainder, with a's sign) is a multiple of b of at most a's
    # magnitude, so its floor division is exact: trunc(a / b) in three ufunc passes. (x / 0
    # is 0, as numpy's floor_divide gives it.)
    r = np.fmod(a, b)
    return np.floor_divide(np.subtract(a, r), b)


_UINT_BY_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_SELECT_MIN_SIZE = 16384


def select(cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``np.where(cond, x, y)`` for same-dtype ``x``/``y``.

    numpy's ``where`` branches per element, which costs ~4 ns/element on irregular masks;
    large irregular selections use a branch-free bit blend instead (same result, bit for bit).
    """
    if cond.size < _SELECT_MIN_SIZE:
        return np.where(cond, x, y)  # (an ndarray, 0-d included)
    x, y = np.asarray(x), np.asarray(y)
    ut = _UINT_BY_SIZE.get(x.dtype.itemsize)
    if ut is None or x.dtype != y.dtype or x.dtype == object or not cond.flags.c_contiguous:
        return as_array(np.where(cond, x, y))
    flat = cond.reshape(-1)
    if np.count_nonzero(flat[1:] != flat[:-1]) * 64 < flat.size:
        return as_array(np.where(cond, x, y))  # long runs: numpy's branches predict well
    m = cond.astype(ut)
    np.negative(m, out=m)  # 0 -> 0, 1 -> all ones
    out = np.bitwise_and(x.view(ut), m)
    np.invert(m, out=m)
    other = np.bitwise_and(y.view(ut), m)
    if out.shape == np.broadcast_shapes(out.shape, other.shape):
        np.bitwise_or(out, other, out=out)
    else:
        out = np.bitwise_or(out, other)
    return out.view(x.dtype)
