"""The kleidi_sme2 provider: on x86 with the portable reference variant forced, on (emulated)
aarch64 with the variants dispatch picks by itself.

Claims and decline reasons are checked in the placement report; outputs against cpu_mlas-only
runs within the tolerances documented in ``providers/kleidi_sme2/_provider.py``.
"""

from __future__ import annotations

import platform
import re

import numpy as np
import pytest
from models import dynamic_int8_bound, quantize_nbits
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex import GraphOptimizationLevel, SessionOptions

pytest.importorskip("onnxplex.providers.kleidi_sme2._kleidi")

F32 = np.float32
KP = "kleidi_sme2"
ON_ARM = platform.machine().lower() in ("aarch64", "arm64")
FORCE_ENV = "ONNXPLEX_KLEIDI_FORCE_REFERENCE"


@pytest.fixture(autouse=True)
def _force_reference_off_arm(monkeypatch):
    """x86 has no Arm kernels: force the portable reference. On aarch64 nothing is forced."""
    if ON_ARM:
        monkeypatch.delenv(FORCE_ENV, raising=False)
    else:
        monkeypatch.setenv(FORCE_ENV, "1")


def _variant(sess, family):
    sel = dict(kv.split("=") for kv in
               sess.get_provider_options()[KP]["selected_variants"].split(";"))
    return sel[family]


def _model(nodes, inputs, outputs, inits, ms=False):
    g = helper.make_graph(nodes, "m", inputs, outputs,
                          initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    ops = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)] if ms
                                           else [])
    return helper.make_model(g, opset_imports=ops, ir_version=9).SerializeToString()


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _sessions(model, level=GraphOptimizationLevel.ORT_DISABLE_ALL, options=None):
    so = SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = 2
    k = onnxplex.InferenceSession(model, so, providers=[(KP, options or {}), "cpu_mlas"])
    so2 = SessionOptions()
    so2.graph_optimization_level = level
    c = onnxplex.InferenceSession(model, so2, providers=["cpu_mlas"])
    return k, c


def _placements(sess):
    return {p.name: p for p in sess.get_provider_assignment().placements}


def _declined_by_kleidi(p):
    return dict(p.declined).get(KP, "")


# ---- CNN -------------------------------------------------------------------------------------


