"""Channels-last convolution in cpu_mlas: the com.microsoft NhwcFusedConv kernel against
onnxruntime's FusedConv on the same data in NCHW (every 2-D geometry of test_nn's cases, Z,
the activations, one and two threads, with and without the native kernels), and the native
entry points (conv2d_nhwc_f32, dwconv_nhwc_f32, transpose_f32) against numpy."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex.providers.cpu_mlas._native import native
from onnxplex.providers.cpu_mlas.shape import _rotation

from .test_native_sgemm import ISAS as SGEMM_ISAS
from .test_nn import CONV_CASES

ort.set_default_logger_severity(3)

RNG = np.random.default_rng(5)
MS = "com.microsoft"
F = TensorProto.FLOAT
CASES_2D = {k: v for k, v in CONV_CASES.items() if len(v[0]) == 4}
ACTIVATIONS = {"none": {}, "Relu": dict(activation="Relu"),
               "Clip": dict(activation="Clip", activation_params=[-0.5, 0.7]),
               "LeakyRelu": dict(activation="LeakyRelu", activation_params=[0.2]),
               "Sigmoid": dict(activation="Sigmoid")}


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def fused_conv_model(op_type, x_shape, w, b, z_shape, attrs):
    inputs = [helper.make_tensor_value_info("x", F, x_shape)]
    names = ["x", "w", "b" if b is not None else ""]
    if z_shape is not None:
        inputs.append(helper.make_tensor_value_info("z", F, z_shape))
        names.append("z")
    inits = [numpy_helper.from_array(w, "w")]
    if b is not None:
        inits.append(numpy_helper.from_array(b, "b"))
    node = helper.make_node(op_type, names, ["y"], domain=MS, **attrs)
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", F, None)],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid(MS, 1)], ir_version=10)


def nchw_reference(xs, w, b, attrs, x, z):
    """onnxruntime's FusedConv, NCHW, Z of the output's shape."""
    m = fused_conv_model("FusedConv", list(xs), w, b, None if z is None else list(z.shape),
                         attrs)
    feeds = {"x": x} if z is None else {"x": x, "z": z}
    return ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _nhwc_session(case, act, threads, with_z=False):
    """An NhwcFusedConv of a test_nn geometry, activation ``act``, with a Z input or none, in
    a session, and onnxruntime's FusedConv of it in NCHW: (session, NHWC feeds, NHWC
    reference)."""
    xs, ws, attrs = CASES_2D[case]
    attrs = {**attrs, **ACTIVATIONS[act]}
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    y0 = nchw_reference(xs, w, b, attrs, x, None)
    z = rand(*y0.shape) if with_z else None
    want = nchw_reference(xs, w, b, attrs, x, z).transpose(0, 2, 3, 1)
    to_nhwc = (0, 2, 3, 1)
    m = fused_conv_model("NhwcFusedConv", [None, *xs[2:], xs[1]], w, b,
                         None if z is None else [None, *y0.shape[2:], y0.shape[1]], attrs)
    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = threads
    sess = onnxplex.InferenceSession(m.SerializeToString(), so, providers=["cpu_mlas"])
    feeds = {"x": np.ascontiguousarray(x.transpose(to_nhwc))}
    if z is not None:
        feeds["z"] = np.ascontiguousarray(z.transpose(to_nhwc))
    return sess, feeds, want


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("act", list(ACTIVATIONS))
@pytest.mark.parametrize("case", list(CASES_2D))
def test_nhwc_fused_conv_matches_onnxruntime_fused_conv(case, act, threads):
    # Z (when its case has none) from the output's shape
    sess, feeds, want = _nhwc_session(case, act, threads,
                                      with_z=case not in ("no_attrs", "valid"))
    (got,) = sess.run(None, feeds)
    fan_in = math.prod(CASES_2D[case][1][1:])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, (fan_in / 9) ** 0.5))
    # A second run: a conv whose first call planned a native call that computes its whole
    # output runs it from the executor without Python (a PlannedStep): the same bytes
    (again,) = sess.run(None, feeds)
    np.testing.assert_array_equal(again, got)
    (kernel,) = [st.kernel for st in sess._exec.steps]
    if type(kernel).__name__ == "PlannedStep":   # (with Z too, when Z is added natively)
        assert kernel.calls == (0 if kernel.plan is None else 1)


@pytest.mark.parametrize("case", ["3x3_pad", "depthwise_s2_dil", "1x1_stride", "groups"])
def test_nhwc_fused_conv_without_native_kernels(case, numpy_kernels):
    """ONNXPLEX_MLAS_NATIVE=0: the NCHW numpy paths between two transposes."""
    test_nhwc_fused_conv_matches_onnxruntime_fused_conv(case, "Relu", 1)


@pytest.mark.skipif(native() is None, reason="cpu_mlas native extension not built")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case, act, with_z, planned", [
    ("3x3_pad", "Relu", False, True), ("asym_pad_stride_dil", "Clip", False, True),
    ("same_upper_s2", "none", False, True), ("1x1_stride", "Relu", False, True),
    ("depthwise_s2_dil", "Clip", False, True), ("depthwise", "none", False, True),
    ("3x3_pad", "Relu", True, True), ("1x1", "none", True, True),   # Z in the GEMM's epilogue
    ("depthwise", "Relu", True, False),   # (Z added in Python after the depthwise kernel)
    ("no_attrs", "Sigmoid", False, False),   # (the sigmoid runs in Python after the conv)
    ("groups", "Relu", False, False),   # (3 outputs a group: the NCHW kernel, transposed)
])
def test_planned_conv_steps_run_without_python(case, act, with_z, planned, threads):
    """A channels-last conv with constant W and B is a PlannedStep: its first call plans the
    native conv (through the Python kernel) and hands it over when the plan computes the whole
    output (a clamp fused or none, a Z added in its epilogue), and later calls of that shape
    run it without Python, to the same bytes; any other keeps every call in the Python
    kernel."""
    sess, feeds, want = _nhwc_session(case, act, threads, with_z)
    (step,) = [st.kernel for st in sess._exec.steps]
    assert isinstance(step, native().PlannedStep) and step.plan is None
    (got,) = sess.run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    for _ in range(2):
        (again,) = sess.run(None, feeds)
        np.testing.assert_array_equal(again, got)
    if planned:
        assert step.plan is not None and step.calls == 2
    else:
        assert step.plan is None and step.calls == 0


@pytest.mark.skipif(native() is None, reason="cpu_mlas native extension not built")
def test_planned_step_falls_back_for_what_its_plan_does_not_take():
    """Calls the installed plan does not fit go to the Python kernel: another input shape,
    another dtype, a strided view, a keyword, an argument past B that is not None; and every
    call once the plan is taken away. install refuses what is not a plan."""
    nat = native()
    sess, feeds, _ = _nhwc_session("3x3_pad", "Relu", 1)
    sess.run(None, feeds)
    (st,) = sess._exec.steps
    plan = st.kernel.plan
    assert plan is not None
    w, b = (sess.model.graph.initializers[n].const_value.numpy() for n in ("w", "b"))
    seen = []

    def spy(*args, **kwargs):
        seen.append(args[0].shape)
        return st.kernel.fallback(*args, **kwargs)

    step = nat.planned_step(spy, type("Pool", (), {"size": 2})())
    x1 = feeds["x"]
    x2 = rand(3, *x1.shape[1:])
    want1, want2 = st.kernel.fallback(x1, w, b), st.kernel.fallback(x2, w, b)
    step.install(plan)
    np.testing.assert_array_equal(step(x1, w, b), want1)
    np.testing.assert_array_equal(step(x1, w, b, None, None), want1)
    assert step.calls == 2 and seen == []
    np.testing.assert_array_equal(step(x2, w, b), want2)
    np.testing.assert_allclose(step(x1.astype(np.float64), w, b), want1, rtol=1e-5, atol=1e-5)
    strided = np.empty((*x1.shape[:-1], 2 * x1.shape[-1]), np.float32)[..., ::2]
    strided[...] = x1
    np.testing.assert_array_equal(step(strided, w, b), want1)
    np.testing.assert_array_equal(step(x1, w, b=b), want1)
    z = rand(*want1.shape)
    np.testing.assert_array_equal(step(x1, w, b, z), st.kernel.fallback(x1, w, b, z))
    assert step.calls == 2 and len(seen) == 5
    step.install(None)
    np.testing.assert_array_equal(step(x1, w, b), want1)
    assert step.calls == 2 and len(seen) == 6
    with pytest.raises(TypeError, match="NhwcConvPlan"):
        step.install(object())
    with pytest.raises(TypeError, match="callable"):
        nat.planned_step(1, type("Pool", (), {"size": 1})())


# ---- native entry points ---------------------------------------------------------------------

nat = native()
needs_native = pytest.mark.skipif(nat is None or not hasattr(nat, "conv2d_nhwc_f32"),
                                  reason="cpu_mlas native extension not built")


def conv_ref(x, w, b, strides, dil, pads, group=1):
    """float64 NCHW conv; pads (top, left, bottom, right)."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    y = np.zeros((n, m, oh, ow))
    mg = m // group
    for g in range(group):
        xs, wg = xp[:, g * cg:(g + 1) * cg], w[g * mg:(g + 1) * mg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dil[0]: i * dil[0] + strides[0] * (oh - 1) + 1: strides[0],
                           j * dil[1]: j * dil[1] + strides[1] * (ow - 1) + 1: strides[1]]
                y[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, wg[:, :, i, j])
    return y + b[None, :, None, None]


