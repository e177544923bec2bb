"""The layout level's squeeze-excite and SiLU/HardSwish handling (onnxplex.optimizer._layout):
``Conv -> Mul(y, Sigmoid(y))`` (SiLU), ``HardSwish`` and ``Mul(y, HardSigmoid(y))`` fused into
the channels-last conv as its activation, near misses left alone, and a squeeze-excite block
(pooled mean -> 1x1 convs -> gate -> ``Mul(x, gate)`` broadcast over H and W) kept
channels-last without transposes; outputs against onnxruntime on the original model."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex

ort.set_default_logger_severity(3)

F = TensorProto.FLOAT
GOL = onnxplex.GraphOptimizationLevel
RNG = np.random.default_rng(25)
SWISH_PASS = "NhwcFusedConv + activation -> NhwcFusedConv"


def init(name, *shape, dtype=np.float32):
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.4).astype(dtype), name)


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def model(nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def optimized(m, tmp_path, level=GOL.ORT_ENABLE_ALL):
    """The session and its optimized graph (saved and read back)."""
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = level
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    sess = onnxplex.InferenceSession(m.SerializeToString(), so, providers=["cpu_mlas"])
    return sess, onnx.load(str(tmp_path / "opt.onnx"))


def ops(m):
    return collections.Counter(n.op_type for n in m.graph.node)


def activations(m):
    return sorted(helper.get_attribute_value(a).decode() for n in m.graph.node
                  for a in n.attribute if n.op_type == "NhwcFusedConv" and a.name == "activation")


def changes(sess, name):
    return {r.name: r.changes for r in sess._optimizer_reports}.get(name, 0)


def assert_matches_onnxruntime(sess, m, feeds):
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    got = sess.run(None, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def feeds_for(shape=(1, 8, 9, 10)):
    return {"x": RNG.standard_normal(shape).astype(np.float32)}


def conv_then(act_nodes, out="y", extra_outputs=(), depthwise=False, inits=()):
    """x -> Conv (3x3; depthwise when asked) -> c -> act_nodes -> ``out`` -> Conv 1x1 -> z."""
    w = init("w", 8, 1, 3, 3) if depthwise else init("w", 8, 8, 3, 3)
    attrs = dict(pads=[1, 1, 1, 1], group=8 if depthwise else 1)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs), *act_nodes,
             helper.make_node("Conv", [out, "w2"], ["z"])]
    outputs = [vi("z", None)] + [vi(o, None) for o in extra_outputs]
    return model(nodes, [vi("x", [1, 8, 9, 10])], outputs,
                 [w, init("b", 8), init("w2", 6, 8, 1, 1), *inits])


SILU = [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]


@pytest.mark.parametrize("depthwise", [False, True])
@pytest.mark.parametrize("form", ["silu", "silu_swapped", "hardswish", "mul_hardsigmoid"])
def test_conv_activation_fused_into_the_channels_last_conv(form, depthwise, tmp_path):
    act = {
        "silu": SILU,
        "silu_swapped": [helper.make_node("Sigmoid", ["c"], ["s"]),
                         helper.make_node("Mul", ["s", "c"], ["y"])],
        "hardswish": [helper.make_node("HardSwish", ["c"], ["y"])],
        "mul_hardsigmoid": [helper.make_node("HardSigmoid", ["c"], ["s"], alpha=1 / 6, beta=0.5),
                            helper.make_node("Mul", ["c", "s"], ["y"])],
    }[form]
    m = conv_then(act, depthwise=depthwise)
    sess, opt = optimized(m, tmp_path)
    kind = "Swish" if form.startswith("silu") else "HardSwish"
    assert activations(opt) == [kind]
    got = ops(opt)
    assert got["NhwcFusedConv"] == 2 and got["Transpose"] == 2, got
    assert not {"Sigmoid", "HardSigmoid", "HardSwish", "Mul"} & set(got), got
    assert changes(sess, SWISH_PASS) == 1
    assert_matches_onnxruntime(sess, m, feeds_for())


def test_extended_level_model_stays_onnxruntime_s(tmp_path):
    """Below the layout level the SiLU is onnxruntime's QuickGelu, not a conv activation
    (onnxruntime's FusedConv has no Swish): the saved model runs in onnxruntime."""
    m = conv_then(SILU)
    sess, opt = optimized(m, tmp_path, GOL.ORT_ENABLE_EXTENDED)
    got = ops(opt)
    assert got["QuickGelu"] == 1 and "NhwcFusedConv" not in got and "Sigmoid" not in got, got
    assert_matches_onnxruntime(sess, m, feeds_for())
    feeds = feeds_for()
    saved = ort.InferenceSession(str(tmp_path / "opt.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(saved.run(None, feeds)[0], sess.run(None, feeds)[0], rtol=1e-4,
                               atol=1e-5)


NEAR_MISSES = {
    # the gate is also a graph output
    "sigmoid_is_graph_output": (SILU, ("s",), ()),
    # the conv's output is a graph output (the middle of the pattern)
    "conv_is_graph_output": (SILU, ("c",), ()),
    # the gate has another reader
    "sigmoid_read_elsewhere": (SILU + [helper.make_node("Relu", ["s"], ["r"])], ("r",), ()),
    # the conv's output has a third reader
    "conv_read_elsewhere": (SILU + [helper.make_node("Relu", ["c"], ["r"])], ("r",), ()),
    # Mul by the sigmoid of the conv's output, but times another tensor
    "mul_other_operand": ([helper.make_node("Sigmoid", ["c"], ["s"]),
                           helper.make_node("Relu", ["c"], ["r"]),
                           helper.make_node("Mul", ["r", "s"], ["y"])], (), ()),
    # Mul(c, c): no gate
    "mul_square": ([helper.make_node("Mul", ["c", "c"], ["y"])], (), ()),
    # HardSigmoid with other parameters than HardSwish's
    "hardsigmoid_default_alpha": ([helper.make_node("HardSigmoid", ["c"], ["s"]),
                                   helper.make_node("Mul", ["c", "s"], ["y"])], (), ()),
    # HardSwish whose input is also read elsewhere
    "hardswish_shared": ([helper.make_node("HardSwish", ["c"], ["y"]),
                          helper.make_node("Relu", ["c"], ["r"])], ("r",), ()),
}


@pytest.mark.parametrize("case", list(NEAR_MISSES))
def test_near_misses_are_not_fused(case, tmp_path):
    act, extra, inits = NEAR_MISSES[case]
    m = conv_then(act, extra_outputs=extra, inits=inits)
    sess, opt = optimized(m, tmp_path)
    assert activations(opt) == [], ops(opt)
    assert changes(sess, SWISH_PASS) == 0
    assert_matches_onnxruntime(sess, m, feeds_for())


def test_float64_is_not_fused(tmp_path):
    d = TensorProto.DOUBLE
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), *SILU]
    m = model(nodes, [vi("x", [1, 8, 9, 10], d)], [vi("y", None, d)],
              [init("w", 8, 8, 3, 3, dtype=np.float64)])
    sess, opt = optimized(m, tmp_path)
    assert "NhwcFusedConv" not in ops(opt) and {"Sigmoid", "Mul"} <= set(ops(opt))
    x = RNG.standard_normal((1, 8, 9, 10))   # (onnxruntime's CPU Conv has no float64)
    plain, _ = optimized(m, tmp_path, GOL.ORT_DISABLE_ALL)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], plain.run(None, {"x": x})[0],
                               rtol=1e-10)


