"""cpu_mlas string kernels against onnxruntime (StringNormalizer, TfIdfVectorizer) and onnx's
reference evaluator (StringConcat, StringSplit, RegexFullMatch)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from ._oracle import check, ours

ort.set_default_logger_severity(3)


def S(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


# --------------------------------------------------------------------------------------------
# StringNormalizer
# --------------------------------------------------------------------------------------------


# ORT's StringNormalizer needs an installed en_US.UTF-8 locale for case changes, which test
# machines often lack; the expected values below follow its semantics (whole-element stopword
# removal, case-insensitive comparison by lower-casing, per-character Unicode case mapping: "ß"
# has no one-letter upper case and stays, as onnxruntime gives with locale="C.UTF-8"; see
# test_text_ops.py, which compares with it).
X_NORM = ("Monday", "monday", "TUESDAY", "Straße", "ÉTÉ", "", "wed nes", "Wed")
EXPECTED_NORM = {
    ("NONE", 0): ["TUESDAY", "Straße", "ÉTÉ", "", "wed nes"],
    ("NONE", 1): ["Monday", "TUESDAY", "Straße", "ÉTÉ", "", "wed nes", "Wed"],
    ("LOWER", 0): ["tuesday", "straße", "été", "", "wed nes"],
    ("LOWER", 1): ["monday", "tuesday", "straße", "été", "", "wed nes", "wed"],
    ("UPPER", 0): ["TUESDAY", "STRAßE", "ÉTÉ", "", "WED NES"],
    ("UPPER", 1): ["MONDAY", "TUESDAY", "STRAßE", "ÉTÉ", "", "WED NES", "WED"],
}


@pytest.mark.parametrize("action", ["NONE", "LOWER", "UPPER"])
@pytest.mark.parametrize("sensitive", [0, 1])
@pytest.mark.parametrize("two_d", [False, True])
def test_string_normalizer(action, sensitive, two_d):
    x = S(*X_NORM)
    if two_d:
        x = x.reshape(1, -1)
    (y,) = ours("StringNormalizer", [x], opset=10, case_change_action=action,
                is_case_sensitive=sensitive, stopwords=["monday", "wed"])
    want = EXPECTED_NORM[action, sensitive]
    assert y.dtype == object and y.shape == ((1, len(want)) if two_d else (len(want),))
    assert y.ravel().tolist() == want


def test_string_normalizer_matches_ort_without_case_change():
    check("StringNormalizer", [S(*X_NORM)], opset=10, is_case_sensitive=1,
          stopwords=["monday", "wed"], oracle="ort")


@pytest.mark.parametrize("two_d", [False, True])
def test_string_normalizer_everything_removed(two_d):
    x = S("a", "A")
    if two_d:
        x = x.reshape(1, -1)
    (y,) = ours("StringNormalizer", [x], opset=10, stopwords=["a"])
    assert y.shape == ((1, 1) if two_d else (1,)) and y.ravel()[0] == ""


def test_string_normalizer_rejects_matrix():
    with pytest.raises(ValueError):
        ours("StringNormalizer", [S("a", "b", "c", "d").reshape(2, 2)], opset=10)


# --------------------------------------------------------------------------------------------
# StringConcat, StringSplit, RegexFullMatch
# --------------------------------------------------------------------------------------------


def test_string_concat_broadcast_and_const_bytes():
    x = S("a", "bé", "").reshape(3, 1)
    y = S("1", "2")
    check("StringConcat", [x, y], opset=20, oracle="ref")
    # a constant string initializer reaches the kernel as numpy bytes: still str out
    (z,) = ours("StringConcat", [x, y], opset=20, const_inputs=(1,))
    assert z.dtype == object and z[1, 0] == "bé1" and isinstance(z[1, 0], str)


@pytest.mark.parametrize("attrs", [{}, {"delimiter": "."}, {"delimiter": "", "maxsplit": 1},
                                   {"delimiter": "-", "maxsplit": 1}, {"delimiter": "ab"}])
def test_string_split(attrs):
    x = S("a.b..c", "  x  y ", "", "o-n-n-x", "abcabab", "é.ü").reshape(2, 3)
    check("StringSplit", [x], n_outputs=2, opset=20, oracle="ref", **attrs)


def test_string_split_counts_and_padding():
    y, z = ours("StringSplit", [S("a b c", "", "d")], n_outputs=2, opset=20)
    assert z.dtype == np.int64 and z.tolist() == [3, 0, 1]
    assert y.shape == (3, 3) and y.tolist() == [["a", "b", "c"], ["", "", ""], ["d", "", ""]]
    y, z = ours("StringSplit", [S().reshape(0, 2)], n_outputs=2, opset=20)
    assert y.shape == (0, 2, 0) and z.shape == (0, 2)


def test_regex_full_match():
    # RE2's \w is ASCII, as in onnxruntime: "ÄBC9" does not match (onnx's reference, on
    # Python's re, says it does)
    x = S("abc123", "abc", "123abc", "", "ÄBC9").reshape(5, 1)
    (y,) = check("RegexFullMatch", [x], opset=20, oracle="ort", pattern=r"\w+\d")
    assert y.dtype == bool and y.ravel().tolist() == [True, False, False, False, False]


def test_regex_bad_pattern():
    with pytest.raises(ValueError):
        ours("RegexFullMatch", [S("a")], opset=20, pattern="(")


# --------------------------------------------------------------------------------------------
# TfIdfVectorizer
# --------------------------------------------------------------------------------------------

INT_POOL = dict(ngram_counts=[0, 4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6],
                pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams,skip", [((1, 1), 0), ((2, 2), 0), ((1, 2), 0), ((1, 2), 3),
                                        ((2, 2), 5)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("weighted", [False, True])
def test_tfidf_ints(mode, grams, skip, dtype, weighted):
    x = np.array([[1, 1, 3, 3, 3, 7, 5, 6, 7, 8, 6, 7], [8, 8, 7, 7, 6, 5, 5, 4, 2, 3, 5, 4]],
                 dtype=dtype)
    extra = {"weights": [0.5, 2.0, 1.0, 3.0, 0.25, 1.5, 4.0]} if weighted else {}
    check("TfIdfVectorizer", [x], opset=9, mode=mode, min_gram_length=grams[0],
          max_gram_length=grams[1], max_skip_count=skip, oracle="ort", **INT_POOL, **extra)
    check("TfIdfVectorizer", [x[0]], opset=9, mode=mode, min_gram_length=grams[0],
          max_gram_length=grams[1], max_skip_count=skip, oracle="ort", **INT_POOL, **extra)


@pytest.mark.parametrize("grams,skip", [((1, 1), 0), ((1, 2), 2), ((2, 3), 1)])
def test_tfidf_strings(grams, skip):
    pool = ["a", "b", "c", "a", "b", "b", "c", "x", "y", "a", "b", "c"]
    x = S("a", "b", "c", "b", "c", "a", "x", "y", "a", "b", "c", "b").reshape(2, 6)
    check("TfIdfVectorizer", [x], opset=9, mode="TF", min_gram_length=grams[0],
          max_gram_length=grams[1], max_skip_count=skip, ngram_counts=[0, 3, 9],
          ngram_indexes=[3, 2, 1, 0, 4, 5, 6, 7], pool_strings=pool, oracle="ort")


def test_tfidf_empty_rows():
    (y,) = ours("TfIdfVectorizer", [np.zeros((2, 0), np.int64)], opset=9, mode="TF",
                min_gram_length=1, max_gram_length=2, max_skip_count=0, **INT_POOL)
    assert y.shape == (2, 7) and y.dtype == np.float32 and not y.any()
