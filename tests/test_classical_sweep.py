"""A broad sweep of classical models beyond the benchmark zoo, against onnxruntime.

``tests/test_classical_ml.py`` runs the 39 models of the classical benchmark; this sweep covers
the long tail a user brings: ~190 estimators, objectives and converter options of
scikit-learn (skl2onnx), LightGBM and XGBoost (onnxmltools), each trained on 200 rows of
synthetic data in a fraction of a second: linear models of every family, SVMs of every kernel,
neighbours, Naive Bayes variants, discriminant analysis, Gaussian processes, mixtures,
outlier detectors, meta-estimators (bagging, boosting, stacking, calibration, one-vs-rest and
one-vs-one), every preprocessing transformer skl2onnx converts, text vectorizers' options,
categorical encoders with unknown categories, integer inputs, double-precision conversions,
missing values fed to trees, LightGBM and XGBoost objectives, and skl2onnx's options
(``zipmap``, ``raw_scores``, ``nocl``, ``output_class_labels``, ``return_std``...).

Each must load in onnxplex and match onnxruntime at batch 1 and batch 40, as the benchmark
zoo's models must (labels exactly, the rest rtol 1e-4 atol 1e-5, ZipMap key by key).

Left out, because a converter cannot convert them or onnxruntime refuses the model (nothing
to compare with): TransformedTargetRegressor, NearestCentroid, VotingClassifier (skl2onnx:
flatten_transform), SplineTransformer, MissingIndicator, FastICA, Nystroem, RBFSampler,
BernoulliRBM, RandomTreesEmbedding (sparse output), a multi-label KNN (onnxruntime: ZipMap of
rank 3), a char_wb vectorizer, infrequent categories, LightGBM's fair and mape objectives,
XGBoost's binary:logitraw and rankers, double-precision forests and logistic regressions
(onnxruntime: a type error).

Found by this sweep and fixed: declared shapes that contradict the nodes (PLSRegression,
OneVsOneClassifier) refused the model where onnxruntime merges them with a warning; outputs
whose shape contradicts the file's declaration (a binary RidgeClassifier's scores, an XGBoost
hinge classifier's) were an error where onnxruntime returns them; model-local functions called
inside an If's branches (KNNImputer) could not run.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from classical_zoo_loader import load_zoo

import onnxplex

ort = pytest.importorskip("onnxruntime")
for _module in ("sklearn", "skl2onnx", "onnxmltools", "lightgbm", "xgboost"):
    pytest.importorskip(_module)

N, F, N_TEST = 200, 6, 40


zoo = load_zoo()

# ---- data ------------------------------------------------------------------------------------

_rng = np.random.default_rng(7)
X = _rng.standard_normal((N, F)).astype(np.float32)
_w = _rng.standard_normal(F)
Y_REG = X @ _w + 0.1 * _rng.standard_normal(N)
Y_POS = np.exp(Y_REG / 3)
Y_BIN = (Y_REG > 0).astype(np.int64)
Y_MULTI = np.digitize(Y_REG, np.quantile(Y_REG, [0.33, 0.66]))
Y_STR = np.array(["a", "b", "c"])[Y_MULTI]
X_TEST = _rng.standard_normal((N_TEST, F)).astype(np.float32)
X_NAN = X_TEST.copy()
X_NAN[_rng.random(X_NAN.shape) < 0.15] = np.nan
X_POS, X_TEST_POS = np.abs(X), np.abs(X_TEST)
X_INT = (np.abs(X) * 3).astype(np.int64).astype(np.float32)
X_TEST_INT = np.minimum((np.abs(X_TEST) * 3).astype(np.int64).astype(np.float32), X_INT.max(0))
CATS = np.array(_rng.choice(["red", "green", "blue", "navy"], (N, 2)), dtype=object)
CATS_TEST = np.array(_rng.choice(["red", "green", "blue", "pink"], (N_TEST, 2)), dtype=object)
INTS = _rng.integers(0, 4, (N, 3))
INTS_TEST = _rng.integers(0, 4, (N_TEST, 3))

Build = Callable[[], tuple[Any, np.ndarray]]   # -> (ModelProto, test rows)


def E(path: str, *args: Any, **kw: Any) -> Any:
    """``module.Class(*args, **kw)``, imported when called."""
    module, cls = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), cls)(*args, **kw)


def skl(make: Callable[[], Any], y: np.ndarray | None, x: np.ndarray = X,
        x_test: np.ndarray = X_TEST, options: dict | None = None, double: bool = False,
        target_opset: dict | None = None) -> Build:
    """An estimator fitted on ``x`` (and ``y``), converted by skl2onnx's ``to_onnx``."""
    def build():
        from skl2onnx import to_onnx

        m = make()
        m.fit(x) if y is None else m.fit(x, y)
        xx = x.astype(np.float64) if double else x
        kw: dict[str, Any] = {}
        if options:
            kw["options"] = options
        if target_opset:
            kw["target_opset"] = target_opset
        with zoo._bool_ints_as_ints():
            onx = to_onnx(m, xx[:1], **kw)
        return onx, x_test.astype(np.float64) if double else x_test
    return build


