"""The xnnpack_like provider: an XNNPACK / ExecuTorch-style NHWC delegate.

It claims maximal convex groups of the nodes it supports (``_support``) and compiles each group
into one runtime object (``_runtime.CompiledPartition``) that runs the whole group per call:
weights are packed once per session, rank-4 tensors stay channels-last inside the partition
(``preferred_layout = "NHWC"``: the core transposes only at partition boundaries), internal
buffers are planned once, and no per-run state is kept (concurrent ``run`` calls are safe).

Conv, fully-connected and batch-matmul nodes are matched against XNNPACK-style variant tables
(``_tables``); a node matching a variant runs its Kleidi micro-kernel when that kernel runs on
this CPU, otherwise cpu_mlas's native kernel where it has one (``_mlas``: x86's fast path for
float convs, GEMMs, matmuls, max pools and reductions), otherwise the provider's own numpy
implementation -- never an error. On x86 without cpu_mlas's native module, the float ops only
those kernels make fast are declined, with that reason, and run on cpu_mlas. The placement
report shows, per node, the matched variant (or ``none: <why>``) and the kernel actually used;
with session profiling on, each partition also reports one event per internal op.

Tolerances against ``cpu_mlas`` (checked by ``tests/providers/xnnpack_like``):

* float32: the same math in another summation order (and BatchNorm folded into the weights)
  -- about 1e-6 relative to the output's scale on ResNet-50 / MobileNetV2, tested at 1e-4;
* float16: both providers compute conv / GEMM in float32; cpu_mlas rounds each op's result to
  float16 below the extended optimization level and, from it on, computes the whole
  half-precision region in float32, rounding only at its edges; this provider rounds a conv
  once after its folded BatchNorm / residual / activation epilogue; deep networks carry the
  difference forward: about 1e-3 of the output's scale, tested at 1e-2;
* QDQ int8: integer accumulation is exact on both sides and the requantization uses the same
  float32 multiplier with round-half-to-even; ops the reference runs through float
  (DequantizeLinear -> float op -> QuantizeLinear) may round a tie differently, so outputs may
  differ by one quantization step;
* Kleidi ``qp8_f32_qc8w_gemm`` quantizes activations per row to int8 where ONNX's dynamic
  quantization is per tensor uint8: about one activation step times ``sum |w|`` per output.
"""

from __future__ import annotations

import logging
from typing import Any

from onnxplex import (
    Availability,
    Capability,
    CompileError,
    Decline,
    ExecutionProvider,
    GraphView,
    NodeGroup,
    NodeView,
    Option,
    ProviderContext,
    Subgraph,
    ValueInfo,
    convex_groups,
)

from . import (
    _lower,  # noqa: F401 - registers the lowering of every supported op
    _mlas,
)
from . import _tables as T
from ._ops_base import CHANNELS_LAST, LOGICAL
from ._plan import Plan, Planner, PlanOptions
from ._runtime import CompiledPartition
from ._support import check, const_like, infer_ranks

logger = logging.getLogger(__name__)


def _flattened_from(graph: GraphView, node: Any, rank: Any) -> int | None:
    """The rank of the tensor a Reshape turned a GEMM's first input into rank 2 from, when it
    did (None otherwise)."""
    if node.op_type not in ("Gemm", "MatMul") or node.domain:
        return None
    x = node.input(0)
    src = None if x is None else graph.producer(x.name)
    if src is None or src.op_type != "Reshape" or src.domain:
        return None
    return rank(src.input(0))


