"""Map and sequence-of-map values (ai.onnx.ml models) through the whole stack: loading, type
strings, feeds, outputs and the executor's checks, OrtValue and IOBinding, reports, pictures,
saving; each compared with onnxruntime where it can run the same model.

The ai.onnx.ml kernels of cpu_mlas are not what is tested here: a small provider defined below
("maps_test") runs ZipMap and DictVectorizer, and misbehaves on request, so these tests
depend on the core only. A map is a dict, a sequence of maps a list of dicts.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime
import pytest
from onnx import helper as oh

import onnxplex
from onnxplex import Capability, Decline, ExecutionProvider, NodeGroup, Option
from onnxplex.framework.feeds import random_feeds
from onnxplex.framework.plugins import unregister_provider
from onnxplex.graph.maptype import MapType
from onnxplex.graph.model import load_model
from onnxplex.tools.cli import main
from onnxplex.tools.draw import GraphPicture

ML = "ai.onnx.ml"
F, I64, STR = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.STRING
D, I32 = onnx.TensorProto.DOUBLE, onnx.TensorProto.INT32


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


# --------------------------------------------------------------------------------------------
# Models, a provider for ZipMap and DictVectorizer, onnxruntime
# --------------------------------------------------------------------------------------------


def _opsets() -> list:
    return [oh.make_opsetid("", 17), oh.make_opsetid(ML, 1)]


def _passthrough(typ: onnx.TypeProto) -> onnx.ModelProto:
    """A graph whose output is its input (no node): the value goes in and out as it is, in
    onnxruntime (no standard op takes a map and returns one)."""
    g = oh.make_graph([], "g", [oh.make_value_info("m", typ)], [oh.make_value_info("m", typ)])
    return oh.make_model(g, opset_imports=_opsets())


def _zipmap(labels: list, rows: str = "N") -> onnx.ModelProto:
    key = STR if isinstance(labels[0], str) else I64
    attr = {"classlabels_strings" if key == STR else "classlabels_int64s": labels}
    node = oh.make_node("ZipMap", ["x"], ["z"], domain=ML, name="zip", **attr)
    g = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", F, [rows, len(labels)])],
                      [oh.make_value_info("z", oh.make_sequence_type_proto(
                          _map(key, _tensor(F))))])
    return oh.make_model(g, opset_imports=_opsets())


def _dictvec(key: int, value: int, vocab: list) -> onnx.ModelProto:
    attr = {"string_vocabulary" if key == STR else "int64_vocabulary": vocab}
    node = oh.make_node("DictVectorizer", ["m"], ["y"], domain=ML, name="dv", **attr)
    g = oh.make_graph([node], "g", [oh.make_value_info("m", _map(key, _tensor(value)))],
                      [oh.make_tensor_value_info("y", value, [1, len(vocab)])])
    return oh.make_model(g, opset_imports=_opsets())


class MapKernels(ExecutionProvider):
    """Runs ZipMap and DictVectorizer. ``mode``: ``python`` (maps of Python ints/strs and
    floats, as onnxruntime returns them), ``numpy`` (numpy keys and values), or a fault:
    ``array`` (ZipMap returns its input), ``arrays`` (a list of rows), ``strs`` (str values),
    ``dict`` (a map where a list is declared: ZipMap returns its first dict)."""

    name = "maps_test"
    option_specs = {"mode": Option("python", str)}
    seen: list = []

    def get_capability(self, graph):
        mine = [n.index for n in graph.nodes if n.op_type in ("ZipMap", "DictVectorizer")]
        return Capability(tuple(NodeGroup((i,)) for i in mine),
                          tuple(Decline(n.index, "not a map op") for n in graph.nodes
                                if n.index not in mine))

    def compile(self, subgraph):
        node, mode = subgraph.nodes[0], self.options["mode"]
        if node.op_type == "DictVectorizer":
            vocab = node.attr("string_vocabulary") or node.attr("int64_vocabulary")
            dtype = node.outputs[0].dtype

            def vectorize(m):
                type(self).seen.append(m)
                return np.array([[m.get(k, 0) for k in vocab]], dtype)
            return vectorize
        labels = list(node.attr("classlabels_strings") or node.attr("classlabels_int64s"))

        def zipmap(x):
            if mode == "array":
                return x
            if mode == "arrays":
                return list(x)
            if mode == "numpy":
                keys = np.array(labels)
                return [dict(zip(keys, row)) for row in x]
            rows = x.tolist()
            if mode == "strs":
                rows = [[str(v) for v in row] for row in rows]
            maps = [dict(zip(labels, row)) for row in rows]
            return maps[0] if mode == "dict" else maps
        return zipmap


@pytest.fixture
def maps_provider():
    MapKernels.seen = []
    onnxplex.register_provider(MapKernels)
    yield ["maps_test", "cpu_mlas"]
    unregister_provider("maps_test")


def _ort(model: onnx.ModelProto) -> onnxruntime.InferenceSession:
    return onnxruntime.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"])


def _plex(model: onnx.ModelProto, providers=None, **kw) -> onnxplex.InferenceSession:
    return onnxplex.InferenceSession(model.SerializeToString(), providers=providers, **kw)


def _typed(value):
    """A value with the Python type of every key and scalar in it, to compare exactly."""
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, dict):
        return {(type(k), k): (type(v), v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------------------------
# Type strings
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("typ", [
    oh.make_sequence_type_proto(_map(I64, _tensor(F))),
    oh.make_sequence_type_proto(_map(STR, _tensor(F))),
    _map(STR, _tensor(F)), _map(I64, _tensor(D)), _map(I64, _tensor(STR)),
    _map(STR, _tensor(I64)),
], ids=["seq_map_int64_float", "seq_map_string_float", "map_string_float", "map_int64_double",
        "map_int64_string", "map_string_int64"])
def test_type_strings_and_shapes_are_onnxruntimes(typ):
    model = _passthrough(typ)
    ort, plex = _ort(model), _plex(model)
    for a, b in ((ort.get_inputs(), plex.get_inputs()), (ort.get_outputs(), plex.get_outputs())):
        assert [(x.name, x.type, x.shape) for x in a] == [(x.name, x.type, x.shape) for x in b]
    assert plex.get_outputs()[0].type.startswith(("seq(map(", "map("))


# --------------------------------------------------------------------------------------------
# Feeds
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key, feed", [
    (STR, {"b": 0.1, "a": 2, "c": np.float64(1e40), "d": np.float32(0.5), "e": True,
           "f": np.array(1.25)}),
    (I64, {3: 0.1, 1: 2, -5: True, np.int64(7): np.float32(0.5), np.int32(-9): 1e40,
           2**40: np.array(3.0)}),
])
def test_map_feed_converted_as_onnxruntime_does(key, feed):
    """Keys ascending, values rounded to float32 (beyond its range: inf), numpy scalars and
    0-d arrays read as numbers: the map comes back exactly as onnxruntime returns it."""
    model = _passthrough(_map(key, _tensor(F)))
    want = _ort(model).run(None, {"m": feed})[0]
    got = _plex(model).run(None, {"m": feed})[0]
    assert _typed(got) == _typed(want)
    assert list(got) == sorted(got)   # (dicts compare without order)
    assert got is not feed


@pytest.mark.parametrize("key, feed, match", [
    (STR, {1: 1.0}, r"Unexpected key type  <class 'int'>, it cannot be linked to C type "
                    r"std::string: map\(string,tensor\(float\)\) needs str keys, got the int key "
                    r"1 for input 'm'"),
    (I64, {"a": 1.0}, r"Unexpected key type  <class 'str'>, it cannot be linked to C type "
                      r"int64_t: .* needs int keys of int64, the str key 'a' is not an int"),
    (I64, {1.5: 1.0}, r"the float key 1.5 is not an int"),
    (I64, {2**70: 1.0}, r"key 1180591620717411303424 is out of range"),
    (I64, {1: "x"}, r"needs number values, the value of key 1 is str"),
    (STR, {"a": None}, r"the value of key 'a' is NoneType"),
    (STR, {"a": np.array([1.0])}, r"the value of key 'a' is ndarray"),
    (STR, {"a": [1.0]}, r"the value of key 'a' is list"),
    (STR, [{"a": 1.0}], r"expected a dict for map\(string,tensor\(float\)\), got list for "
                        r"input 'm'"),
    (STR, np.ones(2, np.float32), r"expected a dict .* got ndarray"),
])
def test_wrong_map_feeds_fail_in_both_naming_the_input(key, feed, match):
    model = _passthrough(_map(key, _tensor(F)))
    with pytest.raises(Exception):   # noqa: B017 - onnxruntime: InvalidArgument or RuntimeError
        _ort(model).run(None, {"m": feed})
    with pytest.raises(onnxplex.InvalidFeedError, match=match):
        _plex(model).run(None, {"m": feed})


@pytest.mark.parametrize("typ, feed, want", [
    (_map(I64, _tensor(D)), {2: 1, 1: 0.1}, {1: 0.1, 2: 1.0}),
    (_map(STR, _tensor(I64)), {"b": np.int32(3), "a": True}, {"a": 1, "b": 3}),
    (_map(I64, _tensor(STR)), {5: "x", np.int8(-1): np.str_("y")}, {-1: "y", 5: "x"}),
])
def test_map_feeds_of_types_onnxruntimes_python_api_cannot_make(typ, feed, want):
    """onnxruntime's Python API makes map(int64|string, float) values only (any other map
    input is a type error there); onnxplex converts to the declared types."""
    with pytest.raises(Exception):   # noqa: B017 - onnxruntime: InvalidArgument
        _ort(_passthrough(typ)).run(None, {"m": feed})
    got = _plex(_passthrough(typ)).run(None, {"m": feed})[0]
    assert _typed(got) == _typed(want)


@pytest.mark.parametrize("typ, feed, match", [
    (_map(I32, _tensor(F)), {2**31: 1.0}, "key 2147483648 is out of range"),
    (_map(STR, _tensor(I64)), {"a": 1.5}, "needs int values, the value of key 'a' is float"),
    (_map(STR, _tensor(I32)), {"a": 2**31}, "the value 2147483648 of key 'a' is out of the range"),
    (_map(I64, _tensor(STR)), {1: 1}, "needs str values, the value of key 1 is int"),
])
def test_map_feed_checked_against_declared_key_and_value_types(typ, feed, match):
    with pytest.raises(onnxplex.InvalidFeedError, match=match):
        _plex(_passthrough(typ)).run(None, {"m": feed})


def test_empty_map_feed_is_an_empty_map():
    """onnxruntime refuses an empty dict (it reads the key type from the first key); onnxplex
    knows the declared type."""
    model = _passthrough(_map(STR, _tensor(F)))
    with pytest.raises(RuntimeError, match="empty"):
        _ort(model).run(None, {"m": {}})
    assert _plex(model).run(None, {"m": {}})[0] == {}


def test_sequence_of_maps_feed():
    """onnxruntime takes a tuple of dicts (a list fails there); onnxplex both. Each dict is
    converted as a map feed is; the result is a list of new dicts."""
    model = _passthrough(oh.make_sequence_type_proto(_map(I64, _tensor(F))))
    feed = ({3: 0.1, 1: 2}, {np.int64(0): np.float32(0.5)})
    # (onnxruntime 1.32 garbles the maps after the first of a tuple: one map a run)
    want = [_ort(model).run(None, {"m": (m,)})[0][0] for m in feed]
    sess = _plex(model)
    for given in (feed, list(feed)):
        got = sess.run(None, {"m": given})[0]
        assert type(got) is list and _typed(got) == _typed(want)
        assert all(a is not b for a, b in zip(got, given))
    assert sess.run(None, {"m": []})[0] == []
    with pytest.raises(onnxplex.InvalidFeedError,
                       match=r"map\(int64,tensor\(float\)\) needs int keys .* for input "
                             r"'m'\[1\]"):
        sess.run(None, {"m": [{1: 1.0}, {"a": 1.0}]})
    with pytest.raises(onnxplex.InvalidFeedError,
                       match=r"input 'm': expected a list for "
                             r"seq\(map\(int64,tensor\(float\)\)\), got dict"):
        sess.run(None, {"m": {1: 1.0}})


def test_sequence_of_tensors_feed_still_works_and_is_checked():
    st = oh.make_sequence_type_proto(_tensor(F))
    node = oh.make_node("SequenceLength", ["s"], ["n"])
    g = oh.make_graph([node], "g", [oh.make_value_info("s", st)],
                      [oh.make_tensor_value_info("n", I64, [])])
    model = oh.make_model(g, opset_imports=_opsets())
    ort, plex = _ort(model), _plex(model)
    for good in ([np.ones(2, np.float32), np.ones((2, 2), np.float32)], []):
        assert plex.run(None, {"s": good})[0] == ort.run(None, {"s": good})[0] == len(good)
    for bad, match in (([np.ones(2)],
                        r"expected: \(tensor\(float\)\): input 's'\[0\] is a numpy float64"),
                       ([[1.0, 2.0]], r"input 's'\[0\]: expected a numpy array"),
                       ([{"a": 1.0}], r"input 's'\[0\]: expected a numpy array"),
                       (np.ones((2, 2), np.float32), r"input 's': expected a list")):
        with pytest.raises(Exception):   # noqa: B017 - onnxruntime's own kinds of error
            ort.run(None, {"s": bad})
        with pytest.raises(onnxplex.InvalidFeedError, match=match):
            plex.run(None, {"s": bad})


def test_dict_fed_to_a_tensor_input_is_a_clear_error():
    with pytest.raises(onnxplex.InvalidFeedError, match=r"input 'x': expected a numpy array for "
                       r"tensor\(float\), got dict"):
        _plex(_zipmap([0, 1, 2])).run(None, {"x": {"a": 1.0}})


def test_kernels_get_the_converted_map(maps_provider):
    model = _dictvec(STR, F, ["a", "b", "c"])
    feed = {"c": np.float32(2.5), "a": 1}
    got = _plex(model, maps_provider).run(None, {"m": feed})[0]
    np.testing.assert_array_equal(got, _ort(model).run(None, {"m": feed})[0])
    seen = MapKernels.seen[-1]
    assert seen is not feed and list(seen) == ["a", "c"]
    assert _typed(seen) == {(str, "a"): (float, 1.0), (str, "c"): (float, 2.5)}


@pytest.mark.parametrize("value", [F, D])
def test_cpu_mlas_dictvectorizer_takes_plain_dicts_as_they_are(value):
    """A map(string, float|double) read only by cpu_mlas's DictVectorizer is fed unconverted
    when its keys are str and its values float: the same row as the converted map's (values
    beyond float32's precision and range, keys outside the vocabulary, the empty dict) and
    onnxruntime's."""
    model = _dictvec(STR, value, ["a", "b", "c", "a"])
    sess = _plex(model)
    assert sess._raw_maps == {"m"}
    converted = onnxplex.InferenceSession(model.SerializeToString())
    converted._raw_maps = frozenset()
    feeds = [{"c": 0.1 + 1e-12, "z": 3.0, "a": 1e39}, {"b": -2.5, "a": 1 / 3}, {}]
    for feed in feeds:
        got = sess.run(None, {"m": feed})[0]
        np.testing.assert_array_equal(got, converted.run(None, {"m": feed})[0])
        if value == F and feed:   # (onnxruntime's Python binding feeds only map(str, float),
            # and refuses an empty one)
            np.testing.assert_array_equal(got, _ort(model).run(None, {"m": feed})[0])
    # anything else still goes through the conversion and its checks
    mixed = {"a": 2, "b": np.float32(1.5)}
    np.testing.assert_array_equal(sess.run(None, {"m": mixed})[0],
                                  converted.run(None, {"m": mixed})[0])
    with pytest.raises(onnxplex.InvalidFeedError, match="input 'm'"):
        sess.run(None, {"m": {"a": "x"}})
    with pytest.raises(onnxplex.InvalidFeedError, match="input 'm'"):
        sess.run(None, {"m": {1: 1.0}})


