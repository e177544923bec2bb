"""Transformer fusions of the extended level, into onnxruntime's com.microsoft contrib ops.

The matching is onnxscript's (``onnxscript.rewriter.ort_fusions``, which reimplements
onnxruntime's transformer fusions on onnx-ir models), run rule set by rule set in a fixed order
rather than through ``fuse_xformers`` (that also runs onnxscript's own optimizer and shape
inference over the whole model). A few rules onnxscript lacks are added here:

* LayerNormalization from its decomposed form with ``ReduceMean`` axes given as an attribute
  (opsets < 18) and at opsets < 17, where onnxruntime keeps a LayerNormalization kernel in the
  ONNX domain;
* FastGelu for the tanh-GELU orders torch exports (GPT-2's ``0.5 * x * (1 + tanh(...))``) and
  ``Add(bias) -> FastGelu`` into FastGelu's bias input;
* onnxruntime's BERT mask handling: an Attention whose additive bias is
  ``Unsqueeze((1 - Cast(mask)) * c)`` takes the raw 2-D mask as ``mask_index`` (int32) with
  ``mask_filter_value = c`` instead;
* the fusions' helper constants (``Concat`` of the Q/K/V weights and biases, ``Constant``
  nodes) become initializers so kernels can prepack them; an intermediate SDPA node that no
  attention rule consumed is expanded back into standard ops.

Passes, in order: LayerNormalization, SimplifiedLayerNormalization (RMSNorm), Gelu/FastGelu,
SkipLayerNormalization/SkipSimplifiedLayerNormalization, attention (MultiHeadAttention, then
Attention where the Q/K/V projections share an input), BiasGelu, FusedMatMul.
"""

from __future__ import annotations

import functools
import logging
import math

import numpy as np
import onnx_ir as ir

from ..graph.model import Model
from ..graph.nodes import all_nodes
from . import OptimizerContext, register_pass
from ._basic import ir_tensor, remove_unused
from ._rules import apply_rules

logger = logging.getLogger(__name__)

EXTENDED = 2

_MS = "com.microsoft"
_FUSION_DOMAIN = "ai.onnxruntime._fusion"  # onnxscript's intermediate (SDPA, ...) ops
_FLOATS = (ir.DataType.FLOAT, ir.DataType.DOUBLE)


def _opset(model: ir.Model) -> int:
    ops = model.opset_imports
    return int(ops.get("", ops.get("ai.onnx", 1)))


def _apply(model: ir.Model, rules) -> int:
    """Apply an onnxscript rule set (or a ``fuse_*`` function) and return its count; each rule
    is tried only at nodes of its pattern's output op type (:func:`._rules.apply_rules`)."""
    return apply_rules(model, rules)


def _finish(model: ir.Model, changes: int) -> int:
    """After a pass that changed the graph: declare com.microsoft, drop what became unused
    (the separate Q/K/V weights once packed, mask arithmetic, ...)."""
    if changes:
        if any(n.domain == _MS for n in all_nodes(model.graph)):
            model.opset_imports.setdefault(_MS, 1)
        remove_unused(model)
    return changes


def _const(value: ir.Value | None) -> np.ndarray | None:
    if value is None or value.const_value is None:
        return None
    try:
        return value.const_value.numpy()
    except Exception:  # noqa: BLE001 - external data not available
        return None


def _scalar(value: ir.Value | None) -> float | None:
    arr = _const(value)
    if arr is None or arr.size != 1:
        return None
    return float(arr.reshape(()))


# --------------------------------------------------------------------------------------------
# LayerNormalization
# --------------------------------------------------------------------------------------------


