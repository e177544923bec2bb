"""onnxruntime code runs unchanged, part two: its error classes and messages, the feeds its
Python API converts, its provider names in comparisons, and the SessionOptions calls that
change a model as it is loaded.

Each scenario runs on onnxruntime and on onnxplex (the ``ort`` fixture) and requires the same
outcome: the same result, or an error of the same onnxruntime class (imported from the
module's own ``capi.onnxruntime_pybind11_state``, as onnxruntime code imports it) whose
message holds the same onnxruntime sentence. A scenario onnxruntime runs differently on
purpose is at the end, each with its reason.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex

ORT_MODULES = ["onnxruntime", "onnxplex"]


@pytest.fixture(params=ORT_MODULES)
def ort(request):
    return importlib.import_module(request.param)


@pytest.fixture(autouse=True)
def _quiet_onnxruntime():
    """onnxruntime logs every refused model at error level; the tests expect the refusal."""
    ort = importlib.import_module("onnxruntime")
    ort.set_default_logger_severity(4)
    level = logging.getLogger("onnxplex").level
    yield
    ort.set_default_logger_severity(2)
    logging.getLogger("onnxplex").setLevel(level)


def status(ort, name: str) -> type[Exception]:
    """onnxruntime's status exception class ``name`` as the module under test exports it."""
    return getattr(importlib.import_module(f"{ort.__name__}.capi.onnxruntime_pybind11_state"),
                   name)


def model(nodes=None, x_type=TensorProto.FLOAT, x_shape=("N", 4), y_shape=("N", 4),
          inits=(), opset=17) -> bytes:
    nodes = nodes or [helper.make_node("Relu", ["x"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", x_type, x_shape)],
                          [helper.make_tensor_value_info("y", x_type, y_shape)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8).SerializeToString()


def session(ort, m=None, so=None):
    return ort.InferenceSession(model() if m is None else m, so,
                                providers=["CPUExecutionProvider"])


X = np.arange(8, dtype=np.float32).reshape(2, 4) - 3


# --------------------------------------------------------------------------------------------
# The capi modules
# --------------------------------------------------------------------------------------------

STATUS_NAMES = ["Fail", "InvalidArgument", "NoSuchFile", "NoModel", "EngineError",
                "RuntimeException", "InvalidProtobuf", "ModelLoaded", "NotImplemented",
                "InvalidGraph", "EPFail", "ModelLoadCanceled", "ModelRequiresCompilation",
                "NotFound"]


def test_capi_modules_export_what_onnxruntime_code_imports(ort):
    state = importlib.import_module(f"{ort.__name__}.capi.onnxruntime_pybind11_state")
    for name in STATUS_NAMES:
        cls = getattr(state, name)
        assert issubclass(cls, Exception) and cls.__name__ == name
    assert len({getattr(state, n) for n in STATUS_NAMES}) == len(STATUS_NAMES)
    c = importlib.import_module(f"{ort.__name__}.capi._pybind_state")
    assert c.Fail is state.Fail
    assert "CPUExecutionProvider" in c.get_available_providers()
    so = c.get_default_session_options()
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    for name in ("SessionOptions", "RunOptions", "OrtValue", "NodeArg", "ModelMetadata",
                 "GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder"):
        assert hasattr(state, name), name
    collection = importlib.import_module(
        f"{ort.__name__}.capi.onnxruntime_inference_collection")
    assert collection.InferenceSession is ort.InferenceSession
    assert collection.IOBinding is ort.IOBinding


# --------------------------------------------------------------------------------------------
# Errors: onnxruntime's class and sentence
# --------------------------------------------------------------------------------------------


def _undefined_input():
    return model([helper.make_node("Add", ["x", "q"], ["y"])])


def _mistyped():
    return model([helper.make_node("Add", ["x", "c"], ["y"])],
                 inits=[numpy_helper.from_array(np.ones(4, np.int64), "c")])


def _reshape_fails():
    return model([helper.make_node("Reshape", ["x", "s"], ["y"])], y_shape=None,
                 inits=[numpy_helper.from_array(np.array([3, 7], np.int64), "s")])


LOAD_ERRORS = [
    ("missing file", lambda tmp: str(tmp / "absent.onnx"), "NoSuchFile", None),
    ("not protobuf", lambda tmp: b"\x01\x02 not a model", "InvalidProtobuf", None),
    ("a directory", lambda tmp: str(tmp), "InvalidProtobuf", None),
    ("empty bytes", lambda tmp: b"", "InvalidArgument", None),
    ("undefined node input", lambda tmp: _undefined_input(), "InvalidArgument", None),
    ("mistyped node", lambda tmp: _mistyped(), "Fail", None),
    ("opset too new", lambda tmp: model(opset=99), "Fail", None),
    ("IR version too new", lambda tmp: _ir(99), "Fail", None),
    ("a cycle", lambda tmp: model([helper.make_node("Relu", ["z"], ["y"]),
                                   helper.make_node("Relu", ["y"], ["z"])]), "Fail", None),
    ("a name defined twice", lambda tmp: model([helper.make_node("Relu", ["x"], ["y"]),
                                               helper.make_node("Neg", ["x"], ["y"])]),
     "Fail", None),
    ("an output nothing produces", lambda tmp: model([helper.make_node("Relu", ["x"], ["q"])]),
     "Fail", None),
    ("an unknown op", lambda tmp: model([helper.make_node("FooBar", ["x"], ["y"])]),
     "InvalidGraph", "No Op registered for FooBar with domain_version of 17"),
    ("an op of a domain nothing registers", lambda tmp: _custom_op("my.ops", "Foo"), "Fail",
     "my.ops:Foo(-1) is not a registered function/op"),
    ("a com.microsoft op that does not exist", lambda tmp: _custom_op("com.microsoft", "NoOp"),
     "Fail", "com.microsoft:NoOp(-1) is not a registered function/op"),
    ("a domain used without its import", lambda tmp: _custom_op("my.ops", "Foo", imported=False),
     "InvalidGraph", "No opset import for domain 'my.ops'"),
    ("no opset import at all", lambda tmp: _without_imports(), "Fail",
     "Missing opset in the model"),
    ("an unknown attribute", lambda tmp: model([helper.make_node("Relu", ["x"], ["y"], bogus=1)]),
     "InvalidGraph", None),
    ("an input type the op does not take", lambda tmp: _half_dynamic_quantize(), "InvalidGraph",
     "Type Error: Type 'tensor(float16)' of input parameter (x) of operator "
     "(DynamicQuantizeLinear) in node (dq) is invalid."),
]


def _without_imports(*kept: str) -> bytes:
    m = onnx.load_from_string(model())
    kept_imports = [helper.make_opsetid(d, 1) for d in kept]
    del m.opset_import[:]
    m.opset_import.extend(kept_imports)
    return m.SerializeToString()


def test_onnxs_domain_used_without_its_import_runs(ort):
    """A model importing only com.microsoft whose ONNX ops come without ONNX's import
    (onnxruntime's own layer-norm fusion tests build them so): onnxruntime imports ONNX's
    domain at its newest opset."""
    sess = session(ort, _without_imports("com.microsoft"))
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], np.maximum(X, 0))


def _half_dynamic_quantize() -> bytes:
    # (onnxruntime's quantization tests catch this refusal by its sentence)
    g = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="dq")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 4])],
        [helper.make_tensor_value_info(n, t, None)
         for n, t in (("q", TensorProto.UINT8), ("s", TensorProto.FLOAT),
                      ("z", TensorProto.UINT8))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8).SerializeToString()


