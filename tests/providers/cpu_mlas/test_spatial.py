"""cpu_mlas Resize, Upsample and Pad kernels against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from onnxplex.providers.cpu_mlas import spatial
from onnxplex.providers.cpu_mlas._native import native

from ._oracle import check, ours

NAT = native()

ort.set_default_logger_severity(3)

RNG = np.random.default_rng(99)
TOL = dict(rtol=1e-4, atol=1e-5)
EMPTY = np.array([], np.float32)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def scales(*s: float) -> np.ndarray:
    return np.array(s, np.float32)


X = rand(2, 3, 5, 7)
SCALES = {
    "up": scales(1, 1, 2, 1.5),
    "down": scales(1, 1, 0.6, 0.45),
    "mixed": scales(1, 1, 1.7, 0.8),
}
COORDS = ["half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners",
          "half_pixel_symmetric", "tf_half_pixel_for_nn"]


def coord_oracle(coord: str) -> str:
    # With scales, align_corners divides by the integer output length less one, as onnxruntime
    # and onnx 1.24's conformance cases do (onnx 1.23's reference used the fractional
    # scale * length), so every mode compares with onnxruntime.
    return "ort"


def coord_opset(coord: str) -> int:
    # half_pixel_symmetric is new in 19; tf_half_pixel_for_nn was dropped after 11/13
    return {"half_pixel_symmetric": 19, "tf_half_pixel_for_nn": 11}.get(coord, 13)


def resize(x, roi=None, sc=None, sizes=None, *, opset=13, oracle="ort", const=(2,), tol=TOL,
           **attrs):
    roi = EMPTY if roi is None and opset == 11 else roi
    sc = EMPTY if sc is None and opset == 11 else sc
    inputs = [x, roi, sc] + ([sizes] if sizes is not None else [])
    return check("Resize", inputs, opset=opset, oracle=oracle, const_inputs=list(const),
                 **attrs, **tol)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil"])
@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("sc", list(SCALES))
def test_resize_nearest(sc, coord, nearest_mode):
    resize(X, sc=SCALES[sc], opset=coord_opset(coord), mode="nearest",
           coordinate_transformation_mode=coord, nearest_mode=nearest_mode,
           oracle=coord_oracle(coord))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("sc", list(SCALES))
def test_resize_interpolating(sc, coord, mode):
    resize(X, sc=SCALES[sc], opset=coord_opset(coord), mode=mode,
           coordinate_transformation_mode=coord, oracle=coord_oracle(coord))


@pytest.mark.parametrize("coeff_a", [-0.75, -0.5])
@pytest.mark.parametrize("sc", list(SCALES))
def test_resize_cubic_exclude_outside(sc, coeff_a):
    resize(X, sc=SCALES[sc], mode="cubic", exclude_outside=1, cubic_coeff_a=coeff_a)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("opset", [11, 13, 19])
def test_resize_sizes(opset, mode):
    resize(X, sizes=np.array([2, 3, 9, 4], np.int64), opset=opset, mode=mode, const=(3,))


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("roi", [[0, 0, 0.2, 0.1, 1, 1, 0.9, 0.8],
                                 [0, 0, -0.2, 0.3, 1, 1, 1.2, 0.6]],
                         ids=["inside", "extrapolated"])
def test_resize_tf_crop_and_resize(roi, mode):
    resize(X, roi=np.array(roi, np.float32), sizes=np.array([2, 3, 9, 4], np.int64), mode=mode,
           coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-3.0,
           const=(1, 3))


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_axes_and_policy(policy, mode):
    resize(X, sizes=np.array([8, 9], np.int64), opset=18, axes=[2, 3], mode=mode,
           keep_aspect_ratio_policy=policy, const=(3,))
    resize(X, sc=scales(0.7, 2.2), opset=18, axes=[3, 2], mode=mode)


@pytest.mark.parametrize("exclude_outside", [0, 1])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("sc", [scales(1, 1, 2, 1.5), scales(1, 1, 0.6, 0.45),
                                scales(1, 1, 0.3, 0.25), scales(1, 1, 1.7, 3)],
                         ids=["up", "down", "down4", "mixed"])
def test_resize_antialias(sc, mode, exclude_outside):
    resize(rand(1, 2, 17, 19), sc=sc, opset=18, mode=mode, antialias=1,
           exclude_outside=exclude_outside)


def test_resize_antialias_align_corners():
    resize(rand(1, 2, 17, 19), sc=scales(1, 1, 0.3, 0.5), opset=19, mode="linear", antialias=1,
           coordinate_transformation_mode="align_corners", oracle=coord_oracle("align_corners"))


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("sc", [scales(1, 1, 2, 3), scales(1, 1, 0.6, 0.45)], ids=["up", "down"])
def test_resize_opset10(sc, mode):
    check("Resize", [X, sc], opset=10, mode=mode, oracle="ort", **TOL)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(mode):
    check("Upsample", [X, scales(1, 1, 2, 3)], opset=9, mode=mode, oracle="ort", **TOL)
    check("Upsample", [X], opset=7, mode=mode, scales=[1.0, 1.0, 2.0, 3.0], oracle="ort", **TOL)


@pytest.mark.parametrize("shape,sc,mode", [
    ((1, 2, 4, 5, 6), scales(1, 1, 1.5, 2, 0.5), "linear"),
    ((5, 6), scales(1.5, 0.7), "linear"),
    ((5, 6), scales(1.5, 0.7), "cubic"),
    ((2, 3, 4, 5, 3), scales(2, 0.5, 1.5, 2, 1), "nearest"),
    ((7,), scales(2.5), "nearest"),
])
def test_resize_ranks(shape, sc, mode):
    resize(rand(*shape), sc=sc, mode=mode)


@pytest.mark.parametrize("antialias", [0, 1])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("sc", [scales(1, 1, 1.5, 0.55), scales(1, 1, 0.5, 1.3)], ids=["a", "b"])
def test_resize_long_axis(sc, mode, antialias):
    # an axis longer than the dense-matrix limit: taps are gathered and weighted one by one
    resize(rand(1, 1, 6, 300), sc=sc, opset=18, mode=mode, antialias=antialias)


# The native resize of the last two axes (resize2d_f32) against the numpy taps of the same
# spec: nearest bit for bit, interpolation to float32 rounding; few planes of many rows split
# into bands of rows over the threads.
NATIVE_SPECS = {
    "nearest": spatial._ResizeSpec("nearest", "asymmetric", "floor"),
    "linear": spatial._ResizeSpec("linear", "half_pixel", "round_prefer_floor"),
    "align_corners": spatial._ResizeSpec("linear", "align_corners", "round_prefer_floor"),
    "cubic": spatial._ResizeSpec("cubic", "half_pixel", "round_prefer_floor",
                                 exclude_outside=True),
    "antialias": spatial._ResizeSpec("linear", "half_pixel", "round_prefer_floor",
                                     antialias=True),
}


@pytest.mark.skipif(not hasattr(NAT, "resize2d_f32"), reason="_mlas_native is not built")
@pytest.mark.parametrize("shape,sc", [
    ((1, 2, 40, 40), (1, 1, 8, 8)),      # a segmentation head's upsampling (bands of rows)
    ((2, 3, 17, 19), (1, 1, 0.45, 0.6)),
    ((3, 9, 7), (1, 1, 2.5)),            # one axis resized
    ((6, 5), (1.5, 0.7)),
], ids=str)
@pytest.mark.parametrize("spec", list(NATIVE_SPECS))
def test_native_resize_matches_the_numpy_taps(spec, shape, sc):
    x, sc = rand(*shape), scales(*sc)
    got = spatial._resize(x, NATIVE_SPECS[spec], None, sc, None, cache={})
    want = spatial._resize(x, NATIVE_SPECS[spec], None, sc, None)
    assert got.shape == want.shape
    if spec == "nearest":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not hasattr(NAT, "resize2d_f32"), reason="_mlas_native is not built")
def test_native_resize_threads_and_bad_taps():
    x = rand(1, 30, 20)
    iy = np.stack([np.arange(90) // 3, np.minimum(np.arange(90) // 3 + 1, 29)], 1)
    wy = RNG.random((90, 2)).astype(np.float32)
    ix, wx = np.arange(20)[:, None], np.ones((20, 1), np.float32)
    ys = []
    for threads in (1, 2, 3):
        y = np.full((1, 90, 20), np.nan, np.float32)
        NAT.resize2d_f32(x, y, iy, wy, ix, wx, threads)
        ys.append(y)
    np.testing.assert_array_equal(ys[0], ys[1])
    np.testing.assert_array_equal(ys[0], ys[2])
    np.testing.assert_allclose(ys[0][0], wy[:, :1] * x[0][iy[:, 0]] + wy[:, 1:] * x[0][iy[:, 1]],
                               rtol=1e-6)
    y = np.empty((1, 90, 20), np.float32)
    with pytest.raises(ValueError, match="row index 30 is outside the input's 30"):
        NAT.resize2d_f32(x, y, iy + 1, wy, ix, wx, 1)
    with pytest.raises(ValueError, match="column index -1"):
        NAT.resize2d_f32(x, y, iy, wy, ix - 1, wx, 1)
    with pytest.raises(TypeError, match="int64"):
        NAT.resize2d_f32(x, y, iy.astype(np.int32), wy, ix, wx, 1)
    with pytest.raises(ValueError, match="taps must be"):
        NAT.resize2d_f32(x, y, iy[:5], wy[:5], ix, wx, 1)


def test_resize_identity_and_dtypes():
    got = resize(X, sc=scales(1, 1, 1, 1), mode="linear")[0]
    assert not np.shares_memory(got, X)
    xu8 = RNG.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    resize(xu8, sc=scales(1, 1, 2, 1.3), mode="nearest")
    # float16 is interpolated in float32 (the reference in float64): one float16 ulp apart
    resize(rand(1, 2, 5, 5, dtype=np.float16), sc=scales(1, 1, 2, 1.3), mode="linear",
           oracle="ref", tol=dict(rtol=2e-3, atol=2e-3))


def test_resize_runtime_scales_and_sizes():
    resize(X, sc=SCALES["mixed"], mode="linear", const=())
    resize(X, sizes=np.array([2, 3, 4, 11], np.int64), mode="nearest", const=())


# --------------------------------------------------------------------------------------------
# Pad
# --------------------------------------------------------------------------------------------

PADS = {
    "grow": [0, 1, 2, 3, 1, 0, 1, 2],
    "crop": [0, 0, -1, 2, 0, 0, 1, -2],
    "outer": [1, 0, 0, 0, 0, 0, 0, 1],
    "zero": [0] * 8,
}


@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("pads", list(PADS))
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad(mode, pads, const):
    opset = 19 if mode == "wrap" else 13
    x = rand(2, 3, 4, 5)
    check("Pad", [x, np.array(PADS[pads], np.int64), np.array(1.5, np.float32)], opset=opset,
          mode=mode, const_inputs=[1, 2] if const else [], oracle="ort", **TOL)


@pytest.mark.parametrize("opset", [18, 19, 21, 23, 24, 25])
def test_pad_axes(opset):
    check("Pad", [rand(2, 3, 4, 5), np.array([1, 2, 3, 0], np.int64), np.array(-1, np.float32),
                  np.array([1, -1], np.int64)], opset=opset, mode="constant", **TOL)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_attribute_forms(mode):
    x = rand(2, 3, 4, 5)
    check("Pad", [x], opset=2, pads=[0, 1, 2, 3, 1, 0, 1, 2], mode=mode, value=2.0,
          oracle="ort", **TOL)
    got = ours("Pad", [x], opset=1, paddings=[0, 1, 0, 0, 0, 0, 0, 2], mode=mode)[0]
    want = ours("Pad", [x], opset=2, pads=[0, 1, 0, 0, 0, 0, 0, 2], mode=mode)[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("opset", [11, 13])
def test_pad_int_and_default_value(opset):
    xi = RNG.integers(0, 9, (3, 4)).astype(np.int64)
    check("Pad", [xi, np.array([1, 1, 1, 1], np.int64), np.array(7, np.int64)], opset=opset,
          oracle="ort")
    check("Pad", [rand(2, 3), np.array([1, 0, 2, 1], np.int64)], opset=opset, oracle="ort")


def test_pad_wrap_declined_before_19():
    from kernel_harness import node_model

    from onnxplex import load_model
    from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

    node = load_model(node_model("Pad", [rand(2, 3), np.array([1, 0, 2, 1], np.int64)],
                                 opset=18, mode="wrap")).node_views[0]
    config, reason = CpuMlasProvider.op_table.lookup(node)
    assert config is None and "wrap" in reason


def test_pad_crop_longer_than_the_axis():
    # A negative pad longer than the axis crops it away and the other side's pad refills it
    # with constant_value (onnx's test_constant_pad_negative_pads: [1, 2, 3], pads [-4, 2]
    # give [-1]); the other modes have nothing to repeat and refuse; a negative output length
    # is refused.
    x = rand(2, 3, 4)
    got = ours("Pad", [x, np.array([0, 0, -6, 0, 1, 3], np.int64), np.array(1.5, np.float32)],
               opset=25, mode="constant")[0]
    np.testing.assert_array_equal(got, np.full((2, 4, 1), 1.5, np.float32))
    got = ours("Pad", [np.array([1, 2, 3], np.int32), np.array([-4, 2], np.int64),
                       np.array(-1, np.int32)], opset=25, mode="constant")[0]
    np.testing.assert_array_equal(got, np.array([-1], np.int32))
    with pytest.raises(ValueError, match="cannot pad an axis cropped away"):
        ours("Pad", [x, np.array([0, 0, -6, 0, 0, 3], np.int64)], opset=25, mode="edge")
    with pytest.raises(ValueError, match="negative output shape"):
        ours("Pad", [x, np.array([0, 0, -6, 0, 0, 1], np.int64)], opset=25, mode="constant")
