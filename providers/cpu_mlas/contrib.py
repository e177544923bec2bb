"""com.microsoft contrib kernels produced by the CNN / quantization fusions
(``onnxplex.optimizer._fusions_cnn``), with onnxruntime's published semantics:

* FusedConv: Conv (+ optional sum input Z) then an activation, applied in place on the
  fresh Conv output (``activation`` in Relu/Sigmoid/Tanh/LeakyRelu/Clip/HardSigmoid,
  parameters in ``activation_params``, and onnxplex's own Swish (SiLU, x * sigmoid(x)) and
  HardSwish, which onnxruntime's FusedConv lacks); NhwcFusedConv, the same channels-last (from
  the layout level's NhwcTransformer; Swish and HardSwish are fused only there, into
  onnxplex-only nodes, so a model saved at the extended level stays onnxruntime's);
* FusedGemm: Gemm then an activation (``activation`` + ``activation_<attr>`` attributes);
* QuickGelu: ``x * sigmoid(alpha * x)`` (SiLU with alpha 1);
* MatMulIntegerToFloat: ``(A - a_zp) @ (B - b_zp) * (a_scale * b_scale) + bias``;
* DynamicQuantizeMatMul: A quantized to uint8 as DynamicQuantizeLinear does, then as
  MatMulIntegerToFloat with a constant B (centered and prepacked once);
* QLinearGlobalAveragePool: dequantize, compute in float32, requantize (round half to even,
  saturate); QLinearAdd and QLinearMul as onnxruntime's MLAS computes them (Add: the raw
  values' fused multiply-adds by the scale ratios; Mul: the exact integer product times
  ``a_scale * b_scale / c_scale`` in float32, plus the zero point), its bytes.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable

import numpy as np
from onnx import TensorProto as TP

from onnxplex import NodeView, ProviderContext, prepacked

from . import _blas, _native
from ._native import native
from ._registry import op
from .elementwise import (
    _sigmoid,
    _sigmoid_f32,
    _softplus,
    hard_swish_in_place,
    swish_f32,
    swish_in_place,
)
from .linalg import gemm_kernel
from .nn import ConvStatic, _conv, _conv_nhwc, _ConvWeights, to_compute
from .quant import (
    _I8,
    _centered,
    native_a_zero_point,
    native_pack_b,
    native_rows,
    scalar_zero_point,
)

logger = logging.getLogger(__name__)

MS = "com.microsoft"
_F32 = np.float32
_EXACT_F32 = float(2 ** 24)
_Q8 = {TP.UINT8, TP.INT8}
_Q8DT = {np.dtype(np.uint8), np.dtype(np.int8)}


# --------------------------------------------------------------------------------------------
# In-place activations (the input is a fresh float array the kernel owns)
# --------------------------------------------------------------------------------------------


def _activation(kind: str, params: dict[str, float]) -> Callable[[np.ndarray], np.ndarray]:
    """``fn(y) -> y'``, in place when it can be."""
    if kind == "Relu":
        return lambda y: np.maximum(y, 0, out=y)
    if kind == "Sigmoid":
        return _sigmoid
    if kind == "Tanh":
        return lambda y: np.tanh(y, out=y)
    if kind == "Swish":   # (onnxplex's: SiLU, x * sigmoid(x); NhwcFusedConv, layout level)
        return swish_in_place
    if kind == "HardSwish":   # (onnxplex's: x * clip(x / 6 + 0.5, 0, 1), as the op)
        return hard_swish_in_place
    if kind == "LeakyRelu":
        alpha = params.get("alpha", 0.01)

        def leaky(y):
            neg = np.minimum(y, 0)
            neg *= y.dtype.type(alpha)
            np.maximum(y, 0, out=y)
            y += neg
            return y
        return leaky
    if kind == "Clip":
        lo, hi = params.get("min", -np.inf), params.get("max", np.inf)
        return lambda y: np.clip(y, lo, hi, out=y)
    if kind == "HardSigmoid":
        alpha, beta = params.get("alpha", 0.2), params.get("beta", 0.5)

        def hard_sigmoid(y):
            y *= y.dtype.type(alpha)
            y += y.dtype.type(beta)
            return np.clip(y, 0, 1, out=y)
        return hard_sigmoid
    if kind == "Elu":
        alpha = params.get("alpha", 1.0)

        def elu(y):
            neg = np.expm1(np.minimum(y, 0))
            neg *= y.dtype.type(alpha)
            np.maximum(y, 0, out=y)
            y += neg
            return y
        return elu
    if kind == "Selu":
        alpha = params.get("alpha", 1.67326319217681884765625)
        gamma = params.get("gamma", 1.05070102214813232421875)

        def selu(y):
            neg = np.expm1(np.minimum(y, 0))
            neg *= y.dtype.type(alpha * gamma)
            np.maximum(y, 0, out=y)
            y *= y.dtype.type(gamma)
            y += neg
            return y
        return selu
    if kind == "Softplus":
        return _softplus
    if kind == "Softsign":
        def softsign(y):
            d = np.absolute(y)
            d += 1
            y /= d
            return y
        return softsign
    if kind == "ThresholdedRelu":
        alpha = params.get("alpha", 1.0)

        def thresholded(y):
            y[y <= alpha] = 0
            return y
        return thresholded
    raise ValueError(f"unsupported activation {kind!r}")


_CONV_PARAM_NAMES = {"LeakyRelu": ("alpha",), "HardSigmoid": ("alpha", "beta"),
                     "Clip": ("min", "max")}
_GEMM_ACTIVATIONS = {"Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "Elu", "Selu",
                     "Softplus", "Softsign", "ThresholdedRelu"}


