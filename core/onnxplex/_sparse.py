"""onnxruntime's ``SparseTensor``: COO, CSR(C) and block-sparse tensors on the CPU.

A sparse tensor holds its non-zero values and the indices that place them in its dense shape:
COO as a linear index per value (``[NNZ]``) or coordinates (``[NNZ, 2]``, a 2-D tensor's row and
column); CSR(C) as the column of each value (``inner``) and each row's first value
(``outer``, ``rows + 1`` entries); block-sparse as blocks of values and their block
coordinates. As in onnxruntime the arrays given are kept (not copied) and handed out
read-only; strings are copied into an object array. Sessions take them through
``OrtValue.ort_value_from_sparse_tensor`` for ``sparse_tensor(...)`` inputs (the
``SparseToDenseMatMul`` contrib op reads them) and return them for sparse outputs.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._errors import InvalidArgumentError, as_status

__all__ = ["OrtSparseFormat", "SparseTensor", "sparse_type_string"]


class OrtSparseFormat(enum.IntEnum):
    """A sparse tensor's layout. A member called returns itself: onnxruntime's Python
    ``SparseTensor.format()`` is a method and its C-level one's (which ``run`` returns) a
    property; :attr:`SparseTensor.format` serves both spellings."""

    ORT_SPARSE_UNDEFINED = 0
    ORT_SPARSE_COO = 1
    ORT_SPARSE_CSRC = 2
    ORT_SPARSE_BLOCK_SPARSE = 4

    def __call__(self) -> OrtSparseFormat:
        return self

    def __str__(self) -> str:
        return f"OrtSparseFormat.{self.name}"


def _error(message: str) -> InvalidArgumentError:
    return as_status(InvalidArgumentError, RuntimeError)(message)   # (onnxruntime's class)


def _frozen(arr: np.ndarray) -> np.ndarray:
    view = arr.view()
    view.flags.writeable = False
    return view


def _index_array(values: Any, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype != np.int64:
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise _error(f"{what} must be int64 indices, got {arr.dtype}")
        arr = arr.astype(np.int64)
    return np.ascontiguousarray(arr)


def _value_array(values: Any, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind in "US":
        arr = arr.astype(object)
    if arr.ndim != 1:
        raise _error(f"Expecting values 1-D numpy values array for {what} format. Got dims: "
                     f"{arr.ndim}")
    return np.ascontiguousarray(arr)


def sparse_type_string(dtype: np.dtype) -> str:
    from ._dtypes import elem_type_name, onnx_elem_type

    return f"sparse_tensor({elem_type_name(onnx_elem_type(dtype))})"


class _IndicesView:
    """The COO and block-sparse views: one ``indices()`` array each."""

    def __init__(self, indices: np.ndarray) -> None:
        self._indices = indices

    def indices(self) -> np.ndarray:
        return _frozen(self._indices)


class _CsrView:
    def __init__(self, inner: np.ndarray, outer: np.ndarray) -> None:
        self._inner, self._outer = inner, outer

    def inner(self) -> np.ndarray:
        return _frozen(self._inner)

    def outer(self) -> np.ndarray:
        return _frozen(self._outer)


class SparseTensor:
    """A sparse tensor in CPU memory (see the module's docstring)."""

    __slots__ = ("_format", "_shape", "_values", "_indices", "_outer")

    def __init__(self, fmt: OrtSparseFormat, dense_shape: Sequence[int], values: np.ndarray,
                 indices: np.ndarray, outer: np.ndarray | None = None) -> None:
        # Not public: use the factory methods, which check their arguments.
        self._format, self._shape = fmt, [int(d) for d in dense_shape]
        self._values, self._indices, self._outer = values, indices, outer

    # ------------------------------------------------------------------------ factories

    @classmethod
    def sparse_coo_from_numpy(cls, dense_shape: Sequence[int], values: np.ndarray,
                              coo_indices: np.ndarray, ort_device: Any = None) -> SparseTensor:
        """COO: ``coo_indices`` holds a linear index per value (as many as ``values``) or
        coordinate pairs (twice as many, or a ``[NNZ, 2]`` array) into a 2-D shape."""
        _check_device(ort_device)
        shape = _shape(dense_shape)
        vals = _value_array(values, "COO")
        idx = _index_array(coo_indices, "coo_indices")
        n = vals.size
        if idx.size == n and (idx.ndim == 1 or n == 0):
            idx = idx.reshape(-1)
        elif idx.size == 2 * n and len(shape) == 2:
            idx = idx.reshape(n, 2)
        else:
            raise _error(f"Index size: {idx.size} must be equal to or twice the values size: "
                         f"{n}")
        size = math.prod(shape)
        bounds = np.array(shape, np.int64) if idx.ndim == 2 else size
        if idx.size and ((idx < 0).any() or (idx >= bounds).any()):
            raise _error(f"COO indices fall outside the dense shape {shape}")
        return cls(OrtSparseFormat.ORT_SPARSE_COO, shape, vals, idx)

    @classmethod
    def sparse_csr_from_numpy(cls, dense_shape: Sequence[int], values: np.ndarray,
                              inner_indices: np.ndarray, outer_indices: np.ndarray,
                              ort_device: Any = None) -> SparseTensor:
        """CSR(C) of a 2-D shape: the column of each value and each row's first value (rows
        + 1 entries, the last the number of values)."""
        _check_device(ort_device)
        shape = _shape(dense_shape)
        if len(shape) != 2:
            raise _error(f"CSR format needs a 2-D dense shape, got {shape}")
        vals = _value_array(values, "CSR")
        inner = _index_array(inner_indices, "inner_indices").reshape(-1)
        outer = _index_array(outer_indices, "outer_indices").reshape(-1)
        if inner.size != vals.size:
            raise _error(f"inner_indices has {inner.size} entries for {vals.size} values")
        if vals.size and (outer.size != shape[0] + 1 or outer[0] != 0
                          or outer[-1] != vals.size or (np.diff(outer) < 0).any()):
            raise _error(f"outer_indices must rise from 0 to {vals.size} over {shape[0] + 1} "
                         "entries")
        if inner.size and ((inner < 0).any() or (inner >= shape[1]).any()):
            raise _error(f"CSR inner indices fall outside {shape[1]} columns")
        return cls(OrtSparseFormat.ORT_SPARSE_CSRC, shape, vals, inner, outer)

    @classmethod
    def blocksparse_from_numpy(cls, dense_shape: Sequence[int], values: np.ndarray,
                               indices: np.ndarray, ort_device: Any = None) -> SparseTensor:
        """Block-sparse: ``values`` [blocks, bh, bw] and ``indices`` [2, blocks] (the block
        row and column of each)."""
        _check_device(ort_device)
        shape = _shape(dense_shape)
        vals = np.ascontiguousarray(np.asarray(values))
        idx = _index_array(indices, "indices")
        if vals.ndim < 3 or idx.ndim != 2 or idx.shape[0] != 2 or idx.shape[1] != vals.shape[0]:
            raise _error("block-sparse values must be [blocks, block rows, block cols] and "
                         "indices [2, blocks]")
        return cls(OrtSparseFormat.ORT_SPARSE_BLOCK_SPARSE, shape, vals, idx)

    @classmethod
    def from_dense(cls, dense: np.ndarray) -> SparseTensor:
        """COO (linear indices) of the non-zero (non-empty, for strings) elements of
        ``dense``: how a session returns an output declared ``sparse_tensor(...)``."""
        flat = np.ascontiguousarray(dense).reshape(-1)
        nz = np.flatnonzero(flat != ("" if flat.dtype == object else 0))
        return cls(OrtSparseFormat.ORT_SPARSE_COO, dense.shape, flat[nz], nz.astype(np.int64))

    # ------------------------------------------------------------------------ accessors

    @property
    def format(self) -> OrtSparseFormat:
        """The layout (``st.format`` and ``st.format()`` both work, see
        :class:`OrtSparseFormat`)."""
        return self._format

    def dense_shape(self) -> list[int]:
        return list(self._shape)

    def values(self) -> np.ndarray:
        """The non-zero values (read-only; shares the array given)."""
        return _frozen(self._values)

    def data_type(self) -> str:
        return sparse_type_string(self._values.dtype)

    def device_name(self) -> str:
        return "cpu"

    def as_coo_view(self) -> _IndicesView:
        if self._format != OrtSparseFormat.ORT_SPARSE_COO:
            raise _error("This sparse tensor does not contain COO format")
        return _IndicesView(self._indices)

    def as_csrc_view(self) -> _CsrView:
        if self._format != OrtSparseFormat.ORT_SPARSE_CSRC:
            raise _error("This sparse tensor does not contain CSR(C) format")
        return _CsrView(self._indices, self._outer)

    def as_blocksparse_view(self) -> _IndicesView:
        if self._format != OrtSparseFormat.ORT_SPARSE_BLOCK_SPARSE:
            raise _error("This sparse tensor does not contain BlockSparse format")
        return _IndicesView(self._indices)

    get_coo_data = as_coo_view            # (the C-level class's names)
    get_csrc_data = as_csrc_view
    get_blocksparse_data = as_blocksparse_view

    def to_cuda(self, ort_device: Any) -> SparseTensor:
        raise _error("Cuda is not available in this build: onnxplex runs on the CPU only")

    def to_dense(self) -> np.ndarray:
        """The dense array (onnxplex's addition, for kernels and checks)."""
        vals = self._values
        dense = (np.zeros(self._shape, vals.dtype) if vals.dtype != object
                 else np.full(self._shape, "", dtype=object))
        if self._format == OrtSparseFormat.ORT_SPARSE_COO:
            flat = dense.reshape(-1)
            if self._indices.ndim == 1:
                flat[self._indices] = vals
            else:
                dense[tuple(self._indices.T)] = vals
        elif self._format == OrtSparseFormat.ORT_SPARSE_CSRC:
            rows = np.repeat(np.arange(self._shape[0]), np.diff(self._outer))
            dense[rows, self._indices] = vals
        else:
            bh, bw = vals.shape[1], vals.shape[2]
            for k, (r, c) in enumerate(self._indices.T):
                dense[r * bh:(r + 1) * bh, c * bw:(c + 1) * bw] = vals[k]
        return dense

    def __repr__(self) -> str:
        return (f"SparseTensor({self._format.name}, dense_shape={self._shape}, "
                f"nnz={self._values.shape[0] if self._values.ndim else 0}, "
                f"{self.data_type()})")


def _shape(dense_shape: Sequence[int]) -> list[int]:
    dims = [int(d) for d in np.asarray(dense_shape).reshape(-1)]
    if any(d < 0 for d in dims):
        raise _error(f"dense shape {dims} has a negative dimension")
    return dims


def _check_device(device: Any) -> None:
    if device is None:
        return
    kind = device.device_type() if callable(getattr(device, "device_type", None)) else None
    if kind not in (0, None):
        raise _error("onnxplex holds sparse tensors in CPU memory only")
