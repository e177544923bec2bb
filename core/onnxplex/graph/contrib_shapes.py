"""Types and shapes of the com.microsoft quantized ops onnx's shape inference does not know.

onnx has no schema for onnxruntime's contrib ops, so its inference leaves their outputs
untyped, and everything downstream of one unknown too: in a QOperator model (onnxruntime's
quantizer writes QLinearAdd, QLinearMul, QLinearConcat... between ONNX QLinearConvs) every
conv after the first residual add had no input shape, and the layout pass, which needs it,
left 43 of MobileNetV2's 52 convs channels-first. :func:`infer_contrib` gives those outputs
the types and shapes onnxruntime's own contrib schemas infer, and the ONNX ops after them
theirs, node by node (onnx's single-node inference), in one pass over the graph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx
from onnx import helper

MS = "com.microsoft"

Dims = list  # of int | str | None
Info = tuple[int, "Dims | None"]   # (element type, dims or None)


def _broadcast(*shapes: Dims | None) -> Dims | None:
    if any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes)
    out: Dims = []
    for k in range(rank):
        dims = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        known = {d for d in dims if d != 1}
        if not known:
            out.append(1)
        elif len(known) == 1:
            out.append(known.pop())
        else:
            return None   # (a symbolic and a fixed dim, or a clash: left to the kernels)
    return out


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _elementwise(node, ins: Sequence[Info | None]) -> Info | None:
    a = ins[0] if ins else None
    return None if a is None else (a[0], a[1])


def _binary(node, ins: Sequence[Info | None]) -> Info | None:   # QLinearAdd / QLinearMul
    a, b = ins[0] if ins else None, ins[3] if len(ins) > 3 else None
    if a is None or b is None:
        return None
    return a[0], _broadcast(a[1], b[1])


def _global_pool(node, ins: Sequence[Info | None]) -> Info | None:
    x = ins[0] if ins else None
    if x is None or x[1] is None or len(x[1]) < 3:
        return None
    dims = x[1]
    if int(_attr(node, "channels_last", 0)) == 1:
        return x[0], [dims[0], *([1] * (len(dims) - 2)), dims[-1]]
    return x[0], [dims[0], dims[1], *([1] * (len(dims) - 2))]


def _concat(node, ins: Sequence[Info | None]) -> Info | None:
    # inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input
    xs = [ins[k] for k in range(2, len(ins), 3)]
    if not xs or any(x is None or x[1] is None for x in xs):
        return None
    rank = len(xs[0][1])
    axis = int(_attr(node, "axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank or any(len(x[1]) != rank for x in xs):
        return None
    along = [x[1][axis] for x in xs]
    dims = list(xs[0][1])
    dims[axis] = sum(along) if all(isinstance(d, int) for d in along) else None
    zp = ins[1] if len(ins) > 1 else None
    return (zp[0] if zp is not None else xs[0][0]), dims


def _where(node, ins: Sequence[Info | None]) -> Info | None:
    # condition, X, X_scale, X_zero_point, Y, Y_scale, Y_zero_point, Z_scale, Z_zero_point
    c, x, y = (ins[k] if len(ins) > k else None for k in (0, 1, 4))
    zp = ins[8] if len(ins) > 8 else None
    if c is None or x is None or y is None:
        return None
    return (zp[0] if zp is not None else x[0]), _broadcast(c[1], x[1], y[1])


def _qgemm(node, ins: Sequence[Info | None]) -> Info | None:
    a, b = ins[0] if ins else None, ins[3] if len(ins) > 3 else None
    if a is None or b is None or a[1] is None or b[1] is None or len(a[1]) != 2 \
            or len(b[1]) != 2:
        return None
    m = a[1][1] if int(_attr(node, "transA", 0)) else a[1][0]
    n = b[1][0] if int(_attr(node, "transB", 0)) else b[1][1]
    y_zp = ins[8] if len(ins) > 8 else None
    has_scale = len(node.input) > 7 and node.input[7] != ""
    elem = (y_zp[0] if y_zp is not None else a[0]) if has_scale else onnx.TensorProto.FLOAT
    return elem, [m, n]


def _matmul_to_float(node, ins: Sequence[Info | None]) -> Info | None:
    # MatMulIntegerToFloat / DynamicQuantizeMatMul: A @ B, float32
    a, b = ins[0] if ins else None, ins[1] if len(ins) > 1 else None
    if a is None or b is None or a[1] is None or b[1] is None or len(b[1]) != 2 \
            or not a[1]:
        return None
    return onnx.TensorProto.FLOAT, [*a[1][:-1], b[1][1]]


def _quantize(node, ins: Sequence[Info | None]) -> Info | None:
    # QuantizeLinear: x's shape, the zero point's type (uint8 without one)
    x, zp = ins[0] if ins else None, ins[2] if len(ins) > 2 else None
    if x is None:
        return None
    return (zp[0] if zp is not None else onnx.TensorProto.UINT8), x[1]


def _dequantize(node, ins: Sequence[Info | None]) -> Info | None:
    # DequantizeLinear: x's shape, the scale's type
    x, scale = ins[0] if ins else None, ins[1] if len(ins) > 1 else None
    if x is None or scale is None:
        return None
    return scale[0], x[1]


RULES: dict[str, Callable[[onnx.NodeProto, Sequence[Info | None]], Info | None]] = {
    "QuantizeLinear": _quantize, "DequantizeLinear": _dequantize,
    "QLinearAdd": _binary, "QLinearMul": _binary,
    "QLinearSigmoid": _elementwise, "QLinearLeakyRelu": _elementwise,
    "QLinearSoftmax": _elementwise,
    "QLinearGlobalAveragePool": _global_pool, "QLinearConcat": _concat,
    "QLinearWhere": _where, "QGemm": _qgemm,
    "MatMulIntegerToFloat": _matmul_to_float, "DynamicQuantizeMatMul": _matmul_to_float,
}
"""Output 0's (element type, dims) of the contrib ops, from their inputs' (element type,
dims or None), as onnxruntime's contrib schemas infer them (None: not known)."""


