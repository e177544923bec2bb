"""Extended-level CNN / quantization fusions (onnxplex.optimizer._fusions_cnn): the graph after
optimization, numeric equality with the unoptimized run, the saved optimized model running in
onnxruntime, and the cases that must not fuse."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from _ort_quirks import ort_exact_weights, ort_reduce_range
from models import quantize_dynamic_model, transformer_encoder, transformer_feed
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex.optimizer import optimize

ort.set_default_logger_severity(3)

F = TensorProto.FLOAT
RNG = np.random.default_rng(3)
GOL = onnxplex.GraphOptimizationLevel


def init(name, arr, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(arr, dtype), name)


def model(nodes, inputs, outputs, inits, opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return m


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def run(m, feeds, level, path=None):
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = level
    if path is not None:
        so.optimized_model_filepath = str(path)
    sess = onnxplex.InferenceSession(m.SerializeToString(), so, providers=["cpu_mlas"])
    return sess.run(None, feeds)


def check(m, feeds, tmp_path, rtol=1e-4, atol=1e-5, ort_too=True):
    """Run unoptimized, with the fusions (extended level) and fully optimized (the layout
    level too: channels-last convs); compare; the extended-level model, saved, must run in
    onnxruntime with the same results (the layout level's NhwcFusedConv has no float32
    kernel in onnxruntime's CPU provider). Returns the extended-level ModelProto."""
    path = tmp_path / "opt.onnx"
    want = run(m, feeds, GOL.ORT_DISABLE_ALL)
    for level, save in ((GOL.ORT_ENABLE_EXTENDED, path), (GOL.ORT_ENABLE_ALL, None)):
        got = run(m, feeds, level, save)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    opt = onnx.load(str(path))
    if ort_too:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        ref = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(
            None, feeds)
        for g, w in zip(ref, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return opt


def ops(m):
    return [n.op_type for n in m.graph.node]


def node_of(m, op_type):
    (n,) = [n for n in m.graph.node if n.op_type == op_type]
    return n


def attrs(n):
    return {a.name: helper.get_attribute_value(a) for a in n.attribute}


def _bn_inits(c, prefix="bn"):
    return [init(f"{prefix}_s", RNG.random(c) + 0.5), init(f"{prefix}_b", RNG.standard_normal(c)),
            init(f"{prefix}_m", RNG.standard_normal(c)), init(f"{prefix}_v", RNG.random(c) + 0.1)]


def _bn(x, y, prefix="bn"):
    return helper.make_node("BatchNormalization",
                            [x, f"{prefix}_s", f"{prefix}_b", f"{prefix}_m", f"{prefix}_v"],
                            [y], epsilon=1e-3)


X = {"x": RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)}


# --------------------------------------------------------------------------------------------
# 1. BatchNormalization folding
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [False, True])
def test_conv_bn_folded(tmp_path, bias):
    inits = [init("w", RNG.standard_normal((4, 3, 3, 3)))] + _bn_inits(4)
    conv_in = ["x", "w"]
    if bias:
        inits.append(init("b", RNG.standard_normal(4)))
        conv_in.append("b")
    m = model([helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1]), _bn("c", "y")],
              [vi("x", [2, 3, 8, 8])], [vi("y", None)], inits)
    opt = check(m, X, tmp_path)
    assert ops(opt) == ["Conv"] and len(node_of(opt, "Conv").input) == 3


def test_conv_transpose_and_gemm_bn_folded(tmp_path):
    inits = [init("gw", RNG.standard_normal((4, 5))), init("gc", RNG.standard_normal(5))]
    inits += _bn_inits(5)
    m = model([helper.make_node("Gemm", ["g", "gw", "gc"], ["gm"], beta=0.5), _bn("gm", "y")],
              [vi("g", [3, 4])], [vi("y", None)], inits)
    opt = check(m, {"g": RNG.standard_normal((3, 4)).astype(np.float32)}, tmp_path)
    assert ops(opt) == ["Gemm"]
    # ConvTranspose + BN
    inits = [init("w", RNG.standard_normal((3, 4, 3, 3)))] + _bn_inits(4)
    m = model([helper.make_node("ConvTranspose", ["x", "w"], ["c"]), _bn("c", "y")],
              [vi("x", [2, 3, 8, 8])], [vi("y", None)], inits)
    opt = check(m, X, tmp_path)
    assert ops(opt) == ["ConvTranspose"]


def test_bn_with_non_constant_params_not_folded(tmp_path):
    inits = [init("w", RNG.standard_normal((4, 3, 3, 3)))] + _bn_inits(4)[1:]
    m = model([helper.make_node("Conv", ["x", "w"], ["c"]), _bn("c", "y")],
              [vi("x", [2, 3, 8, 8]), vi("bn_s", [4])], [vi("y", None)], inits)
    feeds = {**X, "bn_s": np.full(4, 0.7, np.float32)}
    opt = check(m, feeds, tmp_path)
    assert ops(opt) == ["Conv", "BatchNormalization"]


def test_bn_after_shared_conv_output_not_folded(tmp_path):
    inits = [init("w", RNG.standard_normal((4, 3, 3, 3)))] + _bn_inits(4)
    m = model([helper.make_node("Conv", ["x", "w"], ["c"]), _bn("c", "y"),
               helper.make_node("Neg", ["c"], ["y2"])],
              [vi("x", [2, 3, 8, 8])], [vi("y", None), vi("y2", None)], inits)
    opt = check(m, X, tmp_path)
    assert "BatchNormalization" in ops(opt)