# (C in, C out, H, W, kernel, stride, dilation, pads t/l/b/r)
GEOMETRIES = [
    (3, 32, 15, 16, 3, 2, 1, (1, 1, 1, 1)),     # a stem: few channels, runs of 9 floats
    (16, 24, 9, 9, 1, 1, 1, (0, 0, 0, 0)),      # pointwise: x itself is the GEMM's A
    (16, 24, 9, 10, 1, 2, 1, (0, 0, 0, 0)),     # strided 1x1: through col
    (8, 40, 11, 11, 3, 1, 1, (1, 1, 1, 1)),
    (8, 40, 11, 12, 3, 1, 2, (2, 1, 2, 3)),     # dilation, asymmetric pads
    (5, 7, 6, 6, 5, 1, 1, (2, 2, 1, 0)),
    (64, 64, 30, 30, 3, 1, 1, (1, 1, 1, 1)),    # several bands
    (3, 16, 30, 29, 7, 2, 1, (3, 3, 3, 3)),     # a ResNet-like stem
    (13, 17, 8, 8, 3, 2, 3, (1, 1, 1, 1)),
    (96, 144, 7, 7, 3, 1, 1, (1, 1, 1, 1)),     # a small plane: col rows asked for per k block
    # K past one k block (256), its boundary inside a kernel row and a tap's channels
    (40, 24, 9, 9, 3, 1, 1, (1, 1, 1, 1)),
    (30, 20, 10, 11, 3, 2, 2, (2, 1, 2, 3)),    # ... with stride, dilation, uneven pads
    # col rows read in place from x where positions run along a row inside the input
    (32, 24, 40, 40, 3, 2, 1, (1, 1, 1, 1)),
    (40, 16, 30, 30, 1, 2, 1, (0, 0, 0, 0)),    # a strided 1x1 (ResNet's downsampling)
    (160, 24, 9, 30, 3, 1, 1, (1, 1, 1, 1)),    # kernel rows of 480 in two k blocks
    (3, 8, 200, 200, 3, 1, 1, (1, 1, 1, 1)),    # a stem plane large enough for bands
    # short kernel rows computed directly (AVX-512): whole tiles of 12 positions inside the
    # input, two column vectors and one; a 7x7 stem; dilation (taps not one run)
    (3, 48, 40, 60, 3, 2, 1, (1, 1, 1, 1)),
    (3, 64, 40, 70, 7, 2, 1, (3, 3, 3, 3)),
    (4, 20, 30, 40, 3, 1, 2, (2, 2, 2, 2)),
    # ... no left padding, a row's last tile partial, two panels; a CIFAR-sized stem (every
    # row's first and last tiles from the row's padded copy)
    (3, 40, 17, 23, 3, 2, 1, (0, 0, 1, 1)),
    (3, 16, 32, 32, 3, 1, 1, (1, 1, 1, 1)),
    (3, 40, 16, 20, 4, 4, 1, (0, 0, 0, 0)),     # a 4x4 patchify stem (ConvNeXt's, Swin's)
    # a row's last tile of 4 positions (8 above: 30, 32, 20 positions a row), one vector
    (3, 16, 20, 28, 3, 1, 1, (1, 1, 1, 1)),
]


