"""Small hand-built ai.onnx.ml cases (onnx ships node test data for few of these ops), each a
one-node model and its feeds, for comparing onnx.reference (the cpu_mlas fallback) with
onnxruntime: every ai.onnx.ml op onnx.reference implements, with the attribute combinations
converters write (binary and multiclass, each post_transform, int and string labels,
probabilities, base values, ml opsets 1 and 3) and the input types and ranks onnxruntime
accepts. Only cases onnxruntime can run are here.

``CASES``: name -> (op type, builder); a builder returns ``(model, feeds)``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as oh

__all__ = ["CASES"]

ML = "ai.onnx.ml"
F, D, I64, I32, STR = T.FLOAT, T.DOUBLE, T.INT64, T.INT32, T.STRING
_NP = {F: np.float32, D: np.float64, I64: np.int64, I32: np.int32}

Case = tuple[onnx.ModelProto, dict[str, object]]
CASES: dict[str, tuple[str, Callable[[], Case]]] = {}


def _model(op: str, inputs: list, outputs: list, ml: int = 1, **attrs) -> onnx.ModelProto:
    """``inputs``/``outputs``: (name, element type or TypeProto, shape)."""
    def vi(name, typ, shape):
        return oh.make_value_info(name, typ) if isinstance(typ, onnx.TypeProto) \
            else oh.make_tensor_value_info(name, typ, shape)

    node = oh.make_node(op, [i[0] for i in inputs], [o[0] for o in outputs], domain=ML,
                        **attrs)
    graph = oh.make_graph([node], op.lower(), [vi(*i) for i in inputs],
                          [vi(*o) for o in outputs])
    return oh.make_model(graph, ir_version=8,
                         opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(ML, ml)])


def _x(rows: int, cols: int, elem: int = F, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((rows, cols))
    return (x * 3).astype(_NP[elem]) if elem in (I64, I32) else x.astype(_NP[elem])


def _add(name: str, op: str, build: Callable[[], Case]) -> None:
    assert name not in CASES, name
    CASES[name] = (op, build)


def _retyped(case: Case, elem: int) -> Case:
    """The case with its (first) input of element type ``elem``."""
    model, feeds = case
    model.graph.input[0].type.tensor_type.elem_type = elem
    name = model.graph.input[0].name
    x = feeds[name]
    return model, {**feeds, name: (x * 2 if elem in (I64, I32) else x).astype(_NP[elem])}


def _one_row(case: Case, features: int) -> Case:
    """The case with its input a vector (one row of ``features``), outputs of any shape."""
    model, feeds = case
    t = model.graph.input[0].type.tensor_type
    del t.shape.dim[:]
    t.shape.dim.add().dim_value = features
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    name = model.graph.input[0].name
    return model, {name: feeds[name][0].copy()}


# --- SVMClassifier ------------------------------------------------------------------------


def _svc(classes: int, proba: bool, kernel: str = "RBF", strings: bool = False,
         post: str = "NONE", features: int = 3) -> Case:
    r = np.random.default_rng(1)
    per_class = [2] * classes
    sv = r.standard_normal((sum(per_class), features))
    pairs = classes * (classes - 1) // 2
    attrs = dict(kernel_type=kernel, kernel_params=[0.3, 0.0, 3.0],
                 support_vectors=sv.ravel().tolist(), vectors_per_class=per_class,
                 coefficients=r.standard_normal((classes - 1) * sv.shape[0]).tolist(),
                 rho=r.standard_normal(pairs).tolist(), post_transform=post)
    if proba:
        attrs.update(prob_a=(-np.abs(r.standard_normal(pairs)) - 0.5).tolist(),
                     prob_b=r.standard_normal(pairs).tolist())
    if strings:
        attrs["classlabels_strings"] = [f"c{k}" for k in range(classes)]
    else:
        attrs["classlabels_ints"] = list(range(classes))
    model = _model("SVMClassifier", [("x", F, [None, features])],
                   [("label", STR if strings else I64, [None]), ("scores", F, [None, None])],
                   **attrs)
    return model, {"x": _x(8, features)}


for _name, _kw in {
    "multiclass_probabilities": dict(classes=3, proba=True),
    "multiclass_probabilities_strings": dict(classes=3, proba=True, strings=True),
    "binary_probabilities": dict(classes=2, proba=True),
    "binary_probabilities_logistic": dict(classes=2, proba=True, post="LOGISTIC"),
    "binary_probabilities_strings": dict(classes=2, proba=True, strings=True),
    "multiclass_votes": dict(classes=3, proba=False),
    "multiclass_votes_logistic": dict(classes=3, proba=False, post="LOGISTIC"),
    "binary_votes": dict(classes=2, proba=False),
    "linear_kernel_strings": dict(classes=4, proba=False, kernel="LINEAR", strings=True),
    "poly_kernel": dict(classes=3, proba=False, kernel="POLY"),
    "sigmoid_kernel": dict(classes=3, proba=False, kernel="SIGMOID"),
}.items():
    _add(f"svm_classifier_{_name}", "SVMClassifier", lambda kw=_kw: _svc(**kw))
_add("svm_classifier_double", "SVMClassifier", lambda: _retyped(_svc(3, False), D))
_add("svm_classifier_int64", "SVMClassifier", lambda: _retyped(_svc(3, False), I64))
_add("svm_classifier_vector", "SVMClassifier", lambda: _one_row(_svc(3, False), 3))


# --- SVMRegressor -------------------------------------------------------------------------


def _svr(one_class: bool = False) -> Case:
    r = np.random.default_rng(5 if one_class else 3)
    coefficients = r.standard_normal(5)
    attrs = dict(kernel_type="RBF", kernel_params=[0.2, 0.0, 3.0], n_supports=5,
                 support_vectors=r.standard_normal((5, 4)).ravel().tolist(),
                 coefficients=(np.abs(coefficients) if one_class else coefficients).tolist(),
                 rho=[-0.3 if one_class else 0.3], one_class=int(one_class),
                 post_transform="NONE")
    return _model("SVMRegressor", [("x", F, [None, 4])], [("y", F, [None, 1])], **attrs), \
        {"x": _x(6, 4)}


_add("svm_regressor_rbf", "SVMRegressor", _svr)
_add("svm_regressor_one_class", "SVMRegressor", lambda: _svr(one_class=True))
_add("svm_regressor_vector", "SVMRegressor", lambda: _one_row(_svr(), 4))


# --- TreeEnsembleClassifier / Regressor -----------------------------------------------------

_LEAVES = [3, 4, 5, 6]


def _tree() -> dict:
    """One tree of depth 2 on features 0 and 1, leaves 3 to 6."""
    return dict(nodes_treeids=[0] * 7, nodes_nodeids=list(range(7)),
                nodes_featureids=[0, 1, 1, 0, 0, 0, 0],
                nodes_values=[0.0, -0.5, 0.5, 0, 0, 0, 0],
                nodes_modes=["BRANCH_LEQ"] * 3 + ["LEAF"] * 4,
                nodes_truenodeids=[1, 3, 5, 0, 0, 0, 0], nodes_falsenodeids=[2, 4, 6, 0, 0, 0, 0],
                nodes_hitrates=[1.0] * 7, nodes_missing_value_tracks_true=[0] * 7)


def _classifier(kind: str, post: str = "NONE", ml: int = 1, base: list | None = None,
                strings: bool = False) -> Case:
    """``kind``: ``binary`` (one weighted class, as LightGBM writes it), ``binary_positive``
    (the same, weights all positive), ``binary_two`` (both classes weighted, as scikit-learn's
    converter writes it) or ``multi`` (three classes)."""
    attrs = _tree()
    if kind == "multi":
        pairs = [(leaf, c) for leaf in _LEAVES for c in range(3)]
        weights = np.random.default_rng(6).uniform(-1, 1, len(pairs)).round(3).tolist()
        classes = 3
    elif kind == "binary_two":
        p = [0.1, 0.7, 0.4, 0.9]
        pairs = [(leaf, c) for leaf in _LEAVES for c in (0, 1)]
        weights = [w for q in p for w in (1 - q, q)]
        classes = 2
    else:
        pairs = [(leaf, 0) for leaf in _LEAVES]
        weights = [0.2, 0.6, 0.9, 0.1] if kind == "binary_positive" else [-1.0, 0.5, 1.5, -0.2]
        classes = 2
    attrs.update(class_treeids=[0] * len(pairs), class_nodeids=[n for n, _ in pairs],
                 class_ids=[c for _, c in pairs], class_weights=weights, post_transform=post)
    if strings:
        attrs["classlabels_strings"] = [f"c{k}" for k in range(classes)]
    else:
        attrs["classlabels_int64s"] = list(range(classes))
    if base is not None:
        attrs["base_values"] = base
    model = _model("TreeEnsembleClassifier", [("x", F, [None, 2])],
                   [("label", STR if strings else I64, [None]), ("scores", F, [None, classes])],
                   ml=ml, **attrs)
    return model, {"x": _x(10, 2)}


for _ml in (1, 3):
    for _post in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"):
        for _kind in ("binary", "multi"):
            _add(f"tree_classifier_{_kind}_{_post.lower()}_ml{_ml}", "TreeEnsembleClassifier",
                 lambda k=_kind, p=_post, m=_ml: _classifier(k, p, m))
for _name, _kw in {
    "binary_positive_none": dict(kind="binary_positive"),
    "binary_positive_logistic": dict(kind="binary_positive", post="LOGISTIC"),
    "binary_two_classes": dict(kind="binary_two"),
    "binary_two_classes_softmax": dict(kind="binary_two", post="SOFTMAX"),
    "binary_base_values": dict(kind="binary", base=[0.3]),
    "binary_logistic_base_values": dict(kind="binary", post="LOGISTIC", base=[0.3]),
    "binary_strings": dict(kind="binary", strings=True),
    "multi_base_values": dict(kind="multi", base=[0.1, 0.2, 0.3]),
    "multi_strings": dict(kind="multi", strings=True),
    "multi_probit": dict(kind="multi", post="PROBIT"),
}.items():
    _add(f"tree_classifier_{_name}", "TreeEnsembleClassifier", lambda kw=_kw: _classifier(**kw))
for _elem, _tag in ((D, "double"), (I64, "int64"), (I32, "int32")):
    _add(f"tree_classifier_multi_{_tag}", "TreeEnsembleClassifier",
         lambda e=_elem: _retyped(_classifier("multi"), e))
_add("tree_classifier_vector", "TreeEnsembleClassifier",
     lambda: _one_row(_classifier("multi"), 2))


def _regressor(aggregate: str = "SUM", targets: int = 2, post: str = "NONE", ml: int = 1,
               base: list | None = None) -> Case:
    attrs = _tree()
    pairs = [(leaf, t) for leaf in _LEAVES for t in range(targets)]
    attrs.update(target_treeids=[0] * len(pairs), target_nodeids=[n for n, _ in pairs],
                 target_ids=[t for _, t in pairs], n_targets=targets,
                 target_weights=np.random.default_rng(7).uniform(-1, 1, len(pairs))
                 .round(3).tolist(), aggregate_function=aggregate, post_transform=post)
    if base is not None:
        attrs["base_values"] = base
    model = _model("TreeEnsembleRegressor", [("x", F, [None, 2])],
                   [("y", F, [None, targets])], ml=ml, **attrs)
    return model, {"x": _x(10, 2)}


for _ml in (1, 3):
    for _agg in ("SUM", "AVERAGE", "MIN", "MAX"):
        _add(f"tree_regressor_{_agg.lower()}_ml{_ml}", "TreeEnsembleRegressor",
             lambda a=_agg, m=_ml: _regressor(a, ml=m))
for _post in ("LOGISTIC", "SOFTMAX", "PROBIT"):
    _add(f"tree_regressor_{_post.lower()}", "TreeEnsembleRegressor",
         lambda p=_post: _regressor(targets=1 if p == "PROBIT" else 2, post=p))
_add("tree_regressor_base_values", "TreeEnsembleRegressor",
     lambda: _regressor(base=[0.5, -0.5]))
_add("tree_regressor_double", "TreeEnsembleRegressor", lambda: _retyped(_regressor(), D))
_add("tree_regressor_one_row", "TreeEnsembleRegressor",
     lambda: (lambda m, f: (m, {"x": f["x"][:1]}))(*_regressor()))
_add("tree_regressor_vector", "TreeEnsembleRegressor", lambda: _one_row(_regressor(), 2))


# --- LinearClassifier / LinearRegressor -----------------------------------------------------


def _linear_classifier(classes: int, rows: int, post: str = "NONE", strings: bool = False,
                       multi_class: int = 0) -> Case:
    r = np.random.default_rng(8)
    attrs = dict(coefficients=r.standard_normal(rows * 4).round(3).tolist(),
                 intercepts=r.standard_normal(rows).round(3).tolist(),
                 post_transform=post, multi_class=multi_class)
    if strings:
        attrs["classlabels_strings"] = [f"c{k}" for k in range(classes)]
    else:
        attrs["classlabels_ints"] = list(range(classes))
    model = _model("LinearClassifier", [("x", F, [None, 4])],
                   [("label", STR if strings else I64, [None]), ("scores", F, [None, None])],
                   **attrs)
    return model, {"x": _x(8, 4)}


for _post in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"):
    _add(f"linear_classifier_multi_{_post.lower()}", "LinearClassifier",
         lambda p=_post: _linear_classifier(3, 3, p))
    _add(f"linear_classifier_binary_one_row_{_post.lower()}", "LinearClassifier",
         lambda p=_post: _linear_classifier(2, 1, p))
_add("linear_classifier_binary_two_rows", "LinearClassifier", lambda: _linear_classifier(2, 2))
_add("linear_classifier_multi_strings", "LinearClassifier",
     lambda: _linear_classifier(3, 3, strings=True))
_add("linear_classifier_binary_strings", "LinearClassifier",
     lambda: _linear_classifier(2, 1, strings=True))
_add("linear_classifier_multi_class_1", "LinearClassifier",
     lambda: _linear_classifier(3, 3, multi_class=1))
_add("linear_classifier_double", "LinearClassifier",
     lambda: _retyped(_linear_classifier(3, 3), D))
_add("linear_classifier_int64", "LinearClassifier",
     lambda: _retyped(_linear_classifier(3, 3), I64))
_add("linear_classifier_vector", "LinearClassifier",
     lambda: _one_row(_linear_classifier(3, 3), 4))


def _linear_regressor(targets: int, post: str = "NONE") -> Case:
    r = np.random.default_rng(9)
    attrs = dict(coefficients=r.standard_normal(targets * 4).round(3).tolist(),
                 intercepts=r.standard_normal(targets).round(3).tolist(), targets=targets,
                 post_transform=post)
    return _model("LinearRegressor", [("x", F, [None, 4])], [("y", F, [None, targets])],
                  **attrs), {"x": _x(8, 4)}


_add("linear_regressor_one_target", "LinearRegressor", lambda: _linear_regressor(1))
_add("linear_regressor_two_targets", "LinearRegressor", lambda: _linear_regressor(2))
_add("linear_regressor_softmax", "LinearRegressor", lambda: _linear_regressor(2, "SOFTMAX"))
_add("linear_regressor_probit", "LinearRegressor", lambda: _linear_regressor(1, "PROBIT"))
_add("linear_regressor_vector", "LinearRegressor", lambda: _one_row(_linear_regressor(2), 4))


# --- Normalizer, Scaler, Imputer ------------------------------------------------------------


def _normalizer(norm: str, elem: int = F) -> Case:
    model = _model("Normalizer", [("x", elem, [None, 4])], [("y", F, [None, 4])], norm=norm)
    return model, {"x": _x(5, 4, elem)}


for _norm in ("MAX", "L1", "L2"):
    _add(f"normalizer_{_norm.lower()}", "Normalizer", lambda n=_norm: _normalizer(n))
_add("normalizer_l2_double", "Normalizer", lambda: _normalizer("L2", D))
_add("normalizer_l1_int64", "Normalizer", lambda: _normalizer("L1", I64))
_add("normalizer_max_int32", "Normalizer", lambda: _normalizer("MAX", I32))
_add("normalizer_vector", "Normalizer", lambda: _one_row(_normalizer("L2"), 4))


def _scaler(elem: int = F, one: bool = False) -> Case:
    attrs = dict(offset=[0.5] if one else [0.5, -1.0, 2.0],
                 scale=[2.0] if one else [2.0, 0.5, -3.0])
    return _model("Scaler", [("x", elem, [None, 3])], [("y", F, [None, 3])], **attrs), \
        {"x": _x(5, 3, elem)}


_add("scaler_float", "Scaler", _scaler)
_add("scaler_broadcast_one", "Scaler", lambda: _scaler(one=True))
_add("scaler_double", "Scaler", lambda: _scaler(D))
_add("scaler_int64", "Scaler", lambda: _scaler(I64))
_add("scaler_int32", "Scaler", lambda: _scaler(I32))
_add("scaler_vector", "Scaler", lambda: _one_row(_scaler(), 3))
_add("scaler_rank_3", "Scaler", lambda: (_model(
    "Scaler", [("x", F, [2, 2, 3])], [("y", F, [2, 2, 3])], offset=[0.5, 1.0, 2.0],
    scale=[2.0, 3.0, 4.0]), {"x": np.arange(12, dtype=np.float32).reshape(2, 2, 3)}))


def _imputer(elem: int = F, shape: tuple = (2, 3), broadcast: bool = False,
             replaced: float = float("nan")) -> Case:
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) % 4
    if elem == F:
        x[x == 1] = replaced
        attrs = dict(imputed_value_floats=[9.0] if broadcast else [7.0, 8.0, 9.0],
                     replaced_value_float=replaced)
    else:
        x[x == 1] = -1
        attrs = dict(imputed_value_int64s=[9] if broadcast else [7, 8, 9],
                     replaced_value_int64=-1)
    dims = [None] * (len(shape) - 1) + [3]
    return _model("Imputer", [("x", elem, dims)], [("y", elem, dims)], **attrs), \
        {"x": x.astype(_NP[elem])}


_add("imputer_nan", "Imputer", _imputer)
_add("imputer_value", "Imputer", lambda: _imputer(replaced=1.0))
_add("imputer_broadcast", "Imputer", lambda: _imputer(broadcast=True))
_add("imputer_int64", "Imputer", lambda: _imputer(I64))
_add("imputer_int64_broadcast", "Imputer", lambda: _imputer(I64, broadcast=True))
_add("imputer_vector", "Imputer", lambda: _imputer(shape=(3,)))
_add("imputer_rank_3", "Imputer", lambda: _imputer(shape=(2, 2, 3)))


# --- OneHotEncoder, DictVectorizer, FeatureVectorizer ---------------------------------------


def _one_hot(kind: str, zeros: int = 1, vector: bool = False, rank3: bool = False) -> Case:
    if kind == "str":
        x = np.array([["a", "b"], ["c", "zz"], ["b", "a"]], object)
        attrs: dict = dict(cats_strings=["a", "b", "c"])
    else:
        x = np.array([[1, 3], [2, 7], [3, 1]]).astype(_NP[{"int": I64, "float": F,
                                                           "double": D}[kind]])
        attrs = dict(cats_int64s=[1, 2, 3])
    if vector:
        x = x[:, 0].copy()
    if rank3:
        x = np.stack([x, x[::-1]])
    elem = {"str": STR, "int": I64, "float": F, "double": D}[kind]
    return _model("OneHotEncoder", [("x", elem, list(x.shape))], [("y", F, None)],
                  zeros=zeros, **attrs), {"x": x}


for _kind in ("int", "str", "float", "double"):
    _add(f"one_hot_encoder_{_kind}", "OneHotEncoder", lambda k=_kind: _one_hot(k))
_add("one_hot_encoder_int_vector", "OneHotEncoder", lambda: _one_hot("int", vector=True))
_add("one_hot_encoder_str_vector", "OneHotEncoder", lambda: _one_hot("str", vector=True))
_add("one_hot_encoder_unknown_with_zeros_0", "OneHotEncoder", lambda: _one_hot("int", zeros=0))
_add("one_hot_encoder_rank_3", "OneHotEncoder", lambda: _one_hot("int", rank3=True))


def _map_type(key: int, value: int) -> onnx.TypeProto:
    return oh.make_map_type_proto(key, oh.make_tensor_type_proto(value, None))


_add("dict_vectorizer_string_float", "DictVectorizer", lambda: (_model(
    "DictVectorizer", [("m", _map_type(STR, F), None)], [("y", F, [1, 3])],
    string_vocabulary=["a", "b", "c"]), {"m": {"a": 1.5, "c": -2.0}}))
_add("dict_vectorizer_int64_float", "DictVectorizer", lambda: (_model(
    "DictVectorizer", [("m", _map_type(I64, F), None)], [("y", F, [1, 3])],
    int64_vocabulary=[5, 1, 3]), {"m": {1: 1.5, 3: -2.0}}))


def _feature_vectorizer(elem: int = F, dims: tuple = (2, 3), vector: bool = False) -> Case:
    a = _x(1 if vector else 4, 2, elem)
    b = _x(1 if vector else 4, 3, elem, seed=1)
    a_shape: list = [2] if vector else [None, 2]
    model = _model("FeatureVectorizer", [("a", elem, a_shape), ("b", elem, [None, 3])],
                   [("y", F, [None, sum(dims)])], inputdimensions=list(dims))
    return model, {"a": a[0] if vector else a, "b": b}


_add("feature_vectorizer_float", "FeatureVectorizer", _feature_vectorizer)
_add("feature_vectorizer_pad_and_cut", "FeatureVectorizer",
     lambda: _feature_vectorizer(dims=(3, 2)))
_add("feature_vectorizer_double", "FeatureVectorizer", lambda: _feature_vectorizer(D))
_add("feature_vectorizer_int64", "FeatureVectorizer", lambda: _feature_vectorizer(I64))
_add("feature_vectorizer_vector", "FeatureVectorizer",
     lambda: _feature_vectorizer(vector=True))
