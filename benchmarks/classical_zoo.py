"""The classical-ML model zoo: scikit-learn, LightGBM and XGBoost models as their converters
write them by default, for ``benchmarks/classical.py`` and ``tests/test_classical_ml.py``.

    python benchmarks/classical_zoo.py [--only a,b] [--no-cache]   # build, list, time

Every model is trained on small synthetic data with fixed seeds and converted with the
converter's defaults: skl2onnx ``to_onnx`` / ``convert_sklearn`` without options (so
classifiers end in ZipMap and return a list of dicts), onnxmltools ``convert_lightgbm`` /
``convert_xgboost`` with only the input type. 39 models (``model_names()``); sizes are moderate
(tree ensembles of 30-50 trees, ten features, 400 training rows): the zoo builds in ~10 s.
One exception to "as converted": skl2onnx 1.20 cannot write any HistGradientBoosting model
under protobuf 7 (``_bool_ints_as_ints`` mends the attribute it writes wrongly).
``ort_locale()`` makes onnxruntime, the oracle, able to run the text models on a machine
without the en_US.UTF-8 locale.

``build(name)`` gives a :class:`ZooModel`: the ``onnx.ModelProto``, ``feeds(n)`` (the first
``n`` of 1000 fixed test rows, as the model's inputs want them: float32 matrices, string
columns, one dict for the DictVectorizer's map input, which holds one row only, so its
``max_batch`` is 1), and ``labels``, the outputs compared exactly (integer and string
tensors). ``compare(expected, got, names, labels)`` lists the differences between two
``run`` results: labels exactly, the rest rtol 1e-4, atol 1e-5, ZipMap's list of dicts row by
row and key by key.

Built models are cached in ``benchmarks/.classical_cache/<key>/`` (ignored by git: the folder
holds its own ``.gitignore``), the key being the versions of the libraries involved and this
file's hash; ``cache=False`` (``--no-cache``) rebuilds. Needs ``pip install '.[classical]'``
(scikit-learn, skl2onnx; lightgbm, xgboost-cpu and onnxmltools for their models).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".classical_cache"

SEED = 0
N_FEATURES = 10
N_TRAIN = 400
N_TEST = 1000
RTOL, ATOL = 1e-4, 1e-5

# ---- synthetic data (deterministic: the feeds are rebuilt without training) -----------------


def _tabular() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((N_TRAIN + N_TEST, N_FEATURES)).astype(np.float32)
    w = rng.standard_normal(N_FEATURES)
    w3 = rng.standard_normal((N_FEATURES, 3))
    noise = rng.standard_normal(N_TRAIN + N_TEST)
    xt = x[:N_TRAIN].astype(np.float64)
    return {"x": x[:N_TRAIN], "test": x[N_TRAIN:],
            "reg": xt @ w + 0.3 * noise[:N_TRAIN],
            "bin": (xt @ w + 0.5 * noise[:N_TRAIN] > 0).astype(np.int64),
            "multi": np.argmax(xt @ w3 + 0.5 * rng.standard_normal((N_TRAIN, 3)), axis=1)}


COLORS = ["red", "green", "blue", "black"]
SIZES = ["S", "M", "L", "XL"]


def _mixed() -> dict[str, np.ndarray]:
    """Three numeric columns (some missing) and two string columns."""
    rng = np.random.default_rng(SEED + 1)
    n = N_TRAIN + N_TEST
    num = rng.standard_normal((n, 3)).astype(np.float32) * [1, 10, 0.1]
    num = num.astype(np.float32)
    num[rng.random((n, 3)) < 0.1] = np.nan
    cat = np.stack([rng.choice(COLORS, n), rng.choice(SIZES, n)], axis=1).astype(object)
    score = np.nan_to_num(num[:, 0]) + (cat[:, 0] == "red") - (cat[:, 1] == "S")
    y = np.where(score > 0.3, "yes", np.where(score < -0.6, "no", "maybe")).astype(object)
    return {"num": num[:N_TRAIN], "cat": cat[:N_TRAIN], "y": y[:N_TRAIN],
            "test_num": num[N_TRAIN:], "test_cat": cat[N_TRAIN:]}


WORDS = ("the cat dog sat on mat ran fast slow red blue green big small house tree river "
         "quick brown fox jumps over lazy night day sun moon star sky rain snow").split()


def _text() -> dict[str, Any]:
    rng = np.random.default_rng(SEED + 2)
    n = N_TRAIN + N_TEST
    docs = [" ".join(rng.choice(WORDS, rng.integers(3, 10))) for _ in range(n)]
    # a few words that training never saw and some capitals, as real text has
    docs[N_TRAIN + 1] = "The Cat saw an unknown Zebra"
    y = np.array([("cat" in d) + ("dog" in d) * 2 for d in docs]) % 3
    return {"docs": docs[:N_TRAIN], "y": y[:N_TRAIN],
            "test": np.array(docs[N_TRAIN:], dtype=object).reshape(-1, 1)}


DICT_KEYS = [f"f{i}" for i in range(8)]


def _dicts() -> dict[str, Any]:
    rng = np.random.default_rng(SEED + 3)
    rows = []
    for _ in range(N_TRAIN + N_TEST):
        keys = rng.choice(DICT_KEYS, rng.integers(2, len(DICT_KEYS) + 1), replace=False)
        rows.append({str(k): float(np.float32(rng.standard_normal())) for k in keys})
    y = np.array([r.get("f0", 0.0) * 2 - r.get("f3", 0.0) + 0.5 for r in rows])
    return {"rows": rows[:N_TRAIN], "y": y[:N_TRAIN], "test": rows[N_TRAIN:]}


# ---- the models ------------------------------------------------------------------------------

def _skl(model, x) -> onnx.ModelProto:
    from skl2onnx import to_onnx

    return to_onnx(model, x[:1])


@contextlib.contextmanager
def _bool_ints_as_ints():
    """skl2onnx 1.20 writes a HistGradientBoosting tree's ``nodes_missing_value_tracks_true``
    as a list mixing numpy uint8 (branches) and Python ``False`` (leaves), which protobuf 7
    refuses for an INTS attribute ("Expected an int, got a boolean"): the default conversion of
    every HistGradientBoosting model fails. While converting, a list attribute holding bools is
    written with those bools as 0/1, the model the converter means to write."""
    import skl2onnx.common._container as container

    make_node = getattr(container, "make_node", None)
    if make_node is None:  # another layout of skl2onnx: convert as it is
        yield
        return

    def patched(*args, **attrs):
        for k, v in attrs.items():
            if isinstance(v, list) and any(isinstance(x, (bool, np.bool_)) for x in v):
                attrs[k] = [int(x) for x in v]
        return make_node(*args, **attrs)

    container.make_node = patched
    try:
        yield
    finally:
        container.make_node = make_node


def _tab(make: Callable[[], Any], target: str, transform: bool = False, compat=None):
    """A scikit-learn estimator on the tabular data, converted by skl2onnx's defaults
    (``compat``: a context to convert in, around a converter bug)."""
    def build() -> onnx.ModelProto:
        d = _tabular()
        m = make()
        if transform:
            m.fit(d["x"])
        else:
            m.fit(d["x"], d[target])
        with compat() if compat else contextlib.nullcontext():
            return _skl(m, d["x"])
    return build


def _onnxmltools(converter: str):
    """An onnxmltools converter (``convert_lightgbm``, ``convert_xgboost``) with only the input
    type given, for an estimator on the tabular data."""
    def with_estimator(make: Callable[[], Any], target: str):
        def build() -> onnx.ModelProto:
            import onnxmltools
            from onnxmltools.convert.common.data_types import FloatTensorType

            d = _tabular()
            m = make().fit(d["x"], d[target])
            return getattr(onnxmltools, converter)(
                m, initial_types=[("input", FloatTensorType([None, N_FEATURES]))])
        return build
    return with_estimator


_lgbm = _onnxmltools("convert_lightgbm")
_xgb = _onnxmltools("convert_xgboost")


def _column_transformer() -> onnx.ModelProto:
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler

    d = _mixed()
    x = np.concatenate([d["num"].astype(object), d["cat"]], axis=1)
    pre = ColumnTransformer([
        ("num", Pipeline([("impute", SimpleImputer()), ("scale", StandardScaler())]), [0, 1, 2]),
        ("onehot", OneHotEncoder(), [3]),
        ("ordinal", OrdinalEncoder(), [4]),
    ])
    m = Pipeline([("pre", pre), ("clf", LogisticRegression())]).fit(x, d["y"])
    return convert_sklearn(m, initial_types=[("num", FloatTensorType([None, 3])),
                                             ("cat", StringTensorType([None, 2]))])


def _text_pipeline(vectorizer: str, classifier: str):
    def build() -> onnx.ModelProto:
        from skl2onnx import convert_sklearn
        from skl2onnx.common.data_types import StringTensorType
        from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.naive_bayes import MultinomialNB
        from sklearn.pipeline import Pipeline

        d = _text()
        vec = {"tfidf": TfidfVectorizer, "count": CountVectorizer}[vectorizer]()
        clf = {"logistic": LogisticRegression, "multinomial_nb": MultinomialNB}[classifier]()
        m = Pipeline([("vec", vec), ("clf", clf)]).fit(d["docs"], d["y"])
        return convert_sklearn(m, initial_types=[("text", StringTensorType([None, 1]))])
    return build


def _dict_vectorizer() -> onnx.ModelProto:
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import Pipeline

    d = _dicts()
    m = Pipeline([("dict", DictVectorizer(sparse=False)), ("reg", Ridge())])
    m.fit(d["rows"], d["y"])
    return convert_sklearn(m, initial_types=[
        ("input", DictionaryType(StringTensorType([]), FloatTensorType([])))])


def _est(path: str, **kw) -> Callable[[], Any]:
    """A factory of ``module.Class(**kw)``, importing the module when called."""
    module, cls = path.rsplit(".", 1)
    return lambda: getattr(importlib.import_module(module), cls)(**kw)


def _models() -> dict[str, tuple[str, str, Callable[[], onnx.ModelProto]]]:
    """name -> (library, data kind, builder); nothing is imported until a builder runs."""
    sk, lgb, xgb, seed = "sklearn", "lightgbm", "xgboost", {"random_state": SEED}
    trees = {"n_estimators": 30, "max_depth": 8, **seed}
    lgbm = {"n_estimators": 50, "verbose": -1, **seed}
    xgbm = {"n_estimators": 50, "max_depth": 4, "n_jobs": 1, **seed}
    mlp = {"hidden_layer_sizes": (32,), "max_iter": 300, **seed}
    hgb = _bool_ints_as_ints
    return {
        "linear_regression": (sk, "tabular", _tab(_est("sklearn.linear_model.LinearRegression"),
                                                  "reg")),
        "ridge": (sk, "tabular", _tab(_est("sklearn.linear_model.Ridge"), "reg")),
        "logistic_binary": (sk, "tabular", _tab(
            _est("sklearn.linear_model.LogisticRegression"), "bin")),
        "logistic_multiclass": (sk, "tabular", _tab(
            _est("sklearn.linear_model.LogisticRegression"), "multi")),
        "sgd_classifier": (sk, "tabular", _tab(
            _est("sklearn.linear_model.SGDClassifier", **seed), "multi")),
        "linear_svc": (sk, "tabular", _tab(_est("sklearn.svm.LinearSVC", **seed), "multi")),
        "svc_rbf_multiclass": (sk, "tabular", _tab(
            _est("sklearn.svm.SVC", probability=True, **seed), "multi")),
        "svc_rbf_binary": (sk, "tabular", _tab(
            _est("sklearn.svm.SVC", probability=True, **seed), "bin")),
        "svr": (sk, "tabular", _tab(_est("sklearn.svm.SVR"), "reg")),
        "knn_classifier": (sk, "tabular", _tab(
            _est("sklearn.neighbors.KNeighborsClassifier"), "multi")),
        "knn_regressor": (sk, "tabular", _tab(
            _est("sklearn.neighbors.KNeighborsRegressor"), "reg")),
        "decision_tree_classifier": (sk, "tabular", _tab(
            _est("sklearn.tree.DecisionTreeClassifier", max_depth=8, **seed), "multi")),
        "decision_tree_regressor": (sk, "tabular", _tab(
            _est("sklearn.tree.DecisionTreeRegressor", max_depth=8, **seed), "reg")),
        "random_forest_classifier": (sk, "tabular", _tab(
            _est("sklearn.ensemble.RandomForestClassifier", **trees), "multi")),
        "random_forest_regressor": (sk, "tabular", _tab(
            _est("sklearn.ensemble.RandomForestRegressor", **trees), "reg")),
        "extra_trees_classifier": (sk, "tabular", _tab(
            _est("sklearn.ensemble.ExtraTreesClassifier", **trees), "bin")),
        "gradient_boosting_classifier": (sk, "tabular", _tab(
            _est("sklearn.ensemble.GradientBoostingClassifier", n_estimators=30, **seed),
            "multi")),
        "gradient_boosting_regressor": (sk, "tabular", _tab(
            _est("sklearn.ensemble.GradientBoostingRegressor", n_estimators=50, **seed),
            "reg")),
        "hist_gradient_boosting_classifier": (sk, "tabular", _tab(
            _est("sklearn.ensemble.HistGradientBoostingClassifier", max_iter=30, **seed),
            "bin", compat=hgb)),
        "hist_gradient_boosting_regressor": (sk, "tabular", _tab(
            _est("sklearn.ensemble.HistGradientBoostingRegressor", max_iter=30, **seed),
            "reg", compat=hgb)),
        "lgbm_classifier_binary": (lgb, "tabular", _lgbm(
            _est("lightgbm.LGBMClassifier", **lgbm), "bin")),
        "lgbm_classifier_multiclass": (lgb, "tabular", _lgbm(
            _est("lightgbm.LGBMClassifier", **lgbm), "multi")),
        "lgbm_regressor": (lgb, "tabular", _lgbm(_est("lightgbm.LGBMRegressor", **lgbm), "reg")),
        "xgb_classifier": (xgb, "tabular", _xgb(_est("xgboost.XGBClassifier", **xgbm), "multi")),
        "xgb_regressor": (xgb, "tabular", _xgb(_est("xgboost.XGBRegressor", **xgbm), "reg")),
        "mlp_classifier": (sk, "tabular", _tab(
            _est("sklearn.neural_network.MLPClassifier", **mlp), "multi")),
        "mlp_regressor": (sk, "tabular", _tab(
            _est("sklearn.neural_network.MLPRegressor", **mlp), "reg")),
        "kmeans": (sk, "tabular", _tab(
            _est("sklearn.cluster.KMeans", n_clusters=4, n_init=1, **seed), "", True)),
        "pca": (sk, "tabular", _tab(_est("sklearn.decomposition.PCA", n_components=4), "",
                                    True)),
        "standard_scaler": (sk, "tabular", _tab(
            _est("sklearn.preprocessing.StandardScaler"), "", True)),
        "minmax_scaler": (sk, "tabular", _tab(
            _est("sklearn.preprocessing.MinMaxScaler"), "", True)),
        "binarizer": (sk, "tabular", _tab(_est("sklearn.preprocessing.Binarizer"), "", True)),
        "normalizer": (sk, "tabular", _tab(_est("sklearn.preprocessing.Normalizer"), "", True)),
        "gaussian_nb": (sk, "tabular", _tab(_est("sklearn.naive_bayes.GaussianNB"), "multi")),
        "bernoulli_nb": (sk, "tabular", _tab(_est("sklearn.naive_bayes.BernoulliNB"), "bin")),
        "column_transformer_pipeline": (sk, "mixed", _column_transformer),
        "tfidf_logistic": (sk, "text", _text_pipeline("tfidf", "logistic")),
        "count_multinomial_nb": (sk, "text", _text_pipeline("count", "multinomial_nb")),
        "dict_vectorizer_ridge": (sk, "dict", _dict_vectorizer),
    }


# What each library's models need beyond scikit-learn and skl2onnx (to importorskip them).
REQUIREMENTS = {"sklearn": (), "lightgbm": ("lightgbm", "onnxmltools"),
                "xgboost": ("xgboost", "onnxmltools")}


def model_names() -> list[str]:
    return list(_models())


def requirements(name: str) -> tuple[str, ...]:
    """The modules ``name`` needs to be built (to ``pytest.importorskip`` them)."""
    return ("sklearn", "skl2onnx", *REQUIREMENTS[_models()[name][0]])


# ---- feeds, labels, the entry ------------------------------------------------------------------

def _feeds_builder(kind: str, model: onnx.ModelProto) -> tuple[Callable[[int], dict], int]:
    inputs = [i.name for i in model.graph.input]
    if kind == "tabular":
        test = _tabular()["test"]
        return (lambda n: {inputs[0]: test[:n]}), N_TEST
    if kind == "mixed":
        d = _mixed()
        return (lambda n: {"num": d["test_num"][:n], "cat": d["test_cat"][:n]}), N_TEST
    if kind == "text":
        test = _text()["test"]
        return (lambda n: {inputs[0]: test[:n]}), N_TEST
    if kind == "dict":
        rows = _dicts()["test"]

        def one_map(n: int) -> dict:
            if n != 1:
                raise ValueError("a map input holds one row: batch 1 only")
            return {inputs[0]: dict(rows[0])}
        return one_map, 1
    raise ValueError(kind)


_EXACT = {onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.STRING,
          onnx.TensorProto.BOOL}


def label_outputs(model: onnx.ModelProto) -> tuple[str, ...]:
    """The outputs compared exactly: integer, boolean and string tensors (predicted labels,
    cluster indices)."""
    return tuple(o.name for o in model.graph.output
                 if o.type.HasField("tensor_type") and o.type.tensor_type.elem_type in _EXACT)


@dataclass(frozen=True)
class ZooModel:
    name: str
    library: str
    model: onnx.ModelProto
    feeds: Callable[[int], dict[str, Any]]
    """The first ``n`` test rows as the model's feeds (``n <= max_batch``)."""
    max_batch: int
    labels: tuple[str, ...]

    @property
    def bytes(self) -> bytes:
        return self.model.SerializeToString()


