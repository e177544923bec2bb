"""The layout level's NhwcTransformer (onnxplex.optimizer._layout): which nodes go
channels-last, where the transposes go (only at the edges of channels-last regions, one per
value), and that the outputs stay those of the NCHW graph and of onnxruntime."""

from __future__ import annotations

import collections
import logging

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex import Capability, ExecutionProvider, NodeGroup
from onnxplex.framework.plugins import unregister_provider

ort.set_default_logger_severity(3)

F = TensorProto.FLOAT
GOL = onnxplex.GraphOptimizationLevel
RNG = np.random.default_rng(11)


def init(name, *shape):
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def scalar(name, v):
    return numpy_helper.from_array(np.float32(v), name)


def model(nodes, inputs, outputs, inits, opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def vi(name, shape):
    return helper.make_tensor_value_info(name, F, shape)


def mobilenet_block():
    """A stem (3x3 stride 2, 3 channels), an inverted residual block (1x1 expand + Clip,
    depthwise 3x3 + Clip, 1x1 project, residual Add), global pooling and a classifier."""
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Clip", ["c0", "lo", "hi"], ["a0"]),
        helper.make_node("Conv", ["a0", "w1", "b1"], ["c1"]),
        helper.make_node("Clip", ["c1", "lo", "hi"], ["a1"]),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=24),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["a2"]),
        helper.make_node("Conv", ["a2", "w3", "b3"], ["c3"]),
        helper.make_node("Add", ["a0", "c3"], ["s"]),
        helper.make_node("GlobalAveragePool", ["s"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    inits = [init("w0", 8, 3, 3, 3), init("b0", 8), init("w1", 24, 8, 1, 1), init("b1", 24),
             init("w2", 24, 1, 3, 3), init("b2", 24), init("w3", 8, 24, 1, 1), init("b3", 8),
             init("wf", 5, 8), init("bf", 5), scalar("lo", 0.0), scalar("hi", 6.0)]
    return model(nodes, [vi("x", [1, 3, 17, 18])], [vi("y", [1, 5])], inits)


def session(m, level=GOL.ORT_ENABLE_ALL, **kw):
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = level
    return onnxplex.InferenceSession(m.SerializeToString(), so, **kw)


def steps(sess):
    return collections.Counter(s.op_type for s in sess._exec.steps)


def ort_outputs(m, feeds):
    return ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def assert_matches(sess, m, feeds):
    want = ort_outputs(m, feeds)
    got = sess.run(None, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_conv_chain_goes_channels_last_with_transposes_at_its_edges_only():
    m = mobilenet_block()
    feeds = {"x": RNG.standard_normal((1, 3, 17, 18)).astype(np.float32)}
    sess = session(m)
    got = steps(sess)
    # four convs (Clip fused into three), the residual as the last conv's Z; one transpose in
    # (the image), one out (before the pooling)
    assert got["NhwcFusedConv"] == 4 and got["Transpose"] == 2, got
    assert "FusedConv" not in got and "Conv" not in got
    assert_matches(sess, m, feeds)
    nchw = session(m, GOL.ORT_ENABLE_EXTENDED)
    assert "NhwcFusedConv" not in steps(nchw) and "Transpose" not in steps(nchw)
    np.testing.assert_allclose(sess.run(None, feeds)[0], nchw.run(None, feeds)[0], rtol=1e-5,
                               atol=1e-6)


def test_disabled_by_name():
    sess = onnxplex.InferenceSession(mobilenet_block().SerializeToString(),
                                     disabled_optimizers=["NhwcTransformer"])
    assert "NhwcFusedConv" not in steps(sess)


def test_output_read_by_nchw_nodes_and_graph_output_comes_back_once():
    # c0 feeds a converted conv, a Softmax over channels (layout-sensitive: stays NCHW) and is
    # a graph output: one transpose back serves both; the outputs keep their names
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c0", "w1"], ["c1"]),
             helper.make_node("Softmax", ["c0"], ["sm"], axis=1)]
    m = model(nodes, [vi("x", [2, 4, 6, 7])],
              [vi("c0", None), vi("c1", None), vi("sm", None)],
              [init("w0", 6, 4, 3, 3), init("w1", 5, 6, 1, 1)])
    sess = session(m)
    assert [o.name for o in sess.get_outputs()] == ["c0", "c1", "sm"]
    got = steps(sess)
    assert got["NhwcFusedConv"] == 2 and got["Transpose"] == 3, got  # x in; c0, c1 out
    assert_matches(sess, m, {"x": RNG.standard_normal((2, 4, 6, 7)).astype(np.float32)})


def test_elementwise_between_convs_runs_channels_last():
    # Sum + Relu between convs (a caffe2 ResNet's residual) and a Mul by a scalar: no
    # transposes inside; an Add of a per-channel constant broadcasts along C: stays NCHW
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w1"], ["b"]),
             helper.make_node("Sum", ["a", "b"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Mul", ["r", "two"], ["t"]),
             helper.make_node("Conv", ["t", "w2"], ["c"]),
             helper.make_node("Add", ["c", "per_channel"], ["y"])]
    inits = [init("w0", 6, 3, 3, 3), init("w1", 6, 6, 1, 1), init("w2", 4, 6, 1, 1),
             scalar("two", 2.0), init("per_channel", 1, 4, 1, 1)]
    m = model(nodes, [vi("x", [1, 3, 9, 9])], [vi("y", None)], inits)
    sess = session(m)
    got = steps(sess)
    assert got["NhwcFusedConv"] == 3 and got["Transpose"] == 2, got
    layouts = {s.name: s.op_type for s in sess._exec.steps}
    assert sum(op in ("Sum", "Relu", "Mul") for op in layouts.values()) == 3
    assert_matches(sess, m, {"x": RNG.standard_normal((1, 3, 9, 9)).astype(np.float32)})


@pytest.mark.parametrize("case", ["grouped", "conv1d", "weight_input", "conv3d"])
def test_convs_the_channels_last_kernels_do_not_cover_stay_nchw(case):
    if case == "grouped":
        node = helper.make_node("Conv", ["x", "w"], ["y"], group=2, pads=[1, 1, 1, 1])
        xs, inits, inputs = [1, 4, 6, 6], [init("w", 6, 2, 3, 3)], []
    elif case == "conv1d":
        node = helper.make_node("Conv", ["x", "w"], ["y"])
        xs, inits, inputs = [1, 4, 9], [init("w", 6, 4, 3)], []
    elif case == "conv3d":
        node = helper.make_node("Conv", ["x", "w"], ["y"])
        xs, inits, inputs = [1, 4, 5, 5, 5], [init("w", 6, 4, 2, 2, 2)], []
    else:
        node = helper.make_node("Conv", ["x", "w"], ["y"])
        xs, inits, inputs = [1, 4, 6, 6], [], [vi("w", [6, 4, 3, 3])]
    m = model([node], [vi("x", xs), *inputs], [vi("y", None)], inits)
    sess = session(m)
    assert "NhwcFusedConv" not in steps(sess) and "Transpose" not in steps(sess)
    feeds = {"x": RNG.standard_normal(xs).astype(np.float32)}
    if case == "weight_input":
        feeds["w"] = RNG.standard_normal((6, 4, 3, 3)).astype(np.float32)
    assert_matches(sess, m, feeds)


class ConvClaimer(ExecutionProvider):
    """Claims the first Conv node: the layout pass must leave it alone."""

    name = "conv_claimer"

    def get_capability(self, graph):
        convs = [n.index for n in graph.nodes if n.op_type == "Conv"]
        return Capability((NodeGroup((convs[0],)),) if convs else ())

    def compile(self, subgraph):
        node = subgraph.nodes[0]
        pads = [int(p) for p in node.attr("pads", [0, 0, 0, 0])]

        def kernel(x, w):
            xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
            kh, kw = w.shape[2:]
            oh, ow = xp.shape[2] - kh + 1, xp.shape[3] - kw + 1
            y = np.zeros((x.shape[0], w.shape[0], oh, ow), np.float32)
            for i in range(kh):
                for j in range(kw):
                    y += np.einsum("nchw,mc->nmhw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
            return y

        return kernel


def test_nodes_another_provider_claims_are_left_nchw(caplog):
    onnxplex.register_provider(ConvClaimer)
    try:
        nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
                 helper.make_node("Conv", ["a", "w1"], ["y"])]
        m = model(nodes, [vi("x", [1, 3, 6, 6])], [vi("y", None)],
                  [init("w0", 4, 3, 3, 3), init("w1", 5, 4, 1, 1)])
        with caplog.at_level(logging.INFO, logger="onnxplex"):
            sess = session(m, providers=["conv_claimer", "cpu_mlas"])
        assert not any("rolled back" in r.getMessage() for r in caplog.records)
        by_provider = {(s.provider, s.op_type) for s in sess._exec.steps}
        assert ("conv_claimer", "Conv") in by_provider
        assert ("cpu_mlas", "NhwcFusedConv") in by_provider
        assert_matches(sess, m, {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)})
    finally:
        unregister_provider("conv_claimer")


def test_a_claimed_conv_is_not_fused_with_its_activation():
    # the fusion rewrites a conv in place when no node is claimed: a claimed one must stay
    onnxplex.register_provider(ConvClaimer)
    try:
        nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["a"], ["b"]),
                 helper.make_node("Conv", ["b", "w1"], ["y"])]
        m = model(nodes, [vi("x", [1, 3, 6, 6])], [vi("y", None)],
                  [init("w0", 4, 3, 3, 3), init("w1", 5, 4, 1, 1)])
        sess = session(m, providers=["conv_claimer", "cpu_mlas"])
        steps = [(s.provider, s.op_type) for s in sess._exec.steps]
        assert steps[0] == ("conv_claimer", "Conv")
        assert "FusedConv" not in {op for _, op in steps}
        assert_matches(sess, m, {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)})
    finally:
        unregister_provider("conv_claimer")


