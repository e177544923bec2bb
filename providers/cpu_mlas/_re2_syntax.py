"""RE2 regular expressions, as onnxruntime's text kernels compile them: matched by RE2 itself
(google-re2), with a translation to Python's syntax for analysing them.

onnxruntime's ``com.microsoft::Tokenizer`` compiles its ``separators`` and ``tokenexp`` with RE2
in leftmost-longest mode (``RE2::Options::set_longest_match(true)``). :class:`Re2Pattern` does
the same with google-re2 (RE2's semantics and linear time). :func:`translate` writes an RE2
pattern in Python's syntax, which the pattern analysis parses (can it match nothing; are its
matches runs of one character class). What the translation takes care of:

* ``\\d \\w \\s \\b \\B`` (and the negations) are ASCII in RE2; ``\\s`` is ``[\\t\\n\\f\\r ]``,
  without the ``\\v`` that Python's ASCII ``\\s`` has. ``[[:alpha:]]``-style classes (ASCII).
* ``$`` outside multi-line mode is the end of the text only (Python's also matches before a
  final newline); ``\\z`` is Python's ``\\Z``.
* ``(?i)`` in the middle of a group applies to the rest of that group (Python 3.11 refuses
  global flags there); ``(?U)`` and lazy quantifiers change nothing in leftmost-longest mode.
* ``\\x{...}``, ``\\Q...\\E``, octal escapes (``\\12`` is octal in RE2, a backreference in
  Python), ``(?<name>...)``, and ``{`` that does not start a valid repeat (a literal in RE2).
* Python-only syntax RE2 refuses is refused by RE2 itself.

A pattern the translation does not take (``\\p{...}`` Unicode classes, ``\\C``) still runs on
RE2, without the analysis' fast paths.
"""

from __future__ import annotations

import logging
import re
import string

try:  # the parse tree tells which patterns leftmost-first already matches longest
    from re import _constants as _sre_c
    from re import _parser as _sre_parse
except ImportError:  # pragma: no cover - other Pythons: every pattern takes the exact path
    _sre_c = _sre_parse = None

logger = logging.getLogger(__name__)

_MAX_CP = 0x10FFFF
Ranges = list[tuple[int, int]]


def _ranges(spec: str) -> Ranges:
    """``"0-9A-Z_"`` -> [(48, 57), (65, 90), (95, 95)] (ASCII specs only)."""
    out, i = [], 0
    while i < len(spec):
        if i + 2 < len(spec) and spec[i + 1] == "-":
            out.append((ord(spec[i]), ord(spec[i + 2])))
            i += 3
        else:
            out.append((ord(spec[i]), ord(spec[i])))
            i += 1
    return out


_PERL = {"d": _ranges("0-9"), "w": _ranges("0-9A-Za-z_"), "s": _ranges("\t\n\f\r ")}
_POSIX = {
    "alnum": _ranges("0-9A-Za-z"), "alpha": _ranges("A-Za-z"), "ascii": [(0, 0x7F)],
    "blank": _ranges("\t "), "cntrl": [(0, 0x1F), (0x7F, 0x7F)], "digit": _ranges("0-9"),
    "graph": _ranges("!-~"), "lower": _ranges("a-z"), "print": _ranges(" -~"),
    "punct": _ranges("!-/:-@[-`{-~"), "space": _ranges("\t\n\v\f\r "), "upper": _ranges("A-Z"),
    "word": _ranges("0-9A-Za-z_"), "xdigit": _ranges("0-9A-Fa-f"),
}
_SIMPLE_ESCAPES = {"a": 7, "f": 12, "t": 9, "n": 10, "r": 13, "v": 11}
_FLAG_LETTERS = "imsU"
_FLAG_ASCII, _FLAG_DOTALL = int(re.ASCII), int(re.DOTALL)
_MAX_REPEAT = 1000


