"""SiLU (Swish), HardSwish and HardSigmoid (alpha 1/6, beta 0.5) in cpu_mlas (sigmoid.h's
PostAct): the native loop ``_mlas_native.post_act_f32`` against the exact functions, the
``act`` of the channels-last conv kernels (conv2d_nhwc_f32's GEMM tiles, dwconv_nhwc_f32's
tasks) against numpy, the NhwcFusedConv activations against onnxruntime's Conv + Sigmoid +
Mul / HardSwish, and the HardSwish op."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex.providers.cpu_mlas import elementwise
from onnxplex.providers.cpu_mlas._native import native

from .test_nhwc_conv import GEOMETRIES, conv_ref

ort.set_default_logger_severity(3)

mod = native()
needs_native = pytest.mark.skipif(mod is None or not hasattr(mod, "post_act_f32"),
                                  reason="the _mlas_native module is not built")
RNG = np.random.default_rng(25)
F = TensorProto.FLOAT
MS = "com.microsoft"
SWISH, HARD_SWISH, HARD_SIGMOID = 1, 2, 3


def swish(x):
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return x * (1.0 / (1.0 + np.exp(-x)))


def hard_swish(x):
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore"):
        return x * np.clip(x / 6 + 0.5, 0, 1)


def hard_sigmoid(x):
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore"):
        return np.clip(x / 6 + 0.5, 0, 1)


EXACT = {SWISH: swish, HARD_SWISH: hard_swish, HARD_SIGMOID: hard_sigmoid}
ACTS = list(EXACT)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@needs_native
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("n", [1, 7, 15, 16, 17, 1000, 70_001])
@pytest.mark.parametrize("threads", [1, 2])
def test_post_act_close_to_exact(act, n, threads):
    x = rand(n) * 8
    y = np.empty_like(x)
    mod.post_act_f32(x, y, act, threads)
    np.testing.assert_allclose(y, EXACT[act](x), rtol=1e-6, atol=1e-6)
    mod.post_act_f32(x, x, act, threads)   # in place
    np.testing.assert_array_equal(x, y)


@needs_native
@pytest.mark.parametrize("act", ACTS)
def test_post_act_special_values_as_the_unfused_graph(act):
    """NaN stays NaN, +inf stays +inf, -inf gives NaN (-inf times a gate of 0, as
    ``Mul(x, Sigmoid(x))`` and ``HardSwish`` give it), far negative values -0."""
    x = np.array([np.nan, np.inf, -np.inf, -100, 100, 0, -3, 3, 1e-30] * 2, np.float32)
    y = np.empty_like(x)
    mod.post_act_f32(x, y, act, 1)
    want = EXACT[act](x)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(y[ok], want[ok], rtol=1e-6, atol=1e-30)


@needs_native
def test_post_act_refuses_unknown_codes():
    x = np.zeros(8, np.float32)
    with pytest.raises(ValueError, match="act"):
        mod.post_act_f32(x, x, 4, 1)


@needs_native
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("geo", GEOMETRIES[:8] + GEOMETRIES[12:13], ids=str)
def test_conv2d_nhwc_act_on_its_tiles(geo, act):
    c, m, h, wd, k, s, d, pads = geo
    for n, threads in ((1, 1), (2, 2)):
        x, w, b = rand(n, c, h, wd), rand(m, c, k, k), rand(m)
        ref = conv_ref(x, w, b, (s, s), (d, d), pads).transpose(0, 2, 3, 1)
        z = rand(*ref.shape)
        wt = mod.sgemm_pack_b(np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(-1, m)))
        y = np.full(ref.shape, np.nan, np.float32)
        mod.conv2d_nhwc_f32(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), wt, y, (k, k),
                            (s, s), (d, d), pads[:2], bias=b, threads=threads, z=z, act=act)
        np.testing.assert_allclose(y, EXACT[act](ref + z), rtol=1e-4, atol=1e-4)


@needs_native
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("geo", GEOMETRIES[:8], ids=str)
def test_dwconv_nhwc_act_on_its_tasks(geo, act):
    _, c, h, wd, k, s, d, pads = geo
    for n, threads in ((1, 1), (2, 2), (1, 5)):
        x, w, b = rand(n, c, h, wd), rand(c, 1, k, k), rand(c)
        ref = conv_ref(x, w, b, (s, s), (d, d), pads, group=c).transpose(0, 2, 3, 1)
        y = np.full(ref.shape, np.nan, np.float32)
        mod.dwconv_nhwc_f32(np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
                            np.ascontiguousarray(w[:, 0]), b, y, (s, s), (d, d), pads[:2],
                            -np.inf, np.inf, threads, act)
        np.testing.assert_allclose(y, EXACT[act](ref), rtol=1e-5, atol=1e-5)


# ---- the kernels in a session -------------------------------------------------------------------

# (x NCHW shape, w shape, attributes)
CASES = {
    "3x3": ((1, 16, 12, 13), (24, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
    "1x1": ((2, 16, 7, 7), (40, 16, 1, 1), {}),
    "depthwise_s2": ((1, 24, 15, 15), (24, 1, 5, 5), dict(pads=[2, 2, 2, 2], strides=[2, 2],
                                                           group=24)),
    "groups": ((1, 16, 9, 9), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1], group=2)),  # NCHW path
}


# HardSigmoid as PyTorch exports it (native in the kernels) and with ONNX's defaults (applied
# after the conv)
_HARD_SIGMOID = {"HardSigmoid": (1 / 6, 0.5), "HardSigmoid_default": (0.2, 0.5)}


def _nhwc_model(xs, w, b, attrs, kind, with_z):
    inputs = [helper.make_tensor_value_info("x", F, [xs[0], *xs[2:], xs[1]])]
    names = ["x", "w", "b"]
    if with_z:
        inputs.append(helper.make_tensor_value_info("z", F, None))
        names.append("z")
    if kind in _HARD_SIGMOID:
        attrs = {**attrs, "activation_params": list(_HARD_SIGMOID[kind])}
    node = helper.make_node("NhwcFusedConv", names, ["y"], domain=MS,
                            activation=kind.split("_")[0], **attrs)
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid(MS, 1)], ir_version=10)


def _ort_reference(xs, w, b, attrs, kind, x, z):
    """onnxruntime: Conv (+ Z) then Sigmoid + Mul or HardSwish, NCHW."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c0"], **attrs)]
    inputs = [helper.make_tensor_value_info("x", F, list(xs))]
    feeds = {"x": x}
    c = "c0"
    if z is not None:
        inputs.append(helper.make_tensor_value_info("z", F, list(z.shape)))
        nodes.append(helper.make_node("Add", ["c0", "z"], ["c"]))
        feeds["z"] = z
        c = "c"
    if kind == "Swish":
        nodes += [helper.make_node("Sigmoid", [c], ["s"]), helper.make_node("Mul", [c, "s"], ["y"])]
    elif kind.startswith("HardSigmoid"):
        alpha, beta = _HARD_SIGMOID[kind]
        nodes.append(helper.make_node("HardSigmoid", [c], ["y"], alpha=alpha, beta=beta))
    else:
        nodes.append(helper.make_node("HardSwish", [c], ["y"]))
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("native_on", [True, False], ids=["native", "numpy"])
@pytest.mark.parametrize("with_z", [False, True], ids=["", "z"])
@pytest.mark.parametrize("kind", ["Swish", "HardSwish", *_HARD_SIGMOID])
@pytest.mark.parametrize("case", list(CASES))
def test_nhwc_fused_conv_activation_matches_onnxruntime(case, kind, with_z, native_on,
                                                         request):
    if not native_on:
        request.getfixturevalue("numpy_kernels")
    xs, ws, attrs = CASES[case]
    x, w, b = rand(*xs) * 2, rand(*ws) * 0.5, rand(ws[0])
    z = rand(*_ort_reference(xs, w, b, attrs, kind, x, None).shape) if with_z else None
    want = _ort_reference(xs, w, b, attrs, kind, x, z).transpose(0, 2, 3, 1)
    m = _nhwc_model(xs, w, b, attrs, kind, with_z)
    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = 2
    sess = onnxplex.InferenceSession(m.SerializeToString(), so, providers=["cpu_mlas"])
    feeds = {"x": np.ascontiguousarray(x.transpose(0, 2, 3, 1))}
    if z is not None:
        feeds["z"] = np.ascontiguousarray(z.transpose(0, 2, 3, 1))
    for _ in range(2):   # the second run: the planned native call
        (got,) = sess.run(None, feeds)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [10, 5000])