@functools.cache
def _layer_norm_rules():
    from onnxscript.rewriter import pattern

    class LayerNormAnyAxes(pattern.RewriteRuleClassBase):
        """ReduceMean/Sub/Pow|Mul/ReduceMean/Add/Sqrt/Div|Reciprocal-Mul/Mul(scale)[/Add(bias)]
        with the reduction axes as an input (opset >= 18) or an attribute (older opsets)."""

        def __init__(self, name: str, with_bias: bool, scale_first: bool, bias_first: bool):
            super().__init__(name)
            self._with_bias = with_bias
            self._scale_first = scale_first
            self._bias_first = bias_first

        def pattern(self, op, x, scale, bias, epsilon):
            mean = op.ReduceMean(x, _allow_other_inputs=True, _allow_other_attributes=True,
                                 _outputs=["mean"])
            d = op.Sub(x, mean)
            dd = pattern.OrValue([op.Pow(d, 2.0), op.Mul(d, d)])
            var = op.ReduceMean(dd, _allow_other_inputs=True, _allow_other_attributes=True,
                                _outputs=["var"])
            std = op.Sqrt(op.Add(var, epsilon))
            normalized = pattern.OrValue([op.Div(d, std), op.Mul(d, op.Reciprocal(std))])
            if self._with_bias:
                scaled = pattern.OrValue([op.Mul(normalized, scale),
                                          op.Mul(scale, normalized)])
                return op.Add(bias, scaled) if self._bias_first else op.Add(scaled, bias)
            return op.Mul(scale, normalized) if self._scale_first else op.Mul(normalized, scale)

        def check(self, context, x, scale, epsilon, mean, var, bias=None, **_):
            result = pattern.MatchResult()
            params = (scale, bias) if self._with_bias else (scale,)
            self._epsilon = _check_norm(result, x, (mean, var), epsilon, params)
            return result

        def rewrite(self, op, x, scale, bias=None, **_):
            args = (x, scale, bias) if self._with_bias else (x, scale)
            return op.LayerNormalization(*args, axis=-1, epsilon=self._epsilon,
                                         stash_type=int(x.dtype))

    return pattern.RewriteRuleSet(
        [LayerNormAnyAxes.rule(f"LayerNormBias{int(f)}", with_bias=True, scale_first=False,
                               bias_first=f) for f in (False, True)]
        + [LayerNormAnyAxes.rule(f"LayerNorm{int(f)}", with_bias=False, scale_first=f,
                                 bias_first=False) for f in (False, True)])


def _check_norm(result, x: ir.Value, reductions, epsilon: ir.Value, params) -> float | None:
    """The checks a decomposed (RMS) layer norm's match must pass, failing ``result`` (an
    onnxscript ``MatchResult``) at the first that does not: float input of known rank, every
    ReduceMean over the last axis only, a constant scalar epsilon (returned), ``params``
    (scale, bias) 1-D of the input's type and length."""
    if x.dtype not in _FLOATS:
        result.fail("input is not float or double", x)
        return None
    if x.shape is None:
        result.fail("input rank unknown", x)
        return None
    rank = x.shape.rank()
    for v in reductions:
        if not _reduces_last_axis(v.producer(), rank):
            result.fail("ReduceMean is not over the last axis only", v)
            return None
    eps = _scalar(epsilon)
    if eps is None:
        result.fail("epsilon is not a constant scalar", epsilon)
        return None
    d = x.shape[rank - 1]
    for p in params:
        if p.dtype != x.dtype or p.shape is None or p.shape.rank() != 1:
            result.fail("scale/bias is not 1-D of the input's type", p)
            return None
        if isinstance(d, int) and p.shape[0] != d:
            result.fail("scale/bias length is not the normalized size", p)
            return None
    return eps


def _reduces_last_axis(node: ir.Node, rank: int) -> bool:
    if int(node.attributes.get_int("keepdims", 1)) != 1:
        return False
    axes = None
    if "axes" in node.attributes:
        axes = list(node.attributes.get_ints("axes"))
    elif len(node.inputs) > 1 and node.inputs[1] is not None:
        arr = _const(node.inputs[1])
        if arr is None:
            return False
        axes = [int(a) for a in arr.reshape(-1)]
    if axes is None or len(axes) != 1:
        return False
    return axes[0] in (-1, rank - 1)


