"""Long numeric attributes read at numpy's speed, and kept as arrays.

onnx-ir builds an ``INTS`` or ``FLOATS`` attribute by converting every element in a Python
generator (``tuple(int(v) for v in proto.ints)``, ~0.3 us an element). Most models carry short
lists, but tree ensembles converted from scikit-learn, LightGBM or XGBoost carry a dozen
lists of one entry per tree node (a 100-tree random forest holds over a million numbers) and
SVMs their support vectors and coefficients: reading them was most of such a session's
creation, and kernels then turned the tuples back into arrays.

Here a list of ``_MIN_LEN`` elements or more becomes an :class:`ArrayAttr`: the values in a
read-only numpy array (protobuf's repeated fields hand numpy their buffer: ~1 ns an element),
and the tuple of Python ints or floats onnx-ir's attributes hold built only when something
reads ``.value`` (a rewrite rule, saving the model, a kernel asking ``NodeView.attr``).
Kernels read the array with :meth:`onnxplex.NodeView.attr_array`. Everything else goes to
onnx-ir unchanged.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from . import wire as _wire
from .maptype import wrap_serde

_MIN_LEN = 32   # (below it the generator is as fast)

_LISTS = {
    onnx.AttributeProto.INTS: (ir.AttributeType.INTS, "ints", np.int64),
    onnx.AttributeProto.FLOATS: (ir.AttributeType.FLOATS, "floats", np.float32),
}


class ArrayAttr(ir.Attr):
    """An ``INTS``/``FLOATS`` attribute whose values are kept in a read-only numpy array
    (``array``); ``value`` is the same tuple an onnx-ir attribute holds, built on first use."""

    __slots__ = ("array",)

    def __init__(self, name: str, type: ir.AttributeType, array: np.ndarray, *,
                 doc_string: str | None = None) -> None:
        super().__init__(name, type, None, doc_string=doc_string)
        array.flags.writeable = False
        self.array = array

    @property
    def value(self) -> tuple:
        if self._value is None:
            self._value = tuple(self.array.tolist())
        return self._value


class StringsAttr(ir.Attr):
    """A long ``STRINGS`` attribute of ASCII text, kept as its values joined by NULs
    (``joined``, read from the serialized attribute with numpy: no Python object an element;
    ``starts``: where each value begins in it); ``value`` is the same tuple of ``str`` an onnx-ir
    attribute holds, built on first use. :func:`string_codes` given that very tuple matches
    ``joined`` instead of the strings."""

    __slots__ = ("joined", "starts")

    def __init__(self, name: str, joined: bytes, starts: np.ndarray, *,
                 doc_string: str | None = None) -> None:
        super().__init__(name, ir.AttributeType.STRINGS, None, doc_string=doc_string)
        self.joined = joined
        self.starts = starts

    @property
    def value(self) -> tuple:
        if self._value is None:
            value = tuple(self.joined.decode("ascii").split("\0"))
            _BUILT[id(value)] = self   # (the attribute holds the tuple: its id stays its own)
            self._value = value
        return self._value


# id(StringsAttr.value) -> the attribute, while it lives
_BUILT: weakref.WeakValueDictionary[int, StringsAttr] = weakref.WeakValueDictionary()


def _read_attribute(original, proto: onnx.AttributeProto, *args, **kwargs):
    kind = _LISTS.get(proto.type)
    if kind is None or proto.ref_attr_name:
        if proto.type == onnx.AttributeProto.STRINGS and not proto.ref_attr_name \
                and len(proto.strings) >= _MIN_LEN:
            doc = proto.doc_string or None
            joined = _ascii_strings(proto) if len(proto.strings) >= _WIRE_MIN else None
            if joined is not None:
                return StringsAttr(proto.name, *joined, doc_string=doc)
            strings = _long_strings(proto)
            if strings is not None:
                return ir.Attr(proto.name, ir.AttributeType.STRINGS, strings, doc_string=doc)
        return original(proto, *args, **kwargs)
    attr_type, field, dtype = kind
    values = getattr(proto, field)
    if len(values) < _MIN_LEN:
        return original(proto, *args, **kwargs)
    return ArrayAttr(proto.name, attr_type, np.array(values, dtype=dtype),
                     doc_string=proto.doc_string or None)


_STRINGS_FIELD = 9    # AttributeProto.strings
_STRINGS_TAG = 0x4A   # its key: field 9, length-delimited
# From how many values numpy's fixed costs pay (tens of calls of a few us each): reading a
# STRINGS attribute off the wire; matching values to codes on a StringsAttr's joined text, or
# on text joined first.
_WIRE_MIN = 2048
_CODES_MIN_OWN = 2048
_CODES_MIN_JOIN = 8192


def _ascii_strings(proto: onnx.AttributeProto) -> tuple[bytes, np.ndarray] | None:
    """A long ``STRINGS`` attribute's values joined by NULs, and where each starts there;
    read from the serialized attribute with numpy (``proto.strings`` hands out a Python object
    an element: ~60 ns each). None unless every value is ASCII text without NUL, shorter than
    128 bytes and without ``J`` (the strings' field key), the attribute's other fields before
    them. On the wire each value is the key byte, its length byte and its bytes: the key bytes
    found must chain from the first to the last value, lengths included, which only the real
    layout does."""
    n = len(proto.strings)
    wire = proto.SerializeToString()
    try:   # the first value's field (after the name: one field or few)
        start = next(first for field, _, first, _, _ in _wire._fields(wire, 0, len(wire))
                     if field == _STRINGS_FIELD)
    except (_wire._Malformed, StopIteration):
        return None
    buf = np.frombuffer(wire, np.uint8)
    heads = np.flatnonzero(buf[start:] == _STRINGS_TAG)
    if heads.size < n:
        return None
    heads = heads[:n] + start
    sizes = buf[np.minimum(heads + 1, buf.size - 1)]
    after = heads + 2 + sizes
    end = int(after[-1])
    if (heads[0] != start or end > buf.size or sizes.max() >= 0x80
            or not np.array_equal(after[:-1], heads[1:])):
        return None
    block = buf[start:end].copy()
    block[heads + 1 - start] = 0   # each length byte becomes the NUL before its value
    # a NUL or key byte in a value, text not ASCII: the general path
    if (block.size - np.count_nonzero(block) != n
            or np.count_nonzero(block == _STRINGS_TAG) != n or (block >= 0x80).any()):
        return None
    # the values: between the length bytes (now NULs), once the key bytes are taken out
    return (block.tobytes().translate(None, bytes([_STRINGS_TAG]))[1:],
            heads - np.arange(start, start + n))


def _long_strings(proto: onnx.AttributeProto) -> list[str] | None:
    """A long ``STRINGS`` attribute's values decoded in one call (a tree ensemble's
    ``nodes_modes`` holds one per tree node: decoding each was ~0.1 us an element); None when
    it holds a NUL or text that is not UTF-8 (onnx-ir reads it then, and refuses what it
    refuses)."""
    values = proto.strings
    try:
        strings = b"\0".join(values).decode("utf-8").split("\0")
    except UnicodeDecodeError:
        return None
    return strings if len(strings) == len(values) else None


def string_codes(values: Sequence[Any], table: Mapping[str, int]) -> np.ndarray:
    """``table[v]`` for each of ``values`` (a STRINGS attribute's tuple) as int64, -1 for a
    value not in ``table`` (or not a ``str``). A long list is matched with numpy on its joined
    text (a :class:`StringsAttr`'s own, for the tuple it built), by length and then 8 bytes at
    a time; a short or unusual one (a NUL in a value or key) one by one."""
    n = len(values)
    attr = _BUILT.get(id(values))
    if attr is not None and attr._value is values:
        return attr_codes(attr, table)
    if n < _CODES_MIN_JOIN or any("\0" in k for k in table):
        return _codes_one_by_one(values, table)
    try:
        joined = "\0".join(values).encode("utf-8")
    except (TypeError, UnicodeEncodeError):   # bytes values, lone surrogates
        return _codes_one_by_one(values, table)
    ends = np.flatnonzero(np.frombuffer(joined, np.uint8) == 0)
    if ends.size != n - 1:   # a value with a NUL
        return _codes_one_by_one(values, table)
    starts = np.empty(n, np.intp)
    starts[0] = 0
    starts[1:] = ends + 1
    return _joined_codes(joined, starts, table)


def attr_codes(attr: StringsAttr, table: Mapping[str, int]) -> np.ndarray:
    """:func:`string_codes` of a :class:`StringsAttr`'s values, read from its joined text
    (its tuple of ``str`` is not built)."""
    if len(attr.starts) < _CODES_MIN_OWN or any("\0" in k for k in table):
        return _codes_one_by_one(attr.value, table)
    return _joined_codes(attr.joined, attr.starts, table)


def _joined_codes(joined: bytes, starts: np.ndarray, table: Mapping[str, int]) -> np.ndarray:
    """The codes of the values held in ``joined`` (separated by NULs; ``starts``: where each
    begins), matched by length and then 8 bytes at a time."""
    n = len(starts)
    codes = np.full(n, -1, np.int64)
    keys = [(k.encode("utf-8"), code) for k, code in table.items()]
    if not keys:
        return codes
    sizes = np.empty(n, np.intp)
    sizes[:-1] = starts[1:] - 1
    sizes[-1] = len(joined)
    sizes -= starts
    longest = max(len(k) for k, _ in keys)
    # the 8 bytes from each offset, as a little-endian uint64 (zeros past the end)
    padded = joined + bytes(longest + 8)
    words = np.ndarray((len(joined) + longest + 1,), "<u8", padded, strides=(1,))
    by_size: dict[int, list[tuple[bytes, int]]] = {}
    for key, code in keys:
        by_size.setdefault(len(key), []).append((key, code))
    for size, group in by_size.items():
        which = np.flatnonzero(sizes == size)
        if which.size == 0:
            continue
        first = starts[which]
        hits = [np.ones(which.size, bool) for _ in group]
        for at in range(0, size, 8):
            part = words[first + at]
            if size - at < 8:
                part &= (1 << 8 * (size - at)) - 1
            for hit, (key, _) in zip(hits, group):
                hit &= part == int.from_bytes(key[at:at + 8], "little")
        for hit, (_, code) in zip(hits, group):
            codes[which[hit]] = code
    return codes


def _codes_one_by_one(values: Sequence[Any], table: Mapping[str, int]) -> np.ndarray:
    try:   # (one C-level map)
        return np.fromiter(map(table.__getitem__, values), np.int64, count=len(values))
    except (KeyError, TypeError):
        get = table.get
        return np.fromiter((get(v, -1) if type(v) is str else -1 for v in values), np.int64,
                           count=len(values))


@functools.cache
def install() -> None:
    """Route onnx-ir's attribute reader through :func:`_read_attribute` (idempotent)."""
    wrap_serde("_deserialize_attribute", _read_attribute)
