"""xnnpack_like end to end: ResNet-50 and MobileNetV2 (fp32, fp16), a QDQ int8 MobileNetV2,
a static-shape transformer encoder, a session split over kleidi_sme2 + xnnpack_like + cpu_mlas,
concurrent runs and profiling -- each against cpu_mlas alone.

Tolerances (relative to the largest |output| of the cpu_mlas run; measured values in comments,
64x64 inputs, random weights):

* fp32: 1e-4 (measured ~6e-7 on both CNNs, ~1.4e-6 with the Kleidi reference kernels);
* fp16: 1e-2 (measured 1.1e-3 MobileNetV2, 8.6e-4 ResNet-50): both compute conv/GEMM in
  float32; cpu_mlas rounds every op's result to float16, the delegate rounds a conv once after
  its folded BatchNorm / residual / activation epilogue, and 50 layers carry the difference;
* QDQ int8: at most one quantization step of the output (measured: identical).

The CNNs run at the default optimization level, as a user would run them.
"""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import onnx
import pytest
from onnx import helper

from onnxplex import GraphOptimizationLevel

from ._helpers import XP, assert_rel, model, notes, pair, rel_err, session, vi
from .cnn_models import mobilenetv2, quantize_qdq, resnet50, to_float16
from .conftest import FORCE, MLAS, needs_kleidi

F32 = np.float32
ALL = GraphOptimizationLevel.ORT_ENABLE_ALL
SIZE = 64
FP32_REL, FP16_REL = 1e-4, 1e-2
BUILDERS = {"resnet50": resnet50, "mobilenetv2": mobilenetv2}


@pytest.fixture(autouse=True)
def _own_path_by_default(monkeypatch):
    monkeypatch.delenv(FORCE, raising=False)
    monkeypatch.setenv(MLAS, "0")


@pytest.fixture(scope="module")
def cnn():
    """name -> serialized fp32 model at SIZE x SIZE (built once per module)."""
    cache: dict[str, bytes] = {}

    def get(name: str) -> bytes:
        if name not in cache:
            cache[name] = BUILDERS[name](SIZE).SerializeToString()
        return cache[name]

    return get


@pytest.fixture(scope="module")
def reference(cnn):
    """(name, fp16) -> the cpu_mlas-only output on the seeded input (computed once)."""
    cache: dict[tuple[str, bool], np.ndarray] = {}

    def get(name: str, fp16: bool, feed: dict) -> np.ndarray:
        key = (name, fp16)
        if key not in cache:
            m = cnn(name) if not fp16 else _fp16(cnn(name))
            cache[key] = session(m, ["cpu_mlas"], ALL).run(None, feed)[0]
        return cache[key]

    return get


def _fp16(m: bytes) -> bytes:
    return to_float16(onnx.ModelProto.FromString(m)).SerializeToString()


def _feed(dtype=F32, size: int = SIZE, seed: int = 0) -> dict:
    return {"x": np.random.default_rng(seed).standard_normal((1, 3, size, size)).astype(dtype)}


def _one_partition(sess) -> None:
    plan = sess.get_provider_assignment()
    assert plan.counts().get("cpu_mlas", 0) == 0, plan.report()
    assert len(plan.partitions) == 1, plan.report()


def _every_claimed_note_has(sess, kernel_prefix: str) -> dict[str, str]:
    nn = notes(sess)
    for name, note in nn.items():
        assert f"-> {kernel_prefix}" in note, (name, note)
    return nn


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_fp32_cnn_in_one_partition_on_the_own_path(cnn, reference, name):
    x = session(cnn(name), level=ALL)
    _one_partition(x)
    nn = _every_claimed_note_has(x, "own:")
    assert any(n.startswith("conv2d: pf32_gemm -> own:gemm_nhwc") for n in nn.values())
    assert any(n.startswith("fully_connected: pf32_gemm -> own:gemm_blas") for n in nn.values())
    feed = _feed()
    y = x.run(None, feed)[0]
    assert_rel(y, reference(name, False, feed), FP32_REL, name)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_fp16_cnn(cnn, reference, name):
    m = _fp16(cnn(name))
    x = session(m, level=ALL)
    _one_partition(x)
    nn = _every_claimed_note_has(x, "own:")
    assert any(n.startswith("conv2d: none: fp16 convolution") for n in nn.values())
    assert any(n.startswith("fully_connected: pf16_gemm") for n in nn.values())
    feed = _feed(np.float16)
    y = x.run(None, feed)[0]
    assert y.dtype == np.float16
    assert_rel(y, reference(name, True, feed), FP16_REL, f"{name} fp16")


@needs_kleidi
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_kleidi_reference_kernels_when_forced(cnn, reference, monkeypatch, name):
    monkeypatch.setenv(FORCE, "1")
    x = session(cnn(name), level=ALL)
    _one_partition(x)
    nn = notes(x)
    kleidi = [n for n in nn.values() if "kleidi:" in n]
    assert any(n.startswith("conv2d: pf32_gemm -> kleidi:gemm_f32/reference") for n in kleidi)
    assert any(n.startswith("fully_connected: pf32_gemm -> kleidi:gemm_f32/reference")
               for n in kleidi)
    for note in nn.values():   # only nodes matching a variant with a Kleidi kernel use one
        if "kleidi:" in note:
            assert note.split(" -> ")[0].endswith("pf32_gemm") or "folded into" in note, note
    feed = _feed()
    assert_rel(x.run(None, feed)[0], reference(name, False, feed), FP32_REL, name)


