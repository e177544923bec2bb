"""The tests every provider inherits from the kit (collected as ``onnxplex.testing::...``).

Contract: registration through an installed entry point, a reasoned ``available()``, option
validation, a deterministic ``get_capability`` that neither modifies nor keeps the graph and
claims only offered nodes, compiled kernels that run (declared outputs, results matching the
default CPU provider, safe from several threads). Conformance: the ONNX node cases the
provider claims, at each case's own tolerance -- not claiming is fine; claiming and being
wrong is not.
"""

from __future__ import annotations

import gc
import importlib.metadata
import json
import warnings
import weakref
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import onnx
import pytest

import onnxplex
from onnxplex import GraphView, load_model
from onnxplex.framework.feeds import random_feeds

from ._cases import all_cases, run_case
from ._kit import KIT_KEY, Target, as_probe
from ._probes import PROBES, Probe

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _require_available(target: Target) -> None:
    why = target.availability()
    if not why.ok:
        pytest.skip(f"provider {target.id} is not available here: {why.reason}")


@pytest.fixture
def _probes(onnxplex_probe_models) -> list[Probe]:
    return list(PROBES) + [as_probe(p) for p in onnxplex_probe_models]


def _ops(model: onnxplex.Model, indices) -> str:
    return ", ".join(f"{i}:{model.node_views[i].op_type}" for i in sorted(indices))


def _structure(model: onnxplex.Model) -> tuple[Any, ...]:
    """A deep structural fingerprint: the serialized model plus every node's wiring and
    attributes as the in-memory graph holds them."""
    proto = model.to_proto().SerializeToString(deterministic=True)
    nodes = tuple(
        (n.name, n.op_type, n.domain,
         tuple("" if v is None else v.name for v in n.inputs),
         tuple("" if v is None else v.name for v in n.outputs),
         tuple(sorted((k, repr(a)) for k, a in n.attributes.items())))
        for n in model.nodes)
    return proto, nodes


def _session(target: Target, model: onnx.ModelProto) -> onnxplex.InferenceSession:
    """A session with ``target`` first, unoptimized (the nodes are the ones classified); a
    warning that the session disabled or skipped the provider is a failure."""
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = onnxplex.GraphOptimizationLevel.ORT_DISABLE_ALL
    with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
        warnings.simplefilter("always")
        sess = onnxplex.InferenceSession(model, so, providers=target.session_providers())
    trouble = [str(w.message) for w in caught
               if issubclass(w.category, RuntimeWarning) and target.canonical in str(w.message)]
    assert not trouble, f"the session did not use {target.id} as claimed: {trouble}"
    return sess


def _feeds(probe: Probe, sess: onnxplex.InferenceSession, seed: int) -> dict[str, Any]:
    if probe.feeds is not None:
        return probe.feeds(np.random.default_rng(seed))
    return random_feeds(sess, seed=seed, dim=2)


def _close(got: Any, want: Any, rtol: float, atol: float, where: str) -> None:
    """``max|got - want| <= atol + rtol * max|want|`` for floats; equality otherwise."""
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for k, (g, w) in enumerate(zip(got, want)):
            _close(g, w, rtol, atol, f"{where}[{k}]")
        return
    if want is None or not isinstance(want, np.ndarray):
        assert got is None if want is None else got == want, where
        return
    assert isinstance(got, np.ndarray), f"{where}: got {type(got).__name__}, not an array"
    assert (got.dtype, got.shape) == (want.dtype, want.shape), (
        f"{where}: got {got.dtype} {list(got.shape)}, expected {want.dtype} {list(want.shape)}")
    if want.dtype.kind in "fc" or "float" in want.dtype.name:
        g, w = got.astype(np.float64), want.astype(np.float64)
        finite = np.isfinite(w)
        assert np.array_equal(np.isfinite(g), finite), f"{where}: inf/nan differ"
        scale = float(np.abs(w[finite]).max()) if finite.any() else 0.0
        err = float(np.abs(g[finite] - w[finite]).max()) if finite.any() else 0.0
        assert err <= atol + rtol * scale, (
            f"{where}: max abs error {err:.3g} > {atol:g} + {rtol:g} * {scale:.3g}")
    else:
        assert np.array_equal(got, want), f"{where}: values differ"