def cache_key() -> str:
    """Library versions and this file's hash: a change of either rebuilds the cache."""
    parts = [hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]]
    for mod in ("numpy", "onnx", "sklearn", "skl2onnx", "onnxmltools", "lightgbm", "xgboost"):
        try:
            parts.append(f"{mod}-{importlib.import_module(mod).__version__}")
        except ImportError:
            parts.append(f"{mod}-none")
    return hashlib.sha256("_".join(parts).encode()).hexdigest()[:16]


def _ignore_cache() -> None:
    ignore = CACHE / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")


def build(name: str, cache: bool = True) -> ZooModel:
    """Train and convert ``name`` (or read it from the cache)."""
    library, kind, builder = _models()[name]
    path = CACHE / cache_key() / f"{name}.onnx"
    if cache and path.exists():
        model = onnx.load(path)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence, feature names, converter notes
            model = builder()
        if cache:
            path.parent.mkdir(parents=True, exist_ok=True)
            _ignore_cache()
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(model.SerializeToString())
            tmp.replace(path)
    feeds, max_batch = _feeds_builder(kind, model)
    return ZooModel(name, library, model, feeds, max_batch, label_outputs(model))


def build_all(names: Sequence[str] | None = None, cache: bool = True) -> list[ZooModel]:
    return [build(n, cache) for n in (names or model_names())]


