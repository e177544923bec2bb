"""The xnnpack_like provider class: declared, not yet implemented (its issue follows)."""

from __future__ import annotations

from onnxplex import Availability, Capability, ExecutionProvider, GraphView


class XnnpackLikeProvider(ExecutionProvider):
    """NHWC delegate compiling whole partitions. Not implemented yet: always unavailable."""

    name = "xnnpack_like"
    preferred_layout = "NHWC"

    @classmethod
    def available(cls) -> Availability:
        return Availability(False, "the xnnpack_like delegate is not implemented yet")

    def get_capability(self, graph: GraphView) -> Capability:
        return Capability()
