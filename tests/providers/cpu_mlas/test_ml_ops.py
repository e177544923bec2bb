"""cpu_mlas ai.onnx.ml kernels (ml_linear.py, ml_maps.py and ml.py's LabelEncoder,
ArrayFeatureExtractor, Binarizer) against onnxruntime, at every ai.onnx.ml opset (1 to 5) each
op exists in, over their attributes, label types, binary and multiclass cases and input dtypes.

Where onnxruntime has no kernel for an input type the schema allows (it runs LinearRegressor,
SVMRegressor, Imputer and Binarizer on float only, Imputer on int64 too, OneHotEncoder not on
int32), the oracle is onnxruntime on the input cast to a type it runs, the cast onnxruntime's
own classifiers make. Where its Python API cannot take a map (map(int64, string)), the
expected values are written out. SVC probabilities are also checked against scikit-learn's
(libsvm's own coupling), and onnx.reference's SVMClassifier is shown wrong on them.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

import onnxplex
from onnxplex import ProviderContext, load_model
from onnxplex.providers.cpu_mlas import _ml_common
from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

ort.set_default_logger_severity(3)
ML = "ai.onnx.ml"
OPSETS = (1, 2, 3, 4, 5)
POSTS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")
NUMERIC = {np.float32: TP.FLOAT, np.float64: TP.DOUBLE, np.int64: TP.INT64, np.int32: TP.INT32}
NATIVE_ONLY = [("cpu_mlas", {"reference_fallback": 0})]

ORT_FAIL = ort.capi.onnxruntime_pybind11_state.Fail   # a kernel refusing its input at run time
ORT_INVALID_ARGUMENT = ort.capi.onnxruntime_pybind11_state.InvalidArgument


def tt(elem: int) -> onnx.TypeProto:
    return oh.make_tensor_type_proto(elem, None)


def map_t(key: int, value: int) -> onnx.TypeProto:
    return oh.make_map_type_proto(key, tt(value))


def elem_of(a: np.ndarray) -> int:
    return TP.STRING if a.dtype == object else NUMERIC[a.dtype.type]


def model(op_type: str, ins, outs, opset: int, **attrs) -> onnx.ModelProto:
    """One ai.onnx.ml node; ``ins``/``outs`` are (name, TypeProto or element type) pairs."""
    def vi(name, t):
        return oh.make_value_info(name, tt(t) if isinstance(t, int) else t)

    node = oh.make_node(op_type, [n for n, _ in ins], [n for n, _ in outs], domain=ML, **attrs)
    g = oh.make_graph([node], "g", [vi(*i) for i in ins], [vi(*o) for o in outs])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 21), oh.make_opsetid(ML, opset)],
                         ir_version=10)


def ort_run(m: onnx.ModelProto, *args) -> list:
    """onnxruntime's outputs (its run errors are ORT_FAIL)."""
    names = [i.name for i in m.graph.input]
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, dict(zip(names, args)))


def ours(m: onnx.ModelProto, *args) -> tuple:
    """The native kernel, called as the executor calls it (read-only inputs)."""
    node = load_model(m).node_views[0]
    config, reason = CpuMlasProvider.op_table.lookup(node)
    assert config is not None, reason
    ro = []
    for a in args:
        if isinstance(a, np.ndarray):
            a = a.view()
            a.flags.writeable = False
        ro.append(a)
    kernel = config.factory(node, ProviderContext())
    with np.errstate(all="ignore"):   # as a session runs its kernels
        out = kernel(*ro)
    return out if isinstance(out, tuple) else (out,)


def plex_run(m: onnx.ModelProto, *args) -> list:
    names = [i.name for i in m.graph.input]
    s = onnxplex.InferenceSession(m.SerializeToString(), providers=NATIVE_ONLY)
    return s.run(None, dict(zip(names, args)))


def same(got, want, rtol=1e-5, atol=1e-6) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, list):
            assert isinstance(g, list) and len(g) == len(w), (k, g, w)
            for gd, wd in zip(g, w):
                assert list(gd) == list(wd), (k, gd, wd)     # keys, in order
                np.testing.assert_allclose(list(gd.values()), list(wd.values()), rtol=rtol,
                                           atol=atol)
            continue
        w = np.asarray(w)
        assert isinstance(g, np.ndarray), (k, type(g))
        assert g.shape == w.shape, (k, g.shape, w.shape)
        assert g.dtype == w.dtype, (k, g.dtype, w.dtype)
        if w.dtype.kind in "OiuSUb":
            assert g.tolist() == w.tolist(), (k, g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {k}")


def check(m: onnx.ModelProto, *args, oracle_model=None, oracle_args=None, **tol) -> tuple:
    """Our kernel on ``args`` against onnxruntime on the same model and inputs, or on
    ``oracle_model`` and ``oracle_args`` (another input type, where it has no kernel)."""
    got = ours(m, *args)
    same(got, ort_run(oracle_model or m, *(oracle_args or args)), **tol)
    return got


def strs(*v) -> np.ndarray:
    a = np.empty(len(v), dtype=object)
    a[:] = list(v)
    return a


def numeric_input(rng, dtype, shape) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-3, 4, shape).astype(dtype)


# --------------------------------------------------------------------------------------------
# Post-transforms
# --------------------------------------------------------------------------------------------


def test_probit_is_onnxruntimes_erfinv_approximation():
    """ComputeProbit uses Winitzki's ErfInv (a = 0.147): within ~1e-2 of the exact probit,
    matched here to float32 rounding; no scipy."""
    from statistics import NormalDist

    p = np.array([1e-4, 0.01, 0.2, 0.5, 0.7, 0.99, 0.9999], np.float32)
    exact = np.array([NormalDist().inv_cdf(float(v)) for v in p])
    got = _ml_common.probit(p)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, exact, atol=2e-2)
    assert np.abs(got - exact).max() > 1e-4          # the approximation, not the exact value
    x = np.stack([p[:3], p[3:6], [p[6], 0.5, 0.5]]).astype(np.float32)
    m = model("LinearRegressor", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1,
              coefficients=np.eye(3).reshape(-1).tolist(), targets=3, post_transform="PROBIT")
    check(m, x)


