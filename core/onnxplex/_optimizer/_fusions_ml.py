"""Extended-level fusions of ai.onnx.ml ops, as converters write them.

* LabelEncoder + Cast -> LabelEncoder: skl2onnx's OrdinalEncoder is a LabelEncoder from the
  categories to int64 codes followed by a Cast to float (the ColumnTransformer concatenates
  floats); the codes are written as floats in the encoder itself (``values_floats``, the very
  float32 values the Cast computes), one step less a run.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from . import OptimizerContext, register_pass
from ._fusions_cnn import EXTENDED, _counted, _fuse, _sole_consumer

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