def _cnn():
    rng = np.random.default_rng(1)
    w = lambda *s: (rng.standard_normal(s) * 0.2).astype(F32)  # noqa: E731
    inits = {"w7": w(8, 3, 7, 7), "b7": w(8), "w3": w(8, 8, 3, 3), "b3": w(8),
             "wd": w(8, 1, 3, 3), "w1": w(16, 8, 1, 1), "b1": w(16),
             "lo": np.array(0, F32), "hi": np.array(6, F32)}
    nodes = [
        helper.make_node("Conv", ["x", "w7", "b7"], ["c7"], name="conv7x7", strides=[2, 2],
                         pads=[3, 3, 3, 3]),
        helper.make_node("Relu", ["c7"], ["r7"], name="relu7"),
        helper.make_node("Conv", ["r7", "w3", "b3"], ["c3"], name="conv3x3", pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c3", "lo", "hi"], ["r3"], name="clip3"),
        helper.make_node("Conv", ["r3", "wd"], ["cd"], name="dwconv", group=8,
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["cd"], ["rd"], name="relud"),
        helper.make_node("Conv", ["rd", "w1", "b1"], ["c1"], name="conv1x1"),
        helper.make_node("Sigmoid", ["c1"], ["y"], name="sig"),
    ]
    return _model(nodes, [_vi("x", [1, 3, 32, 32])], [_vi("y", [1, 16, 16, 16])], inits)


@pytest.mark.parametrize("level", [GraphOptimizationLevel.ORT_DISABLE_ALL,
                                   GraphOptimizationLevel.ORT_ENABLE_ALL])
def test_cnn_claims_and_matches_cpu_mlas(level):
    k, c = _sessions(_cnn(), level)
    pl = _placements(k)
    for name in ("conv7x7", "relu7", "conv3x3", "clip3", "conv1x1"):
        assert pl[name].provider == KP, (name, k.get_provider_assignment().report())
    assert pl["dwconv"].provider == "cpu_mlas"
    assert "group=8 (depthwise)" in _declined_by_kleidi(pl["dwconv"])
    assert "has no Kleidi kernel" in _declined_by_kleidi(pl["sig"])
    report = k.get_provider_assignment().report()
    assert "7x7 indirect conv" in report and "1x1 conv as fp32 GEMM" in report
    assert f"igemm_f32/{_variant(k, 'igemm_f32')}" in report
    assert (_variant(k, "igemm_f32") == "reference") != ON_ARM
    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(F32)
    for _ in range(2):  # packing happens once; runs are repeatable
        np.testing.assert_allclose(k.run(None, {"x": x})[0], c.run(None, {"x": x})[0],
                                   rtol=1e-4, atol=1e-4)


def test_fused_conv_from_optimizer_is_claimed():
    # a FusedConv with a Clip activation (as the optimizer emits) runs as conv + clamp
    rng = np.random.default_rng(3)
    inits = {"w": (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(F32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="fc", pads=[1, 1, 1, 1])]
    m = helper.make_model(
        helper.make_graph(nodes, "m", [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 4, 8, 8])],
                          [numpy_helper.from_array(inits["w"], "w")]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    m.graph.node[0].op_type = "FusedConv"
    m.graph.node[0].domain = "com.microsoft"
    m.graph.node[0].attribute.append(helper.make_attribute("activation", "Clip"))
    m.graph.node[0].attribute.append(helper.make_attribute("activation_params", [0.0, 0.5]))
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    k, c = _sessions(m.SerializeToString())
    assert _placements(k)["fc"].provider == KP
    x = rng.standard_normal((1, 3, 8, 8)).astype(F32)
    np.testing.assert_allclose(k.run(None, {"x": x})[0], c.run(None, {"x": x})[0],
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attrs, out_hw, note", [
    ({"strides": [2, 2]}, (5, 4), "(stride 2x2)"),            # a ResNet downsampling shortcut
    ({"strides": [2, 1], "pads": [1, 0, 0, 2]}, (5, 10), "(stride 2x1, padded)"),
    ({"strides": [3, 3], "auto_pad": "SAME_UPPER"}, (3, 3), "(stride 3x3)"),
    ({"pads": [1, 1, 1, 1]}, (11, 10), "(padded)"),
])
def test_strided_and_padded_1x1_conv_run_as_gemm(attrs, out_hw, note):
    """The input is padded and subsampled, then one GEMM: pixels of the padding give the bias
    (through the activation), as the convolution does."""
    rng = np.random.default_rng(8)
    inits = {"w": rng.standard_normal((6, 5, 1, 1)).astype(F32),
             "b": rng.standard_normal(6).astype(F32)}
    m = _model([helper.make_node("Conv", ["x", "w", "b"], ["c"], name="c", **attrs),
                helper.make_node("Relu", ["c"], ["y"], name="r")],
               [_vi("x", [1, 5, 9, 8])], [_vi("y", [1, 6, *out_hw])], inits)
    k, c = _sessions(m)
    assert _placements(k)["c"].provider == KP
    assert f"1x1 conv as fp32 GEMM {note}" in k.get_provider_assignment().report()
    x = rng.standard_normal((1, 5, 9, 8)).astype(F32)
    got, want = k.run(None, {"x": x})[0], c.run(None, {"x": x})[0]
    assert got.shape == (1, 6, *out_hw)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_batch_2_conv_is_declined():
    rng = np.random.default_rng(4)
    inits = {"w": rng.standard_normal((4, 3, 3, 3)).astype(F32)}
    m = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="c")],
               [_vi("x", [2, 3, 8, 8])], [_vi("y", [2, 4, 6, 6])], inits)
    k, _ = _sessions(m)
    assert "batch is 2" in _declined_by_kleidi(_placements(k)["c"])


# ---- Gemm MLP --------------------------------------------------------------------------------


