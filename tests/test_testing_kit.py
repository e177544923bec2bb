"""The provider author kit (``onnxplex.testing``) on the project's own providers, on the
provider template, and on deliberately broken providers (so the kit's tests can fail).

The bundled providers run in-process through pytester (sharing this process's ONNX node
cases with tests/conformance). The conformance part is restricted to keep this fast:
cpu_mlas runs 60 cases sampled from those of common op families (conv, gemm/matmul,
normalization, gather/reshape, resize, LSTM, QLinearConv, control flow, ...; all 1,884
cases it claims run in tests/conformance/test_node_cases.py); xnnpack_like runs all it
claims; kleidi_sme2 (portable reference kernels, ``force_reference=1``) claims none (its
claims need constant weights, which the node cases feed as inputs), so only its contract
tests run. The template runs in a fresh interpreter where it is installed as a distribution
(a dist-info with its entry point), since entry points are read once per process, with 40
sampled cases of the ~320 it claims.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import onnxplex
from onnxplex.framework.plugins import provider_entry, unregister_provider

# Imported here so that pytester's in-process runs (which drop modules they import) keep
# them, and with them the node cases built once per process.
from onnxplex.testing import _cases, _contract, _kit  # noqa: F401

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "examples" / "provider_template"


@pytest.fixture(scope="module", autouse=True)
def _providers_loaded():
    """Import the bundled providers (and their native modules) before any in-process run."""
    for name in onnxplex.get_all_providers():
        provider_entry(name).load()


def run_kit(pytester, *args):
    # This process imported onnxplex.testing already (see above), so pytest cannot rewrite
    # its asserts; the kit's messages do not depend on rewriting.
    result = pytester.runpytest_inprocess("-p", "onnxplex.testing", "-p", "no:cacheprovider",
                                          "-W", "ignore::pytest.PytestAssertRewriteWarning",
                                          "-q", *args)
    outcomes = {}
    for rep in result.reprec.getreports("pytest_runtest_logreport"):
        if rep.when == "call" or rep.outcome != "passed":
            outcomes[rep.nodeid] = rep.outcome
    return result, outcomes


def failed(outcomes, provider):
    return {nodeid.split("::")[1].split("[")[0] for nodeid, o in outcomes.items()
            if o == "failed" and f"[{provider}" in nodeid}


# --------------------------------------------------------------------------------------------
# The project's providers
# --------------------------------------------------------------------------------------------


CONTRACT_TESTS = {n for n in dir(_contract) if n.startswith("test_")} - {"test_node_conformance"}


# cpu_mlas: cases of common op families, 60 of them run.
CPU_OPS = "Conv,Gemm,MatMul,Relu,Softmax,Add,LayerNormalization,Gather,Reshape,Resize,LSTM," \
    "QLinearConv,Cast,ReduceMean,If,Loop,Scan,Einsum,NonMaxSuppression"


@pytest.mark.parametrize("args, label, ran", [
    (["--onnxplex-provider", "cpu_mlas", "--onnxplex-ops", CPU_OPS, "--onnxplex-sample", "60"],
     "cpu_mlas", 60),
    (["--onnxplex-provider", "xnnpack_like"], "xnnpack_like", None),
    (["--onnxplex-provider", "kleidi_sme2", "--onnxplex-provider-option",
      "force_reference=1"], "kleidi_sme2[force_reference=1]", 0),
], ids=["cpu_mlas", "xnnpack_like", "kleidi_sme2"])
def test_bundled_provider_passes_the_kit(pytester, monkeypatch, args, label, ran):
    # (on x86 xnnpack_like leaves partitions of under 4 M multiply-adds, and float32 ones, to
    # cpu_mlas: the kit's probe models are such; its kernels are what is checked here)
    monkeypatch.setenv("ONNXPLEX_XNNPACK_MIN_MACS", "0")
    monkeypatch.setenv("ONNXPLEX_XNNPACK_X86_FLOAT32", "1")
    result, outcomes = run_kit(pytester, *args)
    assert result.ret == 0, result.stdout.str()[-4000:]
    contract = {n.split("::")[1].split("[")[0] for n, o in outcomes.items() if o == "passed"}
    assert CONTRACT_TESTS <= contract, sorted(CONTRACT_TESTS - contract)
    summary = result.stdout.str()
    line = next(ln for ln in summary.splitlines() if ln.startswith(f"{label}: node cases"))
    claimed = int(line.split("claimed ")[1].split(",")[0])
    conformance = sum(o == "passed" for n, o in outcomes.items() if "test_node_conformance" in n)
    assert conformance == (claimed if ran is None else ran), line
    assert line.endswith(f"ran {conformance}")
    assert claimed > 0 or "declined" in summary


def test_options_reach_the_provider_under_test(pytester):
    # kleidi_sme2 is unavailable on x86 unless forced: without the option every test that
    # needs an instance is skipped with the provider's reason, and nothing fails.
    if provider_entry("kleidi_sme2").availability().ok:
        pytest.skip("kleidi_sme2 is available here without options")
    result, outcomes = run_kit(pytester, "--onnxplex-provider", "kleidi_sme2",
                               "-k", "not conformance", "-rs")
    assert result.ret == 0
    assert "not available here" in result.stdout.str()
    assert sum(o == "skipped" for o in outcomes.values()) >= 5


def test_without_a_provider_the_plugin_adds_nothing(pytester):
    pytester.makepyfile(test_own="def test_own():\n    assert True\n")
    result, outcomes = run_kit(pytester)
    assert result.ret == 0 and list(outcomes) == ["test_own.py::test_own"]
    assert "= onnxplex.testing =" not in result.stdout.str()  # no summary section


def test_bad_settings_are_usage_errors(pytester):
    result = pytester.runpytest_inprocess("-p", "onnxplex.testing", "--onnxplex-provider",
                                          "cpu_mlas", "--onnxplex-provider-option", "nokey")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "not [NAME:]KEY=VALUE" in result.stderr.str()


def test_an_unknown_provider_is_a_usage_error(pytester):
    """Not a 119-line INTERNALERROR from collection: one usage error naming the provider."""
    result = pytester.runpytest_inprocess("-p", "onnxplex.testing", "--onnxplex-provider",
                                          "nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "--onnxplex-provider nosuch: " in err and "unknown execution provider" in err
    assert "INTERNALERROR" not in err + result.stdout.str()


def test_template_passes_the_kit(tmp_path):
    """``pytest`` in (a copy of) the template folder, as its author runs it: its conftest.py
    enables the kit and its pyproject.toml names the provider. The template is installed as
    pip would (a dist-info with its entry point on sys.path) for a fresh interpreter."""
    site = tmp_path / "site"
    info = site / "onnxplex_example_provider-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: onnxplex-example-provider\n"
                                   "Version: 0.1.0\n")
    (info / "entry_points.txt").write_text("[onnxplex]\nexample_numpy = "
                                           "onnxplex_example_provider\n")
    work = tmp_path / "template"
    shutil.copytree(TEMPLATE, work, ignore=shutil.ignore_patterns(
        "build", "dist", "*.egg-info", "__pycache__"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("ONNXPLEX_DISABLE_PLUGINS", "ONNXPLEX_LOAD_PLUGINS")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(work)]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--onnxplex-sample", "40",
         "-q"], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    assert f"{len(CONTRACT_TESTS) + 40} passed" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("example_numpy: node cases"))
    assert "ran 40" in line and int(line.split("claimed ")[1].split(",")[0]) > 40
    assert "op Cast is not elementwise" in out   # a top decline reason


# --------------------------------------------------------------------------------------------
# Broken providers: the kit must catch each fault, and only that fault
# --------------------------------------------------------------------------------------------

BROKEN = textwrap.dedent('''
    import numpy as np
    import onnxplex
    from onnxplex import Capability, Decline, ExecutionProvider, NodeGroup, Option

    class Relus(ExecutionProvider):
        """Claims Relu and runs it correctly; the subclasses each break one rule."""
        name = "kit_good"

        def get_capability(self, graph):
            mine = [n.index for n in graph.nodes if n.op_type == "Relu"]
            return Capability(tuple(NodeGroup((i,)) for i in mine), tuple(
                Decline(n.index, "not Relu") for n in graph.nodes if n.op_type != "Relu"))

        def compile(self, subgraph):
            return lambda x: np.maximum(x, np.zeros((), x.dtype))

    class Keeper(Relus):
        name = "kit_keeper"

        def get_capability(self, graph):
            self.graph = graph
            return super().get_capability(graph)

    class Mutator(Relus):
        name = "kit_mutator"

        def get_capability(self, graph):
            for node in graph._model.nodes:
                node.doc_string = "seen by kit_mutator"
            return super().get_capability(graph)

    class Overclaimer(Relus):
        name = "kit_overclaimer"

        def get_capability(self, graph):
            # also claims the first node it was not offered (when offered only some)
            cap = super().get_capability(graph)
            offered = {n.index for n in graph.nodes}
            extra = [i for i in range(max(offered, default=0)) if i not in offered][:1]
            return Capability(cap.groups + tuple(NodeGroup((i,)) for i in extra), cap.declined)

    class Wrong(Relus):
        name = "kit_wrong"

        def compile(self, subgraph):
            return lambda x: np.abs(x)

    class Fickle(Relus):
        """Claims its Relus on its first call only (declining them afterwards)."""
        name = "kit_fickle"
        calls = 0

        def get_capability(self, graph):
            self.calls += 1
            if self.calls == 1:
                return super().get_capability(graph)
            return Capability((), tuple(Decline(n.index, "busy") for n in graph.nodes))

    class Lax(Relus):
        name = "kit_lax"
        option_specs = {"level": Option(1, int, "a number")}

        def __init__(self, options=None, *, context=None):
            super().__init__({k: v for k, v in (options or {}).items()
                              if k in self.option_specs}, context=context)

    class BadShape(Relus):
        name = "kit_bad_shape"

        def compile(self, subgraph):
            return lambda x: np.maximum(x, 0).reshape(-1)

    class BadProfile(Relus):
        name = "kit_bad_profile"

        def compile(self, subgraph):
            class Kernel:
                def __call__(self, x):
                    return np.maximum(x, np.zeros((), x.dtype))

                def profiled(self, emit, x):
                    return x  # forgets the Relu when the session profiles

            return Kernel()

    for cls in (Relus, Keeper, Mutator, Overclaimer, Wrong, Fickle, Lax, BadShape, BadProfile):
        onnxplex.register_provider(cls)
''')

# What the kit must report for each (besides the entry-point test, which every provider
# registered in-process fails), and nothing more.
EXPECTED_FAULTS = {
    "kit_good": set(),
    "kit_keeper": {"test_get_capability_keeps_no_reference_to_the_graph"},
    "kit_mutator": {"test_get_capability_is_deterministic_and_leaves_the_graph_alone"},
    "kit_overclaimer": {"test_get_capability_claims_only_offered_nodes"},
    "kit_wrong": {"test_compiled_kernels_run_as_claimed", "test_node_conformance"},
    "kit_fickle": {"test_get_capability_is_deterministic_and_leaves_the_graph_alone"},
    "kit_lax": {"test_unknown_option_is_rejected"},
    "kit_bad_shape": {"test_compiled_kernels_run_as_claimed",
                      "test_kernels_are_safe_to_run_from_several_threads",
                      "test_profiling_leaves_results_unchanged", "test_node_conformance"},
    "kit_bad_profile": {"test_profiling_leaves_results_unchanged"},
}


@pytest.fixture
def broken(pytester):
    pytester.makeconftest(BROKEN)
    yield
    for name in EXPECTED_FAULTS:
        unregister_provider(name)


def test_the_kit_catches_each_broken_provider(pytester, broken):
    args = [a for name in EXPECTED_FAULTS for a in ("--onnxplex-provider", name)]
    result, outcomes = run_kit(pytester, *args, "--onnxplex-ops", "Relu")
    for name, faults in EXPECTED_FAULTS.items():
        got = failed(outcomes, name)
        assert got == faults | {"test_registered_through_an_entry_point"}, (name, got)
    assert "kit_wrong: node cases considered" in result.stdout.str()