def _custom_op(domain: str, op_type: str, imported: bool = True, **attrs) -> bytes:
    m = onnx.load_from_string(model([helper.make_node(op_type, ["x"], ["y"], domain=domain,
                                                      **attrs)]))
    if imported:
        m.opset_import.append(helper.make_opsetid(domain, 1))
    return m.SerializeToString()


@pytest.mark.parametrize("domain, op_type, attrs, want", [
    ("com.microsoft", "Gelu", {}, lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / 2 ** 0.5))),
    ("ai.onnx.ml", "Binarizer", {"threshold": 0.5}, lambda x: (x > 0.5).astype(np.float32)),
])
def test_a_known_domain_used_without_its_import_runs(ort, domain, op_type, attrs, want):
    """onnxruntime adds the import of a domain it knows (at its newest opset) when a model
    uses the domain without importing it; onnxruntime's own transformer tests build their
    GroupQueryAttention models so."""
    sess = session(ort, _custom_op(domain, op_type, imported=False, **attrs))
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], want(X), rtol=1e-6, atol=1e-6)


def _ir(version: int) -> bytes:
    m = onnx.load_from_string(model())
    m.ir_version = version
    return m.SerializeToString()


@pytest.mark.parametrize("case, source, cls, text", LOAD_ERRORS, ids=[c[0] for c in LOAD_ERRORS])
def test_load_errors_have_onnxruntimes_class(ort, tmp_path, case, source, cls, text):
    with pytest.raises(status(ort, cls), match=None if text is None else re.escape(text)):
        session(ort, source(tmp_path))


FEED_ERRORS = [
    ("missing input", {}, ValueError,
     "Required inputs (['x']) are missing from input feed ([])."),
    ("unknown input", {"x": X, "bogus": X}, "InvalidArgument", "Invalid input name: bogus"),
    ("float64 for float", {"x": X.astype(np.float64)}, "InvalidArgument",
     "Unexpected input data type. Actual: (tensor(double)) , expected: (tensor(float))"),
    ("int64 for float", {"x": X.astype(np.int64)}, "InvalidArgument",
     "Unexpected input data type. Actual: (tensor(int64)) , expected: (tensor(float))"),
    ("strings for float", {"x": np.array([["a"] * 4], object)}, "InvalidArgument",
     "Actual: (tensor(string)) , expected: (tensor(float))"),
    ("wrong rank", {"x": np.ones(4, np.float32)}, "InvalidArgument",
     "Invalid rank for input: x Got: 1 Expected: 2 Please fix either the inputs/outputs or "
     "the model."),
    ("wrong dimension", {"x": np.ones((2, 5), np.float32)}, "InvalidArgument",
     "Got invalid dimensions for input: x for the following indices\n index: 1 Got: 5 "
     "Expected: 4\n Please fix either the inputs/outputs or the model."),
]


@pytest.mark.parametrize("case, feed, cls, text", FEED_ERRORS, ids=[c[0] for c in FEED_ERRORS])
def test_feed_errors_have_onnxruntimes_class_and_sentence(ort, case, feed, cls, text):
    expected = cls if isinstance(cls, type) else status(ort, cls)
    with pytest.raises(expected) as e:
        session(ort).run(None, feed)
    assert text in str(e.value)


def test_unknown_output_name(ort):
    with pytest.raises(status(ort, "InvalidArgument"), match="Invalid output name:nope"):
        session(ort).run(["nope"], {"x": X})


def test_kernel_failure_is_a_fail_naming_the_node(ort):
    with pytest.raises(status(ort, "Fail"),
                       match="Non-zero status code returned while running Reshape node"):
        session(ort, _reshape_fails()).run(None, {"x": X})


def test_session_config_entry_errors_are_runtime_errors(ort):
    so = ort.SessionOptions()
    with pytest.raises(RuntimeError,
                       match="SessionOptions does not have configuration with key: nope"):
        so.get_session_config_entry("nope")
    for key in ("", "k" * 1025):
        with pytest.raises(RuntimeError,
                           match="Config key is empty or longer than maximum length 1024"):
            so.add_session_config_entry(key, "1")
    so.add_session_config_entry("k", "a")
    so.add_session_config_entry("k", "b")   # (overwritten)
    assert so.get_session_config_entry("k") == "b"


@pytest.mark.filterwarnings("ignore:Specified provider")   # (onnxruntime warns first)
def test_set_providers_with_an_unknown_name_is_a_runtime_error(ort):
    sess = session(ort)
    with pytest.raises(RuntimeError, match="Unknown Provider Type: InvalidProvider"):
        sess.set_providers(["InvalidProvider"])


def test_onnxplex_errors_are_also_onnxruntimes_classes():
    """Both ``except onnxplex.X`` and ``except <onnxruntime class>`` catch the same error."""
    state = onnxplex.capi.onnxruntime_pybind11_state
    with pytest.raises(onnxplex.InvalidModelError) as e:
        session(onnxplex, b"")
    assert isinstance(e.value, state.InvalidArgument)
    with pytest.raises(onnxplex.InvalidFeedError) as e:
        session(onnxplex).run(None, {"x": X.astype(np.float64)})
    assert isinstance(e.value, (state.InvalidArgument, ValueError))
    with pytest.raises(onnxplex.KernelExecutionError) as e:
        session(onnxplex, _reshape_fails()).run(None, {"x": X})
    assert isinstance(e.value, state.Fail) and e.value.op_type == "Reshape"
    assert type(e.value).__name__ == "KernelExecutionError"
    assert issubclass(onnxplex.PartitionError, state.NotImplemented)
    assert issubclass(onnxplex.ProviderError, state.EPFail)
    assert issubclass(onnxplex.RunCancelledError, state.Fail)


# --------------------------------------------------------------------------------------------
# Feeds onnxruntime converts
# --------------------------------------------------------------------------------------------

def _identity(elem, shape):
    return model([helper.make_node("Identity", ["x"], ["y"])], x_type=elem, x_shape=shape,
                 y_shape=shape)


