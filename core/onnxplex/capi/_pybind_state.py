"""``onnxruntime.capi._pybind_state``: onnxruntime's alias of its C extension's module."""

from .onnxruntime_pybind11_state import *  # noqa: F403
from .onnxruntime_pybind11_state import __all__  # noqa: F401
