"""What onnxruntime's C extension module exports, as onnxplex has it.

The status exception classes are onnxruntime's (plain ``Exception`` subclasses, one per status
code); every onnxplex error is also an instance of the one onnxruntime raises in the same
situation (see :mod:`onnxplex._errors`). The session classes and module functions are
onnxplex's own.
"""

from __future__ import annotations

from .._errors import (
    EngineError,
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoadCanceled,
    ModelLoaded,
    ModelRequiresCompilation,
    NoModel,
    NoSuchFile,
    NotFound,
    NotImplemented,  # noqa: A004 - onnxruntime's class of that name
    RuntimeException,
)
from .._sparse import OrtSparseFormat, SparseTensor
from ..session.adapters import AdapterFormat, LoraAdapter
from ..session.devices import (
    OrtAllocatorType,
    OrtArenaCfg,
    OrtDevice,
    OrtDeviceMemoryType,
    OrtEpDevice,
    OrtHardwareDevice,
    OrtHardwareDeviceType,
    OrtMemoryInfo,
    OrtMemoryInfoDeviceType,
    OrtMemType,
    create_and_register_allocator,
    create_and_register_allocator_v2,
    get_ep_devices,
)
from ..session.iobinding import SessionIOBinding
from ..session.ortcompat import (
    disable_telemetry_events,
    enable_telemetry_events,
    get_all_providers,
    get_available_providers,
    get_build_info,
    get_version_string,
    preload_dlls,
    register_execution_provider_library,
    set_default_logger_callback,
    set_default_logger_severity,
    set_default_logger_verbosity,
    set_global_thread_pool_sizes,
    set_seed,
    unregister_execution_provider_library,
)
from ..session.ortvalue import OrtValue, OrtValueVector, is_dlpack_uint8_tensor
from ..session.session import EpAssignedNode as OrtEpAssignedNode
from ..session.session import EpAssignedSubgraph as OrtEpAssignedSubgraph
from ..session.session import (
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    ModelMetadata,
    NodeArg,
    RunOptions,
    SessionOptions,
    get_device,
)


def get_default_session_options() -> SessionOptions:
    """A new :class:`SessionOptions` with every default."""
    return SessionOptions()


__all__ = [
    "AdapterFormat", "LoraAdapter",
    "EPFail", "EngineError", "Fail", "InvalidArgument", "InvalidGraph", "InvalidProtobuf",
    "ModelLoadCanceled", "ModelLoaded", "ModelRequiresCompilation", "NoModel", "NoSuchFile",
    "NotFound", "NotImplemented", "RuntimeException",
    "ExecutionMode", "ExecutionOrder", "GraphOptimizationLevel", "ModelMetadata", "NodeArg",
    "OrtSparseFormat", "OrtValue", "OrtValueVector", "RunOptions", "SparseTensor",
    "SessionIOBinding", "SessionOptions",
    "OrtAllocatorType", "OrtArenaCfg", "OrtDevice", "OrtDeviceMemoryType", "OrtEpDevice",
    "OrtHardwareDevice", "OrtHardwareDeviceType", "OrtMemType", "OrtMemoryInfo",
    "OrtMemoryInfoDeviceType",
    "create_and_register_allocator", "create_and_register_allocator_v2",
    "disable_telemetry_events", "enable_telemetry_events", "get_all_providers",
    "get_available_providers", "get_build_info", "get_default_session_options", "get_device",
    "get_ep_devices", "get_version_string", "is_dlpack_uint8_tensor", "set_default_logger_callback",
    "set_default_logger_severity", "set_default_logger_verbosity", "set_seed",
    "preload_dlls", "register_execution_provider_library", "set_global_thread_pool_sizes",
    "unregister_execution_provider_library", "OrtEpAssignedNode", "OrtEpAssignedSubgraph",
]