@needs_native
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("geo", GEOMETRIES, ids=str)
def test_native_conv2d_nhwc(geo, threads):
    c, m, h, wd, k, s, d, pads = geo
    for n in (1, 2):
        x, w, b = rand(n, c, h, wd), rand(m, c, k, k), rand(m)
        ref = conv_ref(x, w, b, (s, s), (d, d), pads)
        z = rand(n, ref.shape[2], ref.shape[3], m)
        wt = nat.sgemm_pack_b(np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(-1, m)))
        y = np.full((n, ref.shape[2], ref.shape[3], m), np.nan, np.float32)  # all written
        nat.conv2d_nhwc_f32(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), wt, y, (k, k),
                            (s, s), (d, d), pads[:2], bias=b, lo=-1.0, hi=2.0,
                            threads=threads, z=z)
        np.testing.assert_allclose(y, np.clip(ref.transpose(0, 2, 3, 1) + z, -1, 2),
                                   rtol=1e-4, atol=1e-4)


# Blocks of several kernel rows read in place (each tile adds them all up in its registers):
# (C in, C out, H, W, kernel, stride, (dh, dw), pads t/l/b/r)
MULTI_ROW = [
    (64, 40, 9, 30, 3, 1, (1, 1), (1, 1, 1, 1)),    # K = 576: one block of 3 kernel rows
    (48, 20, 12, 33, 5, 1, (1, 1), (2, 2, 2, 2)),   # 5 rows of 240: blocks of 4 and 1
    (32, 33, 14, 40, 3, 2, (1, 1), (1, 1, 1, 1)),   # stride 2: positions 2C apart
    (32, 16, 16, 30, 3, 1, (2, 1), (2, 1, 2, 1)),   # rows 2 input rows apart
    (40, 16, 10, 30, 3, 1, (1, 2), (1, 2, 1, 2)),   # dilated taps: one row a block
    (384, 16, 6, 30, 3, 1, (1, 1), (1, 1, 1, 1)),   # rows of 1152: one a block
]