def _normalization_candidate(model: Model) -> bool:
    """A necessary condition for the LayerNorm and RMSNorm patterns: a ReduceMean over a
    square (Pow or Mul) or one whose mean is subtracted. A global average pool spelled as
    ReduceMean (CNN exports) is neither, so the rules, and onnxscript, are not loaded."""
    for node in all_nodes(model.graph):
        if node.op_type != "ReduceMean" or not node.inputs or node.inputs[0] is None:
            continue
        src = node.inputs[0].producer()
        if src is not None and src.op_type in ("Pow", "Mul"):
            return True
        if any(use.op_type == "Sub" for use, _ in node.outputs[0].uses()):
            return True
    return False


@register_pass("LayerNormalization fusion", EXTENDED,
               requires={"ReduceMean"}, applies=_normalization_candidate)
def _layer_norm_fusion(ctx: OptimizerContext) -> int:
    from onnxscript.rewriter.rules.fusion._layer_norm import LayerNormBiasFusion

    model = ctx.model.ir
    n = _apply(model, _layer_norm_rules())
    if n:
        from onnxscript.rewriter import pattern

        n += _apply(model, pattern.RewriteRuleSet([LayerNormBiasFusion.rule()]))
    return _finish(model, n)


@functools.cache
def _rms_norm_rules():
    from onnxscript.rewriter import pattern

    class RmsNormAnyAxes(pattern.RewriteRuleClassBase):
        """Pow|Mul/ReduceMean/Add/Sqrt then Div(x, .), Reciprocal or Div(1, .) and Mul(x, .),
        then Mul(scale) in either order, with the reduction axes as an input or an attribute:
        the spellings onnxscript's RMSNorm rule does not take (T5's TorchScript export writes
        Div(1, Sqrt) and, at opset 17, ReduceMean's axes as an attribute; 12 unfused RMSNorms
        of seven ops each in t5-small)."""

        def __init__(self, name: str, scale_first: bool):
            super().__init__(name)
            self._scale_first = scale_first

        def pattern(self, op, x, scale, epsilon, one):
            sq = pattern.OrValue([op.Pow(x, 2.0), op.Mul(x, x)])
            ms = op.ReduceMean(sq, _allow_other_inputs=True, _allow_other_attributes=True,
                               _outputs=["ms"])
            rms = op.Sqrt(op.Add(ms, epsilon))
            inv = pattern.OrValue([op.Reciprocal(rms), op.Div(one, rms)])
            normalized = pattern.OrValue([op.Div(x, rms), op.Mul(x, inv), op.Mul(inv, x)])
            return op.Mul(scale, normalized) if self._scale_first else op.Mul(normalized, scale)

        def check(self, context, x, scale, epsilon, ms, one=None, **_):
            result = pattern.MatchResult()
            if one is not None and _scalar(one) != 1.0:
                return result.fail("the numerator is not 1", one)
            self._epsilon = _check_norm(result, x, (ms,), epsilon, (scale,))
            return result

        def rewrite(self, op, x, scale, **_):
            return op.SimplifiedLayerNormalization(x, scale, axis=-1, epsilon=self._epsilon,
                                                   stash_type=int(x.dtype))

    return pattern.RewriteRuleSet(
        [RmsNormAnyAxes.rule(f"RmsNormAnyAxes{int(f)}", scale_first=f) for f in (False, True)])


@register_pass("SimplifiedLayerNormalization (RMSNorm) fusion", EXTENDED,
               requires={"ReduceMean"}, applies=_normalization_candidate)
def _rms_norm_fusion(ctx: OptimizerContext) -> int:
    from onnxscript.rewriter.ort_fusions.rms_normalization import fuse_rms_normalization

    model = ctx.model.ir
    if _opset(model) >= 18:   # the rule matches these attributes literally: spell out defaults
        for node in model.graph:
            if node.op_type == "ReduceMean" and node.domain in ("", "ai.onnx"):
                for key in ("keepdims", "noop_with_empty_axes"):
                    if key not in node.attributes:
                        node.attributes[key] = ir.AttrInt64(key, 1 if key == "keepdims" else 0)
    n = _apply(model, fuse_rms_normalization)
    return _finish(model, n + _apply(model, _rms_norm_rules()))


