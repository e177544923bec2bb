"""If/Loop/Scan bodies run through the same partitioner and executor, compiled once."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxplex

F = TensorProto.FLOAT


def _loop_model() -> onnx.ModelProto:
    """y = Loop(M) { acc = Relu(acc * w + outer); If(i even) scan acc else -acc }."""
    then_g = helper.make_graph([helper.make_node("Identity", ["acc_new"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["acc_new"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", F, [3])])
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["acc", "w"], ["m"]),
            helper.make_node("Add", ["m", "outer"], ["s"]),          # outer-scope value
            helper.make_node("Relu", ["s"], ["acc_new"]),
            helper.make_node("Mod", ["i", "two"], ["r"]),
            helper.make_node("Equal", ["r", "zero"], ["even"]),
            helper.make_node("If", ["even"], ["scan"], then_branch=then_g, else_branch=else_g),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", F, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_new", F, [3]),
         helper.make_tensor_value_info("scan", F, [3])],
        initializer=[onnx.numpy_helper.from_array(np.int64(2), "two"),
                     onnx.numpy_helper.from_array(np.int64(0), "zero")])
    loop = helper.make_node("Loop", ["M", "", "x"], ["final", "scans"], body=body)
    pre = helper.make_node("Sigmoid", ["x"], ["outer"])
    g = helper.make_graph(
        [pre, loop], "loop",
        [helper.make_tensor_value_info("M", TensorProto.INT64, []),
         helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("final", F, [3]),
         helper.make_tensor_value_info("scans", F, [None, 3])],
        initializer=[onnx.numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32), "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("trips", [0, 1, 4])
def test_loop_with_nested_if_matches_onnxruntime(trips):
    model = _loop_model()
    feed = {"M": np.array(trips, np.int64), "x": np.array([1.0, -2.0, 0.5], np.float32)}
    sess = onnxplex.InferenceSession(model)
    got = sess.run(None, feed)
    if trips == 0:   # onnxruntime rejects an empty scan output; check the carried value
        np.testing.assert_array_equal(got[0], feed["x"])
        assert got[1].shape[0] == 0
        return
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feed)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-6)


def test_bodies_are_partitioned_over_the_session_providers_once(null_provider):
    model = _loop_model()
    sess = onnxplex.InferenceSession(model, providers=[("null", {"claim": "Neg"}), "cpu_mlas"])
    plans = dict(sess._body_plans)
    assert set(plans) == {"body", "then", "else"}   # compiled once each, at session creation
    assert plans["else"].assignment() == {"Neg_0": "null"}
    assert set(plans["body"].assignment().values()) == {"cpu_mlas"}
    feed = {"M": np.array(3, np.int64), "x": np.ones(3, np.float32)}
    for _ in range(3):
        sess.run(None, feed)
    assert len(sess._body_plans) == 3
    assert null_provider.compiled == [(0,)]


def test_scan_matches_onnxruntime():
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "next"], ["sum_out"]),
         helper.make_node("Identity", ["sum_out"], ["scan_out"])],
        "scan_body",
        [helper.make_tensor_value_info("sum_in", F, [2]),
         helper.make_tensor_value_info("next", F, [2])],
        [helper.make_tensor_value_info("sum_out", F, [2]),
         helper.make_tensor_value_info("scan_out", F, [2])])
    node = helper.make_node("Scan", ["init", "xs"], ["final", "ys"], body=body,
                            num_scan_inputs=1, scan_input_directions=[1])
    g = helper.make_graph([node], "scan",
                          [helper.make_tensor_value_info("init", F, [2]),
                           helper.make_tensor_value_info("xs", F, [5, 2])],
                          [helper.make_tensor_value_info("final", F, [2]),
                           helper.make_tensor_value_info("ys", F, [5, 2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)], ir_version=9)
    feed = {"init": np.zeros(2, np.float32),
            "xs": np.arange(10, dtype=np.float32).reshape(5, 2)}
    got = onnxplex.InferenceSession(model).run(None, feed)
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feed)
    for g_, r in zip(got, ref):
        np.testing.assert_array_equal(g_, r)


def test_reference_fallback_is_labelled_and_can_be_switched_off():
    # LpPool-1 (p a float attribute) is one of the few op versions with no native kernel
    node = helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2], p=2.0)
    g = helper.make_graph([node], "m", [helper.make_tensor_value_info("x", F, [1, 1, 4])],
                          [helper.make_tensor_value_info("y", F, [1, 1, 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 1)], ir_version=3)
    sess = onnxplex.InferenceSession(model)
    plan = sess.get_provider_assignment()
    assert "[onnx reference fallback]" in plan.report()
    assert plan.notes_count() == {"onnx reference fallback": 1}
    x = np.array([[[3.0, 4.0, -12.0, 5.0]]], np.float32)
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(y, np.sqrt(x[..., :-1] ** 2 + x[..., 1:] ** 2), rtol=1e-6)
    with pytest.raises(onnxplex.PartitionError, match=r"LpPool.*opset 1\]"):
        onnxplex.InferenceSession(model, providers=[("cpu_mlas", {"reference_fallback": 0})])


def test_a_loop_body_input_declared_narrower_than_what_it_is_fed():
    """tf2onnx writes loop-carried tensors into the body declared as scalars; onnxruntime
    feeds the body whatever the Loop carries. The body's shapes inferred from that declaration
    were checked as facts: its Add's [2, 3] output was an error ('declared []')."""
    body = helper.make_graph(
        [helper.make_node("Add", ["v", "v"], ["s"]),
         helper.make_node("Identity", ["s"], ["v_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)], "g",
        [helper.make_tensor_value_info("n", TensorProto.INT64, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"n": np.array(3, np.int64), "x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    got = onnxplex.InferenceSession(model.SerializeToString()).run(None, feeds)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[0], feeds["x"] * 8)


@pytest.mark.parametrize("take_then", [True, False])
def test_an_opset_10_if_whose_branches_make_different_shapes(take_then):
    """onnx's If-1 inference merges the branches' output shapes (its spec wanted them equal):
    a then-branch [?] and an else-branch [1] made the output [1], and the Cast after it,
    given the then-branch's [3], was refused. onnxruntime runs it (tf2onnx writes it from a
    tf.cond at opset 10)."""
    then = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Slice", ["s", "one", "big"], ["t_out"])], "then", [],
        [helper.make_tensor_value_info("t_out", TensorProto.INT64, ["n"])],
        [helper.make_tensor("one", TensorProto.INT64, [1], [0]),
         helper.make_tensor("big", TensorProto.INT64, [1], [9])])
    other = helper.make_graph(
        [helper.make_node("Constant", [], ["e_out"],
                          value=helper.make_tensor("c", TensorProto.INT64, [1], [5]))],
        "else", [], [helper.make_tensor_value_info("e_out", TensorProto.INT64, ["m"])])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["picked"], then_branch=then, else_branch=other),
         helper.make_node("Cast", ["picked"], ["y"], to=TensorProto.FLOAT)], "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],   # (any rank)
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)],
                              ir_version=5).SerializeToString()
    feeds = {"cond": np.array(take_then), "x": np.zeros((2, 3, 4), np.float32)}
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = onnxplex.InferenceSession(model).run(None, feeds)
    np.testing.assert_array_equal(got[0], want[0])
    assert got[0].shape == ((3,) if take_then else (1,))