# --------------------------------------------------------------------------------------------
# SVMClassifier
# --------------------------------------------------------------------------------------------

_PARAMS = {"LINEAR": [0.0, 0.0, 0.0], "RBF": [0.3, 0.0, 3.0], "POLY": [0.2, 0.5, 3.0],
           "SIGMOID": [0.1, 0.2, 3.0]}


def svc_attrs(rng, kernel: str, n_classes: int, proba: bool, labels: str, n_features: int = 5,
              degree: float = 3.0, **extra) -> dict:
    per_class = [3, 2, 4, 3, 2][:n_classes]
    n_vec = sum(per_class)
    n_pairs = n_classes * (n_classes - 1) // 2
    params = list(_PARAMS[kernel])
    params[2] = degree
    attrs = dict(kernel_type=kernel, kernel_params=params, vectors_per_class=per_class,
                 support_vectors=rng.standard_normal(n_vec * n_features).tolist(),
                 coefficients=rng.standard_normal((n_classes - 1) * n_vec).tolist(),
                 rho=(rng.standard_normal(n_pairs) * 0.3).tolist())
    if proba:
        attrs["prob_a"] = (-rng.uniform(0.5, 3.0, n_pairs)).tolist()
        attrs["prob_b"] = rng.uniform(-0.3, 0.3, n_pairs).tolist()
    if labels == "str":
        attrs["classlabels_strings"] = [f"c{k}" for k in range(n_classes)]
    else:
        attrs["classlabels_ints"] = [10 + 3 * k for k in range(n_classes)]
    attrs.update(extra)
    return attrs


def classifier(op_type: str, x_elem: int, opset: int, attrs: dict) -> onnx.ModelProto:
    label = TP.STRING if "classlabels_strings" in attrs else TP.INT64
    return model(op_type, [("x", x_elem)], [("label", label), ("scores", TP.FLOAT)], opset,
                 **attrs)


def check_classifier(op_type: str, x: np.ndarray, opset: int, attrs: dict, **tol) -> tuple:
    """Ours on x's dtype; onnxruntime on it too (both cast to float)."""
    return check(classifier(op_type, elem_of(x), opset, attrs), x, **tol)


_SVC_CASES = [(k, c, p) for k in ("LINEAR", "POLY", "RBF", "SIGMOID") for c in (2, 3, 4)
              for p in (False, True)]


