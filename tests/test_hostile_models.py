"""Hostile models: every malformed file gives a specific onnxplex error, quickly, without
crashing, allocating what it declares, or reading files outside the model's folder."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import onnx
import pytest
from graphs import chain, small_cnn
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex import (
    ExternalDataError,
    InvalidModelError,
    PartitionError,
    TensorSizeError,
    UnsupportedModelError,
)

FLOAT = TensorProto.FLOAT
OPSET = [helper.make_opsetid("", 17)]


def vi(name, shape, elem=FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, inits=(), opsets=OPSET, **kw):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=list(opsets), **kw)


def assert_refused(source, error, match):
    """Loading ``source`` raises ``error`` matching ``match`` within a few seconds."""
    t0 = time.perf_counter()
    with pytest.raises(error, match=match) as e:
        onnxplex.InferenceSession(source)
    assert time.perf_counter() - t0 < 10
    return e.value


# --------------------------------------------------------------------------------- bytes


@pytest.mark.parametrize("cut", [1, 2, 10, 100, 0.5, 0.9, -1])
def test_truncated_model_at_any_point(cut):
    data = small_cnn().SerializeToString()
    end = int(len(data) * cut) if isinstance(cut, float) else cut
    assert_refused(data[:end], InvalidModelError, "not a valid ONNX model|holds no graph|"
                   "declared shapes|holds .* but its shape")


@pytest.mark.parametrize("seed", range(5))
def test_random_garbage(seed):
    data = np.random.default_rng(seed).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    assert_refused(data, InvalidModelError, "not a valid ONNX model|holds no graph")


def _nested_if_bytes(depth: int) -> bytes:
    """A model whose If then-branches nest ``depth`` deep, written as raw protobuf (onnx's
    Python objects cannot even be built this deep)."""

    def field(num: int, payload: bytes) -> bytes:
        out, n = bytearray([num << 3 | 2]), len(payload)
        while True:
            out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                return bytes(out) + payload

    leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["o0"])], "leaf", [],
                             [vi("o0", [2])]).SerializeToString()
    inner = leaf
    for d in range(1, depth):
        else_g = helper.make_graph([helper.make_node("Identity", ["x"], [f"e{d}"])], "e", [],
                                   [vi(f"e{d}", [2])])
        node = helper.make_node("If", ["c"], [f"o{d}"], else_branch=else_g)
        then_attr = onnx.AttributeProto(name="then_branch", type=onnx.AttributeProto.GRAPH)
        node_b = node.SerializeToString() + field(5, then_attr.SerializeToString()
                                                   + field(6, inner))
        inner = helper.make_graph([], f"b{d}", [], [vi(f"o{d}", [2])]).SerializeToString() \
            + field(1, node_b)
    top = model([], [vi("c", [], TensorProto.BOOL), vi("x", [2])], [vi(f"o{depth - 1}", [2])])
    top.graph.ClearField("node")
    graph = top.graph.SerializeToString() + inner   # the nested graph's node, merged in
    top.ClearField("graph")
    return top.SerializeToString() + field(7, graph)


def test_subgraphs_nested_thousands_deep_are_refused():
    err = assert_refused(_nested_if_bytes(3000), InvalidModelError, "nested too deeply")
    assert "truncated" not in str(err)


def test_moderately_nested_subgraphs_run():
    sess = onnxplex.InferenceSession(_nested_if_bytes(25))
    x = np.arange(2, dtype=np.float32)
    np.testing.assert_array_equal(sess.run(None, {"c": np.array(True), "x": x})[0], x)


# ------------------------------------------------------------------------------ versions


def test_versions_and_opset_imports():
    m = chain(["Relu"])
    m.ir_version = onnx.IR_VERSION + 1
    assert_refused(m, UnsupportedModelError, "IR version .* newer")
    m.ir_version = 2
    assert_refused(m, UnsupportedModelError, "IR version 2 predates")
    assert_refused(chain(["Relu"], opset=onnx.defs.onnx_opset_version() + 1),
                   UnsupportedModelError, "opset .* newer")
    for version in (0, -5):
        m = chain(["Relu"])
        m.opset_import[0].version = version
        assert_refused(m, UnsupportedModelError, f"opset {version}; opset versions start at 1")
    m = chain(["Relu"])
    m.opset_import.append(helper.make_opsetid("ai.onnx", 13))
    assert_refused(m, InvalidModelError, "imports ai.onnx twice, as opset 17 and 13")
    m = chain(["Relu"])
    del m.opset_import[:]
    assert_refused(m, InvalidModelError, "the model imports no opset")
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))   # (ONNX's: implied)
    assert onnxplex.InferenceSession(m.SerializeToString()).run(
        None, {"x": np.ones((2, 3), np.float32)})[0].shape == (2, 3)


def test_unknown_ops_and_domains_name_the_node():
    m = chain(["Relu"])
    m.graph.node[0].op_type = "Frobnicate"   # (ONNX's own domain: onnxruntime's INVALID_GRAPH)
    err = assert_refused(m, PartitionError, "node 0 'A': Frobnicate")
    assert err.unassigned == (0,)
    assert isinstance(err, onnxplex.capi.onnxruntime_pybind11_state.InvalidGraph)
    m = chain(["Relu"])
    m.graph.node[0].domain = "com.evil"
    m.opset_import.append(helper.make_opsetid("com.evil", 1))
    m.graph.node[0].op_type = "Frobnicate"   # (another domain nothing registers: FAIL)
    err = assert_refused(m, PartitionError, "node 0 'A': com.evil::Frobnicate")
    assert isinstance(err, onnxplex.capi.onnxruntime_pybind11_state.Fail)
    m = chain(["Relu"])
    m.graph.node[0].domain = "com.evil"
    assert_refused(m, InvalidModelError, "domain 'com.evil', which the model does not import")
    m.opset_import.append(helper.make_opsetid("com.evil", 1))
    assert_refused(m, PartitionError, "com.evil::Relu")


# ----------------------------------------------------------------------------- structure


def _if_model(then_nodes, then_out="t"):
    then_g = helper.make_graph(then_nodes, "then", [], [vi(then_out, [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [vi("e", [2])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    return model([node], [vi("c", [], TensorProto.BOOL), vi("x", [2])], [vi("y", [2])])


@pytest.mark.parametrize("edit, match", [
    ("cycle", "cycle"),
    ("dangling", "reads 'nowhere', which no node"),
    ("duplicate", "'t0' is defined twice"),
    ("no_producer", "graph output 'ghost' is not produced"),
    ("duplicate_initializer", "initializer name 'w' is defined twice"),
])
def test_structural_errors_in_the_main_graph(edit, match):
    m = chain(["Relu", "Relu", "Relu"])
    if edit == "cycle":
        m.graph.node[0].input[0] = "t1"
    elif edit == "dangling":
        m.graph.node[1].input[0] = "nowhere"
    elif edit == "duplicate":
        m.graph.node[1].output[0] = "t0"
    elif edit == "no_producer":
        m.graph.output[0].name = "ghost"
    else:
        w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
        m.graph.initializer.extend([w, w])
    assert_refused(m, InvalidModelError, match)


@pytest.mark.parametrize("nodes, out, match", [
    ([helper.make_node("Relu", ["nowhere"], ["t"])], "t", "then_branch: node 0 .* reads "
                                                         "'nowhere'"),
    ([helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Neg", ["x"], ["t"])], "t",
     "then_branch: value name 't' is defined twice"),
    ([helper.make_node("Relu", ["x"], ["t"])], "ghost", "then_branch: graph output 'ghost'"),
])
def test_structural_errors_inside_subgraphs(nodes, out, match):
    assert_refused(_if_model(nodes, out), InvalidModelError, match)


def test_declared_element_type_contradicting_the_nodes_is_refused():
    m = chain(["Relu", "Neg"])
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    assert_refused(m, InvalidModelError, "declared shapes or types contradict its nodes.*"
                   "elem type differs")


@pytest.mark.parametrize("where", ["value_info", "output", "output rank"])
def test_declared_shape_contradicting_the_nodes_is_merged_as_onnxruntime_does(where, caplog):
    """onnxruntime's default (``session.strict_shape_type_inference=0``): a warning, and the
    shape the nodes compute (onnxruntime's lenient merge leaves the conflicting dims unknown
    until a later graph resolution infers them again, which an optimized graph gets); with the
    entry set to 1 the model is refused."""
    m = chain(["Relu", "Neg"])   # float [2, 3] all along
    if where == "value_info":
        m.graph.value_info.append(vi("t0", [2, 7]))
    else:
        dims = m.graph.output[0].type.tensor_type.shape.dim
        if where == "output":
            dims[1].dim_value = 7
        else:
            dims.add().dim_value = 1
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    with caplog.at_level("WARNING", logger="onnxplex"):
        sess = onnxplex.InferenceSession(m)
    name = "t0" if where == "value_info" else "y"
    assert f"declares '{name}' with shape" in caplog.text
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, -np.maximum(x, 0))
    assert sess.get_outputs()[0].shape == [2, 3]
    ort = pytest.importorskip("onnxruntime")
    theirs = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    assert theirs.get_outputs()[0].shape in ([2, 3], [2, None], [])   # (never the declared)
    so = onnxplex.SessionOptions()
    so.add_session_config_entry("session.strict_shape_type_inference", "1")
    with pytest.raises(InvalidModelError, match="declared shapes or types contradict"):
        onnxplex.InferenceSession(m, so)


def test_inputs_that_cannot_broadcast_fail_at_run_naming_the_node():
    m = model([helper.make_node("Add", ["a", "b"], ["y"], name="add")],
              [vi("a", [2, 3]), vi("b", [4, 5])], [vi("y", None)])
    sess = onnxplex.InferenceSession(m)   # loads: providers may decline it with a reason
    with pytest.raises(onnxplex.KernelExecutionError, match=r"node 'add' \(Add\).*broadcast"):
        sess.run(None, {"a": np.ones((2, 3), np.float32), "b": np.ones((4, 5), np.float32)})


def test_names_that_are_not_text():
    data = chain(["Relu"]).SerializeToString().replace(b"Relu", b"\x80elu")
    assert_refused(data, InvalidModelError, r"not UTF-8 text: b'\\x80elu'")


# ---------------------------------------------------------------------------- tensor data


def _huge_tensor(name="w"):
    return onnx.TensorProto(name=name, data_type=FLOAT, dims=[100_000, 100_000, 100_000])


@pytest.mark.parametrize("where", ["initializer", "constant", "input", "inferred",
                                   "subgraph"])
def test_terabyte_shapes_are_refused_with_their_size(where):
    x = vi("x", [1])
    if where == "initializer":
        m = model([helper.make_node("Add", ["x", "w"], ["y"])], [x], [vi("y", None)],
                  [_huge_tensor()])
    elif where == "constant":
        m = model([helper.make_node("Constant", [], ["w"], value=_huge_tensor()),
                   helper.make_node("Add", ["x", "w"], ["y"])], [x], [vi("y", None)])
    elif where == "input":
        m = model([helper.make_node("Relu", ["w"], ["y"])],
                  [vi("w", [100_000, 100_000, 100_000])], [vi("y", None)])
    elif where == "inferred":   # shape inference propagates the constant shape
        s = numpy_helper.from_array(np.array([100_000] * 3, np.int64), "s")
        m = model([helper.make_node("ConstantOfShape", ["s"], ["w"]),
                   helper.make_node("Add", ["x", "w"], ["y"])], [x], [vi("y", None)], [s])
    else:
        body = helper.make_graph([helper.make_node("Constant", [], ["t"],
                                                   value=_huge_tensor("t"))], "then", [],
                                 [vi("t", None)])
        m = _if_model([])
        m.graph.node[0].attribute[0].g.CopyFrom(body)
    err = assert_refused(m, TensorSizeError, r"\[100000, 100000, 100000\]\) would need "
                         r"3\.55 PiB \(4000000000000000 bytes\)")
    assert isinstance(err, InvalidModelError)


def test_size_is_checked_before_anything_is_allocated(monkeypatch):
    """64 MiB of ConstantOfShape with a 1 MiB limit: refused before constant folding (or
    anything else) allocates it; the same model loads when the limit allows it."""
    s = numpy_helper.from_array(np.array([4096, 4096], np.int64), "s")
    m = model([helper.make_node("ConstantOfShape", ["s"], ["w"],
                                value=numpy_helper.from_array(np.ones(1, np.float32))),
               helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [1])], [vi("y", None)],
              [s])
    monkeypatch.setenv("ONNXPLEX_MAX_TENSOR_BYTES", str(1 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(TensorSizeError, match=r"64\.00 MiB .* more than the 1\.00 MiB"):
            onnxplex.InferenceSession(m)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
    monkeypatch.setenv("ONNXPLEX_MAX_TENSOR_BYTES", str(1 << 30))
    assert onnxplex.InferenceSession(m).run(None, {"x": np.ones(1, np.float32)})[0].shape \
        == (4096, 4096)


@pytest.mark.parametrize("edit, error, match", [
    ("raw_short", InvalidModelError, r"holds 16 bytes of raw data, but its shape \[2, 3\] "
                                     r"needs 6 element\(s\) \(24 bytes\)"),
    ("typed_long", InvalidModelError, r"holds 7 values in float_data"),
    ("no_data", InvalidModelError, r"holds 0 values in float_data"),
    ("bad_type", InvalidModelError, "data type 99, which is not an ONNX tensor type"),
    ("negative_dim", InvalidModelError, "negative dimension -2"),
])
def test_tensor_data_that_does_not_match_its_shape(edit, error, match):
    t = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    if edit == "raw_short":
        t.raw_data = t.raw_data[:16]
    elif edit in ("typed_long", "no_data"):
        t.ClearField("raw_data")
        t.float_data.extend([1.0] * (7 if edit == "typed_long" else 0))
    elif edit == "bad_type":
        t.data_type = 99
    else:
        t.dims[0] = -2
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [2, 3])],
              [vi("y", [2, 3])], [t])
    assert_refused(m, error, match)


def test_negative_declared_dims_are_read_as_unknown_as_onnxruntime_reads_them():
    # (a quantizer's test models declare inputs [-1, 10]; onnxruntime runs them, showing None)
    m = chain(["Relu"], shape=(-3, 3))
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_value = -1
    sess = onnxplex.InferenceSession(m.SerializeToString())
    assert sess.get_inputs()[0].shape == [None, 3]
    assert sess.get_outputs()[0].shape == [None, 3]
    x = np.array([[-1.0, 2.0, -3.0]] * 5, np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))


# --------------------------------------------------------------------------- external data


def _ext_tensor(name: str, location: str, offset: int = 0, length: int = 24):
    t = numpy_helper.from_array(np.zeros((2, 3), np.float32), name)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def _ext_model(where: str, location: str, **kw) -> onnx.ModelProto:
    t = _ext_tensor("w", location, **kw)
    add = helper.make_node("Add", ["x", "w"], ["y"])
    x, y = vi("x", [2, 3]), vi("y", [2, 3])
    if where == "initializer":
        return model([add], [x], [y], [t])
    if where == "constant":
        return model([helper.make_node("Constant", [], ["w"], value=t), add], [x], [y])
    if where == "subgraph":
        then_g = helper.make_graph([helper.make_node("Constant", [], ["t"], value=t)], "then",
                                   [], [vi("t", [2, 3])])
        else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                                   [vi("e", [2, 3])])
        node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
        return model([node], [vi("c", [], TensorProto.BOOL), x], [y])
    # a model-local function whose body holds the constant (in an If's branch in it)
    const = helper.make_node("Constant", [], ["c"], value=t)
    if where == "function_subgraph":
        then_g = helper.make_graph([helper.make_node("Constant", [], ["t"], value=t)], "then",
                                   [], [vi("t", [2, 3])])
        else_g = helper.make_graph([helper.make_node("Constant", [], ["e"], value=t)], "else",
                                   [], [vi("e", [2, 3])])
        const = helper.make_node("If", ["on"], ["c"], then_branch=then_g, else_branch=else_g)
        fn_nodes = [helper.make_node("Constant", [], ["on"],
                                     value=numpy_helper.from_array(np.array(True))), const]
    else:
        fn_nodes = [const]
    fn = helper.make_function("local", "F", ["a"], ["o"],
                              [*fn_nodes, helper.make_node("Add", ["a", "c"], ["o"])], OPSET)
    return model([helper.make_node("F", ["x"], ["y"], domain="local")], [x], [y],
                 opsets=[*OPSET, helper.make_opsetid("local", 1)], functions=[fn])


@pytest.fixture
def folder(tmp_path):
    """tmp_path/model/ (the model's folder) and tmp_path/secret.bin (must never be read)."""
    (tmp_path / "secret.bin").write_bytes(b"S" * 24)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "sub").mkdir()
    (tmp_path / "model" / "weights.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    os.symlink(tmp_path / "secret.bin", tmp_path / "model" / "link.bin")
    os.symlink(tmp_path, tmp_path / "model" / "up")
    return tmp_path


class _OpenRecorder:
    """Records every file Python opens (audit hook) while active: proof of what was read."""

    active: list[str] | None = None
    installed = False

    @classmethod
    def hook(cls, event, args):
        if cls.active is not None and event == "open" and isinstance(args[0], (str, bytes)):
            cls.active.append(os.fsdecode(args[0]))

    def __enter__(self):
        if not _OpenRecorder.installed:
            sys.addaudithook(_OpenRecorder.hook)
            _OpenRecorder.installed = True
        _OpenRecorder.active = self.paths = []
        return self

    def __exit__(self, *exc):
        _OpenRecorder.active = None


WHERES = ["initializer", "constant", "subgraph", "function"]
# checked at load, though the session cannot expand a function whose body holds an If
LOADED_WHERES = [*WHERES, "function_subgraph"]


@pytest.mark.parametrize("where", LOADED_WHERES)
@pytest.mark.parametrize("location, match", [
    ("{secret}", "is an absolute path"),
    ("../secret.bin", "outside the model folder"),
    ("sub/../../secret.bin", "outside the model folder"),
    ("link.bin", "outside the model folder"),
    ("up/secret.bin", "outside the model folder"),
    (".", "outside the model folder"),
    ("weights\0.bin", "contains a NUL byte"),
    ("", "names no location"),
    ("missing.bin", "not found"),
])
def test_external_data_leaving_the_folder_is_refused(folder, where, location, match):
    location = location.format(secret=folder / "secret.bin")
    path = folder / "model" / "m.onnx"
    path.write_bytes(_ext_model(where, location).SerializeToString())
    with _OpenRecorder() as rec:
        with pytest.raises(ExternalDataError, match=match):
            onnxplex.InferenceSession(str(path))
    assert not [p for p in rec.paths if "secret" in p], rec.paths


@pytest.mark.parametrize("where", WHERES)
def test_external_data_inside_the_folder_is_read(folder, where):
    path = folder / "model" / "m.onnx"
    path.write_bytes(_ext_model(where, "sub/../weights.bin").SerializeToString())
    feeds = {"x": np.ones((2, 3), np.float32)}
    if where == "subgraph":
        feeds["c"] = np.array(True)
    with _OpenRecorder() as rec:
        (y,) = onnxplex.InferenceSession(str(path)).run(None, feeds)
    want = np.arange(6, dtype=np.float32).reshape(2, 3) + (0 if where == "subgraph" else 1)
    np.testing.assert_array_equal(y, want)
    assert any(p.endswith("weights.bin") for p in rec.paths)   # the recorder sees reads


@pytest.mark.parametrize("offset, length, match", [
    (16, 24, r"range \[16, 40\) is beyond the end"),
    (0, 10**30, "beyond the end"),
    (0, 12, "length 12 does not match its shape and dtype"),
    (-1, 24, "negative external data offset"),
    ("abc", 24, "not a number"),
])
def test_external_data_offsets_and_lengths(folder, offset, length, match):
    path = folder / "model" / "m.onnx"
    path.write_bytes(_ext_model("initializer", "weights.bin", offset=offset,
                                length=length).SerializeToString())
    with pytest.raises(ExternalDataError, match=match):
        onnxplex.InferenceSession(str(path))


def test_external_data_from_bytes_is_refused(folder):
    data = _ext_model("initializer", "weights.bin").SerializeToString()
    with pytest.raises(ExternalDataError, match="not loaded from a path"):
        onnxplex.InferenceSession(data)


@pytest.mark.parametrize("where", ["initializer", "subgraph"])
def test_large_raw_data_is_checked_when_read(monkeypatch, where):
    """Raw data above _RAW_CHECK_BYTES is not copied at load to be measured; reading it into
    the graph still refuses data that does not fit the shape, with an onnxplex error."""
    from onnxplex.graph import checks

    monkeypatch.setattr(checks, "_RAW_CHECK_BYTES", 0)
    t = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    t.raw_data = t.raw_data[:16]
    if where == "initializer":
        m = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [2, 3])],
                  [vi("y", [2, 3])], [t])
    else:
        then_g = helper.make_graph([helper.make_node("Constant", [], ["t"], value=t)], "then",
                                   [], [vi("t", [2, 3])])
        else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                                   [vi("e", [2, 3])])
        m = model([helper.make_node("If", ["c"], ["y"], then_branch=then_g,
                                    else_branch=else_g)],
                  [vi("c", [], TensorProto.BOOL), vi("x", [2, 3])], [vi("y", [2, 3])])
    assert_refused(m, InvalidModelError, r"'w' cannot be read as its type and shape \[2, 3\]"
                   r".*cannot reshape array of size 4")