def _objects(values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


CONVERTED = [
    ("float list of ints", TensorProto.FLOAT, [2], [1, 2]),
    ("nested float list", TensorProto.FLOAT, ["N", 2], [[1, 2.5], [3, 4]]),
    ("empty float list", TensorProto.FLOAT, ["N"], []),
    ("float list of numeric strings", TensorProto.FLOAT, [2], ["1", "2.5"]),
    ("int64 list of floats", TensorProto.INT64, [2], [1.5, -2.5]),
    ("int32 list", TensorProto.INT32, [2], [1, 2]),
    ("float16 list", TensorProto.FLOAT16, [2], [1.0, 0.1]),
    ("bool list", TensorProto.BOOL, [2], [True, False]),
    ("string list", TensorProto.STRING, [2, 2], [["this", "is"], ["a", "test"]]),
    # (each element shorter than the itemsize: onnxruntime reads a bytes element up to a NUL,
    # past its end into the next one when it fills its width)
    ("bytes array", TensorProto.STRING, [2, 2],
     np.array([b"this", b"is", b"a", b"test"], dtype="|S6").reshape(2, 2)),
    ("void array", TensorProto.STRING, [2, 2],
     np.array([b"must", b"have", b"same", b"size"], dtype=np.void).reshape(2, 2)),
    ("str array", TensorProto.STRING, [2], np.array(["Olá", "你好"])),
    # (an object array's elements that are no str become their str(): skl2onnx's FeatureHasher
    # test feeds a column of lists so)
    ("object array of other things", TensorProto.STRING, [6],
     _objects([["a"], 5, 2.5, b"xy", None, np.str_("q")])),
]


@pytest.mark.parametrize("case, elem, shape, value", CONVERTED, ids=[c[0] for c in CONVERTED])
def test_feeds_onnxruntime_converts(case, elem, shape, value):
    m = _identity(elem, shape)
    (want,) = session(importlib.import_module("onnxruntime"), m).run(None, {"x": value})
    (got,) = session(onnxplex, m).run(None, {"x": value})
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tolist() == want.tolist()


def test_a_list_that_does_not_fit_the_type_is_refused(ort):
    with pytest.raises(RuntimeError, match="Could not create tensor from given input list"):
        session(ort, _identity(TensorProto.UINT8, [2])).run(None, {"x": [1, 300]})


# --------------------------------------------------------------------------------------------
# Provider names
# --------------------------------------------------------------------------------------------


def test_provider_names_compare_as_onnxruntimes(ort):
    assert ort.get_all_providers()[-1] == "CPUExecutionProvider"
    assert "CPUExecutionProvider" in ort.get_available_providers()
    sess = session(ort)
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert ["CPUExecutionProvider"] == sess.get_providers()
    assert sess.get_providers()[0] == "CPUExecutionProvider"
    assert "CPUExecutionProvider" == sess.get_providers()[0]
    assert sess.get_providers() != ["SomeOtherExecutionProvider"]
    sess.set_providers(["CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    everything = ort.InferenceSession(model(), providers=ort.get_available_providers())
    assert "CPUExecutionProvider" in everything.get_providers()
    np.testing.assert_array_equal(everything.run(None, {"x": X})[0], np.maximum(X, 0))


def test_provider_names_stay_onnxplexs_own():
    sess = session(onnxplex)
    assert sess.get_providers() == ["cpu_mlas"]
    assert str(sess.get_providers()[0]) == "cpu_mlas"
    assert onnxplex.get_available_providers()[-1] == "cpu_mlas"


# --------------------------------------------------------------------------------------------
# SessionOptions that change the model as it is loaded
# --------------------------------------------------------------------------------------------

W = np.array([[2.0, 1.0], [4.0, 3.0], [6.0, 5.0]], dtype=np.float32)


def _mul(external_dir=None) -> onnx.ModelProto:
    """y = x * W, W [3, 2] an initializer (external data in ``external_dir``'s w.bin)."""
    g = helper.make_graph([helper.make_node("Mul", ["x", "W"], ["y"])], "mul",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
                          [numpy_helper.from_array(np.ones((3, 2), np.float32), "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    if external_dir is not None:
        onnx.external_data_helper.convert_model_to_external_data(
            m, all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
    return m


def test_add_initializer_replaces_the_models(ort):
    so = ort.SessionOptions()
    value = ort.OrtValue.ortvalue_from_numpy(W)
    so.add_initializer("W", value)
    x = np.full((3, 2), 2.0, np.float32)
    (y,) = session(ort, _mul().SerializeToString(), so).run(["y"], {"x": x})
    np.testing.assert_array_equal(y, 2 * W)
    other = ort.SessionOptions()   # a name the model has no initializer of: ignored
    other.add_initializer("not_there", value)
    (y,) = session(ort, _mul().SerializeToString(), other).run(["y"], {"x": x})
    np.testing.assert_array_equal(y, x)


def test_add_initializer_refuses_what_onnxruntime_refuses(ort):
    so = ort.SessionOptions()
    with pytest.raises(RuntimeError):
        so.add_initializer("W", W)   # an OrtValue, not an array
    so.add_initializer("W", ort.OrtValue.ortvalue_from_numpy(W))
    with pytest.raises(RuntimeError, match="already been added"):
        so.add_initializer("W", ort.OrtValue.ortvalue_from_numpy(W))


def test_add_initializer_of_another_shape_is_refused():
    # (onnxruntime builds the session and crashes or computes with it; onnxplex refuses)
    so = onnxplex.SessionOptions()
    so.add_initializer("W", onnxplex.OrtValue.ortvalue_from_numpy(np.ones(3, np.float32)))
    with pytest.raises(onnxplex.InvalidArgumentError, match="'W' is float32 \\[3\\]"):
        session(onnxplex, _mul().SerializeToString(), so)


def test_add_external_initializers_supplies_external_data(ort, tmp_path):
    path = tmp_path / "mul.onnx"
    onnx.save_model(_mul(tmp_path), path)
    (tmp_path / "w.bin").unlink()   # the data comes from the options, not the file
    so = ort.SessionOptions()
    so.add_external_initializers(["W"], [ort.OrtValue.ortvalue_from_numpy(W)])
    x = np.full((3, 2), 3.0, np.float32)
    (y,) = session(ort, str(path), so).run(["y"], {"x": x})
    np.testing.assert_array_equal(y, 3 * W)


def _free_dims() -> bytes:
    g = helper.make_graph([helper.make_node("Abs", ["x"], ["y"])], "abs",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         ["Dim1", "Dim2", 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         ["Dim1", "Dim2", 5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    dims = m.graph.input[0].type.tensor_type.shape.dim
    dims[0].denotation, dims[1].denotation = "DATA_BATCH", "DATA_CHANNEL"
    return m.SerializeToString()


@pytest.mark.parametrize("how, first, second, shape", [
    ("name", "Dim1", "Dim2", [4, 6, 5]),
    ("denotation", "DATA_BATCH", "DATA_CHANNEL", [3, 5, 5]),
])
def test_free_dimension_overrides(ort, how, first, second, shape):
    so = ort.SessionOptions()
    add = getattr(so, f"add_free_dimension_override_by_{how}")
    add(first, shape[0])
    add(second, shape[1])
    sess = session(ort, _free_dims(), so)
    assert sess.get_inputs()[0].shape == shape
    x = -np.ones(shape, np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], -x)
    wrong = list(shape)
    wrong[0] += 1
    with pytest.raises(status(ort, "InvalidArgument"),
                       match=f"index: 0 Got: {wrong[0]} Expected: {shape[0]}"):
        sess.run(None, {"x": np.ones(wrong, np.float32)})


# --------------------------------------------------------------------------------------------
# Devices, memory infos, allocators
# --------------------------------------------------------------------------------------------


def test_sessions_describe_their_inputs_and_outputs_memory(ort):
    sess = session(ort)
    for infos in (sess.get_input_memory_infos(), sess.get_output_memory_infos()):
        assert len(infos) == 1
        info = infos[0]
        assert info.name == "Cpu" and info.device_id == 0
        assert int(info.mem_type) == int(ort.OrtMemType.DEFAULT) == 0
    assert len(sess.get_input_epdevices()) == 1


def test_device_and_memory_info_objects(ort):
    c = importlib.import_module(f"{ort.__name__}.capi._pybind_state")
    device = ort.OrtDevice.make("cpu", 0)
    assert (device.device_type(), device.device_id(), device.device_mem_type()) == (0, 0, 0)
    assert c.OrtDevice.cpu() == 0 and c.OrtDevice.default_memory() == 0
    assert ort.OrtDevice.make("cuda", 1).device_id() == 1
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                             ort.OrtMemType.DEFAULT)
    assert (info.name, info.device_id) == ("Cpu", 0)
    assert info.allocator_type == ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR
    v2 = ort.OrtMemoryInfo.create_v2("Cpu", ort.OrtMemoryInfoDeviceType.CPU, 0, 0,
                                     ort.OrtDeviceMemoryType.DEFAULT, 0,
                                     ort.OrtAllocatorType.ORT_DEVICE_ALLOCATOR)
    assert v2.allocator_type == ort.OrtAllocatorType.ORT_DEVICE_ALLOCATOR
    assert v2.device_mem_type == ort.OrtDeviceMemoryType.DEFAULT
    for enum, members in ((ort.OrtMemType, {"CPU_INPUT": -2, "CPU_OUTPUT": -1, "DEFAULT": 0}),
                          (ort.OrtAllocatorType, {"ORT_DEVICE_ALLOCATOR": 0,
                                                  "ORT_ARENA_ALLOCATOR": 1})):
        for name, value in members.items():
            assert int(getattr(enum, name)) == value


def test_shared_cpu_allocator_registers(ort):
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                             ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
    so = ort.SessionOptions()
    so.add_session_config_entry("session.use_env_allocators", "1")
    np.testing.assert_array_equal(session(ort, so=so).run(None, {"x": X})[0], np.maximum(X, 0))


# --------------------------------------------------------------------------------------------
# Module functions
# --------------------------------------------------------------------------------------------


def test_build_info_device_and_telemetry(ort):
    assert "Build Info" in ort.get_build_info()
    assert "CPU" in ort.get_device()
    ort.disable_telemetry_events()
    ort.enable_telemetry_events()


def test_module_facts_and_session_value_factory(ort):
    assert (ort.version, ort.cuda_version) == (ort.__version__, "")
    assert isinstance(ort.package_name, str)
    assert ort.SessionIOBinding is importlib.import_module(
        f"{ort.__name__}.capi._pybind_state").SessionIOBinding
    value = session(ort).create_ortvalue_from_shape_and_type([2, 3], np.float32, "cpu", 0)
    assert value.shape() == [2, 3] and value.numpy().dtype == np.float32


# (onnxruntime reports the raising callback's errors as unraisable exceptions)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_logger_callback(ort):
    messages = []

    def callback(severity, category, logid, code_location, message):
        messages.append((severity, category, logid, code_location, message))

    try:
        ort.set_default_logger_callback(callback, severity=0)
        session(ort)
        assert messages, "a verbose session creation logs something"
        for record in messages:
            assert [type(v) for v in record] == [int, str, str, str, str]
        for bad in (5, -1):
            with pytest.raises(RuntimeError):
                ort.set_default_logger_callback(callback, severity=bad)
        with pytest.raises(RuntimeError):
            ort.set_default_logger_callback("not a callable")

        def raising(*args):
            raise ValueError("from the callback")

        ort.set_default_logger_callback(raising, severity=0)
        session(ort).run(None, {"x": X})   # (the callback's error goes nowhere)
    finally:
        ort.set_default_logger_callback(None)
        ort.set_default_logger_severity(2)
    count = len(messages)
    session(ort)
    assert len(messages) == count   # (reset: the callback is gone)


def test_set_seed_repeats_unseeded_random_ops():
    # onnxruntime's set_seed seeds its training ops; onnxplex's also makes a RandomNormal
    # without a seed attribute repeat its draws from one set_seed to the next
    g = helper.make_graph([helper.make_node("RandomNormal", [], ["y"], shape=[8])], "r", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    sess = session(onnxplex, m)
    onnxplex.set_seed(5)
    first = [sess.run(None, {})[0] for _ in range(2)]
    onnxplex.set_seed(5)
    again = [sess.run(None, {})[0] for _ in range(2)]
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert not np.array_equal(first[0], first[1])
    onnxplex.set_seed(6)
    assert not np.array_equal(sess.run(None, {})[0], first[0])


# --------------------------------------------------------------------------------------------
# Session options in the model, saved optimized models, the profile file
# --------------------------------------------------------------------------------------------


def test_session_options_from_the_models_ort_config(ort, monkeypatch, tmp_path):
    m = onnx.load_from_string(model())
    helper.set_model_props(m, {"ort_config": json.dumps({"session_options": {
        "inter_op_num_threads": 5, "intra_op_num_threads": 2,
        "graph_optimization_level": 99, "enable_profiling": 1, "unknown_key": 7}})})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1")
    sess = session(ort, m.SerializeToString())
    so = sess.get_session_options()
    assert (so.inter_op_num_threads, so.intra_op_num_threads) == (5, 2)
    assert so.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL   # (not in the config)
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert so.enable_profiling
    sess.run(None, {"x": X})
    assert os.path.exists(sess.end_profiling())
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "0")
    assert session(ort, m.SerializeToString()).get_session_options().intra_op_num_threads == 0


def test_unparsable_ort_config_is_refused(ort, monkeypatch, capsys):
    m = onnx.load_from_string(model())
    helper.set_model_props(m, {"ort_config": "{not json"})
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1")
    with pytest.raises(RuntimeError, match="`ort_config` key cannot be parsed"):
        session(ort, m.SerializeToString())


def test_optimized_model_saved_with_external_initializers(ort, tmp_path):
    big = numpy_helper.from_array(np.arange(300 * 4, dtype=np.float32).reshape(300, 4), "big")
    small = numpy_helper.from_array(np.arange(4, dtype=np.float32), "small")
    m = model([helper.make_node("Gather", ["big", "i"], ["g"]),
               helper.make_node("Add", ["g", "small"], ["y"])],
              x_type=TensorProto.INT64, x_shape=[2], y_shape=[2, 4], inits=[big, small])
    m = onnx.load_from_string(m)
    m.graph.input[0].name, m.graph.node[0].input[1] = "i", "i"
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT
    (tmp_path / "out").mkdir()
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "out" / "opt.onnx")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                "weights.bin")
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "100")
    i = np.array([3, 299], np.int64)
    (want,) = session(ort, m.SerializeToString(), so).run(None, {"i": i})
    assert (tmp_path / "out" / "weights.bin").stat().st_size >= 300 * 4 * 4
    saved = onnx.load(str(tmp_path / "out" / "opt.onnx"), load_external_data=False)
    external = {t.name for t in saved.graph.initializer
                if t.data_location == TensorProto.EXTERNAL}
    assert "big" in external and "small" not in external
    for engine in (ort, importlib.import_module("onnxruntime")):   # loads, in both
        (got,) = session(engine, str(tmp_path / "out" / "opt.onnx")).run(None, {"i": i})
        np.testing.assert_array_equal(got, want)


def test_profile_file_has_onnxruntimes_layout(ort, tmp_path):
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = session(ort, so=so)
    sess.run(None, {"x": X})
    path = sess.end_profiling()
    with open(path) as f:
        lines = f.readlines()
    assert "[" in lines[0] and "]" in lines[-1]
    for line in lines[1:-1]:
        for tag in ("pid", "dur", "ts", "ph", "X", "name", "args"):
            assert tag in line
    assert json.loads("".join(lines))


# --------------------------------------------------------------------------------------------
# C-level calls: OrtValueVector, DLPack, graph assignment info, load cancellation, plugin EPs
# --------------------------------------------------------------------------------------------


def test_terminated_run_is_a_fail(ort):
    ro = ort.RunOptions()
    ro.terminate = True
    with pytest.raises(status(ort, "Fail")):
        session(ort).run(None, {"x": X}, ro)


def test_run_with_ortvaluevector(ort):
    c = importlib.import_module(f"{ort.__name__}.capi._pybind_state")
    sess = session(ort)
    feeds = c.OrtValueVector()
    feeds.push_back(ort.OrtValue.ortvalue_from_numpy(X)._ortvalue)
    assert len(feeds) == 1 and feeds.element_type_at(0) == TensorProto.FLOAT
    fetches = c.OrtValueVector()
    sess.run_with_ortvaluevector(ort.RunOptions(), ["x"], feeds, ["y"], fetches,
                                 [c.OrtDevice(c.OrtDevice.cpu(), c.OrtDevice.default_memory(),
                                              0, 0)])
    assert len(fetches) == 1
    np.testing.assert_array_equal(fetches[0].numpy(), np.maximum(X, 0))
    binding = sess.io_binding()
    binding.bind_cpu_input("x", X)
    binding.bind_output("y")
    sess.run_with_iobinding(binding)
    outs = binding.get_outputs_as_ortvaluevector()
    assert len(outs) == 1
    np.testing.assert_array_equal(outs[0].numpy(), np.maximum(X, 0))


def test_dlpack_round_trip(ort):
    c = importlib.import_module(f"{ort.__name__}.capi._pybind_state")
    value = ort.OrtValue.ortvalue_from_numpy(X)._ortvalue
    back = c.OrtValue.from_dlpack(value.to_dlpack())
    np.testing.assert_array_equal(back.numpy(), X)
    assert back.data_ptr() == value.data_ptr()   # (shared, not copied)


def test_is_dlpack_uint8_tensor_reads_a_capsule_without_consuming_it():
    """(onnxruntime has it in builds with DLPack enabled, not the CPU wheel: onnxplex only.)"""
    ort = onnxplex
    c = importlib.import_module("onnxplex.capi._pybind_state")
    for arr, want in ((np.arange(4, dtype=np.uint8), True), (X, False),
                      (np.arange(4, dtype=np.int8), False)):
        capsule = ort.OrtValue.ortvalue_from_numpy(arr)._ortvalue.to_dlpack()
        assert c.is_dlpack_uint8_tensor(capsule) is want
        np.testing.assert_array_equal(c.OrtValue.from_dlpack(capsule, False).numpy(), arr)


def test_provider_graph_assignment_info(ort):
    m = model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
               helper.make_node("Neg", ["r"], ["y"], name="neg")])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with pytest.raises(status(ort, "Fail"), match="session.record_ep_graph_assignment_info"):
        session(ort, m, so).get_provider_graph_assignment_info()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    info = session(ort, m, so).get_provider_graph_assignment_info()
    nodes = [(n.name, n.op_type, n.domain) for sub in info for n in sub.get_nodes()]
    assert nodes == [("relu", "Relu", ""), ("neg", "Neg", "")]
    assert all(sub.ep_name == "CPUExecutionProvider" for sub in info)


def test_load_cancellation_flag(ort):
    so = ort.SessionOptions()
    so.set_load_cancellation_flag(True)
    with pytest.raises(status(ort, "ModelLoadCanceled")):
        session(ort, so=so)
    so.set_load_cancellation_flag(False)
    session(ort, so=so).run(None, {"x": X})


def test_providers_added_to_the_session_options(ort):
    so = ort.SessionOptions()
    assert not so.has_providers()
    so.add_provider("CPUExecutionProvider", {})
    assert so.has_providers()
    sess = ort.InferenceSession(model(), so)
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_session_fallback_switches_and_tuning_results(ort):
    sess = session(ort)
    sess.disable_fallback()
    sess.enable_fallback()
    assert sess.get_tuning_results() == []
    sess.set_tuning_results([])


def test_native_ep_libraries_are_refused_with_fail(ort, tmp_path):
    with pytest.raises(status(ort, "Fail")):
        ort.register_execution_provider_library("mine", str(tmp_path / "absent.so"))


# --------------------------------------------------------------------------------------------
# Sparse tensors in models
# --------------------------------------------------------------------------------------------


def _sparse(name: str, coords: bool) -> onnx.SparseTensorProto:
    values = numpy_helper.from_array(np.array([1.5, -2.0], np.float32), name)
    idx = np.array([[0, 1], [1, 2]], np.int64) if coords else np.array([1, 5], np.int64)
    return helper.make_sparse_tensor(values, numpy_helper.from_array(idx, "idx"), [2, 3])


@pytest.mark.parametrize("coords", [False, True], ids=["linear indices", "coordinates"])
@pytest.mark.parametrize("where", ["sparse initializer", "Constant sparse_value"])
def test_sparse_constants_compute_as_dense(ort, where, coords):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    add = helper.make_node("Add", ["x", "W"], ["y"])
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    if where == "sparse initializer":
        g = helper.make_graph([add], "g", *io, sparse_initializer=[_sparse("W", coords)])
    else:
        const = helper.make_node("Constant", [], ["W"], sparse_value=_sparse("W", coords))
        g = helper.make_graph([const, add], "g", *io)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    (y,) = session(ort, m.SerializeToString()).run(None, {"x": x})
    np.testing.assert_array_equal(y, x + np.array([[0, 1.5, 0], [0, 0, -2.0]], np.float32))


def test_sparse_tensor_objects(ort):
    cpu = ort.OrtDevice.make("cpu", 0)
    shape = [9, 9]
    values = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    indices = np.array([3, 5, 15], dtype=np.int64)
    st = ort.SparseTensor.sparse_coo_from_numpy(shape, values, indices, cpu)
    assert st.format() == ort.OrtSparseFormat.ORT_SPARSE_COO
    assert (st.dense_shape(), st.data_type(), st.device_name()) == \
        (shape, "sparse_tensor(float)", "cpu")
    got_values, got_indices = st.values(), st.as_coo_view().indices()
    assert not got_values.flags.writeable and not got_indices.flags.writeable
    np.testing.assert_array_equal(got_values, values)
    np.testing.assert_array_equal(got_indices, indices)
    value = ort.OrtValue.ort_value_from_sparse_tensor(st)
    assert value.is_sparse_tensor() and not value.is_tensor()
    assert value.data_type() == "sparse_tensor(float)"
    np.testing.assert_array_equal(value.as_sparse_tensor().values(), values)
    with pytest.raises(RuntimeError):
        value.numpy()
    with pytest.raises(RuntimeError):
        ort.OrtValue.ortvalue_from_numpy(values).as_sparse_tensor()
    strings = ort.SparseTensor.sparse_coo_from_numpy(
        shape, np.array(["xyz", "yxz", "zyx"]), indices, cpu)
    assert strings.data_type() == "sparse_tensor(string)"
    assert strings.values().tolist() == ["xyz", "yxz", "zyx"]
    with pytest.raises(RuntimeError):
        st.as_csrc_view()
    with pytest.raises(RuntimeError):
        st.to_cuda(ort.OrtDevice.make("cuda", 0))
    with pytest.raises(RuntimeError, match="Index size: 3 must be equal to or twice"):
        ort.SparseTensor.sparse_coo_from_numpy([3, 3], values[:2], indices, cpu)
    with pytest.raises(RuntimeError, match="1-D"):
        ort.SparseTensor.sparse_coo_from_numpy([3, 3], values.reshape(1, 3), indices, cpu)
    inner = np.array([1, 1, 1], np.int64)
    outer = np.array([0, 1, 2, 3, 3, 3, 3, 3, 3, 3], np.int64)
    csr = ort.SparseTensor.sparse_csr_from_numpy(shape, values, inner, outer, cpu)
    assert csr.format() == ort.OrtSparseFormat.ORT_SPARSE_CSRC
    np.testing.assert_array_equal(csr.as_csrc_view().inner(), inner)
    np.testing.assert_array_equal(csr.as_csrc_view().outer(), outer)
    assert not csr.as_csrc_view().outer().flags.writeable


def _sparse_matmul_model(**attrs) -> bytes:
    node = helper.make_node("SparseToDenseMatMul", ["A", "B"], ["y"], domain="com.microsoft",
                            **attrs)
    # (symbolic shapes: onnxruntime's shape inference of the op ignores transA/transB)
    g = helper.make_graph([node], "g",
                          [helper.make_sparse_tensor_value_info("A", TensorProto.FLOAT,
                                                                ["a0", "a1"]),
                           helper.make_tensor_value_info("B", TensorProto.FLOAT, ["b0", "b1"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("com.microsoft", 1)],
                             ir_version=8).SerializeToString()


SPARSE_MATMUL_CASES = [
    (module, fmt) for module in ORT_MODULES for fmt in ("coo coordinates", "csr")
] + [("onnxplex", "coo linear")]   # (onnxruntime's kernel takes COO coordinates only)


@pytest.mark.parametrize("module, fmt", SPARSE_MATMUL_CASES)
@pytest.mark.parametrize("attrs", [{}, {"alpha": 0.5}, {"transA": 1}, {"transB": 1},
                                   {"transA": 1, "transB": 1, "alpha": -2.0}],
                         ids=["plain", "alpha", "transA", "transB", "both"])
def test_sparse_input_to_sparse_to_dense_matmul(module, fmt, attrs):
    ort = importlib.import_module(module)
    rng = np.random.default_rng(1)
    dense = np.where(rng.random((3, 4)) < 0.4, rng.standard_normal((3, 4)), 0).astype(np.float32)
    if attrs.get("transA"):
        dense = np.ascontiguousarray(dense.T)
    b = rng.standard_normal((2, 4) if attrs.get("transB") else (4, 2)).astype(np.float32)
    cpu = ort.OrtDevice.make("cpu", 0)
    rows, cols = np.nonzero(dense)
    if fmt == "csr":
        outer = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=dense.shape[0]))])
        a = ort.SparseTensor.sparse_csr_from_numpy(list(dense.shape), dense[rows, cols],
                                                   cols.astype(np.int64),
                                                   outer.astype(np.int64), cpu)
    else:
        idx = (np.ravel_multi_index((rows, cols), dense.shape) if fmt == "coo linear"
               else np.stack([rows, cols], axis=1))
        a = ort.SparseTensor.sparse_coo_from_numpy(list(dense.shape), dense[rows, cols],
                                                   idx.astype(np.int64), cpu)
    sess = session(ort, _sparse_matmul_model(**attrs))
    assert sess.get_inputs()[0].type == "sparse_tensor(float)"
    (y,) = sess.run_with_ort_values(["y"], {"A": ort.OrtValue.ort_value_from_sparse_tensor(a),
                                            "B": ort.OrtValue.ortvalue_from_numpy(b)})
    op_a = dense.T if attrs.get("transA") else dense
    op_b = b.T if attrs.get("transB") else b
    np.testing.assert_allclose(y.numpy(), attrs.get("alpha", 1.0) * op_a @ op_b,
                               rtol=1e-5, atol=1e-6)


def test_sparse_graph_output_is_returned_sparse(ort):
    values = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "c")
    sp = helper.make_sparse_tensor(values, numpy_helper.from_array(
        np.array([1, 5], np.int64), "i"), [2, 3])
    g = helper.make_graph([helper.make_node("Constant", [], ["c"], sparse_value=sp)], "g", [],
                          [helper.make_sparse_tensor_value_info("c", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = session(ort, m.SerializeToString())
    (st,) = sess.run(None, {})
    assert st.format == ort.OrtSparseFormat.ORT_SPARSE_COO   # (a property on the C class)
    assert st.dense_shape() == [2, 3]
    np.testing.assert_array_equal(st.values(), [1.0, 2.0])
    np.testing.assert_array_equal(st.get_coo_data().indices(), [1, 5])
    (value,) = sess.run_with_ort_values(None, {})
    assert value.is_sparse_tensor() and value.data_type() == "sparse_tensor(float)"


# --------------------------------------------------------------------------------------------
# LoRA adapters
# --------------------------------------------------------------------------------------------

ADAPTER_PARAMS = {"lora_A": np.arange(6, dtype=np.float32).reshape(2, 3) / 4,
                  "lora_B": np.array([1, -2, 3], np.int64),
                  "scale": np.array([0.5], np.float16)}   # (onnxruntime reads no 0-d one)


@pytest.mark.parametrize("writer, reader", [("onnxruntime", "onnxplex"),
                                            ("onnxplex", "onnxruntime"),
                                            ("onnxplex", "onnxplex")])
def test_adapter_files_move_between_engines(tmp_path, writer, reader):
    w, r = importlib.import_module(writer), importlib.import_module(reader)
    adapter = w.AdapterFormat()
    adapter.set_adapter_version(3)
    adapter.set_model_version(7)
    adapter.set_parameters({k: w.OrtValue.ortvalue_from_numpy(v)
                            for k, v in ADAPTER_PARAMS.items()})
    path = str(tmp_path / "a.onnx_adapter")
    adapter.export_adapter(path)
    back = r.AdapterFormat.read_adapter(path)
    assert (back.get_adapter_version(), back.get_model_version()) == (3, 7)
    got = {k: v.numpy() for k, v in back.get_parameters().items()}
    assert got.keys() == ADAPTER_PARAMS.keys()
    for k, v in ADAPTER_PARAMS.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape
        np.testing.assert_array_equal(got[k], v)


def test_active_adapter_feeds_its_parameters(ort, tmp_path):
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "lora_A"], ["t"]),
         helper.make_node("Add", ["t", "bias"], ["y"])], "lora",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2]),
         helper.make_tensor_value_info("lora_A", TensorProto.FLOAT, [2, 2]),
         helper.make_tensor_value_info("bias", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [numpy_helper.from_array(np.zeros((2, 2), np.float32), "lora_A"),
         numpy_helper.from_array(np.zeros(2, np.float32), "bias")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    adapter = ort.AdapterFormat()
    adapter.set_parameters({"lora_A": ort.OrtValue.ortvalue_from_numpy(
        2 * np.eye(2, dtype=np.float32)), "bias": ort.OrtValue.ortvalue_from_numpy(
        np.ones(2, np.float32))})
    path = str(tmp_path / "a.onnx_adapter")
    adapter.export_adapter(path)
    lora = ort.LoraAdapter()
    lora.Load(path)
    sess = session(ort, m.SerializeToString())
    x = np.array([[1.0, 2.0]], np.float32)
    ro = ort.RunOptions()
    ro.add_active_adapter(lora)
    np.testing.assert_array_equal(sess.run(None, {"x": x}, ro)[0], [[3.0, 5.0]])
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], [[0.0, 0.0]])
    # (the adapter's value wins over a feed of the same name)
    np.testing.assert_array_equal(
        sess.run(None, {"x": x, "lora_A": np.eye(2, dtype=np.float32)}, ro)[0], [[3.0, 5.0]])
    other = ort.AdapterFormat()
    other.set_parameters({"nope": ort.OrtValue.ortvalue_from_numpy(np.ones(2, np.float32))})
    other.export_adapter(str(tmp_path / "b.onnx_adapter"))
    unknown = ort.LoraAdapter()
    unknown.Load(str(tmp_path / "b.onnx_adapter"))
    bad = ort.RunOptions()
    bad.add_active_adapter(unknown)
    with pytest.raises(status(ort, "InvalidArgument"), match="Invalid input name: nope"):
        sess.run(None, {"x": x}, bad)


