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


# --------------------------------------------------------------------------------------------
# Lookups, OneHotEncoder, Normalizer, Scaler, Imputer: the small-input and native paths (dicts,
# the native float32 rows) against onnxruntime, and the general numpy paths again with those
# turned off
# --------------------------------------------------------------------------------------------


@pytest.fixture
def general_paths(monkeypatch):
    """The vectorised paths for every input size."""
    from onnxplex.providers.cpu_mlas import ml, ml_maps
    monkeypatch.setattr(ml, "SMALL_LOOKUP", -1)
    monkeypatch.setattr(ml_maps, "SMALL_LOOKUP", -1)
    monkeypatch.setattr(ml_maps, "_SMALL_VOCABULARY", -1)
    monkeypatch.setattr(ml_linear, "_native_rows", lambda name: None)
    monkeypatch.setattr(ml_linear, "_small_linear", lambda coef_t, bias, post: (None, post))


def _ops_tests():
    from . import test_ml_ops as t
    return [
        *[(t.test_label_encoder, (o,)) for o in OPSETS],
        *[(t.test_category_mapper, (o,)) for o in OPSETS],
        *[(t.test_one_hot_encoder, (d, z)) for d in (np.int64, np.float32, np.int32, object)
          for z in (0, 1)],
        (t.test_one_hot_encoder_float_unknown_with_zeros_0, ()),
        *[(t.test_array_feature_extractor, (d,)) for d in (np.float32, np.int64, object)],
        *[(t.test_normalizer, (n, d)) for n in ("MAX", "L1", "L2")
          for d in (np.float32, np.float64, np.int64)],
        *[(t.test_scaler, (d, p)) for d in (np.float32, np.float64) for p in (True, False)],
        *[(t.test_imputer_floats, (r, p)) for r in ("nan", "zero") for p in (True, False)],
        (t.test_imputer_int64s, (True,)),
        *[(t.test_linear_classifier, (p, c, lab)) for p in ("NONE", "LOGISTIC", "SOFTMAX",
                                                              "SOFTMAX_ZERO", "PROBIT")
          for c, lab in ((1, None), (2, "int"), (3, "str"))],
        (t.test_linear_classifier_opsets_and_vector_input, ()),
        *[(t.test_dict_vectorizer, (c,)) for c in range(len(t._DV_CASES))],
        (t.test_linear_classifier_ties_go_to_the_first_class, ()),
        *[(t.test_linear_regressor, (p, n, i)) for p in ("NONE", "SOFTMAX", "PROBIT")
          for n, i in ((1, True), (3, False), (2, "mismatched"))],
    ]


@pytest.mark.parametrize("case", range(len(_ops_tests())))
def test_general_paths_still_match(general_paths, case):
    fn, args = _ops_tests()[case]
    fn(*args)


