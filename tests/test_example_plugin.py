"""The third-party provider template (examples/provider_template) works as a real plugin.

The template is pip-installed into a temporary folder once per test session; a subprocess
with that folder on PYTHONPATH discovers it through its installed entry point, exactly as a
user's environment would, while this test process never sees it. In-process tests load the
provider class from the template's source and register it with ``register_provider``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex import GraphView, Subgraph, load_model

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "examples" / "provider_template"
PROVIDER_SRC = TEMPLATE / "onnxplex_example_provider" / "provider.py"

ELEMENTWISE = ("Add", "Relu", "Mul", "Sigmoid")


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


def chain_model() -> onnx.ModelProto:
    """X -> Conv -> Add -> Relu -> Mul -> Sigmoid -> MatMul -> Y (float32, opset 21)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B"),
        numpy_helper.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), "bias"),
        numpy_helper.from_array(np.array([0.5], np.float32), "scale"),
        numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "M"),
    ]
    nodes = [
        helper.make_node("Conv", ["X", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "bias"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "scale"], ["m"], name="mul"),
        helper.make_node("Sigmoid", ["m"], ["s"], name="sigmoid"),
        helper.make_node("MatMul", ["s", "M"], ["Y"], name="matmul"),
    ]
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4, 8, 5])],
        initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def int64_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Add", ["A", "B"], ["C"]), helper.make_node("Relu", ["C"], ["D"])],
        "ints",
        [helper.make_tensor_value_info("A", TensorProto.INT64, [2, 3]),
         helper.make_tensor_value_info("B", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("D", TensorProto.INT64, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def add_model(shape_a, shape_b) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Add", ["A", "B"], ["C"])], "add",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, shape_a),
         helper.make_tensor_value_info("B", TensorProto.FLOAT, shape_b)],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def unoptimized() -> onnxplex.SessionOptions:
    """Session options that keep the graph as built (tests here check placement)."""
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = onnxplex.GraphOptimizationLevel.ORT_DISABLE_ALL
    return so


def chain_input() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)


# --------------------------------------------------------------------------------------------
# Installing the template and asking a fresh interpreter about it
# --------------------------------------------------------------------------------------------


def _local_setuptools_builds_wheels() -> bool:
    """Whether this interpreter can build the template with ``--no-build-isolation``:
    setuptools >= 70.1 builds wheels itself; older setuptools needs the ``wheel`` package."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    parts = []
    for p in version.split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    if tuple(parts) >= (70, 1):
        return True
    return importlib.util.find_spec("wheel") is not None


@pytest.fixture(scope="session")
def template_site(tmp_path_factory) -> Path:
    """The template pip-installed (with its dist-info and entry point) into a fresh folder."""
    base = tmp_path_factory.mktemp("example_provider")
    src = base / "src"  # build from a copy: setuptools writes build/ and *.egg-info beside it
    shutil.copytree(TEMPLATE, src, ignore=shutil.ignore_patterns(
        "build", "dist", "*.egg-info", "__pycache__"))
    site = base / "site"
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input",
           "--disable-pip-version-check", "--target", str(site), str(src)]
    if _local_setuptools_builds_wheels():
        cmd.insert(4, "--no-build-isolation")  # offline: use the installed setuptools
    # else pip builds in an isolated environment, fetching setuptools from the package index.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"pip could not install the provider template:\n$ {' '.join(cmd)}\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    assert list(site.glob("onnxplex_example_provider-*.dist-info/entry_points.txt"))
    return site


_PROBE = textwrap.dedent("""
    import json, sys, traceback
    import numpy as np
    import onnxplex

    model_path, x_path = sys.argv[1], sys.argv[2]
    out = {}
    out["all"] = onnxplex.get_all_providers()
    # registered by dotted path: listing names must not import the provider module
    out["imported_by_listing"] = "onnxplex_example_provider.provider" in sys.modules
    out["available"] = onnxplex.get_available_providers()
    out["problems"] = [repr(p) for p in onnxplex.plugin_problems()]
    x = np.load(x_path)

    # Placement sessions run unoptimized so that no graph rewrite (a Conv+Add fusion, say)
    # changes which nodes exist; the cpu_mlas-only reference uses the default level.
    unoptimized = onnxplex.SessionOptions()
    unoptimized.graph_optimization_level = onnxplex.GraphOptimizationLevel.ORT_DISABLE_ALL

    def run(key, providers, options=None):
        try:
            sess = onnxplex.InferenceSession(model_path, options, providers=providers)
            y = sess.run(None, {"X": x})[0]
            plan = sess.get_provider_assignment()
            out[key] = {
                "y": np.asarray(y, np.float32).tolist(),
                "placements": [
                    {"op": p.op_type, "index": p.index, "provider": p.provider,
                     "partition": p.partition, "declined": [list(d) for d in p.declined]}
                    for p in plan.placements],
                "partitions": [{"provider": p.provider, "nodes": list(p.nodes),
                                "fused": p.fused} for p in plan.partitions],
            }
        except Exception:
            out[key] = {"error": traceback.format_exc()}

    run("cpu_only", ["cpu_mlas"])
    run("example_first", ["example_numpy", "cpu_mlas"], unoptimized)
    run("cpu_first", ["cpu_mlas", "example_numpy"], unoptimized)
    print(json.dumps(out))
""")


@pytest.fixture(scope="session")
def probe(template_site, tmp_path_factory) -> dict:
    """What a fresh interpreter that has the template installed reports."""
    work = tmp_path_factory.mktemp("example_probe")
    onnx.save(chain_model(), work / "chain.onnx")
    np.save(work / "x.npy", chain_input())
    env = {k: v for k, v in os.environ.items()
           if k not in ("ONNXPLEX_DISABLE_PLUGINS", "ONNXPLEX_LOAD_PLUGINS")}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(template_site)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, str(work / "chain.onnx"), str(work / "x.npy")],
        capture_output=True, text=True, env=env, cwd=work, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"probe interpreter failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _session_result(probe: dict, key: str) -> dict:
    res = probe[key]
    if "error" in res:
        pytest.fail(f"session {key!r} failed in the probe interpreter:\n{res['error']}")
    return res


# --------------------------------------------------------------------------------------------
# The installed plugin, seen from a fresh interpreter
# --------------------------------------------------------------------------------------------


def test_installed_plugin_is_listed_without_importing_the_provider(probe):
    assert probe["problems"] == []
    assert "example_numpy" in probe["all"]
    assert not probe["imported_by_listing"]
    available = probe["available"]
    assert "example_numpy" in available
    assert available[-1] == "cpu_mlas"  # the default CPU provider is always last
    assert available.index("example_numpy") < available.index("cpu_mlas")


def test_plugin_is_invisible_to_this_process():
    # The template is only on the probe interpreter's PYTHONPATH.
    assert "example_numpy" not in onnxplex.get_all_providers()


def test_elementwise_chain_runs_fused_on_example_numpy(probe):
    res = _session_result(probe, "example_first")
    by_op = {p["op"]: p for p in res["placements"]}
    assert {op: by_op[op]["provider"] for op in by_op} == {
        "Conv": "cpu_mlas", "Add": "example_numpy", "Relu": "example_numpy",
        "Mul": "example_numpy", "Sigmoid": "example_numpy", "MatMul": "cpu_mlas"}
    ours = [p for p in res["partitions"] if p["provider"] == "example_numpy"]
    assert len(ours) == 1, ours
    assert ours[0]["fused"]
    assert sorted(ours[0]["nodes"]) == sorted(by_op[op]["index"] for op in ELEMENTWISE)
    assert len({by_op[op]["partition"] for op in ELEMENTWISE}) == 1
    # the placement report says why Conv and MatMul fell back
    assert ["example_numpy", "op Conv is not elementwise"] in by_op["Conv"]["declined"]
    assert ["example_numpy", "op MatMul is not elementwise"] in by_op["MatMul"]["declined"]


def test_fused_result_matches_cpu_only(probe):
    ours = np.asarray(_session_result(probe, "example_first")["y"], np.float32)
    ref = np.asarray(_session_result(probe, "cpu_only")["y"], np.float32)
    assert ours.shape == (1, 4, 8, 5)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


def test_provider_listed_first_takes_everything_it_can(probe):
    res = _session_result(probe, "cpu_first")
    assert {p["provider"] for p in res["placements"]} == {"cpu_mlas"}
    assert all(p["provider"] == "cpu_mlas" for p in res["partitions"])


# --------------------------------------------------------------------------------------------
# The provider class in this process (loaded from the template's source, not installed)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def provider_mod():
    spec = importlib.util.spec_from_file_location("_onnxplex_example_provider_src", PROVIDER_SRC)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _capability(provider, model_proto):
    model = load_model(model_proto)
    return model, provider.get_capability(GraphView(model, range(len(model.nodes))))


def test_capability_claims_the_chain_and_explains_declines(provider_mod):
    model, cap = _capability(provider_mod.ExampleNumpyProvider(), chain_model())
    ops = [n.op_type for n in model.node_views]
    assert [[ops[i] for i in g.nodes] for g in cap.groups] == [list(ELEMENTWISE)]
    assert cap.groups[0].name == "example_numpy_fused_0"
    reasons = {ops[d.node]: d.reason for d in cap.declined}
    assert reasons == {"Conv": "op Conv is not elementwise",
                       "MatMul": "op MatMul is not elementwise"}

    _, cap = _capability(provider_mod.ExampleNumpyProvider(), int64_model())
    assert cap.groups == ()
    assert [d.reason for d in cap.declined] == ["dtype int64 is not float32"] * 2


@pytest.mark.parametrize("shape_a, shape_b, reason", [
    ([2, 3], [2, 3], None),
    (["N", 3], [1, 3], None),
    (["N", 3], ["N", 3], None),
    ([2, 3], [4, 3], "input shapes [2,3] and [4,3] do not broadcast"),
    (["N", 3], ["M", 3], "input shapes [N,3] and [M,3] may not broadcast"),
    (None, [3], "input shapes [?] and [3]: an unknown rank; cannot check that they broadcast"),
])
def test_capability_checks_broadcasting(provider_mod, shape_a, shape_b, reason):
    _, cap = _capability(provider_mod.ExampleNumpyProvider(), add_model(shape_a, shape_b))
    if reason is None:
        assert [g.nodes for g in cap.groups] == [(0,)] and cap.declined == ()
    else:
        assert cap.groups == () and [d.reason for d in cap.declined] == [reason]


def test_options(provider_mod):
    cls = provider_mod.ExampleNumpyProvider
    _, cap = _capability(cls({"fuse": "0"}), chain_model())  # ORT passes strings
    assert [len(g.nodes) for g in cap.groups] == [1, 1, 1, 1]

    _, cap = _capability(cls({"min_group_size": 5}), chain_model())
    assert cap.groups == ()
    assert sum("min_group_size=5" in d.reason for d in cap.declined) == 4

    with pytest.raises(onnxplex.ProviderOptionError, match="unknown option"):
        cls({"fusion": True})
    with pytest.raises(onnxplex.ProviderOptionError, match="min_group_size"):
        cls({"min_group_size": 0})
    assert cls({"fuse": False}).provider_options() == {"fuse": "0", "min_group_size": "1"}


def _subgraph(model, group, name) -> Subgraph:
    """What the session hands ``compile``: outside inputs in first-use order, and outputs
    read outside the group (or graph outputs)."""
    nodes = tuple(model.node_views[i] for i in group)
    inside = set(group)
    produced = {o.name for n in nodes for o in n.outputs if o is not None}
    inputs: dict[str, object] = {}
    for n in nodes:
        for v in n.inputs:
            if v is not None and v.name not in produced:
                inputs.setdefault(v.name, v)
    graph_outputs = {v.name for v in model.graph.outputs}
    outputs = [o for n in nodes for o in n.outputs if o is not None and (
        o.name in graph_outputs
        or any(c not in inside for c in model.consumer_indices.get(o.name, ())))]
    return Subgraph(name, nodes, tuple(inputs.values()), tuple(outputs))


def test_compiled_kernel_is_stateless_and_thread_safe(provider_mod):
    provider = provider_mod.ExampleNumpyProvider()
    model, cap = _capability(provider, chain_model())
    sub = _subgraph(model, cap.groups[0].nodes, cap.groups[0].name)
    assert [v.name for v in sub.inputs] == ["c", "bias", "scale"]
    assert [v.name for v in sub.outputs] == ["s"]
    kernel = provider.compile(sub)
    consts = {v.name: v.const for v in sub.inputs if v.is_const}

    def expected(c):
        m = np.maximum(c + consts["bias"], 0) * consts["scale"]
        return 1 / (1 + np.exp(-m))

    def call(seed):
        c = np.random.default_rng(seed).standard_normal((1, 4, 8, 8)).astype(np.float32)
        (s,) = kernel(c, consts["bias"], consts["scale"])
        assert s.dtype == np.float32 and s.shape == c.shape
        np.testing.assert_allclose(s, expected(c), rtol=1e-6, atol=1e-6)
        return True

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(call, range(64)))


@pytest.fixture
def counting_provider(provider_mod):
    """A subclass that records every compile, registered in this process only."""

    class CountingExampleProvider(provider_mod.ExampleNumpyProvider):
        name = "example_numpy_counting"
        compiled: list[tuple[int, ...]] = []

        def compile(self, subgraph):
            type(self).compiled.append(tuple(n.index for n in subgraph.nodes))
            return super().compile(subgraph)

    onnxplex.register_provider(CountingExampleProvider)
    try:
        yield CountingExampleProvider
    finally:
        onnxplex.framework.plugins.unregister_provider(CountingExampleProvider.name)


def test_compile_runs_once_per_session_not_per_run(counting_provider):
    model, x = chain_model().SerializeToString(), chain_input()
    ref = onnxplex.InferenceSession(model, providers=["cpu_mlas"]).run(None, {"X": x})[0]

    sess = onnxplex.InferenceSession(model, unoptimized(),
                                     providers=[counting_provider.name, "cpu_mlas"])
    assert len(counting_provider.compiled) == 1  # one fused group -> one compile
    assert len(counting_provider.compiled[0]) == len(ELEMENTWISE)
    for _ in range(3):
        np.testing.assert_allclose(sess.run(None, {"X": x})[0], ref, rtol=1e-5, atol=1e-6)
    assert len(counting_provider.compiled) == 1

    onnxplex.InferenceSession(model, unoptimized(), providers=[counting_provider.name, "cpu_mlas"])
    assert len(counting_provider.compiled) == 2  # a new session compiles again


def test_provider_options_reach_the_provider_through_the_session(counting_provider):
    model, x = chain_model().SerializeToString(), chain_input()
    sess = onnxplex.InferenceSession(
        model, unoptimized(), providers=[(counting_provider.name, {"fuse": "0"}), "cpu_mlas"])
    assert sorted(len(g) for g in counting_provider.compiled) == [1, 1, 1, 1]
    parts = [p for p in sess.get_provider_assignment().partitions
             if p.provider == counting_provider.name]
    assert len(parts) == 4 and not any(p.fused for p in parts)
    sess.run(None, {"X": x})
