"""com.microsoft transformer contrib kernels for cpu_mlas (onnxruntime's published semantics).

SkipLayerNormalization, SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization (which
onnxruntime registers in the ONNX domain), LayerNormalization for opsets 1-16 (likewise),
Attention (packed QKV weights, mask_index variants, unidirectional, past/present),
MultiHeadAttention (separate or cross-attention K/V, bias, key_padding_mask, attention_bias,
past/present) and FusedMatMul. The transformer fusions of the extended optimization level
produce them.

Attention runs the Q/K/V projection as one GEMM on the prepacked packed weight, then two
batched GEMMs around a softmax; masks are built once at ``[B, 1|S, T]`` (onnxruntime's
PrepareMask: masked keys get ``mask_filter_value``, causal-future keys the dtype's lowest
value) and added to the scores. float16/bfloat16 compute in float32.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto as TP

from onnxplex import NodeView, ProviderContext, prepacked

from . import _blas
from ._native import native
from ._registry import ConstInput, op
from .nn import FLOATS, compute_dtype, to_compute
from .normalization import _normalize_rows, make_layer_norm, native_layer_norm
from .normalization import _softmax_rows as _op_softmax_rows

_MS = "com.microsoft"


def _attr_f(node: NodeView, name: str, default: float) -> float:
    v = node.attr(name, None)
    return float(default if v is None else v)


def _n_outputs(node: NodeView) -> int:
    return max((i + 1 for i, o in enumerate(node.outputs) if o is not None), default=1)


def _stat_dtype(node: NodeView, i: int) -> np.dtype:
    o = node.outputs[i] if len(node.outputs) > i else None
    return o.dtype if o is not None and o.dtype is not None else np.dtype(np.float32)


# --------------------------------------------------------------------------------------------
# Normalizations
# --------------------------------------------------------------------------------------------

# onnxruntime keeps LayerNormalization kernels in the ONNX domain for opsets 1-16 (its contrib
# schema predates ONNX's LayerNormalization-17): the fusions produce it at those opsets too.
op("LayerNormalization", since=1, until=16, dtypes={"T": FLOATS})(make_layer_norm)


def _rms_rows(x2: np.ndarray, eps: float) -> np.ndarray:
    """``1/sqrt(mean(x^2) + eps)`` of each row, ``[R, 1]``."""
    ms = np.einsum("ij,ij->i", x2, x2)[:, None] / max(x2.shape[1], 1)
    return (1.0 / np.sqrt(ms + eps)).astype(x2.dtype, copy=False)


def _skip_sum(x: np.ndarray, skip: np.ndarray, bias: np.ndarray | None,
              cd: np.dtype) -> np.ndarray:
    s = np.add(to_compute(x), to_compute(skip), dtype=cd)
    if bias is not None:
        s += to_compute(bias).astype(cd, copy=False)
    return s


def _native_skip_norm(x, skip, bias, gamma, beta, eps: float, rms: bool, n_out: int,
                      stat_dt: tuple[np.dtype, np.dtype]):
    """Skip(Simplified)LayerNormalization's outputs from the native row kernel, or None (not
    float32, a skip that does not repeat whole rows of x, the kernel not built)."""
    # skip must repeat whole trailing blocks of x ([B, S, D] x with [S, D] or [1, S, D]) for
    # its rows to come back every skip_rows rows
    trailing = skip.shape[next((i for i, n in enumerate(skip.shape) if n != 1), skip.ndim):]
    if x.ndim < 2 or skip.size == 0 or x.shape[x.ndim - len(trailing):] != trailing:
        return None
    got = native_layer_norm(x, eps, gamma, beta, skip=skip, bias=bias, rms=rms,
                            want_sum=n_out > 3, want_stats=n_out > 1)
    if got is None:
        return None
    y, total, mean, inv = got
    if n_out == 1:
        return (y,)
    if mean is None:
        mean = np.zeros(x.shape[:-1] + (1,), stat_dt[0])
    return (y, mean if mean.dtype == stat_dt[0] else mean.astype(stat_dt[0]),
            inv if inv.dtype == stat_dt[1] else inv.astype(stat_dt[1]), total)[:n_out]


@op("SkipLayerNormalization", domain=_MS, since=1, dtypes={"T": FLOATS})
def make_skip_layer_norm(node: NodeView, ctx: ProviderContext):
    """output = LayerNorm(input + skip + bias) * gamma + beta over the last axis; optional
    outputs mean, inv_std_var ([B, S, 1], float) and input_skip_bias_sum."""
    eps = _attr_f(node, "epsilon", 1e-12)
    n_out = _n_outputs(node)
    stat_dt = (_stat_dtype(node, 1), _stat_dtype(node, 2))

    def kernel(x, skip, gamma, beta=None, bias=None):
        got = _native_skip_norm(x, skip, bias, gamma, beta, eps, False, n_out, stat_dt)
        if got is not None:
            return got if n_out > 1 else got[0]
        cd = compute_dtype(x.dtype)
        s = _skip_sum(x, skip, bias, cd)
        d = s.shape[-1]
        s2 = s.reshape(-1, d)
        y, mean, inv = _normalize_rows(s2, eps)
        y *= inv
        y *= to_compute(gamma).astype(cd, copy=False).reshape(1, d)
        if beta is not None:
            y += to_compute(beta).astype(cd, copy=False).reshape(1, d)
        out = y.reshape(s.shape).astype(x.dtype, copy=False)
        if n_out == 1:
            return out
        stat_shape = s.shape[:-1] + (1,)
        return (out, mean.reshape(stat_shape).astype(stat_dt[0], copy=False),
                inv.reshape(stat_shape).astype(stat_dt[1], copy=False),
                s.astype(x.dtype, copy=False))[:n_out]

    return kernel


@op("SkipSimplifiedLayerNormalization", domain=_MS, since=1, dtypes={"T": FLOATS})
def make_skip_simplified_layer_norm(node: NodeView, ctx: ProviderContext):
    """output = RMSNorm(input + skip + bias) * gamma; outputs output, mean (unused, zeros),
    inv_std_var, input_skip_bias_sum."""
    eps = _attr_f(node, "epsilon", 1e-12)
    n_out = _n_outputs(node)
    stat_dt = (_stat_dtype(node, 1), _stat_dtype(node, 2))

    def kernel(x, skip, gamma, bias=None):
        got = _native_skip_norm(x, skip, bias, gamma, None, eps, True, n_out, stat_dt)
        if got is not None:
            return got if n_out > 1 else got[0]
        cd = compute_dtype(x.dtype)
        s = _skip_sum(x, skip, bias, cd)
        d = s.shape[-1]
        s2 = s.reshape(-1, d)
        inv = _rms_rows(s2, eps)
        y = s2 * inv
        y *= to_compute(gamma).astype(cd, copy=False).reshape(1, d)
        out = y.reshape(s.shape).astype(x.dtype, copy=False)
        if n_out == 1:
            return out
        stat_shape = s.shape[:-1] + (1,)
        return (out, np.zeros(stat_shape, stat_dt[0]),
                inv.reshape(stat_shape).astype(stat_dt[1], copy=False),
                s.astype(x.dtype, copy=False))[:n_out]

    return kernel


def make_simplified_layer_norm(node: NodeView, ctx: ProviderContext):
    """Y = X / sqrt(mean(X^2 over axis..) + eps) * scale; optional output inv_std_var."""
    axis = int(node.attr("axis", -1))
    eps = _attr_f(node, "epsilon", 1e-5)
    stash = int(node.attr("stash_type", TP.FLOAT))
    stash_dt = np.dtype(np.float64) if stash == TP.DOUBLE else np.dtype(np.float32)
    n_out = _n_outputs(node)
    inv_dt = _stat_dtype(node, 1) if n_out > 1 else stash_dt

    def kernel(x, scale):
        ax = axis + x.ndim if axis < 0 else axis
        if ax == x.ndim - 1 and stash_dt == _F32 and x.dtype == _F32 and np.ndim(scale) <= 1:
            # the last axis of float32 rows: the native RMS row kernel (an RMSNorm of a decoder
            # step's one row took ~10 us through numpy's four passes)
            gamma = np.asarray(scale)
            if gamma.size == 1 and x.shape[-1] != 1:
                gamma = np.broadcast_to(gamma, (x.shape[-1],))
            got = native_layer_norm(x, eps, gamma.reshape(-1), None, rms=True,
                                    want_stats=n_out > 1)
            if got is not None:
                y, _, _, inv = got
                return y if n_out == 1 else (y, inv if inv.dtype == inv_dt
                                             else inv.astype(inv_dt))
        d_len = math.prod(x.shape[ax:])
        x2 = x.reshape(-1, d_len).astype(stash_dt, copy=False)
        inv = _rms_rows(x2, eps)
        y = x2 * inv
        y *= np.broadcast_to(np.asarray(scale, dtype=stash_dt), x.shape[ax:]).reshape(1, d_len)
        out = y.reshape(x.shape).astype(x.dtype, copy=False)
        if n_out == 1:
            return out
        stat_shape = x.shape[:ax] + (1,) * (x.ndim - ax)
        return out, inv.reshape(stat_shape).astype(inv_dt, copy=False)

    return kernel


# onnxruntime registers SimplifiedLayerNormalization in the ONNX domain (and, for CUDA/ROCm
# graphs, com.microsoft): both are accepted.
op("SimplifiedLayerNormalization", since=1, dtypes={"T": FLOATS})(make_simplified_layer_norm)
op("SimplifiedLayerNormalization", domain=_MS, since=1, dtypes={"T": FLOATS})(
    make_simplified_layer_norm)


# --------------------------------------------------------------------------------------------
# FusedMatMul
# --------------------------------------------------------------------------------------------


def _fused_perm(rank: int, trans: bool, trans_batch: bool) -> list[int] | None:
    """onnxruntime's FusedMatMul operand permutation: transBatch moves the leading (batch)
    axis in front of the last axis; trans swaps the last two (after that)."""
    if rank < 2:
        return None
    perm = list(range(rank))
    if trans_batch and rank > 2:
        perm = list(range(1, rank - 1)) + [0, rank - 1]
    if trans:
        perm[-1], perm[-2] = perm[-2], perm[-1]
    return None if perm == list(range(rank)) else perm


@op("FusedMatMul", domain=_MS, since=1, dtypes={"T": FLOATS})
def make_fused_matmul(node: NodeView, ctx: ProviderContext):
    """Y = alpha * op(A) @ op(B) with transA/transB and transBatchA/transBatchB."""
    alpha = _attr_f(node, "alpha", 1.0)
    ta, tb = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    tba, tbb = bool(node.attr("transBatchA", 0)), bool(node.attr("transBatchB", 0))
    b_info = node.input(1)
    b_packed = None
    if b_info is not None and b_info.is_const:
        b = to_compute(np.asarray(b_info.const))
        perm = _fused_perm(b.ndim, tb, tbb)
        b_packed = np.ascontiguousarray(b.transpose(perm) if perm else b)
    # A constant 2-D B on the native GEMM, alpha folded into the packed copy.
    native_b = None
    if b_packed is not None and b_packed.ndim == 2 and b_packed.dtype == np.float32:
        native_b = _blas.pack_weight(b_packed * np.float32(alpha) if alpha != 1.0 else b_packed)
    if native_b is not None:
        b_packed = None  # the packed copy serves every run

    def kernel(a, b):
        out_dtype = a.dtype
        a = to_compute(a)
        perm = _fused_perm(a.ndim, ta, tba)
        if perm:
            a = a.transpose(perm)
        if native_b is not None:
            k, n = native_b.shape
            y = _blas.gemm(a.reshape(-1, k), native_b).reshape(a.shape[:-1] + (n,))
            return y.astype(out_dtype, copy=False)
        if b_packed is not None:
            b = b_packed
        else:
            b = to_compute(b)
            perm = _fused_perm(b.ndim, tb, tbb)
            if perm:
                b = b.transpose(perm)
        if a.ndim < 2 or b.ndim < 2:
            y = np.matmul(a, b)
        elif a.ndim > 2 and b.ndim == 2:
            y = _blas.matmul(a.reshape(-1, a.shape[-1]), b).reshape(a.shape[:-1] + b.shape[1:])
        else:
            y = _blas.matmul(a, b)
        if alpha != 1.0:
            y *= y.dtype.type(alpha)
        return y.astype(out_dtype, copy=False)

    return prepacked(kernel, *((1,) if native_b is not None else ()))


# --------------------------------------------------------------------------------------------
# Attention core (shared by Attention and MultiHeadAttention)
# --------------------------------------------------------------------------------------------


def _prepare_mask(mask_index: np.ndarray | None, b: int, s: int, total: int, past: int,
                  causal: bool, filter_value: float, cd: np.dtype) -> np.ndarray | None:
    """onnxruntime's PrepareMask: the additive ``[B, 1|S, T]`` mask, or None."""
    mask = None
    if mask_index is not None:
        mi = np.asarray(mask_index)
        fv = cd.type(filter_value)
        if mi.ndim == 3:            # [B, S, T] raw
            mask = np.where(mi.reshape(b, s, total) > 0, cd.type(0), fv)
        elif mi.ndim == 2:          # [B, T] raw
            mask = np.where(mi.reshape(b, 1, total) > 0, cd.type(0), fv)
        elif mi.ndim == 1:          # [B] end positions, or [2B] end and start positions
            mi = mi.astype(np.int64)
            j = np.arange(total)[None, :]
            dead = j >= mi[:b, None]
            if mi.shape[0] == 2 * b:
                dead |= j < np.minimum(mi[b:, None], total)
            mask = np.where(dead, fv, cd.type(0)).reshape(b, 1, total)
        else:
            raise NotImplementedError(f"mask_index of rank {mi.ndim} is not supported")
    if causal:
        i = np.arange(s)[:, None]
        j = np.arange(total)[None, :]
        future = (j > past + i)[None]
        lowest = cd.type(np.finfo(cd).min)
        if mask is None:
            mask = np.where(future, lowest, cd.type(0))
        else:
            mask = np.where(future, lowest, np.broadcast_to(mask, (b, s, total)))
    return mask