@pytest.mark.parametrize("perm, match", [([0, 1, 2], "3 entries for an input of rank 2"),
                                         ([0, 0], "not a permutation"),
                                         ([1, 2], "not a permutation")])
def test_transpose_perm_outside_the_spec_is_refused(perm, match):
    # (an identity perm of the wrong length was removed as a no-op: the input came back)
    m = model([helper.make_node("Transpose", ["x"], ["y"], perm=perm)], [vi("x", ["N", 4])],
              [vi("y", None)])
    with pytest.raises(onnxplex.OnnxplexError, match=match):
        onnxplex.InferenceSession(m.SerializeToString())
    with pytest.raises(Exception):   # noqa: B017 - onnxruntime refuses it too
        import onnxruntime
        onnxruntime.InferenceSession(m.SerializeToString(),
                                     providers=["CPUExecutionProvider"])


def _binary_model(op, elem, **attrs):
    return model([helper.make_node(op, ["a", "b"], ["y"], **attrs)],
                 [vi("a", [3], elem), vi("b", [3], elem)], [vi("y", [3], elem)])


@pytest.mark.parametrize("op, attrs, what", [("Div", {}, "division"), ("Mod", {}, "modulo"),
                                             ("Mod", {"fmod": 1}, "modulo")])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint64])
