"""Small pieces of onnxruntime's module-level API and its provider names.

onnxplex's providers have their own names (``cpu_mlas``); the onnxruntime names users type
(``CPUExecutionProvider``) are registered aliases. The provider names the onnxruntime-style
API returns are onnxplex's, as :class:`ProviderName` strings that also equal their aliases, in
lists whose ``in`` and ``index`` accept them too; so onnxruntime code's
``sess.get_providers() == ["CPUExecutionProvider"]``,
``ort.get_all_providers()[-1] == "CPUExecutionProvider"`` and
``sess.get_provider_options()["CPUExecutionProvider"]`` hold unchanged, and print
``cpu_mlas``.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._errors import Fail, InvalidArgumentError, as_status
from ..framework import plugins as _plugins

__all__ = [
    "ORT_EXECUTION_PROVIDERS",
    "ProviderName",
    "ProviderNames",
    "ProviderOptionsByName",
    "canonical_provider",
    "get_all_providers",
    "get_available_providers",
    "set_default_logger_severity",
    "set_default_logger_callback",
    "set_default_logger_verbosity",
    "enable_telemetry_events",
    "disable_telemetry_events",
    "set_seed",
    "seeded_draw",
    "get_build_info",
    "has_collective_ops",
    "get_version_string",
    "register_execution_provider_library",
    "unregister_execution_provider_library",
    "set_global_thread_pool_sizes",
    "preload_dlls",
    "check_and_normalize_provider_args",
]

# Execution providers of onnxruntime builds (onnxruntime.get_all_providers() of 1.31). A
# session asked for one onnxplex has no provider for skips it with a warning, as an
# onnxruntime build without it does; other unknown names are an error.
ORT_EXECUTION_PROVIDERS = frozenset({
    "NvTensorRTRTXExecutionProvider", "TensorrtExecutionProvider", "CUDAExecutionProvider",
    "MIGraphXExecutionProvider", "ROCMExecutionProvider", "OpenVINOExecutionProvider",
    "DnnlExecutionProvider", "VitisAIExecutionProvider", "QNNExecutionProvider",
    "NnapiExecutionProvider", "VSINPUExecutionProvider", "JsExecutionProvider",
    "CoreMLExecutionProvider", "ArmNNExecutionProvider", "ACLExecutionProvider",
    "DmlExecutionProvider", "RknpuExecutionProvider", "WebNNExecutionProvider",
    "WebGpuExecutionProvider", "XnnpackExecutionProvider", "CANNExecutionProvider",
    "AzureExecutionProvider", "SNPEExecutionProvider", "TvmExecutionProvider",
    "CPUExecutionProvider",
})

_SEVERITY_TO_LOGGING = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING,
                        3: logging.ERROR, 4: logging.CRITICAL}


def canonical_provider(name: Any) -> Any:
    """The onnxplex name of a registered provider name or alias; other values unchanged."""
    if not isinstance(name, str):
        return name
    _plugins._registry.ensure_loaded()
    return _plugins._registry.aliases.get(name, name)


class ProviderName(str):
    """A provider's onnxplex name (``"cpu_mlas"``) that also compares equal to its onnxruntime
    aliases (``"CPUExecutionProvider"``), from either side of ``==``. It hashes as its own
    name: a set or dict of them is looked up by the onnxplex name."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return str.__eq__(self, canonical_provider(str(other)))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = str.__hash__


class ProviderNames(list):
    """A list of onnxplex provider names whose ``in`` and ``index`` also accept the
    onnxruntime aliases (``"CPUExecutionProvider" in names``)."""

    def __contains__(self, name: object) -> bool:
        return list.__contains__(self, canonical_provider(name))

    def index(self, name: Any, *args: Any) -> int:  # type: ignore[override]
        return list.index(self, canonical_provider(name), *args)


class ProviderOptionsByName(dict):
    """``{provider name: {option: str value}}`` whose lookups also accept the onnxruntime
    aliases (``options["CPUExecutionProvider"]``)."""

    def __missing__(self, name: Any) -> Any:
        canonical = canonical_provider(name)
        if canonical != name and dict.__contains__(self, canonical):
            return dict.__getitem__(self, canonical)
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, canonical_provider(name))

    def get(self, name: Any, default: Any = None) -> Any:
        return self[name] if name in self else default


def get_all_providers() -> list[str]:
    """Every registered provider name, available here or not; the default CPU provider last
    (``in`` also accepts onnxruntime's names)."""
    return ProviderNames(map(ProviderName, _plugins.get_all_providers()))


