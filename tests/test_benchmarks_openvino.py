"""OpenVINO as the benchmarks' second peer (``benchmarks/peers.py``), in both runners.

Tiny ``onnx.helper`` models only (milliseconds each): the peer's outputs in the model's order
and equal to onnxruntime's; ``benchmarks/run.py``'s rows and table and the zoo runner's rows and
report carrying onnxplex/onnxruntime and onnxplex/OpenVINO ratios; a model OpenVINO cannot take
(a string input) reported in its cell, not raised; and, without openvino, "OpenVINO not
installed" said once with "-" in its columns. The tests that run OpenVINO are skipped when it
is not installed (it is in the ``test`` extra).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import peers  # noqa: E402
from benchmarks import run as bench_run  # noqa: E402
from benchmarks.zoo import run as zoo_run  # noqa: E402

CONFIG = "CPUExecutionProvider"


def _mlp_model() -> onnx.ModelProto:
    """x[4,16] -> (argmax int64 [4], relu(x @ W + b) float [4,8]): outputs listed int first,
    so an engine that returned them in its own order would be caught."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [16, 8],
                           rng.standard_normal((16, 8)).astype(np.float32).ravel())
    b = helper.make_tensor("b", TensorProto.FLOAT, [8],
                           rng.standard_normal(8).astype(np.float32))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]),
             helper.make_node("Add", ["mm", "b"], ["pre"]),
             helper.make_node("Relu", ["pre"], ["y"]),
             helper.make_node("ArgMax", ["pre"], ["idx"], axis=1, keepdims=0)]
    g = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("idx", TensorProto.INT64, [4]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _string_model() -> onnx.ModelProto:
    """A string input and output: onnxruntime and onnxplex take them; the OpenVINO peer refuses
    them (OpenVINO 2026.4.1 aborts the process freeing a request that ran this model)."""
    g = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["t"])], "strings",
        [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, [2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _save(model: onnx.ModelProto, tmp_path: Path, name: str, feeds: dict) -> Path:
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    np.savez(tmp_path / f"{name}.inputs.npz", **feeds)
    return path


@pytest.fixture
def mlp(tmp_path):
    feeds = {"x": np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)}
    return _save(_mlp_model(), tmp_path, "mlp", feeds), feeds


@pytest.fixture
def strings(tmp_path):
    feeds = {"s": np.array(["a", "bc"])}
    return _save(_string_model(), tmp_path, "strings", feeds), feeds


@pytest.fixture
def no_openvino(monkeypatch):
    """openvino made unimportable, and the 'said once' flag fresh."""
    monkeypatch.setitem(sys.modules, "openvino", None)
    monkeypatch.setattr(peers, "_said_missing", False)


def _zoo_args():
    return types.SimpleNamespace(runs=3, warmups=1, creations=1)


def _zoo_cells(report: str, model: str) -> dict[str, str]:
    """The zoo report's row of ``model``, by column head."""
    def split(line):
        return [c.strip() for c in line.strip().strip("|").split(" | ")]

    lines = report.splitlines()
    head = next(x for x in lines if x.startswith("| model"))
    return dict(zip(split(head), split(next(x for x in lines if x.startswith(f"| {model} ")))))


def test_openvino_peer_matches_onnxruntime_in_the_model_output_order(mlp):
    pytest.importorskip("openvino")
    path, feeds = mlp
    ref_sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in ref_sess.get_outputs()]
    ref = ref_sess.run(None, feeds)
    got = peers.OpenVinoPeer(str(path), 1, names).run(feeds)
    assert [g.dtype for g in got] == [np.int64, np.float32]
    ok, diff, problem = zoo_run.compare(ref, got, names)
    assert ok, problem
    assert diff < 1e-5
    # without names: OpenVINO's own order, which for an ONNX file is the model's too
    assert [np.asarray(g).dtype for g in peers.OpenVinoPeer(str(path), 1).run(feeds)] == [
        np.int64, np.float32]
    with pytest.raises(KeyError, match="no output named"):
        peers.OpenVinoPeer(str(path), 1, ["nope"])


def test_run_py_row_and_table_have_both_ratios(mlp):
    pytest.importorskip("openvino")
    path, feeds = mlp
    row = bench_run.bench("tiny_mlp", path, 1, 3, feeds=feeds)
    assert row["openvino_error"] is None
    assert row["ratio_openvino"] == pytest.approx(row["onnxplex_ms"] / row["openvino_ms"])
    assert row["ratio"] == pytest.approx(row["onnxplex_ms"] / row["onnxruntime_ms"])
    assert row["openvino_max_abs_diff"] < 1e-5  # against onnxruntime
    assert {"create_onnxplex_ms", "create_onnxruntime_ms", "create_openvino_ms"} <= set(row)
    rss = {"tiny_mlp": {"onnxplex": 90.0, "onnxruntime": 100.0, "openvino": 120.0}}
    text = bench_run.table([row], rss, "test machine")
    assert "| ratio vs onnxruntime | ratio vs OpenVINO |" in text
    line = next(x for x in text.splitlines() if x.startswith("| tiny_mlp"))
    assert f"**{row['ratio_openvino']:.2f}**" in line and "0.75 (90 / 120 MiB)" in line
    assert "onnxplex / OpenVINO **" in text


