"""The small-input paths of cpu_mlas's reductions, ArgMax/ArgMin, Softmax/LogSoftmax and
Hardmax (batch-1 tensors of converted scikit-learn models): the same values as the general
paths and as onnxruntime, edge cases included (non-finite inputs, keepdims=0, negative and
multiple axes, select_last_index ties, half floats)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from onnxplex.providers.cpu_mlas import normalization, reduce

from ._oracle import check, ours

RNG = np.random.default_rng(7)

REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
          "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
SMALL_SHAPES = [(1, 3), (1, 20), (1, 4), (3, 1), (2, 3, 4), (7,)]
INF = np.inf


def _sample(kind: str, shape, dtype=np.float32) -> np.ndarray:
    x = RNG.uniform(-2, 2, size=shape)
    if kind == "ReduceLogSum":
        x = np.abs(x) + 0.1
    return x.astype(dtype)


def _axes_cases(ndim: int):
    cases = [None, [-1], [0]]
    if ndim > 1:
        cases += [[ndim - 1], [0, -1], list(range(ndim))]
    return cases


@pytest.mark.parametrize("kind", REDUCE)
@pytest.mark.parametrize("shape", SMALL_SHAPES)
@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_direct_path_matches_general_path_bit_for_bit(kind, shape, keep, dtype):
    """The constant-axes kernel's direct path gives the general path's values, dtype and
    shape exactly (a full reduction without keepdims: a 0-d ndarray); ReduceLogSumExp's
    one-call float64 log-add within an ulp of them."""
    x = _sample(kind, shape, dtype)
    for axes in _axes_cases(len(shape)):
        got = reduce._constant_axes_kernel(kind, axes, keep)(x)
        with np.errstate(all="ignore"):
            want = reduce._run(kind, x, axes, keep)
        assert type(got) is np.ndarray
        assert got.dtype == want.dtype == x.dtype and got.shape == want.shape, (axes, keep)
        if kind == "ReduceLogSumExp":   # (the shifted sum's error is absolute, ~ulp(1))
            eps = float(ml_dtypes.finfo(dtype).eps)
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                       rtol=eps, atol=4 * eps,
                                       err_msg=f"axes={axes} keep={keep}")
            ref = np.log(np.exp(x.astype(np.float64)).sum(
                axis=None if axes is None else tuple(axes), keepdims=keep))
            np.testing.assert_allclose(got.astype(np.float64), ref, rtol=eps, atol=4 * eps)
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"axes={axes} keep={keep}")


@pytest.mark.parametrize("kind", REDUCE)
@pytest.mark.parametrize("shape", [(1, 3), (1, 20), (2, 3, 4)])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_small_reduce_against_onnxruntime(kind, shape, keepdims):
    x = _sample(kind, shape)
    for axes in ([1], [-1], [0, -1]):
        check(kind, [x, np.array(axes, np.int64)], opset=18, keepdims=keepdims,
              const_inputs=[1], rtol=1e-5)


@pytest.mark.parametrize("kind", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2",
                                  "ReduceLogSumExp", "ReduceSumSquare"])
def test_small_reduce_float16_against_onnxruntime(kind):
    x = _sample(kind, (1, 20), np.float16)
    check(kind, [x, np.array([1], np.int64)], opset=18, keepdims=0, const_inputs=[1],
          rtol=2e-3, atol=2e-3)


def test_reduce_sum_scalar_result_and_empty_axis():
    (y,) = ours("ReduceSum", [np.ones((1, 3), np.float32)], opset=13, keepdims=0)
    assert type(y) is np.ndarray and y.shape == () and y == 3
    # an empty reduced axis takes the general path: the reduction's identity
    x = np.zeros((1, 0), np.float32)
    for kind in REDUCE:
        check(kind, [x, np.array([1], np.int64)], opset=18, const_inputs=[1])


# --------------------------------------------------------------------------------------------
# ReduceLogSumExp with non-finite inputs
# --------------------------------------------------------------------------------------------

NONFINITE_ROWS = np.array([
    [1.0, 2.0, 3.0],
    [-INF, -INF, -INF],     # log(0) = -inf
    [-INF, 0.0, 1.0],
    [INF, 1.0, 2.0],        # inf
    [INF, -INF, 0.0],
    [np.nan, 1.0, INF],     # nan
    [-3e38, -3e38, -INF],   # huge finite values next to the clamped shift
    [3e38, 3e38, 1.0],      # exp(0) + exp(0): log(2) + 3e38 = 3e38
])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("keep", [False, True])
def test_log_sum_exp_nonfinite_rows(dtype, keep):
    with np.errstate(all="ignore"):
        x = NONFINITE_ROWS.astype(dtype)   # (float16: the +-3e38 become +-inf)
        got = reduce._constant_axes_kernel("ReduceLogSumExp", [1], keep)(x)
        want = reduce._run("ReduceLogSumExp", x, [1], keep)
        m = np.max(x.astype(np.float64), axis=1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        ref = (np.log(np.exp(x.astype(np.float64) - m).sum(1, keepdims=True)) + m)
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=float(np.finfo(dtype).eps))
    np.testing.assert_allclose(got.reshape(-1).astype(np.float64), ref.reshape(-1),
                               rtol=1e-3)
    # past the one-call size the shifted sum: the general path's values exactly
    xl = np.tile(x, (1, 30))
    with np.errstate(all="ignore"):
        got = reduce._constant_axes_kernel("ReduceLogSumExp", [1], keep)(xl)
        want = reduce._run("ReduceLogSumExp", xl, [1], keep)
    np.testing.assert_array_equal(got, want)


def test_log_sum_exp_neg_inf_against_onnxruntime():
    x = np.array([[-INF, -INF, -INF], [-INF, 0.0, 1.0], [2.0, -1.0, 0.5]], np.float32)
    check("ReduceLogSumExp", [x, np.array([1], np.int64)], opset=18, keepdims=0,
          const_inputs=[1], rtol=1e-6)


@pytest.mark.parametrize("axes", [[-1], [0], [1, 2]])
def test_log_sum_exp_large_takes_blas_sum(axes):
    """At or above the direct path's size the exp sum goes through BLAS: same values."""
    x = RNG.standard_normal((8, 32, 64)).astype(np.float32) * 10
    x[0, 0, :] = -INF
    with np.errstate(all="ignore"):   # as a session runs its kernels
        got = reduce._constant_axes_kernel("ReduceLogSumExp", axes, False)(x)
        want = reduce._run("ReduceLogSumExp", x, axes, False)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    assert got.shape == want.shape and got.dtype == np.float32


