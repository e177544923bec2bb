"""Layout level (onnxruntime's Level 3, applied to the default CPU provider's nodes): 2-D float
convolutions go channels-last.

``NhwcTransformer``: a Conv or com.microsoft FusedConv whose input is a float32 ``[N, C, H, W]``
tensor and whose weight is a constant (group 1, depthwise, or grouped with a multiple of 4
output channels a group: the shapes the cpu_mlas channels-last kernels run) becomes a
com.microsoft ``NhwcFusedConv``: X, Z and Y are ``[N, H, W, C]``; W, B and the attributes stay
as they were (onnxruntime's contrib op of that name has the same contract).

Layout-agnostic elementwise nodes (activations, Add/Mul/Sum/..., every tensor input of the
output's shape, a scalar, a value constant over H and W, or a constant) fed by a channels-last
value run channels-last too, as they are: a residual ``Sum`` + ``Relu`` between two convs costs
no transpose, nor does a squeeze-excite block's ``Mul(x, gate)`` with its ``[N, C, 1, 1]``
gate (channels-last ``[N, 1, 1, C]``, the same memory; constants are permuted here, once). So
does a 2-D MaxPool (without Indices) fed by one, as com.microsoft ``NhwcMaxPool``, a 2-D
AveragePool, as onnxruntime's internal ``com.ms.internal.nhwc`` AveragePool, and a global
average over H and W (GlobalAveragePool, ReduceMean of axes 2, 3 keeping them), as
ReduceMean of axes 1, 2: its ``[N, 1, 1, C]`` result is the NCHW ``[N, C, 1, 1]``'s memory, so
the transpose back moves nothing.

Transposes go only where the layout changes: in front of a converted node whose input comes
from a node left NCHW (or from a graph input), and behind a converted node whose output is
read by a node left NCHW (or is a graph output), one per value however many nodes read it.
A chain of convs, residual sums (FusedConv's Z) included, stays channels-last between its
edges: a MobileNetV2 keeps two transposes, at its input and before its pooling.

Why channels-last: onnxruntime's CPU provider converts CNNs to NCHWc for the same reason.
In NCHW every conv pays for its layout: a group-1 conv packs im2col panels (a transposition of
each tap's plane), a depthwise conv transposes its input into channel vectors and its output
back, a conv on a small plane transposes into the GEMM's better orientation. Channels-last,
a 1x1 conv is a GEMM on the tensor as it is, a k x k conv's im2col rows are runs of C
contiguous floats, and a depthwise conv's vectors are channels already.

Concat of channels-last values runs channels-last along the permuted axis (a DenseNet's
feature concatenations), as does a Split of one (its axis permuted too) and a channel shuffle
(``Reshape [N, g, C/g, H, W]``, ``Transpose (0, 2, 1, 3, 4)``, ``Reshape [N, C, H, W]``: the
same swap of the last two axes of ``[N, H, W, g, C/g]``), and an inference BatchNormalization of
one (one that follows no conv to fold into) becomes a depthwise 1x1 channels-last conv, as
onnxruntime's NCHWc transformer makes it.

Quantized CNNs (the QDQ fusions' QLinear ops, or a QOperator model's) go channels-last the same
way: a 2-D 8-bit QLinearConv of constant weights and per-tensor x / y zero points, of one group
or depthwise, becomes com.microsoft ``QLinearConv`` with ``channels_last=1`` (onnxruntime's
contrib op; its NhwcTransformer makes the same change), QLinearAdd / QLinearMul /
QLinearSigmoid / QLinearLeakyRelu, ai.onnxplex QLinearLookup and per-tensor QuantizeLinear /
DequantizeLinear between them are elementwise, and QLinearGlobalAveragePool takes
``channels_last=1``: a quantized MobileNetV2 transposes its 8-bit input once and its pooled
vector, where each conv transposed its input in and its output back.

Then ``NhwcFusedConv + activation``: a channels-last conv without an activation followed by
one of FusedConv's (Relu, Clip, ...), SiLU (``Mul(y, Sigmoid(y))``) or HardSwish takes it as
its activation ("Swish", "HardSwish" for the last two), which the native kernels apply to each
block of output as they finish it.

onnx-ir has no layout pass and onnxscript's rewriter matches patterns, not regions, so the
region walk is here: one pass in graph order, converting each node as it is met.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir

from . import OptimizerContext, register_pass
from ._fusions_cnn import (
    _CONV_ACTIVATIONS,
    MS_DOMAIN,
    ONNXPLEX_DOMAIN,
    _activation,
    _const,
    _copy_attrs,
    _counted,
    _dtype,
    _fresh,
    _fuse,
    _initializer,
    _input,
    _is_const,
    _is_onnx,
    _rewrite,
    _same_static_shape,
    _spatial_axes_mean,
    _use_ms_domain,
    bn_scale,
    inference_bn,
)

logger = logging.getLogger(__name__)

LAYOUT = 3
_FLOAT = ir.DataType.FLOAT
TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


def _static_dims(v: ir.Value | None, rank: int) -> tuple[int | ir.SymbolicDim, ...] | None:
    if v is None or v.shape is None or len(v.shape) != rank:
        return None
    return tuple(v.shape)


def _convertible(node: ir.Node) -> bool:
    """A 2-D float32 Conv/FusedConv that the channels-last kernels run."""
    if not (_is_onnx(node, "Conv") or (node.domain == MS_DOMAIN and node.op_type == "FusedConv")):
        return False
    x, w, y = _input(node, 0), _input(node, 1), node.outputs[0]
    if x is None or _dtype(x) != _FLOAT or _dtype(y) != _FLOAT or not _is_const(w):
        return False
    shapes = _conv_shapes(x, w, node)
    if shapes is None:
        return False
    xs, ws, group = shapes
    depthwise = group == xs[1] == ws[0] and ws[1] == 1
    # grouped: groups of a multiple of 4 output channels (the native kernel's vectors)
    grouped = isinstance(ws[0], int) and group > 1 and ws[0] % group == 0 and \
        (ws[0] // group) % 4 == 0
    if group != 1 and not depthwise and not grouped:
        return False
    z = _input(node, 3)
    # the sum input: only of the output's own shape (no broadcasting)
    return z is None or _same_static_shape(z, y)


_Q8 = (ir.DataType.UINT8, ir.DataType.INT8)


def _qlinear_convertible(node: ir.Node) -> bool:
    """A 2-D 8-bit QLinearConv (the QDQ fusions', or a QOperator model's) with constant
    weights, per-tensor x and y zero points, of one group or depthwise: the shapes cpu_mlas's
    channels-last integer kernels run (com.microsoft QLinearConv with channels_last=1)."""
    if not _is_onnx(node, "QLinearConv"):
        return False
    x, w, y = _input(node, 0), _input(node, 3), node.outputs[0]
    if x is None or _dtype(x) not in _Q8 or _dtype(y) not in _Q8 or not _is_const(w) or \
            _dtype(w) not in _Q8:
        return False
    for k in (1, 2, 4, 5, 6, 7, 8):
        v = _input(node, k)
        if v is not None and not _is_const(v):
            return False
    for k in (2, 7):   # per-tensor zero points of x and y
        v = _input(node, k)
        if v is not None and not _scalar(v):
            return False
    shapes = _conv_shapes(x, w, node)
    if shapes is None:
        return False
    xs, ws, group = shapes
    return group == 1 or (group == xs[1] == ws[0] and ws[1] == 1)


def _conv_shapes(x: ir.Value, w: ir.Value, node: ir.Node) -> tuple | None:
    """(x's 4 dims, w's 4 dims, group) of a 2-D conv whose channels are known, or None."""
    xs, ws = _static_dims(x, 4), _static_dims(w, 4)
    if xs is None or ws is None or not isinstance(xs[1], int):
        return None
    group = node.attributes.get("group")
    return xs, ws, 1 if group is None else int(group.value)


# com.microsoft's quantized elementwise ops (their scales and zero points scalars), as
# layout-agnostic as the float ones; and per-tensor QuantizeLinear / DequantizeLinear.
_QLINEAR_ELEMENTWISE = frozenset({"QLinearAdd", "QLinearMul", "QLinearSigmoid",
                                  "QLinearLeakyRelu"})


def _quantized_elementwise(node: ir.Node) -> bool:
    if node.domain == MS_DOMAIN and node.op_type in _QLINEAR_ELEMENTWISE:
        return True
    if not _is_onnx(node, "QuantizeLinear", "DequantizeLinear"):
        return False
    # per tensor: a scalar scale and zero point (no axis the layout would move)
    return all(v is not None and _is_const(v) and _scalar(v) for v in node.inputs[1:])


def _lookup(node: ir.Node, nhwc: dict[ir.Value, ir.Value]) -> bool:
    """ai.onnxplex QLinearLookup (an 8-bit table, see ``_fusions_cnn._qdq_table``) of a
    channels-last value: byte by byte, layout-agnostic; its table stays as it is."""
    return node.domain == ONNXPLEX_DOMAIN and node.op_type == "QLinearLookup" and \
        _input(node, 0) in nhwc


def _qlinear_global_pool(node: ir.Node, nhwc: dict[ir.Value, ir.Value]) -> bool:
    """com.microsoft QLinearGlobalAveragePool of a channels-last value: its channels_last
    form, whose [N, 1, 1, C] result is the NCHW [N, C, 1, 1]'s memory."""
    if node.domain != MS_DOMAIN or node.op_type != "QLinearGlobalAveragePool":
        return False
    cl = node.attributes.get("channels_last")
    return _input(node, 0) in nhwc and (cl is None or int(cl.value) == 0) and \
        _static_dims(_input(node, 0), 4) is not None


