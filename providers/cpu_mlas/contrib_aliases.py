"""com.microsoft ops that are ONNX ops under another name or an older signature.

onnxruntime registers these CPU contrib kernels for models written before (or without) the
ONNX op: its quantizer's com.microsoft QuantizeLinear / DequantizeLinear (16- and 4-bit
QDQ, ``UseQDQContribOps``), TransposeMatMul (FusedMatMul's first name), and Range, Trilu,
GatherND, Pad, Unique, ExpandDims, GridSample and Inverse, which older converters wrote in
the contrib domain; ConvTransposeWithDynamicPads (ConvTranspose with its pads as an
input). Each runs on the ONNX
op's kernel, its inputs and attributes mapped as onnxruntime's contrib schema defines them.
Also CropAndResize, which tf2onnx writes for TensorFlow's crop_and_resize.
"""

from __future__ import annotations

import numpy as np

from onnxplex import NodeView, ProviderContext

from ._registry import op
from .contrib_transformer import make_fused_matmul
from .extra import make_unique
from .misc import make_range, make_trilu
from .nn import FLOATS, _conv_transpose, _ConvTWeights, compute_dtype, to_compute
from .quant import _dq_types, _make_dequantize, _make_quantize, _q_types
from .shape import make_gather_nd
from .spatial import _pad_predicate, make_pad
from .vision import _gs_predicate, _make_grid_sample

_MS = "com.microsoft"

op("QuantizeLinear", domain=_MS, since=1, predicate=_q_types)(_make_quantize)
op("DequantizeLinear", domain=_MS, since=1, predicate=_dq_types)(_make_dequantize)
op("TransposeMatMul", domain=_MS, since=1, dtypes={"T": FLOATS})(make_fused_matmul)
op("Trilu", domain=_MS, since=1)(make_trilu)
op("GatherND", domain=_MS, since=1)(make_gather_nd)
op("Pad", domain=_MS, since=1, predicate=_pad_predicate)(make_pad)


class _WithPads:
    """A node's attributes with ``pads`` given at run time (ConvTransposeWithDynamicPads)."""

    def __init__(self, node: NodeView, pads: list[int] | None) -> None:
        self._node, self._pads = node, pads

    def attr(self, name: str, default=None):
        if name == "pads":
            return self._pads
        return self._node.attr(name, default)


@op("ConvTransposeWithDynamicPads", domain=_MS, since=1, dtypes={"T": FLOATS})
def make_conv_transpose_dynamic_pads(node: NodeView, ctx: ProviderContext):
    """ConvTranspose whose ``pads`` come as its third input (int64 [2 * spatial dims],
    required as onnxruntime requires it), the bias fourth."""
    group = int(node.attr("group", 1))

    def kernel(x, w, pads=None, b=None):
        if pads is None:
            raise ValueError("ConvTransposeWithDynamicPads: the pads input is required "
                             "(onnxruntime: Dynamic pads tensor is required)")
        given = [int(p) for p in np.asarray(pads).reshape(-1)]
        if len(given) != 2 * (x.ndim - 2):
            raise ValueError(f"ConvTransposeWithDynamicPads: {len(given)} pads for "
                             f"{x.ndim - 2} spatial dimensions (needs {2 * (x.ndim - 2)})")
        bias = None if b is None else to_compute(b)
        return _conv_transpose(x, _ConvTWeights(w, group), _WithPads(node, given), bias)

    return kernel


def _ms_gs_predicate(node: NodeView) -> str | None:
    why = _gs_predicate(node)
    if why is None and str(node.attr("mode", "bilinear")) == "bicubic" \
            and str(node.attr("padding_mode", "zeros")) == "border":
        return ("com.microsoft GridSample bicubic with border padding: onnxruntime's samples "
                "outside the grid differ from the ONNX op's (which cpu_mlas computes); not "
                "reproduced")
    return why


op("GridSample", domain=_MS, since=1, dtypes={"T1": FLOATS}, predicate=_ms_gs_predicate)(
    _make_grid_sample)


@op("Range", domain=_MS, since=1)
def make_ms_range(node: NodeView, ctx: ProviderContext):
    """com.microsoft Range: ``delta`` optional (1)."""
    onnx_range = make_range(node, ctx)

    def kernel(start, limit, delta=None):
        if delta is None:
            delta = np.ones((), np.asarray(start).dtype)
        return onnx_range(start, limit, delta)

    return kernel