def test_zoo_row_and_report_have_both_ratios(mlp):
    pytest.importorskip("openvino")
    path, _ = mlp
    row = zoo_run.run_model(path, [1], [CONFIG], runs=3, warmups=1, creations=1, budget=5.0)
    res = row["threads"]["1"]
    assert not row["errors"]
    assert res["match"] == {f"onnxplex[{CONFIG}]": True, "openvino": True}
    assert {"onnxruntime", f"onnxplex[{CONFIG}]", "openvino"} <= set(res["median_s"])
    assert "openvino" in row["creation_s"]
    cells = _zoo_cells(zoo_run.report([row], [1], [CONFIG], _zoo_args()), "mlp")
    med = res["median_s"]
    assert float(cells["plex/ov @1"]) == pytest.approx(
        med[f"onnxplex[{CONFIG}]"] / med["openvino"], abs=0.006)
    assert cells["create plex/ov"] != "-" and "OV yes" in cells[
        "match (max abs diff of max abs output)"]


def test_a_model_openvino_cannot_take_is_a_cell_not_a_crash(strings):
    pytest.importorskip("openvino")
    path, feeds = strings
    row = bench_run.bench("strings", path, 1, 3, feeds=feeds)
    assert row["openvino_error"] and row["ratio_openvino"] is None
    line = bench_run.table([row], {}, "m").splitlines()[4]
    assert "openvino: " + row["openvino_error"].split(":")[0] in line

    zrow = zoo_run.run_model(path, [1], [CONFIG], runs=3, warmups=1, creations=1, budget=5.0)
    assert "openvino" in zrow["errors"] and "openvino" not in zrow["threads"]["1"]["median_s"]
    text = zoo_run.report([zrow], [1], [CONFIG], _zoo_args())
    line = next(x for x in text.splitlines() if x.startswith("| strings"))
    assert "openvino: " in line and "\n" not in peers.error_cell(zrow["errors"]["openvino"])


def test_without_openvino_said_once_and_columns_show_dash(mlp, no_openvino, capsys):
    path, feeds = mlp
    assert peers.load_openvino() is None and peers.load_openvino() is None
    assert capsys.readouterr().err.count("OpenVINO not installed") == 1
    assert peers.openvino_version() is None

    row = bench_run.bench("tiny_mlp", path, 1, 3, feeds=feeds)
    assert row["ratio_openvino"] is None and row["openvino_error"] is None
    text = bench_run.table([row], {}, "m")
    assert "onnxplex / OpenVINO - (OpenVINO not installed)" in text
    assert "| - | **" in text  # the OpenVINO ms cell

    zrow = zoo_run.run_model(path, [1], [CONFIG], runs=3, warmups=1, creations=1, budget=5.0)
    assert zrow["openvino"] is None and not zrow["errors"]
    ztext = zoo_run.report([zrow], [1], [CONFIG], _zoo_args())
    assert "OpenVINO not installed" in ztext
    cells = _zoo_cells(ztext, "mlp")
    assert cells["plex/ov @1"] == "-" and cells["create plex/ov"] == "-"
    assert capsys.readouterr().err.count("OpenVINO not installed") == 0  # said once only


def test_variant_benchmarks_rotate_three_engines():
    """quantized.py and half.py time onnxplex, onnxruntime and OpenVINO in a rotation: every
    engine runs once a round, each round starting one engine later, so each is in each
    position equally often (the one after another engine pays for its evicted caches)."""
    from benchmarks._variants import alternate

    order: list[int] = []
    runners = [lambda f, k=k: order.append(k) for k in range(3)]
    ms = alternate(runners, {}, 6)
    assert len(ms) == 3 and all(m >= 0 for m in ms)
    rounds = [order[i:i + 3] for i in range(0, 18, 3)]
    assert all(sorted(r) == [0, 1, 2] for r in rounds)
    assert [r[0] for r in rounds] == [0, 1, 2, 0, 1, 2]


def test_variant_benchmark_openvino_runner(tmp_path):
    """The variant benchmarks' OpenVINO runner returns the model's outputs in its order (and
    equal to onnxruntime's), or None and the reason a model cannot run there."""
    pytest.importorskip("openvino")
    from benchmarks._variants import openvino_runner

    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp_model(), path)
    run, why = openvino_runner(path, 1, ["idx", "y"])
    assert run is not None and why == ""
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=[CONFIG]).run(None, {"x": x})
    got = run({"x": x})
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    bad = tmp_path / "strings.onnx"
    onnx.save(_string_model(), bad)
    run, why = openvino_runner(bad, 1, ["t"])
    assert run is None and "string" in why
