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


def test_provider_is_unavailable_off_arm_unless_forced(monkeypatch):
    monkeypatch.delenv("ONNXPLEX_KLEIDI_FORCE_REFERENCE", raising=False)
    why = _provider.KleidiSme2Provider.available()
    if platform.machine() != "aarch64":
        assert not why.ok
        assert "needs aarch64" in why.reason and "ONNXPLEX_KLEIDI_FORCE_REFERENCE" in why.reason
    monkeypatch.setenv("ONNXPLEX_KLEIDI_FORCE_REFERENCE", "1")
    assert _provider.KleidiSme2Provider.available().ok
    assert _provider.KleidiSme2Provider.describe()["cpu"]["arch"]