@pytest.mark.parametrize("size", [1, 5, 32, 33, 200])
def test_lookups_small_and_large_inputs(size):
    """LabelEncoder (strings -> int64, floats with a NaN key -> strings), CategoryMapper and
    OneHotEncoder on inputs either side of SMALL_LOOKUP, unknown values included."""
    rng = np.random.default_rng(size)
    words = np.array(["a", "b", "c", "zz", "q", ""], dtype=object)
    xs = words[rng.integers(0, words.size, size)]
    m = model("LabelEncoder", [("x", TP.STRING)], [("y", TP.INT64)], 2,
              keys_strings=["a", "b", "c", ""], values_int64s=[3, 1, 2, 9], default_int64=-5)
    check(m, xs)
    m = model("CategoryMapper", [("x", TP.STRING)], [("y", TP.INT64)], 1,
              cats_strings=["a", "b", "c"], cats_int64s=[3, 1, 2], default_int64=-5)
    check(m, xs.reshape(1, -1))
    xf = np.array([0.5, 1.5, np.nan, -0.0, 7.0], np.float32)[rng.integers(0, 5, size)]
    from onnx import numpy_helper
    m = model("LabelEncoder", [("x", TP.FLOAT)], [("y", TP.STRING)], 4,
              keys_tensor=numpy_helper.from_array(np.array([0.5, np.nan, 0.0], np.float32), "k"),
              values_strings=["h", "n", "z"], default_string="?")
    got = ours(m, xf)[0]
    want = np.where(np.isnan(xf), "n", np.where(xf == 0.5, "h", np.where(xf == 0, "z", "?")))
    assert got.dtype == object and got.tolist() == want.tolist()
    for zeros in (1, 0):
        m = model("OneHotEncoder", [("x", TP.STRING)], [("y", TP.FLOAT)], 1,
                  cats_strings=["a", "b", "c", "zz", "q", ""], zeros=zeros)
        check(m, xs.reshape(-1, 1))
        xi = rng.integers(0, 4, (size, 1)).astype(np.int64)
        m = model("OneHotEncoder", [("x", TP.INT64)], [("y", TP.FLOAT)], 1,
                  cats_int64s=[0, 1, 2, 3], zeros=zeros)
        check(m, xi)
    m = model("OneHotEncoder", [("x", TP.STRING)], [("y", TP.FLOAT)], 1,
              cats_strings=["a", "b"], zeros=0)
    with pytest.raises(ValueError, match="zeros"):
        ours(m, xs.reshape(-1, 1)[:max(size, 6)] if size > 5 else words)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer_one_row_edges(norm):
    """One float32 row: in Python floats unless a value is not finite or float32 sums or
    squares could overflow or underflow; every case as onnxruntime has it."""
    m = model("Normalizer", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1, norm=norm)
    rows = [[1.0, -2.0, 3.5, 0.0], [0.0] * 4, [-1.0, -2.0, -0.5, -3.0], [3e38, 1e38, 1.0, 2.0],
            [1e-25, 2e-25, 0.0, 0.0], [1e-12, 3e-12, 1.0, 2.0], [np.inf, 1.0, 2.0, 3.0],
            [1.0, -np.inf, 2.0, 3.0], [np.nan, 1.0, 2.0, 3.0], [2.0, np.nan, 5.0, 1.0],
            [1e20, 1.0, -1e19, 0.5]]
    for r in rows:
        if norm == "MAX" and np.isnan(r).any():
            continue     # onnxruntime's max skips a NaN, numpy's (the general path) does not
        x = np.array([r], np.float32)
        for xx in (x, x[0]):
            got = ours(m, xx)[0]
            want = ort_run_float(m, xx)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True,
                                       err_msg=str(r))
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    check(m, x)
    check(m, np.random.default_rng(0).standard_normal((1, 65)).astype(np.float32))


def ort_run_float(m, x):
    from .test_ml_ops import ort_run
    return ort_run(m, x)[0]


def test_scaler_and_imputer_usual_and_other_calls():
    rng = np.random.default_rng(3)
    sc = model("Scaler", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1, offset=[0.5, -1.0, 2.0],
               scale=[2.0, 0.5, -1.5])
    for x in (rng.standard_normal((1, 3)), rng.standard_normal((50, 3)),
              rng.standard_normal(3)):
        check(sc, x.astype(np.float32))
    with pytest.raises(ValueError, match="scale"):
        ours(sc, np.zeros((1, 4), np.float32))
    for rep in (float("nan"), 0.0):
        im = model("Imputer", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1,
                   imputed_value_floats=[1.5, -2.0, 3.0], replaced_value_float=rep)
        x = np.array([[np.nan, 0.0, 1.0], [2.0, np.nan, 0.0]], np.float32)
        for xx in (x, x[:1], x[0], np.repeat(x, 20, axis=0)):
            check(im, xx)
        one = model("Imputer", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1,
                    imputed_value_floats=[9.0], replaced_value_float=rep)
        check(one, x)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("rows", [1, 16, 17, 60])
