"""cpu_mlas quantization kernels against onnxruntime (and onnx's reference evaluator for the
types ORT's Python API cannot feed or fetch: float8, int4, and for uint8 x int8 products where
onnxruntime saturates: see tests/_ort_quirks.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from _ort_quirks import ort_u8s8_exact
from kernel_harness import node_model
from onnx import TensorProto, helper

from onnxplex import load_model
from onnxplex.providers.cpu_mlas import quant
from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

from ._oracle import check, ours

ort.set_default_logger_severity(3)

RNG = np.random.default_rng(2024)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def ints(dtype, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, int(info.max) + 1, shape).astype(dtype)


# --------------------------------------------------------------------------------------------
# MatMulInteger
# --------------------------------------------------------------------------------------------

MMI_TYPES = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8), (np.int8, np.uint8)]
MMI_SHAPES = {"small": ((5, 40), (40, 6)), "batched": ((2, 3, 300), (300, 7)),
              "large_k": ((3, 2000), (2000, 5)), "batched_b": ((2, 3, 16), (2, 16, 4))}


@pytest.mark.parametrize("zero_points", ["none", "a", "ab", "b_per_column"])
@pytest.mark.parametrize("const", [True, False], ids=["const_b", "runtime_b"])
@pytest.mark.parametrize("shapes", list(MMI_SHAPES))
@pytest.mark.parametrize("ta,tb", MMI_TYPES,
                         ids=[f"{a.__name__}_{b.__name__}" for a, b in MMI_TYPES])
def test_matmul_integer(ta, tb, shapes, const, zero_points):
    """Full-range operands. uint8 x int8 against onnxruntime where it is exact, else against the
    ONNX reference (exact int32 arithmetic; onnxruntime saturates without VNNI)."""
    sa, sb = MMI_SHAPES[shapes]
    a, b = ints(ta, *sa), ints(tb, *sb)
    zps: list = []
    if zero_points in ("a", "ab"):
        zps.append(np.array(a.flat[0], ta))
    if zero_points == "ab":
        zps.append(np.array(b.flat[0], tb))
    if zero_points == "b_per_column":  # [N], or [D, 1, N] for a batched B
        zps = [None, ints(tb, *sb[:-2], *([1] if len(sb) > 2 else []), sb[-1])]
    u8s8 = ta == np.uint8 and tb == np.int8
    check("MatMulInteger", [a, b, *zps], opset=10,
          oracle="ref" if u8s8 and not ort_u8s8_exact() else "ort",
          const_inputs=[1, 3] if const else [])


def test_matmul_integer_per_row_a_zero_point():
    # ORT only accepts a scalar a_zero_point; the ONNX spec allows one per row of A.
    a, b = ints(np.uint8, 4, 30), ints(np.uint8, 30, 3)
    azp, bzp = ints(np.uint8, 4), ints(np.uint8, 3)
    (got,) = ours("MatMulInteger", [a, b, azp, bzp], opset=10)
    want = (a.astype(np.int64) - azp[:, None]) @ (b.astype(np.int64) - bzp)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------------------------
# DynamicQuantizeLinear
# --------------------------------------------------------------------------------------------

DQL_INPUTS = {
    "normal": lambda: rand(3, 4, 5),
    "wide": lambda: rand(1000) * 10,
    "zeros": lambda: np.zeros((3, 3), np.float32),
    "positive": lambda: np.abs(rand(10)) + 1,
    "negative": lambda: -np.abs(rand(10)) - 1,
    "halfway": lambda: np.array([0.5, 1.5, 2.5, -0.5, 255, 0], np.float32),
}


@pytest.mark.parametrize("case", list(DQL_INPUTS))
def test_dynamic_quantize_linear(case):
    got = check("DynamicQuantizeLinear", [DQL_INPUTS[case]()], 3, opset=11, oracle="ort")
    assert got[1].shape == () and got[2].dtype == np.uint8


def test_dynamic_quantize_linear_is_onnxruntimes_on_random_tensors():
    """DynamicQuantizeLinear gives onnxruntime's scale, zero point and bytes exactly on 200
    random tensors of random sizes and spreads (a dynamically quantized transformer
    re-quantizes every layer's activations with it: a differing byte would be a whole step)."""
    import onnxplex

    g = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], "dql",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("z", TensorProto.UINT8, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)],
                              ir_version=8).SerializeToString()
    plex = onnxplex.InferenceSession(model)
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    for _ in range(200):
        shape = (int(rng.integers(1, 40)), int(rng.integers(1, 700)))
        x = (rng.standard_normal(shape) * rng.random() * 10 + rng.standard_normal()).astype(
            np.float32)
        for got, want in zip(plex.run(None, {"x": x}), theirs.run(None, {"x": x})):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear
# --------------------------------------------------------------------------------------------

X = rand(2, 6, 4) * 3


@pytest.mark.parametrize("zp_type", [np.uint8, np.int8])
@pytest.mark.parametrize("opset", [10, 13, 19, 21, 23, 24, 25])
def test_quantize_per_tensor(opset, zp_type):
    s, z = np.array(0.05, np.float32), np.array(3, zp_type)
    check("QuantizeLinear", [X * 10, s, z], opset=opset)
    check("DequantizeLinear", [ints(zp_type, 2, 6, 4), s, z], opset=opset)
    check("QuantizeLinear", [X * 10, s, z], opset=opset, const_inputs=[1, 2])


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
def test_quantize_without_zero_point(opset):
    check("QuantizeLinear", [X, np.array(0.02, np.float32)], opset=opset, oracle="ort")
    check("DequantizeLinear", [ints(np.uint8, 3, 4), np.array(0.02, np.float32)], opset=opset,
          oracle="ort")


def test_quantize_rounds_half_to_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 300, -300, 126.5, 127.5], np.float32)
    got = check("QuantizeLinear", [x, np.array(1.0, np.float32), np.array(0, np.int8)],
                opset=13, oracle="ort")[0]
    np.testing.assert_array_equal(got, [0, 2, 2, 0, -2, 127, -128, 126, 127])


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("opset", [13, 19, 21])
def test_quantize_per_axis(opset, axis):
    n = X.shape[axis]
    s = (np.abs(rand(n)) * 0.05 + 0.01).astype(np.float32)
    z = RNG.integers(-5, 5, n).astype(np.int8)
    check("QuantizeLinear", [X, s, z], opset=opset, axis=axis, oracle="ort")
    check("DequantizeLinear", [ints(np.int8, *X.shape), s, z], opset=opset, axis=axis,
          oracle="ort")


@pytest.mark.parametrize("axis,block,sshape", [(1, 4, (4, 3)), (0, 2, (2, 10)), (1, 3, (4, 4))])
def test_quantize_blocked(axis, block, sshape):
    x = rand(4, 10)
    s = (np.abs(rand(*sshape)) * 0.1 + 0.01).astype(np.float32)
    z = RNG.integers(-3, 3, sshape).astype(np.int8)
    check("QuantizeLinear", [x, s, z], opset=21, axis=axis, block_size=block, oracle="ort")
    check("DequantizeLinear", [ints(np.int8, 4, 10), s, z], opset=21, axis=axis,
          block_size=block, oracle="ort")


@pytest.mark.parametrize("tgt", [np.int16, np.uint16])
def test_quantize_16bit(tgt):
    s, z = np.array(0.001, np.float32), np.array(7, tgt)
    check("QuantizeLinear", [X * 10, s, z], opset=21, oracle="ort")
    check("DequantizeLinear", [ints(tgt, 3, 5), s, z], opset=21, oracle="ort")


