"""The text ops scikit-learn conversions use, against onnxruntime: com.microsoft Tokenizer,
StringNormalizer, TfIdfVectorizer, and skl2onnx's TfidfVectorizer / CountVectorizer graphs run
end to end through an onnxplex session on cpu_mlas."""

from __future__ import annotations

import random
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import onnxplex
from onnxplex.providers.cpu_mlas import _native
from onnxplex.providers.cpu_mlas._re2_syntax import Re2Pattern

from ._no_native import without_native
from ._oracle import assert_same, ours

ort.set_default_logger_severity(3)
MS = "com.microsoft"
START, END = "\x02", "\x03"


def S(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def node_model(op_type: str, x: np.ndarray, out_type: int, domain: str = "",
               **attrs) -> onnx.ModelProto:
    node = helper.make_node(op_type, ["x"], ["y"], domain=domain or None, **attrs)
    in_type = TP.STRING if x.dtype == object else helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", in_type, None)],
                              [helper.make_tensor_value_info("y", out_type, None)])
    imports = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=imports, ir_version=9)


def ort_node(op_type: str, x: np.ndarray, out_type: int, domain: str = "",
             **attrs) -> np.ndarray:
    model = node_model(op_type, x, out_type, domain, **attrs)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


# The Tokenizer's character-class runs and TfIdfVectorizer's counts have native kernels
# (register_text.cpp); tests run both them and the Python / numpy paths.
NATIVE = _native.native() is not None and hasattr(_native.native(), "CharRuns")




def ours_all_paths(op_type: str, x: np.ndarray, **kw) -> list[tuple[str, np.ndarray]]:
    """cpu_mlas's output with the native module (when built) and without it."""
    (got,) = ours(op_type, [x], **kw)
    out = [("native" if NATIVE else "python", got)]
    if NATIVE:
        with without_native():
            (got,) = ours(op_type, [x], **kw)
        out.append(("python", got))
    return out


def check_node(op_type: str, x: np.ndarray, out_type: int, domain: str = "",
               **attrs) -> np.ndarray:
    """cpu_mlas's kernel (native and Python paths) and onnxruntime on one node: same dtype,
    shape and values."""
    want = ort_node(op_type, x, out_type, domain, **attrs)
    outs = ours_all_paths(op_type, x, domain=domain, opset=17, **attrs)
    for path, got in outs:
        try:
            assert_same([got], [want])
        except AssertionError as e:
            raise AssertionError(f"{path} path: {e}") from None
    return outs[0][1]


def both_refuse(op_type: str, x: np.ndarray, out_type: int, domain: str = "",
                match: str = "", **attrs) -> None:
    """onnxruntime refuses the node, and cpu_mlas raises a ValueError naming ``match``."""
    with pytest.raises(Exception):  # noqa: B017, PT011 - ORT's own error classes
        ort_node(op_type, x, out_type, domain, **attrs)
    with pytest.raises(ValueError, match=match):
        ours(op_type, [x], domain=domain, opset=17, **attrs)


# --------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------

SKL_SEPARATORS = [" ", "[.]", "\\?", ",", ";", ":", "\\!", "\\(", "\\)", "\n", '\\"', "'", "-",
                  "\\[", "\\]", "@"]
TEXTS = S("Hello, world. How are you?  Fine!x;y:z", "", "a-b (c) [d] e@f 'g' \"h\"\nnew",
          "Straße  ÉTÉ été, naïve!", "   ", "one")


def tok(**attrs) -> dict:
    return {"mark": 0, "pad_value": "#", "mincharnum": 1} | attrs


@pytest.mark.parametrize("attrs", [
    tok(separators=SKL_SEPARATORS),
    tok(separators=SKL_SEPARATORS, mark=1, pad_value="<pad>"),
    tok(separators=SKL_SEPARATORS, mincharnum=3),
    tok(separators=[" "]),
    tok(separators=["\\s"]),
    tok(separators=["\\s+", "[.,!?]"]),
    tok(separators=[""]),
    tok(separators=[""], mark=1),
    tok(tokenexp="."),
    tok(tokenexp=".", mark=1),
    tok(tokenexp="[a-zA-Z0-9_]+"),
    tok(tokenexp="[a-zA-Z0-9_]+", mark=1, mincharnum=2),
    tok(tokenexp="\\b\\w\\w+\\b"),
    tok(tokenexp="\\w+", mincharnum=4),
    tok(tokenexp="\\S+"),
    tok(tokenexp="[^ ]+", separators=[","]),    # separators win over tokenexp
], ids=lambda a: ",".join(f"{k}={v!r}"[:30] for k, v in a.items()
                          if k in ("separators", "tokenexp", "mark", "mincharnum")))
