"""The backend class: ``onnxruntime.backend.backend``'s place (``OnnxRuntimeBackend`` is
:class:`OnnxplexBackend` under onnxruntime's name)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend

from .._dtypes import onnx_elem_type
from .._errors import InvalidArgumentError
from ..session.session import InferenceSession, SessionOptions
from .backend_rep import OnnxplexBackendRep

__all__ = ["OnnxplexBackend", "OnnxRuntimeBackend", "prepare", "run_model", "run_node",
           "supports_device", "is_compatible"]


class OnnxplexBackend(Backend):
    """onnx backend API over :class:`onnxplex.InferenceSession` (CPU)."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().split(":")[0] == "CPU"

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> OnnxplexBackendRep:
        if not cls.supports_device(device):
            raise InvalidArgumentError(f"onnxplex runs on CPU; device {device!r} is not "
                                       "supported")
        providers = kwargs.pop("providers", None)
        options = SessionOptions()
        for key, value in kwargs.items():
            if not hasattr(options, key):
                raise InvalidArgumentError(f"unknown backend option {key!r}; options are "
                                           "SessionOptions attributes or providers=")
            setattr(options, key, value)
        if isinstance(model, InferenceSession):
            return OnnxplexBackendRep(model)
        return OnnxplexBackendRep(InferenceSession(model, options, providers=providers))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> list[Any]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Sequence[Any], device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, Any]] | None = None,
                 **kwargs: Any) -> list[Any]:
        """Run one node on the given inputs (positional, matching ``node.input``)."""
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        ins = []
        feed = {}
        for name, value in zip(node.input, inputs):
            if not name:
                continue
            arr = np.asarray(value)
            ins.append(helper.make_tensor_value_info(name, onnx_elem_type(arr.dtype),
                                                     arr.shape))
            feed[name] = arr
        outs = [helper.make_value_info(n, onnx.TypeProto()) for n in node.output if n]
        graph = helper.make_graph([node], "run_node", ins, outs)
        imports = [helper.make_opsetid("", opset)]
        if node.domain not in ("", "ai.onnx"):
            imports.append(helper.make_opsetid(node.domain, 1))
        model = helper.make_model(graph, opset_imports=imports)
        return cls.prepare(model, device, **kwargs).run(feed)


OnnxRuntimeBackend = OnnxplexBackend

prepare = OnnxplexBackend.prepare
run_model = OnnxplexBackend.run_model
run = run_model   # (onnxruntime.backend's name for it)
run_node = OnnxplexBackend.run_node
supports_device = OnnxplexBackend.supports_device
is_compatible = OnnxplexBackend.is_compatible
