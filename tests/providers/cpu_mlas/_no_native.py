"""cpu_mlas as built without its native module, for the kernels compiled inside."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from onnxplex.providers.cpu_mlas import _blas, _native


def _forget_the_module() -> None:
    _native.native.cache_clear()
    _blas._sgemm_module.cache_clear()   # (the native GEMM, asked of native() once too)


@contextlib.contextmanager
def without_native() -> Iterator[None]:
    """``ONNXPLEX_MLAS_NATIVE=0``, with the cached answers of :func:`_native.native` and of
    the GEMM's module dropped before and after: each is read once a process, so the variable
    alone, set after another test loaded the module, changes nothing."""
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("ONNXPLEX_MLAS_NATIVE", "0")
            _forget_the_module()
            assert _native.native() is None and _blas._sgemm_module() is None
            yield
    finally:
        _forget_the_module()
