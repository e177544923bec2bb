"""2-D convolution in NHWC: the provider's own implementations and the Kleidi pointwise path.

Own strategies (chosen once per op from the weight shape and group):

* ``pointwise``: 1x1, group 1, no padding -- one GEMM over the (strided) pixels;
* ``im2col``: group 1 -- the taps of every output pixel gathered into a per-thread column
  buffer (NHWC makes each tap a contiguous channel run), then one GEMM;
* ``depthwise``: one filter per channel -- per-tap multiply-accumulate over whole NHWC planes,
  vectorized over channels;
* ``grouped``: other groups -- the column buffer regrouped, then one batched GEMM.

Padded inputs live in per-thread buffers whose border is zeroed once, when the buffer is made.
The quantized conv (``pqs8_qc8w_gemm``) runs the same strategies on centered integers, exactly
(float32 when every partial sum fits 2**24, else float64), then requantizes with ONNX's rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._ops_base import (
    EXACT_F32,
    F32,
    Activation,
    Label,
    Op,
    Requantizer,
    Workspace,
    clamp_kwargs,
    same_pads,
)

_F64 = np.dtype(np.float64)
_DEPTHWISE_BAND_BYTES = 512 << 10


class ConvGeometry:
    """Kernel size, strides, dilations and padding of a 2-D convolution (or pooling)."""

    def __init__(self, kernel: Sequence[int], strides: Sequence[int] | None,
                 dilations: Sequence[int] | None, pads: Sequence[int] | None,
                 auto_pad: str = "NOTSET", ceil_mode: bool = False) -> None:
        self.kernel = tuple(int(k) for k in kernel)
        self.strides = tuple(int(s) for s in (strides or (1, 1)))
        self.dilations = tuple(int(d) for d in (dilations or (1, 1)))
        p = tuple(int(v) for v in (pads or (0, 0, 0, 0)))
        self.pads = (p[0], p[1], p[2], p[3])       # ONNX order: top, left, bottom, right
        self.auto_pad = auto_pad or "NOTSET"
        self.ceil_mode = bool(ceil_mode)

    def resolve(self, h: int, w: int) -> tuple[tuple[int, int, int, int], int, int]:
        """((top, left, bottom, right) pads, out_h, out_w) for an input of h x w."""
        if self.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            b, e = same_pads((h, w), self.kernel, self.strides, self.dilations,
                             self.auto_pad == "SAME_UPPER")
            pads = (b[0], b[1], e[0], e[1])
        elif self.auto_pad == "VALID":
            pads = (0, 0, 0, 0)
        else:
            pads = self.pads
        outs = []
        for size, k, s, d, lo, hi in zip((h, w), self.kernel, self.strides, self.dilations,
                                         pads[:2], pads[2:]):
            span = size + lo + hi - ((k - 1) * d + 1)
            if self.ceil_mode:
                o = -(-span // s) + 1
                if (o - 1) * s >= size + lo:  # the last window must start inside the input
                    o -= 1
            else:
                o = span // s + 1
            outs.append(max(o, 0))
        return pads, outs[0], outs[1]

    @property
    def pads_1x1(self) -> bool:
        """Whether a 1x1 kernel gets padding (auto_pad never pads a 1x1 kernel)."""
        return self.auto_pad == "NOTSET" and any(self.pads)


def conv_strategy(w_shape: Sequence[int], group: int, geom: ConvGeometry) -> str:
    """The own strategy for weights ``[M, C/group, KH, KW]`` (see the module docstring)."""
    m, cg, kh, kw = w_shape
    if (kh, kw) == (1, 1) and group == 1 and not geom.pads_1x1:
        return "pointwise"
    if group == 1:
        return "im2col"
    return "depthwise" if cg == 1 and m == group else "grouped"


def padded_input(x: np.ndarray, pads: tuple[int, int, int, int], need_h: int, need_w: int,
                 ws: Workspace, key: Any, dtype: np.dtype, fill: float) -> np.ndarray:
    """``x`` (NHWC) inside a per-thread buffer of at least need_h x need_w, bordered by
    ``fill`` (written once, when the buffer is made); ``x`` itself when no border is needed."""
    n, h, w, c = x.shape
    top, left = pads[0], pads[1]
    hp, wp = max(need_h, h + top), max(need_w, w + left)
    if top == left == 0 and hp == h and wp == w:
        return x
    buf = ws.get(key, (n, hp, wp, c), dtype, fill)
    buf[:, top:top + h, left:left + w, :] = x
    return buf


def window(xp: np.ndarray, i: int, j: int, geom: ConvGeometry, oh: int, ow: int) -> np.ndarray:
    """The input pixels tap (i, j) of every output pixel reads: a strided NHWC view."""
    sh, sw = geom.strides
    r0, c0 = i * geom.dilations[0], j * geom.dilations[1]
    return xp[:, r0:r0 + sh * (oh - 1) + 1:sh, c0:c0 + sw * (ow - 1) + 1:sw, :]


class ConvCore:
    """``conv(x) -> [N*OH*OW, M]`` (no bias) in ``dtype``, for weights ``[M, C/group, KH, KW]``."""

    def __init__(self, w: np.ndarray, group: int, geom: ConvGeometry, dtype: np.dtype) -> None:
        m, cg, kh, kw = w.shape
        self.m, self.group, self.geom, self.dtype = m, group, geom, np.dtype(dtype)
        self.c = cg * group
        w = np.asarray(w, self.dtype)
        self.strategy = conv_strategy(w.shape, group, geom)
        if self.strategy == "pointwise":
            self.wmat = np.ascontiguousarray(w.reshape(m, cg).T)            # [C, M]
        elif self.strategy == "im2col":
            self.wmat = np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(-1, m))
        elif self.strategy == "depthwise":
            self.wdw = np.ascontiguousarray(w[:, 0].transpose(1, 2, 0))    # [KH, KW, C]
        else:
            mg = m // group
            # [G, KH*KW*Cg, Mg], rows ordered (kh, kw, c) as the column buffer
            wg = w.reshape(group, mg, cg, kh, kw).transpose(0, 3, 4, 2, 1)
            self.wgrp = np.ascontiguousarray(wg.reshape(group, kh * kw * cg, mg))

    def __call__(self, x: np.ndarray, ws: Workspace, key: Any,
                 band_epilogue: Callable[[np.ndarray], Any] | None = None
                 ) -> tuple[np.ndarray, tuple]:
        """``band_epilogue`` (depthwise only): applied in place to each band of output rows
        while it is in cache; the caller then skips its own epilogue."""
        n, h, w, c = x.shape
        if c != self.c:
            raise ValueError(f"input has {c} channels, the weights expect {self.c}")
        pads, oh, ow = self.geom.resolve(h, w)
        geom, dt = self.geom, self.dtype
        if self.strategy == "pointwise":
            sh, sw = geom.strides
            xs = x if (sh, sw) == (1, 1) else x[:, ::sh, ::sw, :]
            a = np.ascontiguousarray(xs, dt).reshape(-1, c)
            return a @ self.wmat, (n, oh, ow)
        kh, kw = geom.kernel
        xp = padded_input(x, pads, h + pads[0] + pads[2], w + pads[1] + pads[3], ws,
                          (key, "pad"), dt, 0.0)
        if self.strategy == "depthwise":
            return self._depthwise(xp, ws, key, n, oh, ow, c, band_epilogue), (n, oh, ow)
        cols = ws.get((key, "cols"), (n, oh, ow, kh, kw, c), dt)
        for i in range(kh):
            for j in range(kw):
                cols[:, :, :, i, j, :] = window(xp, i, j, geom, oh, ow)
        npix = n * oh * ow
        if self.strategy == "im2col":
            return cols.reshape(npix, kh * kw * c) @ self.wmat, (n, oh, ow)
        g = self.group
        cg = c // g
        a = cols.reshape(npix, kh * kw, g, cg).transpose(2, 0, 1, 3).reshape(g, npix, -1)
        y = np.matmul(a, self.wgrp)                       # [G, NPIX, Mg]
        return np.ascontiguousarray(y.transpose(1, 0, 2)).reshape(npix, self.m), (n, oh, ow)


    def _depthwise(self, xp: np.ndarray, ws: Workspace, key: Any, n: int, oh: int, ow: int,
                   c: int, epilogue: Callable[[np.ndarray], Any] | None) -> np.ndarray:
        """Per-tap multiply-accumulate over bands of output rows small enough to stay in
        cache while every tap passes over them (memory-bound otherwise)."""
        geom, dt = self.geom, self.dtype
        kh, kw = geom.kernel
        sh, sw = geom.strides
        dh, dw = geom.dilations
        y = np.empty((n, oh, ow, c), dt)
        rows = max(1, _DEPTHWISE_BAND_BYTES // max(1, n * ow * c * dt.itemsize))
        tmp = ws.get((key, "tap"), (n, min(rows, oh), ow, c), dt)
        for r0 in range(0, oh, rows):
            nr = min(oh, r0 + rows) - r0
            band, t = y[:, r0:r0 + nr], tmp[:, :nr]
            for i in range(kh):
                for j in range(kw):
                    a, b = r0 * sh + i * dh, j * dw
                    tap = xp[:, a:a + sh * (nr - 1) + 1:sh, b:b + sw * (ow - 1) + 1:sw, :]
                    if i == 0 and j == 0:
                        np.multiply(tap, self.wdw[0, 0], out=band)
                    else:
                        np.multiply(tap, self.wdw[i, j], out=t)
                        band += t
            if epilogue is not None:
                epilogue(band)
        return y.reshape(-1, c)


class ConvOwn(Op):
    """Float NHWC conv: ``act(conv(x, w) + bias [+ z])``, computed in float32.

    Inputs: ``x`` [, ``z``] (the residual of com.microsoft FusedConv, NHWC); constant weights
    are packed here. With ``runtime_weights`` the inputs are ``x, w [, b] [, z]`` and the
    weights are packed per call (weights computed by another partition).
    """

    def __init__(self, label: Label, w: np.ndarray | None, bias: np.ndarray | None, group: int,
                 geom: ConvGeometry, act: Activation, out_dtype: np.dtype, residual: bool,
                 runtime_weights: bool = False, runtime_bias: bool = False) -> None:
        super().__init__(label)
        self.group, self.geom, self.act = group, geom, act
        self.out_dtype, self.residual = np.dtype(out_dtype), residual
        self.runtime_weights, self.runtime_bias = runtime_weights, runtime_bias
        if not runtime_weights:
            self.core = ConvCore(w, group, geom, F32)
            self.bias = None if bias is None else np.asarray(bias, F32)

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        x = args[0]
        if self.runtime_weights:
            core = ConvCore(np.asarray(args[1]), self.group, self.geom, F32)
            bias = np.asarray(args[2], F32) if self.runtime_bias else None
            rest = args[3 if self.runtime_bias else 2:]
        else:
            core, bias, rest = self.core, self.bias, args[1:]

        def epilogue(y: np.ndarray) -> None:
            if bias is not None:
                y += bias
            self.act.apply_(y)

        banded = core.strategy == "depthwise" and not self.residual
        y, (n, oh, ow) = core(x, ws, id(self), epilogue if banded else None)
        y = y.reshape(n, oh, ow, core.m)
        if not banded:
            if bias is not None:
                y += bias
            if self.residual:
                y += rest[0]
            self.act.apply_(y)
        return y if y.dtype == self.out_dtype else y.astype(self.out_dtype)


class KleidiPointwiseConv(Op):
    """1x1 fp32 conv on the Kleidi fp32 GEMM (``pf32_gemm``): pixels are GEMM rows in NHWC,
    so the call needs no transposes; a Relu/Clip epilogue becomes the kernel's clamp."""

    def __init__(self, label: Label, mod: Any, variant: str, w: np.ndarray,
                 bias: np.ndarray | None, strides: Sequence[int], act: Activation,
                 residual: bool, threads: int) -> None:
        super().__init__(label)
        m, c = w.shape[:2]
        self.mod, self.m, self.c = mod, m, c
        self.strides = tuple(strides)
        self.residual, self.threads = residual, threads
        self.packed = mod.pack_gemm_f32(np.ascontiguousarray(w.reshape(m, c), F32),
                                        None if bias is None else
                                        np.ascontiguousarray(bias, F32),
                                        transpose_b=True, variant=variant)
        clamp = act.clamp()
        self.kw = clamp_kwargs(*clamp) if clamp is not None and not residual else {}
        self.post = Activation() if self.kw else act

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        x = args[0]
        sh, sw = self.strides
        xs = x if (sh, sw) == (1, 1) else x[:, ::sh, ::sw, :]
        n, oh, ow, _ = xs.shape
        a = np.ascontiguousarray(xs, F32).reshape(-1, self.c)
        y = self.mod.gemm_f32(a, self.packed, threads=self.threads, **self.kw)
        y = y.reshape(n, oh, ow, self.m)
        if self.residual:
            y += args[1]
        return self.post.apply_(y)


