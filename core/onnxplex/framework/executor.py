"""The executor: a plan of kernel calls built once per session, run sequentially or in parallel.

Values live in numbered *slots*. Each :class:`Step` reads slots, calls one kernel (a node's
or a fused partition's), checks what the kernel returned against the declared outputs, writes
slots, and releases every intermediate whose last reader it was. A run keeps its slots in a
local list, so concurrent ``run`` calls on one session share nothing mutable.

Layout conversions between partitions that disagree on layout (NCHW vs NHWC) are explicit
steps in the plan, made once per value and reused by every reader that needs the same layout.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from .._dtypes import elem_type_name, np_dtype, ort_type_string
from .._errors import (
    InvalidArgument,
    KernelExecutionError,
    OnnxplexError,
    RunCancelledError,
    as_status,
)
from .._records import record
from ..graph import maptype as _maptype
from ..graph.model import Model, Subgraph, ValueInfo, canonical_dtype

try:
    from .. import _runloop
except ImportError:  # a source tree without a build: the Python loop below
    _runloop = None

__all__ = ["Step", "ExecutionPlan", "build_plan", "RunCancelled", "GraphRunner"]

logger = logging.getLogger(__name__)


RunCancelled = RunCancelledError
"""The run was cancelled through ``RunOptions.terminate`` (the public name is
:class:`onnxplex._errors.RunCancelledError`)."""

_CANCELLED: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "onnxplex_cancelled", default=None)
"""The cancellation check of the run in progress on this thread: control-flow bodies (If,
Loop, Scan run by kernels through :class:`GraphRunner`) see it without kernels passing it on."""


@contextlib.contextmanager
def cancellation(cancelled: Callable[[], bool] | None) -> Iterator[None]:
    """Make ``cancelled`` the check of the runs of nested bodies started in this context."""
    token = _CANCELLED.set(cancelled)
    try:
        yield
    finally:
        _CANCELLED.reset(token)


def no_cancellation_set() -> bool:
    """True when no run on this thread has a cancellation check to hand to nested bodies."""
    return _CANCELLED.get() is None


def _check_cancelled(cancelled: Callable[[], bool] | None, step: Step | None) -> None:
    if cancelled is not None and cancelled():
        where = f" before node '{step.name}' ({step.op_type})" if step is not None else ""
        raise RunCancelledError(f"run cancelled by RunOptions.terminate{where}")


_NO_ARGS: Mapping[str, Any] = MappingProxyType({})   # (one for every step, not a dict each)


@dataclass(frozen=True, eq=False, slots=True, weakref_slot=True)
class Step:
    """One kernel call of the plan."""

    name: str
    op_type: str
    provider: str
    node_indices: tuple[int, ...]
    kernel: Callable[..., Any]
    inputs: tuple[int, ...]            # slot per positional input, -1 for an omitted input
    outputs: tuple[int, ...]           # slot per output, -1 for an output nobody names
    required: int                      # outputs the kernel must return at least
    exact: bool                        # fused kernels return exactly len(outputs)
    checks: tuple[tuple | None, ...]  # per output: _check_of(), or None
    release: tuple[int, ...] = ()      # slots whose last reader is this step
    deps: tuple[int, ...] = ()         # steps that must finish first (parallel mode)
    args: Mapping[str, Any] = field(default_factory=lambda: _NO_ARGS)  # extra profiling-event
    # args (read-only)


@dataclass
class ExecutionPlan:
    """Steps in a valid order plus the slot layout of the graph's inputs and outputs."""

    steps: list[Step]
    num_slots: int
    input_slots: dict[str, int]
    output_slots: dict[str, int]
    constants: dict[int, Any]
    slot_names: list[str] = field(default_factory=list)
    overridable: frozenset[int] = frozenset()   # initializers a feed may replace
    _runner: Callable[[list[Any]], None] | None = field(default=None, repr=False, compare=False)

    def initial_slots(self) -> list[Any]:
        slots: list[Any] = [None] * self.num_slots
        for s, v in self.constants.items():
            slots[s] = v
        return slots

    def runner(self) -> Callable[[list[Any]], None]:
        """The plan compiled to one function of the slots (see :func:`compile_sequential`),
        built on the first call: a run without cancellation or profiling takes it."""
        run = self._runner
        if run is None:
            run = self._runner = compile_sequential(self)
        return run


# --------------------------------------------------------------------------------------------
# Layout conversion kernels (rank-4 tensors only; anything else passes through)
# --------------------------------------------------------------------------------------------


def _to_nhwc(x: Any) -> Any:
    return x.transpose(0, 2, 3, 1) if isinstance(x, np.ndarray) and x.ndim == 4 else x


