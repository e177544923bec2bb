"""A dynamically quantized transformer end to end on kleidi_sme2, on x86 and on emulated Arm.

The model is the test encoder (tests/models.py) quantized by onnxruntime's ``quantize_dynamic``
(per channel, int8 weights), which writes the unfused DynamicQuantizeLinear + MatMulInteger +
Cast + Mul (+ Add) pattern: every such group must be claimed by kleidi_sme2, whatever the
optimization level, and every other node must run on cpu_mlas.

Arm runs have no onnxruntime to quantize with, so the x86 side writes the case to a folder
(``python tests/providers/kleidi_sme2/test_quantized_transformer.py DIR``: model, feeds and the
x86 outputs of kleidi_sme2's portable reference kernels), and the emulated aarch64 run of this
file, with ``ONNXPLEX_ARM64_CASE_DIR=DIR``, runs the same model on the variants dispatch picks
there and compares with the x86 outputs (``test_matches_the_x86_run``).

Tolerance: cpu_mlas quantizes activations per tensor to uint8, Kleidi per row to int8, so
against cpu_mlas each matmul may move by about one activation step times the column's weight
mass; through two layers, LayerNorm and softmax that is a few percent of the output scale. The
int8 kernels compute exact integer sums, so across CPUs only the float operations around them
(numpy's LayerNorm, Softmax, GELU; the fp32 rescale) differ by rounding, which a flipped
activation rounding in a later DynamicQuantizeLinear may amplify to one quantization step:
still far below the cpu_mlas tolerance, and checked as such.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxplex
from onnxplex import GraphOptimizationLevel, SessionOptions

pytest.importorskip("onnxplex.providers.kleidi_sme2._kleidi")

KP = "kleidi_sme2"
CASE_ENV = "ONNXPLEX_ARM64_CASE_DIR"
ON_ARM = platform.machine().lower() in ("aarch64", "arm64")
DQ_OPS = {"DynamicQuantizeLinear", "MatMulInteger", "Cast", "Mul", "Add"}
# max |onnxplex - reference| / max |reference| over the output
VS_CPU_MLAS = 0.05   # different activation quantization (see the module docstring)
ACROSS_CPUS = 0.01   # same quantization, float rounding differences only


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


def write_case(out: Path) -> None:
    """Model, feeds and x86 outputs (portable reference kernels) for the Arm comparison."""
    out.mkdir(parents=True, exist_ok=True)
    model = _quantized_transformer(out)
    onnx.save(model, out / "model.onnx")
    feeds = _feeds()
    sess = _session(model.SerializeToString(), GraphOptimizationLevel.ORT_DISABLE_ALL,
                    _kleidi(force=True))
    np.savez(out / "feeds.npz", **feeds)
    np.savez(out / "x86_outputs.npz", last_hidden_state=sess.run(None, feeds)[0])


@pytest.mark.skipif(not os.environ.get(CASE_ENV),
                    reason=f"Arm emulation only: {CASE_ENV} names the case written on x86")
def test_matches_the_x86_run():
    case = Path(os.environ[CASE_ENV])
    model = onnx.load(str(case / "model.onnx"))
    feeds = dict(np.load(case / "feeds.npz"))
    want = np.load(case / "x86_outputs.npz")["last_hidden_state"]
    sess = _session(model.SerializeToString(), GraphOptimizationLevel.ORT_DISABLE_ALL,
                    _kleidi(force=not ON_ARM))
    _check_placement(sess, model)
    got = sess.run(None, feeds)[0]
    assert got.shape == want.shape and np.isfinite(got).all()
    err = _rel_err(got, want)
    print(f"quantized transformer vs x86: max rel err {err:.2e} "
          f"({sess.get_provider_options()[KP]['selected_variants']})")
    assert err < ACROSS_CPUS


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    write_case(Path(sys.argv[1]))
