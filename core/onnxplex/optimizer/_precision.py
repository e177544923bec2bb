"""Half precision computed in single precision (onnxruntime's InsertCastTransformer).

A float16 or bfloat16 model stores its weights and activations in 16 bits, but x86 CPUs have
no fast 16-bit float arithmetic: the default CPU provider's float kernels (blocked GEMM,
channels-last convolutions, the transformer fusions) are float32. As onnxruntime's CPU
provider computes a float16 node without a float16 kernel in float32 between inserted Casts,
this pass computes every half-precision node the default CPU provider runs in float32:

* the *region*: nodes whose schema lets their half-precision values be float32 instead (every
  such value is bound to a type parameter that admits ``tensor(float)`` and that an input
  binds; not Cast/CastLike, not ops with subgraphs or outside the ONNX domains, not nodes
  another provider claimed); a node without half-precision outputs (Shape, a comparison)
  joins only when all its half inputs come from the region;
* inside it, values are float32 and are not rounded to 16 bits between nodes (onnxruntime
  also drops the float -> float16 -> float Cast pairs its insertion leaves);
* half-precision constants the region reads become float32 initializers, once;
* at its edges: a value from outside is cast to float32 once (the model's own
  ``Cast(float32 -> half)`` in front of the region is bypassed, its float32 input read
  directly, as onnxruntime removes that pair); a value leaving it is cast back to its
  half type for readers outside and for graph outputs (which keep their names and types),
  and the model's own ``Cast(half -> float32)`` after the region reads the float32 value
  directly; the model's Casts to half from other types (an attention mask's int64) that feed
  the region cast to float32 instead.

The results are those of float32 arithmetic on the half-precision weights and inputs: more
accurate than rounding every intermediate to 16 bits, and what onnxruntime computes. At
``ORT_ENABLE_BASIC`` and below the nodes run as written, in numpy's 16-bit arithmetic.
"""

from __future__ import annotations

import functools
import logging
import math

import numpy as np
import onnx
import onnx_ir as ir

from . import OptimizerContext, register_pass
from ._basic import remove_unused
from ._fusions_cnn import _fresh, _initializer
from ._rules import STORED_AS

logger = logging.getLogger(__name__)

EXTENDED = 2
_HALF = frozenset({ir.DataType.FLOAT16, ir.DataType.BFLOAT16})
_FLOAT = ir.DataType.FLOAT
_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})
_NOT_CONVERTED = frozenset({"Cast", "CastLike"})   # their half type is the point


def _dtype(v: ir.Value | None) -> ir.DataType | None:
    if v is None or not isinstance(v.type, ir.TensorType):
        return None
    return v.type.dtype


def _half(v: ir.Value | None) -> bool:
    return _dtype(v) in _HALF


@functools.lru_cache(maxsize=1024)
def _formals(domain: str, op_type: str, version: int
             ) -> tuple[tuple[str, ...], bool, tuple[str, ...], bool, dict[str, bool]] | None:
    """(input type strings, last input variadic, output type strings, last output variadic,
    type parameter -> admits tensor(float)) of an op's schema, or None when unknown."""
    try:
        s = onnx.defs.get_schema(op_type, version, "" if domain == "ai.onnx" else domain)
    except onnx.defs.SchemaError:
        return None
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    params = {c.type_param_str: "tensor(float)" in c.allowed_type_strs
              for c in s.type_constraints}
    ins, outs = s.inputs, s.outputs
    return (tuple(p.type_str for p in ins), bool(ins) and ins[-1].option == variadic,
            tuple(p.type_str for p in outs), bool(outs) and outs[-1].option == variadic,
            params)


def _formal(types: tuple[str, ...], variadic: bool, k: int) -> str | None:
    if k < len(types):
        return types[k]
    return types[-1] if variadic and types else None


