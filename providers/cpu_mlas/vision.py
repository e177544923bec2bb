"""Vision kernels for cpu_mlas: GridSample, AffineGrid, Col2Im, DeformConv, RoiAlign,
MaxRoiPool, NonMaxSuppression, LpPool, GlobalLpPool, MaxUnpool, ImageDecoder (with Pillow).

Sampling ops are vectorised over every output position: each interpolation tap is one gather
(``take_along_axis`` on the flattened spatial grid) and one multiply-add with its weight.
RoiAlign's average mode is separable, so each ROI is two small GEMMs with interpolation
matrices (``A_y @ X @ A_x^T``), batched over ROIs of the same image.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from onnxplex import NodeView, ProviderContext

from ._native import native
from ._registry import op
from ._windows import ints
from .nn import FLOATS, _PoolGeometry, _separable, compute_dtype, to_compute

logger = logging.getLogger(__name__)


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# --------------------------------------------------------------------------------------------
# GridSample
# --------------------------------------------------------------------------------------------


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflect coordinates by the near border until inside ``[lo, hi]``."""
    rng = hi - lo
    if rng <= 0:
        return np.full_like(x, lo)
    out = x.copy()
    below, above = x < lo, x > hi
    for m, dx, start, sign in ((below, lo - x, lo, 1), (above, x - hi, hi, -1)):
        if not m.any():
            continue
        n = np.floor(dx / rng)
        r = dx - n * rng
        even = (n % 2) == 0
        v = np.where(even, start + sign * r, (hi if sign == 1 else lo) - sign * r)
        out = np.where(m, v, out)
    return out


def _cubic_coeffs(t: np.ndarray) -> list[np.ndarray]:
    """Keys cubic (A = -0.75) weights of taps -1, 0, 1, 2 for fractional offset ``t``."""
    a = -0.75
    x0, x1, x2, x3 = t + 1, t, 1 - t, 2 - t
    c0 = ((a * x0 - 5 * a) * x0 + 8 * a) * x0 - 4 * a
    c1 = ((a + 2) * x1 - (a + 3)) * x1 * x1 + 1
    c2 = ((a + 2) * x2 - (a + 3)) * x2 * x2 + 1
    c3 = ((a * x3 - 5 * a) * x3 + 8 * a) * x3 - 4 * a
    return [c0, c1, c2, c3]


def _grid_sample(x: np.ndarray, grid: np.ndarray, mode: str, padding: str,
                 align: bool) -> np.ndarray:
    out_dtype = x.dtype
    xc = to_compute(x)
    n, c = x.shape[:2]
    dims = x.shape[2:]
    nd = len(dims)
    out_sp = grid.shape[1:-1]
    p = math.prod(out_sp)
    g = to_compute(grid).reshape(n, p, nd).astype(np.float64)
    coords = []
    for i in range(nd):
        v = g[:, :, nd - 1 - i]  # grid's last axis is (x, y, z): reversed spatial order
        d = dims[i]
        v = (v + 1) / 2 * (d - 1) if align else ((v + 1) * d - 1) / 2
        coords.append(v)
    lo = [0.0 if align else -0.5 for _ in dims]
    hi = [d - 1.0 if align else d - 0.5 for d in dims]
    if mode == "nearest":
        coords = [np.rint(v) for v in coords]
    for i in range(nd):
        v = coords[i]
        if padding == "border":  # only coordinates outside [lo, hi] are clamped
            coords[i] = np.where((v < lo[i]) | (v > hi[i]), np.clip(v, 0, dims[i] - 1), v)
        elif padding == "reflection":
            coords[i] = _reflect(v, lo[i], hi[i])
    # per-dim taps: list of (index array, weight array)
    taps: list[list[tuple[np.ndarray, np.ndarray]]] = []
    for i in range(nd):
        v = coords[i]
        if mode == "nearest":
            taps.append([(v.astype(np.int64), np.ones_like(v))])
            continue
        f = np.floor(v)
        t = v - f
        f = f.astype(np.int64)
        if mode == "linear":
            taps.append([(f, 1 - t), (f + 1, t)])
        else:
            cs = _cubic_coeffs(t)
            taps.append([(f + k - 1, cs[k]) for k in range(4)])
    xf = xc.reshape(n, c, -1)
    y = np.zeros((n, c, p), dtype=xc.dtype)
    strides = [math.prod(dims[i + 1:]) for i in range(nd)]
    for combo in np.ndindex(*[len(t) for t in taps]):
        flat = np.zeros((n, p), dtype=np.int64)
        w = np.ones((n, p), dtype=np.float64)
        for i, k in enumerate(combo):
            idx, wt = taps[i][k]
            d = dims[i]
            if padding == "zeros":
                w = w * ((idx >= 0) & (idx < d))
                idx = np.clip(idx, 0, d - 1)
            elif padding == "border":
                idx = np.clip(idx, 0, d - 1)
            else:
                idx = np.clip(_reflect(idx.astype(np.float64), lo[i], hi[i]).astype(np.int64),
                              0, d - 1)
            flat += idx * strides[i]
            w = w * wt
        vals = np.take_along_axis(xf, flat[:, None, :], axis=2)
        y += vals * w[:, None, :].astype(xc.dtype)
    return y.reshape((n, c) + tuple(out_sp)).astype(out_dtype, copy=False)


