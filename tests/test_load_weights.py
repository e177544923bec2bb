"""Loading a model file reads each large weight once, straight into its own array (_wire.py),
with the same results and the same refusals as parsing the whole file."""

from __future__ import annotations

import gc
import logging
import os

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex import InvalidModelError
from onnxplex.framework.plugins import unregister_provider
from onnxplex.graph import wire as _wire
from onnxplex.graph.model import LazyConst, load_model

RNG = np.random.default_rng(7)
BIG = _wire.SPLIT_MIN_BYTES


def _weights() -> dict[str, np.ndarray]:
    return {
        "w32": RNG.standard_normal((64, 512)).astype(np.float32),     # 128 KiB
        "w16": RNG.standard_normal((64, 1024)).astype(np.float16),    # 128 KiB
        "i64": RNG.integers(-5, 5, (64, 256)).astype(np.int64),       # 128 KiB
        "small": RNG.standard_normal((64, 4)).astype(np.float32),     # stays in the proto
    }


def _model(weights: dict[str, np.ndarray], odd_name: str = "") -> onnx.ModelProto:
    nodes = [
        helper.make_node("MatMul", ["x", "w32"], ["a"]),
        helper.make_node("Cast", ["w16"], ["w16f"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["x2", "w16f"], ["b"]),
        helper.make_node("Cast", ["i64"], ["i64f"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["x3", "i64f"], ["c"]),
        helper.make_node("MatMul", ["x4", "small"], ["d"]),
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in weights.items()]
    if odd_name:   # a name whose length shifts the raw data off 4-byte alignment
        inits[0].name = odd_name
        nodes[0].input[1] = odd_name
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, k])
         for n, k in (("x", 64), ("x2", 64), ("x3", 64), ("x4", 64))],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "abcd"],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds() -> dict[str, np.ndarray]:
    return {n: RNG.standard_normal((2, 64)).astype(np.float32) for n in ("x", "x2", "x3", "x4")}


@pytest.mark.parametrize("odd_name", ["", "w"])
def test_weights_are_read_into_their_own_arrays(tmp_path, odd_name):
    weights = _weights()
    proto = _model(weights, odd_name)
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)

    split = _wire.split_weights(str(path), "m.onnx")
    assert split is not None and len(split.offsets) == 3   # "small" stays in the proto
    assert len(split.proto_bytes) < os.path.getsize(path) - 3 * BIG

    model = load_model(path)
    names = {"w32": odd_name or "w32", "w16": "w16", "i64": "i64", "small": "small"}
    for key, name in names.items():
        t = model.ir.graph.initializers[name].const_value
        arr = t.numpy()
        np.testing.assert_array_equal(arr, weights[key])
        assert arr.dtype == weights[key].dtype
        if key != "small":
            # read from the file on demand, each time into its own aligned array: neither
            # protobuf's bytes nor a view of the file, and nothing kept by the tensor
            assert isinstance(t, ir.LazyTensor) and arr.flags.aligned and arr.flags.owndata
            assert t.numpy() is not arr

    feeds = _feeds()
    from_path = onnxplex.InferenceSession(str(path)).run(None, feeds)
    from_bytes = onnxplex.InferenceSession(proto.SerializeToString()).run(None, feeds)
    for a, b in zip(from_path, from_bytes):
        np.testing.assert_array_equal(a, b)


