"""Resize, Upsample and Pad kernels for cpu_mlas.

Resize is separable: each resized axis maps its output positions to a few input taps (1 for
nearest, 2 for linear, 4 for cubic, a scale-dependent window with antialias) and weights.
Nearest gathers with ``np.take``; interpolation along a short axis is one BLAS matmul with the
dense ``[out, in]`` weight matrix, along a long one each tap is gathered and weighted.
Coordinates are computed in float32 with the same formulas and order as ONNX Runtime, so
nearest-neighbour rounding at half-way points matches it exactly. A float32 resize of the last
two axes (images: upsampling in segmentation heads and FPNs) runs on the native kernel with the
same taps (``resize2d_f32``: each needed input row resampled once, then the output rows as
weighted sums of them), its taps worked out once per input shape and sizes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxplex import NodeView, ProviderContext
from onnxplex.graph.limits import check_allocation

from ._blas import intra_threads
from ._native import native
from ._registry import op
from .nn import to_compute

logger = logging.getLogger(__name__)

_F32 = np.float32
# Interpolation along an axis of at most this many input positions is one matmul with the
# dense [out, in] weight matrix (BLAS beats gathering and weighting each tap for these).
_DENSE_MAX_IN = 256
_DENSE_MAX_ELEMENTS = 1 << 20


@dataclass(frozen=True)
class _ResizeSpec:
    mode: str
    coord: str
    nearest: str  # "simple" (Resize-10, Upsample) or an ONNX nearest_mode
    cubic_a: float = -0.75
    exclude_outside: bool = False
    extrapolation: float = 0.0
    antialias: bool = False
    axes: tuple[int, ...] | None = None
    policy: str = "stretch"


def _resize_spec(node: NodeView, legacy: bool) -> _ResizeSpec:
    mode = node.attr("mode", "nearest")
    if legacy:
        return _ResizeSpec(mode=mode, coord="asymmetric", nearest="simple")
    axes = node.attr("axes")
    return _ResizeSpec(
        mode=mode,
        coord=node.attr("coordinate_transformation_mode", "half_pixel"),
        nearest=node.attr("nearest_mode", "round_prefer_floor"),
        cubic_a=float(node.attr("cubic_coeff_a", -0.75)),
        exclude_outside=bool(node.attr("exclude_outside", 0)),
        extrapolation=float(node.attr("extrapolation_value", 0.0)),
        antialias=bool(node.attr("antialias", 0)) and mode in ("linear", "cubic"),
        axes=None if not axes else tuple(int(a) for a in axes),
        policy=node.attr("keep_aspect_ratio_policy", "stretch"),
    )


def _original_coords(coord: str, out_len: int, in_len: int, scale: np.float32,
                     roi_start: float, roi_end: float) -> np.ndarray:
    """Output positions mapped to input coordinates (float32, as ONNX Runtime computes them)."""
    x = np.arange(out_len, dtype=_F32)
    s = _F32(scale)
    if coord == "asymmetric":
        return x / s
    if coord == "pytorch_half_pixel":
        return (x + _F32(0.5)) / s - _F32(0.5) if out_len > 1 else np.zeros(out_len, _F32)
    if coord == "tf_half_pixel_for_nn":
        return (x + _F32(0.5)) / s
    if coord == "align_corners":
        # length_resized is the integer output length, as ONNX Runtime computes it and as
        # onnx 1.24's conformance cases expect (test_resize_downsample_scales_*_align_corners:
        # 4 -> 2 at scale 0.6 maps output 1 to input 3). onnx 1.23's cases and reference used
        # the fractional scale * length_original (2.4) there; the spec text did not change.
        # Computed in float64, so floor/ceil boundaries fall as in the reference.
        if out_len == 1:
            return np.zeros(out_len, np.float64)
        return np.arange(out_len, dtype=np.float64) * (in_len - 1) / (out_len - 1)
    if coord == "tf_crop_and_resize":
        rs, re_ = _F32(roi_start), _F32(roi_end)
        if out_len > 1:
            return rs * _F32(in_len - 1) + (x * (re_ - rs) * _F32(in_len - 1)) / _F32(out_len - 1)
        return np.full(out_len, 0.5 * (roi_start + roi_end) * (in_len - 1), dtype=_F32)
    if coord == "half_pixel_symmetric":
        out_w = s * _F32(in_len)
        adjustment = _F32(out_len) / out_w
        center = _F32(in_len) / _F32(2)
        offset = center * (_F32(1) - adjustment)
        return (np.float64(offset) + (x.astype(np.float64) + 0.5) / np.float64(s) - 0.5
                ).astype(_F32)
    if coord == "half_pixel":
        return (x + _F32(0.5)) / s - _F32(0.5)
    raise ValueError(f"Resize: unsupported coordinate_transformation_mode {coord!r}")


def _round_half_away(v: np.ndarray) -> np.ndarray:
    a = np.floor(np.abs(v.astype(np.float64)) + 0.5)
    return np.copysign(a, v)


def _nearest_index(orig: np.ndarray, mode: str, downsample: bool) -> np.ndarray:
    if mode == "simple":
        r = np.ceil(orig) if downsample else np.trunc(orig)
    elif mode == "round_prefer_floor":
        half = orig == np.trunc(orig) + _F32(0.5)
        r = np.where(half, np.floor(orig), _round_half_away(orig))
    elif mode == "round_prefer_ceil":
        r = _round_half_away(orig)
    elif mode == "floor":
        r = np.floor(orig)
    elif mode == "ceil":
        r = np.ceil(orig)
    else:
        raise ValueError(f"Resize: unsupported nearest_mode {mode!r}")
    return r.astype(np.int64)


def _cubic_coeffs(s: np.ndarray, a: float) -> np.ndarray:
    s = np.abs(s.astype(np.float64))
    return np.stack([
        ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a,
        ((a + 2) * s - (a + 3)) * s * s + 1,
        ((a + 2) * (1 - s) - (a + 3)) * (1 - s) * (1 - s) + 1,
        ((a * (2 - s) - 5 * a) * (2 - s) + 8 * a) * (2 - s) - 4 * a,
    ], axis=1)


def _aa_filter(x: np.ndarray, mode: str, a: float) -> np.ndarray:
    x = np.abs(x)
    if mode == "linear":
        return np.where(x < 1, 1 - x, 0.0)
    inner = ((a + 2) * x - (a + 3)) * x * x + 1
    outer = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1, inner, np.where(x < 2, outer, 0.0))


def _axis_taps(spec: _ResizeSpec, in_len: int, out_len: int, scale: np.float32,
               roi: tuple[float, float]
               ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``(indices [out, taps], weights [out, taps] or None, extrapolated mask or None)``."""
    orig = _original_coords(spec.coord, out_len, in_len, scale, *roi)
    extrap = None
    if spec.coord == "tf_crop_and_resize":
        probe = orig + _F32(0.5) if spec.antialias else orig
        extrap = (probe < 0) | (probe > in_len - 1)
        if not extrap.any():
            extrap = None
    last = in_len - 1
    if spec.mode == "nearest":
        idx = np.clip(_nearest_index(orig, spec.nearest, scale < 1), 0, last)
        return idx[:, None], None, extrap
    if spec.antialias:
        return (*_antialias_taps(spec, in_len, scale, orig), extrap)
    if spec.mode == "linear":
        v = np.clip(orig, _F32(0), _F32(last))
        i1 = np.minimum(v.astype(np.int64), last)
        i2 = np.minimum(i1 + 1, last)
        d1 = np.abs(v - i1.astype(_F32))
        d2 = np.abs(v - i2.astype(_F32))
        same = i1 == i2
        d1[same] = 0.5
        d2[same] = 0.5
        return np.stack([i1, i2], axis=1), np.stack([d2, d1], axis=1), extrap
    if spec.mode == "cubic":
        x_int = np.floor(orig).astype(np.int64)
        coeffs = _cubic_coeffs(orig - x_int.astype(_F32), spec.cubic_a)
        idx = x_int[:, None] + np.arange(-1, 3)[None, :]
        if spec.exclude_outside:
            coeffs = np.where((idx < 0) | (idx > last), 0.0, coeffs)
            coeffs /= coeffs.sum(axis=1, keepdims=True)
        return np.clip(idx, 0, last), coeffs, extrap
    raise ValueError(f"Resize: unsupported mode {spec.mode!r}")


