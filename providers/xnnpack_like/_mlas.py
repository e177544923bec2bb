"""cpu_mlas's native kernels as the delegate's fast path where no Kleidi kernel runs (x86).

XNNPACK picks, per operator, the fastest micro-kernel the CPU has; on x86 the fastest this
project has are cpu_mlas's (``_mlas_native``: the channels-last float32 convolutions -- group 1,
depthwise, grouped --, the packed SGEMM and the channels-last max pool). So a node that matches
no Kleidi kernel runnable here runs on them, reached through cpu_mlas's Python modules (cpu_mlas
is bundled; its thread pool is sized by the session's cpu_mlas instance, always present as the
last provider). The variant tables and the Kleidi paths are unchanged; the report names these
kernels ``mlas:<kernel>``.

When the native module is missing (a build without it, ``ONNXPLEX_MLAS_NATIVE=0``, a CPU with
only its portable GEMM), the x86 policy of the provider declines the ops whose own numpy path
would be slower than cpu_mlas (:func:`slower_on_x86`), with that reason; with it, the ops
cpu_mlas runs (and fuses) better, and partitions of elementwise / shape ops only.
``ONNXPLEX_XNNPACK_MLAS=0`` (or the provider option ``mlas=0``) turns the fast path and the
policy off: the own implementations run everything that matches no Kleidi kernel.
"""

from __future__ import annotations

import functools
import importlib
import logging
import math
import os
import platform
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
from onnx import TensorProto as TP

from ._ops_base import F32, Activation, Label, Op, Workspace

logger = logging.getLogger(__name__)

MLAS_ENV = "ONNXPLEX_XNNPACK_MLAS"
_PKG = "onnxplex.providers.cpu_mlas"
_NEEDED = ("conv2d_nhwc_f32_plan", "dwconv_nhwc_f32_plan", "maxpool_nhwc_f32", "sgemm_pack_b",
           "transpose_f32")