@pytest.mark.parametrize("shape", [(6,), (2, 3), (6, 1)])
def test_tokenizer_attributes_and_shapes(attrs, shape):
    x = TEXTS.reshape(shape)
    y = check_node("Tokenizer", x, TP.STRING, MS, **attrs)
    assert y.shape[:-1] == shape


@pytest.mark.parametrize("attrs,texts", [
    # RE2 semantics Python's re does not have by itself
    (tok(separators=["\\s"]), ["a\vb\tc\u00a0d\ne\u2003f\rg\fh"]),   # \s: ASCII, no \v
    (tok(tokenexp="\\d+"), ["12 \u0661\u0662\u0663 4"]),                # \d: ASCII digits
    (tok(tokenexp="\\b\\w\\w+\\b"), ["héllo wörld ab1 x"]),          # \b, \w: ASCII
    (tok(tokenexp="a|ab"), ["abab xab"]),                              # leftmost-longest
    (tok(tokenexp="(ab)?(abcd)?"), ["abcd ab"]),
    (tok(separators=["a|ab"]), ["xabyaz"]),
    (tok(tokenexp="a$"), ["aa\n", "aa"]),                              # $: end of text only
    (tok(tokenexp="(?m)^a$"), ["a\na\nb"]),
    (tok(tokenexp="(?i)é"), ["ÉéE"]),
    (tok(tokenexp="a(?i)b|c"), ["aB AB C"]),                           # flags mid-group
    (tok(tokenexp="[[:^alpha:]]+"), ["ab1é,c"]),
    (tok(tokenexp="x\\x{e9}\\101\\Qa.b\\E"), ["xéAa.b xéAaxb"]),
    (tok(tokenexp="a{,2}"), ["a{,2} aa"]),                             # a literal in RE2
    (tok(tokenexp="a+?"), ["aaa"]),                                    # lazy: still longest
    (tok(tokenexp="(?s:.)b"), ["a\nb"]),
    # empty matches, mincharnum restarts, chained separators
    (tok(tokenexp="b*"), ["abbcb"]),
    (tok(tokenexp="[a-z]+", mincharnum=3), ["ab c defg hi"]),
    (tok(separators=["b*"]), ["abbcb"]),
    (tok(separators=["\\b"]), ["ab cd"]),
    (tok(separators=["$"]), ["ab"]),
    (tok(separators=["^"]), ["ab"]),
    (tok(separators=["", " "]), ["a b"]),
    (tok(separators=[" ", "^x"]), ["xa xb x"]),
    (tok(separators=[" ", "x$"]), ["ax bx x"]),
    (tok(separators=["ab", "b"]), ["xabyabbz"]),
    (tok(separators=[" ", ","], mincharnum=3), ["ab abc,abcd  a,"]),
])
def test_tokenizer_re2_semantics(attrs, texts):
    check_node("Tokenizer", S(*texts), TP.STRING, MS, **attrs)


def _random_re2(rng: random.Random, depth: int = 0) -> str:
    """A random RE2 pattern over "abc ": classes, alternations, optional and repeated groups,
    lazy quantifiers, anchors, flags: where leftmost-first and leftmost-longest part."""
    out = ""
    for _ in range(rng.randint(1, 3)):
        c = rng.random()
        if depth > 2 or c < 0.45:
            atom = rng.choice(["a", "b", "c", " ", "[ab]", "[^a ]", ".", "\\w", "\\s", "\\d",
                               "[[:alpha:]]", "\\x61", "(?i:A)", "\\W"])
        elif c < 0.6:
            atom = f"({_random_re2(rng, depth + 1)}|{_random_re2(rng, depth + 1)})"
        elif c < 0.7:
            atom = f"(?:{_random_re2(rng, depth + 1)})?"
        elif c < 0.8:
            out += rng.choice(["\\b", "^", "$", "\\B"])
            continue
        else:
            atom = f"(?P<g{rng.randint(0, 9)}>{_random_re2(rng, depth + 1)})"   # may repeat
        if rng.random() < 0.4:
            atom += rng.choice(["*", "+", "?", "{1,2}", "*?", "{2}"])
        out += atom
    return out


