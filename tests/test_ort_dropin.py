"""``import onnxplex as ort``: onnxruntime user code runs unchanged.

Every test in the first part is user code written against onnxruntime's Python API and runs
twice, once with ``onnxruntime`` and once with ``onnxplex`` as the ``ort`` module: the
onnxruntime run proves that the expectations written here are onnxruntime's real behaviour,
the onnxplex run that onnxplex behaves the same. Where a value cannot be written down
(NodeArg shapes of odd models), onnxplex is compared with onnxruntime directly. The last part
covers what onnxplex deliberately does differently (stricter errors, CPU only), each with
the reason.

Error classes and messages, converted feeds, provider-name comparisons and the SessionOptions
that change a model as it loads are in ``test_ort_dropin_errors.py``. Deliberate differences,
not tested as equal: provider names print as onnxplex's (``cpu_mlas``; they compare equal to
``CPUExecutionProvider``), ``SessionOptions.profile_file_prefix``'s default
(``onnxplex_profile``), and unknown provider names or provider options (errors in onnxplex;
onnxruntime warns or ignores).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex

ORT_MODULES = ["onnxruntime", "onnxplex"]


@pytest.fixture(params=ORT_MODULES)
def ort(request):
    """The module user code calls ``ort``: onnxruntime itself, then onnxplex."""
    return importlib.import_module(request.param)


@pytest.fixture(autouse=True)
def _restore_logger_levels():
    """set_default_logger_severity is process-wide: put both loggers back afterwards."""
    level = logging.getLogger("onnxplex").level
    yield
    logging.getLogger("onnxplex").setLevel(level)
    importlib.import_module("onnxruntime").set_default_logger_severity(2)  # its default


# --------------------------------------------------------------------------------------------
# Models (IR 8 / opset 17: loadable by both)
# --------------------------------------------------------------------------------------------

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 2)).astype(np.float32)
B = RNG.standard_normal(2).astype(np.float32)


def dense_model() -> onnx.ModelProto:
    """x[N,4] -> y = Relu(x @ W + b), z = Neg(x). ``b`` is an initializer that is also a graph
    input, so it is overridable; the model carries metadata of every kind."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
             helper.make_node("Add", ["xw", "b"], ["xwb"], name="add"),
             helper.make_node("Relu", ["xwb"], ["y"], name="relu"),
             helper.make_node("Neg", ["x"], ["z"], name="neg")]
    graph = helper.make_graph(
        nodes, "dense_graph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 4])],
        initializer=[numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "b")],
        doc_string="the graph's doc")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8, producer_name="dropin-tests",
                              producer_version="1.2", domain="ai.onnxplex.test",
                              model_version=7, doc_string="the model's doc")
    helper.set_model_props(model, {"author": "onnxplex", "license": "Apache-2.0"})
    return model


def expected(x: np.ndarray, b: np.ndarray = B) -> tuple[np.ndarray, np.ndarray]:
    return np.maximum(x @ W + b, 0), -x


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("dropin") / "dense.onnx"
    onnx.save(dense_model(), path)
    return str(path)


X = RNG.standard_normal((3, 4)).astype(np.float32)


def cpu_session(ort, model, so=None):
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


# --------------------------------------------------------------------------------------------
# Module level, options
# --------------------------------------------------------------------------------------------


def test_module_level_functions(ort):
    available = ort.get_available_providers()
    assert isinstance(available, list)
    assert "CPUExecutionProvider" in available
    assert available.index("CPUExecutionProvider") == len(available) - 1  # CPU comes last
    assert "CPUExecutionProvider" in ort.get_all_providers()
    assert ort.get_device() == "CPU"
    assert isinstance(ort.get_version_string(), str)
    assert ort.set_default_logger_severity(3) is None
    with pytest.raises(Exception, match="[Ss]everity"):
        ort.set_default_logger_severity(7)


SESSION_OPTION_DEFAULTS = {
    "enable_cpu_mem_arena": True, "enable_mem_pattern": True, "enable_mem_reuse": True,
    "enable_profiling": False, "inter_op_num_threads": 0, "intra_op_num_threads": 0,
    "log_severity_level": -1, "log_verbosity_level": 0, "logid": "",
    "optimized_model_filepath": "", "use_deterministic_compute": False,
    "use_per_session_threads": True,
}


