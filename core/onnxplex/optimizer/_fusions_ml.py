"""Extended-level fusions of ai.onnx.ml ops, as converters write them.

* LabelEncoder + Cast -> LabelEncoder: skl2onnx's OrdinalEncoder is a LabelEncoder from the
  categories to int64 codes followed by a Cast to float (the ColumnTransformer concatenates
  floats); the codes are written as floats in the encoder itself (``values_floats``, the very
  float32 values the Cast computes), one step less a run.
* Cast of data moved out of a constant: every skl2onnx classifier looks its label up in an
  int32 table of classes (ArrayFeatureExtractor), reshapes it and casts it to int64; a Cast
  commutes with ops that only move elements, so the table is cast once instead (a new
  initializer) and the Cast goes.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ..graph.model import _readonly_array
from ..graph.nodes import attrs_of
from . import OptimizerContext, register_pass
from ._fusions_cnn import EXTENDED, _counted, _fuse, _initializer, _sole_consumer

ML = "ai.onnx.ml"

# attributes naming a LabelEncoder's values and default (one pair of them is set)
_VALUE_ATTRS = ("values_floats", "values_int64s", "values_strings", "values_tensor",
                "default_float", "default_int64", "default_string", "default_tensor")


@register_pass("LabelEncoder + Cast -> LabelEncoder", EXTENDED, requires={"LabelEncoder"})
@_counted
def _label_encoder_cast(ctx: OptimizerContext) -> int:
    """A LabelEncoder (ai.onnx.ml 2 on) from any keys to ``values_int64s`` whose only reader
    is a Cast to float32: the values and the default become ``values_floats`` and
    ``default_float`` (each the float32 the Cast would give: round to nearest even)."""
    if ctx.model.opsets.get(ML, 1) < 2:
        return 0
    graph = ctx.model.graph
    changes = 0
    for node in list(graph):
        if node.op_type != "LabelEncoder" or node.domain != ML or len(node.outputs) != 1:
            continue
        attrs = node.attributes
        values = attrs.get("values_int64s")
        if values is None or any(k in attrs for k in _VALUE_ATTRS
                                 if k not in ("values_int64s", "default_int64")):
            continue
        cast = _sole_consumer(node.outputs[0])
        if (cast is None or cast.op_type != "Cast" or cast.domain not in ("", "ai.onnx")
                or set(cast.attributes) != {"to"}
                or cast.attributes["to"].value != ir.DataType.FLOAT.value):
            continue
        default = attrs.get("default_int64")
        codes = np.array([*values.value, -1 if default is None else default.value], np.int64)
        as_float = codes.astype(np.float32).tolist()
        kept = [a for k, a in attrs.items() if k not in ("values_int64s", "default_int64")]
        new_attrs = [*kept, ir.AttrFloat32s("values_floats", as_float[:-1]),
                     ir.AttrFloat32("default_float", as_float[-1])]
        _fuse(graph, [node, cast], ML, "LabelEncoder", list(node.inputs), new_attrs,
              cast.outputs[0])
        changes += 1
    return changes


# ops that only move or select elements of their first input (the others: indices, shapes)
_MOVERS = frozenset({"ArrayFeatureExtractor", "Gather", "GatherElements", "GatherND",
                     "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity"})
_INTS = frozenset({ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64,
                   ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32,
                   ir.DataType.UINT64})

_AFE_TYPES = frozenset(t.value for t in (ir.DataType.INT32, ir.DataType.INT64, ir.DataType.FLOAT,
                                         ir.DataType.DOUBLE))


def _mover(node: ir.Node | None) -> bool:
    return node is not None and node.op_type in _MOVERS and bool(node.inputs) and (
        node.domain in ("", "ai.onnx") or (node.domain == ML
                                           and node.op_type == "ArrayFeatureExtractor"))


@register_pass("Cast of a constant's moved data -> cast constant", EXTENDED, requires={"Cast"})
@_counted(sweep=False)
def _cast_moved_constant(ctx: OptimizerContext) -> int:
    """A Cast from an integer type to an integer or float type whose input is a chain of
    :data:`_MOVERS` (each read by the next alone) starting at a constant table: the table is
    cast (a new initializer, numpy's conversion: C's, as onnxruntime's Cast) and read by the
    chain's first op, the values along the chain take the Cast's type, and the last op takes
    the Cast's place."""
    graph = ctx.model.graph
    changes = 0
    for cast in list(graph):
        if cast.op_type != "Cast" or cast.domain not in ("", "ai.onnx") \
                or set(cast.attributes) != {"to"} or len(cast.inputs) != 1:
            continue
        x = cast.inputs[0]
        src, to = (x.dtype if x is not None else None), cast.attributes["to"].value
        if src not in _INTS or to not in {t.value for t in _INTS} | {
                ir.DataType.FLOAT.value, ir.DataType.DOUBLE.value}:
            continue
        chain: list[ir.Node] = []
        v = x
        while _mover(v.producer()) and _sole_consumer(v) is not None:
            chain.append(v.producer())
            v = chain[-1].inputs[0]
            if v is None:
                break
        if not chain or v is None or v.const_value is None or not v.is_initializer() \
                or v.is_graph_input() or v.dtype != src:
            continue
        if to not in _AFE_TYPES and any(n.op_type == "ArrayFeatureExtractor" for n in chain):
            continue   # (a type ArrayFeatureExtractor does not take)
        try:
            table = _readonly_array(v.const_value)
        except Exception:  # noqa: BLE001 - unreadable: left as it is
            continue
        first, last = chain[-1], chain[0]
        target = ir.DataType(to)
        cast_table = _initializer(graph, table.astype(target.numpy()), f"{v.name}_{target.name}")
        first.replace_input_with(0, cast_table)
        for node in chain[1:]:
            node.outputs[0].dtype = target
        _fuse(graph, [last, cast], last.domain, last.op_type, list(last.inputs),
              list(attrs_of(last)), cast.outputs[0])
        if not v.uses() and not v.is_graph_output():   # (the one thing the pass leaves unread)
            del graph.initializers[v.name]
        changes += 1
    return changes