def test_linear_models_either_side_of_the_small_batch(post, rows):
    from .test_ml_ops import linear_attrs
    rng = np.random.default_rng(rows)
    for n_classes, labels in ((1, None), (2, "str"), (4, "int")):
        if post == "PROBIT" and n_classes == 1:
            continue      # onnxruntime leaves half the scores uninitialised
        attrs = linear_attrs(rng, n_classes, labels, 6) | {"post_transform": post}
        x = rng.standard_normal((rows, 6)).astype(np.float32)
        if post == "PROBIT":
            attrs["coefficients"] = (np.abs(attrs["coefficients"]) * 0.02).tolist()
            attrs["intercepts"] = [0.5] * n_classes
            x = np.abs(x)
        check_classifier("LinearClassifier", x, 1, attrs)
    reg = model("LinearRegressor", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1, targets=3,
                coefficients=(rng.standard_normal(18) * 0.1).tolist(),
                intercepts=[0.1, 0.2, 0.3], post_transform="NONE" if post == "PROBIT" else post)
    check(reg, rng.standard_normal((rows, 6)).astype(np.float32))


def test_linear_classifier_nan_scores_and_bad_rows():
    """A NaN score: the same label and scores on the native and the numpy path (numpy's
    argmax: the first NaN); a wrong feature count or rank is an error on both."""
    from .test_ml_ops import linear_attrs
    rng = np.random.default_rng(1)
    m = classifier("LinearClassifier", TP.FLOAT, 1,
                   linear_attrs(rng, 3, "int", 4) | {"post_transform": "SOFTMAX"})
    x = rng.standard_normal((3, 4)).astype(np.float32)
    x[1, 2] = np.nan
    small = ours(m, x)
    big = ours(m, np.repeat(x, 10, axis=0))
    assert small[0].tolist() == big[0][::10].tolist()
    np.testing.assert_allclose(small[1], big[1][::10], rtol=1e-6, equal_nan=True)
    for bad in (np.zeros((2, 5), np.float32), np.zeros((1, 2, 4), np.float32)):
        with pytest.raises(ValueError):
            ours(m, bad)


def test_zipmap_row_code_is_shared_by_column_count_not_labels():
    """The generated row builder is made once per column count; two label sets of one size
    (strings and ints) still get their own keys."""
    from onnxplex.providers.cpu_mlas import ml_maps
    a = ml_maps._row_dicts(["x", "y", "z"])
    b = ml_maps._row_dicts([7, 8, 9])
    cols = ([0.5, 1.5], [2.5, 3.5], [4.5, 5.5])
    assert a(*cols) == [{"x": 0.5, "y": 2.5, "z": 4.5}, {"x": 1.5, "y": 3.5, "z": 5.5}]
    assert b(*cols) == [{7: 0.5, 8: 2.5, 9: 4.5}, {7: 1.5, 8: 3.5, 9: 5.5}]
    assert ml_maps._row_maker(3) is ml_maps._row_maker(3)


# --------------------------------------------------------------------------------------------
# The native row kernels (src/rows.h) against the numpy formulas they replace
# --------------------------------------------------------------------------------------------

_ROWS = _native.native()
_needs_rows = pytest.mark.skipif(_ROWS is None or not hasattr(_ROWS, "scale_rows_f32"),
                                 reason="the native kernels are not built")


def _awkward_rows(rng: np.random.Generator, n: int, f: int) -> np.ndarray:
    x = (rng.standard_normal((n, f)) * 10).astype(np.float32)
    x[0] = 0.0                         # a zero row
    if n > 2:
        x[1, 0] = np.nan
        x[2, -1] = np.inf
    return x