def _to_nchw(x: Any) -> Any:
    return x.transpose(0, 3, 1, 2) if isinstance(x, np.ndarray) and x.ndim == 4 else x


_CONVERTERS = {("NCHW", "NHWC"): _to_nhwc, ("NHWC", "NCHW"): _to_nchw}


# --------------------------------------------------------------------------------------------
# Building the plan
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, weakref_slot=True)
class CompiledUnit:
    """A partition after ``compile``: what the executor needs to call it."""

    provider: str
    subgraph: Subgraph
    kernel: Callable[..., Any]
    node_indices: tuple[int, ...]


def build_plan(model: Model, units: Sequence[CompiledUnit]) -> ExecutionPlan:
    """Order the units topologically, number the slots, insert layout conversions."""
    slot_of: dict[str, int] = {}
    names: list[str] = []

    def slot(name: str) -> int:
        s = slot_of.get(name)
        if s is None:
            s = slot_of[name] = len(names)
            names.append(name)
        return s

    graph = model.graph
    declared = model.declared_shapes
    input_slots = {n: slot(n) for n in (*model.input_names, *sorted(model.overridable))}
    # A constant every consumer prepacked is not held (nor read, if it is still in the file).
    read_at_run: set[str] = set()   # (graph outputs that are constants: added below)
    for unit in units:
        packed = getattr(unit.kernel, "prepacked_inputs", frozenset())
        read_at_run.update(v.name for k, v in enumerate(unit.subgraph.inputs)
                           if v is not None and k not in packed)
    constants: dict[int, Any] = {}
    for name in model.const_names:
        if name not in read_at_run:
            continue
        info = model.value_info(name)
        if info.is_const:
            constants[slot(name)] = info.const
    # Overridable initializers (also graph inputs) default to their stored value.
    defaults = {}
    for name in model.overridable:
        init = graph.initializers[name]
        if init.const_value is not None:
            defaults[input_slots[name]] = canonical_dtype(init.const_value.numpy())

    ordered = _order_units(units)
    layout_of: dict[int, str] = {}
    converted: dict[tuple[int, str], int] = {}
    steps: list[tuple] = []   # Step's first fields (_STEP_FIELDS); releases and deps come below

    def read(name: str, layout: str, const: bool) -> int:
        s = slot(name)
        have = layout_of.get(s, "NCHW")
        if const or have == layout:
            return s
        key = (s, layout)
        if key not in converted:
            out = slot(f"{name}@{layout}")
            layout_of[out] = layout
            steps.append((f"{name}->{layout}", "LayoutConversion", "onnxplex", (),
                          _CONVERTERS[(have, layout)], (s,), (out,), 1, True, (None,)))
            converted[key] = out
        return converted[key]

    for unit in ordered:
        sg = unit.subgraph
        layout = sg.layout
        ins = tuple(-1 if v is None else read(v.name, layout, v.is_const) for v in sg.inputs)
        outs = tuple(-1 if v is None else slot(v.name) for v in sg.outputs)
        for s in outs:
            if s >= 0 and layout != "NCHW":
                layout_of[s] = layout
        node = sg.nodes[0]
        single = sg.is_single_node
        required = (max((k for k, v in enumerate(sg.outputs) if v is not None), default=-1) + 1)
        checks = tuple(None if v is None else _check_of(v, layout, v.name in declared)
                       for v in sg.outputs)
        steps.append((
            node.display_name if single else (sg.name or f"{unit.provider}_fused"),
            node.op_type if single else sg.name or "FusedSubgraph",
            unit.provider, unit.node_indices, unit.kernel, ins, outs,
            required if single else len(outs), not single, checks))

    output_slots = {}
    for v in graph.outputs:
        output_slots[v.name] = read(v.name, "NCHW", v.name in model.const_names)
        if v.name in model.const_names:
            constants.setdefault(output_slots[v.name], model.value_info(v.name).const)

    constants.update(defaults)
    plan_steps = _with_releases(steps, set(output_slots.values()) | set(constants))
    return ExecutionPlan(plan_steps, len(names), input_slots, output_slots, constants, names,
                         frozenset(defaults))


