"""Map and sequence-of-map types (ai.onnx.ml models): loading, type strings, saving."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest
from onnx import helper as oh

import onnxplex
from onnxplex._graph import load_model
from onnxplex._maptype import MapType

ML = "ai.onnx.ml"
F, I64, STR = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.STRING


def _map(key: int, value: onnx.TypeProto) -> onnx.TypeProto:
    return oh.make_map_type_proto(key, value)


def _tensor(elem: int) -> onnx.TypeProto:
    return oh.make_tensor_type_proto(elem, None)


def _zipmap_model() -> onnx.ModelProto:
    """x [N, 3] -> ZipMap -> seq(map(int64, tensor(float)))."""
    out_type = oh.make_sequence_type_proto(_map(I64, _tensor(F)))
    node = oh.make_node("ZipMap", ["x"], ["z"], domain=ML, classlabels_int64s=[0, 1, 2])
    g = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", F, ["N", 3])],
                      [oh.make_value_info("z", out_type)])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(ML, 1)])


def _dictvec_model() -> onnx.ModelProto:
    """map(string, tensor(float)) -> DictVectorizer -> [1, 2]."""
    node = oh.make_node("DictVectorizer", ["m"], ["y"], domain=ML,
                        string_vocabulary=["a", "b"])
    g = oh.make_graph([node], "g", [oh.make_value_info("m", _map(STR, _tensor(F)))],
                      [oh.make_tensor_value_info("y", F, None)])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(ML, 1)])


def test_map_types_load_as_map_types():
    model = load_model(_zipmap_model())
    z = model.graph.outputs[0]
    assert isinstance(z.type, ir.SequenceType)
    assert z.type.elem_type == MapType(ir.DataType.INT64, ir.TensorType(ir.DataType.FLOAT))
    assert model.value_info("z").kind == "sequence"
    m = load_model(_dictvec_model())
    assert m.value_info("m").kind == "map"
    assert m.graph.inputs[0].type.key_type == ir.DataType.STRING


@pytest.mark.parametrize("build", [_zipmap_model, _dictvec_model])
def test_map_types_serialize_back_unchanged(build):
    proto = build()
    again = load_model(proto).to_proto()
    before = {v.name: v.type for v in [*proto.graph.input, *proto.graph.output]}
    after = {v.name: v.type for v in [*again.graph.input, *again.graph.output]}
    assert after == before


def test_map_type_strings_as_onnxruntime_prints_them():
    s = onnxplex.InferenceSession(_dictvec_model().SerializeToString())
    assert [i.type for i in s.get_inputs()] == ["map(string,tensor(float))"]
    assert s.get_inputs()[0].shape == []


def test_map_key_must_be_integer_or_string():
    with pytest.raises(ValueError, match="key type"):
        MapType(ir.DataType.FLOAT, ir.TensorType(ir.DataType.FLOAT))