@pytest.mark.parametrize("seed", range(6))
def test_tokenizer_random_patterns(seed):
    """Random RE2 patterns as tokenexp and as separators give what onnxruntime gives."""
    rng = random.Random(seed)
    for _ in range(12):
        pattern = _random_re2(rng)
        texts = S(*("".join(rng.choice("abc A1") for _ in range(rng.randint(0, 12)))
                    for _ in range(6)))
        for attrs in (tok(tokenexp=pattern, mincharnum=rng.choice([1, 2])),
                      tok(separators=[pattern], mark=1)):
            try:
                want = ort_node("Tokenizer", texts, TP.STRING, MS, **attrs)
            except Exception:  # noqa: BLE001 - RE2 refuses it (e.g. "?*"): so must onnxplex
                with pytest.raises(ValueError, match="Tokenizer: attribute"):
                    ours("Tokenizer", [texts], domain=MS, opset=17, **attrs)
                continue
            for _, got in ours_all_paths("Tokenizer", texts, domain=MS, opset=17, **attrs):
                assert_same([got], [want])


def test_tokenizer_marks_and_padding():
    y = check_node("Tokenizer", S("a b c", "dd ee", ""), TP.STRING, MS,
                   **tok(separators=[" "], mark=1))
    assert y.tolist() == [[START, "a", "b", "c", END], [START, "dd", "ee", END, "#"],
                          [START, END, "#", "#", "#"]]


@pytest.mark.parametrize("x,shape", [
    (S("", ""), (2, 0)), (S(), (0,)), (S().reshape(2, 0), (2, 0)), (S().reshape(0, 3), (0, 0)),
    (S("", "").reshape(1, 2), (1, 2, 0)),
])
@pytest.mark.parametrize("attrs", [tok(separators=[" "], mark=1), tok(separators=[""], mark=1),
                                   tok(tokenexp="\\w+", mark=1)])
def test_tokenizer_no_tokens(x, shape, attrs):
    """No row has a token: the last dimension is 0, marks or not."""
    y = check_node("Tokenizer", x, TP.STRING, MS, **attrs)
    assert y.shape == shape


@pytest.mark.parametrize("attrs", [tok(separators=[" ", ","], mark=1),
                                   tok(tokenexp="\\w+", mark=1)])
def test_tokenizer_only_separators(attrs):
    y = check_node("Tokenizer", S(" , ", "  ", ","), TP.STRING, MS, **attrs)
    assert y.shape == (3, 0)


@pytest.mark.parametrize("attrs,match", [
    (tok(tokenexp="(?u)\\b\\w\\w+\\b"), "tokenexp"),   # scikit-learn's pattern is not RE2
    (tok(tokenexp="(?=a)a"), "tokenexp"),
    (tok(tokenexp="(a)\\1"), "tokenexp"),
    (tok(tokenexp="\\w+\\Z"), "tokenexp"),
    (tok(tokenexp="a*+"), "tokenexp"),
    (tok(tokenexp="a{1001}"), "tokenexp"),
    (tok(tokenexp=""), "tokenexp"),
    (tok(separators=["(", "a"]), "separators"),
    (tok(separators=[" "], mincharnum=0), "mincharnum"),
    (tok(separators=[""], mincharnum=2), "mincharnum"),
    (tok(tokenexp=".", mincharnum=2), "mincharnum"),
    ({"mark": 0, "pad_value": "#", "mincharnum": 1}, "separators"),
])
def test_tokenizer_bad_attributes(attrs, match):
    both_refuse("Tokenizer", S("ab"), TP.STRING, MS, match=match, **attrs)


def test_tokenizer_missing_attributes():
    for name in ("mark", "pad_value", "mincharnum"):
        attrs = {k: v for k, v in tok(separators=[" "]).items() if k != name}
        with pytest.raises(ValueError, match=name):
            ours("Tokenizer", [S("a")], domain=MS, opset=17, **attrs)


# Tokens that are runs of one character class take a native scan (no regex): what decides it
W = [(48, 57), (65, 90), (95, 95), (97, 122)]