def test_integer_division_by_zero_is_refused(op, attrs, what, dtype):
    # (numpy's answer is 0: a silent wrong result; onnxruntime refuses the run)
    import onnxruntime

    m = _binary_model(op, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), **attrs)
    feed = {"a": np.array([7, 8, 9], dtype), "b": np.array([2, 0, 3], dtype)}
    with pytest.raises(onnxplex.KernelExecutionError, match=f"Integer {what} by zero"):
        onnxplex.InferenceSession(m.SerializeToString()).run(None, feed)
    with pytest.raises(Exception, match=f"Integer {what} by zero"):   # noqa: B017
        onnxruntime.InferenceSession(m.SerializeToString(),
                                     providers=["CPUExecutionProvider"]).run(None, feed)
    feed["b"] = np.array([2, 5, 3], dtype)   # (no zero: the same answer as onnxruntime)
    np.testing.assert_array_equal(
        onnxplex.InferenceSession(m.SerializeToString()).run(None, feed)[0],
        onnxruntime.InferenceSession(m.SerializeToString(),
                                     providers=["CPUExecutionProvider"]).run(None, feed)[0])


def test_int_min_divided_by_minus_one_wraps_without_crashing():
    # (onnxruntime's process dies of SIGFPE here; C's result would be undefined)
    for dtype in (np.int32, np.int64):
        m = _binary_model("Div", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
        lo = np.iinfo(dtype).min
        (y,) = onnxplex.InferenceSession(m.SerializeToString()).run(
            None, {"a": np.array([lo, 7, -7], dtype), "b": np.array([-1, -2, 2], dtype)})
        assert y.tolist() == [lo, -3, -3]


@pytest.mark.parametrize("shape, allowzero, match", [([-2, 4], 0, "has -2"),
                                                     ([-1, -1], 0, "more than one -1"),
                                                     ([0, -1], 1, "both 0 and -1")])
@pytest.mark.parametrize("const", [True, False], ids=["constant shape", "fed shape"])
def test_reshape_shapes_outside_the_spec_are_refused(shape, allowzero, match, const):
    # (-2 was taken as -1: numpy infers any negative size)
    import onnxruntime

    s = np.array(shape, np.int64)
    ins = [vi("x", [2, 4])] + ([] if const else [vi("s", [2], TensorProto.INT64)])
    inits = [numpy_helper.from_array(s, "s")] if const else []
    m = model([helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=allowzero)], ins,
              [vi("y", None)], inits=inits, opsets=[helper.make_opsetid("", 14)])
    feed = {"x": np.ones((2, 4), np.float32)} | ({} if const else {"s": s})
    with pytest.raises(onnxplex.OnnxplexError, match=match):
        onnxplex.InferenceSession(m.SerializeToString()).run(None, feed)
    with pytest.raises(Exception):   # noqa: B017 - onnxruntime refuses it too
        onnxruntime.InferenceSession(m.SerializeToString(),
                                     providers=["CPUExecutionProvider"]).run(None, feed)