def complement_ranges(ranges: Ranges) -> Ranges:
    out, lo = [], 0
    for a, b in sorted(ranges):
        if a > lo:
            out.append((lo, a - 1))
        lo = max(lo, b + 1)
    if lo <= _MAX_CP:
        out.append((lo, _MAX_CP))
    return out


def _cp(c: int) -> str:
    if c < 0x100:
        return f"\\x{c:02x}"
    return f"\\u{c:04x}" if c < 0x10000 else f"\\U{c:08x}"


def _class(ranges: Ranges, negated: bool = False) -> str:
    body = "".join(_cp(a) if a == b else f"{_cp(a)}-{_cp(b)}" for a, b in ranges)
    if not body:  # an empty set: nothing (negated: anything)
        return "[\\x00-\\U0010ffff]" if negated else "[^\\x00-\\U0010ffff]"
    return f"[{'^' if negated else ''}{body}]"


class _Frame:
    """One open group: its multi-line flag and the scoped-flag groups opened inside it."""

    __slots__ = ("multiline", "opened")

    def __init__(self, multiline: bool) -> None:
        self.multiline = multiline
        self.opened: list[str] = []   # '(?i:'-style openers to close at ')' and reopen after '|'


class _Translator:
    def __init__(self, pattern: str, what: str) -> None:
        self.p, self.i, self.what = pattern, 0, what
        self.out: list[str] = []
        self.frames = [_Frame(False)]
        self.can_repeat = False   # the last item may take a quantifier

    def fail(self, why: str) -> ValueError:
        return ValueError(f"{self.what}: cannot use the RE2 pattern {self.p!r}: {why}")

    # ---------------------------------------------------------------------------------------
    def run(self) -> str:
        p = self.p
        while self.i < len(p):
            c = p[self.i]
            self.i += 1
            if c == "\\":
                self.escape()
            elif c == "[":
                self.out.append(self.char_class())
                self.can_repeat = True
            elif c == "(":
                self.open_group()
            elif c == ")":
                self.close_group()
            elif c == "|":
                top = self.frames[-1]
                self.out.append(")" * len(top.opened) + "|" + "".join(top.opened))
                self.can_repeat = False
            elif c in "*+?":
                self.quantifier(c)
            elif c == "{" and self.repeat_braces() is not None:
                self.quantifier("{")
            elif c == "$":
                self.out.append("$" if self.frames[-1].multiline else "\\Z")
                self.can_repeat = True
            elif c in ".^":
                self.out.append(c)
                self.can_repeat = True
            else:
                self.out.append(re.escape(c))
                self.can_repeat = True
        if len(self.frames) > 1:
            raise self.fail("missing )")
        self.out.append(")" * len(self.frames[0].opened))
        return "".join(self.out)

    # ---------------------------------------------------------------------------------------
    def repeat_braces(self) -> tuple[int, int | None, int] | None:
        """``{n}``, ``{n,}`` or ``{n,m}`` at ``self.i`` (after the ``{``): (n, m, length)."""
        m = re.match(r"(\d+)(,(\d*))?\}", self.p[self.i:])
        if m is None:
            return None
        lo = int(m.group(1))
        hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
        return lo, hi, m.end()

    def quantifier(self, c: str) -> None:
        if not self.can_repeat:
            raise self.fail("missing argument to repetition operator")
        if c == "{":
            lo, hi, length = self.repeat_braces()
            if lo > _MAX_REPEAT or (hi is not None and (hi > _MAX_REPEAT or hi < lo)):
                raise self.fail("invalid repetition size")
            self.out.append("{" + self.p[self.i:self.i + length])
            self.i += length
        else:
            self.out.append(c)
        nxt = self.p[self.i:self.i + 1]
        if nxt == "?":   # lazy: the same in leftmost-longest mode
            self.i += 1
            nxt = self.p[self.i:self.i + 1]
        if nxt and nxt in "*+?":   # ** and possessive *+ are errors in RE2
            raise self.fail("bad repetition operator")
        if nxt == "{":
            self.i += 1
            again = self.repeat_braces() is not None
            self.i -= 1
            if again:
                raise self.fail("bad repetition operator")
        self.can_repeat = False

    # ---------------------------------------------------------------------------------------
    def flags(self, text: str, multiline: bool) -> tuple[str, bool]:
        """RE2 flags ``ims-U`` -> Python's (U dropped), and the multi-line flag they leave."""
        on, _, off = text.partition("-")
        if (not text or "-" in off or (text.endswith("-"))
                or any(f not in _FLAG_LETTERS for f in on + off)
                or len(set(on + off)) != len(on + off)):
            raise self.fail(f"invalid or unsupported flags (?{text}")
        if "m" in on:
            multiline = True
        if "m" in off:
            multiline = False
        on, off = on.replace("U", ""), off.replace("U", "")
        return on + ("-" + off if off else ""), multiline

    def open_group(self) -> None:
        p, top = self.p, self.frames[-1]
        if not p.startswith("?", self.i):
            self.frames.append(_Frame(top.multiline))
            self.out.append("(?:")   # captures are never read
            self.can_repeat = False
            return
        rest = p[self.i + 1:]
        named = re.match(r"(?:P?<)([A-Za-z0-9_]+)>", rest)
        if named:
            self.i += 1 + named.end()
            self.frames.append(_Frame(top.multiline))
            self.out.append("(?:")
            self.can_repeat = False
            return
        m = re.match(r"([A-Za-z-]*)([:)])", rest)
        if m is None:
            raise self.fail(f"invalid or unsupported group (?{rest[:2]}")
        if m.group(0) == ":":   # (?:re)
            py, multiline = "", top.multiline
        else:
            py, multiline = self.flags(m.group(1), top.multiline)
        self.i += 1 + m.end()
        if m.group(2) == ":":   # (?flags:re)
            self.frames.append(_Frame(multiline))
            self.out.append(f"(?{py}:" if py else "(?:")
        else:                   # (?flags): to the end of the current group
            top.multiline = multiline
            if py:
                top.opened.append(f"(?{py}:")
                self.out.append(f"(?{py}:")
        self.can_repeat = False

    def close_group(self) -> None:
        if len(self.frames) == 1:
            raise self.fail("unexpected )")
        top = self.frames.pop()
        self.out.append(")" * len(top.opened) + ")")
        self.can_repeat = True

    # ---------------------------------------------------------------------------------------
    def hex_or_octal(self, c: str) -> int | None:
        """The code point of a ``\\x`` or octal escape whose letter ``c`` was just read."""
        p = self.p
        if c == "x":
            if p.startswith("{", self.i):
                end = p.find("}", self.i)
                digits = p[self.i + 1:end] if end > 0 else ""
                if not digits or any(d not in string.hexdigits for d in digits):
                    raise self.fail("invalid escape sequence \\x{")
                self.i = end + 1
            else:
                digits = p[self.i:self.i + 2]
                if len(digits) < 2 or any(d not in string.hexdigits for d in digits):
                    raise self.fail("invalid escape sequence \\x")
                self.i += 2
            value = int(digits, 16)
            if value > _MAX_CP:
                raise self.fail("invalid escape sequence \\x{...}: too large")
            return value
        if c in "01234567":
            # \0 and \1-\7 followed by an octal digit are octal (up to 3 digits in all);
            # a lone \1-\7 is a backreference, which RE2 does not have
            if c != "0" and not (self.i < len(p) and p[self.i] in "01234567"):
                raise self.fail(f"invalid escape sequence \\{c} (backreferences are not RE2)")
            digits = c
            while len(digits) < 3 and self.i < len(p) and p[self.i] in "01234567":
                digits += p[self.i]
                self.i += 1
            return int(digits, 8)
        return None

    def literal_escape(self, c: str) -> int:
        """The code point of an escape that stands for one character, else raise."""
        cp = self.hex_or_octal(c)
        if cp is not None:
            return cp
        if c in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[c]
        if c.isascii() and not c.isalnum():   # \. \\ \_ ...: the character itself
            return ord(c)
        raise self.fail(f"invalid or unsupported escape sequence \\{c}")

    def escape(self) -> None:
        p = self.p
        if self.i >= len(p):
            raise self.fail("trailing \\")
        c = p[self.i]
        self.i += 1
        self.can_repeat = True
        if c.lower() in _PERL:
            self.out.append(_class(_PERL[c.lower()], negated=c.isupper()))
        elif c in "bB":
            self.out.append(f"(?a:\\{c})")   # ASCII word boundary, as RE2's
            self.can_repeat = False
        elif c == "A":
            self.out.append("\\A")
            self.can_repeat = False
        elif c == "z":
            self.out.append("\\Z")
            self.can_repeat = False
        elif c == "Q":
            end = p.find("\\E", self.i)
            text = p[self.i:] if end < 0 else p[self.i:end]
            self.i = len(p) if end < 0 else end + 2
            self.out.append(f"(?:{re.escape(text)})" if text else "")
            self.can_repeat = bool(text)
        elif c == "E":   # a stray \E ends nothing
            self.can_repeat = False
        elif c in "pP":
            raise self.fail(f"Unicode classes \\{c} are not supported by onnxplex")
        elif c == "C":
            raise self.fail("\\C (any byte) is not supported by onnxplex")
        else:
            self.out.append(re.escape(chr(self.literal_escape(c))))

    # ---------------------------------------------------------------------------------------
    def char_class(self) -> str:
        p = self.p
        negated = p.startswith("^", self.i)
        self.i += negated
        ranges: Ranges = []
        first = True
        while True:
            if self.i >= len(p):
                raise self.fail("missing ]")
            c = p[self.i]
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            posix = re.match(r"\[:(\^?)([a-z]+):\]", p[self.i:])
            if posix:
                if posix.group(2) not in _POSIX:
                    raise self.fail(f"invalid character class [:{posix.group(2)}:]")
                cls = _POSIX[posix.group(2)]
                ranges += complement_ranges(cls) if posix.group(1) else cls
                self.i += posix.end()
                continue
            lo = self.class_char()
            if isinstance(lo, list):
                ranges += lo
                continue
            if p.startswith("-", self.i) and self.i + 1 < len(p) and p[self.i + 1] != "]":
                self.i += 1
                hi = self.class_char()
                if isinstance(hi, list) or hi < lo:
                    raise self.fail("invalid character class range")
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        return _class(ranges, negated)

    def class_char(self) -> int | Ranges:
        """One character of a class (its code point), or a Perl class's ranges."""
        p = self.p
        c = p[self.i]
        self.i += 1
        if c != "\\":
            return ord(c)
        if self.i >= len(p):
            raise self.fail("trailing \\")
        c = p[self.i]
        self.i += 1
        if c.lower() in _PERL:
            cls = _PERL[c.lower()]
            return complement_ranges(cls) if c.isupper() else list(cls)
        if c in "pP":
            raise self.fail(f"Unicode classes \\{c} are not supported by onnxplex")
        return self.literal_escape(c)