@pytest.mark.parametrize("case", range(len(_SVC_CASES)))
def test_svm_classifier_kernels_classes_probabilities(case):
    kernel, n_classes, proba = _SVC_CASES[case]
    rng = np.random.default_rng(case)
    dtype = list(NUMERIC)[case % 4]
    opset = OPSETS[case % 5]
    n_rows = 40 if case % 3 == 0 else 5          # the coupling runs both ways
    attrs = svc_attrs(rng, kernel, n_classes, proba, "str" if case % 2 else "int",
                      degree=2.0 if case % 4 == 1 else 3.0)
    x = numeric_input(rng, dtype, (n_rows, 5))
    label, scores = check_classifier("SVMClassifier", x, opset, attrs, rtol=1e-4, atol=1e-5)
    want_cols = n_classes if proba else (2 if n_classes == 2 else n_classes * (n_classes - 1) // 2)
    assert scores.shape == (n_rows, want_cols)
    if proba:
        np.testing.assert_allclose(scores.sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("n_classes,proba", [(2, False), (2, True), (3, False), (4, True)])
def test_svm_classifier_post_transforms(post, n_classes, proba):
    if post == "PROBIT" and n_classes == 2 and not proba:
        pytest.skip("onnxruntime leaves the second column uninitialised")
    rng = np.random.default_rng(7)
    attrs = svc_attrs(rng, "RBF", n_classes, proba, "int", post_transform=post)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    for opset in OPSETS:
        check_classifier("SVMClassifier", x, opset, attrs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("labels", ["int", "str"])
@pytest.mark.parametrize("coefs", ["mixed", "positive"])
@pytest.mark.parametrize("n_classes", [1, 2, 3])
def test_svm_classifier_liblinear(labels, coefs, n_classes):
    """No support vectors: scores = x @ coefficients^T + rho[0]; two classes pick the second
    label when the best score is >= 0.5 (all coefficients positive) or > 0 (mixed)."""
    rng = np.random.default_rng(n_classes)
    c = rng.uniform(0.0, 0.3, (n_classes, 4))
    if coefs == "mixed":
        c -= 0.15
    attrs = dict(kernel_type="LINEAR", kernel_params=[0.0, 0.0, 0.0],
                 coefficients=c.reshape(-1).tolist(), rho=[0.05])
    if labels == "str":
        attrs["classlabels_strings"] = ["a", "b", "c"][:n_classes]
    else:
        attrs["classlabels_ints"] = [4, 5, 6][:n_classes]
    x = rng.uniform(-1.0, 3.0, (30, 4)).astype(np.float32)
    for k, post in enumerate(POSTS):
        attrs["post_transform"] = post
        xx = np.abs(x) / 20 if post == "PROBIT" else x
        check_classifier("SVMClassifier", xx, OPSETS[k], attrs)


def test_svm_classifier_many_classes():
    """8 classes (28 pairs): votes counted rather than looked up in a sign table."""
    rng = np.random.default_rng(8)
    per_class = [2, 3, 1, 2, 2, 3, 1, 2]
    attrs = svc_attrs(rng, "RBF", 5, True, "int")
    n_vec, n_pairs = sum(per_class), 28
    attrs.update(vectors_per_class=per_class, classlabels_ints=list(range(8)),
                 support_vectors=rng.standard_normal(n_vec * 5).tolist(),
                 coefficients=rng.standard_normal(7 * n_vec).tolist(),
                 rho=(rng.standard_normal(n_pairs) * 0.3).tolist(),
                 prob_a=(-rng.uniform(0.5, 3.0, n_pairs)).tolist(),
                 prob_b=rng.uniform(-0.3, 0.3, n_pairs).tolist())
    x = rng.standard_normal((30, 5)).astype(np.float32)
    check_classifier("SVMClassifier", x, 3, attrs, rtol=1e-4, atol=1e-5)
    del attrs["prob_a"], attrs["prob_b"]
    check_classifier("SVMClassifier", x, 3, attrs, rtol=1e-4, atol=1e-5)


def test_svm_classifier_one_class_label():
    rng = np.random.default_rng(3)
    attrs = svc_attrs(rng, "RBF", 2, False, "int")
    attrs.update(vectors_per_class=[5], classlabels_ints=[7])
    attrs["coefficients"] = attrs["coefficients"][:5]
    x = rng.standard_normal((4, 5)).astype(np.float32)
    m = classifier("SVMClassifier", TP.FLOAT, 1, attrs)
    label, scores = ours(m, x)
    want = ort_run(m, x)      # its scores are uninitialised memory: [N, 2] of zeros here
    same([label], want[:1])
    assert scores.shape == want[1].shape and not scores.any()


@pytest.mark.parametrize("dtype", list(NUMERIC))
@pytest.mark.parametrize("opset", OPSETS)
def test_svm_classifier_dtypes(dtype, opset):
    rng = np.random.default_rng(opset)
    attrs = svc_attrs(rng, "POLY", 3, True, "int")
    x = numeric_input(rng, dtype, (9, 5))
    check_classifier("SVMClassifier", x, opset, attrs, rtol=1e-4, atol=1e-5)
    check_classifier("SVMClassifier", x[0], opset, attrs, rtol=1e-4, atol=1e-5)   # a vector


def test_svm_classifier_bad_attributes():
    rng = np.random.default_rng(0)
    x_elem = TP.FLOAT
    for bad, name in [(dict(kernel_type="CUBIC"), "kernel_type"),
                      (dict(post_transform="SIGMOID"), "post_transform"),
                      (dict(prob_a=[1.0]), "prob_a"),
                      (dict(vectors_per_class=[3, 2]), "vectors_per_class"),
                      (dict(rho=[0.1]), "rho")]:
        attrs = svc_attrs(rng, "RBF", 3, False, "int", **bad)
        with pytest.raises(ValueError, match=name):
            ours(classifier("SVMClassifier", x_elem, 1, attrs), np.zeros((1, 5), np.float32))


# --------------------------------------------------------------------------------------------
# SVC against scikit-learn: the multiclass coupling
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sklearn_svcs():
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.datasets import make_classification
    from sklearn.svm import SVC

    out = []
    for n_classes, kernel in ((3, "rbf"), (4, "rbf"), (4, "poly"), (3, "linear")):
        x, y = make_classification(240, 6, n_informative=4, n_classes=n_classes,
                                   n_clusters_per_class=1, flip_y=0.1, random_state=n_classes)
        x = x.astype(np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")    # SVC(probability=True) is deprecated in 1.9
            svc = SVC(probability=True, kernel=kernel, random_state=0).fit(x, y)
            m = skl2onnx.to_onnx(svc, x[:1], options={id(svc): {"zipmap": False}},
                                 target_opset={"": 17, ML: 3})
            out.append((svc, m, x, svc.predict_proba(x)))
    return out


def test_svc_probabilities_match_sklearn_and_onnxruntime(sklearn_svcs):
    for _svc, m, x, want in sklearn_svcs:
        names = [o.name for o in m.graph.output]
        by_path = []
        for rows in (x, x[:3]):                  # numpy and row-by-row couplings
            got = dict(zip(names, plex_run(m, rows)))
            ref = dict(zip(names, ort_run(m, rows)))
            probs = got["probabilities"]
            np.testing.assert_allclose(probs, want[:len(rows)], atol=1e-5)
            np.testing.assert_allclose(probs, ref["probabilities"], atol=1e-5)
            assert got["label"].tolist() == ref["label"].tolist()
            by_path.append(probs[:3])
        np.testing.assert_allclose(by_path[0], by_path[1], atol=1e-6)


def test_onnx_reference_svc_probabilities_are_wrong(sklearn_svcs):
    """onnx.reference couples the pairwise probabilities with a matrix product: far off
    scikit-learn (and some negative), which is why SVMClassifier must never fall back to it."""
    from onnx.reference import ReferenceEvaluator

    for _svc, m, x, want in sklearn_svcs[:2]:
        probs = ReferenceEvaluator(m).run(["probabilities"], {"X": x})[0]
        assert np.abs(probs - want).max() > 0.05


# --------------------------------------------------------------------------------------------
# SVMRegressor
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor(kernel, one_class):
    rng = np.random.default_rng(len(kernel) + one_class)
    attrs = dict(kernel_type=kernel, kernel_params=_PARAMS[kernel], n_supports=6,
                 support_vectors=rng.standard_normal(24).tolist(),
                 coefficients=rng.standard_normal(6).tolist(), rho=[0.2], one_class=one_class,
                 post_transform="LOGISTIC")          # ignored by onnxruntime
    x32 = rng.standard_normal((8, 4)).astype(np.float32)
    for k, dtype in enumerate(NUMERIC):
        x = numeric_input(rng, dtype, (8, 4)) if dtype != np.float32 else x32
        m = model("SVMRegressor", [("x", elem_of(x))], [("y", TP.FLOAT)], OPSETS[k], **attrs)
        oracle = model("SVMRegressor", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1, **attrs)
        check(m, x, oracle_model=oracle, oracle_args=[x.astype(np.float32)], rtol=1e-5,
              atol=1e-5)


def test_svm_bad_attributes_without_support_vectors():
    x = np.zeros((1, 2), np.float32)
    for op_type, outs, extra in (
            ("SVMRegressor", [("y", TP.FLOAT)], dict(n_supports=0)),
            ("SVMClassifier", [("l", TP.INT64), ("s", TP.FLOAT)], dict(classlabels_ints=[1]))):
        for bad, name in ((dict(kernel_type="rbf"), "kernel_type"),
                          (dict(post_transform="softmax"), "post_transform"),
                          (dict(rho=None), "rho")):
            attrs = {k: v for k, v in (dict(coefficients=[1.0, 2.0], rho=[0.0]) | extra
                                       | bad).items() if v is not None}
            with pytest.raises(ValueError, match=name):
                ours(model(op_type, [("x", TP.FLOAT)], outs, 1, **attrs), x)


def test_svm_regressor_linear_mode():
    """No support vectors: y = x @ coefficients + rho[0]."""
    rng = np.random.default_rng(5)
    attrs = dict(kernel_type="RBF", kernel_params=[0.1, 0.0, 3.0], n_supports=0,
                 coefficients=rng.standard_normal(4).tolist(), rho=[-0.4])
    x = rng.standard_normal((6, 4)).astype(np.float32)
    for opset in OPSETS:
        check(model("SVMRegressor", [("x", TP.FLOAT)], [("y", TP.FLOAT)], opset, **attrs), x)


# --------------------------------------------------------------------------------------------
# LinearClassifier, LinearRegressor
# --------------------------------------------------------------------------------------------


def linear_attrs(rng, n_classes: int, labels: str | None, n_features: int = 4) -> dict:
    attrs = dict(coefficients=rng.standard_normal(n_classes * n_features).tolist(),
                 intercepts=rng.standard_normal(n_classes).tolist(), multi_class=1)
    n_labels = 2 if n_classes == 1 else n_classes
    if labels == "str":
        attrs["classlabels_strings"] = [f"L{k}" for k in range(n_labels)]
    elif labels == "int":
        attrs["classlabels_ints"] = [-1 + 2 * k for k in range(n_labels)]
    return attrs


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("n_classes,labels", [(1, "int"), (1, "str"), (1, None), (2, "int"),
                                              (3, "str"), (4, "int")])
def test_linear_classifier(post, n_classes, labels):
    if post == "PROBIT" and n_classes == 1 and labels:
        pytest.skip("onnxruntime leaves half the [N, 2] scores uninitialised")
    rng = np.random.default_rng(n_classes)
    attrs = linear_attrs(rng, n_classes, labels, 4) | {"post_transform": post}
    for k, dtype in enumerate(NUMERIC):
        x = numeric_input(rng, dtype, (7, 4))
        if post == "PROBIT":     # scores in (0, 1), where the probit is defined
            attrs["coefficients"] = (np.abs(attrs["coefficients"]) * 0.02).tolist()
            attrs["intercepts"] = [0.5] * n_classes
        check_classifier("LinearClassifier", x, OPSETS[k], attrs)
        check_classifier("LinearClassifier", x[:1], OPSETS[k], attrs)     # one row


def test_linear_classifier_opsets_and_vector_input():
    rng = np.random.default_rng(2)
    attrs = linear_attrs(rng, 3, "int") | {"post_transform": "SOFTMAX"}
    x = rng.standard_normal(4).astype(np.float32)
    for opset in OPSETS:
        check_classifier("LinearClassifier", x, opset, attrs)
        check_classifier("LinearClassifier", x.reshape(1, 4).repeat(3, 0), opset, attrs)


def test_linear_classifier_ties_go_to_the_first_class():
    attrs = dict(coefficients=[1.0, 0.0, 1.0, 0.0, 0.0, 1.0], intercepts=[0.0, 0.0, 0.0],
                 classlabels_ints=[7, 8, 9])
    x = np.array([[1.0, 1.0], [2.0, 1.0], [0.0, 3.0]], np.float32)
    label, _ = check_classifier("LinearClassifier", x, 1, attrs)
    assert label.tolist() == [7, 7, 9]


def test_linear_classifier_bad_attributes():
    base = dict(coefficients=[1.0, 2.0, 3.0, 4.0], intercepts=[0.0, 0.0], classlabels_ints=[1, 2])
    for bad, name in [(dict(intercepts=None), "intercepts"), (dict(post_transform="X"),
                                                              "post_transform"),
                      (dict(coefficients=[1.0, 2.0, 3.0]), "coefficients")]:
        attrs = {k: v for k, v in (base | bad).items() if v is not None}
        m = classifier("LinearClassifier", TP.FLOAT, 1, attrs)
        with pytest.raises(ValueError, match=name):
            ours(m, np.zeros((1, 2), np.float32))


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("targets,intercepts", [(1, True), (1, False), (3, True), (3, False),
                                                (2, "mismatched")])
def test_linear_regressor(post, targets, intercepts):
    rng = np.random.default_rng(targets)
    attrs = dict(coefficients=(rng.standard_normal(targets * 5) * 0.05).tolist(),
                 targets=targets, post_transform=post)
    if intercepts is True:
        attrs["intercepts"] = (0.5 + rng.standard_normal(targets) * 0.05).tolist()
    elif intercepts == "mismatched":     # not one per target: not used
        attrs["intercepts"] = [0.3] * (targets + 1)
    for k, dtype in enumerate(NUMERIC):
        x = numeric_input(rng, dtype, (6, 5))
        m = model("LinearRegressor", [("x", elem_of(x))], [("y", TP.FLOAT)], OPSETS[k], **attrs)
        oracle = model("LinearRegressor", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1, **attrs)
        check(m, x, oracle_model=oracle, oracle_args=[x.astype(np.float32)])


# --------------------------------------------------------------------------------------------
# Normalizer, Scaler, Imputer
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("dtype", list(NUMERIC))
def test_normalizer(norm, dtype):
    rng = np.random.default_rng(1)
    x = numeric_input(rng, dtype, (12, 5))   # > 8 rows: maxima column by column
    x[2] = 0                                   # a zero row is copied
    if dtype == np.float32:
        x[4, :2] = 1e-30                        # squares underflow: L2 copies the row
        x[4, 2:] = 0
    x[3] = -np.abs(x[3]) - 1                   # a negative max
    for k, opset in enumerate(OPSETS):
        xx = x if k % 2 else x[1]              # rank 2 and rank 1
        m = model("Normalizer", [("x", elem_of(x))], [("y", TP.FLOAT)], opset, norm=norm)
        check(m, xx)


@pytest.mark.parametrize("dtype", list(NUMERIC))
@pytest.mark.parametrize("per_feature", [True, False])
def test_scaler(dtype, per_feature):
    rng = np.random.default_rng(2)
    n = 5 if per_feature else 1
    attrs = dict(offset=rng.standard_normal(n).tolist(), scale=rng.uniform(0.1, 3, n).tolist())
    x = numeric_input(rng, dtype, (7, 5)) * 3
    for k, opset in enumerate(OPSETS):
        m = model("Scaler", [("x", elem_of(x))], [("y", TP.FLOAT)], opset, **attrs)
        check(m, x if k % 2 else x[0])


def test_scaler_bad_sizes():
    m = model("Scaler", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1, offset=[0.0, 1.0],
              scale=[1.0, 2.0])
    with pytest.raises(ValueError, match="scale"):
        ours(m, np.zeros((2, 3), np.float32))
    m = model("Scaler", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1, offset=[0.0], scale=[1.0, 2.0])
    with pytest.raises(ValueError, match="offset"):
        ours(m, np.zeros((2, 2), np.float32))


@pytest.mark.parametrize("replaced", ["nan", "zero"])
@pytest.mark.parametrize("per_feature", [True, False])
def test_imputer_floats(replaced, per_feature):
    rng = np.random.default_rng(4)
    x = np.round(rng.standard_normal((6, 4)), 1).astype(np.float32)
    x[1, 2] = x[4, 0] = np.nan
    x[2, 1] = x[5, 3] = 0.0
    attrs = dict(imputed_value_floats=([1.5, -2.0, 3.25, 9.0] if per_feature else [7.5]),
                 replaced_value_float=float("nan") if replaced == "nan" else 0.0)
    for opset in OPSETS:
        check(model("Imputer", [("x", TP.FLOAT)], [("y", TP.FLOAT)], opset, **attrs), x)
    # double: onnxruntime has no kernel; ours keeps double and agrees with the float run
    m = model("Imputer", [("x", TP.DOUBLE)], [("y", TP.DOUBLE)], 1, **attrs)
    got = ours(m, x.astype(np.float64))[0]
    assert got.dtype == np.float64
    want = ort_run(model("Imputer", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1, **attrs), x)[0]
    np.testing.assert_array_equal(got, want.astype(np.float64))


@pytest.mark.parametrize("per_feature", [True, False])
def test_imputer_int64s(per_feature):
    x = np.array([[0, 5, -1], [3, -1, -1], [-1, 2, 7]], np.int64)
    attrs = dict(imputed_value_int64s=[10, 20, 30] if per_feature else [99],
                 replaced_value_int64=-1)
    for opset in OPSETS:
        check(model("Imputer", [("x", TP.INT64)], [("y", TP.INT64)], opset, **attrs), x)
        check(model("Imputer", [("x", TP.INT64)], [("y", TP.INT64)], opset, **attrs), x[0])
    m = model("Imputer", [("x", TP.INT32)], [("y", TP.INT32)], 1, **attrs)
    got = ours(m, x.astype(np.int32))[0]
    want = ort_run(model("Imputer", [("x", TP.INT64)], [("y", TP.INT64)], 1, **attrs), x)[0]
    assert got.dtype == np.int32 and got.tolist() == want.tolist()


def test_imputer_bad_attributes():
    for attrs in (dict(), dict(imputed_value_floats=[1.0], imputed_value_int64s=[1])):
        m = model("Imputer", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1, **attrs)
        with pytest.raises(ValueError, match="imputed_value"):
            ours(m, np.zeros((1, 2), np.float32))


# --------------------------------------------------------------------------------------------
# OneHotEncoder, CategoryMapper, LabelEncoder
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.float64, np.int32, object])
@pytest.mark.parametrize("zeros", [1, 0])
def test_one_hot_encoder(dtype, zeros):
    if dtype is object:
        x = strs("b", "a", "q", "c", "a", "b").reshape(2, 3)
        attrs = dict(cats_strings=["a", "b", "c", "a"])     # a repeated category: last wins
    else:
        x = np.array([[1.7, -2.0, 3.0], [8.0, 1.0, -2.9]]).astype(dtype)   # truncated
        attrs = dict(cats_int64s=[1, 3, -2, 8, 1])
    attrs["zeros"] = zeros
    # onnxruntime has no int32 kernel: it runs on int64 there
    oracle_x = x.astype(np.int64) if dtype is np.int32 else x
    for k, opset in enumerate(OPSETS):
        xx, ox = (x, oracle_x) if k % 2 else (x[0], oracle_x[0])
        m = model("OneHotEncoder", [("x", elem_of(x))], [("y", TP.FLOAT)], opset, **attrs)
        om = model("OneHotEncoder", [("x", elem_of(ox))], [("y", TP.FLOAT)], opset, **attrs)
        known = dtype is not object or k % 2 == 0 and "q" not in xx.tolist()
        if zeros or known:
            check(m, xx, oracle_model=om, oracle_args=[ox])
        else:   # an unknown category with zeros=0 is an error in both
            with pytest.raises(ORT_FAIL, match="Unknown Category and zeros = 0"):
                ort_run(om, ox)
            with pytest.raises(ValueError, match="zeros"):
                ours(m, xx)


def test_one_hot_encoder_float_unknown_with_zeros_0():
    m = model("OneHotEncoder", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1, cats_int64s=[1, 2],
              zeros=0)
    x = np.array([1.0, 5.0], np.float32)
    with pytest.raises(ORT_FAIL, match="Unknown Category and zeros = 0"):
        ort_run(m, x)
    with pytest.raises(ValueError, match="zeros"):
        ours(m, x)
    check(m, np.array([[1.0, 2.5]], np.float32))


@pytest.mark.parametrize("opset", OPSETS)
def test_category_mapper(opset):
    attrs = dict(cats_strings=["a", "b", "c", "a"], cats_int64s=[1, 2, 3, 4],
                 default_string="?", default_int64=-9)
    x = strs("a", "c", "zz", "b").reshape(2, 2)
    check(model("CategoryMapper", [("x", TP.STRING)], [("y", TP.INT64)], opset, **attrs), x)
    xi = np.array([[4, 1, 0], [2, 3, 3]], np.int64)
    check(model("CategoryMapper", [("x", TP.INT64)], [("y", TP.STRING)], opset, **attrs), xi)
    plain = dict(cats_strings=["a", "b"], cats_int64s=[5, 6])      # spec defaults
    check(model("CategoryMapper", [("x", TP.STRING)], [("y", TP.INT64)], opset, **plain), x)
    check(model("CategoryMapper", [("x", TP.INT64)], [("y", TP.STRING)], opset, **plain), xi)


def _label_encoder_cases(opset: int):
    """(attrs, input, output element type) per LabelEncoder version."""
    if opset == 1:
        return [(dict(classes_strings=["a", "b", "c", "a"], default_int64=-5),
                 strs("a", "b", "q", "c"), TP.INT64),
                (dict(classes_strings=["a", "b", "c"], default_string="none"),
                 np.array([[2, 0], [7, -1]], np.int64), TP.STRING)]
    cases = [(dict(keys_strings=["a", "b", "a"], values_int64s=[1, 2, 3], default_int64=42),
              strs("a", "b", "x"), TP.INT64),
             (dict(keys_int64s=[3, 1, 3], values_strings=["t", "o", "T"]),
              np.array([3, 1, 2], np.int64), TP.STRING),
             (dict(keys_floats=[0.5, 1.5, 0.5], values_floats=[1.0, 2.0, 3.0],
                   default_float=-7.0), np.array([0.5, 1.5, 2.5], np.float32), TP.FLOAT),
             (dict(keys_int64s=[1, 2], values_floats=[0.25, 0.75]),
              np.array([[2, 9], [1, 1]], np.int64), TP.FLOAT),
             (dict(keys_floats=[2.0, -1.0], values_int64s=[5, 6]),
              np.array([-1.0, 0.0, 2.0], np.float32), TP.INT64),
             (dict(keys_strings=["x", "y"], values_floats=[1.5, 2.5]),
              strs("y", "z"), TP.FLOAT),
             (dict(keys_floats=[1.0, 2.0], values_strings=["one", "two"],
                   default_string="?"), np.array([2.0, 3.0], np.float32), TP.STRING)]
    if opset >= 4:
        cases += [
            (dict(keys_tensor=numpy_helper.from_array(np.array([1.0, np.nan, 3.0]), "k"),
                  values_tensor=numpy_helper.from_array(np.array([10, 20, 30], np.int64), "v"),
                  default_tensor=numpy_helper.from_array(np.array([-1], np.int64), "d")),
             np.array([3.0, np.nan, 5.0, 1.0]), TP.INT64),
            (dict(keys_int64s=[1, 2], values_tensor=numpy_helper.from_array(
                np.array([1.5, 2.5]), "v"),
                default_tensor=numpy_helper.from_array(np.array([0.0]), "d")),
             np.array([2, 3], np.int64), TP.DOUBLE)]
    return cases


@pytest.mark.parametrize("opset", OPSETS)
def test_label_encoder(opset):
    for attrs, x, out in _label_encoder_cases(opset):
        check(model("LabelEncoder", [("x", elem_of(x))], [("y", out)], opset, **attrs), x)


# --------------------------------------------------------------------------------------------
# ArrayFeatureExtractor, Binarizer
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, object])
def test_array_feature_extractor(dtype):
    rng = np.random.default_rng(0)
    idx = np.array([3, 0, 3], np.int64)
    for k, shape in enumerate([(4,), (3, 4), (2, 3, 4)] * 2):
        x = rng.integers(0, 9, shape).astype(dtype)
        if dtype is object:
            x = x.astype(str).astype(object)
        m = model("ArrayFeatureExtractor", [("x", elem_of(x)), ("i", TP.INT64)],
                  [("y", elem_of(x))], OPSETS[k % 5])
        check(m, x, idx)


