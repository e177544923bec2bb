"""Control of the BLAS thread count behind numpy (OpenBLAS as bundled in numpy wheels).

``intra_op_num_threads`` reaches cpu_mlas through its ProviderContext; the BLAS library's
thread pool is process-wide, so the setting applies to every session in the process (the last
session created with a non-zero value wins). Unknown BLAS builds are left alone, with a log line.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import logging
import os

import numpy as np

logger = logging.getLogger(__name__)

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads_64_",
            "openblas_set_num_threads64_", "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads_64_",
            "openblas_get_num_threads64_", "openblas_get_num_threads")


@functools.cache
def _library() -> ctypes.CDLL | None:
    root = os.path.dirname(os.path.dirname(np.__file__))
    for path in sorted(glob.glob(os.path.join(root, "numpy.libs", "*openblas*"))):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def _symbol(names: tuple[str, ...]):
    lib = _library()
    if lib is None:
        return None
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            return fn
    return None


def get_blas_threads() -> int | None:
    """The BLAS library's current thread count, or None when it cannot be queried."""
    fn = _symbol(_GETTERS)
    return None if fn is None else int(fn())


def set_blas_threads(n: int) -> bool:
    """Set the BLAS thread count (n >= 1); returns False when the BLAS is not controllable."""
    fn = _symbol(_SETTERS)
    if fn is None:
        logger.info("BLAS thread count not controllable here; intra_op_num_threads=%d ignored", n)
        return False
    fn(ctypes.c_int(int(n)))
    return True
