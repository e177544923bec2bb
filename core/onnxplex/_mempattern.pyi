"""Stubs of onnxplex._mempattern (core/src/mempattern.cpp): memory patterns for a session's
runs (see onnxplex.framework.mempattern)."""

from typing import Any

MIN_BYTES: int
"""Allocations of this many bytes or more are recorded and planned; smaller ones are not."""

class Pattern:
    """The memory pattern of one set of input shapes."""

    def __init__(self) -> None: ...
    def begin(self) -> bool:
        """Take the calling thread's large numpy allocations until ``end()``; False (nothing
        taken) in the warm-up run, when off, or when another thread's run has it."""
    def end(self) -> bool:
        """Give the thread's allocations back; False once the pattern is off for good."""
    def stats(self) -> dict[str, Any]:
        """state, requests, planned, buffer_bytes, hits, misses, planned_runs, recordings,
        live."""
