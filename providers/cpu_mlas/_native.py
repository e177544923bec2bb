"""The optional native part of cpu_mlas (``_mlas_native``, built by scikit-build-core).

``native()`` returns the compiled module, or None when it is not built or cannot be imported
(e.g. a source checkout without a build, an unsupported platform): kernels then keep their
numpy paths. The reason is logged once, at debug level. ``ONNXPLEX_MLAS_NATIVE=0`` disables
the module (for comparisons and tests); ``ONNXPLEX_MLAS_ISA=scalar|avx2|avx512vnni`` makes the
module use a lower x86 variant than the best one the CPU runs.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)


@functools.cache
def native() -> ModuleType | None:
    """The ``_mlas_native`` extension module, or None (the numpy kernels are used)."""
    if os.environ.get("ONNXPLEX_MLAS_NATIVE", "1").strip() in ("0", "false", "no", "off"):
        logger.debug("cpu_mlas native kernels disabled by ONNXPLEX_MLAS_NATIVE")
        return None
    try:
        mod = importlib.import_module(f"{__package__}._mlas_native")
    except ImportError as exc:
        logger.debug("cpu_mlas native kernels unavailable (%s); using the numpy kernels", exc)
        return None
    logger.debug("cpu_mlas native kernels loaded: qgemm variant %s", mod.isa())
    return mod


def planned_step(kernel: Callable[..., Any]) -> Any | None:
    """``kernel`` as a native step (``_mlas_native.planned_step``, register_step.cpp): the
    executor's C loop runs the plan ``kernel`` installs on it (``step.install(plan)``) for the
    calls that fit it, and ``kernel`` for every other; None without the module's steps."""
    mod = native()
    if mod is None or not hasattr(mod, "planned_step"):
        return None
    from ._blas import pool  # (_blas imports this module)

    return mod.planned_step(kernel, pool())


def threads(intra_op_num_threads: int) -> int:
    """The native thread count for a session's ``intra_op_num_threads``: the setting, or for 0
    the CPUs this process may run on (see :func:`_blas.native_threads`: a native call given 0
    asks the C++ runtime for the CPU count on every call, ~17 us)."""
    from ._blas import native_threads  # (_blas imports this module)

    return native_threads(max(0, int(intra_op_num_threads)))
