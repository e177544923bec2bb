"""Layout conversion at partition boundaries (NCHW <-> NHWC), once per value."""

from __future__ import annotations

import numpy as np
from graphs import chain

import onnxplex
from onnxplex import Capability, ExecutionProvider, NodeGroup
from onnxplex._plugins import unregister_provider


class NhwcProbe(ExecutionProvider):
    """Claims Relu nodes; prefers NHWC; records the shapes its kernels receive."""

    name = "nhwc_probe"
    preferred_layout = "NHWC"
    seen: list[tuple[int, ...]] = []

    def get_capability(self, graph):
        return Capability(tuple(NodeGroup((n.index,)) for n in graph.nodes
                                if n.op_type == "Relu"))

    def compile(self, subgraph):
        assert subgraph.layout == "NHWC"

        def kernel(x):
            type(self).seen.append(x.shape)
            return np.maximum(x, np.float32(0))

        return kernel


def test_nhwc_partitions_get_nhwc_and_convert_back_once():
    NhwcProbe.seen = []
    onnxplex.register_provider(NhwcProbe)
    try:
        model = chain(["Sigmoid", "Relu", "Relu", "Tanh"], shape=(1, 3, 4, 5))
        sess = onnxplex.InferenceSession(model, providers=["nhwc_probe", "cpu_mlas"])
        x = np.random.default_rng(0).standard_normal((1, 3, 4, 5)).astype(np.float32)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(y, np.tanh(np.maximum(1 / (1 + np.exp(-x)), 0)), rtol=1e-6)
        assert NhwcProbe.seen == [(1, 4, 5, 3), (1, 4, 5, 3)]
        conversions = [s.name for s in sess._exec.steps if s.op_type == "LayoutConversion"]
        # one into NHWC before the first Relu, one back before Tanh; none between the Relus
        assert conversions == ["t0->NHWC", "t2->NCHW"]
    finally:
        unregister_provider("nhwc_probe")
