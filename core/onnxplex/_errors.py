"""The onnxplex exception hierarchy.

Every error onnxplex raises on purpose derives from :class:`OnnxplexError`, so callers can
catch one type. Messages name what is at fault (file, node, op, input, provider) and, where
there is one, what to do about it.
"""

from __future__ import annotations

__all__ = [
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
]


class OnnxplexError(Exception):
    """Base class of every error raised by onnxplex."""


class InvalidModelError(OnnxplexError):
    """The model cannot be parsed or is not a valid ONNX graph (bad bytes, cycles, names)."""


class ExternalDataError(InvalidModelError):
    """External data of an initializer is missing, out of range, or outside the model folder."""


class UnsupportedModelError(InvalidModelError):
    """The model is valid ONNX but uses something onnxplex does not support (IR version, opset)."""


class InvalidArgumentError(OnnxplexError, ValueError):
    """An argument of the Python API is wrong (unknown provider, bad option or output name)."""


class InvalidFeedError(InvalidArgumentError):
    """A feed does not match the model: missing or unknown name, dtype, rank or static dim."""


class PluginLoadError(OnnxplexError):
    """A plugin's entry point could not be imported or its registration hook raised."""


class ProviderError(OnnxplexError):
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


class KernelExecutionError(ProviderError):
    """A kernel raised during ``run`` or returned outputs that do not match the declaration."""


class PartitionError(OnnxplexError):
    """Partitioning failed: a node nobody can run, or CPU fallback disabled but needed."""

    def __init__(self, message: str, *, unassigned: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.unassigned = unassigned


class TensorSizeError(InvalidModelError):
    """A tensor's shape would need more memory than onnxplex allows (refused before allocating;
    the limit is the machine's memory, or ``ONNXPLEX_MAX_TENSOR_BYTES``)."""


class RunCancelledError(OnnxplexError):
    """A run was cancelled through ``RunOptions.terminate``."""