@needs_native
@pytest.mark.parametrize("isa", SGEMM_ISAS)
@pytest.mark.parametrize("geo", MULTI_ROW, ids=str)
def test_native_conv2d_nhwc_kernel_rows_in_one_block(geo, isa):
    c, m, h, wd, k, s, dil, pads = geo
    x, w, b = rand(2, c, h, wd), rand(m, c, k, k), rand(m)
    ref = conv_ref(x, w, b, (s, s), dil, pads)
    wt = nat.sgemm_pack_b(np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(-1, m)))
    y = np.full((2, ref.shape[2], ref.shape[3], m), np.nan, np.float32)
    nat.conv2d_nhwc_f32(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), wt, y, (k, k), (s, s),
                        dil, pads[:2], bias=b, threads=2, isa=isa)
    # (sums of up to 3456 products: float32's rounding grows with K)
    np.testing.assert_allclose(y, ref.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-3)


# Dilated convs beside small images: k blocks whose taps all lie in the padding for a panel
# of positions are skipped (DeepLab's ASPP), the panel's C then started by a later block, or
# by the epilogue alone when every block is skipped. (C in, C out, H, W, dilation, pads)
PADDING_BLOCKS = [
    (16, 8, 9, 11, (12, 12), (12, 12, 12, 12)),   # the middle tap alone is ever inside
    (32, 24, 10, 10, (6, 6), (6, 6, 6, 6)),       # outer taps inside for some positions
    (400, 16, 8, 8, (10, 10), (10, 10, 10, 10)),  # rows of 1200 in two blocks of 600
    (24, 40, 3, 30, (4, 1), (4, 1, 4, 1)),        # only the middle kernel row inside
    (8, 16, 12, 12, (5, 5), (0, 0, 10, 10)),      # the first kernel row always inside
]


@needs_native
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("isa", SGEMM_ISAS)
@pytest.mark.parametrize("geo", PADDING_BLOCKS, ids=str)
def test_native_conv2d_nhwc_blocks_in_the_padding(geo, isa, threads):
    c, m, h, wd, dil, pads = geo
    x, w, b = rand(2, c, h, wd), rand(m, c, 3, 3), rand(m)
    ref = conv_ref(x, w, b, (1, 1), dil, pads)
    z = rand(2, ref.shape[2], ref.shape[3], m)
    wt = nat.sgemm_pack_b(np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(-1, m)))
    y = np.full((2, ref.shape[2], ref.shape[3], m), np.nan, np.float32)
    nat.conv2d_nhwc_f32(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), wt, y, (3, 3), (1, 1),
                        dil, pads[:2], bias=b, lo=-1.0, hi=3.0, threads=threads, isa=isa, z=z)
    np.testing.assert_allclose(y, np.clip(ref.transpose(0, 2, 3, 1) + z, -1, 3), rtol=1e-4,
                               atol=1e-3)


