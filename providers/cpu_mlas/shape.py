"""Shape and data-movement kernels: reshape family, slicing, gather/scatter, constants.

Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Identity, Split and Slice return views of their
input where numpy can (the framework never writes into kernel outputs). Constant inputs
(shapes, axes, starts...) are read once in the factory.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

import numpy as np

from onnxplex import NodeView, ProviderContext
from onnxplex.graph.limits import check_allocation

from ._blas import intra_threads
from ._native import native, planned_step
from ._np_helpers import (
    as_array,
    const_input,
    decode_strings,
    int_list,
    norm_axes,
    norm_axis,
    str_guard,
)
from ._registry import op

logger = logging.getLogger(__name__)

Kernel = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]


def _rank(node: NodeView, i: int = 0) -> int | None:
    v = node.input(i)
    return None if v is None else v.rank


def _dims(node: NodeView, i: int = 0) -> tuple | None:
    """Input ``i``'s declared shape (dims are ints, names or ``None``), ``None`` if unknown."""
    v = node.input(i)
    return None if v is None else v.shape


def _not_strings(node: NodeView, *inputs: int) -> bool:
    """Whether each of ``inputs`` has a declared dtype that is not a string (no str_guard)."""
    for i in inputs:
        v = node.input(i)
        dt = None if v is None else v.dtype
        if dt is None or dt.kind in "OSU":
            return False
    return True


# --------------------------------------------------------------------------------------------
# Reshape family
# --------------------------------------------------------------------------------------------


def _reshape_target(in_shape: tuple[int, ...], shape: Sequence[int],
                    allowzero: bool) -> list[int]:
    if allowzero:
        return list(shape)
    return [in_shape[i] if s == 0 else s for i, s in enumerate(shape)]


@op("Reshape", since=1)
@op("Reshape", since=5)
@op("Reshape", since=14)
def make_reshape(node: NodeView, ctx: ProviderContext) -> Kernel:
    allowzero = bool(node.attr("allowzero", 0))
    shape = int_list(node.attr("shape")) if node.opset < 5 else int_list(const_input(node, 1))
    if shape is not None:
        _check_reshape_spec(shape, allowzero)
        dims = _dims(node)
        if not allowzero and 0 in shape and dims is not None and len(dims) >= len(shape):
            # a 0 copies the input's dim: a known one now, else one read per call
            shape = [dims[i] if s == 0 and type(dims[i]) is int else s
                     for i, s in enumerate(shape)]
        if allowzero or 0 not in shape:
            fixed = tuple(shape)
            return lambda x, s=None: x.reshape(fixed)
        if shape[0] == 0 and 0 not in shape[1:]:
            rest = tuple(shape[1:])   # ([0, -1], [0, k, ...]: the batch dim kept)
            return lambda x, s=None: x.reshape((x.shape[0], *rest))
        const = shape
        return lambda x, s=None: x.reshape(_reshape_target(x.shape, const, False))

    def kernel(x: np.ndarray, s: np.ndarray) -> np.ndarray:
        spec = s.tolist()
        _check_reshape_spec(spec, allowzero)
        return x.reshape(_reshape_target(x.shape, spec, allowzero))

    return kernel


def _check_reshape_spec(shape: list[int], allowzero: bool) -> None:
    """Reshape's shape as the spec allows it: sizes >= 0, at most one -1, and with allowzero
    not both a 0 and a -1 (numpy would take any negative size as the one to infer)."""
    bad = [d for d in shape if d < -1]
    if bad:
        raise ValueError(f"Reshape: shape {list(shape)} has {bad[0]}; sizes are >= 0, or -1 "
                         "for the one inferred")
    if shape.count(-1) > 1:
        raise ValueError(f"Reshape: shape {list(shape)} has more than one -1")
    if allowzero and -1 in shape and 0 in shape:
        raise ValueError(f"Reshape: shape {list(shape)} has both 0 and -1 with allowzero=1")


@op("Flatten", since=1)
@op("Flatten", since=11)  # negative axis
def make_flatten(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis = int(node.attr("axis", 1))
    dims = _dims(node)
    a = None if dims is None else axis + len(dims) if axis < 0 else axis
    if a is not None and 0 <= a <= len(dims):
        if a == 1 and len(dims) == 2:
            return lambda x: x   # (already [N, M])
        inner = dims[a:]
        if all(type(d) is int for d in inner):
            n_in = math.prod(inner)
            if a == 1:
                return lambda x: x.reshape(x.shape[0], n_in)
            if a == 0:
                return lambda x: x.reshape(1, n_in)
            return lambda x: x.reshape(math.prod(x.shape[:a]), n_in)
        return lambda x: x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))

    def kernel(x: np.ndarray) -> np.ndarray:
        a = axis + x.ndim if axis < 0 else axis
        if not 0 <= a <= x.ndim:
            raise ValueError(f"Flatten: axis {axis} is out of range for rank {x.ndim}")
        return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))

    return kernel