@pytest.mark.parametrize("dtype", [np.float32, object])
def test_array_feature_extractor_constant_indices(dtype):
    """Constant column indices (ColumnTransformer's conversions) are checked once; inputs of
    each rank give onnxruntime's result, an input narrower than the largest index and a
    negative index are errors in both."""
    from onnx import numpy_helper

    rng = np.random.default_rng(1)
    for idx in ([2, 0, 2], [1], [-1]):
        i = numpy_helper.from_array(np.array(idx, np.int64), "i")
        for shape in ((4,), (1, 3), (5, 3), (2, 1, 4), (1, 2)):
            x = rng.integers(0, 9, shape).astype(dtype)
            if dtype is object:
                x = x.astype(str).astype(object)
            m = model("ArrayFeatureExtractor", [("x", elem_of(x)), ("i", TP.INT64)],
                      [("y", elem_of(x))], 1)
            m.graph.initializer.append(i)
            del m.graph.input[1]   # (a constant: listed as an input, it is a default)
            try:
                want = ort_run(m, x)[0]
            except Exception:   # noqa: BLE001 - onnxruntime's out-of-range error
                want = None
            sess = onnxplex.InferenceSession(m.SerializeToString())
            if want is None:
                with pytest.raises(onnxplex.KernelExecutionError, match="out of range"):
                    sess.run(None, {"x": x})
                continue
            got = sess.run(None, {"x": x})[0]
            assert got.shape == want.shape and got.tolist() == want.tolist(), (idx, shape)