# --------------------------------------------------------------------------------------------
# Gelu / FastGelu / BiasGelu
# --------------------------------------------------------------------------------------------


@functools.cache
def _fast_gelu_rules():
    from onnxscript.rewriter import pattern

    c = math.sqrt(2.0 / math.pi)

    class FastGeluAnyOrder(pattern.RewriteRuleClassBase):
        """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) in the orders exporters
        write it (``form`` picks where the 0.5 and the x multiply in)."""

        def __init__(self, name: str, form: int, swap: bool):
            super().__init__(name)
            self._form = form
            self._swap = swap

        def pattern(self, op, x):
            cube = pattern.OrValue([op.Pow(x, 3.0), op.Mul(op.Mul(x, x), x),
                                    op.Mul(x, op.Mul(x, x))])
            t = pattern.OrValue([op.Mul(0.044715, cube), op.Mul(cube, 0.044715)])
            u = pattern.OrValue([op.Add(x, t), op.Add(t, x)])
            v = pattern.OrValue([op.Mul(c, u), op.Mul(u, c)])
            th = op.Tanh(v)
            one_plus = pattern.OrValue([op.Add(th, 1.0), op.Add(1.0, th)])
            if self._form == 0:   # (0.5 * x) * (1 + tanh)
                a = pattern.OrValue([op.Mul(0.5, x), op.Mul(x, 0.5)])
                b = one_plus
            elif self._form == 1:   # x * (0.5 * (1 + tanh))
                a = x
                b = pattern.OrValue([op.Mul(0.5, one_plus), op.Mul(one_plus, 0.5)])
            else:   # (x * (1 + tanh)) * 0.5
                a = pattern.OrValue([op.Mul(x, one_plus), op.Mul(one_plus, x)])
                b = 0.5
            return op.Mul(b, a) if self._swap else op.Mul(a, b)

        def rewrite(self, op, x, **_):
            return op.FastGelu(x, _domain=_MS)

    class FastGeluBias(pattern.RewriteRuleClassBase):
        def pattern(self, op, x, bias):
            return op.FastGelu(pattern.OrValue([op.Add(x, bias), op.Add(bias, x)]), _domain=_MS)

        def check(self, context, x, bias, **_):
            result = pattern.MatchResult()
            if bias.const_value is None or bias.shape is None or bias.shape.rank() != 1:
                return result.fail("bias is not a constant 1-D tensor", bias)
            if x.shape is None or x.shape.rank() < 1 or x.shape[x.shape.rank() - 1] != \
                    bias.shape[0]:
                return result.fail("bias length is not the input's last dimension", bias)
            if x.dtype != bias.dtype:
                return result.fail("bias type differs", bias)
            return result

        def rewrite(self, op, x, bias, **_):
            return op.FastGelu(x, bias, _domain=_MS)

    gelu = pattern.RewriteRuleSet([FastGeluAnyOrder.rule(f"FastGelu{f}{int(w)}", form=f, swap=w)
                                   for f in range(3) for w in (False, True)])
    bias = pattern.RewriteRuleSet([FastGeluBias.rule()])
    return gelu, bias


@register_pass("Gelu/FastGelu fusion", EXTENDED,
               requires={"Erf", "Tanh"})
def _gelu_fusion(ctx: OptimizerContext) -> int:
    from onnxscript.rewriter.ort_fusions.erfgelu import fuse_erfgelu
    from onnxscript.rewriter.ort_fusions.gelu import fuse_gelu

    model = ctx.model.ir
    fast, _ = _fast_gelu_rules()
    n = _apply(model, fuse_erfgelu) + _apply(model, fuse_gelu) + _apply(model, fast)
    return _finish(model, n)


@register_pass("BiasGelu fusion", EXTENDED,
               requires={"Gelu", "FastGelu"})
