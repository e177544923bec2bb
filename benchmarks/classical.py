"""Classical ML side by side: the scikit-learn, LightGBM and XGBoost zoo in onnxplex and
onnxruntime.

    python benchmarks/classical.py [--only svr,kmeans] [--threads 2] [--runs 200]
                                   [--budget 2] [--out PREFIX] [--readme README.md]

For each model of ``benchmarks/classical_zoo.py`` (converted by skl2onnx / onnxmltools with
their defaults, cached after the first build): onnxruntime (CPUExecutionProvider) and onnxplex
(default providers) are created ``CREATIONS`` times each, alternating, and the medians kept;
then at batch 1 and batch 1000 (the DictVectorizer model takes one map: batch 1 only) the
outputs are compared (labels exactly, probabilities and scores rtol 1e-4, atol 1e-5, ZipMap's
lists of dicts row by row and key by key) and both engines run alternately, up to ``--runs``
times each or until ``--budget`` seconds per engine have passed (at least 3 runs): the ratio
of median latencies, onnxplex / onnxruntime (below 1 is faster). Both at ``--threads``
intra-op threads, onnxruntime's workers not spinning (as ``onnxplex perf`` sets it).

A model onnxplex cannot load or place, fails to run or answers wrongly gets that status (the
exception class and its message's first line, or the first difference) and the script goes on;
its ratios are kept when it ran. The nodes placed on the onnx reference fallback are listed per
model (the partitions whose note is cpu_mlas's ``onnx reference fallback``). Geometric means
are over the models that ran, and apart over those that also matched.

Writes ``PREFIX.md`` (the table with the machine line) and ``PREFIX.json`` (every figure,
default ``benchmarks/classical_results``); with ``--readme`` the table also replaces the block
between ``<!-- classical:start -->`` and ``<!-- classical:end -->``. The machine is shared:
only ratios measured in one process mean anything, never absolute ms.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import classical_zoo as zoo  # noqa: E402

START, END = "<!-- classical:start -->", "<!-- classical:end -->"
CREATIONS = 15
BATCHES = (1, 1000)
MIN_RUNS = 3
FALLBACK_NOTE = "onnx reference fallback"  # cpu_mlas's _reference.NOTE


def _error(e: BaseException) -> str:
    """The class and the first line; a first line that introduces a list of nodes (the
    partitioner's "could not be assigned ...:") gets the nodes' op types instead."""
    lines = str(e).strip().splitlines() or [""]
    first = lines[0]
    if first.endswith(":"):
        ops = re.findall(r"^\s*node \d+ '[^']*': (?:[\w.]+::)?(\w+)\(", "\n".join(lines[1:]), re.M)
        first += " " + ", ".join(dict.fromkeys(ops)) if ops else ""
    return f"{type(e).__name__}: {first}"


def _sessions(threads: int) -> tuple[Callable[[bytes], Any], Callable[[bytes], Any]]:
    import onnxruntime as ort

    import onnxplex
    from onnxplex.tools.perf import _ort_session

    ort.set_default_logger_severity(3)  # converters declare label shapes [1] for any batch

    def ours(model: bytes):
        so = onnxplex.SessionOptions()
        so.intra_op_num_threads = threads
        return onnxplex.InferenceSession(model, so)

    def theirs(model: bytes):
        return _ort_session(ort, model, "ORT_ENABLE_ALL", threads, 0)

    return ours, theirs


def fallback_ops(sess) -> dict[str, int]:
    """op type -> how many of its nodes run on the onnx reference fallback."""
    plan = sess.get_provider_assignment()
    op = {p.index: p.op_type for p in plan.placements}
    return dict(Counter(op[i] for part in plan.partitions if part.note == FALLBACK_NOTE
                        for i in part.nodes))


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def latencies(ours: Callable[[], Any], theirs: Callable[[], Any], runs: int,
              budget: float) -> tuple[float, float, int]:
    """Median seconds of each, alternating which goes first; up to ``runs`` each, fewer (but
    ``MIN_RUNS``) when ``budget`` seconds of either engine's runs have passed."""
    ours(), theirs()  # warm-up (the comparison run was the first)
    t_ours, t_theirs = [], []
    for i in range(runs):
        pair = (ours, theirs) if i % 2 == 0 else (theirs, ours)
        for fn in pair:
            (t_ours if fn is ours else t_theirs).append(_timed(fn))
        if i + 1 >= MIN_RUNS and max(sum(t_ours), sum(t_theirs)) > budget:
            break
    return statistics.median(t_ours), statistics.median(t_theirs), len(t_ours)


def bench(z: zoo.ZooModel, threads: int, runs: int, budget: float) -> dict[str, Any]:
    make_ours, make_theirs = _sessions(threads)
    model = z.bytes
    row: dict[str, Any] = {"model": z.name, "library": z.library, "status": "ok",
                           "fallback": {}, "batches": {}}
    c_ours: list[float] = []
    c_theirs: list[float] = []
    ours = theirs = None
    for i in range(CREATIONS):   # (alternating which engine goes first, as the runs do)
        for engine in ("theirs", "ours") if i % 2 == 0 else ("ours", "theirs"):
            # The engine's previous session is dropped before the clock starts: freeing it
            # (onnxruntime joins its thread pool's workers) is not part of a creation.
            if engine == "theirs":
                theirs = None
                t0 = time.perf_counter()
                try:
                    made = make_theirs(model)
                except Exception as e:  # noqa: BLE001 - reported, the script goes on
                    row["status"] = f"onnxruntime {_error(e)}"
                    return row
                c_theirs.append(time.perf_counter() - t0)
                theirs = made
            elif row["status"] == "ok":
                ours = None
                t0 = time.perf_counter()
                try:
                    made = make_ours(model)
                except Exception as e:  # noqa: BLE001
                    row["status"] = _error(e)
                    continue
                c_ours.append(time.perf_counter() - t0)
                ours = made
            made = None
    row["create_onnxruntime_ms"] = statistics.median(c_theirs) * 1e3
    if ours is None:
        return row
    row["create_onnxplex_ms"] = statistics.median(c_ours) * 1e3
    row["fallback"] = fallback_ops(ours)
    names = [o.name for o in theirs.get_outputs()]
    for batch in BATCHES:
        if batch > z.max_batch:
            continue
        feeds = z.feeds(batch)
        try:
            expected = theirs.run(None, feeds)
        except Exception as e:  # noqa: BLE001
            row["status"] = f"onnxruntime run at batch {batch}: {_error(e)}"
            continue
        try:
            got = ours.run(None, feeds)
        except Exception as e:  # noqa: BLE001
            if row["status"] == "ok":
                row["status"] = f"run at batch {batch}: {_error(e)}"
            continue
        diff = zoo.compare(expected, got, names, z.labels)
        if diff and row["status"] == "ok":
            row["status"] = f"wrong at batch {batch}: {diff[0]}"
        t_ours, t_theirs, n = latencies(lambda f=feeds: ours.run(None, f),
                                        lambda f=feeds: theirs.run(None, f), runs, budget)
        row["batches"][str(batch)] = {"onnxplex_ms": t_ours * 1e3,
                                      "onnxruntime_ms": t_theirs * 1e3,
                                      "ratio": t_ours / t_theirs, "runs": n}
    return row


# ---- the report ------------------------------------------------------------------------------

def _geo(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def summary(rows: list[dict]) -> dict[str, Any]:
    """Geometric means (and worst) of each ratio, over the models that ran and those that
    matched."""
    def ratios(which: str, ok_only: bool) -> list[float]:
        out = []
        for r in rows:
            if ok_only and r["status"] != "ok":
                continue
            if which == "create":
                if "create_onnxplex_ms" in r:
                    out.append(r["create_onnxplex_ms"] / r["create_onnxruntime_ms"])
            elif which in r["batches"]:
                out.append(r["batches"][which]["ratio"])
        return out

    res: dict[str, Any] = {"models": len(rows),
                           "loaded": sum("create_onnxplex_ms" in r for r in rows),
                           "matched": sum(r["status"] == "ok" for r in rows)}
    for which in ("create", *map(str, BATCHES)):
        for scope, ok_only in (("ran", False), ("matched", True)):
            v = ratios(which, ok_only)
            res[f"{which}_{scope}"] = {"geomean": _geo(v) if v else None,
                                       "worst": max(v) if v else None, "n": len(v)}
    return res


def _cell_batch(r: dict, batch: int) -> str:
    b = r["batches"].get(str(batch))
    if b is None:
        return "-"
    unit, k = ("us", 1e3) if batch == 1 else ("ms", 1.0)
    ours, theirs = _num(b["onnxplex_ms"] * k), _num(b["onnxruntime_ms"] * k)
    return f"{b['ratio']:.2f} ({ours} / {theirs} {unit})"


def _num(v: float) -> str:
    """Three significant digits, no exponent."""
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def _md(text: str, limit: int = 140) -> str:
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return text.replace("|", "\\|")


def table(rows: list[dict], s: dict[str, Any], machine: str, threads: int) -> str:
    lines = [f"Machine: {machine}; {threads} intra-op threads.", "",
             "| model | status | creation ratio (ms) | batch 1 ratio (us) | batch 1000 ratio (ms) "
             "| on the onnx reference fallback |",
             "|---|---|---:|---:|---:|---|"]
    for r in rows:
        create = (f"{r['create_onnxplex_ms'] / r['create_onnxruntime_ms']:.2f} "
                  f"({r['create_onnxplex_ms']:.1f} / {r['create_onnxruntime_ms']:.1f})"
                  if "create_onnxplex_ms" in r else "-")
        fb = ", ".join(f"{op}" + (f" x{n}" if n > 1 else "")
                       for op, n in sorted(r["fallback"].items())) or "-"
        lines.append(f"| {r['model']} | {_md(r['status'])} | {create} | {_cell_batch(r, 1)} | "
                     f"{_cell_batch(r, 1000)} | {fb} |")
    lines += ["", f"{s['loaded']} of {s['models']} models load in onnxplex, {s['matched']} match "
              "onnxruntime. Ratios are onnxplex / onnxruntime (below 1 is faster); in brackets "
              "onnxplex's and onnxruntime's medians."]
    for which, label in (("create", "session creation"), ("1", "batch 1"),
                         ("1000", "batch 1000")):
        ran, ok = s[f"{which}_ran"], s[f"{which}_matched"]
        if not ran["n"]:
            lines.append(f"Geometric mean ratio, {label}: no model ran.")
            continue
        lines.append(f"Geometric mean ratio, {label}: **{ran['geomean']:.2f}** over the "
                     f"{ran['n']} models that ran (worst {ran['worst']:.2f}); "
                     + (f"{ok['geomean']:.2f} over the {ok['n']} that match."
                        if ok["n"] else "none matches."))
    return "\n".join(lines)


def update_readme(readme: Path, block: str) -> None:
    from run import update_readme as update  # (benchmarks/run.py: the shared block writer)

    update(readme, block, START, END)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="", help="comma-separated subset of the models")
    p.add_argument("--threads", type=int, default=2, help="intra-op threads of both engines")
    p.add_argument("--runs", type=int, default=200,
                   help="timed runs per engine and batch, at most (a few microseconds each at "
                   "batch 1: many, for a stable median)")
    p.add_argument("--budget", type=float, default=2.0,
                   help="seconds of runs per engine and batch after which timing stops")
    p.add_argument("--no-cache", action="store_true", help="rebuild the models")
    p.add_argument("--out", default=str(HERE / "classical_results"),
                   help="prefix of the .md and .json written")
    p.add_argument("--readme", help="README to update between the classical markers")
    a = p.parse_args(argv)
    from run import machine_line

    names = [n for n in a.only.split(",") if n] or zoo.model_names()
    print(f"onnxruntime's locale: {zoo.ort_locale()}", flush=True)
    rows = []
    for name in names:
        try:
            z = zoo.build(name, cache=not a.no_cache)
        except ImportError as e:
            print(f"{name:36s} skipped: {e}", flush=True)
            continue
        r = bench(z, a.threads, a.runs, a.budget)
        rows.append(r)
        b = {k: f"{v['ratio']:.2f}" for k, v in r["batches"].items()}
        create = (f"{r['create_onnxplex_ms'] / r['create_onnxruntime_ms']:.2f}"
                  if "create_onnxplex_ms" in r else "-")
        print(f"{name:36s} create {create:>6s}  b1 {b.get('1', '-'):>7s}  b1000 "
              f"{b.get('1000', '-'):>7s}  {r['status'][:120]}", flush=True)
    s = summary(rows)
    machine = machine_line()
    block = table(rows, s, machine, a.threads)
    out = Path(a.out)
    out.with_suffix(".md").write_text(block + "\n")
    out.with_suffix(".json").write_text(json.dumps(
        {"machine": machine, "threads": a.threads, "rows": rows, "summary": s}, indent=2))
    print(block)
    if a.readme:
        update_readme(Path(a.readme), block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
