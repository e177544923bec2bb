"""The ``xnnpack_like`` provider: an XNNPACK/ExecuTorch-style NHWC delegate (plugin module)."""

from __future__ import annotations

from onnxplex import hookimpl


@hookimpl
def onnxplex_register_providers(register):
    register("onnxplex.providers.xnnpack_like._provider:XnnpackLikeProvider",
             name="xnnpack_like", aliases=("XnnpackExecutionProvider",))
