"""Session API: feeds, outputs, metadata, options, profiling (null provider: no numerics)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from graphs import chain
from onnx import TensorProto, helper

import onnxplex
from onnxplex import InvalidArgumentError, InvalidFeedError, SessionOptions


def _two_input_model():
    node = helper.make_node("Add", ["a", "b"], ["y"], name="add")
    g = helper.make_graph([node], "two_inputs",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", 4]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests",
                          doc_string="a doc")
    helper.set_model_props(m, {"author": "onnxplex"})
    return m


@pytest.fixture
def sess(null_provider):
    so = SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    return onnxplex.InferenceSession(_two_input_model(), so, providers=[("null",
                                                                         {"claim": "Add"})])


def test_inputs_outputs_and_metadata(sess):
    (a, _), (y,) = sess.get_inputs(), sess.get_outputs()
    assert (a.name, a.type, a.shape) == ("a", "tensor(float)", ["batch", 4])
    assert (y.name, y.type, y.shape) == ("y", "tensor(float)", ["batch", 4])
    assert str(a) == "NodeArg(name='a', type='tensor(float)', shape=['batch', 4])"
    meta = sess.get_modelmeta()
    assert meta.producer_name == "tests" and meta.graph_name == "two_inputs"
    assert meta.custom_metadata_map == {"author": "onnxplex"}
    assert sess.get_providers() == ["null"]
    assert sess.get_provider_options() == {"null": {"claim": "Add", "fuse": "0"}}


def test_run_accepts_readonly_and_noncontiguous(sess):
    a = np.ones((6, 4), np.float32)[::2]
    b = np.ones((3, 4), np.float32)
    b.flags.writeable = False
    (y,) = sess.run(None, {"a": a, "b": b})
    assert y.shape == (3, 4)
    assert sess.run(["y"], {"a": a, "b": b})[0].shape == (3, 4)


@pytest.mark.parametrize("feed, message", [
    ({"a": np.ones((2, 4), np.float32)},
     r"Required inputs \(\['b'\]\) are missing from input feed \(\['a'\]\)"),
    ({"a": np.ones((2, 4), np.float32), "b": np.ones((2, 4), np.float32),
      "c": np.ones(1, np.float32)}, "Invalid input name: c"),
    ({"a": np.ones((2, 4), np.float64), "b": np.ones((2, 4), np.float32)},
     r"Unexpected input data type. Actual: \(tensor\(double\)\) , expected: "
     r"\(tensor\(float\)\): input 'a'"),
    ({"a": np.ones((2, 5), np.float32), "b": np.ones((2, 5), np.float32)},
     r"invalid dimensions for input: a .*\n index: 1 Got: 5 Expected: 4\n"),
    ({"a": np.ones((2, 4, 1), np.float32), "b": np.ones((2, 4), np.float32)},
     "Invalid rank for input: a Got: 3 Expected: 2"),
    ({"a": np.ones((2, 4), np.float32), "b": np.ones((3, 4), np.float32)},
     r"input 'b': dimension 0 \('batch'\) is 3, but input 'a' has 'batch' = 2"),
])
def test_bad_feeds_are_named(sess, feed, message):
    with pytest.raises(InvalidFeedError, match=message):
        sess.run(None, feed)


def test_unknown_output_name(sess):
    feed = {"a": np.ones((1, 4), np.float32), "b": np.ones((1, 4), np.float32)}
    with pytest.raises(InvalidArgumentError, match="Invalid output name:z"):
        sess.run(["z"], feed)


def test_unknown_provider_and_option(null_provider):
    with pytest.raises(InvalidArgumentError, match="unknown execution provider 'nope'"):
        onnxplex.InferenceSession(chain(["Relu"]), providers=["nope"])
    with pytest.raises(onnxplex.ProviderOptionError, match=r"unknown option\(s\) \['bogus'\]"):
        onnxplex.InferenceSession(chain(["Relu"]), providers=[("null", {"bogus": 1})])
    with pytest.raises(onnxplex.ProviderOptionError, match="must be bool"):
        onnxplex.InferenceSession(chain(["Relu"]), providers=[("null", {"fuse": "maybe"})])


def test_unavailable_provider_is_skipped_with_a_warning():
    with pytest.warns(RuntimeWarning, match="kleidi_sme2.*not available"):
        s = onnxplex.InferenceSession(chain(["Relu"]), providers=["kleidi_sme2", "cpu_mlas"])
    assert s.get_providers() == ["cpu_mlas"]


def test_profiling_writes_ort_format(null_provider, tmp_path):
    so = SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    s = onnxplex.InferenceSession(chain(["Relu", "Sigmoid"]), so,
                                  providers=[("null", {"claim": "Relu,Sigmoid"})])
    s.run(None, {"x": np.ones((2, 3), np.float32)})
    path = s.end_profiling()
    events = json.loads(open(path).read())
    nodes = [e for e in events if e["cat"] == "Node"]
    assert [e["name"] for e in nodes] == ["A_kernel_time", "B_kernel_time"]
    assert nodes[0]["args"]["provider"] == "null" and nodes[0]["args"]["op_name"] == "Relu"
    assert nodes[0]["args"]["input_type_shape"] == [{"float": [2, 3]}]
    assert {e["ph"] for e in events} == {"X"}
    assert any(e["name"] == "model_run" for e in events)
    # session creation and its steps, each inside it
    steps = {e["name"]: e for e in events if e["cat"] == "Session"}
    init = steps["session_initialization"]
    for name in ("model_loading", "graph_optimization", "partition_and_compile",
                 "execution_plan"):
        e = steps[name]
        assert init["ts"] <= e["ts"] and e["ts"] + e["dur"] <= init["ts"] + init["dur"] + 1
    from onnxplex.tools.perf import profile_text, summarize_profile

    summary = summarize_profile(events)
    assert [r["name"] for r in summary["session_creation"]][1:] == [
        "model_loading", "graph_optimization", "partition_and_compile", "execution_plan"]
    assert "session creation:" in profile_text(summary)


def test_optimized_model_is_saved(null_provider, tmp_path):
    so = SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    onnxplex.InferenceSession(chain(["Identity", "Relu"]), so,
                              providers=[("null", {"claim": "Relu"})])
    saved = onnx.load(so.optimized_model_filepath)
    assert [n.op_type for n in saved.graph.node] == ["Relu"]


def test_outputs_are_fresh_writeable_arrays():
    # Identity of an input and a constant output: neither may alias the caller's data.
    x_out = helper.make_node("Identity", ["x"], ["y"])
    c = helper.make_node("Constant", [], ["c"], value=onnx.numpy_helper.from_array(
        np.arange(3, dtype=np.float32)))
    g = helper.make_graph([x_out, c], "alias",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]),
                           helper.make_tensor_value_info("c", TensorProto.FLOAT, [3])])
    sess = onnxplex.InferenceSession(helper.make_model(g, opset_imports=[
        helper.make_opsetid("", 17)]))
    x = np.ones(3, np.float32)
    y, cval = sess.run(None, {"x": x})
    assert not np.shares_memory(x, y) and y.flags.writeable and cval.flags.writeable
    cval[0] = 42
    assert sess.run(["c"], {"x": x})[0][0] == 0


def test_string_constants_compare_with_string_feeds():
    eq = helper.make_node("Equal", ["s", "k"], ["y"])
    k = onnx.helper.make_tensor("k", TensorProto.STRING, [2], [b"a", b"b"])
    g = helper.make_graph([eq], "strings",
                          [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.BOOL, [2])],
                          initializer=[k])
    sess = onnxplex.InferenceSession(helper.make_model(g, opset_imports=[
        helper.make_opsetid("", 19)]))   # (Equal takes strings from opset 19)
    (y,) = sess.run(None, {"s": np.array(["a", "c"], dtype=object)})
    assert y.tolist() == [True, False]


def test_session_creation_leaves_the_garbage_collector_as_it_found_it():
    """Building pauses the cyclic collector (allocation-heavy); it is back on after, also when
    the build fails, and stays off if the caller had turned it off."""
    import gc

    model = chain(["Relu"]).SerializeToString()
    assert gc.isenabled()
    onnxplex.InferenceSession(model, providers=["cpu_mlas"])
    assert gc.isenabled()
    with pytest.raises(onnxplex.OnnxplexError):
        onnxplex.InferenceSession(b"not a model", providers=["cpu_mlas"])
    assert gc.isenabled()
    gc.disable()
    try:
        onnxplex.InferenceSession(model, providers=["cpu_mlas"])
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_dropped_session_is_freed_without_the_cyclic_collector():
    """A session is in no reference cycle: its plan, kernels and packed weights go when the
    last reference to it does (as onnxruntime's), not whenever the cyclic collector next runs
    (hundreds of MB for a large model, freed in the middle of whatever runs then). Subgraph
    bodies are compiled through the session's provider context, which must not hold it."""
    import gc
    import weakref

    from graphs import small_cnn

    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    branchy = helper.make_model(helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17)])
    was = gc.isenabled()
    gc.disable()
    try:
        for model in (small_cnn(), branchy):
            sess = onnxplex.InferenceSession(model.SerializeToString(), providers=["cpu_mlas"])
            refs = [weakref.ref(sess), weakref.ref(sess._plan), weakref.ref(sess._exec)]
            del sess
            assert [r() for r in refs] == [None, None, None]
    finally:
        if was:
            gc.enable()