@op("Unique", domain=_MS, since=1)
def make_ms_unique(node: NodeView, ctx: ProviderContext):
    """com.microsoft Unique of a 1-D tensor: the values in the order they first occur, each
    element's index among them and each value's count (ONNX Unique with sorted=0 gives
    them)."""
    onnx_unique = make_unique(_Unsorted(node), ctx)

    def kernel(x):
        y, _, inverse, counts = onnx_unique(x)
        return y, inverse, counts

    return kernel


class _Unsorted:
    """A node seen with ONNX Unique's attributes: flat, in order of first occurrence."""

    def __init__(self, node: NodeView) -> None:
        self._node = node

    def attr(self, name: str, default=None):
        return {"axis": None, "sorted": 0}.get(name, default)


@op("ExpandDims", domain=_MS, since=1)
def make_expand_dims(node: NodeView, ctx: ProviderContext):
    """com.microsoft ExpandDims: a dimension of 1 inserted at ``axis`` (a scalar input,
    negative counted from the end of the output's rank)."""

    def kernel(x, axis):
        a = int(np.asarray(axis).reshape(-1)[0])
        return np.expand_dims(x, a if a >= 0 else a + x.ndim + 1)

    return kernel


@op("Inverse", domain=_MS, since=1, dtypes={"T": FLOATS})
def make_inverse(node: NodeView, ctx: ProviderContext):
    """com.microsoft Inverse: the inverse of each ``[..., N, N]`` matrix (half precision in
    float32)."""

    def kernel(x):
        cd = compute_dtype(x.dtype)
        return np.linalg.inv(to_compute(x).astype(cd, copy=False)).astype(x.dtype, copy=False)

    return kernel


@op("CropAndResize", domain=_MS, since=1, dtypes={"T1": FLOATS})
def make_crop_and_resize(node: NodeView, ctx: ProviderContext):
    """com.microsoft CropAndResize (TensorFlow's crop_and_resize, as tf2onnx writes it): boxes
    ``[R, 4]`` of normalized ``(y1, x1, y2, x2)`` in the images of ``batch_indices``, each
    sampled to ``crop_size`` ``(h, w)`` by ``mode`` (bilinear, nearest); samples outside the
    image take ``extrapolation_value``. Output ``[R, C, h, w]``."""
    mode = str(node.attr("mode", "bilinear"))
    fill = float(node.attr("extrapolation_value", 0.0))

    def kernel(x, rois, batch_indices, crop_size):
        ch, cw = (int(v) for v in np.asarray(crop_size).reshape(-1)[:2])
        n, c, h, w = x.shape
        boxes = np.asarray(rois, np.float64)
        idx = np.asarray(batch_indices).astype(np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise IndexError(f"CropAndResize: a batch index is outside [0, {n})")
        out = np.empty((boxes.shape[0], c, ch, cw), np.float64)
        for r, (y1, x1, y2, x2) in enumerate(boxes):
            ys = (y1 * (h - 1) + np.arange(ch) * ((y2 - y1) * (h - 1) / (ch - 1))
                  if ch > 1 else np.array([0.5 * (y1 + y2) * (h - 1)]))
            xs = (x1 * (w - 1) + np.arange(cw) * ((x2 - x1) * (w - 1) / (cw - 1))
                  if cw > 1 else np.array([0.5 * (x1 + x2) * (w - 1)]))
            img = np.asarray(x[idx[r]], np.float64)
            inside = ((ys >= 0) & (ys <= h - 1))[:, None] & ((xs >= 0) & (xs <= w - 1))[None]
            if mode == "nearest":
                yi = np.clip(np.round(ys).astype(np.int64), 0, h - 1)
                xi = np.clip(np.round(xs).astype(np.int64), 0, w - 1)
                v = img[:, yi][:, :, xi]
            else:
                y0 = np.clip(np.floor(ys).astype(np.int64), 0, h - 1)
                x0 = np.clip(np.floor(xs).astype(np.int64), 0, w - 1)
                y1i, x1i = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
                dy = (ys - np.floor(ys))[None, :, None]
                dx = (xs - np.floor(xs))[None, None, :]
                top = img[:, y0][:, :, x0] * (1 - dx) + img[:, y0][:, :, x1i] * dx
                bottom = img[:, y1i][:, :, x0] * (1 - dx) + img[:, y1i][:, :, x1i] * dx
                v = top * (1 - dy) + bottom * dy
            out[r] = np.where(inside[None], v, fill)
        return out.astype(x.dtype)

    return kernel
