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
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from onnx_ir import serde

from .._dtypes import ort_type_string

__all__ = ["MapType", "install", "map_value", "plain_map_test"]

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
    wrapper = functools.update_wrapper(lambda *a, **kw: handler(original, *a, **kw), original)
    wrapper._onnxplex_wrapped = True
    setattr(serde, name, wrapper)


@functools.cache
def install() -> None:
    """Teach onnx-ir's serde map types (idempotent; done when :mod:`onnxplex` loads a graph)."""
    wrap_serde("deserialize_type_proto_for_type", _read_type)
    wrap_serde("deserialize_type_proto_for_shape", _read_shape)
    wrap_serde("serialize_type_into", _write_type)


# --------------------------------------------------------------------------------------------
# Map values at run time
# --------------------------------------------------------------------------------------------

# The Python type of a map's keys and of its scalar values, as onnxruntime's Python API
# returns them, by numpy kind ("O": string).
_PY_TYPE = {"i": int, "u": int, "f": float, "b": bool, "O": str}
# What a value of each kind may be given as.
_ACCEPTED: dict[str, tuple[type, ...]] = {
    "f": (int, float, np.integer, np.floating, np.bool_),
    "i": (int, np.integer, np.bool_), "u": (int, np.integer, np.bool_),
    "b": (bool, np.bool_), "O": (str,),
}
_WANTS = {"f": "number", "i": "int", "u": "int", "b": "bool", "O": "str"}


@functools.cache
def _kind(elem: ir.DataType) -> tuple[np.dtype, str]:
    dtype = np.dtype(elem.numpy())
    kind = "O" if elem == ir.DataType.STRING else dtype.kind if dtype.kind in "iub" else "f"
    return dtype, kind


def plain_map_test(typ: MapType) -> Callable[[dict], bool]:
    """A test of maps of ``typ``: whether a map's keys and scalar values have the Python types
    onnxruntime returns (judged by its first item: a kernel builds a map's items alike; an
    empty map passes), with the types looked up once."""
    vt = typ.value_type
    if not isinstance(vt, ir.TensorType):
        return lambda m: True
    key_type = _PY_TYPE[_kind(typ.key_type)[1]]
    value_type = _PY_TYPE[_kind(vt.dtype)[1]]

    def plain(m: dict) -> bool:
        for k, v in m.items():
            return type(k) is key_type and type(v) is value_type
        return True   # (empty)

    return plain


def map_value(value: Any, typ: MapType, *, sort: bool) -> dict:
    """``value`` (a mapping) as a new dict of Python values of ``typ``: ``int`` keys for an
    integer key type, ``str`` for ``string``; ``float`` values for a floating value type
    (rounded to float32 for ``tensor(float)``, as onnxruntime stores them; beyond its range,
    inf), ``int`` for an integer type, ``str``, ``bool``; a 0-d array counts as its scalar.
    Keys ascending when ``sort`` (onnxruntime's maps are ``std::map``). Raises ValueError
    saying what does not fit (a key or value of another kind, an integer out of range)."""
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a dict for {ort_type_string(typ)}, got "
                         f"{type(value).__name__}")
    try:
        keys = sorted(value) if sort else list(value)
    except TypeError:   # keys of mixed kinds: the checks below name the one at fault
        keys = list(value)
    values = [value[k] for k in keys]
    if _kind(typ.key_type)[1] == "O":
        if not all(type(k) is str for k in keys):   # (the common case in one pass)
            for k in keys:
                if not isinstance(k, str):   # (onnxruntime's words first)
                    raise ValueError(f"Unexpected key type  {type(k)}, it cannot be linked to "
                                     f"C type std::string: {ort_type_string(typ)} needs str "
                                     f"keys, got the {type(k).__name__} key {k!r}")
            keys = [str(k) for k in keys]   # (numpy's str_)
    else:
        lo, hi = _int_range(typ.key_type)
        if not (all(type(k) is int for k in keys) and (not keys or lo <= min(keys)
                                                        and max(keys) <= hi)):
            for k in keys:
                if not isinstance(k, (int, np.integer)) or not lo <= k <= hi:
                    what = "out of range" if isinstance(k, (int, np.integer)) else "not an int"
                    c_type = f"{typ.key_type.name.lower()}_t"
                    lead = "" if isinstance(k, (int, np.integer)) else \
                        f"Unexpected key type  {type(k)}, it cannot be linked to C type {c_type}: "
                    raise ValueError(f"{lead}{ort_type_string(typ)} needs int keys of "
                                     f"{typ.key_type.name.lower()}, the {type(k).__name__} "
                                     f"key {k!r} is {what}")
            keys = [int(k) for k in keys]
    vt = typ.value_type
    if not isinstance(vt, ir.TensorType):
        return dict(zip(keys, values))
    return dict(zip(keys, _scalars(keys, values, vt.dtype, typ)))


@functools.cache
def _int_range(elem: ir.DataType) -> tuple[int, int]:
    info = np.iinfo(np.dtype(elem.numpy()))
    return int(info.min), int(info.max)


def _scalars(keys: list, values: list, elem: ir.DataType, typ: MapType) -> list:
    dtype, kind = _kind(elem)
    py = _PY_TYPE[kind]
    if all(type(v) is py for v in values):   # (the common case, checked in one pass)
        if kind in "Ob" or dtype == np.float64:
            return values   # (as they are: a Python float is a double)
    else:
        accepted = _ACCEPTED[kind]
        values = [v[()] if isinstance(v, np.ndarray) and v.ndim == 0 else v for v in values]
        for k, v in zip(keys, values):
            if not isinstance(v, accepted):
                raise ValueError(f"{ort_type_string(typ)} needs {_WANTS[kind]} values, the "
                                 f"value of key {k!r} is {type(v).__name__} ({v!r:.40})")
    if kind in "fb":
        try:
            with np.errstate(all="ignore"):   # (beyond float32's range: inf, as in ORT)
                return np.array(values, dtype).tolist()
        except OverflowError as e:   # (an int beyond any float)
            raise ValueError(f"{ort_type_string(typ)}: {e}") from None
    if kind in "iu":
        lo, hi = _int_range(elem)
        out = [int(v) for v in values]
        if out and not lo <= min(out) <= max(out) <= hi:
            k, v = next((k, v) for k, v in zip(keys, out) if not lo <= v <= hi)
            raise ValueError(f"the value {v} of key {k!r} is out of the range of "
                             f"{ort_type_string(typ)}'s values")
        return out
    return [str(v) for v in values]
