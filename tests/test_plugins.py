"""Entry-point discovery: bundled providers, broken plugins, environment controls."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import onnxplex
from onnxplex.framework import plugins as _plugins


def test_bundled_providers_register_through_entry_points():
    names = onnxplex.get_all_providers()
    assert {"cpu_mlas", "kleidi_sme2", "xnnpack_like"} <= set(names)
    assert names[-1] == "cpu_mlas"
    assert onnxplex.get_available_providers()[-1] == "cpu_mlas"
    entry = _plugins.provider_entry("CPUExecutionProvider")
    assert entry.name == "cpu_mlas" and entry.distribution == "onnxplex"
    assert _plugins.provider_entry("XnnpackExecutionProvider").name == "xnnpack_like"


def test_unavailable_provider_says_why():
    why = _plugins.provider_entry("kleidi_sme2").availability()
    assert not why.ok and why.reason


def _fake_dist(tmp_path, name: str, module_src: str, ep_target: str | None = None):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(module_src))
    info = tmp_path / f"{name}-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(f"[onnxplex]\n{name} = {ep_target or name}\n")


BROKEN_IMPORT = "raise ImportError('this plugin is broken on purpose')\n"
BROKEN_HOOK = """
    import onnxplex

    @onnxplex.hookimpl
    def onnxplex_register_providers(register):
        raise RuntimeError('hook exploded')
"""
GOOD = """
    import onnxplex

    class Good(onnxplex.ExecutionProvider):
        name = "good_plugin"

    @onnxplex.hookimpl
    def onnxplex_register_providers(register):
        register("good_plugin_mod:Good", name="good_plugin")
