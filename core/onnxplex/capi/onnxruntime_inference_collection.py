"""``onnxruntime.capi.onnxruntime_inference_collection``: the Python layer's classes."""

from __future__ import annotations

from .._iobinding import IOBinding
from .._ortvalue import OrtValue
from .._session import InferenceSession

__all__ = ["IOBinding", "InferenceSession", "OrtValue"]
