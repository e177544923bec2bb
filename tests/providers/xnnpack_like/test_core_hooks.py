"""The two small core hooks the xnnpack_like provider reports through, on a toy provider:

* ``NodeGroup.node_notes``: per-node detail in the placement report (``report``, ``explain``,
  ``to_dict``), kept per piece when the partitioner splits a claim;
* ``kernel.profiled(emit, *inputs)``: sub-events of a fused kernel in the session profile,
  with the provider's args merged into each event (and not counted twice by
  ``onnxplex profile``).
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
from graphs import chain

import onnxplex
from onnxplex import Capability, ExecutionProvider, NodeGroup
from onnxplex.framework.plugins import unregister_provider
from onnxplex.tools.perf import summarize_profile


class Notes(ExecutionProvider):
    """Fuses every Relu/Tanh into one group, one note per node; its kernel reports sub-events."""

    name = "notes_probe"

    def get_capability(self, graph):
        mine = [n.index for n in graph.nodes if n.op_type in ("Relu", "Tanh")]
        notes = {i: f"toy kernel for node {i}" for i in mine}
        return Capability((NodeGroup(tuple(mine), "toy", "group note", notes),))

    def compile(self, subgraph):
        ops = [(n.index, n.op_type) for n in subgraph.nodes]

        def run(x, emit=None):
            for index, op in ops:
                t0 = time.perf_counter_ns()
                y = np.maximum(x, np.float32(0)) if op == "Relu" else np.tanh(x)
                if emit is not None:
                    emit(f"op{index}", op, t0, time.perf_counter_ns(), node_indices=(index,),
                         inputs=(x,), outputs=(y,), args={"kernel": f"toy:{op.lower()}"})
                x = y
            return x

        class Kernel:
            def __call__(self, x):
                return run(x)

            def profiled(self, emit, x):
                return run(x, emit)

        return Kernel()


@pytest.fixture
def notes_probe():
    onnxplex.register_provider(Notes)
    yield
    unregister_provider("notes_probe")


def test_node_notes_in_report_explain_and_dict(notes_probe):
    model = chain(["Sigmoid", "Relu", "Tanh"], shape=(2, 3))
    sess = onnxplex.InferenceSession(model, providers=["notes_probe", "cpu_mlas"])
    plan = sess.get_provider_assignment()
    report = plan.report()
    assert "toy kernel for node 1" in report and "toy kernel for node 2" in report
    assert "toy kernel for node 0" not in report
    assert "notes_probe: toy kernel for node 2" in plan.explain(2)
    nodes = plan.to_dict()["nodes"]
    assert [n["note"] for n in nodes] == ["", "toy kernel for node 1", "toy kernel for node 2"]


def test_node_group_normalises_notes():
    g = NodeGroup((3, 1), node_notes={3: "c", 1: "a", 2: ""})
    assert g.node_notes == ((1, "a"), (3, "c"))
    assert hash(g) == hash(NodeGroup((3, 1), node_notes=((1, "a"), (3, "c"))))


def test_profiled_kernel_emits_sub_events(notes_probe, tmp_path):
    model = chain(["Sigmoid", "Relu", "Tanh"], shape=(2, 3))
    so = onnxplex.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = onnxplex.InferenceSession(model, so, providers=["notes_probe", "cpu_mlas"])
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(y, np.tanh(np.maximum(1 / (1 + np.exp(-x)), 0)), rtol=1e-6)
    path = sess.end_profiling()
    events = json.load(open(path))
    summary = summarize_profile(events)   # what `onnxplex profile` prints
    os.unlink(path)
    # sub-events are inside their partition's event: listed per kernel, not counted twice
    assert summary["node_events"] == 2    # Sigmoid on cpu_mlas, the toy partition
    assert [r["name"] for r in summary["fused_kernels"]] in (
        ["notes_probe: toy:relu", "notes_probe: toy:tanh"],
        ["notes_probe: toy:tanh", "notes_probe: toy:relu"])
    subs = [e for e in events if e["name"].startswith("toy/")]
    assert [e["args"]["kernel"] for e in subs] == ["toy:relu", "toy:tanh"]
    assert [e["args"]["node_index"] for e in subs] == ["1", "2"]
    parent = next(e for e in events if e["name"] == "toy_kernel_time")
    for e in subs:
        assert e["args"]["parent"] == "toy" and e["args"]["provider"] == "notes_probe"
        assert parent["ts"] <= e["ts"] and e["ts"] + e["dur"] <= parent["ts"] + parent["dur"] + 1
