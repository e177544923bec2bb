"""onnxplex: an execution-provider framework for ONNX models, with onnxruntime's API.

Importing onnxplex imports no provider and no native module; providers are discovered through
the ``onnxplex`` entry-point group the first time they are needed.
"""

from __future__ import annotations

from . import (
    _lazy_imports,  # noqa: F401 - first: defers sympy before onnx-ir is imported
    capi,  # onnxruntime's capi modules (onnxplex.capi.onnxruntime_pybind11_state...)
)
from ._errors import (
    CapabilityError,
    CompileError,
    ExternalDataError,
    InvalidArgumentError,
    InvalidFeedError,
    InvalidModelError,
    KernelExecutionError,
    LoadCancelledError,
    OnnxplexError,
    PartitionError,
    PluginLoadError,
    ProviderError,
    ProviderOptionError,
    ProviderUnavailableError,
    RunCancelledError,
    TensorSizeError,
    UnsupportedModelError,
)
from ._sparse import OrtSparseFormat, SparseTensor
from ._version import __version__ as __version__
from .framework.partition import NodePlacement, Partition, PartitionPlan, convex_groups
from .framework.plugins import (
    hookimpl,
    hookspec,
    plugin_problems,
    register_provider,
)
from .framework.provider import (
    API_VERSION,
    Availability,
    Capability,
    Decline,
    ExecutionProvider,
    Kernel,
    NodeGroup,
    OpConfig,
    OpTable,
    Option,
    ProviderContext,
    prepacked,
)
from .graph.model import GraphView, Model, NodeView, Subgraph, ValueInfo, load_model
from .session.adapters import AdapterFormat, LoraAdapter
from .session.devices import (
    OrtAllocatorType,
    OrtArenaCfg,
    OrtDevice,
    OrtDeviceMemoryType,
    OrtDeviceVendorId,
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
from .session.iobinding import IOBinding, SessionIOBinding
from .session.ortcompat import (
    disable_telemetry_events,
    enable_telemetry_events,
    get_all_providers,
    get_available_providers,
    get_build_info,
    get_version_string,
    has_collective_ops,
    preload_dlls,
    register_execution_provider_library,
    set_default_logger_callback,
    set_default_logger_severity,
    set_default_logger_verbosity,
    set_global_thread_pool_sizes,
    set_seed,
    unregister_execution_provider_library,
)
from .session.ortvalue import OrtValue
from .session.session import (
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    InferenceSession,
    ModelMetadata,
    NodeArg,
    RunOptions,
    SessionOptions,
    get_device,
)

__all__ = [
    # session API (onnxruntime-compatible)
    "InferenceSession",
    "SessionOptions",
    "RunOptions",
    "GraphOptimizationLevel",
    "ExecutionMode",
    "ExecutionOrder",
    "NodeArg",
    "ModelMetadata",
    "OrtValue",
    "IOBinding",
    "SessionIOBinding",
    "get_device",
    "get_available_providers",
    "get_all_providers",
    "set_default_logger_severity",
    "get_version_string",
    "get_build_info",
    "has_collective_ops",
    "set_default_logger_callback",
    "set_default_logger_verbosity",
    "enable_telemetry_events",
    "disable_telemetry_events",
    "set_seed",
    "register_execution_provider_library",
    "unregister_execution_provider_library",
    "set_global_thread_pool_sizes",
    "preload_dlls",
    "AdapterFormat",
    "LoraAdapter",
    "SparseTensor",
    "OrtSparseFormat",
    "OrtDevice",
    "OrtMemoryInfo",
    "OrtMemType",
    "OrtAllocatorType",
    "OrtDeviceMemoryType",
    "OrtMemoryInfoDeviceType",
    "OrtDeviceVendorId",
    "OrtArenaCfg",
    "OrtEpDevice",
    "OrtHardwareDevice",
    "OrtHardwareDeviceType",
    "create_and_register_allocator",
    "create_and_register_allocator_v2",
    "get_ep_devices",
    "capi",
    # provider contract
    "API_VERSION",
    "ExecutionProvider",
    "Availability",
    "Capability",
    "NodeGroup",
    "Decline",
    "Kernel",
    "prepacked",
    "OpTable",
    "OpConfig",
    "Option",
    "ProviderContext",
    "GraphView",
    "NodeView",
    "ValueInfo",
    "Subgraph",
    "convex_groups",
    # plugins
    "hookimpl",
    "hookspec",
    "register_provider",
    "plugin_problems",
    # graph and plan
    "Model",
    "load_model",
    "PartitionPlan",
    "Partition",
    "NodePlacement",
    # errors
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
]

# onnxruntime's module-level facts, for code that reads them (``ort.version``,
# ``ort.package_name``, ``ort.cuda_version``: this build runs on the CPU, as onnxruntime's CPU
# package reports an empty CUDA version)
version = __version__
package_name = "onnxplex"
cuda_version = ""
