"""Frozen dataclass instances built without their ``__init__``.

A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__``:
~0.25 us a field, 2-4 us an instance. Session creation builds several per node (value infos,
node views, placements, partitions, subgraphs, compiled units, plan steps): ~10 us a node of
a Python framework whose whole per-node budget is tens of microseconds. :func:`record` builds
the same instance faster.

The per-node classes are slotted (``slots=True``): an instance is ~110 bytes instead of
~340 with its dictionary, which is most of a 100,000-node model's session memory. For them,
:func:`record` calls a builder generated once per class that sets each slot through its
descriptor; for a class with a dictionary it fills the dictionary at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# class -> (its field names, the defaults: name -> (is a factory, value))
_SPECS: dict[type, tuple[frozenset[str], tuple[tuple[str, bool, Any], ...]]] = {}
# slotted class -> its builder (keyword arguments: the fields)
_BUILDERS: dict[type, Callable[..., Any]] = {}
_UNSET = object()


def _spec(cls: type) -> tuple[frozenset[str], tuple[tuple[str, bool, Any], ...]]:
    spec = _SPECS.get(cls)
    if spec is None:
        if not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__"):
            raise TypeError(f"record() builds plain dataclasses only, not {cls.__name__}")
        defaults = []
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                defaults.append((f.name, False, f.default))
            elif f.default_factory is not dataclasses.MISSING:
                defaults.append((f.name, True, f.default_factory))
        spec = _SPECS[cls] = (frozenset(f.name for f in dataclasses.fields(cls)),
                              tuple(defaults))
    return spec


def _builder(cls: type) -> Callable[..., Any]:
    """``build(**fields)`` for the slotted dataclass ``cls``: a function with one keyword
    parameter per field (its default, or a marker for a default factory) that sets each slot
    through the slot's descriptor."""
    _spec(cls)   # (refuses what record() does not build)
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_UNSET": _UNSET}
    params, body = [], []
    for i, f in enumerate(dataclasses.fields(cls)):
        scope[f"_set{i}"] = getattr(cls, f.name).__set__
        if f.default is not dataclasses.MISSING:
            scope[f"_default{i}"] = f.default
            params.append(f"{f.name}=_default{i}")
            value = f.name
        elif f.default_factory is not dataclasses.MISSING:
            scope[f"_factory{i}"] = f.default_factory
            params.append(f"{f.name}=_UNSET")
            value = f"_factory{i}() if {f.name} is _UNSET else {f.name}"
        else:
            params.append(f.name)
            value = f.name
        body.append(f"    _set{i}(obj, {value})\n")
    source = (f"def build(*, {', '.join(params)}):\n    obj = _new(_cls)\n{''.join(body)}"
              "    return obj\n")
    exec(compile(source, f"<record builder of {cls.__qualname__}>", "exec"), scope)  # noqa: S102
    build = _BUILDERS[cls] = scope["build"]
    return build


def record(cls: type[T], /, **values: Any) -> T:
    """``cls(**values)`` for a dataclass without ``__post_init__``, its defaults applied,
    without calling ``__init__``. Values are not converted or checked, as the generated
    ``__init__`` does not either; a missing or unknown field goes to ``cls(**values)``, which
    raises the usual TypeError."""
    build = _BUILDERS.get(cls)
    if build is None and "__slots__" in cls.__dict__:
        build = _builder(cls)
    if build is not None:
        try:
            return build(**values)
        except TypeError:
            return cls(**values)
    names, defaults = _spec(cls)
    obj = object.__new__(cls)
    d = obj.__dict__
    for name, factory, default in defaults:
        if name not in values:
            d[name] = default() if factory else default
    d.update(values)
    if d.keys() != names:
        return cls(**values)
    return obj
