"""cpu_mlas com.microsoft kernels of the CNN / quantization fusions (providers/cpu_mlas/contrib.py)
against onnxruntime: FusedConv, FusedGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul,
QLinearAdd, QLinearMul, QLinearGlobalAveragePool, QGemm. uint8 x int8 products: against onnxruntime
with int8 weights in the range it computes exactly on this CPU, and over the full int8 range
against exact arithmetic (tests/_ort_quirks.py). The 8-bit outputs of the QLinear ops are
onnxruntime's exactly (_close_ints with no tolerance)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from _ort_quirks import ort_exact_weights

from onnxplex.providers.cpu_mlas._native import native

from ._oracle import assert_same, check, oracle_run, ours, ref_run

ort.set_default_logger_severity(3)

RNG = np.random.default_rng(7)
MS = "com.microsoft"


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


_CONV_ACTS = [("Relu", None), ("Sigmoid", None), ("Tanh", None), ("LeakyRelu", [0.1]),
              ("Clip", [-0.5, 0.7]), ("HardSigmoid", [0.3, 0.4])]


@pytest.mark.parametrize("act,params", _CONV_ACTS)
@pytest.mark.parametrize("const_w", [True, False])
def test_fused_conv(act, params, const_w):
    x, w, b = rand(2, 4, 9, 9), rand(6, 4, 3, 3), rand(6)
    attrs = {"activation": act}
    if params is not None:
        attrs["activation_params"] = params
    check("FusedConv", [x, w, b], domain=MS, opset=17, oracle="ort", rtol=1e-4, atol=1e-5,
          const_inputs=(1, 2) if const_w else (), pads=[1, 1, 1, 1], strides=[2, 1],
          **attrs)


def test_fused_conv_group_dilation_sum_input():
    x, w, b = rand(1, 4, 10, 10), rand(4, 2, 3, 3), rand(4)
    z = rand(1, 4, 6, 10)
    check("FusedConv", [x, w, b, z], domain=MS, opset=17, oracle="ort", rtol=1e-4, atol=1e-5,
          const_inputs=(1, 2), group=2, dilations=[2, 1], pads=[0, 1, 0, 1],
          activation="Relu")


_GEMM_ACTS = [("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("Softsign", {}),
              ("Softplus", {}), ("LeakyRelu", {"activation_alpha": 0.2}),
              ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.6}),
              ("Elu", {"activation_alpha": 0.8}),
              ("Selu", {"activation_alpha": 1.6, "activation_gamma": 1.1}),
              ("ThresholdedRelu", {"activation_alpha": 0.5})]


@pytest.mark.parametrize("act,params", _GEMM_ACTS)
def test_fused_gemm(act, params):
    a, b, c = rand(5, 7), rand(6, 7), rand(6)
    check("FusedGemm", [a, b, c], domain=MS, opset=17, oracle="ort", rtol=1e-4, atol=1e-5,
          const_inputs=(1, 2), transB=1, alpha=0.7, beta=1.3, activation=act, **params)


def _mmitf_inputs(b, per_column: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """b_scale, b_zero_point (scalars, or one per column) and the bias for B ``b`` [K, N]."""
    n = b.shape[1] if per_column else 1
    b_s = (RNG.random(n) * 0.05 + 0.01).astype(np.float32).reshape(() if n == 1 else (n,))
    b_zp = RNG.integers(0, 10, n).astype(b.dtype).reshape(() if n == 1 else (n,))
    return b_s, b_zp, rand(b.shape[1])


def _dequantized_matmul(aq, a_s, a_zp, b, b_s, b_zp, bias=None) -> np.ndarray:
    """Exact (int64, then float64) (aq - a_zp) a_s @ (b - b_zp) b_s + bias."""
    acc = (aq.astype(np.int64) - a_zp.astype(np.int64)) @ (b.astype(np.int64)
                                                          - b_zp.astype(np.int64))
    y = acc * (np.float64(a_s) * b_s.astype(np.float64))
    return y if bias is None else y + bias


def _saturating(a, b) -> None:
    """Row 0 of uint8 ``a`` times column 0 of int8 ``b`` starts with 255 * -128 twice: a pair of
    products summing to -65280, outside the int16 ``vpmaddubsw`` adds a pair in."""
    a[..., 0, :2] = 255
    b[:2, 0] = -128


@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("const_b", [True, False])
def test_matmul_integer_to_float(b_type, per_column, const_b):
    """Against onnxruntime; int8 weights only where it is exact (7 bits without VNNI)."""
    a = RNG.integers(0, 256, (2, 3, 32)).astype(np.uint8)
    b = ort_exact_weights(RNG, b_type, (32, 5))
    b_s, b_zp, bias = _mmitf_inputs(b, per_column)
    check("MatMulIntegerToFloat", [a, b, np.asarray(0.02, np.float32), b_s,
                                   np.asarray(120, np.uint8), b_zp, bias],
          domain=MS, opset=17, oracle="ort", rtol=1e-5, atol=1e-4,
          const_inputs=(1, 3, 5, 6) if const_b else ())


@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("const_b", [True, False])
def test_matmul_integer_to_float_full_range_int8_exact(per_column, const_b):
    """Full-range int8 weights (with pairs that overflow int16) against exact arithmetic: only
    float32 rounding of the rescale and the bias add remains (~1e-7 relative)."""
    a = RNG.integers(0, 256, (2, 3, 64)).astype(np.uint8)
    b = RNG.integers(-128, 128, (64, 5)).astype(np.int8)
    _saturating(a, b)
    b_s, b_zp, bias = _mmitf_inputs(b, per_column)
    a_s, a_zp = np.asarray(0.02, np.float32), np.asarray(120, np.uint8)
    got = ours("MatMulIntegerToFloat", [a, b, a_s, b_s, a_zp, b_zp, bias], domain=MS,
               opset=17, const_inputs=(1, 3, 5, 6) if const_b else ())
    want = _dequantized_matmul(a, a_s, a_zp, b, b_s, b_zp, bias).astype(np.float32)
    assert_same(got, [want], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
@pytest.mark.parametrize("with_bias", [False, True])
def test_dynamic_quantize_matmul(b_type, with_bias):
    """Against onnxruntime; int8 weights only where it is exact (7 bits without VNNI)."""
    a = rand(4, 3, 64)
    b = ort_exact_weights(RNG, b_type, (64, 8))
    b_s = np.asarray(0.01, np.float32)
    b_zp = np.asarray(3 if b_type == np.uint8 else -2, b_type)
    inputs = [a, b, b_s, b_zp] + ([rand(8)] if with_bias else [])
    check("DynamicQuantizeMatMul", inputs, domain=MS, opset=17, oracle="ort", rtol=1e-5,
          atol=1e-4, const_inputs=(1, 2, 3, 4))


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("const_b", [True, False])
def test_dynamic_quantize_matmul_full_range_int8_exact(with_bias, const_b):
    """Full-range int8 weights (with pairs that overflow int16) against exact arithmetic on A
    quantized by the ONNX reference DynamicQuantizeLinear."""
    a = rand(4, 3, 64)
    a[..., 0, :2] = 8.0  # the maximum of A: quantized to 255, times -128 twice (_saturating)
    b = RNG.integers(-128, 128, (64, 8)).astype(np.int8)
    b[:2, 0] = -128
    b_s, b_zp = np.asarray(0.01, np.float32), np.asarray(-2, np.int8)
    bias = rand(8) if with_bias else None
    inputs = [a, b, b_s, b_zp] + ([bias] if with_bias else [])
    got = ours("DynamicQuantizeMatMul", inputs, domain=MS, opset=17,
               const_inputs=(1, 2, 3, 4) if const_b else ())
    aq, a_s, a_zp = ref_run("DynamicQuantizeLinear", [a], 3, opset=11)
    assert aq[0, 0, :2].tolist() == [255, 255]
    want = _dequantized_matmul(aq, a_s, a_zp, b, b_s, b_zp, bias).astype(np.float32)
    assert_same(got, [want], rtol=1e-5, atol=1e-4)


def _close_ints(got, want, lsb: int = 0):
    """Integer outputs equal (``lsb``: up to that many steps apart, where the two engines
    compute differently)."""
    (g,), (w,) = got, want
    assert g.dtype == w.dtype and g.shape == w.shape
    diff = np.abs(g.astype(np.int32) - w.astype(np.int32))
    assert diff.max() <= lsb, diff.max()
    assert (diff > 0).mean() < 0.02


@pytest.mark.parametrize("op_type", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
@pytest.mark.parametrize("b_shape", [(2, 3, 4, 5), (3, 1, 1), ()])
def test_qlinear_binary(op_type, qtype, b_shape):
    info = np.iinfo(qtype)
    a = RNG.integers(info.min, info.max + 1, (2, 3, 4, 5)).astype(qtype)
    b = RNG.integers(info.min, info.max + 1, b_shape).astype(qtype)
    sc = lambda v: np.asarray(v, np.float32)  # noqa: E731
    zp = lambda v: np.asarray(v, qtype)  # noqa: E731
    c_scale = 0.05 if op_type == "QLinearAdd" else 0.3
    inputs = [a, sc(0.02), zp(info.min + 100), b, sc(0.03), zp(info.min + 90), sc(c_scale),
              zp(info.min + 128)]
    kw = dict(domain=MS, opset=17, const_inputs=(1, 2, 4, 5, 6, 7))
    got, want = ours(op_type, inputs, **kw), oracle_run(op_type, inputs, oracle="ort", **kw)
    np.testing.assert_array_equal(got[0], want[0])   # (onnxruntime's own steps: exact)


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shapes", [
    ((2, 3, 40, 50), (2, 3, 40, 50)), ((1, 28, 28, 96), (1, 1, 1, 96)),
    ((1, 1, 1, 40), (1, 9, 7, 40)), ((2, 5, 6, 24), (2, 1, 1, 24)),
    ((1, 96, 28, 28), (1, 96, 1, 1)), ((1, 96, 1, 1), (1, 96, 28, 28)), ((5, 1, 7), (1, 6, 1)),
    ((33,), ())], ids=["same", "gate_last", "gate_last_first", "gate_last_batch2", "gate_rows",
                       "gate_first", "outer", "scalar"])
@pytest.mark.parametrize("scales", [(0.02, 0.03, 0.3), (0.5, 0.25, 0.001), (0.01, 0.01, 1.7)],
                         ids=["plain", "saturating", "small"])
@pytest.mark.parametrize("op_type", ["QLinearMul", "QLinearAdd"])
def test_qlinear_mul_and_add_are_onnxruntimes_byte_for_byte(op_type, qtype, shapes, scales):
    """QLinearMul and QLinearAdd give onnxruntime's bytes (its MLAS kernels' steps: Mul's
    exact integer product times a_scale * b_scale / c_scale in float32 plus c's zero point;
    Add's fused multiply-adds of the raw values by the scale ratios, a broadcast operand
    joining the constant part first), rounded half to even and saturated, on the native path
    and on the numpy one (an outer broadcast the native call does not take), with
    saturation on both sides."""
    info = np.iinfo(qtype)
    (sa, sb), (ka, kb, kc) = shapes, scales
    a = RNG.integers(info.min, info.max + 1, sa).astype(qtype)
    b = RNG.integers(info.min, info.max + 1, sb).astype(qtype)
    sc = lambda v: np.asarray(v, np.float32)  # noqa: E731
    zp = lambda v: np.asarray(v, qtype)  # noqa: E731
    inputs = [a, sc(ka), zp(info.min + 100), b, sc(kb), zp(info.min + 90), sc(kc),
              zp(info.min + 128)]
    kw = dict(domain=MS, opset=17, const_inputs=(1, 2, 4, 5, 6, 7))
    got = ours(op_type, inputs, **kw)[0]
    want = oracle_run(op_type, inputs, oracle="ort", **kw)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(native() is None, reason="the native module is not built")
@pytest.mark.parametrize("mul", [False, True], ids=["add", "mul"])
@pytest.mark.parametrize("shapes", [
    ((2, 3, 40, 50), (2, 3, 40, 50)), ((2, 3, 40, 50), (2, 3, 1, 1)),
    ((2, 3, 1, 1), (2, 3, 40, 50)), ((7, 300), ()), ((4, 5), (1, 5)),
    ((1, 1, 1, 37), (1, 6, 5, 37)), ((3, 4, 1), (1, 4, 1)), ((2, 5, 6, 24), (2, 1, 1, 24))],
                         ids=["same", "gate", "gate_first", "scalar", "row_vector",
                              "gate_last_first", "middle_run", "gate_last_batch2"])
@pytest.mark.parametrize("types", [(np.uint8, np.uint8, np.uint8), (np.int8, np.uint8, np.int8)])
def test_qlinear_binary_native_matches_numpy(mul, shapes, types):
    """The native QLinearAdd / QLinearMul give the numpy kernel's values exactly (onnxruntime's
    steps: Add's fused multiply-adds, Mul's integer product), for whole operands, a squeeze-excite
    gate's one value per row on either side and a scalar; a run of values repeated for every
    row (a row vector, a channels-last gate [1, 1, 1, C], [1, 4, 1] against [3, 4, 1]) is read
    cyclically; another broadcast (a gate [2, 1, 1, C] of two images) is copied out to the
    output's shape first."""
    from onnxplex.providers.cpu_mlas import contrib

    (sa, sb), (ta, tb, tc) = shapes, types
    a = RNG.integers(np.iinfo(ta).min, np.iinfo(ta).max + 1, sa).astype(ta)
    b = RNG.integers(np.iinfo(tb).min, np.iinfo(tb).max + 1, sb).astype(tb)
    b_zp = np.asarray(-3 if tb == np.int8 else 9, tb)
    args = (a, np.float32(0.021), np.asarray(7, ta), b, np.float32(0.033), b_zp,
            np.float32(0.07 if mul else 0.04), np.asarray(5, tc))
    got = contrib._native_qbinary(mul, 2, *args, np.dtype(tc))
    want = (contrib._qlinear_mul if mul else contrib._qlinear_add)(*args, np.dtype(tc))
    assert got is not None and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op_type,attrs", [("QLinearSigmoid", {}),
                                           ("QLinearLeakyRelu", {"alpha": 0.1})])