@pytest.mark.parametrize("op", ["Identity", "Reshape", "Flatten", "Squeeze"])
def test_outputs_never_alias_a_feed(op):
    """Kernels may return a feed or a view of it (a reshape); the caller gets its own copy,
    whichever way the output came to share the feed's memory."""
    inputs = ["x", "shape"] if op == "Reshape" else ["x"]
    node = helper.make_node(op, inputs, ["y"], **({"axis": 0} if op == "Flatten" else {}))
    shape = onnx.numpy_helper.from_array(np.array([6], np.int64), "shape")
    out_shape = {"Identity": [2, 3], "Reshape": [6], "Flatten": [1, 6], "Squeeze": [2, 3]}[op]
    g = helper.make_graph([node], "alias",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [1, 2, 3] if op == "Squeeze" else
                                                         [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          initializer=[shape] if op == "Reshape" else [])
    sess = onnxplex.InferenceSession(helper.make_model(g, opset_imports=[
        helper.make_opsetid("", 17)]))
    x = np.arange(6, dtype=np.float32).reshape([1, 2, 3] if op == "Squeeze" else [2, 3])
    for _ in range(2):   # (the second run takes the plan's settled fast path)
        (y,) = sess.run(None, {"x": x})
        assert not np.shares_memory(x, y) and y.flags.writeable
        assert y.reshape(-1).tolist() == list(range(6))


def test_object_array_feeds_a_string_input_as_is_and_str_arrays_convert():
    node = helper.make_node("Identity", ["s"], ["y"])
    g = helper.make_graph([node], "s", [helper.make_tensor_value_info("s", TensorProto.STRING,
                                                                      [None, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.STRING, [None, 2])])
    sess = onnxplex.InferenceSession(helper.make_model(g, opset_imports=[
        helper.make_opsetid("", 17)]))
    for feed in (np.array([["a", "b"]], dtype=object), np.array([["a", "b"]])):
        (y,) = sess.run(None, {"s": feed})
        assert y.dtype == object and y.tolist() == [["a", "b"]]
    with pytest.raises(onnxplex.InvalidFeedError, match="Got: 1 Expected: 2"):
        sess.run(None, {"s": np.array(["a", "b"], dtype=object)})


def _matmul_model(rows: int, cols: int) -> bytes:
    w = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) / (rows * cols)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cols])],
                          [onnx.numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _full_collections(fn) -> int:
    import gc

    seen = []

    def count(phase, info):
        if phase == "start" and info["generation"] == 2:
            seen.append(1)

    gc.callbacks.append(count)
    try:
        fn()
    finally:
        gc.callbacks.remove(count)
    return len(seen)


@pytest.mark.parametrize("rebuild", [False, True])
def test_a_dropped_session_gives_its_weights_back_at_once(rebuild):
    """onnx-ir's graph is cyclic: a dropped session of a model with large in-memory weights
    runs the collector (as set_providers does for the session it replaces), so the weights
    are freed when the session goes, not when the collector next gets to them."""
    import weakref

    model = _matmul_model(2048, 2100)   # 17 MB of weights, above the threshold
    sess = onnxplex.InferenceSession(model)
    graph = weakref.ref(sess.model.ir.graph)
    x = np.ones((1, 2048), np.float32)
    expected = sess.run(None, {"x": x})[0]
    if rebuild:
        sess.set_providers(["cpu_mlas"])
        assert graph() is None
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], expected)
        graph = weakref.ref(sess.model.ir.graph)
    assert _full_collections(lambda: sess.__dict__.get("_model")) == 0  # noqa: F821 (runs before the del)
    del sess
    assert graph() is None


def test_a_small_session_is_dropped_without_a_collection():
    import gc

    sess = onnxplex.InferenceSession(_matmul_model(8, 8))
    gc.collect()

    def drop():
        nonlocal sess
        del sess

    assert _full_collections(drop) == 0