_GS_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest",
             "bicubic": "cubic", "cubic": "cubic"}


def _gs_predicate(node: NodeView) -> str | None:
    mode = _s(node.attr("mode", "bilinear" if node.opset < 20 else "linear"))
    if mode not in _GS_MODES:
        return f"GridSample mode {mode!r} is not supported"
    pad = _s(node.attr("padding_mode", "zeros"))
    if pad not in ("zeros", "border", "reflection"):
        return f"GridSample padding_mode {pad!r} is not supported"
    return None


def _make_grid_sample(node: NodeView, ctx: ProviderContext):
    """GridSample-16/20/22: N-D, linear/nearest/cubic, zeros/border/reflection padding."""
    mode = _GS_MODES[_s(node.attr("mode", "bilinear" if node.opset < 20 else "linear"))]
    pad = _s(node.attr("padding_mode", "zeros"))
    align = int(node.attr("align_corners", 0)) == 1
    return lambda x, grid: _grid_sample(x, grid, mode, pad, align)


for _v in (16, 20, 22):
    op("GridSample", since=_v, dtypes={"T1": FLOATS}, predicate=_gs_predicate)(
        _make_grid_sample)


# --------------------------------------------------------------------------------------------
# AffineGrid
# --------------------------------------------------------------------------------------------


@op("AffineGrid", since=20, dtypes={"T1": FLOATS})
def make_affine_grid(node: NodeView, ctx: ProviderContext):
    """AffineGrid-20: ``grid[n, ...] = theta[n] @ (x, y[, z], 1)`` over the normalised grid."""
    align = int(node.attr("align_corners", 0)) == 1

    def kernel(theta, size):
        sz = [int(v) for v in np.asarray(size).reshape(-1)]
        sp = sz[2:]
        nd = len(sp)
        cd = compute_dtype(theta.dtype)

        def base(d):
            if align:
                return np.linspace(-1, 1, d) if d > 1 else np.zeros(1)
            return (np.arange(d) * 2 + 1) / d - 1

        axes = [base(d) for d in sp]  # spatial order (D,) H, W
        mesh = np.meshgrid(*axes, indexing="ij")
        # homogeneous coordinates in (x, y, z) order, then 1
        pts = np.stack([m.reshape(-1) for m in reversed(mesh)] + [np.ones(math.prod(sp))],
                       axis=-1).astype(cd)  # [P, nd + 1]
        th = to_compute(theta)  # [N, nd, nd + 1]
        out = np.matmul(pts[None], th.transpose(0, 2, 1))  # [N, P, nd]
        return out.reshape([sz[0], *sp, nd]).astype(theta.dtype, copy=False)

    return kernel