def omt(converter: str, make: Callable[[], Any], y: np.ndarray, x: np.ndarray = X,
        x_test: np.ndarray = X_TEST) -> Build:
    """A LightGBM or XGBoost estimator converted by onnxmltools."""
    def build():
        import onnxmltools
        from onnxmltools.convert.common.data_types import FloatTensorType

        m = make().fit(x, y)
        return getattr(onnxmltools, converter)(
            m, initial_types=[("input", FloatTensorType([None, F]))]), x_test
    return build


def text(vectorizer: Callable[[], Any], classifier: Callable[[], Any] | None = None) -> Build:
    def build():
        from skl2onnx import convert_sklearn
        from skl2onnx.common.data_types import StringTensorType
        from sklearn.pipeline import Pipeline

        d = zoo._text()
        steps = [("vec", vectorizer())] + ([("clf", classifier())] if classifier else [])
        m = Pipeline(steps)
        m.fit(d["docs"], d["y"]) if classifier else m.fit(d["docs"])
        return convert_sklearn(m, initial_types=[("text", StringTensorType([None, 1]))]), \
            d["test"]
    return build


def typed(encoder: Callable[[], Any], x: np.ndarray, x_test: np.ndarray,
          classifier: Callable[[], Any] | None = None) -> Build:
    """A pipeline on a string or int64 tensor input."""
    def build():
        from skl2onnx import convert_sklearn
        from skl2onnx.common.data_types import Int64TensorType, StringTensorType
        from sklearn.pipeline import Pipeline

        m = Pipeline([("enc", encoder())] + ([("clf", classifier())] if classifier else []))
        m.fit(x, Y_MULTI) if classifier else m.fit(x)
        kind = StringTensorType if x.dtype == object else Int64TensorType
        return convert_sklearn(m, initial_types=[("x", kind([None, x.shape[1]]))]), x_test
    return build


# ---- the cases -------------------------------------------------------------------------------

LM, PP, SVM, NB = "sklearn.linear_model.", "sklearn.preprocessing.", "sklearn.svm.", \
    "sklearn.naive_bayes."
ENS, TREE, NBRS = "sklearn.ensemble.", "sklearn.tree.", "sklearn.neighbors."
TXT, LGB, XGB = "sklearn.feature_extraction.text.", "lightgbm.", "xgboost."
SEED = {"random_state": 0}


