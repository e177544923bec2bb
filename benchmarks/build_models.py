"""Build the real-model test bed: ONNX exports of standard architectures with random weights.

    python benchmarks/build_models.py --out DIR [--only resnet50,bert_base] [--force]

Writes ``DIR/<name>.onnx`` (large models keep their weights in ``DIR/<name>.onnx.data``) for:

* ``resnet50``       ResNet-50 (torchvision's layout, written here), input ``x`` [N, 3, 224, 224]
* ``mobilenetv2``    MobileNetV2 (width 1.0), input ``x`` [N, 3, 224, 224]
* ``bert_base``      ``BertModel(BertConfig())``: ``input_ids``, ``attention_mask``,
                     ``token_type_ids`` int64 [batch, seq]; outputs ``last_hidden_state``,
                     ``pooler_output``
* ``gpt2_small``     ``GPT2LMHeadModel(GPT2Config())`` without past: ``input_ids``,
                     ``attention_mask`` int64 [batch, seq]; output ``logits``
* ``mlp``            4 x (Linear 1024 -> 1024), ReLU between, input ``x`` [N, 1024]
* ``bert_base_int8`` ``bert_base`` through onnxruntime's ``quantize_dynamic`` (QInt8 weights)
* ``mlp_int4``       ``mlp`` with 4-bit weights: com.microsoft MatMulNBits (block 32, symmetric)
                     from onnxruntime's ``MatMulNBitsQuantizer`` (its Gemms written as MatMul +
                     Add first: the quantizer takes MatMul only)
* ``bert_base_fp16`` ``bert_base`` in float16 by onnxruntime's float16 tool
                     (``convert_float_to_float16``, ``keep_io_types=True``: float32 outputs)
* ``resnet50_qdq``   ``resnet50`` through onnxruntime's ``quantize_static`` (QDQ, uint8
                     activations, int8 weights per output channel, MinMax calibration on four
                     seeded random images)

Every model is exported with ``torch.onnx.export`` (the default, dynamo-based exporter) at
opset ``OPSET``, with dynamic batch (and sequence) axes. Weights are random with a fixed seed;
nothing is downloaded (transformers' models are built from their default configs, offline).
An existing file is kept unless ``--force``. ``build(name, out_dir)`` is the same for tests.

Needs ``torch`` (and ``transformers`` for the two transformer models): ``pip install
'.[models]'``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

OPSET = 18
SEED = 0

# name -> the static example shapes the export traces with (documented in the module docstring)
IMAGE_SHAPE = (1, 3, 224, 224)
BERT_BATCH, BERT_SEQ = 1, 128
GPT2_BATCH, GPT2_SEQ = 1, 64
MLP_BATCH, MLP_WIDTH, MLP_LAYERS = 32, 1024, 4


# --------------------------------------------------------------------------------------------
# CNNs, written out in torch.nn (there is no CPU build of torchvision here)
# --------------------------------------------------------------------------------------------

def _nn():
    import torch
    from torch import nn
    return torch, nn


def _resnet50():
    torch, nn = _nn()

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin, width, stride=1):
            super().__init__()
            cout = width * self.expansion
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + idt)

    class ResNet50(nn.Module):
        def __init__(self, layers=(3, 4, 6, 3), num_classes=1000):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            cin, stages = 64, []
            for i, n in enumerate(layers):
                width = 64 * 2 ** i
                blocks = []
                for j in range(n):
                    blocks.append(Bottleneck(cin, width, 2 if (j == 0 and i > 0) else 1))
                    cin = width * Bottleneck.expansion
                stages.append(nn.Sequential(*blocks))
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(cin, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    m = ResNet50()
    for mod in m.modules():
        if isinstance(mod, Bottleneck):  # keep residual growth tame with random weights
            nn.init.uniform_(mod.bn3.weight, 0.1, 0.3)
    return m


def _mobilenetv2():
    torch, nn = _nn()

    def conv_bn(cin, cout, k, stride, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        if act:
            layers.append(nn.ReLU6(inplace=True))
        return nn.Sequential(*layers)

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = cin * expand
            self.use_res = stride == 1 and cin == cout
            layers = [conv_bn(cin, hidden, 1, 1)] if expand != 1 else []
            layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden),
                       conv_bn(hidden, cout, 1, 1, act=False)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res else self.conv(x)

    class MobileNetV2(nn.Module):
        # t (expansion), c (channels), n (repeats), s (first stride)
        CFG = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
               (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]

        def __init__(self, num_classes=1000):
            super().__init__()
            feats, cin = [conv_bn(3, 32, 3, 2)], 32
            for t, c, n, s in self.CFG:
                for i in range(n):
                    feats.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            feats.append(conv_bn(cin, 1280, 1, 1))
            self.features = nn.Sequential(*feats)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

        def forward(self, x):
            x = self.features(x)
            x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
            return self.classifier(torch.flatten(x, 1))

    return MobileNetV2()


def _randomize_batchnorm(model) -> None:
    """Non-trivial BatchNorm statistics (the exporter folds BN into the Conv weights; this
    keeps the folded weights from being a plain copy of the random init)."""
    torch, nn = _nn()
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.BatchNorm2d):
                c = mod.num_features
                mod.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(c, generator=g) + 0.5)
                mod.bias.copy_(torch.randn(c, generator=g) * 0.1)
                if torch.all(mod.weight == 1):  # still at its default: give it a spread
                    mod.weight.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)


def _mlp():
    _, nn = _nn()
    layers = []
    for i in range(MLP_LAYERS):
        layers.append(nn.Linear(MLP_WIDTH, MLP_WIDTH))
        if i < MLP_LAYERS - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------------

def _export(model, args: tuple, path: Path, input_names, output_names,
            dynamic_shapes: tuple) -> None:
    """Export with ``dynamic_shapes`` given per positional argument."""
    torch, _ = _nn()
    import logging

    # "torchvision is not installed. Skipping torchvision::nms" and the like
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    model.eval()
    # the exporter is chatty (progress lines on stdout, deprecation warnings): keep them
    # unless it fails
    buf = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(buf):
        warnings.simplefilter("ignore")
        try:
            with torch.no_grad():
                torch.onnx.export(model, args, str(path), input_names=input_names,
                                  output_names=output_names, opset_version=OPSET,
                                  dynamic_shapes=dynamic_shapes, external_data=True)
        except Exception:
            sys.stderr.write(buf.getvalue())
            raise


def _export_cnn(factory: Callable, path: Path) -> None:
    torch, _ = _nn()
    torch.manual_seed(SEED)
    model = factory()
    _randomize_batchnorm(model)
    x = torch.randn(*IMAGE_SHAPE)
    batch = torch.export.Dim("batch", min=1, max=1024)
    _export(model, (x,), path, ["x"], ["logits"], ({0: batch},))


def _build_resnet50(path: Path) -> None:
    _export_cnn(_resnet50, path)


def _build_mobilenetv2(path: Path) -> None:
    _export_cnn(_mobilenetv2, path)


def _build_mlp(path: Path) -> None:
    torch, _ = _nn()
    torch.manual_seed(SEED)
    x = torch.randn(MLP_BATCH, MLP_WIDTH)
    batch = torch.export.Dim("batch", min=1, max=4096)
    _export(_mlp(), (x,), path, ["x"], ["y"], ({0: batch},))


def _token_dims():
    torch, _ = _nn()
    return torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=512)


def _build_bert_base(path: Path) -> None:
    torch, nn = _nn()
    from transformers import BertConfig, BertModel

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            # "eager" attention: the classic MatMul/Softmax/MatMul graph optimizers look for
            self.bert = BertModel(BertConfig(attn_implementation="eager"))

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                            token_type_ids=token_type_ids, return_dict=True)
            return out.last_hidden_state, out.pooler_output

    torch.manual_seed(SEED)
    model = Bert()
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, model.bert.config.vocab_size, (BERT_BATCH, BERT_SEQ), generator=g)
    mask = torch.ones(BERT_BATCH, BERT_SEQ, dtype=torch.int64)
    mask[:, BERT_SEQ * 3 // 4:] = 0  # some padding, so the mask is not constant-foldable
    types = torch.zeros(BERT_BATCH, BERT_SEQ, dtype=torch.int64)
    types[:, BERT_SEQ // 2:] = 1
    b, s = _token_dims()
    dyn = ({0: b, 1: s},) * 3
    _export(model, (ids, mask, types), path, ["input_ids", "attention_mask", "token_type_ids"],
            ["last_hidden_state", "pooler_output"], dyn)


def _build_gpt2_small(path: Path) -> None:
    torch, nn = _nn()
    from transformers import GPT2Config, GPT2LMHeadModel

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.gpt2 = GPT2LMHeadModel(GPT2Config(use_cache=False, attn_implementation="eager"))

        def forward(self, input_ids, attention_mask):
            out = self.gpt2(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                            return_dict=True)
            return out.logits

    torch.manual_seed(SEED)
    model = GPT2()
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, model.gpt2.config.vocab_size, (GPT2_BATCH, GPT2_SEQ), generator=g)
    mask = torch.ones(GPT2_BATCH, GPT2_SEQ, dtype=torch.int64)
    b, s = _token_dims()
    dyn = ({0: b, 1: s},) * 2
    _export(model, (ids, mask), path, ["input_ids", "attention_mask"], ["logits"], dyn)


def _build_bert_base_int8(path: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = build("bert_base", path.parent)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        quantize_dynamic(str(src), str(path), weight_type=QuantType.QInt8)


def _gemm_to_matmul_add(model) -> None:
    """Gemm(x, W, b) with constant W (transB=1, alpha=beta=1) -> MatMul(x, W^T) + Add(b)."""
    from onnx import helper, numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    nodes = []
    for n in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type != "Gemm" or n.input[1] not in inits or attrs.get("transA", 0) or \
                attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
            nodes.append(n)
            continue
        w = numpy_helper.to_array(inits[n.input[1]])
        if attrs.get("transB", 0):
            inits[n.input[1]].CopyFrom(numpy_helper.from_array(w.T.copy(), n.input[1]))
        mm = f"{n.output[0]}_matmul"
        nodes.append(helper.make_node("MatMul", [n.input[0], n.input[1]],
                                      [mm if len(n.input) > 2 else n.output[0]],
                                      name=f"{n.name}_MatMul"))
        if len(n.input) > 2:
            nodes.append(helper.make_node("Add", [mm, n.input[2]], [n.output[0]],
                                          name=f"{n.name}_Add"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def _build_mlp_int4(path: Path) -> None:
    quantize_int4(build("mlp", path.parent), path)


def quantize_int4(src: Path, dst: Path) -> None:
    """``src``'s MatMuls of constant weights as com.microsoft MatMulNBits (4 bits, blocks of
    32, symmetric) by onnxruntime's ``MatMulNBitsQuantizer``, its Gemms of a constant weight
    written as MatMul + Add first (the quantizer takes MatMul only)."""
    import logging

    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(str(src))
    _gemm_to_matmul_add(model)
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    q = MatMulNBitsQuantizer(model, bits=4, block_size=32, is_symmetric=True)
    q.process()
    onnx.save(q.model.model, str(dst))


def quantize_dynamic_int8(src: Path, dst: Path) -> None:
    """``src`` through onnxruntime's ``quantize_dynamic`` with its defaults as a new user
    calls it (int8 weights, activations quantized at run time: DynamicQuantizeLinear ->
    MatMulInteger)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)


