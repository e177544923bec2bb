"""Gemm, MatMul and Einsum kernels for cpu_mlas (BLAS through ``np.matmul``/``np.einsum``).

Constant right-hand operands are prepared once (transposed view, alpha folded in, converted
to float32 for half-precision models); half-precision products run in float32 and are cast
back, as numpy has no BLAS for float16. GEMMs go through :func:`._blas.matmul`, which splits
them over the intra-op pool (the BLAS itself is single-threaded); Gemm's constant C is added
per chunk, while the chunk is still in cache.

Small products (a classical model's layer at batch 1) cost mostly the calls around them:
the native GEMM's ~1.9 us, :func:`._blas.matmul`'s split 5-10 us, where ``np.dot`` on a
prepared weight is ~0.9 us and each in-place numpy pass ~1 us. So a constant weight of at most
``_GEMV_MAX_WEIGHT`` elements also keeps a C-ordered numpy copy (transposed, alpha folded,
compute dtype), and a product of fewer than ``_SMALL_MACS`` multiply-adds, or of one row
(OpenBLAS's gemv beats the native 12-row tile), or against a single-column weight, runs as
``np.dot`` on it, C (beta folded) added in place. Where the native GEMM would fuse C and Relu
into its one call, it keeps the small products; np.dot then takes only single rows of larger
weights and single-column products of at least ``_COLUMN_MIN_MACS``.
"""

from __future__ import annotations

import logging

import numpy as np
from onnx import TensorProto as TP

from onnxplex import NodeView, ProviderContext, prepacked

from . import _blas
from ._registry import op
from .nn import FLOATS, to_compute

logger = logging.getLogger(__name__)

_INTS = frozenset({TP.INT32, TP.INT64, TP.UINT32, TP.UINT64})
_F32 = np.dtype(np.float32)
_EINSUM_T = FLOATS | _INTS | {TP.INT8, TP.INT16, TP.UINT8, TP.UINT16}

# Below this many multiply-adds (M * K * N) a product runs as np.dot (measured against the
# native GEMM: dot/native 0.5-1.0 below it, 1.0-2.5 at 64k-260k with M >= 2).
_SMALL_MACS = _blas.SMALL_MACS
# A constant weight of at most this many elements keeps a numpy copy beside its packed layout
# (the cost: at most 1 MiB of float32 per weight), for small and single-row products.
_GEMV_MAX_WEIGHT = 1 << 18
# From this many weight elements on, np.dot plus in-place bias and Relu passes beat the native
# GEMM's fused epilogue on a single row (1 x 128 x 128: 4.0 vs 3.4 us; 1 x 256 x 256: 7.8 vs
# 10.4; 1 x 512 x 512: 26 vs 26-63).
_GEMV_MIN_WEIGHT = 1 << 14
# A single-column weight (N = 1: X @ w, a gemv on A's side) runs as np.dot on up to this many
# multiply-adds (what the split leaves unsplit): the native GEMM fills 1 of its tile's 32
# columns (M = 1000, K = 10: 11.9 vs 4.9 us with a bias; M = 10000: 158 vs 32). Where the
# native GEMM would fuse C or Relu, from _COLUMN_MIN_MACS on (M = 64, K = 32 with bias and
# Relu: native 2.9, np.dot and two passes 3.3; M = 256, K = 32: 5.9 vs 4.2).
_COLUMN_MAX_MACS = 2 * _blas._MIN_CHUNK_MACS
_COLUMN_MIN_MACS = 1 << 12


def _dot_weight(b: np.ndarray | None) -> np.ndarray | None:
    """A C-ordered copy of a prepared constant 2-D weight for ``np.dot``, or None when it is
    absent, empty or larger than ``_GEMV_MAX_WEIGHT``."""
    if b is None or b.ndim != 2 or b.size == 0 or b.size > _GEMV_MAX_WEIGHT:
        return None
    return np.ascontiguousarray(b)


