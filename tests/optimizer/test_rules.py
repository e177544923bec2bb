"""onnxplex._optimizer._rules: onnxscript rules tried only at nodes of their pattern's output
op type, with the same rewrites as onnxscript's own rule set."""

from __future__ import annotations

import onnx
import onnx_ir as ir
from onnx import TensorProto, helper
from onnxscript.rewriter.rules import common as rules

from onnxplex._optimizer import _rules


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
