"""ai.onnx.ml ops on maps and categories: ZipMap, DictVectorizer, CastMap, CategoryMapper,
OneHotEncoder, FeatureVectorizer (ai.onnx.ml opset 1, the only version of each).

A ``map(K, V)`` value is a Python ``dict`` and a ``seq(map(K, V))`` a ``list`` of dicts, as
onnxruntime's Python API takes and returns them. onnxruntime holds maps as ``std::map``, so
their keys are visited in ascending order (ZipMap's dicts come out in that order, CastMap
reads its input in it) and a repeated key keeps its last value. Behaviour follows
onnxruntime's CPU kernels (``core/providers/cpu/ml``).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from onnxplex import NodeView, ProviderContext

from . import _ml_common as mc
from ._np_helpers import str_guard
from ._registry import op
from .ml import SMALL_LOOKUP, _Lookup

ML = "ai.onnx.ml"
F32 = np.float32
Kernel = Callable[..., Any]


# --------------------------------------------------------------------------------------------
# ZipMap
# --------------------------------------------------------------------------------------------


@op("ZipMap", domain=ML, since=1)
def make_zipmap(node: NodeView, ctx: ProviderContext) -> Kernel:
    """[N, C] float -> a list of N dicts {label: float}, keys ascending (a repeated label keeps
    its last column); a vector is one row."""
    labels = mc.strings_or_ints(node, "classlabels_strings", "classlabels_int64s")
    n = len(labels)
    last = {lab: k for k, lab in enumerate(labels)}     # a repeated label: its last column
    keys = sorted(last)
    # (Python lists, not numpy: a few labels; each numpy call at session creation costs
    # ~5-15 us with the caches cold)
    cols_list = [last[k] for k in keys]
    reorder = cols_list != list(range(n))
    cols = np.array(cols_list, np.intp) if reorder else None

    def kernel(x: np.ndarray) -> list[dict]:
        if x.ndim == 1:
            x = x.reshape(1, -1)
        elif x.ndim != 2:
            raise ValueError(f"ZipMap: input must have rank 1 or 2, got shape {x.shape}")
        if x.shape[1] != n:
            raise ValueError(f"ZipMap: input has {x.shape[1]} columns for {n} class labels")
        if x.shape[0] == 1:     # one row: its Python floats straight into one dict
            row = x[0].tolist()
            return [dict(zip(keys, [row[c] for c in cols_list] if reorder else row))]
        # column by column: C lists of N Python floats (a row-wise tolist makes N inner lists;
        # float32 -> float64 -> float is the float32 -> float onnxruntime returns, exactly)
        return build(*(x[:, cols] if reorder else x).T.astype(np.float64).tolist())

    build = _row_dicts(keys)
    return kernel


def _row_dicts(keys: list) -> Callable[..., list[dict]]:
    """A function turning C columns (lists of N numbers) into N dicts {keys[j]: column_j[i]}:
    for up to 64 columns a comprehension with a dict display written for C
    (``{k0: r0, k1: r1}``, 3-4x faster than ``dict(zip(keys, row))``); only the column count
    goes into the generated code (made once per count, see :func:`_row_maker`), the keys are
    bound as arguments."""
    n = len(keys)
    if not 0 < n <= 64:
        return lambda *columns: [dict(zip(keys, row)) for row in zip(*columns)]
    return _row_maker(n)(*keys)


@functools.cache
def _row_maker(n: int) -> Callable[..., Callable[..., list[dict]]]:
    """``make(k0, ..., k{n-1})`` returning the comprehension over n columns; generated and
    compiled once per column count in a process (compile() took ~0.3-1 ms, paid by every
    session of a classifier before), at most 64 of them."""
    ks = ", ".join(f"k{j}" for j in range(n))
    cs = ", ".join(f"c{j}" for j in range(n))
    rs = ", ".join(f"r{j}" for j in range(n))
    body = ", ".join(f"k{j}: r{j}" for j in range(n))
    code = (f"def make({ks}):\n"
            f"    return lambda {cs}: [{{{body}}} for {rs}, in zip({cs})]\n")
    namespace: dict[str, Any] = {}
    exec(compile(code, "<ZipMap rows>", "exec"), namespace)  # noqa: S102 - integers only
    return namespace["make"]


# --------------------------------------------------------------------------------------------
# DictVectorizer
# --------------------------------------------------------------------------------------------


@op("DictVectorizer", domain=ML, since=1)
def make_dict_vectorizer(node: NodeView, ctx: ProviderContext) -> Kernel:
    """A dict -> [1, len(vocabulary)]: each vocabulary entry's value, 0 (or "") where the dict
    lacks it; the output type is the map's value type (the declared output type)."""
    vocab = mc.strings_or_ints(node, "string_vocabulary", "int64_vocabulary")
    size = len(vocab)
    first: dict[Any, int] = {}
    copies_src, copies_dst = [], []          # a repeated entry takes its first one's value
    for k, key in enumerate(vocab):
        if key in first:
            copies_src.append(first[key])
            copies_dst.append(k)
        else:
            first[key] = k
    declared = node.outputs[0].dtype if node.outputs and node.outputs[0] is not None else None
    get = first.get
    copies = list(zip(copies_src, copies_dst))

    def kernel(d: dict) -> np.ndarray:
        if not isinstance(d, dict):
            raise TypeError(f"DictVectorizer: input must be a dict, got {type(d).__name__}")
        dtype = declared if declared is not None else _value_dtype(d)
        if size <= _SMALL_VOCABULARY and dtype.kind != "O":   # the row as one list
            row: list[Any] = [0] * (size + 1)    # the extra slot takes keys outside it
            for k, v in d.items():
                row[get(k, size)] = v
            for src, dst in copies:
                row[dst] = row[src]
            return np.array(row[:size], dtype).reshape(1, size)
        out = np.zeros(size + 1, dtype)      # the extra slot takes keys outside the vocabulary
        if out.dtype.kind == "O":
            out[:] = ""
        if d:
            out[[get(k, size) for k in d]] = list(d.values())
        if copies_dst:
            out[copies_dst] = out[copies_src]
        return out[:size].reshape(1, size)

    # a dict of str keys and Python float values may come unconverted (see
    # onnxplex.session.session._raw_map_inputs): the row's dtype rounds them as the converted map's
    # float32 values are rounded, and key order does not matter here
    kernel.accepts_unconverted_maps = True
    return kernel


