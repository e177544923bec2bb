"""Applying onnxscript rewrite rules, each only where its pattern can start.

onnxscript's ``RewriteRuleSet`` tries every rule at every node (``try_rewrite`` runs the
matcher, ~15 us a try even when the op type differs at once): on BERT-base int8 that was
17,750 tries and most of the optimizer's time. A pattern's match starts at its (first) output
node, so a rule whose output node has a fixed op type can only match at nodes of that type:
:func:`apply_rules` wraps each such rule so that other nodes are passed over before the
matcher runs. Rules whose output op is not a fixed name are tried everywhere, as before.
A rule set none of whose rules could match (each pattern holds an op type the model has no
node of) is not run.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable
from typing import Any

import onnx_ir as ir

from .._graph import all_nodes


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
    from onnxscript.rewriter import RewriteRuleSet

    found = list(rules) if isinstance(rules, (list, tuple)) else _rules_of(rules)
    if found is None:  # something else callable: run it as it is
        return int(rules(model) or 0)
    present = _op_types(model)
    rooted = [(r, _root_op(r)) for r in found]
    # A rule whose pattern needs an op type the model lacks cannot match now; when no rule of
    # the set can, none ever will in this run (only a rewrite brings new op types), and
    # onnxscript's run, which would still walk the graph several times (constant propagation,
    # the rule loop, its own dead-node removal), is skipped. Otherwise every rule is tried:
    # one rewrite may make another rule's op types (Transpose + MatMul -> FusedMatMul, then
    # FusedMatMul + Div).
    viable = [(r, op) for r, op in rooted if _required_ops(r) <= present]
    if not viable or (gate is not None and not _any_gated(model, viable, gate)):
        return 0
    wrapped = [_Rooted(r, op, gate) if op is not None or gate is not None else r
               for r, op in rooted]
    with _APPLYING:
        return int(RewriteRuleSet(wrapped).apply_to_model(model) or 0)


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
            if isinstance(v, pir.OpIdDispatchOr):
                alternatives = [alt for _, alt in v._op_to_pattern.values()]
            elif isinstance(v, pir.BacktrackingOr):
                alternatives = list(v._values)
            else:
                return frozenset()
            sets = [of_value(alt) for alt in alternatives]
            return frozenset.intersection(*sets) if sets else frozenset()

        found = frozenset().union(*(of_node(n) for n in rule._target_pattern.output_nodes))
    except (AttributeError, ImportError, TypeError):
        found = frozenset()
    try:
        _REQUIRED[rule] = found
    except TypeError:
        pass
    return found
