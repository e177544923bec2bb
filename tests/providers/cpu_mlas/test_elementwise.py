"""cpu_mlas elementwise kernels against onnxruntime (or onnx's reference evaluator)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxplex
from onnxplex.providers.cpu_mlas.elementwise import erf_numpy

from ._oracle import assert_same, check, ours, ref_run

RNG = np.random.default_rng(0)


def rand(*shape: int, dtype=np.float32, lo: float = -3.0, hi: float = 3.0) -> np.ndarray:
    return np.asarray(RNG.uniform(lo, hi, size=shape)).astype(dtype)


def randint(*shape: int, dtype=np.int32, lo: int = -20, hi: int = 20) -> np.ndarray:
    return np.asarray(RNG.integers(lo, hi, size=shape)).astype(dtype)


# --------------------------------------------------------------------------------------------
# Unary
# --------------------------------------------------------------------------------------------

UNARY_DOMAIN = {
    "Abs": (-3, 3), "Neg": (-3, 3), "Floor": (-3, 3), "Ceil": (-3, 3), "Round": (-3, 3),
    "Sign": (-3, 3), "Sqrt": (0, 5), "Exp": (-5, 5), "Log": (0.01, 5), "Reciprocal": (0.5, 3),
    "Tanh": (-4, 4), "Sin": (-3, 3), "Cos": (-3, 3), "Tan": (-1.5, 1.5), "Asin": (-1, 1),
    "Acos": (-1, 1), "Atan": (-3, 3), "Sinh": (-3, 3), "Cosh": (-3, 3), "Asinh": (-3, 3),
    "Acosh": (1, 5), "Atanh": (-0.99, 0.99), "Erf": (-4, 4), "Sigmoid": (-10, 10),
    "Softsign": (-5, 5), "Softplus": (-10, 10), "Relu": (-3, 3), "HardSwish": (-5, 5),
    "Mish": (-5, 5),
}


@pytest.mark.parametrize("name", sorted(UNARY_DOMAIN))
def test_unary_float32(name):
    lo, hi = UNARY_DOMAIN[name]
    x = rand(3, 4, 5, lo=lo, hi=hi)
    if name == "Round":
        x[0, 0, :4] = [0.5, 1.5, -2.5, 2.5]
    opset = {"Mish": 18, "HardSwish": 14}.get(name, 13)
    check(name, [x], opset=opset, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["Exp", "Tanh", "Sigmoid", "Erf", "Sqrt", "Relu", "Abs"])
@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_unary_other_floats(name, dtype):
    lo, hi = UNARY_DOMAIN[name]
    x = rand(4, 6, lo=lo, hi=hi, dtype=dtype)
    tol = 1e-3 if dtype == np.float16 else 1e-12
    if name == "Erf" and dtype == np.float64:
        tol = 1e-7  # ORT evaluates double Erf in float precision
    check(name, [x], opset=13, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["Abs", "Neg", "Sign", "Relu"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_unary_ints(name, dtype):
    check(name, [randint(3, 5, dtype=dtype)], opset=14)


def test_unary_scalar_returns_ndarray():
    for name in ("Exp", "Sigmoid", "Relu", "Abs", "Erf"):
        (y,) = ours(name, [np.array(0.5, np.float32)], opset=13)
        assert type(y) is np.ndarray and y.shape == () and y.dtype == np.float32


def test_unary_bfloat16():
    x = rand(8, lo=-2, hi=2).astype(ml_dtypes.bfloat16)
    (y,) = ours("Exp", [x], opset=13)
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(y.astype(np.float32), np.exp(x.astype(np.float32)), rtol=1e-2)


def test_erf_fallback_accuracy():
    x = np.concatenate([np.linspace(-7, 7, 20001), [0.0, -0.0, np.inf, -np.inf, 1e-300]])
    want = np.array([math.erf(v) for v in x.tolist()])
    got = erf_numpy(x)
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=1e-300)
    assert np.isnan(erf_numpy(np.array([np.nan])))[0]


def test_not_and_bitwise_not():
    check("Not", [RNG.integers(0, 2, (3, 4)).astype(bool)], opset=1)
    check("BitwiseNot", [randint(3, 4, dtype=np.uint8, lo=0, hi=255)], opset=18)


@pytest.mark.parametrize("neg,pos", [(1, 1), (0, 1), (1, 0), (0, 0)])
def test_isinf_isnan(neg, pos):
    x = np.array([1.0, np.inf, -np.inf, np.nan, 0.0], np.float32)
    check("IsInf", [x], opset=20, detect_negative=neg, detect_positive=pos)
    check("IsNaN", [x], opset=20)


# --------------------------------------------------------------------------------------------
# Activations with attributes
# --------------------------------------------------------------------------------------------

ACTIVATIONS = [
    ("LeakyRelu", 16, {}), ("LeakyRelu", 16, {"alpha": 0.2}), ("LeakyRelu", 6, {"alpha": -1.5}),
    ("Elu", 6, {}), ("Elu", 6, {"alpha": 0.5}), ("Selu", 6, {}),
    ("Selu", 6, {"alpha": 1.5, "gamma": 2.0}), ("Celu", 12, {}), ("Celu", 12, {"alpha": 2.0}),
    ("ThresholdedRelu", 10, {}), ("ThresholdedRelu", 10, {"alpha": 0.5}),
    ("HardSigmoid", 6, {}), ("HardSigmoid", 6, {"alpha": 0.5, "beta": 0.1}),
    ("Gelu", 20, {}), ("Gelu", 20, {"approximate": "tanh"}), ("Gelu", 20, {"approximate": "none"}),
]


@pytest.mark.parametrize("name,opset,attrs", ACTIVATIONS)
def test_activation(name, opset, attrs):
    check(name, [rand(2, 3, 8, lo=-4, hi=4)], opset=opset, rtol=1e-5, atol=1e-6, **attrs)


def test_celu_opset28_reference():
    check("Celu", [rand(10)], opset=28, rtol=1e-5, atol=1e-6, alpha=0.7)


@pytest.mark.parametrize("slope_shape", [(1,), (3, 1), (8,), (2, 3, 8)])
def test_prelu(slope_shape):
    check("PRelu", [rand(2, 3, 8), rand(*slope_shape)], opset=16)


def test_ms_gelu_family():
    x, b = rand(2, 5, 16), rand(16)
    check("Gelu", [x], domain="com.microsoft", rtol=1e-5, atol=1e-6)
    check("BiasGelu", [x, b], domain="com.microsoft", rtol=1e-5, atol=1e-6)
    check("FastGelu", [x, b], domain="com.microsoft", rtol=1e-4, atol=1e-5)
    check("FastGelu", [x], domain="com.microsoft", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset,attrs", [(6, {}), (6, {"min": -1.0}), (6, {"max": 0.5}),
                                         (6, {"min": -0.5, "max": 0.5})])
def test_clip_attrs(opset, attrs):
    check("Clip", [rand(3, 4)], opset=opset, **attrs)


@pytest.mark.parametrize("lo,hi", [(None, None), (-1.0, None), (None, 1.0), (-0.5, 0.5),
                                   (1.0, -1.0)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_clip_inputs(lo, hi, dtype):
    x = rand(3, 4, dtype=np.float32).astype(dtype) if dtype != np.int32 else randint(3, 4)
    def mk(v):
        return None if v is None else np.array(v).astype(dtype)

    check("Clip", [x, mk(lo), mk(hi)], opset=13, const_inputs=[1, 2])
    check("Clip", [x, mk(lo), mk(hi)], opset=13)


# --------------------------------------------------------------------------------------------
# Binary
# --------------------------------------------------------------------------------------------

SHAPES = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 2)), ((2, 1, 3), ())]


@pytest.mark.parametrize("name", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("shapes", SHAPES)
def test_arith(name, dtype, shapes):
    a_shape, b_shape = shapes
    if np.dtype(dtype).kind == "f":
        a, b = rand(*a_shape, dtype=dtype), rand(*b_shape, dtype=dtype, lo=0.5, hi=3)
    elif np.dtype(dtype).kind == "u":
        a, b = randint(*a_shape, dtype=dtype, lo=0, hi=250), randint(*b_shape, dtype=dtype,
                                                                      lo=1, hi=9)
    else:
        a = randint(*a_shape, dtype=dtype, lo=-50, hi=50)
        b = np.asarray(randint(*b_shape, dtype=dtype, lo=1, hi=9) * np.where(
            RNG.random(b_shape) < 0.5, -1, 1).astype(dtype))
    check(name, [a, b], opset=14)


def test_div_int_truncates():
    a = np.array([7, -7, 7, -7, 0, 6], np.int32)
    b = np.array([2, 2, -2, -2, 3, -3], np.int32)
    (y,) = check("Div", [a, b], opset=14)
    np.testing.assert_array_equal(y, [3, -3, -3, 3, 0, -2])


def test_float16_add():
    check("Add", [rand(3, 4, dtype=np.float16), rand(4, dtype=np.float16)], opset=14)


@pytest.mark.parametrize("b_shape,axis,bview", [
    ((4,), None, (4,)), ((2, 3), 0, (2, 3, 1)), ((3,), 1, (1, 3, 1)), ((3, 4), 1, (3, 4)),
    ((4,), -1, (4,)),
])
def test_legacy_broadcast(b_shape, axis, bview):
    a, b = rand(2, 3, 4), rand(*b_shape)
    attrs = {"broadcast": 1} if axis is None else {"broadcast": 1, "axis": axis}
    for name, fn in (("Add", np.add), ("Mul", np.multiply), ("Pow", np.power)):
        (y,) = ours(name, [np.abs(a), b], opset=6, **attrs)
        np.testing.assert_allclose(y, fn(np.abs(a), b.reshape(bview)), rtol=1e-6)


@pytest.mark.parametrize("xt,yt", [(np.float32, np.float32), (np.float32, np.float64),
                                   (np.float32, np.int64), (np.int32, np.int32),
                                   (np.int64, np.int64), (np.int32, np.float32),
                                   (np.float64, np.float32)])
def test_pow(xt, yt):
    x = rand(3, 4, lo=0.5, hi=3).astype(xt) if np.dtype(xt).kind == "f" else randint(
        3, 4, dtype=xt, lo=-5, hi=6)
    y = rand(4, lo=-2, hi=3).astype(yt) if np.dtype(yt).kind == "f" else randint(
        4, dtype=yt, lo=0, hi=4)
    check("Pow", [x, y], opset=15, rtol=1e-5)


@pytest.mark.parametrize("e", [2.0, 3.0, 0.5, 1.0, 1.7])
def test_pow_const_exponent(e):
    x = rand(5, 6, lo=0.1, hi=3)
    check("Pow", [x, np.array(e, np.float32)], opset=15, const_inputs=[1], rtol=1e-6)


def test_pow_int_negative_exponent():
    x = np.array([2, 1, -1, 4], np.int32)
    y = np.array([-1, -2, -3, 2], np.int32)
    check("Pow", [x, y], opset=15)


@pytest.mark.parametrize("fmod,dtype", [(f, d) for f in (0, 1) for d in (
    np.int32, np.int64, np.int8, np.float32) if f or d is not np.float32])  # float: fmod=1 < 28
def test_mod(fmod, dtype):
    a = randint(4, 5, dtype=dtype, lo=-30, hi=30)
    b = randint(5, dtype=dtype, lo=1, hi=7) * np.array([1, -1, 1, -1, 1], dtype)
    check("Mod", [a, b], opset=13, fmod=fmod)


def test_mod_float_floor_opset28():
    a, b = rand(4, 5), rand(5, lo=0.5, hi=2) * np.array([1, -1, 1, -1, 1], np.float32)
    check("Mod", [a, b], opset=28, fmod=0)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64])
def test_bitshift(direction, dtype):
    x = randint(3, 4, dtype=dtype, lo=0, hi=200)
    s = randint(4, dtype=dtype, lo=0, hi=6)
    check("BitShift", [x, s], opset=11, direction=direction)


def test_bitshift_signed_opset28():
    x = np.array([-8, 8, -1, 100, -100], np.int8)
    s = np.array([1, 9, 3, -1, 8], np.int8)
    for direction in ("LEFT", "RIGHT"):
        check("BitShift", [x, s], opset=28, direction=direction)


@pytest.mark.parametrize("name", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64])
def test_bitwise(name, dtype):
    check(name, [randint(3, 4, dtype=dtype, lo=0, hi=100), randint(4, dtype=dtype, lo=0, hi=100)],
          opset=18)


@pytest.mark.parametrize("name", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_compare(name, dtype):
    a = randint(3, 4, dtype=dtype, lo=-3, hi=3)
    b = randint(4, dtype=dtype, lo=-3, hi=3)
    check(name, [a, b], opset=16)


def test_equal_strings():
    a = np.array(["a", "bc", "", "x"], dtype=object)
    b = np.array(["a", "b", "", "y"], dtype=object)
    check("Equal", [a, b], opset=19)


@pytest.mark.parametrize("name", ["And", "Or", "Xor"])
def test_logical(name):
    a = RNG.integers(0, 2, (3, 4)).astype(bool)
    b = RNG.integers(0, 2, (4,)).astype(bool)
    check(name, [a, b], opset=7)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, object])
def test_where(dtype):
    c = RNG.integers(0, 2, (3, 4)).astype(bool)
    if dtype is object:
        x = np.array(["a", "b", "c", "d"], dtype=object)
        y = np.array(["z"], dtype=object)
    else:
        x, y = rand(3, 4).astype(dtype), rand(1, 4).astype(dtype)
    check("Where", [c, x, y], opset=16)


# --------------------------------------------------------------------------------------------
# Variadic
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Sum", "Max", "Min", "Mean"])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_variadic(name, n):
    shapes = [(3, 4), (4,), (1, 4), (3, 1)][:n]
    xs = [rand(*s) for s in shapes]
    check(name, xs, opset=13)


@pytest.mark.parametrize("name", ["Max", "Min"])
def test_variadic_int(name):
    check(name, [randint(3, 4), randint(4), randint(3, 1)], opset=13)


def test_sum_of_ints_is_refused_like_onnxruntime():
    # Sum takes floating-point tensors only (onnxruntime: "Type Error")
    with pytest.raises(onnxplex.InvalidModelError, match="Sum.*unsupported type: tensor.int32"):
        ours("Sum", [randint(3, 4), randint(4)], opset=13)


def test_max_nan_propagates():
    a = np.array([1.0, np.nan, 3.0], np.float32)
    b = np.array([2.0, 0.0, np.nan], np.float32)
    check("Max", [a, b], opset=13)
    check("Min", [a, b], opset=13)


# --------------------------------------------------------------------------------------------
# Cast / CastLike
# --------------------------------------------------------------------------------------------

NUMERIC = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT8,
           TensorProto.UINT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
           TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64, TensorProto.BOOL]


def _sample(elem: int) -> np.ndarray:
    dt = helper.tensor_dtype_to_np_dtype(elem)
    if dt == np.bool_:
        return np.array([True, False, True, True])
    if np.dtype(dt).kind == "f":
        return np.array([1.5, -2.25, 0.0, 100.75], dt)
    if np.dtype(dt).kind == "u":
        return np.array([1, 2, 0, 200], dt)
    return np.array([1, -2, 0, 100], dt)


@pytest.mark.parametrize("src", NUMERIC)
@pytest.mark.parametrize("dst", NUMERIC)
def test_cast_numeric(src, dst):
    check("Cast", [_sample(src)], opset=21, to=dst)


def test_cast_float_to_int_truncates_and_wraps():
    x = np.array([3.7, -3.7, 300.0, -1.0, 0.5], np.float32)
    check("Cast", [x], opset=21, to=TensorProto.INT32)
    check("Cast", [x], opset=21, to=TensorProto.UINT8)
    check("Cast", [np.array([300, -200, 127], np.int32)], opset=21, to=TensorProto.INT8)


@pytest.mark.parametrize("src", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16,
                                 TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL,
                                 TensorProto.UINT8])
def test_cast_to_string(src):
    x = _sample(src)
    if np.dtype(x.dtype).kind == "f":
        extra = [np.nan, np.inf, -np.inf, 0.1, 1 / 3, 1e-7] + ([1e10] if x.itemsize > 2 else [])
        x = np.concatenate([x, np.array(extra, x.dtype)])
    check("Cast", [x], opset=21, to=TensorProto.STRING)


@pytest.mark.parametrize("dst", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32,
                                 TensorProto.INT64, TensorProto.UINT8, TensorProto.BOOL,
                                 TensorProto.FLOAT16])
def test_cast_from_string(dst):
    if dst in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16):
        s = ["1.5", "-2", "1e3", "INF", "-inf", "NaN", "+INF", " 7"]
    else:
        s = ["12", "-3", "0", "7.9", "100"]
    check("Cast", [np.array(s, dtype=object)], opset=21, to=dst)


def test_cast_string_const_initializer():
    (y,) = ours("Cast", [np.array(["1.5", "2"], dtype=object)], opset=21, to=TensorProto.FLOAT)
    np.testing.assert_array_equal(y, np.array([1.5, 2.0], np.float32))


def test_cast_opset1_string_to():
    (y,) = ours("Cast", [np.array([1.5, -2.5], np.float32)], opset=1, to="INT32")
    assert y.dtype == np.int32 and y.tolist() == [1, -2]


F8 = [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
      TensorProto.FLOAT8E5M2FNUZ]


def _chain_ort(x: np.ndarray, to: int, opset: int = 21, **attrs) -> np.ndarray:
    """ORT Cast(to) then Cast(float): ORT's Python API cannot return float8/int4 tensors."""
    n1 = helper.make_node("Cast", ["x"], ["y"], to=to, **attrs)
    n2 = helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT)
    g = helper.make_graph([n1, n2], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, x.shape)], [helper.make_tensor_value_info(
            "z", TensorProto.FLOAT, x.shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


CAST_EDGE = np.array([9, -9, 7.6, -8.5, 100, 2.5, 3.5, -2.5, 0.5, 0.0, 1e6, -1e6, np.inf,
                      -np.inf, np.nan, 0.1, 300.0, 1e-5], np.float32)


@pytest.mark.parametrize("to", F8)
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_float8(to, saturate):
    (y,) = ours("Cast", [CAST_EDGE], opset=21, to=to, saturate=saturate)
    assert y.dtype == helper.tensor_dtype_to_np_dtype(to)
    want = _chain_ort(CAST_EDGE, to, saturate=saturate)
    np.testing.assert_array_equal(y.astype(np.float32), want)
    (back,) = ours("Cast", [y], opset=21, to=TensorProto.FLOAT)
    np.testing.assert_array_equal(back, want)


@pytest.mark.parametrize("to", [TensorProto.INT4, TensorProto.UINT4])
def test_cast_int4(to):
    (y,) = ours("Cast", [CAST_EDGE], opset=21, to=to)
    assert y.dtype == helper.tensor_dtype_to_np_dtype(to)
    np.testing.assert_array_equal(y.astype(np.float32), _chain_ort(CAST_EDGE, to))
    ints = np.array([9, -9, 7, -8, 100, 300, 15, 16], np.int32)
    (yi,) = ours("Cast", [ints], opset=21, to=to)
    assert_same([yi], ref_run("Cast", [ints], opset=21, to=to))


def test_cast_bfloat16_and_float4():
    x = CAST_EDGE[np.isfinite(CAST_EDGE)]
    for to in (TensorProto.BFLOAT16, TensorProto.FLOAT4E2M1):
        (y,) = ours("Cast", [x], opset=23, to=to)
        assert_same([y], ref_run("Cast", [x], opset=23, to=to))


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_e8m0(round_mode, saturate):
    x = np.array([1.0, 1.5, 3.0, 0.75, 1e30, 2.0 ** 127 * 1.5, 0.0, np.nan, np.inf, 1e-40],
                 np.float32)
    (y,) = ours("Cast", [x], opset=24, to=TensorProto.FLOAT8E8M0, saturate=saturate,
                round_mode=round_mode)
    (want,) = ref_run("Cast", [x], opset=24, to=TensorProto.FLOAT8E8M0, saturate=saturate,
                      round_mode=round_mode)
    assert y.dtype == want.dtype
    np.testing.assert_array_equal(y.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("like", [np.float16, np.int64, np.float64, object])
def test_castlike(like):
    x = np.array([1.5, -2.0, 3.25], np.float32)
    target = np.array(["a"], dtype=object) if like is object else np.zeros(1, like)
    check("CastLike", [x, target], opset=21)
    check("CastLike", [x, target], opset=21, const_inputs=[1])


def test_cast_same_type_and_scalar():
    x = np.array(2.5, np.float32)
    (y,) = check("Cast", [x], opset=21, to=TensorProto.FLOAT)
    (z,) = check("Cast", [x], opset=21, to=TensorProto.INT64)
    assert y.shape == () and z.shape == ()


def test_erf_float32_accuracy():
    from onnxplex.providers.cpu_mlas.elementwise import erf_float32

    x = np.concatenate([np.linspace(-6, 6, 50001), [0.0, 1e-30, np.inf, -np.inf]]).astype(
        np.float32)
    want = np.array([math.erf(v) for v in x.astype(np.float64).tolist()])
    got = erf_float32(x)
    assert got.dtype == np.float32
    ulps = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32))
    assert ulps.max() <= 4
    assert got[np.abs(x) >= 4.2].tolist() == np.sign(x[np.abs(x) >= 4.2]).tolist()


@pytest.mark.parametrize("mask", ["random", "runs"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.float16, bool])
def test_where_large(mask, dtype):
    x = rand(4, 64, 128).astype(dtype)
    y = rand(64, 128).astype(dtype)
    c = RNG.random((4, 64, 128)) < 0.5 if mask == "random" else np.sort(
        RNG.random((4, 64, 128)), axis=-1) < 0.5
    check("Where", [c, x, y], opset=16)
    check("Where", [c[:, :1], x, np.array(3).astype(dtype)], opset=16)


def test_string_const_initializers_are_decoded():
    a = np.array(["a", "b", "c"], dtype=object)
    (y,) = ours("Equal", [a, np.array(["a", "x", "c"], dtype=object)], opset=19,
                const_inputs=[1])
    assert y.tolist() == [True, False, True]
    (w,) = ours("Where", [np.array([True, False, True]), a, np.array(["z"], dtype=object)],
                opset=16, const_inputs=[2])
    assert w.dtype == object and w.tolist() == ["a", "z", "c"]
