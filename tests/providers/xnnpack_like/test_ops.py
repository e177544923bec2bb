"""xnnpack_like, op class by op class: NHWC semantics against cpu_mlas (broadcast, concat axis,
flatten/reshape/transpose across layout, pooling pads, grouped/depthwise conv), quantization
rounding, the variant each node matches and the kernel it runs, and decline reasons.

The graphs are small and run at ORT_DISABLE_ALL, so the delegate sees them as written.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from onnxplex.providers.xnnpack_like import _tables as T
from onnxplex.providers.xnnpack_like._provider import XnnpackLikeProvider

from ._helpers import assert_rel, declined, model, notes, pair, placements, run_both, vi
from .conftest import needs_kleidi

F32 = np.float32
RNG = np.random.default_rng(7)
HAS_KLEIDI = T.native()[0] is not None

def w(*shape, scale=0.3):
    return (RNG.standard_normal(shape) * scale).astype(F32)


def all_claimed(sess, n_partitions: int | None = 1) -> None:
    plan = sess.get_provider_assignment()
    assert plan.counts().get("cpu_mlas", 0) == 0, plan.report()
    if n_partitions is not None:
        assert len(plan.partitions) == n_partitions, plan.report()


def check_same(m, feed, rel=1e-5, n_partitions: int | None = 1, level=None):
    x, c = pair(m) if level is None else pair(m, level)
    all_claimed(x, n_partitions)
    for a, b in run_both(x, c, feed):
        assert_rel(a, b, rel)
    return x


# ---- availability ------------------------------------------------------------------------------


def test_available_everywhere_and_describe_reports_every_variant(own_path):
    assert XnnpackLikeProvider.available()
    assert XnnpackLikeProvider.available({"kleidi": "0"})
    info = XnnpackLikeProvider.describe()
    assert info["layout"] == "NHWC inside partitions"
    tables = info["variants"]
    assert set(tables) == {"fully_connected", "conv2d", "batch_matmul"}
    assert set(tables["fully_connected"]) == {"pf16_gemm", "pf32_gemm", "qp8_f32_qc8w_gemm",
                                              "pqs8_qc8w_gemm", "qp8_f32_qb4w_gemm"}
    assert set(tables["conv2d"]) == {"pf32_gemm", "pqs8_qc8w_gemm"}
    assert set(tables["batch_matmul"]) == {"pf32_gemm", "pf16_gemm"}
    pqs8 = tables["conv2d"]["pqs8_qc8w_gemm"]["kleidi_kernel"]
    assert pqs8.startswith("none: not available in this build")
    if HAS_KLEIDI and T.native()[0].variants()["gemm_f32"]["selected"] == "reference":
        assert tables["fully_connected"]["pf32_gemm"]["kleidi_kernel"] == (
            "none: gemm_f32 has no Arm variant for this CPU (ONNXPLEX_KLEIDI_FORCE_REFERENCE=1 "
            "forces the reference one)")


@needs_kleidi
def test_describe_with_reference_forced(forced):
    tables = XnnpackLikeProvider.describe()["variants"]
    assert tables["conv2d"]["pf32_gemm"]["kleidi_kernel"] == "gemm_f32/reference"
    assert tables["fully_connected"]["qp8_f32_qb4w_gemm"]["kleidi_kernel"] == \
        "qgemm_qsi4c32/reference"


# ---- elementwise broadcasting in NHWC -----------------------------------------------------------


def test_binary_broadcast_follows_onnx_semantics_in_nhwc(own_path):
    inits = {"c_c11": w(3, 1, 1), "c_1c11": w(1, 3, 1, 1), "c_w": w(5), "s": np.array(2, F32),
             "e": np.array(2, F32), "c_full": w(1, 3, 4, 5)}
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "c_c11"], ["a1"], name="add_c11"),
        helper.make_node("Mul", ["a1", "c_1c11"], ["a2"], name="mul_1c11"),
        helper.make_node("Sub", ["c_w", "a2"], ["a3"], name="sub_w_first"),
        helper.make_node("Div", ["a3", "y"], ["a4"], name="div_computed_hw"),
        helper.make_node("Add", ["a4", "s"], ["a5"], name="add_scalar"),
        helper.make_node("Max", ["a5", "z"], ["a6"], name="max_rank4_input"),
        helper.make_node("Pow", ["a6", "e"], ["a7"], name="pow"),
        helper.make_node("Min", ["a7", "c_full"], ["out"], name="min_full"),
        helper.make_node("Mul", ["y", "y"], ["out2"], name="mul_rank2"),
    ]
    m = model(nodes, [vi("x", [1, 3, 4, 5]), vi("y", [4, 5]), vi("z", [1, 1, 4, 5])],
              [vi("out", [1, 3, 4, 5]), vi("out2", [4, 5])], inits)
    feed = {"x": RNG.standard_normal((1, 3, 4, 5)).astype(F32),
            "y": RNG.uniform(0.5, 2, (4, 5)).astype(F32),
            "z": RNG.standard_normal((1, 1, 4, 5)).astype(F32)}
    x = check_same(m, feed, rel=1e-6, n_partitions=2)   # mul_rank2 is not connected
    nn = notes(x)
    assert nn["add_c11"] == "elementwise -> own:binary_nhwc"
    assert nn["mul_rank2"] == "elementwise -> own:binary"


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_concat_axis_is_remapped_in_nhwc(own_path, axis):
    a_shape, b_shape = [1, 2, 4, 5], [1, 2, 4, 5]
    b_shape[axis] = 3
    nodes = [helper.make_node("Relu", ["a"], ["ra"]), helper.make_node("Tanh", ["b"], ["tb"]),
             helper.make_node("Concat", ["ra", "tb"], ["c"], name="concat", axis=axis),
             helper.make_node("Sigmoid", ["c"], ["y"])]
    out = list(a_shape)
    out[axis] = a_shape[axis] + 3
    m = model(nodes, [vi("a", a_shape), vi("b", b_shape)], [vi("y", out)])
    feed = {"a": RNG.standard_normal(a_shape).astype(F32),
            "b": RNG.standard_normal(b_shape).astype(F32)}
    x = check_same(m, feed, rel=1e-6)
    assert notes(x)["concat"] == "shape -> own:concat_nhwc"


def test_flatten_reshape_transpose_across_layout_give_nchw_order(own_path):
    inits = {"w": w(6, 3, 1, 1), "shape3": np.array([1, 6, 20], np.int64),
             "shape_zero": np.array([0, -1, 5], np.int64), "axes0": np.array([0], np.int64),
             "axes13": np.array([1, 3], np.int64)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),          # NHWC inside
        helper.make_node("Flatten", ["c"], ["flat1"], name="flatten1", axis=1),
        helper.make_node("Flatten", ["c"], ["flat2"], name="flatten2", axis=-2),
        helper.make_node("Reshape", ["c", "shape3"], ["r3"], name="reshape3"),
        helper.make_node("Reshape", ["c", "shape_zero"], ["rz"], name="reshape_zero"),
        helper.make_node("Transpose", ["c"], ["t"], name="to_nhwc", perm=[0, 2, 3, 1]),
        helper.make_node("Relu", ["t"], ["tr"], name="relu_t"),           # rank 4, logical NHWC
        helper.make_node("Transpose", ["c"], ["t2"], name="swap_hw", perm=[0, 1, 3, 2]),
        helper.make_node("Squeeze", ["c", "axes0"], ["sq"], name="squeeze"),
        helper.make_node("Unsqueeze", ["sq", "axes13"], ["us"], name="unsqueeze"),
    ]
    outs = [vi("flat1", [1, 120]), vi("flat2", [6, 20]), vi("r3", [1, 6, 20]),
            vi("rz", [1, 24, 5]), vi("tr", [1, 4, 5, 6]), vi("t2", [1, 6, 5, 4]),
            vi("us", [6, 1, 4, 1, 5])]
    m = model(nodes, [vi("x", [1, 3, 4, 5])], outs, inits)
    feed = {"x": RNG.standard_normal((1, 3, 4, 5)).astype(F32)}
    x = check_same(m, feed, rel=1e-6)
    assert notes(x)["flatten1"] == "shape -> own:flatten_view"


# ---- pooling --------------------------------------------------------------------------------


POOLS = {
    "max_3x3_s2_p1": ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "max_ceil": ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "max_dilated": ("MaxPool", dict(kernel_shape=[2, 3], dilations=[2, 1], pads=[1, 0, 0, 1])),
    "max_same_upper": ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2],
                                       auto_pad="SAME_UPPER")),
    "max_same_lower": ("MaxPool", dict(kernel_shape=[3, 2], auto_pad="SAME_LOWER")),
    "avg_exclude_pad": ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2],
                                            pads=[1, 1, 1, 1])),
    "avg_include_pad": ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2],
                                            pads=[1, 2, 1, 0], count_include_pad=1)),
    "avg_ceil_include": ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2],
                                             pads=[1, 1, 1, 1], ceil_mode=1,
                                             count_include_pad=1)),
    "avg_ceil_exclude": ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2],
                                             ceil_mode=1)),
    "avg_valid": ("AveragePool", dict(kernel_shape=[2, 3], auto_pad="VALID")),
}


@pytest.mark.parametrize("case", sorted(POOLS))
def test_pooling_pads_strides_ceil_mode(own_path, case):
    op, attrs = POOLS[case]
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node(op, ["r"], ["p"], name="pool", **attrs),
             helper.make_node("Neg", ["p"], ["y"])]
    shape = (1, 5, 9, 8)
    m = model(nodes, [vi("x", shape)], [vi("y", None)], opset=19)
    feed = {"x": RNG.standard_normal(shape).astype(F32)}
    x = check_same(m, feed, rel=1e-6)
    assert notes(x)["pool"].startswith("pooling -> own:")


def test_global_pools_and_reductions_in_nhwc(own_path):
    inits = {"axes23": np.array([2, 3], np.int64), "axes1": np.array([1], np.int64),
             "axes_2": np.array([-2], np.int64)}
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["gap"], name="gap"),
             helper.make_node("GlobalMaxPool", ["r"], ["gmp"], name="gmp"),
             helper.make_node("ReduceMean", ["r", "axes23"], ["m23"], name="mean_keep"),
             helper.make_node("ReduceMean", ["r", "axes23"], ["m23n"], name="mean_drop",
                              keepdims=0),
             helper.make_node("ReduceSum", ["r", "axes1"], ["s1"], name="sum_c", keepdims=0),
             helper.make_node("ReduceMax", ["r", "axes_2"], ["mx"], name="max_h", keepdims=0)]
    outs = [vi("gap", [2, 3, 1, 1]), vi("gmp", [2, 3, 1, 1]), vi("m23", [2, 3, 1, 1]),
            vi("m23n", [2, 3]), vi("s1", [2, 4, 5]), vi("mx", [2, 3, 5])]
    m = model(nodes, [vi("x", [2, 3, 4, 5])], outs, inits, opset=18)
    check_same(m, {"x": RNG.standard_normal((2, 3, 4, 5)).astype(F32)}, rel=1e-6)


# ---- convolution ------------------------------------------------------------------------------

CONVS = {
    # name: (cin, cout, k, attrs, expected variant prefix, expected own kernel)
    "pointwise": (8, 16, 1, {}, "pf32_gemm", "own:gemm_nhwc"),
    "pointwise_stride2": (8, 16, 1, dict(strides=[2, 2]), "pf32_gemm", "own:gemm_nhwc"),
    "pointwise_padded": (8, 4, 1, dict(pads=[1, 0, 0, 1]), "none: 1x1 kernel with padding",
                         "own:im2col_gemm"),
    "dense_3x3": (4, 6, 3, dict(pads=[1, 1, 1, 1]), "none: 3x3 kernel", "own:im2col_gemm"),
    "dense_asym_pads_stride": (4, 6, 3, dict(pads=[0, 1, 2, 0], strides=[2, 1]),
                               "none: 3x3", "own:im2col_gemm"),
    "dense_dilated": (4, 6, 3, dict(dilations=[2, 2], pads=[2, 2, 2, 2]), "none: 3x3",
                      "own:im2col_gemm"),
    "dense_same_upper": (4, 6, 4, dict(auto_pad="SAME_UPPER", strides=[2, 2]), "none: 4x4",
                         "own:im2col_gemm"),
    "dense_same_lower": (4, 6, 4, dict(auto_pad="SAME_LOWER"), "none: 4x4", "own:im2col_gemm"),
    "dense_valid": (4, 6, 3, dict(auto_pad="VALID"), "none: 3x3", "own:im2col_gemm"),
    "depthwise": (8, 8, 3, dict(group=8, pads=[1, 1, 1, 1]), "none: depthwise (group=8)",
                  "own:depthwise_taps"),
    "depthwise_stride2": (8, 8, 3, dict(group=8, pads=[1, 1, 1, 1], strides=[2, 2]),
                          "none: depthwise", "own:depthwise_taps"),
    "depthwise_multiplier2": (4, 8, 3, dict(group=4, pads=[1, 1, 1, 1]), "none: grouped",
                              "own:grouped_im2col_gemm"),
    "grouped": (8, 12, 3, dict(group=2, pads=[1, 1, 1, 1]), "none: grouped (group=2)",
                "own:grouped_im2col_gemm"),
}


@pytest.mark.parametrize("case", sorted(CONVS))
def test_conv_variants_and_kernels(own_path, case):
    cin, cout, k, attrs, variant, kernel = CONVS[case]
    group = attrs.get("group", 1)
    inits = {"w": w(cout, cin // group, k, k), "b": w(cout)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", **attrs),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    m = model(nodes, [vi("x", [2, cin, 9, 10])], [vi("y", None)], inits)
    feed = {"x": RNG.standard_normal((2, cin, 9, 10)).astype(F32)}
    x = check_same(m, feed, rel=1e-5)
    note = notes(x)["conv"]
    assert note.startswith(f"conv2d: {variant}"), note
    assert f"-> {kernel} + Relu" in note, note
    assert notes(x)["relu"] == f"folded into 'conv' -> {kernel} + Relu"


@needs_kleidi
def test_pointwise_conv_runs_kleidi_when_forced(forced):
    inits = {"w": w(16, 8, 1, 1), "b": w(16), "w3": w(4, 16, 3, 3)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="pw", strides=[2, 2]),
             helper.make_node("Clip", ["c"], ["r"], name="clip", min=0.0, max=0.5),
             helper.make_node("Conv", ["r", "w3"], ["y"], name="k3", pads=[1, 1, 1, 1])]
    m = model(nodes, [vi("x", [1, 8, 10, 10])], [vi("y", None)], inits, opset=10)
    x = check_same(m, {"x": RNG.standard_normal((1, 8, 10, 10)).astype(F32)}, rel=1e-5)
    nn = notes(x)
    assert nn["pw"] == "conv2d: pf32_gemm -> kleidi:gemm_f32/reference + Clip[0, 0.5]"
    assert nn["k3"].startswith("conv2d: none: 3x3 kernel") and "-> own:im2col_gemm" in nn["k3"]


# ---- fully connected / batch matmul -------------------------------------------------------------

GEMMS = {
    "plain": (dict(), (6,), False),
    "transB_alpha_beta": (dict(transB=1, alpha=0.5, beta=2.0), (1, 6), False),
    "transA": (dict(transA=1), (6,), False),
    "c_matrix": (dict(), (4, 6), False),
    "c_column": (dict(beta=0.5), (4, 1), False),
    "c_scalar": (dict(), (), False),
    "no_c": (dict(), None, False),
    "fused_relu": (dict(), (6,), True),
}


@pytest.mark.parametrize("case", sorted(GEMMS))
def test_gemm_attributes(kleidi, case):
    attrs, c_shape, relu = GEMMS[case]
    a_shape = (5, 4) if attrs.get("transA") else (4, 5)
    b_shape = (6, 5) if attrs.get("transB") else (5, 6)
    inits = {"b": w(*b_shape)}
    ins = ["a", "b"]
    if c_shape is not None:
        inits["c"] = w(*c_shape) if c_shape else np.array(0.7, F32)
        ins.append("c")
    nodes = [helper.make_node("Gemm", ins, ["g"], name="gemm", **attrs),
             helper.make_node("Relu" if relu else "Tanh", ["g"], ["y"], name="act")]
    m = model(nodes, [vi("a", a_shape)], [vi("y", [4, 6])], inits)
    x = check_same(m, {"a": RNG.standard_normal(a_shape).astype(F32)}, rel=1e-5)
    note = notes(x)["gemm"]
    kernel = "kleidi:gemm_f32/reference" if kleidi else "own:gemm_blas"
    assert note.startswith(f"fully_connected: pf32_gemm -> {kernel}"), note


def test_matmul_fp16_is_pf16_fully_connected(kleidi):
    inits = {"wt": w(8, 3).astype(np.float16)}
    nodes = [helper.make_node("MatMul", ["a", "wt"], ["y"], name="fc16")]
    m = model(nodes, [vi("a", [2, 5, 8], TP.FLOAT16)], [vi("y", [2, 5, 3], TP.FLOAT16)], inits)
    a = RNG.standard_normal((2, 5, 8)).astype(np.float16)
    x, c = pair(m)
    all_claimed(x)
    (ya, yc), = run_both(x, c, {"a": a})
    assert ya.dtype == np.float16
    np.testing.assert_allclose(ya.astype(F32), yc.astype(F32), rtol=2e-3, atol=2e-3)
    f16 = kleidi and "gemm_f16" in T.native()[0].variants()
    kernel = "kleidi:gemm_f16/reference" if f16 else "own:gemm_blas"
    assert notes(x)["fc16"].startswith(f"fully_connected: pf16_gemm -> {kernel}")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_batch_matmul_broadcasts(kleidi, dtype):
    elem = TP.FLOAT if dtype == np.float32 else TP.FLOAT16
    nodes = [helper.make_node("Relu", ["a"], ["ra"]), helper.make_node("Tanh", ["b"], ["tb"]),
             helper.make_node("MatMul", ["ra", "tb"], ["y"], name="bmm")]
    m = model(nodes, [vi("a", [2, 3, 4, 5], elem), vi("b", [3, 5, 6], elem)],
              [vi("y", [2, 3, 4, 6], elem)])
    feed = {"a": RNG.standard_normal((2, 3, 4, 5)).astype(dtype),
            "b": RNG.standard_normal((3, 5, 6)).astype(dtype)}
    x, c = pair(m)
    all_claimed(x)
    (ya, yc), = run_both(x, c, feed)
    tol = 1e-5 if dtype == np.float32 else 2e-3
    np.testing.assert_allclose(ya.astype(F32), yc.astype(F32), rtol=tol, atol=tol)
    variant = "pf32_gemm" if dtype == np.float32 else "pf16_gemm"
    note = notes(x)["bmm"]
    assert note.startswith(f"batch_matmul: {variant} -> "), note
    family = "gemm_f32" if dtype == np.float32 else "gemm_f16"
    kleidi_runs = kleidi and family in T.native()[0].variants()
    assert (f"kleidi:{family}/reference" in note) == kleidi_runs, note


# ---- quantization ------------------------------------------------------------------------------


def test_quantize_rounds_half_to_even_and_saturates(own_path):
    vals = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 300.0, -300.0, 3.49, 0.0], F32)
    inits = {"s": np.array(1.0, F32), "z8": np.array(0, np.int8), "zu": np.array(128, np.uint8)}
    nodes = [helper.make_node("Identity", ["x"], ["xi"]),
             helper.make_node("QuantizeLinear", ["xi", "s", "z8"], ["q8"], name="q_int8"),
             helper.make_node("QuantizeLinear", ["xi", "s", "zu"], ["qu"], name="q_uint8")]
    m = model(nodes, [vi("x", [10])], [vi("q8", [10], TP.INT8), vi("qu", [10], TP.UINT8)],
              inits)
    x, c = pair(m)
    all_claimed(x)
    q8, qu = x.run(None, {"x": vals})
    np.testing.assert_array_equal(q8, [0, 2, 2, 0, -2, -2, 127, -128, 3, 0])
    np.testing.assert_array_equal(qu, [128, 130, 130, 128, 126, 126, 255, 0, 131, 128])
    for a, b in run_both(x, c, {"x": vals}):
        np.testing.assert_array_equal(a, b)


def test_per_channel_quantize_dequantize_in_nhwc(own_path):
    inits = {"w": w(3, 3, 1, 1), "s": np.array([0.01, 0.02, 0.05], F32),
             "z": np.array([-3, 0, 7], np.int8), "s_last": np.array([0.1] * 5, F32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["q"], name="q", axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], name="dq", axis=1),
             helper.make_node("QuantizeLinear", ["dq", "s_last"], ["q3"], name="q3", axis=3),
             helper.make_node("DequantizeLinear", ["q3", "s_last"], ["y"], name="dq3",
                              axis=-1)]
    m = model(nodes, [vi("x", [1, 3, 4, 5])], [vi("q", [1, 3, 4, 5], TP.INT8),
                                               vi("y", [1, 3, 4, 5])], inits, opset=19)
    x, c = pair(m)
    all_claimed(x)
    for a, b in run_both(x, c, {"x": RNG.standard_normal((1, 3, 4, 5)).astype(F32)}):
        np.testing.assert_array_equal(a, b)


def _qdq_conv_model(y_scale: float, x_vals_shape=(1, 1, 2, 4)):
    """DQ(x int8) , DQ(w int8, per channel) , DQ(bias int32) -> Conv 1x1 -> Relu -> Q."""
    inits = {"xs": np.array(1.0, F32), "xz": np.array(0, np.int8),
             "wq": np.array([[[[1]]], [[[-1]]]], np.int8), "ws": np.array([1.0, 1.0], F32),
             "bq": np.array([0, 1], np.int32), "bs": np.array([1.0, 1.0], F32),
             "ys": np.array(y_scale, F32), "yz": np.array(3, np.int8)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"], name="dq_x"),
             helper.make_node("DequantizeLinear", ["wq", "ws"], ["wf"], name="dq_w", axis=0),
             helper.make_node("DequantizeLinear", ["bq", "bs"], ["bf"], name="dq_b", axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], name="qconv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["y"], name="q_y")]
    return model(nodes, [vi("x", x_vals_shape, TP.INT8)], [vi("y", None, TP.INT8)], inits,
                 opset=19)


def test_qdq_conv_requantizes_half_to_even(own_path):
    m = _qdq_conv_model(2.0)
    x, c = pair(m)
    all_claimed(x)
    xq = np.array([[[[1, 3, 5, 7], [-1, -3, 9, 127]]]], np.int8)
    (y, yc), = run_both(x, c, {"x": xq})
    # channel 0: acc = x, y = rint(x / 2) + 3, Relu -> at least the zero point 3
    ch0 = np.maximum(np.rint(xq[0, 0].astype(np.float64) / 2), 0) + 3
    # channel 1: acc = 1 - x
    ch1 = np.maximum(np.rint((1 - xq[0, 0].astype(np.float64)) / 2), 0) + 3
    np.testing.assert_array_equal(y[0, 0], ch0.astype(np.int8))
    np.testing.assert_array_equal(y[0, 1], np.clip(ch1, -128, 127).astype(np.int8))
    np.testing.assert_array_equal(y, yc)
    nn = notes(x)
    assert nn["qconv"].startswith("conv2d: pqs8_qc8w_gemm -> own:int8_gemm_nhwc + Relu"), \
        nn["qconv"]
    assert "not available in this build" in nn["qconv"]
    for name in ("dq_x", "dq_w", "dq_b", "relu", "q_y"):
        assert nn[name].startswith("folded into 'qconv' -> own:int8_gemm_nhwc"), nn[name]


def test_qdq_with_uint8_weights_is_not_pqs8(own_path):
    inits = {"xs": np.array(0.1, F32), "xz": np.array(10, np.uint8),
             "wq": RNG.integers(0, 255, (4, 2, 3, 3)).astype(np.uint8),
             "ws": np.array(0.01, F32), "wz": np.array(128, np.uint8),
             "ys": np.array(0.2, F32), "yz": np.array(5, np.uint8)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"], name="dq_x"),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wf"], name="dq_w"),
             helper.make_node("Conv", ["xf", "wf"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["y"], name="q_y")]
    m = model(nodes, [vi("x", [1, 2, 5, 5], TP.UINT8)], [vi("y", None, TP.UINT8)], inits,
              opset=19)
    x, c = pair(m)
    all_claimed(x)
    xq = RNG.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    (y, yc), = run_both(x, c, {"x": xq})
    assert np.abs(y.astype(int) - yc.astype(int)).max() <= 1
    note = notes(x)["conv"]
    assert note.startswith("conv2d: none: QDQ conv but not pqs8_qc8w_gemm: the weights are "
                           "uint8"), note
    assert "-> own:im2col_gemm" in note


# ---- declines ----------------------------------------------------------------------------------


def test_declines_say_why(own_path):
    inits = {"w1d": w(4, 3, 3), "scales": np.array([1, 1, 2, 2], F32),
             "bt": w(5, 2)}
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["up"], name="resize", mode="nearest"),
        helper.make_node("Conv", ["x", "wdyn"], ["cdyn"], name="conv_dynamic_weight"),
        helper.make_node("Conv", ["s", "w1d"], ["c1d"], name="conv1d"),
        helper.make_node("Add", ["i", "i"], ["ii"], name="add_int64"),
        helper.make_node("MaxPool", ["x"], ["mp", "idx"], name="maxpool_indices",
                         kernel_shape=[2, 2]),
        helper.make_node("Gemm", ["g", "gb"], ["gy"], name="gemm_dynamic_b"),
        helper.make_node("Softmax", ["d"], ["dy"], name="softmax_double"),
        helper.make_node("FusedGemm", ["g", "bt"], ["fg"], name="fused_selu",
                         domain="com.microsoft", activation="Selu", activation_alpha=1.5,
                         activation_gamma=1.1),
    ]
    m = model(nodes, [vi("x", [1, 3, 8, 8]), vi("wdyn", [4, 3, 3, 3]), vi("s", [1, 3, 10]),
                      vi("i", [4], TP.INT64), vi("g", [2, 5]), vi("gb", [5, 2]),
                      vi("d", [2, 3], TP.DOUBLE)],
              [vi("up", None), vi("cdyn", None), vi("c1d", None), vi("ii", None, TP.INT64),
               vi("mp", None), vi("idx", None, TP.INT64), vi("gy", None),
               vi("dy", None, TP.DOUBLE), vi("fg", [2, 2])], inits, ms=True)
    x, _ = pair(m)
    assert declined(x, "resize") == "op Resize is not supported by the delegate"
    assert declined(x, "conv_dynamic_weight") == ("the weight is not a constant (it must be "
                                                  "known when the partition is compiled)")
    assert declined(x, "conv1d").startswith("1-D convolution")
    assert declined(x, "add_int64").startswith("input A is int64")
    assert declined(x, "maxpool_indices") == "the Indices output of MaxPool is not supported"
    assert declined(x, "gemm_dynamic_b").startswith("B is not a constant")
    assert declined(x, "softmax_double").startswith("input is float64")
    assert declined(x, "fused_selu") == "FusedGemm activation Selu is not supported"
    assert all(p.provider == "cpu_mlas" for p in placements(x).values())


def test_qlinear_conv_and_matmul_as_pqs8(own_path):
    inits = {"xs": np.array(0.05, F32), "xz": np.array(120, np.uint8),
             "w": RNG.integers(-127, 128, (4, 2, 3, 3)).astype(np.int8),
             "ws": RNG.uniform(0.005, 0.02, 4).astype(F32), "wz": np.zeros(4, np.int8),
             "ys": np.array(0.1, F32), "yz": np.array(100, np.uint8),
             "b": RNG.integers(-500, 500, 4).astype(np.int32),
             "bm": RNG.integers(-127, 128, (12, 6)).astype(np.int8),
             "bms": np.array(0.01, F32), "bmz": np.array(0, np.int8),
             "ms": np.array(0.3, F32), "mz": np.array(7, np.uint8), "shape": np.array([3, 12])}
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                              ["c"], name="qconv", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Reshape", ["c", "shape"], ["flat"], name="reshape"),
             helper.make_node("QLinearMatMul", ["flat", "ys", "yz", "bm", "bms", "bmz", "ms",
                                                "mz"], ["y"], name="qmm")]
    m = model(nodes, [vi("x", [1, 2, 5, 5], TP.UINT8)],
              [vi("c", [1, 4, 3, 3], TP.UINT8), vi("y", [3, 6], TP.UINT8)], inits)
    x, c = pair(m)
    all_claimed(x)
    nn = notes(x)
    assert nn["qconv"].startswith("conv2d: pqs8_qc8w_gemm -> own:int8_im2col_gemm")
    assert nn["qmm"].startswith("fully_connected: pqs8_qc8w_gemm -> own:int8_gemm")
    feed = {"x": RNG.integers(0, 256, (1, 2, 5, 5)).astype(np.uint8)}
    for a, b in run_both(x, c, feed):
        np.testing.assert_array_equal(a, b)


def test_conv_epilogue_folds_batchnorm_and_runs_a_later_residual(own_path):
    """Conv -> BatchNorm -> Add(residual computed *after* the conv in graph order) -> Relu
    runs as one op at the Add's place; the Relu-less shortcut keeps its own BatchNorm."""
    c = 4
    inits = {"w": w(c, c, 3, 3), "wd": w(c, c, 1, 1),
             **{f"{p}{k}": v for k in ("", "d") for p, v in
                (("g", RNG.uniform(0.5, 1.5, c).astype(F32)), ("b", w(c)), ("m", w(c)),
                 ("v", RNG.uniform(0.5, 1.5, c).astype(F32)))}}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["bn"], name="bn"),
        helper.make_node("Conv", ["x", "wd"], ["cd"], name="shortcut"),
        helper.make_node("BatchNormalization", ["cd", "gd", "bd", "md", "vd"], ["bnd"],
                         name="bn_shortcut"),
        helper.make_node("Add", ["bn", "bnd"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    m = model(nodes, [vi("x", [1, c, 6, 7])], [vi("y", [1, c, 6, 7])], inits)
    x = check_same(m, {"x": RNG.standard_normal((1, c, 6, 7)).astype(F32)}, rel=1e-5)
    nn = notes(x)
    assert nn["conv"] == ("conv2d: none: 3x3 kernel; pf32_gemm is for pointwise (1x1) "
                          "convolutions -> own:im2col_gemm + BatchNorm folded + residual Add "
                          "+ Relu")
    for name in ("bn", "add", "relu"):
        assert nn[name] == ("folded into 'conv' -> own:im2col_gemm + BatchNorm folded + "
                            "residual Add + Relu")
    assert nn["bn_shortcut"] == "folded into 'shortcut' -> own:gemm_nhwc + BatchNorm folded"


def test_dead_intermediates_are_overwritten_in_place(own_path):
    inits = {"c": np.ones((3, 1, 1), F32)}
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "c"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["s"]), helper.make_node("Mul", ["s", "a"], ["y"])]
    m = model(nodes, [vi("x", [1, 3, 4, 5])], [vi("y", [1, 3, 4, 5])], inits)
    x = check_same(m, {"x": RNG.standard_normal((1, 3, 4, 5)).astype(F32)}, rel=1e-6)
    kernel = next(s.kernel for s in x._exec.steps if s.provider == "xnnpack_like")
    donated = {st.op.label.name: st.op.donate for st in kernel._steps}
    # Relu's result dies in Add (written in place); Sigmoid must not overwrite `a`, which
    # Mul still reads; Mul overwrites the sigmoid's result
    assert donated == {"Relu_0": None, "Add_1": 0, "Sigmoid_2": None, "Mul_3": 0}