def _local_function(name, calls):
    domain = "" if calls == "Relu" else "local"
    return helper.make_function("local", name, ["a"], ["b"],
                                [helper.make_node(calls, ["a"], ["b"], domain=domain)],
                                [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])


@pytest.mark.parametrize("calls, cycle", [
    ({"F": "F"}, "local::F -> local::F"),
    ({"F": "G", "G": "H", "H": "F"}, "local::F -> local::G -> local::H -> local::F"),
])
def test_recursive_local_functions_are_refused_quickly(calls, cycle):
    # (inlining them never ended: the load hung, its memory growing)
    import onnxruntime

    funcs = [_local_function(name, callee) for name, callee in calls.items()]
    m = model([helper.make_node("F", ["x"], ["y"], domain="local")], [vi("x", [2])],
              [vi("y", [2])], opsets=[*OPSET, helper.make_opsetid("local", 1)],
              functions=funcs)
    assert_refused(m, InvalidModelError, f"call themselves recursively \\({cycle}\\)")
    with pytest.raises(Exception):   # noqa: B017 - onnxruntime: INVALID_GRAPH
        onnxruntime.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    del m.functions[-1]   # (the last one ends the chain instead: it runs)
    m.functions.append(_local_function(funcs[-1].name, "Relu"))
    y = onnxplex.InferenceSession(m.SerializeToString()).run(
        None, {"x": np.array([-1.0, 2.0], np.float32)})[0]
    np.testing.assert_array_equal(y, [0.0, 2.0])


