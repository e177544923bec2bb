"""The in-memory graph: loading, validating and viewing an ONNX model.

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
import contextvars
import functools
import heapq
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np
import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from .._dtypes import elem_type_name, np_dtype, ort_type_string, type_string
from .._errors import (
    ExternalDataError,
    Fail,
    InvalidArgument,
    InvalidArgumentError,
    InvalidModelError,
    InvalidProtobuf,
    NoSuchFile,
    OnnxplexError,
    TensorSizeError,
    UnsupportedModelError,
    as_status,
)
from .._records import record
from . import contrib_shapes as _contrib_shapes
from . import fast_attrs as _fast_attrs
from . import fast_read as _fast_read
from . import maptype as _maptype
from . import wire as _wire

__all__ = ["Model", "load_model", "load_proto", "ValueInfo", "NodeView", "GraphView",
           "Subgraph"]

logger = logging.getLogger(__name__)

OPSET_KEY = "onnxplex.opset"
"""Node metadata key: the opset version of a node whose version differs from the model's
import (nodes of a function body written for another opset, after expansion)."""

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


class Model:
    """A loaded, validated model: an :class:`onnx_ir.Model` plus the runtime's indexes.

    Use :func:`load_model` to build one. ``nodes`` is the main graph in topological order; a
    node's position there is its index in views, claims and reports.
    """

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
        return Model(self.ir, self.base_dir, body=graph, outer_names=tuple(_free_names(graph)))

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
               *, infer_shapes: bool = True, overrides: Overrides | None = None) -> Model:
    """Load, validate and shape-annotate a model from a path, serialized bytes or a ModelProto.

    External data is resolved relative to the model file's folder; models given as bytes or
    as a ModelProto may only use external data when their tensors are already loaded.
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
        if len(serialized) > _INFER_COPY_MIN_BYTES:
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
        if len(data) <= _INFER_COPY_MIN_BYTES:
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
                      serialized=serialized)


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
    if not os.path.isfile(real) or os.path.commonpath([real, root]) != root:
        return None
    return _wire.split_weights(real, os.path.relpath(real, root))


def load_proto(proto: onnx.ModelProto, base_dir: str | None, *,
               infer_shapes: bool = True, split: _wire.Split | None = None,
               serialized: bytes | None = None) -> Model:
    """Validate and load a parsed ModelProto whose external data lives in ``base_dir``
    (``split``: the weights :func:`._wire.split_weights` cut out of the model file;
    ``serialized``: the bytes ``proto`` was parsed from, if at hand)."""
    _maptype.install()
    _fast_attrs.install()
    walked = _walk(proto)
    if _densify_sparse(walked):   # (sparse initializers and Constants become dense ones)
        walked, serialized = _walk(proto), None
    _check_versions(proto, walked)
    _check_schemas(proto, walked)
    _check_function_calls(proto, walked)
    _check_control_flow(proto, walked)
    _check_input_dims(proto)
    external = _check_tensors(walked, base_dir)
    _check_structure(walked.graph, outer=set())
    big: list[onnx.TensorProto] = []
    declared: set[str] = set()
    if infer_shapes:
        if (serialized is None or b"unk__" in serialized) and _forget_generated_dims(proto):
            serialized = None   # (inference reads the changed proto)
        proto, big, declared = _infer_shapes(proto, serialized, walked.graph.nodes)
    try:
        model = _deserialize(proto)
        _check_value_shapes(model.graph)
        _attach_initializers(model, big, declared)
        if base_dir is not None:
            if split is not None:
                _read_split_weights(model, base_dir, split)
            if external > (len(split.offsets) if split is not None else 0):
                # external data of the model's own, beside the weights cut out of its file
                ir.external_data.set_base_dir(model.graph, base_dir)
                _read_external_weights(model, base_dir)
        loaded = Model(model, base_dir)
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


_BODY_ATTRS = (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)


def attrs_of(node: ir.Node) -> Iterable[ir.Attr]:
    """``node.attributes.values()``, read from the plain dict underneath when onnx-ir's
    attribute map is a ``UserDict`` (its ``values()`` goes through the ``Mapping`` mixin, a
    method call per item: a session's passes walk every node's attributes several times)."""
    attrs = node.attributes
    return getattr(attrs, "data", attrs).values()


def all_nodes(graph: ir.Graph) -> list[ir.Node]:
    """``graph.all_nodes()`` (subgraph bodies included) as a list; for a graph without bodies
    (the common case) its own nodes, without onnx-ir's recursive iterator (~2 us a node: a
    session's optimizer walks a MobileNetV2's 100 nodes a dozen times)."""
    nodes = list(graph)
    if not has_bodies(nodes):
        return nodes
    out: list[ir.Node] = []
    _collect_nodes(nodes, out)
    return out


def _collect_nodes(nodes: Iterable[ir.Node], out: list[ir.Node]) -> None:
    """Depth first, each node before its bodies' nodes (onnx-ir's ``all_nodes`` order)."""
    for node in nodes:
        out.append(node)
        for a in attrs_of(node):
            if a.type == ir.AttributeType.GRAPH and a.value is not None:   # (not a RefAttr)
                _collect_nodes(a.value, out)
            elif a.type == ir.AttributeType.GRAPHS and a.value is not None:
                for body in a.value:
                    _collect_nodes(body, out)


def has_bodies(nodes: Iterable[ir.Node]) -> bool:
    """Whether one of ``nodes`` holds a subgraph (an If's branches, a Loop's body)."""
    return any(a.type in _BODY_ATTRS for n in nodes for a in attrs_of(n))


