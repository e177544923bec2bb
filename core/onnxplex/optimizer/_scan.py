"""Scan vectorization: a Scan whose iterations do not depend on each other becomes its body,
run once over all iterations.

scikit-learn converters compute pairwise distances with a Scan (skl2onnx's ``onnx_cdist``:
k-nearest neighbours, k-means transforms, RBF and other kernels): the state is the query
batch, carried unchanged, and each iteration takes one training row and emits its distances
to the queries (``Sub``, then ``ReduceSumSquare`` over the features). Run iteration by
iteration that is a few small kernel calls per training row, hundreds of rows per run; run
once with the rows as a leading axis it is one call per body node.

A Scan is vectorized when it can be done exactly:

* Scan-9 or later, every scan input and output on axis 0, forward;
* every state output is the state input itself (or an ``Identity`` of it): the state is loop
  invariant, so each iteration reads the initial state and the final state is the initial one;
* every body node is an elementwise op or a reduction with constant axes (``_ELEMENTWISE``,
  ``_REDUCTIONS``), with a known rank for each value (declared, or from the ranks of the
  node's inputs);
* every scan output depends on a scan input (a loop-invariant one would need an Expand).

The body's nodes then move into the main graph before the Scan, reading the scan inputs whole:
a value that depends on a scan input (*batched*) holds all iterations along a new leading axis,
the others are computed once. A batched operand of lower per-iteration rank than the node's
result gets an ``Unsqueeze`` after its leading axis (numpy-style broadcasting aligns trailing
axes, and the iteration axis must stay first), and a reduction of a batched value has its
axes moved by one. The Scan's state outputs become its state inputs, its scan outputs the
batched body outputs. Each element is computed by the same ops in the same order as before.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import onnx_ir as ir

from . import OptimizerContext, register_pass
from ._basic import BASIC, ir_tensor, remove_unused

_ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Abs", "Neg", "Sqrt", "Exp", "Log",
    "Reciprocal", "Relu", "Sigmoid", "Tanh", "Sin", "Cos", "Erf", "Floor", "Ceil", "Sign",
    "Cast", "Identity", "Not", "And", "Or", "Xor", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "Where", "Clip",
})
_REDUCTIONS = frozenset({
    "ReduceSum", "ReduceSumSquare", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
})
# Inputs of these ops that are attributes in disguise (not broadcast with the others).
_NON_DATA_INPUTS = {"Clip": (1, 2)}


@register_pass("Scan vectorization", BASIC, requires=("Scan",))
def _vectorize_scans(ctx: OptimizerContext) -> int:
    model = ctx.model
    graph = model.graph
    opset = model.opsets.get("", 0)
    if opset < 9:
        return 0
    changes = 0
    for node in list(graph):
        if node.op_type != "Scan" or node.domain not in ("", "ai.onnx"):
            continue
        if id(node) in ctx.protected:
            continue
        plan = _plan(node, opset)
        if plan is None:
            continue
        _apply(graph, node, plan, opset)
        changes += 1
    if changes:
        remove_unused(model.ir)   # (the state's Identity nodes, now unread)
    return changes


class _Plan(NamedTuple):
    body: ir.Graph
    n_state: int
    ranks: dict[ir.Value, int]      # per-iteration rank of every value the body reads or makes
    batched: set[ir.Value]          # the values that depend on a scan input


def _rank(value: ir.Value | None) -> int | None:
    if value is None or value.shape is None:
        return None
    return len(value.shape)


def _const_ints(value: ir.Value | None) -> list[int] | None:
    if value is None or value.const_value is None:
        return None
    return [int(v) for v in np.asarray(value.const_value.numpy()).reshape(-1)]


def _flag(node: ir.Node, name: str, default: int) -> int:
    attr = node.attributes.get(name)
    return default if attr is None else int(attr.value)


def _reduce_axes(node: ir.Node) -> tuple[list[int] | None, bool]:
    """(axes, given) of a reduction: axes from the attribute or the constant second input;
    ``None`` when they are not constant."""
    attr = node.attributes.get("axes")
    if attr is not None:
        return [int(a) for a in attr.value], True
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        axes = _const_ints(node.inputs[1])
        return axes, axes is not None
    return [], True   # (no axes: all of them, unless noop_with_empty_axes)


def _plan(scan: ir.Node, opset: int) -> _Plan | None:
    """What :func:`_apply` needs, or ``None`` when the Scan cannot be vectorized exactly."""
    attrs = scan.attributes
    body_attr = attrs.get("body")
    if body_attr is None:
        return None
    body: ir.Graph = body_attr.value
    n_scan_in = int(attrs["num_scan_inputs"].value)
    n_state = len(scan.inputs) - n_scan_in
    n_scan_out = len(body.outputs) - n_state
    if n_scan_in < 1 or n_scan_out < 1 or len(body.inputs) != len(scan.inputs):
        return None
    for name in ("scan_input_axes", "scan_input_directions", "scan_output_axes",
                 "scan_output_directions"):
        a = attrs.get(name)
        if a is not None and any(int(v) != 0 for v in a.value):
            return None
    # loop-invariant state: each state output is its state input, maybe through Identity
    for k in range(n_state):
        out, inp = body.outputs[k], body.inputs[k]
        producer = out.producer()
        if out is not inp and not (producer is not None and producer.op_type == "Identity"
                                   and producer.inputs[0] is inp):
            return None
    ranks: dict[ir.Value, int] = {}
    for k, v in enumerate(body.inputs):
        r = _rank(v)
        outer = scan.inputs[k]
        if r is None and outer is not None and _rank(outer) is not None:
            r = _rank(outer) - (1 if k >= n_state else 0)
        if r is None:
            return None
        ranks[v] = r
    batched = set(body.inputs[n_state:])
    outer_scanned = set(scan.inputs[n_state:])
    if len(outer_scanned) != n_scan_in or outer_scanned & set(scan.inputs[:n_state]) or any(
            v in outer_scanned for n in body for v in n.inputs):
        return None   # (one outer value both scanned and read whole)
    for node in body:
        op = node.op_type
        if node.domain not in ("", "ai.onnx") or any(
                a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
                for a in node.attributes.values()):
            return None
        ins = [v for v in node.inputs if v is not None]
        for v in ins:   # outer values and constants: their own rank
            if v not in ranks:
                r = _rank(v)
                if r is None:
                    return None
                ranks[v] = r
        is_batched = any(v in batched for v in ins)
        if op in _ELEMENTWISE:
            if len(node.outputs) != 1:
                return None
            skip = _NON_DATA_INPUTS.get(op, ())
            data = [v for i, v in enumerate(node.inputs) if v is not None and i not in skip]
            if any(node.inputs[i] in batched for i in skip if i < len(node.inputs)):
                return None   # (a per-iteration clip bound)
            out_rank = max(ranks[v] for v in data)
        elif op in _REDUCTIONS:
            if len(node.outputs) != 1:
                return None
            axes, known = _reduce_axes(node)   # (constant: never batched)
            if not known:
                return None
            r = ranks[node.inputs[0]]
            if any(not -r <= a < r for a in axes):
                return None
            if axes:
                reduced = len({a % r for a in axes})
            else:
                reduced = 0 if _flag(node, "noop_with_empty_axes", 0) else r
            out_rank = r if _flag(node, "keepdims", 1) else r - reduced
        else:
            return None
        out = node.outputs[0]
        declared = _rank(out)
        if declared is not None and declared != out_rank:
            return None
        ranks[out] = out_rank
        if is_batched:
            batched.add(out)
    if not all(v in batched for v in body.outputs[n_state:]):
        return None
    return _Plan(body, n_state, ranks, batched)


def _const(graph: ir.Graph, name: str, values: list[int]) -> ir.Value:
    tensor = ir_tensor(np.asarray(values, dtype=np.int64), name)
    value = ir.Value(name=name, shape=ir.Shape([len(values)]),
                     type=ir.TensorType(ir.DataType.INT64), const_value=tensor)
    graph.register_initializer(value)
    return value


def _apply(graph: ir.Graph, scan: ir.Node, plan: _Plan, opset: int) -> None:
    body, n_state, ranks, batched = plan.body, plan.n_state, plan.ranks, plan.batched
    prefix = f"{scan.name or 'Scan'}/"
    taken = {v.name for v in graph.initializers.values()}
    taken.update(v.name for n in graph for v in n.outputs)
    taken.update(v.name for v in graph.inputs)

    def fresh(name: str) -> str:
        base = name = f"{prefix}{name}"
        k = 0
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        taken.add(name)
        return name

    # what the Scan's outputs become: the state is what came in; each scan output is its
    # batched body value (or a scan input itself, when the body passes one through)
    origin = dict(zip(body.inputs, scan.inputs))
    results = [scan.inputs[k] for k in range(n_state)] + [
        origin.get(v, v) for v in body.outputs[n_state:]]
    body.outputs.clear()   # (the body goes with the Scan)
    # body inputs read the Scan's inputs (a scan input whole: batched); body constants move
    # to the main graph
    for k, v in enumerate(list(body.inputs)):
        outer = scan.inputs[k]
        ranks[outer] = ranks[v]
        if k >= n_state:
            batched.add(outer)
        v.replace_all_uses_with(outer)
    for name, init in list(body.initializers.items()):
        body.initializers.pop(name)
        init.name = fresh(name)
        graph.register_initializer(init)
    first = scan.inputs[n_state]
    steps = first.shape[0] if first.shape is not None and len(first.shape) else None
    nodes = list(body)
    for node in nodes:
        body.remove(node)
        node.name = fresh(node.name or node.op_type)
        for out in node.outputs:
            if out.name:
                out.name = fresh(out.name)
        graph.insert_before(scan, node)
        is_batched = any(v in batched for v in node.inputs if v is not None)
        if not is_batched:
            continue
        for out in node.outputs:   # all iterations along a new leading axis
            out.shape = None if out.shape is None else ir.Shape([steps, *out.shape])
        if node.op_type in _REDUCTIONS:
            _shift_axes(graph, node, ranks[node.inputs[0]], opset, fresh)
            continue
        out_rank = ranks[node.outputs[0]]
        for i, v in enumerate(node.inputs):
            if v is None or v not in batched or ranks[v] >= out_rank \
                    or i in _NON_DATA_INPUTS.get(node.op_type, ()):
                continue
            axes = _const(graph, fresh("unsqueeze_axes"), list(range(1, 1 + out_rank - ranks[v])))
            unsq = ir.Node("", "Unsqueeze", [v, axes], name=fresh("Unsqueeze"), num_outputs=1)
            unsq.outputs[0].name = fresh(f"{v.name}_expanded")
            unsq.outputs[0].dtype = v.dtype
            graph.insert_before(node, unsq)
            node.replace_input_with(i, unsq.outputs[0])
    for old, new in zip(scan.outputs, results):
        if old in graph.outputs:   # the output keeps its name: an Identity gives it
            ident = ir.Node("", "Identity", [new], name=fresh("Identity"), num_outputs=1)
            graph.insert_before(scan, ident)
            out = ident.outputs[0]
            out.type, out.shape = old.type, old.shape
            old.replace_all_uses_with(out, replace_graph_outputs=True)
            name, old.name = old.name, None
            out.name = name
        else:
            old.replace_all_uses_with(new)
    graph.remove(scan, safe=True)


def _shift_axes(graph: ir.Graph, node: ir.Node, rank: int, opset: int, fresh) -> None:
    """A reduction of a batched value: its axes one further (the iteration axis is first)."""
    axes, _ = _reduce_axes(node)
    if not axes:
        if _flag(node, "noop_with_empty_axes", 0):
            return
        axes = list(range(rank))   # all of an iteration's axes, not the iteration axis
    shifted = [(a % rank) + 1 for a in axes]
    if not _axes_is_input(node, opset):
        node.attributes["axes"] = ir.AttrInt64s("axes", shifted)
        return
    if len(node.inputs) < 2:
        node.resize_inputs(2)
    node.replace_input_with(1, _const(graph, fresh("axes"), shifted))


def _axes_is_input(node: ir.Node, opset: int) -> bool:
    """Whether this reduction takes its axes as an input at ``opset`` (ReduceSum from 13,
    the others from 18)."""
    return opset >= (13 if node.op_type == "ReduceSum" else 18)
