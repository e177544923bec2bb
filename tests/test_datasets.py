"""``onnxplex.datasets``: the example models onnxruntime's tutorials start from, by name."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnxplex
from onnxplex import backend, datasets

ort = pytest.importorskip("onnxruntime")


def test_the_examples_are_the_three_tutorial_models():
    assert datasets.examples() == ["logreg_iris.onnx", "mul_1.onnx", "sigmoid.onnx"]
    for name in datasets.examples():
        onnx.checker.check_model(onnx.load(datasets.get_example(name)), full_check=True)


def test_an_unknown_example_is_file_not_found_naming_the_known_ones():
    with pytest.raises(FileNotFoundError, match="mul_1.onnx"):
        datasets.get_example("resnet50.onnx")
    with pytest.raises(FileNotFoundError):
        datasets.get_example("../__init__.py")


@pytest.mark.parametrize(("name", "shape"), [("mul_1.onnx", (3, 2)),
                                             ("sigmoid.onnx", (3, 4, 5))])
def test_tensor_examples_as_the_tutorials_run_them(name, shape):
    path = datasets.get_example(name)
    sess = onnxplex.InferenceSession(path, providers=onnxplex.get_available_providers())
    assert [tuple(i.shape) for i in sess.get_inputs()] == [shape]
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {sess.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    if name == "mul_1.onnx":
        np.testing.assert_array_equal(got, x * np.arange(1, 7, dtype=np.float32).reshape(3, 2))


def test_logreg_iris_through_the_session_and_the_backend():
    path = datasets.get_example("logreg_iris.onnx")
    sess = onnxplex.InferenceSession(path)
    assert [(i.name, i.type) for i in sess.get_inputs()] == [("float_input", "tensor(float)")]
    assert [(o.name, o.type) for o in sess.get_outputs()] == [
        ("label", "tensor(int64)"), ("probabilities", "seq(map(int64,tensor(float)))")]
    x = np.array([[5.0, 3.5], [6.0, 2.5], [7.5, 3.0]], np.float32)   # (sepal cm)
    label, proba = sess.run(None, {"float_input": x})
    ref_label, ref_proba = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"float_input": x})
    np.testing.assert_array_equal(label, ref_label)
    assert label.tolist() == [0, 1, 2]   # (setosa, versicolor, virginica: what a fit gives)
    for row, ref in zip(proba, ref_proba, strict=True):
        assert row.keys() == ref.keys() == {0, 1, 2}
        np.testing.assert_allclose([row[k] for k in range(3)], [ref[k] for k in range(3)],
                                   rtol=1e-5, atol=1e-7)
    rep = backend.prepare(onnx.load(path), onnxplex.get_device())
    b_label, b_proba = rep.run(x)
    np.testing.assert_array_equal(b_label, label)
    assert b_proba == proba
