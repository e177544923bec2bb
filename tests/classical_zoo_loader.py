"""The classical benchmark's zoo module (``benchmarks/classical_zoo.py``), loaded once for the
tests that build its models or use its comparison (``benchmarks`` is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_NAME = "onnxplex_classical_zoo"


def load_zoo():
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "classical_zoo.py"
    spec = importlib.util.spec_from_file_location(_NAME, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up
    spec.loader.exec_module(mod)
    return mod