def _str(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _fused_conv_predicate(node: NodeView) -> str | None:
    kind = _str(node.attr("activation", ""))
    if kind not in ("Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "HardSigmoid", "Swish",
                    "HardSwish", ""):
        return f"FusedConv activation {kind!r} is not supported"
    return None


# --------------------------------------------------------------------------------------------
# FusedConv / FusedGemm
# --------------------------------------------------------------------------------------------


@op("FusedConv", since=1, domain=MS, dtypes={0: {TP.FLOAT}}, predicate=_fused_conv_predicate)
def make_fused_conv(node: NodeView, ctx: ProviderContext):
    """com.microsoft FusedConv: ``activation(conv(X, W) + B + Z)`` on the Conv kernel path."""
    return _fused_conv_kernel(node, _conv)


@op("NhwcFusedConv", since=1, domain=MS, dtypes={0: {TP.FLOAT}},
    predicate=_fused_conv_predicate)
def make_nhwc_fused_conv(node: NodeView, ctx: ProviderContext):
    """com.microsoft NhwcFusedConv: FusedConv with X, Z and Y channels-last ``[N, H, W, C]``
    (W as Conv's; what the layout level's NhwcTransformer produces). onnxplex's own fifth
    input S, ``[N or 1, 1, 1, C]``: X is read times S (a squeeze-excite gate's Mul fused into
    the 1x1 conv after it)."""
    return _fused_conv_kernel(node, _conv_nhwc)


def _fused_conv_kernel(node: NodeView, conv: Callable[..., np.ndarray]):
    group = int(node.attr("group", 1))
    kind = _str(node.attr("activation", ""))
    values = list(node.attr("activation_params", None) or ())
    names = _CONV_PARAM_NAMES.get(kind, ())
    act = _activation(kind, dict(zip(names, values))) if kind else None
    w_info, b_info = node.input(1), node.input(2)
    packed = _ConvWeights(w_info.const, group) if w_info is not None and w_info.is_const else None
    bias_c = to_compute(b_info.const) if b_info is not None and b_info.is_const else None
    static = ConvStatic(node)

    def in_place(y):
        r = act(y)
        if r is not y:  # e.g. Sigmoid returns a new array
            y[...] = r

    def kernel(x, w, b=None, z=None, s=None):
        cw = packed if packed is not None else _ConvWeights(w, group)
        bias = bias_c if bias_c is not None else (None if b is None else to_compute(b))
        # bias, Z and the activation run on each chunk of the Conv output as it is produced
        if s is None:
            y = conv(x, cw, static, bias, z, in_place if act is not None else None)
        else:
            y = conv(x, cw, static, bias, z, in_place if act is not None else None, s)
        if step is not None:
            _install(step, cw, x, bias, z is None, s is None)
        return y

    # A channels-last conv whose W and B are constants is a native step: once a call has
    # planned the native conv for its input shape (with or without Z and an input scale),
    # calls that fit that plan run it without this Python (register_step.cpp).
    step = (_native.planned_step(kernel) if conv is _conv_nhwc and packed is not None
            and (b_info is None or bias_c is not None) else None)
    return step if step is not None else kernel


def _install(step, cw, x: np.ndarray, bias: np.ndarray | None, no_z: bool,
             no_scale: bool) -> None:
    """Hand ``step`` the native plan the call just ran for ``x``'s shape (with or without Z
    and S), when it computes the whole output (else the step keeps calling the kernel)."""
    plan = cw.nhwc_plans.get((x.shape, no_z, no_scale))
    found = getattr(plan, "native_for", None)
    nat_plan = found(bias) if found is not None else None
    if nat_plan is not None:
        step.install(nat_plan)


@op("QuickGelu", since=1, domain=MS,
    dtypes={0: {TP.FLOAT, TP.FLOAT16, TP.BFLOAT16, TP.DOUBLE}})
def make_quick_gelu(node: NodeView, ctx: ProviderContext):
    """com.microsoft QuickGelu: ``x * sigmoid(alpha * x)`` (alpha 1.702 by default; 1 is SiLU,
    what the extended level's Sigmoid + Mul fusion writes): alpha 1 on the native SiLU loop
    (one pass, over the pool), any other alpha as the sigmoid of the scaled input times x.
    float16 and bfloat16 compute in float32 and round once (onnxruntime casts around its
    float kernel: a CLIP fused by its transformer optimizer, then converted to float16)."""
    alpha = np.float32(node.attr("alpha", 1.702))

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.dtype.itemsize == 2:
            return kernel(x.astype(_F32)).astype(x.dtype)
        if alpha == 1 and x.dtype == _F32:
            return swish_f32(x)
        s = _sigmoid_f32(np.ascontiguousarray(x * alpha, dtype=_F32)) \
            if x.dtype == _F32 else _sigmoid(x * x.dtype.type(alpha))
        s *= x
        return s

    return kernel


def _fused_gemm_predicate(node: NodeView) -> str | None:
    kind = _str(node.attr("activation", ""))
    if kind not in _GEMM_ACTIVATIONS:
        return f"FusedGemm activation {kind!r} is not supported"
    return None


@op("FusedGemm", since=1, domain=MS, dtypes={0: {TP.FLOAT}}, predicate=_fused_gemm_predicate)
def make_fused_gemm(node: NodeView, ctx: ProviderContext):
    """com.microsoft FusedGemm: ``activation(alpha * A' @ B' + beta * C)``."""
    kind = _str(node.attr("activation"))
    params = {k[len("activation_"):]: float(v) for k, v in node.attrs.items()
              if k.startswith("activation_")}
    act = _activation(kind, params)
    gemm, fused = gemm_kernel(node, relu=kind == "Relu")
    if fused:  # Relu in the native GEMM's epilogue
        return gemm

    def kernel(a, b, c=None):
        y = gemm(a, b, c)  # a fresh array
        return act(y)

    return prepacked(kernel, *getattr(gemm, "prepacked_inputs", ()))


# --------------------------------------------------------------------------------------------
# MatMulIntegerToFloat / DynamicQuantizeMatMul
# --------------------------------------------------------------------------------------------


def _float_int_matmul(af: np.ndarray, bf: np.ndarray, bmax: float) -> np.ndarray:
    """The exact integer product of centered float32 operands, as float32 (float64 BLAS
    when a partial sum could exceed float32's exact integer range)."""
    k = af.shape[-1]
    amax = float(np.abs(af).max()) if af.size else 0.0
    if k * amax * bmax >= _EXACT_F32:
        af, bf = af.astype(np.float64), bf.astype(np.float64)
    if af.ndim > 2 and bf.ndim == 2:
        y = np.matmul(af.reshape(-1, k), bf).reshape(af.shape[:-1] + (bf.shape[-1],))
    else:
        y = np.matmul(af, bf)
    return np.asarray(y, dtype=_F32)


class _PackedB:
    """A centered constant B with its max magnitude."""

    def __init__(self, b: np.ndarray, zp: np.ndarray | None):
        bz = None if zp is None else np.asarray(zp)
        if bz is not None and bz.ndim == 1 and bz.size > 1:
            bz = bz.reshape(1, -1)  # per column
        self.bf = _centered(b, bz, False)
        self.bmax = float(np.abs(self.bf).max()) if self.bf.size else 0.0


def _pack_b(node: NodeView, bi: int, zi: int) -> _PackedB | None:
    b, z = node.input(bi), node.input(zi)
    if b is not None and b.is_const and (z is None or z.is_const):
        return _PackedB(b.const, None if z is None else z.const)
    return None


def _scale(a_scale, b_scale) -> np.ndarray:
    return (np.asarray(a_scale, _F32) * np.asarray(b_scale, _F32)).astype(_F32)


def _b_scale(b_scale, n: int) -> np.ndarray | None:
    """B's scale as the native epilogue takes it (1 or N values), or None for another form."""
    s = np.asarray(b_scale, _F32)
    return s.reshape(-1) if s.size in (1, n) else None


@op("MatMulIntegerToFloat", since=1, domain=MS, dtypes={0: _Q8, 1: _Q8, 2: {TP.FLOAT}})
def make_matmul_integer_to_float(node: NodeView, ctx: ProviderContext):
    """com.microsoft MatMulIntegerToFloat:
    ``(A - a_zp) @ (B - b_zp) * (a_scale * b_scale) + bias`` (b scale/zp per column).
    On the native integer GEMM (epilogue fused) when available, else on float BLAS."""
    bi, zi = node.input(1), node.input(5)
    native_b = native_pack_b(bi.const, None if zi is None else zi.const) \
        if bi is not None and bi.is_const and (zi is None or zi.is_const) else None
    packed = _pack_b(node, 1, 5) if native_b is None else None
    threads = _blas.native_threads(ctx.intra_op_num_threads)

    def kernel(a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
        nb = native_b if native_b is not None or packed is not None else \
            native_pack_b(b, b_zero_point)
        if nb is not None:
            ok, azp = native_a_zero_point(a_zero_point, a.shape, False)
            scale = _scale(a_scale, b_scale)
            if ok and scale.size in (1, nb.n) and (bias is None or np.size(bias) == nb.n):
                y = native().qgemm_f32(native_rows(a), azp, nb, scale.reshape(-1),
                                       None if bias is None else np.asarray(bias, _F32),
                                       threads)
                return y.reshape(a.shape[:-1] + (nb.n,))
        pb = packed if packed is not None else _PackedB(b, b_zero_point)
        af = _centered(a, a_zero_point, False)
        y = _float_int_matmul(af, pb.bf, pb.bmax)
        y *= _scale(a_scale, b_scale)
        if bias is not None:
            y += np.asarray(bias, _F32)
        return y

    return kernel


def _dynamic_quantize(x: np.ndarray) -> tuple[np.ndarray, np.float32, np.float32]:
    """DynamicQuantizeLinear (uint8) of ``x``: centered values ``q - zp`` as float32, and
    the scale and zero point."""
    x = np.asarray(x, dtype=_F32)
    lo = min(_F32(0), x.min()) if x.size else _F32(0)
    hi = max(_F32(0), x.max()) if x.size else _F32(0)
    scale = _F32(1) if hi == lo else _F32((hi - lo) / _F32(255))
    zp = _F32(np.rint(np.clip(_F32(0) - lo / scale, 0, 255)))
    y = x / scale
    np.rint(y, out=y)
    np.clip(y, -zp, _F32(255) - zp, out=y)  # = clip(q, 0, 255) - zp
    return y, scale, zp


@op("DynamicQuantizeMatMul", since=1, domain=MS, dtypes={0: {TP.FLOAT}, 1: _Q8})
def make_dynamic_quantize_matmul(node: NodeView, ctx: ProviderContext):
    """com.microsoft DynamicQuantizeMatMul: A quantized as DynamicQuantizeLinear (uint8),
    then ``(A_q - a_zp) @ (B - b_zp) * (a_scale * b_scale) + bias``. On the native integer
    GEMM (quantization, GEMM and epilogue in one call) when available, else on float BLAS."""
    bi, zi = node.input(1), node.input(3)
    native_b = native_pack_b(bi.const, None if zi is None else zi.const) \
        if bi is not None and bi.is_const and (zi is None or zi.is_const) else None
    packed = _pack_b(node, 1, 3) if native_b is None else None
    bias_info = node.input(4)
    bias_c = None if bias_info is None or not bias_info.is_const else \
        np.asarray(bias_info.const, _F32)
    threads = _blas.native_threads(ctx.intra_op_num_threads)

    def kernel(a, b, b_scale, b_zero_point=None, bias=None):
        bias_v = None if bias is None else (bias_c if bias_c is not None else
                                            np.asarray(bias, _F32))
        nb = native_b if native_b is not None or packed is not None else \
            native_pack_b(b, b_zero_point)
        if nb is not None:
            bs = _b_scale(b_scale, nb.n)
            if bs is not None and (bias_v is None or bias_v.size == nb.n):
                x = native_rows(np.asarray(a, _F32))
                y, _, _ = native().dynamic_qgemm_f32(x, nb, bs, bias_v, threads)
                return y.reshape(a.shape[:-1] + (nb.n,))
        pb = packed if packed is not None else _PackedB(b, b_zero_point)
        af, a_scale, _ = _dynamic_quantize(a)
        y = _float_int_matmul(af, pb.bf, pb.bmax)
        y *= _scale(a_scale, b_scale)
        if bias_v is not None:
            y += bias_v
        return y

    # Known at compile time to always take the native path: B is never read again.
    s_info = node.input(2)
    native_only = (native_b is not None and s_info is not None and s_info.is_const
                   and _b_scale(s_info.const, native_b.n) is not None
                   and (bias_info is None or (bias_c is not None and bias_c.size == native_b.n)))
    return prepacked(kernel, *((1,) if native_only else ()))


# --------------------------------------------------------------------------------------------
# QLinearAdd / QLinearMul / QLinearGlobalAveragePool
# --------------------------------------------------------------------------------------------


def _deq(x: np.ndarray, scale, zp) -> np.ndarray:
    xf = x.astype(_F32)
    if zp is not None:
        xf -= np.asarray(zp, _F32)
    xf *= np.asarray(scale, _F32)
    return xf


def _req(yf: np.ndarray, scale, zp, dtype: np.dtype) -> np.ndarray:
    yf /= np.asarray(scale, _F32)
    np.rint(yf, out=yf)
    if zp is not None:
        yf += np.asarray(zp, _F32)
    info = np.iinfo(dtype)
    np.clip(yf, info.min, info.max, out=yf)
    return yf.astype(dtype)


def _qlinear_mul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point,
                 out: np.dtype) -> np.ndarray:
    """QLinearMul as onnxruntime's MLAS computes it (and the native kernel): the exact
    integer product of the centered operands, times ``a_scale * b_scale / c_scale`` in
    float32, plus the output zero point, rounded half to even and saturated; a value that is
    not a number or lies past int32 gives the bottom of the range (MLAS's conversion)."""
    def centered(x, zp):
        xi = np.asarray(x).astype(np.int32)
        return xi if zp is None else xi - np.asarray(zp).astype(np.int32)

    product = centered(a, a_zero_point) * centered(b, b_zero_point)
    ratio = (np.asarray(a_scale, _F32) * np.asarray(b_scale, _F32)) / np.asarray(c_scale, _F32)
    zc = _F32(0) if c_zero_point is None else np.asarray(c_zero_point).astype(_F32)
    with np.errstate(all="ignore"):
        return _mlas_round(product.astype(_F32) * ratio + zc, out)


def _mlas_round(f: np.ndarray, out: np.dtype) -> np.ndarray:
    """MLAS's conversion of float32 values to 8 bits: half to even, saturated; NaN or a
    magnitude past int32 converts to INT32_MIN, so to the bottom of the range."""
    info = np.iinfo(out)
    with np.errstate(all="ignore"):
        ok = np.isfinite(f) & (np.abs(f) < _F32(2**31))
        r = np.where(ok, np.rint(np.where(ok, f, 0)), info.min)
    return np.clip(r, info.min, info.max).astype(out)


def _fma32(x, y, z) -> np.ndarray:
    """float32 ``x * y + z`` rounded once (a fused multiply-add): the 8-bit operand and
    float32 factor's product is exact in float64 and so is its sum with a float32 of this
    op's magnitudes, then one rounding to float32."""
    return (np.asarray(x, np.float64) * np.asarray(y, np.float64)
            + np.asarray(z, np.float64)).astype(_F32)


def _qlinear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point,
                 out: np.dtype) -> np.ndarray:
    """QLinearAdd as onnxruntime's MLAS (AVX2) computes it, and the native kernel: with
    ``rac = a_scale / c_scale``, ``rbc = b_scale / c_scale`` and ``fixed = zc - (rac * za +
    rbc * zb)`` (its sum of products fused), ``fma(a, rac, fma(b, rbc, fixed))`` on the raw
    values; where a is broadcast along the last axis (one value per run of b's) the roles
    swap: ``fma(b, rbc, fma(a, rac, zc - (rbc * zb + rac * za)))``; then
    :func:`_mlas_round`. (Checked against onnxruntime 1.32 element by element.)"""
    a, b = np.asarray(a), np.asarray(b)
    f32 = lambda v: np.asarray(v, _F32).reshape(())  # noqa: E731
    zp = lambda v: _F32(0) if v is None else np.asarray(v).astype(_F32).reshape(())  # noqa: E731
    rac, rbc = f32(a_scale) / f32(c_scale), f32(b_scale) / f32(c_scale)
    za, zb, zc = zp(a_zero_point), zp(b_zero_point), zp(c_zero_point)
    shape = np.broadcast_shapes(a.shape, b.shape)
    # onnxruntime runs an a broadcast along the last axis (one value per run of b's) with the
    # operands' roles swapped: b's terms first
    a_spans = len(shape) > 0 and shape[-1] != 1 and (a.ndim == 0 or a.shape[-1] == 1) \
        and not (b.ndim == 0 or b.shape[-1] == 1)
    af, bf = a.astype(_F32), b.astype(_F32)
    with np.errstate(all="ignore"):
        if a_spans:
            f = _fma32(bf, rbc, _fma32(af, rac, zc - _fma32(rbc, zb, rac * za)))
        else:
            f = _fma32(af, rac, _fma32(bf, rbc, zc - _fma32(rac, za, rbc * zb)))
    return _mlas_round(np.broadcast_to(f, shape), out)