def test_saving_a_channels_last_model_warns(tmp_path, caplog):
    m = mobilenet_block()
    so = onnxplex.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    with caplog.at_level(logging.WARNING, logger="onnxplex"):
        onnxplex.InferenceSession(m.SerializeToString(), so)
    assert any("NhwcFusedConv" in r.getMessage() for r in caplog.records)
    # the saved model runs in onnxplex
    again = onnxplex.InferenceSession(so.optimized_model_filepath)
    x = RNG.standard_normal((1, 3, 17, 18)).astype(np.float32)
    np.testing.assert_allclose(again.run(None, {"x": x})[0],
                               ort_outputs(m, {"x": x})[0], rtol=1e-4,
                               atol=1e-5)


def test_max_pool_after_a_conv_runs_channels_last_unless_its_indices_are_read():
    for with_indices in (False, True):
        pool = helper.make_node("MaxPool", ["a"], ["p", "i"] if with_indices else ["p"],
                                kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[3, 3, 3, 3],
                                  strides=[2, 2]), pool,
                 helper.make_node("Conv", ["p", "w1"], ["y"], pads=[1, 1, 1, 1])]
        outputs = [vi("y", None)] + ([helper.make_tensor_value_info("i", TensorProto.INT64,
                                                                    None)]
                                     if with_indices else [])
        m = model(nodes, [vi("x", [1, 3, 32, 32])], outputs,
                  [init("w0", 16, 3, 7, 7), init("w1", 8, 16, 3, 3)])
        sess = session(m)
        got = steps(sess)
        if with_indices:
            assert got["MaxPool"] == 1 and got["Transpose"] == 4, got  # out and back in
        else:
            assert got["NhwcMaxPool"] == 1 and got["Transpose"] == 2, got
        assert_matches(sess, m, {"x": RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)})


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("pool", ["GlobalAveragePool", "ReduceMean", "ReduceMean_channels"])
def test_spatial_mean_after_a_conv_runs_channels_last(pool, opset):
    inits = [init("w", 8, 3, 3, 3)]
    if pool == "GlobalAveragePool":
        node = helper.make_node("GlobalAveragePool", ["a"], ["y"])
    else:
        axes = [2, 3] if pool == "ReduceMean" else [1]
        if opset >= 18:
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
            node = helper.make_node("ReduceMean", ["a", "axes"], ["y"], keepdims=1)
        else:
            node = helper.make_node("ReduceMean", ["a"], ["y"], axes=axes, keepdims=1)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
                           node], "g", [vi("x", [2, 3, 9, 10])], [vi("y", None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    sess = session(m)
    got = steps(sess)
    # over H and W: the mean runs channels-last (a GlobalAveragePool becomes a ReduceMean), its
    # [N, 1, 1, C] transposed back (a move of nothing); over C: NCHW, the conv's output
    # transposed back first
    assert got["ReduceMean"] == 1 and got["GlobalAveragePool"] == 0, got
    mean = next(s for s in sess._exec.steps if s.op_type == "ReduceMean")
    assert mean.name.endswith("/nhwc") == (pool != "ReduceMean_channels"), mean.name
    assert_matches(sess, m, {"x": RNG.standard_normal((2, 3, 9, 10)).astype(np.float32)})


@pytest.mark.parametrize("per_group", [4, 8, 16])
def test_grouped_convs_of_whole_vectors_go_channels_last(per_group):
    """RegNet-style grouped 3x3 convs (a multiple of 4 output channels a group: the native
    grouped kernel's vectors) between two 1x1 convs: one channels-last chain, two transposes;
    3 a group stays NCHW (test_convs_the_channels_last_kernels_do_not_cover_stay_nchw). Last
    in the file: it draws from the module's RNG, which earlier tests' data depend on."""
    c = 4 * per_group
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w1", "b1"], ["g"], group=4, pads=[1, 1, 1, 1],
                              strides=[2, 2]),
             helper.make_node("Relu", ["g"], ["gr"]),
             helper.make_node("Conv", ["gr", "w2"], ["y"])]
    inits = [init("w0", c, 6, 1, 1), init("w1", c, per_group, 3, 3), init("b1", c),
             init("w2", 5, c, 1, 1)]
    m = model(nodes, [vi("x", [2, 6, 9, 11])], [vi("y", None)], inits)
    sess = session(m)
    got = steps(sess)
    assert got["NhwcFusedConv"] == 3 and got["Transpose"] == 2, got
    assert_matches(sess, m, {"x": RNG.standard_normal((2, 6, 9, 11)).astype(np.float32)})