@op("Squeeze", since=1)
@op("Squeeze", since=11)
@op("Squeeze", since=13)
def make_squeeze(node: NodeView, ctx: ProviderContext) -> Kernel:
    if node.opset < 13:
        axes = int_list(node.attr("axes"))
        static = True
    else:
        axes = int_list(const_input(node, 1))
        static = axes is not None or node.input(1) is None

    def squeeze(x: np.ndarray, ax: list[int] | None) -> np.ndarray:
        if ax is None:
            return np.squeeze(x)
        return np.squeeze(x, axis=norm_axes(ax, x.ndim)) if ax else x

    rank = _rank(node)
    if static and axes and rank is not None:
        try:
            fixed = norm_axes(axes, rank)
        except ValueError:
            fixed = None   # (raised per call, as before)
        if fixed is not None:
            return lambda x, a=None: x.squeeze(fixed)
    if static:
        if not axes and axes is not None:
            return lambda x, a=None: x
        return lambda x, *_: squeeze(x, axes)
    return lambda x, a=None: squeeze(x, None if a is None else int_list(a))


def _unsqueeze_shape(shape: tuple[int, ...], axes: Sequence[int]) -> list[int]:
    rank = len(shape) + len(axes)
    pos = set(norm_axes(axes, rank))
    it = iter(shape)
    return [1 if i in pos else next(it) for i in range(rank)]


@op("Unsqueeze", since=1)
@op("Unsqueeze", since=11)
@op("Unsqueeze", since=13)
def make_unsqueeze(node: NodeView, ctx: ProviderContext) -> Kernel:
    axes = int_list(node.attr("axes")) if node.opset < 13 else int_list(const_input(node, 1))
    rank = _rank(node)
    if axes is not None and rank is not None:
        try:
            pos = set(norm_axes(axes, rank + len(axes)))
        except ValueError:
            pos = None   # (raised per call, as before)
        if pos is not None:
            # x[:, None, ...]: a view with 1s inserted, no shape built per call
            index = tuple(None if i in pos else slice(None) for i in range(rank + len(axes)))
            return lambda x, a=None: x[index]
    if axes is not None:
        fixed = axes
        return lambda x, *_: x.reshape(_unsqueeze_shape(x.shape, fixed))
    return lambda x, a: x.reshape(_unsqueeze_shape(x.shape, int_list(a) or []))


# A rank-4 rotation (the layout level's NCHW <-> NHWC transposes; float32 in register tiles,
# other 1-, 2-, 4- and 8-byte elements as they are) of at least this many elements is copied by
# the native kernel; smaller ones, and other perms, stay numpy views. The channels-last kernels
# after a rotation read contiguous arrays, and numpy's copy of a transposed view costs ~4 ns an
# element (inner runs of 3 for an RGB image): a tiny CNN's [1, 3, 32, 32] input copied that
# way inside its first conv was 12 of the model's 38 us; natively, 3.
_NATIVE_TRANSPOSE_MIN = 256
_NATIVE_CONCAT_BYTES = 256 << 10   # (below it numpy's copy is as quick as the call)


def _rotation(perm: tuple[int, ...]) -> tuple[int, int] | None:
    """``(j, k)`` for ``perm = (0, ..., j-1, j+k, ..., n-1, j, ..., j+k-1)``: the first ``j``
    axes kept, the trailing ones rotated by ``k``; the transpose is then one 2-D transpose
    (rows: axes ``j .. j+k-1``) per item of the kept axes (a channels-last image to
    channels-first and back; a channel shuffle's swap of its last two axes)."""
    n = len(perm)
    for j in range(n - 1):
        if perm[:j] != tuple(range(j)):
            break
        for k in range(1, n - j):
            if perm[j:] == (*range(j + k, n), *range(j, j + k)):
                return j, k
    return None


def _rotation_with_tail(perm: tuple[int, ...]) -> tuple[int, int, int] | None:
    """``(j, k, t)`` when ``perm`` keeps its last ``t`` axes (t >= 1) in place and is the
    rotation ``(j, k)`` of :func:`_rotation` on the others (MobileViT's patch unfolding,
    ``(0, 2, 1, 3)`` over [N, 16, 2, 2]); else None."""
    n, t = len(perm), 0
    while t < n and perm[n - 1 - t] == n - 1 - t:
        t += 1
    if t == 0 or n - t < 2:
        return None
    rot = _rotation(perm[:n - t])
    return None if rot is None else (*rot, t)


# the unsigned type of each element size transpose_elems moves
_BYTES_DTYPES = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32),
                 8: np.dtype(np.uint64)}


