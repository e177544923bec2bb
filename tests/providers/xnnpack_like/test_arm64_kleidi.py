"""xnnpack_like on aarch64 (under qemu in CI: ``scripts/test-arm64.sh python``): nodes that
match a variant run the Kleidi kernel that dispatch selects on this CPU, nothing forced, and
agree with cpu_mlas as on x86.

Per family the expected kernel is ``kleidi:<family>/<selected variant>`` when dispatch selected
an Arm variant, and the provider's own implementation when it selected only the portable
reference (e.g. the integer and fp16 families on cortex-a72). On x86 no Arm variant exists, so
this file is skipped there; the Kleidi glue is exercised on x86 by the forced-reference tests.
"""

from __future__ import annotations

import platform

import numpy as np
import pytest
from models import dynamic_int8_bound, quantize_nbits
from onnx import helper

from onnxplex import GraphOptimizationLevel

from ._helpers import XP, assert_rel, model, notes, pair, run_both, session, vi
from .cnn_models import mobilenetv2, to_float16
from .conftest import FORCE
from .test_quant import _quantize_dynamic_chain

pytestmark = pytest.mark.skipif(
    platform.machine().lower() not in ("aarch64", "arm64"),
    reason="aarch64 only (x86 has no Arm variant; forced-reference tests cover the glue)")

F32 = np.float32
ALL = GraphOptimizationLevel.ORT_ENABLE_ALL


@pytest.fixture(autouse=True)
def _nothing_forced(monkeypatch):
    monkeypatch.delenv(FORCE, raising=False)
    monkeypatch.delenv("ONNXPLEX_KLEIDI_VARIANT", raising=False)


def _kernel(family: str) -> str:
    from onnxplex.providers.kleidi_sme2 import _kleidi

    v = _kleidi.variants()[family]["selected"]
    return f"kleidi:{family}/{v}" if v != "reference" else "own:"


def _check_variant_notes(sess, variant: str, family: str) -> int:
    """Every node matched to ``variant`` runs the expected kernel; returns how many."""
    want = _kernel(family)
    matched = [n for n in notes(sess).values() if f": {variant} -> " in n]
    for n in matched:
        assert f"{variant} -> {want}" in n, (n, want)
    return len(matched)


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_mobilenetv2_uses_the_selected_kleidi_variants(fp16):
    m = mobilenetv2(32)
    if fp16:
        m = to_float16(m)
    m = m.SerializeToString()
    x, c = session(m, level=ALL), session(m, ["cpu_mlas"], ALL)
    assert len(x.get_provider_assignment().partitions) == 1
    if fp16:
        assert _check_variant_notes(x, "pf16_gemm", "gemm_f16") >= 1
    else:
        # the pointwise convolutions and the classifier
        assert _check_variant_notes(x, "pf32_gemm", "gemm_f32") >= 10
    dt = np.float16 if fp16 else F32
    feed = {"x": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(dt)}
    assert_rel(x.run(None, feed)[0], c.run(None, feed)[0], 1e-2 if fp16 else 1e-4,
               "mobilenetv2")


def test_dynamic_int8_chain_uses_the_selected_variant():
    rng = np.random.default_rng(2)
    m, w, ws = _quantize_dynamic_chain(rng, 40, 12)
    x, c = pair(m)
    want = _kernel("qgemm_qsi8cx")
    assert notes(x)["mmi"].startswith(f"fully_connected: qp8_f32_qc8w_gemm -> {want}")
    feed = {"x": rng.standard_normal((5, 40)).astype(F32)}
    (y, yc), = run_both(x, c, feed)
    if want.startswith("kleidi:"):
        assert np.all(np.abs(y - yc) <= dynamic_int8_bound(feed["x"], w, ws))
    else:
        np.testing.assert_array_equal(y, yc)


def test_matmul_nbits_uses_the_selected_variant():
    rng = np.random.default_rng(4)
    b, s = quantize_nbits(rng.standard_normal((64, 24)).astype(F32) * 0.1, 32)
    nodes = [helper.make_node("MatMulNBits", ["x", "B", "s"], ["y"], name="nb",
                              domain="com.microsoft", K=64, N=24, bits=4, block_size=32)]
    m = model(nodes, [vi("x", [5, 64])], [vi("y", [5, 24])], {"B": b, "s": s}, ms=True)
    x, c = pair(m)
    want = _kernel("qgemm_qsi4c32")
    assert notes(x)["nb"].startswith(f"fully_connected: qp8_f32_qb4w_gemm -> {want}")
    assert XP in x.get_providers()
    feed = {"x": rng.standard_normal((5, 64)).astype(F32)}
    (y, yc), = run_both(x, c, feed)
    np.testing.assert_allclose(y, yc, atol=0.03 * np.abs(yc).max())