def dense_block(concat_axis=1, mean_input=False):
    """A DenseNet's pre-activation layer: features concatenated with a conv's output along the
    channels, then BatchNormalization + Relu + 1x1 conv (the BatchNormalization follows the
    Concat: no conv to fold it into)."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c0", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["c0", "c1"], ["cat"], axis=concat_axis),
             helper.make_node("BatchNormalization",
                              ["cat", "g", "b", "mean" if not mean_input else "m_in", "var"],
                              ["bn"], epsilon=1e-3),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    c = 8 + 6
    inits = [init("w0", 8, 3, 3, 3), init("w1", 6, 8, 3, 3), init("w2", 5, c, 1, 1),
             numpy_helper.from_array((RNG.random(c) + 0.5).astype(np.float32), "g"),
             init("b", c), init("mean", c),
             numpy_helper.from_array((RNG.random(c) + 0.5).astype(np.float32), "var")]
    inputs = [vi("x", [2, 3, 9, 10])]
    if mean_input:
        inputs.append(vi("m_in", [c]))
    return model(nodes, inputs, [vi("y", None)], inits)


def test_dense_block_stays_channels_last():
    """The Concat runs channels-last along the permuted axis, the BatchNormalization as a
    depthwise 1x1 channels-last conv with the Relu fused into it: the only transposes are the
    image's and the output's."""
    m = dense_block()
    sess = session(m)
    got = steps(sess)
    assert got["Transpose"] == 2 and got["Concat"] == 1, got
    assert got["NhwcFusedConv"] == 4 and "BatchNormalization" not in got, got
    assert "Relu" not in got, got
    assert_matches(sess, m, {"x": RNG.standard_normal((2, 3, 9, 10)).astype(np.float32)})


@pytest.mark.parametrize("axis", [-3, 2])
def test_concat_axis_is_permuted(axis):
    """Concat along H (axis 2, or -3 for channels: both remapped) channels-last."""
    m = dense_block(concat_axis=axis) if axis == -3 else None
    if m is None:   # along H: the second conv's output has the same channels
        nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
                 helper.make_node("Conv", ["c0", "w1"], ["c1"], pads=[1, 1, 1, 1]),
                 helper.make_node("Concat", ["c0", "c1"], ["cat"], axis=axis),
                 helper.make_node("Conv", ["cat", "w2"], ["y"])]
        m = model(nodes, [vi("x", [1, 3, 7, 6])], [vi("y", None)],
                  [init("w0", 8, 3, 3, 3), init("w1", 8, 8, 3, 3), init("w2", 4, 8, 1, 1)])
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    sess = session(m)
    assert steps(sess)["Transpose"] == 2, steps(sess)
    assert_matches(sess, m, {"x": RNG.standard_normal(shape).astype(np.float32)})


def test_batchnorm_with_statistics_fed_at_run_time_stays():
    """A BatchNormalization whose mean is a graph input stays as it is (the Concat still goes
    channels-last), with the same results."""
    m = dense_block(mean_input=True)
    sess = session(m)
    assert steps(sess)["BatchNormalization"] == 1, steps(sess)
    assert_matches(sess, m, {"m_in": RNG.standard_normal(14).astype(np.float32),
                             "x": RNG.standard_normal((2, 3, 9, 10)).astype(np.float32)})


def test_concat_mostly_fed_nchw_stays_nchw():
    """A Concat with one channels-last input and two NCHW graph inputs is left NCHW (it
    would take two transposes to save one)."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["c0", "p", "q"], ["y"], axis=1)]
    m = model(nodes, [vi("x", [1, 3, 5, 5]), vi("p", [1, 2, 5, 5]), vi("q", [1, 2, 5, 5])],
              [vi("y", None)], [init("w0", 4, 3, 3, 3)])
    sess = session(m)
    feeds = {k: RNG.standard_normal(s).astype(np.float32)
             for k, s in (("x", (1, 3, 5, 5)), ("p", (1, 2, 5, 5)), ("q", (1, 2, 5, 5)))}
    concat = next(s for s in sess._exec.steps if s.op_type == "Concat")
    assert not concat.name.endswith("/nhwc"), concat.name
    assert_matches(sess, m, feeds)