def _row_broadcast(shape: tuple[int, ...], out: tuple[int, ...]) -> int | None:
    """The rows (product of ``out``'s leading axes) over which an operand of ``shape`` holds
    one value each, broadcast along the rest (a squeeze-excite gate [N, C, 1, 1] against
    [N, C, H, W]); None when it broadcasts otherwise."""
    padded = (1,) * (len(out) - len(shape)) + tuple(shape)
    k = len(out)
    while k > 0 and padded[k - 1] == 1:
        k -= 1
    if padded[:k] != out[:k]:
        return None
    return int(np.prod(out[:k], dtype=np.int64))


def _trailing_broadcast(shape: tuple[int, ...], out: tuple[int, ...]) -> int | None:
    """The length of the run of values an operand of ``shape`` repeats for every leading
    position of ``out`` (its trailing axes equal to ``out``'s, every axis before them 1: a
    gate [1, 1, 1, C] against [1, H, W, C] repeats C values); None when it broadcasts otherwise."""
    padded = (1,) * (len(out) - len(shape)) + tuple(shape)
    k = len(out)
    while k > 0 and padded[k - 1] == out[k - 1]:
        k -= 1
    if k == len(out) or any(d != 1 for d in padded[:k]):
        return None
    return int(np.prod(out[k:], dtype=np.int64)) or None