def _convertible(node: ir.Node, opsets: dict[str, int]) -> bool:
    """Whether ``node``'s half-precision values may all be float32 instead: each is bound to
    a type parameter admitting float that a present input binds."""
    if node.domain not in _DOMAINS or node.op_type in _NOT_CONVERTED:
        return False
    if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
           for a in node.attributes.values()):
        return False
    version = opsets.get(node.domain or "", opsets.get("ai.onnx"))
    schema = _formals(node.domain, node.op_type, version) if version else None
    if schema is None:
        return False
    in_types, in_var, out_types, out_var, params = schema
    bound: set[str] = set()      # type parameters an input binds
    half: set[str] = set()       # type parameters binding a half-precision value
    for k, v in enumerate(node.inputs):
        if v is None:
            continue
        t = _formal(in_types, in_var, k)
        if t is None:
            return False
        bound.add(t)
        if _half(v):
            half.add(t)
    for k, v in enumerate(node.outputs):
        if not _half(v):
            continue
        t = _formal(out_types, out_var, k)
        if t is None:
            return False
        half.add(t)
    return all(params.get(t, False) and t in bound for t in half)


def _widens_into_half(node: ir.Node) -> bool:
    """A Cast to half precision from anything but float32 and the half types (whose Cast
    from float32 is bypassed instead)."""
    if node.op_type != "Cast" or node.domain not in ("", "ai.onnx"):
        return False
    source = _dtype(node.inputs[0])
    return (_half(node.outputs[0]) and source is not None and source not in _HALF
            and source != _FLOAT)


def _may_apply(model) -> bool:
    """Any half-precision value: a node's output, a graph input or an initializer."""
    graph = model.graph
    return (any(_half(v) for n in graph for v in n.outputs)
            or any(_half(v) for v in graph.inputs)
            or any(_half(v) for v in graph.initializers.values()))


@register_pass("half precision computed in float32", EXTENDED, applies=_may_apply)
def _half_in_float32(ctx: OptimizerContext) -> int:
    """Find the region (nodes the module docstring describes, in graph order), then widen
    its inputs from outside, its constants and its outputs, and cast back at its edges."""
    model = ctx.model
    graph = model.graph
    opsets = model.opsets
    nodes = model.nodes        # topological
    consts = model.const_names
    region: set[ir.Node] = set()
    for node in nodes:
        if id(node) in ctx.protected:
            continue
        if _widens_into_half(node):
            # Cast(int/double -> half) feeding widened nodes: it casts to float32 instead
            if any(id(u) not in ctx.protected and _convertible(u, opsets)
                   for u, _ in node.outputs[0].uses()):
                region.add(node)
            continue
        if not _convertible(node, opsets):
            continue
        ins = [v for v in node.inputs if _half(v)]
        if any(_half(v) for v in node.outputs):
            region.add(node)
        elif ins and all(v.producer() in region or v.name in consts for v in ins):
            region.add(node)
    if not region:
        return 0

    graph_outputs = {v: k for k, v in enumerate(graph.outputs)}
    widened: dict[ir.Value, ir.Value] = {}     # an outside half value -> its float32 twin
    changes = 0

    def float_twin(v: ir.Value, reader: ir.Node) -> ir.Value:
        twin = widened.get(v)
        if twin is not None:
            return twin
        src = v.producer()
        if v.name in consts and v.const_value is not None:
            twin = _widened_constant(graph, v)
        elif (src is not None and src.op_type == "Cast" and src.domain in ("", "ai.onnx")
              and _dtype(src.inputs[0]) == _FLOAT):
            twin = src.inputs[0]     # the model's float -> half Cast: read its input
        else:
            cast = _cast(graph, v, _FLOAT, "ToFloat", "float")
            twin = cast.outputs[0]
            graph.insert_before(reader, cast)
        widened[v] = twin
        return twin

    for node in nodes:
        if node not in region:
            continue
        for k, v in enumerate(node.inputs):
            if _half(v) and v.producer() not in region:
                node.replace_input_with(k, float_twin(v, node))
                changes += 1
        if node.op_type == "Cast":
            node.attributes["to"] = ir.AttrInt64("to", _FLOAT.value)
        for out in node.outputs:
            if _half(out):
                changes += _narrow_readers(graph, node, out, region, graph_outputs)
    if changes:
        remove_unused(model.ir)
    return changes


_LAZY_BYTES = 1 << 20
"""A widened constant of at least this many bytes is computed when read (by the kernel that
packs it), not held: BERT-base's float32 copies of its fp16 weights were 417 MiB kept for the
session's life beside the kernels' packed copies (peak RSS 1.3x onnxruntime's)."""


