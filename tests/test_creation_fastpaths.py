"""Shortcuts session creation takes must give what the general paths give."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from onnxplex.graph import checks as _checks
from onnxplex.graph import inference as _inference
from onnxplex.graph import model as _graph
from onnxplex.graph.model import _readonly_array, _topological_order, load_model
from onnxplex.optimizer import PASSES, Pass, _ordered


@pytest.mark.parametrize("kind, values", [
    (TensorProto.FLOAT, [1.5, -2.25, 3.0, 0.1, 7.0, 8.0]),
    (TensorProto.DOUBLE, [1.5, -2.25, 3.0, 0.1, 7.0, 8.0]),
    (TensorProto.INT64, [1, -2, 3, 2**40, 5, 6]),
    (TensorProto.INT32, [1, -2, 3, 2**30, 5, 6]),
])
@pytest.mark.parametrize("raw", [False, True])
def test_readonly_array_matches_onnx_ir(kind, values, raw):
    if raw:
        arr = np.array(values, helper.tensor_dtype_to_np_dtype(kind)).reshape(2, 3)
        proto = onnx.numpy_helper.from_array(arr, "t")
    else:
        proto = helper.make_tensor("t", kind, [2, 3], values)
    tensor = ir.serde.TensorProtoTensor(proto)
    got = _readonly_array(tensor)
    want = tensor.numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert not got.flags.writeable


def test_readonly_array_wrong_length_still_refused():
    proto = helper.make_tensor("t", TensorProto.INT64, [2], [1, 2])
    proto.dims[:] = [3]   # 2 values for 3 elements
    with pytest.raises(_graph.InvalidModelError, match="cannot be read"):
        _readonly_array(ir.serde.TensorProtoTensor(proto))


def _chain(order: list[int]) -> onnx.ModelProto:
    """Relu chain x -> a0 -> a1 -> a2 -> y with its nodes listed in ``order``."""
    names = ["x", "a0", "a1", "a2", "y"]
    nodes = [helper.make_node("Relu", [names[i]], [names[i + 1]], name=f"n{i}") for i in range(4)]
    graph = helper.make_graph([nodes[i] for i in order], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [3, 2, 1, 0], [1, 0, 3, 2]])
def test_topological_order(order):
    model = ir.serde.deserialize_model(_chain(order))
    got = [n.name for n in _topological_order(model.graph)]
    assert got == ["n0", "n1", "n2", "n3"]


def test_topological_order_self_loop_is_a_cycle():
    model = ir.serde.deserialize_model(_chain([0, 1, 2, 3]))
    node = list(model.graph)[1]
    node.replace_input_with(0, node.outputs[0])
    with pytest.raises(_graph.InvalidModelError, match="cycle"):
        _topological_order(model.graph)


def test_names_follow_reindex():
    weights = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    bias = helper.make_tensor("b", TensorProto.FLOAT, [2], [0.5, 0.5])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
              helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [weights, bias])
    model = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert model.overridable == {"b"} and model.const_names == {"w"}
    assert model.input_names == ("x",)
    del model.graph.initializers["w"]
    model.reindex(structure=False)
    assert model.const_names == frozenset() and model.overridable == {"b"}
    # node views see the same value descriptions as value_info by name
    for view in model.node_views:
        for v in (*view.inputs, *view.outputs):
            assert v is model.value_info(v.name)


def test_pass_order_follows_registration():
    before = _ordered()
    extra = Pass("test-only pass", 1, lambda ctx: 0)
    PASSES.append(extra)
    try:
        after = _ordered()
        assert [p for p in after if p is not extra] == before
        # (a level-1 pass of no known module: after the basic passes, before the fusions)
        assert all(p.level <= 1 for p in after[:after.index(extra)])
        assert all(p.level > 1 for p in after[after.index(extra) + 1:])
    finally:
        PASSES.remove(extra)
    assert _ordered() == before


@pytest.mark.parametrize("values", [
    ["BRANCH_LEQ", "LEAF"] * 40,
    ["ünïcode", "", "a,b", "x y"] * 10,
    ["nul\0inside"] + ["LEAF"] * 40,
    ["short", "list"],
])
def test_long_strings_attribute_as_onnx_ir_reads_it(values):
    from onnxplex.graph import fast_attrs as _fast_attrs

    attr = helper.make_attribute("modes", values)
    _fast_attrs.install()
    got = ir.serde.deserialize_attribute(attr)
    assert got.type == ir.AttributeType.STRINGS
    assert got.value == tuple(values)


def test_long_strings_attribute_not_utf8_still_refused():
    attr = helper.make_attribute("modes", [b"\xff\xfe"] + [b"LEAF"] * 40)
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                            keys_strings=[b"a"] * 41, values_int64s=list(range(41)))
    node.attribute[0].CopyFrom(attr)
    node.attribute[0].name = "keys_strings"
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.STRING, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 2)])
    with pytest.raises(_graph.InvalidModelError):
        load_model(model.SerializeToString())


def _trees(n_trees: int, depth: int, rng) -> dict[str, list]:
    """Full binary trees as a tree ensemble's ``nodes_*`` lists, and its leaves' ids."""
    a: dict[str, list] = {k: [] for k in ("treeids", "nodeids", "featureids", "values",
                                          "modes", "truenodeids", "falsenodeids")}
    leaves = []
    inner = 2 ** depth - 1
    for t in range(n_trees):
        for i in range(2 * inner + 1):
            leaf = i >= inner
            a["treeids"].append(t)
            a["nodeids"].append(i)
            a["featureids"].append(0 if leaf else int(rng.integers(4)))
            a["values"].append(0.0 if leaf else float(rng.standard_normal()))
            a["modes"].append("LEAF" if leaf else "BRANCH_LEQ")
            a["truenodeids"].append(0 if leaf else 2 * i + 1)
            a["falsenodeids"].append(0 if leaf else 2 * i + 2)
            if leaf:
                leaves.append((t, i))
    return {f"nodes_{k}": v for k, v in a.items()} | {"leaves": leaves}


def _payload_model(op: str, ml_opset: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    outs = [helper.make_tensor_value_info("label", TensorProto.UNDEFINED, None),
            helper.make_tensor_value_info("scores", TensorProto.UNDEFINED, None)]
    if op.startswith("TreeEnsemble"):
        attrs = _trees(40, 5, rng)
        leaves = attrs.pop("leaves")
        prefix = "class" if op.endswith("Classifier") else "target"
        attrs |= {f"{prefix}_treeids": [t for t, _ in leaves for _ in range(3)],
                  f"{prefix}_nodeids": [i for _, i in leaves for _ in range(3)],
                  f"{prefix}_ids": [k for _ in leaves for k in range(3)],
                  f"{prefix}_weights": rng.standard_normal(3 * len(leaves)).tolist()}
        attrs |= ({"classlabels_int64s": [0, 1, 2]} if prefix == "class" else {"n_targets": 3})
    elif op.startswith("SVM"):
        attrs = {"support_vectors": rng.standard_normal(4 * 1200).tolist(),
                 "kernel_type": "RBF", "kernel_params": [0.5, 0.0, 3.0]}
        if op == "SVMClassifier":
            attrs |= {"coefficients": rng.standard_normal(1200).tolist(), "rho": [0.1],
                      "vectors_per_class": [600, 600], "classlabels_ints": [0, 1]}
        else:
            attrs |= {"coefficients": rng.standard_normal(1200).tolist(), "rho": [0.1],
                      "n_supports": 1200}
    else:   # Linear*: 4 features, many targets / classes
        attrs = {"coefficients": rng.standard_normal(4 * 1100).tolist(),
                 "intercepts": rng.standard_normal(1100).tolist()}
        if op == "LinearClassifier":
            attrs["classlabels_ints"] = list(range(1100))
        else:
            attrs["targets"] = 1100
    two = op.endswith("Classifier")
    node = helper.make_node(op, ["x"], ["label", "scores"] if two else ["scores"],
                            domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], "g", [x], outs if two else outs[1:])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("ai.onnx.ml", ml_opset)])


@pytest.mark.parametrize("op, ml_opset", [
    ("TreeEnsembleClassifier", 1), ("TreeEnsembleClassifier", 3),
    ("TreeEnsembleRegressor", 1), ("TreeEnsembleRegressor", 3),
    ("SVMClassifier", 1), ("SVMRegressor", 1), ("LinearClassifier", 1), ("LinearRegressor", 1),
])
def test_inference_without_payload_finds_what_whole_inference_finds(op, ml_opset):
    """Shape inference leaves the long ai.onnx.ml lists out (_inference._PAYLOAD): the types and
    shapes it finds must be those of inference over the whole model, and the model loaded
    keeps every value of those lists."""
    proto = _payload_model(op, ml_opset)
    assert _inference._payload(_checks._walk(proto).graph.nodes), \
        "the model should be big enough to be stripped"
    want = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True,
                                             data_prop=True)
    mine = onnx.ModelProto()
    mine.CopyFrom(proto)
    got, big, declared = _inference._infer_shapes(mine, mine.SerializeToString())
    assert got is mine and not big and not declared
    assert list(got.graph.value_info) == list(want.graph.value_info)
    assert list(got.graph.output) == list(want.graph.output)
    assert got.graph.output[-1].type.tensor_type.elem_type == TensorProto.FLOAT
    assert list(got.graph.node) == list(proto.graph.node)   # payload untouched
    model = load_model(proto.SerializeToString())
    node = model.nodes[0]
    for a in proto.graph.node[0].attribute:
        if a.name in _inference._PAYLOAD[op]:
            got_values = node.attributes[a.name].value
            want_values = onnx.helper.get_attribute_value(a)
            if a.type == onnx.AttributeProto.STRINGS:
                want_values = [v.decode() for v in want_values]
            np.testing.assert_array_equal(np.asarray(got_values), np.asarray(want_values))


_MODE_TABLE = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "LEAF": 7, "": 9,
               "a_key_longer_than_sixteen_bytes": 11}


@pytest.mark.parametrize("values", [
    ["BRANCH_LEQ", "LEAF"] * 1100,                      # read off the wire: a StringsAttr
    ["BRANCH_LEQ", "", "LEAF", "x" * 127] * 600,
    ["Jan", "LEAF"] * 1100,                             # the strings' key byte in a value
    ["x" * 128] + ["LEAF"] * 2100,                      # a two-byte length
    ["ünïcode", "LEAF"] * 1100,
    ["nul\0inside"] + ["LEAF"] * 2100,
])
def test_wire_strings_attribute_as_onnx_ir_reads_it(values):
    from onnxplex.graph import fast_attrs as _fast_attrs

    _fast_attrs.install()
    attr = helper.make_attribute("modes", values, doc_string="d")
    got = ir.serde.deserialize_attribute(attr)
    want = ir.Attr("modes", ir.AttributeType.STRINGS, values, doc_string="d")
    assert got.type == want.type and got.doc_string == "d"
    assert got.value == want.value and type(got.value) is tuple
    simple = all(v.isascii() and "\0" not in v and "J" not in v and len(v) < 128
                 for v in values)
    assert isinstance(got, _fast_attrs.StringsAttr) == simple
    # saved back as it was read
    assert ir.serde.serialize_attribute(got).strings == attr.strings


def test_wire_strings_attribute_not_utf8_still_refused(monkeypatch):
    from onnxplex.graph import fast_attrs as _fast_attrs

    monkeypatch.setattr(_fast_attrs, "_WIRE_MIN", 32)   # its 41 values read off the wire
    test_long_strings_attribute_not_utf8_still_refused()


@pytest.mark.parametrize("n", [3, 40, 2100, 9000])
@pytest.mark.parametrize("wire", [False, True])
def test_string_codes_match_a_lookup_an_element(n, wire):
    from onnxplex.graph import fast_attrs as _fast_attrs

    _fast_attrs.install()
    rng = np.random.default_rng(n)
    pool = [*_MODE_TABLE, "BRANCH_LEQX", "BRANCH_L", "LEA", "a_key_longer_than_sixteen_bytez",
            "LEAF" + "\0"]
    if not wire:
        pool += ["ünï", "J"]
    values = [pool[i] for i in rng.integers(0, len(pool) - (not wire), n)]
    if wire:   # (the attribute kept alive: string_codes finds it by the tuple it built)
        attr = ir.serde.deserialize_attribute(helper.make_attribute("m", values))
        values = attr.value
    got = _fast_attrs.string_codes(tuple(values) if not wire else values, _MODE_TABLE)
    want = [_MODE_TABLE.get(v, -1) for v in values]
    assert got.dtype == np.int64 and got.tolist() == want


def test_string_codes_odd_values():
    from onnxplex.graph import fast_attrs as _fast_attrs

    values = ("LEAF", b"LEAF", "BRANCH_LT") * 3000
    assert _fast_attrs.string_codes(values, _MODE_TABLE).tolist() == [7, -1, 1] * 3000
    table = {"a\0b": 1, "LEAF": 2}   # a key with a NUL
    assert _fast_attrs.string_codes(("a\0b", "LEAF") * 5000, table).tolist() == [1, 2] * 5000


def test_attr_codes_and_tree_mode_errors():
    from onnxplex import NodeView

    view = NodeView(0, "n", "TreeEnsembleRegressor", "ai.onnx.ml", 3, (), (),
                    {"nodes_modes": ("LEAF", "BRANCH_LT"), "one": "LEAF"})
    assert view.attr_codes("nodes_modes", _MODE_TABLE).tolist() == [7, 1]
    assert view.attr_codes("one", _MODE_TABLE).tolist() == [7]
    assert view.attr_codes("absent", _MODE_TABLE) is None


@pytest.mark.parametrize("bad", ["BRANCH_NOPE", "leaf"])
def test_tree_unknown_mode_named(bad):
    import onnxplex

    n = 2101
    modes = ["BRANCH_LEQ"] + ["LEAF"] * (n - 1)
    modes[n // 2] = bad
    node = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", n_targets=1,
        nodes_treeids=[0] * n, nodes_nodeids=list(range(n)), nodes_featureids=[0] * n,
        nodes_values=[0.5] * n, nodes_modes=modes, nodes_truenodeids=[1] + [0] * (n - 1),
        nodes_falsenodeids=[2] + [0] * (n - 1), target_treeids=[0], target_nodeids=[1],
        target_ids=[0], target_weights=[1.0])
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 3)])
    with pytest.raises(Exception, match=f"nodes_modes: unknown mode '{bad}'"):
        onnxplex.InferenceSession(model.SerializeToString())


def test_long_strings_attribute_read_as_codes_without_its_tuple():
    """A tree ensemble's long ``nodes_modes`` reaches the kernel as codes read from its text:
    the tuple of ``str`` is not built while the session is created (its strings would stay
    alive with the session, each one an object the garbage collector walks), and the
    session computes what the same model with the modes read one by one computes."""
    import onnxplex
    from onnxplex.graph import fast_attrs as _fast_attrs

    rng = np.random.default_rng(3)
    attrs = _trees(80, 5, rng)   # 80 trees of 63 nodes: 5,040 modes, read off the wire
    leaves = attrs.pop("leaves")
    attrs |= {"target_treeids": [t for t, _ in leaves], "target_nodeids": [i for _, i in leaves],
              "target_ids": [0] * len(leaves),
              "target_weights": rng.standard_normal(len(leaves)).tolist(), "n_targets": 1}
    node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml",
                            **attrs)
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 3)])
    loaded = load_model(model.SerializeToString())
    stored = loaded.nodes[0].attributes["nodes_modes"]
    assert isinstance(stored, _fast_attrs.StringsAttr)
    view = loaded.node_views[0]
    codes = view.attr_codes("nodes_modes", _MODE_TABLE)
    assert codes.tolist() == [_MODE_TABLE[m] for m in attrs["nodes_modes"]]
    assert stored._value is None   # (codes read from the text)
    assert view.attrs["nodes_modes"] == tuple(attrs["nodes_modes"])   # (built when asked)

    x = rng.standard_normal((64, 4)).astype(np.float32)
    got = onnxplex.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    # the reference: every attribute read one element at a time by onnx's own evaluator
    from onnx.reference import ReferenceEvaluator
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
