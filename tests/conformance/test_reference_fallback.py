"""The reference fallback is checked, not trusted (issue 24, item 3).

cpu_mlas runs an op it has no native kernel for through onnx.reference. Here:

* every ai.onnx.ml case of ml_cases.py runs on the fallback alone (a cpu_mlas without native
  kernels, "reference_only") and is compared with onnxruntime: labels exactly, numbers at
  rtol 1e-4, atol 1e-5 (both failing counts as agreeing). A case matched by an entry of the
  fallback's deny-list (``_reference.KNOWN_WRONG``) must instead be declined with the entry's
  reason, and every entry must still be wrong on at least one of its cases (run with the
  deny-list ignored): an entry onnx.reference has since fixed fails here, to be removed;
* every op cpu_mlas would still place on the fallback (each version of every ai.onnx and
  ai.onnx.ml schema that no native kernel covers and onnx.reference implements) must be
  compared somewhere: by a case here, by onnx's node test data, or, for the old versions
  onnxruntime has no kernel for, with onnx's node test data or numpy (no node case of the
  installed onnx lands on the fallback: test_node_cases.py's test_native_count runs them all
  with the fallback off);
* mismatches that stay are listed in EXPECTED_MISMATCHES with their reason, strictly (a listed
  case that agrees fails, so the list stays true).
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper as oh

import onnxplex
from conformance.cases import all_cases, to_value
from conformance.ml_cases import CASES
from onnxplex import Capability, NodeGroup, OpTable, Option
from onnxplex.framework.plugins import provider_entry, unregister_provider
from onnxplex.graph.model import load_model

CPU = provider_entry("cpu_mlas").load()
REF = importlib.import_module(CPU.__module__.rsplit(".", 1)[0] + "._reference")
DOMAINS = ("", "ai.onnx.ml")
RTOL, ATOL = 1e-4, 1e-5

# Cases where onnx.reference (not deny-listed) and onnxruntime disagree, with why. Strict.
EXPECTED_MISMATCHES: dict[str, str] = {
    name: "PROBIT of scores outside (0, 1) is NaN in both; the label is then the argmax over "
          "NaNs, which numpy (onnx.reference) and onnxruntime's comparisons pick differently "
          "(meaningless input: converters write PROBIT only for probabilities)"
    for name in ("tree_classifier_multi_probit", "linear_classifier_multi_probit")
}


class ReferenceOnly(CPU):
    """cpu_mlas without native kernels: every node it claims runs on the reference fallback,
    through cpu_mlas's own claim (deny-list included) and kernel. ``trust=1`` claims every
    node onnx.reference implements, deny-listed or not (to show an entry is wrong)."""

    name = "reference_only"
    op_table = OpTable()
    option_specs = {**CPU.option_specs, "trust": Option(False, bool)}

    def get_capability(self, graph):
        if not self.options["trust"]:
            return super().get_capability(graph)
        return Capability(tuple(NodeGroup((n.index,), note=REF.NOTE) for n in graph.nodes
                                if REF._supported(n.domain, n.op_type, n.opset) is None))

    def compile(self, subgraph):
        node = subgraph.nodes[0]
        opsets = {node.domain: node.opset}
        opsets.setdefault("", onnx.defs.onnx_opset_version())
        return REF.make_reference_kernel(node, opsets)


@pytest.fixture(scope="module", autouse=True)
def reference_only():
    onnxplex.register_provider(ReferenceOnly)
    yield
    unregister_provider("reference_only")


# --------------------------------------------------------------------------------------------
# Running and comparing
# --------------------------------------------------------------------------------------------


def _ort(model: onnx.ModelProto, feeds: dict) -> tuple[str, Any]:
    """("ok", outputs) or ("error", message); raises Skipped when onnxruntime cannot load the
    model (nothing to compare with)."""
    try:
        sess = onnxruntime.InferenceSession(model.SerializeToString(),
                                            providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime's own error kinds
        pytest.skip(f"onnxruntime cannot run this model: {str(e)[:200]}")
    try:
        return "ok", sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001
        return "error", str(e)


def _alone() -> onnxplex.SessionOptions:
    """Options that keep cpu_mlas from taking what the provider asked for declines."""
    so = onnxplex.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    return so


def _plex(model: onnx.ModelProto, feeds: dict, providers: list,
          alone: bool = True) -> tuple[str, Any]:
    """What onnxplex gives on ``providers`` (without cpu_mlas's fallback when ``alone``):
    ("ok", outputs) or ("error", message)."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            sess = onnxplex.InferenceSession(model.SerializeToString(),
                                             _alone() if alone else None, providers=providers)
            return "ok", sess.run(None, feeds)
    except onnxplex.PartitionError:
        raise
    except onnxplex.OnnxplexError as e:
        return "error", f"{type(e).__name__}: {e}"


def _difference(want: tuple[str, Any], got: tuple[str, Any]) -> str | None:
    """None when both failed or both gave the same outputs, else what differs."""
    if want[0] != got[0]:
        return f"onnxruntime: {want[0]} {str(want[1])[:150]}; onnxplex: {got[0]} " \
               f"{str(got[1])[:150]}"
    if want[0] == "error":
        return None
    for k, (w, g) in enumerate(zip(want[1], got[1])):
        why = _values_differ(w, g)
        if why:
            return f"output {k}: {why}"
    return None


