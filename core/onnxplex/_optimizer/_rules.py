"""Applying onnxscript rewrite rules, each only where its pattern can start.

onnxscript's ``RewriteRuleSet`` tries every rule at every node (``try_rewrite`` runs the
matcher, ~15 us a try even when the op type differs at once): on BERT-base int8 that was
17,750 tries and most of the optimizer's time. A pattern's match starts at its (first) output
node, so a rule whose output node has a fixed op type can only match at nodes of that type:
:func:`apply_rules` wraps each such rule so that other nodes are passed over before the
matcher runs. Rules whose output op is not a fixed name are tried everywhere, as before.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import onnx_ir as ir


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
    wrapped = [_Rooted(r, op, gate) if (op := _root_op(r)) is not None or gate is not None
               else r for r in found]
    return int(RewriteRuleSet(wrapped).apply_to_model(model) or 0)
