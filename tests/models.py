"""Model builders for the end-to-end tests.

Every builder is deterministic (seeded numpy generators) and needs no download. The models are
checked with ``onnx.checker`` and were validated against onnxruntime, which the tests use as
their oracle.
"""

from __future__ import annotations

import glob
import math
import os
from pathlib import Path

import numpy as np
import onnx
import onnx.backend.test
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "LIGHT_MODEL_IDS",
    "light_model_paths",
    "light_model_id",
    "with_probe_outputs",
    "with_op_outputs",
    "graph_feed_inputs",
    "transformer_encoder",
    "transformer_feed",
    "quantize_dynamic_model",
    "small_cnn",
    "inception_block",
]

IR_VERSION = 10  # what onnx 1.17+ writes; onnxruntime >= 1.20 reads it.


# --------------------------------------------------------------------------------------------
# The light models of onnx's backend test data
# --------------------------------------------------------------------------------------------

def light_model_paths() -> list[str]:
    """The nine ``light_*.onnx`` models shipped with ``onnx.backend.test`` (sorted).

    They are the ONNX model-zoo CNNs (AlexNet, DenseNet-121, Inception v1/v2, ResNet-50,
    ShuffleNet, SqueezeNet, VGG-19, ZFNet-512) with every weight replaced by a
    ``ConstantOfShape`` node (value 0.02), so they are small on disk.
    """
    data = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data", "light")
    return sorted(glob.glob(os.path.join(data, "light_*.onnx")))


def light_model_id(path: str) -> str:
    """``.../light_bvlc_alexnet.onnx`` -> ``bvlc_alexnet``."""
    return Path(path).stem.removeprefix("light_")


LIGHT_MODEL_IDS = [light_model_id(p) for p in light_model_paths()]