def _bias_gelu_fusion(ctx: OptimizerContext) -> int:
    from onnxscript.rewriter.ort_fusions.bias_gelu import bias_gelu_rules

    model = ctx.model.ir
    _, fast_bias = _fast_gelu_rules()
    n = _apply(model, bias_gelu_rules) + _apply(model, fast_bias)
    return _finish(model, n)


# --------------------------------------------------------------------------------------------
# SkipLayerNormalization
# --------------------------------------------------------------------------------------------


@register_pass("SkipLayerNormalization fusion", EXTENDED,
               requires={"LayerNormalization", "SimplifiedLayerNormalization"})
def _skip_layer_norm_fusion(ctx: OptimizerContext) -> int:
    from onnxscript.rewriter.ort_fusions.skip_normalization import (
        fuse_skip_layer_normalization,
        fuse_skip_rms_normalization,
    )

    model = ctx.model.ir
    for node in model.graph:   # the rules match axis=-1 literally: spell out the default
        if node.op_type in ("LayerNormalization", "SimplifiedLayerNormalization") and \
                node.domain in ("", "ai.onnx") and "axis" not in node.attributes:
            node.attributes["axis"] = ir.AttrInt64("axis", -1)
    n = _apply(model, fuse_skip_layer_normalization) + _apply(model, fuse_skip_rms_normalization)
    if n:
        _drop_unused_outputs(model.graph)
    return _finish(model, n)


def _drop_unused_outputs(graph: ir.Graph) -> None:
    """SkipLayerNormalization's rewrite declares all four outputs: unused trailing ones are
    left unnamed so kernels skip them (onnxruntime computes only what is consumed)."""
    graph_outputs = {id(v) for v in graph.outputs}
    for node in graph:
        if node.domain != _MS or node.op_type not in ("SkipLayerNormalization",
                                                      "SkipSimplifiedLayerNormalization"):
            continue
        for out in node.outputs[1:]:
            if not out.uses() and id(out) not in graph_outputs:
                out.name = ""


# --------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------


@register_pass("attention fusion", EXTENDED,
               requires={"Softmax"})
def _attention_fusion(ctx: OptimizerContext) -> int:
    from onnxscript.rewriter.ort_fusions.attention import fuse_attention
    from onnxscript.rewriter.ort_fusions.mha import fuse_mha1, fuse_mha2
    from onnxscript.rewriter.ort_fusions.mha_bias import fuse_mha_bias
    from onnxscript.rewriter.ort_fusions.mha_scale import fuse_mha_scale
    from onnxscript.rewriter.ort_fusions.sdpa import fuse_sdpa
    from onnxscript.rewriter.ort_fusions.sdpa_via_mha import replace_sdpa_by_mha

    model = ctx.model.ir
    if not any(n.op_type == "Softmax" for n in model.graph):
        return 0
    sdpa = _apply(model, fuse_sdpa)
    if not sdpa:
        return 0
    mha = _apply(model, fuse_mha1) + _apply(model, fuse_mha2)
    if mha:
        _restore_output_ranks(model.graph)
        _apply(model, fuse_mha_scale)
        _rewire_mask_shapes(model.graph)
        _apply(model, fuse_mha_bias)
        _apply(model, fuse_attention)
    mha += _apply(model, replace_sdpa_by_mha)
    _decompose_leftover_sdpa(model.graph)
    remove_unused(model)
    _fold_constant_nodes(model.graph)
    _attention_mask_index(model.graph)
    if not mha:   # (else _finish removes what became unused)
        remove_unused(model)
    return _finish(model, mha)