def _cases() -> dict[str, Build]:
    c: dict[str, Build] = {}
    for name in ("Lasso", "ElasticNet", "Lars", "LassoLars", "BayesianRidge", "ARDRegression",
                 "HuberRegressor", "TheilSenRegressor", "PoissonRegressor", "GammaRegressor",
                 "TweedieRegressor", "PassiveAggressiveRegressor", "SGDRegressor",
                 "OrthogonalMatchingPursuit", "RANSACRegressor", "QuantileRegressor"):
        y = Y_POS if name in ("PoissonRegressor", "GammaRegressor", "TweedieRegressor") \
            else Y_REG
        c[f"reg_{name}"] = skl(lambda n=name: E(LM + n), y)
    c["reg_linear_double"] = skl(lambda: E(LM + "LinearRegression"), Y_REG, double=True)
    c["reg_ridge_2targets"] = skl(lambda: E(LM + "Ridge"), np.stack([Y_REG, -Y_REG], 1))
    c["reg_LinearSVR"] = skl(lambda: E(SVM + "LinearSVR"), Y_REG)
    c["reg_NuSVR"] = skl(lambda: E(SVM + "NuSVR"), Y_REG)
    for kernel in ("poly", "sigmoid", "linear"):
        c[f"reg_SVR_{kernel}"] = skl(lambda k=kernel: E(SVM + "SVR", kernel=k), Y_REG)
    c["reg_knn_distance"] = skl(lambda: E(NBRS + "KNeighborsRegressor", weights="distance"),
                                Y_REG)
    gpr = "sklearn.gaussian_process.GaussianProcessRegressor"
    c["reg_GPR"] = skl(lambda: E(gpr), Y_REG)
    c["reg_GPR_double"] = skl(lambda: E(gpr), Y_REG, double=True)
    c["reg_GPR_return_std"] = skl(lambda: E(gpr), Y_REG, options={"return_std": True})
    c["reg_PLS"] = skl(lambda: E("sklearn.cross_decomposition.PLSRegression"), Y_REG)
    c["reg_AdaBoost"] = skl(lambda: E(ENS + "AdaBoostRegressor", n_estimators=10, **SEED),
                            Y_REG)
    c["reg_Bagging"] = skl(lambda: E(ENS + "BaggingRegressor", n_estimators=5, **SEED), Y_REG)
    c["reg_ExtraTrees"] = skl(lambda: E(ENS + "ExtraTreesRegressor", n_estimators=10, **SEED),
                              Y_REG)
    c["reg_ExtraTree"] = skl(lambda: E(TREE + "ExtraTreeRegressor", **SEED), Y_REG)
    c["reg_tree_nan"] = skl(lambda: E(TREE + "DecisionTreeRegressor", **SEED), Y_REG,
                            x_test=X_NAN)
    c["reg_HGB_nan"] = skl(lambda: E(ENS + "HistGradientBoostingRegressor", max_iter=20),
                           Y_REG, x_test=X_NAN)
    c["reg_GB_huber"] = skl(lambda: E(ENS + "GradientBoostingRegressor", loss="huber",
                                      n_estimators=20), Y_REG)
    two = [("a", E(LM + "Ridge")), ("b", E(TREE + "DecisionTreeRegressor", max_depth=3))]
    c["reg_Voting"] = skl(lambda: E(ENS + "VotingRegressor", estimators=two), Y_REG)
    c["reg_Stacking"] = skl(lambda: E(ENS + "StackingRegressor", estimators=two), Y_REG)
    c["reg_MultiOutput"] = skl(lambda: E("sklearn.multioutput.MultiOutputRegressor",
                                         E(LM + "Ridge")), np.stack([Y_REG, -Y_REG], 1))
    for act in ("tanh", "logistic", "identity"):
        c[f"reg_MLP_{act}"] = skl(lambda a=act: E("sklearn.neural_network.MLPRegressor",
                                                  activation=a, max_iter=50, **SEED), Y_REG)
    c["reg_poly_ridge"] = skl(lambda: E("sklearn.pipeline.make_pipeline",
                                        E(PP + "PolynomialFeatures", 2), E(LM + "Ridge")), Y_REG)

    for name, kw in (("LogisticRegression", {}), ("RidgeClassifier", {}), ("Perceptron", {}),
                     ("PassiveAggressiveClassifier", {}),
                     ("SGDClassifier", {"loss": "log_loss"}),
                     ("SGDClassifier", {"loss": "modified_huber"})):
        for yn, y in (("bin", Y_BIN), ("multi", Y_MULTI)):
            c[f"clf_{name}{'_' + kw['loss'] if kw else ''}_{yn}"] = \
                skl(lambda n=name, k=kw: E(LM + n, **k), y)

    def logistic():
        return E(LM + "LogisticRegression")

    c["clf_logistic_strlabels"] = skl(logistic, Y_STR)
    c["clf_logistic_nozipmap"] = skl(logistic, Y_MULTI, options={"zipmap": False})
    c["clf_logistic_zipmap_columns"] = skl(logistic, Y_MULTI, options={"zipmap": "columns"})
    c["clf_logistic_raw_scores"] = skl(logistic, Y_MULTI, options={"raw_scores": True})
    c["clf_LinearSVC_multi"] = skl(lambda: E(SVM + "LinearSVC"), Y_MULTI)
    c["clf_NuSVC"] = skl(lambda: E(SVM + "NuSVC", probability=True, **SEED), Y_MULTI)
    c["clf_SVC_poly"] = skl(lambda: E(SVM + "SVC", kernel="poly"), Y_MULTI)
    c["clf_SVC_linear_prob"] = skl(lambda: E(SVM + "SVC", kernel="linear", probability=True,
                                             **SEED), Y_MULTI)
    c["clf_SVC_sigmoid_bin"] = skl(lambda: E(SVM + "SVC", kernel="sigmoid"), Y_BIN)
    c["clf_SVC_strlabels"] = skl(lambda: E(SVM + "SVC"), Y_STR)
    c["clf_SVC_raw_scores"] = skl(lambda: E(SVM + "SVC"), Y_MULTI,
                                  options={"raw_scores": True, "zipmap": False})
    da = "sklearn.discriminant_analysis."
    c["clf_LDA"] = skl(lambda: E(da + "LinearDiscriminantAnalysis"), Y_MULTI)
    c["clf_QDA"] = skl(lambda: E(da + "QuadraticDiscriminantAnalysis"), Y_MULTI)
    c["clf_MultinomialNB"] = skl(lambda: E(NB + "MultinomialNB"), Y_MULTI, x=X_POS,
                                 x_test=X_TEST_POS)
    c["clf_ComplementNB"] = skl(lambda: E(NB + "ComplementNB"), Y_MULTI, x=X_POS,
                                x_test=X_TEST_POS)
    c["clf_CategoricalNB"] = skl(lambda: E(NB + "CategoricalNB"), Y_MULTI, x=X_INT,
                                 x_test=X_TEST_INT)
    c["clf_GaussianNB_bin"] = skl(lambda: E(NB + "GaussianNB"), Y_BIN)
    c["clf_knn_distance"] = skl(lambda: E(NBRS + "KNeighborsClassifier", weights="distance"),
                                Y_MULTI)
    c["clf_knn_cdist"] = skl(lambda: E(NBRS + "KNeighborsClassifier"), Y_MULTI,
                             options={"optim": "cdist", "zipmap": False})
    c["clf_AdaBoost"] = skl(lambda: E(ENS + "AdaBoostClassifier", n_estimators=10, **SEED),
                            Y_MULTI)
    c["clf_Bagging"] = skl(lambda: E(ENS + "BaggingClassifier", n_estimators=5, **SEED),
                           Y_MULTI)
    c["clf_Stacking"] = skl(lambda: E(ENS + "StackingClassifier", estimators=[
        ("a", E(LM + "LogisticRegression")), ("b", E(TREE + "DecisionTreeClassifier",
                                                       max_depth=3))]), Y_MULTI)
    cal = "sklearn.calibration.CalibratedClassifierCV"
    c["clf_Calibrated"] = skl(lambda: E(cal, E(SVM + "LinearSVC")), Y_MULTI)
    c["clf_Calibrated_isotonic"] = skl(lambda: E(cal, E(LM + "LogisticRegression"),
                                                 method="isotonic"), Y_BIN)
    c["clf_OneVsRest"] = skl(lambda: E("sklearn.multiclass.OneVsRestClassifier",
                                       E(LM + "LogisticRegression")), Y_MULTI)
    c["clf_OneVsOne"] = skl(lambda: E("sklearn.multiclass.OneVsOneClassifier",
                                      E(LM + "LogisticRegression")), Y_MULTI)
    c["clf_tree_multi_nan"] = skl(lambda: E(TREE + "DecisionTreeClassifier", **SEED), Y_MULTI,
                                  x_test=X_NAN)
    c["clf_tree_nocl"] = skl(lambda: E(TREE + "DecisionTreeClassifier", max_depth=4), Y_STR,
                             options={"nocl": True})
    c["clf_ExtraTree"] = skl(lambda: E(TREE + "ExtraTreeClassifier", **SEED), Y_MULTI)

    def forest():
        return E(ENS + "RandomForestClassifier", n_estimators=5, **SEED)

    c["clf_RF_strlabels"] = skl(forest, Y_STR)
    c["clf_RF_output_class_labels"] = skl(forest, Y_MULTI, options={
        "output_class_labels": True, "zipmap": False})
    c["clf_GB_multi"] = skl(lambda: E(ENS + "GradientBoostingClassifier", n_estimators=10),
                            Y_MULTI)

    def hgb():
        return E(ENS + "HistGradientBoostingClassifier", max_iter=10)

    c["clf_HGB_multi_nan"] = skl(hgb, Y_MULTI, x_test=X_NAN)
    c["clf_HGB_bin"] = skl(hgb, Y_BIN)
    c["clf_MLP_bin"] = skl(lambda: E("sklearn.neural_network.MLPClassifier", max_iter=50,
                                     **SEED), Y_BIN)
    c["clf_MLP_tanh_multi"] = skl(lambda: E("sklearn.neural_network.MLPClassifier",
                                            activation="tanh", max_iter=50, **SEED), Y_MULTI)
    c["clf_scaler_svc_prob"] = skl(lambda: E("sklearn.pipeline.make_pipeline",
                                             E(PP + "StandardScaler"),
                                             E(SVM + "SVC", probability=True, **SEED)), Y_MULTI)

    c["out_IsolationForest"] = skl(lambda: E(ENS + "IsolationForest", n_estimators=10, **SEED),
                                   None, target_opset={"": 18, "ai.onnx.ml": 3})
    c["out_OneClassSVM"] = skl(lambda: E(SVM + "OneClassSVM"), None)
    c["out_LOF"] = skl(lambda: E(NBRS + "LocalOutlierFactor", novelty=True), None)
    c["clu_MiniBatchKMeans"] = skl(lambda: E("sklearn.cluster.MiniBatchKMeans", n_clusters=3,
                                             n_init=3, **SEED), None)
    c["clu_KMeans_gemm"] = skl(lambda: E("sklearn.cluster.KMeans", n_clusters=3, n_init=2,
                                         **SEED), None, options={"gemm": True})
    gm = "sklearn.mixture."
    c["mix_GaussianMixture"] = skl(lambda: E(gm + "GaussianMixture", n_components=3, **SEED),
                                   None)
    c["mix_GaussianMixture_diag"] = skl(lambda: E(gm + "GaussianMixture", n_components=3,
                                                  covariance_type="diag", **SEED), None)
    c["mix_GaussianMixture_score"] = skl(lambda: E(gm + "GaussianMixture", n_components=2,
                                                   **SEED), None,
                                         options={"score_samples": True})
    c["mix_BayesianGM"] = skl(lambda: E(gm + "BayesianGaussianMixture", n_components=3, **SEED),
                              None)
    c["nn_NearestNeighbors"] = skl(lambda: E(NBRS + "NearestNeighbors", n_neighbors=3,
                                             radius=None), None)

    for name, kw in (("RobustScaler", {}), ("MaxAbsScaler", {}), ("PowerTransformer", {}),
                     ("PolynomialFeatures", {}), ("PolynomialFeatures",
                                                  {"interaction_only": True}),
                     ("KBinsDiscretizer", {"encode": "ordinal"}),
                     ("KBinsDiscretizer", {"encode": "onehot-dense"}),
                     ("Normalizer", {"norm": "l1"}), ("Normalizer", {"norm": "max"}),
                     ("QuantileTransformer", {"n_quantiles": 50}), ("FunctionTransformer", {}),
                     ("StandardScaler", {"with_mean": False})):
        c[f"tr_{name}_{'_'.join(map(str, kw.values()))}".rstrip("_")] = \
            skl(lambda n=name, k=kw: E(PP + n, **k), None)
    imp = "sklearn.impute."
    c["tr_SimpleImputer_median"] = skl(lambda: E(imp + "SimpleImputer", strategy="median"),
                                       None, x_test=X_NAN)
    c["tr_SimpleImputer_most_frequent"] = skl(lambda: E(imp + "SimpleImputer",
                                                        strategy="most_frequent"), None,
                                              x=X_INT, x_test=X_NAN)
    c["tr_SimpleImputer_constant"] = skl(lambda: E(imp + "SimpleImputer", strategy="constant",
                                                   fill_value=0.5), None, x_test=X_NAN)
    c["tr_KNNImputer"] = skl(lambda: E(imp + "KNNImputer"), None, x_test=X_NAN)
    fs = "sklearn.feature_selection."
    c["tr_VarianceThreshold"] = skl(lambda: E(fs + "VarianceThreshold", threshold=0.9), None)
    c["tr_SelectKBest"] = skl(lambda: E(fs + "SelectKBest", k=3), Y_MULTI)
    c["tr_SelectFromModel"] = skl(lambda: E(fs + "SelectFromModel", E(LM + "Lasso", alpha=0.1)),
                                  Y_REG)
    dec = "sklearn.decomposition."
    c["tr_TruncatedSVD"] = skl(lambda: E(dec + "TruncatedSVD", n_components=3), None)
    c["tr_IncrementalPCA"] = skl(lambda: E(dec + "IncrementalPCA", n_components=3), None)
    c["tr_PCA_whiten"] = skl(lambda: E(dec + "PCA", n_components=3, whiten=True), None)
    c["tr_KernelPCA"] = skl(lambda: E(dec + "KernelPCA", n_components=3, kernel="rbf"), None)
    c["tr_GaussianRandomProjection"] = skl(
        lambda: E("sklearn.random_projection.GaussianRandomProjection", n_components=3,
                  **SEED), None)
    c["tr_FeatureUnion"] = skl(lambda: E("sklearn.pipeline.FeatureUnion", [
        ("a", E(PP + "StandardScaler")), ("b", E(dec + "PCA", n_components=2))]), None)
    c["tr_LDA_transform"] = skl(lambda: E(da + "LinearDiscriminantAnalysis"), Y_MULTI,
                                options={"zipmap": False})

    for name, vec, clf in (
            ("tfidf_bigrams_logistic", lambda: E(TXT + "TfidfVectorizer", ngram_range=(1, 2)),
             lambda: E(LM + "LogisticRegression")),
            ("count_binary_bernoulli", lambda: E(TXT + "CountVectorizer", binary=True),
             lambda: E(NB + "BernoulliNB")),
            ("count_max_features_stop_words", lambda: E(TXT + "CountVectorizer",
                                                        max_features=10,
                                                        stop_words=["the", "on"]), None),
            ("tfidf_sublinear_l1", lambda: E(TXT + "TfidfVectorizer", sublinear_tf=True,
                                             norm="l1"), None),
            ("tfidf_char", lambda: E(TXT + "TfidfVectorizer", analyzer="char",
                                     ngram_range=(1, 2)), None),
            ("count_no_lowercase", lambda: E(TXT + "CountVectorizer", lowercase=False), None),
            ("tfidf_no_smooth", lambda: E(TXT + "TfidfVectorizer", smooth_idf=False), None)):
        c[f"txt_{name}"] = text(vec, clf)


    def onehot():
        return E(PP + "OneHotEncoder", handle_unknown="ignore")

    c["cat_onehot_unknown"] = typed(onehot, CATS, CATS_TEST)
    c["cat_onehot_unknown_logistic"] = typed(onehot, CATS, CATS_TEST,
                                             lambda: E(LM + "LogisticRegression"))
    c["cat_onehot_drop_first"] = typed(lambda: E(PP + "OneHotEncoder", drop="first",
                                                 handle_unknown="ignore"), CATS, CATS_TEST)
    c["cat_ordinal_unknown"] = typed(lambda: E(PP + "OrdinalEncoder",
                                               handle_unknown="use_encoded_value",
                                               unknown_value=-1), CATS, CATS_TEST)
    c["cat_feature_hasher"] = typed(lambda: E("sklearn.feature_extraction.FeatureHasher",
                                              n_features=16, input_type="string"),
                                    CATS, CATS_TEST)
    c["int_onehot"] = typed(onehot, INTS, INTS_TEST)
    c["int_ordinal"] = typed(lambda: E(PP + "OrdinalEncoder"), INTS, INTS_TEST)
    c["int_scaler"] = typed(lambda: E(PP + "StandardScaler"), INTS, INTS_TEST)

    lgb_clf, lgb_reg = LGB + "LGBMClassifier", LGB + "LGBMRegressor"
    for obj in ("regression", "regression_l1", "huber", "poisson", "gamma", "tweedie",
                "quantile"):
        y = Y_POS if obj in ("poisson", "gamma", "tweedie") else Y_REG
        c[f"lgb_reg_{obj}"] = omt("convert_lightgbm", lambda o=obj: E(
            lgb_reg, objective=o, n_estimators=10, verbose=-1), y)
    c["lgb_reg_nan"] = omt("convert_lightgbm", lambda: E(lgb_reg, n_estimators=10, verbose=-1),
                           Y_REG, x_test=X_NAN)
    c["lgb_clf_ova"] = omt("convert_lightgbm", lambda: E(
        lgb_clf, objective="multiclassova", n_estimators=10, verbose=-1), Y_MULTI)
    c["lgb_clf_dart"] = omt("convert_lightgbm", lambda: E(
        lgb_clf, boosting_type="dart", n_estimators=10, verbose=-1), Y_BIN)
    c["lgb_clf_rf"] = omt("convert_lightgbm", lambda: E(
        lgb_clf, boosting_type="rf", n_estimators=10, bagging_freq=1, bagging_fraction=0.5,
        verbose=-1), Y_BIN)
    c["lgb_clf_strlabels"] = omt("convert_lightgbm", lambda: E(
        lgb_clf, n_estimators=10, verbose=-1), Y_STR)
    c["lgb_clf_big_trees"] = omt("convert_lightgbm", lambda: E(
        lgb_clf, n_estimators=60, num_leaves=63, verbose=-1), Y_MULTI)

    xgb_reg, xgb_clf = XGB + "XGBRegressor", XGB + "XGBClassifier"
    for obj in ("reg:squarederror", "reg:logistic", "count:poisson", "reg:gamma",
                "reg:tweedie", "reg:absoluteerror", "reg:pseudohubererror"):
        y = (Y_POS if obj in ("count:poisson", "reg:gamma", "reg:tweedie")
             else Y_BIN.astype(float) if obj == "reg:logistic" else Y_REG)
        c[f"xgb_reg_{obj}"] = omt("convert_xgboost", lambda o=obj: E(
            xgb_reg, objective=o, n_estimators=10, max_depth=3), y)
    for obj in ("binary:logistic", "binary:hinge"):
        c[f"xgb_clf_{obj}"] = omt("convert_xgboost", lambda o=obj: E(
            xgb_clf, objective=o, n_estimators=10, max_depth=3), Y_BIN)
    c["xgb_clf_softmax"] = omt("convert_xgboost", lambda: E(
        xgb_clf, objective="multi:softmax", n_estimators=10, max_depth=3), Y_MULTI)
    c["xgb_clf_nan"] = omt("convert_xgboost", lambda: E(xgb_clf, n_estimators=10, max_depth=3),
                           Y_MULTI, x_test=X_NAN)
    c["xgb_clf_deep"] = omt("convert_xgboost", lambda: E(xgb_clf, n_estimators=30,
                                                         max_depth=6), Y_MULTI)
    c["xgb_rf_clf"] = omt("convert_xgboost", lambda: E(XGB + "XGBRFClassifier", n_estimators=5,
                                                       max_depth=3), Y_BIN)
    c["xgb_rf_reg"] = omt("convert_xgboost", lambda: E(XGB + "XGBRFRegressor", n_estimators=5,
                                                       max_depth=3), Y_REG)

    # double precision (skl2onnx converts to double what onnxruntime runs in double), older
    # ai.onnx and ai.onnx.ml opsets
    for name, make in (("scaler", lambda: E(PP + "StandardScaler")),
                       ("minmax", lambda: E(PP + "MinMaxScaler")),
                       ("pca", lambda: E(dec + "PCA", n_components=3)),
                       ("kmeans", lambda: E("sklearn.cluster.KMeans", n_clusters=3, n_init=2,
                                            **SEED)),
                       ("normalizer", lambda: E(PP + "Normalizer"))):
        c[f"dbl_{name}"] = skl(make, None, double=True)
    c["dbl_mlp"] = skl(lambda: E("sklearn.neural_network.MLPRegressor", max_iter=50, **SEED),
                       Y_REG, double=True)
    c["dbl_ridge"] = skl(lambda: E(LM + "Ridge"), Y_REG, double=True)
    c["dbl_knn"] = skl(lambda: E(NBRS + "KNeighborsRegressor"), Y_REG, double=True)
    c["dbl_gaussian_nb"] = skl(lambda: E(NB + "GaussianNB"), Y_MULTI, double=True,
                               options={"zipmap": False})

    def tree():
        return E(TREE + "DecisionTreeClassifier", max_depth=5)

    c["opset_ml3_tree"] = skl(tree, Y_MULTI, target_opset={"": 18, "ai.onnx.ml": 3})
    c["opset_ml1_tree"] = skl(tree, Y_MULTI, target_opset={"": 15, "ai.onnx.ml": 1})
    c["opset_13_logistic"] = skl(logistic, Y_MULTI, target_opset={"": 13, "ai.onnx.ml": 1})
    c["opset_9_logistic"] = skl(logistic, Y_MULTI, target_opset={"": 9, "ai.onnx.ml": 1})
    c["opset_11_scaler_pca"] = skl(lambda: E("sklearn.pipeline.make_pipeline",
                                             E(PP + "StandardScaler"),
                                             E(dec + "PCA", n_components=2)), None,
                                   target_opset={"": 11, "ai.onnx.ml": 1})
    x_cat = np.concatenate([X[:, :5], (np.abs(X[:, 5:]) * 3).astype(int).astype(np.float32)], 1)
    c["lgb_clf_integer_feature"] = omt("convert_lightgbm", lambda: E(
        lgb_clf, n_estimators=10, verbose=-1), Y_BIN, x=x_cat)
    c["lgb_reg_linear_tree"] = omt("convert_lightgbm", lambda: E(
        lgb_reg, n_estimators=5, linear_tree=True, verbose=-1), Y_REG)
    c["lgb_clf_goss"] = omt("convert_lightgbm", lambda: E(
        lgb_clf, n_estimators=10, data_sample_strategy="goss", verbose=-1), Y_MULTI)
    c["xgb_reg_base_score"] = omt("convert_xgboost", lambda: E(
        xgb_reg, n_estimators=10, max_depth=3, base_score=0.7), Y_REG)
    c["xgb_clf_scale_pos_weight"] = omt("convert_xgboost", lambda: E(
        xgb_clf, n_estimators=10, max_depth=3, scale_pos_weight=3.0), Y_BIN)
    return c


