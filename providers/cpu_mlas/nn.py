"""Convolution and pooling kernels for cpu_mlas: Conv, ConvTranspose, MaxPool, AveragePool,
GlobalAveragePool and GlobalMaxPool.

Conv picks one of five strategies per call:

* float32 2-D with group 1, when ``_mlas_native`` has its vector GEMM: the native GEMM with the
  weight packed once, reading im2col panels straight from the input (no column buffer), bias,
  the sum input Z and a Relu/Clip fused (:func:`_conv_native`);
* 1x1, stride 1, no padding: one batched matmul on the input as is (no copy);
* depthwise (group == C_in == C_out): float32 2-D on the native kernel when ``_mlas_native``
  is built (bias and Relu/Clip fused); else 2-D with narrow output rows as banded GEMMs per
  kernel row (see :func:`_depthwise_banded`); otherwise a multiply-add per kernel tap;
* stride 1 with many input channels per group: "shifted GEMMs", one BLAS matmul per kernel
  tap on a contiguous run of the padded input (no im2col buffer, see :class:`TapGrid`);
* otherwise: im2col through a strided window view and one batched matmul, batch-chunked to
  bound the column buffer.

Max and average pools are separable: they reduce one spatial axis at a time (``k_h + k_w``
strided ops instead of ``k_h * k_w``). Half-precision inputs are computed in float32 and cast
back.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np
from onnx import TensorProto as TP

from onnxplex import NodeView, ProviderContext

from ._blas import PackedWeight, intra_threads, matmul, pack_weight, parallel_for, split
from ._native import native, planned_step
from ._registry import op
from ._windows import TapGrid, auto_pads, ints, pad_constant, window_view

logger = logging.getLogger(__name__)

FLOATS = frozenset({TP.FLOAT16, TP.FLOAT, TP.DOUBLE, TP.BFLOAT16})
_LOW_PRECISION = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))

# Shifted GEMMs (stride 1 only) beat im2col when each per-tap GEMM has enough input channels,
# the output is no wider than the input (the per-tap accumulation costs output passes) and
# rows are wide enough that the garbage columns stay a small fraction.
_SHIFTED_MIN_CHANNELS = 32
_SHIFTED_MIN_WIDTH = 16
# im2col processes the batch in chunks whose column buffer stays under this many bytes.
_IM2COL_CHUNK_BYTES = 16 << 20
# Depthwise convolutions work on channel blocks of about this many bytes (cache-resident).
_DEPTHWISE_BLOCK_BYTES = 256 << 10
# im2col splits over output rows (each thread its own columns) from this many output positions
# per thread; below, the columns are built once and the GEMM is split over output channels.
_SPATIAL_SPLIT_MIN = 256
# Depthwise 2-D convolutions with output rows up to this wide run as banded GEMMs.
_BANDED_MAX_WIDTH = 32
_ALL = slice(None)


def compute_dtype(dt: np.dtype) -> np.dtype:
    """The dtype arithmetic runs in: float32 for float16/bfloat16, else ``dt`` itself."""
    return np.dtype(np.float32) if np.dtype(dt) in _LOW_PRECISION else np.dtype(dt)


def to_compute(a: np.ndarray) -> np.ndarray:
    """``a`` in its compute dtype (a copy only for float16/bfloat16)."""
    return a.astype(np.float32) if a.dtype in _LOW_PRECISION else a


def _bias_shape(m: int, nd: int) -> tuple[int, ...]:
    return (1, m) + (1,) * nd


# --------------------------------------------------------------------------------------------
# Conv
# --------------------------------------------------------------------------------------------


def _conv_geometry(node: NodeView, x_shape: tuple[int, ...], kshape: Sequence[int]):
    nd = len(kshape)
    strides = ints(node.attr("strides"), nd, 1)
    dil = ints(node.attr("dilations"), nd, 1)
    in_sp = x_shape[2:]
    k_eff = [(k - 1) * d + 1 for k, d in zip(kshape, dil)]
    pb, pe = auto_pads(node.attr("auto_pad", "NOTSET"), in_sp, k_eff, strides, node.attr("pads"))
    if min(strides, default=1) < 1 or min(dil, default=1) < 1 or min(kshape, default=1) < 1:
        raise ValueError(f"{_op_name(node)}: strides {strides}, dilations {dil} and kernel "
                         f"{list(kshape)} must be positive")
    if min(pb, default=0) < 0 or min(pe, default=0) < 0:
        raise ValueError(f"{_op_name(node)}: pads {list(pb) + list(pe)} must not be negative")
    out_sp = [(n + b + e - k) // s + 1 for n, b, e, k, s in zip(in_sp, pb, pe, k_eff, strides)]
    if min(out_sp, default=1) < 1:
        raise ValueError(f"{_op_name(node)}: the kernel {list(kshape)} (dilated {k_eff}) is larger "
                         f"than the padded input {[n + b + e for n, b, e in zip(in_sp, pb, pe)]}")
    return strides, dil, pb, pe, out_sp


def _op_name(node: Any) -> str:
    """The op of a conv's node (a NodeView, or another provider's attribute record)."""
    return getattr(node, "op_type", "Conv")


def _check_channels(op: str, c: int, cw: _ConvWeights) -> None:
    """A conv's input channels against its weight: ``C == C/G * G`` and ``G`` dividing ``M``
    (numpy's reshape error said nothing of either)."""
    if c != cw.cg * cw.group or cw.m % cw.group:
        raise ValueError(f"{op}: the input has {c} channels; the weight [{cw.m}, {cw.cg}, ...] "
                         f"with group {cw.group} needs {cw.cg * cw.group} (and its {cw.m} output "
                         f"channels a multiple of {cw.group})")


class _ConvWeights:
    """A Conv weight ``[M, C/G, *k]`` in the layouts the strategies use, in the compute dtype.

    ``mat`` and ``taps`` are views of the weight; ``tap_mats`` (a transposed copy) is built
    on first use and then kept (a benign race if two threads build it at once).
    """

    def __init__(self, w: np.ndarray, group: int) -> None:
        w = np.ascontiguousarray(to_compute(np.asarray(w)))
        self.m, self.cg = w.shape[:2]
        self.kshape = tuple(w.shape[2:])
        self.group = group
        self._w = w
        self.mat = w.reshape(group, self.m // group, -1)  # im2col: [G, M/G, C/G * K]
        self.taps = w.reshape(self.m, -1)  # depthwise: [C, K]
        self._banded: dict[tuple[int, ...], np.ndarray] = {}
        # channels-last: per (input shape, with Z), the native call with everything but the
        # arrays bound (_conv_nhwc; here, not on the node: a weight that is an input gets new
        # _ConvWeights each call, and no plan of a past call's weight)
        self.nhwc_plans: dict[tuple, Callable[..., np.ndarray]] = {}

    @functools.cached_property
    def tap_mats(self) -> np.ndarray:
        """Shifted GEMMs: ``[K, G, M/G, C/G]``, one weight matrix per kernel tap."""
        g, mg = self.group, self.m // self.group
        return np.ascontiguousarray(
            self._w.reshape(g, mg, self.cg, -1).transpose(3, 0, 1, 2))

    @functools.cached_property
    def gemm_weight(self) -> PackedWeight | None:
        """Group 1, float32: ``W [M, C * K]`` packed once for the native GEMM (else None)."""
        if self.group != 1 or self._w.dtype != np.float32:
            return None
        return pack_weight(self.mat[0], left=True)

    @functools.cached_property
    def gemm_weight_t(self) -> PackedWeight | None:
        """Group 1, float32: ``W^T [C * K, M]`` packed as the GEMM's right operand, for the
        transposed orientation (``out^T = col^T @ W^T``; :func:`_transposed_conv`)."""
        if self.group != 1 or self._w.dtype != np.float32:
            return None
        return pack_weight(self.mat[0].T)

    @functools.cached_property
    def nhwc_weight(self) -> PackedWeight | None:
        """Group 1, float32, 2-D: ``W^T`` with its rows in (kernel row, kernel column, channel)
        order, ``[k_h * k_w * C, M]``, packed as the GEMM's right operand: the channels-last
        conv (:func:`_conv_nhwc`)."""
        if self.group != 1 or self._w.dtype != np.float32 or len(self.kshape) != 2:
            return None
        return pack_weight(self._w.transpose(2, 3, 1, 0).reshape(-1, self.m))

    def gemm_operand(self, positions: int) -> PackedWeight | None:
        """The packed weight for a group-1 conv with ``positions`` output positions per image:
        one orientation only is ever packed for a model of fixed shapes."""
        return self.gemm_weight_t if _transposed_conv(self.m, positions) else self.gemm_weight

    @property
    def depthwise(self) -> bool:
        return self.group == self.m and self.cg == 1

    def banded(self, w_in: int, wo: int, stride: int, dil: int, pad: int) -> np.ndarray:
        """Depthwise 2-D: ``[k_h, C, w_in, wo]``, per kernel row and channel the matrix taking
        an unpadded input row to an output row (taps in the padding left out); cached per
        geometry (a benign race if two threads build it at once)."""
        key = (w_in, wo, stride, dil, pad)
        mats = self._banded.get(key)
        if mats is None:
            kh, kw = self.kshape
            taps = self._w.reshape(self.m, kh, kw)
            mats = np.zeros((kh, self.m, w_in, wo), dtype=self._w.dtype)
            cols = np.arange(wo)
            for tw in range(kw):
                src = cols * stride + tw * dil - pad
                ok = (src >= 0) & (src < w_in)
                mats[:, :, src[ok], cols[ok]] = taps[:, :, tw].T[:, :, None]
            self._banded[key] = mats
        return mats


# The native GEMM's column panels are 32 floats wide (sgemm.h's kSgemmNr); row panels that
# end part full cost far less (the kernels have variants for 1-11 rows).
_GEMM_PANEL_COLS = 32
# Above this many output positions the transposed orientation stopped paying (measured on
# MobileNetV2's and ResNet-50's convs: at 14 x 14, 196 positions, it won at one thread and lost
# at two, its col^T copy and transposes being single-threaded); 7 x 7 planes gain 10-30%.
_TRANSPOSED_MAX_POSITIONS = 100


@functools.lru_cache(maxsize=256)
def _transposed_conv(m: int, positions: int) -> bool:
    """Whether a group-1 conv with ``m`` output channels and ``positions`` output positions
    runs as ``out^T = col^T @ W^T`` (Cout along the GEMM's column panels) rather than
    ``W @ col`` (positions along them): on small planes, when Cout fills the panels better by
    5% or more, as on the 7 x 7 planes of a CNN's last stage (49 positions fill 49 of 64
    columns; 512 channels fill all)."""
    if positions > _TRANSPOSED_MAX_POSITIONS or m == 0 or positions == 0:
        return False
    def fill(n: int) -> float:
        return n / (-(-n // _GEMM_PANEL_COLS) * _GEMM_PANEL_COLS)
    return fill(m) >= 1.05 * fill(positions)


class _Epilogue:
    """Bias, then the sum input Z, then an in-place activation, on slices of the ``[N, M, L]``
    output: run on each chunk right after it is computed, while it is in cache. Float32 with
    no activation or a clamp one (``clamp``: Relu, Clip) runs as one pass of the native
    ``bias_act_f32`` when ``_mlas_native`` is built; otherwise as numpy ufuncs."""

    def __init__(self, bias: np.ndarray | None, z: np.ndarray | None,
                 act: Callable[[np.ndarray], object] | None,
                 clamp: tuple[float, float] | None = None) -> None:
        self.bias = None if bias is None else bias.reshape(-1, 1)
        self.z = z
        self.act = act
        self._fn = None
        nat = native()
        if (nat is not None and hasattr(nat, "bias_act_f32") and (act is None or clamp)
                and (bias is None or bias.dtype == np.float32)
                and (z is None or z.dtype == np.float32)):
            self._fn = nat.bias_act_f32
            self._bias1 = None if bias is None else np.ascontiguousarray(bias).reshape(-1)
            self._lo, self._hi = clamp if act is not None else (-math.inf, math.inf)

    def __bool__(self) -> bool:
        return self.bias is not None or self.z is not None or self.act is not None

    def __call__(self, y3: np.ndarray, ch: slice = _ALL, cols: slice = _ALL) -> None:
        if self._fn is not None and y3.dtype == np.float32:
            self._fn(y3, None if self._bias1 is None else self._bias1[ch],
                     None if self.z is None else self.z[:, ch, cols], self._lo, self._hi)
            return
        if self.bias is not None:
            y3 += self.bias[ch]
        if self.z is not None:
            y3 += self.z[:, ch, cols]
        if self.act is not None:
            self.act(y3)


class ConvStatic:
    """What a conv kernel derives from its node once, not per run (~20 us of attribute
    reading a call): the clamp of a fused activation, the native kernels' code of one they
    apply after it (``post_act``: 0 none, 1 Swish, 2 HardSwish, 3 HardSigmoid) and, per input
    shape, the geometry."""

    def __init__(self, node: NodeView) -> None:
        self.node = node
        self.clamp = _clamp(node)
        self.post_act = _post_act(node)
        self._geometry: dict[tuple, tuple] = {}

    def geometry(self, x_shape: tuple[int, ...], kshape: Sequence[int]) -> tuple:
        key = (x_shape, tuple(kshape))
        geo = self._geometry.get(key)
        if geo is None:
            if len(self._geometry) >= 64:   # many input shapes: keep the cache bounded
                self._geometry.clear()
            geo = self._geometry[key] = _conv_geometry(self.node, x_shape, kshape)
        return geo


def _conv(x: np.ndarray, cw: _ConvWeights, static: ConvStatic, bias: np.ndarray | None,
          z: np.ndarray | None = None,
          act: Callable[[np.ndarray], object] | None = None) -> np.ndarray:
    """``act(conv(x) + bias + z)``; ``act`` works in place on the (float32) views it gets."""
    out_dtype = x.dtype
    x = to_compute(x)
    n, c = x.shape[:2]
    g, kshape = cw.group, cw.kshape
    _check_channels(_op_name(static.node), c, cw)
    strides, dil, pb, pe, out_sp = static.geometry(x.shape, kshape)
    clamp = static.clamp if act is not None else None
    out_shape = (n, cw.m) + tuple(out_sp)
    length = math.prod(out_sp)
    z3 = None
    if z is not None and z.shape == out_shape:
        z3 = to_compute(z).reshape(n, cw.m, length)
        z = None
    native_2d = len(kshape) == 2 and x.dtype == np.float32
    if native_2d and g == 1 and (gw := cw.gemm_operand(length)) is not None:
        y = _conv_native(np.ascontiguousarray(x), gw, kshape, strides, dil, pb, out_sp, bias,
                         z3, act, clamp)
        return _conv_finish(y, out_shape, z, bias, cw, kshape, act, out_dtype)
    if (len(kshape) == 3 and x.dtype == np.float32 and g == 1 and native() is not None
            and (gw := cw.gemm_operand(math.prod(out_sp[1:]))) is not None):
        y = _conv3d_native(x, gw, kshape, strides, dil, pb, out_sp, bias, z3, act, clamp)
        return _conv_finish(y, out_shape, z, bias, cw, kshape, act, out_dtype)
    if (len(kshape) == 1 and x.dtype == np.float32 and g == 1 and native() is not None
            and (gw := cw.gemm_operand(out_sp[0])) is not None):
        # 1-D (speech front ends, wav2vec2's and Whisper's): the 2-D conv of a one-row image
        # with a 1 x k kernel, whose packed weight [M, C * k] is the same matrix
        y = _conv_native(np.ascontiguousarray(x).reshape(n, c, 1, x.shape[2]), gw,
                         (1, kshape[0]), (1, strides[0]), (1, dil[0]), (0, pb[0]),
                         (1, out_sp[0]), bias, z3, act, clamp)
        return _conv_finish(y, out_shape, z, bias, cw, kshape, act, out_dtype)
    if (native_2d and cw.depthwise and c == g and (nat := native()) is not None
            and hasattr(nat, "dwconv_f32")):
        y = _depthwise_native(nat.dwconv_f32, np.ascontiguousarray(x), cw, pb, dil, strides,
                              out_sp, bias, z3, act, clamp)
        return _conv_finish(y, out_shape, z, bias, cw, kshape, act, out_dtype)
    ep = _Epilogue(bias, z3, act, clamp)
    pointwise = all(k == 1 for k in kshape) and all(s == 1 for s in strides)
    if pointwise and not any(pb) and not any(pe):
        y = _pointwise(x.reshape(n, g, c // g, -1), cw, ep)
    elif cw.depthwise and c == g and len(kshape) == 2 and out_sp[1] <= _BANDED_MAX_WIDTH:
        y = _depthwise_banded(x, cw, pb, dil, strides, out_sp, ep)
    elif cw.depthwise and c == g:
        y = _depthwise(TapGrid(x, pb, pe, kshape, dil, strides, out_sp), cw, ep)
    elif (all(s == 1 for s in strides) and cw.cg >= _SHIFTED_MIN_CHANNELS
          and cw.m // g <= cw.cg and out_sp[-1] >= _SHIFTED_MIN_WIDTH):
        y = _shifted_gemms(TapGrid(x, pb, pe, kshape, dil, strides, out_sp), cw, ep)
    else:
        y = _im2col(pad_constant(x, pb, pe), cw, dil, strides, out_sp, ep)
    return _conv_finish(y, out_shape, z, bias, cw, kshape, act, out_dtype)


def _conv_nhwc(x: np.ndarray, cw: _ConvWeights, static: ConvStatic, bias: np.ndarray | None,
               z: np.ndarray | None = None,
               act: Callable[[np.ndarray], object] | None = None,
               scale: np.ndarray | None = None) -> np.ndarray:
    """Channels-last ``act(conv(x) + bias + z)``: x, z and the result ``[N, *spatial, C]``
    (com.microsoft NhwcFusedConv). Float32 2-D group-1, depthwise and grouped (a multiple of 4
    output channels a group) convs run on the native channels-last kernels, with the bias, a
    same-shape Z and a Relu/Clip (and a Swish or HardSwish, on each finished block of output)
    fused; any other conv through the NCHW kernels between two transposes (the depthwise
    kernel adds Z and a non-clamp activation after it). The native call is planned once per input
    shape: in a model, each conv's Python costs several times what it does in a loop of its own
    (its code and data are out of cache after the kernels between two calls). ``scale``
    (``[N or 1, 1, 1, C]``, float32): x read times it (a squeeze-excite gate's Mul fused into a
    1x1 conv: the native GEMM scales x's rows as it copies them; else x * scale first)."""
    key = (x.shape, z is None, scale is None)
    plan = cw.nhwc_plans.get(key)
    if (plan is not None and x.dtype == np.float32 and x.flags.c_contiguous
            and (z is None or z.shape == plan.out_shape)
            and (scale is None or (scale.dtype == np.float32 and scale.flags.c_contiguous))):
        return plan(x, bias, z, scale)
    n, c = x.shape[0], x.shape[-1]
    kshape = cw.kshape
    _check_channels(_op_name(static.node), c, cw)
    strides, dil, pb, _, out_sp = static.geometry((n, c, *x.shape[1:-1]), kshape)
    out_shape = (n, *out_sp, cw.m)
    nat = native() if len(kshape) == 2 and x.dtype == np.float32 else None
    scaled = scale is not None and scale.dtype == np.float32 and scale.ndim == 4 and \
        scale.shape[0] in (1, n) and scale.shape[1:] == (1, 1, c)
    if nat is not None and (z is None or z.shape == out_shape) and (scale is None or scaled):
        plan = _nhwc_plan(nat, cw, static, c, kshape, strides, dil, pb, out_shape,
                          z is not None, act, scale is not None)
        if plan is not None:
            if len(cw.nhwc_plans) >= 64:   # many input shapes: keep the cache bounded
                cw.nhwc_plans.clear()
            cw.nhwc_plans[key] = plan
            return plan(np.ascontiguousarray(x), bias, z,
                        None if scale is None else np.ascontiguousarray(scale))
    if scale is not None:
        x = x * scale
    last = x.ndim - 1
    zc = None if z is None else (np.ascontiguousarray(np.moveaxis(z, -1, 1))
                                 if z.ndim == x.ndim else z)
    y = _conv(np.moveaxis(x, last, 1), cw, static, bias, zc, act)
    return np.ascontiguousarray(np.moveaxis(y, 1, last))


def _shaped(shape: tuple[int, ...]) -> np.ndarray:
    """An array of ``shape`` for a native plan to read the shape of, dropped right after (kept
    by a plan, one per conv held ~25 MB of ResNet-50's heap and showed in its peak RSS)."""
    return np.empty(shape, dtype=np.float32)


def _nhwc_plan(nat: Any, cw: _ConvWeights, static: ConvStatic, c: int, kshape: Sequence[int],
               strides: Sequence[int], dil: Sequence[int], pb: Sequence[int],
               out_shape: tuple[int, ...], with_z: bool,
               act: Callable[[np.ndarray], object] | None,
               with_scale: bool = False) -> Callable[..., np.ndarray] | None:
    """The native channels-last call for one input shape, or None when no native kernel runs
    this conv (with an input scale: a group-1 1x1 stride-1 unpadded conv only). Its weights,
    geometry, bias and clamp are bound in a native plan (a call then converts three arguments
    instead of a dozen: 2.2 -> 1.6 us for a small conv's call)."""
    if with_scale and (cw.group != 1 or tuple(kshape) != (1, 1) or any(s != 1 for s in strides)
                       or any(pb) or not hasattr(nat, "conv2d_nhwc_f32_plan")):
        return None
    clamp = static.clamp if act is not None else None
    code = static.post_act if act is not None else 0   # (in the kernel: see _post_act)
    lo, hi = clamp if clamp is not None else (-math.inf, math.inf)
    k, st, dl, pads = tuple(kshape), tuple(strides), tuple(dil), (pb[0], pb[1])
    # The native call itself is planned too (nat.*_plan: weights, geometry, bias and clamp
    # bound in C++; a call passes x, z and the threads), for the bias it was planned with: a
    # bias that is an input, another array each call, plans again.
    # (bias, native plan), swapped as one tuple: concurrent runs of a session with a bias
    # input each use a plan made for their own bias
    bound: list = [None]
    post = act if act is not None and clamp is None and not code else None
    make: Callable[[np.ndarray, np.ndarray | None], Any] | None = None
    if cw.group == 1 and hasattr(nat, "conv2d_nhwc_f32_plan"):
        packed = cw.nhwc_weight.packed

        def make(x: np.ndarray, bias: np.ndarray | None) -> Any:
            return nat.conv2d_nhwc_f32_plan(x, packed, _shaped(out_shape), k, st, dl, pads,
                                            bias, lo, hi, "", with_z, code, with_scale)
    elif cw.depthwise and c == cw.group and hasattr(nat, "dwconv_nhwc_f32_plan"):
        w3 = np.ascontiguousarray(cw.taps.reshape(c, *kshape))
        fused = not with_z and (act is None or clamp is not None or code)
        if not fused:
            lo, hi, code = -math.inf, math.inf, 0

        def plan(x: np.ndarray, bias: np.ndarray | None, z: np.ndarray | None,
                 s: None = None) -> np.ndarray:
            cur = bound[0]
            if cur is None or cur[0] is not bias:
                cur = bound[0] = (bias, nat.dwconv_nhwc_f32_plan(
                    x, w3, bias, _shaped(out_shape), st, dl, pads, lo, hi, code))
            y = cur[1](x, None, intra_threads())
            if not fused:
                if z is not None:
                    y += z
                if act is not None:
                    act(y)
            return y
    elif (cw.group > 1 and (cw.m // cw.group) % 4 == 0 and len(kshape) == 2
          and hasattr(nat, "gconv_nhwc_f32_plan")):
        # grouped (RegNet's, ResNeXt's 3x3 convs): vectors across each group's output channels
        w4 = cw._w

        def make(x: np.ndarray, bias: np.ndarray | None) -> Any:
            return nat.gconv_nhwc_f32_plan(x, w4, bias, _shaped(out_shape), cw.group, st, dl,
                                           pads, lo, hi, code, with_z)
    else:
        return None
    if make is not None:   # group 1 and grouped: Z and the activation in the native call

        def plan(x: np.ndarray, bias: np.ndarray | None, z: np.ndarray | None,
                 s: np.ndarray | None = None) -> np.ndarray:
            cur = bound[0]
            if cur is None or cur[0] is not bias:
                cur = bound[0] = (bias, make(x, bias))
            y = cur[1](x, None if z is None else np.ascontiguousarray(z, dtype=np.float32),
                       intra_threads(), s)
            if post is not None:
                post(y)
            return y
    complete = (post is None) if make is not None else fused

    def native_for(bias: np.ndarray | None) -> Any:
        """The native plan a call with ``bias`` ran, when its result is the whole output
        (no activation or Z added after it in Python), else None: what a
        :class:`_mlas_native.PlannedStep` may run without this function."""
        cur = bound[0]
        if not complete or cur is None or cur[0] is not bias:
            return None
        return cur[1]

    plan.out_shape = out_shape
    plan.native_for = native_for
    return plan


def _conv_finish(y: np.ndarray, out_shape: tuple[int, ...], z: np.ndarray | None,
                 bias: np.ndarray | None, cw: _ConvWeights, kshape: Sequence[int],
                 act: Callable[[np.ndarray], object] | None, out_dtype: np.dtype) -> np.ndarray:
    """``y`` in the output shape and dtype; a Z that broadcasts (not fused: the slow, general
    path) added with the bias, then the activation."""
    y = y.reshape(out_shape)
    if z is not None:
        if bias is not None:
            y += bias.reshape(_bias_shape(cw.m, len(kshape)))
        y += z
        if act is not None:
            act(y)
    return y if y.dtype == out_dtype else y.astype(out_dtype)


def _pointwise(x4: np.ndarray, cw: _ConvWeights, ep: _Epilogue) -> np.ndarray:
    """1x1 stride 1 unpadded: ``W [G, M/G, C/G] @ x [N, G, C/G, L]``, split over threads."""
    n, g, _, length = x4.shape
    y = np.empty((n, g, cw.m // g, length), dtype=x4.dtype)
    if g == 1:
        matmul(cw.mat, x4, out=y, epilogue=(lambda o, r, c: ep(o[:, 0], r, c)) if ep else None)
    else:
        matmul(cw.mat, x4, out=y)
        if ep:
            ep(y.reshape(n, cw.m, length))
    return y


def _im2col(xp: np.ndarray, cw: _ConvWeights, dil: Sequence[int], strides: Sequence[int],
            out_sp: Sequence[int], ep: _Epilogue) -> np.ndarray:
    """Column buffers built per chunk of output rows (first spatial axis), each followed by
    its GEMM and epilogue; few, short rows (deep layers) instead build all columns once and
    split the GEMM over output channels."""
    n, g = xp.shape[0], cw.group
    mg, ck = cw.m // g, cw.mat.shape[2]
    length = math.prod(out_sp)
    rest = length // max(out_sp[0], 1)
    windows = window_view(xp, cw.kshape, dil, strides, out_sp)
    y = np.empty((n, g, mg, length), dtype=xp.dtype)
    y3 = y.reshape(n, cw.m, length)
    row_bytes = n * g * ck * rest * xp.itemsize
    work = float(n) * cw.m * ck * length
    threads = intra_threads()
    if length < _SPATIAL_SPLIT_MIN * threads and n * g * ck * length * xp.itemsize \
            <= _IM2COL_CHUNK_BYTES:
        cols = windows.reshape(n, g, ck, length)
        if g == 1:
            matmul(cw.mat, cols, out=y,
                   epilogue=(lambda o, r, c: ep(o[:, 0], r, c)) if ep else None)
        else:
            matmul(cw.mat, cols, out=y)
            if ep:
                ep(y3)
        return y
    ranges = split(out_sp[0], work)
    tail = (_ALL,) * (len(out_sp) - 1)
    most = max(1, _IM2COL_CHUNK_BYTES // max(row_bytes, 1))
    ranges = [(b2, min(e, b2 + most)) for b, e in ranges for b2 in range(b, e, most)]

    def chunk(i: int) -> None:
        r0, r1 = ranges[i]
        cols = windows[(Ellipsis, slice(r0, r1)) + tail].reshape(n, g, ck, -1)
        c = slice(r0 * rest, r1 * rest)
        np.matmul(cw.mat, cols, out=y[..., c])
        if ep:
            ep(y3[..., c], _ALL, c)

    parallel_for(len(ranges), chunk)
    return y


def _shifted_gemms(grid: TapGrid, cw: _ConvWeights, ep: _Epilogue) -> np.ndarray:
    """``y = sum over taps of W_tap @ run(tap)``: BLAS on contiguous runs, no im2col; output
    channels (or, grouped, the groups) split over threads."""
    runs = [grid.run(tap) for tap in grid.taps()]
    n, _, length = runs[0].shape
    g, mg = cw.group, cw.m // cw.group
    vs = [r.reshape(n, g, cw.cg, length) for r in runs]
    y = np.empty((n, g, mg, length), dtype=runs[0].dtype)
    late = ep.z is not None or g > 1
    work = float(n) * cw.m * cw.cg * len(runs) * length
    # g > 1: groups over the threads, each doing every tap's product for its groups (a split
    # of each group's output channels ran every tap's small products on both threads at
    # once, each waiting on the other: wav2vec2's positional conv, 16 groups of 48 and 128
    # taps, 4.3 ms on one thread, 7.3 on two, 4.9 so); else output channels
    ranges = split(g, work, 1) if g > 1 else split(mg, work, 16)

    def chunk(i: int) -> None:
        r = slice(*ranges[i])
        yr = y[:, r] if g > 1 else y[:, :, r]
        tmp = np.empty_like(yr)
        for t, v in enumerate(vs):
            w, vr = (cw.tap_mats[t][r], v[:, r]) if g > 1 else (cw.tap_mats[t][:, r], v)
            if t == 0:
                np.matmul(w, vr, out=yr)
            else:
                np.matmul(w, vr, out=tmp)
                yr += tmp
        if ep and not late:  # garbage columns get the epilogue too; crop drops them
            ep(yr[:, 0], r)

    parallel_for(len(ranges), chunk)
    y = grid.crop(y.reshape(n, cw.m, -1))
    if ep and late:
        ep(y.reshape(n, cw.m, -1))
    return y


def _clamp(node: NodeView) -> tuple[float, float] | None:
    """A FusedConv activation that is a clamp (Relu, Clip) as ``(lo, hi)``, else None."""
    kind = node.attr("activation", "")
    kind = kind.decode() if isinstance(kind, bytes) else str(kind)
    if kind == "Relu":
        return 0.0, math.inf
    if kind == "Clip":
        params = list(node.attr("activation_params", None) or ())
        lo = params[0] if len(params) > 0 else -math.inf
        hi = params[1] if len(params) > 1 else math.inf
        return float(lo), float(hi)
    return None


_POST_ACTS = {"Swish": 1, "HardSwish": 2, "HardSigmoid": 3}   # sigmoid.h's PostAct codes
# HardSigmoid's alpha and beta the native kernels apply (PyTorch's Hardsigmoid, as exported)
_NATIVE_HARD_SIGMOID = (float(np.float32(1 / 6)), 0.5)


def _post_act(node: NodeView) -> int:
    """A FusedConv activation the native channels-last kernels apply on each finished block
    of their output (Swish, HardSwish, HardSigmoid with alpha 1/6 and beta 0.5: a
    squeeze-excite gate's, applied in numpy after the conv it cost ~15 us on a 1 x 1 x C
    output) as their ``act`` code, else 0."""
    kind = node.attr("activation", "")
    kind = kind.decode() if isinstance(kind, bytes) else str(kind)
    if kind == "HardSigmoid":
        params = tuple(float(np.float32(p)) for p in node.attr("activation_params", ()) or ())
        if params != _NATIVE_HARD_SIGMOID:
            return 0
    return _POST_ACTS.get(kind, 0)


def _conv_native(x: np.ndarray, gw: PackedWeight, kshape: Sequence[int],
                 strides: Sequence[int], dil: Sequence[int], pb: Sequence[int],
                 out_sp: Sequence[int], bias: np.ndarray | None, z3: np.ndarray | None,
                 act: Callable[[np.ndarray], object] | None,
                 clamp: tuple[float, float] | None, out: np.ndarray | None = None,
                 threads: int | None = None) -> np.ndarray:
    """Float32 2-D group-1 conv on the native GEMM (``_mlas_native.conv2d_f32``), threaded
    inside: ``W [M, C * K]`` (packed) times the im2col panels it packs from ``x`` as it goes.
    Z, the bias and a clamp activation run in the GEMM's epilogue (Z read where the output's
    values would be: no copy), any other activation after it. ``out``: a C-contiguous
    ``[N, M, *out_sp]`` float32 array to write (else a new one); ``threads``: the native
    call's (else the session's)."""
    n, m = x.shape[0], (gw.shape[0] if gw.left else gw.shape[1])
    y = np.empty((n, m, *out_sp), dtype=np.float32) if out is None else out
    z = None if z3 is None else np.ascontiguousarray(z3, dtype=np.float32).reshape(y.shape)
    lo, hi = clamp if act is not None and clamp is not None else (-math.inf, math.inf)
    native().conv2d_f32(x, gw.packed, y, tuple(kshape), tuple(strides), tuple(dil),
                        (pb[0], pb[1]), bias=bias, lo=lo, hi=hi, z=z,
                        threads=intra_threads() if threads is None else threads)
    if act is not None and clamp is None:
        act(y)
    return y


def _conv3d_native(x: np.ndarray, gw: PackedWeight, kshape: Sequence[int],
                   strides: Sequence[int], dil: Sequence[int], pb: Sequence[int],
                   out_sp: Sequence[int], bias: np.ndarray | None, z3: np.ndarray | None,
                   act: Callable[[np.ndarray], object] | None,
                   clamp: tuple[float, float] | None) -> np.ndarray:
    """Float32 3-D group-1 conv as one native 2-D conv per output depth (a video model's
    Conv3d: the numpy strategies were 1.5x onnxruntime's time on ResNet-3D-18). The ``k_d``
    input depths an output depth reads, copied out as one image of ``C * k_d`` channels
    (channel ``c * k_d + t``: depth tap ``t`` of channel ``c``; zeros for taps in the depth
    padding), make that depth a 2-D conv whose weight ``[M, C * k_d * k_h * k_w]`` is the 3-D
    weight's own packed matrix, rows in the same order. Each depth's result is written into
    a depth-major buffer, transposed to ``[N, M, D, H, W]`` at the end (one copy, against the
    GEMM's ``k_d * k_h * k_w * C`` multiply-adds an output). With as many output depths as
    threads or more, the depths are shared out over the pool, each a one-thread call (the
    deep layers' small planes split badly inside one GEMM, and the copies run in parallel
    too); fewer depths, one after the other on every thread."""
    n, c, d_in = x.shape[:3]
    plane = x.shape[3:]
    kd, sd, dd, pd = kshape[0], strides[0], dil[0], pb[0]
    do = out_sp[0]
    m = gw.shape[0] if gw.left else gw.shape[1]
    buf = np.empty((do, n, m, *out_sp[1:]), dtype=np.float32)
    z4 = None if z3 is None else z3.reshape(n, m, do, -1)
    threads = intra_threads()
    shared = threads > 1 and do >= threads

    def one_depth(d: int) -> None:
        first = d * sd - pd
        last = first + (kd - 1) * dd
        if first >= 0 and last < d_in:
            taps = np.ascontiguousarray(x[:, :, first:last + 1:dd])
        else:
            taps = np.zeros((n, c, kd, *plane), dtype=np.float32)
            for t in range(kd):
                if 0 <= first + t * dd < d_in:
                    taps[:, :, t] = x[:, :, first + t * dd]
        _conv_native(taps.reshape(n, c * kd, *plane), gw, kshape[1:], strides[1:], dil[1:],
                     pb[1:], out_sp[1:], bias, None if z4 is None else z4[:, :, d], act, clamp,
                     out=buf[d], threads=1 if shared else threads)

    if shared:
        parallel_for(do, one_depth)
    else:
        for d in range(do):
            one_depth(d)
    return np.ascontiguousarray(buf.transpose(1, 2, 0, 3, 4))


def _depthwise_native(dwconv: Callable[..., None], x: np.ndarray, cw: _ConvWeights,
                      pb: Sequence[int], dil: Sequence[int], strides: Sequence[int],
                      out_sp: Sequence[int], bias: np.ndarray | None, z3: np.ndarray | None,
                      act: Callable[[np.ndarray], object] | None,
                      clamp: tuple[float, float] | None) -> np.ndarray:
    """Float32 2-D depthwise on the native kernel (``_mlas_native.dwconv_f32``), channel
    chunks over the pool; the bias and a clamp activation run inside the kernel, a Z input or
    another activation on each chunk after it."""
    n, c = x.shape[:2]
    ho, wo = out_sp
    w = cw.taps.reshape(c, *cw.kshape)
    b = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32).reshape(-1)
    fused = z3 is None and (act is None or clamp is not None)
    lo, hi = clamp if fused and clamp is not None else (-math.inf, math.inf)
    rest = None if fused else _Epilogue(None, z3, act)
    y = np.empty((n, c, ho, wo), dtype=np.float32)
    if rest is None:   # all fused: the kernel splits the channels over the native pool
        for k in range(n):
            dwconv(x[k], w, b, y[k], tuple(strides), tuple(dil), (pb[0], pb[1]), lo, hi,
                   intra_threads())
        return y
    ranges = split(c, float(n) * c * ho * wo * w.shape[1] * w.shape[2], 16)  # channel groups

    def chunk(i: int) -> None:
        ch = slice(*ranges[i])
        for k in range(n):
            dwconv(x[k, ch], w[ch], None if b is None else b[ch], y[k, ch], tuple(strides),
                   tuple(dil), (pb[0], pb[1]), lo, hi)
        if rest is not None:
            rest(y[:, ch].reshape(n, ch.stop - ch.start, -1), ch)

    parallel_for(len(ranges), chunk)
    return y


def _depthwise_banded(x: np.ndarray, cw: _ConvWeights, pb: Sequence[int], dil: Sequence[int],
                      strides: Sequence[int], out_sp: Sequence[int],
                      ep: _Epilogue) -> np.ndarray:
    """Narrow planes: per kernel row, every output row is an input row times a banded
    ``[W_in, W_out]`` matrix (:meth:`_ConvWeights.banded`, which also drops the width
    padding), so each channel is ``k_h`` small GEMMs on strided row views of the unpadded
    input: no padded copy, no tap copies, no garbage columns. Kernel rows that fall in the
    height padding for some output rows only update the others. The zeros of the band cost
    ``W_out / k_w`` times the useful work, hence the width limit."""
    n, c, h_in, w_in = x.shape
    ho, wo = out_sp
    sh, dh, top = strides[0], dil[0], pb[0]
    mats = cw.banded(w_in, wo, strides[1], dil[1], pb[1])
    # Per kernel row: the output rows it reaches and the strided view of their input rows.
    spans = []
    for t in range(cw.kshape[0]):
        lo = max(0, -(-(top - t * dh) // sh))
        hi = min(ho, (h_in - 1 - t * dh + top) // sh + 1)
        if hi > lo:
            r0 = lo * sh + t * dh - top
            spans.append((t, lo, hi, x[:, :, r0:r0 + (hi - lo - 1) * sh + 1:sh]))
    spans.sort(key=lambda sp: sp[2] - sp[1] != ho)  # a full-height row first: it writes y
    full = bool(spans) and spans[0][2] - spans[0][1] == ho
    y = np.empty((n, c, ho, wo), dtype=x.dtype) if full else \
        np.zeros((n, c, ho, wo), dtype=x.dtype)
    ranges = split(c, float(n) * c * ho * wo * w_in * len(spans), 8)

    def chunk(i: int) -> None:
        ch = slice(*ranges[i])
        yc = y[:, ch]
        tmp = np.empty_like(yc) if len(spans) > int(full) else None
        for k, (t, lo, hi, rows) in enumerate(spans):
            if k == 0 and full:
                np.matmul(rows[:, ch], mats[t, ch], out=yc)
            else:
                np.matmul(rows[:, ch], mats[t, ch], out=tmp[:, :, lo:hi])
                yc[:, :, lo:hi] += tmp[:, :, lo:hi]
        if ep:
            ep(yc.reshape(n, yc.shape[1], -1), ch)

    parallel_for(len(ranges), chunk)
    return y


def _depthwise(grid: TapGrid, cw: _ConvWeights, ep: _Epilogue) -> np.ndarray:
    """One multiply-add per tap, over cache-sized channel blocks spread over threads."""
    runs = [grid.run(tap) for tap in grid.taps()]
    n, c, length = runs[0].shape
    y = np.empty((n, c, length), dtype=runs[0].dtype)
    block = max(1, _DEPTHWISE_BLOCK_BYTES // max(n * length * y.itemsize, 1))
    threads = intra_threads()
    if threads > 1:  # at least two blocks per thread when there are channels enough
        block = max(1, min(block, -(-c // (2 * threads))))
    late = ep.z is not None

    def chunk(i: int) -> None:
        c0 = i * block
        c1 = min(c, c0 + block)
        yb = y[:, c0:c1]
        tb = np.empty_like(yb)
        for t, run in enumerate(runs):
            wt = cw.taps[c0:c1, t, None]
            if t == 0:
                np.multiply(run[:, c0:c1], wt, out=yb)
            else:
                np.multiply(run[:, c0:c1], wt, out=tb)
                yb += tb
        if ep and not late:
            ep(yb, slice(c0, c1))

    parallel_for(-(-c // block), chunk)
    y = grid.crop(y)
    if ep and late:
        ep(y.reshape(n, c, -1))
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
    static = ConvStatic(node)

    def kernel(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        cw = packed if packed is not None else _ConvWeights(w, group)
        bias = bias_c if bias_c is not None else (None if b is None else to_compute(b))
        return _conv(x, cw, static, bias)

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
    """Strides, dilations, begin pads and output size (pads from output_shape as ORT does)."""
    nd = len(kshape)
    strides = ints(node.attr("strides"), nd, 1)
    dil = ints(node.attr("dilations"), nd, 1)
    opad = ints(node.attr("output_padding"), nd, 0)
    auto_pad = node.attr("auto_pad", "NOTSET")
    pads = node.attr("pads")
    out_shape = node.attr("output_shape")
    if out_shape is not None and len(out_shape) == nd + 2:
        out_shape = out_shape[2:]
    pb, out_sp = [], []
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
        out_sp.append(target)
    return strides, dil, pb, out_sp


def _conv_transpose(x: np.ndarray, cw: _ConvTWeights, node: NodeView,
                    bias: np.ndarray | None) -> np.ndarray:
    out_dtype = x.dtype
    x = to_compute(x)
    n, c = x.shape[:2]
    in_sp = x.shape[2:]
    nd = len(in_sp)
    kshape, g, m = cw.kshape, cw.group, cw.m
    strides, dil, pb, out_sp = _convt_geometry(node, in_sp, kshape)
    if g == 1:   # (over the pool: np.matmul's BLAS runs on one thread)
        cols = matmul(cw.mat[0], x.reshape(n, c, -1))   # [N, M * K, L]
    else:
        cols = np.matmul(cw.mat, x.reshape(n, g, c // g, -1))  # [N, G, M/G * K, L]
    cols = cols.reshape((n, m) + tuple(kshape) + tuple(in_sp))
    if (all(s == k for s, k in zip(strides, kshape)) and all(d == 1 for d in dil)
            and all(b + o <= i * s for b, o, i, s in zip(pb, out_sp, in_sp, strides))):
        y = _convt_interleave(cols, pb, out_sp, bias)
        return y if y.dtype == out_dtype else y.astype(out_dtype)
    # col2im: output position o = i * s + t * d, written as o = q * s + phase, the output
    # held as [N, M, q_0, s_0, q_1, s_1, ...]: tap t adds its products into the phase
    # (t * d) % s from row (t * d) // s, a strided view, in place (no interleaving copy after:
    # numpy's transposing copy of it ran inner loops of s elements).
    span = [(k - 1) * d + (i - 1) * s + 1 for k, d, i, s in zip(kshape, dil, in_sp, strides)]
    full = [max(sp, b + o) for sp, b, o in zip(span, pb, out_sp)]
    q = [-(-f // s) for f, s in zip(full, strides)]
    acc = np.zeros((n, m) + tuple(a for qi, s in zip(q, strides) for a in (qi, s)),
                   dtype=cols.dtype)
    touched: set[tuple[int, ...]] = set()
    for tap in np.ndindex(*kshape):
        e = [t * d for t, d in zip(tap, dil)]
        phase = tuple(ei % s for ei, s in zip(e, strides))
        dst = acc[(slice(None), slice(None)) + tuple(
            a for ei, s, i in zip(e, strides, in_sp) for a in (slice(ei // s, ei // s + i),
                                                               ei % s))]
        src = cols[(slice(None), slice(None)) + tap]
        if phase in touched:
            dst += src
        else:
            dst[...] = src  # the first tap of a phase: no zeros to add to
            touched.add(phase)
    full_arr = acc.reshape((n, m) + tuple(qi * s for qi, s in zip(q, strides)))
    y = np.ascontiguousarray(full_arr[(slice(None), slice(None)) + tuple(
        slice(b, b + o) for b, o in zip(pb, out_sp))])
    if bias is not None:
        y += bias.reshape(_bias_shape(m, nd))
    return y if y.dtype == out_dtype else y.astype(out_dtype)


def _convt_interleave(cols: np.ndarray, pb: Sequence[int], out_sp: Sequence[int],
                      bias: np.ndarray | None) -> np.ndarray:
    """ConvTranspose with stride = kernel (a U-Net's or a segmentation decoder's 2x2
    stride-2 upsampling) from the products ``cols [N, M, *k, *in]``: the taps' outputs do not
    overlap, each input position fills its own k-block, so the output [N, M, i_0, k_0, i_1,
    k_1, ...] is each tap's products written into its place (the bias added on the way),
    cropped by the pads. (One strided copy a tap: numpy's transposing copy of the same
    interleave, inner runs of k_d elements, was 4-5x slower, as long as the GEMM itself on a
    U-Net's upsampling.)"""
    n, m = cols.shape[:2]
    nd = (cols.ndim - 2) // 2
    kshape, in_sp = cols.shape[2:2 + nd], cols.shape[2 + nd:]
    y = np.empty((n, m) + tuple(a for i, k in zip(in_sp, kshape) for a in (i, k)),
                 dtype=cols.dtype)
    b_nd = None if bias is None else bias.reshape((m,) + (1,) * nd).astype(cols.dtype,
                                                                            copy=False)
    for tap in np.ndindex(*kshape):
        dst = y[(slice(None), slice(None)) + tuple(a for t in tap for a in (slice(None), t))]
        src = cols[(slice(None), slice(None)) + tap]
        if b_nd is None:
            dst[...] = src
        else:
            np.add(src, b_nd, out=dst)
    y = y.reshape((n, m) + tuple(i * k for i, k in zip(in_sp, kshape)))
    if any(pb) or tuple(out_sp) != y.shape[2:]:
        y = np.ascontiguousarray(y[(slice(None), slice(None)) + tuple(
            slice(b, b + o) for b, o in zip(pb, out_sp))])
    return y


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

    def grid(self, x: np.ndarray, fill: Any) -> TapGrid:
        return TapGrid(x, self.pb, self.pe, self.kshape, self.dil, self.strides, self.out_sp,
                       fill)


def _pool_min(dt: np.dtype) -> Any:
    return -np.inf if dt.kind == "f" or dt in _LOW_PRECISION else np.iinfo(dt).min


def _separable(x: np.ndarray, geo: _PoolGeometry, fill: Any, ufunc: np.ufunc) -> np.ndarray:
    """Reduce the windows one spatial axis at a time (outer axes first: contiguous rows)."""
    y = pad_constant(x, geo.pb, [e + x_ for e, x_ in zip(geo.pe, geo.extra)], fill)
    for i in range(len(geo.kshape)):
        ax = 2 + i
        k, d, s, o = geo.kshape[i], geo.dil[i], geo.strides[i], geo.out_sp[i]
        acc = None
        for t in range(k):
            sl = [slice(None)] * y.ndim
            sl[ax] = slice(t * d, t * d + (o - 1) * s + 1, s)
            v = y[tuple(sl)]
            if acc is None:
                acc = v.copy(order="K")   # (a channels-last view stays channels-last)
            else:
                ufunc(acc, v, out=acc)
        y = acc
    return y


def _max_pool_native(maxpool: Callable[..., None], x: np.ndarray,
                     geo: _PoolGeometry) -> np.ndarray:
    """Float32 2-D max pooling on the native kernel (``_mlas_native.maxpool_f32``), channel
    chunks over the pool."""
    n, c = x.shape[:2]
    ho, wo = geo.out_sp
    y = np.empty((n, c, ho, wo), dtype=np.float32)
    ranges = split(c, float(n) * c * ho * wo * math.prod(geo.kshape), 4)

    def chunk(i: int) -> None:
        ch = slice(*ranges[i])
        for k in range(n):
            maxpool(x[k, ch], y[k, ch], tuple(geo.kshape), tuple(geo.strides), tuple(geo.dil),
                    (geo.pb[0], geo.pb[1]))

    parallel_for(len(ranges), chunk)
    return y


def _max_pool(node: NodeView, x: np.ndarray, want_indices: bool) -> tuple[np.ndarray, ...]:
    geo = _PoolGeometry(node, x.shape[2:], dilations=True)
    if (not want_indices and x.dtype == np.float32 and x.ndim == 4
            and (nat := native()) is not None and hasattr(nat, "maxpool_f32")):
        return (_max_pool_native(nat.maxpool_f32, np.ascontiguousarray(x), geo),)
    if not want_indices:
        return (_separable(x, geo, _pool_min(x.dtype), np.maximum),)
    grid = geo.grid(x, _pool_min(x.dtype))
    y = idx = None
    for t, tap in enumerate(grid.taps()):
        v = grid.run(tap)
        if y is None:
            y = v.copy()
            idx = np.zeros(y.shape, dtype=np.int32)
        else:
            better = v > y  # strict: ties keep the first tap in row-major order
            np.copyto(y, v, where=better)
            idx[better] = t
    return grid.crop(y), _max_pool_indices(node, x.shape, geo, grid.crop(idx))


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


@op("NhwcMaxPool", since=1, domain="com.microsoft", dtypes={0: {TP.FLOAT}},
    predicate=lambda node: _needs_kernel_shape(node) or _one_output(node))
def make_nhwc_max_pool(node: NodeView, ctx: ProviderContext):
    """com.microsoft NhwcMaxPool: MaxPool (no Indices) of channels-last ``[N, H, W, C]``; the
    native kernel for float32 2-D (vectors across channels), else the NCHW kernel between two
    transposes."""

    geometries: dict[tuple[int, ...], _PoolGeometry] = {}   # per spatial shape
    nat = native()
    pool_nhwc = getattr(nat, "maxpool_nhwc_f32", None) if nat is not None else None
    plan_nhwc = getattr(nat, "maxpool_nhwc_f32_plan", None) if nat is not None else None
    # per input shape: the native kernel's output shape and geometry arguments (worked out
    # once: building them was ~1.5 us of a call that pools a tiny CNN's map in ~2), and its
    # plan (the geometry bound natively) when the module makes them
    calls: dict[tuple[int, ...], tuple] = {}

    def kernel(x: np.ndarray) -> np.ndarray:
        if pool_nhwc is not None and x.ndim == 4 and x.dtype == np.float32:
            x = np.ascontiguousarray(x)
            call = calls.get(x.shape)
            if call is None:
                geo = _PoolGeometry(node, x.shape[1:-1], dilations=True)
                if len(calls) >= 64:   # many input shapes: keep the cache bounded
                    calls.clear()
                out_shape = (x.shape[0], *geo.out_sp, x.shape[-1])
                args = (tuple(geo.kshape), tuple(geo.strides), tuple(geo.dil),
                        (geo.pb[0], geo.pb[1]))
                planned = (None if plan_nhwc is None else
                           plan_nhwc(x, np.empty(out_shape, np.float32), *args))
                call = calls[x.shape] = (out_shape, args, planned)
            if call[2] is not None:
                if step is not None:
                    step.install(call[2])   # (later calls of this shape: without Python)
                return call[2](x, None, intra_threads())
            y = np.empty(call[0], dtype=np.float32)
            pool_nhwc(x, y, *call[1], intra_threads())
            return y
        geo = geometries.get(x.shape[1:-1])
        if geo is None:
            if len(geometries) >= 64:   # many input shapes: keep the cache bounded
                geometries.clear()
            geo = geometries[x.shape[1:-1]] = _PoolGeometry(node, x.shape[1:-1], dilations=True)
        last = x.ndim - 1
        (y,) = _max_pool(node, np.moveaxis(x, last, 1), False)
        return np.ascontiguousarray(np.moveaxis(y, 1, last))

    # a native step running the plan of the last shape pooled
    step = planned_step(kernel) if plan_nhwc is not None else None
    return step if step is not None else kernel


def _one_output(node: NodeView) -> str | None:
    if len(node.outputs) > 1 and node.outputs[1] is not None:
        return "NhwcMaxPool has no Indices output"
    return None


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


def _avg_pool(node: NodeView, x: np.ndarray, dilations: bool,
              channels_last: bool = False) -> np.ndarray:
    """AveragePool of ``x`` (``[N, C, *spatial]``, or ``[N, *spatial, C]`` when
    ``channels_last``: reduced through an NCHW view of its memory, which the reduction keeps)."""
    if channels_last:
        y = _avg_pool(node, np.moveaxis(x, -1, 1), dilations)
        return np.ascontiguousarray(np.moveaxis(y, 1, -1))
    out_dtype = x.dtype
    x = to_compute(x)
    in_sp = x.shape[2:]
    geo = _PoolGeometry(node, in_sp, dilations)
    y = _separable(x, geo, 0, np.add)
    include_pad = int(node.attr("count_include_pad", 0)) == 1
    # The divisor is separable: per axis, the number of taps inside the counted region.
    count = np.ones((), dtype=y.dtype)
    for i, n in enumerate(in_sp):
        lo, hi = (-geo.pb[i], n + geo.pe[i]) if include_pad else (0, n)
        start = np.arange(geo.out_sp[i]) * geo.strides[i] - geo.pb[i]
        pos = start[:, None] + np.arange(geo.kshape[i])[None, :] * geo.dil[i]
        cnt = ((pos >= lo) & (pos < hi)).sum(axis=1).astype(y.dtype)
        count = np.multiply.outer(count, cnt)
    y *= 1 / np.maximum(count, 1)
    return y if y.dtype == out_dtype else y.astype(out_dtype)


def _avg_pool_factory(dilations: bool):
    def make(node: NodeView, ctx: ProviderContext):
        return lambda x: _avg_pool(node, x, dilations)

    return make


for _v in (1, 7, 10, 11):
    op("AveragePool", since=_v, dtypes={"T": FLOATS}, predicate=_needs_kernel_shape)(
        _avg_pool_factory(False))
for _v in (19, 22):  # dilations since 19
    op("AveragePool", since=_v, dtypes={"T": FLOATS}, predicate=_needs_kernel_shape)(
        _avg_pool_factory(True))


NHWC_DOMAIN = "com.ms.internal.nhwc"
"""onnxruntime's domain for ops whose tensors are channels-last, with the ONNX op's attributes
(its layout transformer moves nodes there for providers that prefer NHWC)."""


@op("AveragePool", since=1, domain=NHWC_DOMAIN, dtypes={0: {TP.FLOAT}},
    predicate=_needs_kernel_shape)
def make_nhwc_average_pool(node: NodeView, ctx: ProviderContext):
    """AveragePool of a channels-last ``[N, *spatial, C]`` tensor (the layout level's, between
    channels-last convs: a DenseNet's transitions): float32 2-D on the native kernel (vectors
    across channels; DenseNet-121's three transitions 0.75 -> ~0.1 ms at one thread), else the
    NCHW reduction over a view of it, the result channels-last again."""
    include_pad = int(node.attr("count_include_pad", 0)) == 1
    geometries: dict[tuple[int, ...], tuple[tuple[int, ...], tuple[Any, ...]]] = {}

    def kernel(x: np.ndarray) -> np.ndarray:
        nat = native() if x.ndim == 4 and x.dtype == np.float32 else None
        if nat is None or not hasattr(nat, "avgpool_nhwc_f32"):
            return _avg_pool(node, x, True, channels_last=True)
        found = geometries.get(x.shape[1:-1])
        if found is None:
            if len(geometries) >= 64:   # many input shapes: keep the cache bounded
                geometries.clear()
            geo = _PoolGeometry(node, x.shape[1:-1], dilations=True)
            found = geometries[x.shape[1:-1]] = (
                tuple(geo.out_sp),
                (tuple(geo.kshape), tuple(geo.strides), tuple(geo.dil), (geo.pb[0], geo.pb[1]),
                 (geo.pe[0], geo.pe[1]), include_pad))
        out_sp, args = found
        y = np.empty((x.shape[0], *out_sp, x.shape[-1]), dtype=np.float32)
        nat.avgpool_nhwc_f32(np.ascontiguousarray(x), y, *args, intra_threads())
        return y

    return kernel


@op("GlobalAveragePool", since=1, dtypes={"T": FLOATS})
@op("GlobalAveragePool", since=22, dtypes={"T": FLOATS})
def make_global_average_pool(node: NodeView, ctx: ProviderContext):
    """GlobalAveragePool: mean over the spatial axes (a BLAS row sum, float32 for halves)."""

    def kernel(x: np.ndarray) -> np.ndarray:
        xc = np.ascontiguousarray(to_compute(x))
        rows = xc.reshape(x.shape[0] * x.shape[1], -1)
        mean = rows @ np.full(rows.shape[1], 1.0 / max(rows.shape[1], 1), dtype=rows.dtype)
        return mean.reshape(x.shape[:2] + (1,) * (x.ndim - 2)).astype(x.dtype, copy=False)

    return kernel


@op("GlobalMaxPool", since=1, dtypes={"T": FLOATS})
@op("GlobalMaxPool", since=22, dtypes={"T": FLOATS})
def make_global_max_pool(node: NodeView, ctx: ProviderContext):
    """GlobalMaxPool: max over the spatial axes."""

    def kernel(x: np.ndarray) -> np.ndarray:
        rows = np.ascontiguousarray(x).reshape(-1)
        plane = math.prod(x.shape[2:])
        m = np.maximum.reduceat(rows, np.arange(0, rows.size, max(plane, 1)))
        return m.reshape(x.shape[:2] + (1,) * (x.ndim - 2))

    return kernel
