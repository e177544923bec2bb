"""Element types: ONNX ``TensorProto`` enums, numpy dtypes and ORT type strings."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

__all__ = ["np_dtype", "onnx_elem_type", "type_string", "elem_type_name", "array_type_name",
           "ort_type_string"]

_NAME_BY_ELEM = {v: k.lower() for k, v in onnx.TensorProto.DataType.items()}
# ORT spells a few type strings its own way.
_NAME_BY_ELEM[onnx.TensorProto.FLOAT] = "float"
_NAME_BY_ELEM[onnx.TensorProto.DOUBLE] = "double"

_NP_BY_ELEM: dict[int, np.dtype] = {}
for _elem in onnx.TensorProto.DataType.values():
    if _elem == onnx.TensorProto.UNDEFINED:
        continue
    try:
        _NP_BY_ELEM[_elem] = np.dtype(helper.tensor_dtype_to_np_dtype(_elem))
    except (KeyError, TypeError, ValueError):  # pragma: no cover - types numpy cannot hold
        pass
_NP_BY_ELEM[onnx.TensorProto.STRING] = np.dtype(object)

_ELEM_BY_NP: dict[np.dtype, int] = {}
for _elem, _dt in _NP_BY_ELEM.items():
    # Several ONNX types share a numpy dtype (e.g. UINT4 and INT4 don't, but complex ones
    # might); keep the first, which is the canonical one.
    _ELEM_BY_NP.setdefault(_dt, _elem)
_ELEM_BY_NP[np.dtype(np.str_)] = onnx.TensorProto.STRING


def np_dtype(elem_type: int) -> np.dtype:
    """The numpy dtype that holds ONNX element type ``elem_type``."""
    try:
        return _NP_BY_ELEM[elem_type]
    except KeyError:
        raise KeyError(f"ONNX element type {elem_type} has no numpy dtype") from None


def onnx_elem_type(dtype: np.dtype | type) -> int:
    """The ONNX element type of a numpy dtype (``object`` and ``str`` map to STRING)."""
    dt = np.dtype(dtype)
    if dt.kind == "U":
        return onnx.TensorProto.STRING
    try:
        return _ELEM_BY_NP[dt]
    except KeyError:
        raise KeyError(f"numpy dtype {dt} has no ONNX element type") from None


def elem_type_name(elem_type: int) -> str:
    """ORT's short name of an element type: 'float', 'int64', 'float16', ..."""
    return _NAME_BY_ELEM.get(elem_type, f"elem{elem_type}")


def array_type_name(arr: np.ndarray) -> str:
    """ORT's short type name of an array's dtype ('float', 'int64'), or the numpy name."""
    try:
        return elem_type_name(onnx_elem_type(arr.dtype))
    except KeyError:
        return str(arr.dtype)


def type_string(elem_type: int) -> str:
    """ORT's ``NodeArg.type`` string for a tensor: ``'tensor(float)'``."""
    return f"tensor({elem_type_name(elem_type)})"


def ort_type_string(typ: Any) -> str:
    """onnxruntime's spelling of an onnx-ir type (``NodeArg.type``): ``tensor(float)``,
    ``seq(map(int64,tensor(float)))``, ``map(string,tensor(float))``,
    ``optional(tensor(int64))``, ``sparse_tensor(float)``."""
    kind = type(typ).__name__
    if kind == "TensorType":
        return type_string(typ.dtype.value)
    if kind == "SparseTensorType":
        return f"sparse_{type_string(typ.dtype.value)}"
    if kind == "SequenceType":
        return f"seq({ort_type_string(typ.elem_type)})"
    if kind == "OptionalType":
        return f"optional({ort_type_string(typ.elem_type)})"
    if kind == "MapType":
        return f"map({elem_type_name(typ.key_type.value)},{ort_type_string(typ.value_type)})"
    return kind.replace("Type", "").lower()