@pytest.mark.parametrize("channels", [8, 21, 64])
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2], "strides": [2, 2]},                       # a DenseNet transition
    {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},  # an Inception branch
    {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1,
     "count_include_pad": 1},   # a ceil-mode window past the end pad: those taps never count
    {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [0, 1, 1, 0]},
    {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER",
     "count_include_pad": 1},
])
def test_average_pool_between_convs_runs_channels_last(attrs, channels):
    """A 2-D AveragePool of a channels-last value runs channels-last (onnxruntime's internal
    NHWC domain's AveragePool; float32 on the native kernel: whole and partial channel
    vectors): no transposes around it, onnxruntime's results."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["c0"], ["p"], **attrs),
             helper.make_node("Conv", ["p", "w1"], ["y"])]
    m = model(nodes, [vi("x", [2, 3, 9, 10])], [vi("y", None)],
              [init("w0", channels, 3, 3, 3), init("w1", 5, channels, 1, 1)], opset=19)
    sess = session(m)
    got = steps(sess)
    assert got["Transpose"] == 2 and got["AveragePool"] == 1, got
    pool = next(p for p in sess.get_provider_assignment().placements
                if p.op_type == "AveragePool")
    assert pool.domain == "com.ms.internal.nhwc", pool
    assert_matches(sess, m, {"x": RNG.standard_normal((2, 3, 9, 10)).astype(np.float32)})


def shuffle_unit(batch_dim=-1, perm=(0, 2, 1, 3, 4)):
    """A ShuffleNetV2 unit's tail: two conv branches concatenated, the channel shuffle
    (Reshape [N, 2, C/2, H, W], Transpose, Reshape [N, C, H, W]) and a Split into halves read
    by convs, as torch exports it (the batch as -1)."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w1"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
             helper.make_node("Reshape", ["cat", "s5"], ["v"]),
             helper.make_node("Transpose", ["v"], ["t"], perm=list(perm)),
             helper.make_node("Reshape", ["t", "s4"], ["shuf"]),
             helper.make_node("Split", ["shuf", "halves"], ["h0", "h1"], axis=1),
             helper.make_node("Conv", ["h0", "w2"], ["y0"]),
             helper.make_node("Conv", ["h1", "w3"], ["y1"])]
    inits = [init("w0", 6, 3, 3, 3), init("w1", 6, 3, 3, 3), init("w2", 4, 6, 1, 1),
             init("w3", 5, 6, 1, 1),
             numpy_helper.from_array(np.array([batch_dim, 2, 6, 7, 8], np.int64), "s5"),
             numpy_helper.from_array(np.array([batch_dim, 12, 7, 8], np.int64), "s4"),
             numpy_helper.from_array(np.array([6, 6], np.int64), "halves")]
    return model(nodes, [vi("x", ["n", 3, 7, 8])], [vi("y0", None), vi("y1", None)], inits)


