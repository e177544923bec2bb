"""Extended-level transformer fusions (_fusions_transformer): each fires on a small graph, and
the optimized session gives the unoptimized session's results."""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest
from models import transformer_encoder
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex import GraphOptimizationLevel as Level

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _c(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def _vi(name, shape):
    return helper.make_tensor_value_info(name, F, shape)


def _compare(model, feed, rtol=1e-4, atol=1e-5):
    """Run unoptimized and fully optimized; return the optimized session's op counts."""
    off, on = onnxplex.SessionOptions(), onnxplex.SessionOptions()
    off.graph_optimization_level = Level.ORT_DISABLE_ALL
    on.graph_optimization_level = Level.ORT_ENABLE_ALL
    s_off = onnxplex.InferenceSession(model, off, providers=["cpu_mlas"])
    s_on = onnxplex.InferenceSession(model, on, providers=["cpu_mlas"])
    for a, b in zip(s_off.run(None, feed), s_on.run(None, feed)):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)
    return collections.Counter(n.op_type for n in s_on.model.nodes)


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_transformer_encoder_fuses_attention_skip_layer_norm_and_gelu():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, (2, 7)).astype(np.int64)
    mask = np.ones((2, 7), np.int64)
    mask[1, 5:] = 0
    ops = _compare(transformer_encoder(), {"input_ids": ids, "attention_mask": mask})
    assert ops["Attention"] == 2
    assert ops["SkipLayerNormalization"] == 4
    assert ops["BiasGelu"] == 2
    assert ops["Softmax"] == 0 and ops["Erf"] == 0 and ops["Transpose"] == 0
    assert sum(ops.values()) < 30   # 96 nodes unoptimized


def test_unread_skip_layer_norm_outputs_stay_unnamed():
    """SkipLayerNormalization's mean and inverse std, read by nothing, are left unnamed so its
    kernel skips them, and later rule sets (the attention fusion runs after it) must not name
    them again (onnx-ir's NameFixPass after each set did)."""
    sess = onnxplex.InferenceSession(transformer_encoder(), providers=["cpu_mlas"])
    skips = [n for n in sess.model.nodes if n.op_type == "SkipLayerNormalization"]
    assert len(skips) == 4
    for node in skips:
        assert all(out.name == "" for out in node.outputs[1:3]), [o.name for o in node.outputs]


