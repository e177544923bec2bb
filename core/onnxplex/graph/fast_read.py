"""A model's graphs read into onnx-ir objects in one lean loop.

``onnx_ir.serde.deserialize_model`` reads a node through a dozen calls, each behind an
error-capturing wrapper, and every value's type through three more: ~30 us a node, which
was a fifth of the creation of a session of a converted scikit-learn model (a handful of
nodes; onnxruntime creates such a session in half a millisecond). Loading has already
checked the graph's structure (:func:`._graph._check_structure`: every name defined once,
every input defined, in the main graph and in every subgraph body), so graphs, their nodes
and values are built here directly, with the same onnx-ir constructors and the same results;
what is less common is still read by onnx-ir: initializers, long or unusual attributes
(through :mod:`._fast_attrs`), functions, and value types other than plain tensors. A model
with anything this reader does not know (quantization annotations, sparse initializers,
multi-device configurations, IR 9 function value infos) returns ``None`` and is read by
onnx-ir whole.

``tests/test_fast_read.py`` checks that both readers give the same model on every onnx node
conformance case and more.
"""

from __future__ import annotations

from typing import Any

import onnx
import onnx_ir as ir
from onnx_ir import serde

from . import fast_attrs as _fast_attrs

__all__ = ["Types", "plain_tensor_type", "read_model", "split_value_info"]

# (element type, dims or None) of a value_info entry that is a plain tensor type
TensorInfo = tuple[int, "tuple[int | str | None, ...] | None"]

_IR9 = 10   # onnx-ir reads function value infos from the main graph below this IR version


def plain_tensor_type(info: onnx.ValueInfoProto) -> TensorInfo | None:
    """(element type, dims or None) of a tensor-typed ``value_info`` entry with nothing else
    on it; None for anything onnx-ir should read (other types, denotations, metadata, doc)."""
    tp = info.type
    if (tp.WhichOneof("value") != "tensor_type" or info.doc_string or info.metadata_props
            or tp.denotation):
        return None
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return tt.elem_type, None
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.denotation:
            return None
        which = d.WhichOneof("value")
        dims.append(d.dim_value if which == "dim_value"
                    else d.dim_param if which == "dim_param" else None)
    return tt.elem_type, tuple(dims)


class Types:
    """Value types and shapes set from plain tensor infos, equal shapes shared (frozen, as
    onnx-ir makes them; a type object is not shared: ``Value.dtype``'s setter changes it in
    place)."""

    __slots__ = ("dtypes", "shapes")

    def __init__(self) -> None:
        self.dtypes: dict[int, ir.DataType] = {}
        self.shapes: dict[tuple, ir.Shape] = {}

    def dtype(self, elem: int) -> ir.DataType:
        dtype = self.dtypes.get(elem)
        if dtype is None:
            dtype = self.dtypes[elem] = ir.DataType(elem)
        return dtype

    def shape(self, dims: tuple) -> ir.Shape:
        shape = self.shapes.get(dims)
        if shape is None:
            shape = self.shapes[dims] = ir.Shape(dims, frozen=True)
        return shape

    def apply(self, value: ir.Value, info: TensorInfo) -> None:
        elem, dims = info
        value.type = ir.TensorType(self.dtype(elem))
        value.shape = None if dims is None else self.shape(dims)

    def read(self, info: onnx.ValueInfoProto, value: ir.Value) -> None:
        """``info``'s type onto ``value``: plain tensors here, the rest by onnx-ir."""
        plain = plain_tensor_type(info)
        if plain is None:
            serde.deserialize_value_info_proto(info, value)
        else:
            self.apply(value, plain)