def _restore_output_ranks(graph: ir.Graph) -> None:
    """onnxscript's MHA rule also swallows a final Reshape to ``[B*S, D]`` (GPT-2 feeds its
    Gemm so): give such a node a 3-D output and reshape it back."""
    graph_outputs = {id(v) for v in graph.outputs}
    for node in list(graph):
        if node.domain != _MS or node.op_type != "MultiHeadAttention":
            continue
        out = node.outputs[0]
        if out.shape is None or out.shape.rank() == 3:
            continue
        d = out.shape[out.shape.rank() - 1]
        if out.shape.rank() != 2 or not isinstance(d, int):
            raise ValueError(f"MultiHeadAttention output {out.name} has shape {out.shape}")
        uses = list(out.uses())
        name = out.name
        out.name = f"{name}_3d"
        target = ir.Value(name=f"{name}_shape2d", shape=ir.Shape([2]),
                          type=ir.TensorType(ir.DataType.INT64),
                          const_value=ir.tensor(np.array([-1, d], np.int64)))
        graph.register_initializer(target)
        reshape = ir.node("Reshape", [out, target], name=f"{node.name}/reshape2d")
        new = reshape.outputs[0]
        new.name, new.shape, new.type = name, out.shape, out.type
        out.shape = None
        graph.insert_after(node, reshape)
        for user, index in uses:
            user.replace_input_with(index, new)
        if id(out) in graph_outputs:
            for i, v in enumerate(graph.outputs):
                if v is out:
                    graph.outputs[i] = new


def _rewire_mask_shapes(graph: ir.Graph) -> None:
    """The MHA rewrite broadcasts a ``[B, 1, 1, T]`` mask to ``[B, 1, S, T]`` with
    ``Shape(query, 1, 2)``; that extra use of the query keeps the Q bias from fusing into the
    node. Take S from the projection's input instead (same sequence axis)."""
    for node in graph:
        if node.domain != _MS or node.op_type != "MultiHeadAttention" or len(node.inputs) < 6:
            continue
        expand = _producer(node.inputs[5], "Expand")
        concat = _producer(expand.inputs[1], "Concat") if expand is not None else None
        if concat is None:
            continue
        query = node.inputs[0]
        src = query
        add = _producer(src, "Add")
        if add is not None:
            src = next((i for i in add.inputs if _producer(i, "MatMul") is not None), None)
        mm = _producer(src, "MatMul")
        if mm is None or mm.inputs[0].shape is None or mm.inputs[0].shape.rank() != 3:
            continue
        for v in concat.inputs:
            shape = _producer(v, "Shape")
            if shape is not None and shape.inputs[0] is query:
                shape.replace_input_with(0, mm.inputs[0])


def _decompose_leftover_sdpa(graph: ir.Graph) -> None:
    """An SDPA no rule turned into MultiHeadAttention goes back to MatMul/Softmax/MatMul."""
    for node in list(graph):
        if node.domain != _FUSION_DOMAIN:
            continue
        if node.op_type != "SDPA":
            raise ValueError(f"unconsumed intermediate fusion op {node.op_type}")
        q, k, v = node.inputs[0], node.inputs[1], node.inputs[2]
        mask = node.inputs[3] if len(node.inputs) > 3 else None
        fmt = node.attributes.get_string("key_format", "BHSd")
        scale = node.attributes.get_float("scale", None)
        if scale is None:
            dh = q.shape[q.shape.rank() - 1] if q.shape is not None else None
            if not isinstance(dh, int):
                raise ValueError("SDPA without scale and with an unknown head size")
            scale = 1.0 / math.sqrt(dh)
        perm = [0, 1, 3, 2] if fmt == "BHSd" else [0, 2, 3, 1]
        new: list[ir.Node] = []

        def add(op_type, inputs, _new=new, _prefix=node.name, **attrs):
            n = ir.node(op_type, inputs, attributes=attrs, name=f"{_prefix}/{op_type}")
            _new.append(n)
            return n.outputs[0]

        kt = add("Transpose", [k], perm=perm)
        s = add("MatMul", [q, kt])
        sc = ir.Value(name=f"{node.name}_scale", const_value=ir.tensor(
            np.asarray(scale, dtype=q.dtype.numpy() if q.dtype else np.float32)))
        sc.shape = ir.Shape([])
        sc.type = ir.TensorType(q.dtype or ir.DataType.FLOAT)
        graph.register_initializer(sc)
        s = add("Mul", [s, sc])
        if mask is not None:
            s = add("Add", [s, mask])
        p = add("Softmax", [s], axis=-1)
        out = add("MatMul", [p, v])
        graph.insert_before(node, new)
        old = node.outputs[0]
        out.name, out.shape, out.type = old.name, old.shape, old.type
        old.replace_all_uses_with(out, replace_graph_outputs=True)
        graph.remove(node, safe=True)