"""


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    _fake_dist(tmp_path, "broken_import_plugin", BROKEN_IMPORT)
    _fake_dist(tmp_path, "broken_hook_plugin", BROKEN_HOOK)
    _fake_dist(tmp_path, "good_plugin_mod", GOOD)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_broken_plugins_become_warnings(plugin_dir):
    reg = _plugins._Registry()
    with pytest.warns(RuntimeWarning) as rec:
        reg.ensure_loaded()
    text = " ".join(str(w.message) for w in rec)
    assert "'broken_import_plugin' (broken_import_plugin 1.2.3)" in text
    assert "this plugin is broken on purpose" in text
    assert "hook exploded" in text
    assert {p.plugin for p in reg.problems} == {"broken_import_plugin", "broken_hook_plugin"}
    # the good plugin and the bundled ones still registered
    assert {"good_plugin", "cpu_mlas"} <= set(reg.entries)
    assert reg.entries["good_plugin"].distribution == "good_plugin_mod"


def test_environment_controls(plugin_dir, monkeypatch):
    monkeypatch.setenv("ONNXPLEX_DISABLE_PLUGINS", "broken_import_plugin,broken_hook_plugin")
    reg = _plugins._Registry()
    reg.ensure_loaded()
    assert not reg.problems and "good_plugin" in reg.entries
    monkeypatch.delenv("ONNXPLEX_DISABLE_PLUGINS")
    monkeypatch.setenv("ONNXPLEX_LOAD_PLUGINS", "cpu_mlas")
    reg = _plugins._Registry()
    reg.ensure_loaded()
    assert set(reg.entries) == {"cpu_mlas"}


def test_import_onnxplex_survives_broken_plugins_and_loads_no_provider(plugin_dir):
    code = ("import sys, onnxplex; "
            "assert not [m for m in sys.modules if m.startswith('onnxplex.providers.')], "
            "sorted(sys.modules); "
            "print(onnxplex.get_available_providers())")
    out = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True,
                         text=True, env={"PYTHONPATH": str(plugin_dir), "PATH": ""},
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "good_plugin" in out.stdout and "cpu_mlas" in out.stdout
    assert "broken on purpose" in out.stderr


def test_listing_providers_does_not_load_native_code():
    code = ("import sys, onnxplex; onnxplex.get_all_providers(); "
            "print(any('_kleidi' in m for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_registration_by_path_needs_a_name():
    with pytest.raises(onnxplex.InvalidArgumentError, match="needs name"):
        onnxplex.register_provider("some.module:Cls")


def test_available_sees_the_requested_options_and_old_probes_still_work():
    from onnxplex import Availability, Capability, ExecutionProvider, Option

    seen = []

    class ClaimsNothing(ExecutionProvider):
        def get_capability(self, graph):
            return Capability()

    class Gated(ClaimsNothing):
        name = "gated_test"
        option_specs = {"unlock": Option(False, bool)}

        @classmethod
        def available(cls, options=None):
            seen.append(options)
            ok = bool(options) and cls.option_specs["unlock"].convert(
                "unlock", options.get("unlock", False), cls.name)
            return Availability(ok, "" if ok else "needs unlock=1")

    class OldStyle(ClaimsNothing):  # written before available() took options
        name = "old_style_test"
        option_specs = {"x": Option(0, int)}

        @classmethod
        def available(cls):
            return Availability(True)

    onnxplex.register_provider(Gated)
    onnxplex.register_provider(OldStyle)
    try:
        assert "gated_test" not in onnxplex.get_available_providers()
        assert seen[-1] is None
        model = _identity_model()
        with pytest.warns(RuntimeWarning, match="needs unlock=1"):
            s = onnxplex.InferenceSession(model, providers=["gated_test", "cpu_mlas"])
        assert s.get_providers() == ["cpu_mlas"]
        s = onnxplex.InferenceSession(model, providers=[("gated_test", {"unlock": "1"}),
                                                        ("old_style_test", {"x": "3"})])
        assert seen[-1] == {"unlock": "1"}
        assert s.get_providers()[:2] == ["gated_test", "old_style_test"]
        with pytest.raises(onnxplex.ProviderOptionError, match="unlock"):
            onnxplex.InferenceSession(model, providers=[("gated_test", {"unlock": "perhaps"})])
    finally:
        _plugins.unregister_provider("gated_test")
        _plugins.unregister_provider("old_style_test")


def _identity_model() -> bytes:
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [vi],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_opt_in_providers_run_only_when_named():
    from onnxplex import Capability, ExecutionProvider

    class OptIn(ExecutionProvider):
        name = "opt_in_test"
        opt_in = True

        def get_capability(self, graph):
            return Capability()

    onnxplex.register_provider(OptIn)
    try:
        assert "opt_in_test" in onnxplex.get_available_providers()
        model = _identity_model()
        assert "opt_in_test" not in onnxplex.InferenceSession(model).get_providers()
        named = onnxplex.InferenceSession(model, providers=["opt_in_test", "cpu_mlas"])
        assert named.get_providers() == ["opt_in_test", "cpu_mlas"]
    finally:
        _plugins.unregister_provider("opt_in_test")
    assert "xnnpack_like" not in onnxplex.InferenceSession(model).get_providers()


EXITING_IMPORT = "import sys\nsys.exit(3)\n"
EXITING_HOOK = """
    import sys
    import onnxplex

    @onnxplex.hookimpl
    def onnxplex_register_providers(register):
        sys.exit(4)
"""


def test_plugins_calling_sys_exit_do_not_end_the_process(tmp_path):
    # (only Exception was contained: a sys.exit() at a plugin's import ended the caller)
    _fake_dist(tmp_path, "exiting_import_plugin", EXITING_IMPORT)
    _fake_dist(tmp_path, "exiting_hook_plugin", EXITING_HOOK)
    _fake_dist(tmp_path, "good_plugin_mod", GOOD)
    code = ("import onnxplex; print(sorted(onnxplex.get_all_providers())); "
            "print([p.plugin for p in onnxplex.plugin_problems()])")
    out = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True,
                         text=True, env={"PYTHONPATH": str(tmp_path), "PATH": ""}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "good_plugin" in out.stdout and "cpu_mlas" in out.stdout
    assert "exiting_import_plugin" in out.stdout and "exiting_hook_plugin" in out.stdout
    assert "SystemExit" in out.stderr
