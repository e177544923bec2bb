"""Reading a model file without holding its weights twice.

Parsing a whole ``.onnx`` file puts every weight in protobuf's arena, and reading a tensor's
``raw_data`` from Python copies it once more: a model of 440 MB of weights held 1.3 GB after
loading. :func:`split_weights` walks the file's protobuf wire format instead (only the headers
of fields are read, never the weight bytes) and returns the model with each large initializer's
``raw_data`` cut out and replaced by an external-data reference to the model file itself
(location, offset, length). That proto is small and passes the same external-data checks as
any other; :func:`load_embedded` then reads each such tensor straight from the file into its
own aligned array, the only copy.

Anything unexpected in the wire format (groups, a repeated ``graph`` field, a truncated field)
makes :func:`split_weights` return ``None``: the caller parses the file the ordinary way, which
reports what is wrong.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from dataclasses import dataclass

import numpy as np
import onnx

SPLIT_MIN_BYTES = 1 << 16
"""Initializers with at least this much raw data are cut out of the parsed proto."""

# Field numbers (onnx.proto) and wire types (protobuf encoding).
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_RAW_DATA = 1, 2, 9
_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 13, 14
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5

# Types whose raw data is whole little-endian elements (sub-byte and string types are left to
# the ordinary path).
_ITEMSIZE = {
    onnx.TensorProto.FLOAT: 4, onnx.TensorProto.DOUBLE: 8, onnx.TensorProto.FLOAT16: 2,
    onnx.TensorProto.BFLOAT16: 2, onnx.TensorProto.INT8: 1, onnx.TensorProto.UINT8: 1,
    onnx.TensorProto.INT16: 2, onnx.TensorProto.UINT16: 2, onnx.TensorProto.INT32: 4,
    onnx.TensorProto.UINT32: 4, onnx.TensorProto.INT64: 8, onnx.TensorProto.UINT64: 8,
    onnx.TensorProto.BOOL: 1,
}
_SPLITTABLE = frozenset(_ITEMSIZE)


class _Malformed(Exception):
    """The wire format is not what this reader handles; parse the file the ordinary way."""


@dataclass(frozen=True)
class Split:
    """A model file with its large weights cut out: ``proto`` refers to them as external data
    in ``location`` (the file's own name) at the byte ``offsets``."""

    proto_bytes: bytes
    location: str
    offsets: frozenset[int]


def _varint(buf: mmap.mmap | bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Malformed
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return _encode_varint(field << 3 | wire)


def _len_field(field: int, payload: bytes) -> bytes:
    return _tag(field, _LEN) + _encode_varint(len(payload)) + payload


def _fields(buf: mmap.mmap, start: int, end: int):
    """``(field, wire, field_start, value_start, value_end)`` for each field in [start, end)."""
    pos = start
    while pos < end:
        first = pos
        key = buf[pos]   # (one-byte keys and lengths, the common case, read inline)
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if wire == _VARINT:
            _, after = _varint(buf, pos, end)
        elif wire == _I64:
            after = pos + 8
        elif wire == _I32:
            after = pos + 4
        elif wire == _LEN:
            n = buf[pos] if pos < end else 0x80
            if n < 0x80:
                pos += 1
            else:
                n, pos = _varint(buf, pos, end)
            after = pos + n
        else:   # groups (deprecated) or garbage
            raise _Malformed
        if field == 0 or after > end:
            raise _Malformed
        yield field, wire, first, pos, after
        pos = after


def _tensor(buf: mmap.mmap, start: int, end: int, location: str) -> tuple[bytes, int] | None:
    """The tensor message at [start, end) with its raw data replaced by an external-data
    reference, and the data's offset; ``None`` to keep it as it is."""
    raw = None
    data_type = None
    elements = 1
    kept: list[tuple[int, int]] = []
    for field, wire, first, vstart, vend in _fields(buf, start, end):
        if field == _TENSOR_DIMS:
            pos = vstart
            while pos < vend:   # one dim (wire type 0) or a packed run of them (2)
                dim, pos = _varint(buf, pos, vend)
                elements *= dim
        if field == _TENSOR_EXTERNAL_DATA:
            return None
        if field == _TENSOR_DATA_LOCATION:
            if wire != _VARINT or _varint(buf, vstart, vend)[0] != onnx.TensorProto.DEFAULT:
                return None
            continue   # an explicit DEFAULT (exporters write it); replaced by EXTERNAL below
        if field == _TENSOR_RAW_DATA and wire == _LEN:
            if raw is not None:
                return None   # repeated: protobuf keeps the last; leave it to protobuf
            raw = (vstart, vend)
            continue
        if field == _TENSOR_DATA_TYPE and wire == _VARINT:
            data_type, _ = _varint(buf, vstart, vend)
        kept.append((first, vend))
    if raw is None or raw[1] - raw[0] < SPLIT_MIN_BYTES or data_type not in _SPLITTABLE:
        return None
    if elements * _ITEMSIZE[data_type] != raw[1] - raw[0]:
        return None   # data and shape disagree: the ordinary path refuses it, by name
    body = b"".join(buf[a:b] for a, b in kept)
    body += _tag(_TENSOR_DATA_LOCATION, _VARINT) + _encode_varint(onnx.TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", str(raw[0])),
                       ("length", str(raw[1] - raw[0]))):
        entry = _len_field(1, key.encode()) + _len_field(2, value.encode())
        body += _len_field(_TENSOR_EXTERNAL_DATA, entry)
    return body, raw[0]


def split_weights(path: str, location: str) -> Split | None:
    """The model at ``path`` with its large initializers turned into references to their bytes
    in the file, named ``location`` (relative to the model's folder), or ``None`` when it has
    none (or the file is not plainly encoded)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < SPLIT_MIN_BYTES:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            try:
                return _split(buf, size, location)
            except _Malformed:
                return None


def _split(buf: mmap.mmap, size: int, location: str) -> Split | None:
    # Pieces are byte ranges of the file to keep or new bytes; nothing is copied out of the
    # file until the walk has found something to cut.
    model_parts: list[tuple[int, int]] = []
    graph_parts: list[tuple[int, int] | bytes] = []
    offsets: set[int] = set()
    graph_at = -1
    for field, wire, first, vstart, vend in _fields(buf, 0, size):
        if field != _MODEL_GRAPH:
            model_parts.append((first, vend))
            continue
        if wire != _LEN or graph_at >= 0:
            raise _Malformed   # a repeated graph is merged by protobuf: not handled here
        graph_at = len(model_parts)
        for gfield, gwire, gfirst, gstart, gend in _fields(buf, vstart, vend):
            cut = None
            if gfield == _GRAPH_INITIALIZER and gwire == _LEN and \
                    gend - gstart >= SPLIT_MIN_BYTES:   # (smaller ones hold less raw data)
                cut = _tensor(buf, gstart, gend, location)
            if cut is None:
                last = graph_parts[-1] if graph_parts else None
                if isinstance(last, tuple) and last[1] == gfirst:   # a run of kept fields
                    graph_parts[-1] = (last[0], gend)
                else:
                    graph_parts.append((gfirst, gend))
            else:
                graph_parts.append(_len_field(_GRAPH_INITIALIZER, cut[0]))
                offsets.add(cut[1])
    if not offsets:
        return None
    with memoryview(buf) as view:   # (slices of a view are not copies: one copy, by join)
        graph = b"".join(p if isinstance(p, bytes) else view[p[0]:p[1]] for p in graph_parts)
        model: list[bytes | memoryview] = [view[a:b] for a, b in model_parts]
        model.insert(graph_at, _len_field(_MODEL_GRAPH, graph))
        data = b"".join(model)
        del model
    return Split(data, location, frozenset(offsets))


def pread_tensor(fd: int, offset: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Read one tensor's little-endian bytes at ``offset`` of the open file descriptor ``fd``
    into a new array (numpy allocates it aligned), with positioned reads where the platform
    has them (no file object; ``fd``'s offset is unchanged)."""
    arr = np.empty(shape, dtype=dtype.newbyteorder("<"))
    # (through a byte view: the buffer protocol does not take ml_dtypes' types, bfloat16's 'E')
    view = memoryview(arr.reshape(-1).view(np.uint8))
    with contextlib.ExitStack() as stack:
        if hasattr(os, "preadv"):
            def read_at(buf: memoryview, pos: int) -> int:
                return os.preadv(fd, [buf], pos)
        else:   # (Windows) a file object over the descriptor, seeked
            f = stack.enter_context(open(fd, "rb", buffering=0, closefd=False))

            def read_at(buf: memoryview, pos: int) -> int:
                f.seek(pos)
                return f.readinto(buf)
        got = 0
        while got < arr.nbytes:
            n = read_at(view[got:], offset + got)
            if not n:
                raise EOFError(f"the file ends {arr.nbytes - got} bytes early")
            got += n
    return arr if arr.dtype.isnative else arr.astype(dtype.newbyteorder("="))
