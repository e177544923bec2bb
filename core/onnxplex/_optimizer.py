"""Provider-independent graph optimizations (ORT's "basic" level).

* constant folding: a node whose inputs are all constants runs once, on the default CPU
  provider's kernels, and its outputs become initializers (so weights computed by
  ConstantOfShape or Reshape chains reach kernels as constants and can be prepacked);
  ``Shape``/``Size`` of a statically shaped value fold too;
* removal of ``Identity`` and inference-mode ``Dropout``.

A pass that raises is skipped with a warning: an optimization never aborts a session.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from ._graph import Model, Subgraph

__all__ = ["optimize"]

logger = logging.getLogger(__name__)

# Ops whose output differs between runs (or that need a fresh seed), never folded.
_NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                     "Multinomial", "Bernoulli"}
# Outputs larger than this are not folded: folding would trade a cheap op for a big constant.
_MAX_FOLDED_BYTES = 256 << 20


def optimize(model: Model, level: int, compile_node: Callable[[Subgraph], Callable] | None
             ) -> list[str]:
    """Optimize ``model`` in place for ``level`` (a GraphOptimizationLevel value); returns
    notes of what was done. ``compile_node`` builds a CPU kernel for constant folding."""
    notes: list[str] = []
    if level <= 0:
        return notes
    passes: list[tuple[str, Callable[[], int]]] = [
        ("eliminate Identity/Dropout", lambda: _eliminate_noops(model)),
    ]
    if compile_node is not None:
        passes.insert(0, ("constant folding", lambda: _fold_constants(model, compile_node)))
    for name, fn in passes:
        try:
            n = fn()
        except Exception as e:  # noqa: BLE001 - a failing pass is skipped, never fatal
            logger.warning("optimizer pass %r skipped: %s: %s", name, type(e).__name__, e)
            notes.append(f"{name}: skipped ({type(e).__name__}: {e})")
            model.reindex()
            continue
        if n:
            notes.append(f"{name}: {n} node(s)")
            model.reindex()
    return notes


def _fold_constants(model: Model, compile_node: Callable[[Subgraph], Callable]) -> int:
    graph = model.graph
    consts = set(model.const_names)
    folded = 0
    # Walk in topological order; newly folded outputs make their consumers foldable.
    for index, node in enumerate(list(model.nodes)):
        view = model.node_views[index]
        if node.op_type in _NONDETERMINISTIC or node.domain not in ("", "ai.onnx"):
            continue
        if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
               for a in node.attributes.values()):
            continue
        args: list[np.ndarray | None] = []
        for v in node.inputs:
            if v is None or not v.name:
                args.append(None)
            elif v.name in consts and v.const_value is not None:
                args.append(v.const_value.numpy())
            else:
                break
        if len(args) == len(node.inputs):
            try:
                kernel = compile_node(Subgraph(view.display_name, (view,), view.inputs,
                                               view.outputs))
                out = kernel(*args)
            except Exception as e:  # noqa: BLE001 - leave the node to run normally
                logger.debug("not folding %s: %s", view.display_name, e)
                continue
            results = out if isinstance(out, tuple) else (out,)
            results = results[:len(node.outputs)]
            if len(results) < len(node.outputs):
                continue
        elif node.op_type in ("Shape", "Size") and (arr := _static_shape_value(view)) is not None:
            results = (arr,)
        else:
            continue
        if not all(isinstance(r, np.ndarray) for r in results):
            continue
        if sum(r.nbytes for r in results) > _MAX_FOLDED_BYTES:
            continue
        _replace_with_constants(graph, node, results)
        consts.update(o.name for o in node.outputs if o.name)
        folded += 1
    return folded


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


def _replace_with_constants(graph: ir.Graph, node: ir.Node, results) -> None:
    new_values = []
    for out, arr in zip(node.outputs, results):
        if not out.name:
            continue
        name = out.name
        value = ir.Value(name=name, shape=ir.Shape(arr.shape),
                         type=ir.TensorType(ir.DataType.from_numpy(arr.dtype)),
                         const_value=ir.tensor(arr, name=name))
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
        if src is None or out.name in outputs:
            continue  # keep graph outputs' names stable
        out.replace_all_uses_with(src)
        graph.remove(node, safe=True)
        removed += 1
    return removed