def test_a_bfloat16_weight_is_read_from_the_file(tmp_path):
    """A large bfloat16 weight cut out of the model file is read like any other (the buffer
    protocol does not take ml_dtypes' types: reading one into its array raised "cannot
    include dtype 'E' in a buffer", and a bfloat16 model did not load from its path)."""
    import ml_dtypes

    w = RNG.standard_normal((128, 512)).astype(ml_dtypes.bfloat16)    # 128 KiB: cut out
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 128])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, None)],
        [numpy_helper.from_array(w, "w")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    split = _wire.split_weights(str(path), "m.onnx")
    assert split is not None and len(split.offsets) == 1
    x = RNG.standard_normal((2, 128)).astype(ml_dtypes.bfloat16)
    (y,) = onnxplex.InferenceSession(str(path)).run(None, {"x": x})
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(y.astype(np.float32),
                               x.astype(np.float32) @ w.astype(np.float32), rtol=2e-2, atol=5e-2)


def test_explicit_default_data_location_is_split(tmp_path):
    """torch's exporter writes data_location = DEFAULT on every tensor."""
    proto = _model(_weights())
    for t in proto.graph.initializer:
        t.data_location = TensorProto.DEFAULT
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    split = _wire.split_weights(str(path), "m.onnx")
    assert split is not None and len(split.offsets) == 3
    onnxplex.InferenceSession(str(path)).run(None, _feeds())


def test_mismatched_raw_data_is_left_to_the_ordinary_checks(tmp_path):
    proto = _model(_weights())
    proto.graph.initializer[0].raw_data = proto.graph.initializer[0].raw_data[:-4]
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    split = _wire.split_weights(str(path), "m.onnx")
    assert split is not None and len(split.offsets) == 2   # w32 was not cut out
    with pytest.raises(InvalidModelError, match="'w32'"):
        onnxplex.InferenceSession(str(path))


def test_external_data_and_truncation_are_unchanged(tmp_path):
    weights = _weights()
    proto = _model(weights)
    data = proto.SerializeToString()   # onnx.save below moves the weights out of ``proto``
    onnx.save(proto, tmp_path / "ext.onnx", save_as_external_data=True,
              all_tensors_to_one_file=True, location="ext.bin", size_threshold=1024)
    assert _wire.split_weights(str(tmp_path / "ext.onnx"), "ext.onnx") is None
    model = load_model(tmp_path / "ext.onnx")
    np.testing.assert_array_equal(model.ir.graph.initializers["w32"].const_value.numpy(),
                                  weights["w32"])

    (tmp_path / "cut.onnx").write_bytes(data[: len(data) - BIG])
    assert _wire.split_weights(str(tmp_path / "cut.onnx"), "cut.onnx") is None
    with pytest.raises(InvalidModelError, match="truncated"):
        load_model(tmp_path / "cut.onnx")


def test_weights_cut_out_beside_external_data_of_its_own(tmp_path):
    """A file whose large weights are cut out and that has external data of its own: the
    latter still resolves against the model's folder."""
    weights = _weights()
    proto = _model(weights)
    own = proto.graph.initializer[3]   # "small", moved to small.bin by hand
    (tmp_path / "small.bin").write_bytes(own.raw_data)
    own.ClearField("raw_data")
    own.data_location = TensorProto.EXTERNAL
    own.external_data.add(key="location", value="small.bin")
    (tmp_path / "m.onnx").write_bytes(proto.SerializeToString())
    split = _wire.split_weights(str(tmp_path / "m.onnx"), "m.onnx")
    assert split is not None and len(split.offsets) == 3
    sess = onnxplex.InferenceSession(str(tmp_path / "m.onnx"))
    feeds = _feeds()
    d = sess.run(["d"], feeds)[0]
    np.testing.assert_allclose(d, feeds["x4"] @ weights["small"], rtol=1e-5)


def test_a_model_reached_through_a_symlink_from_another_folder(tmp_path, caplog):
    weights = _weights()
    (tmp_path / "real").mkdir()
    (tmp_path / "link").mkdir()
    onnx.save(_model(weights), tmp_path / "real" / "m.onnx")
    os.symlink(tmp_path / "real" / "m.onnx", tmp_path / "link" / "m.onnx")
    with caplog.at_level(logging.INFO, logger="onnxplex.graph.model"):
        model = load_model(tmp_path / "link" / "m.onnx")
    np.testing.assert_array_equal(model.ir.graph.initializers["w32"].const_value.numpy(),
                                  weights["w32"])
    # read whole (loading reads nothing outside the folder it was named in), and it says so
    assert "read whole" in caplog.text


def test_optimized_model_keeps_the_weights(tmp_path):
    """Weights read from the file are written back in full by optimized_model_filepath."""
    weights = _weights()
    path = tmp_path / "m.onnx"
    onnx.save(_model(weights), path)
    so = onnxplex.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    onnxplex.InferenceSession(str(path), so)
    saved = onnx.load(tmp_path / "opt.onnx")
    stored = {t.name: numpy_helper.to_array(t) for t in saved.graph.initializer}
    np.testing.assert_array_equal(stored["w32"], weights["w32"])


def _single_matmul(tmp_path, w: np.ndarray, read_too: bool = False) -> str:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if read_too:   # a second consumer that reads the weight at run time
        nodes.append(helper.make_node("Mul", ["w", "s"], ["ws"]))
        outputs.append(helper.make_tensor_value_info("ws", TensorProto.FLOAT, None))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, w.shape[0]])]
    if read_too:
        inputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, []))
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(w, "w")])
    path = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _held_constants(sess) -> set[str]:
    plan = sess._exec
    return {plan.slot_names[s] for s in plan.constants}


class _Packing(onnxplex.ExecutionProvider):
    """Claims MatMul with a constant B, packs a copy of B at compile time and marks input 1
    prepacked; its kernel checks it is given None there."""

    name = "packing"

    def get_capability(self, graph):
        return onnxplex.Capability(tuple(
            onnxplex.NodeGroup((n.index,)) for n in graph.nodes
            if n.op_type == "MatMul" and n.input(1) is not None and n.input(1).is_const))

    def compile(self, subgraph):
        packed = np.array(subgraph.inputs[1].const, order="F")   # "packed": a private copy

        def kernel(x, w):
            assert w is None, "a prepacked input was passed"
            return x @ packed

        return onnxplex.prepacked(kernel, 1)


@pytest.fixture
def packing():
    onnxplex.register_provider(_Packing)
    yield
    unregister_provider("packing")


