"""The onnxplex exception hierarchy, and onnxruntime's status classes beside it.

Every error onnxplex raises on purpose derives from :class:`OnnxplexError`, so callers can
catch one type. Messages name what is at fault (file, node, op, input, provider) and, where
there is one, what to do about it.

Code written for onnxruntime catches the classes its C extension raises, one per status code
(``onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument``, ``Fail``, ``NoSuchFile``...,
plain ``Exception`` subclasses), and the builtin ``ValueError``/``RuntimeError``/``TypeError``
its Python layer raises. They are defined here (and exported by
:mod:`onnxplex.capi.onnxruntime_pybind11_state`), and every onnxplex error is also an instance
of the one onnxruntime raises in the same situation: each class has a default
(:class:`InvalidFeedError` is an ``InvalidArgument``, :class:`KernelExecutionError` a
``Fail``), and a raise site where onnxruntime differs names the status with :func:`as_status`
(a missing model file is an :class:`InvalidModelError` that is also a ``NoSuchFile``). So both
``except onnxplex.InvalidModelError`` and ``except NoSuchFile`` work.
"""

from __future__ import annotations

import functools

__all__ = [
    "ORT_STATUS_CLASSES",
    "as_status",
    "OnnxplexError",
    "InvalidModelError",
    "ExternalDataError",
    "UnsupportedModelError",
    "InvalidArgumentError",
    "InvalidFeedError",
    "PluginLoadError",
    "ProviderError",
    "ProviderOptionError",
    "ProviderUnavailableError",
    "CapabilityError",
    "CompileError",
    "KernelExecutionError",
    "PartitionError",
    "TensorSizeError",
    "RunCancelledError",
    "LoadCancelledError",
    "MissingDependencyError",
]


# ---- onnxruntime's status classes (onnxruntime_pybind_state.cc registers one per status code)

class Fail(Exception):
    """onnxruntime's FAIL status (code 1): a kernel failed, a type error in the graph..."""


class InvalidArgument(Exception):
    """onnxruntime's INVALID_ARGUMENT status (code 2): a bad feed, output name or model input."""


class NoSuchFile(Exception):
    """onnxruntime's NO_SUCHFILE status (code 3): the model file does not exist."""


class NoModel(Exception):
    """onnxruntime's NO_MODEL status (code 4)."""


class EngineError(Exception):
    """onnxruntime's ENGINE_ERROR status (code 5)."""


class RuntimeException(Exception):
    """onnxruntime's RUNTIME_EXCEPTION status (code 6)."""


class InvalidProtobuf(Exception):
    """onnxruntime's INVALID_PROTOBUF status (code 7): the bytes are not a model."""


class ModelLoaded(Exception):
    """onnxruntime's MODEL_LOADED status (code 8)."""


class NotImplemented(Exception):  # noqa: A001 - onnxruntime's name for its NOT_IMPLEMENTED
    """onnxruntime's NOT_IMPLEMENTED status (code 9): no kernel for a node."""


class InvalidGraph(Exception):
    """onnxruntime's INVALID_GRAPH status (code 10): the graph is not valid ONNX."""


class EPFail(Exception):
    """onnxruntime's EP_FAIL status (code 11): an execution provider failed."""


class ModelLoadCanceled(Exception):
    """onnxruntime's MODEL_LOAD_CANCELED status (code 12)."""


class ModelRequiresCompilation(Exception):
    """onnxruntime's MODEL_REQUIRES_COMPILATION status (code 13)."""


class NotFound(Exception):
    """onnxruntime's NOT_FOUND status (code 14)."""


ORT_STATUS_CLASSES = (Fail, InvalidArgument, NoSuchFile, NoModel, EngineError, RuntimeException,
                      InvalidProtobuf, ModelLoaded, NotImplemented, InvalidGraph, EPFail,
                      ModelLoadCanceled, ModelRequiresCompilation, NotFound)
"""In onnxruntime's order of status codes (1, 2, ...)."""


@functools.cache
def as_status(cls: type[OnnxplexError], *also: type[Exception]) -> type[OnnxplexError]:
    """``cls`` that is also each of ``also`` (onnxruntime status classes or the builtin
    exceptions onnxruntime's Python layer raises there): for raise sites where onnxruntime
    raises another class than ``cls``'s default. The class keeps ``cls``'s name and module,
    so tracebacks read as before."""
    return type(cls.__name__, (cls, *also), {"__module__": cls.__module__,
                                              "__qualname__": cls.__qualname__,
                                              "__doc__": cls.__doc__})


# ---- onnxplex's own

class OnnxplexError(Exception):
    """Base class of every error raised by onnxplex."""


class InvalidModelError(OnnxplexError, InvalidGraph):
    """The model cannot be parsed or is not a valid ONNX graph (bad bytes, cycles, names)."""


class ExternalDataError(InvalidModelError, Fail):
    """External data of an initializer is missing, out of range, or outside the model folder."""


class UnsupportedModelError(InvalidModelError, Fail):
    """The model is valid ONNX but uses something onnxplex does not support (IR version, opset)."""


class InvalidArgumentError(OnnxplexError, ValueError, InvalidArgument):
    """An argument of the Python API is wrong (unknown provider, bad option or output name)."""


class InvalidFeedError(InvalidArgumentError):
    """A feed does not match the model: missing or unknown name, dtype, rank or static dim."""


class PluginLoadError(OnnxplexError, Fail):
    """A plugin's entry point could not be imported or its registration hook raised."""


class ProviderError(OnnxplexError, EPFail):
    """Base class of errors attributed to an execution provider."""

    def __init__(self, message: str, *, provider: str | None = None, node: str | None = None,
                 op_type: str | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.node = node
        self.op_type = op_type


class ProviderOptionError(ProviderError, InvalidArgumentError):
    """A provider option is unknown or has a value of the wrong type."""


class ProviderUnavailableError(ProviderError):
    """A provider was requested that is not available on this machine."""


class CapabilityError(ProviderError):
    """A provider's ``get_capability`` raised or returned an invalid claim."""


class CompileError(ProviderError):
    """A provider's ``compile`` raised or returned something that is not a kernel."""


class KernelExecutionError(ProviderError, Fail):
    """A kernel raised during ``run`` or returned outputs that do not match the declaration."""


class PartitionError(OnnxplexError, NotImplemented):
    """Partitioning failed: a node nobody can run, or CPU fallback disabled but needed."""

    def __init__(self, message: str, *, unassigned: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.unassigned = unassigned


class TensorSizeError(InvalidModelError, Fail):
    """A tensor's shape would need more memory than onnxplex allows (refused before allocating;
    the limit is the machine's memory, or ``ONNXPLEX_MAX_TENSOR_BYTES``)."""


class RunCancelledError(OnnxplexError, Fail):
    """A run was cancelled through ``RunOptions.terminate``."""


class LoadCancelledError(OnnxplexError, ModelLoadCanceled):
    """Session creation was cancelled (``SessionOptions.set_load_cancellation_flag(True)``)."""


class MissingDependencyError(OnnxplexError, ImportError):
    """A feature needs an optional package that is not installed (charts need matplotlib).
    The message names the package and the ``pip install 'onnxplex[extra]'`` that brings it;
    it is an ``ImportError`` too, so code that guards an optional import keeps working."""


for _cls in ORT_STATUS_CLASSES:   # where onnxruntime's code imports them from
    _cls.__module__ = "onnxplex.capi.onnxruntime_pybind11_state"
