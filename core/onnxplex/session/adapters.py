"""LoRA adapters in onnxruntime's adapter file format: ``AdapterFormat``, ``LoraAdapter`` and
``RunOptions.add_active_adapter``.

An adapter file holds named parameter tensors (a LoRA adapter's A and B matrices) that a model
takes as inputs; activating an adapter for a run feeds them. The file is a FlatBuffers buffer
with onnxruntime's schema (``onnxruntime/lora/adapter_format/adapter_schema.fbs``, file
identifier ``TORT``): a root ``Adapter`` table (format, adapter and model versions, a vector of
``Parameter`` tables) and per parameter its name, dims, element type (ONNX's numbering) and raw
little-endian data aligned to 8 bytes. It is read and written here with the ``flatbuffers``
package's builder and table accessors (the same runtime onnxruntime's Python package uses),
so files move between onnxruntime and onnxplex in both directions.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._dtypes import np_dtype, onnx_elem_type
from .._errors import InvalidArgumentError, as_status
from .ortvalue import OrtValue

__all__ = ["AdapterFormat", "LoraAdapter", "FORMAT_VERSION"]

FORMAT_VERSION = 1
"""The adapter format version onnxruntime writes and reads (``kAdapterFormatVersion``)."""

_IDENTIFIER = b"TORT"

# field slots of the schema's tables (vtable entries, in declaration order)
_ADAPTER_FORMAT, _ADAPTER_VERSION, _MODEL_VERSION, _PARAMETERS = range(4)
_PARAM_NAME, _PARAM_DIMS, _PARAM_TYPE, _PARAM_DATA = range(4)


def _error(message: str) -> InvalidArgumentError:
    return as_status(InvalidArgumentError, RuntimeError)(message)   # (onnxruntime's class)


class AdapterFormat:
    """An adapter file's content: versions and named parameters (:class:`OrtValue` s)."""

    def __init__(self, adapter: Any = None) -> None:
        self._format_version = FORMAT_VERSION
        self._adapter_version = 0
        self._model_version = 0
        self._parameters: dict[str, OrtValue] = {}

    # ---------------------------------------------------------------- onnxruntime's API

    @staticmethod
    def read_adapter(file_path: str | os.PathLike[str]) -> AdapterFormat:
        """Read an adapter file (as onnxruntime or :meth:`export_adapter` wrote it)."""
        with open(file_path, "rb") as f:
            data = f.read()
        return _read(data, os.fspath(file_path))

    def export_adapter(self, file_path: str | os.PathLike[str]) -> None:
        """Write the adapter file."""
        with open(file_path, "wb") as f:
            f.write(_write(self))

    def get_format_version(self) -> int:
        return self._format_version

    def get_adapter_version(self) -> int:
        return self._adapter_version

    def set_adapter_version(self, adapter_version: int) -> None:
        self._adapter_version = int(adapter_version)

    def get_model_version(self) -> int:
        return self._model_version

    def set_model_version(self, model_version: int) -> None:
        self._model_version = int(model_version)

    def get_parameters(self) -> dict[str, OrtValue]:
        return dict(self._parameters)

    def set_parameters(self, parameters: Mapping[str, OrtValue]) -> None:
        """The adapter's parameters: name -> :class:`OrtValue` (a numeric tensor)."""
        params = {}
        for name, value in dict(parameters).items():
            if not isinstance(value, OrtValue) or not value.is_tensor():
                raise _error(f"adapter parameter {name!r} must be a tensor OrtValue, got "
                             f"{type(value).__name__}")
            if value.numpy().dtype == np.dtype(object):
                raise _error(f"adapter parameter {name!r}: string tensors are not supported "
                             "by the adapter format")
            params[str(name)] = value
        self._parameters = params


class LoraAdapter:
    """An adapter loaded for runs: ``RunOptions.add_active_adapter(adapter)`` feeds its
    parameters to the runs made with those options."""

    def __init__(self) -> None:
        self._parameters: dict[str, np.ndarray] = {}

    def Load(self, adapter_file_path: str | os.PathLike[str]) -> None:  # noqa: N802 - onnxruntime's name
        """Read the adapter file (its parameters are held read-only in memory)."""
        adapter = AdapterFormat.read_adapter(adapter_file_path)
        self._parameters = {name: v.numpy() for name, v in adapter.get_parameters().items()}

    @property
    def parameters(self) -> Mapping[str, np.ndarray]:
        return dict(self._parameters)


# ---- the file