def test_malformed_adapter_file_is_refused(tmp_path):
    path = tmp_path / "bad.onnx_adapter"
    path.write_bytes(b"\x0c\x00\x00\x00TORT" + b"\xff" * 20)
    with pytest.raises(RuntimeError, match="malformed|format version"):
        onnxplex.AdapterFormat.read_adapter(str(path))
    path.write_bytes(b"not an adapter at all")
    with pytest.raises(RuntimeError, match="not an onnxruntime adapter file"):
        onnxplex.AdapterFormat.read_adapter(str(path))


# --------------------------------------------------------------------------------------------
# More of what onnxruntime's own tests do
# --------------------------------------------------------------------------------------------


def test_c_level_session_and_values(ort):
    state = importlib.import_module(f"{ort.__name__}.capi.onnxruntime_pybind11_state")
    sess = session(ort)
    value = ort.OrtValue.ortvalue_from_numpy(X)
    vect = sess._sess.run_with_ort_values({"x": value._get_c_value()}, ["y"], ort.RunOptions())
    assert isinstance(vect, state.OrtValueVector)
    np.testing.assert_array_equal(vect[0].numpy(), np.maximum(X, 0))
    assert value.__dlpack_device__() == (1, 0)
    again = ort.OrtValue.from_dlpack(value)   # (any __dlpack__ producer; memory shared)
    assert again.data_ptr() == value.data_ptr()
    flags = ort.OrtValue.from_dlpack(ort.OrtValue.ortvalue_from_numpy(
        np.array([True, False]))).numpy()
    assert flags.dtype == np.bool_


