"""Elementwise kernels: activations, unary math, broadcasting binary ops, comparisons, logic.

float16 activations are computed in float32 and rounded once (as ORT's fp16 kernels do);
bfloat16 and float8 inputs are computed in float32. Cast/CastLike live in :mod:`.cast`.
Activations avoid ``np.where`` (which branches per element) in favour of max/min forms.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import numpy as np

from onnxplex import NodeView, ProviderContext

from ._blas import intra_threads
from ._native import native
from ._np_helpers import (
    LOW_PRECISION_FLOATS,
    as_array,
    const_input,
    select,
    str_guard,
    trunc_divide,
)
from ._registry import op

logger = logging.getLogger(__name__)

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_F16_LIKE = LOW_PRECISION_FLOATS | {_F16}

Kernel = Callable[..., np.ndarray]


# --------------------------------------------------------------------------------------------
# erf (numpy has none): float32 through a tanh fit, other floats in float64 (Taylor/Chebyshev)
# --------------------------------------------------------------------------------------------

_ERF_TAYLOR = np.array([(-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(18)]
                       ) * (2.0 / math.sqrt(math.pi))
_ERF_U_LO = 1.0 / 6.0


def _fit_erfcx_cheb(deg: int = 24) -> np.ndarray:
    """Chebyshev coefficients of erfcx(1/u) for u in [1/6, 1] (erfc(x) = exp(-x^2) erfcx(x))."""
    k = np.arange(2 * deg + 1)
    nodes = np.cos(np.pi * (k + 0.5) / (2 * deg + 1))
    us = (nodes + 1.0) / 2.0 * (1.0 - _ERF_U_LO) + _ERF_U_LO
    ys = np.array([math.exp(1 / u / u) * math.erfc(1 / u) for u in us.tolist()])
    return np.polynomial.chebyshev.chebfit(nodes, ys, deg)


_ERFCX_CHEB = _fit_erfcx_cheb()


def erf_numpy(x: np.ndarray) -> np.ndarray:
    """erf in float64 to ~1 ulp: Taylor series below 1, erfc = exp(-x^2) erfcx(x) up to 6."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    out = np.ones_like(a)
    small = a <= 1.0
    if small.any():
        xs = a[small]
        out[small] = xs * np.polynomial.polynomial.polyval(xs * xs, _ERF_TAYLOR)
    mid = (a > 1.0) & (a < 6.0)
    if mid.any():
        xm = a[mid]
        t = (2.0 / xm - _ERF_U_LO - 1.0) / (1.0 - _ERF_U_LO)
        out[mid] = 1.0 - np.exp(-xm * xm) * np.polynomial.chebyshev.chebval(t, _ERFCX_CHEB)
    out[np.isnan(a)] = np.nan
    return np.copysign(out, x)


_ERF32_CLAMP = 4.2  # float32 erf is +-1 beyond 3.92; numpy's tanh reaches 1 at ~10 = u(4.2)


def _fit_erf32(deg: int = 6) -> tuple[np.float32, ...]:
    """Coefficients c of erf(x) ~= tanh(x * P(x^2)) on [0, 4.2], for float32 evaluation.

    atanh(erf(x)) / x is smooth, so a low-degree weighted fit in x^2 reaches ~3 ulp after
    float32 rounding, with one tanh and no branches (numpy has no erf of its own).
    """
    n = 400
    z = (np.cos(np.pi * (np.arange(n) + 0.5) / n) + 1.0) / 2.0 * _ERF32_CLAMP ** 2
    z = z[z > 1e-6]
    xs = np.sqrt(z)
    ef = np.array([math.erf(v) for v in xs.tolist()])
    g = np.arctanh(np.minimum(ef, 1.0 - 1e-16)) / xs
    c = np.polynomial.polynomial.polyfit(z, g, deg, w=np.maximum(1.0 - ef * ef, 1e-6))
    return tuple(np.float32(v) for v in c[::-1])  # highest degree first, for Horner


_ERF32_COEFFS = _fit_erf32()


def erf_float32(x: np.ndarray) -> np.ndarray:
    """erf of a float32 array, to ~3 ulp (NaN propagates)."""
    z = np.multiply(x, x)
    np.minimum(z, np.float32(_ERF32_CLAMP ** 2), out=z)  # P is fitted up to the clamp ...
    acc = np.multiply(z, _ERF32_COEFFS[0])
    acc += _ERF32_COEFFS[1]
    for c in _ERF32_COEFFS[2:]:
        acc *= z
        acc += c
    acc *= x  # ... while x * P(clamp) keeps growing: exactly +-1 from |x| = 4.2 on
    return np.tanh(acc, out=acc)