def _tail_transpose(perm: tuple[int, ...], kept: int, k: int, tail: int) -> Kernel:
    """A transpose that keeps trailing axes in place and rotates the others: when the kept
    block is 1-8 bytes (a float pair), the leading axes' rotation (:func:`_rotation_transpose`)
    of the blocks viewed as single unsigned elements; numpy's copy of the view ran inner loops
    of the block's few elements (MobileViT's 16 unfold/fold transposes, most of its Reshape
    time)."""
    lead = len(perm) - tail
    rotate = _rotation_transpose(perm[:lead], kept, k, planned=False)

    def kernel(x: np.ndarray) -> np.ndarray:
        as_bytes = _BYTES_DTYPES.get(math.prod(x.shape[lead:]) * x.itemsize)
        if as_bytes is None or not x.flags.c_contiguous or x.dtype.hasobject:
            return np.transpose(x, perm)
        head = x.shape[:lead]
        y = rotate(x.reshape(head + (-1,)).view(as_bytes).reshape(head))
        if not y.flags.c_contiguous:   # (below the native kernel's size: numpy's view)
            return np.transpose(x, perm)
        return y.view(x.dtype).reshape(y.shape + x.shape[lead:])

    return kernel


@op("Transpose", since=1)
def make_transpose(node: NodeView, ctx: ProviderContext) -> Kernel:
    perm = node.attr("perm")
    perm = None if perm is None else tuple(int(p) for p in perm)
    if perm is not None and sorted(perm) != list(range(len(perm))):
        raise ValueError(f"Transpose: perm {list(perm)} is not a permutation of "
                         f"0..{len(perm) - 1}")
    rank = node.inputs[0].rank if node.inputs and node.inputs[0] is not None else None
    if perm is not None and rank is not None and rank != len(perm):
        raise ValueError(f"Transpose: perm {list(perm)} has {len(perm)} entries for an input "
                         f"of rank {rank}")
    # (every rank: a rank-2 or -3 transpose was left a view for the GEMMs to read as it is,
    # but most of its readers are not GEMMs (Reshape, LayerNorm, Gelu, Div, GatherND in the
    # zoo's models) and their np.ascontiguousarray of it is numpy's transposing copy:
    # SegFormer's [1, 128, 4096] -> [1, 4096, 128] 1.5 ms a Gelu against ~0.1 natively)
    split = None if perm is None or len(perm) < 2 else _rotation(perm)
    if split is None and perm is not None:
        if (tail := _rotation_with_tail(perm)) is not None:
            return _tail_transpose(perm, *tail)
        if (pair := _two_rotations(perm)) is not None:
            first, second = (_rotation_transpose(r, *_rotation(r), planned=False) for r in pair)
            return lambda x: second(first(x))
    if split is None:
        return lambda x: np.transpose(x, perm)
    return _rotation_transpose(perm, *split)