_F32 = np.dtype(np.float32)


def _native_attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
                   mask: np.ndarray | None, attn_bias: np.ndarray | None) -> np.ndarray | None:
    """:func:`_attend` in one native call for float32 (``attention_f32``: a task per batch and
    head, the products on the float GEMM, the softmax with a vector exp), or None when the
    kernel is not built. The mask and the attention bias go in as one additive bias. Against
    the numpy path, GPT-2's [1, 12, 64, 64] heads: ~115 against ~290 us in a loop, and in the
    model (where each of that path's two dozen numpy calls runs out of cache) ~400 us a layer;
    BERT-base's [1, 12, 128, 64]: ~1.1 against ~2.6 ms in a loop."""
    nat = native()
    if nat is None or not hasattr(nat, "attention_f32") or not (
            q.dtype == k.dtype == v.dtype == _F32):
        return None
    q, k, v = (x if x.shape[-1] <= 1 or x.strides[-1] == 4 else np.ascontiguousarray(x)
               for x in (q, k, v))
    bias = None if mask is None else mask[:, None].astype(_F32, copy=False)
    if attn_bias is not None:
        ab = attn_bias.astype(_F32, copy=False)
        bias = ab if bias is None else bias + ab
    if bias is not None:
        if bias.ndim != 4 or any(bias.shape[i] not in (1, n)
                                 for i, n in enumerate(q.shape[:3])):
            bias = np.broadcast_to(bias, q.shape[:3] + (k.shape[2],))
        if bias.shape[-1] > 1 and bias.strides[-1] != 4:
            bias = np.ascontiguousarray(bias)
    b, h, s, _ = q.shape
    y = np.empty((b, s, h, v.shape[-1]), dtype=_F32)
    nat.attention_f32(q, k, v, y, scale, bias, _blas.intra_threads())
    return y.reshape(b, s, -1)