def _dims(tp: onnx.TypeProto) -> Info | None:
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.elem_type:
        return None
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return tt.elem_type, None
    dims: Dims = []
    for d in tt.shape.dim:
        which = d.WhichOneof("value")
        dims.append(d.dim_value if which == "dim_value" else
                    d.dim_param if which == "dim_param" else None)
    return tt.elem_type, dims


def _shaped(tp: onnx.TypeProto | None) -> bool:
    return tp is not None and tp.WhichOneof("value") == "tensor_type" and \
        bool(tp.tensor_type.elem_type) and tp.tensor_type.HasField("shape")


def _onnx_outputs(node: onnx.NodeProto, model: onnx.ModelProto, opset: int,
                  types: dict[str, onnx.TypeProto],
                  consts: dict[str, onnx.TensorProto]) -> dict[str, onnx.TypeProto]:
    """onnx's inference of one ONNX node from its inputs' types (and constant inputs' values),
    or nothing (no schema, an input not known, a body, an error: left as it is)."""
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for a in node.attribute):
        return {}
    if any(name and not _shaped(types.get(name)) for name in node.input):
        return {}
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
        return onnx.shape_inference.infer_node_outputs(
            schema, node, {n: types[n] for n in node.input if n},
            input_data={n: consts[n] for n in node.input if n in consts},
            opset_imports=list(model.opset_import))
    except Exception:  # noqa: BLE001 - inference is advisory
        return {}


def infer_contrib(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (already through onnx's inference) with its contrib ops' outputs typed, and
    the ONNX ops after them that onnx's inference could not type, in one pass in node order;
    a model without such ops is returned as it is."""
    graph = model.graph
    if not any(n.domain == MS and n.op_type in RULES for n in graph.node):
        return model
    types: dict[str, onnx.TypeProto] = {
        t.name: helper.make_tensor_type_proto(t.data_type, list(t.dims))
        for t in graph.initializer}
    entries: dict[str, onnx.ValueInfoProto] = {}
    for vi in (*graph.input, *graph.value_info, *graph.output):
        types[vi.name] = vi.type
    for vi in graph.value_info:
        entries[vi.name] = vi
    consts = {t.name: t for t in graph.initializer}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)

    def learn(name: str, tp: onnx.TypeProto) -> None:
        entry = entries.get(name)
        if entry is None:
            entry = entries[name] = graph.value_info.add()
            entry.name = name
        entry.type.CopyFrom(tp)
        types[name] = entry.type

    for node in graph.node:
        if all(not name or _shaped(types.get(name)) for name in node.output):
            continue
        if node.domain == MS and node.op_type in RULES:
            if not node.output[0] or _shaped(types.get(node.output[0])):
                continue
            ins = [_dims(types[name]) if name in types else None for name in node.input]
            try:
                found = RULES[node.op_type](node, ins)
            except Exception:  # noqa: BLE001 - a malformed node: left untyped, as before
                found = None
            if found is not None:
                learn(node.output[0], helper.make_tensor_type_proto(*found))
        elif node.domain in ("", "ai.onnx"):
            for name, tp in _onnx_outputs(node, model, opset, types, consts).items():
                if name and not _shaped(types.get(name)):
                    learn(name, tp)
    return model


__all__ = ["RULES", "infer_contrib"]
