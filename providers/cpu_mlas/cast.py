"""Cast and CastLike, as onnxruntime does them: every numeric type (float16, bfloat16, float8,
float4 and int4/int2 through ml_dtypes), bool, and strings both ways.

float -> string uses ``%.8g`` with NaN / INF / -INF spelled as ORT spells them; string -> int
reads the integer prefix (``"7.9"`` -> 7) as ``std::stoll`` does. float8 targets honour
``saturate``; float8e8m0 honours ``round_mode``; int4/uint4 targets round floats half away
from zero, then wrap, as ORT does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import ml_dtypes
import numpy as np
from onnx import TensorProto

from onnxplex import NodeView, ProviderContext
from onnxplex._dtypes import np_dtype, onnx_elem_type

from ._native import native
from ._np_helpers import LOW_PRECISION_FLOATS, as_array, decode_strings
from ._registry import op

logger = logging.getLogger(__name__)

Kernel = Callable[..., np.ndarray]


_FLOAT8_SATURATING = {
    TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
    TensorProto.FLOAT8E5M2FNUZ,
}
_SMALL_INTS = {  # elem type -> (bits, signed)
    TensorProto.INT4: (4, True), TensorProto.UINT4: (4, False),
}
if hasattr(TensorProto, "INT2"):
    _SMALL_INTS[TensorProto.INT2] = (2, True)
    _SMALL_INTS[TensorProto.UINT2] = (2, False)
_E8M0 = getattr(TensorProto, "FLOAT8E8M0", None)


def _is_string(x: np.ndarray) -> bool:
    return x.dtype == object or x.dtype.kind in "SU"


def _float_to_string(x: np.ndarray) -> np.ndarray:
    """Like ORT: ``%.8g`` for float, float16 and double, with NaN / INF / -INF spelled so."""
    xf = x.astype(np.float64) if x.dtype != np.float64 else x
    out = np.char.mod("%.8g", xf).astype(object)
    if out.size:
        nan = np.isnan(xf)
        if nan.any():
            out[nan] = "NaN"
        inf = np.isinf(xf)
        if inf.any():
            out[inf & (xf > 0)] = "INF"
            out[inf & (xf < 0)] = "-INF"
    return out.reshape(x.shape)


def _to_string(x: np.ndarray) -> np.ndarray:
    if _is_string(x):
        return decode_strings(x)
    if x.dtype == np.bool_:
        return x.astype(np.uint8).astype(np.str_).astype(object)
    if x.dtype.kind == "f" or x.dtype in LOW_PRECISION_FLOATS:
        return _float_to_string(x)
    return x.astype(np.str_).astype(object)


def _from_string(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Parse strings as ORT does: floats with strtod rules, integers by their integer prefix."""
    u = decode_strings(x).astype(np.str_) if x.dtype.kind != "U" else x
    if dtype.kind == "f" or dtype in LOW_PRECISION_FLOATS:
        return u.astype(np.float64).astype(dtype)
    wide = np.uint64 if dtype == np.uint64 else np.int64
    try:
        parsed = u.astype(wide)
    except (ValueError, OverflowError):
        # "7.9" -> 7, as std::stoll reads the integer prefix
        parsed = np.trunc(u.astype(np.float64)).astype(wide)
    if dtype == np.bool_:
        return parsed != 0
    return parsed.astype(dtype)


