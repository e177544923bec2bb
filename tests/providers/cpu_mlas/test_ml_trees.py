"""cpu_mlas tree ensembles (ml_trees.py on the native evaluator) against onnxruntime.

TreeEnsembleClassifier / TreeEnsembleRegressor at ml opsets 1, 2 and 3 and TreeEnsemble at 5,
on random forests built here (every mode, NaN rows and missing-value tracking, several weights
a leaf, base values, every aggregate and post transform, binary and multiclass, int and string
labels, the ``*_as_tensor`` attributes, float, double and integer inputs, batch 1 and large
batches on two threads), then on real converter output (scikit-learn's tree models through
skl2onnx, LightGBM and XGBoost through onnxmltools). onnxplex runs each model through
``InferenceSession(providers=["cpu_mlas"])``; onnxruntime (one thread: it then sums trees in
order, as the native evaluator always does) is the oracle. Bad attributes must be refused with
a ValueError naming the attribute when the kernel is built.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

import onnxplex
from onnxplex import ProviderContext, load_model
from onnxplex.providers.cpu_mlas import _native
from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

ort = pytest.importorskip("onnxruntime")
ort.set_default_logger_severity(3)
pytestmark = pytest.mark.skipif(_native.native() is None,
                                reason="the native module (_mlas_native) is not built")

ML = "ai.onnx.ml"
MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
POSTS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]
AGGREGATES = ["AVERAGE", "SUM", "MIN", "MAX"]
GRID = 0.5  # thresholds and inputs share a grid: equalities hit


# ---- random forests --------------------------------------------------------------------------

class Forest:
    """Random trees: per tree a node list, node 0 the root; an interior node a dict with mode,
    feature, threshold, children, missing-value flag (and a set for BRANCH_MEMBER), a leaf a
    dict with its (target, weight) list and its own nodes_values entry."""

    def __init__(self, seed: int, n_trees: int = 4, depth: int = 4, n_features: int = 4,
                 modes=("BRANCH_LEQ",), n_targets: int = 1, weights=(1, 1), member=False,
                 weight_sign: str = "mixed", missing: float = 0.3, targets=None,
                 weightless: float = 0.0, grid: float = GRID, thin: bool = False,
                 full: float = 0.0) -> None:
        self.rng = rng = np.random.default_rng(seed)
        self.grid = grid
        self.n_features, self.n_targets = n_features, n_targets
        targets = list(range(n_targets)) if targets is None else list(targets)
        self.trees: list[list[dict]] = []
        for _ in range(n_trees):
            nodes: list[dict] = []
            complete = rng.random() < full  # every leaf at `depth`

            def grow(d: int, leaf: bool = False, nodes: list[dict] = nodes,
                     complete: bool = complete) -> int:
                i = len(nodes)
                nodes.append({})
                if leaf or d == depth or (d > 0 and not (thin or complete)
                                          and rng.random() < 0.25):
                    k = (0 if rng.random() < weightless
                         else int(rng.integers(*weights, endpoint=True)))
                    w = rng.standard_normal(k).astype(np.float32)
                    if weight_sign == "pos":
                        w = np.abs(w)
                    nodes[i] = {"leaf": True, "value": float(grid * rng.integers(-4, 5)),
                                "w": [(int(rng.choice(targets)), float(v)) for v in w]}
                    return i
                mode = str(rng.choice(list(modes) + (["BRANCH_MEMBER"] if member else [])))
                nd = {"leaf": False, "mode": mode, "f": int(rng.integers(n_features)),
                      "v": float(grid * rng.integers(-4, 5)), "miss": int(rng.random() < missing)}
                if mode == "BRANCH_MEMBER":
                    nd["set"] = sorted(set((grid * rng.integers(-4, 5, rng.integers(1, 7)))
                                           .tolist()))
                side = rng.integers(2) if thin else -1  # thin: one branch a leaf, the other deeper
                nd["t"] = grow(d + 1, side == 0)
                nd["e"] = grow(d + 1, side == 1)
                nodes[i] = nd
                return i

            grow(0)
            self.trees.append(nodes)

    def x(self, n: int, dtype=np.float32, nan: float = 0.1) -> np.ndarray:
        x = self.grid * self.rng.integers(-5, 6, (n, self.n_features)).astype(np.float64)
        x[self.rng.random(x.shape) < nan] = np.nan
        return x.astype(dtype)

    def v3(self, classifier: bool, *, values_as_tensor=False, weights_as_tensor=False,
           jitter: float = 0.0) -> dict:
        """ml opset 1/3 attributes: each tree's root first, its other nodes and all weights
        shuffled, node ids a permutation. ``jitter`` moves thresholds and weights off float32
        values (for the double ``*_as_tensor`` attributes)."""
        rng = self.rng
        cols = {k: [] for k in ("treeids", "nodeids", "featureids", "values", "modes",
                                "truenodeids", "falsenodeids", "missing_value_tracks_true")}
        ws = []
        for t, nodes in enumerate(self.trees):
            ids = rng.permutation(len(nodes))
            for i in [0, *rng.permutation(np.arange(1, len(nodes))).tolist()]:
                nd = nodes[i]
                leaf = nd["leaf"]
                cols["treeids"].append(t)
                cols["nodeids"].append(int(ids[i]))
                cols["featureids"].append(0 if leaf else nd["f"])
                cols["values"].append(nd["value"] if leaf else nd["v"] + jitter * rng.random())
                cols["modes"].append("LEAF" if leaf else nd["mode"])
                cols["truenodeids"].append(0 if leaf else int(ids[nd["t"]]))
                cols["falsenodeids"].append(0 if leaf else int(ids[nd["e"]]))
                cols["missing_value_tracks_true"].append(0 if leaf else nd["miss"])
                if leaf:
                    ws += [(t, int(ids[i]), tg, w + jitter * rng.random()) for tg, w in nd["w"]]
        ws = [ws[k] for k in rng.permutation(len(ws))]
        a = {f"nodes_{k}": v for k, v in cols.items()}
        if values_as_tensor:
            a["nodes_values_as_tensor"] = nh.from_array(np.array(a.pop("nodes_values")), "v")
        p = "class" if classifier else "target"
        a[f"{p}_treeids"] = [w[0] for w in ws]
        a[f"{p}_nodeids"] = [w[1] for w in ws]
        a[f"{p}_ids"] = [w[2] for w in ws]
        weights = [float(w[3]) for w in ws]
        if weights_as_tensor:
            a[f"{p}_weights_as_tensor"] = nh.from_array(np.array(weights), "w")
        else:
            a[f"{p}_weights"] = weights
        if not classifier:
            a["n_targets"] = self.n_targets
        return a

    def v5(self, dtype) -> dict:
        """ml opset 5 attributes (one weight a leaf; a root is never a leaf here)."""
        nodes, leaves, roots, members = [], [], [], []
        for tree in self.trees:
            index = {}
            for i, nd in enumerate(tree):
                index[i] = (len(leaves), True) if nd["leaf"] else (len(nodes), False)
                (leaves if nd["leaf"] else nodes).append(nd)
            roots.append(index[0][0])
            for nd in tree:
                if not nd["leaf"]:
                    nd["_t"], nd["_e"] = index[nd["t"]], index[nd["e"]]
        code = {m: i for i, m in enumerate(MODES + ["BRANCH_MEMBER"])}
        for nd in nodes:
            if nd["mode"] == "BRANCH_MEMBER":
                members += nd["set"] + [np.nan]
        t = lambda v, name: nh.from_array(np.asarray(v, dtype), name)  # noqa: E731
        a = dict(
            nodes_featureids=[nd["f"] for nd in nodes],
            nodes_modes=nh.from_array(np.array([code[nd["mode"]] for nd in nodes], np.uint8),
                                      "m"),
            nodes_splits=t([nd["v"] for nd in nodes], "s"),
            nodes_truenodeids=[nd["_t"][0] for nd in nodes],
            nodes_trueleafs=[int(nd["_t"][1]) for nd in nodes],
            nodes_falsenodeids=[nd["_e"][0] for nd in nodes],
            nodes_falseleafs=[int(nd["_e"][1]) for nd in nodes],
            nodes_missing_value_tracks_true=[nd["miss"] for nd in nodes],
            leaf_targetids=[lf["w"][0][0] for lf in leaves],
            leaf_weights=t([lf["w"][0][1] for lf in leaves], "w"),
            tree_roots=roots, n_targets=self.n_targets)
        if members:
            a["membership_values"] = t(members, "mv")
        return a


# ---- models and runs -------------------------------------------------------------------------

def model(op: str, x: np.ndarray, ml_opset: int, n_features: int | None = None,
          **attrs) -> bytes:
    et = oh.np_dtype_to_tensor_dtype(x.dtype)
    if op == "TreeEnsembleClassifier":
        lab = TP.STRING if "classlabels_strings" in attrs else TP.INT64
        outs = [oh.make_tensor_value_info("label", lab, None),
                oh.make_tensor_value_info("scores", TP.FLOAT, None)]
    else:
        outs = [oh.make_tensor_value_info(
            "y", et if op == "TreeEnsemble" else TP.FLOAT, None)]
    node = oh.make_node(op, ["x"], [o.name for o in outs], domain=ML, **attrs)
    shape = [None, x.shape[-1] if n_features is None else n_features]
    g = oh.make_graph([node], "g", [oh.make_tensor_value_info(
        "x", et, shape[1:] if x.ndim == 1 else shape)], outs)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(ML, ml_opset)],
                      ir_version=9)
    return m.SerializeToString()


def ours(m: bytes, x: np.ndarray, threads: int = 1, name: str = "x") -> list[np.ndarray]:
    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = threads
    return onnxplex.InferenceSession(m, so, providers=["cpu_mlas"]).run(None, {name: x})


def theirs(m: bytes, x: np.ndarray, name: str = "x") -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(m, so, providers=["CPUExecutionProvider"]).run(None, {name: x})


def same(got, want, rtol=1e-5, atol=1e-6, cols=None) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        assert g.shape == w.shape, (k, g.shape, w.shape)
        if w.dtype.kind in "OUS":
            assert g.dtype == object, (k, g.dtype)
            assert g.tolist() == w.astype(object).tolist(), k
            continue
        assert g.dtype == w.dtype, (k, g.dtype, w.dtype)
        if w.dtype.kind in "iu":
            np.testing.assert_array_equal(g, w, err_msg=f"output {k}")
        else:
            if cols is not None and g.ndim == 2:
                g, w = g[:, cols], w[:, cols]
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=f"output {k}")


def check(m: bytes, x: np.ndarray, **kw) -> list[np.ndarray]:
    got = ours(m, x)
    same(got, theirs(m, x), **kw)
    return got


def factory(m: bytes):
    """The cpu_mlas kernel factory of the model's one node, and the node."""
    node = load_model(onnx.load_from_string(m)).node_views[0]
    config, reason = CpuMlasProvider.op_table.lookup(node)
    assert config is not None, reason
    return config.factory, node