def translate(pattern: str, what: str) -> str:
    """The Python pattern that matches what the RE2 ``pattern`` matches (no capturing groups)."""
    return _Translator(pattern, what).run()


def _merge(ranges: Ranges) -> Ranges:
    out: Ranges = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


_WORD = _merge(_PERL["w"])


def _one_char(item, dotall: bool) -> Ranges | None:
    """The code points one parse-tree item matches when it matches exactly one character."""
    c = _sre_c
    op_, av = item
    if op_ is c.LITERAL:
        return [(av, av)]
    if op_ is c.NOT_LITERAL:
        return complement_ranges([(av, av)])
    if op_ is c.ANY:
        return [(0, _MAX_CP)] if dotall else complement_ranges([(10, 10)])
    if op_ is c.IN:
        negated, ranges = False, []
        for k, (iop, iav) in enumerate(av):
            if iop is c.NEGATE and k == 0:
                negated = True
            elif iop is c.LITERAL:
                ranges.append((iav, iav))
            elif iop is c.RANGE:
                ranges.append(iav)
            else:   # categories, case-folded ranges...
                return None
        ranges = _merge(ranges)
        return complement_ranges(ranges) if negated else ranges
    if op_ is c.SUBPATTERN:
        _, add, rm, sub = av
        if (add | rm) & ~(_FLAG_ASCII | _FLAG_DOTALL) or len(sub) != 1:
            return None
        return _one_char(sub[0], bool((dotall or add & _FLAG_DOTALL) and not rm & _FLAG_DOTALL))
    return None