class XnnpackLikeProvider(ExecutionProvider):
    """NHWC delegate compiling whole partitions, with Kleidi-eligibility tables."""

    name = "xnnpack_like"
    preferred_layout = "NHWC"
    # Runs only when a session names it (as onnxruntime's XNNPACK EP): it changes the layout
    # and, where Kleidi kernels run, the numerics of dynamic quantization.
    opt_in = True
    option_specs = {
        "kleidi": Option(True, bool, "run the Kleidi micro-kernel of a matched variant where "
                                     "it runs on this CPU; 0: own implementations only"),
        "force_reference": Option(False, bool, "use the Kleidi library's portable reference "
                                               "variants where dispatch selected none (e.g. on "
                                               f"x86), as {T.FORCE_ENV}=1 does"),
        "mlas": Option(True, bool, "where no Kleidi kernel runs, run convolutions, GEMMs and "
                                   "max pools on cpu_mlas's native kernels, and on x86 decline "
                                   "what would run slower than on cpu_mlas; 0: own "
                                   f"implementations only, as {_mlas.MLAS_ENV}=0 does"),
        "claim_float32_on_x86": Option(False, bool, "on x86, claim the partitions no Kleidi "
                                                    "kernel runs in (float32, half precision "
                                                    "or 8-bit; cpu_mlas runs them faster; for "
                                                    "testing the delegate), as "
                                                    f"{_mlas.CLAIM_FLOAT32_ENV}=1 does"),
    }

    @classmethod
    def available(cls, options: dict[str, Any] | None = None) -> Availability:
        """Always: the own implementations are numpy; Kleidi kernels are an optional speedup."""
        return Availability(True)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """Per op class and variant: what it matches and whether its Kleidi kernel runs here."""
        mod, why = T.native()
        fast, no_fast = _mlas.kernels()
        return {"layout": "NHWC inside partitions",
                "kleidi_extension": "importable" if mod is not None else why,
                "cpu_mlas_kernels": "importable" if fast is not None else no_fast,
                "force_reference_env": T.env_forced(),
                "variants": T.describe_tables()}

    def __init__(self, options: dict[str, Any] | None = None, *,
                 context: ProviderContext | None = None) -> None:
        super().__init__(options, context=context)
        threads = int(self.context.intra_op_num_threads or 0)
        self._plan_options = PlanOptions(
            kleidi=bool(self.options["kleidi"]),
            forced=bool(self.options["force_reference"]) or T.env_forced(),
            threads=max(1, threads),
            mlas=bool(self.options["mlas"]) and _mlas.env_enabled())
        self._claim_float32 = (bool(self.options["claim_float32_on_x86"])
                               or _mlas.claim_float32_env())
        # Ranks of values onnx shape inference could not type (com.microsoft ops), found by
        # get_capability and used again by compile.
        self._ranks: dict[str, int] = {}

    def variant_status(self, op_class: str, variant: str) -> T.KleidiStatus:
        """Whether this provider instance runs ``variant`` of ``op_class`` on Kleidi."""
        return T.kleidi_status(T.variant(op_class, variant), forced=self._plan_options.forced,
                               enabled=self._plan_options.kleidi)

    # ---- get_capability ------------------------------------------------------------------------

    def get_capability(self, graph: GraphView) -> Capability:
        supported: list[int] = []
        declined: list[Decline] = []
        ranks = infer_ranks(graph.nodes)
        self._ranks.update(ranks)
        slower = self._plan_options.mlas and _mlas.is_x86()

        def rank(v: ValueInfo | None) -> int | None:
            return None if v is None else v.rank if v.rank is not None else ranks.get(v.name)

        for node in graph.nodes:
            why = check(node, graph, ranks)
            if why is None and slower:
                why = _mlas.slower_on_x86(node, rank, const_like(graph, node.input(1))
                                          if node.op_type == "MatMul" else False,
                                          _flattened_from(graph, node, rank))
            if why is None:
                supported.append(node.index)
            else:
                declined.append(Decline(node.index, why))
        # The x86 rule needs the plan's Kleidi ops only when the reference variants are
        # forced: otherwise x86 selects none, and a group it declines is not planned.
        x86_rule = slower and not self._claim_float32
        forced = self._plan_options.forced
        groups: list[NodeGroup] = []
        for nodes in convex_groups(graph, supported):
            views = [graph.node(i) for i in nodes]
            why = (_mlas.light_group_reason(views) or _mlas.small_group_reason(views)
                   if slower else None)
            if why is None and x86_rule and not forced:
                why = _mlas.x86_group_reason(views, 0)
            if why is not None:
                declined.extend(Decline(i, why) for i in nodes)
                continue
            ins, outs = _group_io(graph, views)
            try:
                plan = Planner(views, ins, outs, self._plan_options, dry=True,
                               name=self.name, ranks=ranks).plan()
            except Exception as e:  # noqa: BLE001 - a planning gap declines, never crashes
                logger.warning("%s: cannot plan the group of nodes %s: %s: %s", self.name,
                               list(nodes), type(e).__name__, e)
                declined.extend(Decline(i, f"the delegate could not plan its group "
                                           f"({type(e).__name__}: {e})") for i in nodes)
                continue
            why = (_mlas.x86_group_reason(views, _kleidi_ops(plan))
                   if x86_rule and forced else None)
            if why is not None:
                declined.extend(Decline(i, why) for i in nodes)
                continue
            name = f"{self.name}_{len(groups)}"
            groups.append(NodeGroup(tuple(nodes), name=name, note=_summary(plan, len(nodes)),
                                    node_notes=plan.notes))
        return Capability(tuple(groups), tuple(declined))

    # ---- compile -------------------------------------------------------------------------------

    def compile(self, subgraph: Subgraph) -> CompiledPartition:
        first = subgraph.nodes[0]
        try:
            plan = Planner(subgraph.nodes, subgraph.inputs, subgraph.outputs, self._plan_options,
                           dry=False, name=subgraph.name,
                           boundary=CHANNELS_LAST if subgraph.layout == "NHWC" else LOGICAL,
                           ranks=self._ranks).plan()
            kernel = CompiledPartition(subgraph.name, self.name, plan)
        except Exception as e:  # noqa: BLE001 - attributed to the provider and the group
            raise CompileError(f"{self.name}: cannot compile partition '{subgraph.name}' "
                               f"({len(subgraph.nodes)} nodes, first {first.display_name} "
                               f"{first.op_type}): {type(e).__name__}: {e}",
                               provider=self.name, node=first.display_name,
                               op_type=first.op_type) from e
        logger.debug("%s: compiled %s: %s", self.name, subgraph.name, _summary(plan, len(
            subgraph.nodes)))
        return kernel


