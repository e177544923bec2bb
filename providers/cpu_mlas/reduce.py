"""Reductions (ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare) and ArgMax/ArgMin.

float16 and the ml_dtypes floats accumulate in float32 and are cast back; integer inputs keep
their type (ReduceMean divides truncating toward zero, L2/LogSum/LogSumExp are computed in
float64 and truncated, as ORT does). Reducing over an empty axis gives the reduction's identity
(0 for Sum/Mean/L1/L2, 1 for Prod, -inf/+inf or the type's min/max for Max/Min).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnxplex import NodeView, ProviderContext

from ._np_helpers import as_array, const_input, int_list, norm_axes, trunc_divide, upcast_float
from ._registry import op

logger = logging.getLogger(__name__)

Kernel = Callable[..., np.ndarray]

# op type -> opset where ``axes`` moved from an attribute to an input
_AXES_INPUT_SINCE = {
    "ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18, "ReduceProd": 18,
    "ReduceL1": 18, "ReduceL2": 18, "ReduceLogSum": 18, "ReduceLogSumExp": 18,
    "ReduceSumSquare": 18,
}


def _extreme(dtype: np.dtype, largest: bool) -> object:
    if dtype.kind == "f":
        return np.inf if largest else -np.inf
    if dtype.kind == "b":
        return largest
    info = np.iinfo(dtype)
    return info.max if largest else info.min


def _count(shape: tuple[int, ...], axes: tuple[int, ...] | None) -> int:
    if axes is None:
        return math.prod(shape)
    return math.prod(shape[a] for a in axes)


_BLAS_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _sum(x: np.ndarray, axes: tuple[int, ...] | None, keep: bool) -> np.ndarray:
    """np.sum in x's dtype; float sums over leading or trailing axes of a contiguous array go
    through BLAS (:func:`_gemv_plan`), several times faster than numpy's reduce."""
    if x.dtype in _BLAS_FLOATS and x.flags.c_contiguous and axes:
        plan = _gemv_plan(x.shape, x.dtype, axes, keep, middle=False)
        if plan is not None:
            return _gemv(x, plan)
    return np.sum(x, axis=axes, dtype=x.dtype, keepdims=keep)


def _reduce(kind: str, x: np.ndarray, axes: tuple[int, ...] | None,
            keep: bool) -> np.ndarray:
    """One reduction in ``x``'s (already widened) dtype."""
    if kind == "ReduceSum":
        return _sum(x, axes, keep)
    if kind == "ReduceMean":
        n = _count(x.shape, axes)
        s = _sum(x, axes, keep)
        if x.dtype.kind in "iu":
            return trunc_divide(s, np.asarray(max(n, 1), dtype=x.dtype))
        return s / n if n else s
    if kind == "ReduceMax":
        return np.max(x, axis=axes, keepdims=keep, initial=_extreme(x.dtype, False))
    if kind == "ReduceMin":
        return np.min(x, axis=axes, keepdims=keep, initial=_extreme(x.dtype, True))
    if kind == "ReduceProd":
        return np.prod(x, axis=axes, dtype=x.dtype, keepdims=keep)
    if kind == "ReduceL1":
        return _sum(np.abs(x), axes, keep)
    if kind == "ReduceSumSquare":
        return _sum(x * x, axes, keep)
    # the rest go through floats
    xf = x.astype(np.float64) if x.dtype.kind in "iub" else x
    if kind == "ReduceL2":
        r = np.sqrt(_sum(xf * xf, axes, keep))
    elif kind == "ReduceLogSum":
        r = np.log(_sum(xf, axes, keep))
    elif kind == "ReduceLogSumExp":
        m = np.max(xf, axis=axes, keepdims=True, initial=-np.inf)
        m = np.where(np.isfinite(m), m, 0).astype(xf.dtype)
        s = np.sum(np.exp(xf - m), axis=axes, dtype=xf.dtype, keepdims=True)
        r = np.log(s) + m
        if not keep:
            r = r.reshape(_kept_shape(x.shape, axes, False))
    else:  # pragma: no cover - registration lists the kinds
        raise ValueError(kind)
    return r.astype(x.dtype, copy=False) if r.dtype != x.dtype else r


def _kept_shape(shape: tuple[int, ...], axes: tuple[int, ...] | None, keep: bool):
    ax = set(range(len(shape))) if axes is None else set(axes)
    if keep:
        return tuple(1 if i in ax else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in ax)


def _run(kind: str, x: np.ndarray, axes: list[int] | None, keep: bool) -> np.ndarray:
    ax = None if axes is None else norm_axes(axes, x.ndim)
    if ax is None:
        ax = tuple(range(x.ndim))
    dt = x.dtype
    wide = upcast_float(dt)
    if kind in ("ReduceMax", "ReduceMin") and dt == np.float16:
        wide = None  # exact in float16
    with np.errstate(all="ignore"):
        r = _reduce(kind, x.astype(wide) if wide is not None else x, ax, keep)
    r = as_array(r)
    return r.astype(dt) if r.dtype != dt else r


_PLANS_KEPT = 64
"""Input shapes a constant-axes sum keeps a plan for (dynamic shapes start over past that)."""