def convert_fp16(src: Path, dst: Path) -> None:
    """``src`` in float16 as onnxruntime's float16 tool writes it, float32 inputs and
    outputs kept."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(src))
    onnx.save_model(convert_float_to_float16(model, keep_io_types=True), str(dst))


def convert_bf16(src: Path, dst: Path) -> None:
    """``src`` in bfloat16, float32 inputs and outputs kept. No onnxruntime or onnx tool
    writes bfloat16 models, so this is onnxruntime's float16 tool (as :func:`convert_fp16`
    calls it) with the half type changed: the ops whose ONNX schema at the model's opset takes
    float16 but not bfloat16 (Conv, pooling, Resize, ...: a model with bfloat16 there is not
    valid ONNX) are left in float32 through the tool's block list, and then every float16
    tensor type, Cast target and stored tensor becomes bfloat16; the weights are rounded to
    bfloat16 from their float32 values (not through float16: no double rounding, no float16
    range clamp)."""
    import ml_dtypes
    import numpy as np
    import onnx
    from onnx import AttributeProto, TensorProto, numpy_helper
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    model = onnx.load(str(src))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    blocked = set(DEFAULT_OP_BLOCK_LIST)
    for op in {n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")}:
        try:
            schema = onnx.defs.get_schema(op, opset)
        except onnx.defs.SchemaError:
            continue
        for c in schema.type_constraints:
            if "tensor(float16)" in c.allowed_type_strs \
                    and "tensor(bfloat16)" not in c.allowed_type_strs:
                blocked.add(op)
    floats = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
              if t.data_type == TensorProto.FLOAT}
    half = convert_float_to_float16(model, keep_io_types=True, op_block_list=sorted(blocked))

    def tensor(t: onnx.TensorProto) -> None:
        if t.data_type == TensorProto.FLOAT16:
            values = floats.get(t.name)
            if values is None:
                values = numpy_helper.to_array(t).astype(np.float32)
            t.CopyFrom(numpy_helper.from_array(values.astype(ml_dtypes.bfloat16), t.name))

    def value_type(tp: onnx.TypeProto) -> None:
        if tp.HasField("tensor_type") and tp.tensor_type.elem_type == TensorProto.FLOAT16:
            tp.tensor_type.elem_type = TensorProto.BFLOAT16
        elif tp.HasField("sequence_type"):
            value_type(tp.sequence_type.elem_type)
        elif tp.HasField("optional_type"):
            value_type(tp.optional_type.elem_type)

    def graph(g: onnx.GraphProto) -> None:
        for t in g.initializer:
            tensor(t)
        for info in (*g.input, *g.output, *g.value_info):
            value_type(info.type)
        for node in g.node:
            for a in node.attribute:
                if a.type == AttributeProto.TENSOR:
                    tensor(a.t)
                elif a.type == AttributeProto.GRAPH:
                    graph(a.g)
                elif a.type == AttributeProto.GRAPHS:
                    for body in a.graphs:
                        graph(body)
                elif a.type == AttributeProto.INT and a.name in ("to", "dtype") \
                        and a.i == TensorProto.FLOAT16:
                    a.i = TensorProto.BFLOAT16

    graph(half.graph)
    # The tool leaves a blocked node's weights float32 but retypes their value_info entries,
    # and appends the Casts it puts before blocked nodes: both mended here (the order by
    # onnx-ir's topological sort).
    stored = {t.name for t in half.graph.initializer}
    kept = [v for v in half.graph.value_info if v.name not in stored]
    del half.graph.value_info[:]
    half.graph.value_info.extend(kept)
    import onnx_ir as ir

    model = ir.serde.deserialize_model(half)
    model.graph.sort()
    onnx.save_model(ir.serde.serialize_model(model), str(dst))


def quantize_qdq(src: Path, dst: Path, *, operator: bool = False,
                 per_channel: bool = True) -> None:
    """``src`` statically quantized as a new user would with onnxruntime's tool: QDQ (or
    QOperator with ``operator``), uint8 activations, int8 weights per output channel (per
    tensor without ``per_channel``), MinMax calibration on four seeded standard normal inputs
    of the first input's shape (symbolic dimensions 1)."""
    import numpy as np
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    inp = onnx.load(str(src), load_external_data=False).graph.input[0]
    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(SEED)
            self._it = iter([{inp.name: rng.standard_normal(shape).astype(np.float32)}
                             for _ in range(4)])

        def get_next(self):
            return next(self._it, None)

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        quantize_static(str(src), str(dst), Reader(),
                        quant_format=QuantFormat.QOperator if operator else QuantFormat.QDQ,
                        per_channel=per_channel, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8)