@pytest.fixture(scope="module")
def qdq_mobilenet(tmp_path_factory) -> onnx.ModelProto:
    """MobileNetV2 (32x32) through onnxruntime's quantize_static: uint8 activations, int8
    per-channel weights, int32 biases, QDQ format."""
    return quantize_qdq(mobilenetv2(32), tmp_path_factory.mktemp("qdq"), (1, 3, 32, 32))


def test_qdq_int8_cnn(qdq_mobilenet):
    x, c = pair(qdq_mobilenet.SerializeToString(), ALL)
    _one_partition(x)
    nn = _every_claimed_note_has(x, "own:")
    convs = [n for n in nn.values() if n.startswith("conv2d:")]
    assert convs and all(n.startswith("conv2d: pqs8_qc8w_gemm -> own:int8_") for n in convs)
    assert all("not available in this build" in n for n in convs)
    fc = [n for n in nn.values() if n.startswith("fully_connected:")]
    assert fc and fc[0].startswith("fully_connected: pqs8_qc8w_gemm -> own:int8_gemm")
    feed = _feed(size=32, seed=3)
    y, yc = x.run(None, feed)[0], c.run(None, feed)[0]
    q = qdq_mobilenet
    last_dq = q.graph.node[-1]
    assert last_dq.op_type == "DequantizeLinear"
    step = float(onnx.numpy_helper.to_array(
        next(t for t in q.graph.initializer if t.name == last_dq.input[1])))
    assert np.abs(y - yc).max() <= step * 1.0001


def test_static_transformer_encoder_stays_whole():
    """LayerNorm, MatMul (fully connected and batch), Softmax, Gelu (erf form): with static
    shapes the reshape plumbing folds, only the embedding Gather stays on cpu_mlas."""
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    import models

    m = models.transformer_encoder()
    for inp in m.graph.input:
        for d, v in zip(inp.type.tensor_type.shape.dim, (2, 16)):
            d.ClearField("dim_param")
            d.dim_value = v
    x, c = pair(m.SerializeToString(), ALL)
    plan = x.get_provider_assignment()
    assert {p.op_type for p in plan.placements if p.provider == "cpu_mlas"} == {"Gather"}
    # the encoder, and the attention-mask arithmetic (not connected to it inside the graph)
    assert len([p for p in plan.partitions if p.provider == XP]) == 2, plan.report()
    nn = notes(x)
    assert any(n.startswith("batch_matmul: pf32_gemm") for n in nn.values())
    feed = models.transformer_feed(2, 16)
    for a, b in zip(x.run(None, feed), c.run(None, feed)):
        assert_rel(a, b, 1e-5)