# --------------------------------------------------------------------------------------------
# Col2Im
# --------------------------------------------------------------------------------------------


@op("Col2Im", since=18, dtypes={"T": FLOATS})
def make_col2im(node: NodeView, ctx: ProviderContext):
    """Col2Im-18: scatter-add column blocks back into the image (one strided add per tap)."""

    def kernel(x, image_shape, block_shape):
        img = [int(v) for v in np.asarray(image_shape).reshape(-1)]
        blk = [int(v) for v in np.asarray(block_shape).reshape(-1)]
        nd = len(img)
        dil = ints(node.attr("dilations"), nd, 1)
        strides = ints(node.attr("strides"), nd, 1)
        pads = ints(node.attr("pads"), 2 * nd, 0)
        n = x.shape[0]
        kprod = math.prod(blk)
        c = x.shape[1] // kprod
        out_sp = [(img[i] + pads[i] + pads[nd + i] - ((blk[i] - 1) * dil[i] + 1)) // strides[i]
                  + 1 for i in range(nd)]
        xc = to_compute(x).reshape((n, c) + tuple(blk) + tuple(out_sp))
        padded = np.zeros((n, c) + tuple(img[i] + pads[i] + pads[nd + i] for i in range(nd)),
                          dtype=xc.dtype)
        for tap in np.ndindex(*blk):
            sl = tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                       for t, d, o, s in zip(tap, dil, out_sp, strides))
            padded[(slice(None), slice(None)) + sl] += xc[(slice(None), slice(None)) + tap]
        crop = tuple(slice(pads[i], pads[i] + img[i]) for i in range(nd))
        y = np.ascontiguousarray(padded[(slice(None), slice(None)) + crop])
        return y.astype(x.dtype, copy=False)

    return kernel


# --------------------------------------------------------------------------------------------
# DeformConv
# --------------------------------------------------------------------------------------------


def _bilinear_zero(xf: np.ndarray, h: int, w: int, py: np.ndarray,
                   px: np.ndarray) -> np.ndarray:
    """Bilinear samples of ``xf [N, C, H*W]`` at pixel coords ``py, px [N, P]`` (taps outside
    the image count as 0) -> ``[N, C, P]``."""
    y0 = np.floor(py)
    x0 = np.floor(px)
    ty, tx = py - y0, px - x0
    y0 = y0.astype(np.int64)
    x0 = x0.astype(np.int64)
    out = None
    for dy, wy in ((0, 1 - ty), (1, ty)):
        yi = y0 + dy
        vy = (yi >= 0) & (yi < h)
        for dx, wx in ((0, 1 - tx), (1, tx)):
            xi = x0 + dx
            valid = vy & (xi >= 0) & (xi < w)
            wgt = (wy * wx * valid).astype(xf.dtype)
            flat = np.clip(yi, 0, h - 1) * w + np.clip(xi, 0, w - 1)
            v = np.take_along_axis(xf, flat[:, None, :], axis=2) * wgt[:, None, :]
            out = v if out is None else out + v
    return out


