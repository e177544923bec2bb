"""Applying onnxscript rewrite rules, each only where its pattern can start.

onnxscript's ``RewriteRuleSet`` tries every rule at every node (``try_rewrite`` runs the
matcher, ~15 us a try even when the op type differs at once): on BERT-base int8 that was
17,750 tries and most of the optimizer's time. A pattern's match starts at its (first) output
node, so a rule whose output node has a fixed op type can only match at nodes of that type,
and only where the producers of the node's inputs have the op types the pattern names
(:func:`_prefilter`). :class:`_Driver` runs a rule set so, with onnxscript's matcher and
replacement and onnxscript's order of visits; rules whose output op is not a fixed name are
tried everywhere. A rule set none of whose rules could match (each pattern holds an op type
the model has no node of) is not run.

A constant the optimizer widened from half precision (its value's ``meta`` has
:data:`STORED_AS`) matches a pattern's constant when it equals that constant rounded to the type
it was stored in, as onnxruntime's ``IsInitializerWithExpectedValue`` compares a float16
initializer: an fp16 model's ``Div(x, 1.4140625)`` is GELU's ``x / sqrt(2)``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import onnx_ir as ir

from ..graph.nodes import all_nodes, attrs_of, has_bodies

logger = logging.getLogger(__name__)

STORED_AS = "onnxplex.stored_as"
"""``Value.meta`` key: the half-precision type a float32 constant was widened from."""


def _root_op(rule: Any) -> str | None:
    """The op type every match of ``rule`` starts at, or None when not fixed (or when this
    onnxscript keeps its pattern elsewhere: then the rule is simply tried everywhere)."""
    try:
        ident = rule._target_pattern.output_nodes[0].op_identifier()
    except (AttributeError, IndexError, TypeError):
        return None
    if ident is None or not isinstance(ident[1], str) or not ident[1]:
        return None
    return ident[1]


class _Rooted:
    """``rule``, tried only at nodes of op type ``op`` (None: any) that ``gate`` (when given)
    accepts (everything else is the rule's)."""

    __slots__ = ("_rule", "_op", "_gate")

    def __init__(self, rule: Any, op: str | None,
                 gate: Callable[[ir.Node], bool] | None = None) -> None:
        self._rule = rule
        self._op = op
        self._gate = gate

    def try_rewrite(self, model: ir.Model, graph: Any, node: ir.Node, **kwargs: Any) -> Any:
        if self._op is not None and node.op_type != self._op:
            return None
        if self._gate is not None and not self._gate(node):
            return None
        return self._rule.try_rewrite(model, graph, node, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rule, name)

    def __repr__(self) -> str:
        return f"_Rooted({self._rule!r}, {self._op!r})"


def _rules_of(rules: Any) -> list | None:
    """The rules of a ``RewriteRuleSet``, a single ``RewriteRule``, or an onnxscript
    ``fuse_*`` function (``apply_fusion_rules(rules)``'s closure); None if neither."""
    from onnxscript.rewriter import RewriteRule, RewriteRuleSet

    if callable(rules) and not isinstance(rules, (RewriteRule, RewriteRuleSet)):
        try:
            rules = inspect.getclosurevars(rules).nonlocals.get("rules")
        except (TypeError, ValueError):
            return None
    if isinstance(rules, RewriteRuleSet):
        return list(rules.rules)
    if isinstance(rules, RewriteRule):
        return [rules]
    return None


def apply_rules(model: ir.Model, rules: Any,
                gate: Callable[[ir.Node], bool] | None = None) -> int:
    """Apply ``rules`` (a ``RewriteRuleSet``, a ``RewriteRule``, a list of rules or an
    onnxscript ``fuse_*`` function) to ``model`` with root-op filtering, and only at nodes
    ``gate`` accepts when it is given (a cheap necessary condition for any of the rules to
    match there); the count of rewrites."""
    found = list(rules) if isinstance(rules, (list, tuple)) else _rules_of(rules)
    if found is None:  # something else callable: run it as it is
        return int(rules(model) or 0)
    present = _op_types(model)
    rooted = [(r, _root_op(r)) for r in found]
    # A rule whose pattern needs an op type the model lacks cannot match now; when no rule of
    # the set can, none ever will in this run (only a rewrite brings new op types), and the
    # run, which would still walk the graph (constant propagation, the rule loop), is skipped.
    # Otherwise every rule is tried: one rewrite may make another rule's op types
    # (Transpose + MatMul -> FusedMatMul, then FusedMatMul + Div).
    viable = [(r, op) for r, op in rooted if _required_ops(r) <= present]
    if not viable or (gate is not None and not _any_gated(model, viable, gate)):
        return 0
    _match_widened_constants()
    with _APPLYING, _state_kept(found):
        if any(getattr(r, "as_function", False) for r in found):
            # (a rule that makes a function of what it matched: onnxscript's own loop)
            from onnxscript.rewriter import RewriteRuleSet

            wrapped = [_Rooted(r, op, gate) if op is not None or gate is not None else r
                       for r, op in rooted]
            return int(RewriteRuleSet(wrapped).apply_to_model(model) or 0)
        return _Driver(model, rooted, gate).run()


@contextlib.contextmanager
def _state_kept(rules: list[Any]) -> Iterator[None]:
    """Put the rule objects' attributes back as they were once the rules have run. Rules are
    shared objects (onnxscript's built at import, ours once), and matching leaves state on
    them: the matcher keeps the graph it last matched in and its last match, a class-based
    rule what its check found (values, nodes). That state reached the whole graph of the last
    model rewritten, with its constants, and kept it alive after its session was gone (for
    GPT-2, the 147 MB embedding as the optimizer had read it). Attributes a run added are
    removed, replaced ones restored (each run sets what it needs again)."""
    saved = [(h, dict(vars(h))) for h in _holders(rules)]
    try:
        yield
    finally:
        for h, before in saved:
            now = vars(h)
            for key in [k for k in now if k not in before]:
                del now[key]
            for key, value in before.items():
                if now.get(key, _MISSING) is not value:
                    now[key] = value


_MISSING = object()

# rule set (its rules' identities) -> (the rules, their state holders): the rule objects are
# built once and kept, so the walk over their attributes (~80 us for onnxscript's FusedMatMul
# set, at every session that runs it) is done once too
_HOLDERS: dict[tuple[int, ...], tuple[list[Any], list[Any]]] = {}


def _holders(rules: list[Any]) -> list[Any]:
    """The objects whose attributes a run of ``rules`` may change: the rules, their attribute
    values and the owners of their bound methods, of onnxscript's or onnxplex's classes."""
    key = tuple(map(id, rules))
    hit = _HOLDERS.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], rules)):
        return hit[1]
    holders: dict[int, Any] = {}
    for rule in rules:
        for obj in (rule, *getattr(rule, "__dict__", {}).values()):
            owner = getattr(obj, "__self__", None)   # a bound method: a class-based rule
            for h in (obj, owner):
                if (h is not None and id(h) not in holders and hasattr(h, "__dict__")
                        and type(h).__module__.startswith(("onnxscript", "onnxplex"))):
                    holders[id(h)] = h
    found = list(holders.values())
    if len(_HOLDERS) < 256:   # (rule sets are few; a caller building new ones each time: no)
        _HOLDERS[key] = (list(rules), found)
    return found