# ---- onnxruntime as the oracle ------------------------------------------------------------------

ORT_LOCALE = "en_US.UTF-8"


def ort_locale() -> str:
    """Make onnxruntime's StringNormalizer constructible; returns what was done.

    skl2onnx's text conversions write a StringNormalizer without a ``locale``; onnxruntime then
    builds ``std::locale("en_US.UTF-8")`` when it creates the session, and fails ("Failed to
    construct locale with name:en_US.UTF-8") on a machine without that locale (a Debian or
    Ubuntu image has only C, C.UTF-8 and POSIX until ``locale-gen``). When it is missing and
    glibc's ``localedef`` is there, it is compiled once into the cache (~3 MB, ~2 s) and
    ``LOCPATH`` points this process at it (glibc reads LOCPATH at each locale lookup). Nothing is
    done where the locale exists; where it cannot be made, onnxruntime fails these models as
    before. onnxplex does not use the C++ locale."""
    import ctypes
    import shutil
    import subprocess

    libc = ctypes.CDLL(None)
    libc.newlocale.restype = ctypes.c_void_p
    libc.newlocale.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p]
    libc.freelocale.argtypes = [ctypes.c_void_p]

    def available() -> bool:
        loc = libc.newlocale(1 << 0 | 1 << 1, ORT_LOCALE.encode(), None)  # LC_CTYPE|NUMERIC
        if loc:
            libc.freelocale(loc)
        return bool(loc)

    if available():
        return f"{ORT_LOCALE} available"
    folder = CACHE / "locale"
    if not (folder / ORT_LOCALE / "LC_CTYPE").exists():
        localedef = shutil.which("localedef")
        if localedef is None:
            return f"{ORT_LOCALE} missing and no localedef: onnxruntime fails text models"
        folder.mkdir(parents=True, exist_ok=True)
        _ignore_cache()
        subprocess.run([localedef, "--no-archive", "-i", "en_US", "-f", "UTF-8",
                        str(folder / ORT_LOCALE)], check=False, capture_output=True)
    os.environ["LOCPATH"] = str(folder)
    return (f"{ORT_LOCALE} compiled into {folder} (LOCPATH)" if available()
            else f"{ORT_LOCALE} could not be made: onnxruntime fails text models")


