"""The kleidi_sme2 native module builds, detects the CPU, and reports errors as exceptions."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from onnxplex.providers.kleidi_sme2 import _provider


def test_native_module_detects_this_cpu():
    from onnxplex.providers.kleidi_sme2 import _kleidi

    info = _kleidi.cpu_features()
    machine = platform.machine().lower()
    assert info["arch"] == {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    assert isinstance(info["features"], list)


def test_trivial_kernel_and_error_path():
    from onnxplex.providers.kleidi_sme2 import _kleidi

    x = np.linspace(-2, 2, 9, dtype=np.float32).reshape(3, 3)
    np.testing.assert_array_equal(_kleidi.clamp_f32(x, -1.0, 1.0), np.clip(x, -1, 1))
    with pytest.raises(ValueError, match="lo > hi"):
        _kleidi.clamp_f32(x, 1.0, -1.0)


def test_provider_declares_itself_unavailable_with_a_reason():
    why = _provider.KleidiSme2Provider.available()
    assert not why.ok
    if platform.machine() != "aarch64":
        assert "needs aarch64 with SME2 or i8mm" in why.reason
    assert _provider.KleidiSme2Provider.describe()["cpu"]["arch"]
