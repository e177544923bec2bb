"""Cancellation: ``RunOptions.terminate = True`` from another thread stops a long run promptly
with a clear error (between nodes, and between iterations of control-flow bodies), and the
session runs normally afterwards. The latencies measured (from setting ``terminate`` to the
error) are printed with ``-s`` (``python -m pytest tests/test_cancellation.py -s``)."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex import RunCancelledError

FLOAT = TensorProto.FLOAT
OPSET = [helper.make_opsetid("", 17)]
PROMPT_S = 0.5   # allowed latency from terminate to the error (measured: printed with -s)
#: test id -> latency in seconds from setting terminate to the error
LATENCIES: dict[str, float] = {}


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print("\ncancellation latency (terminate set -> RunCancelledError): " + ", ".join(
        f"{name} {s * 1e3:.2f} ms" for name, s in LATENCIES.items()))


def loop_model(nested: bool = False) -> onnx.ModelProto:
    """y = x + trips (a Loop adding 1 per iteration); ``nested``: the body runs an If whose
    branch runs an inner 1-iteration Loop, so cancellation must reach three bodies deep."""
    one = numpy_helper.from_array(np.ones(4, np.float32), "one")
    step = [helper.make_node("Add", ["acc_in", "one"], ["acc_out"])]
    if nested:
        inner_body = helper.make_graph(
            [helper.make_node("Identity", ["c_in"], ["c_out"]),
             helper.make_node("Add", ["v_in", "one"], ["v_out"])], "inner",
            [helper.make_tensor_value_info("j", TensorProto.INT64, []),
             helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
             helper.make_tensor_value_info("v_in", FLOAT, [4])],
            [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info("v_out", FLOAT, [4])])
        then_g = helper.make_graph(
            [helper.make_node("Loop", ["once", "", "acc_in"], ["t"], body=inner_body)], "then",
            [], [helper.make_tensor_value_info("t", FLOAT, [4])])
        else_g = helper.make_graph([helper.make_node("Identity", ["acc_in"], ["e"])], "else",
                                   [], [helper.make_tensor_value_info("e", FLOAT, [4])])
        step = [helper.make_node("If", ["cond_in"], ["acc_out"], then_branch=then_g,
                                 else_branch=else_g)]
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), *step], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", FLOAT, [4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", FLOAT, [4])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body)], "loop",
        [helper.make_tensor_value_info("trips", TensorProto.INT64, []),
         helper.make_tensor_value_info("x", FLOAT, [4])],
        [helper.make_tensor_value_info("y", FLOAT, [4])],
        [one, numpy_helper.from_array(np.array(1, np.int64), "once")])
    return helper.make_model(g, opset_imports=OPSET, ir_version=9)


def chain_model(n: int = 400, size: int = 192) -> onnx.ModelProto:
    """n MatMul + Tanh pairs on a [size, size] tensor (long enough to cancel mid-way)."""
    w = numpy_helper.from_array(np.eye(size, dtype=np.float32), "w")
    nodes, prev = [], "x"
    for k in range(n):
        nodes.append(helper.make_node("MatMul", [prev, "w"], [f"m{k}"], name=f"mm{k}"))
        prev = "y" if k == n - 1 else f"t{k}"
        nodes.append(helper.make_node("Tanh", [f"m{k}"], [prev], name=f"tanh{k}"))
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", FLOAT,
                                                                         [size, size])],
                          [helper.make_tensor_value_info("y", FLOAT, [size, size])], [w])
    return helper.make_model(g, opset_imports=OPSET, ir_version=9)


def cancel_after(sess, feeds, delay: float) -> tuple[BaseException | None, float, bool]:
    """Run in a thread, set terminate after ``delay`` s; -> (error, latency s, finished)."""
    ro = onnxplex.RunOptions()
    result: dict = {}

    def target():
        try:
            sess.run(None, feeds, ro)
        except BaseException as e:  # noqa: BLE001 - inspected by the test
            result["error"] = e
        result["end"] = time.perf_counter()

    th = threading.Thread(target=target, daemon=True)   # a hung run cannot hang pytest
    th.start()
    time.sleep(delay)
    t0 = time.perf_counter()
    ro.terminate = True
    th.join(timeout=60)
    assert not th.is_alive(), "the run did not stop"
    return result.get("error"), result["end"] - t0, "end" in result


@pytest.mark.parametrize("nested", [False, True], ids=["loop", "loop_if_loop"])
def test_terminate_stops_a_long_loop_promptly(nested):
    sess = onnxplex.InferenceSession(loop_model(nested))
    feeds = {"trips": np.array(10**9, np.int64), "x": np.zeros(4, np.float32)}
    err, latency, _ = cancel_after(sess, feeds, 0.3)
    LATENCIES["loop_if_loop" if nested else "loop"] = latency
    assert isinstance(err, RunCancelledError), err
    assert "run cancelled by RunOptions.terminate" in str(err)
    assert latency < PROMPT_S
    (y,) = sess.run(None, {"trips": np.array(5, np.int64), "x": np.zeros(4, np.float32)})
    np.testing.assert_array_equal(y, np.full(4, 5, np.float32))


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_terminate_stops_a_long_chain_between_nodes(mode):
    so = onnxplex.SessionOptions()
    if mode == "parallel":
        so.execution_mode = onnxplex.ExecutionMode.ORT_PARALLEL
        so.inter_op_num_threads = 2
    sess = onnxplex.InferenceSession(chain_model(), so)
    x = np.random.default_rng(0).standard_normal((192, 192)).astype(np.float32)
    t0 = time.perf_counter()
    (full,) = sess.run(None, {"x": x})
    whole = time.perf_counter() - t0
    err, latency, _ = cancel_after(sess, {"x": x}, whole / 4)
    LATENCIES[f"chain ({mode})"] = latency
    assert isinstance(err, RunCancelledError), err
    assert "before node '" in str(err)
    assert latency < PROMPT_S
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], full)


def test_terminate_set_before_the_run_cancels_it_at_once():
    sess = onnxplex.InferenceSession(loop_model())
    ro = onnxplex.RunOptions()
    ro.terminate = True
    with pytest.raises(RunCancelledError, match="cancelled"):
        sess.run(None, {"trips": np.array(3, np.int64), "x": np.zeros(4, np.float32)}, ro)
    ro.terminate = False
    assert sess.run(None, {"trips": np.array(3, np.int64), "x": np.zeros(4, np.float32)},
                    ro)[0][0] == 3


def test_cancelling_one_run_leaves_concurrent_runs_alone():
    sess = onnxplex.InferenceSession(loop_model())
    others: list = []

    def other():
        others.append(sess.run(None, {"trips": np.array(20000, np.int64),
                                      "x": np.zeros(4, np.float32)})[0])

    th = threading.Thread(target=other)
    th.start()
    err, _, _ = cancel_after(sess, {"trips": np.array(10**9, np.int64),
                                    "x": np.zeros(4, np.float32)}, 0.1)
    th.join(timeout=120)
    assert isinstance(err, RunCancelledError)
    np.testing.assert_array_equal(others[0], np.full(4, 20000, np.float32))
