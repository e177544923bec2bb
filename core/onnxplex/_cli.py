"""The ``onnxplex`` command line: run a model, list providers, show a placement report,
measure latency, summarize a profile."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._errors import OnnxplexError
from ._feeds import random_feeds

__all__ = ["main"]


def _providers_arg(text: str | None) -> list[str] | None:
    return [p.strip() for p in text.split(",") if p.strip()] if text else None


def _cmd_run(args: argparse.Namespace) -> int:
    from ._session import InferenceSession

    t0 = time.perf_counter()
    sess = InferenceSession(args.model, providers=_providers_arg(args.providers))
    t1 = time.perf_counter()
    if args.inputs:
        with np.load(args.inputs, allow_pickle=False) as data:
            feeds = {k: data[k] for k in data.files}
    else:
        feeds = random_feeds(sess, args.seed, args.dim)
    outs = []
    times = []
    for _ in range(max(1, args.repeat)):
        r0 = time.perf_counter()
        outs = sess.run(None, feeds)
        times.append(time.perf_counter() - r0)
    print(f"model: {args.model}")
    print(f"providers: {', '.join(sess.get_providers())}")
    counts = sess.get_provider_assignment().counts()
    print("nodes per provider: " + ", ".join(f"{k}={v}" for k, v in counts.items()))
    print(f"session creation: {(t1 - t0) * 1e3:.1f} ms; run: {np.median(times) * 1e3:.2f} ms "
          f"(median of {len(times)})")
    for arg, value in zip(sess.get_outputs(), outs):
        if isinstance(value, np.ndarray) and value.dtype.kind in "fiub" and value.size:
            v = value.astype(np.float64)
            print(f"output {arg.name}: {value.dtype}{list(value.shape)} min={v.min():.6g} "
                  f"max={v.max():.6g} mean={v.mean():.6g}"
                  + (f" argmax={int(v.reshape(v.shape[0], -1).argmax(-1)[0])}"
                     if v.ndim >= 1 and v.shape[0] else ""))
        elif isinstance(value, (list, dict)):   # a sequence or a map (ZipMap's list of dicts)
            print(f"output {arg.name}: {arg.type} with {len(value)} "
                  f"{'item' if isinstance(value, dict) else 'element'}(s)")
        else:
            print(f"output {arg.name}: {type(value).__name__}")
    if args.save:
        np.savez(args.save, **{a.name: o for a, o in zip(sess.get_outputs(), outs)})
    return 0


def _cmd_providers(args: argparse.Namespace) -> int:
    from ._plugins import get_all_providers, plugin_problems, provider_entry

    rows = []
    for name in get_all_providers():
        entry = provider_entry(name)
        why = entry.availability()
        opt_in = False
        try:
            cls = entry.load()
            opt_in = bool(cls.opt_in)
            info = cls.describe()
        except Exception as e:  # noqa: BLE001 - describe is informational
            info = {"describe_error": f"{type(e).__name__}: {e}"}
        rows.append({"name": name, "available": why.ok, "reason": why.reason, "opt_in": opt_in,
                     "origin": entry.origin, "aliases": list(entry.aliases), **info})
    problems = [p.__dict__ for p in plugin_problems()]
    if args.json:
        print(json.dumps({"providers": rows, "plugin_problems": problems}, indent=2,
                         default=str))
        return 0
    for r in rows:
        status = "available" if r["available"] else f"unavailable: {r['reason']}"
        if r["available"] and r["opt_in"]:
            status += " (opt-in: used when a session names it)"
        print(f"{r['name']}  ({r['origin']})  {status}")
        if r["aliases"]:
            print(f"    aliases: {', '.join(r['aliases'])}")
        for k, v in r.items():
            if k not in ("name", "available", "reason", "opt_in", "origin", "aliases"):
                print("\n".join(_describe_lines(k, v, 1)))
    for p in problems:
        print(f"plugin {p['plugin']} ({p['distribution']}) failed: {p['error']}")
    return 0


def _describe_lines(key: str, value: Any, depth: int) -> list[str]:
    """A provider's describe() entry as indented text: nested mappings one level per indent,
    a mapping of plain values on one line (``a=1 b=x,y``)."""
    pad = "    " * depth

    def flat(v: Any) -> str:
        if isinstance(v, (list, tuple)):
            return ",".join(map(str, v)) or "-"
        return str(v)

    if not isinstance(value, Mapping):
        return [f"{pad}{key}: {flat(value)}"]
    if depth > 1 and not any(isinstance(v, Mapping) for v in value.values()):
        return [f"{pad}{key}: " + " ".join(f"{k}={flat(v)}" for k, v in value.items())]
    out = [f"{pad}{key}:"]
    for k, v in value.items():
        out += _describe_lines(str(k), v, depth + 1)
    return out


def _cmd_partition(args: argparse.Namespace) -> int:
    from ._session import GraphOptimizationLevel, InferenceSession, SessionOptions

    so = SessionOptions()
    so.graph_optimization_level = getattr(GraphOptimizationLevel, args.level)
    sess = InferenceSession(args.model, so, providers=_providers_arg(args.providers))
    plan = sess.get_provider_assignment()
    fmt = "json" if args.json else args.format
    if fmt == "json":
        text = json.dumps(plan.to_dict(), indent=2)
    elif fmt == "text":
        text = plan.report()
    else:
        from ._draw import GraphPicture

        text = GraphPicture.from_session(sess, title=f"{args.model}: placement").render(fmt)
    _emit(text, args.output)
    return 0


def _emit(text: str, output: str | None) -> None:
    """Print ``text``, or write it to ``output`` and say so."""
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")
        print(f"wrote {output}")
    else:
        print(text)


def _cmd_perf(args: argparse.Namespace) -> int:
    from ._perf import perf

    feeds = None
    if args.inputs:
        with np.load(args.inputs, allow_pickle=False) as data:
            feeds = {k: data[k] for k in data.files}
    report = perf(args.model, providers=_providers_arg(args.providers),
                  intra_op_threads=args.x, inter_op_threads=args.y, level=args.level,
                  repetitions=args.r, duration=args.t, warmup=args.warmup, feeds=feeds,
                  seed=args.seed, dim=args.dim, compare_onnxruntime=args.compare_onnxruntime)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.text())
    return 0


def _cmd_profile(args: argparse.Namespace) -> int:
    from ._perf import load_profile, profile_text, summarize_profile

    events = load_profile(args.file)
    summary = summarize_profile(events, top=args.top)
    print(json.dumps(summary, indent=2) if args.json else profile_text(summary))
    if args.png:
        from ._draw_timeline import timeline

        timeline(events, run=args.run).save(args.png)
        print(f"wrote {args.png}")
    return 0


_LEVELS = ["ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onnxplex", description=__doc__)
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log more (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run a model once and summarize its outputs")
    p.add_argument("model")
    p.add_argument("--inputs", help=".npz file of named inputs (random from shapes if absent)")
    p.add_argument("--providers", help="comma-separated providers in priority order")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dim", type=int, default=1, help="value for symbolic dims (default 1)")
    p.add_argument("--repeat", type=int, default=1, help="runs to time (median reported)")
    p.add_argument("--save", help="write the outputs to this .npz file")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("providers", help="list providers, availability and CPU features")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_providers)

    p = sub.add_parser("partition", help="show where each node runs and why (text, JSON or "
                                         "a picture)")
    p.add_argument("model")
    p.add_argument("--providers", help="comma-separated providers in priority order")
    p.add_argument("--format", default="text", choices=["text", "json", "svg", "html", "dot"],
                   help="text report (default), JSON, or a picture of the graph: svg, html "
                        "(the svg with a legend and tables of partitions and fallbacks), dot")
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("-O", "--level", default="ORT_ENABLE_ALL", choices=_LEVELS,
                   help="graph optimization level of the session (default ORT_ENABLE_ALL)")
    p.set_defaults(func=_cmd_partition)

    p = sub.add_parser("perf", help="measure latency (as onnxruntime_perf_test does)")
    p.add_argument("model")
    p.add_argument("--providers", help="comma-separated providers in priority order")
    p.add_argument("-x", type=int, default=0, metavar="N", help="intra-op threads (0: default)")
    p.add_argument("-y", type=int, default=0, metavar="N",
                   help="inter-op threads; > 1 runs independent nodes in parallel")
    when = p.add_mutually_exclusive_group()
    when.add_argument("-r", type=int, metavar="N", help="timed runs (default 100)")
    when.add_argument("-t", type=float, metavar="SECONDS", help="time runs for this long")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs after the first")
    p.add_argument("-O", "--level", default="ORT_ENABLE_ALL", choices=_LEVELS,
                   help="graph optimization level")
    p.add_argument("--inputs", help=".npz file of named inputs (random from shapes if absent)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dim", type=int, default=1, help="value for symbolic dims (default 1)")
    p.add_argument("--compare-onnxruntime", action="store_true",
                   help="also run onnxruntime on the same inputs, alternating runs; print the "
                        "latency ratio and the max output difference")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_perf)

    p = sub.add_parser("profile", help="summarize a profile written by enable_profiling")
    p.add_argument("file")
    p.add_argument("--top", type=int, default=10, help="slowest nodes to list")
    p.add_argument("--json", action="store_true")
    p.add_argument("--png", metavar="FILE",
                   help="also draw a per-node timeline of one run, coloured by provider")
    p.add_argument("--run", type=int, metavar="N",
                   help="the run to draw with --png, from 1 (default: the last)")
    p.set_defaults(func=_cmd_profile)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except OnnxplexError as e:
        print(f"onnxplex: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
