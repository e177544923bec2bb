"""cpu_mlas shape, indexing and generator kernels (shape.py, misc.py) against onnxruntime."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

from ._oracle import assert_same, check, ours, ref_run

RNG = np.random.default_rng(1)
I64 = np.int64


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return np.asarray(RNG.standard_normal(shape)).astype(dtype)


def i64(*v) -> np.ndarray:
    return np.array(v, dtype=I64)


# --------------------------------------------------------------------------------------------
# Reshape family
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,allowzero", [((4, 6), 0), ((-1, 3), 0), ((0, -1), 0),
                                             ((2, 0, 4), 0), ((24,), 0), ((2, 3, 4), 1)])
@pytest.mark.parametrize("const", [True, False])
def test_reshape(shape, allowzero, const):
    x = rand(2, 3, 4)
    check("Reshape", [x, i64(*shape)], opset=14, allowzero=allowzero,
          const_inputs=[1] if const else [])


def test_reshape_allowzero_empty():
    x = rand(0, 3)
    check("Reshape", [x, i64(3, 0)], opset=14, allowzero=1, const_inputs=[1])


def test_reshape_returns_view():
    x = rand(2, 3, 4)
    (y,) = ours("Reshape", [x, i64(6, 4)], opset=14, const_inputs=[1])
    assert np.shares_memory(x, y)


def test_reshape_opset1_attr():
    x = rand(2, 3, 4)
    (y,) = ours("Reshape", [x], opset=4, shape=[0, -1])
    assert y.shape == (2, 12)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(axis):
    check("Flatten", [rand(2, 3, 4)], opset=13, axis=axis)


@pytest.mark.parametrize("perm", [None, (0, 2, 1), (2, 0, 1), (1, 0, 2)])
def test_transpose(perm):
    attrs = {} if perm is None else {"perm": list(perm)}
    check("Transpose", [rand(2, 3, 4)], opset=13, **attrs)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.bool_, np.float16, np.int32,
                                   np.float32, np.int64, np.float64])
@pytest.mark.parametrize("shape,perm", [
    ((1, 3, 40, 41), (0, 2, 3, 1)),     # an RGB image channels-last: three planes interleaved
    ((2, 37, 9, 15), (0, 2, 3, 1)),     # blocks of 32 with tails on both sides
    ((1, 20, 21, 70), (0, 3, 1, 2)),    # channels-last back to channels-first
    ((1, 3, 32, 32), (0, 2, 3, 1)),     # a small image: copied natively too, not left a view
    ((1, 3, 10, 9), (0, 2, 3, 1)),      # (the kernel's size floor: 270 elements)
    ((1, 128, 300), (0, 2, 1)),         # rank 3: a conv's [N, C, L] to a transformer's [N, L, C]
    ((70, 41), (1, 0))],                # rank 2
    ids=["rgb_to_nhwc", "to_nhwc", "to_nchw", "small_rgb", "smallest", "rank3", "rank2"])
def test_transpose_rotations_of_every_element_size(dtype, shape, perm):
    """Rotations above the native kernel's size, of every rank (a rank-2 or -3 one was left
    a view, which most of its readers then copied with numpy's slow transposing copy): float32
    in its register tiles, 1-, 2-, 4- and 8-byte elements moved as they are (an 8-bit
    quantized image, halves, indices), the values and dtype numpy's transpose gives."""
    x = (RNG.standard_normal(shape) * 50).astype(dtype)
    got = ours("Transpose", [x], opset=13, perm=list(perm))[0]
    assert got.dtype == x.dtype and got.flags.c_contiguous
    np.testing.assert_array_equal(got, np.transpose(x, perm))


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.int64])
@pytest.mark.parametrize("shape,perm", [
    ((576, 2, 16, 2), (0, 2, 1, 3)),    # MobileViT's patch unfolding: float pairs moved whole
    ((576, 16, 2, 2), (0, 2, 1, 3)),    # ... and folding back
    ((30, 40, 1), (1, 0, 2)),           # a trailing axis of 1
    ((3, 40, 5, 6, 1), (0, 3, 1, 2, 4)),  # a rank-4 rotation before the kept axis
    ((9, 40, 30, 3), (0, 2, 1, 3))],    # a 3-element block (numpy's copy: no native size)
    ids=["unfold", "fold", "unit_tail", "rotation_tail", "odd_block"])