def _unsorted_bodies(graph: ir.Graph) -> bool:
    """True when a subgraph body somewhere in ``graph`` lists a node before its producer."""
    for node in all_nodes(graph):
        for attr in attrs_of(node):
            bodies = ((attr.value,) if attr.type == ir.AttributeType.GRAPH
                      else tuple(attr.value) if attr.type == ir.AttributeType.GRAPHS else ())
            for body in bodies:
                seen = {v.name for v in body.inputs} | set(body.initializers)
                for n in body:
                    local = [v.name for v in n.inputs if v is not None and v.producer() is not None
                             and v.producer().graph is body]
                    if any(name not in seen for name in local):
                        return True
                    seen.update(o.name for o in n.outputs)
    return False


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    if not data:
        raise as_status(InvalidModelError, InvalidArgument)(
            f"{where}: the model is empty (0 bytes)")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        if "MaxDepth" in str(e) or "recursion" in str(e).lower():
            raise as_status(InvalidModelError, InvalidProtobuf)(
                f"{where}: messages are nested too deeply to parse ({e}); subgraphs nested "
                "this deep are refused") from e
        raise as_status(InvalidModelError, InvalidProtobuf)(
            f"{where}: not a valid ONNX model (protobuf parse failed: {e}); "
            "the file may be truncated or not an .onnx file"
        ) from e
    if not proto.HasField("graph") or (not proto.graph.node and not proto.graph.output):
        raise InvalidModelError(f"{where}: parsed, but holds no graph; is it an ONNX model?")
    return proto


class _Node(NamedTuple):
    """A node's fields, read out of protobuf once (each read of a protobuf field makes a new
    Python object; the load's checks would otherwise read every node several times)."""

    op_type: Any   # str, or bytes where protobuf found no UTF-8 text
    domain: Any
    name: Any
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]
    attrs: tuple[_Attr, ...]
    proto: onnx.NodeProto


class _Attr(NamedTuple):
    name: Any
    kind: int                               # its AttributeProto type
    tensors: tuple[onnx.TensorProto, ...]   # its TENSOR value, or its TENSORS
    bodies: tuple[_Graph, ...]              # its GRAPH value, or its GRAPHS


class _Graph(NamedTuple):
    proto: onnx.GraphProto
    where: str
    depth: int
    nodes: tuple[_Node, ...]


class _Walked(NamedTuple):
    graph: _Graph
    functions: tuple[tuple[_Node, ...], ...]   # model-local functions' nodes

    def graphs(self) -> Iterator[_Graph]:
        """The main graph and every subgraph body in it, outer before inner."""
        return _graphs_from([self.graph])

    def tensors(self) -> Iterator[onnx.TensorProto]:
        """Every tensor stored in the model: initializers and tensor attributes of the graph,
        of its nested subgraphs and of its model-local functions (and their bodies)."""
        bodies = [b for nodes in self.functions for n in nodes for a in n.attrs
                  for b in a.bodies]
        for nodes in self.functions:
            for n in nodes:
                for a in n.attrs:
                    yield from a.tensors
        for g in _graphs_from([self.graph, *bodies]):
            yield from g.proto.initializer
            for sp in g.proto.sparse_initializer:
                yield sp.values
                yield sp.indices
            for n in g.nodes:
                for a in n.attrs:
                    yield from a.tensors


def _graphs_from(roots: list[_Graph]) -> Iterator[_Graph]:
    stack = list(reversed(roots))
    while stack:
        g = stack.pop()
        yield g
        stack.extend(b for n in reversed(g.nodes) for a in reversed(n.attrs)
                     for b in reversed(a.bodies))


_MAX_DEPTH = 64   # subgraphs nested deeper are refused


def _walk(proto: onnx.ModelProto) -> _Walked:
    """The model's nodes, subgraph bodies and functions, read once for the load's checks."""
    return _Walked(_walk_graph(proto.graph, "main graph", 0),
                   tuple(_walk_nodes(f.node, "function", 0) for f in proto.functions))


def _walk_graph(graph: onnx.GraphProto, where: str, depth: int) -> _Graph:
    if depth > _MAX_DEPTH:
        raise InvalidModelError(f"{where}: subgraphs are nested more than {_MAX_DEPTH} deep")
    return _Graph(graph, where, depth, _walk_nodes(graph.node, where, depth))


def _walk_nodes(nodes: Sequence[onnx.NodeProto], where: str, depth: int) -> tuple[_Node, ...]:
    tensor = onnx.AttributeProto.TENSOR
    out = []
    for node in nodes:
        op, name = node.op_type, node.name
        attrs = []
        for a in node.attribute:
            # The fields set, in one call (asking for each field by name was ~4 us an
            # attribute): whatever the type says, every tensor and graph it holds is seen.
            aname, kind, one, many, g, graphs = "", 0, None, (), None, ()
            for fd, value in a.ListFields():
                which = fd.name
                if which == "name":
                    aname = value
                elif which == "type":
                    kind = value
                elif which == "t":
                    one = value
                elif which == "tensors":
                    many = tuple(value)
                elif which == "g":
                    g = value
                elif which == "graphs":
                    graphs = tuple(value)
            if one is None and kind == tensor:
                one = a.t   # a TENSOR attribute without one: an empty tensor
            tensors: tuple[onnx.TensorProto, ...] = many if one is None else (one, *many)
            subs = graphs if g is None else (g, *graphs)
            bodies = tuple(_walk_graph(body, f"{where} > {op} {name!r}.{aname}", depth + 1)
                           for body in subs) if subs else ()
            attrs.append(_Attr(aname, kind, tensors, bodies))
        out.append(_Node(op, node.domain, name, tuple(node.input), tuple(node.output),
                         tuple(attrs), node))
    return tuple(out)


def _check_versions(proto: onnx.ModelProto, walked: _Walked) -> None:
    if proto.ir_version > onnx.IR_VERSION:
        raise UnsupportedModelError(
            f"the model's IR version {proto.ir_version} is newer than the installed onnx "
            f"package supports ({onnx.IR_VERSION}); upgrade onnx"
        )
    if proto.ir_version < 3:
        raise UnsupportedModelError(
            f"the model's IR version {proto.ir_version} predates opset imports (IR 3); "
            "convert it with onnx.version_converter"
        )
    newest = onnx.defs.onnx_opset_version()
    seen: dict[str, int] = {}
    for imp in proto.opset_import:
        domain = "" if imp.domain == "ai.onnx" else imp.domain
        label = domain or "ai.onnx"
        if imp.version < 1:
            raise UnsupportedModelError(
                f"the model imports {label} opset {imp.version}; opset versions start at 1")
        if seen.get(domain, imp.version) != imp.version:
            raise InvalidModelError(
                f"the model imports {label} twice, as opset {seen[domain]} and {imp.version}")
        seen[domain] = imp.version
        if domain == "" and imp.version > newest:
            raise UnsupportedModelError(
                f"the model imports ai.onnx opset {imp.version}, newer than the installed onnx "
                f"package knows ({newest}); upgrade onnx"
            )
    # A node of a domain the model does not import has no defined semantics (onnxruntime
    # refuses it too); model-local functions define their own domains.
    known = set(seen) | {f.domain for f in proto.functions}
    for g in walked.graphs():
        for node in g.nodes:
            for text in (node.op_type, node.domain, node.name, *node.inputs, *node.outputs,
                         *(a.name for a in node.attrs)):
                if not isinstance(text, str):   # protobuf hands back bytes that are not UTF-8
                    raise InvalidModelError(f"{g.where}: a node's op type, domain or names "
                                            f"hold bytes that are not UTF-8 text: {text!r}")
            domain = "" if node.domain == "ai.onnx" else node.domain
            if domain not in known:
                raise InvalidModelError(
                    f"{g.where}: node {node.name!r} ({node.op_type}) is in domain "
                    f"{domain or 'ai.onnx'!r}, which the model does not import (opset_import)")