@op("DeformConv", since=19, dtypes={"T": FLOATS})
@op("DeformConv", since=22, dtypes={"T": FLOATS})
def make_deform_conv(node: NodeView, ctx: ProviderContext):
    """DeformConv-19/22 (2-D): bilinear im2col at offset positions, optional mask, one GEMM
    per group."""
    group = int(node.attr("group", 1))
    og = int(node.attr("offset_group", 1))

    def kernel(x, w, offset, b=None, mask=None):
        out_dtype = x.dtype
        xc, wc = to_compute(x), to_compute(w)
        n, c, h, wd = x.shape
        oc = w.shape[0]
        kh, kw = w.shape[2:]
        ks = node.attr("kernel_shape")
        if ks:
            kh, kw = int(ks[0]), int(ks[1])
        sth, stw = ints(node.attr("strides"), 2, 1)
        dh, dw = ints(node.attr("dilations"), 2, 1)
        pads = ints(node.attr("pads"), 4, 0)
        oh, ow = offset.shape[2:]
        k = kh * kw
        off = to_compute(offset).reshape(n, og, kh, kw, 2, oh, ow)
        base_y = (np.arange(oh) * sth - pads[0])[:, None] + np.zeros((1, ow))
        base_x = (np.arange(ow) * stw - pads[1])[None, :] + np.zeros((oh, 1))
        msk = None if mask is None else to_compute(mask).reshape(n, og, kh, kw, oh * ow)
        cpg = c // og
        cols = np.empty((n, c, k, oh * ow), dtype=xc.dtype)
        for gi in range(og):
            xf = xc[:, gi * cpg:(gi + 1) * cpg].reshape(n, cpg, h * wd)
            for i in range(kh):
                for j in range(kw):
                    py = (base_y + i * dh)[None] + off[:, gi, i, j, 0]
                    px = (base_x + j * dw)[None] + off[:, gi, i, j, 1]
                    v = _bilinear_zero(xf, h, wd, py.reshape(n, -1), px.reshape(n, -1))
                    if msk is not None:
                        v = v * msk[:, gi, i, j][:, None, :]
                    cols[:, gi * cpg:(gi + 1) * cpg, i * kw + j] = v
        cols = cols.reshape(n, group, (c // group) * k, oh * ow)
        wm = wc.reshape(group, oc // group, -1)
        y = np.matmul(wm, cols).reshape(n, oc, oh, ow)
        if b is not None:
            y += to_compute(b).reshape(1, oc, 1, 1)
        return y.astype(out_dtype, copy=False)

    return kernel


# --------------------------------------------------------------------------------------------
# RoiAlign
# --------------------------------------------------------------------------------------------


def _roi_axis(start: float, size: float, pooled: int, grid: int, dim: int):
    """Per-axis sample geometry of one ROI: ``(low, high, w_low, w_high)`` each
    ``[pooled, grid]`` (weights already zero for samples outside the image)."""
    bin_size = size / pooled
    p = np.arange(pooled)[:, None]
    g = np.arange(grid)[None, :]
    v = start + p * bin_size + (g + 0.5) * bin_size / grid
    valid = ~((v < -1.0) | (v > dim))
    v = np.maximum(v, 0)
    low = v.astype(np.int64)
    clamp = low >= dim - 1
    low = np.where(clamp, dim - 1, low)
    high = np.where(clamp, dim - 1, low + 1)
    v = np.where(clamp, low, v)
    lv = v - low
    return low, high, (1 - lv) * valid, lv * valid


def _roi_align(node: NodeView, x: np.ndarray, rois: np.ndarray, batch_idx: np.ndarray,
               half_pixel: bool) -> np.ndarray:
    out_dtype = x.dtype
    xc = to_compute(x)
    mode = _s(node.attr("mode", "avg"))
    oh = int(node.attr("output_height", 1))
    ow = int(node.attr("output_width", 1))
    sr = int(node.attr("sampling_ratio", 0))
    scale = float(node.attr("spatial_scale", 1.0))
    n, c, h, w = x.shape
    r = rois.shape[0]
    y = np.zeros((r, c, oh, ow), dtype=xc.dtype)
    # ROI geometry in float32, as onnxruntime computes it (the bin-grid size is a ceil, so
    # float64 would pick a different grid for e.g. 15 * 0.8f = 12.0000002)
    f32 = np.float32
    off = f32(0.5 if half_pixel else 0.0)
    scale = f32(scale)
    rf = rois.astype(f32)
    for i in range(r):
        sw, sh = rf[i, 0] * scale - off, rf[i, 1] * scale - off
        ew, eh = rf[i, 2] * scale - off, rf[i, 3] * scale - off
        rw, rh = ew - sw, eh - sh
        if not half_pixel:
            rw, rh = max(rw, f32(1)), max(rh, f32(1))
        gh = sr if sr > 0 else int(math.ceil(rh / f32(oh)))
        gw = sr if sr > 0 else int(math.ceil(rw / f32(ow)))
        sw, sh, rw, rh = float(sw), float(sh), float(rw), float(rh)
        if gh <= 0 or gw <= 0:
            continue
        yl, yh, wyl, wyh = _roi_axis(sh, rh, oh, gh, h)
        xl, xh, wxl, wxh = _roi_axis(sw, rw, ow, gw, w)
        img = xc[int(batch_idx[i])]
        if mode == "avg":
            ay = np.zeros((oh, h))
            rows = np.repeat(np.arange(oh), gh)
            np.add.at(ay, (rows, yl.reshape(-1)), wyl.reshape(-1))
            np.add.at(ay, (rows, yh.reshape(-1)), wyh.reshape(-1))
            ax = np.zeros((ow, w))
            rows = np.repeat(np.arange(ow), gw)
            np.add.at(ax, (rows, xl.reshape(-1)), wxl.reshape(-1))
            np.add.at(ax, (rows, xh.reshape(-1)), wxh.reshape(-1))
            ay /= max(gh * gw, 1)
            y[i] = np.matmul(np.matmul(ay.astype(xc.dtype), img), ax.T.astype(xc.dtype))
        else:
            best = None
            ys = ((yl, wyl), (yh, wyh))
            xs = ((xl, wxl), (xh, wxh))
            for yi, wy in ys:
                for xi, wx in xs:
                    v = img[:, yi.reshape(-1)][:, :, xi.reshape(-1)]  # [C, oh*gh, ow*gw]
                    v = v * (wy.reshape(-1)[:, None] * wx.reshape(-1)[None, :]).astype(
                        xc.dtype)
                    best = v if best is None else np.maximum(best, v)
            y[i] = best.reshape(c, oh, gh, ow, gw).max(axis=(2, 4))
    return y.astype(out_dtype, copy=False)


@op("RoiAlign", since=10, dtypes={"T1": FLOATS})
def make_roi_align_10(node: NodeView, ctx: ProviderContext):
    """RoiAlign-10 (no half-pixel shift: opset 10 behaves as output_half_pixel)."""
    return lambda x, rois, batch_indices: _roi_align(node, x, rois, batch_indices, False)


@op("RoiAlign", since=16, dtypes={"T1": FLOATS})
@op("RoiAlign", since=22, dtypes={"T1": FLOATS})
def make_roi_align_16(node: NodeView, ctx: ProviderContext):
    """RoiAlign-16/22: coordinate_transformation_mode half_pixel (default) or
    output_half_pixel; avg or max mode."""
    half = _s(node.attr("coordinate_transformation_mode", "half_pixel")) == "half_pixel"
    return lambda x, rois, batch_indices: _roi_align(node, x, rois, batch_indices, half)


# --------------------------------------------------------------------------------------------
# MaxRoiPool
# --------------------------------------------------------------------------------------------


@op("MaxRoiPool", since=1, dtypes={"T": FLOATS})
@op("MaxRoiPool", since=22, dtypes={"T": FLOATS})
def make_max_roi_pool(node: NodeView, ctx: ProviderContext):
    """MaxRoiPool: max over integer bins of each ROI (``rois [R, 5]``: batch, x1, y1, x2, y2),
    Caffe's semantics as onnxruntime computes them: corners scaled in float32 and rounded half
    away from zero, bin sizes in float32, an empty bin 0."""
    ph_, pw_ = (int(v) for v in node.attr("pooled_shape"))
    scale = np.float32(node.attr("spatial_scale", 1.0))

    def corner(v) -> int:   # (C's round: half away from zero)
        t = float(np.float32(v) * scale)
        return int(math.copysign(math.floor(abs(t) + 0.5), t))

    def kernel(x, rois):
        n, c, h, w = x.shape
        r = rois.shape[0]
        y = np.zeros((r, c, ph_, pw_), dtype=x.dtype)
        for i in range(r):
            b = int(rois[i, 0])
            if not 0 <= b < n:
                raise IndexError(f"MaxRoiPool: roi {i} names batch {b}, outside [0, {n})")
            x1, y1, x2, y2 = (corner(v) for v in rois[i, 1:5])
            rh, rw = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
            bh, bw = np.float32(rh) / np.float32(ph_), np.float32(rw) / np.float32(pw_)
            for p in range(ph_):
                hs = min(max(int(math.floor(np.float32(p) * bh)) + y1, 0), h)
                he = min(max(int(math.ceil(np.float32(p + 1) * bh)) + y1, 0), h)
                if he <= hs:
                    continue
                band = x[b, :, hs:he].max(axis=1)  # [C, W]
                for q in range(pw_):
                    ws = min(max(int(math.floor(np.float32(q) * bw)) + x1, 0), w)
                    we = min(max(int(math.ceil(np.float32(q + 1) * bw)) + x1, 0), w)
                    if we > ws:
                        y[i, :, p, q] = band[:, ws:we].max(axis=1)
        return y

    return kernel


# --------------------------------------------------------------------------------------------
# NonMaxSuppression
# --------------------------------------------------------------------------------------------


@op("NonMaxSuppression", since=10)
@op("NonMaxSuppression", since=11)
def make_nms(node: NodeView, ctx: ProviderContext):
    """NonMaxSuppression-10/11: greedy per (batch, class) in descending score order (ties by
    box index), IoU computed vectorised against the remaining candidates; with the native
    module, the same selection in C++ (``_mlas_native.nms``: a detector's thousands of boxes
    took ~0.4 s a call here, a numpy pass per selected box)."""
    center = int(node.attr("center_point_box", 0)) == 1
    nms_native = getattr(native(), "nms", None)

    def kernel(boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
               score_threshold=None):
        max_out = 0 if max_output_boxes_per_class is None or \
            np.asarray(max_output_boxes_per_class).size == 0 else \
            int(np.asarray(max_output_boxes_per_class).reshape(-1)[0])
        iou_t = 0.0 if iou_threshold is None or np.asarray(iou_threshold).size == 0 else \
            float(np.asarray(iou_threshold).reshape(-1)[0])
        score_t = None if score_threshold is None or np.asarray(score_threshold).size == 0 \
            else float(np.asarray(score_threshold).reshape(-1)[0])
        nb, nc = scores.shape[:2]
        out: list[tuple[int, int, int]] = []
        if max_out <= 0:
            return np.zeros((0, 3), dtype=np.int64)
        bx = boxes.astype(np.float64)
        if center:
            cx, cy, bw, bh = bx[..., 0], bx[..., 1], bx[..., 2], bx[..., 3]
            y1, x1, y2, x2 = cy - bh / 2, cx - bw / 2, cy + bh / 2, cx + bw / 2
        else:
            y1 = np.minimum(bx[..., 0], bx[..., 2])
            y2 = np.maximum(bx[..., 0], bx[..., 2])
            x1 = np.minimum(bx[..., 1], bx[..., 3])
            x2 = np.maximum(bx[..., 1], bx[..., 3])
        if nms_native is not None:   # the same greedy selection in C++ (nms.h)
            corners = np.stack([y1, x1, y2, x2], axis=-1)
            return nms_native(corners, scores.astype(np.float64, copy=False), max_out, iou_t,
                              score_t)
        area = (y2 - y1) * (x2 - x1)
        for b in range(nb):
            for cl in range(nc):
                s = scores[b, cl].astype(np.float64)
                cand = np.arange(s.size)
                if score_t is not None:
                    cand = cand[s[cand] > score_t]
                order = cand[np.argsort(-s[cand], kind="stable")]
                alive = np.ones(order.size, dtype=bool)
                oy1, ox1, oy2, ox2 = y1[b, order], x1[b, order], y2[b, order], x2[b, order]
                oa = area[b, order]
                selected = 0
                for k in range(order.size):
                    if not alive[k]:
                        continue
                    out.append((b, cl, int(order[k])))
                    selected += 1
                    if selected >= max_out:
                        break
                    rest = slice(k + 1, None)
                    ih = np.maximum(0, np.minimum(oy2[k], oy2[rest]) - np.maximum(oy1[k],
                                                                                  oy1[rest]))
                    iw = np.maximum(0, np.minimum(ox2[k], ox2[rest]) - np.maximum(ox1[k],
                                                                                  ox1[rest]))
                    inter = ih * iw
                    union = oa[k] + oa[rest] - inter
                    with np.errstate(divide="ignore", invalid="ignore"):
                        iou = np.where((oa[k] > 0) & (oa[rest] > 0) & (union > 0),
                                       inter / union, 0.0)
                    alive[rest] &= ~(iou > iou_t)
        return np.array(out, dtype=np.int64).reshape(-1, 3)

    return kernel


# --------------------------------------------------------------------------------------------
# LpPool
# --------------------------------------------------------------------------------------------


def _make_lp_pool(dilations: bool):
    def make(node: NodeView, ctx: ProviderContext):
        p = float(node.attr("p", 2))

        def kernel(x):
            out_dtype = x.dtype
            xc = to_compute(x)
            geo = _PoolGeometry(node, x.shape[2:], dilations)
            a = np.abs(xc)
            if p == 2:
                a = a * a
            elif p != 1:
                a = a ** p
            s = _separable(a, geo, 0, np.add)
            if p == 2:
                y = np.sqrt(s)
            elif p == 1:
                y = s
            else:
                y = s ** (1.0 / p)
            return np.ascontiguousarray(y).astype(out_dtype, copy=False)

        return kernel

    return make


def _lp_predicate(node: NodeView) -> str | None:
    if not node.attr("kernel_shape"):
        return "kernel_shape attribute is required"
    return None


for _v in (2, 11):
    op("LpPool", since=_v, dtypes={"T": FLOATS}, predicate=_lp_predicate)(_make_lp_pool(False))
for _v in (18, 22):
    op("LpPool", since=_v, dtypes={"T": FLOATS}, predicate=_lp_predicate)(_make_lp_pool(True))


@op("GlobalLpPool", since=1, dtypes={"T": FLOATS})
@op("GlobalLpPool", since=2, dtypes={"T": FLOATS})
@op("GlobalLpPool", since=22, dtypes={"T": FLOATS})
def make_global_lp_pool(node: NodeView, ctx: ProviderContext):
    """GlobalLpPool: the p-norm over the spatial axes, ``(sum |x|^p)^(1/p)`` (float32 for
    halves; ``p`` a float in GlobalLpPool-1, an int since 2, 2 by default)."""
    p = float(node.attr("p", 2))

    def kernel(x: np.ndarray) -> np.ndarray:
        a = np.abs(to_compute(x)).reshape(x.shape[0], x.shape[1], -1)
        if p == 1:
            y = a.sum(axis=-1)
        elif p == 2:
            y = np.sqrt(np.einsum("ncs,ncs->nc", a, a))
        else:
            y = (a ** p).sum(axis=-1) ** (1.0 / p)
        return y.reshape(x.shape[:2] + (1,) * (x.ndim - 2)).astype(x.dtype, copy=False)

    return kernel


# --------------------------------------------------------------------------------------------
# MaxUnpool
# --------------------------------------------------------------------------------------------


def _make_max_unpool(node: NodeView, ctx: ProviderContext):
    """MaxUnpool-9/11/22: scatter values to their flat MaxPool indices in the output.

    The indices address the output tensor, whose shape is ``output_shape`` when given (the
    shape of the MaxPool input they came from), else the shape inferred from the attributes:
    as onnxruntime and PyTorch's max_unpool do, and as onnx 1.24's conformance case
    test_maxunpool_export_with_output_shape expects (onnx 1.23's indexed the inferred shape
    and padded it at the end). Where two values share an index the later one wins."""
    kshape = [int(k) for k in node.attr("kernel_shape")]
    nd = len(kshape)
    strides = ints(node.attr("strides"), nd, 1)
    pads = ints(node.attr("pads"), 2 * nd, 0)

    def kernel(x, i, output_shape=None):
        if output_shape is None:
            shape = list(x.shape[:2]) + [
                (x.shape[2 + k] - 1) * strides[k] - pads[k] - pads[nd + k] + kshape[k]
                for k in range(nd)]
        else:
            shape = [int(v) for v in np.asarray(output_shape).reshape(-1)]
        if len(shape) != x.ndim or any(n < 0 for n in shape):
            raise ValueError(f"MaxUnpool: output shape {shape} does not fit input shape "
                             f"{list(x.shape)}")
        if np.shape(i) != x.shape:
            raise ValueError(f"MaxUnpool: indices shape {list(np.shape(i))} != input shape "
                             f"{list(x.shape)}")
        size = math.prod(shape)
        flat = np.asarray(i).reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= size):
            raise ValueError(f"MaxUnpool: indices must be in [0, {size}) for output shape "
                             f"{shape}")
        y = np.zeros(size, dtype=x.dtype)
        y[flat] = x.reshape(-1)
        return y.reshape(shape)

    return kernel


for _v in (9, 11, 22):
    op("MaxUnpool", since=_v, dtypes={"T1": FLOATS})(_make_max_unpool)


# --------------------------------------------------------------------------------------------
# ImageDecoder
# --------------------------------------------------------------------------------------------


_IMAGE_EXTRA = "ImageDecoder needs Pillow to decode images: pip install 'onnxplex[image]'"
_PIXEL_FORMATS = ("RGB", "BGR", "Grayscale")


def _image_decoder_predicate(node: NodeView) -> str | None:
    import importlib.util

    if importlib.util.find_spec("PIL") is None:
        return _IMAGE_EXTRA
    fmt = _s(node.attr("pixel_format", "RGB"))
    if fmt not in _PIXEL_FORMATS:
        return f"ImageDecoder pixel_format {fmt!r} is not one of {list(_PIXEL_FORMATS)}"
    return None


@op("ImageDecoder", since=20, predicate=_image_decoder_predicate)
def make_image_decoder(node: NodeView, ctx: ProviderContext):
    """ImageDecoder-20: the encoded bytes of one image (whatever Pillow reads: JPEG, PNG, BMP,
    TIFF, WebP, PNM, JPEG 2000, ...) to ``[H, W, 3]`` uint8 in RGB or BGR order or
    ``[H, W, 1]`` for Grayscale (Pillow's ITU-R 601-2 luma), as onnx's reference decodes."""
    import io

    from PIL import Image, UnidentifiedImageError

    fmt = _s(node.attr("pixel_format", "RGB"))

    def kernel(encoded: np.ndarray) -> np.ndarray:
        data = np.ascontiguousarray(encoded, dtype=np.uint8).tobytes()
        try:
            with Image.open(io.BytesIO(data)) as img:
                img = img.convert("L" if fmt == "Grayscale" else "RGB")
        except (UnidentifiedImageError, Image.DecompressionBombError, OSError, SyntaxError,
                ValueError) as e:
            raise ValueError(f"ImageDecoder: the {len(data)} input bytes are not an image "
                             f"Pillow can decode ({e})") from e
        y = np.asarray(img, dtype=np.uint8)
        if fmt == "Grayscale":
            return np.ascontiguousarray(y[:, :, None])
        return np.ascontiguousarray(y[:, :, ::-1] if fmt == "BGR" else y)

    return kernel