# Elementwise ops that do not care about layout: any input either the output's own shape or a
# scalar (no broadcasting along an axis the layout moves).
_ELEMENTWISE = frozenset({
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Clip", "Elu", "Selu",
    "Celu", "Softplus", "Softsign", "ThresholdedRelu", "Mish", "Gelu", "Erf", "Neg", "Abs",
    "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign",
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean",
    "Cast",   # (a half-precision conversion's Casts between convs it left in float32)
})


def _scalar(v: ir.Value) -> bool:
    return v.shape is not None and all(d == 1 for d in v.shape)


def _quick_gelu(node: ir.Node | None) -> bool:
    """com.microsoft QuickGelu (SiLU with alpha 1: the extended level's Sigmoid + Mul): as
    layout-agnostic as the ONNX activations."""
    return node is not None and node.domain == MS_DOMAIN and node.op_type == "QuickGelu" and \
        len(node.inputs) == 1


def _per_image(v: ir.Value) -> bool:
    """A rank-4 value constant over H and W (``[N or 1, C or 1, 1, 1]``: a squeeze-excite
    gate, a pooled mean): its channels-last form is the same memory, a transpose moves
    nothing."""
    dims = _static_dims(v, 4)
    return dims is not None and dims[2] == 1 and dims[3] == 1


