"""float32 <-> float16 / bfloat16 natively (``_mlas_native.f32_to_half`` / ``half_to_f32``,
halfconv.h), both variants (this CPU's best and the portable one): every half bit pattern
widens to numpy's / ml_dtypes' float32, and float32 values of every exponent, exact ties,
subnormals, overflow and the specials round to their bits (a NaN stays a NaN of its sign);
cpu_mlas's Cast takes it for C-contiguous arrays, and a Cast between channels-last convs stays
channels-last."""

from __future__ import annotations

import collections

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex.providers.cpu_mlas._native import native

mod = native()
pytestmark = pytest.mark.skipif(mod is None or not hasattr(mod, "f32_to_half"),
                                reason="the _mlas_native module is not built")

HALVES = {"float16": (np.float16, False), "bfloat16": (ml_dtypes.bfloat16, True)}
VARIANTS = {"best": False, "portable": True}


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit, but NaN against NaN (of the same sign): a signalling NaN's payload may
    come out quiet."""
    gb, wb = got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}")
    with np.errstate(invalid="ignore"):
        g32, w32 = got.astype(np.float32), want.astype(np.float32)
    nan = np.isnan(w32)
    np.testing.assert_array_equal(np.isnan(g32), nan)
    np.testing.assert_array_equal(np.signbit(g32[nan]), np.signbit(w32[nan]))
    np.testing.assert_array_equal(gb[~nan], wb[~nan])


def _floats() -> np.ndarray:
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 300_001, dtype=np.uint64).astype(np.uint32)
    ties16 = (bits[:50_000] & ~np.uint32(0x1FFF)) | np.uint32(0x1000)
    ties_bf = (bits[:50_000] & ~np.uint32(0xFFFF)) | np.uint32(0x8000)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504, 65519.99, 65520,
                        -65520, 65536, 6.1035156e-05, 6.097555e-05, 5.96e-08, 2.98e-08,
                        2.99e-08, 1e-45, 3.4028235e38, -3.4028235e38, 1.0, -1.5],
                       np.float32)
    small = (rng.standard_normal(50_001) * 1e-5).astype(np.float32)   # float16 subnormals
    return np.concatenate([bits.view(np.float32), ties16.view(np.float32),
                           ties_bf.view(np.float32), special, small])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("half", HALVES)
def test_every_half_widens_exactly(half, variant):
    t, bf16 = HALVES[half]
    h = np.arange(65536, dtype=np.uint16).view(t)
    y = np.empty(h.shape, np.float32)
    mod.half_to_f32(h, y, bf16, portable=VARIANTS[variant])
    _same(y, h.astype(np.float32))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("half", HALVES)
def test_float32_rounds_as_numpy_and_ml_dtypes(half, variant):
    t, bf16 = HALVES[half]
    x = _floats()
    for n in (len(x), 7, 9, 17):   # (lengths off the vector width: the tails)
        y = np.empty(n, t)
        mod.f32_to_half(x[:n], y, bf16, portable=VARIANTS[variant])
        with np.errstate(all="ignore"):
            _same(y, x[:n].astype(t))


def test_binding_refuses_other_arrays():
    with pytest.raises(ValueError, match="float32"):
        mod.f32_to_half(np.zeros(8, np.float64), np.zeros(8, np.float16), False)
    with pytest.raises(ValueError, match="2 bytes"):
        mod.f32_to_half(np.zeros(8, np.float32), np.zeros(8, np.float32), False)
    with pytest.raises(ValueError, match="C-contiguous"):
        mod.half_to_f32(np.zeros(16, np.float16)[::2], np.zeros(8, np.float32), False)


def _cast_model(to: int, src: int, shape: list[int]):
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=to)], "g",
                          [helper.make_tensor_value_info("x", src, shape)],
                          [helper.make_tensor_value_info("y", to, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()


@pytest.mark.parametrize("half", HALVES)
def test_cast_kernel_both_ways(half):
    t, _ = HALVES[half]
    to = TensorProto.FLOAT16 if t is np.float16 else TensorProto.BFLOAT16
    x = _floats()[:200_000].reshape(400, 500)
    narrow = onnxplex.InferenceSession(_cast_model(to, TensorProto.FLOAT, [400, 500]))
    (y,) = narrow.run(None, {"x": x})
    with np.errstate(all="ignore"):
        _same(y, x.astype(t))
    (z,) = onnxplex.InferenceSession(_cast_model(TensorProto.FLOAT, to, [400, 500])).run(
        None, {"x": y})
    _same(z, y.astype(np.float32))
    # a view (not C-contiguous) goes through numpy's astype, with the same result
    (v,) = onnxplex.InferenceSession(_cast_model(to, TensorProto.FLOAT, [400, 250])).run(
        None, {"x": x[:, ::2]})
    with np.errstate(all="ignore"):
        _same(v, x[:, ::2].astype(t))


def test_cast_between_channels_last_convs_stays_channels_last():
    """Conv -> Cast(bfloat16) -> Cast(float) -> Conv (a bfloat16 conversion's Casts between
    two convs it left in float32): the Casts run channels-last, no Transpose between, and
    the model's rounding to bfloat16 is kept."""
    rng = np.random.default_rng(3)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 8, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Cast", ["a"], ["h"], to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["h"], ["b"], to=TensorProto.FLOAT),
             helper.make_node("Conv", ["b", "w2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [w1, w2])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    sess = onnxplex.InferenceSession(model.SerializeToString())
    ops = collections.Counter(s.op_type for s in sess._exec.steps)
    assert ops["Cast"] == 2 and ops["Transpose"] == 2, ops   # (the image in, the result out)
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    so = onnxplex.SessionOptions()
    so.graph_optimization_level = onnxplex.GraphOptimizationLevel.ORT_DISABLE_ALL
    (want,) = onnxplex.InferenceSession(model.SerializeToString(), so).run(None, {"x": x})
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)