CASES = _cases()


def _feeds(sess, rows: np.ndarray) -> dict[str, np.ndarray]:
    first = sess.get_inputs()[0]
    if first.type == "tensor(string)" and rows.dtype != object:
        rows = rows.astype(object)
    return {first.name: rows}


@pytest.fixture(scope="module", autouse=True)
def _locale():
    zoo.ort_locale()   # onnxruntime's StringNormalizer wants en_US.UTF-8 (see the zoo)


def test_the_sweep_is_broad():
    assert len(CASES) >= 180
    families = {name.split("_")[0] for name in CASES}
    assert families >= {"reg", "clf", "out", "clu", "mix", "nn", "tr", "txt", "cat", "int",
                        "lgb", "xgb", "dbl", "opset"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnxruntime(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # convergence and converter warnings
        onx, rows = CASES[name]()
    data = onx.SerializeToString()
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    sess = onnxplex.InferenceSession(data)
    names = [o.name for o in ref.get_outputs()]
    assert [o.name for o in sess.get_outputs()] == names
    labels = zoo.label_outputs(onx)
    for batch in (1, len(rows)):
        feeds = _feeds(ref, rows[:batch])
        diff = zoo.compare(ref.run(None, feeds), sess.run(None, feeds), names, labels)
        assert not diff, f"batch {batch}: {diff}"
