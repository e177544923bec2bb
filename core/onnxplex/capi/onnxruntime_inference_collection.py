"""``onnxruntime.capi.onnxruntime_inference_collection``: the Python layer's classes."""

from __future__ import annotations

from ..session.iobinding import IOBinding
from ..session.ortcompat import check_and_normalize_provider_args
from ..session.ortvalue import OrtValue
from ..session.session import InferenceSession

__all__ = ["IOBinding", "InferenceSession", "OrtValue", "check_and_normalize_provider_args"]