def _write(adapter: AdapterFormat) -> bytes:
    import flatbuffers

    b = flatbuffers.Builder(1024)
    tables = []
    for name, value in adapter._parameters.items():
        arr = np.require(value.numpy(), requirements="C")   # (0-d stays 0-d)
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        name_off = b.CreateString(name)
        b.StartVector(8, arr.ndim, 8)
        for d in reversed(arr.shape):
            b.PrependInt64(int(d))
        dims_off = b.EndVector()
        b.StartVector(1, len(raw), 8)   # (force_align: 8)
        b.head -= len(raw)
        b.Bytes[b.head:b.head + len(raw)] = raw
        data_off = b.EndVector()
        b.StartObject(4)
        b.PrependUOffsetTRelativeSlot(_PARAM_NAME, name_off, 0)
        b.PrependUOffsetTRelativeSlot(_PARAM_DIMS, dims_off, 0)
        b.PrependInt32Slot(_PARAM_TYPE, onnx_elem_type(arr.dtype), 0)
        b.PrependUOffsetTRelativeSlot(_PARAM_DATA, data_off, 0)
        tables.append(b.EndObject())
    b.StartVector(4, len(tables), 4)
    for t in reversed(tables):
        b.PrependUOffsetTRelative(t)
    params_off = b.EndVector()
    b.StartObject(4)
    b.PrependInt32Slot(_ADAPTER_FORMAT, adapter._format_version, 0)
    b.PrependInt32Slot(_ADAPTER_VERSION, adapter._adapter_version, 0)
    b.PrependInt32Slot(_MODEL_VERSION, adapter._model_version, 0)
    b.PrependUOffsetTRelativeSlot(_PARAMETERS, params_off, 0)
    b.Finish(b.EndObject(), file_identifier=_IDENTIFIER)
    return bytes(b.Output())


def _read(data: bytes, where: str) -> AdapterFormat:
    from flatbuffers import number_types as nt
    from flatbuffers.table import Table

    if len(data) < 8 or data[4:8] != _IDENTIFIER:
        raise _error(f"{where}: not an onnxruntime adapter file (no 'TORT' identifier)")
    buf = bytearray(data)
    try:
        root = Table(buf, int.from_bytes(buf[0:4], "little"))

        def scalar(tab: Table, slot: int) -> int:
            o = tab.Offset(4 + 2 * slot)
            return tab.Get(nt.Int32Flags, o + tab.Pos) if o else 0

        out = AdapterFormat()
        out._format_version = scalar(root, _ADAPTER_FORMAT)
        if out._format_version != FORMAT_VERSION:
            raise _error(f"{where}: adapter format version {out._format_version} is not "
                         f"supported (this onnxplex reads version {FORMAT_VERSION})")
        out._adapter_version = scalar(root, _ADAPTER_VERSION)
        out._model_version = scalar(root, _MODEL_VERSION)
        o = root.Offset(4 + 2 * _PARAMETERS)
        count = root.VectorLen(o) if o else 0
        start = root.Vector(o) if o else 0
        params: dict[str, OrtValue] = {}
        for i in range(count):
            p = Table(buf, root.Indirect(start + 4 * i))
            o_name = p.Offset(4 + 2 * _PARAM_NAME)
            name = p.String(o_name + p.Pos).decode("utf-8") if o_name else ""
            o_dims = p.Offset(4 + 2 * _PARAM_DIMS)
            dims = [p.Get(nt.Int64Flags, p.Vector(o_dims) + 8 * k)
                    for k in range(p.VectorLen(o_dims))] if o_dims else []
            dtype = np.dtype(np_dtype(scalar(p, _PARAM_TYPE)))
            o_data = p.Offset(4 + 2 * _PARAM_DATA)
            raw = bytes(buf[p.Vector(o_data):p.Vector(o_data) + p.VectorLen(o_data)]) \
                if o_data else b""
            if any(d < 0 for d in dims) or len(raw) != int(np.prod(dims)) * dtype.itemsize:
                raise _error(f"{where}: parameter {name!r} has {len(raw)} bytes of data for "
                             f"dims {dims} of {dtype}")
            arr = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype, copy=False)
            params[name] = OrtValue(arr.reshape(dims))
    except (IndexError, ValueError, KeyError, UnicodeDecodeError, struct.error) as e:
        raise _error(f"{where}: the adapter file is malformed ({type(e).__name__}: {e})") \
            from None
    out._parameters = params
    return out
