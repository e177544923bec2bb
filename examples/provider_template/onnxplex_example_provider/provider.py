"""``example_numpy``: a minimal *fusing* execution provider for onnxplex.

It claims chains of float32 elementwise nodes (Add, Sub, Mul, Div, Relu, Sigmoid, Tanh, Exp,
Neg, Abs, Sqrt), fuses each connected chain into one partition, and compiles it into a single
numpy callable. Everything else it declines, with a reason the placement report shows.

The contract, in the order the framework calls it (see ``onnxplex/framework/provider.py``):

1. ``available()``      -- class method: can this provider run on this machine? Why not?
2. ``__init__(options)``  -- once per session; ``option_specs`` are validated and converted.
3. ``get_capability(view)`` -- once per session: return *data* (``Capability``): the node
   groups claimed, and a ``Decline`` with a reason for each node left alone.
4. ``compile(subgraph)``  -- once per claimed group (never per run): return a callable
   ``kernel(*inputs) -> outputs``. ``run`` may call it from several threads at once, so it
   must keep no per-run state outside its local variables. Optionally the kernel also has
   ``profiled(emit, *inputs)``, which the executor calls instead when session profiling is
   on, so that each fused node shows in the profile (see ``ChainKernel``).

Providers that run ops one by one need none of this: declare an ``OpTable`` instead, and the
base class derives ``get_capability`` and ``compile`` from it (see the bundled ``cpu_mlas``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

import onnxplex
from onnxplex import (
    Availability,
    Capability,
    Decline,
    ExecutionProvider,
    GraphView,
    NodeGroup,
    NodeView,
    Option,
    Subgraph,
    ValueInfo,
)

__all__ = ["ChainKernel", "ExampleNumpyProvider"]


# --------------------------------------------------------------------------------------------
# The numpy implementation of each supported op. Pure functions of their inputs: no state.
# --------------------------------------------------------------------------------------------


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # tanh form: no overflow for large |x|, and stays float32 (no float64 promotion).
    return np.float32(0.5) * (np.tanh(np.float32(0.5) * x) + np.float32(1.0))


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.float32(0.0))


UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Relu": _relu,
    "Sigmoid": _sigmoid,
    "Tanh": np.tanh,
    "Exp": np.exp,
    "Neg": np.negative,
    "Abs": np.abs,
    "Sqrt": np.sqrt,
}

BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
}

# Add/Sub/Mul/Div before opset 7 broadcast with a `broadcast`/`axis` attribute, and unary ops
# before opset 6 carried `consumed_inputs`; this example only implements the modern semantics.
MIN_OPSET = 7


# --------------------------------------------------------------------------------------------
# Capability checks: each returns None when fine, else the reason shown to the user.
# --------------------------------------------------------------------------------------------


def _dtype_name(v: ValueInfo) -> str:
    if v.dtype is not None:
        return str(v.dtype)  # "float32", "int64", "float16", ...
    if v.elem_type is None:
        return "unknown"
    return onnx.TensorProto.DataType.Name(v.elem_type).lower()


def _fmt_shape(v: ValueInfo) -> str:
    if v.shape is None:
        return "[?]"
    return "[" + ",".join("?" if d is None else str(d) for d in v.shape) + "]"


def _broadcast_problem(a: ValueInfo, b: ValueInfo) -> str | None:
    """Declines unless shape inference proves ``a`` and ``b`` broadcast (numpy rules)."""
    if a.shape is None or b.shape is None:
        return (f"input shapes {_fmt_shape(a)} and {_fmt_shape(b)}: an unknown rank; cannot "
                "check that they broadcast")
    for da, db in zip(reversed(a.shape), reversed(b.shape), strict=False):
        if da is not None and da == db:  # equal sizes, or the same symbolic dim
            continue
        if da == 1 or db == 1:
            continue
        verb = "do not" if isinstance(da, int) and isinstance(db, int) else "may not"
        return f"input shapes {_fmt_shape(a)} and {_fmt_shape(b)} {verb} broadcast"
    return None


def check_node(node: NodeView) -> str | None:
    """Whether ``example_numpy`` can run ``node``: ``None`` if so, else why not."""
    if node.domain or (node.op_type not in UNARY and node.op_type not in BINARY):
        return f"op {node.qualified_op} is not elementwise"
    if node.opset < MIN_OPSET:
        return f"{node.op_type} at opset {node.opset} is older than opset {MIN_OPSET}"
    for v in node.inputs:
        if v is None:
            return f"{node.op_type} has an omitted input"
        if v.kind != "tensor" or v.elem_type != onnx.TensorProto.FLOAT:
            return f"dtype {_dtype_name(v)} is not float32"
    if node.op_type in BINARY:
        return _broadcast_problem(node.inputs[0], node.inputs[1])  # type: ignore[arg-type]
    return None


# --------------------------------------------------------------------------------------------
# The kernel
# --------------------------------------------------------------------------------------------

# One step of a chain: (node name for profiles, op type, function, input names, output name).
Step = tuple[str, str, Callable[..., np.ndarray], tuple[str, ...], str]


class ChainKernel:
    """One compiled elementwise chain.

    ``kernel(*inputs)`` runs it. ``kernel.profiled(emit, *inputs)`` runs it too, timing each
    node: the executor calls it instead of ``kernel(*inputs)`` when the session profiles
    (``SessionOptions.enable_profiling``), and each ``emit`` call becomes an event
    ``<partition>/<node>`` in the profile. Both keep all per-run values in locals: nothing on
    ``self`` changes after ``compile``, so concurrent runs cannot interfere.
    """

    def __init__(self, steps: Sequence[Step], input_names: Sequence[str],
                 output_names: Sequence[str]) -> None:
        self.steps = tuple(steps)
        self.input_names = tuple(input_names)
        self.output_names = tuple(output_names)

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        return self._run(inputs, None)

    def profiled(self, emit: Callable[..., None], *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        return self._run(inputs, emit)

    def _run(self, inputs: Sequence[np.ndarray],
             emit: Callable[..., None] | None) -> tuple[np.ndarray, ...]:
        # Inputs arrive positionally in subgraph.inputs order (graph inputs, initializers and
        # other partitions' outputs alike). `env` is a local: nothing survives the call.
        env: dict[str, np.ndarray] = dict(zip(self.input_names, inputs, strict=True))
        with np.errstate(all="ignore"):  # sqrt(-1) -> nan, x/0 -> inf, as onnxruntime
            for node_name, op_type, fn, ins, out in self.steps:
                start = time.perf_counter_ns()
                args = [env[n] for n in ins]
                env[out] = fn(*args)
                if emit is not None:
                    emit(node_name, op_type, start, time.perf_counter_ns(), inputs=args,
                         outputs=(env[out],), args={"function": fn.__name__})
        # Outputs in subgraph.outputs order; np.asarray turns 0-d numpy scalars back into
        # arrays.
        return tuple(np.asarray(env[n]) for n in self.output_names)


# --------------------------------------------------------------------------------------------
# The provider
# --------------------------------------------------------------------------------------------


class ExampleNumpyProvider(ExecutionProvider):
    """Fuses float32 elementwise chains into one numpy kernel per chain."""

    # The registry name; must match `name=` in the plugin's register(...) call.
    name = "example_numpy"

    # Options users pass as providers=[("example_numpy", {"fuse": "0"})]. Values arriving as
    # strings (onnxruntime style) are converted to `type`; unknown keys are rejected by the
    # base class. Read the converted values from self.options.
    option_specs = {
        "fuse": Option(True, bool, "fuse connected elementwise nodes into one kernel; when "
                                   "false every node is claimed as its own kernel"),
        "min_group_size": Option(1, int, "claim only groups of at least this many nodes; "
                                          "smaller groups are left to the next provider"),
    }

    # The layout of rank-4 activations this provider's kernels receive. Broadcasting against
    # an NCHW-shaped constant (e.g. a [1,C,1,1] bias) is layout-sensitive, so keep NCHW.
    preferred_layout = "NCHW"

    def __init__(self, options=None, *, context=None) -> None:
        super().__init__(options, context=context)  # validates and converts option_specs
        if self.options["min_group_size"] < 1:
            raise onnxplex.ProviderOptionError(
                f"provider {self.name!r}: option 'min_group_size' must be >= 1, got "
                f"{self.options['min_group_size']}", provider=self.name)

    # -- 1. availability ------------------------------------------------------------------

    @classmethod
    def available(cls) -> Availability:
        # Probe hardware/libraries here and say why not, e.g.
        #     return Availability(False, "needs AVX-512")
        # It runs when providers are listed: keep it fast and never let it raise.
        return Availability(True)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        # Extra facts shown by `onnxplex providers`.
        return {"numpy": np.__version__}

    # -- 3. capability --------------------------------------------------------------------

    def get_capability(self, graph: GraphView) -> Capability:
        # graph.nodes are the nodes *offered* to us: those no higher-priority provider took,
        # in topological order. graph.producer()/consumers() see the whole graph.
        supported: list[int] = []
        declined: list[Decline] = []
        for node in graph.nodes:
            reason = check_node(node)
            if reason is None:
                supported.append(node.index)
            else:
                declined.append(Decline(node.index, reason))

        # Form claims. convex_groups splits the supported nodes into connected groups that
        # can each be contracted into one node without creating a cycle through nodes
        # outside the group (a group must not feed itself through someone else's node).
        if self.options["fuse"]:
            pieces = onnxplex.convex_groups(graph, supported)
        else:
            pieces = [(i,) for i in supported]

        groups: list[NodeGroup] = []
        minimum = self.options["min_group_size"]
        for nodes in pieces:
            if len(nodes) < minimum:
                declined.extend(
                    Decline(i, f"its elementwise group has {len(nodes)} node(s), fewer than "
                               f"min_group_size={minimum}") for i in nodes)
                continue
            # The name labels the partition in placement reports and profiles.
            groups.append(NodeGroup(tuple(nodes), name=f"{self.name}_fused_{len(groups)}"))
        return Capability(tuple(groups), tuple(declined))

    # -- 4. compile -----------------------------------------------------------------------

    def compile(self, subgraph: Subgraph) -> onnxplex.Kernel:
        # Called once per claimed group, when the session is created. Do all the work that
        # does not depend on input values here (resolve functions, wire value names) so that
        # each run only does arithmetic.
        steps: list[Step] = []
        for node in subgraph.nodes:  # already in topological order
            fn = UNARY.get(node.op_type) or BINARY.get(node.op_type)
            if fn is None or node.domain:  # we only get what we claimed; be explicit anyway
                raise onnxplex.CompileError(
                    f"{self.name}: cannot compile {node.display_name} ({node.qualified_op})",
                    provider=self.name, node=node.display_name, op_type=node.op_type)
            ins = tuple(v.name for v in node.inputs)  # type: ignore[union-attr]
            steps.append((node.display_name, node.op_type, fn, ins,
                          node.outputs[0].name))  # type: ignore[union-attr]

        # A single-node subgraph lists the node's inputs as they are (a repeated value
        # appears twice, an omitted optional input is None); a fused one lists each outside
        # value once. Naming every position handles both.
        input_names = tuple("" if v is None else v.name for v in subgraph.inputs)
        output_names = tuple(v.name for v in subgraph.outputs)

        return ChainKernel(steps, input_names, output_names)
