"""ai.onnx.ml ops: LabelEncoder, ArrayFeatureExtractor, Binarizer, TreeEnsemble."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnxplex import NodeView, ProviderContext

from ._ml_common import probit
from ._ml_common import text as _text
from ._np_helpers import str_guard
from ._registry import op

ML = "ai.onnx.ml"

Kernel = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]


def _str_array(values: Sequence[Any] | np.ndarray) -> np.ndarray:
    flat = [_text(v) for v in np.asarray(values, dtype=object).reshape(-1).tolist()]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out


# --------------------------------------------------------------------------------------------
# LabelEncoder
# --------------------------------------------------------------------------------------------


# up to this many input values a lookup goes through a dict
SMALL_LOOKUP = 32


class _Lookup:
    """Vectorised dictionary lookup: sorted keys + searchsorted (NaN keys match NaN inputs);
    up to SMALL_LOOKUP values through a dict of the same pairs.

    A repeated key keeps its last value (``first=False``: a map assigned in order, as
    onnxruntime's LabelEncoder-1 and CategoryMapper build theirs) or its first
    (``first=True``: onnxruntime's LabelEncoder 2 and 4 ``emplace`` their pairs)."""

    def __init__(self, keys: np.ndarray, values: np.ndarray, default: Any, *,
                 first: bool = False) -> None:
        self.is_str = keys.dtype == object
        self.nan_value = None
        if keys.dtype.kind == "f":
            nan = np.isnan(keys)
            if nan.any():
                self.nan_value = values[np.flatnonzero(nan)[0 if first else -1]]
            keys, values = keys[~nan], values[~nan]
        if not first:
            keys, values = keys[::-1], values[::-1]
        _, pick = np.unique(keys, return_index=True)
        order = np.argsort(keys[pick], kind="stable")
        self.keys = keys[pick][order]
        self.values = values[pick][order]
        self.default = default
        # a few values are looked up in a dict of Python keys (searchsorted on a handful of
        # values, objects above all, costs more than the whole lookup)
        self.table = dict(zip(self.keys.tolist(), self.values.tolist()))
        self.get = self.table.get

    def small(self, x: np.ndarray) -> list[Any]:
        """The values of x's elements (at most SMALL_LOOKUP) as a flat list of Python values,
        by the dict; x is cast to the keys' type as the vectorised lookup casts it."""
        flat = x.reshape(-1)
        if not self.is_str and flat.dtype != self.keys.dtype:
            flat = flat.astype(self.keys.dtype)
        get, default = self.get, self.default
        items = flat.tolist()
        out = [get(v, default) for v in items]
        if self.nan_value is not None and flat.dtype.kind == "f":
            out = [self.nan_value if v != v else r for v, r in zip(items, out)]
        return out

    def __call__(self, x: np.ndarray, out_dtype: np.dtype) -> np.ndarray:
        if x.size <= SMALL_LOOKUP:
            return np.array(self.small(x), dtype=out_dtype).reshape(x.shape)
        out = np.empty(x.shape, dtype=out_dtype)
        out[...] = self.default
        if x.size == 0:
            return out
        flat = x.reshape(-1)
        if self.keys.size:
            if self.is_str:
                flat = flat.astype(object)
            else:
                flat = flat.astype(self.keys.dtype, copy=False)
            pos = np.searchsorted(self.keys, flat)
            pos = np.minimum(pos, self.keys.size - 1)
            hit = np.asarray(self.keys[pos] == flat, dtype=bool)
            out.reshape(-1)[hit] = self.values[pos[hit]]
        if self.nan_value is not None and flat.dtype.kind == "f":
            out.reshape(-1)[np.isnan(flat)] = self.nan_value
        return out


def _label_values(node: NodeView, prefix: str) -> tuple[np.ndarray | None, str | None]:
    for suffix, kind in (("floats", "f"), ("int64s", "i"), ("strings", "s")):
        v = node.attr(f"{prefix}_{suffix}")
        if v is not None and len(v):
            if kind == "s":
                return _str_array(v), "s"
            return np.asarray(v, dtype=np.float32 if kind == "f" else np.int64), kind
    t = node.attr(f"{prefix}_tensor")
    if t is not None:
        t = np.asarray(t)
        if t.dtype.kind in "SUO":
            return _str_array(t), "s"
        return t.reshape(-1), "t"
    return None, None


@op("LabelEncoder", domain=ML, since=2)
@op("LabelEncoder", domain=ML, since=4)
def make_label_encoder(node: NodeView, ctx: ProviderContext) -> Kernel:
    keys, _ = _label_values(node, "keys")
    values, vkind = _label_values(node, "values")
    if keys is None or values is None:
        raise ValueError("LabelEncoder: keys_* and values_* attributes are required")
    if len(keys) != len(values):
        raise ValueError(f"LabelEncoder: {len(keys)} keys but {len(values)} values")
    default_t = node.attr("default_tensor")
    if default_t is not None:
        d = np.asarray(default_t).reshape(-1)
        default = _text(d[0]) if vkind == "s" else d[0]
    elif vkind == "s":
        default = _text(node.attr("default_string", "_Unused"))
    elif values.dtype.kind == "f":
        default = float(node.attr("default_float", -0.0))
    else:
        default = int(node.attr("default_int64", -1))
    out_dtype = np.dtype(object) if vkind == "s" else values.dtype
    lookup = _Lookup(keys, values, default, first=True)

    def kernel(x: np.ndarray) -> np.ndarray:
        if lookup.is_str:
            x = str_guard(x)
        return lookup(x, out_dtype)

    return kernel


@op("LabelEncoder", domain=ML, since=1)
def make_label_encoder_v1(node: NodeView, ctx: ProviderContext) -> Kernel:
    classes = _str_array(node.attr("classes_strings") or ())
    default_int = int(node.attr("default_int64", -1))
    default_str = _text(node.attr("default_string", "_Unused"))
    to_int = _Lookup(classes, np.arange(len(classes), dtype=np.int64), default_int)

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.dtype.kind in "SUO":
            return to_int(str_guard(x), np.dtype(np.int64))
        idx = x.astype(np.int64)
        ok = (idx >= 0) & (idx < len(classes))
        out = np.full(x.shape, default_str, dtype=object)
        out[ok] = classes[idx[ok]]
        return out

    return kernel


# --------------------------------------------------------------------------------------------
# ArrayFeatureExtractor, Binarizer
# --------------------------------------------------------------------------------------------


@op("ArrayFeatureExtractor", domain=ML, since=1)
def make_array_feature_extractor(node: NodeView, ctx: ProviderContext) -> Kernel:
    def kernel(x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        if indices.size == 1 and x.ndim == 1 and indices.dtype.kind in "iu":
            # a classifier's label: its class looked up by the ArgMax (most of the time
            # went into the general checks below)
            k = indices.item()
            if 0 <= k < x.shape[0]:
                return x[k:k + 1].reshape(1, 1).copy()
        idx = indices.reshape(-1).astype(np.int64, copy=False)
        n = x.shape[-1] if x.ndim else 0
        try:   # (numpy refuses indices >= n; negative ones it would wrap: refused here)
            # a few indices: their minimum in Python (numpy's min costs ~3 us on any size)
            if idx.size and (min(idx.tolist()) if idx.size <= 64 else idx.min()) < 0:
                raise IndexError
            out = x.take(idx, axis=-1)
        except IndexError:
            raise IndexError(f"ArrayFeatureExtractor: indices {idx.tolist()} out of range "
                             f"for the last dimension ({n})") from None
        return out.reshape(1, idx.size) if x.ndim == 1 else out

    const = node.inputs[1].const if len(node.inputs) > 1 and node.inputs[1] is not None \
        else None
    if const is not None:   # constant column indices (skl2onnx's ColumnTransformer): checked
        # once; a run whose input has the columns takes them at once
        fixed = np.asarray(const).reshape(-1).astype(np.int64)
        if fixed.size and fixed.min() >= 0:
            size, top = fixed.size, int(fixed.max())

            def take_fixed(x: np.ndarray, indices: np.ndarray) -> np.ndarray:
                if x.ndim and x.shape[-1] > top:
                    out = x.take(fixed, axis=-1)
                    return out.reshape(1, size) if x.ndim == 1 else out
                return kernel(x, indices)   # (the error, named as above)

            return take_fixed

    return kernel


@op("Binarizer", domain=ML, since=1)
def make_binarizer(node: NodeView, ctx: ProviderContext) -> Kernel:
    """1 where x > threshold, else 0, in x's type; a NaN input is an error, as in
    onnxruntime."""
    threshold = float(node.attr("threshold", 0.0))

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.dtype.kind == "f" and np.isnan(x).any():
            k = int(np.flatnonzero(np.isnan(x.reshape(-1)))[0])
            raise ValueError(f"Binarizer: input element {k} is NaN")
        return (x > x.dtype.type(threshold)).astype(x.dtype)

    return kernel


# --------------------------------------------------------------------------------------------
# TreeEnsemble (ai.onnx.ml opset 5)
# --------------------------------------------------------------------------------------------

_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)


def _ints(node: NodeView, name: str, n: int | None = None, default: int | None = None
          ) -> np.ndarray:
    v = node.attr(name)
    if v is None:
        if default is None:
            raise ValueError(f"TreeEnsemble: attribute {name!r} is required")
        return np.full(n or 0, default, dtype=np.int64)
    return np.asarray(v, dtype=np.int64).reshape(-1)


def _post_transform(kind: int, y: np.ndarray) -> np.ndarray:
    if kind == 0:
        return y
    if kind == 1:  # SOFTMAX
        e = np.exp(y - y.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if kind == 2:  # LOGISTIC
        return 1.0 / (1.0 + np.exp(-y))
    if kind == 3:  # SOFTMAX_ZERO: zeros stay zero
        nz = y != 0
        m = np.where(nz, y, -np.inf).max(axis=1, keepdims=True)
        e = np.where(nz, np.exp(y - np.where(np.isfinite(m), m, 0)), 0)
        s = e.sum(axis=1, keepdims=True)
        return np.divide(e, s, out=np.zeros_like(e), where=s != 0)
    if kind == 4:  # PROBIT
        return probit(y).astype(y.dtype, copy=False)
    raise ValueError(f"TreeEnsemble: unknown post_transform {kind}")


def make_tree_ensemble(node: NodeView, ctx: ProviderContext) -> Kernel:
    """TreeEnsemble on numpy: ml_trees.py's kernel when the native module is not built."""
    modes = _ints(node, "nodes_modes")
    n_nodes = modes.size
    feats = _ints(node, "nodes_featureids")
    t_ids, f_ids = _ints(node, "nodes_truenodeids"), _ints(node, "nodes_falsenodeids")
    t_leaf = _ints(node, "nodes_trueleafs").astype(bool)
    f_leaf = _ints(node, "nodes_falseleafs").astype(bool)
    missing = _ints(node, "nodes_missing_value_tracks_true", n_nodes, 0).astype(bool)
    splits_attr = node.attr("nodes_splits")
    splits = (np.zeros(n_nodes) if splits_attr is None
              else np.asarray(splits_attr).reshape(-1).astype(np.float64))
    leaf_w = np.asarray(node.attr("leaf_weights")).reshape(-1)
    leaf_t = _ints(node, "leaf_targetids")
    roots = _ints(node, "tree_roots")
    n_targets = int(node.attr("n_targets"))
    agg = int(node.attr("aggregate_function", 1))
    post = int(node.attr("post_transform", 0))
    if agg not in (0, 1, 2, 3):
        raise ValueError(f"TreeEnsemble: unknown aggregate_function {agg}")
    for name, arr in (("nodes_featureids", feats), ("nodes_truenodeids", t_ids),
                      ("nodes_falsenodeids", f_ids), ("nodes_trueleafs", t_leaf),
                      ("nodes_falseleafs", f_leaf), ("nodes_splits", splits)):
        if arr.size != n_nodes:
            raise ValueError(f"TreeEnsemble: {name} has {arr.size} entries, expected {n_nodes}")
    if leaf_w.size != leaf_t.size:
        raise ValueError("TreeEnsemble: leaf_weights and leaf_targetids differ in length")
    if ((leaf_t < 0) | (leaf_t >= n_targets)).any():
        raise ValueError("TreeEnsemble: leaf_targetids out of range [0, n_targets)")

    # set members of each BRANCH_MEMBER node, NaN-padded into one [n_nodes, width] table
    member_nodes = np.flatnonzero(modes == _MEMBER)
    members = np.full((n_nodes, 1), np.nan)
    if member_nodes.size:
        mv = node.attr("membership_values")
        if mv is None:
            raise ValueError("TreeEnsemble: BRANCH_MEMBER nodes need membership_values")
        mv = np.asarray(mv, dtype=np.float64).reshape(-1)
        bounds = np.flatnonzero(np.isnan(mv))
        if bounds.size != member_nodes.size:
            raise ValueError("TreeEnsemble: membership_values must hold one NaN-terminated "
                             "set per BRANCH_MEMBER node")
        starts = np.concatenate([[0], bounds[:-1] + 1])
        width = max(1, int((bounds - starts).max(initial=0)))
        members = np.full((n_nodes, width), np.nan)
        for nd, s, e in zip(member_nodes.tolist(), starts.tolist(), bounds.tolist()):
            members[nd, :e - s] = mv[s:e]

    # a tree whose root's branches point at the same leaf is that leaf
    root_is_leaf = t_leaf[roots] & f_leaf[roots] & (t_ids[roots] == f_ids[roots])
    n_trees = roots.size

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.ndim == 1:
            x = x.reshape(1, -1)
        if x.ndim != 2:
            raise ValueError(f"TreeEnsemble: input must be [N, F], got {x.shape}")
        n = x.shape[0]
        xf = x.astype(np.float64)
        # one walker per (row, tree): current position and whether it is a leaf index
        rows = np.repeat(np.arange(n), n_trees)
        cur = np.tile(np.where(root_is_leaf, t_ids[roots], roots), n)
        at_leaf = np.tile(root_is_leaf, n)
        for _ in range(n_nodes + 1):
            active = np.flatnonzero(~at_leaf)
            if active.size == 0:
                break
            nd = cur[active]
            v = xf[rows[active], feats[nd]]
            s = splits[nd]
            mode = modes[nd]
            go = np.select(
                [mode == _LEQ, mode == _LT, mode == _GTE, mode == _GT, mode == _EQ,
                 mode == _NEQ],
                [v <= s, v < s, v >= s, v > s, v == s, v != s],
                default=(members[nd] == v[:, None]).any(axis=1))
            go |= missing[nd] & np.isnan(v)
            cur[active] = np.where(go, t_ids[nd], f_ids[nd])
            at_leaf[active] = np.where(go, t_leaf[nd], f_leaf[nd])
        else:
            if not at_leaf.all():
                raise ValueError("TreeEnsemble: the trees contain a cycle")
        w = leaf_w[cur].astype(x.dtype)
        tgt = leaf_t[cur]
        if agg in (0, 1):
            out = np.zeros((n, n_targets), dtype=x.dtype)
            np.add.at(out, (rows, tgt), w / x.dtype.type(n_trees) if agg == 0 else w)
        elif agg == 2:
            out = np.full((n, n_targets), np.finfo(x.dtype).max, dtype=x.dtype)
            np.minimum.at(out, (rows, tgt), w)
        else:
            out = np.full((n, n_targets), np.finfo(x.dtype).min, dtype=x.dtype)
            np.maximum.at(out, (rows, tgt), w)
        if agg in (2, 3):   # a target no tree scored is 0, as in onnxruntime
            scored = np.zeros((n, n_targets), dtype=bool)
            scored[rows, tgt] = True
            out[~scored] = 0
        return _post_transform(post, out).astype(x.dtype, copy=False)

    return kernel