def _qbinary_scalars(params: tuple, last: list | None) -> tuple | None:
    """The per-tensor scales and zero points of a QLinearAdd / QLinearMul as the native call
    takes them (float, int, float, int, float, int), or None when one is not a single value.
    ``last``: the node's one-entry cache (``[(params, answer)]``, read and replaced whole),
    kept by the parameters' identities: a model's are the same initializer arrays on every
    run (~10 us of numpy conversions a call otherwise)."""
    entry = last[0] if last is not None else None
    if entry is not None and all(p is k for p, k in zip(params, entry[0])):
        return entry[1]
    if any(p is not None and np.size(p) != 1 for p in params):
        return None

    def sc(v) -> float:
        return float(np.asarray(v, _F32).reshape(-1)[0])

    a_s, a_z, b_s, b_z, c_s, c_z = params
    found = (sc(a_s), scalar_zero_point(a_z), sc(b_s), scalar_zero_point(b_z), sc(c_s),
             scalar_zero_point(c_z))
    if last is not None:
        last[0] = (params, found)
    return found


def _native_qbinary(mul: bool, threads: int, a, a_scale, a_zero_point, b, b_scale,
                    b_zero_point, c_scale, c_zero_point, out: np.dtype,
                    last: list | None = None) -> np.ndarray | None:
    """QLinearAdd / QLinearMul natively (``qlinear_binary_8bit``: the numpy kernel's float32
    values) for per-tensor scales and zero points and operands that are whole or one value
    per leading row of the output, else None. ``last``: the node's cache of its scalars."""
    nat = native()
    if nat is None or not hasattr(nat, "qlinear_binary_8bit") or out not in _I8:
        return None
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype not in _I8 or b.dtype not in _I8:
        return None
    scalars = _qbinary_scalars((a_scale, a_zero_point, b_scale, b_zero_point, c_scale,
                                c_zero_point), last)
    if scalars is None:
        return None
    layout = _qbinary_layout(a.shape, b.shape)
    if layout is None:
        return None
    shape, rows, inner, a_full, b_full, a_cyc, b_cyc, copy = layout
    if copy:
        # another broadcast (a gate [N, 1, 1, C] with N > 1): the small operand copied out to
        # the output's shape, then whole operands
        if a_full:
            b = np.broadcast_to(b, shape)
        else:
            a = np.broadcast_to(a, shape)
    return nat.qlinear_binary_8bit(
        np.ascontiguousarray(a), scalars[0], scalars[1], a_full, np.ascontiguousarray(b),
        scalars[2], scalars[3], b_full, scalars[4], scalars[5], out == np.int8, mul, shape,
        rows, inner, threads, a_cyc, b_cyc)


