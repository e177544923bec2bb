"""Small pieces of onnxruntime's module-level API and its provider names.

onnxplex's providers have their own names (``cpu_mlas``); the onnxruntime names users type
(``CPUExecutionProvider``) are registered aliases. Lists and dicts of provider names returned
by the onnxruntime-style API hold onnxplex's names, but membership tests and lookups also
accept the aliases, so ``"CPUExecutionProvider" in ort.get_available_providers()`` and
``sess.get_provider_options()["CPUExecutionProvider"]`` work unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

from . import _plugins
from ._errors import InvalidArgumentError

__all__ = [
    "ORT_EXECUTION_PROVIDERS",
    "ProviderNames",
    "ProviderOptionsByName",
    "canonical_provider",
    "get_all_providers",
    "get_available_providers",
    "set_default_logger_severity",
    "get_version_string",
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
    return ProviderNames(_plugins.get_all_providers())


def get_available_providers() -> list[str]:
    """Registered providers that can run on this machine, the default CPU provider last
    (``"CPUExecutionProvider" in onnxplex.get_available_providers()`` holds)."""
    return ProviderNames(_plugins.get_available_providers())


def set_default_logger_severity(severity: int) -> None:
    """onnxruntime's logger severity for onnxplex's log messages: 0 verbose, 1 info,
    2 warning, 3 error, 4 fatal; sets the level of the ``onnxplex`` logging logger."""
    if isinstance(severity, bool) or not isinstance(severity, int) \
            or severity not in _SEVERITY_TO_LOGGING:
        raise InvalidArgumentError(f"invalid logging severity {severity!r}; 0:Verbose, 1:Info, "
                                   "2:Warning, 3:Error, 4:Fatal")
    logging.getLogger("onnxplex").setLevel(_SEVERITY_TO_LOGGING[severity])


def get_version_string() -> str:
    """onnxplex's version (``onnxruntime.get_version_string()``'s counterpart)."""
    from . import __version__

    return __version__
