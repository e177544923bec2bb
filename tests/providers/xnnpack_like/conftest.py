"""Fixtures of the xnnpack_like tests: which kernel path the provider may take.

``own_path``, ``forced`` and ``kleidi`` test the provider's own implementations and the Kleidi
glue: they turn off the cpu_mlas fast path (``ONNXPLEX_XNNPACK_MLAS=0``), which
``test_mlas_fast_path`` tests. Every fixture lifts the x86 cutoff below which a partition is
left to cpu_mlas (``ONNXPLEX_XNNPACK_MIN_MACS=0``): the tests' models are that small;
``fast_path`` also claims the float32 partitions x86's policy leaves to cpu_mlas
(``ONNXPLEX_XNNPACK_X86_FLOAT32=1``), the runtime it tests being theirs; ``test_x86_policy``
tests both rules themselves."""

from __future__ import annotations

import pytest

from onnxplex.providers.xnnpack_like import _mlas
from onnxplex.providers.xnnpack_like import _tables as T

FORCE = T.FORCE_ENV
MLAS = _mlas.MLAS_ENV
MIN_MACS = _mlas.MIN_MACS_ENV
CLAIM_F32 = _mlas.CLAIM_FLOAT32_ENV
needs_kleidi = pytest.mark.skipif(T.native()[0] is None,
                                  reason="the Kleidi extension is not built")


@pytest.fixture
def fast_path(monkeypatch):
    """cpu_mlas's fast path on (and, on x86, the policy but its float32 rule), no Kleidi
    reference forced."""
    monkeypatch.delenv(FORCE, raising=False)
    monkeypatch.delenv(MLAS, raising=False)
    monkeypatch.setenv(MIN_MACS, "0")
    monkeypatch.setenv(CLAIM_F32, "1")


@pytest.fixture
def own_path(monkeypatch):
    """The CPU's own dispatch decides (x86: no Kleidi kernel runs); own implementations."""
    monkeypatch.delenv(FORCE, raising=False)
    monkeypatch.setenv(MLAS, "0")
    monkeypatch.setenv(MIN_MACS, "0")


@pytest.fixture
def forced(monkeypatch):
    """The Kleidi reference variants are forced (they run on x86 too); own implementations
    elsewhere."""
    monkeypatch.setenv(FORCE, "1")
    monkeypatch.setenv(MLAS, "0")


@pytest.fixture(params=[False, pytest.param(True, marks=needs_kleidi)], ids=["own", "kleidi"])
def kleidi(request, monkeypatch) -> bool:
    """Both: the own path, then the Kleidi reference kernels forced."""
    monkeypatch.setenv(MLAS, "0")
    if request.param:
        monkeypatch.setenv(FORCE, "1")
    else:
        monkeypatch.delenv(FORCE, raising=False)
    return request.param
