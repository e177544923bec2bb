"""The native float32 Sigmoid (``_mlas_native.sigmoid_f32``, sigmoid.h): close to the exact
logistic in relative terms, NaN and infinities as numpy's, and cpu_mlas's Sigmoid kernel
taking it only for contiguous float32 arrays of ``_NATIVE_SIGMOID_MIN`` elements or more."""

from __future__ import annotations

import numpy as np
import pytest

import onnxplex
from onnxplex.providers.cpu_mlas import elementwise
from onnxplex.providers.cpu_mlas._native import native

mod = native()
pytestmark = pytest.mark.skipif(mod is None or not hasattr(mod, "sigmoid_f32"),
                                reason="the _mlas_native module is not built")


def exact(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


@pytest.mark.parametrize("n", [1, 7, 8, 9, 1000, 40_000, 70_001])
@pytest.mark.parametrize("threads", [1, 2])
def test_close_to_the_exact_logistic(n, threads):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 12).astype(np.float32)
    x[:4] = [0.0, -0.0, 88.0, -87.0][: min(4, n)]
    y = np.empty_like(x)
    mod.sigmoid_f32(x, y, threads)
    want = exact(x)
    np.testing.assert_allclose(y, want, rtol=3e-7, atol=1e-30)
    # and within float32 rounding of numpy's tanh form, the kernel's fallback
    np.testing.assert_allclose(y, elementwise._sigmoid(x), rtol=1e-6, atol=6e-8)


def test_special_values_and_in_place():
    x = np.array([np.nan, np.inf, -np.inf, 1e-30, -1e-30, 100, -100, -104, 20] * 3,
                 np.float32)
    y = np.empty_like(x)
    mod.sigmoid_f32(x, y, 1)
    assert np.isnan(y[0]) and y[1] == 1.0 and y[2] == 0.0
    np.testing.assert_allclose(y[1:], exact(x[1:]), rtol=3e-7, atol=1e-38)
    z = x.copy()
    mod.sigmoid_f32(z, z, 1)   # y may be x
    np.testing.assert_array_equal(np.isnan(z), np.isnan(y))
    np.testing.assert_array_equal(z[~np.isnan(z)], y[~np.isnan(y)])


def test_binding_refuses_other_arrays():
    x = np.zeros(16, np.float64)
    with pytest.raises(ValueError, match="float32"):
        mod.sigmoid_f32(x, np.zeros(16, np.float32), 1)
    with pytest.raises(ValueError, match="16 values"):
        mod.sigmoid_f32(np.zeros(16, np.float32), np.zeros(8, np.float32), 1)


def test_sigmoid_kernel_takes_it_for_large_contiguous_float32(monkeypatch):
    calls = []

    class Spy:
        def sigmoid_f32(self, x, y, threads):
            calls.append(x.size)
            mod.sigmoid_f32(x, y, threads)

    monkeypatch.setattr(elementwise, "native", lambda: Spy())
    n = elementwise._NATIVE_SIGMOID_MIN
    big = np.linspace(-9, 9, 2 * n, dtype=np.float32)
    np.testing.assert_allclose(elementwise._sigmoid_f32(big), exact(big), rtol=3e-7)
    small = big[: n - 1].copy()
    elementwise._sigmoid_f32(small)               # too small: numpy
    elementwise._sigmoid_f32(big[::2])            # a view: numpy
    assert calls == [2 * n]


def test_session_sigmoid_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3000])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3000])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    x = (np.random.default_rng(0).standard_normal((4, 3000)) * 8).astype(np.float32)
    ours = onnxplex.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    theirs = ort.InferenceSession(m.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
