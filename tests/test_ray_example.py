"""examples/ray_batch_inference.py on a local Ray instance (opt-in: ``--runslow``; Ray is an
optional extra, ``pip install 'onnxplex[ray]'``, too heavy for the default suite)."""

from __future__ import annotations

import importlib
import pathlib
import sys

import numpy as np
import onnx
import pytest

import onnxplex

pytestmark = pytest.mark.slow

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'onnxplex[ray]')")
    pytest.importorskip("ray.data", reason="ray is installed without Ray Data "
                                           "(pip install 'ray[data]')")
    sys.path.insert(0, str(EXAMPLES))
    try:
        example = importlib.import_module("ray_batch_inference")
    finally:
        sys.path.remove(str(EXAMPLES))
    # the workers cannot import the example by name: ship its functions and class by value
    ray.cloudpickle.register_pickle_by_value(example)
    # logical CPUs: two actors plus one for the read tasks, whatever the machine has
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False,
             ignore_reinit_error=True)
    yield example
    ray.shutdown()


def _mlp_reference(model: bytes, x: np.ndarray) -> np.ndarray:
    w = {t.name: onnx.numpy_helper.to_array(t)
         for t in onnx.load_from_string(model).graph.initializer}
    h = np.maximum(x.astype(np.float64) @ w["w1"] + w["b1"], 0) @ w["w2"] + w["b2"]
    e = np.exp(h - h.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_each_worker_actor_keeps_one_session_and_results_match(ray_local):
    ex = ray_local
    model = ex.build_mlp()
    ds = ex.batch_inference(model, rows=3000, workers=2, batch_size=256)
    batches = list(ds.iter_batches(batch_format="numpy", batch_size=None))
    ids = np.concatenate([b["id"] for b in batches])
    probs = np.concatenate([b["probs"] for b in batches])
    workers = np.concatenate([b["worker"] for b in batches])
    assert sorted(ids.tolist()) == list(range(3000))       # every row once
    # two actors, and each kept the one session it built (one 'pid ... session ...' per pid)
    pids = {w.split()[1] for w in workers}
    assert len(pids) == 2 and len(set(workers)) == 2
    x = ex.features_for(ids, (32,))
    np.testing.assert_allclose(probs, _mlp_reference(model, x), rtol=1e-5, atol=1e-6)
    (local,) = onnxplex.InferenceSession(model).run(None, {"x": x})
    np.testing.assert_allclose(probs, local, rtol=1e-6, atol=1e-7)


def test_refuses_to_take_every_cpu(ray_local):
    with pytest.raises(ValueError, match="leave none for reading"):
        ray_local.batch_inference(ray_local.build_mlp(), rows=10, workers=3)


def test_example_main_with_a_model_path(ray_local, tmp_path, capsys):
    path = tmp_path / "mlp.onnx"
    path.write_bytes(ray_local.build_mlp(features=8, classes=3, seed=1))
    result = ray_local.main([str(path), "--rows", "700", "--workers", "1",
                             "--batch-size", "100"])
    assert result["rows"] == result["unique_ids"] == 700
    assert len(result["workers"]) == 1 and result["max_abs_diff"] < 1e-6
    assert "700 rows scored" in capsys.readouterr().out
