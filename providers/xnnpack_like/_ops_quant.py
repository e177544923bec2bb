"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (ONNX semantics: divide in
float32, round half to even, saturate; per-tensor or per-axis, the axis mapped to the tensor's
physical layout by the planner)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._ops_base import F32, Label, Op, Workspace, quant_range


def per_axis(p: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """A scale or zero point shaped to broadcast along ``axis`` of a rank-``ndim`` tensor."""
    p = np.asarray(p)
    if p.ndim == 0 or p.size == 1:
        return p.reshape(())
    shape = [1] * ndim
    shape[axis] = p.size
    return p.reshape(shape)


def quantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, out: np.dtype,
             axis: int) -> np.ndarray:
    """``saturate(round_half_even(x / scale) + zero_point)`` (the division in float32)."""
    s = per_axis(np.asarray(scale, F32), x.ndim, axis)
    q = np.divide(x, s, dtype=F32)
    np.rint(q, out=q)
    lo, hi = quant_range(out)
    if zp is None:
        np.clip(q, lo, hi, out=q)
        return q.astype(out)
    z = per_axis(np.asarray(zp, F32), x.ndim, axis)
    np.clip(q, lo - z, hi - z, out=q)   # saturate first: the sum then fits the target
    return np.add(q, z, out=np.empty(q.shape, out), casting="unsafe")


def dequantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, out: np.dtype,
               axis: int) -> np.ndarray:
    """``(x - zero_point) * scale`` in float32, as ``out``."""
    s = per_axis(np.asarray(scale, F32), x.ndim, axis)
    if zp is not None and x.dtype == np.int32:
        xf = (x.astype(np.int64) - per_axis(np.asarray(zp, np.int64), x.ndim, axis)
              ).astype(F32)
    elif zp is not None:
        xf = np.subtract(x, per_axis(np.asarray(zp).astype(x.dtype), x.ndim, axis), dtype=F32)
    else:
        xf = x.astype(F32)
    xf *= s
    return xf if xf.dtype == out else xf.astype(out)


def dynamic_quantize(x: np.ndarray) -> tuple[np.ndarray, np.float32, np.uint8]:
    """DynamicQuantizeLinear: uint8 with a scale and zero point covering [min(0,x), max(0,x)]."""
    x = np.asarray(x, F32)
    f = np.float32
    lo = min(f(0), x.min()) if x.size else f(0)
    hi = max(f(0), x.max()) if x.size else f(0)
    scale = f(1) if hi == lo else f((hi - lo) / f(255))
    zp = np.rint(np.clip(f(0) - lo / scale, 0, 255))
    y = x / scale
    np.rint(y, out=y)
    np.clip(y, -zp, 255 - zp, out=y)
    q = np.add(y, zp, out=np.empty(y.shape, np.uint8), casting="unsafe")
    return q, scale, np.uint8(zp)


class QuantizeOp(Op):
    """QuantizeLinear: inputs ``x, scale [, zero_point]``; ``axis`` is physical."""

    def __init__(self, label: Label, axis: int, out_dtype: np.dtype) -> None:
        super().__init__(label)
        self.axis, self.out_dtype = axis, np.dtype(out_dtype)

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        zp = args[2] if len(args) > 2 else None
        out = zp.dtype if zp is not None else self.out_dtype
        return quantize(args[0], args[1], zp, np.dtype(out), self.axis)


class DequantizeOp(Op):
    """DequantizeLinear: inputs ``x, scale [, zero_point]``; ``axis`` is physical."""

    def __init__(self, label: Label, axis: int, out_dtype: np.dtype) -> None:
        super().__init__(label)
        self.axis, self.out_dtype = axis, np.dtype(out_dtype)

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        zp = args[2] if len(args) > 2 else None
        return dequantize(args[0], args[1], zp, self.out_dtype, self.axis)


class DynamicQuantizeOp(Op):
    """DynamicQuantizeLinear: ``x -> (y uint8, y_scale, y_zero_point)``."""

    n_out = 3

    def run(self, args: Sequence[Any], ws: Workspace) -> tuple[np.ndarray, ...]:
        q, s, z = dynamic_quantize(args[0])
        return q, np.asarray(s, F32), np.asarray(z, np.uint8)
