"""Loading and validating models: paths, bytes, protos, external data, bad input."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from graphs import chain, small_cnn
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex import ExternalDataError, InvalidModelError, UnsupportedModelError


def test_load_from_path_bytes_and_proto(tmp_path):
    proto = small_cnn()
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    for src in (str(path), path, proto.SerializeToString(), proto):
        model = onnxplex.load_model(src)
        assert [n.op_type for n in model.nodes] == ["Conv", "Relu", "MaxPool", "Flatten",
                                                   "Gemm", "Softmax"]
    model = onnxplex.load_model(path)
    assert model.base_dir == str(tmp_path)
    # shape inference keeps the symbolic batch dim
    assert model.value_info("c").shape == ("N", 8, 16, 16)
    assert model.value_info("w").const.shape == (8, 3, 3, 3)
    assert model.producer_index["r"] == 1 and model.consumer_indices["r"] == [2]
    # serializes back to an equivalent proto
    again = model.to_proto()
    onnx.checker.check_model(again)
    assert [n.op_type for n in again.graph.node] == [n.op_type for n in proto.graph.node]


def test_nested_subgraphs_are_kept():
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = onnxplex.load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    view = model.node_views[0]
    assert view.attrs["then_branch"].name == "then"
    # the outer-scope value read by the bodies counts as a consumer edge
    assert model.consumer_indices["x"] == [0]
    assert onnx.helper.get_attribute_value(model.to_proto().graph.node[0].attribute[0]).name


@pytest.mark.parametrize("data, message", [
    (b"", "empty"),
    (b"\x08\x07garbage\xff\xff\xff\xff\xff", "not a valid ONNX model"),
    (b"this is not a model at all, just some text", "not a valid ONNX model|holds no graph"),
])
def test_garbage_bytes(data, message):
    with pytest.raises(InvalidModelError, match=message):
        onnxplex.InferenceSession(data)


def test_truncated_model(tmp_path):
    data = small_cnn().SerializeToString()
    with pytest.raises(InvalidModelError, match="truncated|not a valid"):
        onnxplex.InferenceSession(data[: len(data) // 2])
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:-7])
    with pytest.raises(InvalidModelError, match="cut.onnx"):
        onnxplex.InferenceSession(str(path))


def test_missing_file():
    with pytest.raises(InvalidModelError, match="not found"):
        onnxplex.InferenceSession("/nonexistent/model.onnx")


def test_future_versions():
    m = chain(["Relu"])
    m.ir_version = onnx.IR_VERSION + 1
    with pytest.raises(UnsupportedModelError, match="IR version"):
        onnxplex.load_model(m)
    m = chain(["Relu"], opset=onnx.defs.onnx_opset_version() + 1)
    with pytest.raises(UnsupportedModelError, match="opset"):
        onnxplex.load_model(m)


def test_structural_errors():
    m = chain(["Relu", "Relu"])
    m.graph.node[1].output[0] = "t0"          # t0 defined twice
    with pytest.raises(InvalidModelError, match="defined twice"):
        onnxplex.load_model(m)
    m = chain(["Relu"])
    m.graph.node[0].input[0] = "nowhere"
    with pytest.raises(InvalidModelError, match="reads 'nowhere'"):
        onnxplex.load_model(m)
    m = chain(["Relu"])
    m.graph.output[0].name = "ghost"
    with pytest.raises(InvalidModelError, match="graph output 'ghost'"):
        onnxplex.load_model(m)
    m = chain(["Relu", "Relu"])
    m.graph.node[0].input[0] = "y"             # A reads C's... B's output: a cycle
    with pytest.raises(InvalidModelError, match="cycle"):
        onnxplex.load_model(m)


def _external_model(tmp_path, location: str, offset: int = 0, length: int | None = None):
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = numpy_helper.from_array(w, "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)),
                 ("length", str(length if length is not None else w.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    node = helper.make_node("Add", ["x", "w"], ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          initializer=[t])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return path, w


def test_external_data_inside_folder_loads(tmp_path):
    path, w = _external_model(tmp_path, "weights.bin")
    (path.parent / "weights.bin").write_bytes(w.tobytes())
    model = onnxplex.load_model(path)
    np.testing.assert_array_equal(model.value_info("w").const, w)


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../secret.bin",
                                      "link.bin"])
def test_external_data_escaping_the_folder_is_refused(tmp_path, location):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\0" * 24)
    path, _ = _external_model(tmp_path, location)
    os.symlink(secret, path.parent / "link.bin")
    with pytest.raises(ExternalDataError, match="outside the model folder|absolute path") as e:
        onnxplex.InferenceSession(str(path))
    assert "'w'" in str(e.value)


def test_external_data_out_of_range(tmp_path):
    path, w = _external_model(tmp_path, "weights.bin", offset=16)
    (path.parent / "weights.bin").write_bytes(w.tobytes())
    with pytest.raises(ExternalDataError, match="beyond the end"):
        onnxplex.load_model(path)
    path, w = _external_model(tmp_path, "missing.bin")
    with pytest.raises(ExternalDataError, match="not found"):
        onnxplex.load_model(path)


def test_external_data_from_bytes_is_refused(tmp_path):
    path, _ = _external_model(tmp_path, "weights.bin")
    with pytest.raises(ExternalDataError, match="not loaded from a path"):
        onnxplex.load_model(path.read_bytes())


@pytest.mark.parametrize("copied", [False, True])
@pytest.mark.parametrize("weight_is_input", [False, True])
def test_shape_inference_without_copying_large_weights(weight_is_input, copied, monkeypatch):
    # a weight above the size shape inference is shown (declared only), one below it (a shape);
    # ``copied``: the weights held enough bytes for inference to get a copy without them
    from onnx import numpy_helper

    from onnxplex.graph import inference
    from onnxplex.graph.inference import _INFER_KEEP_ELEMENTS
    from onnxplex.graph.model import load_model

    if copied:
        monkeypatch.setattr(inference, "_INFER_COPY_MIN_BYTES", 0)

    w = np.arange(64 * (_INFER_KEEP_ELEMENTS // 32), dtype=np.float32).reshape(64, -1)
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array([-1, 2, w.shape[1] // 2], np.int64), "shape")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])]
    if weight_is_input:  # IR 3 style: the initializer is also a graph input
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)))
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]),
         helper.make_node("Reshape", ["y", "shape"], ["z"])], "g", inputs,
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], inits)
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    before = proto.SerializeToString()
    model = load_model(proto)
    assert proto.SerializeToString() == before  # the caller's proto is untouched
    assert model.value_info("y").shape == ("n", w.shape[1])
    assert model.value_info("z").shape[1:] == (2, w.shape[1] // 2)  # the shape was seen
    # an initializer that is also an input (IR >= 4) is overridable, not a constant
    assert model.value_info("w").is_const != weight_is_input
    if not weight_is_input:
        np.testing.assert_array_equal(model.value_info("w").const, w)
    assert [v.name for v in model.graph.inputs] == [i.name for i in inputs]
    sess = onnxplex.InferenceSession(proto)
    x = np.ones((3, 64), np.float32)
    feeds = {"x": x, "w": w} if weight_is_input else {"x": x}
    np.testing.assert_allclose(sess.run(None, feeds)[0], (x @ w).reshape(-1, 2, w.shape[1] // 2))


@pytest.mark.parametrize("as_bytes", [False, True])
def test_shape_inference_of_a_model_in_memory_gets_it_without_its_weights(as_bytes, monkeypatch):
    """A model given as bytes or a ModelProto with a few hundred KB of weights: onnx's
    inference (which serializes what it gets and whose result is parsed back) sees the graph
    with its weights declared only, and the session still has them."""
    import onnx.shape_inference
    from onnx import numpy_helper

    seen: list[int] = []
    real = onnx.shape_inference.infer_shapes

    def spy(model, *args, **kwargs):
        seen.append(len(model) if isinstance(model, bytes) else model.ByteSize())
        return real(model, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", spy)
    w = np.arange(256 * 256, dtype=np.float32).reshape(256, 256) / 1e4   # 256 KB
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 256])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = onnxplex.InferenceSession(proto.SerializeToString() if as_bytes else proto)
    assert seen and max(seen) < 16 << 10   # (the weight alone is 256 KB)
    assert sess.get_outputs()[0].shape == ["n", 256]
    x = np.ones((2, 256), np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(x @ w, 0), rtol=1e-5)


def test_value_types_read_as_onnx_ir_reads_them():
    """load's own reading of ``value_info`` (_graph._deserialize) gives each value the type
    and shape onnx-ir's deserializer gives it: static, symbolic and unknown dims, no shape,
    a sequence type and a dim with a denotation (these two through onnx-ir); an initializer
    listed there keeps its tensor's type and shape; a graph output its declared type."""
    from onnx_ir.serde import deserialize_model

    from onnxplex.graph.model import _deserialize

    f = TensorProto.FLOAT
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Cast", ["a"], ["b"], to=7),
             helper.make_node("Neg", ["a"], ["c"]), helper.make_node("Identity", ["c"], ["d"]),
             helper.make_node("SequenceConstruct", ["a", "c"], ["s"]),
             helper.make_node("SequenceAt", ["s", "i"], ["e"]),
             helper.make_node("Add", ["e", "w"], ["y"])]
    denoted = helper.make_tensor_value_info("d", f, ["N", 3])
    denoted.type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    infos = [helper.make_tensor_value_info("a", f, ["N", 3]),
             helper.make_tensor_value_info("b", TensorProto.INT64, [None, 3]),
             helper.make_tensor_value_info("c", f, None), denoted,
             helper.make_tensor_sequence_value_info("s", f, ["N", 3]),
             helper.make_tensor_value_info("w", f, [7]),   # contradicts its tensor
             helper.make_tensor_value_info("y", f, [5, 5])]   # the output says ["N", 3]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, ["N", 3])],
                          [helper.make_tensor_value_info("y", f, ["N", 3])],
                          [numpy_helper.from_array(np.ones(3, np.float32), "w"),
                           numpy_helper.from_array(np.array(0, np.int64), "i")],
                          value_info=infos)
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    ours, theirs = onnx.ModelProto(), onnx.ModelProto()
    ours.CopyFrom(proto)
    theirs.CopyFrom(proto)

    def described(model):
        values = {v.name: v for n in model.graph for v in n.outputs}
        values.update(model.graph.initializers)
        return {name: (repr(v.type), None if v.shape is None else list(v.shape),
                       None if v.shape is None
                       else [v.shape.get_denotation(i) for i in range(len(v.shape))])
                for name, v in values.items()}

    mine, reference = described(_deserialize(ours)), described(deserialize_model(theirs))
    assert mine.pop("w") == ("Tensor(FLOAT)", [3], [None])
    assert reference.pop("w")[1] == [7]
    assert mine == reference
    assert mine["d"][2] == ["DATA_BATCH", None] and mine["s"][0].startswith("Sequence")
    assert mine["y"][1] == ["N", 3] and mine["b"][1] == [None, 3]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64, np.int32,
                                   np.int16, np.int8, np.uint8, np.bool_])
