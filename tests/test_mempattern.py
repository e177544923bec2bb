"""Memory patterns (onnxplex._mempattern, enable_mem_pattern): a session's large intermediates
from one planned buffer. Results must equal the runs without it in every case, and the
buffer must never hand out memory a live array still holds."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplex
from onnxplex.framework import mempattern

pytestmark = pytest.mark.skipif(not mempattern.available(),
                                reason="onnxplex._mempattern is not built")

if mempattern.available():
    from onnxplex import _mempattern

    BIG = _mempattern.MIN_BYTES // 8 + 1000   # float64 elements: a request the pattern takes


def _run(pattern, body):
    on = pattern.begin()
    try:
        return body()
    finally:
        if on:
            pattern.end()


# ------------------------------------------------------------------ the Pattern on its own


def test_warmup_record_then_planned_runs_reuse_the_buffer():
    p = _mempattern.Pattern()

    def body():
        a = np.ones(BIG)
        b = a * 2          # a and b live together
        del a
        c = b + 1          # may take a's place
        del b
        return float(c.sum()), np.zeros(BIG)   # the second outlives the run: never planned

    results = [_run(p, body) for _ in range(5)]
    assert all(r[0] == 3.0 * BIG and not r[1].any() for r in results)
    s = p.stats()
    assert s["state"] == "planned" and s["recordings"] == 1
    assert s["requests"] == 4 and s["planned"] == 3   # the returned zeros are not planned
    assert s["planned_runs"] == 3 and s["hits"] == 9 and s["misses"] == 0
    # a, b, c at 64-byte padded offsets: a and b at once, c in a's place
    assert 2 * BIG * 8 <= s["buffer_bytes"] <= 2 * (BIG * 8 + 1024 + 64)


def test_a_planned_zeros_block_is_zeroed_although_the_buffer_held_other_values():
    p = _mempattern.Pattern()

    def body():
        a = np.full(BIG, 7.0)
        del a
        z = np.zeros(BIG)    # planned where a was
        return float(np.abs(z).sum())

    assert [_run(p, body) for _ in range(5)] == [0.0] * 5
    assert p.stats()["hits"] > 0


def test_a_block_kept_past_its_run_is_never_handed_out_again():
    p = _mempattern.Pattern()
    kept = []

    def body(keep):
        a = np.full(BIG, 1.0)
        if keep:
            kept.append(a)   # in the recording it died in the run: planned
        b = np.full(BIG, 2.0)   # planned where a was, unless a still lives
        return float(b.sum())

    for _ in range(2):
        _run(p, lambda: body(False))
    assert p.stats()["state"] == "planned"
    _run(p, lambda: body(True))       # a from the buffer, kept by the caller
    assert _run(p, lambda: body(False)) == 2.0 * BIG
    assert float(kept[0].sum()) == BIG   # untouched by the runs after
    assert p.stats()["live"] == 1


def test_the_buffer_outlives_its_pattern_while_a_block_of_it_lives():
    p = _mempattern.Pattern()
    kept = []

    def body(keep):
        a = np.full(BIG, 3.0)
        if keep:
            kept.append(a)

    for keep in (False, False, True):
        _run(p, lambda keep=keep: body(keep))
    assert p.stats()["live"] == 1
    del p
    gc.collect()
    kept[0][:] += 1.0        # still our memory to write
    assert float(kept[0].sum()) == 4.0 * BIG
    kept.clear()             # the last block goes: the buffer with it (no crash, no leak)


def test_realloc_moves_a_block_out_of_the_buffer_with_its_contents():
    p = _mempattern.Pattern()
    grown = []

    def body():
        a = np.arange(BIG, dtype=np.float64)
        a.resize(2 * BIG, refcheck=False)   # numpy reallocates the data
        grown.append(float(a[:BIG].sum()))
        del a
        b = np.arange(BIG, dtype=np.float64)
        return float(b.sum())

    want = float(np.arange(BIG, dtype=np.float64).sum())
    assert [_run(p, body) for _ in range(5)] == [want] * 5
    assert grown == [want] * 5


def test_requests_that_stray_from_the_recording_go_to_numpy_and_it_records_again():
    p = _mempattern.Pattern()
    sizes = iter([BIG, BIG, BIG, BIG + 512, BIG + 512, BIG + 1024, BIG + 2048, BIG + 4096,
                  BIG + 8192])

    def body():
        n = next(sizes)
        a = np.ones(n)
        b = a + 1
        del a
        return float(b.sum()), n

    for _ in range(9):
        total, n = _run(p, body)
        assert total == 2.0 * n
    s = p.stats()
    assert s["misses"] > 0 and s["recordings"] == 3 and s["state"] == "off"
    assert p.end() is False   # (outside a run: reports the state)


def test_other_threads_and_the_callers_arrays_keep_numpys_allocator():
    p = _mempattern.Pattern()
    seen = []

    def other():
        x = np.ones(BIG)
        seen.append(float(x.sum()))   # runs while p is active in the main thread

    for _ in range(2):
        _run(p, lambda: np.ones(BIG).sum())
    on = p.begin()
    t = threading.Thread(target=other)
    t.start()
    t.join()
    if on:
        p.end()
    assert seen == [BIG] and p.stats()["requests"] == 1


# ------------------------------------------------------------------ through sessions


def _chain_model(n: int = 6, shape=(1, 64, 1024)):
    nodes = [helper.make_node("Abs" if i % 2 else "Neg", [f"t{i}" if i else "x"],
                              [f"t{i + 1}" if i < n - 1 else "y"]) for i in range(n)]
    nodes.append(helper.make_node("Add", ["t2", "y"], ["z"]))   # t2 lives across the chain
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", *shape[1:]])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["b", *shape[1:]])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8).SerializeToString()


def _session(model, **options):
    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = 1
    for k, v in options.items():
        setattr(so, k, v)
    return onnxplex.InferenceSession(model, so)


def test_session_runs_from_the_plan_and_gives_the_same_results():
    model = _chain_model()
    on, off = _session(model), _session(model, enable_mem_pattern=False)
    assert off._mem_patterns is None
    rng = np.random.default_rng(0)
    outs = []
    for _ in range(5):
        x = rng.standard_normal((1, 64, 1024), dtype=np.float32)
        got, want = on.run(None, {"x": x})[0], off.run(None, {"x": x})[0]
        np.testing.assert_array_equal(got, want)
        outs.append((got, want))
    for got, want in outs:   # earlier outputs are not overwritten by later runs
        np.testing.assert_array_equal(got, want)
    (s,) = on._mem_patterns.stats()
    assert s["state"] == "planned" and s["planned"] >= 4 and s["hits"] > 0 and s["misses"] == 0


def test_one_pattern_per_input_shape_and_no_more_than_four():
    sess = _session(_chain_model())
    for batch in (1, 2, 1, 3, 2, 4, 5, 1):
        x = np.full((batch, 64, 1024), 0.5, np.float32)
        for _ in range(3):
            np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.full_like(x, 1.0))
    stats = sess._mem_patterns.stats()
    assert len(stats) == 4 and [s["shapes"] for s in stats][-1] == ((1, 64, 1024),)


def test_a_model_without_large_intermediates_turns_patterns_off():
    sess = _session(_chain_model(shape=(1, 4, 4)))
    x = np.ones((1, 4, 4), np.float32)
    for _ in range(3):
        sess.run(None, {"x": x})
    (s,) = sess._mem_patterns.stats()
    assert s["state"] == "off" and s["requests"] == 0


def test_concurrent_runs_of_one_session_are_right():
    sess = _session(_chain_model())
    xs = [np.full((1, 64, 1024), float(k), np.float32) for k in range(4)]
    errors = []

    def work(k):
        try:
            for _ in range(20):
                np.testing.assert_array_equal(sess.run(None, {"x": xs[k]})[0], want[k])
        except Exception as e:  # noqa: BLE001 - collected for the assertion below
            errors.append(e)

    ref = _session(_chain_model(), enable_mem_pattern=False)
    want = [ref.run(None, {"x": x})[0] for x in xs]
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_outputs_outlive_their_session():
    sess = _session(_chain_model())
    x = np.ones((1, 64, 1024), np.float32)
    outs = [sess.run(None, {"x": x})[0] for _ in range(5)]
    assert sess._mem_patterns.stats()[0]["hits"] > 0
    del sess
    gc.collect()
    for o in outs:
        np.testing.assert_array_equal(o, np.full_like(x, 2.0))
