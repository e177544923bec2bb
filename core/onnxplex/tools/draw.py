"""Pictures of a session's placement: the graph with its nodes coloured by provider, fused
partitions outlined and fallback nodes marked (``onnxplex partition --format svg|html|dot``).

* SVG: self-contained (no scripts, no external fonts or styles; colours are attributes, so any
  viewer shows them). Every node is a ``<g class="node">`` with ``data-node``,
  ``data-provider`` and ``data-partition`` attributes and a ``<title>`` (hover text): op type,
  node name, types and shapes, provider, partition, the provider's per-node note and every
  decline reason from the placement report.
* HTML: the SVG plus a legend, the table of partitions and the table of fallback reasons.
* DOT: graphviz text with one cluster per fused partition, for ``dot -Tsvg`` where graphviz is
  installed (nothing here needs it).

The layout is our own layered layout (:mod:`onnxplex.tools.draw_layout`), top to bottom, one row
per topological rank.

Each op box reads its op type over a name that tells it from every other node of that op type
(:func:`_distinct_labels`): after optimization dozens of convs are ``FusedConv`` named
``nK/FusedConv/nhwc``, and the part that differs (``nK``, ``layer.3/.../query``) is what the
reader needs, not the tail they share.

Deep graphs are drawn *compact* (``compact=None`` decides: more than :data:`AUTO_COMPACT_RANKS`
rows; ``True``/``False`` force it): a run of nodes that only feed one another on one provider
and fused partition (``Conv -> BatchNormalization -> Relu``) becomes one box with its op
sequence and node count, and constant subgraphs (weights computed by ``ConstantOfShape``...)
fold into the box of their reader. The hover text lists every node of a box. Partitions,
fallbacks and cross-provider edges keep their marks: a chain never mixes providers, fused
partitions or fallback status, and a folded constant that fell back marks its reader's box
(the hover says where it runs). The picture stays one SVG with no dependency.
"""

from __future__ import annotations

import html
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from .._errors import InvalidArgumentError
from ..framework.partition import PartitionPlan
from ..graph.model import Model, ValueInfo
from .draw_layout import Layout, layered_layout

__all__ = ["FORMATS", "GraphPicture", "provider_colors", "tint"]

FORMATS = ("svg", "html", "dot")

# The bundled providers keep their colour whatever the session's order; others take the
# palette in priority order.
PROVIDER_COLORS = {"cpu_mlas": "#4c78a8", "xnnpack_like": "#f58518", "kleidi_sme2": "#54a24b"}
_PALETTE = ("#b279a2", "#72b7b2", "#eeca3b", "#9d755d", "#e45756", "#ff9da6", "#bab0ac")
FALLBACK_COLOR = "#d62728"
IO_FILL, IO_STROKE = "#f2f2f2", "#8c8c8c"
EDGE_COLOR, BOUNDARY_EDGE_COLOR = "#9a9a9a", "#404040"

CHAR_W = 6.7          # monospace advance at font-size 11
NODE_H = 34.0
LEGEND_H = 30.0
ROW_GAP, COMPACT_ROW_GAP = 30.0, 22.0
AUTO_COMPACT_RANKS = 40   # compact=None draws a graph deeper than this compact (~2,600 px)
NAME_LIMIT = 28           # characters of a box's second line
HOVER_MEMBERS = 60        # nodes listed in a collapsed box's hover text


def provider_colors(providers: Iterable[str]) -> dict[str, str]:
    """A colour (``#rrggbb``) per provider, stable for the bundled ones."""
    out: dict[str, str] = {}
    spare = iter(_PALETTE * 4)
    for p in providers:
        if p not in out:
            out[p] = PROVIDER_COLORS.get(p) or next(spare)
    return out


def tint(color: str, amount: float) -> str:
    """``color`` mixed with white (``amount`` 0: unchanged, 1: white)."""
    c = color.lstrip("#")
    rgb = [int(c[k:k + 2], 16) for k in (0, 2, 4)]
    return "#" + "".join(f"{round(v + (255 - v) * amount):02x}" for v in rgb)


