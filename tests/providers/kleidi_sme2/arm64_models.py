"""Whole models for kleidi_sme2 on emulated Arm CPUs: the cases, and their x86 side.

Three models, each a family of Kleidi kernels at work in a whole network:

* ``resnet18``: ResNet-18's topology (7x7/2 stem, max pool, four stages of two basic blocks
  with 3x3 convs and 1x1/2 downsampling shortcuts, global average pool, classifier) at a
  64x64 input, random weights: the fp32 indirect convolution (``igemm_f32``), 1x1 convs and
  the classifier as fp32 GEMM (``gemm_f32``);
* ``dyn_int8_transformer``: the two-layer test encoder quantized by onnxruntime's
  ``quantize_dynamic`` (per-channel int8 weights): dynamic int8 matmul (``qgemm_qsi8cx``);
* ``int4_mlp``: three com.microsoft MatMulNBits layers (4-bit, block 32) with Gelu and Relu
  between: the int4 matmul (``qgemm_qsi4c32``).

The emulated aarch64 Python has no onnxruntime (to quantize with) and runs cpu_mlas on numpy,
so the x86 side writes each case (``python tests/providers/kleidi_sme2/arm64_models.py DIR``,
run by ``scripts/test-arm64.sh``): the model, its feeds, and two x86 results of it, from
kleidi_sme2's portable reference kernels (same quantization as every Arm variant) and from
cpu_mlas (an independent implementation). test_arm64_models.py runs the cases on each
emulated CPU, nothing forced, and compares.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxplex
from onnxplex import GraphOptimizationLevel, SessionOptions

KP = "kleidi_sme2"
F32 = np.float32

# max |got - want| / max |want| over the output
TOLERANCE = {
    # fp32 throughout: summation order only
    "resnet18": {"reference": 1e-5, "cpu_mlas": 1e-5},   # (measured under emulation: 9e-7)
    # integer sums are exact; float rescales, LayerNorm and softmax round differently, which
    # a later dynamic quantization may turn into one activation step (see
    # test_quantized_transformer.py); against cpu_mlas the activation quantization differs
    # (per tensor uint8 there, per row int8 here)
    "dyn_int8_transformer": {"reference": 0.01, "cpu_mlas": 0.05},
    "int4_mlp": {"reference": 0.01, "cpu_mlas": 0.05},
}
# The op types kleidi_sme2 must run in each model (every node of these types), and the
# kernel family the placement report must name for them.
CLAIMED = {
    "resnet18": {"Conv": ("igemm_f32", "gemm_f32"), "Gemm": ("gemm_f32",)},
    "dyn_int8_transformer": {"MatMulInteger": ("qgemm_qsi8cx",)},
    "int4_mlp": {"MatMulNBits": ("qgemm_qsi4c32",)},
}


def _conv(nodes: list, inits: dict, rng: np.random.Generator, src: str, name: str,
          cin: int, cout: int, k: int, stride: int = 1, relu: bool = True) -> str:
    fan_in = cin * k * k
    inits[f"{name}.w"] = (rng.standard_normal((cout, cin, k, k))
                          * np.sqrt(1.0 / fan_in)).astype(F32)
    inits[f"{name}.b"] = (rng.standard_normal(cout) * 0.05).astype(F32)
    pad = k // 2
    nodes.append(helper.make_node("Conv", [src, f"{name}.w", f"{name}.b"], [name], name=name,
                                  kernel_shape=[k, k], strides=[stride, stride],
                                  pads=[pad] * 4))
    if not relu:
        return name
    nodes.append(helper.make_node("Relu", [name], [f"{name}.relu"], name=f"{name}.relu"))
    return f"{name}.relu"


def resnet18(size: int = 64, classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes: list = []
    inits: dict[str, np.ndarray] = {}
    x = _conv(nodes, inits, rng, "x", "stem", 3, 64, 7, stride=2)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], name="pool", kernel_shape=[3, 3],
                                  strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = "pool", 64
    for stage, cout in enumerate((64, 128, 256, 512), 1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            name = f"layer{stage}.{block}"
            h = _conv(nodes, inits, rng, x, f"{name}.conv1", cin, cout, 3, stride)
            h = _conv(nodes, inits, rng, h, f"{name}.conv2", cout, cout, 3, relu=False)
            short = x
            if stride != 1 or cin != cout:
                short = _conv(nodes, inits, rng, x, f"{name}.down", cin, cout, 1, stride,
                              relu=False)
            nodes.append(helper.make_node("Add", [h, short], [f"{name}.add"], name=f"{name}.add"))
            nodes.append(helper.make_node("Relu", [f"{name}.add"], [f"{name}.out"],
                                          name=f"{name}.out"))
            x, cin = f"{name}.out", cout
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flat"))
    inits["fc.w"] = (rng.standard_normal((classes, 512)) * np.sqrt(1 / 512)).astype(F32)
    inits["fc.b"] = np.zeros(classes, F32)
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc",
                                  transB=1))
    graph = helper.make_graph(
        nodes, "resnet18",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def int4_mlp(seed: int = 0) -> onnx.ModelProto:
    from models import quantize_nbits

    rng = np.random.default_rng(seed)
    nodes: list = []
    inits: dict[str, np.ndarray] = {}
    src = "x"
    layers = ((256, 512, "Gelu"), (512, 512, "Relu"), (512, 128, None))
    for i, (k, n, act) in enumerate(layers):
        w = (rng.standard_normal((k, n)) * np.sqrt(1 / k)).astype(F32)
        inits[f"B{i}"], inits[f"s{i}"] = quantize_nbits(w, 32)
        inits[f"bias{i}"] = (rng.standard_normal(n) * 0.05).astype(F32)
        out = f"mm{i}"
        nodes.append(helper.make_node("MatMulNBits", [src, f"B{i}", f"s{i}"], [f"fc{i}"],
                                      name=f"fc{i}", domain="com.microsoft", K=k, N=n, bits=4,
                                      block_size=32))
        nodes.append(helper.make_node("Add", [f"fc{i}", f"bias{i}"], [out], name=f"bias{i}"))
        if act == "Gelu":
            nodes.append(helper.make_node("Gelu", [out], [f"act{i}"], name=f"gelu{i}",
                                          domain="com.microsoft"))
        elif act == "Relu":
            nodes.append(helper.make_node("Relu", [out], [f"act{i}"], name=f"relu{i}"))
        src = f"act{i}" if act else out
    graph = helper.make_graph(
        nodes, "int4_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 256])],
        [helper.make_tensor_value_info(src, TensorProto.FLOAT, ["n", 128])],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)],
                             ir_version=9)


def _transformer(tmp: Path) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    if __package__:   # imported by the tests
        from .test_quantized_transformer import _feeds, _quantized_transformer
    else:             # run as the x86 side's script
        from test_quantized_transformer import _feeds, _quantized_transformer

    return _quantized_transformer(tmp), _feeds()


def _image() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((1, 3, 64, 64)).astype(F32)}


def _rows() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(2).standard_normal((4, 256)).astype(F32)}


# name -> (tmp folder -> (model, feeds))
CASES: dict[str, Callable[[Path], tuple[onnx.ModelProto, dict[str, np.ndarray]]]] = {
    "resnet18": lambda tmp: (resnet18(), _image()),
    "dyn_int8_transformer": _transformer,
    "int4_mlp": lambda tmp: (int4_mlp(), _rows()),
}


def session(model: bytes, providers: list) -> onnxplex.InferenceSession:
    """A session as a user makes one: default optimization level, two threads."""
    so = SessionOptions()
    so.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = 2
    return onnxplex.InferenceSession(model, so, providers=providers)


def write_cases(out: Path) -> None:
    """Each case's model.onnx, feeds.npz and x86 outputs: reference.npz (kleidi_sme2's
    portable reference kernels) and cpu_mlas.npz."""
    for name, build in CASES.items():
        case = out / name
        case.mkdir(parents=True, exist_ok=True)
        model, feeds = build(case)
        onnx.save(model, case / "model.onnx")
        np.savez(case / "feeds.npz", **feeds)
        data = model.SerializeToString()
        for file, providers in (("reference.npz", [(KP, {"force_reference": "1"}), "cpu_mlas"]),
                                ("cpu_mlas.npz", ["cpu_mlas"])):
            sess = session(data, providers)
            outs = sess.run(None, feeds)
            np.savez(case / file, **{o.name: v for o, v in zip(sess.get_outputs(), outs)})


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parents[1])]   # test_quantized_transformer, models
    write_cases(Path(sys.argv[1]))