class QConvOwn(Op):
    """Quantized NHWC conv (``pqs8_qc8w_gemm`` on the own path): 8-bit activations with a
    per-tensor zero point, 8-bit weights (per-channel or per-tensor scale), an exact integer
    accumulation (float32 BLAS when every partial sum fits 2**24, else float64), then the
    :class:`Requantizer` (ONNX rounding: half to even, saturate)."""

    def __init__(self, label: Label, w: np.ndarray, w_zero_point: np.ndarray | None,
                 group: int, geom: ConvGeometry, rq: Requantizer) -> None:
        super().__init__(label)
        wc = np.asarray(w, np.float64)
        if w_zero_point is not None:
            z = np.asarray(w_zero_point, np.float64)
            wc = wc - (z.reshape(-1, 1, 1, 1) if z.size > 1 else z)
        k = wc[0].size
        wmax = float(np.abs(wc).max()) if wc.size else 0.0
        # |x - zero point| <= 255 for 8-bit activations
        exact_f32 = k * 255.0 * wmax < EXACT_F32
        self.core = ConvCore(wc, group, geom, F32 if exact_f32 else _F64)
        self.rq = rq

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        acc, (n, oh, ow) = self.core(self.rq.centered(args[0], self.core.dtype), ws, id(self))
        return self.rq(acc).reshape(n, oh, ow, self.core.m)