def test_gemm_mlp():
    rng = np.random.default_rng(5)
    inits = {"w1": rng.standard_normal((64, 32)).astype(F32) * 0.1,  # transB=1: [N, K]
             "b1": rng.standard_normal(64).astype(F32),
             "w2": rng.standard_normal((64, 10)).astype(F32) * 0.1,
             "b2": rng.standard_normal((1, 10)).astype(F32),
             "w3": rng.standard_normal((10, 5)).astype(F32)}
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], name="fc1", transB=1,
                              alpha=0.5, beta=2.0),
             helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
             helper.make_node("Gemm", ["r1", "w2", "b2"], ["h2"], name="fc2"),
             helper.make_node("MatMul", ["h2", "w3"], ["h3"], name="mm"),
             helper.make_node("MatMul", ["h3", "x2"], ["y"], name="mm_dyn")]
    m = _model(nodes, [_vi("x", [7, 32]), _vi("x2", [5, 3])], [_vi("y", [7, 3])], inits)
    for level in (GraphOptimizationLevel.ORT_DISABLE_ALL, GraphOptimizationLevel.ORT_ENABLE_ALL):
        k, c = _sessions(m, level)
        pl = _placements(k)
        assert all(pl[n].provider == KP for n in ("fc2", "mm")), k.get_provider_assignment()
        assert pl["mm_dyn"].provider == "cpu_mlas"
        assert "not a constant" in _declined_by_kleidi(pl["mm_dyn"])
        feeds = {"x": rng.standard_normal((7, 32)).astype(F32),
                 "x2": rng.standard_normal((5, 3)).astype(F32)}
        np.testing.assert_allclose(k.run(None, feeds)[0], c.run(None, feeds)[0],
                                   rtol=1e-4, atol=1e-4)


# ---- int4 MatMulNBits MLP --------------------------------------------------------------------