@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
def test_qlinear_lookup_ops(op_type, attrs, qtype):
    """QLinearSigmoid / QLinearLeakyRelu (a table of the 256 input values) against
    onnxruntime's, every input value present: the same bytes."""
    info = np.iinfo(qtype)
    x = np.concatenate([np.arange(info.min, info.max + 1), RNG.integers(info.min, info.max + 1,
                                                                         700)]).astype(qtype)
    inputs = [x.reshape(4, -1), np.asarray(0.06, np.float32), np.asarray(info.min + 120, qtype),
              np.asarray(0.005 if op_type == "QLinearSigmoid" else 0.04, np.float32),
              np.asarray(info.min + 7, qtype)]
    kw = dict(domain=MS, opset=17, const_inputs=(1, 2, 3, 4), **attrs)
    _close_ints(ours(op_type, inputs, **kw), oracle_run(op_type, inputs, oracle="ort", **kw))


@pytest.mark.parametrize("quantized_out", [True, False], ids=["uint8_out", "float_out"])
@pytest.mark.parametrize("with_c", [True, False], ids=["C", "no_C"])
@pytest.mark.parametrize("trans", [(0, 1), (1, 0)], ids=["transB", "transA"])
@pytest.mark.parametrize("per_column", [False, True], ids=["per_tensor", "per_column"])
@pytest.mark.parametrize("const_b", [True, False], ids=["const_B", "B_fed"])
def test_qgemm(quantized_out, with_c, trans, per_column, const_b):
    """com.microsoft QGemm (a Gemm in QOperator format) against onnxruntime: int32 C, alpha,
    transA/transB, per-column B scales, float or requantized output (the requantized one
    onnxruntime's bytes)."""
    trans_a, trans_b = trans
    m, k, n = 5, 40, 6
    a = RNG.integers(0, 256, (k, m) if trans_a else (m, k)).astype(np.uint8)
    b = ort_exact_weights(RNG, np.int8, (n, k) if trans_b else (k, n))
    b_s = (RNG.random(n) * 0.02 + 0.005).astype(np.float32) if per_column \
        else np.asarray(0.01, np.float32)
    b_zp = np.zeros(n, np.int8) if per_column else np.asarray(0, np.int8)
    c = RNG.integers(-3000, 3000, n).astype(np.int32) if with_c else None
    inputs = [a, np.asarray(0.02, np.float32), np.asarray(118, np.uint8), b, b_s, b_zp, c]
    if quantized_out:
        inputs += [np.asarray(0.5, np.float32), np.asarray(130, np.uint8)]
    kw = dict(domain=MS, opset=17, transA=trans_a, transB=trans_b, alpha=0.75,
              const_inputs=(1, 2, 3, 4, 5, 6, 7, 8) if const_b else (1, 2, 4, 5, 6, 7, 8))
    got = ours("QGemm", inputs, **kw)
    want = oracle_run("QGemm", inputs, oracle="ort", **kw)
    if quantized_out:
        _close_ints(got, want)
    else:
        assert_same(got, want, rtol=1e-6, atol=1e-5)