def test_maps_read_by_other_kernels_or_returned_are_converted(maps_provider):
    assert _plex(_dictvec(STR, F, ["a"]), maps_provider)._raw_maps == frozenset()
    assert _plex(_dictvec(I64, F, [1]))._raw_maps == frozenset()   # (int keys: range checks)
    typ = _map(STR, _tensor(F))
    assert _plex(_passthrough(typ))._raw_maps == frozenset()


# --------------------------------------------------------------------------------------------
# Outputs and the executor's checks
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("labels", [[0, 1, 2], ["a", "b", "c"], [5, -3, 10]])
@pytest.mark.parametrize("mode", ["python", "numpy"])
def test_zipmap_output_is_onnxruntimes_list_of_dicts(maps_provider, labels, mode):
    """The same Python types as onnxruntime's (int or str keys, float values) whatever the
    kernel built its dicts from (numpy scalars are converted)."""
    model = _zipmap(labels)
    x = np.array([[0.1, 0.2, 0.7], [1 / 3, 2e-8, -1.5]], np.float32)
    want = _ort(model).run(None, {"x": x})[0]
    sess = _plex(model, [("maps_test", {"mode": mode}), "cpu_mlas"])
    got = sess.run(None, {"x": x})[0]
    assert type(got) is list and all(type(m) is dict for m in got)
    assert _typed(got) == _typed(want)
    assert sess.run(None, {"x": x[:0]})[0] == _ort(model).run(None, {"x": x[:0]})[0] == []