# --------------------------------------------------------------------------------------------
# 2. Conv + Add, Gemm + Add, MatMul + Add
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 4, 1, 1), (4, 1, 1), (1,)])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_add_becomes_bias(tmp_path, shape, bias):
    inits = [init("w", RNG.standard_normal((4, 3, 3, 3))), init("c", RNG.standard_normal(shape))]
    conv_in = ["x", "w"]
    if bias:
        inits.append(init("b", RNG.standard_normal(4)))
        conv_in.append("b")
    m = model([helper.make_node("Conv", conv_in, ["cv"]),
               helper.make_node("Add", ["c", "cv"], ["y"])],
              [vi("x", [2, 3, 8, 8])], [vi("y", None)], inits)
    opt = check(m, X, tmp_path)
    assert ops(opt) == ["Conv"] and len(node_of(opt, "Conv").input) == 3


def test_fusions_read_no_weight_they_do_not_need(tmp_path, monkeypatch):
    """A residual Conv -> Add(tensor): the conv's weight (in the model file, read on demand)
    is not read by the optimizer; the Conv + activation fusion neither."""
    from onnxplex.graph import model as _graph
    from onnxplex.graph import wire as _wire

    w = RNG.standard_normal((64, 64, 3, 3)).astype(np.float32)   # 144 KiB: cut out of the file
    m = model([helper.make_node("Conv", ["x", "w"], ["cv"], pads=[1, 1, 1, 1]),
               helper.make_node("Add", ["cv", "x"], ["s"]),
               helper.make_node("Relu", ["s"], ["y"])],
              [vi("x", [1, 64, 8, 8])], [vi("y", None)], [init("w", w)])
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    loaded = _graph.load_model(path)
    reads = []
    real = _wire.pread_tensor
    monkeypatch.setattr(_wire, "pread_tensor", lambda *a: reads.append(a) or real(*a))
    reports = optimize(loaded, int(GOL.ORT_ENABLE_EXTENDED))
    assert any(r.name == "Conv + activation -> FusedConv" and r.changes for r in reports)
    assert reads == []


def test_shared_clip_bounds_are_read_once_per_pass(monkeypatch):
    import onnx_ir as ir

    from onnxplex.graph import model as _graph

    nodes, x = [], "x"
    for k in range(3):
        nodes += [helper.make_node("Conv", [x, "w"], [f"c{k}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Clip", [f"c{k}", "lo", "hi"], [f"r{k}"])]
        x = f"r{k}"
    m = model(nodes, [vi("x", [1, 4, 6, 6])], [vi(x, None)],
              [init("w", RNG.standard_normal((4, 4, 3, 3))), init("lo", 0.0), init("hi", 6.0)])
    loaded = _graph.load_model(m)
    reads = []
    real = ir.serde.TensorProtoTensor.numpy
    monkeypatch.setattr(ir.serde.TensorProtoTensor, "numpy",
                        lambda self: reads.append(self.name) or real(self))
    reports = optimize(loaded, int(GOL.ORT_ENABLE_EXTENDED))
    assert [r.changes for r in reports if r.name == "Conv + activation -> FusedConv"] == [3]
    assert reads.count("lo") == 1 and reads.count("hi") == 1


@pytest.mark.parametrize("shape", [(1, 1, 6, 6), (2, 4, 1, 1)])
def test_conv_add_not_per_channel_not_fused(tmp_path, shape):
    inits = [init("w", RNG.standard_normal((4, 3, 3, 3))), init("c", RNG.standard_normal(shape))]
    m = model([helper.make_node("Conv", ["x", "w"], ["cv"]),
               helper.make_node("Add", ["cv", "c"], ["y"])],
              [vi("x", [2, 3, 8, 8])], [vi("y", None)], inits)
    assert ops(check(m, X, tmp_path)) == ["Conv", "Add"]


@pytest.mark.parametrize("c_shape", [(5,), (1, 5), (3, 1), (3, 5)])
def test_matmul_add_to_gemm(tmp_path, c_shape):
    inits = [init("w", RNG.standard_normal((4, 5))), init("c", RNG.standard_normal(c_shape))]
    m = model([helper.make_node("MatMul", ["a", "w"], ["mm"]),
               helper.make_node("Add", ["mm", "c"], ["y"])],
              [vi("a", [3, 4])], [vi("y", None)], inits)
    opt = check(m, {"a": RNG.standard_normal((3, 4)).astype(np.float32)}, tmp_path)
    assert ops(opt) == ["Gemm"]


def test_matmul_add_3d_not_gemm(tmp_path):
    inits = [init("w", RNG.standard_normal((4, 5))), init("c", RNG.standard_normal(5))]
    m = model([helper.make_node("MatMul", ["a", "w"], ["mm"]),
               helper.make_node("Add", ["mm", "c"], ["y"])],
              [vi("a", [2, 3, 4])], [vi("y", None)], inits)
    opt = check(m, {"a": RNG.standard_normal((2, 3, 4)).astype(np.float32)}, tmp_path)
    assert ops(opt) == ["MatMul", "Add"]


def test_gemm_add_to_gemm_c(tmp_path):
    inits = [init("w", RNG.standard_normal((5, 4))), init("c", RNG.standard_normal(5))]
    m = model([helper.make_node("Gemm", ["a", "w"], ["mm"], transB=1, alpha=0.5, beta=0.3),
               helper.make_node("Add", ["mm", "c"], ["y"])],
              [vi("a", [3, 4])], [vi("y", None)], inits)
    opt = check(m, {"a": RNG.standard_normal((3, 4)).astype(np.float32)}, tmp_path)
    assert ops(opt) == ["Gemm"] and len(node_of(opt, "Gemm").input) == 3


# --------------------------------------------------------------------------------------------
# 3. Conv / Gemm + activation
# --------------------------------------------------------------------------------------------

_CONV_ACTS = [
    (helper.make_node("Relu", ["c"], ["y"]), [], "Relu", None),
    (helper.make_node("Sigmoid", ["c"], ["y"]), [], "Sigmoid", None),
    (helper.make_node("Tanh", ["c"], ["y"]), [], "Tanh", None),
    (helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.2), [], "LeakyRelu", [0.2]),
    (helper.make_node("LeakyRelu", ["c"], ["y"]), [], "LeakyRelu", [0.01]),
    (helper.make_node("HardSigmoid", ["c"], ["y"]), [], "HardSigmoid", [0.2, 0.5]),
    (helper.make_node("Clip", ["c", "lo", "hi"], ["y"]),
     [init("lo", -0.5), init("hi", 0.8)], "Clip", [-0.5, 0.8]),
    (helper.make_node("Clip", ["c", "", "hi"], ["y"]), [init("hi", 0.8)], "Clip",
     [float(np.finfo(np.float32).min), 0.8]),
]


