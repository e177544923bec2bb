"""The cpu_mlas provider class."""

from __future__ import annotations

import importlib

from onnxplex import ExecutionProvider, Option

from ._registry import OPS

# Kernel modules register into OPS when imported; listed here so the provider is complete.
_KERNEL_MODULES = ()

for _mod in _KERNEL_MODULES:
    importlib.import_module(f"{__package__}.{_mod}")


class CpuMlasProvider(ExecutionProvider):
    """The default CPU provider: runs every op it has a kernel for, on numpy and BLAS."""

    name = "cpu_mlas"
    op_table = OPS
    option_specs = {
        "use_reference_fallback": Option(True, bool, "run ops without a native numpy kernel "
                                         "through onnx's reference implementation"),
    }