@pytest.mark.parametrize("mode, match", [
    ("array", r"node 'zip' \(ZipMap\) on provider maps_test: output 0 is ndarray, expected a "
              r"list \(sequence\)"),
    ("arrays", r"output 0 element 0 is ndarray, expected a dict \(map\(int64,tensor\(float\)\)\)"),
    ("dict", r"output 0 is dict, expected a list"),
    ("strs", r"output 0 map\(int64,tensor\(float\)\) needs number values, the value of key 0 "
             r"is str"),
])
def test_wrong_kind_of_map_output_names_the_node(maps_provider, mode, match):
    sess = _plex(_zipmap([0, 1, 2]), [("maps_test", {"mode": mode}), "cpu_mlas"])
    with pytest.raises(onnxplex.KernelExecutionError, match=match):
        sess.run(None, {"x": np.ones((2, 3), np.float32)})


def test_sequence_of_tensors_output_is_checked():
    """A kernel's sequence of tensors: a list of arrays of the declared element type."""

    class Seq(ExecutionProvider):
        name = "seq_test"

        def get_capability(self, graph):
            return Capability(tuple(NodeGroup((n.index,)) for n in graph.nodes))

        def compile(self, subgraph):
            return lambda x, y: [x, y.astype(np.float64)]

    node = oh.make_node("SequenceConstruct", ["x", "x"], ["s"], name="seq")
    g = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", F, [2])],
                      [oh.make_value_info("s", oh.make_sequence_type_proto(_tensor(F)))])
    model = oh.make_model(g, opset_imports=_opsets())
    x = np.ones(2, np.float32)
    assert [a.dtype for a in _plex(model).run(None, {"x": x})[0]] == [np.float32] * 2
    onnxplex.register_provider(Seq)
    try:
        with pytest.raises(onnxplex.KernelExecutionError,
                           match=r"node 'seq' .* output 0 element 1 is float64, expected an "
                                 r"array of tensor\(float\)"):
            _plex(model, ["seq_test"]).run(None, {"x": x})
    finally:
        unregister_provider("seq_test")