def test_stored_constants_read_as_onnx_reads_them(dtype):
    """Initializers held in the proto as raw bytes (read without onnx-ir's general reader),
    in typed fields, empty, or scalar: the arrays kernels see are numpy_helper's, read-only."""
    from onnxplex.graph.model import load_proto

    rng = np.random.default_rng(0)
    arrays = {"raw": (rng.standard_normal((3, 4)) * 50).astype(dtype),
              "scalar": np.array(7, dtype), "empty": np.zeros((0, 2), dtype)}
    tensors = [numpy_helper.from_array(a, name) for name, a in arrays.items()]
    typed = helper.make_tensor("typed", tensors[0].data_type, [2, 2],
                               arrays["raw"].reshape(-1)[:4].tolist())
    tensors.append(typed)
    g = helper.make_graph(
        [helper.make_node("Identity", [t.name], [t.name + "_y"]) for t in tensors], "g", [],
        [helper.make_tensor_value_info(t.name + "_y", t.data_type, None) for t in tensors],
        initializer=tensors)
    model = load_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), None)
    views = {n.inputs[0].name: n.inputs[0].const for n in model.node_views}
    for t in tensors:
        want = numpy_helper.to_array(t)
        got = views[t.name]
        assert got.dtype == want.dtype and got.shape == want.shape, t.name
        np.testing.assert_array_equal(got, want)
        assert not got.flags.writeable


