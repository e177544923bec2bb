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

The layout is our own layered layout (:mod:`onnxplex._draw_layout`), top to bottom, one row
per topological rank.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ._draw_layout import Layout, layered_layout
from ._errors import InvalidArgumentError
from ._graph import Model, ValueInfo
from ._partition import PartitionPlan

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


@dataclass
class GraphPicture:
    """What the pictures show; build with :meth:`from_session` or :meth:`from_plan`."""

    title: str
    plan: PartitionPlan
    nodes: list[PictureNode]
    edges: list[tuple[str, str, str]]          # (from key, to key, values with their types)
    colors: dict[str, str] = field(default_factory=dict)
    _layout: Layout | None = field(default=None, repr=False)
    _ops: dict[str, PictureNode] | None = field(default=None, repr=False)

    # ------------------------------------------------------------------------------ building

    @classmethod
    def from_session(cls, session: Any, title: str = "") -> GraphPicture:
        """The picture of ``session`` (an :class:`onnxplex.InferenceSession`)."""
        return cls.from_plan(session.model, session.get_provider_assignment(), title)

    @classmethod
    def from_plan(cls, model: Model, plan: PartitionPlan, title: str = "") -> GraphPicture:
        if len(plan.placements) != len(model.nodes):
            raise InvalidArgumentError(
                f"the placement plan has {len(plan.placements)} nodes but the model has "
                f"{len(model.nodes)}; draw the plan of the model it was made for")
        views = model.node_views
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
            nodes.append(PictureNode(f"n{pl.index}", "op", pl.op_type,
                                     _short_name(pl.name, pl.op_type, pl.index),
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
        order = {n.key: k for k, n in enumerate(nodes)}
        edge_list = sorted(((a, b, ", ".join(_value_text(model, n) for n in v))
                            for (a, b), v in edges.items()),
                           key=lambda e: (order[e[0]], order[e[1]]))
        return cls(title, plan, nodes, edge_list, provider_colors(plan.providers))

    # -------------------------------------------------------------------------------- layout

    def layout(self) -> Layout:
        if self._layout is None:
            widths = {n.key: _box_width(n) for n in self.nodes}
            groups = {n.key: n.partition for n in self.nodes if n.fused}
            self._layout = layered_layout(
                [n.key for n in self.nodes], widths, [(a, b) for a, b, _ in self.edges],
                groups=groups, pinned=[n.key for n in self.nodes if n.kind == "input"],
                node_height=NODE_H)
        return self._layout

    @property
    def fused_partitions(self):
        return [p for p in self.plan.partitions if p.fused]

    # ----------------------------------------------------------------------------------- SVG

    def to_svg(self) -> str:
        """The picture as a standalone SVG document."""
        lay = self.layout()
        width = max(lay.width, _legend_width(self.colors))
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
        out.append("</g>")
        return out

    def _svg_partitions(self, lay: Layout) -> list[str]:
        out = ['<g class="partitions">']
        for part in self.fused_partitions:
            color = self.colors[part.provider]
            polys = lay.outlines(part.id)
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
                attrs = (f'class="node op" data-node="{_esc(n.name)}" data-op="{_esc(n.label)}" '
                         f'data-provider="{_esc(n.provider or "")}" '
                         f'data-partition="{n.partition}"'
                         + (' data-fallback="1"' if n.fallback else ""))
                stroke = (f'stroke="{FALLBACK_COLOR}" stroke-width="2" stroke-dasharray="4 2"'
                          if n.fallback else f'stroke="{color}" stroke-width="1.2"')
                box = (f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{NODE_H:.0f}" '
                       f'rx="4" fill="{tint(color, 0.6)}" {stroke}/>')
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
        for n in self.nodes:
            if n.kind == "op" and n.fallback:
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
            f"({fused} fused); {sum(1 for n in self.nodes if n.fallback)} nodes fell back.</p>",
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
        """The box of op node ``index`` (its position in the model's topological order)."""
        if self._ops is None:
            self._ops = {n.key: n for n in self.nodes if n.kind == "op"}
        return self._ops[f"n{index}"]

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
                out.append("    " + self._dot_node(self.nodes_by_index(i)))
                in_cluster.add(f"n{i}")
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


def _short_name(name: str, op_type: str, index: int, limit: int = 24) -> str:
    """The tail of a node name worth showing under its op type: the last two path parts of
    ``/bert/encoder/layer.0/attention/self/query/MatMul`` without the op's own part."""
    if not name:
        return f"#{index}"
    parts = [p for p in name.strip("/").split("/") if p]
    if len(parts) > 1 and parts[-1].split("_")[0] == op_type:
        parts = parts[:-1]
    return _clip("/".join(parts[-2:]), limit, head=True)


def _clip(text: str, limit: int = 28, head: bool = False) -> str:
    if len(text) <= limit:
        return text
    return "\u2026" + text[-(limit - 1):] if head else text[:limit - 1] + "\u2026"


def _box_width(n: PictureNode) -> float:
    label = n.label if n.kind == "op" else _clip(n.label)
    return max(56.0, max(len(label) * 1.05, len(n.sub) * 0.92) * CHAR_W + 16)


def _legend_width(colors: dict[str, str]) -> float:
    return 40 + sum(20 + len(f"{p} (0000)") * CHAR_W + 18 for p in colors) + 380


def _esc(text: str) -> str:
    return html.escape(str(text), quote=True)


def _dq(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