def _matmul_packed(a: np.ndarray, w: _blas.PackedWeight, bias: np.ndarray | None = None,
                   lo: float = -np.inf, hi: float = np.inf) -> np.ndarray:
    """``a [..., K] @ W`` (+ bias, clamped) for a weight packed by :func:`._blas.pack_weight`:
    the leading axes of ``a`` become the rows of one GEMM."""
    k, n = w.shape
    a2 = a.reshape(-1, k) if a.ndim != 2 else a
    return _blas.gemm(a2, w, bias=bias, lo=lo, hi=hi).reshape(a.shape[:-1] + (n,))


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul`` split over the intra-op pool; an N-D ``a`` against a 2-D ``b`` becomes
    one large GEMM. 1-D operands (numpy's promotion rules) go to ``np.matmul`` as they are."""
    if a.ndim < 2 or b.ndim < 2:
        return np.asarray(np.matmul(a, b))
    if a.ndim > 2 and b.ndim == 2:
        y = _blas.matmul(a.reshape(-1, a.shape[-1]), b)
        return y.reshape(a.shape[:-1] + (b.shape[1],))
    return _blas.matmul(a, b)


# --------------------------------------------------------------------------------------------
# Gemm
# --------------------------------------------------------------------------------------------


@op("Gemm", since=1, dtypes={"T": FLOATS})
@op("Gemm", since=6, dtypes={"T": FLOATS})
@op("Gemm", since=7, dtypes={"T": FLOATS})
@op("Gemm", since=9, dtypes={"T": FLOATS | _INTS})
@op("Gemm", since=11, dtypes={"T": FLOATS | _INTS})
@op("Gemm", since=13, dtypes={"T": FLOATS | _INTS})
def make_gemm(node: NodeView, ctx: ProviderContext):
    """Gemm: ``Y = alpha * A' @ B' + beta * C`` (C optional since 11, broadcast since 7)."""
    return gemm_kernel(node)[0]


def gemm_kernel(node: NodeView, relu: bool = False):
    """Gemm's kernel, and whether it applies ``relu`` (max(y, 0)) itself: it does on every
    path when asked (FusedGemm with Relu; the native GEMM in its epilogue)."""
    alpha = float(node.attr("alpha", 1.0))
    beta = float(node.attr("beta", 1.0))
    trans_a = int(node.attr("transA", 0)) == 1
    trans_b = int(node.attr("transB", 0)) == 1
    b_info, c_info = node.input(1), node.input(2)
    is_float = b_info is None or b_info.elem_type is None or b_info.elem_type in FLOATS

    b_packed = None
    alpha_folded = False
    if b_info is not None and b_info.is_const:
        b = to_compute(b_info.const)
        b = b.T if trans_b else b
        if alpha != 1.0 and is_float:
            b = np.ascontiguousarray(b * b.dtype.type(alpha))
            alpha_folded = True
        b_packed = b
    c_packed = None
    if c_info is not None and c_info.is_const and beta != 0.0 and is_float:
        c = to_compute(c_info.const)
        c_packed = c * c.dtype.type(beta) if beta != 1.0 else c
    # The native GEMM: a constant float32 B, and no C or a constant one per column.
    native_b = None if b_packed is None or not is_float else _blas.pack_weight(b_packed)
    native_bias = None
    if native_b is not None and c_info is not None and beta != 0.0:
        n = native_b.shape[1]
        if c_packed is not None and c_packed.dtype == np.float32 and c_packed.size == n \
                and (c_packed.ndim <= 1 or c_packed.shape[-1] == n):
            native_bias = np.ascontiguousarray(c_packed.reshape(n))
        else:
            native_b = None
    # Small and single-row products: np.dot on a numpy copy of B (float: alpha is folded in),
    # then C added in place (the constant one with beta folded in) and Relu. The native GEMM
    # adds C and clamps in its one call (~1.9 us on a tiny product, np.dot ~0.9 and each
    # in-place pass ~1): with such an epilogue it keeps all but single rows of a weight of at
    # least _GEMV_MIN_WEIGHT elements, where OpenBLAS's gemv beats its 12-row tile, and
    # single-column products (N = 1) of at least _COLUMN_MIN_MACS.
    column = b_packed is not None and b_packed.ndim == 2 and b_packed.shape[1] == 1
    if native_b is not None and (native_bias is not None or relu):
        small_macs = 0
        gemv = b_packed is not None and b_packed.size >= _GEMV_MIN_WEIGHT
        col_lo, col_hi = (_COLUMN_MIN_MACS, _COLUMN_MAX_MACS) if column else (0, 0)
    else:
        small_macs, gemv = _SMALL_MACS, True
        col_lo, col_hi = (0, _COLUMN_MAX_MACS) if column else (0, 0)
    b_dot = _dot_weight(b_packed) if is_float and (gemv or small_macs or col_hi) else None
    kn = 0 if b_dot is None else b_dot.size
    add_c = c_info is not None and beta != 0.0
    c_dot = c_packed if add_c else None
    if native_b is not None:
        b_packed = None  # the packed copy serves every run
    lo = 0.0 if relu else -np.inf

    # A float32 A straight to a native GEMM plan (B, bias and bounds bound once) when nothing
    # else would take it: each layer of Python, and each argument the binding converts, cost
    # a batch-1 Gemm ~0.3-1 us against its ~1-2 us of work
    direct = native_b is not None and not trans_a and b_dot is None
    plan = _blas.gemm_plan(native_b, native_bias, lo) if direct else None
    pool = _blas.pool()

    def kernel(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
        out_dtype = a.dtype
        if plan is not None and out_dtype is _F32 and a.ndim == 2:
            return plan(a, pool.size)
        a_ = to_compute(a)
        a_ = a_.T if trans_a else a_
        if b_dot is not None:
            m = a_.shape[0]
            if (m == 1 and gemv) or m * kn < small_macs or col_lo <= m * kn < col_hi:
                y = np.dot(a_, b_dot)
                if c_dot is not None:
                    y += c_dot
                elif add_c and c is not None:
                    cc = to_compute(c)
                    y += cc * cc.dtype.type(beta) if beta != 1.0 else cc
                if relu:
                    np.maximum(y, 0, out=y)
                return y if y.dtype == out_dtype else y.astype(out_dtype)
        if native_b is not None:  # (T is float32, or a half type computed in float32)
            y = _blas.gemm(a_, native_b, None, native_bias, lo)
            return y if out_dtype == _F32 else y.astype(out_dtype)
        if b_packed is not None:
            b_ = b_packed
        else:
            b_ = to_compute(b)
            b_ = b_.T if trans_b else b_
        m, n = a_.shape[0], b_.shape[1]
        bias = None
        if (c is not None and c_packed is not None and (alpha_folded or alpha == 1.0)
                and np.result_type(a_, b_).kind == "f"
                and m * n * a_.shape[1] >= _SMALL_MACS):
            bias = np.broadcast_to(c_packed, (m, n))  # added per chunk, cache-hot
        y = _blas.matmul(a_, b_, epilogue=None if bias is None else (
            lambda o, r, cols: np.add(o, bias[r, cols], out=o)))
        if bias is not None:
            if relu:
                np.maximum(y, 0, out=y)
            return y.astype(out_dtype, copy=False)
        if y.dtype.kind != "f":  # integer Gemm: scale exactly when alpha/beta are 1
            if alpha != 1.0 or (c is not None and beta not in (0.0, 1.0)):
                yf = alpha * y.astype(np.float64)
                if c is not None and beta != 0.0:
                    yf = yf + beta * c.astype(np.float64)
                return yf.astype(out_dtype)
            if c is not None and beta != 0.0:
                y += c
            return y.astype(out_dtype, copy=False)
        if alpha != 1.0 and not alpha_folded:
            y *= y.dtype.type(alpha)
        if c is not None and beta != 0.0:
            if c_packed is not None:
                y += c_packed
            else:
                cc = to_compute(c)
                y += cc * cc.dtype.type(beta) if beta != 1.0 else cc
        if relu:
            np.maximum(y, 0, out=y)
        return y.astype(out_dtype, copy=False)

    # the packed B (and the bias taken from C) serve every run: B is not read again
    return prepacked(kernel, *((1,) if native_b is not None else ())), relu


# --------------------------------------------------------------------------------------------
# MatMul
# --------------------------------------------------------------------------------------------


@op("MatMul", since=1, dtypes={"T": FLOATS})
@op("MatMul", since=9, dtypes={"T": FLOATS | _INTS})
@op("MatMul", since=13, dtypes={"T": FLOATS | _INTS})
def make_matmul(node: NodeView, ctx: ProviderContext):
    """MatMul with numpy semantics: N-D batch broadcasting, 1-D operands promoted/squeezed."""
    b_info = node.input(1)
    b_packed = to_compute(b_info.const) if b_info is not None and b_info.is_const else None
    native_b = _blas.pack_weight(b_packed) if b_packed is not None else None
    # Small and single-row products against a constant 2-D B: np.dot on a numpy copy.
    b_dot = _dot_weight(b_packed)
    k_dot, n_dot = (0, 0) if b_dot is None else b_dot.shape
    kn = k_dot * n_dot
    col_hi = _COLUMN_MAX_MACS if b_dot is not None and b_dot.shape[1] == 1 else 0
    if native_b is not None:
        b_packed = None  # the packed copy serves every run

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if b_dot is not None and a.ndim and a.shape[-1] == k_dot:
            m = a.size // k_dot
            if m <= 1 or m * kn < _SMALL_MACS or m * kn < col_hi:
                a_ = to_compute(a)
                if a.ndim <= 2:
                    y = np.dot(a_, b_dot)  # 1-D a: [K] @ [K, N] is [N], as MatMul's
                else:
                    y = np.dot(a_.reshape(m, k_dot), b_dot).reshape(a.shape[:-1] + (n_dot,))
                return y if y.dtype == a.dtype else y.astype(a.dtype)
        if native_b is not None:
            a_ = to_compute(a)
            y = _matmul_packed(a_[None] if a.ndim == 1 else a_, native_b)
            y = y[0] if a.ndim == 1 else y
            return y if a.dtype == _F32 else y.astype(a.dtype)
        y = _matmul(to_compute(a), b_packed if b_packed is not None else to_compute(b))
        return y.astype(a.dtype, copy=False)

    return prepacked(kernel, *((1,) if native_b is not None else ()))


# --------------------------------------------------------------------------------------------
# Einsum
# --------------------------------------------------------------------------------------------


@op("Einsum", since=12, dtypes={"T": _EINSUM_T})
def make_einsum(node: NodeView, ctx: ProviderContext):
    """Einsum through ``np.einsum(optimize=True)`` (BLAS-backed contractions)."""
    equation = "".join(str(node.attr("equation")).split())

    def kernel(*xs: np.ndarray) -> np.ndarray:
        ops = [to_compute(x) for x in xs]
        y = np.asarray(np.einsum(equation, *ops, optimize=len(ops) > 1))
        if any(np.may_share_memory(y, x) for x in ops):
            y = y.copy()  # never hand out a view of an input
        return y.astype(xs[0].dtype, copy=False)

    return kernel
