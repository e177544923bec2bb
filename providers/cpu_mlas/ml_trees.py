"""ai.onnx.ml tree ensembles on the native evaluator (``_mlas_native.tree_ensemble``, see
src/tree_ensemble.h): TreeEnsembleClassifier and TreeEnsembleRegressor (ml opsets 1 and 3) and
TreeEnsemble (ml opset 5), with onnxruntime's numerics.

The kernel factory reads and checks the attributes once (a bad one is a ValueError naming
it), resolves them into one node list (children as indices, leaves' weights gathered, every
comparison reduced to ``<=``, ``<`` or ``==`` by swapping children, BRANCH_MEMBER unrolled
into equalities) and builds the native ensemble, which checks the indices again and refuses
cycles. For opsets 1 and 3 the resolution is native too (``_mlas_native.tree_v3_nodes``: one
call on the attribute arrays, which returns what it refuses as a code for the message to be
worded here); TreeEnsemble's is numpy. The kernel is the ensemble's ``run`` itself: one
native call that allocates the outputs (and hands back string labels). Without the native
module the opset-1/3 ops are declined (the onnx reference fallback runs them) and
TreeEnsemble keeps the numpy walker of ``ml.py``.

Types as onnxruntime's: thresholds, leaf weights and sums in float for float and integer inputs
(integers compared as float), in double for double inputs; also in double here for a float
input given a double ``*_as_tensor`` attribute, which onnxruntime refuses. Opset-1/3 outputs
are float; TreeEnsemble's have the input's type. Where onnxruntime 1.32 departs from the ONNX
specification the specification is followed: TreeEnsemble's ``post_transform`` 1 is SOFTMAX
and 2 LOGISTIC (onnxruntime swaps them), BRANCH_MEMBER tests equality (onnxruntime casts x to
int32 for some sets: 1.5 is in {-1, 1, 2, 3, 4} there), and an input vector is one row of all
its features (onnxruntime reads one feature of it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import TensorProto

from onnxplex import NodeView, ProviderContext

from . import _native
from ._ml_common import text as _text
from ._registry import op

ML = "ai.onnx.ml"

# ONNX mode names (opsets 1/3) and codes (opset 5) -> one code: 0 LEQ 1 LT 2 GTE 3 GT 4 EQ 5 NEQ
# (6 MEMBER, opset 5), 7 LEAF.
_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4,
          "BRANCH_NEQ": 5, "LEAF": 7}
_MEMBER, _LEAF = 6, 7
# The native comparison (tree_ensemble.h TreeCmp) and whether the children swap, per code.
_CMP = np.array([0, 1, 1, 0, 2, 2, 2, 3], np.uint8)
_SWAP = np.array([0, 0, 1, 1, 0, 1, 0, 0], bool)
# onnxruntime's codes (ml_common.h), which the native side takes.
_AGGREGATES = {"AVERAGE": 0, "SUM": 1, "MIN": 2, "MAX": 3}
_POSTS = {"NONE": 0, "LOGISTIC": 1, "SOFTMAX": 2, "SOFTMAX_ZERO": 3, "PROBIT": 4}
# TreeEnsemble (opset 5) post_transform: NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT.
_POSTS_V5 = (0, 2, 1, 3, 4)

_MAX_FEATURE = 2**31 - 1  # feature ids are int32 in the native ensemble

Kernel = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]


@dataclass
class _Trees:
    """The resolved node list the native ensemble is built from (see tree_ensemble.h)."""

    cmp: np.ndarray           # uint8 TreeCmp
    nan_true: np.ndarray      # uint8
    feature: np.ndarray       # int64
    value: np.ndarray         # float64: threshold, or a leaf's single-target value
    true_child: np.ndarray    # int64
    false_child: np.ndarray   # int64
    weight_start: np.ndarray  # int64 [n + 1]
    weight_target: np.ndarray  # int64
    weight_value: np.ndarray  # float64
    roots: np.ndarray         # int64
    n_features: int
    n_targets: int
    aggregate: int = 1
    post: int = 0
    base: np.ndarray = field(default_factory=lambda: np.zeros(0))
    in_double: bool = False
    out_double: bool = False
    classifier: bool = False
    binary_case: bool = False
    weights_all_positive: bool = True
    class_labels: np.ndarray | None = None

    def build(self, op: str, threads: int, class_names: Sequence[str] | None) -> Any:
        """The native ensemble (its ``run(x)`` the kernel); the checks it makes (cycles) raise
        a ValueError naming ``op``."""
        try:
            return _native.native().tree_ensemble(
                self.cmp, self.nan_true, self.feature, self.value, self.true_child,
                self.false_child, self.weight_start, self.weight_target, self.weight_value,
                self.roots, self.n_targets, self.aggregate, self.post, self.base,
                classifier=self.classifier, binary_case=self.binary_case,
                weights_all_positive=self.weights_all_positive,
                class_labels=self.class_labels, class_names=class_names,
                n_features=self.n_features, in_double=self.in_double,
                out_double=self.out_double, threads=threads)
        except ValueError as e:
            raise ValueError(f"{op}: {e}") from None


class _Attrs:
    """A node's attributes read and checked, errors naming the op and the attribute."""

    def __init__(self, node: NodeView) -> None:
        self.node = node
        self.op = node.op_type

    def error(self, name: str, msg: str) -> ValueError:
        return ValueError(f"{self.op}: {name}: {msg}")

    def _array(self, name: str) -> tuple[np.ndarray | None, bool]:
        """The attribute's values as an array (``None`` when absent; long lists as loaded,
        see ``NodeView.attr_array``), and whether it is a tensor attribute."""
        arr = self.node.arrays.get(name)
        if arr is not None:
            return arr, False
        v = self.node.attr(name)
        if v is None or isinstance(v, np.ndarray):
            return v, v is not None
        return self.node.attr_array(name), False

    def present(self, name: str) -> bool:
        v, _ = self._array(name)
        return v is not None and v.size > 0

    def ints(self, name: str, n: int | None = None, *, required: bool = False) -> np.ndarray:
        v, _ = self._array(name)
        if v is None or v.size == 0:
            if required and n != 0:
                raise self.error(name, "is required")
            return np.zeros(0, np.int64)
        a = v.astype(np.int64, copy=False).reshape(-1)
        if n is not None and a.size != n:
            raise self.error(name, f"has {a.size} entries, expected {n}")
        return a

    def floats(self, name: str, n: int | None = None, *, required: bool = False
               ) -> tuple[np.ndarray, bool]:
        """A FLOATS attribute, or a float/double tensor one, as float64; and whether it is a
        double tensor."""
        a, tensor = self._array(name)
        if a is None or a.size == 0:
            if required and n != 0:
                raise self.error(name, "is required")
            return np.zeros(0), False
        if tensor and a.dtype.kind != "f":
            raise self.error(name, f"must be a float or double tensor, not {a.dtype}")
        double = tensor and a.dtype == np.float64
        a = a.astype(np.float64).reshape(-1)
        if n is not None and a.size != n:
            raise self.error(name, f"has {a.size} entries, expected {n}")
        return a, double

    def either(self, name: str, n: int | None = None) -> tuple[np.ndarray, bool]:
        """``name`` or ``name_as_tensor`` (not both): values and whether they are double."""
        plain, tensor = self.present(name), self.present(name + "_as_tensor")
        if plain and tensor:
            raise self.error(name, f"{name} and {name}_as_tensor are both given")
        return self.floats(name + "_as_tensor" if tensor else name, n)

    def code(self, name: str, table: dict[str, int], default: str) -> int:
        v = self.node.attr(name)
        s = default if v is None else (v.decode() if isinstance(v, bytes) else str(v))
        if s not in table:
            raise self.error(name, f"unknown value {s!r} (one of {', '.join(table)})")
        return table[s]