def _claimed_names(target: Target, model: onnx.ModelProto) -> set[str]:
    loaded = load_model(model)
    cap = target.claims(loaded)
    return {loaded.node_views[i].name for g in cap.groups for i in g.nodes}


def _exercised(target: Target, probes: list[Probe],
               request: pytest.FixtureRequest) -> list[tuple[Probe, set[str]]]:
    """The probes ``target`` claims nodes of, with those nodes' names (asked once per run)."""
    cache = request.config.stash[KIT_KEY].claims
    out = []
    for p in probes:
        key = (target.id, p.name, p.model.SerializeToString(deterministic=True))
        if key not in cache:
            cache[key] = frozenset(_claimed_names(target, p.model))
        out.append((p, set(cache[key])))
    out = [(p, names) for p, names in out if names]
    if not out:
        pytest.skip(f"{target.id} claims no node of the probe models "
                    f"({', '.join(p.name for p in probes)}); add models it runs with an "
                    "onnxplex_probe_models fixture")
    return out


# --------------------------------------------------------------------------------------------
# Registration, availability, options
# --------------------------------------------------------------------------------------------


def test_registered_through_an_entry_point(onnxplex_kit_target: Target) -> None:
    entry = onnxplex_kit_target.entry()
    cls = entry.load()  # the registered name and the class's `name` agree; api_version fits
    assert entry.distribution, (
        f"provider {entry.name!r} is {entry.origin}, not registered by an installed "
        "distribution: publish it under [project.entry-points.onnxplex] and install the "
        "package (pip install -e . while developing)")
    groups = {ep.group for ep in importlib.metadata.distribution(entry.distribution).entry_points}
    assert "onnxplex" in groups, (f"distribution {entry.distribution!r} has no entry point in "
                                  "the 'onnxplex' group")
    assert 1 <= cls.api_version <= onnxplex.API_VERSION


def test_available_answers_with_a_reason(onnxplex_kit_target: Target) -> None:
    cls = onnxplex_kit_target.entry().load()
    try:
        general = cls.available()
    except Exception as e:  # noqa: BLE001 - the contract: never raise
        pytest.fail(f"{cls.__name__}.available() raised {type(e).__name__}: {e}; return "
                    "Availability(False, reason) instead")
    for why in (general, onnxplex_kit_target.availability()):
        assert isinstance(why, onnxplex.Availability), (
            f"available() returned {type(why).__name__}, not onnxplex.Availability")
        assert why.ok or why.reason.strip(), "an unavailable provider must say why"


def _must_reject(cls: type, options: dict[str, Any], why: str) -> None:
    try:
        cls(options)
    except onnxplex.ProviderOptionError:
        return
    except Exception as e:  # noqa: BLE001 - the wrong error type is the failure reported
        pytest.fail(f"{cls.__name__}({options!r}) raised {type(e).__name__}: {e}; "
                    f"{why} must raise onnxplex.ProviderOptionError")
    pytest.fail(f"{cls.__name__}({options!r}) was accepted; {why} must raise "
                "onnxplex.ProviderOptionError (the base class's __init__ does this: pass the "
                "options to it unfiltered)")


def test_unknown_option_is_rejected(onnxplex_kit_target: Target) -> None:
    cls = onnxplex_kit_target.entry().load()
    _must_reject(cls, {**onnxplex_kit_target.options, "onnxplex_kit_no_such_option": "1"},
                 "an unknown option")


def test_options_are_validated_and_reported(onnxplex_kit_target: Target) -> None:
    _require_available(onnxplex_kit_target)
    cls = onnxplex_kit_target.entry().load()
    reported = onnxplex_kit_target.make().provider_options()
    assert isinstance(reported, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in reported.items()), (
        f"provider_options() must map option names to strings, got {reported!r}")
    for key, spec in cls.option_specs.items():
        bad = "onnxplex-kit-not-a-value" if spec.type in (int, float, bool) or spec.choices \
            else None
        if bad is None:
            continue
        _must_reject(cls, {**onnxplex_kit_target.options, key: bad},
                     f"a value of option {key!r} that is not a {spec.type.__name__}"
                     + (f" among {list(spec.choices)}" if spec.choices else ""))


# --------------------------------------------------------------------------------------------
# get_capability
# --------------------------------------------------------------------------------------------