_A = onnx.AttributeProto
# AttributeProto type -> (onnx-ir's type, the proto field holding the value), for the types
# read here (the others, and lists of _fast_attrs' length, through serde)
_PLAIN_ATTRS: dict[int, tuple[ir.AttributeType, str]] = {
    _A.INT: (ir.AttributeType.INT, "i"), _A.FLOAT: (ir.AttributeType.FLOAT, "f"),
    _A.STRING: (ir.AttributeType.STRING, "s"), _A.INTS: (ir.AttributeType.INTS, "ints"),
    _A.FLOATS: (ir.AttributeType.FLOATS, "floats"),
    _A.STRINGS: (ir.AttributeType.STRINGS, "strings"),
}
_LIST_MAX = _fast_attrs._MIN_LEN   # longer lists: _fast_attrs' arrays


class _Decline(Exception):
    """Something only onnx-ir reads: the whole model goes to it."""


def _attribute(proto: onnx.AttributeProto, scopes: list[dict[str, ir.Value]],
               types: Types) -> ir.Attr:
    """One attribute as ``serde._deserialize_attribute`` reads it (which also reads, through
    :mod:`._fast_attrs`, what is neither a short plain value nor a subgraph here)."""
    kind = proto.type
    if proto.ref_attr_name or proto.doc_string:
        return serde._deserialize_attribute(proto, scopes)
    if kind == _A.GRAPH:
        return ir.Attr(proto.name, ir.AttributeType.GRAPH, _read_graph(proto.g, scopes, types))
    if kind == _A.GRAPHS:
        return ir.Attr(proto.name, ir.AttributeType.GRAPHS,
                       [_read_graph(body, scopes, types) for body in proto.graphs])
    plain = _PLAIN_ATTRS.get(kind)
    if plain is None:
        return serde._deserialize_attribute(proto, scopes)
    ir_kind, field = plain
    value = getattr(proto, field)
    try:
        if field == "s":
            value = value.decode("utf-8")
        elif field == "strings":
            if len(value) >= _LIST_MAX:
                return serde._deserialize_attribute(proto, scopes)
            value = [v.decode("utf-8") for v in value]
        elif field != "i" and field != "f" and len(value) >= _LIST_MAX:
            return serde._deserialize_attribute(proto, scopes)
    except UnicodeDecodeError:   # (onnx-ir warns and keeps the bytes)
        return serde._deserialize_attribute(proto, scopes)
    return ir.Attr(proto.name, ir_kind, value)


def _field(proto: Any, name: str) -> Any:
    return getattr(proto, name) if proto.HasField(name) else None


def split_value_info(g: onnx.GraphProto, skip: frozenset[str] | set[str] = frozenset(), *,
                     copy: bool = False
                     ) -> tuple[dict[str, TensorInfo], dict[str, onnx.ValueInfoProto]]:
    """``g``'s ``value_info`` but the names in ``skip``: (plain tensor types, the entries
    left to onnx-ir), the latter copied when ``copy`` (the caller empties the list)."""
    typed: dict[str, TensorInfo] = {}
    rest: dict[str, onnx.ValueInfoProto] = {}
    for info in g.value_info:
        if info.name in skip:
            continue
        plain = plain_tensor_type(info)
        if plain is not None:
            typed[info.name] = plain
        elif copy:
            rest[info.name] = kept = onnx.ValueInfoProto()
            kept.CopyFrom(info)
        else:
            rest[info.name] = info
    return typed, rest