def _nbits_mlp(block1, block2, zp=False):
    rng = np.random.default_rng(6)
    inits, nodes = {}, []
    src = "x"
    for i, (k, n, bs) in enumerate(((64, 96, block1), (96, 32, block2))):
        b, s = quantize_nbits(rng.standard_normal((k, n)).astype(F32) * 0.1, bs)
        inits[f"B{i}"], inits[f"s{i}"] = b, s
        ins = [src, f"B{i}", f"s{i}"]
        if zp:
            inits[f"z{i}"] = np.full(n * -(-(k // bs) // 2), 0x88, np.uint8)
            ins.append(f"z{i}")
        out = "y" if i == 1 else f"h{i}"
        nodes.append(helper.make_node("MatMulNBits", ins, [out], name=f"nb{i}",
                                      domain="com.microsoft", K=k, N=n, bits=4, block_size=bs))
        if i == 0:
            nodes.append(helper.make_node("Relu", [out], ["r0"], name="relu0"))
            src = "r0"
    return _model(nodes, [_vi("x", [5, 64])], [_vi("y", [5, 32])], inits, ms=True)


@pytest.mark.parametrize("zp", [False, True])
def test_matmulnbits_mlp(zp):
    m = _nbits_mlp(32, 32, zp)
    k, c = _sessions(m)
    pl = _placements(k)
    assert pl["nb0"].provider == KP and pl["nb1"].provider == KP
    assert "int4 block-32" in k.get_provider_assignment().report()
    x = np.random.default_rng(7).standard_normal((5, 64)).astype(F32)
    got, want = k.run(None, {"x": x})[0], c.run(None, {"x": x})[0]
    # per-row int8 activation quantization in both layers: a few percent of the output range
    np.testing.assert_allclose(got, want, atol=0.03 * np.abs(want).max())
    ort = pytest.importorskip("onnxruntime")
    (oracle,) = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(want, oracle, rtol=1e-4, atol=1e-4)


def test_matmulnbits_block_sizes():
    k, _ = _sessions(_nbits_mlp(64, 32))
    assert _placements(k)["nb0"].provider == KP  # 64 divides K=64
    rng = np.random.default_rng(8)
    b, s = quantize_nbits(rng.standard_normal((64, 8)).astype(F32), 16)
    m = _model([helper.make_node("MatMulNBits", ["x", "B", "s"], ["y"], name="nb16",
                                 domain="com.microsoft", K=64, N=8, bits=4, block_size=16)],
               [_vi("x", [2, 64])], [_vi("y", [2, 8])], {"B": b, "s": s}, ms=True)
    k, c = _sessions(m)
    p = _placements(k)["nb16"]
    assert p.provider == "cpu_mlas" and "block_size=16" in _declined_by_kleidi(p)
    zp = np.full(8 * 2, 0x78, np.uint8)
    b, s = quantize_nbits(rng.standard_normal((64, 8)).astype(F32), 32)
    m = _model([helper.make_node("MatMulNBits", ["x", "B", "s", "z"], ["y"], name="nbz",
                                 domain="com.microsoft", K=64, N=8, bits=4, block_size=32)],
               [_vi("x", [2, 64])], [_vi("y", [2, 8])], {"B": b, "s": s, "z": zp[:8]}, ms=True)
    k, _ = _sessions(m)
    assert "zero points other than 8" in _declined_by_kleidi(_placements(k)["nbz"])


# ---- dynamic int8 ----------------------------------------------------------------------------



def test_dynamic_quantize_matmul():
    rng = np.random.default_rng(9)
    kk, n = 48, 24
    w = rng.integers(-127, 128, (kk, n), dtype=np.int8)
    sc = rng.uniform(0.001, 0.02, n).astype(F32)
    inits = {"B": w, "bs": sc, "bias": rng.standard_normal(n).astype(F32),
             "Bu": w.astype(np.int16).clip(0, 127).astype(np.uint8)}
    nodes = [helper.make_node("DynamicQuantizeMatMul", ["x", "B", "bs", "", "bias"], ["y"],
                              name="dqmm", domain="com.microsoft"),
             helper.make_node("DynamicQuantizeMatMul", ["x", "Bu", "bs"], ["y2"], name="dqmm_u8",
                              domain="com.microsoft")]
    m = _model(nodes, [_vi("x", [3, 6, kk])], [_vi("y", [3, 6, n]), _vi("y2", [3, 6, n])],
               inits, ms=True)
    k, c = _sessions(m)
    pl = _placements(k)
    assert pl["dqmm"].provider == KP
    assert "uint8 (asymmetric)" in _declined_by_kleidi(pl["dqmm_u8"])
    x = rng.standard_normal((3, 6, kk)).astype(F32)
    got, want = k.run(None, {"x": x})[0], c.run(None, {"x": x})[0]
    bound = dynamic_int8_bound(x.reshape(-1, kk), w, sc).reshape(3, 6, n)
    assert np.all(np.abs(got - want) <= bound)


def test_dynamic_quantize_linear_and_matmul_integer_to_float_group():
    rng = np.random.default_rng(10)
    kk, n = 32, 16
    ws = [rng.integers(-127, 128, (kk, n), dtype=np.int8) for _ in range(2)]
    sc = rng.uniform(0.001, 0.02, n).astype(F32)
    inits = {"B0": ws[0], "B1": ws[1], "bs": sc}
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
             helper.make_node("MatMulIntegerToFloat", ["xq", "B0", "xs", "bs", "xz"], ["y0"],
                              name="mm0", domain="com.microsoft"),
             helper.make_node("MatMulIntegerToFloat", ["xq", "B1", "xs", "bs", "xz"], ["y1"],
                              name="mm1", domain="com.microsoft")]
    m = _model(nodes, [_vi("x", [4, kk])], [_vi("y0", [4, n]), _vi("y1", [4, n])], inits,
               ms=True)
    k, c = _sessions(m)
    pl = _placements(k)
    assert {pl[x].provider for x in ("dql", "mm0", "mm1")} == {KP}
    parts = [p for p in k.get_provider_assignment().partitions if p.provider == KP]
    assert len(parts) == 1 and len(parts[0].nodes) == 3
    x = rng.standard_normal((4, kk)).astype(F32)
    got, want = k.run(None, {"x": x}), c.run(None, {"x": x})
    for g, wv, w in zip(got, want, ws):
        assert np.all(np.abs(g - wv) <= dynamic_int8_bound(x, w, sc))


# ---- provider plumbing -----------------------------------------------------------------------


def _tiny_matmul():
    w = np.random.default_rng(12).standard_normal((8, 4)).astype(F32)
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                  [_vi("x", [2, 8])], [_vi("y", [2, 4])], {"w": w})


@pytest.mark.skipif(ON_ARM, reason="x86 behaviour: aarch64 needs no forcing")
def test_off_arm_available_only_when_forced(monkeypatch):
    from onnxplex.providers.kleidi_sme2._provider import KleidiSme2Provider as K
    monkeypatch.delenv(FORCE_ENV)
    av = K.available()
    assert not av and "force_reference=1" in av.reason and FORCE_ENV in av.reason
    assert KP not in onnxplex.get_available_providers()
    with pytest.warns(RuntimeWarning, match="kleidi_sme2.*not available"):
        s = onnxplex.InferenceSession(_tiny_matmul(), providers=[KP, "cpu_mlas"])
    assert s.get_providers() == ["cpu_mlas"]
    # the provider option alone (no environment variable) makes it available
    s = onnxplex.InferenceSession(_tiny_matmul(),
                                  providers=[(KP, {"force_reference": "1"}), "cpu_mlas"])
    assert _placements(s)["mm"].provider == KP
    assert _variant(s, "gemm_f32") == "reference"
    with pytest.raises(onnxplex.ProviderOptionError, match="force_reference"):
        onnxplex.InferenceSession(_tiny_matmul(), providers=[(KP, {"force_reference": "maybe"})])


def test_provider_options_show_cpu_and_variants_and_round_trip():
    s = onnxplex.InferenceSession(_tiny_matmul(), providers=[KP, "cpu_mlas"])
    opts = s.get_provider_options()[KP]
    assert opts["max_variant"] == "auto" and opts["cpu_features"].startswith(
        platform.machine().lower().replace("arm64", "aarch64").replace("amd64", "x86_64"))
    fams = dict(kv.split("=") for kv in opts["selected_variants"].split(";"))
    assert {"gemm_f32", "igemm_f32", "qgemm_qsi8cx", "qgemm_qsi4c32"} <= set(fams)
    again = onnxplex.InferenceSession(_tiny_matmul(), providers=[(KP, opts), "cpu_mlas"])
    assert again.get_provider_options()[KP] == opts


def test_max_variant_caps_each_family():
    from onnxplex.providers.kleidi_sme2._provider import choose_variants
    native = {"gemm_f32": {"selected": "sme2", "supported": ["reference", "neon", "sme2"]},
              "qgemm_qsi8cx": {"selected": "sme2",
                               "supported": ["reference", "neon", "dotprod", "i8mm", "sme2"]}}
    assert choose_variants(native, False, "auto") == {"gemm_f32": "sme2", "qgemm_qsi8cx": "sme2"}
    assert choose_variants(native, False, "i8mm") == {"gemm_f32": "neon",
                                                      "qgemm_qsi8cx": "i8mm"}
    assert choose_variants(native, False, "reference") == {"gemm_f32": "reference",
                                                           "qgemm_qsi8cx": "reference"}
    assert set(choose_variants(native, True, "sme2").values()) == {"reference"}
    s = onnxplex.InferenceSession(_tiny_matmul(),
                                  providers=[(KP, {"max_variant": "neon"}), "cpu_mlas"])
    assert _variant(s, "gemm_f32") in ("reference", "neon")
    with pytest.raises(onnxplex.ProviderOptionError, match="max_variant.*expected auto"):
        onnxplex.InferenceSession(_tiny_matmul(), providers=[(KP, {"max_variant": "avx512"})])


def test_describe_reports_features_and_variants():
    from onnxplex.providers.kleidi_sme2._provider import KleidiSme2Provider as K
    d = K.describe()
    assert "features" in d["cpu"]
    assert {"gemm_f32", "igemm_f32", "qgemm_qsi8cx", "qgemm_qsi4c32"} <= set(d["variants"])
    from onnxplex.providers.kleidi_sme2._provider import VARIANTS
    for v in d["variants"].values():
        assert v["selected"] in v["supported"] and set(v["supported"]) <= set(v["compiled"])
        # the best variant this CPU runs; on x86 only the portable reference exists
        assert v["selected"] == max(v["supported"], key=VARIANTS.index)
        assert (v["selected"] == "reference") or ON_ARM
    if ON_ARM:  # every Arm CPU runs NEON: the fp32 families are accelerated
        assert d["variants"]["gemm_f32"]["selected"] != "reference"


def test_cli_providers_lists_cpu_features_and_variants(capsys):
    from onnxplex.tools.cli import main
    assert main(["providers"]) == 0
    out = capsys.readouterr().out
    block = out[out.index("kleidi_sme2"):]
    arch = "aarch64" if ON_ARM else "x86_64"
    assert f"    cpu:\n        arch: {arch}\n        features: " in block
    sel = "sme2|i8mm|dotprod|neon" if ON_ARM else "reference"
    assert re.search(rf"    variants:\n        gemm_f32: selected=({sel}) compiled=\S+ "
                     r"supported=\S+\n", block), block


def test_native_error_becomes_kernel_execution_error():
    # a 5x5 kernel with no padding on a 3x3 input: the native conv refuses it at run time
    rng = np.random.default_rng(11)
    m = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="bigk")],
               [_vi("x", [1, 2, "h", "w_"])], [_vi("y", None)],
               {"w": rng.standard_normal((3, 2, 5, 5)).astype(F32)})
    so = SessionOptions()
    so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    k = onnxplex.InferenceSession(m, so, providers=[KP])
    assert _placements(k)["bigk"].provider == KP
    with pytest.raises(onnxplex.KernelExecutionError) as e:
        k.run(None, {"x": np.ones((1, 2, 3, 3), F32)})
    assert e.value.provider == KP and e.value.node == "bigk"