def test_ort_values_of_a_sequence_of_maps(maps_provider):
    """run_with_ort_values returns what onnxruntime's returns for ZipMap (not a tensor, not a
    tensor sequence, typed), and such a value can be fed back."""
    x = np.ones((2, 3), np.float32)
    want = _ort(_zipmap([0, 1, 2])).run_with_ort_values(
        None, {"x": onnxruntime.OrtValue.ortvalue_from_numpy(x)})[0]
    sess = _plex(_zipmap([0, 1, 2]), maps_provider)
    (z,) = sess.run_with_ort_values(None, {"x": onnxplex.OrtValue.ortvalue_from_numpy(x)})
    for ov in (want, z):
        assert ov.data_type() == "seq(map(int64,tensor(float)))"
        assert (ov.is_tensor(), ov.is_tensor_sequence(), ov.has_value()) == (False, False, True)
    with pytest.raises(onnxplex.InvalidArgumentError, match="not a tensor"):
        z.numpy()
    back = _plex(_passthrough(oh.make_sequence_type_proto(_map(I64, _tensor(F)))))
    (again,) = back.run_with_ort_values(None, {"m": z})
    assert again._value == [{0: 1.0, 1: 1.0, 2: 1.0}] * 2
    binding = back.io_binding()
    binding.bind_ortvalue_input("m", z)
    binding.bind_output("m")
    back.run_with_iobinding(binding)
    assert binding.copy_outputs_to_cpu() == [[{0: 1.0, 1: 1.0, 2: 1.0}] * 2]


