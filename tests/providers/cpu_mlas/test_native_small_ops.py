"""The native small-array elementwise ops (``_mlas_native.small_op``, register_small.cpp):
numpy's results to the bit on the inputs they compute, the fallback kernel's on all others,
and the kernels cpu_mlas builds take them where they apply."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxplex
from onnxplex.providers.cpu_mlas._native import native

mod = native()
pytestmark = pytest.mark.skipif(mod is None, reason="the _mlas_native module is not built")

NUMPY = {"neg": np.negative, "abs": np.absolute, "relu": lambda x: np.maximum(x, x.dtype.type(0)),
         "sqrt": np.sqrt, "reciprocal": np.reciprocal, "floor": np.floor, "ceil": np.ceil,
         "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
         "max": np.maximum, "min": np.minimum}
UNARY = ["neg", "abs", "relu", "sqrt", "reciprocal", "floor", "ceil"]
BINARY = ["add", "sub", "mul", "div", "max", "min"]


class Spy:
    """A fallback that counts its calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *xs, **kw):
        self.calls += 1
        return self.fn(*xs, **kw)


def special(dtype, n, rng):
    """n values of dtype, the IEEE corner cases among them (or the integer extremes)."""
    if np.dtype(dtype).kind == "i":
        info = np.iinfo(dtype)
        pool = np.array([0, 1, -1, info.min, info.max, 7, -7], dtype)
        return np.concatenate([pool, rng.integers(-1000, 1000, n, dtype=dtype)])[:n]
    pool = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.5, -2.5, 1e-40, 3e38],
                    dtype)
    vals = np.concatenate([pool, rng.standard_normal(n).astype(dtype) * 4])[:n]
    return rng.permutation(vals)


def bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


def same(got, want):
    assert type(got) is np.ndarray
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind == "f":   # NaN where numpy has one (which NaN of two operands a
        # SIMD add keeps is the hardware's operand order: no meaning), other values to the
        # bit (signed zeros included)
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        got, want = got[~nan], want[~nan]
    np.testing.assert_array_equal(bits(got), bits(want))


def test_the_table():
    assert set(mod.SMALL_OPS) == set(NUMPY)
    assert {k for k, v in mod.SMALL_OPS.items() if v} == {"neg", "abs", "relu", "add", "sub",
                                                          "mul", "max", "min"}
    with pytest.raises(ValueError, match="unknown op 'pow'"):
        mod.small_op("pow", np.power)
    with pytest.raises(TypeError, match="callable"):
        mod.small_op("add", 3)


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("shape", [(), (1,), (5,), (3, 4), (2, 1, 3, 5)])
def test_unary_matches_numpy_to_the_bit(name, dtype, shape):
    rng = np.random.default_rng(hash((name, shape)) % 2**32)
    x = special(dtype, int(np.prod(shape)), rng).reshape(shape)
    spy = Spy(NUMPY[name])
    k = mod.small_op(name, spy)
    with np.errstate(all="ignore"):
        want = np.asarray(NUMPY[name](x))
        got = k(x)
    same(np.asarray(got), want)
    computed = mod.SMALL_OPS[name] or np.dtype(dtype).kind == "f"
    assert spy.calls == (0 if computed else 1)


# (a, b) shapes: the broadcasts the op computes itself
COMPUTED = [((4,), (4,)), ((2, 3), (2, 3)), ((1, 3), (3,)), ((3,), (1, 3)), ((2, 3), ()),
            ((), (2, 3)), ((2, 3), (1,)), ((1, 1), (2, 3)), ((2, 3, 4), (3, 4)),
            ((4,), (2, 3, 4)), ((2, 3, 4), (1, 1, 4)), ((1,), (1, 1, 1)), ((), ())]
# numpy's to broadcast (columns, interior ones) or to refuse
FALLBACK = [((3, 1), (3,)), ((2, 3), (2, 1)), ((2, 1, 4), (3, 4)), ((4, 1), (1, 5))]


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("shapes", COMPUTED + FALLBACK, ids=str)
def test_binary_matches_numpy_to_the_bit(name, dtype, shapes):
    rng = np.random.default_rng(hash((name, shapes)) % 2**32)
    a = special(dtype, int(np.prod(shapes[0])), rng).reshape(shapes[0])
    b = special(dtype, int(np.prod(shapes[1])), rng).reshape(shapes[1])
    if name == "div" and np.dtype(dtype).kind == "i":
        return   # (not an integer op: numpy's true division would change the dtype)
    spy = Spy(NUMPY[name])
    k = mod.small_op(name, spy)
    with np.errstate(all="ignore"):
        want = np.asarray(NUMPY[name](a, b))
        got = np.asarray(k(a, b))
    same(got, want)
    assert spy.calls == (1 if shapes in FALLBACK else 0)


