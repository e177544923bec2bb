"""onnx shape inference, on a light copy of the model (large weights and the ai.onnx.ml
payload lists left out: onnx serializes what it is given), and onnxruntime's contrib-op
shapes after it."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import onnx
import onnx_ir as ir

from .._errors import (
    Fail,
    InvalidModelError,
    as_status,
)
from . import contrib_shapes as _contrib_shapes
from .checks import _Node, _walk
from .limits import _expected_nbytes, _num_elements

logger = logging.getLogger(__name__)


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


_INFER_COPY_MIN_BYTES = 64 << 10


"""The copy without the bigger initializers is made only when they hold at least this much.
onnx's inference serializes the model it gets and the result is parsed back, weights and all:
for a model given as bytes or a ModelProto that is dearer than copying the graph's messages
once they hold more than a few dozen KB (inference alone, with the weights against without:
a GRU's 200 KB 0.43 -> 0.24 ms, an LSTM's 2.3 MB 4.8 -> 0.9, SqueezeNet's 5 MB 4.8 -> 3.0,
ShuffleNetV2's 9 MB 16.7 -> 4.2, MobileNetV2's 14 MB 32 -> 5.1; tiny_cnn's 18 KB 0.33 / 0.36).
A file's large weights are cut out before this (:mod:`._wire`)."""


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
                  nodes: tuple[_Node, ...] | None = None, *, strict: bool = False
                  ) -> tuple[onnx.ModelProto, list[onnx.TensorProto], set[str]]:
    """Shape inference on a copy of ``proto`` without its large weights (onnx's inference
    serializes the model it gets; ``serialized``, the bytes ``proto`` was parsed from, spare
    that when no copy is made): returns the inferred copy, the weights it lacks and the names
    among them that the copy declares as graph inputs (:func:`_attach_initializers` puts them
    back without copying). ``nodes``: the main graph walked (:func:`_walk`), when at hand.
    When the copy also leaves out ai.onnx.ml payload attributes
    (:data:`_PAYLOAD`), what inference found (``value_info``, the outputs' types) is put into
    ``proto`` instead, which is returned: parsing the inferred model back would cost as much
    as the first parse. The caller's proto is not modified otherwise.

    Declared shapes that contradict what the nodes compute are merged as onnxruntime merges
    them by default (:func:`_lenient_merge`: a warning, the computed shape kept); with
    ``strict`` (``session.strict_shape_type_inference=1``) such a model is refused. Declared
    element types that contradict the nodes are refused either way, as onnxruntime refuses
    them."""
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
        merged = None
        if not strict and _SHAPE_CONFLICT in str(e) and _ELEM_CONFLICT not in str(e):
            merged = _lenient_merge(light)
        if merged is not None:
            light = merged
        elif any(c in str(e) for c in _INCONSISTENT):
            raise as_status(InvalidModelError, Fail)(
                f"the model's declared shapes or types contradict its nodes: {e}") from e
        elif any(c in str(e) for c in _BAD_ATTRIBUTE):
            raise as_status(InvalidModelError, Fail)(
                f"a node's attributes are outside the spec (onnxruntime refuses it too): {e}"
            ) from e
        elif any(c in str(e) for c in _MISTYPED):
            raise as_status(InvalidModelError, Fail)(   # (onnxruntime: a Type Error)
                f"{_ort_type_error(str(e), proto)}a node's inputs are of types its op does not "
                f"take (onnxruntime refuses it too): {e}") from e
        else:
            try:
                light = onnx.shape_inference.infer_shapes(light, check_type=False,
                                                          strict_mode=False, data_prop=True)
            except Exception as e2:  # noqa: BLE001 - advisory; kernels see real shapes
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


_SHAPE_CONFLICT = "Inferred shape and existing shape differ"
_ELEM_CONFLICT = "Inferred elem type differs from existing elem type"
_INCONSISTENT = (_SHAPE_CONFLICT, _ELEM_CONFLICT)


"""Strict shape-inference messages that mean the model contradicts its own declarations.
(Inputs declared with shapes an op cannot combine, such as non-broadcasting ones, still load:
providers may decline such nodes with a reason, and running them is a kernel error.)"""


_MISTYPED = ("typestr: ", "has inconsistent type")

_UNSUPPORTED_TYPE = re.compile(r"\(op_type:([^,]*), node name: ([^)]*)\): (\S+) typestr: \S+, "
                               r"has unsupported type: (\S+)")


def _ort_type_error(message: str, proto: onnx.ModelProto) -> str:
    """onnxruntime's sentence for an input of a type its op does not take (``Type Error: Type
    'tensor(float16)' of input parameter (x) of operator (DynamicQuantizeLinear) in node (n)
    is invalid.``; code written for onnxruntime matches it), from onnx's message and the main
    graph's node of that name; "" when it cannot be told."""
    found = _UNSUPPORTED_TYPE.search(message)
    if found is None:
        return ""
    op_type, name, formal, typ = found.groups()
    node = next((n for n in proto.graph.node if n.op_type == op_type and n.name == name), None)
    if node is None:
        return ""
    try:
        opset = max((i.version for i in proto.opset_import if i.domain == node.domain), default=1)
        formals = [p.name for p in onnx.defs.get_schema(op_type, opset, node.domain).inputs]
        value = node.input[formals.index(formal)]
    except (onnx.defs.SchemaError, ValueError, IndexError):
        return ""
    return (f"This is an invalid model. Type Error: Type '{typ}' of input parameter ({value}) "
            f"of operator ({op_type}) in node ({name}) is invalid. ")