@functools.lru_cache(maxsize=512)
def _qbinary_layout(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple | None:
    """How the native QLinearAdd / QLinearMul takes operands of these shapes: (output shape,
    rows, inner, a full, b full, a cyclic, b cyclic, the small operand copied out
    first), or None when it does not. Whole operands; one value per leading row of the
    output (a squeeze-excite gate [N, C, 1, 1] against [N, C, H, W]); the same run of
    ``inner`` values for every row, read cyclically (a channels-last gate [1, 1, 1, C]
    against [1, H, W, C]); another broadcast of an operand at most a quarter of the output,
    copied out. (Worked out once per pair of shapes: ~15 us of numpy calls a run otherwise.)"""
    if a_shape == b_shape:
        total = int(np.prod(a_shape, dtype=np.int64))
        return a_shape, 1, total, True, True, False, False, False
    try:
        shape = np.broadcast_shapes(a_shape, b_shape)
    except ValueError:
        return None
    total = int(np.prod(shape, dtype=np.int64))
    a_full, b_full = a_shape == shape, b_shape == shape
    if not (a_full or b_full) or total == 0:
        return None
    small = b_shape if a_full else a_shape
    rows = _row_broadcast(small, shape)
    if rows:
        return shape, rows, total // rows, a_full, b_full, False, False, False
    inner = _trailing_broadcast(small, shape)
    if inner:
        return shape, total // inner, inner, True, True, not a_full, not b_full, False
    if int(np.prod(small, dtype=np.int64)) * 4 > total:
        return None
    return shape, 1, total, True, True, False, False, True


def _make_qlinear_binary(ufunc: np.ufunc):
    mul = ufunc is np.multiply

    def factory(node: NodeView, ctx: ProviderContext):
        threads = _blas.native_threads(ctx.intra_op_num_threads)
        last: list = [None]

        def kernel(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale,
                   c_zero_point=None):
            out = np.dtype(c_zero_point.dtype if c_zero_point is not None else a.dtype)
            y = _native_qbinary(mul, threads, a, a_scale, a_zero_point, b, b_scale,
                                b_zero_point, c_scale, c_zero_point, out, last)
            if y is not None:
                return y
            exact = _qlinear_mul if mul else _qlinear_add
            return exact(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale,
                         c_zero_point, out)

        return kernel

    return factory


def _lookup(x: np.ndarray, table: np.ndarray, threads: int) -> np.ndarray:
    """``table[x's byte]`` (natively where the module is built)."""
    nat = native()
    if nat is not None and hasattr(nat, "lookup_8bit"):
        return nat.lookup_8bit(np.ascontiguousarray(x), table, threads=threads)
    return table[x.view(np.uint8)]


def _make_qlinear_lookup(fn: Callable[[NodeView], Callable[[np.ndarray], np.ndarray]]):
    """com.microsoft QLinearSigmoid / QLinearLeakyRelu (X, X_scale, X_zero_point, Y_scale,
    Y_zero_point): an 8-bit input has 256 values, so the op is a table of them, built (once
    per scales and zero points) by the unfused graph's own steps: DequantizeLinear, the float
    op, QuantizeLinear; then each run is a lookup (``lookup_8bit``)."""

    def factory(node: NodeView, ctx: ProviderContext):
        from .quant import _dequantize, _quantize

        threads = _blas.native_threads(ctx.intra_op_num_threads)
        float_op = fn(node)
        tables: dict[tuple, np.ndarray] = {}

        def kernel(x, x_scale, x_zero_point, y_scale, y_zero_point=None):
            x = np.asarray(x)
            out = np.dtype(y_zero_point.dtype if y_zero_point is not None else x.dtype)
            key = (x.dtype, np.asarray(x_scale).tobytes(), None if x_zero_point is None
                   else np.asarray(x_zero_point).tobytes(), np.asarray(y_scale).tobytes(),
                   None if y_zero_point is None else np.asarray(y_zero_point).tobytes(), out)
            table = tables.get(key)
            if table is None:
                # every byte value, read as x's type: entry b is the result for byte b
                values = np.arange(256, dtype=np.uint8).view(x.dtype)
                xf = _dequantize(values, np.asarray(x_scale), x_zero_point, np.dtype(_F32),
                                 1, 0)
                table = _quantize(float_op(xf), np.asarray(y_scale), y_zero_point, out, 1, 0,
                                  True, np.dtype(_F32))
                if len(tables) >= 8:
                    tables.clear()
                tables[key] = table
            return _lookup(x, table, threads)

        return kernel

    return factory


def _leaky_relu(node: NodeView) -> Callable[[np.ndarray], np.ndarray]:
    alpha = _F32(node.attr("alpha", 0.01))
    return lambda y: np.where(y >= 0, y, y * alpha).astype(_F32)


def _table_sigmoid(node: NodeView) -> Callable[[np.ndarray], np.ndarray]:
    """The Sigmoid kernel's function for the table: the native one its large inputs take when
    it is built (so the table holds what an unfused Sigmoid of an activation computes), else
    the kernel's own."""
    def sigmoid(y: np.ndarray) -> np.ndarray:
        y = np.ascontiguousarray(y, dtype=_F32)
        nat = native()
        if nat is not None and hasattr(nat, "sigmoid_f32"):
            out = np.empty_like(y)
            nat.sigmoid_f32(y, out, 1)
            return out
        return _sigmoid_f32(y)

    return sigmoid


op("QLinearSigmoid", since=1, domain=MS, dtypes={0: _Q8})(_make_qlinear_lookup(_table_sigmoid))
op("QLinearLeakyRelu", since=1, domain=MS, dtypes={0: _Q8})(_make_qlinear_lookup(_leaky_relu))
op("QLinearAdd", since=1, domain=MS, dtypes={0: _Q8})(_make_qlinear_binary(np.add))
op("QLinearMul", since=1, domain=MS, dtypes={0: _Q8})(_make_qlinear_binary(np.multiply))


@op("QLinearLookup", since=1, domain="ai.onnxplex", dtypes={0: _Q8})
def make_qlinear_lookup_table(node: NodeView, ctx: ProviderContext):
    """ai.onnxplex QLinearLookup (x, table): ``table[x's byte]`` for an 8-bit x and a
    256-entry 8-bit table (the optimizer's DequantizeLinear -> elementwise op ->
    QuantizeLinear, each byte mapped as those nodes map it)."""
    threads = _blas.native_threads(ctx.intra_op_num_threads)

    def kernel(x, table):
        x, table = np.asarray(x), np.asarray(table)
        if table.shape != (256,) or x.dtype not in (np.uint8, np.int8):
            raise ValueError("QLinearLookup needs an 8-bit x and a 256-entry table")
        return _lookup(x, table, threads)

    return kernel


# The other QOperator ops onnxruntime's quantizer writes compute as their unfused QDQ form does:
# each 8-bit input dequantized to float32, the float op, the result quantized (round half to
# even, saturated), as onnxruntime's kernels do in float (within one output step of theirs).


def _out_type(zero_point, fallback: np.ndarray) -> np.dtype:
    return np.dtype(zero_point.dtype if zero_point is not None else fallback.dtype)


@op("QLinearConcat", since=1, domain=MS)
def make_qlinear_concat(node: NodeView, ctx: ProviderContext):
    """com.microsoft QLinearConcat (Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per
    input; ``axis``): an input already at the output's scale and zero point is copied, the
    others requantized to it."""
    axis = int(node.attr("axis"))

    def kernel(y_scale, y_zero_point, *triples):
        xs = triples[0::3]
        out = _out_type(y_zero_point, xs[0])
        parts = []
        for x, s, z in zip(xs, triples[1::3], triples[2::3]):
            same = (np.array_equal(np.asarray(s, _F32), np.asarray(y_scale, _F32))
                    and scalar_zero_point(z) == scalar_zero_point(y_zero_point)
                    and x.dtype == out)
            parts.append(x if same else _req(_deq(x, s, z), y_scale, y_zero_point, out))
        return np.concatenate(parts, axis=axis)

    return kernel


@op("QLinearAveragePool", since=1, domain=MS, dtypes={0: _Q8})
def make_qlinear_average_pool(node: NodeView, ctx: ProviderContext):
    """com.microsoft QLinearAveragePool (X, x_scale, x_zero_point, y_scale, y_zero_point;
    AveragePool's attributes and ``channels_last``)."""
    from .nn import _avg_pool

    channels_last = int(node.attr("channels_last", 0)) == 1

    def kernel(x, x_scale, x_zero_point, y_scale, y_zero_point=None):
        y = _avg_pool(node, _deq(x, x_scale, x_zero_point), True,
                      channels_last=channels_last)
        return _req(np.asarray(y, _F32), y_scale, y_zero_point, _out_type(y_zero_point, x))

    return kernel


@op("QLinearSoftmax", since=1, domain=MS, dtypes={0: _Q8})
def make_qlinear_softmax(node: NodeView, ctx: ProviderContext):
    """com.microsoft QLinearSoftmax (X, X_scale, x_zero_point, y_scale, y_zero_point; ``axis``
    and ``opset``, the original Softmax's: below 13 the input is flattened to 2-D at axis)."""
    from .normalization import _softmax

    axis = int(node.attr("axis", -1))
    coerce = int(node.attr("opset", 13)) < 13

    def kernel(x, x_scale, x_zero_point, y_scale, y_zero_point=None):
        xf = _deq(x, x_scale, x_zero_point)
        ax = axis % x.ndim
        if coerce and ax != x.ndim - 1:
            y = _softmax(xf.reshape(math.prod(x.shape[:ax]), -1), 1, False).reshape(x.shape)
        else:
            y = _softmax(xf, ax, False)
        return _req(np.asarray(y, _F32), y_scale, y_zero_point, _out_type(y_zero_point, x))

    return kernel


@op("QLinearWhere", since=1, domain=MS)
def make_qlinear_where(node: NodeView, ctx: ProviderContext):
    """com.microsoft QLinearWhere (condition, X, x_scale, x_zero_point, Y, y_scale,
    y_zero_point, z_scale, z_zero_point): X and Y requantized to Z's scale, then selected."""

    def kernel(cond, x, x_scale, x_zero_point, y, y_scale, y_zero_point, z_scale,
               z_zero_point):
        out = _out_type(z_zero_point, x)
        xz = _req(_deq(x, x_scale, x_zero_point), z_scale, z_zero_point, out)
        yz = _req(_deq(y, y_scale, y_zero_point), z_scale, z_zero_point, out)
        return np.where(cond, xz, yz)

    return kernel


@op("QLinearGlobalAveragePool", since=1, domain=MS, dtypes={0: _Q8})
def make_qlinear_global_average_pool(node: NodeView, ctx: ProviderContext):
    """com.microsoft QLinearGlobalAveragePool: the mean over spatial axes, requantized
    (``channels_last`` 0: NCHW..., 1: NHWC...)."""
    channels_last = int(node.attr("channels_last", 0)) == 1
    pool = getattr(native(), "qlinear_global_average_pool_8bit", None)
    threads = _native.threads(ctx.intra_op_num_threads)

    def kernel(x, x_scale, x_zero_point, y_scale, y_zero_point=None):
        n, c = x.shape[0], x.shape[-1] if channels_last else x.shape[1]
        count = x.size // max(n * c, 1)
        out = np.dtype(y_zero_point.dtype if y_zero_point is not None else x.dtype)
        if (pool is not None and channels_last and 0 < count < (1 << 23) and out in _Q8DT
                and np.size(x_scale) == np.size(y_scale) == 1
                and all(z is None or np.size(z) == 1 for z in (x_zero_point, y_zero_point))):
            # one native call: the sums and the op's float32 steps (a squeeze-excite block's
            # pooling was ~30 us of numpy calls around ~10 us of work)
            y = pool(np.ascontiguousarray(x).reshape(n, count, c),
                     float(0 if x_zero_point is None else x_zero_point),
                     float(np.asarray(x_scale, _F32)), float(np.asarray(y_scale, _F32)),
                     float(0 if y_zero_point is None else y_zero_point), out == np.int8,
                     threads)
            return y.reshape((n,) + (1,) * (x.ndim - 2) + (c,))
        # the exact integer sums (np.mean's float64 sums of bytes are these; int32 holds
        # them below 2^23 positions), over the count
        wide = np.int32 if count < (1 << 23) else np.int64
        if channels_last:
            sums = np.add.reduce(x.reshape(n, count, c), axis=1, dtype=wide)
            shape = (n,) + (1,) * (x.ndim - 2) + (c,)
        else:
            sums = np.add.reduce(x.reshape(n, c, count), axis=2, dtype=wide)
            shape = (n, c) + (1,) * (x.ndim - 2)
        mean = (sums / np.float64(count) if count else np.full(sums.shape, np.nan)
                ).reshape(shape)
        yf = mean.astype(_F32)
        if x_zero_point is not None:
            yf -= np.asarray(x_zero_point, _F32)
        yf *= np.asarray(x_scale, _F32)
        return _req(yf, y_scale, y_zero_point, out)

    return kernel


@op("CDist", since=1, domain=MS, dtypes={0: {TP.FLOAT, TP.DOUBLE}})
def make_cdist(node: NodeView, ctx: ProviderContext):
    """CDist: the [M, N] distances between the rows of A [M, K] and B [N, K], ``metric``
    ``sqeuclidean`` (the default) or ``euclidean``. Each is the differences squared and summed
    in feature order, as the Sub and ReduceSumSquare it replaces compute it (see the optimizer's
    pairwise-distance fusion), natively over threads; numpy where the native module is not
    built. Also ``minkowski`` with the attribute ``p`` (default 2) and ``cityblock`` /
    ``manhattan``, which skl2onnx writes for a k-NN or LOF model with ``p != 2``
    (onnxruntime's CDist has only the first two and refuses ``p``): in float64, rows at a time,
    cast to A's type."""
    metric = node.attr("metric", "sqeuclidean")
    metric = metric.decode() if isinstance(metric, bytes) else str(metric)
    if metric in ("minkowski", "cityblock", "manhattan"):
        p = 1.0 if metric != "minkowski" else float(node.attr("p", 2.0))
        if not p > 0:
            raise ValueError(f"CDist: minkowski p must be positive, got {p}")
        return functools.partial(_minkowski, p=p)
    if metric not in ("sqeuclidean", "euclidean"):
        raise ValueError(f"CDist: metric {metric!r} is not supported (sqeuclidean, euclidean, "
                         "minkowski, cityblock)")
    root = metric == "euclidean"
    cdist = getattr(native(), "cdist", None)
    threads = _native.threads(ctx.intra_op_num_threads)

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
            raise ValueError(f"CDist: A and B must be matrices with as many columns, got "
                             f"shapes {list(a.shape)} and {list(b.shape)}")
        if cdist is not None and a.dtype == b.dtype:
            y = cdist(a, b, root, threads)   # (None: a dtype it does not take)
            if y is not None:
                return y
        d = a[:, None, :] - b[None, :, :]
        y = np.einsum("ijk,ijk->ij", d, d)
        return np.sqrt(y) if root else y

    return kernel


def _minkowski(a: np.ndarray, b: np.ndarray, p: float) -> np.ndarray:
    """``(sum |a_i - b_j| ** p) ** (1 / p)`` for every pair of rows."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"CDist: A and B must be matrices with as many columns, got shapes "
                         f"{list(a.shape)} and {list(b.shape)}")
    out = np.empty((a.shape[0], b.shape[0]), dtype=a.dtype)
    bd = b.astype(np.float64)
    rows = max(1, (1 << 21) // max(1, b.size))   # (a [rows, N, K] block of differences)
    for i in range(0, a.shape[0], rows):
        d = np.abs(a[i:i + rows, None, :].astype(np.float64) - bd[None])
        if p == 1.0:
            out[i:i + rows] = d.sum(axis=2)
        else:
            out[i:i + rows] = (d ** p).sum(axis=2) ** (1.0 / p)
    return out


@op("SparseToDenseMatMul", since=1, domain=MS)
def make_sparse_to_dense_matmul(node: NodeView, ctx: ProviderContext):
    """com.microsoft SparseToDenseMatMul: ``alpha * op(A) @ op(B)``, A a sparse tensor (COO or
    CSR, 2-D), B dense; each stored value of A adds its row of B (O(nnz * N), A is never made
    dense)."""
    alpha = float(node.attr("alpha", 1.0))
    trans_a, trans_b = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))

    def kernel(a, b):
        if not hasattr(a, "dense_shape") or not hasattr(a, "format"):
            raise ValueError(f"SparseToDenseMatMul: A must be a sparse tensor, got "
                             f"{type(a).__name__}")
        shape = a.dense_shape()
        if len(shape) != 2 or np.ndim(b) != 2:
            raise ValueError(f"SparseToDenseMatMul: A {shape} and B {list(np.shape(b))} must "
                             "be 2-D")
        rows, cols = _sparse_coordinates(a)
        m, k = shape
        if trans_a:
            rows, cols, m, k = cols, rows, k, m
        bm = b.T if trans_b else b
        if bm.shape[0] != k:
            raise ValueError(f"SparseToDenseMatMul: op(A) is [{m}, {k}], op(B) is "
                             f"{list(bm.shape)}")
        values = np.asarray(a.values())
        y = np.zeros((m, bm.shape[1]), dtype=np.result_type(values.dtype, bm.dtype))
        np.add.at(y, rows, values[:, None] * bm[cols])
        if alpha != 1.0:
            y *= y.dtype.type(alpha)
        return y

    return kernel


def _sparse_coordinates(a) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of each stored value of a 2-D COO or CSR sparse tensor."""
    fmt = int(a.format())
    k = a.dense_shape()[1]
    if fmt == 1:   # COO: linear indices or [NNZ, 2] coordinates
        idx = np.asarray(a.as_coo_view().indices())
        return (idx // k, idx % k) if idx.ndim == 1 else (idx[:, 0], idx[:, 1])
    if fmt == 2:   # CSR(C)
        view = a.as_csrc_view()
        outer = np.asarray(view.outer())
        return np.repeat(np.arange(outer.size - 1), np.diff(outer)), np.asarray(view.inner())
    raise ValueError("SparseToDenseMatMul: A must be COO or CSR")


# --------------------------------------------------------------------------------------------
# MurmurHash3 (what skl2onnx's FeatureHasher conversion hashes its strings with)
# --------------------------------------------------------------------------------------------

_M1, _M2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl32(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _murmur_blocks(h: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """MurmurHash3_x86_32's body over ``blocks`` (``[n, k]`` little-endian uint32 words),
    ``h`` the running ``[n]`` hashes (uint32 arithmetic wraps as the algorithm's)."""
    for j in range(blocks.shape[1]):
        k = _rotl32(blocks[:, j] * _M1, 15) * _M2
        h = _rotl32(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)
    return h


def _murmur_finish(h: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    h = h ^ np.asarray(length).astype(np.uint32)
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h


def _murmur_bytes(data: bytes, seed: int) -> int:
    """MurmurHash3_x86_32 of one byte string."""
    n = len(data)
    whole = n // 4 * 4
    with np.errstate(over="ignore"):
        h = np.array([seed], np.uint32)
        if whole:
            h = _murmur_blocks(h, np.frombuffer(data[:whole], "<u4").reshape(1, -1))
        if n & 3:
            k = np.array([int.from_bytes(data[whole:], "little")], np.uint32)
            h ^= _rotl32(k * _M1, 15) * _M2
        return int(_murmur_finish(h, n)[0])


@op("MurmurHash3", since=1, domain=MS, dtypes={"T1": {TP.INT32, TP.UINT32, TP.INT64,
                                                        TP.UINT64, TP.FLOAT, TP.DOUBLE,
                                                        TP.STRING}})
def make_murmur_hash3(node: NodeView, ctx: ProviderContext):
    """com.microsoft MurmurHash3: MurmurHash3_x86_32 of each element (a number's 4 or 8 bytes
    as stored, a string's UTF-8 bytes) with ``seed``; uint32 with ``positive`` (the default),
    else the same bits as int32. Numbers are hashed all at once in uint32 arithmetic."""
    seed = int(node.attr("seed", 0)) & 0xFFFFFFFF
    out_dtype = np.uint32 if int(node.attr("positive", 1)) else np.int32

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.dtype.kind in "OUS":
            flat = [_murmur_bytes(v.encode("utf-8") if isinstance(v, str) else bytes(v), seed)
                    for v in x.reshape(-1).tolist()]
            h = np.array(flat, np.uint32).reshape(x.shape)
        else:
            words = np.ascontiguousarray(x).reshape(-1).view("<u4")
            width = x.dtype.itemsize // 4
            with np.errstate(over="ignore"):
                h = _murmur_blocks(np.full(x.size, seed, np.uint32), words.reshape(x.size, width))
                h = _murmur_finish(h, x.dtype.itemsize).reshape(x.shape)
        return h.view(out_dtype) if out_dtype is np.int32 else h

    return kernel