@dataclass(frozen=True)
class PictureNode:
    """One box: an op node (``kind="op"``) or a graph input/output (``"input"``/``"output"``)."""

    key: str
    kind: str
    label: str                   # op type, or the value's name
    sub: str                     # second line: short node name, or the value's type
    name: str                    # full node / value name
    provider: str | None = None
    partition: int | None = None
    fused: bool = False
    fallback: tuple[str, ...] = ()   # why it runs where it does; empty when nothing declined
    hover: str = ""
    members: tuple[PictureNode, ...] = ()   # a collapsed box: its op nodes, in order
    constant: bool = False       # an op node no graph input reaches (a constant subgraph)


@dataclass
class GraphPicture:
    """What the pictures show; build with :meth:`from_session` or :meth:`from_plan`."""

    title: str
    plan: PartitionPlan
    nodes: list[PictureNode]
    edges: list[tuple[str, str, str]]          # (from key, to key, values with their types)
    colors: dict[str, str] = field(default_factory=dict)
    compact: bool = False                      # True: ``nodes`` has collapsed boxes
    ops: dict[str, PictureNode] = field(default_factory=dict)   # every op node, by key
    box_of: dict[str, str] = field(default_factory=dict)        # op key -> key of its box
    _layout: Layout | None = field(default=None, repr=False)
    _boxes: dict[str, PictureNode] | None = field(default=None, repr=False)

    # ------------------------------------------------------------------------------ building

    @classmethod
    def from_session(cls, session: Any, title: str = "",
                     compact: bool | None = None) -> GraphPicture:
        """The picture of ``session`` (an :class:`onnxplex.InferenceSession`); ``compact``:
        see the module docstring (None: when the graph is deep)."""
        return cls.from_plan(session.model, session.get_provider_assignment(), title, compact)

    @classmethod
    def from_plan(cls, model: Model, plan: PartitionPlan, title: str = "",
                  compact: bool | None = None) -> GraphPicture:
        if len(plan.placements) != len(model.nodes):
            raise InvalidArgumentError(
                f"the placement plan has {len(plan.placements)} nodes but the model has "
                f"{len(model.nodes)}; draw the plan of the model it was made for")
        views = model.node_views
        names = _distinct_labels([pl.name for pl in plan.placements],
                                 [pl.op_type for pl in plan.placements])
        nodes: list[PictureNode] = []
        inputs = [n for n in model.input_names]
        for name in inputs:
            nodes.append(PictureNode(f"in:{name}", "input", name,
                                     _type_text(_info(model, name)), name))
        for pl in plan.placements:
            part = plan.partitions[pl.partition]
            reasons = tuple(f"declined by {prov}: {why}" for prov, why in pl.declined)
            if "fallback" in part.note:
                reasons += (part.note,)
            note = part.node_note(pl.index)
            hover = "\n".join(
                [f"{pl.op_type}  {pl.name or f'#{pl.index}'}", views[pl.index].describe_types(),
                 f"provider: {pl.provider}"
                 + (f" (partition {part.id}, fused with {len(part.nodes) - 1} other nodes)"
                    if part.fused else f" (partition {part.id})")]
                + ([f"partition note: {part.note}"] if part.note else [])
                + ([f"{pl.provider}: {note}"] if note else [])
                + ([f"fallback: {r}" for r in reasons]))
            nodes.append(PictureNode(f"n{pl.index}", "op", pl.op_type, names[pl.index],
                                     pl.name or f"{pl.op_type}_{pl.index}", pl.provider,
                                     part.id, part.fused, reasons, hover))
        edges: dict[tuple[str, str], list[str]] = {}
        known_inputs = set(inputs)

        def source(value: str) -> str | None:
            p = model.producer_index.get(value)
            if p is not None:
                return f"n{p}"
            return f"in:{value}" if value in known_inputs else None

        for value, readers in model.consumer_indices.items():
            src = source(value)
            if src is not None:
                for r in readers:
                    edges.setdefault((src, f"n{r}"), []).append(value)
        for out in model.graph.outputs:
            src = source(out.name)
            nodes.append(PictureNode(f"out:{out.name}", "output", out.name,
                                     _type_text(_info(model, out.name)), out.name))
            if src is not None:
                edges.setdefault((src, f"out:{out.name}"), []).append(out.name)
        nodes = _mark_constants(nodes, edges)
        ops = {n.key: n for n in nodes if n.kind == "op"}
        if compact is None:
            compact = _depth([n.key for n in nodes], edges) > AUTO_COMPACT_RANKS
        box_of = {k: k for k in ops}
        if compact:
            nodes, edges, box_of = _collapse(nodes, edges)
        order = {n.key: k for k, n in enumerate(nodes)}
        edge_list = sorted(((a, b, ", ".join(_value_text(model, n) for n in v))
                            for (a, b), v in edges.items()),
                           key=lambda e: (order[e[0]], order[e[1]]))
        return cls(title, plan, nodes, edge_list, provider_colors(plan.providers), compact,
                   ops, box_of)

    # -------------------------------------------------------------------------------- layout

    def layout(self) -> Layout:
        if self._layout is None:
            widths = {n.key: _box_width(n) for n in self.nodes}
            groups = {n.key: n.partition for n in self.nodes if n.fused}
            self._layout = layered_layout(
                [n.key for n in self.nodes], widths, [(a, b) for a, b, _ in self.edges],
                groups=groups, pinned=[n.key for n in self.nodes if n.kind == "input"],
                node_height=NODE_H, row_gap=COMPACT_ROW_GAP if self.compact else ROW_GAP)
        return self._layout

    @property
    def fused_partitions(self):
        return [p for p in self.plan.partitions if p.fused]

    # ----------------------------------------------------------------------------------- SVG

    def to_svg(self) -> str:
        """The picture as a standalone SVG document."""
        lay = self.layout()
        width = max(lay.width, _legend_width(self.colors, self.compact))
        height = lay.height + LEGEND_H
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
               f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
               'font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" font-size="11">',
               f"<title>{_esc(self.title or 'onnxplex placement')}</title>",
               '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="6" '
               'markerHeight="6" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#707070"/>'
               "</marker></defs>",
               f'<rect width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>']
        out += self._svg_legend()
        out.append(f'<g transform="translate(0,{LEGEND_H:.0f})">')
        out += self._svg_partitions(lay)
        out += self._svg_edges(lay)
        out += self._svg_nodes(lay)
        out.append("</g></svg>")
        return "\n".join(out)

    def _svg_legend(self) -> list[str]:
        counts = self.plan.counts()
        out = ['<g class="legend">']
        x = 20.0
        for prov, color in self.colors.items():
            label = f"{prov} ({counts.get(prov, 0)})"
            out.append(f'<rect x="{x:.0f}" y="8" width="14" height="14" rx="3" '
                       f'fill="{tint(color, 0.6)}" stroke="{color}"/>'
                       f'<text x="{x + 20:.0f}" y="19">{_esc(label)}</text>')
            x += 20 + len(label) * CHAR_W + 18
        out.append(f'<rect x="{x:.0f}" y="8" width="14" height="14" rx="3" fill="#ffffff" '
                   f'stroke="{FALLBACK_COLOR}" stroke-width="2" stroke-dasharray="4 2"/>'
                   f'<text x="{x + 20:.0f}" y="19">fell back (hover for why)</text>')
        x += 20 + 25 * CHAR_W + 18
        out.append(f'<rect x="{x:.0f}" y="8" width="28" height="14" fill="none" stroke="#555555" '
                   f'stroke-dasharray="6 3"/><text x="{x + 34:.0f}" y="19">fused partition</text>')
        if self.compact:
            x += 34 + 15 * CHAR_W + 18
            boxes = sum(1 for n in self.nodes if n.members)
            inside = sum(len(n.members) for n in self.nodes)
            out.append(f'<text x="{x:.0f}" y="19">compact: {inside} nodes in {boxes} stacked '
                       "boxes (hover for their nodes)</text>")
        out.append("</g>")
        return out

    def _svg_partitions(self, lay: Layout) -> list[str]:
        out = ['<g class="partitions">']
        for part in self.fused_partitions:
            color = self.colors[part.provider]
            polys = lay.outlines(part.id)
            if not polys:    # compact: every node of it folded into another partition's box
                continue
            d = " ".join("M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in poly) + " Z"
                         for poly in polys)
            hover = (f"partition {part.id}: {part.provider}, {len(part.nodes)} nodes"
                     + (f" ({part.name})" if part.name else "")
                     + (f"\n{part.note}" if part.note else ""))
            x0, y0 = polys[0][0]
            out.append(f'<g class="partition" data-partition="{part.id}" '
                       f'data-provider="{_esc(part.provider)}"><title>{_esc(hover)}</title>'
                       f'<path d="{d}" fill="{tint(color, 0.9)}" stroke="{color}" '
                       'stroke-width="1.5" stroke-dasharray="6 3"/>'
                       f'<text x="{x0:.1f}" y="{y0 - 3:.1f}" font-size="9" fill="{color}">'
                       f"partition {part.id}</text></g>")
        out.append("</g>")
        return out

    def _svg_edges(self, lay: Layout) -> list[str]:
        by_key = {n.key: n for n in self.nodes}
        out = ['<g class="edges" fill="none">']
        for (a, b, values), pts in zip(self.edges, lay.edges):
            pa, pb = by_key[a].provider, by_key[b].provider
            boundary = pa is not None and pb is not None and pa != pb
            hover = values + (f"\n{pa} -> {pb}" if boundary else "")
            color, w = (BOUNDARY_EDGE_COLOR, 1.6) if boundary else (EDGE_COLOR, 1.0)
            out.append(f'<g class="edge{" boundary" if boundary else ""}" '
                       f'data-from="{_esc(a)}" data-to="{_esc(b)}"><title>{_esc(hover)}</title>'
                       '<polyline points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
                       + f'" stroke="{color}" stroke-width="{w}" marker-end="url(#arrow)"/></g>')
        out.append("</g>")
        return out

    def _svg_nodes(self, lay: Layout) -> list[str]:
        out = ['<g class="nodes">']
        for n in self.nodes:
            w = _box_width(n)
            x, y = lay.x[n.key] - w / 2, lay.y[n.key] - NODE_H / 2
            cx = lay.x[n.key]
            if n.kind == "op":
                color = self.colors[n.provider]  # type: ignore[index]
                chain = (f' data-count="{len(n.members)}" data-nodes="'
                         + _esc(" ".join(m.name for m in n.members)) + '"'
                         if n.members else "")
                attrs = (f'class="node op{" chain" if n.members else ""}" '
                         f'data-node="{_esc(n.name)}" data-op="{_esc(n.label)}" '
                         f'data-provider="{_esc(n.provider or "")}" '
                         f'data-partition="{n.partition}"'
                         + (' data-fallback="1"' if n.fallback else "") + chain)
                stroke = (f'stroke="{FALLBACK_COLOR}" stroke-width="2" stroke-dasharray="4 2"'
                          if n.fallback else f'stroke="{color}" stroke-width="1.2"')
                box = (f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{NODE_H:.0f}" '
                       f'rx="4" fill="{tint(color, 0.6)}" {stroke}/>')
                if n.members:   # a stack of cards: the box stands for several nodes
                    box += (f'<path class="stack" d="M{x + 4:.1f},{y + NODE_H:.1f} '
                            f'V{y + NODE_H + 3:.1f} H{x + w + 3:.1f} V{y + 4:.1f} H{x + w:.1f}" '
                            f'fill="none" stroke="{color}" stroke-width="1.5"/>')
                hover = n.hover
            else:
                attrs = f'class="node {n.kind}" data-node="{_esc(n.name)}"'
                box = (f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{NODE_H:.0f}" '
                       f'rx="{NODE_H / 2:.0f}" fill="{IO_FILL}" stroke="{IO_STROKE}"/>')
                hover = f"graph {n.kind} {n.name}\n{n.sub}"
            mark = (f'<text x="{x + w - 7:.1f}" y="{y + 11:.1f}" fill="{FALLBACK_COLOR}" '
                    'font-weight="bold" text-anchor="middle">!</text>' if n.fallback else "")
            out.append(f"<g {attrs}><title>{_esc(hover)}</title>{box}"
                       f'<text x="{cx:.1f}" y="{y + 14:.1f}" text-anchor="middle" '
                       f'font-weight="bold">{_esc(n.label if n.kind == "op" else _clip(n.label))}'
                       f'</text><text x="{cx:.1f}" y="{y + 27:.1f}" text-anchor="middle" '
                       f'font-size="10" fill="#333333">{_esc(n.sub)}</text>{mark}</g>')
        out.append("</g>")
        return out

    # ---------------------------------------------------------------------------------- HTML

    def to_html(self) -> str:
        """A standalone HTML page: legend, the SVG, partitions and fallback reasons."""
        plan = self.plan
        counts = plan.counts()
        title = self.title or "onnxplex placement"
        legend = "".join(
            f'<span class="sw" style="background:{tint(c, 0.6)};border-color:{c}"></span>'
            f"{_esc(p)}: {counts.get(p, 0)} nodes &nbsp; " for p, c in self.colors.items())
        rows = []
        for part in plan.partitions:
            names = [self.nodes_by_index(i).name for i in part.nodes]
            shown = ", ".join(names[:8]) + (f", ... ({len(names)} in all)" if len(names) > 8
                                             else "")
            c = self.colors[part.provider]
            rows.append(f'<tr><td>{part.id}</td><td><span class="sw" style="background:'
                        f'{tint(c, 0.6)};border-color:{c}"></span>{_esc(part.provider)}</td>'
                        f"<td>{len(part.nodes)}</td><td>{'yes' if part.fused else ''}</td>"
                        f"<td>{_esc(part.name)}</td><td>{_esc(part.note)}</td>"
                        f"<td>{_esc(shown)}</td></tr>")
        falls = []
        for n in self.ops.values():
            if n.fallback:
                reasons = "<br>".join(_esc(r) for r in n.fallback)
                falls.append(f"<tr><td>{_esc(n.name)}</td><td>{_esc(n.label)}</td>"
                             f"<td>{_esc(n.provider or '')}</td><td>{reasons}</td></tr>")
        notes = "".join(f"<li>{_esc(t)}</li>" for t in plan.notes)
        fused = len(self.fused_partitions)
        return "\n".join([
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{_esc(title)}</title>",
            "<style>body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}"
            "table{border-collapse:collapse;margin:.5em 0 1.5em}"
            "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top;"
            "font-size:13px}th{background:#f4f4f4}"
            ".sw{display:inline-block;width:12px;height:12px;border:1px solid;margin-right:5px;"
            "vertical-align:middle;border-radius:2px}"
            ".graph{overflow:auto;max-height:85vh;border:1px solid #ddd}</style>",
            "</head><body>",
            f"<h1>{_esc(title)}</h1>",
            f"<p>Providers in priority order: {_esc(', '.join(plan.providers))}. "
            f"{len(plan.placements)} nodes in {len(plan.partitions)} partitions "
            f"({fused} fused); {sum(1 for n in self.ops.values() if n.fallback)} nodes fell "
            "back." + (" Drawn compact: a stacked box stands for a run of nodes on one provider "
                       "(hover it for their names)." if self.compact else "") + "</p>",
            f'<p class="legend">{legend}<span class="sw" style="border:2px dashed '
            f'{FALLBACK_COLOR}"></span>fell back (hover a node for the reasons)</p>',
            f'<div class="graph">{self.to_svg()}</div>',
            "<h2>Partitions</h2>",
            "<table><tr><th>#</th><th>provider</th><th>nodes</th><th>fused</th><th>name</th>"
            "<th>note</th><th>members</th></tr>",
            *rows, "</table>",
            "<h2>Fallbacks</h2>",
            ("<table><tr><th>node</th><th>op</th><th>runs on</th><th>why</th></tr>"
             + "".join(falls) + "</table>") if falls else "<p>No node fell back.</p>",
            *(["<h2>Notes</h2>", f"<ul>{notes}</ul>"] if notes else []),
            "</body></html>",
        ])

    def nodes_by_index(self, index: int) -> PictureNode:
        """Op node ``index`` (its position in the model's topological order); in a compact
        picture :meth:`box_by_index` is the box that draws it."""
        return self.ops[f"n{index}"]

    def box_by_index(self, index: int) -> PictureNode:
        """The drawn box of op node ``index``: its own, or the collapsed box it is in."""
        if self._boxes is None:
            self._boxes = {n.key: n for n in self.nodes}
        return self._boxes[self.box_of[f"n{index}"]]

    # ----------------------------------------------------------------------------------- DOT

    def to_dot(self) -> str:
        """Graphviz text: a cluster per fused partition, fill colours per provider, tooltips."""
        out = [f"digraph {_dq(self.title or 'onnxplex')} {{",
               "  graph [rankdir=TB, fontname=\"monospace\", fontsize=10, "
               f"label={_dq('providers: ' + ', '.join(self.plan.providers))}];",
               '  node [shape=box, style="rounded,filled", fontname="monospace", fontsize=10];',
               '  edge [color="#9a9a9a", arrowsize=0.6];']
        in_cluster: set[str] = set()
        for part in self.fused_partitions:
            color = self.colors[part.provider]
            out.append(f"  subgraph cluster_p{part.id} {{")
            out.append(f"    label={_dq(f'partition {part.id}: {part.provider}')}; "
                       f'color="{color}"; style="dashed,filled"; fillcolor="{tint(color, 0.9)}";')
            for i in part.nodes:
                box = self.box_by_index(i)
                if box.key not in in_cluster:
                    out.append("    " + self._dot_node(box))
                    in_cluster.add(box.key)
            out.append("  }")
        for n in self.nodes:
            if n.key not in in_cluster:
                out.append("  " + self._dot_node(n))
        for a, b, values in self.edges:
            out.append(f"  {_dq(a)} -> {_dq(b)} [tooltip={_dq(values)}];")
        out.append("}")
        return "\n".join(out) + "\n"

    def _dot_node(self, n: PictureNode) -> str:
        label = f"{n.label}\n{n.sub}"
        if n.kind != "op":
            return (f"{_dq(n.key)} [label={_dq(label)}, shape=ellipse, style=filled, "
                    f'fillcolor="{IO_FILL}", color="{IO_STROKE}"];')
        color = self.colors[n.provider]  # type: ignore[index]
        extra = (f', color="{FALLBACK_COLOR}", style="rounded,filled,dashed", penwidth=2'
                 if n.fallback else f', color="{color}"')
        return (f"{_dq(n.key)} [label={_dq(label)}, fillcolor=\"{tint(color, 0.6)}\"{extra}, "
                f"tooltip={_dq(n.hover)}];")

    def render(self, fmt: str) -> str:
        """``svg``, ``html`` or ``dot`` text."""
        if fmt not in FORMATS:
            raise InvalidArgumentError(f"unknown picture format {fmt!r}; one of {FORMATS}")
        return {"svg": self.to_svg, "html": self.to_html, "dot": self.to_dot}[fmt]()


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _info(model: Model, name: str) -> ValueInfo | None:
    try:
        return model.value_info(name)
    except KeyError:
        return None


