"""Memory limits: the largest tensor a model may declare or a kernel allocate (the session's
``session.onnxplex.max_tensor_bytes``, else a share of the machine's memory), and the
size arithmetic of stored tensors (sub-byte types included)."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import onnx

from .._dtypes import np_dtype
from .._errors import (
    InvalidModelError,
    TensorSizeError,
)

if TYPE_CHECKING:
    from .model import Dim

logger = logging.getLogger(__name__)


_SUB_BYTE_BITS = {onnx.TensorProto.INT4: 4, onnx.TensorProto.UINT4: 4}


@functools.cache
def _elem_bits(elem_type: int) -> int | None:
    """Bits per element of a tensor type (``None``: unknown or variable, e.g. strings)."""
    if elem_type in _SUB_BYTE_BITS:
        return _SUB_BYTE_BITS[elem_type]
    try:
        dt = np_dtype(elem_type)
    except KeyError:
        return None
    return None if dt == np.dtype(object) else dt.itemsize * 8


def _num_elements(dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= int(d)   # Python ints: a product of hostile dims must not wrap around
    return n


def _expected_nbytes(t: onnx.TensorProto) -> int | None:
    bits = _elem_bits(t.data_type)
    return None if bits is None else (_num_elements(t.dims) * bits + 7) // 8


MAX_TENSOR_BYTES_KEY = "session.onnxplex.max_tensor_bytes"


"""The session config entry of a session's memory limit: the largest tensor (or growing
sequence) in bytes its model may declare or its kernels may allocate."""


_SESSION_LIMIT: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "onnxplex_max_tensor_bytes", default=None)


"""The limit of the session building or running in this context (see :func:`tensor_limit`);
the inter-op pool's tasks run in copies of the run's context, so they see it too."""


@contextlib.contextmanager
def tensor_limit(nbytes: int | None) -> Iterator[None]:
    """Make ``nbytes`` the memory limit (:func:`max_tensor_bytes`) of what runs in this
    context: a session's load and runs, with its ``session.onnxplex.max_tensor_bytes``.
    ``None`` keeps the process default."""
    if nbytes is None:
        yield
        return
    token = _SESSION_LIMIT.set(nbytes)
    try:
        yield
    finally:
        _SESSION_LIMIT.reset(token)


def max_tensor_bytes() -> int:
    """The largest tensor (bytes) a model may declare or a kernel allocate: the session's
    ``session.onnxplex.max_tensor_bytes`` config entry while one of its loads or runs is in
    progress, else ``ONNXPLEX_MAX_TENSOR_BYTES`` when set, else the machine's physical memory
    (a tensor larger than that can never be held)."""
    session = _SESSION_LIMIT.get()
    if session is not None:
        return session
    env = os.environ.get("ONNXPLEX_MAX_TENSOR_BYTES", "").strip()
    if env:
        try:
            return int(float(env))
        except ValueError:
            logger.warning("ignoring ONNXPLEX_MAX_TENSOR_BYTES=%r: not a number", env)
    return _physical_memory()


def _limit_origin() -> str:
    """Where :func:`max_tensor_bytes` came from, for its errors."""
    if _SESSION_LIMIT.get() is not None:
        return f"the session's {MAX_TENSOR_BYTES_KEY}"
    if os.environ.get("ONNXPLEX_MAX_TENSOR_BYTES", "").strip():
        return "ONNXPLEX_MAX_TENSOR_BYTES"
    return f"this machine's memory; set {MAX_TENSOR_BYTES_KEY} to change it"


@functools.cache
def _physical_memory() -> int:
    """The machine's physical memory in bytes (asked once: a model's load checks hundreds of
    tensors)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):  # no sysconf (Windows): 1 TiB
        return 1 << 40


def format_bytes(n: int) -> str:
    """``3.55 PiB``-style size of ``n`` bytes."""
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if size < 1024 or unit == "EiB":
            return f"{n} bytes" if unit == "bytes" else f"{size:.2f} {unit}"
        size /= 1024
    return f"{n} bytes"  # pragma: no cover


def check_allocation(shape: Sequence[int], dtype: np.dtype, what: str, *,
                     already: int = 0) -> None:
    """Refuse, before a kernel allocates it, an output of ``shape`` and ``dtype`` (plus
    ``already`` bytes it adds to, for a growing sequence) larger than :func:`max_tensor_bytes`
    (the session's limit, ``ONNXPLEX_MAX_TENSOR_BYTES`` or the machine's memory): the run
    limit kernels whose output size comes from data (Expand, Tile, ConstantOfShape, Range,
    sequences in a loop) check, instead of growing until the machine's OOM killer ends the
    process. Raises :class:`TensorSizeError` naming ``what``."""
    n = 1
    for d in shape:
        n *= int(d)
    if n < 0:
        raise TensorSizeError(f"{what}: negative size in the shape {list(shape)}")
    nbytes = n * np.dtype(dtype).itemsize + already
    limit = max_tensor_bytes()
    if nbytes > limit:
        raise TensorSizeError(
            f"{what} ({np.dtype(dtype)}{[int(d) for d in shape]}) would need "
            f"{format_bytes(nbytes)} ({nbytes} bytes), more than the {format_bytes(limit)} "
            f"allowed ({_limit_origin()}); refused before allocating it")


def check_tensor_size(shape: Sequence[Dim], elem_type: int | None, what: str) -> None:
    """Refuse, before anything is allocated, a static shape with a negative dim or one whose
    tensor would need more than :func:`max_tensor_bytes`. The one place onnxplex checks sizes
    a model declares: stored tensors, declared and inferred value shapes, random feeds.
    Raises :class:`TensorSizeError` (an :class:`InvalidModelError`) naming ``what``."""
    dims = [d for d in shape if isinstance(d, int)]
    neg = [d for d in dims if d < 0]
    if neg:
        raise InvalidModelError(f"{what} has a negative dimension {neg[0]} in its shape "
                                f"{list(shape)}")
    if len(dims) != len(shape):
        return
    bits = _elem_bits(elem_type) if elem_type else None
    nbytes = (_num_elements(dims) * (bits or 8) + 7) // 8
    limit = max_tensor_bytes()
    if nbytes > limit:
        from .._dtypes import elem_type_name

        typ = elem_type_name(elem_type) if elem_type else "tensor"
        raise TensorSizeError(
            f"{what} ({typ}{list(shape)}) would need {format_bytes(nbytes)} ({nbytes} bytes), "
            f"more than the {format_bytes(limit)} allowed ({_limit_origin()}); refused "
            "before allocating it")