def test_io_binding_with_maps(maps_provider):
    """As in onnxruntime: a map output bound by name comes back; a map input cannot be bound
    to an array, nor a map output to memory."""
    sess = _plex(_zipmap([0, 1, 2]), maps_provider)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", np.ones((1, 3), np.float32))
    binding.bind_output("z")
    sess.run_with_iobinding(binding)
    assert binding.get_outputs()[0].data_type() == "seq(map(int64,tensor(float)))"
    copied = binding.copy_outputs_to_cpu()[0]
    assert copied == [{0: 1.0, 1: 1.0, 2: 1.0}]
    assert copied[0] is not binding.get_outputs()[0]._value[0]
    with pytest.raises(onnxplex.InvalidArgumentError, match="the output is seq"):
        binding.bind_ortvalue_output("z", onnxplex.OrtValue.ortvalue_from_numpy(np.ones(3)))
    dv = _plex(_dictvec(STR, F, ["a"]), maps_provider).io_binding()
    with pytest.raises(onnxplex.InvalidArgumentError, match=r"the input is map\(string,tensor"
                                                            r"\(float\)\); only tensors"):
        dv.bind_cpu_input("m", {"a": 1.0})
    ort_binding = _ort(_dictvec(STR, F, ["a"])).io_binding()
    with pytest.raises(RuntimeError, match="Only binding Tensors"):
        ort_binding.bind_cpu_input("m", {"a": 1.0})


