"""Convolution, pooling, normalization and softmax kernels for cpu_mlas.

Convolutions are im2col + one batched BLAS matmul (``np.matmul`` over ``[N, groups]``), with
fast paths for 1x1 stride-1 convolutions (a plain matmul, no copy) and depthwise convolutions
(a multiply-add per kernel tap). Pools reduce over kernel taps, each tap a strided view of the
padded input. Half-precision inputs are computed in float32 and cast back.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import as_strided
from onnx import TensorProto as TP

from onnxplex import NodeView, ProviderContext

from ._registry import op

logger = logging.getLogger(__name__)

FLOATS = frozenset({TP.FLOAT16, TP.FLOAT, TP.DOUBLE, TP.BFLOAT16})
_LOW_PRECISION = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def compute_dtype(dt: np.dtype) -> np.dtype:
    """The dtype arithmetic runs in: float32 for float16/bfloat16, else ``dt`` itself."""
    return np.dtype(np.float32) if np.dtype(dt) in _LOW_PRECISION else np.dtype(dt)


def to_compute(a: np.ndarray) -> np.ndarray:
    """``a`` in its compute dtype (a copy only for float16/bfloat16)."""
    return a.astype(np.float32) if a.dtype in _LOW_PRECISION else a


def ints(value: Any, n: int, default: int) -> tuple[int, ...]:
    """An ints attribute as a tuple of ``n`` values, ``default`` when absent or empty."""
    if value is None or len(value) == 0:
        return (default,) * n
    return tuple(int(v) for v in value)


def pad_constant(x: np.ndarray, begins: Sequence[int], ends: Sequence[int],
                 value: Any = 0, first_axis: int = 2) -> np.ndarray:
    """``x`` padded with ``value`` on the axes from ``first_axis`` on (non-negative pads)."""
    if not any(begins) and not any(ends):
        return x
    shape = list(x.shape)
    inner = [slice(None)] * x.ndim
    for i, (b, e) in enumerate(zip(begins, ends)):
        ax = first_axis + i
        inner[ax] = slice(b, b + shape[ax])
        shape[ax] += b + e
    out = np.full(shape, value, dtype=x.dtype) if value != 0 else np.zeros(shape, dtype=x.dtype)
    out[tuple(inner)] = x
    return out


def auto_pads(auto_pad: str, in_sp: Sequence[int], k_eff: Sequence[int],
              strides: Sequence[int], pads: Sequence[int] | None) -> tuple[list[int], list[int]]:
    """Begin/end pads of a Conv or pool from ``auto_pad`` (effective, dilated kernel sizes)."""
    nd = len(in_sp)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for n, k, s in zip(in_sp, k_eff, strides):
            out = -(-n // s)
            need = max(0, (out - 1) * s + k - n)
            head = need // 2 if auto_pad == "SAME_UPPER" else (need + 1) // 2
            begins.append(head)
            ends.append(need - head)
        return begins, ends
    if auto_pad == "VALID" or not pads:
        return [0] * nd, [0] * nd
    return [int(p) for p in pads[:nd]], [int(p) for p in pads[nd:2 * nd]]


def window_view(xp: np.ndarray, kshape: Sequence[int], dil: Sequence[int],
                strides: Sequence[int], out_sp: Sequence[int]) -> np.ndarray:
    """``[N, C, *kernel, *out]`` strided view of the padded input: the im2col source."""
    st = xp.strides
    nd = len(kshape)
    shape = xp.shape[:2] + tuple(kshape) + tuple(out_sp)
    strides_ = st[:2] + tuple(st[2 + i] * dil[i] for i in range(nd)) \
        + tuple(st[2 + i] * strides[i] for i in range(nd))
    return as_strided(xp, shape=shape, strides=strides_, writeable=False)


def tap_slices(tap: Sequence[int], dil: Sequence[int], strides: Sequence[int],
               out_sp: Sequence[int]) -> tuple[slice, ...]:
    """The strided slice of the padded input that kernel tap ``tap`` reads, for all outputs."""
    return (slice(None), slice(None)) + tuple(
        slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, s, o in zip(tap, dil, strides, out_sp))


def _bias_shape(m: int, nd: int) -> tuple[int, ...]:
    return (1, m) + (1,) * nd


# --------------------------------------------------------------------------------------------
# Conv
# --------------------------------------------------------------------------------------------


def _conv_geometry(node: NodeView, x_shape: tuple[int, ...], kshape: Sequence[int],
                   ) -> tuple[tuple[int, ...], tuple[int, ...], list[int], list[int], list[int]]:
    nd = len(kshape)
    strides = ints(node.attr("strides"), nd, 1)
    dil = ints(node.attr("dilations"), nd, 1)
    in_sp = x_shape[2:]
    k_eff = [(k - 1) * d + 1 for k, d in zip(kshape, dil)]
    pb, pe = auto_pads(node.attr("auto_pad", "NOTSET"), in_sp, k_eff, strides, node.attr("pads"))
    out_sp = [(n + b + e - k) // s + 1 for n, b, e, k, s in zip(in_sp, pb, pe, k_eff, strides)]
    return strides, dil, pb, pe, out_sp


class _ConvWeights:
    """A Conv weight reshaped once: ``mat`` is ``[G, M/G, C/G * prod(k)]`` in compute dtype."""

    def __init__(self, w: np.ndarray, group: int) -> None:
        w = to_compute(np.asarray(w))
        self.m = w.shape[0]
        self.cg = w.shape[1]
        self.kshape = tuple(w.shape[2:])
        self.group = group
        self.mat = np.ascontiguousarray(w.reshape(group, self.m // group, -1))
        self.taps = np.ascontiguousarray(w.reshape(self.m, -1))  # depthwise: [C, prod(k)]


def _conv(x: np.ndarray, cw: _ConvWeights, node: NodeView, bias: np.ndarray | None) -> np.ndarray:
    out_dtype = x.dtype
    x = to_compute(x)
    n, c = x.shape[:2]
    g, kshape, nd = cw.group, cw.kshape, len(cw.kshape)
    strides, dil, pb, pe, out_sp = _conv_geometry(node, x.shape, kshape)
    length = math.prod(out_sp)
    one_by_one = all(k == 1 for k in kshape) and all(s == 1 for s in strides)
    if one_by_one and not any(pb) and not any(pe):
        y = np.matmul(cw.mat, x.reshape(n, g, c // g, length))
    elif g == c and cw.m == c and cw.cg == 1:
        y = _depthwise(pad_constant(x, pb, pe), cw, dil, strides, out_sp)
    else:
        xp = pad_constant(x, pb, pe)
        cols = window_view(xp, kshape, dil, strides, out_sp).reshape(n, g, -1, length)
        y = np.matmul(cw.mat, cols)
    y = y.reshape((n, cw.m) + tuple(out_sp))
    if bias is not None:
        y += bias.reshape(_bias_shape(cw.m, nd))
    return y if y.dtype == out_dtype else y.astype(out_dtype)


def _depthwise(xp: np.ndarray, cw: _ConvWeights, dil: Sequence[int], strides: Sequence[int],
               out_sp: Sequence[int]) -> np.ndarray:
    c = xp.shape[1]
    wshape = (1, c) + (1,) * len(out_sp)
    y = tmp = None
    for t, tap in enumerate(itertools.product(*(range(k) for k in cw.kshape))):
        v = xp[tap_slices(tap, dil, strides, out_sp)]
        wt = cw.taps[:, t].reshape(wshape)
        if y is None:
            y = v * wt
            tmp = np.empty_like(y)
        else:
            np.multiply(v, wt, out=tmp)
            y += tmp
    return y


@op("Conv", since=1, dtypes={"T": FLOATS})
@op("Conv", since=11, dtypes={"T": FLOATS})
@op("Conv", since=22, dtypes={"T": FLOATS})
def make_conv(node: NodeView, ctx: ProviderContext):
    """Conv-1/11/22: N-D, groups, dilations, strides, pads/auto_pad, optional bias."""
    group = int(node.attr("group", 1))
    w_info, b_info = node.input(1), node.input(2)
    packed = _ConvWeights(w_info.const, group) if w_info is not None and w_info.is_const else None
    bias_c = to_compute(b_info.const) if b_info is not None and b_info.is_const else None

    def kernel(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        cw = packed if packed is not None else _ConvWeights(w, group)
        bias = bias_c if bias_c is not None else (None if b is None else to_compute(b))
        return _conv(x, cw, node, bias)

    return kernel


# --------------------------------------------------------------------------------------------
# ConvTranspose
# --------------------------------------------------------------------------------------------


class _ConvTWeights:
    """ConvTranspose weight ``[C, M/G, *k]`` as ``[G, M/G * prod(k), C/G]`` (the col matrix)."""

    def __init__(self, w: np.ndarray, group: int) -> None:
        w = to_compute(np.asarray(w))
        c, mg = w.shape[:2]
        self.kshape = tuple(w.shape[2:])
        self.m = mg * group
        self.group = group
        self.mat = np.ascontiguousarray(
            w.reshape(group, c // group, mg * math.prod(self.kshape)).transpose(0, 2, 1))


def _convt_geometry(node: NodeView, in_sp: Sequence[int], kshape: Sequence[int]):
    nd = len(kshape)
    strides = ints(node.attr("strides"), nd, 1)
    dil = ints(node.attr("dilations"), nd, 1)
    opad = ints(node.attr("output_padding"), nd, 0)
    auto_pad = node.attr("auto_pad", "NOTSET")
    pads = node.attr("pads")
    out_shape = node.attr("output_shape")
    if out_shape is not None and len(out_shape) == nd + 2:
        out_shape = out_shape[2:]
    pb, pe, out_sp = [], [], []
    for i in range(nd):
        natural = (in_sp[i] - 1) * strides[i] + (kshape[i] - 1) * dil[i] + 1 + opad[i]
        if out_shape:
            target = int(out_shape[i])
            total = max(0, natural - target)
            head = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            target = in_sp[i] * strides[i]
            total = max(0, natural - target)
            head = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        else:
            head = int(pads[i]) if pads and auto_pad != "VALID" else 0
            tail = int(pads[nd + i]) if pads and auto_pad != "VALID" else 0
            target = natural - head - tail
        pb.append(head)
        pe.append(natural - head - target)
        out_sp.append(target)
    return strides, dil, pb, out_sp


def _conv_transpose(x: np.ndarray, cw: _ConvTWeights, node: NodeView,
                    bias: np.ndarray | None) -> np.ndarray:
    out_dtype = x.dtype
    x = to_compute(x)
    n, c = x.shape[:2]
    in_sp = x.shape[2:]
    kshape, g, m = cw.kshape, cw.group, cw.m
    strides, dil, pb, out_sp = _convt_geometry(node, in_sp, kshape)
    cols = np.matmul(cw.mat, x.reshape(n, g, c // g, -1))  # [N, G, M/G * K, L]
    cols = cols.reshape((n, m) + tuple(kshape) + tuple(in_sp))
    span = [(k - 1) * d + (i - 1) * s + 1 for k, d, i, s in zip(kshape, dil, in_sp, strides)]
    full_sp = [max(sp, b + o) for sp, b, o in zip(span, pb, out_sp)]
    full = np.zeros((n, m) + tuple(full_sp), dtype=cols.dtype)
    for tap in itertools.product(*(range(k) for k in kshape)):
        full[tap_slices(tap, dil, strides, in_sp)] += cols[(slice(None), slice(None)) + tap]
    crop = (slice(None), slice(None)) + tuple(slice(b, b + o) for b, o in zip(pb, out_sp))
    y = full[crop]
    if bias is not None:
        y += bias.reshape(_bias_shape(m, len(kshape)))
    if y.dtype != out_dtype:
        return y.astype(out_dtype)
    return np.ascontiguousarray(y)


@op("ConvTranspose", since=1, dtypes={"T": FLOATS})
@op("ConvTranspose", since=11, dtypes={"T": FLOATS})
@op("ConvTranspose", since=22, dtypes={"T": FLOATS})
def make_conv_transpose(node: NodeView, ctx: ProviderContext):
    """ConvTranspose-1/11/22: groups, strides, pads, output_padding, output_shape, dilations."""
    group = int(node.attr("group", 1))
    w_info, b_info = node.input(1), node.input(2)
    packed = _ConvTWeights(w_info.const, group) if w_info is not None and w_info.is_const else None
    bias_c = to_compute(b_info.const) if b_info is not None and b_info.is_const else None

    def kernel(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        cw = packed if packed is not None else _ConvTWeights(w, group)
        bias = bias_c if bias_c is not None else (None if b is None else to_compute(b))
        return _conv_transpose(x, cw, node, bias)

    return kernel


# --------------------------------------------------------------------------------------------
# Pools
# --------------------------------------------------------------------------------------------


class _PoolGeometry:
    """Per-call pool geometry: pads (explicit + ceil-mode tail) and the output size."""

    def __init__(self, node: NodeView, in_sp: Sequence[int], dilations: bool) -> None:
        kshape = tuple(int(k) for k in node.attr("kernel_shape"))
        nd = len(kshape)
        self.kshape = kshape
        self.strides = ints(node.attr("strides"), nd, 1)
        self.dil = ints(node.attr("dilations"), nd, 1) if dilations else (1,) * nd
        ceil_mode = int(node.attr("ceil_mode", 0))
        k_eff = [(k - 1) * d + 1 for k, d in zip(kshape, self.dil)]
        self.pb, self.pe = auto_pads(node.attr("auto_pad", "NOTSET"), in_sp, k_eff,
                                     self.strides, node.attr("pads"))
        out_sp, extra = [], []
        for n, b, e, k, s in zip(in_sp, self.pb, self.pe, k_eff, self.strides):
            span = n + b + e - k
            o = (-(-span // s) if ceil_mode else span // s) + 1
            if ceil_mode and (o - 1) * s >= n + b:  # the last window must start inside
                o -= 1
            out_sp.append(o)
            extra.append(max(0, (o - 1) * s + k - (n + b + e)))
        self.out_sp = out_sp
        self.extra = extra  # ceil-mode overhang past the explicit end pad

    def padded(self, x: np.ndarray, value: Any) -> np.ndarray:
        return pad_constant(x, self.pb, [e + x_ for e, x_ in zip(self.pe, self.extra)], value)

    def taps(self):
        return itertools.product(*(range(k) for k in self.kshape))


def _pool_min(dt: np.dtype) -> Any:
    return -np.inf if dt.kind == "f" or dt in _LOW_PRECISION else np.iinfo(dt).min


def _max_pool(node: NodeView, x: np.ndarray, want_indices: bool) -> tuple[np.ndarray, ...]:
    geo = _PoolGeometry(node, x.shape[2:], dilations=True)
    xp = geo.padded(x, _pool_min(x.dtype))
    y = idx = None
    for t, tap in enumerate(geo.taps()):
        v = xp[tap_slices(tap, geo.dil, geo.strides, geo.out_sp)]
        if y is None:
            y = v.copy()
            if want_indices:
                idx = np.zeros(y.shape, dtype=np.int32)
        elif want_indices:
            better = v > y
            np.copyto(y, v, where=better)
            idx[better] = t
        else:
            np.maximum(y, v, out=y)
    if not want_indices:
        return (y,)
    return y, _max_pool_indices(node, x.shape, geo, idx)


def _max_pool_indices(node: NodeView, x_shape: tuple[int, ...], geo: _PoolGeometry,
                      tap_idx: np.ndarray) -> np.ndarray:
    """Flat input index of each maximum (row-major, or column-major over H, W if asked)."""
    n, c = x_shape[:2]
    in_sp = x_shape[2:]
    nd = len(in_sp)
    column_major = int(node.attr("storage_order", 0)) == 1
    tap_coords = np.unravel_index(tap_idx, geo.kshape)
    flat = np.zeros(tap_idx.shape, dtype=np.int64)
    stride = 1
    order = range(nd) if column_major else reversed(range(nd))
    for i in order:
        pos_shape = [1] * (2 + nd)
        pos_shape[2 + i] = geo.out_sp[i]
        pos = (np.arange(geo.out_sp[i]) * geo.strides[i] - geo.pb[i]).reshape(pos_shape)
        flat += (pos + tap_coords[i] * geo.dil[i]) * stride
        stride *= in_sp[i]
    plane = math.prod(in_sp)
    flat += (np.arange(n * c, dtype=np.int64) * plane).reshape((n, c) + (1,) * nd)
    return flat


def _max_pool_factory():
    def make(node: NodeView, ctx: ProviderContext):
        want = len(node.outputs) > 1 and node.outputs[1] is not None

        def kernel(x: np.ndarray) -> Any:
            out = _max_pool(node, x, want)
            return out if want else out[0]

        return kernel

    return make


def _needs_kernel_shape(node: NodeView) -> str | None:
    if not node.attr("kernel_shape"):
        return "kernel_shape attribute is required"
    return None


for _v in (1, 8, 10, 11):
    op("MaxPool", since=_v, dtypes={"T": FLOATS}, predicate=_needs_kernel_shape)(
        _max_pool_factory())
for _v in (12, 22):  # int8/uint8 since 12
    op("MaxPool", since=_v, dtypes={"T": FLOATS | {TP.INT8, TP.UINT8}},
       predicate=_needs_kernel_shape)(_max_pool_factory())


def _avg_pool(node: NodeView, x: np.ndarray, dilations: bool) -> np.ndarray:
    out_dtype = x.dtype
    x = to_compute(x)
    in_sp = x.shape[2:]
    geo = _PoolGeometry(node, in_sp, dilations)
    xp = geo.padded(x, 0)
    y = None
    for tap in geo.taps():
        v = xp[tap_slices(tap, geo.dil, geo.strides, geo.out_sp)]
        if y is None:
            y = v.copy()
        else:
            y += v
    include_pad = int(node.attr("count_include_pad", 0)) == 1
    # The divisor is separable: per axis, the number of taps inside the counted region.
    count = np.ones((), dtype=y.dtype)
    for i, n in enumerate(in_sp):
        lo, hi = (-geo.pb[i], n + geo.pe[i]) if include_pad else (0, n)
        start = np.arange(geo.out_sp[i]) * geo.strides[i] - geo.pb[i]
        pos = start[:, None] + np.arange(geo.kshape[i])[None, :] * geo.dil[i]
        cnt = ((pos >= lo) & (pos < hi)).sum(axis=1).astype(y.dtype)
        count = np.multiply.outer(count, cnt)
    y /= np.maximum(count, 1)
    return y if y.dtype == out_dtype else y.astype(out_dtype)


def _avg_pool_factory(dilations: bool):
    def make(node: NodeView, ctx: ProviderContext):
        return lambda x: _avg_pool(node, x, dilations)

    return make


for _v in (1, 7, 10, 11):
    op("AveragePool", since=_v, dtypes={"T": FLOATS}, predicate=_needs_kernel_shape)(
        _avg_pool_factory(False))
for _v in (19, 22):
    op("AveragePool", since=_v, dtypes={"T": FLOATS}, predicate=_needs_kernel_shape)(
        _avg_pool_factory(True))


@op("GlobalAveragePool", since=1, dtypes={"T": FLOATS})
@op("GlobalAveragePool", since=22, dtypes={"T": FLOATS})
def make_global_average_pool(node: NodeView, ctx: ProviderContext):
    """GlobalAveragePool: mean over the spatial axes (float32 accumulation for halves)."""

    def kernel(x: np.ndarray) -> np.ndarray:
        axes = tuple(range(2, x.ndim))
        return x.mean(axis=axes, keepdims=True, dtype=compute_dtype(x.dtype)).astype(
            x.dtype, copy=False)

    return kernel


@op("GlobalMaxPool", since=1, dtypes={"T": FLOATS})
@op("GlobalMaxPool", since=22, dtypes={"T": FLOATS})
def make_global_max_pool(node: NodeView, ctx: ProviderContext):
    """GlobalMaxPool: max over the spatial axes."""

    def kernel(x: np.ndarray) -> np.ndarray:
        return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)

    return kernel


# --------------------------------------------------------------------------------------------
# Normalization
# --------------------------------------------------------------------------------------------


def _bn_training(node: NodeView) -> str | None:
    if node.opset < 7 and int(node.attr("is_test", 0)) == 0:
        return "BatchNormalization training mode (is_test=0) is not supported"
    if node.opset >= 14 and int(node.attr("training_mode", 0)) != 0:
        return "BatchNormalization training_mode=1 is not supported (inference only)"
    if node.opset < 14 and any(o is not None for o in node.outputs[1:]):
        return "BatchNormalization training outputs (mean, var, saved_*) are not supported"
    return None


def _channel_param(p: np.ndarray, ndim: int) -> np.ndarray:
    """A per-channel ``[C]`` parameter (or ``[C, *spatial]`` when spatial=0) for broadcasting."""
    p = np.asarray(p)
    if p.ndim <= 1:
        return p.reshape((1, -1) + (1,) * (ndim - 2))
    return p.reshape((1,) + p.shape)


@op("BatchNormalization", since=6, dtypes={"T": FLOATS}, predicate=_bn_training)
@op("BatchNormalization", since=7, dtypes={"T": FLOATS}, predicate=_bn_training)
@op("BatchNormalization", since=9, dtypes={"T": FLOATS}, predicate=_bn_training)
@op("BatchNormalization", since=14, dtypes={"T": FLOATS, "U": FLOATS}, predicate=_bn_training)
@op("BatchNormalization", since=15, dtypes={"T": FLOATS, "T1": FLOATS, "T2": FLOATS},
    predicate=_bn_training)
def make_batch_norm(node: NodeView, ctx: ProviderContext):
    """BatchNormalization (inference): ``y = x * a + b``, ``a``/``b`` folded once when constant."""
    eps = float(node.attr("epsilon", 1e-5))

    def fold(scale, bias, mean, var):
        scale, bias, mean, var = (np.asarray(v, dtype=np.float64) for v in (scale, bias, mean, var))
        a = scale / np.sqrt(var + eps)
        return a, bias - mean * a

    consts = [node.input(i) for i in range(1, 5)]
    folded = None
    if all(v is not None and v.is_const for v in consts):
        folded = fold(*(v.const for v in consts))

    def kernel(x, scale, bias, mean, var):
        a, b = folded if folded is not None else fold(scale, bias, mean, var)
        cd = compute_dtype(x.dtype)
        a = _channel_param(a.astype(cd), x.ndim)
        b = _channel_param(b.astype(cd), x.ndim)
        y = np.multiply(to_compute(x), a)
        y += b
        return y.astype(x.dtype, copy=False)

    return kernel


@op("InstanceNormalization", since=1, dtypes={"T": FLOATS})
@op("InstanceNormalization", since=6, dtypes={"T": FLOATS})
@op("InstanceNormalization", since=22, dtypes={"T": FLOATS})
def make_instance_norm(node: NodeView, ctx: ProviderContext):
    """InstanceNormalization: per-(n, c) mean/variance over the spatial axes."""
    eps = float(node.attr("epsilon", 1e-5))

    def kernel(x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
        n, c = x.shape[:2]
        xr = to_compute(x).reshape(n * c, -1)
        mean = xr.mean(axis=1, keepdims=True)
        d = xr - mean
        var = np.einsum("ij,ij->i", d, d)[:, None] / max(xr.shape[1], 1)
        inv = (1.0 / np.sqrt(var + eps)).astype(d.dtype)
        sc = np.tile(np.asarray(scale, dtype=d.dtype), n)[:, None]
        bi = np.tile(np.asarray(bias, dtype=d.dtype), n)[:, None]
        d *= inv * sc
        d += bi
        return d.reshape(x.shape).astype(x.dtype, copy=False)

    return kernel


@op("LRN", since=1, dtypes={"T": FLOATS})
@op("LRN", since=13, dtypes={"T": FLOATS})
def make_lrn(node: NodeView, ctx: ProviderContext):
    """LRN across channels: ``y = x / (bias + alpha / size * sum(x^2))^beta``."""
    size = int(node.attr("size"))
    alpha = float(node.attr("alpha", 1e-4))
    beta = float(node.attr("beta", 0.75))
    bias = float(node.attr("bias", 1.0))
    pre = (size - 1) // 2
    post = size - 1 - pre

    def kernel(x: np.ndarray) -> np.ndarray:
        xc = to_compute(x)
        c = x.shape[1]
        sq = np.square(xc)
        acc = sq.copy()
        for off in range(-pre, post + 1):
            if off == 0 or abs(off) >= c:
                continue
            if off > 0:
                acc[:, :c - off] += sq[:, off:]
            else:
                acc[:, -off:] += sq[:, :c + off]
        acc *= alpha / size
        acc += bias
        np.power(acc, -beta, out=acc)
        acc *= xc
        return acc.astype(x.dtype, copy=False)

    return kernel


@op("LayerNormalization", since=17, dtypes={"T": FLOATS})
def make_layer_norm(node: NodeView, ctx: ProviderContext):
    """LayerNormalization-17: outputs Y, Mean and InvStdDev (in ``stash_type``)."""
    axis = int(node.attr("axis", -1))
    eps = float(node.attr("epsilon", 1e-5))
    stash = int(node.attr("stash_type", TP.FLOAT))
    stash_dt = np.dtype(np.float64) if stash == TP.DOUBLE else np.dtype(np.float32)
    n_out = len(node.outputs)
    stat_dt = [stash_dt, stash_dt]
    for i in (1, 2):
        o = node.outputs[i] if len(node.outputs) > i else None
        if o is not None and o.dtype is not None:
            stat_dt[i - 1] = o.dtype

    def kernel(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None = None):
        ax = axis + x.ndim if axis < 0 else axis
        d_len = math.prod(x.shape[ax:])
        xr = x.reshape(-1, d_len).astype(stash_dt)  # always a copy: normalized in place
        mean = xr.mean(axis=1, keepdims=True)
        xr -= mean
        var = np.einsum("ij,ij->i", xr, xr)[:, None] / max(d_len, 1)
        inv = 1.0 / np.sqrt(var + eps)
        xr *= inv
        sc = np.broadcast_to(np.asarray(scale, dtype=stash_dt), x.shape[ax:]).reshape(1, d_len)
        xr *= sc
        if bias is not None:
            xr += np.broadcast_to(np.asarray(bias, dtype=stash_dt), x.shape[ax:]).reshape(1, d_len)
        y = xr.reshape(x.shape).astype(x.dtype, copy=False)
        if n_out == 1:
            return y
        stat_shape = x.shape[:ax] + (1,) * (x.ndim - ax)
        return (y, mean.reshape(stat_shape).astype(stat_dt[0], copy=False),
                inv.reshape(stat_shape).astype(stat_dt[1], copy=False))[:n_out]

    return kernel


# --------------------------------------------------------------------------------------------
# Softmax / LogSoftmax
# --------------------------------------------------------------------------------------------


def _softmax(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    xc = to_compute(x)
    m = xc.max(axis=axis, keepdims=True)
    e = np.subtract(xc, m)
    if log:
        s = np.exp(e).sum(axis=axis, keepdims=True)
        e -= np.log(s)
    else:
        np.exp(e, out=e)
        e /= e.sum(axis=axis, keepdims=True)
    return e.astype(x.dtype, copy=False)


def _softmax_factory(log: bool, coerce_2d: bool):
    def make(node: NodeView, ctx: ProviderContext):
        axis = int(node.attr("axis", 1 if coerce_2d else -1))

        def kernel(x: np.ndarray) -> np.ndarray:
            ax = axis + x.ndim if axis < 0 else axis
            if coerce_2d and ax != x.ndim - 1 and x.ndim > 1:
                x2 = x.reshape(math.prod(x.shape[:ax]), -1)
                return _softmax(x2, 1, log).reshape(x.shape)
            return _softmax(x, ax, log)

        return kernel

    return make


for _name, _log in (("Softmax", False), ("LogSoftmax", True)):
    op(_name, since=1, dtypes={"T": FLOATS})(_softmax_factory(_log, True))
    op(_name, since=11, dtypes={"T": FLOATS})(_softmax_factory(_log, True))
    op(_name, since=13, dtypes={"T": FLOATS})(_softmax_factory(_log, False))
