"""``onnxplex perf`` and ``onnxplex profile`` (what they report, not how fast anything is)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from models import small_cnn

import onnxplex
from onnxplex.tools.cli import main
from onnxplex.tools.perf import LatencyStats, load_profile, perf, summarize_profile


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory):
    import onnx

    path = tmp_path_factory.mktemp("perf") / "cnn.onnx"
    onnx.save(small_cnn(batch=2), path)
    return str(path)


def test_latency_stats():
    s = LatencyStats.of([0.004, 0.001, 0.002, 0.003])
    assert s.runs == 4 and s.min == 0.001 and s.max == 0.004 and s.median == 0.0025
    assert s.percentiles[50] <= s.percentiles[90] <= s.percentiles[95] <= s.percentiles[99]
    assert s.runs_per_second == pytest.approx(4 / 0.01)
    with pytest.raises(onnxplex.InvalidArgumentError):
        LatencyStats.of([])


def test_perf_counts_runs_and_reports_creation_and_first_run(cnn_path):
    r = perf(cnn_path, repetitions=7, warmup=0, progress=None)
    assert r.latency.runs == 7 and r.providers == ["cpu_mlas"]
    assert r.session_creation > 0 and r.first_run > 0 and r.peer is None
    text = r.text()
    for what in ("session creation:", "first run:", "runs: 7", "p50", "p99"):
        assert what in text
    r = perf(cnn_path, duration=0.2, progress=None)
    assert r.latency.runs >= 1 and r.latency.total <= 0.2 + 10 * r.latency.max


def test_perf_compares_with_onnxruntime_on_the_same_inputs(cnn_path):
    pytest.importorskip("onnxruntime")
    r = perf(cnn_path, repetitions=5, intra_op_threads=1, compare_onnxruntime=True,
             progress=None)
    p = r.peer
    assert p["latency"].runs == 5 and p["ratio"] == pytest.approx(
        r.latency.median / p["latency"].median)
    assert p["max_abs_diff"] < 1e-4  # same model, same inputs: same answer
    assert "ratio onnxplex / onnxruntime" in r.text()


def test_perf_rejects_bad_arguments(cnn_path):
    with pytest.raises(onnxplex.InvalidArgumentError, match="either"):
        perf(cnn_path, repetitions=3, duration=1.0)
    with pytest.raises(onnxplex.InvalidArgumentError, match="optimization level"):
        perf(cnn_path, level="FAST")


def test_cli_perf_json(cnn_path, capsys, tmp_path):
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=np.ones((2, 3, 16, 16), np.float32))
    assert main(["perf", cnn_path, "-r", "3", "-x", "1", "--inputs", str(feeds),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["latency"]["runs"] == 3 and out["intra_op_threads"] == 1
    assert {"p50_ms", "p90_ms", "p95_ms", "p99_ms", "runs_per_s"} <= set(out["latency"])


def test_profile_summary_per_op_type_and_provider(cnn_path, tmp_path, capsys):
    so = onnxplex.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = onnxplex.InferenceSession(cnn_path, so)
    x = np.ones((2, 3, 16, 16), np.float32)
    for _ in range(3):
        sess.run(None, {"x": x})
    path = sess.end_profiling()
    s = summarize_profile(load_profile(path))
    placed = sess.get_provider_assignment().placements
    assert s["runs"] == 3 and s["node_events"] == 3 * len(placed)
    ops = {r["name"]: r for r in s["by_op_type"]}
    assert set(ops) == {p.op_type for p in placed}
    # (the layout level runs the CNN's MaxPool channels-last: NhwcMaxPool)
    assert {"NhwcMaxPool", "Gemm", "Softmax"} <= set(ops) and ops["NhwcMaxPool"]["calls"] == 6
    assert [r["name"] for r in s["by_provider"]] == ["cpu_mlas"]
    assert sum(r["percent"] for r in s["by_op_type"]) == pytest.approx(100.0)
    assert main(["profile", path, "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "per op type:" in out and "per provider:" in out and "cpu_mlas" in out


def test_profile_of_a_non_trace_file_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"not": "a trace"}')
    assert main(["profile", str(bad)]) == 2
    assert "not a Chrome-trace event list" in capsys.readouterr().err


def test_random_ids_stay_within_the_table_they_index():
    """Random integer inputs that index a Gather (token or segment ids) stay below the size of
    the gathered axis; other integer inputs keep the default range [0, 8)."""
    from onnx import TensorProto, helper, numpy_helper

    from onnxplex.framework.feeds import random_feeds

    emb = np.arange(8, dtype=np.float32).reshape(2, 4)   # a 2-row table (segment embeddings)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"]),
         helper.make_node("Cast", ["other"], ["o"], to=TensorProto.FLOAT)], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 64]),
         helper.make_tensor_value_info("other", TensorProto.INT64, [256])],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("o", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(emb, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = onnxplex.InferenceSession(model.SerializeToString())
    feeds = random_feeds(sess, seed=3, dim=4)
    assert feeds["ids"].shape == (4, 64) and set(np.unique(feeds["ids"])) == {0, 1}
    assert feeds["other"].max() > 1 and feeds["other"].max() < 8
    sess.run(None, feeds)


def test_perf_times_other_peers_in_the_alternation(cnn_path):
    """``peers``: factories run in the same alternation, checked against onnxruntime's outputs
    (onnxplex's without it); one that raises is recorded, not raised."""
    pytest.importorskip("onnxruntime")
    sess = onnxplex.InferenceSession(cnn_path)
    calls = []

    def same():
        calls.append("created")
        return lambda feeds: calls.append("run") or sess.run(None, dict(feeds))

    def off_by_one():
        return lambda feeds: [y + 1 for y in sess.run(None, dict(feeds))]

    def broken():
        raise RuntimeError("no such device\nsecond line")

    r = perf(cnn_path, repetitions=4, warmup=1, intra_op_threads=1, compare_onnxruntime=True,
             peers={"same": same, "off": off_by_one, "broken": broken}, progress=None)
    p = r.peers["same"]
    assert calls.count("created") == 1 and calls.count("run") == 1 + 1 + 4
    assert p["latency"].runs == 4 and p["ratio"] == pytest.approx(
        r.latency.median / p["latency"].median)
    assert p["diff_against"] == "onnxruntime" and p["max_abs_diff"] < 1e-4
    assert r.peers["off"]["max_abs_diff"] == pytest.approx(1.0, abs=1e-4)
    assert r.peers["broken"] == {"error": "RuntimeError: no such device"}
    text = r.text()
    assert "ratio onnxplex / same" in text and "broken: RuntimeError: no such device" in text
    assert r.to_dict()["peers"]["same"]["latency"]["runs"] == 4

    r = perf(cnn_path, repetitions=2, warmup=0, peers={"same": same}, progress=None)
    assert r.peer is None and r.peers["same"]["diff_against"] == "onnxplex"
    assert r.peers["same"]["max_abs_diff"] == 0.0
