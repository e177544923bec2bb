"""ResNet-50 and MobileNetV2 written out with onnx.helper (random weights, any image size), a
float16 converter, and a QDQ int8 quantization of a float CNN via onnxruntime's
``quantize_static`` (onnxruntime is a test-only dependency).

* ``resnet50``: torchvision's layout (bottleneck v1.5: stride on the 3x3 conv), unfolded
  BatchNormalization nodes, ReLU, MaxPool, residual Add, GlobalAveragePool, Flatten, Gemm;
* ``mobilenetv2``: width 1.0, BatchNorm folded into conv biases (as torch exports it), ReLU6
  as Clip(0, 6), depthwise 3x3 convs, residual Add, then ReduceMean(axes 2, 3) + Reshape +
  Gemm as ``torch.onnx.export`` writes adaptive average pooling and flatten.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18
F32 = np.float32


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def init(self, hint: str, arr: np.ndarray) -> str:
        n = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def node(self, op: str, ins: list[str], hint: str, **attrs) -> str:
        out = self.name(hint)
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1,
             bias: bool = False, gain: float = 2.0) -> str:
        fan_in = cin // group * k * k
        w = (self.rng.standard_normal((cout, cin // group, k, k)) *
             math.sqrt(gain / fan_in)).astype(F32)
        ins = [x, self.init("w", w)]
        if bias:
            ins.append(self.init("b", (self.rng.standard_normal(cout) * 0.05).astype(F32)))
        return self.node("Conv", ins, "conv", kernel_shape=[k, k], strides=[stride, stride],
                         pads=[k // 2] * 4, group=group)

    def bn(self, x: str, c: int, gamma: tuple[float, float] = (0.75, 1.25)) -> str:
        r = self.rng
        ins = [x, self.init("gamma", r.uniform(*gamma, c).astype(F32)),
               self.init("beta", (r.standard_normal(c) * 0.1).astype(F32)),
               self.init("mean", (r.standard_normal(c) * 0.1).astype(F32)),
               self.init("var", r.uniform(0.5, 1.5, c).astype(F32))]
        return self.node("BatchNormalization", ins, "bn", epsilon=1e-5)

    def relu6(self, x: str) -> str:
        if not hasattr(self, "_six"):
            self._zero = self.init("zero", np.array(0, F32))
            self._six = self.init("six", np.array(6, F32))
        return self.node("Clip", [x, self._zero, self._six], "relu6")

    def model(self, x_shape: list, y: str, y_shape: list, name: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, y_shape)], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=9, producer_name="onnxplex-tests")
        onnx.checker.check_model(m)
        return m


def resnet50(size: int = 64, batch: int = 1, classes: int = 1000, seed: int = 0
             ) -> onnx.ModelProto:
    b = _Builder(seed)
    x = b.node("Relu", [b.bn(b.conv("x", 3, 64, 7, 2), 64)], "relu")
    x = b.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2],
               pads=[1, 1, 1, 1])
    cin = 64
    for stage, blocks in enumerate((3, 4, 6, 3)):
        width = 64 * 2 ** stage
        for j in range(blocks):
            stride = 2 if j == 0 and stage > 0 else 1
            cout = width * 4
            h = b.node("Relu", [b.bn(b.conv(x, cin, width, 1), width)], "relu")
            h = b.node("Relu", [b.bn(b.conv(h, width, width, 3, stride), width)], "relu")
            # a small last gamma keeps residual growth tame with random weights
            h = b.bn(b.conv(h, width, cout, 1), cout, gamma=(0.1, 0.3))
            idt = x if stride == 1 and cin == cout else b.bn(b.conv(x, cin, cout, 1, stride),
                                                              cout)
            x = b.node("Relu", [b.node("Add", [h, idt], "add")], "relu")
            cin = cout
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x], "gap")], "flatten", axis=1)
    w = (b.rng.standard_normal((classes, cin)) / math.sqrt(cin)).astype(F32)
    y = b.node("Gemm", [x, b.init("fc_w", w), b.init("fc_b", np.zeros(classes, F32))], "fc",
               transB=1)
    return b.model([batch, 3, size, size], y, [batch, classes], "resnet50")


MOBILENETV2_CFG = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                   (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def mobilenetv2(size: int = 64, batch: int = 1, classes: int = 1000, seed: int = 0
                ) -> onnx.ModelProto:
    b = _Builder(seed)
    x = b.relu6(b.conv("x", 3, 32, 3, 2, bias=True))
    cin = 32
    for t, c, n, s in MOBILENETV2_CFG:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            h = x if t == 1 else b.relu6(b.conv(x, cin, hidden, 1, bias=True))
            h = b.relu6(b.conv(h, hidden, hidden, 3, stride, group=hidden, bias=True))
            h = b.conv(h, hidden, c, 1, bias=True, gain=0.5)
            x = b.node("Add", [x, h], "add") if stride == 1 and cin == c else h
            cin = c
    x = b.relu6(b.conv(x, cin, 1280, 1, bias=True))
    x = b.node("ReduceMean", [x, b.init("axes", np.array([2, 3], np.int64))], "mean",
               keepdims=1)
    x = b.node("Reshape", [x, b.init("shape", np.array([batch, 1280], np.int64))], "view")
    w = (b.rng.standard_normal((classes, 1280)) / math.sqrt(1280)).astype(F32)
    y = b.node("Gemm", [x, b.init("fc_w", w), b.init("fc_b", np.zeros(classes, F32))], "fc",
               transB=1)
    return b.model([batch, 3, size, size], y, [batch, classes], "mobilenetv2")


def to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every float32 initializer, graph input/output and Cast-to-float
    turned into float16 (value_info dropped: shape inference recomputes it)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for k, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            arr = numpy_helper.to_array(t).astype(np.float16)
            g.initializer[k].CopyFrom(numpy_helper.from_array(arr, t.name))
    for v in (*g.input, *g.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    for node in g.node:
        for a in node.attribute:
            if node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                arr = numpy_helper.to_array(a.t).astype(np.float16)
                a.t.CopyFrom(numpy_helper.from_array(arr, a.t.name))
    del g.value_info[:]
    onnx.checker.check_model(m)
    return m


def quantize_qdq(model: onnx.ModelProto, folder: Path, shape: tuple[int, ...],
                 samples: int = 4, seed: int = 0) -> onnx.ModelProto:
    """Static QDQ quantization with onnxruntime's tool: uint8 activations (asymmetric, per
    tensor), int8 weights symmetric per channel, int32 biases; calibrated (min/max) on seeded
    normal inputs."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(seed)
            self.data = iter([{"x": rng.standard_normal(shape).astype(F32)}
                              for _ in range(samples)])

        def get_next(self):
            return next(self.data, None)

    folder.mkdir(parents=True, exist_ok=True)
    src, dst = folder / "float.onnx", folder / "qdq.onnx"
    onnx.save(model, src)
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    return onnx.load(str(dst))