@_needs_rows
@pytest.mark.parametrize("n,f", [(1, 1), (1, 5), (7, 3), (300, 70)])
def test_native_scaler_and_imputer_rows_are_numpys(n, f):
    rng = np.random.default_rng(n * 100 + f)
    x = _awkward_rows(rng, n, f)
    offset = rng.standard_normal(f).astype(np.float32)
    scale = rng.standard_normal(f).astype(np.float32)
    want = x - offset
    want *= scale
    np.testing.assert_array_equal(_ROWS.scale_rows_f32(x, offset, scale), want)
    fill = rng.standard_normal(f).astype(np.float32)
    np.testing.assert_array_equal(_ROWS.impute_rows_f32(x, fill, np.float32("nan"), True),
                                  np.where(np.isnan(x), fill, x))
    x[:, 0] = 0.0
    np.testing.assert_array_equal(_ROWS.impute_rows_f32(x, fill, 0.0, False),
                                  np.where(x == 0.0, fill, x))


@_needs_rows
@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("n,f", [(1, 1), (1, 5), (7, 3), (300, 70)])
def test_native_normalizer_rows_match_the_formula(norm, n, f):
    """The row norms in float64 (the native sums run in float32, column by column): zero
    rows copied, a NaN or an infinity spreading as IEEE arithmetic spreads it."""
    rng = np.random.default_rng(n * 100 + f + 7)
    x = _awkward_rows(rng, n, f)
    got = _ROWS.normalize_rows_f32(x, ("MAX", "L1", "L2").index(norm))
    xd = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if norm == "MAX":
            d = xd.max(axis=1, keepdims=True)
        elif norm == "L1":
            d = np.abs(xd).sum(axis=1, keepdims=True)
        else:
            d = (xd * xd).sum(axis=1, keepdims=True)
        zero = d == 0
        d = np.where(zero, 1.0, d)
        want = np.copysign(np.sqrt(xd * xd / d), xd) if norm == "L2" else xd / d
        want = np.where(zero, xd, want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@_needs_rows
@pytest.mark.parametrize("n,f", [(1, 1), (1, 3), (4, 16), (2, 32)])
def test_native_logsumexp_rows_is_numpys_logaddexp(n, f):
    """Naive Bayes' small ReduceLogSumExp: the logaddexp reduction in float64, rounded once
    to float32 (the native sum of shifted exponentials may differ from it by an ulp of float64,
    not of the float32 result); rows of -inf, with +inf, with NaN."""
    rng = np.random.default_rng(n * 10 + f)
    x = (rng.standard_normal((n, f)) * 30).astype(np.float32)
    want = np.logaddexp.reduce(x.astype(np.float64), axis=1).astype(np.float32)
    np.testing.assert_array_equal(_ROWS.logsumexp_rows_f32(x), want)
    odd = np.array([[-np.inf] * f, [np.inf] + [0.0] * (f - 1), [np.nan] * f], np.float32)
    with np.errstate(invalid="ignore"):
        want = np.logaddexp.reduce(odd.astype(np.float64), axis=1).astype(np.float32)
    np.testing.assert_array_equal(_ROWS.logsumexp_rows_f32(odd), want)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
@pytest.mark.parametrize("rows", [3, 4, 7, 1001])
def test_linear_native_rows_in_blocks_give_one_rows_bits(post, rows):
    """The native scorer takes rows four at a time (linear.h): every row's scores and label
    are, bit for bit, what that row alone gives (each score summed in the same order)."""
    from .test_ml_ops import linear_attrs
    rng = np.random.default_rng(rows)
    attrs = linear_attrs(rng, 3, "int", 5) | {"post_transform": post}
    m = classifier("LinearClassifier", TP.FLOAT, 1, attrs)
    x = rng.standard_normal((rows, 5)).astype(np.float32)
    x[rows // 2] = x[0]   # (a repeated row: the same label and scores)
    label, scores = ours(m, x)
    one = [ours(m, x[i:i + 1]) for i in range(rows)]
    np.testing.assert_array_equal(label, np.concatenate([lab for lab, _ in one]))
    np.testing.assert_array_equal(scores, np.concatenate([s for _, s in one]))
    check_classifier("LinearClassifier", x, 1, attrs)
