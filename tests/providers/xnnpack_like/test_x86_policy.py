"""The x86 policy of xnnpack_like with cpu_mlas's native kernels: what the delegate could only
run slower than cpu_mlas is declined, with the reason in the placement report (transformer ops
cpu_mlas has native / fused kernels for, matmuls without a channels-last layout to keep,
partitions of elementwise / shape ops only); a SiLU after a conv runs in the conv's epilogue
(cpu_mlas's native Swish). Results: onnxruntime's, rtol 1e-4 / atol 1e-5."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper

from onnxplex.providers.xnnpack_like import _mlas

from ._helpers import XP, declined, model, notes, session, vi

F32 = np.float32
RNG = np.random.default_rng(5)
RTOL, ATOL = 1e-4, 1e-5

pytestmark = [pytest.mark.skipif(not _mlas.is_x86() or _mlas.kernels()[0] is None,
                                 reason="the policy of x86 with cpu_mlas's native kernels"),
              pytest.mark.usefixtures("fast_path")]


def _w(*shape) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(F32)


def _check(x, m: bytes, feed: dict) -> None:
    ref = onnxruntime.InferenceSession(m, providers=["CPUExecutionProvider"])
    for got, want in zip(x.run(None, feed), ref.run(None, feed)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def _encoder_block() -> tuple[bytes, dict]:
    """LayerNorm -> projection (rank 3) -> Gelu, and attention-like products with a Softmax."""
    d, s = 16, 6
    inits = {"g": np.ones(d, F32), "beta": np.zeros(d, F32), "wq": _w(d, d), "wk": _w(d, d),
             "axes": np.array([-1], np.int64)}
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "beta"], ["ln"], name="ln",
                              axis=-1),
             helper.make_node("MatMul", ["ln", "wq"], ["q"], name="proj_q"),
             helper.make_node("MatMul", ["ln", "wk"], ["k"], name="proj_k"),
             helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["sc"], name="scores"),
             helper.make_node("Softmax", ["sc"], ["p"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["p", "q"], ["ctx"], name="context"),
             helper.make_node("Gelu", ["ctx"], ["ge"], name="gelu"),
             helper.make_node("ReduceMean", ["ge", "axes"], ["y"], name="mean")]
    m = model(nodes, [vi("x", [2, s, d])], [vi("y", None)], inits, opset=20)
    return m, {"x": RNG.standard_normal((2, s, d)).astype(F32)}


def test_transformer_ops_are_left_to_cpu_mlas_with_the_reason():
    m, feed = _encoder_block()
    x = session(m)
    native = "on x86 cpu_mlas runs {} on a native kernel"
    assert declined(x, "ln").startswith(native.format("LayerNormalization"))
    assert declined(x, "softmax").startswith(native.format("Softmax"))
    assert declined(x, "gelu").startswith(native.format("Gelu"))
    assert declined(x, "proj_q").startswith("on x86 a MatMul of a rank-3 activation")
    assert declined(x, "scores").startswith("on x86 a MatMul of two computed tensors")
    assert declined(x, "mean").startswith("on x86 a ReduceMean of a rank-3 tensor")
    # the Transpose left alone: a partition of shape ops only is declined too
    assert declined(x, "kt").startswith("on x86 a partition of only elementwise / shape ops")
    counts = x.get_provider_assignment().counts()
    assert counts.get(XP, 0) == 0, counts
    assert "rank-3 activation" in x.get_provider_assignment().explain()
    _check(x, m, feed)


def test_the_mlas_option_turns_the_policy_off():
    m, feed = _encoder_block()
    x = session(m, [(XP, {"mlas": 0}), "cpu_mlas"])
    assert notes(x)["ln"] and notes(x)["softmax"] and notes(x)["proj_q"]
    assert not declined(x, "ln")
    _check(x, m, feed)


def test_rank4_reductions_and_rank2_gemms_stay_in_the_partition():
    inits = {"w": _w(8, 4, 3, 3), "axes": np.array([2, 3], np.int64), "fc": _w(8, 5)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("ReduceMean", ["c", "axes"], ["m"], name="mean", keepdims=0),
             helper.make_node("MatMul", ["m", "fc"], ["y"], name="fc")]
    m = model(nodes, [vi("x", [2, 4, 7, 7])], [vi("y", None)], inits, opset=18)
    x = session(m)
    assert notes(x)["mean"] == "reduction -> mlas:reduce_mean_nhwc"
    assert "-> mlas:sgemm" in notes(x)["fc"]
    _check(x, m, {"x": RNG.standard_normal((2, 4, 7, 7)).astype(F32)})


def test_an_elementwise_only_partition_is_declined_but_a_conv_keeps_its_neighbours():
    alone = model([helper.make_node("Add", ["a", "b"], ["s"], name="add"),
                   helper.make_node("Relu", ["s"], ["y"], name="relu")],
                  [vi("a", [1, 4, 5, 5]), vi("b", [1, 4, 5, 5])], [vi("y", None)])
    x = session(alone)
    for name in ("add", "relu"):
        assert declined(x, name).startswith("on x86 a partition of only elementwise")
    with_conv = model([helper.make_node("Add", ["a", "b"], ["s"], name="add"),
                       helper.make_node("Conv", ["s", "w"], ["y"], name="conv")],
                      [vi("a", [1, 4, 5, 5]), vi("b", [1, 4, 5, 5])], [vi("y", None)],
                      {"w": _w(4, 4, 1, 1)})
    x = session(with_conv)
    assert notes(x)["add"].startswith("elementwise") and "mlas:conv2d_nhwc" in notes(x)["conv"]


@pytest.mark.parametrize("mlas", [1, 0], ids=["mlas", "own"])
def test_silu_after_a_conv_runs_in_its_epilogue(mlas, monkeypatch):
    from onnxplex.providers.cpu_mlas import nn

    calls = []
    real = nn._conv_nhwc
    monkeypatch.setattr(nn, "_conv_nhwc", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    inits = {"w": _w(12, 6, 3, 3), "b": _w(12)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("Sigmoid", ["c"], ["s"], name="sig"),
             helper.make_node("Mul", ["c", "s"], ["y"], name="mul")]
    m = model(nodes, [vi("x", [1, 6, 9, 9])], [vi("y", None)], inits)
    x = session(m, [(XP, {"mlas": mlas}), "cpu_mlas"])
    nt = notes(x)
    assert nt["conv"].endswith(" + Swish"), nt["conv"]
    assert nt["sig"].startswith("folded into 'conv'") and nt["mul"].startswith("folded into")
    _check(x, m, {"x": RNG.standard_normal((1, 6, 9, 9)).astype(F32)})
    if mlas:   # the native kernel's own Swish (post_act 1), not a numpy pass after it
        assert calls and all(st.post_act == 1 for st in calls)
    else:
        assert not calls


@pytest.mark.parametrize("op", ["Gemm", "MatMul"])
def test_a_gemm_of_a_flattened_sequence_is_left_to_cpu_mlas(op):
    """GPT-2's layers reshape the [batch, seq, d] activations to rank 2 around each Gemm: the
    GEMM is declined as a sequence model's projection (claiming it blocks cpu_mlas's bias +
    Gelu and layer-norm fusions); a Gemm of a rank-2 graph input (a classifier head) is not."""
    d, s = 16, 6
    inits = {"w": _w(d, 2 * d), "b": _w(2 * d), "flat": np.array([-1, d], np.int64),
             "back": np.array([2, s, 2 * d], np.int64)}
    gemm = helper.make_node(op, ["f", "w", "b"] if op == "Gemm" else ["f", "w"], ["g"],
                            name="proj")
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["f"], name="flatten"), gemm,
             helper.make_node("Reshape", ["g", "back"], ["y"], name="unflatten"),
             helper.make_node(op, ["h", "w", "b"] if op == "Gemm" else ["h", "w"], ["z"],
                              name="head")]
    m = model(nodes, [vi("x", [2, s, d]), vi("h", [3, d])], [vi("y", None), vi("z", None)],
              inits, opset=17)
    x = session(m)
    assert "reshaped to rank 2" in declined(x, "proj"), declined(x, "proj")
    assert declined(x, "head") == ""
    _check(x, m, {"x": RNG.standard_normal((2, s, d)).astype(F32),
                  "h": RNG.standard_normal((3, d)).astype(F32)})


def test_a_partition_with_too_little_work_is_left_to_cpu_mlas(monkeypatch):
    """Under the cutoff (multiply-adds from the static shapes) a claimed group goes back to
    cpu_mlas with the reason: its dispatch and boundary would cost more than it saves. The
    same model is claimed with the cutoff lifted, and above it."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    m = model(nodes, [vi("x", [1, 8, 16, 16])], [vi("y", None)], {"w": _w(8, 8, 3, 3)})
    feed = {"x": RNG.standard_normal((1, 8, 16, 16)).astype(F32)}
    monkeypatch.delenv(_mlas.MIN_MACS_ENV, raising=False)   # the default: 4 M
    x = session(m)
    assert "multiply-adds (under 4,000,000;" in declined(x, "conv"), declined(x, "conv")
    _check(x, m, feed)
    monkeypatch.setenv(_mlas.MIN_MACS_ENV, "100000")   # 147,456 multiply-adds: above
    assert declined(session(m), "conv") == ""
    monkeypatch.setenv(_mlas.MIN_MACS_ENV, "0")
    assert declined(session(m), "conv") == ""


