"""What the kleidi_sme2 provider claims, and why it declines the rest.

Pure analysis of :class:`~onnxplex.NodeView` objects: no native code runs here. Each ``check_*``
returns a :class:`Claim` (kernel family plus a short note for the placement report) or a string,
the decline reason. ``compile`` re-derives everything it needs from the claimed nodes, so the
provider keeps nothing from ``get_capability``.

Seed conditions (issue 6):

* ``gemm_f32``: MatMul / Gemm / com.microsoft FusedGemm (Relu) with a constant 2-D fp32 weight,
  and 1x1 Conv / FusedConv (stride 1, no pads, group 1, batch 1);
* ``igemm_f32``: Conv / FusedConv (Relu, Clip), fp32, 2-D, batch 1, group 1, kernel >= 3x3;
* ``qgemm_qsi8cx``: com.microsoft DynamicQuantizeMatMul, and a DynamicQuantizeLinear whose
  readers are all com.microsoft MatMulIntegerToFloat or the unfused MatMulInteger + Cast + Mul
  rescale (+ a bias Add) that onnxruntime's ``quantize_dynamic`` writes, with constant int8
  weights symmetric per channel (or per tensor): the whole group is one kernel call per matmul;
* ``qgemm_qsi4c32``: com.microsoft MatMulNBits, bits=4, block_size a multiple of 32 dividing K,
  no zero points or all-8 packed uint8 zero points.

An activation (Relu, or Clip with constant bounds) that is the sole consumer of a claimed fp32
node's output is claimed with it: the kernel applies it as its output clamp.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from onnx import TensorProto as TP

from onnxplex import GraphView, NodeView

MS = "com.microsoft"
INF = float("inf")


@dataclass(frozen=True)
class Claim:
    family: str
    note: str


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v or "")


def _is(node: NodeView, op: str, domain: str = "") -> bool:
    return node.op_type == op and node.domain in ((domain,) if domain else ("", "ai.onnx"))


def _elem(v) -> int | None:
    return None if v is None else v.elem_type


def _not_f32(node: NodeView, i: int = 0) -> bool:
    """Input ``i`` is known not to be float32 (its type, else the output's, when inferred)."""
    e = _elem(node.input(i))
    if e is None and node.outputs and node.outputs[0] is not None:
        e = node.outputs[0].elem_type
    return e is not None and e != TP.FLOAT


def _const_f32_vector(v, n: int, what: str) -> str | None:
    """``None`` when ``v`` is absent or a constant fp32 tensor with ``n`` values (or one)."""
    if v is None:
        return None
    if not v.is_const:
        return f"{what} is not a constant"
    if v.elem_type != TP.FLOAT:
        return f"{what} is not float32"
    if np.asarray(v.const).size not in (1, n):
        return f"{what} has {np.asarray(v.const).size} values, expected 1 or {n}"
    return None


# ---- activations fused as a clamp -----------------------------------------------------------


def clip_bounds(node: NodeView) -> tuple[float, float] | str:
    """(lo, hi) of a Relu or a Clip with constant bounds, else the reason it is not a clamp."""
    if _is(node, "Relu"):
        return 0.0, INF
    if _is(node, "Clip"):
        if node.opset < 11:
            return float(node.attr("min", -INF)), float(node.attr("max", INF))
        out = []
        for i, dflt in ((1, -INF), (2, INF)):
            v = node.input(i)
            if v is None:
                out.append(dflt)
            elif not v.is_const:
                return "Clip bounds are not constants"
            else:
                out.append(float(np.asarray(v.const).reshape(-1)[0]))
        return out[0], out[1]
    return f"{node.op_type} is not Relu or Clip"


def fused_activation_bounds(node: NodeView) -> tuple[float, float] | str:
    """Clamp bounds of the ``activation`` attribute of FusedConv / FusedGemm."""
    kind = _s(node.attr("activation", ""))
    if not kind:
        return -INF, INF
    if kind == "Relu":
        return 0.0, INF
    if kind == "Clip":
        params = list(node.attr("activation_params", None) or ())
        if len(params) != 2:
            return "FusedConv Clip needs activation_params [min, max]"
        return float(params[0]), float(params[1])
    return (f"activation {kind} is not a clamp (the kernels fuse only Relu and Clip; "
            f"{kind} runs on another provider)")


# ---- (a) fp32 GEMM ----------------------------------------------------------------------------


def _weight_2d(node: NodeView, i: int) -> str | None:
    w = node.input(i)
    if w is None or not w.is_const:
        return "the weight (input B) is not a constant initializer"
    if w.elem_type != TP.FLOAT:
        return "the weight is not float32"
    if len(w.shape) != 2:
        return f"the weight is {len(w.shape)}-D, the GEMM kernel needs 2-D"
    return None


def check_matmul(node: NodeView) -> Claim | str:
    if _not_f32(node):
        return "input A is not float32"
    why = _weight_2d(node, 1)
    if why:
        return why
    a = node.input(0)
    if a.rank is not None and a.rank < 2:
        return "input A is 1-D"
    return Claim("gemm_f32", "fp32 GEMM")


def check_gemm(node: NodeView) -> Claim | str:
    if _not_f32(node):
        return "input A is not float32"
    why = _weight_2d(node, 1)
    if why:
        return why
    if int(node.attr("transA", 0)):
        return "transA=1 is not supported (the kernel reads A row-major)"
    trans_b = int(node.attr("transB", 0))
    n = node.input(1).shape[0 if trans_b else 1]
    why = _const_f32_vector(node.input(2), n, "C")
    if why:
        return why + " broadcastable to [N] (the kernel adds a per-column bias)"
    c = node.input(2)
    if c is not None and len(c.shape) == 2 and c.shape[0] != 1:
        return "C is not a row vector"
    if node.op_type == "FusedGemm":
        b = fused_activation_bounds(node)
        if isinstance(b, str):
            return b
    return Claim("gemm_f32", "fp32 GEMM" + ("" if node.op_type == "Gemm" else " + clamp"))


# ---- (a) 1x1 Conv and (b) indirect conv -----------------------------------------------------


def check_conv(node: NodeView) -> Claim | str:
    x, w = node.input(0), node.input(1)
    if _not_f32(node):
        return "input X is not float32"
    if w is None or not w.is_const or w.elem_type != TP.FLOAT:
        return "the weight is not a constant float32 initializer"
    wc = np.asarray(w.const)
    if wc.ndim != 4:
        return f"{wc.ndim - 2}-D convolution (the kernels do 2-D only)"
    group = int(node.attr("group", 1))
    if group != 1:
        dw = " (depthwise)" if group == wc.shape[0] and wc.shape[1] == 1 else ""
        return f"group={group}{dw}: the kernels do group=1 convolutions only"
    if x.shape is None or x.shape[0] != 1:
        b = "unknown" if x.shape is None else x.shape[0]
        return f"batch is {b}, the kernels are claimed for batch 1 only"
    why = _const_f32_vector(node.input(2), wc.shape[0], "the bias")
    if why:
        return why
    if node.op_type == "FusedConv":
        if node.input(3) is not None:
            return "FusedConv with a residual input Z is not fused by the kernels"
        b = fused_activation_bounds(node)
        if isinstance(b, str):
            return b
    kh, kw = wc.shape[2:]
    if (kh, kw) == (1, 1):
        # strided (a ResNet's downsampling shortcut) or padded: the input is padded and
        # subsampled first, then one GEMM (dilations do not matter to a 1x1 kernel)
        strides = tuple(int(v) for v in node.attr("strides", None) or (1, 1))
        pads = tuple(int(v) for v in node.attr("pads", None) or (0, 0, 0, 0))
        auto = _s(node.attr("auto_pad", "NOTSET"))
        if auto not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
            return f"auto_pad {auto!r} is not an ONNX padding mode"
        how = [f"stride {strides[0]}x{strides[1]}"] if strides != (1, 1) else []
        how += ["padded"] if any(pads) and auto == "NOTSET" else []
        return Claim("gemm_f32", "1x1 conv as fp32 GEMM" + (f" ({', '.join(how)})" if how
                                                           else ""))
    if min(kh, kw) < 3:
        return f"kernel {kh}x{kw}: the indirect-conv path is for kernels 3x3 or larger"
    return Claim("igemm_f32", f"{kh}x{kw} indirect conv")


# ---- (c) dynamic int8 ------------------------------------------------------------------------


def _int8_weight(b, s, z) -> str | None:
    """``None`` when ``b`` is a constant int8 [K, N] weight with a constant fp32 scale ``s``
    per tensor or per column and a zero point ``z`` that is absent or all zeros."""
    if b is None or not b.is_const:
        return "the weight B is not a constant initializer"
    if b.elem_type != TP.INT8:
        return ("the weight B is uint8 (asymmetric); the dynamic int8 kernel needs int8 "
                "weights symmetric per channel")
    bc = np.asarray(b.const)
    if bc.ndim != 2:
        return f"the weight B is {bc.ndim}-D, the kernel needs 2-D"
    n = bc.shape[1]
    if s is None or not s.is_const or s.elem_type != TP.FLOAT:
        return "the weight scale is not a constant float32"
    if np.asarray(s.const).size not in (1, n):
        return "the weight scale is neither per tensor nor per output channel"
    if z is not None:
        if not z.is_const:
            return "the weight zero point is not a constant"
        if np.any(np.asarray(z.const) != 0):
            return "the weight zero point is not 0 (asymmetric weights)"
    return None


def check_dynamic_quantize_matmul(node: NodeView) -> Claim | str:
    if _not_f32(node):
        return "input A is not float32"
    why = _int8_weight(node.input(1), node.input(2), node.input(3))
    if why:
        return why
    n = node.input(1).shape[1]
    why = _const_f32_vector(node.input(4), n, "the bias")
    if why:
        return why
    return Claim("qgemm_qsi8cx", "dynamic int8 (qai8dx x qsi8cx)")


DQ_PATTERNS = ("DynamicQuantizeLinear + MatMulIntegerToFloat",
               "DynamicQuantizeLinear + MatMulInteger + Cast + Mul")


@dataclass(frozen=True)
class DqChain:
    """One matmul of a dynamic-int8 group: float activations in, float ``output`` out.

    ``nodes``: the chain's nodes (MatMulIntegerToFloat; or MatMulInteger, Cast, the output Mul,
    the activation-scale x weight-scale Mul, and a bias Add when one follows).
    """

    nodes: tuple[NodeView, ...]
    weight: Any
    scale: Any
    bias: Any
    output: str


@dataclass(frozen=True)
class DqGroup:
    dql: NodeView
    chains: tuple[DqChain, ...]

    @property
    def members(self) -> tuple[int, ...]:
        return tuple(sorted({self.dql.index, *(n.index for c in self.chains for n in c.nodes)}))


class Dataflow(Protocol):
    """Who produces and who reads a value: a :class:`~onnxplex.GraphView`, or the nodes of a
    claimed group in ``compile``."""

    def producer(self, name: str) -> NodeView | None: ...

    def consumers(self, name: str) -> Sequence[NodeView]: ...


def _names(vals) -> list[str | None]:
    return [v.name if v is not None else None for v in vals]


def _sole_consumer(name: str, flow: Dataflow, exported: set[str]) -> NodeView | None:
    users = flow.consumers(name)
    return users[0] if len(users) == 1 and name not in exported else None


def _other_input(node: NodeView, name: str):
    """The other input of a two-input node that reads ``name`` once, else None."""
    ins = _names(node.inputs)
    if len(ins) != 2 or ins.count(name) != 1:
        return None
    return node.input(1 - ins.index(name))


def _chain_mmitf(node: NodeView, dq_out: list) -> DqChain | str:
    if _names([node.input(0), node.input(2), node.input(4)]) != dq_out:
        return "A, a_scale and a_zero_point are not the outputs of one DynamicQuantizeLinear"
    why = _int8_weight(node.input(1), node.input(3), node.input(5))
    if why:
        return why
    n = node.input(1).shape[1]
    why = _const_f32_vector(node.input(6), n, "the bias")
    if why:
        return why
    return DqChain((node,), node.input(1), node.input(3), node.input(6), node.outputs[0].name)


def _chain_mmi(node: NodeView, dq_out: list, flow: Dataflow,
               exported: set[str]) -> DqChain | str:
    """MatMulInteger(xq, W, xz, wz) -> Cast(float) -> Mul(., Mul(x_scale, w_scale)) [-> Add]."""
    ins = _names(node.inputs) + [None] * 4
    if ins[0] != dq_out[0] or ins[2] != dq_out[2]:
        return ("A and a_zero_point are not the quantized output and zero point of one "
                "DynamicQuantizeLinear")
    cast = _sole_consumer(node.outputs[0].name, flow, exported)
    if cast is None or not _is(cast, "Cast") or int(cast.attr("to", 0)) != TP.FLOAT:
        return ("its int32 result is not read by a single Cast to float (the kernel produces "
                "float outputs only)")
    mul = _sole_consumer(cast.outputs[0].name, flow, exported)
    s = None if mul is None or not _is(mul, "Mul") else _other_input(mul, cast.outputs[0].name)
    smul = None if s is None else flow.producer(s.name)
    ws = None if smul is None else _other_input(smul, dq_out[1])
    if ws is None or s.name in exported:
        return ("the Cast's result is not multiplied by Mul(a_scale, weight scale) (the "
                "rescale the kernel applies)")
    why = _int8_weight(node.input(1), ws, node.input(3))
    if why:
        return why
    nodes, out, bias = [node, cast, mul, smul], mul.outputs[0].name, None
    add = _sole_consumer(out, flow, exported)
    if add is not None and _is(add, "Add"):
        b = _other_input(add, out)
        n = node.input(1).shape[1]
        if b is not None and b.is_const and b.elem_type == TP.FLOAT and \
                b.shape in ((n,), (1, n)):
            nodes.append(add)
            out, bias = add.outputs[0].name, b
    return DqChain(tuple(nodes), node.input(1), ws, bias, out)


def dq_group(dql: NodeView, flow: Dataflow, exported: set[str]) -> DqGroup | str:
    """The dynamic-int8 group rooted at ``dql``: every reader of its three outputs must be part
    of a chain (see :data:`DQ_PATTERNS`), else the reason it is not a group. ``exported``: the
    graph outputs (a chain's inner values must not be among them)."""
    dq_out = _names(dql.outputs)
    if len(dq_out) != 3 or None in dq_out or any(o in exported for o in dq_out):
        return "some DynamicQuantizeLinear output is a graph output or missing"
    chains: list[DqChain] = []
    for node in flow.consumers(dq_out[0]):
        if _is(node, "MatMulIntegerToFloat", MS):
            c = _chain_mmitf(node, dq_out)
        elif _is(node, "MatMulInteger"):
            c = _chain_mmi(node, dq_out, flow, exported)
        else:
            c = f"its quantized output is read by {node.qualified_op}"
        if isinstance(c, str):
            return f"{node.display_name} ({node.op_type}): {c}"
        chains.append(c)
    if not chains:
        return "no MatMulIntegerToFloat / MatMulInteger reads its output"
    group = DqGroup(dql, tuple(chains))
    inside = set(group.members)
    inner = [v.name for c in chains for n in c.nodes for v in n.outputs
             if v is not None and v.name != c.output]
    for name in (*dq_out, *inner):
        if name in exported:
            return f"{name}, computed inside the group, is a graph output"
        for user in flow.consumers(name):
            if user.index not in inside:
                return (f"{name} is also read by {user.display_name} ({user.op_type}), which "
                        "the dynamic int8 kernel does not run")
    return group


# ---- (d) int4 MatMulNBits --------------------------------------------------------------------


def check_matmul_nbits(node: NodeView) -> Claim | str:
    if _not_f32(node):
        return "input A is not float32"
    bits = int(node.attr("bits", 4))
    if bits != 4:
        return f"bits={bits}: the int4 kernel needs bits=4"
    k, n = node.attr("K"), node.attr("N")
    if k is None or n is None:
        return "the K and N attributes are missing"
    k, bs = int(k), int(node.attr("block_size", 0))
    if bs < 32 or bs % 32:
        return f"block_size={bs}: the int4 kernel needs a multiple of 32"
    if k % bs:
        return f"block_size={bs} does not divide K={k}"
    b, s = node.input(1), node.input(2)
    if b is None or not b.is_const or b.elem_type != TP.UINT8:
        return "B is not a constant uint8 initializer"
    if s is None or not s.is_const or s.elem_type != TP.FLOAT:
        return "scales are not a constant float32 initializer"
    if node.input(4) is not None:
        return "g_idx (act-order) is not supported"
    z = node.input(3)
    if z is not None:
        if not z.is_const:
            return "zero_points are not a constant"
        if z.elem_type != TP.UINT8:
            return "float zero points are not supported (the kernel needs symmetric weights)"
        zc = np.asarray(z.const)
        if np.any(zc != 0x88):
            return "zero points other than 8 (asymmetric int4) are not supported"
    why = _const_f32_vector(node.input(5), int(n), "the bias")
    if why:
        return why
    return Claim("qgemm_qsi4c32", f"int4 block-{bs} (qai8dx x qsi4c32)")


def check(node: NodeView, graph: GraphView) -> Claim | str:
    op, d = node.op_type, node.domain
    if d in ("", "ai.onnx"):
        if op == "MatMul":
            return check_matmul(node)
        if op == "Gemm":
            return check_gemm(node)
        if op == "Conv":
            return check_conv(node)
        if op in ("DynamicQuantizeLinear", "MatMulInteger"):
            return f"claimed only as a whole dynamic int8 group ({' or '.join(DQ_PATTERNS)})"
    elif d == MS:
        if op == "FusedGemm":
            return check_gemm(node)
        if op == "FusedConv":
            return check_conv(node)
        if op == "DynamicQuantizeMatMul":
            return check_dynamic_quantize_matmul(node)
        if op == "MatMulIntegerToFloat":
            return (f"claimed only with the DynamicQuantizeLinear feeding it "
                    f"({DQ_PATTERNS[0]})")
        if op == "MatMulNBits":
            return check_matmul_nbits(node)
    return f"{node.qualified_op} has no Kleidi kernel"