class _Driver:
    """onnxscript's rule loop (``RewriteRuleSet.apply_to_model``), rewrites alike, without its
    costs where a model has hundreds of nodes and a set a dozen rules: every rule tried at
    every node, every node's attributes looked through for subgraphs, the whole graph renamed
    after each set (onnx-ir's ``NameFixPass``, ~1 ms on BERT-base). Here the rules are looked
    up by the node's op type, a rule's pattern is checked against the node's producers' op
    types before onnxscript's matcher runs (:func:`_prefilter`), bodies are looked for once,
    and only the nodes the rewrites made are given unique names.

    As in onnxscript: nodes are visited in graph order, the nodes a rewrite inserts included;
    at each node the rules are tried in order and the first match is applied; the model's
    functions are rewritten after the main graph; Constant outputs are propagated first."""

    def __init__(self, model: ir.Model, rooted: list[tuple[Any, str | None]],
                 gate: Callable[[ir.Node], bool] | None) -> None:
        self.model = model
        self.rules = [r for r, _ in rooted]
        self.gate = gate
        checked = [(r, op, _prefilter(r)) for r, op in rooted]
        anywhere = [(r, check) for r, op, check in checked if op is None]
        # per root op type: its rules and the rules of no fixed root, in the set's order
        self.by_op: dict[str, list[tuple[Any, Callable[[ir.Node], bool] | None]]] = {
            op: [(r, check) for r, o, check in checked if o in (op, None)]
            for op in {op for _, op, _ in checked if op is not None}}
        self.anywhere = anywhere
        self.made: list[ir.Node] = []

    def run(self) -> int:
        from onnxscript.optimizer import basic_constant_propagation

        model = self.model
        functions = list(model.functions.values())   # not those the rewrites add
        count = 0
        for graph in (model.graph, *functions):
            basic_constant_propagation(graph)
            count += self._rewrite(graph)
        if count:
            if any(not getattr(r, "remove_nodes", True) for r in self.rules):
                from ._basic import remove_unused

                remove_unused(model)
            _name_made(model, self.made)
        return count

    def _rewrite(self, graph: ir.Graph | ir.Function) -> int:
        for rule in self.rules:
            if getattr(rule, "graph_pre_visitor", None):
                rule.graph_pre_visitor()
        bodies = has_bodies(graph)
        made_here: set[int] = set()
        count = 0
        for node in graph:
            candidates = self.by_op.get(node.op_type, self.anywhere)
            if candidates and (self.gate is None or self.gate(node)):
                for rule, check in candidates:
                    if check is not None and not check(node):
                        continue
                    delta = rule.try_rewrite(self.model, graph, node)
                    if delta is None or not self._replace(graph, node, rule, delta):
                        continue
                    made_here.update(id(n) for n in delta.new_nodes)
                    count += 1
                    break
            if bodies or id(node) in made_here:
                for attr in attrs_of(node):
                    if attr.type == ir.AttributeType.GRAPH:
                        count += self._rewrite(attr.value)
                    elif attr.type == ir.AttributeType.GRAPHS:
                        for body in attr.value:
                            count += self._rewrite(body)
        for rule in self.rules:
            if getattr(rule, "graph_post_visitor", None):
                rule.graph_post_visitor()
        return count

    def _replace(self, graph: ir.Graph | ir.Function, node: ir.Node, rule: Any,
                 delta: Any) -> bool:
        """Put ``delta`` (onnxscript's ``ReplacementSubgraph``) in place of what it matched,
        as onnxscript's loop does; False when it cannot be (initializers into a function)."""
        from onnx_ir import convenience
        from onnxscript.optimizer import basic_constant_propagation
        from onnxscript.rewriter import _rewrite_rule as rr

        if delta.new_initializers:
            if isinstance(graph, ir.Function):
                return False
            for init in delta.new_initializers:
                graph.initializers[init.name] = init
        basic_constant_propagation(delta.new_nodes)
        tag = getattr(rr, "RULE_NAME_TAG", None)
        if tag and getattr(rule, "name", None):
            for n in delta.new_nodes:
                n.metadata_props[tag] = rule.name
        convenience.replace_nodes_and_values(
            graph, node, delta.match.nodes if getattr(rule, "remove_nodes", True) else [],
            delta.new_nodes, delta.match.outputs, delta.new_outputs)
        merger = getattr(rr, "_default_metadata_merger", None)
        if merger is not None and getattr(rr, "merge_metadata", False):
            merger.copy_merged_metadata(delta.match.nodes, delta.new_nodes)
        self.made.extend(delta.new_nodes)
        return True