def _check_of(v: ValueInfo, layout: str, lenient: bool = False) -> tuple:
    """``(elem, shape, kind, dtype, accepted, lenient)``: the declared element type and shape (in
    the step's layout), the value's kind, the numpy dtype to compare with (None: unknown or not
    numpy's), a one-item list holding the shape last accepted (the declared shape itself when
    every dim is an int, else the last shape that passed): a run whose output has that shape
    pays one tuple comparison (a MobileNetV2 with a symbolic batch dim compared dim by dim,
    ~1.5 us a node), and whether the shape is the model file's own declaration
    (:attr:`Model.declared_shapes`: a contradicting output is then logged, not an error). For a
    sequence, map or optional, ``dtype`` is the value's conformer instead (see
    :func:`_conformer`)."""
    if v.kind != "tensor":
        return (v.elem_type, None, v.kind, _conformer(v.kind, v.ir_type), None, lenient)
    shape = v.shape
    if shape is not None and layout == "NHWC" and len(shape) == 4:
        shape = (shape[0], shape[2], shape[3], shape[1])
    try:
        dtype = np_dtype(v.elem_type) if v.elem_type else None
    except KeyError:
        dtype = None
    static = (tuple(shape) if shape is not None and all(type(d) is int for d in shape)
              else None)
    return (v.elem_type, shape, v.kind, dtype, [static], lenient)


