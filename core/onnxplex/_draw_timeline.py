"""A per-node timeline of one profiled run, as a PNG (``onnxplex profile FILE --png OUT``).

The picture has three parts, all on the same time axis (from the start of the run):

* one lane per thread, every node's bar coloured by the provider that ran it (what ran in
  parallel under ``ORT_PARALLEL``, and where the gaps are);
* one row per node event in start order, labelled with the node and op type, with its bar and
  its duration (sub-events a fused kernel reports, args ``parent``, are indented under their
  partition and drawn lighter);
* a legend with the time per provider in this run.

It reads Chrome-trace events as :func:`onnxplex._perf.load_profile` returns them (onnxplex's or
onnxruntime's) and draws with :class:`onnxplex._raster.Canvas`, so it needs no plotting
library.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ._draw import provider_colors, tint
from ._errors import InvalidArgumentError
from ._raster import GLYPH_H, Canvas

__all__ = ["timeline"]

WIDTH = 1200
LABEL_W = 330          # the label column
LANE_H, ROW_H = 16, 11
MARGIN = 10


def _select_run(events: Sequence[Mapping[str, Any]], run: int | None):
    """The node events of run ``run`` (1-based, default the last), the run's start and length
    in microseconds, and a description."""
    nodes = [e for e in events if e.get("cat") == "Node" and e.get("ph", "X") == "X"
             and "dur" in e and "ts" in e]
    runs = sorted((e for e in events if e.get("name") == "model_run" and "ts" in e),
                  key=lambda e: float(e["ts"]))
    if not runs:
        if run not in (None, 1):
            raise InvalidArgumentError(f"the profile has no model_run events, so no run {run}")
        picked, start, length, what = nodes, None, None, "all node events"
    else:
        k = len(runs) if run is None else run
        if not 1 <= k <= len(runs):
            raise InvalidArgumentError(f"run {run} does not exist: the profile holds "
                                       f"{len(runs)} run(s), numbered from 1")
        start = float(runs[k - 1]["ts"])
        stop = float(runs[k]["ts"]) if k < len(runs) else math.inf
        # a node event belongs to the last run that started at or before it
        picked = [e for e in nodes if start <= float(e["ts"]) < stop]
        length = float(runs[k - 1].get("dur", 0))
        what = f"run {k} of {len(runs)}"
    if not picked:
        raise InvalidArgumentError(f"the profile has no node events for {what}; was it written "
                                   "with SessionOptions.enable_profiling and at least one run?")
    t0 = start if start is not None else min(float(e["ts"]) for e in picked)
    end = max(float(e["ts"]) + float(e["dur"]) for e in picked) - t0
    return picked, t0, max(end, length or 0.0, 1.0), what


def _nice_step(span: float, ticks: int = 8) -> float:
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def _fmt_us(us: float) -> str:
    return f"{us / 1e3:.3g} ms" if us >= 1000 else f"{us:.3g} us"


def timeline(events: Sequence[Mapping[str, Any]], run: int | None = None,
             width: int = WIDTH) -> Canvas:
    """Draw run ``run`` (1-based; default the last) of a profile; see the module docstring.

    Raises :class:`InvalidArgumentError` when the run does not exist or has no node events.
    """
    picked, t0, span, what = _select_run(events, run)
    args = [e.get("args") or {} for e in picked]
    order = sorted(range(len(picked)), key=lambda i: (float(picked[i]["ts"]),
                                                       "parent" in args[i], i))
    providers = list(dict.fromkeys(str(a.get("provider", "?")) for a in args))
    colors = provider_colors(providers)
    tids = list(dict.fromkeys(picked[i].get("tid", 0) for i in order))

    plot_w = width - LABEL_W - MARGIN - 70       # room on the right for duration labels
    px = plot_w / span
    step = _nice_step(span)

    def xat(us: float) -> float:
        return LABEL_W + us * px

    lanes_top = 62
    axis_y = lanes_top + len(tids) * (LANE_H + 4) + 4
    rows_top = axis_y + 18
    height = rows_top + len(order) * ROW_H + 30
    c = Canvas(width, height)

    top_level = [i for i in range(len(picked)) if "parent" not in args[i]]
    total = sum(float(picked[i]["dur"]) for i in top_level)
    c.text(MARGIN, MARGIN, Canvas.fit(f"profile timeline, {what}: {_fmt_us(span)}, "
                                      f"{len(top_level)} node events ({_fmt_us(total)} in "
                                      "nodes)", width - 2 * MARGIN, 2), scale=2)
    x = MARGIN
    for prov in providers:
        mine = [float(picked[i]["dur"]) for i in top_level if args[i].get("provider") == prov]
        label = f"{prov}: {_fmt_us(sum(mine))} in {len(mine)} nodes"
        c.rect(x, 38, x + 12, 38 + GLYPH_H + 2, colors[prov])
        c.text(x + 16, 40, label)
        x += 16 + Canvas.text_width(label) + 20
    sub_provider = next((str(a.get("provider", "?")) for a in args if "parent" in a), None)
    if sub_provider is not None:
        c.rect(x, 38, x + 12, 38 + GLYPH_H + 2, tint(colors[sub_provider], 0.5))
        c.text(x + 16, 40, "inside a fused partition (lighter)")

    for row in range(1, len(order), 2):   # zebra rows, under the grid
        y = rows_top + row * ROW_H
        c.rect(MARGIN, y - 2, width - MARGIN, y + ROW_H - 2, "#f7f7f7")
    grid = [k * step for k in range(int(span // step) + 1)]
    for t in grid:
        c.vline(xat(t), lanes_top - 2, height - 24, "#e4e4e4")

    for k, tid in enumerate(tids):
        y = lanes_top + k * (LANE_H + 4)
        c.rect(LABEL_W, y, LABEL_W + plot_w, y + LANE_H, "#f3f3f3")
        c.text(LABEL_W - 8, y + 4, f"thread {k + 1} (tid {tid})", anchor="right")
        for i in order:
            if picked[i].get("tid", 0) == tid and "parent" not in args[i]:
                ts = float(picked[i]["ts"]) - t0
                color = colors[str(args[i].get("provider", "?"))]
                c.rect(xat(ts), y, max(xat(ts) + 1, xat(ts + float(picked[i]["dur"]))),
                       y + LANE_H, color)
    for yy in (axis_y, height - 24):
        c.hline(LABEL_W, LABEL_W + plot_w, yy, "#000000")
        for t in grid:
            c.vline(xat(t), yy, yy + 4, "#000000")
            c.text(xat(t), yy + 6, _fmt_us(t) if t else "0", anchor="center")

    for row, i in enumerate(order):
        y = rows_top + row * ROW_H
        e, a = picked[i], args[i]
        sub = "parent" in a
        name = str(e.get("name", "?")).removesuffix("_kernel_time")
        op = a.get("kernel") or a.get("op_name") or "?"
        label = ("  " if sub else "") + f"{name} ({op})"
        c.text(MARGIN, y, Canvas.fit(label, LABEL_W - MARGIN - 8))
        ts, dur = float(e["ts"]) - t0, float(e["dur"])
        color = colors[str(a.get("provider", "?"))]
        x0, x1 = xat(ts), max(xat(ts) + 2, xat(ts + dur))
        c.rect(x0, y, x1, y + GLYPH_H - 1, tint(color, 0.5) if sub else color)
        text = _fmt_us(dur)
        if x1 + 4 + Canvas.text_width(text) <= width - MARGIN:
            c.text(x1 + 4, y, text)
        else:
            c.text(x0 - 4, y, text, anchor="right")
    return c