def _build_bert_base_fp16(path: Path) -> None:
    convert_fp16(build("bert_base", path.parent), path)


def _build_resnet50_qdq(path: Path) -> None:
    quantize_qdq(build("resnet50", path.parent), path)


BUILDERS: dict[str, Callable[[Path], None]] = {
    "resnet50": _build_resnet50,
    "mobilenetv2": _build_mobilenetv2,
    "bert_base": _build_bert_base,
    "gpt2_small": _build_gpt2_small,
    "mlp": _build_mlp,
    "bert_base_int8": _build_bert_base_int8,
    "mlp_int4": _build_mlp_int4,
    "bert_base_fp16": _build_bert_base_fp16,
    "resnet50_qdq": _build_resnet50_qdq,
}
MODEL_NAMES = tuple(BUILDERS)

#: seconds each ``build`` call of this process spent building (absent: the file was there)
BUILD_SECONDS: dict[str, float] = {}


def build(name: str, out_dir, force: bool = False) -> Path:
    """Build model ``name`` into ``out_dir`` (kept if it is already there); return its path."""
    if name not in BUILDERS:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODEL_NAMES)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.onnx"
    if path.exists() and not force:
        return path
    for stale in (path, out_dir / f"{name}.onnx.data"):
        stale.unlink(missing_ok=True)
    tmp = out_dir / f"{name}.partial.onnx"  # a killed build leaves no file that looks done
    tmp.unlink(missing_ok=True)
    (out_dir / f"{name}.partial.onnx.data").unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        BUILDERS[name](tmp)
        _finish(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        (out_dir / f"{name}.partial.onnx.data").unlink(missing_ok=True)
    BUILD_SECONDS[name] = time.perf_counter() - t0
    return path


def _finish(tmp: Path, path: Path) -> None:
    """Move a built model into place: weights inline when the file stays under protobuf's
    2 GB limit, otherwise in ``<name>.onnx.data`` beside it."""
    import onnx

    model = onnx.load(str(tmp), load_external_data=True)
    if model.ByteSize() < 1_800_000_000:
        onnx.save_model(model, str(path))
    else:
        onnx.save_model(model, str(path), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=f"{path.name}.data",
                        size_threshold=1024)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder to write <name>.onnx into")
    p.add_argument("--only", default="", help=f"comma-separated subset of {','.join(MODEL_NAMES)}")
    p.add_argument("--force", action="store_true", help="rebuild models that already exist")
    a = p.parse_args(argv)
    names = [n.strip() for n in a.only.split(",") if n.strip()] or list(MODEL_NAMES)
    bad = [n for n in names if n not in BUILDERS]
    if bad:
        p.error(f"unknown model(s) {', '.join(bad)}; choose from {', '.join(MODEL_NAMES)}")
    total = time.perf_counter()
    for name in names:
        path = Path(a.out) / f"{name}.onnx"
        if path.exists() and not a.force:
            print(f"{name:15s} exists, kept      {path}")
            continue
        built = build(name, a.out, force=a.force)
        size = sum(f.stat().st_size for f in built.parent.glob(f"{name}.onnx*")) / 2**20
        print(f"{name:15s} built in {BUILD_SECONDS[name]:6.1f} s  {built}  ({size:.0f} MiB)",
              flush=True)
    print(f"total {time.perf_counter() - total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