def test_session_options(ort):
    so = ort.SessionOptions()
    assert {k: getattr(so, k) for k in SESSION_OPTION_DEFAULTS} == SESSION_OPTION_DEFAULTS
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert so.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert so.execution_order == ort.ExecutionOrder.DEFAULT
    assert [int(getattr(ort.GraphOptimizationLevel, n)) for n in (
        "ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_LAYOUT",
        "ORT_ENABLE_ALL")] == [0, 1, 2, 3, 99]
    assert int(ort.ExecutionMode.ORT_PARALLEL) == 1
    assert int(ort.ExecutionOrder.PRIORITY_BASED) == 1

    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    so.intra_op_num_threads = 2
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    assert so.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert so.intra_op_num_threads == 2
    assert not so.has_providers()
    with pytest.raises(AttributeError, match="intra_op_threads"):
        so.intra_op_threads = 2  # a typo is an error, not a silently ignored setting

    so.add_session_config_entry("session.disable_prepacking", "1")
    assert so.get_session_config_entry("session.disable_prepacking") == "1"
    with pytest.raises(Exception, match="nope"):
        so.get_session_config_entry("nope")


def test_run_options(ort):
    ro = ort.RunOptions()
    assert (ro.log_severity_level, ro.log_verbosity_level, ro.logid, ro.terminate,
            ro.only_execute_path_to_fetches) == (-1, 0, "", False, False)
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    assert ro.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    with pytest.raises(Exception, match="nope"):
        ro.get_run_config_entry("nope")
    with pytest.raises(AttributeError):
        ro.terminated = True


# --------------------------------------------------------------------------------------------
# InferenceSession
# --------------------------------------------------------------------------------------------


def test_inputs_outputs_overridables_and_metadata(ort, model_path):
    sess = cpu_session(ort, model_path)
    assert [(a.name, a.type, a.shape) for a in sess.get_inputs()] == [
        ("x", "tensor(float)", ["N", 4])]
    assert [(a.name, a.type, a.shape) for a in sess.get_outputs()] == [
        ("y", "tensor(float)", ["N", 2]), ("z", "tensor(float)", ["N", 4])]
    assert str(sess.get_inputs()[0]) == "NodeArg(name='x', type='tensor(float)', shape=['N', 4])"
    assert [(a.name, a.type, a.shape) for a in sess.get_overridable_initializers()] == [
        ("b", "tensor(float)", [2])]
    meta = sess.get_modelmeta()
    assert (meta.producer_name, meta.graph_name, meta.domain, meta.description,
            meta.graph_description, meta.version) == (
        "dropin-tests", "dense_graph", "ai.onnxplex.test", "the model's doc",
        "the graph's doc", 7)
    assert meta.custom_metadata_map == {"author": "onnxplex", "license": "Apache-2.0"}


def test_model_version_unset_is_int64_max(ort):
    model = dense_model()
    model.ClearField("model_version")
    assert cpu_session(ort, model.SerializeToString()).get_modelmeta().version == 2**63 - 1


def test_run_all_some_and_reordered_outputs(ort, model_path):
    sess = cpu_session(ort, model_path)
    y, z = expected(X)
    for names in (None, []):
        got = sess.run(names, {"x": X})
        assert len(got) == 2
        np.testing.assert_allclose(got[0], y, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got[1], z)
    (only_z,) = sess.run(["z"], {"x": X})
    np.testing.assert_array_equal(only_z, z)
    z2, y2 = sess.run(["z", "y"], {"x": X})
    np.testing.assert_array_equal(z2, z)
    np.testing.assert_allclose(y2, y, rtol=1e-5, atol=1e-6)
    # feeding an overridable initializer replaces it for this run only
    b2 = np.array([10.0, -10.0], np.float32)
    (y3,) = sess.run(["y"], {"x": X, "b": b2})
    np.testing.assert_allclose(y3, expected(X, b2)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sess.run(["y"], {"x": X})[0], y, rtol=1e-5, atol=1e-6)
    assert isinstance(sess.run(None, {"x": X}, ort.RunOptions()), list)


def test_session_from_bytes_with_options(ort):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(dense_model().SerializeToString(), sess_options=so,
                                providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(["y"], {"x": X})[0], expected(X)[0], rtol=1e-5,
                               atol=1e-6)
    assert sess.get_session_options().intra_op_num_threads == 1


