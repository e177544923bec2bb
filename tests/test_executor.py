"""The execution plan: intermediates released after their last reader, cancellation."""

from __future__ import annotations

import numpy as np
import pytest
from graphs import chain

import onnxplex
from onnxplex import _executor


def test_intermediates_are_released_after_last_use():
    sess = onnxplex.InferenceSession(chain(["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp"]))
    plan = sess._exec
    live = []
    slots = _executor.feed_slots(plan, {"x": np.ones((2, 3), np.float32)})

    def record(step, t0, t1, ins, outs):
        live.append(sum(v is not None for v in slots))

    _executor.run_sequential(plan, slots, record=record)
    # the input and at most two intermediates are alive at any time, never the whole chain
    assert max(live) <= 3
    assert [i for i, v in enumerate(slots) if v is not None] == [plan.output_slots["y"]]


def test_run_options_terminate_cancels():
    sess = onnxplex.InferenceSession(chain(["Relu", "Sigmoid"]))
    ro = onnxplex.RunOptions()
    ro.terminate = True
    with pytest.raises(onnxplex.OnnxplexError, match="cancelled"):
        sess.run(None, {"x": np.ones((2, 3), np.float32)}, ro)
    ro.terminate = False
    assert sess.run(None, {"x": np.ones((2, 3), np.float32)}, ro)[0].shape == (2, 3)


class _Faulty(onnxplex.ExecutionProvider):
    """Claims Relu; its kernel misbehaves in the way named by option ``mode``."""

    name = "faulty"
    option_specs = {"mode": onnxplex.Option("raise", str)}

    def get_capability(self, graph):
        return onnxplex.Capability(tuple(onnxplex.NodeGroup((n.index,)) for n in graph.nodes
                                         if n.op_type == "Relu"))

    def compile(self, subgraph):
        mode = self.options["mode"]

        def kernel(x):
            if mode == "raise" and x.sum() < 0:
                raise ValueError("negative input")
            if mode == "dtype":
                return x.astype(np.float64)
            if mode == "shape":
                return x[:1]
            if mode == "narrow" and x.shape[0] == 4:   # a wrong width, for batches of 4 only
                return np.maximum(x, 0)[:, :1]
            if mode == "count":
                return ()
            return np.maximum(x, 0)

        return kernel


@pytest.fixture
def faulty():
    onnxplex.register_provider(_Faulty)
    yield
    onnxplex._plugins.unregister_provider("faulty")


def test_kernel_error_names_node_op_provider_and_session_survives(faulty):
    sess = onnxplex.InferenceSession(chain(["Relu", "Sigmoid"]), providers=["faulty"])
    with pytest.raises(onnxplex.KernelExecutionError,
                       match=r"node 'A' \(Relu\) on provider faulty failed: ValueError: negative"):
        sess.run(None, {"x": -np.ones((2, 3), np.float32)})
    assert sess.run(None, {"x": np.ones((2, 3), np.float32)})[0].shape == (2, 3)


def test_outputs_with_symbolic_dims_are_checked_on_every_run(faulty):
    """A shape that passed is remembered per output (one comparison on later runs); another
    batch size is checked again, and a wrong fixed dim is caught after good runs."""
    sess = onnxplex.InferenceSession(chain(["Relu", "Sigmoid"], shape=("batch", 3)),
                                     providers=[("faulty", {"mode": "narrow"}), "cpu_mlas"])
    for n in (2, 2, 5):
        assert sess.run(None, {"x": np.ones((n, 3), np.float32)})[0].shape == (n, 3)
    with pytest.raises(onnxplex.KernelExecutionError,
                       match=r"node 'A' \(Relu\) on provider faulty: output 0 has shape "
                             r"\[4, 1\], declared \['batch', 3\]"):
        sess.run(None, {"x": np.ones((4, 3), np.float32)})
    assert sess.run(None, {"x": np.ones((2, 3), np.float32)})[0].shape == (2, 3)


@pytest.mark.parametrize("mode, message", [
    ("dtype", "has dtype float64, declared float"),
    ("shape", r"has shape \[1, 3\], declared \[2, 3\]"),
    ("count", r"returned 0 output\(s\), expected 1"),
])
def test_wrong_kernel_outputs_are_caught(faulty, mode, message):
    sess = onnxplex.InferenceSession(chain(["Relu", "Sigmoid"]),
                                     providers=[("faulty", {"mode": mode})])
    with pytest.raises(onnxplex.KernelExecutionError, match=message) as e:
        sess.run(None, {"x": np.ones((2, 3), np.float32)})
    assert e.value.provider == "faulty" and e.value.node == "A"
