"""Ops with ONNX function bodies or few users, run natively: Unique, CumProd, BitCast,
TensorScatter, Det, Hardmax, LpNormalization, MeanVarianceNormalization, Shrink, Swish, SwiGLU,
GroupNormalization, RMSNormalization, NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss,
CenterCropPad.

float16 and the ml_dtypes floats are computed in float32 and cast back (``upcast_float``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from onnx import TensorProto as TP

from onnxplex import NodeView, ProviderContext
from onnxplex._dtypes import np_dtype

from ._np_helpers import LOW_PRECISION_FLOATS, norm_axes, norm_axis, upcast_float
from ._registry import op

Kernel = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]


def _text(v: object) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def _work(dt: np.dtype) -> np.dtype:
    return upcast_float(dt) or dt


def _scalar_int(a: np.ndarray) -> int:
    return int(np.asarray(a).reshape(-1)[0])


# --------------------------------------------------------------------------------------------
# Unique
# --------------------------------------------------------------------------------------------


def _sortable(x: np.ndarray) -> np.ndarray:
    """An array with the same order and equalities as ``x`` that numpy can sort."""
    w = upcast_float(x.dtype)
    return x.astype(w) if w is not None else x


def _unique_flat(x: np.ndarray):
    flat = _sortable(x).reshape(-1)
    _, first, inverse, counts = np.unique(flat, return_index=True, return_inverse=True,
                                          return_counts=True)
    return first, inverse.reshape(-1), counts


def _unique_axis(x: np.ndarray, axis: int):
    n = x.shape[axis]
    rows = np.moveaxis(x, axis, 0).reshape(n, -1)
    if rows.shape[1] == 0:
        codes = np.zeros((n, 1), dtype=np.int64)
    else:
        # order-preserving integer codes per column: rows then compare lexicographically
        # as int64 tuples, which works for any dtype (strings, bfloat16, NaN grouped)
        col_vals = _sortable(rows)
        codes = np.empty(rows.shape, dtype=np.int64)
        for j in range(rows.shape[1]):
            codes[:, j] = np.unique(col_vals[:, j], return_inverse=True)[1].reshape(-1)
    _, first, inverse, counts = np.unique(codes, axis=0, return_index=True,
                                          return_inverse=True, return_counts=True)
    return first, inverse.reshape(-1), counts


@op("Unique", since=11)
@op("Unique", since=28)
def make_unique(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis0 = node.attr("axis")
    keep_sorted = bool(node.attr("sorted", 1))

    def kernel(x: np.ndarray):
        if axis0 is None:
            first, inverse, counts = _unique_flat(x)
        else:
            axis = norm_axis(int(axis0), x.ndim)
            first, inverse, counts = _unique_axis(x, axis)
        if not keep_sorted:  # order of first occurrence
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        y = x.reshape(-1)[first] if axis0 is None else np.take(x, first, axis=axis)
        return (np.ascontiguousarray(y), first.astype(np.int64),
                inverse.astype(np.int64), counts.astype(np.int64))

    return kernel


# --------------------------------------------------------------------------------------------
# CumProd, BitCast, TensorScatter, Det, CenterCropPad
# --------------------------------------------------------------------------------------------


@op("CumProd", since=26)
def make_cumprod(node: NodeView, ctx: ProviderContext) -> Kernel:
    exclusive = bool(node.attr("exclusive", 0))
    reverse = bool(node.attr("reverse", 0))

    def kernel(x: np.ndarray, axis: np.ndarray) -> np.ndarray:
        if np.asarray(axis).size != 1:
            raise ValueError("CumProd: axis must be a scalar")
        a = norm_axis(_scalar_int(axis), x.ndim)
        work = _work(x.dtype)
        xs = np.flip(x, a) if reverse else x
        if exclusive:
            out = np.ones(xs.shape, dtype=work)
            lead = (slice(None),) * a
            np.cumprod(xs[lead + (slice(0, -1),)], axis=a, dtype=work,
                       out=out[lead + (slice(1, None),)])
        else:
            out = np.cumprod(xs, axis=a, dtype=work)
        if reverse:
            out = np.flip(out, a)
        return np.ascontiguousarray(out).astype(x.dtype, copy=False)

    return kernel


_FOUR_BIT = {TP.INT4, TP.UINT4, TP.FLOAT4E2M1}


@op("BitCast", since=26)
def make_bitcast(node: NodeView, ctx: ProviderContext) -> Kernel:
    to = int(node.attr("to"))
    if to == TP.STRING:
        raise ValueError("BitCast: cannot cast to string")
    target = np_dtype(to)
    src = node.input(0)
    if to in _FOUR_BIT or (src is not None and src.elem_type in _FOUR_BIT):
        raise ValueError("BitCast: 4-bit types are not supported")

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.dtype == object:
            raise ValueError("BitCast: cannot cast from string")
        if x.dtype.itemsize != target.itemsize:
            raise ValueError(f"BitCast: {x.dtype} and {target} differ in bit width")
        return (x if x.flags.c_contiguous else x.copy()).view(target)

    return kernel


@op("TensorScatter", since=24)
def make_tensor_scatter(node: NodeView, ctx: ProviderContext) -> Kernel:
    mode = _text(node.attr("mode", "linear"))
    if mode not in ("linear", "circular"):
        raise ValueError(f"TensorScatter: unknown mode {mode!r}")
    axis0 = int(node.attr("axis", -2))

    def kernel(past: np.ndarray, update: np.ndarray,
               write_indices: np.ndarray | None = None) -> np.ndarray:
        axis = norm_axis(axis0, past.ndim)
        if axis == 0:
            raise ValueError("TensorScatter: axis cannot be the batch axis 0")
        if past.ndim != update.ndim or any(
                p != u for i, (p, u) in enumerate(zip(past.shape, update.shape)) if i != axis):
            raise ValueError(f"TensorScatter: update {update.shape} does not fit the cache "
                             f"{past.shape} outside axis {axis}")
        max_len, seq = past.shape[axis], update.shape[axis]
        if seq > max_len:
            raise ValueError(f"TensorScatter: update length {seq} exceeds the cache {max_len}")
        b = past.shape[0]
        w = (np.zeros(b, dtype=np.int64) if write_indices is None
             else write_indices.astype(np.int64).reshape(-1))
        if w.size != b:
            raise ValueError(f"TensorScatter: write_indices has {w.size} entries, batch is {b}")
        pos = w[:, None] + np.arange(seq)
        if mode == "circular":
            pos %= max_len
        elif ((w < 0) | (pos[:, -1:] >= max_len)).any() if seq else (w < 0).any():
            raise IndexError("TensorScatter: write_indices + update length exceed the cache")
        out = past.copy()
        view = np.moveaxis(out, axis, 1)  # [B, max_len, ...] view into out
        view[np.arange(b)[:, None], pos] = np.moveaxis(update, axis, 1)
        return out

    return kernel


@op("Det", since=11)
@op("Det", since=22)
def make_det(node: NodeView, ctx: ProviderContext) -> Kernel:
    def kernel(x: np.ndarray) -> np.ndarray:
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise ValueError(f"Det: input must be [..., M, M], got {x.shape}")
        work = _work(x.dtype)
        return np.asarray(np.linalg.det(x.astype(work, copy=False))).astype(x.dtype)

    return kernel


@op("CenterCropPad", since=18)
def make_center_crop_pad(node: NodeView, ctx: ProviderContext) -> Kernel:
    axes_attr = node.attr("axes")

    def kernel(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
        axes = (norm_axes(axes_attr, x.ndim) if axes_attr is not None
                else tuple(range(x.ndim)))
        sizes = [int(s) for s in np.asarray(shape).reshape(-1)]
        if len(sizes) != len(axes):
            raise ValueError(f"CenterCropPad: {len(sizes)} sizes for {len(axes)} axes")
        src = [slice(None)] * x.ndim
        dst = [slice(None)] * x.ndim
        out_shape = list(x.shape)
        for a, s in zip(axes, sizes):
            d = x.shape[a]
            out_shape[a] = s
            if s < d:  # crop: the extra element of an odd difference comes off the end
                start = (d - s) // 2
                src[a] = slice(start, start + s)
            elif s > d:  # pad
                start = (s - d) // 2
                dst[a] = slice(start, start + d)
        out = np.zeros(out_shape, dtype=x.dtype)
        out[tuple(dst)] = x[tuple(src)]
        return out

    return kernel


# --------------------------------------------------------------------------------------------
# Element-wise: Shrink, Swish, Hardmax
# --------------------------------------------------------------------------------------------


@op("Shrink", since=9)
def make_shrink(node: NodeView, ctx: ProviderContext) -> Kernel:
    lambd = float(node.attr("lambd", 0.5))
    bias = float(node.attr("bias", 0.0))

    def kernel(x: np.ndarray) -> np.ndarray:
        work = _work(x.dtype)
        xs = x.astype(work, copy=False)
        b = work.type(bias)  # ORT casts bias to T (so it truncates for integers)
        out = np.where(xs < -lambd, xs + b, np.where(xs > lambd, xs - b, work.type(0)))
        return np.asarray(out).astype(x.dtype, copy=False)

    return kernel


@op("Swish", since=24)
def make_swish(node: NodeView, ctx: ProviderContext) -> Kernel:
    alpha = float(node.attr("alpha", 1.0))

    def kernel(x: np.ndarray) -> np.ndarray:
        work = _work(x.dtype)
        xs = x.astype(work, copy=False)
        with np.errstate(over="ignore"):
            y = xs / (work.type(1) + np.exp(-work.type(alpha) * xs))
        return np.asarray(y).astype(x.dtype, copy=False)

    return kernel


@op("SwiGLU", since=28)
def make_swiglu(node: NodeView, ctx: ProviderContext) -> Kernel:
    """SwiGLU-28: ``Swish_alpha(A) * B`` (a gated MLP's activation), A and B of one shape
    and type (no broadcasting, as the op defines it)."""
    swish = make_swish(node, ctx)

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.shape != b.shape or a.dtype != b.dtype:
            raise ValueError(f"SwiGLU takes A and B of one shape and type (no broadcasting), "
                             f"got {a.dtype} {list(a.shape)} and {b.dtype} {list(b.shape)}")
        work = _work(a.dtype)
        return (swish(a).astype(work, copy=False) * b.astype(work, copy=False)).astype(
            a.dtype, copy=False)

    return kernel


_IOTAS_KEPT = 16
"""Axis lengths and ranks a Hardmax kernel keeps a position vector for."""
_ONE_HOT_COMPARE_MAX = 8192
"""Hardmax compares the argmax with the positions up to this many elements."""


def _one_hot_max(x2: np.ndarray, axis: int, iotas: dict) -> np.ndarray:
    """1 at the first maximum along ``axis``, else 0: for small inputs the argmax compared
    with the positions along the axis (``iotas`` keeps them per axis length and rank), three
    numpy calls where zeros and ``put_along_axis`` (a Python function) cost ~15 us on a
    batch-1 tensor."""
    keys = x2.astype(np.float32) if x2.dtype in LOW_PRECISION_FLOATS else x2
    if not x2.size or x2.size > _ONE_HOT_COMPARE_MAX:
        # large: writing the ones into zeros beats a full-size comparison and cast
        out = np.zeros(x2.shape, dtype=x2.dtype)
        if x2.size:
            idx = keys.argmax(axis, None, keepdims=True)
            np.put_along_axis(out, idx, out.dtype.type(1), axis=axis)
        return out
    key = (x2.shape[axis], x2.ndim - axis)
    iota = iotas.get(key)
    if iota is None:
        if len(iotas) >= _IOTAS_KEPT:
            iotas.clear()
        iota = iotas[key] = np.arange(key[0]).reshape((-1,) + (1,) * (key[1] - 1))
    return np.equal(keys.argmax(axis, None, keepdims=True), iota).astype(x2.dtype)


@op("Hardmax", since=1)
@op("Hardmax", since=11)
def make_hardmax_v1(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis0 = int(node.attr("axis", 1))
    iotas: dict[tuple[int, int], np.ndarray] = {}

    def kernel(x: np.ndarray) -> np.ndarray:
        a = norm_axis(axis0, x.ndim) if x.ndim else 0
        if a == x.ndim - 1:
            return _one_hot_max(x, a, iotas)
        rows = math.prod(x.shape[:a])
        return _one_hot_max(x.reshape(rows, -1), 1, iotas).reshape(x.shape)

    return kernel


@op("Hardmax", since=13)
def make_hardmax(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis0 = int(node.attr("axis", -1))
    iotas: dict[tuple[int, int], np.ndarray] = {}

    def kernel(x: np.ndarray) -> np.ndarray:
        return _one_hot_max(x, norm_axis(axis0, x.ndim), iotas)

    return kernel


# --------------------------------------------------------------------------------------------
# Normalizations
# --------------------------------------------------------------------------------------------


@op("LpNormalization", since=1)
@op("LpNormalization", since=22)
def make_lp_normalization(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis0 = int(node.attr("axis", -1))
    p = int(node.attr("p", 2))
    if p not in (1, 2):
        raise ValueError(f"LpNormalization: p must be 1 or 2, got {p}")

    def kernel(x: np.ndarray) -> np.ndarray:
        a = norm_axis(axis0, x.ndim)
        xs = x.astype(_work(x.dtype), copy=False)
        if p == 1:
            norm = np.abs(xs).sum(axis=a, keepdims=True)
        else:
            norm = np.sqrt(np.square(xs).sum(axis=a, keepdims=True))
        safe = np.where(norm == 0, 1, norm).astype(xs.dtype)
        y = np.where(norm == 0, 0, xs / safe)
        return y.astype(x.dtype, copy=False)

    return kernel


@op("MeanVarianceNormalization", since=9)
@op("MeanVarianceNormalization", since=13)
def make_mvn(node: NodeView, ctx: ProviderContext) -> Kernel:
    axes0 = tuple(node.attr("axes", (0, 2, 3)))

    def kernel(x: np.ndarray) -> np.ndarray:
        axes = norm_axes(axes0, x.ndim)
        xs = x.astype(_work(x.dtype), copy=False)
        mean = xs.mean(axis=axes, keepdims=True)
        d = xs - mean
        # the function body's sqrt(E[x^2] - E[x]^2) + 1e-9, with the variance taken as the
        # mean squared deviation (as ORT does): same value, without the cancellation
        std = np.sqrt(np.square(d).mean(axis=axes, keepdims=True))
        y = d / (std + xs.dtype.type(1e-9))
        return y.astype(x.dtype, copy=False)

    return kernel


def _stash_dtype(node: NodeView, x_dtype: np.dtype) -> np.dtype:
    stash = int(node.attr("stash_type", TP.FLOAT))
    return np.dtype(np.float64) if stash == TP.DOUBLE else np.dtype(np.float32)


@op("RMSNormalization", since=23)
def make_rms_normalization(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis0 = int(node.attr("axis", -1))
    eps = float(node.attr("epsilon", 1e-5))

    def kernel(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
        a = norm_axis(axis0, x.ndim)
        work = _stash_dtype(node, x.dtype)
        xs = x.astype(work, copy=False)
        ms = np.square(xs).mean(axis=tuple(range(a, x.ndim)), keepdims=True)
        y = xs * (work.type(1) / np.sqrt(ms + work.type(eps)))
        # the function body casts the normalized value back to T, then multiplies by scale
        y = y.astype(x.dtype, copy=False)
        if x.dtype in LOW_PRECISION_FLOATS or x.dtype == np.float16:
            return (y.astype(np.float32) * scale.astype(np.float32)).astype(x.dtype)
        return np.asarray(y * scale, dtype=x.dtype)

    return kernel


@op("GroupNormalization", since=18)
@op("GroupNormalization", since=21)
def make_group_normalization(node: NodeView, ctx: ProviderContext) -> Kernel:
    groups = int(node.attr("num_groups"))
    eps = float(node.attr("epsilon", 1e-5))
    per_channel = node.opset >= 21  # 18: scale/bias per group, 21: per channel

    def kernel(x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
        if x.ndim < 2:
            raise ValueError(f"GroupNormalization: input must be [N, C, ...], got {x.shape}")
        n, c = x.shape[:2]
        if groups <= 0 or c % groups:
            raise ValueError(f"GroupNormalization: {c} channels do not split into "
                             f"{groups} groups")
        work = (_stash_dtype(node, x.dtype) if per_channel
                else np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32))
        g = x.reshape(n, groups, -1).astype(work, copy=False)
        mean = g.mean(axis=2, keepdims=True)
        d = g - mean
        var = np.square(d).mean(axis=2, keepdims=True)
        normed = d / np.sqrt(var + work.type(eps))
        if per_channel:
            normed = normed.astype(x.dtype, copy=False).reshape(n, c, -1)
            sb = np.float32 if _work(x.dtype) != x.dtype else x.dtype
            y = (normed.astype(sb) * scale.astype(sb).reshape(1, c, 1)
                 + bias.astype(sb).reshape(1, c, 1))
        else:
            y = (normed * scale.astype(work).reshape(1, groups, 1)
                 + bias.astype(work).reshape(1, groups, 1))
        return y.reshape(x.shape).astype(x.dtype, copy=False)

    return kernel


# --------------------------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------------------------


def _nll(logp: np.ndarray, target: np.ndarray, weight: np.ndarray | None,
         ignore_index: int | None, reduction: str, out_dtype: np.dtype) -> np.ndarray:
    """Negative log-likelihood of ``logp`` [N, C, d...] (already in the work dtype) at
    ``target`` [N, d...]."""
    if logp.ndim < 2 or target.shape != logp.shape[:1] + logp.shape[2:]:
        raise ValueError(f"loss: target shape {target.shape} does not match input "
                         f"{logp.shape}")
    c = logp.shape[1]
    t = target.astype(np.int64)
    ignored = (t == ignore_index) if ignore_index is not None else np.zeros(t.shape, bool)
    bad = ~ignored & ((t < 0) | (t >= c))
    if bad.any():
        raise IndexError(f"loss: target value {int(t[bad][0])} is out of range [0, {c})")
    safe = np.where(ignored, 0, t)
    picked = np.take_along_axis(logp, np.expand_dims(safe, 1), axis=1)[:, 0]
    loss = np.where(ignored, logp.dtype.type(0), -picked)
    if weight is not None:
        w = np.where(ignored, 0, weight.astype(logp.dtype)[safe]).astype(logp.dtype)
    else:
        w = (~ignored).astype(logp.dtype)
    if weight is not None:
        loss = loss * w
    if reduction == "none":
        out = loss
    elif reduction == "sum":
        out = loss.sum()
    elif reduction == "mean":
        if weight is None and ignore_index is None:
            out = loss.mean()
        else:
            out = loss.sum() / w.sum()
    else:
        raise ValueError(f"loss: unknown reduction {reduction!r}")
    return np.asarray(out).astype(out_dtype, copy=False)


def _loss_attrs(node: NodeView) -> tuple[str, int | None]:
    reduction = _text(node.attr("reduction", "mean"))
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(f"{node.op_type}: unknown reduction {reduction!r}")
    ii = node.attr("ignore_index")
    return reduction, None if ii is None else int(ii)


@op("NegativeLogLikelihoodLoss", since=12)
@op("NegativeLogLikelihoodLoss", since=13)
@op("NegativeLogLikelihoodLoss", since=22)
def make_nll_loss(node: NodeView, ctx: ProviderContext) -> Kernel:
    reduction, ignore_index = _loss_attrs(node)

    def kernel(x: np.ndarray, target: np.ndarray, weight: np.ndarray | None = None):
        xs = x.astype(_work(x.dtype), copy=False)
        return _nll(xs, target, weight, ignore_index, reduction, x.dtype)

    return kernel


@op("SoftmaxCrossEntropyLoss", since=12)
@op("SoftmaxCrossEntropyLoss", since=13)
def make_sce_loss(node: NodeView, ctx: ProviderContext) -> Kernel:
    reduction, ignore_index = _loss_attrs(node)
    want_log_prob = len(node.outputs) > 1 and node.outputs[1] is not None

    def kernel(x: np.ndarray, target: np.ndarray, weight: np.ndarray | None = None):
        xs = x.astype(_work(x.dtype), copy=False)
        if xs.ndim < 2:
            raise ValueError(f"SoftmaxCrossEntropyLoss: input must be [N, C, ...], "
                             f"got {x.shape}")
        shifted = xs - xs.max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        loss = _nll(logp, target, weight, ignore_index, reduction, x.dtype)
        if want_log_prob:
            return loss, logp.astype(x.dtype, copy=False)
        return loss

    return kernel

