"""The small-batch paths of cpu_mlas's ai.onnx.ml kernels against onnxruntime: the native SVM
evaluator (svm.h) at batch 1, a few rows and a threaded batch, and the numpy SVM path it
replaces (still the one without the native module); what the kernels' factories prepare and
their per-call fast paths (one row, a few string values) against the general ones."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP

from onnxplex.providers.cpu_mlas import _native, ml_linear

from .test_ml_ops import (
    _PARAMS,
    NUMERIC,
    OPSETS,
    check,
    check_classifier,
    classifier,
    elem_of,
    model,
    numeric_input,
    ours,
    svc_attrs,
)

needs_native = pytest.mark.skipif(
    _native.native() is None or not hasattr(_native.native(), "svm"),
    reason="the native SVM evaluator is not built")

_KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


def _regressor_attrs(rng, kernel: str, n_sv: int = 6, n_features: int = 4, **extra) -> dict:
    return dict(kernel_type=kernel, kernel_params=_PARAMS[kernel], n_supports=n_sv,
                support_vectors=rng.standard_normal(n_sv * n_features).tolist(),
                coefficients=rng.standard_normal(n_sv).tolist(), rho=[0.2], **extra)


@pytest.fixture(params=["native", "numpy"])
def svm_path(request, monkeypatch):
    """Each SVM test twice: on the native evaluator, and on the numpy path (as without the
    native module)."""
    if request.param == "native":
        if _native.native() is None or not hasattr(_native.native(), "svm"):
            pytest.skip("the native SVM evaluator is not built")
    else:
        monkeypatch.setattr(ml_linear, "_native_svm", lambda *a, **k: None)
    return request.param


@pytest.mark.parametrize("kernel", _KERNELS)
@pytest.mark.parametrize("n_classes,proba", [(2, False), (2, True), (3, True), (5, True),
                                             (4, False)])
@pytest.mark.parametrize("rows", [1, 3, 40])
def test_svm_classifier_paths(svm_path, kernel, n_classes, proba, rows):
    rng = np.random.default_rng(rows * 31 + n_classes)
    attrs = svc_attrs(rng, kernel, n_classes, proba, "str" if rows == 3 else "int",
                      degree=4.0 if kernel == "POLY" and rows == 1 else 3.0)
    x = rng.standard_normal((rows, 5)).astype(np.float32)
    check_classifier("SVMClassifier", x, 1 + rows % 5, attrs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("post", ["LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_svm_classifier_paths_post_transform_one_row(svm_path, post):
    rng = np.random.default_rng(11)
    for n_classes, proba in ((2, False), (3, True), (4, False)):
        attrs = svc_attrs(rng, "RBF", n_classes, proba, "int", post_transform=post)
        x = rng.standard_normal((1, 5)).astype(np.float32)
        check_classifier("SVMClassifier", x, 3, attrs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", list(NUMERIC))
def test_svm_classifier_paths_dtypes_and_vector(svm_path, dtype):
    rng = np.random.default_rng(5)
    attrs = svc_attrs(rng, "RBF", 3, True, "int")
    x = numeric_input(rng, dtype, (4, 5))
    check_classifier("SVMClassifier", x, 2, attrs, rtol=1e-4, atol=1e-5)
    check_classifier("SVMClassifier", x[1], 2, attrs, rtol=1e-4, atol=1e-5)   # a vector


@needs_native
def test_svm_native_threaded_batch():
    """Enough rows x vectors x features that the native run releases the GIL and splits the
    rows into blocks over threads: the same results as onnxruntime's, and as one row at a
    time."""
    rng = np.random.default_rng(2)
    attrs = svc_attrs(rng, "RBF", 4, True, "int", n_features=16)
    x = rng.standard_normal((1200, 16)).astype(np.float32)
    label, scores = check_classifier("SVMClassifier", x, 3, attrs, rtol=1e-4, atol=1e-5)
    m = classifier("SVMClassifier", TP.FLOAT, 3, attrs)
    for r in (0, 33, 1199):
        one_label, one_scores = ours(m, x[r:r + 1])
        assert one_label.tolist() == label[r:r + 1].tolist()
        np.testing.assert_array_equal(one_scores, scores[r:r + 1])
    reg = model("SVMRegressor", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1,
                **_regressor_attrs(rng, "RBF", n_sv=40, n_features=16))
    check(reg, x, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel", _KERNELS)
@pytest.mark.parametrize("rows", [1, 2, 50])
def test_svm_regressor_paths(svm_path, kernel, rows):
    rng = np.random.default_rng(rows + len(kernel))
    for one_class in (0, 1):
        attrs = _regressor_attrs(rng, kernel, one_class=one_class)
        x = rng.standard_normal((rows, 4)).astype(np.float32)
        m = model("SVMRegressor", [("x", elem_of(x))], [("y", TP.FLOAT)], 1, **attrs)
        check(m, x, rtol=1e-4, atol=1e-5)


def test_svm_paths_wrong_feature_count(svm_path):
    rng = np.random.default_rng(0)
    m = classifier("SVMClassifier", TP.FLOAT, 1, svc_attrs(rng, "RBF", 3, True, "int"))
    with pytest.raises(ValueError, match="features"):
        ours(m, np.zeros((2, 4), np.float32))
    r = model("SVMRegressor", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1,
              **_regressor_attrs(rng, "RBF"))
    with pytest.raises(ValueError, match="features"):
        ours(r, np.zeros((1, 5), np.float32))


@needs_native
def test_svm_native_rejects_a_bad_layout():
    mod = _native.native()
    f32, i64 = np.float32, np.int64
    good = dict(vectors=np.zeros(8, f32), n_features=4, kind=2, gamma=0.5, coef0=0.0,
                degree=3.0, coefs=np.ones(2, f32), seg_start=np.array([0], i64),
                seg_count=np.array([2], i64), seg_coef=np.array([0], i64),
                out_begin=np.array([0, 1], i64), bias=np.zeros(1), n_classes=0,
                prob_a=np.zeros(0, f32), prob_b=np.zeros(0, f32))
    y = mod.svm(**good).run(np.ones((3, 4), f32))
    np.testing.assert_allclose(y, np.full((3, 1), 2 * np.exp(-0.5 * 4)), rtol=1e-6)
    for bad in (dict(seg_count=np.array([3], i64)), dict(seg_coef=np.array([1], i64)),
                dict(out_begin=np.array([0, 2], i64)), dict(kind=4),
                dict(vectors=np.zeros(7, f32)), dict(n_classes=3)):
        with pytest.raises(ValueError):
            mod.svm(**(good | bad))
    with pytest.raises(ValueError):
        mod.svm(**good).run(np.ones((2, 2, 4), f32))


def test_svm_opsets(svm_path):
    rng = np.random.default_rng(9)
    attrs = svc_attrs(rng, "RBF", 3, True, "int")
    x = rng.standard_normal((1, 5)).astype(np.float32)
    for opset in OPSETS:
        check_classifier("SVMClassifier", x, opset, attrs, rtol=1e-4, atol=1e-5)
