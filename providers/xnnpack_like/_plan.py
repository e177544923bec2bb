"""The partition planner: a claimed group of nodes becomes a list of ops over value slots.

Planning happens twice with the same code: in ``get_capability`` (``dry``: nothing is packed,
only what each node will run as is decided, for the placement report) and in ``compile``. It

* tracks the layout of every rank-4 value: ``C`` (channels-last, NHWC) or ``L`` (ONNX's logical
  order). Partition inputs of rank 4 arrive channels-last (the core converts at the boundary)
  and rank-4 outputs leave channels-last; inside, conv / pooling want ``C``, reshapes and
  matmuls want ``L``, elementwise ops follow their inputs; a conversion (a transposed view) is
  inserted once per value and layout where a consumer needs the other one;
* finds fusion patterns first (``_patterns``: QDQ groups, dynamic int8 chains, conv / gemm
  epilogues with a folded BatchNorm, a residual Add and an activation);
* lowers node by node (``_lower``: each conv / fully-connected / batch-matmul node is matched
  against its variant table in ``_tables`` and gets the Kleidi kernel or the own one);
* folds nodes whose inputs are all constants at compile time, drops ops whose results nobody
  needs, and writes the per-node notes of the placement report. The runtime object
  (``_runtime``) then numbers the slots, finds each one's last reader and which inputs an op
  may overwrite in place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import TensorProto as TP

from onnxplex import NodeView, ValueInfo

from . import _mlas
from . import _tables as T
from ._ops_base import CHANNELS_LAST, F16, F32, LOGICAL, TO_C, TO_L, Label, Op, Workspace
from ._ops_elementwise import lift_to_c
from ._ops_pool import ViewOp
from ._patterns import Patterns

logger = logging.getLogger(__name__)

_NP = {TP.FLOAT: F32, TP.FLOAT16: F16, TP.INT8: np.dtype(np.int8),
       TP.UINT8: np.dtype(np.uint8), TP.INT32: np.dtype(np.int32),
       TP.INT64: np.dtype(np.int64)}



@dataclass
class PlanOptions:
    kleidi: bool = True          # provider option: use Kleidi kernels where they run
    forced: bool = False         # reference variants forced (environment / option)
    threads: int = 1             # threads per Kleidi call
    mlas: bool = True            # cpu_mlas's native kernels where no Kleidi kernel runs


@dataclass
class Val:
    """What the planner knows of a value: rank, dtype, layout, and the constant behind it
    (``const``, held in the value's layout, in compile mode; ``is_const`` also in dry mode,
    where nothing is computed)."""

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


def np_dtype(elem: int | None) -> np.dtype | None:
    return None if elem is None else _NP.get(elem)


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

    def mlas(self) -> bool:
        """Whether ops matching no runnable Kleidi kernel run on cpu_mlas's native ones."""
        return self.opt.mlas and _mlas.kernels()[0] is not None

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
        dyn_ok = self.kleidi(T.FULLY_CONNECTED, "qp8_f32_qc8w_gemm").available
        self.pat = Patterns(self.nodes, self.out_names, dyn_ok)
        for node in self.nodes:
            root = self.pat.emit_at.get(node.index)
            if root is not None:              # a fused op waiting for its last input
                LOWER[(root.domain, root.op_type)](self, root)
                continue
            if node.index in self.pat.skip:
                continue
            consts = [x for x in node.inputs if x is not None]
            if consts and all(self.is_const(x.name) for x in consts) and \
                    node.index not in self.pat.roots:
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
            root = self.labels.get(self.pat.feeds.get(i, -1))
            if i in self.member_of:
                target = self.member_of[i]
                self.notes[i] = f"folded into '{target.name}' -> {target.kernel_name}"
            elif lab is None:
                continue
            elif i in live:
                self.notes[i] = lab.note()
            elif lab.op_class == "constant" and any(o is not None and o.name in read
                                                    for o in node.outputs):
                self.notes[i] = ("computed at compile time (all inputs constant) -> "
                                 "own:compile_time_constant")
            elif root is not None:
                self.notes[i] = f"folded into '{root.name}' -> {root.kernel_name}"
            else:
                self.notes[i] = f"{lab.op_class}: result not needed -> own:not_run"

    # ---- patterns ----------------------------------------------------------------------------


LOWER: dict[tuple[str, str], Callable[[Planner, NodeView], None]] = {}


def lowers(*keys: str, domain: str = ""):
    def deco(fn):
        for k in keys:
            LOWER[(domain, k)] = fn
        return fn
    return deco
