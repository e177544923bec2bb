"""com.microsoft UnfoldTensor, DynamicTimeWarping, NGramRepeatBlock and MatMulInteger16
against onnxruntime (no provider ran them), and CDist's minkowski metrics against scipy."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from kernel_harness import node_model, run_kernel

from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

MS = "com.microsoft"
RNG = np.random.default_rng(8)


def _check(op_type, inputs, **attrs):
    m = node_model(op_type, inputs, 1, domain=MS, opset=17, **attrs)
    for o in m.graph.output:
        o.ClearField("type")
    feeds = {f"in{i}": a for i, a in enumerate(inputs)}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]
                                ).run(None, feeds)[0]
    got = run_kernel(CpuMlasProvider, op_type, inputs, 1, domain=MS, opset=17, **attrs)[0]
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape, dim, size, step", [
    ((2, 10, 3), 1, 4, 2), ((2, 10, 3), -1, 2, 1), ((7,), 0, 3, 3), ((2, 9, 4), 0, 2, 1),
    ((3, 8), -1, 8, 5)])
def test_unfold_tensor(shape, dim, size, step):
    _check("UnfoldTensor", [RNG.standard_normal(shape).astype(np.float32)], dim=dim,
           size=size, step=step)


@pytest.mark.parametrize("shape", [(5, 7), (1, 6, 3), (1, 1), (4, 9)])
@pytest.mark.parametrize("ties", [False, True])
def test_dynamic_time_warping(shape, ties):
    """Whisper's word timestamps: random costs, and small integer costs full of ties (where
    the path depends on the order predecessors are compared in)."""
    x = RNG.integers(0, 3, shape) if ties else RNG.random(shape)
    _check("DynamicTimeWarping", [x.astype(np.float32)])


@pytest.mark.parametrize("n", [1, 2, 3, 6, 7])
def test_ngram_repeat_block(n):
    ids = np.array([[1, 2, 3, 1, 2, 4, 1, 2], [5, 5, 5, 5, 5, 5, 0, 5]], np.int64)
    scores = RNG.standard_normal((2, 9)).astype(np.float32)
    _check("NGramRepeatBlock", [ids, scores], ngram_size=n)


def test_matmul_integer16():
    a = RNG.integers(-32768, 32768, (2, 3, 40)).astype(np.int16)
    b = RNG.integers(-32768, 32768, (40, 5)).astype(np.int16)
    _check("MatMulInteger16", [a, b])


@pytest.mark.parametrize("metric, p", [("minkowski", 3.0), ("minkowski", 1.5), ("cityblock", None),
                                       ("manhattan", None), ("minkowski", None)])
def test_cdist_minkowski_metrics(metric, p):
    """skl2onnx writes CDist(metric='minkowski', p=3) for a k-NN or LOF model with p != 2
    (onnxruntime's CDist refuses the attribute; its own test of that LOF returns early):
    checked against scipy's distances."""
    from scipy.spatial.distance import cdist

    a, b = RNG.standard_normal((5, 4)).astype(np.float32), RNG.standard_normal((7, 4))
    b = b.astype(np.float32)
    attrs = {"metric": metric} | ({} if p is None else {"p": p})
    got = run_kernel(CpuMlasProvider, "CDist", [a, b], 1, domain=MS, opset=17, **attrs)[0]
    want = cdist(a.astype(np.float64), b.astype(np.float64), "minkowski",
                 p=1.0 if metric != "minkowski" else (p or 2.0))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("case", range(40))
def test_bifurcation_detector(case):
    """Aggressive decoding's helper on random short token streams over a small vocabulary
    (repeats, so n-grams recur or not), with and without predicted tokens, against
    onnxruntime: both outputs."""
    rng = np.random.default_rng(case)
    src = rng.integers(0, 4, int(rng.integers(3, 14))).astype(np.int64)
    cur = rng.integers(0, 4, int(rng.integers(1, 8))).astype(np.int64)
    start = int(rng.integers(0, len(src) + 1))
    prev = np.array([start], np.int64)
    pred = src[start:].copy()
    pred = np.concatenate([pred, rng.integers(0, 4, 1)]).astype(np.int64)
    if case % 3 == 1 and len(pred) > 1:
        pred[int(rng.integers(0, len(pred) - 1))] += 7   # (departs from the source)
    inputs = [src, cur, prev] + ([pred] if case % 4 else [])
    lo = int(rng.integers(1, 3))
    m = node_model("BifurcationDetector", inputs, 2, domain=MS, opset=17, min_ngram_size=lo,
                   max_ngram_size=lo + int(rng.integers(0, 3)))
    for o in m.graph.output:
        o.ClearField("type")
    feeds = {f"in{i}": a for i, a in enumerate(inputs)}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]
                                ).run(None, feeds)
    got = run_kernel(CpuMlasProvider, "BifurcationDetector", inputs, 2, domain=MS, opset=17,
                     min_ngram_size=lo,
                     max_ngram_size=next(a.i for a in m.graph.node[0].attribute
                                         if a.name == "max_ngram_size"))
    for g, w in zip(got, want, strict=True):
        assert (g.shape, g.dtype) == (w.shape, w.dtype)
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_word_conv_embedding(k):
    """Words of several lengths (shorter than the window too, and one whose first id is 0,
    which counts as empty: onnxruntime leaves its row unwritten, so it is not compared)."""
    seq = np.array([[3, 5, 1, 0, 0, 0], [7, 0, 0, 0, 0, 0], [2, 2, 9, 4, 6, 1],
                    [0, 4, 4, 0, 0, 0], [8, 3, 0, 0, 0, 0]], np.int32)
    w_conv = RNG.standard_normal((6, 1, k, 4)).astype(np.float32)
    b_conv = RNG.standard_normal(6).astype(np.float32)
    w_char = RNG.standard_normal((10, 4)).astype(np.float32)
    inputs = [seq, w_conv, b_conv, w_char]
    m = node_model("WordConvEmbedding", inputs, 1, domain=MS, opset=17)
    for o in m.graph.output:
        o.ClearField("type")
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {f"in{i}": a for i, a in enumerate(inputs)})[0]
    got = run_kernel(CpuMlasProvider, "WordConvEmbedding", inputs, 1, domain=MS, opset=17)[0]
    assert got.shape == want.shape == (5, 6)
    rows = [0, 1, 2, 4]
    np.testing.assert_allclose(got[rows], want[rows], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[3], 0)