def _const_operand(v: ir.Value) -> bool:
    """A constant, not a scalar, of rank 4 or less: rewritten channels-last once, here (its
    shape padded to rank 4 on the left, as broadcasting does)."""
    return _is_const(v) and not _scalar(v) and v.shape is not None and len(v.shape) <= 4


def _elementwise(node: ir.Node, nhwc: dict[ir.Value, ir.Value]) -> bool:
    """A layout-agnostic elementwise node worth running channels-last: one of its inputs is
    channels-last already, every other tensor input is of its output's shape, a scalar, a
    value constant over H and W (a squeeze-excite block's ``Mul(x, gate)``: the gate
    ``[N, C, 1, 1]`` broadcast over the image; NCHW and NHWC broadcast the same once every
    operand is permuted alike) or a constant of rank 4 or less."""
    if not (_is_onnx(node, *_ELEMENTWISE) or _quick_gelu(node)
            or _quantized_elementwise(node)):
        return False
    y = node.outputs[0]
    if _static_dims(y, 4) is None:
        return False
    fed = False
    for v in node.inputs:
        if v is None or (_is_const(v) and _scalar(v)):
            continue
        if v in nhwc:
            if not (_same_static_shape(v, y) or _per_image(v)):
                return False
            fed = True
        elif not (_same_static_shape(v, y) or _per_image(v) or _const_operand(v)):
            return False
    return fed


def _const_nhwc(graph: ir.Graph, v: ir.Value) -> ir.Value:
    """A constant operand of an elementwise node, channels-last: a new initializer."""
    arr = v.const_value.numpy()
    arr = arr.reshape((1,) * (4 - arr.ndim) + arr.shape)
    return _initializer(graph, np.ascontiguousarray(arr.transpose(TO_NHWC)), f"{v.name}_nhwc")


def _max_pool(node: ir.Node, nhwc: dict[ir.Value, ir.Value]) -> bool:
    """A 2-D float32 MaxPool without Indices fed by a channels-last value (a ResNet's, after its
    stem conv): channels-last too (com.microsoft NhwcMaxPool), no transposes around it."""
    if not _is_onnx(node, "MaxPool"):
        return False
    x = _input(node, 0)
    if len(node.outputs) > 1 and (node.outputs[1].uses() or node.outputs[1].is_graph_output()):
        return False   # Indices: NCHW offsets
    return x in nhwc and _dtype(x) == _FLOAT and _static_dims(x, 4) is not None


NHWC_DOMAIN = "com.ms.internal.nhwc"
"""onnxruntime's domain for ops on channels-last tensors, with the ONNX op's attributes."""


def _average_pool(node: ir.Node, nhwc: dict[ir.Value, ir.Value]) -> bool:
    """A 2-D float32 AveragePool of a channels-last value (a DenseNet's transitions, an
    Inception branch's 3x3 pool): channels-last too, as onnxruntime's internal NHWC domain's
    AveragePool."""
    x = _input(node, 0)
    return _is_onnx(node, "AveragePool") and x in nhwc and _dtype(x) == _FLOAT and \
        _static_dims(x, 4) is not None and _static_dims(node.outputs[0], 4) is not None