def _name_made(model: ir.Model, made: list[ir.Node]) -> None:
    """Unique names for the nodes the rewrites made and their outputs (onnxscript's builder
    names them per rewrite, so names repeat across rewrites), where they clash with a name
    in use or are empty; the model's other names stay as they are. Naming as onnx-ir's
    ``NameFixPass``: an unnamed node is ``node``, an unnamed value ``v``, a clash gets
    ``_<n>`` appended."""
    made_ids = {id(n) for n in made}
    for root in (model.graph, *model.functions.values()):
        graphs = [root, *root.subgraphs()] if has_bodies(root) else [root]
        everything = [n for g in graphs for n in g]
        ours = [n for n in everything if id(n) in made_ids]
        if not ours:
            continue
        values = {v.name for g in graphs for v in g.inputs}
        values.update(name for g in graphs if isinstance(g, ir.Graph) for name in g.initializers)
        nodes: set[str] = set()
        for n in everything:
            if id(n) not in made_ids:
                nodes.add(n.name or "")
                values.update(v.name for v in n.outputs if v.name)
        # A graph output keeps its name (the rewrite gave the new value the replaced one's,
        # unique in its graph): a body's output names can matter to the node holding it
        # (BeamSearch reads its encoder's by name), and a sibling body may use the name.
        kept = {id(v) for g in graphs for v in g.outputs}
        counts: dict[str, int] = {}
        for n in ours:
            if not n.name or n.name in nodes:
                n.name = _unique(n.name or "node", nodes, counts)
            else:
                nodes.add(n.name)
            for v in n.outputs:
                if v.name and id(v) in kept:
                    values.add(v.name)
                elif not v.name or v.name in values:
                    v.name = _unique(v.name or "v", values, counts)
                else:
                    values.add(v.name)


