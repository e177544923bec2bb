"""cpu_mlas preview-domain kernels against onnx's reference (onnxruntime has none of them):
FlexAttention (ai.onnx.preview) with GQA, scale, score_mod and prob_mod subgraphs, halves;
the optimizer steps Adagrad, Adam and Momentum (ai.onnx.preview.training) on several tensors
at once."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from kernel_harness import node_model
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxplex

from ._oracle import check, ours

RNG = np.random.default_rng(17)
TRAINING = "ai.onnx.preview.training"
PREVIEW = "ai.onnx.preview"


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def _steps(n_state: int, t: int, shapes=((3,), (2, 2))) -> list[np.ndarray]:
    """R, T, then X_1..X_n, G_1..G_n and each state tensor's n values (squares kept >= 0)."""
    tensors = [[rand(*s) for s in shapes] for _ in range(2 + n_state)]
    tensors[-1] = [np.abs(a) for a in tensors[-1]]
    return [np.array(0.1, np.float32), np.array(t, np.int64)] + [a for g in tensors for a in g]


@pytest.mark.parametrize("t", [0, 3])
def test_adagrad(t):
    inputs = _steps(1, t)
    check("Adagrad", inputs, 4, opset=21, domain=TRAINING, oracle="ref", decay_factor=0.1,
          epsilon=1e-5, norm_coefficient=0.01, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("t", [0, 3])
def test_adam(t):
    # (onnx's reference returns one tensor's X_new in float64 when T > 0, its bias-corrected
    # rate being a float64 scalar; the outputs are float32 as the inputs, so dtypes are
    # checked below, values against the reference)
    inputs = _steps(2, t, shapes=((3,),))
    got = check("Adam", inputs, 3, opset=21, domain=TRAINING, oracle="ref", alpha=0.9,
                beta=0.8, epsilon=1e-3, norm_coefficient=0.01, norm_coefficient_post=0.1,
                rtol=1e-5, atol=1e-6, check_dtype=False)
    assert [g.dtype for g in got] == [np.dtype(np.float32)] * 3


def test_adam_several_tensors():
    # (onnx's reference casts a multi-tensor Adam's outputs to float32: float32 inputs here)
    inputs = _steps(2, 2)
    check("Adam", inputs, 6, opset=21, domain=TRAINING, oracle="ref", alpha=0.95, beta=0.85,
          epsilon=1e-2, norm_coefficient=1e-3, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
@pytest.mark.parametrize("t", [0, 1])
def test_momentum(mode, t):
    inputs = _steps(1, t)
    check("Momentum", inputs, 4, opset=21, domain=TRAINING, oracle="ref", alpha=0.9,
          beta=0.1, norm_coefficient=0.01, mode=mode, rtol=1e-5, atol=1e-6)


def test_optimizer_input_count_is_checked():
    with pytest.raises(ValueError, match="not a multiple of 3"):
        ours("Adagrad", _steps(1, 0)[:-1], 2, opset=21, domain=TRAINING)


# --------------------------------------------------------------------------------------------
# FlexAttention
# --------------------------------------------------------------------------------------------


def _mod_graph(name: str, factor: float) -> onnx.GraphProto:
    """``t -> t * factor + Tanh(t)``: a modifier with its own initializer."""
    return helper.make_graph(
        [helper.make_node("Mul", ["t", "f"], ["m"]), helper.make_node("Tanh", ["t"], ["h"]),
         helper.make_node("Add", ["m", "h"], ["out"])], name,
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array(factor, np.float32), "f")])


def _flex(q, k, v, **attrs) -> None:
    m = node_model("FlexAttention", [q, k, v], 1, opset=26, domain=PREVIEW, **attrs)
    feeds = {"in0": q, "in1": k, "in2": v}
    (want,) = ReferenceEvaluator(m).run(None, feeds)
    (got,) = onnxplex.InferenceSession(m.SerializeToString(), providers=[
        ("cpu_mlas", {"reference_fallback": False})]).run(None, feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = 2e-3 if q.dtype == np.float16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_flex_attention_gqa_scale_and_head_sizes(dtype):
    _flex(rand(2, 6, 5, 8, dtype=dtype), rand(2, 3, 7, 8, dtype=dtype),
          rand(2, 3, 7, 4, dtype=dtype), scale=0.3)


def test_flex_attention_score_and_prob_mods():
    _flex(rand(1, 2, 4, 8), rand(1, 2, 6, 8), rand(1, 2, 6, 8),
          score_mod=_mod_graph("score", 0.5), prob_mod=_mod_graph("prob", 2.0))


def test_flex_attention_shapes_are_checked():
    with pytest.raises(ValueError, match="multiple of kv heads"):
        ours("FlexAttention", [rand(1, 3, 4, 8), rand(1, 2, 6, 8), rand(1, 2, 6, 8)], opset=26,
             domain=PREVIEW)
