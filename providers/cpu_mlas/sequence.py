"""Sequences and optionals: SequenceConstruct/Empty/At/Insert/Erase/Length, SplitToSequence,
ConcatFromSequence, Optional, OptionalHasElement, OptionalGetElement.

A sequence value is a Python ``list`` of arrays, an optional is the value or ``None``. Kernels
never modify their input lists: they build new ones (the arrays themselves are shared, as
ONNX values are immutable).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from onnxplex import NodeView, ProviderContext
from onnxplex.graph.limits import check_allocation

from ._np_helpers import norm_axis
from ._registry import op

Kernel = Callable[..., Any]


def _index(a: np.ndarray | None, n: int, default: int, *, allow_end: bool, what: str) -> int:
    """A sequence position from a scalar (or 1-element) tensor, checked against ``n``."""
    if a is None:
        return default
    i = int(np.asarray(a).reshape(-1)[0])
    hi = n if allow_end else n - 1
    if not -n <= i <= hi:
        raise IndexError(f"{what}: position {i} is out of range for a sequence of length {n}")
    return i + n if i < 0 else i


@op("SequenceConstruct", since=11)
def make_sequence_construct(node: NodeView, ctx: ProviderContext) -> Kernel:
    def kernel(*tensors: np.ndarray) -> list[np.ndarray]:
        return list(tensors)

    return kernel


@op("SequenceEmpty", since=11)
def make_sequence_empty(node: NodeView, ctx: ProviderContext) -> Kernel:
    def kernel() -> list[np.ndarray]:
        return []

    return kernel


@op("SequenceAt", since=11)
def make_sequence_at(node: NodeView, ctx: ProviderContext) -> Kernel:
    def kernel(seq: list[np.ndarray], position: np.ndarray) -> np.ndarray:
        return seq[_index(position, len(seq), 0, allow_end=False, what="SequenceAt")]

    return kernel


_NBYTES = operator.attrgetter("nbytes")


@op("SequenceInsert", since=11)
def make_sequence_insert(node: NodeView, ctx: ProviderContext) -> Kernel:
    def kernel(seq: list[np.ndarray], tensor: np.ndarray,
               position: np.ndarray | None = None) -> list[np.ndarray]:
        try:   # (the tensors' bytes at C speed: in a Loop this runs on every iteration)
            held = sum(map(_NBYTES, seq))
        except AttributeError:   # (a sequence of maps)
            held = sum(a.nbytes for a in seq if isinstance(a, np.ndarray))
        check_allocation(np.shape(tensor), getattr(tensor, "dtype", np.uint8),
                         f"SequenceInsert's sequence (holding {len(seq)} tensors)", already=held)
        out = list(seq)
        out.insert(_index(position, len(seq), len(seq), allow_end=True, what="SequenceInsert"),
                   tensor)
        return out

    return kernel


@op("SequenceErase", since=11)
def make_sequence_erase(node: NodeView, ctx: ProviderContext) -> Kernel:
    def kernel(seq: list[np.ndarray], position: np.ndarray | None = None) -> list[np.ndarray]:
        n = len(seq)
        if n == 0:
            raise IndexError("SequenceErase: the sequence is empty")
        i = _index(position, n, n - 1, allow_end=False, what="SequenceErase")
        return seq[:i] + seq[i + 1:]

    return kernel


@op("SequenceLength", since=11)
def make_sequence_length(node: NodeView, ctx: ProviderContext) -> Kernel:
    def kernel(seq: list[np.ndarray]) -> np.ndarray:
        return np.array(len(seq), dtype=np.int64)

    return kernel


@op("SplitToSequence", since=11)
def make_split_to_sequence(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis0 = int(node.attr("axis", 0))
    keepdims = bool(node.attr("keepdims", 1))

    def kernel(x: np.ndarray, split: np.ndarray | None = None) -> list[np.ndarray]:
        axis = norm_axis(axis0, x.ndim)
        dim = x.shape[axis]
        if split is None:
            parts = np.split(x, dim, axis=axis) if dim else []
            if not keepdims:
                return [np.squeeze(p, axis) for p in parts]
            return parts
        if split.ndim == 0:
            size = int(split)
            if size <= 0:
                raise ValueError(f"SplitToSequence: split must be positive, got {size}")
            cuts = list(range(size, dim, size))
        else:
            lengths = split.astype(np.int64)
            if lengths.sum() != dim or (lengths < 0).any():
                raise ValueError(f"SplitToSequence: split {lengths.tolist()} does not add up "
                                 f"to the axis length {dim}")
            cuts = np.cumsum(lengths)[:-1].tolist()
        return np.split(x, cuts, axis=axis)

    return kernel


@op("ConcatFromSequence", since=11)
def make_concat_from_sequence(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis0 = node.attr("axis")
    if axis0 is None:
        raise ValueError("ConcatFromSequence: attribute 'axis' is required")
    axis0 = int(axis0)
    new_axis = bool(node.attr("new_axis", 0))

    def kernel(seq: list[np.ndarray]) -> np.ndarray:
        if not seq:
            raise ValueError("ConcatFromSequence: the sequence is empty")
        if new_axis:
            return np.stack(seq, axis=norm_axis(axis0, seq[0].ndim + 1))
        return np.concatenate(seq, axis=norm_axis(axis0, seq[0].ndim))

    return kernel


@op("Optional", since=15)
def make_optional(node: NodeView, ctx: ProviderContext) -> Kernel:
    def kernel(x: Any = None) -> Any:
        return x

    return kernel


@op("OptionalHasElement", since=15)
@op("OptionalHasElement", since=18)
def make_optional_has_element(node: NodeView, ctx: ProviderContext) -> Kernel:
    def kernel(x: Any = None) -> np.ndarray:
        return np.array(x is not None)

    return kernel


@op("OptionalGetElement", since=15)
@op("OptionalGetElement", since=18)
def make_optional_get_element(node: NodeView, ctx: ProviderContext) -> Kernel:
    # Opset 15 takes only optionals, 18 also plain tensors and sequences (returned as they are);
    # at run time both look the same to a kernel: a value, or None for an empty optional.
    def kernel(x: Any = None) -> Any:
        if x is None:
            raise ValueError("OptionalGetElement: the optional input is empty")
        return x

    return kernel