def test_transpose_keeping_trailing_axes(dtype, shape, perm):
    """A rotation of the leading axes that keeps trailing ones in place: a block of 1-8 bytes
    is moved as one element by the native kernel; the values numpy's transpose gives."""
    x = (RNG.standard_normal(shape) * 50).astype(dtype)
    got = ours("Transpose", [x], opset=13, perm=list(perm))[0]
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, np.transpose(x, perm))
    tail = next(t for t in range(len(perm), -1, -1)
                if perm[len(perm) - t:] == tuple(range(len(perm) - t, len(perm))))
    if math.prod(shape[len(shape) - tail:]) * x.itemsize in (1, 2, 4, 8):   # moved natively:
        assert got.flags.c_contiguous                                        # not a view


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.int64])
@pytest.mark.parametrize("shape,perm", [
    ((1, 144, 64, 4), (0, 3, 2, 1)),    # MobileViT's fold: a swap of the last two axes, then
    ((1, 4, 64, 144), (0, 3, 2, 1)),    # a rotation of the last three (and the way back)
    ((20, 30, 40), (2, 1, 0)),          # rank 3 reversed
    ((6, 7, 8, 9, 10), (0, 1, 4, 3, 2))],
    ids=["fold", "unfold", "reverse3", "rank5"])
def test_transpose_as_two_rotations(dtype, shape, perm):
    """A permutation that moves the last axis and is no rotation: two native rotations in
    turn (numpy's copy of its view gathers single elements far apart); the values numpy's
    transpose gives, a copy, not a view."""
    x = (RNG.standard_normal(shape) * 50).astype(dtype)
    got = ours("Transpose", [x], opset=13, perm=list(perm))[0]
    assert got.dtype == x.dtype and got.flags.c_contiguous
    np.testing.assert_array_equal(got, np.transpose(x, perm))


@pytest.mark.parametrize("axes", [None, (0,), (-1,), (0, 3)])
@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze(axes, opset):
    x = rand(1, 3, 4, 1)
    if opset >= 13:
        ins = [x] if axes is None else [x, i64(*axes)]
        check("Squeeze", ins, opset=opset, const_inputs=[1])
        check("Squeeze", ins, opset=opset)
    else:
        check("Squeeze", [x], opset=opset, **({} if axes is None else {"axes": list(axes)}))


@pytest.mark.parametrize("axes", [(0,), (-1,), (1, 3), (0, -1), (4, 0)])
@pytest.mark.parametrize("opset", [11, 13])
def test_unsqueeze(axes, opset):
    x = rand(3, 4)
    if len(axes) == 2 and 4 in axes:
        x = rand(3, 4, 5)
    if opset >= 13:
        check("Unsqueeze", [x, i64(*axes)], opset=opset, const_inputs=[1])
        check("Unsqueeze", [x, i64(*axes)], opset=opset)
    else:
        check("Unsqueeze", [x], opset=opset, axes=list(axes))


def test_unsqueeze_scalar():
    check("Unsqueeze", [np.array(3.0, np.float32), i64(0)], opset=13, const_inputs=[1])


@pytest.mark.parametrize("x_shape,shape", [((3, 1), (2, 3, 4)), ((4,), (3, 1)), ((2, 1, 3), (1,)),
                                           ((), (2, 2)), ((3, 4), (3, 4))])
def test_expand(x_shape, shape):
    check("Expand", [rand(*x_shape), i64(*shape)], opset=13, const_inputs=[1])
    check("Expand", [rand(*x_shape), i64(*shape)], opset=13)


@pytest.mark.parametrize("reps", [(1, 1), (2, 3), (1, 0), (3, 1)])
def test_tile(reps):
    check("Tile", [rand(2, 3), i64(*reps)], opset=13, const_inputs=[1])
    check("Tile", [rand(2, 3), i64(*reps)], opset=13)


def test_tile_opset1():
    # Tile-1's tiles and axis are of the input's type (int64 ones are refused, as onnxruntime
    # refuses them)
    x = rand(2, 3)
    (y,) = ours("Tile", [x, np.array(3, np.float32), np.array(1, np.float32)], opset=1)
    np.testing.assert_array_equal(y, np.tile(x, (1, 3)))