def test_c_level_io_binding_of_arrays_and_memory(ort):
    """``SessionIOBinding(sess._sess)`` called as onnxruntime's own IOBinding tests call it
    (besides OrtValues, as in test_c_level_io_binding): an array or raw memory bound with
    bind_input, raw memory with bind_output, the outputs an OrtValueVector."""
    state = importlib.import_module(f"{ort.__name__}.capi._pybind_state")
    sess = session(ort)
    cpu = state.OrtDevice(state.OrtDevice.cpu(), state.OrtDevice.default_memory(), 0)
    value = state.OrtValue.ortvalue_from_numpy(X, cpu)
    for bind_x in (lambda b: b.bind_ortvalue_input("x", value),
                   lambda b: b.bind_input("x", X),
                   lambda b: b.bind_input("x", cpu, X.dtype, X.shape, value.data_ptr())):
        bind = state.SessionIOBinding(sess._sess)
        bind_x(bind)
        bind.bind_output("y", cpu)
        sess._sess.run_with_iobinding(bind, None)
        outputs = bind.get_outputs()
        assert isinstance(outputs, state.OrtValueVector)
        np.testing.assert_array_equal(outputs[0].numpy(), np.maximum(X, 0))
    y = np.empty_like(X)
    bind = state.SessionIOBinding(sess._sess)
    bind.bind_input("x", X)
    bind.bind_output("y", cpu, y.dtype, y.shape, y.ctypes.data)
    sess._sess.run_with_iobinding(bind, None)
    np.testing.assert_array_equal(y, np.maximum(X, 0))


