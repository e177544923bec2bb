"""Concurrency soak: 16 threads x 1,000 runs with different inputs on one session give exactly
the single-threaded results, and memory stays flat after warm-up. The RSS growth measured is
printed with ``-s`` (``python -m pytest tests/test_soak.py -s``)."""

from __future__ import annotations

import gc
import os
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex

THREADS = 16
RUNS = int(os.environ.get("ONNXPLEX_SOAK_RUNS", "1000"))   # per thread
WARMUP = 100                                               # per thread, before measuring
GROWTH_LIMIT = 8 << 20   # bytes of RSS growth allowed after warm-up (allocator noise)


def mlp() -> onnx.ModelProto:
    """[n, 16] -> Gemm+Relu -> MatMul -> Softmax, plus a LayerNormalization side output."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 8)).astype(np.float32), "w2")
    scale = numpy_helper.from_array(np.ones(16, np.float32), "scale")
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["z"]),
        helper.make_node("Softmax", ["z"], ["y"], axis=-1),
        helper.make_node("LayerNormalization", ["x", "scale"], ["ln"], axis=-1),
    ]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       ["n", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8]),
                           helper.make_tensor_value_info("ln", TensorProto.FLOAT, ["n", 16])],
                          [w1, b1, w2, scale])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc (Linux)")
def test_sixteen_threads_match_single_threaded_runs_and_memory_stays_flat():
    sess = onnxplex.InferenceSession(mlp())
    total = THREADS * RUNS
    rng = np.random.default_rng(1)
    # different inputs every run, and batch sizes 1-4 so the shapes vary too
    inputs = [rng.standard_normal((1 + i % 4, 16)).astype(np.float32) for i in range(total)]
    expected = [sess.run(None, {"x": x}) for x in inputs]

    digests = np.zeros(total, np.float64)   # results are compared as they come: no hoarding
    bad: list[int] = []
    errors: list[BaseException] = []
    rss: dict[str, int] = {}
    warm = threading.Barrier(THREADS, action=lambda: (gc.collect(),
                                                      rss.setdefault("warm", rss_bytes())))

    def worker(t: int) -> None:
        try:
            for k, i in enumerate(range(t, total, THREADS)):
                if k == WARMUP:
                    warm.wait()
                got = sess.run(None, {"x": inputs[i]})
                if not all(np.array_equal(g, e) for g, e in zip(got, expected[i])):
                    bad.append(i)
                digests[i] = float(got[0].sum())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            warm.abort()

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=600)
    assert not any(th.is_alive() for th in threads), "a runner thread hung"
    if errors:
        raise errors[0]
    gc.collect()
    growth = rss_bytes() - rss["warm"]
    print(f"\nsoak: {THREADS} threads x {RUNS} runs; RSS after warm-up grew "
          f"{growth / 2**20:+.1f} MiB (limit {GROWTH_LIMIT / 2**20:.0f} MiB)")
    assert not bad, f"{len(bad)} of {total} threaded runs differ from the single-threaded ones"
    np.testing.assert_array_equal(digests, [float(e[0].sum()) for e in expected])
    assert growth < GROWTH_LIMIT, f"RSS grew {growth / 2**20:.1f} MiB after warm-up"