def _antialias_taps(spec: _ResizeSpec, in_len: int, rscale: np.float32,
                    orig: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ONNX Runtime's antialias filter: a window stretched by 1/scale when downsampling."""
    scale = _F32(1) / _F32(rscale)
    support_size = 2.0 if spec.mode == "linear" else 4.0
    support = support_size * 0.5 * float(scale) if scale >= 1 else support_size * 0.5
    inv_scale = 1.0 / float(scale) if scale >= 1 else 1.0
    center = orig.astype(np.float64) + 0.5
    xmin = np.floor(center - support + 0.5).astype(np.int64)
    xmax = np.floor(center + support + 0.5).astype(np.int64)
    if spec.exclude_outside:
        xmin, xmax = np.maximum(xmin, 0), np.minimum(xmax, in_len)
    window = int(math.ceil(support)) * 2 + 1
    idx = xmin[:, None] + np.arange(window)[None, :]
    valid = idx < xmax[:, None]
    w = np.where(valid, _aa_filter((idx - center[:, None] + 0.5) * inv_scale, spec.mode,
                                   spec.cubic_a), 0.0)
    total = w.sum(axis=1, keepdims=True)
    w = np.where((total != 0) & (total != 1), w / np.where(total == 0, 1, total), w)
    return np.clip(idx, 0, in_len - 1), w


def _apply_axis(x: np.ndarray, axis: int, idx: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    """Resample ``x`` along ``axis``: gather taps ``idx [out, T]`` weighted by ``w [out, T]``."""
    if w is None:
        return np.take(x, idx[:, 0], axis=axis)
    n_in, n_out = x.shape[axis], idx.shape[0]
    if n_in <= _DENSE_MAX_IN and n_in * n_out <= _DENSE_MAX_ELEMENTS:
        # one BLAS matmul with the dense [out, in] interpolation matrix
        m = np.zeros((n_out, n_in), dtype=x.dtype)
        np.add.at(m, (np.repeat(np.arange(n_out), idx.shape[1]), idx.ravel()),
                  w.ravel().astype(x.dtype))
        pre, post = math.prod(x.shape[:axis]), math.prod(x.shape[axis + 1:])
        xc = np.ascontiguousarray(x)
        if post == 1:
            y = xc.reshape(pre, n_in) @ m.T
        else:
            y = np.matmul(m, xc.reshape(pre, n_in, post))
        return y.reshape(x.shape[:axis] + (n_out,) + x.shape[axis + 1:])
    wshape = [1] * x.ndim
    wshape[axis] = idx.shape[0]
    acc = None
    for t in range(idx.shape[1]):
        wt = w[:, t]
        if acc is not None and not wt.any():
            continue
        g = np.take(x, idx[:, t], axis=axis)
        g *= wt.astype(g.dtype).reshape(wshape)
        if acc is None:
            acc = g
        else:
            acc += g
    return acc


def _output_geometry(x_shape: tuple[int, ...], spec: _ResizeSpec, scales: np.ndarray | None,
                     sizes: np.ndarray | None) -> tuple[list[int], list[np.float32]]:
    r = len(x_shape)
    axes = [a + r if a < 0 else a for a in spec.axes] if spec.axes else list(range(r))
    sc = [_F32(1)] * r
    out = list(x_shape)
    if scales is not None and scales.size > 0:
        for a, s in zip(axes, np.asarray(scales, dtype=_F32).ravel()):
            sc[a] = _F32(s)
            out[a] = int(_F32(s) * _F32(x_shape[a]))
        return out, sc
    if sizes is None or sizes.size == 0:
        raise ValueError("Resize: either scales or sizes must be given")
    for a, n in zip(axes, np.asarray(sizes).ravel()):
        out[a] = int(n)
        sc[a] = _F32(1) if x_shape[a] == 0 else _F32(n) / _F32(x_shape[a])
    if spec.policy in ("not_larger", "not_smaller"):
        pick = min if spec.policy == "not_larger" else max
        s = pick(sc[a] for a in axes)
        for a in axes:
            sc[a] = s
            out[a] = int(_round_half_away(np.array([s * _F32(x_shape[a])], _F32))[0])
    return out, sc


def _roi_pairs(spec: _ResizeSpec, r: int, roi: np.ndarray | None) -> list[tuple[float, float]]:
    pairs = [(0.0, 1.0)] * r
    if spec.coord != "tf_crop_and_resize" or roi is None or roi.size == 0:
        return pairs
    roi = np.asarray(roi, dtype=np.float64).ravel()
    axes = [a + r if a < 0 else a for a in spec.axes] if spec.axes else list(range(r))
    k = len(axes)
    for i, a in enumerate(axes):
        pairs[a] = (float(roi[i]), float(roi[k + i]))
    return pairs


# Per kernel: the native call's taps for an input shape, scales, sizes and roi (at most this
# many kept).
_TAPS_CACHE_MAX = 32
_NativeTaps = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
_UNCACHED = object()


def _native_taps(x_shape: tuple[int, ...], spec: _ResizeSpec, out: list[int],
                 sc: list[np.float32], pairs: list[tuple[float, float]]
                 ) -> _NativeTaps | None:
    """The last two axes' (index, weight) taps for ``resize2d_f32``, or None when the native
    kernel cannot run this resize (a leading axis resized, values extrapolated)."""
    if len(x_shape) < 2 or list(out[:-2]) != list(x_shape[:-2]):
        return None
    taps: list[np.ndarray] = []
    for a in (len(x_shape) - 2, len(x_shape) - 1):
        if sc[a] == 1 and out[a] == x_shape[a]:
            idx, w = np.arange(out[a], dtype=np.int64)[:, None], None
        else:
            idx, w, extrap = _axis_taps(spec, x_shape[a], out[a], sc[a], pairs[a])
            if extrap is not None:
                return None
        taps.append(np.ascontiguousarray(idx, dtype=np.int64))
        taps.append(np.ones(idx.shape, _F32) if w is None
                    else np.ascontiguousarray(w, dtype=_F32))
    return taps[0], taps[1], taps[2], taps[3]


def _resize(x: np.ndarray, spec: _ResizeSpec, roi: np.ndarray | None,
            scales: np.ndarray | None, sizes: np.ndarray | None,
            cache: dict[tuple, _NativeTaps | None] | None = None) -> np.ndarray:
    out, sc = _output_geometry(x.shape, spec, scales, sizes)
    if list(out) == list(x.shape):
        return x.copy()
    check_allocation(out, x.dtype if x.dtype.kind == "f" else np.float32, "Resize's output")
    pairs = _roi_pairs(spec, x.ndim, roi)
    if spec.mode == "nearest":
        y = x  # a pure gather: any element type, as is
    else:  # interpolation runs in float32 (float64 stays float64)
        y = to_compute(x) if x.dtype.kind == "f" else x.astype(np.float32)
    nat = native() if y.dtype == _F32 and y.size > 0 and cache is not None else None
    if nat is not None and hasattr(nat, "resize2d_f32"):
        key = (x.shape, tuple(out), tuple(sc), tuple(pairs))
        taps = cache.get(key, _UNCACHED)   # (one lookup: a concurrent run may clear it)
        if taps is _UNCACHED:
            taps = _native_taps(x.shape, spec, out, sc, pairs)
            if len(cache) >= _TAPS_CACHE_MAX:
                cache.clear()
            cache[key] = taps
        if taps is not None:
            h, w = x.shape[-2:]
            res = np.empty((*out[:-2], out[-2], out[-1]), dtype=_F32)
            nat.resize2d_f32(np.ascontiguousarray(y).reshape(-1, h, w),
                             res.reshape(-1, out[-2], out[-1]), *taps, intra_threads())
            return res if x.dtype == _F32 else _from_float(res, x.dtype)
    masks = []
    for a in range(x.ndim):
        if sc[a] == 1 and out[a] == x.shape[a]:
            continue
        idx, w, extrap = _axis_taps(spec, x.shape[a], out[a], sc[a], pairs[a])
        y = _apply_axis(y, a, idx, w)
        if extrap is not None:
            shape = [1] * x.ndim
            shape[a] = out[a]
            masks.append(extrap.reshape(shape))
    if masks:
        mask = masks[0]
        for m in masks[1:]:
            mask = mask | m
        np.copyto(y, np.asarray(spec.extrapolation, dtype=y.dtype),
                  where=np.broadcast_to(mask, y.shape))
    return y if y.dtype == x.dtype else _from_float(y, x.dtype)


def _from_float(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Interpolated values in the input's element type (integers rounded and saturated)."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        y = np.clip(np.rint(y), info.min, info.max)
    return y.astype(dtype)


def _resize_predicate(node: NodeView) -> str | None:
    mode = node.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        return f"Resize mode {mode!r} is not supported"
    return None


def _make_resize(legacy: bool):
    def make(node: NodeView, ctx: ProviderContext):
        spec = _resize_spec(node, legacy)
        cache: dict[tuple, _NativeTaps | None] = {}
        if legacy:
            attr_scales = node.attr("scales")
            fixed = None if attr_scales is None else np.asarray(attr_scales, dtype=_F32)

            def kernel_legacy(x: np.ndarray, scales: np.ndarray | None = None) -> np.ndarray:
                return _resize(x, spec, None, fixed if fixed is not None else scales, None, cache)

            return kernel_legacy

        def kernel(x: np.ndarray, roi: np.ndarray | None = None, scales: np.ndarray | None = None,
                   sizes: np.ndarray | None = None) -> np.ndarray:
            return _resize(x, spec, roi, scales, sizes, cache)

        return kernel

    return make


op("Resize", since=10, predicate=_resize_predicate)(_make_resize(legacy=True))
for _v in (11, 13, 18, 19):
    op("Resize", since=_v, predicate=_resize_predicate)(_make_resize(legacy=False))
op("Upsample", since=7, until=9, predicate=_resize_predicate)(_make_resize(legacy=True))


# --------------------------------------------------------------------------------------------
# Pad
# --------------------------------------------------------------------------------------------


def _pad(x: np.ndarray, pads: Sequence[int], mode: str, value: Any,
         axes: Sequence[int] | None) -> np.ndarray:
    r = x.ndim
    axes = list(range(r)) if axes is None else [int(a) + r if a < 0 else int(a) for a in axes]
    k = len(axes)
    begins, ends = [0] * r, [0] * r
    for i, a in enumerate(axes):
        begins[a], ends[a] = int(pads[i]), int(pads[k + i])
    if any(b < 0 for b in begins) or any(e < 0 for e in ends):  # negative pads crop first
        shape = [n + b + e for n, b, e in zip(x.shape, begins, ends)]
        if any(n < 0 for n in shape):
            raise ValueError(f"Pad: pads {list(pads)} give a negative output shape {shape}")
        if any(max(0, -b) + max(0, -e) > n for b, e, n in zip(begins, ends, x.shape)):
            # A crop longer than the axis leaves nothing of x there (onnx's reference and
            # node case test_constant_pad_negative_pads: pads [-4, 2] on 3 elements give one
            # constant_value): the output is all padding, which only constant mode defines.
            if mode != "constant":
                raise ValueError(f"Pad: mode {mode!r} cannot pad an axis cropped away "
                                 f"(pads {list(pads)}, input shape {list(x.shape)})")
            check_allocation(shape, x.dtype, "Pad's output")
            return np.full(shape, np.asarray(0 if value is None else value).astype(x.dtype),
                           dtype=x.dtype)
        x = x[tuple(slice(max(0, -b), n - max(0, -e)) for b, e, n in zip(begins, ends, x.shape))]
        begins = [max(0, b) for b in begins]
        ends = [max(0, e) for e in ends]
    if not any(begins) and not any(ends):
        return x.copy()
    check_allocation([n + b + e for n, b, e in zip(x.shape, begins, ends)], x.dtype,
                     "Pad's output")
    if mode == "constant":
        shape = [n + b + e for n, b, e in zip(x.shape, begins, ends)]
        fill = np.asarray(0 if value is None else value).astype(x.dtype)
        out = np.full(shape, fill, dtype=x.dtype)
        out[tuple(slice(b, b + n) for b, n in zip(begins, x.shape))] = x
        return out
    if mode in ("reflect", "edge", "wrap"):
        return np.pad(x, list(zip(begins, ends)), mode=mode)
    raise ValueError(f"Pad: unsupported mode {mode!r}")


def _pad_predicate(node: NodeView) -> str | None:
    mode = node.attr("mode", "constant")
    allowed = ("constant", "reflect", "edge", "wrap") if node.opset >= 19 else (
        "constant", "reflect", "edge")
    if mode not in allowed:
        return f"Pad mode {mode!r} is not supported at opset {node.opset}"
    return None


@op("Pad", since=1, predicate=_pad_predicate)
@op("Pad", since=2, predicate=_pad_predicate)
def make_pad_attr(node: NodeView, ctx: ProviderContext):
    """Pad-1/2: pads and value are attributes (``paddings`` in Pad-1)."""
    pads = node.attr("pads", node.attr("paddings"))
    mode = node.attr("mode", "constant")
    value = float(node.attr("value", 0.0))
    return lambda x: _pad(x, pads, mode, value, None)


@op("Pad", since=11, predicate=_pad_predicate)
@op("Pad", since=13, predicate=_pad_predicate)
@op("Pad", since=18, predicate=_pad_predicate)
@op("Pad", since=19, predicate=_pad_predicate)
@op("Pad", since=21, predicate=_pad_predicate)
@op("Pad", since=23, predicate=_pad_predicate)
@op("Pad", since=24, predicate=_pad_predicate)
@op("Pad", since=25, predicate=_pad_predicate)
def make_pad(node: NodeView, ctx: ProviderContext):
    """Pad-11+: pads, constant_value and (18+) axes are inputs; wrap mode since 19."""
    mode = node.attr("mode", "constant")

    def kernel(x: np.ndarray, pads: np.ndarray, constant_value: np.ndarray | None = None,
               axes: np.ndarray | None = None) -> np.ndarray:
        value = None
        if constant_value is not None and np.size(constant_value) > 0:
            value = np.asarray(constant_value).ravel()[0]
        return _pad(x, np.asarray(pads).ravel().tolist(), mode, value,
                    None if axes is None else np.asarray(axes).ravel().tolist())

    return kernel
