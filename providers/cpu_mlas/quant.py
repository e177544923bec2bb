"""Quantization kernels for cpu_mlas: MatMulInteger, DynamicQuantizeLinear, QuantizeLinear,
DequantizeLinear and com.microsoft MatMulNBits.

Integer matmuls run on the native integer GEMM (``_mlas_native``: AVX-512 VNNI, AVX2 or
portable C++, B prepacked once per session) when the module is built and the operands have
its shapes (2-D B, per-tensor or per-column B zero point, per-tensor or per-row A zero point).
Otherwise they run on float BLAS and stay exact: operands are small integers, so a float32
GEMM is exact while ``K * max|a| * max|b| < 2**24`` (every partial sum is an integer float32
holds exactly) and float64 covers the rest. Both paths give the same int32 results.
MatMulNBits dequantizes its constant weight once at session start into a float32 ``[K, N]``
matrix; each run is then one GEMM.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from onnx import TensorProto as TP

from onnxplex import NodeView, ProviderContext, prepacked
from onnxplex._dtypes import elem_type_name, np_dtype

from . import _blas
from ._native import native
from ._registry import op

logger = logging.getLogger(__name__)

_F32 = np.float32
_EXACT_F32 = float(2 ** 24)


def _present(module: Any, *names: str) -> list[Any]:
    """The attributes of ``module`` that exist (newer onnx / ml_dtypes add types)."""
    return [getattr(module, n) for n in names if hasattr(module, n)]


_INT_TARGETS = {TP.INT8, TP.UINT8, TP.INT16, TP.UINT16, TP.INT32,
                *_present(TP, "INT4", "UINT4", "INT2", "UINT2")}
_FLOAT8 = {TP.FLOAT8E4M3FN, TP.FLOAT8E4M3FNUZ, TP.FLOAT8E5M2, TP.FLOAT8E5M2FNUZ}
_FLOAT4 = set(_present(TP, "FLOAT4E2M1"))
_QUANT_TYPES = frozenset((_INT_TARGETS | _FLOAT8 | _FLOAT4) - {TP.INT32})
_DEQUANT_TYPES = frozenset(_INT_TARGETS | _FLOAT8 | _FLOAT4)
_SUB_BYTE_INTS = tuple(np.dtype(t) for t in _present(ml_dtypes, "int4", "uint4", "int2",
                                                      "uint2"))
_FLOAT4_DT = tuple(np.dtype(t) for t in _present(ml_dtypes, "float4_e2m1fn"))


def _int_range(dt: np.dtype) -> tuple[int, int]:
    info = ml_dtypes.iinfo(dt) if dt.kind not in "iu" else np.iinfo(dt)
    return int(info.min), int(info.max)


def _is_int(dt: np.dtype) -> bool:
    return dt.kind in "iu" or dt in _SUB_BYTE_INTS


# --------------------------------------------------------------------------------------------
# MatMulInteger
# --------------------------------------------------------------------------------------------


def _centered(x: np.ndarray, zp: np.ndarray | None, row_zp: bool) -> np.ndarray:
    """``x - zero_point`` as float32 (exact: |values| <= 255)."""
    xf = x.astype(_F32)
    if zp is not None:
        z = np.asarray(zp).astype(_F32)
        if row_zp and z.ndim == 1 and z.size > 1:
            z = z.reshape(-1, 1)  # per-row zero point of A: [M] -> [M, 1]
        xf -= z
    return xf


def _exact_matmul(af: np.ndarray, bf: np.ndarray, bmax: float) -> np.ndarray:
    k = af.shape[-1]
    amax = float(np.abs(af).max()) if af.size else 0.0
    if k * amax * bmax < _EXACT_F32:
        y = np.matmul(af, bf) if not (af.ndim > 2 and bf.ndim == 2) else \
            np.matmul(af.reshape(-1, k), bf).reshape(af.shape[:-1] + (bf.shape[-1],))
    else:
        y = np.matmul(af.astype(np.float64), bf.astype(np.float64))
    return np.asarray(y).astype(np.int32)


_I8 = (np.dtype(np.int8), np.dtype(np.uint8))
_SIGNED, _UNSIGNED = _I8   # (one object each: compared by identity)


def scalar_zero_point(zp: np.ndarray | None) -> int:
    """A per-tensor zero point (None: 0) as the native kernels take it."""
    return 0 if zp is None else int(np.asarray(zp).reshape(-1)[0])


def _bias_i32(b: np.ndarray | None) -> np.ndarray | None:
    return None if b is None else np.asarray(b).astype(np.int32).reshape(-1)


_AMX_MIN_K = 64
"""AMX multiplies K in steps of 64: below this a B packed for it does mostly padding, and the
VNNI kernel (steps of 4) was faster (3136 x 16 x 72: 65 against 97 us; at K = 72, AMX led)."""


_AMX_MIN_ROWS = 16
"""An AMX tile holds 16 rows of A: a product of fewer rows (a batch-1 classifier, a
squeeze-excite block's 1x1 convs on a 1x1 image) runs on the VNNI kernel instead (1 x 1024 x
1000: 60 against 20 us)."""


def native_pack_b(b: np.ndarray, zero_point: np.ndarray | None, *,
                  short_k: bool = False, rows: int | None = None) -> Any | None:
    """``b`` [K, N] (int8/uint8) packed for the native integer GEMM, or None when the module
    is not available or the operands have another form (then the numpy path runs).
    ``short_k``: a K below :data:`_AMX_MIN_K` is packed for the VNNI kernel rather than AMX
    (callers whose products are many rows of short K: a 1x1 conv's). ``rows``: the product's
    rows (A's), when the graph's static shapes tell them: below :data:`_AMX_MIN_ROWS`, VNNI."""
    nat = native()
    b = np.asarray(b)
    if nat is None or b.ndim != 2 or b.dtype not in _I8:
        return None
    if zero_point is not None:
        zero_point = np.asarray(zero_point)
        if zero_point.dtype not in _I8 or zero_point.size not in (1, b.shape[1]):
            return None
        zero_point = zero_point.reshape(-1)
    few_rows = rows is not None and rows < _AMX_MIN_ROWS
    vnni = (few_rows or (short_k and b.shape[0] < _AMX_MIN_K)) and nat.isa() == "amx" \
        and nat.isa_available("avx512vnni")
    return nat.pack_b(b, zero_point, isa="avx512vnni" if vnni else "",
                      threads=_blas.intra_threads())


class FewRowsPacking:
    """A weight packed for the native GEMM whose products' rows the graph does not fix (a
    symbolic batch): packed for the CPU's best variant, and for VNNI too the first time a
    product of fewer than :data:`_AMX_MIN_ROWS` rows asks (:meth:`for_rows`), when the best
    is AMX. The weight is kept for that (such weights are small: classifiers, squeeze-excite
    convs)."""

    __slots__ = ("primary", "_b", "_zp", "_few")

    def __init__(self, primary: Any, b: np.ndarray, zero_point: np.ndarray | None) -> None:
        self.primary, self._b, self._zp, self._few = primary, b, zero_point, None

    def for_rows(self, m: int) -> Any:
        if m >= _AMX_MIN_ROWS or self.primary.isa != "amx":
            return self.primary
        few = self._few
        if few is None:   # (two runs racing here each pack it once; either result is right)
            few = self._few = native_pack_b(self._b, self._zp, rows=m) or self.primary
        return few


def packed_for_rows(b: np.ndarray, zero_point: np.ndarray | None, *, short_k: bool = False,
                    rows: int | None = None, few_possible: bool = False) -> Any | None:
    """:func:`native_pack_b`, as a :class:`FewRowsPacking` when ``few_possible`` (the rows are
    not known and may be few) and the packing is AMX's; call ``for_rows(m)`` on the result
    when it is one."""
    packed = native_pack_b(b, zero_point, short_k=short_k, rows=rows)
    if packed is None or not few_possible or rows is not None or packed.isa != "amx":
        return packed
    return FewRowsPacking(packed, b, None if zero_point is None else np.asarray(zero_point))


def _for_rows(packed: Any, m: int) -> Any:
    return packed.for_rows(m) if isinstance(packed, FewRowsPacking) else packed


def native_a_zero_point(zp: np.ndarray | None, a_shape: tuple[int, ...],
                        per_row: bool) -> tuple[bool, np.ndarray | None]:
    """``(usable, zp)``: A's zero point as the native GEMM takes it (None, 1 value, or one per
    row of the flattened ``[rows, K]`` A), or ``usable=False`` for a form it does not take."""
    if zp is None:
        return True, None
    zp = np.asarray(zp)
    if zp.dtype not in _I8:
        return False, None
    if zp.size == 1:
        return True, zp.reshape(1)
    if per_row and zp.ndim == 1 and len(a_shape) >= 2 and zp.size == a_shape[-2]:
        return True, np.tile(zp, int(np.prod(a_shape[:-2], dtype=np.int64)))
    return False, None


def native_rows(a: np.ndarray) -> np.ndarray:
    """``a [..., K]`` as a C-contiguous ``[rows, K]`` matrix."""
    return np.ascontiguousarray(a).reshape(-1, a.shape[-1]) if a.ndim != 2 else \
        np.ascontiguousarray(a)


@op("MatMulInteger", since=10, dtypes={"T1": {TP.UINT8, TP.INT8}, "T2": {TP.UINT8, TP.INT8}})
def make_matmul_integer(node: NodeView, ctx: ProviderContext):
    """MatMulInteger: ``(A - a_zp) @ (B - b_zp)`` in int32, exactly (native integer GEMM, or
    float BLAS)."""
    b_info, bzp_info = node.input(1), node.input(3)
    packed = None
    native_b = None
    threads = _blas.native_threads(ctx.intra_op_num_threads)
    if b_info is not None and b_info.is_const and (bzp_info is None or bzp_info.is_const):
        bzp = None if bzp_info is None else bzp_info.const
        native_b = native_pack_b(b_info.const, bzp)
        if native_b is None:
            bf = _centered(b_info.const, bzp, False)
            packed = (bf, float(np.abs(bf).max()) if bf.size else 0.0)

    def kernel(a, b, a_zero_point=None, b_zero_point=None) -> np.ndarray:
        pb = native_b if native_b is not None or packed is not None else \
            native_pack_b(b, b_zero_point)
        if pb is not None:
            ok, azp = native_a_zero_point(a_zero_point, a.shape, True)
            if ok:
                y = native().qgemm_i32(native_rows(a), azp, pb, threads)
                return y.reshape(a.shape[:-1] + (pb.n,))
        af = _centered(a, a_zero_point, True)
        if packed is not None:
            bf, bmax = packed
        else:
            bf = _centered(b, b_zero_point, False)
            bmax = float(np.abs(bf).max()) if bf.size else 0.0
        return _exact_matmul(af, bf, bmax)

    return kernel


# --------------------------------------------------------------------------------------------
# DynamicQuantizeLinear
# --------------------------------------------------------------------------------------------


@op("DynamicQuantizeLinear", since=11, dtypes={"T1": {TP.FLOAT}})
def make_dynamic_quantize_linear(node: NodeView, ctx: ProviderContext):
    """DynamicQuantizeLinear: uint8 with a scale/zero point covering ``[min(0,x), max(0,x)]``."""

    def kernel(x: np.ndarray):
        x = np.asarray(x, dtype=_F32)
        lo = min(_F32(0), x.min()) if x.size else _F32(0)
        hi = max(_F32(0), x.max()) if x.size else _F32(0)
        scale = _F32(1) if hi == lo else _F32((hi - lo) / _F32(255))
        zp = np.rint(np.clip(_F32(0) - lo / scale, 0, 255))
        y = x / scale
        np.rint(y, out=y)
        np.clip(y, -zp, 255 - zp, out=y)
        q = np.add(y, zp, out=np.empty(y.shape, np.uint8), casting="unsafe")
        return (q, np.asarray(scale, dtype=_F32), np.asarray(zp, dtype=np.uint8))

    return kernel


# --------------------------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear
# --------------------------------------------------------------------------------------------


def _param(p: np.ndarray, x_shape: tuple[int, ...], axis: int, block_size: int,
           dtype: Any) -> np.ndarray:
    """A scale or zero point shaped to broadcast against ``x``: per-tensor, per-axis, blocked."""
    p = np.asarray(p)
    if p.size == 1:
        return p.reshape(()).astype(dtype)
    r = len(x_shape)
    ax = axis + r if axis < 0 else axis
    if p.ndim == r and r > 1 or block_size > 0:  # blocked
        bs = block_size if block_size > 0 else -(-x_shape[ax] // p.shape[ax])
        p = np.repeat(p, bs, axis=ax)
        p = p[tuple(slice(0, n) if i == ax else slice(None) for i, n in enumerate(x_shape))]
        return p.astype(dtype)
    shape = [1] * r
    shape[ax] = p.size
    return p.reshape(shape).astype(dtype)


def _quantize_output_dtype(node: NodeView) -> np.dtype | None:
    zp = node.input(2)
    if zp is not None and zp.elem_type is not None:
        return np_dtype(zp.elem_type)
    od = int(node.attr("output_dtype", 0))
    if od:
        return np_dtype(od)
    if zp is None:
        return np.dtype(np.uint8)
    out = node.outputs[0]
    return None if out is None or out.dtype is None else out.dtype


def _q_types(node: NodeView) -> str | None:
    out = node.outputs[0]
    et = out.elem_type if out is not None else None
    if et is None and node.input(2) is not None:
        et = node.input(2).elem_type
    if et is not None and et not in _QUANT_TYPES:
        return f"QuantizeLinear to element type {et} is not supported"
    return None


def _dq_types(node: NodeView) -> str | None:
    x = node.input(0)
    if x is not None and x.elem_type is not None and x.elem_type not in _DEQUANT_TYPES:
        return f"DequantizeLinear from element type {x.elem_type} is not supported"
    return None


def _per_tensor_8bit(q_type: np.dtype, scale: np.ndarray,
                     zp: np.ndarray | None) -> tuple[float, int] | None:
    """(scale, zero point) when an 8-bit (de)quantization is per tensor with a float32 scale
    and the native kernels run it (the same float32 arithmetic as the numpy path), else
    None."""
    if q_type not in _I8 or native() is None or not hasattr(native(), "quantize_8bit"):
        return None
    scale = np.asarray(scale)
    if scale.size != 1 or scale.dtype != _F32:
        return None
    if zp is None:
        return float(scale.reshape(-1)[0]), 0
    zp = np.asarray(zp)
    if zp.size != 1 or zp.dtype != q_type:
        return None
    return float(scale.reshape(-1)[0]), int(zp.reshape(-1)[0])


def _quantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, target: np.dtype,
              axis: int, block_size: int, saturate: bool, precision: np.dtype) -> np.ndarray:
    prec = np.dtype(precision)
    if prec not in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        prec = np.dtype(_F32)
    s = _param(scale, x.shape, axis, block_size, prec)
    xs = x.astype(prec) if x.dtype != prec else x
    q = np.divide(xs, s, dtype=_F32) if prec.itemsize == 4 else \
        np.divide(xs.astype(_F32), s.astype(_F32)).astype(prec).astype(_F32)
    q = np.asarray(q)   # (a 0-d quotient is a numpy scalar, which the in-place steps refuse)
    if _is_int(target):
        np.rint(q, out=q)
        lo, hi = _int_range(target)
        nan = np.isnan(q)
        if zp is None:
            np.clip(q, lo, hi, out=q)
            if nan.any():   # NaN: the bottom of the range, as onnxruntime's MLAS gives it
                q[nan] = lo
            return q.astype(target)
        z = _param(zp, x.shape, axis, block_size, _F32)
        np.clip(q, lo - z, hi - z, out=q)  # saturate before adding: the sum fits the target
        if nan.any():
            q[nan] = np.broadcast_to(lo - z, q.shape)[nan]
        if np.dtype(target).kind in "iu":
            return np.add(q, z, out=np.empty(q.shape, target), casting="unsafe")
        q += z
        return q.astype(target)
    if zp is not None:
        q += _param(zp, x.shape, axis, block_size, _F32)
    fmax = float(ml_dtypes.finfo(target).max)
    if target in _FLOAT4_DT:  # no inf/nan encodings: always saturates
        q = np.clip(q, -fmax, fmax)
    elif saturate:  # +-inf saturate too, for the fnuz types as well (as ORT and onnx do)
        q = np.clip(q, -fmax, fmax)
    return q.astype(target)


def _make_quantize(node: NodeView, ctx: ProviderContext):
    """QuantizeLinear: ``saturate(round_half_even(x / scale) + zero_point)``."""
    axis = int(node.attr("axis", 1))
    block_size = int(node.attr("block_size", 0))
    saturate = int(node.attr("saturate", 1)) == 1
    precision = int(node.attr("precision", 0))
    prec = np_dtype(precision) if precision else None
    # Opset 23 made the division's precision explicit (the `precision` attribute, else the
    # scale's type). Before it, divide in float32 as ONNX Runtime does.
    scale_precision = node.opset >= 23
    target_c = _quantize_output_dtype(node)

    def kernel(x: np.ndarray, y_scale: np.ndarray, y_zero_point: np.ndarray | None = None):
        target = y_zero_point.dtype if y_zero_point is not None else target_c
        if target is None:
            target = np.dtype(np.uint8)
        p = prec if prec is not None else (np.asarray(y_scale).dtype if scale_precision
                                           else np.dtype(_F32))
        fast = _per_tensor_8bit(np.dtype(target), y_scale, y_zero_point)
        if fast is not None and x.dtype == _F32 and np.dtype(p) == _F32:
            return native().quantize_8bit(np.ascontiguousarray(x), fast[0], fast[1],
                                          np.dtype(target) == np.int8).reshape(x.shape)
        return _quantize(x, y_scale, y_zero_point, np.dtype(target), axis, block_size,
                         saturate, p)

    return kernel


def _dequantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, out: np.dtype,
                axis: int, block_size: int) -> np.ndarray:
    s = _param(scale, x.shape, axis, block_size, _F32)
    if x.dtype == np.int32 and zp is not None:
        xf = (x.astype(np.int64) - _param(zp, x.shape, axis, block_size, np.int64)).astype(_F32)
    elif zp is not None and x.dtype.kind in "iu":
        xf = np.subtract(x, _param(zp, x.shape, axis, block_size, x.dtype), dtype=_F32)
    else:
        xf = x.astype(_F32)
        if zp is not None:
            xf -= _param(zp, x.shape, axis, block_size, _F32)
    xf *= s
    return xf.astype(out, copy=False)


def _make_dequantize(node: NodeView, ctx: ProviderContext):
    """DequantizeLinear: ``(x - zero_point) * scale`` (per-tensor, per-axis or blocked)."""
    axis = int(node.attr("axis", 1))
    block_size = int(node.attr("block_size", 0))
    od = int(node.attr("output_dtype", 0))
    out_c = np_dtype(od) if od else None

    def kernel(x: np.ndarray, x_scale: np.ndarray, x_zero_point: np.ndarray | None = None):
        out = out_c
        if out is None:
            sd = np.asarray(x_scale).dtype
            out = sd if sd in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)) else \
                np.dtype(_F32)
        fast = _per_tensor_8bit(x.dtype, x_scale, x_zero_point)
        if fast is not None and out == _F32:
            return native().dequantize_8bit(x, fast[0], fast[1])
        return _dequantize(x, x_scale, x_zero_point, out, axis, block_size)

    return kernel


for _v in (10, 13, 19, 21, 23, 24, 25):
    op("QuantizeLinear", since=_v, predicate=_q_types)(_make_quantize)
    op("DequantizeLinear", since=_v, predicate=_dq_types)(_make_dequantize)


# --------------------------------------------------------------------------------------------
# com.microsoft MatMulNBits
# --------------------------------------------------------------------------------------------

_NBITS = (2, 4, 8)


def _nbits_predicate(node: NodeView) -> str | None:
    bits = int(node.attr("bits", 4))
    if bits not in _NBITS:
        return f"MatMulNBits with bits={bits} is not supported (supported: 2, 4, 8)"
    g_idx = node.input(4)
    if g_idx is not None:
        return "MatMulNBits with g_idx (act-order) is not supported"
    if node.attr("K") is None or node.attr("N") is None:
        return "MatMulNBits needs the K and N attributes"
    return None


def _unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    """``[..., n]`` uint8 -> ``[..., n * 8 // bits]`` values, low bits first."""
    if bits == 8:
        return packed
    per = 8 // bits
    mask = (1 << bits) - 1
    parts = [(packed >> (bits * i)) & mask for i in range(per)]
    return np.stack(parts, axis=-1).reshape(packed.shape[:-1] + (packed.shape[-1] * per,))


def _nbits_zero_points(zero_points: np.ndarray | None, n: int, k_blocks: int,
                       bits: int) -> np.ndarray:
    """MatMulNBits zero points as float32 ``[N, k_blocks, 1]`` (packed uint8, the scales'
    float type, or absent: the middle of the range)."""
    if zero_points is None:
        return np.full((n, k_blocks, 1), 1 << (bits - 1), dtype=_F32)
    if np.asarray(zero_points).dtype == np.uint8:
        zp = _unpack(np.asarray(zero_points).reshape(n, -1), bits)[:, :k_blocks]
        return zp.astype(_F32).reshape(n, k_blocks, 1)
    return np.asarray(zero_points).astype(_F32).reshape(n, k_blocks, 1)


def _native_nbits4(b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, k: int,
                   n: int, block_size: int) -> _blas.PackedWeight | None:
    """4-bit MatMulNBits weights for the native GEMM, kept at 4 bits (dequantized panel by
    panel as the GEMM reads them: 1/8 of the float32 weight's memory, no float copy to build
    at session creation), or None when the extension lacks it."""
    nat = native()
    if nat is None or not hasattr(nat, "sgemm_pack_b_nbits4") or block_size % 2:
        return None
    k_blocks = -(-k // block_size)
    q = np.ascontiguousarray(np.asarray(b, dtype=np.uint8).reshape(n, k_blocks, -1))
    if q.shape[2] != block_size // 2:
        return None
    sc = np.ascontiguousarray(np.asarray(scales).astype(_F32).reshape(n, k_blocks))
    zp = np.ascontiguousarray(_nbits_zero_points(zero_points, n, k_blocks, 4)[:, :, 0])
    packed = nat.sgemm_pack_b_nbits4(q, sc, zp, k, n, block_size)
    return _blas.PackedWeight(packed, (k, n), False)


def dequantize_nbits(b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None,
                     k: int, n: int, bits: int, block_size: int) -> np.ndarray:
    """MatMulNBits weights ``B[N, k_blocks, blob]`` as a float32 ``[K, N]`` matrix."""
    k_blocks = -(-k // block_size)
    q = _unpack(np.asarray(b, dtype=np.uint8).reshape(n, k_blocks, -1), bits)
    q = q[:, :, :block_size].astype(_F32)
    sc = np.asarray(scales).astype(_F32).reshape(n, k_blocks, 1)
    q -= _nbits_zero_points(zero_points, n, k_blocks, bits)
    q *= sc
    w = q.reshape(n, k_blocks * block_size)[:, :k]
    # [K, N] as a view of the C-ordered [N, K] rows (no transposing copy): BLAS reads either
    # order, and _blas.matmul's few-row path multiplies with exactly these rows
    return np.ascontiguousarray(w).T


def _int8_compute(bits: int, block_size: int, accuracy_level: int) -> bool:
    """Whether onnxruntime computes a MatMulNBits with int8 activations: ``accuracy_level``
    4 asks for it, and onnxruntime 1.32's x86 MLAS has the kernel for 4- and 8-bit weights in
    blocks of 16 to 256 and 2-bit ones in blocks of 32 to 128 (each checked against it: with
    the kernel, outputs move by ~5e-3 of their scale; elsewhere it computes in float)."""
    if accuracy_level != 4:
        return False
    low, high = (32, 128) if bits == 2 else (16, 256)
    return low <= block_size <= high


def _int8_rounded(a: np.ndarray, block: int) -> np.ndarray:
    """``a`` [M, K] float32 as the int8 activations onnxruntime computes with at accuracy
    level 4, dequantized: per block of ``block`` values along K, a scale of max|a| / 127 and
    values rounded half to even to multiples of it (a block of zeros stays zero)."""
    m, k = a.shape
    blocks = -(-k // block)
    padded = np.zeros((m, blocks * block), _F32)
    padded[:, :k] = a
    v = padded.reshape(m, blocks, block)
    top = np.abs(v).max(axis=2, keepdims=True)
    inverse = np.divide(np.float32(127), top, out=np.zeros_like(top), where=top != 0)
    v *= inverse
    np.rint(v, out=v)
    v *= top / np.float32(127)
    return padded[:, :k]


@op("MatMulNBits", domain="com.microsoft", since=1,
    dtypes={0: {TP.FLOAT, TP.FLOAT16}}, predicate=_nbits_predicate)
def make_matmul_nbits(node: NodeView, ctx: ProviderContext):
    """com.microsoft MatMulNBits: ``Y = A @ dequant(B).T (+ bias)``, weight dequantized once;
    at ``accuracy_level`` 4, A rounded to int8 per block first, as onnxruntime computes it
    (:func:`_int8_compute`)."""
    k = int(node.attr("K"))
    n = int(node.attr("N"))
    bits = int(node.attr("bits", 4))
    block_size = int(node.attr("block_size"))
    int8_a = _int8_compute(bits, block_size, int(node.attr("accuracy_level", 0)))
    b_info, s_info, z_info, bias_info = node.input(1), node.input(2), node.input(3), node.input(5)
    consts_known = all(v is None or v.is_const for v in (s_info, z_info)) and b_info.is_const
    w_packed = native_w = None
    if consts_known and bits == 4:
        native_w = _native_nbits4(b_info.const, s_info.const,
                                  None if z_info is None else z_info.const, k, n, block_size)
    if consts_known and native_w is None:
        w_packed = dequantize_nbits(b_info.const, s_info.const,
                                    None if z_info is None else z_info.const,
                                    k, n, bits, block_size)
        logger.debug("MatMulNBits %s: dequantized weight [%d, %d]", node.display_name, k, n)
        # The native GEMM's packed copy replaces the dequantized weight (when it is available).
        native_w = _blas.pack_weight(w_packed)
        if native_w is not None:
            w_packed = None
    bias_c = None if bias_info is None or not bias_info.is_const else \
        np.asarray(bias_info.const, dtype=_F32)

    def kernel(a, b, scales, zero_points=None, g_idx=None, bias=None) -> np.ndarray:
        af = a.astype(_F32, copy=False).reshape(-1, k)
        if int8_a:
            af = _int8_rounded(af, block_size)
        if native_w is not None:
            y = _blas.gemm(af, native_w, bias=bias_c if bias is not None else None)
            if bias is not None and bias_c is None:
                y += np.asarray(bias, dtype=_F32)
            return y.reshape(a.shape[:-1] + (n,)).astype(a.dtype, copy=False)
        w = w_packed if w_packed is not None else dequantize_nbits(
            b, scales, zero_points, k, n, bits, block_size)
        y = _blas.matmul(af, w)  # split over the intra-op pool
        if bias is not None:
            y += bias_c if bias_c is not None else np.asarray(bias, dtype=_F32)
        return y.reshape(a.shape[:-1] + (n,)).astype(a.dtype, copy=False)

    return prepacked(kernel, *((1, 2, 3) if native_w is not None else ()))


# --------------------------------------------------------------------------------------------
# MatMulBnb4 (bitsandbytes' FP4 and NF4 4-bit weights, as QLoRA quantizes them)
# --------------------------------------------------------------------------------------------

# The 16 values a 4-bit code stands for, times its block's absmax: FP4 (1 sign, 2 exponent
# bits, 1 mantissa bit, scaled to a largest magnitude of 1) and NF4 (the quantiles of a
# normal distribution, QLoRA's NormalFloat), as bitsandbytes and onnxruntime decode them.
_BNB4_CODES = {
    0: np.array([0.0, 5.208333333e-03, 0.66666667, 1.0, 0.33333333, 0.5, 0.16666667, 0.25,
                 -0.0, -5.208333333e-03, -0.66666667, -1.0, -0.33333333, -0.5, -0.16666667,
                 -0.25], _F32),
    1: np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                 -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                 0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                 0.7229568362236023, 1.0], _F32),
}


def dequantize_bnb4(b: np.ndarray, absmax: np.ndarray, n: int, k: int, block_size: int,
                    quant_type: int) -> np.ndarray:
    """MatMulBnb4's weight ``[N, K]`` as float32: ``B`` holds the N x K values flattened,
    two codes to a byte (high nibble first), one ``absmax`` per ``block_size`` of them."""
    packed = np.asarray(b, np.uint8).reshape(-1)
    codes = np.stack([packed >> 4, packed & 0xF], axis=-1).reshape(-1)[:n * k]
    scale = np.repeat(np.asarray(absmax).astype(_F32).reshape(-1), block_size)[:n * k]
    return (_BNB4_CODES[quant_type][codes] * scale).reshape(n, k)


def _bnb4_predicate(node: NodeView) -> str | None:
    if int(node.attr("quant_type", -1)) not in _BNB4_CODES:
        return f"MatMulBnb4 quant_type {node.attr('quant_type')} is neither 0 (FP4) nor 1 (NF4)"
    block = int(node.attr("block_size", 0))
    if block < 16 or block & (block - 1):
        return f"MatMulBnb4 block_size {block} is not a power of 2 of at least 16"
    return None


@op("MatMulBnb4", domain="com.microsoft", since=1, dtypes={0: {TP.FLOAT, TP.FLOAT16}},
    predicate=_bnb4_predicate)
def make_matmul_bnb4(node: NodeView, ctx: ProviderContext):
    """com.microsoft MatMulBnb4: ``Y = A @ dequant(B).T`` (``transB``, the default) or
    ``A @ dequant(B)``, the ``[N, K]`` weight dequantized once when it is a constant."""
    k, n = int(node.attr("K")), int(node.attr("N"))
    block, quant_type = int(node.attr("block_size")), int(node.attr("quant_type"))
    trans_b = bool(node.attr("transB", 1))
    b_info, s_info = node.input(1), node.input(2)

    def weight(b, absmax) -> np.ndarray:   # as the GEMM takes it: [in, out]
        w = dequantize_bnb4(b, absmax, n, k, block, quant_type)
        return np.ascontiguousarray(w.T) if trans_b else w

    w_const = weight(b_info.const, s_info.const) if b_info.is_const and s_info.is_const \
        else None
    inner = k if trans_b else n

    def kernel(a, b, absmax) -> np.ndarray:
        w = w_const if w_const is not None else weight(b, absmax)
        if a.shape[-1] != inner:
            raise ValueError(f"MatMulBnb4: A's last dimension is {a.shape[-1]}, the weight "
                             f"takes {inner}")
        y = _blas.matmul(a.astype(_F32, copy=False).reshape(-1, inner), w)
        return y.reshape(a.shape[:-1] + (w.shape[1],)).astype(a.dtype, copy=False)

    return prepacked(kernel, 1, 2) if w_const is not None else kernel


# --------------------------------------------------------------------------------------------
# QLinearMatMul
# --------------------------------------------------------------------------------------------

_Q8 = {TP.UINT8, TP.INT8}


def _requantize(acc: np.ndarray, multiplier: np.ndarray, y_zp: np.ndarray | None,
                out: np.dtype) -> np.ndarray:
    """``saturate(round_half_even(float32(acc) * multiplier) + zero_point)`` to ``out``, in
    float32 as onnxruntime (MLAS) requantizes: the sum and the product each rounded to float32
    (the ONNX reference multiplies in float64, which rounds a value lying within a float32
    rounding of a half the other way, one step apart). The product is clamped to the output
    range less the zero point before rounding; a NaN product (a non-finite multiplier) gives
    the bottom of the range, as MLAS's max against it does."""
    zp = np.zeros((), _F32) if y_zp is None else np.asarray(y_zp).astype(_F32)
    lo, hi = _int_range(out)
    f = acc.astype(_F32) * np.asarray(multiplier, _F32)
    f = np.fmin(np.fmax(f, lo - zp), hi - zp)   # (fmax: a NaN gives lo - zp)
    np.rint(f, out=f)
    f += zp
    return f.astype(out)


def _scale_multiplier(a_s: np.ndarray, b_s: np.ndarray, y_s: np.ndarray) -> np.ndarray:
    """``a_scale * b_scale / y_scale`` in the scales' own precision (as the ONNX graph),
    then widened to float64 (exactly: the requantization multiplies by it in float32)."""
    a_s, b_s, y_s = np.asarray(a_s), np.asarray(b_s), np.asarray(y_s)
    dt = a_s.dtype if a_s.dtype.kind == "f" else np.dtype(_F32)
    if dt == np.float64 or dt == _F32 or dt == np.float16:
        m = (a_s * b_s) / y_s
    else:  # bfloat16 etc.: round each step to the scale type
        m = ((a_s.astype(_F32) * b_s.astype(_F32)).astype(dt).astype(_F32)
             / y_s.astype(_F32)).astype(dt)
    return np.asarray(m).astype(np.float64)


def _qlmm_predicate(node: NodeView) -> str | None:
    a, b = node.input(0), node.input(3)
    for v in (a, b):
        if v is not None and v.elem_type is not None and v.elem_type not in _Q8:
            return "QLinearMatMul supports uint8/int8 inputs only"
    return None


def _make_qlinear_matmul(node: NodeView, ctx: ProviderContext):
    """QLinearMatMul-10/21: integer GEMM (exact, on float BLAS), per-tensor / per-row (A) /
    per-column (B) scales and zero points, requantized to the output zero point's type. With
    a constant 2-D B and a per-tensor A and output, on the native integer GEMM with B packed
    once, requantized natively (the same integers and the same float32 requantization)."""
    b_info, bzp_info = node.input(3), node.input(5)
    packed = None
    native_b = None
    threads = _blas.native_threads(ctx.intra_op_num_threads)
    if b_info is not None and b_info.is_const and (bzp_info is None or bzp_info.is_const):
        bf = _centered(b_info.const, None if bzp_info is None else bzp_info.const, False)
        packed = (bf, float(np.abs(bf).max()) if bf.size else 0.0)
        bq = np.asarray(b_info.const)
        if bq.ndim == 2 and hasattr(native(), "requantize_i32"):
            native_b = native_pack_b(bq, None if bzp_info is None else bzp_info.const)

    def kernel(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
               y_zero_point=None):
        out = np.dtype(y_zero_point.dtype if y_zero_point is not None else a.dtype)
        if (native_b is not None and a.ndim >= 2 and a.dtype in _I8 and out in _I8
                and a.shape[-1] == native_b.k and np.size(a_scale) == 1
                and (a_zero_point is None or np.size(a_zero_point) == 1)
                and np.size(y_scale) == 1
                and (y_zero_point is None or np.size(y_zero_point) == 1)
                and np.size(b_scale) in (1, native_b.n)):
            a2 = np.ascontiguousarray(a).reshape(-1, a.shape[-1])
            acc = native().qgemm_i32(
                a2, None if a_zero_point is None else np.asarray(a_zero_point).reshape(1),
                native_b, threads=threads)
            mult = _scale_multiplier(a_scale, np.asarray(b_scale).reshape(-1),
                                     y_scale).reshape(-1)
            y = native().requantize_i32(
                acc.reshape(1, a2.shape[0], native_b.n), None, mult,
                scalar_zero_point(y_zero_point), out == np.int8, False, threads=threads)
            return y.reshape(a.shape[:-1] + (native_b.n,))
        af = _centered(a, a_zero_point, True)
        if packed is not None:
            bf, bmax = packed
        else:
            bf = _centered(b, b_zero_point, False)
            bmax = float(np.abs(bf).max()) if bf.size else 0.0
        acc = _exact_matmul(af, bf, bmax)
        a_s = np.asarray(a_scale)
        if a_s.ndim == 1 and a_s.size > 1:
            a_s = a_s.reshape(-1, 1)  # per-row of A
        m = _scale_multiplier(a_s, b_scale, y_scale)
        return _requantize(acc, m, y_zero_point, out)

    return kernel


for _v in (10, 21):
    op("QLinearMatMul", since=_v, predicate=_qlmm_predicate)(_make_qlinear_matmul)


# --------------------------------------------------------------------------------------------
# com.microsoft QGemm
# --------------------------------------------------------------------------------------------


def _qgemm_predicate(node: NodeView) -> str | None:
    for k in (0, 3):
        v = node.input(k)
        if v is not None and v.elem_type is not None and v.elem_type not in _Q8:
            return "QGemm supports uint8/int8 A and B only"
    return None


@op("QGemm", since=1, domain="com.microsoft", predicate=_qgemm_predicate)
def _make_qgemm(node: NodeView, ctx: ProviderContext):
    """com.microsoft QGemm (onnxruntime's quantizer writes it for a Gemm in QOperator format):
    ``acc = (A' - a_zp) (B' - b_zp) + C`` in int32 (C: int32 at scale ``alpha * a_scale *
    b_scale``), then ``alpha * a_scale * b_scale * acc`` as float32 when there is no
    ``y_scale``, else requantized to ``y_zero_point``'s type (round half to even, saturated).
    A constant B (per-tensor or per-column scale and zero point) is packed once for the native
    integer GEMM; the requantization is the QLinear ops' (the multiplier from the scales in
    their own precision, applied in float32 as onnxruntime applies it)."""
    trans_a = int(node.attr("transA", 0)) == 1
    trans_b = int(node.attr("transB", 0)) == 1
    alpha = float(node.attr("alpha", 1.0))
    threads = _blas.native_threads(ctx.intra_op_num_threads)
    b_info, bzp_info = node.input(3), node.input(5)
    native_b = None
    if b_info is not None and b_info.is_const and (bzp_info is None or bzp_info.is_const):
        bq = np.asarray(b_info.const)
        if bq.ndim == 2 and hasattr(native(), "qgemm_i32"):
            a_shape = node.input(0).shape if node.input(0) is not None else None
            a_rows = (a_shape[1] if trans_a else a_shape[0]) if a_shape and len(a_shape) == 2 \
                else None
            native_b = packed_for_rows(_transposed(bq) if trans_b else np.ascontiguousarray(bq),
                                       None if bzp_info is None else bzp_info.const,
                                       rows=a_rows if isinstance(a_rows, int) else None,
                                       few_possible=not isinstance(a_rows, int))

    def kernel(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None,
               y_zero_point=None):
        a = np.asarray(a).T if trans_a else np.asarray(a)
        n = b.shape[0] if trans_b else b.shape[1]
        packed = None if native_b is None or a.ndim != 2 else _for_rows(native_b, a.shape[0])
        if (packed is not None and a.dtype in _I8 and a.shape[-1] == packed.k
                and np.size(a_scale) == 1
                and (a_zero_point is None or np.size(a_zero_point) == 1)):
            acc = native().qgemm_i32(
                np.ascontiguousarray(a),
                None if a_zero_point is None else np.asarray(a_zero_point).reshape(1),
                packed, threads=threads).reshape(a.shape[0], n)
        else:
            bb = np.asarray(b).T if trans_b else np.asarray(b)
            bf = _centered(bb, b_zero_point, False)
            acc = _exact_matmul(_centered(a, a_zero_point, True), bf,
                                float(np.abs(bf).max()) if bf.size else 0.0)
        if c is not None:
            acc = acc + np.asarray(c, np.int32)
        if y_scale is None:
            scale = np.asarray(a_scale) * np.asarray(b_scale).reshape(-1)
            return (acc.astype(np.float64) * (scale.astype(np.float64) * alpha)).astype(_F32)
        out = np.dtype(y_zero_point.dtype if y_zero_point is not None else a.dtype)
        m = _scale_multiplier(a_scale, np.asarray(b_scale).reshape(-1), y_scale) * alpha
        return _requantize(acc, m, y_zero_point, out)

    return kernel


# --------------------------------------------------------------------------------------------
# ConvInteger / QLinearConv
# --------------------------------------------------------------------------------------------


def _centered_weight(w: np.ndarray, zp: np.ndarray | None) -> np.ndarray:
    wf = np.asarray(w).astype(_F32)
    if zp is not None:
        z = np.asarray(zp).astype(_F32)
        if z.ndim == 1 and z.size > 1:
            z = z.reshape((-1,) + (1,) * (wf.ndim - 1))  # per output channel
        wf -= z
    return wf


@op("ConvInteger", since=10, dtypes={"T1": _Q8, "T2": _Q8})
def make_conv_integer(node: NodeView, ctx: ProviderContext):
    """ConvInteger-10: ``conv(x - x_zp, w - w_zp)`` in int32 (per-channel w_zero_point).

    A one-group 2-D conv of a constant weight runs on the native integer GEMM: the weight
    packed once ([kh * kw * C... as W's rows], its zero points with it), each run's im2col
    rows of x (padding holding x's zero point, so padded taps add 0) times it, in int32 (a
    dynamically quantized vision transformer's patch embedding: a 32 x 32 kernel, K = 3072,
    whose float path had to prove every partial sum fits float32 and re-centered the weight
    each run). Others (groups, 1-D and 3-D, a weight fed at run time) take the exact float
    path, the constant weight's centering done once."""
    from .nn import ConvStatic, _ConvWeights

    group = int(node.attr("group", 1))
    static = ConvStatic(node)
    threads = _blas.native_threads(ctx.intra_op_num_threads)
    w_info, wzp_info = node.input(1), node.input(3)
    const_w = w_info is not None and w_info.is_const and (wzp_info is None or wzp_info.is_const)
    packed = None   # (packed W^T [C * kh * kw, M], kernel shape) for the native GEMM
    # the float path's centered weight, when constant: made when that path first runs (not
    # kept beside the packed one it only backs up)
    weights: list[Any] = [None]
    if const_w:
        w = np.asarray(w_info.const)
        wzp = None if wzp_info is None else np.asarray(wzp_info.const)
        if group == 1 and w.ndim == 4 and w.dtype in _I8:
            packed_b = native_pack_b(_transposed(w.reshape(w.shape[0], -1)), wzp)
            if packed_b is not None:
                packed = (packed_b, tuple(w.shape[2:]))

    def native_conv(x, x_zero_point):
        pb, (kh, kw) = packed
        ok, azp = native_a_zero_point(x_zero_point, (1, 1), False)
        if not ok or x.ndim != 4 or x.dtype not in _I8 or x.shape[1] * kh * kw != pb.k:
            return None
        n, c = x.shape[:2]
        (sh, sw), (dh, dw), pb_, pe, (oh, ow) = static.geometry(x.shape, (kh, kw))
        if oh <= 0 or ow <= 0 or n == 0:
            return np.zeros((n, pb.n, max(oh, 0), max(ow, 0)), np.int32)
        fill = 0 if azp is None else int(azp[0])   # (padded taps: x's zero point, adding 0)
        xp = np.pad(x, ((0, 0), (0, 0), (pb_[0], pe[0]), (pb_[1], pe[1])), constant_values=fill) \
            if any(pb_) or any(pe) else x
        win = np.lib.stride_tricks.sliding_window_view(
            xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
        win = win[:, :, :(oh - 1) * sh + 1:sh, :(ow - 1) * sw + 1:sw, ::dh, ::dw]
        rows = np.ascontiguousarray(win.transpose(0, 2, 3, 1, 4, 5)).reshape(n * oh * ow, -1)
        y = native().qgemm_i32(rows, azp, pb, threads)
        return np.ascontiguousarray(y.reshape(n, oh, ow, pb.n).transpose(0, 3, 1, 2))

    def kernel(x, w, x_zero_point=None, w_zero_point=None):
        if packed is not None:
            y = native_conv(np.asarray(x), x_zero_point)
            if y is not None:
                return y
        xf = _centered(x, None, False)
        if x_zero_point is not None:
            xf -= np.asarray(x_zero_point).astype(_F32)
        cw = weights[0]
        if cw is None:
            cw = _ConvWeights(_centered_weight(w, w_zero_point), group)
            if const_w:
                weights[0] = cw
        return _int_conv(static, xf, cw, x.dtype, w.dtype)

    return kernel


@op("QLinearConv", since=10, dtypes={"T1": _Q8, "T2": _Q8})
def make_qlinear_conv(node: NodeView, ctx: ProviderContext):
    """QLinearConv-10: integer conv + int32 bias, requantized with per-tensor or per-output-
    channel weight scales (see :func:`_qlinear_conv`)."""
    return _qlinear_conv(node, ctx, channels_last=False)


@op("QLinearConv", since=1, domain="com.microsoft", dtypes={0: _Q8})
def make_qlinear_conv_ms(node: NodeView, ctx: ProviderContext):
    """com.microsoft QLinearConv: the ONNX op's inputs and attributes plus ``channels_last``
    (1: X [N, H, W, C] and Y [N, OH, OW, M], what the layout level writes between quantized
    convs)."""
    return _qlinear_conv(node, ctx, channels_last=int(node.attr("channels_last", 0)) == 1)


def _conv_rows(node: NodeView, channels_last: bool) -> tuple[int | None, bool]:
    """The GEMM rows of a conv (batch x output positions) when its output's static shape
    fixes them, and whether they may be few otherwise (the positions are few and the batch is
    symbolic: a squeeze-excite block's 1x1 convs on a 1x1 image)."""
    y = node.outputs[0] if node.outputs else None
    shape = None if y is None else y.shape
    if shape is None or len(shape) < 3:
        return None, False
    spatial = shape[1:-1] if channels_last else shape[2:]
    if not all(isinstance(d, int) for d in spatial):
        return None, False
    positions = int(np.prod(spatial, dtype=np.int64))
    if isinstance(shape[0], int):
        return positions * shape[0], False
    return None, positions < _AMX_MIN_ROWS


def _qlinear_conv(node: NodeView, ctx: ProviderContext, *, channels_last: bool):
    """QLinearConv, channels-first or channels-last.

    With a constant weight (and weight zero point) the weight is prepared once: for a 2-D
    conv of one group, packed for the native integer GEMM, which then runs the conv as
    ``im2col(x) @ W^T`` on the channels-last uint8/int8 image (padding holds x's zero point,
    so padded taps add 0); otherwise centered into float32 convolution weights, exact when
    every partial sum fits float32's 24 bits (checked from the element types' ranges, or
    from the values when those do not prove it)."""
    from .nn import ConvStatic, _ConvWeights

    group = int(node.attr("group", 1))
    static = ConvStatic(node)
    threads = _blas.native_threads(ctx.intra_op_num_threads)
    w_info, wzp_info = node.input(3), node.input(5)
    gemm = None        # (packed W^T [kh * kw * C, M], kernel shape) for the integer GEMM
    float_w = None     # _ConvWeights of the centered weight
    if w_info is not None and w_info.is_const and (wzp_info is None or wzp_info.is_const):
        w = np.asarray(w_info.const)
        wzp = None if wzp_info is None else np.asarray(wzp_info.const)
        if group == 1 and w.ndim == 4 and w.dtype in _I8:
            wt = _taps_by_channel(w)
            rows, few = _conv_rows(node, channels_last)
            packed = packed_for_rows(wt, wzp, short_k=True, rows=rows, few_possible=few)
            if packed is not None and hasattr(native(), "qlinear_conv_u8"):
                gemm = (packed, tuple(w.shape[2:]))
        if gemm is None:
            float_w = _ConvWeights(_centered_weight(w, wzp), group)
    # a 2-D depthwise conv of a constant weight: one native call (qdwconv_u8)
    depthwise = (float_w is not None and float_w.depthwise and len(float_w.kshape) == 2
                 and hasattr(native(), "qdwconv_u8"))
    # (its weights packed once for the 8-bit channels-last kernel, where the CPU has one)
    dw_packed = native().qdw_pack_vnni(float_w.taps.reshape(group, *float_w.kshape)) \
        if depthwise and hasattr(native(), "qdw_pack_vnni") else None

    # The native calls' requantization arguments, from the scales, the output zero point and
    # the bias: computed again only when one of them is another object than the last run's
    # (initializers are the same arrays every run; ~5 us a conv otherwise).
    last: list[Any] = [None]   # (key, arguments): one object, read and replaced whole

    def requant_args(x_scale, ws, y_scale, y_zero_point, b, out) -> tuple:
        key = (x_scale, ws, y_scale, y_zero_point, b, out)
        entry = last[0]
        if entry is not None and all(a is k for a, k in zip(entry[0], key)):
            return entry[1]
        mult = _scale_multiplier(x_scale, np.asarray(ws).reshape(-1), y_scale).reshape(-1)
        tail = (_bias_i32(b), mult, scalar_zero_point(y_zero_point), out == np.int8)
        last[0] = (key, tail)
        return tail

    # (x's shape, dtype, cl, x_scale, x_zero_point, w_scale, y_scale, y_zero_point, b, call):
    # the last native call planned, read whole
    plans: list[Any] = [None]

    def native_conv(x, x_scale, x_zero_point, w_scale, y_scale, y_zero_point, b, cl):
        """The native paths' result (``cl``: x and the result channels-last), or None:
        per-tensor 8-bit output, the multiplier per output channel. The call is planned
        once for an input shape and type and the same scale, zero point and bias objects
        (a model's initializers), then made again as planned (~10 us of checks a call; the
        test below, item by item, ~0.3 us)."""
        e = plans[0]
        if e is not None and e[3] is x_scale and e[4] is x_zero_point and e[5] is w_scale \
                and e[6] is y_scale and e[7] is y_zero_point and e[8] is b and e[2] is cl \
                and e[1] == x.dtype and e[0] == x.shape:
            return e[9](x)
        call = plan_native(x, x_scale, x_zero_point, w_scale, y_scale, y_zero_point, b, cl)
        if call is None:
            return None
        plans[0] = (x.shape, x.dtype, cl, x_scale, x_zero_point, w_scale, y_scale,
                    y_zero_point, b, call)
        return call(x)

    def plan_native(x, x_scale, x_zero_point, w_scale, y_scale, y_zero_point, b, cl):
        out = np.dtype(y_zero_point.dtype if y_zero_point is not None else x.dtype)
        if out not in _I8 or (y_zero_point is not None and np.size(y_zero_point) != 1):
            return None
        tail = requant_args(x_scale, w_scale, y_scale, y_zero_point, b,
                            _SIGNED if out == np.int8 else _UNSIGNED)
        if gemm is not None:
            call = _qconv_gemm_plan(x, x_zero_point, gemm[0], gemm[1], static, threads,
                                    *tail, channels_last=cl)
            if call is not None:
                return call
        per_tensor_x = x.ndim == 4 and x.dtype in _I8 and (
            x_zero_point is None or np.size(x_zero_point) == 1)
        if depthwise and per_tensor_x and x.shape[3 if cl else 1] == group:
            shape = (x.shape[0], x.shape[3], *x.shape[1:3]) if cl else x.shape
            strides, dil, pb, pe, (oh, ow) = static.geometry(shape, float_w.kshape)
            if oh > 0 and ow > 0:
                # (positional: pybind11 matches keywords by name, ~1 us of a call)
                args = (scalar_zero_point(x_zero_point),
                        float_w.taps.reshape(group, *float_w.kshape), strides, dil,
                        (pb[0], pb[1], pe[0], pe[1]), (oh, ow), tail[0], tail[1], tail[2],
                        tail[3], threads, cl, dw_packed)
                qdwconv = native().qdwconv_u8
                return lambda x: qdwconv(x, *args)
        return None

    def kernel(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
               b=None):
        out = np.dtype(y_zero_point.dtype if y_zero_point is not None else x.dtype)
        ws = np.asarray(w_scale)
        y = native_conv(x, x_scale, x_zero_point, w_scale, y_scale, y_zero_point, b, False)
        if y is not None:
            return y
        cw = float_w if float_w is not None else _ConvWeights(
            _centered_weight(w, w_zero_point), group)
        fast = _per_tensor_8bit(x.dtype, np.array(1, _F32), x_zero_point)
        if fast is not None and out in _I8 and (y_zero_point is None
                                                 or np.size(y_zero_point) == 1):
            # x - x_zp exactly (DequantizeLinear with a scale of 1), the float convolution,
            # then the sums, float32 integers, requantized natively channel by channel
            y = _exact_conv(static, native().dequantize_8bit(x, 1.0, fast[1]), cw, x.dtype,
                            w.dtype)
            if y.dtype == _F32:
                tail = requant_args(x_scale, w_scale, y_scale, y_zero_point, b,
                                    _SIGNED if out == np.int8 else _UNSIGNED)
                return native().requantize_f32_channels(
                    np.ascontiguousarray(y).reshape(y.shape[0], y.shape[1], -1), *tail,
                    threads=threads).reshape(y.shape)
            acc = np.rint(y).astype(np.int32)
        else:
            xf = _centered(x, None, False)
            if x_zero_point is not None:
                xf -= np.asarray(x_zero_point).astype(_F32)
            acc = _int_conv(static, xf, cw, x.dtype, w.dtype)
        if b is not None:
            acc += np.asarray(b).astype(np.int32).reshape((1, -1) + (1,) * (acc.ndim - 2))
        if ws.ndim == 1 and ws.size > 1:
            ws = ws.reshape((1, -1) + (1,) * (acc.ndim - 2))
        return _requantize(acc, _scale_multiplier(x_scale, ws, y_scale), y_zero_point, out)

    if not channels_last:
        return kernel

    def kernel_channels_last(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
                             y_zero_point, b=None):
        y = native_conv(x, x_scale, x_zero_point, w_scale, y_scale, y_zero_point, b, True)
        if y is not None:
            return y
        # the other cases through the channels-first kernel, transposed in and out
        y = kernel(np.ascontiguousarray(np.asarray(x).transpose(0, 3, 1, 2)), x_scale,
                   x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b)
        return np.ascontiguousarray(y.transpose(0, 2, 3, 1))

    return kernel_channels_last


def _transposed(a: np.ndarray) -> np.ndarray:
    """``a.T`` C-contiguous for a 2-D weight: natively for 8-bit elements (16 x 16 byte tiles;
    numpy copies a transposed byte view element by element, ~0.8 ns a byte)."""
    nat = native()
    if nat is None or not hasattr(nat, "transpose_elems") or a.dtype.itemsize != 1 \
            or a.size == 0:
        return np.ascontiguousarray(a.T)
    t = np.empty((1, a.shape[1], a.shape[0]), a.dtype)
    nat.transpose_elems(np.ascontiguousarray(a)[None], t)
    return t[0]


def _taps_by_channel(w: np.ndarray) -> np.ndarray:
    """A 2-D conv weight [M, C, kh, kw] as the GEMM's B, W^T in (ky, kx, C) row order:
    ``w.transpose(2, 3, 1, 0).reshape(-1, M)``, built as one 2-D transpose (:func:`_transposed`)
    and a gather of whole rows (21 ms of a QDQ ResNet-50's session creation for its 25 M
    weights as numpy's copy of the 4-D transposed view)."""
    m, c = w.shape[:2]
    k = w[0].size
    taps = k // c if c else 0
    order = np.arange(k).reshape(c, taps).T.reshape(-1)   # row (tap, c) <- row (c, tap)
    return _transposed(w.reshape(m, k))[order]


def _qconv_gemm_plan(x: np.ndarray, x_zp: np.ndarray | None, packed: Any,
                     kshape: tuple[int, ...], static: Any, threads: int,
                     bias: np.ndarray | None, multiplier: np.ndarray, y_zp: int,
                     out_signed: bool, *, channels_last: bool = False
                     ) -> Callable[[np.ndarray], np.ndarray] | None:
    """The call, given x, of a one-group 2-D QLinearConv on the native integer GEMM
    (``qlinear_conv_u8``: im2col rows of x's channels-last image, padding holding x's zero
    point, ``@ (W^T - w_zp)``, requantized into NCHW, or NHWC from an NHWC x with
    ``channels_last``) for inputs of x's shape and type, or None for an input it does not
    take (then the float path runs)."""
    if x.ndim != 4 or x.dtype not in _I8 or (x_zp is not None and np.size(x_zp) != 1):
        return None
    shape = (x.shape[0], x.shape[3], *x.shape[1:3]) if channels_last else x.shape
    n, c = shape[:2]
    strides, dil, pb, pe, (oh, ow) = static.geometry(shape, kshape)
    packed = _for_rows(packed, n * max(oh, 0) * max(ow, 0))
    if packed.k != math.prod(kshape) * c:
        return None
    if oh <= 0 or ow <= 0 or n == 0:
        dims = (n, max(oh, 0), max(ow, 0), packed.n) if channels_last else \
            (n, packed.n, max(oh, 0), max(ow, 0))
        dt = np.int8 if out_signed else np.uint8
        return lambda x: np.zeros(dims, dt)
    # (positional: pybind11 matches keywords by name, ~1 us of a call)
    args = (scalar_zero_point(x_zp), packed, kshape, strides, dil,
            (pb[0], pb[1], pe[0], pe[1]), (oh, ow), bias, multiplier, y_zp, out_signed,
            threads, channels_last)
    conv = native().qlinear_conv_u8
    return lambda x: conv(x, *args)


_RANGE_BOUND = {np.dtype(np.uint8): 255, np.dtype(np.int8): 255}


def _int_conv(static: Any, xf: np.ndarray, cw: Any, x_type: np.dtype,
              w_type: np.dtype) -> np.ndarray:
    """:func:`_exact_conv` as int32."""
    return np.rint(_exact_conv(static, xf, cw, x_type, w_type)).astype(np.int32)


def _exact_conv(static: Any, xf: np.ndarray, cw: Any, x_type: np.dtype,
                w_type: np.dtype) -> np.ndarray:
    """Exact integer convolution of centered float inputs (float32 when every partial sum
    fits its mantissa, else float64): integers held as floats. The bound comes from the
    element types when they prove it (a centered 8-bit value is at most 255 in magnitude: a
    depthwise 3x3's nine taps always fit), else from the values."""
    from .nn import _conv, _ConvWeights

    k = math.prod(cw.kshape) * cw.cg
    bx, bw = _RANGE_BOUND.get(np.dtype(x_type)), _RANGE_BOUND.get(np.dtype(w_type))
    if bx is None or bw is None or k * bx * bw >= _EXACT_F32:
        xmax = float(np.abs(xf).max()) if xf.size else 0.0
        wmax = float(np.abs(cw.taps).max()) if cw.taps.size else 0.0
        if k * xmax * wmax >= _EXACT_F32:
            xf = xf.astype(np.float64)
            cw = _ConvWeights(cw._w.astype(np.float64), cw.group)
    return _conv(xf, cw, static, None)


# --------------------------------------------------------------------------------------------
# com.microsoft GatherBlockQuantized (an LLM's 4- or 8-bit embedding table)
# --------------------------------------------------------------------------------------------


_GBQ_DATA = {TP.UINT8: "uint8 (packed)", TP.INT4: "int4", TP.UINT4: "uint4"}


def _gather_block_quantized_predicate(node: NodeView) -> str | None:
    data = node.input(0)
    if data is not None and data.elem_type not in (None, *_GBQ_DATA):
        return (f"GatherBlockQuantized data of type {elem_type_name(data.elem_type)} is not "
                "supported (int4, uint4, or uint8 packed 4 or 8 bits to a value)")
    packed = data is not None and data.elem_type == TP.UINT8
    if packed and int(node.attr("bits", 4)) not in (4, 8):
        return f"GatherBlockQuantized bits={node.attr('bits')} is not supported"
    block = int(node.attr("block_size", 128))
    if block < 16 or block & (block - 1):
        return f"GatherBlockQuantized block_size {block} is not a power of 2 of at least 16"
    rank = data.rank if data is not None else None
    if rank is not None:
        for name, default in (("gather_axis", 0), ("quantize_axis", 1)):
            if not -rank <= int(node.attr(name, default)) < rank:
                return f"GatherBlockQuantized {name} is outside the data's rank {rank}"
        if packed and int(node.attr("quantize_axis", 1)) % rank != rank - 1:
            return ("GatherBlockQuantized of packed uint8 data quantizes along its last axis "
                    "(as onnxruntime requires)")
    return None


@op("GatherBlockQuantized", domain="com.microsoft", since=1,
    predicate=_gather_block_quantized_predicate)
def _make_gather_block_quantized(node: NodeView, ctx: ProviderContext):
    """Gather of a block-quantized table, dequantized: ``(q - zero_point) * scale``, one scale
    and zero point per ``block_size`` values along ``quantize_axis``, the values taken along
    ``gather_axis`` (any two axes; an LLM's embedding table gathers rows of a table quantized
    along its columns). Data are int4 or uint4 (zero point 0 by default), or uint8 holding
    ``bits`` 4 or 8 values to a byte, low bits first, along the last axis, as onnxruntime-genai
    stores its int4 embeddings (zero points packed alike, by default the middle of the range,
    8 or 128). Only the gathered values are dequantized (a packed table gathered along another
    axis is unpacked after the gather)."""
    bits = int(node.attr("bits", 4))
    block = int(node.attr("block_size", 128))
    gather_axis = int(node.attr("gather_axis", 0))
    quantize_axis = int(node.attr("quantize_axis", 1))
    packed = node.input(0) is not None and node.input(0).elem_type == TP.UINT8

    def values(q: np.ndarray) -> np.ndarray:
        return _unpack(q, bits) if packed else np.asarray(q).astype(np.int16)

    def kernel(data, indices, scales, zero_points=None):
        scales = np.asarray(scales)
        rank = data.ndim
        g, qa = gather_axis % rank, quantize_axis % rank
        unpack_first = packed and g == rank - 1
        q = values(data) if unpack_first else data
        size = q.shape[g]
        idx = np.asarray(indices).astype(np.int64)
        if idx.size and (idx.min() < -size or idx.max() >= size):
            raise IndexError(f"GatherBlockQuantized: an index is outside [-{size}, {size})")
        idx = np.where(idx < 0, idx + size, idx)
        q = np.take(q, idx, axis=g)
        if not unpack_first:
            q = values(q)
        if zero_points is None:
            zero = np.full(scales.shape, (1 << (bits - 1)) if packed else 0, np.int16)
        else:
            zero = values(np.asarray(zero_points))
            zero = zero[tuple(slice(0, d) for d in scales.shape)]
        if qa == g:   # the gathered positions' own blocks
            s, z = np.take(scales, idx // block, axis=g), np.take(zero, idx // block, axis=g)
        else:
            at = qa if qa < g else qa + idx.ndim - 1
            d = q.shape[at]
            s = np.repeat(np.take(scales, idx, axis=g), block, axis=at)
            z = np.repeat(np.take(zero, idx, axis=g), block, axis=at)
            s, z = (np.take(a, np.arange(d), axis=at) for a in (s, z))
        out = (q.astype(_F32) - z.astype(_F32)) * s.astype(_F32)
        return out.astype(scales.dtype, copy=False)

    return kernel
