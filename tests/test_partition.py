"""Ordered partitioning: priority, convexity, fallback, errors, compile-once."""

from __future__ import annotations

import numpy as np
import pytest
from graphs import chain, diamond_abc
from onnx import TensorProto, helper

import onnxplex
from onnxplex import Capability, ExecutionProvider, NodeGroup, PartitionError, SessionOptions


def _placement(sess):
    return {p.name: p.provider for p in sess.get_provider_assignment().placements}


def test_priority_order_is_the_users(null_provider):
    model = chain(["Relu", "Sigmoid"]).SerializeToString()
    first = onnxplex.InferenceSession(model, providers=[("null", {"claim": "Relu,Sigmoid"}),
                                                        "cpu_mlas"])
    assert set(_placement(first).values()) == {"null"}
    second = onnxplex.InferenceSession(model, providers=["cpu_mlas",
                                                         ("null", {"claim": "Relu,Sigmoid"})])
    assert set(_placement(second).values()) == {"cpu_mlas"}
    assert second.get_providers() == ["cpu_mlas", "null"]


def test_default_cpu_provider_is_appended_last_and_takes_the_rest(null_provider):
    sess = onnxplex.InferenceSession(chain(["Relu", "Sigmoid", "Tanh"]),
                                     providers=[("null", {"claim": "Sigmoid"})])
    assert sess.get_providers() == ["null", "cpu_mlas"]
    assert _placement(sess) == {"A": "cpu_mlas", "B": "null", "C": "cpu_mlas"}
    plan = sess.get_provider_assignment()
    a = next(p for p in plan.placements if p.name == "A")
    assert a.fell_back and a.declined == (("null", "Relu is not in claim=['Sigmoid']"),)
    assert "declined by null: Relu is not in claim" in plan.report()
    assert "A (Relu) -> cpu_mlas" in plan.explain()


def test_report_prints_a_shared_reason_once(null_provider):
    """A long reason given for several nodes is printed once under the table, numbered, and
    each node refers to it; a reason given once stays on its node's line."""
    sess = onnxplex.InferenceSession(
        chain(["Relu", "Relu", "Relu", "Sigmoid", "Tanh"]),
        providers=[("null", {"claim": "Tanh,Softmax,LeakyRelu,Selu,Elu,HardSigmoid"}),
                   "cpu_mlas"])
    report = sess.get_provider_assignment().report()
    relu = "declined by null: Relu is not in claim=['Elu', 'HardSigmoid', 'LeakyRelu', "
    assert report.count(relu) == 1, report
    assert "(1) " + relu in report and "[3 nodes]" in report
    assert report.count("declined by null (1)") == 3
    assert report.count("declined by null: Sigmoid is not in claim") == 1   # inline, once
    assert "Shared by several nodes:" in report


def test_non_convex_claim_is_split(null_provider):
    # A -> B -> C and A -> C; only A and C are claimed, as one fused group.
    sess = onnxplex.InferenceSession(diamond_abc(), providers=[("null", {"claim": "Relu,Add",
                                                                         "fuse": True})])
    plan = sess.get_provider_assignment()
    assert _placement(sess) == {"A": "null", "B": "cpu_mlas", "C": "null"}
    null_parts = [p for p in plan.partitions if p.provider == "null"]
    assert sorted(p.nodes for p in null_parts) == [(0,), (2,)]
    assert any("not convex" in n for n in plan.notes)
    out = sess.run(None, {"x": np.ones((2, 3), np.float32)})[0]
    assert out.shape == (2, 3)


def test_convex_groups_helper():
    model = onnxplex.load_model(diamond_abc())
    assert onnxplex.convex_groups(model, [0, 2]) == [(0,), (2,)]
    assert onnxplex.convex_groups(model, [0, 1, 2]) == [(0, 1, 2)]
    assert onnxplex.convex_groups(model, [1, 2]) == [(1, 2)]


def test_fused_group_compiled_once_per_session(null_provider):
    sess = onnxplex.InferenceSession(chain(["Relu", "Sigmoid"]),
                                     providers=[("null", {"claim": "Relu,Sigmoid", "fuse": 1})])
    for _ in range(5):
        sess.run(None, {"x": np.ones((2, 3), np.float32)})
    assert null_provider.compiled == [(0, 1)]


def test_unclaimed_node_error_lists_reasons(null_provider):
    model = chain(["Relu", "NoSuchOp"])
    model.opset_import.add(domain="example.custom", version=1)
    model.graph.node[1].domain = "example.custom"
    with pytest.raises(PartitionError) as err:
        onnxplex.InferenceSession(model, providers=[("null", {"claim": "Relu"})])
    msg = str(err.value)
    assert "node 1 'B'" in msg and "example.custom::NoSuchOp" in msg
    assert "null: NoSuchOp is not in claim" in msg
    assert "cpu_mlas: no kernel for example.custom::NoSuchOp" in msg


def test_cpu_fallback_disabled(null_provider):
    so = SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    model = chain(["Relu", "Sigmoid"])
    ok = onnxplex.InferenceSession(model, so, providers=[("null", {"claim": "Relu,Sigmoid"})])
    assert ok.get_providers() == ["null"]
    with pytest.raises(PartitionError, match="fallback to the default CPU provider is disabled"):
        onnxplex.InferenceSession(model, so, providers=[("null", {"claim": "Relu"})])
    with pytest.raises(onnxplex.InvalidArgumentError, match="conflicting session configuration"):
        onnxplex.InferenceSession(model, so, providers=["null", "cpu_mlas"])