# ---- the unfused dynamic int8 pattern (onnxruntime's quantize_dynamic output) ----------------


def _unfused(rng, kk, n, *, int32_out=False, export_scale=False, uint8_w=False):
    """DynamicQuantizeLinear feeding two MatMulInteger + Cast + Mul chains: a per-channel one
    with a zero point input and a bias Add, and a per-tensor one with its Mul operands swapped."""
    w0 = rng.integers(-127, 128, (kk, n), dtype=np.int8)
    w1 = rng.integers(-127, 128, (kk, n), dtype=np.int8)
    inits = {"W0": w0.astype(np.uint8) if uint8_w else w0, "W1": w1,
             "wz0": np.zeros(n, np.uint8 if uint8_w else np.int8),
             "ws0": rng.uniform(0.001, 0.02, n).astype(F32), "ws1": np.array(0.01, F32),
             "b0": rng.standard_normal(n).astype(F32)}
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
             helper.make_node("Mul", ["xs", "ws0"], ["s0"], name="smul0"),
             helper.make_node("MatMulInteger", ["xq", "W0", "xz", "wz0"], ["i0"], name="mmi0"),
             helper.make_node("Cast", ["i0"], ["f0"], name="cast0", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f0", "s0"], ["m0"], name="mul0"),
             helper.make_node("Add", ["m0", "b0"], ["y0"], name="bias0"),
             helper.make_node("Mul", ["ws1", "xs"], ["s1"], name="smul1"),
             helper.make_node("MatMulInteger", ["xq", "W1", "xz"], ["i1"], name="mmi1"),
             helper.make_node("Cast", ["i1"], ["f1"], name="cast1", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["s1", "f1"], ["y1"], name="mul1")]
    outs = [_vi("y0", [4, n]), _vi("y1", [4, n])]
    if int32_out:
        outs.append(helper.make_tensor_value_info("i1", TensorProto.INT32, [4, n]))
    if export_scale:
        outs.append(_vi("xs", []))
    m = _model(nodes, [_vi("x", [4, kk])], outs, inits)
    return m, (w0, inits["ws0"]), (w1, np.full(n, 0.01, F32))


