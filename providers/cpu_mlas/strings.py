"""String ops: StringNormalizer, StringConcat, StringSplit, RegexFullMatch, TfIdfVectorizer.

Strings are object arrays of Python ``str``; constant string initializers may reach a kernel as
numpy bytes arrays, which :func:`str_guard` decodes.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable

import numpy as np

from onnxplex import NodeView, ProviderContext

from ._np_helpers import str_guard
from ._registry import op

Kernel = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]


def _text(v: object) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def _strings(a: np.ndarray) -> np.ndarray:
    """``a`` as an object array of ``str`` (bytes decoded)."""
    a = str_guard(a)
    if a.dtype != object:
        return a.astype(object)
    if a.size and any(isinstance(v, bytes) for v in a.flat):
        return np.frompyfunc(_text, 1, 1)(a).astype(object).reshape(a.shape)
    return a


def _object_result(r: object, shape: tuple[int, ...]) -> np.ndarray:
    # frompyfunc returns a bare Python object for 0-d operands
    out = np.empty(shape, dtype=object)
    out[...] = r
    return out


_lower = np.frompyfunc(str.lower, 1, 1)
_upper = np.frompyfunc(str.upper, 1, 1)


@op("StringNormalizer", since=10)
def make_string_normalizer(node: NodeView, ctx: ProviderContext) -> Kernel:
    action = _text(node.attr("case_change_action", "NONE")).upper()
    if action not in ("NONE", "LOWER", "UPPER"):
        raise ValueError(f"StringNormalizer: unknown case_change_action {action!r}")
    sensitive = bool(node.attr("is_case_sensitive", 0))
    stops = [_text(w) for w in (node.attr("stopwords") or ())]
    stopset = frozenset(stops if sensitive else (w.lower() for w in stops))
    change = {"LOWER": _lower, "UPPER": _upper}.get(action)

    def kernel(x: np.ndarray) -> np.ndarray:
        x = _strings(x)
        if x.ndim == 2 and x.shape[0] != 1 or x.ndim not in (1, 2):
            raise ValueError(f"StringNormalizer: input must be [C] or [1, C], got {x.shape}")
        flat = x.reshape(-1)
        if stopset and flat.size:
            keys = flat if sensitive else _lower(flat)
            flat = flat[~np.isin(keys.astype(object), list(stopset))]
        if change is not None and flat.size:
            flat = change(flat).astype(object)
        if flat.size == 0 and x.size:
            flat = np.array([""], dtype=object)  # everything was a stopword: one empty string
        flat = flat.astype(object)
        return flat.reshape(1, -1) if x.ndim == 2 else flat

    return kernel


_concat = np.frompyfunc(operator.add, 2, 1)


@op("StringConcat", since=20)
def make_string_concat(node: NodeView, ctx: ProviderContext) -> Kernel:
    def kernel(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        x, y = _strings(x), _strings(y)
        shape = np.broadcast_shapes(x.shape, y.shape)
        return _object_result(_concat(x, y), shape)

    return kernel


@op("StringSplit", since=20)
def make_string_split(node: NodeView, ctx: ProviderContext) -> Kernel:
    delim = node.attr("delimiter")
    delim = _text(delim) if delim is not None else None
    if delim == "":
        delim = None  # split on runs of whitespace, ignoring leading/trailing whitespace
    maxsplit = node.attr("maxsplit")
    maxsplit = -1 if maxsplit is None else int(maxsplit)
    splitter = np.frompyfunc(lambda s: s.split(delim, maxsplit), 1, 1)

    def kernel(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = _strings(x)
        parts = _object_result(splitter(x), x.shape) if x.size else np.empty(x.shape, object)
        counts = np.fromiter((len(p) for p in parts.flat), dtype=np.int64,
                             count=parts.size).reshape(x.shape)
        width = int(counts.max(initial=0))
        y = np.full(x.shape + (width,), "", dtype=object)
        if width:
            flat_y = y.reshape(-1, width)
            # one scatter of every piece to (row, position) instead of a loop over rows
            rows = np.repeat(np.arange(counts.size), counts.reshape(-1))
            cols = np.arange(rows.size) - np.repeat(
                np.cumsum(counts.reshape(-1)) - counts.reshape(-1), counts.reshape(-1))
            pieces = np.empty(rows.size, dtype=object)
            pieces[:] = [s for p in parts.flat for s in p]
            flat_y[rows, cols] = pieces
        return y, counts

    return kernel


@op("RegexFullMatch", since=20)
def make_regex_full_match(node: NodeView, ctx: ProviderContext) -> Kernel:
    pattern = node.attr("pattern")
    if pattern is None:
        raise ValueError("RegexFullMatch: attribute 'pattern' is required")
    try:
        regex = re.compile(_text(pattern))
    except re.error as e:
        raise ValueError(f"RegexFullMatch: invalid pattern {pattern!r}: {e}") from None
    match = np.frompyfunc(lambda s: regex.fullmatch(s) is not None, 1, 1)

    def kernel(x: np.ndarray) -> np.ndarray:
        x = _strings(x)
        if x.size == 0:
            return np.zeros(x.shape, dtype=bool)
        return np.asarray(match(x), dtype=bool).reshape(x.shape)

    return kernel


@op("TfIdfVectorizer", since=9)
def make_tfidf_vectorizer(node: NodeView, ctx: ProviderContext) -> Kernel:
    mode = _text(node.attr("mode", "TF")).upper()
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ValueError(f"TfIdfVectorizer: unknown mode {mode!r}")
    min_n = int(node.attr("min_gram_length"))
    max_n = int(node.attr("max_gram_length"))
    max_skip = int(node.attr("max_skip_count", 0))
    counts = [int(c) for c in node.attr("ngram_counts")]
    indexes = np.asarray(node.attr("ngram_indexes"), dtype=np.int64).reshape(-1)
    weights = node.attr("weights")
    weights = None if weights is None or len(weights) == 0 else np.asarray(weights, np.float32)
    pool_ints = node.attr("pool_int64s")
    pool_strs = node.attr("pool_strings")
    is_str = pool_ints is None or len(pool_ints) == 0
    pool = [_text(s) for s in pool_strs] if is_str else [int(v) for v in pool_ints]
    out_size = int(indexes.max()) + 1 if indexes.size else 0

    # n-gram (a tuple of pool items) -> output column, for sizes in [min_n, max_n]
    table: dict[tuple, int] = {}
    ngram_no = 0
    for size, start in enumerate(counts, start=1):
        end = counts[size] if size < len(counts) else len(pool)
        for pos in range(start, end - size + 1, size):
            if min_n <= size <= max_n:
                table.setdefault(tuple(pool[pos:pos + size]), int(indexes[ngram_no]))
            ngram_no += 1
    sizes = sorted({len(k) for k in table})

    def count_row(row: list, freq: np.ndarray) -> None:
        c = len(row)
        for n in sizes:
            # unigrams are counted once: skipping does not change them
            for skip in range(1, (max_skip + 2) if n > 1 else 2):
                span = skip * (n - 1)
                for s in range(c - span):
                    col = table.get(tuple(row[s:s + span + 1:skip]))
                    if col is not None:
                        freq[col] += 1

    def kernel(x: np.ndarray) -> np.ndarray:
        if is_str:
            x = _strings(x)
        if x.ndim > 2:
            raise ValueError(f"TfIdfVectorizer: input must be [C] or [B, C], got {x.shape}")
        rows = x.reshape(1, -1) if x.ndim < 2 else x
        freq = np.zeros((rows.shape[0], out_size), dtype=np.int64)
        if table:
            values = rows.tolist()
            for b, row in enumerate(values):
                count_row(row, freq[b])
        if mode == "TF":
            y = freq.astype(np.float32)
        elif mode == "IDF":
            y = (np.broadcast_to(weights, freq.shape) if weights is not None
                 else np.ones(freq.shape, np.float32)) * (freq > 0)
        else:
            y = freq * weights if weights is not None else freq
        y = np.asarray(y, dtype=np.float32)
        return y if x.ndim == 2 else y.reshape(out_size)

    return kernel