@pytest.mark.parametrize("batch_dim", [-1, 0])
def test_channel_shuffle_and_split_stay_channels_last(batch_dim):
    """The shuffle runs as the swap of the last two axes of [N, H, W, 2, C/2] and the Split
    along the permuted axis: transposes only at the image and the two outputs."""
    m = shuffle_unit(batch_dim)
    sess = session(m)
    got = steps(sess)
    # the image in, two outputs back, the shuffle's own (channels-last) transpose
    assert got["Transpose"] == 4 and got["Split"] == 1 and got["NhwcFusedConv"] == 4, got
    names = {s.name for s in sess._exec.steps if s.op_type in ("Split", "Reshape")}
    assert all(n.endswith("/nhwc") for n in names), names
    assert_matches(sess, m, {"x": RNG.standard_normal((2, 3, 7, 8)).astype(np.float32)})


def test_a_transpose_that_is_not_a_shuffle_stays_nchw():
    """Reshape [N, 2, C/2, H, W] followed by another permutation: left NCHW."""
    m = shuffle_unit(perm=(0, 1, 2, 4, 3))
    m.graph.node[5].input[1] = "s4b"
    m.graph.initializer.append(numpy_helper.from_array(np.array([-1, 12, 8, 7], np.int64),
                                                       "s4b"))
    sess = session(m)
    assert not any(s.name.endswith("/nhwc") for s in sess._exec.steps
                   if s.op_type == "Reshape"), [s.name for s in sess._exec.steps]
    assert_matches(sess, m, {"x": RNG.standard_normal((2, 3, 7, 8)).astype(np.float32)})


