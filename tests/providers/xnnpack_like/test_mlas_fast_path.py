"""The cpu_mlas fast path of xnnpack_like (x86, no Kleidi kernel): convolutions, GEMMs, matmuls,
max pools and reductions run on cpu_mlas's native kernels (the report says ``mlas:<kernel>``,
and a spy on the cpu_mlas entry point sees the call), with onnxruntime's results (rtol 1e-4,
atol 1e-5); without the native module, the x86 policy declines them with the reason."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import helper

from onnxplex.providers.xnnpack_like import _mlas

from ._helpers import XP, declined, model, notes, session, vi
from .conftest import FORCE, MLAS, needs_kleidi
from .test_ops import CONVS, POOLS

F32 = np.float32
RNG = np.random.default_rng(11)
RTOL, ATOL = 1e-4, 1e-5

needs_native = pytest.mark.skipif(_mlas.kernels()[0] is None,
                                  reason=f"cpu_mlas's native kernels: {_mlas.kernels()[1]}")
pytestmark = [needs_native, pytest.mark.usefixtures("fast_path")]


def _w(*shape) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(F32)


def _same_as_onnxruntime(m: bytes, feed: dict):
    x = session(m, threads=2)
    ref = onnxruntime.InferenceSession(m, providers=["CPUExecutionProvider"])
    for got, want in zip(x.run(None, feed), ref.run(None, feed)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    return x


@pytest.fixture
def spy(monkeypatch):
    """``spy(obj, name)``: wraps ``obj.name``, returns the list of calls it records."""

    def install(obj, name):
        calls = []
        real = getattr(obj, name)

        def wrapper(*a, **kw):
            calls.append(name)
            return real(*a, **kw)

        monkeypatch.setattr(obj, name, wrapper)
        return calls

    return install


def _mlas_kernel(case: str) -> str:
    cin, cout, k, attrs, _, _ = CONVS[case]
    return _mlas.conv_kernel((cout, cin // attrs.get("group", 1), k, k), attrs.get("group", 1))


def test_kernel_names_by_group():
    assert _mlas.conv_kernel((16, 8, 3, 3), 1) == "mlas:conv2d_nhwc"
    assert _mlas.conv_kernel((8, 1, 3, 3), 8) == "mlas:dwconv_nhwc"
    assert _mlas.conv_kernel((16, 4, 3, 3), 2) == "mlas:gconv_nhwc"
    assert _mlas.conv_kernel((12, 4, 3, 3), 2) == "mlas:conv_nchw_transposed"


@pytest.mark.parametrize("case", sorted(CONVS) + ["grouped_by_8"])
def test_conv_runs_on_cpu_mlas_native(case, spy):
    from onnxplex.providers.cpu_mlas import nn

    cin, cout, k, attrs, _, _ = CONVS.get(case) or (16, 16, 3, dict(group=2, pads=[1, 1, 1, 1]),
                                                    "", "")
    group = attrs.get("group", 1)
    calls = spy(nn, "_conv_nhwc")
    inits = {"w": _w(cout, cin // group, k, k), "b": _w(cout)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", **attrs),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    m = model(nodes, [vi("x", [2, cin, 9, 10])], [vi("y", None)], inits)
    feed = {"x": RNG.standard_normal((2, cin, 9, 10)).astype(F32)}
    x = _same_as_onnxruntime(m, feed)
    want = _mlas.conv_kernel((cout, cin // group, k, k), group)
    assert f"-> {want} + Relu" in notes(x)["conv"], notes(x)["conv"]
    assert calls, "cpu_mlas's _conv_nhwc was not called"


def test_conv_residual_and_other_activations(spy):
    from onnxplex.providers.cpu_mlas import nn

    calls = spy(nn, "_conv_nhwc")
    inits = {"w1": _w(8, 8, 3, 3), "b1": _w(8), "w2": _w(8, 1, 3, 3)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="dense", pads=[1] * 4),
             helper.make_node("Add", ["c1", "x"], ["s"], name="add"),
             helper.make_node("Sigmoid", ["s"], ["g"], name="sig"),
             helper.make_node("Conv", ["g", "w2"], ["c2"], name="dw", group=8, pads=[1] * 4),
             helper.make_node("HardSwish", ["c2"], ["y"], name="hs")]
    m = model(nodes, [vi("x", [1, 8, 12, 12])], [vi("y", None)], inits)
    x = _same_as_onnxruntime(m, {"x": RNG.standard_normal((1, 8, 12, 12)).astype(F32)})
    nn_ = notes(x)
    assert "-> mlas:conv2d_nhwc + residual Add + Sigmoid" in nn_["dense"], nn_["dense"]
    assert "-> mlas:dwconv_nhwc + HardSwish" in nn_["dw"], nn_["dw"]
    assert len(calls) == 2


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_and_matmul_run_on_the_packed_sgemm(trans_b, spy):
    from onnxplex.providers.cpu_mlas import _blas

    calls = spy(_blas, "gemm_plan")
    k, n = 96, 80
    b = _w(n, k) if trans_b else _w(k, n)
    inits = {"b": b, "c": _w(n), "w2": _w(n, 40)}
    nodes = [helper.make_node("Gemm", ["a", "b", "c"], ["g"], name="gemm", transB=trans_b),
             helper.make_node("Relu", ["g"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm")]
    m = model(nodes, [vi("a", [24, k])], [vi("y", None)], inits)
    x = _same_as_onnxruntime(m, {"a": RNG.standard_normal((24, k)).astype(F32)})
    assert notes(x)["gemm"].startswith("fully_connected: pf32_gemm -> mlas:sgemm + Relu")
    assert notes(x)["mm"].startswith("fully_connected: pf32_gemm -> mlas:sgemm")
    assert len(calls) == 2


def test_batch_matmul_runs_on_the_pool_split_matmul(spy, monkeypatch):
    from onnxplex.providers.cpu_mlas import _blas

    # (on x86 the policy leaves a batch matmul to cpu_mlas: test_x86_policy)
    monkeypatch.setattr(_mlas, "is_x86", lambda: False)
    calls = spy(_blas, "matmul")
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"], name="bmm")]
    m = model(nodes, [vi("a", [3, 40, 32]), vi("b", [3, 32, 48])], [vi("y", None)])
    feed = {"a": RNG.standard_normal((3, 40, 32)).astype(F32),
            "b": RNG.standard_normal((3, 32, 48)).astype(F32)}
    x = _same_as_onnxruntime(m, feed)
    assert notes(x)["bmm"].startswith("batch_matmul: pf32_gemm -> mlas:matmul_pool")
    assert calls


@pytest.mark.parametrize("case", sorted(c for c in POOLS if c.startswith("max")))
def test_max_pool_runs_on_the_native_nhwc_kernel(case, spy):
    calls = spy(_mlas.kernels()[0].nat, "maxpool_nhwc_f32")
    op, attrs = POOLS[case]
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node(op, ["r"], ["p"], name="pool", **attrs),
             helper.make_node("Neg", ["p"], ["y"])]
    m = model(nodes, [vi("x", (1, 5, 9, 8))], [vi("y", None)], opset=19)
    x = _same_as_onnxruntime(m, {"x": RNG.standard_normal((1, 5, 9, 8)).astype(F32)})
    assert notes(x)["pool"] == "pooling -> mlas:maxpool_nhwc"
    assert calls


def test_global_pool_and_reductions_use_cpu_mlas_kernels():
    inits = {"axes23": np.array([2, 3], np.int64)}
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["gap"], name="gap"),
             helper.make_node("ReduceMean", ["r", "axes23"], ["m"], name="mean", keepdims=0)]
    m = model(nodes, [vi("x", [2, 6, 40, 40])], [vi("gap", None), vi("m", None)], inits,
              opset=18)
    x = _same_as_onnxruntime(m, {"x": RNG.standard_normal((2, 6, 40, 40)).astype(F32)})
    assert notes(x)["gap"] == "pooling -> mlas:global_mean_nhwc"
    assert notes(x)["mean"] == "reduction -> mlas:reduce_mean_nhwc"


def test_fp16_conv_computes_in_float32_on_cpu_mlas():
    inits = {"w": _w(8, 4, 3, 3).astype(np.float16), "b": _w(8).astype(np.float16)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[1] * 4)]
    m = model(nodes, [vi("x", [1, 4, 10, 10], 10)], [vi("y", None, 10)], inits)
    feed = {"x": RNG.standard_normal((1, 4, 10, 10)).astype(np.float16)}
    x = session(m)
    assert "-> mlas:conv2d_nhwc" in notes(x)["conv"]
    (y,) = x.run(None, feed)
    (ref,) = onnxruntime.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feed)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(F32), ref.astype(F32), rtol=1e-2, atol=1e-2)


def test_option_and_environment_turn_it_off(monkeypatch):
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1] * 4)]
    m = model(nodes, [vi("x", [1, 4, 8, 8])], [vi("y", None)], {"w": _w(4, 4, 3, 3)})
    off = session(m, [(XP, {"mlas": 0}), "cpu_mlas"])
    assert "-> own:im2col_gemm" in notes(off)["conv"]
    monkeypatch.setenv(MLAS, "0")
    assert "-> own:im2col_gemm" in notes(session(m))["conv"]


@needs_kleidi
def test_kleidi_first_then_cpu_mlas(monkeypatch):
    monkeypatch.setenv(FORCE, "1")
    inits = {"w": _w(8, 4, 1, 1), "w3": _w(8, 8, 3, 3)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="pw"),
             helper.make_node("Conv", ["c", "w3"], ["y"], name="k3", pads=[1] * 4)]
    m = model(nodes, [vi("x", [1, 4, 8, 8])], [vi("y", None)], inits)
    x = session(m)
    assert "-> kleidi:gemm_f32/reference" in notes(x)["pw"]
    assert "-> mlas:conv2d_nhwc" in notes(x)["k3"]


@pytest.mark.skipif(not _mlas.is_x86(), reason="the decline policy is x86's")
def test_without_the_native_module_x86_declines_with_the_reason(monkeypatch):
    monkeypatch.setattr(_mlas, "kernels", lambda: (None, "test: no _mlas_native"))
    inits = {"w": _w(4, 4, 3, 3), "b": _w(24, 16)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("Relu", ["p"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "b"], ["y"], name="mm")]
    m = model(nodes, [vi("x", [1, 4, 4, 6])], [vi("y", None)], inits)
    x = session(m)
    for name in ("conv", "pool", "mm"):
        why = declined(x, name)
        assert why.startswith("on x86 without cpu_mlas's native kernels (test: no "
                              "_mlas_native)"), why
        assert why.endswith("would be slower than cpu_mlas's: left to cpu_mlas")
    # the Relu left alone between them: a partition of elementwise ops only gains nothing
    assert declined(x, "relu").startswith("on x86 a partition of only elementwise / shape ops")
    report = x.get_provider_assignment().explain()
    assert "test: no _mlas_native" in report
    feed = {"x": RNG.standard_normal((1, 4, 4, 6)).astype(F32)}
    (y,) = x.run(None, feed)
    (ref,) = onnxruntime.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feed)
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)
