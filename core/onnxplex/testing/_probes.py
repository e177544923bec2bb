"""Small models the contract tests hand to a provider: the common op families (dense layers,
convolutions, elementwise chains, shape arithmetic, float16, attention-style matmuls), with
constant weights where accelerators want them and a symbolic batch dimension.

Each probe comes with its inputs and a tolerance against the default CPU provider,
relative to the largest reference value: ``max|ours - ref| <= atol + rtol * max|ref|``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["Probe", "PROBES"]

OPSET = 17


@dataclass(frozen=True)
class Probe:
    """A model, how to make its inputs, and the tolerance its outputs are held to."""

    name: str
    model: onnx.ModelProto
    feeds: Callable[[np.random.Generator], dict[str, np.ndarray]] | None = None
    """Makes the inputs from a seeded generator; ``None``: random values of the declared
    shapes (symbolic dimensions become 2)."""
    rtol: float = 1e-4
    atol: float = 1e-5


def _const(rng: np.random.Generator, name: str, shape, dtype=np.float32, scale=0.5):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(dtype), name)


def _model(nodes, name, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=8, producer_name="onnxplex.testing")


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _mlp() -> Probe:
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu1"),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["g"], name="fc2"),
             helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=-1)]
    inits = [_const(rng, "w1", (16, 32)), _const(rng, "b1", (32,)),
             _const(rng, "w2", (32, 8)), _const(rng, "b2", (8,))]
    model = _model(nodes, "mlp", [_vi("x", TensorProto.FLOAT, ["N", 16])],
                   [_vi("y", TensorProto.FLOAT, ["N", 8])], inits)
    return Probe("mlp", model,
                 lambda r: {"x": r.standard_normal((5, 16)).astype(np.float32)})


def _cnn() -> Probe:
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Conv", ["x", "k1", "c1"], ["a"], name="conv3x3", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["ar"], name="relu"),
        helper.make_node("Conv", ["ar", "k2"], ["b"], name="conv1x1"),
        helper.make_node("BatchNormalization", ["b", "s", "o", "m", "v"], ["bn"], name="bn"),
        helper.make_node("Clip", ["bn", "lo", "hi"], ["cl"], name="relu6"),
        helper.make_node("MaxPool", ["cl"], ["p"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Conv", ["p", "k3"], ["d"], name="depthwise", group=8,
                         pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["d", "p"], ["res"], name="residual"),
        helper.make_node("GlobalAveragePool", ["res"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="classifier", transB=1),
    ]
    inits = [_const(rng, "k1", (8, 3, 3, 3)), _const(rng, "c1", (8,)),
             _const(rng, "k2", (8, 8, 1, 1)), _const(rng, "s", (8,)), _const(rng, "o", (8,)),
             _const(rng, "m", (8,)),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "v"),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
             _const(rng, "k3", (8, 1, 3, 3)), _const(rng, "wf", (4, 8)), _const(rng, "bf", (4,))]
    model = _model(nodes, "cnn", [_vi("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                   [_vi("y", TensorProto.FLOAT, [1, 4])], inits)
    return Probe("cnn", model,
                 lambda r: {"x": r.standard_normal((1, 3, 16, 16)).astype(np.float32)})


def _elementwise() -> Probe:
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Mul", ["s", "half"], ["m"], name="mul"),
             helper.make_node("Sigmoid", ["m"], ["sg"], name="sigmoid"),
             helper.make_node("Sub", ["sg", "b"], ["d"], name="sub"),
             helper.make_node("Tanh", ["d"], ["t"], name="tanh"),
             helper.make_node("Abs", ["t"], ["ab"], name="abs"),
             helper.make_node("Sqrt", ["ab"], ["sq"], name="sqrt"),
             helper.make_node("Exp", ["sq"], ["e"], name="exp"),
             helper.make_node("Neg", ["e"], ["n"], name="neg"),
             helper.make_node("Div", ["n", "two"], ["y"], name="div"),
             helper.make_node("Max", ["a", "b"], ["z"], name="max")]
    inits = [numpy_helper.from_array(np.array([0.5], np.float32), "half"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    model = _model(nodes, "elementwise",
                   [_vi("a", TensorProto.FLOAT, [2, 3, 4]), _vi("b", TensorProto.FLOAT, [3, 4])],
                   [_vi("y", TensorProto.FLOAT, [2, 3, 4]), _vi("z", TensorProto.FLOAT, [2, 3, 4])],
                   inits)
    del rng
    return Probe("elementwise", model, lambda r: {
        "a": r.standard_normal((2, 3, 4)).astype(np.float32),
        "b": r.standard_normal((3, 4)).astype(np.float32)})


def _shapes() -> Probe:
    nodes = [helper.make_node("Shape", ["x"], ["shp"], name="shape"),
             helper.make_node("Gather", ["shp", "zero"], ["n"], name="gather", axis=0),
             helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"], name="unsqueeze"),
             helper.make_node("Concat", ["n1", "minus1"], ["newshape"], name="concat", axis=0),
             helper.make_node("Reshape", ["x", "newshape"], ["flat"], name="reshape"),
             helper.make_node("Transpose", ["flat"], ["tr"], name="transpose", perm=[1, 0]),
             helper.make_node("Cast", ["tr"], ["y"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["x", "axes"], ["z"], name="reduce", keepdims=0)]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "zero1"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array([1], np.int64), "axes")]
    model = _model(nodes, "shapes", [_vi("x", TensorProto.INT64, ["N", 3, 4])],
                   [_vi("y", TensorProto.FLOAT, [12, "N"]), _vi("z", TensorProto.INT64, ["N", 4])],
                   inits)
    return Probe("shapes", model, lambda r: {"x": r.integers(-50, 50, (2, 3, 4))}, 0.0, 0.0)


def _float16() -> Probe:
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "k", "c"], ["a"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "x2"], ["y"], name="add")]
    inits = [_const(rng, "k", (4, 4, 3, 3), np.float16, 0.2), _const(rng, "c", (4,), np.float16)]
    model = _model(nodes, "float16",
                   [_vi("x", TensorProto.FLOAT16, [1, 4, 8, 8]),
                    _vi("x2", TensorProto.FLOAT16, [1, 4, 8, 8])],
                   [_vi("y", TensorProto.FLOAT16, [1, 4, 8, 8])], inits)
    return Probe("float16", model, lambda r: {
        "x": r.standard_normal((1, 4, 8, 8)).astype(np.float16),
        "x2": r.standard_normal((1, 4, 8, 8)).astype(np.float16)}, 1e-2, 1e-2)


def _attention() -> Probe:
    rng = np.random.default_rng(6)
    nodes = [
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln"], name="ln",
                         axis=-1),
        helper.make_node("MatMul", ["ln", "wq"], ["q"], name="q"),
        helper.make_node("MatMul", ["ln", "wk"], ["k"], name="k"),
        helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="qk"),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="scale"),
        helper.make_node("Softmax", ["scaled"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "ln"], ["ctx"], name="pv"),
        helper.make_node("Add", ["ctx", "x"], ["y"], name="residual"),
    ]
    inits = [numpy_helper.from_array(np.ones(8, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(8, np.float32), "beta"),
             _const(rng, "wq", (8, 8)), _const(rng, "wk", (8, 8)),
             numpy_helper.from_array(np.array(8 ** -0.5, np.float32), "scale")]
    model = _model(nodes, "attention", [_vi("x", TensorProto.FLOAT, [2, 6, 8])],
                   [_vi("y", TensorProto.FLOAT, [2, 6, 8])], inits)
    return Probe("attention", model,
                 lambda r: {"x": r.standard_normal((2, 6, 8)).astype(np.float32)})


PROBES: tuple[Probe, ...] = (_mlp(), _cnn(), _elementwise(), _shapes(), _float16(),
                             _attention())
