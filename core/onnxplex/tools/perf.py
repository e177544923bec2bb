"""Latency measurement (``onnxplex perf``) and profile summaries (``onnxplex profile``).

``perf`` works as onnxruntime's ``onnxruntime_perf_test`` does: build a session, time the
first run, warm up, then time a number of runs (``repetitions``) or runs for a while
(``duration``) and report throughput and latency percentiles. With ``compare_onnxruntime``
the same inputs also go through an onnxruntime session in the same process, the two runs
alternating (and swapping order every iteration) so that both see the same machine state; the
report gives the ratio of the medians and the largest output difference. onnxruntime's thread
spinning is turned off in that mode (its spinning workers would steal the cores from the
alternating onnxplex runs). onnxruntime is imported on demand: a benchmark peer, not a
dependency. Other engines join the same alternation through ``peers``: named factories the
caller supplies (the benchmarks pass OpenVINO's, ``benchmarks/peers.py``; this module imports
no engine but onnxruntime), each timed for creation, checked against onnxruntime's outputs
(onnxplex's without it) and reported with its own ratio.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import math
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

import numpy as np

from .._errors import InvalidArgumentError

__all__ = ["LatencyStats", "PerfReport", "load_profile", "perf", "profile_text",
           "summarize_profile"]

logger = logging.getLogger(__name__)

PERCENTILES = (50, 90, 95, 99)


@dataclasses.dataclass(frozen=True)
class LatencyStats:
    """Latency of a series of runs, in seconds."""

    runs: int
    total: float
    mean: float
    min: float
    max: float
    percentiles: Mapping[int, float]

    @classmethod
    def of(cls, times: Sequence[float]) -> LatencyStats:
        if not times:
            raise InvalidArgumentError("no runs were timed")
        t = np.asarray(times, dtype=np.float64)
        return cls(len(t), float(t.sum()), float(t.mean()), float(t.min()), float(t.max()),
                   {p: float(np.percentile(t, p)) for p in PERCENTILES})

    @property
    def median(self) -> float:
        return self.percentiles[50]

    @property
    def runs_per_second(self) -> float:
        return self.runs / self.total if self.total > 0 else float("inf")

    def to_dict(self) -> dict[str, float]:
        return {"runs": self.runs, "total_s": self.total, "runs_per_s": self.runs_per_second,
                "mean_ms": self.mean * 1e3, "min_ms": self.min * 1e3, "max_ms": self.max * 1e3,
                **{f"p{p}_ms": v * 1e3 for p, v in self.percentiles.items()}}


@dataclasses.dataclass(frozen=True)
class PerfReport:
    model: str
    providers: list[str]
    intra_op_threads: int
    inter_op_threads: int
    session_creation: float
    first_run: float
    latency: LatencyStats
    peer: dict[str, Any] | None = None
    """With ``compare_onnxruntime``: onnxruntime's version, session creation, first run and
    latency, the ratio of medians (onnxplex / onnxruntime) and the max output difference."""
    peers: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """With ``peers``: per name, the same as ``peer`` (no version), ``max_abs_diff`` taken
    against ``diff_against`` (onnxruntime, or onnxplex without it); or only ``error``
    (``<class>: <first line>``) for a peer whose creation or first run raised."""

    def to_dict(self) -> dict[str, Any]:
        out = {"model": self.model, "providers": self.providers,
               "intra_op_threads": self.intra_op_threads,
               "inter_op_threads": self.inter_op_threads,
               "session_creation_ms": self.session_creation * 1e3,
               "first_run_ms": self.first_run * 1e3, "latency": self.latency.to_dict()}
        if self.peer is not None:
            out["onnxruntime"] = {**self.peer, "latency": self.peer["latency"].to_dict()}
        if self.peers:
            out["peers"] = {k: {**v, **({"latency": v["latency"].to_dict()}
                                        if "latency" in v else {})}
                            for k, v in self.peers.items()}
        return out

    def text(self) -> str:
        lat = self.latency
        lines = [
            f"model: {self.model}",
            f"providers: {', '.join(self.providers)}; threads: intra-op "
            f"{self.intra_op_threads or 'default'}, inter-op {self.inter_op_threads or 'default'}",
            f"session creation: {self.session_creation * 1e3:.1f} ms",
            f"first run: {self.first_run * 1e3:.2f} ms",
            f"runs: {lat.runs} in {lat.total:.2f} s ({lat.runs_per_second:.2f} runs/s)",
            "latency ms: " + "  ".join(f"p{p} {v * 1e3:.3f}" for p, v in lat.percentiles.items())
            + f"  mean {lat.mean * 1e3:.3f}  min {lat.min * 1e3:.3f}  max {lat.max * 1e3:.3f}",
        ]
        if self.peer is not None:
            p = self.peer
            plat = p["latency"]
            lines += [
                f"onnxruntime {p['version']} (same inputs, runs alternating): session creation "
                f"{p['session_creation'] * 1e3:.1f} ms, first run {p['first_run'] * 1e3:.2f} ms",
                "onnxruntime latency ms: " + "  ".join(
                    f"p{q} {v * 1e3:.3f}" for q, v in plat.percentiles.items()),
                f"ratio onnxplex / onnxruntime (median latency): {p['ratio']:.3f}",
                f"max |output difference|: {p['max_abs_diff']:.3g}",
            ]
        for name, p in self.peers.items():
            if "error" in p:
                lines.append(f"{name}: {p['error']}")
                continue
            lines += [
                f"{name} (same inputs, runs alternating): session creation "
                f"{p['session_creation'] * 1e3:.1f} ms, first run {p['first_run'] * 1e3:.2f} ms",
                f"{name} latency ms: " + "  ".join(
                    f"p{q} {v * 1e3:.3f}" for q, v in p["latency"].percentiles.items()),
                f"ratio onnxplex / {name} (median latency): {p['ratio']:.3f}",
                f"max |output difference| against {p['diff_against']}: "
                f"{p['max_abs_diff']:.3g}",
            ]
        return "\n".join(lines)


class _Progress:
    """A one-line progress bar on a terminal; silent elsewhere (pipes, CI logs)."""

    def __init__(self, stream: TextIO | None, total_runs: int | None, duration: float | None):
        self.stream = stream if stream is not None and stream.isatty() else None
        self.total_runs, self.duration = total_runs, duration
        self.t0 = time.perf_counter()
        self.last = 0.0

    def update(self, runs: int) -> None:
        if self.stream is None:
            return
        now = time.perf_counter()
        if now - self.t0 < 1.0 or now - self.last < 0.2:  # only long runs get a bar
            return
        self.last = now
        if self.duration:
            frac = min(1.0, (now - self.t0) / self.duration)
        else:
            frac = runs / max(1, self.total_runs or 1)
        bar = "#" * int(frac * 30)
        self.stream.write(f"\r[{bar:<30}] {frac * 100:5.1f}%  {runs} runs")
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not None and self.last:
            self.stream.write("\r" + " " * 60 + "\r")
            self.stream.flush()


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _load_onnxruntime():
    try:
        return importlib.import_module("onnxruntime")
    except ImportError as e:
        raise InvalidArgumentError(
            "--compare-onnxruntime needs the onnxruntime package (pip install onnxruntime); "
            f"it could not be imported: {e}") from e


def _ort_session(ort, model: str | bytes, level: str, intra: int, inter: int):
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    # Runs alternate in one process: onnxruntime's worker threads would otherwise busy-wait
    # after each of its runs and take the cores from the onnxplex run that follows (and
    # onnxplex's pool sleeps, it never spins): both engines get sleeping workers.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if intra:
        so.intra_op_num_threads = intra
    if inter:
        so.inter_op_num_threads = inter
        if inter > 1:
            so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _max_abs_diff(a: Sequence[Any], b: Sequence[Any]) -> float:
    worst = 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            return float("inf")
        if x.size and x.dtype.kind in "fiub" and y.dtype.kind in "fiub":
            d = np.abs(x.astype(np.float64) - y.astype(np.float64))
            worst = max(worst, float(np.nanmax(d)) if np.isfinite(d).any() else 0.0)
    return worst


def _error_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return type(exc).__name__ + (f": {lines[0]}" if lines else "")


PeerFactory = Callable[[], Callable[[Mapping[str, np.ndarray]], Sequence[Any]]]


def perf(model: str | bytes, *, providers: Sequence[Any] | None = None, intra_op_threads: int = 0,
         inter_op_threads: int = 0, level: str = "ORT_ENABLE_ALL",
         repetitions: int | None = None, duration: float | None = None, warmup: int = 1,
         feeds: Mapping[str, np.ndarray] | None = None, seed: int = 0, dim: int = 1,
         compare_onnxruntime: bool = False, peers: Mapping[str, PeerFactory] | None = None,
         progress: TextIO | None | bool = True, profile: str | None = None) -> PerfReport:
    """Measure ``model`` as ``onnxruntime_perf_test`` does; see the module docstring.

    ``repetitions`` and ``duration`` (seconds) are alternatives; neither given means 100 runs.
    ``level`` is a :class:`GraphOptimizationLevel` member name. ``peers`` maps a name to a
    factory: called once (timed as that engine's session creation), it returns a function
    from the feeds to the outputs in the model's order, which runs in the alternation.
    ``profile``: a file to write onnxplex's profile of the session's creation and runs to
    (``enable_profiling``'s Chrome trace; per-node timing adds a little to the latency).
    """
    from ..framework.feeds import random_feeds
    from ..session.session import (
        ExecutionMode,
        GraphOptimizationLevel,
        InferenceSession,
        SessionOptions,
    )

    if repetitions is not None and duration is not None:
        raise InvalidArgumentError("give either repetitions or duration, not both")
    if repetitions is None and duration is None:
        repetitions = 100
    if (repetitions is not None and repetitions < 1) or (duration is not None and duration <= 0):
        raise InvalidArgumentError("repetitions must be >= 1 and duration > 0")
    if not hasattr(GraphOptimizationLevel, level):
        raise InvalidArgumentError(
            f"unknown optimization level {level!r}; one of "
            f"{', '.join(m.name for m in GraphOptimizationLevel)}")
    ort = _load_onnxruntime() if compare_onnxruntime else None

    so = SessionOptions()
    so.graph_optimization_level = getattr(GraphOptimizationLevel, level)
    so.intra_op_num_threads = intra_op_threads
    so.inter_op_num_threads = inter_op_threads
    if inter_op_threads > 1:
        so.execution_mode = ExecutionMode.ORT_PARALLEL
    if profile is not None:
        so.enable_profiling = True
        so.profile_file_prefix = f"{profile}.part{os.getpid()}"
    created, sess = _timed(lambda: InferenceSession(model, so, providers=providers))
    feeds = dict(feeds) if feeds is not None else random_feeds(sess, seed, dim)
    first, ours = _timed(lambda: sess.run(None, feeds))
    runners: list[Callable[[], Any]] = [lambda: sess.run(None, feeds)]
    peer: dict[str, Any] | None = None
    ref, ref_name = ours, "onnxplex"   # what other peers' outputs are checked against
    if ort is not None:
        src = model if isinstance(model, (bytes, str)) else str(model)
        p_created, psess = _timed(lambda: _ort_session(ort, src, level, intra_op_threads,
                                                       inter_op_threads))
        p_first, theirs = _timed(lambda: psess.run(None, feeds))
        runners.append(lambda: psess.run(None, feeds))
        peer = {"version": ort.__version__, "session_creation": p_created,
                "first_run": p_first, "max_abs_diff": _max_abs_diff(ours, theirs)}
        ref, ref_name = theirs, "onnxruntime"
    others: dict[str, dict[str, Any]] = {}
    slot: dict[str, int] = {}
    for name, make in (peers or {}).items():
        try:
            o_created, run = _timed(make)
            o_first, outs = _timed(lambda run=run: run(feeds))
        except Exception as e:  # noqa: BLE001 - a peer that cannot take the model is reported
            others[name] = {"error": _error_line(e)}
            logger.info("perf: peer %s failed on %s: %s", name, model if isinstance(
                model, str) else "<bytes>", others[name]["error"])
            continue
        slot[name] = len(runners)
        runners.append(lambda run=run: run(feeds))
        others[name] = {"session_creation": o_created, "first_run": o_first,
                        "diff_against": ref_name, "max_abs_diff": _max_abs_diff(ref, outs)}
    for _ in range(max(0, warmup)):
        for r in runners:
            r()

    times: list[list[float]] = [[] for _ in runners]
    # (True: the stderr of the moment, not the one there was when this module was imported)
    bar = _Progress(sys.stderr if progress is True else progress or None, repetitions,
                    duration)
    t_end = time.perf_counter() + duration if duration else None
    i = 0
    try:
        while (i < repetitions) if repetitions is not None else (time.perf_counter() < t_end):
            order = range(len(runners)) if i % 2 == 0 else reversed(range(len(runners)))
            for k in order:
                t0 = time.perf_counter()
                runners[k]()
                times[k].append(time.perf_counter() - t0)
            i += 1
            bar.update(i)
    finally:
        bar.close()
    if profile is not None:
        os.replace(sess.end_profiling(), profile)
    ours_stats = LatencyStats.of(times[0])
    if peer is not None:
        peer["latency"] = LatencyStats.of(times[1])
        peer["ratio"] = ours_stats.median / peer["latency"].median
    for name, k in slot.items():
        lat = LatencyStats.of(times[k])
        others[name]["latency"] = lat
        others[name]["ratio"] = ours_stats.median / lat.median if lat.median else math.inf
    return PerfReport(model if isinstance(model, str) else "<bytes>", sess.get_providers(),
                      intra_op_threads, inter_op_threads, created, first, ours_stats, peer,
                      others)


# --------------------------------------------------------------------------------------------
# Profile summaries
# --------------------------------------------------------------------------------------------


def load_profile(path: str) -> list[dict[str, Any]]:
    """The events of a Chrome-trace JSON written by ``end_profiling`` (or onnxruntime's)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise InvalidArgumentError(f"cannot read profile {path!r}: {e}") from e
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise InvalidArgumentError(f"{path!r} is not a Chrome-trace event list")
    return events


def summarize_profile(events: Sequence[Mapping[str, Any]], top: int = 10) -> dict[str, Any]:
    """Time per op type, per provider and the slowest nodes, from ``Node`` events (``dur`` in
    microseconds); ``runs`` counts ``model_run`` events; ``session_creation`` lists the
    ``Session`` events of creation (loading, optimization, partition and compile, plan).
    Sub-events of fused kernels (args ``parent``, see ``onnxplex.Kernel``) are inside their
    partition's event: they are not counted again, but listed per kernel in
    ``fused_kernels``."""
    timed = [e for e in events if e.get("cat") == "Node" and e.get("ph", "X") == "X"
             and "dur" in e]
    nodes = [e for e in timed if "parent" not in (e.get("args") or {})]
    subs = [e for e in timed if "parent" in (e.get("args") or {})]
    runs = sum(1 for e in events if e.get("name") == "model_run")
    total = sum(float(e["dur"]) for e in nodes) or 1.0

    def table(key: Callable[[Mapping[str, Any]], str],
              evs: Sequence[Mapping[str, Any]] = nodes) -> list[dict[str, Any]]:
        acc: dict[str, list[float]] = defaultdict(list)
        for e in evs:
            acc[key(e)].append(float(e["dur"]))
        rows = [{"name": k, "calls": len(v), "total_us": sum(v), "avg_us": sum(v) / len(v),
                 "percent": 100.0 * sum(v) / total} for k, v in acc.items()]
        return sorted(rows, key=lambda r: -r["total_us"])

    args = lambda e: e.get("args") or {}  # noqa: E731
    by_node = table(lambda e: f"{e['name'].removesuffix('_kernel_time')} "
                              f"({args(e).get('op_name', '?')}, {args(e).get('provider', '?')})")
    out = {"runs": runs, "node_events": len(nodes), "node_time_us": total if nodes else 0.0,
           "by_op_type": table(lambda e: str(args(e).get("op_name", "?"))),
           "by_provider": table(lambda e: str(args(e).get("provider", "?"))),
           "top_nodes": by_node[:top]}
    if subs:   # percentages relative to the total node time
        out["fused_kernels"] = table(lambda e: f"{args(e).get('provider', '?')}: "
                                               f"{args(e).get('kernel') or args(e).get('op_name')}",
                                     subs)
    creation = [e for e in events if e.get("cat") == "Session" and "dur" in e
                and e.get("name") != "model_run"]
    if creation:   # session_initialization and its steps, in the order they ended
        out["session_creation"] = [{"name": e["name"], "ms": float(e["dur"]) / 1e3}
                                   for e in creation]
    return out


def profile_text(summary: Mapping[str, Any]) -> str:
    """The summary as text tables; names are never cut (each table's name column is as wide
    as its longest name: node names of real exports run to 60-100 characters and differ in
    their tails)."""
    runs = summary["runs"]
    lines = [f"{summary['node_events']} node events over {runs} run(s); node time "
             f"{summary['node_time_us'] / 1e3:.2f} ms"
             + (f" ({summary['node_time_us'] / 1e3 / runs:.3f} ms per run)" if runs else "")]
    if summary.get("session_creation"):
        rows = summary["session_creation"]
        width = max(len(r["name"]) for r in rows)
        lines.append("\nsession creation:")
        lines.extend(f"  {r['name']:<{width}} {r['ms']:>10.2f} ms" for r in rows)
    for title, key in (("per op type", "by_op_type"), ("per provider", "by_provider"),
                       ("slowest nodes", "top_nodes"),
                       ("inside fused partitions, per kernel", "fused_kernels")):
        if key not in summary:
            continue
        rows = summary[key]
        width = max([4, *(len(r["name"]) for r in rows)])
        lines.append(f"\n{title}:")
        lines.append(f"  {'name':<{width}} {'calls':>7} {'total ms':>10} {'avg us':>10} {'%':>6}")
        for r in rows:
            lines.append(f"  {r['name']:<{width}} {r['calls']:>7} {r['total_us'] / 1e3:>10.3f} "
                         f"{r['avg_us']:>10.1f} {r['percent']:>6.1f}")
    return "\n".join(lines)