def _unique(preferred: str, used: set[str], counts: dict[str, int]) -> str:
    name = preferred
    while name in used:
        counts[preferred] = counts.get(preferred, 0) + 1
        name = f"{preferred}_{counts[preferred]}"
    used.add(name)
    return name


def _prefilter(rule: Any) -> Callable[[ir.Node], bool] | None:
    """A check that ``rule`` may match at a node, from op types alone: the pattern's nodes
    that compute an input of another must be the producers of that input (same output index,
    same op type where the pattern fixes one; of alternatives, one must fit). A necessary
    condition only (onnxscript's matcher decides), and ~1 us where a failing match costs
    ~10-20 us. None when the pattern is not one this reads (the matcher alone decides)."""
    try:
        from onnxscript.rewriter import _pattern_ir as pir

        pattern = rule._target_pattern
        if len(pattern.output_nodes) != 1:
            return None
        root = pattern.output_nodes[0]
    except (AttributeError, ImportError, TypeError):
        return None

    def node_fits(p: Any, node: ir.Node) -> bool:
        ident = p.op_identifier()
        if ident is not None and isinstance(ident[1], str) and ident[1] != node.op_type:
            return False
        if len(node.inputs) > len(p.inputs) and not p.allow_other_inputs:
            return False
        return all(value_fits(pv, v) for pv, v in zip(p.inputs, node.inputs))

    def value_fits(pv: Any, v: ir.Value | None) -> bool:
        if isinstance(pv, pir.NodeOutputPattern):
            producer = v.producer() if v is not None else None
            return (producer is not None and v.index() == pv.output_index
                    and node_fits(pv.producer(), producer))
        alternatives = _alternatives(pv)
        return alternatives is None or any(value_fits(alt, v) for alt in alternatives)

    return lambda node: node_fits(root, node)


def _alternatives(v: Any) -> list[Any] | None:
    """The alternatives of an ``OrValue`` pattern (either kind onnxscript has), else None."""
    pir = _pattern_ir()
    if isinstance(v, pir.OpIdDispatchOr):
        return [alt for _, alt in v._op_to_pattern.values()]
    if isinstance(v, pir.BacktrackingOr):
        return list(v._values)
    return None


@functools.cache
def _pattern_ir() -> Any:
    from onnxscript.rewriter import _pattern_ir as pir

    return pir


# Rule objects are built once and shared (onnxscript's own at import, ours on first use), and
# a rule may keep what its check found for its rewrite on itself: sessions created on several
# threads at once take turns applying rules.
_APPLYING = threading.Lock()


