"""The zoo runner's peak-memory columns (benchmarks/zoo/run.py): each engine measured in a
fresh process of its own, the table showing onnxplex's MiB and its ratio to the peers."""

from __future__ import annotations

import sys
from argparse import Namespace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.zoo import run  # noqa: E402


def _model(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 2048)).astype(np.float32)   # 2 MiB of weights
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
        "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [64, 2048])],
        [numpy_helper.from_array(w, "w")])
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9),
              path)
    np.savez(tmp_path / "mm.inputs.npz", x=rng.standard_normal((64, 256)).astype(np.float32))
    return path


def test_peak_memory_per_engine_in_its_own_process(tmp_path):
    path = _model(tmp_path)
    key = f"onnxplex[{run.DEFAULT_CONFIG}]"
    peaks = run.peak_memory(path, ["onnxruntime", key, "no-such-engine"], 1, timeout=120)
    for engine in ("onnxruntime", key):
        got = peaks[engine]
        assert "error" not in got, got
        # the import alone is tens of MiB; the session and its run add to it
        assert 10 < got["import_mib"] <= got["peak_mib"] < 4096
    assert "error" in peaks["no-such-engine"]   # (a bad engine is a row note, not a crash)

    row = run.run_model(path, [1], [run.DEFAULT_CONFIG], runs=3, warmups=0, creations=1,
                        budget=1.0)
    row["peak"], row["peak_threads"] = peaks, 1
    md = run.report([row], [1], [run.DEFAULT_CONFIG],
                    Namespace(runs=3, warmups=0, creations=1))
    assert "| peak MiB plex | peak plex/ort | peak plex/ov |" in md
    want = peaks[key]["peak_mib"] / peaks["onnxruntime"]["peak_mib"]
    assert f"| {peaks[key]['peak_mib']:.0f} | {want:.2f} |" in md
    assert "peak memory of no-such-engine" in md
