"""cpu_mlas reductions and ArgMax/ArgMin against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from ._oracle import check, ours

RNG = np.random.default_rng(2)

REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
          "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def axes_input_since(name: str) -> int:
    return 13 if name == "ReduceSum" else 18


def sample(name: str, dtype=np.float32, shape=(2, 3, 4)) -> np.ndarray:
    x = RNG.uniform(-2, 2, size=shape)
    if name in ("ReduceLogSum",):
        x = np.abs(x) + 0.1
    if name == "ReduceProd":
        x = RNG.uniform(0.5, 1.5, size=shape) * RNG.choice([-1, 1], size=shape)
    if np.dtype(dtype).kind in "iu":
        x = RNG.integers(1 if name == "ReduceLogSum" else -3, 4, size=shape)
    return np.asarray(x).astype(dtype)


AXES = [None, (0,), (1,), (-1,), (0, 2), (0, 1, 2), ()]


@pytest.mark.parametrize("name", REDUCE)
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_input(name, axes, keepdims):
    x = sample(name)
    opset = axes_input_since(name)
    ins = [x] if axes is None else [x, np.array(axes, np.int64)]
    check(name, ins, opset=opset, keepdims=keepdims, const_inputs=[1], rtol=1e-5)
    if axes:
        check(name, ins, opset=opset, keepdims=keepdims, rtol=1e-5)


@pytest.mark.parametrize("name", REDUCE)
@pytest.mark.parametrize("axes", [None, ()])
def test_reduce_noop_with_empty_axes(name, axes):
    x = sample(name)
    ins = [x] if axes is None else [x, np.array(axes, np.int64)]
    check(name, ins, opset=axes_input_since(name), noop_with_empty_axes=1, const_inputs=[1],
          rtol=1e-5)


@pytest.mark.parametrize("name", REDUCE)
@pytest.mark.parametrize("axes", [None, (1,), (-1, 0)])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_attribute(name, axes, keepdims):
    attrs = {"keepdims": keepdims} if axes is None else {"keepdims": keepdims, "axes": list(axes)}
    check(name, [sample(name)], opset=axes_input_since(name) - 2 if name != "ReduceSum" else 11,
          rtol=1e-5, **attrs)


@pytest.mark.parametrize("name", REDUCE)
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_reduce_dtypes(name, dtype):
    x = sample(name, dtype)
    check(name, [x, np.array([1], np.int64)], opset=axes_input_since(name), const_inputs=[1],
          rtol=1e-6)


@pytest.mark.parametrize("name", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2"])
def test_reduce_float16_accumulates_in_float32(name):
    x = (RNG.uniform(0, 1, size=(4, 2048))).astype(np.float16)
    (y,) = ours(name, [x, np.array([1], np.int64)], opset=axes_input_since(name),
                const_inputs=[1])
    assert y.dtype == np.float16
    fn = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max,
          "ReduceL2": lambda a, axis, keepdims: np.sqrt(np.sum(a * a, axis, keepdims=keepdims))}
    want = fn[name](x.astype(np.float64), axis=1, keepdims=True).astype(np.float16)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("name", REDUCE)
def test_reduce_empty_axis(name):
    x = np.zeros((2, 0, 3), np.float32)
    check(name, [x, np.array([1], np.int64)], opset=axes_input_since(name), const_inputs=[1])


def test_reduce_max_bool_and_int8():
    b = RNG.integers(0, 2, size=(3, 4)).astype(bool)
    check("ReduceMax", [b, np.array([1], np.int64)], opset=20, const_inputs=[1])
    check("ReduceMin", [b, np.array([0], np.int64)], opset=20, const_inputs=[1])
    i8 = RNG.integers(-100, 100, size=(3, 4)).astype(np.int8)
    check("ReduceMax", [i8], opset=18, keepdims=0)


def test_reduce_scalar_output_is_ndarray():
    (y,) = ours("ReduceSum", [np.ones((2, 2), np.float32)], opset=13, keepdims=0)
    assert type(y) is np.ndarray and y.shape == () and y.dtype == np.float32


@pytest.mark.parametrize("name", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64, np.int64])
def test_arg(name, axis, keepdims, last, dtype):
    x = RNG.integers(0, 3, size=(3, 4, 5)).astype(dtype)  # ties
    check(name, [x], opset=13, axis=axis, keepdims=keepdims, select_last_index=last)


def test_arg_opset1_defaults():
    check("ArgMax", [RNG.standard_normal((3, 4)).astype(np.float32)], opset=11)
    check("ArgMin", [RNG.standard_normal((3, 4)).astype(np.float32)], opset=1, keepdims=0)


@pytest.mark.parametrize("name", ["ReduceSum", "ReduceMean", "ReduceL2", "ReduceSumSquare",
                                  "ReduceL1", "ReduceLogSumExp"])
@pytest.mark.parametrize("axes", [(-1,), (1, 2), (0,), (0, 1), (1,)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reduce_large_blas_path(name, axes, dtype):
    x = RNG.standard_normal((4, 32, 64)).astype(dtype)
    check(name, [x, np.array(axes, np.int64)], opset=axes_input_since(name), const_inputs=[1],
          rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["ReduceSum", "ReduceMean"])
def test_constant_axes_plans_per_input_shape(name):
    """A constant-axes float sum or mean keeps one BLAS plan per input shape (a channels-last
    CNN's global pooling over axes 1 and 2): every shape, batch 1 or more, gets its own, and
    more shapes than are kept start the plans over without a wrong answer."""
    from onnxplex.providers.cpu_mlas import reduce

    kernel = reduce._constant_axes_kernel(name, [1, 2], True)
    np_fn = np.sum if name == "ReduceSum" else np.mean
    shapes = [(n, h, h, c) for n in (1, 3) for h in (7, 9) for c in (96, 1280)]
    shapes += [(1, 8, 8, 64 + k) for k in range(reduce._PLANS_KEPT + 3)]
    for shape in shapes + shapes[:4]:
        x = RNG.standard_normal(shape).astype(np.float32)
        got = kernel(x)
        want = np_fn(x.astype(np.float64), axis=(1, 2), keepdims=True)
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * (shape[1] ** 2))
    # a non-contiguous input and a small one take the general path, with the same answer
    x = RNG.standard_normal((2, 9, 9, 200)).astype(np.float32)[:, :, :, ::2]
    np.testing.assert_allclose(kernel(x), np_fn(x.astype(np.float64), axis=(1, 2),
                                                keepdims=True), rtol=2e-5, atol=2e-3)