@pytest.mark.parametrize("pattern,runs", [
    ("[a-zA-Z0-9_]+", (W, 1, False)),
    ("\\w+", (W, 1, False)),
    ("\\w{3,}", (W, 3, False)),
    ("\\b\\w\\w+\\b", (W, 2, False)),
    ("\\b\\w+", (W, 1, False)),
    ("\\s+", ([(9, 10), (12, 13), (32, 32)], 1, False)),
    ("\\S+", ([(0, 8), (11, 11), (14, 31), (33, 0x10FFFF)], 1, False)),
    ("[^ ]+", ([(0, 31), (33, 0x10FFFF)], 1, False)),
    (".", ([(0, 9), (11, 0x10FFFF)], 1, True)),
    ("(?s:.)+", ([(0, 0x10FFFF)], 1, False)),
    ("[.]", ([(46, 46)], 1, True)),
    ("\\?", ([(63, 63)], 1, True)),
    ("[[:alpha:]é]+", ([(65, 90), (97, 122), (233, 233)], 1, False)),
    ("\\w\\w", None), ("\\b[a-z]+\\b", None), ("\\b\\w", None), ("a+b+", None),
    ("a*", None), ("(?i)a+", None), ("[a-z]{2,5}", None), ("ab", None), ("ab|c", None),
    ("a|b", ([(97, 98)], 1, True)),   # one character either way
])
def test_char_runs_patterns(pattern, runs):
    assert Re2Pattern(pattern, "t").char_runs == runs


RUN_TEXTS = S("Hello, wörld_1! x", "", "  ", "ab\x00cd\x02e\x03", "Straße ÉTÉ été naïve",
              "\u4e2d\u6587 \u03a9mega\u2003tab\tnl\nv\vff\fcr\r\u00a0nb", "a\U0001f600bb 😀",
              "x", "ab-cd (ef) [gh] i@j 'k' \"l\"", "aa bbb cccc ddddd")


@pytest.mark.parametrize("attrs", [
    tok(tokenexp="[a-zA-Z0-9_]+"),
    tok(tokenexp="[a-zA-Z0-9_]+", mark=1, pad_value="<p>"),
    tok(tokenexp="[a-zA-Z0-9_]+", mincharnum=3),
    tok(tokenexp="\\b\\w\\w+\\b"),
    tok(tokenexp="\\b\\w\\w+\\b", mincharnum=4),
    tok(tokenexp="\\w{3,}", mark=1),
    tok(tokenexp="\\S+"),
    tok(tokenexp="[^ ]+", mincharnum=2),
    tok(tokenexp=".+"),
    tok(tokenexp="(?s:.)+", mark=1),
    tok(tokenexp="[a-zé\\x{4e2d}-\\x{9fff}\\x{1f600}]+"),
    tok(tokenexp="[^a-z ]"),
    tok(tokenexp="[a-z]", mincharnum=2),
    tok(tokenexp="."),
    tok(tokenexp=".", mark=1, pad_value=""),
    tok(separators=[""], mark=1),
    tok(separators=SKL_SEPARATORS),
    tok(separators=SKL_SEPARATORS, mincharnum=3, mark=1),
    tok(separators=["\\s+", "[.,!?]"]),
    tok(separators=["\\s", "\\x{3a9}", "\\x{1f600}"], mark=1),
    tok(separators=["é"]),
], ids=lambda a: ",".join(f"{k}={v!r}"[:30] for k, v in a.items()))
@pytest.mark.parametrize("shape", [(10,), (2, 5), (10, 1)])
def test_tokenizer_character_runs(attrs, shape):
    """The native scan of character-class runs: every kind of str (ASCII, Latin-1, BMP,
    astral), empty and all-separator strings, marks, padding, mincharnum."""
    x = RUN_TEXTS.reshape(shape)
    y = check_node("Tokenizer", x, TP.STRING, MS, **attrs)
    assert y.shape[:-1] == shape


def test_tokenizer_character_runs_non_contiguous():
    x = RUN_TEXTS.reshape(2, 5)[:, ::2]
    check_node("Tokenizer", x, TP.STRING, MS, **tok(tokenexp="\\w+"))


