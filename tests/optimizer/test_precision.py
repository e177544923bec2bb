"""Half precision computed in float32 (_precision): fp16 and bf16 graphs give exactly what
the same graph in float32 on the widened weights gives, cast back at the outputs; the model's
own Casts at the edges are bypassed as onnxruntime bypasses them; nodes the pass cannot widen
keep their half values; the fusions of float graphs fire on half-precision ones."""

from __future__ import annotations

import collections
import math

import ml_dtypes
import numpy as np
import onnx
import pytest
from models import transformer_encoder
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex import GraphOptimizationLevel as Level

F, H, BF = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16
_NP = {H: np.float16, BF: ml_dtypes.bfloat16, F: np.float32}
PASS = "half precision computed in float32"


def _session(model, level=Level.ORT_ENABLE_ALL, providers=("cpu_mlas",)):
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = level
    return onnxplex.InferenceSession(model.SerializeToString(), so, providers=list(providers))


def _mlp(dtype: int, io: int | None = None) -> onnx.ModelProto:
    """x[2,8] -> MatMul -> Add -> Relu -> Reshape -> Softmax -> Mul(0.5) -> y, in ``dtype``
    (``io``: the type of x and y, with Casts at the edges when it differs)."""
    io = dtype if io is None else io
    rng = np.random.default_rng(0)
    t = _NP[dtype]
    inits = [numpy_helper.from_array(rng.standard_normal((8, 6)).astype(t), "w"),
             numpy_helper.from_array(rng.standard_normal(6).astype(t), "b"),
             numpy_helper.from_array(np.array([3, 4], np.int64), "shape"),
             numpy_helper.from_array(np.array(0.5, t), "half")]
    if dtype == BF:   # numpy_helper writes ml_dtypes' bfloat16 as raw data of the right type
        for init in inits:
            assert init.data_type in (BF, TensorProto.INT64)
    nodes = [helper.make_node("MatMul", ["xh", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("Mul", ["p", "half"], ["yh"])]
    if io != dtype:
        nodes.insert(0, helper.make_node("Cast", ["x"], ["xh"], to=dtype))
        nodes.append(helper.make_node("Cast", ["yh"], ["y"], to=io))
    else:
        for n in (nodes[0], nodes[-1]):
            n.input[:] = ["x" if v == "xh" else v for v in n.input]
            n.output[:] = ["y" if v == "yh" else v for v in n.output]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", io, [2, 8])],
                          [helper.make_tensor_value_info("y", io, [3, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _widened(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same graph in float32 throughout: half initializers and value types widened."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for k, init in enumerate(m.graph.initializer):
        if init.data_type in (H, BF):
            arr = numpy_helper.to_array(init).astype(np.float32)
            m.graph.initializer[k].CopyFrom(numpy_helper.from_array(arr, init.name))
    for vi in (*m.graph.input, *m.graph.output, *m.graph.value_info):
        if vi.type.tensor_type.elem_type in (H, BF):
            vi.type.tensor_type.elem_type = F
    for node in m.graph.node:
        for a in node.attribute:
            if a.name == "to" and a.i in (H, BF):
                a.i = F
    return m


def _ops(sess) -> collections.Counter:
    return collections.Counter(n.op_type for n in sess.model.nodes)


def _changes(sess) -> int:
    return next(r.changes for r in sess._optimizer_reports if r.name == PASS)


@pytest.mark.parametrize("dtype", [H, BF], ids=["float16", "bfloat16"])
def test_half_graph_equals_float32_graph_cast_back(dtype):
    """Inputs and outputs in half precision: the result is the float32 graph's on the widened
    inputs and weights, rounded once at the output (exactly, same kernels)."""
    model = _mlp(dtype)
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(_NP[dtype])
    sess = _session(model)
    (got,) = sess.run(None, {"x": x})
    assert got.dtype == _NP[dtype] and sess.get_outputs()[0].name == "y"
    assert sess.get_outputs()[0].type == sess.get_inputs()[0].type
    (want,) = _session(_widened(model)).run(None, {"x": x.astype(np.float32)})
    np.testing.assert_array_equal(got, want.astype(_NP[dtype]))
    assert _changes(sess) > 0
    # the only half values left: the graph's input and output, and their two Casts
    ops = _ops(sess)
    assert ops["Cast"] == 2, ops


def test_keep_io_types_edges_are_bypassed():
    """A float32-io model (the converters' keep_io_types): no Cast is left, the graph is the
    float32 one on widened weights."""
    model = _mlp(H, io=F)
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    sess = _session(model)
    assert _ops(sess)["Cast"] == 0, _ops(sess)
    (want,) = _session(_widened(model)).run(None, {"x": x})
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)


def test_edges_round_as_onnxruntime():
    """onnxruntime computes a float16 Relu on CPU in float32 and drops the float -> float16
    -> float Cast pair around it: 1e-9 and 7e4 (zero and inf in float16) come through. A lone
    Cast pair is the model's own rounding, kept by both."""
    ort = pytest.importorskip("onnxruntime")

    def model(middle):
        nodes = [helper.make_node("Cast", ["x"], ["a"], to=H)]
        nodes += [helper.make_node(op, ["a"], ["b"]) for op in middle] or []
        nodes.append(helper.make_node("Cast", ["b" if middle else "a"], ["y"], to=F))
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [4])],
                              [helper.make_tensor_value_info("y", F, [4])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)

    x = np.array([1e-9, 1.0001, 7e4, -3.0], np.float32)
    for middle in (["Relu"], ["Sigmoid"], []):
        m = model(middle)
        want = ort.InferenceSession(m.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        got = _session(m).run(None, {"x": x})[0]
        # (Sigmoid's float32 implementations differ by an ulp)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=str(middle))


def test_below_extended_level_runs_half_arithmetic():
    """At ORT_ENABLE_BASIC the graph runs as written (numpy's float16 arithmetic)."""
    model = _mlp(H)
    sess = _session(model, Level.ORT_ENABLE_BASIC)
    assert all(r.name != PASS for r in sess._optimizer_reports)
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float16)
    w = numpy_helper.to_array(model.graph.initializer[0])
    b = numpy_helper.to_array(model.graph.initializer[1])
    r = np.maximum(x @ w + b, np.float16(0)).reshape(3, 4)
    e = np.exp(r - r.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True) * np.float16(0.5)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0].astype(np.float32),
                               want.astype(np.float32), rtol=5e-3, atol=1e-3)


def test_nodes_that_cannot_widen_keep_half_values():
    """A Cast to float16 inside the graph (its type is the point) and an If (a body) stay as
    they are: the region around them is cast to float32 and back at their edges."""
    then_out = helper.make_tensor_value_info("t", H, [3])
    else_out = helper.make_tensor_value_info("e", H, [3])
    then_g = helper.make_graph([helper.make_node("Neg", ["h"], ["t"])], "then", [], [then_out])
    else_g = helper.make_graph([helper.make_node("Abs", ["h"], ["e"])], "else", [], [else_out])
    nodes = [helper.make_node("Exp", ["x"], ["ex"]),
             helper.make_node("Cast", ["ex"], ["h32"], to=F),
             helper.make_node("Sqrt", ["h32"], ["sq"]),
             helper.make_node("Cast", ["sq"], ["h"], to=H),
             helper.make_node("If", ["cond"], ["i"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Add", ["i", "x"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", H, [3]),
                                       helper.make_tensor_value_info("cond", TensorProto.BOOL,
                                                                     [])],
                          [helper.make_tensor_value_info("y", H, [3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    x = np.array([0.5, -1.0, 2.0], np.float16)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        got = _session(model).run(None, feeds)[0]
        h = np.sqrt(np.exp(x.astype(np.float32))).astype(np.float16)   # the model's rounding
        i = -h if cond else np.abs(h)
        want = (i.astype(np.float32) + x.astype(np.float32)).astype(np.float16)
        np.testing.assert_array_equal(got, want)
        assert got.dtype == np.float16


def _erf_gelu(divisor: float) -> onnx.ModelProto:
    """x * 0.5 * (1 + erf(x / divisor)), all float16 (float32 io)."""
    c = {k: numpy_helper.from_array(np.array(v, np.float16), k)
         for k, v in (("d", divisor), ("one", 1.0), ("half", 0.5))}
    nodes = [helper.make_node("Cast", ["x"], ["xh"], to=H),
             helper.make_node("Div", ["xh", "d"], ["q"]),
             helper.make_node("Erf", ["q"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["p"]),
             helper.make_node("Mul", ["xh", "p"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["yh"]),
             helper.make_node("Cast", ["yh"], ["y"], to=F)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 5])],
                          [helper.make_tensor_value_info("y", F, [2, 5])], list(c.values()))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_widened_constants_match_fusion_patterns_at_their_stored_precision():
    """sqrt(2) stored in float16 is 1.4140625, 1e-4 off float32's: GELU still fuses (as
    onnxruntime compares a float16 initializer with the expected value rounded to float16);
    a divisor that is not sqrt(2) in float16 does not."""
    x = np.linspace(-3, 3, 10, dtype=np.float32).reshape(2, 5)
    sess = _session(_erf_gelu(math.sqrt(2.0)))
    assert _ops(sess)["Gelu"] == 1, _ops(sess)
    want = x * 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-6)
    other = _session(_erf_gelu(1.5))
    assert _ops(other)["Gelu"] == 0 and _ops(other)["Erf"] == 1, _ops(other)


def test_fp16_encoder_fuses_as_the_float32_one_and_matches_onnxruntime():
    """A BERT-style encoder converted with onnxruntime's float16 tool (keep_io_types): the
    same fusions as in float32, no Cast left, and within fp16 error of onnxruntime (both
    compute in float32 on the same half weights)."""
    ort = pytest.importorskip("onnxruntime")
    f16 = pytest.importorskip("onnxruntime.transformers.float16")
    model = f16.convert_float_to_float16(transformer_encoder(), keep_io_types=True)
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 1000, (2, 7)).astype(np.int64),
             "attention_mask": np.ones((2, 7), np.int64)}
    feeds["attention_mask"][1, 5:] = 0
    sess = _session(model)
    ops = _ops(sess)
    assert ops["Attention"] == 2 and ops["SkipLayerNormalization"] == 4, ops
    assert ops["BiasGelu"] == 2 and ops["Erf"] == 0, ops
    (got,) = sess.run(None, feeds)
    (want,) = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, feeds)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
    assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max()


def test_large_widened_weights_are_computed_when_read():
    """A half weight of 1 MB or more as float32 is a lazy tensor in the graph, computed when
    its kernel packs it (the session holds no float32 copy beside the packed one); the result
    is the float32 graph's."""
    import onnx_ir as ir

    w = np.random.default_rng(2).standard_normal((512, 512)).astype(np.float16)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", H, [3, 512])],
                          [helper.make_tensor_value_info("y", H, [3, 512])],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    sess = _session(model)
    (node,) = [n for n in sess.model.nodes if n.op_type == "MatMul"]
    assert isinstance(node.inputs[1].const_value, ir.LazyTensor)
    x = np.random.default_rng(3).standard_normal((3, 512)).astype(np.float16)
    (want,) = _session(_widened(model)).run(None, {"x": x.astype(np.float32)})
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want.astype(np.float16))
