"""Thread safety and parallel execution of one onnxplex session.

* 8 threads x 50 runs on one session give bit-identical outputs to the same inputs run
  sequentially (``InferenceSession.run`` is documented as safe to call from many threads);
* ``ExecutionMode.ORT_PARALLEL`` with ``inter_op_num_threads=2`` on a model with independent
  branches gives bit-identical outputs to ``ORT_SEQUENTIAL``.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from models import inception_block, small_cnn

import onnxplex

N_THREADS = 8
RUNS_PER_THREAD = 50
BATCH = 2

MODELS = {
    "small_cnn": (small_cnn, (BATCH, 3, 16, 16)),
    "inception_block": (inception_block, (BATCH, 8, 16, 16)),
}


def make_inputs(shape, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def session(model, mode: str) -> onnxplex.InferenceSession:
    so = onnxplex.SessionOptions()
    if mode == "parallel":
        so.execution_mode = onnxplex.ExecutionMode.ORT_PARALLEL
        so.inter_op_num_threads = 2
    else:
        so.execution_mode = onnxplex.ExecutionMode.ORT_SEQUENTIAL
    return onnxplex.InferenceSession(model.SerializeToString(), so)


def run_threaded(sess, inputs: list[np.ndarray], n_threads: int) -> list[list[np.ndarray]]:
    """Thread t runs inputs t, t + n, t + 2n, ...; all threads start together."""
    results: list[list[np.ndarray] | None] = [None] * len(inputs)
    errors: list[BaseException] = []
    barrier = threading.Barrier(n_threads)

    def worker(t: int) -> None:
        try:
            barrier.wait()
            for i in range(t, len(inputs), n_threads):
                results[i] = sess.run(None, {"x": inputs[i]})
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,), name=f"runner-{t}")
               for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert not any(th.is_alive() for th in threads), "a runner thread hung"
    if errors:
        raise errors[0]
    assert all(r is not None for r in results)
    return results


def assert_bit_identical(got: list[list[np.ndarray]], expected: list[list[np.ndarray]]):
    bad = [i for i, (g, e) in enumerate(zip(got, expected))
           if len(g) != len(e) or not all(np.array_equal(a, b) for a, b in zip(g, e))]
    assert not bad, (f"{len(bad)}/{len(expected)} runs differ from the sequential result, "
                     f"first at input {bad[0]}")


@pytest.mark.parametrize("model_name,mode", [
    ("small_cnn", "sequential"),
    ("inception_block", "sequential"),
    ("inception_block", "parallel"),
])
def test_threads_match_sequential_runs(model_name, mode):
    """8 threads x 50 runs on one session == the same inputs run one after another."""
    build, shape = MODELS[model_name]
    sess = session(build(), mode)
    inputs = make_inputs(shape, N_THREADS * RUNS_PER_THREAD, seed=1)
    sequential = [sess.run(None, {"x": x}) for x in inputs]
    threaded = run_threaded(sess, inputs, N_THREADS)
    assert_bit_identical(threaded, sequential)


def test_parallel_execution_mode_matches_sequential():
    """ORT_PARALLEL (inter_op_num_threads=2) on four independent branches == ORT_SEQUENTIAL."""
    model = inception_block()
    seq_sess = session(model, "sequential")
    par_sess = session(model, "parallel")
    inputs = make_inputs(MODELS["inception_block"][1], 20, seed=2)
    expected = [seq_sess.run(None, {"x": x}) for x in inputs]
    got = [par_sess.run(None, {"x": x}) for x in inputs]
    assert_bit_identical(got, expected)


@pytest.mark.parametrize("model_name", list(MODELS))
def test_concurrency_models_match_onnxruntime(model_name):
    """Sanity: the models these tests use compute the right thing (onnxruntime oracle)."""
    ort = pytest.importorskip("onnxruntime")
    build, shape = MODELS[model_name]
    model = build()
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    sess = session(model, "sequential")
    for x in make_inputs(shape, 3, seed=3):
        for g, e in zip(sess.run(None, {"x": x}), ref.run(None, {"x": x})):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)
