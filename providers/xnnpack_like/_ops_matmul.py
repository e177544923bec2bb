"""Fully connected and batch matmul ops: own numpy (BLAS) implementations and Kleidi ones.

Fully connected ops multiply activations ``[..., K]`` by a constant ``[K, N]`` weight packed at
compile time (alpha, beta and the bias folded in); batch matmul multiplies two computed
operands with numpy broadcasting over the leading dims. Quantized variants accumulate integer
products exactly (float32 BLAS while every partial sum fits 2**24, else float64).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._ops_base import (
    EXACT_F32,
    F32,
    NO_ACTIVATION,
    Activation,
    Label,
    Op,
    Requantizer,
    Workspace,
    as_f32,
    clamp_kwargs,
)
from ._ops_quant import dynamic_quantize

_F64 = np.dtype(np.float64)


def _rows(a: np.ndarray, k: int, dtype: np.dtype) -> np.ndarray:
    """``a`` as a C-contiguous ``[M, K]`` matrix of ``dtype`` (leading dims folded into M)."""
    return np.ascontiguousarray(a, dtype).reshape(-1, k)


class FCOwn(Op):
    """``act(A' @ W + bias [+ C])`` on numpy BLAS in float32 (float16 converted once each way).

    ``w`` is ``[K, N]`` with alpha folded in; ``bias`` ``[N]`` (beta folded in); ``c_post`` a
    constant C that is not a row vector (added after the product); ``trans_a`` for Gemm.
    """

    def __init__(self, label: Label, w: np.ndarray, bias: np.ndarray | None, act: Activation,
                 out_dtype: np.dtype, trans_a: bool = False,
                 c_post: np.ndarray | None = None) -> None:
        super().__init__(label)
        self.w = np.ascontiguousarray(w, F32)
        self.k, self.n = self.w.shape
        self.bias = None if bias is None else np.asarray(bias, F32)
        self.c_post = None if c_post is None else np.asarray(c_post, F32)
        self.act, self.out_dtype, self.trans_a = act, np.dtype(out_dtype), trans_a

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        a = args[0]
        if self.trans_a:
            a = a.T
        lead = a.shape[:-1]
        y = _rows(a, self.k, F32) @ self.w
        if self.bias is not None:
            y += self.bias
        if self.c_post is not None:
            y += self.c_post
        self.act.apply_(y)
        y = y.reshape(*lead, self.n)
        return y if y.dtype == self.out_dtype else y.astype(self.out_dtype)


class KleidiFC(Op):
    """``pf32_gemm`` / ``pf16_gemm`` fully connected on the Kleidi plain GEMM: the weight and
    bias are packed once; a Relu/Clip epilogue is the kernel's clamp."""

    def __init__(self, label: Label, mod: Any, family: str, variant: str, w: np.ndarray,
                 bias: np.ndarray | None, act: Activation, dtype: np.dtype, threads: int,
                 trans_a: bool = False, c_post: np.ndarray | None = None) -> None:
        super().__init__(label)
        self.dtype = np.dtype(dtype)
        self.k, self.n = w.shape
        pack = getattr(mod, f"pack_{family}")
        self.gemm = getattr(mod, family)
        self.packed = pack(np.ascontiguousarray(w, self.dtype),
                           None if bias is None else np.ascontiguousarray(bias, self.dtype),
                           transpose_b=False, variant=variant)
        self.c_post = None if c_post is None else np.asarray(c_post, F32)
        clamp = act.clamp()
        self.kw = clamp_kwargs(*clamp) if clamp is not None and self.c_post is None else {}
        self.post = Activation() if self.kw else act
        self.threads, self.trans_a = threads, trans_a

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        a = args[0]
        if self.trans_a:
            a = a.T
        lead = a.shape[:-1]
        y = self.gemm(_rows(a, self.k, self.dtype), self.packed, threads=self.threads,
                      **self.kw)
        if self.c_post is not None or self.post:
            yf = as_f32(y)
            if self.c_post is not None:
                yf += self.c_post
            self.post.apply_(yf)
            y = yf.astype(self.dtype, copy=False)
        return y.reshape(*lead, self.n)


class BatchMatMulOwn(Op):
    """``act(A @ B)`` with numpy broadcasting, in float32 (float16 converted once each way)."""

    def __init__(self, label: Label, out_dtype: np.dtype, act: Activation = NO_ACTIVATION
                 ) -> None:
        super().__init__(label)
        self.out_dtype, self.act = np.dtype(out_dtype), act

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        y = self.act.apply_(np.matmul(as_f32(args[0]), as_f32(args[1])))
        return y if y.dtype == self.out_dtype else y.astype(self.out_dtype)


class KleidiBatchMatMul(Op):
    """Batch matmul on the Kleidi plain GEMM: per batch, the right operand is packed (once when
    it is shared by every batch) and multiplied."""

    def __init__(self, label: Label, mod: Any, family: str, variant: str, dtype: np.dtype,
                 threads: int, act: Activation = NO_ACTIVATION) -> None:
        super().__init__(label)
        self.pack = getattr(mod, f"pack_{family}")
        self.gemm = getattr(mod, family)
        self.variant, self.dtype, self.threads = variant, np.dtype(dtype), threads
        clamp = act.clamp()
        self.kw = clamp_kwargs(*clamp) if clamp is not None else {}
        self.post = Activation() if clamp is not None else act

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        a, b = np.asarray(args[0], self.dtype), np.asarray(args[1], self.dtype)
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        out = np.empty(batch + (m, n), self.dtype)
        ys = out.reshape(-1, m, n)
        shared = int(np.prod(b.shape[:-2], dtype=np.int64)) == 1
        b3 = np.broadcast_to(b, batch + (k, n)).reshape(-1, k, n)
        a3 = np.broadcast_to(a, batch + (m, k)).reshape(-1, m, k)
        packed = None
        for i in range(ys.shape[0]):
            if packed is None or not shared:
                packed = self.pack(np.ascontiguousarray(b3[i]), None, transpose_b=False,
                                   variant=self.variant)
            ys[i] = self.gemm(np.ascontiguousarray(a3[i]), packed, threads=self.threads,
                              **self.kw)
        if self.post:
            yf = self.post.apply_(as_f32(out))
            out = yf if yf.dtype == self.dtype else yf.astype(self.dtype)
        return out


def exact_int_matmul(af: np.ndarray, bf: np.ndarray, bmax: float) -> np.ndarray:
    """The exact product of centered integer operands held as floats (float32 BLAS when every
    partial sum fits 2**24, else float64); returned as float64."""
    k = af.shape[-1]
    amax = float(np.abs(af).max()) if af.size else 0.0
    if k * amax * bmax >= EXACT_F32:
        af, bf = af.astype(_F64), bf.astype(_F64)
    lead = af.shape[:-1]
    if af.ndim > 2 and bf.ndim == 2:
        return np.matmul(af.reshape(-1, k), bf).reshape(lead + (bf.shape[-1],)).astype(_F64)
    return np.matmul(af, bf).astype(_F64)


def _centered(x: np.ndarray, zp: Any, axis: int | None = None) -> np.ndarray:
    xf = np.asarray(x).astype(F32)
    if zp is not None:
        z = np.asarray(zp).astype(F32)
        if z.size > 1 and axis is not None:
            shape = [1] * xf.ndim
            shape[axis] = z.size
            z = z.reshape(shape)
        xf -= z
    return xf


class QFCOwn(Op):
    """Quantized fully connected (``pqs8_qc8w_gemm`` on the own path): 8-bit activations with
    a per-tensor zero point times a constant 8-bit ``[K, N]`` weight, an exact integer
    accumulation, then the :class:`Requantizer` (round half to even, saturate)."""

    def __init__(self, label: Label, w: np.ndarray, w_zero_point: Any,
                 rq: Requantizer) -> None:
        super().__init__(label)
        self.w = _centered(w, w_zero_point, 1)
        self.wmax = float(np.abs(self.w).max()) if self.w.size else 0.0
        self.rq = rq

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        return self.rq(exact_int_matmul(self.rq.centered(args[0], F32), self.w, self.wmax))


class DynQuantFCOwn(Op):
    """com.microsoft DynamicQuantizeMatMul with ONNX Runtime's semantics: A quantized per tensor
    to uint8 (as DynamicQuantizeLinear), an exact integer product with the centered constant
    weight, scaled by ``a_scale * b_scale`` in float32, plus the bias."""

    def __init__(self, label: Label, w: np.ndarray, w_scale: np.ndarray, w_zero_point: Any,
                 bias: np.ndarray | None, act: Activation) -> None:
        super().__init__(label)
        zp = None if w_zero_point is None else np.asarray(w_zero_point)
        self.w = _centered(w, zp, 1)
        self.wmax = float(np.abs(self.w).max()) if self.w.size else 0.0
        self.w_scale = np.asarray(w_scale, F32)
        self.bias = None if bias is None else np.asarray(bias, F32)
        self.act = act

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        q, s, z = dynamic_quantize(args[0])
        af = q.astype(F32)
        af -= np.float32(z)
        y = exact_int_matmul(af, self.w, self.wmax).astype(F32)
        y *= (np.float32(s) * self.w_scale).astype(F32)
        if self.bias is not None:
            y += self.bias
        return self.act.apply_(y)


class KleidiDynQuantFC(Op):
    """``qp8_f32_qc8w_gemm`` on the Kleidi qai8dx x qsi8cx kernel: activations quantized per
    row to int8 inside the kernel call, int8 weights packed once with their per-channel scales
    and the bias; fp32 out (a Relu/Clip epilogue is the kernel's clamp)."""

    def __init__(self, label: Label, mod: Any, variant: str, w: np.ndarray, scales: np.ndarray,
                 bias: np.ndarray | None, act: Activation, threads: int) -> None:
        super().__init__(label)
        w = np.ascontiguousarray(w, np.int8)
        self.k, self.n = w.shape
        sc = np.ascontiguousarray(np.broadcast_to(np.asarray(scales, F32).reshape(-1),
                                                  (self.n,)))
        self.packed = mod.pack_qsi8cx(w, sc, None if bias is None else
                                      np.ascontiguousarray(bias, F32), variant=variant)
        self.mod, self.threads = mod, threads
        clamp = act.clamp()
        self.kw = clamp_kwargs(*clamp) if clamp is not None else {}
        self.post = Activation() if clamp is not None else act

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        a = args[0]
        lead = a.shape[:-1]
        y = self.mod.qgemm_qsi8cx(_rows(a, self.k, F32), self.packed, threads=self.threads,
                                  **self.kw)
        return self.post.apply_(y).reshape(*lead, self.n)


class KleidiNBits(Op):
    """``qp8_f32_qb4w_gemm`` on the Kleidi qai8dx x qsi4c32 kernel (MatMulNBits, 4 bits,
    symmetric blocks of 32k): nibbles and block scales packed once."""

    def __init__(self, label: Label, mod: Any, variant: str, b: np.ndarray, scales: np.ndarray,
                 zero_points: np.ndarray | None, bias: np.ndarray | None, k: int, n: int,
                 block_size: int, threads: int) -> None:
        super().__init__(label)
        b3 = np.ascontiguousarray(np.asarray(b, np.uint8).reshape(n, k // block_size,
                                                                  block_size // 2))
        zp = None if zero_points is None else np.ascontiguousarray(
            np.asarray(zero_points, np.uint8).reshape(-1))
        nib, block_scales = mod.matmulnbits_to_qsu4c32(b3, np.ascontiguousarray(scales, F32),
                                                       zp, K=k, block_size=block_size)
        self.packed = mod.pack_qsi4c32(nib, block_scales, None if bias is None else
                                       np.ascontiguousarray(bias, F32), variant=variant)
        self.mod, self.k, self.n, self.threads = mod, k, n, threads

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        a = args[0]
        lead = a.shape[:-1]
        y = self.mod.qgemm_qsi4c32(_rows(a, self.k, F32), self.packed, threads=self.threads)
        return y.reshape(*lead, self.n)


def dequantize_nbits(b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None,
                     k: int, n: int, block_size: int) -> np.ndarray:
    """MatMulNBits' 4-bit weight as a float32 ``[K, N]`` matrix (own path, done once)."""
    blocks = -(-k // block_size)
    packed = np.asarray(b, np.uint8).reshape(n, blocks, -1)
    q = np.empty((n, blocks, packed.shape[2] * 2), np.uint8)
    q[:, :, 0::2] = packed & 0x0F
    q[:, :, 1::2] = packed >> 4
    q = q[:, :, :block_size].astype(F32)
    s = np.asarray(scales, F32).reshape(n, blocks, 1)
    if zero_points is None:
        z = np.float32(8)
    elif np.asarray(zero_points).dtype == np.uint8:
        zb = np.asarray(zero_points, np.uint8).reshape(n, -1)
        zz = np.empty((n, zb.shape[1] * 2), np.uint8)
        zz[:, 0::2] = zb & 0x0F
        zz[:, 1::2] = zb >> 4
        z = zz[:, :blocks].astype(F32).reshape(n, blocks, 1)
    else:
        z = np.asarray(zero_points, F32).reshape(n, blocks, 1)
    w = ((q - z) * s).reshape(n, -1)[:, :k]
    return np.ascontiguousarray(w.T)


class MatMulIntegerOwn(Op):
    """MatMulInteger: ``(A - a_zp) @ (B - b_zp)`` exactly, as int32. Inputs ``a, b [, a_zp]
    [, b_zp]`` by position (``None`` when omitted)."""

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        a, b = args[0], args[1]
        azp = args[2] if len(args) > 2 else None
        bzp = args[3] if len(args) > 3 else None
        af = _centered(a, azp, a.ndim - 2 if azp is not None and np.size(azp) > 1 else None)
        bf = _centered(b, bzp, b.ndim - 1)
        bmax = float(np.abs(bf).max()) if bf.size else 0.0
        return exact_int_matmul(af, bf, bmax).astype(np.int32)


class MatMulIntegerToFloatOwn(Op):
    """com.microsoft MatMulIntegerToFloat: ``(A - a_zp) @ (B - b_zp) * (a_scale * b_scale)
    + bias``. Inputs ``a, b, a_scale, b_scale [, a_zp] [, b_zp] [, bias]``."""

    def run(self, args: Sequence[Any], ws: Workspace) -> np.ndarray:
        a, b, a_s, b_s = args[:4]
        azp = args[4] if len(args) > 4 else None
        bzp = args[5] if len(args) > 5 else None
        bias = args[6] if len(args) > 6 else None
        af = _centered(a, azp)
        bf = _centered(b, bzp, b.ndim - 1)
        bmax = float(np.abs(bf).max()) if bf.size else 0.0
        y = exact_int_matmul(af, bf, bmax).astype(F32)
        y *= (np.asarray(a_s, F32) * np.asarray(b_s, F32)).astype(F32)
        if bias is not None:
            y += np.asarray(bias, F32)
        return y


__all__ = ["FCOwn", "KleidiFC", "BatchMatMulOwn", "KleidiBatchMatMul", "QFCOwn",
           "DynQuantFCOwn", "KleidiDynQuantFC", "KleidiNBits", "dequantize_nbits",
           "MatMulIntegerOwn", "MatMulIntegerToFloatOwn", "exact_int_matmul"]