def _mixed_model() -> bytes:
    rng = np.random.default_rng(0)

    def w(*s):
        return (rng.standard_normal(s) * 0.3).astype(F32)

    inits = {"w1": w(8, 3, 3, 3), "b1": w(8), "wd": w(8, 1, 3, 3), "w2": w(16, 8, 1, 1),
             "scales": np.array([1, 1, 2, 2], F32), "wfc": w(10, 16),
             "lo": np.array(0, F32), "hi": np.array(6, F32)}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv3x3", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "wd"], ["cd"], name="dwconv", group=8,
                         pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["cd", "lo", "hi"], ["rd"], name="relu6"),
        helper.make_node("Resize", ["rd", "", "scales"], ["up"], name="upsample",
                         mode="nearest"),
        helper.make_node("Conv", ["up", "w2"], ["c2"], name="conv1x1"),
        helper.make_node("Sigmoid", ["c2"], ["s2"], name="sigmoid"),
        helper.make_node("Mul", ["c2", "s2"], ["a2"], name="swish"),
        helper.make_node("GlobalAveragePool", ["a2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "wfc"], ["y"], name="fc", transB=1),
    ]
    return model(nodes, [vi("x", [1, 3, 16, 16])], [vi("y", [1, 10])], inits, opset=13)


@needs_kleidi
def test_mixed_session_splits_over_three_providers(monkeypatch):
    monkeypatch.setenv(FORCE, "1")
    m = _mixed_model()
    s = session(m, ["kleidi_sme2", XP, "cpu_mlas"], ALL)
    plan = s.get_provider_assignment()
    counts = plan.counts()
    assert counts["kleidi_sme2"] > 0 and counts[XP] > 0 and counts["cpu_mlas"] > 0, counts
    by = {p.name: p.provider for p in plan.placements}
    assert by["conv3x3"] == by["conv1x1"] == by["fc"] == "kleidi_sme2"
    assert by["dwconv"] == by["swish"] == by["gap"] == XP
    assert by["upsample"] == "cpu_mlas"
    report = plan.report()
    assert "declined by kleidi_sme2: group=8 (depthwise)" in report
    assert "declined by xnnpack_like: op Resize is not supported by the delegate" in report
    assert len(plan.partitions) == 6, report
    feed = {"x": np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(F32)}
    y = s.run(None, feed)[0]
    yc = session(m, ["cpu_mlas"], ALL).run(None, feed)[0]
    assert_rel(y, yc, 1e-5)


def test_fused_conv_and_gemm_from_the_optimizer(tmp_path):
    """FusedConv (with the residual input Z and an activation) and FusedGemm, as the extended
    optimizer writes them for cpu_mlas, saved and run by the delegate."""
    rng = np.random.default_rng(2)

    def w(*s):
        return (rng.standard_normal(s) * 0.3).astype(F32)

    inits = {"w1": w(4, 4, 3, 3), "b1": w(4), "w2": w(4, 4, 1, 1), "b2": w(4),
             "wf": w(4 * 6 * 6, 5), "bf": w(5)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]),
             helper.make_node("Add", ["c2", "x"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("MatMul", ["f", "wf"], ["mm"]),
             helper.make_node("Add", ["mm", "bf"], ["g"]),
             helper.make_node("Tanh", ["g"], ["y"])]
    m = model(nodes, [vi("x", [1, 4, 6, 6])], [vi("y", [1, 5])], inits)
    path = tmp_path / "optimized.onnx"
    # the extended level: the fusions, NCHW (the layout level would write channels-last
    # NhwcFusedConv, a cpu_mlas op)
    c = session(m, ["cpu_mlas"], GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                optimized_model_filepath=str(path))
    ops = {n.op_type for n in c.model.node_views}
    assert {"FusedConv", "FusedGemm"} <= ops, ops
    x = session(str(path), level=GraphOptimizationLevel.ORT_DISABLE_ALL)
    _one_partition(x)
    nn = notes(x)
    fused = [n for n in nn.values() if "Tanh" in n or "Relu" in n]
    assert len(fused) >= 3, nn
    feed = {"x": rng.standard_normal((1, 4, 6, 6)).astype(F32)}
    assert_rel(x.run(None, feed)[0], c.run(None, feed)[0], 1e-5)


def test_concurrent_runs_match_sequential_ones():
    m = mobilenetv2(32).SerializeToString()
    sess = session(m, level=ALL)
    feeds = [_feed(size=32, seed=k) for k in range(6)]
    want = [sess.run(None, f)[0] for f in feeds]
    got: dict[int, list] = {}
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            got[t] = [sess.run(None, feeds[(t + k) % 6])[0] for k in range(6)]
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for t, outs in got.items():
        for k, y in enumerate(outs):
            np.testing.assert_array_equal(y, want[(t + k) % 6])


def test_profiling_reports_one_event_per_internal_op(tmp_path):
    m = mobilenetv2(32).SerializeToString()
    sess = session(m, level=ALL, enable_profiling=True,
                   profile_file_prefix=str(tmp_path / "prof"))
    sess.run(None, _feed(size=32))
    events = json.load(open(sess.end_profiling()))
    kernel = sess._exec.steps[[s.provider for s in sess._exec.steps].index(XP)].kernel
    ops = kernel.describe_compiled()
    subs = [e for e in events if e["args"].get("parent") == "xnnpack_like_0"]
    assert len(subs) == len(ops)
    for e, op in zip(sorted(subs, key=lambda e: e["ts"]), ops):
        assert e["args"]["kernel"] == op["kernel"] and e["args"]["variant"] == op["variant"]
        assert e["args"]["provider"] == XP and e["cat"] == "Node"
    convs = [e for e in subs if e["args"]["op_class"] == "conv2d"]
    assert convs and any(e["args"]["variant"] == "pf32_gemm" for e in convs)


def test_unknown_ranks_of_contrib_ops_are_inferred():
    """com.microsoft ops have no ONNX shape inference: the delegate infers ranks itself."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("FusedConv", ["x", "w"], ["c"], name="fc", domain="com.microsoft",
                              activation="Relu", pads=[1, 1, 1, 1]),
             helper.make_node("Gelu", ["c"], ["g"], name="gelu", domain="com.microsoft"),
             helper.make_node("GlobalAveragePool", ["g"], ["y"], name="gap")]
    m = model(nodes, [vi("x", [1, 3, 5, 5])], [vi("y", None)],
              {"w": (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(F32)}, ms=True)
    x, c = pair(m)
    _one_partition(x)
    feed = {"x": rng.standard_normal((1, 3, 5, 5)).astype(F32)}
    assert_rel(x.run(None, feed)[0], c.run(None, feed)[0], 1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_full_size_224(name):
    m = BUILDERS[name](224).SerializeToString()
    x, c = pair(m, ALL)
    _one_partition(x)
    feed = _feed(size=224)
    err, rel = rel_err(x.run(None, feed)[0], c.run(None, feed)[0])
    assert rel <= FP32_REL, (err, rel)