# up to this many vocabulary entries DictVectorizer builds its row as a list (a fancy
# assignment into a numpy row costs more)
_SMALL_VOCABULARY = 64


def _value_dtype(d: dict) -> np.dtype:
    v = next(iter(d.values()), 0.0)
    if isinstance(v, str):
        return np.dtype(object)
    if isinstance(v, (int, np.integer)):
        return np.dtype(np.int64)
    return np.dtype(v.dtype) if isinstance(v, np.floating) else np.dtype(F32)


# --------------------------------------------------------------------------------------------
# CastMap
# --------------------------------------------------------------------------------------------

_FLOAT_PREFIX = re.compile(
    r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE)
_INT_PREFIX = re.compile(r"\s*[+-]?\d+")
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _stof(s: str) -> float:
    """std::stof: the longest numeric prefix (after white space); none is an error."""
    m = _FLOAT_PREFIX.match(s)
    if m is None:
        raise ValueError(f"CastMap: cannot convert {s!r} to float")
    v = float(m.group(0))
    if math.isfinite(v) and not math.isfinite(float(F32(v))):
        raise ValueError(f"CastMap: {s!r} is out of the float range")
    return v


def _stoll(s: str) -> int:
    """std::stoll: the leading base-10 integer; none, or out of int64 range, is an error."""
    m = _INT_PREFIX.match(s)
    if m is None:
        raise ValueError(f"CastMap: cannot convert {s!r} to int64")
    v = int(m.group(0))
    if not _INT64[0] <= v <= _INT64[1]:
        raise ValueError(f"CastMap: {s!r} is out of the int64 range")
    return v


def _f32_to_string(v: float) -> str:
    """std::to_string(float): printf's %f of the float's value."""
    return f"{float(F32(v)):f}"


