"""The cpu_mlas provider class."""

from __future__ import annotations

import importlib
from typing import Any

from onnxplex import ExecutionProvider, ProviderContext

from ._blas import get_blas_threads, set_blas_threads
from ._registry import OPS

# Kernel modules register into OPS when imported; listed here so the provider is complete.
_KERNEL_MODULES = (
    "elementwise", "cast", "shape", "reduce", "misc",
    "nn", "normalization", "spatial", "linalg", "quant",
    "sequence", "strings", "ml", "random_ops", "extra",
    "rnn", "attention", "signal", "vision",
    "control_flow",
)

for _mod in _KERNEL_MODULES:
    importlib.import_module(f"{__package__}.{_mod}")


class CpuMlasProvider(ExecutionProvider):
    """The default CPU provider: runs every op it has a kernel for, on numpy and BLAS."""

    name = "cpu_mlas"
    op_table = OPS

    def __init__(self, options: dict[str, Any] | None = None, *,
                 context: ProviderContext | None = None) -> None:
        super().__init__(options, context=context)
        if self.context.intra_op_num_threads > 0:
            # BLAS threads are process-wide: see _blas for what that implies.
            set_blas_threads(self.context.intra_op_num_threads)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {"blas_threads": get_blas_threads(), "ops": len(OPS.op_types(""))
                + len(OPS.op_types("com.microsoft"))}