@pytest.mark.parametrize("act,extra,kind,params", _CONV_ACTS,
                         ids=[f"{a[2]}{i}" for i, a in enumerate(_CONV_ACTS)])
def test_conv_activation_fused(tmp_path, act, extra, kind, params):
    inits = [init("w", RNG.standard_normal((4, 3, 3, 3))), init("b", RNG.standard_normal(4))]
    m = model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1],
                                strides=[2, 2]), act],
              [vi("x", [2, 3, 8, 8])], [vi("y", None)], inits + extra)
    opt = check(m, X, tmp_path)
    assert ops(opt) == ["FusedConv"]
    n = node_of(opt, "FusedConv")
    assert n.domain == "com.microsoft"
    a = attrs(n)
    assert a["activation"] == kind.encode()
    if params is None:
        assert "activation_params" not in a
    else:
        np.testing.assert_allclose(a["activation_params"], params, rtol=1e-6)
    assert a["strides"] == [2, 2] and a["pads"] == [1, 1, 1, 1]
    assert any(o.domain == "com.microsoft" for o in opt.opset_import)


def test_conv_clip_opset10_attributes(tmp_path):
    inits = [init("w", RNG.standard_normal((4, 3, 3, 3)))]
    m = model([helper.make_node("Conv", ["x", "w"], ["c"]),
               helper.make_node("Clip", ["c"], ["y"], min=0.0, max=6.0)],
              [vi("x", [2, 3, 8, 8])], [vi("y", None)], inits, opset=10)
    opt = check(m, X, tmp_path)
    assert attrs(node_of(opt, "FusedConv"))["activation_params"] == [0.0, 6.0]


def test_conv_with_two_consumers_not_fused(tmp_path):
    inits = [init("w", RNG.standard_normal((4, 3, 3, 3)))]
    m = model([helper.make_node("Conv", ["x", "w"], ["c"]),
               helper.make_node("Relu", ["c"], ["y"]), helper.make_node("Neg", ["c"], ["y2"])],
              [vi("x", [2, 3, 8, 8])], [vi("y", None), vi("y2", None)], inits)
    assert sorted(ops(check(m, X, tmp_path))) == ["Conv", "Neg", "Relu"]


def test_conv_graph_output_not_fused(tmp_path):
    inits = [init("w", RNG.standard_normal((4, 3, 3, 3)))]
    m = model([helper.make_node("Conv", ["x", "w"], ["c"]),
               helper.make_node("Relu", ["c"], ["y"])],
              [vi("x", [2, 3, 8, 8])], [vi("y", None), vi("c", None)], inits)
    assert ops(check(m, X, tmp_path)) == ["Conv", "Relu"]


def test_conv_clip_non_constant_bounds_not_fused(tmp_path):
    inits = [init("w", RNG.standard_normal((4, 3, 3, 3)))]
    m = model([helper.make_node("Conv", ["x", "w"], ["c"]),
               helper.make_node("Clip", ["c", "lo"], ["y"])],
              [vi("x", [2, 3, 8, 8]), vi("lo", [])], [vi("y", None)], inits)
    feeds = {**X, "lo": np.asarray(0.1, np.float32)}
    assert ops(check(m, feeds, tmp_path)) == ["Conv", "Clip"]


_GEMM_ACTS = [("Relu", {}, {}), ("Sigmoid", {}, {}), ("Tanh", {}, {}),
              ("LeakyRelu", {"alpha": 0.3}, {"activation_alpha": 0.3}),
              ("LeakyRelu", {}, {"activation_alpha": 0.01}),
              ("HardSigmoid", {"alpha": 0.3}, {"activation_alpha": 0.3, "activation_beta": 0.5}),
              ("Elu", {}, {"activation_alpha": 1.0}),
              ("Selu", {"gamma": 1.2}, {"activation_gamma": 1.2}),
              ("Softplus", {}, {}), ("Softsign", {}, {}),
              ("ThresholdedRelu", {"alpha": 0.4}, {"activation_alpha": 0.4})]


