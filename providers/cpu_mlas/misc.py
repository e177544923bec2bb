"""Generators, scans and selections: Range, EyeLike, OneHot, Trilu, NonZero, CumSum, TopK."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import numpy as np

from onnxplex import NodeView, ProviderContext
from onnxplex._dtypes import np_dtype
from onnxplex.graph.limits import check_allocation

from . import _native
from ._np_helpers import LOW_PRECISION_FLOATS, const_input, norm_axis
from ._registry import op

logger = logging.getLogger(__name__)

Kernel = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]


def _scalar(a: np.ndarray) -> np.generic:
    return np.asarray(a).reshape(-1)[0]


@op("Range", since=11)
@op("Range", since=27)
def make_range(node: NodeView, ctx: ProviderContext) -> Kernel:
    stash = int(node.attr("stash_type", 1))

    def kernel(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
        dt = np.asarray(start).dtype
        s, lim, d = _scalar(start), _scalar(limit), _scalar(delta)
        if dt.kind in "iu":
            s, lim, d = int(s), int(lim), int(d)
            if d == 0:
                raise ValueError("Range: delta must not be 0")
            n = max(0, -((s - lim) // d))
            check_allocation((n,), dt, "Range's output")
            return np.arange(s, s + n * d, d, dtype=dt)[:n]
        work = dt
        if dt in LOW_PRECISION_FLOATS or dt == np.float16:
            work = np.dtype(np.float32) if stash == 1 or dt in LOW_PRECISION_FLOATS else dt
        s, lim, d = work.type(s), work.type(lim), work.type(d)
        if float(d) == 0.0:
            raise ValueError("Range: delta must not be 0")
        n = max(0, math.ceil(float(lim - s) / float(d)))
        check_allocation((n,), work, "Range's output")
        # ORT accumulates (value += delta), which cumsum reproduces bit for bit
        steps = np.full(n, d, dtype=work)
        if n:
            steps[0] = s
        return np.cumsum(steps, dtype=work).astype(dt, copy=False)

    return kernel


@op("EyeLike", since=9)
def make_eye_like(node: NodeView, ctx: ProviderContext) -> Kernel:
    k = int(node.attr("k", 0))
    elem = node.attr("dtype")
    dtype = None if elem is None else np_dtype(int(elem))

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.ndim != 2:
            raise ValueError(f"EyeLike needs a 2-D input, got rank {x.ndim}")
        dt = dtype if dtype is not None else x.dtype
        if dt in LOW_PRECISION_FLOATS:
            return np.eye(x.shape[0], x.shape[1], k, dtype=np.float32).astype(dt)
        return np.eye(x.shape[0], x.shape[1], k, dtype=dt)

    return kernel


@op("OneHot", since=9)
@op("OneHot", since=11)
def make_one_hot(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis = int(node.attr("axis", -1))

    def kernel(indices: np.ndarray, depth: np.ndarray, values: np.ndarray) -> np.ndarray:
        d = int(_scalar(depth))
        idx = indices.astype(np.int64) if indices.dtype != np.int64 else indices
        idx = np.where(idx < 0, idx + d, idx)
        a = norm_axis(axis, idx.ndim + 1)
        check_allocation((*idx.shape, d), values.dtype, "OneHot's output")
        hot = np.expand_dims(idx, a) == np.arange(d).reshape(
            (d,) + (1,) * (idx.ndim - a))
        vals = values.reshape(-1)
        return np.where(hot, vals[1], vals[0])

    return kernel


@op("Trilu", since=14)
def make_trilu(node: NodeView, ctx: ProviderContext) -> Kernel:
    fn = np.triu if int(node.attr("upper", 1)) else np.tril
    k_const = const_input(node, 1)
    k0 = 0 if k_const is None else int(_scalar(k_const))

    def kernel(x: np.ndarray, k: np.ndarray | None = None) -> np.ndarray:
        kk = k0 if k is None or k_const is not None else int(_scalar(k))
        if x.dtype in LOW_PRECISION_FLOATS or x.dtype == object:
            keep = fn(np.ones(x.shape[-2:], dtype=bool), kk)
            return np.where(keep, x, np.zeros((), dtype=x.dtype) if x.dtype != object else "")
        return fn(x, kk)

    return kernel


@op("NonZero", since=9)
def make_nonzero(node: NodeView, ctx: ProviderContext) -> Kernel:
    def kernel(x: np.ndarray) -> np.ndarray:
        if x.ndim == 0:  # ORT treats a scalar as shape [1]
            x = x.reshape(1)
        if x.dtype in LOW_PRECISION_FLOATS:
            x = x.astype(np.float32)
        return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)

    return kernel


@op("CumSum", since=11)
@op("CumSum", since=14)
def make_cumsum(node: NodeView, ctx: ProviderContext) -> Kernel:
    exclusive = bool(node.attr("exclusive", 0))
    reverse = bool(node.attr("reverse", 0))
    axis_const = const_input(node, 1)

    def kernel(x: np.ndarray, axis: np.ndarray) -> np.ndarray:
        a = norm_axis(int(_scalar(axis_const if axis_const is not None else axis)), x.ndim)
        dt = x.dtype
        work = np.dtype(np.float32) if dt in LOW_PRECISION_FLOATS else dt
        xs = np.flip(x, a) if reverse else x
        out = _cumsum(xs, a, work)
        if exclusive:
            out = np.roll(out, 1, axis=a)
            out[(slice(None),) * a + (0,)] = 0
        if reverse:
            out = np.flip(out, a)
        return np.ascontiguousarray(out).astype(dt, copy=False)

    return kernel


def _cumsum(x: np.ndarray, axis: int, dtype: np.dtype) -> np.ndarray:
    """np.cumsum, or for a short axis over long rows, one vectorised add per step (numpy's
    accumulate is sequential per element; summation order is the same either way)."""
    n = x.shape[axis]
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    if n < 2 or inner < 512 or n > 1024:
        return np.cumsum(x, axis=axis, dtype=dtype)
    out = np.empty(x.shape, dtype=dtype)
    src = np.moveaxis(x, axis, 0)
    dst = np.moveaxis(out, axis, 0)
    dst[0] = src[0]
    for i in range(1, n):
        np.add(dst[i - 1], src[i], out=dst[i], dtype=dtype)
    return out


# --------------------------------------------------------------------------------------------
# TopK
# --------------------------------------------------------------------------------------------


def _best_first_key(x: np.ndarray, largest: bool) -> np.ndarray:
    """A key whose ascending order is the wanted order (ties keep index order)."""
    if x.dtype in LOW_PRECISION_FLOATS:
        x = x.astype(np.float32)
    if not largest:
        return x
    if x.dtype.kind in "iu":
        return np.invert(x)  # order-reversing and overflow-free for signed and unsigned
    if x.dtype.kind == "b":
        return np.logical_not(x)
    return np.negative(x)


def _sorted_subset(key: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``idx`` (the chosen positions per row) ordered by key, lower index first among ties."""
    idx = np.sort(idx, axis=-1)
    order = np.argsort(np.take_along_axis(key, idx, axis=-1), axis=-1, kind="stable")
    return np.take_along_axis(idx, order, axis=-1)


