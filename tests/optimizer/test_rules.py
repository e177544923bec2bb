"""onnxplex.optimizer._rules: onnxscript rules tried only at nodes of their pattern's output
op type, with the same rewrites as onnxscript's own rule set."""

from __future__ import annotations

import onnx
import onnx_ir as ir
from onnx import TensorProto, helper
from onnxscript.rewriter.rules import common as rules

from onnxplex.optimizer import _rules


def _model() -> ir.Model:
    # Transpose(Transpose(x)) (becomes an Identity) and Cast(Cast(x)), among Relu nodes
    nodes = [
        helper.make_node("Relu", ["x"], ["r0"]),
        helper.make_node("Transpose", ["r0"], ["t0"], perm=[1, 0]),
        helper.make_node("Transpose", ["t0"], ["t1"], perm=[1, 0]),
        helper.make_node("Relu", ["t1"], ["r1"]),
        helper.make_node("Cast", ["r1"], ["c0"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["c0"], ["y"], to=TensorProto.FLOAT16),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 3])])
    return ir.serde.deserialize_model(helper.make_model(g, opset_imports=[
        helper.make_opsetid("", 17)]))


def test_rules_are_tried_only_at_their_root_op(monkeypatch):
    from onnxscript.rewriter import RewriteRule

    tried: list[tuple[str, str]] = []   # (the rule's root op, the node's op) per matcher run
    real = RewriteRule.try_rewrite

    def spy(self, model, graph, node, **kw):
        tried.append((_rules._root_op(self), node.op_type))
        return real(self, model, graph, node, **kw)

    monkeypatch.setattr(RewriteRule, "try_rewrite", spy)
    m = _model()
    n = _rules.apply_rules(m, [rules.transpose_transpose_rule, rules.cast_cast_rule])
    assert n == 2
    ops = [node.op_type for node in m.graph]
    assert ops.count("Transpose") == 0 and ops.count("Cast") == 1
    assert tried and all(root == op for root, op in tried)   # never at a Relu
    onnx.checker.check_model(ir.serde.serialize_model(m))


def test_same_rewrites_as_onnxscript():
    from onnxscript.rewriter import RewriteRuleSet

    chosen = [rules.transpose_transpose_rule, rules.cast_cast_rule, rules.no_op_cast_rule]
    ours, theirs = _model(), _model()
    assert _rules.apply_rules(ours, chosen) == RewriteRuleSet(chosen).apply_to_model(theirs)
    assert [n.op_type for n in ours.graph] == [n.op_type for n in theirs.graph]


def test_fuse_functions_and_unrooted_rules():
    from onnxscript.rewriter.ort_fusions.sdpa import fuse_sdpa

    found = _rules._rules_of(fuse_sdpa)
    assert found and all(_rules._root_op(r) == "MatMul" for r in found)
    assert _rules._root_op(object()) is None           # no pattern: tried everywhere
    assert _rules.apply_rules(_model(), lambda model: 7) == 7  # a plain callable is run as is


def test_required_ops_follow_node_inputs_not_alternatives():
    from onnxscript.rewriter.ort_fusions.fused_matmul_rule_sets import fused_matmul_rule_sets

    by_name = {r.name: _rules._required_ops(r) for r in fused_matmul_rule_sets()}
    assert by_name["FusedMatMulDiv1"] == {"Div", "MatMul"}
    assert by_name["TransposeMatMul1"] == {"MatMul", "Transpose"}
    # OrValue alternatives are not required: each FastGelu spelling needs Tanh and Mul only
    from onnxplex.optimizer._fusions_transformer import _fast_gelu_rules

    assert all(_rules._required_ops(r) == {"Tanh", "Mul", "Add"} for r in _fast_gelu_rules()[0])


def test_a_rule_set_that_cannot_match_is_not_run(monkeypatch):
    runs = []
    real = _rules._Driver.run
    monkeypatch.setattr(_rules._Driver, "run", lambda self: runs.append(1) or real(self))
    m = _model()   # no Expand, Mul or Unsqueeze
    assert _rules.apply_rules(m, [rules.no_op_expand_rule, rules.mul_by_1_rule,
                                  rules.unsqueeze_unsqueeze_rule]) == 0
    assert runs == []
    # a gate that accepts no node where a viable rule starts: not run either
    assert _rules.apply_rules(m, [rules.cast_cast_rule], gate=lambda node: False) == 0
    assert runs == []
    assert _rules.apply_rules(m, [rules.cast_cast_rule, rules.mul_by_1_rule]) == 1
    assert runs == [1]