def test_arena_config_settings(ort):
    cfg = ort.OrtArenaCfg(8, 0, 4, 2)
    assert (cfg.max_mem, cfg.arena_extend_strategy, cfg.initial_chunk_size_bytes,
            cfg.max_dead_bytes_per_chunk) == (8, 0, 4, 2)
    settings = {"max_mem": 32, "arena_extend_strategy": 11, "initial_chunk_size_bytes": 18,
                "max_dead_bytes_per_chunk": 14, "initial_growth_chunk_size_bytes": 12,
                "max_power_of_two_extend_bytes": 17}
    cfg = ort.OrtArenaCfg(settings)
    assert {k: getattr(cfg, k) for k in settings} == settings
    with pytest.raises(RuntimeError, match="Invalid OrtArenaCfg option: bogus"):
        ort.OrtArenaCfg({"bogus": 1})


def test_run_config_entries(ort):
    ro = ort.RunOptions()
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    assert ro.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    with pytest.raises(RuntimeError, match="RunOptions does not have configuration with key"):
        ro.get_run_config_entry("nope")
    session(ort).run([], {"x": X}, ro)


def test_external_initializer_files_in_memory(ort, tmp_path):
    path = tmp_path / "mul.onnx"
    onnx.save_model(_mul(tmp_path), path)
    data = (tmp_path / "w.bin").read_bytes()
    (tmp_path / "w.bin").unlink()
    so = ort.SessionOptions()
    replaced = W.tobytes() + data[W.nbytes:]
    so.add_external_initializers_from_files_in_memory(["w.bin"], [replaced], [len(replaced)])
    x = np.full((3, 2), 2.0, np.float32)
    (y,) = session(ort, str(path), so).run(["y"], {"x": x})
    np.testing.assert_array_equal(y, 2 * W)


