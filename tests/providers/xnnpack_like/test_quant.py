"""xnnpack_like on dynamically quantized and 4-bit fully-connected layers.

On the own path these follow ONNX semantics exactly (per-tensor uint8 dynamic quantization,
exact integer products), so they equal cpu_mlas. With the Kleidi reference variants forced,
matching nodes run the Kleidi kernels, which quantize activations per row to int8: outputs may
differ by about one activation quantization step times ``sum |w|`` per column.
"""

from __future__ import annotations

import numpy as np
import pytest
from models import dynamic_int8_bound, quantize_nbits
from onnx import helper

from ._helpers import XP, model, notes, pair, placements, run_both, vi

F32 = np.float32


def test_dynamic_quantize_matmul(kleidi):
    rng = np.random.default_rng(1)
    k, n = 48, 24
    w = rng.integers(-127, 128, (k, n), dtype=np.int8)
    sc = rng.uniform(0.001, 0.02, n).astype(F32)
    inits = {"B": w, "bs": sc, "bias": rng.standard_normal(n).astype(F32),
             "Bu": w.astype(np.int16).clip(0, 127).astype(np.uint8)}
    nodes = [helper.make_node("DynamicQuantizeMatMul", ["x", "B", "bs", "", "bias"], ["y"],
                              name="dqmm", domain="com.microsoft"),
             helper.make_node("DynamicQuantizeMatMul", ["x", "Bu", "bs"], ["y2"],
                              name="dqmm_u8", domain="com.microsoft")]
    m = model(nodes, [vi("x", [3, 6, k])], [vi("y", [3, 6, n]), vi("y2", [3, 6, n])], inits,
              ms=True)
    x, c = pair(m)
    assert {p.provider for p in placements(x).values()} == {XP}
    nn = notes(x)
    kernel = "kleidi:qgemm_qsi8cx/reference" if kleidi else "own:uint8_dynamic_gemm"
    assert nn["dqmm"].startswith(f"fully_connected: qp8_f32_qc8w_gemm -> {kernel}"), nn["dqmm"]
    assert nn["dqmm_u8"].startswith("fully_connected: none: the weights are uint8")
    feed = {"x": rng.standard_normal((3, 6, k)).astype(F32)}
    (y, yc), (y2, y2c) = run_both(x, c, feed)
    np.testing.assert_array_equal(y2, y2c)          # own path: ONNX semantics, exactly
    if kleidi:
        bound = dynamic_int8_bound(feed["x"].reshape(-1, k), w, sc).reshape(3, 6, n)
        assert np.all(np.abs(y - yc) <= bound)
    else:
        np.testing.assert_array_equal(y, yc)


def _quantize_dynamic_chain(rng, k: int, n: int) -> tuple[bytes, np.ndarray, np.ndarray]:
    """What onnxruntime's quantize_dynamic writes for one MatMul + bias (per-channel int8
    weights): DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(Mul(x_scale, w_scale))
    -> Add(bias), then a Relu."""
    w = rng.integers(-127, 128, (k, n), dtype=np.int8)
    ws = rng.uniform(0.002, 0.02, n).astype(F32)
    inits = {"W": w, "ws": ws, "bias": rng.standard_normal(n).astype(F32)}
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
        helper.make_node("MatMulInteger", ["xq", "W", "xz"], ["acc"], name="mmi"),
        helper.make_node("Cast", ["acc"], ["accf"], name="cast", to=1),
        helper.make_node("Mul", ["xs", "ws"], ["scale"], name="scale_mul"),
        helper.make_node("Mul", ["accf", "scale"], ["yf"], name="rescale"),
        helper.make_node("Add", ["yf", "bias"], ["yb"], name="bias_add"),
        helper.make_node("Relu", ["yb"], ["y"], name="relu"),
    ]
    return model(nodes, [vi("x", [5, k])], [vi("y", [5, n])], inits), w, ws