# ---- squeeze-excite ---------------------------------------------------------------------------


def se_block(gate="Sigmoid", pool="ReduceMean", gate_first=False):
    """Conv 3x3 + SiLU -> squeeze-excite (pooled mean, 1x1 reduce + Relu, 1x1 expand, gate,
    ``Mul`` over H and W) -> 1x1 project + a per-channel constant Add -> graph output."""
    gate_attrs = dict(alpha=1 / 6, beta=0.5) if gate == "HardSigmoid" else {}
    pool_node = (helper.make_node("ReduceMean", ["a"], ["p"], axes=[2, 3], keepdims=1)
                 if pool == "ReduceMean" else helper.make_node("GlobalAveragePool", ["a"], ["p"]))
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Mul", ["c", "s"], ["a"]),
        pool_node,
        helper.make_node("Conv", ["p", "w1", "b1"], ["r"]),
        helper.make_node("Relu", ["r"], ["rr"]),
        helper.make_node("Conv", ["rr", "w2", "b2"], ["e"]),
        helper.make_node(gate, ["e"], ["g"], **gate_attrs),
        helper.make_node("Mul", ["g", "a"] if gate_first else ["a", "g"], ["se"]),
        helper.make_node("Conv", ["se", "w3"], ["o"]),
        helper.make_node("Add", ["o", "k"], ["y"]),
    ]
    inits = [init("w0", 16, 8, 3, 3), init("b0", 16), init("w1", 4, 16, 1, 1), init("b1", 4),
             init("w2", 16, 4, 1, 1), init("b2", 16), init("w3", 8, 16, 1, 1),
             init("k", 8, 1, 1)]
    return model(nodes, [vi("x", [2, 8, 9, 10])], [vi("y", None)], inits)


@pytest.mark.parametrize("gate,pool,gate_first", [("Sigmoid", "ReduceMean", False),
                                                  ("HardSigmoid", "GlobalAveragePool", True)])
