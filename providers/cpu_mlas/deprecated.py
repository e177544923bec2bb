"""Ops ONNX defined experimentally before opset 10 and then removed, which onnxruntime still
runs in models of opsets 1 to 9 (old model-zoo and Caffe2/CoreML conversions carry them:
ImageScaler in front of a vision model, Crop, Affine, Scale): Affine, Crop, DynamicSlice,
ImageScaler, ParametricSoftplus, Scale, ScaledTanh and the experimental ThresholdedRelu (ONNX's
own from opset 10 is in :mod:`.elementwise`). onnx has no schema for them; their semantics are
onnxruntime's kernels', checked against it in the tests.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from onnxplex import NodeView, ProviderContext

from ._registry import op
from .elementwise import _float_kernel
from .nn import FLOATS
from .shape import _slice_index, int_list

_OLD = {"since": 1, "until": 9, "dtypes": {0: FLOATS}}


def _attr(node: NodeView, name: str, default: float) -> float:
    return float(node.attr(name, default))


def _elementwise(fn: Callable[[NodeView], Callable[[np.ndarray], np.ndarray]]):
    def make(node: NodeView, ctx: ProviderContext):
        return _float_kernel(node, fn(node))

    return make


@op("Affine", **_OLD)
@_elementwise
def make_affine(node: NodeView):
    """``alpha * x + beta``."""
    alpha, beta = _attr(node, "alpha", 1.0), _attr(node, "beta", 0.0)
    return lambda x: x * x.dtype.type(alpha) + x.dtype.type(beta)


@op("Scale", **_OLD)
@_elementwise
def make_scale(node: NodeView):
    """``scale * x``."""
    scale = _attr(node, "scale", 1.0)
    return lambda x: x * x.dtype.type(scale)


def _alpha_and_beta(node: NodeView) -> str | None:
    if node.attr("alpha") is None or node.attr("beta") is None:
        return f"{node.op_type} needs its alpha and beta attributes (onnxruntime has no defaults)"
    return None


@op("ScaledTanh", predicate=_alpha_and_beta, **_OLD)
@_elementwise
def make_scaled_tanh(node: NodeView):
    """``alpha * tanh(beta * x)``."""
    alpha, beta = _attr(node, "alpha", 1.0), _attr(node, "beta", 1.0)
    return lambda x: np.tanh(x * x.dtype.type(beta)) * x.dtype.type(alpha)


@op("ParametricSoftplus", predicate=_alpha_and_beta, **_OLD)
@_elementwise
def make_parametric_softplus(node: NodeView):
    """``alpha * ln(1 + exp(beta * x))``, without overflow for large ``beta * x``."""
    alpha, beta = _attr(node, "alpha", 1.0), _attr(node, "beta", 1.0)
    return lambda x: np.logaddexp(x.dtype.type(0), x * x.dtype.type(beta)) * x.dtype.type(alpha)


@op("ThresholdedRelu", **_OLD)
@_elementwise
def make_thresholded_relu_v1(node: NodeView):
    """``x`` where ``x > alpha``, else 0."""
    alpha = _attr(node, "alpha", 1.0)
    return lambda x: np.where(x > x.dtype.type(alpha), x, x.dtype.type(0))


@op("ImageScaler", **_OLD)
def make_image_scaler(node: NodeView, ctx: ProviderContext):
    """``x * scale + bias[c]`` over an [N, C, H, W] image (a bias per channel)."""
    scale = _attr(node, "scale", 1.0)
    bias = np.asarray(node.attr("bias", ()) or (), np.float32)

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.ndim != 4 or bias.size != x.shape[1]:
            raise ValueError(f"ImageScaler takes an [N, C, H, W] image and one bias a channel; "
                             f"got shape {list(x.shape)} and {bias.size} bias value(s)")
        return x * x.dtype.type(scale) + bias.astype(x.dtype).reshape(1, -1, 1, 1)

    return kernel


@op("Crop", **_OLD)
def make_crop(node: NodeView, ctx: ProviderContext):
    """An [N, C, H, W] image cut to ``border`` (left, top, right, bottom), or, with ``scale``
    (height, width), to that size from its left and top border."""
    border = int_list(node.attr("border")) or []
    scale = int_list(node.attr("scale"))

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.ndim != 4 or len(border) != 4:
            raise ValueError(f"Crop takes an [N, C, H, W] image and a border of 4 values; got "
                             f"shape {list(x.shape)} and border {border}")
        left, top, right, bottom = border
        h, w = x.shape[2:]
        if scale:
            if len(scale) != 2:
                raise ValueError(f"Crop: scale must be (height, width), got {scale}")
            bottom_at, right_at = top + scale[0], left + scale[1]
        else:
            bottom_at, right_at = h - bottom, w - right
        if min(left, top) < 0 or bottom_at > h or right_at > w or bottom_at < top \
                or right_at < left:
            raise ValueError(f"Crop: border {border}{f' and scale {scale}' if scale else ''} "
                             f"fall outside the {h} x {w} image")
        return x[:, :, top:bottom_at, left:right_at]

    return kernel


@op("DynamicSlice", since=1, until=9)
def make_dynamic_slice(node: NodeView, ctx: ProviderContext):
    """Slice with ``starts``, ``ends`` and ``axes`` as inputs (Slice-10's form, no steps)."""

    def kernel(x: np.ndarray, starts: np.ndarray, ends: np.ndarray,
               axes: np.ndarray | None = None) -> np.ndarray:
        return x[_slice_index(x.ndim, int_list(starts), int_list(ends), int_list(axes), None)]

    return kernel