def test_dynamic_quantize_linear_matmul_integer_chain(kleidi):
    rng = np.random.default_rng(2)
    m, w, ws = _quantize_dynamic_chain(rng, 40, 12)
    x, c = pair(m)
    plan = x.get_provider_assignment()
    assert plan.counts()["cpu_mlas"] == 0 and len(plan.partitions) == 1, plan.report()
    nn = notes(x)
    if kleidi:
        assert nn["mmi"] == ("fully_connected: qp8_f32_qc8w_gemm -> kleidi:qgemm_qsi8cx/"
                             "reference (per-row int8 activations)")
        for name in ("dql", "cast", "scale_mul", "rescale", "bias_add"):
            assert nn[name].startswith("folded into 'mmi' -> kleidi:qgemm_qsi8cx"), nn[name]
    else:
        assert nn["mmi"].startswith("fully_connected: qp8_f32_qc8w_gemm -> own:int_gemm "
                                    "(unfused ONNX ops, exact)")
        assert nn["dql"] == "quantization -> own:dynamic_quantize_uint8"
    feed = {"x": rng.standard_normal((5, 40)).astype(F32)}
    (y, yc), = run_both(x, c, feed)
    if kleidi:
        assert np.all(np.abs(y - yc) <= dynamic_int8_bound(feed["x"], w, ws))
    else:
        np.testing.assert_array_equal(y, yc)


def test_matmul_integer_to_float_group(kleidi):
    rng = np.random.default_rng(3)
    k, n = 32, 16
    ws = [rng.integers(-127, 128, (k, n), dtype=np.int8) for _ in range(2)]
    sc = rng.uniform(0.001, 0.02, n).astype(F32)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
             helper.make_node("MatMulIntegerToFloat", ["xq", "B0", "xs", "bs", "xz"], ["y0"],
                              name="mm0", domain="com.microsoft"),
             helper.make_node("MatMulIntegerToFloat", ["xq", "B1", "xs", "bs", "xz"], ["y1"],
                              name="mm1", domain="com.microsoft")]
    m = model(nodes, [vi("x", [4, k])], [vi("y0", [4, n]), vi("y1", [4, n])],
              {"B0": ws[0], "B1": ws[1], "bs": sc}, ms=True)
    x, c = pair(m)
    assert {p.provider for p in placements(x).values()} == {XP}
    feed = {"x": rng.standard_normal((4, k)).astype(F32)}
    for (g, want), w in zip(run_both(x, c, feed), ws):
        if kleidi:
            assert np.all(np.abs(g - want) <= dynamic_int8_bound(feed["x"], w, sc))
        else:
            np.testing.assert_array_equal(g, want)



@pytest.mark.parametrize("block", [32, 16])
def test_matmul_nbits(kleidi, block):
    rng = np.random.default_rng(4)
    b, s = quantize_nbits(rng.standard_normal((64, 24)).astype(F32) * 0.1, block)
    nodes = [helper.make_node("MatMulNBits", ["x", "B", "s"], ["h"], name="nb",
                              domain="com.microsoft", K=64, N=24, bits=4, block_size=block),
             helper.make_node("Relu", ["h"], ["y"], name="relu")]
    m = model(nodes, [vi("x", [5, 64])], [vi("y", [5, 24])], {"B": b, "s": s}, ms=True)
    x, c = pair(m)
    assert {p.provider for p in placements(x).values()} == {XP}
    note = notes(x)["nb"]
    if block == 16:
        assert note.startswith("fully_connected: none: block_size=16: qb4w needs a multiple "
                               "of 32 -> own:gemm_blas"), note
    elif kleidi:
        assert note == "fully_connected: qp8_f32_qb4w_gemm -> kleidi:qgemm_qsi4c32/reference"
    else:
        assert note.startswith("fully_connected: qp8_f32_qb4w_gemm -> own:gemm_blas (int4 "
                               "dequantized at compile time)"), note
    feed = {"x": rng.standard_normal((5, 64)).astype(F32)}
    (y, yc), = run_both(x, c, feed)
    if kleidi and block == 32:   # per-row int8 activations: a few percent of the range
        np.testing.assert_allclose(y, yc, atol=0.03 * np.abs(yc).max())
    else:
        np.testing.assert_allclose(y, yc, rtol=1e-5, atol=1e-5)