def _attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
            mask: np.ndarray | None, attn_bias: np.ndarray | None) -> np.ndarray:
    """q [B,H,S,Dh], k [B,H,T,Dh], v [B,H,T,Dv] (compute dtype) -> [B, S, H*Dv] (contiguous)."""
    y = _native_attend(q, k, v, scale, mask, attn_bias)
    if y is not None:
        return y
    b, h, s, _ = q.shape
    dv = v.shape[-1]
    scores = _blas.matmul(q, k.transpose(0, 1, 3, 2))
    scores *= scores.dtype.type(scale)
    if mask is not None:
        scores += mask[:, None]
    if attn_bias is not None:
        scores += attn_bias.astype(scores.dtype, copy=False)
    t = scores.shape[-1]
    # The same softmax as the Softmax op, so a fused graph rounds like the unfused one; the
    # scores are this call's scratch, so it runs in place.
    probs = _op_softmax_rows(np.ascontiguousarray(scores).reshape(-1, t), log=False,
                             inplace=True).reshape(scores.shape)
    # The heads' products land straight in the [B, S, H, Dv] result (BLAS writes with a row
    # stride of H*Dv): no transposing copy afterwards.
    y = np.empty((b, s, h, dv), dtype=probs.dtype)
    _blas.matmul(probs, v, out=y.transpose(0, 2, 1, 3))
    return y.reshape(b, s, h * dv)