_BAD_ATTRIBUTE = ("must only contain positive values", "must not contain negative values",
                  "must be in [", "Invalid value(", "Invalid value of attribute")


"""onnx's inference messages about attribute values outside the spec (a Conv or pool's zero
stride or dilation, negative pads, an axis outside the input's rank): onnxruntime refuses the
model; kernels divided by them or failed at run time."""


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


def _graphs(g: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``g`` and every subgraph body in it, in a fixed order (node, then attribute order): two
    protos of the same structure list their graphs in the same order."""
    yield g
    for node in g.node:
        for a in node.attribute:
            if a.HasField("g"):
                yield from _graphs(a.g)
            for body in a.graphs:
                yield from _graphs(body)


def _declared_dims(tp: onnx.TypeProto) -> list[tuple[str, int | str | None]] | None:
    """A tensor type's declared dims as (kind, value) pairs; None when it declares no shape."""
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    out: list[tuple[str, int | str | None]] = []
    for d in tp.tensor_type.shape.dim:
        which = d.WhichOneof("value")
        out.append((which or "", d.dim_value if which == "dim_value"
                    else d.dim_param if which == "dim_param" else None))
    return out


def _merged_dims(declared: list, inferred: list | None) -> tuple[list | None, bool]:
    """(the dims to keep, whether the two conflict): onnx's merge where they agree (a known
    size wins over a symbol or nothing); where they conflict, what the nodes compute. (That is
    where onnxruntime ends: its lenient merge leaves the conflicting dims unknown, or the rank
    unknown, and its next graph resolution infers them again from the nodes.)"""
    if inferred is None:
        return declared, False
    if len(inferred) != len(declared):
        return inferred, True
    out, conflict = [], False
    for (dk, dv), (ik, iv) in zip(declared, inferred):
        if dk == "dim_value" and ik == "dim_value" and dv != iv:
            out.append((ik, iv))
            conflict = True
        elif dk == "dim_value" or (ik != "dim_value" and dk):
            out.append((dk, dv))
        else:
            out.append((ik, iv))
    return out, conflict


def _set_dims(tp: onnx.TypeProto, dims: list | None) -> None:
    tt = tp.tensor_type
    tt.ClearField("shape")
    if dims is None:
        return
    shape = tt.shape
    shape.SetInParent()   # (a rank-0 shape is a shape with no dims, not no shape)
    for kind, value in dims:
        d = shape.dim.add()
        if kind == "dim_value":
            d.dim_value = value
        elif kind == "dim_param":
            d.dim_param = value


def _lenient_merge(model: onnx.ModelProto | bytes) -> onnx.ModelProto | None:
    """Shape inference of a model whose declared shapes (value infos, graph outputs, in every
    graph) contradict what its nodes compute, as onnxruntime's default (lenient) merge does
    it: inferred without the declared shapes, each declaration then merged with what was
    inferred for it; where one contradicts it, what the nodes compute is kept, with a warning
    naming the value. skl2onnx declares a binary
    RidgeClassifier's scores ``[N, 2]`` that its nodes make ``[N, 1]``, a PLSRegression's
    intermediate sum ``[N, 6]`` that is ``[N, 1]``. None if inference still fails."""
    if isinstance(model, (bytes, bytearray)):
        model = onnx.ModelProto.FromString(bytes(model))
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    declared: list[list[tuple[str, list | None]]] = []
    for g in _graphs(bare.graph):
        entries = []
        for info in (*g.value_info, *g.output):
            dims = _declared_dims(info.type)
            entries.append((info.name, dims))
            if dims is not None:
                info.type.tensor_type.ClearField("shape")
        declared.append(entries)
    try:
        inferred = onnx.shape_inference.infer_shapes(bare, check_type=True, strict_mode=True,
                                                     data_prop=True)
    except Exception:  # noqa: BLE001 - the caller's lenient inference takes over
        return None
    for g, entries in zip(_graphs(inferred.graph), declared):
        found = {info.name: info for info in (*g.value_info, *g.output)}
        for name, dims in entries:
            if dims is None:
                continue
            info = found.get(name)
            if info is None:
                continue
            got = _declared_dims(info.type)
            dims_kept, conflict = _merged_dims(dims, got)
            if conflict:
                logger.warning(
                    "the model declares %r with shape %s, its nodes make it %s: taken as "
                    "computed (onnxruntime's lenient merge; the session config entry "
                    "session.strict_shape_type_inference=1 refuses such a model)", name,
                    _show(dims), _show(got))
            if info.type.WhichOneof("value") == "tensor_type":
                _set_dims(info.type, dims_kept)
    return inferred


def _show(dims: list | None) -> str:
    if dims is None:
        return "(no shape)"
    return "[" + ", ".join("?" if v is None else str(v) for _, v in dims) + "]"
