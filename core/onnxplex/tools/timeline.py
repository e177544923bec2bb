"""A per-node timeline of one profiled run, as a PNG (``onnxplex profile FILE --png OUT``).

The picture has three parts, all on the same time axis (from the start of the run):

* one lane per thread, every node's bar coloured by the provider that ran it (what ran in
  parallel under ``ORT_PARALLEL``, and where the gaps are);
* one row per node event in start order, labelled with the node and op type, with its bar and
  its duration (sub-events a fused kernel reports, args ``parent``, are indented under their
  partition and drawn lighter);
* a legend with the time per provider in this run.

It reads Chrome-trace events as :func:`onnxplex.tools.perf.load_profile` returns them (onnxplex's or
onnxruntime's) and draws with matplotlib (:mod:`onnxplex.tools.charts`: imported only here, an
optional extra, ``pip install 'onnxplex[plot]'``). A run of a big model has hundreds of node
events: the rows show the ``max_rows`` longest (in start order), the lanes show every one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import InvalidArgumentError
from .charts import Chart, new_figure
from .draw import provider_colors, tint

__all__ = ["timeline"]

WIDTH = 1200          # pixels
ROW_PX, LANE_PX = 15, 22
MAX_ROWS = 300        # node rows drawn (the longest events); the thread lanes show them all
LABEL_CHARS = 48      # a row label longer than this is cut in the middle


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


def _fmt_us(us: float) -> str:
    return f"{us / 1e3:.3g} ms" if us >= 1000 else f"{us:.3g} us"




def _cut(text: str, limit: int = LABEL_CHARS) -> str:
    """``text`` cut in the middle to at most ``limit`` characters: a node name's head (the
    layer) and tail (the op) are what tell rows apart."""
    if len(text) <= limit:
        return text
    keep = limit - 1
    return text[:keep // 2] + "\u2026" + text[len(text) - (keep - keep // 2):]


def timeline(events: Sequence[Mapping[str, Any]], run: int | None = None,
             width: int = WIDTH, max_rows: int = MAX_ROWS) -> Chart:
    """Draw run ``run`` (1-based; default the last) of a profile; see the module docstring.
    ``width`` is in pixels; the height follows the number of threads and rows.

    Raises :class:`InvalidArgumentError` when the run does not exist or has no node events,
    :class:`MissingDependencyError` when matplotlib is not installed.
    """
    picked, t0, span, what = _select_run(events, run)
    args = [e.get("args") or {} for e in picked]
    order = sorted(range(len(picked)), key=lambda i: (float(picked[i]["ts"]),
                                                       "parent" in args[i], i))
    providers = list(dict.fromkeys(str(a.get("provider", "?")) for a in args))
    colors = provider_colors(providers)
    tids = list(dict.fromkeys(picked[i].get("tid", 0) for i in order))
    top_level = [i for i in range(len(picked)) if "parent" not in args[i]]
    total = sum(float(picked[i]["dur"]) for i in top_level)
    rows = order
    if len(order) > max_rows:   # the longest, still in start order
        longest = set(sorted(order, key=lambda i: -float(picked[i]["dur"]))[:max_rows])
        rows = [i for i in order if i in longest]

    def provider(i: int) -> str:
        return str(args[i].get("provider", "?"))

    def color(i: int) -> str:
        c = colors[provider(i)]
        return tint(c, 0.5) if "parent" in args[i] else c

    lanes_h, rows_h = len(tids) * LANE_PX + 12, len(rows) * ROW_PX + 12
    fig = new_figure(width, 150 + lanes_h + rows_h)
    from matplotlib.patches import Patch  # matplotlib is there: new_figure checked

    lanes, bars = fig.subplots(2, 1, sharex=True,
                               gridspec_kw={"height_ratios": [lanes_h, rows_h]})
    ms = 1e-3
    for k, tid in enumerate(tids):
        mine = [i for i in order if picked[i].get("tid", 0) == tid and "parent" not in args[i]]
        lanes.broken_barh([((float(picked[i]["ts"]) - t0) * ms, float(picked[i]["dur"]) * ms)
                           for i in mine], (k - 0.4, 0.8),
                          facecolors=[color(i) for i in mine], linewidth=0)
    lanes.set_yticks(range(len(tids)), [f"thread {k + 1} (tid {tid})"
                                        for k, tid in enumerate(tids)], fontsize=8)
    lanes.set_ylim(len(tids) - 0.5, -0.5)
    lanes.set_title("threads: every node of the run", fontsize=9, loc="left")

    starts = [(float(picked[i]["ts"]) - t0) * ms for i in rows]
    durs = [float(picked[i]["dur"]) * ms for i in rows]
    lengths = [max(d, span * ms * 0.002) for d in durs]   # a 1 us node still shows
    y = list(range(len(rows)))
    bars.barh(y, lengths, left=starts, height=0.72, color=[color(i) for i in rows],
              linewidth=0)
    labels = []
    for i in rows:
        name = str(picked[i].get("name", "?")).removesuffix("_kernel_time")
        op = args[i].get("kernel") or args[i].get("op_name") or "?"
        labels.append(("    " if "parent" in args[i] else "") + _cut(f"{name} ({op})"))
    bars.set_yticks(y, labels, fontsize=7.5)
    bars.set_ylim(len(rows) - 0.5, -0.5)
    for yy, x0, n, d in zip(y, starts, lengths, durs):
        bars.text(x0 + n + span * ms * 0.004, yy, _fmt_us(d / ms), va="center", fontsize=7,
                  color="#333333")
    bars.set_xlim(0, span * ms * 1.12)      # room for the last bars' durations
    bars.set_xlabel("time since the start of the run (ms)")
    shown = ("one row per node event" if rows is order else
             f"rows: the {len(rows)} longest of {len(order)} node events")
    bars.set_title(f"{shown}, in start order", fontsize=9, loc="left")
    for ax in (lanes, bars):
        ax.grid(axis="x", color="#e4e4e4", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.tick_params(axis="y", length=0)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)

    handles = []
    for prov in providers:
        mine = [float(picked[i]["dur"]) for i in top_level if provider(i) == prov]
        handles.append(Patch(color=colors[prov],
                             label=f"{prov}: {_fmt_us(sum(mine))} in {len(mine)} nodes"))
    sub = next((i for i in range(len(picked)) if "parent" in args[i]), None)
    if sub is not None:
        handles.append(Patch(color=color(sub), label="inside a fused partition (lighter)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4),
               fontsize=9, frameon=False)
    fig.suptitle(f"Profile timeline, {what}: {_fmt_us(span)}, {len(top_level)} node events "
                 f"({_fmt_us(total)} in nodes)", fontsize=12)
    return Chart(fig)