def _widened_constant(graph: ir.Graph, v: ir.Value) -> ir.Value:
    """An initializer holding half constant ``v`` in float32 (a lazy tensor when large), marked
    with the type it was stored in (for the fusions' constant matching)."""
    src = v.const_value
    shape = ir.Shape(src.shape.numpy())
    if math.prod(shape.numpy()) * 4 >= _LAZY_BYTES:
        def widen(src: ir.TensorProtocol = src) -> ir.TensorProtocol:
            return ir.tensor(np.asarray(src.numpy()).astype(np.float32))

        name = _fresh(graph, f"{v.name}_float")
        twin = ir.Value(name=name, shape=shape, type=ir.TensorType(_FLOAT),
                        const_value=ir.LazyTensor(widen, _FLOAT, shape, name=name))
        graph.register_initializer(twin)
    else:
        twin = _initializer(graph, np.asarray(src.numpy()).astype(np.float32),
                            f"{v.name}_float")
    twin.meta[STORED_AS] = v.type.dtype
    return twin


def _narrow_readers(graph: ir.Graph, node: ir.Node, out: ir.Value, region: set[ir.Node],
                    graph_outputs: dict[ir.Value, int]) -> int:
    """Make ``out`` (a half value ``node`` produces) float32; readers outside the region and a
    graph output get the half value back through one Cast, Casts to float32 read it as is."""
    half = out.type.dtype
    out.type = ir.TensorType(_FLOAT)
    outside = [(user, k) for user, k in out.uses() if user not in region]
    is_output = out in graph_outputs   # (before a bypassed Cast makes it one, in float)
    back: ir.Value | None = None
    changes = 1
    for user, k in outside:
        if (user.op_type == "Cast" and user.domain in ("", "ai.onnx")
                and user.attributes.get_int("to") == _FLOAT.value and user.graph is graph):
            # the model's half -> float Cast: dropped, its readers read the float value
            # (onnxruntime drops the float -> half -> float pair)
            _bypass(graph, user, out, graph_outputs)
            changes += 1
            continue
        if back is None:
            back = _cast_back(graph, node, out, half)
        user.replace_input_with(k, back)
        changes += 1
    if is_output:
        if back is None:
            back = _cast_back(graph, node, out, half)
        name = out.name
        out.name = _fresh(graph, f"{name}_float")
        back.name = name
        k = graph_outputs.pop(out)
        graph.outputs[k] = back
        graph_outputs[back] = k
        changes += 1
    return changes


def _bypass(graph: ir.Graph, cast: ir.Node, out: ir.Value,
            graph_outputs: dict[ir.Value, int]) -> None:
    """Drop ``cast`` (now float -> float) reading ``out``: its readers read ``out``, and a
    graph output it names becomes ``out`` under that name (``out`` already a graph output
    under another name: the Cast stays, a copy between the two)."""
    y = cast.outputs[0]
    k = graph_outputs.get(y)
    if k is None:
        y.replace_all_uses_with(out)
        graph.remove(cast, safe=True)   # (safe: no longer a reader of ``out`` either)
        return
    if out in graph_outputs:
        cast.replace_input_with(0, out)
        return
    graph.outputs[k] = out
    y.replace_all_uses_with(out)
    name, y.name = y.name, _fresh(graph, f"{y.name}_dropped")
    graph.remove(cast, safe=True)
    del graph_outputs[y]
    out.name = name
    graph_outputs[out] = k


def _cast(graph: ir.Graph, v: ir.Value, to: ir.DataType, node_suffix: str,
          value_suffix: str) -> ir.Node:
    """A new (not yet inserted) ``Cast(v, to)`` with fresh names after ``v``'s."""
    cast = ir.Node("", "Cast", [v], attributes=[ir.AttrInt64("to", to.value)], num_outputs=1,
                   name=_fresh(graph, f"{v.name}/{node_suffix}"))
    out = cast.outputs[0]
    out.name = _fresh(graph, f"{v.name}_{value_suffix}")
    out.type, out.shape = ir.TensorType(to), v.shape
    return cast


def _cast_back(graph: ir.Graph, node: ir.Node, out: ir.Value, half: ir.DataType) -> ir.Value:
    """``out`` cast back to ``half``, right after its producer ``node``."""
    cast = _cast(graph, out, half, "ToHalf", "half")
    graph.insert_after(node, cast)
    return cast.outputs[0]