def test_check_and_normalize_provider_args(ort):
    check = importlib.import_module(
        f"{ort.__name__}.capi.onnxruntime_inference_collection").check_and_normalize_provider_args
    valid = ["a", "b", "c"]
    assert check(None, None, valid) == ([], [])
    assert check(["a", "b"], None, valid) == (["a", "b"], [{}, {}])
    assert check([("a", {1: 2}), "b"], None, valid) == (["a", "b"], [{"1": "2"}, {}])
    assert check(["a", "b"], [{1: 2}, {}], valid) == (["a", "b"], [{"1": "2"}, {}])
    with pytest.warns(UserWarning):
        assert check(["a", "b", "a"], [{"x": 1}, {}, {"y": 2}], valid) == \
            (["a", "b"], [{"x": "1"}, {}])
    with pytest.warns(UserWarning, match="not in available provider names"):
        check(["d"], None, valid)
    for providers, options in ((3, None), ([3], None), (["a"], 3), (["a"], ["not dict"]),
                               (["a", "b"], [{1: 2}]), ([("a", {1: 2})], [{3: 4}])):
        with pytest.raises(ValueError):
            check(providers, options, valid)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint32, np.int64,
                                   np.uint64, np.int16, np.uint16, np.int8, np.uint8,
                                   np.float16, np.bool_])
