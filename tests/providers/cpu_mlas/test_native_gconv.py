"""The grouped channels-last conv (``_mlas_native.gconv_nhwc_f32_plan``, gconv.h): against a
float64 reference over geometries (strides, dilations, uneven pads, 4/8/12/16/24/40 output
channels a group, blocks of positions cut by the row's end; on AVX-512 groups of 4 and 8
channels several a vector, with a group left over), with bias, Z, clamp and the
SiLU/HardSwish activations, one to three threads; its refusals; and NhwcFusedConv taking it
in a session, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex.providers.cpu_mlas._native import native

from .test_native_swish import EXACT
from .test_nhwc_conv import conv_ref

ort.set_default_logger_severity(3)

nat = native()
pytestmark = pytest.mark.skipif(nat is None or not hasattr(nat, "gconv_nhwc_f32_plan"),
                                reason="the _mlas_native module is not built")
RNG = np.random.default_rng(8)
F = TensorProto.FLOAT
MS = "com.microsoft"

# (C in, C out, group, H, W, kernel, stride, dilation, pads t/l/b/r)
GEOMETRIES = [
    (48, 48, 6, 14, 14, 3, 1, 1, (1, 1, 1, 1)),    # RegNet's: 8 in, 8 out a group
    (48, 48, 6, 15, 15, 3, 2, 1, (1, 1, 1, 1)),    # ... stride 2
    (16, 32, 2, 9, 11, 3, 2, 1, (1, 1, 1, 1)),     # 16 out a group: two vectors
    (24, 24, 2, 7, 13, 3, 1, 1, (1, 1, 1, 1)),     # 12 out: a pair, then one (rows of 13)
    (24, 12, 3, 7, 8, 3, 1, 2, (2, 2, 2, 2)),      # 4 out a group: 4-lane vectors, dilation
    (32, 80, 2, 6, 5, 5, 1, 1, (2, 1, 0, 3)),      # 40 out, 5x5, uneven pads
    (8, 8, 2, 3, 3, 3, 1, 1, (1, 1, 1, 1)),        # every block at an edge
    (64, 64, 4, 10, 10, 1, 1, 1, (0, 0, 0, 0)),    # 1x1 grouped
    # AVX-512: groups of 4 or 8 several a vector (gconv_multi_group), the rest one at a time
    (128, 128, 32, 9, 11, 3, 1, 1, (1, 1, 1, 1)),  # ResNeXt's 4 a group: 4 groups a vector
    (20, 20, 5, 7, 9, 3, 2, 1, (1, 1, 1, 1)),      # ... and a group left over, stride 2
    (104, 104, 13, 6, 10, 3, 1, 1, (1, 1, 1, 1)),  # RegNet's 8 a group, 13 groups
    (32, 32, 4, 5, 5, 3, 1, 2, (2, 2, 2, 2)),      # 8 a group, dilated, every tap at an edge
    (64, 64, 16, 4, 3, 3, 1, 1, (0, 2, 1, 0)),     # uneven pads, rows shorter than a block
]


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("geo", GEOMETRIES, ids=str)
def test_native_gconv_nhwc(geo, threads):
    c, m, group, h, wd, k, s, d, pads = geo
    for n in (1, 2):
        x, w, b = rand(n, c, h, wd), rand(m, c // group, k, k), rand(m)
        ref = conv_ref(x, w, b, (s, s), (d, d), pads, group=group).transpose(0, 2, 3, 1)
        z = rand(*ref.shape)
        tol = 1e-5 * max(1.0, (c // group * k * k / 9) ** 0.5)   # float32 sums of fan_in
        plan = nat.gconv_nhwc_f32_plan(nhwc(x), w, b, np.empty(ref.shape, np.float32), group,
                                       (s, s), (d, d), pads[:2], -1.0, 2.0, 0, True)
        np.testing.assert_allclose(plan(nhwc(x), z, threads), np.clip(ref + z, -1, 2),
                                   rtol=1e-5, atol=tol)
        plain = nat.gconv_nhwc_f32_plan(nhwc(x), w, None, np.empty(ref.shape, np.float32),
                                        group, (s, s), (d, d), pads[:2])
        np.testing.assert_allclose(plain(nhwc(x), None, threads), ref - b, rtol=1e-5,
                                   atol=tol)


@pytest.mark.parametrize("act", [1, 2])
def test_native_gconv_nhwc_activation(act):
    c, m, group, h, wd, k, s, d, pads = GEOMETRIES[0]
    x, w, b = rand(2, c, h, wd), rand(m, c // group, k, k), rand(m)
    ref = conv_ref(x, w, b, (s, s), (d, d), pads, group=group).transpose(0, 2, 3, 1)
    plan = nat.gconv_nhwc_f32_plan(nhwc(x), w, b, np.empty(ref.shape, np.float32), group,
                                   (s, s), (d, d), pads[:2], act=act)
    np.testing.assert_allclose(plan(nhwc(x), None, 2), EXACT[act](ref), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("groups", [2, 4], ids=["one_group_a_vector", "four_groups_a_vector"])
def test_native_gconv_nhwc_nan_propagates(groups):
    c = 4 * groups
    x, w = rand(1, c, 5, 5), rand(c, 4, 3, 3)
    x[0, 1, 2, 2] = np.nan   # group 0's input: its outputs around (2, 2) are NaN, no other's
    plan = nat.gconv_nhwc_f32_plan(nhwc(x), w, None, np.empty((1, 5, 5, c), np.float32),
                                   groups, (1, 1), (1, 1), (1, 1), 0.0, 6.0)
    y = plan(nhwc(x), None, 1)
    assert np.isnan(y[0, 1:4, 1:4, :4]).all() and not np.isnan(y[..., 4:]).any()


def test_native_gconv_nhwc_refusals():
    x = np.zeros((1, 5, 5, 12), np.float32)
    y = np.zeros((1, 5, 5, 6), np.float32)
    with pytest.raises(ValueError, match="multiple of 4"):   # 2 output channels a group
        nat.gconv_nhwc_f32_plan(x, np.zeros((6, 4, 3, 3), np.float32), None, y, 3, (1, 1),
                                (1, 1), (1, 1))
    with pytest.raises(ValueError, match="group"):           # C / group != w's
        nat.gconv_nhwc_f32_plan(x, np.zeros((8, 3, 3, 3), np.float32), None,
                                np.zeros((1, 5, 5, 8), np.float32), 2, (1, 1), (1, 1), (1, 1))
    with pytest.raises(ValueError, match="act"):
        nat.gconv_nhwc_f32_plan(x, np.zeros((8, 6, 3, 3), np.float32), None,
                                np.zeros((1, 5, 5, 8), np.float32), 2, (1, 1), (1, 1), (1, 1),
                                act=7)


@pytest.mark.parametrize("activation", ["", "Relu", "Swish"])
@pytest.mark.parametrize("with_z", [False, True], ids=["", "z"])
def test_nhwc_fused_conv_grouped_matches_onnxruntime(activation, with_z):
    xs, ws, attrs = (2, 32, 9, 10), (32, 4, 3, 3), dict(group=8, pads=[1, 1, 1, 1])
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    z = rand(2, 32, 9, 10) if with_z else None
    # onnxruntime: Conv (+ Z) then the activation, NCHW
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c0"], **attrs)]
    inputs, feeds, c = [helper.make_tensor_value_info("x", F, list(xs))], {"x": x}, "c0"
    if with_z:
        inputs.append(helper.make_tensor_value_info("z", F, list(z.shape)))
        nodes.append(helper.make_node("Add", ["c0", "z"], ["c"]))
        feeds["z"], c = z, "c"
    if activation == "Relu":
        nodes.append(helper.make_node("Relu", [c], ["y"]))
    elif activation == "Swish":
        nodes += [helper.make_node("Sigmoid", [c], ["s"]), helper.make_node("Mul", [c, "s"], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", [c], ["y"]))
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    ref = helper.make_model(
        helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F, None)],
                          inits), opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    want = ort.InferenceSession(ref.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    # the same as one NhwcFusedConv
    names = ["x", "w", "b"] + (["z"] if with_z else [])
    extra = dict(activation=activation) if activation else {}
    node = helper.make_node("NhwcFusedConv", names, ["y"], domain=MS, **attrs, **extra)
    nin = [helper.make_tensor_value_info(v.name, F, None) for v in inputs]
    m = helper.make_model(
        helper.make_graph([node], "g", nin, [helper.make_tensor_value_info("y", F, None)], inits),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)], ir_version=10)
    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = 2
    sess = onnxplex.InferenceSession(m.SerializeToString(), so, providers=["cpu_mlas"])
    nfeeds = {k: nhwc(v) for k, v in feeds.items()}
    for _ in range(2):   # the second run: the planned native call
        np.testing.assert_allclose(sess.run(None, nfeeds)[0], nhwc(want), rtol=1e-4, atol=1e-5)