# --------------------------------------------------------------------------------------------
# quantized convs
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qdq_cnns(tmp_path_factory):
    """MobileNetV2 (depthwise convs, residual QLinearAdds) and ResNet-50 (strided and 1x1
    convs, a MaxPool) at 32x32 through onnxruntime's quantize_static: QDQ, uint8 activations,
    int8 weights per channel."""
    from providers.xnnpack_like.cnn_models import mobilenetv2, quantize_qdq, resnet50

    folder = tmp_path_factory.mktemp("qdq_nhwc")
    return {name: quantize_qdq(make(32, classes=10), folder / name, (1, 3, 32, 32))
            for name, make in (("mobilenetv2", mobilenetv2), ("resnet50", resnet50))}


@pytest.mark.parametrize("name", ["mobilenetv2", "resnet50"])
def test_quantized_convs_go_channels_last_with_the_same_bytes(qdq_cnns, name):
    """At the layout level every QLinearConv of a QDQ CNN runs channels-last (com.microsoft
    QLinearConv, channels_last=1) with its QLinearAdds between, two transposes left at the
    edges; the integer kernels compute the same sums and the same requantization, so the
    output equals the extended level's (channels-first) exactly, and onnxruntime's within its
    requantization rounding."""
    m = qdq_cnns[name].SerializeToString()
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)

    def session(level):
        so = onnxplex.SessionOptions()
        so.graph_optimization_level = level
        return onnxplex.InferenceSession(m, so, providers=["cpu_mlas"])

    nhwc, nchw = session(GOL.ORT_ENABLE_ALL), session(GOL.ORT_ENABLE_EXTENDED)
    convs = [n for n in nhwc.model.nodes if n.op_type == "QLinearConv"]
    assert convs and all(n.domain == "com.microsoft" and n.attributes["channels_last"].value == 1
                         for n in convs)
    ops = collections.Counter(n.op_type for n in nhwc.model.nodes)
    assert ops["Transpose"] == 2, ops
    got, want = nhwc.run(None, {"x": x})[0], nchw.run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
    theirs = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # onnxruntime's own graphs (QDQ in float, and fused) differ by rounding ties differently
    # in deep nets; onnxplex's output stays within a few of its output's steps of it
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = ort.InferenceSession(m, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    step = float(np.abs(theirs).max()) / 255
    assert np.abs(got - theirs).max() <= max(3 * step, 2 * float(np.abs(plain - theirs).max()))
