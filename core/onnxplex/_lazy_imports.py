"""Defer two imports onnx-ir makes eagerly and onnxplex rarely needs.

onnx-ir imports sympy (and builds a table of sympy functions in ``onnx_ir._symbolic_shapes``)
when it is imported, for arithmetic on symbolic dims. That costs ~0.3 s and ~34 MiB, more than
the rest of ``import onnxplex`` together, and most sessions never do such arithmetic. Both
modules are loaded through the standard library's :class:`importlib.util.LazyLoader`: the
module object exists at once and runs on the first attribute access, so anything that does
use sympy (onnx-ir's symbolic-dim arithmetic, or the user's own code) gets the real module
then. Nothing is deferred when either module is already imported, or when
``ONNXPLEX_EAGER_IMPORTS=1`` is set. ``onnxplex/__init__.py`` imports this module first.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

_DEFERRED = ("sympy", "onnx_ir._symbolic_shapes")


class _LazyFinder(importlib.abc.MetaPathFinder):
    """Finds the deferred modules with the other finders and wraps their loaders."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _DEFERRED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = importlib.util.LazyLoader(spec.loader)
                return spec
        return None


def defer_heavy_imports() -> None:
    """Install the lazy finder unless the modules are already there (then it changes
    nothing); it stays only while onnx-ir is imported."""
    if os.environ.get("ONNXPLEX_EAGER_IMPORTS") == "1" or "onnx_ir" in sys.modules \
            or any(name in sys.modules for name in _DEFERRED):
        return
    finder = _LazyFinder()
    sys.meta_path.insert(0, finder)
    try:
        import onnx_ir  # noqa: F401 - imported here, under the finder
    finally:
        sys.meta_path.remove(finder)


defer_heavy_imports()