def test_tokenizer_character_runs_reused_kernel():
    """One session run on several inputs: the native scan reuses the str objects of tokens it
    made before (up to a bound: more distinct tokens than it keeps, long ones)."""
    model = node_model("Tokenizer", S("a"), TP.STRING, MS, **tok(tokenexp="[a-z0-9]+"))
    sess = onnxplex.InferenceSession(model.SerializeToString(), providers=["cpu_mlas"])
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    many = " ".join(f"w{i}" for i in rng.permutation(20000))
    for texts in (S("ab cd ab", "cd ab", "x" * 40 + " ab"), S(many[:50000], many[50000:]),
                  S("ab cd ab", "été ab cd", "x" * 40 + " ab"), S(many[::-1], "w1 w2 w3")):
        got = sess.run(None, {"x": texts})[0]
        want = ref.run(None, {"x": texts})[0]
        assert_same([got], [want])


def test_tokenizer_character_runs_bytes_items():
    """bytes among the items (constant initializers) are decoded first."""
    x = np.array([b"ab cd", "\u00e9t\u00e9 x".encode()], dtype=object)
    for _, got in ours_all_paths("Tokenizer", x, domain=MS, opset=17,
                                 **tok(tokenexp="[a-z]+")):
        assert got.tolist() == [["ab", "cd"], ["t", "x"]]


# --------------------------------------------------------------------------------------------
# StringNormalizer
# --------------------------------------------------------------------------------------------


def _locale_works(name: str) -> bool:
    try:
        ort_node("StringNormalizer", S("a"), TP.STRING, case_change_action="LOWER", locale=name)
    except Exception:  # noqa: BLE001 - not installed on this machine
        return False
    return True


# ORT's default locale (en_US.UTF-8) is often not installed; C.UTF-8 maps case the same way
UTF8 = "C.UTF-8"
needs_utf8 = pytest.mark.skipif(not _locale_works(UTF8), reason="no C.UTF-8 locale for ORT")
NORM_TEXTS = ("Monday", "monday", "TUESDAY", "Straße", "STRAẞE", "ÉTÉ", "", "wed nes", "Wed",
              "İstanbul", "ΣΑΣ", "ǅ", "ﬀ", "ᾀ", "K", "ŉ")


@needs_utf8
@pytest.mark.parametrize("action", ["NONE", "LOWER", "UPPER"])
@pytest.mark.parametrize("sensitive", [0, 1])
@pytest.mark.parametrize("locale", [UTF8, "C"])
@pytest.mark.parametrize("two_d", [False, True])
def test_string_normalizer(action, sensitive, locale, two_d):
    x = S(*NORM_TEXTS)
    if two_d:
        x = x.reshape(1, -1)
    check_node("StringNormalizer", x, TP.STRING, case_change_action=action,
               is_case_sensitive=sensitive, locale=locale,
               stopwords=["monday", "wed", "straße", "ǆ", "k", "été"])


@needs_utf8
@pytest.mark.parametrize("action", ["LOWER", "UPPER"])
def test_string_normalizer_default_locale_is_utf8(action):
    """Without a locale attribute onnxplex maps case as onnxruntime's en_US.UTF-8 default."""
    x = S(*NORM_TEXTS)
    (got,) = ours("StringNormalizer", [x], opset=17, case_change_action=action,
                  stopwords=["wed", "σας"])
    want = ort_node("StringNormalizer", x, TP.STRING, case_change_action=action,
                    stopwords=["wed", "σας"], locale=UTF8)
    assert_same([got], [want])


@needs_utf8
@pytest.mark.parametrize("two_d", [False, True])
def test_string_normalizer_all_removed(two_d):
    x = S("a", "A", "b").reshape((1, 3) if two_d else (3,))
    y = check_node("StringNormalizer", x, TP.STRING, stopwords=["a", "B"], locale=UTF8)
    assert y.ravel().tolist() == [""]


@pytest.mark.parametrize("action", ["LOWER", "UPPER"])
@pytest.mark.parametrize("locale", [UTF8, "C"])
def test_string_normalizer_ascii_and_other_items(action, locale):
    """No stopwords: ASCII strs are mapped natively (changed or not), the others in Python;
    bytes items (constant initializers) are decoded first."""
    texts = ("already lower", "MiXeD 123_!", "UPPER", "", "\x7f\x00@[`{", "Été", "ΣΑΣ",
             "İx", "ß", "a\U0001f600B")
    if _locale_works(UTF8) or locale == "C":
        check_node("StringNormalizer", S(*texts), TP.STRING, case_change_action=action,
                   locale=locale)
    x = np.array([b"Ab", "c\u00c9".encode()], dtype=object)
    for _, got in ours_all_paths("StringNormalizer", x, opset=17, case_change_action=action,
                                 locale=locale):
        want = {("LOWER", UTF8): ["ab", "cé"], ("UPPER", UTF8): ["AB", "CÉ"],
                ("LOWER", "C"): ["ab", "cÉ"], ("UPPER", "C"): ["AB", "CÉ"]}[action, locale]
        assert got.tolist() == want