def _value_text(model: Model, name: str) -> str:
    """An edge's hover text for one value: ``z: seq(map(int64,tensor(float)))``."""
    text = _type_text(_info(model, name))
    return f"{name}: {text}" if text else name


def _type_text(info: ValueInfo | None) -> str:
    """``float[N,3]``, ``seq(map(int64,tensor(float)))``; '' for a value nothing knows."""
    return "" if info is None else info.describe()


def _distinct_labels(names: list[str], op_types: list[str],
                     limit: int = NAME_LIMIT) -> list[str]:
    """A second line per op node that tells it apart from every other node of its op type.

    A name's ``/``-separated parts are taken rarest first (the fewest names across the graph
    hold them; later parts first on ties, and the op type's own part last) until no other node
    of the same op type has them all: ``n6/FusedConv/nhwc`` -> ``n6``,
    ``/bert/encoder/layer.3/attention/self/query/MatMul`` -> ``layer.3/…/query``. Parts keep
    their order, ``…`` marks the ones left out. A label still shared (unnamed nodes, equal
    names, a name clipped to ``limit``) gets the node's index, ``#17``.
    """
    parts = [[p for p in (name or "").strip("/").split("/") if p] for name in names]
    df = Counter(p for ps in parts for p in set(ps))
    holders: dict[tuple[str, str], set[int]] = defaultdict(set)
    same_op: dict[str, set[int]] = defaultdict(set)
    for i, (ps, op) in enumerate(zip(parts, op_types)):
        same_op[op].add(i)
        for p in ps:
            holders[op, p].add(i)
    labels = []
    for i, (ps, op) in enumerate(zip(parts, op_types)):
        if not ps:
            labels.append(f"#{i}")
            continue
        rivals, chosen = same_op[op], []
        for k in sorted(range(len(ps)), key=lambda k: (ps[k] == op, df[ps[k]], -k)):
            if chosen and len(rivals) == 1:
                break
            narrowed = rivals & holders[op, ps[k]]
            if not chosen or len(narrowed) < len(rivals):
                chosen.append(k)
                rivals = narrowed
        chosen.sort()
        text = ps[chosen[0]]
        for prev, k in zip(chosen, chosen[1:]):
            text += ("/" if k == prev + 1 else "/\u2026/") + ps[k]
        labels.append(_clip(text, limit, head=True))
    seen = Counter(zip(op_types, labels))
    return [f"{_clip(text, limit - len(str(i)) - 2, head=True)} #{i}"
            if seen[op, text] > 1 else text for i, (op, text) in enumerate(zip(op_types, labels))]