def test_get_capability_is_deterministic_and_leaves_the_graph_alone(
        onnxplex_kit_target: Target, _probes: list[Probe]) -> None:
    _require_available(onnxplex_kit_target)
    for probe in _probes:
        model = load_model(probe.model)
        before = _structure(model)
        every = range(len(model.nodes))
        provider = onnxplex_kit_target.make()
        first = provider.get_capability(GraphView(model, every))
        assert isinstance(first, onnxplex.Capability), (
            f"{probe.name}: get_capability returned {type(first).__name__}, not a Capability")
        again = provider.get_capability(GraphView(model, every))
        fresh = onnxplex_kit_target.make().get_capability(GraphView(model, every))
        assert first == again == fresh, (
            f"{probe.name}: get_capability answered differently for the same graph "
            f"({first} / {again} / {fresh})")
        assert _structure(model) == before, f"{probe.name}: get_capability modified the graph"


def test_get_capability_keeps_no_reference_to_the_graph(
        onnxplex_kit_target: Target, _probes: list[Probe]) -> None:
    _require_available(onnxplex_kit_target)
    # Objects that exist already are frozen out of the collection below, so its cost does not
    # grow with the test process's heap. A frozen object still counts as a holder: a model
    # kept by anything alive is not collected.
    gc.freeze()
    try:
        provider = onnxplex_kit_target.make()
        refs: dict[str, weakref.ref] = {}
        answers = []
        for probe in _probes:
            model = load_model(probe.model)
            view = GraphView(model, range(len(model.nodes)))
            refs[f"{probe.name}: the Model"] = weakref.ref(model)
            refs[f"{probe.name}: the GraphView"] = weakref.ref(view)
            refs.update({f"{probe.name}: NodeView {nv.index} ({nv.op_type})": weakref.ref(nv)
                         for nv in model.node_views})
            answers.append(provider.get_capability(view))
            del model, view
        gc.collect()
        kept = [what for what, ref in refs.items() if ref() is not None]
    finally:
        gc.unfreeze()
    assert not kept, (f"after get_capability the provider (or its answer) still holds "
                      f"{', '.join(kept)}; the view is valid only during the call: keep "
                      "indices and plain data instead")
    del provider, answers


def test_get_capability_claims_only_offered_nodes(
        onnxplex_kit_target: Target, _probes: list[Probe]) -> None:
    _require_available(onnxplex_kit_target)
    for probe in _probes:
        model = load_model(probe.model)
        n = len(model.nodes)
        for label, offered in (("all nodes", list(range(n))),
                               ("every other node", list(range(0, n, 2)))):
            cap = onnxplex_kit_target.make().get_capability(GraphView(model, offered))
            where = f"{probe.name}, offered {label}"
            claimed = [i for g in cap.groups for i in g.nodes]
            declined = [d.node for d in cap.declined]
            assert all(g.nodes for g in cap.groups), f"{where}: an empty NodeGroup"
            extra = set(claimed) - set(offered)
            assert not extra, f"{where}: claimed nodes never offered: {_ops(model, extra)}"
            twice = {i for i, k in Counter(claimed).items() if k > 1}
            assert not twice, f"{where}: nodes claimed twice: {_ops(model, twice)}"
            assert set(declined) <= set(offered), (
                f"{where}: declined nodes never offered: "
                f"{_ops(model, set(declined) - set(offered))}")
            both = set(declined) & set(claimed)
            assert not both, f"{where}: nodes both claimed and declined: {_ops(model, both)}"
            silent = set(offered) - set(claimed) - set(declined)
            assert not silent, (f"{where}: nodes neither claimed nor declined (give each a "
                                f"Decline with its reason): {_ops(model, silent)}")
            blank = {d.node for d in cap.declined if not str(d.reason).strip()}
            assert not blank, f"{where}: declines without a reason: {_ops(model, blank)}"


# --------------------------------------------------------------------------------------------
# compile and kernels
# --------------------------------------------------------------------------------------------


