"""What the benchmarks of converted zoo models (quantized.py, half.py) share: their command
line, the alternating timing of the engines (onnxplex, onnxruntime and, when it is installed,
OpenVINO) and the closing geometric means."""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any


def arguments(doc: str, default_out: str, argv: list[str] | None, models: tuple[str, ...],
              formats: tuple[Sequence[str], str] | None = None
              ) -> tuple[argparse.Namespace, Path, Path, list[str], list[int]]:
    """(arguments, source folder, output folder, model names, thread counts); ``formats``:
    the script's conversions and the default one, for a ``--formats`` argument (a list in
    ``args.formats``, unknown names refused)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--models", required=True, help="folder of the zoo's float models")
    ap.add_argument("--out", help=f"folder for the converted models (default MODELS/{default_out})")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--only", help="comma-separated subset of the models")
    ap.add_argument("--providers", default="",
                    help="onnxplex's providers, as the zoo runner takes them "
                         "(name[:key=value...], comma-separated; default: the session's)")
    if formats is not None:
        ap.add_argument("--formats", default=formats[1],
                        help=f"comma-separated, of {', '.join(formats[0])}")
    args = ap.parse_args(argv)
    if formats is not None:
        args.formats = args.formats.split(",")
        unknown = set(args.formats) - set(formats[0])
        if unknown:
            ap.error(f"unknown formats {sorted(unknown)}; choose from {', '.join(formats[0])}")
    src = Path(args.models)
    out = Path(args.out) if args.out else src / default_out
    names = args.only.split(",") if args.only else list(models)
    return args, src, out, names, [int(t) for t in args.threads.split(",")]


def cached(make: Callable[[Path, Path], None], src: Path, dst: Path) -> Path:
    """``dst``, made from ``src`` by ``make(src, tmp)`` unless it exists (a killed run leaves
    no file that looks done)."""
    if not dst.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_suffix(".tmp.onnx")
        make(src, tmp)
        tmp.replace(dst)
    return dst


def model_files(src: Path, names: list[str], width: int) -> Iterator[tuple[str, Path]]:
    """(name, ``src``/name.onnx) of each model that is there; a missing one is reported on
    stderr (``width``: the table's name column) and skipped."""
    for name in names:
        f = src / f"{name}.onnx"
        if f.exists():
            yield name, f
        else:
            print(f"{name:<{width}} not in {src}", file=sys.stderr)


def plex_session(path: Path, threads: int, providers: str):
    """An onnxplex session of ``path`` with ``threads`` intra-op threads and ``providers``
    (the zoo runner's configuration syntax; empty: the default list)."""
    import onnxplex
    from benchmarks.zoo.run import provider_list

    so = onnxplex.SessionOptions()
    so.intra_op_num_threads = threads
    return onnxplex.InferenceSession(str(path), so,
                                     providers=provider_list(providers) if providers else None)


def alternate(runners: Sequence[Callable[[dict], Any]], feeds: dict, runs: int) -> list[float]:
    """Median milliseconds of each ``runner(feeds)`` over ``runs`` rounds, each round starting
    one engine later than the last (the one run right after another engine's pays for the
    caches it evicted: every engine is in every position as often)."""
    times: list[list[float]] = [[] for _ in runners]
    n = len(runners)
    for i in range(runs):
        for k in range(n):
            j = (i + k) % n
            t0 = time.perf_counter()
            runners[j](feeds)
            times[j].append(time.perf_counter() - t0)
    return [statistics.median(t) * 1e3 for t in times]


def openvino_runner(path: Path, threads: int, output_names: Sequence[str]
                    ) -> tuple[Callable[[dict], Any] | None, str]:
    """OpenVINO's runner of ``path`` (benchmarks/peers.py: fp32 hint, latency, ``threads``),
    or None and why not (not installed, or the model refused)."""
    from benchmarks.peers import OpenVinoPeer, first_line, load_openvino

    if load_openvino() is None:
        return None, "not installed"
    try:
        return OpenVinoPeer(str(path), threads, list(output_names)).run, ""
    except Exception as e:  # noqa: BLE001 - reported in the table, the run goes on
        # (its front end's report lists the ops it could not convert, "-- <op> with a
        # message:", under lines of source locations)
        failed = []
        for line in str(e).splitlines():
            if line.startswith("-- ") and " with a message" in line:
                failed.append(line[3:].split(" with a message")[0])
            elif line.startswith("-- No conversion rule found for operations:"):
                failed += [op.strip() for op in line.split(":", 1)[1].split(",")]
        return None, ("ops not converted: " + ", ".join(dict.fromkeys(failed))
                      if failed else first_line(e))


def openvino_cells(r: dict[str, Any], ratios: dict[Any, list[float]], t: int, fmt: str,
                   accuracy: str, spec: str) -> str:
    """The table's OpenVINO columns of result ``r``: its time, onnxplex's ratio to it and
    ``r[accuracy]`` formatted with ``spec`` (``">18.2e"``), or why it did not run; the ratio is
    counted into ``ratios`` under (``t``, ``fmt``, vs OpenVINO)."""
    if r["ov_ms"] is None:
        return f"openvino: {r['ov_why']}"
    ratios.setdefault((t, f"{fmt}, onnxplex / openvino"), []).append(r["ours_ms"] / r["ov_ms"])
    return f"{r['ov_ms']:>12.2f} {r['ours_ms'] / r['ov_ms']:>8.2f} {r[accuracy]:{spec}}"


def print_geomeans(ratios: dict[Any, list[float]]) -> None:
    """One line per key: a thread count, or (thread count, variant)."""
    for key, rs in ratios.items():
        if rs:
            g = math.exp(sum(map(math.log, rs)) / len(rs))
            t, what = key if isinstance(key, tuple) else (key, "")
            print(f"geometric mean ratio at {t} thread(s){' ' + what if what else ''}: "
                  f"{g:.2f} over {len(rs)} models")