@needs_native
@pytest.mark.parametrize("threads", [1, 2, 5])
@pytest.mark.parametrize("geo", GEOMETRIES, ids=str)
def test_native_dwconv_nhwc(geo, threads):
    _, c, h, wd, k, s, d, pads = geo   # channel counts with and without a partial block
    for n in (1, 2):
        x, w, b = rand(n, c, h, wd), rand(c, 1, k, k), rand(c)
        ref = conv_ref(x, w, b, (s, s), (d, d), pads, group=c)
        y = np.full((n, ref.shape[2], ref.shape[3], c), np.nan, np.float32)
        nat.dwconv_nhwc_f32(np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
                            np.ascontiguousarray(w[:, 0]), b, y, (s, s), (d, d), pads[:2],
                            -1.0, 2.0, threads)
        np.testing.assert_allclose(y, np.clip(ref.transpose(0, 2, 3, 1), -1, 2), rtol=1e-5,
                                   atol=1e-5)


@needs_native
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c,h,k,s,d,p", [(64, 112, 3, 1, 1, 1), (96, 57, 3, 2, 1, 1),
                                         (32, 90, 3, 1, 2, 2), (48, 70, 5, 1, 1, 2),
                                         (64, 80, 3, 2, 1, 0), (40, 100, 3, 1, 1, 1)])
def test_native_dwconv_nhwc_large_planes(c, h, k, s, d, p, threads):
    """Planes larger than a band: inner bands read their inner columns in place (when every
    channel block is full), the edges through the buffer."""
    x, w, b = rand(1, c, h, h + 3), rand(c, 1, k, k), rand(c)
    ref = conv_ref(x, w, b, (s, s), (d, d), (p, p, p, p), group=c)
    y = np.full((1, ref.shape[2], ref.shape[3], c), np.nan, np.float32)
    nat.dwconv_nhwc_f32(np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
                        np.ascontiguousarray(w[:, 0]), b, y, (s, s), (d, d), (p, p), -1.0, 2.0,
                        threads)
    np.testing.assert_allclose(y, np.clip(ref.transpose(0, 2, 3, 1), -1, 2), rtol=1e-5,
                               atol=1e-5)


@needs_native
@pytest.mark.parametrize("threads", [1, 2, 5])
@pytest.mark.parametrize("c,h,wd,k,d,pads", [(48, 7, 7, 5, 1, (2, 2, 2, 2)),
                                             (40, 14, 13, 5, 1, (2, 1, 2, 3)),
                                             (64, 9, 11, 7, 1, (3, 3, 3, 3)),
                                             (32, 10, 10, 5, 2, (4, 4, 4, 4)),
                                             (24, 6, 5, 5, 1, (0, 2, 1, 2))])
def test_native_dwconv_nhwc_small_planes(c, h, wd, k, d, pads, threads):
    """Small planes under large kernels (most positions at an edge) go through a zero-padded
    copy of each channel block: whole blocks and a tail, dilation, uneven pads, a plan."""
    x, w, b = rand(2, c, h, wd), rand(c, 1, k, k), rand(c)
    ref = np.clip(conv_ref(x, w, b, (1, 1), (d, d), pads, group=c).transpose(0, 2, 3, 1), -1, 2)
    xs, w3 = np.ascontiguousarray(x.transpose(0, 2, 3, 1)), np.ascontiguousarray(w[:, 0])
    y = np.full(ref.shape, np.nan, np.float32)
    nat.dwconv_nhwc_f32(xs, w3, b, y, (1, 1), (d, d), pads[:2], -1.0, 2.0, threads)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    plan = nat.dwconv_nhwc_f32_plan(xs, w3, b, y, (1, 1), (d, d), pads[:2], -1.0, 2.0)
    np.testing.assert_allclose(plan(xs, threads=threads), ref, rtol=1e-5, atol=1e-5)


@needs_native
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 16, 17, 40])
def test_native_transpose(rows):
    x = rand(3, rows, 70)
    x[0, 0, 0] = np.nan
    y = np.empty((2, 70, rows), np.float32)
    nat.transpose_f32(x[::2], y)   # a strided batch
    np.testing.assert_array_equal(y, x[::2].transpose(0, 2, 1))


def test_transpose_rotations():
    """(kept leading axes, rotation of the rest)"""
    assert _rotation((0, 2, 3, 1)) == (1, 1) and _rotation((0, 3, 1, 2)) == (1, 2)
    assert _rotation((0, 2, 1, 3)) is None       # (the last axis kept: not a 2-D transpose)
    assert _rotation((0, 1, 2, 4, 3)) == (3, 1)  # a channel shuffle, channels-last
    assert _rotation((1, 2, 3, 0)) == (0, 1)
    assert _rotation((0, 1, 2, 3)) is None and _rotation((3, 2, 1, 0)) is None
    assert _rotation((0, 3, 2, 1)) is None


