"""The native attention core (``_mlas_native.attention_f32``) that Attention and
MultiHeadAttention use for float32: against float64, for the strided head views the ops pass,
broadcast biases and thread counts, and its argument checks. (The ops themselves are checked
against onnxruntime in test_attention.py and test_contrib_transformer.py; their float32 cases
run this kernel. Its softmax row per ISA: tests/native/x86_dwconv_test.cpp.)"""

from __future__ import annotations

import numpy as np
import pytest

from onnxplex.providers.cpu_mlas import _native

NAT = _native.native()
pytestmark = pytest.mark.skipif(NAT is None or not hasattr(NAT, "attention_f32"),
                                reason="_mlas_native (with attention_f32) is not built")


def _reference(q, k, v, scale, bias):
    s = (q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2)) * scale
    if bias is not None:
        s = s + bias
    s = s - s.max(-1, keepdims=True)
    e = np.exp(s)
    return ((e / e.sum(-1, keepdims=True)) @ v.astype(np.float64)).transpose(0, 2, 1, 3)


def _heads(rng, b, h, n, d):
    """[B, H, N, D] as the ops make it: a transposed view of [B, N, H * D]."""
    return rng.standard_normal((b, n, h, d)).astype(np.float32).transpose(0, 2, 1, 3)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("b,h,s,t,dh,dv", [
    (1, 12, 64, 64, 64, 64),    # GPT-2 small's heads
    (2, 3, 5, 7, 9, 4),         # keys other than queries, Dv other than Dh
    (1, 2, 33, 70, 40, 40),     # rows past a vector, a tail
    (3, 1, 1, 1, 1, 1),
])
@pytest.mark.parametrize("bias_shape", [None, "1,1,S,T", "B,1,1,T", "B,H,S,T"])
def test_attention_matches_float64(b, h, s, t, dh, dv, bias_shape, threads):
    rng = np.random.default_rng(b * 100 + s)
    q, k, v = _heads(rng, b, h, s, dh), _heads(rng, b, h, t, dh), _heads(rng, b, h, t, dv)
    bias = None
    if bias_shape is not None:
        dims = [{"B": b, "H": h, "S": s, "T": t}.get(x, 1) for x in bias_shape.split(",")]
        bias = rng.standard_normal(dims).astype(np.float32)
        bias[..., -1] = np.finfo(np.float32).min   # a masked key, as the causal masks
    y = np.full((b, s, h, dv), np.nan, np.float32)
    NAT.attention_f32(q, k, v, y, 0.3, bias, threads)
    np.testing.assert_allclose(y, _reference(q, k, v, 0.3, bias), rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("s, t", [(1100, 1100), (1307, 900)])
@pytest.mark.parametrize("bias_shape", [None, "1,1,S,T", "B,H,S,T", "B,1,1,T"])
def test_attention_long_sequence(s, t, bias_shape):
    """A head whose S x T scores pass the per-thread buffer kept between calls (2^20 floats)
    runs in blocks of query rows (K^T and V packed once, each block's scores in L2): the
    same results, with each row's own bias (a last block short of the others, S not the
    block's multiple), and a NaN confined to its row."""
    rng = np.random.default_rng(11)
    b, h = 2, 2
    q, k, v = _heads(rng, b, h, s, 16), _heads(rng, b, h, t, 16), _heads(rng, b, h, t, 8)
    bias = None
    if bias_shape is not None:
        dims = [{"B": b, "H": h, "S": s, "T": t}.get(x, 1) for x in bias_shape.split(",")]
        bias = rng.standard_normal(dims).astype(np.float32)
        bias[..., -1] = np.finfo(np.float32).min
    y = np.empty((b, s, h, 8), np.float32)
    NAT.attention_f32(q, k, v, y, 0.25, bias, 2)
    np.testing.assert_allclose(y, _reference(q, k, v, 0.25, bias), rtol=2e-5, atol=1e-5)
    if bias_shape == "B,H,S,T":
        bias[1, 0, s - 5, 7] = np.nan   # (a row of the last block)
        NAT.attention_f32(q, k, v, y, 0.25, bias, 1)
        assert np.isnan(y[1, s - 5, 0]).all()
        ok = np.ones((b, s, h), bool)
        ok[1, s - 5, 0] = False
        np.testing.assert_allclose(y[ok], _reference(q, k, v, 0.25, np.nan_to_num(bias))[ok],
                                   rtol=2e-5, atol=1e-5)


def test_attention_not_finite_rows_as_numpy():
    """A NaN among a row's scores, or a row whose keys are all masked with -inf, gives NaN
    outputs for that query (numpy's softmax: NaN, or 0 / 0); the other rows are unaffected."""
    rng = np.random.default_rng(3)
    q, k, v = _heads(rng, 1, 2, 4, 8), _heads(rng, 1, 2, 20, 8), _heads(rng, 1, 2, 20, 8)
    bias = np.zeros((1, 2, 4, 20), np.float32)
    bias[0, 0, 1, 3] = np.nan
    bias[0, 1, 2, :] = -np.inf
    y = np.empty((1, 4, 2, 8), np.float32)
    NAT.attention_f32(q, k, v, y, 1.0, bias, 2)
    assert np.isnan(y[0, 1, 0]).all() and np.isnan(y[0, 2, 1]).all()
    ok = np.ones((4, 2), bool)
    ok[1, 0] = ok[2, 1] = False
    np.testing.assert_allclose(y[0][ok], _reference(q, k, v, 1.0, np.where(
        np.isfinite(bias), bias, 0))[0][ok], rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("masked", [np.finfo(np.float32).min, -np.inf, -1e4])
def test_masked_probabilities_are_zero_not_denormal(masked):
    """A causal mask's keys get probability 0 exactly, and no probability is a denormal: the
    vector exp gives 0 below ln(FLT_MIN) (a denormal in every masked place made each later
    multiply take the processor's slow path: GPT-2's masked attention ran 34x slower). With V
    the identity, the output rows are the probabilities."""
    rng = np.random.default_rng(5)
    t = 40
    q, k = _heads(rng, 1, 3, t, 16), _heads(rng, 1, 3, t, 16)
    v = np.broadcast_to(np.eye(t, dtype=np.float32), (1, 3, t, t))
    bias = np.where(np.triu(np.ones((t, t), bool), 1), np.float32(masked),
                    np.float32(0))[None, None]
    bias = np.ascontiguousarray(bias.astype(np.float32))
    y = np.empty((1, t, 3, t), np.float32)
    NAT.attention_f32(q, k, v, y, 0.25, bias, 1)
    probs = y[0].transpose(1, 0, 2)   # [H, S, T]
    assert (probs[:, np.triu(np.ones((t, t), bool), 1)] == 0).all()
    tiny = (probs != 0) & (np.abs(probs) < np.finfo(np.float32).tiny)
    assert not tiny.any(), f"{tiny.sum()} denormal probabilities"
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)


def test_attention_without_keys_is_nan():
    q = np.ones((1, 1, 3, 4), np.float32)
    k = v = np.ones((1, 1, 0, 4), np.float32)
    y = np.zeros((1, 3, 1, 4), np.float32)
    NAT.attention_f32(q, k, v, y, 1.0)
    assert np.isnan(y).all()


def test_attention_argument_checks():
    q = np.ones((1, 2, 3, 4), np.float32)
    y = np.empty((1, 3, 2, 4), np.float32)
    with pytest.raises(ValueError, match="disagree"):
        NAT.attention_f32(q, np.ones((1, 2, 5, 3), np.float32), q, y, 1.0)
    with pytest.raises(ValueError, match=r"\[B, S, H, Dv\]"):
        NAT.attention_f32(q, q, q, np.empty((1, 2, 3, 4), np.float32), 1.0)
    with pytest.raises(ValueError, match="contiguous along its last axis"):
        NAT.attention_f32(np.ones((1, 2, 3, 8), np.float32)[..., ::2], q, q, y, 1.0)
    with pytest.raises(ValueError, match="broadcast"):
        NAT.attention_f32(q, q, q, y, 1.0, np.zeros((1, 2, 2, 3), np.float32))
    with pytest.raises(TypeError, match="float32"):
        NAT.attention_f32(q.astype(np.float64), q, q, y, 1.0)