@pytest.mark.parametrize("c_shape, fused", [((8,), True), ((1, 8), False), ((2, 3, 8), False)])
def test_matmul_nbits_add_takes_the_bias(tmp_path, c_shape, fused):
    """MatMulNBits + Add of a constant [N] vector: the vector becomes MatMulNBits' bias input
    (onnxruntime runs the saved model). A [1, N] one is left alone: onnx's inference gives the
    contrib op's output no shape, so whether it would widen is not known; nor an addend of
    another size."""
    k, n, block = 64, 8, 32
    nodes = [helper.make_node("MatMulNBits", ["x", "b", "s"], ["m"], domain="com.microsoft",
                              K=k, N=n, bits=4, block_size=block),
             helper.make_node("Add", ["m", "c"], ["y"])]
    inits = [init("b", RNG.integers(0, 256, (n, k // block, block // 2)), np.uint8),
             init("s", RNG.random(n * (k // block)) * 0.1 + 0.01),
             init("c", RNG.standard_normal(c_shape))]
    m = model(nodes, [vi("x", [2, 3, k])], [vi("y", None)], inits)
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    opt = check(m, {"x": RNG.standard_normal((2, 3, k)).astype(np.float32)}, tmp_path)
    assert ops(opt) == (["MatMulNBits"] if fused else ["MatMulNBits", "Add"])
    if fused:
        assert len(node_of(opt, "MatMulNBits").input) == 6


@pytest.mark.parametrize("kind,act_attrs,want", _GEMM_ACTS)
def test_gemm_activation_fused(tmp_path, kind, act_attrs, want):
    inits = [init("w", RNG.standard_normal((5, 4))), init("c", RNG.standard_normal(5))]
    m = model([helper.make_node("Gemm", ["a", "w", "c"], ["g"], transB=1, alpha=0.9),
               helper.make_node(kind, ["g"], ["y"], **act_attrs)],
              [vi("a", [3, 4])], [vi("y", None)], inits)
    opt = check(m, {"a": RNG.standard_normal((3, 4)).astype(np.float32)}, tmp_path)
    assert ops(opt) == ["FusedGemm"]
    a = attrs(node_of(opt, "FusedGemm"))
    assert a["activation"] == kind.encode() and a["transB"] == 1
    for k, v in want.items():
        assert a[k] == pytest.approx(v, rel=1e-6)


def _distance_model(sub_order="pq", q_unsqueezed=False, keepdims=0, opset=17, extra_use=False,
                    dtype=F):
    """ReduceSumSquare(Unsqueeze(p, [1]) - q, axes=[2]): p [5, 3] rows against q [4, 3]."""
    axes_attr = opset < 13
    nodes, inits = [], []

    def unsqueeze(src, dst, axis):
        if axes_attr:
            nodes.append(helper.make_node("Unsqueeze", [src], [dst], axes=[axis]))
        else:
            inits.append(init(f"{dst}_axes", [axis], np.int64))
            nodes.append(helper.make_node("Unsqueeze", [src, f"{dst}_axes"], [dst]))

    unsqueeze("p", "pu", 1)
    q = "q"
    if q_unsqueezed:
        unsqueeze("q", "qu", -3)
        q = "qu"
    a, b = ("pu", q) if sub_order == "pq" else (q, "pu")
    nodes.append(helper.make_node("Sub", [a, b], ["d"]))
    if opset < 18:
        nodes.append(helper.make_node("ReduceSumSquare", ["d"], ["y"], axes=[2],
                                      keepdims=keepdims))
    else:
        inits.append(init("red_axes", [-1], np.int64))
        nodes.append(helper.make_node("ReduceSumSquare", ["d", "red_axes"], ["y"],
                                      keepdims=keepdims))
    outs = [vi("y", None, dtype)] + ([vi("d", None, dtype)] if extra_use else [])
    return model(nodes, [vi("p", [5, 3], dtype), vi("q", ["n", 3], dtype)], outs, inits,
                 opset=opset)


@pytest.mark.parametrize("sub_order,q_unsqueezed,opset,dtype", [
    ("pq", False, 17, F), ("qp", False, 17, F), ("pq", True, 11, F), ("qp", True, 18, F),
    ("pq", False, 17, TensorProto.DOUBLE),
])
def test_pairwise_distances_fused_into_cdist(tmp_path, sub_order, q_unsqueezed, opset, dtype):
    m = _distance_model(sub_order, q_unsqueezed, opset=opset, dtype=dtype)
    nt = helper.tensor_dtype_to_np_dtype(dtype)
    rng = np.random.default_rng(12)   # (not RNG: the feeds of later tests stay as they were)
    feeds = {"p": rng.standard_normal((5, 3)).astype(nt),
             "q": rng.standard_normal((4, 3)).astype(nt)}
    opt = check(m, feeds, tmp_path, rtol=1e-5, atol=1e-6)
    assert ops(opt) == ["CDist"]
    assert attrs(node_of(opt, "CDist"))["metric"] == b"sqeuclidean"
    assert list(node_of(opt, "CDist").input) == ["p", "q"]


@pytest.mark.parametrize("kw", [{"keepdims": 1}, {"extra_use": True}])
def test_pairwise_distances_left_alone(tmp_path, kw):
    m = _distance_model(**kw)
    rng = np.random.default_rng(13)
    feeds = {"p": rng.standard_normal((5, 3)).astype(np.float32),
             "q": rng.standard_normal((4, 3)).astype(np.float32)}
    assert "CDist" not in ops(check(m, feeds, tmp_path))


@pytest.mark.parametrize("metric", ["sqeuclidean", "euclidean"])
def test_cdist_kernel_against_onnxruntime(metric):
    """com.microsoft CDist itself, with many rows (the native kernel's threads)."""
    node = helper.make_node("CDist", ["a", "b"], ["y"], domain="com.microsoft", metric=metric)
    g = helper.make_graph([node], "g", [vi("a", [300, 7]), vi("b", [250, 7])], [vi("y", None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                           helper.make_opsetid("com.microsoft", 1)],
                          ir_version=10)
    rng = np.random.default_rng(11)   # (the module's RNG feeds the tests after this one)
    feeds = {"a": rng.standard_normal((300, 7)).astype(np.float32),
             "b": rng.standard_normal((250, 7)).astype(np.float32)}
    (got,) = onnxplex.InferenceSession(m.SerializeToString(), providers=["cpu_mlas"]).run(
        None, feeds)
    (want,) = ort.InferenceSession(m.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_small_cnn_fused(tmp_path):
    from models import small_cnn

    m = small_cnn(batch=2)
    opt = check(m, {"x": RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)}, tmp_path)
    assert ops(opt).count("FusedConv") == 2 and "Relu" not in ops(opt)


# --------------------------------------------------------------------------------------------
# 4. Dynamic quantization
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weight_type", ["QInt8", "QUInt8"])
def test_quantize_dynamic_matmul_add(tmp_path, weight_type):
    inits = [init("w", RNG.standard_normal((16, 8))), init("b", RNG.standard_normal(8))]
    m = model([helper.make_node("MatMul", ["a", "w"], ["mm"]),
               helper.make_node("Add", ["mm", "b"], ["y"])],
              [vi("a", ["N", 16])], [vi("y", None)], inits)
    q = quantize_dynamic_model(m, tmp_path / "q", weight_type)
    opt = check(q, {"a": RNG.standard_normal((5, 16)).astype(np.float32)}, tmp_path,
                rtol=1e-2, atol=1e-4)
    assert ops(opt) == ["DynamicQuantizeMatMul"]
    assert len(opt.graph.node[0].input) == 5  # bias absorbed


def _mmi_rescale_model(b: np.ndarray) -> onnx.ModelProto:
    """y = float(MatMulInteger(a, b, 128, 0)) * (as * 0.02): a uint8 [4, 16] input, b int8."""
    inits = [init("b", b, np.int8), init("bz", 0, np.int8), init("bs", 0.02),
             init("az", 128, np.uint8)]
    return model([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["i"]),
                  helper.make_node("Cast", ["i"], ["f"], to=F),
                  helper.make_node("Mul", ["as", "bs"], ["s"]),
                  helper.make_node("Mul", ["f", "s"], ["y"])],
                 [vi("a", [4, 16], TensorProto.UINT8), vi("as", [])], [vi("y", None)], inits)


def test_matmul_integer_to_float_non_constant_a(tmp_path):
    """MatMulInteger on a quantized graph input: MatMulIntegerToFloat (no DQL to fuse).

    Checked in onnxruntime with int8 weights in the range it computes exactly (7 bits without
    VNNI: tests/_ort_quirks.py); with full-range weights against exact arithmetic."""
    feeds = {"a": RNG.integers(0, 256, (4, 16)).astype(np.uint8),
             "as": np.asarray(0.03, np.float32)}
    opt = check(_mmi_rescale_model(ort_exact_weights(RNG, np.int8, (16, 8))), feeds, tmp_path)
    assert ops(opt) == ["Mul", "MatMulIntegerToFloat"] or \
        ops(opt) == ["MatMulIntegerToFloat"]

    b = RNG.integers(-128, 128, (16, 8)).astype(np.int8)
    feeds["a"][0, :2], b[:2, 0] = 255, -128  # a pair of products outside int16
    (got,) = run(_mmi_rescale_model(b), feeds, GOL.ORT_ENABLE_ALL)
    scale = np.float64(np.float32(0.03)) * np.float64(np.float32(0.02))
    want = (feeds["a"].astype(np.int64) - 128) @ b.astype(np.int64) * scale
    # float32 rounding of the scale product and of the rescale: <= ~3e-7 relative
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_quantized_transformer_encoder(tmp_path):
    # 7-bit weights where onnxruntime (the saved model's check) saturates: tests/_ort_quirks.py
    q = quantize_dynamic_model(transformer_encoder(), tmp_path / "q",
                               reduce_range=ort_reduce_range("QInt8"))
    feeds = transformer_feed(2, 8)
    opt = check(q, feeds, tmp_path, rtol=1e-2, atol=1e-3)
    n_mmi = ops(q).count("MatMulInteger")
    assert n_mmi > 0
    assert ops(opt).count("DynamicQuantizeMatMul") + ops(opt).count("MatMulIntegerToFloat") \
        == n_mmi
    assert "MatMulInteger" not in ops(opt)


# --------------------------------------------------------------------------------------------
# 5. QDQ groups
# --------------------------------------------------------------------------------------------


def _qdq_cnn(tmp_path, activation_type, per_channel):
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    rng = np.random.default_rng(0)
    inits = [init("w1", rng.standard_normal((8, 3, 3, 3)) * 0.3),
             init("b1", rng.standard_normal(8) * 0.1),
             init("w2", rng.standard_normal((8, 8, 3, 3)) * 0.2),
             init("b2", rng.standard_normal(8) * 0.1),
             init("wm", rng.standard_normal((8, 10)) * 0.3),
             init("mulc", rng.standard_normal((1, 8, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r1"], ["a"]),
             helper.make_node("Mul", ["a", "mulc"], ["mm"]),
             helper.make_node("GlobalAveragePool", ["mm"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "wm"], ["y"])]
    m = model(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 10])], inits)
    src, dst = tmp_path / "f.onnx", tmp_path / "qdq.onnx"
    onnx.save(m, str(src))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
                            for _ in range(8)])

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=getattr(QuantType, activation_type),
                    weight_type=QuantType.QInt8, per_channel=per_channel)
    return onnx.load(str(dst))


@pytest.mark.parametrize("activation_type,per_channel", [("QUInt8", False), ("QInt8", True)])
def test_qdq_groups(tmp_path, activation_type, per_channel):
    q = _qdq_cnn(tmp_path, activation_type, per_channel)
    # The pass alone (constant folding would turn the weights' DequantizeLinear into floats).
    model_ = onnxplex.load_model(q)
    optimize(model_, 2)
    opt = model_.to_proto()
    assert ops(opt) == ["QuantizeLinear", "QLinearConv", "QLinearConv", "QLinearAdd",
                        "QLinearMul", "QLinearGlobalAveragePool", "Flatten", "QLinearMatMul",
                        "DequantizeLinear"]
    feeds = {"x": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    want = run(q, feeds, GOL.ORT_DISABLE_ALL)[0]
    got = run(opt, feeds, GOL.ORT_DISABLE_ALL)[0]
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, atol=1e-2 * scale)
    ref = ort.InferenceSession(opt.SerializeToString(), providers=["CPUExecutionProvider"]
                               ).run(None, feeds)[0]
    # The same integer graph in onnxruntime: on a CPU without VNNI onnxruntime's u8s8 kernel
    # saturates its 16-bit pair sums (onnxplex's is exact), and each of the five
    # requantizations may then round a value the other way, so the output may differ by a
    # couple of its quantization steps (found on an AVX2-only EPYC, where one logit was two
    # steps off with the code of b117a59 too).
    last = opt.graph.node[-1]
    out_step = float(next(numpy_helper.to_array(t) for t in opt.graph.initializer
                          if t.name == last.input[1]))
    np.testing.assert_allclose(got, ref, atol=max(1e-2 * scale, 2 * out_step + 1e-6))


def test_qdq_relu_dropped_before_quantize_with_min_zero_point(tmp_path):
    inits = [init("s", 0.05), init("z", 0, np.uint8)]
    m = model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q0"]),
               helper.make_node("DequantizeLinear", ["q0", "s", "z"], ["d0"]),
               helper.make_node("Relu", ["d0"], ["r"]),
               helper.make_node("QuantizeLinear", ["r", "s", "z"], ["q1"]),
               helper.make_node("DequantizeLinear", ["q1", "s", "z"], ["y"])],
              [vi("x", [2, 3, 8, 8])], [vi("y", None)], inits)
    opt = check(m, X, tmp_path)
    assert "Relu" not in ops(opt)


@pytest.mark.parametrize("op_type,attrs", [("Sigmoid", {}), ("LeakyRelu", {"alpha": 0.2})])
@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
def test_qdq_unary_becomes_lookup_op(op_type, attrs, qtype):
    """DQ -> Sigmoid / LeakyRelu -> Q, per tensor: com.microsoft QLinearSigmoid /
    QLinearLeakyRelu (onnxruntime's QDQ unary fusions), a table of the 256 input values built
    by the unfused graph's own steps: its outputs are the unfused graph's, within a step (the
    table's Sigmoid runs the native function the unfused one runs on large inputs), and
    onnxruntime runs the fused graph within a step of it too."""
    elem = TensorProto.UINT8 if qtype == np.uint8 else TensorProto.INT8
    inits = [init("s0", 0.07), init("z0", 3, qtype), init("s1", 1 / 250 if op_type == "Sigmoid"
                                                           else 0.05),
             init("z1", -128 if qtype == np.int8 and op_type == "Sigmoid" else 1, qtype)]
    m = model([helper.make_node("QuantizeLinear", ["x", "s0", "z0"], ["q0"]),
               helper.make_node("DequantizeLinear", ["q0", "s0", "z0"], ["d0"]),
               helper.make_node(op_type, ["d0"], ["u"], **attrs),
               helper.make_node("QuantizeLinear", ["u", "s1", "z1"], ["q1"])],
              [vi("x", [2, 3, 40, 40])], [helper.make_tensor_value_info("q1", elem, None)],
              inits)
    feeds = {"x": (RNG.standard_normal((2, 3, 40, 40)) * 6).astype(np.float32)}
    sess = onnxplex.InferenceSession(m.SerializeToString())
    assert [p.op_type for p in sess.get_provider_assignment().placements] == \
        ["QuantizeLinear", "QLinear" + op_type]
    plain = onnxplex.InferenceSession(m.SerializeToString(),
                                      _options(onnxplex.GraphOptimizationLevel.ORT_DISABLE_ALL))
    got, want = sess.run(None, feeds)[0], plain.run(None, feeds)[0]
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]
                               ).run(None, feeds)[0]
    assert np.abs(got.astype(np.int32) - ref.astype(np.int32)).max() <= 1