_CASTS = {
    # (values are strings, cast_to) -> element conversion
    (True, "TO_FLOAT"): _stof,
    (True, "TO_INT64"): _stoll,
    (True, "TO_STRING"): str,
    (False, "TO_FLOAT"): float,
    (False, "TO_INT64"): lambda v: int(F32(v)),     # static_cast: truncation
    (False, "TO_STRING"): _f32_to_string,
}
_OUT = {"TO_FLOAT": (np.dtype(F32), 0.0), "TO_INT64": (np.dtype(np.int64), 0),
        "TO_STRING": (np.dtype(object), "0.f")}


@op("CastMap", domain=ML, since=1)
def make_cast_map(node: NodeView, ctx: ProviderContext) -> Kernel:
    """A dict {int64: string|float} -> [1, M]: the values in ascending key order (DENSE), or
    at index = key for keys below ``max_map`` with a pad elsewhere (SPARSE: 0, or the string
    "0.f"), each cast as ``cast_to`` says (strings parsed as std::stof / std::stoll read them,
    floats printed as std::to_string does)."""
    cast_to = mc.enum_attr(node, "cast_to", "TO_FLOAT", ("TO_FLOAT", "TO_STRING", "TO_INT64"))
    sparse = mc.enum_attr(node, "map_form", "DENSE", ("DENSE", "SPARSE")) == "SPARSE"
    max_map = int(node.attr("max_map", 1))
    if sparse and max_map <= 0:
        raise ValueError(f"CastMap: attribute 'max_map' must be > 0 with SPARSE, got {max_map}")
    dtype, pad = _OUT[cast_to]

    def kernel(d: dict) -> np.ndarray:
        if not isinstance(d, dict):
            raise TypeError(f"CastMap: input must be a dict, got {type(d).__name__}")
        items = sorted(d.items())
        strings_in = bool(items) and isinstance(items[0][1], (str, bytes))
        conv = _CASTS[strings_in, cast_to]
        if strings_in:
            items = [(k, mc.text(v)) for k, v in items]
        if not sparse:
            out = np.empty((1, len(items)), dtype)
            out[0, :] = [conv(v) for _, v in items]
            return out
        if items and items[0][0] < 0:
            raise ValueError(f"CastMap: negative keys are not allowed with SPARSE "
                             f"(first key {items[0][0]})")
        out = np.full((1, max_map), pad, dtype)
        kept = [(k, v) for k, v in items if k < max_map]
        if kept:
            out[0, [k for k, _ in kept]] = [conv(v) for _, v in kept]
        return out

    return kernel


# --------------------------------------------------------------------------------------------
# CategoryMapper, OneHotEncoder
# --------------------------------------------------------------------------------------------


@op("CategoryMapper", domain=ML, since=1)
def make_category_mapper(node: NodeView, ctx: ProviderContext) -> Kernel:
    """strings -> int64 through cats_strings[i] -> cats_int64s[i], int64 -> strings the other
    way (a repeated category keeps its last pair); default_int64 / default_string otherwise."""
    cats_s = mc.strings(node, "cats_strings")
    cats_i = mc.ints(node, "cats_int64s")
    if len(cats_s) != cats_i.size:
        raise ValueError(f"CategoryMapper: 'cats_strings' and 'cats_int64s' differ in length "
                         f"({len(cats_s)} and {cats_i.size})")
    strs = mc.obj_array(cats_s)
    to_int = _Lookup(strs, cats_i, int(node.attr("default_int64", -1)))
    to_str = _Lookup(cats_i, strs, mc.text(node.attr("default_string", "_Unused")))
    i64, obj = np.dtype(np.int64), np.dtype(object)

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.dtype.kind in "OSU":
            return to_int(str_guard(x), i64)
        return to_str(x, obj)

    return kernel