# --------------------------------------------------------------------------------------------
# ArgMax / ArgMin
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("shape", [(1, 3), (1, 20), (4,), (2, 3, 4)])
@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_small_arg_ties(name, shape, axis, keepdims, last):
    x = RNG.integers(0, 2, size=shape).astype(np.float32)  # ties
    (y,) = check(name, [x], opset=13, axis=axis, keepdims=keepdims, select_last_index=last)
    assert type(y) is np.ndarray and y.dtype == np.int64


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("last", [0, 1])
def test_small_arg_half_floats(dtype, last):
    x = np.array([[1.0, 3.0, 3.0, -2.0], [0.5, 0.5, -1.0, 0.5]]).astype(dtype)
    for name, fn in (("ArgMax", np.argmax), ("ArgMin", np.argmin)):
        (y,) = ours(name, [x], opset=13, axis=1, keepdims=0, select_last_index=last)
        xf = x.astype(np.float32)
        want = 3 - fn(xf[:, ::-1], axis=1) if last else fn(xf, axis=1)
        np.testing.assert_array_equal(y, want)
        assert y.dtype == np.int64


def test_small_arg_nan_is_the_maximum_as_before():
    x = np.array([[1.0, np.nan, 2.0, np.nan]], np.float32)
    assert ours("ArgMax", [x], opset=13, axis=1)[0].tolist() == [[1]]
    assert ours("ArgMax", [x], opset=13, axis=1, select_last_index=1)[0].tolist() == [[3]]


