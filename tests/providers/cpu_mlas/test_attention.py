"""cpu_mlas Attention / RotaryEmbedding / LinearAttention against onnxruntime (or onnx's
reference where ORT lacks the op) on configurations the node cases miss: GQA with past
key/value and a causal mask, batch > 1, 3-D inputs with a bool mask, partial rotary dims."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from ._oracle import check

ort.set_default_logger_severity(3)

RNG = np.random.default_rng(11)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("causal", [0, 1])
def test_gqa_past_present_causal(causal):
    b, hq, hkv, sq, past, d = 2, 6, 2, 3, 5, 8
    q, k, v = rand(b, hq, sq, d), rand(b, hkv, sq, d), rand(b, hkv, sq, d)
    pk, pv = rand(b, hkv, past, d), rand(b, hkv, past, d)
    check("Attention", [q, k, v, None, pk, pv], 3, opset=23, oracle="ort", rtol=1e-5,
          atol=1e-5, is_causal=causal)


def test_gqa_3d_bool_mask_scale_softcap():
    b, hq, hkv, sq, skv, d = 2, 4, 2, 4, 7, 8
    q, k, v = rand(b, sq, hq * d), rand(b, skv, hkv * d), rand(b, skv, hkv * d)
    mask = RNG.random((b, 1, sq, skv)) > 0.3
    mask[..., 0] = True
    check("Attention", [q, k, v, mask], 1, opset=23, oracle="ort", rtol=1e-5, atol=1e-5,
          q_num_heads=hq, kv_num_heads=hkv, scale=0.3, softcap=2.0)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_qk_matmul_output_modes(mode):
    b, h, sq, skv, d = 2, 3, 4, 6, 8
    q, k, v = rand(b, h, sq, d), rand(b, h, skv, d), rand(b, h, skv, d)
    mask = rand(sq, skv)
    check("Attention", [q, k, v, mask], 4, opset=23, oracle="ref", rtol=1e-5, atol=1e-5,
          qk_matmul_output_mode=mode)


def test_attention_fp16_with_past():
    b, h, sq, past, d = 1, 2, 3, 4, 8
    args = [rand(b, h, sq, d, dtype=np.float16), rand(b, h, sq, d, dtype=np.float16),
            rand(b, h, sq, d, dtype=np.float16), None,
            rand(b, h, past, d, dtype=np.float16), rand(b, h, past, d, dtype=np.float16)]
    check("Attention", args, 3, opset=23, oracle="ort", rtol=5e-3, atol=5e-3, is_causal=1)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rot_dim", [0, 4])
def test_rotary_embedding_3d_position_ids(interleaved, rot_dim):
    b, s, nh, d = 2, 5, 3, 8
    x = rand(b, s, nh * d)
    half = (rot_dim or d) // 2
    cos, sin = rand(16, half), rand(16, half)
    pos = RNG.integers(0, 16, (b, s)).astype(np.int64)
    kw = {"rotary_embedding_dim": rot_dim} if rot_dim else {}
    check("RotaryEmbedding", [x, cos, sin, pos], 1, opset=23, oracle="ort", rtol=1e-5,
          atol=1e-5, interleaved=interleaved, num_heads=nh, **kw)


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention_rules_gqa(rule):
    b, t, hq, hkv, dk, dv = 2, 5, 4, 2, 4, 3
    q, k, v = rand(b, t, hq * dk), rand(b, t, hkv * dk) * 0.3, rand(b, t, hkv * dv)
    state = rand(b, hkv, dk, dv)
    decay = -np.abs(rand(b, t, hkv)) if rule in ("gated", "gated_delta") else None
    beta = 1 / (1 + np.exp(-rand(b, t, hkv))) if rule in ("delta", "gated_delta") else None
    check("LinearAttention", [q, k, v, state, decay, beta], 2, opset=27, oracle="ref",
          rtol=1e-4, atol=1e-5, q_num_heads=hq, kv_num_heads=hkv, update_rule=rule)
