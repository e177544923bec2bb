"""cpu_mlas intra-op threading (providers/cpu_mlas/_blas.py) and the chunked Conv paths it
drives: every Conv strategy split into many chunks over two threads must match onnxruntime,
with the FusedConv epilogue (bias, Z, activation) applied per chunk."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest

from onnxplex.providers.cpu_mlas import _blas, nn

from ._oracle import check, oracle_run
from .test_nn import CONV_CASES

ort.set_default_logger_severity(3)

RNG = np.random.default_rng(99)
MS = "com.microsoft"


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture
def many_chunks(monkeypatch):
    """Two pool threads and chunks as small as the split allows."""
    size = _blas.intra_threads()
    _blas.configure_threads(2)
    monkeypatch.setattr(_blas, "_MIN_CHUNK_MACS", 1)
    monkeypatch.setattr(_blas, "_CHUNKS_PER_THREAD", 3)
    yield
    _blas.configure_threads(size)


def test_parallel_for_runs_every_chunk_once_and_reraises(many_chunks):
    seen = []
    lock = threading.Lock()

    def record(i):
        with lock:
            seen.append(i)

    _blas.parallel_for(50, record)
    assert sorted(seen) == list(range(50))

    def fail(i):
        if i == 3:
            raise ValueError("chunk 3")

    with pytest.raises(ValueError, match="chunk 3"):
        _blas.parallel_for(8, fail)


def test_split_covers_the_range_aligned(many_chunks):
    ranges = _blas.split(100, 1e9, align=16)
    assert ranges[0][0] == 0 and ranges[-1][1] == 100
    assert all(b % 16 == 0 and b < e for b, e in ranges)
    assert all(e == b2 for (_, e), (b2, _) in zip(ranges, ranges[1:]))


def test_matmul_split_both_orientations(many_chunks):
    for m, n in ((70, 9), (9, 70)):
        a, b = rand(3, m, 11), rand(3, 11, n)
        np.testing.assert_allclose(_blas.matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv_chunked(case, many_chunks, monkeypatch):
    monkeypatch.setattr(nn, "_SPATIAL_SPLIT_MIN", 2)
    xs, ws, attrs = CONV_CASES[case]
    fan_in = int(np.prod(ws[1:]))
    check("Conv", [rand(*xs), rand(*ws), rand(ws[0])], opset=17, const_inputs=[1, 2],
          oracle="ort", **attrs, rtol=1e-4, atol=1e-5 * max(1.0, (fan_in / 9) ** 0.5))


# (x, w, attrs): one per Conv strategy, big enough to split.
_FUSED = {
    "pointwise": ((1, 16, 9, 10), (40, 16, 1, 1), {}),
    "depthwise": ((1, 24, 11, 9), (24, 1, 3, 3), dict(group=24, pads=[1, 1, 1, 1])),
    "depthwise_s2": ((1, 24, 12, 12), (24, 1, 3, 3),
                     dict(group=24, pads=[1, 1, 1, 1], strides=[2, 2])),
    "shifted": ((1, 32, 18, 17), (32, 32, 3, 3), dict(pads=[1, 1, 1, 1])),
    "shifted_grouped_1d": ((1, 96, 40), (96, 32, 9), dict(pads=[4, 4], group=3)),
    "im2col_rows": ((1, 8, 20, 12), (24, 8, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 1])),
    "im2col_channels": ((1, 8, 6, 5), (40, 8, 3, 3), dict(pads=[1, 1, 1, 1])),
}


@pytest.mark.parametrize("split_min", [2, 1 << 20], ids=["rows", "channels"])
@pytest.mark.parametrize("act", ["Relu", "Sigmoid", ""])
@pytest.mark.parametrize("with_z", [True, False], ids=["z", "no_z"])
@pytest.mark.parametrize("case", list(_FUSED))
def test_fused_conv_chunked(case, with_z, act, split_min, many_chunks, monkeypatch):
    monkeypatch.setattr(nn, "_SPATIAL_SPLIT_MIN", split_min)
    xs, ws, attrs = _FUSED[case]
    rank = len(xs) - 2
    stride, pads = attrs.get("strides", [1] * rank), attrs.get("pads", [0] * 2 * rank)
    out = (xs[0], ws[0]) + tuple((n + pads[i] + pads[i + rank] - k) // s + 1
                                 for i, (n, k, s) in enumerate(zip(xs[2:], ws[2:], stride)))
    inputs = [rand(*xs), rand(*ws), rand(ws[0])] + ([rand(*out)] if with_z else [])
    if act:
        attrs = {**attrs, "activation": act}
    check("FusedConv", inputs, domain=MS, opset=17, oracle="ort", rtol=1e-4, atol=2e-5,
          const_inputs=(1, 2), **attrs)


@pytest.mark.parametrize("banded_max", [0, 64], ids=["taps", "banded"])
@pytest.mark.parametrize("case", [c for c in CONV_CASES if c.startswith("depthwise")])
def test_depthwise_strategies(case, banded_max, many_chunks, monkeypatch):
    monkeypatch.setattr(nn, "_BANDED_MAX_WIDTH", banded_max)
    xs, ws, attrs = CONV_CASES[case]
    check("Conv", [rand(*xs), rand(*ws), rand(ws[0])], opset=17, const_inputs=[1, 2],
          oracle="ort", **attrs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs", [
    dict(pads=[3, 0, 3, 2]),                       # no kernel row covers every output row
    dict(pads=[0, 2, 1, 0], strides=[3, 2], dilations=[2, 3]),
    dict(auto_pad="SAME_LOWER", strides=[2, 2]),
    dict(pads=[1, 1, 1, 1], kernel_shape=[1, 3]),
], ids=["tall_pads", "stride_dil", "same_lower", "one_row"])
def test_depthwise_banded_geometry(attrs, many_chunks):
    kshape = attrs.get("kernel_shape", [3, 3])
    check("Conv", [rand(2, 6, 5, 9), rand(6, 1, *kshape), rand(6)], opset=17, group=6,
          const_inputs=[1, 2], oracle="ort", **attrs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("transposed_b", [True, False])
def test_matmul_wide_is_computed_transposed(threads, transposed_b, monkeypatch):
    size = _blas.intra_threads()
    _blas.configure_threads(threads)
    monkeypatch.setattr(_blas, "_MIN_CHUNK_MACS", 1)
    try:
        a, w = rand(5, 12), rand(40, 12)
        b = w.T if transposed_b else np.ascontiguousarray(w.T)
        got = _blas.matmul(a, b)
        assert got.flags.c_contiguous
        np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
        out = np.empty((5, 40), np.float32)
        assert _blas.matmul(a, b, out=out) is out
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    finally:
        _blas.configure_threads(size)


_DW_NATIVE = {
    "s1_pad": ((2, 6, 9, 11), dict(pads=[1, 1, 1, 1])),
    "s2_asym": ((1, 6, 12, 13), dict(pads=[0, 1, 2, 1], strides=[2, 2])),
    "dil_stride": ((1, 6, 14, 10), dict(pads=[2, 2, 2, 2], dilations=[2, 3], strides=[1, 2])),
    "wide_rows": ((1, 4, 5, 70), dict(pads=[1, 1, 1, 1])),  # rows past the flat variant
    "wide_s2": ((1, 4, 9, 140), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
}


@pytest.mark.skipif(nn.native() is None or not hasattr(nn.native(), "dwconv_f32"),
                    reason="_mlas_native with dwconv_f32 not built")
@pytest.mark.parametrize("act,with_z", [
    (None, False), (("Relu", None), False), (("Clip", [-0.3, 0.4]), False),
    (("Sigmoid", None), False), (("Relu", None), True), (("Sigmoid", None), True)],
    ids=["conv", "relu", "clip", "sigmoid", "relu_z", "sigmoid_z"])
@pytest.mark.parametrize("case", list(_DW_NATIVE))
def test_depthwise_native(case, act, with_z, many_chunks):
    xs, attrs = _DW_NATIVE[case]
    c = xs[1]
    inputs = [rand(*xs), rand(c, 1, 3, 3), rand(c)]
    if act is None:
        check("Conv", inputs, opset=17, group=c, const_inputs=[1, 2], oracle="ort", **attrs,
              rtol=1e-4, atol=1e-5)
        return
    kind, params = act
    fused = {"activation": kind, **({"activation_params": params} if params else {})}
    if with_z:
        want = oracle_run("Conv", inputs, opset=17, group=c, const_inputs=[1, 2],
                          oracle="ort", **attrs)[0]
        inputs.append(rand(*want.shape))
    check("FusedConv", inputs, domain=MS, opset=17, group=c, const_inputs=(1, 2),
          oracle="ort", **attrs, **fused, rtol=1e-4, atol=1e-5)


def test_depthwise_numpy_paths_without_native(many_chunks, monkeypatch):
    monkeypatch.setattr(nn, "native", lambda: None)
    for xs, attrs in _DW_NATIVE.values():
        c = xs[1]
        check("Conv", [rand(*xs), rand(c, 1, 3, 3), rand(c)], opset=17, group=c,
              const_inputs=[1, 2], oracle="ort", **attrs, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(nn.native() is None or not hasattr(nn.native(), "bias_act_f32"),
                    reason="_mlas_native with bias_act_f32 not built")
def test_native_epilogue_on_strided_chunks():
    y = rand(2, 5, 30)
    bias, z = rand(5), rand(2, 5, 30)
    ep = nn._Epilogue(bias, z, lambda v: np.clip(v, -0.2, 0.3, out=v), (-0.2, 0.3))
    want = np.clip(y + bias[:, None] + z, -0.2, 0.3)
    ep(y[:, 1:4, 7:19], slice(1, 4), slice(7, 19))
    np.testing.assert_allclose(y[:, 1:4, 7:19], want[:, 1:4, 7:19], rtol=1e-6)
    nan = np.full((1, 1, 3), np.nan, np.float32)
    nn._Epilogue(None, None, lambda v: v, (0.0, 1.0))(nan)
    assert np.isnan(nan).all()


@pytest.mark.parametrize("c, h, stride, k", [(576, 14, 1, 3), (144, 56, 2, 3), (96, 112, 1, 3),
                                              (960, 7, 1, 3), (37, 70, 1, 5), (33, 9, 2, 3)])
def test_native_depthwise_splits_channels_exactly(c, h, stride, k):
    """dwconv_f32 over 1, 2 and 3 native threads gives the same bits (channel ranges), and
    matches a float64 direct convolution, for rows that hit every block size and tail."""
    from onnxplex.providers.cpu_mlas._native import native

    nat = native()
    if nat is None:
        pytest.skip("the native cpu_mlas module is not built")
    pad = k // 2
    ho = (h + 2 * pad - k) // stride + 1
    x, w, b = rand(c, h, h), rand(c, k, k), rand(c)
    outs = []
    for threads in (1, 2, 3):
        y = np.empty((c, ho, ho), np.float32)
        nat.dwconv_f32(x, w, b, y, (stride, stride), (1, 1), (pad, pad), -1.0, 1.5, threads)
        outs.append(y)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad)))
    ref = np.zeros((c, ho, ho)) + b[:, None, None]
    for i in range(k):
        for j in range(k):
            taps = xp[:, i:i + stride * ho:stride, j:j + stride * ho:stride]
            ref += w[:, i, j, None, None] * taps
    np.testing.assert_allclose(outs[0], np.clip(ref, -1.0, 1.5), rtol=1e-5, atol=1e-5)


# Small output planes with many channels: the native conv runs transposed (out^T = col^T W^T,
# Cout along the GEMM's column panels), with every epilogue and geometry.
_TRANSPOSED = {
    "pointwise": ((2, 48, 7, 7), (64, 48, 1, 1), {}),
    "pad3x3": ((1, 20, 7, 7), (96, 20, 3, 3), dict(pads=[1, 1, 1, 1])),
    "s2_asym": ((1, 12, 15, 13), (64, 12, 3, 3), dict(pads=[0, 1, 2, 1], strides=[2, 2])),
    "dilated_rect": ((1, 9, 11, 9), (32, 9, 3, 2), dict(pads=[2, 1, 2, 0], dilations=[2, 3])),
    "odd_cout": ((1, 33, 5, 7), (47, 33, 1, 3), dict(pads=[0, 1, 0, 1])),  # partial panels
    "strided_1x1": ((1, 40, 14, 14), (64, 40, 1, 1), dict(strides=[2, 2])),
}


@pytest.mark.skipif(nn.native() is None or not hasattr(nn.native(), "conv2d_f32"),
                    reason="_mlas_native with conv2d_f32 not built")
@pytest.mark.parametrize("act", ["Relu", "Sigmoid", ""])
@pytest.mark.parametrize("with_z", [True, False], ids=["z", "no_z"])
@pytest.mark.parametrize("case", list(_TRANSPOSED))
def test_conv_transposed_orientation(case, with_z, act, many_chunks):
    xs, ws, attrs = _TRANSPOSED[case]
    want = oracle_run("Conv", [rand(*xs), rand(*ws)], opset=17, const_inputs=[1],
                      oracle="ort", **attrs)[0]
    assert nn._transposed_conv(ws[0], int(np.prod(want.shape[2:]))), "not the transposed path"
    inputs = [rand(*xs), rand(*ws), rand(ws[0])] + ([rand(*want.shape)] if with_z else [])
    if act:
        attrs = {**attrs, "activation": act}
    check("FusedConv", inputs, domain=MS, opset=17, oracle="ort", rtol=1e-4, atol=3e-5,
          const_inputs=(1, 2), **attrs)


def test_transposed_orientation_choice():
    assert nn._transposed_conv(512, 49)          # 49 of 64 columns; 512 fill all
    assert nn._transposed_conv(64, 81)           # 81 of 96
    assert not nn._transposed_conv(64, 196)      # 196 of 224, but past the size limit
    assert not nn._transposed_conv(64, 3136)     # 98 full panels
    assert not nn._transposed_conv(24, 49)       # 24 of 32 is worse than 49 of 64
    assert not nn._transposed_conv(512, 4900)    # past the size limit


@pytest.mark.skipif(nn.native() is None or not hasattr(nn.native(), "conv2d_f32"),
                    reason="_mlas_native with conv2d_f32 not built")
def test_conv_orientations_agree():
    """The same conv in both orientations: the same sums in the same order up to the GEMM's
    k blocking, so close to float32 rounding; and W^T packing is what selects the path."""
    x, w, b = rand(1, 300, 7, 7), rand(128, 300, 3, 3), rand(128)
    cw = nn._ConvWeights(w, 1)
    outs = []
    for gw in (cw.gemm_weight, cw.gemm_weight_t):
        outs.append(nn._conv_native(x, gw, (3, 3), (1, 1), (1, 1), (1, 1), (7, 7), b, None,
                                    None, None))
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-4, atol=1e-4)
    assert not np.array_equal(outs[0], np.zeros_like(outs[0]))


@pytest.mark.parametrize("xs, ws, attrs", [
    ((1, 3, 37, 75), (16, 3, 7, 7), dict(pads=[3, 3, 3, 3], strides=[2, 2])),   # a stem
    ((1, 5, 20, 71), (8, 5, 3, 3), dict(pads=[0, 1, 1, 0], strides=[2, 2])),    # odd width
    ((1, 6, 9, 64), (12, 6, 1, 1), dict(strides=[2, 2])),                       # 1x1 s2
    ((1, 4, 11, 90), (8, 4, 3, 3), dict(pads=[1, 2, 1, 2], strides=[1, 2], dilations=[1, 2])),
], ids=["stem", "odd", "pointwise", "dilated"])
def test_conv_stride2_rows_are_gathered_exactly(xs, ws, attrs, many_chunks):
    """Stride-2 im2col packing gathers whole vectors of even columns while a source block
    fits in the row, then the rest one by one: rows wide enough for both, every pad side."""
    check("Conv", [rand(*xs), rand(*ws), rand(ws[0])], opset=17, const_inputs=[1, 2],
          oracle="ort", **attrs, rtol=1e-4, atol=3e-5)