@pytest.mark.parametrize("level", [GraphOptimizationLevel.ORT_DISABLE_ALL,
                                   GraphOptimizationLevel.ORT_ENABLE_ALL])
def test_unfused_dynamic_quantize_pattern_is_one_group(level):
    rng = np.random.default_rng(13)
    kk, n = 40, 12
    m, (w0, s0), (w1, s1) = _unfused(rng, kk, n)
    k, c = _sessions(m, level)
    pl = _placements(k)
    assert {p.provider for p in pl.values()} == {KP}, k.get_provider_assignment().report()
    parts = k.get_provider_assignment().partitions
    assert len(parts) == 1 and len(parts[0].nodes) == 10
    assert "2 matmul(s), DynamicQuantizeLinear + MatMulInteger + Cast + Mul" in \
        k.get_provider_assignment().report()
    x = rng.standard_normal((4, kk)).astype(F32)
    got, want = k.run(None, {"x": x}), c.run(None, {"x": x})
    for g, wv, w, s in zip(got, want, (w0, w1), (s0, s1)):
        assert np.all(np.abs(g - wv) <= dynamic_int8_bound(x, w, s))


@pytest.mark.parametrize("kw, reason", [
    ({"int32_out": True}, "mmi1 (MatMulInteger): its int32 result is not read by a single Cast"),
    ({"export_scale": True}, "some DynamicQuantizeLinear output is a graph output"),
    ({"uint8_w": True}, "mmi0 (MatMulInteger): the weight B is uint8 (asymmetric)"),
])
def test_unfused_pattern_declines_with_the_reason(kw, reason):
    rng = np.random.default_rng(14)
    m, *_ = _unfused(rng, 16, 8, **kw)
    k, c = _sessions(m)
    pl = _placements(k)
    for name in ("dql", "mmi0", "mmi1"):
        assert pl[name].provider == "cpu_mlas"
        assert reason in _declined_by_kleidi(pl[name]), k.get_provider_assignment().explain(name)
    x = rng.standard_normal((4, 16)).astype(F32)
    for g, w in zip(k.run(None, {"x": x}), c.run(None, {"x": x})):
        np.testing.assert_array_equal(g, w)


