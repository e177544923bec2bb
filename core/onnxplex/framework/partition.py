"""Ordered, greedy, deterministic partitioning over execution providers.

Providers claim nodes in the user's priority order; each sees only the nodes no earlier
provider took. Every claim is validated (the nodes exist, were offered, are claimed once) and
every fused group must stay *convex*: contracting it into one node must not create a cycle
through nodes outside it (including other fused groups). A non-convex claim is split into
convex pieces and the split is recorded. Nodes nobody claims are an error that lists each
provider's reason.

The result is a :class:`PartitionPlan`: data that says, for every node, who runs it, in which
partition, and why each higher-priority provider declined it.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from .._errors import CapabilityError, Fail, InvalidGraph, PartitionError, as_status
from .._records import record
from ..graph.model import GraphView, Model, NodeView
from .provider import Capability, ExecutionProvider

__all__ = ["Partition", "PartitionPlan", "NodePlacement", "partition", "convex_groups"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Partition:
    """One unit of execution: nodes a provider runs as one kernel (fused when several)."""

    id: int
    provider: str
    nodes: tuple[int, ...]
    name: str = ""
    note: str = ""
    node_notes: tuple[tuple[int, str], ...] = ()
    """Per-node detail from the claiming :class:`NodeGroup` (``(index, note)`` pairs)."""

    @property
    def fused(self) -> bool:
        return len(self.nodes) > 1

    def node_note(self, index: int) -> str:
        """The provider's note on one of this partition's nodes ('' when none)."""
        return next((n for i, n in self.node_notes if i == index), "")


@dataclass(frozen=True, slots=True, weakref_slot=True)
class NodePlacement:
    """Where one node runs and why every provider before it declined it."""

    index: int
    name: str
    op_type: str
    domain: str
    provider: str
    partition: int
    declined: tuple[tuple[str, str], ...]

    @property
    def fell_back(self) -> bool:
        """True when a provider ranked above the one running the node declined it."""
        return bool(self.declined)


@dataclass
class PartitionPlan:
    """The placement of every node, the partitions, and notes (split claims, disabled providers)."""

    providers: tuple[str, ...]
    partitions: list[Partition]
    placements: list[NodePlacement]
    notes: list[str] = field(default_factory=list)

    def assignment(self) -> dict[str, str]:
        """Node display name -> provider name."""
        return {_display(p): p.provider for p in self.placements}

    def notes_count(self) -> dict[str, int]:
        """How many nodes each partition note covers (e.g. reference-fallback nodes)."""
        out: dict[str, int] = {}
        for part in self.partitions:
            if part.note:
                out[part.note] = out.get(part.note, 0) + len(part.nodes)
        return out

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {p: 0 for p in self.providers}
        for pl in self.placements:
            out[pl.provider] = out.get(pl.provider, 0) + 1
        return out

    def explain(self, node: str | int | None = None) -> str:
        """Why a node (or every node that fell back) runs where it does, as text."""
        rows = self.placements
        if node is not None:
            rows = [p for p in rows if node in (p.index, p.name, _display(p))]
            if not rows:
                raise KeyError(f"no node {node!r} in the plan")
        else:
            rows = [p for p in rows if p.fell_back]
        lines = []
        for p in rows:
            lines.append(f"{_display(p)} ({p.op_type}) -> {p.provider}")
            detail = self.partitions[p.partition].node_note(p.index) if self.partitions else ""
            if detail:
                lines.append(f"    {p.provider}: {detail}")
            for prov, reason in p.declined:
                lines.append(f"    {prov}: {reason}")
        return "\n".join(lines) if lines else "no node fell back"

    def to_dict(self) -> dict[str, Any]:
        return {
            "providers": list(self.providers),
            "counts": self.counts(),
            "partitions": [{"id": p.id, "provider": p.provider, "nodes": list(p.nodes),
                            "name": p.name, "note": p.note} for p in self.partitions],
            "nodes": [{"index": p.index, "name": _display(p), "op_type": p.op_type,
                       "domain": p.domain, "provider": p.provider, "partition": p.partition,
                       "note": self.partitions[p.partition].node_note(p.index),
                       "declined": [{"provider": a, "reason": b} for a, b in p.declined]}
                      for p in self.placements],
            "notes": list(self.notes),
        }

    def report(self) -> str:
        """The human-readable placement report the CLI prints: per provider its nodes and
        partitions, then a line per node with what its provider noted and why each provider
        ranked above declined it. A long reason or note shared by several nodes (every Shape
        declined alike, a kernel note on each node of a family) is printed once, numbered,
        under the table, and the nodes refer to it: a report is read, not scrolled past."""
        counts = self.counts()
        lines = ["Providers (priority order): " + ", ".join(self.providers)]
        for prov in self.providers:
            parts = [p for p in self.partitions if p.provider == prov]
            fused = sum(1 for p in parts if p.fused)
            lines.append(f"  {prov}: {counts.get(prov, 0)} nodes in {len(parts)} partitions "
                         f"({fused} fused)")
        rows = []
        for p in self.placements:
            part = self.partitions[p.partition]
            subs = [("", part.node_note(p.index))] if part.node_note(p.index) else []
            subs += [(f"declined by {prov}", reason) for prov, reason in p.declined]
            rows.append((p, part, subs))
        shared = _SharedNotes(
            [part.note for _, part, _ in rows if part.note]
            + [f"{label}: {text}" if label else text
               for _, _, subs in rows for label, text in subs])
        name_w = min(max([4, *(len(_display(p)) for p, _, _ in rows)]), 60)
        op_w = max([2, *(len(p.op_type) for p, _, _ in rows)])
        lines.append("")
        lines.append(f"{'#':>4}  {'node':<{name_w}} {'op':<{op_w}} provider")
        for p, part, subs in rows:
            lines.append(f"{p.index:>4}  {_display(p):<{name_w}} {p.op_type:<{op_w}} "
                         f"{p.provider}"
                         + (f"  [partition {p.partition}, fused]" if part.fused else "")
                         + (f"  [{shared.ref(part.note)}]" if part.note else ""))
            for label, text in subs:
                full = f"{label}: {text}" if label else text
                if shared.numbered(full):
                    lines.append(f"{'':>6}{label + ' ' if label else 'note '}"
                                 f"{shared.ref(full)}")
                else:
                    lines.append(f"{'':>6}{full}")
        if shared.order:
            lines.append("")
            lines.append("Shared by several nodes:")
            lines.extend(f"  ({k}) {text}  [{shared.counts[text]} nodes]"
                         for k, text in enumerate(shared.order, 1))
        if self.notes:
            lines.append("")
            lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


class _SharedNotes:
    """Texts of the placement report given for more than one node and longer than a short
    label (those stay inline): numbered in order of first appearance."""

    SHORT = 40

    def __init__(self, texts: list[str]) -> None:
        self.counts = collections.Counter(texts)
        self.order: list[str] = []
        self._numbers: dict[str, int] = {}

    def numbered(self, text: str) -> bool:
        return self.counts[text] > 1 and len(text) > self.SHORT

    def ref(self, text: str) -> str:
        """``text`` itself, or ``(n)`` for a shared one."""
        if not self.numbered(text):
            return text
        if text not in self._numbers:
            self.order.append(text)
            self._numbers[text] = len(self.order)
        return f"({self._numbers[text]})"


def _display(p: NodePlacement) -> str:
    return p.name or f"{p.op_type}_{p.index}"


# --------------------------------------------------------------------------------------------
# Convex grouping
# --------------------------------------------------------------------------------------------


def _successors(model: Model) -> list[list[int]]:
    succ: list[list[int]] = [[] for _ in model.nodes]
    for name, consumers in model.consumer_indices.items():
        p = model.producer_index.get(name)
        if p is not None:
            for c in consumers:
                if c != p and c not in succ[p]:
                    succ[p].append(c)
    return succ


def convex_groups(graph: GraphView | Model, nodes: Iterable[int]) -> list[tuple[int, ...]]:
    """Split ``nodes`` into convex, connected groups (in topological order).

    Two nodes end up in one group only when no path between them leaves the set, so each
    group can be fused into one node without creating a cycle. Providers that fuse use this to
    form their claims, as ORT's ``CreateSupportedPartitions`` helper is used.
    """
    model = graph._model if isinstance(graph, GraphView) else graph
    chosen = sorted(set(nodes))
    if not chosen:
        return []
    inside = set(chosen)
    succ = _successors(model)
    # level(v): the most outside nodes on any path into v. Two members with a path between
    # them that leaves the set have different levels, so grouping by level keeps convexity.
    level = [0] * len(model.nodes)
    for v in range(len(model.nodes)):
        for w in succ[v]:
            step = level[v] + (1 if (v not in inside and w in inside) else 0)
            if step > level[w]:
                level[w] = step
    # connected components (through edges between members) within each level
    parent = {v: v for v in chosen}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for v in chosen:
        for w in succ[v]:
            if w in inside and level[w] == level[v]:
                parent[find(w)] = find(v)
    groups: dict[int, list[int]] = {}
    for v in chosen:
        groups.setdefault(find(v), []).append(v)
    return sorted((tuple(g) for g in groups.values()), key=lambda g: g[0])


class _UnitGraph:
    """Reachability over the graph with already-fused groups contracted."""

    def __init__(self, model: Model) -> None:
        self._model = model
        self._succ: list[list[int]] | None = None
        self.unit_of: dict[int, tuple[int, ...]] = {}

    @property
    def succ(self) -> list[list[int]]:
        """Successors by node, computed at the first fused claim (per-node claims, most
        sessions' only kind, never need them)."""
        if self._succ is None:
            self._succ = _successors(self._model)
        return self._succ

    def creates_cycle(self, group: Sequence[int]) -> bool:
        members = set(group)
        succ = self.succ
        stack = [w for v in group for w in succ[v] if w not in members]
        seen: set[int] = set()
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            if v in members:
                return True
            nxt = list(succ[v])
            unit = self.unit_of.get(v)
            if unit is not None:  # entering a fused unit lets a path leave from any member
                nxt.extend(u for u in unit if u not in seen)
            stack.extend(nxt)
        return False

    def fuse(self, group: Sequence[int]) -> None:
        g = tuple(group)
        for v in g:
            self.unit_of[v] = g


# --------------------------------------------------------------------------------------------
# The partitioner
# --------------------------------------------------------------------------------------------


def partition(model: Model, providers: Sequence[ExecutionProvider], *,
              on_provider_error: Callable[[ExecutionProvider, Exception], None] | None = None,
              fallback_disabled: bool = False, partial: bool = False) -> PartitionPlan:
    """Assign every node of ``model`` to one of ``providers`` (priority order).

    A provider whose ``get_capability`` raises is reported to ``on_provider_error`` (which may
    re-raise) and gets nothing. Raises :class:`PartitionError` listing every unclaimed node,
    unless ``partial`` (a provisional plan of the claims only, without placements).
    """
    n = len(model.nodes)
    views = model.node_views
    owner: list[int | None] = [None] * n        # partition id per node
    partitions: list[Partition] = []
    declines: list[list[tuple[str, str]]] = [[] for _ in range(n)]
    notes: list[str] = []
    units = _UnitGraph(model)

    for prov in providers:
        offered = [i for i in range(n) if owner[i] is None]
        if not offered:
            break
        view = GraphView(model, offered)
        try:
            cap = prov.get_capability(view)
            if not isinstance(cap, Capability):
                raise CapabilityError(
                    f"provider {prov.name!r}: get_capability returned {type(cap).__name__}, "
                    "expected onnxplex.Capability", provider=prov.name)
            groups = _validate(prov, cap, set(offered), n)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a faulty provider must not
            # take the session (or, by sys.exit, the process) down
            err = e if isinstance(e, CapabilityError) else CapabilityError(
                f"provider {prov.name!r}: get_capability raised {type(e).__name__}: {e}",
                provider=prov.name)
            if on_provider_error is None:
                raise err from e
            on_provider_error(prov, err)
            notes.append(f"{prov.name} disabled for this session: {err}")
            for i in offered:
                declines[i].append((prov.name, "provider disabled: get_capability failed"))
            continue
        claimed: set[int] = set()
        for group in groups:
            pieces = [tuple(group.nodes)]
            if len(group.nodes) > 1:
                if units.creates_cycle(group.nodes):
                    pieces = convex_groups(model, group.nodes)
                    pieces = [p for piece in pieces
                              for p in ([piece] if not units.creates_cycle(piece)
                                        else [(v,) for v in piece])]
                    notes.append(f"{prov.name}: claimed group {list(group.nodes)} was not convex "
                                 f"(fusing it would create a cycle); split into "
                                 f"{[list(p) for p in pieces]}")
            for piece in pieces:
                pid = len(partitions)
                name = group.name if len(pieces) == 1 else ""
                mine = tuple((i, n) for i, n in group.node_notes if i in piece) \
                    if group.node_notes else ()
                partitions.append(record(Partition, id=pid, provider=prov.name, nodes=piece,
                                         name=name, note=group.note, node_notes=mine))
                for i in piece:
                    owner[i] = pid
                claimed.update(piece)
                if len(piece) > 1:
                    units.fuse(piece)
        if len(claimed) < len(offered):
            explicit = {d.node: d.reason for d in cap.declined}
            for i in offered:
                if i not in claimed:
                    declines[i].append((prov.name,
                                        explicit.get(i, "not claimed (no reason given)")))

    missing = [i for i in range(n) if owner[i] is None]
    if partial:   # a provisional plan: only what the given providers claim
        return PartitionPlan(tuple(p.name for p in providers), partitions, [], notes)
    if missing:
        raise _unclaimed_error(views, missing, declines, providers, fallback_disabled)

    # Only declines by providers ranked above the one that runs a node explain a fallback.
    rank = {p.name: k for k, p in enumerate(providers)}
    placements = []
    for i in range(n):
        part = partitions[owner[i]]  # type: ignore[index]
        declined = declines[i]
        above = tuple(d for d in declined if rank[d[0]] < rank[part.provider]) \
            if declined else ()
        view = views[i]
        placements.append(record(NodePlacement, index=i, name=view.name, op_type=view.op_type,
                                 domain=view.domain, provider=part.provider,
                                 partition=part.id, declined=above))
    return PartitionPlan(tuple(p.name for p in providers), partitions, placements, notes)


def _validate(prov: ExecutionProvider, cap: Capability, offered: set[int], n: int):
    seen: set[int] = set()
    for group in cap.groups:
        if not group.nodes:
            raise CapabilityError(f"provider {prov.name!r}: claimed an empty node group",
                                  provider=prov.name)
        for i in group.nodes:
            if not 0 <= i < n:
                raise CapabilityError(f"provider {prov.name!r}: claimed node index {i}, but the "
                                      f"graph has nodes 0..{n - 1}", provider=prov.name)
            if i not in offered:
                raise CapabilityError(f"provider {prov.name!r}: claimed node {i}, which was not "
                                      "offered to it (a higher-priority provider runs it)",
                                      provider=prov.name)
            if i in seen:
                raise CapabilityError(f"provider {prov.name!r}: claimed node {i} twice",
                                      provider=prov.name)
            seen.add(i)
    return cap.groups


def _onnx_op(op_type: str, opset: int) -> bool:
    """Whether ONNX defines ``op_type`` at ``opset``."""
    try:
        onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return False
    return True


def _unclaimed_error(views: list[NodeView], missing: list[int],
                     declines: list[list[tuple[str, str]]],
                     providers: Sequence[ExecutionProvider],
                     fallback_disabled: bool) -> PartitionError:
    """The error for nodes no provider claimed. onnxruntime refuses an op it knows nothing of
    before it looks for kernels, and code written for it tells those cases apart by class and
    first sentence: an op of ONNX's domain that ONNX does not define at the model's opset is
    INVALID_GRAPH (``No Op registered for X with domain_version of N``), an op of another
    domain that nothing registers FAIL (``d:X(-1) is not a registered function/op``). The
    first missing node of either kind gives the class and that sentence; onnxplex's own
    message, every unplaced node with each provider's reason, follows."""
    message = _unclaimed_message(views, missing, declines, providers, fallback_disabled)
    for i in missing:
        v = views[i]
        if v.domain in ("", "ai.onnx") and not _onnx_op(v.op_type, v.opset):
            # (onnxruntime: INVALID_GRAPH)
            return as_status(PartitionError, InvalidGraph)(
                f"This is an invalid model. Error: No Op registered for {v.op_type} with "
                f"domain_version of {v.opset}. {message}", unassigned=tuple(missing))
        if v.domain not in ("", "ai.onnx") and not any(
                p.op_table is not None and (v.domain, v.op_type) in p.op_table
                for p in providers):
            return as_status(PartitionError, Fail)(   # (onnxruntime: FAIL)
                f"Fatal error: {v.domain}:{v.op_type}(-1) is not a registered function/op. "
                f"{message}", unassigned=tuple(missing))
    return PartitionError(message, unassigned=tuple(missing))


def _unclaimed_message(views: list[NodeView], missing: list[int],
                       declines: list[list[tuple[str, str]]],
                       providers: Sequence[ExecutionProvider], fallback_disabled: bool) -> str:
    head = (f"{len(missing)} node(s) could not be assigned to any of the providers "
            f"[{', '.join(p.name for p in providers)}]")
    if fallback_disabled:
        head += (" and fallback to the default CPU provider is disabled "
                 "(session.disable_cpu_ep_fallback=1)")
    lines = [head + ":"]
    for i in missing[:50]:
        v = views[i]
        lines.append(f"  node {i} '{v.display_name}': {v.describe_types()} "
                     f"[{v.domain or 'ai.onnx'} opset {v.opset}]")
        for prov, reason in declines[i]:
            lines.append(f"      {prov}: {reason}")
    if len(missing) > 50:
        lines.append(f"  ... and {len(missing) - 50} more")
    return "\n".join(lines)