def _every_byte(qtype, shape) -> np.ndarray:
    """An 8-bit tensor of ``shape`` holding every value of ``qtype``, then random ones."""
    info = np.iinfo(qtype)
    size = int(np.prod(shape))
    return np.concatenate([np.arange(info.min, info.max + 1), RNG.integers(
        info.min, info.max + 1, size - 256)]).astype(qtype).reshape(shape)


@pytest.mark.parametrize("op_type,attrs,extra", [
    ("HardSwish", {}, []), ("HardSigmoid", {"alpha": 0.25, "beta": 0.4}, []),
    ("Tanh", {}, []), ("Clip", {}, [("lo", -0.5), ("hi", 2.0)]), ("Exp", {}, [])],
    ids=["HardSwish", "HardSigmoid", "Tanh", "Clip", "Exp"])
@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
def test_qdq_elementwise_op_becomes_a_table(op_type, attrs, extra, qtype):
    """At the layout level a per-tensor DQ -> elementwise float op -> Q that no QLinear op
    took becomes ai.onnxplex QLinearLookup, its table built by the three nodes' own kernels:
    the same bytes as the unfused graph, every input byte present."""
    elem = TensorProto.UINT8 if qtype == np.uint8 else TensorProto.INT8
    info = np.iinfo(qtype)
    inits = [init("s0", 0.03), init("z0", info.min + 120, qtype), init("s1", 0.02),
             init("z1", info.min + 60, qtype)] + [init(k, v) for k, v in extra]
    m = model([helper.make_node("DequantizeLinear", ["q0", "s0", "z0"], ["d0"]),
               helper.make_node(op_type, ["d0", *[k for k, _ in extra]], ["u"], **attrs),
               helper.make_node("QuantizeLinear", ["u", "s1", "z1"], ["q1"])],
              [helper.make_tensor_value_info("q0", elem, [4, 3, 8, 8])],
              [helper.make_tensor_value_info("q1", elem, None)], inits)
    feeds = {"q0": _every_byte(qtype, (4, 3, 8, 8))}
    sess = onnxplex.InferenceSession(m.SerializeToString())
    assert [p.op_type for p in sess.get_provider_assignment().placements] == ["QLinearLookup"]
    plain = onnxplex.InferenceSession(m.SerializeToString(),
                                      _options(onnxplex.GraphOptimizationLevel.ORT_DISABLE_ALL))
    np.testing.assert_array_equal(sess.run(None, feeds)[0], plain.run(None, feeds)[0])
    # below the layout level the nodes stay (a model onnxruntime loads)
    ext = onnxplex.InferenceSession(
        m.SerializeToString(), _options(onnxplex.GraphOptimizationLevel.ORT_ENABLE_EXTENDED))
    assert op_type in [p.op_type for p in ext.get_provider_assignment().placements]


