"""The basic level: semantics-preserving clean-ups that run before partitioning.

* constant folding: a node whose inputs are all constants runs once, on the default CPU
  provider's kernels, and its outputs become initializers (weights computed by ConstantOfShape
  or Reshape chains reach kernels as constants and can be prepacked); ``Shape``/``Size`` of a
  statically shaped value fold too;
* CastLike of a known target type made a Cast;
* removal of Identity and inference-mode Dropout;
* no-op chains (Cast to the same type, Cast-Cast, Reshape-Reshape, Transpose-Transpose,
  identity Transpose/Expand, x*1, x+0 ...) with onnxscript's rewrite rules;
* common-subexpression elimination with onnx-ir's pass;
* dead-code elimination (:func:`remove_unused`, also run by the fusions after they change
  the graph).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common as ir_passes

from ..graph.model import Model, Subgraph, _is_a, _readonly_array
from ..graph.nodes import all_nodes, attrs_of
from . import OptimizerContext, register_pass
from ._rules import apply_rules

logger = logging.getLogger(__name__)

BASIC = 1

# Never folded: ops whose output differs between runs (or that need a fresh seed), and
# DequantizeLinear, whose constant int8 weights must stay quantized so QDQ groups can fuse
# into QLinear ops (onnxruntime's folding skips it too).
_NOT_FOLDED = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
               "Multinomial", "Bernoulli", "Dropout", "DequantizeLinear"}
# Outputs larger than this are not folded: folding would trade a cheap op for a big constant.
_MAX_FOLDED_BYTES = 256 << 20
_TENSOR = ir.AttributeType.TENSOR


@register_pass("constant folding", BASIC)
def _constant_folding(ctx: OptimizerContext) -> int:
    if ctx.compile_node is None:
        return 0
    return _fold_constants(ctx.model, ctx.compile_node)


@register_pass("CastLike -> Cast", BASIC, requires={"CastLike"})
def _castlike_to_cast(ctx: OptimizerContext) -> int:
    """A CastLike whose target's element type is known becomes the Cast to that type, as
    onnxruntime expands it (its saved optimized model shows the Cast); the target input goes,
    and a Cast to the input's own type then leaves with the no-op chains."""
    changes = 0
    for node in all_nodes(ctx.model.graph):
        if node.op_type != "CastLike" or node.domain not in ("", "ai.onnx") \
                or len(node.inputs) != 2 or node.inputs[1] is None:
            continue
        target = node.inputs[1].dtype
        if target is None:
            continue
        saturate = node.attributes.get("saturate")
        node.op_type = "Cast"
        node.resize_inputs(1)
        node.attributes.clear()
        node.attributes["to"] = ir.AttrInt64("to", target.value)
        if saturate is not None:
            node.attributes["saturate"] = saturate
        changes += 1
    return changes


_SAME_OP_CHAINS = frozenset({"Cast", "Transpose", "Reshape", "Unsqueeze"})
_IDENTITY_OPERAND = {"Mul": 1, "Div": 1, "Add": 0, "Sub": 0}


def _may_have_noop_chains(model: Model) -> bool:
    """A necessary condition for the no-op chain rules below to match anywhere (Most CNNs and
    MLPs have no candidate, and then onnxscript, and the onnx reference ops it imports: ~30
    MB, ~0.2 s, is not loaded at all). The matches found are handed to the pass, which runs
    next (reading the small constants of every Add, Sub, Mul and Div twice was ~60 us of a
    converted Naive Bayes model's session creation)."""
    matches = _noop_matches(model.graph)
    _FOUND.last = (model.graph, len(model.graph), matches) if matches else None
    return bool(matches)


def _noop_matches(graph: ir.Graph) -> list[tuple[ir.Node, ir.Value | None]]:
    """Each node of ``graph`` (bodies included) at which a no-op chain rule could match, with
    its :func:`_noop_match` operand."""
    found = []
    for node in all_nodes(graph):
        candidate, keep = _noop_match(node)
        if candidate:
            found.append((node, keep))
    return found