# ---- comparison ------------------------------------------------------------------------------

def _close(e: np.ndarray, g: np.ndarray, exact: bool) -> str:
    if e.shape != g.shape:
        return f"shape {g.shape}, expected {e.shape}"
    if exact or e.dtype.kind in "OUSb" or g.dtype.kind in "OUSb":
        if e.dtype.kind in "OUS" or g.dtype.kind in "OUS":
            bad = np.array([str(a) != str(b) for a, b in zip(e.ravel(), g.ravel())], bool)
        else:
            bad = (e != g).ravel()
        if bad.any():
            i = int(np.argmax(bad))
            return (f"{int(bad.sum())} of {bad.size} values differ (first at flat index {i}: "
                    f"{g.ravel()[i]!r}, expected {e.ravel()[i]!r})")
        return ""
    e64, g64 = e.astype(np.float64), g.astype(np.float64)
    bad = ~np.isclose(g64, e64, rtol=RTOL, atol=ATOL, equal_nan=True)
    if bad.any():
        d = np.abs(g64 - e64)
        return (f"{int(bad.sum())} of {bad.size} values differ, max abs diff "
                f"{float(np.nanmax(d)):.3g}")
    return ""


def _compare_value(e: Any, g: Any, exact: bool) -> str:
    if isinstance(e, np.ndarray):
        if not isinstance(g, np.ndarray):
            return f"a {type(g).__name__}, expected an ndarray"
        if e.dtype.kind != g.dtype.kind and not (e.dtype.kind in "OUS" and g.dtype.kind in "OUS"):
            return f"dtype {g.dtype}, expected {e.dtype}"
        if e.dtype.kind in "fc" and e.dtype != g.dtype:
            return f"dtype {g.dtype}, expected {e.dtype}"
        return _close(e, g, exact)
    if isinstance(e, dict):
        if not isinstance(g, dict):
            return f"a {type(g).__name__}, expected a dict"
        if list(g) != list(e) or [type(k) for k in g] != [type(k) for k in e]:
            return (f"keys {list(g)!r} ({type(next(iter(g), None)).__name__}), expected "
                    f"{list(e)!r} ({type(next(iter(e), None)).__name__})")
        for k in e:
            if type(g[k]) is not type(e[k]) and not (isinstance(e[k], float)
                                                     and isinstance(g[k], float)):
                return f"key {k!r}: a {type(g[k]).__name__}, expected a {type(e[k]).__name__}"
            why = _close(np.asarray(e[k]), np.asarray(g[k]), exact)
            if why:
                return f"key {k!r}: {why}"
        return ""
    if isinstance(e, list):
        if not isinstance(g, list):
            return f"a {type(g).__name__}, expected a list"
        if len(g) != len(e):
            return f"{len(g)} items, expected {len(e)}"
        for i, (a, b) in enumerate(zip(e, g)):
            why = _compare_value(a, b, exact)
            if why:
                return f"item {i}: {why}"
        return ""
    return f"unexpected output type {type(e).__name__}"


