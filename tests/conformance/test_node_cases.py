"""Every ONNX node conformance case of the installed onnx package, through cpu_mlas.

Each case runs in a normal InferenceSession (cpu_mlas only, reference fallback on) and is
compared at the case's own rtol/atol. Listed expected failures must fail with an onnxplex
error (a wrong answer is a failure either way). test_native_count runs all cases with the
reference fallback off and checks that every one passes natively. A case whose expected values
onnx releases contradict is compared with onnxruntime instead (``_cases.SUPERSEDED``).
"""

from __future__ import annotations

import pytest

import onnxplex
from conformance.cases import all_cases, run_case, summarize
from conformance.expected_failures import EXPECTED_FAILURES
from onnxplex.testing import _cases

CASES = sorted(all_cases())


def _param(name: str):
    if name in EXPECTED_FAILURES:
        return pytest.param(name, marks=pytest.mark.xfail(
            reason=EXPECTED_FAILURES[name], raises=onnxplex.OnnxplexError, strict=True))
    return name


def test_expected_failures_name_real_cases():
    assert set(EXPECTED_FAILURES) <= set(CASES)


def test_superseded_cases_are_real_and_strict(monkeypatch):
    # Every entry names a case of the installed onnx; an entry whose case's expected values
    # agree with onnxruntime fails (test_relu's do), and one whose versions do not include the
    # installed onnx leaves the case compared with its own values.
    assert set(_cases.SUPERSEDED) <= set(CASES)
    monkeypatch.setitem(_cases.SUPERSEDED, "test_relu", (">=1.0", "stale"))
    with pytest.raises(AssertionError, match="remove the entry"):
        run_case(all_cases()["test_relu"])
    monkeypatch.setitem(_cases.SUPERSEDED, "test_relu", ("<1.0", "not this onnx"))
    assert _cases.superseded("test_relu") is None
    run_case(all_cases()["test_relu"])


@pytest.mark.parametrize("name", [_param(n) for n in CASES])
def test_node_case(name):
    run_case(all_cases()[name])


def test_native_count():
    # Every case passes natively, none on the reference fallback: the fallback is off here and
    # the only onnxplex errors allowed are the listed expected failures (the ImageDecoder
    # cases, when Pillow is not installed).
    counts, wrong, errors = summarize([("cpu_mlas", {"reference_fallback": False})])
    assert wrong == {}, f"wrong answers without the fallback: {sorted(wrong)}"
    assert set(errors) == set(EXPECTED_FAILURES), f"not native: {errors}"
    assert counts["pass"] == len(CASES) - len(EXPECTED_FAILURES), counts
    # onnx 1.23's 1,884 cases all pass natively (2026-12-07): none may go missing either
    assert counts["pass"] >= 1884 - len(EXPECTED_FAILURES), counts
