"""The cpu_mlas kernel registry and the small helpers kernel modules share.

A kernel module registers factories with ``@op("Relu", since=14)``. A factory runs once per
session per node: ``factory(node: NodeView, ctx: ProviderContext) -> kernel``; it reads
attributes (and may prepack constant inputs) there, and returns a callable that maps the
node's input arrays (``None`` for an omitted optional input) to its output array or a tuple of
output arrays. Kernels keep no state between calls: they may run on many threads at once.
"""

from __future__ import annotations

from onnxplex import OpTable

OPS = OpTable()
op = OPS.register


class ConstInput:
    """A constant input as a kernel factory reads it (``NodeView.input(k)``: ``.const``,
    ``.is_const``), for a node seen as another op (a quantized op as the float op it
    quantizes, its weights dequantized)."""

    __slots__ = ("const",)
    is_const = True

    def __init__(self, value) -> None:
        self.const = value
