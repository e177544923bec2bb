"""Type stubs for the native module ``onnxplex._arena`` (``core/src/arena.cpp``): the runs'
cache of large numpy buffers, a numpy allocation handler (see ``framework/arena.py``)."""

from typing import Any

handler: Any   # the PyCapsule numpy's arrays keep ("mem_handler")

def activate() -> Any: ...   # makes the cache the current context's handler; the previous one
def restore(previous: Any, /) -> None: ...
def release() -> int: ...   # frees every kept block; the bytes freed
def set_limit(limit: int, /) -> None: ...
def stats() -> dict[str, int]: ...
