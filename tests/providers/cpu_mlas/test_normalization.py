"""cpu_mlas normalization and softmax kernels (BatchNormalization, InstanceNormalization, LRN,
LayerNormalization, Softmax, LogSoftmax) against onnxruntime, or onnx's reference evaluator where
ORT lacks the opset or attribute value."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from kernel_harness import node_model
from onnx import TensorProto

from onnxplex import load_model
from onnxplex.providers.cpu_mlas._provider import CpuMlasProvider

from ._oracle import check, ours

ort.set_default_logger_severity(3)

RNG = np.random.default_rng(4321)
TOL = dict(rtol=1e-4, atol=1e-5)
HALF_TOL = dict(rtol=1e-2, atol=1e-2)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def decline_reason(op_type: str, inputs, n_outputs: int = 1, **kw) -> str:
    """Why cpu_mlas declines the node (its outputs declared float: onnx shape inference does
    not type training-mode BatchNormalization outputs)."""
    m = node_model(op_type, inputs, n_outputs, **kw)
    for o in m.graph.output:
        o.type.tensor_type.elem_type = TensorProto.FLOAT
    config, reason = CpuMlasProvider.op_table.lookup(load_model(m).node_views[0])
    assert config is None
    return reason


# --------------------------------------------------------------------------------------------
# Normalizations
# --------------------------------------------------------------------------------------------


def bn_inputs(c: int = 4, dtype=np.float32, shape=(2, 4, 5, 6)) -> list[np.ndarray]:
    return [rand(*shape, dtype=dtype), rand(c, dtype=dtype), rand(c, dtype=dtype),
            rand(c, dtype=dtype), (np.abs(rand(c)) + 0.5).astype(dtype)]


@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("opset", [7, 9, 14, 15])
def test_batch_norm(opset, const):
    check("BatchNormalization", bn_inputs(), opset=opset, epsilon=1e-3, oracle="ort",
          const_inputs=[1, 2, 3, 4] if const else [], **TOL)


def test_batch_norm_opset6_and_spatial0():
    check("BatchNormalization", bn_inputs(), opset=6, is_test=1, oracle="ref", **TOL)
    # spatial=0: per-activation statistics of shape [C, H, W]
    x, *_ = bn_inputs()
    scale, bias, mean, var = rand(4, 5, 6), rand(4, 5, 6), rand(4, 5, 6), np.abs(rand(4, 5, 6))
    got = ours("BatchNormalization", [x, scale, bias, mean, var], opset=7, spatial=0)[0]
    want = (x - mean) / np.sqrt(var + 1e-5) * scale + bias
    np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("shape", [(3, 4), (2, 4, 7), (1, 4, 2, 3, 3)])
def test_batch_norm_ranks(shape):
    check("BatchNormalization", bn_inputs(shape=shape), opset=15, oracle="ort", **TOL)


def test_batch_norm_float16():
    check("BatchNormalization", bn_inputs(dtype=np.float16), opset=15, oracle="ort", **HALF_TOL)


@pytest.mark.parametrize("opset,attrs,n_out,needle", [
    (6, dict(is_test=0), 1, "is_test=0"),
    (9, {}, 5, "training outputs"),
])
def test_batch_norm_training_declined(opset, attrs, n_out, needle):
    assert needle in decline_reason("BatchNormalization", bn_inputs(), n_out, opset=opset,
                                    **attrs)


@pytest.mark.parametrize("opset,shape,momentum", [(14, (2, 4, 5, 6), None),
                                                  (15, (3, 4), 0.7), (15, (2, 4, 3, 2, 2), 0.9)])
def test_batch_norm_training_mode(opset, shape, momentum):
    # training_mode=1: the batch's own statistics, and the running ones as outputs 1 and 2
    # (onnx's shape inference asks for all three; it leaves them untyped, so they are typed
    # here by hand).
    import onnxruntime as ort

    import onnxplex

    inputs = bn_inputs(shape=shape)
    attrs = {"training_mode": 1} | ({} if momentum is None else {"momentum": momentum})
    m = node_model("BatchNormalization", inputs, 3, opset=opset, epsilon=1e-3, **attrs)
    for o in m.graph.output:
        o.type.tensor_type.elem_type = TensorProto.FLOAT
    feeds = {f"in{i}": a for i, a in enumerate(inputs)}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]
                                ).run(None, feeds)
    got = onnxplex.InferenceSession(m.SerializeToString(), providers=[
        ("cpu_mlas", {"reference_fallback": False})]).run(None, feeds)
    assert len(got) == 3
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **TOL)


@pytest.mark.parametrize("opset", [6, 22])
@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (2, 3, 7), (1, 3, 2, 3, 4)])
def test_instance_norm(shape, opset):
    check("InstanceNormalization", [rand(*shape), rand(3), rand(3)], opset=opset,
          epsilon=1e-3, **TOL)


def test_instance_norm_float16():
    check("InstanceNormalization", [rand(2, 3, 5, 4, dtype=np.float16),
                                    rand(3, dtype=np.float16), rand(3, dtype=np.float16)],
          opset=6, **HALF_TOL)


@pytest.mark.parametrize("size", [1, 3, 5, 9])
@pytest.mark.parametrize("opset", [1, 13])
def test_lrn(opset, size):
    check("LRN", [rand(2, 7, 3, 4)], opset=opset, oracle="ort", size=size, alpha=1e-3,
          beta=0.8, bias=1.5, **TOL)


@pytest.mark.parametrize("size", [2, 4])
def test_lrn_even_size(size):
    # ORT rejects even sizes (and the reference evaluator's LRN loops over the wrong axis);
    # the ONNX formula: channels [c - floor((size-1)/2), c + ceil((size-1)/2)].
    x = rand(2, 7, 3, 4)
    got = ours("LRN", [x], opset=13, size=size, alpha=0.01, beta=0.5, bias=2.0)[0]
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    sq = np.stack([(x[:, max(0, c - lo):c + hi + 1] ** 2).sum(axis=1) for c in range(7)], 1)
    np.testing.assert_allclose(got, x / (2.0 + 0.01 / size * sq) ** 0.5, **TOL)


@pytest.mark.parametrize("n_out", [1, 2, 3])
@pytest.mark.parametrize("axis,pshape,bias", [
    (-1, (6,), True), (-1, (6,), False), (1, (4, 5, 6), True), (-2, (5, 6), True),
    (0, (3, 4, 5, 6), True),
])
def test_layer_norm(axis, pshape, bias, n_out):
    inputs = [rand(3, 4, 5, 6), rand(*pshape)] + ([rand(*pshape)] if bias else [])
    check("LayerNormalization", inputs, n_out, opset=17, axis=axis, epsilon=1e-3,
          oracle="ort", **TOL)


def test_layer_norm_float16():
    inputs = [rand(2, 5, 8, dtype=np.float16), rand(8, dtype=np.float16),
              rand(8, dtype=np.float16)]
    got = check("LayerNormalization", inputs, 3, opset=17, oracle="ort", **HALF_TOL)
    assert got[1].dtype == np.float32  # Mean/InvStdDev in stash_type (float32)


def test_layer_norm_stash_double():
    # neither ORT nor the reference evaluator implement stash_type=double: compare with float
    inputs = [rand(2, 5, 8), rand(8), rand(8)]
    got = ours("LayerNormalization", inputs, 3, opset=17, stash_type=11)
    want = ours("LayerNormalization", inputs, 3, opset=17)
    assert got[0].dtype == np.float32 and got[1].dtype == np.float64
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **TOL)


# --------------------------------------------------------------------------------------------
# Softmax / LogSoftmax
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [1, 11, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -3])
def test_softmax(op_type, opset, axis):
    # opset < 13 flattens to 2-D at `axis` (default 1); opset 13 is per-axis (default -1)
    attrs = {} if axis is None else dict(axis=axis)
    check(op_type, [rand(2, 3, 4, 5) * 3], opset=opset, oracle="ort", **attrs, **TOL)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("case", ["wide_range", "masked"])
def test_softmax_row_max_path(op_type, case):
    # values beyond +-60 (or -inf masks) take the per-row max-shifted path
    x = rand(3, 4, 9) * 40
    if case == "masked":
        x = rand(3, 4, 9)
        x[:, :, 5:] = -np.inf
    check(op_type, [x], opset=13, oracle="ort", **TOL)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
def test_softmax_float16_and_1d(op_type):
    check(op_type, [rand(3, 7, dtype=np.float16)], opset=13, oracle="ort", **HALF_TOL)
    check(op_type, [rand(7)], opset=13, oracle="ort", **TOL)
    check(op_type, [rand(7)], opset=11, axis=0, oracle="ort", **TOL)
