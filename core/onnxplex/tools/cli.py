"""The ``onnxplex`` command line: run a model, list providers, show a placement report,
measure latency, summarize a profile.

Every mistake a user can make here (a missing or unreadable file, an argument out of range, a
model onnxplex refuses) ends in one ``onnxplex: error: ...`` line on stderr and exit status 2,
never a traceback; a closed output pipe (``onnxplex partition m.onnx | head``) ends quietly."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from .._errors import OnnxplexError
from ..framework.feeds import random_feeds

__all__ = ["main"]

logger = logging.getLogger("onnxplex")


class UsageError(Exception):
    """A mistake in the command line's arguments or files: reported as one line, status 2."""


# --------------------------------------------------------------------------------- arguments


def _int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low`` (argparse reports the message)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, not {text}")
    return value


def _existing_file(text: str) -> str:
    """An argparse type: a file that exists (found before any work is done)."""
    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    return text


def _output_file(text: str) -> str:
    """An argparse type: a file that can be created (its folder exists), checked before a
    possibly long run rather than after it."""
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: no folder {folder!r}")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: it is a directory")
    return text


def _load_feeds(path: str, input_names: Callable[[], Sequence[str]]) -> dict[str, Any]:
    """The arrays of an ``.npz`` file by name; a ``.npy`` file's one array for a model with
    one input. Anything else (a pickle, object arrays, another format) is a UsageError."""
    try:
        data = np.load(path, allow_pickle=False)
    except ValueError as e:   # numpy: pickled / object data, which is never loaded
        raise UsageError(f"--inputs {path!r} is not a .npz file of numeric or string arrays "
                         f"(numpy: {str(e).split('.')[0]})") from None
    except OSError as e:
        raise UsageError(f"--inputs {path!r} cannot be read: {e.strerror or e}") from None
    if isinstance(data, np.ndarray):   # a .npy file: one unnamed array
        input_names = input_names()
        if len(input_names) != 1:
            raise UsageError(
                f"--inputs {path!r} holds one unnamed array (.npy) but the model has "
                f"{len(input_names)} inputs ({', '.join(input_names)}); save them by name "
                "with numpy.savez(path, name=array, ...)")
        return {input_names[0]: data}
    with data:
        try:
            return {k: data[k] for k in data.files}
        except ValueError as e:
            raise UsageError(f"--inputs {path!r} holds arrays that are not loaded "
                             f"(numpy: {str(e).split('.')[0]})") from None


def _providers_arg(text: str | None) -> list[str] | None:
    return [p.strip() for p in text.split(",") if p.strip()] if text else None


def _cmd_run(args: argparse.Namespace) -> int:
    from ..session.session import InferenceSession

    t0 = time.perf_counter()
    sess = InferenceSession(args.model, providers=_providers_arg(args.providers))
    t1 = time.perf_counter()
    if args.inputs:
        feeds = _load_feeds(args.inputs, lambda: [a.name for a in sess.get_inputs()])
    else:
        feeds = random_feeds(sess, args.seed, args.dim)
    outs = []
    times = []
    for _ in range(args.repeat):
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
        print(f"output {arg.name}: {_summary(arg, value)}")
    if args.save:
        np.savez(args.save, **{a.name: o for a, o in zip(sess.get_outputs(), outs)})
    return 0


def _summary(arg: Any, value: Any) -> str:
    """One output in a line: dtype and shape, and for numbers min, max, mean (and argmax of
    the first row); an empty array says so; a sequence or map its type and length."""
    if isinstance(value, np.ndarray):
        head = f"{value.dtype}{list(value.shape)}"
        if not value.size:
            return f"{head} (empty)"
        if value.dtype.kind not in "fiub":
            return head
        v = value.astype(np.float64)
        text = f"{head} min={v.min():.6g} max={v.max():.6g} mean={v.mean():.6g}"
        if v.ndim >= 1:
            text += f" argmax={int(v.reshape(v.shape[0], -1)[0].argmax())}"
        return text
    if isinstance(value, (list, dict)):   # a sequence or a map (ZipMap's list of dicts)
        kind = "item" if isinstance(value, dict) else "element"
        return f"{arg.type} with {len(value)} {kind}(s)"
    return f"{arg.type}: {type(value).__name__}"