def _spatial_mean(node: ir.Node, nhwc: dict[ir.Value, ir.Value]) -> bool:
    """A global average over H and W of a channels-last value: GlobalAveragePool, or ReduceMean
    of constant axes {2, 3} keeping them (a CNN's pooling before its classifier)."""
    x = _input(node, 0)
    if x not in nhwc or _dtype(x) != _FLOAT or _static_dims(x, 4) is None:
        return False
    if _is_onnx(node, "GlobalAveragePool"):
        return True
    return _is_onnx(node, "ReduceMean") and _spatial_axes_mean(node, 4)


# An NCHW axis's place channels-last (N, H, W, C)
_NHWC_AXIS = (0, 3, 1, 2)


def _concat_axis(node: ir.Node, nhwc: dict[ir.Value, ir.Value]) -> int | None:
    """The channels-last axis of a rank-4 Concat worth running channels-last: at least as many
    of its non-constant inputs channels-last already as not (each of the others costs a
    transpose; constants are permuted once), every input of static rank 4. A DenseNet's
    feature concatenations between its convs, which otherwise cost two transposes each."""
    if not _is_onnx(node, "Concat") or _static_dims(node.outputs[0], 4) is None:
        return None
    axis = node.attributes.get("axis")
    axis = 1 if axis is None else int(axis.value)   # (Concat-1's default)
    if not -4 <= axis < 4:
        return None
    fed = others = 0
    for v in node.inputs:
        if v is None or _static_dims(v, 4) is None:
            return None
        if v in nhwc:
            fed += 1
        elif not _is_const(v):
            others += 1
    return _NHWC_AXIS[axis % 4] if fed and fed >= others else None


def _split_axis(node: ir.Node, nhwc: dict[ir.Value, ir.Value]) -> int | None:
    """The channels-last axis of a Split of a channels-last rank-4 value into rank-4 parts
    (a ShuffleNet's halves), else None."""
    if not _is_onnx(node, "Split") or _input(node, 0) not in nhwc:
        return None
    if any(_static_dims(o, 4) is None for o in node.outputs):
        return None
    axis = node.attributes.get("axis")
    axis = 0 if axis is None else int(axis.value)
    return _NHWC_AXIS[axis % 4] if -4 <= axis < 4 else None


def _const_ints(v: ir.Value | None) -> list[int] | None:
    arr = _const(v)
    return None if arr is None or arr.ndim != 1 else [int(d) for d in arr]