def _gemv_plan(shape: tuple[int, ...], dtype: np.dtype, ax: Sequence[int], keep: bool,
               middle: bool = True
               ) -> tuple[np.ndarray, tuple[int, ...], tuple[int, ...], bool] | None:
    """A float sum over a run of adjacent axes of a contiguous ``shape`` as one BLAS product
    with a constant vector of ones: ``(vector, operand shape, output shape, trailing)``, the
    operand ``[rows, n] @ vector`` when the axes are trailing, else ``vector @ [outer, n,
    inner]``; None when the axes are not such a run (with ``middle`` False: not leading or
    trailing either) or the tensor is small. (A mean divides the sum afterwards: weights of
    ``1/n`` round differently, and a softmax over large pooled logits, as in onnx's light
    SqueezeNet, turns that into differences of 1e-3.)"""
    size = math.prod(shape)
    a = sorted(ax)
    if size < 4096 or not a or a != list(range(a[0], a[-1] + 1)):
        return None
    first, last = a[0], a[-1] + 1
    if not middle and first != 0 and last != len(shape):
        return None
    n = math.prod(shape[first:last])
    vec = np.ones(n, dtype=dtype)
    vec.flags.writeable = False
    out = _kept_shape(shape, ax, keep)
    if last == len(shape):
        return vec, (size // n, n), out, True
    inner = math.prod(shape[last:])
    outer = size // (n * inner)
    return vec, ((n, inner) if outer == 1 else (outer, n, inner)), out, False


def _gemv(x: np.ndarray, plan: tuple) -> np.ndarray:
    """The sum :func:`_gemv_plan` planned, of ``x`` (contiguous, of the planned shape)."""
    vec, shape, out, trailing = plan
    r = x.reshape(shape) @ vec if trailing else vec @ x.reshape(shape)
    return r.reshape(out)


def _constant_axes_kernel(kind: str, axes: list[int] | None, keep: bool) -> Kernel:
    """The kernel for constant axes. Float32/float64 sums and means (a CNN's global pooling,
    attention's statistics) of a contiguous tensor are one BLAS product with a vector made
    once per input shape (:func:`_gemv_plan`); others go straight to the sum, their axes
    normalized once per rank. In a model every numpy call is out of cache: the general path's
    Python (axis checks, widening, an errstate) cost ~70 us a call, against ~15 us in a loop
    of its own; a channels-last global pooling's ``np.ones`` alone ~25 us."""
    if kind not in ("ReduceSum", "ReduceMean") or axes is None:
        return lambda x, *_: _run(kind, x, axes, keep)
    mean = kind == "ReduceMean"
    normalized: dict[int, tuple[int, ...]] = {}
    plans: dict[tuple[tuple[int, ...], np.dtype], Any] = {}

    def kernel(x: np.ndarray, *_: object) -> np.ndarray:
        if x.dtype not in _BLAS_FLOATS:
            return _run(kind, x, axes, keep)
        ax = normalized.get(x.ndim)
        if ax is None:   # (repeated or out-of-range axes raise here, as on the general path)
            ax = normalized[x.ndim] = norm_axes(axes, x.ndim)
        if x.flags.c_contiguous:
            key = (x.shape, x.dtype)
            plan = plans.get(key, False)
            if plan is False:
                if len(plans) >= _PLANS_KEPT:
                    plans.clear()
                plan = plans[key] = _gemv_plan(x.shape, x.dtype, ax, keep)
            if plan is not None:
                r = _gemv(x, plan)
                if mean:   # the sum divided, as numpy's mean and onnxruntime round it
                    np.true_divide(r, plan[0].size, out=r)
                return r
        s = as_array(_sum(x, ax, keep))
        if mean:
            n = _count(x.shape, ax)
            if n:
                s = np.true_divide(s, n, out=s) if s.flags.writeable else s / n
        return s

    return kernel


@op(list(_AXES_INPUT_SINCE), since=1)
@op(list(_AXES_INPUT_SINCE), since=11)  # negative axes
def make_reduce_attr_axes(node: NodeView, ctx: ProviderContext) -> Kernel:
    kind = node.op_type
    keep = bool(node.attr("keepdims", 1))
    axes = int_list(node.attr("axes"))
    if axes is not None and not axes:
        axes = None
    return _constant_axes_kernel(kind, axes, keep)


def _make_reduce_input_axes(node: NodeView, ctx: ProviderContext) -> Kernel:
    kind = node.op_type
    keep = bool(node.attr("keepdims", 1))
    noop = bool(node.attr("noop_with_empty_axes", 0))

    def resolve(a: list[int] | None) -> list[int] | None:
        if not a:
            return [] if noop else None
        return a

    if node.input(1) is None or const_input(node, 1) is not None:
        axes = resolve(int_list(const_input(node, 1)))
        if axes == []:   # noop_with_empty_axes: the input as it is
            return lambda x, *_: _run(kind, x, axes, keep)
        return _constant_axes_kernel(kind, axes, keep)
    return lambda x, a=None: _run(kind, x, resolve(int_list(a)), keep)


for _name, _since in _AXES_INPUT_SINCE.items():
    op(_name, since=_since)(_make_reduce_input_axes)


# --------------------------------------------------------------------------------------------
# ArgMax / ArgMin
# --------------------------------------------------------------------------------------------


@op(["ArgMax", "ArgMin"], since=1)
@op(["ArgMax", "ArgMin"], since=11)
@op(["ArgMax", "ArgMin"], since=12)
def make_arg(node: NodeView, ctx: ProviderContext) -> Kernel:
    fn = np.argmax if node.op_type == "ArgMax" else np.argmin
    axis = int(node.attr("axis", 0))
    keep = bool(node.attr("keepdims", 1))
    last = bool(node.attr("select_last_index", 0))

    def kernel(x: np.ndarray) -> np.ndarray:
        a = norm_axes([axis], x.ndim)[0]
        if upcast_float(x.dtype) is not None and x.dtype != np.float16:
            x = x.astype(np.float32)
        if last:
            r = (x.shape[a] - 1) - fn(np.flip(x, a), axis=a, keepdims=keep)
        else:
            r = fn(x, axis=a, keepdims=keep)
        return as_array(r).astype(np.int64, copy=False)

    return kernel