def _if_signature(then_outs, else_outs, node_outs):
    def branch(name, op, n):
        return helper.make_graph([helper.make_node(op, ["x"], [f"{name}{i}"]) for i in range(n)],
                                 name, [], [vi(f"{name}{i}", [2]) for i in range(n)])
    node = helper.make_node("If", ["c"], [f"y{i}" for i in range(node_outs)],
                            then_branch=branch("t", "Neg", then_outs),
                            else_branch=branch("e", "Relu", else_outs))
    return model([node], [vi("c", [], TensorProto.BOOL), vi("x", [2])],
                 [vi(f"y{i}", [2]) for i in range(node_outs)])


def _loop_signature(body_ins, body_outs):
    ins = [vi("i", [], TensorProto.INT64), vi("cin", [], TensorProto.BOOL), vi("v", [2])]
    outs = [vi("cout", [], TensorProto.BOOL), vi("vo", [2]), vi("vo", [2])]
    body = helper.make_graph([helper.make_node("Identity", ["cin"], ["cout"]),
                              helper.make_node("Neg", ["v" if body_ins > 2 else "x"], ["vo"])],
                             "body", ins[:body_ins], outs[:body_outs])
    return model([helper.make_node("Loop", ["M", "c", "x"], ["y"], body=body)],
                 [vi("M", [], TensorProto.INT64), vi("c", [], TensorProto.BOOL), vi("x", [2])],
                 [vi("y", [2])])


def _scan_signature(body_ins):
    ins = [vi("s", [2]), vi("e", [2])][:body_ins]
    body = helper.make_graph([helper.make_node("Add", ["s", "e" if body_ins > 1 else "s"],
                                               ["so"])], "body", ins, [vi("so", [2])])
    return model([helper.make_node("Scan", ["s0", "xs"], ["y"], body=body, num_scan_inputs=1)],
                 [vi("s0", [2]), vi("xs", [3, 2])], [vi("y", [2])])


@pytest.mark.parametrize("build, match", [
    (lambda: _if_signature(1, 2, 1), "then_branch gives 1 and its else_branch 2"),
    (lambda: _if_signature(2, 1, 2), "then_branch gives 2 and its else_branch 1"),
    (lambda: _if_signature(2, 2, 1), "has 1 output\\(s\\), its then_branch gives 2"),
    (lambda: _loop_signature(2, 2), "body must take 3 inputs \\(it takes 2\\)"),
    (lambda: _loop_signature(3, 1), "give 2 outputs \\(it gives 1\\)"),
    (lambda: _scan_signature(1), "its body takes 1 and gives 1"),
], ids=["If else longer", "If then longer", "If node shorter", "Loop body inputs",
        "Loop body outputs", "Scan body inputs"])
def test_control_flow_signatures_are_checked_at_load(build, match):
    # (an If ran whichever branch it took; the others failed inside their kernel at run)
    import onnxruntime

    m = build()
    assert_refused(m, InvalidModelError, match)
    with pytest.raises(Exception):   # noqa: B017 - onnxruntime refuses them too
        onnxruntime.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


def test_control_flow_with_matching_signatures_still_runs():
    x = np.array([1.0, -2.0], np.float32)
    (y,) = onnxplex.InferenceSession(_loop_signature(3, 2).SerializeToString()).run(
        None, {"M": np.array(2, np.int64), "c": np.array(True), "x": x})
    np.testing.assert_array_equal(y, x)
    (y,) = onnxplex.InferenceSession(_scan_signature(2).SerializeToString()).run(
        None, {"s0": x, "xs": np.ones((3, 2), np.float32)})
    np.testing.assert_array_equal(y, x + 3)


_XD = np.arange(6, dtype=np.float32).reshape(2, 3)
_INDEX_CASES = {
    "GatherElements": (dict(axis=1), lambda i: {"x": _XD, "i": np.array([[0, i]], np.int64)}),
    "ScatterElements": (dict(axis=1), lambda i: {"x": _XD, "i": np.array([[i]], np.int64),
                                                  "u": np.array([[9.0]], np.float32)}),
    "ScatterND": ({}, lambda i: {"x": _XD, "i": np.array([[0, i]], np.int64),
                                 "u": np.array([9.0], np.float32)}),
    "GatherND": ({}, lambda i: {"x": _XD, "i": np.array([[0, i]], np.int64)}),
    "Gather": (dict(axis=1), lambda i: {"x": _XD, "i": np.array([i], np.int64)}),
}


@pytest.mark.parametrize("index", [-4, -3, -1, 2, 3])
@pytest.mark.parametrize("op", list(_INDEX_CASES))
def test_indices_are_checked_against_the_axis_once(op, index):
    # (an index below -dim was wrapped twice: -4 on an axis of 3 read or wrote element 2)
    import onnxruntime

    attrs, feeds = _INDEX_CASES[op]
    feed = feeds(index)
    ins = [vi(n, list(a.shape), helper.np_dtype_to_tensor_dtype(a.dtype))
           for n, a in feed.items()]
    m = model([helper.make_node(op, list(feed), ["y"], **attrs)], ins, [vi("y", None)],
              opsets=[helper.make_opsetid("", 18)]).SerializeToString()
    ort = onnxruntime.InferenceSession(m, providers=["CPUExecutionProvider"])
    plex = onnxplex.InferenceSession(m)
    if -3 <= index <= 2:
        np.testing.assert_array_equal(plex.run(None, feed)[0], ort.run(None, feed)[0])
        return
    with pytest.raises(Exception):   # noqa: B017 - onnxruntime: INVALID_ARGUMENT or FAIL
        ort.run(None, feed)
    with pytest.raises(onnxplex.KernelExecutionError, match=f"index {index} is out of"):
        plex.run(None, feed)


