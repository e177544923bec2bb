"""The cpu_mlas provider class."""

from __future__ import annotations

import importlib
from typing import Any

import onnx

from onnxplex import (
    Capability,
    Decline,
    ExecutionProvider,
    GraphView,
    NodeGroup,
    Option,
    ProviderContext,
    Subgraph,
)

from . import _reference
from ._blas import configure_threads, get_blas_threads, intra_threads
from ._registry import OPS

# Kernel modules register into OPS when imported; listed here so the provider is complete.
_KERNEL_MODULES = (
    "elementwise", "cast", "shape", "reduce", "misc",
    "nn", "normalization", "spatial", "linalg", "quant",
    "sequence", "strings", "ml", "ml_linear", "ml_maps", "random_ops", "extra",
    "rnn", "attention", "signal", "vision",
    "control_flow", "contrib", "contrib_transformer", "contrib_aliases", "preview",
    "ml_trees", "deprecated", "contrib_sequence", "generation",
)

for _mod in _KERNEL_MODULES:
    importlib.import_module(f"{__package__}.{_mod}")


class CpuMlasProvider(ExecutionProvider):
    """The default CPU provider: runs every op it has a kernel for, on numpy and BLAS."""

    name = "cpu_mlas"
    op_table = OPS
    option_specs = {
        "reference_fallback": Option(True, bool, "run ops that have no native kernel through "
                                     "onnx's reference implementation (labelled in reports)"),
    }

    def __init__(self, options: dict[str, Any] | None = None, *,
                 context: ProviderContext | None = None) -> None:
        super().__init__(options, context=context)
        # Process-wide: BLAS pinned to one thread, the intra-op pool sized (see _blas).
        configure_threads(self.context.intra_op_num_threads)

    def get_capability(self, graph: GraphView) -> Capability:
        """Native kernels first; what they decline may run on the reference fallback."""
        native = super().get_capability(graph)
        if not self.options["reference_fallback"] or not native.declined:
            return native
        groups = list(native.groups)
        declined = []
        for d in native.declined:
            node = graph.node(d.node)
            why_not = _reference.reference_reason(node)
            if why_not is None:
                groups.append(NodeGroup((d.node,), note=_reference.NOTE))
            else:
                declined.append(Decline(d.node, f"{d.reason}; {why_not}"))
        groups.sort(key=lambda g: g.nodes)
        return Capability(tuple(groups), tuple(declined))

    def compile(self, subgraph: Subgraph):
        node = subgraph.nodes[0]
        config, _ = OPS.lookup(node)
        if config is None and self.options["reference_fallback"]:
            opsets = {node.domain: node.opset}
            opsets.setdefault("", onnx.defs.onnx_opset_version())
            return _reference.make_reference_kernel(node, opsets)
        return super().compile(subgraph)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {"blas_threads": get_blas_threads(), "intra_op_threads": intra_threads(),
                "ops": len(OPS.op_types(""))
                + len(OPS.op_types("com.microsoft"))}