def _q(qtype, shape) -> np.ndarray:
    info = np.iinfo(qtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(qtype)


def _sz(scale, zp, qtype) -> list[np.ndarray]:
    return [np.asarray(scale, np.float32), np.asarray(zp, qtype)]


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
def test_qlinear_concat(qtype):
    """QLinearConcat: one input at the output's scale (copied), two requantized."""
    lo = int(np.iinfo(qtype).min)
    inputs = _sz(0.05, lo + 128, qtype)
    for shape, scale, zp in (((2, 3, 4), 0.05, lo + 128), ((2, 5, 4), 0.02, lo + 100),
                             ((2, 1, 4), 0.11, lo + 140)):
        inputs += [_q(qtype, shape)] + _sz(scale, zp, qtype)
    kw = dict(domain=MS, opset=17, axis=1, const_inputs=(0, 1, 3, 4, 6, 7, 9, 10))
    _close_ints(ours("QLinearConcat", inputs, **kw),
                oracle_run("QLinearConcat", inputs, oracle="ort", **kw))


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3], "strides": [2, 2],
                                    "pads": [1, 1, 1, 1]},
                                   {"kernel_shape": [2, 3], "pads": [0, 1, 0, 1],
                                    "count_include_pad": 1}], ids=["pad_excluded", "pad_counted"])