def test_a_node_of_ten_thousand_inputs_loads_in_linear_time():
    # (each input's description searched the graph's inputs: 10,000 took ~26 s, now ~0.3;
    # the bound is loose, for a busy machine, and still far below the quadratic time)
    n = 10_000
    m = model([helper.make_node("Concat", [f"x{i}" for i in range(n)], ["y"], axis=0)],
              [vi(f"x{i}", [1, 2]) for i in range(n)], [vi("y", [n, 2])])
    t0 = time.perf_counter()
    sess = onnxplex.InferenceSession(m.SerializeToString())
    assert time.perf_counter() - t0 < 8
    feed = {f"x{i}": np.full((1, 2), i, np.float32) for i in range(n)}
    (y,) = sess.run(None, feed)
    np.testing.assert_array_equal(y[:, 0], np.arange(n, dtype=np.float32))


@pytest.mark.parametrize("pattern", [r"(a+)+b", r"(x+x+)+y", r"\d+", r"[[:alpha:]]+\s?",
                                     r"www\.[\w.-]+\.\bcom\b"])
def test_regex_full_match_is_re2(pattern):
    # (Python's backtracking re took exponential time on (a+)+b over a long text of a's,
    # and its \d matched non-ASCII digits, which RE2 and onnxruntime do not)
    import onnxruntime

    m = model([helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern)],
              [vi("x", [None], TensorProto.STRING)], [vi("y", [None], TensorProto.BOOL)],
              opsets=[helper.make_opsetid("", 20)], ir_version=9).SerializeToString()
    x = np.array(["a" * 5000 + "c", "x" * 5000, "123", "١٢٣", "abc ", "www.google.com"],
                 dtype=object)
    t0 = time.perf_counter()
    got = onnxplex.InferenceSession(m).run(None, {"x": x})[0]
    assert time.perf_counter() - t0 < 5
    want = onnxruntime.InferenceSession(m, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


_TRUNCATE = """
import sys, numpy as np, onnx, onnxplex
from onnx import helper as h, TensorProto as T, numpy_helper as nh
d = sys.argv[1]
w = np.arange(256 * 256, dtype=np.float32).reshape(256, 256) / 65536
g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["y"])], "g",
                 [h.make_tensor_value_info("x", T.FLOAT, [1, 256])],
                 [h.make_tensor_value_info("y", T.FLOAT, [1, 256])], [nh.from_array(w, "W")])
m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
onnx.save_model(m, d + "/m.onnx", save_as_external_data=True, location="w.bin",
                size_threshold=0)
s = onnxplex.InferenceSession(d + "/m.onnx")
x = np.ones((1, 256), np.float32)
first = s.run(None, {"x": x})[0]
with open(d + "/w.bin", "r+b") as f:
    f.truncate(100)
try:
    print("same" if np.array_equal(s.run(None, {"x": x})[0], first) else "different")
except onnxplex.OnnxplexError as e:
    print("refused", type(e).__name__)
try:
    onnxplex.InferenceSession(d + "/m.onnx")
except onnxplex.ExternalDataError as e:
    print("reload refused")
"""


def test_external_weights_truncated_under_a_live_session_do_not_kill_it(tmp_path):
    # (onnx-ir memory-maps external data: the next run died of SIGBUS)
    out = subprocess.run([sys.executable, "-c", _TRUNCATE, str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert out.stdout.split()[0] in ("same", "refused")
    assert "reload refused" in out.stdout


@pytest.mark.parametrize("x_shape, w_shape, attrs, error, match", [
    ((1, 3, 4, 4), (2, 1, 3, 3), dict(group=2), onnxplex.KernelExecutionError,
     "the input has 3 channels; the weight \\[2, 1, ...\\] with group 2 needs 2"),
    ((1, 3, 4, 4), (2, 2, 3, 3), {}, onnxplex.KernelExecutionError,
     "the input has 3 channels; the weight \\[2, 2, ...\\] with group 1 needs 2"),
    ((1, 1, 2, 2), (1, 1, 3, 3), {}, onnxplex.KernelExecutionError,
     "the kernel \\[3, 3\\] \\(dilated \\[3, 3\\]\\) is larger than the padded input \\[2, 2\\]"),
    ((1, 1, 4, 4), (1, 1, 3, 3), dict(strides=[0, 1]), InvalidModelError,
     "strides must only contain positive values"),
    ((1, 1, 4, 4), (1, 1, 3, 3), dict(dilations=[1, 0]), InvalidModelError,
     "dilations must only contain positive values"),
    ((1, 1, 4, 4), (1, 1, 3, 3), dict(pads=[-1, 0, 0, 0]), InvalidModelError,
     "pads must not contain negative values"),
], ids=["group", "weight channels", "kernel too large", "stride 0", "dilation 0", "negative pad"])
def test_conv_geometry_errors_say_what_is_wrong(x_shape, w_shape, attrs, error, match):
    # (before: numpy's reshape error, an empty output, a ZeroDivisionError, or a result)
    import onnxruntime

    m = model([helper.make_node("Conv", ["x", "w"], ["y"], **attrs)], [vi("x", list(x_shape))],
              [vi("y", None)], inits=[numpy_helper.from_array(np.ones(w_shape, np.float32), "w")])
    feed = {"x": np.ones(x_shape, np.float32)}
    with pytest.raises(error, match=match):
        onnxplex.InferenceSession(m.SerializeToString()).run(None, feed)
    with pytest.raises(Exception):   # noqa: B017 - onnxruntime refuses them too
        onnxruntime.InferenceSession(m.SerializeToString(),
                                     providers=["CPUExecutionProvider"]).run(None, feed)


def _seq_type():
    return helper.make_sequence_type_proto(helper.make_tensor_type_proto(FLOAT, None))


def test_a_loop_growing_a_sequence_stops_at_the_memory_limit(monkeypatch):
    # (it grew until the machine's OOM killer ended the process)
    monkeypatch.setenv("ONNXPLEX_MAX_TENSOR_BYTES", str(64 << 20))
    body = helper.make_graph(
        [helper.make_node("Identity", ["cin"], ["cout"]),
         helper.make_node("SequenceInsert", ["seq", "x"], ["seq2"])], "body",
        [vi("i", [], TensorProto.INT64), vi("cin", [], TensorProto.BOOL),
         helper.make_value_info("seq", _seq_type())],
        [vi("cout", [], TensorProto.BOOL), helper.make_value_info("seq2", _seq_type())])
    m = model([helper.make_node("SequenceEmpty", [], ["s0"], dtype=FLOAT),
               helper.make_node("Loop", ["M", "", "s0"], ["s"], body=body),
               helper.make_node("SequenceLength", ["s"], ["n"])],
              [vi("x", [512, 512]), vi("M", [], TensorProto.INT64)],
              [vi("n", [], TensorProto.INT64)])
    sess = onnxplex.InferenceSession(m.SerializeToString())
    x = np.ones((512, 512), np.float32)
    assert sess.run(None, {"x": x, "M": np.array(3, np.int64)})[0] == 3
    with pytest.raises(onnxplex.KernelExecutionError,
                       match="SequenceInsert's sequence \\(holding 64 tensors\\).* more than"):
        sess.run(None, {"x": x, "M": np.array(10**9, np.int64)})


@pytest.mark.parametrize("op, inputs, feed, match", [
    ("ConstantOfShape", [vi("s", [2], TensorProto.INT64)],
     {"s": np.array([10**6, 10**6], np.int64)}, "ConstantOfShape's output"),
    ("Expand", [vi("x", [1, 1]), vi("s", [2], TensorProto.INT64)],
     {"x": np.ones((1, 1), np.float32), "s": np.array([10**5, 10**5], np.int64)},
     "Expand's output"),
    ("Tile", [vi("x", [2, 2]), vi("s", [2], TensorProto.INT64)],
     {"x": np.ones((2, 2), np.float32), "s": np.array([10**5, 10**5], np.int64)},
     "Tile's output"),
    ("Range", [vi("a", [], TensorProto.INT64), vi("b", [], TensorProto.INT64),
               vi("d", [], TensorProto.INT64)],
     {"a": np.array(0, np.int64), "b": np.array(10**12, np.int64), "d": np.array(1, np.int64)},
     "Range's output"),
    ("Pad", [vi("x", [2, 2]), vi("p", [4], TensorProto.INT64)],
     {"x": np.ones((2, 2), np.float32), "p": np.array([0, 0, 10**5, 10**5], np.int64)},
     "Pad's output"),
    ("Resize", [vi("x", [1, 1, 2, 2]), vi("r", [0]), vi("sc", [4])],
     {"x": np.ones((1, 1, 2, 2), np.float32), "r": np.zeros(0, np.float32),
      "sc": np.array([1, 1, 10**4, 10**4], np.float32)}, "Resize's output"),
    ("OneHot", [vi("i", [2], TensorProto.INT64), vi("d", [], TensorProto.INT64),
                vi("v", [2])],
     {"i": np.array([0, 1], np.int64), "d": np.array(10**9, np.int64),
      "v": np.array([0, 1], np.float32)}, "OneHot's output"),
])
def test_outputs_sized_by_data_are_checked_before_allocating(monkeypatch, op, inputs, feed,
                                                             match):
    monkeypatch.setenv("ONNXPLEX_MAX_TENSOR_BYTES", str(64 << 20))
    out = vi("y", None, TensorProto.INT64 if op == "Range" else FLOAT)
    m = model([helper.make_node(op, [i.name for i in inputs], ["y"])], inputs, [out])
    with pytest.raises(onnxplex.KernelExecutionError, match=f"{match}.* more than the 64.00 MiB"):
        onnxplex.InferenceSession(m.SerializeToString()).run(None, feed)


def _limited(limit, mode=None):
    opts = onnxplex.SessionOptions()
    opts.add_session_config_entry("session.onnxplex.max_tensor_bytes", limit)
    if mode is not None:
        opts.execution_mode = mode
    return opts


@pytest.mark.parametrize("mode", [onnxplex.ExecutionMode.ORT_SEQUENTIAL,
                                  onnxplex.ExecutionMode.ORT_PARALLEL])
def test_the_memory_limit_is_a_session_setting(monkeypatch, mode):
    """``session.onnxplex.max_tensor_bytes`` limits one session's kernels, whatever the process
    default, on the run's thread and on the inter-op pool's; another session in the same
    process keeps the default."""
    monkeypatch.delenv("ONNXPLEX_MAX_TENSOR_BYTES", raising=False)
    # (two independent steps: the inter-op pool runs the second, Expand)
    m = model([helper.make_node("Relu", ["x"], ["r"], name="side"),
               helper.make_node("Expand", ["x", "s"], ["e"], name="grow"),
               helper.make_node("ReduceSum", ["e"], ["y"], keepdims=0)],
              [vi("x", [1, 1]), vi("s", [2], TensorProto.INT64)],
              [vi("y", None), vi("r", None)]).SerializeToString()
    feed = {"x": np.ones((1, 1), np.float32), "s": np.array([2048, 2048], np.int64)}  # 16 MiB
    limited = onnxplex.InferenceSession(m, _limited("8MiB", mode))
    default = onnxplex.InferenceSession(m)
    with pytest.raises(onnxplex.KernelExecutionError,
                       match=r"grow.*Expand's output .*16\.00 MiB.* more than the 8\.00 MiB "
                             r"allowed \(the session's session\.onnxplex\.max_tensor_bytes\)"):
        limited.run(None, feed)
    assert default.run(None, feed)[0] == 2048 * 2048
    # the session's own setting wins over the process's
    monkeypatch.setenv("ONNXPLEX_MAX_TENSOR_BYTES", str(1 << 20))
    assert onnxplex.InferenceSession(m, _limited(str(32 << 20), mode)).run(
        None, feed)[0] == 2048 * 2048
    with pytest.raises(onnxplex.KernelExecutionError, match="ONNXPLEX_MAX_TENSOR_BYTES"):
        default.run(None, feed)


def test_the_session_memory_limit_applies_at_load(monkeypatch):
    monkeypatch.delenv("ONNXPLEX_MAX_TENSOR_BYTES", raising=False)
    w = numpy_helper.from_array(np.ones((1024, 1024), np.float32), "w")   # 4 MiB
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [1024, 1024])],
              [vi("y", None)], [w]).SerializeToString()
    with pytest.raises(TensorSizeError, match=r"4\.00 MiB .* more than the 1\.00 MiB allowed "
                                              r"\(the session's"):
        onnxplex.InferenceSession(m, _limited("1 MiB"))
    assert onnxplex.InferenceSession(m, _limited("4MiB")).get_outputs()[0].name == "y"


