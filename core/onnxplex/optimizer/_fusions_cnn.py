"""Extended level, CNN and quantization fusions (onnxruntime's Level-2 transformers):

* BatchNormalization (inference mode, constant parameters) folded into a preceding Conv /
  ConvTranspose / Gemm (as onnxscript's ``fuse_batchnorm_into_*`` rules, but into fresh
  initializers: their rules refuse weights shared by several nodes, which CSE creates, and
  initializers listed as inputs of IR<4 models);
* Conv + Add(per-channel constant) -> Conv with bias; Gemm + Add(constant) -> Gemm with C;
  MatMul(2-D A, constant B) + Add(constant) -> Gemm (onnxruntime's ConvAddFusion and
  MatMulAddFusion);
* Conv + activation -> com.microsoft FusedConv; Gemm + activation -> com.microsoft FusedGemm
  (ConvActivationFusion / GemmActivationFusion, with onnxruntime's attribute conventions);
* MatMulInteger -> Cast -> Mul(scale product) [-> Add(bias)] -> com.microsoft
  MatMulIntegerToFloat, then DynamicQuantizeLinear + MatMulIntegerToFloat(constant B) ->
  com.microsoft DynamicQuantizeMatMul (what ``quantize_dynamic`` emits);
* QDQ node groups (DequantizeLinear -> op -> QuantizeLinear, constant per-tensor scales) ->
  QLinearConv, QLinearMatMul, com.microsoft QLinearAdd / QLinearMul /
  QLinearGlobalAveragePool; Relu -> QuantizeLinear whose zero point is the type's minimum
  drops the Relu (ReluQuantFusion).

onnxruntime runs Conv+BN, Conv+Add and MatMul+Add at Level 1; here every pass of this module
runs from the extended level (the contrib ops they may produce need the cpu_mlas kernels of
``providers/cpu_mlas/contrib.py``). Fused nodes are float32 only, as onnxruntime's CPU kernels.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from ..graph.nodes import OPSET_KEY, all_nodes, attrs_of
from . import OptimizerContext, register_pass
from ._basic import _fold_constants, _run_node, ir_tensor, remove_unused

logger = logging.getLogger(__name__)

EXTENDED = 2
MS_DOMAIN = "com.microsoft"

_FLOAT = ir.DataType.FLOAT
_Q8 = (ir.DataType.UINT8, ir.DataType.INT8)
_FLT_MAX = float(np.finfo(np.float32).max)

# Activations FusedConv accepts (MLAS activation kinds), with their parameters in
# `activation_params` order and defaults.
_CONV_ACTIVATIONS: dict[str, tuple[tuple[str, float], ...]] = {
    "Relu": (), "Sigmoid": (), "Tanh": (),
    "LeakyRelu": (("alpha", 0.01),),
    "HardSigmoid": (("alpha", 0.2), ("beta", 0.5)),
    "Clip": (),  # min/max from inputs (opset 11+) or attributes
}
# Activations FusedGemm accepts: each attribute is copied as `activation_<name>` (always
# written, defaults filled in: onnxruntime's functors require them).
_GEMM_ACTIVATIONS: dict[str, tuple[tuple[str, float], ...]] = {
    "Relu": (), "Sigmoid": (), "Tanh": (), "Softsign": (), "Softplus": (),
    "LeakyRelu": (("alpha", 0.01),),
    "HardSigmoid": (("alpha", 0.2), ("beta", 0.5)),
    "Elu": (("alpha", 1.0),),
    "Selu": (("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875)),
    "ThresholdedRelu": (("alpha", 1.0),),
}


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _is_onnx(node: ir.Node | None, *op_types: str) -> bool:
    return node is not None and node.domain in ("", "ai.onnx") and node.op_type in op_types


_STATE = threading.local()


def _is_const(v: ir.Value | None) -> bool:
    """Whether ``v`` is an initializer (not a graph input, unless the model's IR version is
    below 4: then initializers are constants) or a Constant node's output; nothing is read."""
    if v is None or v.const_value is None:
        return False
    if v.is_graph_input() and not getattr(_STATE, "legacy_inputs", False):
        return False
    return v.is_initializer() or _is_onnx(v.producer(), "Constant")


def _const(v: ir.Value | None) -> np.ndarray | None:
    """The value of a constant :func:`_is_const` accepts (read: for a weight in the model
    file, a read of the file), else None. Small ones are read once per pass run (a CNN's
    35 Clips share their two bounds; onnx-ir reads a proto tensor anew each time)."""
    if not _is_const(v):
        return None
    t = v.const_value
    memo = getattr(_STATE, "consts", None)
    if memo is not None:
        hit = memo.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
    arr = t.numpy()
    if memo is not None and arr.nbytes <= _MEMO_BYTES:
        memo[id(t)] = (t, arr)   # the tensor is kept with it: its id stays its own
    return arr


_MEMO_BYTES = 4096


def _input(node: ir.Node, i: int) -> ir.Value | None:
    if i >= len(node.inputs):
        return None
    v = node.inputs[i]
    return v if v is not None and v.name != "" else v


def _sole_consumer(v: ir.Value) -> ir.Node | None:
    """The only node using ``v`` (once), when ``v`` is not a graph output."""
    if v.is_graph_output():
        return None
    uses = list(v.uses())
    if len(uses) != 1:
        return None
    return uses[0][0]


def _dtype(v: ir.Value | None) -> ir.DataType | None:
    if v is None or v.type is None:
        return None
    try:
        return v.dtype
    except Exception:  # noqa: BLE001 - not a tensor type
        return None


def _attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    return default if a is None else a.value


def _taken(graph: ir.Graph) -> set[str]:
    """Value and node names in use (built once per pass run, then kept up to date)."""
    names = getattr(_STATE, "names", None)
    if names is None:
        names = {v.name for v in graph.inputs} | {v.name for v in graph.outputs}
        names |= set(graph.initializers)
        for n in all_nodes(graph):
            names.add(n.name)
            names.update(o.name for o in n.outputs)
        _STATE.names = names
    return names


def _fresh(graph: ir.Graph, hint: str) -> str:
    taken = _taken(graph)
    name, k = hint, 0
    while name in taken:
        k += 1
        name = f"{hint}_{k}"
    taken.add(name)
    return name


def _initializer(graph: ir.Graph, arr: np.ndarray, hint: str) -> ir.Value:
    name = _fresh(graph, hint)
    value = ir.Value(name=name, shape=ir.Shape(arr.shape),
                     type=ir.TensorType(ir.DataType.from_numpy(arr.dtype)),
                     const_value=ir_tensor(arr, name))
    graph.register_initializer(value)
    return value


def _fuse(graph: ir.Graph, old_nodes: Sequence[ir.Node], domain: str, op_type: str,
          inputs: Sequence[ir.Value | None], attrs: Sequence[ir.Attr], out: ir.Value) -> ir.Node:
    """Replace ``old_nodes`` (the last one producing ``out``) by one node producing ``out``'s
    name; ``old_nodes`` must be in graph order and have no other external uses.

    The first old node becomes the fused one when it has one output (it is moved behind the
    last, where a new node would go, and rewritten: op, attributes, inputs, name): no node
    is built and its inputs' uses do not move from the old node to the new one (the conv
    fusions of MobileNetV2 2.37 -> 2.01 ms). Not while another provider has claimed nodes:
    the optimizer tells a rewritten claimed node by its identity."""
    last, head = old_nodes[-1], old_nodes[0]
    name = _node_name(graph, f"{last.name or out.name}/{op_type}")
    tail = old_nodes[1:]
    if len(head.outputs) != 1 or not getattr(_STATE, "reuse", False) or (tail and (
            head.outputs[0].is_graph_output()
            or any(user not in tail for user, _ in head.outputs[0].uses()))):
        # (a head read from outside is a fusion's bug: onnx-ir's safe removal reports it)
        new = ir.Node(domain, op_type, list(inputs), attributes=list(attrs), num_outputs=1,
                      name=name)
        ir.convenience.replace_nodes_and_values(graph, last, list(old_nodes), [new], [out],
                                                [new.outputs[0]])
        return new
    if head is not last:
        graph.remove(head)   # (unsafe: its inputs stay attached)
        graph.insert_after(last, head)
    _rewrite(head, domain, op_type, inputs, attrs)
    head.overload, head.version, head.name, head.doc_string = "", None, name, None
    y = head.outputs[0]
    if y is not out:
        ir.convenience.replace_all_uses_with(out, y, replace_graph_outputs=True)
        graph.remove(tail, safe=True)
        y.name = out.name
        if out.type is not None:
            y.type = out.type
        if out.shape is not None:
            y.shape = out.shape
        if out.const_value is not None:
            y.const_value = out.const_value
    return head


