"""Fixtures of the cpu_mlas tests."""

from __future__ import annotations

import pytest

from ._no_native import without_native


@pytest.fixture
def numpy_kernels():
    """cpu_mlas without its native module for one test (:func:`._no_native.without_native`)."""
    with without_native():
        yield