@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_average_pool(qtype, attrs, channels_last):
    lo = int(np.iinfo(qtype).min)
    x = _q(qtype, (2, 7, 9, 4) if channels_last else (2, 4, 7, 9))
    inputs = [x, *_sz(0.04, lo + 100, qtype), *_sz(0.03, lo + 110, qtype)]
    kw = dict(domain=MS, opset=17, channels_last=channels_last, const_inputs=(1, 2, 3, 4),
              **attrs)
    _close_ints(ours("QLinearAveragePool", inputs, **kw),
                oracle_run("QLinearAveragePool", inputs, oracle="ort", **kw))


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
@pytest.mark.parametrize("axis,opset", [(-1, 13), (1, 13), (1, 11)])
def test_qlinear_softmax(qtype, axis, opset):
    """QLinearSoftmax, the output at onnxruntime's usual 1/256 scale; ``opset`` below 13
    flattens at ``axis``."""
    lo = int(np.iinfo(qtype).min)
    inputs = [_q(qtype, (2, 3, 10)), *_sz(0.05, lo + 120, qtype),
              *_sz(1 / 256, lo, qtype)]
    kw = dict(domain=MS, opset=17, axis=axis, const_inputs=(1, 2, 3, 4),
              node_attrs={"opset": opset})
    _close_ints(ours("QLinearSoftmax", inputs, **kw),
                oracle_run("QLinearSoftmax", inputs, oracle="ort", **kw))


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
def test_qlinear_where(qtype):
    lo = int(np.iinfo(qtype).min)
    cond = RNG.random((3, 4)) < 0.5
    inputs = [cond, _q(qtype, (3, 4)), *_sz(0.05, lo + 120, qtype), _q(qtype, (1, 4)),
              *_sz(0.02, lo + 90, qtype), *_sz(0.04, lo + 128, qtype)]
    kw = dict(domain=MS, opset=17, const_inputs=(2, 3, 5, 6, 7, 8))
    _close_ints(ours("QLinearWhere", inputs, **kw),
                oracle_run("QLinearWhere", inputs, oracle="ort", **kw))


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool(qtype, channels_last):
    info = np.iinfo(qtype)
    x = RNG.integers(info.min, info.max + 1, (2, 5, 6, 7)).astype(qtype)
    inputs = [x, np.asarray(0.04, np.float32), np.asarray(info.min + 100, qtype),
              np.asarray(0.03, np.float32), np.asarray(info.min + 110, qtype)]
    kw = dict(domain=MS, opset=17, const_inputs=(1, 2, 3, 4), channels_last=channels_last)
    _close_ints(ours("QLinearGlobalAveragePool", inputs, **kw),
                oracle_run("QLinearGlobalAveragePool", inputs, oracle="ort", **kw))


