"""``onnxruntime.capi.onnxruntime_inference_collection``: the Python layer's classes."""

from __future__ import annotations

from .._iobinding import IOBinding
from .._ortcompat import check_and_normalize_provider_args
from .._ortvalue import OrtValue
from .._session import InferenceSession

__all__ = ["IOBinding", "InferenceSession", "OrtValue", "check_and_normalize_provider_args"]