def test_hard_swish_op_matches_onnxruntime(n):
    x = rand(n) * 5
    x[:3] = [np.nan, -3.0, 3.0]
    node = helper.make_node("HardSwish", ["x"], ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [n])],
                          [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = onnxplex.InferenceSession(m.SerializeToString(),
                                    providers=["cpu_mlas"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert elementwise._hard_swish_f32(x).dtype == np.float32


@pytest.mark.parametrize("alpha", [1.0, 1.702, None])
@pytest.mark.parametrize("shape", [(3, 5), (4, 64, 100)])
def test_quick_gelu_matches_onnxruntime(alpha, shape):
    x = rand(*shape) * 4
    attrs = {} if alpha is None else dict(alpha=alpha)   # None: the default, 1.702
    node = helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, list(shape))],
                          [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid(MS, 1)], ir_version=10)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    sess = onnxplex.InferenceSession(m.SerializeToString(), providers=["cpu_mlas"])
    x0 = x.copy()
    got = sess.run(None, {"x": x})[0]
    np.testing.assert_array_equal(x, x0)   # the input is not written
    a = 1.702 if alpha is None else alpha
    exact = x.astype(np.float64) / (1 + np.exp(-a * x.astype(np.float64)))
    # (small arrays: the numpy sigmoid, ~6e-8 absolute, times x)
    np.testing.assert_allclose(got, exact, rtol=1e-6, atol=1e-6)
    # onnxruntime's logistic is accurate in absolute terms (~1e-7), not relative
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=3e-6)