def env_enabled() -> bool:
    """False when ``ONNXPLEX_XNNPACK_MLAS`` turns the cpu_mlas fast path off."""
    return os.environ.get(MLAS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")


@functools.cache
def kernels() -> tuple[Any | None, str]:
    """``(namespace of cpu_mlas's nn, _blas, linalg modules and the native module, "")``, or
    ``(None, why they cannot be used)``."""
    try:
        nn = importlib.import_module(f"{_PKG}.nn")
        blas = importlib.import_module(f"{_PKG}._blas")
        linalg = importlib.import_module(f"{_PKG}.linalg")
        nat = importlib.import_module(f"{_PKG}._native").native()
    except ImportError as e:
        return None, f"cpu_mlas is not importable ({e})"
    if nat is None:
        return None, ("cpu_mlas's native module _mlas_native is not importable here (or "
                      "ONNXPLEX_MLAS_NATIVE=0)")
    missing = [n for n in _NEEDED if not hasattr(nat, n)]
    if missing:
        return None, f"cpu_mlas's native module lacks {', '.join(missing)}"
    if blas._sgemm_module() is None:
        return None, "cpu_mlas's native GEMM has no vector variant for this CPU"
    return SimpleNamespace(nn=nn, blas=blas, linalg=linalg, nat=nat), ""


# --------------------------------------------------------------------------------------------
# The x86 policy: decline what would run slower here than on cpu_mlas
# --------------------------------------------------------------------------------------------

# Ops whose only x86 implementations in this provider, without cpu_mlas's native kernels, are
# numpy ones slower than cpu_mlas's (which keeps more strategies even without its natives).
_NATIVE_ONLY = {("", "Conv"), ("com.microsoft", "FusedConv"), ("", "Gemm"),
                ("com.microsoft", "FusedGemm"), ("", "MatMul"), ("", "MaxPool")}


# Ops cpu_mlas runs on native kernels the delegate has no counterpart of (its are numpy), and
# fuses with their neighbours on the whole graph (the delegate sees the graph before fusions).
_CPU_NATIVE = {("", "LayerNormalization"): "SkipLayerNormalization / LayerNormalization",
               ("", "Softmax"): "Attention / Softmax",
               ("", "Gelu"): "Gelu / FastGelu / BiasGelu", ("", "Erf"): "Gelu / BiasGelu",
               ("com.microsoft", "Gelu"): "Gelu / BiasGelu",
               ("com.microsoft", "FastGelu"): "FastGelu", ("com.microsoft", "BiasGelu"): "BiasGelu"}
_REDUCES = {"ReduceMean", "ReduceMax", "ReduceSum"}
# What a partition must hold to gain anything: a group of only these runs the same numpy
# ufuncs / views as cpu_mlas, plus the layout conversions at its boundary.
_LIGHT = {"Relu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "LeakyRelu", "Elu", "Erf",
          "Sqrt", "Neg", "Abs", "Exp", "Reciprocal", "Softplus", "Softsign", "Clip", "Gelu",
          "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Reshape", "Flatten", "Transpose",
          "Squeeze", "Unsqueeze", "Identity", "Concat", "Cast", "BatchNormalization"}


def _float(v: Any) -> bool:
    return v is None or v.elem_type in (None, 1, 10)                  # float32, float16


def slower_on_x86(node: Any, rank: Any = None, const_b: bool = False,
                  flattened_from: int | None = None) -> str | None:
    """Why the delegate, on x86 with the fast path on, would run ``node`` slower than cpu_mlas
    (the decline's reason), or None. ``rank(value)``: a value's rank (None: unknown);
    ``const_b``: a MatMul's B is a constant (a fully-connected op); ``flattened_from``: the
    rank of the tensor a Reshape made the node's first input from (GPT-2's layers flatten the
    sequence to rank 2 around each Gemm), if it did.

    * Without cpu_mlas's native module: float convs, GEMMs, matmuls and max pools (the
      delegate's numpy is slower).
    * With it: the ops cpu_mlas has native (and graph-fused) kernels for and the delegate only
      numpy (LayerNormalization, Softmax, the Gelu family); and the float ops the delegate would
      run on cpu_mlas's very kernel without a channels-last layout to keep -- a MatMul of two
      computed tensors or of a rank >= 3 activation (a sequence model's projections and
      attention products), a reduction of a tensor that is not rank 4 -- where claiming them
      only costs the partition's boundary and blocks cpu_mlas's fusions (Attention,
      SkipLayerNormalization, FusedMatMul, BiasGelu, the RMS norm)."""
    key = (node.domain, node.op_type)
    x = node.input(0)
    if not _float(x):
        return None
    k, why = kernels()
    if k is None:
        if key not in _NATIVE_ONLY:
            return None
        return (f"on x86 without cpu_mlas's native kernels ({why}) the delegate's numpy "
                f"{node.op_type} would be slower than cpu_mlas's: left to cpu_mlas")
    if key in _CPU_NATIVE:
        return (f"on x86 cpu_mlas runs {node.op_type} on a native kernel (fused on the whole "
                f"graph as {_CPU_NATIVE[key]}); the delegate's is numpy: left to cpu_mlas")
    r = rank or (lambda v: None if v is None else v.rank)
    fused_by = ("it would run on cpu_mlas's own kernel with no channels-last layout to keep, "
                "and claiming it blocks cpu_mlas's fusions")
    if key == ("", "MatMul") and _float(node.input(1)):
        if not const_b:
            return (f"on x86 a MatMul of two computed tensors (attention's products) {fused_by}"
                    " (Attention, FusedMatMul): left to cpu_mlas")
        if (r(x) or 0) >= 3:
            return (f"on x86 a MatMul of a rank-{r(x)} activation (a sequence model's "
                    f"projection) {fused_by} (Attention, bias + Gelu, SkipLayerNormalization): "
                    "left to cpu_mlas")
    if key in (("", "MatMul"), ("", "Gemm")) and (flattened_from or 0) >= 3:
        return (f"on x86 a {node.op_type} of a rank-{flattened_from} activation reshaped to "
                f"rank 2 (a sequence model's projection, as GPT-2 exports it) {fused_by} "
                "(bias + Gelu, SkipLayerNormalization, Attention): left to cpu_mlas")
    if not node.domain and node.op_type in _REDUCES and r(x) not in (None, 4):
        return (f"on x86 a {node.op_type} of a rank-{r(x)} tensor {fused_by} (LayerNormalization"
                ", the RMS norm): left to cpu_mlas")
    return None


# A partition doing fewer multiply-adds than this runs faster on cpu_mlas: the delegate's
# per-op dispatch and its boundary's layout conversions (~15-30 us) outweigh the work (zoo
# tiny_cnn: three convs on 32x32, ~0.5 M multiply-adds, 50 us a run, 1.4-1.8x cpu_mlas alone).
SMALL_GROUP_MACS = 4_000_000
MIN_MACS_ENV = "ONNXPLEX_XNNPACK_MIN_MACS"   # another cutoff (0: none; the kernels' tests)


def min_group_macs() -> int:
    """The cutoff: ``ONNXPLEX_XNNPACK_MIN_MACS`` when set to an integer, else the default."""
    raw = os.environ.get(MIN_MACS_ENV, "")
    try:
        return max(0, int(raw)) if raw.strip() else SMALL_GROUP_MACS
    except ValueError:
        logger.warning("%s=%r is not an integer: the default cutoff applies", MIN_MACS_ENV, raw)
        return SMALL_GROUP_MACS


def _static(v: Any) -> tuple[int, ...] | None:
    """``v``'s shape, a symbolic leading (batch) dimension counted as 1; None when another
    dimension is not known."""
    shape = None if v is None else v.shape
    if shape is None:
        return None
    dims = tuple(1 if k == 0 and not isinstance(d, int) else d for k, d in enumerate(shape))
    return dims if all(isinstance(d, int) for d in dims) else None


def _macs(node: Any) -> int | None:
    """Multiply-adds of a conv or GEMM node from its static shapes; 0 for other ops; None
    when a conv's or GEMM's shapes are not known."""
    op = node.op_type
    if op in ("Conv", "FusedConv", "NhwcFusedConv", "QLinearConv"):
        w = _static(node.input(3 if op == "QLinearConv" else 1))
        y = _static(node.outputs[0] if node.outputs else None)
        if w is None or y is None:
            return None
        return math.prod(y) * math.prod(w[1:])
    if op in ("Gemm", "FusedGemm", "MatMul", "QLinearMatMul", "MatMulInteger"):
        a = _static(node.input(0))
        y = _static(node.outputs[0] if node.outputs else None)
        if a is None or y is None or not a:
            return None
        return math.prod(y) * a[-1]
    return 0


def small_group_reason(nodes: Sequence[Any]) -> str | None:
    """Why a claimed group is declined on x86 for doing too little work to pay for its
    dispatch and boundary (its static shapes tell), or None."""
    cutoff = min_group_macs()
    if cutoff == 0:
        return None
    total = 0
    for n in nodes:
        m = _macs(n)
        if m is None:
            return None
        total += m
    if total >= cutoff:
        return None
    return (f"on x86 a partition of {total:,} multiply-adds (under {cutoff:,}; a batch of "
            "one when the batch is not known) runs faster on cpu_mlas: the delegate's per-op "
            "dispatch and the layout conversions at its boundary cost more than it saves: left "
            "to cpu_mlas")


# The x86 rule (:func:`x86_group_reason`): ``ONNXPLEX_XNNPACK_X86_FLOAT32=1`` (or the
# provider option ``claim_float32_on_x86``) claims such partitions anyway (the delegate's tests
# of its x86 runtime; the zoo runner's correctness column). (The names are from when the rule
# covered float32 partitions only.)
CLAIM_FLOAT32_ENV = "ONNXPLEX_XNNPACK_X86_FLOAT32"
# Element types of the delegate's own half-precision and quantized paths.
_HALF = frozenset({TP.FLOAT16, TP.BFLOAT16})
_QUANTIZED = frozenset({TP.UINT8, TP.INT8, TP.FLOAT8E4M3FN, TP.FLOAT8E4M3FNUZ, TP.FLOAT8E5M2,
                        TP.FLOAT8E5M2FNUZ, TP.UINT4, TP.INT4, TP.FLOAT4E2M1})


def claim_float32_env() -> bool:
    """True when ``ONNXPLEX_XNNPACK_X86_FLOAT32`` asks to claim the partitions x86's rule
    leaves to cpu_mlas."""
    return os.environ.get(CLAIM_FLOAT32_ENV, "0").strip().lower() in ("1", "true", "yes", "on")


def x86_group_reason(nodes: Sequence[Any], kleidi_ops: int) -> str | None:
    """Why a planned group is declined on x86, or None. With no Kleidi kernel running
    (``kleidi_ops``: the plan's ops on one) the delegate can only lose to cpu_mlas:

    * float32: each conv, GEMM and pool would run the native kernel cpu_mlas runs itself, plus
      the delegate's per-op dispatch, the layout conversions at its boundary, and without the
      fusions cpu_mlas's optimizer makes on the nodes it is given (a squeeze-excite gate folded
      into the next 1x1 conv, concatenations written in place): claiming them, it ran the
      zoo's squeeze-excite and concatenating CNNs 1.07-1.25x as long as cpu_mlas alone, the
      other models 0.98-1.05x, ConvNeXt-T alone faster (0.92x; see docs/providers.md);
    * float16 / bfloat16: the delegate's own path rounds every epilogue to half precision and
      runs depthwise convs in numpy, where cpu_mlas computes the region in float32 on its
      native kernels with the float fusions: 2.8x (ResNet-18) and 20x (MobileNetV2) as long
      as cpu_mlas alone on onnxruntime's fp16 conversions (2026-12-06, 2 threads,
      ``benchmarks/half.py --providers``);
    * 8-bit QDQ: the delegate's own integer path against cpu_mlas's native QLinearConv and
      depthwise kernels: 16x (ResNet-18) and 6.6x (MobileNetV2) as long on quantize_static's
      models (same day, ``benchmarks/quantized.py --providers``)."""
    if kleidi_ops:
        return None
    types = {v.elem_type for n in nodes for v in (*n.inputs, *n.outputs) if v is not None}
    if types & _QUANTIZED:
        kind, why = ("8-bit quantized", "its own integer path is slower than cpu_mlas's "
                     "native QLinear kernels")
    elif types & _HALF:
        kind, why = ("half-precision", "its own path (every epilogue rounded to half "
                     "precision) is slower than cpu_mlas, which computes the region in "
                     "float32 on its native kernels with the float fusions")
    else:
        kind, why = ("float32", "it would run cpu_mlas's own native kernels plus the "
                     "delegate's per-op dispatch and boundary layout conversions, without the "
                     "fusions cpu_mlas makes on the whole graph (squeeze-excite gates into "
                     "convs, concatenation in place)")
    return (f"on x86 no Kleidi kernel runs, so in this {kind} partition {why}: left to "
            f"cpu_mlas ({CLAIM_FLOAT32_ENV}=1 or the option claim_float32_on_x86=1 claims it "
            "anyway)")


def light_group_reason(nodes: Sequence[Any]) -> str | None:
    """Why a claimed group of only elementwise, shape and batch-norm nodes is declined on x86
    (nothing in it runs faster in the delegate; its boundary costs layout conversions), or
    None when it holds a conv, a GEMM, a pool, a reduction or a quantized op."""
    if any(n.domain or n.op_type not in _LIGHT for n in nodes):
        return None
    return ("on x86 a partition of only elementwise / shape ops would run the same numpy "
            "ufuncs as cpu_mlas plus layout conversions at its boundary: left to cpu_mlas")


def nhwc_contiguous(x: np.ndarray, nat: Any) -> np.ndarray:
    """``x`` (rank 4, channels-last) as a C-contiguous float32 array. A channels-last view of
    an NCHW array (the core's conversion at a partition input) is transposed by cpu_mlas's
    native tiles: numpy's strided copy of a 3-channel 224 x 224 image takes ~180 us."""
    if x.dtype == F32 and x.flags.c_contiguous:
        return x
    logical = x.transpose(0, 3, 1, 2)
    if x.dtype == F32 and logical.flags.c_contiguous and x.size:
        n, h, w, c = x.shape
        y = np.empty((n, h * w, c), F32)
        nat.transpose_f32(logical.reshape(n, c, h * w), y)
        return y.reshape(n, h, w, c)
    return np.ascontiguousarray(x, F32)


# --------------------------------------------------------------------------------------------
# Convolution
# --------------------------------------------------------------------------------------------


def conv_kernel(w_shape: Sequence[int], group: int) -> str:
    """The report's name of the cpu_mlas kernel a float 2-D conv of weights
    ``[M, C/group, KH, KW]`` runs on (as ``nn._nhwc_plan`` chooses it)."""
    m, cg = int(w_shape[0]), int(w_shape[1])
    if group == 1:
        return "mlas:conv2d_nhwc"
    if cg == 1 and m == group:
        return "mlas:dwconv_nhwc"
    if (m // group) % 4 == 0:
        return "mlas:gconv_nhwc"
    # no channels-last kernel: cpu_mlas's NCHW conv between two transposes, as its own
    # NhwcFusedConv runs such a conv
    return "mlas:conv_nchw_transposed"


# Activation kinds cpu_mlas's channels-last kernels apply themselves (FusedConv's attribute
# names): Relu and Clip as the GEMM's clamp, Swish and HardSwish on each finished output block.
_NATIVE_ACTS = ("Relu", "Clip", "Swish", "HardSwish")


class _ConvAttrs:
    """The attributes cpu_mlas's ``ConvStatic`` reads from a FusedConv node (geometry and the
    fused activation), for a conv this provider assembled (BatchNorm folded, an activation node
    fused)."""

    def __init__(self, strides, dilations, pads, auto_pad: str, act: Activation) -> None:
        kind = act.kind if act.kind in _NATIVE_ACTS else ""
        self._attrs = {"strides": strides, "dilations": dilations, "pads": pads,
                       "auto_pad": auto_pad or "NOTSET", "activation": kind,
                       "activation_params": list(act.params) if kind == "Clip" else None}

    def attr(self, name: str, default: Any = None) -> Any:
        v = self._attrs.get(name)
        return default if v is None else v


class MlasConv(Op):
    """Float NHWC conv ``act(conv(x, w) + bias [+ z])`` on cpu_mlas's channels-last kernels
    (``nn._conv_nhwc``: the call planned once per input shape, the bias, a same-shape residual
    and a Relu/Clip/HardSwish in the kernel, other activations after it). Float16 tensors are
    computed in float32 and rounded once, after the epilogue."""

    def __init__(self, label: Label, w: np.ndarray, bias: np.ndarray | None, group: int,
                 geom: Any, act: Activation, out_dtype: np.dtype, residual: bool) -> None:
        super().__init__(label)
        k, _ = kernels()
        self.nat = k.nat
        self._conv = k.nn._conv_nhwc
        self.cw = k.nn._ConvWeights(np.ascontiguousarray(w, F32), group)
        self.static = k.nn.ConvStatic(_ConvAttrs(geom.strides, geom.dilations, geom.pads,
                                                 geom.auto_pad, act))
        self.bias = None if bias is None else np.ascontiguousarray(bias, F32).reshape(-1)
        self.act = act.apply_ if act else None
        self.out_dtype, self.residual = np.dtype(out_dtype), residual

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        # contiguous float32: the planned native call is reused only for such an x
        x = nhwc_contiguous(args[0], self.nat)
        z = nhwc_contiguous(args[1], self.nat) if self.residual else None
        y = self._conv(x, self.cw, self.static, self.bias, z, self.act)
        return y if y.dtype == self.out_dtype else y.astype(self.out_dtype)


# --------------------------------------------------------------------------------------------
# Fully connected and batch matmul
# --------------------------------------------------------------------------------------------


class MlasFC(Op):
    """``act(A' @ W + bias [+ C])`` on cpu_mlas's packed SGEMM, with cpu_mlas's own choices
    (``linalg``): the weight packed once and called through a native plan (bias and a Relu/Clip
    in the GEMM's epilogue); single rows of a large weight and tiny products on ``np.dot``,
    where OpenBLAS's gemv beats the GEMM's 12-row tile."""

    def __init__(self, label: Label, w: np.ndarray, bias: np.ndarray | None, act: Activation,
                 out_dtype: np.dtype, trans_a: bool = False,
                 c_post: np.ndarray | None = None) -> None:
        super().__init__(label)
        k, _ = kernels()
        lin = k.linalg
        self.blas = k.blas
        w = np.ascontiguousarray(w, F32)
        self.k, self.n = w.shape
        self.bias = None if bias is None else np.ascontiguousarray(bias, F32).reshape(-1)
        self.c_post = None if c_post is None else np.asarray(c_post, F32)
        clamp = act.clamp() if self.c_post is None else None
        self.lo, self.hi = clamp if clamp is not None else (-math.inf, math.inf)
        self.post = act if clamp is None else Activation()
        self.act = act
        self.out_dtype, self.trans_a = np.dtype(out_dtype), trans_a
        self.packed = k.blas.pack_weight(w)
        self.plan = k.blas.gemm_plan(self.packed, self.bias, self.lo, self.hi)
        fused = self.bias is not None or clamp is not None
        # as linalg.gemm_kernel: with an epilogue the native GEMM keeps the small products
        self.small = 0 if fused else lin._SMALL_MACS
        self.gemv = w.size >= lin._GEMV_MIN_WEIGHT if fused else True
        self.w_dot = lin._dot_weight(w) if (self.gemv or self.small) else None
        self.pool = k.blas.pool()

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        a = args[0]
        if self.trans_a:
            a = a.T
        lead = a.shape[:-1]
        a2 = a.reshape(-1, self.k) if a.ndim != 2 else a
        if a2.dtype != F32:
            a2 = a2.astype(F32)
        m = a2.shape[0]
        if self.w_dot is not None and ((m == 1 and self.gemv) or m * self.w_dot.size < self.small):
            y = np.dot(a2, self.w_dot)
            if self.bias is not None:
                y += self.bias
            if self.c_post is not None:
                y += self.c_post
            self.act.apply_(y)
        else:
            y = self.plan(a2, self.pool.size)
            if self.c_post is not None:
                y += self.c_post
            self.post.apply_(y)
        y = y.reshape(*lead, self.n)
        return y if y.dtype == self.out_dtype else y.astype(self.out_dtype)


class MlasBatchMatMul(Op):
    """``act(A @ B)`` of two computed operands on cpu_mlas's ``_blas.matmul``: the product split
    over the intra-op pool (its BLAS is single-threaded), as cpu_mlas's MatMul runs it."""

    def __init__(self, label: Label, out_dtype: np.dtype, act: Activation) -> None:
        super().__init__(label)
        k, _ = kernels()
        self.matmul = k.blas.matmul
        self.out_dtype, self.act = np.dtype(out_dtype), act

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        a, b = args[0], args[1]
        a = a if a.dtype == F32 else a.astype(F32)
        b = b if b.dtype == F32 else b.astype(F32)
        if a.ndim > 2 and b.ndim == 2:
            y = self.matmul(a.reshape(-1, a.shape[-1]), b).reshape(a.shape[:-1] + (b.shape[1],))
        else:
            y = self.matmul(a, b)
        self.act.apply_(y)
        return y if y.dtype == self.out_dtype else y.astype(self.out_dtype)


# --------------------------------------------------------------------------------------------
# Pooling and reductions
# --------------------------------------------------------------------------------------------


def reduce_kernel(kind: str, axes: Sequence[int]) -> Any:
    """cpu_mlas's ReduceMean / ReduceMax / ReduceSum kernel over constant ``axes`` with
    keepdims (``kind``: mean, max, sum): straight ufunc calls on small tensors, one BLAS
    product with a vector planned per input shape on large ones (a CNN's global pooling)."""
    reduce = importlib.import_module(f"{_PKG}.reduce")
    return reduce._constant_axes_kernel(f"Reduce{kind.capitalize()}", list(axes), True)


class MlasMaxPool(Op):
    """Float32 2-D MaxPool of an NHWC tensor on ``_mlas_native.maxpool_nhwc_f32`` (vectors
    across channels, threaded over the pool)."""

    def __init__(self, label: Label, geom: Any) -> None:
        super().__init__(label)
        k, _ = kernels()
        self.nat, self.blas, self.geom = k.nat, k.blas, geom
        self.k, self.s, self.d = (tuple(int(v) for v in t) for t in
                                  (geom.kernel, geom.strides, geom.dilations))

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        x = nhwc_contiguous(args[0], self.nat)
        n, h, w, c = x.shape
        pads, oh, ow = self.geom.resolve(h, w)
        y = np.empty((n, oh, ow, c), F32)
        self.nat.maxpool_nhwc_f32(x, y, self.k, self.s, self.d, (pads[0], pads[1]),
                                  self.blas.intra_threads())
        return y


__all__ = ["MLAS_ENV", "MIN_MACS_ENV", "CLAIM_FLOAT32_ENV", "claim_float32_env",
           "x86_group_reason", "env_enabled", "is_x86", "kernels", "slower_on_x86",
           "small_group_reason", "light_group_reason",
           "conv_kernel",
           "MlasConv", "MlasFC", "MlasBatchMatMul", "MlasMaxPool", "reduce_kernel"]
