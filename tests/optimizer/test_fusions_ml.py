"""Extended-level fusions of ai.onnx.ml ops (_optimizer/_fusions_ml.py)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxplex


@pytest.mark.parametrize("default, to, fused", [
    (None, TensorProto.FLOAT, True), (7, TensorProto.FLOAT, True),
    (2**40 + 1, TensorProto.FLOAT, True),   # (rounded as the Cast rounds it)
    (None, TensorProto.DOUBLE, False), (None, TensorProto.INT32, False),
])
def test_label_encoder_cast_becomes_a_float_label_encoder(default, to, fused):
    """skl2onnx's OrdinalEncoder: LabelEncoder(strings -> int64) then Cast(float): one
    LabelEncoder writing the float codes, the same results (unknown values: the default)."""
    attrs = {"keys_strings": ["a", "b", "c"], "values_int64s": [5, 2**31 + 3, -4]}
    if default is not None:
        attrs["default_int64"] = default
    nodes = [helper.make_node("LabelEncoder", ["x"], ["codes"], domain="ai.onnx.ml", **attrs),
             helper.make_node("Cast", ["codes"], ["y"], to=to)]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.STRING, ["N", 1])],
                          [helper.make_tensor_value_info("y", to, ["N", 1])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("ai.onnx.ml", 2)])
    feed = {"x": np.array([["a"], ["c"], ["zz"], ["b"]], dtype=object)}
    sess = onnxplex.InferenceSession(model.SerializeToString())
    ops = [n.op_type for n in sess.model.nodes]
    assert ("Cast" not in ops) == fused
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = sess.run(None, feed)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