# --------------------------------------------------------------------------------------------
# Shape queries, constants, identity, dropout
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-1, None), (0, -1), (-10, 10),
                                       (2, 1)])
def test_shape(start, end):
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    check("Shape", [rand(2, 3, 4)], opset=15, **attrs)


def test_shape_size_scalar():
    check("Shape", [np.array(1.0, np.float32)], opset=13)
    check("Size", [rand(2, 3, 4)], opset=13)
    check("Size", [np.array(1.0, np.float32)], opset=13)


@pytest.mark.parametrize("value", [None, np.array([2.5], np.float32), np.array([7], np.int64),
                                   np.array([1], np.int32), np.array([True])])
@pytest.mark.parametrize("shape", [(2, 3), (0,), ()])
def test_constant_of_shape(value, shape):
    attrs = {} if value is None else {"value": helper.make_tensor(
        "v", helper.np_dtype_to_tensor_dtype(value.dtype), [1], value.tolist())}
    check("ConstantOfShape", [i64(*shape)], opset=21, **attrs)
    check("ConstantOfShape", [i64(*shape)], opset=21, const_inputs=[0], **attrs)


@pytest.mark.parametrize("attrs", [
    {"value": helper.make_tensor("v", TensorProto.FLOAT, [2, 2], [1, 2, 3, 4])},
    {"value": helper.make_tensor("v", TensorProto.STRING, [2], [b"ab", b"c"])},
    {"value_float": 1.5}, {"value_floats": [1.0, 2.0]}, {"value_int": 3},
    {"value_ints": [1, 2, 3]}, {"value_string": "hi"}, {"value_strings": ["a", "bc"]},
])
def test_constant(attrs):
    check("Constant", [], opset=13, **attrs)


def test_identity_returns_input():
    x = rand(2, 3)
    (y,) = check("Identity", [x], opset=21)
    assert np.shares_memory(y, x)


@pytest.mark.parametrize("opset", [7, 10, 12, 13])
@pytest.mark.parametrize("n_out", [1, 2])
def test_dropout_inference(opset, n_out):
    x = rand(3, 4)
    ins = [x, np.array(0.3, np.float32)] if opset >= 12 else [x]
    # ORT fills the inference mask with zeros before opset 12 (its Dropout-as-Identity); the
    # ONNX spec and the reference evaluator say ones (nothing dropped), which we follow.
    # Before opset 10 the mask has the data's type (the reference evaluator says bool).
    got = check("Dropout", ins, n_out, opset=opset, const_inputs=[1],
                oracle="ref" if opset < 12 else "auto", check_dtype=opset >= 10)
    if n_out == 2:
        assert got[1].dtype == (np.float32 if opset < 10 else bool)


def test_dropout_training_const_declined():
    from kernel_harness import node_model

    from onnxplex import load_model
    from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

    model = load_model(node_model("Dropout", [rand(2), np.array(0.5, np.float32),
                                              np.array(True)], opset=13, const_inputs=[1, 2]))
    config, reason = CpuMlasProvider.op_table.lookup(model.node_views[0])
    assert config is None and "training_mode" in reason


def test_dropout_training_runtime():
    x = np.ones((100, 100), np.float32)
    y, mask = ours("Dropout", [x, np.array(0.5, np.float32), np.array(True)], 2, opset=13)
    assert mask.dtype == bool and 0.3 < mask.mean() < 0.7
    np.testing.assert_allclose(y, np.where(mask, 2.0, 0.0))


# --------------------------------------------------------------------------------------------
# Concat / Split / Slice
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis):
    shapes = {0: [(2, 3), (1, 3), (4, 3)], 1: [(2, 3), (2, 1), (2, 0)], -1: [(2, 3), (2, 2)]}
    check("Concat", [rand(*s) for s in shapes[axis]], opset=13, axis=axis)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16, np.bool_, np.uint8])
def test_concat_large_natively(axis, dtype):
    """Concats of 256 KiB and more copy natively, rows over the threads (a DenseNet's
    channels-last ones); every dtype of numbers, any axis, inputs of different lengths along
    it, the same values as onnxruntime."""
    base = [40, 36, 64]
    shapes = []
    for extra in (16, 8, 24):
        shape = list(base)
        shape[axis] = extra * (3 if axis in (0, -3) else 1)
        shapes.append(tuple(shape))
    xs = [(rand(*s) * 5).astype(dtype) for s in shapes]
    assert sum(x.nbytes for x in xs) >= 64 << 10 or dtype in (np.bool_, np.uint8)
    check("Concat", xs, opset=13, axis=axis)


