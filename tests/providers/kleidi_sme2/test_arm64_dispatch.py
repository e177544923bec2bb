"""On emulated aarch64: kleidi_sme2 is available by itself and dispatch picks the expected
variant of every kernel family for the emulated CPU.

``scripts/test-arm64.sh python`` runs this folder under qemu-aarch64 on three CPUs and sets
``ONNXPLEX_KLEIDI_EXPECT`` to the best ISA level of each (``sme2``, ``i8mm``, ``neon``); nothing
forces a variant there. Without that variable (x86, or a real Arm machine nobody told what to
expect) the module is skipped.

The expected variant per family follows the rule of ``kleidi_test --expect-variant``: the best
variant the family has (``planned()`` in src/dispatch.cpp) at or below the CPU's level, in
dispatch's order reference < neon < dotprod < i8mm < sme2. The fp32 families have no integer
variants, so an i8mm CPU runs them on neon; the int8 / int4 families have no plain-NEON variant
(their lowest SIMD one needs dotprod), so a NEON-only CPU runs them on the portable reference.
"""

from __future__ import annotations

import os
import platform

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex

EXPECT_ENV = "ONNXPLEX_KLEIDI_EXPECT"
FORCE_ENVS = ("ONNXPLEX_KLEIDI_FORCE_REFERENCE", "ONNXPLEX_KLEIDI_VARIANT")
KP = "kleidi_sme2"
FAMILIES = ("gemm_f32", "igemm_f32", "qgemm_qsi8cx", "qgemm_qsi4c32", "gemm_f16")
# cortex-a72 (Armv8.0) has neither dot-product instructions nor FEAT_FP16
EXPECTED = {
    "sme2": dict.fromkeys(FAMILIES, "sme2"),
    "i8mm": {"gemm_f32": "neon", "igemm_f32": "neon", "qgemm_qsi8cx": "i8mm",
             "qgemm_qsi4c32": "i8mm", "gemm_f16": "neon"},
    "neon": {"gemm_f32": "neon", "igemm_f32": "neon", "qgemm_qsi8cx": "reference",
             "qgemm_qsi4c32": "reference", "gemm_f16": "reference"},
}
LEVEL = os.environ.get(EXPECT_ENV, "")

pytestmark = pytest.mark.skipif(
    not LEVEL, reason=f"emulated aarch64 only: scripts/test-arm64.sh python sets {EXPECT_ENV}")


@pytest.fixture(scope="module")
def expected() -> dict[str, str]:
    if LEVEL not in EXPECTED:
        pytest.fail(f"{EXPECT_ENV}={LEVEL!r}: expected one of {', '.join(EXPECTED)}")
    return EXPECTED[LEVEL]


def test_runs_on_aarch64_with_nothing_forced():
    assert platform.machine() == "aarch64"
    forced = {k: os.environ[k] for k in FORCE_ENVS if k in os.environ}
    assert not forced, f"the emulated run must not force a variant: {forced}"
    from onnxplex.providers.kleidi_sme2 import _kleidi

    assert _kleidi.cpu_features()["arch"] == "aarch64"


def test_the_cores_native_modules_run_here():
    """The executor's C loop and the memory patterns are the aarch64 builds, so every session
    these tests run goes through them (a failed import would fall back to Python silently)."""
    from onnxplex.framework import executor, mempattern

    assert executor._runloop is not None and mempattern.available()
    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = 1
    g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y"]), helper.make_node("Relu", ["y"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 65536])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 65536])])
    sess = onnxplex.InferenceSession(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(),
        so)
    x = np.linspace(-1, 1, 4 * 65536, dtype=np.float32).reshape(4, 65536)
    for _ in range(4):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(-x, 0))
    assert type(sess._exec.runner()).__module__ == "onnxplex._runloop"
    (stats,) = sess._mem_patterns.stats()
    assert stats["state"] == "planned" and stats["hits"] > 0


def test_available_without_forcing():
    from onnxplex.providers.kleidi_sme2._provider import KleidiSme2Provider

    assert KleidiSme2Provider.available().ok, KleidiSme2Provider.available().reason
    assert KP in onnxplex.get_available_providers()
    assert KleidiSme2Provider.describe()["force_reference_env"] is False


@pytest.mark.parametrize("family", FAMILIES)
def test_dispatch_selects_the_expected_variant(family, expected):
    from onnxplex.providers.kleidi_sme2._provider import KleidiSme2Provider

    d = KleidiSme2Provider.describe()
    got = d["variants"][family]
    assert got["selected"] == expected[family], (
        f"{family}: selected {got['selected']}, {EXPECT_ENV}={LEVEL} expects "
        f"{expected[family]} (cpu features {d['cpu']['features']}, compiled {got['compiled']}, "
        f"supported {got['supported']})")


def _matmul_model(k: int, n: int) -> bytes:
    w = np.random.default_rng(3).standard_normal((k, n)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", n])],
        initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return model.SerializeToString()


def test_matmul_session_runs_on_kleidi(expected):
    k, n = 40, 24
    sess = onnxplex.InferenceSession(_matmul_model(k, n), providers=[KP, "cpu_mlas"])
    plan = sess.get_provider_assignment()
    placed = {p.name: p.provider for p in plan.placements}
    assert placed == {"mm": KP}, plan.report()
    selected = dict(kv.split("=") for kv in
                    sess.get_provider_options()[KP]["selected_variants"].split(";"))
    assert selected["gemm_f32"] == expected["gemm_f32"]
    x = np.random.default_rng(4).standard_normal((7, k)).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    (want,) = onnxplex.InferenceSession(_matmul_model(k, n),
                                        providers=["cpu_mlas"]).run(None, {"x": x})
    # the provider's documented fp32 tolerance against cpu_mlas
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