@pytest.mark.parametrize("providers, provider_options", [
    (["CPUExecutionProvider"], None),
    ([("CPUExecutionProvider", {})], None),
    (["CPUExecutionProvider"], [{}]),
    (None, None),
])
def test_provider_arguments(ort, model_path, providers, provider_options):
    sess = ort.InferenceSession(model_path, providers=providers,
                                provider_options=provider_options)
    assert "CPUExecutionProvider" in sess.get_providers()
    opts = sess.get_provider_options()
    assert "CPUExecutionProvider" in opts
    cpu = opts["CPUExecutionProvider"]
    assert isinstance(cpu, dict) and all(isinstance(k, str) and isinstance(v, str)
                                         for k, v in cpu.items())
    assert opts.get("CPUExecutionProvider") == cpu
    np.testing.assert_array_equal(sess.run(["z"], {"x": X})[0], -X)


def test_missing_accelerator_is_skipped_with_a_warning(ort, model_path):
    # The most common provider list in onnxruntime user code, on a machine without CUDA.
    with pytest.warns(Warning, match="CUDAExecutionProvider"):
        sess = ort.InferenceSession(model_path,
                                    providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert "CPUExecutionProvider" in sess.get_providers()
    assert "CUDAExecutionProvider" not in sess.get_providers()
    np.testing.assert_array_equal(sess.run(["z"], {"x": X})[0], -X)


def test_set_providers(ort, model_path):
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    before = sess.run(None, {"x": X})
    sess.set_providers(["CPUExecutionProvider"])
    assert "CPUExecutionProvider" in sess.get_providers()
    for a, b in zip(before, sess.run(None, {"x": X})):
        np.testing.assert_array_equal(a, b)
    sess.set_providers([("CPUExecutionProvider", {})])
    assert [a.name for a in sess.get_inputs()] == ["x"]


def test_profiling(ort, model_path, tmp_path):
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    assert sess.get_profiling_start_time_ns() > 0
    sess.run(None, {"x": X})
    path = sess.end_profiling()
    assert os.path.basename(path).startswith("prof") and path.endswith(".json")
    with open(path, encoding="utf-8") as f:
        events = json.load(f)
    assert all({"cat", "pid", "tid", "dur", "ts", "ph", "name", "args"} <= set(e) for e in events)
    names = {e["name"] for e in events}
    assert {"model_run", "session_initialization"} <= names
    nodes = [e for e in events if e["cat"] == "Node"]
    assert {e["name"] for e in nodes} == {"matmul_kernel_time", "add_kernel_time",
                                          "relu_kernel_time", "neg_kernel_time"}
    assert {e["args"]["op_name"] for e in nodes} == {"MatMul", "Add", "Relu", "Neg"}
    assert sess.end_profiling() == ""  # profiling ended

    quiet = cpu_session(ort, model_path)
    assert quiet.get_profiling_start_time_ns() == 0
    assert quiet.end_profiling() == ""


def test_feed_errors(ort, model_path):
    sess = cpu_session(ort, model_path)
    with pytest.raises(ValueError, match="x"):
        sess.run(None, {})
    with pytest.raises(Exception, match="nope"):
        sess.run(["nope"], {"x": X})
    with pytest.raises(Exception, match="double|float64"):
        sess.run(None, {"x": X.astype(np.float64)})


def test_run_async(ort, model_path):
    sess = cpu_session(ort, model_path)
    done = threading.Event()
    got = {}

    def callback(results, user_data, err):
        got.update(results=results, user_data=user_data, err=err)
        done.set()

    sess.run_async(None, {"x": X}, callback, "mine")
    assert done.wait(30)
    assert got["err"] == "" and got["user_data"] == "mine"
    np.testing.assert_array_equal(got["results"][1], -X)

    done.clear()
    sess.run_async(None, {"x": X.astype(np.float64)}, callback, "again")
    assert done.wait(30)
    assert got["results"] == [] and ("double" in got["err"] or "float64" in got["err"])


# --------------------------------------------------------------------------------------------
# OrtValue and run_with_ort_values
# --------------------------------------------------------------------------------------------


def test_ortvalue_from_numpy_shares_memory(ort):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    ov = ort.OrtValue.ortvalue_from_numpy(a)
    assert ov.shape() == [2, 3]
    assert (ov.data_type(), ov.element_type(), ov.device_name()) == ("tensor(float)", 1, "cpu")
    assert ov.is_tensor() and ov.has_value()
    assert not ov.is_tensor_sequence() and not ov.is_sparse_tensor()
    assert ov.data_ptr() == a.ctypes.data and ov.tensor_size_in_bytes() == 24
    assert np.shares_memory(ov.numpy(), a)
    np.testing.assert_array_equal(np.asarray(ov), a)
    ov.update_inplace(np.full((2, 3), 7, np.float32))
    assert (a == 7).all()
    strided = a[:, ::2]
    ov2 = ort.OrtValue.ortvalue_from_numpy(strided)  # a contiguous copy, as onnxruntime
    assert not np.shares_memory(ov2.numpy(), a)
    np.testing.assert_array_equal(ov2.numpy(), strided)


@pytest.mark.parametrize("dtype, name, elem", [
    (np.bool_, "bool", 9), (np.int8, "int8", 3), (np.uint8, "uint8", 2),
    (np.int16, "int16", 5), (np.uint16, "uint16", 4), (np.int32, "int32", 6),
    (np.uint32, "uint32", 12), (np.int64, "int64", 7), (np.uint64, "uint64", 13),
    (np.float16, "float16", 10), (np.float32, "float", 1), (np.float64, "double", 11),
])
def test_ortvalue_types(ort, dtype, name, elem):
    ov = ort.OrtValue.ortvalue_from_numpy(np.zeros((2,), dtype))
    assert (ov.data_type(), ov.element_type()) == (f"tensor({name})", elem)
    for element_type in (dtype, elem):  # a numpy type or an onnx.TensorProto enum value
        fresh = ort.OrtValue.ortvalue_from_shape_and_type([3, 1], element_type)
        assert fresh.shape() == [3, 1] and fresh.numpy().dtype == np.dtype(dtype)
        assert fresh.data_type() == f"tensor({name})"


def test_ortvalue_other_devices_are_refused(ort):
    with pytest.raises(Exception, match="(?i)cuda|device"):
        ort.OrtValue.ortvalue_from_shape_and_type([2], np.float32, "cuda", 0)
    with pytest.raises(Exception, match="(?i)device"):
        ort.OrtValue.ortvalue_from_numpy(np.zeros(2, np.float32), "cuda", 0)


def test_run_with_ort_values(ort, model_path):
    sess = cpu_session(ort, model_path)
    x = ort.OrtValue.ortvalue_from_numpy(X)
    outs = sess.run_with_ort_values(None, {"x": x})
    assert len(outs) == 2 and all(isinstance(o, ort.OrtValue) for o in outs)
    y, z = expected(X)
    np.testing.assert_allclose(outs[0].numpy(), y, rtol=1e-5, atol=1e-6)
    assert outs[1].shape() == [3, 4] and outs[1].data_type() == "tensor(float)"
    np.testing.assert_array_equal(outs[1].numpy(), z)
    (only_z,) = sess.run_with_ort_values(["z"], {"x": x})
    np.testing.assert_array_equal(only_z.numpy(), z)


def sequence_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
         helper.make_node("Identity", ["a"], ["u"])], "seq",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
        [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("u", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_sequence_outputs(ort):
    sess = cpu_session(ort, sequence_model().SerializeToString())
    assert [o.type for o in sess.get_outputs()] == ["seq(tensor(float))", "tensor(float)"]
    a, b = np.ones(2, np.float32), np.arange(3, dtype=np.float32)
    seq, _ = sess.run(None, {"a": a, "b": b})
    assert isinstance(seq, list) and [s.shape for s in seq] == [(2,), (3,)]
    s_ov, u_ov = sess.run_with_ort_values(None, {"a": ort.OrtValue.ortvalue_from_numpy(a),
                                                 "b": ort.OrtValue.ortvalue_from_numpy(b)})
    assert s_ov.is_tensor_sequence() and not s_ov.is_tensor() and s_ov.has_value()
    assert s_ov.data_type() == "seq(tensor(float))"
    with pytest.raises(Exception, match="(?i)tensor"):
        s_ov.numpy()
    assert u_ov.is_tensor()


# --------------------------------------------------------------------------------------------
# IOBinding on the CPU
# --------------------------------------------------------------------------------------------


def test_io_binding_basic(ort, model_path):
    sess = cpu_session(ort, model_path)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", X)
    binding.bind_output("y")
    binding.synchronize_inputs()
    sess.run_with_iobinding(binding)
    binding.synchronize_outputs()
    (y,) = binding.copy_outputs_to_cpu()
    np.testing.assert_allclose(y, expected(X)[0], rtol=1e-5, atol=1e-6)
    (y_ov,) = binding.get_outputs()
    assert isinstance(y_ov, ort.OrtValue) and y_ov.device_name() == "cpu"
    np.testing.assert_array_equal(y_ov.numpy(), y)
    assert not np.shares_memory(binding.copy_outputs_to_cpu()[0], y_ov.numpy())

    binding.bind_output("z")  # outputs come back in binding order
    sess.run_with_iobinding(binding)
    y, z = binding.copy_outputs_to_cpu()
    np.testing.assert_array_equal(z, -X)

    binding.clear_binding_outputs()
    binding.bind_output("z")
    x2 = X * 2
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x2))
    sess.run_with_iobinding(binding)
    (z,) = binding.copy_outputs_to_cpu()
    np.testing.assert_array_equal(z, -x2)


