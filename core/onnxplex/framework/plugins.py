"""Which providers exist: pluggy hooks and entry-point discovery.

This layer answers *which* providers exist; the user's ``providers=[...]`` list answers in
*which order* they claim nodes. pluggy's call order is never used for priority.

A plugin is a module (or object) with an ``onnxplex_register_providers(register)`` hook
implementation, published under the ``onnxplex`` entry-point group. ``register`` accepts a
provider class or a ``"package.module:Class"`` path; with a path, listing providers never
imports the provider's module (and so never loads its native extension) until it is used.

Each entry point is loaded and each hook called separately inside ``try``: a broken plugin
becomes a :class:`PluginProblem` plus a warning naming its distribution, never a crash.
Environment controls: ``ONNXPLEX_DISABLE_PLUGINS=name,name`` (or ``*``) skips entry points,
``ONNXPLEX_LOAD_PLUGINS=name,name`` loads only those.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import logging
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pluggy

from .._errors import (
    InvalidArgumentError,
    PluginLoadError,
    ProviderOptionError,
    ProviderUnavailableError,
    as_status,
)
from .provider import API_VERSION, Availability, ExecutionProvider

__all__ = [
    "hookimpl",
    "hookspec",
    "ProviderEntry",
    "PluginProblem",
    "register_provider",
    "get_all_providers",
    "get_available_providers",
    "provider_entry",
    "plugin_problems",
    "DEFAULT_PROVIDER",
]

logger = logging.getLogger(__name__)

GROUP = "onnxplex"
DEFAULT_PROVIDER = "cpu_mlas"

hookspec = pluggy.HookspecMarker(GROUP)
hookimpl = pluggy.HookimplMarker(GROUP)

# Names onnxruntime users already type; a plugin may add its own aliases at registration.
_BUILTIN_ALIASES = {
    "CPUExecutionProvider": "cpu_mlas",
    "XnnpackExecutionProvider": "xnnpack_like",
    "KleidiAIExecutionProvider": "kleidi_sme2",
}


class _Hookspecs:
    @hookspec
    def onnxplex_register_providers(self, register: Callable[..., None]) -> None:
        """Register execution providers: call ``register(cls_or_path, name=..., aliases=...)``
        once per provider. ``name`` is required when a dotted path is given."""


PLUGIN_FAILURES = (Exception, SystemExit)
"""What plugin code may raise that is contained as the plugin's failure: any error, and a
``sys.exit()`` at import or in a hook (which would otherwise end the caller's process).
KeyboardInterrupt still propagates: it is the user's, not the plugin's."""

@dataclass
class ProviderEntry:
    """A registered provider: its name, where its class lives, and who shipped it."""

    name: str
    target: type[ExecutionProvider] | str
    aliases: tuple[str, ...] = ()
    distribution: str = ""
    version: str = ""
    plugin: str = ""
    _cls: type[ExecutionProvider] | None = field(default=None, repr=False)

    def load(self) -> type[ExecutionProvider]:
        """Import and return the provider class (a failure is a PluginLoadError)."""
        if self._cls is None:
            target = self.target
            if isinstance(target, str):
                mod_name, _, attr = target.partition(":")
                try:
                    obj: Any = importlib.import_module(mod_name)
                    for part in attr.split("."):
                        obj = getattr(obj, part)
                except PLUGIN_FAILURES as e:  # noqa: BLE001 - any import failure is the plugin's
                    raise PluginLoadError(
                        f"provider {self.name!r} ({self.origin}): cannot import {target!r}: "
                        f"{type(e).__name__}: {e}") from e
                target = obj
            if not (isinstance(target, type) and issubclass(target, ExecutionProvider)):
                raise PluginLoadError(f"provider {self.name!r} ({self.origin}): {target!r} is "
                                      "not an ExecutionProvider subclass")
            if target.name != self.name:
                raise PluginLoadError(
                    f"provider registered as {self.name!r} ({self.origin}) is a class named "
                    f"{target.name!r}; the registered name and the class's `name` must match")
            if target.api_version > API_VERSION:
                raise PluginLoadError(
                    f"provider {self.name!r} ({self.origin}) needs provider API "
                    f"{target.api_version}; this onnxplex offers {API_VERSION}: upgrade onnxplex")
            self._cls = target
        return self._cls

    @property
    def origin(self) -> str:
        if self.distribution:
            return f"{self.distribution} {self.version}".strip()
        return self.plugin or "registered in-process"

    def availability(self, options: Mapping[str, Any] | None = None) -> Availability:
        """The provider's own verdict; ``options`` are those a session requested it with."""
        try:
            cls = self.load()
            if options is not None and _takes_options(cls.available):
                return cls.available(options)
            return cls.available()
        except ProviderOptionError:
            raise
        except PluginLoadError as e:
            return Availability(False, str(e))
        except PLUGIN_FAILURES as e:  # noqa: BLE001 - a probe that raises means unavailable
            return Availability(False, f"available() raised {type(e).__name__}: {e}")


def _takes_options(probe: Callable) -> bool:
    """Whether an ``available`` class method accepts the options argument (API 1 providers
    written before it existed take none). Answered once per function: every session asks
    of every provider, and ``inspect.signature`` is ~0.15 ms."""
    key = getattr(probe, "__func__", probe)
    known = _TAKES_OPTIONS.get(key)
    if known is None:
        try:
            params = inspect.signature(probe).parameters.values()
        except (TypeError, ValueError):
            known = False
        else:
            known = any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                   p.VAR_POSITIONAL) for p in params)
        _TAKES_OPTIONS[key] = known
    return known


