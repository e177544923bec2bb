"""The extended level's ``Sigmoid + Mul -> QuickGelu`` (onnxruntime's QuickGeluFusion): SiLU
``Mul(x, Sigmoid(x))`` in both operand orders and ``Mul(x, Sigmoid(Mul(x, alpha)))`` fused,
near misses left alone; results against onnxruntime on the original model, and the saved
extended-level model running in onnxruntime."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex

ort.set_default_logger_severity(3)

F = TensorProto.FLOAT
GOL = onnxplex.GraphOptimizationLevel
RNG = np.random.default_rng(17)
PASS = "Sigmoid + Mul -> QuickGelu"


def mlp(act_nodes, extra_outputs=(), t=F, inits=()):
    """x [3, 16] -> MatMul -> h -> act_nodes -> a -> MatMul -> y: a decoder's MLP."""
    dt = np.float32 if t == F else np.float64
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), *act_nodes,
             helper.make_node("MatMul", ["a", "w2"], ["y"])]
    weights = [numpy_helper.from_array((RNG.standard_normal((16, 32)) * 0.5).astype(dt), "w1"),
               numpy_helper.from_array((RNG.standard_normal((32, 8)) * 0.5).astype(dt), "w2")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", t, [3, 16])],
                          [helper.make_tensor_value_info(o, t, None)
                           for o in ("y", *extra_outputs)], [*weights, *inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def run(m, tmp_path, t=F):
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = GOL.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    sess = onnxplex.InferenceSession(m.SerializeToString(), so, providers=["cpu_mlas"])
    opt = onnx.load(str(tmp_path / "opt.onnx"))
    x = RNG.standard_normal((3, 16)).astype(np.float32 if t == F else np.float64)
    got = sess.run(None, {"x": x})
    changes = {r.name: r.changes for r in sess._optimizer_reports}.get(PASS, 0)
    return opt, x, got, changes


def ops(m):
    return collections.Counter(n.op_type for n in m.graph.node)


def alpha_of(m):
    (n,) = [n for n in m.graph.node if n.op_type == "QuickGelu"]
    (a,) = [helper.get_attribute_value(a) for a in n.attribute if a.name == "alpha"]
    return a


def scalar(name, v):
    return numpy_helper.from_array(np.array(v, np.float32), name)


FUSED = {
    "silu": ([helper.make_node("Sigmoid", ["h"], ["s"]),
              helper.make_node("Mul", ["h", "s"], ["a"])], 1.0, ()),
    "silu_swapped": ([helper.make_node("Sigmoid", ["h"], ["s"]),
                      helper.make_node("Mul", ["s", "h"], ["a"])], 1.0, ()),
    "scaled": ([helper.make_node("Mul", ["h", "k"], ["hk"]),
                helper.make_node("Sigmoid", ["hk"], ["s"]),
                helper.make_node("Mul", ["h", "s"], ["a"])], 1.702, (scalar("k", 1.702),)),
}


@pytest.mark.parametrize("case", list(FUSED))
def test_fused(case, tmp_path):
    act, alpha, inits = FUSED[case]
    m = mlp(act, inits=inits)
    opt, x, got, changes = run(m, tmp_path)
    assert ops(opt) == {"MatMul": 2, "QuickGelu": 1} and changes == 1, ops(opt)
    assert alpha_of(opt) == pytest.approx(alpha)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
    saved = ort.InferenceSession(str(tmp_path / "opt.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(saved.run(None, {"x": x})[0], want[0], rtol=1e-4, atol=1e-5)


NEAR_MISSES = {
    "sigmoid_is_graph_output": (FUSED["silu"][0], ("s",), ()),
    "sigmoid_read_elsewhere": (FUSED["silu"][0] + [helper.make_node("Relu", ["s"], ["r"])],
                               ("r",), ()),
    "mul_other_operand": ([helper.make_node("Sigmoid", ["h"], ["s"]),
                           helper.make_node("Relu", ["h"], ["r"]),
                           helper.make_node("Mul", ["r", "s"], ["a"])], (), ()),
    "mul_square_of_sigmoid": ([helper.make_node("Sigmoid", ["h"], ["s"]),
                               helper.make_node("Mul", ["s", "s"], ["a"])], (), ()),
    "vector_scale": ([helper.make_node("Mul", ["h", "kv"], ["hk"]),
                      helper.make_node("Sigmoid", ["hk"], ["s"]),
                      helper.make_node("Mul", ["h", "s"], ["a"])], (),
                     (numpy_helper.from_array(np.full(32, 1.5, np.float32), "kv"),)),
    "scaled_input_read_elsewhere": ([helper.make_node("Mul", ["h", "k"], ["hk"]),
                                     helper.make_node("Sigmoid", ["hk"], ["s"]),
                                     helper.make_node("Mul", ["h", "s"], ["a"]),
                                     helper.make_node("Relu", ["hk"], ["r"])], ("r",),
                                    (scalar("k", 1.702),)),
}


@pytest.mark.parametrize("case", list(NEAR_MISSES))
def test_not_fused(case, tmp_path):
    act, extra, inits = NEAR_MISSES[case]
    m = mlp(act, extra_outputs=extra, inits=inits)
    opt, x, got, changes = run(m, tmp_path)
    assert "QuickGelu" not in ops(opt) and changes == 0, ops(opt)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_float64_not_fused(tmp_path):
    m = mlp(FUSED["silu"][0], t=TensorProto.DOUBLE)
    opt, x, got, changes = run(m, tmp_path, TensorProto.DOUBLE)
    assert "QuickGelu" not in ops(opt) and changes == 0
    h = x @ numpy_helper.to_array(m.graph.initializer[0])
    a = h / (1 + np.exp(-h))
    np.testing.assert_allclose(got[0], a @ numpy_helper.to_array(m.graph.initializer[1]),
                               rtol=1e-12)