@pytest.mark.parametrize("shape, strided", [((64, 1376), False), ((64, 1376), True),
                                            ((3, 5), False)])
def test_swish_f32_into_a_new_array(shape, strided):
    """QuickGelu's SiLU (alpha 1) of float32 x: one native pass into a new array for a
    contiguous x, a copy then the pass in place for a view or a small x; x is never written."""
    base = rand(shape[0], 2 * shape[1]) * 4
    x = base[:, ::2] if strided else np.ascontiguousarray(base[:, :shape[1]])
    x0 = x.copy()
    got = elementwise.swish_f32(x)
    np.testing.assert_array_equal(x, x0)
    assert got.dtype == np.float32 and got.flags.c_contiguous and got.shape == x.shape
    exact = x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(got, exact, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("params, code", [((1 / 6, 0.5), HARD_SIGMOID), ((0.2, 0.5), 0),
                                          ((), 0), ((1 / 6, 0.4), 0)])
def test_hard_sigmoid_is_native_only_with_pytorchs_constants(params, code):
    """The kernels apply HardSigmoid(alpha 1/6, beta 0.5) (PyTorch's Hardsigmoid, as
    exported); any other alpha or beta is applied after the conv."""
    from onnxplex import NodeView
    from onnxplex.providers.cpu_mlas import nn

    attrs = {"activation": "HardSigmoid"}
    if params:
        attrs["activation_params"] = params
    view = NodeView(0, "c", "NhwcFusedConv", MS, 1, (), (), attrs)
    assert nn._post_act(view) == code
