"""The lean main-graph reader (onnxplex.graph.fast_read) against onnx-ir's deserializer: both must
give the same model, serialized back, on every ONNX node conformance case of the installed onnx
package (~1,900 models: subgraphs reading outer values, sequences, optionals, functions, every
attribute type), on the model files onnx ships, and on hand-built edge cases."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from onnxplex.graph import fast_attrs as _fast_attrs
from onnxplex.graph import fast_read as _fast_read
from onnxplex.graph import maptype as _maptype
from onnxplex.graph import model as _graph
from onnxplex.testing._cases import all_cases


def _serialized(model: ir.Model) -> bytes:
    return ir.serde.serialize_model(model).SerializeToString(deterministic=True)


def _both(proto: onnx.ModelProto) -> tuple[bytes | None, bytes]:
    """(what the session's loader reads, through the fast reader; onnx-ir's reading), both
    serialized; the first is None when the fast reader declines the model."""
    _maptype.install()
    _fast_attrs.install()
    mine, theirs = onnx.ModelProto(), onnx.ModelProto()
    mine.CopyFrom(proto)
    theirs.CopyFrom(proto)
    g = mine.graph
    skip = {t.name for t in g.initializer} | {v.name for v in g.output}
    typed, rest = _fast_read.split_value_info(g, skip)
    fast = _fast_read.read_model(mine, typed, rest)
    # onnx-ir reads the value_info of initializers too (the loader leaves their tensors'
    # types): the reference drops those entries as the loader does
    kept = [v for v in theirs.graph.value_info if v.name not in {t.name for t in g.initializer}]
    theirs.graph.ClearField("value_info")
    theirs.graph.value_info.extend(kept)
    reference = ir.serde.deserialize_model(theirs)
    return (None if fast is None else _serialized(fast)), _serialized(reference)


def test_every_conformance_case_reads_the_same():
    cases = all_cases()
    declined, compared = [], 0
    for name, case in sorted(cases.items()):
        fast, reference = _both(case.model)
        if fast is None:
            declined.append(name)
            continue
        assert fast == reference, name
        compared += 1
    assert compared > 0.95 * len(cases), f"declined {len(declined)}: {declined[:20]}"


_SHIPPED = sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend", "test",
                                         "data", "*", "*", "model.onnx")))


@pytest.mark.skipif(not _SHIPPED, reason="this onnx package ships no model files")
def test_shipped_model_files_read_the_same():
    for path in _SHIPPED:
        fast, reference = _both(onnx.load(path))
        assert fast is not None, path
        assert fast == reference, path


def _model(nodes, inputs, outputs, *, initializers=(), value_info=(), opsets=None, **kw):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers),
                              value_info=list(value_info))
    return helper.make_model(graph, opset_imports=opsets or [helper.make_opsetid("", 17)],
                             **kw)


def _vi(name, elem=TensorProto.FLOAT, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem, shape)


def test_edge_cases_read_the_same():
    f = TensorProto.FLOAT
    relu = helper.make_node("Relu", ["x"], ["y"], name="r", doc_string="a doc")
    helper.set_metadata_props(relu, {"k": "v"})
    every_attr = helper.make_node(
        "Custom", ["y", "", "w"], ["z", ""], domain="my.domain", name="c",
        i=3, f=0.5, s="text", ints=[1, 2], floats=[0.5, 1.5], strings=["a", "b"],
        long_ints=list(range(100)), long_floats=[0.25] * 100,
        long_strings=[f"s{k}" for k in range(100)],
        t=helper.make_tensor("t", f, [2], [1.0, 2.0]))
    bad_text = helper.make_attribute("raw", b"\xff\xfe")
    every_attr.attribute.append(bad_text)
    w = helper.make_tensor("w", f, [3], [1.0, 2.0, 3.0])
    x_init = helper.make_tensor("x", f, [2, 3], np.zeros(6).tolist())   # an input's default
    m = _model([relu, every_attr], [_vi("x")], [_vi("z", shape=("batch", None)), _vi("y")],
               initializers=[w, x_init],
               value_info=[_vi("y", shape=("n", 3)), _vi("w", shape=(3,))],
               opsets=[helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)],
               producer_name="me", doc_string="model doc")
    helper.set_model_props(m, {"author": "a"})
    m.graph.doc_string = "graph doc"
    fast, reference = _both(m)
    assert fast is not None and fast == reference


def test_declines_what_it_does_not_read():
    x = _vi("x")
    node = helper.make_node("Relu", ["x"], ["y"])
    m = _model([node], [x], [_vi("y")])
    m.graph.quantization_annotation.add(tensor_name="y")
    fast, reference = _both(m)
    assert fast is None
    m = _model([helper.make_node("Relu", ["missing"], ["y"])], [x], [_vi("y")])
    assert _both(m)[0] is None   # (the loader refuses it before; onnx-ir makes a placeholder)


def test_the_loader_uses_it(monkeypatch):
    """A session's loader reads a plain model with the fast reader, not onnx-ir's."""
    calls = []
    monkeypatch.setattr(ir.serde, "deserialize_model",
                        lambda proto: calls.append(proto) or pytest.fail("onnx-ir read it"))
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x")], [_vi("y")])
    loaded = _graph.load_model(m.SerializeToString())
    assert [n.op_type for n in loaded.nodes] == ["Relu"] and not calls
