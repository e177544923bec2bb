"""ONNX map types in onnx-ir: ``map(K, V)`` values, which scikit-learn conversions use
(ZipMap's ``seq(map(int64, tensor(float)))`` probabilities, DictVectorizer's
``map(string, tensor(float))`` input, CastMap).

onnx-ir (1.1) declares a ``MapTypeProtocol`` but reads and writes no map type: its serde raises
``NotImplementedError`` on a ``map_type`` field, so such a model cannot be loaded at all. This
module supplies the missing type class and teaches onnx-ir's serde to read and write it,
losslessly (key type, value type, recursively, and denotations): :func:`install` wraps the
three serde functions that switch on the kind of a ``TypeProto``. onnx-ir and onnxscript call
them through the ``serde`` module's attributes (a sequence's element type is read by a
recursive call through the module's globals), so every reader and writer, onnxscript's shape
inference during constant folding included, sees map types from then on. The wrappers pass
every other type to the original functions untouched.

A map value is a ``dict`` at run time and a sequence of maps a ``list`` of dicts, as
onnxruntime's Python API takes and returns them.
"""

from __future__ import annotations

import functools
from typing import Any

import onnx
import onnx_ir as ir
from onnx_ir import serde

__all__ = ["MapType", "install"]

# The key types the ONNX spec allows for maps.
KEY_TYPES = frozenset({
    ir.DataType.STRING, ir.DataType.INT64, ir.DataType.INT32, ir.DataType.INT16,
    ir.DataType.INT8, ir.DataType.UINT64, ir.DataType.UINT32, ir.DataType.UINT16,
    ir.DataType.UINT8,
})


class MapType(ir.TypeProtocol):
    """``map(key_type, value_type)``: ``key_type`` an integer or string :class:`ir.DataType`,
    ``value_type`` any onnx-ir type (a tensor type, a sequence, another map...)."""

    __slots__ = ("key_type", "value_type", "denotation")

    def __init__(self, key_type: ir.DataType, value_type: ir.TypeProtocol, *,
                 denotation: str | None = None) -> None:
        key_type = ir.DataType(key_type)
        if key_type not in KEY_TYPES:
            raise ValueError(f"a map's key type must be an integer or string type, "
                             f"not {key_type.name}")
        self.key_type = key_type
        self.value_type = value_type
        self.denotation = denotation

    # onnx-ir's recursive types expose their element type as ``elem_type`` and its tensor
    # element type as ``dtype``; a map's element is its value.
    @property
    def elem_type(self) -> ir.TypeProtocol:
        return self.value_type

    @property
    def dtype(self) -> ir.DataType:
        return self.value_type.dtype

    @dtype.setter
    def dtype(self, value: ir.DataType) -> None:
        self.value_type.dtype = value

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, MapType) and self.key_type == other.key_type
                and self.value_type == other.value_type)

    def __hash__(self) -> int:
        return hash((MapType, self.key_type, self.value_type))

    def __repr__(self) -> str:
        return f"MapType({self.key_type!r}, {self.value_type!r})"

    def __str__(self) -> str:
        return f"map({self.key_type.name.lower()},{self.value_type})"


def _read_type(original, proto: onnx.TypeProto) -> Any:
    if not proto.HasField("map_type"):
        return original(proto)
    mt = proto.map_type
    if not mt.HasField("value_type"):
        raise ValueError(f"MapTypeProto must have value_type set: {proto}")
    value = serde.deserialize_type_proto_for_type(mt.value_type)
    if value is None:
        raise ValueError(f"MapTypeProto's value_type has no type: {proto}")
    return MapType(ir.DataType(mt.key_type), value, denotation=proto.denotation or None)


def _read_shape(original, proto: onnx.TypeProto) -> Any:
    # a map has no shape (onnxruntime gives it none either)
    return None if proto.HasField("map_type") else original(proto)


def _write_type(original, type_proto: onnx.TypeProto, from_: Any) -> None:
    if not isinstance(from_, MapType):
        original(type_proto, from_)
        return
    if from_.denotation:
        type_proto.denotation = from_.denotation
    type_proto.map_type.key_type = from_.key_type.value
    serde.serialize_type_into(type_proto.map_type.value_type, from_.value_type)


def wrap_serde(name: str, handler) -> None:
    """Replace ``onnx_ir.serde.<name>`` by ``handler(original, *args)`` (once)."""
    original = getattr(serde, name)
    if getattr(original, "_onnxplex_wrapped", False):
        return
    wrapper = functools.update_wrapper(lambda *a: handler(original, *a), original)
    wrapper._onnxplex_wrapped = True
    setattr(serde, name, wrapper)


@functools.cache
def install() -> None:
    """Teach onnx-ir's serde map types (idempotent; done when :mod:`onnxplex` loads a graph)."""
    wrap_serde("deserialize_type_proto_for_type", _read_type)
    wrap_serde("deserialize_type_proto_for_shape", _read_shape)
    wrap_serde("serialize_type_into", _write_type)

