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

import numpy as np
import onnx
import onnx_ir as ir

from ._maptype import wrap_serde

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


def _read_attribute(original, proto: onnx.AttributeProto, *args, **kwargs):
    kind = _LISTS.get(proto.type)
    if kind is None or proto.ref_attr_name:
        if proto.type == onnx.AttributeProto.STRINGS and not proto.ref_attr_name:
            strings = _long_strings(proto)
            if strings is not None:
                return ir.Attr(proto.name, ir.AttributeType.STRINGS, strings,
                               doc_string=proto.doc_string or None)
        return original(proto, *args, **kwargs)
    attr_type, field, dtype = kind
    values = getattr(proto, field)
    if len(values) < _MIN_LEN:
        return original(proto, *args, **kwargs)
    return ArrayAttr(proto.name, attr_type, np.array(values, dtype=dtype),
                     doc_string=proto.doc_string or None)


def _long_strings(proto: onnx.AttributeProto) -> list[str] | None:
    """A long ``STRINGS`` attribute's values decoded in one call (a tree ensemble's
    ``nodes_modes`` holds one per tree node: decoding each was ~0.1 us an element); None when
    it is short, or holds a NUL or text that is not UTF-8 (onnx-ir reads it then, and
    refuses what it refuses)."""
    values = proto.strings
    if len(values) < _MIN_LEN:
        return None
    try:
        strings = b"\0".join(values).decode("utf-8").split("\0")
    except UnicodeDecodeError:
        return None
    return strings if len(strings) == len(values) else None


@functools.cache
def install() -> None:
    """Route onnx-ir's attribute reader through :func:`_read_attribute` (idempotent)."""
    wrap_serde("_deserialize_attribute", _read_attribute)