@pytest.mark.parametrize("threads", [1, 2])
def test_concat_rows_every_row_length(threads):
    """The native row copy: rows of every length around its 64-byte pieces (a remainder of 1
    to 63 bytes after them, or none), bytes and floats."""
    from onnxplex.providers.cpu_mlas._native import native

    nat = native()
    if nat is None or not hasattr(nat, "concat_rows"):
        pytest.skip("_mlas_native is not built")
    rng = np.random.default_rng(5)
    for dtype, widths in ((np.uint8, (1, 3, 4, 5, 63, 64, 65, 130, 200)),
                          (np.float32, (1, 17, 16, 33))):
        xs = [rng.integers(0, 255, (37, w)).astype(dtype) for w in widths]
        out = np.zeros((37, sum(widths)), dtype)
        nat.concat_rows(xs, out, 37, threads)
        np.testing.assert_array_equal(out, np.concatenate(xs, 1))


def test_concat_native_leaves_what_it_cannot_copy_to_numpy():
    """Inputs numpy must convert (a non-contiguous view) or that do not line up go to
    np.concatenate, which gives its own result or error."""
    from onnxplex.providers.cpu_mlas import shape as shape_mod

    big = rand(64, 80, 48)
    view = big[:, :, ::2]   # not C-contiguous
    (got,) = ours("Concat", [big[:, :, :24].copy(), view], opset=13, axis=2)
    np.testing.assert_array_equal(got, np.concatenate([big[:, :, :24], view], 2))
    assert shape_mod._NATIVE_CONCAT_BYTES <= 64 * 80 * 24 * 4 * 2


def test_concat_strings_and_ints():
    check("Concat", [np.array(["a"], object), np.array(["b", "c"], object)], opset=13, axis=0)
    check("Concat", [i64(1, 2), i64(3)], opset=13, axis=0)


@pytest.mark.parametrize("opset,split,n,axis", [
    (13, None, 3, 1), (13, (1, 2, 3), 3, 1), (18, None, 2, 1), (18, (2, 4), 2, -1),
    (11, None, 2, 0), (11, (1, 1), 2, 0),
])
def test_split(opset, split, n, axis):
    x = rand(2, 6)
    attrs = {"axis": axis}
    if opset >= 18 and split is None:
        attrs["num_outputs"] = n
    if opset < 13:
        if split is not None:
            attrs["split"] = list(split)
        check("Split", [x], n, opset=opset, **attrs)
    else:
        ins = [x] if split is None else [x, i64(*split)]
        check("Split", ins, n, opset=opset, const_inputs=[1], **attrs)
        check("Split", ins, n, opset=opset, **attrs)


def test_split_uneven_num_outputs():
    check("Split", [rand(7, 2)], 3, opset=18, num_outputs=3, axis=0)