def get_available_providers() -> list[str]:
    """Registered providers that can run on this machine, the default CPU provider last
    (``"CPUExecutionProvider" in onnxplex.get_available_providers()`` holds)."""
    return ProviderNames(map(ProviderName, _plugins.get_available_providers()))


def set_default_logger_severity(severity: int) -> None:
    """onnxruntime's logger severity for onnxplex's log messages: 0 verbose, 1 info,
    2 warning, 3 error, 4 fatal; sets the level of the ``onnxplex`` logging logger."""
    _check_severity(severity)
    logging.getLogger("onnxplex").setLevel(_SEVERITY_TO_LOGGING[severity])


class _CallbackHandler(logging.Handler):
    """Hands onnxplex's log records to a ``set_default_logger_callback`` function as
    onnxruntime calls it: ``(severity, category, logid, code_location, message)``."""

    def __init__(self, callback: Callable[..., Any], level: int) -> None:
        super().__init__(level)
        self.callback = callback

    def emit(self, record: logging.LogRecord) -> None:
        severity = max((s for s, lv in _SEVERITY_TO_LOGGING.items() if lv <= record.levelno),
                       default=0)
        try:
            self.callback(severity, "onnxplex", record.name,
                          f"{record.pathname}:{record.lineno} {record.funcName}",
                          record.getMessage())
        except Exception:  # noqa: BLE001 - a raising callback must not break a session
            pass


_callback_handler: _CallbackHandler | None = None


def set_default_logger_callback(callback: Callable[..., Any] | None,
                                severity: int = 2) -> None:
    """Send onnxplex's log messages of ``severity`` (0 verbose ... 4 fatal) and above to
    ``callback(severity, category, logid, code_location, message)`` instead of the logging
    handlers; None restores them. An exception the callback raises is dropped."""
    global _callback_handler
    log = logging.getLogger("onnxplex")
    if callback is not None:
        if not callable(callback):
            raise as_status(InvalidArgumentError, RuntimeError)(
                f"set_default_logger_callback takes a callable or None, got "
                f"{type(callback).__name__}")
        _check_severity(severity, RuntimeError)
    if _callback_handler is not None:
        log.removeHandler(_callback_handler)
        log.propagate = True
        _callback_handler = None
    if callback is None:
        return
    level = _SEVERITY_TO_LOGGING[severity]
    _callback_handler = _CallbackHandler(callback, level)
    log.addHandler(_callback_handler)
    log.propagate = False   # (the callback replaces the default sink, as in onnxruntime)
    log.setLevel(level)


def set_default_logger_verbosity(verbosity: int) -> None:
    """onnxruntime's VLOG level for verbose messages; onnxplex has one verbose level, so the
    value is checked and kept only."""
    if isinstance(verbosity, bool) or not isinstance(verbosity, int) or verbosity < 0:
        raise as_status(InvalidArgumentError, RuntimeError)(
            f"invalid logger verbosity {verbosity!r}")


def _check_severity(severity: Any, also: type[Exception] | None = None) -> None:
    if isinstance(severity, bool) or not isinstance(severity, int) \
            or severity not in _SEVERITY_TO_LOGGING:
        cls = InvalidArgumentError if also is None else as_status(InvalidArgumentError, also)
        raise cls(f"invalid logging severity {severity!r}; 0:Verbose, 1:Info, 2:Warning, "
                  "3:Error, 4:Fatal")


def enable_telemetry_events() -> None:
    """No-op: onnxplex sends no telemetry (nor does onnxruntime outside Windows builds)."""


def disable_telemetry_events() -> None:
    """No-op: onnxplex sends no telemetry."""


_seed_lock = threading.Lock()
_seeded: np.random.Generator | None = None


def set_seed(seed: int) -> None:
    """The seed of random ops without a ``seed`` attribute (RandomNormal, RandomUniform,
    Multinomial, Dropout in training mode...): after ``set_seed(s)`` their draws repeat from
    one ``set_seed(s)`` to the next, in the order the runs make them."""
    global _seeded
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise as_status(InvalidArgumentError, TypeError)(
            f"set_seed takes an int, got {type(seed).__name__}")
    with _seed_lock:
        _seeded = np.random.default_rng(int(seed) & (2**64 - 1))


def seeded_draw(draw: Callable[[np.random.Generator], Any]) -> Any | None:
    """``draw(generator)`` from the :func:`set_seed` generator (one draw at a time), or None
    when no seed was set."""
    with _seed_lock:
        return None if _seeded is None else draw(_seeded)