# --------------------------------------------------------------------------------------------
# Softmax / LogSoftmax / Hardmax
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape", [(1, 3), (1, 20), (2, 3, 4), (5,)])
@pytest.mark.parametrize("opset", [11, 13])
def test_small_softmax_against_onnxruntime(op_type, shape, opset):
    x = RNG.standard_normal(shape).astype(np.float32) * 3
    for axis in range(-len(shape), len(shape)):
        check(op_type, [x], opset=opset, axis=axis, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_small_softmax_dtypes(op_type, dtype):
    x = (RNG.standard_normal((2, 7)) * 3).astype(dtype)
    (y,) = check(op_type, [x], opset=13, rtol=2e-3 if dtype == np.float16 else 1e-7,
                 atol=2e-3 if dtype == np.float16 else 1e-7)
    assert y.dtype == dtype


@pytest.mark.parametrize("log", [False, True])
def test_small_softmax_matches_the_large_paths_shifted_branch(log):
    """Rows with -inf (outside the unshifted range): the small path gives the large path's
    values, a row of -inf NaN on both."""
    x = np.array([[-INF, 1.0, 2.0, 3.0], [-INF, -INF, -INF, -INF], [0.0, 0.0, -INF, 90.0]],
                 np.float32)
    with np.errstate(all="ignore"):
        got = normalization._softmax_small(x, 1, True, log)
        want = normalization._softmax(x, 1, log)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
        assert np.isnan(got[1]).all()
        got0 = normalization._softmax_small(x[:, :3], 0, False, log)
        want0 = normalization._softmax(x[:, :3], 0, log)
        np.testing.assert_allclose(got0, want0, rtol=1e-6, atol=0)


@pytest.mark.parametrize("log", [False, True])
def test_native_small_softmax_matches_the_ufunc_path(log):
    """The native row kernel (float32, last axis, C-contiguous) against the ufunc path on
    random rows and on rows with -inf, +inf and NaN: the same values within float32 rounding
    (its sum is in double), a row whose max is not finite or that holds a NaN NaN on both."""
    from onnxplex.providers.cpu_mlas._native import native
    nat = native()
    if nat is None or not hasattr(nat, "softmax_f32"):
        pytest.skip("the native module is not built")
    rows = [RNG.standard_normal(c).astype(np.float32) * 5 for c in (1, 2, 3, 10, 257)]
    special = [[-INF, 1.0, 2.0], [-INF, -INF, -INF], [0.0, INF, 1.0], [1.0, np.nan, 2.0],
               [88.0, 89.0, -100.0]]
    for r in rows + [np.array(v, np.float32) for v in special]:
        for x in (r[None, :], np.stack([r, r[::-1]]), r):
            with np.errstate(all="ignore"):
                want = normalization._softmax_small(x, x.ndim - 1, True, log)
            got = nat.softmax_f32(np.ascontiguousarray(x), log)
            assert got.shape == x.shape and got.dtype == np.float32
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7, equal_nan=True)