def _relu_model(**attrs):
    node = helper.make_node("LeakyRelu", ["x"], ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_attributes_an_op_does_not_declare_are_refused_like_onnxruntime():
    # a misspelt attribute, one of the wrong type, and the same inside an If branch
    with pytest.raises(InvalidModelError, match=r"\(LeakyRelu, opset 17\) has attribute 'aplha', "
                                                r"which LeakyRelu does not have \(it has alpha\)"):
        onnxplex.InferenceSession(_relu_model(aplha=0.2).SerializeToString())
    with pytest.raises(InvalidModelError,
                       match="has attribute 'alpha' of type INT; LeakyRelu takes FLOAT"):
        onnxplex.InferenceSession(_relu_model(alpha=3).SerializeToString())
    branch = helper.make_graph([helper.make_node("Relu", ["x"], ["z"], alpha=1.0)], "b", [],
                               [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(InvalidModelError, match=r"If ''\.else_branch.*'alpha', which Relu"):
        onnxplex.InferenceSession(m.SerializeToString())
    # names starting with "__" are free (onnx's checker and onnxruntime allow them)
    sess = onnxplex.InferenceSession(_relu_model(alpha=0.5, __note="kept").SerializeToString())
    np.testing.assert_allclose(sess.run(None, {"x": np.array([-2, 2], np.float32)})[0], [-1, 2])


def test_function_body_attributes_are_checked_against_its_opsets():
    body = [helper.make_node("LeakyRelu", ["a"], ["b"], slope=0.1)]
    f = helper.make_function("local", "F", ["a"], ["b"], body,
                             [helper.make_opsetid("", 17)])
    g = helper.make_graph([helper.make_node("F", ["x"], ["y"], domain="local")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, functions=[f], opset_imports=[helper.make_opsetid("", 17),
                                                           helper.make_opsetid("local", 1)])
    with pytest.raises(InvalidModelError, match="function 'F'.*'slope', which LeakyRelu"):
        onnxplex.InferenceSession(m.SerializeToString())


def _one_node(node, inputs, output_types=(TensorProto.FLOAT,), opset=17):
    g = helper.make_graph(
        [node], "g", inputs,
        [helper.make_tensor_value_info(o, t, None) for o, t in zip(node.output, output_types)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


@pytest.mark.parametrize("node,inputs,message", [
    (helper.make_node("Relu", ["x", "x"], ["y"]), None,
     r"\(Relu, opset 17\) has 2 input\(s\); it takes 1$"),
    (helper.make_node("Conv", ["x"], ["y"]), None, r"has 1 input\(s\); it takes 2 to 3$"),
    (helper.make_node("Concat", [], ["y"], axis=0), [], r"has 0 input\(s\); it takes 1 or more"),
    (helper.make_node("Cast", ["x"], ["y"]), None, r"lacks its required attribute\(s\) to$"),
    (helper.make_node("Add", ["x", "i"], ["y"]), "int",
     r"inputs are of types its op does not take.*inconsistent type tensor\(int64\)"),
    (helper.make_node("Relu", ["s"], ["y"]), "str",
     r"inputs are of types its op does not take.*unsupported type: tensor\(string\)"),
])
def test_nodes_that_break_their_schema_are_refused_like_onnxruntime(node, inputs, message):
    """What onnxruntime refuses when it verifies a node against its schema: input and output
    counts, required attributes, input types (before, such nodes failed in their kernels)."""
    vi = helper.make_tensor_value_info
    given = {None: [vi("x", TensorProto.FLOAT, [1, 1, 3, 3])],
             "int": [vi("x", TensorProto.FLOAT, [2]), vi("i", TensorProto.INT64, [2])],
             "str": [vi("s", TensorProto.STRING, [2])]}
    model = _one_node(node, given[inputs] if not isinstance(inputs, list) else inputs)
    with pytest.raises(InvalidModelError, match=message):
        onnxplex.InferenceSession(model)
    # the same node with its schema kept runs
    ok = _one_node(helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT),
                   given[None])
    x = np.ones((1, 1, 3, 3), np.float32)
    np.testing.assert_array_equal(onnxplex.InferenceSession(ok).run(None, {"x": x})[0], x)


def test_an_output_too_many_is_refused():
    node = helper.make_node("Relu", ["x"], ["y", "z"])
    model = _one_node(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                      (TensorProto.FLOAT, TensorProto.FLOAT))
    with pytest.raises(InvalidModelError,
                       match=r"\(Relu, opset 17\) has 2 output\(s\); it takes 1"):
        onnxplex.InferenceSession(model)


def test_long_numeric_attributes_read_as_onnx_ir_reads_them():
    """Lists of 32 or more ints/floats go through numpy (onnxplex.graph.fast_attrs); the values,
    their Python types and the saved model are those of onnx-ir's own reader, and
    NodeView.attr_array hands kernels the array."""
    import math

    import onnx_ir as ir
    from onnx import helper

    from onnxplex.graph.model import load_model

    floats = [0.1 * i for i in range(40)] + [float("nan"), -0.0, float("inf"), 1e-45, 3.4e38]
    ints = [-(2 ** 63), 2 ** 63 - 1, *range(-20, 20)]
    node = helper.make_node("Foo", ["x"], ["y"], domain="custom", f=floats, i=ints,
                            short=[1, 2], s=[str(k) for k in range(40)])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [1])],
                          [helper.make_tensor_value_info("y", 1, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("custom", 1)])
    ours = load_model(m).graph[0].attributes
    assert getattr(ir.serde._deserialize_attribute, "_onnxplex_wrapped", False)
    for a in node.attribute:
        got = ours[a.name].value
        plain = (tuple(a.floats) if a.type == a.FLOATS else tuple(a.ints) if a.type == a.INTS
                 else None)
        if plain is not None:
            assert len(got) == len(plain)
            assert all(type(v) is type(w) and (v == w or (math.isnan(v) and math.isnan(w)))
                       and math.copysign(1, v) == math.copysign(1, w)
                       for v, w in zip(got, plain)), a.name
    assert load_model(m).to_proto().graph.node[0].SerializeToString() == \
        m.graph.node[0].SerializeToString()
    # kernels read long lists as arrays, without the tuple being built
    loaded = load_model(m)
    view = loaded.node_views[0]
    arr = view.attr_array("i")
    assert arr.dtype == np.int64 and arr.tolist() == ints and not arr.flags.writeable
    f32 = view.attr_array("f")
    assert f32.dtype == np.float32
    np.testing.assert_array_equal(f32, np.asarray(floats, np.float32))
    assert loaded.graph[0].attributes["i"]._value is None   # (not built by attr_array)
    assert view.attr("i") == tuple(ints)
    np.testing.assert_array_equal(np.array(view.attrs["f"]), np.array(ours["f"].value))
    assert view.attr_array("short").dtype == np.int64   # short lists: the same dtypes
    assert view.attr_array("short", np.float64).dtype == np.float64
    assert view.attr_array("missing") is None


def test_views_built_without_their_init_hold_every_field():
    """NodeView and ValueInfo are slotted and built by a generated builder (their frozen
    dataclass __init__ costs ~2-3 us each, thousands a session): each must hold every field
    (an unset slot raises AttributeError), equal to what __init__ makes, and no __dict__."""
    import dataclasses

    from onnx import TensorProto, helper, numpy_helper

    from onnxplex.graph.model import NodeView, ValueInfo, load_model

    c = numpy_helper.from_array(np.ones((1, 4), np.float32), "c")
    g = helper.make_graph([helper.make_node("Add", ["x", "c"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                          [c])
    model = load_model(helper.make_model(g).SerializeToString())
    view = model.node_views[0]
    assert not hasattr(view, "__dict__")
    for info in (*view.inputs, *view.outputs):
        assert not hasattr(info, "__dict__")
        again = ValueInfo(**{f.name: getattr(info, f.name) for f in dataclasses.fields(ValueInfo)})
        assert repr(again) == repr(info)
    assert view.inputs[0].shape == ("N", 4) and view.inputs[1].const.shape == (1, 4)
    assert repr(NodeView(**{f.name: getattr(view, f.name)
                            for f in dataclasses.fields(NodeView)})) == repr(view)
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.name = "other"


def test_a_reshape_to_heads_gets_its_head_count():
    """[B, S, 256] reshaped to (B, S, -1, 64) by a shape computed from Shape/Gather/Concat (how
    an eager attention export splits heads): onnx's inference names the head count anew for
    every such Reshape, and the attention fusion, which wants Q's and K's heads to be one,
    missed every layer. The element counts make it 4, wherever inference carried the name."""
    from onnx import TensorProto, helper

    import onnxplex

    def const(name, values):
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(
            name, TensorProto.INT64, [len(values)], values))

    nodes = [helper.make_node("Shape", ["x"], ["shp"]),
             const("i0", [0]), const("i1", [1]), const("tail", [-1, 64]),
             helper.make_node("Gather", ["shp", "i0"], ["b"], axis=0),
             helper.make_node("Gather", ["shp", "i1"], ["s"], axis=0),
             helper.make_node("Concat", ["b", "s", "tail"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["heads"]),
             helper.make_node("Transpose", ["heads"], ["y"], perm=[0, 2, 1, 3])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["B", "S", 256])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)])
    model = onnxplex.load_model(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]))
    shapes = {v.name: [d if isinstance(d, int) else d.value for d in v.shape]
              for n in model.ir.graph for v in n.outputs if v.shape is not None}
    assert shapes["heads"] == ["B", "S", 4, 64]
    assert shapes["y"] == ["B", 4, "S", 64]


def test_a_reshape_from_a_dimension_of_no_name_keeps_its_unknown():
    """[?, 10] -> (-1, 1, 10): a dimension without a name cancels against nothing, so the
    unknown stays unknown (taking it for 1 made the Reshape of every converted Naive Bayes
    model refuse its 10-row result)."""
    from onnx import TensorProto, helper, numpy_helper

    import onnxplex

    target = numpy_helper.from_array(np.array([-1, 1, 10], np.int64), "t")
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "t"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [None, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [target])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (node,) = list(onnxplex.load_model(model).ir.graph)
    assert node.outputs[0].shape[0] != 1 and tuple(node.outputs[0].shape[1:]) == (1, 10)
    sess = onnxplex.InferenceSession(model.SerializeToString())
    x = np.ones((4, 10), np.float32)
    assert sess.run(None, {"x": x})[0].shape == (4, 1, 10)