def graph_feed_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are not initializers (what a session's get_inputs() reports).

    The light models are IR version 3, where every initializer is also listed as an input.
    """
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def with_probe_outputs(model: onnx.ModelProto, n_probes: int = 4) -> tuple[onnx.ModelProto,
                                                                           list[str]]:
    """A copy of ``model`` with intermediate values added as extra graph outputs.

    The light models' weights are all 0.02, so every class logit is equal and the final
    Softmax is uniform whatever the input: the declared output alone says little. The probes
    are the float outputs of ``n_probes`` nodes spread evenly over the graph (not counting the
    weight nodes and weight reshapes) plus the input of the last node (the logits); these do
    depend on the input. Returns the model and the probe names in graph order.
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inferred = onnx.shape_inference.infer_shapes(model)
    vi = {v.name: v for v in inferred.graph.value_info}
    declared = {o.name for o in model.graph.output}

    def activation(name: str) -> bool:  # a float feature map [1, C, ...], not a weight
        if name not in vi or vi[name].type.tensor_type.elem_type != TensorProto.FLOAT:
            return False
        dims = vi[name].type.tensor_type.shape.dim
        return len(dims) >= 3 and dims[0].dim_value == 1

    compute = [n for n in model.graph.node
               if n.op_type != "ConstantOfShape" and activation(n.output[0])]
    picks = [compute[(len(compute) * k) // (n_probes + 1)] for k in range(1, n_probes + 1)]
    names = [n.output[0] for n in picks]
    names.append(model.graph.node[-1].input[0])
    probes = []
    for name in names:
        if name in declared or name in probes or name not in vi:
            continue
        if vi[name].type.tensor_type.elem_type != TensorProto.FLOAT:
            continue
        probes.append(name)
        model.graph.output.append(vi[name])
    return model, probes


def with_op_outputs(model: onnx.ModelProto, op_types: set[str]) -> tuple[onnx.ModelProto,
                                                                       list[str]]:
    """A copy of ``model`` where every output of the nodes of ``op_types`` is a graph output.

    Element types come from shape inference (shapes are left unset). Returns the model and
    the added names in graph order; for bisecting a mismatch down to one node.
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inferred = onnx.shape_inference.infer_shapes(model)
    elem = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    declared = {o.name for o in model.graph.output}
    added = []
    for node in model.graph.node:
        if node.op_type not in op_types:
            continue
        for name in node.output:
            if name and name not in declared and name in elem:
                added.append(name)
                model.graph.output.append(helper.make_tensor_value_info(name, elem[name], None))
    return model, added


# --------------------------------------------------------------------------------------------
# A BERT-like transformer encoder, in the form torch.onnx.export writes it
# --------------------------------------------------------------------------------------------

class _GraphBuilder:
    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, shape, std: float) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * std).astype(np.float32))

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, n_out: int = 1,
           **attrs) -> str | list[str]:
        outs = [self.fresh(hint or op_type) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs,
                                           name=self.fresh(f"n_{op_type}"), **attrs))
        return outs[0] if n_out == 1 else outs


def transformer_encoder(vocab: int = 1000, d_model: int = 64, heads: int = 4, ffn: int = 256,
                        layers: int = 2, opset: int = 17, max_positions: int = 128,
                        seed: int = 0) -> onnx.ModelProto:
    """A pre-LayerNorm BERT-style encoder with torch-export-style dynamic shape plumbing.

    Inputs ``input_ids`` and ``attention_mask`` (int64, [batch, seq], symbolic dims); output
    ``last_hidden_state`` (float, [batch, seq, d_model]). The position embedding is a Gather on
    ``Range(0, seq)`` where ``seq`` comes from ``Shape(input_ids)`` at run time, the head
    reshapes take batch/seq from Shape->Gather->Unsqueeze->Concat, the mask is
    ``Unsqueeze((1 - Cast(mask)) * -10000)`` and GELU is the decomposed erf form.
    """
    if opset < 17:
        raise ValueError("LayerNormalization needs opset >= 17")
    assert d_model % heads == 0
    dh = d_model // heads
    rng = np.random.default_rng(seed)
    g = _GraphBuilder(rng)
    f32 = np.float32
    i64 = np.int64

    # shared constants (torch writes them as initializers or Constant nodes; initializers here)
    c0 = g.const("c_i64_0", np.array(0, i64))
    c1 = g.const("c_i64_1", np.array(1, i64))
    ax0 = g.const("axes_0", np.array([0], i64))
    ax12 = g.const("axes_1_2", np.array([1, 2], i64))
    heads_dh = g.const("shape_heads_dh", np.array([heads, dh], i64))
    dmodel = g.const("shape_d_model", np.array([d_model], i64))
    one_f = g.const("c_f32_1", np.array(1.0, f32))
    neg_big = g.const("c_f32_neg10000", np.array(-10000.0, f32))
    half = g.const("c_f32_half", np.array(0.5, f32))
    sqrt2 = g.const("c_f32_sqrt2", np.array(math.sqrt(2.0), f32))
    inv_scale = g.const("c_f32_sqrt_dh", np.array(math.sqrt(dh), f32))

    # embeddings
    word_emb = g.weight("embeddings.word_embeddings.weight", (vocab, d_model), 1.0)
    pos_emb = g.weight("embeddings.position_embeddings.weight", (max_positions, d_model), 0.5)
    tok = g.op("Gather", [word_emb, "input_ids"], "word_embeds", axis=0)
    ids_shape = g.op("Shape", ["input_ids"], "ids_shape")
    seq_len = g.op("Gather", [ids_shape, c1], "seq_len", axis=0)  # scalar int64
    positions = g.op("Range", [c0, seq_len, c1], "position_ids")
    pos = g.op("Gather", [pos_emb, positions], "position_embeds", axis=0)
    x = g.op("Add", [tok, pos], "embeds")

    # extended attention mask [batch, 1, 1, seq]
    mask_f = g.op("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    inv_mask = g.op("Sub", [one_f, mask_f], "inv_mask")
    add_mask = g.op("Mul", [inv_mask, neg_big], "additive_mask")
    ext_mask = g.op("Unsqueeze", [add_mask, ax12], "ext_mask")

    def layer_norm(inp: str, prefix: str) -> str:
        scale = g.const(f"{prefix}.weight",
                        (1.0 + 0.1 * rng.standard_normal(d_model)).astype(f32))
        bias = g.const(f"{prefix}.bias", (0.1 * rng.standard_normal(d_model)).astype(f32))
        return g.op("LayerNormalization", [inp, scale, bias], f"{prefix}_out", axis=-1,
                    epsilon=1e-5)

    def linear(inp: str, prefix: str, d_in: int, d_out: int) -> str:
        w = g.weight(f"{prefix}.weight", (d_in, d_out), 1.0 / math.sqrt(d_in))
        b = g.weight(f"{prefix}.bias", (d_out,), 0.1)
        mm = g.op("MatMul", [inp, w], f"{prefix}_mm")
        return g.op("Add", [mm, b], f"{prefix}_out")

    def dim(tensor: str, axis: int, hint: str) -> str:
        """Shape(t) -> Gather(axis) -> Unsqueeze(0): a 1-element int64 tensor, as torch does."""
        shp = g.op("Shape", [tensor], f"{hint}_shape")
        d = g.op("Gather", [shp, g.const(g.fresh(f"{hint}_idx"), np.array(axis, i64))],
                 f"{hint}_dim", axis=0)
        return g.op("Unsqueeze", [d, ax0], f"{hint}_dim1")

    for li in range(layers):
        p = f"encoder.layer.{li}"
        h = layer_norm(x, f"{p}.attention_norm")
        q = linear(h, f"{p}.attention.query", d_model, d_model)
        k = linear(h, f"{p}.attention.key", d_model, d_model)
        v = linear(h, f"{p}.attention.value", d_model, d_model)
        b_dim = dim(h, 0, f"{p}.batch")
        s_dim = dim(h, 1, f"{p}.seq")
        head_shape = g.op("Concat", [b_dim, s_dim, heads_dh], f"{p}.head_shape", axis=0)
        qh = g.op("Transpose", [g.op("Reshape", [q, head_shape], f"{p}.q_r")], f"{p}.q_t",
                  perm=[0, 2, 1, 3])
        kh = g.op("Transpose", [g.op("Reshape", [k, head_shape], f"{p}.k_r")], f"{p}.k_t",
                  perm=[0, 2, 3, 1])
        vh = g.op("Transpose", [g.op("Reshape", [v, head_shape], f"{p}.v_r")], f"{p}.v_t",
                  perm=[0, 2, 1, 3])
        scores = g.op("MatMul", [qh, kh], f"{p}.scores")
        scores = g.op("Div", [scores, inv_scale], f"{p}.scores_scaled")
        scores = g.op("Add", [scores, ext_mask], f"{p}.scores_masked")
        probs = g.op("Softmax", [scores], f"{p}.probs", axis=-1)
        ctx = g.op("MatMul", [probs, vh], f"{p}.context")
        ctx = g.op("Transpose", [ctx], f"{p}.context_t", perm=[0, 2, 1, 3])
        out_shape = g.op("Concat", [b_dim, s_dim, dmodel], f"{p}.out_shape", axis=0)
        ctx = g.op("Reshape", [ctx, out_shape], f"{p}.context_r")
        attn = linear(ctx, f"{p}.attention.output", d_model, d_model)
        x = g.op("Add", [x, attn], f"{p}.attention_residual")

        h = layer_norm(x, f"{p}.ffn_norm")
        f = linear(h, f"{p}.intermediate", d_model, ffn)
        e = g.op("Erf", [g.op("Div", [f, sqrt2], f"{p}.gelu_div")], f"{p}.gelu_erf")
        e = g.op("Add", [e, one_f], f"{p}.gelu_add")
        f = g.op("Mul", [f, e], f"{p}.gelu_mul")
        f = g.op("Mul", [f, half], f"{p}.gelu")
        f = linear(f, f"{p}.output", ffn, d_model)
        x = g.op("Add", [x, f], f"{p}.ffn_residual")

    final = layer_norm(x, "final_norm")
    g.nodes.append(helper.make_node("Identity", [final], ["last_hidden_state"],
                                    name="output_identity"))

    graph = helper.make_graph(
        g.nodes, "transformer_encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       ["batch", "seq", d_model])],
        initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=IR_VERSION, producer_name="onnxplex-tests")
    onnx.checker.check_model(model, full_check=True)
    return model


def transformer_feed(batch: int, seq: int, vocab: int = 1000, seed: int = 0,
                     pad: bool = True) -> dict[str, np.ndarray]:
    """Seeded input_ids/attention_mask; with ``pad`` the later rows end in masked positions."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    if pad:
        for b in range(batch):
            n_pad = (b + 1) * seq // (batch + 2)  # every row gets some padding
            if n_pad:
                mask[b, seq - n_pad:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def quantize_dynamic_model(model_proto: onnx.ModelProto, tmp_path, weight_type: str = "QInt8",
                           *, reduce_range: bool = False) -> onnx.ModelProto:
    """Dynamically quantize ``model_proto`` with onnxruntime's quantization tool.

    ``weight_type`` is ``"QInt8"`` or ``"QUInt8"``; per-tensor (per_channel=False);
    ``reduce_range`` quantizes the weights to 7 bits (what onnxruntime needs to be exact with
    QInt8 weights on x86 without VNNI: ``_ort_quirks.ort_reduce_range``). The float model and
    the result are written under ``tmp_path``; returns the quantized ModelProto
    (DynamicQuantizeLinear on activations, MatMulInteger, then a float rescale).
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic  # test-only dependency

    tmp_path = Path(tmp_path)
    tmp_path.mkdir(parents=True, exist_ok=True)
    src = tmp_path / "float.onnx"
    dst = tmp_path / f"dynamic_{weight_type.lower()}{'_reduce_range' * reduce_range}.onnx"
    onnx.save(model_proto, src)
    quantize_dynamic(str(src), str(dst), weight_type=getattr(QuantType, weight_type),
                     per_channel=False, reduce_range=reduce_range)
    return onnx.load(str(dst))


def quantize_nbits(w: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """float [K, N] -> com.microsoft MatMulNBits (bits=4, symmetric, zero point 8) B, scales."""
    k, n = w.shape
    wb = w.T.reshape(n, k // block, block)
    scales = np.abs(wb).max(-1) / 7
    scales[scales == 0] = 1
    q = (np.clip(np.rint(wb / scales[..., None]), -8, 7) + 8).astype(np.uint8)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    return packed, scales.astype(np.float32).reshape(-1)


def dynamic_int8_bound(x: np.ndarray, w_i8: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """How far a Kleidi dynamic-int8 result (activations quantized per row to int8) may be
    from ONNX's (per tensor, uint8): half an activation step of each, times the column's
    sum |w| * scale; ``x`` [M, K], ``w_i8`` [K, N] -> bound [M, N]."""
    s_row = (np.maximum(x.max(1), 0) - np.minimum(x.min(1), 0)) / 255
    s_tensor = (max(x.max(), 0) - min(x.min(), 0)) / 255
    colsum = (np.abs(w_i8.astype(np.float64)) * scales).sum(0)
    return 0.5 * (s_row[:, None] + s_tensor) * colsum[None, :] * 1.01 + 1e-5


# --------------------------------------------------------------------------------------------
# Small CNNs for the concurrency tests
# --------------------------------------------------------------------------------------------

def small_cnn(batch: int | str = "N", seed: int = 0, opset: int = 17) -> onnx.ModelProto:
    """Conv -> Relu -> MaxPool -> Conv -> Relu -> MaxPool -> Flatten -> Gemm -> Softmax.

    Input ``x`` float [batch, 3, 16, 16]; output ``probs`` float [batch, 10].
    """
    rng = np.random.default_rng(seed)
    f32 = np.float32
    inits = [
        numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(f32), "w1"),
        numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(f32), "b1"),
        numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(f32), "w2"),
        numpy_helper.from_array((rng.standard_normal(16) * 0.1).astype(f32), "b2"),
        numpy_helper.from_array((rng.standard_normal((10, 16 * 4 * 4)) * 0.1).astype(f32),
                                "w3"),
        numpy_helper.from_array((rng.standard_normal(10) * 0.1).astype(f32), "b3"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "w3", "b3"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 16, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 10])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=IR_VERSION, producer_name="onnxplex-tests")
    onnx.checker.check_model(model, full_check=True)
    return model


def inception_block(batch: int | str = "N", channels: int = 8, seed: int = 0,
                    opset: int = 17) -> onnx.ModelProto:
    """An inception-like block: four independent branches joined by a Concat.

    Branches: 1x1 conv; 1x1 -> 3x3 conv; 1x1 -> 5x5 conv; 3x3 max-pool -> 1x1 conv (each
    followed by Relu), concatenated on channels, then a GlobalAveragePool/Flatten/Gemm head
    with a Softmax. Input ``x`` float [batch, channels, 16, 16]; outputs ``features``
    (the concatenation) and ``probs``.
    """
    rng = np.random.default_rng(seed)
    f32 = np.float32
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def conv(inp: str, name: str, cin: int, cout: int, k: int) -> str:
        w = (rng.standard_normal((cout, cin, k, k)) / math.sqrt(cin * k * k)).astype(f32)
        b = (rng.standard_normal(cout) * 0.1).astype(f32)
        inits.append(numpy_helper.from_array(w, f"{name}.w"))
        inits.append(numpy_helper.from_array(b, f"{name}.b"))
        nodes.append(helper.make_node("Conv", [inp, f"{name}.w", f"{name}.b"], [f"{name}.c"],
                                      kernel_shape=[k, k], pads=[k // 2] * 4, name=name))
        nodes.append(helper.make_node("Relu", [f"{name}.c"], [f"{name}.r"],
                                      name=f"{name}.relu"))
        return f"{name}.r"

    b1 = conv("x", "b1_1x1", channels, 8, 1)
    b2 = conv(conv("x", "b2_1x1", channels, 6, 1), "b2_3x3", 6, 8, 3)
    b3 = conv(conv("x", "b3_1x1", channels, 4, 1), "b3_5x5", 4, 8, 5)
    nodes.append(helper.make_node("MaxPool", ["x"], ["b4_pool"], kernel_shape=[3, 3],
                                  strides=[1, 1], pads=[1, 1, 1, 1], name="b4_pool"))
    b4 = conv("b4_pool", "b4_1x1", channels, 8, 1)
    nodes.append(helper.make_node("Concat", [b1, b2, b3, b4], ["features"], axis=1,
                                  name="concat"))
    nodes.append(helper.make_node("GlobalAveragePool", ["features"], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], axis=1, name="flatten"))
    inits.append(numpy_helper.from_array(
        (rng.standard_normal((10, 32)) / math.sqrt(32)).astype(f32), "fc.w"))
    inits.append(numpy_helper.from_array((rng.standard_normal(10) * 0.1).astype(f32), "fc.b"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], transB=1,
                                  name="fc"))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="softmax"))
    graph = helper.make_graph(
        nodes, "inception_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, channels, 16, 16])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [batch, 32, 16, 16]),
         helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 10])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=IR_VERSION, producer_name="onnxplex-tests")
    onnx.checker.check_model(model, full_check=True)
    return model