def erf(x: np.ndarray) -> np.ndarray:
    """erf of a float array, in its dtype."""
    if x.dtype == _F32:
        return as_array(erf_float32(x))
    return as_array(erf_numpy(x)).astype(x.dtype, copy=False)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _in_dtype(node: NodeView, i: int = 0) -> np.dtype | None:
    """The declared numpy dtype of input ``i`` (``None`` when omitted or unknown)."""
    v = node.input(i)
    return None if v is None else v.dtype


def _ranked(node: NodeView, *inputs: int) -> bool:
    """Whether one of ``inputs`` has a known rank of at least 1: the (broadcast) result is
    then never 0-d, so a ufunc's result is an array (0-d operands give a numpy scalar)."""
    for i in inputs:
        v = node.input(i)
        if v is not None and v.rank is not None and v.rank >= 1:
            return True
    return False


def _arrays(fn: Callable[..., np.ndarray]) -> Kernel:
    """``fn`` with its result as an ndarray (for kernels whose operands may all be 0-d)."""

    def kernel(*xs: np.ndarray) -> np.ndarray:
        r = fn(*xs)
        return r if type(r) is np.ndarray else np.asarray(r)

    return kernel


# Kernels run under the session's ``np.errstate(all="ignore")`` (floating-point warnings are
# results, as in onnxruntime): they do not enter it again (~1.4 us a call).


