"""Smoke test of the model zoo (benchmarks/zoo): build its cheapest entries, compare engines.

    python -m pytest tests/test_zoo_smoke.py

Exports ``tiny_cnn`` (dynamo exporter), ``gru_bi`` and ``lstm_bi`` (TorchScript exporter: ONNX
GRU / LSTM) into ``tmp_path`` through ``benchmarks.zoo.build.build_one`` (the builder's own
code) and checks that onnxplex's outputs match onnxruntime's with the runner's comparison
(``benchmarks.zoo.run.compare``: rtol 1e-3, atol 1e-4). Needs torch (skipped only if torch is
not installed); takes about 20 s.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnxplex  # noqa: E402
from benchmarks.zoo import build, models, run  # noqa: E402

SMOKE = ["tiny_cnn", "gru_bi", "lstm_bi", "unet"]


def test_registry_is_complete():
    assert len(models.REGISTRY) >= 51   # the README's zoo table: 51 architectures
    for entry in models.REGISTRY.values():
        assert entry.exporter in ("dynamo", "torchscript")
        assert entry.outputs
        assert entry.target_opset in (17, 18)


@pytest.mark.parametrize("name", SMOKE)
def test_zoo_entry_matches_onnxruntime(name, tmp_path):
    path = build.build_one(name, tmp_path)
    assert path.exists() and (tmp_path / f"{name}.inputs.npz").exists()
    feeds = dict(np.load(tmp_path / f"{name}.inputs.npz"))

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref_sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    pso = onnxplex.SessionOptions()
    pso.intra_op_num_threads = 1
    sess = onnxplex.InferenceSession(str(path), pso, providers=["CPUExecutionProvider"])

    ref = ref_sess.run(None, {i.name: feeds[i.name] for i in ref_sess.get_inputs()})
    got = sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})
    ok, diff, problem = run.compare(ref, got, [o.name for o in ref_sess.get_outputs()])
    assert ok, problem
    assert diff < 1e-3

    if name in ("gru_bi", "lstm_bi"):  # exported as the ONNX recurrent op, not unrolled
        import onnx

        ops = {n.op_type for n in onnx.load(str(path)).graph.node}
        assert ("GRU" if name == "gru_bi" else "LSTM") in ops

    # skipped when present, rebuilt with force
    mtime = path.stat().st_mtime_ns
    assert build.build_one(name, tmp_path) == path and path.stat().st_mtime_ns == mtime
