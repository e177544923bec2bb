"""What a model must pass before anything trusts it: the protobuf parse, a walk of every
(sub)graph, IR and opset versions, each node against its onnx schema, function calls,
control-flow bodies, stored tensors' sizes, names and structure (dangling inputs, duplicates,
cycles); each failure an :class:`~onnxplex.InvalidModelError` subclass naming the culprit.
Declared negative dimensions are read as unknown, as onnxruntime reads them."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from .._errors import (
    Fail,
    InvalidArgument,
    InvalidModelError,
    InvalidProtobuf,
    UnsupportedModelError,
    as_status,
)
from .external import _ExternalFiles
from .limits import _elem_bits, _num_elements, check_tensor_size, max_tensor_bytes
from .nodes import _BODY_ATTRS, OPSET_KEY, attrs_of

logger = logging.getLogger(__name__)


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


# Domains onnxruntime registers ops in, each with the opset it assumes for a model that uses
# the domain without importing it (its newest; onnx's own from the installed onnx package).
_IMPLIED_DOMAINS = {"": onnx.defs.onnx_opset_version(),
                    "ai.onnx.ml": onnx.defs.onnx_ml_opset_version(), "com.microsoft": 1,
                    "com.microsoft.nchwc": 1, "com.microsoft.experimental": 1,
                    "ai.onnx.training": 1, "ai.onnx.preview.training": 1}


def _check_versions(proto: onnx.ModelProto, walked: _Walked) -> bool:
    """IR and opset versions, and that each node's domain is imported; a domain onnxruntime
    knows (ONNX's own, com.microsoft, ai.onnx.ml ...) that a node uses without its import is
    imported at its newest opset, as onnxruntime imports it (it runs such a model). Whether
    an import was added."""
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
    if not proto.opset_import:
        raise as_status(InvalidModelError, Fail)(   # (onnxruntime: FAIL)
            "the model imports no opset; ONNX models import at least one (onnxruntime: "
            "Missing opset in the model)")
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
    # refuses it too, but for the domains it knows: _IMPLIED_DOMAINS); model-local functions
    # define their own domains.
    known = set(seen) | {f.domain for f in proto.functions}
    added = False
    for g in walked.graphs():
        for node in g.nodes:
            for text in (node.op_type, node.domain, node.name, *node.inputs, *node.outputs,
                         *(a.name for a in node.attrs)):
                if not isinstance(text, str):   # protobuf hands back bytes that are not UTF-8
                    raise InvalidModelError(f"{g.where}: a node's op type, domain or names "
                                            f"hold bytes that are not UTF-8 text: {text!r}")
            domain = "" if node.domain == "ai.onnx" else node.domain
            if domain not in known and domain in _IMPLIED_DOMAINS:
                version = _IMPLIED_DOMAINS[domain]
                logger.info("the model uses domain %r without importing it; imported at opset "
                            "%d, as onnxruntime does", domain or "ai.onnx", version)
                proto.opset_import.append(onnx.helper.make_opsetid(domain, version))
                known.add(domain)
                added = True
            elif domain not in known:
                raise InvalidModelError(
                    f"{g.where}: node {node.name!r} ({node.op_type}) is in domain "
                    f"{domain or 'ai.onnx'!r}, which the model does not import (opset_import); "
                    f"onnxruntime: No opset import for domain {domain!r}")
    return added


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


def _negative_dims_unknown(walked: _Walked) -> bool:
    """Declared dimensions below 0 (``dim_value: -1``, as some exporters write a batch size)
    in the inputs, outputs and value infos of every graph become unknown dimensions, as
    onnxruntime reads them (``get_inputs()`` shows ``None`` there, any size is fed). Done
    before onnx's shape inference sees them: it crashes the interpreter on some (GatherND's
    inference, reading a negative index dimension). Whether any was changed."""
    changed = False
    for g in walked.graphs():
        gp = g.proto
        for infos in (gp.input, gp.output, gp.value_info):
            for info in infos:
                for d in info.type.tensor_type.shape.dim:   # (empty for other kinds of type)
                    if d.dim_value < 0:
                        logger.info("%s: %r declares dimension %d; read as unknown, as "
                                    "onnxruntime reads it", g.where, info.name, d.dim_value)
                        d.ClearField("dim_value")
                        changed = True
    return changed


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