@pytest.mark.parametrize("op_type", ["Mul", "Add"])
@pytest.mark.parametrize("swap", [False, True], ids=["x_first", "x_second"])
@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
def test_qlinear_op_of_x_and_a_table_of_x_is_one_table(op_type, swap, qtype):
    """A quantized SiLU as quantize_static writes it (DQ -> Sigmoid -> Q, DQ -> Mul(x, s) ->
    Q: QLinearSigmoid then QLinearMul of the same x) is one ai.onnxplex QLinearLookup at the
    layout level, with the extended level's bytes for every input byte."""
    elem = TensorProto.UINT8 if qtype == np.uint8 else TensorProto.INT8
    info = np.iinfo(qtype)
    inits = [init("sx", 0.05), init("zx", info.min + 100, qtype), init("ss", 1 / 255),
             init("zs", info.min, qtype), init("sy", 0.04), init("zy", info.min + 20, qtype)]
    operands = ["d0", "d1"][::-1] if swap else ["d0", "d1"]
    m = model([helper.make_node("DequantizeLinear", ["q0", "sx", "zx"], ["d0"]),
               helper.make_node("Sigmoid", ["d0"], ["s"]),
               helper.make_node("QuantizeLinear", ["s", "ss", "zs"], ["q1"]),
               helper.make_node("DequantizeLinear", ["q1", "ss", "zs"], ["d1"]),
               helper.make_node(op_type, operands, ["y"]),
               helper.make_node("QuantizeLinear", ["y", "sy", "zy"], ["q2"])],
              [helper.make_tensor_value_info("q0", elem, [4, 3, 8, 8])],
              [helper.make_tensor_value_info("q2", elem, None)], inits)
    feeds = {"q0": _every_byte(qtype, (4, 3, 8, 8))}
    sess = onnxplex.InferenceSession(m.SerializeToString())
    assert [p.op_type for p in sess.get_provider_assignment().placements] == ["QLinearLookup"]
    ext = onnxplex.InferenceSession(m.SerializeToString(),
                                    _options(GOL.ORT_ENABLE_EXTENDED))
    assert "QLinear" + op_type in [p.op_type for p in ext.get_provider_assignment().placements]
    np.testing.assert_array_equal(sess.run(None, feeds)[0], ext.run(None, feeds)[0])


