"""Float32 3-D and 1-D convs on the native 2-D conv against onnxruntime.

3-D (a video model's Conv3d): one call per output depth (``nn._conv3d_native``), over depth
geometries (taps in the depth padding, uneven depth pads, strides, dilations, a depth shorter
than the kernel, one output depth: the depths shared out over two threads or not). 1-D (speech
front ends): the 2-D conv of a one-row image. Both GEMM orientations, with a bias, a fused
residual Add and Relu, a non-clamp activation and batch 2; the native path is asserted to run,
so a change that stops it taking these convs fails here, not only in a benchmark."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex.providers.cpu_mlas import nn
from onnxplex.providers.cpu_mlas._native import native

ort.set_default_logger_severity(3)
pytestmark = pytest.mark.skipif(native() is None, reason="the _mlas_native module is not built")
RNG = np.random.default_rng(33)
F = TensorProto.FLOAT

# (C, M, D, H, W, kernel, strides, pads (begins, ends), dilations)
GEOMETRIES = [
    (8, 16, 6, 9, 10, (3, 3, 3), (1, 1, 1), (1, 1, 1, 1, 1, 1), (1, 1, 1)),   # r3d's 3x3x3
    (8, 16, 6, 9, 10, (3, 1, 1), (1, 1, 1), (1, 0, 0, 1, 0, 0), (1, 1, 1)),   # R(2+1)D's temporal
    (8, 16, 7, 11, 11, (3, 3, 3), (2, 2, 2), (1, 1, 1, 1, 1, 1), (1, 1, 1)),  # downsampling
    (8, 16, 6, 9, 10, (3, 3, 3), (1, 1, 1), (2, 1, 1, 2, 1, 1), (2, 1, 1)),   # depth dilation
    (8, 16, 2, 9, 10, (3, 3, 3), (1, 1, 1), (2, 1, 1, 0, 1, 1), (1, 1, 1)),   # uneven, D < k
    (8, 16, 5, 9, 10, (1, 1, 1), (2, 2, 2), (0, 0, 0, 0, 0, 0), (1, 1, 1)),   # 1x1x1 shortcut
    (32, 64, 4, 7, 7, (3, 3, 3), (1, 1, 1), (1, 1, 1, 1, 1, 1), (1, 1, 1)),   # W^T orientation
    (8, 16, 3, 9, 10, (3, 3, 3), (1, 1, 1), (0, 1, 1, 0, 1, 1), (1, 1, 1)),   # one output depth
]


def _model(w, b, strides, pads, dils, *, residual=False, act=None) -> bytes:
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=list(strides),
                              pads=list(pads), dilations=list(dils))]
    out = "c"
    if residual:
        nodes.append(helper.make_node("Add", [out, "z"], ["s"]))
        out = "s"
    nodes.append(helper.make_node(act or "Identity", [out], ["y"]))
    inputs = [helper.make_tensor_value_info("x", F, None)]
    if residual:
        inputs.append(helper.make_tensor_value_info("z", F, None))
    graph = helper.make_graph(nodes, "conv3d", inputs,
                              [helper.make_tensor_value_info("y", F, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _count_calls(monkeypatch, name: str) -> list[int]:
    """A counter of the calls of ``nn.<name>`` (the path under test), through the test."""
    count = [0]
    real = getattr(nn, name)

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(nn, name, counted)
    return count


FORMS = ["plain", "residual_relu", "sigmoid_batch2"]


def _check(monkeypatch, path: str, w: np.ndarray, strides, pads, dils, spatial, form: str):
    """The conv (+ Z, + activation per ``form``) against onnxruntime, two threads, the
    native ``path`` taken once."""
    m, c = w.shape[:2]
    calls = _count_calls(monkeypatch, path)
    b = RNG.standard_normal(m).astype(np.float32)
    model = _model(w, b, strides, pads, dils, residual=form == "residual_relu",
                   act={"residual_relu": "Relu", "sigmoid_batch2": "Sigmoid"}.get(form))
    x = RNG.standard_normal((2 if form == "sigmoid_batch2" else 1, c, *spatial)).astype(
        np.float32)
    feeds = {"x": x}
    ref_sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    if form == "residual_relu":
        shape = ref_sess.run(None, {"x": x, "z": np.zeros(1, np.float32)})[0].shape
        feeds["z"] = RNG.standard_normal(shape).astype(np.float32)
    ref = ref_sess.run(None, feeds)[0]
    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = 2
    got = onnxplex.InferenceSession(model, so).run(None, feeds)[0]
    assert calls[0] == 1
    assert got.shape == ref.shape
    # float32 sums of fan_in unit-normal products: rounding grows as eps * fan_in (a sum's
    # size is sqrt(fan_in), its rounding eps * sqrt(fan_in) each step); the activations'
    # slopes are at most 1
    fan_in = c * int(np.prod(w.shape[2:]))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=4 * 2.0 ** -24 * fan_in)


@pytest.mark.parametrize("geo", GEOMETRIES, ids=str)
@pytest.mark.parametrize("form", FORMS)
def test_conv3d_matches_onnxruntime(geo, form, monkeypatch):
    c, m, d, h, wd, k, strides, pads, dils = geo
    w = RNG.standard_normal((m, c, *k)).astype(np.float32)
    _check(monkeypatch, "_conv3d_native", w, strides, pads, dils, (d, h, wd), form)


# 1-D convs (speech front ends) as the 2-D conv of a one-row image: (C, M, L, k, stride, pads,
# dilation)
GEOMETRIES_1D = [
    (1, 32, 400, 10, 5, (0, 0), 1),       # wav2vec2's first conv, from the waveform
    (32, 32, 79, 3, 2, (0, 0), 1),        # ... and the next ones
    (16, 24, 50, 3, 1, (1, 1), 1),        # Whisper's
    (8, 16, 40, 5, 1, (3, 1), 2),         # uneven pads, dilation
    (64, 96, 9, 3, 1, (1, 1), 1),         # W^T orientation (few positions, many channels)
]


@pytest.mark.parametrize("geo", GEOMETRIES_1D, ids=str)
@pytest.mark.parametrize("form", FORMS)
def test_conv1d_matches_onnxruntime(geo, form, monkeypatch):
    c, m, length, k, stride, pads, dil = geo
    w = RNG.standard_normal((m, c, k)).astype(np.float32)
    _check(monkeypatch, "_conv_native", w, (stride,), pads, (dil,), (length,), form)