def test_erf_gelu():
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]),
             helper.make_node("Mul", ["x", "e1"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    m = _model(nodes, [_vi("x", [2, 8])], [_vi("y", [2, 8])],
               [_c("sqrt2", math.sqrt(2)), _c("one", 1.0), _c("half", 0.5)])
    ops = _compare(m, {"x": _rand(2, 8)})
    assert dict(ops) == {"Gelu": 1}


@pytest.mark.parametrize("form", ["gpt2", "onnxscript"])
def test_fast_gelu(form):
    c = math.sqrt(2 / math.pi)
    nodes = [helper.make_node("Pow", ["x", "three"], ["p"]),
             helper.make_node("Mul", ["k", "p"], ["kp"]),
             helper.make_node("Add", ["x", "kp"], ["u"]),
             helper.make_node("Mul", ["c", "u"], ["v"]),
             helper.make_node("Tanh", ["v"], ["t"]),
             helper.make_node("Add", ["one", "t"], ["t1"])]
    if form == "gpt2":   # 0.5 * x * (1 + tanh(...))
        nodes += [helper.make_node("Mul", ["half", "x"], ["hx"]),
                  helper.make_node("Mul", ["hx", "t1"], ["y"])]
    else:                # x * (0.5 * (1 + tanh(...)))
        nodes += [helper.make_node("Mul", ["half", "t1"], ["ht"]),
                  helper.make_node("Mul", ["x", "ht"], ["y"])]
    m = _model(nodes, [_vi("x", [2, 8])], [_vi("y", [2, 8])],
               [_c("three", 3.0), _c("k", 0.044715), _c("c", c), _c("one", 1.0),
                _c("half", 0.5)])
    ops = _compare(m, {"x": _rand(2, 8)})
    assert dict(ops) == {"FastGelu": 1}


def test_bias_gelu():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]),
             helper.make_node("Add", ["mm", "b"], ["a"]),
             helper.make_node("Div", ["a", "sqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]),
             helper.make_node("Mul", ["a", "e1"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    m = _model(nodes, [_vi("x", [2, 3, 8])], [_vi("y", [2, 3, 16])],
               [_c("w", _rand(8, 16, seed=1)), _c("b", _rand(16, seed=2)),
                _c("sqrt2", math.sqrt(2)), _c("one", 1.0), _c("half", 0.5)])
    ops = _compare(m, {"x": _rand(2, 3, 8)})
    assert dict(ops) == {"MatMul": 1, "BiasGelu": 1}


def _decomposed_layer_norm(opset, square="Pow", norm="Div"):
    if opset >= 18:
        rm = [helper.make_node("ReduceMean", ["x", "axes"], ["mean"]),
              helper.make_node("ReduceMean", ["sq", "axes"], ["var"])]
        inits = [numpy_helper.from_array(np.array([-1], np.int64), "axes")]
    else:
        rm = [helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
              helper.make_node("ReduceMean", ["sq"], ["var"], axes=[2])]
        inits = []
    sq = (helper.make_node("Pow", ["d", "two"], ["sq"]) if square == "Pow"
          else helper.make_node("Mul", ["d", "d"], ["sq"]))
    if norm == "Div":
        nrm = [helper.make_node("Div", ["d", "std"], ["n"])]
    else:
        nrm = [helper.make_node("Reciprocal", ["std"], ["r"]),
               helper.make_node("Mul", ["d", "r"], ["n"])]
    nodes = [rm[0], helper.make_node("Sub", ["x", "mean"], ["d"]), sq, rm[1],
             helper.make_node("Add", ["var", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["std"]), *nrm,
             helper.make_node("Mul", ["n", "gamma"], ["s"]),
             helper.make_node("Add", ["s", "beta"], ["y"])]
    inits += [_c("two", 2.0), _c("eps", 1e-5), _c("gamma", 1 + 0.1 * _rand(16, seed=1)),
              _c("beta", _rand(16, seed=2))]
    return _model(nodes, [_vi("x", [2, 3, 16])], [_vi("y", [2, 3, 16])], inits, opset=opset)


@pytest.mark.parametrize("opset,square,norm", [(13, "Pow", "Div"), (16, "Mul", "Recip"),
                                               (17, "Pow", "Div"), (18, "Pow", "Recip")])
def test_layer_norm_from_decomposed(opset, square, norm):
    ops = _compare(_decomposed_layer_norm(opset, square, norm), {"x": _rand(2, 3, 16) * 3})
    assert dict(ops) == {"LayerNormalization": 1}


def test_skip_layer_norm():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]),
             helper.make_node("Add", ["mm", "b"], ["mb"]),
             helper.make_node("Add", ["skip", "mb"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"],
                              epsilon=1e-5),
             helper.make_node("Relu", ["s"], ["z"])]   # the sum is used too
    m = _model(nodes, [_vi("x", [2, 3, 16]), _vi("skip", [2, 3, 16])],
               [_vi("y", [2, 3, 16]), _vi("z", [2, 3, 16])],
               [_c("w", _rand(16, 16, seed=1)), _c("b", _rand(16, seed=2)),
                _c("gamma", _rand(16, seed=3)), _c("beta", _rand(16, seed=4))])
    ops = _compare(m, {"x": _rand(2, 3, 16), "skip": _rand(2, 3, 16, seed=5)})
    assert dict(ops) == {"MatMul": 1, "SkipLayerNormalization": 1, "Relu": 1}


def test_rms_norm_and_skip_rms_norm():
    nodes = [helper.make_node("Add", ["x", "skip"], ["s"]),
             helper.make_node("Pow", ["s", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["mse"]),
             helper.make_node("Sqrt", ["mse"], ["rms"]),
             helper.make_node("Reciprocal", ["rms"], ["r"]),
             helper.make_node("Mul", ["s", "r"], ["n"]),
             helper.make_node("Mul", ["gamma", "n"], ["y"])]
    m = _model(nodes, [_vi("x", [2, 3, 16]), _vi("skip", [2, 3, 16])], [_vi("y", [2, 3, 16])],
               [numpy_helper.from_array(np.array([-1], np.int64), "axes"), _c("two", 2.0),
                _c("eps", 1e-6), _c("gamma", _rand(16, seed=3))], opset=18)
    ops = _compare(m, {"x": _rand(2, 3, 16), "skip": _rand(2, 3, 16, seed=5)})
    assert dict(ops) == {"SkipSimplifiedLayerNormalization": 1}


@pytest.mark.parametrize("opset,square,norm,scale_first", [
    (17, "Pow", "Div1", True),      # T5's TorchScript export: Div(1, Sqrt), axes attribute
    (13, "Mul", "Div", False),      # x / rms, the square as Mul(x, x)
    (18, "Pow", "Recip", False),    # Mul(Reciprocal(rms), x): the reciprocal first
])
def test_rms_norm_from_the_spellings_onnxscript_lacks(opset, square, norm, scale_first):
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]) if square == "Pow"
             else helper.make_node("Mul", ["x", "x"], ["sq"])]
    inits = [_c("two", 2.0), _c("eps", 1e-6), _c("one", 1.0), _c("gamma", _rand(16, seed=3))]
    if opset >= 18:
        nodes.append(helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1))
        inits.append(numpy_helper.from_array(np.array([-1], np.int64), "axes"))
    else:
        nodes.append(helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1))
    nodes += [helper.make_node("Add", ["ms", "eps"], ["mse"]),
              helper.make_node("Sqrt", ["mse"], ["rms"])]
    if norm == "Div":
        nodes.append(helper.make_node("Div", ["x", "rms"], ["n"]))
    else:
        nodes += [helper.make_node("Div", ["one", "rms"], ["r"]) if norm == "Div1"
                  else helper.make_node("Reciprocal", ["rms"], ["r"]),
                  helper.make_node("Mul", ["r", "x"], ["n"])]
    nodes.append(helper.make_node("Mul", ["gamma", "n"] if scale_first else ["n", "gamma"],
                                  ["y"]))
    m = _model(nodes, [_vi("x", [2, 3, 16])], [_vi("y", [2, 3, 16])], inits, opset=opset)
    ops = _compare(m, {"x": _rand(2, 3, 16) * 2})
    assert dict(ops) == {"SimplifiedLayerNormalization": 1}


