"""Fusion patterns the planner looks for in a claimed group before lowering it.

* QDQ groups: DequantizeLinear(x), DequantizeLinear(w) [, bias] -> Conv / MatMul / Gemm
  [-> Relu] -> QuantizeLinear run as one quantized op (``pqs8_qc8w_gemm``); a group that is
  QDQ-shaped but does not match records why not;
* dynamic int8 chains: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(x_scale *
  w_scale) [-> Add(bias)], or DynamicQuantizeLinear -> MatMulIntegerToFloat, with int8 weights
  symmetric per channel (``qp8_f32_qc8w_gemm``); collapsed into one Kleidi call only when that
  kernel runs here (the own path runs the ONNX ops, exactly);
* activations (Relu, Clip, Sigmoid, ...) that are the sole reader of a conv, gemm or batch
  norm result, or a SiLU (``Sigmoid(t)`` and ``Mul(t, Sigmoid(t))`` its only two readers, run
  as ``Swish``): applied as its epilogue.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto as TP

from onnxplex import NodeView, ValueInfo

from ._ops_base import Activation
from ._support import MS, s_attr


def act_of(node: NodeView) -> Activation | None:
    """The activation a standalone node applies, or None when it is not one."""
    op = node.op_type
    if node.domain == MS and op == "Gelu":
        return Activation("Gelu")
    if node.domain:
        return None
    if op in ("Relu", "Sigmoid", "Tanh", "HardSwish"):
        return Activation(op)
    if op == "LeakyRelu":
        return Activation(op, (float(node.attr("alpha", 0.01)),))
    if op == "HardSigmoid":
        return Activation(op, (float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))))
    if op == "Elu":
        return Activation(op, (float(node.attr("alpha", 1.0)),))
    if op == "Gelu":
        return Activation("GeluTanh" if s_attr(node, "approximate", "none") == "tanh"
                          else "Gelu")
    if op == "Clip":
        if node.opset < 11:
            lo, hi = float(node.attr("min", -math.inf)), float(node.attr("max", math.inf))
        else:
            bounds = []
            for i, d in ((1, -math.inf), (2, math.inf)):
                v = node.input(i)
                if v is None:
                    bounds.append(d)
                elif v.const is None:
                    return None
                else:
                    bounds.append(float(np.asarray(v.const).reshape(-1)[0]))
            lo, hi = bounds
        return Activation("Clip", (lo, hi))
    return None


def fused_attr_activation(node: NodeView) -> Activation:
    """The ``activation`` attribute of com.microsoft FusedConv / FusedGemm."""
    kind = s_attr(node, "activation")
    if not kind:
        return Activation()
    if node.op_type == "FusedConv":
        p = [float(v) for v in (node.attr("activation_params", None) or ())]
    else:
        p = [float(node.attr(f"activation_{k}", d)) for k, d in (("alpha", math.nan),
                                                                  ("beta", math.nan))]
    defaults = {"LeakyRelu": (0.01,), "HardSigmoid": (0.2, 0.5), "Elu": (1.0,)}
    if kind == "Clip":
        return Activation("Clip", (p[0], p[1]))
    if kind in defaults:
        got = [v for v in p if not math.isnan(v)]
        return Activation(kind, tuple(got[:len(defaults[kind])]) or defaults[kind])
    return Activation(kind)


@dataclass
class QdqMatch:
    """DequantizeLinear(x), DequantizeLinear(w) [, bias] -> op [-> Relu] -> QuantizeLinear."""

    node: NodeView
    dq_x: NodeView
    dq_w: NodeView
    bias: ValueInfo | None
    dq_b: NodeView | None
    relu: NodeView | None
    q: NodeView
    w_axis: int                    # the output-channel axis of the int8 weight


@dataclass
class DynChain:
    """DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(scale) [-> Add(bias)], or
    DynamicQuantizeLinear -> MatMulIntegerToFloat."""

    dql: NodeView
    nodes: tuple[NodeView, ...]
    weight: np.ndarray
    w_scale: np.ndarray
    bias: np.ndarray | None
    output: str


@dataclass
class Epilogue:
    """What runs after a conv / gemm / batch norm inside its op: ``bn`` folded into the conv
    weights, a ``residual`` added, then ``act``; ``members``: the nodes this replaces;
    ``out``: the name the result is stored under."""

    act: Activation
    members: tuple[NodeView, ...]
    out: str
    bn: NodeView | None = None
    residual: ValueInfo | None = None


_EPILOGUE_HOSTS = {("", "Conv"), ("", "Gemm"), ("", "MatMul"), (MS, "FusedConv"),
                   (MS, "FusedGemm"), ("", "BatchNormalization")}


def _foldable_bn(node: NodeView, x: str) -> bool:
    """An inference BatchNormalization of ``x`` with constant parameters."""
    return (node.domain, node.op_type) == ("", "BatchNormalization") and \
        node.input(0).name == x and not int(node.attr("training_mode", 0)) and \
        len([o for o in node.outputs if o is not None]) == 1 and \
        all(node.input(i) is not None and node.input(i).const is not None for i in range(1, 5))


class Patterns:
    """The patterns of one group of nodes (``nodes`` in topological order; ``out_names``: the
    values read outside the group). ``dyn_ok``: the dynamic int8 chains are collapsed."""

    def __init__(self, nodes: Sequence[NodeView], out_names: set[str], dyn_ok: bool) -> None:
        self.nodes, self.out_names = tuple(nodes), out_names
        self.producer: dict[str, NodeView] = {}
        self.readers: dict[str, list[NodeView]] = {}
        for n in self.nodes:
            for o in n.outputs:
                if o is not None:
                    self.producer[o.name] = n
            for name in dict.fromkeys(v.name for v in n.inputs if v is not None):
                self.readers.setdefault(name, []).append(n)
        self.skip: set[int] = set()             # nodes lowered as part of another's op
        self.roots: set[int] = set()            # nodes whose op runs a whole pattern
        self.qdq: dict[int, QdqMatch | str] = {}
        self.epilogues: dict[int, Epilogue] = {}
        self.emit_at: dict[int, NodeView] = {}  # node index -> a root lowered in its place
        self.dyn: dict[int, DynChain] = {}
        self.feeds: dict[int, int] = {}         # DequantizeLinear etc. -> the pattern's root
        self._match(dyn_ok)

    def sole_reader(self, name: str) -> NodeView | None:
        users = self.readers.get(name, [])
        if len(users) != 1 or name in self.out_names:
            return None
        return users[0]

    def _match(self, dyn_ok: bool) -> None:
        for node in self.nodes:
            if node.domain == "" and node.op_type in ("Conv", "MatMul", "Gemm"):
                m = self._match_qdq(node)
                if m is None:
                    continue
                self.qdq[node.index] = m
                if isinstance(m, QdqMatch):
                    self.roots.add(node.index)
                    self.skip.update(n.index for n in (m.q, m.relu) if n is not None)
                    for dq in (m.dq_x, m.dq_w, m.dq_b):
                        if dq is not None:
                            self.feeds[dq.index] = node.index
        for node in self.nodes:
            if node.op_type == "DynamicQuantizeLinear" and not node.domain:
                for chain in self._match_dyn(node):
                    root = chain.nodes[0]
                    self.dyn[root.index] = chain
                    if dyn_ok:
                        self.roots.add(root.index)
                        self.skip.update(n.index for n in chain.nodes[1:])
                        self.feeds[node.index] = root.index
        for node in self.nodes:
            if node.index not in self.skip and node.index not in self.roots:
                self._match_epilogue(node)

    def _match_epilogue(self, node: NodeView) -> None:
        """A conv / gemm / batch norm followed by what can run in its epilogue: (conv only) a
        BatchNormalization folded into the weights and a residual Add of a same-shape tensor,
        then an activation."""
        if (node.domain, node.op_type) not in _EPILOGUE_HOSTS or s_attr(node, "activation"):
            return
        # BatchNorm folds into the weights only when nothing else is added before it
        conv = node.op_type in ("Conv", "FusedConv") and node.input(3) is None
        tail, members, bn, residual = node.outputs[0], [], None, None
        reader = self.sole_reader(tail.name)
        if conv and reader is not None and _foldable_bn(reader, tail.name) and \
                node.input(1) is not None and node.input(1).const is not None:
            bn, tail = reader, reader.outputs[0]
            members.append(bn)
            reader = self.sole_reader(tail.name)
        if conv and reader is not None and \
                (reader.domain, reader.op_type) == ("", "Add") and reader.index not in self.skip:
            names = [v.name if v is not None else None for v in reader.inputs]
            other = reader.input(1 - names.index(tail.name)) if names.count(tail.name) == 1 \
                else None
            out = reader.outputs[0]
            if other is not None and out.shape is not None and out.shape == tail.shape:
                residual, tail = other, out
                members.append(reader)
                reader = self.sole_reader(tail.name)
        act = Activation()
        if reader is not None and reader.index not in self.skip and \
                act_of(reader) is not None and reader.input(0).name == tail.name:
            act, tail = act_of(reader), reader.outputs[0]
            members.append(reader)
        elif reader is None:
            swish = self._swish(tail.name)
            if swish:
                act, tail = Activation("Swish"), swish[1].outputs[0]
                members.extend(swish)
        if not members:
            return
        self.epilogues[node.index] = Epilogue(act, tuple(members), tail.name, bn, residual)
        self.skip.update(m.index for m in members)
        if residual is not None:
            # the residual may be computed after the conv: run the fused op where the Add was
            self.roots.add(node.index)
            self.skip.add(node.index)
            add = next(m for m in members if m.op_type == "Add")
            self.emit_at[add.index] = node

    def _swish(self, name: str) -> tuple[NodeView, NodeView] | None:
        """``(Sigmoid, Mul)`` when ``name``'s only readers are ``s = Sigmoid(name)`` and
        ``Mul(name, s)`` (SiLU, as exported from torch), neither already taken by a pattern."""
        users = self.readers.get(name, [])
        if len(users) != 2 or name in self.out_names:
            return None
        sig = next((u for u in users if (u.domain, u.op_type) == ("", "Sigmoid")), None)
        mul = next((u for u in users if (u.domain, u.op_type) == ("", "Mul")), None)
        if sig is None or mul is None or {sig.index, mul.index} & self.skip:
            return None
        s = sig.outputs[0].name
        ins = sorted(v.name if v is not None else "" for v in mul.inputs)
        if ins != sorted((name, s)) or self.sole_reader(s) is not mul:
            return None
        return sig, mul

    def in_group(self, name: str | None) -> NodeView | None:
        return None if name is None else self.producer.get(name)

    def _match_qdq(self, node: NodeView) -> QdqMatch | str | None:
        """The QDQ group around ``node``; None when its data input is not dequantized; a
        string (why it is not pqs8_qc8w_gemm) when it is QDQ-shaped but does not match."""
        dq_x = self.in_group(node.input(0).name)
        if dq_x is None or dq_x.op_type != "DequantizeLinear" or dq_x.domain:
            return None
        dq_w = self.in_group(node.input(1).name)
        if dq_w is None or dq_w.op_type != "DequantizeLinear":
            return "the weight is not a DequantizeLinear in the partition"
        xq, xs, xz = dq_x.input(0), dq_x.input(1), dq_x.input(2)
        if xq.elem_type not in (TP.INT8, TP.UINT8):
            return "the activations are not 8-bit"
        if xs.const is None or xs.const.size != 1 or (xz is not None and
                                                      (xz.const is None or xz.const.size != 1)):
            return "the activations are not quantized per tensor with constant parameters"
        wq, ws_, wz = dq_w.input(0), dq_w.input(1), dq_w.input(2)
        if wq.const is None:
            return "the int8 weight is not a constant"
        if wq.elem_type != TP.INT8:
            return "the weights are uint8 (pqs8_qc8w needs int8 weights symmetric per channel)"
        if wz is not None and (wz.const is None or np.any(wz.const != 0)):
            return "the weight zero point is not 0 (asymmetric weights)"
        trans_b = node.op_type == "Gemm" and int(node.attr("transB", 0))
        w_axis = 0 if node.op_type == "Conv" or trans_b else 1
        if ws_.const is None:
            return "the weight scale is not a constant"
        if ws_.const.size > 1:
            axis = int(dq_w.attr("axis", 1)) % wq.const.ndim
            if axis != w_axis or ws_.const.size != wq.const.shape[w_axis]:
                return "the weight scale is neither per tensor nor per output channel"
        if node.op_type == "Gemm" and int(node.attr("transA", 0)):
            return "Gemm with transA=1"
        bias, dq_b = node.input(2), None
        if bias is not None:
            dq_b = self.in_group(bias.name)
            if dq_b is not None and dq_b.op_type == "DequantizeLinear":
                bq, bz = dq_b.input(0), dq_b.input(2)
                if bq.const is None or dq_b.input(1).const is None or \
                        (bz is not None and (bz.const is None or np.any(bz.const != 0))):
                    return "the bias is not a constant int32 with zero point 0"
            elif bias.const is None:
                dq_b = None
                return "the bias is not a constant"
            else:
                dq_b = None
        y = node.outputs[0].name
        reader = self.sole_reader(y)
        relu = None
        if reader is not None and reader.op_type == "Relu" and not reader.domain:
            relu, reader = reader, self.sole_reader(reader.outputs[0].name)
        if reader is None or reader.op_type != "QuantizeLinear" or reader.domain:
            return "its result is not quantized by a QuantizeLinear (read by it alone)"
        q = reader
        qs, qz = q.input(1), q.input(2)
        if qs.const is None or qs.const.size != 1 or (qz is not None and
                                                      (qz.const is None or qz.const.size != 1)):
            return "the output is not quantized per tensor with constant parameters"
        if q.outputs[0].elem_type not in (TP.INT8, TP.UINT8):
            return "the output is not 8-bit"
        return QdqMatch(node, dq_x, dq_w, bias, dq_b, relu, q, w_axis)

    def _match_dyn(self, dql: NodeView) -> list[DynChain]:
        outs = [o.name if o is not None else None for o in dql.outputs]
        if len(outs) != 3 or None in outs or any(o in self.out_names for o in outs):
            return []
        chains = []
        for node in self.readers.get(outs[0], []):
            c = self._dyn_chain(dql, outs, node)
            if c is not None:
                chains.append(c)
        return chains

    def _dyn_chain(self, dql: NodeView, outs: list, node: NodeView) -> DynChain | None:
        def names(n):
            return [v.name if v is not None else None for v in n.inputs] + [None] * 7

        def int8_weight(b, z):
            if b is None or b.const is None or b.elem_type != TP.INT8 or b.const.ndim != 2:
                return False
            return z is None or (z.const is not None and not np.any(z.const))

        ins = names(node)
        if node.op_type == "MatMulIntegerToFloat" and node.domain == MS:
            if [ins[0], ins[2], ins[4]] != outs or not int8_weight(node.input(1), node.input(5)):
                return None
            s = node.input(3)
            bias = node.input(6)
            if s.const is None or (bias is not None and bias.const is None):
                return None
            return DynChain(dql, (node,), node.input(1).const, s.const,
                            None if bias is None else bias.const, node.outputs[0].name)
        if node.op_type != "MatMulInteger" or node.domain:
            return None
        if ins[0] != outs[0] or ins[2] != outs[2] or not int8_weight(node.input(1),
                                                                      node.input(3)):
            return None
        cast = self.sole_reader(node.outputs[0].name)
        if cast is None or cast.op_type != "Cast" or int(cast.attr("to", 0)) != TP.FLOAT:
            return None
        mul = self.sole_reader(cast.outputs[0].name)
        if mul is None or mul.op_type != "Mul":
            return None
        mins = names(mul)[:2]
        other = mins[1 - mins.index(cast.outputs[0].name)]
        smul = self.in_group(other)
        if smul is None or smul.op_type != "Mul" or other in self.out_names:
            return None
        sins = names(smul)[:2]
        if outs[1] not in sins:
            return None
        ws_ = smul.input(1 - sins.index(outs[1]))
        n = node.input(1).const.shape[1]
        if ws_.const is None or ws_.const.size not in (1, n):
            return None
        chain = [node, cast, mul]
        if len(self.readers.get(other, [])) == 1:
            chain.append(smul)
        out, bias = mul.outputs[0].name, None
        add = self.sole_reader(out)
        if add is not None and add.op_type == "Add":
            ains = names(add)[:2]
            b = add.input(1 - ains.index(out))
            if b is not None and b.const is not None and b.const.shape in ((n,), (1, n)):
                chain.append(add)
                out, bias = add.outputs[0].name, b.const
        return DynChain(dql, tuple(chain), node.input(1).const, ws_.const, bias, out)

    def epilogue(self, node: NodeView) -> Epilogue:
        """What runs after ``node`` in its op: the pattern pass's match, else the activation
        attribute of com.microsoft FusedConv / FusedGemm."""
        ep = self.epilogues.get(node.index)
        if ep is not None:
            return ep
        act = fused_attr_activation(node) if node.domain == MS else Activation()
        return Epilogue(act, (), node.outputs[0].name)
