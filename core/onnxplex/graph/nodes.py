"""Helpers over onnx-ir nodes that every layer above uses: their attributes (read without onnx-ir's
per-item mapping calls), all nodes of a graph with its bodies', whether nodes hold bodies."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import onnx_ir as ir

logger = logging.getLogger(__name__)


OPSET_KEY = "onnxplex.opset"


"""Node metadata key: the opset version of a node whose version differs from the model's
import (nodes of a function body written for another opset, after expansion)."""


_BODY_ATTRS = (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)


def attrs_of(node: ir.Node) -> Iterable[ir.Attr]:
    """``node.attributes.values()``, read from the plain dict underneath when onnx-ir's
    attribute map is a ``UserDict`` (its ``values()`` goes through the ``Mapping`` mixin, a
    method call per item: a session's passes walk every node's attributes several times)."""
    attrs = node.attributes
    return getattr(attrs, "data", attrs).values()


def all_nodes(graph: ir.Graph) -> list[ir.Node]:
    """``graph.all_nodes()`` (subgraph bodies included) as a list; for a graph without bodies
    (the common case) its own nodes, without onnx-ir's recursive iterator (~2 us a node: a
    session's optimizer walks a MobileNetV2's 100 nodes a dozen times)."""
    nodes = list(graph)
    if not has_bodies(nodes):
        return nodes
    out: list[ir.Node] = []
    _collect_nodes(nodes, out)
    return out


def _collect_nodes(nodes: Iterable[ir.Node], out: list[ir.Node]) -> None:
    """Depth first, each node before its bodies' nodes (onnx-ir's ``all_nodes`` order)."""
    for node in nodes:
        out.append(node)
        for a in attrs_of(node):
            if a.type == ir.AttributeType.GRAPH and a.value is not None:   # (not a RefAttr)
                _collect_nodes(a.value, out)
            elif a.type == ir.AttributeType.GRAPHS and a.value is not None:
                for body in a.value:
                    _collect_nodes(body, out)


def has_bodies(nodes: Iterable[ir.Node]) -> bool:
    """Whether one of ``nodes`` holds a subgraph (an If's branches, a Loop's body)."""
    return any(a.type in _BODY_ATTRS for n in nodes for a in attrs_of(n))


def _unsorted_bodies(graph: ir.Graph) -> bool:
    """True when a subgraph body somewhere in ``graph`` lists a node before its producer."""
    for node in all_nodes(graph):
        for attr in attrs_of(node):
            bodies = ((attr.value,) if attr.type == ir.AttributeType.GRAPH
                      else tuple(attr.value) if attr.type == ir.AttributeType.GRAPHS else ())
            for body in bodies:
                seen = {v.name for v in body.inputs} | set(body.initializers)
                for n in body:
                    local = [v.name for v in n.inputs if v is not None and v.producer() is not None
                             and v.producer().graph is body]
                    if any(name not in seen for name in local):
                        return True
                    seen.update(o.name for o in n.outputs)
    return False
