"""cpu_mlas convolution and pooling kernels (Conv, ConvTranspose, MaxPool, AveragePool, global
pools) against onnxruntime, or onnx's reference evaluator where ORT lacks the opset."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from kernel_harness import node_model
from onnx import TensorProto

from onnxplex import ProviderContext, load_model
from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

from ._oracle import assert_same, check, ort_run, ours

ort.set_default_logger_severity(3)

RNG = np.random.default_rng(1234)
TOL = dict(rtol=1e-4, atol=1e-5)
HALF_TOL = dict(rtol=1e-2, atol=1e-2)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def float_node(op_type: str, inputs, n_outputs: int = 1, **kw):
    """The node of a one-node model whose outputs are declared float (for nodes onnx shape
    inference cannot type, which would otherwise reach the dtype check as UNDEFINED)."""
    m = node_model(op_type, inputs, n_outputs, **kw)
    for o in m.graph.output:
        o.type.tensor_type.elem_type = TensorProto.FLOAT
    return load_model(m).node_views[0]


# --------------------------------------------------------------------------------------------
# Conv
# --------------------------------------------------------------------------------------------

CONV_CASES = {
    "3x3_pad": ((2, 4, 9, 9), (6, 4, 3, 3), dict(pads=[1, 1, 1, 1])),
    "asym_pad_stride_dil": ((2, 4, 9, 9), (6, 4, 3, 3),
                            dict(pads=[1, 0, 2, 1], strides=[2, 1], dilations=[2, 2])),
    "same_upper_s2": ((1, 4, 9, 8), (6, 4, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    "same_lower_s2": ((1, 4, 9, 8), (6, 4, 3, 3), dict(auto_pad="SAME_LOWER", strides=[2, 2])),
    "valid": ((1, 4, 9, 8), (6, 4, 3, 2), dict(auto_pad="VALID")),
    "no_attrs": ((1, 3, 6, 6), (2, 3, 3, 3), {}),
    "explicit_kernel_shape": ((1, 3, 6, 6), (2, 3, 3, 3), dict(kernel_shape=[3, 3])),
    "groups": ((2, 4, 9, 9), (6, 2, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),
    "groups_stride": ((1, 8, 10, 10), (8, 2, 3, 3), dict(group=4, strides=[2, 2])),
    "depthwise": ((2, 4, 9, 9), (4, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1])),
    "depthwise_s2_dil": ((1, 5, 11, 10), (5, 1, 3, 3),
                         dict(group=5, pads=[2, 2, 2, 2], strides=[2, 2], dilations=[2, 2])),
    "depthwise_mult": ((1, 3, 8, 8), (6, 1, 3, 3), dict(group=3, pads=[1, 1, 1, 1])),
    "1x1": ((2, 8, 7, 7), (5, 8, 1, 1), {}),
    "1x1_stride": ((2, 8, 7, 7), (5, 8, 1, 1), dict(strides=[2, 2])),
    "1x1_pad": ((1, 8, 5, 5), (5, 8, 1, 1), dict(pads=[1, 0, 0, 1])),
    "1x1_groups": ((1, 8, 5, 5), (6, 4, 1, 1), dict(group=2)),
    "1d": ((2, 3, 10), (5, 3, 3), dict(pads=[1, 2], strides=[2])),
    "1d_dil": ((2, 3, 12), (5, 3, 3), dict(dilations=[3])),
    "3d": ((1, 3, 5, 6, 7), (4, 3, 3, 2, 3), dict(pads=[1, 0, 1, 1, 1, 0])),
    "3d_stride_groups": ((1, 4, 6, 6, 6), (4, 2, 2, 2, 2), dict(strides=[2, 1, 2], group=2)),
    "large_c": ((1, 64, 12, 12), (32, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
    # stride 1, >= 32 channels per group, wide rows: the shifted-GEMM path
    "shifted": ((2, 32, 18, 17), (16, 32, 3, 3), dict(pads=[1, 1, 1, 1])),
    "shifted_dil_groups": ((1, 64, 20, 20), (64, 32, 3, 2),
                           dict(pads=[2, 1, 0, 1], dilations=[2, 3], group=2)),
    "shifted_5x5": ((1, 32, 16, 20), (32, 32, 5, 5), dict(auto_pad="SAME_UPPER")),
}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("const", [True, False], ids=["const_w", "runtime_w"])
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv(case, const, bias):
    xs, ws, attrs = CONV_CASES[case]
    inputs = [rand(*xs), rand(*ws)] + ([rand(ws[0])] if bias else [])
    # float32 sums of fan_in products: the rounding error grows like sqrt(fan_in)
    fan_in = int(np.prod(ws[1:]))
    check("Conv", inputs, opset=17, const_inputs=[1, 2] if const else [], oracle="ort",
          **attrs, rtol=1e-4, atol=1e-5 * max(1.0, (fan_in / 9) ** 0.5))


@pytest.mark.parametrize("opset", [1, 11, 22])
def test_conv_opsets(opset):
    inputs = [rand(1, 4, 7, 7), rand(6, 2, 3, 3), rand(6)]
    check("Conv", inputs, opset=opset, const_inputs=[1, 2], group=2, pads=[1, 1, 0, 0],
          strides=[1, 2], **TOL)


def test_conv_im2col_batch_chunks(monkeypatch):
    from onnxplex.providers.cpu_mlas import nn

    monkeypatch.setattr(nn, "_IM2COL_CHUNK_BYTES", 4096)  # force one image per chunk
    inputs = [rand(3, 4, 9, 9), rand(6, 2, 3, 3), rand(6)]
    check("Conv", inputs, opset=17, const_inputs=[1, 2], group=2, strides=[2, 1], oracle="ort",
          **TOL)


def test_conv_float16():
    inputs = [rand(1, 4, 7, 7, dtype=np.float16), rand(6, 4, 3, 3, dtype=np.float16),
              rand(6, dtype=np.float16)]
    check("Conv", inputs, opset=17, const_inputs=[1, 2], pads=[1, 1, 1, 1], oracle="ort",
          **HALF_TOL)


def test_conv_does_not_modify_inputs():
    inputs = [rand(1, 4, 7, 7), rand(4, 1, 3, 3), rand(4)]
    copies = [a.copy() for a in inputs]
    ours("Conv", inputs, opset=17, group=4, pads=[1, 1, 1, 1])
    for a, b in zip(inputs, copies):
        np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------------------------
# ConvTranspose
# --------------------------------------------------------------------------------------------

CONVT_CASES = {
    "s2": ((2, 4, 5, 5), (4, 3, 3, 3), dict(strides=[2, 2])),
    "s2_k2_nonoverlap": ((1, 4, 5, 6), (4, 3, 2, 2), dict(strides=[2, 2])),
    # stride = kernel: the products interleaved, no accumulation (cropped by pads, or the
    # general path when the output reaches past them)
    "s3_k3_nonoverlap_pads": ((2, 4, 5, 6), (4, 3, 3, 3), dict(strides=[3, 3],
                                                                pads=[1, 0, 2, 1])),
    "s2_k2_nonoverlap_output_shape": ((1, 4, 5, 6), (4, 3, 2, 2),
                                      dict(strides=[2, 2], output_shape=[9, 11])),
    "s2_k2_outpad": ((1, 4, 5, 6), (4, 3, 2, 2), dict(strides=[2, 2], output_padding=[1, 0])),
    "s2_k2_group": ((1, 4, 5, 6), (4, 3, 2, 2), dict(strides=[2, 2], group=2)),
    "1d_nonoverlap": ((2, 3, 7), (3, 2, 4), dict(strides=[4])),
    "pads_outpad": ((1, 4, 5, 5), (4, 3, 3, 3),
                    dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    "group_dil": ((1, 4, 5, 6), (4, 2, 3, 3),
                  dict(group=2, strides=[2, 3], dilations=[2, 1], pads=[1, 0, 0, 2])),
    "depthwise": ((1, 4, 5, 5), (4, 1, 4, 4), dict(group=4, strides=[2, 2], pads=[1, 1, 1, 1])),
    "output_shape_bigger": ((1, 4, 5, 5), (4, 3, 3, 3),
                            dict(strides=[2, 2], output_shape=[12, 11])),
    "output_shape_smaller": ((1, 4, 5, 5), (4, 3, 3, 3),
                             dict(strides=[2, 2], output_shape=[9, 10])),
    "output_shape_upper": ((1, 4, 5, 5), (4, 3, 3, 3),
                           dict(strides=[2, 2], output_shape=[10, 9], auto_pad="SAME_UPPER")),
    "output_shape_lower": ((1, 4, 5, 5), (4, 3, 3, 3),
                           dict(strides=[2, 2], output_shape=[10, 9], auto_pad="SAME_LOWER")),
    "same_upper": ((1, 4, 5, 5), (4, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    "same_lower": ((1, 4, 5, 5), (4, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    "valid": ((1, 4, 5, 5), (4, 3, 3, 3), dict(strides=[2, 2], auto_pad="VALID")),
    "stride1": ((1, 4, 5, 5), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1])),
    "1d": ((2, 3, 7), (3, 2, 4), dict(strides=[3], pads=[1, 2])),
}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("const", [True, False], ids=["const_w", "runtime_w"])
@pytest.mark.parametrize("case", list(CONVT_CASES))
def test_conv_transpose(case, const, bias):
    xs, ws, attrs = CONVT_CASES[case]
    inputs = [rand(*xs), rand(*ws)] + ([rand(ws[1] * attrs.get("group", 1))] if bias else [])
    check("ConvTranspose", inputs, opset=17, const_inputs=[1, 2] if const else [],
          oracle="ort", **attrs, **TOL)


def test_conv_transpose_output_shape_full_rank():
    # output_shape given as [N, C, *spatial]: ORT accepts it; onnx shape inference does not.
    inputs = [rand(1, 4, 5, 5), rand(4, 3, 3, 3)]
    attrs = dict(strides=[2, 2], output_shape=[1, 3, 10, 10])
    node = float_node("ConvTranspose", inputs, opset=17, **attrs)
    config, reason = CpuMlasProvider.op_table.lookup(node)
    assert config is not None, reason
    got = config.factory(node, ProviderContext())(*inputs)
    want = ort_run("ConvTranspose", inputs, opset=17, strides=[2, 2], output_shape=[10, 10])
    assert_same([got], want, **TOL)


def test_conv_transpose_3d():
    # ORT's CPU ConvTranspose is 1-D/2-D only; the reference evaluator covers 3-D.
    inputs = [rand(1, 2, 3, 4, 3), rand(2, 3, 2, 3, 2), rand(3)]
    check("ConvTranspose", inputs, opset=17, oracle="ref", strides=[2, 1, 2],
          pads=[0, 1, 0, 0, 1, 1], **TOL)


@pytest.mark.parametrize("opset", [1, 11])
def test_conv_transpose_opsets(opset):
    check("ConvTranspose", [rand(1, 2, 4, 4), rand(2, 3, 3, 3)], opset=opset, strides=[2, 2],
          const_inputs=[1], oracle="ort", **TOL)


# --------------------------------------------------------------------------------------------
# MaxPool / AveragePool / global pools
# --------------------------------------------------------------------------------------------

POOL_CASES = {
    "3x3_s2_pad": dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "2x2_s2": dict(kernel_shape=[2, 2], strides=[2, 2]),
    "asym": dict(kernel_shape=[3, 2], strides=[1, 2], pads=[1, 0, 0, 1]),
    "ceil": dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    "ceil_pad": dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    "ceil_last_window_dropped": dict(kernel_shape=[2, 2], strides=[3, 3], pads=[1, 1, 1, 1],
                                     ceil_mode=1),
    "same_upper": dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    "same_lower": dict(kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_LOWER"),
    "valid": dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="VALID"),
}


@pytest.mark.parametrize("case", list(POOL_CASES))
def test_max_pool(case):
    check("MaxPool", [rand(2, 3, 10, 9)], opset=12, oracle="ort", **POOL_CASES[case], **TOL)


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("case", ["3x3_s2_pad", "asym", "ceil_pad", "same_upper"])
def test_max_pool_indices(case, storage_order):
    check("MaxPool", [rand(2, 3, 10, 9)], 2, opset=12, oracle="ort", storage_order=storage_order,
          **POOL_CASES[case], **TOL)


def test_max_pool_indices_ties_pick_first():
    x = np.zeros((1, 1, 4, 4), np.float32)
    check("MaxPool", [x], 2, opset=12, oracle="ort", kernel_shape=[2, 2], strides=[1, 1])


@pytest.mark.parametrize("case,shape,attrs", [
    ("dilated", (1, 2, 9, 9), dict(kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 1, 1, 1])),
    ("1d", (2, 3, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ("3d", (1, 2, 5, 6, 7), dict(kernel_shape=[2, 2, 3], strides=[2, 2, 1])),
])
def test_max_pool_nd_dilations(case, shape, attrs):
    check("MaxPool", [rand(*shape)], 2, opset=12, oracle="ort", **attrs, **TOL)


@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool"])
def test_pool_same_with_dilation(op_type):
    # SAME pads with the dilated kernel, as the spec says (ORT pads with the undilated kernel
    # and returns a smaller output): 7 -> 7 needs pads 1+1 here, checked as explicit pads.
    x = rand(1, 2, 7, 7)
    attrs = dict(kernel_shape=[2, 2], dilations=[2, 2], opset=19)
    got = ours(op_type, [x], auto_pad="SAME_UPPER", **attrs)[0]
    want = ort_run(op_type, [x], pads=[1, 1, 1, 1], **attrs)[0]
    assert_same([got], [want], **TOL)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_max_pool_int8(dtype):
    x = RNG.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (1, 2, 7, 7)).astype(dtype)
    check("MaxPool", [x], opset=12, oracle="ort", kernel_shape=[3, 3], pads=[1, 1, 1, 1])


@pytest.mark.parametrize("opset", [1, 8, 10, 11, 22])
def test_max_pool_opsets(opset):
    check("MaxPool", [rand(1, 2, 6, 6)], opset=opset, kernel_shape=[2, 2], strides=[2, 2], **TOL)


def test_max_pool_float16():
    check("MaxPool", [rand(1, 2, 6, 6, dtype=np.float16)], opset=12, oracle="ort",
          kernel_shape=[3, 3], pads=[1, 1, 1, 1])


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("case", list(POOL_CASES))
def test_average_pool(case, count_include_pad):
    check("AveragePool", [rand(2, 3, 10, 9)], opset=11, oracle="ort",
          count_include_pad=count_include_pad, **POOL_CASES[case], **TOL)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[2, 2], dilations=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 2], dilations=[2, 3], strides=[2, 1], ceil_mode=1),
], ids=["dil", "dil_ceil"])
def test_average_pool_dilations_19(attrs, count_include_pad):
    check("AveragePool", [rand(1, 2, 10, 9)], opset=19, oracle="ort",
          count_include_pad=count_include_pad, **attrs, **TOL)


@pytest.mark.parametrize("opset", [7, 10, 22])
def test_average_pool_opsets(opset):
    check("AveragePool", [rand(1, 2, 6, 6)], opset=opset, kernel_shape=[3, 3],
          pads=[1, 1, 1, 1], **TOL)


def test_average_pool_opset1():
    # AveragePool-1 excludes padding per its spec; ORT and the reference evaluator include it,
    # so compare without padding only.
    check("AveragePool", [rand(1, 2, 6, 6)], opset=1, kernel_shape=[3, 3], strides=[2, 2],
          **TOL)
    got = ours("AveragePool", [np.ones((1, 1, 3, 3), np.float32)], opset=1,
               kernel_shape=[3, 3], pads=[1, 1, 1, 1])[0]
    np.testing.assert_allclose(got, np.ones((1, 1, 3, 3)))


@pytest.mark.parametrize("shape", [(2, 3, 11), (1, 2, 4, 5, 6)], ids=["1d", "3d"])
def test_average_pool_nd(shape):
    k = [2] * (len(shape) - 2)
    check("AveragePool", [rand(*shape)], opset=11, oracle="ort", kernel_shape=k,
          strides=[2] * len(k), pads=[1] * 2 * len(k), **TOL)


def test_average_pool_float16():
    check("AveragePool", [rand(1, 2, 6, 6, dtype=np.float16)], opset=11, oracle="ort",
          kernel_shape=[3, 3], pads=[1, 1, 1, 1], **HALF_TOL)


@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (2, 3, 7), (1, 2, 3, 4, 5)])
def test_global_pools(op_type, shape):
    check(op_type, [rand(*shape)], opset=17, oracle="ort", **TOL)


@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_float16(op_type):
    check(op_type, [rand(2, 3, 5, 4, dtype=np.float16)], opset=17, **HALF_TOL)