def test_max_min_follow_numpy_on_nan_and_signed_zero():
    a = np.array([-0.0, 0.0, np.nan, -np.nan, 1.0, np.nan], np.float32)
    b = np.array([0.0, -0.0, 1.0, np.nan, np.nan, -np.nan], np.float32)
    for name in ("max", "min"):
        same(mod.small_op(name, NUMPY[name])(a, b), NUMPY[name](a, b))
    same(mod.small_op("relu", NUMPY["relu"])(a), np.maximum(a, np.float32(0)))


@pytest.mark.parametrize("case", ["view", "fortran", "swapped", "float16", "mixed", "scalar",
                                  "large", "empty", "list", "kwargs", "arity"])
def test_everything_else_goes_to_the_fallback(case):
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    y = np.full((3, 4), 2, np.float32)
    args = {"view": (x[:, ::2], y[:, :2]), "fortran": (np.asfortranarray(x), y),
            "swapped": (x.astype(">f4"), y), "float16": (x.astype(np.float16),
                                                          y.astype(np.float16)),
            "mixed": (x, y.astype(np.float64)), "scalar": (x, np.float32(2)),
            "large": (np.ones(20000, np.float32), np.ones(20000, np.float32)),
            "empty": (np.ones((0, 4), np.float32), np.ones(4, np.float32)),
            "list": ([1.0, 2.0], [3.0, 4.0]), "kwargs": (x, y), "arity": (x,)}[case]
    spy = Spy(lambda *xs, **kw: np.add(*xs, **kw) if len(xs) == 2 else xs[0])
    k = mod.small_op("add", spy)
    got = k(*args, out=None) if case == "kwargs" else k(*args)
    want = spy.fn(*args)
    np.testing.assert_array_equal(got, want)
    assert spy.calls == 1


def test_fallback_errors_pass_through():
    def bad(a, b):
        raise ValueError("shapes do not broadcast")

    k = mod.small_op("mul", bad)
    with pytest.raises(ValueError, match="broadcast"):
        k(np.ones((2, 3), np.float32), np.ones((2, 2), np.float32))
    assert k.fallback is bad and "mul" in repr(k)


def test_the_result_is_a_new_array():
    x = np.ones(4, np.float32)
    y = mod.small_op("add", np.add)(x, x)
    assert not np.shares_memory(x, y) and y.flags.owndata and y.flags.writeable


def _model(op, dtype, shape_a, shape_b=None, opset=17):
    te = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    ins = [helper.make_tensor_value_info("a", te, shape_a)]
    if shape_b is not None:
        ins.append(helper.make_tensor_value_info("b", te, shape_b))
    node = helper.make_node(op, [i.name for i in ins], ["y"])
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", te, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


@pytest.mark.parametrize("op, name, dtype, binary", [
    ("Add", "add", np.float32, True), ("Sub", "sub", np.int64, True),
    ("Div", "div", np.float64, True), ("Max", "max", np.float32, True),
    ("Relu", "relu", np.float32, False), ("Neg", "neg", np.int64, False),
    ("Sqrt", "sqrt", np.float32, False)])
def test_cpu_mlas_kernels_take_the_small_ops(op, name, dtype, binary):
    sess = onnxplex.InferenceSession(_model(op, dtype, [2, 3], [3] if binary else None))
    (step,) = sess._exec.steps
    assert type(step.kernel).__name__ == "SmallOp" and f"SmallOp {name}," in repr(step.kernel)
    a = (np.arange(6).reshape(2, 3) + 1).astype(dtype)
    feeds = {"a": a, **({"b": np.arange(3).astype(dtype) + 2} if binary else {})}
    with np.errstate(all="ignore"):
        want = {"Add": np.add, "Sub": np.subtract, "Div": np.divide, "Max": np.maximum,
                "Relu": lambda x: np.maximum(x, 0), "Neg": np.negative,
                "Sqrt": np.sqrt}[op](*feeds.values())
    same(sess.run(None, feeds)[0], want.astype(dtype))


def test_legacy_broadcast_keeps_the_aligning_kernel():
    """Opset 6 Add with broadcast=1, axis=0: B lines up with A's first axis, not its last;
    the small op (numpy broadcasting) must not stand in for that kernel."""
    te = TensorProto.FLOAT
    node = helper.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=0)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", te, [3, 3]),
                                        helper.make_tensor_value_info("b", te, [3])],
                          [helper.make_tensor_value_info("y", te, [3, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)], ir_version=3)
    onnx.checker.check_model(m)
    sess = onnxplex.InferenceSession(m.SerializeToString())
    assert "SmallOp" not in repr(sess._exec.steps[0].kernel)
    a = np.zeros((3, 3), np.float32)
    b = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(sess.run(None, {"a": a, "b": b})[0], a + b[:, None])