def _rewrite(node: ir.Node, domain: str, op_type: str, inputs: Sequence[ir.Value | None],
             attrs: Sequence[ir.Attr] | None) -> None:
    """Make ``node`` an ``op_type`` of ``domain`` reading ``inputs``, with attributes
    ``attrs`` (``None``: its own), in place. Its metadata goes, as a new node has none, but
    for an opset of its own (a function body's, :data:`OPSET_KEY`) while it stays the same op
    (the layout pass's elementwise nodes: a Clip-6 read at opset 17 would lose its bounds)."""
    meta = node.metadata_props
    own = meta.get(OPSET_KEY) if (domain, op_type) == (node.domain, node.op_type) else None
    node.domain, node.op_type = domain, op_type
    meta.clear()
    if own is not None:
        meta[OPSET_KEY] = own
    if attrs is not None:
        stored = node.attributes
        wanted = {a.name: a for a in attrs}
        if [k for k in stored if k in wanted] != [k for k in wanted if k in stored]:
            for k in list(stored):   # (in the new order, as a new node would list them)
                del stored[k]
        for k in [k for k in stored if k not in wanted]:
            del stored[k]
        for k, a in wanted.items():   # (mostly the same Attr objects: only changes written)
            if stored.get(k) is not a:
                stored[k] = a
    if len(node.inputs) != len(inputs):
        node.resize_inputs(len(inputs))
    for i, (had, v) in enumerate(zip(node.inputs, inputs)):
        if had is not v:
            node.replace_input_with(i, v)


def _node_name(graph: ir.Graph, base: str) -> str:
    return _fresh(graph, base)


def _copy_attrs(node: ir.Node, drop: Sequence[str] = ()) -> list[ir.Attr]:
    """``node``'s attributes but ``drop``, for the node replacing it. The ``Attr`` objects
    are shared, not copied: an onnx-ir attribute belongs to no node, and a pass changes a
    node's attribute by setting a new one."""
    return [a for a in attrs_of(node) if a.name not in drop]


def _use_ms_domain(ctx: OptimizerContext) -> None:
    ctx.model.ir.opset_imports.setdefault(MS_DOMAIN, 1)


def _cleanup(ctx: OptimizerContext) -> None:
    remove_unused(ctx.model.ir)


def _counted(fn=None, *, sweep: bool = True):
    """Wrap a pass: clean dead nodes/initializers after a pass that changed something
    (``sweep=False``: the pass removes what it leaves unused itself, and the sweep over the
    whole graph, ~30 us on a small model, is spared)."""
    if fn is None:
        return lambda f: _counted(f, sweep=sweep)

    def run(ctx: OptimizerContext) -> int:
        _STATE.legacy_inputs = ctx.model.ir.ir_version is not None and ctx.model.ir.ir_version < 4
        _STATE.names = None
        _STATE.consts = {}
        _STATE.reuse = not ctx.protected
        try:
            n = fn(ctx)
        finally:
            _STATE.names = _STATE.consts = None
            _STATE.reuse = False
        if n and sweep:
            _cleanup(ctx)
        return n

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


def _channel_vector(c: np.ndarray, rank: int, channels: int) -> np.ndarray | None:
    """A constant added to an ``[N, C, *spatial]`` tensor as a ``[C]`` vector, if it is one
    (scalar, ``[C,1,..]``, ``[1,C,1,..]``); None when it varies along another axis or would
    broadcast the output to a larger shape."""
    if c.ndim > rank:
        return None
    shape = (1,) * (rank - c.ndim) + c.shape
    if shape[0] != 1 or any(d != 1 for d in shape[2:]) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(c.reshape(-1), (channels,)).copy() if c.size == 1 else c.reshape(-1)


# --------------------------------------------------------------------------------------------
# 1. BatchNormalization folding (onnxscript rules, stricter checks)
# --------------------------------------------------------------------------------------------


