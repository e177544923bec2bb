"""BatchNormalization, InstanceNormalization, LRN, LayerNormalization, Softmax and LogSoftmax
kernels for cpu_mlas.

Row statistics over a contiguous last axis go through BLAS (``rows @ ones``): numpy's own
reductions pay a fixed cost per row, which dominates for the 10..1000-wide rows of these ops.
Half-precision inputs are computed in float32 and cast back.
"""

from __future__ import annotations

import logging
import math

import ml_dtypes
import numpy as np
from onnx import TensorProto as TP

from onnxplex import NodeView, ProviderContext

from ._blas import intra_threads
from ._native import native
from ._registry import op
from .nn import FLOATS, compute_dtype, to_compute

logger = logging.getLogger(__name__)

# Softmax skips the max shift when all inputs lie within +-this (exp(60) ~ 1e26: no overflow
# even summed over huge rows, and exp(-60) ~ 1e-26 is far from float32's denormals).
_UNSHIFTED_RANGE = 60.0


def _row_mean(x2: np.ndarray) -> np.ndarray:
    """Mean of each row of a 2-D float array, ``[R]`` (BLAS gemv)."""
    d = x2.shape[1]
    return x2 @ np.full(d, 1.0 / max(d, 1), dtype=x2.dtype)


def _row_sum(x2: np.ndarray) -> np.ndarray:
    return x2 @ np.ones(x2.shape[1], dtype=x2.dtype)


# --------------------------------------------------------------------------------------------
# BatchNormalization
# --------------------------------------------------------------------------------------------


def _bn_training(node: NodeView) -> str | None:
    if node.opset < 7 and int(node.attr("is_test", 0)) == 0:
        return "BatchNormalization training mode (is_test=0) is not supported"
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
    """BatchNormalization (inference): ``y = x * a + b``, ``a``/``b`` folded once when constant.
    With ``training_mode=1`` (opset 14+) see :func:`_batch_norm_training`."""
    eps = float(node.attr("epsilon", 1e-5))
    if node.opset >= 14 and int(node.attr("training_mode", 0)) != 0:
        return _batch_norm_training(node, eps)

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
        y = np.multiply(to_compute(x), _channel_param(a.astype(cd), x.ndim))
        y += _channel_param(b.astype(cd), x.ndim)
        return y.astype(x.dtype, copy=False)

    return kernel


def _batch_norm_training(node: NodeView, eps: float):
    """BatchNormalization-14/15 with ``training_mode=1``: normalized by the batch's own
    per-channel mean and (population) variance; the optional outputs are the running
    statistics ``input_mean * momentum + current_mean * (1 - momentum)`` (and the same for
    the variance), in the dtypes of the mean and variance inputs."""
    momentum = float(node.attr("momentum", 0.9))
    stats = len(node.outputs) > 1

    def kernel(x, scale, bias, mean, var):
        xc = to_compute(x).astype(np.float64)
        axes = (0, *range(2, x.ndim))
        cur_mean = xc.mean(axis=axes)
        cur_var = xc.var(axis=axes)
        a = np.asarray(scale, np.float64) / np.sqrt(cur_var + eps)
        b = np.asarray(bias, np.float64) - cur_mean * a
        y = (xc * _channel_param(a, x.ndim) + _channel_param(b, x.ndim)).astype(x.dtype)
        if not stats:
            return y
        run_mean = np.asarray(mean, np.float64) * momentum + cur_mean * (1 - momentum)
        run_var = np.asarray(var, np.float64) * momentum + cur_var * (1 - momentum)
        return (y, run_mean.astype(np.asarray(mean).dtype),
                run_var.astype(np.asarray(var).dtype))

    return kernel


# --------------------------------------------------------------------------------------------
# InstanceNormalization / LayerNormalization
# --------------------------------------------------------------------------------------------