def test_binarizer():
    x = np.array([[-1.0, 0.5, 0.5001], [2.0, 0.0, 0.49]], np.float32)
    for opset in OPSETS:
        check(model("Binarizer", [("x", TP.FLOAT)], [("y", TP.FLOAT)], opset, threshold=0.5), x)
    m = model("Binarizer", [("x", TP.FLOAT)], [("y", TP.FLOAT)], 1, threshold=0.5)
    with pytest.raises(ORT_FAIL, match="is NaN"):     # onnxruntime refuses NaN input
        ort_run(m, np.array([np.nan], np.float32))
    with pytest.raises(ValueError, match="NaN"):
        ours(m, np.array([np.nan], np.float32))
    # types onnxruntime has no kernel for: the same decision in the input's type
    for dtype in (np.float64, np.int64, np.int32):
        mm = model("Binarizer", [("x", NUMERIC[dtype])], [("y", NUMERIC[dtype])], 1,
                   threshold=0.5)
        got = ours(mm, (x * 2).astype(dtype))[0]
        assert got.dtype == dtype
        assert got.tolist() == ort_run(m, (x * 2).astype(dtype).astype(np.float32))[0].tolist()


# --------------------------------------------------------------------------------------------
# FeatureVectorizer
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", OPSETS)
def test_feature_vectorizer(opset):
    """Inputs of one type (the schema binds them to one type variable), side by side."""
    rng = np.random.default_rng(opset)
    dtype = list(NUMERIC)[opset % 4]
    a = numeric_input(rng, dtype, (3, 2))
    b = numeric_input(rng, dtype, (3, 4))       # 4 values, 3 kept
    c = numeric_input(rng, dtype, (3, 1))       # 1 value, padded to 2
    d = numeric_input(rng, dtype, (3, 2, 2))    # 4 values per row
    ins = [(n, elem_of(a)) for n in "abcd"]
    m = model("FeatureVectorizer", ins, [("y", TP.FLOAT)], opset, inputdimensions=[2, 3, 2, 4])
    check(m, a, b, c, d)
    m1 = model("FeatureVectorizer", ins[:1], [("y", TP.FLOAT)], opset, inputdimensions=[3])
    check(m1, a[0])


