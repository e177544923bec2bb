"""Expansion of function ops that no provider claimed (ORT's inlining step).

Many ONNX ops are defined by a *function body* made of other ops (``Shrink``, ``Swish``,
``MeanVarianceNormalization``; context-dependent ones such as ``RMSNormalization`` or
``SoftmaxCrossEntropyLoss`` whose body depends on the input types). When no provider runs such
a node, the session replaces it by its body and partitions again, exactly as onnxruntime
re-runs its provider loop after inlining. Model-local functions are inlined the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import onnx
from onnx import helper

from ..graph.inline import FunctionInstance
from ..graph.model import Model, NodeView, load_proto

__all__ = ["function_body", "expand_nodes"]

logger = logging.getLogger(__name__)


def function_body(model: Model, view: NodeView) -> onnx.FunctionProto | None:
    """The body of ``view`` as a FunctionProto, or None when the op has none. The schema's
    attribute defaults are added to the body's own, so references to them resolve."""
    local = {(f.domain, f.name): f for f in model.ir.functions.values()} \
        if getattr(model.ir, "functions", None) else {}
    if (view.domain, view.op_type) in local:
        return onnx.FunctionProto.FromString(
            _serialize_function(local[(view.domain, view.op_type)]))
    try:
        schema = onnx.defs.get_schema(view.op_type, view.opset, view.domain)
    except onnx.defs.SchemaError:
        return None
    data = b""
    try:
        if schema.has_function:
            data = schema.get_function_with_opset_version(
                _body_version(schema.function_opset_versions, view.opset))
        if not data and schema.has_context_dependent_function:
            types = [b"" if v is None else _type_proto(v).SerializeToString()
                     for v in view.inputs]
            if any(v is not None and v.elem_type is None for v in view.inputs):
                return None  # the body depends on types we do not know
            data = schema.get_context_dependent_function_with_opset_version(
                _body_version(schema.context_dependent_function_opset_versions, view.opset),
                _node_proto(view).SerializeToString(), types)
    except Exception as e:  # noqa: BLE001 - a body that cannot be built is just not expandable
        logger.debug("no function body for %s: %s", view.display_name, e)
        return None
    if not data:
        return None
    body = onnx.FunctionProto.FromString(data)
    have = {a.name for a in body.attribute_proto}
    for name, attr in schema.attributes.items():
        if name not in have and attr.default_value.type != onnx.AttributeProto.UNDEFINED:
            d = body.attribute_proto.add()
            d.CopyFrom(attr.default_value)
            d.name = name
    return body


def _body_version(versions, opset: int) -> int:
    """The newest body written for an opset <= the model's; else the oldest one there is
    (its nodes then keep their own opset, see OPSET_KEY)."""
    older = [v for v in versions if v <= opset]
    return max(older) if older else (min(versions) if versions else opset)


def _serialize_function(fn) -> bytes:
    import onnx_ir as ir

    return ir.serde.serialize_function(fn).SerializeToString()


def _type_proto(v) -> onnx.TypeProto:
    shape = None if v.shape is None else [d if isinstance(d, (int, str)) else None
                                          for d in v.shape]
    return helper.make_tensor_type_proto(v.elem_type, shape)


def _node_proto(view: NodeView) -> onnx.NodeProto:
    node = helper.make_node(view.op_type, [v.name if v else "" for v in view.inputs],
                            [v.name if v else "" for v in view.outputs],
                            domain=view.domain or None)
    for name, value in view.attrs.items():
        node.attribute.append(helper.make_attribute(name, _attr_for_proto(value)))
    return node


def _attr_for_proto(value):
    import numpy as np
    from onnx import numpy_helper

    if isinstance(value, np.ndarray):
        return numpy_helper.from_array(value)
    return value


def expand_nodes(model: Model, indices: Iterable[int]) -> tuple[Model, list[str]] | None:
    """A new Model with the given nodes replaced by their function bodies, or None when none
    of them has a body. Only the main graph is rewritten (a body's own subgraphs, an If's
    branches in it say, come along renamed)."""
    bodies = {}
    for i in indices:
        body = function_body(model, model.node_views[i])
        if body is not None:
            bodies[i] = body
    if not bodies:
        return None
    proto = model.to_proto()
    order = {id(n): k for k, n in enumerate(model.graph)}
    by_position = {order[id(model.nodes[i])]: (i, b) for i, b in bodies.items()}
    model_opsets = {imp.domain: imp.version for imp in proto.opset_import}
    new_nodes: list[onnx.NodeProto] = []
    done: list[str] = []
    for k, node in enumerate(proto.graph.node):
        if k not in by_position:
            new_nodes.append(node)
            continue
        i, body = by_position[k]
        view = model.node_views[i]
        body_opsets = {imp.domain: imp.version for imp in body.opset_import}
        # Nodes of a body written for another opset keep that version (OPSET_KEY).
        versions = {domain: str(version) for domain, version in body_opsets.items()
                    if version != model_opsets.get(domain, version)}
        new_nodes.extend(FunctionInstance(body, node, f"{view.display_name}/{body.name}/",
                                   versions).nodes())
        done.append(f"{view.display_name} ({view.qualified_op})")
        for imp in body.opset_import:
            if imp.domain not in {o.domain for o in proto.opset_import}:
                proto.opset_import.append(imp)
    del proto.graph.node[:]
    proto.graph.node.extend(new_nodes)
    return load_proto(proto, model.base_dir), done
