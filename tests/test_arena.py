"""The runs' cache of large numpy buffers (``onnxplex._arena``, ``framework/arena.py``):
onnxruntime's CPU memory arena. Large intermediates are reused across runs instead of being
faulted in afresh, results are the same with and without it, the caller's own allocations
never go through it, its switches are onnxruntime's, and its blocks go when the last session
does."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex.framework import arena

pytestmark = pytest.mark.skipif(not arena.available(), reason="onnxplex._arena is not built")


def _growing_model() -> bytes:
    """Concats whose outputs grow (64x64 planes: 0.5, 1, 1.5, 2 MB), as a DenseNet block's do,
    then a reduction: every intermediate is a large block of its own size."""
    nodes, prev = [], "x"
    for k in range(4):
        nodes.append(helper.make_node("Concat", [prev, "x"], [f"c{k}"], axis=1))
        nodes.append(helper.make_node("Relu", [f"c{k}"], [f"r{k}"]))
        prev = f"r{k}"
    nodes.append(helper.make_node("ReduceSum", [prev, "axes"], ["y"], keepdims=0))
    graph = helper.make_graph(
        nodes, "growing",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([2, 3], np.int64), "axes")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]) \
        .SerializeToString()


MODEL = _growing_model()
X = np.random.default_rng(0).standard_normal((1, 32, 64, 64)).astype(np.float32)


def _session(enabled: bool = True) -> onnxplex.InferenceSession:
    so = onnxplex.SessionOptions()
    so.enable_cpu_mem_arena = enabled
    return onnxplex.InferenceSession(MODEL, so)


def _counts() -> tuple[int, int]:
    st = arena.stats()
    return st["hits"], st["misses"]


def test_large_intermediates_are_reused_from_the_second_run_on():
    sess, plain = _session(), _session(enabled=False)
    want = plain.run(None, {"x": X})[0]
    first = sess.run(None, {"x": X})[0]
    h0, m0 = _counts()
    for _ in range(3):
        np.testing.assert_array_equal(sess.run(None, {"x": X})[0], want)
    h1, m1 = _counts()
    assert h1 - h0 >= 3 * 4 and m1 == m0   # every large block of runs 2-4 came from the cache
    np.testing.assert_array_equal(first, want)
    assert 0 < arena.stats()["cached_bytes"] <= arena.stats()["limit_bytes"]


def test_a_session_with_the_arena_off_never_uses_it():
    sess = _session(enabled=False)
    _session()   # (another session keeps the arena in use)
    before = _counts()
    sess.run(None, {"x": X})
    assert _counts() == before


def test_the_callers_allocations_do_not_go_through_it():
    sess = _session()
    sess.run(None, {"x": X})
    before = arena.stats()
    big = np.ones(1 << 20, np.float32)   # 4 MB, made and freed outside any run
    del big
    after = arena.stats()
    assert (after["hits"], after["misses"], after["cached_bytes"]) == \
        (before["hits"], before["misses"], before["cached_bytes"])


def test_the_shrinkage_run_option_frees_the_kept_blocks():
    sess = _session()
    sess.run(None, {"x": X})
    assert arena.stats()["cached_bytes"] > 0
    ro = onnxplex.RunOptions()
    ro.add_run_config_entry(arena.SHRINK_KEY, "cpu:0")
    sess.run(None, {"x": X}, ro)
    assert arena.stats()["cached_bytes"] == 0


def test_blocks_go_with_the_last_session_and_outputs_outlive_it():
    """In a fresh interpreter (no other session alive): when the last session is collected the
    kept blocks are freed and nothing more is kept; an output held past its session stays
    valid and is freed through the handler it was made with."""
    script = f"""
import gc, sys
import numpy as np
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_arena import MODEL, X
import onnxplex
from onnxplex.framework import arena
plain = onnxplex.SessionOptions(); plain.enable_cpu_mem_arena = False
want = onnxplex.InferenceSession(MODEL, plain).run(None, {{"x": X}})[0]
sess = onnxplex.InferenceSession(MODEL)
out = sess.run(None, {{"x": X}})[0]
sess.run(None, {{"x": np.concatenate([X, X])}})
assert arena.stats()["cached_bytes"] > 0
del sess
gc.collect()
st = arena.stats()
assert st["cached_bytes"] == 0 and st["limit_bytes"] == 0, st
np.testing.assert_array_equal(out, want)
del out
assert arena.stats()["cached_bytes"] == 0
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_realloc_and_calloc_through_the_handler():
    """numpy's resize reallocates, zeros callocs: blocks keep the size class they hold, so a
    grown, shrunk or zeroed buffer is always large enough for what the cache hands it to."""
    _session()   # (a user: the cache keeps blocks)
    handler = arena.native.activate()
    try:
        for n in (300_000, 1_000_000, 5_000, 700_000):
            a = np.arange(n, dtype=np.uint8)
            a.resize(2 * n, refcheck=False)
            assert (a[:n] == np.arange(n, dtype=np.uint8)).all() and (a[n:] == 0).all()
            a.resize(n // 2, refcheck=False)
            assert (a == np.arange(n // 2, dtype=np.uint8)).all()
            z = np.zeros(n, np.float32)
            assert not z.any()
            z[:] = 7
            del a, z
        for _ in range(3):   # reused blocks still come back zeroed from calloc
            z = np.zeros(1_000_000, np.float32)
            assert not z.any()
            z[:] = 1
            del z
    finally:
        arena.native.restore(handler)


def test_concurrent_runs_share_it():
    sess = _session()
    want = _session(enabled=False).run(None, {"x": X})[0]
    errors: list[BaseException] = []

    def work():
        try:
            for _ in range(20):
                np.testing.assert_array_equal(sess.run(None, {"x": X})[0], want)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert arena.stats()["cached_bytes"] <= arena.stats()["limit_bytes"]