def test_c_level_io_binding(ort, dtype):
    c = importlib.import_module(f"{ort.__name__}.capi._pybind_state")
    device = c.OrtDevice(c.OrtDevice.cpu(), c.OrtDevice.default_memory(), 0)
    x = np.arange(8).reshape((-1, 2)).astype(dtype)
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    g = helper.make_graph([helper.make_node("Identity", ["X"], ["Y"])], "id",
                          [helper.make_tensor_value_info("X", elem, [None, 2])],
                          [helper.make_tensor_value_info("Y", elem, [None, 2])])
    m = helper.make_model(g, ir_version=7, opset_imports=[helper.make_operatorsetid("", 17)])
    sess = session(ort, m.SerializeToString())
    bind = c.SessionIOBinding(sess._sess)
    bind.bind_ortvalue_input("X", c.OrtValue.ortvalue_from_numpy(x, device))
    bind.bind_output("Y", device)
    sess._sess.run_with_iobinding(bind, None)
    y = bind.get_outputs()[0].numpy()
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, x)


def _dict_vectorizer() -> bytes:
    map_type = helper.make_map_type_proto(TensorProto.INT64,
                                          helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    g = helper.make_graph(
        [helper.make_node("DictVectorizer", ["float_input"], ["v"], domain="ai.onnx.ml",
                          int64_vocabulary=[0, 1, 2, 3, 4])], "dv",
        [helper.make_value_info("float_input", map_type)],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 5])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("ai.onnx.ml", 1)],
                             ir_version=8).SerializeToString()


def test_map_feeds_of_numpy_scalars_and_a_wrong_key(ort):
    sess = session(ort, _dict_vectorizer())
    assert (sess.get_inputs()[0].type, sess.get_inputs()[0].shape) == \
        ("map(int64,tensor(float))", [])
    x = {0: 25.0, 1: 5.13, 2: 0.0, 3: 0.453, 4: 5.966}
    want = np.array([list(x.values())], np.float32)
    for feed in (x, {np.int64(k): np.float32(v) for k, v in x.items()},
                 {np.int64(k): np.float64(v) for k, v in x.items()},
                 {np.int32(k): np.float64(v) for k, v in x.items()}):
        np.testing.assert_array_equal(sess.run(None, {"float_input": feed})[0], want)
    wrong = dict(x, a=5.6)
    with pytest.raises(RuntimeError, match="Unexpected key type  <class 'str'>, it cannot be "
                                           "linked to C type int64_t"):
        sess.run(None, {"float_input": wrong})


def test_void_strings_keep_their_nul_bytes(ort):
    value = np.array([b"A\0A\0", b"B\0B\0", b"C\0C\0"], np.void).reshape(1, 3)
    (y,) = session(ort, _identity(TensorProto.STRING, [1, 3])).run(None, {"x": value})
    assert y.tolist() == [["A\0A\0", "B\0B\0", "C\0C\0"]]


def test_backend_module(ort):
    backend = importlib.import_module(f"{ort.__name__}.backend")
    m = onnx.load_from_string(model())
    assert backend.supports_device("CPU")
    np.testing.assert_array_equal(backend.run(m, [X])[0], np.maximum(X, 0))
    np.testing.assert_array_equal(backend.prepare(m).run([X])[0], np.maximum(X, 0))


def test_sparse_initializer_as_output(ort):
    values = np.array([1.764052391052246, 0.40015721321105957, 0.978738009929657], np.float32)
    sp = helper.make_sparse_tensor(numpy_helper.from_array(values, "values"),
                                   numpy_helper.from_array(np.array([2, 3, 5], np.int64), "i"),
                                   [3, 3])
    g = helper.make_graph([], "g", [], [helper.make_sparse_tensor_value_info(
        "values", TensorProto.FLOAT, [3, 3])], sparse_initializer=[sp])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = session(ort, m.SerializeToString())
    state = importlib.import_module(f"{ort.__name__}.capi.onnxruntime_pybind11_state")
    vect = sess._sess.run_with_ort_values({}, ["values"], state.RunOptions())
    assert isinstance(vect, state.OrtValueVector)
    (value,) = sess.run_with_ort_values(["values"], {})
    assert isinstance(value, ort.OrtValue)
    st = value.as_sparse_tensor()
    assert isinstance(st, ort.SparseTensor) and st.dense_shape() == [3, 3]
    np.testing.assert_array_equal(st.values(), values)
    np.testing.assert_array_equal(st.as_coo_view().indices(), [2, 3, 5])


def test_the_session_attributes_client_code_reads(ort, tmp_path):
    """onnxruntime's session keeps _model_path, _model_bytes, _sess_options, the inputs' and
    outputs' metadata... in attributes that libraries read (optimum's ORTModel finds the model
    folder through session._model_path); onnxplex's session has them too."""
    path = tmp_path / "m.onnx"
    path.write_bytes(model())
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    by_path = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    by_bytes = ort.InferenceSession(model(), providers=["CPUExecutionProvider"])
    assert by_path._model_path == str(path) and by_path._model_bytes is None
    assert by_bytes._model_path is None and by_bytes._model_bytes == model()
    assert by_path._sess_options.intra_op_num_threads == 1
    assert [a.name for a in by_path._inputs_meta] == ["x"]
    assert [a.name for a in by_path._outputs_meta] == ["y"]
    assert by_path._overridable_initializers == []
    assert by_path._model_meta.graph_name == "g"
    assert "CPUExecutionProvider" in by_path._provider_options
    assert by_path._enable_fallback is True
    by_path.disable_fallback()
    assert by_path._enable_fallback is False
