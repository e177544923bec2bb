"""Elementwise ops, normalizations and Softmax.

Binary ops broadcast as ONNX does. In a channels-last partition a rank-4 result is computed on
NHWC arrays; an operand of lower rank is broadcast in ONNX's (NCHW) sense, so it is first lifted
to rank 4 and permuted like the tensors (constants once at compile time, computed operands as a
view per run). Float16 tensors compute transcendental functions in float32 and round once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._ops_base import F32, TO_C, Activation, Label, Op, Workspace, as_f32, unary


def lift_to_c(v: np.ndarray, rank: int = 4) -> np.ndarray:
    """A lower-rank operand broadcast in ONNX's sense against a rank-4 channels-last tensor:
    left-padded with 1s to rank 4, then permuted like the tensor (a view)."""
    return np.asarray(v).reshape((1,) * (rank - np.ndim(v)) + np.shape(v)).transpose(TO_C)


class UnaryOp(Op):
    """One float activation / math function (see ``_ops_base.UNARY_KINDS``)."""

    inplace_ok = (0,)

    def __init__(self, label: Label, kind: str, params: tuple[float, ...] = ()) -> None:
        super().__init__(label)
        self.kind, self.params = kind, params

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        x = args[0]
        return unary(self.kind, self.params, x, self.out_buffer(args, x.shape, x.dtype))


BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
          "Pow": np.power, "Max": np.maximum, "Min": np.minimum}


class BinaryOp(Op):
    """``ufunc(a, b)`` with broadcasting; ``lift[k]`` marks a computed operand of lower rank
    that must be lifted to a rank-4 channels-last view first."""

    inplace_ok = (0, 1)

    def __init__(self, label: Label, op_type: str, lift: tuple[bool, bool],
                 out_dtype: np.dtype) -> None:
        super().__init__(label)
        self.ufunc = BINARY[op_type]
        self.lift, self.out_dtype = lift, np.dtype(out_dtype)

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        a, b = args[0], args[1]
        if self.lift[0]:
            a = lift_to_c(a)
        if self.lift[1]:
            b = lift_to_c(b)
        shape = np.broadcast_shapes(np.shape(a), np.shape(b))
        out = self.out_buffer(args, shape, self.out_dtype)
        y = self.ufunc(a, b, out=out) if out is not None else self.ufunc(a, b)
        y = np.asarray(y)
        return y if y.dtype == self.out_dtype else y.astype(self.out_dtype)


class BiasActivationOp(Op):
    """com.microsoft BiasGelu / FastGelu: ``kind(x [+ bias])``."""

    def __init__(self, label: Label, kind: str) -> None:
        super().__init__(label)
        self.kind = kind

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        x = args[0]
        y = x.astype(F32) if len(args) < 2 or args[1] is None else \
            np.add(x, args[1], dtype=F32)
        unary(self.kind, (), y, y)
        return y if y.dtype == x.dtype else y.astype(x.dtype)


class AffineChannelOp(Op):
    """BatchNormalization (inference): ``act(x * scale + shift)`` with per-channel constants
    already shaped for the input's physical layout."""

    inplace_ok = (0,)

    def __init__(self, label: Label, scale: np.ndarray, shift: np.ndarray,
                 act: Activation) -> None:
        super().__init__(label)
        self.scale, self.shift, self.act = scale.astype(F32), shift.astype(F32), act

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        x = args[0]
        if x.dtype == F32:
            out = self.out_buffer(args, x.shape, x.dtype)
            y = np.multiply(x, self.scale, out=out) if out is not None else x * self.scale
        else:
            y = x.astype(F32)
            y *= self.scale
        y += self.shift
        self.act.apply_(y)
        return y if y.dtype == x.dtype else y.astype(x.dtype)


class LayerNormOp(Op):
    """LayerNormalization over the trailing axes from ``axis`` (logical layout), in float32."""

    def __init__(self, label: Label, axis: int, epsilon: float) -> None:
        super().__init__(label)
        self.axis, self.eps = axis, np.float32(epsilon)

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        x, scale = args[0], args[1]
        bias = args[2] if len(args) > 2 else None
        xf = as_f32(x)
        axes = tuple(range(self.axis % x.ndim, x.ndim))
        d = xf - xf.mean(axis=axes, keepdims=True)
        var = np.mean(d * d, axis=axes, keepdims=True)
        var += self.eps
        np.sqrt(var, out=var)
        d /= var
        d *= as_f32(np.asarray(scale))
        if bias is not None:
            d += as_f32(np.asarray(bias))
        return d if d.dtype == x.dtype else d.astype(x.dtype)


class SoftmaxOp(Op):
    """Softmax along one (physical) axis; ``coerced``: opset < 13 semantics, the logical input
    flattened to 2-D at ``axis`` (the planner then supplies the logical layout)."""

    def __init__(self, label: Label, axis: int, coerced: bool) -> None:
        super().__init__(label)
        self.axis, self.coerced = axis, coerced

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        x = args[0]
        xf = as_f32(x)
        axis = self.axis
        if self.coerced:
            lead = int(np.prod(x.shape[:axis], dtype=np.int64))
            xf = xf.reshape(lead, -1)
            axis = 1
        e = xf - xf.max(axis=axis, keepdims=True)
        np.exp(e, out=e)
        e /= e.sum(axis=axis, keepdims=True)
        e = e.reshape(x.shape)
        return e if e.dtype == x.dtype else e.astype(x.dtype)


class CastOp(Op):
    """Cast between float32/float16 and from 8/32-bit integers to floats."""

    def __init__(self, label: Label, to: np.dtype) -> None:
        super().__init__(label)
        self.to = np.dtype(to)

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        return np.asarray(args[0]).astype(self.to)