def _fold_constant_nodes(graph: ir.Graph) -> None:
    """Constant nodes, and Concats of constants (the fused Q/K/V weights and biases), become
    initializers so contrib kernels see (and prepack) them as constants."""
    initializers = graph.initializers
    for node in list(graph):
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Constant", "Concat"):
            continue
        out = node.outputs[0]
        name = out.name
        base, k = name, 0
        while name in initializers and initializers[name] is not out:
            k += 1
            name = f"{base}_{k}"
        if node.op_type == "Constant":
            if "value" not in node.attributes:
                arr = None
                for key in ("value_ints", "value_floats", "value_int", "value_float"):
                    if key in node.attributes:
                        a = node.attributes[key].value
                        dt = np.int64 if "int" in key else np.float32
                        arr = np.asarray(list(a) if isinstance(a, (list, tuple)) or
                                         hasattr(a, "__len__") else a, dtype=dt)
                if arr is None:
                    continue
            else:
                arr = node.attributes["value"].value.numpy()
            tensor = ir_tensor(arr, name)
        else:
            if any(v is not None and v.name in graph.inputs for v in node.inputs):
                continue
            axis = node.attributes.get_int("axis", 0)
            tensor = _lazy_concat([None if v is None else v.const_value for v in node.inputs],
                                  axis, name)
            if tensor is None:
                parts = [_const(v) for v in node.inputs]
                if any(p is None for p in parts):
                    continue
                tensor = ir_tensor(np.concatenate(parts, axis=axis), name)
        value = ir.Value(name=name, shape=ir.Shape(tensor.shape),
                         type=ir.TensorType(tensor.dtype), const_value=tensor)
        out.replace_all_uses_with(value, replace_graph_outputs=True)
        graph.remove(node, safe=True)
        graph.register_initializer(value)


def _lazy_concat(sources: list, axis: int, name: str) -> ir.LazyTensor | None:
    """The concatenation of constants some of which are still in the model file (see
    ``onnxplex.graph.model.LazyConst``), as a tensor that concatenates when read and is held by no
    one; None when none of them is lazy or they do not concatenate (read them then)."""
    if not any(isinstance(t, ir.LazyTensor) for t in sources) or any(
            t is None or t.dtype != sources[0].dtype for t in sources):
        return None
    shapes = [tuple(t.shape.numpy()) for t in sources]
    rank = len(shapes[0])
    if rank == 0 or not -rank <= axis < rank or any(len(s) != rank for s in shapes):
        return None
    ax = axis % rank
    if any(s[:ax] + s[ax + 1:] != shapes[0][:ax] + shapes[0][ax + 1:] for s in shapes):
        return None
    shape = (*shapes[0][:ax], sum(s[ax] for s in shapes), *shapes[0][ax + 1:])
    return ir.LazyTensor(
        lambda: ir.tensor(np.concatenate([t.numpy() for t in sources], axis=axis)),
        sources[0].dtype, ir.Shape(shape), name=name)


def _producer(v: ir.Value | None, op_type: str) -> ir.Node | None:
    if v is None:
        return None
    p = v.producer()
    if p is None or p.op_type != op_type or p.domain not in ("", "ai.onnx"):
        return None
    return p


