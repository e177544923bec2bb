"""Attention kernels for cpu_mlas: Attention (opsets 23-25) and RotaryEmbedding (opset 23).

Attention runs as two batched GEMMs around a softmax. Grouped-query attention never repeats
K and V: the ``G = q_heads / kv_heads`` query heads that share a KV head are stacked into the
row dimension, so each KV head does one ``[G * S_q, D] @ [D, S_kv]`` GEMM. The additive bias
(attention mask, causal frontier, sliding window, KV padding) is built once at its own
broadcast shape (usually ``[S_q, S_kv]`` or ``[B, 1, S_q, S_kv]``), never per head. Query
rows whose keys are all masked produce zeros (not NaN), as ONNX specifies. float16 and
bfloat16 run in float32.
"""

from __future__ import annotations

import logging
import math

import numpy as np
from onnx import TensorProto as TP

from onnxplex import NodeView, ProviderContext
from onnxplex._dtypes import np_dtype

from ._registry import op
from .nn import compute_dtype

logger = logging.getLogger(__name__)

_ATTN_T = frozenset({TP.FLOAT, TP.FLOAT16, TP.BFLOAT16, TP.DOUBLE})


def _softmax_rows(x: np.ndarray, rnd=None) -> np.ndarray:
    """Softmax over the last axis, in place; an all ``-inf`` row becomes zeros. ``rnd``
    rounds intermediates to a narrower type (float16 emulation)."""
    m = x.max(axis=-1, keepdims=True)
    m[~np.isfinite(m)] = 0  # all -inf (or +inf/NaN) rows: no shift, exp gives 0 / NaN
    x -= m
    if rnd is not None:
        x = rnd(x)
    np.exp(x, out=x)
    if rnd is not None:
        x = rnd(x)
    s = x.sum(axis=-1, keepdims=True)
    if rnd is not None:
        s = rnd(s)
    s[s == 0] = 1
    x /= s
    return x if rnd is None else rnd(x)