def _check_schemas(proto: onnx.ModelProto, walked: _Walked) -> None:
    """A node of an op onnx has a schema for has as many inputs and outputs as the schema
    allows (omitted optional ones, named "", count), its required attributes, and only the
    attributes the schema declares, each of its declared type; names starting with ``__`` are
    free, as in onnx's checker. onnxruntime refuses a model otherwise; run, such a node failed
    inside its kernel with a TypeError, or ran with a misspelt attribute ignored. (Input types
    against the schema's type constraints: shape inference, :func:`_infer_shapes`.) Runs after
    :func:`_check_versions`."""
    imports = _opset_versions(proto.opset_import)
    scopes = [(imports, g.where, g.nodes) for g in walked.graphs()]
    for f, nodes in zip(proto.functions, walked.functions):
        opsets = {**imports, **_opset_versions(f.opset_import)}
        scopes.append((opsets, f"function {f.name!r}", nodes))
        scopes.extend((opsets, g.where, g.nodes) for n in nodes for a in n.attrs
                      for g in _graphs_from(list(a.bodies)))
    for opsets, where, nodes in scopes:
        for node in nodes:
            domain = "" if node.domain == "ai.onnx" else node.domain
            version = opsets.get(domain)
            wrong = None if version is None else _schema_violation(node, domain, version)
            if wrong is None and any(a.name in ("axis", "axes") for a in node.attrs):
                wrong = _axis_violation(node)
            if wrong is not None:
                # a node of a function body written for another opset keeps that opset
                # (OPSET_KEY, read only here: torch's exporter gives every node metadata)
                own = next((e.value for e in node.proto.metadata_props if e.key == OPSET_KEY),
                           None)
                if own is not None and own.isdigit() and int(own) != version:
                    version = int(own)
                    wrong = _schema_violation(node, domain, version)
            if wrong is not None:
                raise InvalidModelError(
                    f"{where}: node {node.name!r} ({node.op_type}, opset {version}) {wrong}")