def _mark_constants(nodes: list[PictureNode],
                    edges: dict[tuple[str, str], list[str]]) -> list[PictureNode]:
    """``nodes`` with ``constant=True`` on the op nodes no graph input reaches."""
    succ: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        succ[a].append(b)
    reached = {n.key for n in nodes if n.kind == "input"}
    todo = list(reached)
    while todo:
        for b in succ[todo.pop()]:
            if b not in reached:
                reached.add(b)
                todo.append(b)
    if not reached:     # no graph input at all: nothing to tell apart
        return nodes
    return [replace(n, constant=True) if n.kind == "op" and n.key not in reached else n
            for n in nodes]


def _depth(keys: list[str], edges: Iterable[tuple[str, str]]) -> int:
    """The number of rows a layered layout of the graph has (its longest path, in nodes)."""
    succ: dict[str, list[str]] = defaultdict(list)
    missing = dict.fromkeys(keys, 0)
    for a, b in edges:
        succ[a].append(b)
        missing[b] += 1
    rank = dict.fromkeys(keys, 0)
    ready = [k for k in keys if not missing[k]]
    while ready:
        a = ready.pop()
        for b in succ[a]:
            rank[b] = max(rank[b], rank[a] + 1)
            missing[b] -= 1
            if not missing[b]:
                ready.append(b)
    return max(rank.values(), default=0) + 1