def test_a_prepacked_weight_is_released(tmp_path, packing):
    """A weight every consumer prepacked is not held by the session, and the array read from
    the file is freed once compile is done (onnxruntime frees such initializers too)."""
    w = RNG.standard_normal((256, 128)).astype(np.float32)    # 128 KiB: read lazily
    x = RNG.standard_normal((2, 256)).astype(np.float32)
    sess = onnxplex.InferenceSession(_single_matmul(tmp_path, w), providers=["packing"])
    assert sess.get_provider_assignment().assignment()["mm"] == "packing"
    stored = sess.model.value_info("w").stored
    assert isinstance(stored, LazyConst)
    assert "w" not in _held_constants(sess)
    gc.collect()
    assert stored._ref is None or stored._ref() is None, "the weight array is still alive"
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


def test_a_weight_is_read_once_while_a_session_is_built(tmp_path, monkeypatch, packing):
    """Every asker of a weight still in the file (the optimizer's tests, the fusions, the
    kernels' packing) gets the memory read once for the build, read-only; the build does not
    keep it (test_a_prepacked_weight_is_released), and a session built later reads again."""
    reads: list[int] = []
    real = _wire.pread_tensor

    def counted(fd, offset, shape, dtype):
        reads.append(offset)
        return real(fd, offset, shape, dtype)

    monkeypatch.setattr(_wire, "pread_tensor", counted)
    w = RNG.standard_normal((256, 128)).astype(np.float32)
    path = _single_matmul(tmp_path, w)
    asked: list[np.ndarray] = []

    class Asking(_Packing):
        name = "asking"

        def get_capability(self, graph):   # asks twice before compile asks again
            asked.extend(n.input(1).const for n in graph.nodes for _ in range(2))
            return super().get_capability(graph)

    onnxplex.register_provider(Asking)
    try:
        sess = onnxplex.InferenceSession(path, providers=["asking"])
    finally:
        unregister_provider("asking")
    assert len(reads) == 1 and len(asked) >= 2
    assert all(np.shares_memory(a, asked[0]) and not a.flags.writeable for a in asked)
    np.testing.assert_array_equal(asked[0], w)
    del asked[:]
    gc.collect()
    assert "w" not in _held_constants(sess)
    stored = sess.model.value_info("w").stored
    assert stored._ref is None or stored._ref() is None, "the build kept the weight"
    onnxplex.InferenceSession(path, providers=["packing"])
    assert len(reads) == 2   # (a new build reads it again)


def test_a_weight_read_at_run_time_is_held(tmp_path):
    """A constant that some consumer reads at run time stays in the session (read once)."""
    w = RNG.standard_normal((256, 128)).astype(np.float32)
    x = RNG.standard_normal((2, 256)).astype(np.float32)
    sess = onnxplex.InferenceSession(_single_matmul(tmp_path, w, read_too=True))
    assert "w" in _held_constants(sess)
    y, ws = sess.run(None, {"x": x, "s": np.float32(2)})
    np.testing.assert_array_equal(ws, w * np.float32(2))
    np.testing.assert_allclose(y, x @ w, rtol=1e-4, atol=1e-4)


def test_a_weight_whose_file_changed_is_refused(tmp_path):
    """A weight read on demand checks that the model file is the one loaded."""
    w = RNG.standard_normal((256, 128)).astype(np.float32)
    path = _single_matmul(tmp_path, w)
    model = load_model(path)
    np.testing.assert_array_equal(model.value_info("w").const, w)
    _single_matmul(tmp_path, w[:, :64].copy())    # the same path, other contents
    with pytest.raises(InvalidModelError, match="changed after the model was loaded"):
        _ = model.value_info("w").const


def test_prepacked_marks_any_callable():
    from onnxplex import prepacked

    def kernel(a, b):
        return a

    assert prepacked(kernel, 1).prepacked_inputs == frozenset({1})
    marked = prepacked(max, 0)                   # a builtin takes no attributes: wrapped
    assert marked.prepacked_inputs == frozenset({0}) and marked(1, 2) == 2

    def other(a):
        return a

    assert not hasattr(prepacked(other), "prepacked_inputs")   # no positions: unmarked


def test_concatenated_weights_stay_in_the_file(tmp_path):
    """The attention fusion concatenates the Q/K/V weights into one initializer; when they
    are read from the file, so is their concatenation (nothing holds a copy)."""
    from onnxplex.optimizer._fusions_transformer import _fold_constant_nodes
    q, k = (RNG.standard_normal((128, 128)).astype(np.float32) for _ in range(2))
    graph = helper.make_graph(
        [helper.make_node("Concat", ["q", "k"], ["qk"], axis=1),
         helper.make_node("MatMul", ["x", "qk"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(q, "q"), numpy_helper.from_array(k, "k")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    model = load_model(path)
    _fold_constant_nodes(model.ir.graph)
    (fused,) = (v for v in model.ir.graph.initializers.values() if v.name == "qk")
    assert isinstance(fused.const_value, ir.LazyTensor)
    np.testing.assert_array_equal(fused.const_value.numpy(), np.concatenate([q, k], axis=1))