@op("OneHotEncoder", domain=ML, since=1)
def make_one_hot_encoder(node: NodeView, ctx: ProviderContext) -> Kernel:
    """x [..] -> float [.., categories]: a 1 at each value's category (numbers truncated to
    int64 and looked up in cats_int64s, strings in cats_strings); an unknown value gives a row
    of zeros, or an error when ``zeros`` is 0."""
    cats_i = mc.ints(node, "cats_int64s")
    cats_s = mc.strings(node, "cats_strings")
    if cats_i.size and cats_s:
        raise ValueError("OneHotEncoder: only one of 'cats_int64s' and 'cats_strings' may be "
                         "given")
    n_cats = cats_i.size or len(cats_s)
    if n_cats == 0:
        raise ValueError("OneHotEncoder: 'cats_int64s' or 'cats_strings' is required")
    zeros = bool(node.attr("zeros", 1))
    pos = np.arange(n_cats, dtype=np.int64)
    empty_i, empty_s = np.zeros(0, np.int64), mc.obj_array([])
    by_int = _Lookup(cats_i if cats_i.size else empty_i, pos[:cats_i.size], -1)
    by_str = _Lookup(mc.obj_array(cats_s) if cats_s else empty_s, pos[:len(cats_s)], -1)
    i64 = np.dtype(np.int64)
    rows = np.zeros((n_cats + 1, n_cats), F32)   # each category's row, then one of zeros
    rows[pos, pos] = 1.0

    def small(x: np.ndarray) -> np.ndarray:
        # a few values: their categories by the lookups' dicts, the rows as one list
        if x.dtype.kind in "OSU":
            idx = by_str.small(str_guard(x))
        else:
            idx = by_int.small(x.astype(np.int64) if x.dtype.kind == "f" else x)
        if not zeros and -1 in idx:
            raise ValueError("OneHotEncoder: unknown category and zeros = 0")
        return rows.take(idx, axis=0).reshape(*x.shape, n_cats)   # (-1: the zeros row)

    def kernel(x: np.ndarray) -> np.ndarray:
        if x.ndim > 2:
            raise ValueError(f"OneHotEncoder: input must have rank <= 2, got shape {x.shape}")
        if x.size <= SMALL_LOOKUP:
            return small(x)
        if x.dtype.kind in "OSU":
            idx = by_str(str_guard(x), i64)
        else:
            with np.errstate(invalid="ignore"):
                idx = by_int(x.astype(np.int64) if x.dtype.kind == "f" else x, i64)
        idx = idx.reshape(-1)
        hit = idx >= 0
        if not zeros and not hit.all():
            raise ValueError("OneHotEncoder: unknown category and zeros = 0")
        out = np.zeros((idx.size, n_cats), F32)
        out[np.flatnonzero(hit), idx[hit]] = 1.0
        return out.reshape(*x.shape, n_cats)

    return kernel


# --------------------------------------------------------------------------------------------
# FeatureVectorizer
# --------------------------------------------------------------------------------------------


@op("FeatureVectorizer", domain=ML, since=1)
def make_feature_vectorizer(node: NodeView, ctx: ProviderContext) -> Kernel:
    """Inputs [N, ..] side by side as float [N, sum(inputdimensions)]: input k fills
    inputdimensions[k] columns with its first values per row (extra values are dropped,
    missing ones are 0)."""
    dims = mc.ints(node, "inputdimensions").tolist()
    if not dims or any(d < 0 for d in dims):
        raise ValueError(f"FeatureVectorizer: attribute 'inputdimensions' must list one size "
                         f">= 0 per input, got {dims}")
    total = sum(dims)
    offsets = np.concatenate([[0], np.cumsum(dims)]).tolist()

    def kernel(*xs: np.ndarray) -> np.ndarray:
        if len(xs) != len(dims):
            raise ValueError(f"FeatureVectorizer: {len(xs)} inputs for {len(dims)} "
                             "inputdimensions")
        n = 1 if xs[0].ndim <= 1 else xs[0].shape[0]
        out = np.zeros((n, total), F32)
        for k, x in enumerate(xs):
            rows = 1 if x.ndim <= 1 else x.shape[0]
            if rows > n:
                raise ValueError(f"FeatureVectorizer: input {k} has {rows} rows, the first "
                                 f"input {n}")
            xr = x.reshape(rows, -1)
            w = min(xr.shape[1], dims[k])
            out[:rows, offsets[k]:offsets[k] + w] = xr[:, :w]
        return out

    return kernel
