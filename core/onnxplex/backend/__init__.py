"""An ``onnx.backend.base.Backend`` over onnxplex, as ``onnxruntime.backend`` is over ORT.

With it, onnx's own ``onnx.backend.test.BackendTest`` runner can drive onnxplex::

    import onnx.backend.test, onnxplex.backend
    globals().update(onnx.backend.test.BackendTest(onnxplex.backend, __name__)
                     .include(r"test_relu").test_cases)

Keyword arguments of ``prepare``/``run_model`` set :class:`onnxplex.SessionOptions`
attributes of the same name; ``providers=[...]`` chooses providers. The package is laid out
as onnxruntime's (``backend.backend.OnnxRuntimeBackend``,
``backend.backend_rep.OnnxRuntimeBackendRep``), so code importing those names runs.
"""

from __future__ import annotations

from .backend import (
    OnnxplexBackend,
    OnnxRuntimeBackend,
    is_compatible,
    prepare,
    run,
    run_model,
    run_node,
    supports_device,
)
from .backend_rep import OnnxplexBackendRep, OnnxRuntimeBackendRep

__all__ = ["OnnxplexBackend", "OnnxplexBackendRep", "OnnxRuntimeBackend",
           "OnnxRuntimeBackendRep", "prepare", "run", "run_model", "run_node",
           "supports_device", "is_compatible"]