class _Found(threading.local):
    """What :func:`_may_have_noop_chains` found last: (graph, its node count, matches), for
    the pass run right after it on that graph (per thread: sessions are built concurrently)."""

    last: tuple[ir.Graph, int, list[tuple[ir.Node, ir.Value | None]]] | None = None


_FOUND = _Found()


def _take_noop_matches(graph: ir.Graph) -> list[tuple[ir.Node, ir.Value | None]]:
    """The matches :func:`_may_have_noop_chains` found on ``graph`` if nothing changed its
    nodes since (taken: used once), else found again."""
    last, _FOUND.last = _FOUND.last, None
    if last is not None and last[0] is graph and last[1] == len(graph):
        return last[2]
    return _noop_matches(graph)


def _noop_match(node: ir.Node) -> tuple[bool, ir.Value | None]:
    """Whether a no-op chain rule could match at ``node``, and for an Add/Sub/Mul/Div its
    :func:`_neutral_operand` (else None: the pass needs it, and reading the constant is most
    of the test), from its op, attributes, input types and producers alone (only small
    constants read): a chain of two Casts,
    Transposes, Reshapes or Unsqueezes, any Expand, a Cast to its input's type, a Transpose
    that keeps the order, or an Add/Sub/Mul/Div of an exactly neutral small constant (made an
    Identity by the pass itself). The rules are tried only at such nodes: each try costs
    ~15-30 us, and BERT-base int8's hundreds of Adds, Muls, Casts and Transposes made the pass
    ~10 ms of its session creation with nothing to do."""
    op = node.op_type
    if node.domain not in ("", "ai.onnx") or not node.inputs:
        return _NO_MATCH
    first = node.inputs[0]
    if op == "Expand":
        return _MATCH
    if op in _SAME_OP_CHAINS:
        src = first.producer() if first is not None else None
        if src is not None and src.op_type == op:
            return _MATCH
        if op == "Cast":
            to = node.attributes.get("to")
            return (first is None or first.dtype is None or to is None
                    or int(to.value) == first.dtype.value), None
        if op == "Transpose":
            # an identity perm of the input's own rank (one of another length is invalid:
            # left for the kernel to refuse, not removed as a no-op)
            perm = node.attributes.get("perm")
            if perm is None:
                return _MATCH
            order = list(perm.value)
            return (order == list(range(len(order))) and first is not None
                    and first.shape is not None and len(first.shape) == len(order)), None
        return _NO_MATCH
    if op in _IDENTITY_OPERAND:
        # Exact neutral constants only (onnxscript's x + 0, x * 1 rules take a scalar within
        # a tolerance: an Add of a 1e-8 epsilon before a Sqrt was removed, and a variance of
        # zero then divided 0 by 0).
        keep = _neutral_operand(node)
        if keep is not None:
            return True, keep
    return _NO_MATCH


_MATCH: tuple[bool, ir.Value | None] = (True, None)
_NO_MATCH: tuple[bool, ir.Value | None] = (False, None)


@register_pass("no-op chains", BASIC, applies=_may_have_noop_chains)
def _noop_chains(ctx: OptimizerContext) -> int:
    # A Cast to its input's own type becomes an Identity here (removed by the next pass):
    # the common case (skl2onnx casts the int64 label of every classifier to int64) costs a
    # matcher run of ~1.5 ms in onnxscript.
    found, same_type = [], 0
    for n, keep in _take_noop_matches(ctx.model.graph):
        if keep is not None:   # x + 0, x * 1 ... by a small constant tensor: Identity(x)
            n.op_type = "Identity"
            n.attributes.clear()
            n.resize_inputs(1)
            n.replace_input_with(0, keep)
            same_type += 1
        elif _same_type_cast(n):
            n.op_type = "Identity"
            n.attributes.clear()
            same_type += 1
        else:
            found.append(n)
    if not found:
        return same_type
    from onnxscript.rewriter.rules import common as rules

    # The rules are tried at the candidates only, and only the rules for their op types are
    # run at all (onnxscript's loop calls every rule at every node).
    candidates = {id(n) for n in found}
    ops = {n.op_type for n in found}
    chosen = [r for op, r in (
        ("Cast", rules.no_op_cast_rule), ("Cast", rules.cast_cast_rule),
        ("Transpose", rules.no_op_transpose_rule), ("Transpose", rules.transpose_transpose_rule),
        ("Reshape", rules.reshape_reshape_rule), ("Expand", rules.no_op_expand_rule),
        ("Unsqueeze", rules.unsqueeze_unsqueeze_rule),
    ) if op in ops]
    if not chosen:
        return same_type
    return same_type + apply_rules(ctx.model.ir, chosen,
                                   gate=lambda node: id(node) in candidates)