def test_string_normalizer_bad_inputs_and_attributes():
    both_refuse("StringNormalizer", S("a"), TP.STRING, match="case_change_action",
                case_change_action="lower")
    for x in (S(), S().reshape(1, 0), S("a", "b", "c", "d").reshape(2, 2)):
        with pytest.raises(Exception):  # noqa: B017, PT011
            ort_node("StringNormalizer", x, TP.STRING, is_case_sensitive=1, stopwords=["a"])
        with pytest.raises(ValueError, match="input"):
            ours("StringNormalizer", [x], opset=17, is_case_sensitive=1, stopwords=["a"])


# --------------------------------------------------------------------------------------------
# TfIdfVectorizer
# --------------------------------------------------------------------------------------------


# Small inputs are counted by a Python loop, larger ones with numpy, walking the n-gram trie
# through a dense table (small vocabularies) or sorted keys: each case runs all three.
# The native counter (when built) does every size.
TFIDF_PATHS = {"python": {"_SMALL_TFIDF_INPUT": 10**9},
               "numpy-dense": {"_SMALL_TFIDF_INPUT": 0},
               "numpy-sorted": {"_SMALL_TFIDF_INPUT": 0, "_DENSE_TRIE_ENTRIES": 0}}


def check_tfidf(x: np.ndarray, **attrs) -> None:
    from onnxplex.providers.cpu_mlas import strings

    want = ort_node("TfIdfVectorizer", x, TP.FLOAT, **attrs)
    paths = dict(TFIDF_PATHS, native=None) if NATIVE else TFIDF_PATHS
    for path, settings in paths.items():
        if settings is None:
            (got,) = ours("TfIdfVectorizer", [x], opset=17, **attrs)
        else:
            with without_native(), pytest.MonkeyPatch.context() as mp:
                for name, value in settings.items():
                    mp.setattr(strings, name, value)
                (got,) = ours("TfIdfVectorizer", [x], opset=17, **attrs)
        try:
            assert_same([got], [want])
        except AssertionError as e:
            raise AssertionError(f"{path} path: {e}") from None


def random_pool(rng: np.random.Generator, words: list, sizes: tuple[int, ...], per_size: int):
    """ngram_counts, pool and a permutation for ngram_indexes: per_size distinct n-grams of each
    size (n-grams of the words, so that inputs drawn from them hit)."""
    counts, pool, n = [], [], 0
    for size in range(1, max(sizes) + 1):
        counts.append(len(pool))
        if size not in sizes:
            continue
        grams = {tuple(rng.choice(len(words), size)) for _ in range(per_size * 3)}
        for g in sorted(grams)[:per_size]:
            pool += [words[i] for i in g]
            n += 1
    return counts, pool, rng.permutation(n)


@pytest.mark.parametrize("kind", ["str", "int64", "int32"])
@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams,skip", [((1, 1), 0), ((1, 2), 0), ((2, 2), 0), ((1, 3), 2),
                                        ((2, 3), 1), ((3, 3), 3)])
@pytest.mark.parametrize("weighted", [False, True])
def test_tfidf_random_pools(kind, mode, grams, skip, weighted):
    rng = np.random.default_rng(hash((kind, mode, grams, skip, weighted)) % 2**32)
    words = [f"w{i}" for i in range(12)] if kind == "str" else list(range(3, 15))
    counts, pool, perm = random_pool(rng, words, tuple(range(1, grams[1] + 1)), 10)
    attrs = dict(mode=mode, min_gram_length=grams[0], max_gram_length=grams[1],
                 max_skip_count=skip, ngram_counts=counts, ngram_indexes=perm.tolist())
    attrs["pool_strings" if kind == "str" else "pool_int64s"] = pool
    if weighted:
        attrs["weights"] = rng.uniform(0.1, 3.0, perm.size).astype(np.float32).tolist()
    extra = ["unknown", "w99"] if kind == "str" else [0, 99]
    docs = rng.choice(np.array(words + extra, dtype=object if kind == "str" else kind),
                      (4, 15))
    check_tfidf(docs, **attrs)
    check_tfidf(docs[1], **attrs)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("weighted", [False, True])
