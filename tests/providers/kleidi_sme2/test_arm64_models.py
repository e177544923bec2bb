"""Whole models through InferenceSession with kleidi_sme2 claiming their nodes (#29 item 6).

On x86 (the portable reference kernels, forced): the three models of arm64_models.py build,
kleidi_sme2 claims every node it must, the placement report names each node's kernel family,
and the results match cpu_mlas within the documented tolerances.

Under emulation (``scripts/test-arm64.sh python``: SME2 at 512 bits, i8mm without SME, a
NEON-only Cortex-A72; ``ONNXPLEX_ARM64_CASE_DIR`` names the cases the x86 side wrote), nothing
forced: the same claims, the report naming for every claimed node the variant dispatch picks
for that CPU (``test_arm64_dispatch.EXPECTED``), and the results matching the x86 ones: those
of the reference kernels (same quantization) and of cpu_mlas.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from .arm64_models import CASES, CLAIMED, KP, TOLERANCE, session, write_cases
from .test_arm64_dispatch import EXPECT_ENV, EXPECTED

pytest.importorskip("onnxplex.providers.kleidi_sme2._kleidi")

CASE_ENV = "ONNXPLEX_ARM64_CASE_DIR"
ON_ARM = platform.machine().lower() in ("aarch64", "arm64")
_FAMILY = re.compile(r"\b(\w+)/(sme2|i8mm|dotprod|neon|reference)\b")


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got.astype(np.float64) - want)) / np.max(np.abs(want)))


def _check_claims(name: str, sess, model: onnx.ModelProto, variants: dict[str, str]) -> None:
    """Every node of the CLAIMED op types on kleidi_sme2, its note naming one of the expected
    families with the variant ``variants`` gives for it (the report shows what ran)."""
    plan = sess.get_provider_assignment()
    report = plan.report()
    want_ops = CLAIMED[name]
    n_claimed = 0
    for p in plan.placements:
        if p.op_type not in want_ops:
            continue
        assert p.provider == KP, plan.explain(p.name)
        note = plan.partitions[p.partition].node_note(p.index) or \
            plan.partitions[p.partition].note
        found = dict(_FAMILY.findall(note))
        families = [f for f in want_ops[p.op_type] if f in found]
        assert families, (p.name, note)
        for f in families:
            assert found[f] == variants[f], (p.name, note, variants)
            assert f"{f}/{variants[f]}" in report
        n_claimed += 1
    assert n_claimed == sum(n.op_type in want_ops for n in model.graph.node) > 0, report


@pytest.mark.skipif(ON_ARM, reason="the x86 side (reference kernels forced)")
@pytest.mark.parametrize("name", list(CASES))
def test_x86_side(name, tmp_path, monkeypatch):
    if name == "dyn_int8_transformer":
        pytest.importorskip("onnxruntime")   # it quantizes the model
    monkeypatch.setenv("ONNXPLEX_KLEIDI_FORCE_REFERENCE", "1")
    model, feeds = CASES[name](tmp_path)
    data = model.SerializeToString()
    k = session(data, [KP, "cpu_mlas"])
    _check_claims(name, k, model, dict.fromkeys(
        [f for fams in CLAIMED[name].values() for f in fams], "reference"))
    got = k.run(None, feeds)[0]
    want = session(data, ["cpu_mlas"]).run(None, feeds)[0]
    assert got.shape == want.shape and np.isfinite(got).all()
    assert _rel_err(got, want) < TOLERANCE[name]["cpu_mlas"]


@pytest.mark.skipif(ON_ARM, reason="the x86 side writes the cases")
def test_case_writer_round_trip(tmp_path):
    """What the Arm runs compare with: the files the x86 side writes, as it writes them."""
    pytest.importorskip("onnxruntime")
    write_cases(tmp_path)
    for name in CASES:
        case = tmp_path / name
        ref, mlas = np.load(case / "reference.npz"), np.load(case / "cpu_mlas.npz")
        assert list(ref.files) == list(mlas.files) and ref.files
        out = ref.files[0]
        assert _rel_err(ref[out], mlas[out]) < TOLERANCE[name]["cpu_mlas"]
        assert onnx.load(str(case / "model.onnx")).graph.node


@pytest.mark.skipif(not (ON_ARM and os.environ.get(CASE_ENV) and os.environ.get(EXPECT_ENV)),
                    reason=f"emulated Arm only: {CASE_ENV} names the x86 cases, {EXPECT_ENV} "
                           "the CPU's level")
@pytest.mark.parametrize("name", list(CASES))
def test_matches_the_x86_run(name):
    case = Path(os.environ[CASE_ENV]) / name
    model = onnx.load(str(case / "model.onnx"))
    feeds = dict(np.load(case / "feeds.npz"))
    sess = session(model.SerializeToString(), [KP, "cpu_mlas"])   # nothing forced
    _check_claims(name, sess, model, EXPECTED[os.environ[EXPECT_ENV]])
    outs = dict(zip((o.name for o in sess.get_outputs()), sess.run(None, feeds)))
    for against in ("reference", "cpu_mlas"):
        want = np.load(case / f"{against}.npz")
        for out in want.files:
            got = outs[out]
            assert got.shape == want[out].shape and np.isfinite(got).all()
            err = _rel_err(got, want[out])
            print(f"{name} vs x86 {against}: max rel err {err:.2e}")
            assert err < TOLERANCE[name][against], (name, against, err)