def test_weights_are_packed_once_per_session_not_per_run(monkeypatch):
    from onnxplex.providers.kleidi_sme2 import _provider

    real, _ = _provider._native()
    calls: dict[str, int] = {}

    class Counting:
        def __getattr__(self, name):
            fn = getattr(real, name)
            if not name.startswith("pack_"):
                return fn

            def counted(*a, **kw):
                calls[name] = calls.get(name, 0) + 1
                return fn(*a, **kw)
            return counted

    monkeypatch.setattr(_provider, "_native", lambda: (Counting(), ""))
    k, c = _sessions(_cnn())
    packed = dict(calls)
    # conv7x7 and conv3x3 (indirect), conv1x1 (GEMM); the depthwise conv runs on cpu_mlas
    assert packed == {"pack_conv2d_f32": 2, "pack_gemm_f32": 1}
    x = np.random.default_rng(15).standard_normal((1, 3, 32, 32)).astype(F32)
    first = k.run(None, {"x": x})[0]
    for _ in range(3):
        np.testing.assert_array_equal(k.run(None, {"x": x})[0], first)
    assert calls == packed


def test_concurrent_runs_share_the_packed_weights():
    from concurrent.futures import ThreadPoolExecutor

    k, _ = _sessions(_cnn())
    rng = np.random.default_rng(16)
    xs = [rng.standard_normal((1, 3, 32, 32)).astype(F32) for _ in range(6)]
    want = [k.run(None, {"x": x})[0] for x in xs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: k.run(None, {"x": x})[0], xs * 3))
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, want[i % len(xs)])