def _heads(x: np.ndarray, h: int) -> np.ndarray:
    """[B, S, H*D] -> [B, H, S, D]."""
    b, s, d = x.shape
    return x.reshape(b, s, h, d // h).transpose(0, 2, 1, 3)


# --------------------------------------------------------------------------------------------
# Attention (com.microsoft)
# --------------------------------------------------------------------------------------------


def _attention_predicate(node: NodeView) -> str | None:
    if int(node.attr("do_rotary", 0)):
        return "Attention do_rotary=1 is not supported"
    if int(node.attr("past_present_share_buffer", 0)):
        return "Attention past_present_share_buffer=1 is not supported"
    return None


@op("Attention", domain=_MS, since=1, dtypes={"T": FLOATS}, predicate=_attention_predicate)
def make_ms_attention(node: NodeView, ctx: ProviderContext):
    """Self-attention with packed Q/K/V weights ``[In, Dq+Dk+Dv]`` and bias; mask_index
    1-D/2-D/3-D, unidirectional, past ``[2, B, H, P, Dh]`` -> present, attention_bias."""
    h = int(node.attr("num_heads"))
    sizes = node.attr("qkv_hidden_sizes", None)
    scale_attr = node.attr("scale", None)
    causal = bool(node.attr("unidirectional", 0))
    filter_value = _attr_f(node, "mask_filter_value", -10000.0)
    n_out = _n_outputs(node)
    w_info, b_info = node.input(1), node.input(2)
    w_packed = to_compute(np.ascontiguousarray(w_info.const)) \
        if w_info is not None and w_info.is_const else None
    b_packed = to_compute(np.asarray(b_info.const)) \
        if b_info is not None and b_info.is_const else None
    # The QKV projection on the native GEMM (weight packed once, bias in its epilogue).
    native_w = None if w_packed is None else _blas.pack_weight(w_packed)
    if native_w is not None and (b_packed is None or b_packed.dtype != np.float32
                                 or b_packed.ndim != 1):
        native_w = None
    if native_w is not None:
        w_packed = None

    def kernel(x, weights, bias=None, mask_index=None, past=None, attention_bias=None,
               past_sequence_length=None):
        out_dtype = x.dtype
        cd = compute_dtype(x.dtype)
        b, s, d_in = x.shape
        if native_w is not None:
            total_out = native_w.shape[1]
            qkv = _blas.gemm(to_compute(x).reshape(b * s, d_in), native_w, bias=b_packed)
        else:
            w = w_packed if w_packed is not None else to_compute(weights)
            bb = b_packed if b_packed is not None else \
                (None if bias is None else to_compute(bias))
            total_out = w.shape[1]
            qkv = _blas.matmul(to_compute(x).reshape(b * s, d_in), w,
                               epilogue=None if bb is None
                               else lambda o, r, c: np.add(o, bb[c], out=o))
        if sizes:
            dq, dk, dv = (int(z) for z in sizes)
        else:
            dq = dk = dv = total_out // 3
        qkv = qkv.reshape(b, s, total_out)
        q = _heads(qkv[..., :dq], h)
        k = _heads(qkv[..., dq:dq + dk], h)
        v = _heads(qkv[..., dq + dk:dq + dk + dv], h)
        p_len = 0
        if past is not None:
            past_c = to_compute(past)
            p_len = past_c.shape[3]
            k = np.concatenate((past_c[0], k), axis=2)
            v = np.concatenate((past_c[1], v), axis=2)
        total = k.shape[2]
        scale = float(scale_attr) if scale_attr else 1.0 / math.sqrt(dq // h)
        mask = _prepare_mask(mask_index, b, s, total, p_len, causal, filter_value, cd)
        y = _attend(q, k, v, scale, mask, attention_bias)
        y = np.ascontiguousarray(y).astype(out_dtype, copy=False)
        if n_out == 1:
            return y
        present = np.stack((k, v)).astype(out_dtype, copy=False)
        return y, present

    return prepacked(kernel, *((1,) if native_w is not None else ()))


# --------------------------------------------------------------------------------------------
# MultiHeadAttention (com.microsoft)
# --------------------------------------------------------------------------------------------


def _mha_predicate(node: NodeView) -> str | None:
    q = node.input(0)
    if q is not None and q.rank is not None and q.rank != 3:
        return "MultiHeadAttention with packed QKV (5-D query) is not supported"
    if len(node.inputs) > 9 and node.inputs[9] is not None:
        return "MultiHeadAttention cache_indirection (beam search) is not supported"
    if len(node.outputs) > 3 and node.outputs[3] is not None:
        return "MultiHeadAttention output_qk is not supported"
    return None


@op("MultiHeadAttention", domain=_MS, since=1, dtypes={"T": FLOATS}, predicate=_mha_predicate)
def make_multi_head_attention(node: NodeView, ctx: ProviderContext):
    """query [B, S, D]; key/value [B, L, D] (or [B, H, L, Dh] cross-attention, used as is);
    bias [Dq+Dk+Dv]; key_padding_mask [B] / [2B] / [B, T] / [B, S, T]; attention_bias
    [B|1, H|1, S, T]; past_key/past_value [B, H, P, Dh] -> present_key/present_value."""
    h = int(node.attr("num_heads"))
    scale_attr = node.attr("scale", None)
    causal = bool(node.attr("unidirectional", 0))
    filter_value = _attr_f(node, "mask_filter_value", -10000.0)
    n_out = _n_outputs(node)
    b_info = node.input(3) if len(node.inputs) > 3 else None
    b_packed = to_compute(np.asarray(b_info.const)) \
        if b_info is not None and b_info.is_const else None

    def kernel(query, key=None, value=None, bias=None, key_padding_mask=None,
               attention_bias=None, past_key=None, past_value=None,
               past_sequence_length=None, cache_indirection=None):
        out_dtype = query.dtype
        cd = compute_dtype(query.dtype)
        bb = b_packed if b_packed is not None else (None if bias is None else to_compute(bias))
        q = to_compute(query).astype(cd, copy=False)
        dq = q.shape[-1]
        if bb is not None:
            q = q + bb[:dq]
        q = _heads(q, h)
        cross = key is not None and key.ndim == 4
        if cross:    # already [B, H, L, Dh]: no bias, no past
            k = to_compute(key)
            v = to_compute(value)
        else:
            k = to_compute(key).astype(cd, copy=False)
            v = to_compute(value).astype(cd, copy=False)
            dk = k.shape[-1]
            if bb is not None:
                k = k + bb[dq:dq + dk]
                v = v + bb[dq + dk:]
            k, v = _heads(k, h), _heads(v, h)
        p_len = 0
        if past_key is not None and past_value is not None:
            p_len = past_key.shape[2]
            k = np.concatenate((to_compute(past_key), k), axis=2)
            v = np.concatenate((to_compute(past_value), v), axis=2)
        b, s = query.shape[0], query.shape[1]
        total = k.shape[2]
        scale = float(scale_attr) if scale_attr else 1.0 / math.sqrt(q.shape[-1])
        mask = _prepare_mask(key_padding_mask, b, s, total, p_len, causal, filter_value, cd)
        y = _attend(q, k, v, scale, mask, attention_bias)
        y = np.ascontiguousarray(y).astype(out_dtype, copy=False)
        if n_out == 1:
            return y
        return (y, np.ascontiguousarray(k).astype(out_dtype, copy=False),
                np.ascontiguousarray(v).astype(out_dtype, copy=False))[:n_out]

    return kernel


# --------------------------------------------------------------------------------------------
# DecoderMaskedMultiHeadAttention (com.microsoft): one decoding step, with beams
# --------------------------------------------------------------------------------------------


def _dmmha_predicate(node: NodeView) -> str | None:
    if len(node.inputs) < 3 or node.inputs[1] is None or node.inputs[2] is None:
        return ("DecoderMaskedMultiHeadAttention with packed QKV (no key and value inputs) is "
                "not supported (onnxruntime's CPU kernel does not take it either)")
    return None


@op("DecoderMaskedMultiHeadAttention", domain=_MS, since=1, dtypes={"T": FLOATS},
    predicate=_dmmha_predicate)
def make_decoder_masked_mha(node: NodeView, ctx: ProviderContext):
    """One decoding step (query [B, 1, D]) of a Whisper- or T5-style decoder, as onnxruntime's
    exports with beam search write it. Self-attention (past_key/past_value given): the
    past is a shared buffer [B, H, max_len, Dh] holding ``past_sequence_length`` tokens; this
    step's key and value ([B, 1, D], ``bias`` added) go at that position, and present_key /
    present_value are the buffer so filled. With ``cache_indirection`` [B / beam_width,
    beam_width, max_len], a sequence reads each past position from the beam that token came
    from. Cross-attention (no past): key and value are the encoder's [B, H, L, Dh], as they
    are. ``mask_index`` [B, T] (0: masked, ``mask_filter_value`` added), ``attention_bias``
    [B|1, H|1, 1, T] added; ``qk`` gives the scaled scores before the softmax (float32)."""
    h = int(node.attr("num_heads"))
    scale_attr = float(node.attr("scale", 0.0) or 0.0)
    filter_value = _attr_f(node, "mask_filter_value", -10000.0)
    n_out = _n_outputs(node)

    def kernel(query, key, value, mask_index=None, attention_bias=None, past_key=None,
               past_value=None, past_sequence_length=None, beam_width=None,
               cache_indirection=None, bias=None):
        b, s, dq = query.shape
        if s != 1:
            raise ValueError("DecoderMaskedMultiHeadAttention: the query's sequence length "
                             f"must be 1 (one decoding step), got {s}")
        out_dtype = query.dtype
        q = query.astype(_F32)
        bb = None if bias is None else np.asarray(bias, _F32).reshape(-1)
        if bb is not None:
            q = q + bb[:dq]
        q = _heads(q, h)                                     # [B, H, 1, Dh]
        dh = q.shape[-1]
        present = None
        if past_key is None:                                # cross-attention
            if key.ndim != 4:
                raise ValueError("DecoderMaskedMultiHeadAttention: cross-attention takes the "
                                 "key and value as [B, H, L, Dh]")
            if attention_bias is not None:
                raise NotImplementedError("DecoderMaskedMultiHeadAttention does not support "
                                          "an attention bias in cross-attention")
            k, v = key.astype(_F32), value.astype(_F32)
        else:
            if past_value is None or past_sequence_length is None:
                raise ValueError("DecoderMaskedMultiHeadAttention: self-attention needs "
                                 "past_value and past_sequence_length besides past_key "
                                 "(a buffer shared with the present)")
            p = int(np.asarray(past_sequence_length).reshape(-1)[0])
            max_len = past_key.shape[2]
            if not 0 <= p < max_len:
                raise ValueError(f"DecoderMaskedMultiHeadAttention: past_sequence_length {p} "
                                 f"leaves no room in the past buffer of {max_len}")
            k_new, v_new = key.astype(_F32), value.astype(_F32)
            if bb is not None:
                k_new = k_new + bb[dq:2 * dq]
                v_new = v_new + bb[2 * dq:]
            k_new, v_new = _heads(k_new, h), _heads(v_new, h)   # [B, H, 1, Dh]
            present_k = np.array(past_key, dtype=past_key.dtype)
            present_v = np.array(past_value, dtype=past_value.dtype)
            present_k[:, :, p] = k_new[:, :, 0]
            present_v[:, :, p] = v_new[:, :, 0]
            present = (present_k, present_v)
            beams = 1 if beam_width is None else int(np.asarray(beam_width).reshape(-1)[0])
            if cache_indirection is not None and beams > 1:
                # sequence i reads past position j from beam cache_indirection[i, j] of its
                # own batch entry
                src = np.asarray(cache_indirection, np.int64).reshape(b, -1)[:, :p]
                if src.size and (src.min() < 0 or src.max() >= beams):
                    raise IndexError("DecoderMaskedMultiHeadAttention: a cache_indirection "
                                     f"entry is outside [0, {beams})")
                rows = (np.arange(b)[:, None] // beams) * beams + src       # [B, P]
                pos = np.arange(p)[None, :]
                k_past = past_key[rows, :, pos].transpose(0, 2, 1, 3)       # [B, H, P, Dh]
                v_past = past_value[rows, :, pos].transpose(0, 2, 1, 3)
            elif beams > 1:
                raise ValueError("DecoderMaskedMultiHeadAttention: a beam width above 1 "
                                 "needs cache_indirection")
            else:
                k_past, v_past = past_key[:, :, :p], past_value[:, :, :p]
            k = np.concatenate((k_past.astype(_F32), k_new), axis=2)
            v = np.concatenate((v_past.astype(_F32), v_new), axis=2)
        t = k.shape[2]
        scale = scale_attr or 1.0 / math.sqrt(dh)
        scores = np.matmul(q, k.transpose(0, 1, 3, 2)) * np.float32(scale)   # [B, H, 1, T]
        if attention_bias is not None:
            scores += np.asarray(attention_bias, _F32)[..., :t]
        if mask_index is not None:
            m = np.asarray(mask_index).reshape(b, -1)[:, :t]
            scores += np.where(m == 0, np.float32(filter_value), np.float32(0))[:, None, None]
        qk = scores.copy() if n_out > 3 else None
        probs = _op_softmax_rows(np.ascontiguousarray(scores).reshape(-1, t), log=False,
                                 inplace=True).reshape(scores.shape)
        y = np.matmul(probs, v).transpose(0, 2, 1, 3).reshape(b, 1, -1).astype(out_dtype)
        outs = [y, *(present or (None, None)), qk]
        return tuple(outs[:n_out]) if n_out > 1 else y

    return kernel


# --------------------------------------------------------------------------------------------
# RotaryEmbedding (com.microsoft)
# --------------------------------------------------------------------------------------------


def _positions(position_ids: np.ndarray, b: int, s: int) -> np.ndarray:
    """``[B, S]`` positions: position_ids ``[B, S]``, or one start position (``[1]``: each
    sequence counts from it)."""
    p = np.asarray(position_ids).astype(np.int64, copy=False)
    if p.size == 1:
        return np.broadcast_to(p.reshape(1, 1) + np.arange(s, dtype=np.int64), (b, s))
    return p.reshape(b, s)


def _rotate(x: np.ndarray, pos: np.ndarray, cos: np.ndarray, sin: np.ndarray, rdim: int,
            interleaved: bool) -> np.ndarray:
    """``x`` ``[B, S, N, H]`` (compute dtype) rotated over its first ``rdim`` channels by the
    cache rows at ``pos`` ``[B, S]``: halves ``(x1, x2) -> (x1 c - x2 s, x1 s + x2 c)``, or
    with ``interleaved`` the even and odd channels; the channels past ``rdim`` are kept."""
    half = rdim // 2
    if pos.size and (pos.min() < 0 or pos.max() >= cos.shape[0]):
        raise IndexError(f"a position ({int(pos.min())}..{int(pos.max())}) is outside the "
                         f"rotary cache's {cos.shape[0]} rows")
    c = cos[pos][:, :, None, :half]
    s = sin[pos][:, :, None, :half]
    out = x.copy()
    if interleaved:
        a, b = x[..., 0:rdim:2], x[..., 1:rdim:2]
        out[..., 0:rdim:2] = a * c - b * s
        out[..., 1:rdim:2] = a * s + b * c
    else:
        a, b = x[..., :half], x[..., half:rdim]
        out[..., :half] = a * c - b * s
        out[..., half:rdim] = a * s + b * c
    return out


@op("RotaryEmbedding", domain=_MS, since=1, dtypes={"T": FLOATS})
def make_rotary_embedding(node: NodeView, ctx: ProviderContext):
    """input ``[B, S, N*H]`` or ``[B, N, S, H]``; position_ids ``[B, S]`` or ``[1]`` (a start
    position); cos_cache/sin_cache ``[max_positions, rotary_dim / 2]``; ``interleaved``,
    ``num_heads`` (3-D input), ``rotary_embedding_dim`` (0: the whole head). As onnxruntime's
    CPU kernel, ``scale`` is not applied."""
    interleaved = bool(node.attr("interleaved", 0))
    heads_attr = int(node.attr("num_heads", 0))
    rdim_attr = int(node.attr("rotary_embedding_dim", 0))

    def kernel(x, position_ids, cos_cache, sin_cache):
        cd = compute_dtype(x.dtype)
        cos = to_compute(cos_cache).astype(cd, copy=False)
        sin = to_compute(sin_cache).astype(cd, copy=False)
        xc = to_compute(x).astype(cd, copy=False)
        if x.ndim == 4:
            b, n, s, hs = x.shape
            x4 = xc.transpose(0, 2, 1, 3)
        else:
            b, s, hidden = x.shape
            hs = hidden // heads_attr if heads_attr else 2 * cos.shape[1]
            n = hidden // hs
            x4 = xc.reshape(b, s, n, hs)
        rdim = rdim_attr or hs
        y = _rotate(x4, _positions(position_ids, b, s), cos, sin, rdim, interleaved)
        y = y.transpose(0, 2, 1, 3) if x.ndim == 4 else y.reshape(x.shape)
        return np.ascontiguousarray(y).astype(x.dtype, copy=False)

    return kernel


# --------------------------------------------------------------------------------------------
# GroupQueryAttention (com.microsoft)
# --------------------------------------------------------------------------------------------


def _gqa_predicate(node: NodeView) -> str | None:
    if len(node.outputs) > 3 and node.outputs[3] is not None:
        return "GroupQueryAttention output_qk is not supported"
    n, kv = int(node.attr("num_heads", 0)), int(node.attr("kv_num_heads", 0))
    if n <= 0 or kv <= 0 or n % kv:
        return (f"GroupQueryAttention num_heads {n} is not a positive multiple of kv_num_heads "
                f"{kv}")
    return None


def _gqa_batched(q, k_new, v_new, past_key, past_value, present_k, present_v, start: int,
                 length: int, window: int, scale: float, group: int) -> np.ndarray | None:
    """GroupQueryAttention of a batch whose sequences all have the same length, in one call
    of the native attention kernel (float32, no softcap, smooth softmax or bias): the
    presents filled, the output ``[B, S, N, H]`` returned; None without the kernel."""
    nat = native()
    if nat is None or not hasattr(nat, "attention_f32"):
        return None
    b, s, n, d = q.shape
    kv = k_new.shape[2]
    if start:
        present_k[:, :, :start] = past_key[:, :, :start]
        present_v[:, :, :start] = past_value[:, :, :start]
    present_k[:, :, start:start + s] = k_new.transpose(0, 2, 1, 3)
    present_v[:, :, start:start + s] = v_new.transpose(0, 2, 1, 3)
    present_k[:, :, start + s:] = 0
    present_v[:, :, start + s:] = 0
    last = start + np.arange(s)[:, None]
    j = np.arange(length)[None, :]
    dead = j > last
    if window > 0:
        dead |= j < last - window + 1
    additive = np.tile(np.where(dead, np.float32(-np.inf), np.float32(0)), (group, 1))
    qg = np.ascontiguousarray(q.transpose(0, 2, 1, 3).reshape(b, kv, group * s, d))
    y = np.empty((b, group * s, kv, d), _F32)
    nat.attention_f32(qg, np.ascontiguousarray(present_k[:, :, :length]),
                      np.ascontiguousarray(present_v[:, :, :length]), y, scale,
                      np.ascontiguousarray(additive[None, None]), _blas.intra_threads())
    return y.reshape(b, group, s, kv, d).transpose(0, 2, 3, 1, 4).reshape(b, s, n, d)


def _grouped_attention(qg: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
                       dead: np.ndarray, bias: np.ndarray | None, softcap: float, smooth: bool,
                       group: int, sink: np.ndarray | None = None) -> np.ndarray:
    """One sequence's attention, query heads grouped by the K/V head they share: qg
    ``[KV, G*S, H]`` (rows g-major), k and v ``[KV, L, H]``, ``dead`` ``[S, L]`` (masked
    keys), bias ``[N, S, L]`` or None, ``sink`` one more logit per query head ``[N]`` (its
    weight in the softmax's denominator only; ``smooth`` is a sink of 0 for every head) ->
    ``[KV, G*S, H]``. float32 without softcap or sink runs on the native attention kernel
    (the mask an additive bias)."""
    kv, rows, _ = qg.shape
    if smooth and sink is None:
        sink = np.zeros(kv * group, np.float32)
    additive = np.where(dead, np.float32(-np.inf), np.float32(0))
    additive = np.tile(additive, (group, 1))[None, None]          # [1, 1, G*S, L]
    if bias is not None:
        additive = additive + bias.reshape(kv, rows, -1)[None]
    if softcap <= 0 and sink is None and qg.dtype == _F32:
        nat = native()
        if nat is not None and hasattr(nat, "attention_f32"):
            y = np.empty((1, rows, kv, v.shape[-1]), _F32)
            nat.attention_f32(np.ascontiguousarray(qg[None]), np.ascontiguousarray(k[None]),
                              np.ascontiguousarray(v[None]), y, scale,
                              np.ascontiguousarray(additive, _F32), _blas.intra_threads())
            return y[0].transpose(1, 0, 2)
    scores = np.matmul(qg, k.transpose(0, 2, 1))                   # [KV, G*S, L]
    scores *= scores.dtype.type(scale)
    if softcap > 0:
        scores = scores.dtype.type(softcap) * np.tanh(scores / scores.dtype.type(softcap))
    scores = scores + additive[0].astype(scores.dtype, copy=False)
    top = scores.max(axis=-1, keepdims=True)
    if sink is not None:   # [N] -> each row's head, rows g-major within a K/V head
        sink_rows = np.repeat(np.asarray(sink, scores.dtype).reshape(kv, group),
                              rows // group, axis=1)[..., None]
        top = np.maximum(top, sink_rows)
    e = np.exp(scores - top)
    total = e.sum(axis=-1, keepdims=True)
    if sink is not None:   # one more logit per head, in the denominator only
        total += np.exp(sink_rows - top)
    return np.matmul(e / total, v)


@op("GroupQueryAttention", domain=_MS, since=1, dtypes={"T": FLOATS}, predicate=_gqa_predicate)
def make_group_query_attention(node: NodeView, ctx: ProviderContext):
    """Causal attention with ``kv_num_heads`` K/V heads shared by groups of the ``num_heads``
    query heads, as onnxruntime-genai's LLMs use it: query ``[B, S, N*H]`` with key and value
    ``[B, S, KV*H]`` (or all three packed in query), past_key/past_value ``[B, KV, P, H]``
    (a cache of the past, or a buffer of the maximum length it shares with the present),
    seqlens_k ``[B]`` (each sequence's total length - 1), total_sequence_length; optionally the
    rotary caches (``do_rotary``: Q and K rotated at their positions), position_ids and an
    additive attention_bias and head_sink (one more logit per head in the softmax's
    denominator: gpt-oss's attention sinks); position_ids as onnxruntime reads them
    (``[B, 1]`` for one new token each, else only the first id, every sequence's start).
    ``local_window_size``, ``softcap`` and ``smooth_softmax`` as onnxruntime's CPU kernel
    applies them. Outputs: ``[B, S, N*H]`` and the present key/value
    ``[B, KV, max(P, total), H]``: each sequence's past, its new tokens at its own position,
    zeros past its length. The first prompt (no past, S == total) starts every sequence at
    position 0, a shorter one (its seqlens_k) padded on the right. With
    ``sliding_window_cache`` (Gemma-2's local layers) the past is a buffer of fixed capacity
    holding the last keys from slot 0 (every key while they fit, else the last
    ``local_window_size``), and so is the present."""
    n, kv = int(node.attr("num_heads")), int(node.attr("kv_num_heads"))
    group = n // kv
    scale_attr = float(node.attr("scale", 0.0) or 0.0)
    softcap = float(node.attr("softcap", 0.0) or 0.0)
    window = int(node.attr("local_window_size", -1))
    do_rotary = bool(node.attr("do_rotary", 0))
    interleaved = bool(node.attr("rotary_interleaved", 0))
    smooth = bool(node.attr("smooth_softmax", 0))
    sliding = bool(node.attr("sliding_window_cache", 0)) and window > 0
    n_out = _n_outputs(node)

    def kernel(query, key=None, value=None, past_key=None, past_value=None, seqlens_k=None,
               total_sequence_length=None, cos_cache=None, sin_cache=None, position_ids=None,
               attention_bias=None, head_sink=None):
        out_dtype = query.dtype
        cd = compute_dtype(query.dtype)
        qc = to_compute(query).astype(cd, copy=False)
        b, s, width = qc.shape
        if key is None:   # Q, K and V packed in the query
            d = width // (n + 2 * kv)
            q, k_new, v_new = qc[..., :n * d], qc[..., n * d:(n + kv) * d], qc[..., (n + kv) * d:]
        else:
            d = width // n
            q = qc
            k_new = to_compute(key).astype(cd, copy=False)
            v_new = to_compute(value).astype(cd, copy=False)
        q = q.reshape(b, s, n, d)
        k_new = k_new.reshape(b, s, kv, d)
        v_new = v_new.reshape(b, s, kv, d)
        total = int(np.asarray(total_sequence_length).reshape(-1)[0])
        lens = np.asarray(seqlens_k).reshape(-1).astype(np.int64) + 1   # each sequence's total
        p_buf = 0 if past_key is None else past_key.shape[2]
        first = p_buf == 0 and s == total
        starts = np.zeros(b, np.int64) if first else lens - s   # where the new tokens go
        if lens.shape[0] != b or total < 1 or b and (lens.min() < 1 or lens.max() > total or (
                not first and starts.min() < 0) or (not sliding and not first
                                                    and starts.max() > p_buf)):
            raise ValueError(
                f"seqlens_k {np.asarray(seqlens_k).reshape(-1).tolist()} and "
                f"total_sequence_length {total} do not fit {s} new token(s) after a past of "
                f"{p_buf} for {b} sequence(s) (each total length - 1 must be at least "
                f"{0 if first else s - 1} and below total_sequence_length)")
        if do_rotary:
            cos = to_compute(cos_cache).astype(cd, copy=False)
            sin = to_compute(sin_cache).astype(cd, copy=False)
            if position_ids is None:
                pos = starts[:, None] + np.arange(s, dtype=np.int64)[None, :]
            elif s == 1:   # (onnxruntime: one position per sequence for a decoding step,
                pos = np.asarray(position_ids).astype(np.int64).reshape(b, 1)
            else:          # else the first id as every sequence's start)
                pos = _positions(np.asarray(position_ids).reshape(-1)[:1], b, s)
            rdim = 2 * cos.shape[1]
            q = _rotate(q, pos, cos, sin, rdim, interleaved)
            k_new = _rotate(k_new, pos, cos, sin, rdim, interleaved)
        present_len = p_buf if sliding else max(p_buf, total)
        # (each sequence's slots past its keys are zeroed below, not the whole buffer first)
        present_k = np.empty((b, kv, present_len, d), cd)
        present_v = np.empty((b, kv, present_len, d), cd)
        scale = scale_attr or 1.0 / math.sqrt(d)
        y = np.empty((b, s, n, d), cd)
        bias = None if attention_bias is None else to_compute(attention_bias).astype(cd)
        sink = None if head_sink is None else to_compute(head_sink).astype(cd).reshape(-1)
        if (not sliding and bias is None and softcap <= 0 and not smooth and sink is None
                and cd == _F32
                and b > 1 and (lens == lens[0]).all() and (starts == starts[0]).all()):
            got = _gqa_batched(q, k_new, v_new, past_key, past_value, present_k, present_v,
                               int(starts[0]), int(lens[0]), window, scale, group)
            if got is not None:
                out = got.reshape(b, s, n * d).astype(out_dtype, copy=False)
                if n_out == 1:
                    return out
                return (out, present_k.astype(out_dtype, copy=False),
                        present_v.astype(out_dtype, copy=False))[:n_out]
        for i in range(b):
            start, length = int(starts[i]), int(lens[i])
            new_k, new_v = k_new[i].transpose(1, 0, 2), v_new[i].transpose(1, 0, 2)
            if sliding:
                # the cache holds the last keys (all while they fit its capacity, else the
                # last local_window_size) from slot 0: its valid part, then the new tokens
                held = start if start <= p_buf else window
                k_all = np.concatenate((to_compute(past_key[i, :, :held]), new_k), axis=1)
                v_all = np.concatenate((to_compute(past_value[i, :, :held]), new_v), axis=1)
                keep = k_all.shape[1] if length <= p_buf else window
                present_k[i, :, :keep] = k_all[:, -keep:]
                present_v[i, :, :keep] = v_all[:, -keep:]
                present_k[i, :, keep:] = 0
                present_v[i, :, keep:] = 0
                first_key = length - k_all.shape[1]     # the position of k_all[:, 0]
            else:
                if start:
                    present_k[i, :, :start] = to_compute(past_key[i, :, :start])
                    present_v[i, :, :start] = to_compute(past_value[i, :, :start])
                present_k[i, :, start:start + s] = new_k
                present_v[i, :, start:start + s] = new_v
                present_k[i, :, start + s:] = 0
                present_v[i, :, start + s:] = 0
                k_all, v_all, first_key = present_k[i, :, :length], present_v[i, :, :length], 0
            span = k_all.shape[1]
            last = start + np.arange(s)[:, None]            # the last key each query sees
            j = first_key + np.arange(span)[None, :]
            dead = j > last
            if window > 0:
                dead |= j < last - window + 1
            bias_i = None if bias is None else np.broadcast_to(
                bias[i if bias.shape[0] > 1 else 0], (n, s, bias.shape[-1]))[
                    ..., first_key:first_key + span]
            # each K/V head serves its group of query heads: their rows side by side
            # ([KV, group * S, H], head n = kv * group + g), no K/V copied per query head
            qg = q[i].transpose(1, 0, 2).reshape(kv, group * s, d)
            y[i] = _grouped_attention(qg, k_all, v_all, scale, dead, bias_i, softcap,
                                      smooth, group, sink).reshape(kv, group, s, d) \
                .transpose(2, 0, 1, 3).reshape(s, n, d)
        out = y.reshape(b, s, n * d).astype(out_dtype, copy=False)
        if n_out == 1:
            return out
        return (out, present_k.astype(out_dtype, copy=False),
                present_v.astype(out_dtype, copy=False))[:n_out]

    return kernel


# --------------------------------------------------------------------------------------------
# EmbedLayerNormalization (com.microsoft)
# --------------------------------------------------------------------------------------------


@op("EmbedLayerNormalization", domain=_MS, since=1, dtypes={"T": FLOATS})
def make_embed_layer_norm(node: NodeView, ctx: ProviderContext):
    """BERT's embeddings as onnxruntime's transformer optimizer fuses them: word embeddings of
    input_ids ``[B, S]`` + position embeddings (of position_ids ``[B|1, S]``, else 0..S-1) +
    segment embeddings (when given), layer-normalized with gamma and beta; outputs that,
    mask_index ``[B]`` (int32: the sum of each mask row, 0 without a mask) and, when asked
    for, the embeddings' sum before the normalization."""
    eps = _attr_f(node, "epsilon", 1e-12)
    n_out = _n_outputs(node)

    def kernel(input_ids, segment_ids, word_embedding, position_embedding,
               segment_embedding=None, gamma=None, beta=None, mask=None, position_ids=None):
        out_dtype = word_embedding.dtype
        cd = compute_dtype(out_dtype)
        ids = _ids_within(input_ids, word_embedding.shape[0], "input_ids")
        b, s = ids.shape
        emb = np.take(to_compute(word_embedding).astype(cd, copy=False), ids, axis=0)
        pos = (np.arange(s) if position_ids is None
               else np.broadcast_to(_ids_within(position_ids, position_embedding.shape[0],
                                                "position_ids"), (b, s)))
        if position_ids is None and s > position_embedding.shape[0]:
            raise IndexError(f"{s} positions, but the position embedding has "
                             f"{position_embedding.shape[0]} rows")
        emb += np.take(to_compute(position_embedding).astype(cd, copy=False), pos, axis=0)
        if segment_ids is not None and segment_embedding is not None:
            emb += np.take(to_compute(segment_embedding).astype(cd, copy=False),
                           _ids_within(segment_ids, segment_embedding.shape[0], "segment_ids"),
                           axis=0)
        y = _layer_norm_rows(emb, to_compute(gamma).astype(cd, copy=False),
                             None if beta is None else to_compute(beta).astype(cd, copy=False),
                             eps).astype(out_dtype, copy=False)
        if n_out == 1:
            return y
        return (y, _mask_index(mask, b), emb.astype(out_dtype, copy=False))[:n_out]

    return kernel


def _ids_within(ids: np.ndarray, rows: int, what: str) -> np.ndarray:
    """``ids`` as int64, each in ``[0, rows)`` (an embedding table's rows; a negative one is
    refused, as onnxruntime refuses it, not read from the end)."""
    out = np.asarray(ids).astype(np.int64, copy=False)
    if out.size and (out.min() < 0 or out.max() >= rows):
        raise IndexError(f"{what}: {int(out.min())}..{int(out.max())} is outside the "
                         f"table's {rows} rows")
    return out


def _layer_norm_rows(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray | None,
                     eps: float) -> np.ndarray:
    """Layer norm over the last axis (the native row kernel for float32)."""
    got = native_layer_norm(x, eps, gamma, beta) if x.dtype == _F32 else None
    if got is not None:
        return got[0]
    d = x.shape[-1]
    y, _, inv = _normalize_rows(x.reshape(-1, d), eps)
    y *= inv
    y *= gamma.reshape(1, d)
    if beta is not None:
        y += beta.reshape(1, d)
    return y.reshape(x.shape)


def _mask_index(mask: np.ndarray | None, b: int) -> np.ndarray:
    """EmbedLayerNormalization's mask_index: each mask row's sum (zeros without a mask)."""
    return (np.zeros(b, np.int32) if mask is None
            else np.asarray(mask).reshape(b, -1).sum(axis=1, dtype=np.int32))



# --------------------------------------------------------------------------------------------
# QEmbedLayerNormalization and QAttention (com.microsoft): what onnxruntime's quantize_dynamic
# makes of an optimized BERT's EmbedLayerNormalization and Attention
# --------------------------------------------------------------------------------------------


def _dequantized(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray:
    x = np.asarray(q).astype(_F32)
    if zero_point is not None:
        x -= np.asarray(zero_point).astype(_F32)
    x *= np.asarray(scale).astype(_F32)
    return x


@op("QEmbedLayerNormalization", domain=_MS, since=1, dtypes={"T": {TP.INT8, TP.UINT8}})
def make_qembed_layer_norm(node: NodeView, ctx: ProviderContext):
    """EmbedLayerNormalization over 8-bit tables (word, position, segment embeddings, gamma and
    beta, each with a scale and zero point): the gathered rows are dequantized, not the
    tables. Outputs the normalized embeddings and mask_index."""
    eps = _attr_f(node, "epsilon", 1e-12)
    n_out = _n_outputs(node)

    def kernel(input_ids, segment_ids, word_q, position_q, segment_q, gamma_q, beta_q, mask,
               word_s, position_s, segment_s, gamma_s, beta_s, word_z, position_z,
               segment_z, gamma_z, beta_z):
        ids = _ids_within(input_ids, word_q.shape[0], "input_ids")
        b, s = ids.shape
        if s > position_q.shape[0]:
            raise IndexError(f"{s} positions, but the position embedding has "
                             f"{position_q.shape[0]} rows")
        emb = _dequantized(np.take(word_q, ids, axis=0), word_s, word_z)
        emb += _dequantized(np.take(position_q, np.arange(s), axis=0), position_s, position_z)
        if segment_ids is not None and segment_q is not None:
            emb += _dequantized(np.take(segment_q, _ids_within(segment_ids, segment_q.shape[0],
                                                               "segment_ids"), axis=0),
                                segment_s, segment_z)
        y = _layer_norm_rows(emb, _dequantized(gamma_q, gamma_s, gamma_z),
                             _dequantized(beta_q, beta_s, beta_z), eps)
        return y if n_out == 1 else (y, _mask_index(mask, b))

    return kernel


class _AsFloatAttention:
    """A QAttention node seen as the float Attention it quantizes: its attributes and
    outputs; input 1 the dequantized weight, 2 the bias (no 3-5: mask and past are handed to
    the kernel)."""

    op_type = "Attention"

    def __init__(self, node: NodeView, weight: np.ndarray | None) -> None:
        self._node, self._w = node, None if weight is None else ConstInput(weight)
        self.outputs = node.outputs

    def attr(self, name: str, default=None):
        return self._node.attr(name, default)

    def input(self, k: int):
        return self._w if k == 1 else self._node.input(2) if k == 2 else None


def _qattention_predicate(node: NodeView) -> str | None:
    why = _attention_predicate(node)
    if why is not None:
        return why
    for k, what in ((1, "weight"), (4, "weight_scale")):
        v = node.input(k)
        if v is None or not v.is_const:
            return f"QAttention needs a constant {what}"
    zp = node.input(7)
    if zp is not None and not zp.is_const:
        return "QAttention needs a constant weight_zero_point"
    return None


@op("QAttention", domain=_MS, since=1, dtypes={"T1": {TP.INT8, TP.UINT8}},
    predicate=_qattention_predicate)
def make_qattention(node: NodeView, ctx: ProviderContext):
    """Attention of an 8-bit input (its scale and zero point, from the DynamicQuantizeLinear
    before it) with an 8-bit packed QKV weight (per tensor or per column): the weight is
    dequantized once, the input at each run, and the float Attention runs (onnxruntime
    multiplies the integers exactly and scales the int32 sums: the two round differently in
    the last bits)."""
    zp = node.input(7)
    weight = _dequantized(node.input(1).const, node.input(4).const,
                          None if zp is None else zp.const)
    attention = make_ms_attention(_AsFloatAttention(node, weight), ctx)

    def kernel(x, w_q, bias, input_scale, weight_scale, mask_index=None,
               input_zero_point=None, weight_zero_point=None, past=None):
        return attention(_dequantized(x, input_scale, input_zero_point), weight, bias,
                         mask_index, past)

    return kernel
