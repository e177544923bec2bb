"""The runs' cache of large numpy buffers: onnxruntime's CPU memory arena, the onnxplex way.

Kernels allocate their outputs through numpy, and numpy through malloc, which gives large freed
blocks back to the system and hands out fresh pages for the next ones: every run of a model
whose intermediates take many sizes of a few MB (DenseNet-121) faulted in and zeroed ~9 MB of
new pages, ~7% of its time. While a session runs, ``onnxplex._arena`` (``core/src/arena.cpp``)
is numpy's allocation handler for the running thread (a context variable, NEP 49): blocks of
256 KB or more freed into it are kept, up to :data:`DEFAULT_LIMIT` bytes shared by all
sessions, and reused for requests of their size. Arrays keep the handler they were made with,
so outputs handed to the caller are freed through it whenever they are dropped.

Like onnxruntime's arena it is on by default and follows its switches:
``SessionOptions.enable_cpu_mem_arena = False`` keeps a session's runs on numpy's allocator,
and the run option ``memory.enable_memory_arena_shrinkage`` (any value naming the CPU, e.g.
``"cpu:0"``) frees the kept blocks after that run. The blocks are also freed when the last
session that used the arena goes away. Without the native module (a source tree without a
build) runs use numpy's allocator.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

try:
    from .. import _arena as native
except ImportError:  # (not built: numpy's allocator)
    native = None

__all__ = ["DEFAULT_LIMIT", "SHRINK_KEY", "available", "stats", "track", "wants_shrink"]

DEFAULT_LIMIT = 256 << 20
"""At most this many bytes of freed buffers are kept (the cache is shared by every session)."""

SHRINK_KEY = "memory.enable_memory_arena_shrinkage"
"""onnxruntime's run option: the arenas named in its value (``"cpu:0"``) shrink after the run."""

_lock = threading.Lock()
_users = 0   # live sessions that use the arena


def available() -> bool:
    return native is not None


def track(owner: Any) -> None:
    """Count ``owner`` (a session) as a user of the arena until it is collected; when the last
    user goes, the kept blocks are freed, and buffers freed after that (outputs the caller
    still held) go back to the system."""
    global _users
    with _lock:
        if _users == 0 and native is not None:
            native.set_limit(DEFAULT_LIMIT)
        _users += 1
    weakref.finalize(owner, _untrack)


def _untrack() -> None:
    global _users
    with _lock:
        _users -= 1
        if _users == 0 and native is not None:
            native.set_limit(0)
            native.release()


def wants_shrink(config: dict[str, str]) -> bool:
    """Whether a run's config asks for the CPU arena to shrink after it (onnxruntime's value
    lists devices, ``"cpu:0;gpu:0"``)."""
    value = config.get(SHRINK_KEY)
    return value is not None and "cpu" in value.lower()


def stats() -> dict[str, int]:
    """What the cache holds and how it has been used since import (empty without the native
    module): ``cached_bytes``, ``cached_blocks``, ``limit_bytes``, ``hits``, ``misses``,
    ``spilled`` (blocks freed to the system because the cache was full), ``min_bytes``."""
    return native.stats() if native is not None else {}


if native is not None:
    native.set_limit(0)   # (nothing is kept before a session uses the arena)