def _scaled_weight(node: ir.Node, w: np.ndarray, scale: np.ndarray) -> np.ndarray | None:
    """The weight of ``node`` with output channel ``o`` multiplied by ``scale[o]``."""
    if node.op_type == "Conv":
        if w.shape[0] != scale.size:
            return None
        return w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
    if node.op_type == "ConvTranspose":  # [C_in, M/group, *k]
        group = int(_attr(node, "group", 1))
        cin, mg = w.shape[:2]
        if cin % group or mg * group != scale.size:
            return None
        ws = w.reshape((group, cin // group, mg) + w.shape[2:])
        s = scale.reshape((group, 1, mg) + (1,) * (w.ndim - 2))
        return (ws * s).reshape(w.shape)
    # Gemm: output channels are B's columns (rows when transB)
    if w.ndim != 2:
        return None
    if _attr(node, "transB", 0):
        return w * scale.reshape(-1, 1) if w.shape[0] == scale.size else None
    return w * scale.reshape(1, -1) if w.shape[1] == scale.size else None


def inference_bn(bn: ir.Node) -> bool:
    """A BatchNormalization in inference mode (training_mode 0, spatial 1) of five inputs."""
    return len(bn.inputs) == 5 and int(_attr(bn, "training_mode", 0)) == 0 and \
        int(_attr(bn, "spatial", 1)) == 1


def bn_scale(bn: ir.Node, params: Sequence[np.ndarray]
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(scale, beta, mean)`` in float64 of BatchNormalization ``bn`` from its constant
    parameters ``(gamma, beta, mean, var)``: y = (x - mean) * scale + beta per channel."""
    gamma, beta, mean, var = (np.asarray(p, np.float64).reshape(-1) for p in params)
    return gamma / np.sqrt(var + float(_attr(bn, "epsilon", 1e-5))), beta, mean


@register_pass("Conv/ConvTranspose/Gemm + BatchNormalization folding", EXTENDED,
               requires={"BatchNormalization"})
@_counted
def _fold_batchnorm(ctx: OptimizerContext) -> int:
    """BatchNormalization (inference mode, constant parameters) folded into the weights and
    bias of the Conv / ConvTranspose / Gemm before it (fresh initializers: the old weight may
    be shared)."""
    graph = ctx.model.graph
    changes = 0
    for bn in list(graph):
        if not _is_onnx(bn, "BatchNormalization") or bn.graph is not graph:
            continue
        if len(bn.outputs) != 1 or not inference_bn(bn):
            continue
        y = bn.inputs[0]
        node = y.producer() if y is not None else None
        if not _is_onnx(node, "Conv", "ConvTranspose", "Gemm") or _sole_consumer(y) is not bn:
            continue
        if _dtype(y) != _FLOAT:
            continue
        params = [_const(v) for v in bn.inputs[1:]]
        w = _const(_input(node, 1))
        if w is None or any(p is None for p in params) or w.dtype != np.float32:
            continue
        scale, beta, mean = bn_scale(bn, params)
        new_w = _scaled_weight(node, w.astype(np.float64), scale)
        if new_w is None:
            continue
        b_val = _input(node, 2)
        b = None
        if b_val is not None and b_val.name:
            b = _const(b_val)
            if b is None:
                continue
            b = b.astype(np.float64)
        if node.op_type == "Gemm":
            b = (0.0 if b is None else b * float(_attr(node, "beta", 1.0)))
            new_b = (np.asarray(b) - mean) * scale + beta
            if new_b.ndim > 2 or (new_b.ndim == 2 and new_b.shape[-1] != scale.size):
                continue
            attrs = _copy_attrs(node, drop=("beta",))
        else:
            b = np.zeros_like(mean) if b is None else b.reshape(-1)
            new_b = (b - mean) * scale + beta
            attrs = _copy_attrs(node)
        wv = _initializer(graph, new_w.astype(np.float32), f"{node.inputs[1].name}_bn")
        bv = _initializer(graph, np.asarray(new_b, np.float32), f"{node.inputs[1].name}_bn_bias")
        _fuse(graph, [node, bn], "", node.op_type, [node.inputs[0], wv, bv], attrs, bn.outputs[0])
        changes += 1
    return changes


# --------------------------------------------------------------------------------------------
# 2. Conv + Add -> Conv(bias); Gemm + Add -> Gemm(C); MatMul + Add -> Gemm
# --------------------------------------------------------------------------------------------


def _add_other(add: ir.Node, x: ir.Value) -> ir.Value | None:
    if len(add.inputs) != 2:
        return None
    a, b = add.inputs
    if a is x and b is not x:
        return b
    if b is x and a is not x:
        return a
    return None


@register_pass("Conv + Add -> Conv with bias", EXTENDED,
               requires={"Conv", "ConvTranspose"})
@_counted
def _conv_add(ctx: OptimizerContext) -> int:
    graph = ctx.model.graph
    changes = 0
    for conv in list(graph):
        if not _is_onnx(conv, "Conv") or conv.graph is not graph:
            continue
        y = conv.outputs[0]
        add = _sole_consumer(y)
        if not _is_onnx(add, "Add") or _dtype(y) != _FLOAT:
            continue
        c = _const(_add_other(add, y))
        w = _input(conv, 1)
        if c is None or c.dtype != np.float32 or not _is_const(w):
            continue
        # the weight's shape, not its values (it may be in the file: reading it for every
        # conv that feeds an Add, residual ones included, was most of this pass)
        w_shape = tuple(int(d) for d in w.const_value.shape)
        vec = _channel_vector(c, len(w_shape), w_shape[0])
        if vec is None:
            continue
        old_b = _input(conv, 2)
        if old_b is not None:
            ob = _const(old_b)
            if ob is None:
                continue
            vec = (ob.astype(np.float32) + vec).astype(np.float32)
        bias = _initializer(graph, np.ascontiguousarray(vec, np.float32),
                            f"{conv.inputs[1].name}_bias")
        _fuse(graph, [conv, add], "", "Conv", [conv.inputs[0], conv.inputs[1], bias],
              _copy_attrs(conv), add.outputs[0])
        changes += 1
    return changes


def _gemm_out_shape(gemm: ir.Node) -> tuple[int, int] | None:
    a, b = _input(gemm, 0), _input(gemm, 1)
    if a is None or b is None or a.shape is None or b.shape is None:
        return None
    if len(a.shape) != 2 or len(b.shape) != 2:
        return None
    m = a.shape[1] if _attr(gemm, "transA", 0) else a.shape[0]
    n = b.shape[0] if _attr(gemm, "transB", 0) else b.shape[1]
    return (m if isinstance(m, int) else -1, n if isinstance(n, int) else -1)


def _unidirectional_2d(c: np.ndarray, m: int, n: int) -> bool:
    """``c`` broadcasts to ``[m, n]`` without growing it (m or n may be -1: unknown)."""
    if c.ndim > 2:
        return False
    shape = (1,) * (2 - c.ndim) + c.shape
    return (shape[0] == 1 or (m != -1 and shape[0] == m)) and \
        (shape[1] == 1 or (n != -1 and shape[1] == n))


@register_pass("Gemm + Add / MatMul + Add -> Gemm", EXTENDED,
               requires={"Gemm", "MatMul"})
@_counted
def _gemm_add(ctx: OptimizerContext) -> int:
    graph = ctx.model.graph
    changes = 0
    for node in list(graph):
        if not _is_onnx(node, "Gemm", "MatMul") or node.graph is not graph:
            continue
        y = node.outputs[0]
        add = _sole_consumer(y)
        if not _is_onnx(add, "Add") or _dtype(y) != _FLOAT:
            continue
        c_val = _add_other(add, y)
        c = _const(c_val)
        if c is None or c.dtype != np.float32:
            continue
        if node.op_type == "MatMul":
            a, b = node.inputs
            if a.shape is None or len(a.shape) != 2 or not _is_const(b) or \
                    b.shape is None or len(b.shape) != 2:
                continue
            shape = _gemm_out_shape(node)
            attrs: list[ir.Attr] = []
            new_c = c_val
        else:
            if len(node.inputs) > 2 and node.inputs[2] is not None:
                continue  # already has C: onnxruntime leaves it too
            shape = _gemm_out_shape(node)
            attrs = _copy_attrs(node, drop=("beta",))
            new_c = c_val
            beta = float(_attr(node, "beta", 1.0))
            if beta != 1.0:
                attrs.append(ir.AttrFloat32("beta", 1.0))
        if shape is None or not _unidirectional_2d(c, *shape):
            continue
        _fuse(graph, [node, add], "", "Gemm", [node.inputs[0], node.inputs[1], new_c], attrs,
              add.outputs[0])
        changes += 1
    return changes


# --------------------------------------------------------------------------------------------
# 3. Conv + activation -> FusedConv; Gemm + activation -> FusedGemm
# --------------------------------------------------------------------------------------------


def _clip_bounds(clip: ir.Node) -> tuple[float, float] | None:
    if len(clip.inputs) > 1:  # opset 11+: optional inputs
        lo, hi = -_FLT_MAX, _FLT_MAX
        for i in (1, 2):
            v = _input(clip, i)
            if v is None or not v.name:
                continue
            arr = _const(v)
            if arr is None or arr.size != 1:
                return None
            if i == 1:
                lo = float(arr.reshape(()))
            else:
                hi = float(arr.reshape(()))
        return lo, hi
    return (float(_attr(clip, "min", -_FLT_MAX)), float(_attr(clip, "max", _FLT_MAX)))


def _activation(node: ir.Node, table) -> tuple[str, list[tuple[str, float]]] | None:
    if node is None or node.domain not in ("", "ai.onnx") or node.op_type not in table:
        return None
    if node.op_type == "Clip":
        bounds = _clip_bounds(node)
        if bounds is None:
            return None
        return "Clip", [("min", bounds[0]), ("max", bounds[1])]
    return node.op_type, [(k, float(_attr(node, k, d))) for k, d in table[node.op_type]]


def _same_static_shape(a: ir.Value, b: ir.Value) -> bool:
    """Known, equal shapes (symbolic dimensions compared by name)."""
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return False
    return all(isinstance(d, int) and d == e or
               not isinstance(d, int) and d.value is not None and str(d) == str(e)
               for d, e in zip(a.shape, b.shape))


# --------------------------------------------------------------------------------------------
# 2b. Kernel taps that never read inside the input (dilated convs on small feature maps)
# --------------------------------------------------------------------------------------------


def _inside_taps(size: int, out: int, k: int, stride: int, dilation: int, pad: int
                 ) -> tuple[int, int] | None:
    """The first and last kernel tap along one axis that some output position reads inside
    the input (``size`` long; ``out`` outputs), or None when none does."""
    inside = [t for t in range(k)
              if any(0 <= o * stride + t * dilation - pad < size for o in range(out))]
    return (inside[0], inside[-1]) if inside else None


@register_pass("Conv taps outside the input dropped", EXTENDED, requires={"Conv"})
@_counted
def _drop_outside_taps(ctx: OptimizerContext) -> int:
    """A 2-D Conv with a constant weight whose kernel rows or columns read only padding for
    every output position (an atrous conv on a feature map smaller than its dilation:
    DeepLabV3's ASPP at dilations 24 and 36 on a 20x20 map reads its center tap only) keeps
    only the taps that can read the input, the padding cut by as much: the same output
    shape, the same sums (the dropped taps multiplied zeros), a fraction of the work. Static
    spatial input sizes and explicit pads only."""
    graph = ctx.model.graph
    changes = 0
    for conv in list(graph):
        if not _is_onnx(conv, "Conv") or conv.graph is not graph or \
                _attr(conv, "auto_pad", "NOTSET") != "NOTSET":
            continue
        x, w_val = _input(conv, 0), _input(conv, 1)
        if x is None or not _is_const(w_val) or w_val.shape is None or len(w_val.shape) != 4 \
                or x.shape is None or len(x.shape) != 4:
            continue
        h, wd = x.shape[2], x.shape[3]
        kh, kw = w_val.shape[2], w_val.shape[3]   # (the weight is read only to cut it)
        if not all(isinstance(d, int) for d in (h, wd, kh, kw)):
            continue
        strides = [int(v) for v in _attr(conv, "strides", (1, 1))]
        dil = [int(v) for v in _attr(conv, "dilations", (1, 1))]
        pads = [int(v) for v in _attr(conv, "pads", (0, 0, 0, 0))]
        if len(strides) != 2 or len(dil) != 2 or len(pads) != 4:
            continue
        kept = []
        for axis, (size, k) in enumerate(((h, kh), (wd, kw))):
            ext = (k - 1) * dil[axis] + 1
            out = (size + pads[axis] + pads[axis + 2] - ext) // strides[axis] + 1
            kept.append(None if out <= 0 else _inside_taps(size, out, k, strides[axis],
                                                           dil[axis], pads[axis]))
        if any(kt is None for kt in kept) or kept == [(0, kh - 1), (0, kw - 1)]:
            continue
        new_pads = [pads[0] - kept[0][0] * dil[0], pads[1] - kept[1][0] * dil[1],
                    pads[2] - (kh - 1 - kept[0][1]) * dil[0],
                    pads[3] - (kw - 1 - kept[1][1]) * dil[1]]
        w = _const(w_val)
        if min(new_pads) < 0 or w is None or w.ndim != 4:
            continue
        sub = np.ascontiguousarray(w[:, :, kept[0][0]:kept[0][1] + 1,
                                     kept[1][0]:kept[1][1] + 1])
        wv = _initializer(graph, sub, f"{w_val.name}_taps")
        attrs = _copy_attrs(conv, drop=("pads", "kernel_shape", "dilations"))
        attrs += [ir.AttrInt64s("pads", new_pads),
                  ir.AttrInt64s("kernel_shape", list(sub.shape[2:])),
                  ir.AttrInt64s("dilations", [d if n > 1 else 1 for d, n in
                                              zip(dil, sub.shape[2:])])]
        inputs = list(conv.inputs)
        inputs[1] = wv
        _rewrite(conv, conv.domain, "Conv", inputs, attrs)
        changes += 1
    return changes


@register_pass("Conv + activation -> FusedConv", EXTENDED,
               requires={"Conv"})
@_counted
def _conv_activation(ctx: OptimizerContext) -> int:
    graph = ctx.model.graph
    changes = 0
    for conv in list(graph):
        if not _is_onnx(conv, "Conv") or conv.graph is not graph:
            continue
        y = conv.outputs[0]
        if _dtype(y) != _FLOAT:
            continue
        inputs = list(conv.inputs)
        nodes = [conv]
        act_node = _sole_consumer(y)
        z = _add_other(act_node, y) if _is_onnx(act_node, "Add") else None
        if z is not None and _same_static_shape(z, y) and not _is_const(z):
            # Conv + Add(same-shape tensor) + activation -> FusedConv with the sum input Z
            # (onnxruntime's ConvAddActivationFusion)
            while len(inputs) < 3:
                inputs.append(None)
            inputs.append(z)
            nodes.append(act_node)
            y = act_node.outputs[0]
            act_node = _sole_consumer(y)
        act = _activation(act_node, _CONV_ACTIVATIONS)
        attrs = _copy_attrs(conv)
        if act is None or act_node.inputs[0] is not y:
            if len(nodes) == 1:
                continue
            # Conv + Add(Z) alone: FusedConv without an activation (optional in ORT)
        else:
            kind, params = act
            attrs.append(ir.AttrString("activation", kind))
            if params:
                attrs.append(ir.AttrFloat32s("activation_params", [p for _, p in params]))
            nodes.append(act_node)
            y = act_node.outputs[0]
        _use_ms_domain(ctx)
        _fuse(graph, nodes, MS_DOMAIN, "FusedConv", inputs, attrs, y)
        changes += 1
    return changes


@register_pass("Gemm + activation -> FusedGemm", EXTENDED,
               requires={"Gemm"})
@_counted
def _gemm_activation(ctx: OptimizerContext) -> int:
    graph = ctx.model.graph
    changes = 0
    for gemm in list(graph):
        if not _is_onnx(gemm, "Gemm") or gemm.graph is not graph:
            continue
        y = gemm.outputs[0]
        act_node = _sole_consumer(y)
        act = _activation(act_node, _GEMM_ACTIVATIONS)
        if act is None or _dtype(y) != _FLOAT or act_node.inputs[0] is not y:
            continue
        kind, params = act
        attrs = [ir.AttrFloat32("alpha", float(_attr(gemm, "alpha", 1.0))),
                 ir.AttrFloat32("beta", float(_attr(gemm, "beta", 1.0))),
                 ir.AttrInt64("transA", int(_attr(gemm, "transA", 0))),
                 ir.AttrInt64("transB", int(_attr(gemm, "transB", 0))),
                 ir.AttrString("activation", kind)]
        attrs += [ir.AttrFloat32(f"activation_{k}", v) for k, v in params]
        _use_ms_domain(ctx)
        _fuse(graph, [gemm, act_node], MS_DOMAIN, "FusedGemm", list(gemm.inputs), attrs,
              act_node.outputs[0])
        changes += 1
    return changes


# --------------------------------------------------------------------------------------------
# 3a. SiLU / Swish: Mul(x, Sigmoid(x)) -> QuickGelu (onnxruntime's QuickGeluFusion)
# --------------------------------------------------------------------------------------------


def _scalar_const(v: ir.Value | None) -> float | None:
    arr = _const(v)
    return float(arr.reshape(())) if arr is not None and arr.size == 1 and \
        arr.dtype == np.float32 else None


@register_pass("Sigmoid + Mul -> QuickGelu", EXTENDED, requires={"Sigmoid"})
@_counted
def _quick_gelu(ctx: OptimizerContext) -> int:
    """``Mul(x, Sigmoid(x))`` (SiLU / Swish, either operand order) and ``Mul(x, Sigmoid(Mul(x,
    alpha)))`` with a scalar constant alpha become com.microsoft ``QuickGelu`` (``x *
    sigmoid(alpha * x)``; alpha 1 for SiLU): one pass over the tensor instead of two, as
    onnxruntime's QuickGeluFusion does. Float32 (onnxruntime's kernel's); the sigmoid (and the
    scaling Mul) read by the Mul alone, neither a graph output. A channels-last conv before
    one takes it as its activation at the layout level."""
    graph = ctx.model.graph
    changes = 0
    for sig in list(graph):
        if not _is_onnx(sig, "Sigmoid") or sig.graph is not graph or len(sig.inputs) != 1:
            continue
        s, v = sig.outputs[0], sig.inputs[0]
        mul = _sole_consumer(s)
        if not _is_onnx(mul, "Mul") or len(mul.inputs) != 2 or _dtype(s) != _FLOAT or \
                _dtype(mul.outputs[0]) != _FLOAT:
            continue
        x = _add_other(mul, s)   # the Mul's other operand
        if x is None:
            continue
        nodes, alpha = [sig, mul], 1.0
        if x is not v:   # Sigmoid(Mul(x, alpha)): its Mul read by the Sigmoid alone
            scale = v.producer()
            if not _is_onnx(scale, "Mul") or _sole_consumer(v) is not sig:
                continue
            a = _scalar_const(_add_other(scale, x))
            if a is None:
                continue
            nodes, alpha = [scale, sig, mul], a
        if any(id(n) in ctx.protected for n in nodes):   # another provider's
            continue
        _use_ms_domain(ctx)
        _fuse(graph, nodes, MS_DOMAIN, "QuickGelu", [x], [ir.AttrFloat32("alpha", alpha)],
              mul.outputs[0])
        changes += 1
    return changes


# --------------------------------------------------------------------------------------------
# 3b. Pairwise squared distances: Sub + ReduceSumSquare -> CDist
# --------------------------------------------------------------------------------------------


def _axes_of(node: ir.Node, i: int) -> list[int] | None:
    """A node's constant ``axes``: its attribute, else its input ``i`` (Unsqueeze-13 and
    ReduceSumSquare-18 take them as an input); None when neither is constant."""
    attr = node.attributes.get("axes")
    if attr is not None:
        return [int(a) for a in attr.value]
    arr = _const(_input(node, i))
    return None if arr is None else [int(a) for a in arr.reshape(-1)]


def _matrix_under(v: ir.Value, axis: int) -> ir.Value | None:
    """The rank-2 value ``v`` is an Unsqueeze of at ``axis`` (with no other reader), or
    ``v`` itself when it is rank 2 and ``axis`` is 0 (broadcasting adds a leading axis)."""
    if axis == 0 and v.shape is not None and len(v.shape) == 2:
        return v
    node = v.producer()
    if not _is_onnx(node, "Unsqueeze") or _sole_consumer(v) is None:
        return None
    m = node.inputs[0]
    if m is None or m.shape is None or len(m.shape) != 2 or _axes_of(node, 1) not in (
            [axis], [axis - 3]):
        return None
    return m


@register_pass("Sub + ReduceSumSquare -> CDist", EXTENDED, requires={"ReduceSumSquare"})
@_counted
def _pairwise_distances(ctx: OptimizerContext) -> int:
    """``ReduceSumSquare(P[:, None, :] - Q[None, :, :], axes=[2], keepdims=0)`` (either
    order of the Sub, Q's axis implicit or an Unsqueeze) is com.microsoft CDist(P, Q): the
    [p, q, k] differences are never stored (scikit-learn's k-NN, k-means, RBF kernels compute
    their distances so once the Scan vectorization has run: 16 MB for 1000 queries against
    400 rows of 10 features). CDist sums each row of squares in feature order, as the
    reduction does."""
    graph = ctx.model.graph
    changes = 0
    for red in list(graph):
        if not _is_onnx(red, "ReduceSumSquare") or red.graph is not graph \
                or int(_attr(red, "keepdims", 1)) != 0 or _axes_of(red, 1) not in ([2], [-1]):
            continue
        d = red.inputs[0]
        sub = d.producer() if d is not None else None
        if not _is_onnx(sub, "Sub") or _sole_consumer(d) is not red or d.shape is None \
                or len(d.shape) != 3 or _dtype(d) not in (_FLOAT, ir.DataType.DOUBLE):
            continue
        found = None
        for x, y in (sub.inputs, tuple(reversed(sub.inputs))):
            p, q = _matrix_under(x, 1), _matrix_under(y, 0)
            if p is not None and q is not None:
                found = (x, y, p, q)
                break
        if found is None:
            continue
        x, y, p, q = found
        kp, kq = p.shape[1], q.shape[1]
        if _dtype(p) != _dtype(q) or (isinstance(kp, int) and isinstance(kq, int) and kp != kq):
            continue
        old = [n for n in (x.producer(), y.producer()) if n is not None and n.op_type ==
               "Unsqueeze" and _sole_consumer(n.outputs[0]) is sub]
        _use_ms_domain(ctx)
        _fuse(graph, [*sorted(old, key=list(graph).index), sub, red], MS_DOMAIN, "CDist",
              [p, q], [ir.AttrString("metric", "sqeuclidean")], red.outputs[0])
        changes += 1
    return changes


# --------------------------------------------------------------------------------------------
# 4. Dynamic quantization: MatMulIntegerToFloat, DynamicQuantizeMatMul
# --------------------------------------------------------------------------------------------


def _other_input(node: ir.Node, v: ir.Value) -> ir.Value | None:
    return _add_other(node, v)


def _is_scalar(v: ir.Value | None) -> bool:
    if v is None or v.shape is None:
        return False
    return all(d == 1 for d in v.shape) if len(v.shape) else True


@register_pass("MatMulInteger + Cast + Mul -> MatMulIntegerToFloat", EXTENDED,
               requires={"MatMulInteger"})
@_counted
def _matmul_integer_to_float(ctx: OptimizerContext) -> int:
    graph = ctx.model.graph
    changes = 0
    for mmi in list(graph):
        if not _is_onnx(mmi, "MatMulInteger") or mmi.graph is not graph:
            continue
        cast = _sole_consumer(mmi.outputs[0])
        if not _is_onnx(cast, "Cast") or int(_attr(cast, "to", 0)) != _FLOAT.value:
            continue
        mul = _sole_consumer(cast.outputs[0])
        if not _is_onnx(mul, "Mul"):
            continue
        s = _other_input(mul, cast.outputs[0])
        sp = s.producer() if s is not None else None
        if not _is_onnx(sp, "Mul") or len(sp.inputs) != 2:
            continue
        s0, s1 = sp.inputs
        # b_scale may be per column ([N]); a_scale must be per tensor.
        if _is_scalar(s0) and (_is_const(s1) or not _is_scalar(s1)):
            a_scale, b_scale = s0, s1
        elif _is_scalar(s1):
            a_scale, b_scale = s1, s0
        else:
            continue
        if _dtype(a_scale) != _FLOAT or _dtype(b_scale) != _FLOAT:
            continue
        if b_scale.shape is None or len(b_scale.shape) > 1:
            continue
        nodes, out, bias = [mmi, cast, mul], mul.outputs[0], None
        add = _sole_consumer(out)
        if _is_onnx(add, "Add"):
            c = _const(_add_other(add, out))
            b = _input(mmi, 1)
            if c is not None and c.ndim == 1 and b is not None and b.shape is not None and \
                    len(b.shape) == 2 and b.shape[1] == c.shape[0] and c.dtype == np.float32:
                bias = _add_other(add, out)
                nodes.append(add)
                out = add.outputs[0]
        a_zp, b_zp = _input(mmi, 2), _input(mmi, 3)
        if any(v is not None and v.name and not _is_scalar(v) and i == 0
               for i, v in enumerate((a_zp,))):
            continue  # a per-row A zero point has no MatMulIntegerToFloat equivalent
        inputs = [mmi.inputs[0], mmi.inputs[1], a_scale, b_scale,
                  a_zp if a_zp is not None and a_zp.name else None,
                  b_zp if b_zp is not None and b_zp.name else None, bias]
        while inputs and inputs[-1] is None:
            inputs.pop()
        _use_ms_domain(ctx)
        _fuse(graph, nodes, MS_DOMAIN, "MatMulIntegerToFloat", inputs, [], out)
        changes += 1
    return changes


@register_pass("MatMulNBits + Add -> MatMulNBits with bias", EXTENDED,
               requires={"MatMulNBits"})
@_counted
def _matmul_nbits_bias(ctx: OptimizerContext) -> int:
    """A float32 MatMulNBits without a bias whose only reader adds a constant ``[N]`` vector
    (broadcast along the last axis, not widening the output) takes it as its bias input: the
    GEMM adds it in its epilogue (as onnxruntime fuses it; its own quantizer leaves the Add
    after the MatMulNBits)."""
    graph = ctx.model.graph
    changes = 0
    for mm in list(graph):
        if (mm.domain != MS_DOMAIN or mm.op_type != "MatMulNBits" or mm.graph is not graph
                or any(_input(mm, i) is not None and _input(mm, i).name for i in (4, 5))):
            continue
        y = mm.outputs[0]
        add = _sole_consumer(y)
        n = _attr(mm, "N")
        if not _is_onnx(add, "Add") or n is None or _dtype(_input(mm, 0)) != _FLOAT:
            continue
        c = _const(_add_other(add, y))
        # (onnx's inference gives a contrib op's output no shape: a [N] vector cannot widen it,
        # a [1, N] one only when the output's rank is known to be 2 or more)
        if (c is None or c.dtype != np.float32 or c.size != int(n)
                or (c.ndim and c.shape[-1] != int(n))
                or (c.ndim > 1 and (y.shape is None or c.ndim > len(y.shape)))):
            continue
        bias = _initializer(graph, np.ascontiguousarray(c.reshape(-1)),
                            f"{mm.inputs[1].name}_bias")
        inputs = list(mm.inputs) + [None] * (6 - len(mm.inputs))
        inputs[5] = bias
        _fuse(graph, [mm, add], MS_DOMAIN, "MatMulNBits", inputs, _copy_attrs(mm),
              add.outputs[0])
        changes += 1
    return changes


@register_pass("DynamicQuantizeLinear + MatMulIntegerToFloat -> DynamicQuantizeMatMul",
               EXTENDED, requires={"DynamicQuantizeLinear"})
@_counted
def _dynamic_quantize_matmul(ctx: OptimizerContext) -> int:
    graph = ctx.model.graph
    changes = 0
    for node in list(graph):
        if node.op_type != "MatMulIntegerToFloat" or node.domain != MS_DOMAIN:
            continue
        ins = list(node.inputs) + [None] * (7 - len(node.inputs))
        a, b, a_scale, b_scale, a_zp, b_zp, bias = ins
        dql = a.producer() if a is not None else None
        if not _is_onnx(dql, "DynamicQuantizeLinear") or len(dql.outputs) != 3:
            continue
        if a is not dql.outputs[0] or a_scale is not dql.outputs[1] or \
                (a_zp is not None and a_zp is not dql.outputs[2]):
            continue
        if not _is_const(b) or not _is_const(b_scale) or \
                (b_zp is not None and not _is_const(b_zp)) or \
                (bias is not None and not _is_const(bias)):
            continue
        inputs = [dql.inputs[0], b, b_scale, b_zp, bias]
        while inputs and inputs[-1] is None:
            inputs.pop()
        new = ir.Node(MS_DOMAIN, "DynamicQuantizeMatMul", inputs, num_outputs=1,
                      name=_node_name(graph, f"{node.name}/DynamicQuantizeMatMul"))
        ir.convenience.replace_nodes_and_values(graph, node, [node], [new], [node.outputs[0]],
                                                [new.outputs[0]])
        changes += 1
    return changes


# --------------------------------------------------------------------------------------------
# 5. QDQ groups -> QLinear ops
# --------------------------------------------------------------------------------------------


class _DQ:
    """A DequantizeLinear feeding a QDQ group: quantized input, scale, zero point."""

    def __init__(self, node: ir.Node):
        self.node = node
        self.x = node.inputs[0]
        self.scale = node.inputs[1]
        zp = _input(node, 2)
        self.zp = zp if zp is not None and zp.name else None
        self.axis = int(_attr(node, "axis", 1))
        self.dtype = _dtype(self.x)


def _dq_of(v: ir.Value | None) -> _DQ | None:
    p = v.producer() if v is not None else None
    if not _is_onnx(p, "DequantizeLinear") or int(_attr(p, "block_size", 0)) != 0:
        return None
    if _dtype(p.outputs[0]) != _FLOAT:
        return None
    dq = _DQ(p)
    s = _const(dq.scale)
    if s is None or s.dtype != np.float32:
        return None
    if dq.zp is not None and not _is_const(dq.zp):
        return None
    return dq


def _per_tensor(dq: _DQ) -> bool:
    s = _const(dq.scale)
    return s is not None and s.size == 1 and (dq.zp is None or _const(dq.zp).size == 1)


def _q_after(v: ir.Value) -> ir.Node | None:
    q = _sole_consumer(v)
    if not _is_onnx(q, "QuantizeLinear") or int(_attr(q, "block_size", 0)) != 0:
        return None
    s = _const(q.inputs[1])
    zp = _input(q, 2)
    if s is None or s.size != 1 or s.dtype != np.float32:
        return None
    if zp is None or not zp.name or _const(zp) is None or _const(zp).size != 1:
        return None  # without a zero point the output type is uint8 only by default
    if int(_attr(q, "saturate", 1)) != 1:
        return None
    return q


def _zp_or_zero(graph: ir.Graph, dq: _DQ) -> ir.Value:
    if dq.zp is not None:
        return dq.zp
    return _initializer(graph, np.zeros((), dq.dtype.numpy()), f"{dq.x.name}_zero_point")


def _quant_bias(graph: ir.Graph, b: ir.Value | None, x: _DQ, w: _DQ) -> ir.Value | None | bool:
    """The int32 bias of a QLinearConv: from an int32 DQ with scale x_scale * w_scale and
    zero point 0, or quantized from a constant float bias. False when impossible."""
    if b is None or not b.name:
        return None
    xs, ws = _const(x.scale).astype(np.float32), _const(w.scale).astype(np.float32)
    want = (xs.reshape(()) * ws.reshape(-1)).astype(np.float32)
    bdq = _dq_of(b)
    if bdq is not None:
        bq = _const(bdq.x)
        if bq is None or bq.dtype != np.int32:
            return False
        if bdq.zp is not None and np.any(_const(bdq.zp) != 0):
            return False
        bs = _const(bdq.scale).astype(np.float32).reshape(-1)
        if bs.size not in (1, want.size) or not np.allclose(bs, want, rtol=1e-6, atol=0):
            return False
        return bdq.x
    bf = _const(b)
    if bf is None or bf.dtype != np.float32 or bf.ndim != 1:
        return False
    q = np.rint(bf / want).astype(np.float64)
    if np.any(np.abs(q) > 2 ** 31 - 1):
        return False
    return _initializer(graph, q.astype(np.int32), f"{b.name}_quantized")


def _qdq_conv(graph: ir.Graph, conv: ir.Node) -> bool:
    x, w = _dq_of(_input(conv, 0)), _dq_of(_input(conv, 1))
    q = _q_after(conv.outputs[0])
    if x is None or w is None or q is None or not _per_tensor(x):
        return False
    if not _is_const(w.x) or x.dtype not in _Q8 or w.dtype not in _Q8:
        return False
    if x.dtype == ir.DataType.INT8 and w.dtype != ir.DataType.INT8:
        return False
    y_dtype = _dtype(q.outputs[0])
    if y_dtype != x.dtype:
        return False
    ws = _const(w.scale)
    if ws.size > 1:
        m = _const(w.x).shape[0]
        if ws.ndim != 1 or ws.size != m or w.axis not in (0, -_const(w.x).ndim):
            return False
        if w.zp is not None and _const(w.zp).size not in (1, m):
            return False
    bias = _quant_bias(graph, _input(conv, 2), x, w)
    if bias is False:
        return False
    inputs = [x.x, x.scale, _zp_or_zero(graph, x), w.x, w.scale, _zp_or_zero(graph, w),
              q.inputs[1], q.inputs[2]]
    if bias is not None:
        inputs.append(bias)
    _fuse(graph, [conv, q], "", "QLinearConv", inputs, _copy_attrs(conv), q.outputs[0])
    return True


def _qdq_matmul(graph: ir.Graph, mm: ir.Node) -> bool:
    a, b = _dq_of(_input(mm, 0)), _dq_of(_input(mm, 1))
    q = _q_after(mm.outputs[0])
    if a is None or b is None or q is None or not _per_tensor(a):
        return False
    if a.dtype not in _Q8 or b.dtype not in _Q8 or _dtype(q.outputs[0]) != a.dtype:
        return False
    if a.dtype == ir.DataType.INT8 and b.dtype != ir.DataType.INT8:
        return False
    if not _per_tensor(b):
        bx = _const(b.x)
        bs = _const(b.scale)
        if bx is None or bx.ndim != 2 or bs.ndim != 1 or bs.size != bx.shape[1] or \
                b.axis not in (1, -1):
            return False
    inputs = [a.x, a.scale, _zp_or_zero(graph, a), b.x, b.scale, _zp_or_zero(graph, b),
              q.inputs[1], q.inputs[2]]
    _fuse(graph, [mm, q], "", "QLinearMatMul", inputs, [], q.outputs[0])
    return True


def _qdq_gemm(graph: ir.Graph, gemm: ir.Node) -> bool:
    """DQ(A) (per tensor) and DQ(B) (a constant, per tensor or per output column) -> Gemm
    (alpha = beta = 1, a constant 1-D bias or none) [-> Q]: com.microsoft QGemm, its output
    requantized by the Q's scale and zero point, or float32 when no Q follows (onnxruntime's
    QDQ Gemm selectors): a quantized CNN's classifier runs on int8 weights instead of their
    dequantized float copy."""
    a, b = _dq_of(_input(gemm, 0)), _dq_of(_input(gemm, 1))
    if a is None or b is None or not _per_tensor(a) or a.dtype not in _Q8 or \
            b.dtype not in _Q8 or (a.dtype == ir.DataType.INT8 and b.dtype != ir.DataType.INT8):
        return False
    if float(_attr(gemm, "alpha", 1.0)) != 1.0 or float(_attr(gemm, "beta", 1.0)) != 1.0:
        return False
    trans_b = int(_attr(gemm, "transB", 0)) == 1
    bx, bs = _const(b.x), _const(b.scale)
    if bx is None or bx.ndim != 2:
        return False
    n = bx.shape[0 if trans_b else 1]
    if not _per_tensor(b) and (bs.ndim != 1 or bs.size != n or
                               b.axis % 2 != (0 if trans_b else 1)):
        return False
    c = _input(gemm, 2)
    if c is not None and (c.shape is None or len(c.shape) != 1):
        return False
    bias = _quant_bias(graph, c, a, b)
    if bias is False:
        return False
    q = _q_after(gemm.outputs[0])
    if q is not None and _dtype(q.outputs[0]) not in _Q8:
        q = None
    if q is None and _dtype(gemm.outputs[0]) != _FLOAT:
        return False
    inputs = [a.x, a.scale, _zp_or_zero(graph, a), b.x, b.scale, _zp_or_zero(graph, b), bias]
    attrs = [ir.AttrInt64("transA", int(_attr(gemm, "transA", 0))),
             ir.AttrInt64("transB", int(trans_b)), ir.AttrFloat32("alpha", 1.0)]
    if q is not None:
        inputs += [q.inputs[1], q.inputs[2]]
        _fuse(graph, [gemm, q], MS_DOMAIN, "QGemm", inputs, attrs, q.outputs[0])
    else:
        _fuse(graph, [gemm], MS_DOMAIN, "QGemm", inputs, attrs, gemm.outputs[0])
    return True


def _qdq_binary(graph: ir.Graph, node: ir.Node) -> bool:
    if len(node.inputs) != 2:
        return False
    a, b = _dq_of(node.inputs[0]), _dq_of(node.inputs[1])
    q = _q_after(node.outputs[0])
    if a is None or b is None or q is None or not (_per_tensor(a) and _per_tensor(b)):
        return False
    if a.dtype not in _Q8 or b.dtype != a.dtype or _dtype(q.outputs[0]) != a.dtype:
        return False
    inputs = [a.x, a.scale, _zp_or_zero(graph, a), b.x, b.scale, _zp_or_zero(graph, b),
              q.inputs[1], q.inputs[2]]
    _fuse(graph, [node, q], MS_DOMAIN, "QLinear" + node.op_type, inputs, [], q.outputs[0])
    return True


def _spatial_axes_mean(node: ir.Node, rank: int) -> bool:
    """A ReduceMean over every axis after the first two, keeping them: a global average pool
    (a squeeze-excite block's, as torch exports ``x.mean((2, 3), keepdim=True)``)."""
    keep = node.attributes.get("keepdims")
    if keep is not None and int(keep.value) != 1:
        return False
    axes_attr = node.attributes.get("axes")
    if axes_attr is not None:
        axes = list(axes_attr.value)
    else:
        axes_in = _const(_input(node, 1))
        if axes_in is None:
            return False
        axes = [int(a) for a in axes_in.reshape(-1)]
    return sorted(a % rank for a in axes) == list(range(2, rank))


def _qdq_global_average_pool(graph: ir.Graph, node: ir.Node) -> bool:
    x = _dq_of(node.inputs[0])
    q = _q_after(node.outputs[0])
    if x is None or q is None or not _per_tensor(x) or x.dtype not in _Q8:
        return False
    if _dtype(q.outputs[0]) != x.dtype:
        return False
    if x.x.shape is not None and len(x.x.shape) < 3:
        return False
    if node.op_type == "ReduceMean" and (x.x.shape is None or
                                         not _spatial_axes_mean(node, len(x.x.shape))):
        return False
    inputs = [x.x, x.scale, _zp_or_zero(graph, x), q.inputs[1], q.inputs[2]]
    _fuse(graph, [node, q], MS_DOMAIN, "QLinearGlobalAveragePool", inputs,
          [ir.AttrInt64("channels_last", 0)], q.outputs[0])
    return True


def _qdq_lookup(graph: ir.Graph, node: ir.Node) -> bool:
    """DQ -> Sigmoid / LeakyRelu -> Q, per tensor, 8-bit: com.microsoft QLinearSigmoid /
    QLinearLeakyRelu (onnxruntime's QDQ unary fusions), which cpu_mlas runs as a table of the
    256 input values."""
    x = _dq_of(_input(node, 0))
    q = _q_after(node.outputs[0])
    if x is None or q is None or not _per_tensor(x) or x.dtype not in _Q8:
        return False
    if _dtype(q.outputs[0]) != x.dtype:
        return False
    attrs = [a for a in _copy_attrs(node) if a.name == "alpha"]
    inputs = [x.x, x.scale, _zp_or_zero(graph, x), q.inputs[1], q.inputs[2]]
    _fuse(graph, [node, q], MS_DOMAIN, "QLinear" + node.op_type, inputs, attrs, q.outputs[0])
    return True


def _relu_quant(graph: ir.Graph, relu: ir.Node) -> bool:
    """Relu -> QuantizeLinear whose zero point is the type's minimum: the Relu is a no-op."""
    q = _q_after(relu.outputs[0])
    if q is None:
        return False
    zp = _const(q.inputs[2])
    if zp.dtype not in (np.uint8, np.int8) or int(zp.reshape(())) != np.iinfo(zp.dtype).min:
        return False
    q.replace_input_with(0, relu.inputs[0])
    graph.remove(relu, safe=True)
    return True


_DATA_MOVEMENT = ("Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze")


def _drop_qdq(graph: ir.Graph, node: ir.Node) -> bool:
    """DQ -> Reshape/Flatten/Transpose/Squeeze/Unsqueeze -> Q with the same scale and zero
    point: the op runs on the quantized tensor (onnxruntime's DropQDQNodes action)."""
    x = _dq_of(_input(node, 0))
    q = _q_after(node.outputs[0])
    if x is None or q is None or not _per_tensor(x) or x.dtype not in _Q8:
        return False
    if _dtype(q.outputs[0]) != x.dtype or x.zp is None:
        return False
    if not (np.array_equal(_const(x.scale), _const(q.inputs[1])) and
            np.array_equal(_const(x.zp), _const(q.inputs[2]))):
        return False
    _fuse(graph, [node, q], "", node.op_type, [x.x, *node.inputs[1:]], _copy_attrs(node),
          q.outputs[0])
    return True


_QDQ_HANDLERS = {**dict.fromkeys(_DATA_MOVEMENT, _drop_qdq), "Conv": _qdq_conv,
                 "MatMul": _qdq_matmul, "Gemm": _qdq_gemm, "Add": _qdq_binary,
                 "Mul": _qdq_binary,
                 "GlobalAveragePool": _qdq_global_average_pool,
                 "ReduceMean": _qdq_global_average_pool, "Sigmoid": _qdq_lookup,
                 "LeakyRelu": _qdq_lookup}


@register_pass("QDQ groups -> QLinear ops", EXTENDED,
               requires={"QuantizeLinear", "DequantizeLinear"})
@_counted
def _qdq_fusion(ctx: OptimizerContext) -> int:
    graph = ctx.model.graph
    changes = 0
    for node in list(graph):
        if node.graph is graph and _is_onnx(node, "Relu") and _relu_quant(graph, node):
            changes += 1
    for node in list(graph):
        if node.graph is not graph or node.domain not in ("", "ai.onnx"):
            continue
        op_type = node.op_type   # (a handler may rewrite the node into the fused one)
        handler = _QDQ_HANDLERS.get(op_type)
        if handler is None:
            continue
        if handler(graph, node):
            if op_type in ("Add", "Mul", "Gemm", "GlobalAveragePool", "ReduceMean",
                           "Sigmoid", "LeakyRelu"):
                _use_ms_domain(ctx)
            changes += 1
    return changes


@register_pass("DequantizeLinear of a constant left by the QDQ fusions -> constant", EXTENDED,
               requires={"DequantizeLinear"})
def _fold_weight_dequantize(ctx: OptimizerContext) -> int:
    """A DequantizeLinear of a constant (a weight) whose consumer no QDQ group took (a
    classifier Gemm with a float output, say) is folded into the float weight: computed once
    at session creation instead of on every run (MobileNetV3-small's two classifier weights
    were 2.2 ms of its 9.8 ms run). Basic folding leaves these nodes for the QDQ fusions,
    which read the quantized weight; this pass runs after them."""
    if ctx.compile_node is None:
        return 0
    return _fold_constants(ctx.model, ctx.compile_node, only=frozenset({"DequantizeLinear"}))


LAYOUT = 3
ONNXPLEX_DOMAIN = "ai.onnxplex"
"""onnxplex's own ops (run by cpu_mlas; onnxruntime has none of them): written only at the layout
level, where the graph is already past what onnxruntime's CPU provider loads."""

# Float ops of one tensor input (others constant) applied element by element: between a
# per-tensor DequantizeLinear and QuantizeLinear they map each of the 256 input bytes to one
# output byte.
_TABLE_OPS = frozenset({
    "HardSwish", "HardSigmoid", "Relu", "Clip", "Sigmoid", "LeakyRelu", "Tanh", "Elu", "Selu",
    "Celu", "Softplus", "Softsign", "ThresholdedRelu", "Mish", "Gelu", "Erf", "Exp", "Log",
    "Abs", "Neg", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign"})


@register_pass("DQ -> elementwise op -> Q -> 8-bit table", LAYOUT,
               requires={"QuantizeLinear", "DequantizeLinear"})
@_counted
def _qdq_table(ctx: OptimizerContext) -> int:
    """A per-tensor 8-bit DequantizeLinear -> elementwise float op -> QuantizeLinear that no
    QLinear op took (HardSwish and HardSigmoid in a quantized MobileNetV3; onnxruntime runs
    them in float between the two) becomes ai.onnxplex ``QLinearLookup(x, table)``: the
    table holds, for each of the 256 input bytes, what the three nodes give, computed once by
    the default CPU provider's own kernels for them, so every byte maps as the unfused graph
    maps it."""
    if ctx.compile_node is None:
        return 0
    model = ctx.model
    nodes = model.nodes
    index = {id(n): i for i, n in enumerate(nodes)}
    found = []
    for i, node in enumerate(nodes):   # tables first: node views of the untouched graph
        if not _is_onnx(node, *_TABLE_OPS) or id(node) in ctx.protected:
            continue
        x, q = _dq_of(_input(node, 0)), _q_after(node.outputs[0])
        if x is None or q is None or not _per_tensor(x) or x.dtype not in _Q8 or \
                _dtype(q.outputs[0]) not in _Q8 or id(q) in ctx.protected:
            continue
        rest = [None if v is None or not v.name else _const(v) for v in node.inputs[1:]]
        if any(v is not None and v.name and r is None for v, r in zip(node.inputs[1:], rest)):
            continue   # a bound computed at run time
        table = _table(model, ctx.compile_node, (index[id(x.node)], i, index[id(q)]), x, rest)
        if table is not None:
            found.append(([node, q], x.x, table))
    return _to_lookups(model, found)


def _to_lookups(model, found: list[tuple[list[ir.Node], ir.Value, np.ndarray]]) -> int:
    """Replace each group of nodes (the last one's output kept) by ai.onnxplex
    QLinearLookup(x, table); the count."""
    graph = model.graph
    for old, x, table in found:
        out = old[-1].outputs[0]
        t = _initializer(graph, table, f"{out.name}_table")
        _fuse(graph, old, ONNXPLEX_DOMAIN, "QLinearLookup", [x, t], [], out)
    if found:
        model.ir.opset_imports.setdefault(ONNXPLEX_DOMAIN, 1)
    return len(found)


def _table(model, compile_node, at: tuple[int, int, int], x: _DQ,
           rest: list[np.ndarray | None]) -> np.ndarray | None:
    """The 256 output bytes of DequantizeLinear -> op -> QuantizeLinear (nodes ``at``) for
    every input byte, by the kernels ``compile_node`` builds for each; None if one fails."""
    values = np.arange(256, dtype=np.uint8).view(x.dtype.numpy())
    dq, op, q = (model.node_view(k) for k in at)
    try:
        y = values
        for view, extra in ((dq, [_const(v) if v is not None and v.name else None
                                  for v in x.node.inputs[1:]]),
                            (op, rest),
                            (q, [_const(v) if v is not None and v.name else None
                                 for v in model.nodes[at[2]].inputs[1:]])):
            y = np.asarray(_run_node(view, [y, *extra], compile_node)[0])
    except Exception as e:  # noqa: BLE001 - the nodes stay as they are
        logger.debug("no table for %s: %s", op.display_name, e)
        return None
    if y.shape != (256,) or y.dtype not in (np.uint8, np.int8):
        return None
    return np.ascontiguousarray(y)


_LOOKUPS = {(MS_DOMAIN, "QLinearSigmoid"), (MS_DOMAIN, "QLinearLeakyRelu"),
            (ONNXPLEX_DOMAIN, "QLinearLookup")}


def _is_lookup(node: ir.Node | None) -> bool:
    """A node whose 8-bit output is a function of each byte of its first input alone."""
    return node is not None and (node.domain, node.op_type) in _LOOKUPS


@register_pass("QLinear op of x and a table of x -> one table", LAYOUT,
               requires={"QLinearMul", "QLinearAdd"})
@_counted
def _composed_tables(ctx: OptimizerContext) -> int:
    """com.microsoft QLinearMul / QLinearAdd of a value x and a byte-wise function of the same
    x (QLinearSigmoid, QLinearLeakyRelu, a QLinearLookup: a quantized SiLU is
    ``QLinearMul(x, QLinearSigmoid(x))``) is itself a function of x's bytes: ai.onnxplex
    QLinearLookup of x, its table the two nodes' kernels run on the 256 byte values (the
    same bytes as the two nodes)."""
    if ctx.compile_node is None:
        return 0
    model = ctx.model
    nodes = model.nodes
    index = {id(n): i for i, n in enumerate(nodes)}
    found = []
    for i, node in enumerate(nodes):
        if node.domain != MS_DOMAIN or node.op_type not in ("QLinearMul", "QLinearAdd") or \
                id(node) in ctx.protected or len(node.inputs) < 7:
            continue
        a, b = _input(node, 0), _input(node, 3)
        if a is None or b is None or _dtype(a) not in _Q8:
            continue
        pair = next(((k, x, t.producer()) for k, (x, t) in enumerate(((a, b), (b, a)))
                     if _is_lookup(t.producer()) and _input(t.producer(), 0) is x), None)
        if pair is None:
            continue
        k, x, f = pair
        if id(f) in ctx.protected or not all(
                v is None or not v.name or _const(v) is not None
                for v in (*f.inputs[1:], *node.inputs[1:3], *node.inputs[4:])):
            continue
        values = np.arange(256, dtype=np.uint8).view(_dtype(x).numpy())
        consts = lambda n: [None if v is None or not v.name else _const(v)  # noqa: E731
                            for v in n.inputs[1:]]
        try:
            fx = np.asarray(_run_node(model.node_view(index[id(f)]),
                                      [values, *consts(f)], ctx.compile_node)[0])
            args = [None if v is None or not v.name else _const(v) for v in node.inputs]
            args[0], args[3] = (values, fx) if k == 0 else (fx, values)
            table = np.asarray(_run_node(model.node_view(i), args, ctx.compile_node)[0])
        except Exception as e:  # noqa: BLE001 - the nodes stay as they are
            logger.debug("no composed table for %s: %s", node.name, e)
            continue
        if table.shape == (256,) and table.dtype in (np.uint8, np.int8):
            found.append(([node], x, np.ascontiguousarray(table)))
    return _to_lookups(model, found)