def _graphs(model: ir.Model) -> list[Any]:
    return [model.graph, *model.functions.values()]


def _op_types(model: ir.Model) -> frozenset[str]:
    """The op types of the model's nodes, subgraph bodies and functions included."""
    return frozenset(node.op_type for graph in _graphs(model) for node in all_nodes(graph))


def _any_gated(model: ir.Model, rules: list[tuple[Any, str | None]],
               gate: Callable[[ir.Node], bool]) -> bool:
    """Whether a node that one of ``rules`` could start at passes ``gate``."""
    ops = {op for _, op in rules}
    anywhere = None in ops
    for graph in _graphs(model):
        for node in all_nodes(graph):
            if (anywhere or node.op_type in ops) and gate(node):
                return True
    return False


# per rule object, for as long as it lives (rule sets built per call come and go)
_REQUIRED: weakref.WeakKeyDictionary[Any, frozenset[str]] = weakref.WeakKeyDictionary()


def _required_ops(rule: Any) -> frozenset[str]:
    """The op types every match of ``rule`` contains: its pattern's nodes reached from the
    output nodes through node inputs, and of alternatives (``OrValue``) the op types all of
    them need. Empty when this onnxscript keeps its pattern elsewhere (the rule is then
    always tried)."""
    try:
        return _REQUIRED[rule]
    except (KeyError, TypeError):   # (TypeError: not weakly referenceable, not kept)
        pass
    try:
        from onnxscript.rewriter import _pattern_ir as pir

        memo: dict[int, frozenset[str]] = {}

        def of_node(node: Any) -> frozenset[str]:
            if id(node) not in memo:
                memo[id(node)] = frozenset()   # (patterns are acyclic; this only guards)
                ident = node.op_identifier()
                ops = {ident[1]} if ident is not None and isinstance(ident[1], str) \
                    and ident[1] else set()
                for v in node.inputs:
                    ops |= of_value(v)
                memo[id(node)] = frozenset(ops)
            return memo[id(node)]

        def of_value(v: Any) -> frozenset[str]:
            if isinstance(v, pir.NodeOutputPattern):
                return of_node(v.producer())
            sets = [of_value(alt) for alt in _alternatives(v) or ()]
            return frozenset.intersection(*sets) if sets else frozenset()

        found = frozenset().union(*(of_node(n) for n in rule._target_pattern.output_nodes))
    except (AttributeError, ImportError, TypeError):
        found = frozenset()
    try:
        _REQUIRED[rule] = found
    except TypeError:
        pass
    return found


def _stored_equal(expected: Any, value: ir.Value) -> bool:
    """Whether ``value``, a constant widened from half precision, holds ``expected`` (a pattern
    constant: a number or a list) rounded to the type it was stored in."""
    stored = value.meta.get(STORED_AS)
    tensor = value.const_value
    if stored is None or tensor is None:
        return False
    got = tensor.numpy()
    want = np.asarray(expected, np.float32)
    if got.shape != want.shape:
        return False
    return bool(np.array_equal(want.astype(stored.numpy()).astype(np.float32), got))


@functools.cache
def _match_widened_constants() -> None:
    """Install the widened-constant comparison (module docstring) in onnxscript's matcher,
    once. Without the matcher's hook (another onnxscript) the fusions of half-precision
    models that compare constants are missed, never wrong: a debug message says so."""
    try:
        from onnxscript.rewriter import _matcher

        original = _matcher.SimplePatternMatcher._match_constant
    except (ImportError, AttributeError) as e:
        logger.debug("onnxscript's matcher has no _match_constant (%s): constants widened "
                     "from half precision match patterns only within float32 tolerance", e)
        return

    @functools.wraps(original)
    def match_constant(self: Any, pattern_constant: Any, value: ir.Value) -> bool:
        if value.meta.get(STORED_AS) is not None and _stored_equal(
                getattr(pattern_constant, "_value", None), value):
            return True
        return original(self, pattern_constant, value)

    _matcher.SimplePatternMatcher._match_constant = match_constant