def test_tfidf_shared_and_sparse_columns(mode, weighted):
    """Several n-grams on one column (IDF: the one found last decides: skip by skip, position
    by position, shortest first); columns no n-gram reaches stay zero."""
    attrs = dict(mode=mode, min_gram_length=1, max_gram_length=2, max_skip_count=1,
                 ngram_counts=[0, 3], ngram_indexes=[5, 0, 5, 2, 0],
                 pool_strings=["a", "b", "c", "a", "b", "b", "a"])
    if weighted:
        attrs["weights"] = [1.0, 2.0, 4.0, 8.0, 16.0]
    for row in (["a", "b", "c", "a", "x", "b", "c"], ["b", "a"], ["c", "a"], ["a", "c", "b"],
                ["b", "x", "a", "b"], ["x"]):
        check_tfidf(S(*row), **attrs)
    docs = S("a", "b", "c", "a", "b", "a", "c", "b").reshape(2, 4)
    check_tfidf(docs, **attrs)


@pytest.mark.parametrize("mode", ["TF", "TFIDF"])
def test_tfidf_characters(mode):
    """One-character tokens (char analyzers) are mapped by code point; a longer or empty token
    among them takes the general path."""
    chars = ["a", "b", " ", "é", "\U0001f600", "\n"]
    attrs = dict(mode=mode, min_gram_length=1, max_gram_length=3, max_skip_count=0,
                 ngram_counts=[0, 6, 12], ngram_indexes=list(range(10)),
                 pool_strings=chars + ["a", "b", " ", "é", "\U0001f600", "a", "a", "b", " "],
                 weights=[0.5, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    text = list("ab é\U0001f600a\nzab ab")
    for row in (text, text + ["ab"], text + [""], ["\U0001f601"] * 3):
        check_tfidf(S(*row).reshape(1, -1), **attrs)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
def test_tfidf_unicode_words(mode):
    """Words of every str kind (ASCII, Latin-1, BMP, astral), long ones, the empty string,
    a padding value; a batch large enough for the numpy paths."""
    words = ["ab", "été", "\u4e2d\u6587", "\U0001f600x", "", "#", "a" * 40, "b" * 17, "Ab",
             "e\u0301t\u00e9"]
    rng = np.random.default_rng(7)
    counts, pool, perm = random_pool(rng, words, (1, 2), 8)
    attrs = dict(mode=mode, min_gram_length=1, max_gram_length=2, max_skip_count=1,
                 ngram_counts=counts, ngram_indexes=perm.tolist(), pool_strings=pool,
                 weights=rng.uniform(0.1, 3.0, perm.size).astype(np.float32).tolist())
    docs = rng.choice(np.array(words + ["zz", "\U0001f601x", "a" * 39], dtype=object), (30, 9))
    check_tfidf(docs, **attrs)
    check_tfidf(docs[:1], **attrs)


def test_tfidf_empty_rows_and_scalar():
    attrs = dict(mode="TFIDF", min_gram_length=1, max_gram_length=2, max_skip_count=0,
                 ngram_counts=[0, 2], ngram_indexes=[1, 0, 2], pool_int64s=[4, 5, 4, 5],
                 weights=[0.5, 2.0, 3.0])
    for x in (np.zeros((3, 0), np.int64), np.zeros(0, np.int64), np.array(4, np.int64)):
        check_tfidf(x, **attrs)


@pytest.mark.parametrize("kind", ["str", "int64"])
def test_tfidf_no_ngram_of_the_counted_sizes(kind):
    pool = ["a", "b", "c"] if kind == "str" else [1, 2, 3]
    attrs = dict(mode="TF", min_gram_length=2, max_gram_length=2, max_skip_count=0,
                 ngram_counts=[0, 3], ngram_indexes=[0, 1, 2])
    attrs["pool_strings" if kind == "str" else "pool_int64s"] = pool
    x = np.array(pool * 40, dtype=object if kind == "str" else np.int64).reshape(2, -1)
    check_tfidf(x, **attrs)


@pytest.mark.parametrize("change,match", [
    ({"mode": "tf"}, "mode"),
    ({"min_gram_length": 0}, "min_gram_length"),
    ({"max_gram_length": 3}, "max_gram_length"),
    ({"max_skip_count": -1}, "max_skip_count"),
    ({"ngram_counts": [0, 5]}, "ngram_counts"),
    ({"ngram_indexes": [0, -1, 2]}, "ngram_indexes"),
    ({"weights": [1.0, 2.0]}, "weights"),
    ({"pool_strings": ["a", "a", "a", "b"]}, "twice"),
])
def test_tfidf_bad_attributes(change, match):
    attrs = dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=0,
                 ngram_counts=[0, 2], ngram_indexes=[0, 1, 2],
                 pool_strings=["a", "b", "a", "b"]) | change
    both_refuse("TfIdfVectorizer", S("a", "b"), TP.FLOAT, match=match, **attrs)


# --------------------------------------------------------------------------------------------
# scikit-learn conversions end to end
# --------------------------------------------------------------------------------------------

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A lazy dog sleeps; the quick fox runs!",
    "Is this the first document? Yes, it is the first.",
    "Fox and dog, fox and cat: friends (maybe).",
    "DOGS and CATS and foxes, 42 of them",
    "the",
    "",
    "Straße, café and naïve: ÉTÉ été",
    "runs-and-jumps @home 'quoted' \"double\" [x]",
    "  spaced   out   words  ",
]
STOP_WORDS = ["the", "and", "is", "a", "of"]
SEPARATORS = {"separators": [" ", "[.]", "\\?", ",", ";", ":", "\\!", "\\(", "\\)", "\n",
                             '\\"', "'", "-", "\\[", "\\]", "@"]}