def _collapse(nodes: list[PictureNode], edges: dict[tuple[str, str], list[str]]):
    """The compact picture: ``(nodes, edges, box_of)`` with chains and constant feeders merged
    into boxes (see the module docstring).

    Merges contract one edge ``A -> B`` of the box graph at a time, and only when ``A`` has no
    other way to reach ``B`` (``A``'s only successor is ``B``), so the boxes stay acyclic.
    Chains join nodes of one provider, fused partition and fallback status only; a folded constant
    feeder may run elsewhere (the box's hover says where, and a fallback marks the box).
    """
    by_key = {n.key: n for n in nodes}
    op_keys = [n.key for n in nodes if n.kind == "op"]
    owner = {k: k for k in op_keys}             # union-find over op keys
    members = {k: [k] for k in op_keys}
    succ: dict[str, set[str]] = {n.key: set() for n in nodes}
    pred: dict[str, set[str]] = {n.key: set() for n in nodes}
    for a, b in edges:
        succ[a].add(b)
        pred[b].add(a)

    def find(k: str) -> str:
        while owner.get(k, k) != k:
            owner[k] = owner[owner[k]]
            k = owner[k]
        return k

    def kind(k: str) -> tuple:
        n = by_key[k]
        # unfused partitions are one node each: only a fused one is drawn (outlined)
        return ((n.provider, n.partition if n.fused else None, bool(n.fallback))
                if n.kind == "op" else ("io", k))

    def merge(keep: str, gone: str) -> None:
        owner[gone] = keep
        members[keep] += members.pop(gone)
        for s in succ.pop(gone):
            pred[s].discard(gone)
            pred[s].add(keep)
            succ[keep].add(s)
        for p in pred.pop(gone):
            succ[p].discard(gone)
            succ[p].add(keep)
            pred[keep].add(p)
        succ[keep] -= {keep, gone}
        pred[keep] -= {keep, gone}

    # constant feeders into their reader's box, whatever runs them (a weight computed by
    # ConstantOfShape on the fallback provider is not the flow a reader follows); last first,
    # so that a chain of them folds whole
    for k in reversed(op_keys):
        if by_key[k].constant and len(succ[find(k)]) == 1:
            (reader,) = succ[find(k)]
            if reader in members:
                merge(reader, find(k))
    # chains: a box whose only successor has it as its only predecessor
    for k in op_keys:
        if owner[k] != k:
            continue
        while len(succ[k]) == 1:
            (nxt,) = succ[k]
            if nxt not in members or pred[nxt] != {k} or kind(nxt) != kind(k):
                break
            merge(k, nxt)
    box_of = {k: find(k) for k in op_keys}
    out = []
    for n in nodes:
        if n.kind != "op":
            out.append(n)
        elif box_of[n.key] == n.key:
            group = sorted(members[n.key], key=lambda m: int(m[1:]))
            out.append(n if len(group) == 1 else _chain_node(n, [by_key[m] for m in group]))
    new_edges: dict[tuple[str, str], list[str]] = {}
    for (a, b), values in edges.items():
        a2, b2 = box_of.get(a, a), box_of.get(b, b)
        if a2 != b2:
            have = new_edges.setdefault((a2, b2), [])
            have += [v for v in values if v not in have]
    return out, new_edges, box_of