def _normalize_rows(x2: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x2 - mean) (a new array), mean [R, 1], 1/sqrt(var + eps) [R, 1]`` of each row."""
    mean = _row_mean(x2)[:, None]
    d = np.subtract(x2, mean)
    var = np.einsum("ij,ij->i", d, d)[:, None] / max(x2.shape[1], 1)
    inv = 1.0 / np.sqrt(var + eps)
    return d, mean, inv.astype(d.dtype, copy=False)


_F32 = np.dtype(np.float32)


def native_layer_norm(x: np.ndarray, eps: float, gamma: np.ndarray, beta: np.ndarray | None,
                      *, skip: np.ndarray | None = None, bias: np.ndarray | None = None,
                      rms: bool = False, want_sum: bool = False, want_stats: bool = False):
    """Layer norm of the rows (the last axis) of float32 ``x`` on the native kernel: ``s = x +
    skip + bias`` (``skip``'s K rows repeating every K rows of x), normalized (or
    RMS-scaled), times ``gamma`` plus ``beta`` (each ``D`` values). Returns ``(y, sum, mean,
    inv)``: y and sum in x's shape, the statistics ``x.shape[:-1] + (1,)``, the last three
    None unless asked for; or None when the kernel is not built or an operand is not float32
    of the right size (the caller's numpy path then runs). Arrays go to the kernel as they
    are, without reshapes: in a transformer's every layer each numpy call runs out of cache."""
    nat = native()
    if nat is None or not hasattr(nat, "layer_norm_f32") or x.ndim == 0:
        return None
    d = x.shape[-1]
    if x.dtype != _F32 or any(v is not None and (v.dtype != _F32 or v.size != d)
                              for v in (gamma, beta, bias)):
        return None
    if skip is not None and (skip.dtype != _F32 or skip.ndim == 0 or skip.shape[-1] != d
                             or skip.size == 0 or (x.size // max(d, 1)) % (skip.size // d)):
        return None
    y = np.empty(x.shape, _F32)
    total = np.empty(x.shape, _F32) if want_sum else None
    stat_shape = x.shape[:-1] + (1,)
    mean = np.empty(stat_shape, _F32) if want_stats and not rms else None
    inv = np.empty(stat_shape, _F32) if want_stats else None
    c = np.ascontiguousarray
    nat.layer_norm_f32(c(x), None if skip is None else c(skip), None if bias is None else c(bias),
                       c(gamma), None if beta is None else c(beta), y, total, mean, inv,
                       eps=eps, rms=rms, threads=intra_threads())
    return y, total, mean, inv


@op("InstanceNormalization", since=1, dtypes={"T": FLOATS})
@op("InstanceNormalization", since=6, dtypes={"T": FLOATS})
@op("InstanceNormalization", since=22, dtypes={"T": FLOATS})
def make_instance_norm(node: NodeView, ctx: ProviderContext):
    """InstanceNormalization: per-(n, c) mean/variance over the spatial axes."""
    eps = float(node.attr("epsilon", 1e-5))

    ones: dict[int, np.ndarray] = {}

    def kernel(x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
        n, c = x.shape[:2]
        rows = x.reshape(n * c, -1)
        if x.dtype == _F32 and rows.shape[1] > 1:
            # the rows normalized by the native layer norm (its gamma 1), then per row
            # scale and bias: three passes where numpy's statistics took five
            d = rows.shape[1]
            gamma = ones.get(d)
            if gamma is None:
                gamma = ones[d] = np.ones(d, _F32)
            done = native_layer_norm(rows, eps, gamma, None)
            if done is not None:
                y = done[0]
                y *= np.tile(np.asarray(scale, dtype=_F32), n)[:, None]
                y += np.tile(np.asarray(bias, dtype=_F32), n)[:, None]
                return y.reshape(x.shape)
        d, _, inv = _normalize_rows(to_compute(x).reshape(n * c, -1), eps)
        sc = np.tile(np.asarray(scale, dtype=d.dtype), n)[:, None]
        bi = np.tile(np.asarray(bias, dtype=d.dtype), n)[:, None]
        d *= inv * sc  # per row: one pass
        d += bi
        return d.reshape(x.shape).astype(x.dtype, copy=False)

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
        x2 = x.reshape(-1, d_len)
        # (None for a scale or bias that broadcasts from fewer values: numpy below)
        got = (native_layer_norm(x2, eps, scale, bias, want_stats=n_out > 1)
               if stash_dt == _F32 else None)
        if got is not None:
            y, _, mean, inv = got
        else:
            y, mean, inv = _normalize_rows(x2 if x2.dtype == stash_dt else x2.astype(stash_dt), eps)
            y *= inv
            y *= np.broadcast_to(np.asarray(scale, dtype=stash_dt), x.shape[ax:]).reshape(1, d_len)
            if bias is not None:
                y += np.broadcast_to(np.asarray(bias, dtype=stash_dt),
                                     x.shape[ax:]).reshape(1, d_len)
        y = y.reshape(x.shape).astype(x.dtype, copy=False)
        if n_out == 1:
            return y
        stat_shape = x.shape[:ax] + (1,) * (x.ndim - ax)
        return (y, mean.reshape(stat_shape).astype(stat_dt[0], copy=False),
                inv.reshape(stat_shape).astype(stat_dt[1], copy=False))[:n_out]

    return kernel


# --------------------------------------------------------------------------------------------
# LRN
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Softmax / LogSoftmax
# --------------------------------------------------------------------------------------------


def _row_max(x2: np.ndarray) -> np.ndarray:
    """Max of each row of a contiguous 2-D array, ``[R, 1]`` (``reduceat`` beats ``max(1)``)."""
    r, d = x2.shape
    return np.maximum.reduceat(x2.reshape(-1), np.arange(0, r * d, d))[:, None]


def _softmax_rows(x2: np.ndarray, log: bool, inplace: bool = False) -> np.ndarray:
    """Softmax over the last axis of a contiguous 2-D array: few passes, BLAS row sums.

    When every value lies within +-``_UNSHIFTED_RANGE``, exp() can neither overflow nor lose
    precision to underflow, so the per-row max shift (softmax is shift-invariant) is skipped:
    two cheap whole-tensor reductions instead of a per-row max and a broadcast subtraction.
    ``inplace`` writes the result over ``x2`` (a scratch array the caller owns); the values are
    the same either way.
    """
    if x2.size and -_UNSHIFTED_RANGE <= x2.min() and x2.max() <= _UNSHIFTED_RANGE:
        if log:
            e = np.exp(x2)
            return np.subtract(x2, np.log(_row_sum(e))[:, None], out=x2 if inplace else e)
        e = np.exp(x2, out=x2 if inplace else None)
    else:
        e = np.subtract(x2, _row_max(x2), out=x2 if inplace else None)
        if log:
            e -= np.log(_row_sum(np.exp(e)))[:, None]
            return e
        np.exp(e, out=e)
    e *= (1.0 / _row_sum(e)).astype(e.dtype)[:, None]
    return e


def _softmax(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    xc = to_compute(x)
    if axis == x.ndim - 1 and x.size:
        y = _softmax_rows(np.ascontiguousarray(xc).reshape(-1, x.shape[-1]), log)
        return y.reshape(x.shape).astype(x.dtype, copy=False)
    m = xc.max(axis=axis, keepdims=True)
    e = np.subtract(xc, m)
    if log:
        e -= np.log(np.exp(e).sum(axis=axis, keepdims=True))
    else:
        np.exp(e, out=e)
        e /= e.sum(axis=axis, keepdims=True)
    return e.astype(x.dtype, copy=False)


_SMALL_SOFTMAX = 1024
"""Inputs of at most this many elements take :func:`_softmax_small`: numpy's per-row
reductions cost little over a few rows, and the BLAS path's extra passes (range checks, a
vector of ones, a cast) are most of a batch-1 softmax's time."""

_SMALL_COMPUTE = {
    np.dtype(np.float32): None, np.dtype(np.float64): None,
    np.dtype(np.float16): np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16): np.dtype(np.float32),
}
"""The types the small path takes (Softmax's), and the type each computes in."""


def _softmax_small(x: np.ndarray, axis: int, last: bool, log: bool) -> np.ndarray:
    """(Log)Softmax of a small non-empty float32/float64 ``x`` over ``axis`` in six ufunc
    calls: the max shift, exp, the row sums and the scaling (by the reciprocal over the last
    axis, as :func:`_softmax_rows` scales, else a division, as :func:`_softmax` does). Same
    values as those paths' shifted branch; a row whose max is not finite gives NaN there too."""
    e = np.subtract(x, np.maximum.reduce(x, axis, None, None, True))
    if log:
        s = np.add.reduce(np.exp(e), axis, None, None, True)
        e -= np.log(s, out=s)
        return e
    np.exp(e, out=e)
    s = np.add.reduce(e, axis, None, None, True)
    if last:
        e *= np.reciprocal(s, out=s)
    else:
        e /= s
    return e


def _vector_rows(nat) -> bool:
    """Whether ``softmax_f32`` runs a vector variant on this CPU (AVX2 or AVX-512, as its
    dispatch picks them); the portable variant's rows are scalar."""
    features = getattr(nat, "cpu_features", None)
    if features is None:
        return False
    f = features()
    return bool(f.get("avx2") or f.get("avx512f"))


def _softmax_factory(log: bool, coerce_2d: bool):
    def make(node: NodeView, ctx: ProviderContext):
        axis = int(node.attr("axis", 1 if coerce_2d else -1))
        nat = native()
        rows = getattr(nat, "softmax_f32", None)   # (a build without it: numpy below)
        # the native rows at any size where they run on the vector exp; the portable build's
        # scalar rows only up to _SMALL_SOFTMAX values (past that numpy's passes are faster)
        rows_max = math.inf if _vector_rows(nat) else _SMALL_SOFTMAX
        f32 = np.dtype(np.float32)

        def kernel(x: np.ndarray) -> np.ndarray:
            ndim = x.ndim
            ax = axis + ndim if axis < 0 else axis
            dt = x.dtype
            if rows is not None and dt == f32 and 0 < x.size <= rows_max and 0 <= ax < ndim \
                    and x.flags.c_contiguous and (ax == ndim - 1 or coerce_2d):
                # Over the last axis (or, before opset 13, the axes from `axis` on, the same
                # rows of a contiguous array): one native call (with the vector exp, against
                # the ufunc passes: [1, 10] 0.3 us vs 6.9, [100, 16] 1.4 vs 8.6, [128, 1000] 51
                # vs 100, [32, 30522] 447 vs 1115)
                xs = x if ax == ndim - 1 else x.reshape(math.prod(x.shape[:ax]), -1)
                y = rows(xs, log)
                return y if xs is x else y.reshape(x.shape)
            if 0 < x.size <= _SMALL_SOFTMAX and dt in _SMALL_COMPUTE and 0 <= ax < ndim:
                last = ax == ndim - 1
                xs = x
                if coerce_2d and not last:   # opset < 13: softmax over the axes from `axis` on
                    xs = x.reshape(math.prod(x.shape[:ax]), -1)
                    last, ax = True, 1
                wide = _SMALL_COMPUTE[dt]
                if wide is None:
                    y = _softmax_small(xs, ax, last, log)
                else:
                    y = _softmax_small(xs.astype(wide), ax, last, log).astype(dt)
                return y if xs is x else y.reshape(x.shape)
            if coerce_2d and ax != ndim - 1 and ndim > 1:
                # opset < 13: the input is flattened to 2-D at `axis`
                x2 = x.reshape(math.prod(x.shape[:ax]), -1)
                return _softmax(x2, 1, log).reshape(x.shape)
            return _softmax(x, ax, log)

        return kernel

    return make


for _name, _log in (("Softmax", False), ("LogSoftmax", True)):
    op(_name, since=1, dtypes={"T": FLOATS})(_softmax_factory(_log, True))
    op(_name, since=11, dtypes={"T": FLOATS})(_softmax_factory(_log, True))
    op(_name, since=13, dtypes={"T": FLOATS})(_softmax_factory(_log, False))
