"""onnx's own BackendTest runner drives onnxplex through ``onnxplex.backend``.

The file-based suites that ship inside the onnx wheel (simple, pytorch-converted,
pytorch-operator) run; the "real" models need downloads and are not collected; the node
suite is covered case by case in test_node_cases.py.
"""

from __future__ import annotations

import io
import unittest
import warnings

import numpy as np
import onnx.backend.test
import pytest
from onnx import TensorProto, helper

import onnxplex
import onnxplex.backend

SUITES = ("OnnxBackendSimpleModelTest", "OnnxBackendPyTorchConvertedModelTest",
          "OnnxBackendPyTorchOperatorModelTest")
# Training-only op (ai.onnx.preview.training::Gradient): out of scope for an inference runtime.
EXCLUDED = {"test_gradient_of_add_cpu", "test_gradient_of_add_and_mul_cpu"}


def _suite() -> unittest.TestSuite:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        backend_test = onnx.backend.test.BackendTest(onnxplex.backend, __name__)
    suite = unittest.TestSuite()
    for name in SUITES:
        for test in unittest.defaultTestLoader.loadTestsFromTestCase(
                backend_test.test_cases[name]):
            if test._testMethodName not in EXCLUDED:
                suite.addTest(test)
    return suite


def test_onnx_backend_test_runner_passes():
    suite = _suite()
    result = unittest.TextTestRunner(verbosity=0, stream=io.StringIO()).run(suite)
    problems = [f"{t.id()}: {tb.strip().splitlines()[-1]}" for t, tb in
                result.failures + result.errors]
    assert problems == []
    ran = result.testsRun - len(result.skipped)
    assert ran >= 138, f"only {ran} backend tests ran"   # 138 CPU cases with onnx 1.23


def test_gradient_is_a_clear_error():
    node = helper.make_node("Gradient", ["a"], ["da"], domain="ai.onnx.preview.training",
                            xs=["a"], y="a")
    with pytest.raises(onnxplex.PartitionError, match="Gradient"):
        onnxplex.backend.run_node(node, [np.ones(2, np.float32)])


def test_run_node_and_prepare():
    node = helper.make_node("Add", ["x", "y"], ["z"])
    (z,) = onnxplex.backend.run_node(node, [np.ones(3, np.float32), np.ones(3, np.float32)])
    np.testing.assert_array_equal(z, 2 * np.ones(3, np.float32))
    assert onnxplex.backend.supports_device("CPU") and not onnxplex.backend.supports_device("CUDA")
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3])
                               for n in "xy"],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [3])])
    rep = onnxplex.backend.prepare(helper.make_model(graph), intra_op_num_threads=1)
    assert rep.run([np.ones(3, np.float32), np.zeros(3, np.float32)])[0].tolist() == [1, 1, 1]
    with pytest.raises(onnxplex.InvalidArgumentError, match="unknown backend option"):
        onnxplex.backend.prepare(helper.make_model(graph), nonsense=1)


def test_the_package_has_onnxruntime_backend_layout():
    """``onnxruntime.backend.backend.OnnxRuntimeBackend`` and ``.backend_rep`` are importable
    under onnxplex's package at the same places, and are the onnxplex classes."""
    from onnxplex.backend.backend import OnnxRuntimeBackend
    from onnxplex.backend.backend_rep import OnnxRuntimeBackendRep

    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    rep = OnnxRuntimeBackend.prepare(helper.make_model(graph), "CPU")
    assert isinstance(rep, OnnxRuntimeBackendRep)
    (y,) = OnnxRuntimeBackend.run_model(helper.make_model(graph), np.ones(2, np.float32))
    np.testing.assert_array_equal(y, -np.ones(2, np.float32))
