"""cpu_mlas kernels specialised at build time (declared dtypes and ranks, constant inputs):
each specialised kernel against the same node's kernel built without type information (the
per-call path), and against onnxruntime / the reference, at batch-1 shapes, 0-d operands,
broadcasting and dtype mixes."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest
from kernel_harness import node_model

from onnxplex import InvalidModelError, ProviderContext, load_model
from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

from ._oracle import assert_same, check, ours

RNG = np.random.default_rng(7)


def _kernel(op_type: str, inputs, *, typed: bool = True, symbolic: bool = False, **kw):
    """The kernel of a one-node model and its arguments (constants as the executor passes
    them); ``typed=False`` hides the inputs' dtypes and shapes from the factory (as in a body
    whose values carry no types), ``symbolic`` makes the first dim of graph inputs a name."""
    m = node_model(op_type, inputs, **kw)
    if symbolic:
        for vi in m.graph.input:
            dims = vi.type.tensor_type.shape.dim
            if len(dims):
                dims[0].dim_param = "N"
    # (untyped: as a body's node, which onnx's inference does not check either)
    node = load_model(m, infer_shapes=typed).node_views[0]
    if not typed:
        node = dataclasses.replace(node, inputs=tuple(
            v if v is None or v.is_const else dataclasses.replace(v, elem_type=None, shape=None)
            for v in node.inputs))
    config, reason = CpuMlasProvider.op_table.lookup(node)
    assert config is not None, reason
    kernel = config.factory(node, ProviderContext())
    args = [None if a is None else (node.inputs[i].const if node.inputs[i].const is not None
                                    else a) for i, a in enumerate(inputs)]
    return kernel, args


def _both(op_type: str, inputs, rtol: float = 0.0, **kw):
    """The outputs of the typed (build-time specialised) and untyped kernels, checked equal
    (dtype, shape, values to ``rtol``, ndarray type) and returned."""
    with np.errstate(all="ignore"):
        k1, a1 = _kernel(op_type, inputs, symbolic=True, **kw)
        k2, a2 = _kernel(op_type, inputs, typed=False, **kw)
        got, want = k1(*a1), k2(*a2)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want, strict=True):
        assert type(g) is np.ndarray, type(g)
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype == object:
            assert g.tolist() == w.tolist()
        elif g.dtype.kind == "V":   # (ml_dtypes: NaN compares unequal to itself there)
            assert g.tobytes() == w.tobytes()
        elif rtol:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol)
        else:
            np.testing.assert_array_equal(g, w)
    return got


def f32(*shape):
    return np.asarray(RNG.standard_normal(shape), dtype=np.float32)


# --------------------------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------------------------

SHAPES = [((1, 3), (1, 3)), ((1, 20), (20,)), ((1, 20), (3, 20)), ((), ()), ((), (1, 4)),
          ((2, 1, 5), (1, 4, 1))]


@pytest.mark.parametrize("name", ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum",
                                  "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("const", [(), (1,)], ids=["var", "const"])
def test_binary_float(name, shapes, const):
    a, b = f32(*shapes[0]), f32(*shapes[1])
    if name == "Pow":
        a = np.asarray(np.abs(a))
    if name in ("Max", "Min", "Sum") and (not shapes[0] or not shapes[1]):
        return  # (ORT's variadic kernels want rank >= 1 here)
    _both(name, [a, b], const_inputs=const)
    check(name, [a, b], const_inputs=const, rtol=1e-6)


@pytest.mark.parametrize("name", ["Add", "Sub", "Mul", "Div", "Mod", "BitwiseAnd", "BitShift",
                                  "Equal", "Greater"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
@pytest.mark.parametrize("shapes", [((1, 6), (1, 6)), ((), ()), ((1, 6), (6,))], ids=str)
def test_binary_int(name, dtype, shapes):
    if name == "BitShift" and np.dtype(dtype).kind == "i":
        return
    a = RNG.integers(-50 if np.dtype(dtype).kind == "i" else 0, 50, shapes[0]).astype(dtype)
    b = RNG.integers(1, 7, shapes[1]).astype(dtype)
    if np.dtype(dtype).kind == "i" and b.ndim:
        b = b * np.where(RNG.random(b.shape) < 0.5, -1, 1).astype(dtype)
    attrs = {"direction": "LEFT"} if name == "BitShift" else {}
    opset = 18
    got = _both(name, [a, b], opset=opset, **attrs)
    if name == "Div":
        want = np.trunc(a.astype(np.float64) / b.astype(np.float64)).astype(dtype)
        np.testing.assert_array_equal(got[0], want)
    if name != "BitShift":
        check(name, [a, b], opset=opset, **attrs)


def test_div_int_truncates_toward_zero_small():
    a = np.array([[7, -7, 7, -7, 0, -1, 1, -128]], np.int8)
    b = np.array([[2, 2, -2, -2, 3, 2, -2, -1]], np.int8)
    (q,) = _both("Div", [a, b])
    np.testing.assert_array_equal(q, [[3, -3, -3, 3, 0, 0, 0, -128]])
    for dt in (np.int16, np.int32, np.int64):
        (q,) = _both("Div", [a.astype(dt), b.astype(dt)])
        np.testing.assert_array_equal(q, [[3, -3, -3, 3, 0, 0, 0, 128]])


@pytest.mark.parametrize("e", [0.5, 1.0, 2.0, 3.0, 1.5])
@pytest.mark.parametrize("shape", [(1, 4), ()], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_pow_const_exponent_small(e, shape, dtype):
    x = np.asarray(np.abs(RNG.standard_normal(shape)) + 0.5, dtype=dtype)
    # (x ** 3 is x * x * x when x's rank is known, as before; pow() otherwise: within 1 ulp)
    got = _both("Pow", [x, np.array(e, dtype)], const_inputs=(1,),
                rtol=2e-3 if e == 3.0 and dtype == np.float16 else 4e-7 if e == 3.0 else 0.0)
    check("Pow", [x, np.array(e, dtype)], const_inputs=(1,), rtol=1e-3 if dtype == np.float16
          else 1e-6)
    if e == 1.0:
        assert not np.shares_memory(got[0], x)


@pytest.mark.parametrize("xt,yt", [(np.float32, np.float64), (np.float32, np.int64),
                                   (np.float64, np.float32), (np.int32, np.int64),
                                   (np.int64, np.float32), (np.int32, np.int32)])
def test_pow_mixed_dtypes_keep_x_dtype(xt, yt):
    x = np.array([[1, 2, 3, 4]], dtype=xt)
    y = np.array([2, 3, 1, 0], dtype=yt)
    (got,) = _both("Pow", [x, y])
    assert got.dtype == np.dtype(xt)
    check("Pow", [x, y], opset=15)


@pytest.mark.parametrize("name", ["Exp", "Sqrt", "Log", "Tanh", "Abs", "Neg", "Erf", "Sigmoid",
                                  "Relu", "Softplus", "IsNaN", "Floor"])
@pytest.mark.parametrize("shape", [(1, 3), (), (1, 20)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_unary_small(name, shape, dtype):
    x = np.asarray(np.abs(RNG.standard_normal(shape)) + 0.1, dtype=dtype)
    got = _both(name, [x])
    want = ours(name, [x])  # (a static-shape model: the rank-known path for () too)
    assert_same(got, want, rtol=0, atol=0)
    check(name, [x], rtol=2e-3 if dtype == np.float16 else 2e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, ml_dtypes.bfloat16])
def test_relu_other_types(dtype):
    x = np.array([[-3, 0, 2, 5]]).astype(dtype)
    (got,) = _both("Relu", [x])
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.astype(np.float64), [[0, 0, 2, 5]])


@pytest.mark.parametrize("name", ["Add", "Mul", "Greater"])
def test_binary_bfloat16_goes_through_float32(name):
    a = f32(1, 5).astype(ml_dtypes.bfloat16)
    b = f32(1, 5).astype(ml_dtypes.bfloat16)
    (got,) = _both(name, [a, b], opset=13)
    want = getattr(np, {"Add": "add", "Mul": "multiply", "Greater": "greater"}[name])(
        a.astype(np.float32), b.astype(np.float32))
    np.testing.assert_array_equal(got, want.astype(got.dtype))


@pytest.mark.parametrize("shape", [(1, 4), (), (300, 100)], ids=str)
def test_where_typed(shape):
    c = np.asarray(RNG.random(shape) < 0.5)
    x, y = f32(*shape), f32(*shape)
    _both("Where", [c, x, y])
    check("Where", [c, x, y])


def test_sum_two_inputs_and_mean():
    a, b = f32(1, 5), f32(5)
    _both("Sum", [a, b])
    check("Sum", [a, b])
    _both("Mean", [a, b])
    check("Mean", [a, b])


# --------------------------------------------------------------------------------------------
# Cast / CastLike
# --------------------------------------------------------------------------------------------

_CAST_TYPES = [np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8,
               np.uint64, np.bool_, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
               ml_dtypes.float8_e5m2, ml_dtypes.int4, ml_dtypes.uint4]


def _cast_source(dtype, shape=(1, 7)):
    vals = np.array([-300.7, -2.5, -0.4, 0.0, 1.5, 2.5, 460.0])
    x = np.resize(vals, shape)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return x > 0
    if dt.kind in "iu" or dt in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)):
        lo, hi = (0, 7) if dt.kind == "u" or dt == np.dtype(ml_dtypes.uint4) else (-7, 7)
        return np.clip(np.trunc(x), lo, hi).astype(dtype)
    return x.astype(dtype)


@pytest.mark.parametrize("src", _CAST_TYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("dst", _CAST_TYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_typed_matches_per_call(src, dst, saturate):
    from onnxplex._dtypes import onnx_elem_type
    x = _cast_source(src)
    (got,) = _both("Cast", [x], to=onnx_elem_type(np.dtype(dst)), saturate=saturate)
    assert got.dtype == np.dtype(dst)
    (like,) = _both("CastLike", [x, np.zeros(1, dst)], const_inputs=(1,), saturate=saturate)
    np.testing.assert_array_equal(like.view(np.uint8), got.view(np.uint8))


@pytest.mark.parametrize("shape", [(), (1, 3)], ids=str)
def test_cast_small_and_scalar(shape):
    x = np.asarray(RNG.standard_normal(shape) * 100, dtype=np.float32)
    (y,) = _both("Cast", [x], to=7)
    assert type(y) is np.ndarray and y.shape == shape
    check("Cast", [x], to=7)
    (same,) = ours("Cast", [x], to=1)
    assert same is x or np.array_equal(same, x)


def test_cast_nan_inf_to_int_and_float8_saturation():
    x = np.array([[np.nan, np.inf, -np.inf, 1e6, -1e6, 3.7]], np.float32)
    _both("Cast", [x], to=6)
    _both("Cast", [x], to=2)
    (sat,) = _both("Cast", [x], to=17, saturate=1)   # FLOAT8E4M3FN
    assert float(sat.astype(np.float32)[0, 3]) == 448.0
    (wrap,) = _both("Cast", [x], to=17, saturate=0)
    assert np.isnan(wrap.astype(np.float32)[0, 3])


def test_cast_strings_both_ways_unchanged():
    x = np.array([["1.5", "-7.9", "NaN"]], dtype=object)
    (f,) = _both("Cast", [x], to=1)
    np.testing.assert_array_equal(f, np.array([[1.5, -7.9, np.nan]], np.float32))
    (i,) = _both("Cast", [np.array([["7.9", "-3"]], dtype=object)], to=7)
    np.testing.assert_array_equal(i, [[7, -3]])
    (s,) = _both("Cast", [np.array([[1.5, np.inf]], np.float32)], to=8)
    assert s.tolist() == [["1.5", "INF"]]


# --------------------------------------------------------------------------------------------
# Shape ops
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("x_shape,target,allowzero", [
    ((1, 20), [-1, 1], 0), ((1, 20), [0, -1], 0), ((3, 4, 5), [0, 0, -1], 0),
    ((3, 4, 5), [-1, 0, 5], 0), ((0, 6), [0, 6], 1), ((2, 3), [6], 1), ((), [1, 1], 0),
    ((1, 3), [3], 0), ((2, 3), [0, 3, 1], 0), ((2, 3, 4), [2, 0, 4], 0)])
def test_reshape_typed(x_shape, target, allowzero):
    x = np.asarray(RNG.standard_normal(x_shape), dtype=np.float32)
    s = np.array(target, np.int64)
    (y,) = _both("Reshape", [x, s], const_inputs=(1,), allowzero=allowzero)
    if 0 not in x_shape:
        check("Reshape", [x, s], const_inputs=(1,), allowzero=allowzero)
    assert np.shares_memory(y, x) or x.size == 0


@pytest.mark.parametrize("shape", [(1, 20), (1, 2, 3), (1, 2, 3, 4), (5,), (), (0, 3)], ids=str)
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_flatten_typed(shape, axis):
    x = np.asarray(RNG.standard_normal(shape), dtype=np.float32)
    if not -len(shape) <= axis <= len(shape):
        with pytest.raises(InvalidModelError, match="Invalid value"):   # (refused at load)
            _kernel("Flatten", [x], axis=axis)
        k, args = _kernel("Flatten", [x], axis=axis, typed=False)
        with pytest.raises(ValueError):   # (and by the kernel, where nothing checked it)
            k(*args)
        return
    (y,) = _both("Flatten", [x], axis=axis)
    a = axis + len(shape) if axis < 0 else axis
    assert y.shape == (int(np.prod(shape[:a])), int(np.prod(shape[a:])))
    if x.size:
        check("Flatten", [x], axis=axis, opset=13)


@pytest.mark.parametrize("shape,axes", [((1, 1, 3), [1]), ((1, 1, 3), [-2, 0]), ((1, 3), None),
                                        ((1,), [0])], ids=str)
def test_squeeze_typed(shape, axes):
    x = np.asarray(RNG.standard_normal(shape), dtype=np.float32)
    inputs = [x] if axes is None else [x, np.array(axes, np.int64)]
    _both("Squeeze", inputs, const_inputs=(1,))
    check("Squeeze", inputs, const_inputs=(1,), opset=13)


def test_squeeze_of_a_non_1_dim_raises():
    x = f32(1, 3)
    for typed in (True, False):
        k, args = _kernel("Squeeze", [x, np.array([1], np.int64)], const_inputs=(1,),
                          typed=typed)
        with pytest.raises(ValueError):
            k(*args)


@pytest.mark.parametrize("shape,axes", [((1, 3), [1]), ((1, 3), [-1, 0]), ((), [0]),
                                        ((2, 3), [0, 3]), ((4,), [-1])], ids=str)
def test_unsqueeze_typed(shape, axes):
    x = np.asarray(RNG.standard_normal(shape), dtype=np.float32)
    a = np.array(axes, np.int64)
    (y,) = _both("Unsqueeze", [x, a], const_inputs=(1,))
    assert np.shares_memory(y, x)
    check("Unsqueeze", [x, a], const_inputs=(1,), opset=13)
    (y11,) = _both("Unsqueeze", [x], opset=11, axes=axes)
    assert y11.shape == y.shape


def test_unsqueeze_duplicate_axes_raise():
    x = f32(1, 3)
    for typed in (True, False):
        k, args = _kernel("Unsqueeze", [x, np.array([1, 1], np.int64)], const_inputs=(1,),
                          typed=typed)
        with pytest.raises(ValueError):
            k(*args)


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_concat_typed(axis, n, dtype):
    xs = [np.asarray(RNG.standard_normal((1, 2 + k)) > 0, dtype=dtype) if axis in (1, -1)
          else np.asarray(RNG.standard_normal((1 + k, 3)) > 0, dtype=dtype) for k in range(n)]
    _both("Concat", xs, axis=axis)
    check("Concat", xs, axis=axis, opset=13)


def test_concat_strings_and_bad_axis():
    xs = [np.array([["a", "b"]], dtype=object), np.array([["c"]], dtype=object)]
    (y,) = _both("Concat", xs, axis=1)
    assert y.tolist() == [["a", "b", "c"]]
    with pytest.raises(InvalidModelError, match="axis must be in"):   # (refused at load)
        _kernel("Concat", [f32(1, 2), f32(1, 2)], axis=2)
    k, args = _kernel("Concat", [f32(1, 2), f32(1, 2)], axis=2, typed=False)
    with pytest.raises(ValueError, match="out of range"):   # (and by the kernel)
        k(*args)


@pytest.mark.parametrize("x_shape", [(1, 5), (4, 5), (5,), (2, 5, 3)], ids=str)
@pytest.mark.parametrize("idx", [0, 4, -1, -5, [0, 3, -1], [[1, -2], [0, 0]], []], ids=str)
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("const", [(), (1,)], ids=["var", "const"])
def test_gather_typed(x_shape, idx, axis, const):
    if not -len(x_shape) <= axis < len(x_shape):
        return
    x = np.asarray(RNG.standard_normal(x_shape), dtype=np.float32)
    dim = x_shape[axis]
    i = np.array(idx, np.int64)
    if i.size and (i.max() >= dim or i.min() < -dim):
        return
    (y,) = _both("Gather", [x, i], const_inputs=const, axis=axis)
    np.testing.assert_array_equal(y, np.take(x, i, axis=axis))
    check("Gather", [x, i], const_inputs=const, axis=axis, opset=13)


@pytest.mark.parametrize("idx", [5, -6, [0, 5], [-6]], ids=str)
@pytest.mark.parametrize("const", [(), (1,)], ids=["var", "const"])
@pytest.mark.parametrize("typed", [True, False])
def test_gather_out_of_range_raises(idx, const, typed):
    x = f32(2, 5)
    k, args = _kernel("Gather", [x, np.array(idx, np.int64)], const_inputs=const, axis=1,
                      typed=typed)
    with pytest.raises(IndexError, match="out of bounds"):
        k(*args)


def test_gather_int32_indices_and_strings():
    x = f32(1, 6)
    i = np.array([5, -6, 2], np.int32)
    _both("Gather", [x, i], const_inputs=(1,), axis=1)
    check("Gather", [x, i], const_inputs=(1,), axis=1, opset=13)
    s = np.array([["a", "b", "c"]], dtype=object)
    (y,) = _both("Gather", [s, np.array([2, 0], np.int64)], axis=1)
    assert y.tolist() == [["c", "a"]]


def test_concat_rank_from_a_later_input_and_single_input():
    xs = [f32(1, 2), f32(1, 3), f32(1, 1)]
    m = node_model("Concat", xs, axis=-1)
    del m.graph.input[0].type.tensor_type.shape.dim[:]   # first input: rank unknown
    m.graph.input[0].type.tensor_type.ClearField("shape")
    node = load_model(m).node_views[0]
    assert node.inputs[0].rank is None and node.inputs[1].rank == 2
    kernel = CpuMlasProvider.op_table.lookup(node)[0].factory(node, ProviderContext())
    np.testing.assert_array_equal(kernel(*xs), np.concatenate(xs, 1))
    (one,) = _both("Concat", [xs[1]], axis=0)
    np.testing.assert_array_equal(one, xs[1])


def test_gather_from_a_string_constant():
    table = np.array(["a", "bc", "d"], dtype=object)
    (y,) = ours("Gather", [table, np.array([[2, -3]], np.int64)], const_inputs=(0,), axis=0)
    assert y.dtype == object and y.tolist() == [["d", "a"]]