@pytest.mark.parametrize("opset,ins,attrs", [
    (13, [np.ones(4, np.float32), np.array([1, 1], np.int64)], {}),   # sizes sum to 2, not 4
    (13, [np.ones(4, np.float32), np.array([1, 2, 1], np.int64)], {}),   # 3 sizes, 2 outputs
    (11, [np.ones(4, np.float32)], {"split": [3, 3]}),
    (13, [np.ones(5, np.float32)], {}),   # not even (before opset 18, parts must be equal)
])
def test_split_sizes_that_do_not_fit_are_errors_like_onnxruntime(opset, ins, attrs):
    """numpy's split gave the remainder to the last output (two outputs of 1 and 3 for sizes
    [1, 1] of 4); onnxruntime fails such a node, at load where its shape inference sees the
    sizes, else when it runs, and so does onnxplex (here: when it runs)."""
    import onnxruntime as ort

    import onnxplex

    names = ["x", "s"][:len(ins)]
    node = helper.make_node("Split", names, ["a", "b"], axis=0, **attrs)
    g = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT if n == "x" else TensorProto.INT64,
                                       list(v.shape)) for n, v in zip(names, ins)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("a", "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model = model.SerializeToString()
    feeds = dict(zip(names, ins))
    errors = ort.capi.onnxruntime_pybind11_state
    with pytest.raises((errors.Fail, errors.InvalidArgument, errors.RuntimeException)):
        ort.InferenceSession(model).run(None, feeds)
    with pytest.raises(onnxplex.KernelExecutionError, match="Split: "):
        onnxplex.InferenceSession(model).run(None, feeds)


SLICES = [
    ((0,), (2,), None, None), ((1, 0), (-1, 100), (0, 1), None),
    ((-1,), (-1000,), (1,), (-1,)), ((5,), (0,), (2,), (-2,)), ((0, 0), (3, 4), (-1, -2), (2, 3)),
    ((10,), (20,), (0,), None), ((2,), (2**63 - 1,), (2,), None),
    ((-2**63,), (2**63 - 1,), (1,), (1,)), ((3,), (-2**63,), (0,), (-1,)),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
@pytest.mark.parametrize("const", [True, False])
def test_slice(starts, ends, axes, steps, const):
    x = rand(4, 5, 6)
    ins = [x, i64(*starts), i64(*ends), None if axes is None else i64(*axes),
           None if steps is None else i64(*steps)]
    if axes is None and steps is not None:
        ins[3] = i64(*range(len(starts)))
    while ins[-1] is None:
        ins.pop()
    check("Slice", ins, opset=13, const_inputs=[1, 2, 3, 4] if const else [])


def test_slice_int32_params_and_view():
    x = rand(4, 5)
    ins = [x, np.array([1], np.int32), np.array([3], np.int32)]
    (y,) = check("Slice", ins, opset=13, const_inputs=[1, 2])
    assert np.shares_memory(x, y)


def test_slice_opset1():
    check("Slice", [rand(4, 5)], opset=9, starts=[1, 0], ends=[3, -1], axes=[0, 1])
    check("Slice", [rand(4, 5)], opset=9, starts=[1], ends=[1000])


# --------------------------------------------------------------------------------------------
# Gather / Scatter
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("idx", [np.array([0, 2, -1]), np.array([[1, 0], [2, -3]]),
                                 np.array(1)])
@pytest.mark.parametrize("itype", [np.int64, np.int32])
def test_gather(axis, idx, itype):
    check("Gather", [rand(3, 4, 3), idx.astype(itype)], opset=13, axis=axis)
    check("Gather", [rand(3, 4, 3), idx.astype(itype)], opset=13, axis=axis, const_inputs=[1])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis):
    x = rand(3, 4)
    idx = RNG.integers(-3, 3, size=(2, 3)).astype(I64)
    check("GatherElements", [x, idx], opset=13, axis=axis)


@pytest.mark.parametrize("x_shape,idx,batch_dims", [
    ((2, 2), [[0, 0], [1, 1]], 0), ((2, 2), [[1], [0]], 0), ((2, 2, 2), [[0, 1], [1, 0]], 0),
    ((2, 2, 2), [[[0, 1]], [[1, 0]]], 0), ((2, 2, 2), [[1], [0]], 1),
    ((2, 3, 4), [[[1, -1], [0, 2]], [[2, 3], [-3, 0]]], 1), ((3, 4), [[-1, -4]], 0),
    ((2, 3, 4), [[[1], [2], [0]], [[3], [0], [-1]]], 2),
])
def test_gather_nd(x_shape, idx, batch_dims):
    check("GatherND", [rand(*x_shape), np.array(idx, I64)], opset=13, batch_dims=batch_dims)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction):
    x = rand(4, 3, 2)
    idx = np.array([[1], [3], [1]] if reduction != "none" else [[1], [3], [-2]], I64)
    upd = rand(3, 3, 2)
    check("ScatterND", [x, idx, upd], opset=18, reduction=reduction)
    idx2 = np.array([[0, 1], [3, 2], [0, 1]] if reduction != "none" else [[0, 1], [3, 2]], I64)
    check("ScatterND", [x, idx2, rand(len(idx2), 2)], opset=18, reduction=reduction)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(reduction, axis):
    x = rand(3, 4)
    idx = np.array([[0, 1, 2], [2, 0, 1]], I64) if reduction == "none" else np.array(
        [[0, 1, 1], [1, 0, -1]], I64)
    check("ScatterElements", [x, idx, rand(2, 3)], opset=18, axis=axis, reduction=reduction)


