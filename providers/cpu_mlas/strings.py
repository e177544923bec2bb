"""String ops: StringNormalizer, StringConcat, StringSplit, RegexFullMatch, TfIdfVectorizer and
com.microsoft Tokenizer.

Strings are object arrays of Python ``str``; constant string initializers may reach a kernel as
numpy bytes arrays, which :func:`str_guard` decodes.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable

import numpy as np

from onnxplex import NodeView, ProviderContext

from . import _native
from ._np_helpers import str_guard
from ._re2_syntax import Re2Pattern, complement_ranges
from ._registry import op

Kernel = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]


def _text(v: object) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def _strings(a: np.ndarray) -> np.ndarray:
    """``a`` as an object array of ``str`` (bytes decoded)."""
    a = str_guard(a)
    if a.dtype != object:
        return a.astype(object)
    if a.size and bytes in set(map(type, a.ravel().tolist())):   # one C pass over the types
        return np.frompyfunc(_text, 1, 1)(a).astype(object).reshape(a.shape)
    return a


def _object_result(r: object, shape: tuple[int, ...]) -> np.ndarray:
    # frompyfunc returns a bare Python object for 0-d operands
    out = np.empty(shape, dtype=object)
    out[...] = r
    return out


# StringNormalizer changes case one code point at a time with the C++ locale's
# std::tolower/std::toupper (simple case mapping): "ß" stays "ß" in upper case, "İ" becomes
# "i", a final "Σ" becomes "σ". Python's str.lower/upper apply the full mapping (and the
# final-sigma rule), so the strings where they differ go through the per-character path.
_ASCII_LOCALES = frozenset({"C", "POSIX"})   # their ctype facets map ASCII letters only
_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
_ASCII_UPPER = {c + 32: c for c in range(ord("A"), ord("Z") + 1)}
_LOWER_SPECIAL = {"\u0130": "i", "\u03a3": "\u03c3"}   # full mapping / context differ


def _lower_char(c: str) -> str:
    return _LOWER_SPECIAL.get(c) or c.lower()


def _upper_char(c: str) -> str:
    u = c.upper()
    if len(u) == 1:
        return u
    t = c.title()   # e.g. U+1F80: the full upper case is two letters, the simple one is U+1F88
    return t if len(t) == 1 else c


def _simple_lower(s: str) -> str:
    if s.isascii() or ("\u0130" not in s and "\u03a3" not in s):
        return s.lower()
    return "".join(map(_lower_char, s))


def _simple_upper(s: str) -> str:
    u = s.upper()
    return u if len(u) == len(s) else "".join(map(_upper_char, s))


def _case_changer(action: str, locale: str) -> Callable[[str], str]:
    if locale in _ASCII_LOCALES:
        table = _ASCII_LOWER if action == "LOWER" else _ASCII_UPPER
        return lambda s: s.translate(table)
    return _simple_lower if action == "LOWER" else _simple_upper


@op("StringNormalizer", since=10)
def make_string_normalizer(node: NodeView, ctx: ProviderContext) -> Kernel:
    action = _text(node.attr("case_change_action", "NONE"))
    if action not in ("NONE", "LOWER", "UPPER"):   # case-sensitive, as in onnxruntime
        raise ValueError(f"StringNormalizer: attribute 'case_change_action' must be NONE, "
                         f"LOWER or UPPER, got {action!r}")
    sensitive = bool(node.attr("is_case_sensitive", 0))
    # onnxruntime's default is en_US.UTF-8 (and it fails where that locale is not installed);
    # any locale but C/POSIX maps case as a UTF-8 locale does
    locale = _text(node.attr("locale", "en_US.UTF-8"))
    stops = [_text(w) for w in (node.attr("stopwords") or ())]
    fold = None if sensitive else _case_changer("LOWER", locale)   # compared in lower case
    stopset = frozenset(stops if fold is None else map(fold, stops))
    change = None if action == "NONE" else _case_changer(action, locale)
    # no stopwords, a case change: ASCII strs natively (both mappings agree there)
    case_map = getattr(_native.native(), "case_map", None)
    if stopset or change is None:
        case_map = None
    upper = action == "UPPER"

    def kernel(x: np.ndarray) -> np.ndarray:
        if case_map is not None and x.dtype == object and x.size and (
                x.ndim == 1 or x.ndim == 2 and x.shape[0] == 1):
            try:
                return case_map(x, upper, change)
            except TypeError:   # an item is not a str: decoded (bytes) or refused below
                pass
        x = _strings(x)
        if not (x.ndim == 1 or x.ndim == 2 and x.shape[0] == 1) or x.size == 0:
            raise ValueError(f"StringNormalizer: input must be [C] or [1, C] with C > 0, "
                             f"got {x.shape}")
        values = x.reshape(-1).tolist()
        if stopset:
            keys = values if fold is None else map(fold, values)
            values = [v for v, k in zip(values, keys, strict=True) if k not in stopset]
        if change is not None:
            values = list(map(change, values))
        if not values:
            values = [""]  # everything was a stopword: one empty string
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out.reshape(1, -1) if x.ndim == 2 else out

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
    # RE2 itself (google-re2), as onnxruntime and the ONNX spec use: its syntax and
    # semantics (\d is ASCII), and linear time, where Python's backtracking re took
    # exponential time on patterns such as (a+)+b
    import re2

    try:
        regex = re2.compile(_text(pattern))
    except re2.error as e:
        raise ValueError(f"RegexFullMatch: invalid RE2 pattern {_text(pattern)!r}: {e}") \
            from None
    match = np.frompyfunc(lambda s: regex.fullmatch(s) is not None, 1, 1)

    def kernel(x: np.ndarray) -> np.ndarray:
        x = _strings(x)
        if x.size == 0:
            return np.zeros(x.shape, dtype=bool)
        return np.asarray(match(x), dtype=bool).reshape(x.shape)

    return kernel


# --------------------------------------------------------------------------------------------
# com.microsoft::Tokenizer (onnxruntime's contrib_ops/cpu/tokenizer.cc)
# --------------------------------------------------------------------------------------------

MS = "com.microsoft"
_START_TEXT, _END_TEXT = "\x02", "\x03"


def _split_by(sep: Re2Pattern, text: str, min_chars: int) -> list[str]:
    """The pieces of ``text`` between the leftmost-longest matches of ``sep`` that have at least
    ``min_chars`` characters. As in onnxruntime, an empty match also consumes the character
    after it (so a separator that can match nothing eats the text around it)."""
    if sep.simple and sep.never_empty:   # (whole matches: the pattern's groups do not count)
        pieces, at = [], 0
        for m in sep.regex.finditer(text):
            a, b = m.span()
            pieces.append(text[at:a])
            at = b
        pieces.append(text[at:])
        return [t for t in pieces if len(t) >= min_chars]
    out, start, n = [], 0, len(text)
    while start <= n:
        m = sep.search(text, start)
        if m is None:
            if n - start >= min_chars:
                out.append(text[start:])
            break
        at, end = m
        if at - start >= min_chars:
            out.append(text[start:at])
        start = end if end > at else at + 1
    return out


def _find_tokens(exp: Re2Pattern, text: str, min_chars: int) -> list[str]:
    """The leftmost-longest matches of ``exp`` of at least ``min_chars`` characters; after a
    shorter one the search resumes one character past its start, as in onnxruntime."""
    if exp.simple and exp.never_empty and min_chars == 1:
        return [m.group(0) for m in exp.regex.finditer(text)]   # (whole matches)
    out, start, n = [], 0, len(text)
    while start <= n:
        m = exp.search(text, start)
        if m is None:
            break
        at, end = m
        if end - at >= min_chars:
            out.append(text[at:end])
            start = end
        else:
            start = at + 1
    return out


def _required(node: NodeView, name: str) -> object:
    value = node.attr(name)
    if value is None:
        raise ValueError(f"{node.op_type}: attribute {name!r} is required")
    return value


@op("Tokenizer", domain=MS, since=1)
def make_tokenizer(node: NodeView, ctx: ProviderContext) -> Kernel:
    """Each string -> its tokens, padded with ``pad_value`` to the longest row: [C] -> [C, T],
    [N, C] -> [N, C, T]; with ``mark`` each row is framed by 0x02 ... 0x03 (before the padding).
    ``separators`` (RE2 patterns applied one after the other, ``[""]`` for characters) or else
    ``tokenexp`` (an RE2 pattern the tokens match, ``"."`` for characters). Tokens shorter than
    ``mincharnum`` characters are dropped. When no row has a token, T is 0 (no marks)."""
    mark = bool(int(_required(node, "mark")))
    pad = _text(_required(node, "pad_value"))
    min_chars = int(_required(node, "mincharnum"))
    if min_chars <= 0:
        raise ValueError(f"Tokenizer: attribute 'mincharnum' must be positive, got {min_chars}")
    seps = node.attr("separators")
    tokenexp = node.attr("tokenexp")
    if seps is not None:   # separators win over tokenexp, as in onnxruntime
        seps = [_text(v) for v in seps]
        if not seps:
            raise ValueError("Tokenizer: attribute 'separators' must not be empty")
        by_char = seps == [""]
    elif tokenexp is not None:
        tokenexp = _text(tokenexp)
        if not tokenexp:
            raise ValueError("Tokenizer: attribute 'tokenexp' must not be empty")
        by_char = tokenexp == "."
    else:
        raise ValueError("Tokenizer: one of the attributes 'separators' or 'tokenexp' is required")
    if by_char and min_chars > 1:
        raise ValueError(f"Tokenizer: attribute 'mincharnum' ({min_chars}) must be 1 when "
                         "splitting into characters")

    # (ranges, shortest, single) when the tokens are the runs of one character class
    runs: tuple[list[tuple[int, int]], int, bool] | None = None
    if by_char:
        tokenize: Callable[[str], list[str]] = list   # every character, "\n" included
        runs = ([(0, 0x10FFFF)], 1, True)
    elif seps is not None:
        patterns = [Re2Pattern(sep, "Tokenizer: attribute 'separators'") for sep in seps]
        if all(p.char_runs is not None and p.char_runs[1] == 1 for p in patterns):
            # each separator matches one character of a class (or a run of them): the pieces
            # of at least mincharnum characters left by splitting on one after the other are
            # the runs of the characters none of them matches
            runs = (complement_ranges([r for p in patterns for r in p.char_runs[0]]), 1, False)

        def tokenize(text: str) -> list[str]:
            row = [text]
            for sep in patterns:
                row = [t for piece in row for t in _split_by(sep, piece, min_chars)]
            return row
    else:
        exp = Re2Pattern(tokenexp, "Tokenizer: attribute 'tokenexp'")
        runs = exp.char_runs

        def tokenize(text: str) -> list[str]:
            return _find_tokens(exp, text, min_chars)

    char_runs = getattr(_native.native(), "CharRuns", None)
    native_runs = None if runs is None or char_runs is None else char_runs(
        runs[0], runs[2], max(runs[1], min_chars), mark, pad).run

    def kernel(x: np.ndarray) -> np.ndarray:
        if native_runs is not None and x.dtype == object and x.size and 0 < x.ndim < 3:
            try:   # one native pass writes the padded [N, T] tokens
                return native_runs(x)
            except TypeError:   # an item is not a str: decoded (bytes) or refused below
                pass
        x = _strings(x)
        if x.ndim not in (1, 2):
            raise ValueError(f"Tokenizer: input must be [C] or [N, C], got {x.shape}")
        if x.size == 0:   # onnxruntime: [N, 0] for [N, 0] (and [0, 0] for [0, C]); [0] for [0]
            return np.empty(x.shape[:1] + (0,) if x.ndim == 2 else (0,), dtype=object)
        if native_runs is not None:
            return native_runs(x)
        rows = list(map(tokenize, x.reshape(-1).tolist()))
        width = max(map(len, rows))
        if width == 0:
            return np.empty(x.shape + (0,), dtype=object)
        flat: list[str] = []
        for row in rows:
            if mark:
                flat.append(_START_TEXT)
                flat += row
                flat.append(_END_TEXT)
            else:
                flat += row
            flat += [pad] * (width - len(row))
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(x.shape + (width + 2 * mark,))

    return kernel


# --------------------------------------------------------------------------------------------
# TfIdfVectorizer
# --------------------------------------------------------------------------------------------


# A trie whose (parents x tokens) table has at most this many entries is walked through a dense
# table (char n-grams: a few dozen tokens); a larger one (word n-grams) through searchsorted.
_DENSE_TRIE_ENTRIES = 1 << 21


class _NgramPool:
    """The pool's n-grams of the sizes counted, as a trie over vocabulary ids.

    Tokens are numbered 0..V-1 (``vocab``; a string pool's tokens are also keyed by their UTF-8
    bytes, so inputs need no decoding); a 1-gram's trie node is its token id, and the node of
    an n-gram's (n+1)-item extension is ``edges[parent * V + token]``. ``gram_of[node]`` is the
    id (position in ngram_indexes) of the n-gram ending there (-1 for a prefix only).

    The numpy side works on ids shifted by one, 0 standing for "none" (an unknown token, no
    such n-gram), so that no step needs a mask: ``gram1[node + 1]``, and the child of a shifted
    node and token is found from the node's row among the nodes that have children."""

    def __init__(self, grams: list[tuple[tuple, int]]) -> None:
        self.vocab: dict = {}
        for gram, _ in grams:
            for item in gram:
                self.vocab.setdefault(item, len(self.vocab))
        v = self.V = max(len(self.vocab), 1)
        self.edges: dict[int, int] = {}
        gram_of = [-1] * len(self.vocab)
        for gram, gram_id in grams:
            node = self.vocab[gram[0]]
            for item in gram[1:]:
                node = self.edges.setdefault(node * v + self.vocab[item], len(gram_of))
                if node == len(gram_of):
                    gram_of.append(-1)
            gram_of[node] = gram_id
        self.gram_of = gram_of
        if not (self.vocab and all(isinstance(k, int) for k in self.vocab)):
            self.vocab.update({k.encode(): i for k, i in list(self.vocab.items())})
        self.row1: np.ndarray | None = None   # (the numpy tables: built on first use)

    def _numpy_tables(self) -> None:
        """The numpy side's tables (see the class): built when :meth:`ids1` first runs, not
        with the pool, since the native counter (``NgramCounter``) reads only the dicts and a
        large pool's tables cost tens of ms of a session's start."""
        if self.row1 is not None:
            return
        gram_of, v = self.gram_of, self.V
        self.gram1 = np.asarray([-1] + gram_of, dtype=np.int64)
        parents = sorted({key // v for key in self.edges})
        self.row1 = np.zeros(len(gram_of) + 1, dtype=np.int64)   # shifted node -> parent row
        self.row1[np.asarray(parents, dtype=np.int64) + 1] = np.arange(1, len(parents) + 1)
        width = self.width = v + 1
        keys = np.fromiter((self.row1[k // v + 1] * width + k % v + 1 for k in self.edges),
                           dtype=np.int64, count=len(self.edges))
        children = np.fromiter(self.edges.values(), dtype=np.int64, count=len(self.edges)) + 1
        if (len(parents) + 1) * width <= _DENSE_TRIE_ENTRIES:
            self.table = np.zeros((len(parents) + 1) * width, dtype=np.int32)   # <= 8 MB
            self.table[keys] = children
        else:
            self.table = None
            order = np.argsort(keys)
            self.keys = np.append(keys[order], np.iinfo(np.int64).max)   # a sentinel at the end
            self.child = np.append(children[order], 0)
        self.int_sorted = self.char_lut = None
        if self.vocab and all(isinstance(k, int) for k in self.vocab):   # int pools: numpy
            items = np.fromiter(self.vocab.keys(), dtype=np.int64, count=len(self.vocab))
            self.int_order = np.argsort(items)
            self.int_sorted = items[self.int_order]
        else:
            chars = {k: i for k, i in self.vocab.items() if isinstance(k, str) and len(k) == 1}
            if chars:   # single-character tokens (char analyzers) map by code point
                self.char_lut = np.zeros(max(map(ord, chars)) + 2, dtype=np.int64)
                self.char_lut[[ord(k) for k in chars]] = np.asarray(list(chars.values())) + 1

    def ids1(self, x: np.ndarray) -> np.ndarray:
        """Shifted vocabulary ids of the items of ``x`` (0 for items in no counted n-gram);
        builds the numpy tables :attr:`gram1` and :meth:`extend1` use, on the first call."""
        self._numpy_tables()
        if x.dtype == object:
            flat = x.reshape(-1).tolist()
            cps = self._code_points(flat)
            if cps is not None:
                return self.char_lut[np.minimum(cps, self.char_lut.size - 1)].reshape(x.shape)
            return np.fromiter(map(self.vocab.get, flat, itertools.repeat(-1)), dtype=np.int64,
                               count=len(flat)).reshape(x.shape) + 1
        if self.int_sorted is None:
            return np.zeros(x.shape, dtype=np.int64)   # a string pool never matches ints
        at = np.minimum(np.searchsorted(self.int_sorted, x), self.int_sorted.size - 1)
        return np.where(self.int_sorted[at] == x, self.int_order[at] + 1, 0)

    def _code_points(self, flat: list) -> np.ndarray | None:
        """The code points of ``flat`` when the pool has one-character tokens and every item is
        a one-character str (else None)."""
        if self.char_lut is None or flat.count(""):
            return None
        try:
            joined = "".join(flat)
        except TypeError:   # bytes among them
            return None
        if len(joined) != len(flat):   # no empty item, so some item is longer
            return None
        return np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)

    def extend1(self, node1: np.ndarray, token1: np.ndarray) -> np.ndarray:
        """The shifted trie node after shifted ``node1`` then ``token1``, elementwise."""
        key = self.row1[node1] * self.width + token1   # row 0 / token 0: never an edge
        if self.table is not None:
            return self.table[key]
        at = np.searchsorted(self.keys, key)
        return np.where(self.keys[at] == key, self.child[at], 0)


def _tfidf_pool(node: NodeView, min_n: int, max_n: int) -> list[tuple[tuple, int]]:
    """The pool's (n-gram, n-gram id) pairs for sizes min_n..max_n, checked as onnxruntime
    checks them (the id indexes ngram_indexes and weights)."""
    counts = [int(c) for c in _required(node, "ngram_counts")]
    indexes = [int(i) for i in _required(node, "ngram_indexes")]
    if not counts:
        raise ValueError("TfIdfVectorizer: attribute 'ngram_counts' must not be empty")
    if max_n > len(counts):
        raise ValueError(f"TfIdfVectorizer: attribute 'max_gram_length' ({max_n}) exceeds the "
                         f"{len(counts)} sizes in 'ngram_counts'")
    if not indexes or min(indexes) < 0:
        raise ValueError("TfIdfVectorizer: attribute 'ngram_indexes' must be non-empty and "
                         "non-negative")
    pool_strings = node.attr("pool_strings")
    if pool_strings is not None:   # pool_strings wins over pool_int64s, as in onnxruntime
        pool: list = [_text(v) for v in pool_strings]
        which = "pool_strings"
    else:
        pool = [int(v) for v in node.attr("pool_int64s") or ()]
        which = "pool_int64s"
    if not pool:
        raise ValueError("TfIdfVectorizer: a non-empty 'pool_strings' or 'pool_int64s' is required")
    grams: list[tuple[tuple, int]] = []
    ngram_id = 0
    for size, begin in enumerate(counts, start=1):
        end = counts[size] if size < len(counts) else len(pool)
        if not 0 <= begin <= end <= len(pool) or (end - begin) % size:
            raise ValueError(f"TfIdfVectorizer: attribute 'ngram_counts' {counts} does not "
                             f"split the {len(pool)} items of '{which}' into whole {size}-grams")
        n_grams = (end - begin) // size
        if ngram_id + n_grams > len(indexes):
            raise ValueError(f"TfIdfVectorizer: attribute 'ngram_indexes' has {len(indexes)} "
                             f"values, fewer than the n-grams in '{which}'")
        if min_n <= size <= max_n:
            seen = set()
            for k in range(n_grams):
                gram = tuple(pool[begin + k * size:begin + (k + 1) * size])
                if gram in seen:
                    raise ValueError(f"TfIdfVectorizer: '{which}' holds the {size}-gram {gram} "
                                     "twice")
                seen.add(gram)
                grams.append((gram, ngram_id + k))
        ngram_id += n_grams
    return grams


# Inputs of up to this many items are counted by a Python loop (numpy's per-call overhead
# dominates there: batch 1 of a few dozen tokens), larger ones with numpy.
_SMALL_TFIDF_INPUT = 100


@op("TfIdfVectorizer", since=9)
def make_tfidf_vectorizer(node: NodeView, ctx: ProviderContext) -> Kernel:
    """Counts of the pool's n-grams (sizes min..max, gaps of up to ``max_skip_count`` items
    between their items) in each row of a [C] or [B, C] input: [out] or [B, out] float32.
    As in onnxruntime (1.2x): 1-grams are counted once whatever the skip; ``weights[k]`` weighs
    n-gram k; a column sums its n-grams' counts (TF) or weighted counts (TFIDF); in IDF mode it
    is the weight of the n-gram found last (skip by skip, position by position, shortest
    first) among those that share the column, or 1 without weights."""
    mode = _text(_required(node, "mode"))
    if mode not in ("TF", "IDF", "TFIDF"):   # case-sensitive, as in onnxruntime
        raise ValueError(f"TfIdfVectorizer: attribute 'mode' must be TF, IDF or TFIDF, "
                         f"got {mode!r}")
    min_n = int(_required(node, "min_gram_length"))
    max_n = int(_required(node, "max_gram_length"))
    max_skip = int(_required(node, "max_skip_count"))
    if min_n <= 0 or max_n < min_n:
        raise ValueError(f"TfIdfVectorizer: attributes 'min_gram_length' ({min_n}) and "
                         f"'max_gram_length' ({max_n}) need 0 < min <= max")
    if max_skip < 0:
        raise ValueError(f"TfIdfVectorizer: attribute 'max_skip_count' must be non-negative, "
                         f"got {max_skip}")
    grams = _tfidf_pool(node, min_n, max_n)
    indexes = np.asarray(node.attr("ngram_indexes"), dtype=np.int64)
    out_size = int(indexes.max()) + 1
    weights = node.attr("weights")
    weights = None if weights is None or len(weights) == 0 else np.asarray(weights, np.float32)
    if weights is not None and weights.size != indexes.size:
        raise ValueError(f"TfIdfVectorizer: attribute 'weights' has {weights.size} values, "
                         f"'ngram_indexes' {indexes.size}")
    if mode == "TF" or (mode == "TFIDF" and weights is None):
        weights = None   # plain counts
    pool = _NgramPool(grams)
    used_columns = indexes[[gram_id for _, gram_id in grams]]
    # IDF where n-grams share a column: which was found last decides, so events carry an order
    ordered = mode == "IDF" and weights is not None and (
        np.unique(used_columns).size < used_columns.size)

    def events(ids1: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """For every n-gram found in [B, C] shifted vocabulary ids: its flat output index (row *
        out + column), its id, and (``ordered``) onnxruntime's order of finding it."""
        c = ids1.shape[1]
        flats, gram_ids, keys = [], [], []

        def found(node1: np.ndarray, skip: int, n: int) -> None:
            g = pool.gram1[node1].ravel()
            at = np.flatnonzero(g >= 0)
            g = g[at]
            rows, starts = np.divmod(at, node1.shape[1])
            flats.append(rows * out_size + indexes[g])
            gram_ids.append(g)
            if ordered:   # skip by skip, then position by position, then shortest first
                keys.append(((skip - 1) * c + starts) * max_n + (n - 1))

        if min_n == 1:
            found(ids1, 1, 1)
        for skip in range(1, max_skip + 2) if max_n >= 2 else ():
            node1 = ids1   # node1[:, s]: the (shifted) trie node of the n-gram starting at s
            for n in range(2, max_n + 1):
                span = skip * (n - 1)
                if span >= c:
                    break
                node1 = pool.extend1(node1[:, :c - span], ids1[:, span:])
                if n >= min_n:
                    found(node1, skip, n)
                if not node1.any():
                    break
        empty = np.empty(0, np.int64)
        cat = (lambda parts: np.concatenate(parts) if parts else empty)  # noqa: E731
        return cat(flats), cat(gram_ids), cat(keys) if ordered else None

    def weigh(b: int, flat: np.ndarray, gram_ids: np.ndarray,
              keys: np.ndarray | None) -> np.ndarray:
        y = np.zeros(b * out_size, np.float32)   # most of it stays zero: written sparsely
        if not flat.size:
            return y
        if mode != "IDF":   # counts or sums of weights, accumulated in float32 as onnxruntime
            np.add.at(y, flat, np.float32(1) if weights is None else weights[gram_ids])
        elif keys is None:  # one n-gram per column (or no weights): its weight where found
            y[flat] = 1.0 if weights is None else weights[gram_ids]
        else:               # several: the weight of the one found last
            order = np.lexsort((keys, flat))
            flat, gram_ids = flat[order], gram_ids[order]
            last = np.append(flat[1:] != flat[:-1], True)
            y[flat[last]] = weights[gram_ids[last]]
        return y

    indexes_list = indexes.tolist()
    weights_list = None if weights is None else weights.tolist()
    ngram_counter = getattr(_native.native(), "NgramCounter", None)
    # the native counter runs `small`'s loop on every row (items looked up in pool.vocab)
    counter = None if ngram_counter is None else ngram_counter(
        pool.vocab, pool.gram_of, pool.edges, pool.V, indexes_list, weights_list or [],
        ("TF", "IDF", "TFIDF").index(mode), min_n, max_n, max_skip, out_size).run
    gram_of, edges, vocab_get, v = pool.gram_of, pool.edges, pool.vocab.get, pool.V

    def small(rows: list[list]) -> np.ndarray:
        """onnxruntime's loop itself, in Python, for a few dozen items; the rows are one list
        of Python floats until the end (a fancy assignment per row costs more)."""
        y = [0.0] * (len(rows) * out_size)
        edge = edges.get
        idf = mode == "IDF"
        for r, row in enumerate(rows):
            ids = [vocab_get(t, -1) for t in row]
            c, acc, first_size = len(ids), {}, min_n
            found: list[int] = []   # n-gram ids, in onnxruntime's order
            for skip in range(1, max_skip + 2):
                for s in range(c - skip * (first_size - 1)):
                    node = ids[s]
                    if node < 0:
                        continue
                    if first_size == 1 and gram_of[node] >= 0:
                        found.append(gram_of[node])
                    pos, n = s + skip, 2
                    while n <= max_n and pos < c:
                        tok = ids[pos]
                        node = edge(node * v + tok, -1) if tok >= 0 else -1
                        if node < 0:
                            break
                        if n >= first_size and gram_of[node] >= 0:
                            found.append(gram_of[node])
                        pos += skip
                        n += 1
                if first_size == 1:   # 1-grams are counted in the first pass only
                    first_size = 2
                    if first_size > max_n:
                        break
            for g in found:
                col = indexes_list[g]
                w = 1.0 if weights_list is None else weights_list[g]
                acc[col] = w if idf else acc.get(col, 0.0) + w
            base = r * out_size
            for col, w in acc.items():
                y[base + col] = w
        return np.array(y, np.float32).reshape(len(rows), out_size)

    def kernel(x: np.ndarray) -> np.ndarray:
        if counter is not None and x.ndim == 2 and x.shape[0] and x.dtype == object:
            return counter(x)   # the tokens of a Tokenizer
        x = np.asarray(x)
        if x.dtype.kind in "SU":
            x = _strings(x)
        elif x.dtype != object and x.dtype not in (np.int32, np.int64):
            raise ValueError(f"TfIdfVectorizer: input must be string, int32 or int64, got "
                             f"{x.dtype}")
        if x.ndim > 2 or (x.ndim == 2 and x.shape[0] == 0):
            raise ValueError(f"TfIdfVectorizer: input must be [C] or [B, C] with B > 0, "
                             f"got {x.shape}")
        rows = x.reshape(1, -1) if x.ndim < 2 else x
        if counter is not None:
            y = counter(rows)
        elif rows.size <= _SMALL_TFIDF_INPUT:
            y = small(rows.tolist())
        else:
            y = weigh(rows.shape[0], *events(pool.ids1(rows))).reshape(rows.shape[0], out_size)
        return y if x.ndim == 2 else y.reshape(out_size)

    return kernel