@pytest.mark.parametrize("spatial, kernel, strides, pads", [
    ((9,), (3,), (2,), (1, 1)), ((6, 7), (3, 2), (1, 2), (1, 0, 1, 1)),
    ((5, 6), (2, 2), (2, 2), (0, 0, 0, 0)), ((4, 5, 3), (2, 3, 2), (1, 2, 1), None)])
@pytest.mark.parametrize("mask_planes", [1, 6])
def test_maxpool_with_mask(spatial, kernel, strides, pads, mask_planes):
    """Masks with zeros here and there, one plane shared or one per (n, c) (the offset
    onnxruntime reads a plane's mask from: c * plane_size % (M0 * M1))."""
    x = RNG.standard_normal((2, 3, *spatial)).astype(np.float32)
    m_shape = (1, 1, *spatial) if mask_planes == 1 else (2, 3, *spatial)
    mask = (RNG.random(m_shape) > 0.25).astype(np.int32)
    attrs = dict(kernel_shape=list(kernel), strides=list(strides))
    if pads is not None:
        attrs["pads"] = list(pads)
    got, want = _maxpool_with_mask(x, mask, attrs)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _maxpool_with_mask(x, mask, attrs):
    """(onnxplex's, onnxruntime's) MaxpoolWithMask of ``x`` and ``mask``."""
    m = node_model("MaxpoolWithMask", [x, mask], 1, domain=MS, opset=17, **attrs)
    for o in m.graph.output:
        o.ClearField("type")
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"in0": x, "in1": mask})[0]
    return run_kernel(CpuMlasProvider, "MaxpoolWithMask", [x, mask], 1, domain=MS, opset=17,
                      **attrs)[0], want


def test_maxpool_with_mask_reads_each_plane_s_mask_at_onnxruntime_s_offset():
    """Planes of 9 against a mask of 2 x 3 planes: plane c reads from c * 9 % 6 (0 or 3), so
    a zero at flat position 2 masks the odd planes' windows not at all, the even ones' at 2."""
    x = RNG.standard_normal((2, 3, 9)).astype(np.float32)
    mask = np.ones((2, 3, 9), np.int32)
    mask.reshape(-1)[2] = 0
    got, want = _maxpool_with_mask(x, mask, dict(kernel_shape=[3], strides=[1]))
    np.testing.assert_array_equal(got, want)
    plain = np.lib.stride_tricks.sliding_window_view(x.reshape(6, 9), 3, axis=1).max(axis=2)
    flat = want.reshape(6, -1)
    assert not np.array_equal(flat[0], plain[0])          # (an even plane: masked at 2)
    np.testing.assert_array_equal(flat[1], plain[1])      # (an odd plane: unmasked)