_NEUTRAL_MAX_ELEMENTS = 64
"""The largest constant operand :func:`_neutral_operand` reads (a bias of a transformer layer
is not worth reading at every session creation; skl2onnx's zero rows of Naive Bayes are)."""


def _neutral_operand(node: ir.Node) -> ir.Value | None:
    """The other input when ``node`` (Add, Sub, Mul, Div) has a constant operand of at most
    :data:`_NEUTRAL_MAX_ELEMENTS` elements, all of the op's neutral value (0 added, 0
    subtracted, 1 multiplied, a divisor of 1), that cannot change the other input's shape
    or type by broadcasting: its rank is at most the other's, each of its dims is 1 or the
    other's (known) dim, and the two element types agree; an initializer that is also a graph
    input is a default a feed may replace, never taken. None otherwise. (As onnxruntime's
    NoopElimination: x + 0 gives +0.0 for x = -0.0, Identity keeps -0.0.)"""
    if len(node.inputs) != 2 or len(node.outputs) != 1 or node.attributes:
        return None
    neutral = _IDENTITY_OPERAND[node.op_type]
    sides = (1,) if node.op_type in ("Sub", "Div") else (1, 0)
    for k in sides:
        c, x = node.inputs[k], node.inputs[1 - k]
        if c is None or x is None or c.const_value is None or not c.is_initializer() \
                or c.is_graph_input():   # (a default a feed may override: not a constant)
            continue
        t = c.const_value
        # (the value's own shape and type: a proto tensor builds its shape at each ask)
        dims = c.shape.dims if c.shape is not None and c.shape.is_static() else tuple(t.shape)
        if math.prod(dims) > _NEUTRAL_MAX_ELEMENTS or x.shape is None or x.dtype is None \
                or (c.dtype or t.dtype) != x.dtype or not _plain_tensor(x):
            continue
        xdims = x.shape.dims
        if len(dims) > len(xdims) or any(
                d != 1 and d != xd for d, xd in zip(reversed(dims), reversed(xdims))):
            continue   # (a symbolic dim of x against a constant dim above 1: not known)
        try:
            values = _readonly_array(t)
        except Exception:  # noqa: BLE001 - unreadable: left to the kernels to report
            continue
        if values.size and values.dtype.kind in "biuf":
            listed = values.ravel().tolist()   # (a few elements: quicker than a ufunc)
            if listed.count(neutral) == len(listed):
                return x
    return None


def _same_type_cast(node: ir.Node) -> bool:
    """A Cast (not CastLike) whose input's element type is known and is its ``to``."""
    if node.op_type != "Cast" or len(node.inputs) != 1 or len(node.outputs) != 1:
        return False
    src, to = node.inputs[0], node.attributes.get("to")
    return (src is not None and src.dtype is not None and to is not None
            and to.type == ir.AttributeType.INT and int(to.value) == src.dtype.value
            and set(node.attributes) <= {"to", "saturate"}
            and _plain_tensor(src))


def _plain_tensor(value: ir.Value) -> bool:
    return value.type is None or isinstance(value.type, ir.TensorType)


def _constant(value: ir.Value | None) -> np.ndarray | None:
    """A small constant initializer's array (not one a feed may override), else None."""
    if value is None or value.const_value is None or not value.is_initializer() \
            or value.is_graph_input():
        return None
    try:
        return _readonly_array(value.const_value)
    except Exception:  # noqa: BLE001 - unreadable: left to the kernels to report
        return None


def _static_dims(value: ir.Value | None) -> tuple | None:
    """The value's dims (ints and symbolic dims) when it is a tensor of known rank."""
    if value is None or value.shape is None or not _plain_tensor(value):
        return None
    return value.shape.dims


