"""Function calls replaced by the function's nodes, at the proto level.

:class:`FunctionInstance` renames a function body's nodes for one call (the partitioner's
expansion of calls no provider claims, ``framework.functions.expand_nodes``, uses it);
:func:`inline_calls_in_bodies` inlines, when a model is loaded, the calls of model-local
functions made inside subgraph bodies, which are partitioned without expansion.
"""

from __future__ import annotations

import onnx

from .nodes import OPSET_KEY

__all__ = ["FunctionInstance", "inline_calls_in_bodies"]


def inline_calls_in_bodies(proto: onnx.ModelProto) -> int:
    """Replace, in place, every call of a model-local function made inside a subgraph body
    (an If's branches, a Loop's or Scan's body, at any depth) by the function's nodes;
    returns how many calls were inlined. The main graph's own calls are left to the
    partitioner, which expands those no provider claims (:func:`expand_nodes`), and the
    calls inside their bodies are inlined when the expanded model is loaded. A body is
    partitioned on its own, without expansion, so a call left in one could never run:
    skl2onnx's KNNImputer calls a function from each branch of an If inside another function,
    and onnxruntime inlines model-local functions everywhere before partitioning."""
    local = {(f.domain, f.name): f for f in proto.functions}
    if not local:
        return 0
    model_opsets = {imp.domain: imp.version for imp in proto.opset_import}
    used: set[str] = set()
    count = 0

    def expand(nodes, depth: int) -> list[onnx.NodeProto]:
        nonlocal count
        out: list[onnx.NodeProto] = []
        for node in nodes:
            body = local.get((node.domain, node.op_type))
            if body is None:
                out.append(node)
                continue
            if depth > 64:   # (a function calling itself: left for the checks to report)
                out.append(node)
                continue
            base = f"{node.name or node.op_type}/{body.name}/"
            prefix, k = base, 0
            while prefix in used:
                k += 1
                prefix = f"{base[:-1]}_{k}/"
            used.add(prefix)
            body_opsets = {imp.domain: imp.version for imp in body.opset_import}
            versions = {domain: str(version) for domain, version in body_opsets.items()
                        if version != model_opsets.get(domain, version)}
            for imp in body.opset_import:
                if imp.domain not in model_opsets:
                    proto.opset_import.append(imp)
                    model_opsets[imp.domain] = imp.version
            count += 1
            out.extend(expand(FunctionInstance(body, node, prefix, versions).nodes(), depth + 1))
        for node in out:
            walk_attrs(node, depth)
        return out

    def walk_attrs(node: onnx.NodeProto, depth: int) -> None:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                graph(a.g, depth + 1)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    graph(g, depth + 1)

    def graph(g: onnx.GraphProto, depth: int) -> None:
        if not any((n.domain, n.op_type) in local or n.attribute for n in g.node):
            return
        before = count
        nodes = expand(list(g.node), depth)
        if count != before:
            del g.node[:]
            g.node.extend(nodes)

    for node in proto.graph.node:   # (the main graph's own calls stay)
        walk_attrs(node, 0)
    return count


class FunctionInstance:
    """The nodes of function ``body`` called by ``call``: formal inputs and outputs renamed
    to the call's, every other name (subgraphs' included: ONNX names do not shadow) given
    ``prefix``, attribute references resolved from the call's attributes or the body's
    defaults, and nodes of a domain in ``versions`` marked with that opset."""

    def __init__(self, body: onnx.FunctionProto, call: onnx.NodeProto, prefix: str,
                 versions: dict[str, str]) -> None:
        self.body, self.prefix, self.versions = body, prefix, versions
        self.rename: dict[str, str] = dict(zip(body.input, call.input))
        for formal in body.input[len(call.input):]:
            self.rename[formal] = ""
        for formal, actual in zip(body.output, call.output):
            self.rename[formal] = actual or prefix + formal
        self.given = {a.name: a for a in call.attribute}
        self.defaults = {a.name: a for a in body.attribute_proto}

    def nodes(self) -> list[onnx.NodeProto]:
        return [self._node(n) for n in self.body.node]

    def _name(self, name: str) -> str:
        return self.rename.get(name, self.prefix + name) if name else name

    def _node(self, n: onnx.NodeProto) -> onnx.NodeProto:
        node = onnx.NodeProto()
        node.CopyFrom(n)
        node.name = self.prefix + (n.name or n.op_type)
        for lst in (node.input, node.output):
            for j, name in enumerate(lst):
                lst[j] = self._name(name)
        attrs = []
        for a in node.attribute:
            if a.ref_attr_name:
                src = self.given.get(a.ref_attr_name) or self.defaults.get(a.ref_attr_name)
                if src is None:
                    continue
                b = onnx.AttributeProto()
                b.CopyFrom(src)
                b.name = a.name
                attrs.append(b)
                continue
            if a.type == onnx.AttributeProto.GRAPH:
                self._graph(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    self._graph(g)
            attrs.append(a)
        del node.attribute[:]
        node.attribute.extend(attrs)
        if node.domain in self.versions or (node.domain == "ai.onnx"
                                            and "" in self.versions):
            entry = node.metadata_props.add()
            entry.key = OPSET_KEY
            entry.value = self.versions.get(node.domain, self.versions.get(""))
        return node

    def _graph(self, g: onnx.GraphProto) -> None:
        """A subgraph of the body, renamed in place."""
        for v in (*g.input, *g.output, *g.value_info):
            v.name = self._name(v.name)
        for t in g.initializer:
            t.name = self._name(t.name)
        for st in g.sparse_initializer:
            st.values.name = self._name(st.values.name)
            st.indices.name = self._name(st.indices.name)
        nodes = [self._node(n) for n in g.node]
        del g.node[:]
        g.node.extend(nodes)
