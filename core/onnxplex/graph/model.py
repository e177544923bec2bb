"""The in-memory graph: loading an ONNX model and viewing it (the checks it must pass are in
``checks``, shape inference in ``inference``, memory limits in ``limits``, external data in
``external``, onnx-ir node helpers in ``nodes``).

onnxplex keeps the model in `onnx-ir <https://github.com/onnx/ir-py>`_ objects (nodes, values
with producers and uses, initializers, nested subgraphs, lossless serialization back to a
``ModelProto``). Writing our own IR would duplicate what onnx-ir already does well; what this
module adds is what a *runtime* needs before it trusts a file from a stranger:

* parsing errors, IR/opset versions, names, dangling inputs and cycles become
  :class:`~onnxplex.InvalidModelError` subclasses naming the culprit;
* external data is resolved relative to the model's folder and refused when it would leave it
  (absolute paths, ``..``, symlinks) or reach past the end of its file;
* onnx shape inference annotates dtypes and shapes (symbolic dims are kept);
* providers see the graph only through read-only *views* (:class:`GraphView`,
  :class:`NodeView`, :class:`ValueInfo`) that are plain data, valid for the duration of a call.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import heapq
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np
import onnx
import onnx_ir as ir

from .._dtypes import elem_type_name, np_dtype, ort_type_string, type_string
from .._errors import (
    ExternalDataError,
    Fail,
    InvalidArgumentError,
    InvalidModelError,
    InvalidProtobuf,
    NoSuchFile,
    OnnxplexError,
    as_status,
)
from .._records import record
from . import fast_attrs as _fast_attrs
from . import fast_read as _fast_read
from . import inference as _inference
from . import maptype as _maptype
from . import wire as _wire
from .checks import (
    _check_control_flow,
    _check_function_calls,
    _check_schemas,
    _check_structure,
    _check_tensors,
    _check_value_shapes,
    _check_versions,
    _negative_dims_unknown,
    _parse,
    _walk,
    _Walked,
)
from .inference import (
    _attach_initializers,
    _infer_shapes,
)
from .inline import inline_calls_in_bodies
from .limits import (
    _SUB_BYTE_BITS,
    _num_elements,
    check_tensor_size,
)
from .nodes import (
    _BODY_ATTRS,
    OPSET_KEY,
    _unsorted_bodies,
    all_nodes,
    attrs_of,
)

__all__ = ["Model", "load_model", "load_proto", "ValueInfo", "NodeView", "GraphView",
           "Subgraph"]

logger = logging.getLogger(__name__)


Dim = int | str | None
"""One dimension: a static size, a symbolic name, or ``None`` when unknown."""


# --------------------------------------------------------------------------------------------
# Views handed to providers
# --------------------------------------------------------------------------------------------


class LazyConst:
    """A constant read on demand (a weight still in the model file): :attr:`ValueInfo.const`
    reads it when asked and keeps it only while someone else does (a weak reference), so a
    weight a kernel prepacked and dropped leaves memory."""

    __slots__ = ("_tensor", "_ref", "_lock")

    def __init__(self, tensor: ir.TensorProtocol) -> None:
        self._tensor = tensor
        self._ref: weakref.ref[np.ndarray] | None = None
        self._lock = threading.Lock()

    def get(self) -> np.ndarray:
        with self._lock:
            arr = self._ref() if self._ref is not None else None
            if arr is None:
                arr = _readonly_array(self._tensor)
                self._ref = weakref.ref(arr)
            return arr


@dataclass(frozen=True, eq=False, slots=True, weakref_slot=True)
class ValueInfo:
    """What is known about one value (an edge of the graph) before running it.

    ``shape`` is ``None`` when the rank is unknown; each dim is an ``int``, a symbolic name or
    ``None``. ``const`` holds the value (a read-only array) when it is a constant initializer;
    providers may prepack it at compile time. A large weight is read from the model file when
    ``const`` is asked for and stays in memory only while something holds the array: a kernel
    that prepacks it should not keep the original (see ``prepacked_inputs`` in
    docs/writing-a-provider.md).

    ``kind`` is ``"tensor"``, ``"sequence"``, ``"map"`` or ``"optional"``; for the last three
    ``ir_type`` holds the whole onnx-ir type (a sequence's element type, a map's key and value
    types: :class:`onnxplex.graph.maptype.MapType`) and :attr:`type_string` spells it as
    onnxruntime does (``seq(map(int64,tensor(float)))``).
    """

    name: str
    elem_type: int | None
    shape: tuple[Dim, ...] | None
    kind: str = "tensor"
    stored: np.ndarray | LazyConst | None = field(default=None, repr=False)
    ir_type: Any = field(default=None, repr=False)

    @property
    def type_string(self) -> str:
        """onnxruntime's ``NodeArg.type``: ``tensor(float)``, ``seq(map(int64,tensor(float)))``,
        ``map(string,tensor(float))``; the bare kind when the type is not known."""
        if self.kind == "tensor":
            return type_string(self.elem_type) if self.elem_type is not None \
                else "tensor(undefined)"
        return ort_type_string(self.ir_type) if self.ir_type is not None else self.kind

    def describe(self) -> str:
        """Short text for reports and pictures: ``float[N,3]`` for a tensor (``?`` for an
        unknown dim or rank), the type string for a sequence, map or optional."""
        if self.kind != "tensor":
            return self.type_string
        t = elem_type_name(self.elem_type) if self.elem_type is not None else self.kind
        if self.shape is None:
            return f"{t}[?]"
        return f"{t}[{','.join('?' if d is None else str(d) for d in self.shape)}]"

    @property
    def const(self) -> np.ndarray | None:
        """The value of a constant initializer (read-only), else ``None``."""
        stored = self.stored
        return stored.get() if isinstance(stored, LazyConst) else stored

    @property
    def dtype(self) -> np.dtype | None:
        """numpy dtype of a tensor value, or ``None`` when unknown or not a tensor."""
        if self.kind != "tensor" or self.elem_type is None:
            return None
        try:
            return np_dtype(self.elem_type)
        except KeyError:
            return None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_const(self) -> bool:
        return self.stored is not None

    def static_shape(self) -> tuple[int, ...] | None:
        """The shape when every dim is a known integer, else ``None``."""
        if self.shape is None or not all(isinstance(d, int) for d in self.shape):
            return None
        return tuple(self.shape)  # type: ignore[arg-type]


_NO_ARRAYS: Mapping[str, np.ndarray] = MappingProxyType({})


@dataclass(frozen=True, eq=False, slots=True, weakref_slot=True)
class NodeView:
    """A read-only description of one node, as providers and kernels see it.

    ``index`` is the node's position in the session's topological order and identifies it in
    claims. ``opset`` is the version of the node's domain imported by the model; ``inputs``
    holds ``None`` for an omitted optional input. ``attrs`` maps attribute names to plain
    Python values (ints, floats, str, tuples, numpy arrays, or :class:`onnx_ir.Graph` for
    subgraph bodies, which must not be modified).
    """

    index: int
    name: str
    op_type: str
    domain: str
    opset: int
    inputs: tuple[ValueInfo | None, ...]
    outputs: tuple[ValueInfo | None, ...]
    attrs: Mapping[str, Any]
    implicit_inputs: tuple[ValueInfo, ...] = ()
    """Outer-scope values read inside this node's subgraphs (If/Loop/Scan bodies). Kernels of
    single nodes receive them after the explicit inputs, in this order."""
    arrays: Mapping[str, np.ndarray] = field(default_factory=lambda: _NO_ARRAYS, repr=False)
    """Long INTS/FLOATS attributes as loaded: read-only arrays (see :meth:`attr_array`)."""

    @property
    def display_name(self) -> str:
        """The node's name, or ``<OpType>_<index>`` when it has none (as ORT's profiler does)."""
        return self.name or f"{self.op_type}_{self.index}"

    @property
    def qualified_op(self) -> str:
        return f"{self.domain}::{self.op_type}" if self.domain else self.op_type

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def attr_array(self, name: str, dtype: Any = None) -> np.ndarray | None:
        """A list or tensor attribute as a read-only numpy array, ``None`` when absent: INTS
        as int64, FLOATS as float32 (their precision in the file), ``dtype`` converting.
        Long lists come as loaded, without the tuple of Python numbers ``attr`` gives (a
        tree ensemble's node lists, an SVM's support vectors: reading those through tuples
        was most of such a kernel's build)."""
        arr = self.arrays.get(name)
        if arr is None:
            value = self.attrs.get(name)
            if value is None:
                return None
            if isinstance(value, tuple):
                kind = np.int64 if value and all(type(v) is int for v in value) else \
                    np.float32
                arr = np.asarray(value, dtype=dtype or kind)
            else:
                arr = np.asarray(value)
        if dtype is not None and arr.dtype != dtype:
            arr = arr.astype(dtype)
        if arr.flags.writeable:
            arr = arr.view()
            arr.flags.writeable = False
        return arr

    def attr_codes(self, name: str, table: Mapping[str, int]) -> np.ndarray | None:
        """A STRINGS attribute's values mapped through ``table`` (an enumeration: mode names
        to codes), int64, -1 for a value not in it; ``None`` when absent. Long lists are
        matched with numpy on their text, without a lookup an element (a tree ensemble's
        ``nodes_modes``)."""
        attrs = self.attrs
        value = attrs.stored(name) if attrs.__class__ is _Attrs else attrs.get(name)
        if value is None:
            return None
        if value.__class__ is _fast_attrs.StringsAttr:
            return _fast_attrs.attr_codes(value, table)
        return _fast_attrs.string_codes((value,) if isinstance(value, (str, bytes)) else value,
                                        table)

    def input(self, i: int) -> ValueInfo | None:
        """The ``i``-th input, or ``None`` when it is omitted or beyond the node's inputs."""
        return self.inputs[i] if i < len(self.inputs) else None

    def describe_types(self) -> str:
        """``'Conv(float[1,3,224,224], float[64,3,7,7]) -> float[1,64,112,112]'``-style text."""

        def fmt(v: ValueInfo | None) -> str:
            return "-" if v is None else v.describe()

        ins = ", ".join(fmt(v) for v in self.inputs)
        outs = ", ".join(fmt(v) for v in self.outputs)
        return f"{self.qualified_op}({ins}) -> {outs}"


class GraphView:
    """The part of a graph offered to one provider's ``get_capability``.

    ``nodes`` lists the offered nodes (not yet assigned to a higher-priority provider) in
    topological order; :meth:`producer`, :meth:`consumers` and :meth:`node` see the whole
    graph so a provider can look at its neighbours. Valid only during the call: do not keep it.
    """

    def __init__(self, model: Model, offered: Sequence[int]) -> None:
        self._model = model
        self._offered = tuple(offered)
        self._offered_set = frozenset(offered)

    @property
    def nodes(self) -> tuple[NodeView, ...]:
        return tuple(self._model.node_views[i] for i in self._offered)

    @property
    def offered(self) -> frozenset[int]:
        return self._offered_set

    def node(self, index: int) -> NodeView:
        return self._model.node_views[index]

    def value(self, name: str) -> ValueInfo:
        return self._model.value_info(name)

    def producer(self, name: str) -> NodeView | None:
        i = self._model.producer_index.get(name)
        return None if i is None else self._model.node_views[i]

    def consumers(self, name: str) -> tuple[NodeView, ...]:
        return tuple(self._model.node_views[i] for i in self._model.consumer_indices.get(name, ()))

    @property
    def inputs(self) -> tuple[ValueInfo, ...]:
        return tuple(self._model.value_info(v.name) for v in self._model.graph.inputs)

    @property
    def outputs(self) -> tuple[ValueInfo, ...]:
        return tuple(self._model.value_info(v.name) for v in self._model.graph.outputs)

    def opset(self, domain: str = "") -> int | None:
        return self._model.opsets.get(domain)


@dataclass(frozen=True, eq=False, slots=True, weakref_slot=True)
class Subgraph:
    """A claimed group of nodes, handed to ``compile``.

    For a fused group (several nodes), ``inputs`` are the values the group reads from outside
    (graph inputs, initializers and other partitions' outputs), each once, in first-use order;
    ``outputs`` are the values it produces that are read outside the group or are graph
    outputs, and the kernel must return exactly those, in order.

    For a single node, ``inputs`` and ``outputs`` are the node's own, position for position
    (an input read twice appears twice; an omitted optional input or output is ``None``), so
    per-node kernels see ONNX's signature; such a kernel returns at least the outputs up to the
    last named one and may return trailing optional outputs, which are dropped.

    ``layout`` is the layout in which the kernel receives and returns rank-4 non-constant
    tensors (the provider's preferred layout); constants keep ONNX's layout.
    """

    name: str
    nodes: tuple[NodeView, ...]
    inputs: tuple[ValueInfo | None, ...]
    outputs: tuple[ValueInfo | None, ...]
    layout: str = "NCHW"

    @property
    def is_single_node(self) -> bool:
        return len(self.nodes) == 1


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


class _EveryName(frozenset):
    """Every name (``name in it`` always holds): a body's :attr:`Model.declared_shapes`. Its
    values' shapes are inferred from its inputs' declarations, which nothing checks (a Loop
    feeds its carried values, whatever their shape, as onnxruntime's does: tf2onnx writes
    loop-carried tensors declared as scalars), so a contradicting output is logged and kept,
    not an error."""

    def __contains__(self, name: object) -> bool:
        return True


_EVERY_NAME = _EveryName()


class Model:
    """A loaded, validated model: an :class:`onnx_ir.Model` plus the runtime's indexes.

    Use :func:`load_model` to build one. ``nodes`` is the main graph in topological order; a
    node's position there is its index in views, claims and reports.
    """

    declared_shapes: frozenset[str] = frozenset()
    """Names of the values whose type the model file itself declares (the outputs and
    ``value_info`` entries of its graphs, subgraph bodies included, before inference; names are
    unique across a model's scopes): a kernel output contradicting such a
    declaration is logged and returned, as onnxruntime returns it (converters declare some
    shapes wrongly); one contradicting only what inference found is a kernel's error."""

    def __init__(self, model: ir.Model, base_dir: str | None, *, body: ir.Graph | None = None,
                 outer_names: tuple[str, ...] = ()) -> None:
        self.ir = model
        self.base_dir = base_dir
        self._body = body
        self.outer_names = outer_names
        self.reindex()

    def body_model(self, graph: ir.Graph) -> Model:
        """A Model over a subgraph body (If/Loop/Scan attribute) of this model: the body's
        inputs come first, then the outer-scope values it reads (see :attr:`outer_names`)."""
        body = Model(self.ir, self.base_dir, body=graph, outer_names=tuple(_free_names(graph)))
        body.declared_shapes = _EVERY_NAME
        return body

    @property
    def graph(self) -> ir.Graph:
        return self._body if self._body is not None else self.ir.graph

    @property
    def opsets(self) -> dict[str, int]:
        ops = dict(self.ir.opset_imports)
        if "ai.onnx" in ops and "" not in ops:
            ops[""] = ops["ai.onnx"]
        return ops

    def reindex(self, *, structure: bool = True) -> None:
        """Note that the graph changed (optimizer passes): what depends on it is recomputed.
        The node order and the producer/consumer indexes are computed when next read (a
        session's passes change the graph a dozen times and read them once or twice; a
        cycle a pass made is found then). ``structure=False`` when the nodes and their
        wiring are known unchanged (a pass that changed nothing may still have dropped
        initializers or set constant values): only what depends on those is recomputed."""
        if structure:
            self._order: tuple[list[ir.Node], dict[str, int], dict[str, list[int]]] | None \
                = None
            self._op_types: frozenset[str] | None = None   # (the nodes' own: kept otherwise)
        # (the names below too are computed when next read: passes reindex a dozen times;
        # once read, they are plain attributes until the next reindex)
        self._names: tuple[frozenset[str], frozenset[str], tuple[str, ...]] | None = None
        for name in ("overridable", "const_names", "input_names"):
            self.__dict__.pop(name, None)
        self._value_infos: dict[str, ValueInfo] = {}
        self._node_views: list[NodeView] | None = None
        self._inputs_by_name: dict[str, ir.Value] | None = None

    def _named(self) -> tuple[frozenset[str], frozenset[str], tuple[str, ...]]:
        if self._names is None:
            graph = self.graph
            inits = set(graph.initializers)
            listed = {v.name for v in graph.inputs}
            # Before IR 4 every initializer had to be listed as a graph input, and such
            # inputs are constants; from IR 4 on, an initializer that is also an input is a
            # default value a feed may override (onnxruntime's rule).
            overridable = inits & listed if self.ir.ir_version >= 4 else set()
            self._names = (frozenset(overridable), frozenset(inits - overridable),
                           tuple(v.name for v in graph.inputs if v.name not in inits)
                           + self.outer_names)
        return self._names

    @functools.cached_property
    def overridable(self) -> frozenset[str]:
        """Initializers that are also graph inputs (IR 4 on): defaults a feed may override."""
        return self._named()[0]

    @functools.cached_property
    def const_names(self) -> frozenset[str]:
        """Initializers that are constants (not overridable)."""
        return self._named()[1]

    @functools.cached_property
    def input_names(self) -> tuple[str, ...]:
        """The inputs a run is fed: graph inputs that are not initializers, then the
        outer-scope values a body reads (:attr:`outer_names`)."""
        return self._named()[2]

    def order(self) -> None:
        """Compute the node order and indexes now, if the graph changed since (a cycle is
        an InvalidModelError)."""
        self._ordered()

    def _ordered(self) -> tuple[list[ir.Node], dict[str, int], dict[str, list[int]]]:
        if self._order is None:
            # What each node reads, once: both the ordering and the consumer index need it.
            consumed = {id(n): tuple(_consumed_names(n)) for n in self.graph}
            nodes = _topological_order(self.graph, consumed)
            producer_index: dict[str, int] = {}
            consumer_indices: dict[str, list[int]] = {}
            for i, node in enumerate(nodes):
                for out in node.outputs:
                    if out.name:
                        producer_index[out.name] = i
                for name in consumed[id(node)]:
                    lst = consumer_indices.setdefault(name, [])
                    if not lst or lst[-1] != i:
                        lst.append(i)
            self._order = (nodes, producer_index, consumer_indices)
        return self._order

    @property
    def nodes(self) -> list[ir.Node]:
        """The main graph's nodes in topological order (a cycle: InvalidModelError)."""
        return self._ordered()[0]

    @property
    def producer_index(self) -> dict[str, int]:
        """Value name -> index in :attr:`nodes` of the node producing it."""
        return self._ordered()[1]

    @property
    def consumer_indices(self) -> dict[str, list[int]]:
        """Value name -> indexes in :attr:`nodes` of the nodes reading it, ascending."""
        return self._ordered()[2]

    @property
    def op_types(self) -> frozenset[str]:
        """The op types of every node, subgraph bodies included (as of the last reindex)."""
        if self._op_types is None:
            self._op_types = frozenset(n.op_type for n in all_nodes(self.graph))
        return self._op_types

    @property
    def node_views(self) -> list[NodeView]:
        if self._node_views is None:
            opsets = self.opsets
            self._node_views = [self._make_node_view(i, n, opsets)
                                for i, n in enumerate(self.nodes)]
        return self._node_views

    def node_view(self, index: int) -> NodeView:
        """The view of node ``index``, without building every node's view for it (a pass
        that looks at a few nodes between reindexes)."""
        if self._node_views is not None:
            return self._node_views[index]
        return self._make_node_view(index, self.nodes[index], self.opsets)

    def value_info(self, name: str) -> ValueInfo:
        info = self._value_infos.get(name)
        if info is None:
            info = self._make_value_info(self._find_value(name))
            self._value_infos[name] = info
        return info

    def _info_of(self, value: ir.Value) -> ValueInfo:
        """:meth:`value_info` of a value a node of this graph reads or writes, given the value
        itself (the one :meth:`_find_value` finds by its name: onnx-ir links a node to the
        values it reads), without the search by name."""
        info = self._value_infos.get(value.name)
        if info is None:
            info = self._value_infos[value.name] = self._make_value_info(value)
        return info

    def _find_value(self, name: str) -> ir.Value:
        i = self.producer_index.get(name)
        if i is not None:
            for out in self.nodes[i].outputs:
                if out.name == name:
                    return out
        if name in self.graph.initializers:
            return self.graph.initializers[name]
        # (graph inputs by name, indexed once: a search per input made loading a model of
        # many inputs quadratic, 10,000 inputs of a Concat ~26 s; a miss, or an entry gone
        # stale because the inputs changed without a reindex, rebuilds the index once)
        v = (self._inputs_by_name or {}).get(name)
        if v is None or v.name != name or not v.is_graph_input():
            self._inputs_by_name = {v.name: v for v in self.graph.inputs}
            v = self._inputs_by_name.get(name)
        if v is not None and v.name == name and v.is_graph_input():
            return v
        # Outer-scope values read by this graph or its nested bodies (rare; a linear search).
        for v in self.graph.outputs:
            if v.name == name:
                return v
        for node in self.graph.all_nodes():
            for v in node.inputs:
                if v is not None and v.name == name:
                    return v
        raise KeyError(name)

    def _make_value_info(self, value: ir.Value) -> ValueInfo:
        const: np.ndarray | LazyConst | None = None
        tensor = value.const_value
        if value.name in self.const_names and tensor is not None:
            const = LazyConst(tensor) if _is_a(tensor, ir.LazyTensor) \
                else _readonly_array(tensor)
        return make_value_info(value, const)

    def _make_node_view(self, index: int, node: ir.Node, opsets: Mapping[str, int]
                        ) -> NodeView:
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        own = node.metadata_props.get(OPSET_KEY)
        opset = int(own) if own else opsets.get(domain, 1)
        info = self._info_of
        ins = tuple(None if (v is None or not v.name) else info(v) for v in node.inputs)
        outs = tuple(None if not v.name else info(v) for v in node.outputs)
        attrs: dict[str, Any] = {}
        arrays: dict[str, np.ndarray] | None = None
        bodies = False
        stored = node.attributes
        for k, a in getattr(stored, "data", stored).items():   # (see attrs_of)
            kind = a.__class__
            if kind is _fast_attrs.ArrayAttr:
                attrs[k] = a   # (its tuple is built when asked for, see _Attrs)
                arrays = arrays or {}
                arrays[k] = a.array
                continue
            if kind is _fast_attrs.StringsAttr:
                attrs[k] = a   # (likewise; attr_codes reads its text without the tuple)
                arrays = arrays or {}
                continue
            attrs[k] = attr_value(a)
            bodies = bodies or a.type in _BODY_ATTRS
        implicit = tuple(self.value_info(n) for n in _captured_names(node)) if bodies else ()
        return record(NodeView, index=index, name=node.name or "", op_type=node.op_type,
                      domain=domain, opset=opset, inputs=ins, outputs=outs,
                      attrs=MappingProxyType(attrs) if arrays is None else _Attrs(attrs),
                      implicit_inputs=implicit,
                      arrays=_NO_ARRAYS if arrays is None else MappingProxyType(arrays))

    def to_proto(self) -> onnx.ModelProto:
        """Serialize back to a ``ModelProto`` (external tensors stay external)."""
        return ir.serde.serialize_model(self.ir)


def make_value_info(value: ir.Value, const: np.ndarray | LazyConst | None = None
                    ) -> ValueInfo:
    """Build a :class:`ValueInfo` from an onnx-ir value."""
    typ = value.type
    kind, elem = "tensor", None
    if typ is None:
        elem = value.dtype._value_ if value.dtype is not None else None
    elif typ.__class__ is ir.TensorType or _is_a(typ, ir.TensorType):
        elem = typ.dtype._value_   # (an enum's .value is a descriptor call: ~1 us)
    elif _is_a(typ, ir.SequenceType):
        kind = "sequence"
    elif _is_a(typ, ir.OptionalType):
        kind = "optional"
    elif isinstance(typ, _maptype.MapType):
        kind = "map"
    else:
        kind = type(typ).__name__.replace("Type", "").lower()
    if elem == 0:  # TensorProto.UNDEFINED: inference could not tell
        elem = None
    shape: tuple[Dim, ...] | None = None
    if isinstance(const, LazyConst):
        shape = tuple(int(d) for d in value.const_value.shape)
    elif const is not None:
        shape = const.shape   # (numpy's: a tuple of ints already)
    elif value.shape is not None:
        shape = _dims_of(value.shape)
    return record(ValueInfo, name=value.name, elem_type=elem, shape=shape, kind=kind,
                  stored=const, ir_type=None if kind == "tensor" else typ)


_DIMS: dict[int, tuple[ir.Shape, tuple[Dim, ...]]] = {}


def _dims_of(shape: ir.Shape) -> tuple[Dim, ...]:
    """A shape's dims as ValueInfo holds them; a frozen shape's (the loader shares them
    between values) converted once while it lives."""
    if not shape.frozen:
        return tuple(_dim(d) for d in shape)
    hit = _DIMS.get(id(shape))
    if hit is not None and hit[0] is shape:
        return hit[1]
    dims = tuple(_dim(d) for d in shape)
    if len(_DIMS) >= 4096:
        _DIMS.clear()
    _DIMS[id(shape)] = (shape, dims)
    return dims


def _dim(d: Any) -> Dim:
    if isinstance(d, int):
        return d
    v = getattr(d, "value", None)
    return v if isinstance(v, (int, str)) else None


# Types whose raw bytes are the array's (little-endian, one element per item): a stored tensor
# of these is read by np.frombuffer over its bytes, which protobuf hands back read-only.
_RAW_TYPES = {int(t): np.dtype(d).newbyteorder("<") for t, d in (
    (onnx.TensorProto.FLOAT, np.float32), (onnx.TensorProto.DOUBLE, np.float64),
    (onnx.TensorProto.FLOAT16, np.float16), (onnx.TensorProto.INT64, np.int64),
    (onnx.TensorProto.INT32, np.int32), (onnx.TensorProto.INT16, np.int16),
    (onnx.TensorProto.INT8, np.int8), (onnx.TensorProto.UINT8, np.uint8),
    (onnx.TensorProto.BOOL, np.bool_))}


# Types stored element by element in a typed field of the proto (as skl2onnx and onnx's
# helpers write small tensors): (field, numpy type), read as onnx-ir reads them.
_FIELD_TYPES = {int(t): (f, np.dtype(d)) for t, f, d in (
    (onnx.TensorProto.FLOAT, "float_data", np.float32),
    (onnx.TensorProto.DOUBLE, "double_data", np.float64),
    (onnx.TensorProto.INT64, "int64_data", np.int64),
    (onnx.TensorProto.INT32, "int32_data", np.int32))}


_SMALL: dict[int, tuple[ir.TensorProtocol, np.ndarray]] | None = None
_SMALL_ELEMENTS = 4096
_FILE_READS: collections.OrderedDict[tuple[str, int], np.ndarray] | None = None
_FILE_READS_BYTES = 32 << 20
"""At most this much of the weights read from the model file is held for a session build's
other readers (the least recently asked for goes first): it bounds what sharing the reads adds
to the build's peak memory (holding all of them took BERT-base's from 556 to 879 MB), and holds
a QDQ ResNet-50's 25 MB of int8 weights, which its fusions read and its packing reads again."""


@contextlib.contextmanager
def sharing_small_arrays() -> Iterator[None]:
    """While a session is built, :func:`_readonly_array` keeps the arrays of small tensors
    held in protos, by the tensor's identity (each entry keeps its tensor, so the identity
    cannot be reused while it lives): loading, the optimizer's match tests and the node views
    each read a model's shapes, scales and biases (2-7 us a read, several reads a constant).
    The arrays are read-only, so sharing them is safe; nothing is kept afterwards (an entry
    pins its whole model proto). Concurrent builds share one cache; the first one out ends it,
    which only costs the others their hits.

    Weights still in the model file are likewise shared while the session is built
    (:func:`_file_reader`, up to :data:`_FILE_READS_BYTES`): the optimizer's match tests, its
    fusions and the kernels' packing each ask for them, and a QDQ ResNet-50 read its 26 MB of
    weights four times over (25 ms of its creation, mostly the page faults of fresh
    arrays)."""
    global _SMALL, _FILE_READS
    outer = _SMALL
    if outer is None:
        _SMALL, _FILE_READS = {}, collections.OrderedDict()
    try:
        yield
    finally:
        if outer is None:
            _SMALL = _FILE_READS = None


def _readonly_array(tensor: ir.TensorProtocol) -> np.ndarray:
    if type(tensor) is ir.serde.TensorProtoTensor:
        cache = _SMALL
        if cache is not None:
            hit = cache.get(id(tensor))
            if hit is not None and hit[0] is tensor:
                return hit[1]
        arr = _proto_array(tensor.raw)
        if arr is not None:
            if cache is not None and arr.size <= _SMALL_ELEMENTS:
                cache[id(tensor)] = (tensor, arr)
            return arr
    try:
        arr = tensor.read_array() if _is_a(tensor, _FileTensor) else tensor.numpy()
    except OnnxplexError:
        raise
    except Exception as e:  # noqa: BLE001 - onnx-ir: data and shape disagree, file unreadable
        raise InvalidModelError(
            f"tensor {getattr(tensor, 'name', '')!r} cannot be read as its type and shape "
            f"{list(tensor.shape)}: {type(e).__name__}: {e}") from e
    if arr.dtype == object or arr.dtype.kind == "S":
        arr = _decode_strings(arr)
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return canonical_dtype(arr)


def _proto_array(proto: onnx.TensorProto) -> np.ndarray | None:
    """The common case (a model's small weights, biases and shapes, in the proto itself)
    without onnx-ir's general reader (half its ~6 us a tensor); None for the others."""
    if proto.data_location == onnx.TensorProto.EXTERNAL:
        return None
    kind = proto.data_type
    dtype = _RAW_TYPES.get(kind)
    if dtype is not None and proto.HasField("raw_data"):
        raw = proto.raw_data
        dims = tuple(proto.dims)
        if raw and len(raw) == dtype.itemsize * _num_elements(dims):
            return canonical_dtype(np.frombuffer(raw, dtype).reshape(dims))
    elif kind in _FIELD_TYPES:
        name, np_type = _FIELD_TYPES[kind]
        values = getattr(proto, name)
        dims = tuple(proto.dims)
        if values and len(values) == _num_elements(dims):
            arr = np.array(values, np_type).reshape(dims)
            arr.flags.writeable = False
            return arr
    return None


def canonical_dtype(arr: np.ndarray) -> np.ndarray:
    """``arr`` as a view with numpy's own dtype object for its type: ONNX's little-endian
    data read as ``<f4`` equals but is not numpy's ``float32`` object, and a ufunc's result
    takes its first operand's dtype object, so every output computed from a constant would
    fail the executor's dtype-identity test (see ``_executor._step_function``). Other arrays
    (non-native byte order, strings, the ml_dtypes floats) are returned as they are."""
    if arr.dtype.isnative and arr.dtype.kind in "biufc":
        canonical = np.dtype(arr.dtype.type)
        if arr.dtype is not canonical:
            return arr.view(canonical)
    return arr


def _decode_strings(arr: np.ndarray) -> np.ndarray:
    """String tensors as object arrays of ``str`` (ONNX stores bytes), as feeds arrive."""
    flat = [v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v
            for v in arr.reshape(-1).tolist()]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(arr.shape)


_LAZY_ATTRS = (_fast_attrs.ArrayAttr, _fast_attrs.StringsAttr)


class _Attrs(Mapping):
    """:attr:`NodeView.attrs` of a node with long INTS/FLOATS/STRINGS attributes: each of those
    is a tuple of Python numbers or strings when first read (kernels that read the array, or
    the codes of the strings, never build it: a tuple of 10,000 strings also costs the garbage
    collector a pass over 10,000 objects, for as long as the session lives)."""

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def __getitem__(self, name: str) -> Any:
        value = self._values[name]
        if value.__class__ in _LAZY_ATTRS:
            value = self._values[name] = value.value   # (a race builds the same tuple)
        return value

    def stored(self, name: str) -> Any:
        """The value as kept: a long list's attribute object (:mod:`._fast_attrs`) when its
        tuple has not been built."""
        return self._values.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"{{{', '.join(f'{k!r}: ...' for k in self._values)}}}"


def attr_value(attr: ir.Attr) -> Any:
    """An onnx-ir attribute as a plain Python value."""
    convert = _ATTR_VALUES.get(attr.type)
    return attr.value if convert is None else convert(attr.value)


_ATTR_VALUES: dict[ir.AttributeType, Callable[[Any], Any]] = {
    ir.AttributeType.TENSOR: lambda v: _readonly_array(v),
    ir.AttributeType.TENSORS: lambda v: tuple(_readonly_array(x) for x in v),
    **dict.fromkeys((ir.AttributeType.INTS, ir.AttributeType.FLOATS, ir.AttributeType.STRINGS,
                     ir.AttributeType.GRAPHS, ir.AttributeType.TYPE_PROTOS), tuple),
}


def _is_a(obj: Any, cls: type) -> bool:
    """``isinstance(obj, cls)`` for onnx-ir's classes, answered once per type: they are typing
    protocols underneath, whose ``isinstance`` takes ~1 us when it says no (node views ask a
    few times a value)."""
    return _subclass(type(obj), cls)


@functools.cache
def _subclass(kind: type, cls: type) -> bool:
    return issubclass(kind, cls)


def _consumed_names(node: ir.Node) -> Iterator[str]:
    """Names a node reads: its inputs and the outer-scope values its subgraphs capture."""
    for v in node.inputs:
        if v is not None and v.name:
            yield v.name
    yield from _captured_names(node)


def _captured_names(node: ir.Node) -> list[str]:
    """Outer-scope values read inside the subgraphs of ``node`` (If/Loop/Scan bodies)."""
    names: list[str] = []
    for attr in attrs_of(node):
        graphs: Sequence[ir.Graph] = ()
        if attr.type == ir.AttributeType.GRAPH:
            graphs = (attr.value,)
        elif attr.type == ir.AttributeType.GRAPHS:
            graphs = tuple(attr.value)
        for g in graphs:
            names.extend(_free_names(g))
    return names


def _free_names(graph: ir.Graph) -> list[str]:
    local = {v.name for v in graph.inputs} | set(graph.initializers)
    free: list[str] = []
    for node in graph:
        for name in _consumed_names(node):
            if name not in local and name not in free:
                free.append(name)
        local.update(o.name for o in node.outputs)
    for o in graph.outputs:
        if o.name not in local and o.name not in free:
            free.append(o.name)
    return free


def _topological_order(graph: ir.Graph,
                       consumed: Mapping[int, Sequence[str]] | None = None) -> list[ir.Node]:
    """Kahn's algorithm, stable with respect to file order; a cycle is an InvalidModelError.
    ``consumed`` maps ``id(node)`` to the names it reads when the caller has them."""
    nodes = list(graph)
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.outputs:
            if o.name:
                producer[o.name] = i
    # Files list their nodes in order (ONNX asks for it): then that order is the answer
    # (Kahn's below, smallest index first, returns it too), found in one walk.
    for i, n in enumerate(nodes):
        names = consumed[id(n)] if consumed is not None else _consumed_names(n)
        if any(producer.get(name, -1) >= i for name in names):
            break
    else:
        return nodes
    deps: list[set[int]] = []
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        names = consumed[id(n)] if consumed is not None else _consumed_names(n)
        d = {producer[name] for name in names if name in producer}
        deps.append(d)
        for j in d:
            users[j].append(i)
    pending = [len(d) for d in deps]

    ready = [i for i, c in enumerate(pending) if c == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in users[i]:
            pending[j] -= 1
            if pending[j] == 0:
                heapq.heappush(ready, j)
    if len(order) != len(nodes):
        stuck = [nodes[i] for i, c in enumerate(pending) if c > 0][:5]
        desc = ", ".join(f"{n.op_type} '{n.name}'" for n in stuck)
        raise as_status(InvalidModelError, Fail)(   # (onnxruntime: FAIL, "not acyclic")
            f"the graph has a cycle; nodes on or after it include: {desc}")
    return [nodes[i] for i in order]


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


class Overrides(NamedTuple):
    """What a session's options change in a model as it is loaded (onnxruntime's
    ``SessionOptions.add_initializer`` / ``add_external_initializers`` and
    ``add_free_dimension_override_by_name`` / ``_by_denotation``)."""

    initializers: Mapping[str, np.ndarray] = MappingProxyType({})
    """Main-graph initializers replaced by these arrays (names the model lacks: ignored)."""
    dims_by_name: Mapping[str, int] = MappingProxyType({})
    dims_by_denotation: Mapping[str, int] = MappingProxyType({})
    files: Mapping[str, bytes] = MappingProxyType({})
    """External data files given in memory (``add_external_initializers_from_files_in_memory``),
    by the location the initializers name."""

    def __bool__(self) -> bool:
        return bool(self.initializers or self.dims_by_name or self.dims_by_denotation
                    or self.files)


def load_model(source: str | os.PathLike[str] | bytes | onnx.ModelProto | Model,
               *, infer_shapes: bool = True, overrides: Overrides | None = None,
               strict_shapes: bool = False) -> Model:
    """Load, validate and shape-annotate a model from a path, serialized bytes or a ModelProto.

    External data is resolved relative to the model file's folder; models given as bytes or
    as a ModelProto may only use external data when their tensors are already loaded.
    Declared shapes that contradict the nodes are merged with a warning, as onnxruntime
    does by default; ``strict_shapes`` refuses such a model (onnxruntime's
    ``session.strict_shape_type_inference=1``).
    Raises :class:`InvalidModelError` (or a subclass) naming what is wrong.
    """
    if isinstance(source, Model):
        return source
    base_dir: str | None = None
    split: _wire.Split | None = None
    serialized: bytes | None = None   # proto's bytes, for shape inference to parse
    if isinstance(source, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(source)
    elif isinstance(source, (bytes, bytearray, memoryview)):
        serialized = bytes(source)
        proto = _parse(serialized, "<bytes>")
        # (read through the module, as inference reads it: one setting reaches both)
        if len(serialized) > _inference._INFER_COPY_MIN_BYTES:
            serialized = None
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        base_dir = os.path.dirname(os.path.abspath(path))
        try:
            split = _split_weights(path, base_dir)
            if split is not None:
                data = split.proto_bytes
            else:
                with open(path, "rb") as f:
                    data = f.read()
        except FileNotFoundError:
            raise as_status(InvalidModelError, NoSuchFile)(
                f"model file not found: {path!r}") from None
        except IsADirectoryError:
            raise as_status(InvalidModelError, InvalidProtobuf)(
                f"model path is a directory, not a file: {path!r}") from None
        except OSError as e:
            raise InvalidModelError(f"cannot read model file {path!r}: {e}") from e
        proto = _parse(data, path)
        if len(data) <= _inference._INFER_COPY_MIN_BYTES:
            serialized = data   # (a larger one gets a lighter copy for inference)
        del data
    else:
        raise InvalidModelError(
            f"cannot load a model from {type(source).__name__}; "
            "give a path, bytes or an onnx.ModelProto"
        )
    if overrides:
        _override(proto, overrides)
        serialized = None   # (inference reads the changed proto)
    return load_proto(proto, base_dir, infer_shapes=infer_shapes, split=split,
                      serialized=serialized, strict_shapes=strict_shapes)


def _drop_mistyped_initializer_infos(g: onnx.GraphProto) -> bool:
    """Remove the ``value_info`` entries that give an initializer an element type other than
    its own (onnxruntime types an initializer by its tensor; onnxruntime's float16 converter
    leaves such entries behind when it keeps a Resize's scales in float32, which onnx's
    inference then refused as a contradiction). Whether any was removed."""
    if not g.initializer or not g.value_info:
        return False
    own = {t.name: t.data_type for t in g.initializer}
    bad = [k for k, info in enumerate(g.value_info)
           if info.name in own and info.type.WhichOneof("value") == "tensor_type"
           and info.type.tensor_type.elem_type not in (0, own[info.name])]
    for k in reversed(bad):
        logger.warning("value_info gives initializer %r type %s, its tensor is %s: the "
                       "tensor's type is kept, as onnxruntime keeps it", g.value_info[k].name,
                       elem_type_name(g.value_info[k].type.tensor_type.elem_type),
                       elem_type_name(own[g.value_info[k].name]))
        del g.value_info[k]
    return bool(bad)


def _override(proto: onnx.ModelProto, overrides: Overrides) -> None:
    """``overrides`` applied to the main graph of ``proto``: initializers replaced by the
    given arrays (which must have the replaced one's type and shape; an external one's file is
    then not read), symbolic dimensions of the inputs, outputs and value infos named (or, on
    the inputs, denoted) as given made those sizes."""
    g = proto.graph
    if overrides.files:
        for t in g.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                _read_from_memory(t, overrides.files)
    given = overrides.initializers
    for t in g.initializer:
        arr = given.get(t.name)
        if arr is None:
            continue
        want = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
        if arr.dtype != want or tuple(arr.shape) != tuple(t.dims):
            raise InvalidArgumentError(
                f"the initializer given for {t.name!r} is {arr.dtype} {list(arr.shape)}; the "
                f"model's is {np.dtype(want)} {list(t.dims)}")
        t.CopyFrom(onnx.numpy_helper.from_array(np.ascontiguousarray(arr), t.name))
    by_name, by_denotation = overrides.dims_by_name, overrides.dims_by_denotation
    if not (by_name or by_denotation):
        return
    for k, infos in enumerate((g.input, g.output, g.value_info)):
        for info in infos:
            if not info.type.HasField("tensor_type"):
                continue
            for d in info.type.tensor_type.shape.dim:
                size = by_name.get(d.dim_param) if d.HasField("dim_param") else None
                if size is None and k == 0 and d.denotation:
                    size = by_denotation.get(d.denotation)
                if size is not None:
                    d.dim_value = size


def _split_weights(path: str, base_dir: str) -> _wire.Split | None:
    """The file's large weights cut out of the proto (:mod:`._wire`), when it is a regular
    file inside its folder (a model reached through a symlink from elsewhere is read whole)."""
    real, root = os.path.realpath(path), os.path.realpath(base_dir)
    if not os.path.isfile(real):
        return None
    if os.path.commonpath([real, root]) != root:
        logger.info("%s resolves to %s, outside its folder %s: its weights are read whole "
                    "into memory, not from the file on demand (give the file's real path "
                    "to load them lazily)", path, real, root)
        return None
    return _wire.split_weights(real, os.path.relpath(real, root))


def load_proto(proto: onnx.ModelProto, base_dir: str | None, *,
               infer_shapes: bool = True, split: _wire.Split | None = None,
               serialized: bytes | None = None, strict_shapes: bool = False) -> Model:
    """Validate and load a parsed ModelProto whose external data lives in ``base_dir``
    (``split``: the weights :func:`._wire.split_weights` cut out of the model file;
    ``serialized``: the bytes ``proto`` was parsed from, if at hand)."""
    _maptype.install()
    _fast_attrs.install()
    walked = _walk(proto)
    if _densify_sparse(walked):   # (sparse initializers and Constants become dense ones)
        walked, serialized = _walk(proto), None
    if _check_versions(proto, walked):   # (an implied opset import was added)
        serialized = None   # (inference reads the changed proto)
    _check_schemas(proto, walked)
    _check_function_calls(proto, walked)   # (before inlining: a recursive one never ends)
    if proto.functions and inline_calls_in_bodies(proto):
        walked, serialized = _walk(proto), None   # (inference reads the changed proto)
    _check_control_flow(proto, walked)
    if _negative_dims_unknown(walked):
        serialized = None   # (inference reads the changed proto)
    external = _check_tensors(walked, base_dir)
    _check_structure(walked.graph, outer=set())
    big: list[onnx.TensorProto] = []
    declared: set[str] = set()
    file_declared = frozenset(v.name for g in walked.graphs()
                              for infos in (g.proto.output, g.proto.value_info) for v in infos)
    if infer_shapes:
        if _drop_mistyped_initializer_infos(proto.graph):
            serialized = None   # (inference reads the changed proto)
        if (serialized is None or b"unk__" in serialized) and _forget_generated_dims(proto):
            serialized = None   # (inference reads the changed proto)
        proto, big, declared = _infer_shapes(proto, serialized, walked.graph.nodes,
                                             strict=strict_shapes)
    try:
        model = _deserialize(proto)
        _check_value_shapes(model.graph)
        _resolve_reshape_dims(model.graph)
        _widen_old_if_outputs(model)
        _attach_initializers(model, big, declared)
        if base_dir is not None:
            if split is not None:
                _read_split_weights(model, base_dir, split)
            if external > (len(split.offsets) if split is not None else 0):
                # external data of the model's own, beside the weights cut out of its file
                ir.external_data.set_base_dir(model.graph, base_dir)
                _read_external_weights(model, base_dir)
        loaded = Model(model, base_dir)
        loaded.declared_shapes = file_declared
        # loaded.nodes orders the graph: a cycle is refused there, by name
        bodies = any(a.bodies for n in walked.graph.nodes for a in n.attrs)
        if list(model.graph) != loaded.nodes or (bodies and _unsorted_bodies(model.graph)):
            # ONNX wants nodes in topological order and onnx-ir's passes rely on it; a
            # file that lists them otherwise is put in order (onnxruntime accepts such files)
            model.graph.sort()
            loaded.reindex()
        for node in loaded.nodes:   # attribute values are read (and may fail) here, not later
            for a in attrs_of(node):
                if a.__class__ not in _LAZY_ATTRS:   # (read: they cannot fail)
                    attr_value(a)
    except InvalidModelError:
        raise
    except Exception as e:  # noqa: BLE001 - onnx-ir raises assorted errors on malformed protos
        raise InvalidModelError(f"the model could not be read into the graph: "
                                f"{type(e).__name__}: {e}") from e
    return loaded


_SPARSE_TENSOR = onnx.AttributeProto.SPARSE_TENSOR


def _densify_sparse(walked: _Walked) -> bool:
    """Sparse initializers (``graph.sparse_initializer``) made dense initializers, and
    ``Constant(sparse_value=...)`` a ``Constant(value=...)``, in every graph of the model, as
    onnxruntime makes them dense when it loads a model (its kernels read dense tensors).
    Whether anything changed."""
    changed = False
    for g in walked.graphs():
        if g.proto.sparse_initializer:
            for sp in g.proto.sparse_initializer:
                g.proto.initializer.append(_dense(sp, g.where))
            del g.proto.sparse_initializer[:]
            changed = True
        for node in g.nodes:
            if node.op_type != "Constant" or not any(a.kind == _SPARSE_TENSOR
                                                     for a in node.attrs):
                continue
            for a in list(node.proto.attribute):
                if a.type == _SPARSE_TENSOR and a.name == "sparse_value":
                    dense = _dense(a.sparse_tensor, f"{g.where}: Constant {node.name!r}")
                    node.proto.attribute.remove(a)
                    node.proto.attribute.append(onnx.helper.make_attribute("value", dense))
                    changed = True
    return changed


def _dense(sp: onnx.SparseTensorProto, where: str) -> onnx.TensorProto:
    """The dense tensor of a sparse one (COO: linear indices [NNZ] or coordinates
    [NNZ, rank]); raises :class:`InvalidModelError` for indices outside its shape."""
    name = sp.values.name
    try:
        values = onnx.numpy_helper.to_array(sp.values).reshape(-1)
        indices = onnx.numpy_helper.to_array(sp.indices).astype(np.int64)
    except Exception as e:  # noqa: BLE001 - malformed sparse tensors raise assorted errors
        raise InvalidModelError(f"{where}: sparse tensor {name!r} cannot be read: {e}") from e
    dims = tuple(int(d) for d in sp.dims)
    check_tensor_size(dims, sp.values.data_type, f"{where}: sparse tensor {name!r}")
    size = int(np.prod(dims)) if dims else 1
    if indices.ndim == 2 and indices.shape[1] == len(dims) and len(dims) > 1:
        bad = (indices < 0) | (indices >= np.array(dims, np.int64))
        if bad.any():
            raise InvalidModelError(f"{where}: sparse tensor {name!r} has indices outside its "
                                    f"shape {list(dims)}")
        indices = np.ravel_multi_index(tuple(indices.T), dims) if indices.size else \
            np.zeros(0, np.int64)
    indices = indices.reshape(-1)
    if indices.size != values.size or (indices.size and (indices.min() < 0
                                                         or indices.max() >= size)):
        raise InvalidModelError(
            f"{where}: sparse tensor {name!r} has {values.size} values and {indices.size} "
            f"indices, or indices outside its {size} elements")
    dense = np.zeros(size, dtype=values.dtype) if values.dtype != object else \
        np.full(size, b"", dtype=object)
    dense[indices] = values
    return onnx.numpy_helper.from_array(dense.reshape(dims), name)


def _read_from_memory(t: onnx.TensorProto, files: Mapping[str, bytes]) -> None:
    """An external-data initializer whose file was given in memory, made an ordinary one from
    the bytes its offset and length select there."""
    info = {e.key: e.value for e in t.external_data}
    data = files.get(os.path.normpath(info.get("location", "")))
    if data is None:
        return
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else len(data) - offset
    except ValueError:
        raise ExternalDataError(f"tensor {t.name!r}: external data offset/length is not a "
                                "number") from None
    if offset < 0 or length < 0 or offset + length > len(data):
        raise ExternalDataError(
            f"tensor {t.name!r}: bytes {offset}..{offset + length} lie outside the "
            f"{len(data)} bytes given in memory for {info.get('location')!r}")
    t.raw_data = data[offset:offset + length]
    del t.external_data[:]
    t.data_location = onnx.TensorProto.DEFAULT


def _widen_old_if_outputs(model: ir.Model) -> None:
    """An If of opsets 1-10 whose branches make differently shaped outputs: onnx's inference
    of that version gives the output the then-branch's shape merged with the else-branch's
    (its spec wanted them equal), so ``[?]`` and ``[1]`` make ``[1]`` although the then branch
    computes ``[3]``. onnxruntime runs such models (tf2onnx writes them from a tf.cond); here
    the output's shape becomes what both branches allow (a dimension they disagree on unknown,
    no shape if their ranks differ) and the shapes inference drew from it further on in the
    main graph are dropped, so that the run's checks do not refuse what the model computes."""
    if model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0)) >= 11:
        return
    graph = model.graph
    widened: list[ir.Value] = []
    for node in graph:
        if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
            continue
        then, other = node.attributes.get("then_branch"), node.attributes.get("else_branch")
        if then is None or other is None:
            continue
        for k, out in enumerate(node.outputs):
            if out.shape is None or k >= len(then.value.outputs) or k >= len(other.value.outputs):
                continue
            a, b = then.value.outputs[k].shape, other.value.outputs[k].shape
            union = _shape_union(a, b)
            if union != out.shape:
                out.shape = union
                widened.append(out)
    seen = {id(v) for v in widened}
    while widened:   # (values computed from a widened one: their inferred shapes go too)
        for use in widened.pop().uses():
            for v in use.node.outputs:
                if id(v) not in seen and v.shape is not None and not v.is_graph_output():
                    seen.add(id(v))
                    v.shape = None
                    widened.append(v)


def _shape_union(a: ir.Shape | None, b: ir.Shape | None) -> ir.Shape | None:
    """The shape both ``a`` and ``b`` fit: equal fixed dimensions kept, others unknown."""
    if a is None or b is None or len(a) != len(b):
        return None
    return ir.Shape([x if x == y else None for x, y in zip(a, b)])


def _resolve_reshape_dims(graph: ir.Graph) -> None:
    """Give a size to the dimension onnx's inference named ``unk__<n>`` at a Reshape whose
    other dimensions account for its input's: ``[B, S, 256] -> [B, S, -1, 64]`` with B and S
    the same symbols on both sides makes the unknown 4 (the element counts are equal), and that
    size replaces the name wherever inference carried it (through the Transposes after it).
    An eager attention export reshapes Q, K and V so; inference named each head count anew,
    and the attention fusion, which requires Q's and K's heads to be the same, missed every
    layer."""
    sizes: dict[str, int] = {}
    for node in graph:
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or not node.inputs:
            continue
        x, y = node.inputs[0], node.outputs[0]
        if x is None or x.shape is None or y.shape is None:
            continue
        had = {d.value for d in x.shape if not isinstance(d, int)}
        unknown = [d.value for d in y.shape if not isinstance(d, int)
                   and isinstance(d.value, str) and d.value.startswith("unk__")
                   and d.value not in had]
        if len(unknown) != 1 or unknown[0] in sizes:
            continue
        counts = []
        for dims, skip in ((x.shape, None), (y.shape, unknown[0])):
            product, names = 1, collections.Counter()
            for d in dims:
                if isinstance(d, int):
                    product *= d
                elif d.value is None:
                    break   # (a dimension of no name: nothing to cancel it against)
                elif d.value != skip:
                    names[d.value] += 1
            else:
                counts.append((product, names))
                continue
            break
        if len(counts) == 2 and counts[0][1] == counts[1][1] and counts[1][0] \
                and counts[0][0] % counts[1][0] == 0:
            sizes[unknown[0]] = counts[0][0] // counts[1][0]
    if not sizes:
        return
    for node in graph:
        for v in node.outputs:
            if v is not None and v.shape is not None and any(
                    not isinstance(d, int) and d.value in sizes for d in v.shape):
                v.shape = ir.Shape([sizes.get(d.value, d) if not isinstance(d, int) else d
                                    for d in v.shape])


def _forget_generated_dims(proto: onnx.ModelProto) -> bool:
    """Clear the main graph's intermediate ``value_info`` dimensions named as onnx's shape
    inference names the dimensions it cannot relate (``unk__<n>``): a model saved after an
    inference run (converters' tools run one) carries a fresh name per value, where inference
    from the nodes relates them (the sequence length of every layer's activations); the
    fusions compare those names. Whether any was cleared."""
    changed = False
    for vi in proto.graph.value_info:
        if not vi.type.HasField("tensor_type"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            name = d.dim_param
            if name.startswith("unk__") and name[5:].isdigit():
                d.ClearField("dim_param")
                changed = True
    return changed


def _deserialize(proto: onnx.ModelProto) -> ir.Model:
    """The model in onnx-ir objects: its main graph read by :mod:`._fast_read` when it can,
    by ``ir.serde.deserialize_model`` otherwise. Either way the main graph's ``value_info``
    (what shape inference found for every value) is read here: onnx-ir reads each entry
    through a dozen calls (~10 us; thousands of values in a transformer), and torch's exporter
    also lists every initializer there, whose tensor already tells its type and shape. Tensor
    types are read in one loop, equal shapes shared (frozen, as onnx-ir makes them); other
    kinds of types (and entries with denotations or metadata) still go through onnx-ir.
    Empties the proto's ``value_info`` (the caller's copy, made for loading)."""
    g = proto.graph
    skip = {t.name for t in g.initializer}
    skip.update(v.name for v in g.output)   # (their declared types win, as in onnx-ir)
    typed, rest = _fast_read.split_value_info(g, skip, copy=True)   # (the list goes below)
    g.ClearField("value_info")
    model = _fast_read.read_model(proto, typed, rest)
    if model is not None:
        return model
    model = ir.serde.deserialize_model(proto)
    if not typed and not rest:
        return model
    types = _fast_read.Types()
    for node in model.graph:
        for value in node.outputs:
            found = typed.get(value.name)
            if found is not None:
                types.apply(value, found)
            elif value.name in rest:
                ir.serde.deserialize_value_info_proto(rest[value.name], value)
    return model


def _read_split_weights(model: ir.Model, base_dir: str, split: _wire.Split) -> None:
    """The initializers :func:`._wire.split_weights` cut out become tensors read from the
    model file on demand, each time into a new array (nothing is kept: the consumers decide
    what stays in memory; see :class:`LazyConst`)."""
    path = os.path.join(base_dir, split.location)
    st = os.stat(path)
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    for value in model.graph.initializers.values():
        t = value.const_value
        if (not isinstance(t, ir.ExternalTensor) or t.location != split.location
                or t.offset not in split.offsets):
            continue
        value.const_value = _FileTensor(
            _file_reader(path, stamp, t.name, t.offset, tuple(t.shape.numpy()), t.dtype),
            t.dtype, t.shape, name=t.name, doc_string=t.doc_string)


def _read_external_weights(model: ir.Model, base_dir: str) -> None:
    """The main graph's initializers stored as external data become tensors read from their
    file on demand (:class:`_FileTensor`, as the weights cut out of the model file are)
    instead of onnx-ir's memory-mapped ones: a mapped file truncated or rewritten while a
    session lives kills the process with SIGBUS at the next read of a weight, where a read
    finds the change and says so. Sub-byte types (packed 4-bit and 2-bit data) stay
    onnx-ir's."""
    stamps: dict[str, tuple[int, int, int]] = {}
    for value in model.graph.initializers.values():
        t = value.const_value
        if not isinstance(t, ir.ExternalTensor) or t.dtype.bitwidth != \
                8 * np.dtype(t.dtype.numpy()).itemsize:
            continue
        path = os.path.join(base_dir, t.location)
        if path not in stamps:
            try:
                st = os.stat(path)
            except OSError:
                continue   # (reading it reports the problem, as before)
            stamps[path] = (st.st_ino, st.st_size, st.st_mtime_ns)
        value.const_value = _FileTensor(
            _file_reader(path, stamps[path], t.name, t.offset or 0, tuple(t.shape.numpy()),
                         t.dtype), t.dtype, t.shape, name=t.name, doc_string=t.doc_string)


class _FileTensor(ir.LazyTensor):
    """A weight still in the model file. onnx-ir reads it as a tensor, like any LazyTensor;
    the runtime (:func:`_readonly_array`) reads the array alone, without the tensor wrapper
    and its checks (a few microseconds a weight, hundreds of weights a session)."""

    __slots__ = ("read_array",)

    def __init__(self, read_array: Callable[[], np.ndarray], dtype: ir.DataType,
                 shape: ir.Shape, *, name: str, doc_string: str | None) -> None:
        super().__init__(lambda: ir.Tensor(read_array(), dtype=dtype, name=name), dtype, shape,
                         name=name, doc_string=doc_string)
        self.read_array = read_array


def _file_reader(path: str, stamp: tuple[int, int, int], name: str, offset: int,
                 shape: tuple[int, ...], dtype: ir.DataType) -> Callable[[], np.ndarray]:
    np_type = dtype.numpy()

    def read() -> np.ndarray:
        held = _FILE_READS   # (a session build in progress: see sharing_small_arrays)
        if held is None:
            return read_now()
        key = (path, offset)
        arr = held.get(key)
        if arr is not None:
            held.move_to_end(key)
            return arr
        arr = read_now()
        if arr.nbytes <= _FILE_READS_BYTES:
            arr.flags.writeable = False   # (shared by the build's readers)
            held[key] = arr
            total = sum(a.nbytes for a in held.values())
            while total > _FILE_READS_BYTES:
                total -= held.popitem(last=False)[1].nbytes
        return arr

    def read_now() -> np.ndarray:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
        try:
            st = os.fstat(fd)
            if (st.st_ino, st.st_size, st.st_mtime_ns) != stamp:
                raise InvalidModelError(
                    f"the file {path!r} changed after the model was loaded; its weight {name!r} "
                    "can no longer be read (load the model again)")
            return _wire.pread_tensor(fd, offset, shape, np_type)
        finally:
            os.close(fd)

    return read


for _name, _bits in (("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2), ("FLOAT6E2M3", 6),
                     ("FLOAT6E3M2", 6)):
    if hasattr(onnx.TensorProto, _name):
        _SUB_BYTE_BITS[getattr(onnx.TensorProto, _name)] = _bits


"""onnx's type-constraint messages (``check_type``) about a node's inputs: one of a type
outside the op's constraint, or two bound to one type variable with different types (as
onnxruntime refuses them). An output type onnx's inference derives outside the constraint
(LayerNormalization's Mean for stash_type double, say) is left to the lenient retry."""