# --------------------------------------------------------------------------------------------
# ZipMap, DictVectorizer, CastMap: map values
# --------------------------------------------------------------------------------------------


def _zipmap(labels, opset):
    key = TP.STRING if isinstance(labels[0], str) else TP.INT64
    attr = "classlabels_strings" if key == TP.STRING else "classlabels_int64s"
    out = oh.make_sequence_type_proto(map_t(key, TP.FLOAT))
    return model("ZipMap", [("x", TP.FLOAT)], [("z", out)], opset, **{attr: labels})


@pytest.mark.parametrize("labels", [[3, 1, 2], ["b", "a", "c"], [5, 0, 5, 2]])
def test_zipmap(labels):
    rng = np.random.default_rng(0)
    for k, opset in enumerate(OPSETS):
        m = _zipmap(labels, opset)
        for rows in (1, 4, 1000) if k == 0 else (3,):
            x = rng.random((rows, len(labels)), np.float32)
            want = ort_run(m, x)
            got = ours(m, x)
            same(got, want, rtol=0, atol=0)
            assert all(type(k) is type(labels[0]) and type(v) is float
                       for k, v in got[0][0].items())
            same(plex_run(m, x), want, rtol=0, atol=0)
        x1 = rng.random(len(labels), np.float32)         # a vector is one row
        same(ours(m, x1), ort_run(m, x1), rtol=0, atol=0)