# --------------------------------------------------------------------------------------------
# Reports, pictures, random feeds, saving
# --------------------------------------------------------------------------------------------


def test_node_types_and_partition_errors_show_map_types(null_provider):
    model = load_model(_zipmap([0, 1, 2]))
    assert model.node_views[0].describe_types() == \
        "ai.onnx.ml::ZipMap(float[N,3]) -> seq(map(int64,tensor(float)))"
    so = onnxplex.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with pytest.raises(onnxplex.PartitionError, match=r"'zip': ai.onnx.ml::ZipMap\(float\[N,3\]\)"
                                                      r" -> seq\(map\(int64,tensor\(float\)\)\)"):
        _plex(_zipmap([0, 1, 2]), ["null"], sess_options=so)
    dv = load_model(_dictvec(STR, F, ["a"]))
    assert dv.node_views[0].describe_types() == \
        "ai.onnx.ml::DictVectorizer(map(string,tensor(float))) -> float[1,1]"


def test_placement_report_and_pictures_of_map_models(maps_provider, tmp_path, capsys):
    sess = _plex(_zipmap(["a", "b"]), maps_provider)
    report = sess.get_provider_assignment().report()
    assert "zip" in report and "ZipMap" in report and "maps_test" in report
    root = ET.fromstring(GraphPicture.from_session(sess).to_svg())
    svg = "{http://www.w3.org/2000/svg}"
    titles = [t.text for t in root.iter(f"{svg}title")]
    assert "graph output z\nseq(map(string,tensor(float)))" in titles
    assert any(t.startswith("ZipMap  zip\nai.onnx.ml::ZipMap(float[N,2]) -> "
                            "seq(map(string,tensor(float)))") for t in titles)
    assert "z: seq(map(string,tensor(float)))" in titles    # the edge into the output
    path = tmp_path / "dv.onnx"
    onnx.save(_dictvec(STR, F, ["a", "b"]), path)
    assert main(["partition", str(path), "--format", "dot"]) == 0
    dot = capsys.readouterr().out
    assert "map(string,tensor(float))" in dot and "m: map(string,tensor(float))" in dot