def _kept_input(node: ir.Node) -> ir.Value | None:
    """The input a Concat, Reshape or Gather passes through unchanged, else None: a Concat of
    one input; a Reshape to the shape its input already has (each target dim the input's
    known dim, 0 copying it without ``allowzero``, or a single -1 where every other dim is a
    known positive match); a Gather taking every index of a known axis in order
    (``arange(dim)``, 1-D). (skl2onnx's ColumnTransformer writes all three around a single
    column: ~1 us a step at batch 1.)"""
    if node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return None
    op, ins = node.op_type, node.inputs
    if op == "Concat":
        if len(ins) != 1:
            return None
        dims = _static_dims(ins[0])
        axis = node.attributes.get("axis")
        if dims is None or axis is None or not -len(dims) <= axis.value < len(dims):
            return None
        return ins[0]
    if op == "Reshape":
        if len(ins) != 2:
            return None
        dims = _static_dims(ins[0])
        target = _constant(ins[1])
        if dims is None or target is None or target.ndim != 1 or target.size != len(dims):
            return None
        allowzero = node.attributes.get("allowzero")
        copy_zero = allowzero is None or allowzero.value == 0
        wanted = target.tolist()
        if wanted.count(-1) > 1:
            return None
        for t, d in zip(wanted, dims):
            if t == -1:
                continue
            if t == 0 and copy_zero:
                if -1 in wanted and not (isinstance(d, int) and d > 0):
                    return None   # (a zero-size dim elsewhere leaves -1 undetermined)
                continue
            if not (isinstance(d, int) and d == t and d > 0):
                return None
        return ins[0]
    if op == "Gather":
        if len(ins) != 2:
            return None
        dims = _static_dims(ins[0])
        indices = _constant(ins[1])
        axis = node.attributes.get("axis")
        k = 0 if axis is None else axis.value
        if dims is None or indices is None or indices.ndim != 1 or not -len(dims) <= k < len(dims):
            return None
        size = dims[k]
        if not isinstance(size, int) or indices.size != size or indices.dtype.kind not in "iu":
            return None
        if indices.tolist() != list(range(size)):
            return None
        return ins[0]
    return None


@register_pass("no-op Concat/Reshape/Gather", BASIC, requires={"Concat", "Reshape", "Gather"})
def _noop_shape_ops(ctx: OptimizerContext) -> int:
    """Concat, Reshape and Gather nodes that pass their input through become Identity nodes
    (removed by the next pass)."""
    changed = 0
    for n in all_nodes(ctx.model.graph):
        keep = _kept_input(n)
        if keep is None:
            continue
        n.op_type = "Identity"
        n.attributes.clear()
        n.resize_inputs(1)
        n.replace_input_with(0, keep)
        changed += 1
    return changed


@register_pass("eliminate Identity/Dropout", BASIC)
def _noops(ctx: OptimizerContext) -> int:
    return _eliminate_noops(ctx.model)


@register_pass("common-subexpression elimination", BASIC)
def _cse(ctx: OptimizerContext) -> int:
    if not _may_have_common_subexpressions(ctx.model.graph):
        return 0
    before = _count(ctx.model.graph)
    ir_passes.CommonSubexpressionEliminationPass()(ctx.model.ir)
    return before - _count(ctx.model.graph)


def _may_have_common_subexpressions(graph: ir.Graph) -> bool:
    """Whether two nodes of ``graph`` share op, output count and inputs, which onnx-ir's pass
    needs before it compares attributes (it looks at the main graph only). Without such a
    pair the pass cannot change anything: ~80 us to tell on MobileNetV2 instead of its
    ~0.7 ms of attribute keys."""
    seen = set()
    for node in graph:
        key = (node.domain, node.op_type, node.overload, len(node.outputs),
               tuple(map(id, node.inputs)))
        if key in seen:
            return True
        seen.add(key)
    return False


@register_pass("dead-code elimination", BASIC)
def _dce(ctx: OptimizerContext) -> int:
    return remove_unused(ctx.model.ir)


