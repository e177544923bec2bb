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

from onnxplex import ProviderContext, load_model
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
    node = load_model(m).node_views[0]
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