def test_io_binding_preallocated_outputs(ort, model_path):
    sess = cpu_session(ort, model_path)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", X)
    z_ov = ort.OrtValue.ortvalue_from_shape_and_type([3, 4], np.float32)
    binding.bind_ortvalue_output("z", z_ov)
    y_buf = np.zeros((3, 2), np.float32)
    binding.bind_output("y", "cpu", 0, np.float32, list(y_buf.shape), y_buf.ctypes.data)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(z_ov.numpy(), -X)  # written into the bound memory
    np.testing.assert_allclose(y_buf, expected(X)[0], rtol=1e-5, atol=1e-6)
    z_out, y_out = binding.get_outputs()
    assert z_out.data_ptr() == z_ov.data_ptr() and y_out.data_ptr() == y_buf.ctypes.data

    # an input bound by address; the caller keeps the memory alive
    x3 = np.ascontiguousarray(X[::-1])
    binding.bind_input("x", "cpu", 0, np.float32, list(x3.shape), x3.ctypes.data)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(z_ov.numpy(), -x3)

    wrong = ort.OrtValue.ortvalue_from_shape_and_type([5, 4], np.float32)
    binding.bind_ortvalue_output("z", wrong)
    with pytest.raises(Exception, match="shape"):
        sess.run_with_iobinding(binding)