def remove_unused(model: ir.Model) -> int:
    """Dead-code elimination: remove the nodes (subgraph bodies and functions included) whose
    outputs nothing reads and that produce no graph output, then the initializers nothing
    reads; name unused optional outputs of ONNX ops out (a kernel skips an output without a
    name) and drop trailing omitted inputs. The number of nodes and initializers removed.

    What onnx-ir's ``RemoveUnusedNodesPass`` does, written here because that pass asks onnx
    for the schema of every node it keeps, on every run (3.5 ms on BERT-base int8's 715
    nodes), and the fusions run it after each pass that changed the graph: here a schema's
    optional outputs are looked up once per op and opset, and only for nodes that have an
    unread output."""
    ops = model.opset_imports
    opset = ops.get("", ops.get("ai.onnx"))
    count = _sweep(model.graph, opset)
    graph = model.graph
    kept = {*graph.inputs, *graph.outputs}
    for name, value in list(graph.initializers.items()):
        if not value.uses() and value not in kept:
            del graph.initializers[name]
            count += 1
    for function in model.functions.values():
        fops = function.opset_imports
        count += _sweep(function, fops.get("", fops.get("ai.onnx", opset)))
    return count


def _sweep(graph: ir.Graph | ir.Function, opset: int | None) -> int:
    outputs = frozenset(graph.outputs)
    dead: set[ir.Node] = set()
    unread_outputs: list[ir.Node] = []
    in_bodies = 0
    for node in reversed(graph):   # users come after producers: one walk frees whole chains
        alive = unread = False
        for out in node.outputs:
            if out in outputs or any(user not in dead for user, _ in out.uses()):
                alive = True
            else:
                unread = True
        if not alive:
            dead.add(node)
            continue
        inputs = node.inputs
        if inputs and inputs[-1] is None:
            n = len(inputs)
            while n and inputs[n - 1] is None:
                n -= 1
            node.resize_inputs(n)
        if unread and opset is not None and node.domain in ("", "ai.onnx"):
            unread_outputs.append(node)
        for attr in attrs_of(node):
            if attr.type == ir.AttributeType.GRAPH:
                in_bodies += _sweep(attr.value, opset)
            elif attr.type == ir.AttributeType.GRAPHS:
                in_bodies += sum(_sweep(body, opset) for body in attr.value)
    if dead:
        graph.remove(dead, safe=True)
    for node in unread_outputs:   # after the removal: outputs read only by dead nodes count
        _name_out_unread_optionals(node, outputs, opset)
    return len(dead) + in_bodies


def _name_out_unread_optionals(node: ir.Node, outputs: frozenset[ir.Value], opset: int) -> None:
    """Unread outputs the schema marks optional lose their name, and trailing unnamed ones
    are dropped (a BatchNormalization's training outputs only when it is known to run in
    inference mode: before opset 14 its output count chose the mode)."""
    optional = _optional_outputs(node.op_type, opset)
    if optional is None:
        return
    if node.op_type == "BatchNormalization":
        if opset < 14:
            return
        mode = node.attributes.get("training_mode")
        if mode is not None:
            if mode.is_ref() or mode.type != ir.AttributeType.INT or mode.as_int() != 0:
                return
            node.attributes.pop("training_mode")
    outs = node.outputs
    for out, opt in zip(outs, optional):
        if opt and out not in outputs and not out.uses():
            out.name = ""
    n = len(outs)
    while n and not outs[n - 1].name:
        n -= 1
    if n != len(outs):
        node.resize_outputs(n)