def _round_half_away(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return np.copysign(np.floor(np.abs(x64) + 0.5), x64)


def _to_small_int(x: np.ndarray, dtype: np.dtype, bits: int, signed: bool) -> np.ndarray:
    """int4/uint4/int2/uint2: floats round half away from zero, then wrap (as ORT does)."""
    if x.dtype.kind == "b":
        v = x.astype(np.int64)
    elif x.dtype.kind in "iu":
        v = x.astype(np.int64)
    else:
        v = _round_half_away(x.astype(np.float32) if x.dtype in LOW_PRECISION_FLOATS else x)
        v = v.astype(np.int64)  # NaN/inf give INT64_MIN, whose low bits are 0, as in ORT
    mask = (1 << bits) - 1
    v = v & mask
    if signed:
        half = 1 << (bits - 1)
        v = (v ^ half) - half
    return v.astype(np.int8).astype(dtype)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """float -> float8e8m0 (a biased power-of-two exponent) with ONNX's rounding modes."""
    bits = x.astype(np.float32).view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exp == 0xFF
    if round_mode == "nearest":
        g = (bits & 0x400000) != 0
        r = (bits & 0x200000) != 0
        s = (bits & 0x1FFFFF) != 0
        up = g & (r | s | (exp > 0))
    elif round_mode == "up":
        up = (bits & 0x7FFFFF) != 0
    elif round_mode == "down":
        up = np.zeros(exp.shape, dtype=bool)
    else:
        raise ValueError(f"Cast: unknown round_mode {round_mode!r}")
    up &= ~special
    if saturate:
        up &= exp != 0xFE
    exp = exp + up.astype(np.uint16)
    out = np.where(special, np.uint16(0xFF), exp).astype(np.uint8)
    return out.view(ml_dtypes.float8_e8m0fnu)


def _cast_fn(to: int, saturate: bool, round_mode: str) -> Callable[[np.ndarray], np.ndarray]:
    if to == TensorProto.STRING:
        return _to_string
    target = np_dtype(to)
    if to in _SMALL_INTS:
        bits, signed = _SMALL_INTS[to]
        return lambda x: _to_small_int(x, target, bits, signed)
    if to == _E8M0:
        return lambda x: _to_e8m0(x, saturate, round_mode)
    clip: tuple[float, float] | None = None
    if to in _FLOAT8_SATURATING and saturate:
        fmax = float(ml_dtypes.finfo(target).max)
        clip = (-fmax, fmax)

    def cast(x: np.ndarray) -> np.ndarray:
        if x.dtype == target:
            return x
        if _is_string(x):
            return _from_string(x, target)
        if x.dtype in LOW_PRECISION_FLOATS and target != np.float32:
            x = x.astype(np.float32)
            if x.dtype == target:
                return x
        # (under the session's errstate(all="ignore"): NaN/inf to int casts do not warn)
        if clip is not None and x.dtype.kind == "f":
            x = np.clip(x, clip[0], clip[1])
        return x.astype(target)

    return cast


def _plain_cast(to: int, src: np.dtype | None, saturate: bool) -> Kernel | None:
    """The kernel for a cast decided at build time from the input's declared dtype ``src``:
    the input itself when the types agree, one ``astype`` when :func:`_cast_fn`'s per-call
    path would come down to it (numeric to numeric, no float8 saturation, int4/int2 or e8m0
    target, no ml_dtypes-float source going anywhere but float32); ``None`` otherwise."""
    if src is None or src.kind in "OSU" or to == TensorProto.STRING \
            or to in _SMALL_INTS or to == _E8M0:
        return None
    try:
        target = np_dtype(to)
    except KeyError:
        return None
    if src == target:
        return lambda x, *_: x
    if to in _FLOAT8_SATURATING and saturate and src.kind == "f":
        return None
    if src in LOW_PRECISION_FLOATS and target != np.float32:
        return None
    halves = _half_cast(src, target)
    if halves is not None:
        return halves
    return lambda x, *_: x.astype(target)


_HALVES = {np.dtype(np.float16): False, np.dtype(ml_dtypes.bfloat16): True}


def _half_cast(src: np.dtype, target: np.dtype) -> Kernel | None:
    """float32 <-> float16 / bfloat16 natively (``f32_to_half``, ``half_to_f32``: F16C, or
    the rounding in vector form; numpy converts float16 an element at a time, ~2.4 ns an
    element, 30x slower): the results are numpy's and ml_dtypes' to the bit (a NaN stays a
    NaN; a signalling NaN's payload may come out quiet). An input that is not C-contiguous
    or not of the declared type goes through ``astype``."""
    nat = native()
    if nat is None or not hasattr(nat, "f32_to_half"):
        return None
    f32 = np.dtype(np.float32)
    if src == f32 and target in _HALVES:
        convert, bf16 = nat.f32_to_half, _HALVES[target]
    elif src in _HALVES and target == f32:
        convert, bf16 = nat.half_to_f32, _HALVES[src]
    else:
        return None

    def cast(x: np.ndarray, *_: object) -> np.ndarray:
        if x.__class__ is not np.ndarray or x.dtype != src or not x.flags.c_contiguous:
            return np.asarray(x).astype(target)
        y = np.empty(x.shape, target)
        convert(x, y, bf16)
        return y

    return cast


def _str_attr(node: NodeView, name: str, default: str) -> str:
    v = node.attr(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


@op("Cast", since=1)
@op("Cast", since=6)  # "to" became an int
@op("Cast", since=19)  # saturate
@op("Cast", since=24)  # round_mode
def make_cast(node: NodeView, ctx: ProviderContext) -> Kernel:
    to = node.attr("to")
    if isinstance(to, str):  # opset 1 spelled the type as a string ("FLOAT")
        to = TensorProto.DataType.Value(to.upper())
    saturate = bool(node.attr("saturate", 1))
    inp = node.input(0)
    plain = _plain_cast(int(to), None if inp is None else inp.dtype, saturate)
    if plain is not None:
        return plain
    fn = _cast_fn(int(to), saturate, _str_attr(node, "round_mode", "up"))
    return lambda x: as_array(fn(x))


@op("CastLike", since=15)
@op("CastLike", since=19)
@op("CastLike", since=24)
def make_cast_like(node: NodeView, ctx: ProviderContext) -> Kernel:
    saturate = bool(node.attr("saturate", 1))
    round_mode = _str_attr(node, "round_mode", "up")
    target = node.input(1)
    if target is not None and target.elem_type:
        inp = node.input(0)
        plain = _plain_cast(int(target.elem_type), None if inp is None else inp.dtype, saturate)
        if plain is not None:
            return plain
        fn = _cast_fn(int(target.elem_type), saturate, round_mode)
        return lambda x, like: as_array(fn(x))

    def kernel(x: np.ndarray, like: np.ndarray) -> np.ndarray:
        elem = TensorProto.STRING if _is_string(like) else onnx_elem_type(like.dtype)
        return as_array(_cast_fn(elem, saturate, round_mode)(x))

    return kernel