def test_zipmap_wrong_width():
    m = _zipmap([1, 2], 1)
    with pytest.raises(ValueError, match="columns"):
        ours(m, np.zeros((2, 3), np.float32))


_DV_CASES = [  # key type, value type, vocabulary attribute, input dict
    (TP.STRING, TP.FLOAT, dict(string_vocabulary=["a", "b", "c", "a"]),
     {"a": 1.5, "c": -2.0, "zz": 3.0}),
    (TP.STRING, TP.DOUBLE, dict(string_vocabulary=["x", "y"]), {"y": 0.1}),
    (TP.STRING, TP.INT64, dict(string_vocabulary=["x", "y", "z"]), {"z": 7, "x": -2}),
    (TP.INT64, TP.FLOAT, dict(int64_vocabulary=[5, 1, 9]), {9: 2.5, 1: 1.25, 4: 8.0}),
    (TP.INT64, TP.DOUBLE, dict(int64_vocabulary=[2, 3]), {3: 1e-3}),
    (TP.INT64, TP.STRING, dict(int64_vocabulary=[2, 3, 4]), {4: "four", 2: "two"}),
]


@pytest.mark.parametrize("case", range(len(_DV_CASES)))
def test_dict_vectorizer(case):
    key, value, attrs, d = _DV_CASES[case]
    for opset in OPSETS:
        m = model("DictVectorizer", [("x", map_t(key, value))], [("y", value)], opset, **attrs)
        got = ours(m, d)
        assert got[0].shape[0] == 1
        try:
            want = ort_run(m, d)
        except (ORT_INVALID_ARGUMENT, RuntimeError) as e:   # its Python API cannot feed this map
            assert "cannot be linked" in str(e) or "Unexpected input data type" in str(e), e
            vocab = attrs.get("string_vocabulary") or attrs.get("int64_vocabulary")
            zero = "" if value == TP.STRING else 0
            want = [np.array([[d.get(k, zero) for k in vocab]],
                             onnx.helper.tensor_dtype_to_np_dtype(value))]
        same(got, want)
        same(plex_run(m, d), want)
        same(ours(m, {}), [np.zeros_like(want[0]) if want[0].dtype != object
                           else np.full_like(want[0], "")])