def test_rms_norm_not_fused_over_another_axis_or_numerator():
    """ReduceMean over a non-last axis, or Div(2, Sqrt): left as they are."""
    for axes, one in (([1], 1.0), ([-1], 2.0)):
        nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]),
                 helper.make_node("ReduceMean", ["sq"], ["ms"], axes=axes, keepdims=1),
                 helper.make_node("Add", ["ms", "eps"], ["mse"]),
                 helper.make_node("Sqrt", ["mse"], ["rms"]),
                 helper.make_node("Div", ["one", "rms"], ["r"]),
                 helper.make_node("Mul", ["x", "r"], ["n"]),
                 helper.make_node("Mul", ["n", "gamma"], ["y"])]
        m = _model(nodes, [_vi("x", [2, 16, 16])], [_vi("y", [2, 16, 16])],
                   [_c("two", 2.0), _c("eps", 1e-6), _c("one", one),
                    _c("gamma", _rand(16, seed=3))], opset=17)
        ops = _compare(m, {"x": _rand(2, 16, 16)})
        assert "SimplifiedLayerNormalization" not in dict(ops), (axes, one, ops)


def test_fused_matmul_transpose_and_scale():
    nodes = [helper.make_node("Transpose", ["b"], ["bt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["a", "bt"], ["mm"]),
             helper.make_node("Div", ["mm", "s"], ["y"])]
    m = _model(nodes, [_vi("a", [2, 4, 8]), _vi("b", [2, 5, 8])], [_vi("y", [2, 4, 5])],
               [_c("s", 4.0)])
    ops = _compare(m, {"a": _rand(2, 4, 8), "b": _rand(2, 5, 8, seed=1)})
    assert dict(ops) == {"FusedMatMul": 1}


def test_gpt2_style_causal_self_attention_to_mha():
    """Separate Q/K/V projections, additive causal bias, a final Reshape to [B*S, D]."""
    b, s, d, h = 2, 5, 16, 4
    dh = d // h
    nodes, inits = [], []
    for n in "qkv":
        inits += [_c(f"w{n}", _rand(d, d, seed=ord(n)) * 0.3), _c(f"b{n}", _rand(d, seed=7))]
        nodes += [helper.make_node("MatMul", ["x", f"w{n}"], [f"{n}m"]),
                  helper.make_node("Add", [f"{n}m", f"b{n}"], [f"{n}a"]),
                  helper.make_node("Reshape", [f"{n}a", "shp4"], [f"{n}r"]),
                  helper.make_node("Transpose", [f"{n}r"], [f"{n}t"], perm=[0, 2, 1, 3])]
    causal = np.triu(np.full((s, s), -1e9, np.float32), 1).reshape(1, 1, s, s)
    inits += [numpy_helper.from_array(np.array([b, s, h, dh], np.int64), "shp4"),
              numpy_helper.from_array(np.array([-1, d], np.int64), "shp2"),
              _c("causal", causal), _c("scale", 1 / math.sqrt(dh))]
    nodes += [helper.make_node("Transpose", ["kt"], ["ktt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["qt", "ktt"], ["sc"]),
              helper.make_node("Mul", ["sc", "scale"], ["scs"]),
              helper.make_node("Add", ["scs", "causal"], ["scm"]),
              helper.make_node("Softmax", ["scm"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "vt"], ["ctx"]),
              helper.make_node("Transpose", ["ctx"], ["ctxt"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ctxt", "shp2"], ["y"])]
    m = _model(nodes, [_vi("x", [b, s, d])], [_vi("y", [b * s, d])], inits)
    ops = _compare(m, {"x": _rand(b, s, d)})
    assert ops["Softmax"] == 0
    assert ops["Attention"] + ops["MultiHeadAttention"] == 1


def test_fusions_see_through_dimension_names_of_an_earlier_inference_run():
    """A model saved after onnx's shape inference (converters' tools run one) names each
    intermediate dimension it could not relate ``unk__<n>``, a fresh name per value; loading
    forgets those names so the encoder fuses as the model without value_info does."""
    import onnx

    plain = transformer_encoder()
    inferred = onnx.shape_inference.infer_shapes(plain)
    dims = [d.dim_param for v in inferred.graph.value_info
            for d in v.type.tensor_type.shape.dim]
    assert sum(d.startswith("unk__") for d in dims) > 10   # what the test is about
    want = collections.Counter(
        n.op_type for n in onnxplex.InferenceSession(plain, providers=["cpu_mlas"]).model.nodes)
    for source in (inferred, inferred.SerializeToString()):
        sess = onnxplex.InferenceSession(source, providers=["cpu_mlas"])
        assert collections.Counter(n.op_type for n in sess.model.nodes) == want
    assert want["Attention"] == 2 and want["SkipLayerNormalization"] == 4
