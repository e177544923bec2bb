"""Small ONNX graphs built with onnx.helper for framework tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def chain(ops: list[str], shape=(2, 3), opset: int = 17) -> onnx.ModelProto:
    """x -> ops[0] -> ops[1] -> ... -> y, unary float ops, nodes named A, B, C, ..."""
    nodes = []
    prev = "x"
    for k, op in enumerate(ops):
        out = "y" if k == len(ops) - 1 else f"t{k}"
        nodes.append(helper.make_node(op, [prev], [out], name=chr(ord("A") + k)))
        prev = out
    g = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def diamond_abc(opset: int = 17) -> onnx.ModelProto:
    """A -> B -> C plus A -> C: fusing {A, C} would create a cycle through B."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="A"),
        helper.make_node("Sigmoid", ["a"], ["b"], name="B"),
        helper.make_node("Add", ["a", "b"], ["y"], name="C"),
    ]
    g = helper.make_graph(nodes, "abc",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def small_cnn(opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """Conv -> Relu -> MaxPool -> Flatten -> Gemm -> Softmax on [N, 3, 16, 16]."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.2
    b = rng.standard_normal(8).astype(np.float32) * 0.1
    fw = rng.standard_normal((10, 8 * 8 * 8)).astype(np.float32) * 0.05
    fb = rng.standard_normal(10).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["g"], name="fc", transB=1),
        helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=-1),
    ]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (fw, "fw"), (fb, "fb"))]
    g = helper.make_graph(nodes, "small_cnn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
