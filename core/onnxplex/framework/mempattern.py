"""Memory patterns: a session's large intermediates served from one planned buffer.

onnxruntime's ``SessionOptions.enable_mem_pattern`` (on by default): the intermediates of a
run with given input shapes are the same every time, so their addresses can be planned once.
Here a :class:`MemoryPatterns` keeps one ``onnxplex._mempattern.Pattern`` per set of input
shapes (the few most recent). A pattern's first run builds the session's caches (packed
weights, native plans) and is left alone; its second run records the order and sizes of the
allocations of 256 KB or more and when each is freed; from the third on, those freed within
the run come from one buffer at offsets planned by replaying that order (best fit, as malloc
would reuse them), and the others (the outputs) from numpy's allocator as before. A run whose
requests stray from the recording (data-dependent sizes) takes the rest from numpy's
allocator and the pattern records again, up to three times before it turns itself off.
What it saves: glibc returns large freed blocks to the system between runs (heap trimming,
unmapped chunks), and the next run pays a page fault for each fresh 4 KB page of them.

Only the running thread's allocations are served (numpy's allocation handler is a context
variable); the caller's own arrays, other threads and concurrent runs of the session (one
pattern serves one run at a time) keep numpy's allocator. Without the compiled module runs
use numpy's allocator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    from .. import _mempattern
except ImportError:  # (a source tree without a build)
    _mempattern = None

__all__ = ["MemoryPatterns", "available"]

_MAX_SHAPES = 4
"""Input-shape sets remembered per session (each holds a buffer of its peak intermediates)."""


def available() -> bool:
    return _mempattern is not None


class MemoryPatterns:
    """A session's patterns by input shapes: ``begin(feeds)`` before a run gives the pattern
    that now takes the thread's large allocations (made on first sight of these shapes), or
    None; ``end(pattern)`` after it. Patterns turn off for the whole session when its inputs
    have static shapes and a recorded run had nothing large to plan."""

    __slots__ = ("_by_key", "_static", "_enabled")

    def __init__(self, static_inputs: bool) -> None:
        self._by_key: dict[tuple, Any] = {}
        self._static = static_inputs
        self._enabled = True

    def begin(self, feeds: Mapping[str, Any]) -> Any:
        if not self._enabled:
            return None
        key = tuple([getattr(v, "shape", None) for v in feeds.values()])
        found = self._by_key.get(key)
        if found is None:
            if len(self._by_key) >= _MAX_SHAPES:
                del self._by_key[next(iter(self._by_key))]   # (the oldest shapes)
            found = self._by_key[key] = _mempattern.Pattern()
        return found if found.begin() else None

    def end(self, pattern: Any) -> None:
        """After the run ``begin`` gave ``pattern`` for: a pattern that turned itself off
        turns the session's off when no other input shapes can come."""
        if not pattern.end() and self._static:
            self._enabled = False

    def stats(self) -> list[dict[str, Any]]:
        """Each pattern's counters (state, requests recorded, planned, buffer bytes, hits,
        misses, planned runs, recordings, live blocks), by input shapes."""
        return [{"shapes": key, **p.stats()} for key, p in self._by_key.items()]