def test_dict_vectorizer_large_vocabulary_batch_of_one():
    vocab = [f"w{k}" for k in range(5000)]
    d = {f"w{k}": float(k) for k in range(0, 5000, 7)}
    m = model("DictVectorizer", [("x", map_t(TP.STRING, TP.FLOAT))], [("y", TP.FLOAT)], 1,
              string_vocabulary=vocab)
    same(ours(m, d), ort_run(m, d))


@pytest.mark.parametrize("cast_to", ["TO_FLOAT", "TO_INT64", "TO_STRING"])
@pytest.mark.parametrize("map_form", ["DENSE", "SPARSE"])
def test_cast_map_from_floats(cast_to, map_form):
    d = {3: 1.7, 0: -2.25, 9: 1e10, 1: 0.1}
    out = {"TO_FLOAT": TP.FLOAT, "TO_INT64": TP.INT64, "TO_STRING": TP.STRING}[cast_to]
    for opset in OPSETS:
        m = model("CastMap", [("x", map_t(TP.INT64, TP.FLOAT))], [("y", out)], opset,
                  cast_to=cast_to, map_form=map_form, max_map=5)
        want = ort_run(m, d)
        same(ours(m, d), want)
        same(plex_run(m, d), want)


def test_cast_map_from_strings():
    """map(int64, string) cannot be fed to onnxruntime from Python: std::stof / std::stoll
    semantics written out (leading white space, a numeric prefix)."""
    d = {3: "1.5", 0: " 2e1xyz", 9: "4", 1: "-7abc"}
    mk = lambda cast_to, out, **kw: model(  # noqa: E731
        "CastMap", [("x", map_t(TP.INT64, TP.STRING))], [("y", out)], 1, cast_to=cast_to, **kw)
    got = ours(mk("TO_FLOAT", TP.FLOAT), d)[0]
    assert got.dtype == np.float32 and got.tolist() == [[20.0, -7.0, 1.5, 4.0]]
    got = ours(mk("TO_INT64", TP.INT64, map_form="SPARSE", max_map=4), d)[0]
    assert got.dtype == np.int64 and got.tolist() == [[2, -7, 0, 1]]
    got = ours(mk("TO_STRING", TP.STRING, map_form="SPARSE", max_map=3), d)[0]
    assert got.tolist() == [[" 2e1xyz", "-7abc", "0.f"]]
    assert plex_run(mk("TO_FLOAT", TP.FLOAT), d)[0].tolist() == [[20.0, -7.0, 1.5, 4.0]]
    with pytest.raises(ValueError, match="convert"):
        ours(mk("TO_FLOAT", TP.FLOAT), {1: "abc"})


def test_cast_map_bad_attributes():
    for attrs, name in [(dict(cast_to="TO_DOUBLE"), "cast_to"), (dict(map_form="PACKED"),
                                                                 "map_form"),
                        (dict(map_form="SPARSE", max_map=0), "max_map")]:
        m = model("CastMap", [("x", map_t(TP.INT64, TP.FLOAT))], [("y", TP.FLOAT)], 1, **attrs)
        with pytest.raises(ValueError, match=name):
            ours(m, {1: 1.0})


# --------------------------------------------------------------------------------------------
# Converted scikit-learn models through the session, against onnxruntime
# --------------------------------------------------------------------------------------------


def test_sklearn_models_through_the_session():
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.datasets import make_classification
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import Normalizer, OneHotEncoder, StandardScaler
    from sklearn.svm import SVR, LinearSVC, OneClassSVM

    x, y = make_classification(120, 5, n_informative=3, n_classes=3, random_state=1)
    x = x.astype(np.float32)
    models = [LogisticRegression(max_iter=300).fit(x, y),
              LogisticRegression(max_iter=300).fit(x, y == 1),
              LinearSVC().fit(x, y),
              make_pipeline(StandardScaler(), Normalizer()).fit(x),
              LinearRegression().fit(x, x[:, 0]),
              SVR().fit(x, x[:, 1]),
              OneClassSVM().fit(x)]
    for mdl in models:
        m = skl2onnx.to_onnx(mdl, x[:1], target_opset={"": 17, ML: 3})
        for rows in (x[:1], x):
            same(plex_run(m, rows), ort_run(m, rows), rtol=1e-4, atol=1e-5)
    cats = np.array([["a", "x"], ["b", "y"], ["a", "z"]], dtype=object)
    enc = OneHotEncoder().fit(cats)
    m = skl2onnx.to_onnx(enc, cats[:1])
    same(plex_run(m, cats), ort_run(m, cats))
    dv = DictVectorizer(sparse=False).fit([{"a": 1.0, "b": 2.0}, {"c": 3.0}])
    from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType
    m = skl2onnx.convert_sklearn(dv, initial_types=[("x", DictionaryType(StringTensorType([1]),
                                                                         FloatTensorType([1])))])
    d = {"c": 4.0, "a": 0.5, "q": 1.0}
    same(plex_run(m, d), ort_run(m, d))


@pytest.mark.parametrize("keys", [[7], ["b", "a'\"\\n", "c"], list(range(70))])
def test_zipmap_row_dicts_match_dict_zip(keys):
    """ZipMap's generated row builder (one column, string keys that would break code if they
    were written into it, and the dict(zip()) path past 64 columns)."""
    from onnxplex.providers.cpu_mlas.ml_maps import _row_dicts

    rows = np.arange(3 * len(keys), dtype=np.float32).reshape(3, -1).tolist()
    got = _row_dicts(keys)(*np.array(rows).T.tolist())
    assert got == [dict(zip(keys, r)) for r in rows]
    assert [list(d) for d in got] == [keys] * 3   # key order kept
