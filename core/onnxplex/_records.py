"""Frozen dataclass instances built without their ``__init__``.

A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__``:
~0.25 us a field, 2-4 us an instance. Session creation builds several per node (value infos,
node views, placements, partitions, subgraphs, compiled units, plan steps): ~10 us a node of
a Python framework whose whole per-node budget is tens of microseconds. :func:`record` fills
the instance dictionary at once with the same result.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")

# class -> (its field names, the defaults: name -> (is a factory, value))
_SPECS: dict[type, tuple[frozenset[str], tuple[tuple[str, bool, Any], ...]]] = {}


def _spec(cls: type) -> tuple[frozenset[str], tuple[tuple[str, bool, Any], ...]]:
    spec = _SPECS.get(cls)
    if spec is None:
        if not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__") \
                or hasattr(cls, "__slots__"):
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


def record(cls: type[T], /, **values: Any) -> T:
    """``cls(**values)`` for a dataclass without ``__post_init__`` or slots, its defaults
    applied, without calling ``__init__``. Values are not converted or checked, as the
    generated ``__init__`` does not either; a missing or unknown field goes to ``cls(**values)``,
    which raises the usual TypeError."""
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