@functools.cache
def _optional_outputs(op_type: str, opset: int) -> tuple[bool, ...] | None:
    """Which outputs of the ONNX op ``op_type`` at ``opset`` are optional; None when none is,
    when one is variadic, or when onnx has no such schema."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain="")
    except onnx.defs.SchemaError:
        return None
    option = onnx.defs.OpSchema.FormalParameterOption
    if any(o.option == option.Variadic for o in schema.outputs):
        return None
    flags = tuple(o.option == option.Optional for o in schema.outputs)
    return flags if any(flags) else None


def _count(graph: ir.Graph) -> int:
    return len(all_nodes(graph))


def _fold_constants(model: Model, compile_node: Callable[[Subgraph], Callable],
                    only: frozenset[str] = frozenset()) -> int:
    """Fold every node whose inputs are all constant into constants (``only``: the nodes of
    those op types only, :data:`_NOT_FOLDED` ones included)."""
    graph = model.graph
    consts = set(model.const_names)
    folded = 0
    # Walk in topological order; newly folded outputs make their consumers foldable.
    for index, node in enumerate(list(model.nodes)):
        if (node.op_type not in only if only else node.op_type in _NOT_FOLDED) \
                or node.domain not in ("", "ai.onnx"):
            continue
        if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
               for a in attrs_of(node)):
            continue
        # All inputs constant before any is read: a Gather from an embedding table (94 MB on
        # BERT-base) with dynamic indices must not read the table just to find out.
        all_const = all(v is None or not v.name
                        or (v.name in consts and v.const_value is not None)
                        for v in node.inputs)
        tensors: list[ir.TensorProtocol] | None = None
        value = node.attributes.get("value") if node.op_type == "Constant" else None
        if (value is not None and len(node.attributes) == 1 and value.type == _TENSOR
                and not value.is_ref()):
            # a Constant's tensor as it is (a kernel built and run for it was ~60 us a node:
            # torch's exports write a few per RNN, as their shape constants)
            tensors = [value.value]
        elif all_const:
            view = model.node_view(index)
            tensors = _deferred_results(node, view, compile_node)
            if tensors is None:
                args = [None if t is None else t.numpy() for t in _sources(node)]
                try:
                    results = _run_node(view, args, compile_node)[:len(node.outputs)]
                except Exception as e:  # noqa: BLE001 - leave the node to run normally
                    logger.debug("not folding %s: %s", view.display_name, e)
                    continue
                if len(results) < len(node.outputs):
                    continue
        elif (node.op_type in ("Shape", "Size")
              and (arr := _static_shape_value(model.node_view(index))) is not None):
            results = (arr,)
        else:
            continue
        if tensors is None:
            if not all(isinstance(r, np.ndarray) for r in results) \
                    or sum(r.nbytes for r in results) > _MAX_FOLDED_BYTES:
                continue
            tensors = [ir_tensor(r) for r in results]
        elif sum(_nbytes(t) for t in tensors) > _MAX_FOLDED_BYTES:
            continue
        _replace_with_constants(graph, node, tensors)
        consts.update(o.name for o in node.outputs if o.name)
        folded += 1
    return folded


def ir_tensor(arr: np.ndarray, name: str | None = None) -> ir.TensorProtocol:
    """A computed array (a folded result, a fused weight) as an onnx-ir tensor: a numeric
    array wrapped directly (``ir.tensor`` asks typing protocols first: ~94 us against ~10 on
    Python 3.11), anything else (strings, the ml_dtypes floats) through ``ir.tensor``."""
    return ir.Tensor(arr, name=name) if arr.dtype.kind in "biufc" else ir.tensor(arr, name=name)


def _static_shape_value(view) -> np.ndarray | None:
    x = view.input(0)
    if x is None or x.static_shape() is None:
        return None
    shape = x.static_shape()
    if view.op_type == "Size":
        return np.asarray(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    start = view.attr("start", 0)
    end = view.attr("end", None)
    return np.asarray(shape[slice(start, end)], dtype=np.int64)


_DEFERRED_FOLD_BYTES = 1 << 20
"""A folded result at least this large, computed from a weight still in the model file, is
computed when read, not kept (see :func:`_deferred_results`)."""


def _deferred_results(node: ir.Node, view, compile_node: Callable[[Subgraph], Callable]
                      ) -> list[ir.LazyTensor] | None:
    """The outputs of an all-constant ``node`` as tensors that run it when read, when one of
    its inputs is a weight still in the model file (a lazy tensor) and its outputs, of known
    static shapes and types, hold at least :data:`_DEFERRED_FOLD_BYTES`: the fold then holds
    no copy of its own (GPT-2's LM head reads the 147 MB embedding transposed; folded eagerly,
    the graph kept that transpose for the session's life, beside the GEMM's packed copy of
    it). Each read runs the node again on inputs read again, as its one consumer, the
    kernel that packs it, reads it once. None: fold it now."""
    sources = _sources(node)
    if not any(_is_a(t, ir.LazyTensor) for t in sources):
        return None
    outs = list(node.outputs)
    if any(not o.name or o.dtype is None or o.dtype == ir.DataType.STRING or o.shape is None
           or not o.shape.is_static() for o in outs):
        return None
    if sum(math.prod(o.shape.numpy()) * o.dtype.itemsize for o in outs) < _DEFERRED_FOLD_BYTES:
        return None
    tensors = []
    for k, out in enumerate(outs):
        shape, dtype = ir.Shape(out.shape.numpy()), out.dtype

        def run(k: int = k, shape: ir.Shape = shape, dtype: ir.DataType = dtype) -> ir.Tensor:
            args = [None if t is None else t.numpy() for t in sources]
            arr = np.asarray(_run_node(view, args, compile_node)[k])
            if arr.shape != tuple(shape.numpy()) or ir.DataType.from_numpy(arr.dtype) != dtype:
                raise ValueError(f"folding {view.display_name}: output {k} is "
                                 f"{arr.dtype}{list(arr.shape)}, not the {dtype} {shape} "
                                 "shape inference gave it")
            return ir.tensor(arr)

        tensors.append(ir.LazyTensor(run, dtype, shape))
    return tensors


def _sources(node: ir.Node) -> list[ir.TensorProtocol | None]:
    """The constant tensors an all-constant node reads (None for an omitted input)."""
    return [None if v is None or not v.name else v.const_value for v in node.inputs]


def _run_node(view, args: list[np.ndarray | None],
              compile_node: Callable[[Subgraph], Callable]) -> tuple:
    """The outputs of the node of ``view`` on ``args``, by the kernel ``compile_node``
    builds for it alone; floating-point warnings off, as in a run (kernels leave numpy's
    error state to their caller: a folded Div by 0 or Log(0) is a result, not a warning)."""
    kernel = compile_node(Subgraph(view.display_name, (view,), view.inputs, view.outputs))
    with np.errstate(all="ignore"):
        out = kernel(*args)
    return out if isinstance(out, tuple) else (out,)


def _nbytes(tensor: ir.TensorProtocol) -> float:
    try:
        return math.prod(tensor.shape.numpy()) * tensor.dtype.itemsize
    except TypeError:   # (strings: no fixed width; not counted)
        return 0


def _replace_with_constants(graph: ir.Graph, node: ir.Node,
                            results: list[ir.TensorProtocol]) -> None:
    new_values = []
    for out, tensor in zip(node.outputs, results):
        if not out.name:
            continue
        name = out.name
        tensor.name = name
        value = ir.Value(name=name, shape=ir.Shape(tensor.shape.numpy()),
                         type=ir.TensorType(tensor.dtype), const_value=tensor)
        out.replace_all_uses_with(value, replace_graph_outputs=True)
        new_values.append(value)
    graph.remove(node, safe=True)
    for value in new_values:
        graph.register_initializer(value)


def _eliminate_noops(model: Model) -> int:
    graph = model.graph
    outputs = {v.name for v in graph.outputs}
    removed = 0
    for node in list(graph):
        if node.op_type not in ("Identity", "Dropout") or node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Dropout":
            if len(node.outputs) > 1 and node.outputs[1].name and node.outputs[1].uses():
                continue  # the mask is used
            if len(node.inputs) > 2 and node.inputs[2] is not None:
                tm = node.inputs[2].const_value
                if tm is None or bool(tm.numpy()):
                    continue  # training mode, or not known to be off
        src = node.inputs[0]
        out = node.outputs[0]
        if src is None:
            continue
        if out.name in outputs:
            # A graph output keeps its name: the producer of the source takes it over, when
            # the source is a plain intermediate (not an input, initializer or other output).
            if (src.producer() is None or src.is_graph_output() or src.is_initializer()
                    or src.name in outputs):
                continue
            name = out.name
            out.replace_all_uses_with(src, replace_graph_outputs=True)
            graph.remove(node, safe=True)
            src.name = name
        else:
            out.replace_all_uses_with(src)
            graph.remove(node, safe=True)
        removed += 1
    return removed
