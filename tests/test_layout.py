"""Layout conversion at partition boundaries (NCHW <-> NHWC), once per value."""

from __future__ import annotations

import numpy as np
import pytest
from graphs import chain

import onnxplex
from onnxplex import Capability, ExecutionProvider, NodeGroup
from onnxplex.framework.plugins import unregister_provider


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


class NhwcCnn(ExecutionProvider):
    """A toy NHWC delegate: claims 1x1 Conv, Relu, MaxPool 2x2 (and Sigmoid if asked), fused
    into convex groups or one node per partition; computes everything in NHWC."""

    name = "nhwc_cnn"
    preferred_layout = "NHWC"
    option_specs = {"ops": onnxplex.Option("Conv,Relu,MaxPool", str),
                    "fuse": onnxplex.Option(True, bool)}

    def get_capability(self, graph):
        ops = set(self.options["ops"].split(","))
        mine = [n.index for n in graph.nodes if n.op_type in ops]
        groups = onnxplex.convex_groups(graph, mine) if self.options["fuse"] else \
            [(i,) for i in mine]
        return Capability(tuple(NodeGroup(g) for g in groups))

    def compile(self, subgraph):
        assert subgraph.layout == "NHWC"
        steps = []
        for n in subgraph.nodes:
            ins = [v.name for v in n.inputs]
            w = n.inputs[1].const[:, :, 0, 0] if n.op_type == "Conv" else None
            b = n.inputs[2].const if n.op_type == "Conv" else None
            steps.append((n.op_type, ins[0], n.outputs[0].name, w, b))
        in_names = [v.name for v in subgraph.inputs]
        out_names = [v.name for v in subgraph.outputs]

        def kernel(*args):
            env = dict(zip(in_names, args))
            for op, src, dst, w, b in steps:
                x = env[src]
                assert x.ndim == 4 and x.shape[-1] in (3, 8, 4), x.shape   # channels last
                if op == "Conv":
                    env[dst] = x @ w.T + b
                elif op == "Relu":
                    env[dst] = np.maximum(x, np.float32(0))
                elif op == "Sigmoid":
                    env[dst] = 1 / (1 + np.exp(-x))
                else:  # MaxPool 2x2 stride 2
                    n_, h, w_, c = x.shape
                    env[dst] = x.reshape(n_, h // 2, 2, w_ // 2, 2, c).max(axis=(2, 4))
            return tuple(env[o] for o in out_names)

        return kernel


def _cnn_model():
    rng = np.random.default_rng(0)
    from onnx import TensorProto, helper, numpy_helper
    w1 = rng.standard_normal((8, 3, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((4, 8, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (w1, "w1"), (np.zeros(8, np.float32) + 0.1, "b1"), (w2, "w2"),
        (np.zeros(4, np.float32) - 0.1, "b2"))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Sigmoid", ["p1"], ["s"]),
        helper.make_node("Conv", ["s", "w2", "b2"], ["c2"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["c2"], ["y"]),
    ]
    g = helper.make_graph(nodes, "cnn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("options, partitions, conversions", [
    ({}, 2, 4),                                        # Sigmoid on cpu_mlas splits it in two
    ({"ops": "Conv,Relu,MaxPool,Sigmoid"}, 1, 2),      # one NHWC partition
    ({"ops": "Conv,Relu,MaxPool,Sigmoid", "fuse": False}, 6, 2),  # adjacent ones: cancelled
])
def test_nhwc_delegate_gets_channels_last_with_transposes_only_at_boundaries(
        options, partitions, conversions):
    onnxplex.register_provider(NhwcCnn)
    try:
        model = _cnn_model()
        x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
        want = onnxplex.InferenceSession(model, providers=["cpu_mlas"]).run(None, {"x": x})[0]
        sess = onnxplex.InferenceSession(model, providers=[("nhwc_cnn", options), "cpu_mlas"])
        parts = [p for p in sess.get_provider_assignment().partitions
                 if p.provider == "nhwc_cnn"]
        assert len(parts) == partitions
        steps = [s for s in sess._exec.steps if s.op_type == "LayoutConversion"]
        assert len(steps) == conversions
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-6)
    finally:
        unregister_provider("nhwc_cnn")