def compare(expected: Sequence[Any], got: Sequence[Any], names: Sequence[str],
            labels: Sequence[str]) -> list[str]:
    """``name: what differs`` for each output of ``got`` that does not match ``expected``
    (onnxruntime's): labels exactly, the rest within RTOL/ATOL; lists of dicts (ZipMap) row by
    row and key by key, keys in the same order. Empty when all match."""
    if len(got) != len(expected):
        return [f"{len(got)} outputs, expected {len(expected)}"]
    out = []
    for name, e, g in zip(names, expected, got):
        why = _compare_value(e, g, name in labels)
        if why:
            out.append(f"{name}: {why}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="", help="comma-separated subset of the models")
    p.add_argument("--no-cache", action="store_true", help="rebuild, ignore and keep no cache")
    a = p.parse_args(argv)
    names = [n for n in a.only.split(",") if n] or model_names()
    t_all = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        z = build(name, cache=not a.no_cache)
        ops = sorted({f"{n.domain + '::' if n.domain else ''}{n.op_type}"
                      for n in z.model.graph.node})
        print(f"{name:36s} {z.library:9s} {time.perf_counter() - t0:6.2f} s  "
              f"{len(z.model.graph.node):3d} nodes  labels={list(z.labels)}  {', '.join(ops)}",
              flush=True)
    print(f"{len(names)} models in {time.perf_counter() - t_all:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