def test_compiled_kernels_run_as_claimed(onnxplex_kit_target: Target, _probes: list[Probe],
                                         request: pytest.FixtureRequest) -> None:
    _require_available(onnxplex_kit_target)
    target = onnxplex_kit_target
    for probe, claimed in _exercised(target, _probes, request):
        sess = _session(target, probe.model)
        original = {n.name for n in probe.model.graph.node}
        placed = {p.name for p in sess.get_provider_assignment().placements
                  if p.provider == target.canonical} & original
        assert placed == claimed, (f"{probe.name}: claimed {sorted(claimed)} but the session "
                                   f"ran {sorted(placed)} on it")
        so = onnxplex.SessionOptions()
        so.graph_optimization_level = onnxplex.GraphOptimizationLevel.ORT_DISABLE_ALL
        ref = onnxplex.InferenceSession(probe.model, so, providers=["cpu_mlas"])
        feeds = _feeds(probe, ref, seed=0)
        names = [o.name for o in ref.get_outputs()]
        # The executor checks each kernel's outputs against their declaration (count,
        # dtype, rank, static dims) and raises KernelExecutionError naming the provider.
        got, want = sess.run(names, feeds), ref.run(names, feeds)
        for name, g, w in zip(names, got, want):
            _close(g, w, probe.rtol, probe.atol, f"{probe.name}: output {name!r}")


def test_kernels_are_safe_to_run_from_several_threads(onnxplex_kit_target: Target,
                                                      _probes: list[Probe],
                                                      request: pytest.FixtureRequest) -> None:
    _require_available(onnxplex_kit_target)
    for probe, _ in _exercised(onnxplex_kit_target, _probes, request):
        sess = _session(onnxplex_kit_target, probe.model)
        feed_sets = [_feeds(probe, sess, seed=k) for k in range(8)]
        alone = [sess.run(None, f) for f in feed_sets]
        with ThreadPoolExecutor(4) as pool:
            together = list(pool.map(sess.run, [None] * len(feed_sets), feed_sets))
        for k, (a, b) in enumerate(zip(alone, together)):
            for j, (x, y) in enumerate(zip(a, b)):
                _close(y, x, 1e-6, 0.0, f"{probe.name}: run {k}, output {j} from a thread")


def test_profiling_leaves_results_unchanged(onnxplex_kit_target: Target, _probes: list[Probe],
                                           tmp_path: Any, request: pytest.FixtureRequest) -> None:
    """With ``SessionOptions.enable_profiling`` the executor calls a kernel's optional
    ``profiled(emit, *inputs)`` instead of the kernel: it must return the same outputs, and
    its sub-events must name the kernel event they belong to."""
    _require_available(onnxplex_kit_target)
    for probe, _ in _exercised(onnxplex_kit_target, _probes, request):
        plain = _session(onnxplex_kit_target, probe.model)
        so = onnxplex.SessionOptions()
        so.graph_optimization_level = onnxplex.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.enable_profiling = True
        so.profile_file_prefix = str(tmp_path / probe.name)
        profiled = onnxplex.InferenceSession(probe.model, so,
                                             providers=onnxplex_kit_target.session_providers())
        feeds = _feeds(probe, plain, seed=1)
        for j, (x, y) in enumerate(zip(plain.run(None, feeds), profiled.run(None, feeds))):
            _close(y, x, 1e-6, 0.0, f"{probe.name}: output {j} with profiling on")
        with open(profiled.end_profiling(), encoding="utf-8") as f:
            events = json.load(f)
        kernels = {e["name"].removesuffix("_kernel_time") for e in events if e["cat"] == "Node"}
        for e in events:
            parent = e.get("args", {}).get("parent")
            assert parent is None or parent in kernels, (
                f"{probe.name}: profiling sub-event {e['name']!r} names kernel {parent!r}, "
                "which has no event")


# --------------------------------------------------------------------------------------------
# ONNX node conformance, restricted to the cases the provider claims
# --------------------------------------------------------------------------------------------


def test_node_conformance(onnxplex_kit_target: Target, onnxplex_kit_case: str,
                          request: pytest.FixtureRequest) -> None:
    verdicts = request.config.stash[KIT_KEY].verdicts(onnxplex_kit_target)
    error = verdicts.errors.get(onnxplex_kit_case)
    if error is not None:
        pytest.fail(f"get_capability raised on this case's graph: {error}")
    case = all_cases()[onnxplex_kit_case]
    sess = _session(onnxplex_kit_target, case.model)
    ours = [p for p in sess.get_provider_assignment().partitions
            if p.provider == onnxplex_kit_target.canonical]
    assert ours, f"{onnxplex_kit_target.id} claimed nodes of this case but runs none of them"
    with np.errstate(all="ignore"):
        run_case(case, session=sess)