def test_native_small_softmax_is_the_kernels_path(monkeypatch):
    """A float32 small Softmax over the last axis calls the native row kernel (a Fortran-
    ordered input and another axis take the ufuncs), all as onnxruntime gives them."""
    from onnxplex.providers.cpu_mlas._native import native
    nat = native()
    if nat is None or not hasattr(nat, "softmax_f32"):
        pytest.skip("the native module is not built")
    calls = []
    real = nat.softmax_f32
    monkeypatch.setattr(nat, "softmax_f32", lambda x, log: calls.append(x.shape) or real(x, log))
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    check("Softmax", [x], opset=13, axis=-1, rtol=1e-5, atol=1e-6)
    assert calls == [(3, 5)]
    check("Softmax", [np.asfortranarray(x)], opset=13, axis=-1, rtol=1e-5, atol=1e-6)
    check("LogSoftmax", [x], opset=13, axis=0, rtol=1e-5, atol=1e-6)
    assert calls == [(3, 5)]


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("shape", [(1, 3), (1, 20), (2, 3, 4), (64, 256)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_hardmax_small_and_large(opset, shape, dtype):
    x = RNG.integers(0, 3, size=shape).astype(dtype)  # ties: the first maximum
    for axis in (-1, 0):
        check("Hardmax", [x], opset=opset, axis=axis, oracle="ort")


MID_CASES = [((1, 8, 8, 32), [1, 2]), ((2, 7, 7, 2048), [1, 2]), ((3, 5, 17), [1]),
             ((4, 100, 3), [-2]), ((2, 3, 4, 5, 6), [1, 2, 3]), ((5, 1, 2), [0]),
             ((2, 1, 1, 9), [1, 2]), ((0, 3, 4), [1]), ((3, 2, 4), [0, 1]),
             ((1, 56, 56, 16), [1, 2]), ((2, 9, 9, 45), [1, 2])]


@pytest.mark.parametrize("kind", ["ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("shape,axes", MID_CASES)
@pytest.mark.parametrize("keep", [False, True])
def test_middle_axes_native_sum_is_numpys_to_the_bit(kind, shape, axes, keep):
    """float32 sums and means over consecutive axes that are not the innermost (a
    channels-last global average pooling) take one native pass (``sum_mid_f32``) that adds
    the rows in numpy's order: numpy's values bit for bit, signed zeros, infinities and NaN
    included, in the general path's shape."""
    x = (RNG.standard_normal(shape) * 100).astype(np.float32)
    if x.size:
        x.flat[0] = -0.0
        x.flat[x.size // 2] = np.inf if kind == "ReduceSum" else x.flat[x.size // 2]
        x.flat[-1] = np.nan
    got = reduce._constant_axes_kernel(kind, axes, keep)(x)
    with np.errstate(all="ignore"):
        want = reduce._run(kind, x, axes, keep)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)   # (NaN where NaN; -0.0 equals 0.0 here)
    ax = tuple(a % x.ndim for a in axes)
    with np.errstate(all="ignore"):
        sums = np.add.reduce(x, ax, None, None, keep)   # (the direct path's numpy call)
        ref = sums / (x.size // sums.size) if kind == "ReduceMean" and x.size else sums
    assert np.array_equal(got, ref, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(ref))
    zeros = np.full(shape, -0.0, np.float32)   # numpy adds to +0.0: a sum of -0.0s is +0.0
    got = reduce._constant_axes_kernel(kind, axes, keep)(zeros)
    assert np.array_equal(np.signbit(got), np.signbit(np.add.reduce(zeros, ax, None, None, keep)))


def test_middle_axes_take_the_native_pass(monkeypatch):
    """The channels-last global pooling shape goes through ``sum_mid_f32`` (a broken native
    call shows), an innermost axis does not (numpy sums it pairwise)."""
    from onnxplex.providers.cpu_mlas._native import native

    if not hasattr(native(), "sum_mid_f32"):
        pytest.skip("native module without sum_mid_f32")
    x = RNG.standard_normal((1, 7, 7, 64)).astype(np.float32)
    mid = reduce._constant_axes_kernel("ReduceMean", [1, 2], True)
    assert mid(x).shape == (1, 1, 1, 64)
    last = reduce._constant_axes_kernel("ReduceMean", [3], True)
    calls = []

    class Spy:
        def __getattr__(self, name):
            return getattr(native(), name)

        def sum_mid_f32(self, *a):
            calls.append(a[0].shape)
            return native().sum_mid_f32(*a)

    monkeypatch.setattr(reduce, "native", lambda: Spy())
    reduce._constant_axes_kernel("ReduceMean", [1, 2], True)(x)
    reduce._constant_axes_kernel("ReduceMean", [3], True)(x)
    assert calls == [(1, 49, 64)]
    assert last(x).shape == (1, 7, 7, 1)