def has_collective_ops() -> bool:
    """Whether collective (multi-device) ops are built in: never (onnxruntime's CPU builds say
    the same)."""
    return False


def get_build_info() -> str:
    """What onnxplex was built with: its version, and the native modules and CPU features
    this machine uses."""
    import importlib.util
    import platform

    from .._version import __version__

    native = importlib.util.find_spec("onnxplex._runloop") is not None  # (the plan's C loop)
    return (f"onnxplex Build Info: version={__version__}, python={platform.python_version()}, "
            f"machine={platform.machine()}, runloop={'native' if native else 'python'}")


def register_execution_provider_library(registration_name: str, library_path: str) -> None:
    """Refused: onnxruntime plugin EP libraries are native code for onnxruntime; onnxplex's
    providers are Python plugins found through the ``onnxplex`` entry-point group (or
    :func:`onnxplex.register_provider`)."""
    raise as_status(InvalidArgumentError, Fail)(
        f"cannot load execution provider library {library_path!r} ({registration_name!r}): "
        "onnxplex loads providers as Python plugins (the 'onnxplex' entry-point group, or "
        "onnxplex.register_provider), not onnxruntime EP libraries")


def unregister_execution_provider_library(registration_name: str) -> None:
    """Refused: no onnxruntime EP library was registered (see
    :func:`register_execution_provider_library`)."""
    raise as_status(InvalidArgumentError, Fail)(
        f"no execution provider library is registered as {registration_name!r}")


def set_global_thread_pool_sizes(intra_op_num_threads: int = 0,
                                 inter_op_num_threads: int = 0) -> None:
    """onnxruntime's process-wide thread pools (for sessions with
    ``use_per_session_threads = False``): the sizes are checked to be integers and not kept;
    onnxplex's sessions size their own threads from their options."""
    for size in (intra_op_num_threads, inter_op_num_threads):
        int(size)   # (a non-number raises, as onnxruntime's binding refuses it)


def preload_dlls(*args: Any, **kwargs: Any) -> None:
    """No-op: onnxplex needs no CUDA or MSVC runtime libraries preloaded."""


def check_and_normalize_provider_args(
        providers: Any, provider_options: Any,
        available_provider_names: Sequence[str]) -> tuple[list[str], list[dict[str, str]]]:
    """onnxruntime's check of ``InferenceSession``'s provider arguments: ``providers`` names
    (or ``(name, options)`` tuples, then without ``provider_options``), ``provider_options``
    a parallel list of dicts; returns the names and their options as str -> str dicts. A name
    given twice keeps its first options (with a warning); a name outside
    ``available_provider_names`` warns. Malformed arguments raise ValueError."""
    if providers is None:
        return [], []
    if not isinstance(providers, Sequence):
        raise ValueError("'providers' should be a sequence.")
    pairs: list[tuple[Any, Any]]
    if provider_options is not None:
        if not isinstance(provider_options, Sequence):
            raise ValueError("'provider_options' should be a sequence.")
        if len(providers) != len(provider_options):
            raise ValueError("'providers' and 'provider_options' should be the same length if "
                             "both are given.")
        if not all(isinstance(p, str) for p in providers):
            raise ValueError("Only string values for 'providers' are supported if "
                             "'provider_options' is given.")
        if not all(isinstance(o, dict) for o in provider_options):
            raise ValueError("'provider_options' values must be dicts.")
        pairs = list(zip(providers, provider_options))
    else:
        pairs = []
        for p in providers:
            if isinstance(p, str):
                pairs.append((p, {}))
            elif isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) \
                    and isinstance(p[1], dict):
                pairs.append(p)
            else:
                raise ValueError("'providers' values must be either strings or (string, dict) "
                                 "tuples.")
    chosen: dict[str, dict[str, str]] = {}
    for name, options in pairs:
        if name not in available_provider_names:
            warnings.warn(f"Specified provider '{name}' is not in available provider names."
                          f"Available providers: '{', '.join(available_provider_names)}'",
                          stacklevel=2)
        if name in chosen:
            warnings.warn(f"Duplicate provider '{name}' encountered, ignoring.", stacklevel=2)
            continue
        chosen[name] = {str(k): str(v) for k, v in options.items()}
    return list(chosen), list(chosen.values())


def get_version_string() -> str:
    """onnxplex's version (``onnxruntime.get_version_string()``'s counterpart)."""
    from .._version import __version__

    return __version__
