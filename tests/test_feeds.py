"""Feeds on the default CPU provider: bad ones are named, odd but valid ones are accepted, and
NaN/Inf and zero-size tensors come out as onnxruntime's (the oracle)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex import InvalidFeedError

FLOAT = TensorProto.FLOAT
RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 3)).astype(np.float32)
BIAS = RNG.standard_normal(3).astype(np.float32)


def two_input_model() -> onnx.ModelProto:
    """y = Relu(a + b) @ W + bias (bias an overridable initializer); n = a reduced to [batch]."""
    nodes = [
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("MatMul", ["r", "W"], ["m"]),
        helper.make_node("Add", ["m", "bias"], ["y"]),
        helper.make_node("ReduceSum", ["a"], ["n"], keepdims=0),
    ]
    g = helper.make_graph(
        nodes, "feeds",
        [helper.make_tensor_value_info("a", FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("b", FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("bias", FLOAT, [3])],
        [helper.make_tensor_value_info("y", FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("n", FLOAT, [])],
        initializer=[numpy_helper.from_array(W, "W"), numpy_helper.from_array(BIAS, "bias")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.fixture(scope="module")
def sess():
    return onnxplex.InferenceSession(two_input_model())


@pytest.fixture(scope="module")
def oracle():
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(two_input_model().SerializeToString(),
                                providers=["CPUExecutionProvider"])


def ones(*shape, dtype=np.float32):
    return np.ones(shape, dtype)


@pytest.mark.parametrize("feed, message", [
    ({"a": ones(2, 4)}, r"Required inputs \(\['b'\]\) are missing"),
    ({}, r"Required inputs \(\['a', 'b'\]\) are missing from input feed \(\[\]\)"),
    ({"a": ones(2, 4), "b": ones(2, 4), "c": ones(1)}, "Invalid input name: c"),
    ({"a": ones(2, 4, dtype=np.float64), "b": ones(2, 4)},
     r"Actual: \(tensor\(double\)\) , expected: \(tensor\(float\)\): input 'a' is a "
     r"numpy float64 array"),
    ({"a": ones(2, 4, dtype=np.int32), "b": ones(2, 4)}, r"Actual: \(tensor\(int32\)\)"),
    ({"a": np.array(["x"] * 8).reshape(2, 4), "b": ones(2, 4)},
     r"Actual: \(tensor\(string\)\)"),
    ({"a": ones(8), "b": ones(2, 4)}, r"Invalid rank for input: a Got: 1 Expected: 2"),
    ({"a": ones(2, 4, 1), "b": ones(2, 4)}, "Got: 3 Expected: 2"),
    ({"a": ones(2, 5), "b": ones(2, 5)}, r"input: a .*\n index: 1 Got: 5 Expected: 4"),
    ({"a": ones(2, 4), "b": ones(3, 4)},
     r"input 'b': dimension 0 \('batch'\) is 3, but input 'a' has 'batch' = 2"),
    ({"a": [[1.0, 2.0], [3.0]], "b": ones(2, 4)},
     "Could not create tensor from given input list: input 'a' \\(list\\)"),
    ({"a": None, "b": ones(2, 4)}, "input 'a' is a numpy object array"),
    ({"a": ones(2, 4), "b": ones(2, 4), "bias": ones(3, dtype=np.float64)},
     r"expected: \(tensor\(float\)\): input 'bias'"),
    ({"a": ones(2, 4), "b": ones(2, 4), "bias": ones(4)},
     r"input: bias .*\n index: 0 Got: 4 Expected: 3"),
])
def test_bad_feeds_are_named(sess, feed, message):
    with pytest.raises(InvalidFeedError, match=message):
        sess.run(None, feed)
    # the session is unharmed
    assert sess.run(["y"], {"a": ones(1, 4), "b": ones(1, 4)})[0].shape == (1, 3)


def test_feed_must_be_a_mapping(sess):
    with pytest.raises(InvalidFeedError, match="must be a dict"):
        sess.run(None, [ones(2, 4), ones(2, 4)])


def _odd_layouts(a: np.ndarray) -> dict[str, np.ndarray]:
    """The same values as ``a`` in layouts a kernel might trip over."""
    ro = a.copy()
    ro.flags.writeable = False
    big = np.zeros((a.shape[0] * 2, a.shape[1] * 3), a.dtype)
    big[::2, ::3] = a
    return {
        "contiguous": a,
        "read_only": ro,
        "strided": big[::2, ::3],
        "fortran": np.asfortranarray(a),
        "reversed": np.ascontiguousarray(a[::-1])[::-1],
        "transposed_view": np.ascontiguousarray(a.T).T,
        "broadcast_view": np.broadcast_to(a[:1], a.shape) if a.shape[0] == 1 else a,
        "big_endian": a.astype(a.dtype.newbyteorder(">")),
    }


@pytest.mark.parametrize("layout", list(_odd_layouts(ones(1, 1))))
def test_odd_layouts_are_accepted_and_give_the_same_result(sess, oracle, layout):
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.standard_normal((3, 4)).astype(np.float32)
    fa, fb = _odd_layouts(a)[layout], _odd_layouts(b)[layout]
    before = (fa.copy(), fb.copy())
    got = sess.run(None, {"a": fa, "b": fb})
    want = sess.run(None, {"a": a, "b": b})
    for g, w, o in zip(got, want, oracle.run(None, {"a": a, "b": b})):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_allclose(g, o, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(fa, before[0])   # feeds are not modified
    np.testing.assert_array_equal(fb, before[1])


def test_overridable_initializer_feed_is_used(sess, oracle):
    a, b = ones(2, 4), ones(2, 4)
    bias = np.full(3, 100, np.float32)
    (y,) = sess.run(["y"], {"a": a, "b": b, "bias": bias})
    np.testing.assert_allclose(y, oracle.run(["y"], {"a": a, "b": b, "bias": bias})[0],
                               rtol=1e-5)
    assert y.min() > 50


SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.0, 3e38, -3e38, 1e-45],
                    np.float32)


def _unary_graph(ops: list[tuple[str, dict]]) -> onnx.ModelProto:
    """x -> each op (its own output), for a bank of element-wise and reducing ops."""
    nodes, outs = [], []
    inits = [numpy_helper.from_array(np.float32(0.5).reshape(()), "half"),
             numpy_helper.from_array(np.array(-1, np.float32), "lo"),
             numpy_helper.from_array(np.array(1, np.float32), "hi"),
             numpy_helper.from_array(np.array(1, np.int64), "axis1")]
    for k, (op, attrs) in enumerate(ops):
        extra = {"Clip": ["lo", "hi"], "Pow": ["half"], "Div": ["half"], "Sub": ["x"],
                 "Max": ["half"], "Min": ["half"], "Mul": ["half"],
                 "CumSum": ["axis1"]}.get(op, [])
        nodes.append(helper.make_node(op, ["x", *extra], [f"y{k}"], **attrs))
        outs.append(onnx.ValueInfoProto(name=f"y{k}"))   # types come from inference
    g = helper.make_graph(nodes, "specials",
                          [helper.make_tensor_value_info("x", FLOAT, ["n", 10])], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


SPECIAL_OPS = [(op, {}) for op in (
    "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Abs", "Neg", "Floor", "Ceil", "Round",
    "Sign", "Reciprocal", "Erf", "Softplus", "Sin", "Cos", "LeakyRelu", "Elu", "Selu",
    "HardSigmoid", "HardSwish", "Clip", "Pow", "Div", "Sub", "Max", "Min", "Mul", "IsNaN",
    "IsInf")] + [("Softmax", {"axis": -1}), ("LogSoftmax", {"axis": -1}),
                 ("ReduceMax", {}), ("ReduceMin", {}), ("ReduceSum", {}),
                 ("ReduceMean", {}), ("ReduceL2", {}), ("ReduceLogSumExp", {}),
                 ("ArgMax", {"axis": 1}), ("CumSum", {})]


def _compare_with_oracle(model: onnx.ModelProto, feeds: dict[str, np.ndarray]):
    ort = pytest.importorskip("onnxruntime")
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = onnxplex.InferenceSession(model).run(None, feeds)
    want = ref.run(None, feeds)
    names = [o.name for o in model.graph.output]
    bad = []
    for name, g, w in zip(names, got, want):
        if g.shape != w.shape or g.dtype != w.dtype:
            bad.append(f"{name}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}")
        elif g.dtype.kind == "f" and not (
                np.array_equal(np.isnan(g), np.isnan(w))
                and np.array_equal(np.isposinf(g), np.isposinf(w))
                and np.array_equal(np.isneginf(g), np.isneginf(w))
                and np.allclose(g, w, rtol=1e-5, atol=1e-6, equal_nan=True)):
            bad.append(f"{name}: {g.ravel()[:10]} vs {w.ravel()[:10]}")
        elif g.dtype.kind != "f" and not np.array_equal(g, w):
            bad.append(f"{name}: {g.ravel()[:10]} vs {w.ravel()[:10]}")
    return bad


CPU_MLAS_DIFFERS = {
    "Pow": "cpu_mlas computes x ** 0.5 as sqrt(x): Pow(-inf, 0.5) is NaN and Pow(-0.0, 0.5) "
           "is -0.0, where onnxruntime (C's pow) gives +inf and +0.0",
    "ArgMax": "cpu_mlas uses numpy's argmax, for which NaN is the largest value; onnxruntime "
              "compares with '>', so a NaN after the first element never wins",
}


@pytest.mark.parametrize("op, attrs", [
    pytest.param(op, attrs, id=op, marks=pytest.mark.xfail(strict=True,
                                                           reason=CPU_MLAS_DIFFERS[op]))
    if op in CPU_MLAS_DIFFERS else pytest.param(op, attrs, id=op)
    for op, attrs in SPECIAL_OPS])
def test_nan_and_inf_propagate_like_onnxruntime(op, attrs):
    """Each op's NaN/+Inf/-Inf positions and finite values match onnxruntime's."""
    x = np.stack([SPECIALS, SPECIALS[::-1], np.nan_to_num(SPECIALS)])
    assert _compare_with_oracle(_unary_graph([(op, attrs)]), {"x": x}) == []


def _gemm_like(op: str) -> tuple[onnx.ModelProto, np.ndarray]:
    x = np.zeros((2, 4, 5, 5), np.float32)
    x[0, 0, 2, 2], x[1, 3, 1, 1], x[1, 0, 0, 0] = np.nan, np.inf, -np.inf
    if op == "Conv":
        w = np.ones((8, 4, 3, 3), np.float32)
        node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    elif op == "DepthwiseConv":
        w = np.ones((4, 1, 3, 3), np.float32)
        node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], group=4)
    elif op == "MaxPool":
        x[0, 1, 1, 2] = np.nan   # a NaN that is not first in its window
        w = None
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[1, 1])
    else:
        x = x.reshape(2, 100)
        w = np.ones((100, 3), np.float32)
        node = helper.make_node(op, ["x", "w"], ["y"])
    g = helper.make_graph([node], op, [helper.make_tensor_value_info("x", FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", FLOAT, None)],
                          [] if w is None else [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), x


@pytest.mark.parametrize("op", [
    "MatMul", "Gemm", "Conv", "DepthwiseConv",
    pytest.param("MaxPool", marks=pytest.mark.xfail(
        strict=True, reason="cpu_mlas's MaxPool propagates a NaN in a window (IEEE max, as "
        "numpy); onnxruntime's compares with '>', so a NaN not first in its window is "
        "skipped (found by tests/test_fuzz.py)")),
])
def test_nan_and_inf_through_gemm_conv_and_pool(op):
    model, x = _gemm_like(op)
    assert _compare_with_oracle(model, {"x": x}) == []


def _zero_size_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Relu", ["m"], ["r"]),
        helper.make_node("Softmax", ["r"], ["s"], axis=-1),
        helper.make_node("ReduceSum", ["x"], ["rs"], keepdims=0),
        helper.make_node("Concat", ["x", "x"], ["c"], axis=0),
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
        helper.make_node("Shape", ["x"], ["sh"]),
        helper.make_node("Reshape", ["x", "newshape"], ["rsh"]),
        helper.make_node("Gather", ["x", "idx"], ["gt"], axis=1),
    ]
    outs = ["s", "rs", "c", "t", "sh", "rsh", "gt"]
    g = helper.make_graph(
        nodes, "zero", [helper.make_tensor_value_info("x", FLOAT, ["n", 4])],
        [helper.make_tensor_value_info(o, TensorProto.INT64 if o == "sh" else FLOAT, None)
         for o in outs],
        [numpy_helper.from_array(np.ones((4, 3), np.float32), "w"),
         numpy_helper.from_array(np.array([-1, 2, 2], np.int64), "newshape"),
         numpy_helper.from_array(np.array([0, 3], np.int64), "idx")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("n", [0, 1])
def test_zero_size_tensors_are_handled(n):
    """A batch of 0 runs through MatMul, Softmax, reductions, Concat, Transpose, Reshape,
    Gather and Shape with onnxruntime's shapes and values."""
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    assert _compare_with_oracle(_zero_size_model(), {"x": x}) == []
