"""Fixtures of the cpu_mlas tests."""

from __future__ import annotations

import pytest

from onnxplex.providers.cpu_mlas import _blas, _native


def _forget_the_module() -> None:
    _native.native.cache_clear()
    _blas._sgemm_module.cache_clear()   # (the native GEMM, asked of native() once too)


@pytest.fixture
def numpy_kernels(monkeypatch):
    """cpu_mlas without its native module for one test: ``ONNXPLEX_MLAS_NATIVE=0`` and the
    cached answers of :func:`_native.native` and the GEMM's module dropped before and after
    (each is read once a process: the variable alone, set after another test loaded the
    module, changed nothing)."""
    monkeypatch.setenv("ONNXPLEX_MLAS_NATIVE", "0")
    _forget_the_module()
    assert _native.native() is None and _blas._sgemm_module() is None
    yield
    monkeypatch.undo()
    _forget_the_module()