def _values_differ(w: Any, g: Any) -> str | None:
    if isinstance(w, (list, dict)) or isinstance(g, (list, dict)):
        return None if w == g else f"{w!r:.100} != {g!r:.100}"
    w, g = np.asarray(w), np.asarray(g)
    if w.shape != g.shape:
        return f"shape {g.shape}, onnxruntime {w.shape}"
    if w.dtype == object or g.dtype == object:
        same = [str(v) for v in w.ravel()] == [str(v) for v in g.ravel()]
        return None if same else f"{g.ravel()[:6]}, onnxruntime {w.ravel()[:6]}"
    if w.dtype != g.dtype:
        return f"dtype {g.dtype}, onnxruntime {w.dtype}"
    if w.dtype.kind in "iub":
        return None if np.array_equal(w, g) else f"{g.ravel()[:6]}, onnxruntime {w.ravel()[:6]}"
    if np.allclose(g.astype(np.float64), w.astype(np.float64), rtol=RTOL, atol=ATOL,
                   equal_nan=True):
        return None
    err = np.nanmax(np.abs(g.astype(np.float64) - w.astype(np.float64)))
    return f"max difference {err:.3g}: {g.ravel()[:4]}, onnxruntime {w.ravel()[:4]}"


def _entry(model: onnx.ModelProto):
    return REF.known_wrong(load_model(model).node_views[0])


# --------------------------------------------------------------------------------------------
# ai.onnx.ml cases
# --------------------------------------------------------------------------------------------


def _param(name: str):
    if name in EXPECTED_MISMATCHES:
        return pytest.param(name, marks=pytest.mark.xfail(
            reason=EXPECTED_MISMATCHES[name], raises=AssertionError, strict=True))
    return name


@pytest.mark.parametrize("name", [_param(n) for n in CASES])
def test_ml_case_on_the_fallback(name):
    """Placed on the fallback: as onnxruntime; deny-listed: declined with the entry's reason."""
    model, feeds = CASES[name][1]()
    wrong = _entry(model)
    if wrong is not None:
        with pytest.raises(onnxplex.PartitionError) as info:
            _plex(model, feeds, ["reference_only"])
        assert "known to be wrong" in str(info.value) and wrong.reason in str(info.value)
        return
    want = _ort(model, feeds)
    diff = _difference(want, _plex(model, feeds, ["reference_only"]))
    assert diff is None, diff


def _entry_cases(entry) -> dict[str, Any]:
    """name -> builder of (model, feeds, independent expected outputs or None) of the cases
    ``entry`` declines (and no entry before it)."""
    cases = {n: (lambda b=b: (*b(), None)) for n, (op, b) in CASES.items()
             if op == entry.op_type}
    cases.update({f"{k[1]}-{k[2]}": b for k, b in OLD_VERSIONS.items() if k[1] == entry.op_type})
    return {n: b for n, b in cases.items() if _entry(b()[0]) is entry}


@pytest.mark.parametrize("entry", REF.KNOWN_WRONG, ids=lambda e: f"{e.op_type}-{e.case}")
def test_each_known_wrong_entry_is_still_wrong(entry):
    """Run on the reference despite the deny-list, at least one case the entry declines
    differs from onnxruntime (or, where onnxruntime has no kernel, from values computed
    otherwise), or fails where onnxruntime runs."""
    mine = _entry_cases(entry)
    assert mine, f"no case here shows {entry.op_type}: {entry.case}"
    differences = {}
    for name, build in mine.items():
        model, feeds, expected = build()
        try:
            want = _ort(model, feeds)
        except pytest.skip.Exception:
            if expected is None:
                continue
            want = ("ok", expected)
        diff = _difference(want, _plex(model, feeds, [("reference_only", {"trust": True})]))
        if diff is not None:
            differences[name] = diff
    assert differences, f"onnx.reference now agrees on {sorted(mine)}: remove the entry"


def test_deny_listed_node_is_declined_in_the_placement_report():
    """With cpu_mlas's other kernels, a deny-listed node stays unplaced and the partition
    error (the placement report's decline lines) gives the reason."""
    model, feeds = CASES["svm_classifier_multiclass_probabilities"][1]()
    with pytest.raises(onnxplex.PartitionError, match=r"SVMClassifier.*\n.*reference_only: no "
                       r"kernel for ai.onnx.ml::SVMClassifier; onnx.reference's SVMClassifier-1 "
                       r"is known to be wrong here, so it is not run: multiclass probabilities"):
        onnxplex.InferenceSession(model.SerializeToString(), _alone(),
                                  providers=["reference_only"])
    model, feeds = CASES["svm_classifier_binary_probabilities"][1]()
    sess = onnxplex.InferenceSession(model.SerializeToString(), _alone(),
                                     providers=["reference_only"])
    assert "[onnx reference fallback]" in sess.get_provider_assignment().report()


