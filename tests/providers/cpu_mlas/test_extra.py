"""cpu_mlas kernels for ops with ONNX function bodies (Unique, CumProd, BitCast, TensorScatter,
Det, Hardmax, LpNormalization, MeanVarianceNormalization, Shrink, Swish, SwiGLU,
GroupNormalization,
RMSNormalization, the two losses, CenterCropPad) against onnxruntime or onnx's reference."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP

from ._oracle import check, ours

ort.set_default_logger_severity(3)

RNG = np.random.default_rng(5)
TOL = dict(rtol=1e-5, atol=1e-5)
HALF = dict(rtol=1e-2, atol=1e-2)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# --------------------------------------------------------------------------------------------
# Unique
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8])
def test_unique(sorted_, axis, dtype):
    x = RNG.integers(-2, 2, (6, 4)).astype(dtype)
    x[3] = x[1]
    x[:, 2] = x[:, 0]
    attrs = {} if axis is None else {"axis": axis}
    check("Unique", [x], n_outputs=4, opset=11, sorted=sorted_, oracle="ort", **attrs)


def test_unique_strings_and_bfloat16():
    s = np.array(["b", "a", "b", "c", "a"], dtype=object)
    y, idx, inv, cnt = ours("Unique", [s], n_outputs=4, opset=28)
    assert y.tolist() == ["a", "b", "c"] and idx.tolist() == [1, 0, 3]
    assert inv.tolist() == [1, 0, 1, 2, 0] and cnt.tolist() == [2, 2, 1]
    y, idx, inv, cnt = ours("Unique", [s.reshape(1, 5)], n_outputs=4, opset=28, axis=1,
                            sorted=0)
    assert y.tolist() == [["b", "a", "c"]] and inv.tolist() == [0, 1, 0, 2, 1]
    b = np.array([2.5, -1, 2.5, 0], dtype=ml_dtypes.bfloat16)
    y, idx, inv, cnt = ours("Unique", [b], n_outputs=4, opset=28)
    assert y.dtype == b.dtype and y.astype(np.float32).tolist() == [-1, 0, 2.5]
    assert all(o.dtype == np.int64 for o in (idx, inv, cnt))


# --------------------------------------------------------------------------------------------
# CumProd, BitCast, TensorScatter, Det, CenterCropPad
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint64])
def test_cumprod(exclusive, reverse, axis, dtype):
    x = RNG.integers(1, 4, (3, 4)).astype(dtype)
    check("CumProd", [x, np.array(axis, np.int64)], opset=26, oracle="ref",
          exclusive=exclusive, reverse=reverse)


def test_cumprod_float16():
    x = (RNG.uniform(0.5, 1.5, (2, 5))).astype(np.float16)
    check("CumProd", [x, np.array(1, np.int32)], opset=26, oracle="ref", **HALF)


@pytest.mark.parametrize("src,to", [(np.float32, TP.INT32), (np.int64, TP.DOUBLE),
                                    (np.float16, TP.BFLOAT16), (np.uint8, TP.BOOL),
                                    (np.int16, TP.UINT16)])
def test_bitcast(src, to):
    x = RNG.integers(0, 2 if src == np.uint8 else 100, (2, 3)).astype(src)
    (y,) = ours("BitCast", [x], opset=26, to=to)
    assert y.shape == x.shape and y.tobytes() == x.tobytes()
    with pytest.raises(ValueError):
        ours("BitCast", [x.astype(np.int8)], opset=26, to=TP.INT64)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("with_idx", [False, True])
@pytest.mark.parametrize("axis", [-2, 1])
def test_tensor_scatter(mode, with_idx, axis):
    past = rand(3, 2, 6, 4)
    upd = rand(3, 2, 3, 4) if axis == -2 else rand(3, 3, 6, 4)
    if axis == 1:
        past = rand(3, 5, 6, 4)
    idx = np.array([0, 2, 1] if axis == 1 else [0, 3, 1], np.int64)
    if mode == "circular" and axis == -2:
        idx = np.array([5, 3, 4], np.int64)
    inputs = [past, upd, idx if with_idx else None]
    check("TensorScatter", inputs, opset=24, oracle="ref", mode=mode, axis=axis)


def test_tensor_scatter_linear_overflow():
    with pytest.raises(IndexError):
        ours("TensorScatter", [rand(1, 4, 2), rand(1, 2, 2), np.array([3], np.int64)],
             opset=24, axis=1)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 1, 2, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_det(shape, dtype):
    check("Det", [rand(*shape, dtype=dtype)], opset=22, rtol=1e-4, atol=1e-5)


def test_det_float16():
    x = rand(2, 3, 3, dtype=np.float16)
    (y,) = ours("Det", [x], opset=22)
    assert y.dtype == np.float16 and y.shape == (2,)
    np.testing.assert_allclose(y, np.linalg.det(x.astype(np.float32)), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("shape,sizes", [((5, 4), [5, 2]), ((6, 7, 3), [3, 10, 3]),
                                         ((3, 8, 9), [3, 4, 12])])
def test_center_crop_pad(shape, sizes):
    check("CenterCropPad", [rand(*shape), np.array(sizes, np.int64)], opset=18, oracle="ref")


@pytest.mark.parametrize("axes_attr", [[0, 1], [-2, -1], [2, 0]])
def test_center_crop_pad_axes(axes_attr):
    x = rand(7, 6, 3)
    sizes = np.array([4, 9], np.int64)
    check("CenterCropPad", [x, sizes], opset=18, oracle="ref", axes=axes_attr)


# --------------------------------------------------------------------------------------------
# Shrink, Swish, Hardmax
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int8, np.float16])
def test_shrink(dtype):
    x = (RNG.standard_normal((4, 5)) * 4).astype(dtype)
    check("Shrink", [x], opset=9, oracle="ort", lambd=1.5, bias=1.0,
          **(HALF if dtype == np.float16 else TOL))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_swish(dtype):
    x = (RNG.standard_normal((3, 7)) * 5).astype(dtype)
    check("Swish", [x], opset=24, oracle="ref", alpha=0.7,
          **(HALF if dtype == np.float16 else TOL))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("alpha", [None, 1.702])
def test_swiglu(dtype, alpha):
    """SwiGLU-28, a gated MLP's activation (onnx's newest opset; onnxruntime 1.32 has none)."""
    a, b = (RNG.standard_normal((3, 8)) * 4).astype(dtype), rand(3, 8, dtype=dtype)
    check("SwiGLU", [a, b], opset=28, oracle="ref", **({} if alpha is None else {"alpha": alpha}),
          **(HALF if dtype == np.float16 else TOL))


def test_swiglu_refuses_to_broadcast():
    with pytest.raises(Exception, match="one shape and type"):
        ours("SwiGLU", [rand(3, 8), rand(1, 8)], opset=28)


@pytest.mark.parametrize("opset,axis", [(11, 0), (11, 1), (11, 2), (11, -1), (13, 0),
                                        (13, 1), (13, -1)])
def test_hardmax(opset, axis):
    x = np.round(rand(3, 4, 5), 0)  # ties: the first maximum wins
    check("Hardmax", [x], opset=opset, oracle="ort", axis=axis)


def test_hardmax_float16_default_axis():
    check("Hardmax", [rand(2, 3, 4, dtype=np.float16)], opset=13, oracle="ort")
    check("Hardmax", [rand(2, 3, 4, dtype=np.float16)], opset=11, oracle="ort")


# --------------------------------------------------------------------------------------------
# Normalizations
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lp_normalization(p, axis, dtype):
    x = rand(3, 4, 5, dtype=dtype)
    x[0, :, :] = 0  # zero norms give zeros
    check("LpNormalization", [x], opset=22, oracle="ort", p=p, axis=axis, **TOL)


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1], [2, 3], [-1]])
def test_mvn(axes):
    attrs = {} if axes is None else {"axes": axes}
    check("MeanVarianceNormalization", [rand(2, 3, 4, 5)], opset=13, oracle="ort",
          **attrs, **TOL)


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rms_normalization(axis, dtype):
    x = rand(2, 3, 4, dtype=dtype)
    scale = rand(*x.shape[axis:], dtype=dtype) if axis >= 0 else rand(
        *x.shape[x.ndim + axis:], dtype=dtype)
    check("RMSNormalization", [x, scale], opset=23, oracle="ref", axis=axis, epsilon=1e-3,
          **TOL)


def test_rms_normalization_float16_broadcast_scale():
    x = rand(2, 3, 8, dtype=np.float16)
    check("RMSNormalization", [x, rand(8, dtype=np.float16)], opset=23, oracle="ref", **HALF)


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_normalization(opset, groups):
    x = rand(2, 4, 3, 3)
    n = groups if opset == 18 else 4
    check("GroupNormalization", [x, rand(n), rand(n)], opset=opset, oracle="ref",
          num_groups=groups, epsilon=1e-3, **TOL)


def test_group_normalization_float16():
    x = rand(2, 6, 5, dtype=np.float16)
    check("GroupNormalization", [x, rand(6, dtype=np.float16), rand(6, dtype=np.float16)],
          opset=21, oracle="ref", num_groups=3, **HALF)


# --------------------------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------------------------

LOSS_CASES = [((5, 4), None, None), ((5, 4), True, None), ((3, 4, 6), None, 2),
              ((3, 4, 6), True, 1), ((2, 4, 3, 2), True, -1), ((2, 4, 3, 2), None, 7)]


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape,weighted,ii", LOSS_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nll_loss(reduction, shape, weighted, ii, dtype):
    x = rand(*shape, dtype=dtype)
    target = RNG.integers(0, shape[1], shape[:1] + shape[2:]).astype(np.int64)
    if ii is not None:
        target.reshape(-1)[::3] = ii
    inputs = [x, target] + ([rand(shape[1], dtype=dtype) ** 2] if weighted else [])
    attrs = {} if ii is None else {"ignore_index": ii}
    check("NegativeLogLikelihoodLoss", inputs, opset=13, oracle="ort", reduction=reduction,
          **attrs, **TOL)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape,weighted,ii", LOSS_CASES)
@pytest.mark.parametrize("log_prob", [False, True])
def test_softmax_cross_entropy(reduction, shape, weighted, ii, log_prob):
    x = rand(*shape)
    target = RNG.integers(0, shape[1], shape[:1] + shape[2:]).astype(np.int32)
    if ii is not None:
        target.reshape(-1)[::3] = ii
    inputs = [x, target] + ([rand(shape[1]) ** 2] if weighted else [])
    attrs = {} if ii is None else {"ignore_index": ii}
    check("SoftmaxCrossEntropyLoss", inputs, n_outputs=2 if log_prob else 1, opset=13,
          oracle="ort", reduction=reduction, **attrs, **TOL)


def test_loss_target_out_of_range():
    with pytest.raises(IndexError):
        ours("NegativeLogLikelihoodLoss", [rand(2, 3), np.array([0, 3], np.int64)], opset=13)


def test_sce_float16():
    x = rand(4, 5, dtype=np.float16)
    t = np.array([0, 4, 2, 1], np.int64)
    check("SoftmaxCrossEntropyLoss", [x, t], n_outputs=2, opset=13, oracle="ort", **HALF)