def _cmd_providers(args: argparse.Namespace) -> int:
    from ..framework.plugins import get_all_providers, plugin_problems, provider_entry

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
    from ..session.session import GraphOptimizationLevel, InferenceSession, SessionOptions

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
        from .draw import GraphPicture

        compact = {"auto": None, "yes": True, "no": False}[args.compact]
        text = GraphPicture.from_session(sess, title=f"{args.model}: placement",
                                         compact=compact).render(fmt)
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
    from .perf import perf

    feeds = None
    if args.inputs:
        feeds = _load_feeds(args.inputs, lambda: _declared_inputs(args.model))
    report = perf(args.model, providers=_providers_arg(args.providers),
                  intra_op_threads=args.x, inter_op_threads=args.y, level=args.level,
                  repetitions=args.r, duration=args.t, warmup=args.warmup, feeds=feeds,
                  seed=args.seed, dim=args.dim, compare_onnxruntime=args.compare_onnxruntime,
                  profile=args.profile)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.text())
    if args.profile and not args.json:
        print(f"wrote {args.profile} (summarize it: onnxplex profile {args.profile})")
    return 0


def _declared_inputs(path: str) -> list[str]:
    """The model's graph inputs that are not initializers (what a session would ask for)."""
    import onnx

    try:
        graph = onnx.load(path, load_external_data=False).graph
    except Exception as e:  # noqa: BLE001 - the session would refuse it too
        raise UsageError(f"{path!r} is not a readable ONNX model: {e}") from None
    weights = {t.name for t in graph.initializer}
    return [v.name for v in graph.input if v.name not in weights]


def _cmd_profile(args: argparse.Namespace) -> int:
    from .perf import load_profile, profile_text, summarize_profile

    events = load_profile(args.file)
    summary = summarize_profile(events, top=args.top)
    print(json.dumps(summary, indent=2) if args.json else profile_text(summary))
    if args.png:
        from .timeline import timeline

        timeline(events, run=args.run).save(args.png)
        print(f"wrote {args.png}")
    return 0


_LEVELS = ["ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"]


class _Parser(argparse.ArgumentParser):
    """argparse, with a mistake reported as one ``onnxplex: error: ...`` line (the command
    named, and where to find its help) instead of the usage block and a second line."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.partition(" ")[2]
        where = f"onnxplex {command} --help" if command else "onnxplex --help"
        self.exit(2, f"onnxplex: error: {command + ': ' if command else ''}{message} "
                     f"(see {where})\n")


class _Help(argparse.HelpFormatter):
    """Help text with each option's default appended, when it has a meaningful one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("%(default)" not in text and action.default not in (None, False, [])
                and action.default is not argparse.SUPPRESS and action.option_strings):
            text += " (default: %(default)s)"
        return text


def _version() -> str:
    import numpy
    import onnx
    import onnx_ir

    from .._version import __version__

    return (f"onnxplex {__version__} (onnx {onnx.__version__}, onnx-ir {onnx_ir.__version__}, "
            f"numpy {numpy.__version__}, Python {sys.version.split()[0]})")


