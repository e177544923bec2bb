"""com.microsoft ops that are ONNX ops under another name or an older signature.

onnxruntime registers these CPU contrib kernels for models written before (or without) the
ONNX op: its quantizer's com.microsoft QuantizeLinear / DequantizeLinear (16- and 4-bit
QDQ, ``UseQDQContribOps``), TransposeMatMul (FusedMatMul's first name), and Range, Trilu,
GatherND, Pad, Unique, ExpandDims, GridSample and Inverse, which older converters wrote in
the contrib domain. Each runs on the ONNX op's kernel, its inputs and attributes mapped as
onnxruntime's contrib schema defines them.
"""

from __future__ import annotations

import numpy as np

from onnxplex import NodeView, ProviderContext

from ._registry import op
from .contrib_transformer import make_fused_matmul
from .extra import make_unique
from .misc import make_range, make_trilu
from .nn import FLOATS, compute_dtype, to_compute
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