@pytest.mark.parametrize("tgt", [ml_dtypes.int4, ml_dtypes.uint4])
def test_quantize_4bit(tgt):
    s, z = np.array(0.5, np.float32), np.array(1, tgt)
    got = check("QuantizeLinear", [X * 3, s, z], opset=21, oracle="ref")[0]
    assert got.dtype == np.dtype(tgt)
    q = RNG.integers(-8 if tgt == ml_dtypes.int4 else 0, 8, (2, 6, 4)).astype(tgt)
    check("DequantizeLinear", [q, s, z], opset=21, oracle="ref")
    sb = (np.abs(rand(2, 10)) * 0.1 + 0.01).astype(np.float32)
    zb = RNG.integers(0, 3, (2, 10)).astype(tgt)
    check("DequantizeLinear", [RNG.integers(0, 7, (4, 10)).astype(tgt), sb, zb], opset=21,
          axis=0, block_size=2, oracle="ref")


@pytest.mark.parametrize("tgt", [ml_dtypes.int2, ml_dtypes.uint2])
def test_quantize_2bit(tgt):
    x = rand(30) * 3
    check("QuantizeLinear", [x, np.array(1.0, np.float32), np.array(0, tgt)], opset=25,
          oracle="ref")
    q = np.array([0, 1, 1, 0], tgt)
    check("DequantizeLinear", [q, np.array(0.5, np.float32), np.array(1, tgt)], opset=25,
          oracle="ref")


FLOAT8 = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
          ml_dtypes.float8_e5m2fnuz]
