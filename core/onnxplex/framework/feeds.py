"""Feeds: a run's inputs checked and converted against the declared types, and random inputs
from a session's declared input shapes (CLI, optimizer verification).

Values are as onnxruntime's Python API takes them: a numpy array for a tensor, a list (or
tuple) for a sequence, a ``dict`` for a map, ``None`` for an empty optional. A map is
converted to a new ``dict`` of Python values, keys ascending (onnxruntime holds maps as
``std::map``): ``int`` keys for an integer key type, ``str`` for ``string``; ``float`` values
for a floating value type (rounded to float32 for ``tensor(float)``, as onnxruntime stores
them), ``int`` for an integer one, ``str`` for ``string``, ``bool`` for ``bool``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._dtypes import np_dtype, onnx_elem_type, ort_type_string, type_string
from .._errors import InvalidArgumentError, InvalidFeedError, as_status
from ..graph.limits import check_tensor_size
from ..graph.maptype import map_value
from ..graph.model import ValueInfo

__all__ = ["random_feeds", "tensor_feed", "structured_feed"]


def tensor_feed(name: str, value: Any, elem_type: int | None) -> np.ndarray:
    """``value`` as a C-contiguous array of ``elem_type``'s dtype; raises
    :class:`InvalidFeedError` naming ``name`` for an array of another dtype. Shapes are not
    checked. As onnxruntime takes them: a list (nested for more axes) is converted to the
    declared type (``[1, 2]`` for a float input); a str array becomes an object array, and so
    do ``bytes`` (``|S``) and void arrays for a string input (decoded as UTF-8), whose object
    arrays' other elements become their ``str()`` (:func:`_as_text`); a non-native
    byte order is accepted. Python scalars and tuples are taken as lists are and a numpy scalar
    as a 0-d array (where onnxruntime refuses them)."""
    want = np_dtype(elem_type) if elem_type is not None else None
    if isinstance(value, np.ndarray):
        arr = value
    else:
        try:
            if isinstance(value, (list, tuple, int, float, bool, str)) and want is not None:
                arr = np.array(value, dtype=want)
            else:
                arr = np.asarray(value)
        except (ValueError, TypeError, OverflowError) as e:
            raise as_status(InvalidFeedError, RuntimeError)(   # (onnxruntime's class)
                f"Could not create tensor from given input list: input {name} "
                f"({type(value).__name__}) cannot be read as {type_string(elem_type)}: {e}"
            ) from None
    if want is not None:
        if arr.dtype != want and arr.dtype.newbyteorder("=") == want:
            arr = arr.astype(want)   # non-native byte order: accepted, as onnxruntime
        if want == np.dtype(object) and arr.dtype.kind in "USV":
            arr = _strings(arr)
        elif want == np.dtype(object) and arr.dtype == want:
            arr = _as_text(arr)
        if arr.dtype != want:
            raise InvalidFeedError(
                f"Unexpected input data type. Actual: ({_tensor_type(arr.dtype)}) , expected: "
                f"({type_string(elem_type)}): input {name} is a numpy {arr.dtype} array; "
                f"convert it with .astype(np.{want})")
    if not arr.flags.c_contiguous:
        # Kernels see C-contiguous tensors, as onnxruntime's do (it copies too): the results
        # do not depend on the caller's strides.
        arr = np.ascontiguousarray(arr)
    return arr


def _strings(arr: np.ndarray) -> np.ndarray:
    """A str, bytes or void array as an object array of str, bytes decoded as UTF-8 as
    onnxruntime reads them: a bytes element up to its first trailing NUL (numpy's own
    reading), a void element whole, NULs included (onnxruntime's ML.NET tests rely on it)."""
    if arr.dtype.kind == "U":
        return arr.astype(object)
    out = np.empty(arr.shape, dtype=object)
    flat = out.reshape(-1)
    for i, v in enumerate(arr.reshape(-1)):
        b = v if arr.dtype.kind == "S" else bytes(v)
        flat[i] = b.decode("utf-8", errors="replace")
    return out


def _as_text(arr: np.ndarray) -> np.ndarray:
    """An object array fed to a string input, each element that is not a ``str`` made one
    with ``str()`` as onnxruntime converts them (``5`` is ``'5'``, ``None`` ``'None'``,
    ``b'ab'`` ``"b'ab'"``, a list its repr): kernels then see text only (they failed on a
    list, and Identity returned it). ``arr`` itself when it holds text only."""
    values = arr.reshape(-1).tolist()
    if all(type(v) is str for v in values):
        return arr
    out = np.empty(len(values), dtype=object)
    out[:] = [v if type(v) is str else str(v) for v in values]
    return out.reshape(arr.shape)


def _tensor_type(dtype: np.dtype) -> str:
    """onnxruntime's name of a numpy dtype's tensor type (``tensor(double)``)."""
    if dtype.kind in "USVO":
        return "tensor(string)"
    try:
        return type_string(onnx_elem_type(dtype))
    except KeyError:
        return f"numpy {dtype}"


def structured_feed(info: ValueInfo, value: Any) -> Any:
    """A feed for a sequence, map or optional input, checked against its declared type and
    converted (see the module's docstring); raises :class:`InvalidFeedError` naming the input
    (and the element or key at fault)."""
    if info.ir_type is None:
        return value     # (a type nothing declared: taken as it is)
    return _convert(repr(info.name), value, info.ir_type)


def _convert(where: str, value: Any, typ: Any) -> Any:
    kind = type(typ).__name__
    if kind == "TensorType":
        if not isinstance(value, (np.ndarray, np.generic)):
            raise InvalidFeedError(f"input {where}: expected a numpy array "
                                   f"({ort_type_string(typ)}), got {type(value).__name__}")
        return tensor_feed(where, value, typ.dtype.value)
    if kind == "SequenceType":
        if not isinstance(value, (list, tuple)):
            raise InvalidFeedError(
                f"input {where}: expected a list for {ort_type_string(typ)}, got "
                f"{type(value).__name__}")
        elem = typ.elem_type
        return [_convert(f"{where}[{k}]", v, elem) for k, v in enumerate(value)]
    if kind == "OptionalType":
        return None if value is None else _convert(where, value, typ.elem_type)
    if kind == "MapType":
        try:
            return map_value(value, typ, sort=True)
        except ValueError as e:   # (a RuntimeError too, as onnxruntime's)
            raise as_status(InvalidFeedError, RuntimeError)(f"{e} for input {where}") from None
    return value


def random_feeds(session, seed: int = 0, dim: int = 1) -> dict[str, Any]:
    """Random inputs from the declared types and shapes (symbolic/unknown dims become ``dim``):
    arrays, and for a sequence input a list of one element, for a map a dict (the keys of the
    vocabulary of a DictVectorizer reading it, else three keys); raises
    :class:`onnxplex.TensorSizeError` for an input too large to allocate."""
    if dim < 0:
        raise InvalidArgumentError(f"dim {dim}: symbolic dimensions need a size >= 0")
    rng = np.random.default_rng(seed)
    feeds = {}
    for arg in session.get_inputs():
        info = session._input_infos[arg.name]
        if info.kind != "tensor":
            feeds[arg.name] = _random_value(rng, info.ir_type, _map_keys(session, arg.name), dim)
            continue
        shape = [d if isinstance(d, int) else dim for d in (info.shape or ())]
        # declared static dims were checked at load; with symbolic dims filled in, check again
        check_tensor_size(shape, info.elem_type, f"random input {arg.name!r}")
        feeds[arg.name] = _random_array(rng, shape, info.elem_type,
                                        _index_bound(session, arg.name, 8))
    return feeds


def _random_array(rng: np.random.Generator, shape: list[int], elem_type: int | None,
                  bound: int) -> np.ndarray:
    dt = np_dtype(elem_type) if elem_type is not None else np.dtype(np.float32)
    if dt.kind == "f" or dt.name in ("bfloat16",) or "float8" in dt.name:
        return rng.standard_normal(shape).astype(dt)
    if dt.kind in "iu":
        return rng.integers(0, bound, size=shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt == np.dtype(object):
        return np.full(shape, "a", dtype=object)
    return np.zeros(shape, dt)


def _random_value(rng: np.random.Generator, typ: Any, keys: list | None, dim: int) -> Any:
    """A random value of a (nested) sequence, map or optional type."""
    kind = type(typ).__name__
    if kind == "TensorType":
        return _random_array(rng, [dim], typ.dtype.value, 8)
    if kind == "SequenceType":
        return [_random_value(rng, typ.elem_type, keys, dim)]
    if kind == "OptionalType":
        return _random_value(rng, typ.elem_type, keys, dim)
    if kind == "MapType":
        if keys is None:
            keys = ["a", "b", "c"] if typ.key_type.name == "STRING" else [0, 1, 2]
        vt = typ.value_type
        if type(vt).__name__ != "TensorType":
            return {k: _random_value(rng, vt, None, dim) for k in keys}
        return map_value(dict(zip(keys, _random_array(rng, [len(keys)], vt.dtype.value, 8)
                                  .tolist())), typ, sort=True)
    return None


def _map_keys(session, name: str) -> list | None:
    """The vocabulary of a DictVectorizer reading input ``name``, if one does."""
    model = session.model
    for i in model.consumer_indices.get(name, ()):
        node = model.node_views[i]
        if node.op_type == "DictVectorizer" and node.domain == "ai.onnx.ml":
            for attr in ("string_vocabulary", "int64_vocabulary"):
                vocab = node.attr(attr)
                if vocab is not None and len(vocab):
                    return list(dict.fromkeys(vocab))
    return None


def _index_bound(session, name: str, default: int) -> int:
    """An exclusive upper bound for random integers fed to ``name``: ``default``, lowered to
    the size of the gathered axis when the input indexes a Gather (token ids, segment ids):
    a random id past an embedding table's rows would only make the run fail."""
    bound = default
    model = session.model
    for i in model.consumer_indices.get(name, ()):
        node = model.node_views[i]
        indices, data = node.input(1), node.input(0)
        if node.op_type != "Gather" or node.domain not in ("", "ai.onnx") or \
                indices is None or indices.name != name or data is None or not data.shape:
            continue
        axis = int(node.attr("axis", 0))
        size = data.shape[axis] if -len(data.shape) <= axis < len(data.shape) else None
        if isinstance(size, int) and size > 0:
            bound = min(bound, size)
    return bound
