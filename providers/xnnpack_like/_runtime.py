"""The runtime object ``compile`` returns: one call runs a whole partition.

Built once from a :class:`~._plan.Plan`: values get numbered slots, constants are bound once,
every step knows which slots to read, which to write and which to release after it (their last
reader), and which input it may overwrite in place (an intermediate this run created, dying at
that step, with no live view of it elsewhere). A run keeps its slots in a local list and its
scratch buffers in the calling thread's workspace, so concurrent calls share nothing mutable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from onnxplex import KernelExecutionError

from ._ops_base import Label, Op, Workspace
from ._plan import Plan


@dataclass(frozen=True)
class _RtStep:
    op: Op
    ins: tuple[int, ...]        # -1: omitted input
    outs: tuple[int, ...]       # -1: output nobody reads
    release: tuple[int, ...]


class CompiledPartition:
    """``kernel(*inputs) -> tuple of outputs`` for one claimed group (see module docstring)."""

    def __init__(self, name: str, provider: str, plan: Plan) -> None:
        self.name, self.provider = name, provider
        slot: dict[str, int] = {}

        def s(n: str | None) -> int:
            if not n:
                return -1
            if n not in slot:
                slot[n] = len(slot)
            return slot[n]

        self._in_slots = tuple(s(n) for n in plan.inputs)
        used = {n for st in plan.steps for n in st.inputs if n} | set(plan.outputs)
        self._consts = {s(n): v.const for n, v in plan.vals.items()
                        if v.const is not None and n in used}
        steps = [(st, tuple(s(i) for i in st.inputs), tuple(s(o) for o in st.outputs))
                 for st in plan.steps]
        self._out_slots = tuple(s(n) for n in plan.outputs)
        self._n = len(slot)
        keep = set(self._out_slots) | set(self._consts) | set(self._in_slots)
        last: dict[int, int] = {}
        for k, (_, ins, outs) in enumerate(steps):
            for i in (*ins, *outs):
                if i >= 0:
                    last[i] = max(last.get(i, k), k)
        # Alias classes: a view-producing op's outputs share their input's buffer.
        base: dict[int, int | None] = {i: None for i in keep}
        for st, ins, outs in steps:
            for o in outs:
                if o < 0:
                    continue
                if st.op.fresh:
                    base[o] = o
                else:
                    base[o] = base.get(ins[0]) if ins and ins[0] >= 0 else None
        class_end: dict[int, int] = {}
        exported: set[int] = set()
        for i, b in base.items():
            if b is None:
                continue
            class_end[b] = max(class_end.get(b, -1), last.get(i, -1))
            if i in keep:
                exported.add(b)
        self._steps = []
        for k, (st, ins, outs) in enumerate(steps):
            st.op.donate = None
            for pos in st.op.inplace_ok:
                if pos < len(ins) and ins[pos] >= 0:
                    b = base.get(ins[pos])
                    if b is not None and b not in exported and class_end.get(b) == k:
                        st.op.donate = pos
                        break
            release = tuple(i for i in set(ins) | set(outs)
                            if i >= 0 and i not in keep and last.get(i) == k)
            self._steps.append(_RtStep(st.op, ins, outs, release))
        self._labels = [st.op.label for st in plan.steps]
        self.notes = dict(plan.notes)
        self._tls = threading.local()

    # ---- running -------------------------------------------------------------------------------

    def _workspace(self) -> Workspace:
        ws = getattr(self._tls, "ws", None)
        if ws is None:
            ws = self._tls.ws = Workspace()
        return ws

    def __call__(self, *inputs: Any) -> tuple[Any, ...]:
        return self._run(inputs, None)

    def profiled(self, emit: Callable[..., None], *inputs: Any) -> tuple[Any, ...]:
        """The profiling entry point of the kernel contract: one sub-event per op, with its
        variant and kernel in the event's args."""
        return self._run(inputs, emit)

    def _run(self, inputs: Sequence[Any], emit: Callable[..., None] | None) -> tuple[Any, ...]:
        slots: list[Any] = [None] * self._n
        for i, v in self._consts.items():
            slots[i] = v
        for i, v in zip(self._in_slots, inputs):
            if i >= 0:
                slots[i] = v
        ws = self._workspace()
        for st in self._steps:
            args = [slots[i] if i >= 0 else None for i in st.ins]
            t0 = time.perf_counter_ns() if emit is not None else 0
            try:
                res = st.op.run(args, ws)
            except Exception as e:  # noqa: BLE001 - reported with the op that failed
                lab = st.op.label
                raise KernelExecutionError(
                    f"{self.provider} partition '{self.name}': op '{lab.name}' ({lab.op_type}, "
                    f"{lab.kernel}) failed: {type(e).__name__}: {e}", provider=self.provider,
                    node=lab.name, op_type=lab.op_type) from e
            outs = res if st.op.n_out > 1 else (res,)
            for i, v in zip(st.outs, outs):
                if i >= 0:
                    slots[i] = v
            if emit is not None:
                lab = st.op.label
                emit(lab.name, lab.op_type, t0, time.perf_counter_ns(), node_indices=lab.nodes,
                     inputs=[a for a in args if a is not None], outputs=list(outs),
                     args={"op_class": lab.op_class, "variant": lab.variant,
                           "kernel": lab.kernel_name, "remark": lab.remark})
            for i in st.release:
                slots[i] = None
        return tuple(slots[i] if i >= 0 else None for i in self._out_slots)

    # ---- introspection -------------------------------------------------------------------------

    def describe_compiled(self) -> list[dict[str, Any]]:
        """What each op of the partition runs as, in execution order."""
        return [{"name": lab.name, "op_type": lab.op_type, "nodes": list(lab.nodes),
                 "op_class": lab.op_class, "variant": lab.variant, "kernel": lab.kernel_name,
                 "remark": lab.remark} for lab in self._labels]

    @property
    def labels(self) -> list[Label]:
        return list(self._labels)