def _is_boundary(item) -> bool:
    """``(?a:\\b)``, the translation of RE2's ``\\b``."""
    c = _sre_c
    op_, av = item
    if op_ is c.SUBPATTERN and av[1] == _FLAG_ASCII and not av[2] and len(av[3]) == 1:
        op_, av = av[3][0]
    return op_ is c.AT and av is c.AT_BOUNDARY


def _char_runs(tree) -> tuple[Ranges, int, bool] | None:
    """``(ranges, shortest, single)`` when the leftmost-longest matches of a pattern, searched
    one after the other, are exactly the maximal runs of characters of one class (``ranges``)
    of at least ``shortest`` characters (``single``: each character of the class alone):
    ``C``, ``C+``, ``CC+``, ``C{n,}``..., and ``\\b`` at either end when C is ``\\w``. None for
    any other pattern."""
    c = _sre_c
    if tree.state.flags & ~(re.UNICODE | re.ASCII):
        return None
    items = list(tree)
    bounded = False
    while items and _is_boundary(items[0]):
        items.pop(0)
        bounded = True
    while items and _is_boundary(items[-1]):
        items.pop()
        bounded = True
    if not items:
        return None
    ranges, shortest, runs = None, 0, False
    for op_, av in items:
        if op_ is c.MAX_REPEAT:
            lo, hi, sub = av
            if hi is not c.MAXREPEAT or lo < 1 or len(sub) != 1:
                return None
            cls, runs = _one_char(sub[0], False), True
            shortest += lo
        else:
            cls = _one_char((op_, av), False)
            shortest += 1
        if cls is None or (ranges is not None and cls != ranges):
            return None
        ranges = cls
    if not runs:   # C alone: each character; CC... (a fixed length) is not a run
        return (ranges, 1, True) if shortest == 1 and not bounded else None
    if bounded and ranges != _WORD:   # \b is where a \w run starts and ends
        return None
    return ranges, shortest, False