class _Version(argparse.Action):
    """``--version``: the versions are looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> NoReturn:
        print(_version())
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="onnxplex", description=__doc__.split("\n\n")[0],
                     formatter_class=_Help)
    parser.add_argument("--version", action=_Version, help="print the versions and exit")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log more (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, description=text, formatter_class=_Help)

    def model(p: argparse.ArgumentParser) -> None:
        p.add_argument("model", type=_existing_file, help="the .onnx model file")

    def providers(p: argparse.ArgumentParser) -> None:
        p.add_argument("--providers", metavar="A,B",
                       help="comma-separated providers in priority order (names or onnxruntime "
                            "aliases such as CPUExecutionProvider; default: every available "
                            "provider that is not opt-in)")

    def feeds(p: argparse.ArgumentParser) -> None:
        p.add_argument("--inputs", type=_existing_file, metavar="FILE",
                       help=".npz file of the inputs by name (a .npy file for a model with "
                            "one input); random inputs from the declared shapes without it")
        p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
        p.add_argument("--dim", type=_int_at_least(0), default=1, metavar="N",
                       help="size given to symbolic dimensions of the random inputs")

    def level(p: argparse.ArgumentParser) -> None:
        p.add_argument("-O", "--level", default="ORT_ENABLE_ALL", choices=_LEVELS,
                       help="graph optimization level of the session")

    p = command("run", "run a model and summarize its outputs")
    model(p)
    feeds(p)
    providers(p)
    p.add_argument("--repeat", type=_int_at_least(1), default=1, metavar="N",
                   help="runs to time (their median is printed)")
    p.add_argument("--save", type=_output_file, metavar="FILE",
                   help="write the outputs to this .npz file")
    p.set_defaults(func=_cmd_run)

    p = command("providers", "list providers, their availability and CPU features")
    p.add_argument("--json", action="store_true", help="print the same as JSON")
    p.set_defaults(func=_cmd_providers)

    p = command("partition", "show where each node runs and why (text, JSON or a picture)")
    model(p)
    providers(p)
    p.add_argument("--format", default="text", choices=["text", "json", "svg", "html", "dot"],
                   help="text report, JSON, or a picture of the graph: svg, html "
                        "(the svg with a legend and tables of partitions and fallbacks), dot")
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.add_argument("--compact", choices=["auto", "yes", "no"], default="auto",
                   help="pictures: draw each unbranched run of nodes on one provider as one "
                        "box (auto: for graphs deeper than 40 rows)")
    p.add_argument("-o", "--output", type=_output_file, metavar="FILE",
                   help="write to FILE instead of stdout")
    level(p)
    p.set_defaults(func=_cmd_partition)

    p = command("perf", "measure latency (as onnxruntime_perf_test does)")
    model(p)
    providers(p)
    p.add_argument("-x", type=_int_at_least(0), default=0, metavar="N",
                   help="intra-op threads (0: one per core)")
    p.add_argument("-y", type=_int_at_least(0), default=0, metavar="N",
                   help="inter-op threads; more than 1 runs independent nodes in parallel")
    when = p.add_mutually_exclusive_group()
    when.add_argument("-r", type=_int_at_least(1), metavar="N",
                      help="timed runs (100 when neither -r nor -t is given)")
    when.add_argument("-t", type=_positive_float, metavar="SECONDS",
                      help="time runs for this long instead")
    p.add_argument("--warmup", type=_int_at_least(0), default=1, metavar="N",
                   help="untimed runs after the first")
    level(p)
    feeds(p)
    p.add_argument("--compare-onnxruntime", action="store_true",
                   help="also run onnxruntime on the same inputs, alternating runs; print the "
                        "latency ratio and the max output difference")
    p.add_argument("--profile", type=_output_file, metavar="FILE",
                   help="profile onnxplex's runs (per node, as enable_profiling does) into "
                        "FILE, a Chrome trace 'onnxplex profile FILE' summarizes; per-node "
                        "timing adds a little to the latency measured")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_cmd_perf)

    p = command("profile", "summarize a profile written by enable_profiling or perf --profile")
    p.add_argument("file", type=_existing_file,
                   help="the profile (JSON, onnxruntime's Chrome-trace format)")
    p.add_argument("--top", type=_int_at_least(1), default=10, metavar="N",
                   help="slowest nodes to list")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--png", type=_output_file, metavar="FILE",
                   help="also draw a per-node timeline of one run, coloured by provider")
    p.add_argument("--run", type=_int_at_least(1), metavar="N",
                   help="the run to draw with --png, from 1 (default: the last)")
    p.set_defaults(func=_cmd_profile)
    return parser


@contextlib.contextmanager
def _warnings_as_log_lines() -> Iterator[None]:
    """Warnings (an unavailable provider, a plugin that failed) shown as one log line each,
    as the command's other messages are, instead of with a file name and source line."""
    shown = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], *args: Any, **kw: Any) -> None:
        logger.warning("%s", message)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def _quiet_broken_pipe() -> int:
    """The reader of our stdout went away (``| head``): stop without a traceback, as the
    Python documentation advises, and with the status a command killed by SIGPIPE has."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 128 + 13


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        with _warnings_as_log_lines():
            code = args.func(args)
        sys.stdout.flush()   # (a closed pipe shows here, not at interpreter exit)
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except OnnxplexError as e:
        message = f"{type(e).__name__}: {e}"
    except UsageError as e:
        message = str(e)
    except OSError as e:   # a file that could not be read or written after all
        message = f"{e.strerror or e}: {e.filename!r}" if e.filename else str(e)
    print(f"onnxplex: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