_TAKES_OPTIONS: weakref.WeakKeyDictionary[Callable, bool] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class PluginProblem:
    """A plugin that failed to load or register, kept for ``onnxplex providers``."""

    plugin: str
    distribution: str
    error: str


class _Registry:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._loaded = False
        self.entries: dict[str, ProviderEntry] = {}
        self.aliases: dict[str, str] = dict(_BUILTIN_ALIASES)
        self.problems: list[PluginProblem] = []
        self.pm = pluggy.PluginManager(GROUP)
        self.pm.add_hookspecs(_Hookspecs)

    def ensure_loaded(self) -> None:
        with self._lock:
            if not self._loaded:
                self._loaded = True
                self._load_entry_points()

    def _load_entry_points(self) -> None:
        disable = _env_list("ONNXPLEX_DISABLE_PLUGINS")
        only = _env_list("ONNXPLEX_LOAD_PLUGINS")
        for ep in importlib.metadata.entry_points(group=GROUP):
            if "*" in disable or ep.name in disable or (only and ep.name not in only):
                logger.info("plugin %r skipped by environment", ep.name)
                continue
            dist = ep.dist.name if ep.dist is not None else ""
            ver = ep.dist.version if ep.dist is not None else ""
            try:
                plugin = ep.load()
            except PLUGIN_FAILURES as e:  # noqa: BLE001 - isolate every broken plugin
                self._problem(ep.name, f"{dist} {ver}".strip(), f"import failed: "
                              f"{type(e).__name__}: {e}")
                continue
            self._register_plugin(plugin, ep.name, dist, ver)

    def _register_plugin(self, plugin: Any, name: str, dist: str = "", ver: str = "") -> None:
        try:
            self.pm.register(plugin, name=f"{name}:{id(plugin)}")
        except PLUGIN_FAILURES as e:  # noqa: BLE001 - e.g. a hook with a wrong signature
            self._problem(name, f"{dist} {ver}".strip(), f"not a valid plugin: {e}")
            return
        impls = [i for i in self.pm.hook.onnxplex_register_providers.get_hookimpls()
                 if i.plugin is plugin]
        if not impls:
            self._problem(name, f"{dist} {ver}".strip(),
                          "defines no onnxplex_register_providers hook")
        for impl in impls:
            def register(target: Any, *, name: str | None = None, aliases: Iterable[str] = (),
                         _plugin: str = impl.plugin_name) -> None:
                self.add(target, name=name, aliases=aliases, distribution=dist, version=ver,
                         plugin=_plugin)
            try:
                impl.function(register=register)
            except PLUGIN_FAILURES as e:  # noqa: BLE001
                self._problem(name, f"{dist} {ver}".strip(),
                              f"onnxplex_register_providers raised {type(e).__name__}: {e}")

    def _problem(self, plugin: str, dist: str, error: str) -> None:
        problem = PluginProblem(plugin, dist, error)
        self.problems.append(problem)
        msg = f"onnxplex plugin {plugin!r} ({dist or 'unknown distribution'}) skipped: {error}"
        warnings.warn(msg, RuntimeWarning, stacklevel=4)

    def add(self, target: type[ExecutionProvider] | str, *, name: str | None = None,
            aliases: Iterable[str] = (), distribution: str = "", version: str = "",
            plugin: str = "") -> ProviderEntry:
        if name is None:
            if isinstance(target, str):
                raise InvalidArgumentError(f"registering {target!r} by path needs name=...")
            name = target.name
        if not name:
            raise InvalidArgumentError(f"provider {target!r} has no name")
        with self._lock:
            old = self.entries.get(name)
            if old is not None and old.target != target:
                logger.warning("provider %r from %s replaces the one from %s", name,
                               distribution or plugin or "in-process", old.origin)
            entry = ProviderEntry(name, target, tuple(aliases), distribution, version, plugin)
            self.entries[name] = entry
            for a in entry.aliases:
                self.aliases[a] = name
            return entry

    def resolve(self, name: str) -> ProviderEntry:
        self.ensure_loaded()
        canonical = self.aliases.get(name, name)
        entry = self.entries.get(canonical)
        if entry is None:
            known = ", ".join(sorted(self.entries)) or "none"
            # (onnxruntime's set_providers raises a RuntimeError starting with these words)
            raise as_status(InvalidArgumentError, RuntimeError)(
                f"Unknown Provider Type: {name}: unknown execution provider {name!r}; "
                f"registered: {known}")
        return entry


