"""A pointwise channels-last conv reading its input times a per-image channel scale (a
squeeze-excite gate's Mul fused): ``conv2d_nhwc_f32_plan(with_scale=True)`` on both of its paths
(rows scaled as the GEMM copies them, from 2,048 positions; a scaled copy of x below), against
numpy, its refusals, and NhwcFusedConv's fifth input S in a session, native and numpy, against
onnxruntime's Mul + Conv."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex.providers.cpu_mlas._native import native

ort.set_default_logger_severity(3)

nat = native()
needs_native = pytest.mark.skipif(nat is None or not hasattr(nat, "conv2d_nhwc_f32_plan"),
                                  reason="the _mlas_native module is not built")
RNG = np.random.default_rng(31)
F = TensorProto.FLOAT
MS = "com.microsoft"


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@needs_native
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c,m,h,w", [(32, 16, 48, 48), (96, 40, 45, 47), (240, 40, 14, 14),
                                     (1152, 64, 7, 7), (5, 3, 3, 3)])
def test_native_scaled_pointwise_conv(c, m, h, w, threads):
    for n, sn in ((1, 1), (2, 2), (2, 1)):
        x, wt, b, s = rand(n, h, w, c), rand(m, c), rand(m), rand(sn, 1, 1, c)
        z = rand(n, h, w, m)
        packed = nat.sgemm_pack_b(np.ascontiguousarray(wt.T))
        plan = nat.conv2d_nhwc_f32_plan(x, packed, np.empty((n, h, w, m), np.float32), (1, 1),
                                        (1, 1), (1, 1), (0, 0), b, -2.0, 3.0, "", True, 0, True)
        want = np.clip((x.astype(np.float64) * s) @ wt.T.astype(np.float64) + b + z, -2, 3)
        np.testing.assert_allclose(plan(x, z, threads, s), want, rtol=1e-4, atol=1e-4)


@needs_native
def test_native_scaled_conv_refusals():
    x = np.zeros((2, 4, 4, 8), np.float32)
    y = np.zeros((2, 4, 4, 6), np.float32)
    packed = nat.sgemm_pack_b(np.zeros((8, 6), np.float32))
    plan = nat.conv2d_nhwc_f32_plan(x, packed, y, (1, 1), (1, 1), (1, 1), (0, 0),
                                    with_scale=True)
    with pytest.raises(ValueError, match="give s"):
        plan(x, None, 1)
    for bad in (np.zeros((3, 1, 1, 8), np.float32), np.zeros((2, 1, 1, 7), np.float32),
                np.zeros((2, 1, 2, 8), np.float32), np.zeros((2, 1, 1, 8), np.float64)):
        with pytest.raises(ValueError, match="s must be"):
            plan(x, None, 1, bad)
    plain = nat.conv2d_nhwc_f32_plan(x, packed, y, (1, 1), (1, 1), (1, 1), (0, 0))
    with pytest.raises(ValueError, match="without s"):
        plain(x, None, 1, np.zeros((2, 1, 1, 8), np.float32))
    packed3 = nat.sgemm_pack_b(np.zeros((72, 6), np.float32))
    with pytest.raises(ValueError, match="1x1"):
        nat.conv2d_nhwc_f32_plan(x, packed3, y, (3, 3), (1, 1), (1, 1), (1, 1), with_scale=True)


@pytest.mark.parametrize("native_on", [True, False], ids=["native", "numpy"])
@pytest.mark.parametrize("activation", ["", "Swish"])
@pytest.mark.parametrize("h", [6, 50])   # both native paths
def test_nhwc_fused_conv_input_scale_matches_onnxruntime(h, activation, native_on,
                                                         request):
    if not native_on:
        request.getfixturevalue("numpy_kernels")
    n, c, m = 2, 24, 16
    x, w, b, g = rand(n, c, h, h), rand(m, c, 1, 1), rand(m), rand(n, c, 1, 1)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    nodes = [helper.make_node("Mul", ["x", "g"], ["xg"]),
             helper.make_node("Conv", ["xg", "w", "b"], ["c"])]
    if activation:
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]),
                  helper.make_node("Mul", ["c", "s"], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", ["c"], ["y"]))
    ref = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F, list(x.shape)),
                     helper.make_tensor_value_info("g", F, list(g.shape))],
        [helper.make_tensor_value_info("y", F, None)], inits),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    want = ort.InferenceSession(ref.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "g": g})[0]
    extra = dict(activation=activation) if activation else {}
    node = helper.make_node("NhwcFusedConv", ["x", "w", "b", "", "s"], ["y"], domain=MS, **extra)
    m_ = helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", F, None),
                      helper.make_tensor_value_info("s", F, None)],
        [helper.make_tensor_value_info("y", F, None)], inits),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)], ir_version=10)
    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = 2
    sess = onnxplex.InferenceSession(m_.SerializeToString(), so, providers=["cpu_mlas"])
    feeds = {"x": np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
             "s": np.ascontiguousarray(g.transpose(0, 2, 3, 1))}
    outs = []
    for _ in range(3):   # the second run: the planned native call; the third: without Python
        outs.append(sess.run(None, feeds)[0])
        np.testing.assert_allclose(outs[-1], want.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(outs[2], outs[1])
    (step,) = [st.kernel for st in sess._exec.steps]
    if native_on:   # (a PlannedStep: the scale read natively; a Swish too, fused)
        assert step.plan is not None and step.calls == 2
    else:
        assert type(step).__name__ != "PlannedStep"
