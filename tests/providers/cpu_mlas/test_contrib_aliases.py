"""com.microsoft ops that are ONNX ops under another name or signature, GatherBlockQuantized
and CropAndResize, against onnxruntime's contrib kernels (none of them ran before: a model
carrying one could not load)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from kernel_harness import node_model, run_kernel

from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

MS = "com.microsoft"
ort.set_default_logger_severity(3)
RNG = np.random.default_rng(11)


def _check(op_type, inputs, n_outputs=1, *, rtol=1e-5, atol=1e-6, **kw):
    m = node_model(op_type, inputs, n_outputs, domain=MS, opset=17, **kw)
    for o in m.graph.output:
        o.ClearField("type")
    consts = kw.get("const_inputs", ())
    feeds = {f"in{i}": a for i, a in enumerate(inputs) if a is not None and i not in consts}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]
                                ).run(None, feeds)
    got = run_kernel(CpuMlasProvider, op_type, inputs, n_outputs, domain=MS, opset=17, **kw)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert (g.shape, g.dtype) == (w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("q_dt", [np.int8, np.uint8, np.int16, np.uint16])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_dequantize(q_dt, per_axis):
    """onnxruntime's quantizer writes these for 16-bit QDQ (UseQDQContribOps)."""
    x = _f(3, 4) * 300
    s = np.array([0.5, 2.0, 1.0], np.float32) if per_axis else np.array(1.5, np.float32)
    z = np.array([1, 2, 3] if per_axis else 5, q_dt)
    _check("QuantizeLinear", [x, s, z], const_inputs=(1, 2), axis=0)
    q = RNG.integers(0, 100, (3, 4)).astype(q_dt)
    _check("DequantizeLinear", [q, s, z], const_inputs=(1, 2), axis=0)


@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_transpose_matmul(trans):
    a, b = _f(2, 5, 4), _f(2, 4, 5)
    if trans[0]:
        a = np.ascontiguousarray(a.transpose(0, 2, 1))
    if trans[1]:
        b = np.ascontiguousarray(b.transpose(0, 2, 1))
    _check("TransposeMatMul", [a, b], transA=trans[0], transB=trans[1], alpha=0.5)


@pytest.mark.parametrize("delta", [None, 3])
def test_range(delta):
    args = [np.array(2, np.int32), np.array(17, np.int32)]
    if delta is not None:
        args.append(np.array(delta, np.int32))
    _check("Range", args)


@pytest.mark.parametrize("upper", [0, 1])
def test_trilu(upper):
    _check("Trilu", [_f(2, 4, 5), np.array(1, np.int64)], upper=upper)


def test_gather_nd():
    _check("GatherND", [_f(3, 4, 5), np.array([[0, 1], [2, 3]], np.int64)])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(mode):
    _check("Pad", [_f(1, 2, 4, 5), np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64),
                   np.array([0.5], np.float32)], mode=mode)


def test_unique_in_order_of_first_occurrence():
    _check("Unique", [np.array([4, 2, 4, 7, 2, 2, 9], np.float32)], 3)


@pytest.mark.parametrize("axis", [0, 2, -1])
def test_expand_dims(axis):
    _check("ExpandDims", [_f(3, 4), np.array(axis, np.int32)])


def test_inverse():
    x = _f(3, 4, 4) + 4 * np.eye(4, dtype=np.float32)
    _check("Inverse", [x], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode, padding", [("bilinear", "border"), ("nearest", "border"),
                                           ("bicubic", "zeros"), ("bicubic", "reflection")])
def test_grid_sample(mode, padding):
    _check("GridSample", [_f(1, 2, 5, 6), np.clip(_f(1, 3, 4, 2), -1.1, 1.1)], mode=mode,
           padding_mode=padding, align_corners=1, rtol=1e-4, atol=1e-5)


def test_grid_sample_bicubic_border_is_declined_with_a_reason():
    """onnxruntime's bicubic samples with border padding outside the grid differ from the
    ONNX op's (both its domains; cpu_mlas's ONNX GridSample follows the ONNX reference):
    the contrib op is declined rather than answered differently."""
    from onnxplex import load_model

    m = node_model("GridSample", [_f(1, 1, 3, 3), _f(1, 2, 2, 2)], 1, domain=MS, opset=17,
                   mode="bicubic", padding_mode="border")
    config, reason = CpuMlasProvider.op_table.lookup(load_model(m).node_views[0])
    assert config is None and "border" in reason


@pytest.mark.parametrize("bits, zero_points, scale_dt", [
    (4, False, np.float32), (4, True, np.float32), (8, False, np.float32),
    (8, True, np.float32), (4, False, np.float16)])