def test_squeeze_excite_stays_channels_last(gate, pool, gate_first, tmp_path):
    m = se_block(gate, pool, gate_first)
    sess, opt = optimized(m, tmp_path)
    got = ops(opt)
    # one transpose in (the image), one out (the graph output); the SE Mul channels-last
    assert got["Transpose"] == 2, got
    assert got["NhwcFusedConv"] == 4 and activations(opt).count("Swish") == 1, got
    assert_matches_onnxruntime(sess, m, {"x": RNG.standard_normal((2, 8, 9, 10))
                                         .astype(np.float32)})


def test_broadcast_along_the_image_stays_nchw(tmp_path):
    """A Mul by a [N, C, H, 1] tensor varies along H: not a per-image gate; it stays NCHW
    (transposes around it), with the same results."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMean", ["c"], ["p"], axes=[3], keepdims=1),
             helper.make_node("Mul", ["c", "p"], ["m"]),
             helper.make_node("Conv", ["m", "w2"], ["y"])]
    m = model(nodes, [vi("x", [1, 8, 9, 10])], [vi("y", None)],
              [init("w", 8, 8, 3, 3), init("w2", 6, 8, 1, 1)])
    sess, opt = optimized(m, tmp_path)
    mul = next(n for n in opt.graph.node if n.op_type == "Mul")
    assert not any(i.endswith("_nhwc") for i in mul.input), list(mul.input)
    assert_matches_onnxruntime(sess, m, feeds_for())


# ---- the gate's Mul fused into the 1x1 conv after it --------------------------------------------

SCALE_PASS = "Mul(x, channel gate) + 1x1 NhwcFusedConv -> NhwcFusedConv"


def gated_conv(proj_attrs=None, w3=(8, 16, 1, 1), extra_outputs=(), relu_reads_product=False,
               gate_const=False, batch=2):
    """Conv 3x3 -> a -> pooled gate g [N, 16, 1, 1] (or a constant [16, 1, 1]) -> Mul(a, g) ->
    a conv (1x1 by default) -> y."""
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("ReduceMean", ["a"], ["p"], axes=[2, 3], keepdims=1),
        helper.make_node("Conv", ["p", "w1"], ["e"]),
        helper.make_node("Sigmoid", ["e"], ["g"]),
        helper.make_node("Mul", ["a", "k" if gate_const else "g"], ["se"]),
        helper.make_node("Conv", ["se", "w3", "b3"], ["y"], **(proj_attrs or {})),
    ]
    outputs = [vi("y", None)] + [vi(o, None) for o in extra_outputs]
    if relu_reads_product:
        nodes.append(helper.make_node("Relu", ["se"], ["r"]))
        outputs.append(vi("r", None))
    inits = [init("w0", 16, 8, 3, 3), init("b0", 16), init("w1", 16, 16, 1, 1),
             init("w3", *w3), init("b3", w3[0]), init("k", 16, 1, 1)]
    return model(nodes, [vi("x", [batch, 8, 9, 10])], outputs, inits)


def se_feeds(batch=2):
    return {"x": RNG.standard_normal((batch, 8, 9, 10)).astype(np.float32)}


@pytest.mark.parametrize("batch,gate_const", [(2, False), (1, False), (2, True)])
def test_gate_mul_fused_into_the_pointwise_conv(batch, gate_const, tmp_path):
    m = gated_conv(gate_const=gate_const, batch=batch)
    sess, opt = optimized(m, tmp_path)
    assert "Mul" not in ops(opt), ops(opt)
    (scaled,) = [n for n in opt.graph.node if n.op_type == "NhwcFusedConv" and len(n.input) == 5]
    assert scaled.input[2] and not scaled.input[3]   # B kept, no Z
    assert changes(sess, SCALE_PASS) == 1
    assert_matches_onnxruntime(sess, m, se_feeds(batch))


@pytest.mark.parametrize("case", ["3x3", "strided", "padded", "grouped", "product_read_elsewhere",
                                  "product_is_graph_output"])
def test_gate_mul_not_fused(case, tmp_path):
    kw = {
        "3x3": dict(proj_attrs=dict(pads=[1, 1, 1, 1]), w3=(8, 16, 3, 3)),
        "strided": dict(proj_attrs=dict(strides=[2, 2])),
        "padded": dict(proj_attrs=dict(pads=[1, 1, 1, 1])),
        "grouped": dict(proj_attrs=dict(group=2), w3=(8, 8, 1, 1)),
        "product_read_elsewhere": dict(relu_reads_product=True),
        "product_is_graph_output": dict(extra_outputs=("se",)),
    }[case]
    m = gated_conv(**kw)
    sess, opt = optimized(m, tmp_path)
    assert "Mul" in ops(opt) and changes(sess, SCALE_PASS) == 0
    assert_matches_onnxruntime(sess, m, se_feeds())