@pytest.mark.parametrize("value", ["", "0", "-5", "0.5", "abc", "12 XB", "inf", "nan", "MiB"])
def test_a_bad_session_memory_limit_is_refused(value):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1])], [vi("y", None)])
    with pytest.raises(onnxplex.InvalidArgumentError,
                       match="session.onnxplex.max_tensor_bytes=.*expected a positive number"):
        onnxplex.InferenceSession(m.SerializeToString(), _limited(value))


def test_tokenizer_patterns_run_in_linear_time():
    # (the Tokenizer's RE2 patterns ran on Python's backtracking re, translated: (a+)+b over a
    # long text took exponential time)
    import onnxruntime

    node = helper.make_node("Tokenizer", ["x"], ["y"], domain="com.microsoft", mark=0,
                            mincharnum=1, pad_value="#", tokenexp="(a+)+b")
    m = model([node], [vi("x", [2], TensorProto.STRING)], [vi("y", None, TensorProto.STRING)],
              opsets=[*OPSET, helper.make_opsetid("com.microsoft", 1)]).SerializeToString()
    x = np.array(["a" * 3000 + "c", "xaab aaab"], dtype=object)
    t0 = time.perf_counter()
    (got,) = onnxplex.InferenceSession(m).run(None, {"x": x})
    assert time.perf_counter() - t0 < 5
    (want,) = onnxruntime.InferenceSession(m, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    np.testing.assert_array_equal(got, want)


def test_names_that_are_not_text_inside_local_functions():
    # (found by the fuzzer: inlining the body failed inside onnx-ir with a SerdeError)
    fn = helper.make_function("local", "F", ["a"], ["b"],
                              [helper.make_node("Add", ["QQQQ", "a"], ["b"])],
                              [helper.make_opsetid("", 17)])
    fn.node[0].input[0] = "a"
    fn.node.insert(0, helper.make_node("Neg", ["a"], ["QQQQ"]))
    fn.node[1].input[0] = "QQQQ"
    m = model([helper.make_node("F", ["x"], ["y"], domain="local")], [vi("x", [2])],
              [vi("y", [2])], opsets=[*OPSET, helper.make_opsetid("local", 1)], functions=[fn])
    data = m.SerializeToString().replace(b"QQQQ", b"\x80QQQ")
    assert_refused(data, InvalidModelError, "model-local function 'F': the name .* is not UTF-8")


@pytest.mark.parametrize("where", ["input", "value_info"])
def test_a_negative_dim_never_reaches_onnx_inference(where):
    # (found by the long fuzz run: onnx's GatherND inference crashes the interpreter on a
    # negative index dimension, declared as an input's or, found later, as a value info's;
    # each case runs in a child process, so that a crash fails the test instead of the suite)
    code = f"""
import numpy as np, onnxplex
from onnx import TensorProto, helper
shape = [2, -1] if {where!r} == "input" else [2, 1]
nodes = [helper.make_node("Identity", ["nd"], ["nd2"]),
         helper.make_node("GatherND", ["x", "nd2"], ["y"])]
vis = [helper.make_tensor_value_info("nd2", TensorProto.INT64, [2, -1])] \\
    if {where!r} == "value_info" else []
ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
       helper.make_tensor_value_info("nd", TensorProto.INT64, shape)]
outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]
g = helper.make_graph(nodes, "g", ins, outs, value_info=vis)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
x = np.arange(6, dtype=np.float32).reshape(2, 3)
y = onnxplex.InferenceSession(m.SerializeToString()).run(
    None, {{"x": x, "nd": np.array([[1], [0]], np.int64)}})[0]
print(y.tolist())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["[[3.0,", "4.0,", "5.0],", "[0.0,", "1.0,", "2.0]]"]


@pytest.mark.parametrize("axis, match", [(5, "'axis' must be in \\[-2 , 1\\]"),
                                         (-(2**40), "axis -1099511627776, beyond any tensor")])
def test_softmax_axis_outside_the_rank_is_refused_at_load(axis, match):
    # (found by the fuzzer: a huge axis failed inside the kernel at run time, where
    # onnxruntime wraps it into range and runs)
    m = model([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], [vi("x", [2, 3])],
              [vi("y", [2, 3])])
    assert_refused(m, InvalidModelError, match)


@pytest.mark.parametrize("x_shape", [[3, 5], None])
def test_body_output_contradicting_its_declared_shape_is_returned(x_shape, caplog):
    """torch's exporter declares both branches' outputs of an If with the shape one branch
    gives (scatter_reduce: ``[15]`` where the other branch keeps ``[3, 5]``); onnxruntime
    returns what the branch computes, and so does onnxplex, with a warning: at load where
    inference sees the contradiction (x of known shape), else at the run (this was a
    KernelExecutionError: a body's declarations were checked as if inference had made them).
    With x of no shape onnxruntime refuses the run (it allocates the branch output from its
    declared shape)."""
    flat = numpy_helper.from_array(np.array([15], np.int64), "flat")
    then_g = helper.make_graph([helper.make_node("Reshape", ["x", "flat"], ["a"])], "then", [],
                               [vi("a", [15])], initializer=[flat])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "else", [],
                               [vi("b", [15])])
    m = model([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
              [vi("c", [], TensorProto.BOOL), vi("x", x_shape)], [vi("y", None)])
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    with caplog.at_level("WARNING", logger="onnxplex"):
        sess = onnxplex.InferenceSession(m)
        for cond, want in ((True, x.reshape(15)), (False, x)):
            (y,) = sess.run(None, {"c": np.array(cond), "x": x})
            np.testing.assert_array_equal(y, want)
    assert ("declares 'b' with shape [15]" if x_shape else "the model declares [15]") \
        in caplog.text
    if x_shape:
        ort = pytest.importorskip("onnxruntime")
        (theirs,) = ort.InferenceSession(m.SerializeToString(),
                                         providers=["CPUExecutionProvider"]
                                         ).run(None, {"c": np.array(False), "x": x})
        np.testing.assert_array_equal(theirs, x)


def test_value_info_mistyping_an_initializer_is_dropped(caplog):
    """onnxruntime's float16 converter keeps a Resize's scales in float32 but leaves a
    value_info entry calling them float16 (dynamo-exported resizes): onnxruntime types an
    initializer by its tensor and runs the model; onnxplex refused it as a contradiction."""
    w = numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "w")
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [3])], [vi("y", [3])],
              inits=[w])
    m.graph.value_info.append(vi("w", [3], TensorProto.FLOAT16))
    x = np.array([1.0, -1.0, 0.5], np.float32)
    with caplog.at_level("WARNING", logger="onnxplex"):
        (y,) = onnxplex.InferenceSession(m).run(None, {"x": x})
    np.testing.assert_array_equal(y, x + [1, 2, 3])
    assert "gives initializer 'w' type float16" in caplog.text
    ort = pytest.importorskip("onnxruntime")
    (theirs,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]
                                     ).run(None, {"x": x})
    np.testing.assert_array_equal(theirs, y)
