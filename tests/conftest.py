"""Shared fixtures: a do-nothing "null" provider and small model builders.

The null provider claims what it is told and returns zeros of the declared shapes, so
partitioner/executor/session tests stay fast and independent of numerics.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import onnxplex
from onnxplex import Capability, Decline, ExecutionProvider, NodeGroup, Option
from onnxplex.framework.plugins import unregister_provider

sys.path.insert(0, os.path.dirname(__file__))


class NullProvider(ExecutionProvider):
    """Claims the op types listed in option ``claim``; ``fuse`` claims them as one group."""

    name = "null"
    option_specs = {
        "claim": Option("", str, "comma-separated op types to claim"),
        "fuse": Option(False, bool, "claim all matching nodes as one group"),
    }
    compiled: list[tuple[int, ...]] = []

    def get_capability(self, graph):
        ops = {s for s in self.options["claim"].split(",") if s}
        mine = [n.index for n in graph.nodes if n.op_type in ops]
        declined = tuple(Decline(n.index, f"{n.op_type} is not in claim={sorted(ops)}")
                         for n in graph.nodes if n.op_type not in ops)
        if self.options["fuse"] and mine:
            return Capability((NodeGroup(tuple(mine), "null_fused"),), declined)
        return Capability(tuple(NodeGroup((i,)) for i in mine), declined)

    def compile(self, subgraph):
        type(self).compiled.append(tuple(n.index for n in subgraph.nodes))
        outs = [(o.static_shape(), o.dtype) for o in subgraph.outputs]

        def kernel(*inputs):
            # symbolic dims: fall back to the first input's shape (elementwise test graphs)
            return tuple(np.zeros(s if s is not None else inputs[0].shape, d) for s, d in outs)

        return kernel


@pytest.fixture
def null_provider():
    NullProvider.compiled = []
    onnxplex.register_provider(NullProvider)
    yield NullProvider
    unregister_provider("null")


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run the tests marked slow (full-size models)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: opt-in with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=["native loop", "python loop"])
def both_loops(request, monkeypatch):
    """Run the test with the executor's C loop (``onnxplex._runloop``) and with its Python
    loop: both must behave alike. The C loop must be built: in a source tree without a build
    its case fails rather than passing on the Python loop."""
    from onnxplex.framework import executor as _executor

    if request.param == "python loop":
        monkeypatch.setattr(_executor, "_runloop", None)
    else:
        assert _executor._runloop is not None, "onnxplex._runloop is not built"
    return request.param