def _two_rotations(perm: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Two rotations (:func:`_rotation`) whose transposes in turn make ``perm``, for a
    permutation that moves the last axis (numpy's copy of its view then gathers single
    elements far apart: MobileViT's fold, (0, 3, 2, 1) over [1, 144, 256, 4], is a swap of the
    last two axes, then a rotation of the last three); else None."""
    n = len(perm)
    if n < 3 or perm[-1] == n - 1:
        return None
    for j in range(n - 1):
        for k in range(1, n - j):
            first = (*range(j), *range(j + k, n), *range(j, j + k))
            then = tuple(first.index(a) for a in perm)
            if _rotation(then) is not None:
                return first, then
    return None


def _rotation_transpose(perm: tuple[int, ...], kept: int, k: int, *,
                        planned: bool = True) -> Kernel:
    """The native kernel of a rotation ``perm`` (:func:`_rotation`: ``(kept, k)``); with
    ``planned``, float32 shapes as a native step the executor runs without Python."""
    nat = native()
    if nat is None or not hasattr(nat, "transpose_f32"):
        return lambda x: np.transpose(x, perm)
    transpose_f32 = nat.transpose_f32
    # other element types (a quantized model's 8-bit images, halves) moved as their bytes
    transpose_elems = getattr(nat, "transpose_elems", None)
    # per input shape: (x as [n, rows, cols], y's [n, cols, rows], y's shape), or None for
    # numpy's transposed view (worked out once: the shape arithmetic was ~2 us of a call,
    # a tiny CNN's layout transposes take ~3)
    # float32 ones as a native step (register_step.cpp): the plan of a shape, its 4th part
    shapes: dict[tuple[int, ...], tuple | None] = {}
    make_plan = getattr(nat, "transpose_f32_plan", None) if planned else None

    def kernel(x: np.ndarray) -> np.ndarray:
        # numpy's copy of a transposed view: a channels-last view of a 3-channel image ~180
        # us at 224^2, a channel shuffle's [784, 2, 58] swap 190 us; the native tiles: a few
        # us, 31
        dt = x.dtype
        f32 = dt is _F32 or dt == _F32
        if not x.flags.c_contiguous or not (f32 or (
                transpose_elems is not None and dt.kind in "uifb" and dt.itemsize in _MOVED)):
            return np.transpose(x, perm)
        shape = x.shape
        plan = shapes.get(shape, False)
        if plan is False:
            plan = _transpose_shapes(shape, perm, kept, k)
            if plan is not None:
                plan = (*plan, None if step is None else make_plan(shape, plan[2], *plan[0]))
            if len(shapes) >= 64:   # many input shapes: keep the cache bounded
                shapes.clear()
            shapes[shape] = plan
        if plan is None:
            return np.transpose(x, perm)
        x3, y3, out, native_plan = plan
        if f32 and native_plan is not None:
            step.install(native_plan)   # (later calls of this shape: without Python)
            return native_plan(x)
        y = np.empty(y3, dtype=dt)
        (transpose_f32 if f32 else transpose_elems)(x.reshape(x3), y)
        return y.reshape(out)

    step = planned_step(kernel) if make_plan is not None else None
    return step if step is not None else kernel


_F32 = np.dtype(np.float32)
_MOVED = (1, 2, 4, 8)   # element sizes transpose_elems moves


def _transpose_shapes(shape: tuple[int, ...], perm: tuple[int, ...], kept: int, k: int
                      ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """How :func:`make_transpose`'s native kernel sees an input of ``shape``: ``[n, rows,
    cols]`` in, ``[n, cols, rows]`` out, the output's shape; None below the size where numpy's
    view wins."""
    if math.prod(shape) < _NATIVE_TRANSPOSE_MIN:
        return None
    n = math.prod(shape[:kept])
    rows, cols = math.prod(shape[kept:kept + k]), math.prod(shape[kept + k:])
    return (n, rows, cols), (n, cols, rows), tuple(shape[p] for p in perm)


@op("Identity", since=1)
def make_identity(node: NodeView, ctx: ProviderContext) -> Kernel:
    return lambda x: x


@op("Expand", since=8)
def make_expand(node: NodeView, ctx: ProviderContext) -> Kernel:
    """Expand: the output shape worked out once per input shape (numpy's broadcast_shapes and
    broadcast_to are Python functions: ~30 us a call in a model, where a decoder's GQA key and
    mask expands run dozens of times a step), the copy broadcast by np.copyto in C."""
    shape = None if (const := int_list(const_input(node, 1))) is None else tuple(const)
    targets: dict[tuple, tuple[int, ...]] = {}

    def kernel(x: np.ndarray, s: np.ndarray) -> np.ndarray:
        key = (x.shape, shape if shape is not None else tuple(s.tolist()))
        target = targets.get(key)
        if target is None:
            target = np.broadcast_shapes(*key)
            if len(targets) < 64:   # (a few shapes per session; bounded all the same)
                targets[key] = target
        if target == x.shape:
            return x
        check_allocation(target, x.dtype, "Expand's output")
        y = np.empty(target, dtype=x.dtype)
        np.copyto(y, x)
        return y

    return kernel


@op("Tile", since=1)
@op("Tile", since=6)
def make_tile(node: NodeView, ctx: ProviderContext) -> Kernel:
    if node.opset < 6:
        def kernel_v1(x: np.ndarray, tiles: np.ndarray, axis: np.ndarray) -> np.ndarray:
            reps = [1] * x.ndim
            reps[norm_axis(int(axis.reshape(-1)[0]), x.ndim)] = int(tiles.reshape(-1)[0])
            return np.tile(x, reps)

        return kernel_v1
    reps = int_list(const_input(node, 1))

    def kernel(x: np.ndarray, r: np.ndarray) -> np.ndarray:
        rr = reps if reps is not None else r.tolist()
        if len(rr) == x.ndim:
            check_allocation([d * k for d, k in zip(x.shape, rr)], x.dtype, "Tile's output")
        return np.tile(x, rr)

    return kernel


# --------------------------------------------------------------------------------------------
# Shape queries and constants
# --------------------------------------------------------------------------------------------


@op("Shape", since=1)
@op("Shape", since=15)
def make_shape(node: NodeView, ctx: ProviderContext) -> Kernel:
    start = int(node.attr("start", 0))
    end = node.attr("end")
    end = None if end is None else int(end)
    return lambda x: np.array(x.shape[start:end], dtype=np.int64)


@op("Size", since=1)
def make_size(node: NodeView, ctx: ProviderContext) -> Kernel:
    return lambda x: np.asarray(x.size, dtype=np.int64)


@op("ConstantOfShape", since=9)
def make_constant_of_shape(node: NodeView, ctx: ProviderContext) -> Kernel:
    value = node.attr("value")
    if value is None:
        value = np.zeros(1, np.float32)
    value = np.asarray(value)
    if value.dtype.kind in "SU":
        value = decode_strings(value)
    fill = value.reshape(-1)[0]
    dtype = value.dtype

    def kernel(s: np.ndarray) -> np.ndarray:
        shape = tuple(int(d) for d in s.tolist())
        check_allocation(shape, dtype, "ConstantOfShape's output")
        return np.full(shape, fill, dtype=dtype)

    return kernel


def _constant_value(node: NodeView) -> np.ndarray:
    a = node.attrs
    if "value" in a:
        v = np.asarray(a["value"])
        return decode_strings(v) if v.dtype.kind in "SU" else v
    if "value_float" in a:
        return np.array(a["value_float"], dtype=np.float32)
    if "value_floats" in a:
        return np.array(a["value_floats"], dtype=np.float32).reshape(-1)
    if "value_int" in a:
        return np.array(a["value_int"], dtype=np.int64)
    if "value_ints" in a:
        return np.array(a["value_ints"], dtype=np.int64).reshape(-1)
    if "value_string" in a:
        return decode_strings(np.array(a["value_string"], dtype=object))
    if "value_strings" in a:
        return decode_strings(np.array(list(a["value_strings"]), dtype=object).reshape(-1))
    raise ValueError("Constant has no value attribute")


def _constant_supported(node: NodeView) -> str | None:
    if "sparse_value" in node.attrs:
        return "Constant with a sparse_value attribute is not supported (densify it offline)"
    return None


@op("Constant", since=1, predicate=_constant_supported)
def make_constant(node: NodeView, ctx: ProviderContext) -> Kernel:
    value = _constant_value(node).view()
    value.flags.writeable = False  # one array serves every run
    return lambda: value


def _dropout_legacy_predicate(node: NodeView) -> str | None:
    if node.opset < 7 and not node.attr("is_test", 0):
        return "training-mode Dropout (is_test=0) is not supported (inference only)"
    return None


@op("Dropout", since=1, predicate=_dropout_legacy_predicate)
@op("Dropout", since=7)  # is_test removed: always inference
@op("Dropout", since=10)  # the mask became bool
def make_dropout_legacy(node: NodeView, ctx: ProviderContext) -> Kernel:
    want_mask = len(node.outputs) > 1 and node.outputs[1] is not None
    if not want_mask:
        return lambda x: x
    return lambda x: (x, np.ones(x.shape, dtype=x.dtype if node.opset < 10 else bool))


def _dropout_predicate(node: NodeView) -> str | None:
    training = const_input(node, 2)
    if training is not None and bool(training.reshape(-1)[0]):
        return "Dropout with training_mode=True is not supported (inference only)"
    return None


@op("Dropout", since=12, predicate=_dropout_predicate)
def make_dropout(node: NodeView, ctx: ProviderContext) -> Kernel:
    want_mask = len(node.outputs) > 1 and node.outputs[1] is not None
    seed = node.attr("seed")

    def kernel(x: np.ndarray, ratio: np.ndarray | None = None,
               training: np.ndarray | None = None):
        if training is not None and bool(np.asarray(training).reshape(-1)[0]):
            r = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
            # With a seed, draw as the ONNX reference does (numpy's legacy RandomState), so a
            # seeded training-mode Dropout is reproducible and matches the reference exactly.
            uniform = (np.random.RandomState(int(seed)).uniform(0.0, 1.0, x.shape)
                       if seed is not None else np.random.default_rng().random(x.shape))
            keep = uniform >= r
            scale = x.dtype.type(1.0 / (1.0 - r)) if r < 1 else x.dtype.type(0)
            y = np.where(keep, x * scale, x.dtype.type(0))
            return (y, keep) if want_mask else y
        if want_mask:
            return x, np.ones(x.shape, dtype=bool)
        return x

    return kernel


# --------------------------------------------------------------------------------------------
# Concat, Split, Slice
# --------------------------------------------------------------------------------------------


@op("Concat", since=1)
@op("Concat", since=4)
def make_concat(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis = int(node.attr("axis", 1))
    n = len(node.inputs)
    rank = next((r for r in map(lambda i: _rank(node, i), range(n)) if r is not None), None)
    if rank is not None and _not_strings(node, *range(n)) and -rank <= axis < max(rank, 1):
        if n == 1:
            return lambda x: x   # (one input: the output is it)
        a = norm_axis(axis, rank)
        nat = native()
        if nat is None or not hasattr(nat, "concat_rows"):
            return lambda *xs: np.concatenate(xs, a)
        rows_of = nat.concat_rows

        def kernel(*xs: np.ndarray) -> np.ndarray:
            # Large ones natively, rows over the threads (DenseNet's channels-last concats of
            # a few MB: numpy copies on one thread); numpy's checks and promotion otherwise
            x0 = xs[0]
            if x0.nbytes * len(xs) < _NATIVE_CONCAT_BYTES or x0.ndim != rank \
                    or x0.dtype.kind not in "biufc":
                return np.concatenate(xs, a)
            dt, head, tail = x0.dtype, x0.shape[:a], x0.shape[a + 1:]
            size = 0
            for x in xs:
                if x.dtype != dt or x.shape[:a] != head or x.shape[a + 1:] != tail \
                        or not x.flags.c_contiguous:
                    return np.concatenate(xs, a)
                size += x.shape[a]
            out = np.empty((*head, size, *tail), dtype=dt)
            rows_of(xs, out, math.prod(head), intra_threads())
            return out

        return kernel

    def kernel(*xs: np.ndarray) -> np.ndarray:
        a = norm_axis(axis, xs[0].ndim)
        if any(x.dtype.kind in "SUO" for x in xs):
            xs = tuple(str_guard(x) for x in xs)
        return np.concatenate(xs, axis=a)

    return kernel


def _split_sizes(dim: int, split: list[int] | None, n: int, even: bool) -> list[int]:
    """The sizes of ``n`` parts of a dimension of ``dim``: ``split`` when given (one size an
    output, summing to ``dim``), else equal parts (``even``: they must be, before opset 18;
    from 18 the last may be smaller). Anything else is an error, as in onnxruntime (numpy
    would hand the remainder to the last part)."""
    if split is not None:
        if len(split) != n or any(s < 0 for s in split) or sum(split) != dim:
            raise ValueError(f"Split: sizes {split} do not split a dimension of {dim} into "
                             f"{n} output(s)")
        return split
    if even and dim % n:
        raise ValueError(f"Split: a dimension of {dim} does not split evenly into {n} outputs")
    chunk = -(-dim // n)
    last = dim - chunk * (n - 1)
    if last < 0:
        raise ValueError(f"Split: a dimension of {dim} cannot make {n} outputs")
    return [chunk] * (n - 1) + [last]


@op("Split", since=1)
@op("Split", since=2)
@op("Split", since=13)
@op("Split", since=18)
def make_split(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis = int(node.attr("axis", 0))
    n_out = len(node.outputs)
    from_input = node.opset >= 13 or node.opset == 1
    split = int_list(node.attr("split")) if node.opset < 13 else None
    if from_input and node.input(1) is not None:
        split = int_list(const_input(node, 1))
        dynamic = split is None
    else:
        dynamic = False
    even = node.opset < 18   # (18: num_outputs, the last part may be smaller)

    def kernel(x: np.ndarray, s: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        a = norm_axis(axis, x.ndim)
        sizes = _split_sizes(x.shape[a], int_list(s) if dynamic else split, n_out, even)
        bounds = np.cumsum(sizes[:-1]).tolist()
        return tuple(np.split(x, bounds, axis=a))

    return kernel


def _slice_index(rank: int, starts: list[int], ends: list[int], axes: list[int] | None,
                 steps: list[int] | None) -> tuple[slice, ...]:
    """numpy's slicing clamps exactly as ONNX Slice does (including negative steps)."""
    axes = list(range(len(starts))) if axes is None else [norm_axis(a, rank) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * rank
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        if st == 0:
            raise ValueError("Slice: steps must not be 0")
        index[a] = slice(s, e, st)
    return tuple(index)


@op("Slice", since=1)
def make_slice_v1(node: NodeView, ctx: ProviderContext) -> Kernel:
    starts, ends = int_list(node.attr("starts")), int_list(node.attr("ends"))
    axes = int_list(node.attr("axes"))
    return lambda x: x[_slice_index(x.ndim, starts, ends, axes, None)]


@op("Slice", since=10)
@op("Slice", since=11)  # negative axes
def make_slice(node: NodeView, ctx: ProviderContext) -> Kernel:
    consts = [int_list(const_input(node, i)) for i in range(1, 5)]
    present = [node.input(i) is not None for i in range(1, 5)]
    rank = _rank(node)
    if all(c is not None or not p for c, p in zip(consts, present, strict=True)):
        starts, ends, axes, steps = consts
        if rank is not None:
            index = _slice_index(rank, starts, ends, axes, steps)
            return lambda x, *_: x[index]
        return lambda x, *_: x[_slice_index(x.ndim, starts, ends, axes, steps)]

    def kernel(x: np.ndarray, starts: np.ndarray, ends: np.ndarray,
               axes: np.ndarray | None = None, steps: np.ndarray | None = None) -> np.ndarray:
        return x[_slice_index(x.ndim, int_list(starts), int_list(ends), int_list(axes),
                              int_list(steps))]

    return kernel


# --------------------------------------------------------------------------------------------
# Gather / Scatter
# --------------------------------------------------------------------------------------------


def checked_indices(idx: np.ndarray, dim: int | np.ndarray, what: str) -> np.ndarray:
    """``idx`` with negative entries counted from the end of ``dim`` (one size, or one per
    index's last axis), after checking every entry lies in ``[-dim, dim - 1]``: numpy's own
    indexing would wrap an entry below ``-dim`` a second time and read or write another
    element in bounds (onnxruntime refuses such indices)."""
    if not idx.size:
        return idx
    if idx.dtype.kind == "u":
        bad = idx >= dim
    else:
        bad = (idx < -np.asarray(dim)) | (idx >= dim)
    if bad.any():
        at = np.argwhere(bad)[0]
        value = int(idx[tuple(at)])
        size = int(np.broadcast_to(np.asarray(dim), idx.shape)[tuple(at)])
        raise IndexError(f"{what}: index {value} is out of range [{-size}, {size - 1}] "
                         f"(at position {tuple(int(i) for i in at)} of the indices)")
    if idx.dtype.kind == "u" or idx.min() >= 0:
        return idx
    return np.where(idx < 0, idx + dim, idx)


@op("Gather", since=1)
@op("Gather", since=11)  # negative indices
def make_gather(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis = int(node.attr("axis", 0))
    rank, idx_rank = _rank(node), _rank(node, 1)
    if rank is not None and -rank <= axis < max(rank, 1):
        a = norm_axis(axis, rank)
        if not _not_strings(node, 0):   # (strings, a constant's as bytes; or no dtype)
            return lambda x, idx: as_array(str_guard(x).take(idx, a))
        const = const_input(node, 1)
        if const is not None and const.ndim == 0 and rank >= 2 and const.dtype.kind in "iu":
            # one index: basic indexing, a view (numpy's IndexError names an index out of
            # range, negative ones count from the end as in ONNX)
            at = (slice(None),) * a + (int(const),)
            return lambda x, i=None: x[at]
        if const is not None:
            if rank - 1 + const.ndim >= 1:
                return lambda x, i=None: x.take(const, a)
            return lambda x, i=None: as_array(x.take(const, a))  # (a 0-d result)
        if idx_rank is not None and rank - 1 + idx_rank >= 1:
            return lambda x, idx: x.take(idx, a)
        return lambda x, idx: as_array(x.take(idx, a))

    def kernel(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        a = norm_axis(axis, x.ndim)
        return as_array(np.take(str_guard(x), idx, axis=a))

    return kernel


def _crop_to(x: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray:
    """``x`` cut to ``shape`` on every axis but ``axis`` (GatherElements indices may be smaller)."""
    if all(s == d or i == axis for i, (s, d) in enumerate(zip(shape, x.shape, strict=True))):
        return x
    return x[tuple(slice(None) if i == axis else slice(0, s) for i, s in enumerate(shape))]


@op("GatherElements", since=11)
def make_gather_elements(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis = int(node.attr("axis", 0))

    def kernel(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        a = norm_axis(axis, x.ndim)
        idx = checked_indices(idx, x.shape[a], "GatherElements")
        return np.take_along_axis(_crop_to(x, idx.shape, a), idx, axis=a)

    return kernel


@op("GatherND", since=11)
@op("GatherND", since=12)
def make_gather_nd(node: NodeView, ctx: ProviderContext) -> Kernel:
    b = int(node.attr("batch_dims", 0))

    def kernel(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        k = idx.shape[-1]
        batch = x.shape[:b]
        nb = math.prod(batch)
        inner = x.shape[b:b + k]
        rest = x.shape[b + k:]
        q_shape = idx.shape[b:-1]
        idx = checked_indices(idx.astype(np.int64, copy=False),
                              np.asarray(inner, dtype=np.int64), "GatherND")
        flat = np.ravel_multi_index(tuple(np.moveaxis(idx.reshape(nb, -1, k), -1, 0)), inner) \
            if k else np.zeros((nb, math.prod(q_shape)), np.int64)
        xr = x.reshape((nb, math.prod(inner)) + rest)
        out = xr[np.arange(nb)[:, None], flat]
        return out.reshape(batch + q_shape + rest)

    return kernel


_REDUCERS: dict[str, np.ufunc] = {
    "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum,
}


def _reduction(node: NodeView) -> np.ufunc | None:
    r = node.attr("reduction", "none")
    r = r.decode() if isinstance(r, bytes) else r
    return None if r == "none" else _REDUCERS[r]


def _scatter_predicate(node: NodeView) -> str | None:
    r = node.attr("reduction", "none")
    r = r.decode() if isinstance(r, bytes) else r
    if r != "none" and r not in _REDUCERS:
        return f"{node.op_type}: unknown reduction {r!r}"
    return None


@op("ScatterND", since=11, predicate=_scatter_predicate)
@op("ScatterND", since=16, predicate=_scatter_predicate)  # reduction add/mul
@op("ScatterND", since=18, predicate=_scatter_predicate)  # reduction max/min
def make_scatter_nd(node: NodeView, ctx: ProviderContext) -> Kernel:
    ufunc = _reduction(node)

    def kernel(x: np.ndarray, idx: np.ndarray, updates: np.ndarray) -> np.ndarray:
        out = x.copy()
        k = idx.shape[-1]
        idx = checked_indices(idx.astype(np.int64, copy=False),
                              np.asarray(x.shape[:k], dtype=np.int64), "ScatterND")
        where = tuple(np.moveaxis(idx, -1, 0))
        if ufunc is None:
            out[where] = updates
        else:
            ufunc.at(out, where, updates)
        return out

    return kernel


def _elements_index(idx: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    grids = np.ogrid[tuple(slice(0, s) for s in idx.shape)]
    return tuple(idx if i == axis else g for i, g in enumerate(grids))


@op("Scatter", since=9, until=10)
@op("ScatterElements", since=11, predicate=_scatter_predicate)
@op("ScatterElements", since=16, predicate=_scatter_predicate)
@op("ScatterElements", since=18, predicate=_scatter_predicate)
def make_scatter_elements(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis = int(node.attr("axis", 0))
    ufunc = _reduction(node)

    def kernel(x: np.ndarray, idx: np.ndarray, updates: np.ndarray) -> np.ndarray:
        a = norm_axis(axis, x.ndim)
        out = x.copy()
        where = _elements_index(checked_indices(idx, x.shape[a], node.op_type), a)
        if ufunc is None:
            out[where] = updates
        else:
            ufunc.at(out, where, updates)
        return out

    return kernel


# --------------------------------------------------------------------------------------------
# Block rearrangements, Compress, ReverseSequence
# --------------------------------------------------------------------------------------------


def _mode(node: NodeView) -> str:
    m = node.attr("mode", "DCR")
    return (m.decode() if isinstance(m, bytes) else m).upper()


@op("DepthToSpace", since=1)
@op("DepthToSpace", since=11)  # mode
def make_depth_to_space(node: NodeView, ctx: ProviderContext) -> Kernel:
    b = int(node.attr("blocksize"))
    crd = _mode(node) == "CRD"

    def kernel(x: np.ndarray) -> np.ndarray:
        n, c, h, w = x.shape
        if crd:
            t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
        else:
            t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
        return t.reshape(n, c // (b * b), h * b, w * b)

    return kernel


@op("SpaceToDepth", since=1)
@op("SpaceToDepth", since=28)  # mode
def make_space_to_depth(node: NodeView, ctx: ProviderContext) -> Kernel:
    b = int(node.attr("blocksize"))
    crd = _mode(node) == "CRD"

    def kernel(x: np.ndarray) -> np.ndarray:
        n, c, h, w = x.shape
        t = x.reshape(n, c, h // b, b, w // b, b)
        t = t.transpose(0, 1, 3, 5, 2, 4) if crd else t.transpose(0, 3, 5, 1, 2, 4)
        return t.reshape(n, c * b * b, h // b, w // b)

    return kernel


@op("Compress", since=9)
def make_compress(node: NodeView, ctx: ProviderContext) -> Kernel:
    axis = node.attr("axis")

    def kernel(x: np.ndarray, cond: np.ndarray) -> np.ndarray:
        c = cond.reshape(-1).astype(bool, copy=False)
        if axis is None:
            return np.compress(c, x.reshape(-1))
        return np.compress(c, x, axis=norm_axis(int(axis), x.ndim))

    return kernel


@op("ReverseSequence", since=10)
def make_reverse_sequence(node: NodeView, ctx: ProviderContext) -> Kernel:
    batch_axis = int(node.attr("batch_axis", 1))
    time_axis = int(node.attr("time_axis", 0))

    def kernel(x: np.ndarray, lens: np.ndarray) -> np.ndarray:
        ba, ta = norm_axis(batch_axis, x.ndim), norm_axis(time_axis, x.ndim)
        xt = np.moveaxis(x, (ba, ta), (0, 1))  # (batch, time, ...)
        t = np.arange(xt.shape[1])
        ln = lens.astype(np.int64).reshape(-1, 1)
        src = np.where(t < ln, ln - 1 - t, t)
        out = xt[np.arange(xt.shape[0])[:, None], src]
        return np.ascontiguousarray(np.moveaxis(out, (0, 1), (ba, ta)))

    return kernel