@pytest.mark.parametrize("perm", [(0, 2, 3, 1), (0, 3, 1, 2), (0, 2, 1, 3), (3, 2, 1, 0),
                                  (1, 2, 3, 0), (0, 1, 3, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_transpose_kernel(perm, dtype):
    """Each run of a float32 rotation after the first (which plans its input shape) is the
    native plan called without Python (a PlannedStep); other shapes, dtypes, views and perms
    go through the Python kernel: the same values every time."""
    x = (RNG.standard_normal((2, 3, 40, 41)) * 10).astype(dtype)
    node = helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", t, [None, *x.shape[1:]])], [helper.make_tensor_value_info("y", t, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    sess = onnxplex.InferenceSession(m.SerializeToString())
    for _ in range(3):
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, x.transpose(perm))
    (step,) = [st.kernel for st in sess._exec.steps]
    if type(step).__name__ != "PlannedStep":
        return
    rotation = dtype == np.float32 and _rotation(perm) is not None
    assert step.calls == (2 if rotation else 0)
    x2 = x[:1].copy()
    np.testing.assert_array_equal(sess.run(None, {"x": x2})[0], x2.transpose(perm))
    view = x[:, :, ::2]
    np.testing.assert_array_equal(step(view), view.transpose(perm))
    assert step.calls == (2 if rotation else 0)


def test_channel_shuffle_transpose_kernel():
    """A channels-last channel shuffle's swap of its last two axes (rank 5), natively."""
    x = RNG.standard_normal((2, 7, 6, 2, 58)).astype(np.float32)
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[0, 1, 2, 4, 3])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, x.shape)],
                          [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    (y,) = onnxplex.InferenceSession(m.SerializeToString()).run(None, {"x": x})
    assert y.flags.c_contiguous
    np.testing.assert_array_equal(y, x.transpose(0, 1, 2, 4, 3))


# ---- NhwcMaxPool --------------------------------------------------------------------------

POOLS = {
    "3x3_s2_p1": ((1, 16, 13, 13), dict(kernel_shape=[3, 3], strides=[2, 2],
                                        pads=[1, 1, 1, 1])),
    "ceil_dil": ((2, 20, 11, 12), dict(kernel_shape=[3, 2], strides=[2, 3], dilations=[2, 1],
                                       ceil_mode=1)),
    "same_upper": ((1, 5, 9, 8), dict(kernel_shape=[3, 3], strides=[2, 2],
                                      auto_pad="SAME_UPPER")),
    "asym_pads": ((1, 33, 7, 9), dict(kernel_shape=[2, 4], pads=[0, 2, 1, 3])),
}


def pool_model(op_type, domain, shape, attrs):
    node = helper.make_node(op_type, ["x"], ["y"], domain=domain, **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, shape)],
                          [helper.make_tensor_value_info("y", F, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid(MS, 1)], ir_version=10)


@pytest.mark.parametrize("native_kernels", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", list(POOLS))
def test_nhwc_max_pool_matches_onnxruntime_max_pool(case, threads, native_kernels, request):
    if not native_kernels:
        request.getfixturevalue("numpy_kernels")
    shape, attrs = POOLS[case]
    x = rand(*shape)
    (want,) = ort.InferenceSession(pool_model("MaxPool", "", shape, attrs).SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})
    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = threads
    nhwc_shape = [None, *shape[2:], shape[1]]
    sess = onnxplex.InferenceSession(
        pool_model("NhwcMaxPool", MS, nhwc_shape, attrs).SerializeToString(), so,
        providers=["cpu_mlas"])
    feeds = {"x": np.ascontiguousarray(x.transpose(0, 2, 3, 1))}
    (got,) = sess.run(None, feeds)
    np.testing.assert_array_equal(got, want.transpose(0, 2, 3, 1))
    # the native kernels' pool is a PlannedStep: its first call installed the plan of x's
    # shape, which the next calls run without Python, to the same bytes; another batch size
    # goes through the Python kernel (and installs its own plan)
    (step,) = [st.kernel for st in sess._exec.steps]
    assert (type(step).__name__ == "PlannedStep") == native_kernels
    for _ in range(2):
        np.testing.assert_array_equal(sess.run(None, feeds)[0], got)
    if native_kernels:
        assert step.plan is not None and step.calls == 2
        x2 = rand(3, *shape[1:])
        (want2,) = ort.InferenceSession(
            pool_model("MaxPool", "", [3, *shape[1:]], attrs).SerializeToString(),
            providers=["CPUExecutionProvider"]).run(None, {"x": x2})
        (got2,) = sess.run(None, {"x": np.ascontiguousarray(x2.transpose(0, 2, 3, 1))})
        np.testing.assert_array_equal(got2, want2.transpose(0, 2, 3, 1))
        assert step.calls == 2 and step.plan.out_shape[0] == 3


