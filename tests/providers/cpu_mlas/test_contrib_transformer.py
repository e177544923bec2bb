"""com.microsoft transformer kernels (contrib_transformer) against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from kernel_harness import node_model, run_kernel

from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

MS = "com.microsoft"
_SO = ort.SessionOptions()
_SO.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
_SO.intra_op_num_threads = 1


def _ort(op_type, inputs, n_outputs, *, float_outputs=False, **kw):
    m = node_model(op_type, inputs, n_outputs, **kw)
    for o in m.graph.output:
        if float_outputs:   # (onnxruntime mistypes an untyped DMMHA qk output as float16)
            o.type.tensor_type.elem_type = 1
        else:
            o.ClearField("type")
    sess = ort.InferenceSession(m.SerializeToString(), _SO, providers=["CPUExecutionProvider"])
    consts = kw.get("const_inputs", ())
    feeds = {f"in{i}": a for i, a in enumerate(inputs) if a is not None and i not in consts}
    return sess.run(None, feeds)


def _check(op_type, inputs, n_outputs=1, *, rtol=1e-4, atol=1e-5, float_outputs=False, **kw):
    want = _ort(op_type, inputs, n_outputs, float_outputs=float_outputs, **kw)
    got = run_kernel(CpuMlasProvider, op_type, inputs, n_outputs, **kw)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _r(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed + sum(shape)).standard_normal(shape) * scale).astype(
        np.float32)


@pytest.mark.parametrize("with_beta,with_bias,n_out", [
    (True, True, 4), (True, False, 1), (False, True, 4), (True, True, 1)])
def test_skip_layer_norm(with_beta, with_bias, n_out):
    x, skip = _r(2, 5, 16), _r(2, 5, 16, seed=1)
    gamma, beta, bias = _r(16, seed=2), _r(16, seed=3), _r(16, seed=4)
    _check("SkipLayerNormalization",
           [x, skip, gamma, beta if with_beta else None, bias if with_bias else None],
           n_out, domain=MS, const_inputs=(2, 3, 4), epsilon=1e-5)


@pytest.mark.parametrize("skip_shape", [(4, 40), (1, 4, 40)])
def test_skip_layer_norm_broadcast_skip(skip_shape):
    x, skip = _r(3, 4, 40), _r(*skip_shape, seed=1)
    _check("SkipLayerNormalization", [x, skip, _r(40, seed=2), _r(40, seed=3)], 4, domain=MS,
           const_inputs=(2, 3), epsilon=1e-12)


@pytest.mark.parametrize("with_bias,n_out", [(True, 4), (False, 1)])
def test_skip_simplified_layer_norm(with_bias, n_out):
    x, skip = _r(2, 3, 16), _r(2, 3, 16, seed=1)
    inputs = [x, skip, _r(16, seed=2), _r(16, seed=3) if with_bias else None]
    want = _ort("SkipSimplifiedLayerNormalization", inputs, n_out, domain=MS,
                const_inputs=(2, 3), epsilon=1e-6)
    got = run_kernel(CpuMlasProvider, "SkipSimplifiedLayerNormalization", inputs, n_out,
                     domain=MS, const_inputs=(2, 3), epsilon=1e-6)
    for i, (g, w) in enumerate(zip(got, want)):
        if i == 1:
            continue  # mean: unused by the op (onnxruntime leaves it unwritten)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape,axis", [((2, 3, 8), -1), ((1, 1, 40), 2), ((2, 3, 8), 1)],
                         ids=["last", "one_row_of_40", "two_axes"])
@pytest.mark.parametrize("n_out", [1, 2])
def test_simplified_layer_norm(n_out, shape, axis):
    """The last axis on the native RMS row kernel (float32), others through numpy."""
    _check("SimplifiedLayerNormalization", [_r(*shape), _r(*shape[axis:], seed=1)], n_out,
           opset=17, const_inputs=(1,), epsilon=1e-6, axis=axis)


def test_layer_norm_before_opset17():
    _check("LayerNormalization", [_r(2, 3, 8), _r(8, seed=1), _r(8, seed=2)], 1, opset=13,
           const_inputs=(1, 2), epsilon=1e-5, axis=-1)


@pytest.mark.parametrize("ta,tb,tba,tbb,alpha", [
    (0, 0, 0, 0, 0.5), (1, 0, 0, 0, 1.0), (0, 1, 0, 0, 2.0), (1, 1, 0, 0, 1.0),
    (0, 0, 1, 0, 1.0), (0, 0, 0, 1, 1.0), (1, 0, 1, 0, 1.0), (0, 1, 0, 1, 0.25),
])
def test_fused_matmul(ta, tb, tba, tbb, alpha):
    a = _r(2, 3, 4, 5)   # logical [2, 3, M=4, K=5]
    b = _r(2, 3, 5, 6, seed=1)
    if ta:
        a = np.swapaxes(a, -1, -2)
    if tba:
        a = np.moveaxis(a, -2, 0)
    if tb:
        b = np.swapaxes(b, -1, -2)
    if tbb:
        b = np.moveaxis(b, -2, 0)
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    _check("FusedMatMul", [a, b], domain=MS, alpha=alpha, transA=ta, transB=tb,
           transBatchA=tba, transBatchB=tbb)


def test_fused_matmul_const_b():
    _check("FusedMatMul", [_r(3, 4, 5), _r(6, 5, seed=1)], domain=MS, const_inputs=(1,),
           transB=1, alpha=0.125)


def _mask_variant(kind, b, s, total):
    rng = np.random.default_rng(7)
    if kind == "none":
        return None
    if kind == "1d":
        return np.array([total, total - 2][:b], np.int32)
    if kind == "1d_start":
        return np.array([total, total - 1, 0, 1][:2 * b], np.int32)
    if kind == "2d":
        m = np.ones((b, total), np.int32)
        m[-1, -2:] = 0
        return m
    m = (rng.random((b, s, total)) > 0.3).astype(np.int32)
    m[..., 0] = 1
    return m


@pytest.mark.parametrize("mask", ["none", "1d", "1d_start", "2d", "3d"])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention_masks(mask, unidirectional):
    b, s, d, h = 2, 5, 16, 4
    x, w, bias = _r(b, s, d), _r(d, 3 * d, seed=1, scale=0.3), _r(3 * d, seed=2)
    _check("Attention", [x, w, bias, _mask_variant(mask, b, s, s)], domain=MS,
           const_inputs=(1, 2), num_heads=h, unidirectional=unidirectional)


def test_attention_past_present_bias_scale():
    b, s, p, d, h = 2, 3, 4, 16, 2
    x, w, bias = _r(b, s, d), _r(d, 3 * d, seed=1, scale=0.3), _r(3 * d, seed=2)
    past = _r(2, b, h, p, d // h, seed=3)
    mask = np.ones((b, s + p), np.int32)
    mask[0, 1] = 0
    _check("Attention", [x, w, bias, mask, past], 2, domain=MS,
           num_heads=h, unidirectional=1, scale=0.3, mask_filter_value=-1000.0)
    # onnxruntime rejects past together with attention_bias: the bias on its own
    _check("Attention", [x, w, bias, mask[:, p:], None, _r(1, h, s, s, seed=4)], domain=MS,
           num_heads=h)


def test_attention_qkv_hidden_sizes():
    b, s, d, h = 1, 4, 8, 2
    x, w, bias = _r(b, s, d), _r(d, 8 + 8 + 12, seed=1), _r(28, seed=2)
    _check("Attention", [x, w, bias], domain=MS, const_inputs=(1,), num_heads=h,
           qkv_hidden_sizes=[8, 8, 12])


@pytest.mark.parametrize("case", ["plain", "bias_mask", "attn_bias", "past", "cross",
                                  "causal"])
def test_multi_head_attention(case):
    b, s, kv, d, h = 2, 3, 5, 16, 4
    q, k, v = _r(b, s, d), _r(b, kv, d, seed=1), _r(b, kv, d, seed=2)
    inputs = [q, k, v]
    n_out, attrs = 1, {}
    if case == "bias_mask":
        mask = np.ones((b, kv), np.int32)
        mask[1, -2:] = 0
        inputs += [_r(3 * d, seed=3), mask]
    elif case == "attn_bias":
        inputs += [None, None, _r(b, 1, s, kv, seed=4)]
    elif case == "past":
        p = 2
        inputs += [_r(3 * d, seed=3), None, _r(1, h, s, kv + p, seed=4),
                   _r(b, h, p, d // h, seed=5), _r(b, h, p, d // h, seed=6)]
        n_out = 3
    elif case == "cross":
        inputs = [q, _r(b, h, kv, d // h, seed=1), _r(b, h, kv, d // h, seed=2)]
    elif case == "causal":
        inputs = [q, _r(b, s, d, seed=1), _r(b, s, d, seed=2)]
        attrs = {"unidirectional": 1}
    _check("MultiHeadAttention", inputs, n_out, domain=MS, num_heads=h, **attrs)


def test_multi_head_attention_scale_filter_value():
    b, s, d, h = 1, 4, 8, 2
    mask = np.array([[1, 1, 0, 1]], np.int32)
    _check("MultiHeadAttention", [_r(b, s, d), _r(b, s, d, seed=1), _r(b, s, d, seed=2), None,
                                  mask], domain=MS, num_heads=h, scale=0.2,
           mask_filter_value=-50.0)


def _rotary_caches(positions: int, half: int, dtype=np.float32):
    angles = np.arange(positions)[:, None] / 10000 ** (np.arange(half)[None, :] / half)
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


@pytest.mark.parametrize("layout", ["3d", "4d"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("positions", ["start", "per_token"])
def test_rotary_embedding(layout, interleaved, positions):
    """onnxruntime-genai's LLMs rotate Q and K with com.microsoft RotaryEmbedding: a 3-D
    [B, S, N*H] or 4-D [B, N, S, H] input, a start position or [B, S] position ids."""
    b, s, n, h = 2, 5, 3, 8
    x = _r(b, s, n * h) if layout == "3d" else _r(b, n, s, h)
    cos, sin = _rotary_caches(16, h // 2)
    pos = (np.array([3], np.int64) if positions == "start"
           else np.random.default_rng(1).integers(0, 16, (b, s)).astype(np.int64))
    kw = {"num_heads": n} if layout == "3d" else {}
    _check("RotaryEmbedding", [x, pos, cos, sin], domain=MS, const_inputs=(2, 3),
           interleaved=interleaved, **kw)


def test_rotary_embedding_partial_dim_and_half_precision():
    """rotary_embedding_dim below the head size keeps the other channels; float16 computes in
    float32 (onnxruntime's kernel rounds the same products)."""
    b, s, n, h = 1, 4, 2, 16
    cos, sin = _rotary_caches(8, 4)
    _check("RotaryEmbedding", [_r(b, s, n * h), np.array([1], np.int64), cos, sin],
           domain=MS, const_inputs=(2, 3), num_heads=n, rotary_embedding_dim=8)
    cos16, sin16 = _rotary_caches(8, h // 2, np.float16)
    _check("RotaryEmbedding", [_r(b, s, n * h).astype(np.float16), np.array([0], np.int64),
                               cos16, sin16], domain=MS, const_inputs=(2, 3), num_heads=n,
           rtol=2e-3, atol=2e-3)


_GQA_INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k",
               "total_sequence_length", "cos_cache", "sin_cache", "position_ids",
               "attention_bias", "head_sink")

# name: (batch, new tokens, query heads, kv heads, head size, past buffer (None: no past),
#        each sequence's total length, total_sequence_length, options)
_GQA_CASES = {
    "first_prompt": (2, 5, 4, 2, 8, None, [5, 5], 5, {}),
    "first_prompt_right_padded": (2, 5, 4, 2, 8, None, [5, 3], 5, {}),
    "first_prompt_empty_past": (2, 5, 4, 2, 8, 0, [5, 5], 5, {}),
    "decode_step": (2, 1, 4, 2, 8, 4, [5, 5], 5, {}),
    "decode_shared_buffer_ragged": (2, 1, 4, 2, 8, 8, [5, 3], 5, {}),
    "chunk_after_past": (1, 3, 4, 1, 8, 4, [7], 7, {}),
    "packed_qkv": (2, 4, 4, 2, 8, None, [4, 4], 4, {"packed": True}),
    "rotary_prompt": (2, 4, 4, 2, 16, None, [4, 4], 4, {"do_rotary": 1}),
    "rotary_decode_interleaved": (2, 1, 4, 2, 16, 8, [6, 4], 6,
                                  {"do_rotary": 1, "rotary_interleaved": 1}),
    "rotary_position_ids": (2, 3, 4, 2, 16, None, [3, 3], 3,
                            {"do_rotary": 1, "position_ids": True}),
    "rotary_decode_position_ids": (2, 1, 4, 2, 16, 8, [6, 4], 6,
                                   {"do_rotary": 1, "position_ids": True}),
    "local_window": (1, 6, 2, 1, 8, None, [6], 6, {"local_window_size": 2}),
    "local_window_decode": (1, 1, 2, 1, 8, 6, [7], 7, {"local_window_size": 3}),
    "softcap": (1, 4, 2, 2, 8, None, [4], 4, {"softcap": 2.0}),
    "smooth_softmax": (1, 4, 2, 2, 8, None, [4], 4, {"smooth_softmax": 1}),
    "attention_bias": (1, 3, 2, 1, 8, 2, [5], 5, {"bias": True}),
    "head_sink": (2, 4, 4, 2, 8, None, [4, 4], 4, {"sink": True}),
    "head_sink_decode_window": (1, 1, 2, 1, 16, 6, [7], 7,
                                {"sink": True, "local_window_size": 3}),
    # Gemma-2's local layers: a past of the window's capacity holding the last keys
    "sliding_cache_short_prompt": (1, 3, 2, 1, 16, 4, [3], 3,
                                   {"local_window_size": 4, "sliding_window_cache": 1}),
    "sliding_cache_long_prompt": (1, 6, 2, 1, 16, 4, [6], 6,
                                  {"local_window_size": 4, "sliding_window_cache": 1}),
    "sliding_cache_decode_filling": (1, 1, 2, 1, 16, 4, [3], 3,
                                     {"local_window_size": 4, "sliding_window_cache": 1}),
    "sliding_cache_decode_full": (1, 1, 4, 2, 16, 4, [9], 9,
                                  {"local_window_size": 4, "sliding_window_cache": 1,
                                   "do_rotary": 1, "softcap": 30.0}),
}


@pytest.mark.parametrize("name", sorted(_GQA_CASES))
def test_group_query_attention(name):
    """com.microsoft GroupQueryAttention, the attention of onnxruntime-genai's LLMs (no
    provider ran it before): prompts (padded on the right), decoding steps on a separate past
    or a shared buffer with sequences of different lengths, packed QKV, rotary Q and K,
    local windows, softcap, smooth softmax, an attention bias, attention sinks (head_sink),
    Gemma-2's sliding-window cache;
    the output and both presents (zeros past each sequence's length) against onnxruntime's."""
    b, s, n, kv, h, past, lens, total, opts = _GQA_CASES[name]
    opts = dict(opts)
    rng = np.random.default_rng(len(name))
    q, k, v = (rng.standard_normal((b, s, m * h)).astype(np.float32) for m in (n, kv, kv))
    feeds = ({"query": np.concatenate([q, k, v], -1)} if opts.pop("packed", False)
             else {"query": q, "key": k, "value": v})
    if past is not None:
        feeds["past_key"], feeds["past_value"] = (
            rng.standard_normal((b, kv, past, h)).astype(np.float32) for _ in range(2))
    feeds["seqlens_k"] = np.array(lens, np.int32) - 1
    feeds["total_sequence_length"] = np.array(total, np.int32)
    if opts.get("do_rotary"):
        feeds["cos_cache"], feeds["sin_cache"] = _rotary_caches(64, h // 2)
        if opts.pop("position_ids", False):
            feeds["position_ids"] = rng.integers(0, 60, (b, s)).astype(np.int64)
    if opts.pop("bias", False):
        feeds["attention_bias"] = rng.standard_normal((b, 1, s, total)).astype(np.float32)
    if opts.pop("sink", False):
        feeds["head_sink"] = rng.standard_normal(n).astype(np.float32)
    last = max(_GQA_INPUTS.index(k) for k in feeds)
    inputs = [feeds.get(k) for k in _GQA_INPUTS[:last + 1]]
    if not opts.get("sliding_window_cache"):
        _check("GroupQueryAttention", inputs, 3, domain=MS, num_heads=n, kv_num_heads=kv,
               **opts)
        return
    # a sliding cache's slots past the keys it holds are left unwritten by onnxruntime
    # (whatever its buffer held): the output, and the presents' slots that hold keys
    kw = dict(domain=MS, num_heads=n, kv_num_heads=kv, **opts)
    want = _ort("GroupQueryAttention", inputs, 3, **kw)
    got = run_kernel(CpuMlasProvider, "GroupQueryAttention", inputs, 3, **kw)
    held = min(lens[0], past) if lens[0] <= past else opts["local_window_size"]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
    for g, w in zip(got[1:], want[1:]):
        assert g.shape == w.shape
        np.testing.assert_allclose(g[:, :, :held], w[:, :, :held], rtol=1e-4, atol=1e-5)
        assert not g[:, :, held:].any()


_DM_B, _DM_N, _DM_H, _DM_MAX = 4, 2, 8, 6


def _dmmha_self_inputs(past, mask, attention_bias, bias, beams):
    d = _DM_N * _DM_H
    rng = np.random.default_rng(past * 16 + beams)
    return [_r(_DM_B, 1, d, seed=1), _r(_DM_B, 1, d, seed=2), _r(_DM_B, 1, d, seed=3),
            (rng.random((_DM_B, past + 1)) > 0.3).astype(np.int32) if mask else None,
            _r(1, _DM_N, 1, past + 1, seed=4) if attention_bias else None,
            _r(_DM_B, _DM_N, _DM_MAX, _DM_H, seed=5), _r(_DM_B, _DM_N, _DM_MAX, _DM_H, seed=6),
            np.array([past], np.int32),
            np.array([beams], np.int32) if beams > 1 else None,
            rng.integers(0, beams, (_DM_B // beams, beams, _DM_MAX)).astype(np.int32)
            if beams > 1 else None,
            _r(3 * d, seed=7) if bias else None]


@pytest.mark.parametrize("beams", [1, 2], ids=["greedy", "beams"])
@pytest.mark.parametrize("past", [0, 3])
@pytest.mark.parametrize("mask, attention_bias, bias", [
    (False, False, False), (True, False, False), (False, True, False), (False, False, True),
    (True, True, True)], ids=["plain", "mask", "attention_bias", "bias", "all"])
def test_decoder_masked_multihead_attention_self(beams, past, mask, attention_bias, bias):
    """One decoding step of a decoder exported for beam search (Whisper, T5): the past in a
    buffer shared with the present, each past position read from the beam its token came
    from, and the scaled scores as output_qk (no provider ran it)."""
    _check("DecoderMaskedMultiHeadAttention",
           _dmmha_self_inputs(past, mask, attention_bias, bias, beams), 4, domain=MS,
           num_heads=_DM_N, past_present_share_buffer=1, output_qk=1, float_outputs=True)


@pytest.mark.parametrize("mask", [False, True])
@pytest.mark.parametrize("attrs", [{}, {"scale": 0.3, "mask_filter_value": -50.0}])
def test_decoder_masked_multihead_attention_cross(mask, attrs):
    """Cross-attention to the encoder's keys and values, given as [B, H, L, Dh]."""
    d, length = _DM_N * _DM_H, 5
    inputs = [_r(_DM_B, 1, d, seed=1), _r(_DM_B, _DM_N, length, _DM_H, seed=2),
              _r(_DM_B, _DM_N, length, _DM_H, seed=3),
              (np.arange(length)[None, :] < np.array([[5], [3], [1], [4]])).astype(np.int32)
              if mask else None, None, None, None, None, None, None, _r(3 * d, seed=4)]
    _check("DecoderMaskedMultiHeadAttention", inputs, 1, domain=MS, num_heads=_DM_N, **attrs)


def test_decoder_masked_multihead_attention_refuses_a_full_buffer():
    inputs = _dmmha_self_inputs(0, False, False, False, 1)
    inputs[7] = np.array([_DM_MAX], np.int32)
    with pytest.raises(Exception, match="leaves no room in the past buffer"):
        run_kernel(CpuMlasProvider, "DecoderMaskedMultiHeadAttention", inputs, 3, domain=MS,
                   num_heads=_DM_N, past_present_share_buffer=1)


@pytest.mark.parametrize("variant", ["full", "no_segment_no_mask", "position_ids", "fp16"])
def test_embed_layer_normalization(variant):
    """BERT's embeddings as onnxruntime's transformer optimizer fuses them (no provider ran
    the fused op): word + position (+ segment) embeddings, layer-normalized; mask_index (the
    mask rows' sums, zeros without a mask) and the sum before normalizing."""
    b, s, h, vocab, positions, types = 2, 5, 16, 30, 12, 2
    rng = np.random.default_rng(3)
    dt = np.float16 if variant == "fp16" else np.float32
    ids = rng.integers(0, vocab, (b, s)).astype(np.int32)
    seg = rng.integers(0, types, (b, s)).astype(np.int32)
    word, pos, typ = (_r(n, h, seed=k).astype(dt) for k, n in enumerate((vocab, positions,
                                                                           types)))
    gamma, beta = _r(h, seed=5).astype(dt), _r(h, seed=6).astype(dt)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    inputs = [ids, seg, word, pos, typ, gamma, beta, mask]
    if variant == "no_segment_no_mask":
        inputs = [ids, None, word, pos, None, gamma, beta]
    elif variant == "position_ids":
        inputs.append(np.array([[4, 3, 2, 1, 0]], np.int32))
    tol = 2e-3 if variant == "fp16" else 1e-5
    _check("EmbedLayerNormalization", inputs, 3, domain=MS, const_inputs=(2, 3, 4, 5, 6),
           epsilon=1e-12, rtol=tol, atol=tol)


@pytest.mark.parametrize("per_column, mask, causal", [
    (False, None, 0), (True, "ends", 0), (False, "ends", 1), (True, None, 1)])
def test_qattention(per_column, mask, causal):
    """What onnxruntime's quantize_dynamic makes of an optimized BERT's Attention: a uint8
    input (DynamicQuantizeLinear's) and an int8 packed QKV weight, per tensor or per
    column."""
    b, s, d, h = 2, 5, 16, 4
    rng = np.random.default_rng(9)
    x = rng.integers(0, 256, (b, s, d)).astype(np.uint8)
    w = rng.integers(-127, 128, (d, 3 * d)).astype(np.int8)
    bias = _r(3 * d, seed=2)
    w_scale = (rng.random(3 * d) * 0.02 + 0.005).astype(np.float32) if per_column \
        else np.array(0.01, np.float32)
    w_zp = np.zeros(3 * d, np.int8) if per_column else np.array(0, np.int8)
    mask_index = np.array([5, 3], np.int32) if mask == "ends" else None
    _check("QAttention", [x, w, bias, np.array(0.02, np.float32), w_scale, mask_index,
                          np.array(128, np.uint8), w_zp], domain=MS, const_inputs=(1, 2, 4, 7),
           num_heads=h, unidirectional=causal, rtol=1e-4, atol=1e-4)


def test_qembed_layer_normalization():
    """QEmbedLayerNormalization: EmbedLayerNormalization over 8-bit tables."""
    b, s, hid, vocab = 2, 6, 16, 40
    rng = np.random.default_rng(4)

    def table(*shape):
        return rng.integers(0, 256, shape).astype(np.uint8)

    scales = [np.array(v, np.float32) for v in (0.02, 0.01, 0.03, 0.005, 0.004)]
    zps = [np.array(v, np.uint8) for v in (128, 120, 130, 10, 127)]
    inputs = [rng.integers(0, vocab, (b, s)).astype(np.int32),
              rng.integers(0, 2, (b, s)).astype(np.int32), table(vocab, hid), table(16, hid),
              table(2, hid), table(hid), table(hid),
              np.array([[1] * 6, [1] * 4 + [0] * 2], np.int32), *scales, *zps]
    _check("QEmbedLayerNormalization", inputs, 2, domain=MS,
           const_inputs=tuple(range(2, 7)) + tuple(range(8, 18)), epsilon=1e-12,
           rtol=1e-4, atol=1e-4)


def _refused(op_type, inputs, n_outputs=1, **kw):
    """run_kernel raises: onnxplex refuses what the kernel cannot compute right."""
    with pytest.raises((IndexError, ValueError)):
        run_kernel(CpuMlasProvider, op_type, inputs, n_outputs, **kw)


@pytest.mark.parametrize("bad", ["negative", "past_the_table"])
def test_embeddings_refuse_ids_outside_their_tables(bad):
    """A negative id was read from the end of the table (numpy's indexing), a wrong row
    without an error; onnxruntime refuses both."""
    ids = np.array([[1, 2, -1 if bad == "negative" else 30]], np.int32)
    inputs = [ids, None, _r(30, 8), _r(8, 8, seed=1), None, _r(8, seed=2), _r(8, seed=3)]
    _refused("EmbedLayerNormalization", inputs, 1, domain=MS, const_inputs=(2, 3, 5, 6))
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail):   # (onnxruntime too)
        _ort("EmbedLayerNormalization", inputs, 1, domain=MS, const_inputs=(2, 3, 5, 6))


def test_rotary_positions_outside_the_cache_are_refused():
    cos, sin = _rotary_caches(8, 4)
    for pos in (np.array([[0, -1]], np.int64), np.array([[0, 8]], np.int64)):
        _refused("RotaryEmbedding", [_r(1, 2, 8), pos, cos, sin], domain=MS,
                 const_inputs=(2, 3), num_heads=1)


@pytest.mark.parametrize("lens, total", [([0], 5), ([6], 5), ([2], 5)])
def test_group_query_attention_refuses_lengths_that_do_not_fit(lens, total):
    """seqlens_k outside what the past and the new tokens make: a negative start wrote the new
    keys at the end of the present and read the wrong keys, without an error."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 3, m * 8)).astype(np.float32) for m in (2, 1, 1))
    past = rng.standard_normal((1, 1, 4, 8)).astype(np.float32)
    _refused("GroupQueryAttention", [q, k, v, past, past, np.array(lens, np.int32) - 1,
                                     np.array(total, np.int32)], 3, domain=MS, num_heads=2,
             kv_num_heads=1)


def test_group_query_attention_of_an_empty_batch():
    """No sequences: empty outputs (the length check raised numpy's 'zero-size array' error)."""
    f = np.float32
    got = run_kernel(CpuMlasProvider, "GroupQueryAttention",
                     [np.zeros((0, 1, 32), f), np.zeros((0, 1, 16), f), np.zeros((0, 1, 16), f),
                      np.zeros((0, 1, 4, 16), f), np.zeros((0, 1, 4, 16), f),
                      np.zeros(0, np.int32), np.array(5, np.int32)], 3, domain=MS,
                     num_heads=2, kv_num_heads=1)
    assert [g.shape for g in got] == [(0, 1, 32), (0, 1, 5, 16), (0, 1, 5, 16)]