def test_qdq_spatial_reduce_mean_is_a_global_average_pool():
    """DQ -> ReduceMean over H and W keeping them -> Q (a squeeze-excite pooling as torch
    exports it): com.microsoft QLinearGlobalAveragePool, within a step of the unfused graph
    and of onnxruntime; a mean over other axes stays."""
    inits = [init("s0", 0.05), init("z0", 7, np.uint8), init("s1", 0.01),
             init("z1", 3, np.uint8)]

    def build(axes):
        nodes = [helper.make_node("DequantizeLinear", ["q0", "s0", "z0"], ["d0"]),
                 helper.make_node("ReduceMean", ["d0", "axes"], ["m"], keepdims=1),
                 helper.make_node("QuantizeLinear", ["m", "s1", "z1"], ["q1"])]
        return model(nodes, [helper.make_tensor_value_info("q0", TensorProto.UINT8,
                                                           [2, 5, 6, 7])],
                     [helper.make_tensor_value_info("q1", TensorProto.UINT8, None)],
                     inits + [numpy_helper.from_array(np.array(axes, np.int64), "axes")],
                     opset=18)

    feeds = {"q0": RNG.integers(0, 256, (2, 5, 6, 7)).astype(np.uint8)}
    m = build([2, 3]).SerializeToString()
    sess = onnxplex.InferenceSession(m, _options(GOL.ORT_ENABLE_EXTENDED))
    assert [p.op_type for p in sess.get_provider_assignment().placements] == \
        ["QLinearGlobalAveragePool"]
    plain = onnxplex.InferenceSession(m, _options(GOL.ORT_DISABLE_ALL))
    ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = sess.run(None, feeds)[0]
    for want in (plain.run(None, feeds)[0], ref):
        assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
    other = onnxplex.InferenceSession(build([1, 2]).SerializeToString())
    assert "ReduceMean" in [p.op_type for p in other.get_provider_assignment().placements]


