"""Scan vectorization: a Scan with loop-invariant state becomes its body run once over all
iterations, with the results of the Scan (unoptimized session, onnxruntime)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex import GraphOptimizationLevel as Level

F = TensorProto.FLOAT
RNG = np.random.default_rng(3)
Q = RNG.standard_normal((5, 4)).astype(np.float32)      # queries (the state)
ROWS = RNG.standard_normal((7, 4)).astype(np.float32)   # training rows (scanned)


def _cdist_body(reduce: str = "ReduceSumSquare", opset: int = 17, keepdims: int = 0,
                axes=(1,), extra: tuple = (), state_through_identity: bool = True):
    """skl2onnx's onnx_cdist body: state q [N, F] passes through, row [F] -> d [N]."""
    nodes = [helper.make_node("Identity", ["q_in"], ["q_out"])] if state_through_identity \
        else []
    nodes.append(helper.make_node("Sub", ["q_in", "row"], ["diff"]))
    nodes += list(extra)
    src = extra[-1].output[0] if extra else "diff"
    inits = []
    axes_input = opset >= (13 if reduce == "ReduceSum" else 18)
    if axes_input:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        nodes.append(helper.make_node(reduce, [src, "axes"], ["d"], keepdims=keepdims))
    else:
        nodes.append(helper.make_node(reduce, [src], ["d"], axes=list(axes), keepdims=keepdims))
    return helper.make_graph(
        nodes, "body",
        [helper.make_tensor_value_info("q_in", F, [None, 4]),
         helper.make_tensor_value_info("row", F, [4])],
        [helper.make_tensor_value_info("q_out" if state_through_identity else "q_in", F,
                                       [None, 4]),
         helper.make_tensor_value_info("d", F, None)], initializer=inits)


def _scan_model(body, opset: int = 17, **attrs):
    scan = helper.make_node("Scan", ["q", "rows"], ["q_final", "dists"], body=body,
                            num_scan_inputs=1, **attrs)
    nodes = [scan, helper.make_node("Transpose", ["dists"], ["dt"], perm=[1, 0]),
             helper.make_node("Sqrt", ["dt"], ["y"])]
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("q", F, [None, 4]),
         helper.make_tensor_value_info("rows", F, [None, 4])],
        [helper.make_tensor_value_info("y", F, None),
         helper.make_tensor_value_info("q_final", F, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _check(model, vectorized: bool, feed=None, want=None):
    feed = feed or {"q": Q, "rows": ROWS}
    off, on = onnxplex.SessionOptions(), onnxplex.SessionOptions()
    off.graph_optimization_level = Level.ORT_DISABLE_ALL
    plain = onnxplex.InferenceSession(model.SerializeToString(), off, providers=["cpu_mlas"])
    fast = onnxplex.InferenceSession(model.SerializeToString(), on, providers=["cpu_mlas"])
    if want is None:
        want = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feed)
    assert ("Scan" not in [n.op_type for n in fast.model.nodes]) == vectorized
    assert [o.name for o in fast.get_outputs()] == ["y", "q_final"]
    for sess in (plain, fast):
        for got, w in zip(sess.run(None, feed), want):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_cdist_scan_runs_once_over_all_rows():
    _check(_scan_model(_cdist_body()), vectorized=True)


@pytest.mark.parametrize("opset,axes", [(11, (1,)), (17, (-1,)), (18, (1,))])
def test_vectorized_cdist_becomes_one_cdist_node(opset, axes):
    """The vectorized body (Unsqueeze of the rows, Sub, ReduceSumSquare) is fused into
    com.microsoft CDist at the extended level: the [rows, queries, features] differences are
    never stored."""
    model = _scan_model(_cdist_body("ReduceSumSquare", opset, 0, axes), opset)
    _check(model, vectorized=True)
    sess = onnxplex.InferenceSession(model.SerializeToString(), providers=["cpu_mlas"])
    ops = [n.op_type for n in sess.model.nodes]
    assert "CDist" in ops and "Sub" not in ops and "ReduceSumSquare" not in ops


@pytest.mark.parametrize("reduce,opset,keepdims,axes", [
    ("ReduceSumSquare", 11, 0, (1,)),      # axes as an attribute
    ("ReduceSumSquare", 11, 0, (-1,)),     # a negative axis, per iteration
    ("ReduceSum", 13, 0, (1,)),            # axes as an input
    ("ReduceSumSquare", 18, 0, (-1,)),
])
def test_reduction_axes_move_past_the_iteration_axis(reduce, opset, keepdims, axes):
    body = _cdist_body(reduce, opset, keepdims, axes)
    _check(_scan_model(body, opset), vectorized=True)


def test_minkowski_body_with_a_constant_exponent():
    p = numpy_helper.from_array(np.array(3.0, np.float32), "p")
    extra = (helper.make_node("Abs", ["diff"], ["a"]), helper.make_node("Pow", ["a", "p"],
                                                                          ["ap"]))
    body = _cdist_body("ReduceSum", 17, 0, (1,), extra)
    body.initializer.append(p)
    _check(_scan_model(body), vectorized=True)


def test_state_passed_through_without_identity():
    """The body returns its state input as is. Against numpy: onnxruntime 1.32 answers this
    model wrongly (distances off by up to 3), with or without its optimizations."""
    want = [np.sqrt(((Q[:, None, :] - ROWS[None]) ** 2).sum(-1)), Q]
    _check(_scan_model(_cdist_body(state_through_identity=False)), vectorized=True,
           want=want)


def test_no_rows_gives_empty_results():
    """Zero iterations (onnxruntime refuses to slice an empty scan input)."""
    sess = onnxplex.InferenceSession(_scan_model(_cdist_body()).SerializeToString(),
                                     providers=["cpu_mlas"])
    y, q = sess.run(None, {"q": Q, "rows": np.zeros((0, 4), np.float32)})
    assert y.shape == (5, 0) and y.dtype == np.float32
    np.testing.assert_array_equal(q, Q)


def test_carried_state_is_left_as_a_scan():
    """A running sum depends on the previous iteration: not vectorized, same results."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "row"], ["acc2"]),
         helper.make_node("Identity", ["acc2"], ["out"])], "body",
        [helper.make_tensor_value_info("acc", F, [4]), helper.make_tensor_value_info("row", F,
                                                                                      [4])],
        [helper.make_tensor_value_info("acc2", F, [4]), helper.make_tensor_value_info("out", F,
                                                                                       [4])])
    scan = helper.make_node("Scan", ["init", "rows"], ["final", "y"], body=body,
                            num_scan_inputs=1)
    g = helper.make_graph([scan], "g",
                          [helper.make_tensor_value_info("init", F, [4]),
                           helper.make_tensor_value_info("rows", F, [None, 4])],
                          [helper.make_tensor_value_info("y", F, None),
                           helper.make_tensor_value_info("final", F, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    sess = onnxplex.InferenceSession(model.SerializeToString(), providers=["cpu_mlas"])
    assert "Scan" in [n.op_type for n in sess.model.nodes]
    y, final = sess.run(None, {"init": Q[0], "rows": ROWS})
    np.testing.assert_allclose(y, Q[0] + np.cumsum(ROWS, axis=0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(final, y[-1])


def test_reversed_scan_is_left_as_a_scan():
    _check(_scan_model(_cdist_body(), scan_input_directions=[1]), vectorized=False)