def _topk_indices(key: np.ndarray, k: int) -> np.ndarray:
    """Indices (last axis) of the k smallest keys, sorted, lower index first among ties."""
    n = key.shape[-1]
    if k == 0:
        return np.zeros(key.shape[:-1] + (0,), dtype=np.int64)
    if 4 * k >= n or (key.dtype.kind == "f" and np.isnan(key).any()):
        return np.argsort(key, axis=-1, kind="stable")[..., :k]
    part = np.argpartition(key, k - 1, axis=-1)[..., :k]
    chosen = np.take_along_axis(key, part, axis=-1)
    kth = chosen.max(axis=-1, keepdims=True)
    if np.array_equal((key == kth).sum(axis=-1), (chosen == kth).sum(axis=-1)):
        return _sorted_subset(key, part)  # no tie straddles the cut: the partition is exact
    # keep every key below the k-th value, then the lowest-index ones equal to it
    lt = key < kth
    eq = key == kth
    need = k - lt.sum(axis=-1, keepdims=True)
    sel = lt | (eq & (np.cumsum(eq, axis=-1) <= need))
    idx = np.nonzero(sel.reshape(-1, n))[1].reshape(key.shape[:-1] + (k,))
    return _sorted_subset(key, idx)


@op("TopK", since=1)
@op("TopK", since=10)
@op("TopK", since=11)
def make_topk(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis = int(node.attr("axis", -1))
    largest = bool(node.attr("largest", 1))
    k_attr = node.attr("k") if node.opset < 10 else None
    # the native selection (one pass per row for a small k, threads over rows): ~8x numpy's
    # argpartition and tie checks on k-NN's [1000, 400] distances
    select = getattr(_native.native(), "topk", None)
    threads = _native.threads(ctx.intra_op_num_threads)

    def kernel(x: np.ndarray, k: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        kk = int(k_attr) if k_attr is not None else int(_scalar(k))
        a = norm_axis(axis, x.ndim)
        if not 0 <= kk <= x.shape[a]:
            raise ValueError(f"TopK: k={kk} is out of range for axis size {x.shape[a]}")
        xm = np.moveaxis(x, a, -1)
        found = None
        if select is not None and x.size and not (x.dtype.kind == "f" and np.isnan(x).any()):
            # (None: a dtype it does not take; a NaN is left to numpy's order)
            found = select(np.ascontiguousarray(xm), kk, largest, threads)
            if found is not None and a == x.ndim - 1:
                return found
        if found is not None:
            vals, idx = found
        else:
            idx = _topk_indices(_best_first_key(xm, largest), kk)
            vals = np.take_along_axis(xm, idx, axis=-1)
        return (np.ascontiguousarray(np.moveaxis(vals, -1, a)),
                np.ascontiguousarray(np.moveaxis(idx.astype(np.int64, copy=False), -1, a)))

    return kernel