def _group_io(graph: GraphView, views: list[NodeView]
              ) -> tuple[list[ValueInfo | None], list[ValueInfo | None]]:
    """The inputs and outputs ``compile`` will see for a group (as the core builds them)."""
    if len(views) == 1:
        return list(views[0].inputs), list(views[0].outputs)
    members = {v.index for v in views}
    produced = {o.name for v in views for o in v.outputs if o is not None}
    graph_outputs = {v.name for v in graph.outputs}
    ins: list[ValueInfo | None] = []
    seen: set[str] = set()
    for v in views:
        for x in v.inputs:
            if x is not None and x.name not in produced and x.name not in seen:
                seen.add(x.name)
                ins.append(x)
    outs: list[ValueInfo | None] = []
    for v in views:
        for o in v.outputs:
            if o is None:
                continue
            if o.name in graph_outputs or any(c.index not in members
                                              for c in graph.consumers(o.name)):
                outs.append(o)
    return ins, outs


def _kleidi_ops(plan: Plan) -> int:
    """How many of the plan's ops run a Kleidi kernel."""
    return sum(st.label.kernel.startswith("kleidi:") for st in plan.steps
               if st.label.op_class != "layout")


def _summary(plan: Plan, n_nodes: int) -> str:
    kernels = [st.label.kernel for st in plan.steps if st.label.op_class != "layout"]
    kleidi = _kleidi_ops(plan)
    transposes = sum(st.label.op_class == "layout" for st in plan.steps)
    return (f"NHWC: {n_nodes} nodes as {len(kernels)} ops, {kleidi} on Kleidi, "
            f"{transposes} layout views")
