"""The prepared model: ``onnxruntime.backend.backend_rep``'s place
(``OnnxRuntimeBackendRep`` is :class:`OnnxplexBackendRep` under onnxruntime's name)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from onnx.backend.base import BackendRep

from .._errors import InvalidArgumentError
from ..session.session import InferenceSession

__all__ = ["OnnxplexBackendRep", "OnnxRuntimeBackendRep"]


class OnnxplexBackendRep(BackendRep):
    """A prepared model: ``run(inputs)`` with a list (graph-input order) or a dict."""

    def __init__(self, session: InferenceSession) -> None:
        self.session = session

    def run(self, inputs: Any, **kwargs: Any) -> list[Any]:
        names = [a.name for a in self.session.get_inputs()]
        if isinstance(inputs, Mapping):
            feed = dict(inputs)
        else:
            if not isinstance(inputs, (list, tuple)):
                inputs = [inputs]
            if len(inputs) != len(names):
                raise InvalidArgumentError(f"the model has {len(names)} inputs {names}, "
                                           f"got {len(inputs)} values")
            feed = dict(zip(names, inputs))
        return self.session.run(None, feed)


OnnxRuntimeBackendRep = OnnxplexBackendRep
