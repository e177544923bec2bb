"""Caches session creation keeps across sessions must follow what they cache: the registered
optimizer passes, an op table's configs."""

from __future__ import annotations

import numpy as np
from graphs import chain

import onnxplex
from onnxplex import OpTable
from onnxplex.framework.provider import NodeGroup, single_node_group
from onnxplex.optimizer import PASSES, Pass, _load_passes, _selected, optimize


def _view(op: str, opset: int = 17):
    return onnxplex.load_model(chain([op], opset=opset)).node_views[0]


def test_op_table_answer_per_op_follows_added_configs():
    table = OpTable()
    assert table.lookup(_view("Relu")) == (None, "no kernel for Relu")

    @table.register("Relu", since=6)
    def _relu6(node, ctx):
        return np.negative

    config, why = table.lookup(_view("Relu"))
    assert config.factory is _relu6 and why == ""
    assert table.lookup(_view("Relu", 5))[0] is None   # outside its opsets

    @table.register("Relu", since=14)
    def _relu14(node, ctx):
        return np.negative

    assert table.lookup(_view("Relu"))[0].factory is _relu14
    assert table.lookup(_view("Relu", 13))[0].factory is _relu6

    # a predicate makes the answer the node's own again
    @table.register("Relu", since=16, predicate=lambda n: None if n.name == "A" else "not A")
    def _relu16(node, ctx):
        return np.negative

    view = _view("Relu")
    assert table.lookup(view)[0].factory is _relu16
    proto = chain(["Relu"], opset=17)
    proto.graph.node[0].name = "B"
    assert table.lookup(onnxplex.load_model(proto).node_views[0]) == (None, "not A")
    assert table.lookup(view)[0].factory is _relu16


def test_single_node_groups_are_equal_to_new_ones():
    for i in (0, 3, 3, 70):
        assert single_node_group(i) == NodeGroup((i,))
        assert single_node_group(i).nodes == (i,)
    assert single_node_group(np.int64(5)).nodes == (5,)
    assert type(single_node_group(np.int64(5)).nodes[0]) is int


def test_pass_selection_follows_registered_passes():
    _load_passes()
    before = _selected(1, 99, frozenset())
    assert _selected(1, 99, frozenset()) == before
    ran = []
    extra = Pass("test-only selected pass", 2, lambda ctx: ran.append(1) or 0)
    PASSES.append(extra)
    try:
        after = _selected(1, 99, frozenset())
        assert extra in after and [p for p in after if p is not extra] == before
        assert extra not in _selected(1, 1, frozenset())
        assert extra not in _selected(1, 99, frozenset({extra.name}))
        model = onnxplex.load_model(chain(["Relu"], opset=17))
        reports = optimize(model, 99)
        assert ran == [1]
        assert [r.name for r in reports] == [p.name for p in after]
    finally:
        PASSES.remove(extra)
    assert _selected(1, 99, frozenset()) == before


def test_skipped_pass_reports_are_plain_values():
    model = onnxplex.load_model(chain(["Relu"], opset=17))
    first = optimize(model, 99)
    second = optimize(onnxplex.load_model(chain(["Relu"], opset=17)), 99)
    assert [(r.name, r.changes, r.skipped) for r in first] == \
        [(r.name, r.changes, r.skipped) for r in second]
    skipped = [r for r in first if r.seconds == 0.0]
    assert skipped and all(r.changes == 0 and not r.skipped for r in skipped)


def test_small_arrays_are_shared_while_a_session_is_built_only():
    from onnx import TensorProto, helper

    from onnxplex.graph import model as _graph

    model = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [helper.make_tensor("b", TensorProto.FLOAT, [2], [1.0, 2.0])]),
        opset_imports=[helper.make_opsetid("", 17)])
    tensor = onnxplex.load_model(model).graph.initializers["b"].const_value
    # outside a build every read is a new array, and nothing is kept
    assert _graph._readonly_array(tensor) is not _graph._readonly_array(tensor)
    assert _graph._SMALL is None
    with _graph.sharing_small_arrays():
        first = _graph._readonly_array(tensor)
        assert _graph._readonly_array(tensor) is first
        assert not first.flags.writeable and first.tolist() == [1.0, 2.0]
        with _graph.sharing_small_arrays():   # nested: the outer build's cache stays
            assert _graph._readonly_array(tensor) is first
        assert _graph._readonly_array(tensor) is first
    assert _graph._SMALL is None
    sess = onnxplex.InferenceSession(model.SerializeToString())
    assert _graph._SMALL is None   # (a session does not keep the cache either)
    np.testing.assert_array_equal(sess.run(None, {"x": np.ones(2, np.float32)})[0], [2, 3])
