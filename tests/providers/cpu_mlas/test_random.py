"""cpu_mlas random generators: seeded runs match onnx's reference evaluator (numpy's legacy
RandomState) and repeat across runs and threads; unseeded runs differ; dtypes and shapes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

import onnxplex


def _model(op_type: str, x: np.ndarray | None, out_type: int = TP.UNDEFINED, opset: int = 22,
           **attrs) -> onnx.ModelProto:
    ins = [] if x is None else [oh.make_tensor_value_info(
        "x", oh.np_dtype_to_tensor_dtype(x.dtype), x.shape)]
    node = oh.make_node(op_type, [] if x is None else ["x"], ["y"], **attrs)
    g = oh.make_graph([node], "g", ins, [oh.make_tensor_value_info("y", out_type, None)])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)


def _session(m: onnx.ModelProto) -> onnxplex.InferenceSession:
    return onnxplex.InferenceSession(m.SerializeToString(), providers=["cpu_mlas"])


def _feeds(x):
    return {} if x is None else {"x": x}


X = np.random.default_rng(0).uniform(0, 1, (4, 6)).astype(np.float32)

SEEDED = [
    ("RandomNormal", None, dict(shape=[3, 5], mean=1.5, scale=2.0)),
    ("RandomNormal", None, dict(shape=[3, 5], dtype=TP.DOUBLE)),
    ("RandomUniform", None, dict(shape=[7], low=-2.0, high=3.0)),
    ("RandomUniform", None, dict(shape=[2, 2], dtype=TP.FLOAT16)),
    ("RandomNormalLike", X, dict(mean=-1.0)),
    ("RandomUniformLike", X, dict(low=1.0, high=2.0, dtype=TP.DOUBLE)),
    ("Bernoulli", X, {}),
    ("Bernoulli", X.astype(np.float64), dict(dtype=TP.FLOAT)),
]


@pytest.mark.parametrize("op_type,x,attrs", SEEDED, ids=[f"{o}-{i}" for i, (o, _, _) in
                                                        enumerate(SEEDED)])
def test_seeded_matches_reference_and_repeats(op_type, x, attrs):
    m = _model(op_type, x, seed=5.0, **attrs)
    sess = _session(m)
    (a,) = sess.run(None, _feeds(x))
    (b,) = sess.run(None, _feeds(x))
    (want,) = ReferenceEvaluator(m).run(None, _feeds(x))
    assert a.dtype == np.asarray(want).dtype and a.shape == np.asarray(want).shape
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a.astype(np.float64), np.asarray(want, np.float64), rtol=1e-6)


@pytest.mark.parametrize("op_type,x,attrs", SEEDED[:1] + SEEDED[4:7],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_unseeded_differs_between_runs(op_type, x, attrs):
    if op_type == "Bernoulli":
        x = np.full((64, 64), 0.5, np.float32)
    sess = _session(_model(op_type, x, **attrs))
    (a,) = sess.run(None, _feeds(x))
    (b,) = sess.run(None, _feeds(x))
    assert not np.array_equal(a, b)  # generators without inputs must not be constant-folded


def test_seeded_runs_agree_across_threads():
    x = np.zeros((50, 50), np.float32)
    sess = _session(_model("RandomNormalLike", x, seed=3.0))
    (want,) = sess.run(None, {"x": x})
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda _: sess.run(None, {"x": x})[0], range(32)))
    for o in outs:
        np.testing.assert_array_equal(o, want)


def test_unseeded_threads_are_independent():
    sess = _session(_model("RandomUniform", None, shape=[1000]))
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda _: sess.run(None, {})[0], range(16)))
    assert len({o.tobytes() for o in outs}) == len(outs)


def test_distributions_and_dtypes():
    (u,) = _session(_model("RandomUniform", None, shape=[20000], low=-1.0, high=3.0,
                           dtype=TP.BFLOAT16)).run(None, {})
    assert u.dtype == ml_dtypes.bfloat16 and u.shape == (20000,)
    uf = u.astype(np.float32)
    assert uf.min() >= -1 and uf.max() <= 3 and abs(uf.mean() - 1) < 0.05
    (n,) = _session(_model("RandomNormal", None, shape=[200, 100], mean=2.0, scale=0.5)
                    ).run(None, {})
    assert n.dtype == np.float32 and abs(n.mean() - 2) < 0.02 and abs(n.std() - 0.5) < 0.02
    p = np.linspace(0, 1, 11, dtype=np.float32)
    (b,) = _session(_model("Bernoulli", np.tile(p, (3000, 1)), dtype=TP.INT32)).run(
        None, {"x": np.tile(p, (3000, 1))})
    assert b.dtype == np.int32 and set(np.unique(b)) <= {0, 1}
    np.testing.assert_allclose(b.mean(axis=0), p, atol=0.04)
    assert b[:, 0].sum() == 0 and b[:, -1].all()


@pytest.mark.parametrize("dtype", [TP.INT32, TP.INT64])
def test_multinomial(dtype):
    probs = np.array([[0.1, 0.2, 0.7, 0.0], [0.0, 0.0, 0.0, 1.0], [0.25] * 4], np.float32)
    with np.errstate(divide="ignore"):
        x = np.log(probs)
    m = _model("Multinomial", x, dtype, opset=22, sample_size=20000, dtype=dtype, seed=1.0)
    sess = _session(m)
    (a,) = sess.run(None, {"x": x})
    (b,) = sess.run(None, {"x": x})
    assert a.dtype == oh.tensor_dtype_to_np_dtype(dtype) and a.shape == (3, 20000)
    np.testing.assert_array_equal(a, b)
    freq = np.stack([np.bincount(r, minlength=4) / r.size for r in a])
    np.testing.assert_allclose(freq, probs, atol=0.02)
    assert freq[0, 3] == 0 and (a[1] == 3).all()


def test_bernoulli_rejects_bad_probabilities():
    sess = _session(_model("Bernoulli", np.zeros(2, np.float32)))
    with pytest.raises(onnxplex.OnnxplexError):
        sess.run(None, {"x": np.array([0.5, 1.5], np.float32)})