def test_gather_block_quantized(bits, zero_points, scale_dt):
    """onnxruntime-genai's int4 LLMs store the embedding table block-quantized and read it with
    com.microsoft GatherBlockQuantized (no provider ran it)."""
    vocab, dim, block = 7, 64, 32
    data = RNG.integers(0, 256, (vocab, dim * bits // 8)).astype(np.uint8)
    scales = (RNG.random((vocab, dim // block)) + 0.1).astype(scale_dt)
    inputs = [data, np.array([[1, 6], [0, -2]], np.int64), scales]
    if zero_points:
        inputs.append(RNG.integers(0, 256, (vocab, dim // block * bits // 8)).astype(np.uint8))
    _check("GatherBlockQuantized", inputs, const_inputs=(0, 2, 3), bits=bits,
           block_size=block, gather_axis=0, quantize_axis=1, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("q_dt", ["int4", "uint4"])
@pytest.mark.parametrize("shape, gather_axis, quantize_axis", [
    ((6, 32), 0, 1), ((6, 32), 1, 0), ((32, 6), 0, 0), ((3, 32, 4), 1, 1),
    ((3, 4, 48), -1, 1), ((5, 16, 3), 0, -1)])
@pytest.mark.parametrize("zero_points", [False, True])
def test_gather_block_quantized_int4_data(q_dt, shape, gather_axis, quantize_axis,
                                          zero_points):
    """int4 and uint4 data (onnxruntime's quantizer writes them for a Gather quantized to
    4 bits; only packed uint8 ran), gathered along any axis of a table quantized along any
    axis, the same one included; zero point 0 when none is given."""
    import ml_dtypes

    dt = getattr(ml_dtypes, q_dt)
    low, high = (-8, 8) if q_dt == "int4" else (0, 16)
    block = 16
    data = RNG.integers(low, high, shape).astype(dt)
    q_shape = list(shape)
    q_shape[quantize_axis] = -(-shape[quantize_axis] // block)
    scales = (RNG.random(q_shape) + 0.1).astype(np.float32)
    size = shape[gather_axis]
    inputs = [data, np.array([[1, size - 1], [0, -2]], np.int32), scales]
    if zero_points:
        inputs.append(RNG.integers(low, high, q_shape).astype(dt))
    _check("GatherBlockQuantized", inputs, const_inputs=(0, 2, 3), block_size=block,
           gather_axis=gather_axis, quantize_axis=quantize_axis)


@pytest.mark.parametrize("pads, attrs, bias", [
    ([1, 0, 0, 2], {"strides": [2, 2]}, True), ([0, 0, 0, 0], {"strides": [2, 1],
                                                             "output_padding": [1, 0]}, False),
    ([1, 1, 1, 1], {"group": 2, "dilations": [2, 1]}, True)])
def test_conv_transpose_with_dynamic_pads(pads, attrs, bias):
    """ConvTranspose with its pads as an input (no provider ran it)."""
    w = _f(4, 2 if attrs.get("group") else 3, 3, 3)
    inputs = [_f(2, 4, 5, 6), w, np.array(pads, np.int64),
              _f(w.shape[1] * attrs.get("group", 1)) if bias else None]
    _check("ConvTransposeWithDynamicPads", inputs, rtol=1e-4, atol=1e-4, **attrs)


def test_contrib_qdq_types_what_follows():
    """A 16-bit QDQ of a float16 model, as onnxruntime's quantizer writes it with
    UseQDQContribOps: the com.microsoft DequantizeLinear gives float16 (its scale's type),
    which onnx's inference does not know: the MatMul after it was typed float and its float16
    result refused (onnxplex's contrib-op inference types both now)."""
    from onnx import TensorProto, helper, numpy_helper

    import onnxplex

    f16 = np.float16
    inits = [numpy_helper.from_array(np.array(0.01, f16), "s"),
             numpy_helper.from_array(np.array(3, np.int16), "z"),
             numpy_helper.from_array(_f(4, 3).astype(f16), "w")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], domain=MS),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], domain=MS),
             helper.make_node("MatMul", ["d", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT16, [2, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT16, [2, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)])
    x = _f(2, 4).astype(f16)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]
                                ).run(None, {"x": x})[0]
    got = onnxplex.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert got.dtype == want.dtype == f16
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("crop", [(4, 5), (1, 1), (3, 2)])
def test_crop_and_resize(mode, crop):
    """TensorFlow's crop_and_resize as tf2onnx writes it (com.microsoft CropAndResize): boxes
    inside, across and outside the image (the extrapolation value), a degenerate box."""
    x = _f(2, 3, 7, 9)
    rois = np.array([[0.1, 0.2, 0.8, 0.9], [0.0, 0.0, 1.0, 1.0], [-0.2, 0.3, 1.2, 0.6],
                     [0.5, 0.5, 0.5, 0.5]], np.float32)
    _check("CropAndResize", [x, rois, np.array([0, 1, 0, 1], np.int32),
                             np.array(crop, np.int32)], mode=mode, extrapolation_value=-1.0,
           rtol=1e-5, atol=1e-5)
