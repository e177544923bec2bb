"""onnxruntime's ``capi`` package, for code that imports from it.

onnxruntime code imports its error classes and a few objects from the C extension's module
(``from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument``, ``from
onnxruntime.capi import _pybind_state as C``) and the Python layer's classes from
``onnxruntime.capi.onnxruntime_inference_collection``. The same imports work from
``onnxplex.capi``: the modules here hold onnxplex's objects under those names.
"""

from . import _pybind_state, onnxruntime_inference_collection, onnxruntime_pybind11_state

__all__ = ["_pybind_state", "onnxruntime_inference_collection", "onnxruntime_pybind11_state"]