SPECIALS = np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 0.0], np.float32)


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("tgt", FLOAT8, ids=[t.__name__ for t in FLOAT8])
def test_quantize_float8(tgt, saturate):
    x = np.concatenate([rand(40) * 100, SPECIALS])
    s, z = np.array(2.0, np.float32), np.zeros((), tgt)
    check("QuantizeLinear", [x, s, z], opset=21, saturate=saturate, oracle="ref")
    check("DequantizeLinear", [(rand(10) * 10).astype(tgt), s, z], opset=21, oracle="ref")
    # ORT cannot return float8 to Python: compare QuantizeLinear -> Cast(float) through it
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(tgt))
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], saturate=saturate),
             helper.make_node("Cast", ["q"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor("s", TensorProto.FLOAT, [], [2.0]),
         helper.make_tensor("z", elem, [], [0.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    got = ours("QuantizeLinear", [x, s, z], opset=21, saturate=saturate)[0].astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_quantize_float4():
    x = np.concatenate([rand(20) * 8, np.array([100, -100], np.float32)])
    s, z = np.array(1.0, np.float32), np.zeros((), ml_dtypes.float4_e2m1fn)
    got = ours("QuantizeLinear", [x, s, z], opset=23)[0]
    assert got.dtype == np.dtype(ml_dtypes.float4_e2m1fn)
    np.testing.assert_array_equal(got.astype(np.float32),
                                  np.clip(x, -6, 6).astype(ml_dtypes.float4_e2m1fn)
                                  .astype(np.float32))
    back = ours("DequantizeLinear", [got, np.array(0.5, np.float32)], opset=23)[0]
    np.testing.assert_array_equal(back, got.astype(np.float32) * 0.5)


def test_quantize_half_precision_and_output_dtype():
    # before opset 23 the division runs in float32 (as ORT); from 23 in the scale's type
    half_inputs = [(rand(400) * 3).astype(np.float16), np.array(0.05, np.float16),
                   np.array(3, np.uint8)]
    check("QuantizeLinear", half_inputs, opset=19, oracle="ort")
    check("QuantizeLinear", half_inputs, opset=23, oracle="ref")
    check("DequantizeLinear", [ints(np.uint8, 3, 4), np.array(0.05, np.float16),
                               np.array(3, np.uint8)], opset=19, oracle="ort")
    got = check("QuantizeLinear", [X, np.array(0.5, np.float32)], opset=21,
                output_dtype=TensorProto.INT8, oracle="ort")[0]
    assert got.dtype == np.int8
    got = check("DequantizeLinear", [ints(np.uint8, 3, 4), np.array(0.05, np.float32),
                                     np.array(3, np.uint8)], opset=23,
                output_dtype=TensorProto.FLOAT16, oracle="ort")[0]
    assert got.dtype == np.float16


def test_quantize_precision_attribute():
    # precision=float16: x / scale is rounded to float16 before rounding to an integer
    x = rand(50) * 40
    got = ours("QuantizeLinear", [x, np.array(0.37, np.float32), np.array(0, np.int8)],
               opset=23, precision=TensorProto.FLOAT16)[0]
    q = (x.astype(np.float16) / np.float16(0.37)).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(got, np.clip(np.rint(q), -128, 127).astype(np.int8))


def test_dequantize_int32():
    x = RNG.integers(-10**6, 10**6, (3, 4)).astype(np.int32)
    check("DequantizeLinear", [x, np.array(0.001, np.float32)], opset=13, oracle="ort",
          rtol=1e-6, atol=0)


# --------------------------------------------------------------------------------------------
# com.microsoft MatMulNBits
# --------------------------------------------------------------------------------------------

NBITS_SHAPES = [(64, 8, 16), (40, 6, 16), (128, 5, 32), (96, 3, 64)]


def nbits_inputs(k: int, n: int, block: int, bits: int, zp: str):
    kb = -(-k // block)
    a = rand(2, 3, k)
    b = RNG.integers(0, 256, (n, kb, block * bits // 8)).astype(np.uint8)
    s = (RNG.random(n * kb) * 0.1 + 0.01).astype(np.float32)
    inputs = [a, b, s]
    if zp == "packed":
        per = 8 // bits
        inputs.append(RNG.integers(0, 256, (n * -(-kb // per),)).astype(np.uint8))
    elif zp == "float":
        inputs.append((RNG.random(n * kb) * 4).astype(np.float32))
    return inputs


@pytest.mark.parametrize("zp", ["none", "packed", "float"])
@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("k,n,block", NBITS_SHAPES,
                         ids=[f"K{k}_N{n}_b{b}" for k, n, b in NBITS_SHAPES])
def test_matmul_nbits(k, n, block, bits, zp):
    inputs = nbits_inputs(k, n, block, bits, zp)
    kw = dict(domain="com.microsoft", K=k, N=n, bits=bits, block_size=block)
    if bits == 8 and zp == "float":  # ORT has no kernel for this: check the formula directly
        a, b, s, z = inputs
        kb = b.shape[1]
        w = (b.astype(np.float32) - z.reshape(n, kb, 1)) * s.reshape(n, kb, 1)
        want = a @ w.reshape(n, -1)[:, :k].T
        got = ours("MatMulNBits", inputs, const_inputs=[1, 2, 3], **kw)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        return
    check("MatMulNBits", inputs, const_inputs=[1, 2, 3], oracle="ort", rtol=1e-4, atol=1e-4,
          **kw)


BNB4_SHAPES = [(64, 8, 16), (40, 7, 64), (33, 5, 32)]   # (the last: N x K odd, a half byte)


@pytest.mark.parametrize("quant_type", [0, 1], ids=["fp4", "nf4"])
@pytest.mark.parametrize("k,n,block", BNB4_SHAPES,
                         ids=[f"K{k}_N{n}_b{b}" for k, n, b in BNB4_SHAPES])
@pytest.mark.parametrize("const", [True, False], ids=["const", "fed"])
def test_matmul_bnb4(k, n, block, quant_type, const):
    """com.microsoft MatMulBnb4 (bitsandbytes' FP4 and NF4 weights; onnxruntime's
    MatMulBnb4Quantizer writes it): no provider ran it."""
    b = RNG.integers(0, 256, ((n * k + 1) // 2,)).astype(np.uint8)
    absmax = (RNG.random(-(-n * k // block)) + 0.5).astype(np.float32)
    check("MatMulBnb4", [rand(2, 3, k), b, absmax], const_inputs=[1, 2] if const else [],
          domain="com.microsoft", K=k, N=n, block_size=block, quant_type=quant_type,
          oracle="ort", rtol=1e-5, atol=1e-5)


def test_matmul_bnb4_without_transposing_b():
    """transB=0 multiplies by the [N, K] weight itself (onnxruntime's contrib spec; its CPU
    kernel always transposes, so the formula is checked directly)."""
    k, n, block = 32, 6, 16
    b = RNG.integers(0, 256, (n * k // 2,)).astype(np.uint8)
    absmax = (RNG.random(n * k // block) + 0.5).astype(np.float32)
    a = rand(4, n)
    got = ours("MatMulBnb4", [a, b, absmax], const_inputs=[1, 2], domain="com.microsoft",
               K=k, N=n, block_size=block, quant_type=1, transB=0)[0]
    codes = np.stack([b >> 4, b & 0xF], axis=-1).reshape(n, k)
    w = quant._BNB4_CODES[1][codes] * np.repeat(absmax, block).reshape(n, k)
    np.testing.assert_allclose(got, a @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bits, block", [(4, 16), (4, 32), (4, 128), (4, 256), (8, 32),
                                         (8, 64), (2, 32), (2, 128), (2, 16), (2, 256)])
def test_matmul_nbits_accuracy_level_4_rounds_activations_to_int8(bits, block):
    """Accuracy level 4 asks for int8 activations: onnxruntime rounds A per block of the
    weight's block size (a scale of max|a| / 127, half to even) where its MLAS has the kernel,
    and computes in float elsewhere (2-bit blocks of 16 and 256); cpu_mlas does the same (it
    multiplied in float32: outputs ~5e-3 of their scale apart)."""
    k, n = 200, 12
    inputs = nbits_inputs(k, n, block, bits, "packed")
    check("MatMulNBits", inputs, const_inputs=[1, 2, 3], oracle="ort", rtol=1e-4, atol=1e-4,
          domain="com.microsoft", K=k, N=n, bits=bits, block_size=block, accuracy_level=4)


def test_matmul_nbits_runtime_weights_bias_and_2d():
    k, n, block = 64, 8, 32
    inputs = nbits_inputs(k, n, block, 4, "packed")
    bias = rand(n)
    kw = dict(domain="com.microsoft", K=k, N=n, bits=4, block_size=block, oracle="ort",
              rtol=1e-4, atol=1e-4)
    check("MatMulNBits", inputs, **kw)
    check("MatMulNBits", inputs + [None, bias], const_inputs=[1, 2, 3, 5], **kw)
    check("MatMulNBits", [inputs[0][0]] + inputs[1:], const_inputs=[1, 2, 3], **kw)
    # scales given as [N, k_blocks] instead of flat
    check("MatMulNBits", [inputs[0], inputs[1], inputs[2].reshape(n, -1), inputs[3]],
          const_inputs=[1, 2, 3], **kw)


def test_matmul_nbits_float16():
    a, b, s, z = nbits_inputs(64, 8, 16, 4, "packed")
    check("MatMulNBits", [a.astype(np.float16), b, s.astype(np.float16), z],
          const_inputs=[1, 2, 3], domain="com.microsoft", K=64, N=8, bits=4, block_size=16,
          oracle="ort", rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("bits,g_idx,needle", [(3, False, "bits=3"), (4, True, "g_idx")])
def test_matmul_nbits_declined(bits, g_idx, needle):
    a, b, s = nbits_inputs(64, 8, 16, 4, "none")
    inputs = [a, b, s, None] + ([np.arange(64, dtype=np.int32) // 16] if g_idx else [])
    m = node_model("MatMulNBits", inputs, domain="com.microsoft", const_inputs=[1, 2, 4],
                   K=64, N=8, bits=bits, block_size=16)
    node = load_model(m).node_views[0]
    config, reason = CpuMlasProvider.op_table.lookup(node)
    assert config is None and needle in reason


# --------------------------------------------------------------------------------------------
# QLinearMatMul / QLinearConv / ConvInteger
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("per_axis", [False, True], ids=["per_tensor", "per_row_col"])
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("const", [True, False], ids=["const_b", "runtime_b"])
def test_qlinear_matmul(dt, per_axis, const):
    a, b = ints(dt, 2, 5, 40), ints(dt, 40, 6)
    a_s = np.array([0.02], np.float32)
    b_s = (RNG.random(6).astype(np.float32) * 0.02 + 0.01) if per_axis else \
        np.array([0.015], np.float32)
    b_zp = ints(dt, 6) if per_axis else np.array([ints(dt, 1)[0]], dt)
    args = [a, a_s, np.array([ints(dt, 1)[0]], dt), b, b_s, b_zp,
            np.array([0.5], np.float32), np.array([ints(dt, 1)[0]], dt)]
    if per_axis:
        # ORT's per-column path wants matching 1-D shapes; compare with the ONNX reference
        check("QLinearMatMul", args, opset=21, oracle="ref", const_inputs=[3, 5] if const else [])
    else:
        check("QLinearMatMul", args, opset=10, oracle="ort",
              const_inputs=[3, 5] if const else [])


def _counted_native(monkeypatch, name: str) -> list[int]:
    """The native module's function ``name`` wrapped to count its calls (skips the test when
    the module is not built): the list grows by one a call."""
    from onnxplex.providers.cpu_mlas._native import native

    nat = native()
    if nat is None:
        pytest.skip("the native module is not built")
    calls: list[int] = []
    real = getattr(nat, name)
    monkeypatch.setattr(nat, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("a_dt,b_dt", [(np.uint8, np.int8), (np.int8, np.int8),
                                       (np.uint8, np.uint8)])
def test_qlinear_matmul_constant_b_native(a_dt, b_dt, per_column, monkeypatch):
    """A constant 2-D B runs on the native integer GEMM, packed once, with the native
    requantization: the ONNX reference's integers and requantization exactly (3-D A, zero
    points everywhere, per-column scales and zero points of B)."""
    calls = _counted_native(monkeypatch, "qgemm_i32")
    a, b = ints(a_dt, 2, 7, 70), ints(b_dt, 70, 9)
    b_s = (RNG.random(9).astype(np.float32) * 0.02 + 0.01) if per_column else \
        np.array([0.015], np.float32)
    b_zp = ints(b_dt, 9) if per_column else np.array([ints(b_dt, 1)[0]], b_dt)
    args = [a, np.array([0.02], np.float32), np.array([ints(a_dt, 1)[0]], a_dt), b, b_s, b_zp,
            np.array([0.9], np.float32), np.array([ints(a_dt, 1)[0]], a_dt)]
    check("QLinearMatMul", args, opset=21, oracle="ref", const_inputs=[3, 5])
    assert calls


@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv_bias_groups(per_channel):
    """uint8 x full-range int8: against onnxruntime where it is exact, else the ONNX reference
    (integer convolution, then float requantization rounded half to even)."""
    x = ints(np.uint8, 2, 4, 7, 6)
    w = ints(np.int8, 6, 2, 3, 3)
    w_s = (RNG.random(6).astype(np.float32) * 0.01 + 0.005) if per_channel else \
        np.array(0.01, np.float32)
    w_zp = np.zeros(6, np.int8) if per_channel else np.array(0, np.int8)
    args = [x, np.array(0.05, np.float32), np.array(120, np.uint8), w, w_s, w_zp,
            np.array(0.2, np.float32), np.array(128, np.uint8),
            RNG.integers(-500, 500, 6).astype(np.int32)]
    check("QLinearConv", args, opset=10, oracle="ort" if ort_u8s8_exact() else "ref", group=2,
          pads=[1, 1, 1, 1], strides=[2, 1], const_inputs=[3])


_QCONV_GEOMETRIES = {
    "3x3_pad1": dict(kernel=(3, 3), attrs=dict(pads=[1, 1, 1, 1])),
    "3x3_stride2_asym_pads": dict(kernel=(3, 3), attrs=dict(pads=[0, 1, 1, 0], strides=[2, 2])),
    "1x1": dict(kernel=(1, 1), attrs={}),
    "1x1_stride2": dict(kernel=(1, 1), attrs=dict(strides=[2, 2])),
    "3x2_dilated": dict(kernel=(3, 2), attrs=dict(pads=[2, 1, 2, 1], dilations=[2, 2])),
    "same_upper_stride2": dict(kernel=(3, 3), attrs=dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    "5x5_valid": dict(kernel=(5, 5), attrs=dict(auto_pad="VALID")),
}


@pytest.mark.parametrize("geometry", list(_QCONV_GEOMETRIES))
@pytest.mark.parametrize("x_dt,w_dt,per_channel", [
    (np.uint8, np.int8, True), (np.uint8, np.int8, False), (np.int8, np.int8, True),
    (np.uint8, np.uint8, False)], ids=["u8s8_per_channel", "u8s8", "s8s8_per_channel", "u8u8"])
def test_qlinear_conv_integer_gemm(geometry, x_dt, w_dt, per_channel, monkeypatch):
    """A one-group QLinearConv with a constant weight runs on the native integer GEMM over
    the channels-last image (padding holds x's zero point): the same integers as the ONNX
    reference's exact convolution, then the same requantization (zero points nonzero, the
    weight's per output channel, and a bias)."""
    from onnxplex.providers.cpu_mlas._native import native

    if native() is None:
        pytest.skip("the native module is not built")
    took = []
    gemm = quant._qconv_gemm_plan
    monkeypatch.setattr(quant, "_qconv_gemm_plan",
                        lambda *a, **k: took.append(r := gemm(*a, **k)) or r)
    g = _QCONV_GEOMETRIES[geometry]
    m, c = 5, 7
    x = ints(x_dt, 2, c, 9, 8)
    w = ints(w_dt, m, c, *g["kernel"])
    w_s = (RNG.random(m).astype(np.float32) * 0.004 + 0.001) if per_channel else \
        np.array(0.003, np.float32)
    w_zp = ints(w_dt, m) if per_channel else np.array(ints(w_dt, 1)[0], w_dt)
    x_zp = np.array(ints(x_dt, 1)[0], x_dt)
    y_zp = np.array(ints(x_dt, 1)[0], x_dt)
    args = [x, np.array(0.05, np.float32), x_zp, w, w_s, w_zp, np.array(0.4, np.float32),
            y_zp, RNG.integers(-3000, 3000, m).astype(np.int32)]
    check("QLinearConv", args, opset=10, oracle="ref", const_inputs=[3, 5], **g["attrs"])
    assert took and all(t is not None for t in took)


@pytest.mark.parametrize("geometry", ["1x1", "3x3_pad1", "3x3_stride2_asym_pads"])
@pytest.mark.parametrize("x_dt", [np.uint8, np.int8])
def test_qlinear_conv_integer_gemm_wide_images(geometry, x_dt):
    """Channels and widths past the 16 x 16 byte tiles that move the image channels-last and
    the result back (21 channels, 35 columns: whole tiles and both tails), against the ONNX
    reference."""
    g = _QCONV_GEOMETRIES[geometry]
    m, c = 18, 21
    args = [ints(x_dt, 1, c, 6, 35), np.array(0.05, np.float32), np.array(3, x_dt),
            ints(np.int8, m, c, *g["kernel"]), (RNG.random(m) * 0.004 + 0.001).astype(
                np.float32), np.zeros(m, np.int8), np.array(0.4, np.float32),
            np.array(-5 if x_dt == np.int8 else 9, x_dt),
            RNG.integers(-3000, 3000, m).astype(np.int32)]
    check("QLinearConv", args, opset=10, oracle="ref", const_inputs=[3, 5], **g["attrs"])


@pytest.mark.parametrize("geometry", [
    dict(kernel=(3, 3), attrs=dict(pads=[1, 1, 1, 1])),
    dict(kernel=(3, 3), attrs=dict(pads=[1, 0, 0, 1], strides=[2, 2])),
    dict(kernel=(5, 5), attrs=dict(pads=[2, 2, 2, 2], strides=[1, 2])),
    dict(kernel=(3, 3), attrs=dict(pads=[2, 2, 2, 2], dilations=[2, 2])),
    dict(kernel=(3, 2), attrs=dict(auto_pad="SAME_UPPER"))],
    ids=["3x3", "3x3_stride2_asym", "5x5_strides_1_2", "dilated", "3x2_same_upper"])
@pytest.mark.parametrize("x_dt,per_channel", [(np.uint8, True), (np.int8, False)])
def test_qlinear_conv_depthwise_native(geometry, x_dt, per_channel, monkeypatch):
    """A depthwise QLinearConv with a constant weight runs in one native call (a few
    channels a task: centered exactly into float32, the float depthwise kernel, the shared
    requantization): the ONNX reference's values exactly, with zero points, per-channel
    weight scales and zero points, a bias and two images."""
    calls = _counted_native(monkeypatch, "qdwconv_u8")
    c = 5
    x = ints(x_dt, 2, c, 9, 11)
    w = ints(np.int8, c, 1, *geometry["kernel"])
    w_s = (RNG.random(c).astype(np.float32) * 0.004 + 0.001) if per_channel else \
        np.array(0.003, np.float32)
    w_zp = ints(np.int8, c) if per_channel else np.array(0, np.int8)
    args = [x, np.array(0.05, np.float32), np.array(ints(x_dt, 1)[0], x_dt), w, w_s, w_zp,
            np.array(0.1, np.float32), np.array(ints(x_dt, 1)[0], x_dt),
            RNG.integers(-2000, 2000, c).astype(np.int32)]
    check("QLinearConv", args, opset=10, oracle="ref", group=c, const_inputs=[3, 5],
          **geometry["attrs"])
    assert calls


def test_qlinear_conv_runtime_weight_and_depthwise_float_path():
    """A weight fed at run time, and a depthwise conv, take the float path (exact: nine
    8-bit taps fit float32's mantissa whatever their values)."""
    x = ints(np.uint8, 1, 6, 8, 8)
    for w, group, const in [(ints(np.int8, 4, 6, 3, 3), 1, []),
                            (ints(np.int8, 6, 1, 3, 3), 6, [3])]:
        args = [x, np.array(0.05, np.float32), np.array(17, np.uint8), w,
                np.array(0.01, np.float32), np.array(0, np.int8),
                np.array(0.3, np.float32), np.array(100, np.uint8)]
        check("QLinearConv", args, opset=10, oracle="ref", group=group, pads=[1, 1, 1, 1],
              const_inputs=const)


def _ort_and_ours(model: onnx.ModelProto, feed: dict) -> tuple[np.ndarray, np.ndarray]:
    import onnxplex

    b = model.SerializeToString()
    want = ort.InferenceSession(b, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    return want, onnxplex.InferenceSession(b).run(None, feed)[0]


def test_requantization_rounds_as_onnxruntime_where_the_reference_differs():
    """Two sums whose product by the multiplier lies within a float32 rounding of a half:
    onnxruntime multiplies in float32 (MLAS) and so do we; onnx's reference multiplies in
    float64 and lands one step away. QLinearMatMul: 17015 * 0.0035556862 is 60.50003 in
    float64, 60.5 in float32 (an even tie: 60); QLinearConv: -15000 * 0.0015 (the float32
    multiplier 0.05 * 0.003 / 0.1) is -22.5000002 in float64, -22.5 in float32 (-22)."""
    from onnx.reference import ReferenceEvaluator

    scalar = lambda name, dt, v: helper.make_tensor(name, dt, [], [v])  # noqa: E731
    mm = helper.make_model(helper.make_graph(
        [helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])],
        "mm", [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 1])],
        [scalar("as", TensorProto.FLOAT, 0.0035556862), scalar("az", TensorProto.UINT8, 0),
         helper.make_tensor("b", TensorProto.INT8, [1, 1], [83]),
         scalar("bs", TensorProto.FLOAT, 1.0), scalar("bz", TensorProto.INT8, 0),
         scalar("ys", TensorProto.FLOAT, 1.0), scalar("yz", TensorProto.UINT8, 128)]),
        opset_imports=[helper.make_opsetid("", 21)])
    feed = {"a": np.array([[205]], np.uint8)}
    want, got = _ort_and_ours(mm, feed)
    assert want.item() == got.item() == 188
    assert ReferenceEvaluator(mm).run(None, feed)[0].item() == 189   # (the float64 rounding)

    conv = helper.make_model(helper.make_graph(
        [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])],
        "conv", [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 1, 1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 1, 1, 1])],
        [scalar("xs", TensorProto.FLOAT, 0.05), scalar("xz", TensorProto.INT8, -68),
         helper.make_tensor("w", TensorProto.INT8, [1, 1, 1, 1], [-125]),
         scalar("ws", TensorProto.FLOAT, 0.003), scalar("wz", TensorProto.INT8, 0),
         scalar("ys", TensorProto.FLOAT, 0.1), scalar("yz", TensorProto.INT8, -66)]),
        opset_imports=[helper.make_opsetid("", 10)])
    feed = {"x": np.array([[[[52]]]], np.int8)}   # (52 + 68) * -125 = -15000
    want, got = _ort_and_ours(conv, feed)
    assert want.item() == got.item() == -88


@pytest.mark.parametrize("out_dt", [np.uint8, np.int8])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("channels_first", [False, True])
@pytest.mark.parametrize("channels", [19, 150])   # (150: a group of 128 and one of 22)
def test_native_requantize_matches_numpy(out_dt, per_channel, channels_first, channels):
    """The native requantization is the numpy one (float32 product as onnxruntime's, round
    half to even, zero point, saturation), bias added with int32 wrap-around, in either output
    layout: ties, saturation on both sides, huge sums and a 0.5-step multiplier included."""
    from onnxplex.providers.cpu_mlas._native import native

    nat = native()
    if nat is None:
        pytest.skip("the native module is not built")
    images, positions = 2, 70   # (a partial block of 64 positions)
    acc = RNG.integers(-5000, 5000, (images, positions, channels)).astype(np.int32)
    acc[0, 0, :4] = [2**31 - 1, -2**31, 5, -5]
    bias = RNG.integers(-300, 300, channels).astype(np.int32)
    bias[0] = 7   # wraps the largest sum
    mult = (RNG.random(channels) * 0.05 if per_channel else np.array([0.5]))
    mult[0] = 0.5   # acc 5 and -5 land on ties
    zp = int(ints(np.dtype(out_dt), 1)[0])
    with np.errstate(over="ignore"):
        want = quant._requantize(acc + bias, mult, np.array(zp, out_dt), np.dtype(out_dt))
    got = nat.requantize_i32(acc, bias, mult, zp, out_dt == np.int8, channels_first)
    if channels_first:
        want = want.transpose(0, 2, 1)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == out_dt
    if channels_first:   # the same sums held as float32 integers, channels-first
        small = np.clip(acc, -2**23, 2**23)
        with np.errstate(over="ignore"):
            want = quant._requantize(small + bias, mult, np.array(zp, out_dt), np.dtype(out_dt))
        y = np.ascontiguousarray(small.transpose(0, 2, 1)).astype(np.float32)
        got = nat.requantize_f32_channels(y, bias, mult, zp, out_dt == np.int8)
        np.testing.assert_array_equal(got, want.transpose(0, 2, 1))


def test_native_requantize_non_finite_multiplier():
    from onnxplex.providers.cpu_mlas._native import native

    nat = native()
    if nat is None:
        pytest.skip("the native module is not built")
    acc = np.array([[[3, -3, 0]]], np.int32)
    got = nat.requantize_i32(acc, None, np.array([np.inf, np.inf, np.nan]), 10, False, False)
    assert got.tolist() == [[[255, 0, 0]]]


def test_native_qlinear_conv_refuses_a_geometry_reading_past_the_input():
    """The conv bindings check the geometry they are given: an output size the padded input
    cannot give is a ValueError, not a read past the image."""
    from onnxplex.providers.cpu_mlas._native import native

    nat = native()
    if nat is None:
        pytest.skip("the native module is not built")
    x = ints(np.uint8, 1, 3, 7, 9)
    packed = quant.native_pack_b(ints(np.int8, 3 * 3 * 3, 4), None)
    args = (x, 5, packed, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))
    ok = nat.qlinear_conv_u8(*args, (7, 9), None, np.ones(4), 0, False)
    assert ok.shape == (1, 4, 7, 9)
    with pytest.raises(ValueError, match="reads past"):
        nat.qlinear_conv_u8(*args, (8, 9), None, np.ones(4), 0, False)


@pytest.mark.parametrize("q_dt", [np.uint8, np.int8])
def test_native_per_tensor_quantize_dequantize_match_numpy(q_dt):
    """The native per-tensor QuantizeLinear / DequantizeLinear give the numpy path's values:
    float32 division, ties to even, saturation both ways, infinities; NaN gives the bottom of
    the range (as onnxruntime does: test_quantize_nan_and_scalar_as_onnxruntime)."""
    from onnxplex.providers.cpu_mlas._native import native

    nat = native()
    if nat is None:
        pytest.skip("the native module is not built")
    scale = np.float32(0.25)
    x = (RNG.standard_normal(1003) * 40).astype(np.float32)
    x[:8] = [0.125, -0.125, 0.375, 1e30, -1e30, np.inf, -np.inf, 2.5 * 0.25]   # ties, limits
    for zp in (0, 7, int(np.iinfo(q_dt).min), int(np.iinfo(q_dt).max)):
        want = quant._quantize(x, np.array(scale), np.array(zp, q_dt), np.dtype(q_dt), 1, 0,
                               True, np.dtype(np.float32))
        got = nat.quantize_8bit(x, float(scale), zp, q_dt == np.int8)
        np.testing.assert_array_equal(got, want)
        q = ints(q_dt, 3, 5, 7)
        want_f = quant._dequantize(q, np.array(scale), np.array(zp, q_dt), np.dtype(np.float32),
                                   1, 0)
        got_f = nat.dequantize_8bit(q, float(scale), zp)
        assert got_f.dtype == np.float32 and got_f.shape == q.shape
        np.testing.assert_array_equal(got_f, want_f)
    assert nat.quantize_8bit(np.array([np.nan], np.float32), 0.5, 3, q_dt == np.int8)[0] \
        == np.iinfo(q_dt).min


@pytest.mark.parametrize("q_dt", [np.uint8, np.int8, np.uint16, np.int16])
@pytest.mark.parametrize("shape, per_axis", [((), False), ((1,), False), ((2, 19), False),
                                             ((2, 19), True)])
def test_quantize_nan_and_scalar_as_onnxruntime(q_dt, shape, per_axis):
    """NaN quantizes to the bottom of the range (onnxruntime's MLAS: its max with the lower
    bound takes the bound; both gave 0, an int8 zero point's value, before), and a scalar stays
    a scalar (the native path returned [1]: a QDQ model's quantized ReduceSum then failed its
    declared shape). 16-bit runs the numpy path, where a scalar raised a TypeError (a 16-bit
    QDQ model's quantized constants)."""
    x = np.asarray(RNG.standard_normal(shape) * 4, dtype=np.float32)
    x.reshape(-1)[::3] = np.nan
    if per_axis:
        s, z = np.array([0.1, 0.3], np.float32), np.array([3, 9], q_dt)
    else:
        s, z = np.array(0.1, np.float32), np.array(3, q_dt)
    check("QuantizeLinear", [x, s, z], opset=21 if np.dtype(q_dt).itemsize == 2 else 19,
          oracle="ort", axis=0)


def test_constant_weight_dequantize_folded_after_qdq_fusions():
    """A DequantizeLinear of a constant weight that no QDQ group takes (a Gemm of a float
    activation) is folded at the extended level, after the QDQ fusions: the session runs no
    DequantizeLinear, and its outputs are the unoptimized model's."""
    w = ints(np.int8, 6, 5)
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    inits = [helper.make_tensor("w", TensorProto.INT8, w.shape, w.reshape(-1).tolist()),
             helper.make_tensor("ws", TensorProto.FLOAT, [6], (RNG.random(6) * 0.1).tolist()),
             helper.make_tensor("wz", TensorProto.INT8, [6], [0] * 6),
             ]
    nodes = [helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("Gemm", ["x", "wf"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [2, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    import onnxplex

    sess = onnxplex.InferenceSession(m.SerializeToString())
    ops = [p.op_type for p in sess.get_provider_assignment().placements]
    assert ops.count("DequantizeLinear") == 0, ops
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = onnxplex.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = onnxplex.InferenceSession(m.SerializeToString(), so)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], plain.run(None, {"x": x})[0])


def test_conv_integer_zero_points():
    x = ints(np.uint8, 2, 3, 6, 6)
    w = ints(np.uint8, 4, 3, 2, 2)
    check("ConvInteger", [x, w, np.array(7, np.uint8), np.array(3, np.uint8)], opset=10,
          oracle="ort", pads=[0, 1, 0, 1])


@pytest.mark.parametrize("geometry", [*_QCONV_GEOMETRIES, "patchify"])
@pytest.mark.parametrize("x_dt,w_dt,per_channel", [
    (np.uint8, np.int8, True), (np.uint8, np.int8, False), (np.int8, np.int8, False),
    (np.uint8, np.uint8, False)], ids=["u8s8_per_channel", "u8s8", "s8s8", "u8u8"])
def test_conv_integer_native_gemm(geometry, x_dt, w_dt, per_channel, monkeypatch):
    """A one-group ConvInteger with a constant weight runs on the native integer GEMM (its
    im2col rows padded with x's zero point) and gives onnxruntime's int32 sums exactly (the
    ONNX reference's for a per-channel weight zero point, which onnxruntime refuses), with
    x and weight zero points (per output channel too), strides, dilations, auto_pad and a
    vision transformer's patch embedding (kernel = stride)."""
    calls = _counted_native(monkeypatch, "qgemm_i32")
    g = dict(kernel=(8, 8), attrs=dict(strides=[8, 8])) if geometry == "patchify" else \
        _QCONV_GEOMETRIES[geometry]
    m, c = 6, 3
    x = ints(x_dt, 2, c, 16, 24)
    w = ints(w_dt, m, c, *g["kernel"])
    w_zp = ints(w_dt, m) if per_channel else np.array(ints(w_dt, 1)[0], w_dt)
    x_zp = np.array(ints(x_dt, 1)[0], x_dt)
    # (onnxruntime refuses a per-channel weight zero point, which ONNX allows: the reference)
    check("ConvInteger", [x, w, x_zp, w_zp], opset=10, oracle="ref" if per_channel else "ort",
          const_inputs=[1, 3], **g["attrs"])
    assert calls


@pytest.mark.parametrize("geometry", [
    dict(kernel=(1, 1), attrs={}, group=False),
    dict(kernel=(3, 3), attrs=dict(pads=[1, 1, 1, 1]), group=False),
    dict(kernel=(3, 3), attrs=dict(pads=[0, 1, 1, 0], strides=[2, 2]), group=False),
    dict(kernel=(1, 1), attrs=dict(strides=[2, 2]), group=False),
    dict(kernel=(3, 3), attrs=dict(pads=[1, 1, 1, 1]), group=True),
    dict(kernel=(3, 3), attrs=dict(pads=[1, 0, 0, 1], strides=[2, 2]), group=True),
    dict(kernel=(5, 5), attrs=dict(pads=[2, 2, 2, 2], dilations=[2, 1]), group=True),
    dict(kernel=(3, 3), attrs=dict(pads=[1, 1, 1, 1], group=3), group=None)],
    ids=["1x1", "3x3_pad1", "3x3_stride2_asym", "1x1_stride2", "dw_3x3", "dw_stride2_asym",
         "dw_5x5_dilated", "grouped_fallback"])
@pytest.mark.parametrize("x_dt", [np.uint8, np.int8])
@pytest.mark.parametrize("threads", [1, 2])
def test_qlinear_conv_channels_last_matches_channels_first(geometry, x_dt, threads):
    """com.microsoft QLinearConv with channels_last=1 (the layout level's) gives the ONNX
    QLinearConv's bytes, transposed: the integer GEMM reading the channels-last image, the
    depthwise kernel over blocks of output rows (and a grouped conv through the channels-first
    kernel) -- 21 channels and 35 columns, past the vector widths."""
    from kernel_harness import node_model

    import onnxplex

    depthwise = geometry["group"]
    c, kh, kw = 21, *geometry["kernel"]
    groups = c if depthwise else geometry["attrs"].get("group", 1)
    m = c if depthwise else 18
    w = ints(np.int8, m, c // groups, kh, kw)
    attrs = dict(geometry["attrs"], group=groups)
    x = ints(x_dt, 2, c, 13, 35)
    consts = [np.array(0.05, np.float32), np.array(3, x_dt), w,
              (RNG.random(m) * 0.004 + 0.001).astype(np.float32), np.zeros(m, np.int8),
              np.array(0.4, np.float32), np.array(-5 if x_dt == np.int8 else 9, x_dt),
              RNG.integers(-3000, 3000, m).astype(np.int32)]
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = onnxplex.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = threads

    def run(x, domain, **extra):
        model = node_model("QLinearConv", [x, *consts], opset=17, domain=domain,
                           const_inputs=range(1, 9), **attrs, **extra)
        return onnxplex.InferenceSession(model.SerializeToString(), so,
                                         providers=["cpu_mlas"]).run(None, {"in0": x})[0]

    want = run(x, "")
    got = run(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), "com.microsoft", channels_last=1)
    np.testing.assert_array_equal(got, want.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("c", [16, 37, 70, 128])
@pytest.mark.parametrize("geometry", [
    dict(k=(3, 3), s=(1, 1), d=(1, 1), p=(1, 1, 1, 1), hw=(7, 23)),   # blocks of 8 and 4, edges
    dict(k=(3, 3), s=(2, 2), d=(1, 1), p=(0, 1, 1, 0), hw=(9, 30)),
    dict(k=(5, 5), s=(1, 2), d=(1, 1), p=(2, 2, 2, 2), hw=(6, 41)),
    dict(k=(3, 3), s=(1, 1), d=(2, 2), p=(2, 2, 2, 2), hw=(5, 19)),
    dict(k=(3, 3), s=(1, 1), d=(1, 1), p=(1, 1, 1, 1), hw=(3, 3))],   # no interior block
    ids=["3x3", "3x3_s2_asym", "5x5_s12", "dilated", "tiny"])
def test_native_depthwise_channels_last_equals_channels_first(c, geometry):
    """The channels-last depthwise kernel (AVX-512: sums and requantization in one pass, 8
    positions a block, then 4, then one, a lone position four channel blocks at a time) gives
    the bytes of the channels-first path (a float kernel per channel plane, then the
    per-channel requantization), across block boundaries, image edges and a partial vector of
    channels."""
    from onnxplex.providers.cpu_mlas._native import native

    nat = native()
    if nat is None:
        pytest.skip("the native module is not built")
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr), (h, w) = (
        geometry[k] for k in ("k", "s", "d", "p", "hw"))
    oh = (h + pt + pb - ((kh - 1) * dh + 1)) // sh + 1
    ow = (w + pl + pr - ((kw - 1) * dw + 1)) // sw + 1
    x = ints(np.uint8, 2, c, h, w)
    wf = ints(np.int8, c, kh, kw).astype(np.float32)
    bias = RNG.integers(-3000, 3000, c).astype(np.int32)
    mult = (RNG.random(c).astype(np.float32) * 0.004 + 0.0005).astype(np.float64)
    args = ((sh, sw), (dh, dw), (pt, pl, pb, pr), (oh, ow), bias, mult, 77, False, 2)
    first = nat.qdwconv_u8(x, 131, wf, *args)
    last = nat.qdwconv_u8(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), 131, wf, *args,
                          channels_last=True)
    np.testing.assert_array_equal(last, first.transpose(0, 2, 3, 1))


def _depthwise_reference(x, x_zp, wf, strides, dilations, pads, out_hw, bias, mult, y_zp,
                         out_signed):
    """A channels-last depthwise QLinearConv in int64 numpy: the centered taps summed over a
    zero-padded image, the bias added, then ``round-half-even(sum * multiplier) + y_zp``
    clamped (the requantization of the native kernels, float32 multiplier)."""
    n, h, w, c = x.shape
    kh, kw = wf.shape[1:]
    pt, pl, pb, pr = pads
    oh, ow = out_hw
    xp = np.zeros((n, h + pt + pb + kh * dilations[0], w + pl + pr + kw * dilations[1], c),
                  np.int64)
    xp[:, pt:pt + h, pl:pl + w] = x.astype(np.int64) - x_zp
    acc = np.zeros((n, oh, ow, c), np.int64)
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dilations[0], kx * dilations[1]
            acc += xp[:, y0:y0 + strides[0] * (oh - 1) + 1:strides[0],
                      x0:x0 + strides[1] * (ow - 1) + 1:strides[1]] * wf[:, ky, kx].astype(
                np.int64)
    acc += bias
    q = np.rint(acc.astype(np.float32) * mult.astype(np.float32)).astype(np.int64) + y_zp
    return np.clip(q, *((-128, 127) if out_signed else (0, 255)))


_DW_CASES = [  # (channels, h, w, kernel, strides, dilations, pads)
    (1, 5, 7, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (15, 12, 12, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (16, 9, 30, (3, 3), (2, 2), (1, 1), (0, 1, 1, 0)),
    (33, 6, 41, (5, 5), (1, 2), (1, 1), (2, 2, 2, 2)),
    (64, 7, 7, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),   # lone positions: 4 channel blocks
    (70, 5, 19, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2)),
    (24, 8, 8, (7, 7), (1, 1), (1, 1), (3, 3, 3, 3)),   # two quads of kernel rows
    (40, 6, 9, (3, 1), (2, 1), (1, 1), (0, 0, 1, 0)),
    (17, 3, 3, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    (48, 4, 4, (3, 3), (1, 1), (1, 1), (4, 4, 4, 4)),   # positions whose taps are all padding
]


@pytest.mark.parametrize("case", range(len(_DW_CASES)))
@pytest.mark.parametrize("x_dt,out_signed", [(np.uint8, False), (np.int8, True),
                                             (np.uint8, True)])
@pytest.mark.parametrize("weights", ["int8", "int8_packed", "wide"])
def test_native_depthwise_channels_last_against_integer_reference(case, x_dt, out_signed,
                                                                  weights):
    """The channels-last depthwise QLinearConv against an int64 numpy computation: with
    weights that fit int8 (AVX-512 VNNI: the 8-bit input read as it is, four kernel rows a
    vpdpbusd; weights packed per call or once, qdw_pack_vnni), and with a centered weight
    outside int8 (uint8 weights with a zero point: the float path), across channel tails,
    strides, dilations, kernels of more than four rows, padding on every side."""
    from onnxplex.providers.cpu_mlas._native import native

    nat = native()
    if nat is None:
        pytest.skip("the native module is not built")
    c, h, w, (kh, kw), strides, dil, pads = _DW_CASES[case]
    oh = (h + pads[0] + pads[2] - ((kh - 1) * dil[0] + 1)) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - ((kw - 1) * dil[1] + 1)) // strides[1] + 1
    x = ints(x_dt, 2, h, w, c)
    x_zp = int(ints(x_dt, 1)[0])
    wf = ints(np.int8, c, kh, kw).astype(np.float32)
    if weights == "wide":
        wf[c // 2, 0, 0] = 200.0   # (a uint8 weight 255 with zero point 55)
    packed = nat.qdw_pack_vnni(wf) if weights == "int8_packed" else None
    vnni = bool(nat.cpu_features().get("avx512_vnni"))
    assert nat.qdw_pack_vnni(wf).usable == (vnni and weights != "wide")
    bias = RNG.integers(-3000, 3000, c).astype(np.int32)
    mult = (RNG.random(c).astype(np.float32) * 0.004 + 0.0005).astype(np.float64)
    y_zp = int(RNG.integers(-100, 100) if out_signed else RNG.integers(0, 255))
    got = nat.qdwconv_u8(x, x_zp, wf, strides, dil, pads, (oh, ow), bias, mult, y_zp,
                         out_signed, 2, True, packed=packed)
    want = _depthwise_reference(x, x_zp, wf, strides, dil, pads, (oh, ow), bias, mult, y_zp,
                                out_signed)
    np.testing.assert_array_equal(got.astype(np.int64), want)


@pytest.mark.parametrize("isa", ["avx512vnni", ""])   # ("": the CPU's best, AMX here)
@pytest.mark.parametrize("x_dt,w_dt,out_signed", [
    (np.uint8, np.int8, False), (np.int8, np.int8, True), (np.uint8, np.uint8, True)])
@pytest.mark.parametrize("shape", [
    dict(c=16, m=96, k=(1, 1), p=(0, 0, 0, 0), hw=(9, 13)),    # 1x1: two panels, 64 + 32
    dict(c=24, m=70, k=(1, 1), p=(0, 0, 0, 0), hw=(20, 31)),   # a partial vector of outputs
    dict(c=8, m=19, k=(3, 3), p=(1, 1, 1, 1), hw=(11, 7)),     # im2col rows, K = 72
    dict(c=3, m=16, k=(3, 3), p=(1, 1, 1, 1), hw=(15, 17)),    # a stem: K = 27, rows K-padded
    dict(c=5, m=24, k=(3, 3), p=(0, 0, 0, 0), hw=(9, 11))],    # K = 45, read from x unpadded
    ids=["1x1_two_panels", "1x1_partial", "3x3", "3x3_rgb", "3x3_k45_unpadded"])
def test_native_qlinear_conv_channels_last_requantizes_in_the_gemm(isa, x_dt, w_dt, out_signed,
                                                                  shape):
    """Channels-last with a B packed for AVX-512 VNNI, the sums are requantized in the GEMM's
    epilogue, without int32 sums in memory: the bytes of the channels-first path (int32 sums,
    then the separate requantization), with per-channel multipliers, a bias, weight zero
    points (uint8 weights), both output types and two threads."""
    from onnxplex.providers.cpu_mlas._native import native

    nat = native()
    if nat is None or (isa and not nat.isa_available(isa)):
        pytest.skip("the native module or the variant is not here")
    c, m, (kh, kw), pads, (h, w) = (shape[k] for k in ("c", "m", "k", "p", "hw"))
    x = ints(x_dt, 2, c, h, w)
    wq = ints(w_dt, m, c, kh, kw)
    w_zp = ints(w_dt, m) if w_dt == np.uint8 else None
    packed = nat.pack_b(np.ascontiguousarray(wq.transpose(2, 3, 1, 0).reshape(kh * kw * c, m)),
                        w_zp, isa=isa)
    oh, ow = h + pads[0] + pads[2] - kh + 1, w + pads[1] + pads[3] - kw + 1
    bias = RNG.integers(-20000, 20000, m).astype(np.int32)
    mult = (RNG.random(m).astype(np.float32) * 0.0004 + 0.00005).astype(np.float64)
    x_zp = int(ints(x_dt, 1)[0])
    args = ((kh, kw), (1, 1), (1, 1), pads, (oh, ow), bias, mult, -3 if out_signed else 120,
            out_signed, 2)
    first = nat.qlinear_conv_u8(x, x_zp, packed, *args)
    last = nat.qlinear_conv_u8(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), x_zp, packed,
                               *args, channels_last=True)
    np.testing.assert_array_equal(last, first.transpose(0, 2, 3, 1))
    assert len(np.unique(last)) > 20   # (not all saturated)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [
    dict(c=3, m=16, k=(3, 3), s=(2, 2), p=(1, 1, 1, 1), hw=(29, 33)),   # an RGB stem, K = 27
    dict(c=16, m=40, k=(3, 3), s=(1, 1), p=(1, 1, 1, 1), hw=(15, 17)),  # one block, K = 144
    dict(c=8, m=70, k=(5, 3), s=(1, 2), p=(2, 1, 2, 1), hw=(40, 23))],  # several blocks
    ids=["stem", "one_block", "blocks"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_native_qlinear_conv_against_integer_reference(threads, shape, channels_last):
    """The one-group 8-bit conv (im2col rows, K-padded where the GEMM reads them in place,
    shared out over the threads with its blocks or inside one block; the VNNI GEMM and its
    requantization) against an int64 numpy computation of the same requantized sums; with two
    threads, twenty calls that must agree (an im2col row spilling into another thread's rows
    was such a race)."""
    from onnxplex.providers.cpu_mlas._native import native

    nat = native()
    if nat is None:
        pytest.skip("the native module is not built")
    c, m, (kh, kw), (sh, sw), pads, (h, w) = (shape[k] for k in ("c", "m", "k", "s", "p", "hw"))
    oh = (h + pads[0] + pads[2] - kh) // sh + 1
    ow = (w + pads[1] + pads[3] - kw) // sw + 1
    x = ints(np.uint8, 2, c, h, w)
    wq = ints(np.int8, m, c, kh, kw)
    packed = nat.pack_b(np.ascontiguousarray(wq.transpose(2, 3, 1, 0).reshape(kh * kw * c, m)),
                        None)
    bias = RNG.integers(-2000, 2000, m).astype(np.int32)
    mult = (RNG.random(m).astype(np.float32) * 0.002 + 0.0005).astype(np.float64)
    x_zp, y_zp = 121, 117
    xs = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if channels_last else x
    # (called repeatedly: a race between the threads shows once the pool's workers are awake)
    runs = [nat.qlinear_conv_u8(xs, x_zp, packed, (kh, kw), (sh, sw), (1, 1), pads, (oh, ow),
                                bias, mult, y_zp, False, threads, channels_last=channels_last)
            for _ in range(20 if threads > 1 else 1)]
    got = runs[-1] if channels_last else runs[-1].transpose(0, 2, 3, 1)
    for other in runs[:-1]:
        np.testing.assert_array_equal(other, runs[-1])
    xp = np.full((2, c, h + pads[0] + pads[2], w + pads[1] + pads[3]), x_zp, np.int64)
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = x
    xp -= x_zp
    acc = np.zeros((2, oh, ow, m), np.int64)
    for ky in range(kh):
        for kx in range(kw):
            taps = xp[:, :, ky:ky + sh * (oh - 1) + 1:sh, kx:kx + sw * (ow - 1) + 1:sw]
            acc += np.einsum("nchw,mc->nhwm", taps, wq[:, :, ky, kx].astype(np.int64))
    q = np.rint((acc + bias).astype(np.float32) * mult.astype(np.float32)).astype(np.int64)
    want = np.clip(q + y_zp, 0, 255)
    np.testing.assert_array_equal(got.astype(np.int64), want)
    assert len(np.unique(want)) > 20   # (not all saturated)


def test_a_symbolic_batch_packs_for_few_rows_when_a_run_has_few(monkeypatch):
    """A QGemm (a classifier) and a 1x1 QLinearConv on a 1x1 image (a squeeze-excite conv)
    whose batch is symbolic: packed for the CPU's best variant at session start, and for
    VNNI when a run of fewer than 16 rows first comes (AMX's tile holds 16); both sizes of
    batch give onnxruntime's bytes."""
    from onnxplex.providers.cpu_mlas._native import native

    if native() is None:
        pytest.skip("the native module is not built")
    packs: list[int | None] = []
    real = quant.native_pack_b

    def counted(b, zp, **kw):
        packs.append(kw.get("rows"))
        return real(b, zp, **kw)

    monkeypatch.setattr(quant, "native_pack_b", counted)
    k, n = 192, 40
    w = ints(np.int8, n, k)
    scalar = lambda name, dt, v: helper.make_tensor(name, dt, [], [v])  # noqa: E731
    common = [scalar("as", TensorProto.FLOAT, 0.02), scalar("az", TensorProto.UINT8, 128),
              helper.make_tensor("bs", TensorProto.FLOAT, [n], (RNG.random(n) * 0.01 + 0.001)
                                 .astype(np.float32).tolist()),
              helper.make_tensor("bz", TensorProto.INT8, [n], [0] * n),
              scalar("ys", TensorProto.FLOAT, 0.05), scalar("yz", TensorProto.UINT8, 100)]
    gemm = helper.make_node("QGemm", ["a", "as", "az", "w2", "bs", "bz", "", "ys", "yz"],
                            ["y"], domain="com.microsoft", transB=1)
    conv = helper.make_node("QLinearConv", ["x", "as", "az", "w4", "bs", "bz", "ys", "yz"],
                            ["z"])
    graph = helper.make_graph(
        [gemm, conv], "few_rows",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, ["N", k]),
         helper.make_tensor_value_info("x", TensorProto.UINT8, ["N", k, 1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, ["N", n]),
         helper.make_tensor_value_info("z", TensorProto.UINT8, ["N", n, 1, 1])],
        [*common, helper.make_tensor("w2", TensorProto.INT8, [n, k], w.reshape(-1).tolist()),
         helper.make_tensor("w4", TensorProto.INT8, [n, k, 1, 1], w.reshape(-1).tolist())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    import onnxplex

    sess = onnxplex.InferenceSession(model.SerializeToString())
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert all(r is None for r in packs)   # (nothing known about the rows yet)
    amx = native().isa_available("amx") and native().isa_available("avx512vnni")
    for batch in (1, 40, 3):
        feed = {"a": ints(np.uint8, batch, k), "x": ints(np.uint8, batch, k, 1, 1)}
        for got, want in zip(sess.run(None, feed), oracle.run(None, feed)):
            np.testing.assert_array_equal(got, want)
    # one VNNI packing for each weight, made by the batch-1 run and kept for batch 3
    assert sorted(r for r in packs if r is not None) == ([1, 1] if amx else [])