def test_scatter_opset9():
    x, idx, upd = rand(3, 3), np.array([[1, 0, 2]], I64), rand(1, 3)
    (y,) = ours("Scatter", [x, idx, upd], opset=9, axis=0)
    assert_same([y], ref_run("ScatterElements", [x, idx, upd], opset=11, axis=0))


# --------------------------------------------------------------------------------------------
# DepthToSpace / SpaceToDepth / Compress / ReverseSequence
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode):
    check("DepthToSpace", [rand(2, 8, 3, 4)], opset=13, blocksize=2, mode=mode)


def test_space_to_depth():
    check("SpaceToDepth", [rand(2, 3, 4, 6)], opset=13, blocksize=2)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_opset28_roundtrip(mode):
    x = rand(1, 2, 4, 6)
    check("SpaceToDepth", [x], opset=28, blocksize=2, mode=mode)
    (y,) = ours("SpaceToDepth", [x], opset=28, blocksize=2, mode=mode)
    (back,) = ours("DepthToSpace", [y], opset=13, blocksize=2, mode=mode)
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress(axis):
    x = rand(3, 4)
    n = {None: 12, 0: 3, 1: 4, -1: 4}[axis]
    cond = RNG.integers(0, 2, size=n).astype(bool)
    attrs = {} if axis is None else {"axis": axis}
    check("Compress", [x, cond], opset=11, **attrs)
    check("Compress", [x, cond[:2]], opset=11, **attrs)


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    x = rand(4, 4, 2) if True else None
    lens = np.array([4, 3, 1, 2], I64)
    check("ReverseSequence", [x, lens], opset=10, batch_axis=batch_axis, time_axis=time_axis)


# --------------------------------------------------------------------------------------------
# misc.py: Range, EyeLike, OneHot, Trilu, NonZero, CumSum, TopK
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (0, 10, 3, np.int64), (10, 4, -2, np.int32), (5, 5, 1, np.int64), (0.1, 100.3, 0.1, np.float32),
    (1.0, -3.0, -0.7, np.float64), (3, 9, 3, np.int16), (-5, 5, 7, np.int64),
])
def test_range(start, limit, delta, dtype):
    ins = [np.array(v, dtype) for v in (start, limit, delta)]
    check("Range", ins, opset=11)


def test_range_stash_type_opset27():
    ins = [np.array(v, np.float16) for v in (0.0, 10.0, 0.5)]
    check("Range", ins, opset=27, stash_type=1)


@pytest.mark.parametrize("k,dtype", [(0, None), (1, None), (-2, TensorProto.INT64),
                                     (5, TensorProto.FLOAT), (0, TensorProto.BOOL)])
def test_eye_like(k, dtype):
    attrs = {"k": k} if dtype is None else {"k": k, "dtype": dtype}
    check("EyeLike", [rand(3, 4)], opset=9, **attrs)


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("itype,dtype,vtype", [
    (np.int64, np.int64, np.float32), (np.int64, np.int64, np.int64),
    (np.float32, np.int64, np.float32), (np.int32, np.float32, np.float32),
    (np.int64, np.int32, np.float32),
])
def test_one_hot(axis, itype, dtype, vtype):
    idx = np.array([[0, 2, -1], [4, -5, 1]]).astype(itype)
    ins = [idx, np.array(4).astype(dtype), np.array([0, 3]).astype(vtype)]
    check("OneHot", ins, opset=11, axis=axis)
    check("OneHot", ins, opset=11, axis=axis, const_inputs=[1, 2])


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 1, -1, 5])
def test_trilu(upper, k):
    x = rand(2, 3, 4)
    ins = [x] if k is None else [x, np.array(k, I64)]
    check("Trilu", ins, opset=14, upper=upper)
    check("Trilu", ins, opset=14, upper=upper, const_inputs=[1])


@pytest.mark.parametrize("x", [np.array([[1, 0], [2, 3]], np.float32), np.array([0, 0], np.int32),
                               np.array([[True, False]]), np.array(3.0, np.float32),
                               np.zeros((2, 0), np.float32)])
def test_nonzero(x):
    check("NonZero", [x], opset=13)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.float64])