def _rewrite(modes: np.ndarray, missing: np.ndarray, t: np.ndarray, f: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """ONNX modes to the native comparisons: GTE, GT and NEQ take the complement comparison
    with their children swapped; GTE and GT flip their NaN direction too (a NaN fails every
    comparison but NEQ, which the swap makes go to its true child already)."""
    swap = _SWAP[modes]
    nan = missing == 1  # (onnxruntime tests for 1: any other value is 0)
    nan = np.where((modes == 2) | (modes == 3), ~nan, nan) & (modes != 5) & (modes != _LEAF)
    return (_CMP[modes], nan.astype(np.uint8), np.where(swap, f, t), np.where(swap, t, f))


def _check_features(a: _Attrs, feats: np.ndarray) -> None:
    if feats.size and (feats.min() < 0 or feats.max() >= _MAX_FEATURE):
        bad = feats[(feats < 0) | (feats >= _MAX_FEATURE)][0]
        raise a.error("nodes_featureids", f"feature id {bad} out of range")


# --------------------------------------------------------------------------------------------
# TreeEnsembleClassifier / TreeEnsembleRegressor (ml opsets 1 and 3)
# --------------------------------------------------------------------------------------------

# resolve_tree_v3's refusals (tree_ensemble.h TreeV3Error)
_E_FEATURE, _E_DUPLICATE, _E_WEIGHT_NODE, _E_WEIGHT_ID = 2, 3, 8, 9
_E_CHILD = {4: ("nodes_truenodeids", False), 5: ("nodes_truenodeids", True),
            6: ("nodes_falsenodeids", False), 7: ("nodes_falsenodeids", True)}


def _v3_error(a: _Attrs, code: int, i: int, nodes: dict[str, np.ndarray], prefix: str,
              n_targets: int) -> ValueError:
    """The ValueError of a refusal of ``tree_v3_nodes``: code and the node's (or weight's)
    index ``i``."""
    tree_ids, node_ids = nodes["tree_ids"], nodes["node_ids"]
    if code == _E_FEATURE:
        return a.error("nodes_featureids", f"feature id {nodes['feature'][i]} out of range")
    if code == _E_DUPLICATE:
        return a.error("nodes_nodeids", f"node {node_ids[i]} of tree {tree_ids[i]} is given "
                       "twice")
    if code in _E_CHILD:
        name, itself = _E_CHILD[code]
        what = "itself" if itself else "a node that does not exist"
        ids = nodes["true_ids" if name == "nodes_truenodeids" else "false_ids"]
        return a.error(name, f"node {node_ids[i]} of tree {tree_ids[i]} points to {what} "
                       f"({ids[i]})")
    if code == _E_WEIGHT_NODE:
        return a.error(f"{prefix}_nodeids", f"node {nodes['w_nodes'][i]} of tree "
                       f"{nodes['w_trees'][i]} does not exist")
    if code == _E_WEIGHT_ID:
        return a.error(f"{prefix}_ids", f"ids must be in [0, {n_targets})")
    return a.error("nodes_modes", f"unknown mode code {nodes['modes'][i]}")


def _n_classes(a: _Attrs, classifier: bool) -> tuple[int, np.ndarray, ValueError | None]:
    """The classes (int labels, empty for string ones) or targets, and the error refusing them
    (raised after the node lists' own)."""
    labels_i = np.zeros(0, np.int64)
    if classifier:
        labels_i = a.ints("classlabels_int64s")
        labels_s = a.node.attr("classlabels_strings") or ()
        if labels_i.size and len(labels_s):
            return 0, labels_i, a.error("classlabels_strings", "classlabels_strings and "
                                        "classlabels_int64s are both given")
        n_targets = len(labels_s) or labels_i.size
        if n_targets < 1:   # (one class is a classifier trained on one label: its scores)
            return 0, labels_i, a.error(
                "classlabels_int64s", "a classifier needs a class label or more "
                "(classlabels_int64s or classlabels_strings)")
        return n_targets, labels_i, None
    n_targets = int(a.node.attr("n_targets") or 0)
    if n_targets <= 0:
        return 0, labels_i, a.error("n_targets", "is required and must be positive")
    return n_targets, labels_i, None


def _v3_trees(a: _Attrs, classifier: bool, in_double: bool) -> _Trees:
    """The node lists read and checked here, resolved natively (``tree_v3_nodes``: node ids to
    indices, weights grouped by leaf, GTE / GT / NEQ rewritten), the errors worded here."""
    modes = a.node.attr_codes("nodes_modes", _MODES)
    if modes is None:
        modes = np.zeros(0, np.int64)
    n = modes.size
    if (modes < 0).any():   # (bytes only from odd files)
        try:
            modes = np.array([_MODES[_text(s)] for s in a.node.attr("nodes_modes")],
                             dtype=np.int64)
        except KeyError as e:
            raise a.error("nodes_modes", f"unknown mode {e.args[0]!r}") from None
    nodes = dict(modes=modes, tree_ids=a.ints("nodes_treeids", n, required=True),
                 node_ids=a.ints("nodes_nodeids", n, required=True),
                 feature=a.ints("nodes_featureids", n, required=True),
                 true_ids=a.ints("nodes_truenodeids", n, required=True),
                 false_ids=a.ints("nodes_falsenodeids", n, required=True))
    values, values_double = a.either("nodes_values", n)
    if values.size != n:
        raise a.error("nodes_values", "is required")
    nodes["values"] = values
    # onnxruntime reads the missing-value flags it has and takes the others as 0
    nodes["missing"] = a.ints("nodes_missing_value_tracks_true")
    if a.present("nodes_hitrates") and a.present("nodes_hitrates_as_tensor"):
        raise a.error("nodes_hitrates", "nodes_hitrates and nodes_hitrates_as_tensor are both "
                      "given")
    resolve = _native.native().tree_v3_nodes
    prefix = "class" if classifier else "target"
    nodes["w_trees"] = a.ints(f"{prefix}_treeids")
    m = nodes["w_trees"].size
    try:
        nodes["w_nodes"] = a.ints(f"{prefix}_nodeids", m, required=True)
        nodes["w_ids"] = a.ints(f"{prefix}_ids", m, required=True)
        nodes["w_values"], w_double = a.either(f"{prefix}_weights", m)
        if nodes["w_values"].size != m:
            raise a.error(f"{prefix}_weights", f"has {nodes['w_values'].size} entries, "
                          f"expected {m}")
    except ValueError:
        # a feature id's error comes first (the first the native resolution reports)
        none = np.zeros(0, np.int64)
        code, i, *_ = resolve(**(nodes | dict(w_trees=none, w_nodes=none, w_ids=none,
                                              w_values=np.zeros(0))))
        if code == _E_FEATURE:
            raise _v3_error(a, code, i, nodes, prefix, 0) from None
        raise
    n_targets, labels_i, refused = _n_classes(a, classifier)
    got = resolve(**nodes, n_targets=n_targets)
    if got[0]:
        raise _v3_error(a, got[0], got[1], nodes, prefix, n_targets)
    if refused is not None:
        raise refused
    (cmp, nan, value, t, f, w_start, w_target, w_value, roots, n_features, binary_case,
     all_positive) = got[2:]

    base, base_double = a.either("base_values")
    if classifier:
        if (base.size > 2) if n_targets == 2 else base.size not in (0, n_targets):
            takes = "1 or 2" if n_targets == 2 else n_targets
            raise a.error("base_values", f"has {base.size} values; a classifier of "
                          f"{n_targets} classes takes 0, {takes}")
    elif base.size not in (0, n_targets):
        raise a.error("base_values", f"has {base.size} values, expected 0 or {n_targets}")

    trees = _Trees(cmp, nan, nodes["feature"], value, t, f, w_start, w_target, w_value, roots,
                   n_features=n_features, n_targets=n_targets, base=base,
                   in_double=in_double or values_double or w_double or base_double)
    if classifier:
        trees.classifier = True
        trees.binary_case = n_targets == 2 and binary_case
        trees.weights_all_positive = all_positive
        trees.class_labels = labels_i if labels_i.size else np.arange(n_targets, dtype=np.int64)
        trees.post = a.code("post_transform", _POSTS, "NONE")
    else:
        trees.aggregate = a.code("aggregate_function", _AGGREGATES, "SUM")
        trees.post = a.code("post_transform", _POSTS, "NONE")
    return trees


# --------------------------------------------------------------------------------------------
# TreeEnsemble (ml opset 5)
# --------------------------------------------------------------------------------------------


def _member_sets(a: _Attrs, count: int) -> tuple[list[np.ndarray], bool]:
    """``membership_values`` split at its NaNs, one set per BRANCH_MEMBER node (the last may
    end without a NaN); and whether the tensor is double."""
    mv, double = a.floats("membership_values")
    bounds = np.flatnonzero(np.isnan(mv))
    if mv.size and (bounds.size == 0 or bounds[-1] != mv.size - 1):
        bounds = np.r_[bounds, mv.size]
    sets = np.split(mv, bounds + 1)[:bounds.size]
    sets = [st[~np.isnan(st)] for st in sets]
    if len(sets) != count:
        raise a.error("membership_values", f"holds {len(sets)} NaN-separated sets for "
                      f"{count} BRANCH_MEMBER nodes")
    if any(st.size == 0 for st in sets):  # onnxruntime refuses them too
        raise a.error("membership_values", "a BRANCH_MEMBER node has an empty set")
    return sets, double


def _v5_trees(a: _Attrs, in_double: bool) -> _Trees:
    modes_t = a.node.attr("nodes_modes")
    if modes_t is None:
        raise a.error("nodes_modes", "is required")
    modes = np.asarray(modes_t).astype(np.int64).reshape(-1)
    n = modes.size
    if ((modes < 0) | (modes > _MEMBER)).any():
        raise a.error("nodes_modes", f"unknown mode {int(modes[(modes < 0) | (modes > 6)][0])}")
    feats = a.ints("nodes_featureids", n, required=True)
    splits, splits_double = a.floats("nodes_splits", n, required=True)
    t_ids = a.ints("nodes_truenodeids", n, required=True)
    t_leaf = a.ints("nodes_trueleafs", n, required=True).astype(bool)
    f_ids = a.ints("nodes_falsenodeids", n, required=True)
    f_leaf = a.ints("nodes_falseleafs", n, required=True).astype(bool)
    missing = a.ints("nodes_missing_value_tracks_true")
    if missing.size not in (0, n):
        raise a.error("nodes_missing_value_tracks_true", f"has {missing.size} entries, "
                      f"expected {n}")
    missing = missing if missing.size else np.zeros(n, np.int64)
    leaf_w, leaf_double = a.floats("leaf_weights", required=True)
    n_leaves = leaf_w.size
    leaf_t = a.ints("leaf_targetids", n_leaves, required=True)
    roots = a.ints("tree_roots", required=True)
    n_targets = int(a.node.attr("n_targets") or 0)
    if n_targets <= 0:
        raise a.error("n_targets", "is required and must be positive")
    if ((leaf_t < 0) | (leaf_t >= n_targets)).any():
        raise a.error("leaf_targetids", f"ids must be in [0, {n_targets})")
    _check_features(a, feats)
    for name, ids, leaf in (("nodes_truenodeids", t_ids, t_leaf),
                            ("nodes_falsenodeids", f_ids, f_leaf)):
        bad = (ids < 0) | np.where(leaf, ids >= n_leaves, ids >= n)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise a.error(name, f"node {i} points to {'leaf' if leaf[i] else 'node'} {ids[i]}, "
                          "out of range")
    if ((roots < 0) | (roots >= n)).any():
        raise a.error("tree_roots", f"roots must be in [0, {n})")
    aggregate = int(a.node.attr("aggregate_function", 1))
    post = int(a.node.attr("post_transform", 0))
    if aggregate not in range(4):
        raise a.error("aggregate_function", f"unknown value {aggregate}")
    if post not in range(5):
        raise a.error("post_transform", f"unknown value {post}")

    # nodes: the interior ones, then the leaves, then the equalities BRANCH_MEMBER unrolls to
    t_child = np.where(t_leaf, t_ids + n, t_ids)
    f_child = np.where(f_leaf, f_ids + n, f_ids)
    values = splits.copy()
    members = np.flatnonzero(modes == _MEMBER)
    extra_feats, extra_vals, extra_t, extra_f, extra_miss = [], [], [], [], []
    mv_double = False
    if members.size:
        # x in {s0, s1, ...}: x == s0, else x == s1, ...
        sets, mv_double = _member_sets(a, members.size)
        nxt = n + n_leaves
        for i, st in zip(members.tolist(), sets):
            modes[i] = 4  # BRANCH_EQ
            values[i] = st[0]
            chain = list(range(nxt, nxt + st.size - 1))
            end = f_child[i]
            if chain:
                f_child[i] = chain[0]
            for j, v in enumerate(st[1:].tolist()):
                extra_feats.append(feats[i])
                extra_vals.append(v)
                extra_t.append(t_child[i])
                extra_f.append(chain[j + 1] if j + 1 < len(chain) else end)
                extra_miss.append(missing[i])
            nxt += len(chain)
    k = len(extra_vals)
    all_modes = np.r_[modes, np.full(n_leaves, _LEAF), np.full(k, 4)]
    cmp, nan, t, f = _rewrite(
        all_modes, np.r_[missing, np.zeros(n_leaves, np.int64), np.asarray(extra_miss, np.int64)],
        np.r_[t_child, np.zeros(n_leaves, np.int64), np.asarray(extra_t, np.int64)],
        np.r_[f_child, np.zeros(n_leaves, np.int64), np.asarray(extra_f, np.int64)])
    total = n + n_leaves + k
    w_start = np.zeros(total + 1, np.int64)
    w_start[n + 1:n + n_leaves + 1] = np.arange(1, n_leaves + 1)
    w_start[n + n_leaves + 1:] = n_leaves
    return _Trees(
        cmp, nan, np.r_[feats, np.zeros(n_leaves, np.int64), np.asarray(extra_feats, np.int64)],
        np.r_[values, leaf_w, np.asarray(extra_vals, np.float64)], t, f, w_start, leaf_t,
        leaf_w, roots,
        n_features=int(max(feats.max(initial=0), 0)) + 1, n_targets=n_targets,
        aggregate=aggregate, post=_POSTS_V5[post],
        in_double=in_double or splits_double or leaf_double or mv_double, out_double=in_double)


# --------------------------------------------------------------------------------------------
# Kernel factories
# --------------------------------------------------------------------------------------------


def _input_double(node: NodeView) -> bool | None:
    """Whether the input is double (None: its type is unknown until the first run)."""
    info = node.input(0)
    et = getattr(info, "elem_type", None) if info is not None else None
    if not et:
        return None
    return et == TensorProto.DOUBLE


def _kernel(op: str, resolve: Callable[[bool], _Trees], double: bool | None, threads: int,
            class_names: Sequence[str] | None) -> Kernel:
    """The per-call function: the native ensemble's ``run`` itself (it allocates the outputs
    and maps string labels). With the input type unknown, an ensemble is built per input type
    on first use."""
    if double is not None:
        return resolve(double).build(op, threads, class_names).run
    built: dict[bool, Any] = {}

    def run(x: np.ndarray) -> Any:
        d = x.dtype == np.float64
        ens = built.get(d)
        if ens is None:
            ens = built.setdefault(d, resolve(d).build(op, threads, class_names))
        return ens.run(x)

    return run


def _needs_native(node: NodeView) -> str | None:
    if _native.native() is None:
        return "the native tree evaluator (_mlas_native) is not built"
    return None


def _make_v3(node: NodeView, ctx: ProviderContext, classifier: bool) -> Kernel:
    a = _Attrs(node)
    double = _input_double(node)
    # checks and errors now, whatever the input type
    trees = _v3_trees(a, classifier, bool(double))
    names = None
    if classifier and node.attr("classlabels_strings"):
        names = tuple(_text(s) for s in node.attr("classlabels_strings"))

    def resolve(d: bool) -> _Trees:
        if d == bool(double):
            return trees
        return _v3_trees(_Attrs(node), classifier, d)

    return _kernel(node.op_type, resolve, double, _native.threads(ctx.intra_op_num_threads),
                   names)


@op("TreeEnsembleClassifier", domain=ML, since=1, predicate=_needs_native)
@op("TreeEnsembleClassifier", domain=ML, since=3, predicate=_needs_native)
def make_tree_ensemble_classifier(node: NodeView, ctx: ProviderContext) -> Kernel:
    """TreeEnsembleClassifier: (labels [N], scores [N, classes] float)."""
    return _make_v3(node, ctx, classifier=True)


@op("TreeEnsembleRegressor", domain=ML, since=1, predicate=_needs_native)
@op("TreeEnsembleRegressor", domain=ML, since=3, predicate=_needs_native)
def make_tree_ensemble_regressor(node: NodeView, ctx: ProviderContext) -> Kernel:
    """TreeEnsembleRegressor: scores [N, n_targets] float."""
    return _make_v3(node, ctx, classifier=False)


@op("TreeEnsemble", domain=ML, since=5)
def make_tree_ensemble(node: NodeView, ctx: ProviderContext) -> Kernel:
    """TreeEnsemble (opset 5): scores [N, n_targets] of the input's type."""
    if _native.native() is None:
        from .ml import make_tree_ensemble as numpy_walker  # noqa: PLC0415 - fallback only

        return numpy_walker(node, ctx)
    double = _input_double(node)
    trees = _v5_trees(_Attrs(node), bool(double))

    def resolve(d: bool) -> _Trees:
        return trees if d == bool(double) else _v5_trees(_Attrs(node), d)

    return _kernel(node.op_type, resolve, double, _native.threads(ctx.intra_op_num_threads),
                   None)