def convert(estimator, options=None) -> onnx.ModelProto:
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import StringTensorType

    with warnings.catch_warnings():
        # stop words unused by char analyzers; skl2onnx: char analyzers are experimental
        warnings.simplefilter("ignore")
        estimator.fit(CORPUS)
        return convert_sklearn(estimator, initial_types=[("text", StringTensorType([None, 1]))],
                               target_opset=17,
                               options=None if options is None else {id(estimator): options})


def ort_copy(model: onnx.ModelProto) -> bytes:
    """The model for onnxruntime: StringNormalizer gets locale C.UTF-8 where it has none, since
    onnxruntime's default (en_US.UTF-8) may not be installed; both map case the same way."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in m.graph.node:
        if n.op_type == "StringNormalizer" and not any(a.name == "locale" for a in n.attribute):
            n.attribute.append(helper.make_attribute("locale", UTF8))
    return m.SerializeToString()


def _vectorizers():
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

    cases = []
    for cls in (TfidfVectorizer, CountVectorizer):
        for analyzer in ("word", "char"):
            for stop in (None, STOP_WORDS):
                cases.append(pytest.param(
                    cls, dict(analyzer=analyzer, ngram_range=(1, 2), stop_words=stop), None,
                    id=f"{cls.__name__}-{analyzer}-{'stop' if stop else 'nostop'}"))
    cases.append(pytest.param(CountVectorizer, dict(ngram_range=(1, 2)), SEPARATORS,
                              id="CountVectorizer-word-separators"))
    cases.append(pytest.param(TfidfVectorizer, dict(lowercase=False, binary=True),
                              {"tokenexp": "\\b\\w+\\b"}, id="TfidfVectorizer-cased-tokenexp"))
    return cases


@needs_utf8
@pytest.mark.parametrize("cls,params,options", _vectorizers())
def test_sklearn_text_vectorizers(cls, params, options):
    model = convert(cls(**params), options)
    sess = onnxplex.InferenceSession(model.SerializeToString(), providers=["cpu_mlas"])
    report = sess.get_provider_assignment().report()
    assert "onnx reference fallback" not in report, report
    ops = {n.op_type for n in model.graph.node}
    assert {"Tokenizer", "TfIdfVectorizer"} <= ops
    ref = ort.InferenceSession(ort_copy(model), providers=["CPUExecutionProvider"])
    docs = [np.array(CORPUS, dtype=object).reshape(-1, 1),
            np.array(["the quick dog and the lazy fox", "CATS? cats!"], dtype=object)
            .reshape(-1, 1)]
    for x in docs:
        got = sess.run(None, {"text": x})
        want = ref.run(None, {"text": x})
        assert_same(got, want, rtol=1e-4, atol=1e-5)
        assert np.count_nonzero(got[0]) > 0