def _channel_shuffle(node: ir.Node, nhwc: dict[ir.Value, ir.Value]
                     ) -> tuple[ir.Node, ir.Node, int] | None:
    """``Reshape [N, g, C/g, H, W] -> Transpose (0, 2, 1, 3, 4) -> Reshape [N, C, H, W]`` of
    a channels-last value (ShuffleNet's channel shuffle), each step read by the next only:
    (the Transpose, the last Reshape, g), else None."""
    x = _input(node, 0)
    if not _is_onnx(node, "Reshape") or x not in nhwc:
        return None
    dims = _static_dims(x, 4)
    first = _const_ints(_input(node, 1))
    if dims is None or first is None or len(first) != 5 or not all(
            isinstance(d, int) for d in dims[1:]):
        return None
    n, c, h, w = dims
    g = first[1]
    # the batch: its size, or -1 / 0 (inferred, copied: the same channels-last)
    batch = (-1, 0) if not isinstance(n, int) else (-1, 0, n)
    if g <= 0 or c % g or first[0] not in batch or first[1:] != [g, c // g, h, w]:
        return None
    t = _sole_use(node.outputs[0])
    if not _is_onnx(t, "Transpose") or t.attributes.get("perm") is None or \
            list(t.attributes["perm"].value) != [0, 2, 1, 3, 4]:
        return None
    last = _sole_use(t.outputs[0])
    second = _const_ints(_input(last, 1)) if _is_onnx(last, "Reshape") else None
    if second is None or second[0] not in batch or second[1:] != [c, h, w] or \
            _static_dims(last.outputs[0], 4) is None:
        return None
    return t, last, g


def _batchnorm(node: ir.Node, nhwc: dict[ir.Value, ir.Value]
               ) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) of an inference BatchNormalization with constant float parameters of a
    channels-last float32 value (one the Conv + BatchNormalization folding could not fold: it
    follows a Concat, as in a DenseNet's pre-activation layers), else None."""
    if not _is_onnx(node, "BatchNormalization") or not inference_bn(node):
        return None
    x = node.inputs[0]
    if x not in nhwc or _dtype(x) != _FLOAT or _dtype(node.outputs[0]) != _FLOAT:
        return None
    if any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
        return None   # (the running statistics of training mode)
    dims = _static_dims(x, 4)
    params = [_const(v) for v in node.inputs[1:]]
    if dims is None or not isinstance(dims[1], int) or any(
            p is None or p.dtype.kind != "f" or p.size != dims[1] for p in params):
        return None
    scale, beta, mean = bn_scale(node, params)
    return scale, beta - mean * scale


def _permuted(v: ir.Value, perm: tuple[int, ...]) -> ir.Shape | None:
    return None if v.shape is None else ir.Shape([v.shape[p] for p in perm])


LAYOUT_TRANSPOSE_SUFFIXES = ("/ToNHWC", "/ToNCHW")
"""How the Transpose nodes this pass inserts are named (``<value>/ToNHWC``, ``<value>/ToNCHW``):
layout conversions, as onnxruntime's NCHWc ReorderInput/ReorderOutput nodes."""


def _transpose(graph: ir.Graph, src: ir.Value, perm: tuple[int, ...], name: str) -> ir.Node:
    suffix = LAYOUT_TRANSPOSE_SUFFIXES[0 if perm == TO_NHWC else 1]
    node = ir.Node("", "Transpose", [src], attributes=[ir.AttrInt64s("perm", list(perm))],
                   num_outputs=1, name=_fresh(graph, f"{src.name}{suffix}"))
    out = node.outputs[0]
    out.name = _fresh(graph, name)
    out.type = src.type
    out.shape = _permuted(src, perm)
    return node


@register_pass("NhwcTransformer", LAYOUT, requires={"Conv", "FusedConv", "QLinearConv"})
@_counted
def _nhwc_transformer(ctx: OptimizerContext) -> int:
    graph = ctx.model.graph
    nhwc: dict[ir.Value, ir.Value] = {}     # an NCHW value -> its channels-last twin
    const_twins: dict[ir.Value, ir.Value] = {}   # a constant operand -> its permuted copy
    converted: list[ir.Node] = []

    def channels_last(v: ir.Value, before: ir.Node) -> ir.Value:
        twin = nhwc.get(v)
        if twin is None:
            t = _transpose(graph, v, TO_NHWC, f"{v.name}_nhwc")
            graph.insert_before(before, t)
            twin = nhwc[v] = t.outputs[0]
        return twin

    def const_twin(v: ir.Value) -> ir.Value:
        twin = const_twins.get(v)
        if twin is None:
            twin = const_twins[v] = _const_nhwc(graph, v)
        return twin

    # Each converted node is rewritten in place (op, inputs, attributes, name); its output
    # values become the channels-last ones once the walk is over (the walk's shape checks
    # read NCHW shapes), and readers left NCHW get them back through one transpose each.
    renamed: dict[ir.Value, str] = {}
    perms: dict[ir.Value, tuple[int, ...]] = {}   # a rank-5 value's permutation (else NHWC)
    done: set[int] = set()   # id() of nodes converted ahead of the walk
    for node in list(graph):   # the main graph's nodes (bodies keep their layout)
        if id(node) in ctx.protected or id(node) in done:
            continue
        attrs = None   # None: the node's own
        if (shuffle := _channel_shuffle(node, nhwc)) is not None and not any(
                id(n) in ctx.protected for n in shuffle[:2]):
            # channels-last: [N, H, W, g, C/g] -> swap the last two -> [N, H, W, C]
            t, last, g = shuffle
            _, c, h, w = _static_dims(node.inputs[0], 4)
            n = -1   # (the batch inferred)
            steps = ((node, [nhwc[node.inputs[0]], _initializer(
                         graph, np.array([n, h, w, g, c // g], np.int64),
                         f"{node.name or 'shuffle'}_nhwc_shape")], None),
                     (t, [node.outputs[0]], [ir.AttrInt64s("perm", [0, 1, 2, 4, 3])]),
                     (last, [t.outputs[0], _initializer(
                         graph, np.array([n, h, w, c], np.int64),
                         f"{last.name or 'shuffle'}_nhwc_shape")], None))
            for step, ins, step_attrs in steps:
                outs = step.outputs
                step.name = _fresh(graph, f"{step.name or outs[0].name}/nhwc")
                renamed[outs[0]] = _fresh(graph, f"{outs[0].name}_nhwc")
                _rewrite(step, "", step.op_type, ins, step_attrs)
                nhwc[outs[0]] = outs[0]
                converted.append(step)
                done.add(id(step))
            perms[node.outputs[0]] = perms[t.outputs[0]] = (0, 3, 4, 1, 2)
            continue
        if _convertible(node):
            inputs = list(node.inputs) + [None] * (4 - len(node.inputs))
            inputs[0] = channels_last(inputs[0], node)
            if inputs[3] is not None:
                inputs[3] = channels_last(inputs[3], node)
            while inputs and inputs[-1] is None:
                inputs.pop()
            domain, op_type = MS_DOMAIN, "NhwcFusedConv"
        elif _qlinear_convertible(node):
            inputs = list(node.inputs)
            inputs[0] = channels_last(inputs[0], node)
            domain, op_type = MS_DOMAIN, "QLinearConv"
            attrs = [a for a in _copy_attrs(node) if a.name != "channels_last"]
            attrs.append(ir.AttrInt64("channels_last", 1))
        elif _lookup(node, nhwc):
            inputs = [nhwc[node.inputs[0]], *node.inputs[1:]]
            domain, op_type = node.domain, node.op_type
        elif _qlinear_global_pool(node, nhwc):
            inputs = [nhwc[node.inputs[0]], *node.inputs[1:]]
            domain, op_type = MS_DOMAIN, node.op_type
            attrs = [ir.AttrInt64("channels_last", 1)]
        elif _max_pool(node, nhwc):
            inputs = [nhwc[node.inputs[0]]]
            domain, op_type = MS_DOMAIN, "NhwcMaxPool"
            attrs = _copy_attrs(node, drop=("storage_order",))
        elif _average_pool(node, nhwc):
            inputs = [nhwc[node.inputs[0]]]
            domain, op_type = NHWC_DOMAIN, "AveragePool"
            ctx.model.ir.opset_imports.setdefault(NHWC_DOMAIN, 1)
        elif _spatial_mean(node, nhwc):
            # ReduceMean over axes (1, 2) of the channels-last value: [N, 1, 1, C], the same
            # memory as the NCHW [N, C, 1, 1] (the transpose back, if any, moves nothing);
            # its axes an input from opset 18, an attribute before
            inputs = [nhwc[node.inputs[0]]]
            domain, op_type = "", "ReduceMean"
            attrs = [ir.AttrInt64("keepdims", 1)]
            opset = node.version or ctx.model.ir.opset_imports.get("", 1)
            if opset >= 18:
                inputs.append(_initializer(graph, np.array([1, 2], np.int64),
                                           f"{node.name or 'mean'}_nhwc_axes"))
            else:
                attrs.append(ir.AttrInt64s("axes", [1, 2]))
        elif (axis := _concat_axis(node, nhwc)) is not None:
            inputs = [const_twin(v) if v not in nhwc and _is_const(v)
                      else channels_last(v, node) for v in node.inputs]
            domain, op_type = node.domain, node.op_type
            attrs = [ir.AttrInt64("axis", axis)]
        elif (axis := _split_axis(node, nhwc)) is not None:
            inputs = [nhwc[node.inputs[0]], *node.inputs[1:]]
            domain, op_type = node.domain, node.op_type
            attrs = [a for a in _copy_attrs(node) if a.name != "axis"]
            attrs.append(ir.AttrInt64("axis", axis))
        elif (affine := _batchnorm(node, nhwc)) is not None:
            # y = x * scale + shift per channel: a depthwise 1x1 channels-last conv (as
            # onnxruntime's NCHWc transformer makes it), whose activation, when one follows,
            # the pass below fuses
            scale, shift = affine
            base = node.name or node.outputs[0].name
            w = _initializer(graph, scale.astype(np.float32).reshape(-1, 1, 1, 1),
                             f"{base}_bn_scale")
            b = _initializer(graph, shift.astype(np.float32), f"{base}_bn_shift")
            inputs = [nhwc[node.inputs[0]], w, b]
            domain, op_type = MS_DOMAIN, "NhwcFusedConv"
            attrs = [ir.AttrInt64("group", scale.size), ir.AttrInt64s("kernel_shape", [1, 1])]
            node.resize_outputs(1)   # (the others are unused: see _batchnorm)
        elif _elementwise(node, nhwc):
            inputs = []
            for v in node.inputs:
                if v is None or (_is_const(v) and _scalar(v)):
                    inputs.append(v)
                elif v not in nhwc and _const_operand(v):
                    inputs.append(const_twin(v))
                else:
                    inputs.append(channels_last(v, node))
            domain, op_type = node.domain, node.op_type
        else:
            continue
        node.name = _fresh(graph, f"{node.name or node.outputs[0].name}/nhwc")
        for y in node.outputs:
            renamed[y] = _fresh(graph, f"{y.name}_nhwc")
            nhwc[y] = y
        _rewrite(node, domain, op_type, inputs, attrs)
        converted.append(node)
    if not converted:
        return 0
    _use_ms_domain(ctx)
    ours = {id(n) for n in converted}
    # Last to first, as the transposes back go right behind their nodes: an output read by a
    # node left NCHW, or a graph output, keeps its name on a transpose back.
    for node in reversed(converted):
        for y in reversed(node.outputs):
            name = y.name
            readers = [(user, i) for user, i in y.uses() if id(user) not in ours]
            y.name, y.shape = renamed[y], _permuted(y, perms.get(y, TO_NHWC))
            if not readers and not y.is_graph_output():
                continue
            back = _transpose(graph, y, TO_NCHW, name)   # (rank 4: see _channel_shuffle)
            graph.insert_after(node, back)
            nchw = back.outputs[0]
            for user, i in readers:
                user.replace_input_with(i, nchw)
            outputs = graph.outputs
            for k, v in enumerate(outputs):
                if v is y:
                    outputs[k] = nchw
            nchw.name = name
    logger.debug("NhwcTransformer: %d node(s) channels-last", len(converted))
    return len(converted)


# --------------------------------------------------------------------------------------------
# NhwcFusedConv + SiLU / HardSwish -> NhwcFusedConv with that activation
# --------------------------------------------------------------------------------------------

_HARD_SWISH_ALPHA = 1.0 / 6.0


def _sole_use(v: ir.Value) -> ir.Node | None:
    """The node reading ``v``, when exactly one does (once) and ``v`` is not a graph output."""
    if v.is_graph_output():
        return None
    uses = list(v.uses())
    return uses[0][0] if len(uses) == 1 else None


def _silu_alpha(node: ir.Node) -> bool:
    """A QuickGelu whose alpha is 1: SiLU."""
    a = node.attributes.get("alpha")
    return a is not None and float(a.value) == 1.0


def _gated(y: ir.Value) -> tuple[str, list[ir.Node]] | None:
    """``y`` times a gate computed from ``y`` alone: ``Mul(y, Sigmoid(y))`` (SiLU, what
    exporters write for torch's SiLU/Swish) or ``Mul(y, HardSigmoid(y))`` with HardSwish's
    alpha 1/6 and beta 0.5, either operand order; the gate node and the Mul read nothing else,
    and the gate is used by the Mul only. The activation's name and [gate, Mul], else None."""
    if y.is_graph_output():
        return None
    users = list(y.uses())
    if len(users) != 2 or users[0][0] is users[1][0]:
        return None
    gate = next((u for u, i in users if i == 0 and _is_onnx(u, "Sigmoid", "HardSigmoid")
                 and len(u.inputs) == 1 and len(u.outputs) == 1), None)
    if gate is None:
        return None
    mul = next(u for u, _ in users if u is not gate)
    g = gate.outputs[0]
    if not _is_onnx(mul, "Mul") or len(mul.inputs) != 2 or set(mul.inputs) != {y, g} or \
            _sole_use(g) is not mul or _dtype(g) != _FLOAT or _dtype(mul.outputs[0]) != _FLOAT:
        return None
    if gate.op_type == "Sigmoid":
        return "Swish", [gate, mul]
    alpha, beta = gate.attributes.get("alpha"), gate.attributes.get("beta")
    alpha = 0.2 if alpha is None else float(alpha.value)
    beta = 0.5 if beta is None else float(beta.value)
    if abs(alpha - _HARD_SWISH_ALPHA) > 1e-7 or beta != 0.5:
        return None
    return "HardSwish", [gate, mul]


@register_pass("NhwcFusedConv + activation -> NhwcFusedConv", LAYOUT,
               requires={"Sigmoid", "HardSigmoid", "HardSwish", "QuickGelu",
                         *_CONV_ACTIVATIONS})
@_counted
def _nhwc_conv_activation(ctx: OptimizerContext) -> int:
    """A channels-last conv without an activation whose output goes through one becomes the
    conv's ``activation``: FusedConv's own (Relu, Sigmoid, Tanh, LeakyRelu, HardSigmoid, Clip;
    a BatchNormalization made a depthwise conv above comes without the Relu after it), SiLU
    (``Mul(y, Sigmoid(y))``, or the extended level's QuickGelu of alpha 1) or HardSwish (the
    op, or ``Mul(y, HardSigmoid(y))`` with alpha 1/6, beta 0.5) as "Swish" and "HardSwish",
    which the native kernels apply to each block of output as they finish it, instead of one
    to three more passes over the tensor. The last two only on NhwcFusedConv (onnxplex's own
    node: onnxruntime's FusedConv has neither, so an extended-level model stays
    onnxruntime's); float32 (the kernels'); the conv's output and the gate read by nothing
    else, neither a graph output."""
    graph = ctx.model.graph
    changes = 0
    for conv in list(graph):
        if conv.domain != MS_DOMAIN or conv.op_type != "NhwcFusedConv" or \
                conv.graph is not graph or id(conv) in ctx.protected or \
                "activation" in conv.attributes:
            continue
        y = conv.outputs[0]
        if _dtype(y) != _FLOAT:
            continue
        act = _sole_use(y)
        standard = _activation(act, _CONV_ACTIVATIONS) if act is not None else None
        params: list[float] = []
        if standard is not None and act.inputs[0] is y and id(act) not in ctx.protected \
                and _dtype(act.outputs[0]) == _FLOAT:
            kind, tail = standard[0], [act]
            params = [v for _, v in standard[1]]
        elif _is_onnx(act, "HardSwish") and len(act.inputs) == 1 and \
                _dtype(act.outputs[0]) == _FLOAT and id(act) not in ctx.protected:
            kind, tail = "HardSwish", [act]
        elif _quick_gelu(act) and _silu_alpha(act) and _dtype(act.outputs[0]) == _FLOAT and \
                id(act) not in ctx.protected:
            kind, tail = "Swish", [act]
        else:
            found = _gated(y)
            if found is None or any(id(n) in ctx.protected for n in found[1]):
                continue
            kind, tail = found
        attrs = _copy_attrs(conv) + [ir.AttrString("activation", kind)]
        if params:
            attrs.append(ir.AttrFloat32s("activation_params", params))
        _fuse(graph, [conv, *tail], MS_DOMAIN, "NhwcFusedConv", list(conv.inputs), attrs,
              tail[-1].outputs[0])
        changes += 1
    return changes


# --------------------------------------------------------------------------------------------
# Mul(x, per-image channel gate) + 1x1 NhwcFusedConv -> NhwcFusedConv reading x times the gate
# --------------------------------------------------------------------------------------------


def _attr_ints(node: ir.Node, name: str) -> list[int] | None:
    a = node.attributes.get(name)
    return None if a is None else [int(v) for v in a.value]


def _plain_pointwise(conv: ir.Node) -> bool:
    """A group-1 1x1 conv of stride 1 without padding: every output position reads its own
    input position's channels, so a per-channel scale of the input is a scale of the GEMM's
    rows as they are read."""
    w = _input(conv, 1)
    ws = _static_dims(w, 4) if w is not None and _is_const(w) else None
    if ws is None or ws[2:] != (1, 1):
        return False
    group = conv.attributes.get("group")
    pad = conv.attributes.get("auto_pad")
    return (group is None or int(group.value) == 1) and \
        all(s == 1 for s in _attr_ints(conv, "strides") or [1]) and \
        not any(_attr_ints(conv, "pads") or [0]) and \
        (pad is None or pad.value in ("NOTSET", "VALID", b"NOTSET", b"VALID"))


def _channel_gate(v: ir.Value, x: ir.Value) -> bool:
    """``v`` is ``[N or 1, 1, 1, C]`` for a channels-last ``x`` of ``[N, H, W, C]`` (static)."""
    vs, xs = _static_dims(v, 4), _static_dims(x, 4)
    return vs is not None and xs is not None and isinstance(xs[3], int) and \
        vs[1:] == (1, 1, xs[3]) and (vs[0] == 1 or vs[0] == xs[0])


@register_pass("Mul(x, channel gate) + 1x1 NhwcFusedConv -> NhwcFusedConv", LAYOUT,
               requires={"Mul"})
@_counted
def _nhwc_conv_input_scale(ctx: OptimizerContext) -> int:
    """A squeeze-excite block's ``Mul(x, gate)`` (channels-last by now: x ``[N, H, W, C]``, the
    gate ``[N or 1, 1, 1, C]``) read only by a plain 1x1 channels-last conv (group 1, stride
    1, no padding) becomes that conv's fifth input S, onnxplex's own: the conv reads x times S,
    which the native GEMM applies to x's rows as it copies them into its buffers, instead of a
    pass over the tensor writing the product. Float32 (the kernels'); the product is read by
    the conv alone and is not a graph output."""
    graph = ctx.model.graph
    changes = 0
    for conv in list(graph):
        if conv.domain != MS_DOMAIN or conv.op_type != "NhwcFusedConv" or \
                conv.graph is not graph or id(conv) in ctx.protected or \
                len(conv.inputs) > 4 or not _plain_pointwise(conv):
            continue
        v = conv.inputs[0]
        mul = v.producer() if v is not None else None
        if not _is_onnx(mul, "Mul") or len(mul.inputs) != 2 or id(mul) in ctx.protected or \
                _sole_use(v) is not conv or _dtype(v) != _FLOAT:
            continue
        a, b = mul.inputs
        for x, gate in ((a, b), (b, a)):
            if x is not None and gate is not None and x is not gate and \
                    _same_static_shape(x, v) and _channel_gate(gate, x) and \
                    _dtype(x) == _FLOAT and _dtype(gate) == _FLOAT:
                break
        else:
            continue
        inputs = list(conv.inputs) + [None] * (4 - len(conv.inputs))
        inputs[0] = x
        _rewrite(conv, conv.domain, conv.op_type, [*inputs, gate], None)
        graph.remove(mul, safe=True)
        changes += 1
    return changes