def test_epilogues_of_batch_matmul_and_fused_conv_with_residual(kleidi):
    """An activation after a batch matmul joins it; a FusedConv that already adds a residual
    keeps a BatchNorm after it as its own op (folding would scale the residual)."""
    c = 3
    inits = {"w": w(c, c, 3, 3), "g": RNG.uniform(0.5, 1.5, c).astype(F32), "b": w(c),
             "m": w(c), "v": RNG.uniform(0.5, 1.5, c).astype(F32)}
    nodes = [helper.make_node("MatMul", ["p", "q"], ["pq"], name="bmm"),
             helper.make_node("Sigmoid", ["pq"], ["y1"], name="sig"),
             helper.make_node("FusedConv", ["x", "w", "", "z"], ["fc"], name="fconv",
                              domain="com.microsoft", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["fc", "g", "b", "m", "v"], ["y2"],
                              name="bn")]
    m = model(nodes, [vi("p", [2, 4, 5]), vi("q", [2, 5, 3]), vi("x", [1, c, 5, 5]),
                      vi("z", [1, c, 5, 5])], [vi("y1", [2, 4, 3]), vi("y2", [1, c, 5, 5])],
              inits, ms=True)
    feed = {k: RNG.standard_normal(s).astype(F32) for k, s in
            (("p", (2, 4, 5)), ("q", (2, 5, 3)), ("x", (1, c, 5, 5)), ("z", (1, c, 5, 5)))}
    x = check_same(m, feed, rel=1e-5, n_partitions=2)
    nn = notes(x)
    assert nn["sig"].startswith("folded into 'bmm' -> ") and "+ Sigmoid" in nn["sig"]
    assert nn["bn"] == "elementwise -> own:affine_channels"