def _order_units(units: Sequence[CompiledUnit]) -> list[CompiledUnit]:
    """Topological order of the units (fused groups are contracted), stable by first node."""
    last = -1
    for u in units:   # single nodes in node order (the nodes' is topological): that order
        idx = u.node_indices
        if len(idx) != 1 or idx[0] <= last:
            break
        last = idx[0]
    else:
        return list(units)
    producer: dict[str, int] = {}
    for k, u in enumerate(units):
        for v in u.subgraph.outputs:
            if v is not None:
                producer[v.name] = k
    deps = []
    for u in units:
        d = {producer[v.name] for v in u.subgraph.inputs if v is not None and v.name in producer}
        deps.append(d)
    users: list[list[int]] = [[] for _ in units]
    for k, d in enumerate(deps):
        for j in d:
            users[j].append(k)
    pending = [len(d) for d in deps]
    ready = [(min(u.node_indices), k) for k, u in enumerate(units) if pending[k] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        _, k = heapq.heappop(ready)
        out.append(units[k])
        for j in users[k]:
            pending[j] -= 1
            if pending[j] == 0:
                heapq.heappush(ready, (min(units[j].node_indices), j))
    if len(out) != len(units):  # the partitioner guarantees convexity; this is a bug guard
        raise OnnxplexError("internal error: partitions form a cycle")
    return out


_STEP_FIELDS = ("name", "op_type", "provider", "node_indices", "kernel", "inputs", "outputs",
                "required", "exact", "checks")
_INPUTS, _OUTPUTS = _STEP_FIELDS.index("inputs"), _STEP_FIELDS.index("outputs")


def _with_releases(steps: list[tuple], keep: set[int]) -> list[Step]:
    """The steps (their first fields, as tuples in :data:`_STEP_FIELDS` order: a dict a step
    made a 100,000-node plan's build peak higher) with the slots each one releases (those
    whose last reader it is, but ``keep``) and the steps it depends on."""
    last: dict[int, int] = {}
    producer: dict[int, int] = {}
    for k, st in enumerate(steps):
        for s in st[_INPUTS]:
            if s >= 0:
                last[s] = k
        for s in st[_OUTPUTS]:
            if s >= 0:
                producer[s] = k
                last.setdefault(s, k)   # produced but never read: release right away
    release: dict[int, list[int]] = {}
    for s, k in last.items():
        if s not in keep:
            release.setdefault(k, []).append(s)
    return [_step(st, tuple(release.get(k, ())),
                  tuple(sorted({producer[s] for s in st[_INPUTS] if s in producer})))
            for k, st in enumerate(steps)]


def _step(st: tuple, release: tuple[int, ...], deps: tuple[int, ...]) -> Step:
    """``Step(*st, release=release, deps=deps)`` (13 fields: see :mod:`._records`)."""
    return record(Step, **dict(zip(_STEP_FIELDS, st)), release=release, deps=deps)


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


class StepRecorder:
    """Receives (step, start_ns, end_ns, inputs, outputs) when profiling is on."""

    def __call__(self, step: Step, start: int, end: int, ins: Sequence[Any],
                 outs: Sequence[Any]) -> None:  # pragma: no cover - interface
        raise NotImplementedError


def sub_event_emitter(step: Step, record: StepRecorder) -> Callable[..., None]:
    """The ``emit`` callable handed to a kernel's ``profiled(emit, *inputs)`` (see
    :class:`onnxplex.Kernel`): each call records one sub-event of ``step`` through ``record``,
    as a step named ``<step name>/<name>`` of the same provider, ``args`` added to its event."""

    def emit(name: str, op_type: str, start_ns: int, end_ns: int, *,
             node_indices: Sequence[int] = (), inputs: Sequence[Any] = (),
             outputs: Sequence[Any] = (), args: Mapping[str, Any] | None = None) -> None:
        sub = Step(f"{step.name}/{name}", op_type, step.provider,
                   tuple(node_indices) or step.node_indices, step.kernel, (), (), 0, False, (),
                   args={"parent": step.name, **(args or {})})
        record(sub, start_ns, end_ns, list(inputs), list(outputs))

    return emit


def _call(step: Step, slots: list[Any], record: StepRecorder | None = None) -> Sequence[Any]:
    args = [None if s < 0 else slots[s] for s in step.inputs]
    profiled = getattr(step.kernel, "profiled", None) if record is not None else None
    try:
        if profiled is None:
            result = step.kernel(*args)
        else:
            result = profiled(sub_event_emitter(step, record), *args)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - reported with its node; a kernel's
        # sys.exit() must not end the caller's process
        _raise_failure(step, e)
    for s, value in zip(step.outputs, _settle(step, result)):
        if s >= 0:
            slots[s] = value
    return result if isinstance(result, tuple) else (result,)


_INDEX_FAILURE = as_status(KernelExecutionError, InvalidArgument)


def _raise_failure(step: Step, e: BaseException) -> None:
    """Raise ``e`` (a kernel's exception) as a :class:`KernelExecutionError` naming ``step``;
    one already attributed (a nested body's node, an output check) or a cancelled nested run
    goes on as it is."""
    if isinstance(e, (KernelExecutionError, RunCancelledError)):
        raise e
    detail = str(e) if isinstance(e, OnnxplexError) else f"{type(e).__name__}: {e}"
    # (an index out of range in the data: onnxruntime's INVALID_ARGUMENT, as its indexing
    # kernels report it; other kernel failures are its FAIL)
    cls = _INDEX_FAILURE if isinstance(e, IndexError) else KernelExecutionError
    raise cls(   # (onnxruntime's first sentence, then onnxplex's)
        f"Non-zero status code returned while running {step.op_type} node. Name:'{step.name}' "
        f"Status Message: node '{step.name}' ({step.op_type}) on provider {step.provider} "
        f"failed: {detail}", provider=step.provider, node=step.name,
        op_type=step.op_type) from e


def _settle(step: Step, result: Any) -> list[Any]:
    """The values of ``step``'s outputs from what its kernel returned (a tuple holds several
    outputs; a list is a sequence), each checked against its declaration (see
    :func:`_checked`); None for an output nobody reads."""
    if not isinstance(result, tuple):
        result = (result,)
    n = len(result)
    if n < step.required or (step.exact and n != len(step.outputs)):
        raise KernelExecutionError(
            f"node '{step.name}' ({step.op_type}) on provider {step.provider} returned {n} "
            f"output(s), expected {len(step.outputs) if step.exact else step.required}",
            provider=step.provider, node=step.name, op_type=step.op_type)
    return [None if s < 0 else _checked(step, k, result[k]) for k, s in enumerate(step.outputs)]


def _checked(step: Step, k: int, value: Any) -> Any:
    """Output ``k`` of ``step`` as the plan keeps it: a numpy scalar made a 0-d array, a
    tensor checked against its declared dtype and shape, a sequence, map or optional
    conformed to its declared type; raises :class:`KernelExecutionError` naming the step."""
    if isinstance(value, np.generic):
        value = np.asarray(value)
    chk = step.checks[k]
    if chk is not None:
        if chk[2] == "tensor":
            _check_tensor(step, k, value, chk)
        else:
            value = _check_structured(step, k, value, chk)
    return value


def _check_tensor(step: Step, k: int, value: Any, chk: tuple) -> None:
    """A tensor output against its declaration: not an array, or of another dtype, is an
    error, as is a shape that contradicts what inference found; one that contradicts only the
    model file's own declaration is logged (once per value) and passes, as onnxruntime returns
    such outputs (converters declare some shapes wrongly: skl2onnx a binary RidgeClassifier's
    scores as ``[N, 2]``, onnxmltools an XGBoost hinge classifier's as ``[N, 1]``)."""
    elem, shape, _, want, accepted, lenient = chk
    if not isinstance(value, np.ndarray):
        raise KernelExecutionError(
            f"node '{step.name}' ({step.op_type}) on provider {step.provider}: output {k} is "
            f"{type(value).__name__}, expected a numpy array", provider=step.provider,
            node=step.name, op_type=step.op_type)
    if want is not None and value.dtype != want:
        raise KernelExecutionError(
            f"node '{step.name}' ({step.op_type}) on provider {step.provider}: output {k} "
            f"has dtype {value.dtype}, declared {elem_type_name(elem)}",
            provider=step.provider, node=step.name, op_type=step.op_type)
    got = value.shape
    if got == accepted[0]:
        return
    if shape is not None:
        bad = len(got) != len(shape) or any(
            isinstance(d, int) and d != a for d, a in zip(shape, got))
        if bad and not lenient:
            raise KernelExecutionError(
                f"node '{step.name}' ({step.op_type}) on provider {step.provider}: output {k} "
                f"has shape {list(got)}, declared {list(shape)}",
                provider=step.provider, node=step.name, op_type=step.op_type)
        if bad and len(accepted) == 1:
            accepted.append(True)   # (warned: once per value)
            logger.warning(
                "node '%s' (%s) on provider %s: output %d has shape %s, the model declares "
                "%s; returned as computed (as onnxruntime returns it)", step.name,
                step.op_type, step.provider, k, list(got), list(shape))
    accepted[0] = got   # (concurrent runs may swap it: each shape put there passed)


class _Mismatch(Exception):
    """What is wrong with a kernel's sequence, map or optional output (its message)."""


def _conformer(kind: str, typ: Any) -> Callable[[Any], Any]:
    """A function checking a kernel's ``kind`` output against its declared type ``typ`` (None
    when unknown: the kind only) and returning it as onnxruntime's Python API returns such a
    value: a list (of arrays of the element type, or of maps), a dict of Python scalars (a map
    whose first item holds other types, numpy scalars, is converted whole: see
    :func:`_maptype.plain_map_test`), None or the value for an optional. Raises
    :class:`_Mismatch`."""
    name = type(typ).__name__
    if kind == "optional" or name == "OptionalType":
        inner = _conformer(_KINDS.get(type(typ.elem_type).__name__, "any"), typ.elem_type) \
            if name == "OptionalType" else None
        return (lambda v: v if v is None or inner is None else inner(v))
    if kind == "map":
        if name != "MapType":
            return _want(dict, "a dict (map)", lambda v: v)
        plain = _maptype.plain_map_test(typ)
        return _want(dict, "a dict (map)", lambda v: v if plain(v) else _as_map(v, typ))
    if kind == "sequence":
        elem = typ.elem_type if name == "SequenceType" else None
        elem_name = type(elem).__name__
        if elem_name == "MapType":
            plain = _maptype.plain_map_test(elem)

            def maps(v: Any) -> list:
                # a list of dicts (the set of their types: ~45 us for ZipMap's 1000 rows, half
                # an all() loop's time); Python keys and values judged by the first map's
                # first item (a kernel builds its maps alike)
                if type(v) is list and len(v) == 1 and type(v[0]) is dict:   # (one row)
                    return v if plain(v[0]) else [_as_map(v[0], elem)]
                if not isinstance(v, list):
                    raise _Mismatch(f"is {type(v).__name__}, expected a list (sequence)")
                if not {dict}.issuperset(map(type, v)):
                    k, m = next((k, m) for k, m in enumerate(v) if type(m) is not dict)
                    raise _Mismatch(f"element {k} is {type(m).__name__}, expected a dict "
                                    f"({ort_type_string(elem)})")
                return v if not v or plain(v[0]) else [_as_map(m, elem) for m in v]
            return maps
        if elem_name == "TensorType":
            try:
                dtype = np_dtype(elem.dtype.value)
            except KeyError:
                dtype = None

            def arrays(v: list) -> list:
                for k, a in enumerate(v):
                    if not isinstance(a, np.ndarray) or (dtype is not None and a.dtype != dtype):
                        got = a.dtype if isinstance(a, np.ndarray) else type(a).__name__
                        raise _Mismatch(f"element {k} is {got}, expected an array of "
                                        f"{ort_type_string(elem)}")
                return v
            return _want(list, "a list (sequence)", arrays)
        return _want(list, "a list (sequence)", lambda v: v)
    return lambda v: v


_KINDS = {"TensorType": "tensor", "SequenceType": "sequence", "MapType": "map",
          "OptionalType": "optional"}


def _want(cls: type, what: str, then: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def conform(value: Any) -> Any:
        if not isinstance(value, cls):
            raise _Mismatch(f"is {type(value).__name__}, expected {what}")
        return then(value)
    return conform


def _as_map(value: dict, typ: Any) -> dict:
    try:
        return _maptype.map_value(value, typ, sort=False)
    except ValueError as e:
        raise _Mismatch(str(e)) from None


def _check_structured(step: Step, k: int, value: Any, chk: tuple) -> Any:
    try:
        return chk[3](value)
    except _Mismatch as e:
        raise KernelExecutionError(
            f"node '{step.name}' ({step.op_type}) on provider {step.provider}: output {k} {e}",
            provider=step.provider, node=step.name, op_type=step.op_type) from None


def run_sequential(plan: ExecutionPlan, slots: list[Any], *,
                   cancelled: Callable[[], bool] | None = None,
                   record: StepRecorder | None = None) -> None:
    if cancelled is None and record is None:
        (plan._runner or plan.runner())(slots)
        return
    for step in plan.steps:
        _check_cancelled(cancelled, step)
        if record is None:
            _call(step, slots)
        else:
            args = [None if s < 0 else slots[s] for s in step.inputs]
            t0 = time.perf_counter_ns()
            outs = _call(step, slots, record)
            record(step, t0, time.perf_counter_ns(), args, outs)
        for s in step.release:
            slots[s] = None


def compile_sequential(plan: ExecutionPlan) -> Callable[[list[Any]], None]:
    """The plan as one function ``run(slots)``: what :func:`run_sequential` does without
    cancellation or profiling, at a fraction of its cost per step. Where ``onnxplex._runloop``
    is built, the walk is in C (:func:`_native_runner`); this Python version is the reference
    it follows (~0.4 us a step of its own on a 2-core EPYC, the C loop ~0.05).

    Each step becomes a closure specialised by its count of inputs and outputs (see
    :func:`_step_function`) holding its kernel, slots and checks; ``run`` calls them in order
    and attributes an exception to the step that raised it as :func:`_call` does. (Generating
    the whole plan as Python source ran each step in ~0.3 us, but ``compile`` took 20-90 us
    per step: 1.5 ms for a 16-node pipeline, more than the runs it would save.)"""
    steps = plan.steps
    if _runloop is not None:
        return _native_runner(plan)
    calls = tuple(_step_function(st) for st in steps)

    def run(slots: list[Any]) -> None:
        i = 0
        try:
            for call in calls:
                call(slots)
                i += 1
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a kernel's sys.exit() included
            _raise_failure(steps[i], e)

    return run


def _native_runner(plan: ExecutionPlan) -> Callable[[list[Any]], None]:
    """:func:`compile_sequential`'s ``run`` as an ``onnxplex._runloop.Runner``: the same walk
    in C (~0.05 us a step of its own against the closures' ~0.4). A step whose one output is
    a tensor is checked there as :func:`_inline_call` checks it, whatever fails that check
    going to :func:`_settle`; any other step runs its :func:`_step_function` closure."""
    steps = plan.steps
    entries: list[tuple] = []
    for st in steps:
        outs = st.outputs
        chk = st.checks[0] if len(outs) == 1 else None
        if len(outs) == 1 and outs[0] >= 0 and (chk is None or chk[2] == "tensor"):
            cell, dtype = (None, None) if chk is None else (chk[4], chk[3])
            entries.append((st.kernel, st.inputs, outs[0], cell, dtype,
                            functools.partial(_settle_one, st), st.release))
        else:
            entries.append((_step_function(st),))

    def fail(i: int, e: BaseException) -> None:
        _raise_failure(steps[i], e)

    return _runloop.Runner(plan.num_slots, np.ndarray, fail, entries)


def _settle_one(step: Step, result: Any) -> Any:
    return _settle(step, result)[0]


def _step_function(step: Step) -> Callable[[list[Any]], None]:
    """``call(slots)``: read the step's inputs, call its kernel, store its outputs and release
    the slots whose last reader it is. An output passes as it is when it is a numpy array of
    the declared dtype (the same dtype object, the common case, or an equal one) and of the
    shape last accepted for it; anything else (a tuple of the wrong length, a numpy scalar, a
    sequence or map, a new shape) goes through the checks :func:`_call` makes
    (:func:`_settle`, :func:`_checked`), which raise the same errors."""
    kernel, ins, outs, release = step.kernel, step.inputs, step.outputs, step.release
    ndarray = np.ndarray

    def test(k: int) -> tuple[bool, list | None, Any]:
        """Output k's inline test: (settle always, accepted-shape cell or None for any shape,
        dtype or None for any dtype)."""
        chk = step.checks[k]
        if chk is None:
            return False, None, None   # undeclared: any array (a numpy scalar is converted)
        if chk[2] != "tensor":
            return True, None, None     # a sequence, map or optional: conformed
        return False, chk[4], chk[3]

    if any(s < 0 for s in ins) or len(ins) > 3:
        def read(slots: list[Any]) -> Any:
            return kernel(*[None if s < 0 else slots[s] for s in ins])
    elif len(ins) == 0:
        def read(slots: list[Any]) -> Any:
            return kernel()
    elif len(ins) == 1:
        (a,) = ins

        def read(slots: list[Any]) -> Any:
            return kernel(slots[a])
    elif len(ins) == 2:
        a, b = ins

        def read(slots: list[Any]) -> Any:
            return kernel(slots[a], slots[b])
    else:
        a, b, c = ins

        def read(slots: list[Any]) -> Any:
            return kernel(slots[a], slots[b], slots[c])

    if len(outs) == 1 and outs[0] >= 0 and not test(0)[0]:
        (o,) = outs
        _, cell, dtype = test(0)
        return _inline_call(step, o, cell, dtype)
    elif len(outs) == 1 and outs[0] >= 0:   # a sequence, map or optional: conformed
        (o,) = outs
        conform = step.checks[0][3]   # (called directly: _checked's layers were ~0.3 us of a
        # ZipMap's ~1.9 us step, every classifier's probabilities at batch 1)

        def call(slots: list[Any]) -> None:
            r = read(slots)
            if type(r) is tuple or isinstance(r, np.generic):
                slots[o] = _settle(step, r)[0]
            else:
                try:
                    slots[o] = conform(r)
                except _Mismatch as e:
                    raise KernelExecutionError(
                        f"node '{step.name}' ({step.op_type}) on provider {step.provider}: "
                        f"output 0 {e}", provider=step.provider, node=step.name,
                        op_type=step.op_type) from None
            for s in release:
                slots[s] = None
    elif len(outs) == 2 and min(outs) >= 0 and not test(0)[0] and not test(1)[0]:
        # two tensors (a classifier's label and scores): checked inline, without the loop
        o0, o1 = outs
        _, cell0, dt0 = test(0)
        _, cell1, dt1 = test(1)

        def call(slots: list[Any]) -> None:
            r = read(slots)
            if type(r) is tuple and len(r) == 2:
                v0, v1 = r
                if type(v0) is not ndarray or (cell0 is not None and v0.shape != cell0[0]) or (
                        dt0 is not None and v0.dtype is not dt0 and v0.dtype != dt0):
                    v0 = _checked(step, 0, v0)
                if type(v1) is not ndarray or (cell1 is not None and v1.shape != cell1[0]) or (
                        dt1 is not None and v1.dtype is not dt1 and v1.dtype != dt1):
                    v1 = _checked(step, 1, v1)
                slots[o0] = v0
                slots[o1] = v1
            else:
                r = _settle(step, r)
                slots[o0] = r[0]
                slots[o1] = r[1]
            for s in release:
                slots[s] = None
    else:
        n = len(outs)
        used = tuple((k, s, *test(k)) for k, s in enumerate(outs) if s >= 0)

        def call(slots: list[Any]) -> None:
            r = read(slots)
            if type(r) is tuple and len(r) == n:
                for k, s, settle, cell, dtype in used:
                    v = r[k]
                    if settle or type(v) is not ndarray or (
                            cell is not None and v.shape != cell[0]) or (
                            dtype is not None and v.dtype != dtype):
                        v = _checked(step, k, v)
                    slots[s] = v
            else:
                r = _settle(step, r)
                for k, s, *_ in used:
                    slots[s] = r[k]
            for s in release:
                slots[s] = None

    return call


_INLINE_SOURCE = """
def make(kernel, {args}, o, cell, dtype, release, step, ndarray, settle):
    def call(slots):
        r = kernel({reads})
        if type(r) is ndarray and (cell is None or r.shape == cell[0]) and (
                dtype is None or r.dtype is dtype or r.dtype == dtype):
            slots[o] = r
        else:
            slots[o] = settle(step, r)[0]
        for s in release:
            slots[s] = None
    return call
"""


def _inline_factory(arity: int | None) -> Callable[..., Callable[[list[Any]], None]]:
    """The factory of :func:`_inline_call`'s closures for steps of ``arity`` inputs, all
    given (None: any inputs, omitted ones passed as None), the slot reads written out.
    Compiled once per arity and process from one template (a kernel called through a
    separate ``read`` closure cost a Python frame per step)."""
    if arity is None:
        args, reads = "ins", "*[None if s < 0 else slots[s] for s in ins]"
    else:
        names = [f"i{k}" for k in range(arity)]
        args, reads = ", ".join(names), ", ".join(f"slots[{n}]" for n in names)
    namespace: dict[str, Any] = {}
    exec(_INLINE_SOURCE.format(args=args, reads=reads), namespace)  # noqa: S102 - ours
    return namespace["make"]


_INLINE_FACTORIES = {k: _inline_factory(k) for k in (1, 2, 3)}
_INLINE_ANY = _inline_factory(None)


def _inline_call(step: Step, o: int, cell: list | None, dtype: Any
                 ) -> Callable[[list[Any]], None]:
    """:func:`_step_function`'s ``call`` for a step with one output checked inline: the
    kernel called with the step's slots, written out for one to three inputs (most steps;
    gaussian_nb's 18 steps 0.96 of the time with a separate ``read`` closure, warm)."""
    ins = step.inputs
    make = _INLINE_FACTORIES.get(len(ins)) if ins and min(ins) >= 0 else None
    head = ins if make is not None else (ins,)
    return (make or _INLINE_ANY)(step.kernel, *head, o, cell, dtype, step.release, step,
                                 np.ndarray, _settle)


def run_parallel(plan: ExecutionPlan, slots: list[Any], pool: ThreadPoolExecutor, *,
                 cancelled: Callable[[], bool] | None = None,
                 record: StepRecorder | None = None) -> None:
    """Run independent steps concurrently (inter-op parallelism)."""
    steps = plan.steps
    n = len(steps)
    if n == 0:
        return
    users: list[list[int]] = [[] for _ in range(n)]
    pending = [0] * n
    for k, st in enumerate(steps):
        pending[k] = len(st.deps)
        for d in st.deps:
            users[d].append(k)
    # A released slot must wait for *every* reader, which may finish out of order: count them.
    readers: dict[int, int] = {}
    for st in steps:
        for s in set(st.inputs):
            if s >= 0:
                readers[s] = readers.get(s, 0) + 1
    releasable = {s for st in steps for s in st.release}
    lock = threading.Lock()
    done = threading.Event()
    state = {"left": n, "error": None}

    def finish(k: int) -> int | None:
        """Book-keeping after step k; returns one newly ready step to run on this thread."""
        ready = []
        with lock:
            for s in set(steps[k].inputs):
                if s >= 0 and s in releasable:
                    readers[s] -= 1
                    if readers[s] == 0:
                        slots[s] = None
            for s in steps[k].outputs:
                if s in releasable and readers.get(s, 0) == 0:
                    slots[s] = None
            for j in users[k]:
                pending[j] -= 1
                if pending[j] == 0:
                    ready.append(j)
            state["left"] -= 1
            if state["left"] == 0:
                done.set()
        for j in ready[1:]:   # pool threads see this run's cancellation check (bodies)
            pool.submit(contextvars.copy_context().run, work, j)
        return ready[0] if ready else None   # continue here: fewer hand-offs

    def work(k: int | None) -> None:
        while k is not None:
            if state["error"] is not None:
                return
            try:
                _check_cancelled(cancelled, steps[k])
                if record is None:
                    _call(steps[k], slots)
                else:
                    args = [None if s < 0 else slots[s] for s in steps[k].inputs]
                    t0 = time.perf_counter_ns()
                    outs = _call(steps[k], slots, record)
                    record(steps[k], t0, time.perf_counter_ns(), args, outs)
            except BaseException as e:  # noqa: BLE001 - handed to the caller below
                with lock:
                    if state["error"] is None:
                        state["error"] = e
                done.set()
                return
            k = finish(k)

    roots = [k for k in range(n) if pending[k] == 0]
    for k in roots[1:]:
        pool.submit(contextvars.copy_context().run, work, k)
    work(roots[0])
    done.wait()
    if state["error"] is not None:
        raise state["error"]


class GraphRunner:
    """A compiled subgraph body: ``runner(*inputs, *outer_values) -> list of outputs``.

    Built once per session by ``ProviderContext.compile_graph``; holds no per-run state.
    """

    def __init__(self, plan: ExecutionPlan, input_names: Sequence[str],
                 outer_names: Sequence[str], output_names: Sequence[str]) -> None:
        self.plan = plan
        self.input_names = tuple(input_names)
        self.outer_names = tuple(outer_names)
        self.output_names = tuple(output_names)
        self._in_slots = [plan.input_slots[n] for n in (*self.input_names, *self.outer_names)]
        self._out_slots = [plan.output_slots[n] for n in self.output_names]

    def __call__(self, *values: Any) -> list[Any]:
        if len(values) != len(self._in_slots):
            raise OnnxplexError(f"subgraph expects {len(self._in_slots)} values "
                                f"({len(self.input_names)} inputs + {len(self.outer_names)} "
                                f"outer), got {len(values)}")
        cancelled = _CANCELLED.get()
        _check_cancelled(cancelled, None)   # once per body run (a Loop iteration), even empty
        slots = self.plan.initial_slots()
        for s, v in zip(self._in_slots, values):
            slots[s] = v
        if cancelled is None:
            (self.plan._runner or self.plan.runner())(slots)
        else:
            run_sequential(self.plan, slots, cancelled=cancelled)
        return [slots[s] for s in self._out_slots]


def feed_slots(plan: ExecutionPlan, feeds: Mapping[str, Any]) -> list[Any]:
    slots = plan.initial_slots()
    for name, value in feeds.items():
        slots[plan.input_slots[name]] = value
    return slots
