"""Pooling and reductions on NHWC tensors, and the shape ops (Reshape, Flatten, Transpose,
Squeeze, Unsqueeze, Concat, Identity and the layout conversions the planner inserts).

Pooling windows are strided views of a per-thread padded buffer (border filled once: -inf or
the type's minimum for MaxPool, 0 for AveragePool), reduced tap by tap over whole NHWC planes.
AveragePool divides by per-position counts computed once per input size (ONNX's
``count_include_pad`` rule, ``ceil_mode`` windows clipped to the padded input).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._ops_base import F32, TO_L, Label, Op, Workspace, as_f32
from ._ops_conv import ConvGeometry, padded_input, window


def _min_value(dt: np.dtype) -> float:
    return -np.inf if dt.kind == "f" else float(np.iinfo(dt).min)


def _need(geom: ConvGeometry, oh: int, ow: int) -> tuple[int, int]:
    """Rows and columns (from the padded origin) the windows of an oh x ow output reach."""
    return tuple((o - 1) * s + (k - 1) * d + 1 if o > 0 else 0
                 for o, s, k, d in zip((oh, ow), geom.strides, geom.kernel, geom.dilations))


class MaxPoolOp(Op):
    def __init__(self, label: Label, geom: ConvGeometry) -> None:
        super().__init__(label)
        self.geom = geom

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        x = args[0]
        n, h, w, c = x.shape
        pads, oh, ow = self.geom.resolve(h, w)
        nh, nw = _need(self.geom, oh, ow)
        xp = padded_input(x, pads, nh, nw, ws, (id(self), "pad"), x.dtype, _min_value(x.dtype))
        kh, kw = self.geom.kernel
        y = np.array(window(xp, 0, 0, self.geom, oh, ow))
        for i in range(kh):
            for j in range(kw):
                if i or j:
                    np.maximum(y, window(xp, i, j, self.geom, oh, ow), out=y)
        return y


@functools.lru_cache(maxsize=256)
def _counts_1d(size: int, out: int, k: int, s: int, d: int, lo: int, hi: int,
               include_pad: bool) -> np.ndarray:
    start = np.arange(out) * s - lo
    taps = start[:, None] + np.arange(k)[None, :] * d
    first, last = (-lo, size + hi) if include_pad else (0, size)
    return ((taps >= first) & (taps < last)).sum(axis=1)


class AveragePoolOp(Op):
    def __init__(self, label: Label, geom: ConvGeometry, count_include_pad: bool) -> None:
        super().__init__(label)
        self.geom, self.include_pad = geom, count_include_pad

    def _divisor(self, h: int, w: int, pads, oh: int, ow: int) -> np.ndarray:
        g = self.geom
        ch = _counts_1d(h, oh, g.kernel[0], g.strides[0], g.dilations[0], pads[0], pads[2],
                        self.include_pad)
        cw = _counts_1d(w, ow, g.kernel[1], g.strides[1], g.dilations[1], pads[1], pads[3],
                        self.include_pad)
        cnt = np.maximum(ch[:, None] * cw[None, :], 1).astype(F32)
        return cnt.reshape(1, oh, ow, 1)

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        x = args[0]
        n, h, w, c = x.shape
        pads, oh, ow = self.geom.resolve(h, w)
        nh, nw = _need(self.geom, oh, ow)
        xp = padded_input(x, pads, nh, nw, ws, (id(self), "pad"), F32, 0.0)
        kh, kw = self.geom.kernel
        y = np.array(window(xp, 0, 0, self.geom, oh, ow), dtype=F32)
        for i in range(kh):
            for j in range(kw):
                if i or j:
                    y += window(xp, i, j, self.geom, oh, ow)
        y /= self._divisor(h, w, pads, oh, ow)
        return y if y.dtype == x.dtype else y.astype(x.dtype)


class ReduceOp(Op):
    """ReduceMean / ReduceMax / ReduceSum and the global pools over physical ``axes``;
    ``squeeze``: the logical axes to drop afterwards (keepdims=0), the tensor being brought to
    its logical layout first when it is channels-last (``to_logical``); ``fast``: a kernel
    reducing a float tensor over ``axes`` with keepdims (cpu_mlas's, ``_mlas.reduce_kernel``)."""

    _FN = {"mean": np.mean, "max": np.max, "sum": np.sum}

    def __init__(self, label: Label, kind: str, axes: tuple[int, ...],
                 squeeze: tuple[int, ...] | None, to_logical: bool,
                 fast: Any | None = None) -> None:
        super().__init__(label)
        self.fn, self.fast = self._FN[kind], fast
        self.kind, self.axes, self.squeeze, self.to_logical = kind, axes, squeeze, to_logical

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        x = args[0]
        if self.fast is not None and x.dtype.kind == "f" and x.size:
            y = self.fast(x)
        elif self.kind == "max":
            y = np.max(x, axis=self.axes, keepdims=True) if x.size else \
                np.full([1 if i in self.axes else d for i, d in enumerate(x.shape)], -np.inf,
                        x.dtype)
        else:
            y = self.fn(as_f32(x) if x.dtype.kind == "f" else x, axis=self.axes, keepdims=True)
            y = np.asarray(y).astype(x.dtype, copy=False)
        if self.squeeze is not None:
            if self.to_logical:
                y = y.transpose(TO_L)
            y = y.reshape([d for i, d in enumerate(y.shape) if i not in self.squeeze])
        # not np.ascontiguousarray: it turns a 0-d result (every axis reduced) into shape [1]
        return np.require(y, requirements="C")


# --------------------------------------------------------------------------------------------
# Shape ops (outputs may be views: not "fresh")
# --------------------------------------------------------------------------------------------


class ViewOp(Op):
    """Transpose by ``perm`` (a layout conversion, or Transpose composed with the input's
    layout), or Identity when ``perm`` is None."""

    fresh = False

    def __init__(self, label: Label, perm: tuple[int, ...] | None) -> None:
        super().__init__(label)
        self.perm = perm

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        x = args[0]
        return x if self.perm is None else x.transpose(self.perm)


class ReshapeOp(Op):
    """Reshape (constant shape, or a second input; 0 copies the input dim unless
    ``allowzero``), Flatten
    (``flatten_axis``), Squeeze / Unsqueeze (``axes``): all on the logical layout."""

    fresh = False

    def __init__(self, label: Label, *, shape: Sequence[int] | None = None,
                 allowzero: bool = False, flatten_axis: int | None = None,
                 squeeze: tuple[int, ...] | None = None,
                 unsqueeze: tuple[int, ...] | None = None) -> None:
        super().__init__(label)
        self.shape = None if shape is None else tuple(int(d) for d in shape)
        self.allowzero, self.flatten_axis = allowzero, flatten_axis
        self.squeeze, self.unsqueeze = squeeze, unsqueeze

    def target(self, in_shape: tuple[int, ...],
               shape: tuple[int, ...] | None = None) -> tuple[int, ...]:
        shape = self.shape if shape is None else shape
        if shape is not None:
            if self.allowzero:
                return shape
            return tuple(in_shape[i] if d == 0 else d for i, d in enumerate(shape))
        if self.flatten_axis is not None:
            a = self.flatten_axis        # normalized by the planner: 0 <= axis <= rank
            lead = int(np.prod(in_shape[:a], dtype=np.int64))
            return (lead, int(np.prod(in_shape[a:], dtype=np.int64)))
        if self.squeeze is not None:
            if not self.squeeze:
                return tuple(d for d in in_shape if d != 1)
            drop = {a % len(in_shape) for a in self.squeeze}
            return tuple(d for i, d in enumerate(in_shape) if i not in drop)
        rank = len(in_shape) + len(self.unsqueeze)
        add = {a % rank for a in self.unsqueeze}
        it = iter(in_shape)
        return tuple(1 if i in add else next(it) for i in range(rank))

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        x = args[0]
        shape = None if len(args) < 2 else tuple(int(d) for d in np.asarray(args[1]).reshape(-1))
        return np.reshape(x, self.target(x.shape, shape))


class ConcatOp(Op):
    def __init__(self, label: Label, axis: int) -> None:
        super().__init__(label)
        self.axis = axis

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        return np.concatenate([a for a in args if a is not None], axis=self.axis)
