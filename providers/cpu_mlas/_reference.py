"""The reference fallback: ops with no native cpu_mlas kernel run through onnx's reference
implementations (``onnx.reference``).

This is deliberately separate from the native kernels: nodes claimed this way are labelled in
the placement report ("onnx reference fallback"), the provider option
``reference_fallback=0`` turns it off, and the conformance tests count native and fallback
passes apart. The reference evaluator is slow (pure numpy, per call overhead) and is never used
for an op that has a native kernel.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

import numpy as np
import onnx
from onnx import helper

from onnxplex import NodeView

logger = logging.getLogger(__name__)

NOTE = "onnx reference fallback"


def _attr_proto(name: str, value: Any) -> onnx.AttributeProto:
    import onnx_ir as ir
    from onnx import numpy_helper

    if isinstance(value, ir.Graph):
        return helper.make_attribute(name, ir.serde.serialize_graph(value))
    if isinstance(value, tuple) and value and isinstance(value[0], ir.Graph):
        return helper.make_attribute(name, [ir.serde.serialize_graph(g) for g in value])
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, numpy_helper.from_array(value))
    if isinstance(value, tuple) and value and isinstance(value[0], np.ndarray):
        return helper.make_attribute(name, [numpy_helper.from_array(v) for v in value])
    if isinstance(value, tuple) and not value:
        raise ValueError(f"attribute {name!r} is an empty list of unknown type")
    return helper.make_attribute(name, list(value) if isinstance(value, tuple) else value)


def _one_node_model(node: NodeView, opsets: dict[str, int]) -> onnx.ModelProto:
    ins = [v.name if v is not None else "" for v in node.inputs]
    outs = [v.name if v is not None else "" for v in node.outputs]
    proto = helper.make_node(node.op_type, ins, outs, domain=node.domain or None,
                             name=node.display_name)
    proto.attribute.extend(_attr_proto(k, v) for k, v in node.attrs.items())
    graph = helper.make_graph(
        [proto], "reference_fallback",
        [helper.make_value_info(n, onnx.TypeProto()) for n in ins if n]
        + [helper.make_value_info(v.name, onnx.TypeProto()) for v in node.implicit_inputs],
        [helper.make_value_info(n, onnx.TypeProto()) for n in outs if n])
    imports = [helper.make_opsetid(d, v) for d, v in opsets.items()]
    return helper.make_model(graph, opset_imports=imports)


# onnx.reference's op lists, by domain.
_OP_LISTS = {
    "": "onnx.reference.ops._op_list",
    "ai.onnx.ml": "onnx.reference.ops.aionnxml._op_list",
    "ai.onnx.preview": "onnx.reference.ops.aionnx_preview._op_list",
    "ai.onnx.preview.training": "onnx.reference.ops.aionnx_preview_training._op_list",
}
# Reference implementations that need a package onnxplex does not depend on.
_NEEDS = {("", "ImageDecoder"): "PIL"}


@functools.lru_cache(maxsize=1024)
def _supported(domain: str, op_type: str, opset: int) -> str | None:
    """None when onnx.reference implements the op at that opset, else why not."""
    import importlib
    import importlib.util

    module = _OP_LISTS.get("" if domain == "ai.onnx" else domain)
    if module is None:
        return f"onnx.reference has no ops in domain {domain!r}"
    need = _NEEDS.get((domain, op_type))
    if need is not None and importlib.util.find_spec(need) is None:
        return (f"onnx.reference's {op_type} needs the {need!r} package, which is not "
                "installed")
    try:
        importlib.import_module(module).load_op(domain, op_type, opset)
    except Exception:  # noqa: BLE001 - anything missing means "no reference implementation"
        return f"onnx.reference has no implementation of {op_type}-{opset}"
    return None


def reference_reason(node: NodeView) -> str | None:
    """None when the reference can run ``node``, else why not."""
    return _supported(node.domain, node.op_type, node.opset)


def make_reference_kernel(node: NodeView, opsets: dict[str, int]):
    """A kernel running ``node`` with onnx's ReferenceEvaluator (built once, shared)."""
    from onnx.reference import ReferenceEvaluator

    model = _one_node_model(node, opsets)
    evaluator = ReferenceEvaluator(model)
    names = [v.name for v in node.inputs if v is not None]
    names += [v.name for v in node.implicit_inputs]
    outs = [v.name if v is not None else None for v in node.outputs]
    wanted = [n for n in outs if n]
    # The evaluator's op objects are not documented as thread-safe: one call at a time.
    lock = threading.Lock()

    n_explicit = len(node.inputs)

    def kernel(*args):
        present = [a for v, a in zip(node.inputs, args[:n_explicit]) if v is not None]
        feeds = dict(zip(names, [*present, *args[n_explicit:]]))
        with lock:
            results = evaluator.run(wanted, feeds)
        it = iter(results)
        out = tuple(_normalize(next(it), node.outputs[k]) if n else None
                    for k, n in enumerate(outs))
        return out if len(out) != 1 else out[0]

    return kernel


def _normalize(value: Any, info) -> Any:
    if isinstance(value, (list, type(None))):
        return value
    arr = np.asarray(value)
    if info is not None and info.dtype is not None and arr.dtype != info.dtype:
        if arr.dtype.kind in "SU" and info.dtype == np.dtype(object):
            arr = arr.astype(object)
    return arr