@pytest.mark.skipif(native() is None, reason="the native integer GEMM is not built")
@pytest.mark.parametrize("with_bias", [False, True])
def test_dynamic_quantize_matmul_releases_its_weight(with_bias):
    """With a constant B, scale and bias the kernel always runs the native GEMM on its packed
    copy: it marks B prepacked, the session holds no B, and the results are unchanged."""
    from kernel_harness import node_model

    import onnxplex

    a = rand(4, 3, 64)
    b = RNG.integers(-128, 128, (64, 8)).astype(np.int8)
    inputs = [a, b, np.asarray(0.01, np.float32), np.asarray(-2, np.int8)] + \
        ([rand(8)] if with_bias else [])
    kw = dict(domain=MS, opset=17, const_inputs=(1, 2, 3, 4))
    sess = onnxplex.InferenceSession(
        node_model("DynamicQuantizeMatMul", inputs, **kw).SerializeToString())
    held = {sess._exec.slot_names[s] for s in sess._exec.constants}
    assert "in1" not in held
    (y,) = sess.run(None, {"in0": a})
    assert_same((y,), ours("DynamicQuantizeMatMul", inputs, **kw))


@pytest.mark.skipif(native() is None, reason="the native module is not built")
@pytest.mark.parametrize("x_dt,y_dt", [(np.uint8, np.uint8), (np.int8, np.int8),
                                       (np.uint8, np.int8)])
