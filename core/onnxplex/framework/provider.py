"""The execution-provider contract (``api_version`` 1).

A provider is a subclass of :class:`ExecutionProvider`. The framework calls, in order:

1. ``available(options)`` (class method) -- can it run on this machine at all, and if not, why;
   ``options`` are the provider options a session asked for (raw, as given), or ``None`` for
   the general probe behind ``get_available_providers()``. An option may make a provider
   available (e.g. one that forces a portable code path); a provider whose ``available`` takes
   no argument is called without one.
2. ``__init__(options, context=...)`` -- once per session, with validated options;
3. ``get_capability(view)`` -- once per session; returns *data* (:class:`Capability`): the node
   groups it claims and a reason for each node it declines. It must not modify or keep ``view``;
4. ``compile(subgraph)`` -- once per claimed group; returns a :class:`Kernel`, a callable that
   takes the group's inputs positionally and returns its outputs. Kernels keep no per-run
   state: ``run`` may call one kernel from many threads at once.

Providers that run ops one by one declare them in an :class:`OpTable` (domain, op type, opset
range, allowed dtypes per type variable, attribute predicate, kernel factory); the default
``get_capability`` and ``compile`` are derived from it.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import onnx

from .._errors import CompileError, ProviderOptionError
from ..graph.model import GraphView, NodeView, Subgraph

__all__ = [
    "API_VERSION",
    "Availability",
    "Capability",
    "Decline",
    "ExecutionProvider",
    "Kernel",
    "KernelFactory",
    "NodeGroup",
    "OpConfig",
    "OpTable",
    "Option",
    "ProviderContext",
]

logger = logging.getLogger(__name__)

API_VERSION = 1
"""Version of the provider contract described in this module."""


class Kernel(Protocol):
    """What ``compile`` returns: ``kernel(*inputs) -> output | tuple of outputs``.

    Inputs arrive positionally in :attr:`Subgraph.inputs` order (``None`` for an omitted
    optional input). Several outputs are returned as a ``tuple``; a single output may be
    returned bare. Values are numpy arrays for tensors, Python lists of arrays for sequences,
    ``dict`` s for maps (``list`` s of dicts for sequences of maps, ZipMap's output) and
    ``None`` for an empty optional. A map arrives with Python keys and values (``int`` or
    ``str`` keys; ``float``, ``int`` or ``str`` values), keys ascending, as onnxruntime holds
    it; a map a kernel returns should be the same (the executor converts one whose first item
    holds numpy scalars, at a cost).

    Profiling hook (optional): a kernel that runs several ops (a fused partition) may also
    define ``profiled(emit, *inputs)``, which the executor calls instead of ``kernel(*inputs)``
    when session profiling is on (``SessionOptions.enable_profiling``); it must return what
    ``kernel(*inputs)`` returns. Each ``emit(name, op_type, start_ns, end_ns, *,
    node_indices=(), inputs=(), outputs=(), args=None)`` call records one sub-event (times
    from ``time.perf_counter_ns``) as a profiling event ``<kernel name>/<name>`` nested in
    the kernel's own, with ``args`` (e.g. the kernel variant) added to the event's args.
    ``emit`` belongs to one call: do not keep it.

    Prepacked constants (optional): a kernel that copied constant inputs into its own layout
    at compile time and never reads them again may say so with ``prepacked_inputs``, a set of
    input positions (:func:`prepacked` sets it). The executor then passes ``None`` at those
    positions, and a constant every consumer has prepacked is not kept by the session: a
    weight read from the model file is released once the kernel drops the array it packed
    from (as onnxruntime frees an initializer all of whose kernels prepacked it).
    """

    def __call__(self, *inputs: Any) -> Any: ...


def prepacked(kernel: Callable[..., Any], *positions: int) -> Callable[..., Any]:
    """Mark ``kernel`` as not reading its inputs at ``positions`` at run time (it prepacked
    those constants; see :class:`Kernel`). Returns the kernel, for ``return prepacked(k, 1)``.
    """
    if positions:
        try:
            kernel.prepacked_inputs = frozenset(positions)  # type: ignore[attr-defined]
        except AttributeError:   # a builtin or a slotted callable: wrap it
            inner = kernel

            def kernel(*inputs: Any) -> Any:
                return inner(*inputs)

            kernel.prepacked_inputs = frozenset(positions)  # type: ignore[attr-defined]
    return kernel


@dataclass(frozen=True)
class ProviderContext:
    """Session-wide settings a provider may use; the same for every kernel it compiles.

    ``compile_graph(body)`` partitions and compiles a subgraph body (an If/Loop/Scan attribute
    value, as found in ``NodeView.attrs``) over the session's providers, once, and returns a
    runner: ``runner(*body_inputs, *outer_values) -> list of body outputs``, where the outer
    values are the node's ``implicit_inputs`` the body reads, in ``runner.outer_names`` order.
    """

    intra_op_num_threads: int = 0
    session_config: Mapping[str, str] = field(default_factory=dict)
    compile_graph: Callable[[Any], Any] | None = field(default=None, compare=False)


KernelFactory = Callable[[NodeView, ProviderContext], Kernel]
"""Builds the kernel of one node once per session: prepack constants here, not per run."""


@dataclass(frozen=True)
class Availability:
    """Whether a provider can run here; ``reason`` says why not (e.g. 'needs aarch64 with SME2')."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class NodeGroup:
    """Claimed nodes, by :attr:`NodeView.index`: one node runs its own kernel; several are
    fused into one kernel by ``compile``. ``name`` labels the fused kernel in reports."""

    nodes: tuple[int, ...]
    name: str = ""
    note: str = ""
    """Shown beside the nodes in the placement report (e.g. which kernel path runs them)."""
    node_notes: Mapping[int, str] | tuple[tuple[int, str], ...] = ()
    """Per-node detail for the placement report (e.g. the kernel variant each node of a fused
    group runs), by node index; given as a mapping, kept as sorted ``(index, note)`` pairs."""

    def __post_init__(self) -> None:
        nodes = self.nodes
        if type(nodes) is not tuple or not all(type(i) is int for i in nodes):
            object.__setattr__(self, "nodes", tuple(int(i) for i in nodes))
        if self.node_notes == ():   # (the common case: a tuple of plain ints, no notes)
            return
        notes = self.node_notes.items() if isinstance(self.node_notes, Mapping) \
            else self.node_notes
        object.__setattr__(self, "node_notes",
                           tuple(sorted((int(i), str(n)) for i, n in notes if n)))


_SINGLE_GROUPS: dict[int, NodeGroup] = {}


def single_node_group(index: int) -> NodeGroup:
    """``NodeGroup((index,))``, one shared instance per index (groups are frozen; a per-node
    claim, most claims, then costs no new object and no ``__post_init__`` check)."""
    group = _SINGLE_GROUPS.get(index)
    if group is None:
        group = NodeGroup((index,))
        if type(index) is int and len(_SINGLE_GROUPS) < 1 << 16:
            group = _SINGLE_GROUPS.setdefault(index, group)
    return group


@dataclass(frozen=True)
class Decline:
    """A node the provider will not run, and why (shown in the placement report)."""

    node: int
    reason: str


@dataclass(frozen=True)
class Capability:
    """A provider's answer to ``get_capability``."""

    groups: tuple[NodeGroup, ...] = ()
    declined: tuple[Decline, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", tuple(self.groups))
        object.__setattr__(self, "declined", tuple(self.declined))


@dataclass(frozen=True)
class Option:
    """One provider option: its default, type (``str``/``int``/``float``/``bool``) and doc.

    Values given as strings (as ORT passes provider options) are converted to ``type``.
    """

    default: Any
    type: type = str
    doc: str = ""
    choices: tuple[Any, ...] | None = None
    check: Callable[[Any], str | None] | None = None
    """Validates a converted value: returns None when fine, else what is wrong with it."""

    def convert(self, key: str, value: Any, provider: str) -> Any:
        try:
            if self.type is bool and isinstance(value, str):
                low = value.strip().lower()
                if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(value)
                out: Any = low in ("1", "true", "yes", "on")
            else:
                out = self.type(value)
        except (TypeError, ValueError):
            raise ProviderOptionError(
                f"provider {provider!r}: option {key!r} must be {self.type.__name__}, "
                f"got {value!r}", provider=provider) from None
        if self.choices is not None and out not in self.choices:
            raise ProviderOptionError(
                f"provider {provider!r}: option {key!r} must be one of {list(self.choices)}, "
                f"got {value!r}", provider=provider)
        problem = self.check(out) if self.check is not None else None
        if problem:
            raise ProviderOptionError(f"provider {provider!r}: option {key!r}={value!r}: "
                                      f"{problem}", provider=provider)
        return out


# --------------------------------------------------------------------------------------------
# Declarative operator support
# --------------------------------------------------------------------------------------------


Predicate = Callable[[NodeView], "str | None"]
"""Returns ``None`` when the node is supported, else the reason it is not."""


@dataclass(frozen=True)
class OpConfig:
    """One supported operator configuration.

    ``since``/``until`` bound the opset versions of the node's domain (inclusive; ``until``
    ``None`` means open). ``dtypes`` maps a type variable of the op's ONNX schema (``"T"``) or
    an input index (``0``) to the allowed ONNX element types; ``None`` allows any.
    ``predicate`` may decline with a reason (attributes, shapes, constness).
    """

    op_type: str
    domain: str = ""
    since: int = 1
    until: int | None = None
    dtypes: Mapping[str | int, frozenset[int]] | None = None
    predicate: Predicate | None = None
    factory: KernelFactory | None = None

    def covers(self, opset: int) -> bool:
        return self.since <= opset and (self.until is None or opset <= self.until)


class OpTable:
    """A registry of :class:`OpConfig`, keyed by ``(domain, op_type)``.

    ``lookup(node)`` picks, among the configs covering the node's opset, the one with the
    newest ``since`` (as kernel registries in ONNX Runtime and the ONNX reference do) and
    checks its dtypes and predicate.
    """

    def __init__(self) -> None:
        self._configs: dict[tuple[str, str], list[OpConfig]] = {}
        # lookup's answer per node view (a session asks for each node when claiming and again
        # when compiling; the dtype check alone is ~10 us): views are immutable, and the
        # answers are dropped when a config is added.
        self._answers: weakref.WeakKeyDictionary[NodeView, tuple[OpConfig | None, str]] = \
            weakref.WeakKeyDictionary()
        # lookup's answer per (domain, op type, opset) when it depends on nothing else (the
        # chosen config has no dtypes and no predicate, or none is chosen): most ops of most
        # models, answered without the per-view table (~2 us a weak-reference lookup, and a
        # session looks each node up three times). _NODE_DEPENDENT: ask per view. Dropped
        # with the per-view answers when a config is added.
        self._static: dict[tuple[str, str, int], tuple[OpConfig | None, str] | object] = {}

    def add(self, config: OpConfig) -> OpConfig:
        lst = self._configs.setdefault((config.domain, config.op_type), [])
        lst.append(config)
        lst.sort(key=lambda c: c.since)
        self._answers.clear()
        self._static.clear()
        return config

    def register(self, op_type: str | Iterable[str], *, domain: str = "", since: int = 1,
                 until: int | None = None,
                 dtypes: Mapping[str | int, Iterable[int]] | None = None,
                 predicate: Predicate | None = None) -> Callable[[KernelFactory], KernelFactory]:
        """Decorator: register a kernel factory for one or several op types."""
        names = [op_type] if isinstance(op_type, str) else list(op_type)
        frozen = None if dtypes is None else {k: frozenset(v) for k, v in dtypes.items()}

        def deco(factory: KernelFactory) -> KernelFactory:
            for name in names:
                self.add(OpConfig(name, domain, since, until, frozen, predicate, factory))
            return factory

        return deco

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._configs

    def __iter__(self):
        for lst in self._configs.values():
            yield from lst

    def op_types(self, domain: str = "") -> list[str]:
        return sorted(op for (d, op) in self._configs if d == domain)

    def lookup(self, node: NodeView) -> tuple[OpConfig | None, str]:
        """The config that runs ``node``, or ``(None, reason)``."""
        key = (node.domain, node.op_type, node.opset)
        static = self._static.get(key)
        if static is None:
            static = self._static_answer(key)
            if len(self._static) < 4096:
                self._static[key] = static
        if static is not _NODE_DEPENDENT:
            return static   # type: ignore[return-value]
        try:
            return self._answers[node]
        except (KeyError, TypeError):   # (TypeError: a view type without weak references)
            pass
        answer = self._lookup(node)
        try:
            self._answers[node] = answer
        except TypeError:
            pass
        return answer

    def _static_answer(self, key: tuple[str, str, int]) -> tuple[OpConfig | None, str] | object:
        """:meth:`_lookup`'s answer for any node of ``key``'s domain, op type and opset, or
        :data:`_NODE_DEPENDENT` when the chosen config's dtypes or predicate must see it."""
        chosen, reason = self._choose(*key)
        if chosen is not None and (chosen.dtypes or chosen.predicate is not None):
            return _NODE_DEPENDENT
        return chosen, reason

    def _choose(self, domain: str, op_type: str, opset: int) -> tuple[OpConfig | None, str]:
        """The config covering ``opset`` with the newest ``since``, or ``(None, reason)``."""
        configs = self._configs.get((domain, op_type))
        qualified = f"{domain}::{op_type}" if domain else op_type   # (NodeView.qualified_op)
        if not configs:
            return None, f"no kernel for {qualified}"
        chosen = None
        for c in configs:
            if c.covers(opset):
                chosen = c
        if chosen is None:
            spans = ", ".join(f"{c.since}-{c.until or ''}" for c in configs)
            return None, (f"{qualified} at opset {opset} is outside the supported "
                          f"opset range ({spans})")
        return chosen, ""

    def _lookup(self, node: NodeView) -> tuple[OpConfig | None, str]:
        chosen, reason = self._choose(node.domain, node.op_type, node.opset)
        if chosen is None:
            return None, reason
        if chosen.dtypes:
            reason = _check_dtypes(node, chosen.dtypes)
            if reason:
                return None, reason
        if chosen.predicate is not None:
            reason = chosen.predicate(node)
            if reason:
                return None, reason
        return chosen, ""


_NODE_DEPENDENT = object()


def _check_dtypes(node: NodeView, allowed: Mapping[str | int, frozenset[int]]) -> str | None:
    from .._dtypes import elem_type_name

    binding = _type_var_binding(node)
    for key, types in allowed.items():
        if isinstance(key, int):
            v = node.input(key)
            elems = [] if v is None or v.elem_type is None else [v.elem_type]
            label = f"input {key}"
        else:
            elems = binding.get(key, [])
            label = f"type {key}"
        for e in elems:
            if e not in types:
                return (f"{label} is {elem_type_name(e)}, supported: "
                        + ", ".join(sorted(elem_type_name(t) for t in types)))
    return None


@functools.lru_cache(maxsize=4096)
def _formal_type_strs(domain: str, op_type: str,
                      opset: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except Exception:  # noqa: BLE001 - ops without an ONNX schema (contrib) simply have none
        return (), ()
    return (tuple(p.type_str for p in schema.inputs), tuple(p.type_str for p in schema.outputs))


def _type_var_binding(node: NodeView) -> dict[str, list[int]]:
    ins, outs = _formal_type_strs(node.domain, node.op_type, node.opset)
    binding: dict[str, list[int]] = {}
    for formal, actual in ((ins, node.inputs), (outs, node.outputs)):
        if not formal:
            continue
        for i, v in enumerate(actual):
            if v is None or v.elem_type is None:
                continue
            tv = formal[min(i, len(formal) - 1)]  # variadic: the last formal repeats
            binding.setdefault(tv, []).append(v.elem_type)
    return binding


# --------------------------------------------------------------------------------------------
# The provider base class
# --------------------------------------------------------------------------------------------


class ExecutionProvider:
    """Base class of every execution provider.

    Subclasses set :attr:`name` and either an :attr:`op_table` (per-node kernels) or override
    :meth:`get_capability` and :meth:`compile` (fused kernels). Options are declared in
    :attr:`option_specs`; unknown keys are an error.
    """

    name: ClassVar[str] = ""
    api_version: ClassVar[int] = API_VERSION
    option_specs: ClassVar[Mapping[str, Option]] = {}
    preferred_layout: ClassVar[str] = "NCHW"
    op_table: ClassVar[OpTable | None] = None
    concurrent_run_supported: ClassVar[bool] = True
    opt_in: ClassVar[bool] = False
    """An opt-in provider runs only when a session names it: ``providers=None`` uses every
    available provider that is not opt-in (as onnxruntime uses its XNNPACK EP only on request).
    For providers that change how a model runs in ways a user should choose (layout, numerics)."""

    def __init__(self, options: Mapping[str, Any] | None = None, *,
                 context: ProviderContext | None = None) -> None:
        self.context = context or ProviderContext()
        given = dict(options or {})
        unknown = sorted(set(given) - set(self.option_specs))
        if unknown:
            valid = ", ".join(sorted(self.option_specs)) or "none"
            raise ProviderOptionError(
                f"provider {self.name!r}: unknown option(s) {unknown}; valid options: {valid}",
                provider=self.name)
        self.options: dict[str, Any] = {
            k: spec.convert(k, given[k], self.name) if k in given else spec.default
            for k, spec in self.option_specs.items()
        }

    @classmethod
    def available(cls, options: Mapping[str, Any] | None = None) -> Availability:
        """Whether this provider can run on this machine; override to probe hardware.

        ``options``: the provider options a session requested it with (raw values, not yet
        validated), or ``None`` when asked in general. Raise :class:`ProviderOptionError` for an
        option value that cannot be understood; any other exception means "unavailable".
        """
        return Availability(True)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """Extra facts for ``onnxplex providers`` (detected CPU features, chosen kernels)."""
        return {}

    def provider_options(self) -> dict[str, str]:
        """Effective options as strings, as ORT's ``get_provider_options`` reports them."""
        return {k: str(int(v)) if isinstance(v, bool) else str(v)
                for k, v in self.options.items()}

    def get_capability(self, graph: GraphView) -> Capability:
        """Claim node groups among ``graph.nodes``; decline the rest with reasons.

        The default claims each node its :attr:`op_table` supports as a single-node group.
        """
        if self.op_table is None:
            raise NotImplementedError(f"{type(self).__name__} has neither an op_table nor a "
                                      "get_capability override")
        groups, declined = [], []
        lookup = self.op_table.lookup
        for node in graph.nodes:
            config, reason = lookup(node)
            if config is None:
                declined.append(Decline(node.index, reason))
            else:
                groups.append(single_node_group(node.index))
        return Capability(tuple(groups), tuple(declined))

    def compile(self, subgraph: Subgraph) -> Kernel:
        """Turn a claimed group into a kernel. The default builds a single node's kernel from
        the :attr:`op_table`; fusing providers override this."""
        if self.op_table is None or not subgraph.is_single_node:
            raise NotImplementedError(f"{type(self).__name__} does not compile fused groups")
        node = subgraph.nodes[0]
        config, reason = self.op_table.lookup(node)
        if config is None or config.factory is None:
            raise CompileError(f"{self.name}: cannot build a kernel for {node.display_name}: "
                               f"{reason or 'no factory registered'}", provider=self.name,
                               node=node.display_name, op_type=node.op_type)
        return config.factory(node, self.context)