def _chain_node(head: PictureNode, group: list[PictureNode]) -> PictureNode:
    """One box for ``group`` (op nodes in order), drawn under ``head``'s key with its
    provider and partition: a chain on one provider, partition and fallback status, with the
    constant feeders folded into it."""
    main = [n for n in group if not n.constant] or group
    ops = [n.label for n in main]
    runs: list[list] = []
    for op in ops:
        if runs and runs[-1][0] == op:
            runs[-1][1] += 1
        else:
            runs.append([op, 1])
    if len(runs) == 1:
        label = f"{ops[0]} \u00d7{len(ops)}"
    else:
        label = " \u2192 ".join(op + (f" \u00d7{c}" if c > 1 else "") for op, c in runs)
        if len(label) > NAME_LIMIT + 4:
            label = f"{ops[0]} \u2192 \u2026 \u2192 {ops[-1]}"
    const = len(group) - len(main)
    head_text = f"{len(group)} nodes: "
    room = NAME_LIMIT + 8 - len(head_text)
    ends = [main[0].sub] if len(main) == 1 else [main[0].sub, main[-1].sub]
    if len(" \u2026 ".join(ends)) > room:     # keep each end's tail: it tells them apart
        ends = [_clip(e, (room - 3) // len(ends), head=True) for e in ends]
    sub = head_text + " \u2026 ".join(ends)
    p = head.partition
    listed = [f"  {n.label}  {n.name}"
              + (f"  (constant, on {n.provider})" if n.constant else "")
              for n in group[:HOVER_MEMBERS]]
    if len(group) > HOVER_MEMBERS:
        listed.append(f"  ... and {len(group) - HOVER_MEMBERS} more")
    hover = "\n".join(
        [f"{len(group)} nodes on {head.provider} (partition {p}), drawn as one box"
         + (f", {const} of them computing constants" if const else "")
         + "; compact=False draws each", *listed]
        + [f"fallback: {r}" for r in dict.fromkeys(r for n in group for r in n.fallback)])
    reasons = tuple(dict.fromkeys(r for n in group for r in n.fallback))
    return PictureNode(head.key, "op", label, sub, head.name, head.provider, p, head.fused,
                       reasons, hover, tuple(group))


def _clip(text: str, limit: int = 28, head: bool = False) -> str:
    if len(text) <= limit:
        return text
    return "\u2026" + text[-(limit - 1):] if head else text[:limit - 1] + "\u2026"


def _box_width(n: PictureNode) -> float:
    label = n.label if n.kind == "op" else _clip(n.label)
    return (max(56.0, max(len(label) * 1.05, len(n.sub) * 0.92) * CHAR_W + 16)
            + (10 if n.fallback else 0) + (3 if n.members else 0))   # the "!", the stack


def _legend_width(colors: dict[str, str], compact: bool = False) -> float:
    return (40 + sum(20 + len(f"{p} (0000)") * CHAR_W + 18 for p in colors) + 380
            + (60 * CHAR_W if compact else 0))


def _esc(text: str) -> str:
    return html.escape(str(text), quote=True)


def _dq(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