def _check_function_calls(proto: onnx.ModelProto, walked: _Walked) -> None:
    """Model-local functions must not call themselves, directly or through others (or in a
    subgraph of their body): inlining such a function never ends (the load hung, memory
    growing without bound). Refused naming the cycle."""
    if not proto.functions:
        return
    key = {(("" if f.domain == "ai.onnx" else f.domain), f.name): k
           for k, f in enumerate(proto.functions)}
    calls: list[set[int]] = []   # per function: the model-local functions its body calls
    for f, nodes in zip(proto.functions, walked.functions):
        # names must be text, as in the graphs (_check_structure): a body is inlined by
        # serializing it, where bytes that are not UTF-8 failed inside onnx-ir
        texts: list[Any] = [f.name, f.domain, *f.input, *f.output]
        called: set[int] = set()
        pending = list(nodes)
        while pending:
            n = pending.pop()
            texts += [n.op_type, n.domain, *n.inputs, *n.outputs]
            k = key.get(("" if n.domain == "ai.onnx" else n.domain, n.op_type))
            if k is not None:
                called.add(k)
            for a in n.attrs:
                for body in _graphs_from(list(a.bodies)):
                    pending.extend(body.nodes)
        bad = next((t for t in texts if not isinstance(t, str)), None)
        if bad is not None:
            raise InvalidModelError(f"model-local function {f.name!r}: the name {bad!r} is not "
                                    "UTF-8 text")
        calls.append(called)
    state = [0] * len(calls)   # 0 unseen, 1 on the current path, 2 done
    for start in range(len(calls)):
        if state[start]:
            continue
        path, stack = [start], [iter(sorted(calls[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state[nxt] == 1:
                cycle = path[path.index(nxt):] + [nxt]
                names = " -> ".join(f"{proto.functions[k].domain}::{proto.functions[k].name}"
                                    for k in cycle)
                raise InvalidModelError(   # (onnxruntime: INVALID_GRAPH)
                    f"model-local functions call themselves recursively ({names}); a function "
                    "body cannot be inlined into itself")
            elif state[nxt] == 0:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(calls[nxt])))


def _check_input_dims(proto: onnx.ModelProto) -> None:
    """No negative dimension in the main graph's declared inputs, refused before onnx's shape
    inference sees them (its GatherND inference crashes the interpreter on one; feeds are
    checked against these shapes, so one could never be fed anyway)."""
    for info in proto.graph.input:
        if not info.type.HasField("tensor_type"):
            continue
        for d in info.type.tensor_type.shape.dim:
            if d.dim_value < 0:
                dims = [x.dim_value if x.HasField("dim_value") else x.dim_param or None
                        for x in info.type.tensor_type.shape.dim]
                raise InvalidModelError(f"input {info.name!r} has a negative dimension "
                                        f"{d.dim_value} in its shape {dims}")


_AXIS_LIMIT = 1 << 31


def _check_control_flow(proto: onnx.ModelProto, walked: _Walked) -> None:
    """If, Loop and Scan nodes and their bodies agree on their signatures, as ONNX defines
    them (onnxruntime refuses a model otherwise): an If's branches give as many outputs as the
    node has; a Loop body takes (iteration, condition, N carried values) for the node's N
    carried inputs and gives (condition, N carried, K scanned) for its N + K outputs; a Scan
    body takes the N states and M scanned slices the node is given and gives its N + K
    outputs. (An If ran whichever branch it took, with fewer outputs than declared.)"""
    version = _opset_versions(proto.opset_import).get("", 0)
    for g in walked.graphs():
        for node in g.nodes:
            if node.domain not in ("", "ai.onnx") or node.op_type not in ("If", "Loop", "Scan"):
                continue
            bodies = {a.name: a.bodies[0].proto for a in node.attrs if a.bodies}
            n_in, n_out = len(node.inputs), len(node.outputs)
            what = f"{g.where}: {node.op_type} node {node.name!r}"
            wrong = None
            if node.op_type == "If":
                then_b, else_b = bodies.get("then_branch"), bodies.get("else_branch")
                if then_b is not None and else_b is not None and not (
                        len(then_b.output) == len(else_b.output) == n_out):
                    wrong = (f"has {n_out} output(s), its then_branch gives "
                             f"{len(then_b.output)} and its else_branch {len(else_b.output)}")
            elif node.op_type == "Loop":
                body = bodies.get("body")
                carried = n_in - 2
                if body is not None and (len(body.input) != 2 + carried or n_out < carried
                                         or len(body.output) != 1 + n_out):
                    wrong = (f"has {carried} loop-carried input(s) and {n_out} output(s); its "
                             f"body must take {2 + carried} inputs (it takes "
                             f"{len(body.input)}) and give {1 + n_out} outputs (it gives "
                             f"{len(body.output)})")
            else:
                body = bodies.get("body")
                scanned = next((int(a.i) for a in node.proto.attribute
                                if a.name == "num_scan_inputs"), None)
                given = n_in - (1 if version < 9 else 0)   # (Scan 8: sequence_lens first)
                if body is not None and scanned is not None and (
                        len(body.input) != given or len(body.output) != n_out
                        or not 0 <= scanned <= given):
                    wrong = (f"is given {given} state and scanned input(s) and has {n_out} "
                             f"output(s); its body takes {len(body.input)} and gives "
                             f"{len(body.output)}")
            if wrong is not None:
                raise as_status(InvalidModelError, Fail)(f"{what} {wrong}")


def _axis_violation(node: _Node) -> str | None:
    """An ``axis``/``axes`` attribute beyond any tensor's rank (onnx's inference and
    onnxruntime read it as a 32-bit int and wrap it into range)."""
    for a in node.proto.attribute:
        if a.name in ("axis", "axes"):
            values = [a.i] if a.type == onnx.AttributeProto.INT else list(a.ints)
            bad = next((v for v in values if not -_AXIS_LIMIT < v < _AXIS_LIMIT), None)
            if bad is not None:
                return f"has {a.name} {bad}, beyond any tensor's rank"
    return None


def _opset_versions(imports: Iterable[onnx.OperatorSetIdProto]) -> dict[str, int]:
    """Domain ("" for ai.onnx) -> imported opset version."""
    return {("" if i.domain == "ai.onnx" else i.domain): i.version for i in imports}


def _schema_violation(node: _Node, domain: str, version: int) -> str | None:
    """How ``node`` breaks the schema of its op at ``version``, or None."""
    schema = _schema(domain, node.op_type, version)
    if schema is None:
        return None
    for kind, count, (low, high) in (("input", len(node.inputs), schema.inputs),
                                     ("output", len(node.outputs), schema.outputs)):
        if not low <= count <= high:
            allowed = str(low) if low == high else \
                f"{low} or more" if high >= _UNBOUNDED else f"{low} to {high}"
            return f"has {count} {kind}(s); it takes {allowed}"
    declared = schema.attributes
    for a in node.attrs:
        want = declared.get(a.name)
        if want is None:
            if a.name.startswith("__"):
                continue
            return (f"has attribute {a.name!r}, which {node.op_type} does not have "
                    f"(it has {', '.join(sorted(declared)) or 'none'})")
        if a.kind and want and a.kind != want:
            return (f"has attribute {a.name!r} of type {_ATTR_TYPE_NAMES.get(a.kind, a.kind)}; "
                    f"{node.op_type} takes {_ATTR_TYPE_NAMES.get(want, want)}")
    if schema.required:
        missing = schema.required - {a.name for a in node.attrs}
        if missing:
            return f"lacks its required attribute(s) {', '.join(sorted(missing))}"
    return None


_ATTR_TYPE_NAMES = {v: k for k, v in onnx.AttributeProto.AttributeType.items()}
_UNBOUNDED = 1 << 30   # onnx's schemas say 2**31 - 1 for "any number"


class _Schema(NamedTuple):
    attributes: dict[str, int]   # name -> AttributeProto type (0: any)
    required: frozenset[str]
    inputs: tuple[int, int]      # (fewest, most)
    outputs: tuple[int, int]


@functools.lru_cache(maxsize=4096)
def _schema(domain: str, op_type: str, version: int) -> _Schema | None:
    """What the load checks need of the schema onnx has for the op at that opset, or None
    without one."""
    try:
        schema = onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError:
        return None
    return _Schema({name: int(a.type) for name, a in schema.attributes.items()},
                   frozenset(name for name, a in schema.attributes.items() if a.required),
                   (schema.min_input, schema.max_input), (schema.min_output, schema.max_output))


class _ExternalFiles:
    """External data files, each resolved once (:func:`resolve_inside`) and checked
    against; a location is rewritten to the checked path relative to the folder, so the
    reader opens exactly the file that was checked."""

    def __init__(self, base_dir: str | None) -> None:
        self.root = os.path.realpath(base_dir) if base_dir is not None else None
        self.files: dict[str, tuple[str, int, str]] = {}   # location -> (path, size, relative)

    def check(self, t: onnx.TensorProto) -> None:
        """Refuse external data that leaves the model folder or reaches past its file."""
        root, files = self.root, self.files
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        what = f"initializer {t.name!r}"
        if root is None:
            raise ExternalDataError(
                f"{what} has its data in external file {loc!r}, but the model was not loaded "
                "from a path; load it from its file so the data can be found beside it"
            )
        if loc not in files:
            full = resolve_inside(root, loc, what)
            files[loc] = (full, os.path.getsize(full), os.path.relpath(full, root))
        full, size, rel = files[loc]
        try:
            offset = int(info.get("offset", 0) or 0)
            length = int(info["length"]) if info.get("length") else None
        except ValueError:
            raise ExternalDataError(f"{what}: external data offset/length is not a number"
                                    ) from None
        if offset < 0 or (length is not None and length < 0):
            raise ExternalDataError(f"{what}: negative external data offset or length")
        expected = _expected_nbytes(t)
        need = length if length is not None else expected
        if need is not None and offset + need > size:
            raise ExternalDataError(
                f"{what}: external data range [{offset}, {offset + need}) is beyond the end of "
                f"{loc!r} ({size} bytes)"
            )
        if expected is not None and length is not None and length != expected:
            raise ExternalDataError(
                f"{what}: external data length {length} does not match its shape and dtype "
                f"({expected} bytes)"
            )
        if rel != loc:
            for e in t.external_data:
                if e.key == "location":
                    e.value = rel


def resolve_inside(root: str, location: str, what: str) -> str:
    """The real path of ``location`` relative to folder ``root`` (itself a real path), after
    following every symlink; raises :class:`ExternalDataError` unless it is a regular file
    inside ``root``. The one place that decides whether a file named by a model may be read."""
    if not location:
        raise ExternalDataError(f"{what} is marked external but names no location")
    if "\0" in location:
        raise ExternalDataError(f"{what}: external data location {location!r} contains a NUL "
                                "byte")
    if (os.path.isabs(location) or location.startswith(("/", "\\"))
            or (len(location) > 1 and location[1] == ":")):
        raise ExternalDataError(
            f"{what}: external data location {location!r} is an absolute path; only paths "
            f"inside the model folder {root!r} are allowed"
        )
    try:
        full = os.path.realpath(os.path.join(root, location))
    except (OSError, ValueError) as e:
        raise ExternalDataError(f"{what}: external data location {location!r} cannot be "
                                f"resolved: {e}") from e
    if os.path.commonpath([full, root]) != root or full == root:
        raise ExternalDataError(
            f"{what}: external data location {location!r} resolves to {full!r}, outside the "
            f"model folder {root!r}; refusing to read it"
        )
    if not os.path.isfile(full):
        raise ExternalDataError(f"{what}: external data file {location!r} not found in "
                                f"{root!r}")
    return full


_SUB_BYTE_BITS = {onnx.TensorProto.INT4: 4, onnx.TensorProto.UINT4: 4}
for _name, _bits in (("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2), ("FLOAT6E2M3", 6),
                     ("FLOAT6E3M2", 6)):
    if hasattr(onnx.TensorProto, _name):
        _SUB_BYTE_BITS[getattr(onnx.TensorProto, _name)] = _bits


@functools.cache
def _elem_bits(elem_type: int) -> int | None:
    """Bits per element of a tensor type (``None``: unknown or variable, e.g. strings)."""
    if elem_type in _SUB_BYTE_BITS:
        return _SUB_BYTE_BITS[elem_type]
    try:
        dt = np_dtype(elem_type)
    except KeyError:
        return None
    return None if dt == np.dtype(object) else dt.itemsize * 8


def _num_elements(dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= int(d)   # Python ints: a product of hostile dims must not wrap around
    return n


def _expected_nbytes(t: onnx.TensorProto) -> int | None:
    bits = _elem_bits(t.data_type)
    return None if bits is None else (_num_elements(t.dims) * bits + 7) // 8


MAX_TENSOR_BYTES_KEY = "session.onnxplex.max_tensor_bytes"
"""The session config entry of a session's memory limit: the largest tensor (or growing
sequence) in bytes its model may declare or its kernels may allocate."""

_SESSION_LIMIT: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "onnxplex_max_tensor_bytes", default=None)
"""The limit of the session building or running in this context (see :func:`tensor_limit`);
the inter-op pool's tasks run in copies of the run's context, so they see it too."""


@contextlib.contextmanager
def tensor_limit(nbytes: int | None) -> Iterator[None]:
    """Make ``nbytes`` the memory limit (:func:`max_tensor_bytes`) of what runs in this
    context: a session's load and runs, with its ``session.onnxplex.max_tensor_bytes``.
    ``None`` keeps the process default."""
    if nbytes is None:
        yield
        return
    token = _SESSION_LIMIT.set(nbytes)
    try:
        yield
    finally:
        _SESSION_LIMIT.reset(token)


def max_tensor_bytes() -> int:
    """The largest tensor (bytes) a model may declare or a kernel allocate: the session's
    ``session.onnxplex.max_tensor_bytes`` config entry while one of its loads or runs is in
    progress, else ``ONNXPLEX_MAX_TENSOR_BYTES`` when set, else the machine's physical memory
    (a tensor larger than that can never be held)."""
    session = _SESSION_LIMIT.get()
    if session is not None:
        return session
    env = os.environ.get("ONNXPLEX_MAX_TENSOR_BYTES", "").strip()
    if env:
        try:
            return int(float(env))
        except ValueError:
            logger.warning("ignoring ONNXPLEX_MAX_TENSOR_BYTES=%r: not a number", env)
    return _physical_memory()


def _limit_origin() -> str:
    """Where :func:`max_tensor_bytes` came from, for its errors."""
    if _SESSION_LIMIT.get() is not None:
        return f"the session's {MAX_TENSOR_BYTES_KEY}"
    if os.environ.get("ONNXPLEX_MAX_TENSOR_BYTES", "").strip():
        return "ONNXPLEX_MAX_TENSOR_BYTES"
    return f"this machine's memory; set {MAX_TENSOR_BYTES_KEY} to change it"


@functools.cache
def _physical_memory() -> int:
    """The machine's physical memory in bytes (asked once: a model's load checks hundreds of
    tensors)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):  # no sysconf (Windows): 1 TiB
        return 1 << 40


def format_bytes(n: int) -> str:
    """``3.55 PiB``-style size of ``n`` bytes."""
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if size < 1024 or unit == "EiB":
            return f"{n} bytes" if unit == "bytes" else f"{size:.2f} {unit}"
        size /= 1024
    return f"{n} bytes"  # pragma: no cover


def check_allocation(shape: Sequence[int], dtype: np.dtype, what: str, *,
                     already: int = 0) -> None:
    """Refuse, before a kernel allocates it, an output of ``shape`` and ``dtype`` (plus
    ``already`` bytes it adds to, for a growing sequence) larger than :func:`max_tensor_bytes`
    (the session's limit, ``ONNXPLEX_MAX_TENSOR_BYTES`` or the machine's memory): the run
    limit kernels whose output size comes from data (Expand, Tile, ConstantOfShape, Range,
    sequences in a loop) check, instead of growing until the machine's OOM killer ends the
    process. Raises :class:`TensorSizeError` naming ``what``."""
    n = 1
    for d in shape:
        n *= int(d)
    if n < 0:
        raise TensorSizeError(f"{what}: negative size in the shape {list(shape)}")
    nbytes = n * np.dtype(dtype).itemsize + already
    limit = max_tensor_bytes()
    if nbytes > limit:
        raise TensorSizeError(
            f"{what} ({np.dtype(dtype)}{[int(d) for d in shape]}) would need "
            f"{format_bytes(nbytes)} ({nbytes} bytes), more than the {format_bytes(limit)} "
            f"allowed ({_limit_origin()}); refused before allocating it")


def check_tensor_size(shape: Sequence[Dim], elem_type: int | None, what: str) -> None:
    """Refuse, before anything is allocated, a static shape with a negative dim or one whose
    tensor would need more than :func:`max_tensor_bytes`. The one place onnxplex checks sizes
    a model declares: stored tensors, declared and inferred value shapes, random feeds.
    Raises :class:`TensorSizeError` (an :class:`InvalidModelError`) naming ``what``."""
    dims = [d for d in shape if isinstance(d, int)]
    neg = [d for d in dims if d < 0]
    if neg:
        raise InvalidModelError(f"{what} has a negative dimension {neg[0]} in its shape "
                                f"{list(shape)}")
    if len(dims) != len(shape):
        return
    bits = _elem_bits(elem_type) if elem_type else None
    nbytes = (_num_elements(dims) * (bits or 8) + 7) // 8
    limit = max_tensor_bytes()
    if nbytes > limit:
        from .._dtypes import elem_type_name

        typ = elem_type_name(elem_type) if elem_type else "tensor"
        raise TensorSizeError(
            f"{what} ({typ}{list(shape)}) would need {format_bytes(nbytes)} ({nbytes} bytes), "
            f"more than the {format_bytes(limit)} allowed ({_limit_origin()}); refused "
            "before allocating it")


_RAW_CHECK_BYTES = 16 << 20
"""Raw data up to this size is checked against the tensor's shape at load; protobuf copies
``raw_data`` on access, so bigger tensors are checked when first read."""


def _check_tensors(walked: _Walked, base_dir: str | None) -> int:
    """Every stored tensor: a known type, a sane shape, and exactly the data its shape needs
    (a tensor whose data does not match would otherwise be padded, or read out of bounds);
    external data inside the model's folder and within its file. The number of tensors
    with external data."""
    external = _ExternalFiles(base_dir)
    count = 0
    limit_bits = max_tensor_bytes() * 8
    for t in walked.tensors():
        what = f"tensor {t.name!r}"
        bits = _elem_bits(t.data_type)
        if bits is None and t.data_type != onnx.TensorProto.STRING:
            raise InvalidModelError(f"{what} has data type {t.data_type}, which is not an ONNX "
                                    "tensor type this onnxplex knows")
        dims = list(t.dims)
        n = _num_elements(dims)
        if min(dims, default=0) < 0 or n * (bits or 8) > limit_bits:   # (else in bounds)
            check_tensor_size(tuple(int(d) for d in dims), t.data_type, what)
        if t.HasField("segment"):
            raise UnsupportedModelError(f"{what} is stored in segments, which onnxplex does "
                                        "not support")
        if t.data_location == onnx.TensorProto.EXTERNAL:
            external.check(t)
            count += 1
            continue
        if t.data_type == onnx.TensorProto.STRING:
            ok, held = len(t.string_data) == n, f"{len(t.string_data)} strings"
        elif t.HasField("raw_data"):
            want = (n * bits + 7) // 8
            if want > _RAW_CHECK_BYTES:
                continue   # reading raw_data copies it: checked when read (_readonly_array)
            got = len(t.raw_data)
            # sub-byte types: packed, or (as some writers do) one byte per element
            ok = got == want or (bits < 8 and got == n)
            held = f"{got} bytes of raw data"
        else:
            field = onnx.helper.tensor_dtype_to_field(t.data_type)
            got = len(getattr(t, field))
            per = 2 if t.data_type in (onnx.TensorProto.COMPLEX64,
                                       onnx.TensorProto.COMPLEX128) else 1
            ok = got == n * per or (bits < 8 and (n * bits + 31) // 32 <= got <= n)
            held = f"{got} values in {field}"
        if not ok:
            raise InvalidModelError(
                f"{what} holds {held}, but its shape {list(t.dims)} needs {n} element(s)"
                f"{'' if bits is None else f' ({(n * bits + 7) // 8} bytes)'}")
    return count


def _check_value_shapes(graph: ir.Graph, where: str = "main graph") -> None:
    """Declared and inferred tensor shapes: no tensor larger than allowed, no negative dims
    in the main graph's inputs (feeds are checked against them). Elsewhere a negative dim
    counts as unknown: onnx's own inference writes -1 for some dims it cannot tell. Read
    from the graph once built (its shapes are Python objects by then; nothing is allocated
    from them before this)."""
    main = where == "main graph"
    outputs = {id(v) for v in graph.outputs}
    limit_bits = max_tensor_bytes() * 8

    def check(value: ir.Value, kind: str, strict: bool) -> None:
        shape, dtype = value.shape, value.dtype
        if shape is None or dtype is None:
            return
        # A value in bounds passes here without building its message or dims (thousands of
        # values a model); anything else goes to check_tensor_size, which says what is wrong.
        n, known, suspect = 1, True, False
        for d in shape:
            if not isinstance(d, int):
                known = False
            elif d >= 0:
                n *= d
            elif strict:
                suspect = True
            else:
                known = False
        if not suspect and (not known or n * (_elem_bits(dtype.value) or 8) <= limit_bits):
            return
        dims = tuple(d if isinstance(d, int) else None for d in shape)
        if not strict:
            dims = tuple(None if d is not None and d < 0 else d for d in dims)
        check_tensor_size(dims, dtype.value, f"{where}: {kind} {value.name!r}")

    for v in graph.inputs:
        check(v, "input", main)
    for node in graph:
        for v in node.outputs:
            check(v, "output" if id(v) in outputs else "value", False)
        for attr in attrs_of(node):
            if attr.type in _BODY_ATTRS:
                for body in ((attr.value,) if attr.type == ir.AttributeType.GRAPH
                             else attr.value):
                    _check_value_shapes(body, f"{where} > {node.op_type} {node.name!r}."
                                              f"{attr.name}")
    for v in graph.outputs:   # one that is also an input or an initializer
        if v.producer() is None:
            check(v, "output", False)


def _check_structure(graph: _Graph, outer: set[str]) -> None:
    """Names are assigned once, every input is defined, every output is produced."""
    where, g = graph.where, graph.proto
    for name in (*(v.name for v in (*g.input, *g.output, *g.value_info)),
                 *(t.name for t in g.initializer)):
        if not isinstance(name, str):   # protobuf hands back bytes that are not UTF-8
            raise InvalidModelError(f"{where}: value name {name!r} is not UTF-8 text")
    defined: set[str] = set(outer)
    seen: dict[str, str] = {}

    def define(name: str, by: str) -> None:
        if not name:
            return
        if name in seen:
            raise as_status(InvalidModelError, Fail)(   # (onnxruntime: FAIL)
                f"{where}: value name {name!r} is defined twice (by {seen[name]} and by {by}); "
                "ONNX graphs must assign each name once"
            )
        seen[name] = by
        defined.add(name)

    for i in g.input:
        define(i.name, "a graph input")
    for t in g.initializer:
        if seen.get(t.name, "a graph input") != "a graph input":
            raise as_status(InvalidModelError, Fail)(
                f"{where}: initializer name {t.name!r} is defined twice")
        seen[t.name] = "an initializer"
        defined.add(t.name)
    for sp in g.sparse_initializer:
        define(sp.values.name, "a sparse initializer")
    producers = {o for n in graph.nodes for o in n.outputs if o}
    for k, node in enumerate(graph.nodes):
        for name in node.inputs:
            if name and name not in defined and name not in producers:
                raise as_status(InvalidModelError, InvalidArgument)(   # (onnxruntime's)
                    f"{where}: node {k} ({node.op_type} {node.name!r}) reads {name!r}, which "
                    "no node, graph input or initializer defines"
                )
        for a in node.attrs:
            for body in a.bodies:
                _check_structure(body, defined | producers)
        for o in node.outputs:
            if o:
                define(o, f"node {k} ({node.op_type} {node.name!r})")
    for o in g.output:
        if o.name not in defined and o.name not in producers:
            raise as_status(InvalidModelError, Fail)(   # (onnxruntime: FAIL)
                f"{where}: graph output {o.name!r} is not produced by any node, input or "
                "initializer"
            )


def _copy_fields(src, dst, skip: tuple[str, ...]) -> None:
    """Copy every set field of protobuf message ``src`` into ``dst`` except those in ``skip``."""
    for fd, value in src.ListFields():
        if fd.name in skip:
            continue
        if fd.is_repeated:
            getattr(dst, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(dst, fd.name).CopyFrom(value)
        else:
            setattr(dst, fd.name, value)


_INFER_KEEP_ELEMENTS = 1024
"""Initializers up to this size stay in the copy that shape inference sees (their values may
matter: shapes, axes, pads); bigger ones are only declared there, with their type and shape."""

_INFER_COPY_MIN_BYTES = 16 << 20
"""The copy without the bigger initializers is made only when they hold at least this much:
onnx's inference serializes the model it gets, and serializing a few MB costs less than
copying the graph's messages in Python (a file's large weights are cut out before this, see
:mod:`._wire`; what is left inline is a few MB at most)."""


_NODES = ("nodes_falsenodeids", "nodes_featureids", "nodes_hitrates",
          "nodes_missing_value_tracks_true", "nodes_modes", "nodes_nodeids", "nodes_treeids",
          "nodes_truenodeids", "nodes_values")
_PAYLOAD: dict[str, frozenset[str]] = {
    "TreeEnsembleClassifier": frozenset(
        _NODES + ("class_ids", "class_nodeids", "class_treeids", "class_weights")),
    "TreeEnsembleRegressor": frozenset(
        _NODES + ("target_ids", "target_nodeids", "target_treeids", "target_weights")),
    "SVMClassifier": frozenset({"support_vectors", "coefficients"}),
    "SVMRegressor": frozenset({"support_vectors", "coefficients"}),
    "LinearClassifier": frozenset({"coefficients"}),
    "LinearRegressor": frozenset({"coefficients"}),
}
"""ai.onnx.ml list attributes whose values no onnx inference function reads, by op type (at
every opset up to ai.onnx.ml 5, read in onnx's ``traditionalml/defs.cc`` and ``old.cc``; the
installed onnx is held to it by the test named below): tree
ensembles test only whether ``nodes_values``, ``class_weights``... are present and read
``classlabels_*`` and ``n_targets``; LinearClassifier reads ``intercepts`` and the labels; the
SVMs the labels. They are the bulk of a converted model (a 100-tree forest: ~1 MB), which
shape inference would otherwise serialize, parse in C++, serialize again and hand back to be
parsed a second time in Python: the copy inference sees has them emptied (the attribute stays,
so presence checks hold), and what it finds is put into the model parsed at the start
(:func:`_infer_shapes`). ``tests/test_creation_fastpaths.py`` checks, op by op, that inference
finds what it finds over the whole model."""

_PAYLOAD_MIN_ELEMENTS = 4096
"""Payload lists are left out of inference's copy only when together they hold this many."""


def _payload(nodes: tuple[_Node, ...]) -> dict[int, frozenset[str]]:
    """Main-graph node index -> its payload attributes' names (see :data:`_PAYLOAD`), from
    the main graph's walked ``nodes`` (:func:`_walk`: no protobuf field is read again for a
    model without such ops); empty when they are too few to be worth it, or when a node holds
    a subgraph (inference's results are then taken whole)."""
    found = {i: _PAYLOAD[n.op_type] for i, n in enumerate(nodes)
             if n.domain == "ai.onnx.ml" and n.op_type in _PAYLOAD}
    if not found or any(a.bodies for n in nodes for a in n.attrs):
        return {}
    total = sum(len(a.ints) + len(a.floats) + len(a.strings)
                for i, names in found.items() for a in nodes[i].proto.attribute
                if a.name in names and not a.ref_attr_name)
    return found if total >= _PAYLOAD_MIN_ELEMENTS else {}


def _light_copy(proto: onnx.ModelProto, big_names: set[str], declared: set[str],
                big: list[onnx.TensorProto], payload: dict[int, frozenset[str]]
                ) -> onnx.ModelProto:
    """``proto`` for shape inference: the initializers named in ``big_names`` only declared
    (as graph inputs, for those in ``declared``), payload attributes present but empty."""
    g = proto.graph
    light = onnx.ModelProto()
    _copy_fields(proto, light, skip=("graph",))
    lg = light.graph
    _copy_fields(g, lg, skip=("initializer", "node"))
    lg.initializer.extend(t for t in g.initializer if t.name not in big_names)
    for i, node in enumerate(g.node):
        names = payload.get(i)
        if names is None:
            lg.node.append(node)
            continue
        copy = lg.node.add()
        _copy_fields(node, copy, skip=("attribute",))
        for a in node.attribute:
            if a.name in names and not a.ref_attr_name:
                copy.attribute.add(name=a.name, type=a.type)
            else:
                copy.attribute.append(a)
    lg.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                    for t in big if t.name in declared)
    return light


def _infer_shapes(proto: onnx.ModelProto, serialized: bytes | None = None,
                  nodes: tuple[_Node, ...] | None = None
                  ) -> tuple[onnx.ModelProto, list[onnx.TensorProto], set[str]]:
    """Shape inference on a copy of ``proto`` without its large weights (onnx's inference
    serializes the model it gets; ``serialized``, the bytes ``proto`` was parsed from, spare
    that when no copy is made): returns the inferred copy, the weights it lacks and the names
    among them that the copy declares as graph inputs (:func:`_attach_initializers` puts them
    back without copying). ``nodes``: the main graph walked (:func:`_walk`), when at hand.
    When the copy also leaves out ai.onnx.ml payload attributes
    (:data:`_PAYLOAD`), what inference found (``value_info``, the outputs' types) is put into
    ``proto`` instead, which is returned: parsing the inferred model back would cost as much
    as the first parse. The caller's proto is not modified otherwise."""
    g = proto.graph
    big = [t for t in g.initializer
           if t.data_location != onnx.TensorProto.EXTERNAL
           and _num_elements(t.dims) > _INFER_KEEP_ELEMENTS]
    if sum(_expected_nbytes(t) or 0 for t in big) < _INFER_COPY_MIN_BYTES:
        big = []   # serialized with the model: cheaper than building the copy
    big_names = {t.name for t in big}
    declared = big_names - {i.name for i in g.input}
    payload = _payload(_walk(proto).graph.nodes if nodes is None else nodes)
    light: onnx.ModelProto | bytes = proto if serialized is None else serialized
    if big or payload:
        light = _light_copy(proto, big_names, declared, big, payload)
    try:
        # Strict first: only strict mode reports declared shapes or types that contradict
        # what the nodes compute, and inputs of types an op does not take; other strict
        # failures (ops without a schema, say) retry leniently below.
        light = onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=True,
                                                  data_prop=True)
    except Exception as e:  # noqa: BLE001 - onnx raises InferenceError, sometimes others
        if any(c in str(e) for c in _INCONSISTENT):
            raise as_status(InvalidModelError, Fail)(
                f"the model's declared shapes or types contradict its nodes: {e}") from e
        if any(c in str(e) for c in _BAD_ATTRIBUTE):
            raise as_status(InvalidModelError, Fail)(
                f"a node's attributes are outside the spec (onnxruntime refuses it too): {e}"
            ) from e
        if any(c in str(e) for c in _MISTYPED):
            raise as_status(InvalidModelError, Fail)(   # (onnxruntime: a Type Error)
                f"a node's inputs are of types its op does not take "
                                    f"(onnxruntime refuses it too): {e}") from e
        try:
            light = onnx.shape_inference.infer_shapes(light, check_type=False,
                                                      strict_mode=False, data_prop=True)
        except Exception as e2:  # noqa: BLE001 - inference is advisory; kernels see real shapes
            logger.warning("onnx shape inference failed, continuing without it: %s", e2)
            return proto, [], set()
    # onnxruntime's contrib ops (a QOperator model's) and what follows them
    light = _contrib_shapes.infer_contrib(light)
    if payload:
        g.ClearField("value_info")
        g.value_info.extend(light.graph.value_info)
        for mine, found in zip(g.output, light.graph.output):
            mine.type.CopyFrom(found.type)
        return proto, [], set()   # (its weights never left it)
    return light, big, declared