def _read_graph(g: onnx.GraphProto, scopes: list[dict[str, ir.Value]], types: Types,
                value_info: tuple[dict[str, TensorInfo], dict[str, onnx.ValueInfoProto]]
                | None = None) -> ir.Graph:
    """A graph (``scopes``: the values of the graphs around it, innermost last) as onnx-ir's
    ``_deserialize_graph`` reads it; ``value_info``: its entries, split (a body's own are
    read from it)."""
    if g.quantization_annotation or g.sparse_initializer:
        raise _Decline
    typed, rest = split_value_info(g) if value_info is None else value_info
    read_metadata = serde.deserialize_metadata_props
    inputs = []
    for info in g.input:
        value = ir.Value(name=info.name)
        types.read(info, value)
        inputs.append(value)
    values: dict[str, ir.Value] = {v.name: v for v in inputs}
    initializers = []
    for tensor_proto in g.initializer:
        tensor = serde.deserialize_tensor(tensor_proto)
        name = tensor.name
        if not name:
            raise _Decline   # (onnx-ir skips it with a warning)
        value = values.get(name)
        if value is not None:   # an initializer for an input
            value.const_value = tensor
        else:
            # (type and shape from the proto's fields, equal shapes shared: a proto tensor
            # builds a new Shape at each ask)
            value = ir.Value(None, index=None, name=name,
                             type=ir.TensorType(types.dtype(tensor_proto.data_type)),
                             shape=types.shape(tuple(tensor_proto.dims)), const_value=tensor)
            plain = typed.get(name)
            if plain is not None:
                types.apply(value, plain)
            elif name in rest:
                serde.deserialize_value_info_proto(rest[name], value)
            values[name] = value
        initializers.append(value)
    nodes_out: list[list[ir.Value]] = []
    for node in g.node:   # outputs first: subgraph bodies may read values declared later
        outs = []
        for name in node.output:
            if not name:
                outs.append(ir.Value(name=""))
                continue
            if name in values:
                raise _Decline   # (loading refuses it first; onnx-ir raises)
            value = values[name] = ir.Value(name=name)
            plain = typed.get(name)
            if plain is not None:
                types.apply(value, plain)
            elif name in rest:
                serde.deserialize_value_info_proto(rest[name], value)
            outs.append(value)
        nodes_out.append(outs)
    scopes.append(values)
    outer = scopes[-2::-1]   # (innermost first)
    nodes = []
    try:
        for node, outs in zip(g.node, nodes_out):
            if getattr(node, "device_configurations", None):
                raise _Decline
            ins: list[ir.Value | None] = []
            for name in node.input:
                if not name:
                    ins.append(None)
                    continue
                value = values.get(name)
                if value is None:
                    value = next((s[name] for s in outer if name in s), None)
                    if value is None:
                        raise _Decline   # (loading refuses it first; onnx-ir: a placeholder)
                ins.append(value)
            nodes.append(ir.Node(
                node.domain, node.op_type, ins,
                [_attribute(a, scopes, types) for a in node.attribute]
                if node.attribute else (),
                overload=getattr(node, "overload", ""), outputs=outs, name=node.name,
                doc_string=_field(node, "doc_string"),
                metadata_props=read_metadata(node.metadata_props) if node.metadata_props
                else None))
    finally:
        scopes.pop()
    outputs = []
    for info in g.output:
        value = values.get(info.name)
        if value is None:
            raise _Decline   # (loading refuses it first; onnx-ir makes a placeholder)
        types.read(info, value)
        outputs.append(value)
    return ir.Graph(inputs, outputs, nodes=nodes, initializers=initializers,
                    doc_string=_field(g, "doc_string"), name=_field(g, "name"),
                    metadata_props=read_metadata(g.metadata_props))


def read_model(proto: onnx.ModelProto, typed: dict[str, TensorInfo],
               rest: dict[str, onnx.ValueInfoProto]) -> ir.Model | None:
    """``proto`` as onnx-ir would deserialize it, its graphs read here; ``typed`` and
    ``rest``: the main graph's ``value_info`` (already taken off ``proto``), plain tensor types
    and the others. ``None`` when the model has something only onnx-ir reads."""
    if getattr(proto, "configuration", None) or (proto.functions and proto.ir_version < _IR9):
        return None
    try:
        graph = _read_graph(proto.graph, [], Types(), (typed, rest))
    except _Decline:
        return None
    graph.opset_imports.update(serde.deserialize_opset_import(proto.opset_import))
    return ir.Model(
        graph, ir_version=proto.ir_version,
        producer_name=_field(proto, "producer_name"),
        producer_version=_field(proto, "producer_version"),
        domain=_field(proto, "domain"), model_version=_field(proto, "model_version"),
        doc_string=_field(proto, "doc_string"),
        functions=[serde.deserialize_function(f) for f in proto.functions],
        metadata_props=serde.deserialize_metadata_props(proto.metadata_props))
