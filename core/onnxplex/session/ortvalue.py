"""``OrtValue``: onnxruntime's value handle, on the CPU only.

An onnxplex ``OrtValue`` wraps the Python value a kernel reads or returns: a numpy array for a
tensor, a list of arrays for a sequence, a dict for a map (a list of dicts for a sequence of
maps, ZipMap's output), ``None`` for an empty optional. As in onnxruntime, only a run makes a
map value (``run_with_ort_values``, an IOBinding's outputs), and it can be fed back. Built from
a numpy array it shares the array's memory, as onnxruntime's does on the CPU (a non-contiguous
array is copied once into a contiguous one, as onnxruntime does); ``numpy()`` returns that
array, not a copy. Any device other than ``'cpu'`` is an :class:`InvalidArgumentError`.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._dtypes import np_dtype, onnx_elem_type, type_string
from .._errors import InvalidArgumentError, as_status
from .._sparse import SparseTensor

__all__ = ["OrtValue", "OrtValueVector", "check_cpu_device", "array_at", "element_dtype",
           "is_dlpack_uint8_tensor"]


def check_cpu_device(device_type: Any, what: str) -> None:
    """Raise unless ``device_type`` names the CPU (onnxplex has no other device): ``"cpu"``,
    or an :class:`onnxplex.OrtDevice` of type 0 (the C-level calls pass one)."""
    if callable(getattr(device_type, "device_type", None)) and device_type.device_type() == 0:
        return
    if not isinstance(device_type, str) or device_type.lower() != "cpu":
        raise InvalidArgumentError(
            f"{what}: device_type {device_type!r} is not supported; onnxplex runs on the CPU "
            "only, use device_type='cpu'")


def element_dtype(element_type: Any, what: str) -> np.dtype:
    """A numpy dtype from what onnxruntime accepts as an element type: a numpy type or an
    ONNX ``TensorProto`` enum value (``onnx.TensorProto.BFLOAT16``)."""
    try:
        if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
            return np_dtype(int(element_type))
        return np.dtype(element_type)
    except (KeyError, TypeError, ValueError):
        raise InvalidArgumentError(f"{what}: unknown element type {element_type!r}; give a numpy "
                                   "dtype or an onnx.TensorProto element type") from None


def array_at(buffer_ptr: int, element_type: Any, shape: Sequence[int], what: str) -> np.ndarray:
    """A numpy array over ``prod(shape)`` elements at the raw address ``buffer_ptr``.

    As with onnxruntime's ``bind_input``/``bind_output`` with a pointer, the caller guarantees
    that the memory is valid, large enough and outlives its use; onnxplex cannot check it.
    """
    dtype = element_dtype(element_type, what)
    if dtype == np.dtype(object):
        raise InvalidArgumentError(f"{what}: string tensors cannot be bound by pointer")
    if not isinstance(buffer_ptr, (int, np.integer)) or int(buffer_ptr) == 0:
        raise InvalidArgumentError(f"{what}: buffer_ptr must be a non-null address (an int), "
                                   f"got {buffer_ptr!r}")
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(f"{what}: shape {dims} has a negative dimension")
    count = math.prod(dims)
    raw = (ctypes.c_byte * (count * dtype.itemsize)).from_address(int(buffer_ptr))
    return np.frombuffer(raw, dtype=dtype, count=count).reshape(dims)


class OrtValue:
    """A tensor (or sequence, or optional) value on the CPU, with onnxruntime's API.

    Create one with :meth:`ortvalue_from_numpy` (shares the array's memory),
    :meth:`ortvalue_from_numpy_with_onnx_type` or :meth:`ortvalue_from_shape_and_type`;
    :meth:`InferenceSession.run_with_ort_values` and :class:`IOBinding` return them.
    """

    __slots__ = ("_value", "_type")

    def __init__(self, value: Any, type_str: str | None = None) -> None:
        # Not public: use the factory methods (onnxruntime's constructor takes a C value).
        self._value = value
        self._type = type_str

    def _get_c_value(self) -> OrtValue:
        """The value itself (onnxruntime's accessor of the C-level value it wraps)."""
        return self

    @property
    def _ortvalue(self) -> OrtValue:
        """The value itself: onnxruntime's Python OrtValue wraps a C-level one under this
        name, which code passes to the C-level calls (``OrtValueVector.push_back``)."""
        return self

    # ------------------------------------------------------------------------ factories

    @classmethod
    def ortvalue_from_numpy(cls, numpy_obj: np.ndarray, /, device_type: str = "cpu",
                            device_id: int = 0, vendor_id: int = -1) -> OrtValue:
        """A tensor over ``numpy_obj``'s memory (a contiguous copy if it is not C-contiguous).

        Keep using the array and the value together: writes to one show in the other.
        """
        check_cpu_device(device_type, "OrtValue.ortvalue_from_numpy")
        if not isinstance(numpy_obj, np.ndarray):
            raise InvalidArgumentError(
                "OrtValue.ortvalue_from_numpy needs a numpy array, got "
                f"{type(numpy_obj).__name__}")
        arr = numpy_obj
        if arr.dtype.kind == "U":
            arr = arr.astype(object)
        _check_tensor_dtype(arr.dtype, "OrtValue.ortvalue_from_numpy")
        return cls(np.ascontiguousarray(arr) if arr.ndim else arr)

    @classmethod
    def ortvalue_from_numpy_with_onnx_type(cls, data: np.ndarray, /,
                                           onnx_element_type: int) -> OrtValue:
        """A tensor of ONNX element type ``onnx_element_type`` over ``data``'s bytes (no copy;
        the item sizes must match), e.g. bfloat16 values held in a uint16 array."""
        what = "OrtValue.ortvalue_from_numpy_with_onnx_type"
        if not isinstance(data, np.ndarray):
            raise InvalidArgumentError(f"{what} needs a numpy array, got {type(data).__name__}")
        dtype = element_dtype(onnx_element_type, what)
        if dtype == np.dtype(object) or data.dtype == np.dtype(object) \
                or dtype.itemsize != data.dtype.itemsize:
            raise InvalidArgumentError(
                f"{what}: cannot reinterpret {data.dtype} ({data.dtype.itemsize} bytes) as "
                f"{type_string(int(onnx_element_type))} ({dtype.itemsize} bytes)")
        return cls(np.ascontiguousarray(data).view(dtype))

    @classmethod
    def ortvalue_from_shape_and_type(cls, shape: Sequence[int], element_type: Any,
                                     device_type: str = "cpu", device_id: int = 0,
                                     vendor_id: int = -1, memory_info: Any = None) -> OrtValue:
        """A new zero-filled tensor; ``element_type`` is a numpy type or an ONNX enum value."""
        what = "OrtValue.ortvalue_from_shape_and_type"
        check_cpu_device(device_type, what)
        if memory_info is not None:
            raise InvalidArgumentError(f"{what}: memory_info is not supported (CPU only)")
        dtype = element_dtype(element_type, what)
        _check_tensor_dtype(dtype, what)
        dims = [int(d) for d in shape]
        if any(d < 0 for d in dims):
            raise InvalidArgumentError(f"{what}: shape {dims} has a negative dimension")
        return cls(np.zeros(dims, dtype) if dtype != np.dtype(object)
                   else np.full(dims, "", dtype=object))

    @classmethod
    def from_dlpack(cls, data: Any, is_bool_tensor: bool = False, /) -> OrtValue:
        """A tensor sharing memory with a CPU DLPack producer (numpy, torch, ...) or a DLPack
        capsule (``to_dlpack()``'s); ``is_bool_tensor``: the uint8 data is bool (DLPack before
        its bool type), viewed as bool without a copy."""
        producer = _Capsule(data) if type(data).__name__ == "PyCapsule" else data
        arr = np.from_dlpack(producer)
        if is_bool_tensor and arr.dtype in (np.uint8, np.int8):
            arr = arr.view(np.bool_)
        return cls.ortvalue_from_numpy(arr)

    def to_dlpack(self) -> Any:
        """A DLPack capsule of the tensor (shares memory), as onnxruntime's ``to_dlpack``."""
        return self._tensor("to_dlpack").__dlpack__()

    # ------------------------------------------------------------------------ accessors

    def numpy(self) -> np.ndarray:
        """The tensor's array itself (shares memory; not a copy)."""
        return self._tensor("numpy")

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        arr = self._tensor("__array__")
        if copy:
            return np.array(arr, dtype=dtype, copy=True)
        return arr if dtype is None else np.asarray(arr, dtype=dtype)

    def __dlpack__(self, *, stream: Any = None) -> Any:
        return self._tensor("__dlpack__").__dlpack__(stream=stream)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._tensor("__dlpack_device__").__dlpack_device__()

    def shape(self) -> list[int]:
        """The tensor's shape as a list of ints (a sparse tensor's dense shape)."""
        if isinstance(self._value, SparseTensor):
            return self._value.dense_shape()
        return [int(d) for d in self._tensor("shape").shape]

    def data_type(self) -> str:
        """The value's type as onnxruntime spells it: ``'tensor(float)'``,
        ``'seq(tensor(int64))'``, ``'optional(tensor(float))'``."""
        if isinstance(self._value, np.ndarray):
            return type_string(onnx_elem_type(self._value.dtype))
        if isinstance(self._value, SparseTensor):
            return self._value.data_type()
        if self._type is not None:
            return self._type
        if isinstance(self._value, list) and self._value \
                and isinstance(self._value[0], np.ndarray):
            return f"seq({type_string(onnx_elem_type(self._value[0].dtype))})"
        raise InvalidArgumentError("OrtValue.data_type: the type of this value is unknown "
                                   "(an empty sequence or optional)")

    def element_type(self) -> int:
        """The tensor's ONNX element type (``onnx.TensorProto`` enum value)."""
        return onnx_elem_type(self._tensor("element_type").dtype)

    def device_name(self) -> str:
        """Where the data lives: always ``'cpu'``."""
        return "cpu"

    def data_ptr(self) -> int:
        """Address of the tensor's first element."""
        return int(self._tensor("data_ptr").ctypes.data)

    def tensor_size_in_bytes(self) -> int:
        return int(self._tensor("tensor_size_in_bytes").nbytes)

    def has_value(self) -> bool:
        """False for an empty optional."""
        return self._value is not None

    def is_tensor(self) -> bool:
        return isinstance(self._value, np.ndarray)

    def is_tensor_sequence(self) -> bool:
        """True for a sequence of tensors (False for a sequence of maps, as onnxruntime)."""
        if not isinstance(self._value, list):
            return False
        if self._type is not None:
            return self._type.startswith("seq(tensor(")
        return all(isinstance(v, np.ndarray) for v in self._value)

    def is_sparse_tensor(self) -> bool:
        return isinstance(self._value, SparseTensor)

    @classmethod
    def ort_value_from_sparse_tensor(cls, sparse_tensor: SparseTensor) -> OrtValue:
        """A value holding ``sparse_tensor`` (for a ``sparse_tensor(...)`` input)."""
        if not isinstance(sparse_tensor, SparseTensor):
            raise as_status(InvalidArgumentError, RuntimeError)(
                f"ort_value_from_sparse_tensor takes a SparseTensor, got "
                f"{type(sparse_tensor).__name__}")
        return cls(sparse_tensor)

    def as_sparse_tensor(self) -> SparseTensor:
        """The sparse tensor this value holds (an error for any other value)."""
        if not isinstance(self._value, SparseTensor):
            raise as_status(InvalidArgumentError, RuntimeError)(
                "OrtValue.as_sparse_tensor: this value is not a sparse tensor")
        return self._value

    def update_inplace(self, data: Any) -> None:
        """Copy ``data`` (an array or an OrtValue of the same shape and dtype) into this
        tensor's memory."""
        dst = self._tensor("update_inplace")
        src = data._tensor("update_inplace") if isinstance(data, OrtValue) else data
        if not isinstance(src, np.ndarray):
            raise InvalidArgumentError("OrtValue.update_inplace needs a numpy array or an "
                                       f"OrtValue, got {type(data).__name__}")
        if src.shape != dst.shape or src.dtype != dst.dtype:
            raise InvalidArgumentError(
                f"OrtValue.update_inplace: got {src.dtype} {list(src.shape)}, this value is "
                f"{dst.dtype} {list(dst.shape)}")
        np.copyto(dst, src)

    def __repr__(self) -> str:
        try:
            what = self.data_type()
        except InvalidArgumentError:
            what = "empty" if self._value is None else "sequence"
        shape = f", shape={self.shape()}" if self.is_tensor() else ""
        return f"OrtValue({what}{shape}, device='cpu')"

    def _tensor(self, method: str) -> np.ndarray:
        if not isinstance(self._value, np.ndarray):
            kind = "an empty optional" if self._value is None else type(self._value).__name__
            raise as_status(InvalidArgumentError, RuntimeError)(   # (onnxruntime's class)
                f"OrtValue.{method}: this value is {kind}, not a tensor")
        return self._value


class _DLTensorHead(ctypes.Structure):
    """The first fields of DLPack's ``DLTensor`` (dlpack.h), up to its data type."""

    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


# A versioned capsule's DLManagedTensorVersioned puts its version, manager context, deleter
# and flags before the DLTensor; a legacy one's DLManagedTensor starts with it.
_VERSIONED_HEAD = 2 * 4 + 3 * 8
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def is_dlpack_uint8_tensor(capsule: Any) -> bool:
    """Whether an unconsumed DLPack capsule holds uint8 data (onnxruntime's test, made before
    DLPack had a bool type, to tell a bool tensor exported as uint8). Reads the capsule's
    header only: the capsule stays usable."""
    for name, offset in ((b"dltensor", 0), (b"dltensor_versioned", _VERSIONED_HEAD)):
        if type(capsule).__name__ == "PyCapsule" and _capsule_valid(capsule, name):
            head = _DLTensorHead.from_address(_capsule_pointer(capsule, name) + offset)
            return head.code == 1 and head.bits == 8 and head.lanes == 1   # (kDLUInt)
    raise InvalidArgumentError(f"is_dlpack_uint8_tensor takes an unconsumed DLPack capsule, "
                               f"not {type(capsule).__name__}")


class _Capsule:
    """A bare DLPack capsule made a producer numpy takes (a CPU tensor's)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)   # (kDLCPU)


class OrtValueVector:
    """onnxruntime's vector of :class:`OrtValue` (``run_with_ortvaluevector``'s feeds and
    fetches, ``IOBinding.get_outputs_as_ortvaluevector``)."""

    def __init__(self, values: Sequence[OrtValue] = ()) -> None:
        self._values: list[OrtValue] = list(values)

    def push_back(self, value: OrtValue) -> None:
        if not isinstance(value, OrtValue):
            raise InvalidArgumentError(f"OrtValueVector holds OrtValues, got "
                                       f"{type(value).__name__}")
        self._values.append(value)

    def push_back_batch(self, tensors: Sequence[Any], data_ptrs: Sequence[int],
                        element_types: Sequence[Any], shapes: Sequence[Sequence[int]],
                        devices: Sequence[Any]) -> None:
        """Append tensors given by address, element type and shape (the caller keeps each
        buffer alive, as with onnxruntime; ``tensors`` are the objects owning them)."""
        for ptr, et, shape in zip(data_ptrs, element_types, shapes, strict=True):
            self._values.append(OrtValue(array_at(ptr, et, shape, "push_back_batch")))

    def reserve(self, n: int) -> None:
        """No-op (a Python list grows as needed)."""

    def shrink_to_fit(self) -> None:
        """No-op."""

    def element_type_at(self, index: int) -> int:
        return self._values[index].element_type()

    def dlpack_at(self, index: int) -> Any:
        return self._values[index].to_dlpack()

    def to_dlpacks(self, to_tensor: Any = None) -> list[Any]:
        """Every value as a DLPack capsule, or ``to_tensor(capsule)`` of each."""
        caps = [v.to_dlpack() for v in self._values]
        return caps if to_tensor is None else [to_tensor(c) for c in caps]

    def _clear(self) -> None:
        self._values.clear()

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, index: int) -> OrtValue:
        return self._values[index]

    def __iter__(self):
        return iter(self._values)

    def __repr__(self) -> str:
        return f"OrtValueVector({self._values!r})"


def _check_tensor_dtype(dtype: np.dtype, what: str) -> None:
    try:
        onnx_elem_type(dtype)
    except KeyError:
        raise InvalidArgumentError(f"{what}: numpy dtype {dtype} has no ONNX element "
                                   "type") from None
