"""cpu_mlas vision kernels against onnxruntime (or onnx's reference): GridSample, AffineGrid,
Col2Im, DeformConv, RoiAlign, NonMaxSuppression, LpPool, MaxUnpool; batch > 1, channels > 1."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from ._oracle import check

ort.set_default_logger_severity(3)

RNG = np.random.default_rng(3)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d_batch(mode, padding, align):
    x = rand(2, 3, 5, 6)
    grid = (RNG.random((2, 4, 7, 2)) * 2.6 - 1.3).astype(np.float32)
    # ORT clamps every axis once any axis is out of bounds (border mode); the ONNX reference
    # clamps per axis, which only differs for cubic taps: compare those with the reference.
    oracle = "ref" if (mode, padding) == ("cubic", "border") else "ort"
    check("GridSample", [x, grid], opset=20, oracle=oracle, rtol=1e-4, atol=1e-4, mode=mode,
          padding_mode=padding, align_corners=align)


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_batch(align):
    theta = rand(3, 2, 3)
    check("AffineGrid", [theta, np.array([3, 2, 5, 7], np.int64)], opset=20, oracle="ort",
          rtol=1e-5, atol=1e-5, align_corners=align)


def test_col2im_channels_strides_pads():
    x = rand(2, 3 * 2 * 3, 12)
    check("Col2Im", [x, np.array([5, 7], np.int64), np.array([2, 3], np.int64)], opset=18,
          oracle="ort", rtol=1e-5, atol=1e-5, strides=[2, 2], pads=[1, 1, 1, 1],
          dilations=[1, 1])


def test_deform_conv_groups_mask():
    x, w = rand(2, 4, 6, 6), rand(6, 2, 3, 3)
    offset = rand(2, 2 * 2 * 9, 3, 3)
    mask = RNG.random((2, 2 * 9, 3, 3)).astype(np.float32)
    check("DeformConv", [x, w, offset, rand(6), mask], opset=19, oracle="ref", rtol=1e-4,
          atol=1e-4, group=2, offset_group=2, pads=[1, 1, 1, 1], strides=[2, 2])


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
def test_roi_align_batch(mode, ctm):
    x = rand(2, 3, 12, 10)
    rois = np.array([[0, 0, 9, 9], [1.5, 2.2, 7.1, 11], [3, 3, 3.5, 4], [-2, -1, 12, 14]],
                    np.float32)
    idx = np.array([0, 1, 1, 0], np.int64)
    check("RoiAlign", [x, rois, idx], opset=16, oracle="ort", rtol=1e-4, atol=1e-4, mode=mode,
          coordinate_transformation_mode=ctm, output_height=3, output_width=4,
          spatial_scale=0.8)


@pytest.mark.parametrize("center", [0, 1])
def test_nms_batches_classes_threshold(center):
    boxes = RNG.random((2, 30, 4)).astype(np.float32) * 10
    scores = RNG.random((2, 3, 30)).astype(np.float32)
    args = [boxes, scores, np.array([5], np.int64), np.array([0.3], np.float32),
            np.array([0.2], np.float32)]
    check("NonMaxSuppression", args, opset=11, oracle="ort", center_point_box=center)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool_ceil_dilations(p):
    check("LpPool", [rand(2, 3, 9, 8)], opset=18, oracle="ort", rtol=1e-4, atol=1e-4, p=p,
          kernel_shape=[3, 2], strides=[2, 2], dilations=[1, 2], ceil_mode=1,
          pads=[1, 0, 1, 0])


def test_max_unpool_roundtrip():
    x = rand(2, 3, 4, 4)
    import onnxruntime as rt  # noqa: F401

    from ._oracle import ours

    y, idx = ours("MaxPool", [x], 2, opset=12, kernel_shape=[2, 2], strides=[2, 2])
    check("MaxUnpool", [y, idx], opset=11, oracle="ort", kernel_shape=[2, 2], strides=[2, 2])


@pytest.mark.parametrize("shape", [(5, 5), (5, 4), (4, 4)])
def test_max_unpool_output_shape(shape):
    # The indices address the output_shape tensor (MaxPool's input), as onnxruntime reads
    # them: a 5x5 (or 5x4) input pooled 2x2 unpools to its own shape, not to a padded 4x4.
    x = rand(2, 3, *shape)
    from ._oracle import ours

    y, idx = ours("MaxPool", [x], 2, opset=12, kernel_shape=[2, 2], strides=[2, 2])
    out = check("MaxUnpool", [y, idx, np.array(x.shape, np.int64)], opset=11, oracle="ort",
                kernel_shape=[2, 2], strides=[2, 2])
    assert out[0].shape == x.shape


def test_max_unpool_bad_indices_are_errors():
    from ._oracle import ours

    x = rand(1, 1, 2, 2)
    with pytest.raises(ValueError, match=r"indices must be in \[0, 16\)"):
        ours("MaxUnpool", [x, np.array([[[[0, 1], [2, 16]]]], np.int64)], opset=11,
             kernel_shape=[2, 2], strides=[2, 2])


@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 4, 5)], ids=str)
@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(shape, p):
    check("GlobalLpPool", [rand(*shape)], opset=2, p=p, oracle="ort", rtol=1e-5, atol=1e-6)


def test_global_lp_pool_float16_and_opset_1():
    x = rand(2, 3, 4, 4)
    from ._oracle import ours

    got = ours("GlobalLpPool", [x.astype(np.float16)], opset=22, p=3)[0]
    want = (np.abs(x.astype(np.float64)) ** 3).sum(axis=(2, 3), keepdims=True) ** (1 / 3)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3)
    got = ours("GlobalLpPool", [x], opset=1, p=2.0)[0]
    np.testing.assert_allclose(got, np.sqrt((x.astype(np.float64) ** 2).sum(axis=(2, 3),
                                                                             keepdims=True)),
                               rtol=1e-5)


# --------------------------------------------------------------------------------------------
# ImageDecoder (Pillow, the 'image' extra)
# --------------------------------------------------------------------------------------------


def _image_decoder_session(pixel_format="RGB"):
    from onnx import TensorProto, helper

    import onnxplex

    node = helper.make_node("ImageDecoder", ["encoded"], ["image"], pixel_format=pixel_format)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("encoded", TensorProto.UINT8, ["n"])],
        [helper.make_tensor_value_info("image", TensorProto.UINT8, ["h", "w", "c"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    return onnxplex.InferenceSession(model.SerializeToString(), providers=[
        ("cpu_mlas", {"reference_fallback": False})])


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF", "PPM", "WEBP"])
def test_image_decoder_lossless_formats(fmt):
    pil = pytest.importorskip("PIL.Image")
    import io

    rgb = RNG.integers(0, 256, (7, 5, 3), dtype=np.uint8)
    buf = io.BytesIO()
    pil.fromarray(rgb).save(buf, format=fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    encoded = np.frombuffer(buf.getvalue(), np.uint8)
    (got,) = _image_decoder_session("RGB").run(None, {"encoded": encoded})
    np.testing.assert_array_equal(got, rgb)
    (got,) = _image_decoder_session("BGR").run(None, {"encoded": encoded})
    np.testing.assert_array_equal(got, rgb[:, :, ::-1])
    (got,) = _image_decoder_session("Grayscale").run(None, {"encoded": encoded})
    assert got.shape == (7, 5, 1) and got.dtype == np.uint8
    np.testing.assert_array_equal(got[:, :, 0], np.asarray(pil.fromarray(rgb).convert("L")))


def test_image_decoder_grey_and_rgba_sources_decode_to_three_channels():
    pil = pytest.importorskip("PIL.Image")
    import io

    grey = RNG.integers(0, 256, (4, 6), dtype=np.uint8)
    rgba = RNG.integers(0, 256, (4, 6, 4), dtype=np.uint8)
    for source, want in ((grey, np.repeat(grey[:, :, None], 3, axis=2)), (rgba, rgba[:, :, :3])):
        buf = io.BytesIO()
        pil.fromarray(source).save(buf, format="PNG")
        (got,) = _image_decoder_session("RGB").run(
            None, {"encoded": np.frombuffer(buf.getvalue(), np.uint8)})
        np.testing.assert_array_equal(got, want)


def test_image_decoder_bad_bytes_are_an_onnxplex_error():
    pytest.importorskip("PIL.Image")
    import onnxplex

    with pytest.raises(onnxplex.KernelExecutionError, match="not an image Pillow can decode"):
        _image_decoder_session().run(None, {"encoded": np.arange(40, dtype=np.uint8)})


def test_image_decoder_without_pillow_names_the_extra(monkeypatch):
    import sys

    import onnxplex

    monkeypatch.setitem(sys.modules, "PIL", None)   # as if Pillow were not installed
    with pytest.raises(onnxplex.PartitionError, match=r"pip install 'onnxplex\[image\]'"):
        _image_decoder_session()


@pytest.mark.parametrize("scale", [1.0, 0.5, 0.25])
def test_max_roi_pool_rounds_corners_as_onnxruntime(scale):
    """Corners scaled onto half pixels round away from zero, as C's round (numpy's round to
    even moved them a pixel: Caffe-era detectors, Fast R-CNN); a ROI past the edges, one
    inverted (made 1 x 1) and one of zero size in the second image."""
    x = rand(2, 3, 9, 11)
    rois = np.array([[0, 1, 1, 6, 8], [1, 3, 5, 21, 17], [0, -3, -1, 4, 3], [1, 7, 6, 2, 1],
                     [1, 5, 5, 5, 5]], np.float32)
    check("MaxRoiPool", [x, rois], opset=9, oracle="ort", pooled_shape=[2, 3],
          spatial_scale=scale)


def test_max_roi_pool_refuses_a_batch_outside_the_input():
    from ._oracle import ours

    with pytest.raises(Exception, match="names batch 2, outside"):
        ours("MaxRoiPool", [rand(2, 1, 4, 4), np.array([[2, 0, 0, 1, 1]], np.float32)],
             opset=9, pooled_shape=[1, 1])