def build_error(m: bytes) -> str:
    f, node = factory(m)
    with pytest.raises(ValueError) as e:
        f(node, ProviderContext())
    return str(e.value)


# ---- TreeEnsembleRegressor -------------------------------------------------------------------

def test_native_kernels_run_the_trees():
    fr = Forest(0)
    x = fr.x(4)
    for op, opset, attrs in (("TreeEnsembleRegressor", 3, fr.v3(False)),
                             ("TreeEnsembleClassifier", 1, {**fr.v3(True),
                                                            "classlabels_int64s": [1, 2]}),
                             ("TreeEnsemble", 5, fr.v5(np.float32))):
        f, _ = factory(model(op, x, opset, **attrs))
        assert f.__module__.endswith("ml_trees"), (op, f.__module__)


@pytest.mark.parametrize("mode", MODES + ["mixed"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("opset", [1, 3])
def test_regressor_modes_missing_values(mode, dtype, opset):
    fr = Forest(1 + MODES.index(mode) if mode in MODES else 9, n_trees=5, depth=5,
                modes=MODES if mode == "mixed" else [mode], n_targets=2, weights=(1, 2))
    x = fr.x(97, dtype, nan=0.15)
    check(model("TreeEnsembleRegressor", x, opset, **fr.v3(False)), x)


@pytest.mark.parametrize("aggregate", AGGREGATES)
@pytest.mark.parametrize("n_targets", [1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_regressor_aggregates_base_values(aggregate, n_targets, dtype):
    # several weights a leaf (the single-target path takes the first), some leaves without
    # any (one target: the leaf's nodes_values counts), base values, untouched targets
    fr = Forest(20 + AGGREGATES.index(aggregate), n_trees=6, modes=MODES, n_targets=n_targets,
                weights=(1, 3), weightless=0.2, targets=range(max(n_targets - 1, 1)),
                full=0.5)
    x = fr.x(64, dtype)
    for base in ([], [0.25 * (k + 1) for k in range(n_targets)]):
        attrs = fr.v3(False) | {"aggregate_function": aggregate}
        if base:
            attrs["base_values"] = base
        check(model("TreeEnsembleRegressor", x, 3, **attrs), x)


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("n_targets", [1, 3])
def test_regressor_post_transforms(post, n_targets):
    # one target: onnxruntime applies PROBIT only
    fr = Forest(30 + POSTS.index(post), n_trees=4, modes=MODES, n_targets=n_targets,
                weights=(0, 2), weight_sign="pos" if post == "PROBIT" else "mixed")
    x = fr.x(50)
    attrs = fr.v3(False) | {"post_transform": post}
    if post == "PROBIT":  # scores in (0, 1)
        attrs["aggregate_function"] = "AVERAGE"
        attrs["target_weights"] = list(np.abs(attrs["target_weights"]) % 0.9 + 0.05)
    check(model("TreeEnsembleRegressor", x, 1, **attrs), x, rtol=1e-5, atol=1e-5)


def test_regressor_integer_inputs():
    # onnxruntime has no integer kernel for the regressor: the same model on float input
    # is the oracle (integers compare as float)
    fr = Forest(40, n_trees=4, modes=MODES, n_targets=2)
    xi = (fr.x(40, nan=0) * 2).astype(np.int64)
    for x in (xi, xi.astype(np.int32)):
        got = ours(model("TreeEnsembleRegressor", x, 3, **fr.v3(False)), x)
        xf = x.astype(np.float32)
        same(got, theirs(model("TreeEnsembleRegressor", xf, 3, **fr.v3(False)), xf))


# ---- TreeEnsembleClassifier ------------------------------------------------------------------

@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("n_base", [0, 1, 2])
@pytest.mark.parametrize("signs", ["pos", "mixed"])
@pytest.mark.parametrize("ids", ["zero", "one", "both"])
def test_classifier_binary(ids, signs, n_base, post):
    # onnxruntime's binary rules: one class id in the weights (the usual converter output)
    # writes [1 - p, p] or [-m, m] (LOGISTIC: both through the sigmoid) from one score and
    # picks the label at 0.5 or 0; ids of both classes score as two columns, the label 1
    # when the positive score is above 0 (its label rule ignores classlabels_int64s)
    targets = {"zero": [0], "one": [1], "both": [0, 1]}[ids]
    fr = Forest(50, n_trees=5, modes=MODES, n_targets=2, targets=targets, weight_sign=signs)
    x = fr.x(64)
    attrs = fr.v3(True) | {"classlabels_int64s": [5, 7], "post_transform": post}
    if n_base:
        attrs["base_values"] = [0.25, -0.5][:n_base]
    if post == "PROBIT":
        attrs["class_weights"] = list(np.abs(attrs["class_weights"]) % 0.2)
    # onnxruntime leaves the second column unwritten for a one-score row under PROBIT, or
    # with one base value and ids of both classes
    first_only = post == "PROBIT" or (n_base == 1 and ids == "both")
    check(model("TreeEnsembleClassifier", x, 3, **attrs), x, atol=1e-5,
          cols=[0] if first_only else None)


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("base", [False, True])
@pytest.mark.parametrize("labels", ["int", "str"])
@pytest.mark.parametrize("n_classes", [3, 5])
def test_classifier_multiclass(n_classes, labels, base, post):
    fr = Forest(60 + n_classes, n_trees=6, modes=MODES, n_targets=n_classes, weights=(1, 3),
                targets=range(n_classes - 1), weight_sign="pos" if post == "PROBIT" else "mixed",
                weightless=0.1)
    x = fr.x(80)
    attrs = fr.v3(True) | {"post_transform": post}
    if labels == "int":
        attrs["classlabels_int64s"] = [10 * k - 3 for k in range(n_classes)]
    else:
        attrs["classlabels_strings"] = [f"class {k}" for k in range(n_classes)]
    if base:
        attrs["base_values"] = [0.1 * k for k in range(n_classes)]
    if post == "PROBIT":
        attrs["class_weights"] = list(np.abs(attrs["class_weights"]) % 0.15)
    check(model("TreeEnsembleClassifier", x, 3, **attrs), x, atol=1e-5)


def test_classifier_argmax_ties_first_wins():
    # every class scores the same: the first class wins, as in onnxruntime
    fr = Forest(70, n_trees=3, n_targets=3)
    attrs = fr.v3(True) | {"classlabels_strings": ["a", "b", "c"]}
    attrs["class_weights"] = [1.0] * len(attrs["class_weights"])
    attrs["class_ids"] = [0, 1, 2] * (len(attrs["class_ids"]) // 3) + \
        [0] * (len(attrs["class_ids"]) % 3)
    x = fr.x(30)
    check(model("TreeEnsembleClassifier", x, 3, **attrs), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
@pytest.mark.parametrize("opset", [1, 2, 3])
def test_classifier_input_types(dtype, opset):
    fr = Forest(80, n_trees=5, modes=MODES, n_targets=3, weights=(1, 2))
    x = fr.x(60, nan=0 if np.dtype(dtype).kind == "i" else 0.1)
    x = (x * 2).astype(dtype)
    attrs = fr.v3(True) | {"classlabels_int64s": [0, 1, 2], "post_transform": "SOFTMAX"}
    check(model("TreeEnsembleClassifier", x, opset, **attrs), x)


# ---- the *_as_tensor attributes (opset 3) ----------------------------------------------------

@pytest.mark.parametrize("classifier", [False, True])
def test_as_tensor_attributes(classifier):
    # thresholds and weights off float32 values: compared and summed in double
    fr = Forest(90, n_trees=5, modes=MODES, n_targets=3)
    x = fr.x(60, np.float64) + np.where(np.random.default_rng(1).random((60, 4)) < 0.5,
                                        0.013, 0.0)
    attrs = fr.v3(classifier, values_as_tensor=True, weights_as_tensor=True, jitter=0.01)
    attrs["base_values_as_tensor"] = nh.from_array(np.array([0.1, 0.2, 0.3]) + 1e-9, "b")
    attrs["nodes_hitrates_as_tensor"] = nh.from_array(np.ones(len(attrs["nodes_modes"])), "h")
    if classifier:
        attrs["classlabels_int64s"] = [3, 4, 5]
        attrs["post_transform"] = "SOFTMAX_ZERO"
    op = "TreeEnsembleClassifier" if classifier else "TreeEnsembleRegressor"
    check(model(op, x, 3, **attrs), x)
    # float input with double attributes (onnxruntime refuses them): thresholds and sums in
    # double, as onnxruntime does for double input
    xf = x.astype(np.float32)
    same(ours(model(op, xf, 3, **attrs), xf), theirs(model(op, xf.astype(np.float64), 3,
                                                            **attrs), xf.astype(np.float64)))


# ---- TreeEnsemble (opset 5) ------------------------------------------------------------------

# BRANCH_MEMBER: the specification (and onnxplex) test membership by equality; onnxruntime 1.32
# casts x to int32 for some sets (1.5 is a member of {-1, 1, 2, 3, 4} there) and refuses
# non-integer values in those. The random member tests feed integers, where the two agree;
# test_member_sets_compare_by_equality checks the rest against BRANCH_EQ chains.

# onnxruntime 1.32 reads TreeEnsemble's post_transform 1 as LOGISTIC and 2 as SOFTMAX (its own
# enum), the ONNX specification 1 as SOFTMAX and 2 as LOGISTIC: onnxplex follows the
# specification, so the oracle gets the other code for those two.
_ORT_POST_V5 = [0, 2, 1, 3, 4]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", MODES + ["member"])
def test_tree_ensemble_modes(mode, dtype):
    fr = Forest(100 + len(mode), n_trees=5, depth=5, modes=[mode] if mode in MODES else MODES,
                member=mode == "member", n_targets=2, grid=1.0 if mode == "member" else GRID)
    x = fr.x(90, dtype, nan=0.15)
    check(model("TreeEnsemble", x, 5, **fr.v5(dtype)), x)


@pytest.mark.parametrize("post", range(5))
@pytest.mark.parametrize("aggregate", range(4))
@pytest.mark.parametrize("n_targets", [1, 3])
def test_tree_ensemble_aggregates_posts(n_targets, aggregate, post):
    dtype = np.float64 if (post + aggregate) % 2 else np.float32
    fr = Forest(110 + post, n_trees=4, modes=MODES, member=True, n_targets=n_targets,
                weight_sign="pos" if post == 4 else "mixed", grid=1.0)
    x = fr.x(40, dtype)
    attrs = fr.v5(dtype) | {"aggregate_function": aggregate}
    if post == 4:  # PROBIT of an average of weights in (0, 1)
        attrs["aggregate_function"] = 0
        attrs["leaf_weights"] = nh.from_array(nh.to_array(attrs["leaf_weights"]) % 0.9 + 0.05,
                                              "w")
    got = ours(model("TreeEnsemble", x, 5, **attrs, post_transform=post), x)
    want = theirs(model("TreeEnsemble", x, 5, **attrs, post_transform=_ORT_POST_V5[post]), x)
    same(got, want, atol=1e-5)


def test_tree_ensemble_single_leaf_tree_and_members():
    # tree 1 is one leaf: its root's two branches name the same leaf (4, not the root's index)
    t = lambda a, name: nh.from_array(np.asarray(a, np.float32), name)  # noqa: E731
    attrs = dict(
        nodes_featureids=[0, 1, 2, 0],
        nodes_modes=nh.from_array(np.array([6, 0, 6, 0], np.uint8), "m"),
        nodes_splits=t([0.0, 0.5, -0.25, 0.0], "s"),
        nodes_truenodeids=[1, 0, 2, 4], nodes_trueleafs=[0, 1, 1, 1],
        nodes_falsenodeids=[2, 1, 4, 4], nodes_falseleafs=[0, 1, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0, 0],
        membership_values=t([0.0, 2.0, np.nan, 1.0, -1.0, 3.0], "mv"),  # last NaN left out
        leaf_targetids=[0, 1, 0, 1, 1], leaf_weights=t([1.5, -2.0, 4.0, 10.0, 0.25], "w"),
        tree_roots=[0, 3], n_targets=2)
    x = np.array([[0, 0, 1], [2, 9, 3], [1, 0.1, -1], [5, 0.9, 0], [np.nan, 0, np.nan],
                  [1, 0, np.nan]], np.float32)
    check(model("TreeEnsemble", x, 5, **attrs), x)


def test_member_sets_compare_by_equality():
    # one member node {-1, 1, 2, 3, 4} (NaN goes true) against the same test as an opset-3
    # chain of BRANCH_EQ nodes, which onnxruntime evaluates by equality
    vals = [-1.0, 1.0, 2.0, 3.0, 4.0]
    t = lambda a, name: nh.from_array(np.asarray(a, np.float32), name)  # noqa: E731
    v5 = dict(nodes_featureids=[0], nodes_modes=nh.from_array(np.array([6], np.uint8), "m"),
              nodes_splits=t([0.0], "s"), nodes_truenodeids=[0], nodes_trueleafs=[1],
              nodes_falsenodeids=[1], nodes_falseleafs=[1], nodes_missing_value_tracks_true=[1],
              membership_values=t(vals + [np.nan], "mv"), leaf_targetids=[0, 0],
              leaf_weights=t([1.0, -1.0], "w"), tree_roots=[0], n_targets=1)
    k = len(vals)
    v3 = dict(nodes_treeids=[0] * (k + 2), nodes_nodeids=list(range(k + 2)),
              nodes_featureids=[0] * (k + 2), nodes_values=vals + [0.0, 0.0],
              nodes_modes=["BRANCH_EQ"] * k + ["LEAF"] * 2,
              nodes_truenodeids=[k] * k + [0, 0], nodes_falsenodeids=list(range(1, k)) + [k + 1,
                                                                                       0, 0],
              nodes_missing_value_tracks_true=[1] * k + [0, 0], target_treeids=[0, 0],
              target_nodeids=[k, k + 1], target_ids=[0, 0], target_weights=[1.0, -1.0],
              n_targets=1)
    x = np.array([[v] for v in (1, 1.5, -1.5, 2.5, 0.99, -1, 4, 4.5, np.nan, 0, 3.0001)],
                 np.float32)
    got = ours(model("TreeEnsemble", x, 5, **v5), x)
    same(got, theirs(model("TreeEnsembleRegressor", x, 3, **v3), x))
    assert got[0][:4, 0].tolist() == [1.0, -1.0, -1.0, -1.0]


# ---- batches and threads ---------------------------------------------------------------------

@pytest.mark.parametrize("rows, n_trees, depth, thin, full", [
    (1, 60, 9, False, 0.0), (2000, 60, 9, False, 0.0), (3, 250, 60, True, 0.0),
    (1, 40, 5, False, 1.0), (500, 40, 5, False, 1.0), (300, 40, 5, False, 0.5),
    (100, 60, 9, False, 0.5)])
def test_batches_and_threads(rows, n_trees, depth, thin, full):
    """Batch 1, large batches (rows split over two threads), fewer rows (trees split over two
    threads; a few rows through many deep trees walk row by row), trees whose leaves are all
    at one depth (walked in lockstep) or not: onnxruntime's scores, and the same bits at one
    thread."""
    fr = Forest(120 + rows, n_trees=n_trees, depth=depth, n_features=12, modes=["BRANCH_LT"],
                n_targets=3, missing=0.5, thin=thin, full=full)
    x = fr.x(rows, nan=0.02)
    for op, attrs in (("TreeEnsembleRegressor", fr.v3(False)),
                      ("TreeEnsembleClassifier", fr.v3(True) | {
                          "classlabels_int64s": [0, 1, 2], "post_transform": "SOFTMAX"})):
        m = model(op, x, 3, **attrs)
        two = ours(m, x, threads=2)
        same(two, theirs(m, x), rtol=1e-5, atol=1e-5)
        for a, b in zip(two, ours(m, x, threads=1)):
            np.testing.assert_array_equal(a, b)


def test_one_dimensional_input_is_one_row():
    fr = Forest(130, n_features=5, n_targets=2)
    x = fr.x(1)
    m = model("TreeEnsembleRegressor", x, 3, **fr.v3(False))
    got = ours(model("TreeEnsembleRegressor", x[0], 3, **fr.v3(False)), x[0])
    same(got, theirs(m, x))


# ---- bad attributes and inputs ---------------------------------------------------------------

def _small(**over) -> dict:
    a = dict(nodes_treeids=[0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 0, 1, 2],
             nodes_featureids=[0, 0, 0, 1, 0, 0], nodes_values=[0.5, 0.0, 0.0, 0.0, 0.0, 0.0],
             nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"] * 2,
             nodes_truenodeids=[1, 0, 0, 1, 0, 0], nodes_falsenodeids=[2, 0, 0, 2, 0, 0],
             target_treeids=[0, 0, 1, 1], target_nodeids=[1, 2, 1, 2], target_ids=[0, 0, 0, 0],
             target_weights=[0.1, 0.2, 0.3, 0.4], n_targets=1)
    a.update(over)
    return {k: v for k, v in a.items() if v is not None}


X3 = np.zeros((2, 3), np.float32)


@pytest.mark.parametrize("over, words", [
    (dict(nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF", "BRANCH_XX", "LEAF", "LEAF"]),
     "nodes_modes"),
    (dict(nodes_featureids=[0, 0, 0]), "nodes_featureids"),
    (dict(nodes_values=[0.5]), "nodes_values"),
    (dict(nodes_nodeids=[0, 1, 1, 0, 1, 2]), "given twice"),
    (dict(nodes_truenodeids=[1, 0, 0, 7, 0, 0]), "nodes_truenodeids"),
    (dict(nodes_falsenodeids=[0, 0, 0, 2, 0, 0]), "nodes_falsenodeids"),
    (dict(nodes_modes=["BRANCH_LEQ"] * 3 + ["BRANCH_LEQ", "LEAF", "LEAF"],
          nodes_truenodeids=[1, 2, 0, 1, 0, 0], nodes_falsenodeids=[2, 0, 1, 2, 0, 0]), "cycle"),
    (dict(nodes_featureids=[-1, 0, 0, 1, 0, 0]), "nodes_featureids"),
    (dict(nodes_featureids=[2**40, 0, 0, 1, 0, 0]), "nodes_featureids"),
    (dict(nodes_featureids=[0, 2**33, 0, 1, 0, 0]), "nodes_featureids"),
    (dict(target_ids=[0, 0, 0, 1]), "target_ids"),
    (dict(target_nodeids=[1, 2, 1, 9]), "target_nodeids"),
    (dict(target_weights=[0.1, 0.2]), "target_weights"),
    (dict(n_targets=None), "n_targets"),
    (dict(aggregate_function="MEDIAN"), "aggregate_function"),
    (dict(post_transform="EXP"), "post_transform"),
    (dict(base_values=[1.0, 2.0]), "base_values"),
])
def test_bad_regressor_attributes(over, words):
    msg = build_error(model("TreeEnsembleRegressor", X3, 3, **_small(**over)))
    assert "TreeEnsembleRegressor" in msg and words in msg, msg


def test_bad_as_tensor_and_classifier_attributes():
    both = _small(nodes_values_as_tensor=nh.from_array(np.zeros(6), "v"))
    assert "nodes_values_as_tensor" in build_error(model("TreeEnsembleRegressor", X3, 3, **both))
    cls = {("class" + k[6:] if k.startswith("target") else k): v for k, v in _small().items()
           if k != "n_targets"}
    for extra, words in (({}, "classlabels"),
                         ({"classlabels_int64s": [1, 2], "classlabels_strings": ["a", "b"]},
                          "both given"),
                         ({"classlabels_int64s": [1, 2, 3], "base_values": [0.0, 1.0]},
                          "base_values")):
        msg = build_error(model("TreeEnsembleClassifier", X3, 3, **cls, **extra))
        assert "TreeEnsembleClassifier" in msg and words in msg, msg


def test_bad_tree_ensemble_attributes():
    fr = Forest(140, n_trees=2, member=True, modes=MODES, grid=1.0)
    x = fr.x(2)
    good = fr.v5(np.float32)
    cases = [(dict(tree_roots=[0, 99]), "tree_roots"),
             (dict(nodes_truenodeids=[999] * len(good["nodes_truenodeids"])),
              "nodes_truenodeids"),
             (dict(leaf_targetids=[5] * len(good["leaf_targetids"])), "leaf_targetids"),
             (dict(nodes_missing_value_tracks_true=[1]), "nodes_missing_value_tracks_true"),
             (dict(aggregate_function=7), "aggregate_function"),
             (dict(membership_values=nh.from_array(np.array([1.0, np.nan] * 40, np.float32),
                                                   "mv")), "membership_values")]
    for over, words in cases:
        msg = build_error(model("TreeEnsemble", x, 5, **(good | over)))
        assert "TreeEnsemble" in msg and words in msg, msg
    # a cycle through the true branches of two interior nodes
    t = lambda a, name: nh.from_array(np.asarray(a, np.float32), name)  # noqa: E731
    cyc = dict(nodes_featureids=[0, 0], nodes_modes=nh.from_array(np.zeros(2, np.uint8), "m"),
               nodes_splits=t([0, 0], "s"), nodes_truenodeids=[1, 0], nodes_trueleafs=[0, 0],
               nodes_falsenodeids=[0, 0], nodes_falseleafs=[1, 1], leaf_targetids=[0],
               leaf_weights=t([1.0], "w"), tree_roots=[0], n_targets=1)
    assert "cycle" in build_error(model("TreeEnsemble", x, 5, **cyc))


def test_odd_layouts_as_onnxruntime():
    """A tree's nodes in two runs of nodes_treeids count as two trees (onnxruntime starts a
    tree wherever the id changes: AVERAGE divides by 3 here); weights on an interior node are
    ignored (old onnxmltools wrote some)."""
    x = np.array([[0.2, -1, 0], [0.9, 1, 0], [0.7, -1, 0]], np.float32)
    runs = dict(nodes_treeids=[0, 0, 1, 1, 1, 0], nodes_nodeids=[0, 1, 0, 1, 2, 2],
                nodes_modes=["BRANCH_LEQ", "LEAF", "BRANCH_LEQ", "LEAF", "LEAF", "LEAF"],
                nodes_featureids=[0, 0, 1, 0, 0, 0], nodes_truenodeids=[1, 0, 1, 0, 0, 0],
                nodes_falsenodeids=[2, 0, 2, 0, 0, 0], aggregate_function="AVERAGE")
    check(model("TreeEnsembleRegressor", x, 3, **_small(**runs)), x)
    interior = _small(target_treeids=[0, 0, 1, 1, 0], target_nodeids=[1, 2, 1, 2, 0],
                      target_ids=[0, 0, 0, 0, 0], target_weights=[0.1, 0.2, 0.3, 0.4, 100.0])
    check(model("TreeEnsembleRegressor", x, 3, **interior), x)


def test_missing_value_flags_other_than_one_are_zero():
    # onnxruntime tests nodes_missing_value_tracks_true for 1 exactly
    x = np.array([[np.nan, np.nan, 0.0], [0.1, -1.0, 0.0]], np.float32)
    for flags in ([1, 0, 0, 1, 0, 0], [2, 0, 0, -1, 0, 0]):
        check(model("TreeEnsembleRegressor", x, 3,
                    **_small(nodes_missing_value_tracks_true=flags)), x)


def test_too_few_input_columns_is_a_run_time_error():
    m = model("TreeEnsembleRegressor", X3, 3, n_features=None, **_small())
    f, node = factory(m)
    kernel = f(node, ProviderContext())
    with pytest.raises(ValueError, match="feature 1 .* 1 columns"):
        kernel(np.zeros((4, 1), np.float32))
    assert kernel(np.zeros((4, 2), np.float32)).shape == (4, 1)


def test_without_the_native_module(tmp_path):
    """ONNXPLEX_MLAS_NATIVE=0: the opset-1/3 ops are declined to the onnx reference fallback,
    TreeEnsemble runs on the numpy walker; both still answer."""
    fr = Forest(150, n_trees=3, n_targets=2)
    x = fr.x(20, nan=0)
    paths = []
    for op, opset, attrs in (("TreeEnsembleRegressor", 3, fr.v3(False)),
                             ("TreeEnsemble", 5, fr.v5(np.float32))):
        path = tmp_path / f"{op}.onnx"
        path.write_bytes(model(op, x, opset, **attrs))
        paths.append(str(path))
    np.save(tmp_path / "x.npy", x)
    code = (
        "import sys, numpy as np, onnxplex\n"
        "from onnxplex.providers.cpu_mlas import _native\n"
        "assert _native.native() is None\n"
        "x = np.load(sys.argv[1])\n"
        "for i, p in enumerate(sys.argv[2:]):\n"
        "    s = onnxplex.InferenceSession(p, providers=['cpu_mlas'])\n"
        "    np.save(sys.argv[1][:-4] + f'_{i}.npy', s.run(None, {'x': x})[0])\n")
    env = {**os.environ, "ONNXPLEX_MLAS_NATIVE": "0"}
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "x.npy"), *paths], env=env,
                   check=True, timeout=120)
    for i, path in enumerate(paths):
        got = np.load(tmp_path / f"x_{i}.npy")
        np.testing.assert_allclose(got, theirs(Path(path).read_bytes(), x)[0], rtol=1e-5,
                                   atol=1e-6)


# ---- converter output ------------------------------------------------------------------------

def _zoo():
    """benchmarks/classical_zoo.py, for its HistGradientBoosting conversion shim."""
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "classical_zoo.py"
    spec = importlib.util.spec_from_file_location("onnxplex_classical_zoo_trees", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _data(kind: str):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    score = x[:, 0] * 1.5 - x[:, 1] + 0.5 * x[:, 2] * x[:, 3]
    if kind == "reg":
        return x, score + 0.1 * rng.standard_normal(300)
    if kind == "bin":
        return x, (score > 0).astype(np.int64)
    return x, np.digitize(score, [-1.0, 0.5])


SKLEARN = {
    "decision_tree": ("tree", "DecisionTree", dict(max_depth=6)),
    "random_forest": ("ensemble", "RandomForest", dict(n_estimators=15, max_depth=6)),
    "extra_trees": ("ensemble", "ExtraTrees", dict(n_estimators=15, max_depth=6)),
    "gradient_boosting": ("ensemble", "GradientBoosting", dict(n_estimators=15, max_depth=3)),
    "hist_gradient_boosting": ("ensemble", "HistGradientBoosting", dict(max_iter=15)),
}


def _compare_converted(m: onnx.ModelProto, x: np.ndarray) -> None:
    b = m.SerializeToString()
    name = m.graph.input[0].name
    xt = x[:100].copy()
    xt[::9, 1] = np.nan  # missing values: converters' NaN directions
    for batch in (xt[:1], xt):
        same(ours(b, batch, name=name), theirs(b, batch, name=name), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["bin", "multi", "reg"])
@pytest.mark.parametrize("name", list(SKLEARN))
def test_sklearn_converted(name, kind):
    pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    import importlib

    module, cls, kw = SKLEARN[name]
    est = getattr(importlib.import_module(f"sklearn.{module}"),
                  cls + ("Regressor" if kind == "reg" else "Classifier"))(random_state=0, **kw)
    x, y = _data(kind)
    est.fit(x, y)
    options = None if kind == "reg" else {id(est): {"zipmap": False}}
    with warnings.catch_warnings(), _zoo()._bool_ints_as_ints():
        warnings.simplefilter("ignore")
        m = skl2onnx.to_onnx(est, x[:1], options=options)
    assert any(n.op_type.startswith("TreeEnsemble") for n in m.graph.node)
    _compare_converted(m, x)


@pytest.mark.parametrize("kind", ["bin", "multi", "reg"])
@pytest.mark.parametrize("library", ["lightgbm", "xgboost"])
def test_boosting_libraries_converted(library, kind):
    lib = pytest.importorskip(library)
    onnxmltools = pytest.importorskip("onnxmltools")
    from onnxmltools.convert.common.data_types import FloatTensorType

    x, y = _data(kind)
    types = [("input", FloatTensorType([None, x.shape[1]]))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if library == "lightgbm":
            cls = lib.LGBMRegressor if kind == "reg" else lib.LGBMClassifier
            est = cls(n_estimators=25, verbose=-1, random_state=0).fit(x, y)
            kw = {} if kind == "reg" else {"zipmap": False}
            m = onnxmltools.convert_lightgbm(est, initial_types=types, **kw)
        else:
            cls = lib.XGBRegressor if kind == "reg" else lib.XGBClassifier
            est = cls(n_estimators=25, max_depth=4, n_jobs=1, random_state=0).fit(x, y)
            m = onnxmltools.convert_xgboost(est, initial_types=types)
    assert "ZipMap" not in [n.op_type for n in m.graph.node]
    _compare_converted(m, x)


# ---- the native resolution of opset-1/3 node lists (tree_v3_nodes) ---------------------------

def _relaid(a: dict, gapped: bool) -> dict:
    """_small's attributes as converters lay them out (each tree's nodes 0, 1, ... in order)
    or, gapped, with tree ids 7 and 2, node ids 10 k + 3 and each tree's nodes after its root
    reversed (the any-order path)."""
    if not gapped:
        return a
    node, tree = (lambda k: 10 * k + 3), (lambda t: 7 - 5 * t)
    a = dict(a)
    order = [0, 2, 1, 3, 5, 4][:len(a["nodes_treeids"])]
    for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values",
              "nodes_modes", "nodes_truenodeids", "nodes_falsenodeids"):
        if len(a[k]) == len(order):
            a[k] = [a[k][i] for i in order]
    for k, f in (("nodes_nodeids", node), ("nodes_truenodeids", node),
                 ("nodes_falsenodeids", node), ("target_nodeids", node),
                 ("nodes_treeids", tree), ("target_treeids", tree)):
        if k in a:
            a[k] = [f(v) for v in a[k]]
    return a


@pytest.mark.parametrize("gapped", [False, True])
@pytest.mark.parametrize("over, dense_msg, gapped_msg", [
    (dict(nodes_nodeids=[0, 1, 1, 0, 1, 2]), "nodes_nodeids: node 1 of tree 0 is given twice",
     "nodes_nodeids: node 13 of tree 7 is given twice"),
    (dict(nodes_truenodeids=[1, 0, 0, 7, 0, 0]),
     "nodes_truenodeids: node 0 of tree 1 points to a node that does not exist (7)",
     "nodes_truenodeids: node 3 of tree 2 points to a node that does not exist (73)"),
    (dict(nodes_falsenodeids=[0, 0, 0, 2, 0, 0]),
     "nodes_falsenodeids: node 0 of tree 0 points to itself (0)",
     "nodes_falsenodeids: node 3 of tree 7 points to itself (3)"),
    (dict(nodes_truenodeids=[0, 0, 0, 1, 0, 0]),
     "nodes_truenodeids: node 0 of tree 0 points to itself (0)",
     "nodes_truenodeids: node 3 of tree 7 points to itself (3)"),
    # every true child is checked before the false ones; duplicates before both
    (dict(nodes_truenodeids=[1, 0, 0, 9, 0, 0], nodes_falsenodeids=[9, 0, 0, 2, 0, 0]),
     "nodes_truenodeids: node 0 of tree 1 points to a node that does not exist (9)",
     "nodes_truenodeids: node 3 of tree 2 points to a node that does not exist (93)"),
    (dict(nodes_nodeids=[0, 1, 2, 0, 2, 2], nodes_truenodeids=[9, 0, 0, 1, 0, 0]),
     "nodes_nodeids: node 2 of tree 1 is given twice",
     "nodes_nodeids: node 23 of tree 2 is given twice"),
    (dict(nodes_featureids=[0, 0, 0, -1, 0, 0]), "nodes_featureids: feature id -1 out of range",
     "nodes_featureids: feature id -1 out of range"),
    (dict(nodes_featureids=[0, 0, 2**31 - 1, 1, 0, 0]),  # a leaf's positive id counts
     "nodes_featureids: feature id 2147483647 out of range",
     "nodes_featureids: feature id 2147483647 out of range"),
    # a feature id's error comes before the weights' list lengths
    (dict(nodes_featureids=[0, 0, 0, 2**40, 0, 0], target_nodeids=[1, 2, 1]),
     "nodes_featureids: feature id 1099511627776 out of range",
     "nodes_featureids: feature id 1099511627776 out of range"),
    (dict(nodes_featureids=[0, 0, 0, 1, 0, 0], target_nodeids=[1, 2, 1]),
     "target_nodeids: has 3 entries, expected 4", "target_nodeids: has 3 entries, expected 4"),
    (dict(target_nodeids=None), "target_nodeids: is required", "target_nodeids: is required"),
    (dict(target_ids=None), "target_ids: is required", "target_ids: is required"),
    (dict(target_nodeids=[1, 2, 1, 9]), "target_nodeids: node 9 of tree 1 does not exist",
     "target_nodeids: node 93 of tree 2 does not exist"),
    (dict(target_treeids=[0, 0, 1, 4]), "target_nodeids: node 2 of tree 4 does not exist",
     "target_nodeids: node 23 of tree -13 does not exist"),
    # the weights' nodes, then n_targets, then the weights' ids
    (dict(target_nodeids=[1, 2, 1, 9], n_targets=None),
     "target_nodeids: node 9 of tree 1 does not exist",
     "target_nodeids: node 93 of tree 2 does not exist"),
    (dict(target_ids=[0, 0, 3, 0], n_targets=None), "n_targets: is required and must be positive",
     "n_targets: is required and must be positive"),
    (dict(target_ids=[0, 0, 3, 0]), "target_ids: ids must be in [0, 1)",
     "target_ids: ids must be in [0, 1)"),
])
def test_resolution_errors_name_nodes_by_their_ids(over, dense_msg, gapped_msg, gapped):
    msg = build_error(model("TreeEnsembleRegressor", X3, 3, **_relaid(_small(**over), gapped)))
    assert msg == "TreeEnsembleRegressor: " + (gapped_msg if gapped else dense_msg)


def test_resolution_accepts_what_it_ignores():
    """A leaf's negative feature id, a leaf's children, a weight on an interior node: the
    scores of the model without them (onnxruntime refuses a leaf's child out of range)."""
    x = np.array([[0.2, -1, 0], [0.9, 1, 0]], np.float32)
    want = theirs(model("TreeEnsembleRegressor", x, 3, **_small()), x)
    for gapped in (False, True):
        a = _small(nodes_featureids=[0, -3, 0, 1, 0, 0], nodes_truenodeids=[1, 99, 0, 1, 5, 0],
                   target_treeids=[0, 0, 1, 1, 1], target_nodeids=[1, 2, 1, 2, 0],
                   target_ids=[0, 0, 0, 0, 0], target_weights=[0.1, 0.2, 0.3, 0.4, 50.0])
        same(ours(model("TreeEnsembleRegressor", x, 3, **_relaid(a, gapped)), x), want)


@pytest.mark.parametrize("layout", ["dense", "gapped_trees", "any"])
@pytest.mark.parametrize("classifier", [False, True])
def test_layouts_resolve_as_onnxruntime(layout, classifier):
    """Each tree's nodes 0, 1, ... in order (the arithmetic path), with tree ids out of order
    and apart, and in any order with any ids (the search path); weights in any order, several
    a leaf, on several targets."""
    fr = Forest(150 + classifier, n_trees=6, depth=5, n_targets=3, weights=(1, 3),
                modes=MODES)
    x = fr.x(64)
    a = fr.v3(classifier)
    p = "class" if classifier else "target"
    if layout != "any":
        # renumber each tree's nodes 0, 1, ... in the order listed
        ids = {}
        for i, (t, k) in enumerate(zip(a["nodes_treeids"], a["nodes_nodeids"])):
            ids[t, k] = i - a["nodes_treeids"].index(t)
        trees = a["nodes_treeids"]
        a["nodes_nodeids"] = [ids[t, k] for t, k in zip(trees, a["nodes_nodeids"])]
        for side in ("nodes_truenodeids", "nodes_falsenodeids"):
            a[side] = [ids.get((t, k), 0) for t, k in zip(trees, a[side])]
        a[f"{p}_nodeids"] = [ids[t, k] for t, k in zip(a[f"{p}_treeids"], a[f"{p}_nodeids"])]
        if layout == "gapped_trees":
            remap = {t: 100 - 7 * t for t in set(trees)}
            a["nodes_treeids"] = [remap[t] for t in trees]
            a[f"{p}_treeids"] = [remap[t] for t in a[f"{p}_treeids"]]
    else:
        # node ids one permutation over all the trees (onnxruntime takes ids below the node
        # count only)
        perm = np.random.default_rng(7).permutation(len(a["nodes_nodeids"]))
        ids = {(t, k): int(perm[i]) for i, (t, k) in enumerate(zip(a["nodes_treeids"],
                                                                     a["nodes_nodeids"]))}
        trees = a["nodes_treeids"]
        for side in ("nodes_nodeids", "nodes_truenodeids", "nodes_falsenodeids"):
            a[side] = [ids.get((t, k), 0) for t, k in zip(trees, a[side])]
        a[f"{p}_nodeids"] = [ids[t, k] for t, k in zip(a[f"{p}_treeids"], a[f"{p}_nodeids"])]
    if classifier:
        a["classlabels_int64s"] = [3, 5, 7]
        a["post_transform"] = "SOFTMAX"
    check(model("TreeEnsembleClassifier" if classifier else "TreeEnsembleRegressor", x, 3,
                **a), x)


@pytest.mark.parametrize("labels, post", [([5], "NONE"), ([0], "LOGISTIC"), (["only"], "NONE")])
def test_a_classifier_of_one_class_predicts_it(labels, post):
    """A forest trained on a single label (skl2onnx converts it with one class label): every
    row gets that label and its score (post-transformed). onnxruntime reads a second class
    that is not there: it labels rows 1 or 0 whatever the class (right only when the class is
    1, as in skl2onnx's own test), skips the post transform, and aborts the process on a
    string label; sklearn predicts the class. Refused before."""
    import onnx.helper as oh
    from onnx import TensorProto

    import onnxplex

    strings = isinstance(labels[0], str)
    node = oh.make_node(
        "TreeEnsembleClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
        class_ids=[0, 0], class_nodeids=[1, 2], class_treeids=[0, 0], class_weights=[0.7, -0.3],
        nodes_falsenodeids=[2, 0, 0], nodes_featureids=[0, 0, 0], nodes_hitrates=[1.0] * 3,
        nodes_missing_value_tracks_true=[0] * 3, nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
        nodes_nodeids=[0, 1, 2], nodes_treeids=[0, 0, 0], nodes_truenodeids=[1, 0, 0],
        nodes_values=[0.5, 0.0, 0.0], post_transform=post,
        **{"classlabels_strings" if strings else "classlabels_int64s": labels})
    g = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [None, 1])],
                      [oh.make_tensor_value_info("label", TensorProto.STRING if strings
                                                 else TensorProto.INT64, [None]),
                       oh.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 1])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("ai.onnx.ml", 3)])
    label, scores = onnxplex.InferenceSession(m.SerializeToString()).run(
        None, {"x": np.array([[0.2], [0.9]], np.float32)})
    assert label.tolist() == labels * 2
    raw = np.array([[0.7], [-0.3]], np.float32)
    want = 1 / (1 + np.exp(-raw)) if post == "LOGISTIC" else raw
    np.testing.assert_allclose(scores, want, rtol=1e-6)
