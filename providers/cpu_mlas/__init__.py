"""The ``cpu_mlas`` provider: the default CPU provider, numpy/BLAS kernels for every op.

This module is the plugin; the provider class and its kernels load on first use.
"""

from __future__ import annotations

from onnxplex import hookimpl


@hookimpl
def onnxplex_register_providers(register):
    register("onnxplex.providers.cpu_mlas._provider:CpuMlasProvider", name="cpu_mlas",
             aliases=("CPUExecutionProvider",))
