"""Stubs of onnxplex._runloop (core/src/runloop.cpp): the executor's inner loop in C."""

from collections.abc import Callable, Sequence
from typing import Any

class Runner:
    """``Runner(num_slots, ndarray, fail, entries)``; each entry is ``(call,)`` (a step run as
    ``call(slots)``) or ``(kernel, ins, out, cell, dtype, slow, release)``."""

    def __init__(self, num_slots: int, ndarray: type, fail: Callable[[int, BaseException], None],
                 entries: Sequence[tuple]) -> None: ...
    def __call__(self, slots: list[Any]) -> None: ...
