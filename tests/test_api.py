"""The public namespace: curated, documented, light to import."""

from __future__ import annotations

import subprocess
import sys

import onnxplex


def test_every_public_name_is_documented():
    missing = [n for n in onnxplex.__all__
               if not isinstance(getattr(onnxplex, n), (int, str))
               and not (getattr(onnxplex, n).__doc__ or "").strip()]
    assert missing == []


def test_import_loads_no_provider_and_no_native_module():
    code = ("import sys, onnxplex; "
            "bad = [m for m in sys.modules if m.startswith('onnxplex.providers.') "
            "or '_kleidi' in m]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "[]", out.stderr


def test_ort_enums_and_options():
    assert onnxplex.GraphOptimizationLevel.ORT_ENABLE_ALL == 99
    assert onnxplex.GraphOptimizationLevel.ORT_ENABLE_LAYOUT == 3
    assert onnxplex.ExecutionMode.ORT_PARALLEL == 1
    so = onnxplex.SessionOptions()
    assert so.graph_optimization_level == onnxplex.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    assert so.get_session_config_entry("session.disable_cpu_ep_fallback") == "1"
    assert onnxplex.get_device() == "CPU"
