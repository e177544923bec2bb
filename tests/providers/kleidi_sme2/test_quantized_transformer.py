"""A dynamically quantized transformer end to end on kleidi_sme2, on x86 and on emulated Arm.

The model is the test encoder (tests/models.py) quantized by onnxruntime's ``quantize_dynamic``
(per channel, int8 weights), which writes the unfused DynamicQuantizeLinear + MatMulInteger +
Cast + Mul (+ Add) pattern: every such group must be claimed by kleidi_sme2, whatever the
optimization level, and every other node must run on cpu_mlas.

Arm runs have no onnxruntime to quantize with: the x86 side writes this model as one of the
whole-model cases of arm64_models.py, which test_arm64_models.py runs on each emulated CPU on
the variants dispatch picks there and compares with the x86 outputs.

Tolerance: cpu_mlas quantizes activations per tensor to uint8, Kleidi per row to int8, so
against cpu_mlas each matmul may move by about one activation step times the column's weight
mass; through two layers, LayerNorm and softmax that is a few percent of the output scale. The
int8 kernels compute exact integer sums, so across CPUs only the float operations around them
(numpy's LayerNorm, Softmax, GELU; the fp32 rescale) differ by rounding, which a flipped
activation rounding in a later DynamicQuantizeLinear may amplify to one quantization step:
still far below the cpu_mlas tolerance, and checked as such.
"""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxplex
from onnxplex import GraphOptimizationLevel, SessionOptions

pytest.importorskip("onnxplex.providers.kleidi_sme2._kleidi")

KP = "kleidi_sme2"
ON_ARM = platform.machine().lower() in ("aarch64", "arm64")
DQ_OPS = {"DynamicQuantizeLinear", "MatMulInteger", "Cast", "Mul", "Add"}
# max |onnxplex - reference| / max |reference| over the output
VS_CPU_MLAS = 0.05   # different activation quantization (see the module docstring)


def _quantized_transformer(tmp: Path) -> onnx.ModelProto:
    from models import transformer_encoder
    from onnxruntime.quantization import QuantType, quantize_dynamic  # test-only dependency

    src, dst = tmp / "float.onnx", tmp / "dynamic_int8.onnx"
    onnx.save(transformer_encoder(layers=2, seed=3), src)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True)
    return onnx.load(str(dst))


def _feeds():
    from models import transformer_feed

    return transformer_feed(2, 12, seed=5, pad=True)


def _session(model, level, providers):
    so = SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = 2
    return onnxplex.InferenceSession(model, so, providers=providers)


def _kleidi(force: bool):
    return [(KP, {"force_reference": "1"} if force else {}), "cpu_mlas"]


def _rel_err(got, want) -> float:
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def _check_placement(sess, model) -> int:
    """Every dynamic int8 group on kleidi_sme2, everything else on cpu_mlas; returns the
    number of MatMulInteger nodes claimed."""
    plan = sess.get_provider_assignment()
    n_mmi = 0
    for p in plan.placements:
        if p.op_type == "MatMulInteger":
            n_mmi += 1
        if p.op_type in ("DynamicQuantizeLinear", "MatMulInteger"):
            assert p.provider == KP, plan.explain(p.name)
        elif p.provider == KP:
            assert p.op_type in DQ_OPS, plan.explain(p.name)
    assert n_mmi == sum(n.op_type == "MatMulInteger" for n in model.graph.node) > 0
    assert "DynamicQuantizeLinear + MatMulInteger + Cast + Mul" in plan.report()
    return n_mmi


needs_ort = pytest.mark.skipif(ON_ARM, reason="quantizing needs onnxruntime (x86 side only)")


@needs_ort
@pytest.mark.parametrize("level", [GraphOptimizationLevel.ORT_DISABLE_ALL,
                                   GraphOptimizationLevel.ORT_ENABLE_ALL])
def test_claims_every_dynamic_int8_group_and_matches_cpu_mlas(tmp_path, level):
    pytest.importorskip("onnxruntime")
    model = _quantized_transformer(tmp_path)
    k = _session(model.SerializeToString(), level, _kleidi(force=not ON_ARM))
    _check_placement(k, model)
    c = _session(model.SerializeToString(), level, ["cpu_mlas"])
    feeds = _feeds()
    got, want = k.run(None, feeds)[0], c.run(None, feeds)[0]
    assert _rel_err(got, want) < VS_CPU_MLAS
    np.testing.assert_array_equal(k.run(None, feeds)[0], got)  # packed once, runs repeat