def _raw_mask(bias: ir.Value) -> tuple[ir.Value, float] | None:
    """``Unsqueeze((1 - Cast(mask)) * c, [1, 2])`` (optionally Expanded) -> (mask, c)."""
    node = _producer(bias, "Expand")
    if node is not None:
        bias = node.inputs[0]
    unsq = _producer(bias, "Unsqueeze")
    if unsq is None:
        return None
    axes = (list(unsq.attributes.get_ints("axes")) if "axes" in unsq.attributes
            else _const(unsq.inputs[1]) if len(unsq.inputs) > 1 else None)
    if axes is None or sorted(int(a) for a in np.asarray(axes).reshape(-1)) != [1, 2]:
        return None
    mul = _producer(unsq.inputs[0], "Mul")
    if mul is None:
        return None
    for a, b in ((0, 1), (1, 0)):
        c = _scalar(mul.inputs[b])
        sub = _producer(mul.inputs[a], "Sub")
        if c is None or sub is None or _scalar(sub.inputs[0]) != 1.0:
            continue
        cast = _producer(sub.inputs[1], "Cast")
        src = cast.inputs[0] if cast is not None else sub.inputs[1]
        if src.shape is None or src.shape.rank() != 2 or c > -1.0:
            return None
        if src.dtype not in (ir.DataType.INT64, ir.DataType.INT32, ir.DataType.BOOL,
                             ir.DataType.FLOAT):
            return None
        return src, c
    return None


def _attention_mask_index(graph: ir.Graph) -> None:
    """onnxruntime's BERT mask handling: an Attention whose additive bias is the usual
    extended mask takes the 2-D mask as mask_index (int32) with mask_filter_value."""
    casts: dict[int, ir.Value] = {}
    for node in list(graph):
        if node.domain != _MS or node.op_type != "Attention" or len(node.inputs) < 6:
            continue
        if node.inputs[3] is not None or node.inputs[4] is not None or node.inputs[5] is None:
            continue
        found = _raw_mask(node.inputs[5])
        if found is None:
            continue
        src, c = found
        idx = casts.get(id(src))
        if idx is None:
            if src.dtype == ir.DataType.INT32:
                idx = src
            else:
                cast = ir.node("Cast", [src], attributes={"to": ir.DataType.INT32},
                               name=f"{src.name}/mask_index_cast")
                idx = cast.outputs[0]
                idx.name = f"{src.name}_mask_index"
                idx.dtype = ir.DataType.INT32
                idx.shape = src.shape
                first = next(n for n in graph if any(i is src for i in n.inputs)) \
                    if src.producer() is None else src.producer()
                if src.producer() is None:
                    graph.insert_before(first, cast)
                else:
                    graph.insert_after(first, cast)
            casts[id(src)] = idx
        inputs = list(node.inputs)
        inputs[3], inputs[5] = idx, None
        while inputs and inputs[-1] is None:
            inputs.pop()
        for i, v in enumerate(inputs):
            node.replace_input_with(i, v)
        node.resize_inputs(len(inputs))
        node.attributes["mask_filter_value"] = ir.AttrFloat32("mask_filter_value", float(c))


# --------------------------------------------------------------------------------------------
# FusedMatMul
# --------------------------------------------------------------------------------------------


def _may_fuse_matmul(model) -> bool:
    """A necessary condition for onnxscript's FusedMatMul rules (a Transpose into a MatMul or
    FusedMatMul, a Div or Transpose of its output) to match anywhere: a small model with a
    plain MatMul (a classifier's, an RNN's head) skips the rule run and its setup."""
    for node in all_nodes(model.graph):
        if node.op_type not in ("MatMul", "FusedMatMul"):
            continue
        if any(v is not None and (p := v.producer()) is not None and p.op_type == "Transpose"
               for v in node.inputs):
            return True
        if any(user.op_type in ("Div", "Transpose") for out in node.outputs
               for user, _ in out.uses()):
            return True
    return False


@register_pass("FusedMatMul fusion", EXTENDED,
               requires={"MatMul", "FusedMatMul"}, applies=_may_fuse_matmul)
def _fused_matmul_fusion(ctx: OptimizerContext) -> int:
    model = ctx.model.ir
    n = _apply(model, _fused_matmul_rules())
    return _finish(model, n)


@functools.cache
def _fused_matmul_rules():
    """onnxscript's FusedMatMul rule set, built once (its function builds it anew per call)."""
    from onnxscript.rewriter.ort_fusions.fused_matmul_rule_sets import fused_matmul_rule_sets

    return fused_matmul_rule_sets()
