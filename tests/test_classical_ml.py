"""The classical-ML zoo (``benchmarks/classical_zoo.py``) in onnxplex against onnxruntime.

Every model scikit-learn, LightGBM and XGBoost users convert with skl2onnx / onnxmltools'
defaults (ZipMap'd classifiers, string columns, text pipelines with com.microsoft::Tokenizer, a
DictVectorizer's map input): onnxplex (default providers) must load it, give the same input
and output names and type strings as onnxruntime, and the same outputs at batch 1 and a batch
of 100 (the map input holds one row: batch 1 only): labels exactly, probabilities and scores
rtol 1e-4 atol 1e-5, ZipMap's list of dicts row by row and key by key. A model is skipped only
when a package it is built with is missing. Each model is built once per session (and cached on
disk by the zoo, keyed by library versions).
"""

from __future__ import annotations

import pytest
from classical_zoo_loader import load_zoo

import onnxplex

ort = pytest.importorskip("onnxruntime")

BATCH = 100


zoo = load_zoo()


@pytest.fixture(scope="module")
def zoo_model():
    """name -> the built ZooModel, built at most once in the module."""
    built: dict[str, object] = {}
    zoo.ort_locale()  # onnxruntime's StringNormalizer wants en_US.UTF-8 (see the zoo)

    def get(name: str):
        for module in zoo.requirements(name):
            pytest.importorskip(module)
        if name not in built:
            built[name] = zoo.build(name)
        return built[name]

    return get


def _sessions(z):
    ref = ort.InferenceSession(z.bytes, providers=["CPUExecutionProvider"])
    return onnxplex.InferenceSession(z.bytes), ref


@pytest.mark.parametrize("name", zoo.model_names())
def test_matches_onnxruntime(zoo_model, name):
    z = zoo_model(name)
    sess, ref = _sessions(z)
    names = [o.name for o in ref.get_outputs()]
    assert [o.name for o in sess.get_outputs()] == names
    for batch in sorted({1, min(BATCH, z.max_batch)}):
        feeds = z.feeds(batch)
        diff = zoo.compare(ref.run(None, feeds), sess.run(None, feeds), names, z.labels)
        assert not diff, f"{name} at batch {batch}: " + "; ".join(diff)


@pytest.mark.parametrize("name", zoo.model_names())
def test_io_types_match_onnxruntime(zoo_model, name):
    """get_inputs()/get_outputs(): names and type strings as onnxruntime prints them
    (``seq(map(int64,tensor(float)))``, ``map(string,tensor(float))``)."""
    z = zoo_model(name)
    sess, ref = _sessions(z)
    for ours, theirs in ((sess.get_inputs(), ref.get_inputs()),
                         (sess.get_outputs(), ref.get_outputs())):
        assert [(a.name, a.type) for a in ours] == [(a.name, a.type) for a in theirs]
