"""What the tests must know about onnxruntime where it is the oracle and is not exact.

uint8 x int8 integer GEMM (MatMulInteger, MatMulIntegerToFloat, DynamicQuantizeMatMul,
QLinearConv, QLinearMatMul, ...): on x86 without VNNI (AVX2, or AVX-512 without
AVX512-VNNI / AVX-VNNI) onnxruntime's MLAS kernel multiplies with ``vpmaddubsw``, which adds each
pair of uint8 * int8 products into an int16 **with saturation**: 255 * -128 * 2 = -65280 becomes
-32768, so the int32 result is wrong wherever a pair of products leaves [-32768, 32767]. This is
onnxruntime's documented behaviour on non-VNNI x86, not a bug of the test: its quantization docs
(https://onnxruntime.ai/docs/performance/model-optimizations/quantization.html, ``reduce_range``)
and ``onnxruntime.quantization.quantize_static``'s docstring ("x86/x64 CPU without VNNI ...
set reduce_range=True ... quantizes weights to 7-bit to reduce the risk of integer saturation")
say to use 7-bit weights there; microsoft/onnxruntime#12088 (session option
``session.x64quantprecision``) names the same CPUs and the same [-64, 63] weight range. With
VNNI (``vpdpbusd`` accumulates in int32) onnxruntime is exact.

onnxplex's kernels are exact on every CPU. So where onnxruntime is the oracle for uint8 x int8
products, tests ask ``ort_u8s8_exact()`` and, when it is False, either use an exact oracle
(onnx's reference evaluator, int64 numpy) or keep int8 weights in ``ort_exact_int8_range()``
(7 bits: 255 * 64 * 2 = 32640 fits int16), and check onnxplex's full-range results against
exact arithmetic elsewhere.
"""

from __future__ import annotations

import functools

import numpy as np

INT8_FULL_RANGE = (-128, 127)
#: int8 values whose products with uint8 never saturate an int16 pair sum (inclusive)
INT8_7BIT_RANGE = (-64, 63)


@functools.cache
def ort_u8s8_exact() -> bool:
    """Whether onnxruntime's uint8 x int8 MatMulInteger is exact on this CPU (probed once).

    Runs A = [[255] * 4] (uint8) times a column of four -128 (int8), as a graph input and as a
    constant (prepacked) B: exact -130560; with int16 pair saturation -65536.
    """
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    k = 4
    a = np.full((1, k), 255, np.uint8)
    b = np.full((k, 1), -128, np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y_runtime_b"]),
         helper.make_node("MatMulInteger", ["a", "b_const"], ["y_const_b"])],
        "ort_u8s8_probe",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, k]),
         helper.make_tensor_value_info("b", TensorProto.INT8, [k, 1])],
        [helper.make_tensor_value_info(n, TensorProto.INT32, [1, 1])
         for n in ("y_runtime_b", "y_const_b")],
        [onnx.numpy_helper.from_array(b, "b_const")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)], ir_version=8)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    exact = a.astype(np.int64) @ b.astype(np.int64)
    return all(np.array_equal(y, exact) for y in sess.run(None, {"a": a, "b": b}))


def ort_exact_int8_range() -> tuple[int, int]:
    """Inclusive range of int8 weights (times uint8) for which onnxruntime is exact here: the
    full range with VNNI, 7 bits without."""
    return INT8_FULL_RANGE if ort_u8s8_exact() else INT8_7BIT_RANGE


def ort_exact_weights(rng: np.random.Generator, dtype, shape) -> np.ndarray:
    """Uniform random ``dtype`` weights onnxruntime multiplies exactly with uint8 activations:
    int8 in ``ort_exact_int8_range()``, other types over their full range."""
    dtype = np.dtype(dtype)
    lo, hi = ort_exact_int8_range() if dtype == np.int8 else \
        (np.iinfo(dtype).min, np.iinfo(dtype).max)
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def ort_reduce_range(weight_type: str = "QInt8") -> bool:
    """``reduce_range`` for onnxruntime.quantization's quantize_dynamic so that onnxruntime runs
    the result exactly: 7-bit weights for QInt8 weights when it saturates (QUInt8 weights are
    multiplied by a u8u8 kernel that does not)."""
    return weight_type == "QInt8" and not ort_u8s8_exact()