def test_random_feeds_for_map_inputs_use_the_vocabulary(maps_provider, tmp_path, capsys):
    sess = _plex(_dictvec(STR, F, ["x", "y", "x"]), maps_provider)
    feeds = random_feeds(sess, seed=1)
    assert list(feeds["m"]) == ["x", "y"] and all(type(v) is float for v in feeds["m"].values())
    assert sess.run(None, feeds)[0].shape == (1, 3)
    seq = _plex(_passthrough(oh.make_sequence_type_proto(_map(I64, _tensor(D)))))
    (maps,) = random_feeds(seq).values()
    assert len(maps) == 1 and list(maps[0]) == [0, 1, 2]
    path = tmp_path / "zip.onnx"
    onnx.save(_zipmap([0, 1, 2]), path)
    assert main(["run", str(path), "--dim", "4", "--providers", "maps_test,cpu_mlas"]) == 0
    assert "output z: seq(map(int64,tensor(float))) with 4 element(s)" in capsys.readouterr().out


def test_saved_optimized_model_keeps_map_types(maps_provider, tmp_path):
    """DictVectorizer -> Relu -> ZipMap saved optimized: onnxruntime and onnxplex load the file
    with the same types and run it to the same maps."""
    nodes = [oh.make_node("DictVectorizer", ["m"], ["v"], domain=ML, string_vocabulary=["a", "b"]),
             oh.make_node("Relu", ["v"], ["r"]),
             oh.make_node("ZipMap", ["r"], ["z"], domain=ML, classlabels_int64s=[7, 3])]
    g = oh.make_graph(nodes, "g", [oh.make_value_info("m", _map(STR, _tensor(F)))],
                      [oh.make_value_info("z", oh.make_sequence_type_proto(_map(I64, _tensor(F))))])
    model = oh.make_model(g, opset_imports=_opsets())
    so = onnxplex.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    feed = {"m": {"a": -1.0, "b": 2.5}}
    first = _plex(model, maps_provider, sess_options=so).run(None, feed)[0]
    saved = onnx.load(so.optimized_model_filepath)
    assert [i.type for i in saved.graph.input] == [i.type for i in model.graph.input]
    assert [o.type for o in saved.graph.output] == [o.type for o in model.graph.output]
    ort = onnxruntime.InferenceSession(so.optimized_model_filepath,
                                       providers=["CPUExecutionProvider"])
    again = onnxplex.InferenceSession(so.optimized_model_filepath, providers=maps_provider)
    for a, b in ((ort.get_inputs(), again.get_inputs()), (ort.get_outputs(), again.get_outputs())):
        assert [(x.name, x.type) for x in a] == [(x.name, x.type) for x in b]
    assert _typed(ort.run(None, feed)[0]) == _typed(again.run(None, feed)[0]) == \
        _typed(first) == _typed([{3: 2.5, 7: 0.0}])


def test_serde_wrappers_take_keyword_arguments():
    """onnxscript calls ``serialize_type_into(proto, from_=...)``: the wrapped functions keep
    the originals' keyword arguments (for map and for other types)."""
    from onnxplex.graph import maptype as _maptype

    _maptype.install()
    t = onnx.TypeProto()
    ir.serde.serialize_type_into(t, from_=MapType(ir.DataType.INT64,
                                                  ir.TensorType(ir.DataType.FLOAT)))
    assert t.map_type.key_type == I64 and t.map_type.value_type.tensor_type.elem_type == F
    t = onnx.TypeProto()
    ir.serde.serialize_type_into(t, from_=ir.TensorType(ir.DataType.FLOAT))
    assert t.tensor_type.elem_type == F