def test_native_qlinear_global_average_pool_is_the_float32_steps(x_dt, y_dt):
    """The one-call channels-last pooling computes the op's float32 steps exactly as the numpy
    kernel does them (mean = float32(sum / count), minus x's zero point, times x's scale,
    divided by y's scale, rounded half to even, y's zero point added, saturated): across many
    scales and zero points, a single row (each mean an integer: the ties of the division
    included) and 49 rows."""
    for trial in range(60):
        rows = 1 if trial % 3 == 0 else 49
        xi, yi = np.iinfo(x_dt), np.iinfo(y_dt)
        x = RNG.integers(xi.min, xi.max + 1, (2, rows, 37)).astype(x_dt)
        xz, yz = x_dt(RNG.integers(xi.min, xi.max + 1)), y_dt(RNG.integers(yi.min, yi.max + 1))
        xs = np.float32(RNG.choice([0.5, 0.25, 0.1, RNG.random() * 0.2 + 1e-3]))
        ys = np.float32(RNG.choice([0.5, 1.0, 0.3, RNG.random() * 0.2 + 1e-3]))
        mean = (x.sum(axis=1, dtype=np.int64) / np.float64(rows)).astype(np.float32)
        want = np.clip(np.rint(((mean - np.float32(xz)) * xs) / ys) + np.float32(yz),
                       yi.min, yi.max).astype(y_dt)
        got = native().qlinear_global_average_pool_8bit(x, float(xz), float(xs), float(ys),
                                                         float(yz), y_dt == np.int8, 2)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype, alpha", [(np.float16, 1.702), (np.float16, 1.0),
                                          (np.float64, 1.702)])
def test_quick_gelu_half_and_double(dtype, alpha):
    """com.microsoft QuickGelu beyond float32 (it was declined, so a CLIP fused by
    onnxruntime's transformer optimizer and converted to float16 could not load): float16 in
    float32, rounded once, as onnxruntime computes it between its inserted Casts."""
    x = (np.random.default_rng(2).standard_normal((3, 7)) * 3).astype(dtype)
    check("QuickGelu", [x], domain="com.microsoft", opset=17, oracle="ort", alpha=alpha,
          rtol=1e-3 if dtype == np.float16 else 1e-12, atol=1e-3 if dtype == np.float16
          else 1e-12)


@pytest.mark.parametrize("values, attrs", [
    (np.array([["a", "bb"], ["hello world", ""]], dtype=object), {}),
    (np.array(["ünï", "abc", "abcd", "abcde"], dtype=object), {"seed": 3}),
    (np.arange(-3, 4, dtype=np.int32) * 977, {"seed": 42}),
    (np.arange(-3, 4, dtype=np.int64) * 10**11, {"positive": 0}),
    (np.linspace(-2, 2, 5, dtype=np.float32), {}),
    (np.linspace(-2, 2, 5), {"seed": 7}),
    (np.array([0, 1, 2**32 - 1], np.uint32), {}),
])
def test_murmur_hash3(values, attrs):
    """com.microsoft MurmurHash3, which skl2onnx's FeatureHasher conversion hashes with (no
    provider ran it): every input type, seeds, signed output."""
    check("MurmurHash3", [values], domain="com.microsoft", opset=17, oracle="ort",
          rtol=0, atol=0, **attrs)
