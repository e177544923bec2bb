"""Extended-level fusions of ai.onnx.ml ops (optimizer/_fusions_ml.py)."""

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


@pytest.mark.parametrize("table_type, to, extra_reader, fused", [
    (TensorProto.INT32, TensorProto.INT64, False, True),    # skl2onnx's classifier label
    (TensorProto.INT64, TensorProto.INT32, False, True),    # (wraps as Cast does)
    (TensorProto.INT32, TensorProto.FLOAT, False, True),
    (TensorProto.INT32, TensorProto.INT16, False, False),   # not ArrayFeatureExtractor's type
    (TensorProto.INT32, TensorProto.INT64, True, False),    # the moved data read elsewhere
    (TensorProto.FLOAT, TensorProto.INT64, False, False),   # float tables: not moved
])
def test_cast_of_a_constant_tables_moved_data_casts_the_table(table_type, to, extra_reader,
                                                              fused):
    """ArrayFeatureExtractor(table, index) -> Reshape -> Cast: the table is cast instead and
    the Cast goes, with onnxruntime's results (a graph output keeps its name)."""
    import onnx
    from onnx import numpy_helper
    np_type = helper.tensor_dtype_to_np_dtype(table_type)
    table = np.array([3, 250, 7, 2**31 - 1 if table_type == TensorProto.INT64 else 9],
                     np_type)
    nodes = [helper.make_node("ArgMax", ["x"], ["i"], axis=1, keepdims=1),
             helper.make_node("ArrayFeatureExtractor", ["classes", "i"], ["picked"],
                              domain="ai.onnx.ml"),
             helper.make_node("Reshape", ["picked", "flat"], ["flat_label"]),
             helper.make_node("Cast", ["flat_label"], ["label"], to=to)]
    outputs = [helper.make_tensor_value_info("label", to, ["N"])]
    if extra_reader:
        nodes.append(helper.make_node("Identity", ["picked"], ["raw"]))
        outputs.append(helper.make_tensor_value_info("raw", table_type, ["N", 1]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     ["N", 4])], outputs,
                          [numpy_helper.from_array(table, "classes"),
                           numpy_helper.from_array(np.array([-1], np.int64), "flat")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("ai.onnx.ml", 1)])
    onnx.checker.check_model(model)
    feed = {"x": np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)}
    sess = onnxplex.InferenceSession(model.SerializeToString())
    assert ("Cast" not in [n.op_type for n in sess.model.nodes]) == fused
    # the table the cast copy replaced is gone (the pass removes it: no sweep follows)
    assert ("classes" in sess.model.graph.initializers) == (not fused)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)
    got = sess.run(None, feed)
    assert [o.name for o in sess.get_outputs()] == [o.name for o in outputs]
    for w, o in zip(want, got):
        assert o.dtype == w.dtype
        np.testing.assert_array_equal(o, w)


def test_cast_of_a_shared_constant_table_keeps_the_table_for_its_other_reader():
    """The table is cast for the chain that moves it; another node still reads the original,
    which stays (the pass removes the table only once nothing reads it)."""
    from onnx import numpy_helper
    table = np.array([3, 250, 7, 9], np.int32)
    nodes = [helper.make_node("ArgMax", ["x"], ["i"], axis=1, keepdims=1),
             helper.make_node("ArrayFeatureExtractor", ["classes", "i"], ["picked"],
                              domain="ai.onnx.ml"),
             helper.make_node("Cast", ["picked"], ["label"], to=TensorProto.INT64),
             helper.make_node("ReduceMax", ["classes"], ["top"], keepdims=0)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     ["N", 4])],
                          [helper.make_tensor_value_info("label", TensorProto.INT64, None),
                           helper.make_tensor_value_info("top", TensorProto.INT32, [])],
                          [numpy_helper.from_array(table, "classes")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("ai.onnx.ml", 1)])
    feed = {"x": np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)}
    sess = onnxplex.InferenceSession(model.SerializeToString(),
                                     disabled_optimizers=["constant folding"])
    assert "Cast" not in [n.op_type for n in sess.model.nodes]
    assert "classes" in sess.model.graph.initializers
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)
    for w, o in zip(want, sess.run(None, feed)):
        assert o.dtype == w.dtype
        np.testing.assert_array_equal(o, w)