class Re2Pattern:
    """A compiled RE2 pattern searched with leftmost-longest semantics (RE2's longest_match),
    matched by RE2 itself (google-re2: linear time on any pattern, where Python's backtracking
    ``re`` could take exponential time). The translation to Python's syntax serves only the
    analysis of the pattern: whether it can match nothing (``never_empty``) and whether its
    matches are runs of one character class (``char_runs``: a native tokenizer finds those
    without a regex); a pattern RE2 accepts that the translation does not (``\\p{L}``) just
    gets no fast path."""

    def __init__(self, pattern: str, what: str) -> None:
        import re2

        self.pattern = pattern
        options = re2.Options()
        options.longest_match = True
        try:
            self.regex = re2.compile(pattern, options)
        except re2.error as e:
            raise ValueError(f"{what}: cannot use the RE2 pattern {pattern!r}: {e}") from None
        self.simple = True   # (RE2 finds the leftmost-longest match itself)
        self.never_empty, self.char_runs = False, None
        if _sre_parse is not None:
            try:
                tree = _sre_parse.parse(translate(pattern, what))
            except (ValueError, re.error):
                tree = None
            if tree is not None:
                self.never_empty = tree.getwidth()[0] > 0
                self.char_runs = _char_runs(tree)

    def search(self, text: str, pos: int) -> tuple[int, int] | None:
        """(start, end) of the leftmost-longest match at or after ``pos``, or ``None``."""
        m = self.regex.search(text, pos)
        return None if m is None else m.span()
