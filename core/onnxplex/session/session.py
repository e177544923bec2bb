"""The onnxruntime-compatible session API.

``InferenceSession(model, sess_options=None, providers=None, provider_options=None)`` loads
and validates the model, runs the optimizer, partitions the graph over the providers in
priority order (the default CPU provider last), compiles each partition once, and builds the
execution plan. ``run`` validates feeds and executes the plan; it is safe to call from many
threads at once.
"""

from __future__ import annotations

import contextlib
import enum
import gc
import json
import logging
import os
import re
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from .._dtypes import array_type_name, np_dtype
from .._errors import (
    CompileError,
    Fail,
    InvalidArgument,
    InvalidArgumentError,
    InvalidFeedError,
    InvalidModelError,
    LoadCancelledError,
    OnnxplexError,
    PartitionError,
    ProviderError,
    as_status,
)
from .._records import record
from .._sparse import SparseTensor
from ..framework import executor as _executor
from ..framework import mempattern as _mempattern
from ..framework.feeds import structured_feed, tensor_feed
from ..framework.functions import expand_nodes
from ..framework.partition import PartitionPlan, partition
from ..framework.plugins import (
    DEFAULT_PROVIDER,
    get_available_providers,
    provider_entry,
    provider_unavailable,
)
from ..framework.provider import ExecutionProvider, ProviderContext
from ..graph.limits import MAX_TENSOR_BYTES_KEY, _expected_nbytes, tensor_limit
from ..graph.model import Model, Overrides, Subgraph, ValueInfo, load_model, sharing_small_arrays
from ..optimizer import PassReport, optimize
from .adapters import LoraAdapter
from .devices import OrtEpDevice, OrtMemoryInfo, cpu_memory_info
from .iobinding import IOBinding
from .ortcompat import (
    ORT_EXECUTION_PROVIDERS,
    ProviderName,
    ProviderNames,
    ProviderOptionsByName,
)
from .ortvalue import OrtValue, OrtValueVector

__all__ = [
    "GraphOptimizationLevel",
    "ExecutionMode",
    "ExecutionOrder",
    "SessionOptions",
    "RunOptions",
    "NodeArg",
    "ModelMetadata",
    "InferenceSession",
    "get_device",
]

logger = logging.getLogger("onnxplex")

DISABLE_CPU_FALLBACK = "session.disable_cpu_ep_fallback"


class GraphOptimizationLevel(enum.IntEnum):
    """Optimization levels with onnxruntime's names and values."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """Sequential execution, or independent nodes in parallel (inter-op threads)."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    """onnxruntime's node orderings; onnxplex runs a topological order whichever is set."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class _Settings:
    """Options objects whose attributes are fixed once built: assigning an unknown one (a typo
    such as ``intra_op_threads``) raises AttributeError, as onnxruntime's options do."""

    _sealed = False

    def __setattr__(self, name: str, value: Any) -> None:
        if self._sealed and not name.startswith("_") and name not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        object.__setattr__(self, name, value)