def _squeeze_excite() -> tuple[bytes, dict]:
    """conv -> squeeze-excite gate -> 1x1 conv on 24x24: ~0.9 M multiply-adds, under the
    small-partition cutoff the tests lift."""
    c, r = 16, 4
    inits = {"w1": _w(c, 8, 3, 3), "ws": _w(r, c, 1, 1), "we": _w(c, r, 1, 1),
             "w3": _w(24, c, 1, 1)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("GlobalAveragePool", ["c"], ["p"], name="pool"),
             helper.make_node("Conv", ["p", "ws"], ["s"], name="squeeze"),
             helper.make_node("Relu", ["s"], ["sr"], name="relu"),
             helper.make_node("Conv", ["sr", "we"], ["e"], name="excite"),
             helper.make_node("Sigmoid", ["e"], ["g"], name="gate"),
             helper.make_node("Mul", ["c", "g"], ["cg"], name="scale"),
             helper.make_node("Conv", ["cg", "w3"], ["y"], name="project")]
    m = model(nodes, [vi("x", [1, 8, 24, 24])], [vi("y", [1, 24, 24, 24])], inits)
    return m, {"x": RNG.standard_normal((1, 8, 24, 24)).astype(F32)}


def test_a_partition_no_kleidi_kernel_runs_in_is_left_to_cpu_mlas(monkeypatch, tmp_path):
    """x86 runs no Kleidi kernel: every conv of a float32 group would run cpu_mlas's own kernel
    plus the delegate's dispatch and boundary, without cpu_mlas's fusions, so the group goes
    back to cpu_mlas whole, with the reason, and cpu_mlas's optimizer fuses the gate into the
    projection. The option and the environment variable claim it anyway. The same graph in
    float16 and quantized (QDQ) is left to cpu_mlas too, each with its own reason (cpu_mlas
    computes half precision in float32 and runs QDQ groups on native integer kernels)."""
    from onnxplex import GraphOptimizationLevel

    from .cnn_models import quantize_qdq, to_float16

    m, feed = _squeeze_excite()
    monkeypatch.delenv(_mlas.CLAIM_FLOAT32_ENV, raising=False)

    def left_to_cpu(sess, kind):
        plan = sess.get_provider_assignment()
        assert plan.counts().get(XP, 0) == 0, plan.counts()
        for p in plan.placements:
            reason = dict(p.declined).get(XP, "")
            assert reason.startswith(f"on x86 no Kleidi kernel runs, so in this {kind} "
                                     "partition"), (p.name, reason)

    x = session(m)
    left_to_cpu(x, "float32")
    _check(x, m, feed)
    optimized = session(m, level=GraphOptimizationLevel.ORT_ENABLE_ALL)
    assert optimized.get_provider_assignment().counts().get(XP, 0) == 0
    fused = {r.name: r.changes for r in optimized._optimizer_reports}
    assert fused["Mul(x, channel gate) + 1x1 NhwcFusedConv -> NhwcFusedConv"] == 1, fused
    _check(optimized, m, feed)

    claimed = session(m, [(XP, {"claim_float32_on_x86": 1}), "cpu_mlas"])
    assert declined(claimed, "project") == "" and "mlas:conv2d_nhwc" in notes(claimed)["project"]
    _check(claimed, m, feed)
    monkeypatch.setenv(_mlas.CLAIM_FLOAT32_ENV, "1")
    assert session(m).get_provider_assignment().counts().get(XP, 0) == 8

    half = to_float16(onnx.load_from_string(m)).SerializeToString()
    assert session(half).get_provider_assignment().counts().get(XP, 0) == 8
    monkeypatch.delenv(_mlas.CLAIM_FLOAT32_ENV)
    left_to_cpu(session(half), "half-precision")
    qdq = quantize_qdq(onnx.load_from_string(m), tmp_path, (1, 8, 24, 24)).SerializeToString()
    left_to_cpu(session(qdq), "8-bit quantized")
