"""Long numeric attributes read at numpy's speed.

onnx-ir builds an ``INTS`` or ``FLOATS`` attribute by converting every element in a Python
generator (``tuple(int(v) for v in proto.ints)``, ~0.3 us an element). Most models carry short
lists, but tree ensembles converted from scikit-learn, LightGBM or XGBoost carry a dozen
lists of one entry per tree node: a 100-tree random forest holds over a million numbers, and
reading them was ~0.5 s of its session creation, 3x onnxruntime's whole creation. Here a list
of ``_MIN_LEN`` elements or more goes through numpy instead (protobuf's repeated fields hand
numpy their buffer: ~65 ns an element for the same tuple of Python ints or floats, the float32
values exactly as the generator reads them). Everything else goes to onnx-ir unchanged.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnx_ir as ir

from ._maptype import wrap_serde

_MIN_LEN = 32   # (below it the generator is as fast)

_LISTS = {
    onnx.AttributeProto.INTS: (ir.AttrInt64s, "ints"),
    onnx.AttributeProto.FLOATS: (ir.AttrFloat32s, "floats"),
}


def _read_attribute(original, proto: onnx.AttributeProto, *args, **kwargs):
    kind = _LISTS.get(proto.type)
    if kind is None or proto.ref_attr_name:
        return original(proto, *args, **kwargs)
    cls, field = kind
    values = getattr(proto, field)
    if len(values) < _MIN_LEN:
        return original(proto, *args, **kwargs)
    attr = cls(proto.name, (), doc_string=proto.doc_string or None)
    attr._value = tuple(np.array(values).tolist())   # (the value onnx-ir's __init__ makes)
    return attr


@functools.cache
def install() -> None:
    """Route onnx-ir's attribute reader through :func:`_read_attribute` (idempotent)."""
    wrap_serde("_deserialize_attribute", _read_attribute)