_INCONSISTENT = ("Inferred shape and existing shape differ",
                 "Inferred elem type differs from existing elem type")
"""Strict shape-inference messages that mean the model contradicts its own declarations.
(Inputs declared with shapes an op cannot combine, such as non-broadcasting ones, still load:
providers may decline such nodes with a reason, and running them is a kernel error.)"""
_MISTYPED = ("typestr: ", "has inconsistent type")
_BAD_ATTRIBUTE = ("must only contain positive values", "must not contain negative values",
                  "must be in [", "Invalid value(", "Invalid value of attribute")
"""onnx's inference messages about attribute values outside the spec (a Conv or pool's zero
stride or dilation, negative pads, an axis outside the input's rank): onnxruntime refuses the
model; kernels divided by them or failed at run time."""
"""onnx's type-constraint messages (``check_type``) about a node's inputs: one of a type
outside the op's constraint, or two bound to one type variable with different types (as
onnxruntime refuses them). An output type onnx's inference derives outside the constraint
(LayerNormalization's Mean for stash_type double, say) is left to the lenient retry."""


def _attach_initializers(model: ir.Model, tensors: list[onnx.TensorProto],
                         declared: set[str]) -> None:
    """Make the graph inputs named by ``tensors`` initializers again (``declared``: those that
    were inputs only for shape inference). The tensors are wrapped, not copied."""
    inputs = {v.name: v for v in model.graph.inputs}
    for t in tensors:
        v = inputs[t.name]
        if t.name in declared:
            model.graph.inputs.remove(v)
        v.const_value = ir.serde.deserialize_tensor(t)
        model.graph.register_initializer(v)