class SessionOptions(_Settings):
    """Session settings, with onnxruntime's attribute names and defaults.

    ``log_severity_level`` -1 means the default logger's severity
    (``set_default_logger_severity``); 0 also logs the placement report. ``execution_order``
    and the memory/arena switches are accepted for compatibility and change nothing.
    """

    def __init__(self) -> None:
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.optimized_model_filepath = ""
        self.enable_profiling = False
        self.profile_file_prefix = "onnxplex_profile"
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.use_deterministic_compute = False
        self.use_per_session_threads = True
        self.execution_order = ExecutionOrder.DEFAULT
        self._config: dict[str, str] = {}
        self._initializers: dict[str, OrtValue] = {}
        self._dims_by_name: dict[str, int] = {}
        self._dims_by_denotation: dict[str, int] = {}
        self._external_files: dict[str, bytes] = {}
        self._providers: list[tuple[str, dict[str, str]]] = []
        self._selection_policy: Any = None
        self._cancel_load = False
        self._sealed = True

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Set a session configuration entry (e.g. ``session.disable_cpu_ep_fallback``); keys
        and values are strings, a key 1 to 1024 characters long (as onnxruntime checks)."""
        if not isinstance(key, str) or not isinstance(value, str):
            raise as_status(InvalidArgumentError, TypeError)(
                f"add_session_config_entry takes a str key and a str value, got "
                f"{type(key).__name__} and {type(value).__name__}")
        if not key or len(key) > 1024:
            raise as_status(InvalidArgumentError, RuntimeError)(
                f"Config key is empty or longer than maximum length 1024 ({len(key)} "
                "characters)")
        if key in self._config and self._config[key] != value:
            logger.debug("session config entry %r (%r) is overwritten with %r", key,
                         self._config[key], value)
        self._config[key] = value

    def get_session_config_entry(self, key: str) -> str:
        """The value of a configuration entry; an error (a ``RuntimeError``, as onnxruntime's)
        when it is not set."""
        try:
            return self._config[key]
        except KeyError:
            raise as_status(InvalidArgumentError, RuntimeError)(
                f"SessionOptions does not have configuration with key: {key}") from None

    def add_initializer(self, name: str, value: OrtValue) -> None:
        """Use ``value`` (an :class:`OrtValue`, which must stay alive as long as the sessions
        built with these options) for the model's initializer ``name``: it must have that
        initializer's type and shape. A name the model has no initializer of is ignored, as
        onnxruntime ignores it."""
        if not isinstance(value, OrtValue):
            raise as_status(InvalidArgumentError, RuntimeError)(
                f"add_initializer({name!r}, ...) takes an OrtValue, got {type(value).__name__} "
                "(wrap an array with OrtValue.ortvalue_from_numpy)")
        if name in self._initializers:
            raise as_status(InvalidArgumentError, RuntimeError)(
                f"An OrtValue for this name has already been added: {name}")
        self._initializers[name] = value

    def add_external_initializers(self, names: Sequence[str],
                                  values: Sequence[OrtValue]) -> None:
        """:meth:`add_initializer` for each name and value: onnxruntime's way to give the
        data of initializers stored as external data (their files are then not read)."""
        names, values = list(names), list(values)
        if len(names) != len(values):
            raise as_status(InvalidArgumentError, RuntimeError)(
                f"add_external_initializers: {len(names)} names and {len(values)} values")
        for name, value in zip(names, values):
            self.add_initializer(name, value)

    def add_external_initializers_from_files_in_memory(
            self, file_names: Sequence[str], buffers: Sequence[Any],
            lengths: Sequence[int]) -> None:
        """The contents of external data files, in memory: initializers whose external data
        names one of ``file_names`` are read from the matching buffer (``bytes``, a numpy
        array or any buffer; its first ``lengths[i]`` bytes) instead of from disk."""
        names, bufs, sizes = list(file_names), list(buffers), list(lengths)
        if not len(names) == len(bufs) == len(sizes):
            raise as_status(InvalidArgumentError, RuntimeError)(
                f"add_external_initializers_from_files_in_memory: {len(names)} names, "
                f"{len(bufs)} buffers and {len(sizes)} lengths")
        for name, buf, size in zip(names, bufs, sizes):
            data = memoryview(buf).cast("B")
            if not 0 <= int(size) <= data.nbytes:
                raise as_status(InvalidArgumentError, RuntimeError)(
                    f"external file {name!r}: length {size} is outside its buffer of "
                    f"{data.nbytes} bytes")
            self._external_files[os.path.normpath(str(name))] = bytes(data[:int(size)])

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Give the symbolic dimension ``dim_name`` of the model's inputs and outputs the size
        ``dim_value`` (``get_inputs()`` then shows it, and feeds must have it)."""
        self._dims_by_name[str(dim_name)] = _dim_size(dim_value)

    def add_free_dimension_override_by_denotation(self, dim_denotation: str,
                                                  dim_value: int) -> None:
        """Give the input dimensions denoted ``dim_denotation`` (``DATA_BATCH``,
        ``DATA_CHANNEL``...) the size ``dim_value``."""
        self._dims_by_denotation[str(dim_denotation)] = _dim_size(dim_value)

    def _overrides(self) -> Overrides | None:
        if not (self._initializers or self._dims_by_name or self._dims_by_denotation
                or self._external_files):
            return None
        return Overrides({k: v.numpy() for k, v in self._initializers.items()},
                         dict(self._dims_by_name), dict(self._dims_by_denotation),
                         dict(self._external_files))

    def add_provider(self, provider_name: str, provider_options: Mapping[str, Any]) -> None:
        """Ask for a provider (onnxruntime's plugin-EP way): a session given these options and
        no ``providers`` uses the providers added here, in the order added."""
        self._providers.append((str(provider_name),
                                {str(k): str(v) for k, v in dict(provider_options).items()}))

    def add_provider_for_devices(self, ep_devices: Sequence[Any],
                                 provider_options: Mapping[str, Any]) -> None:
        """:meth:`add_provider` for the providers of ``ep_devices`` (from
        ``get_ep_devices()``)."""
        for device in ep_devices:
            self.add_provider(device.ep_name, provider_options)

    def set_provider_selection_policy(self, policy: Any) -> None:
        """onnxruntime's automatic provider selection policy: every policy gives onnxplex's
        default providers (they all run on the CPU)."""
        self._selection_policy = policy

    def has_providers(self) -> bool:
        """Whether providers were added with :meth:`add_provider` (or a selection policy
        set)."""
        return bool(self._providers) or self._selection_policy is not None

    def set_load_cancellation_flag(self, value: bool) -> None:
        """Cancel the creation of sessions built with these options (checked between the
        steps of creation; a session that has begun reading its model stops at the next)."""
        self._cancel_load = bool(value)

    def register_custom_ops_library(self, library_path: str) -> None:
        """Not supported: onnxruntime custom-op libraries are native code for onnxruntime."""
        raise InvalidArgumentError(
            f"cannot load custom op library {library_path!r}: onnxplex does not load "
            "onnxruntime custom-op libraries; run custom ops through an execution provider "
            "(see docs/writing-a-provider.md)")

    def _copy(self) -> SessionOptions:
        other = SessionOptions()
        other.__dict__.update({k: dict(v) if isinstance(v, dict) else v
                               for k, v in self.__dict__.items()})
        return other


class RunOptions(_Settings):
    """Per-run settings; ``terminate = True`` cancels runs using this object."""

    def __init__(self) -> None:
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.terminate = False
        self.only_execute_path_to_fetches = False
        self._config: dict[str, str] = {}
        self._adapters: list[LoraAdapter] = []
        self._sealed = True

    def add_active_adapter(self, adapter: LoraAdapter) -> None:
        """Feed ``adapter``'s parameters to runs made with these options (they take the
        place of the model's overridable initializers of those names, and of feeds of the
        same names, as in onnxruntime)."""
        if not isinstance(adapter, LoraAdapter):
            raise as_status(InvalidArgumentError, TypeError)(
                f"add_active_adapter takes a LoraAdapter, got {type(adapter).__name__}")
        self._adapters.append(adapter)

    def add_run_config_entry(self, key: str, value: str) -> None:
        """Set a run configuration entry (kept; onnxplex reads none yet)."""
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        """The value of a run configuration entry; an error when unset (as onnxruntime)."""
        try:
            return self._config[key]
        except KeyError:
            raise as_status(InvalidArgumentError, RuntimeError)(
                f"RunOptions does not have configuration with key: {key}") from None


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output as onnxruntime describes it."""

    name: str
    type: str
    shape: list[Any]

    def __str__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


@dataclass(frozen=True)
class ModelMetadata:
    """``get_modelmeta()``: producer, graph name and custom metadata of the model."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str] = field(default_factory=dict)


class _CLevelSession:
    """onnxruntime's C-level ``InferenceSession`` calls, on an onnxplex session: the run
    calls take their arguments in that class's order and return an :class:`OrtValueVector`
    where it does; anything else is the session's own."""

    __slots__ = ("_session",)

    def __init__(self, session: InferenceSession) -> None:
        self._session = session

    @property
    def _onnxplex_session(self) -> InferenceSession:
        return self._session

    def run(self, output_names: Sequence[str], input_feed: Mapping[str, Any],
            run_options: RunOptions | None = None) -> list[Any]:
        return self._session.run(output_names, input_feed, run_options)

    def run_with_ort_values(self, input_dict: Mapping[str, OrtValue],
                            output_names: Sequence[str] | None,
                            run_options: RunOptions | None = None) -> OrtValueVector:
        return OrtValueVector(self._session.run_with_ort_values(output_names, input_dict,
                                                                run_options))

    def run_with_ortvaluevector(self, *args: Any) -> None:
        self._session.run_with_ortvaluevector(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"


@dataclass(frozen=True)
class EpAssignedNode:
    """A node in :meth:`InferenceSession.get_provider_graph_assignment_info`."""

    name: str
    op_type: str
    domain: str


@dataclass(frozen=True)
class EpAssignedSubgraph:
    """The nodes one provider runs as one unit."""

    ep_name: str
    nodes: tuple[EpAssignedNode, ...]

    def get_nodes(self) -> list[EpAssignedNode]:
        return list(self.nodes)


def _dim_size(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise InvalidArgumentError(f"a free dimension override must be a size >= 0, got "
                                   f"{value!r}")
    return int(value)


def get_device() -> str:
    """The device onnxplex runs on (``'CPU'``, as onnxruntime's CPU build reports)."""
    return "CPU"


def _node_arg(info: ValueInfo, declared: frozenset[str] = frozenset()) -> NodeArg:
    """``declared``: the symbolic dims the model's inputs name; other ``unk__N`` names were
    made up by onnx shape inference and show as ``None`` (unknown), as in onnxruntime."""
    if info.kind in ("tensor", "sparsetensor"):
        shape = [] if info.shape is None else [
            None if isinstance(d, str) and d not in declared and _INFERRED_DIM.fullmatch(d)
            else d for d in info.shape]
    else:  # onnxruntime gives sequences, maps and optionals no shape
        shape = []
    return NodeArg(info.name, info.type_string, shape)


_INFERRED_DIM = re.compile(r"unk__\d+")



def _run_as_exported(model: Model, feeds: dict[str, Any] | None
                     ) -> tuple[dict[str, Any], list[Any]]:
    """The optimizer's model runner (``session.optimizer_verify=1``): ``model`` run without
    optimizations on the default CPU provider, on ``feeds`` or on fixed random inputs."""
    from ..framework.feeds import random_feeds

    so = SessionOptions()
    so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = InferenceSession(model.to_proto(), so, providers=[DEFAULT_PROVIDER])
    if feeds is None:
        feeds = random_feeds(sess, seed=1234, dim=2)
    return feeds, [np.asarray(o) for o in sess.run(None, feeds)]


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a session is built: building allocates hundreds
    of thousands of container objects (graph nodes, values, patterns), each allocation counting
    towards a collection that then walks every object in the process, the model's included
    (~30% of MobileNetV2's session creation). Nothing built here needs collecting before the
    session exists; a collector the caller had disabled stays off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Phase:
    """Times a step of session creation into the profile (``cat`` ``Session``, nested in
    ``session_initialization``); ``args`` go into the event."""

    __slots__ = ("_session", "_name", "_t0", "args")

    def __init__(self, session: InferenceSession, name: str) -> None:
        self._session, self._name, self.args = session, name, {}

    def __enter__(self) -> _Phase:
        self._t0 = time.perf_counter_ns()
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self._session._profile_event(self._name, "Session", self._t0,
                                         time.perf_counter_ns(), self.args)


def _weak_method(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` without a reference to its object: the session's providers keep what it
    hands them, and a session in no reference cycle is freed, its kernels and packed weights
    with it, as soon as the last reference to it goes (a cycle would leave hundreds of MB of
    packed weights to the cyclic collector, whenever it next runs)."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = ref()
        if bound is None:
            raise InvalidArgumentError("the session this provider context belonged to is gone")
        return bound(*args, **kwargs)

    return call


_LAYOUT_ONLY_PASSES = frozenset({"NhwcTransformer", "DQ -> elementwise op -> Q -> 8-bit table",
                                 "QLinear op of x and a table of x -> one table"})
"""Passes whose nodes only onnxplex runs (a saved model at their level is not portable)."""


def _configured_tensor_limit(config: Mapping[str, str]) -> int | None:
    """The session's memory limit from its ``session.onnxplex.max_tensor_bytes`` config entry
    (a positive number of bytes, with an optional KiB/MiB/GiB/TiB unit); ``None`` when it is
    not set (the process default: ``ONNXPLEX_MAX_TENSOR_BYTES`` or the machine's memory)."""
    text = config.get(MAX_TENSOR_BYTES_KEY)
    if text is None:
        return None
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "b": 1}
    number = text.strip().lower()
    unit = next((u for u in units if number.endswith(u)), "")
    try:
        value = float(number[:len(number) - len(unit)]) * units.get(unit, 1)
    except ValueError:
        value = 0.0
    if not value >= 1 or value == float("inf"):
        raise as_status(InvalidArgumentError, InvalidArgument)(
            f"session config entry {MAX_TENSOR_BYTES_KEY}={text!r}: expected a positive number "
            "of bytes, optionally with a unit (e.g. '536870912' or '512MiB')")
    return int(value)


STRICT_SHAPES = "session.strict_shape_type_inference"
_ORT_CPU = "CPUExecutionProvider"


def _ort_cpu_options(entry: Any, opts: dict) -> dict:
    """Options given to onnxruntime's CPU provider name: the default provider's own are kept,
    the rest (``use_arena``, ``arena_extend_strategy``: onnxruntime's memory arena, which
    onnxplex does not have) are dropped with a log line, as onnxruntime's CPU provider ignores
    keys it does not use."""
    specs = entry.load().option_specs
    ignored = sorted(k for k in opts if k not in specs)
    if ignored:
        logger.info("%s options %s ignored (onnxruntime's CPU provider ignores keys it does not "
                    "use; %s takes %s)", _ORT_CPU, ignored, entry.name,
                    sorted(specs) or "none")
    return {k: v for k, v in opts.items() if k in specs}



class InferenceSession:
    """Load a model and run it on an ordered list of execution providers.

    ``path_or_bytes`` is a file path, serialized model bytes, an ``onnx.ModelProto`` or an
    already loaded :class:`onnxplex.Model`. ``providers`` lists provider names (or ORT aliases
    such as ``CPUExecutionProvider``), optionally as ``(name, options)`` tuples, in priority
    order; by default every available provider that is not opt-in, the default CPU provider last.
    Errors are :class:`onnxplex.OnnxplexError` subclasses that name what is at fault.
    """

    def __init__(self, path_or_bytes: Any, sess_options: SessionOptions | None = None,
                 providers: Sequence[Any] | None = None,
                 provider_options: Sequence[Mapping[str, Any]] | None = None,
                 **kwargs: Any) -> None:
        self._disabled_optimizers = frozenset(kwargs.pop("disabled_optimizers", None) or ())
        read_config = kwargs.pop("read_config_from_model", None)
        self._read_config = (os.environ.get("ORT_LOAD_CONFIG_FROM_MODEL") == "1"
                             if read_config is None else bool(read_config))
        if kwargs:
            raise InvalidArgumentError(f"unknown InferenceSession argument(s) {sorted(kwargs)}")
        self._options = (sess_options or SessionOptions())._copy()
        self._given_options = sess_options   # (its load cancellation flag may be set meanwhile)
        self._tensor_limit = _configured_tensor_limit(self._options._config)
        self._lock = threading.Lock()
        self._profile: list[dict[str, Any]] | None = [] if self._options.enable_profiling else None
        self._profile_t0 = time.perf_counter_ns()
        t0 = time.perf_counter_ns()
        self._source = path_or_bytes  # set_providers builds the session again from it
        self._profile_start_ns = time.time_ns() if self._profile is not None else 0
        with _gc_paused(), sharing_small_arrays(), tensor_limit(self._tensor_limit):
            self._create(path_or_bytes, providers, provider_options)
        self._profile_event("session_initialization", "Session", t0, time.perf_counter_ns())

    def _strict_shapes(self) -> bool:
        """``session.strict_shape_type_inference=1``: declared shapes that contradict the
        nodes refuse the model (by default they are merged with a warning, as onnxruntime
        merges them)."""
        return self._options._config.get(STRICT_SHAPES, "0") == "1"

    def _check_cancelled(self) -> None:
        if getattr(self._given_options, "_cancel_load", False):
            raise LoadCancelledError("the session's creation was cancelled "
                                     "(SessionOptions.set_load_cancellation_flag(True))")

    def _create(self, path_or_bytes: Any, providers: Sequence[Any] | None,
                provider_options: Sequence[Mapping[str, Any]] | None) -> None:
        self._check_cancelled()
        with self._phase("model_loading"):
            model = load_model(path_or_bytes, overrides=self._options._overrides(),
                               strict_shapes=self._strict_shapes())
        self._check_cancelled()
        self._meta = _metadata(model)
        if self._read_config:
            self._apply_ort_config(self._meta.custom_metadata_map.get("ort_config"))
        self._inputs = self._describe_inputs(model)
        named = frozenset(d for a in self._inputs for d in a.shape if isinstance(d, str))
        self._outputs = [_node_arg(model.value_info(v.name), named) for v in model.graph.outputs]
        self._input_infos = {a.name: model.value_info(a.name) for a in self._inputs}
        self._quick_feeds = _quick_feed_checks(self._input_infos)
        self._input_names = frozenset(self._input_infos)
        self._overridable = [_node_arg(model.value_info(v.name)) for v in model.graph.inputs
                             if v.name in model.overridable]
        if providers is None and self._options._providers:
            providers = [(name, dict(opts)) for name, opts in self._options._providers]
        self._requested = (providers, provider_options)
        self._build(model)

    # ----------------------------------------------------------------------------- building

    def _describe_inputs(self, model: Model) -> list[NodeArg]:
        named = frozenset(d.value for v in model.graph.inputs for d in (v.shape or ())
                          if isinstance(getattr(d, "value", None), str))
        return [_node_arg(model.value_info(n), named) for n in model.input_names]

    def _resolve_providers(self, providers, provider_options) -> list[tuple[str, dict, bool]]:
        """-> [(canonical name, options, explicitly requested)] in priority order."""
        fallback_off = self._options._config.get(DISABLE_CPU_FALLBACK, "0") == "1"
        if providers is None:
            names = [(n, {}) for n in get_available_providers()
                     if not provider_entry(n).load().opt_in]
            explicit = False
        else:
            if isinstance(providers, str):
                providers = [providers]
            names = []
            for k, p in enumerate(providers):
                if isinstance(p, (tuple, list)):
                    if len(p) != 2 or not isinstance(p[1], Mapping):
                        raise InvalidArgumentError(
                            f"providers[{k}] must be a name or a (name, options dict) pair, "
                            f"got {p!r}")
                    names.append((p[0], dict(p[1])))
                elif isinstance(p, str):
                    names.append((p, {}))
                else:
                    raise InvalidArgumentError(f"providers[{k}] must be a str, got {p!r}")
            explicit = True
            if provider_options is not None:
                if len(provider_options) != len(names):
                    raise InvalidArgumentError(
                        f"provider_options has {len(provider_options)} entries for "
                        f"{len(names)} providers; give one dict per provider")
                names = [(n, {**o, **dict(po)}) for (n, o), po in zip(names, provider_options)]
        out: list[tuple[str, dict, bool]] = []
        for name, opts in names:
            try:
                entry = provider_entry(name)
            except InvalidArgumentError:
                if name not in ORT_EXECUTION_PROVIDERS:
                    raise
                # As an onnxruntime build without that provider: warn, use the others.
                msg = (f"provider {name!r} is an onnxruntime execution provider onnxplex does "
                       "not have; skipped")
                warnings.warn(msg, RuntimeWarning, stacklevel=4)
                continue
            if any(entry.name == o[0] for o in out):
                raise InvalidArgumentError(f"provider {entry.name!r} is listed twice")
            if name == _ORT_CPU and opts:
                opts = _ort_cpu_options(entry, opts)
            why = entry.availability(opts)
            if not why.ok:
                if entry.name == DEFAULT_PROVIDER:
                    raise provider_unavailable(entry, why)
                msg = (f"provider {entry.name!r} requested but not available, skipped: "
                       f"{why.reason}")
                warnings.warn(msg, RuntimeWarning, stacklevel=4)
                continue
            out.append((entry.name, opts, explicit))
        has_cpu = any(n == DEFAULT_PROVIDER for n, _, _ in out)
        if fallback_off:
            if has_cpu and explicit:
                raise InvalidArgumentError(
                    "conflicting session configuration: the default CPU provider was listed "
                    f"explicitly, but {DISABLE_CPU_FALLBACK}=1 disables fallback to it")
            out = [o for o in out if o[0] != DEFAULT_PROVIDER]
            if not out:
                raise InvalidArgumentError(
                    f"{DISABLE_CPU_FALLBACK}=1 but no provider other than the default CPU "
                    "provider is available")
        elif not has_cpu:
            logger.info("adding default CPU provider %r", DEFAULT_PROVIDER)
            out.append((DEFAULT_PROVIDER, {}, False))
        return out

    def _instantiate(self, resolved) -> list[ExecutionProvider]:
        ctx = ProviderContext(intra_op_num_threads=int(self._options.intra_op_num_threads),
                              session_config=dict(self._options._config),
                              compile_graph=_weak_method(self._compile_body))
        instances = []
        for name, opts, _ in resolved:
            cls = provider_entry(name).load()
            try:
                instances.append(cls(opts, context=ctx))
            except OnnxplexError:
                raise
            except Exception as e:  # noqa: BLE001
                raise ProviderError(f"provider {name!r} failed to initialise: "
                                    f"{type(e).__name__}: {e}", provider=name) from e
        return instances

    def _apply_ort_config(self, text: str | None) -> None:
        """The session options a model carries in its ``ort_config`` metadata entry
        (``{"session_options": {"intra_op_num_threads": 2, ...}}``), read as onnxruntime reads
        them when ``ORT_LOAD_CONFIG_FROM_MODEL=1`` (or ``read_config_from_model=True``): the
        thread counts, execution mode, optimization level and profiling switch override the
        options given; other keys are ignored."""
        if text is None:
            return
        try:
            config = json.loads(text)
        except ValueError as e:
            raise as_status(InvalidModelError, InvalidArgument, RuntimeError)(   # (onnxruntime's)
                f"Json stored in the `ort_config` key cannot be parsed. Error message: {e}"
            ) from None
        settings = config.get("session_options", {}) if isinstance(config, dict) else {}
        checks: dict[str, Callable[[int], Any]] = {
            "intra_op_num_threads": lambda v: v if v >= 0 else None,
            "inter_op_num_threads": lambda v: v if v >= 0 else None,
            "execution_mode": lambda v: ExecutionMode(v) if v in (0, 1) else None,
            "graph_optimization_level": lambda v: GraphOptimizationLevel(v)
            if v in GraphOptimizationLevel._value2member_map_ else None,
            "enable_profiling": lambda v: bool(v) if v in (0, 1) else None,
        }
        for key, value in settings.items():
            check = checks.get(key)
            if check is None:
                logger.info("ignoring unsupported session option in ORT config: %s", key)
                continue
            setting = check(value) if isinstance(value, int) and not isinstance(value, bool) \
                else None
            if setting is None:
                raise as_status(InvalidModelError, InvalidArgument)(
                    f"Unsupported {key} value in ORT config: {value!r}")
            setattr(self._options, key, setting)
        if self._options.enable_profiling and self._profile is None:
            self._profile, self._profile_start_ns = [], time.time_ns()

    def _build(self, model: Model) -> None:
        resolved = self._resolve_providers(*self._requested)
        providers = self._instantiate(resolved)
        self._providers = providers
        fallback_off = self._options._config.get(DISABLE_CPU_FALLBACK, "0") == "1"
        level = int(self._options.graph_optimization_level)

        cpu = next((p for p in providers if p.name == DEFAULT_PROVIDER), None)
        if cpu is None:
            cpu = provider_entry(DEFAULT_PROVIDER).load()()
        opt = {"disabled": self._disabled_optimizers, "config": self._options._config,
               "runner": _run_as_exported}
        # The model is as loaded from the source until the first optimize() call: should a
        # pass raise there, loading the source again restores it (cheaper than a snapshot of
        # every session's graph). A Model given as the source is the same object: a snapshot.
        source = self._source
        overrides = self._options._overrides()
        strict = self._strict_shapes()
        reload = (None if isinstance(source, Model)
                  else lambda: load_model(source, overrides=overrides,
                                          strict_shapes=strict).ir.graph)
        others = [p for p in providers if p.name != DEFAULT_PROVIDER]

        def optimize_model(model: Model, reload: Callable[[], Any] | None) -> list[PassReport]:
            if level < 2 or not others:  # every level in one run (one rollback snapshot)
                return optimize(model, level, cpu.compile, reload=reload, **opt)
            # Fusions serve the default CPU provider: nodes another provider claims on the
            # basic-optimized graph are left alone (onnxruntime applies its level-2 fusions
            # to CPU-assigned nodes only).
            reports = optimize(model, 1, cpu.compile, reload=reload, **opt)
            protected = InferenceSession._claimed_by(model, others)   # (no self: no cycle)
            return reports + optimize(model, level, cpu.compile, min_level=2,
                                      protected=protected, **opt)

        # (again after function bodies are expanded into the graph, see _partition_compile)
        self._optimize_model = optimize_model
        phase = self._phase("graph_optimization")
        with phase:
            self._optimizer_reports = optimize_model(model, reload)
            if self._profile is not None:
                phase.args["passes"] = {r.name: r.changes for r in self._optimizer_reports
                                        if r.changes}
        self._fallback_off = fallback_off
        self._body_plans: list[tuple[str, PartitionPlan]] = []
        self._check_cancelled()
        with self._phase("partition_and_compile"):
            model, plan, units, active = self._partition_compile(model, providers)
        self._plan = plan
        self._model = model
        self._held_bytes = _weights_in_memory(model)
        self._active = active
        if self._options.optimized_model_filepath:   # (after function bodies are expanded)
            _save_optimized(_savable(model.to_proto()), self._options.optimized_model_filepath,
                            self._options._config)
            if any(r.name in _LAYOUT_ONLY_PASSES and r.changes for r in self._optimizer_reports):
                # as onnxruntime warns when it saves NCHWc nodes
                logger.warning(
                    "the optimized model saved to %s has channels-last nodes (com.microsoft "
                    "NhwcFusedConv, com.ms.internal.nhwc) or onnxplex's own (ai.onnxplex) "
                    "(layout level, graph_optimization_level >= "
                    "ORT_ENABLE_LAYOUT): onnxplex runs it, onnxruntime's CPU provider has no "
                    "kernel for them; save at ORT_ENABLE_EXTENDED for a portable model",
                    self._options.optimized_model_filepath)

        self._check_cancelled()
        with self._phase("execution_plan"):
            self._exec = _executor.build_plan(model, units)
        self._raw_maps = _raw_map_inputs(self._exec, self._input_infos)
        self._pool = None
        if self._options.execution_mode == ExecutionMode.ORT_PARALLEL:
            workers = int(self._options.inter_op_num_threads) or (os.cpu_count() or 2)
            self._pool = ThreadPoolExecutor(max_workers=workers,
                                            thread_name_prefix="onnxplex-interop")
            # the pool's threads go away with the session, not at interpreter exit
            weakref.finalize(self, self._pool.shutdown, wait=False)
        # onnxruntime's memory patterns (not with the inter-op pool: its threads allocate)
        self._mem_patterns = (
            _mempattern.MemoryPatterns(not any(isinstance(d, str) or d is None
                                               for a in self._inputs for d in a.shape))
            if self._options.enable_mem_pattern and self._pool is None
            and _mempattern.available() else None)
        self._serialize_runs = not all(p.concurrent_run_supported for p in active)
        # runs that need no lock, no inter-op pool and find numpy's error state where numpy 2
        # keeps it (see run)
        # outputs declared sparse_tensor(...): returned as SparseTensor (COO), as onnxruntime
        # returns them (the kernels compute dense arrays)
        self._sparse_outputs = frozenset(   # (as declared: folding may have made them dense)
            a.name for a in self._outputs if a.type.startswith("sparse_tensor("))
        self._plain_runs = (not self._serialize_runs and self._pool is None
                            and _ERRSTATE_VAR is not None and not self._sparse_outputs
                            and self._tensor_limit is None)
        if _debug_level() >= 1 or self._options.log_severity_level == 0 \
                or logger.isEnabledFor(logging.DEBUG):   # (verbose: set_default_logger_*)
            logger.log(logging.WARNING if _debug_level() else logging.DEBUG,
                       "placement:\n%s", plan.report())

    @staticmethod
    def _claimed_by(model: Model, providers: Sequence[ExecutionProvider]) -> frozenset[int]:
        """``id()`` of the nodes ``providers`` would claim (a provisional partition)."""
        plan = partition(model, providers, on_provider_error=lambda p, e: None, partial=True)
        return frozenset(id(model.nodes[i]) for part in plan.partitions for i in part.nodes)

    def _partition_compile(self, model: Model, providers: Sequence[ExecutionProvider]):
        """Partition ``model`` over ``providers`` and compile every partition.

        A provider whose ``compile`` raises is disabled and partitioning re-runs without it;
        nodes nobody claims that have a function body (ONNX schema or model-local) are expanded
        into it and partitioning re-runs, as onnxruntime does. Returns the (possibly expanded)
        model, the plan, the compiled units and the providers that stayed active.
        """
        disabled: set[str] = set()
        notes: list[str] = []
        fallback_off = self._fallback_off

        def on_error(prov: ExecutionProvider, err: Exception) -> None:
            if fallback_off:
                raise err
            warnings.warn(f"{err}; its nodes fall back to the next providers", RuntimeWarning,
                          stacklevel=6)

        while True:
            active = [p for p in providers if p.name not in disabled]
            try:
                plan = partition(model, active, on_provider_error=on_error,
                                 fallback_disabled=fallback_off)
            except PartitionError as e:
                expanded = expand_nodes(model, e.unassigned) if model.outer_names == () \
                    and model._body is None else None
                if expanded is None:
                    raise
                model, done = expanded
                notes.append("expanded into their function bodies: " + ", ".join(done))
                logger.info(notes[-1])
                # The bodies' nodes are new to the optimizer: their fusions and layout run
                # now (onnxruntime's level-2 transformers run after it inlines functions).
                self._optimizer_reports += self._optimize_model(model, None)
                continue
            self._model, self._active = model, active  # bodies compiled below see these
            try:
                units = self._compile(model, plan, active)
            except CompileError as e:
                if fallback_off or e.provider in (None, DEFAULT_PROVIDER):
                    raise
                msg = f"{e}; provider {e.provider!r} disabled for this session"
                warnings.warn(msg, RuntimeWarning, stacklevel=3)
                notes.append(msg)
                disabled.add(e.provider)
                continue
            plan.notes[:0] = notes
            return model, plan, units, active

    def _compile_body(self, graph: Any) -> _executor.GraphRunner:
        """ProviderContext.compile_graph: a subgraph body through the same machinery."""
        parent, active = self._model, self._active
        body = parent.body_model(graph)
        body_model, plan, units, _ = self._partition_compile(body, active)
        self._model, self._active = parent, active
        self._body_plans.append((graph.name or "subgraph", plan))
        exec_plan = _executor.build_plan(body_model, units)
        inputs = [v.name for v in graph.inputs if v.name not in graph.initializers]
        return _executor.GraphRunner(exec_plan, inputs, body.outer_names,
                                     [v.name for v in graph.outputs])

    def _compile(self, model: Model, plan: PartitionPlan,
                 providers: Sequence[ExecutionProvider]) -> list[_executor.CompiledUnit]:
        by_name = {p.name: p for p in providers}
        units = []
        for part in plan.partitions:
            prov = by_name[part.provider]
            sg = _subgraph(model, part.nodes, part.name or f"{part.provider}_{part.id}",
                           prov.preferred_layout)
            first = sg.nodes[0]
            try:
                kernel = prov.compile(sg)
            except (CompileError, InvalidModelError):   # the model's fault, e.g. a body's
                raise                                   # tensor that cannot be read
            except (Exception, SystemExit) as e:  # noqa: BLE001 - attributed to the provider
                raise CompileError(
                    f"provider {prov.name!r}: compile failed for "
                    f"{'node ' + repr(first.display_name) if sg.is_single_node else sg.name} "
                    f"({first.op_type}): {type(e).__name__}: {e}",
                    provider=prov.name, node=first.display_name, op_type=first.op_type) from e
            if not callable(kernel):
                raise CompileError(f"provider {prov.name!r}: compile returned "
                                   f"{type(kernel).__name__}, not a callable kernel",
                                   provider=prov.name, node=first.display_name,
                                   op_type=first.op_type)
            units.append(record(_executor.CompiledUnit, provider=prov.name, subgraph=sg,
                                kernel=kernel, node_indices=part.nodes))
        return units

    # ------------------------------------------------------------------------------ running

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: RunOptions | None = None) -> list[Any]:
        """Run the model; returns the requested outputs (all when ``output_names`` is None)."""
        if run_options is not None and run_options._adapters:
            input_feed = dict(input_feed)
            for adapter in run_options._adapters:
                input_feed.update(adapter._parameters)
        plan = self._exec
        out_slots = plan.output_slots
        if not output_names:
            names: Sequence[str] = out_slots.keys()
        else:
            names = output_names
            for n in names:
                if n not in out_slots:
                    raise InvalidArgumentError(
                        f"Invalid output name:{n}; the model's outputs are "
                        f"{list(out_slots)}")
        feeds = self._validate_feeds(input_feed)
        slots = _executor.feed_slots(plan, feeds)
        cancelled = (lambda: run_options.terminate) if run_options is not None else None
        record = self._record if self._profile is not None else None
        if self._plain_runs and cancelled is None and record is None \
                and _executor.no_cancellation_set():
            # The common case in the fewest calls (a one-node model's run is ~10 us; each
            # Python call layer here is ~0.1-0.2 us): floating-point warnings off (they are
            # results, as in onnxruntime), the plan's compiled function (the steps in order).
            token = _ERRSTATE_VAR.set(_IGNORE_ALL)
            patterns = self._mem_patterns
            pattern = patterns.begin(feeds) if patterns is not None else None
            try:
                (plan._runner or plan.runner())(slots)
            finally:
                _ERRSTATE_VAR.reset(token)
                if pattern is not None:
                    patterns.end(pattern)
            return [_owned(slots[out_slots[n]], feeds) for n in names]
        t0 = time.perf_counter_ns()
        # Floating-point warnings (overflow to inf, 0/0) are results, as in onnxruntime.
        with np.errstate(all="ignore"):
            if self._serialize_runs:
                with self._lock:
                    self._execute(slots, cancelled, record, feeds)
            else:
                self._execute(slots, cancelled, record, feeds)
        if record is not None:
            self._profile_event("model_run", "Session", t0, time.perf_counter_ns())
        if self._sparse_outputs:
            return [SparseTensor.from_dense(v) if n in self._sparse_outputs
                    and isinstance(v, np.ndarray) else _owned(v, feeds)
                    for n, v in ((n, slots[out_slots[n]]) for n in names)]
        return [_owned(slots[out_slots[n]], feeds) for n in names]

    def _execute(self, slots, cancelled, record, feeds=None) -> None:
        patterns = self._mem_patterns
        pattern = patterns.begin(feeds) if patterns is not None and feeds is not None else None
        try:
            self._execute_limited(slots, cancelled, record)
        finally:
            if pattern is not None:
                patterns.end(pattern)

    def _execute_limited(self, slots, cancelled, record) -> None:
        if self._tensor_limit is not None:
            with tensor_limit(self._tensor_limit):
                self._execute_checked(slots, cancelled, record)
        else:
            self._execute_checked(slots, cancelled, record)

    def _execute_checked(self, slots, cancelled, record) -> None:
        if cancelled is None and _executor.no_cancellation_set():
            self._execute_plan(slots, cancelled, record)   # (nothing to hand to bodies)
            return
        with _executor.cancellation(cancelled):
            self._execute_plan(slots, cancelled, record)

    def _execute_plan(self, slots, cancelled, record) -> None:
        if self._pool is not None:
            _executor.run_parallel(self._exec, slots, self._pool, cancelled=cancelled,
                                   record=record)
        else:
            _executor.run_sequential(self._exec, slots, cancelled=cancelled, record=record)

    def _validate_feeds(self, feed: Mapping[str, Any]) -> dict[str, Any]:
        if type(feed) is not dict and not isinstance(feed, Mapping):
            raise InvalidFeedError(f"input_feed must be a dict of name -> array, got "
                                   f"{type(feed).__name__}")
        plan = self._exec
        out: dict[str, Any] = {}
        symbols: dict[str, tuple[int, str]] = {}
        quick = self._quick_feeds
        for name, value in feed.items():
            check = quick.get(name)
            if check is not None and type(value) is np.ndarray and value.dtype is check[0] \
                    and value.ndim == check[1] and value.flags.c_contiguous:
                shape = value.shape
                for a, d in check[2]:
                    if shape[a] != d:
                        break
                else:
                    out[name] = value   # (what the checks below would find good, as it is)
                    continue
            info = self._input_infos.get(name)
            if info is None and isinstance(name, str) and name in plan.input_slots:
                info = self._model.value_info(name)   # an overridable initializer
            if info is None:
                raise InvalidFeedError(
                    f"Invalid input name: {name}; the model's inputs are "
                    f"{[a.name for a in self._inputs]}")
            if info.kind != "tensor":   # a sequence, map or optional
                if name in self._raw_maps and type(value) is dict and _str_float_map(value):
                    out[name] = value   # (its only readers take it as it is, see _raw_maps)
                    continue
                out[name] = structured_feed(info, value)
                continue
            if isinstance(value, Mapping):   # (numpy would make a 0-d object array of it)
                raise InvalidFeedError(f"input {name!r}: expected a numpy array for "
                                       f"{info.type_string}, got {type(value).__name__}")
            arr = tensor_feed(repr(name), value, info.elem_type)
            if info.shape is not None:
                if arr.ndim != len(info.shape):
                    raise InvalidFeedError(
                        f"Invalid rank for input: {name} Got: {arr.ndim} Expected: "
                        f"{len(info.shape)} Please fix either the inputs/outputs or the model. "
                        f"(declared shape {list(info.shape)}, fed {list(arr.shape)})")
                for axis, (want_d, got) in enumerate(zip(info.shape, arr.shape)):
                    if isinstance(want_d, int) and want_d != got:
                        raise InvalidFeedError(
                            f"Got invalid dimensions for input: {name} for the following "
                            f"indices\n index: {axis} Got: {got} Expected: {want_d}\n Please "
                            "fix either the inputs/outputs or the model. (declared shape "
                            f"{list(info.shape)}, fed {list(arr.shape)})")
                    if isinstance(want_d, str):
                        seen = symbols.get(want_d)
                        if seen is not None and seen[0] != got:
                            raise InvalidFeedError(
                                f"input {name!r}: dimension {axis} ({want_d!r}) is {got}, but "
                                f"input {seen[1]!r} has {want_d!r} = {seen[0]}")
                        symbols.setdefault(want_d, (got, name))
            out[name] = arr
        missing = [] if out.keys() >= self._input_names else [
            a.name for a in self._inputs if a.name not in out]
        if missing:
            raise InvalidFeedError(f"Required inputs ({missing}) are missing from input feed "
                                   f"({list(feed)}).")
        return out

    # ---------------------------------------------------------------------------- profiling

    def _phase(self, name: str) -> _Phase:
        """A step of session creation, recorded as a ``Session`` event when profiling."""
        return _Phase(self, name)

    def _profile_event(self, name: str, cat: str, start: int, end: int,
                       args: dict[str, Any] | None = None) -> None:
        if self._profile is None:
            return
        ev = {"cat": cat, "pid": os.getpid(), "tid": threading.get_native_id(),
              "dur": (end - start) // 1000, "ts": (start - self._profile_t0) // 1000,
              "ph": "X", "name": name, "args": args or {}}
        with self._lock:
            self._profile.append(ev)

    def _record(self, step: _executor.Step, start: int, end: int, ins, outs) -> None:
        def ts(vals):
            return [{(array_type_name(v)): list(v.shape)} for v in vals
                    if isinstance(v, np.ndarray)]

        self._profile_event(f"{step.name}_kernel_time", "Node", start, end, {
            "op_name": step.op_type, "provider": step.provider,
            "node_index": ",".join(str(i) for i in step.node_indices),
            "input_type_shape": ts(ins), "output_type_shape": ts(outs),
            "activation_size": str(sum(v.nbytes for v in ins if isinstance(v, np.ndarray))),
            "output_size": str(sum(v.nbytes for v in outs if isinstance(v, np.ndarray))),
            **step.args,
        })

    def end_profiling(self) -> str:
        """Write the Chrome-trace JSON (onnxruntime's event format and file layout); returns its
        path, or '' when profiling is off."""
        if self._profile is None:
            return ""
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        path = f"{self._options.profile_file_prefix}_{stamp}.json"
        with self._lock:
            events = sorted(self._profile, key=lambda e: e["ts"])
            self._profile = None
        with open(path, "w", encoding="utf-8") as f:
            # onnxruntime's layout: a JSON array, "[" alone on the first line, then one event
            # a line (tools and tests read it line by line), "]" on the last
            f.write("[\n" + ",\n".join(json.dumps(e, separators=(",", ":")) for e in events)
                    + "\n]\n")
        return path

    def get_profiling_start_time_ns(self) -> int:
        """When profiling started (``time.time_ns()`` clock), or 0 when profiling is off."""
        return self._profile_start_ns

    # ------------------------------------------------------ onnxruntime's other run entry points

    def run_with_ort_values(self, output_names: Sequence[str] | None,
                            input_dict_ort_values: Mapping[str, OrtValue],
                            run_options: RunOptions | None = None) -> list[OrtValue]:
        """``run`` with :class:`OrtValue` feeds and results: each feed's array reaches the
        kernels without a copy, and each result wraps the output array (no copy either)."""
        if not isinstance(input_dict_ort_values, Mapping):
            raise InvalidFeedError("input_dict_ort_values must be a dict of name -> OrtValue, "
                                   f"got {type(input_dict_ort_values).__name__}")
        feeds = {}
        for name, value in input_dict_ort_values.items():
            if not isinstance(value, OrtValue):
                raise InvalidFeedError(
                    f"run_with_ort_values: input {name!r} must be an onnxplex.OrtValue, got "
                    f"{type(value).__name__} (run() takes numpy arrays)")
            feeds[name] = value._value
        names = list(output_names) if output_names else [a.name for a in self._outputs]
        types = {a.name: a.type for a in self._outputs}
        return [OrtValue(v, types.get(n)) for n, v in
                zip(names, self.run(names, feeds, run_options))]

    def run_with_ortvaluevector(self, run_options: RunOptions | None,
                                feed_names: Sequence[str], feeds: OrtValueVector,
                                fetch_names: Sequence[str], fetches: OrtValueVector,
                                fetch_devices: Sequence[Any]) -> None:
        """onnxruntime's lowest-overhead run: feeds and results as :class:`OrtValueVector` s
        (``fetches`` is filled with the results, in ``fetch_names`` order; the devices must be
        the CPU)."""
        if len(feed_names) != len(feeds):
            raise InvalidFeedError(f"run_with_ortvaluevector: {len(feed_names)} feed names and "
                                   f"{len(feeds)} feeds")
        for device in fetch_devices:
            if getattr(device, "device_type", lambda: 0)() != 0:
                raise InvalidArgumentError(f"run_with_ortvaluevector: fetch device {device!r} "
                                           "is not the CPU; onnxplex runs on the CPU only")
        results = self.run_with_ort_values(list(fetch_names), dict(zip(feed_names, feeds)),
                                           run_options)
        fetches._clear()
        for value in results:
            fetches.push_back(value)

    def run_async(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
                  callback: Any, user_data: Any, run_options: RunOptions | None = None) -> None:
        """Run on another thread, then call ``callback(results, user_data, error)``: the
        outputs and ``""``, or ``[]`` and the error message (as onnxruntime)."""
        def work() -> None:
            try:
                results = self.run(output_names, input_feed, run_options)
            except Exception as e:  # noqa: BLE001 - handed to the callback, as onnxruntime
                callback([], user_data, f"{type(e).__name__}: {e}")
                return
            callback(results, user_data, "")

        threading.Thread(target=work, name="onnxplex-run-async", daemon=True).start()

    def io_binding(self) -> IOBinding:
        """A new :class:`IOBinding` for this session (CPU inputs and outputs)."""
        return IOBinding(self)

    def create_ortvalue_from_shape_and_type(self, shape: Sequence[int], element_type: Any,
                                            device_type: str = "cpu", device_id: int = 0,
                                            vendor_id: int = -1) -> OrtValue:
        """A new zero-filled tensor :class:`OrtValue` (onnxruntime's session method for a
        device its providers use; here the CPU)."""
        return OrtValue.ortvalue_from_shape_and_type(shape, element_type, device_type,
                                                     device_id, vendor_id)

    def run_with_iobinding(self, iobinding: IOBinding,
                           run_options: RunOptions | None = None) -> None:
        """Run with the inputs and outputs bound in ``iobinding``; read the results with its
        ``get_outputs()`` or ``copy_outputs_to_cpu()``."""
        if not isinstance(iobinding, IOBinding) or iobinding._session is not self:
            raise InvalidArgumentError("run_with_iobinding: the IOBinding must come from this "
                                       "session's io_binding()")
        iobinding._run(run_options)

    def _bindable_inputs(self) -> set[str]:
        return set(self._input_infos) | set(self._exec.input_slots)

    def _input_type(self, name: str) -> str:
        """A bindable input's type string (``tensor(float)``, ``map(string,tensor(float))``)."""
        info = self._input_infos.get(name) or self._model.value_info(name)
        return info.type_string

    def set_providers(self, providers: Sequence[Any] | None = None,
                      provider_options: Sequence[Mapping[str, Any]] | None = None) -> None:
        """Build the session again on other providers (as onnxruntime re-creates its session);
        on error the session stays as it was."""
        if isinstance(self._source, Model):
            raise InvalidArgumentError(
                "set_providers: this session was created from an onnxplex.Model, which it "
                "optimized in place; create it from a path, bytes or a ModelProto to change "
                "its providers")
        state = dict(self.__dict__)
        try:
            self.__init__(self._source, self._options, providers, provider_options,
                          disabled_optimizers=self._disabled_optimizers)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(state)
            raise
        if state["_pool"] is not None:
            state["_pool"].shutdown(wait=False)
        if state.get("_held_bytes", 0) >= _COLLECT_BYTES:
            state.clear()   # (the session before: see __del__)
            _collect()

    def __del__(self) -> None:
        # onnx-ir's graph is a web of reference cycles (nodes, values and their uses point at
        # one another), so the weights it holds would stay in memory after the session is
        # dropped until the collector next reaches the generation they are in (a loop creating
        # and dropping sessions of a 32 MB model grew 32 MB a session, ten sessions deep)
        if getattr(self, "_held_bytes", 0) >= _COLLECT_BYTES:
            self.__dict__.clear()   # (being destroyed: what it holds goes first)
            _collect()

    # -------------------------------------------------------------------------- introspection

    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        return list(self._overridable)

    def get_modelmeta(self) -> ModelMetadata:
        return self._meta

    def get_input_memory_infos(self) -> list[OrtMemoryInfo]:
        """Where each input is read from: the CPU's memory (onnxplex's tensors are numpy
        arrays)."""
        return [cpu_memory_info() for _ in self._inputs]

    def get_output_memory_infos(self) -> list[OrtMemoryInfo]:
        """Where each output is written: the CPU's memory."""
        return [cpu_memory_info() for _ in self._outputs]

    def get_input_epdevices(self) -> list[OrtEpDevice | None]:
        """The device each input is consumed on, per input: None (no particular device; an
        entry onnxruntime also leaves null for its CPU provider's inputs)."""
        return [None for _ in self._inputs]

    def get_providers(self) -> list[str]:
        """Providers of this session in priority order (the default CPU provider included);
        ``in`` also accepts onnxruntime's names (``"CPUExecutionProvider" in ...``)."""
        return ProviderNames(ProviderName(p.name) for p in self._providers)

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        """Each provider's effective options as strings, by provider name (onnxruntime's
        names work as keys too)."""
        return ProviderOptionsByName((p.name, p.provider_options()) for p in self._providers)

    def get_session_options(self) -> SessionOptions:
        return self._options

    # onnxruntime's Python session keeps these in attributes that client code reads (optimum
    # reads _model_path to find the model's folder): the same names, read-only here.
    _enable_fallback = True

    @property
    def _model_path(self) -> str | None:
        """The model file's path when the session was made from one, else None."""
        src = self._source
        return os.fspath(src) if isinstance(src, (str, os.PathLike)) else None

    @property
    def _model_bytes(self) -> bytes | None:
        """The serialized model when the session was made from bytes, else None."""
        return bytes(self._source) if isinstance(self._source, (bytes, bytearray)) else None

    @property
    def _sess_options(self) -> SessionOptions:
        return self._options

    @property
    def _read_config_from_model(self) -> bool:
        return self._read_config

    @property
    def _inputs_meta(self) -> list[NodeArg]:
        return self.get_inputs()

    @property
    def _outputs_meta(self) -> list[NodeArg]:
        return self.get_outputs()

    @property
    def _overridable_initializers(self) -> list[NodeArg]:
        return self.get_overridable_initializers()

    @property
    def _model_meta(self) -> ModelMetadata:
        return self.get_modelmeta()

    @property
    def _provider_options(self) -> dict[str, dict[str, str]]:
        return self.get_provider_options()

    @property
    def _sess(self) -> _CLevelSession:
        """What onnxruntime code reaches as ``sess._sess`` (its C-level session): the
        C-level run calls, with the argument orders of that class."""
        return _CLevelSession(self)

    def disable_fallback(self) -> None:
        """onnxruntime retries a failed run on its CPU provider unless this is called;
        onnxplex has no such retry (the CPU provider already runs what others decline), so
        this only records the choice."""
        self._enable_fallback = False

    def enable_fallback(self) -> None:
        """See :meth:`disable_fallback`."""
        self._enable_fallback = True

    def get_tuning_results(self) -> list[dict[str, Any]]:
        """onnxruntime's tunable-op results: onnxplex's kernels are not tuned at run time, so
        there are none."""
        return []

    def set_tuning_results(self, results: Sequence[Mapping[str, Any]],
                           error_on_invalid: bool = False) -> None:
        """Accept tuning results: there is nothing to tune; results naming a provider this
        session does not have are an error when ``error_on_invalid``."""
        names = self.get_providers()
        for r in results:
            ep = r.get("ep") if isinstance(r, Mapping) else None
            if ep not in names and error_on_invalid:
                raise as_status(InvalidArgumentError, RuntimeError)(
                    f"Cannot find execution provider {ep}")

    def get_provider_graph_assignment_info(self) -> list[EpAssignedSubgraph]:
        """The nodes each provider runs, one entry per partition (after optimization), as
        onnxruntime reports them when ``session.record_ep_graph_assignment_info`` is "1"."""
        if self._options._config.get(RECORD_ASSIGNMENT, "0") != "1":
            raise as_status(InvalidArgumentError, Fail)(
                f"Session configuration entry '{RECORD_ASSIGNMENT}' must be set to \"1\" to "
                "retrieve EP graph assignment information.")
        place = {p.index: p for p in self._plan.placements}
        return [EpAssignedSubgraph(ProviderName(part.provider), tuple(
            EpAssignedNode(place[i].name, place[i].op_type, place[i].domain)
            for i in part.nodes)) for part in self._plan.partitions]

    def get_provider_assignment(self) -> PartitionPlan:
        """Where every node runs, the partitions, and each decline reason (see
        :class:`onnxplex.PartitionPlan`: ``assignment()``, ``explain()``, ``report()``)."""
        return self._plan

    @property
    def model(self) -> Model:
        """The optimized model this session runs (do not modify)."""
        return self._model


_COLLECT_BYTES = 16 << 20
"""A session whose graph holds at least this many bytes of weights in memory (a model given
as bytes or a ModelProto; folded constants) runs the cycle collector when it is dropped or
rebuilt (:meth:`InferenceSession.__del__`): a full collection costs milliseconds to tens of
them, little beside building such a session, and its memory comes back at once as with
onnxruntime. Weights read from the model file on demand, or memory-mapped, are not counted."""


def _weights_in_memory(model: Model) -> int:
    total = 0
    for value in model.graph.initializers.values():
        t = value.const_value
        if type(t) is ir.serde.TensorProtoTensor:
            # a tensor still in its proto: its size from the proto's dims and type (onnx-ir's
            # nbytes builds the tensor's Shape first, and the ABC checks below are ~1 us
            # each: ~0.1 ms of a small CNN's session creation)
            size = _expected_nbytes(t.raw)
            if size is not None:
                total += size
                continue
        if t is not None and not isinstance(t, (ir.LazyTensor, ir.ExternalTensor)):
            total += t.nbytes
    return total


def _collect() -> None:
    """A full collection, unless the caller turned the collector off or the interpreter is
    shutting down (a collection already under way makes this a no-op)."""
    if gc.isenabled() and not sys.is_finalizing():
        gc.collect()


def _savable(proto: onnx.ModelProto) -> onnx.ModelProto:
    """An optimized model other runtimes load: before IR 4 every initializer had to be a graph
    input; folding adds initializers, so such a model is saved as IR 4 with its initializers
    no longer listed as inputs (they were constants under IR 3's rules, and stay so)."""
    if proto.ir_version < 4:
        inits = {t.name for t in proto.graph.initializer}
        keep = [i for i in proto.graph.input if i.name not in inits]
        del proto.graph.input[:]
        proto.graph.input.extend(keep)
        proto.ir_version = 4
    return proto


EXTERNAL_INITIALIZERS_FILE = "session.optimized_model_external_initializers_file_name"
EXTERNAL_INITIALIZERS_MIN_SIZE = "session.optimized_model_external_initializers_min_size_in_bytes"


def _save_optimized(proto: onnx.ModelProto, path: str, config: Mapping[str, str]) -> None:
    """Save the optimized model to ``path``; with onnxruntime's
    ``session.optimized_model_external_initializers_file_name`` set, the initializers of at
    least ``..._min_size_in_bytes`` (default 1024) go to that file, beside the model (a name
    relative to the model's folder, as onnxruntime writes it)."""
    location = config.get(EXTERNAL_INITIALIZERS_FILE)
    if not location:
        onnx.save_model(proto, path)
        return
    try:
        threshold = int(config.get(EXTERNAL_INITIALIZERS_MIN_SIZE, "1024"))
    except ValueError:
        raise InvalidArgumentError(
            f"{EXTERNAL_INITIALIZERS_MIN_SIZE} must be an integer number of bytes, got "
            f"{config[EXTERNAL_INITIALIZERS_MIN_SIZE]!r}") from None
    if os.path.isabs(location) or ".." in location.replace("\\", "/").split("/"):
        raise InvalidArgumentError(f"{EXTERNAL_INITIALIZERS_FILE} must name a file inside the "
                                   f"optimized model's folder, got {location!r}")
    data = os.path.join(os.path.dirname(os.path.abspath(path)), location)
    if os.path.exists(data):
        os.remove(data)   # (onnx appends to an existing file; onnxruntime writes it anew)
    onnx.save_model(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=threshold, convert_attribute=False)


def _raw_map_inputs(plan: _executor.ExecutionPlan, infos: Mapping[str, ValueInfo]
                    ) -> frozenset[str]:
    """The ``map(string, float|double)`` inputs whose every reader is a default-provider
    kernel marked ``accepts_unconverted_maps`` (cpu_mlas's DictVectorizer: it writes the
    values into a float row, where key order and rounding to float32 come out as they would
    from the converted map) and which are not graph outputs: a dict of ``str`` keys and
    ``float`` values is fed to them as it is, without the sorted float32 copy
    :func:`._feeds.structured_feed` makes (most of a batch-1 run of such a model)."""
    maps = [name for name, info in infos.items() if info.kind == "map"]
    if not maps:
        return frozenset()
    readers: dict[int, list[_executor.Step]] = {}
    for step in plan.steps:
        for s in step.inputs:
            readers.setdefault(s, []).append(step)
    outputs = set(plan.output_slots.values())
    raw = set()
    for name in maps:
        typ = infos[name].ir_type
        slot = plan.input_slots.get(name)
        if slot is None or slot in outputs or not readers.get(slot) \
                or typ.key_type != ir.DataType.STRING \
                or not isinstance(typ.value_type, ir.TensorType) \
                or typ.value_type.dtype not in (ir.DataType.FLOAT, ir.DataType.DOUBLE):
            continue
        if all(st.provider == DEFAULT_PROVIDER
               and getattr(st.kernel, "accepts_unconverted_maps", False)
               for st in readers[slot]):
            raw.add(name)
    return frozenset(raw)


def _str_float_map(d: dict) -> bool:
    return all(type(k) is str for k in d) and all(type(v) is float for v in d.values())


def _quick_feed_checks(infos: Mapping[str, ValueInfo]
                       ) -> dict[str, tuple[np.dtype, int, tuple[tuple[int, int], ...]]]:
    """Per tensor input whose type and rank are declared: (dtype, rank, (axis, size) of each
    static dim), for :meth:`InferenceSession._validate_feeds` to pass a C-contiguous array
    of that dtype and shape at once. An input sharing a symbolic dim with another input is
    left out (the full check compares the two)."""
    uses: dict[str, int] = {}
    for info in infos.values():
        for d in set(info.shape or ()):
            if isinstance(d, str):
                uses[d] = uses.get(d, 0) + 1
    quick = {}
    for name, info in infos.items():
        if info.kind != "tensor" or info.elem_type is None or info.shape is None:
            continue
        if any(isinstance(d, str) and uses[d] > 1 for d in info.shape):
            continue
        want = np_dtype(info.elem_type)
        if want == np.dtype(object):   # (a string input's elements are checked: tensor_feed)
            continue
        static = tuple((a, d) for a, d in enumerate(info.shape) if isinstance(d, int))
        quick[name] = (want, len(info.shape), static)
    return quick


def _numpy_errstate_var():
    """numpy's error-state context variable and its "ignore all" value, where numpy 2 keeps
    them (a plain run sets it directly: one ``set`` and ``reset``, ~0.2 us against ~2 us for
    building and entering an ``np.errstate``), else ``(None, None)``."""
    try:
        from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj
        ignore = _make_extobj(all="ignore")
    except (ImportError, TypeError, AttributeError):   # another numpy: use np.errstate
        return None, None
    return _extobj_contextvar, ignore


_ERRSTATE_VAR, _IGNORE_ALL = _numpy_errstate_var()


def _owned(value: Any, feeds: Mapping[str, Any]) -> Any:
    """Outputs belong to the caller, as in onnxruntime: copy one that is read-only (a constant
    or a view of one) or that may alias a feed (kernels may return views)."""
    if not isinstance(value, np.ndarray):
        return value
    if not value.flags.writeable:
        return value.copy()
    if value.base is None:   # owns its memory: shared with a feed only if it is one
        return value.copy() if any(f is value for f in feeds.values()) else value
    if any(isinstance(f, np.ndarray) and np.may_share_memory(value, f) for f in feeds.values()):
        return value.copy()
    return value


def _subgraph(model: Model, nodes: Sequence[int], name: str, layout: str) -> Subgraph:
    views = [model.node_views[i] for i in nodes]
    if len(views) == 1:
        v = views[0]
        return record(Subgraph, name=name, nodes=(v,), inputs=v.inputs + v.implicit_inputs,
                      outputs=v.outputs, layout=layout)
    members = set(nodes)
    produced = {o.name for v in views for o in v.outputs if o is not None}
    graph_outputs = {v.name for v in model.graph.outputs}
    inputs: list[ValueInfo] = []
    seen: set[str] = set()
    for v in views:
        for x in v.inputs:
            if x is not None and x.name not in produced and x.name not in seen:
                seen.add(x.name)
                inputs.append(x)
        for cap in v.implicit_inputs:
            if cap.name not in produced and cap.name not in seen:
                seen.add(cap.name)
                inputs.append(cap)
    outputs = []
    for v in views:
        for o in v.outputs:
            if o is None:
                continue
            outside = any(c not in members for c in model.consumer_indices.get(o.name, ()))
            if outside or o.name in graph_outputs:
                outputs.append(o)
    return Subgraph(name, tuple(views), tuple(inputs), tuple(outputs), layout)


def _metadata(model: Model) -> ModelMetadata:
    m = model.ir
    return ModelMetadata(
        producer_name=m.producer_name or "", graph_name=m.graph.name or "",
        domain=m.domain or "", description=m.doc_string or "",
        graph_description=m.graph.doc_string or "",
        # onnxruntime reports an unset model_version as INT64_MAX
        version=int(m.model_version) if m.model_version is not None else 2**63 - 1,
        custom_metadata_map=dict(m.metadata_props))


def _debug_level() -> int:
    try:
        return int(os.environ.get("ONNXPLEX_DEBUG", "0") or 0)
    except ValueError:
        return 0