class _Raising(ExecutionProvider):
    name = "raising"
    where = "capability"

    def get_capability(self, graph):
        if self.where == "capability":
            raise RuntimeError("boom in capability")
        return Capability(tuple(NodeGroup((n.index,)) for n in graph.nodes))

    def compile(self, subgraph):
        raise RuntimeError("boom in compile")


@pytest.mark.parametrize("where", ["capability", "compile"])
def test_faulty_provider_is_disabled_with_a_warning(where):
    cls = type("Raising", (_Raising,), {"where": where})
    onnxplex.register_provider(cls)
    try:
        with pytest.warns(RuntimeWarning, match=f"boom in {where}"):
            sess = onnxplex.InferenceSession(chain(["Relu"]), providers=["raising"])
        assert _placement(sess) == {"A": "cpu_mlas"}
        so = SessionOptions()
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        with pytest.raises(onnxplex.ProviderError, match=f"boom in {where}"):
            onnxplex.InferenceSession(chain(["Relu"]), so, providers=["raising"])
    finally:
        onnxplex.framework.plugins.unregister_provider("raising")


class _Liar(ExecutionProvider):
    name = "liar"
    claim: tuple = ()

    def get_capability(self, graph):
        return Capability(tuple(NodeGroup(g) for g in self.claim))


@pytest.mark.parametrize("claim, message", [
    (((7,),), "claimed node index 7"),
    (((0,), (0,)), "claimed node 0 twice"),
    (((),), "empty node group"),
])
def test_invalid_claims_are_named(claim, message):
    cls = type("Liar", (_Liar,), {"claim": claim})
    onnxplex.register_provider(cls)
    try:
        so = SessionOptions()
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        with pytest.raises(onnxplex.CapabilityError, match=message):
            onnxplex.InferenceSession(chain(["Relu"]), so, providers=["liar"])
    finally:
        onnxplex.framework.plugins.unregister_provider("liar")


def test_claim_of_node_not_offered_is_rejected(null_provider):
    cls = type("Liar", (_Liar,), {"claim": ((0,),)})
    onnxplex.register_provider(cls)
    try:
        with pytest.warns(RuntimeWarning, match="not offered"):
            sess = onnxplex.InferenceSession(chain(["Relu", "Sigmoid"]),
                                             providers=[("null", {"claim": "Relu"}), "liar"])
        assert _placement(sess) == {"A": "null", "B": "cpu_mlas"}
    finally:
        onnxplex.framework.plugins.unregister_provider("liar")


_NUMPY_OPS = {"Relu": lambda x: np.maximum(x, 0), "Neg": np.negative,
              "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Abs": np.abs}


class _GroupFuser(ExecutionProvider):
    """Claims its ``ops`` as one group and runs the group's nodes in order with numpy."""

    ops: frozenset = frozenset()

    def get_capability(self, graph):
        mine = tuple(n.index for n in graph.nodes if n.op_type in self.ops)
        return Capability((NodeGroup(mine),) if mine else ())

    def compile(self, subgraph):
        def kernel(*args):
            env = {v.name: a for v, a in zip(subgraph.inputs, args)}
            for node in subgraph.nodes:
                env[node.outputs[0].name] = _NUMPY_OPS[node.op_type](env[node.inputs[0].name])
            return tuple(env[v.name] for v in subgraph.outputs)
        return kernel


def test_groups_stay_convex_through_another_providers_fused_group():
    """A -> B1 and B2 -> D, with {B1, B2} fused by the first provider: fusing {A, D} would
    need the fused unit between them, a cycle no path of single nodes shows (the check must
    follow paths through a fused unit from any of its members)."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="A"),
             helper.make_node("Neg", ["a"], ["b1"], name="B1"),
             helper.make_node("Sigmoid", ["x"], ["b2"], name="B2"),
             helper.make_node("Abs", ["b2"], ["y"], name="D")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3])
                           for n in ("b1", "y")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    first = type("First", (_GroupFuser,), {"name": "fuse_b", "ops": frozenset({"Neg", "Sigmoid"})})
    second = type("Second", (_GroupFuser,), {"name": "fuse_ad", "ops": frozenset({"Relu", "Abs"})})
    onnxplex.register_provider(first)
    onnxplex.register_provider(second)
    try:
        so = SessionOptions()
        so.graph_optimization_level = onnxplex.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = onnxplex.InferenceSession(m, so, providers=["fuse_b", "fuse_ad"])
        x = np.array([-1.0, 0.5, 2.0], np.float32)
        b1, y = sess.run(None, {"x": x})
        np.testing.assert_allclose(b1, -np.maximum(x, 0))
        np.testing.assert_allclose(y, 1 / (1 + np.exp(-x)), rtol=1e-6)
        parts = sess.get_provider_assignment().partitions
        assert sorted(p.nodes for p in parts if p.provider == "fuse_ad") == [(0,), (3,)]
    finally:
        onnxplex.framework.plugins.unregister_provider("fuse_b")
        onnxplex.framework.plugins.unregister_provider("fuse_ad")