@needs_native
def test_native_max_pool_nhwc_padding_and_nan():
    # a window entirely in the padding gives -inf; a NaN anywhere in a window wins
    x = rand(1, 4, 4, 19)
    x[0, 1, 1, 3] = np.nan
    y = np.empty((1, 4, 4, 19), np.float32)
    nat.maxpool_nhwc_f32(x, y, (2, 2), (1, 1), (1, 1), (0, 0), 2)
    assert np.isnan(y[0, 1, 1, 3]) and np.isnan(y[0, 0, 0, 3]) and not np.isnan(y[0, 2, 2, 3])
    y = np.empty((1, 2, 2, 19), np.float32)
    nat.maxpool_nhwc_f32(x, y, (1, 1), (3, 3), (1, 1), (1, 1), 1)   # windows in the padding
    assert (y[0, 0, 0] == -np.inf).all()
    np.testing.assert_array_equal(y[0, 1, 1], x[0, 2, 2])


@pytest.mark.parametrize("group", [1, 8])
def test_nhwc_fused_conv_weight_as_input_is_read_every_call(group):
    """The native call is planned once per input shape; with W a graph input (not a
    constant) every call must still use the W it is given."""
    node = helper.make_node("NhwcFusedConv", ["x", "w"], ["y"], domain=MS, group=group,
                            pads=[1, 1, 1, 1], activation="Relu")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [1, 6, 7, 8]),
                                        helper.make_tensor_value_info("w", F, None)],
                          [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid(MS, 1)], ir_version=10)
    sess = onnxplex.InferenceSession(m.SerializeToString(), providers=["cpu_mlas"])
    x = rand(1, 8, 6, 7)
    for _ in range(2):
        w = rand(8, 8 // group, 3, 3)
        (got,) = sess.run(None, {"x": np.ascontiguousarray(x.transpose(0, 2, 3, 1)), "w": w})
        want = np.maximum(conv_ref(x, w, np.zeros(8, np.float32), (1, 1), (1, 1), (1, 1, 1, 1),
                                   group=group), 0)
        np.testing.assert_allclose(got, want.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-4)


def _bias_input_session(group: int):
    """An NhwcFusedConv [1, 6, 7, 8] -> [1, 6, 7, 8] whose bias is a graph input; its W."""
    node = helper.make_node("NhwcFusedConv", ["x", "w", "b"], ["y"], domain=MS, group=group,
                            pads=[1, 1, 1, 1])
    w = rand(8, 8 // group, 3, 3)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [1, 6, 7, 8]),
                                        helper.make_tensor_value_info("b", F, [8])],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid(MS, 1)], ir_version=10)
    return onnxplex.InferenceSession(m.SerializeToString(), providers=["cpu_mlas"]), w


@pytest.mark.parametrize("group", [1, 8])
def test_nhwc_fused_conv_bias_as_input_is_read_every_call(group):
    """The native call binds the bias it was planned with; a bias that is a graph input,
    another array each call, must plan again."""
    sess, w = _bias_input_session(group)
    x = rand(1, 8, 6, 7)
    for seed in range(3):
        b = np.random.default_rng(seed).standard_normal(8).astype(np.float32)
        (got,) = sess.run(None, {"x": np.ascontiguousarray(x.transpose(0, 2, 3, 1)), "b": b})
        want = conv_ref(x, w, b, (1, 1), (1, 1), (1, 1, 1, 1), group=group)
        np.testing.assert_allclose(got, want.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-4)


@needs_native
@pytest.mark.parametrize("depthwise", [False, True])
def test_native_conv_plans_match_the_direct_calls(depthwise):
    c, m, h, wd, k, s, d, pads = 16, 16, 9, 11, 3, 2, 1, (1, 1, 1, 1)
    w, b = rand(m, 1 if depthwise else c, k, k), rand(m)
    xs = [np.ascontiguousarray(rand(2, c, h, wd).transpose(0, 2, 3, 1)) for _ in range(2)]
    ref = conv_ref(rand(2, c, h, wd), w, b, (s, s), (d, d), pads, group=c if depthwise else 1)
    out = np.empty((2, ref.shape[2], ref.shape[3], m), np.float32)
    z = rand(*out.shape)
    if depthwise:
        w3 = np.ascontiguousarray(w[:, 0])
        plan = nat.dwconv_nhwc_f32_plan(xs[0], w3, b, out, (s, s), (d, d), pads[:2], -1.0, 2.0)
        for x in xs:   # one plan, several inputs of its shape
            nat.dwconv_nhwc_f32(x, w3, b, out, (s, s), (d, d), pads[:2], -1.0, 2.0, 2)
            np.testing.assert_array_equal(plan(x, threads=2), out)
    else:
        wt = nat.sgemm_pack_b(np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(-1, m)))
        plan = nat.conv2d_nhwc_f32_plan(xs[0], wt, out, (k, k), (s, s), (d, d), pads[:2], b,
                                        -1.0, 2.0, "", True)
        assert plan.out_shape == out.shape
        for x in xs:
            nat.conv2d_nhwc_f32(x, wt, out, (k, k), (s, s), (d, d), pads[:2], bias=b, lo=-1.0,
                                hi=2.0, threads=2, z=z)
            np.testing.assert_array_equal(plan(x, z, threads=2), out)


