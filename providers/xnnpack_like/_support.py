"""Which nodes the xnnpack_like delegate claims, and the reason for each it declines.

Pure analysis of :class:`~onnxplex.NodeView` objects (``check`` returns ``None`` for a supported
node, else the reason). What a claimed node runs as (variant and kernel) is decided by the
planner (``_plan``), which sees the whole claimed group.

The delegate computes float32 / float16 tensors and 8-bit quantized ones (plus the int32
accumulators of MatMulInteger); every tensor it touches must have a known rank, because rank-4
tensors are kept channels-last (NHWC) inside a partition.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from onnx import TensorProto as TP

from onnxplex import GraphView, NodeView, ValueInfo

MS = "com.microsoft"
Rank = Callable[[ValueInfo | None], int | None]
FLOAT_T = frozenset({TP.FLOAT, TP.FLOAT16})
Q8 = frozenset({TP.INT8, TP.UINT8})
DATA_T = FLOAT_T | Q8
_NAMES = {TP.FLOAT: "float32", TP.FLOAT16: "float16", TP.INT8: "int8", TP.UINT8: "uint8",
          TP.INT32: "int32", TP.INT64: "int64", TP.DOUBLE: "float64", TP.BFLOAT16: "bfloat16",
          TP.BOOL: "bool", TP.STRING: "string"}

UNARY_OPS = {"Relu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "LeakyRelu", "Elu", "Erf",
             "Sqrt", "Neg", "Abs", "Exp", "Reciprocal", "Softplus", "Softsign", "Clip", "Gelu"}
BINARY_OPS = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"}
SHAPE_OPS = {"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Concat"}
FUSED_CONV_ACTS = {"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid"}
FUSED_GEMM_ACTS = {"Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "Elu", "Softplus",
                   "Softsign"}


def type_name(t: int | None) -> str:
    return "unknown" if t is None else _NAMES.get(t, f"type {t}")


def s_attr(node: NodeView, name: str, default: str = "") -> str:
    v = node.attr(name, default)
    return v.decode() if isinstance(v, bytes) else str(v or "")


def _in(node: NodeView, i: int) -> ValueInfo | None:
    return node.input(i)


def _dtype_problem(v: ValueInfo | None, allowed: frozenset[int], what: str) -> str | None:
    if v is None or v.elem_type is None:
        return None
    if v.elem_type not in allowed:
        ok = ", ".join(sorted(type_name(t) for t in allowed))
        return f"{what} is {type_name(v.elem_type)}; the delegate computes {ok} here"
    return None


def const_like(graph: GraphView, v: ValueInfo | None, depth: int = 0) -> bool:
    """A constant, or a DequantizeLinear / Cast / Identity of constants (which the planner
    folds at compile time when the producer is in the same group)."""
    if v is None:
        return True
    if v.is_const:
        return True
    p = graph.producer(v.name)
    if p is None or depth > 4 or p.index not in graph.offered:
        return False
    if p.domain or p.op_type not in ("DequantizeLinear", "Cast", "Identity"):
        return False
    return all(const_like(graph, x, depth + 1) for x in p.inputs)


def const_value(graph: GraphView, v: ValueInfo | None) -> np.ndarray | None:
    return None if v is None else v.const


def _rank_problem(node: NodeView, r: Rank) -> str | None:
    for role, vals in (("input", node.inputs), ("output", node.outputs)):
        for v in vals:
            if v is None:
                continue
            if v.kind != "tensor":
                return f"{role} {v.name} is a {v.kind}, not a tensor"
            if r(v) is None:
                return (f"the rank of {role} {v.name} is unknown (shape inference gave none); "
                        "the delegate needs ranks to keep rank-4 tensors channels-last")
    return None


def _const_problem(graph: GraphView, v: ValueInfo | None, what: str) -> str | None:
    if v is not None and not const_like(graph, v):
        return f"{what} is not a constant (it must be known when the partition is compiled)"
    return None


def _float_io(node: NodeView, what: str = "input") -> str | None:
    return _dtype_problem(_in(node, 0), FLOAT_T, what) or \
        _dtype_problem(node.outputs[0] if node.outputs else None, FLOAT_T, "the output")


def _broadcast_problem(a: ValueInfo, b: ValueInfo) -> str | None:
    for da, db in zip(reversed(a.shape), reversed(b.shape)):
        if da == db or da == 1 or db == 1 or da is None or db is None or \
                isinstance(da, str) or isinstance(db, str):
            continue
        return f"input shapes {list(a.shape)} and {list(b.shape)} do not broadcast"
    return None


# ---- per op --------------------------------------------------------------------------------


def _conv(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    w, b = _in(node, 1), _in(node, 2)
    why = _float_io(node)
    if why:
        return why
    if w is None or r(w) != 4:
        return (f"{(r(w) or 2) - 2 if w is not None else '?'}-D convolution: the delegate "
                "runs 2-D convolutions only")
    why = _const_problem(graph, w, "the weight") or _const_problem(graph, b, "the bias")
    if why:
        return why
    if s_attr(node, "auto_pad", "NOTSET") not in ("NOTSET", "VALID", "SAME_UPPER",
                                                  "SAME_LOWER"):
        return f"auto_pad={s_attr(node, 'auto_pad')} is not a valid value"
    group = int(node.attr("group", 1))
    if w.shape[0] is not None and isinstance(w.shape[0], int) and w.shape[0] % group:
        return f"group={group} does not divide the {w.shape[0]} output channels"
    if node.op_type == "FusedConv":
        act = s_attr(node, "activation")
        if act and act not in FUSED_CONV_ACTS:
            return f"FusedConv activation {act} is not supported"
        if act == "Clip" and len(node.attr("activation_params", None) or ()) != 2:
            return "FusedConv Clip needs activation_params [min, max]"
    return None


def _gemm(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    why = _float_io(node, "input A")
    if why:
        return why
    b, c = _in(node, 1), _in(node, 2)
    if b is None or r(b) != 2:
        return "B is not 2-D"
    if not const_like(graph, b):
        return ("B is not a constant: the fully-connected operator needs constant weights "
                "(a MatMul of two computed tensors runs as batch matmul)")
    why = _const_problem(graph, c, "C")
    if why:
        return why
    if node.op_type == "FusedGemm":
        act = s_attr(node, "activation")
        if act and act not in FUSED_GEMM_ACTS:
            return f"FusedGemm activation {act} is not supported"
    return None


def _matmul(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    why = _dtype_problem(_in(node, 0), FLOAT_T, "input A") or \
        _dtype_problem(_in(node, 1), FLOAT_T, "input B")
    if why:
        return why
    a, b = _in(node, 0), _in(node, 1)
    if const_like(graph, b) and r(b) == 2:
        return None                          # fully connected
    if r(a) < 2 or r(b) < 2:
        return (f"batch matmul of a {min(r(a), r(b))}-D operand: the delegate's batch "
                "matmul needs rank >= 2 operands")
    return None


def _binary(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    if node.opset < 7:
        return f"{node.op_type} at opset {node.opset} uses legacy broadcast attributes"
    if len(node.inputs) != 2:
        return f"{node.op_type} with {len(node.inputs)} inputs: only two are supported"
    a, b = _in(node, 0), _in(node, 1)
    if a is None or b is None:
        return "an input is omitted"
    why = _dtype_problem(a, FLOAT_T, "input A") or _dtype_problem(b, FLOAT_T, "input B")
    if why:
        return why
    if a.elem_type != b.elem_type:
        return f"mixed input types {type_name(a.elem_type)} and {type_name(b.elem_type)}"
    return _broadcast_problem(a, b)


def _unary(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    why = _float_io(node)
    if why:
        return why
    op = node.op_type
    if op == "Clip":
        if node.opset >= 11:
            for i in (1, 2):
                v = _in(node, i)
                if v is not None and not v.is_const:
                    return f"Clip {'min' if i == 1 else 'max'} is not a constant"
    if op == "Gelu":
        appr = s_attr(node, "approximate", "none")
        if appr not in ("none", "tanh"):
            return f"Gelu approximate={appr!r} is not supported"
    return None


def _bias_gelu(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    return _float_io(node)


def _batchnorm(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    why = _float_io(node)
    if why:
        return why
    if node.opset < 9:
        return f"BatchNormalization at opset {node.opset} (spatial/is_test attributes)"
    if int(node.attr("training_mode", 0)) or len([o for o in node.outputs if o]) > 1:
        return "training mode (running statistics outputs) is not supported"
    for i, what in ((1, "scale"), (2, "B"), (3, "mean"), (4, "var")):
        why = _const_problem(graph, _in(node, i), what)
        if why:
            return why
    return None


def _layernorm(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    why = _float_io(node)
    if why:
        return why
    if len([o for o in node.outputs if o]) > 1:
        return "the Mean / InvStdDev outputs are not supported"
    return None


def _softmax(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    return _float_io(node)


def _pool(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    x = _in(node, 0)
    allowed = DATA_T if node.op_type == "MaxPool" else FLOAT_T
    why = _dtype_problem(x, allowed, "the input")
    if why:
        return why
    if r(x) != 4:
        return f"{r(x) - 2}-D pooling: the delegate pools 2-D (rank-4) tensors only"
    if node.op_type.startswith("Global"):
        return None
    if len(node.outputs) > 1 and node.outputs[1] is not None:
        return "the Indices output of MaxPool is not supported"
    if s_attr(node, "auto_pad", "NOTSET") not in ("NOTSET", "VALID", "SAME_UPPER",
                                                  "SAME_LOWER"):
        return f"auto_pad={s_attr(node, 'auto_pad')} is not a valid value"
    return None


def _reduce(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    why = _float_io(node)
    if why:
        return why
    axes = _in(node, 1)
    if axes is not None and not axes.is_const:
        return "the axes input is not a constant"
    return None


def _shape_op(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    for v in node.inputs[:1] if node.op_type != "Concat" else node.inputs:
        why = _dtype_problem(v, DATA_T, "the data input")
        if why:
            return why + " (shape computations stay on the CPU provider)"
    op = node.op_type
    if op == "Reshape" and _in(node, 1) is None:
        return "the shape input is missing"
    if op in ("Squeeze", "Unsqueeze") and node.opset >= 13:
        axes = _in(node, 1)
        if axes is not None and not axes.is_const:
            return "the axes input is not a constant"
        if axes is None and op == "Unsqueeze":
            return "Unsqueeze without axes"
    return None


def _cast(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    to = int(node.attr("to", 0))
    x = _in(node, 0)
    if to not in FLOAT_T:
        return f"Cast to {type_name(to)}: the delegate casts to float32/float16 only"
    return _dtype_problem(x, DATA_T | {TP.INT32, TP.INT64}, "the input")


def _quantize(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    x, s, z = _in(node, 0), _in(node, 1), _in(node, 2)
    why = _dtype_problem(x, FLOAT_T, "the input")
    if why:
        return why
    out = node.outputs[0]
    if out.elem_type not in Q8:
        return f"quantizing to {type_name(out.elem_type)}: only int8/uint8"
    if int(node.attr("block_size", 0)):
        return "blocked quantization (block_size) is not supported"
    if s is None or not s.is_const or (z is not None and not z.is_const):
        return "the scale or zero point is not a constant"
    return None


def _dequantize(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    x, s, z = _in(node, 0), _in(node, 1), _in(node, 2)
    why = _dtype_problem(x, Q8 | {TP.INT32}, "the input")
    if why:
        return why
    if int(node.attr("block_size", 0)):
        return "blocked dequantization (block_size) is not supported"
    if s is None or not s.is_const or (z is not None and not z.is_const):
        return "the scale or zero point is not a constant"
    return _dtype_problem(node.outputs[0], FLOAT_T, "the output")


def _dynamic_quantize_linear(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    return _dtype_problem(_in(node, 0), frozenset({TP.FLOAT}), "the input")


def _matmul_integer(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    for i, what in ((0, "A"), (1, "B")):
        why = _dtype_problem(_in(node, i), Q8, what)
        if why:
            return why
    return None


def _matmul_integer_to_float(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    why = _matmul_integer(node, graph, r)
    if why:
        return why
    return _dtype_problem(node.outputs[0], frozenset({TP.FLOAT}), "the output")


def _dynamic_quantize_matmul(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    why = _dtype_problem(_in(node, 0), frozenset({TP.FLOAT}), "input A") or \
        _dtype_problem(_in(node, 1), Q8, "B")
    if why:
        return why
    for i, what in ((1, "B"), (2, "b_scale"), (3, "b_zero_point"), (4, "the bias")):
        v = _in(node, i)
        if v is not None and not v.is_const:
            return f"{what} is not a constant"
    if r(_in(node, 1)) != 2:
        return "B is not 2-D"
    return None


def _matmul_nbits(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    why = _dtype_problem(_in(node, 0), frozenset({TP.FLOAT}), "input A")
    if why:
        return why
    bits = int(node.attr("bits", 4))
    if bits != 4:
        return f"bits={bits}: the delegate runs 4-bit weights only"
    if node.attr("K") is None or node.attr("N") is None or node.attr("block_size") is None:
        return "the K, N or block_size attribute is missing"
    for i, what in ((1, "B"), (2, "scales"), (3, "zero_points"), (5, "the bias")):
        v = _in(node, i)
        if v is not None and not v.is_const:
            return f"{what} is not a constant"
    if _in(node, 4) is not None:
        return "g_idx (act-order) is not supported"
    return None


def _qlinear(node: NodeView, graph: GraphView, r: Rank) -> str | None:
    """QLinearConv (2-D) / QLinearMatMul (2-D weights): every parameter constant."""
    why = _dtype_problem(_in(node, 0), Q8, "the input")
    if why:
        return why
    conv = node.op_type == "QLinearConv"
    w = _in(node, 3)
    if w is None or r(w) != (4 if conv else 2):
        return "only 2-D QLinearConv is supported" if conv else "B is not 2-D"
    for i in range(1, len(node.inputs)):
        v = _in(node, i)
        if v is not None and not v.is_const:
            return f"input {i} of {node.op_type} is not a constant"
    return None


CHECKS: dict[tuple[str, str], Callable[[NodeView, GraphView, Rank], str | None]] = {
    ("", "Conv"): _conv, (MS, "FusedConv"): _conv,
    ("", "Gemm"): _gemm, (MS, "FusedGemm"): _gemm,
    ("", "MatMul"): _matmul,
    ("", "BatchNormalization"): _batchnorm,
    ("", "LayerNormalization"): _layernorm,
    ("", "Softmax"): _softmax,
    ("", "MaxPool"): _pool, ("", "AveragePool"): _pool,
    ("", "GlobalAveragePool"): _pool, ("", "GlobalMaxPool"): _pool,
    ("", "ReduceMean"): _reduce, ("", "ReduceMax"): _reduce, ("", "ReduceSum"): _reduce,
    ("", "Cast"): _cast,
    ("", "QuantizeLinear"): _quantize, ("", "DequantizeLinear"): _dequantize,
    ("", "DynamicQuantizeLinear"): _dynamic_quantize_linear,
    ("", "MatMulInteger"): _matmul_integer,
    (MS, "MatMulIntegerToFloat"): _matmul_integer_to_float,
    (MS, "DynamicQuantizeMatMul"): _dynamic_quantize_matmul,
    (MS, "MatMulNBits"): _matmul_nbits,
    ("", "QLinearConv"): _qlinear, ("", "QLinearMatMul"): _qlinear,
    (MS, "Gelu"): _bias_gelu, (MS, "BiasGelu"): _bias_gelu, (MS, "FastGelu"): _bias_gelu,
}
CHECKS.update({("", op): _unary for op in UNARY_OPS})
CHECKS.update({("", op): _binary for op in BINARY_OPS})
CHECKS.update({("", op): _shape_op for op in SHAPE_OPS})


def check(node: NodeView, graph: GraphView, ranks: Mapping[str, int]) -> str | None:
    """``None`` when the delegate can run ``node``, else the reason it declines. ``ranks``:
    the ranks :func:`infer_ranks` found where shape inference gave none."""
    fn = CHECKS.get((node.domain, node.op_type))
    if fn is None:
        return f"op {node.qualified_op} is not supported by the delegate"
    if node.op_type == "Gelu" and not node.domain and node.opset < 20:
        return f"Gelu at opset {node.opset}"

    def r(v: ValueInfo | None) -> int | None:
        return None if v is None else v.rank if v.rank is not None else ranks.get(v.name)

    why = _rank_problem(node, r)
    if why:
        return why
    return fn(node, graph, r)


# ---- ranks where shape inference gave none (com.microsoft ops have no ONNX shape inference) --

_SAME_RANK = {"Conv", "FusedConv", "Relu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid",
              "LeakyRelu", "Elu", "Erf", "Sqrt", "Neg", "Abs", "Exp", "Reciprocal", "Softplus",
              "Softsign", "Clip", "Gelu", "BiasGelu", "FastGelu", "Cast", "QuantizeLinear",
              "DequantizeLinear", "Softmax", "BatchNormalization", "LayerNormalization",
              "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Identity",
              "Transpose", "Concat", "QLinearConv", "MatMulNBits", "DynamicQuantizeMatMul"}
_MATMULS = {"MatMul", "MatMulInteger", "MatMulIntegerToFloat", "QLinearMatMul"}


def _matmul_rank(a: int | None, b: int | None) -> int | None:
    if a is None or b is None:
        return None
    if a == 1 and b == 1:
        return 0
    if a == 1 or b == 1:
        return max(a, b) - 1
    return max(a, b)


def node_out_ranks(node: NodeView, r: Rank) -> list[int | None]:
    """The ranks of ``node``'s outputs by the op's rules (None where they do not say)."""
    op = node.op_type
    x = r(node.input(0)) if node.inputs else None
    if op in _SAME_RANK:
        return [x] + [None] * (len(node.outputs) - 1)
    if op in BINARY_OPS:
        ranks = [r(v) for v in node.inputs]
        return [None if None in ranks else max(ranks)]
    if op in ("Gemm", "FusedGemm", "Flatten"):
        return [2]
    if op in _MATMULS:
        b = r(node.input(3 if op == "QLinearMatMul" else 1))
        return [_matmul_rank(x, b)]
    if op == "DynamicQuantizeLinear":
        return [x, 0, 0]
    if op == "Reshape":
        shape = node.input(1)
        return [None if shape is None or shape.const is None else int(shape.const.size)]
    return [None] * len(node.outputs)


def infer_ranks(nodes: Sequence[NodeView]) -> dict[str, int]:
    """Ranks of the values ``nodes`` (in topological order) produce that shape inference left
    unknown, by each op's rules; values still unknown are absent."""
    ranks: dict[str, int] = {}

    def r(v: ValueInfo | None) -> int | None:
        return None if v is None else v.rank if v.rank is not None else ranks.get(v.name)

    for node in nodes:
        outs = node.outputs
        if all(o is None or o.rank is not None for o in outs):
            continue
        for o, k in zip(outs, node_out_ranks(node, r)):
            if o is not None and o.rank is None and k is not None:
                ranks[o.name] = k
    return ranks