@pytest.mark.parametrize("quantized_out", [True, False], ids=["requantized", "float_out"])
@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "per_tensor"])
def test_qdq_gemm_becomes_qgemm(quantized_out, per_channel):
    """DQ(A) and DQ(constant B) -> Gemm (transB, a float bias) [-> Q]: com.microsoft QGemm on
    the int8 weight, within a step of the unfused graph (float) and of onnxruntime."""
    n, k = 10, 48
    wq = RNG.integers(-127, 128, (n, k)).astype(np.int8)
    ws = (RNG.random(n) * 0.01 + 0.002).astype(np.float32) if per_channel \
        else np.float32(0.005)
    inits = [init("s0", 0.04), init("z0", 100, np.uint8),
             numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(np.asarray(ws), "ws"),
             numpy_helper.from_array(np.zeros(n if per_channel else (), np.int8), "wz"),
             init("b", RNG.standard_normal(n)), init("s1", 0.08), init("z1", 128, np.uint8)]
    nodes = [helper.make_node("DequantizeLinear", ["q0", "s0", "z0"], ["a"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
             helper.make_node("Gemm", ["a", "w", "b"], ["g"], transB=1)]
    if quantized_out:
        nodes.append(helper.make_node("QuantizeLinear", ["g", "s1", "z1"], ["y"]))
        out = helper.make_tensor_value_info("y", TensorProto.UINT8, None)
    else:
        out = helper.make_tensor_value_info("g", TensorProto.FLOAT, None)
    m = model(nodes, [helper.make_tensor_value_info("q0", TensorProto.UINT8, [3, k])], [out],
              inits).SerializeToString()
    feeds = {"q0": RNG.integers(0, 256, (3, k)).astype(np.uint8)}
    sess = onnxplex.InferenceSession(m, _options(GOL.ORT_ENABLE_EXTENDED))
    assert [p.op_type for p in sess.get_provider_assignment().placements] == ["QGemm"]
    got = sess.run(None, feeds)[0]
    plain = onnxplex.InferenceSession(m, _options(GOL.ORT_DISABLE_ALL)).run(None, feeds)[0]
    ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    for want in (plain, ref):
        if quantized_out:
            assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
        else:
            # the bias quantized to the accumulator's scale: within half its step
            step = 0.04 * np.asarray(ws, np.float64).reshape(-1)
            assert np.all(np.abs(got - want) <= step * 0.5 + 1e-4 * np.abs(want))


def _options(level):
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = level
    return so


# --------------------------------------------------------------------------------------------
# ResNet-50 (light model)
# --------------------------------------------------------------------------------------------


def test_light_resnet50_matches_onnxruntime(tmp_path):
    from models import light_model_paths

    (path,) = [p for p in light_model_paths() if p.endswith("light_resnet50.onnx")]
    x = {"gpu_0/data_0": RNG.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, x)
    so = onnxplex.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    so.graph_optimization_level = GOL.ORT_ENABLE_EXTENDED   # the fusions, NCHW
    got = onnxplex.InferenceSession(path, so, providers=["cpu_mlas"]).run(None, x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-6)
    got = onnxplex.InferenceSession(path, providers=["cpu_mlas"]).run(None, x)  # channels-last
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-6)
    opt = onnx.load(str(tmp_path / "opt.onnx"))
    assert "BatchNormalization" not in ops(opt)
    # 53 Conv+BN folded; 33 Conv+Relu fused (16 Relus follow a residual Sum, not an Add)
    assert ops(opt).count("FusedConv") == 33 and ops(opt).count("Conv") == 20


def test_conv_add_relu_fused_with_sum_input(tmp_path):
    inits = [init("w", RNG.standard_normal((3, 3, 3, 3))), init("b", RNG.standard_normal(3))]
    m = model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
               helper.make_node("Add", ["x", "c"], ["s"]),
               helper.make_node("Relu", ["s"], ["y"])],
              [vi("x", [2, 3, 8, 8])], [vi("y", None)], inits)
    opt = check(m, X, tmp_path)
    assert ops(opt) == ["FusedConv"] and list(opt.graph.node[0].input) == ["x", "w", "b", "x"]


def test_conv_add_broadcast_not_sum_fused(tmp_path):
    inits = [init("w", RNG.standard_normal((3, 3, 3, 3)))]
    m = model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
               helper.make_node("Add", ["c", "z"], ["s"]),
               helper.make_node("Relu", ["s"], ["y"])],
              [vi("x", [2, 3, 8, 8]), vi("z", [1, 3, 8, 8])], [vi("y", None)], inits)
    feeds = {**X, "z": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    assert ops(check(m, feeds, tmp_path)) == ["Conv", "Add", "Relu"]


def test_conv_add_without_activation_fused_with_sum_input(tmp_path):
    inits = [init("w", RNG.standard_normal((3, 3, 3, 3)))]
    m = model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
               helper.make_node("Add", ["c", "x"], ["y"])],
              [vi("x", [2, 3, 8, 8])], [vi("y", None)], inits)
    opt = check(m, X, tmp_path)
    assert ops(opt) == ["FusedConv"] and "activation" not in attrs(opt.graph.node[0])


# ---- Conv taps that never read inside the input ---------------------------------------------

@pytest.mark.parametrize("hw,dil,pads,strides,kernel_after", [
    ((9, 10), (12, 12), (12, 12, 12, 12), (1, 1), [1, 1]),   # ASPP on a small map: the center
    ((9, 10), (12, 3), (12, 3, 12, 3), (1, 1), [1, 3]),      # rows only
    ((9, 10), (10, 10), (10, 10, 10, 10), (2, 2), [1, 1]),   # strided
    ((9, 10), (5, 5), (5, 5, 5, 5), (1, 1), [3, 3]),         # every tap reads inside: kept
    ((9, 10), (12, 12), (12, 0, 12, 24), (1, 1), [1, 1]),    # asymmetric pads
])
def test_conv_taps_outside_the_input_are_dropped(tmp_path, hw, dil, pads, strides,
                                                 kernel_after):
    """An atrous conv whose outer taps read only padding (DeepLabV3's ASPP at dilations 24/36
    on a 20x20 map): those kernel rows/columns go, the pads shrink by as much; the output
    shape and values stay (against the unoptimized graph and onnxruntime)."""
    rng = np.random.default_rng(sum(dil))
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], dilations=list(dil),
                            pads=list(pads), strides=list(strides))
    m = model([node], [vi("x", [2, 3, *hw])], [vi("y", None)],
              [init("w", w), init("b", rng.standard_normal(4))])
    opt = check(m, {"x": rng.standard_normal((2, 3, *hw)).astype(np.float32)}, tmp_path)
    conv = node_of(opt, "Conv")
    assert attrs(conv).get("kernel_shape", [3, 3]) == kernel_after, attrs(conv)
    assert min(attrs(conv).get("pads", [0])) >= 0


def test_conv_taps_kept_when_the_input_size_is_not_known(tmp_path):
    rng = np.random.default_rng(1)
    node = helper.make_node("Conv", ["x", "w"], ["y"], dilations=[12, 12], pads=[12] * 4)
    m = model([node], [vi("x", [1, 3, "h", "w"])], [vi("y", None)],
              [init("w", rng.standard_normal((4, 3, 3, 3)))])
    opt = check(m, {"x": rng.standard_normal((1, 3, 9, 10)).astype(np.float32)}, tmp_path)
    assert "kernel_shape" not in attrs(node_of(opt, "Conv")) or \
        attrs(node_of(opt, "Conv"))["kernel_shape"] == [3, 3]