@needs_native
def test_native_conv_plan_refuses_other_inputs():
    x, w3 = np.ascontiguousarray(rand(1, 5, 5, 16)), rand(16, 3, 3)
    out = np.empty((1, 5, 5, 16), np.float32)
    plan = nat.dwconv_nhwc_f32_plan(x, w3, None, out, (1, 1), (1, 1), (1, 1))
    for bad in (rand(1, 5, 6, 16), x.astype(np.float64), rand(1, 5, 10, 16)[:, :, ::2]):
        with pytest.raises(ValueError, match=r"x must be a C-contiguous float32 array of shape "
                                             r"\(1, 5, 5, 16\)"):
            plan(bad)
    with pytest.raises(ValueError, match="made without z"):
        plan(x, out)
    wt = nat.sgemm_pack_b(rand(16, 16))
    with_z = nat.conv2d_nhwc_f32_plan(x, wt, out, (1, 1), (1, 1), (1, 1), (0, 0), with_z=True)
    with pytest.raises(ValueError, match="give it"):
        with_z(x)
    with pytest.raises(ValueError, match="z must be"):
        with_z(x, rand(1, 5, 5, 8))
    with pytest.raises(TypeError, match="SgemmPacked"):
        nat.conv2d_nhwc_f32_plan(x, w3, out, (1, 1), (1, 1), (1, 1), (0, 0))


def test_nhwc_fused_conv_bias_input_from_concurrent_runs():
    """Runs of one session on several threads, each with its own bias input: each result is
    its own bias's. (The plan and the bias it binds are swapped as one tuple; the window the
    two-slot version left open is too short for this test to hit reliably.)"""
    from concurrent.futures import ThreadPoolExecutor

    sess, w = _bias_input_session(1)
    x = rand(1, 8, 6, 7)
    xn = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    base = conv_ref(x, w, np.zeros(8, np.float32), (1, 1), (1, 1), (1, 1, 1, 1))
    base = base.transpose(0, 2, 3, 1)

    def runs(seed):
        for i in range(30):
            b = np.full(8, seed * 100 + i, np.float32)
            (got,) = sess.run(None, {"x": xn, "b": b})
            np.testing.assert_allclose(got, base + b, rtol=1e-4, atol=1e-3)

    with ThreadPoolExecutor(4) as pool:
        for f in [pool.submit(runs, s) for s in range(4)]:
            f.result()


@needs_native
@pytest.mark.parametrize("c", [1, 3, 7, 8, 12, 16, 19, 24, 31, 33, 40])
def test_native_max_pool_nhwc_every_channel_tail(c):
    """Channel counts off the vector width: the last channels as one more vector ending at C
    (over channels already done), half vectors, then single channels; NaNs in the tail lanes
    win their windows. Against numpy's maximum over the shifted windows."""
    rng = np.random.default_rng(c)
    x = rng.standard_normal((1, 9, 10, c)).astype(np.float32)
    x[0, 4, 5, -1] = np.nan
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-np.inf)
    want = np.full((1, 5, 5, c), -np.inf, np.float32)
    for i in range(3):
        for j in range(3):
            want = np.fmax(want, xp[:, i:i + 9:2, j:j + 10:2])
    nan_win = np.zeros(want.shape, bool)
    for i in range(3):
        for j in range(3):
            nan_win |= np.isnan(xp[:, i:i + 9:2, j:j + 10:2])
    want[nan_win] = np.nan
    y = np.empty((1, 5, 5, c), np.float32)
    nat.maxpool_nhwc_f32(x, y, (3, 3), (2, 2), (1, 1), (1, 1), 1)
    np.testing.assert_array_equal(y, want)
