"""Model-local functions are expanded into their call sites (as onnxruntime inlines them),
subgraphs in their bodies included; results agree with onnxruntime's."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import AttributeProto, TensorProto, helper

import onnxplex

F = TensorProto.FLOAT
OPSET = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]


def _vi(name, shape=None, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _ref(name: str, attr_type: int, to: str) -> AttributeProto:
    a = AttributeProto()
    a.name, a.type, a.ref_attr_name = name, attr_type, to
    return a


def _branchy_function() -> onnx.FunctionProto:
    """F(a; alpha) = If(sum(a) > 0, a * alpha, -relu(a)) + a: the then-branch reads the
    formal input and the attribute (a reference inside the branch), the else-branch an
    intermediate of the body."""
    scale = helper.make_node("Constant", [], ["s"])
    scale.attribute.append(_ref("value_float", AttributeProto.FLOAT, "alpha"))
    then_g = helper.make_graph([scale, helper.make_node("Mul", ["a", "s"], ["t"])], "then", [],
                               [_vi("t")])
    else_g = helper.make_graph([helper.make_node("Neg", ["h"], ["e"])], "else", [], [_vi("e")])
    nodes = [helper.make_node("Relu", ["a"], ["h"]),
             helper.make_node("ReduceSum", ["a"], ["total"], keepdims=0),
             helper.make_node("Constant", [], ["zero"], value_float=0.0),
             helper.make_node("Greater", ["total", "zero"], ["positive"]),
             helper.make_node("If", ["positive"], ["branch"], then_branch=then_g,
                              else_branch=else_g),
             helper.make_node("Add", ["branch", "a"], ["o"])]
    return helper.make_function("local", "F", ["a"], ["o"], nodes, OPSET[:1],
                                attributes=["alpha"])


def _model() -> onnx.ModelProto:
    calls = [helper.make_node("F", ["x"], ["y1"], domain="local", alpha=2.0),
             helper.make_node("F", ["z"], ["y2"], domain="local", alpha=3.0)]
    g = helper.make_graph(calls, "g", [_vi("x", [2, 3]), _vi("z", [2, 3])],
                          [_vi("y1", [2, 3]), _vi("y2", [2, 3])])
    return helper.make_model(g, opset_imports=OPSET, functions=[_branchy_function()],
                             ir_version=9)


def _expected(a: np.ndarray, alpha: float) -> np.ndarray:
    branch = a * alpha if a.sum() > 0 else -np.maximum(a, 0)
    return branch + a


@pytest.mark.parametrize("signs", [(1, 1), (1, -1), (-1, -1)])
def test_function_with_an_if_in_its_body_runs_as_onnxruntime_runs_it(signs):
    model = _model()
    rng = np.random.default_rng(0)
    x = (np.abs(rng.standard_normal((2, 3))) * signs[0]).astype(np.float32)
    z = (np.abs(rng.standard_normal((2, 3))) * signs[1]).astype(np.float32)
    feed = {"x": x, "z": z}
    sess = onnxplex.InferenceSession(model.SerializeToString())
    ours = sess.run(None, feed)
    theirs = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, feed)
    for mine, ref, want in zip(ours, theirs, (_expected(x, 2.0), _expected(z, 3.0))):
        np.testing.assert_allclose(mine, want, rtol=1e-6)
        np.testing.assert_allclose(mine, ref, rtol=1e-6)
    # both calls were expanded, each with names of its own
    ifs = [n for n in sess.model.nodes if n.op_type == "If"]
    assert len(ifs) == 2 and len({n.name for n in ifs}) == 2
    assert not any(n.domain == "local" for n in sess.model.nodes)


def test_a_node_keeps_its_own_opset_through_loading_and_the_layout_pass():
    """A Clip-6 (bounds as attributes) in a model of opset 17, marked with its own opset as an
    expanded function body's nodes are (and as a saved optimized model keeps them): the load
    checks it against Clip-6's schema, the layout pass rewrites it channels-last in place and
    it stays a Clip-6 (read at opset 17, its bounds would be inputs it does not have)."""
    from onnxplex.graph.nodes import OPSET_KEY

    clip = helper.make_node("Clip", ["c"], ["y"], min=0.0, max=0.5)
    helper.set_metadata_props(clip, {OPSET_KEY: "6"})
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 1, 1)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]), clip, helper.make_node("Neg", ["c"], ["z"])],
        "g", [_vi("x", [1, 3, 5, 5])], [_vi("y"), _vi("z")],
        initializer=[onnx.numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = onnxplex.InferenceSession(m.SerializeToString())
    assert {"NhwcFusedConv", "Clip"} <= {s.op_type for s in sess._exec.steps}
    x = rng.standard_normal((1, 3, 5, 5)).astype(np.float32)
    y, z = sess.run(None, {"x": x})
    c = np.einsum("nchw,mc->nmhw", x, w[:, :, 0, 0])
    np.testing.assert_allclose(y, np.clip(c, 0.0, 0.5), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z, -c, rtol=1e-5, atol=1e-6)


def test_expanded_function_bodies_are_optimized(tmp_path):
    """A model-local function no provider claims is expanded into the graph at partition
    time; its body's conv and activation are then fused and go channels-last, as the graph's
    own would (onnxruntime runs its level-2 fusions after inlining functions too). Its
    opset-6 Clip (bounds as attributes) fuses with its bounds."""
    body = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Clip", ["c"], ["y"], min=0.0, max=0.5)]
    f = helper.make_function("local", "ConvClip", ["x", "w"], ["y"], body,
                             [helper.make_opsetid("", 6)])
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("ConvClip", ["x", "w"], ["t"], domain="local"),
         helper.make_node("Neg", ["t"], ["y"])], "g",
        [_vi("x", [1, 3, 6, 6])], [_vi("y")], initializer=[onnx.numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, functions=[f], opset_imports=OPSET)
    sess = onnxplex.InferenceSession(m.SerializeToString())
    ops = [s.op_type for s in sess._exec.steps]
    assert "NhwcFusedConv" in ops and "Clip" not in ops and "Conv" not in ops, ops
    assert any(r.name == "Conv + activation -> FusedConv" and r.changes
               for r in sess._optimizer_reports)
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    # (onnxruntime refuses the model: it reads the body's Clip at the model's opset)
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = onnxplex.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = onnxplex.InferenceSession(m.SerializeToString(), so)
    assert [s.op_type for s in plain._exec.steps] == ["Conv", "Clip", "Neg"]
    y = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(y, plain.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert y.min() >= -0.5 and y.max() <= 0 and (y < -0.25).any() and (y > -0.25).any()
    # a saved optimized model is the graph as run: the body expanded and fused
    so = onnxplex.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    onnxplex.InferenceSession(m.SerializeToString(), so)
    saved = onnx.load(so.optimized_model_filepath)
    assert [n.op_type for n in saved.graph.node] == ["Transpose", "NhwcFusedConv", "Neg",
                                                       "Transpose"]
    again = onnxplex.InferenceSession(so.optimized_model_filepath)
    np.testing.assert_allclose(again.run(None, {"x": x})[0], y, rtol=1e-6, atol=1e-6)


def _calls_in_branches_model(nested: bool) -> onnx.ModelProto:
    """y = If(sum(x) > 0, F(x; alpha=2), G(x)): model-local functions called inside the
    branches of a main-graph If; ``nested``: the If is itself inside a function H, called
    from the main graph (skl2onnx's KNNImputer calls functions from an If inside a
    function)."""
    g_fn = helper.make_function("local", "G", ["b"], ["c"],
                                [helper.make_node("Neg", ["b"], ["c"])], OPSET[:1])
    then_g = helper.make_graph([helper.make_node("F", ["x"], ["t"], domain="local",
                                                 alpha=2.0)], "then", [], [_vi("t")])
    else_g = helper.make_graph([helper.make_node("G", ["x"], ["e"], domain="local")], "else",
                               [], [_vi("e")])
    body = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
            helper.make_node("Constant", [], ["zero"], value_float=0.0),
            helper.make_node("Greater", ["total", "zero"], ["positive"]),
            helper.make_node("If", ["positive"], ["y"], then_branch=then_g,
                             else_branch=else_g)]
    functions = [_branchy_function(), g_fn]
    if nested:
        functions.append(helper.make_function("local", "H", ["x"], ["y"], body, OPSET))
        body = [helper.make_node("H", ["x"], ["y"], domain="local")]
    g = helper.make_graph(body, "g", [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    return helper.make_model(g, opset_imports=OPSET, functions=functions, ir_version=9)


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("sign", [1, -1])
def test_local_functions_called_inside_if_branches(nested, sign):
    """A body is partitioned on its own: a call left in it could never run (both cases
    failed with 'no kernel for local::F' before calls in bodies were inlined at load)."""
    model = _calls_in_branches_model(nested)
    x = (np.abs(np.random.default_rng(1).standard_normal((2, 3))) * sign).astype(np.float32)
    (ours,) = onnxplex.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    (theirs,) = ort.InferenceSession(model.SerializeToString(),
                                     providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(ours, _expected(x, 2.0) if sign > 0 else -x, rtol=1e-6)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_a_recursive_function_called_inside_a_branch_is_refused_not_inlined():
    """Calls inside subgraph bodies are inlined at load: a function that calls itself there
    must be refused first (inlining it would never end), naming the cycle."""
    then_g = helper.make_graph([helper.make_node("R", ["x"], ["t"], domain="local")], "then",
                               [], [_vi("t")])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [_vi("e")])
    body = [helper.make_node("Constant", [], ["c"], value_int=1),
            helper.make_node("Cast", ["c"], ["b"], to=TensorProto.BOOL),
            helper.make_node("If", ["b"], ["y"], then_branch=then_g, else_branch=else_g)]
    rec = helper.make_function("local", "R", ["x"], ["y"], body, OPSET)
    # the main graph calls R from a branch too: that call is inlined at load
    main_then = helper.make_graph([helper.make_node("R", ["x"], ["u"], domain="local")],
                                  "main_then", [], [_vi("u")])
    main_else = helper.make_graph([helper.make_node("Relu", ["x"], ["v"])], "main_else", [],
                                  [_vi("v")])
    g = helper.make_graph([helper.make_node("Constant", [], ["k"], value_int=1),
                           helper.make_node("Cast", ["k"], ["m"], to=TensorProto.BOOL),
                           helper.make_node("If", ["m"], ["y"], then_branch=main_then,
                                            else_branch=main_else)], "g",
                          [_vi("x", [2])], [_vi("y", [2])])
    model = helper.make_model(g, opset_imports=OPSET, functions=[rec], ir_version=9)
    with pytest.raises(onnxplex.InvalidModelError, match="call(s)? itself|cycle|recurs"):
        onnxplex.InferenceSession(model.SerializeToString())