def test_a_rule_matching_what_another_made_in_the_same_run_still_runs():
    """Transpose + MatMul -> FusedMatMul, then FusedMatMul + Div: the second rule's FusedMatMul
    is not in the model before the run, so rules are not dropped one by one."""
    from onnxscript.rewriter.ort_fusions.fused_matmul_rule_sets import fused_matmul_rule_sets

    nodes = [helper.make_node("Transpose", ["b"], ["bt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["a", "bt"], ["mm"]),
             helper.make_node("Div", ["mm", "s"], ["y"])]
    f = TensorProto.FLOAT
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", f, [2, 4, 8]),
                                       helper.make_tensor_value_info("b", f, [2, 5, 8])],
                          [helper.make_tensor_value_info("y", f, [2, 4, 5])],
                          [helper.make_tensor("s", f, [], [4.0])])
    m = ir.serde.deserialize_model(helper.make_model(g, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]))
    assert _rules.apply_rules(m, fused_matmul_rule_sets()) == 2
    assert [n.op_type for n in m.graph] == ["FusedMatMul"]


def test_rules_built_per_call_are_not_kept():
    """onnxscript builds some rule sets anew per call: what is known of a rule goes with it."""
    import gc

    from onnxscript.rewriter.ort_fusions.fused_matmul_rule_sets import fused_matmul_rule_sets

    for _ in range(3):
        _rules.apply_rules(_model(), fused_matmul_rule_sets())
    gc.collect()
    before = len(_rules._REQUIRED)
    for _ in range(5):
        _rules.apply_rules(_model(), fused_matmul_rule_sets())
    gc.collect()
    assert len(_rules._REQUIRED) <= before


def test_prefilter_skips_matcher_runs_not_matches(monkeypatch):
    """The op-type check before onnxscript's matcher is a necessary condition only: a
    transformer's optimized graph is the same with and without it (names included), with
    fewer matcher runs."""
    from models import transformer_encoder
    from onnxscript.rewriter import RewriteRule

    import onnxplex

    runs = []
    real = RewriteRule.try_rewrite
    monkeypatch.setattr(RewriteRule, "try_rewrite",
                        lambda self, *a, **kw: runs.append(1) or real(self, *a, **kw))

    def optimized() -> tuple[list, int]:
        runs.clear()
        sess = onnxplex.InferenceSession(transformer_encoder(), providers=["cpu_mlas"])
        graph = [(n.op_type, n.name, [v.name if v is not None else None for v in n.inputs],
                  [v.name for v in n.outputs]) for n in sess.model.nodes]
        return graph, len(runs)

    filtered, filtered_runs = optimized()
    monkeypatch.setattr(_rules, "_prefilter", lambda rule: None)
    unfiltered, unfiltered_runs = optimized()
    assert filtered == unfiltered
    assert any(op == "Attention" for op, *_ in filtered)
    assert filtered_runs < unfiltered_runs / 2


def test_rules_do_not_keep_the_last_graph_alive():
    """Matching leaves state on the shared rule objects (the matcher's graph and last match,
    a class-based rule's check results); once rules have run it is put back, so a dropped
    session's graph, with its constants, is freed (it stayed until the next rewrite)."""
    import gc
    import weakref

    from models import transformer_encoder

    import onnxplex

    sess = onnxplex.InferenceSession(transformer_encoder(), providers=["cpu_mlas"])
    assert any(n.op_type == "Attention" for n in sess.model.nodes)   # rules did run
    graph = weakref.ref(sess.model.ir.graph)
    del sess
    gc.collect()
    assert graph() is None


def test_a_rewritten_body_output_keeps_its_name(tmp_path):
    """A body output produced by a rewrite (Transpose + MatMul -> FusedMatMul) keeps its
    name even where a sibling body uses the same name: it was renamed 'y_1', and a node
    reading its bodies' outputs by name (BeamSearch's encoder) no longer found them."""
    import numpy as np

    import onnxplex

    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 2], np.arange(6, dtype=np.float32))
    then = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
         helper.make_node("MatMul", ["xt", "w"], ["y"])], "then", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])], [w])
    other = helper.make_graph(
        [helper.make_node("Constant", [], ["y"], value=helper.make_tensor(
            "c", TensorProto.FLOAT, [1, 2], [7, 8]))], "else", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other)], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [None, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = onnxplex.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    sess = onnxplex.InferenceSession(model.SerializeToString(), so)
    saved = onnx.load(str(tmp_path / "opt.onnx"))
    branch = next(a.g for a in saved.graph.node[0].attribute if a.name == "then_branch")
    assert [n.op_type for n in branch.node] == ["FusedMatMul"]   # (the rewrite happened)
    assert [o.name for o in branch.output] == ["y"]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(sess.run(None, {"c": np.array(True), "x": x})[0],
                               x.T @ np.arange(6, dtype=np.float32).reshape(3, 2))