def _float_op(fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    """Wrap a float function: float16 and ml_dtypes floats computed in float32, rounded once.

    ``fn`` may work in place on its intermediates: it always receives an array of rank >= 1.
    """

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.ndim == 0:
            return kernel(x.reshape(1)).reshape(())
        dt = x.dtype
        if dt in _F16_LIKE:
            return as_array(fn(x.astype(np.float32))).astype(dt)
        return as_array(fn(x))

    return kernel


def _float_kernel(node: NodeView, fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    """:func:`_float_op`'s kernel for ``node``, or ``fn`` itself when the input's declared
    dtype needs no float32 detour and its rank is at least 1 (the per-call checks then have
    nothing to decide)."""
    dt = _in_dtype(node)
    if dt is not None and dt not in _F16_LIKE:
        if _ranked(node, 0):
            return fn
        if isinstance(fn, np.ufunc):
            return _arrays(fn)
    return _float_op(fn)


def _native_op(fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    """Wrap a ufunc that numpy runs natively on every dtype but the ml_dtypes floats."""

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.dtype in LOW_PRECISION_FLOATS:
            return as_array(fn(x.astype(np.float32))).astype(x.dtype)
        return as_array(fn(x))

    return kernel


def _native_kernel(node: NodeView, fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    """:func:`_native_op`'s kernel for ``node``, or ``fn`` itself (made to return arrays
    when the input may be 0-d) when the input's declared dtype is numpy's own."""
    dt = _in_dtype(node)
    if dt is None or dt in LOW_PRECISION_FLOATS:
        return _native_op(fn)
    return fn if _ranked(node, 0) else _arrays(fn)


_SMALL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_I64 = np.dtype(np.int64)


def _small(name: str, node: NodeView, kernel: Kernel) -> Kernel:
    """``kernel`` behind the native small-array op ``name`` (``_mlas_native.small_op``, see
    register_small.cpp) when the module is built and ``node``'s first input is declared of a
    dtype the op computes: contiguous arrays of up to 16k elements are then computed without
    numpy's per-call dispatch (a 4-element Add: ~0.1 us against ~0.4), with numpy's results to
    the bit; every other call goes to ``kernel``. Binary ops must have no legacy
    (``broadcast``/``axis``) alignment: the op broadcasts as numpy does."""
    mod = native()
    dt = _in_dtype(node)
    if mod is None or dt is None:
        return kernel
    takes_int64 = mod.SMALL_OPS[name]
    if dt in _SMALL_DTYPES or (takes_int64 and dt == _I64):
        return mod.small_op(name, kernel)
    return kernel


def _legacy_broadcast(node: NodeView) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
    """Opset < 7 binary ops: with ``broadcast=1`` and ``axis``, B aligns with A at ``axis``."""
    if node.opset >= 7 or not node.attr("broadcast", 0) or node.attr("axis") is None:
        return None
    axis = int(node.attr("axis"))

    def align(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        ax = axis + a.ndim if axis < 0 else axis
        extra = a.ndim - ax - b.ndim
        return b.reshape(b.shape + (1,) * extra) if extra > 0 else b

    return align


def _binary(node: NodeView, fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
            by_dtype: Callable[[np.dtype], Callable[[np.ndarray, np.ndarray], np.ndarray]]
            | None = None) -> Kernel:
    """A broadcasting binary kernel: ``fn`` itself (``by_dtype(A's dtype)`` when given) when
    A's declared dtype is numpy's own and there is no legacy broadcast to apply, so a call is
    one ufunc call; else a kernel that aligns B and computes ml_dtypes floats in float32."""
    align = _legacy_broadcast(node)
    dt = _in_dtype(node, 0)
    if align is None and dt is not None and dt not in LOW_PRECISION_FLOATS:
        f = fn if by_dtype is None else by_dtype(dt)
        return f if _ranked(node, 0, 1) else _arrays(f)

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if align is not None:
            b = align(a, b)
        if a.dtype in LOW_PRECISION_FLOATS:
            dt = a.dtype
            return as_array(fn(a.astype(np.float32), b.astype(np.float32))).astype(dt)
        return as_array(fn(a, b))

    return kernel


# --------------------------------------------------------------------------------------------
# Unary math
# --------------------------------------------------------------------------------------------

# name -> (first opset, function, computed in float32 for float16 inputs)
_UNARY: dict[str, tuple[int, Callable[[np.ndarray], np.ndarray], bool]] = {
    "Abs": (1, np.absolute, False),
    "Neg": (1, np.negative, False),
    "Floor": (1, np.floor, False),
    "Ceil": (1, np.ceil, False),
    "Round": (11, np.rint, False),  # half to even
    "Sign": (9, np.sign, False),
    "Sqrt": (1, np.sqrt, True),
    "Exp": (1, np.exp, True),
    "Log": (1, np.log, True),
    "Reciprocal": (1, np.reciprocal, True),
    "Tanh": (1, np.tanh, True),
    "Sin": (7, np.sin, True),
    "Cos": (7, np.cos, True),
    "Tan": (7, np.tan, True),
    "Asin": (7, np.arcsin, True),
    "Acos": (7, np.arccos, True),
    "Atan": (7, np.arctan, True),
    "Sinh": (9, np.sinh, True),
    "Cosh": (9, np.cosh, True),
    "Asinh": (9, np.arcsinh, True),
    "Acosh": (9, np.arccosh, True),
    "Atanh": (9, np.arctanh, True),
    "Erf": (9, erf, True),
    "Not": (1, np.logical_not, False),
    "BitwiseNot": (18, np.invert, False),
}


# Unary ops with a native small-array kernel (see _small)
_SMALL_UNARY = {"Abs": "abs", "Neg": "neg", "Floor": "floor", "Ceil": "ceil", "Sqrt": "sqrt",
                "Reciprocal": "reciprocal"}


def _register_unary(name: str, since: int, fn: Callable[[np.ndarray], np.ndarray],
                    via_f32: bool) -> None:
    small = _SMALL_UNARY.get(name)

    @op(name, since=since)
    def make(node: NodeView, ctx: ProviderContext) -> Kernel:
        kernel = _float_kernel(node, fn) if via_f32 else _native_kernel(node, fn)
        return kernel if small is None else _small(small, node, kernel)


for _name, (_since, _fn, _via) in _UNARY.items():
    _register_unary(_name, _since, _fn, _via)


@op("IsNaN", since=9)
def make_isnan(node: NodeView, ctx: ProviderContext) -> Kernel:
    return _native_kernel(node, np.isnan)


@op("IsInf", since=10)
def make_isinf(node: NodeView, ctx: ProviderContext) -> Kernel:
    neg = bool(node.attr("detect_negative", 1))
    pos = bool(node.attr("detect_positive", 1))

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.dtype in LOW_PRECISION_FLOATS:
            x = x.astype(np.float32)
        if neg and pos:
            return as_array(np.isinf(x))
        if pos:
            return as_array(np.isposinf(x))
        if neg:
            return as_array(np.isneginf(x))
        return np.zeros(x.shape, dtype=bool)

    return kernel


# --------------------------------------------------------------------------------------------
# Activations
# --------------------------------------------------------------------------------------------


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """0.5 + 0.5 tanh(x / 2): one transcendental, no overflow; absolute error ~1 ulp of 1
    (MLAS's logistic is likewise accurate in absolute, not relative, terms)."""
    half = x.dtype.type(0.5)
    out = np.multiply(x, half)
    np.tanh(out, out=out)
    out *= half
    out += half
    return out


def _sigmoid_f32(x: np.ndarray) -> np.ndarray:
    """:func:`_sigmoid` for float32 with its constant as a 0-d array (a numpy scalar operand
    costs ~0.5 us more a ufunc call; the results are the same). Contiguous arrays of at least
    ``_NATIVE_SIGMOID_MIN`` elements go to ``_mlas_native.sigmoid_f32`` when it is built
    (1 / (1 + exp(-x)) with a vector exp, over the pool's threads): numpy's float32 tanh is
    scalar on AVX2 (~10 ns an element; EfficientNet-B0's 49 Sigmoids took 30 of its 63 ms).
    Both are within ~1e-7 of the true value, the native one in relative terms too."""
    if x.size >= _NATIVE_SIGMOID_MIN and x.dtype == _F32 and x.flags.c_contiguous:
        nat = native()
        if nat is not None and hasattr(nat, "sigmoid_f32"):
            out = np.empty_like(x)
            nat.sigmoid_f32(x, out, intra_threads())
            return out
    out = np.multiply(x, _HALF32_0D)
    np.tanh(out, out=out)
    out *= _HALF32_0D
    out += _HALF32_0D
    return out


_HALF32_0D = np.asarray(0.5, np.float32)
_NATIVE_SIGMOID_MIN = 1024


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    t = erf(x * x.dtype.type(1.0 / math.sqrt(2.0)))
    t += 1
    t *= x
    t *= x.dtype.type(0.5)
    return t


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = x.dtype.type(_SQRT_2_OVER_PI)
    t = x * x
    t *= x.dtype.type(0.044715)
    t += 1
    t *= x
    t *= c
    np.tanh(t, out=t)
    t += 1
    t *= x
    t *= x.dtype.type(0.5)
    return t


# float32 GELU runs over blocks of this many elements: the ~20 passes of the erf polynomial
# then stay in L1/L2 instead of streaming a [128, 3072] activation through L3 each time
# (1.6 -> 1.1 ms for BERT-base's FFN at seq 128).
_GELU_BLOCK = 32768

# erf(x / sqrt(2)) = tanh(x * Q(x^2)) with Q(w) = P(w / 2) / sqrt(2) (P: _ERF32_COEFFS): the
# 1/sqrt(2) scaling of GELU's argument folded into the polynomial.
_GELU_ERF_COEFFS = tuple(
    np.float32(float(c) * 0.5 ** (len(_ERF32_COEFFS) - 1 - i) / math.sqrt(2.0))
    for i, c in enumerate(_ERF32_COEFFS))
_GELU_ERF_CLAMP = np.float32(2.0 * _ERF32_CLAMP ** 2)
_HALF32 = np.float32(0.5)


def _gelu_blocks(src: np.ndarray, dst: np.ndarray, erf_form: bool) -> np.ndarray:
    """GELU of a contiguous float32 array into ``dst`` (same shape; may be ``src``):
    ``x * (0.5 + 0.5 tanh(g(x)))`` with ``g`` the erf fit (exact form) or the tanh form's
    cubic, one cache-sized block at a time."""
    xf, of = src.reshape(-1), dst.reshape(-1)
    size = xf.size
    block = max(1, min(_GELU_BLOCK, size))
    z = np.empty(block, np.float32)
    t = np.empty(block, np.float32)
    for lo in range(0, size, block):
        x = xf[lo:lo + block]
        k = x.size
        zk, tk = z[:k], t[:k]
        np.multiply(x, x, out=zk)
        if erf_form:
            np.minimum(zk, _GELU_ERF_CLAMP, out=zk)  # the fit's range; tanh is +-1 past it
            np.multiply(zk, _GELU_ERF_COEFFS[0], out=tk)
            tk += _GELU_ERF_COEFFS[1]
            for c in _GELU_ERF_COEFFS[2:]:
                tk *= zk
                tk += c
        else:
            np.multiply(zk, np.float32(0.044715 * _SQRT_2_OVER_PI), out=tk)
            tk += np.float32(_SQRT_2_OVER_PI)
        tk *= x
        np.tanh(tk, out=tk)
        tk *= _HALF32
        tk += _HALF32
        np.multiply(x, tk, out=of[lo:lo + k])
    return dst


# The same two forms for the native kernel (``_mlas_native.gelu_f32``): x * sigmoid(2 x Q(x^2))
# with Q's coefficients highest power first and x^2 clamped to the fit's range.
_GELU_NATIVE_FORMS = {
    True: (np.array(_GELU_ERF_COEFFS, np.float32), float(_GELU_ERF_CLAMP)),
    False: (np.array([0.044715 * _SQRT_2_OVER_PI, _SQRT_2_OVER_PI], np.float32), math.inf),
}


def _gelu_kernel(erf_form: bool) -> Callable[..., np.ndarray]:
    """GELU with an optional bias added first (BiasGelu, FastGelu): float32 on the native
    kernel when ``_mlas_native`` is built (bias along the last axis added inside), else through
    :func:`_gelu_blocks`; other float types through the whole-array formulas."""
    slow = _float_op(_gelu_erf if erf_form else _gelu_tanh)
    coeffs, clamp = _GELU_NATIVE_FORMS[erf_form]

    def kernel(x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        if x.dtype != _F32 or (bias is not None and bias.dtype != _F32):
            return slow(x if bias is None else np.add(x, bias))
        nat = native()
        if nat is not None and hasattr(nat, "gelu_f32") and x.ndim >= 1 and (
                bias is None or (bias.ndim == 1 and bias.shape[0] == x.shape[-1])):
            y = np.empty(x.shape, _F32)
            nat.gelu_f32(np.ascontiguousarray(x), None if bias is None
                         else np.ascontiguousarray(bias), y, coeffs, clamp,
                         threads=intra_threads())
            return y
        if bias is None:
            src = np.ascontiguousarray(x).reshape(x.shape)  # 0-d stays 0-d
            return _gelu_blocks(src, np.empty(x.shape, _F32), erf_form)
        s = np.add(x, bias)  # a fresh array: worked in place
        return _gelu_blocks(s, s, erf_form)

    return kernel


def _simple(name: str, since: int, fn: Callable[[np.ndarray], np.ndarray],
            f32: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
    """Register ``fn`` (``f32`` instead for a declared float32 input) as op ``name``."""

    @op(name, since=since)
    def make(node: NodeView, ctx: ProviderContext) -> Kernel:
        if f32 is not None and _in_dtype(node) == _F32:
            return _float_kernel(node, f32)
        return _float_kernel(node, fn)


_simple("Sigmoid", 1, _sigmoid, _sigmoid_f32)
_simple("Softsign", 1, lambda x: x / (np.absolute(x) + 1))
def _softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), overflow-free."""
    t = np.absolute(x)
    np.negative(t, out=t)
    np.exp(t, out=t)
    np.log1p(t, out=t)
    t += np.maximum(x, 0)
    return t


def _mish(x: np.ndarray) -> np.ndarray:
    """x * tanh(softplus(x)) = x * n(n+2) / (n(n+2) + 2) with n = exp(x) (x clamped at 20)."""
    n = np.minimum(x, x.dtype.type(20))
    np.exp(n, out=n)
    num = n + 2
    num *= n
    den = num + 2
    num /= den
    num *= x
    return num


_simple("Softplus", 1, _softplus)
_simple("Mish", 18, _mish)

# SiLU (Swish) and HardSwish: the activations FusedConv runs as act codes of the native conv
# kernels (sigmoid.h's PostAct); here for arrays: in place on a conv's fresh output, or the
# HardSwish op.
SWISH, HARD_SWISH = 1, 2


def _post_act_native(code: int, x: np.ndarray, out: np.ndarray) -> bool:
    """``out = act(x)`` by ``_mlas_native.post_act_f32`` when it is built and both are
    contiguous float32 arrays of at least ``_NATIVE_SIGMOID_MIN`` elements; False otherwise."""
    if (x.size >= _NATIVE_SIGMOID_MIN and x.dtype == _F32 and out.dtype == _F32
            and x.flags.c_contiguous and out.flags.c_contiguous):
        nat = native()
        if nat is not None and hasattr(nat, "post_act_f32"):
            nat.post_act_f32(x, out, code, intra_threads())
            return True
    return False


def _hard_swish(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x * x.dtype.type(1 / 6) + 0.5, 0, 1)


def _hard_swish_f32(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    return out if _post_act_native(HARD_SWISH, x, out) else _hard_swish(x)


def swish_in_place(y: np.ndarray) -> np.ndarray:
    """``y = y * sigmoid(y)`` in place (a fused conv's fresh float output)."""
    if not _post_act_native(SWISH, y, y):
        y *= _sigmoid(y)
    return y


def swish_f32(x: np.ndarray) -> np.ndarray:
    """``x * sigmoid(x)`` of a float32 ``x`` into a new array: one native pass reading ``x``
    (a copy and then a pass in place read and wrote the array twice: a Llama MLP's SiLU of
    [64, 1376] ~40 us a call for its ~25 us of work)."""
    out = np.empty(x.shape, _F32)
    if _post_act_native(SWISH, x, out):
        return out
    out[...] = x
    return swish_in_place(out)


def hard_swish_in_place(y: np.ndarray) -> np.ndarray:
    """``y = y * clip(y / 6 + 0.5, 0, 1)`` in place (a fused conv's fresh float output)."""
    if not _post_act_native(HARD_SWISH, y, y):
        y *= np.clip(y * y.dtype.type(1 / 6) + 0.5, 0, 1)
    return y


_simple("HardSwish", 14, _hard_swish, _hard_swish_f32)


@op("Relu", since=1)
def make_relu(node: NodeView, ctx: ProviderContext) -> Kernel:
    dt = _in_dtype(node)
    if dt is not None and dt not in LOW_PRECISION_FLOATS:
        zero = np.zeros((), dt)  # (a 0-d array: a numpy scalar operand costs ~1 us more)
        if _ranked(node, 0):
            return _small("relu", node, lambda x: np.maximum(x, zero))
        return _small("relu", node, _arrays(lambda x: np.maximum(x, zero)))
    return _native_op(lambda x: np.maximum(x, x.dtype.type(0)))


@op("LeakyRelu", since=1)
def make_leaky_relu(node: NodeView, ctx: ProviderContext) -> Kernel:
    alpha = float(node.attr("alpha", 0.01))
    if 0.0 <= alpha <= 1.0:
        return _float_kernel(node, lambda x: np.maximum(x, x * alpha))
    return _float_kernel(node, lambda x: _pos_neg(x, np.minimum(x, 0) * alpha))


def _pos_neg(x: np.ndarray, neg: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """scale * max(x, 0) + neg, where ``neg`` is the (already computed) negative branch, 0 for
    x >= 0: a branch-free ``where(x < 0, f(x), scale * x)``."""
    pos = np.maximum(x, 0)
    if scale != 1.0:
        pos *= scale
    neg += pos
    return neg


@op("PRelu", since=1)
@op("PRelu", since=7)
def make_prelu(node: NodeView, ctx: ProviderContext) -> Kernel:
    def kernel(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
        dt = x.dtype
        if dt in LOW_PRECISION_FLOATS:
            xf, sf = x.astype(np.float32), slope.astype(np.float32)
            return as_array(np.where(xf < 0, xf * sf, xf)).astype(dt)
        if node.opset < 7 and slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1]:
            slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))  # old per-channel slopes
        neg = as_array(np.minimum(x, 0) * slope)
        if neg.shape != x.shape:
            return as_array(np.maximum(x, 0) + neg)
        return _pos_neg(x, neg)

    return kernel


@op("Elu", since=1)
def make_elu(node: NodeView, ctx: ProviderContext) -> Kernel:
    alpha = float(node.attr("alpha", 1.0))
    return _float_kernel(node, lambda x: _pos_neg(x, np.expm1(np.minimum(x, 0)) * alpha))


@op("Selu", since=1)
def make_selu(node: NodeView, ctx: ProviderContext) -> Kernel:
    alpha = float(node.attr("alpha", 1.67326319217681884765625))
    gamma = float(node.attr("gamma", 1.05070102214813232421875))
    return _float_kernel(
        node, lambda x: _pos_neg(x, np.expm1(np.minimum(x, 0)) * (alpha * gamma), gamma))


@op("Celu", since=12)
def make_celu(node: NodeView, ctx: ProviderContext) -> Kernel:
    alpha = float(node.attr("alpha", 1.0))
    return _float_kernel(
        node, lambda x: _pos_neg(x, np.expm1(np.minimum(x, 0) / x.dtype.type(alpha)) * alpha))


@op("ThresholdedRelu", since=10)
def make_thresholded_relu(node: NodeView, ctx: ProviderContext) -> Kernel:
    alpha = float(node.attr("alpha", 1.0))
    return _float_kernel(node, lambda x: select(x > alpha, x, x.dtype.type(0)))


@op("HardSigmoid", since=1)
def make_hard_sigmoid(node: NodeView, ctx: ProviderContext) -> Kernel:
    alpha = float(node.attr("alpha", 0.2))
    beta = float(node.attr("beta", 0.5))

    def fn(x: np.ndarray) -> np.ndarray:
        t = x * x.dtype.type(alpha)
        t += x.dtype.type(beta)
        return np.clip(t, 0, 1, out=t)

    return _float_kernel(node, fn)


@op("Gelu", since=20)
def make_gelu(node: NodeView, ctx: ProviderContext) -> Kernel:
    approx = node.attr("approximate", "none")
    if isinstance(approx, bytes):
        approx = approx.decode()
    return _gelu_kernel(erf_form=approx != "tanh")


@op("Gelu", domain="com.microsoft", since=1)
def make_ms_gelu(node: NodeView, ctx: ProviderContext) -> Kernel:
    return _gelu_kernel(erf_form=True)


@op("BiasGelu", domain="com.microsoft", since=1)
def make_bias_gelu(node: NodeView, ctx: ProviderContext) -> Kernel:
    return _gelu_kernel(erf_form=True)


@op("FastGelu", domain="com.microsoft", since=1)
def make_fast_gelu(node: NodeView, ctx: ProviderContext) -> Kernel:
    return _gelu_kernel(erf_form=False)


@op("Clip", since=1)
@op("Clip", since=6)
def make_clip_attrs(node: NodeView, ctx: ProviderContext) -> Kernel:
    lo = node.attr("min")
    hi = node.attr("max")
    lo = None if lo is None else float(lo)
    hi = None if hi is None else float(hi)
    return _float_kernel(node,
                         lambda x: x if lo is None and hi is None else np.clip(x, lo, hi))


@op("Clip", since=11)
def make_clip(node: NodeView, ctx: ProviderContext) -> Kernel:
    def kernel(x: np.ndarray, lo: np.ndarray | None = None,
               hi: np.ndarray | None = None) -> np.ndarray:
        if lo is None and hi is None:
            return x
        dt = x.dtype
        if dt in LOW_PRECISION_FLOATS:
            lo = None if lo is None else lo.astype(np.float32)
            hi = None if hi is None else hi.astype(np.float32)
            return as_array(np.clip(x.astype(np.float32), lo, hi)).astype(dt)
        return as_array(np.clip(x, lo, hi))

    return kernel


# --------------------------------------------------------------------------------------------
# Binary arithmetic
# --------------------------------------------------------------------------------------------


@op(["Add", "Sub", "Mul"], since=1)
@op(["Add", "Sub", "Mul"], since=7)  # numpy broadcasting replaces broadcast/axis
def make_arith(node: NodeView, ctx: ProviderContext) -> Kernel:
    fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[node.op_type]
    return _small_binary(node.op_type.lower(), node, _binary(node, fn))


def _small_binary(name: str, node: NodeView, kernel: Kernel) -> Kernel:
    """:func:`_small` for a binary op, unless legacy broadcasting aligns B first."""
    return kernel if _legacy_broadcast(node) is not None else _small(name, node, kernel)


def _nonzero_divisor(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], what: str
                     ) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``fn`` for integer operands, refusing a zero divisor as onnxruntime does ("Integer
    division by zero"; numpy's answer, 0, would be a silent wrong result). INT_MIN / -1 wraps
    to INT_MIN (onnxruntime's process dies of SIGFPE there)."""
    def checked(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if not np.all(b):
            raise ValueError(f"Integer {what} by zero")
        return fn(a, b)

    return checked


_INT_DIVIDE = _nonzero_divisor(trunc_divide, "division")
_UINT_DIVIDE = _nonzero_divisor(np.floor_divide, "division")   # (floor is trunc for unsigned)


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        return _INT_DIVIDE(a, b)
    return np.divide(a, b)


def _divide_for(dt: np.dtype) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    if dt.kind == "i":
        return _INT_DIVIDE
    if dt.kind == "u":
        return _UINT_DIVIDE
    return np.divide if dt.kind in "fc" else _divide


@op("Div", since=1)
@op("Div", since=7)
def make_div(node: NodeView, ctx: ProviderContext) -> Kernel:
    return _small_binary("div", node, _binary(node, _divide, _divide_for))


def _int_power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if y.dtype.kind == "i" and y.size and y.min() < 0:
        return np.power(x.astype(np.float64), y).astype(x.dtype)  # as C's pow, truncated
    return np.power(x, y.astype(x.dtype, copy=False))


def _pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iu":
        if y.dtype.kind in "iu":
            return _int_power(x, y)
        return np.power(x.astype(np.float64), y).astype(x.dtype)
    if y.dtype != x.dtype:
        return np.power(x, y).astype(x.dtype, copy=False)
    return np.power(x, y)


def _cube(x: np.ndarray) -> np.ndarray:
    t = np.multiply(x, x)
    return np.multiply(t, x, out=t) if t.ndim else t * x


# x ** c for a constant scalar float c, with float x (ml_dtypes floats excepted)
_POW_SPECIAL: dict[float, Callable[[np.ndarray], np.ndarray]] = {
    1.0: lambda x: x.copy(), 2.0: lambda x: np.multiply(x, x), 3.0: _cube, 0.5: np.sqrt,
}


@op("Pow", since=1)
@op("Pow", since=7)
def make_pow(node: NodeView, ctx: ProviderContext) -> Kernel:
    dx, dy = _in_dtype(node, 0), _in_dtype(node, 1)
    if dx is not None and dx.kind in "fc" and dx not in LOW_PRECISION_FLOATS \
            and dy is not None and _legacy_broadcast(node) is None:
        fn = np.power if dy == dx else lambda x, y: np.power(x, y).astype(dx, copy=False)
    else:
        fn = _pow
    generic = _binary(node, fn)
    y = const_input(node, 1)
    x_info = node.input(0)
    if (y is None or y.size != 1 or y.dtype.kind != "f" or x_info is None
            or x_info.rank is None or x_info.rank < y.ndim):
        return generic
    special = _POW_SPECIAL.get(float(y.reshape(())))
    if special is None:
        return generic
    fast = special
    if dx is not None and dx.kind == "f" and dx not in LOW_PRECISION_FLOATS:
        if x_info.rank >= 1:
            return lambda x, e: fast(x)
        return _arrays(lambda x, e: fast(x))

    def kernel(x: np.ndarray, e: np.ndarray) -> np.ndarray:
        if x.dtype.kind == "f" and x.dtype not in LOW_PRECISION_FLOATS:
            return as_array(fast(x))
        return generic(x, e)

    return kernel


@op("Mod", since=10)
@op("Mod", since=28)  # float fmod=0 allowed (floor semantics)
def make_mod(node: NodeView, ctx: ProviderContext) -> Kernel:
    fn = np.fmod if node.attr("fmod", 0) else np.mod
    checked = _nonzero_divisor(fn, "modulo")

    def mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return checked(a, b) if a.dtype.kind in "iu" else fn(a, b)

    return _binary(node, mod, lambda dt: checked if dt.kind in "iu" else fn)


@op("BitShift", since=11)
@op("BitShift", since=28)  # signed types, defined out-of-range shifts
def make_bitshift(node: NodeView, ctx: ProviderContext) -> Kernel:
    direction = node.attr("direction", "")
    if isinstance(direction, bytes):
        direction = direction.decode()
    fn = np.left_shift if direction.upper() == "LEFT" else np.right_shift
    return _binary(node, fn)


@op(["BitwiseAnd", "BitwiseOr", "BitwiseXor"], since=18)
def make_bitwise(node: NodeView, ctx: ProviderContext) -> Kernel:
    fn = {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or,
          "BitwiseXor": np.bitwise_xor}[node.op_type]
    return _binary(node, fn)


_COMPARE = {"Equal": np.equal, "Less": np.less, "Greater": np.greater,
            "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
            "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}


@op(["Equal", "Less", "Greater", "And", "Or", "Xor"], since=1)
@op(["Equal", "Less", "Greater", "And", "Or", "Xor"], since=7)
@op(["LessOrEqual", "GreaterOrEqual"], since=12)
def make_compare(node: NodeView, ctx: ProviderContext) -> Kernel:
    fn = _COMPARE[node.op_type]
    align = _legacy_broadcast(node)
    da, db = _in_dtype(node, 0), _in_dtype(node, 1)
    if (align is None and da is not None and db is not None and da not in LOW_PRECISION_FLOATS
            and da.kind not in "SUO" and db.kind not in "SUO"):
        return fn if _ranked(node, 0, 1) else _arrays(fn)

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if align is not None:
            b = align(a, b)
        if a.dtype in LOW_PRECISION_FLOATS:
            a, b = a.astype(np.float32), b.astype(np.float32)
        elif a.dtype.kind in "SUO" or b.dtype.kind in "SUO":
            a, b = str_guard(a), str_guard(b)
        return as_array(fn(a, b))

    return kernel


@op("Where", since=9)
def make_where(node: NodeView, ctx: ProviderContext) -> Kernel:
    dx, dy = _in_dtype(node, 1), _in_dtype(node, 2)
    if dx is not None and dy is not None and dx.kind not in "SUO" and dy.kind not in "SUO":
        return select
    return lambda c, x, y: select(c, str_guard(x), str_guard(y))


# --------------------------------------------------------------------------------------------
# Variadic
# --------------------------------------------------------------------------------------------


_SMALL_VARIADIC = {"Sum": "add", "Max": "max", "Min": "min"}


@op(["Sum", "Max", "Min", "Mean"], since=1)
@op(["Sum", "Max", "Min", "Mean"], since=8)  # broadcasting
def make_variadic(node: NodeView, ctx: ProviderContext) -> Kernel:
    fn = {"Sum": np.add, "Mean": np.add, "Max": np.maximum, "Min": np.minimum}[node.op_type]
    mean = node.op_type == "Mean"
    dt0 = _in_dtype(node, 0)
    if (not mean and len(node.inputs) == 2 and dt0 is not None
            and dt0 not in LOW_PRECISION_FLOATS and _in_dtype(node, 1) == dt0):
        kernel = fn if _ranked(node, 0, 1) else _arrays(fn)
        return _small(_SMALL_VARIADIC[node.op_type], node, kernel)

    def kernel(*xs: np.ndarray) -> np.ndarray:
        if len(xs) == 1:
            return xs[0]
        dt = xs[0].dtype
        if dt in LOW_PRECISION_FLOATS or (mean and dt == _F16):
            xs = tuple(x.astype(np.float32) for x in xs)
        out = as_array(fn(xs[0], xs[1]))
        for x in xs[2:]:
            if out.shape == np.broadcast_shapes(out.shape, x.shape):
                fn(out, x, out=out)
            else:
                out = as_array(fn(out, x))
        if mean:
            np.divide(out, len(xs), out=out)
        return out.astype(dt) if out.dtype != dt else out

    return kernel