# --------------------------------------------------------------------------------------------
# Every op still on the fallback is compared somewhere
# --------------------------------------------------------------------------------------------


def fallback_ops() -> set[tuple[str, str, int]]:
    """(domain, op, since version) of every schema version of ai.onnx and ai.onnx.ml that no
    native cpu_mlas kernel covers and onnx.reference implements."""
    out = set()
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain not in DOMAINS or s.deprecated:
            continue
        configs = CPU.op_table._configs.get((s.domain, s.name), ())
        if any(c.covers(s.since_version) for c in configs):
            continue
        if REF._supported(s.domain, s.name, s.since_version) is None:
            out.add((s.domain, s.name, s.since_version))
    return out


def _since(domain: str, op: str, opset: int) -> int | None:
    try:
        return onnx.defs.get_schema(op, opset, domain).since_version
    except onnx.defs.SchemaError:
        return None


def _node_case_ops() -> dict[tuple[str, str, int], list[str]]:
    """(domain, op, since) -> the onnx node cases with such a node."""
    out: dict[tuple[str, str, int], list[str]] = {}
    for name, case in all_cases().items():
        opsets = {o.domain or "": o.version for o in case.model.opset_import}
        for node in case.model.graph.node:
            domain = node.domain if node.domain != "ai.onnx" else ""
            since = _since(domain, node.op_type, opsets.get(domain, 1))
            if since is not None:
                out.setdefault((domain, node.op_type, since), []).append(name)
    return out


def _restamped(name: str, version: int) -> tuple[onnx.ModelProto, dict, list]:
    """Node case ``name`` at opset ``version`` (its expected outputs are those of the newer
    version, the same for these ops) and its feeds and expected outputs."""
    case = all_cases()[name]
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    for o in model.opset_import:
        o.version = version
    model.ir_version = 3
    inputs, expected = case.data_sets[0]
    names = [i.name for i in model.graph.input]
    return model, dict(zip(names, map(to_value, inputs))), [to_value(e) for e in expected]


def _lppool_1():
    node = oh.make_node("LpPool", ["x"], ["y"], kernel_shape=[2], p=2.0)
    x = np.array([[[3.0, 4.0, -12.0, 5.0]]], np.float32)
    return (_one_node(node, [1, 1, 4], [1, 1, 3], 1), {"x": x},
            [np.sqrt(x[..., :-1] ** 2 + x[..., 1:] ** 2)])


def _upsample_1():
    node = oh.make_node("Upsample", ["x"], ["y"], height_scale=2.0, width_scale=3.0,
                        mode="nearest")
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    return (_one_node(node, [1, 1, 2, 2], [1, 1, 4, 6], 1), {"x": x},
            [x.repeat(2, axis=2).repeat(3, axis=3)])


def _one_node(node, in_shape, out_shape, opset):
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                                  in_shape)],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, out_shape)])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=3)


# Old versions onnxruntime has no kernel for, checked against onnx's node data of the newer
# version (same semantics with the default attributes) or numpy.
OLD_VERSIONS = {
    ("", "GRU", 1): lambda: _restamped("test_gru_defaults", 1),
    ("", "GRU", 3): lambda: _restamped("test_gru_seq_length", 3),
    ("", "LSTM", 1): lambda: _restamped("test_lstm_with_peepholes", 1),
    ("", "LpPool", 1): _lppool_1,
    ("", "Upsample", 1): _upsample_1,
}


@pytest.mark.parametrize("key", list(OLD_VERSIONS), ids=lambda k: f"{k[1]}-{k[2]}")
def test_old_versions_onnxruntime_cannot_run(key):
    model, feeds, expected = OLD_VERSIONS[key]()
    with pytest.raises(Exception, match="NOT_IMPLEMENTED|Could not find an implementation"):
        onnxruntime.InferenceSession(model.SerializeToString(),
                                     providers=["CPUExecutionProvider"])
    wrong = _entry(model)
    if wrong is not None:
        with pytest.raises(onnxplex.PartitionError, match="known to be wrong"):
            _plex(model, feeds, ["reference_only"])
        return
    status, got = _plex(model, feeds, ["reference_only"])
    assert status == "ok", got
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)


def test_every_op_still_on_the_fallback_is_compared():
    ops = fallback_ops()
    ml_ops = {(REF.ML, op) for op, _ in CASES.values()}
    node_cases = _node_case_ops()
    unchecked = sorted(k for k in ops if (k[0], k[1]) not in ml_ops
                       and k not in node_cases and k not in OLD_VERSIONS)
    assert unchecked == [], f"ops on the fallback compared nowhere: {unchecked}"
    assert set(OLD_VERSIONS) <= ops, "an old version got a native kernel: drop it here"
    # (and the ML ops: every ai.onnx.ml op onnx.reference implements has cases here)
    implemented = {s.name for s in onnx.defs.get_all_schemas_with_history()
                   if s.domain == REF.ML and REF._supported(REF.ML, s.name, s.since_version)
                   is None}
    native = {op for op in implemented if CPU.op_table._configs.get((REF.ML, op))}
    assert implemented - native <= {op for _, op in ml_ops}