def _window_allowed(q_len: int, kv_len: int, offset, left: int, right: int,
                    causal: bool) -> np.ndarray:
    """Boolean ``[S_q, S_kv]`` (or ``[B, 1, S_q, S_kv]`` for a per-batch offset) of the keys
    each query may see under the causal frontier and the sliding window."""
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    off = np.asarray(offset)
    if off.ndim > 0:
        off = off.reshape(-1, 1, 1, 1)
    diff = (i + off) - j  # query position minus key position
    allowed = np.ones(diff.shape, dtype=bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    return allowed


def _make_attention(node: NodeView, ctx: ProviderContext):
    """Attention-23/24/25: 3-D/4-D, GQA/MQA, masks, causal, window, KV cache, softcap."""
    scale_attr = node.attr("scale")
    is_causal = int(node.attr("is_causal", 0)) == 1
    q_heads_attr = node.attr("q_num_heads")
    kv_heads_attr = node.attr("kv_num_heads")
    softcap = float(node.attr("softcap", 0.0) or 0.0)
    mode = int(node.attr("qk_matmul_output_mode", 0))
    sp = node.attr("softmax_precision")
    left = int(node.attr("left_window_size", -1))
    right = int(node.attr("right_window_size", -1))
    want_qk = len(node.outputs) > 3 and node.outputs[3] is not None
    n_outputs = max((i + 1 for i, o in enumerate(node.outputs) if o is not None), default=1)

    def kernel(q, k, v, attn_mask=None, past_key=None, past_value=None,
               nonpad_kv_seqlen=None):
        out_dtype = q.dtype
        cd = compute_dtype(q.dtype)
        if sp is not None and np_dtype(int(sp)) == np.float64:
            cd = np.dtype(np.float64)
        rank3 = q.ndim == 3
        b = q.shape[0]
        if rank3:
            hq, hkv = int(q_heads_attr), int(kv_heads_attr)
            q4 = q.reshape(b, q.shape[1], hq, -1).transpose(0, 2, 1, 3)
            k4 = k.reshape(b, k.shape[1], hkv, -1).transpose(0, 2, 1, 3)
            v4 = v.reshape(b, v.shape[1], hkv, -1).transpose(0, 2, 1, 3)
        else:
            q4, k4, v4 = q, k, v
            hq, hkv = q.shape[1], k.shape[1]
        if past_key is not None:
            present_k = np.concatenate((past_key, k4), axis=2)
            present_v = np.concatenate((past_value, v4), axis=2)
        else:
            present_k, present_v = k4, v4
        sq, d = q4.shape[2], q4.shape[3]
        skv = present_k.shape[2]
        dv = present_v.shape[3]
        g = hq // hkv
        scale = float(scale_attr) if scale_attr is not None else 1.0 / math.sqrt(d)

        # float16/bfloat16: round every intermediate to T as the spec's graph does (float32
        # accumulation inside the GEMMs), so results match reference implementations.
        low = cd != q.dtype and q.dtype != np.float64
        rnd = (lambda a: a.astype(out_dtype).astype(cd)) if low else (lambda a: a)

        # scores[b, kv, g*sq + i, j]
        qc = q4.astype(cd, copy=False).reshape(b, hkv, g * sq, d)
        kt = present_k.astype(cd, copy=False).transpose(0, 1, 3, 2)
        if low:
            st = cd.type(out_dtype.type(math.sqrt(scale)))
            scores = rnd(np.matmul(rnd(qc * st), rnd(kt * st)))
        else:
            scores = np.matmul(qc, kt)
            scores *= cd.type(scale)
        scores = scores.reshape(b, hq, sq, skv)
        if softcap > 0:
            scores = rnd(scores / cd.type(softcap))
            scores = rnd(np.tanh(scores, out=scores))
            scores = rnd(scores * cd.type(softcap))
        qk_out = scores.copy() if want_qk and mode in (0, 1) else None

        # additive bias at its own (broadcastable) shape
        bias = None
        if attn_mask is not None:
            m = attn_mask
            if m.dtype == np.bool_:
                mb = np.zeros(m.shape, dtype=cd)
                mb[~m] = -np.inf
            else:
                mb = m.astype(cd)
            pad = skv - mb.shape[-1]
            if pad > 0:
                mb = np.concatenate(
                    (mb, np.full(mb.shape[:-1] + (pad,), -np.inf, dtype=cd)), axis=-1)
            bias = mb
        if is_causal or left >= 0 or right >= 0:
            if past_key is None and nonpad_kv_seqlen is not None:
                offset = np.asarray(nonpad_kv_seqlen).reshape(-1).astype(np.int64) - sq
            else:
                offset = past_key.shape[2] if past_key is not None else 0
            allowed = _window_allowed(sq, skv, offset, left, right, is_causal)
            wb = np.where(allowed, cd.type(0), cd.type(-np.inf))
            bias = wb if bias is None else bias + wb
        if nonpad_kv_seqlen is not None:
            lens = np.asarray(nonpad_kv_seqlen).reshape(-1, 1)
            pb = np.where(np.arange(skv)[None, :] < lens, cd.type(0), cd.type(-np.inf))
            pb = pb.reshape(b, 1, 1, skv)
            bias = pb if bias is None else bias + pb
        if bias is not None:
            scores += bias
            scores = rnd(scores)
        if want_qk and mode == 2:
            qk_out = scores.copy()
        probs = _softmax_rows(scores, None if sp is not None else rnd)
        if bias is not None:
            dead = np.isneginf(bias.max(axis=-1, keepdims=True))
            if dead.any():
                probs = np.where(dead, cd.type(0), probs)
        if want_qk and mode == 3:
            qk_out = probs
        if cd != q.dtype and q.dtype != np.float64:
            # the spec casts the probabilities to T1 before the second matmul
            probs = probs.astype(out_dtype).astype(cd)
        vc = present_v.astype(cd, copy=False)
        y = rnd(np.matmul(probs.reshape(b, hkv, g * sq, skv), vc)).reshape(b, hq, sq, dv)
        if rank3:
            y = y.transpose(0, 2, 1, 3).reshape(b, sq, hq * dv)
        y = np.ascontiguousarray(y).astype(out_dtype, copy=False)
        if n_outputs == 1:
            return y
        outs = [y, present_k, present_v]
        if want_qk:
            outs.append(np.ascontiguousarray(qk_out).astype(out_dtype, copy=False))
        return tuple(outs[:n_outputs])

    return kernel


def _attention_predicate(node: NodeView) -> str | None:
    q = node.input(0)
    if q is not None and q.rank == 3 and (node.attr("q_num_heads") is None
                                          or node.attr("kv_num_heads") is None):
        return "3-D Attention needs q_num_heads and kv_num_heads"
    return None


for _v in (23, 24, 25):
    op("Attention", since=_v, dtypes={"T1": _ATTN_T}, predicate=_attention_predicate)(
        _make_attention)


# --------------------------------------------------------------------------------------------
# RotaryEmbedding
# --------------------------------------------------------------------------------------------


@op("RotaryEmbedding", since=23, dtypes={"T": _ATTN_T})
def make_rotary_embedding(node: NodeView, ctx: ProviderContext):
    """RotaryEmbedding-23: 3-D (num_heads) or 4-D input, interleaved or half-split pairs,
    partial rotation (rotary_embedding_dim), cos/sin caches gathered by position_ids."""
    interleaved = int(node.attr("interleaved", 0)) == 1
    rot_attr = int(node.attr("rotary_embedding_dim", 0) or 0)
    num_heads = node.attr("num_heads")

    def kernel(x, cos_cache, sin_cache, position_ids=None):
        out_dtype = x.dtype
        cd = compute_dtype(x.dtype)
        if x.ndim == 4:  # [B, H, S, D] -> work as [B, S, H, D]
            xs = x.transpose(0, 2, 1, 3)
        else:
            bsz, seq, hidden = x.shape
            nh = int(num_heads)
            xs = x.reshape(bsz, seq, nh, hidden // nh)
        head = xs.shape[3]
        rot = rot_attr or head
        half = rot // 2
        cos = np.asarray(cos_cache)
        sin = np.asarray(sin_cache)
        if position_ids is not None:
            cos, sin = cos[position_ids], sin[position_ids]
        cos = cos.astype(cd, copy=False)[:, :, None, :half]
        sin = sin.astype(cd, copy=False)[:, :, None, :half]
        y = xs.astype(cd, copy=True)
        xr = y[..., :rot]
        if interleaved:
            x1, x2 = xr[..., 0::2].copy(), xr[..., 1::2].copy()
            xr[..., 0::2] = cos * x1 - sin * x2
            xr[..., 1::2] = sin * x1 + cos * x2
        else:
            x1, x2 = xr[..., :half].copy(), xr[..., half:].copy()
            xr[..., :half] = cos * x1 - sin * x2
            xr[..., half:] = sin * x1 + cos * x2
        if x.ndim == 4:
            y = y.transpose(0, 2, 1, 3)
        y = np.ascontiguousarray(y.reshape(x.shape) if x.ndim == 3 else y)
        return y.astype(out_dtype, copy=False)

    return kernel


# --------------------------------------------------------------------------------------------
# LinearAttention (opset 27)
# --------------------------------------------------------------------------------------------

_LIN_RULES = ("linear", "gated", "delta", "gated_delta")


def _linear_attention_predicate(node: NodeView) -> str | None:
    rule = node.attr("update_rule", "gated_delta")
    rule = rule.decode() if isinstance(rule, bytes) else str(rule)
    if rule not in _LIN_RULES:
        return f"LinearAttention update_rule {rule!r} is not supported"
    if node.attr("q_num_heads") is None or node.attr("kv_num_heads") is None:
        return "LinearAttention needs q_num_heads and kv_num_heads"
    return None


@op("LinearAttention", since=27, predicate=_linear_attention_predicate)
def make_linear_attention(node: NodeView, ctx: ProviderContext):
    """LinearAttention-27: the recurrent state ``S[b, h] (d_k x d_v)`` updated per step by the
    linear / gated / delta / gated_delta rule, read by the (grouped) queries. The loop runs
    over time steps only; every step is batched over batch and heads (float32 state)."""
    rule = node.attr("update_rule", "gated_delta")
    rule = rule.decode() if isinstance(rule, bytes) else str(rule)
    gating = rule in ("gated", "gated_delta")
    delta = rule in ("delta", "gated_delta")
    hq = int(node.attr("q_num_heads"))
    hkv = int(node.attr("kv_num_heads"))
    scale_attr = float(node.attr("scale", 0.0) or 0.0)
    f32 = np.float32

    def kernel(query, key, value, past_state=None, decay=None, beta=None):
        out_dtype = query.dtype
        b, t, _ = query.shape
        dk = query.shape[-1] // hq
        dv = value.shape[-1] // hkv
        g = hq // hkv
        # [T, B, H, D] so each step reads a contiguous slab
        q = query.reshape(b, t, hkv, g, dk).transpose(1, 0, 2, 3, 4).astype(f32)
        k = key.reshape(b, t, hkv, dk).transpose(1, 0, 2, 3).astype(f32)
        v = value.reshape(b, t, hkv, dv).transpose(1, 0, 2, 3).astype(f32)
        if gating:
            if decay.shape[-1] == hkv:
                gd = np.exp(decay.astype(f32)).reshape(b, t, hkv, 1, 1)
            else:
                gd = np.exp(decay.astype(f32)).reshape(b, t, hkv, dk, 1)
            gd = gd.transpose(1, 0, 2, 3, 4)
        if delta:
            bt = beta.astype(f32).reshape(b, t, beta.shape[-1], 1).transpose(1, 0, 2, 3)
        if past_state is not None:
            state_dtype = past_state.dtype
            state = past_state.astype(f32)  # a copy (never written into the input)
            if state is past_state:
                state = state.copy()
        else:
            state_dtype = out_dtype
            state = np.zeros((b, hkv, dk, dv), dtype=f32)
        scale = scale_attr if scale_attr != 0.0 else 1.0 / math.sqrt(dk)
        out = np.empty((t, b, hkv, g, dv), dtype=f32)
        for i in range(t):
            if gating:
                state *= gd[i]
            vt = v[i]
            kt = k[i]
            if delta:
                retrieved = np.matmul(kt[:, :, None, :], state)[:, :, 0, :]  # [B, H, dv]
                vt = bt[i] * (vt - retrieved)
            state += kt[..., :, None] * vt[..., None, :]
            out[i] = np.matmul(q[i], state)  # [B, H, g, dk] @ [B, H, dk, dv]
        out *= f32(scale)
        y = out.transpose(1, 0, 2, 3, 4).reshape(b, t, hq * dv).astype(out_dtype)
        return y, state.astype(state_dtype)

    return kernel


# --------------------------------------------------------------------------------------------
# CausalConvWithState (opset 27)
# --------------------------------------------------------------------------------------------


def _causal_conv_predicate(node: NodeView) -> str | None:
    act = node.attr("activation", "none")
    act = act.decode() if isinstance(act, bytes) else str(act)
    if act not in ("none", "silu", "swish"):
        return f"CausalConvWithState activation {act!r} is not supported"
    return None


@op("CausalConvWithState", since=27, predicate=_causal_conv_predicate)
def make_causal_conv_with_state(node: NodeView, ctx: ProviderContext):
    """CausalConvWithState-27: depthwise causal 1-D conv over ``[past_state, input]``, optional
    bias and SiLU; returns the last ``k - 1`` padded steps as the new state."""
    act = node.attr("activation", "none")
    act = act.decode() if isinstance(act, bytes) else str(act)
    silu = act in ("silu", "swish")

    def kernel(x, weight, bias=None, past_state=None):
        out_dtype = x.dtype
        cd = compute_dtype(x.dtype)
        bsz, c, length = x.shape
        k = weight.shape[2]
        if past_state is None:
            pad = np.zeros((bsz, c, k - 1), dtype=x.dtype)
        else:
            pad = past_state.astype(x.dtype, copy=False)
        padded = np.concatenate([pad, x], axis=2)
        pc = padded.astype(cd, copy=False)
        w = weight.astype(cd, copy=False).reshape(c, k)
        y = pc[:, :, 0:length] * w[:, 0:1]
        for j in range(1, k):
            y += pc[:, :, j:j + length] * w[:, j:j + 1]
        if bias is not None:
            y += bias.astype(cd, copy=False).reshape(1, c, 1)
        if silu:
            y = y.astype(out_dtype).astype(np.float32)
            y = y * (0.5 * (1 + np.tanh(0.5 * y)))
        y = np.ascontiguousarray(y).astype(out_dtype, copy=False)
        state = np.ascontiguousarray(padded[:, :, padded.shape[2] - (k - 1):])
        return y, state

    return kernel