def test_cumsum(exclusive, reverse, axis, dtype):
    x = (rand(3, 4) * 10).astype(dtype)
    ax = np.array(axis, np.int32)
    check("CumSum", [x, ax], opset=14, exclusive=exclusive, reverse=reverse, rtol=1e-6)
    check("CumSum", [x, ax], opset=14, exclusive=exclusive, reverse=reverse, const_inputs=[1])


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("k", [0, 1, 2, 5, 20])
@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.float64, np.int64])
def test_topk(largest, k, axis, dtype):
    x = RNG.integers(0, 6, size=(20, 20)).astype(dtype)  # many ties
    check("TopK", [x, np.array([k], I64)], 2, opset=11, axis=axis, largest=largest)


def test_topk_opset1_and_unsorted():
    x = rand(3, 10)
    check("TopK", [x], 2, opset=9, k=3)
    v, i = ours("TopK", [x, np.array([4], I64)], 2, opset=11, sorted=0)
    assert np.array_equal(np.sort(i, axis=1), np.sort(np.argsort(-x, axis=1)[:, :4], axis=1))
    assert v.dtype == np.float32 and i.dtype == np.int64


def test_topk_large_axis_partition_path():
    x = RNG.integers(0, 50, size=(4, 1000)).astype(np.float32)
    check("TopK", [x, np.array([7], I64)], 2, opset=11)
    check("TopK", [x, np.array([7], I64)], 2, opset=11, largest=0)


def test_topk_large_axis_random_floats():
    x = RNG.standard_normal((3, 2000)).astype(np.float32)
    check("TopK", [x, np.array([10], I64)], 2, opset=11)
    check("TopK", [x, np.array([10], I64)], 2, opset=11, largest=0, axis=-1)


def test_topk_many_rows_threads():
    # k-NN's shape: thousands of rows of distances, a few neighbours (the native selection,
    # rows shared among threads), with ties
    x = RNG.integers(0, 200, size=(1000, 400)).astype(np.float32)
    check("TopK", [x, np.array([5], I64)], 2, opset=11, largest=0)
    check("TopK", [x.astype(np.int64), np.array([120], I64)], 2, opset=11)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
@pytest.mark.parametrize("n,k", [(1, 1), (7, 0), (9, 1), (40, 3), (40, 30), (300, 37)])
@pytest.mark.parametrize("largest", [True, False])
def test_native_topk_is_the_numpy_path(dtype, n, k, largest):
    """The native selection gives exactly the numpy path's values and indices (best first,
    ties to the lower index), in its small-k and its sorting regimes."""
    from onnxplex.providers.cpu_mlas import _native, misc
    nat = _native.native()
    if nat is None or not hasattr(nat, "topk"):
        pytest.skip("the native kernels are not built")
    x = RNG.integers(-20, 20, size=(33, n)).astype(dtype)   # many ties
    values, indices = nat.topk(x, k, largest, 2)
    want = misc._topk_indices(misc._best_first_key(x, largest), k)
    np.testing.assert_array_equal(indices, want)
    np.testing.assert_array_equal(values, np.take_along_axis(x, want, axis=-1))
    assert values.dtype == x.dtype and indices.dtype == np.int64


def test_topk_nan_keeps_numpy_order():
    x = RNG.standard_normal((4, 50)).astype(np.float32)
    x[1, 3] = x[2, 7] = np.nan
    v, i = ours("TopK", [x, np.array([4], I64)], 2, opset=11, largest=0)
    want = np.argsort(x, axis=-1, kind="stable")[:, :4]
    np.testing.assert_array_equal(i, want)


@pytest.mark.parametrize("axis", [0, 1])
def test_cumsum_long_rows(axis):
    x = RNG.standard_normal((16, 600)).astype(np.float32).reshape(16, 600)
    x = x if axis == 1 else x.T.copy()
    check("CumSum", [x.reshape(1, *x.shape), np.array(axis + 1 if axis == 0 else 1, I64)],
          opset=14, rtol=1e-5, atol=1e-5)


def test_gather_concat_string_constants():
    table = np.array(["cat", "dog", "emu"], dtype=object)
    (y,) = check("Gather", [table, np.array([2, 0], I64)], opset=13, const_inputs=[0])
    assert y.dtype == object and y.tolist() == ["emu", "cat"]
    (z,) = check("Concat", [table, np.array(["yak"], dtype=object)], opset=13, axis=0,
                 const_inputs=[1])
    assert z.tolist() == ["cat", "dog", "emu", "yak"]