_registry = _Registry()


def _env_list(var: str) -> set[str]:
    return {s.strip() for s in os.environ.get(var, "").split(",") if s.strip()}


def register_provider(target: type[ExecutionProvider] | str, *, name: str | None = None,
                      aliases: Iterable[str] = ()) -> ProviderEntry:
    """Register a provider in this process (for notebooks and tests; packages use the
    ``onnxplex`` entry-point group). Re-registering a name replaces it."""
    _registry.ensure_loaded()
    return _registry.add(target, name=name, aliases=aliases)


def unregister_provider(name: str) -> None:
    """Remove a provider registered in this process (mostly for tests)."""
    with _registry._lock:
        entry = _registry.entries.pop(name, None)
        if entry is not None:
            for a in entry.aliases:
                _registry.aliases.pop(a, None)


def provider_entry(name: str) -> ProviderEntry:
    """The registry entry for a provider name or alias (``CPUExecutionProvider`` works)."""
    return _registry.resolve(name)


def get_all_providers() -> list[str]:
    """Every registered provider name, available here or not; the default CPU provider last."""
    _registry.ensure_loaded()
    names = [n for n in _registry.entries if n != DEFAULT_PROVIDER]
    return names + ([DEFAULT_PROVIDER] if DEFAULT_PROVIDER in _registry.entries else [])


def get_available_providers() -> list[str]:
    """Registered providers that can run on this machine; the default CPU provider last."""
    return [n for n in get_all_providers() if _registry.entries[n].availability().ok]


def plugin_problems() -> list[PluginProblem]:
    """Plugins that failed to load or register in this process."""
    _registry.ensure_loaded()
    return list(_registry.problems)


def provider_unavailable(entry: ProviderEntry, why: Availability) -> ProviderUnavailableError:
    return ProviderUnavailableError(
        f"execution provider {entry.name!r} ({entry.origin}) is not available here: "
        f"{why.reason or 'no reason given'}", provider=entry.name)