def test_io_binding_errors(ort, model_path):
    sess = cpu_session(ort, model_path)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", X)
    with pytest.raises(Exception, match="(?i)output"):
        sess.run_with_iobinding(binding)  # no output bound
    binding.bind_output("y")
    other = cpu_session(ort, model_path)
    with pytest.raises(ValueError, match="IOBinding"):
        other.run_with_iobinding(binding)
    with pytest.raises(Exception, match="nope"):
        binding.bind_cpu_input("nope", X)


# --------------------------------------------------------------------------------------------
# onnxplex against onnxruntime directly
# --------------------------------------------------------------------------------------------


def odd_shapes_model() -> onnx.ModelProto:
    """Inputs with an unknown dim, a scalar, an int64 tensor of unknown rank; outputs whose
    shapes only inference knows."""
    unknown = helper.make_tensor_value_info("u", TensorProto.FLOAT, [None, 3])
    graph = helper.make_graph(
        [helper.make_node("Add", ["u", "s"], ["v"]), helper.make_node("Shape", ["i"], ["n"])],
        "odd",
        [unknown, helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("n", TensorProto.INT64, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("build", [dense_model, sequence_model, odd_shapes_model])
def test_node_args_match_onnxruntime(build):
    import onnxruntime

    data = build().SerializeToString()
    ours = onnxplex.InferenceSession(data, providers=["CPUExecutionProvider"])
    theirs = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    for get in ("get_inputs", "get_outputs", "get_overridable_initializers"):
        assert [str(a) for a in getattr(ours, get)()] == [str(a) for a in getattr(theirs, get)()]


def test_onnxruntime_provider_names_are_known():
    import onnxruntime

    from onnxplex.session.ortcompat import ORT_EXECUTION_PROVIDERS

    assert set(onnxruntime.get_all_providers()) <= ORT_EXECUTION_PROVIDERS


# --------------------------------------------------------------------------------------------
# Where onnxplex is deliberately stricter
# --------------------------------------------------------------------------------------------


def test_unknown_provider_name_is_an_error(model_path):
    # onnxruntime prints "EP Error" and falls back to its CPU provider for a name it has
    # never heard of; onnxplex refuses (a typo should not silently change where a model runs).
    with pytest.raises(onnxplex.InvalidArgumentError, match="unknown execution provider 'nope'"):
        onnxplex.InferenceSession(model_path, providers=["nope"])


def test_unknown_provider_option_is_an_error(model_path):
    # onnxplex's providers validate their options under their own names (under onnxruntime's
    # CPUExecutionProvider, keys it does not use are ignored as onnxruntime ignores them:
    # test_cpu_provider_options_it_does_not_use_are_ignored)
    with pytest.raises(onnxplex.ProviderOptionError, match="unknown option"):
        onnxplex.InferenceSession(model_path, providers=[("cpu_mlas", {"bogus": 1})])


def test_failed_set_providers_keeps_the_session(model_path):
    sess = onnxplex.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    with pytest.raises(onnxplex.InvalidArgumentError, match="nope"):
        sess.set_providers(["nope"])
    np.testing.assert_array_equal(sess.run(["z"], {"x": X})[0], -X)


def test_cuda_bindings_fail_when_bound(model_path):
    # onnxruntime's CPU build accepts these and fails later, at run time.
    binding = onnxplex.InferenceSession(model_path).io_binding()
    with pytest.raises(onnxplex.InvalidArgumentError, match="'cuda' is not supported"):
        binding.bind_output("y", "cuda", 0)
    with pytest.raises(onnxplex.InvalidArgumentError, match="'cuda' is not supported"):
        binding.bind_input("x", "cuda", 0, np.float32, [3, 4], X.ctypes.data)
    with pytest.raises(onnxplex.InvalidArgumentError, match="unknown output name 'nope'"):
        binding.bind_output("nope")
    with pytest.raises(onnxplex.InvalidArgumentError, match="OrtValue"):
        binding.bind_ortvalue_input("x", X)


def test_ortvalue_update_inplace_checks_dtype():
    # onnxruntime copies the bytes of a float64 array into a float32 value when the sizes
    # happen to match; onnxplex refuses.
    ov = onnxplex.OrtValue.ortvalue_from_numpy(np.zeros((2, 3), np.float32))
    with pytest.raises(onnxplex.InvalidArgumentError, match="float64"):
        ov.update_inplace(np.ones((2, 3), np.float64))


class _SpyProvider(onnxplex.ExecutionProvider):
    """Runs Neg and keeps every array its kernel receives."""

    name = "dropin_spy"
    seen: list[np.ndarray] = []

    def get_capability(self, graph):
        return onnxplex.Capability(
            tuple(onnxplex.NodeGroup((n.index,)) for n in graph.nodes if n.op_type == "Neg"),
            tuple(onnxplex.Decline(n.index, "only Neg") for n in graph.nodes
                  if n.op_type != "Neg"))

    def compile(self, subgraph):
        def kernel(x):
            type(self).seen.append(x)
            return -x

        return kernel


def test_run_with_ort_values_passes_arrays_without_copies(model_path):
    onnxplex.register_provider(_SpyProvider)
    try:
        sess = onnxplex.InferenceSession(model_path, providers=["dropin_spy", "cpu_mlas"])
        x = onnxplex.OrtValue.ortvalue_from_numpy(X.copy())
        (z,) = sess.run_with_ort_values(["z"], {"x": x})
    finally:
        onnxplex.framework.plugins.unregister_provider("dropin_spy")
    assert _SpyProvider.seen[-1] is x.numpy()  # the kernel got the caller's array itself
    np.testing.assert_array_equal(z.numpy(), -X)


def test_unsupported_session_options_say_so():
    so = onnxplex.SessionOptions()
    with pytest.raises(onnxplex.InvalidArgumentError, match="custom op library"):
        so.register_custom_ops_library("libcustom.so")


def test_has_collective_ops(ort):
    assert ort.has_collective_ops() is False


def test_cpu_provider_options_it_does_not_use_are_ignored(ort, model_path):
    """onnxruntime's CPU provider ignores option keys it does not use (memory-arena settings
    code written for it passes); onnxplex drops them under that name too (under its own name,
    cpu_mlas, an unknown option stays an error)."""
    opts = {"arena_extend_strategy": "kSameAsRequested", "use_arena": "0", "unknown": "1"}
    sess = ort.InferenceSession(model_path, providers=[("CPUExecutionProvider", opts)])
    y, z = sess.run(None, {"x": X})
    want_y, want_z = expected(X)
    np.testing.assert_allclose(y, want_y, rtol=1e-6)
    np.testing.assert_allclose(z, want_z)
