"""The partition planner: a claimed group of nodes becomes a list of ops over value slots.

Planning happens twice with the same code: in ``get_capability`` (``dry``: nothing is packed,
only what each node will run as is decided, for the placement report) and in ``compile``. It

* tracks the layout of every rank-4 value: ``C`` (channels-last, NHWC) or ``L`` (ONNX's logical
  order). Partition inputs of rank 4 arrive channels-last (the core converts at the boundary)
  and rank-4 outputs leave channels-last; inside, conv / pooling want ``C``, reshapes and
  matmuls want ``L``, elementwise ops follow their inputs; a conversion (a transposed view) is
  inserted once per value and layout where a consumer needs the other one;
* matches fusion patterns first: QDQ groups (DequantizeLinear x2 -> Conv / MatMul / Gemm ->
  QuantizeLinear, optionally through a Relu) become one quantized op; a dynamic-int8 chain
  (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul [-> Add]) becomes one Kleidi call when
  its kernel runs here; a Relu / Clip / ... that is the sole consumer of a conv, gemm or batch
  norm becomes its epilogue;
* matches each conv / fully-connected / batch-matmul node against its variant table
  (``_tables``) and picks the Kleidi kernel or the own implementation;
* folds nodes whose inputs are all constants at compile time, drops ops whose results nobody
  needs, computes each slot's last reader and which inputs an op may overwrite in place.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import TensorProto as TP

from onnxplex import NodeView, ValueInfo

from . import _tables as T
from ._ops_base import (
    CHANNELS_LAST,
    F16,
    F32,
    LOGICAL,
    TO_C,
    TO_L,
    Activation,
    Label,
    Op,
    Workspace,
    phys_axis,
    scale_multiplier,
)
from ._ops_conv import ConvGeometry, ConvOwn, KleidiPointwiseConv, QConvOwn, conv_strategy
from ._ops_elementwise import (
    AffineChannelOp,
    BiasActivationOp,
    BinaryOp,
    CastOp,
    LayerNormOp,
    SoftmaxOp,
    UnaryOp,
    lift_to_c,
)
from ._ops_matmul import (
    BatchMatMulOwn,
    DynQuantFCOwn,
    FCOwn,
    KleidiBatchMatMul,
    KleidiDynQuantFC,
    KleidiFC,
    KleidiNBits,
    MatMulIntegerOwn,
    MatMulIntegerToFloatOwn,
    QFCOwn,
    dequantize_nbits,
)
from ._ops_pool import AveragePoolOp, ConcatOp, MaxPoolOp, ReduceOp, ReshapeOp, ViewOp
from ._ops_quant import DequantizeOp, DynamicQuantizeOp, QuantizeOp
from ._support import MS, s_attr

logger = logging.getLogger(__name__)

_NP = {TP.FLOAT: F32, TP.FLOAT16: F16, TP.INT8: np.dtype(np.int8),
       TP.UINT8: np.dtype(np.uint8), TP.INT32: np.dtype(np.int32),
       TP.INT64: np.dtype(np.int64)}

CONV_IMPL = {"pointwise": "own:gemm_nhwc", "im2col": "own:im2col_gemm",
             "depthwise": "own:depthwise_taps", "grouped": "own:grouped_im2col_gemm"}
QCONV_IMPL = {k: v.replace("own:", "own:int8_") for k, v in CONV_IMPL.items()}
ACTIVATIONS = {"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish",
               "Elu", "Gelu"}


@dataclass
class PlanOptions:
    kleidi: bool = True          # provider option: use Kleidi kernels where they run
    forced: bool = False         # reference variants forced (environment / option)
    threads: int = 1             # threads per Kleidi call


@dataclass
class Val:
    """What the planner knows of a value: rank, dtype, layout, and the constant behind it
    (``const`` in compile mode; ``is_const`` also in dry mode, where nothing is computed)."""

    rank: int | None
    dtype: np.dtype | None
    layout: str = LOGICAL
    const: np.ndarray | None = None
    is_const: bool = False
    shape: tuple | None = None


@dataclass
class Step:
    label: Label
    op: Op | None
    inputs: tuple[str | None, ...]
    outputs: tuple[str, ...]


@dataclass
class Plan:
    steps: list[Step]
    vals: dict[str, Val]
    inputs: tuple[str | None, ...]           # subgraph inputs by position
    outputs: tuple[str, ...]                 # slot names holding the outputs (layout-adjusted)
    notes: dict[int, str] = field(default_factory=dict)
    labels: dict[int, Label] = field(default_factory=dict)


def _short(kernel: str) -> str:
    return kernel.split(" [")[0]


def np_dtype(elem: int | None) -> np.dtype | None:
    return None if elem is None else _NP.get(elem)


def _act_of(node: NodeView) -> Activation | None:
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


def _fused_attr_activation(node: NodeView) -> Activation:
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


# --------------------------------------------------------------------------------------------
# Fusion patterns
# --------------------------------------------------------------------------------------------


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


class Planner:
    def __init__(self, nodes: Sequence[NodeView], inputs: Sequence[ValueInfo | None],
                 outputs: Sequence[ValueInfo | None], options: PlanOptions, dry: bool,
                 name: str = "xnnpack_like", boundary: str = CHANNELS_LAST,
                 ranks: Mapping[str, int] | None = None) -> None:
        """``boundary``: the layout rank-4 inputs arrive in and outputs leave in; ``ranks``:
        ranks of values shape inference left unknown (``_support.infer_ranks``)."""
        self.boundary = boundary
        self.ranks = dict(ranks or {})
        self.nodes = tuple(nodes)
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.opt, self.dry, self.name = options, dry, name
        self.vals: dict[str, Val] = {}
        self.steps: list[Step] = []
        self.notes: dict[int, str] = {}
        self.labels: dict[int, Label] = {}
        self.member_of: dict[int, Label] = {}      # nodes folded into another node's op
        self._converted: dict[tuple[str, str], str] = {}
        self.out_names = {v.name for v in self.outputs if v is not None}
        self.producer: dict[str, NodeView] = {}
        self.readers: dict[str, list[NodeView]] = {}
        for n in self.nodes:
            for o in n.outputs:
                if o is not None:
                    self.producer[o.name] = n
            for name_ in dict.fromkeys(v.name for v in n.inputs if v is not None):
                self.readers.setdefault(name_, []).append(n)
        self.info: dict[str, ValueInfo] = {}
        for n in self.nodes:
            for v in (*n.inputs, *n.outputs):
                if v is not None:
                    self.info[v.name] = v

    # ---- values and layouts ----------------------------------------------------------------

    def val(self, name: str) -> Val:
        return self.vals[name]

    def rank_of(self, v: ValueInfo) -> int | None:
        return v.rank if v.rank is not None else self.ranks.get(v.name)

    def const(self, name: str | None) -> np.ndarray | None:
        return None if name is None else self.vals[name].const

    def is_const(self, name: str | None) -> bool:
        return name is None or self.vals[name].is_const

    def define(self, name: str, info: ValueInfo | None, layout: str = LOGICAL,
               const: np.ndarray | None = None, is_const: bool = False,
               dtype: np.dtype | None = None, rank: int | None = None) -> None:
        if info is not None:
            rank = self.rank_of(info) if rank is None else rank
            dtype = np_dtype(info.elem_type) if dtype is None else dtype
        if const is not None:
            rank, dtype, is_const = const.ndim, const.dtype, True
        self.vals[name] = Val(rank, dtype, layout if rank == 4 else LOGICAL, const, is_const,
                              None if info is None else info.shape)

    def use(self, name: str | None, want: str | None) -> str | None:
        """The name of ``name`` in layout ``want`` (a conversion is made once, when needed)."""
        if name is None or want is None:
            return name
        v = self.vals[name]
        if v.rank != 4 or v.layout == want:
            return name
        key = (name, want)
        if key not in self._converted:
            conv = f"{name}@{want}"
            perm = TO_C if want == CHANNELS_LAST else TO_L
            if v.is_const:
                c = None if v.const is None else np.ascontiguousarray(v.const.transpose(perm))
                self.vals[conv] = Val(4, v.dtype, want, c, True, v.shape)
            else:
                label = Label(f"{name}->{'NHWC' if want == CHANNELS_LAST else 'NCHW'}",
                              "LayoutTransform", (), "layout", "", "own:transpose_view")
                self._emit(label, lambda: ViewOp(label, perm), (name,), (conv,))
                self.vals[conv] = Val(4, v.dtype, want, None, False, v.shape)
            self._converted[key] = conv
        return self._converted[key]

    def lifted_const(self, name: str) -> str:
        """A constant of rank < 4 lifted to rank 4 and permuted channels-last (ONNX broadcast
        semantics against an NHWC tensor)."""
        key = (name, "lift")
        if key not in self._converted:
            v = self.vals[name]
            c = None if v.const is None else np.ascontiguousarray(lift_to_c(v.const))
            lifted = f"{name}@lift"
            self.vals[lifted] = Val(4, v.dtype, CHANNELS_LAST, c, True)
            self._converted[key] = lifted
        return self._converted[key]

    def _emit(self, label: Label, make: Callable[[], Op], inputs: Sequence[str | None],
              outputs: Sequence[str]) -> Op | None:
        op = None if self.dry else make()
        self.steps.append(Step(label if op is None else op.label, op, tuple(inputs),
                               tuple(outputs)))
        return op

    def emit(self, node: NodeView, label: Label, make: Callable[[], Op],
             inputs: Sequence[str | None], outputs: Sequence[tuple[str, str]],
             members: Sequence[NodeView] = ()) -> None:
        """Add an op running ``node`` (and ``members`` fused into it). ``outputs``:
        (name, layout) pairs; ranks and dtypes come from the value infos."""
        op = self._emit(label, make, inputs, [o for o, _ in outputs])
        label = label if op is None else op.label
        for name_, layout in outputs:
            if name_:
                self.define(name_, self.info.get(name_), layout)
        self.labels[node.index] = label
        for m in members:
            self.member_of[m.index] = label

    def kleidi(self, op_class: str, variant: str) -> T.KleidiStatus:
        return T.kleidi_status(T.variant(op_class, variant), forced=self.opt.forced,
                               enabled=self.opt.kleidi)

    def try_kleidi(self, st: T.KleidiStatus, label: Label, make: Callable[[Any, str], Op],
                   own_label: Label,
                   make_own: Callable[[Label], Op]) -> tuple[Label, Callable[[], Op]]:
        """(label, factory) of the Kleidi op, falling back to the own one if building it (the
        packing call) fails at compile time."""
        def build() -> Op:
            mod, _ = T.native()
            try:
                return make(mod, st.kernel.split("/")[1])
            except (TypeError, ValueError, RuntimeError, AttributeError) as e:
                logger.warning("%s: Kleidi kernel %s for %s could not be prepared (%s); the "
                               "own implementation runs instead", self.name, label.kernel,
                               label.name, e)
                return make_own(Label(own_label.name, own_label.op_type, own_label.nodes,
                                      own_label.op_class, own_label.variant,
                                      own_label.kernel + f" [Kleidi call failed: {e}]"))
        return label, build

    # ---- the plan --------------------------------------------------------------------------

    def plan(self) -> Plan:
        in_names: list[str | None] = []
        for v in self.inputs:
            if v is None:
                in_names.append(None)
                continue
            in_names.append(v.name)
            if v.name in self.vals:
                continue
            if v.is_const:
                self.define(v.name, v, const=np.asarray(v.const))
            else:
                self.define(v.name, v, self.boundary)
        self._match_patterns()
        for node in self.nodes:
            if node.index in self.skip:
                continue
            consts = [x for x in node.inputs if x is not None]
            if consts and all(self.is_const(x.name) for x in consts) and \
                    node.index not in self.pattern_roots:
                self._fold(node)
                continue
            LOWER[(node.domain, node.op_type)](self, node)
        out_names = []
        for v in self.outputs:
            if v is None:
                out_names.append("")
                continue
            out_names.append(self.use(v.name, self.boundary))
        self._drop_dead(out_names)
        self._finish_notes(out_names)
        return Plan(self.steps, self.vals, tuple(in_names), tuple(out_names), self.notes,
                    self.labels)

    def _fold(self, node: NodeView) -> None:
        """All inputs constant: compute the node once, now (compile) -- a constant after."""
        label = Label(node.display_name, node.op_type, (node.index,), "constant", "",
                      "own:compile_time_constant")
        self.labels[node.index] = label
        if self.dry:
            for o in node.outputs:
                if o is not None:
                    self.define(o.name, o, is_const=True)
            return
        saved = len(self.steps)
        LOWER[(node.domain, node.op_type)](self, node)
        new = self.steps[saved:]
        del self.steps[saved:]
        ws = Workspace()
        for st in new:
            args = [self.vals[i].const if i is not None else None for i in st.inputs]
            res = st.op.run(args, ws)
            res = res if st.op.n_out > 1 else (res,)
            for name_, r in zip(st.outputs, res):
                v = self.vals[name_]
                arr = np.asarray(r)
                if v.layout == CHANNELS_LAST and arr.ndim == 4:   # constants are logical
                    arr = arr.transpose(TO_L)
                arr = np.ascontiguousarray(arr)
                arr.flags.writeable = False
                self.vals[name_] = Val(arr.ndim, arr.dtype, LOGICAL, arr, True, v.shape)
        self.labels[node.index] = label

    def _drop_dead(self, out_names: Sequence[str]) -> None:
        needed = {n for n in out_names if n}
        kept = []
        for st in reversed(self.steps):
            if any(o in needed for o in st.outputs):
                kept.append(st)
                needed.update(i for i in st.inputs if i is not None)
        kept.reverse()
        alive = {id(s) for s in kept}
        self.dead = [s for s in self.steps if id(s) not in alive]
        self.steps = kept

    def _finish_notes(self, out_names: Sequence[str]) -> None:
        read = {n.split("@")[0] for st in self.steps for n in st.inputs if n}
        read.update(n.split("@")[0] for n in out_names if n)
        live = {i for st in self.steps for i in st.label.nodes}
        for node in self.nodes:
            i = node.index
            lab = self.labels.get(i)
            root = self.labels.get(self.feeds_pattern.get(i, -1))
            if i in self.member_of:
                target = self.member_of[i]
                self.notes[i] = f"folded into '{target.name}' -> {_short(target.kernel)}"
            elif lab is None:
                continue
            elif i in live:
                self.notes[i] = lab.note()
            elif lab.op_class == "constant" and any(o is not None and o.name in read
                                                    for o in node.outputs):
                self.notes[i] = ("computed at compile time (all inputs constant) -> "
                                 "own:compile_time_constant")
            elif root is not None:
                self.notes[i] = f"folded into '{root.name}' -> {_short(root.kernel)}"
            else:
                self.notes[i] = f"{lab.op_class}: result not needed -> own:not_run"

    # ---- patterns ----------------------------------------------------------------------------

    def _sole_reader(self, name: str) -> NodeView | None:
        users = self.readers.get(name, [])
        if len(users) != 1 or name in self.out_names:
            return None
        return users[0]

    def _match_patterns(self) -> None:
        self.skip: set[int] = set()
        self.pattern_roots: set[int] = set()
        self.qdq: dict[int, QdqMatch | str] = {}
        self.fused_act: dict[int, NodeView] = {}
        self.dyn: dict[int, DynChain] = {}
        self.feeds_pattern: dict[int, int] = {}     # DequantizeLinear etc. -> pattern root
        for node in self.nodes:
            if node.domain == "" and node.op_type in ("Conv", "MatMul", "Gemm"):
                m = self._match_qdq(node)
                if m is None:
                    continue
                self.qdq[node.index] = m
                if isinstance(m, QdqMatch):
                    self.pattern_roots.add(node.index)
                    self.skip.update(n.index for n in (m.q, m.relu) if n is not None)
                    for dq in (m.dq_x, m.dq_w, m.dq_b):
                        if dq is not None:
                            self.feeds_pattern[dq.index] = node.index
        dyn_ok = self.kleidi(T.FULLY_CONNECTED, "qp8_f32_qc8w_gemm").available
        for node in self.nodes:
            if node.op_type == "DynamicQuantizeLinear" and not node.domain:
                for chain in self._match_dyn(node):
                    root = chain.nodes[0]
                    self.dyn[root.index] = chain
                    if dyn_ok:
                        self.pattern_roots.add(root.index)
                        self.skip.update(n.index for n in chain.nodes[1:])
                        self.feeds_pattern[node.index] = root.index
        for node in self.nodes:
            if node.index in self.skip or node.index in self.pattern_roots:
                continue
            if (node.domain, node.op_type) in (("", "Conv"), ("", "Gemm"), ("", "MatMul"),
                                               (MS, "FusedConv"), (MS, "FusedGemm"),
                                               ("", "BatchNormalization")):
                if s_attr(node, "activation"):
                    continue
                y = node.outputs[0].name
                reader = self._sole_reader(y)
                if reader is not None and reader.index not in self.skip and \
                        _act_of(reader) is not None and reader.input(0).name == y:
                    self.fused_act[node.index] = reader
                    self.skip.add(reader.index)

    def _in_group(self, name: str | None) -> NodeView | None:
        return None if name is None else self.producer.get(name)

    def _match_qdq(self, node: NodeView) -> QdqMatch | str | None:
        """The QDQ group around ``node``; None when its data input is not dequantized; a
        string (why it is not pqs8_qc8w_gemm) when it is QDQ-shaped but does not match."""
        dq_x = self._in_group(node.input(0).name)
        if dq_x is None or dq_x.op_type != "DequantizeLinear" or dq_x.domain:
            return None
        dq_w = self._in_group(node.input(1).name)
        if dq_w is None or dq_w.op_type != "DequantizeLinear":
            return "the weight is not a DequantizeLinear in the partition"
        xq, xs, xz = dq_x.input(0), dq_x.input(1), dq_x.input(2)
        if xq.elem_type not in (TP.INT8, TP.UINT8):
            return f"the activations are {xq.elem_type and _NP[xq.elem_type]}, not 8-bit"
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
            dq_b = self._in_group(bias.name)
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
        reader = self._sole_reader(y)
        relu = None
        if reader is not None and reader.op_type == "Relu" and not reader.domain:
            relu, reader = reader, self._sole_reader(reader.outputs[0].name)
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
        cast = self._sole_reader(node.outputs[0].name)
        if cast is None or cast.op_type != "Cast" or int(cast.attr("to", 0)) != TP.FLOAT:
            return None
        mul = self._sole_reader(cast.outputs[0].name)
        if mul is None or mul.op_type != "Mul":
            return None
        mins = names(mul)[:2]
        other = mins[1 - mins.index(cast.outputs[0].name)]
        smul = self._in_group(other)
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
        add = self._sole_reader(out)
        if add is not None and add.op_type == "Add":
            ains = names(add)[:2]
            b = add.input(1 - ains.index(out))
            if b is not None and b.const is not None and b.const.shape in ((n,), (1, n)):
                chain.append(add)
                out, bias = add.outputs[0].name, b.const
        return DynChain(dql, tuple(chain), node.input(1).const, ws_.const, bias, out)

    def activation_after(self, node: NodeView) -> tuple[Activation, NodeView | None, str]:
        """The epilogue of ``node``: its fused attribute activation or the standalone one the
        pattern pass folded into it; and the name its result is stored under."""
        reader = self.fused_act.get(node.index)
        if reader is not None:
            return _act_of(reader), reader, reader.outputs[0].name
        if node.domain == MS:
            return _fused_attr_activation(node), None, node.outputs[0].name
        return Activation(), None, node.outputs[0].name


# --------------------------------------------------------------------------------------------
# Lowering, per op type
# --------------------------------------------------------------------------------------------

LOWER: dict[tuple[str, str], Callable[[Planner, NodeView], None]] = {}


def lowers(*keys: str, domain: str = ""):
    def deco(fn):
        for k in keys:
            LOWER[(domain, k)] = fn
        return fn
    return deco


def _label(node: NodeView, op_class: str, variant: str, kernel: str,
           members: Sequence[NodeView] = ()) -> Label:
    return Label(node.display_name, node.op_type,
                 (node.index, *(m.index for m in members)), op_class, variant, kernel)


def _why(st: T.KleidiStatus) -> str:
    return f" [Kleidi: {st.why}]" if not st.available else ""


def _act_text(act: Activation) -> str:
    return f" + {act.describe()}" if act else ""


# ---- convolution -----------------------------------------------------------------------------


def _geometry(node: NodeView, kernel: Sequence[int]) -> ConvGeometry:
    return ConvGeometry(kernel, node.attr("strides", None), node.attr("dilations", None),
                        node.attr("pads", None), s_attr(node, "auto_pad", "NOTSET"))


def _conv_variant(node: NodeView, w_shape: Sequence[int], group: int, geom: ConvGeometry,
                  dtype: np.dtype) -> str | None:
    """The conv2d table entry the node matches, else the reason (a string starting 'none')."""
    m, cg, kh, kw = w_shape
    if dtype != F32:
        return "none: fp16 convolution (the conv2d table has no pf16 variant)"
    if group > 1:
        kind = "depthwise" if cg == 1 and m == group else "grouped"
        return (f"none: {kind} (group={group}); pf32_gemm is for pointwise convolutions with "
                "group=1")
    if (kh, kw) != (1, 1):
        return f"none: {kh}x{kw} kernel; pf32_gemm is for pointwise (1x1) convolutions"
    if geom.pads_1x1:
        return "none: 1x1 kernel with padding; pf32_gemm needs an unpadded pointwise conv"
    return "pf32_gemm"


@lowers("Conv")
@lowers("FusedConv", domain=MS)
def _lower_conv(p: Planner, node: NodeView) -> None:
    m = p.qdq.get(node.index)
    if isinstance(m, QdqMatch):
        return _lower_qconv(p, node, m)
    x, w, b = node.input(0), node.input(1), node.input(2)
    z = node.input(3) if node.op_type == "FusedConv" else None
    w_shape = tuple(int(d) for d in w.shape)
    group = int(node.attr("group", 1))
    geom = _geometry(node, w_shape[2:])
    dtype = np_dtype(x.elem_type) or F32
    act, act_node, out = p.activation_after(node)
    members = (act_node,) if act_node is not None else ()
    variant = _conv_variant(node, w_shape, group, geom, dtype)
    if isinstance(m, str):
        variant = f"none: QDQ conv but not pqs8_qc8w_gemm: {m}"
    st = p.kleidi(T.CONV2D, variant) if not variant.startswith("none") else None
    runtime_w = not (p.is_const(w.name) and p.is_const(None if b is None else b.name))
    strategy = conv_strategy(w_shape, group, geom)
    own_kernel = CONV_IMPL[strategy] + _act_text(act) + (" [weights packed per run: not "
                                                           "constant here]" if runtime_w else "")
    own = _label(node, T.CONV2D, variant, own_kernel + (_why(st) if st else ""), members)
    xin = p.use(x.name, CHANNELS_LAST)
    zin = [p.use(z.name, CHANNELS_LAST)] if z is not None else []

    def make_own(label: Label) -> Op:
        if runtime_w:
            return ConvOwn(label, None, None, group, geom, act, dtype, z is not None,
                           runtime_weights=True, runtime_bias=b is not None)
        return ConvOwn(label, p.const(w.name), p.const(None if b is None else b.name), group,
                       geom, act, dtype, z is not None)

    if runtime_w:
        ins = [xin, w.name] + ([b.name] if b is not None else []) + zin
        p.emit(node, own, lambda: make_own(own), ins, [(out, CHANNELS_LAST)], members)
        return
    if st is not None and st.available:
        k_label = _label(node, T.CONV2D, variant, f"kleidi:{st.kernel}" + _act_text(act),
                         members)
        label, make = p.try_kleidi(
            st, k_label, lambda mod, var: KleidiPointwiseConv(
                k_label, mod, var, p.const(w.name), p.const(None if b is None else b.name),
                geom.strides, act, z is not None, p.opt.threads), own, make_own)
    else:
        label, make = own, (lambda: make_own(own))
    p.emit(node, label, make, [xin, *zin], [(out, CHANNELS_LAST)], members)


def _zero_point(v: ValueInfo | None) -> int:
    return 0 if v is None else int(np.asarray(v.const).reshape(-1)[0])


def _qdq_parts(p: Planner, m: QdqMatch):
    """Multiplier, int32 / float bias, zero points and output dtype of a QDQ group."""
    xs = float(np.asarray(m.dq_x.input(1).const).reshape(-1)[0])
    xz = _zero_point(m.dq_x.input(2))
    wsc = np.asarray(m.dq_w.input(1).const, F32).reshape(-1)
    ys = float(np.asarray(m.q.input(1).const).reshape(-1)[0])
    yz = _zero_point(m.q.input(2))
    out_dtype = np_dtype(m.q.outputs[0].elem_type)
    mult = scale_multiplier(xs, wsc, ys)
    alpha = float(m.node.attr("alpha", 1.0)) if m.node.op_type == "Gemm" else 1.0
    beta = float(m.node.attr("beta", 1.0)) if m.node.op_type == "Gemm" else 1.0
    mult = mult * alpha
    bias_q = bias_f = None
    if m.dq_b is not None:
        bq = np.asarray(m.dq_b.input(0).const, np.float64).reshape(-1)
        bs = np.asarray(m.dq_b.input(1).const, F32).reshape(-1)
        acc_scale = (np.float32(xs) * wsc).astype(F32) * np.float32(alpha)
        if beta == 1.0 and bs.shape == acc_scale.shape and np.allclose(bs, acc_scale,
                                                                       rtol=1e-6, atol=0):
            bias_q = bq
        else:
            bias_f = bq * bs.astype(np.float64) * beta / ys
    elif m.bias is not None:
        bias_f = np.asarray(m.bias.const, np.float64).reshape(-1) * beta / ys
    return xz, mult, bias_q, bias_f, yz, out_dtype


def _pqs8(p: Planner, op_class: str) -> T.KleidiStatus:
    return p.kleidi(op_class, "pqs8_qc8w_gemm")


def _lower_qconv(p: Planner, node: NodeView, m: QdqMatch) -> None:
    w = m.dq_w.input(0)
    w_shape = tuple(int(d) for d in w.shape)
    group = int(node.attr("group", 1))
    geom = _geometry(node, w_shape[2:])
    st = _pqs8(p, T.CONV2D)
    members = [n for n in (m.q, m.relu) if n is not None]
    impl = QCONV_IMPL[conv_strategy(w_shape, group, geom)] + (" + Relu" if m.relu else "")
    label = _label(node, T.CONV2D, "pqs8_qc8w_gemm", impl + _why(st), members)

    def make() -> Op:
        xz, mult, bias_q, bias_f, yz, out_dtype = _qdq_parts(p, m)
        return QConvOwn(label, w.const, None, group, geom, xz, mult, bias_q, bias_f, yz,
                        out_dtype, m.relu is not None)

    xq = p.use(m.dq_x.input(0).name, CHANNELS_LAST)
    p.emit(node, label, make, [xq], [(m.q.outputs[0].name, CHANNELS_LAST)], members)


@lowers("QLinearConv")
def _lower_qlinear_conv(p: Planner, node: NodeView) -> None:
    w = node.input(3)
    w_shape = tuple(int(d) for d in w.shape)
    group = int(node.attr("group", 1))
    geom = _geometry(node, w_shape[2:])
    symmetric = w.elem_type == TP.INT8 and (node.input(5) is None or
                                            not np.any(node.input(5).const))
    st = _pqs8(p, T.CONV2D)
    variant = "pqs8_qc8w_gemm" if symmetric else \
        "none: uint8 or asymmetric weights (pqs8_qc8w needs int8 weights symmetric per channel)"
    impl = QCONV_IMPL[conv_strategy(w_shape, group, geom)]
    label = _label(node, T.CONV2D, variant, impl + (_why(st) if symmetric else ""))

    def make() -> Op:
        xs, xz = float(node.input(1).const), _zero_point(node.input(2))
        mult = scale_multiplier(xs, node.input(4).const, float(node.input(6).const))
        b = node.input(8)
        return QConvOwn(label, w.const, None if node.input(5) is None else node.input(5).const,
                        group, geom, xz, mult, None if b is None else b.const, None,
                        _zero_point(node.input(7)), np_dtype(node.outputs[0].elem_type),
                        False)

    p.emit(node, label, make, [p.use(node.input(0).name, CHANNELS_LAST)],
           [(node.outputs[0].name, CHANNELS_LAST)])


# ---- fully connected ---------------------------------------------------------------------------


@lowers("Gemm", "MatMul")
@lowers("FusedGemm", domain=MS)
def _lower_gemm(p: Planner, node: NodeView) -> None:
    a, b = node.input(0), node.input(1)
    if node.op_type == "MatMul" and not (p.is_const(b.name) and p.vals[b.name].rank == 2):
        return _lower_batch_matmul(p, node)
    m = p.qdq.get(node.index)
    if isinstance(m, QdqMatch):
        return _lower_qfc(p, node, m)
    gemm = node.op_type != "MatMul"
    c = node.input(2) if gemm else None
    trans_a = gemm and bool(int(node.attr("transA", 0)))
    trans_b = gemm and bool(int(node.attr("transB", 0)))
    alpha = float(node.attr("alpha", 1.0)) if gemm else 1.0
    beta = float(node.attr("beta", 1.0)) if gemm else 1.0
    dtype = np_dtype(a.elem_type) or F32
    act, act_node, out = p.activation_after(node)
    members = (act_node,) if act_node is not None else ()
    variant = "pf16_gemm" if dtype == F16 else "pf32_gemm"
    if isinstance(m, str):
        variant = f"none: QDQ {node.op_type} but not pqs8_qc8w_gemm: {m}"
    st = p.kleidi(T.FULLY_CONNECTED, variant) if not variant.startswith("none") else None
    own = _label(node, T.FULLY_CONNECTED, variant,
                 "own:gemm_blas" + _act_text(act) + (_why(st) if st else ""), members)

    def weights():
        w = np.asarray(p.const(b.name), F32)
        w = w.T if trans_b else w
        if alpha != 1.0:
            w = w * np.float32(alpha)
        n = w.shape[1]
        bias = c_post = None
        if c is not None:
            cv = np.asarray(p.const(c.name), F32) * np.float32(beta)
            if cv.ndim <= 1 or (cv.ndim == 2 and cv.shape[0] == 1):
                bias = np.ascontiguousarray(np.broadcast_to(cv.reshape(-1), (n,)))
            else:
                c_post = cv
        return w, bias, c_post

    def make_own(label: Label) -> Op:
        w, bias, c_post = weights()
        return FCOwn(label, w, bias, act, dtype, trans_a, c_post)

    if st is not None and st.available:
        k_label = _label(node, T.FULLY_CONNECTED, variant, f"kleidi:{st.kernel}" +
                         _act_text(act), members)

        def make_k(mod, var):
            w, bias, c_post = weights()
            return KleidiFC(k_label, mod, st.kernel.split("/")[0], var, w, bias, act, dtype,
                            p.opt.threads, trans_a, c_post)

        label, make = p.try_kleidi(st, k_label, make_k, own, make_own)
    else:
        label, make = own, (lambda: make_own(own))
    p.emit(node, label, make, [p.use(a.name, LOGICAL)], [(out, LOGICAL)], members)


def _lower_qfc(p: Planner, node: NodeView, m: QdqMatch) -> None:
    st = _pqs8(p, T.FULLY_CONNECTED)
    members = [n for n in (m.q, m.relu) if n is not None]
    label = _label(node, T.FULLY_CONNECTED, "pqs8_qc8w_gemm",
                   "own:int8_gemm" + (" + Relu" if m.relu else "") + _why(st), members)
    trans_b = node.op_type == "Gemm" and int(node.attr("transB", 0))

    def make() -> Op:
        xz, mult, bias_q, bias_f, yz, out_dtype = _qdq_parts(p, m)
        w = np.asarray(m.dq_w.input(0).const)
        return QFCOwn(label, w.T if trans_b else w, None, xz, mult, bias_q, bias_f, yz,
                      out_dtype, m.relu is not None)

    p.emit(node, label, make, [p.use(m.dq_x.input(0).name, LOGICAL)],
           [(m.q.outputs[0].name, LOGICAL)], members)


@lowers("QLinearMatMul")
def _lower_qlinear_matmul(p: Planner, node: NodeView) -> None:
    b = node.input(3)
    symmetric = b.elem_type == TP.INT8 and (node.input(5) is None or
                                            not np.any(node.input(5).const))
    st = _pqs8(p, T.FULLY_CONNECTED)
    variant = "pqs8_qc8w_gemm" if symmetric else \
        "none: uint8 or asymmetric weights (pqs8_qc8w needs int8 weights symmetric per channel)"
    label = _label(node, T.FULLY_CONNECTED, variant,
                   "own:int8_gemm" + (_why(st) if symmetric else ""))

    def make() -> Op:
        xs, xz = float(node.input(1).const), _zero_point(node.input(2))
        mult = scale_multiplier(xs, node.input(4).const, float(node.input(6).const))
        return QFCOwn(label, b.const, None if node.input(5) is None else node.input(5).const,
                      xz, mult, None, None, _zero_point(node.input(7)),
                      np_dtype(node.outputs[0].elem_type), False)

    p.emit(node, label, make, [p.use(node.input(0).name, LOGICAL)],
           [(node.outputs[0].name, LOGICAL)])


def _lower_batch_matmul(p: Planner, node: NodeView) -> None:
    a, b = node.input(0), node.input(1)
    dtype = np_dtype(a.elem_type) or F32
    variant = "pf16_gemm" if dtype == F16 else "pf32_gemm"
    st = p.kleidi(T.BATCH_MATMUL, variant)
    own = _label(node, T.BATCH_MATMUL, variant, "own:matmul_blas" + _why(st))
    if st.available:
        k_label = _label(node, T.BATCH_MATMUL, variant, f"kleidi:{st.kernel}")
        label, make = p.try_kleidi(
            st, k_label, lambda mod, var: KleidiBatchMatMul(k_label, mod, st.kernel.split("/")[0],
                                                        var, dtype, p.opt.threads),
            own, lambda lab: BatchMatMulOwn(lab, dtype))
    else:
        label, make = own, (lambda: BatchMatMulOwn(own, dtype))
    p.emit(node, label, make, [p.use(a.name, LOGICAL), p.use(b.name, LOGICAL)],
           [(node.outputs[0].name, LOGICAL)])


def _qc8w_problem(w: ValueInfo, z: ValueInfo | None, s: ValueInfo) -> str | None:
    if w.elem_type != TP.INT8:
        return "the weights are uint8 (qc8w needs int8 weights symmetric per channel)"
    if z is not None and np.any(z.const != 0):
        return "the weight zero point is not 0 (asymmetric weights)"
    n = w.const.shape[1]
    if s.const.size not in (1, n):
        return "the weight scale is neither per tensor nor per output channel"
    return None


@lowers("DynamicQuantizeMatMul", domain=MS)
def _lower_dynamic_quantize_matmul(p: Planner, node: NodeView) -> None:
    a, w, s, z, bias = (node.input(i) for i in range(5))
    why = _qc8w_problem(w, z, s)
    variant = "qp8_f32_qc8w_gemm" if why is None else f"none: {why}"
    st = p.kleidi(T.FULLY_CONNECTED, variant) if why is None else None
    act, act_node, out = p.activation_after(node)
    own = _label(node, T.FULLY_CONNECTED, variant,
                 "own:uint8_dynamic_gemm (ONNX per-tensor uint8 semantics)" + (_why(st) if st
                                                                                else ""))

    def make_own(label: Label) -> Op:
        return DynQuantFCOwn(label, w.const, s.const, None if z is None else z.const,
                             None if bias is None else bias.const, act)

    if st is not None and st.available:
        k_label = _label(node, T.FULLY_CONNECTED, variant, f"kleidi:{st.kernel} (per-row "
                         "int8 activations)")
        label, make = p.try_kleidi(
            st, k_label, lambda mod, var: KleidiDynQuantFC(
                k_label, mod, var, w.const, s.const, None if bias is None else bias.const,
                act, p.opt.threads), own, make_own)
    else:
        label, make = own, (lambda: make_own(own))
    p.emit(node, label, make, [p.use(a.name, LOGICAL)], [(out, LOGICAL)])


def _nbits_problem(node: NodeView) -> str | None:
    k, bs = int(node.attr("K")), int(node.attr("block_size"))
    if bs < 32 or bs % 32:
        return f"block_size={bs}: qb4w needs a multiple of 32"
    if k % bs:
        return f"block_size={bs} does not divide K={k}"
    z = node.input(3)
    if z is not None:
        if z.elem_type != TP.UINT8:
            return "float zero points (qb4w needs symmetric weights)"
        if np.any(np.asarray(z.const) != 0x88):
            return "zero points other than 8 (asymmetric int4)"
    return None


@lowers("MatMulNBits", domain=MS)
def _lower_matmul_nbits(p: Planner, node: NodeView) -> None:
    k, n, bs = int(node.attr("K")), int(node.attr("N")), int(node.attr("block_size"))
    b, scales, z, bias = node.input(1), node.input(2), node.input(3), node.input(5)
    why = _nbits_problem(node)
    variant = "qp8_f32_qb4w_gemm" if why is None else f"none: {why}"
    st = p.kleidi(T.FULLY_CONNECTED, variant) if why is None else None
    own = _label(node, T.FULLY_CONNECTED, variant,
                 "own:gemm_blas (int4 dequantized at compile time)" + (_why(st) if st else ""))

    def make_own(label: Label) -> Op:
        w = dequantize_nbits(b.const, scales.const, None if z is None else z.const, k, n, bs)
        return FCOwn(label, w, None if bias is None else bias.const, Activation(), F32)

    if st is not None and st.available:
        k_label = _label(node, T.FULLY_CONNECTED, variant, f"kleidi:{st.kernel}")
        label, make = p.try_kleidi(
            st, k_label, lambda mod, var: KleidiNBits(
                k_label, mod, var, b.const, scales.const, None if z is None else z.const,
                None if bias is None else bias.const, k, n, bs, p.opt.threads), own, make_own)
    else:
        label, make = own, (lambda: make_own(own))
    p.emit(node, label, make, [p.use(node.input(0).name, LOGICAL)],
           [(node.outputs[0].name, LOGICAL)])


@lowers("MatMulInteger")
def _lower_matmul_integer(p: Planner, node: NodeView) -> None:
    chain = p.dyn.get(node.index)
    if chain is not None:
        return _lower_dyn_chain(p, node, chain)
    label = _label(node, T.FULLY_CONNECTED, "none: not a DynamicQuantizeLinear -> "
                   "MatMulInteger -> Cast -> Mul chain with int8 symmetric weights",
                   "own:int_gemm")
    ins = [p.use(v.name, LOGICAL) if v is not None else None for v in node.inputs]
    p.emit(node, label, lambda: MatMulIntegerOwn(label), ins,
           [(node.outputs[0].name, LOGICAL)])


@lowers("MatMulIntegerToFloat", domain=MS)
def _lower_matmul_integer_to_float(p: Planner, node: NodeView) -> None:
    chain = p.dyn.get(node.index)
    if chain is not None:
        return _lower_dyn_chain(p, node, chain)
    label = _label(node, T.FULLY_CONNECTED, "none: its input is not quantized by a "
                   "DynamicQuantizeLinear in the partition with int8 symmetric weights",
                   "own:int_gemm_to_float")
    ins = [p.use(v.name, LOGICAL) if v is not None else None for v in node.inputs]
    p.emit(node, label, lambda: MatMulIntegerToFloatOwn(label), ins,
           [(node.outputs[0].name, LOGICAL)])


def _lower_dyn_chain(p: Planner, node: NodeView, chain: DynChain) -> None:
    st = p.kleidi(T.FULLY_CONNECTED, "qp8_f32_qc8w_gemm")
    if not st.available:
        # The unfused ops run on the own path with ONNX's exact semantics.
        impl = "own:int_gemm" if node.op_type == "MatMulInteger" else "own:int_gemm_to_float"
        label = _label(node, T.FULLY_CONNECTED, "qp8_f32_qc8w_gemm",
                       f"{impl} (unfused ONNX ops, exact){_why(st)}")
        ins = [p.use(v.name, LOGICAL) if v is not None else None for v in node.inputs]
        op = MatMulIntegerOwn if node.op_type == "MatMulInteger" else MatMulIntegerToFloatOwn
        p.emit(node, label, lambda: op(label), ins, [(node.outputs[0].name, LOGICAL)])
        return
    members = chain.nodes[1:]
    label = _label(node, T.FULLY_CONNECTED, "qp8_f32_qc8w_gemm",
                   f"kleidi:{st.kernel} (per-row int8 activations)", members)

    def make() -> Op:
        mod, _ = T.native()
        return KleidiDynQuantFC(label, mod, st.kernel.split("/")[-1], chain.weight,
                                chain.w_scale, chain.bias, Activation(), p.opt.threads)

    p.emit(node, label, make, [p.use(chain.dql.input(0).name, LOGICAL)],
           [(chain.output, LOGICAL)], members)


# ---- elementwise -------------------------------------------------------------------------------


def _out_layout(p: Planner, node: NodeView, names: Sequence[str]) -> str:
    """Channels-last when the (rank-4) result has a computed channels-last rank-4 operand."""
    if p.rank_of(node.outputs[0]) != 4:
        return LOGICAL
    for n in names:
        v = p.vals[n]
        if v.rank == 4 and not v.is_const and v.layout == CHANNELS_LAST:
            return CHANNELS_LAST
    return LOGICAL


@lowers("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min")
def _lower_binary(p: Planner, node: NodeView) -> None:
    names = [node.input(0).name, node.input(1).name]
    layout = _out_layout(p, node, names)
    dtype = np_dtype(node.outputs[0].elem_type) or F32
    ins, lift = [], []
    for n in names:
        v = p.vals[n]
        if v.rank == 4:
            ins.append(p.use(n, layout))
            lift.append(False)
        elif layout == CHANNELS_LAST and v.is_const:
            ins.append(p.lifted_const(n))
            lift.append(False)
        else:
            ins.append(n)
            lift.append(layout == CHANNELS_LAST)
    for k, n in enumerate(ins):   # constants take the op's dtype once, here
        v = p.vals[n]
        if v.const is not None and v.const.dtype != dtype:
            cast = f"{n}@{dtype}"
            if cast not in p.vals:
                p.vals[cast] = Val(v.rank, dtype, v.layout, v.const.astype(dtype), True)
            ins[k] = cast
    impl = "own:binary_nhwc" if layout == CHANNELS_LAST else "own:binary"
    label = _label(node, "elementwise", "", impl)
    p.emit(node, label, lambda: BinaryOp(label, node.op_type, tuple(lift), dtype), ins,
           [(node.outputs[0].name, layout)])


def _same_layout(p: Planner, node: NodeView) -> str:
    return p.vals[node.input(0).name].layout


@lowers("Relu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "LeakyRelu", "Elu", "Erf",
        "Sqrt", "Neg", "Abs", "Exp", "Reciprocal", "Softplus", "Softsign", "Clip", "Gelu")
@lowers("Gelu", domain=MS)
def _lower_unary(p: Planner, node: NodeView) -> None:
    act = _act_of(node) or Activation(node.op_type)
    layout = _same_layout(p, node)
    label = _label(node, "elementwise", "", f"own:unary_{act.kind.lower()}")
    p.emit(node, label, lambda: UnaryOp(label, act.kind, act.params), [node.input(0).name],
           [(node.outputs[0].name, layout)])


@lowers("BiasGelu", "FastGelu", domain=MS)
def _lower_bias_gelu(p: Planner, node: NodeView) -> None:
    kind = "GeluTanh" if node.op_type == "FastGelu" else "Gelu"
    x, b = node.input(0), node.input(1)
    layout = LOGICAL if p.vals[x.name].rank == 4 else p.vals[x.name].layout
    label = _label(node, "elementwise", "", f"own:bias_{kind.lower()}")
    ins = [p.use(x.name, layout)] + ([b.name] if b is not None else [])
    p.emit(node, label, lambda: BiasActivationOp(label, kind), ins,
           [(node.outputs[0].name, layout)])


@lowers("BatchNormalization")
def _lower_batchnorm(p: Planner, node: NodeView) -> None:
    x = node.input(0)
    layout = _same_layout(p, node)
    rank = p.vals[x.name].rank
    act, act_node, out = p.activation_after(node)
    members = (act_node,) if act_node is not None else ()
    label = _label(node, "elementwise", "", "own:affine_channels" + _act_text(act), members)

    def make() -> Op:
        sc, b, mean, var = (np.asarray(p.const(node.input(i).name), np.float64)
                            for i in (1, 2, 3, 4))
        eps = float(node.attr("epsilon", 1e-5))
        scale = sc / np.sqrt(var + eps)
        shift = b - mean * scale
        shape = [1] * rank
        shape[phys_axis(1, rank, layout)] = scale.size
        return AffineChannelOp(label, scale.astype(F32).reshape(shape),
                               shift.astype(F32).reshape(shape), act)

    p.emit(node, label, make, [x.name], [(out, layout)], members)


@lowers("LayerNormalization")
def _lower_layernorm(p: Planner, node: NodeView) -> None:
    x = node.input(0)
    rank = p.vals[x.name].rank
    axis = int(node.attr("axis", -1)) % rank
    label = _label(node, "normalization", "", "own:layer_norm")
    ins = [p.use(x.name, LOGICAL)] + [v.name for v in node.inputs[1:3] if v is not None]
    p.emit(node, label, lambda: LayerNormOp(label, axis, float(node.attr("epsilon", 1e-5))),
           ins, [(node.outputs[0].name, LOGICAL)])


@lowers("Softmax")
def _lower_softmax(p: Planner, node: NodeView) -> None:
    x = node.input(0)
    rank = p.vals[x.name].rank
    coerced = node.opset < 13
    axis = int(node.attr("axis", 1 if coerced else -1)) % max(rank, 1)
    layout = LOGICAL if coerced else _same_layout(p, node)
    label = _label(node, "softmax", "", "own:softmax" + ("_2d" if coerced else ""))
    xin = p.use(x.name, layout)
    pax = axis if coerced else phys_axis(axis, rank, layout)
    p.emit(node, label, lambda: SoftmaxOp(label, pax, coerced), [xin],
           [(node.outputs[0].name, layout)])


@lowers("Cast")
def _lower_cast(p: Planner, node: NodeView) -> None:
    to = np_dtype(int(node.attr("to")))
    label = _label(node, "elementwise", "", f"own:cast_{to}")
    p.emit(node, label, lambda: CastOp(label, to), [node.input(0).name],
           [(node.outputs[0].name, _same_layout(p, node))])


# ---- quantization ------------------------------------------------------------------------------


def _q_axis(p: Planner, node: NodeView) -> tuple[int, str]:
    x = node.input(0)
    rank = max(p.vals[x.name].rank or 0, 1)
    layout = _same_layout(p, node)
    axis = int(node.attr("axis", 1)) % rank
    return phys_axis(axis, rank, layout), layout


@lowers("QuantizeLinear")
def _lower_quantize(p: Planner, node: NodeView) -> None:
    axis, layout = _q_axis(p, node)
    out_dtype = np_dtype(node.outputs[0].elem_type)
    label = _label(node, "quantization", "", "own:quantize")
    ins = [v.name if v is not None else None for v in node.inputs[:3]]
    p.emit(node, label, lambda: QuantizeOp(label, axis, out_dtype), ins,
           [(node.outputs[0].name, layout)])


@lowers("DequantizeLinear")
def _lower_dequantize(p: Planner, node: NodeView) -> None:
    axis, layout = _q_axis(p, node)
    out_dtype = np_dtype(node.outputs[0].elem_type) or F32
    label = _label(node, "quantization", "", "own:dequantize")
    ins = [v.name if v is not None else None for v in node.inputs[:3]]
    p.emit(node, label, lambda: DequantizeOp(label, axis, out_dtype), ins,
           [(node.outputs[0].name, layout)])


@lowers("DynamicQuantizeLinear")
def _lower_dynamic_quantize_linear(p: Planner, node: NodeView) -> None:
    layout = _same_layout(p, node)
    label = _label(node, "quantization", "", "own:dynamic_quantize_uint8")
    outs = [(o.name if o is not None else "", layout if k == 0 else LOGICAL)
            for k, o in enumerate(node.outputs)]
    p.emit(node, label, lambda: DynamicQuantizeOp(label), [node.input(0).name], outs)


# ---- pooling and reductions ------------------------------------------------------------------


@lowers("MaxPool", "AveragePool")
def _lower_pool(p: Planner, node: NodeView) -> None:
    geom = ConvGeometry(node.attr("kernel_shape"), node.attr("strides", None),
                        node.attr("dilations", None), node.attr("pads", None),
                        s_attr(node, "auto_pad", "NOTSET"), bool(int(node.attr("ceil_mode", 0))))
    kh, kw = geom.kernel
    if node.op_type == "MaxPool":
        label = _label(node, "pooling", "", f"own:max_pool_{kh}x{kw}_taps")

        def make() -> Op:
            return MaxPoolOp(label, geom)
    else:
        include = bool(int(node.attr("count_include_pad", 0)))
        label = _label(node, "pooling", "", f"own:avg_pool_{kh}x{kw}_taps")

        def make() -> Op:
            return AveragePoolOp(label, geom, include)
    p.emit(node, label, make, [p.use(node.input(0).name, CHANNELS_LAST)],
           [(node.outputs[0].name, CHANNELS_LAST)])


@lowers("GlobalAveragePool", "GlobalMaxPool")
def _lower_global_pool(p: Planner, node: NodeView) -> None:
    kind = "mean" if node.op_type == "GlobalAveragePool" else "max"
    label = _label(node, "pooling", "", f"own:global_{kind}_nhwc")
    p.emit(node, label, lambda: ReduceOp(label, kind, (1, 2), None, False),
           [p.use(node.input(0).name, CHANNELS_LAST)],
           [(node.outputs[0].name, CHANNELS_LAST)])


@lowers("ReduceMean", "ReduceMax", "ReduceSum")
def _lower_reduce(p: Planner, node: NodeView) -> None:
    x = node.input(0)
    v = p.vals[x.name]
    rank = v.rank
    if node.input(1) is not None:
        axes = [int(a) for a in np.asarray(node.input(1).const).reshape(-1)]
    else:
        axes = [int(a) for a in (node.attr("axes", None) or ())]
    keep = bool(int(node.attr("keepdims", 1)))
    kind = node.op_type[len("Reduce"):].lower()
    if not axes:
        if int(node.attr("noop_with_empty_axes", 0)):
            label = _label(node, "reduction", "", "own:identity")
            p.emit(node, label, lambda: ViewOp(label, None), [x.name],
                   [(node.outputs[0].name, v.layout)])
            return
        axes = list(range(rank))
    axes = sorted({a % rank for a in axes})
    layout = v.layout if rank == 4 else LOGICAL
    phys = tuple(sorted(phys_axis(a, rank, layout) for a in axes))
    squeeze = None if keep else tuple(axes)
    to_logical = not keep and layout == CHANNELS_LAST
    out_layout = layout if keep else LOGICAL
    label = _label(node, "reduction", "", f"own:reduce_{kind}" + ("_nhwc" if layout ==
                                                                  CHANNELS_LAST else ""))
    p.emit(node, label, lambda: ReduceOp(label, kind, phys, squeeze, to_logical), [x.name],
           [(node.outputs[0].name, out_layout)])


# ---- shape ops ---------------------------------------------------------------------------------


@lowers("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _lower_reshape(p: Planner, node: NodeView) -> None:
    x = node.input(0)
    op = node.op_type
    rank = p.vals[x.name].rank
    kw: dict[str, Any] = {}
    ins = [p.use(x.name, LOGICAL)]
    if op == "Reshape":
        shape = p.const(node.input(1).name)
        kw = {"shape": None if shape is None else np.asarray(shape).reshape(-1).tolist(),
              "allowzero": bool(int(node.attr("allowzero", 0)))}
        if shape is None:          # computed at run time (by another partition)
            ins.append(node.input(1).name)
    elif op == "Flatten":
        axis = int(node.attr("axis", 1))
        kw = {"flatten_axis": axis + rank if axis < 0 else axis}
    else:
        if node.opset >= 13:
            a = node.input(1)
            axes = () if a is None else tuple(int(v) for v in np.asarray(a.const).reshape(-1))
        else:
            axes = tuple(int(v) for v in (node.attr("axes", None) or ()))
        kw = {"squeeze" if op == "Squeeze" else "unsqueeze": axes}
    label = _label(node, "shape", "", f"own:{op.lower()}_view")
    p.emit(node, label, lambda: ReshapeOp(label, **kw), ins, [(node.outputs[0].name, LOGICAL)])


@lowers("Transpose")
def _lower_transpose(p: Planner, node: NodeView) -> None:
    x = node.input(0)
    v = p.vals[x.name]
    rank = v.rank
    perm = tuple(int(a) for a in (node.attr("perm", None) or range(rank - 1, -1, -1)))
    if rank == 4 and v.layout == CHANNELS_LAST:
        perm = tuple(TO_L[a] for a in perm)     # logical = physical.transpose(TO_L)
    label = _label(node, "shape", "", "own:transpose_view")
    p.emit(node, label, lambda: ViewOp(label, perm), [x.name],
           [(node.outputs[0].name, LOGICAL)])


@lowers("Identity")
def _lower_identity(p: Planner, node: NodeView) -> None:
    label = _label(node, "shape", "", "own:identity")
    p.emit(node, label, lambda: ViewOp(label, None), [node.input(0).name],
           [(node.outputs[0].name, _same_layout(p, node))])


@lowers("Concat")
def _lower_concat(p: Planner, node: NodeView) -> None:
    names = [v.name for v in node.inputs if v is not None]
    layout = _out_layout(p, node, names)
    rank = p.rank_of(node.outputs[0])
    axis = phys_axis(int(node.attr("axis")) % rank, rank, layout)
    label = _label(node, "shape", "", "own:concat" + ("_nhwc" if layout == CHANNELS_LAST
                                                      else ""))
    p.emit(node, label, lambda: ConcatOp(label, axis), [p.use(n, layout) for n in names],
           [(node.outputs[0].name, layout)])
